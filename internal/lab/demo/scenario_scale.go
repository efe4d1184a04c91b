package demo

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/netip"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/lab"
	"github.com/hostqos/hostqos/internal/plot"
	"github.com/hostqos/hostqos/internal/testbed"
	"github.com/hostqos/hostqos/internal/traffic"
)

// The Q-Pod seed's stress test (§4.7, Figures 19–20): UDP CBR sessions of
// 1 Mbit/s each, run as Q-Pod-managed applications, launched 2 s apart
// until 75 run concurrently (max load at 150 s, sustained 320 s, lifetime
// 470 s each); every session reached throughput/offered = 1 (throughput
// measured at run time by Q-Pod's driver).
//
// Here each session is its own process (a copy of the hostqos binary
// running `tool udp-send`), selected by one exe rule of the real hostqosd
// on the client (class interactive, AF41; the client link shaped at
// 100 Mbit/s like the seed's Fast Ethernet end systems). Session i starts
// at i·gap and all end together after `hold` at full load. Each session's
// ratio is measured three ways: at the sender (what the generator sent),
// by hostqos's per-flow counters during the hold, and at the receiver.
const (
	scaleRate     = 1_000_000
	scalePayload  = 1200
	scaleLinkRate = "100mbit"
)

// ScaleSetup is what the qpod-scale scenario ran.
type ScaleSetup struct {
	Sessions   int      `json:"sessions"`
	GapS       float64  `json:"gap_s"`
	HoldS      float64  `json:"hold_s"`
	RateBps    float64  `json:"session_rate_bps"`
	Payload    int      `json:"udp_payload_bytes"`
	MaxLoadAtS float64  `json:"max_load_at_s"`
	TotalBps   float64  `json:"total_bps_at_max_load"`
	Commands   []string `json:"hostqos_commands"`
}

// Session is one session's measurements.
type Session struct {
	ID     int     `json:"id"`
	StartS float64 `json:"start_s"`
	EndS   float64 `json:"end_s"`
	// SenderRatio: IP bits the generator sent per second of its run / rate.
	SenderRatio float64 `json:"sender_ratio"`
	// HostQoSRatio: packets hostqos counted for the flow per second during
	// the hold, over the offered packet rate (-1 if the flow was not found).
	HostQoSRatio float64 `json:"hostqos_ratio"`
	// ReceiverRatio: IP bits received per second of the sender's run / rate.
	ReceiverRatio float64 `json:"receiver_ratio"`
	Loss          float64 `json:"loss"`
	Rule          string  `json:"hostqos_rule,omitempty"`
	DSCP          string  `json:"dscp_at_server"`
}

// ScaleResult is the qpod-scale scenario's result.
type ScaleResult struct {
	Setup    ScaleSetup `json:"setup"`
	Sessions []Session  `json:"sessions"`
	// Minimum and mean of each ratio over all sessions.
	MinSender    float64 `json:"min_sender_ratio"`
	MeanSender   float64 `json:"mean_sender_ratio"`
	MinHostQoS   float64 `json:"min_hostqos_ratio"`
	MeanHostQoS  float64 `json:"mean_hostqos_ratio"`
	MinReceiver  float64 `json:"min_receiver_ratio"`
	MeanReceiver float64 `json:"mean_receiver_ratio"`
	// AtOne counts sessions whose receiver ratio is ≥ 0.99.
	AtOne int `json:"sessions_receiver_ratio_ge_0_99"`
}

func scaleTopology() testbed.Topology {
	return testbed.Topology{
		Name:  "demoscale",
		Nodes: []testbed.NodeSpec{{Name: "client"}, {Name: "server"}},
		Links: []testbed.LinkSpec{{A: "client", B: "server",
			AAddrs: []netip.Prefix{mp("198.18.1.1/24")}, BAddrs: []netip.Prefix{mp("198.18.1.2/24")}}},
	}
}

func (r *runner) runScale() (*ScaleResult, error) {
	o := r.opts
	ctx, cancel := context.WithCancel(r.ctx)
	defer cancel()
	n := o.Sessions
	total := time.Duration(n-1)*o.Gap + o.Hold
	setup := ScaleSetup{Sessions: n, GapS: o.Gap.Seconds(), HoldS: o.Hold.Seconds(), RateBps: scaleRate, Payload: scalePayload,
		MaxLoadAtS: (time.Duration(n-1) * o.Gap).Seconds(), TotalBps: float64(n) * scaleRate}
	r.progress("scenario qpod-scale (seed §4.7, Figs. 19-20): %d UDP sessions of %s (%d-byte payload), launched %s apart, all %s at full load (%s)",
		n, rate(scaleRate), scalePayload, secs(o.Gap), secs(o.Hold), rate(setup.TotalBps))
	tb, err := r.build(scaleTopology())
	if err != nil {
		return nil, err
	}
	client, server := tb.Node("client"), tb.Node("server")
	exe, err := r.copyApp("scale-app")
	if err != nil {
		return nil, err
	}
	r.progress("  starting hostqosd on the client; every session is the app %s", exe)
	d, err := r.startDaemon(client)
	if err != nil {
		return nil, err
	}
	cmds := [][]string{
		{"link", "set", client.Iface("server"), "--egress-rate", scaleLinkRate},
		{"rule", "add", "sessions", "--exe", exe, "--class", "interactive"},
	}
	for _, c := range cmds {
		if err := r.cli(d, c...); err != nil {
			return nil, err
		}
		setup.Commands = append(setup.Commands, "hostqos "+strings.Join(c, " "))
	}
	serverIP := server.AddrV4()
	var sink *traffic.Sink
	if err := server.Do(func() (err error) {
		sink, err = traffic.ListenSink(ctx, traffic.SinkConfig{Listen: hp(serverIP, 0), Duration: total + 15*time.Second, Flows: n})
		return err
	}); err != nil {
		return nil, fmt.Errorf("open the receiver in the server: %w", err)
	}
	var sres *traffic.SinkResult
	sinkDone := goSafe(func() (err error) { sres, err = sink.Run(ctx); return err })
	t0 := time.Now()
	apps := make([]*app, n)
	starts := make([]float64, n)
	var snap1, snap2 []api.FlowStat
	var snapT1, snapT2 time.Time
	holdStart := t0.Add(time.Duration(n-1) * o.Gap)
	for i := 0; i < n; i++ {
		at := t0.Add(time.Duration(i) * o.Gap)
		if err := r.sleep(time.Until(at)); err != nil {
			return nil, err
		}
		dur := total - time.Duration(i)*o.Gap
		starts[i] = time.Since(t0).Seconds()
		if apps[i], err = r.startApp(client, fmt.Sprintf("session %d", i), exe, "tool", "udp-send", "--to", sink.Addr().String(),
			"--rate", "1mbit", "--size", strconv.Itoa(scalePayload), "--duration", dur.String(), "--flow", strconv.Itoa(i), "-o", "json"); err != nil {
			return nil, err
		}
		if (i+1)%10 == 0 || i == n-1 {
			r.progress("  t=%5.1fs  %d sessions running (%s offered)", starts[i], i+1, rate(float64(i+1)*scaleRate))
		}
	}
	// hostqos's per-flow counters over the hold (all sessions running).
	q := min(o.Hold/4, 2*time.Second)
	if err := r.sleep(time.Until(holdStart.Add(q))); err != nil {
		return nil, err
	}
	snap1, snapT1 = flowSnapshot(d)
	if err := r.sleep(time.Until(holdStart.Add(o.Hold - q))); err != nil {
		return nil, err
	}
	snap2, snapT2 = flowSnapshot(d)
	r.progress("  full load held for %s; waiting for the sessions to end ...", secs(o.Hold))
	sent := make([]traffic.SendResult, n)
	for i, a := range apps {
		if err := a.wait(ctx, total+30*time.Second, &sent[i]); err != nil {
			return nil, err
		}
	}
	select {
	case err := <-sinkDone:
		if err != nil {
			return nil, fmt.Errorf("receiver: %w", err)
		}
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	res := &ScaleResult{Setup: setup}
	byFlow := map[uint32]traffic.FlowResult{}
	for _, f := range sres.Flows {
		byFlow[f.Flow] = f
	}
	offeredPPS := scaleRate / float64(8*(scalePayload+28))
	dt := snapT2.Sub(snapT1).Seconds()
	for i := 0; i < n; i++ {
		s := Session{ID: i, StartS: round3(starts[i]), EndS: round3(starts[i] + sent[i].DurationS), HostQoSRatio: -1}
		if sent[i].DurationS > 0 {
			s.SenderRatio = round3(sent[i].IPBitRate / scaleRate)
		}
		if f, ok := byFlow[uint32(i)]; ok {
			if sent[i].DurationS > 0 {
				s.ReceiverRatio = round3(float64(f.IPBytes) * 8 / sent[i].DurationS / scaleRate)
			}
			s.Loss = f.Loss
			s.DSCP = dscpMain(f.DSCP)
			if a, b, ok := flowPair(snap1, snap2, f.Source); ok && dt > 0 {
				s.HostQoSRatio = round3(float64(b.Packets-a.Packets) / dt / offeredPPS)
				s.Rule = b.Rule
			}
		}
		res.Sessions = append(res.Sessions, s)
	}
	res.summarize()
	r.progress("  throughput/offered: receiver min %.3f mean %.3f; sender min %.3f; hostqos counters min %.3f",
		res.MinReceiver, res.MeanReceiver, res.MinSender, res.MinHostQoS)
	return res, nil
}

func flowSnapshot(d *lab.Daemon) ([]api.FlowStat, time.Time) {
	st, err := d.Stats("flows")
	t := time.Now()
	if err != nil {
		return nil, t
	}
	return st.Flows, t
}

// flowPair finds the UDP flow whose local address is src (the session's
// source address as the receiver saw it) in both snapshots.
func flowPair(a, b []api.FlowStat, src string) (api.FlowStat, api.FlowStat, bool) {
	find := func(fs []api.FlowStat) (api.FlowStat, bool) {
		for _, f := range fs {
			if f.Proto == "udp" && f.Local == src {
				return f, true
			}
		}
		return api.FlowStat{}, false
	}
	x, ok1 := find(a)
	y, ok2 := find(b)
	return x, y, ok1 && ok2 && y.Packets >= x.Packets
}

func (s *ScaleResult) summarize() {
	s.MinSender, s.MinHostQoS, s.MinReceiver = math.Inf(1), math.Inf(1), math.Inf(1)
	var ss, sh, sr float64
	nh := 0
	for _, x := range s.Sessions {
		s.MinSender = math.Min(s.MinSender, x.SenderRatio)
		s.MinReceiver = math.Min(s.MinReceiver, x.ReceiverRatio)
		ss += x.SenderRatio
		sr += x.ReceiverRatio
		if x.HostQoSRatio >= 0 {
			s.MinHostQoS = math.Min(s.MinHostQoS, x.HostQoSRatio)
			sh += x.HostQoSRatio
			nh++
		}
		if x.ReceiverRatio >= 0.99 {
			s.AtOne++
		}
	}
	n := float64(len(s.Sessions))
	if n > 0 {
		s.MeanSender, s.MeanReceiver = round3(ss/n), round3(sr/n)
	}
	if nh > 0 {
		s.MeanHostQoS = round3(sh / float64(nh))
	} else {
		s.MinHostQoS = -1
		s.MeanHostQoS = -1
	}
	for _, p := range []*float64{&s.MinSender, &s.MinReceiver} {
		if math.IsInf(*p, 1) {
			*p = 0
		}
	}
}

func (s *ScaleResult) writeTable(w io.Writer) {
	st := s.Setup
	fmt.Fprintf(w, "\nQ-Pod scalability test (seed §4.7, Figures 19-20)\n\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "\tseed\there")
	fmt.Fprintf(tw, "sessions (UDP CBR, managed)\t75 × 1 Mbit/s\t%d × %s (%d-byte payload), hostqos rule → class interactive\n", st.Sessions, rate(st.RateBps), st.Payload)
	fmt.Fprintf(tw, "inter-arrival time\t2 s\t%gs\n", st.GapS)
	fmt.Fprintf(tw, "max load reached at / held for\t150 s / 320 s\t%gs / %gs\n", st.MaxLoadAtS, st.HoldS)
	fmt.Fprintf(tw, "total rate at max load\t75 Mbit/s\t%s\n", rate(st.TotalBps))
	fmt.Fprintf(tw, "throughput/offered, sender side (min / mean)\t1 for all 75 (measured by Q-Pod's driver)\t%.3f / %.3f\n", s.MinSender, s.MeanSender)
	fmt.Fprintf(tw, "throughput/offered, hostqos flow counters during the hold (min / mean)\t\t%s / %s\n", ratioStr(s.MinHostQoS), ratioStr(s.MeanHostQoS))
	fmt.Fprintf(tw, "throughput/offered, at the receiver (min / mean)\t\t%.3f / %.3f\n", s.MinReceiver, s.MeanReceiver)
	fmt.Fprintf(tw, "sessions with receiver ratio ≥ 0.99\t75 of 75\t%d of %d\n", s.AtOne, len(s.Sessions))
	tw.Flush()
	var low []string
	sorted := append([]Session(nil), s.Sessions...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].ReceiverRatio < sorted[j].ReceiverRatio })
	for _, x := range sorted {
		if x.ReceiverRatio >= 0.99 || len(low) == 10 {
			break
		}
		low = append(low, fmt.Sprintf("#%d %.3f", x.ID, x.ReceiverRatio))
	}
	if len(low) > 0 {
		fmt.Fprintf(w, "sessions below 0.99 at the receiver: %s\n", strings.Join(low, ", "))
	}
	fmt.Fprintf(w, "hostqos: %s\n", strings.Join(st.Commands, "; "))
}

func scaleFigure(s *ScaleResult) *plot.Figure {
	var lx, ly, ix, rcv, snd, hq []float64
	for _, x := range s.Sessions {
		lx = append(lx, x.StartS, x.EndS)
		ly = append(ly, float64(x.ID+1), float64(x.ID+1))
		ix = append(ix, float64(x.ID+1))
		rcv = append(rcv, x.ReceiverRatio)
		snd = append(snd, x.SenderRatio)
		h := x.HostQoSRatio
		if h < 0 {
			h = math.NaN()
		}
		hq = append(hq, h)
	}
	n := float64(len(s.Sessions))
	return &plot.Figure{
		Title:     fmt.Sprintf("q-pod fig. 20: %d sessions of 1 Mbit/s launched %gs apart", len(s.Sessions), s.Setup.GapS),
		XFromZero: true,
		Panels: []plot.Panel{
			{Title: "session lifetimes (session number over time in s)", Segments: true, YMax: n + 1, XLabel: "time since the first launch (s)",
				Series: []plot.Series{{Name: "session running", Color: plot.Blue, X: lx, Y: ly}}},
			{Title: "throughput / offered load per session", YMax: 1.25, XMin: 0, XMax: n + 1, XLabel: "session number",
				Series: []plot.Series{
					{Name: "at the receiver", Color: plot.Green, Marks: plot.Points, X: ix, Y: rcv},
					{Name: "at the sender", Color: plot.Black, Dashed: true, X: ix, Y: snd},
					{Name: "hostqos flow counters (hold)", Color: plot.Blue, Dashed: true, X: ix, Y: hq},
				}},
		},
		Notes: []string{
			fmt.Sprintf("receiver ratio min %.3f mean %.3f; %d of %d sessions ≥ 0.99 (seed: all 75 at 1)", s.MinReceiver, s.MeanReceiver, s.AtOne, len(s.Sessions)),
		},
	}
}
