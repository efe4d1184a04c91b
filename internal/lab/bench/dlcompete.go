package bench

import (
	"fmt"
	"math"
	"path/filepath"
	"time"

	"github.com/hostqos/hostqos/internal/plot"
)

// benchDownloadCompete reproduces Crossbow's Fig. 3: two TCP downloads
// compete for a downlink; midway, a download limit is set on one of them
// live (`hostqos rule set`); both rates are sampled over time and drawn.
func benchDownloadCompete(e *env, r *Report) error {
	const (
		downlink = 100e6
		limit    = 30e6
		rtt      = 40 * time.Millisecond
		every    = 250 * time.Millisecond
	)
	dur := e.dur(24*time.Second, 8*time.Second)
	setAt := dur / 2
	settle := e.dur(3*time.Second, 1500*time.Millisecond)
	appA, err := e.app("hqb-dl-one")
	if err != nil {
		return err
	}
	appB, err := e.app("hqb-dl-two")
	if err != nil {
		return err
	}
	p, err := e.path("benchdlc", rtt, downlink)
	if err != nil {
		return err
	}
	defer p.Close()
	d, err := e.dlDaemon(p, fmt.Sprintf("[[rule]]\nname = \"flow_tcp1\"\nexe = %q\n", appA))
	if err != nil {
		return err
	}
	defer d.Stop()
	r.setup("%s", hostLine())
	r.setup("path: client — router — server, %v round trip (the testbed's delay line), the router's egress toward the client shaped to %.0f Mbit/s (HTB: the downlink bottleneck the two downloads share); the real hostqosd on the client manages its link", rtt, downlink/1e6)
	r.setup("two apps (copies of the helper executable) each download over one TCP connection from an in-process bulk sender on the server for %v, sampling the bytes they read every %v; rule `flow_tcp1 --exe <app 1>` (no limit) from the start", dur, every)
	r.setup("at %v: `hostqos rule set flow_tcp1 --maxbw-in %.0fmbit` (live; no connection is reset); averages over [2 s, %v) and [%v, %v)", setAt, limit/1e6, setAt, setAt+settle, dur)

	bsA, err := startBulkSender(p.server, dlServer4.Addr())
	if err != nil {
		return err
	}
	bsB, err := startBulkSender(p.server, dlServer4.Addr())
	if err != nil {
		bsA.Close()
		return err
	}
	args := func(bs *bulkSender) []string {
		return []string{"--to", bs.addr(), "--duration", dur.String(), "--warmup", "0s", "--sample", every.String()}
	}
	start := time.Now()
	waitA, err := e.startHelper(p.client, appA, "download", args(bsA)...)
	if err != nil {
		bsA.Close()
		bsB.Close()
		return err
	}
	waitB, err := e.startHelper(p.client, appB, "download", args(bsB)...)
	if err != nil {
		_ = waitA(nil)
		bsA.Close()
		bsB.Close()
		return err
	}
	time.Sleep(time.Until(start.Add(setAt)))
	_, setErr := d.CLI("rule", "set", "flow_tcp1", "--maxbw-in", fmt.Sprintf("%.0fmbit", limit/1e6))
	setTime := time.Since(start)
	var a, b downloadResult
	errA, errB := waitA(&a), waitB(&b)
	rtxA, segsA := bsA.Close()
	rtxB, segsB := bsB.Close()
	for _, err := range []error{setErr, errA, errB} {
		if err != nil {
			return err
		}
	}

	// Rates per sample interval, against time since start.
	rates := func(res *downloadResult) (ts, mbps []float64) {
		for i := 1; i < len(res.Samples); i++ {
			s0, s1 := res.Samples[i-1], res.Samples[i]
			dt := float64(s1.UnixMS-s0.UnixMS) / 1e3
			if dt <= 0 || len(s0.Bytes) == 0 || len(s1.Bytes) == 0 {
				continue
			}
			ts = append(ts, float64(s1.UnixMS-start.UnixMilli())/1e3)
			mbps = append(mbps, float64(s1.Bytes[0]-s0.Bytes[0])*8/dt/1e6)
		}
		return ts, mbps
	}
	tA, yA := rates(&a)
	tB, yB := rates(&b)
	mean := func(ts, ys []float64, from, to time.Duration) float64 {
		var sum float64
		n := 0
		for i, t := range ts {
			if t > from.Seconds() && t <= to.Seconds() {
				sum += ys[i]
				n++
			}
		}
		if n == 0 {
			return math.NaN()
		}
		return sum / float64(n)
	}
	beforeA, beforeB := mean(tA, yA, 2*time.Second, setAt), mean(tB, yB, 2*time.Second, setAt)
	afterA, afterB := mean(tA, yA, setAt+settle, dur), mean(tB, yB, setAt+settle, dur)
	r.Columns = []string{"phase", "app 1 (flow_tcp1) Mbit/s", "app 2 Mbit/s", "together Mbit/s", "app 1 / its limit", "target"}
	r.row("both unlimited", f1(beforeA), f1(beforeB), f1(beforeA+beforeB), "—", "")
	ratio := afterA * 1e6 / limit
	r.row(fmt.Sprintf("app 1 limited to %.0f Mbit/s", limit/1e6), f1(afterA), f1(afterB), f1(afterA+afterB), f3(ratio),
		"0.97–1.01 "+mark(ratio >= 0.97 && ratio <= 1.01))
	r.metric("before_app1_mbps", beforeA)
	r.metric("before_app2_mbps", beforeB)
	r.metric("after_app1_mbps", afterA)
	r.metric("after_app2_mbps", afterB)
	r.note("retransmitted segments (the senders' TCP_INFO, whole run): app 1 %d of %d, app 2 %d of %d — before the limit the two share the bottleneck's queue, so both see losses there", rtxA, segsA, rtxB, segsB)
	r.note("the limit was set %.2f s after the start (the CLI's round trip included)", setTime.Seconds())
	r.note("seed (Crossbow Fig. 3): two netperf flows share a 10 GbE link about evenly; maxbw 800 Mb/s set on flow_tcp1 midway: after a short dip (TCP backing off from dropped packets) it holds 800 Mb/s and the other flow takes the rest. hostqos slows the sender by the receive window and drops nothing itself; what app 1 loses after the limit is lost in the bottleneck's queue, which app 2 keeps full")

	fig := &plot.Figure{
		Title:     fmt.Sprintf("two competing tcp downloads, maxbw_in %.0f Mbit/s set on app 1 at %.0f s (crossbow fig. 3)", limit/1e6, setTime.Seconds()),
		XLabel:    "time (s)",
		XFromZero: true,
		Panels: []plot.Panel{{
			Title:  fmt.Sprintf("goodput per %v (Mbit/s)", every),
			YLabel: "Mbit/s",
			Series: []plot.Series{
				{Name: "app 1 (flow_tcp1)", Color: plot.Green, X: tA, Y: yA},
				{Name: "app 2", Color: plot.Blue, X: tB, Y: yB},
				{Name: "app 1's limit", Color: plot.Black, Dashed: true, X: []float64{setTime.Seconds(), dur.Seconds()}, Y: []float64{limit / 1e6, limit / 1e6}},
			},
		}},
		Notes: []string{fmt.Sprintf("%.0f Mbit/s downlink (htb in the router), %d ms round trip; goodput = tcp payload read by each app; the limit is set live with hostqos rule set, no connection reset", downlink/1e6, rtt.Milliseconds())},
	}
	if e.opts.PlotDir != "" {
		files, err := plot.Save(fig, filepath.Join(e.opts.PlotDir, "download-compete"))
		if err != nil {
			return err
		}
		r.note("plot: %v", files)
	}
	return nil
}
