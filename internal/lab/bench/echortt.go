package bench

import (
	"fmt"
	"net/netip"
	"runtime"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hostqos/hostqos/internal/testbed"
)

// benchEchoRTT is Q-Pod's Table 8: the round trip of a 64-byte UDP packet
// that host B echoes back to host A, with and without the QoS system on B,
// the difference being what intercepting B's packets costs (Q-Pod: 70.89
// and 72.12 µs, +1.23 µs, 1.73 %). Here hostqosd manages B's link (egress
// and ingress classifiers) and a rule classifies the echo's packets;
// without it B runs no hostqos at all (hostqos down in between).
func benchEchoRTT(e *env, r *Report) error {
	count := e.n(10000, 2000)
	const chunks = 4
	per := count / chunks
	tb, err := e.pair("benchecho", "a", "b")
	if err != nil {
		return err
	}
	defer tb.Close()
	a, b := tb.Node("a"), tb.Node("b")
	stop, err := spinEcho(b, netip.MustParseAddrPort("198.18.0.2:7007"))
	if err != nil {
		return err
	}
	defer stop()

	r.setup("%s", hostLine())
	r.setup("two network namespaces joined by a veth: A (198.18.0.1) sends a 64-byte UDP payload to B (198.18.0.2:7007), whose echo server sends it back; both ends busy-poll their socket (one locked thread each, raw syscalls, MSG_DONTWAIT: no wake-up from an idle CPU in the figure) and A sends each request after the previous echo, RTT from send to the echo's receipt, %d packets per alternative in %d interleaved chunks", count, chunks)
	r.setup("hostqos: the real hostqosd on B managing B's veth (egress and ingress classifiers attached, no rate), rule `--proto udp --lport 7007 --class voice` (the echoes marked EF); no hostqos: none on B (hostqos down before, so nothing of it is attached)")
	rtts := map[string][]float64{}
	const (
		altNone = "no hostqos on B"
		altHQ   = "hostqos on B (classified, marked, counted both ways)"
	)
	do := func(alt string, n int) error {
		xs, err := echoRTTs(a, netip.MustParseAddrPort("198.18.0.2:7007"), n)
		if err != nil {
			return err
		}
		rtts[alt] = append(rtts[alt], xs...)
		return nil
	}
	for i := 0; i < chunks/2; i++ {
		if err := do(altNone, per); err != nil {
			return err
		}
	}
	d, err := e.daemon(b, fmt.Sprintf("[[link]]\nname = %q\n\n[[rule]]\nname = \"echo\"\nproto = \"udp\"\nlport = 7007\nclass = \"voice\"\n", b.Iface("a")))
	if err != nil {
		return err
	}
	for i := 0; i < chunks; i++ {
		if err := do(altHQ, per); err != nil {
			_ = d.Stop()
			return err
		}
	}
	pk, err := rulePackets(d, "echo")
	if err != nil {
		_ = d.Stop()
		return err
	}
	if _, err := d.CLI("down"); err != nil {
		_ = d.Stop()
		return err
	}
	_ = d.Stop()
	for i := 0; i < chunks/2; i++ {
		if err := do(altNone, per); err != nil {
			return err
		}
	}
	r.Columns = []string{"alternative", "packets", "mean µs", "trimmed mean µs", "p50 µs", "p99 µs", "added trimmed mean µs", "added p50 µs", "seed (Q-Pod Table 8, Linux, 64 B UDP, mean of 10,000)"}
	base, base50 := trimmedMean(rtts[altNone]), percentile(rtts[altNone], 50)
	for _, alt := range []string{altNone, altHQ} {
		xs := rtts[alt]
		tm, p50 := trimmedMean(xs), percentile(xs, 50)
		add, add50, seed := "—", "—", "70.89 µs without Q-Pod"
		if alt == altHQ {
			add, add50, seed = fmt.Sprintf("%+.2f (%+.1f %%)", tm-base, 100*(tm-base)/base), fmt.Sprintf("%+.2f", p50-base50), "72.12 µs with Q-Pod: +1.23 µs (+1.73 %)"
			r.metric("added_trimmed_mean_us", tm-base)
			r.metric("added_p50_us", p50-base50)
		}
		r.row(alt, fmt.Sprint(len(xs)), f2(meanOf(xs)), f2(tm), f2(p50), f1(percentile(xs, 99)), add, add50, seed)
		r.metric("p50_us_"+key(alt), p50)
	}
	r.metric("echo_rule_packets", float64(pk))
	if pk < uint64(count) {
		r.note("WARNING: the echo rule counted %d packets for %d echoes: not every echo was classified", pk, count)
	} else {
		r.note("the echo rule counted %d packets (each echo classified, marked EF and counted on B's egress)", pk)
	}
	r.note("trimmed mean: of the round trips between the 1st and 99th percentile; on a shared 2-core machine a preempted spinning thread adds milliseconds to a few round trips, which the plain mean carries")
	r.note("Q-Pod measured at A with tcpdump (microsecond granularity) on 2004 hardware; here the time is A's own sendto → recvfrom, so the echo server's user-space hop is in both alternatives alike")
	return nil
}

// echoRTTs sends n 64-byte UDP datagrams from node to to, one at a time,
// each after the previous one's echo, and returns the round trips (µs).
func echoRTTs(node *testbed.Node, to netip.AddrPort, n int) ([]float64, error) {
	var out []float64
	err := node.Do(func() error {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("open echo client socket: %w", err)
		}
		defer unix.Close(fd)
		if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 1}); err != nil {
			return fmt.Errorf("set echo client timeout: %w", err)
		}
		if err := unix.Connect(fd, &unix.SockaddrInet4{Port: int(to.Port()), Addr: to.Addr().As4()}); err != nil {
			return fmt.Errorf("connect echo client to %s: %w", to, err)
		}
		msg, buf := make([]byte, 64), make([]byte, 2048)
		out = make([]float64, 0, n)
		for i := 0; i < n; i++ {
			t0 := time.Now()
			if _, err := unix.Write(fd, msg); err != nil {
				return fmt.Errorf("send echo request %d: %w", i, err)
			}
			for {
				_, _, err := unix.Recvfrom(fd, buf, unix.MSG_DONTWAIT)
				if err == nil {
					break
				}
				if err != unix.EAGAIN {
					return fmt.Errorf("read echo %d of %s: %w", i, to, err)
				}
				if time.Since(t0) > time.Second {
					return fmt.Errorf("read echo %d of %s: none within 1 s", i, to)
				}
			}
			out = append(out, float64(time.Since(t0).Nanoseconds())/1000)
		}
		return nil
	})
	return out, err
}

// spinEcho runs a UDP echo server at addr in node on a thread of its own
// that busy-polls its socket (MSG_DONTWAIT) until stop.
func spinEcho(node *testbed.Node, addr netip.AddrPort) (stop func(), err error) {
	var fd int
	if err := node.Do(func() error {
		var err error
		if fd, err = unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0); err != nil {
			return fmt.Errorf("open echo server socket: %w", err)
		}
		return unix.Bind(fd, &unix.SockaddrInet4{Port: int(addr.Port()), Addr: addr.Addr().As4()})
	}); err != nil {
		if fd > 0 {
			unix.Close(fd)
		}
		return nil, fmt.Errorf("echo server on %s: %w", addr, err)
	}
	var quit atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		buf := make([]byte, 2048)
		for !quit.Load() {
			n, from, err := unix.Recvfrom(fd, buf, unix.MSG_DONTWAIT)
			if err != nil {
				continue
			}
			_ = unix.Sendto(fd, buf[:n], 0, from)
		}
	}()
	return func() { quit.Store(true); <-done; unix.Close(fd) }, nil
}

// trimmedMean is the mean of xs between its 1st and 99th percentiles.
func trimmedMean(xs []float64) float64 {
	lo, hi := percentile(xs, 1), percentile(xs, 99)
	var sum float64
	n := 0
	for _, x := range xs {
		if x >= lo && x <= hi {
			sum += x
			n++
		}
	}
	if n == 0 {
		return meanOf(xs)
	}
	return sum / float64(n)
}
