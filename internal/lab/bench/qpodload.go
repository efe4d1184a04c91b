package bench

import (
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"slices"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hostqos/hostqos/internal/datapath"
	"github.com/hostqos/hostqos/internal/lab/dpbench"
	"github.com/hostqos/hostqos/internal/testbed"
)

// benchQPodLoad is Q-Pod's load experiments (Figs. 9–14): how reading a
// flow's counters fares when the CPU is contended, reading them from
// shared memory without a lock (hostqos's memory-mapped counter array)
// against reading them with a system call (a bpf(2) map lookup of the
// same slot). Load is N processes sending 64-byte UDP at a constant
// aggregate rate, each busy-waiting between packets (50 kpps, Figs. 9 and
// 11) or sleeping (5,000 pps, Figs. 10 and 12). Measured: the time one read
// takes (Figs. 9, 10), how many reads a polling loop completes per second
// (Figs. 11, 12), how many packets accumulate between two reads of a flow
// counting 50 kpps (Fig. 13), and what a reader at the same read rate
// leaves to the load processes (Fig. 14).
func benchQPodLoad(e *env, r *Report) error {
	loads := []int{1, 2, 5, 10, 15, 30}
	if e.quick {
		loads = []int{1, 5}
	}
	win := e.dur(2*time.Second, 400*time.Millisecond)
	tb, err := e.pair("benchqpod", "a", "b")
	if err != nil {
		return err
	}
	defer tb.Close()
	a, b := tb.Node("a"), tb.Node("b")
	s, err := dpbench.OpenScratch(datapath.DefaultFlowTable)
	if err != nil {
		return err
	}
	defer s.Close()
	if err := s.DP.Apply(datapath.Policy{Rules: []datapath.Rule{{Slot: 0, Proto: 17, RPortFrom: 9000, RPortTo: 9000, DSCPIn: -1, DSCP: 10}}}); err != nil {
		return fmt.Errorf("apply the counted flow's rule: %w", err)
	}
	if err := a.Do(func() error {
		ifi, err := net.InterfaceByName(a.Iface("b"))
		if err != nil {
			return err
		}
		return s.DP.AttachLink(ifi.Index)
	}); err != nil {
		return fmt.Errorf("attach the datapath to %s in a: %w", a.Iface("b"), err)
	}
	// The sinks: bound, never read (their drops cost nothing to count).
	for _, port := range []string{"9000", "9001"} {
		h, err := bindUDP(b, "198.18.0.2:"+port, false)
		if err != nil {
			return err
		}
		defer h.Close()
	}
	exe, err := e.app("hqb-cbr")
	if err != nil {
		return err
	}
	// The counted flow: a few packets create its entry and counter slot.
	if err := e.helper(a, exe, &cbrResult{}, "cbr", "--to", "198.18.0.2:9000", "--size", "22", "--pps", "1000", "--duration", "50ms"); err != nil {
		return err
	}
	ref, err := countedFlow(s.DP)
	if err != nil {
		return err
	}
	reads := map[string]func() uint64{
		altLockFree: func() uint64 { c, _ := s.DP.FlowCounters(ref); return c.Packets },
		altSyscall:  func() uint64 { c, _, _ := s.DP.FlowCountersSyscall(ref); return c.Packets },
	}
	if _, _, err := s.DP.FlowCountersSyscall(ref); err != nil {
		return err
	}

	r.setup("%s", hostLine())
	r.setup("two namespaces joined by a veth; a private hostqos datapath attached to A's side (egress and ingress classifiers) and one flow (UDP to B:9000) in its table; the reader is a goroutine of the bench process locked to its thread, reading that flow's packet counter in a loop: lock-free = datapath.FlowCounters (the memory-mapped counter array, what hostqosd's sampler reads), system call = the same slot by a bpf(2) map lookup")
	r.setup("load: N processes each sending 64-byte frames (22-byte UDP payload) from A to B, constant aggregate rate split evenly, each packet one gap after the previous (no catch-up): busy-waiting at 50 kpps aggregate (Figs. 9, 11), sleeping at 5,000 pps aggregate (Figs. 10, 12); windows of %v per alternative, lock-free and system call alternating within one load run", win)
	r.Columns = []string{"experiment", "load processes", "lock-free", "system call", "system call / lock-free", "seed (Q-Pod, lock-free vs synchronized shared memory)"}

	ratio := func(x, y float64) string {
		if y == 0 {
			return "—"
		}
		return fmt.Sprintf("%.1f×", x/y)
	}
	for _, mode := range []struct {
		name string
		pps  float64
		spin bool
		seed [2]string
	}{
		{"busy-wait load, 50 kpps", 50000, true, [2]string{"Fig. 9: lock-free ≈ 0.4–1 µs, nearly flat from 5 processes; synchronized rises steeply with N", "Fig. 11: lock-free ≥ 2× the reads at 1 process, ≈ 4× at 30"}},
		{"sleeping load, 5,000 pps", 5000, false, [2]string{"Fig. 10: lock-free flat up to 10 processes, ≈ 10× below synchronized; both jump at 15 (scheduling collapse, synchronized ≈ 75 µs)", "Fig. 12: lock-free 2–5× the reads"}},
	} {
		for _, n := range loads {
			if err := e.ctx.Err(); err != nil {
				return err
			}
			stop, err := startLoad(e, a, exe, n, mode.pps, mode.spin, 4*win+time.Second)
			if err != nil {
				return err
			}
			time.Sleep(300 * time.Millisecond)
			per, rate := map[string]float64{}, map[string]float64{}
			for _, alt := range []string{altLockFree, altSyscall} {
				per[alt] = timedReads(reads[alt], win)
				rate[alt] = loopReads(reads[alt], win)
			}
			if err := stop(); err != nil {
				return err
			}
			tag := fmt.Sprintf("%s_%d", map[bool]string{true: "spin", false: "sleep"}[mode.spin], n)
			r.row("read time µs, "+mode.name, fmt.Sprint(n), f2(per[altLockFree]), f2(per[altSyscall]), ratio(per[altSyscall], per[altLockFree]), mode.seed[0])
			r.row("reads per second, "+mode.name, fmt.Sprint(n), f0(rate[altLockFree]), f0(rate[altSyscall]), ratio(rate[altLockFree], rate[altSyscall])+" (lock-free / system call)", mode.seed[1])
			r.metric("read_us_lockfree_"+tag, per[altLockFree])
			r.metric("read_us_syscall_"+tag, per[altSyscall])
			r.metric("reads_per_s_lockfree_"+tag, rate[altLockFree])
			r.metric("reads_per_s_syscall_"+tag, rate[altSyscall])
		}
	}

	// Fig. 13: the counted flow at 50 kpps, 9 load processes (10 with the
	// counted flow's sender, as in Q-Pod's load 10).
	acc := map[string][]float64{}
	for _, alt := range []string{altLockFree, altSyscall} {
		stopLoad, err := startLoad(e, a, exe, 9, 50000, true, win+time.Second)
		if err != nil {
			return err
		}
		stopEvents, err := startLoad(e, a, exe, 1, 50000, true, win+time.Second, "198.18.0.2:9000")
		if err != nil {
			_ = stopLoad()
			return err
		}
		time.Sleep(300 * time.Millisecond)
		// The events' sender has a port of its own: a flow of its own.
		ev, err := countedFlow(s.DP)
		if err != nil {
			_, _ = stopEvents(), stopLoad()
			return err
		}
		read := func() uint64 { c, _ := s.DP.FlowCounters(ev); return c.Packets }
		if alt == altSyscall {
			read = func() uint64 { c, _, _ := s.DP.FlowCountersSyscall(ev); return c.Packets }
		}
		acc[alt] = accumulated(read, win)
		if err := stopEvents(); err != nil {
			_ = stopLoad()
			return err
		}
		if err := stopLoad(); err != nil {
			return err
		}
	}
	share := func(xs []float64, pred func(float64) bool) float64 {
		if len(xs) == 0 {
			return 0
		}
		k := 0
		for _, x := range xs {
			if pred(x) {
				k++
			}
		}
		return 100 * float64(k) / float64(len(xs))
	}
	le2 := func(x float64) bool { return x <= 2 }
	ge4 := func(x float64) bool { return x >= 4 }
	ge10 := func(x float64) bool { return x >= 10 }
	r.row("packets accumulated between two reads that saw new ones: share ≤ 2", "10", f1(share(acc[altLockFree], le2))+" %", f1(share(acc[altSyscall], le2))+" %", "—", "Fig. 13: lock-free ≤ 2 in 90 % of reads")
	r.row("… share ≥ 4", "10", f1(share(acc[altLockFree], ge4))+" %", f1(share(acc[altSyscall], ge4))+" %", "—", "Fig. 13: synchronized ≥ 4 in 80 %")
	r.row("… share ≥ 10", "10", f1(share(acc[altLockFree], ge10))+" %", f1(share(acc[altSyscall], ge10))+" %", "—", "Fig. 13: synchronized ≥ 10 in 10 %")
	r.row("… p99", "10", f0(percentile(acc[altLockFree], 99)), f0(percentile(acc[altSyscall], 99)), "—", "")
	for _, alt := range []string{altLockFree, altSyscall} {
		r.metric("accumulated_le2_pct_"+key(alt), share(acc[alt], le2))
		r.metric("accumulated_p99_"+key(alt), percentile(acc[alt], 99))
	}

	// Fig. 14: what a reader leaves to the load at one read rate: the
	// system call reader at full speed, the lock-free reader paced to
	// the same rate, and no reader; load 75 kpps aggregate busy-waiting.
	for _, n := range loads {
		got := map[string]float64{}
		var target float64
		// Each alternative twice, in mirrored order, so that a drift of
		// the machine's other load weighs on all alike.
		for _, alt := range []string{altNone, altSyscall, altLockFree, altLockFree, altSyscall, altNone} {
			stop, err := startLoad(e, a, exe, n, 75000, true, win+time.Second)
			if err != nil {
				return err
			}
			time.Sleep(300 * time.Millisecond)
			before, err := netdev(b, b.Iface("a"))
			if err != nil {
				_ = stop()
				return err
			}
			switch alt {
			case altSyscall:
				target = loopReads(reads[alt], win) // the second run paces the lock-free one after it no more
			case altLockFree:
				pacedReads(reads[alt], target, win)
			default:
				time.Sleep(win)
			}
			after, err := netdev(b, b.Iface("a"))
			if err != nil {
				_ = stop()
				return err
			}
			if err := stop(); err != nil {
				return err
			}
			got[alt] += float64(after.RxPackets-before.RxPackets) / win.Seconds() / 2
		}
		seed := ""
		if n == 1 {
			seed = "Fig. 14: the load achieves 75 % more packets with the lock-free reader at 1 process"
		} else if n == loads[len(loads)-1] {
			seed = "Fig. 14: ≈ 3,000 pps more at 30 processes"
		}
		r.row(fmt.Sprintf("load's packets/s, reader at %.0f reads/s (none: %.0f)", target, got[altNone]), fmt.Sprint(n), f0(got[altLockFree]), f0(got[altSyscall]),
			fmt.Sprintf("%+.0f pps (%+.1f %%) lock-free", got[altLockFree]-got[altSyscall], 100*(got[altLockFree]-got[altSyscall])/max(got[altSyscall], 1)), seed)
		r.metric(fmt.Sprintf("load_pps_lockfree_%d", n), got[altLockFree])
		r.metric(fmt.Sprintf("load_pps_syscall_%d", n), got[altSyscall])
		r.metric(fmt.Sprintf("load_pps_none_%d", n), got[altNone])
	}
	r.note("read time: each read timed alone with the monotonic clock (two clock reads, about 40 ns, are in every figure alike); a read preempted in the middle carries the time it waited, which is what Figs. 9–10 measure")
	r.note("a bpf(2) lookup copies the slot under RCU, without a lock: the system call's cost is the mode switch and the copy, as Q-Pod's synchronized reads paid a system call each")
	r.note("the machine has 2 cores (Q-Pod: one CPU), so up to two runnable processes do not contend at all; Q-Pod's generators shared one CPU with the reader")
	return nil
}

const (
	altLockFree = "lock-free (mmap)"
	altSyscall  = "system call"
	altNone     = "no reader"
)

// countedFlow is the reference of the latest flow to B:9000 in d's table.
func countedFlow(d *datapath.Datapath) (datapath.FlowRef, error) {
	var ref datapath.FlowRef
	var last uint64
	found := false
	err := d.Flows(func(f datapath.Flow) bool {
		if f.Key.Proto == 17 && f.Key.Remote.Port() == 9000 && (!found || f.LastSeenNS > last) {
			ref, last, found = f.Ref, f.LastSeenNS, true
		}
		return true
	})
	if err != nil {
		return ref, fmt.Errorf("read flows: %w", err)
	}
	if !found || ref.Tag == 0 {
		return ref, fmt.Errorf("find the flow to B:9000 in the datapath: not there (found %v)", found)
	}
	return ref, nil
}

// startLoad starts n cbr helpers in node sending 64-byte frames at pps
// aggregate for dur, to B:9001 (or to). stop waits for them.
func startLoad(e *env, node *testbed.Node, exe string, n int, pps float64, spin bool, dur time.Duration, to ...string) (stop func() error, err error) {
	dst := "198.18.0.2:9001"
	if len(to) > 0 {
		dst = to[0]
	}
	var waits []func(any) error
	for i := 0; i < n; i++ {
		wait, err := e.startHelper(node, exe, "cbr", "--to", dst, "--size", "22", "--pps", fmt.Sprint(pps/float64(n)),
			"--duration", dur.String(), fmt.Sprintf("--spin=%v", spin))
		if err != nil {
			for _, w := range waits {
				_ = w(&cbrResult{})
			}
			return nil, err
		}
		waits = append(waits, wait)
	}
	return func() error {
		var first error
		for _, w := range waits {
			if err := w(&cbrResult{}); err != nil && first == nil {
				first = err
			}
		}
		return first
	}, nil
}

// timedReads is the mean time of one read (µs), each timed alone, over win.
func timedReads(read func() uint64, win time.Duration) float64 {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var sum time.Duration
	n := 0
	for end := time.Now().Add(win); ; n++ {
		t0 := time.Now()
		if t0.After(end) {
			break
		}
		read()
		sum += time.Since(t0)
	}
	return float64(sum.Nanoseconds()) / float64(max(n, 1)) / 1000
}

// loopReads is how many reads per second a polling loop completes in win
// (the clock is read once per 64 reads).
func loopReads(read func() uint64, win time.Duration) float64 {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	start := time.Now()
	end := start.Add(win)
	n := 0
	for time.Now().Before(end) {
		for range 64 {
			read()
		}
		n += 64
	}
	return float64(n) / time.Since(start).Seconds()
}

// pacedReads reads at rate per second for win, in 1 ms rounds that sleep
// out the rest of the round (Q-Pod's reader made to sleep while keeping
// its rate).
func pacedReads(read func() uint64, rate float64, win time.Duration) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	per := int(rate / 1000)
	start := time.Now()
	for round := time.Duration(1); round*time.Millisecond <= win; round++ {
		for range per {
			read()
		}
		if d := time.Until(start.Add(round * time.Millisecond)); d > 0 {
			time.Sleep(d)
		}
	}
}

// accumulated polls the counter for win and returns, for every read that
// saw new packets, how many had accumulated since the previous read.
func accumulated(read func() uint64, win time.Duration) []float64 {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var out []float64
	last := read()
	for end := time.Now().Add(win); time.Now().Before(end); {
		for range 16 {
			if v := read(); v != last {
				out = append(out, float64(v-last))
				last = v
			}
		}
	}
	slices.Sort(out)
	return out
}

// cbrResult is what the cbr helper wrote.
type cbrResult struct {
	Sent      uint64  `json:"sent"`
	Errors    uint64  `json:"errors"`
	DurationS float64 `json:"duration_s"`
}

// helperCBR sends size-byte UDP datagrams to ap at pps for dur, one at a
// time, each one gap after the previous was sent (a generator that is
// descheduled sends late and does not catch up, as Q-Pod's did): spinning
// on the clock between datagrams, or sleeping.
func helperCBR(ap netip.AddrPort, size int, dur time.Duration, pps float64, spin bool) (*cbrResult, error) {
	runtime.LockOSThread()
	if !(pps > 0) {
		return nil, fmt.Errorf("cbr: --pps %v: want a positive rate", pps)
	}
	fam, sa := sockaddr(ap)
	fd, err := unix.Socket(fam, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open UDP socket: %w", err)
	}
	defer unix.Close(fd)
	if err := unix.Connect(fd, sa); err != nil {
		return nil, fmt.Errorf("connect UDP socket to %v: %w", ap, err)
	}
	gap := time.Duration(float64(time.Second) / pps)
	buf := make([]byte, size)
	var res cbrResult
	start := time.Now()
	end, next := start.Add(dur), start
	for {
		now := time.Now()
		if !now.Before(end) {
			break
		}
		if now.Before(next) {
			if !spin {
				time.Sleep(next.Sub(now))
			}
			continue
		}
		if _, err := unix.Write(fd, buf); err != nil {
			res.Errors++
		} else {
			res.Sent++
		}
		next = now.Add(gap)
	}
	res.DurationS = time.Since(start).Seconds()
	return &res, nil
}
