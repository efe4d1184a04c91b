package demo

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/netip"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/hostqos/hostqos/internal/plot"
	"github.com/hostqos/hostqos/internal/testbed"
	"github.com/hostqos/hostqos/internal/traffic"
)

// The Q-Pod seed's two classes of service chosen by destination (§5.3,
// Figure 27): an MCU sends real-time video to two clients; Q-Pod on the MCU
// marks the stream to one client AF11 (gold) and the other AF12 (silver),
// by destination address. The routers run the AF PHB with WRED (AF11
// dropped last, then AF12, then AF13); cross traffic: bursty Pareto marked
// AF13 on the clients' link, plus 30 Mbit/s of UDP CBR in each of AF11 and
// AF12. Gold is immune to the bursts; silver loses some video when they
// come.
//
// Here at 1/10 scale: a 15.5 Mbit/s DiffServ bottleneck (our router gives
// AF11 its own queue and AF12/AF13 a shorter shared one: see
// testbed.diffservFilters); two video streams of ≈ 0.5 Mbit/s (25 fps,
// IBBPBBPBBPBB) from one app on the client, gold to 198.18.2.2 and silver to
// 198.18.2.3 (two addresses of the server); hostqos rules by remote
// address mark them. Cross traffic from the cross host: Pareto k = 4 Mbit/s,
// α = 1.05, capped at the link rate, 2-s intervals, AF13; 3 Mbit/s CBR in
// each of AF11 and AF12. A second run without hostqos (both streams
// unmarked) shows what the marks bought.
const (
	cosBottleneck = 15_500_000
	cosK          = 4_000_000
	cosCBR        = 3_000_000
)

var (
	cosGold   = netip.MustParseAddr("198.18.2.2")
	cosSilver = netip.MustParseAddr("198.18.2.3")
)

// CoSSetup is what the qpod-cos scenario ran.
type CoSSetup struct {
	Scale         string    `json:"scale"`
	BottleneckBps uint64    `json:"bottleneck_bps"`
	RouterQueueMS int       `json:"router_fifo_ms"`
	Gold          string    `json:"gold_destination"`
	Silver        string    `json:"silver_destination"`
	VideoBps      float64   `json:"video_nominal_bps"`
	Cross         CrossSpec `json:"cross_af13"`
	CBRBps        uint64    `json:"cbr_bps_in_af11_and_af12"`
	DurationS     float64   `json:"duration_s"`
	Commands      []string  `json:"hostqos_commands"`
}

// CoSStream is one video stream of a run.
type CoSStream struct {
	Row    ClassRow `json:"row"`
	Series []Bin    `json:"series"`
	// BurstRatio is received/sent over the 1-s bins inside at-cap cross
	// intervals (-1: none); WorstRatio the lowest bin.
	BurstRatio float64 `json:"received_over_sent_in_bursts"`
	WorstRatio float64 `json:"worst_bin_received_over_sent"`
	MeanRatio  float64 `json:"received_over_sent"`
}

// CoSRun is one run (with or without hostqos).
type CoSRun struct {
	Name       string                 `json:"name"`
	HostQoS    bool                   `json:"hostqos"`
	Gold       CoSStream              `json:"gold"`
	Silver     CoSStream              `json:"silver"`
	CrossTrace []traffic.IntervalRate `json:"cross_trace"`
}

// CoSResult is the qpod-cos scenario's result.
type CoSResult struct {
	Setup     CoSSetup `json:"setup"`
	Unmanaged CoSRun   `json:"unmanaged"`
	Managed   CoSRun   `json:"managed"`
}

func cosTopology() testbed.Topology {
	t := starTopology("democos", cosBottleneck, true)
	t.Links[1].BAddrs = []netip.Prefix{mp(cosGold.String() + "/24"), mp(cosSilver.String() + "/24")}
	return t
}

func (r *runner) runCoS() (*CoSResult, error) {
	o := r.opts
	lead := time.Second
	total := lead + o.Duration + 500*time.Millisecond
	cross := traffic.ParetoConfig{K: cosK, Alpha: 1.05, Cap: cosBottleneck, Interval: voipInterval, Size: crossPayload, DSCP: 14} // AF13
	cross.Seed = pickSeed(cross, int(math.Ceil(total.Seconds()/voipInterval.Seconds())))
	setup := CoSSetup{Scale: "1/10 of the seed (155 → 15.5 Mbit/s, 30 → 3 Mbit/s CBR per class, Pareto k 40 → 4 Mbit/s)",
		BottleneckBps: cosBottleneck, RouterQueueMS: testbed.QueueTime, Gold: cosGold.String(), Silver: cosSilver.String(),
		VideoBps: 29000 * 8 * 25 / 12.0, CBRBps: cosCBR, DurationS: o.Duration.Seconds(),
		Cross: CrossSpec{KBps: cross.K, Alpha: cross.Alpha, CapBps: cross.Cap, IntervalS: voipInterval.Seconds(), Seed: cross.Seed,
			SizeBytes: crossPayload, MeanBps: math.Round(traffic.CappedParetoMean(float64(cross.K), cross.Alpha, float64(cross.Cap)))}}
	r.progress("scenario qpod-cos (seed §5.3, Fig. 27) at %s", setup.Scale)
	r.progress("  one app on the client sends two video streams (≈%s each): gold to %s, silver to %s, through a %s DiffServ bottleneck",
		rate(setup.VideoBps), cosGold, cosSilver, rate(cosBottleneck))
	r.progress("  cross traffic: Pareto k=%s α=%g capped at %s marked AF13 (mean %s), %s CBR in AF11 and in AF12",
		rate(cosK), cross.Alpha, rate(cosBottleneck), rate(setup.Cross.MeanBps), rate(cosCBR))
	tb, err := r.build(cosTopology())
	if err != nil {
		return nil, err
	}
	app, err := r.copyApp("mcu-app")
	if err != nil {
		return nil, err
	}
	res := &CoSResult{}
	r.progress("[1/2] without hostqos (both streams unmarked): running %s ...", secs(total))
	if res.Unmanaged, err = r.cosRun(tb, app, cross, lead, total, "without hostqos"); err != nil {
		return nil, err
	}
	r.progress("[2/2] hostqos on the client: gold → AF11, silver → AF12 by destination ...")
	d, err := r.startDaemon(tb.Node("client"))
	if err != nil {
		return nil, err
	}
	cmds := [][]string{
		{"link", "set", tb.Node("client").Iface("router")},
		{"rule", "add", "gold", "--remote", cosGold.String(), "--dscp", "AF11"},
		{"rule", "add", "silver", "--remote", cosSilver.String(), "--dscp", "AF12"},
	}
	for _, c := range cmds {
		if err := r.cli(d, c...); err != nil {
			return nil, err
		}
		setup.Commands = append(setup.Commands, "hostqos "+strings.Join(c, " "))
	}
	if res.Managed, err = r.cosRun(tb, app, cross, lead, total, "hostqos: gold AF11, silver AF12"); err != nil {
		return nil, err
	}
	res.Setup = setup
	return res, nil
}

func (r *runner) cosRun(tb *testbed.Testbed, exe string, cross traffic.ParetoConfig, lead, total time.Duration, name string) (CoSRun, error) {
	o := r.opts
	ctx, cancel := context.WithCancel(r.ctx)
	defer cancel()
	server := tb.Node("server")
	recs := make([]*recorder, 3) // gold, silver, cross (all cross flows)
	if err := server.Do(func() error {
		for i, a := range []netip.Addr{cosGold, cosSilver, cosGold} {
			rec, err := listenRecorder(hp(a, 0))
			if err != nil {
				return err
			}
			recs[i] = rec
		}
		return nil
	}); err != nil {
		for _, rec := range recs {
			if rec != nil {
				rec.conn.Close()
			}
		}
		return CoSRun{}, fmt.Errorf("open receivers in the server: %w", err)
	}
	t0 := time.Now()
	deadline := t0.Add(total + 4*time.Second)
	var recDone []<-chan error
	for _, rec := range recs {
		rec := rec
		recDone = append(recDone, goSafe(func() error { return rec.run(ctx, 0, deadline) }))
	}
	crossTo := recs[2].addr().String()
	var pres *traffic.ParetoResult
	pcfg := cross
	pcfg.To, pcfg.Duration, pcfg.Flow = crossTo, total, 13
	crossDone := []<-chan error{goSafe(func() error {
		return tb.Node("cross").Do(func() (err error) { pres, err = traffic.SendPareto(ctx, pcfg); return err })
	})}
	for _, c := range []struct {
		dscp int
		flow uint32
	}{{10, 11}, {12, 12}} { // AF11, AF12
		cfg := traffic.CBRConfig{To: crossTo, Size: crossPayload, BitRate: cosCBR, Duration: total, DSCP: c.dscp, Flow: c.flow}
		crossDone = append(crossDone, goSafe(func() error {
			return tb.Node("cross").Do(func() error { _, err := traffic.SendCBR(ctx, cfg); return err })
		}))
	}
	if err := r.sleep(lead); err != nil {
		return CoSRun{}, err
	}
	var apps []*app
	for i, rec := range recs[:2] {
		a, err := r.startApp(tb.Node("client"), "mcu-app", exe, "tool", "video", "--to", rec.addr().String(), "--fps", "25",
			"--i-size", "10000", "--p-size", "3000", "--b-size", "1250", "--duration", o.Duration.String(), "--flow", fmt.Sprint(i+1), "-o", "json")
		if err != nil {
			return CoSRun{}, err
		}
		apps = append(apps, a)
	}
	var vr [2]traffic.VideoResult
	for i, a := range apps {
		if err := a.wait(ctx, total+20*time.Second, &vr[i]); err != nil {
			return CoSRun{}, err
		}
	}
	for _, ch := range append(crossDone, recDone...) {
		select {
		case err := <-ch:
			if err != nil {
				return CoSRun{}, err
			}
		case <-ctx.Done():
			return CoSRun{}, ctx.Err()
		}
	}
	run := CoSRun{Name: name, HostQoS: name != "without hostqos", CrossTrace: pres.Trace}
	for i, st := range []*CoSStream{&run.Gold, &run.Silver} {
		cs := recs[i].stats()
		which := []string{"gold", "silver"}[i]
		st.Row = ClassRow{Class: which + " video", App: "mcu-app", DSCP: cs.DSCP, OfferedBps: vr[i].IPBitRate, HasLoss: true,
			Sent: cs.Expected, Received: cs.Received, Loss: round6(cs.Loss), HasLatency: true, Latency: cs.Latency, JitterMS: cs.JitterMS,
			ThroughputBps: math.Round(float64(cs.IPBytes) * 8 / math.Max(vr[i].DurationS, 1e-3))}
		st.Series = recs[i].series(t0, total, voipBin)
		st.WorstRatio, _, st.MeanRatio, st.BurstRatio = voipRatios(st.Series, pres.Trace, float64(cross.Cap))
		r.progress("      %s: sent %d, received %d (%.3f; in bursts %s; worst second %.3f), p99 %s ms, DSCP at the server %s",
			which, st.Row.Sent, st.Row.Received, st.MeanRatio, ratioStr(st.BurstRatio), st.WorstRatio, msStr(st.Row.Latency.P99), dscpMain(cs.DSCP))
	}
	return run, nil
}

func (v *CoSResult) writeTable(w io.Writer) {
	s := v.Setup
	fmt.Fprintf(w, "\nQ-Pod two classes of service by destination (seed §5.3, Figure 27) at %s\n", s.Scale)
	fmt.Fprintf(w, "two ≈%s video streams from one app: gold to %s, silver to %s; %s DiffServ bottleneck (%d ms FIFOs); cross: Pareto k=%s α=%g cap %s in AF13, %s CBR in AF11 and AF12\n\n",
		rate(s.VideoBps), s.Gold, s.Silver, rate(float64(s.BottleneckBps)), s.RouterQueueMS, rate(float64(s.Cross.KBps)), s.Cross.Alpha, rate(float64(s.Cross.CapBps)), rate(float64(s.CBRBps)))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "\tseed: gold (AF11)\tseed: silver (AF12)\there: gold, hostqos AF11\there: silver, hostqos AF12\there: gold, no hostqos\there: silver, no hostqos")
	m, u := v.Managed, v.Unmanaged
	fmt.Fprintf(tw, "received / sent, whole run\tnot given\tnot given\t%s\t%s\t%s\t%s\n", ratioStr(m.Gold.MeanRatio), ratioStr(m.Silver.MeanRatio), ratioStr(u.Gold.MeanRatio), ratioStr(u.Silver.MeanRatio))
	fmt.Fprintf(tw, "received / sent in cross-traffic bursts\t\"immune\"\t\"occasional drop\"\t%s\t%s\t%s\t%s\n", ratioStr(m.Gold.BurstRatio), ratioStr(m.Silver.BurstRatio), ratioStr(u.Gold.BurstRatio), ratioStr(u.Silver.BurstRatio))
	fmt.Fprintf(tw, "worst 1-s bin received / sent\t≈ 1\t< 1, \"not drastic\"\t%.3f\t%.3f\t%.3f\t%.3f\n", m.Gold.WorstRatio, m.Silver.WorstRatio, u.Gold.WorstRatio, u.Silver.WorstRatio)
	fmt.Fprintf(tw, "p99 one-way latency\tnot given\tnot given\t%s ms\t%s ms\t%s ms\t%s ms\n", msStr(m.Gold.Row.Latency.P99), msStr(m.Silver.Row.Latency.P99), msStr(u.Gold.Row.Latency.P99), msStr(u.Silver.Row.Latency.P99))
	fmt.Fprintf(tw, "DSCP at the receiver\tAF11\tAF12\t%s\t%s\t%s\t%s\n", dscpMain(m.Gold.Row.DSCP), dscpMain(m.Silver.Row.DSCP), dscpMain(u.Gold.Row.DSCP), dscpMain(u.Silver.Row.DSCP))
	tw.Flush()
	fmt.Fprintf(w, "with hostqos: %s\n", strings.Join(s.Commands, "; "))
	fmt.Fprintln(w, "differences from the seed: WRED on Cisco IOS there; here AF11 has its own HTB queue, AF12 and AF13 share a shorter one (drop-tail)")
}

func cosFigure(v *CoSResult) *plot.Figure {
	m := v.Managed
	gsx, gsy := binsXY(trim(m.Gold.Series), func(b Bin) float64 { return b.Sent }, true, true)
	grx, gry := binsXY(trim(m.Gold.Series), func(b Bin) float64 { return b.Received }, true, true)
	ssx, ssy := binsXY(trim(m.Silver.Series), func(b Bin) float64 { return b.Sent }, true, true)
	srx, sry := binsXY(trim(m.Silver.Series), func(b Bin) float64 { return b.Received }, true, true)
	ux, uy := binsXY(trim(v.Unmanaged.Silver.Series), func(b Bin) float64 { return b.Received }, true, true)
	cx, cy := stepXY(m.CrossTrace, v.Setup.Cross.IntervalS, 1e6)
	bn := float64(v.Setup.BottleneckBps) / 1e6
	lastX := 1.0
	if len(cx) > 0 {
		lastX = cx[len(cx)-1]
	}
	ymax := 0.0
	for _, y := range append(append([]float64{}, gsy...), ssy...) {
		ymax = math.Max(ymax, y)
	}
	return &plot.Figure{
		Title:     "q-pod fig. 27 at 1/10 scale: two classes of service by destination (gold af11, silver af12) under bursty cross traffic",
		XLabel:    "time since the start of the run (s); video packets in 1-s bins by send time",
		XFromZero: true,
		Panels: []plot.Panel{
			{Title: "gold video (af11 by hostqos), packets/s", YMax: ymax * 1.3, Series: []plot.Series{
				{Name: "received", Color: plot.Green, X: grx, Y: gry},
				{Name: "sent", Color: plot.Black, Dashed: true, X: gsx, Y: gsy},
			}},
			{Title: "silver video (af12 by hostqos), packets/s", YMax: ymax * 1.3, Series: []plot.Series{
				{Name: "received", Color: plot.Red, X: srx, Y: sry},
				{Name: "sent", Color: plot.Black, Dashed: true, X: ssx, Y: ssy},
				{Name: "received without hostqos (unmarked)", Color: plot.Grey, X: ux, Y: uy},
			}},
			{Title: "cross traffic in af13: pareto source's rate per 2-s interval (Mbit/s)", YMax: bn * 1.3, Series: []plot.Series{
				{Name: "offered", Color: plot.Grey, X: cx, Y: cy},
				{Name: "bottleneck", Color: plot.Black, Dashed: true, X: []float64{0, lastX}, Y: []float64{bn, bn}},
			}},
		},
		Notes: []string{
			fmt.Sprintf("received/sent in bursts: gold %s, silver %s with hostqos; %s and %s without",
				ratioStr(m.Gold.BurstRatio), ratioStr(m.Silver.BurstRatio), ratioStr(v.Unmanaged.Gold.BurstRatio), ratioStr(v.Unmanaged.Silver.BurstRatio)),
			fmt.Sprintf("plus %s cbr in af11 and in af12; pareto seed %d, same draws in both runs", rate(float64(v.Setup.CBRBps)), v.Setup.Cross.Seed),
		},
	}
}
