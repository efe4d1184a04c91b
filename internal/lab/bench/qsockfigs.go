package bench

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"sort"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hostqos/hostqos/internal/plot"
	"github.com/hostqos/hostqos/internal/testbed"
)

// The QSockets seed's application benchmarks (§4.2): Figs. 4–5 (a 20 fps
// video server under a bulk "FTP" perturbation, frame rate and jitter),
// Fig. 6 (two managed and one unmanaged video stream on an overloaded
// link) and Fig. 7 (a remote sensor's deadline misses per 5 s, EDF lossy,
// EDF lossless and a plain socket). The senders run as helpers in the
// "app" namespace whose link hostqosd manages (its egress is the
// bottleneck, as the seed's host NIC was); the receiver runs here, in the
// "peer" namespace, and judges every frame and reading by the header the
// sender wrote (qsockapp.go).

const (
	qaRecv = "198.18.0.2:7400"
	qaSink = "198.18.0.2:5600"
	// qaFlood is where the perturbation's UDP flood goes: no one listens
	// (the peer drops it), it only loads app's link.
	qaFlood = "198.18.0.2:5700"

	videoFPS = 20
	// The video qsocket's DWCS attributes (docs/qsockets.md's worked
	// example): one frame every ipg = the frame period, at most oln of
	// every old consecutive frames lost; the rate the host admits it
	// at, enough for an I frame (12,000 B) within one period.
	videoOLN  = 1
	videoOLD  = 4
	videoRate = 4000000
	// ftpStreams are the TCP connections of one bulk "FTP" transfer. One
	// connection hardly perturbs a host queue on this kernel: TCP small
	// queues keep about two GSO packets of it in the qdisc, ~25 ms at 10
	// Mbit/s (a quick run: the plain stream's inter-frame p99 67 ms
	// during two such transfers); a transfer over four connections, as
	// FTP clients that split a file do, fills it as the seed's FTP did.
	ftpStreams    = 4
	qaMinDeadline = 5 * time.Millisecond
	qaMaxDeadline = 30 * time.Millisecond
)

// qaRun is one application run: a testbed (app → peer), the real
// hostqosd managing app's link at linkRate, a receiver in peer and a TCP
// sink for the perturbation.
type qaRun struct {
	e    *env
	tb   *testbed.Testbed
	app  *testbed.Node
	sock string
	recv *appReceiver
	sink *tcpMeter
	exe  string
	ftp  string
	t0   int64
	stop []func()
	pids []int // the senders'
}

func (e *env) qaStart(name string, linkRate string) (*qaRun, error) {
	q := &qaRun{e: e}
	ok := false
	defer func() {
		if !ok {
			q.Close()
		}
	}()
	tb, err := e.pair(name, "app", "peer")
	if err != nil {
		return nil, err
	}
	q.tb = tb
	q.stop = append(q.stop, func() { tb.Close() })
	q.app = tb.Node("app")
	d, err := e.daemon(q.app, fmt.Sprintf("[[link]]\nname = %q\negress_rate = %q\n", q.app.Iface("peer"), linkRate))
	if err != nil {
		return nil, err
	}
	q.stop = append(q.stop, func() { _ = d.Stop() })
	q.sock = d.Socket
	if q.recv, err = listenApp(tb.Node("peer"), qaRecv); err != nil {
		return nil, err
	}
	q.stop = append(q.stop, q.recv.Close)
	if q.sink, err = listenTCP(tb.Node("peer"), qaSink, false); err != nil {
		return nil, err
	}
	q.stop = append(q.stop, q.sink.Close)
	if q.exe, err = e.app("hqb-qsapp"); err != nil {
		return nil, err
	}
	if q.ftp, err = e.app("hqb-ftp"); err != nil {
		return nil, err
	}
	// t = 0 leaves the senders time to start and register their qsockets.
	q.t0 = monoNS() + (1500 * time.Millisecond).Nanoseconds()
	ok = true
	return q, nil
}

func (q *qaRun) Close() {
	for i := len(q.stop) - 1; i >= 0; i-- {
		q.stop[i]()
	}
	q.stop = nil
}

// sender starts a qsock-app helper; its wait decodes the answer.
func (q *qaRun) sender(app, mode string, stream int, dur time.Duration, extra ...string) (func(*appSendResult) error, error) {
	args := append([]string{"--to", qaRecv, "--app", app, "--mode", mode, "--socket", q.sock,
		"--stream", strconv.Itoa(stream), "--start", strconv.FormatInt(q.t0, 10), "--duration", dur.String()}, extra...)
	wait, pid, err := q.e.startHelperPID(q.app, q.exe, "qsock-app", args...)
	if err != nil {
		return nil, err
	}
	q.pids = append(q.pids, pid)
	return func(r *appSendResult) error { return wait(r) }, nil
}

// ftpAt starts a bulk TCP transfer (ftpStreams connections, no rule:
// class default) at t = at that lasts until t = end.
// finish starts the bulk perturbation at `at`, waits for the senders
// (their results, in order) and the perturbation to end, lets the last
// packets arrive, and returns the first error of any of them.
func (q *qaRun) finish(waits []func(*appSendResult) error, at, end time.Duration) ([]appSendResult, error) {
	waitF, errF := q.perturbAt(at, end, true, true)
	res := make([]appSendResult, len(waits))
	errs := []error{errF}
	for i, w := range waits {
		errs = append(errs, w(&res[i]))
	}
	if waitF != nil {
		errs = append(errs, waitF(nil))
	}
	time.Sleep(300 * time.Millisecond)
	return res, errors.Join(errs...)
}

func (q *qaRun) ftpAt(at, end time.Duration) (func(any) error, error) {
	sleepUntilMono(q.t0 + at.Nanoseconds())
	return q.e.startHelper(q.app, q.ftp, "tcp", "--to", qaSink, "--duration", (end - at).String(), "--streams", strconv.Itoa(ftpStreams))
}

// The perturbation beyond the FTP. The seed's FTP ran on a 400 MHz host
// whose CPU it shared with the senders; here a bulk TCP upload hardly
// loads a host queue (TCP small queues) and nothing loads the senders'
// CPU, so neither the plain socket nor lossless EDF missed anything.
// Two more loads make the perturbation what the seed's was:
//   - flood: a UDP flood in class default at twice the link's rate (as
//     an unresponsive sender, e.g. a UDP file transfer, would), which fills
//     the default class's queue the plain socket shares;
//   - stalls: the senders lose the CPU for stallOff in every stallEvery
//     (stopped and continued, SIGSTOP/SIGCONT, all three alike), as a
//     host busy with other work deschedules them; a reading whose
//     deadline passes in a stall is late, unless lossy EDF drops it.
const (
	floodRate  = 20_000_000 // bit/s, twice the qsock benchmarks' 10 Mbit/s link
	stallEvery = 100 * time.Millisecond
	stallOff   = 40 * time.Millisecond
)

// perturbAt starts, at t = at, the FTP and (if asked) the UDP flood and
// the senders' stalls, until t = end; its wait returns the first error.
func (q *qaRun) perturbAt(at, end time.Duration, flood, stall bool) (func(any) error, error) {
	waitF, err := q.ftpAt(at, end)
	if err != nil {
		return nil, err
	}
	waits := []func(any) error{waitF}
	if flood {
		w, err := q.e.startHelper(q.app, q.ftp, "flood", "--to", qaFlood, "--size", "1000", "--batch", "8",
			"--rate", strconv.Itoa(floodRate), "--duration", (end - at).String())
		if err != nil {
			_ = waitF(nil)
			return nil, err
		}
		waits = append(waits, w)
	}
	done := make(chan struct{})
	if stall {
		pids := append([]int(nil), q.pids...)
		go func() {
			defer close(done)
			stallUntilMono(pids, q.t0+end.Nanoseconds())
		}()
	} else {
		close(done)
	}
	return func(any) error {
		var errs []error
		for _, w := range waits {
			errs = append(errs, w(nil))
		}
		<-done
		return errors.Join(errs...)
	}, nil
}

// stallUntilMono stops and continues pids (stallOff in every stallEvery)
// until the monotonic time end (ns), leaving them running.
func stallUntilMono(pids []int, end int64) {
	signal := func(sig unix.Signal) {
		for _, p := range pids {
			_ = unix.Kill(p, sig)
		}
	}
	defer signal(unix.SIGCONT)
	for monoNS() < end {
		signal(unix.SIGSTOP)
		time.Sleep(stallOff)
		signal(unix.SIGCONT)
		time.Sleep(stallEvery - stallOff)
	}
}

// ---- analysis (pure: tested without traffic) ----

// frameOutcome is what became of one frame (or reading) end to end.
type frameOutcome struct {
	appSent
	Delivered bool  // every message arrived
	AtNS      int64 // arrival of its last message
}

// outcomes joins what the sender sent with what the receiver got.
func outcomes(items []appSent, arr []appArrival) []frameOutcome {
	type acc struct {
		n    int
		seen map[uint16]bool
		last int64
	}
	got := map[uint32]*acc{}
	for _, a := range arr {
		g := got[a.Seq]
		if g == nil {
			g = &acc{seen: map[uint16]bool{}}
			got[a.Seq] = g
		}
		if !g.seen[a.Idx] {
			g.seen[a.Idx] = true
			g.n++
		}
		g.last = max(g.last, a.AtNS)
	}
	out := make([]frameOutcome, len(items))
	for i, it := range items {
		out[i].appSent = it
		if g := got[it.Seq]; g != nil && g.n >= int(it.Msgs) {
			out[i].Delivered, out[i].AtNS = true, g.last
		}
	}
	return out
}

// fpsPerSecond counts the frames completed in each second [k, k+1) after
// t0 (by arrival), k = 0 … secs−1; X is the end of the second.
func fpsPerSecond(fr []frameOutcome, t0 int64, secs int) (x, y []float64) {
	y = make([]float64, secs)
	x = make([]float64, secs)
	for k := range x {
		x[k] = float64(k + 1)
	}
	for _, f := range fr {
		if !f.Delivered {
			continue
		}
		k := int((f.AtNS - t0) / int64(time.Second))
		if f.AtNS >= t0 && k < secs {
			y[k]++
		}
	}
	return x, y
}

// frameGaps are the times between consecutive delivered frames, in
// arrival order (ms), each at the arrival of the later one (s after t0).
func frameGaps(fr []frameOutcome, t0 int64) (x, gapMS []float64) {
	var at []int64
	for _, f := range fr {
		if f.Delivered {
			at = append(at, f.AtNS)
		}
	}
	sort.Slice(at, func(i, j int) bool { return at[i] < at[j] })
	for i := 1; i < len(at); i++ {
		x = append(x, float64(at[i]-t0)/1e9)
		gapMS = append(gapMS, float64(at[i]-at[i-1])/1e6)
	}
	return x, gapMS
}

// videoPhase sums up a stream over [from, to) s after t0.
type videoPhase struct {
	MeanFPS, MinFPS      float64
	Frames, Delivered    int
	LostByType           map[byte]int // frames generated in the phase and not delivered whole
	DroppedAtSource      int          // of those, dropped by the qsocket's scheduler
	GapP50, GapP99       float64      // ms
	GapMax, Jitter       float64      // ms; jitter = mean |gap − period|
	LateFrames           int          // delivered after their deadline
	ShareOfIdealDelivery float64      // delivered / generated
}

func summarizeVideo(fr []frameOutcome, t0 int64, from, to time.Duration, fps int) videoPhase {
	p := videoPhase{LostByType: map[byte]int{}}
	lo, hi := t0+from.Nanoseconds(), t0+to.Nanoseconds()
	for _, f := range fr {
		if f.GenNS < lo || f.GenNS >= hi {
			continue
		}
		p.Frames++
		switch {
		case f.Delivered:
			p.Delivered++
			if f.DeadlineNS > 0 && f.AtNS > f.DeadlineNS {
				p.LateFrames++
			}
		default:
			p.LostByType[f.Type]++
			if f.Status == "dropped" {
				p.DroppedAtSource++
			}
		}
	}
	if p.Frames > 0 {
		p.ShareOfIdealDelivery = float64(p.Delivered) / float64(p.Frames)
	}
	secs := int(math.Ceil(to.Seconds()))
	_, per := fpsPerSecond(fr, t0, secs)
	var sel []float64
	for k := int(from.Seconds()); k < secs && k < len(per); k++ {
		if float64(k) >= from.Seconds() && float64(k+1) <= to.Seconds() {
			sel = append(sel, per[k])
		}
	}
	if len(sel) > 0 {
		var sum float64
		for _, v := range sel {
			sum += v
		}
		p.MeanFPS, p.MinFPS = sum/float64(len(sel)), minOf(sel)
	}
	gx, gy := frameGaps(fr, t0)
	var gaps []float64
	period := 1000 / float64(max(1, fps))
	var dev float64
	for i, t := range gx {
		if t >= from.Seconds() && t < to.Seconds() {
			gaps = append(gaps, gy[i])
			dev += math.Abs(gy[i] - period)
		}
	}
	if len(gaps) > 0 {
		p.GapP50, p.GapP99 = percentile(gaps, 50), percentile(gaps, 99)
		p.GapMax = gaps[0]
		for _, g := range gaps {
			p.GapMax = max(p.GapMax, g)
		}
		p.Jitter = dev / float64(len(gaps))
	}
	return p
}

func (p videoPhase) lost() string {
	n := 0
	for _, v := range p.LostByType {
		n += v
	}
	return fmt.Sprintf("%d of %d (I %d, P %d, B %d)", n, p.Frames, p.LostByType['I'], p.LostByType['P'], p.LostByType['B'])
}

// missInterval counts a sensor's readings generated in [From, To) s.
type missInterval struct {
	From, To  float64
	Generated int
	Late      int // delivered after the deadline
	Lost      int // never delivered (dropped at the source, or on the way)
	Dropped   int // of Lost: dropped by the qsocket's scheduler at the source
}

func (m missInterval) Misses() int { return m.Late + m.Lost }

// sensorMisses counts late and lost readings per interval of every,
// by when each reading was generated.
func sensorMisses(fr []frameOutcome, t0 int64, every, dur time.Duration) []missInterval {
	n := int((dur + every - 1) / every)
	out := make([]missInterval, n)
	for i := range out {
		out[i].From, out[i].To = (time.Duration(i) * every).Seconds(), min(dur, time.Duration(i+1)*every).Seconds()
	}
	for _, f := range fr {
		i := int((f.GenNS - t0) / every.Nanoseconds())
		if f.GenNS < t0 || i >= n {
			continue
		}
		out[i].Generated++
		switch {
		case !f.Delivered:
			out[i].Lost++
			if f.Status == "dropped" {
				out[i].Dropped++
			}
		case f.DeadlineNS > 0 && f.AtNS > f.DeadlineNS:
			out[i].Late++
		}
	}
	return out
}

func sumMisses(ms []missInterval, from, to float64) missInterval {
	t := missInterval{From: from, To: to}
	for _, m := range ms {
		if m.From >= from && m.To <= to {
			t.Generated += m.Generated
			t.Late += m.Late
			t.Lost += m.Lost
			t.Dropped += m.Dropped
		}
	}
	return t
}

// perturbation draws vertical dashed grey lines at the given times (s)
// from 0 to top: where the bulk transfers start.
func perturbation(top float64, at ...float64) plot.Series {
	s := plot.Series{Name: "bulk tcp (\"ftp\") starts", Color: plot.Grey, Dashed: true}
	for i, t := range at {
		if i > 0 {
			s.X, s.Y = append(s.X, t), append(s.Y, math.NaN())
		}
		s.X, s.Y = append(s.X, t, t), append(s.Y, 0, top)
	}
	return s
}

func (e *env) savePlot(r *Report, fig *plot.Figure, name string) error {
	if e.opts.PlotDir == "" {
		return nil
	}
	files, err := plot.Save(fig, filepath.Join(e.opts.PlotDir, name))
	if err != nil {
		return err
	}
	r.note("plot: %v", files)
	return nil
}

func qinfoNote(name string, res *appSendResult) string {
	if len(res.Info) == 0 {
		return fmt.Sprintf("%s: plain socket; send errors %d %s", name, res.SendErrors, res.FirstError)
	}
	var in qinfoView
	if err := json.Unmarshal(res.Info, &in); err != nil {
		return fmt.Sprintf("%s: qinfo unreadable: %v", name, err)
	}
	host := "no host scheduler counters"
	if in.SchedLate != nil && in.SchedDropped != nil && in.SchedFrameDropped != nil && in.SchedViolations != nil {
		host = fmt.Sprintf("the host's scheduler: predicted late %d, dropped %d (+%d with their frame), window violations %d",
			*in.SchedLate, *in.SchedDropped, *in.SchedFrameDropped, *in.SchedViolations)
	}
	return fmt.Sprintf("%s: qinfo sent %d, dropped at the source %d, sent late %d messages; %s; %d packets left through the classifier; queueing delay mean %.2f ms p99 %.2f ms (%d samples); send errors %d %s",
		name, in.SentMsgs, in.DroppedMsgs, in.LateMsgs, host, in.Packets, float64(in.QDelayMean)/1e6, float64(in.QDelayP99)/1e6, in.QDelaySamples, res.SendErrors, res.FirstError)
}

// ---- Figs. 4–5 ----

// benchQSockVideo: seed Figs. 4 and 5 — a 20 fps video stream on a
// qsocket (dwcs, I frames non-droppable) and the same stream on a plain
// socket, side by side through a 10 Mbit/s host link, while a bulk TCP
// transfer starts at 15 s and a second one at 30 s.
func benchQSockVideo(e *env, r *Report) error {
	dur := e.dur(45*time.Second, 15*time.Second)
	p1, p2 := e.dur(15*time.Second, 5*time.Second), e.dur(30*time.Second, 10*time.Second)
	const link = "10mbit"
	q, err := e.qaStart("benchqv", link)
	if err != nil {
		return err
	}
	defer q.Close()
	r.setup("%s", hostLine())
	r.setup("namespaces app → peer over a veth; the real hostqosd manages app's link with egress_rate %s (the bottleneck: the seed's 10 Mbit/s host NIC); the receiver in peer stamps each message on arrival (SO_TIMESTAMPNS)", link)
	r.setup("video: %d fps, group of pictures %s, I %d B, P %d B, B %d B (%.0f kbit/s of payload), each frame cut into messages of ≤ %d B, deadline = the next frame's time", videoFPS, videoGOP, videoFrameBytes['I'], videoFrameBytes['P'], videoFrameBytes['B'], videoBitrate(videoFPS)/1e3, appMsgMax)
	r.setup("two senders side by side for %v, the same frames at the same times: a qsocket (class interactive, scheduler dwcs: ipg %v, oln/old %d/%d, rate %.0f Mbit/s; I frames non-droppable, drop priority B 2, P 1, frames marked) and a plain UDP socket (no rule: class default)", dur, time.Second/videoFPS, videoOLN, videoOLD, videoRate/1e6)
	r.setup("perturbation (the seed's FTP, on a host whose CPU it shared): a bulk TCP upload over %d connections (class default) and a UDP flood at %.0f Mbit/s (class default) start at %v; a second upload at %v, from when on both senders lose the CPU for %v in every %v (SIGSTOP/SIGCONT); all to the end", ftpStreams, floodRate/1e6, p1, p2, stallOff, stallEvery)
	r.setup("delivered fps = frames whose every message arrived, per second of arrival; inter-frame time = between consecutive delivered frames; jitter = mean |inter-frame time − %d ms|", 1000/videoFPS)

	waitQ, err := q.sender("video", "dwcs", 1, dur, "--fps", strconv.Itoa(videoFPS), "--class", "interactive",
		"--ipg", (time.Second / videoFPS).String(), "--oln", strconv.Itoa(videoOLN), "--old", strconv.Itoa(videoOLD),
		"--rate", strconv.Itoa(videoRate))
	if err != nil {
		return err
	}
	waitP, err := q.sender("video", "plain", 2, dur, "--fps", strconv.Itoa(videoFPS))
	if err != nil {
		_ = waitQ(&appSendResult{})
		return err
	}
	waitF1, err1 := q.perturbAt(p1, dur, true, false)
	var waitF2 func(any) error
	var err2 error
	if err1 == nil {
		waitF2, err2 = q.perturbAt(p2, dur, false, true)
	}
	var resQ, resP appSendResult
	errs := []error{err1, err2, waitQ(&resQ), waitP(&resP)}
	if waitF1 != nil {
		errs = append(errs, waitF1(nil))
	}
	if waitF2 != nil {
		errs = append(errs, waitF2(nil))
	}
	time.Sleep(300 * time.Millisecond) // the last frames' way through the queue
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	frQ := outcomes(resQ.Items, q.recv.arrivals(1))
	frP := outcomes(resP.Items, q.recv.arrivals(2))
	r.Columns = []string{"socket", "phase", "delivered fps (mean / min 1-s)", "frames lost (by type)", "late frames", "inter-frame p50 / p99 / max", "jitter", "seed"}
	phases := []struct {
		name     string
		from, to time.Duration
		seedQ    string
		seedP    string
	}{
		{"quiet", time.Second, p1, "≈ 20 fps", "≈ 20 fps"},
		{"1 transfer", p1, p2, "close to 20 fps (DWCS drops a few P/B)", "drops considerably"},
		{"2 transfers", p2, dur, "close to 20 fps, low jitter", "drops considerably, high jitter"},
	}
	for _, alt := range []struct {
		name string
		key  string
		fr   []frameOutcome
		qs   bool
	}{{"qsocket dwcs", "qsock", frQ, true}, {"plain socket", "plain", frP, false}} {
		for _, ph := range phases {
			s := summarizeVideo(alt.fr, q.t0, ph.from, ph.to, videoFPS)
			seed := ph.seedP
			if alt.qs {
				seed = ph.seedQ
			}
			r.row(alt.name, fmt.Sprintf("%s [%.0f, %.0f) s", ph.name, ph.from.Seconds(), ph.to.Seconds()),
				fmt.Sprintf("%.1f / %.0f", s.MeanFPS, s.MinFPS), s.lost(), strconv.Itoa(s.LateFrames),
				fmt.Sprintf("%.1f / %.1f / %.1f ms", s.GapP50, s.GapP99, s.GapMax), fmt.Sprintf("%.1f ms", s.Jitter), seed)
			k := alt.key + "_" + key(ph.name)
			r.metric(k+"_fps_mean", s.MeanFPS)
			r.metric(k+"_fps_min", s.MinFPS)
			r.metric(k+"_jitter_ms", s.Jitter)
			r.metric(k+"_gap_p99_ms", s.GapP99)
			r.metric(k+"_lost_I", float64(s.LostByType['I']))
		}
	}
	r.note("%s", qinfoNote("qsocket", &resQ))
	r.note("%s", qinfoNote("plain socket", &resP))
	r.note("bulk transfer goodput at the sink: %.1f MB in all", float64(q.sink.bytes.Load())/1e6)
	r.note("seed (Figs. 4–5, dual P2-400, 10 Mbit/s NIC, DWCS in a Linux qdisc): no numbers given; the QSockets server stays close to 20 fps through both perturbations (the small dip: P and B frames DWCS dropped, I frames non-droppable), the plain server's frame rate drops considerably when the FTP starts, and its inter-frame time jumps while the QSockets stream's never rises significantly")

	secs := int(dur.Seconds())
	xq, yq := fpsPerSecond(frQ, q.t0, secs)
	xp, yp := fpsPerSecond(frP, q.t0, secs)
	top := math.Max(25, math.Max(maxOf(yq), maxOf(yp))+2)
	fps := &plot.Figure{
		Title:     "video at 20 fps under a bulk tcp perturbation: qsocket (dwcs) vs plain socket (qsockets fig. 4)",
		XLabel:    "time (s)",
		XFromZero: true,
		Panels: []plot.Panel{{
			Title:  "delivered frame rate (frames completed per second at the receiver)",
			YLabel: "frames/s",
			YMax:   top,
			Series: []plot.Series{
				{Name: "qsocket, dwcs", Color: plot.Green, Marks: plot.LinePoints, X: xq, Y: yq},
				{Name: "plain socket", Color: plot.Red, Marks: plot.LinePoints, X: xp, Y: yp},
				{Name: "20 fps", Color: plot.Black, Dashed: true, X: []float64{0, dur.Seconds()}, Y: []float64{videoFPS, videoFPS}},
				perturbation(top, p1.Seconds(), p2.Seconds()),
			},
		}},
		Notes: []string{fmt.Sprintf("%s host link (hostqosd, htb); both streams send the same frames side by side; a bulk tcp upload starts at %.0f s and another at %.0f s", link, p1.Seconds(), p2.Seconds())},
	}
	if err := e.savePlot(r, fps, "qsock-video-fps"); err != nil {
		return err
	}
	gxq, gyq := frameGaps(frQ, q.t0)
	gxp, gyp := frameGaps(frP, q.t0)
	gtop := math.Max(maxOf(gyq), maxOf(gyp)) * 1.05
	jit := &plot.Figure{
		Title:     "time between consecutive frames at the receiver: qsocket (dwcs) vs plain socket (qsockets fig. 5)",
		XLabel:    "time (s)",
		XFromZero: true,
		Panels: []plot.Panel{{
			Title:  "inter-frame time (ms)",
			YLabel: "ms",
			Series: []plot.Series{
				{Name: "plain socket", Color: plot.Red, X: gxp, Y: gyp},
				{Name: "qsocket, dwcs", Color: plot.Green, X: gxq, Y: gyq},
				{Name: "50 ms (20 fps)", Color: plot.Black, Dashed: true, X: []float64{0, dur.Seconds()}, Y: []float64{50, 50}},
				perturbation(gtop, p1.Seconds(), p2.Seconds()),
			},
		}},
		Notes: []string{"each point: the arrival of a frame's last message minus the previous delivered frame's (kernel receive timestamps); a lost frame shows as a longer gap"},
	}
	return e.savePlot(r, jit, "qsock-video-jitter")
}

// ---- Fig. 6 ----

// benchQSockStreams: seed Fig. 6 — two video qsockets (dwcs) at 20 and 15
// fps and a plain-socket video at 20 fps through a host link overloaded
// by a bulk TCP upload for the whole run.
func benchQSockStreams(e *env, r *Report) error {
	dur := e.dur(30*time.Second, 10*time.Second)
	const (
		link = "10mbit"
		rate = 2000000 // each qsocket's admitted rate: an I frame in 48 ms
	)
	q, err := e.qaStart("benchqs", link)
	if err != nil {
		return err
	}
	defer q.Close()
	streams := []struct {
		name, mode string
		fps        int
	}{{"qsocket 20 fps", "dwcs", 20}, {"qsocket 15 fps", "dwcs", 15}, {"plain socket 20 fps", "plain", 20}}
	var offered float64
	for _, s := range streams {
		offered += videoBitrate(s.fps)
	}
	r.setup("%s", hostLine())
	r.setup("namespaces app → peer over a veth; the real hostqosd manages app's link with egress_rate %s; the three streams offer %.0f kbit/s of payload and a bulk TCP upload over %d connections (class default) runs from the start to the end with a UDP flood at %.0f Mbit/s (class default) and stalls of the senders (no CPU for %v in every %v, SIGSTOP/SIGCONT): the link is overloaded and the host busy", link, offered/1e3, ftpStreams, floodRate/1e6, stallOff, stallEvery)
	r.setup("video as in qsock-video (group of pictures %s, I/P/B %d/%d/%d B, messages ≤ %d B); streams 1 and 2 are qsockets (class interactive, dwcs with ipg = their frame period, oln/old %d/%d, rate %.0f Mbit/s each, I frames non-droppable), stream 3 a plain UDP socket (class default); all three side by side for %v", videoGOP, videoFrameBytes['I'], videoFrameBytes['P'], videoFrameBytes['B'], appMsgMax, videoOLN, videoOLD, rate/1e6, dur)
	var waits []func(*appSendResult) error
	for i, s := range streams {
		w, err := q.sender("video", s.mode, i+1, dur, "--fps", strconv.Itoa(s.fps), "--class", "interactive",
			"--ipg", (time.Second / time.Duration(s.fps)).String(), "--oln", strconv.Itoa(videoOLN), "--old", strconv.Itoa(videoOLD),
			"--rate", strconv.Itoa(rate))
		if err != nil {
			for _, w := range waits {
				_ = w(&appSendResult{})
			}
			return err
		}
		waits = append(waits, w)
	}
	res, err := q.finish(waits, 0, dur)
	if err != nil {
		return err
	}
	r.Columns = []string{"stream", "wanted fps", "delivered fps (mean / min 1-s)", "frames lost (by type)", "late frames", "inter-frame p99", "seed"}
	fig := &plot.Figure{
		Title:     "two qsocket video streams (20 and 15 fps) and a plain one (20 fps) on an overloaded link (qsockets fig. 6)",
		XLabel:    "time (s)",
		XFromZero: true,
		Notes:     []string{fmt.Sprintf("%s host link (hostqosd, htb), %.0f kbit/s of video offered beside a bulk tcp upload (%d connections) all along; frames completed per second at the receiver", link, offered/1e3, ftpStreams)},
	}
	pn := plot.Panel{Title: "delivered frame rate", YLabel: "frames/s", YMax: 25}
	seed := []string{"≈ 20 fps (its required QoS)", "≈ 15 fps (its required QoS)", "much lower, not starved"}
	colors := []plot.Series{{Color: plot.Green}, {Color: plot.Blue}, {Color: plot.Red}}
	for i, s := range streams {
		fr := outcomes(res[i].Items, q.recv.arrivals(uint8(i+1)))
		sum := summarizeVideo(fr, q.t0, 2*time.Second, dur, s.fps)
		r.row(s.name, strconv.Itoa(s.fps), fmt.Sprintf("%.1f / %.0f", sum.MeanFPS, sum.MinFPS), sum.lost(), strconv.Itoa(sum.LateFrames), fmt.Sprintf("%.1f ms", sum.GapP99), seed[i])
		r.metric(fmt.Sprintf("stream%d_fps_mean", i+1), sum.MeanFPS)
		r.metric(fmt.Sprintf("stream%d_lost_I", i+1), float64(sum.LostByType['I']))
		r.metric(fmt.Sprintf("stream%d_late_frames", i+1), float64(sum.LateFrames))
		r.note("%s", qinfoNote(s.name, &res[i]))
		x, y := fpsPerSecond(fr, q.t0, int(dur.Seconds()))
		pn.Series = append(pn.Series, plot.Series{Name: s.name, Color: colors[i].Color, Marks: plot.LinePoints, X: x, Y: y})
	}
	r.note("bulk upload goodput at the sink: %.1f MB in all", float64(q.sink.bytes.Load())/1e6)
	r.note("figures over [2 s, %v) (after the first group of pictures); seed (Fig. 6): no numbers given — the two managed streams achieve 20 and 15 fps, the unmanaged 20 fps stream gets a much lower rate, not starved because video is not work conserving", dur)
	fig.Panels = []plot.Panel{pn}
	return e.savePlot(r, fig, "qsock-streams")
}

// ---- Fig. 7 ----

// benchQSockEDF: seed Fig. 7 — a remote sensor sends readings at random
// gaps, each with a random deadline; three senders side by side (qsocket
// edf-lossy, qsocket edf-lossless, plain socket) with the same readings;
// a bulk TCP transfer starts half-way. Deadline misses (late + lost) per 5
// s interval at the receiver.
func benchQSockEDF(e *env, r *Report) error {
	dur := e.dur(60*time.Second, 20*time.Second)
	pAt := dur / 2
	const (
		link  = "10mbit"
		every = 5 * time.Second
	)
	q, err := e.qaStart("benchqe", link)
	if err != nil {
		return err
	}
	defer q.Close()
	alts := []struct{ name, mode string }{{"edf-lossy", "edf-lossy"}, {"edf-lossless", "edf-lossless"}, {"plain socket", "plain"}}
	r.setup("%s", hostLine())
	r.setup("namespaces app → peer over a veth; the real hostqosd manages app's link with egress_rate %s; the receiver in peer stamps each reading on arrival (SO_TIMESTAMPNS) and compares with the deadline it carries (CLOCK_MONOTONIC, one clock for the host)", link)
	r.setup("sensor: 200-byte readings at random gaps of 5 … 25 ms (aperiodic, ≈ 67/s), each with a random deadline 5 … 30 ms after it is generated; three senders side by side for %v with the same readings at the same times: qsockets (class interactive, rate 1 Mbit/s each) with edf-lossy and edf-lossless, and a plain UDP socket (class default)", dur)
	r.setup("perturbation (the seed's FTP, on a host whose CPU it shared) from %v to the end: a bulk TCP upload over %d connections and a UDP flood at %.0f Mbit/s (both class default), and the three senders lose the CPU for %v in every %v (SIGSTOP/SIGCONT); misses per %v interval by generation time: late = arrived after its deadline, lost = never arrived (dropped at the source by edf-lossy, or on the way)", pAt, ftpStreams, floodRate/1e6, stallOff, stallEvery, every)
	var waits []func(*appSendResult) error
	for i, a := range alts {
		w, err := q.sender("sensor", a.mode, i+1, dur, "--class", "interactive", "--seed", "7", "--rate", "1000000",
			"--ahead-min", qaMinDeadline.String(), "--ahead-max", qaMaxDeadline.String())
		if err != nil {
			for _, w := range waits {
				_ = w(&appSendResult{})
			}
			return err
		}
		waits = append(waits, w)
	}
	res, err := q.finish(waits, pAt, dur)
	if err != nil {
		return err
	}
	misses := make([][]missInterval, len(alts))
	for i := range alts {
		misses[i] = sensorMisses(outcomes(res[i].Items, q.recv.arrivals(uint8(i+1))), q.t0, every, dur)
	}
	r.Columns = []string{"interval (s)", "readings"}
	for _, a := range alts {
		r.Columns = append(r.Columns, a.name+": late + lost")
	}
	for k := range misses[0] {
		row := []string{fmt.Sprintf("%.0f–%.0f", misses[0][k].From, misses[0][k].To), strconv.Itoa(misses[0][k].Generated)}
		for i := range alts {
			m := misses[i][k]
			row = append(row, fmt.Sprintf("%d + %d", m.Late, m.Lost))
		}
		r.row(row...)
	}
	for _, span := range []struct {
		name     string
		from, to float64
	}{{"before the transfer", 0, pAt.Seconds()}, {"during the transfer", pAt.Seconds(), dur.Seconds()}} {
		var row []string
		for i, a := range alts {
			t := sumMisses(misses[i], span.from, span.to)
			if i == 0 {
				row = []string{"**" + span.name + "**", strconv.Itoa(t.Generated)}
			}
			row = append(row, fmt.Sprintf("**%d + %d** (%.1f %%)", t.Late, t.Lost, 100*float64(t.Misses())/math.Max(1, float64(t.Generated))))
			k := key(a.name) + "_" + key(span.name)
			r.metric(k+"_late", float64(t.Late))
			r.metric(k+"_lost", float64(t.Lost))
			r.metric(k+"_generated", float64(t.Generated))
		}
		r.row(row...)
	}
	for i, a := range alts {
		r.note("%s", qinfoNote(a.name, &res[i]))
	}
	r.note("seed (Fig. 7): no numbers given — after the FTP starts at 30 s the lossless and the non-QSocket flows both miss many more deadlines; the lossy flow has no late packets and drops fewer readings than the other two lose")

	top := 0.0
	late := plot.Panel{Title: fmt.Sprintf("late readings per %v (arrived after the deadline)", every), YLabel: "readings"}
	lost := plot.Panel{Title: fmt.Sprintf("lost readings per %v (dropped at the source or on the way)", every), YLabel: "readings"}
	colors := []plot.Series{{Color: plot.Green}, {Color: plot.Blue}, {Color: plot.Red}}
	for i := len(alts) - 1; i >= 0; i-- { // the plain socket first: qsockets drawn over it
		a := alts[i]
		var x, yl, yd []float64
		for _, m := range misses[i] {
			x = append(x, m.To)
			yl = append(yl, float64(m.Late))
			yd = append(yd, float64(m.Lost))
			top = max(top, float64(m.Late), float64(m.Lost))
		}
		late.Series = append(late.Series, plot.Series{Name: a.name, Color: colors[i].Color, Marks: plot.LinePoints, X: x, Y: yl})
		lost.Series = append(lost.Series, plot.Series{Name: a.name, Color: colors[i].Color, Marks: plot.LinePoints, X: x, Y: yd})
	}
	top = math.Max(1, top*1.05)
	late.Series = append(late.Series, perturbation(top, pAt.Seconds()))
	lost.Series = append(lost.Series, perturbation(top, pAt.Seconds()))
	late.YMax, lost.YMax = top, top
	fig := &plot.Figure{
		Title:     "remote sensor: deadline misses per 5 s, edf lossy vs edf lossless vs plain socket (qsockets fig. 7)",
		XLabel:    "time (s, end of the interval)",
		XFromZero: true,
		Panels:    []plot.Panel{late, lost},
		Notes:     []string{fmt.Sprintf("%s host link (hostqosd, htb); readings every 5–25 ms with deadlines 5–30 ms ahead, the same for the three senders; a bulk tcp upload starts at %.0f s", link, pAt.Seconds())},
	}
	return e.savePlot(r, fig, "qsock-edf")
}
