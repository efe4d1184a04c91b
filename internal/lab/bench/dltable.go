package bench

import (
	"fmt"
	"time"
)

// dlRetransFloor is the retransmitted segments a limited download may
// have whatever its share of the segments sent (see the target).
const dlRetransFloor = 3

// benchDownload reproduces Crossbow's Table 1 (TCP download goodput vs
// the configured receive-side limit) on this kernel: at 1, 10, 100 and
// 1000 Mbit/s, over a 0 ms and a 40 ms round-trip path, IFB + HTB (what
// Linux users do today; the tc police action is used too where the kernel
// has it) against hostqos's maxbw_in, in one run: goodput over the limit,
// the sender's retransmissions (its TCP_INFO) and the queueing delay each
// adds (a concurrent ping's round trip minus the idle path's).
func benchDownload(e *env, r *Report) error {
	rates := []float64{1e6, 10e6, 100e6, 1e9}
	rtts := []time.Duration{0, 40 * time.Millisecond}
	warm, measure := e.dur(3*time.Second, time.Second), e.dur(5*time.Second, 2*time.Second)
	plain, err := e.app("hqb-dl-plain")
	if err != nil {
		return err
	}
	limited, err := e.app("hqb-dl")
	if err != nil {
		return err
	}
	r.setup("%s", hostLine())
	r.setup("path: client — router — server namespaces (veths, 1500 MTU); the round trip is the testbed's delay line in the router (a TUN read and written by a goroutine; 0 ms: no delay line, the router only forwards); the real hostqosd on the client manages the client's link (TCX ingress and egress)")
	r.setup("download: a copy of the helper executable on the client opens one TCP connection to an in-process bulk sender on the server and reads for %v; goodput = TCP payload the app read in the last %v (the first %v are slow start and the limiter settling) / the configured limit", warm+measure, measure, warm)
	r.setup("retransmissions: the sender's own TCP_INFO (tcpi_total_retrans / tcpi_data_segs_out); added delay: round trip of a 50 pkt/s UDP echo from the client to the server during the download minus the idle path's (p50 and p99)")
	r.setup("IFB + HTB: `tc qdisc add dev IF handle ffff: ingress`, a u32 match-all filter with `action mirred egress redirect dev ifb`, and on the IFB an HTB root class at rate = ceil = the limit (its default leaf queue); the downloading app is a copy no hostqos rule matches")
	r.setup("hostqos: rule `dl --exe <the other copy> --maxbw-in R` (changed with `hostqos rule set` per rate): the receive window of the app's ACKs, and where two segments per round trip exceed the limit the ACKs paced by the rule's HTB ACK leaf on the client's egress (see docs/receive.md)")
	r.Columns = []string{"RTT", "limit", "alternative", "goodput Mbit/s", "goodput / limit", "retrans", "ping added p50 / p99 ms", "target (hostqos)"}

	havePolice := false
	for _, rtt := range rtts {
		if err := e.ctx.Err(); err != nil {
			return err
		}
		p, err := e.path(fmt.Sprintf("benchdl%d", rtt.Milliseconds()), rtt, 0)
		if err != nil {
			return err
		}
		err = downloadTable(e, r, p, plain, limited, rates, warm, measure, &havePolice)
		p.Close()
		if err != nil {
			return fmt.Errorf("%v round trip: %w", rtt, err)
		}
	}
	// Crossbow's Table 1 beside ours: 10 GbE LAN, 3 clients × 10 TCP streams.
	for i, gbps := range []float64{1, 2, 3, 4, 5} {
		tc := []float64{0.4, 0.7, 1.13, 1.26, 1.24}[i]
		cb := []float64{0.95, 1.87, 2.86, 3.81, 4.40}[i]
		lim := fmt.Sprintf("%g Gbit/s", gbps)
		r.row("LAN (seed)", lim, "Crossbow: Fedora 2.6 tc ingress police", f2(tc), fmt.Sprintf("%.5f", tc/(gbps*1e3)), "—", "—", "")
		r.row("LAN (seed)", lim, "Crossbow: hardware flow (receive ring)", f0(cb*1e3), f3(cb/gbps), "—", "—", "")
	}
	r.note("goodput counts TCP payload (what the app reads); HTB counts whole frames, so an IFB + HTB at R can give TCP at most R × 1448/1514 = 0.956 R of payload, while hostqos's maxbw_in is defined on payload (docs/receive.md)")
	if !havePolice {
		r.note("no tc police row: this kernel has no police action (act_police) — `tc filter … u32 match ip protocol 6 0xff police rate 1mbit burst 10k drop` fails as shown in the setup; Crossbow's Table 1 shows what ingress policing does to TCP (0.4–1.26 Mbit/s of 1–5 Gbit/s). Where a kernel has it, this benchmark adds a `tc police` row at each limit")
	}
	r.note("hostqos at 0 ms: the receive window cannot go below two full segments, and on a veth round trip of ≈ 60 µs two segments per round trip are already ≈ 300–380 Mbit/s; below that the flow's pure ACKs go to the rule's HTB ACK leaf (rate = limit × 66 B per 2 × 1448 B, the window gain correcting what one ACK opens), so the sender sends as fast as its ACKs come back. The ping is not queued behind them (only the flow's ACKs are). Where two segments fit the limit (40 ms: ≥ 0.6 Mbit/s) the window alone holds it")
	r.note("seed (Crossbow Table 1): 10 GbE, 3 clients × 10 TCP streams into one system; Fedora 2.6 tc police collapsed TCP (drops); Crossbow's hardware flows reached 0.88–0.95 of the limit by holding packets in the NIC's receive ring (TCP sees a longer round trip instead of losses)")
	return nil
}

// downloadTable measures one round trip's rows.
func downloadTable(e *env, r *Report, p *dlPath, plain, limited string, rates []float64, warm, measure time.Duration, havePolice *bool) error {
	rtt := fmt.Sprintf("%d ms", p.rtt.Milliseconds())
	d, err := e.dlDaemon(p, fmt.Sprintf("[[rule]]\nname = \"dl\"\nexe = %q\nmaxbw_in = \"1gbit\"\n", limited))
	if err != nil {
		return err
	}
	defer d.Stop()
	police := policeProbe(p.client, p.clientIf)
	if p.rtt == 0 {
		if police == "" {
			r.setup("tc police: available on this kernel; `u32 match ip protocol 6 0xff police rate R burst max(10 KB, 20 ms) drop` at ingress")
		} else {
			r.setup("tc police: not on this kernel — `tc filter add dev IF parent ffff: … u32 match ip protocol 6 0xff police rate 1mbit burst 10k drop` answers %q", police)
		}
	}
	*havePolice = police == ""
	idleRun := e.pingPath(p, 2*time.Second)
	idle, err := idleRun()
	if err != nil {
		return err
	}
	r.setup("%s path: idle ping p50 %.2f ms, p99 %.2f ms", rtt, idle.RTT.P50, idle.RTT.P99)
	added := func(run *dlRun) (p50, p99 float64, s string) {
		if run.ping == nil {
			return 0, 0, "—"
		}
		p50, p99 = run.ping.RTT.P50-idle.RTT.P50, run.ping.RTT.P99-idle.RTT.P99
		s = fmt.Sprintf("%+.2f / %+.2f", p50, p99)
		if run.ping.Lost > 0 {
			s += fmt.Sprintf(" (%d lost)", run.ping.Lost)
		}
		return p50, p99, s
	}
	rtxOf := func(run *dlRun) float64 { return float64(run.retrans) / float64(max(run.segs, 1)) }

	base, err := e.download(p, plain, 1, warm, measure, true)
	if err != nil {
		return fmt.Errorf("download without a limit: %w", err)
	}
	_, _, bs := added(base)
	r.row(rtt, "none", "no limit (what the path carries)", f1(base.TotalBps/1e6), "—", pct(rtxOf(base)), bs, "")
	r.metric(fmt.Sprintf("capacity_%dms_bps", p.rtt.Milliseconds()), base.TotalBps)

	type alt struct {
		name string
		app  string
		up   func(rate float64) (func() error, error)
	}
	alts := []alt{{"IFB + HTB", plain, func(rate float64) (func() error, error) { return ifbHTB(p.client, p.clientIf, rate) }}}
	if police == "" {
		alts = append(alts, alt{"tc police (ingress)", plain, func(rate float64) (func() error, error) { return tcPolice(p.client, p.clientIf, rate) }})
	}
	alts = append(alts, alt{"hostqos --maxbw-in", limited, func(rate float64) (func() error, error) {
		if _, err := d.CLI("rule", "set", "dl", "--maxbw-in", fmt.Sprintf("%gmbit", rate/1e6)); err != nil {
			return nil, err
		}
		return func() error { return nil }, nil
	}})
	for _, rate := range rates {
		for _, a := range alts {
			if err := e.ctx.Err(); err != nil {
				return err
			}
			down, err := a.up(rate)
			if err != nil {
				return fmt.Errorf("set up %s at %g Mbit/s: %w", a.name, rate/1e6, err)
			}
			run, err := e.download(p, a.app, 1, warm, measure, true)
			if derr := down(); err == nil && derr != nil {
				err = derr
			}
			if err != nil {
				return fmt.Errorf("%s at %g Mbit/s: %w", a.name, rate/1e6, err)
			}
			ratio, rtx := run.TotalBps/rate, rtxOf(run)
			p50, _, ds := added(run)
			target := ""
			if a.app == limited {
				// A floor for small downloads: at 1 Mbit/s a run sends a
				// few hundred segments, and the one or two that slow start
				// loses when the limit first bites would be 0.5 % alone.
				rtxOK := rtx < 0.005 || run.retrans <= dlRetransFloor
				ok := ratio >= 0.97 && ratio <= 1.01 && rtxOK && p50 <= 5
				target = fmt.Sprintf("0.97–1.01, < 0.5 %% or ≤ %d segments, ≤ 5 ms %s", dlRetransFloor, mark(ok))
				if !ok && base.TotalBps < 1.01*rate {
					target = fmt.Sprintf("n/a: the path carries only %.0f Mbit/s", base.TotalBps/1e6)
				}
			}
			r.row(rtt, fmt.Sprintf("%g Mbit/s", rate/1e6), a.name, f1(run.TotalBps/1e6), f3(ratio),
				fmt.Sprintf("%s (%d of %d)", pct(rtx), run.retrans, run.segs), ds, target)
			k := fmt.Sprintf("%s_%dms_%gmbit", key(a.name), p.rtt.Milliseconds(), rate/1e6)
			r.metric("ratio_"+k, ratio)
			r.metric("retrans_"+k, rtx)
			r.metric("added_p50_ms_"+k, p50)
		}
	}
	return nil
}
