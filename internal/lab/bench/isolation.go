package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/hostqos/hostqos/internal/lab"
	"github.com/hostqos/hostqos/internal/testbed"
	"github.com/hostqos/hostqos/internal/traffic"
)

const (
	isoLink   = 20e6
	isoEcho   = "198.18.0.2:7000"
	isoSink   = "198.18.0.2:5500"
	isoCalls  = 5
	isoStream = 2
)

type isoResult struct {
	idle, loaded   *traffic.VoiceResult
	bulkBps        float64
	bulkShare      float64
	bulkWindowSecs float64
}

// benchIsolation: voice round-trip p99 idle and under two saturating bulk
// TCP streams on a 20 Mbit/s egress — plain FIFO, hostqos without a voice
// rule, hostqos with the voice app in class voice.
func benchIsolation(e *env, r *Report) error {
	idleDur := e.dur(5*time.Second, 2*time.Second)
	loadDur := e.dur(10*time.Second, 4*time.Second)
	warm := e.dur(2*time.Second, time.Second)
	tb, err := e.pair("benchiso", "snd", "rcv")
	if err != nil {
		return err
	}
	defer tb.Close()
	snd, rcv := tb.Node("snd"), tb.Node("rcv")
	sndIf := snd.Iface("rcv")
	voiceExe, err := e.app("hqb-voice")
	if err != nil {
		return err
	}
	bulkExe, err := e.app("hqb-bulk")
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	var echo *traffic.Echo
	if err := rcv.Do(func() error {
		var err error
		echo, err = traffic.ListenEcho(ctx, isoEcho)
		return err
	}); err != nil {
		return fmt.Errorf("start echo in rcv: %w", err)
	}
	echoDone := make(chan struct{})
	go func() {
		defer close(echoDone)
		_, _ = echo.Run(ctx, time.Hour)
	}()
	defer func() { cancel(); <-echoDone }()
	sink, err := listenTCP(rcv, isoSink, false)
	if err != nil {
		return err
	}
	defer sink.Close()

	r.setup("%s", hostLine())
	r.setup("namespaces snd → rcv over a veth; the 20 Mbit/s bottleneck is snd's egress; %d G.729 calls (50 pkt/s, 32-byte payload, each its own socket) from a voice app to a UDP echo in rcv, round-trip time per packet", isoCalls)
	r.setup("load: a bulk app with %d TCP streams to a sink in rcv, started %v before the calls; idle: calls alone for %v; loaded: calls for %v", isoStream, warm, idleDur, loadDur)
	r.setup("FIFO: `tc` HTB root at 20mbit with one class and HTB's default leaf FIFO (pfifo, limit = txqueuelen 1000) — no hostqos")
	r.setup("hostqos: real hostqosd, link egress_rate 20mbit (its HTB tree; leaves keep HTB's default FIFO); first without any rule (bulk and voice share class default), then with `rule add --exe <voice app> --class voice`")
	r.setup("bulk share: goodput at the sink during the loaded calls / (20 Mbit/s × 1448/1514, the payload share of full frames)")

	results := map[string]*isoResult{}
	measure := func(name string) error {
		res := &isoResult{}
		var err error
		if res.idle, err = isoVoice(e, snd, voiceExe, idleDur); err != nil {
			return fmt.Errorf("%s, idle: %w", name, err)
		}
		wait, err := e.startHelper(snd, bulkExe, "tcp", "--to", isoSink, "--duration", (warm + loadDur + time.Second).String(), "--streams", fmt.Sprint(isoStream))
		if err != nil {
			return err
		}
		s := sample(100*time.Millisecond, func() (uint64, error) { return sink.bytes.Load(), nil })
		time.Sleep(warm)
		t0 := time.Now()
		res.loaded, err = isoVoice(e, snd, voiceExe, loadDur)
		t1 := time.Now()
		werr := wait(nil)
		s.Stop()
		if err != nil {
			return fmt.Errorf("%s, loaded: %w", name, err)
		}
		if werr != nil {
			return fmt.Errorf("%s, bulk: %w", name, werr)
		}
		// The bulk app has exited, but the kernel still sends what its
		// sockets buffered: wait for the streams to end before the next
		// measurement.
		if !sink.drained(60 * time.Second) {
			return fmt.Errorf("%s: bulk streams still open 60 s after the sender exited", name)
		}
		bps, win := s.rate(t0, t1)
		res.bulkBps = bps * 8
		res.bulkShare = res.bulkBps / (isoLink * tcpMSS / tcpFrame)
		res.bulkWindowSecs = win.Seconds()
		results[name] = res
		return nil
	}

	const (
		altFIFO    = "FIFO (plain HTB 20mbit, one queue)"
		altNoRule  = "hostqos, no voice rule"
		altHostqos = "hostqos, voice app in class voice"
	)
	// FIFO.
	for _, c := range [][]string{
		{"qdisc", "add", "dev", sndIf, "root", "handle", "1:", "htb", "default", "1"},
		{"class", "add", "dev", sndIf, "parent", "1:", "classid", "1:1", "htb", "rate", "20mbit", "ceil", "20mbit"},
	} {
		if err := run(snd, "tc", c...); err != nil {
			return err
		}
	}
	err = measure(altFIFO)
	if derr := run(snd, "tc", "qdisc", "del", "dev", sndIf, "root"); derr != nil && err == nil {
		err = derr
	}
	if err != nil {
		return err
	}
	// hostqos.
	var d *lab.Daemon
	if d, err = e.daemon(snd, fmt.Sprintf("[[link]]\nname = %q\negress_rate = \"20mbit\"\n", sndIf)); err != nil {
		return err
	}
	defer d.Stop()
	if err := measure(altNoRule); err != nil {
		return err
	}
	if _, err := d.CLI("rule", "add", "bench-voice", "--exe", voiceExe, "--class", "voice"); err != nil {
		return err
	}
	if err := measure(altHostqos); err != nil {
		return err
	}
	if pk, err := rulePackets(d, "bench-voice"); err == nil {
		r.metric("voice_rule_packets", float64(pk))
		if pk == 0 {
			r.note("WARNING: the voice rule counted no packets")
		}
	}

	r.Columns = []string{"alternative", "idle p99 RTT", "loaded p99 RTT", "loaded − idle", "voice loss (loaded)", "bulk goodput", "bulk share of link", "target", "anchor"}
	for _, alt := range []string{altFIFO, altNoRule, altHostqos} {
		res := results[alt]
		ip, lp := res.idle.RTT.P99, res.loaded.RTT.P99
		target, anchor := "—", ""
		if alt == altHostqos {
			target = fmt.Sprintf("Δ ≤ 2 ms %s, loss 0 %s, bulk ≥ 95 %% %s", mark(lp <= ip+2), mark(res.loaded.Lost == 0), mark(res.bulkShare >= 0.95))
		}
		if alt == altFIFO {
			anchor = "FIFO here ≈ 280 ms (DESIGN.md)"
		}
		r.row(alt, fmt.Sprintf("%.2f ms", ip), fmt.Sprintf("%.2f ms", lp), fmt.Sprintf("%+.2f ms", lp-ip),
			fmt.Sprintf("%d/%d (%.2f %%)", res.loaded.Lost, res.loaded.Sent, res.loaded.Loss*100),
			traffic.FormatRate(res.bulkBps), pct(res.bulkShare), target, anchor)
		k := key(alt)
		r.metric("idle_p99_ms_"+k, ip)
		r.metric("loaded_p99_ms_"+k, lp)
		r.metric("loss_"+k, res.loaded.Loss)
		r.metric("bulk_share_"+k, res.bulkShare)
	}
	r.note("RTT = voice app → echo → voice app; only the forward direction crosses the bottleneck. p50 loaded: FIFO %.2f ms, hostqos without rule %.2f ms, hostqos voice %.2f ms",
		results[altFIFO].loaded.RTT.P50, results[altNoRule].loaded.RTT.P50, results[altHostqos].loaded.RTT.P50)
	return nil
}

func isoVoice(e *env, snd *testbed.Node, exe string, dur time.Duration) (*traffic.VoiceResult, error) {
	var v traffic.VoiceResult
	if err := e.helper(snd, exe, &v, "voice", "--to", isoEcho, "--calls", fmt.Sprint(isoCalls), "--duration", dur.String()); err != nil {
		return nil, err
	}
	if v.Sent == 0 {
		return nil, fmt.Errorf("voice helper sent nothing")
	}
	return &v, nil
}
