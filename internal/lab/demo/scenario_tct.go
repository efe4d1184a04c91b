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

	"github.com/hostqos/hostqos/internal/lab"
	"github.com/hostqos/hostqos/internal/plot"
	"github.com/hostqos/hostqos/internal/testbed"
	"github.com/hostqos/hostqos/internal/traffic"
)

// The Q-Pod seed's TCP session completion time experiment (§4.6, Figures
// 17–18): a client connects to a server, sends a payload of 50 KB … 5 MB,
// waits for the server's message that it has everything, and closes; the
// completion time is measured with and without Q-Pod managing the client.
// Idle (Fig. 17, hosts on one switch) Q-Pod adds an almost constant 7 ms
// (its dynamic session discovery), about 150 % of a short session; through
// two routers whose 155 Mbit/s OC-3 link is congested by 160 Mbit/s of UDP
// CBR cross traffic (Fig. 18), the session marked by Q-Pod finishes much
// sooner than the unmarked one, thanks to the routers' DiffServ.
//
// Here: idle, client — router — server over veths (no rate limit);
// congested at 1/10 scale, a 15.5 Mbit/s DiffServ bottleneck at the router
// and 16 Mbit/s of unmarked UDP CBR from a cross-traffic host. Managed =
// hostqosd on the client with an exe rule putting the app in class
// interactive (AF41); unmanaged = no daemon at all. The transfers are
// `hostqos tool fct --direction up` (handshake to the server's
// acknowledgement, then close).
const (
	tctBottleneck = 15_500_000
	tctCrossBps   = 16_000_000
	// tctCongestedTimeout bounds one congested transfer: an unmarked one
	// may starve behind the CBR flood.
	tctCongestedTimeout = 15 * time.Second
)

// tctSizes are the payloads (KiB and MiB: 1024s; the seed's "50 kbytes …
// 5 mbytes").
var tctSizes = []string{"50KiB", "100KiB", "200KiB", "500KiB", "1MiB", "2MiB", "5MiB"}

// TCTSetup is what the qpod-tct scenario ran.
type TCTSetup struct {
	Payloads       []string `json:"payloads"`
	Transfers      int      `json:"transfers_per_payload"`
	CongestedCount int      `json:"congested_transfers_per_payload"`
	BottleneckBps  uint64   `json:"congested_bottleneck_bps"`
	RouterQueueMS  int      `json:"router_fifo_ms"`
	CrossBps       uint64   `json:"congested_cross_cbr_bps"`
	Commands       []string `json:"hostqos_commands"`
}

// TCTPoint is one payload size: completion times unmanaged and managed.
type TCTPoint struct {
	Size          string          `json:"payload"`
	Bytes         uint64          `json:"payload_bytes"`
	Plain         traffic.Summary `json:"unmanaged_ms"`
	Managed       traffic.Summary `json:"managed_ms"`
	PlainFailed   int             `json:"unmanaged_failed"`
	ManagedFailed int             `json:"managed_failed"`
	// OverheadMS and OverheadPct compare the medians: managed − unmanaged,
	// and that as a percentage of unmanaged.
	OverheadMS  float64 `json:"overhead_p50_ms"`
	OverheadPct float64 `json:"overhead_p50_pct"`
}

// TCTResult is the qpod-tct scenario's result.
type TCTResult struct {
	Setup     TCTSetup   `json:"setup"`
	Idle      []TCTPoint `json:"idle"`
	Congested []TCTPoint `json:"congested"`
	// RulePackets are the packets hostqos counted on the app's rule in the
	// managed runs (idle, congested): the evidence that it managed them.
	RulePackets [2]uint64 `json:"managed_rule_packets"`
}

func (r *runner) runTCT() (*TCTResult, error) {
	o := r.opts
	res := &TCTResult{Setup: TCTSetup{Payloads: tctSizes, Transfers: o.Transfers, CongestedCount: max(1, o.Transfers/10),
		BottleneckBps: tctBottleneck, RouterQueueMS: testbed.QueueTime, CrossBps: tctCrossBps}}
	r.progress("scenario qpod-tct (seed §4.6, Figs. 17-18): TCP transfers of %s, each connect → send → server's acknowledgement → close",
		strings.Join(tctSizes, ", "))
	app, err := r.copyApp("tcp-app")
	if err != nil {
		return nil, err
	}
	for _, congested := range []bool{false, true} {
		name, topo, count := "idle", starTopology("demotcti", 0, false), o.Transfers
		if congested {
			name, topo, count = "congested", starTopology("demotctc", tctBottleneck, true), res.Setup.CongestedCount
			r.progress("congested (Fig. 18 at 1/10 scale): %s DiffServ bottleneck, %s of unmarked UDP CBR cross traffic, %d transfers per payload",
				rate(tctBottleneck), rate(tctCrossBps), count)
		} else {
			r.progress("idle (Fig. 17): client — router — server over veths, no rate limit, %d transfers per payload", count)
		}
		tb, err := r.build(topo)
		if err != nil {
			return nil, err
		}
		// No TCP metrics cache: every transfer starts from the same slow
		// start, whichever ran before it.
		for _, n := range []string{"client", "server"} {
			if out, err := tb.Node(n).Command("sysctl", "-qw", "net.ipv4.tcp_no_metrics_save=1").CombinedOutput(); err != nil {
				return nil, fmt.Errorf("set net.ipv4.tcp_no_metrics_save in %s: %v: %s", n, err, out)
			}
		}
		var stopCross func() error
		if congested {
			if stopCross, err = r.startCBRCross(tb, tctCrossBps); err != nil {
				return nil, err
			}
			if err := r.sleep(time.Second); err != nil { // the queue fills
				return nil, err
			}
		}
		r.progress("  [1/2] %s, unmanaged (no hostqos):", name)
		plain, err := r.tctRuns(tb, app, count, congested)
		if err != nil {
			return nil, err
		}
		r.progress("  [2/2] %s, managed: starting hostqosd on the client, app → class interactive (AF41)", name)
		d, err := r.startDaemon(tb.Node("client"))
		if err != nil {
			return nil, err
		}
		cmds := [][]string{{"link", "set", tb.Node("client").Iface("router")}, {"rule", "add", "tcp-app", "--exe", app, "--class", "interactive"}}
		for _, c := range cmds {
			if err := r.cli(d, c...); err != nil {
				return nil, err
			}
			if !congested {
				res.Setup.Commands = append(res.Setup.Commands, "hostqos "+strings.Join(c, " "))
			}
		}
		managed, err := r.tctRuns(tb, app, count, congested)
		if err != nil {
			return nil, err
		}
		if n, err := rulePackets(d, "tcp-app"); err == nil {
			res.RulePackets[boolIdx(congested)] = n
		}
		if stopCross != nil {
			if err := stopCross(); err != nil {
				return nil, err
			}
		}
		var pts []TCTPoint
		for i, s := range tctSizes {
			p := TCTPoint{Size: s, Bytes: plain[i].Size, Plain: plain[i].FCT, Managed: managed[i].FCT,
				PlainFailed: plain[i].Failed, ManagedFailed: managed[i].Failed}
			p.OverheadMS = round3(p.Managed.P50 - p.Plain.P50)
			if p.Plain.P50 > 0 {
				p.OverheadPct = math.Round((p.Managed.P50-p.Plain.P50)/p.Plain.P50*1000) / 10
			}
			pts = append(pts, p)
		}
		if congested {
			res.Congested = pts
		} else {
			res.Idle = pts
		}
	}
	return res, nil
}

func boolIdx(b bool) int {
	if b {
		return 1
	}
	return 0
}

// rulePackets is the packet count of one rule in the daemon's stats.
func rulePackets(d *lab.Daemon, rule string) (uint64, error) {
	st, err := d.Stats("rules")
	if err != nil {
		return 0, err
	}
	for _, r := range st.Rules {
		if r.Rule == rule {
			return r.Packets, nil
		}
	}
	return 0, fmt.Errorf("rule %s not in the stats", rule)
}

// tctRuns runs count upload transfers of each payload size against a TCP
// sink on the server, one at a time, from the app on the client.
func (r *runner) tctRuns(tb *testbed.Testbed, app string, count int, congested bool) ([]traffic.FCTResult, error) {
	ctx, cancel := context.WithCancel(r.ctx)
	defer cancel()
	timeout := 10 * time.Second
	if congested {
		timeout = tctCongestedTimeout
	}
	var sink *traffic.TCPSink
	if err := tb.Node("server").Do(func() (err error) {
		sink, err = traffic.ListenTCPSink(ctx, traffic.TCPSinkConfig{Listen: hp(serverAddr, 0), Duration: time.Hour})
		return err
	}); err != nil {
		return nil, fmt.Errorf("open the TCP sink in the server: %w", err)
	}
	sinkDone := goSafe(func() error { _, err := sink.Run(ctx); return err })
	defer func() { cancel(); <-sinkDone }()
	// Warm-up (not counted): the first transfers after a start pay for
	// page faults and cold caches.
	if !congested {
		a, err := r.startApp(tb.Node("client"), "tcp-app", app, "tool", "fct", "--to", sink.Addr().String(), "--direction", traffic.FCTUp,
			"--count", "5", "--size", "1MiB", "-o", "json")
		if err != nil {
			return nil, err
		}
		if err := a.wait(ctx, time.Minute, nil); err != nil {
			return nil, err
		}
	}
	var out []traffic.FCTResult
	for _, s := range tctSizes {
		a, err := r.startApp(tb.Node("client"), "tcp-app", app, "tool", "fct", "--to", sink.Addr().String(), "--direction", traffic.FCTUp,
			"--count", strconv.Itoa(count), "--size", s, "--timeout", timeout.String(), "-o", "json")
		if err != nil {
			return nil, err
		}
		var fr traffic.FCTResult
		if err := a.wait(ctx, time.Duration(count)*timeout+30*time.Second, &fr); err != nil {
			return nil, err
		}
		if fr.Completed == 0 {
			r.progress("      %5s: none of %d completed within %v", s, fr.Count, timeout)
		} else {
			r.progress("      %5s: p50 %s ms, mean %s ms, p90 %s ms (%d of %d completed)", s, msStr(fr.FCT.P50), msStr(fr.FCT.Mean),
				msStr(fr.FCT.P90), fr.Completed, fr.Count)
		}
		out = append(out, fr)
	}
	return out, nil
}

// startCBRCross sends bps of unmarked UDP CBR from the cross host to a
// recorder on the server until the returned stop is called.
func (r *runner) startCBRCross(tb *testbed.Testbed, bps uint64) (stop func() error, err error) {
	ctx, cancel := context.WithCancel(r.ctx)
	var rec *recorder
	if err := tb.Node("server").Do(func() (err error) { rec, err = listenRecorder(hp(serverAddr, 0)); return err }); err != nil {
		cancel()
		return nil, fmt.Errorf("open the cross-traffic receiver in the server: %w", err)
	}
	recDone := goSafe(func() error { return rec.run(ctx, 0, time.Now().Add(time.Hour)) })
	cfg := traffic.CBRConfig{To: rec.addr().String(), Size: crossPayload, BitRate: bps, Duration: time.Hour, DSCP: traffic.NoDSCP}
	sendDone := goSafe(func() error {
		return tb.Node("cross").Do(func() error {
			_, err := traffic.SendCBR(ctx, cfg)
			if ctx.Err() != nil {
				return nil
			}
			return err
		})
	})
	stop = func() error {
		cancel()
		return errorsJoin(<-sendDone, <-recDone)
	}
	r.onCleanup("stop cross traffic", func() error { cancel(); return nil })
	return stop, nil
}

func errorsJoin(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

func (v *TCTResult) writeTable(w io.Writer) {
	s := v.Setup
	fmt.Fprintf(w, "\nQ-Pod TCP session completion time (seed §4.6, Figures 17-18): connect, send the payload, server's acknowledgement, close\n")
	fmt.Fprintf(w, "idle: client — router — server over veths, %d transfers per payload; congested (1/10 scale): %s DiffServ bottleneck, %s unmarked UDP CBR, %d transfers per payload\n\n",
		s.Transfers, rate(float64(s.BottleneckBps)), rate(float64(s.CrossBps)), s.CongestedCount)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "payload\tidle: unmanaged p50\tidle: hostqos p50\toverhead\tseed (Q-Pod)\tcongested: unmanaged p50\tcongested: hostqos p50")
	for i, p := range v.Idle {
		c := TCTPoint{}
		if i < len(v.Congested) {
			c = v.Congested[i]
		}
		seed := "≈ +7 ms"
		if i == 0 {
			seed = "≈ +7 ms (≈ 150 %)"
		}
		fmt.Fprintf(tw, "%s\t%s ms\t%s ms\t%+.2f ms (%+.1f %%)\t%s\t%s\t%s\n", p.Size, msStr(p.Plain.P50), msStr(p.Managed.P50), p.OverheadMS, p.OverheadPct, seed,
			tctCell(c.Plain, c.PlainFailed), tctCell(c.Managed, c.ManagedFailed))
	}
	tw.Flush()
	fmt.Fprintf(w, "hostqos counted %d packets (idle) and %d (congested) on the app's rule\n", v.RulePackets[0], v.RulePackets[1])
	fmt.Fprintf(w, "with hostqos: %s\n", strings.Join(s.Commands, "; "))
	fmt.Fprintln(w, "seed, congested: \"Q-Pod results in significantly lower completion times\" (no figures in the text); differences: 155 Mbit/s OC-3 and Cisco routers there, HTB DiffServ router here")
}

// tctCell is a median completion time and how many transfers timed out.
func tctCell(s traffic.Summary, failed int) string {
	switch {
	case s.N == 0 && failed > 0:
		return fmt.Sprintf("all %d timed out (> %v)", failed, tctCongestedTimeout)
	case failed > 0:
		return fmt.Sprintf("%s ms (%d timed out)", msStr(s.P50), failed)
	}
	return msStr(s.P50) + " ms"
}

func tctFigure(v *TCTResult) *plot.Figure {
	xy := func(pts []TCTPoint, y func(TCTPoint) float64) ([]float64, []float64) {
		var xs, ys []float64
		for _, p := range pts {
			xs = append(xs, math.Log10(float64(p.Bytes)/1024))
			ys = append(ys, y(p))
		}
		return xs, ys
	}
	ix1, iy1 := xy(v.Idle, func(p TCTPoint) float64 { return p.Plain.P50 })
	ix2, iy2 := xy(v.Idle, func(p TCTPoint) float64 { return p.Managed.P50 })
	ox, oy := xy(v.Idle, func(p TCTPoint) float64 { return p.OverheadMS })
	done := func(s traffic.Summary) float64 {
		if s.N == 0 {
			return math.NaN() // every transfer timed out
		}
		return s.P50
	}
	cx1, cy1 := xy(v.Congested, func(p TCTPoint) float64 { return done(p.Plain) })
	cx2, cy2 := xy(v.Congested, func(p TCTPoint) float64 { return done(p.Managed) })
	seedX := []float64{}
	seedY := []float64{}
	if len(ox) > 0 {
		seedX, seedY = []float64{ox[0], ox[len(ox)-1]}, []float64{7, 7}
	}
	return &plot.Figure{
		Title:  "q-pod figs. 17-18: tcp session completion time, unmanaged vs managed by hostqos",
		XLabel: "payload, log10 of kilobytes (1.7 = 50 kilobytes, 2.7 = 500, 3.7 = 5 megabytes)",
		Panels: []plot.Panel{
			{Title: "idle (fig. 17): completion time, median (ms)", Series: []plot.Series{
				{Name: "unmanaged", Color: plot.Red, Marks: plot.LinePoints, X: ix1, Y: iy1},
				{Name: "managed by hostqos (af41)", Color: plot.Green, Marks: plot.LinePoints, X: ix2, Y: iy2},
			}},
			{Title: "idle: overhead of being managed, median (ms)", Series: []plot.Series{
				{Name: "hostqos", Color: plot.Green, Marks: plot.LinePoints, X: ox, Y: oy},
				{Name: "q-pod (seed, fig. 17)", Color: plot.Grey, Dashed: true, X: seedX, Y: seedY},
			}},
			{Title: fmt.Sprintf("congested (fig. 18, 1/10 scale: %s bottleneck, %s cbr cross): completion time, median (ms)",
				rate(float64(v.Setup.BottleneckBps)), rate(float64(v.Setup.CrossBps))), Series: []plot.Series{
				{Name: "unmanaged (best effort)", Color: plot.Red, Marks: plot.LinePoints, X: cx1, Y: cy1},
				{Name: "managed by hostqos (af41)", Color: plot.Green, Marks: plot.LinePoints, X: cx2, Y: cy2},
			}},
		},
		Notes: []string{
			"transfers: hostqos tool fct --direction up (handshake to the server's acknowledgement), one at a time, each on a new connection",
			fmt.Sprintf("%d transfers per payload idle, %d congested; medians; a gap: every transfer of that payload timed out (%v)",
				v.Setup.Transfers, v.Setup.CongestedCount, tctCongestedTimeout),
		},
	}
}
