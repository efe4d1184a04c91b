package demo

import (
	"context"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/hostqos/hostqos/internal/plot"
	"github.com/hostqos/hostqos/internal/testbed"
	"github.com/hostqos/hostqos/internal/traffic"
)

// The Q-Pod seed's VoIP experiment (§5.2, Figures 23–25): 640 G.729 calls
// (50 pkt/s of 78-byte frames each, 32 kpps, ≈ 20 Mbit/s) across Cisco
// routers whose 155 Mbit/s OC-3 link carries bursty Pareto cross traffic
// (k = 40 Mbit/s, α = 1.05, capped at 155 Mbit/s, 2 s aggregation). With
// QoS, Q-Pod marks the voice (AF11; cross traffic AF13, WRED) and its
// packet rate is immune to the bursts; best effort, the receiver's packet
// rate drops by almost 50 % in the bursts.
//
// Here at 1/10 scale: 64 calls, a 15.5 Mbit/s bottleneck, k = 4 Mbit/s,
// cap 15.5 Mbit/s, α = 1.05, 2 s intervals; marked = hostqos puts the voice
// app in class voice (EF, strict priority at our DiffServ router), cross
// traffic unmarked (default class).
const (
	voipBottleneck = 15_500_000
	voipK          = 4_000_000
	voipInterval   = 2 * time.Second
	voipBin        = time.Second
)

// VoIPSetup is what the qpod-voip scenario ran.
type VoIPSetup struct {
	Scale         string    `json:"scale"`
	BottleneckBps uint64    `json:"bottleneck_bps"`
	RouterQueueMS int       `json:"router_fifo_ms"`
	Calls         int       `json:"calls"`
	OfferedPPS    float64   `json:"offered_pps"`
	OfferedWire   float64   `json:"offered_bps_on_wire"` // 78-byte frames
	Cross         CrossSpec `json:"cross"`
	DurationS     float64   `json:"voice_duration_s"`
	BinS          float64   `json:"bin_s"`
	Commands      []string  `json:"hostqos_commands"`
}

// VoIPRun is one run (best effort or marked).
type VoIPRun struct {
	Name        string                 `json:"name"`
	HostQoS     bool                   `json:"hostqos"`
	Voice       ClassRow               `json:"voice"`
	Cross       ClassRow               `json:"cross"`
	VoiceSeries []Bin                  `json:"voice_series"`
	CrossSeries []Bin                  `json:"cross_series"`
	CrossTrace  []traffic.IntervalRate `json:"cross_trace"`
	// WorstRatio is the lowest received/sent packet rate over the full
	// 1-s bins of the voice (1 = no loss in any second); WorstT its bin
	// (-1 when no bin lost anything).
	WorstRatio float64 `json:"worst_bin_received_over_sent"`
	WorstT     float64 `json:"worst_bin_t_s"`
	// MeanRatio is received/sent over the whole run.
	MeanRatio float64 `json:"received_over_sent"`
	// BurstRatio is received/sent over the bins in which the cross traffic
	// was at its cap (the bursts), -1 if there were none.
	BurstRatio float64 `json:"received_over_sent_in_bursts"`
}

// VoIPResult is the qpod-voip scenario's result.
type VoIPResult struct {
	Setup      VoIPSetup `json:"setup"`
	BestEffort VoIPRun   `json:"best_effort"`
	Marked     VoIPRun   `json:"marked"`
}

func (r *runner) runVoIP() (*VoIPResult, error) {
	o := r.opts
	lead := time.Second
	total := lead + o.Duration + 500*time.Millisecond
	cross := traffic.ParetoConfig{K: voipK, Alpha: 1.05, Cap: voipBottleneck, Interval: voipInterval, Size: crossPayload}
	cross.Seed = pickSeed(cross, int(math.Ceil(total.Seconds()/voipInterval.Seconds())))
	setup := VoIPSetup{
		Scale: "1/10 of the seed (640 → 64 calls, 155 → 15.5 Mbit/s, k 40 → 4 Mbit/s)", BottleneckBps: voipBottleneck,
		RouterQueueMS: testbed.QueueTime, Calls: o.Calls, OfferedPPS: float64(o.Calls) * traffic.G729PacketRate,
		OfferedWire: float64(o.Calls) * traffic.G729PacketRate * traffic.G729WireBytes * 8,
		Cross: CrossSpec{KBps: cross.K, Alpha: cross.Alpha, CapBps: cross.Cap, IntervalS: voipInterval.Seconds(), Seed: cross.Seed,
			SizeBytes: crossPayload, MeanBps: math.Round(traffic.CappedParetoMean(float64(cross.K), cross.Alpha, float64(cross.Cap)))},
		DurationS: o.Duration.Seconds(), BinS: voipBin.Seconds(),
	}
	r.progress("scenario qpod-voip (seed §5.2, Fig. 25) at %s", setup.Scale)
	r.progress("  %d G.729 calls: %.0f pkt/s of 78-byte frames (%s on the wire) → router (%s bottleneck, DiffServ) → server",
		o.Calls, setup.OfferedPPS, rate(setup.OfferedWire), rate(voipBottleneck))
	r.progress("  cross traffic: Pareto k=%s α=%g capped at the link rate %s, %gs intervals, seed %d (mean %s), unmarked",
		rate(voipK), cross.Alpha, rate(voipBottleneck), voipInterval.Seconds(), cross.Seed, rate(setup.Cross.MeanBps))
	tb, err := r.build(starTopology("demovoip", voipBottleneck, true))
	if err != nil {
		return nil, err
	}
	voiceApp, err := r.copyApp("voice-app")
	if err != nil {
		return nil, err
	}
	res := &VoIPResult{}
	r.progress("[1/2] best effort (no hostqos, voice unmarked): running %s ...", secs(total))
	if res.BestEffort, err = r.voipRun(tb, voiceApp, cross, lead, total, "best effort"); err != nil {
		return nil, err
	}
	r.progress("[2/2] marked: starting hostqosd on the client, voice app → class voice (EF) ...")
	d, err := r.startDaemon(tb.Node("client"))
	if err != nil {
		return nil, err
	}
	cmds := [][]string{
		{"link", "set", tb.Node("client").Iface("router")},
		{"rule", "add", "voice", "--exe", voiceApp, "--class", "voice"},
	}
	for _, c := range cmds {
		if err := r.cli(d, c...); err != nil {
			return nil, err
		}
		setup.Commands = append(setup.Commands, "hostqos "+strings.Join(c, " "))
	}
	r.progress("[2/2] marked by hostqos: running %s ...", secs(total))
	if res.Marked, err = r.voipRun(tb, voiceApp, cross, lead, total, "marked by hostqos"); err != nil {
		return nil, err
	}
	res.Setup = setup
	return res, nil
}

func (r *runner) voipRun(tb *testbed.Testbed, voiceApp string, cross traffic.ParetoConfig, lead, total time.Duration, name string) (VoIPRun, error) {
	o := r.opts
	ctx, cancel := context.WithCancel(r.ctx)
	defer cancel()
	server := tb.Node("server")
	var voiceRec, crossRec *recorder
	recvFor := total + 4*time.Second
	if err := server.Do(func() (err error) {
		if voiceRec, err = listenRecorder(hp(serverAddr, 0)); err != nil {
			return err
		}
		crossRec, err = listenRecorder(hp(serverAddr, 0))
		return err
	}); err != nil {
		if voiceRec != nil {
			voiceRec.conn.Close()
		}
		return VoIPRun{}, fmt.Errorf("open receivers in the server: %w", err)
	}
	t0 := time.Now()
	deadline := t0.Add(recvFor)
	voiceDone := goSafe(func() error { return voiceRec.run(ctx, o.Calls, deadline) })
	crossDone := goSafe(func() error { return crossRec.run(ctx, 1, deadline) })
	var pres *traffic.ParetoResult
	cfg := cross
	cfg.To, cfg.Duration = crossRec.addr().String(), total
	paretoDone := goSafe(func() error {
		return tb.Node("cross").Do(func() (err error) { pres, err = traffic.SendPareto(ctx, cfg); return err })
	})
	if err := r.sleep(lead); err != nil {
		return VoIPRun{}, err
	}
	voice, err := r.startApp(tb.Node("client"), "voice-app", voiceApp, "tool", "voice", "--mode", "oneway", "--to", voiceRec.addr().String(),
		"--calls", strconv.Itoa(o.Calls), "--duration", o.Duration.String(), "-o", "json")
	if err != nil {
		return VoIPRun{}, err
	}
	var vr traffic.VoiceResult
	if err := voice.wait(ctx, total+20*time.Second, &vr); err != nil {
		return VoIPRun{}, err
	}
	for what, ch := range map[string]<-chan error{"cross traffic": paretoDone, "voice receiver": voiceDone, "cross receiver": crossDone} {
		select {
		case err := <-ch:
			if err != nil {
				return VoIPRun{}, fmt.Errorf("%s: %w", what, err)
			}
		case <-ctx.Done():
			return VoIPRun{}, ctx.Err()
		}
	}
	vs, cs := voiceRec.stats(), crossRec.stats()
	run := VoIPRun{Name: name, HostQoS: name != "best effort", CrossTrace: pres.Trace,
		Voice: ClassRow{Class: fmt.Sprintf("voice (%d calls)", o.Calls), App: "voice-app", DSCP: vs.DSCP,
			OfferedBps: float64(vr.Sent) * 60 * 8 / math.Max(vr.DurationS, 1e-3), HasLoss: true, Sent: vs.Expected, Received: vs.Received,
			Loss: round6(vs.Loss), HasLatency: true, Latency: vs.Latency, JitterMS: vs.JitterMS,
			ThroughputBps: math.Round(float64(vs.IPBytes) * 8 / math.Max(vr.DurationS, 1e-3))},
		Cross: ClassRow{Class: "cross traffic (Pareto)", App: "cross host", DSCP: cs.DSCP, OfferedBps: pres.IPBitRate, HasLoss: true,
			Sent: cs.Expected, Received: cs.Received, Loss: round6(cs.Loss), HasLatency: true, Latency: cs.Latency, JitterMS: cs.JitterMS,
			ThroughputBps: math.Round(float64(cs.IPBytes) * 8 / math.Max(pres.DurationS, 1e-3))},
		VoiceSeries: voiceRec.series(t0, total, voipBin),
		CrossSeries: crossRec.series(t0, total, voipBin),
	}
	run.WorstRatio, run.WorstT, run.MeanRatio, run.BurstRatio = voipRatios(run.VoiceSeries, pres.Trace, float64(cross.Cap))
	r.progress("      voice: sent %d, received %d (%.3f of sent; worst second %s), p99 %.1f ms, DSCP at server %s",
		run.Voice.Sent, run.Voice.Received, run.MeanRatio, worstStr(run), run.Voice.Latency.P99, dscpMain(vs.DSCP))
	return run, nil
}

// voipRatios summarizes the full voice bins: worst received/sent, the
// overall ratio, and the ratio in bins that fall inside at-cap intervals.
func voipRatios(bins []Bin, trace []traffic.IntervalRate, capBps float64) (worst, worstT, mean, burst float64) {
	full := trim(bins)
	worst, worstT, burst = 1, -1, -1
	var s, rcv, bs, br float64
	for _, b := range full {
		s += b.Sent
		rcv += b.Received
		if b.Sent > 0 && b.Received/b.Sent < worst {
			worst, worstT = b.Received/b.Sent, b.T
		}
		for _, t := range trace {
			if b.T >= t.StartS && b.T < t.StartS+voipInterval.Seconds() && t.TargetBps >= capBps {
				bs += b.Sent
				br += b.Received
			}
		}
	}
	if s > 0 {
		mean = rcv / s
	}
	if bs > 0 {
		burst = math.Round(br/bs*1000) / 1000
	}
	return math.Round(worst*1000) / 1000, worstT, math.Round(mean*1000) / 1000, burst
}

func worstStr(v VoIPRun) string {
	if v.WorstT < 0 {
		return "1.000 (no second with loss)"
	}
	return fmt.Sprintf("%.3f (t=%gs)", v.WorstRatio, v.WorstT)
}

func ratioStr(v float64) string {
	if v < 0 {
		return "-"
	}
	return fmt.Sprintf("%.3f", v)
}

func (v *VoIPResult) writeTable(w io.Writer) {
	s := v.Setup
	fmt.Fprintf(w, "\nQ-Pod VoIP experiment (seed §5.2, Figures 23-25) reproduced at %s\n", s.Scale)
	fmt.Fprintf(w, "%d G.729 calls (%.0f pkt/s, 78-byte frames, %s), %s bottleneck with %d ms FIFOs, cross traffic Pareto k=%s α=%g cap %s, %gs intervals, seed %d\n\n",
		s.Calls, s.OfferedPPS, rate(s.OfferedWire), rate(float64(s.BottleneckBps)), s.RouterQueueMS, rate(float64(s.Cross.KBps)), s.Cross.Alpha,
		rate(float64(s.Cross.CapBps)), s.Cross.IntervalS, s.Cross.Seed)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "\tseed: best effort\tseed: QoS (AF11)\there: best effort\there: hostqos (EF)")
	be, mk := v.BestEffort, v.Marked
	fmt.Fprintf(tw, "voice received / sent, whole run\tnot given\tnot given\t%s\t%s\n", ratioStr(be.MeanRatio), ratioStr(mk.MeanRatio))
	fmt.Fprintf(tw, "voice received / sent, in cross-traffic bursts (at cap)\tdrops sharply\tunaffected\t%s\t%s\n", ratioStr(be.BurstRatio), ratioStr(mk.BurstRatio))
	fmt.Fprintf(tw, "worst 1-s bin received / sent\t≈ 0.5 (\"reduced by almost 50%%\")\t≈ 1 (\"immunity from the cross-traffic\")\t%s\t%s\n",
		worstStr(be), worstStr(mk))
	fmt.Fprintf(tw, "voice loss\tnot given\tnot given\t%s\t%s\n", pctStr(be.Voice.Loss), pctStr(mk.Voice.Loss))
	fmt.Fprintf(tw, "voice one-way p50 / p99 latency\tnot given\t\"not large enough to be noticeable\"\t%s / %s ms\t%s / %s ms\n",
		msStr(be.Voice.Latency.P50), msStr(be.Voice.Latency.P99), msStr(mk.Voice.Latency.P50), msStr(mk.Voice.Latency.P99))
	fmt.Fprintf(tw, "voice DSCP at the receiver\t(AF disabled at the routers)\tAF11\t%s\t%s\n", dscpMain(be.Voice.DSCP), dscpMain(mk.Voice.DSCP))
	fmt.Fprintf(tw, "cross traffic offered → received\t\t\t%s → %s\t%s → %s\n", rate(be.Cross.OfferedBps), rate(be.Cross.ThroughputBps),
		rate(mk.Cross.OfferedBps), rate(mk.Cross.ThroughputBps))
	tw.Flush()
	fmt.Fprintf(w, "with hostqos: %s\n", strings.Join(s.Commands, "; "))
	fmt.Fprintln(w, "differences from the seed: AF11/AF13 with WRED on Cisco IOS there; EF strict priority vs default class (HTB, drop-tail FIFOs) here")
}

func voipFigure(v *VoIPResult) *plot.Figure {
	be, mk := trim(v.BestEffort.VoiceSeries), trim(v.Marked.VoiceSeries)
	xs1, ys1 := binsXY(be, func(b Bin) float64 { return b.Sent }, true, true)
	xr1, yr1 := binsXY(be, func(b Bin) float64 { return b.Received }, true, true)
	xs2, ys2 := binsXY(mk, func(b Bin) float64 { return b.Sent }, true, true)
	xr2, yr2 := binsXY(mk, func(b Bin) float64 { return b.Received }, true, true)
	l1x, l1y := binsXY(be, func(b Bin) float64 { return b.P99 }, true, true)
	l2x, l2y := binsXY(mk, func(b Bin) float64 { return b.P99 }, true, true)
	cx, cy := stepXY(v.BestEffort.CrossTrace, v.Setup.Cross.IntervalS, 1e6)
	off := v.Setup.OfferedPPS
	bn := float64(v.Setup.BottleneckBps) / 1e6
	lastX := 1.0
	if len(cx) > 0 {
		lastX = cx[len(cx)-1]
	}
	return &plot.Figure{
		Title:     fmt.Sprintf("q-pod fig. 25 at 1/10 scale: %d g.729 calls, %.1f Mbit/s bottleneck, pareto cross traffic", v.Setup.Calls, bn),
		XLabel:    "time since the start of the run (s); voice in 1-s bins by send time",
		XFromZero: true,
		Panels: []plot.Panel{
			{Title: "voice packet rate, marked by hostqos (pkt/s)", YMax: off * 1.3, Series: []plot.Series{
				{Name: "receiver", Color: plot.Green, X: xr2, Y: yr2},
				{Name: "sender", Color: plot.Black, Dashed: true, X: xs2, Y: ys2},
			}},
			{Title: "voice packet rate, best effort (pkt/s)", YMax: off * 1.3, Series: []plot.Series{
				{Name: "receiver", Color: plot.Red, X: xr1, Y: yr1},
				{Name: "sender", Color: plot.Black, Dashed: true, X: xs1, Y: ys1},
			}},
			{Title: "voice one-way latency, 99th percentile per second (ms)", Series: []plot.Series{
				{Name: "best effort", Color: plot.Red, X: l1x, Y: l1y},
				{Name: "marked by hostqos", Color: plot.Green, X: l2x, Y: l2y},
			}},
			{Title: "cross traffic: pareto source's rate per 2-s interval (Mbit/s)", YMax: bn * 1.3, Series: []plot.Series{
				{Name: "cross traffic offered", Color: plot.Grey, X: cx, Y: cy},
				{Name: "bottleneck", Color: plot.Black, Dashed: true, X: []float64{0, lastX}, Y: []float64{bn, bn}},
			}},
		},
		Notes: []string{
			fmt.Sprintf("received/sent: best effort %.3f overall, %s in bursts, worst second %.3f;  marked %.3f overall, %s in bursts, worst second %.3f",
				v.BestEffort.MeanRatio, ratioStr(v.BestEffort.BurstRatio), v.BestEffort.WorstRatio, v.Marked.MeanRatio, ratioStr(v.Marked.BurstRatio), v.Marked.WorstRatio),
			fmt.Sprintf("pareto k=%s, alpha=%g, capped at the link rate, 2-s intervals, seed %d; same draws in both runs",
				rate(float64(v.Setup.Cross.KBps)), v.Setup.Cross.Alpha, v.Setup.Cross.Seed),
		},
	}
}
