package bench

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/hostqos/hostqos/internal/datapath"
)

// benchScale: 10k managed flows and 1k rules — per-packet cost with BPF
// test-run on a private datapath (10 vs 1000 rules), and the real daemon's
// memory (BPF maps from the kernel, RSS) with 1k rules and 10k flows.
func benchScale(e *env, r *Report) error {
	flows := 10_000
	rules := 1000
	repeat := uint32(e.n(1_000_000, 200_000))
	r.setup("%s", hostLine())
	r.setup("per packet: private datapath in this process, policy of 10 or %d rules (%d with an executable selector, the rest UDP port rules, the frames match the last rule), %d flow entries created by test-running the classifier on %d distinct frames; hit = a further frame of an existing flow, %d repetitions, best of 5; first packet = one run per distinct frame minus one run on an existing flow; all timed by the kernel (BPF_PROG_TEST_RUN duration), like the datapath benchmark", rules, min(200, rules/5), flows, flows, repeat)
	r.setup("memory: real hostqosd in a namespace managing its veth, config with %d rules (1 exe rule for the flow app + %d UDP port rules); then the app sends one datagram from each of %d source ports; BPF map memory from the kernel (/proc/PID/fdinfo memlock of every map the daemon holds), daemon RSS from /proc/PID/status", rules, rules-1, flows)
	r.Columns = []string{"measure", "10 rules", fmt.Sprintf("%d rules", rules), "target", "anchor"}

	base, err := datapath.MeasurePerPacket(10, repeat, false)
	if err != nil {
		return fmt.Errorf("measure the empty program: %w", err)
	}
	type tr struct{ hit, single, miss float64 }
	res := map[int]tr{}
	var mapMem uint64
	var mapDesc string
	for _, n := range []int{10, rules} {
		if err := e.ctx.Err(); err != nil {
			return err
		}
		s, err := openPrivateDatapath(datapath.DefaultFlowTable)
		if err != nil {
			return err
		}
		err = func() error {
			if err := s.dp.Apply(bigPolicy(n)); err != nil {
				return fmt.Errorf("apply %d-rule policy: %w", n, err)
			}
			miss, err := fillByTestRun(s.dp, flows)
			if err != nil {
				return err
			}
			single, err := singleRunCost(s.dp, 2000)
			if err != nil {
				return err
			}
			hit, err := hitCost(s.dp, repeat)
			if err != nil {
				return err
			}
			cnt := 0
			_ = s.dp.Flows(func(datapath.Flow) bool { cnt++; return true })
			if cnt < flows {
				return fmt.Errorf("flow table holds %d entries after %d distinct frames", cnt, flows)
			}
			res[n] = tr{hit: hit, single: float64(single.Nanoseconds()), miss: float64(miss.Nanoseconds())}
			if n == rules {
				maps, err := procBPFMaps(os.Getpid())
				if err == nil {
					mapMem, mapDesc = summarizeMaps(maps)
				}
			}
			return nil
		}()
		s.Close()
		if err != nil {
			return err
		}
	}
	lo, hi := res[10], res[rules]
	r.row("classifier per packet, flow hit, 10k flows (ns)", f1(lo.hit), f1(hi.hit), "—", "")
	netHi := hi.hit - base.EmptyNS
	r.row("… net of empty program (ns)", f1(lo.hit-base.EmptyNS), f1(netHi), "≤ 60 ns "+mark(netHi <= 60), "Q-Pod 735 ns")
	r.row("first packet of a flow: rule evaluation + insert, extra over a hit (ns)", f0(lo.miss-lo.single), f0(hi.miss-hi.single), "—", "once per flow")
	r.row("private datapath BPF map memory (memlock)", "—", fmtBytes(mapMem), "bounded", "")
	r.metric("hit_ns_10_rules", lo.hit)
	r.metric("hit_ns_1k_rules", hi.hit)
	r.metric("net_ns_1k_rules", netHi)
	r.metric("miss_extra_ns_1k_rules", hi.miss-hi.single)
	r.metric("private_map_memlock_bytes", float64(mapMem))
	if mapDesc != "" {
		r.note("private datapath maps: %s", mapDesc)
	}

	// The daemon with 1k rules and 10k flows.
	tb, err := e.pair("benchscale", "app", "peer")
	if err != nil {
		return err
	}
	defer tb.Close()
	app, peer := tb.Node("app"), tb.Node("peer")
	exe, err := e.app("hqb-scale")
	if err != nil {
		return err
	}
	hole, err := bindUDP(peer, "198.18.0.2:5600", true)
	if err != nil {
		return err
	}
	defer hole.Close()
	var cfg strings.Builder
	fmt.Fprintf(&cfg, "[[link]]\nname = %q\n\n[[rule]]\nname = \"bench-app\"\nexe = %q\nclass = \"interactive\"\n", app.Iface("peer"), exe)
	for i := 0; i < rules-1; i++ {
		fmt.Fprintf(&cfg, "\n[[rule]]\nname = \"port-%d\"\nproto = \"udp\"\nrport = %d\nclass = \"bulk\"\n", i, 30000+i)
	}
	t0 := time.Now()
	d, err := e.daemon(app, cfg.String())
	if err != nil {
		return err
	}
	defer d.Stop()
	startup := time.Since(t0)
	pid := d.PID()
	rss0, err := procRSS(pid)
	if err != nil {
		return err
	}
	maps0, err := procBPFMaps(pid)
	if err != nil {
		return err
	}
	mem0, _ := summarizeMaps(maps0)
	var fr flowsResult
	if err := e.helper(app, exe, &fr, "flows", "--to", "198.18.0.2:5600", "--count", fmt.Sprint(flows), "--base-port", "20000"); err != nil {
		return err
	}
	st, err := d.Stats("flows")
	if err != nil {
		return fmt.Errorf("read flows: %w", err)
	}
	managed := 0
	for _, f := range st.Flows {
		if f.Rule == "bench-app" {
			managed++
		}
	}
	rss1, err := procRSS(pid)
	if err != nil {
		return err
	}
	maps1, err := procBPFMaps(pid)
	if err != nil {
		return err
	}
	mem1, desc1 := summarizeMaps(maps1)
	r.row("daemon start to API ready with the policy (s)", "—", f2(startup.Seconds()), "—", "")
	r.row("managed flows in the daemon's table", "—", fmt.Sprintf("%d of %d sent", managed, fr.Sent), "all", "")
	r.row("daemon BPF map memory (memlock), 1k rules, before → after 10k flows", "—", fmtBytes(mem0)+" → "+fmtBytes(mem1), "bounded (preallocated)", "")
	r.row("daemon RSS, 1k rules, before → after 10k flows + one stats read", "—", fmtBytes(rss0)+" → "+fmtBytes(rss1), "—", "")
	r.metric("daemon_startup_s", startup.Seconds())
	r.metric("managed_flows", float64(managed))
	r.metric("flows_sent", float64(fr.Sent))
	r.metric("daemon_map_memlock_bytes", float64(mem1))
	r.metric("daemon_rss_bytes", float64(rss1))
	r.note("daemon maps: %s", desc1)
	r.note("flow entries live in an LRU hash map of fixed size, allocated up front: memory does not grow with flows (invariant 5, bounded memory)")
	return nil
}

// summarizeMaps sums memlock and lists the largest maps.
func summarizeMaps(maps []bpfMap) (uint64, string) {
	var total uint64
	var big []string
	for _, m := range maps {
		total += m.Memlock
		if m.Memlock >= 1<<20 {
			big = append(big, fmt.Sprintf("type %d, %d entries × (%d+%d B): %s", m.Type, m.MaxEntries, m.KeySize, m.ValueSize, fmtBytes(m.Memlock)))
		}
	}
	return total, fmt.Sprintf("%d maps, %s in total; ≥ 1 MiB: %s", len(maps), fmtBytes(total), strings.Join(big, "; "))
}

func fmtBytes(b uint64) string {
	switch {
	case b >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(b)/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(b)/(1<<10))
	}
	return fmt.Sprintf("%d B", b)
}
