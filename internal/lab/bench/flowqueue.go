package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/hostqos/hostqos/internal/testbed"
	"github.com/hostqos/hostqos/internal/traffic"
)

const (
	fqEcho    = "198.18.0.2:7000"
	fqSink    = "198.18.0.2:5600"
	fqStreams = 4
)

// benchFlowQueue: an unmarked voice call (a sparse flow) behind 4 TCP
// uploads of the same class (default), on a link shaped at 5, 20 and 100
// Mbit/s by hostqosd with one FIFO per class (flow_queueing = "off") and
// with flow queueing ("htb", the default); this kernel has no fq_codel to
// compare with.
func benchFlowQueue(e *env, r *Report) error {
	idleDur := e.dur(3*time.Second, 2*time.Second)
	loadDur := e.dur(8*time.Second, 4*time.Second)
	warm := e.dur(2*time.Second, time.Second)
	voiceExe, err := e.app("hqb-voice")
	if err != nil {
		return err
	}
	r.setup("%s", hostLine())
	r.setup("namespaces snd → rcv over a veth; hostqosd on snd with the link's egress_rate R; no rules: %d TCP uploads (the benchmark process's) and a voice app's G.729 call (50 pkt/s, 32-byte payload) to a UDP echo in rcv are all in class default", fqStreams)
	r.setup("idle: the call alone for %v; loaded: the uploads started %v before a call of %v", idleDur, warm, loadDur)
	r.setup("FIFO: flow_queueing = \"off\" (the class's general leaf is one pfifo); hostqos FQ: flow_queueing = \"htb\" (sparse leaf + 8 flow buckets per class); fq_codel: not on this kernel")
	r.setup("share = the uploads' goodput at the sink / (R × 1448/1514); fairness = slowest / fastest upload")
	r.Columns = []string{"R", "queueing", "idle p99", "loaded p99", "loaded − idle", "voice loss", "uploads share", "fairness", "target"}
	for _, rate := range []uint64{5e6, 20e6, 100e6} {
		for _, mode := range []string{"off", "htb"} {
			if err := e.ctx.Err(); err != nil {
				return err
			}
			res, err := fqRun(e, rate, mode, voiceExe, idleDur, loadDur, warm)
			if err != nil {
				return fmt.Errorf("%d Mbit/s, flow_queueing %s: %w", rate/1e6, mode, err)
			}
			name := map[string]string{"off": "FIFO", "htb": "hostqos FQ"}[mode]
			d := res.loaded.RTT.P99 - res.idle.RTT.P99
			target := ""
			if mode == "htb" && rate == 20e6 {
				target = fmt.Sprintf("Δ ≤ 5 ms %s, share ≥ 85 %% %s, fairness ≥ 0.9 %s", mark(d <= 5), mark(res.share >= 0.85), mark(res.fair >= 0.9))
			}
			r.row(fmt.Sprintf("%d Mbit/s", rate/1e6), name, fmt.Sprintf("%.2f ms", res.idle.RTT.P99), fmt.Sprintf("%.2f ms", res.loaded.RTT.P99),
				fmt.Sprintf("%+.2f ms", d), fmt.Sprintf("%.2f %%", res.loaded.Loss*100), pct(res.share), fmt.Sprintf("%.2f", res.fair), target)
			k := fmt.Sprintf("%s_%d", mode, rate/1e6)
			r.metric("sparse_p99_over_idle_ms_"+k, d)
			r.metric("share_"+k, res.share)
			r.metric("fairness_"+k, res.fair)
		}
	}
	r.note("anchor (issue): one FIFO per class, 7 Mbit/s, 4 uploads: pinger p99 210 ms (idle 0.4 ms); target: within 5 ms of idle, uploads ≥ 85 %%, 4 TCP flows within 10 %% of each other")
	return nil
}

type fqResult struct {
	idle, loaded *traffic.VoiceResult
	share, fair  float64
}

func fqRun(e *env, rate uint64, mode, voiceExe string, idleDur, loadDur, warm time.Duration) (*fqResult, error) {
	tb, err := e.pair("benchfq", "snd", "rcv")
	if err != nil {
		return nil, err
	}
	defer tb.Close()
	snd, rcv := tb.Node("snd"), tb.Node("rcv")
	d, err := e.daemon(snd, fmt.Sprintf("flow_queueing = %q\n[[link]]\nname = %q\negress_rate = %q\n", mode, snd.Iface("rcv"), fmt.Sprintf("%dmbit", rate/1e6)))
	if err != nil {
		return nil, err
	}
	defer d.Stop()
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	var echo *traffic.Echo
	if err := rcv.Do(func() (err error) { echo, err = traffic.ListenEcho(ctx, fqEcho); return err }); err != nil {
		return nil, fmt.Errorf("start echo: %w", err)
	}
	echoDone := make(chan struct{})
	go func() { defer close(echoDone); _, _ = echo.Run(ctx, time.Hour) }()
	defer func() { cancel(); <-echoDone }()
	var sink *traffic.TCPSink
	if err := rcv.Do(func() (err error) {
		sink, err = traffic.ListenTCPSink(ctx, traffic.TCPSinkConfig{Listen: fqSink, Duration: time.Minute, Streams: fqStreams})
		return err
	}); err != nil {
		return nil, fmt.Errorf("start sink: %w", err)
	}
	sunk := make(chan *traffic.TCPSinkResult, 1)
	go func() { sr, _ := sink.Run(ctx); sunk <- sr }()

	res := &fqResult{}
	if res.idle, err = fqVoice(e, snd, voiceExe, idleDur); err != nil {
		return nil, fmt.Errorf("idle: %w", err)
	}
	// The uploads speak the sink's protocol (traffic.SendBulk), from
	// this process in snd: with no rules, who sends does not matter.
	bulkDone := make(chan error, 1)
	go func() {
		bulkDone <- snd.Do(func() error {
			_, err := traffic.SendBulk(ctx, traffic.BulkConfig{To: fqSink, Streams: fqStreams, Duration: warm + loadDur + time.Second, DSCP: traffic.NoDSCP})
			return err
		})
	}()
	time.Sleep(warm)
	res.loaded, err = fqVoice(e, snd, voiceExe, loadDur)
	werr := <-bulkDone
	if err != nil {
		return nil, fmt.Errorf("loaded: %w", err)
	}
	if werr != nil {
		return nil, fmt.Errorf("uploads: %w", werr)
	}
	sr := <-sunk
	if sr == nil || len(sr.Streams) == 0 {
		return nil, fmt.Errorf("the sink received no stream")
	}
	res.share = sr.GoodputBps / (float64(rate) * tcpMSS / tcpFrame)
	lo, hi := sr.Streams[0].GoodputBps, sr.Streams[0].GoodputBps
	for _, s := range sr.Streams[1:] {
		lo, hi = min(lo, s.GoodputBps), max(hi, s.GoodputBps)
	}
	if hi > 0 {
		res.fair = lo / hi
	}
	return res, nil
}

func fqVoice(e *env, n *testbed.Node, exe string, dur time.Duration) (*traffic.VoiceResult, error) {
	var v traffic.VoiceResult
	if err := e.helper(n, exe, &v, "voice", "--to", fqEcho, "--calls", "1", "--duration", dur.String()); err != nil {
		return nil, err
	}
	if v.Sent == 0 {
		return nil, fmt.Errorf("voice helper sent nothing")
	}
	return &v, nil
}
