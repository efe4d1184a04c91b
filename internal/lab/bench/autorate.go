package bench

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/hostqos/hostqos/internal/lab"
	"github.com/hostqos/hostqos/internal/testbed"
	"github.com/hostqos/hostqos/internal/traffic"
)

const (
	arEcho    = "198.18.42.2:7000"
	arSink    = "198.18.42.2:5500"
	arStreams = 4
)

// arPhases are the bottleneck's rates, in turn.
var arPhases = []uint64{30e6, 8e6, 20e6}

// arPhase is what one phase of one alternative measured.
type arPhase struct {
	voice     *traffic.VoiceResult
	goodput   float64 // uploads, bits/s of payload
	share     float64 // of the phase's capacity (payload share of frames)
	rateFirst uint64  // rate in force at the phase's start + settle, auto only
	rateLast  uint64
}

// benchAutorate: the stepping bottleneck (30 → 8 → 20 Mbit/s behind a
// 40 ms round trip, a 1000-packet FIFO) with 4 uploads and a voice call in
// class voice: no shaping vs a static rate set too high vs too low vs
// egress_rate = "auto". Per phase, after a settling time: voice p99 over
// the idle round trip, the uploads' share of the capacity.
func benchAutorate(e *env, r *Report) error {
	phase := e.dur(20*time.Second, 12*time.Second)
	settle := e.dur(6*time.Second, 4*time.Second)
	voiceExe, err := e.app("hqb-voice")
	if err != nil {
		return err
	}
	bulkExe, err := e.app("hqb-bulk")
	if err != nil {
		return err
	}
	r.setup("%s", hostLine())
	r.setup("testbed client — router — server; router–server 20 ms each way (the testbed's TUN delay line: a 40 ms round trip), the router's egress toward the server an HTB bottleneck with a 1000-packet FIFO whose rate steps %s Mbit/s every %v, unknown to the client",
		mbitList(arPhases), phase)
	r.setup("on the client: hostqosd, the voice app in class voice (a rule), a bulk app with %d TCP uploads to a sink on the server for the whole run; 1 G.729 call (50 pkt/s) to a UDP echo on the server, measured in each phase from %v after the step to 1 s before the next", arStreams, settle)
	r.setup("alternatives: the link managed without a rate (no shaping), egress_rate 29mbit (too high for two phases), 7mbit (too low for all), auto (min 1mbit, max 40mbit)")
	r.setup("share = uploads' goodput at the sink over the window / (capacity × 1448/1514)")

	type alt struct{ name, rate string }
	alts := []alt{{"no shaping", ""}, {"static 29mbit (too high)", "29mbit"}, {"static 7mbit (too low)", "7mbit"}, {"auto", "auto"}}
	results := map[string][]arPhase{}
	idle := map[string]float64{}
	for _, a := range alts {
		e.printf("autorate: %s\n", a.name)
		ph, id, err := arRun(e, a.rate, voiceExe, bulkExe, phase, settle)
		if err != nil {
			return fmt.Errorf("%s: %w", a.name, err)
		}
		results[a.name], idle[a.name] = ph, id
	}
	r.Columns = []string{"alternative", "phase", "idle p99", "voice p99 − idle", "voice loss", "uploads", "share of capacity", "rate in force", "target"}
	for _, a := range alts {
		for i, p := range results[a.name] {
			c := arPhases[i]
			d := p.voice.RTT.P99 - idle[a.name]
			rate := "—"
			if a.rate == "auto" {
				rate = fmt.Sprintf("%s → %s", traffic.FormatRate(float64(p.rateFirst)), traffic.FormatRate(float64(p.rateLast)))
			} else if a.rate != "" {
				rate = a.rate
			}
			target := ""
			if a.rate == "auto" {
				target = fmt.Sprintf("Δ ≤ 10 ms %s, share ≥ 75 %% %s", mark(d <= 10), mark(p.share >= 0.75))
			}
			r.row(a.name, fmt.Sprintf("%d Mbit/s", c/1e6), fmt.Sprintf("%.1f ms", idle[a.name]), fmt.Sprintf("%+.1f ms", d),
				fmt.Sprintf("%.2f %%", p.voice.Loss*100), traffic.FormatRate(p.goodput), pct(p.share), rate, target)
			k := fmt.Sprintf("%s_%d", key(a.name), c/1e6)
			r.metric("voice_p99_over_idle_ms_"+k, d)
			r.metric("share_"+k, p.share)
		}
	}
	r.note("anchors (issue): static 29mbit leaves voice at p99 164 ms and 119 ms in the slower phases (idle 41.5 ms); static 7mbit keeps voice at +3 ms but uploads get 0.22 and 0.33 of the link; cake-autorate publishes no accuracy")
	return nil
}

func mbitList(rs []uint64) string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = fmt.Sprint(r / 1e6)
	}
	return strings.Join(out, " → ")
}

// arRun runs one alternative (rate: "" none, a rate, or "auto") on a
// fresh testbed and returns its phases and the idle voice p99.
func arRun(e *env, rate, voiceExe, bulkExe string, phase, settle time.Duration) ([]arPhase, float64, error) {
	mp := netip.MustParsePrefix
	tb, err := testbed.Build(testbed.Topology{Name: "benchar",
		Nodes: []testbed.NodeSpec{{Name: "client"}, {Name: "router", Router: true}, {Name: "server"}},
		Links: []testbed.LinkSpec{
			{A: "client", B: "router", AAddrs: []netip.Prefix{mp("198.18.41.1/24")}, BAddrs: []netip.Prefix{mp("198.18.41.2/24")}},
			{A: "router", B: "server", AAddrs: []netip.Prefix{mp("198.18.42.1/24")}, BAddrs: []netip.Prefix{mp("198.18.42.2/24")},
				RateAtoB: arPhases[0], QueueAtoB: 1000, DelayAtoB: 20 * time.Millisecond, DelayBtoA: 20 * time.Millisecond},
		}}, testbed.WithLogger(e.log))
	if err != nil {
		return nil, 0, err
	}
	defer tb.Close()
	client, server := tb.Node("client"), tb.Node("server")
	ifc := client.Iface("router")
	toml := fmt.Sprintf("[[link]]\nname = %q\n", ifc)
	switch rate {
	case "":
	case "auto":
		toml += "egress_rate = \"auto\"\negress_min = \"1mbit\"\negress_max = \"40mbit\"\n"
	default:
		toml += fmt.Sprintf("egress_rate = %q\n", rate)
	}
	toml += fmt.Sprintf("[[rule]]\nname = \"bench-voice\"\nexe = %q\nclass = \"voice\"\n", voiceExe)
	d, err := e.daemon(client, toml)
	if err != nil {
		return nil, 0, err
	}
	defer d.Stop()

	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	var echo *traffic.Echo
	if err := server.Do(func() (err error) { echo, err = traffic.ListenEcho(ctx, arEcho); return err }); err != nil {
		return nil, 0, fmt.Errorf("start echo: %w", err)
	}
	echoDone := make(chan struct{})
	go func() { defer close(echoDone); _, _ = echo.Run(ctx, time.Hour) }()
	defer func() { cancel(); <-echoDone }()
	sink, err := listenTCP(server, arSink, false)
	if err != nil {
		return nil, 0, err
	}
	defer sink.Close()

	idle, err := arVoice(e, client, voiceExe, 3*time.Second)
	if err != nil {
		return nil, 0, fmt.Errorf("idle: %w", err)
	}
	total := time.Duration(len(arPhases)) * phase
	wait, err := e.startHelper(client, bulkExe, "tcp", "--to", arSink, "--duration", (total + 2*time.Second).String(), "--streams", fmt.Sprint(arStreams))
	if err != nil {
		return nil, 0, err
	}
	s := sample(100*time.Millisecond, func() (uint64, error) { return sink.bytes.Load(), nil })
	defer s.Stop()
	steps := make([]testbed.RateStep, len(arPhases))
	for i, c := range arPhases {
		steps[i] = testbed.RateStep{Rate: c, For: phase}
	}
	starts := make([]time.Time, len(arPhases))
	var mu sync.Mutex
	stepErr := make(chan error, 1)
	go func() {
		stepErr <- tb.RunSteps(ctx, "router", "server", steps, func(i int, _ testbed.RateStep) {
			mu.Lock()
			starts[i] = time.Now()
			mu.Unlock()
		})
	}()
	var out []arPhase
	for i := range arPhases {
		var start time.Time
		for start.IsZero() {
			mu.Lock()
			start = starts[i]
			mu.Unlock()
			if start.IsZero() {
				time.Sleep(20 * time.Millisecond)
			}
		}
		time.Sleep(time.Until(start.Add(settle)))
		var p arPhase
		p.rateFirst = autoRate(d, ifc)
		t0 := time.Now()
		v, err := arVoice(e, client, voiceExe, phase-settle-time.Second)
		t1 := time.Now()
		if err != nil {
			return nil, 0, fmt.Errorf("phase %d: %w", i, err)
		}
		p.rateLast = autoRate(d, ifc)
		p.voice = v
		bps, _ := s.rate(t0, t1)
		p.goodput = bps * 8
		p.share = p.goodput / (float64(arPhases[i]) * tcpMSS / tcpFrame)
		out = append(out, p)
	}
	if err := <-stepErr; err != nil {
		return nil, 0, err
	}
	if err := wait(nil); err != nil {
		return nil, 0, fmt.Errorf("uploads: %w", err)
	}
	return out, idle.RTT.P99, nil
}

// autoRate is the automatic egress rate in force on link ifc (0: none).
func autoRate(d *lab.Daemon, ifc string) uint64 {
	st, err := d.Status()
	if err != nil {
		return 0
	}
	for _, l := range st.Links {
		if l.Name == ifc && l.EgressAuto != nil {
			return l.EgressAuto.InForce
		}
	}
	return 0
}

func arVoice(e *env, n *testbed.Node, exe string, dur time.Duration) (*traffic.VoiceResult, error) {
	var v traffic.VoiceResult
	if err := e.helper(n, exe, &v, "voice", "--to", arEcho, "--calls", "1", "--duration", dur.String()); err != nil {
		return nil, err
	}
	if v.Sent == 0 {
		return nil, fmt.Errorf("voice helper sent nothing")
	}
	return &v, nil
}
