package integration

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math/rand"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/qsock"
)

// TestQSockScheduling: the host-wide schedulers, end to end —
// the real daemon, the Go library, real datagrams through a 10 Mbit/s
// link saturated by a best-effort bulk transfer.
//   - EDF: the same bursty stream of messages with deadlines 5–60 ms
//     from an edf-lossy qsocket, an edf-lossless one and a plain socket:
//     lossy delivers nothing late and drops only what could not make it;
//     lossless delivers everything, the late ones late; the plain socket,
//     queued behind the bulk, misses most.
//   - DWCS: two streams of 100 messages/s (ipg 10 ms) over their
//     declared rates, loss tolerances 2/4 and 1/3: at the receiver no
//     window of old consecutive messages lacks more than oln, the
//     non-droppable messages all arrive, and the bulk transfer takes the
//     rest of the link.
//
// The plain socket is the baseline of one FIFO per class: with flow
// queueing its stream would be a flow of its own beside the bulk's
// (TestFlowQueueingSparseFlowBehindUploads), so it runs without.
func TestQSockScheduling(t *testing.T) {
	e := newEnv(t)
	e.writeConfig("flow_queueing = \"off\"\n")
	e.startDaemon()
	const link = 10_000_000
	e.hostqos("link", "set", e.iface(), "--egress-rate", "10mbit")
	qsock.Client = api.NewClient(e.d.Socket)
	defer func() { qsock.Client = nil }()
	rx := newMsgReceiver(t, e)

	// The bulk: two plain UDP sockets sending as fast as their send
	// buffers let them, in class default.
	bulkPort := rx.port(t)
	stopBulk := make(chan struct{})
	var bulkWG sync.WaitGroup
	for i := 0; i < 2; i++ {
		fd := clientUDP(t, e)
		bulkWG.Add(1)
		go func() {
			defer bulkWG.Done()
			b := make([]byte, 1400)
			to := &unix.SockaddrInet4{Port: int(bulkPort), Addr: serverV4.Addr().As4()}
			for {
				select {
				case <-stopBulk:
					return
				default:
				}
				_ = unix.Sendto(fd, b, 0, to)
			}
		}()
	}
	defer func() { close(stopBulk); bulkWG.Wait() }()
	time.Sleep(500 * time.Millisecond) // the link's queues fill

	// EDF: the same workload three times at once.
	type edfStream struct {
		name    string
		port    uint16
		send    func(b []byte, dl time.Time) (dropped bool)
		sent    int
		dropped int
		info    func() qsock.Info
	}
	newQ := func(s qsock.Scheduler) *qsock.Socket {
		var q *qsock.Socket
		if err := e.client.Do(func() (err error) {
			q, err = qsock.NewSocket(unix.AF_INET, unix.SOCK_DGRAM, 0, qsock.Params{Scheduler: s, Rate: 1_200_000})
			return err
		}); err != nil {
			t.Fatalf("qsocket %s: %v", s, err)
		}
		return q
	}
	var streams []*edfStream
	var edfQ []*qsock.Socket
	for _, s := range []qsock.Scheduler{qsock.EDFLossy, qsock.EDFLossless} {
		q := newQ(s)
		defer q.Close()
		edfQ = append(edfQ, q)
		port := rx.port(t)
		dst := netip.AddrPortFrom(serverV4.Addr(), port)
		streams = append(streams, &edfStream{name: string(s), port: port,
			send: func(b []byte, dl time.Time) bool {
				_, err := q.SendTo(b, dst, &qsock.Flags{Deadline: dl})
				if err != nil && !errors.Is(err, qsock.ErrDropped) {
					t.Errorf("%s: %v", s, err)
				}
				return err != nil
			},
			info: func() qsock.Info {
				in, err := q.Info()
				if err != nil {
					t.Errorf("qinfo %s: %v", s, err)
				}
				return in
			}})
	}
	plainFD := clientUDP(t, e)
	plainPort := rx.port(t)
	streams = append(streams, &edfStream{name: "plain", port: plainPort,
		send: func(b []byte, _ time.Time) bool {
			_ = unix.Sendto(plainFD, b, 0, &unix.SockaddrInet4{Port: int(plainPort), Addr: serverV4.Addr().As4()})
			return false
		}})
	const edfFor, burst, every = 4 * time.Second, 10, 50 * time.Millisecond
	var wg sync.WaitGroup
	for _, st := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewSource(13)) // the same deadlines for all
			msg := make([]byte, 1000)
			tick := time.NewTicker(every)
			defer tick.Stop()
			for end := time.Now().Add(edfFor); time.Now().Before(end); <-tick.C {
				for range burst {
					dl := time.Now().Add(5*time.Millisecond + time.Duration(r.Int63n(int64(55*time.Millisecond))))
					putMsg(msg, st.sent, dl)
					st.sent++
					if st.send(msg, dl) {
						st.dropped++
					}
				}
			}
		}()
	}
	wg.Wait()
	time.Sleep(500 * time.Millisecond) // the plain socket's queue drains
	res := map[string]msgStats{}
	for _, st := range streams {
		s := rx.stats(st.port)
		res[st.name] = s
		line := fmt.Sprintf("%-13s sent %4d  delivered %4d (on time %4d, late %4d, at most by %v)  dropped at the source %4d",
			st.name, st.sent, s.delivered, s.delivered-s.late, s.late, s.maxLate.Round(10*time.Microsecond), st.dropped)
		if st.info != nil {
			in := st.info()
			line += fmt.Sprintf("  host scheduler: dropped %d (+%d with their frame), sent late %d", in.SchedDropped, in.SchedFrameDropped, in.SchedLate)
			st.dropped += int(in.SchedDropped + in.SchedFrameDropped)
		}
		t.Log(line)
		if st.name != "plain" && s.delivered+st.dropped != st.sent {
			t.Errorf("%s: %d delivered + %d dropped, want the %d sent", st.name, s.delivered, st.dropped, st.sent)
		}
	}
	lossy, lossless, plain := res[string(qsock.EDFLossy)], res[string(qsock.EDFLossless)], res["plain"]
	sent := streams[2].sent
	// Late means after the deadline by more than 2 ms: the host's own
	// noise (a loaded 2-core VM runs the qdisc's softirq late at times).
	if lossy.late != 0 && lossy.maxLate > 2*time.Millisecond {
		t.Errorf("edf-lossy delivered %d messages late (at most by %v), want none", lossy.late, lossy.maxLate)
	}
	if lossless.delivered != streams[1].sent {
		t.Errorf("edf-lossless delivered %d of %d", lossless.delivered, streams[1].sent)
	}
	// The streams offer 1.6 Mbit/s each at 1.2 declared: both fall
	// behind. Lossy drops what would be late; lossless sends it late, and
	// its sender blocks while its late messages queue, so it may send
	// fewer messages in the same time (730 of 800 in one run) and shares
	// of what each sent are not comparable. What each delivered on time in
	// the same time is: lossy's dropping must not cost it messages that
	// could have made it — at least 0.85 × lossless's on-time count
	// (typically 1.0–1.25 ×).
	frac := func(n, of int) float64 { return float64(n) / float64(max(of, 1)) }
	lossyOn, losslessOn := lossy.delivered-lossy.late, lossless.delivered-lossless.late
	t.Logf("lossy dropped %.0f %% and was on time %.0f %% (%d messages); lossless was late %.0f %% and on time %.0f %% (%d); plain on time %.0f %%",
		100*frac(streams[0].dropped, streams[0].sent), 100*frac(lossyOn, streams[0].sent), lossyOn,
		100*frac(lossless.late, streams[1].sent), 100*frac(losslessOn, streams[1].sent), losslessOn,
		100*frac(plain.delivered-plain.late, streams[2].sent))
	if float64(lossyOn) < 0.85*float64(losslessOn) {
		t.Errorf("edf-lossy delivered %d messages on time, under 0.85 × edf-lossless's %d", lossyOn, losslessOn)
	}
	if miss := sent - (plain.delivered - plain.late); miss*2 < sent {
		t.Errorf("the plain socket missed %d of %d deadlines, want most (more than half)", miss, sent)
	}

	// DWCS. The EDF qsockets close first, and their rates leave the
	// qsched class.
	for _, q := range edfQ {
		q.Close()
	}
	dwcs := []struct {
		name     string
		oln, old uint32
		nodrop   int // every nodrop-th message is non-droppable (0: none)
	}{{"dwcs 2/4", 2, 4, 5}, {"dwcs 1/3", 1, 3, 0}}
	type dwcsRun struct {
		port uint16
		sent int
		q    *qsock.Socket
	}
	runs := make([]*dwcsRun, len(dwcs))
	for i, d := range dwcs {
		var q *qsock.Socket
		if err := e.client.Do(func() (err error) {
			q, err = qsock.NewSocket(unix.AF_INET, unix.SOCK_DGRAM, 0, qsock.Params{Scheduler: qsock.DWCS,
				Rate: 600_000, IPG: 10 * time.Millisecond, OLN: d.oln, OLD: d.old})
			return err
		}); err != nil {
			t.Fatalf("%s: %v", d.name, err)
		}
		defer q.Close()
		runs[i] = &dwcsRun{port: rx.port(t), q: q}
	}
	bulkBefore := rx.stats(bulkPort).bytes
	start := time.Now()
	const dwcsFor = 3 * time.Second
	for i, d := range dwcs {
		r := runs[i]
		wg.Add(1)
		go func() {
			defer wg.Done()
			msg := make([]byte, 1000)
			dst := netip.AddrPortFrom(serverV4.Addr(), r.port)
			tick := time.NewTicker(10 * time.Millisecond)
			defer tick.Stop()
			for end := time.Now().Add(dwcsFor); time.Now().Before(end); <-tick.C {
				putMsg(msg, r.sent, time.Time{})
				f := &qsock.Flags{NonDroppable: d.nodrop > 0 && r.sent%d.nodrop == 0}
				r.sent++
				if _, err := r.q.SendTo(msg, dst, f); err != nil {
					t.Errorf("%s: %v", d.name, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	bulkRate := float64(rx.stats(bulkPort).bytes-bulkBefore) * 8 / time.Since(start).Seconds()
	// What was sent late may still be queued: wait until nothing more
	// arrives.
	for i, prev := 0, -1; i < 30; i++ {
		n := 0
		for _, r := range runs {
			n += rx.stats(r.port).delivered
		}
		if n == prev {
			break
		}
		prev = n
		time.Sleep(200 * time.Millisecond)
	}
	for i, d := range dwcs {
		r := runs[i]
		s := rx.stats(r.port)
		in, err := r.q.Info()
		if err != nil {
			t.Fatal(err)
		}
		worst, nodropLost := 0, 0
		for k := 0; k+int(d.old) <= r.sent; k++ {
			miss := 0
			for j := k; j < k+int(d.old); j++ {
				if !s.seqs[j] {
					miss++
				}
			}
			worst = max(worst, miss)
		}
		for k := 0; d.nodrop > 0 && k < r.sent; k += d.nodrop {
			if !s.seqs[k] {
				nodropLost++
			}
		}
		t.Logf("%s: sent %d, delivered %d, dropped by the host %d, sent late %d (violations %d); most lost in any %d consecutive: %d",
			d.name, r.sent, s.delivered, in.SchedDropped, in.SchedLate, in.SchedViolations, d.old, worst)
		if worst > int(d.oln) {
			t.Errorf("%s: a window of %d consecutive messages lost %d, more than %d", d.name, d.old, worst, d.oln)
		}
		if nodropLost > 0 {
			t.Errorf("%s: %d non-droppable messages lost", d.name, nodropLost)
		}
		if in.SchedDropped == 0 {
			t.Errorf("%s: nothing dropped by the host: the stream was not over its rate (the test shows nothing)", d.name)
		}
	}
	// The qsched class has 2 × 600 kbit/s; the bulk takes the rest.
	t.Logf("bulk during DWCS: %.2f Mbit/s of the %.2f Mbit/s left", bulkRate/1e6, float64(link-1_200_000)/1e6)
	if bulkRate < 0.8*float64(link-1_200_000) {
		t.Errorf("bulk got %.2f Mbit/s, want at least 80 %% of the %.2f Mbit/s the scheduled streams leave", bulkRate/1e6, float64(link-1_200_000)/1e6)
	}
}

// putMsg writes a test message's header: its sequence number and deadline
// (CLOCK_MONOTONIC ns, 0 for none).
func putMsg(b []byte, seq int, dl time.Time) {
	binary.BigEndian.PutUint32(b, uint32(seq))
	var mono uint64
	if !dl.IsZero() {
		mono = uint64(int64(monoNow()) + int64(time.Until(dl)))
	}
	binary.BigEndian.PutUint64(b[4:], mono)
}

func monoNow() uint64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return uint64(ts.Nano())
}

// clientUDP is a plain UDP socket in the client, closed at the end.
func clientUDP(t *testing.T, e *env) int {
	t.Helper()
	var fd int
	if err := e.client.Do(func() (err error) {
		fd, err = unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

type msgStats struct {
	delivered, late int
	maxLate         time.Duration
	bytes           uint64
	seqs            map[int]bool
}

// msgReceiver receives the test's datagrams in the server, one port per
// stream, and judges each against its deadline by the kernel's receive
// timestamp (SO_TIMESTAMPNS).
type msgReceiver struct {
	e      *env
	mu     sync.Mutex
	next   uint16
	byPort map[uint16]*msgStats
	off    int64 // CLOCK_REALTIME − CLOCK_MONOTONIC, ns
	wg     sync.WaitGroup
	closed atomic.Bool
}

func newMsgReceiver(t *testing.T, e *env) *msgReceiver {
	var rt, mt unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_REALTIME, &rt)
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &mt)
	r := &msgReceiver{e: e, next: 7600, byPort: map[uint16]*msgStats{}, off: rt.Nano() - mt.Nano()}
	t.Cleanup(func() { r.closed.Store(true); r.wg.Wait() })
	return r
}

// port opens the next port's receiver.
func (r *msgReceiver) port(t *testing.T) uint16 {
	t.Helper()
	r.mu.Lock()
	port := r.next
	r.next++
	st := &msgStats{seqs: map[int]bool{}}
	r.byPort[port] = st
	r.mu.Unlock()
	var fd int
	if err := r.e.server.Do(func() (err error) {
		if fd, err = unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0); err != nil {
			return err
		}
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 4<<20)
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1); err != nil {
			return err
		}
		if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Usec: 100000}); err != nil {
			return err
		}
		return unix.Bind(fd, &unix.SockaddrInet4{Port: int(port), Addr: serverV4.Addr().As4()})
	}); err != nil {
		t.Fatal(err)
	}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		defer unix.Close(fd)
		buf := make([]byte, 2048)
		oob := make([]byte, 128)
		for !r.closed.Load() {
			n, oobn, _, _, err := unix.Recvmsg(fd, buf, oob, 0)
			if err != nil || n < 12 {
				continue
			}
			at := int64(0)
			if cms, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil {
				for _, c := range cms {
					if c.Header.Level == unix.SOL_SOCKET && c.Header.Type == unix.SO_TIMESTAMPNS && len(c.Data) >= 16 {
						ts := (*unix.Timespec)(unsafe.Pointer(&c.Data[0]))
						at = ts.Nano() - r.off
					}
				}
			}
			seq := int(binary.BigEndian.Uint32(buf))
			dl := int64(binary.BigEndian.Uint64(buf[4:]))
			r.mu.Lock()
			st.delivered++
			st.bytes += uint64(n)
			st.seqs[seq] = true
			if dl != 0 && at > dl {
				st.late++
				st.maxLate = max(st.maxLate, time.Duration(at-dl))
			}
			r.mu.Unlock()
		}
	}()
	return port
}

func (r *msgReceiver) stats(port uint16) msgStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := *r.byPort[port]
	st.seqs = maps.Clone(st.seqs)
	return st
}
