package bench

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/testbed"
	"github.com/hostqos/hostqos/qsock"
)

// The application benchmarks of the QSockets seed (§4.2: a video server,
// Figs. 4–6, and a remote sensor, Fig. 7) run a sender helper
// (`bench-helper qsock-app`) in the sending namespace, with a qsocket or
// with a plain socket, and an in-process receiver in the other one. Every
// message carries a small header: which stream, which frame or reading,
// its place in the frame, and its send time and deadline on
// CLOCK_MONOTONIC (one clock for every namespace of the host), so the
// receiver can tell late from on time and what never came.

const (
	appMagic  = 0x48514150 // "HQAP"
	appHeader = 32
	appMsgMax = 1200 // payload bytes per message; a frame is cut into messages
)

// appMsg is the header of one message.
type appMsg struct {
	Stream     uint8
	Type       byte   // 'I', 'P', 'B' (video frames), 'S' (a sensor reading)
	Idx, N     uint16 // the message's place in its frame, and the frame's messages
	Seq        uint32 // frame or reading number
	SentNS     int64  // CLOCK_MONOTONIC when handed to the socket
	DeadlineNS int64  // CLOCK_MONOTONIC deadline; 0: none
}

func (m appMsg) put(b []byte) {
	le := binary.LittleEndian
	le.PutUint32(b[0:], appMagic)
	b[4], b[5] = m.Stream, m.Type
	le.PutUint16(b[6:], m.Idx)
	le.PutUint16(b[8:], m.N)
	le.PutUint16(b[10:], 0)
	le.PutUint32(b[12:], m.Seq)
	le.PutUint64(b[16:], uint64(m.SentNS))
	le.PutUint64(b[24:], uint64(m.DeadlineNS))
}

func parseAppMsg(b []byte) (appMsg, bool) {
	le := binary.LittleEndian
	if len(b) < appHeader || le.Uint32(b) != appMagic {
		return appMsg{}, false
	}
	return appMsg{Stream: b[4], Type: b[5], Idx: le.Uint16(b[6:]), N: le.Uint16(b[8:]), Seq: le.Uint32(b[12:]),
		SentNS: int64(le.Uint64(b[16:])), DeadlineNS: int64(le.Uint64(b[24:]))}, true
}

// monoNS is CLOCK_MONOTONIC in nanoseconds.
func monoNS() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

// sleepUntilMono sleeps until CLOCK_MONOTONIC reaches t (ns).
func sleepUntilMono(t int64) {
	if d := time.Duration(t - monoNS()); d > 0 {
		time.Sleep(d)
	}
}

// Video: the seed's simulated MPEG server, a group of pictures
// IBBPBBPBBPBB at a fixed frame rate; I frames are non-droppable.
const videoGOP = "IBBPBBPBBPBB"

var videoFrameBytes = map[byte]int{'I': 12000, 'P': 4000, 'B': 1500}

// dropPriority: B frames go before P frames (I frames are non-droppable).
var dropPriority = map[byte]uint8{'P': 1, 'B': 2}

// videoBitrate is the stream's mean rate in bit/s of payload at fps.
func videoBitrate(fps int) float64 {
	sum := 0
	for i := 0; i < len(videoGOP); i++ {
		sum += videoFrameBytes[videoGOP[i]]
	}
	return float64(sum) / float64(len(videoGOP)) * 8 * float64(fps)
}

// appSent is what became of one frame or reading at the sender.
type appSent struct {
	Seq        uint32 `json:"seq"`
	Type       byte   `json:"type"`
	Msgs       uint16 `json:"msgs"`
	GenNS      int64  `json:"gen_ns"`      // when it was due (generated)
	DeadlineNS int64  `json:"deadline_ns"` // 0: none
	// Status: "sent", "dropped" (the qsocket's scheduler, at the source),
	// "partial" (some messages dropped or failed), "error" (send failed).
	Status string `json:"status"`
}

// appSendResult is the qsock-app helper's answer.
type appSendResult struct {
	Mode       string    `json:"mode"`
	Items      []appSent `json:"items"`
	SendErrors int       `json:"send_errors"`
	FirstError string    `json:"first_error,omitempty"`
	// Info is the qsocket's qinfo at the end (a qsock.Info; none for a
	// plain socket).
	Info json.RawMessage `json:"info,omitempty"`
}

// qinfoView is what the benchmarks read of a qsock.Info; the host
// scheduler's counters are nil when the library has none.
type qinfoView struct {
	SentMsgs, DroppedMsgs, LateMsgs, Packets                    uint64
	QDelayMean, QDelayP99                                       time.Duration
	QDelaySamples                                               int
	SchedLate, SchedDropped, SchedFrameDropped, SchedViolations *uint64
}

// appSenderConfig configures the qsock-app helper.
type appSenderConfig struct {
	App      string // video | sensor
	Mode     string // plain, or a qsocket scheduler: fifo, dwcs, edf-lossy, edf-lossless
	Class    string
	Socket   string // the daemon's API socket
	To       netip.AddrPort
	Stream   int
	Start    int64 // CLOCK_MONOTONIC ns of t = 0
	Duration time.Duration
	FPS      int
	Rate     uint64        // qsocket Params.Rate, bit/s
	IPG      time.Duration // dwcs
	OLN, OLD uint32
	Seed     uint64
	// Sensor: the gap between readings and how far ahead their deadline
	// is, each uniform in [min, max].
	GapMin, GapMax, AheadMin, AheadMax time.Duration
	Size                               int // sensor reading bytes
}

// helperQSockApp parses the qsock-app helper's flags, runs the sender and
// writes its JSON answer.
func helperQSockApp(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("bench-helper qsock-app", flag.ContinueOnError)
	var c appSenderConfig
	to := fs.String("to", "", "receiver host:port")
	fs.StringVar(&c.App, "app", "video", "video or sensor")
	fs.StringVar(&c.Mode, "mode", "plain", "plain, fifo, dwcs, edf-lossy or edf-lossless")
	fs.StringVar(&c.Class, "class", "interactive", "the qsocket's class")
	fs.StringVar(&c.Socket, "socket", "", "hostqosd API socket")
	fs.IntVar(&c.Stream, "stream", 0, "stream number in the header")
	fs.Int64Var(&c.Start, "start", 0, "CLOCK_MONOTONIC ns of t = 0")
	fs.DurationVar(&c.Duration, "duration", 10*time.Second, "how long from t = 0")
	fs.IntVar(&c.FPS, "fps", 20, "video: frames per second")
	fs.Uint64Var(&c.Rate, "rate", 0, "qsocket rate, bit/s")
	fs.DurationVar(&c.IPG, "ipg", 0, "dwcs: inter-packet gap")
	oln := fs.Uint("oln", 0, "dwcs: losses tolerated per window")
	old := fs.Uint("old", 0, "dwcs: window")
	fs.Uint64Var(&c.Seed, "seed", 13, "random seed")
	fs.DurationVar(&c.GapMin, "gap-min", 5*time.Millisecond, "sensor: least gap between readings")
	fs.DurationVar(&c.GapMax, "gap-max", 25*time.Millisecond, "sensor: largest gap between readings")
	fs.DurationVar(&c.AheadMin, "ahead-min", 5*time.Millisecond, "sensor: least deadline ahead")
	fs.DurationVar(&c.AheadMax, "ahead-max", 30*time.Millisecond, "sensor: largest deadline ahead")
	fs.IntVar(&c.Size, "size", 200, "sensor: bytes per reading")
	if err := fs.Parse(args); err != nil {
		return err
	}
	c.OLN, c.OLD = uint32(*oln), uint32(*old)
	ap, err := netip.ParseAddrPort(*to)
	if err != nil {
		return fmt.Errorf("bench-helper qsock-app --to %q: not host:port: %w", *to, err)
	}
	c.To = ap
	res, err := runAppSender(c)
	if err != nil {
		return err
	}
	return json.NewEncoder(stdout).Encode(res)
}

// appSocket sends one message: a qsocket's SendTo with the message's
// flags, or plain sendto(2).
type appSocket struct {
	q  *qsock.Socket
	fd int
	sa unix.Sockaddr
	to netip.AddrPort
}

func openAppSocket(c appSenderConfig) (*appSocket, error) {
	fam, sa := sockaddr(c.To)
	if c.Mode == "plain" {
		fd, err := unix.Socket(fam, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("open UDP socket: %w", err)
		}
		return &appSocket{fd: fd, sa: sa, to: c.To}, nil
	}
	qsock.Client = api.NewClient(c.Socket)
	p := qsock.Params{Class: c.Class, Scheduler: qsock.Scheduler(c.Mode), Rate: c.Rate, IPG: c.IPG, OLN: c.OLN, OLD: c.OLD}
	q, err := qsock.NewSocket(fam, unix.SOCK_DGRAM, 0, p)
	if err != nil {
		return nil, err
	}
	return &appSocket{q: q, fd: -1, sa: sa, to: c.To}, nil
}

func (s *appSocket) send(b []byte, f *qsock.Flags) error {
	if s.q != nil {
		_, err := s.q.SendTo(b, s.to, f)
		return err
	}
	return unix.Sendto(s.fd, b, 0, s.sa)
}

func (s *appSocket) close() {
	if s.q != nil {
		s.q.Close()
		return
	}
	unix.Close(s.fd)
}

// appItem is one frame or reading to send.
type appItem struct {
	typ      byte
	bytes    int
	gen      int64 // due, CLOCK_MONOTONIC ns
	deadline int64
}

// appSchedule is what the sender sends and when: the video's frames at
// fps (deadline: the next frame's time), or the sensor's readings at
// random gaps with random deadlines. The same seed gives every sender the
// same schedule, so the alternatives of a run send the same traffic.
func appSchedule(c appSenderConfig) []appItem {
	var out []appItem
	end := c.Start + c.Duration.Nanoseconds()
	switch c.App {
	case "video":
		period := time.Second.Nanoseconds() / int64(max(1, c.FPS))
		for f := 0; ; f++ {
			t := c.Start + int64(f)*period
			if t >= end {
				break
			}
			typ := videoGOP[f%len(videoGOP)]
			out = append(out, appItem{typ: typ, bytes: videoFrameBytes[typ], gen: t, deadline: t + period})
		}
	default:
		rng := rand.New(rand.NewPCG(c.Seed, 0x5e45))
		uni := func(lo, hi time.Duration) int64 {
			if hi <= lo {
				return lo.Nanoseconds()
			}
			return lo.Nanoseconds() + rng.Int64N(int64(hi-lo)+1)
		}
		for t := c.Start; t < end; t += uni(c.GapMin, c.GapMax) {
			out = append(out, appItem{typ: 'S', bytes: max(appHeader, c.Size), gen: t, deadline: t + uni(c.AheadMin, c.AheadMax)})
		}
	}
	return out
}

// runAppSender sends the schedule, each item at its time (late when a
// send blocked: then at once, as an application that fell behind does),
// a frame cut into messages of at most appMsgMax bytes.
func runAppSender(c appSenderConfig) (*appSendResult, error) {
	s, err := openAppSocket(c)
	if err != nil {
		return nil, err
	}
	defer s.close()
	items := appSchedule(c)
	res := &appSendResult{Mode: c.Mode, Items: make([]appSent, 0, len(items))}
	buf := make([]byte, appMsgMax)
	for seq, it := range items {
		sleepUntilMono(it.gen)
		n := (it.bytes + appMsgMax - 1) / appMsgMax
		rec := appSent{Seq: uint32(seq), Type: it.typ, Msgs: uint16(n), GenNS: it.gen, DeadlineNS: it.deadline}
		var sent, dropped, failed int
		for m := 0; m < n; m++ {
			l := min(appMsgMax, it.bytes-m*appMsgMax)
			hdr := appMsg{Stream: uint8(c.Stream), Type: it.typ, Idx: uint16(m), N: uint16(n), Seq: uint32(seq), SentNS: monoNS(), DeadlineNS: it.deadline}
			hdr.put(buf)
			f := &qsock.Flags{
				FrameStart:   m == 0,
				FrameEnd:     m == n-1,
				NonDroppable: it.typ == 'I',
				DropPriority: dropPriority[it.typ],
			}
			if c.Mode != "dwcs" {
				// DWCS gives each frame its deadline from ipg; the
				// others are told the item's own.
				f.Deadline = time.Now().Add(time.Duration(it.deadline - monoNS()))
			}
			switch err := s.send(buf[:max(l, appHeader)], f); {
			case err == nil:
				sent++
			case errors.Is(err, qsock.ErrDropped):
				dropped++
			default:
				failed++
				res.SendErrors++
				if res.FirstError == "" {
					res.FirstError = err.Error()
				}
			}
		}
		switch {
		case sent == n:
			rec.Status = "sent"
		case dropped == n:
			rec.Status = "dropped"
		case failed == n:
			rec.Status = "error"
		default:
			rec.Status = "partial"
		}
		res.Items = append(res.Items, rec)
	}
	if s.q != nil {
		in, err := s.q.Info()
		if err != nil {
			return nil, err
		}
		if res.Info, err = json.Marshal(in); err != nil {
			return nil, fmt.Errorf("encode qinfo: %w", err)
		}
	}
	return res, nil
}

// appArrival is one message as the receiver got it: its header and the
// kernel's receive time on CLOCK_MONOTONIC.
type appArrival struct {
	appMsg
	AtNS int64
}

// appReceiver collects every message that reaches a UDP port of a node.
type appReceiver struct {
	c    *net.UDPConn
	off  int64 // CLOCK_REALTIME − CLOCK_MONOTONIC, ns
	mu   sync.Mutex
	got  []appArrival
	bad  int
	done chan struct{}
}

// listenApp binds addr in node and records what arrives, stamped by the
// kernel (SO_TIMESTAMPNS) so the receiver's own scheduling does not add
// jitter that is not the network's.
func listenApp(node *testbed.Node, addr string) (*appReceiver, error) {
	r := &appReceiver{done: make(chan struct{})}
	err := node.Do(func() error {
		ua, err := net.ResolveUDPAddr("udp", addr)
		if err != nil {
			return err
		}
		r.c, err = net.ListenUDP("udp", ua)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("bind UDP %s in %s: %w", addr, node.Name, err)
	}
	_ = r.c.SetReadBuffer(8 << 20)
	raw, err := r.c.SyscallConn()
	if err == nil {
		var serr error
		err = raw.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1) })
		if err == nil {
			err = serr
		}
	}
	if err != nil {
		r.c.Close()
		return nil, fmt.Errorf("enable receive timestamps on %s: %w", addr, err)
	}
	var rt unix.Timespec
	m0 := monoNS()
	_ = unix.ClockGettime(unix.CLOCK_REALTIME, &rt)
	m1 := monoNS()
	r.off = rt.Nano() - (m0+m1)/2
	go r.read()
	return r, nil
}

func (r *appReceiver) read() {
	defer close(r.done)
	buf := make([]byte, 65536)
	oob := make([]byte, 128)
	for {
		n, oobn, _, _, err := r.c.ReadMsgUDP(buf, oob)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		at := monoNS()
		if cms, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil {
			for _, cm := range cms {
				if cm.Header.Level == unix.SOL_SOCKET && cm.Header.Type == unix.SCM_TIMESTAMPNS && len(cm.Data) >= 16 {
					ts := unix.Timespec{Sec: int64(binary.NativeEndian.Uint64(cm.Data)), Nsec: int64(binary.NativeEndian.Uint64(cm.Data[8:]))}
					at = ts.Nano() - r.off
				}
			}
		}
		m, ok := parseAppMsg(buf[:n])
		r.mu.Lock()
		if ok {
			r.got = append(r.got, appArrival{appMsg: m, AtNS: at})
		} else {
			r.bad++
		}
		r.mu.Unlock()
	}
}

// arrivals returns what arrived so far for stream.
func (r *appReceiver) arrivals(stream uint8) []appArrival {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []appArrival
	for _, a := range r.got {
		if a.Stream == stream {
			out = append(out, a)
		}
	}
	return out
}

func (r *appReceiver) Close() {
	r.c.Close()
	<-r.done
}
