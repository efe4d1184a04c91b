package bench

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/lab"
	"github.com/hostqos/hostqos/internal/lab/dpbench"
	"github.com/hostqos/hostqos/internal/testbed"
)

// benchContainers: what containers as apps cost (docs/containers.md), each
// figure beside its alternative in the same run: per packet on a
// container's path beside a host process's (BPF test-run), packet rate
// from a container through the host with no hostqos, hostqos on the
// uplink only, and the container known; discovery latency from `podman
// run` to the container's rule in force; the daemon's CPU with 200
// bare-netns containers idle and churning beside none. A part that fails
// is reported and the others still run.
func benchContainers(e *env, r *Report) error {
	return runCtrParts(e, r, ctrParts)
}

// ctrPart is one part of the containers benchmark.
type ctrPart struct {
	name string
	run  func(*env, *Report) error
}

var ctrParts = []ctrPart{
	{"per packet", ctrPerPacket},
	{"veth pps", ctrPPS},
	{"discovery", ctrDiscovery},
	{"daemon CPU", ctrCPU},
}

func runCtrParts(e *env, r *Report, parts []ctrPart) error {
	r.setup("%s", hostLine())
	r.Columns = []string{"measured", "median", "min", "max", "beside it", "target"}
	var errs []error
	for _, part := range parts {
		if err := e.ctx.Err(); err != nil {
			return errors.Join(append(errs, err)...)
		}
		if err := part.run(e, r); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", part.name, err))
			r.note("%s: not measured: %v", part.name, err)
		}
	}
	return errors.Join(errs...)
}

// spread is the median, min and max cells of xs in the given format.
func spread(xs []float64, f func(float64) string) []string {
	return []string{f(median(xs)), f(minOf(xs)), f(maxOf(xs))}
}

// ctrPerPacket: hq_veth_in and hq_tc_egress under one policy, test-run
// on a private datapath (dpbench.MeasureVeth).
func ctrPerPacket(e *env, r *Report) error {
	rounds := e.n(5, 1)
	repeat := uint32(e.n(1_000_000, 100_000))
	firsts := e.n(2000, 200)
	const flows = 10_000
	r.setup("per packet: BPF_PROG_TEST_RUN on a private datapath, flow table pre-filled to %d entries; policy of 11 rules: 9 no frame matches, then the container's (container 7, TCP to 198.19.0.0/16 → EF, an HTB class) and the host's (the same without the container); 64-byte-payload IPv4/TCP frames", flows)
	r.setup("per packet: hq_veth_in (TCX ingress of the container's host-side veth; the test-run's skb is on lo, given container 7's identity) and hq_tc_egress (the managed link; no socket, so the host's rule) on a flow hit: %d repetitions, best of 3; a first packet: %d new flows each, one run per flow, minus single runs on a hit; %d round(s)", repeat, firsts, rounds)
	r.setup("per packet: the managed link's classifier on a packet hq_veth_in classified (skb->tc_index set: hand the class on, nothing else), reached by a tail call from a program that sets tc_index, net of the same tail call into an empty program (a test-run cannot set tc_index itself)")
	var host, veth, fast, path, hostFirst, vethFirst []float64
	for i := 0; i < rounds; i++ {
		if err := e.ctx.Err(); err != nil {
			return err
		}
		res, err := dpbench.MeasureVeth(flows, repeat, firsts)
		if err != nil {
			return err
		}
		host = append(host, res.HostHitNS-res.EmptyNS)
		veth = append(veth, res.VethHitNS-res.EmptyNS)
		fast = append(fast, res.FastPathNS-res.TailEmptyNS)
		path = append(path, res.VethHitNS-res.EmptyNS+res.FastPathNS-res.TailEmptyNS)
		hostFirst = append(hostFirst, res.HostFirstNS-res.HostSingleNS)
		vethFirst = append(vethFirst, res.VethFirstNS-res.VethSingleNS)
	}
	diff := func(a, b []float64) string { return fmt.Sprintf("%+.1f ns vs the host process", median(a)-median(b)) }
	r.row(append(append([]string{"per packet, host process: hq_tc_egress on the managed link, flow hit (ns, net of empty)"}, spread(host, f1)...),
		"—", "≤ 60 ns "+mark(median(host) <= 60))...)
	r.row(append(append([]string{"per packet, container: hq_veth_in at its veth, flow hit (ns, net of empty)"}, spread(veth, f1)...),
		diff(veth, host), "≤ 60 ns "+mark(median(veth) <= 60))...)
	r.row(append(append([]string{"per packet, container: the managed link on a packet classified at the veth (ns, net of empty)"}, spread(fast, f1)...),
		"—", "—")...)
	r.row(append(append([]string{"per packet, container: whole path, veth + managed link (ns, net of empty)"}, spread(path, f1)...),
		diff(path, host), "—")...)
	r.row(append(append([]string{"per packet, host process: a flow's first packet, extra over a hit (ns)"}, spread(hostFirst, f0)...),
		"—", "—")...)
	r.row(append(append([]string{"per packet, container: a flow's first packet at its veth, extra over a hit (ns)"}, spread(vethFirst, f0)...),
		diff(vethFirst, hostFirst), "—")...)
	for k, v := range map[string][]float64{"host_hit": host, "veth_hit": veth, "link_classified": fast, "ctr_path": path, "host_first_extra": hostFirst, "veth_first_extra": vethFirst} {
		r.metric("pkt_ns_median_"+k, median(v))
	}
	return nil
}

// ctrPath is the testbed of the traffic parts: a container namespace
// (ctr, 198.18.1.1) behind the host (router: hostqosd's namespace), which
// forwards over its managed link to a receiver (rx, 198.18.2.2).
type ctrPath struct {
	tb            *testbed.Testbed
	ctr, host, rx *testbed.Node
	uplink        string // the host's interface toward rx (the managed link)
	rxIf          string // rx's interface
}

func (e *env) ctrPath(name string) (*ctrPath, error) {
	tb, err := testbed.Build(testbed.Topology{
		Name:  name,
		Nodes: []testbed.NodeSpec{{Name: "ctr"}, {Name: "host", Router: true}, {Name: "rx"}},
		Links: []testbed.LinkSpec{
			{A: "ctr", B: "host", AAddrs: []netip.Prefix{netip.MustParsePrefix("198.18.1.1/24")}, BAddrs: []netip.Prefix{netip.MustParsePrefix("198.18.1.2/24")}},
			{A: "host", B: "rx", AAddrs: []netip.Prefix{netip.MustParsePrefix("198.18.2.1/24")}, BAddrs: []netip.Prefix{netip.MustParsePrefix("198.18.2.2/24")}},
		},
	}, testbed.WithLogger(e.log))
	if err != nil {
		return nil, fmt.Errorf("build testbed %s: %w", name, err)
	}
	p := &ctrPath{tb: tb, ctr: tb.Node("ctr"), host: tb.Node("host"), rx: tb.Node("rx")}
	p.uplink, p.rxIf = p.host.Iface("rx"), p.rx.Iface("host")
	return p, nil
}

const ctrRxAddr = "198.18.2.2"

// ctrList is the daemon's `container list`.
func ctrList(d *lab.Daemon) ([]api.Container, error) {
	var cs []api.Container
	err := d.CLIJSON(&cs, "container", "list")
	return cs, err
}

// ctrPPS: UDP packets per second from a sender in the container's
// namespace through the host to rx, with the host set up three ways.
func ctrPPS(e *env, r *Report) error {
	dur := e.dur(2*time.Second, 300*time.Millisecond)
	rounds := e.n(5, 1)
	const size = 64
	p, err := e.ctrPath("benchctrpps")
	if err != nil {
		return err
	}
	defer p.tb.Close()
	sender, err := e.app("hqb-ctr-flood")
	if err != nil {
		return err
	}
	dst := fmt.Sprintf("%s:5201", ctrRxAddr)
	r.setup("veth pps: one sender thread (sendmmsg, 64-datagram batches, %d-byte UDP payload, as fast as it can) in namespace ctr → veth → host (forwards; hostqosd runs here, managing its link toward rx) → veth → rx; packets counted at rx's interface (rx_packets); %v per measurement, %d round(s), alternatives interleaved; %% of no hostqos per round, then the median", size, dur, rounds)
	r.setup("veth pps: hostqos config: the uplink managed (no rate) and a rule `container = <ctr's netns name>`, dscp AF41; \"uplink only\": ctr is not declared a container, so its packets are forwarded traffic of the host (the uplink's classifier counts them, no rule matches); \"container known\": ctr declared in [containers] netns, so hq_veth_in/hq_veth_out are on its host-side veth and the rule marks its packets there")
	var d *lab.Daemon
	stop := func() error {
		if d == nil {
			return nil
		}
		err := d.Stop()
		d = nil
		return err
	}
	defer stop()
	up := func(known bool) func() error {
		return func() error {
			cfg := ""
			if known {
				cfg = fmt.Sprintf("[containers]\nnetns = [%q]\n\n", p.ctr.NetnsName)
			}
			cfg += fmt.Sprintf("[[link]]\nname = %q\n\n[[rule]]\nname = \"ctr\"\ncontainer = %q\ndscp = \"AF41\"\n", p.uplink, p.ctr.NetnsName)
			var err error
			if d, err = e.daemon(p.host, cfg); err != nil {
				return err
			}
			cs, err := ctrList(d)
			if err != nil {
				return err
			}
			if known && (len(cs) != 1 || len(cs[0].Veths) != 1) || !known && len(cs) != 0 {
				return fmt.Errorf("the daemon found containers %+v; want ctr with its veth (%v) or none", cs, known)
			}
			return nil
		}
	}
	nop := func() error { return nil }
	alts := []ppsAlt{
		{"no hostqos", 0, nop, nop},
		{"hostqos on the uplink only (container not known: its traffic is the host's)", 0, up(false), stop},
		{"hostqos, container known (classifiers on its veth, rule marks AF41)", 34, up(true), stop},
	}
	pps := make([][]float64, len(alts))
	ratio := make([][]float64, len(alts))
	dscps := make([]map[int]int, len(alts))
	for round := 0; round < rounds; round++ {
		var base float64
		for ai, alt := range alts {
			if err := e.ctx.Err(); err != nil {
				return err
			}
			if err := alt.up(); err != nil {
				_ = alt.down()
				return fmt.Errorf("set up %q: %w", alt.name, err)
			}
			v, seen, err := ppsOnce(e, p.ctr, p.rx, p.rxIf, sender, "", dst, size, dur)
			if derr := alt.down(); err == nil && derr != nil {
				err = fmt.Errorf("tear down %q: %w", alt.name, derr)
			}
			if err != nil {
				return fmt.Errorf("%s: %w", alt.name, err)
			}
			pps[ai] = append(pps[ai], v/1e3)
			if ai == 0 {
				base = v
			}
			if base > 0 {
				ratio[ai] = append(ratio[ai], v/base)
			}
			if dscps[ai] == nil {
				dscps[ai] = map[int]int{}
			}
			for ds, n := range seen {
				dscps[ai][ds] += n
			}
		}
	}
	for ai, alt := range alts {
		beside, target := "—", "—"
		if ai > 0 {
			beside = pct(median(ratio[ai])) + " of no hostqos"
			target = "≥ 97 % " + mark(median(ratio[ai]) >= 0.97)
		}
		beside += "; DSCP at rx: " + dscpSeen(dscps[ai], alt.wantDSCP)
		r.row(append(append([]string{"veth pps, 64 B, " + alt.name + " (k pkt/s)"}, spread(pps[ai], f0)...), beside, target)...)
		r.metric(fmt.Sprintf("pps_%s", key2(ai)), median(pps[ai])*1e3)
		r.metric(fmt.Sprintf("ratio_%s", key2(ai)), median(ratio[ai]))
	}
	return nil
}

// dscpSeen is dscpSummary without a verdict mark (it is a check of the
// setup, not a target).
func dscpSeen(seen map[int]int, want int) string {
	total, good := 0, 0
	for ds, n := range seen {
		total += n
		if ds == want {
			good += n
		}
	}
	switch {
	case total == 0:
		return "none kept"
	case good == total:
		return fmt.Sprintf("all %s (%d)", dscpName(want), total)
	}
	return fmt.Sprintf("want %s, %d of %d", dscpName(want), good, total)
}
