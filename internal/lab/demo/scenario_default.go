package demo

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/testbed"
	"github.com/hostqos/hostqos/internal/traffic"
)

// CrossSpec is the Pareto cross traffic (seed §5.1): each Interval the rate
// is drawn from P[X ≤ x] = 1 - (K/x)^Alpha, capped at Cap.
type CrossSpec struct {
	KBps      uint64  `json:"k_bps"`
	Alpha     float64 `json:"alpha"`
	CapBps    uint64  `json:"cap_bps"`
	IntervalS float64 `json:"interval_s"`
	Seed      uint64  `json:"seed"`
	SizeBytes int     `json:"udp_payload_bytes"`
	// MeanBps is the expected mean of the capped distribution.
	MeanBps float64 `json:"expected_mean_bps"`
}

// DefaultSetup is what the default scenario ran.
type DefaultSetup struct {
	BottleneckBps   uint64    `json:"bottleneck_bps"`
	RouterQueueMS   int       `json:"router_fifo_ms"`
	ClientEgressBps uint64    `json:"client_egress_rate_bps"`
	Calls           int       `json:"calls"`
	VideoBps        float64   `json:"video_nominal_bps"`
	BulkStreams     int       `json:"bulk_streams"`
	Cross           CrossSpec `json:"cross"`
	DurationS       float64   `json:"voice_duration_s"`
	LeadS           float64   `json:"background_lead_s"`
	BinS            float64   `json:"bin_s"`
	Commands        []string  `json:"hostqos_commands"`
}

// ClassRow is what one class of traffic got in one run, as measured at
// the server (throughput, loss, latency, jitter, the DSCP it arrived with).
type ClassRow struct {
	Class         string            `json:"class"`
	App           string            `json:"app"`
	DSCP          map[string]uint64 `json:"dscp_at_server"`
	OfferedBps    float64           `json:"offered_bps"` // 0: elastic (TCP)
	ThroughputBps float64           `json:"throughput_bps"`
	HasLoss       bool              `json:"has_loss"`
	Sent          uint64            `json:"sent"`
	Received      uint64            `json:"received"`
	Loss          float64           `json:"loss"`
	HasLatency    bool              `json:"has_latency"`
	Latency       traffic.Summary   `json:"latency"`
	JitterMS      float64           `json:"jitter_ms"`
	FrameLoss     *float64          `json:"frame_loss,omitempty"`
}

// RunResult is one run (without or with hostqos).
type RunResult struct {
	Name       string                 `json:"name"`
	HostQoS    bool                   `json:"hostqos"`
	Classes    []ClassRow             `json:"classes"`
	Voice      []Bin                  `json:"voice_series"`
	Cross      []Bin                  `json:"cross_series"`
	CrossTrace []traffic.IntervalRate `json:"cross_trace"`
	Rules      []api.RuleStat         `json:"hostqos_rule_counters,omitempty"`
	// Router is what the router's DiffServ classes counted on the
	// bottleneck while the calls ran (bytes sent, packets dropped).
	Router []testbed.DiffServClass `json:"router_classes"`
}

// DefaultResult is the default scenario's result.
type DefaultResult struct {
	Setup   DefaultSetup `json:"setup"`
	Without RunResult    `json:"without"`
	With    RunResult    `json:"with"`
	Verdict Verdict      `json:"verdict"`
}

// pickSeed returns the first seed (from 1) whose first n draws include at
// least a third of intervals at the cap and at least a third below half of
// it, so that even a short run shows both bursts and calm — a long run of
// any seed would. The choice is reported with the result.
func pickSeed(cfg traffic.ParetoConfig, n int) uint64 {
	for seed := uint64(1); seed < 10000; seed++ {
		cfg.Seed = seed
		var atCap, calm int
		for _, r := range traffic.ParetoRates(cfg, n) {
			if r >= float64(cfg.Cap) {
				atCap++
			}
			if r < float64(cfg.Cap)/2 {
				calm++
			}
		}
		if 3*atCap >= n && 3*calm >= n {
			return seed
		}
	}
	return 1
}

const (
	defaultBottleneck = 20_000_000
	defaultClientRate = 19_000_000 // 95 % of the bottleneck: queues build where hostqos rules
	defaultStreams    = 4
	crossPayload      = 1200
)

func (r *runner) runDefault() (*DefaultResult, error) {
	o := r.opts
	lead := 1500 * time.Millisecond
	total := lead + o.Duration + 500*time.Millisecond
	interval := time.Second
	cross := traffic.ParetoConfig{K: defaultBottleneck * 2 / 5, Alpha: 1.05, Cap: defaultBottleneck, Interval: interval, Size: crossPayload}
	cross.Seed = pickSeed(cross, int(math.Ceil(total.Seconds()/interval.Seconds())))
	setup := DefaultSetup{
		BottleneckBps: defaultBottleneck, RouterQueueMS: testbed.QueueTime, ClientEgressBps: defaultClientRate,
		Calls: o.Calls, VideoBps: 116000 * 8 * 25 / 12.0, BulkStreams: defaultStreams,
		Cross: CrossSpec{KBps: cross.K, Alpha: cross.Alpha, CapBps: cross.Cap, IntervalS: interval.Seconds(), Seed: cross.Seed,
			SizeBytes: crossPayload, MeanBps: math.Round(traffic.CappedParetoMean(float64(cross.K), cross.Alpha, float64(cross.Cap)))},
		DurationS: o.Duration.Seconds(), LeadS: lead.Seconds(), BinS: 0.5,
	}
	r.progress("scenario default: client (hostqosd) → router (DiffServ, %s bottleneck, %d ms FIFO) → server; cross host → router",
		rate(defaultBottleneck), testbed.QueueTime)
	r.progress("  client apps: %d G.729 voice calls (50 pkt/s, 60-byte IP packets), one video stream (25 fps IBBPBBPBBPBB, ≈%s), %d bulk TCP uploads",
		o.Calls, rate(setup.VideoBps), defaultStreams)
	r.progress("  cross traffic: Pareto k=%s α=%g capped at %s, %gs intervals, seed %d (mean %s), unmarked",
		rate(float64(cross.K)), cross.Alpha, rate(float64(cross.Cap)), interval.Seconds(), cross.Seed, rate(setup.Cross.MeanBps))
	tb, err := r.build(starTopology("demo", defaultBottleneck, true))
	if err != nil {
		return nil, err
	}
	apps := map[string]string{}
	for _, n := range []string{"voice-app", "video-app", "bulk-app"} {
		if apps[n], err = r.copyApp(n); err != nil {
			return nil, err
		}
	}
	res := &DefaultResult{}
	r.progress("[1/2] without hostqos: running %s (voice %s after %s of background traffic) ...", secs(total), secs(o.Duration), secs(lead))
	res.Without, err = r.defaultRun(tb, apps, cross, lead, total, "without hostqos")
	if err != nil {
		return nil, err
	}
	r.progress("[2/2] with hostqos: starting hostqosd on the client and adding rules ...")
	d, err := r.startDaemon(tb.Node("client"))
	if err != nil {
		return nil, err
	}
	cmds := [][]string{
		{"link", "set", tb.Node("client").Iface("router"), "--egress-rate", strconv.Itoa(defaultClientRate/1_000_000) + "mbit"},
		{"rule", "add", "voice", "--exe", apps["voice-app"], "--class", "voice"},
		{"rule", "add", "video", "--exe", apps["video-app"], "--class", "interactive"},
		{"rule", "add", "bulk", "--exe", apps["bulk-app"], "--class", "bulk"},
	}
	for _, c := range cmds {
		if err := r.cli(d, c...); err != nil {
			return nil, err
		}
		setup.Commands = append(setup.Commands, "hostqos "+strings.Join(c, " "))
	}
	r.progress("[2/2] with hostqos: running %s ...", secs(total))
	res.With, err = r.defaultRun(tb, apps, cross, lead, total, "with hostqos")
	if err != nil {
		return nil, err
	}
	if st, err := d.Stats("rules"); err == nil {
		res.With.Rules = st.Rules
	} else {
		r.opts.Log.Warn("read hostqos rule counters", "err", err)
	}
	res.Setup = setup
	res.Verdict = Judge(res.Without, res.With)
	return res, nil
}

// defaultRun runs the traffic once: receivers in the server, the Pareto
// source in the cross host, the three apps in the client.
func (r *runner) defaultRun(tb *testbed.Testbed, apps map[string]string, cross traffic.ParetoConfig, lead, total time.Duration, name string) (RunResult, error) {
	o := r.opts
	// The receivers and the cross traffic stop when this run returns, also
	// on an error.
	ctx, cancel := context.WithCancel(r.ctx)
	defer cancel()
	server, client, router := tb.Node("server"), tb.Node("client"), tb.Node("router")
	var voiceRec, crossRec *recorder
	var vsink *traffic.Sink
	var tsink *traffic.TCPSink
	recvFor := total + 4*time.Second
	if err := server.Do(func() (err error) {
		if voiceRec, err = listenRecorder(hp(serverAddr, 0)); err != nil {
			return err
		}
		if crossRec, err = listenRecorder(hp(serverAddr, 0)); err != nil {
			return err
		}
		if vsink, err = traffic.ListenSink(ctx, traffic.SinkConfig{Listen: hp(serverAddr, 0), Duration: recvFor, Flows: 1}); err != nil {
			return err
		}
		tsink, err = traffic.ListenTCPSink(ctx, traffic.TCPSinkConfig{Listen: hp(serverAddr, 0), Duration: recvFor, Streams: defaultStreams})
		return err
	}); err != nil {
		for _, c := range []interface{ Close() error }{voiceRec.conn, crossRec.conn, vsink, tsink} {
			if c != nil {
				_ = c.Close()
			}
		}
		return RunResult{}, fmt.Errorf("open receivers in the server: %w", err)
	}
	t0 := time.Now()
	deadline := t0.Add(recvFor)
	voiceDone := goSafe(func() error { return voiceRec.run(ctx, o.Calls, deadline) })
	crossDone := goSafe(func() error { return crossRec.run(ctx, 1, deadline) })
	var vres *traffic.SinkResult
	videoSinkDone := goSafe(func() (err error) { vres, err = vsink.Run(ctx); return err })
	var tres *traffic.TCPSinkResult
	tcpSinkDone := goSafe(func() (err error) { tres, err = tsink.Run(ctx); return err })

	var pres *traffic.ParetoResult
	cfg := cross
	cfg.To, cfg.Duration = crossRec.addr().String(), total
	paretoDone := goSafe(func() error {
		return tb.Node("cross").Do(func() (err error) { pres, err = traffic.SendPareto(ctx, cfg); return err })
	})
	bulk, err := r.startApp(client, "bulk-app", apps["bulk-app"], "tool", "tcp-send", "--to", tsink.Addr().String(),
		"--streams", strconv.Itoa(defaultStreams), "--duration", total.String(), "-o", "json")
	if err != nil {
		return RunResult{}, err
	}
	video, err := r.startApp(client, "video-app", apps["video-app"], "tool", "video", "--to", vsink.Addr().String(),
		"--duration", total.String(), "-o", "json")
	if err != nil {
		return RunResult{}, err
	}
	if err := r.sleep(lead); err != nil {
		return RunResult{}, err
	}
	// The router's counters are read while the calls run (lead to lead +
	// Duration): the bottleneck's bytes then compare like with like, not
	// the senders' start and end.
	routerBefore, err := router.DiffServStats("server")
	if err != nil {
		return RunResult{}, err
	}
	var routerAfter []testbed.DiffServClass
	routerDone := goSafe(func() (err error) {
		if err = r.sleep(o.Duration); err == nil {
			routerAfter, err = router.DiffServStats("server")
		}
		return err
	})
	voice, err := r.startApp(client, "voice-app", apps["voice-app"], "tool", "voice", "--mode", "oneway", "--to", voiceRec.addr().String(),
		"--calls", strconv.Itoa(o.Calls), "--duration", o.Duration.String(), "-o", "json")
	if err != nil {
		return RunResult{}, err
	}
	var vr traffic.VoiceResult
	var vidr traffic.VideoResult
	var br traffic.BulkResult
	grace := total + 20*time.Second
	for _, w := range []struct {
		a   *app
		out any
	}{{voice, &vr}, {video, &vidr}, {bulk, &br}} {
		if err := w.a.wait(ctx, grace, w.out); err != nil {
			return RunResult{}, err
		}
	}
	for what, ch := range map[string]<-chan error{"cross traffic": paretoDone, "voice receiver": voiceDone,
		"cross receiver": crossDone, "video sink": videoSinkDone, "TCP sink": tcpSinkDone, "router counters": routerDone} {
		select {
		case err := <-ch:
			if err != nil {
				return RunResult{}, fmt.Errorf("%s: %w", what, err)
			}
		case <-ctx.Done():
			return RunResult{}, ctx.Err()
		}
	}
	rr := RunResult{Name: name, HostQoS: name == "with hostqos", CrossTrace: pres.Trace, Router: diffServDelta(routerBefore, routerAfter)}
	// Voice.
	vs := voiceRec.stats()
	voiceRow := ClassRow{Class: fmt.Sprintf("voice (%d calls)", o.Calls), App: appVoice, DSCP: vs.DSCP,
		OfferedBps: float64(vr.Sent) * 60 * 8 / math.Max(vr.DurationS, 1e-3), HasLoss: true, Sent: vs.Expected, Received: vs.Received,
		Loss: round6(vs.Loss), HasLatency: true, Latency: vs.Latency, JitterMS: vs.JitterMS,
		ThroughputBps: math.Round(float64(vs.IPBytes) * 8 / math.Max(vr.DurationS, 1e-3))}
	// Video.
	videoRow := ClassRow{Class: "video (25 fps)", App: "video-app", OfferedBps: vidr.IPBitRate, HasLoss: true, HasLatency: true, DSCP: map[string]uint64{}}
	if vres != nil && len(vres.Flows) > 0 {
		f := vres.Flows[0]
		videoRow.DSCP = f.DSCP
		videoRow.Sent, videoRow.Received, videoRow.Loss = f.Expected, f.Packets, f.Loss
		videoRow.Latency, videoRow.JitterMS = f.Latency, f.JitterMS
		videoRow.ThroughputBps = math.Round(float64(f.IPBytes) * 8 / math.Max(vidr.DurationS, 1e-3))
		if f.Frames != nil {
			fl := f.Frames.Loss
			videoRow.FrameLoss = &fl
		}
	}
	// Bulk.
	bulkRow := ClassRow{Class: fmt.Sprintf("bulk TCP (%d streams)", defaultStreams), App: appBulk, DSCP: map[string]uint64{}}
	if tres != nil {
		bulkRow.ThroughputBps = tres.GoodputBps
	}
	// Cross traffic.
	cs := crossRec.stats()
	crossRow := ClassRow{Class: "cross traffic (Pareto)", App: appCross, DSCP: cs.DSCP, OfferedBps: pres.IPBitRate, HasLoss: true,
		Sent: cs.Expected, Received: cs.Received, Loss: round6(cs.Loss), HasLatency: true, Latency: cs.Latency, JitterMS: cs.JitterMS,
		ThroughputBps: math.Round(float64(cs.IPBytes) * 8 / math.Max(pres.DurationS, 1e-3))}
	rr.Classes = []ClassRow{voiceRow, videoRow, bulkRow, crossRow}
	bin := 500 * time.Millisecond
	rr.Voice = voiceRec.series(t0, total, bin)
	rr.Cross = crossRec.series(t0, total, bin)
	r.progress("      voice: sent %d, received %d, loss %s, p50 %.1f ms, p99 %.1f ms (measured at the server)",
		voiceRow.Sent, voiceRow.Received, pctStr(voiceRow.Loss), voiceRow.Latency.P50, voiceRow.Latency.P99)
	r.progress("      the neighbour (cross host): %s of %s offered, loss %s; the client's bulk TCP: %s",
		rate(crossRow.ThroughputBps), rate(crossRow.OfferedBps), pctStr(crossRow.Loss), rate(bulkRow.ThroughputBps))
	return rr, nil
}

func round6(v float64) float64 { return math.Round(v*1e6) / 1e6 }

func pctStr(v float64) string {
	switch {
	case v == 0:
		return "0 %"
	case v < 0.001:
		return fmt.Sprintf("%.3f %%", v*100)
	default:
		return fmt.Sprintf("%.2f %%", v*100)
	}
}
