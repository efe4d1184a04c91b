package bench

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/hostqos/hostqos/internal/datapath"
	"github.com/hostqos/hostqos/internal/lab/dpbench"
)

// benchScale: 10k managed flows and up to 10k rules — per-packet cost
// (flow hit and first packet) with BPF test-run on a private datapath (10,
// 1,000 and 10,000 rules, and 10,000 rules of random shapes), and the real
// daemon's memory (BPF maps from the kernel, RSS) with 10k rules and 10k
// flows.
func benchScale(e *env, r *Report) error {
	flows := 10_000
	sizes := []int{10, 1000, 10_000}
	rules := sizes[len(sizes)-1]
	repeat := uint32(e.n(1_000_000, 200_000))
	r.setup("%s", hostLine())
	r.setup("per packet: private datapath in this process; policy of N rules: N/10 with an executable selector (file ids no process has; the test-run packet has no socket, so they are skipped as for forwarded traffic), the rest flow rules of 8 shapes (UDP remote port; TCP remote host /32 + port; UDP remote /24; TCP local port; UDP remote port range; remote /16; UDP remote port + incoming DSCP; TCP remote IPv6 /64), none of which the frames match, and last the rule the frames match (TCP to 198.19.0.0/16), so the first packet walks every shape (a shape's hash lookup is skipped when the frame lies outside the range of its keys, here for every shape but the matching one; 'every shape looked up' = the 10,000-rule policy plus 5 rules that stretch the TCP shapes' key ranges over the frames, so that each of them is looked up and misses); 'random shapes' = the 10,000-rule policy of the datapath's reference test (TestClassifyMatchesReference: 878 shapes), frames matching its rules where they fall; %d flow entries created by test-running the classifier on %d distinct frames; hit = a further frame of an existing flow, %d repetitions, best of 5; first packet = one run per distinct frame minus one run on an existing flow; all timed by the kernel (BPF_PROG_TEST_RUN duration), like the datapath benchmark", flows, flows, repeat)
	r.setup("memory: real hostqosd in a namespace managing its veth, config with %d rules (1 exe rule for the flow app + %d UDP port rules); then the app sends one datagram from each of %d source ports; BPF map memory from the kernel (/proc/PID/fdinfo memlock of every map the daemon holds), daemon RSS from /proc/PID/status", rules, rules-1, flows)
	r.Columns = []string{"measure"}
	for _, n := range sizes {
		r.Columns = append(r.Columns, fmt.Sprintf("%d rules", n))
	}
	r.Columns = append(r.Columns, "10000 rules, random shapes", "10000 rules, every shape looked up", "target", "anchor")

	base, err := dpbench.MeasurePerPacket(10, repeat, false)
	if err != nil {
		return fmt.Errorf("measure the empty program: %w", err)
	}
	type tr struct{ hit, single, miss float64 }
	var res []tr
	var mapMem uint64
	var mapDesc string
	policies := []datapath.Policy{}
	for _, n := range sizes {
		policies = append(policies, bigPolicy(n))
	}
	policies = append(policies, dpbench.RandomPolicy(rules), probeEveryShape(bigPolicy(rules)))
	for i, pol := range policies {
		if err := e.ctx.Err(); err != nil {
			return err
		}
		s, err := dpbench.OpenScratch(datapath.DefaultFlowTable)
		if err != nil {
			return err
		}
		err = func() error {
			if err := s.DP.Apply(pol); err != nil {
				return fmt.Errorf("apply %d-rule policy: %w", len(pol.Rules), err)
			}
			miss, err := fillByTestRun(s.DP, flows)
			if err != nil {
				return err
			}
			single, err := singleRunCost(s.DP, 2000)
			if err != nil {
				return err
			}
			hit, err := hitCost(s.DP, repeat)
			if err != nil {
				return err
			}
			cnt := 0
			_ = s.DP.Flows(func(datapath.Flow) bool { cnt++; return true })
			if cnt < flows {
				return fmt.Errorf("flow table holds %d entries after %d distinct frames", cnt, flows)
			}
			res = append(res, tr{hit: hit, single: float64(single.Nanoseconds()), miss: float64(miss.Nanoseconds())})
			if i == len(sizes)-1 {
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
	row := func(name string, f func(tr) string, target, anchor string) {
		cells := []string{name}
		for _, t := range res {
			cells = append(cells, f(t))
		}
		r.row(append(cells, target, anchor)...)
	}
	big := res[len(sizes)-1]
	row("classifier per packet, flow hit, 10k flows (ns)", func(t tr) string { return f1(t.hit) }, "—", "")
	netHi := big.hit - base.EmptyNS
	row("… net of empty program (ns)", func(t tr) string { return f1(t.hit - base.EmptyNS) }, "≤ 60 ns "+mark(netHi <= 60), "Q-Pod 735 ns")
	firstHi := big.miss - big.single
	row("first packet of a flow: rule evaluation + insert, extra over a hit (ns)", func(t tr) string { return f0(t.miss - t.single) },
		"≤ 1 µs at 10k rules "+mark(firstHi <= 1000), "linear scan before: 787 ns at 10 rules, 744 ns at 1000 rules")
	memCells := []string{"private datapath BPF map memory (memlock)"}
	for range sizes[:len(sizes)-1] {
		memCells = append(memCells, "—")
	}
	r.row(append(memCells, fmtBytes(mapMem), "—", "—", "bounded", "")...)
	r.metric("hit_ns_10_rules", res[0].hit)
	r.metric("hit_ns_10k_rules", big.hit)
	r.metric("net_ns_10k_rules", netHi)
	r.metric("first_extra_ns_1k_rules", res[1].miss-res[1].single)
	r.metric("first_extra_ns_10k_rules", firstHi)
	r.metric("first_extra_ns_10k_random_rules", res[len(sizes)].miss-res[len(sizes)].single)
	r.metric("first_extra_ns_10k_rules_every_shape", res[len(sizes)+1].miss-res[len(sizes)+1].single)
	r.metric("private_map_memlock_bytes", float64(mapMem))
	if mapDesc != "" {
		r.note("private datapath maps (10k rules): %s", mapDesc)
	}

	// The daemon with 10k rules and 10k flows.
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
	daemonRow := func(name, v, target string) {
		cells := []string{name}
		for range sizes[:len(sizes)-1] {
			cells = append(cells, "—")
		}
		r.row(append(cells, v, "—", "—", target, "")...)
	}
	daemonRow("daemon start to API ready with the policy (s)", f2(startup.Seconds()), "—")
	daemonRow("managed flows in the daemon's table", fmt.Sprintf("%d of %d sent", managed, fr.Sent), "all")
	daemonRow("daemon BPF map memory (memlock), 10k rules, before → after 10k flows", fmtBytes(mem0)+" → "+fmtBytes(mem1), "bounded (preallocated)")
	daemonRow("daemon RSS, 10k rules, before → after 10k flows + one stats read", fmtBytes(rss0)+" → "+fmtBytes(rss1), "—")
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
