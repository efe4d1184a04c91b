// Package qsock is the QSockets application API for Go: a socket that
// carries its QoS (a class, or a DSCP, and a scheduler) and per-message
// attributes (deadline, drop priority, frame boundaries), registered with
// hostqosd so the host's classifier marks and schedules its traffic from
// its next packet. It is the Go form of libhostqos (<hostqos/qsock.h>);
// docs/qsockets.md describes the model, the calls and the privileges.
//
//	s, err := qsock.NewSocket(unix.AF_INET, unix.SOCK_DGRAM, 0, qsock.Params{Class: "interactive"})
//	...
//	dst := netip.MustParseAddrPort("198.18.0.2:9000")
//	s.SendTo(frame, dst, &qsock.Flags{Deadline: time.Now().Add(40 * time.Millisecond), FrameStart: true, FrameEnd: true})
//	info, _ := s.Info()
//
// An existing connection gets QoS without reconnecting with Attach:
//
//	conn, _ := net.Dial("tcp", "198.18.0.2:9000")
//	s, err := qsock.Attach(conn.(*net.TCPConn), qsock.Params{Class: "bulk"})
//
// The package's Example is the same, compiled by the tests.
package qsock

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hostqos/hostqos/api"
)

// Scheduler names a qsocket's message scheduler.
type Scheduler string

// The schedulers (docs/qsockets.md, "Schedulers").
const (
	FIFO        Scheduler = api.SchedFIFO
	DWCS        Scheduler = api.SchedDWCS
	EDFLossy    Scheduler = api.SchedEDFLossy
	EDFLossless Scheduler = api.SchedEDFLossless
)

// Params is a qsocket's QoS: struct qos_params of libhostqos.
type Params struct {
	// Class names the class; "" with no Priority means class default.
	Class string
	// Priority picks the class of this priority when Class is "".
	Priority *int
	// DSCP overrides the class's mark (root or group hostqos only).
	DSCP *int
	// Rate, in bit/s: with FIFO the library paces messages at it (0: no
	// pacing); with DWCS, EDFLossy and EDFLossless it is the rate the
	// host's scheduler admits and serves the socket at (0: 1 Mbit/s), and
	// nothing is paced at the source.
	Rate uint64
	// Scheduler: FIFO (default), DWCS, EDFLossy, EDFLossless.
	Scheduler Scheduler
	// DWCS attributes: inter-packet gap; at most OLN of every OLD
	// consecutive messages may be lost.
	IPG      time.Duration
	OLN, OLD uint32
}

func (p Params) wire() api.QSockParams {
	return api.QSockParams{Class: p.Class, Priority: p.Priority, DSCP: p.DSCP, Rate: p.Rate,
		Scheduler: string(p.Scheduler), IPGMicros: uint32(p.IPG / time.Microsecond), OLN: p.OLN, OLD: p.OLD}
}

// Flags are one message's attributes: struct packet_flags of libhostqos.
type Flags struct {
	// Deadline: the message is useless after it (zero: none). EDFLossy
	// drops a message that cannot make it before sending it.
	Deadline time.Time
	// DropPriority (0..7): among droppable messages of equal urgency,
	// higher is dropped first by the host's scheduler.
	DropPriority uint8
	// NonDroppable: never dropped by a lossy scheduler (an I-frame).
	NonDroppable bool
	// FrameStart and FrameEnd delimit a frame of several messages, which
	// is sent or dropped as a whole.
	FrameStart, FrameEnd bool
}

// Info is a qsocket's feedback: struct qos_info of libhostqos.
type Info struct {
	ID        uint32
	Class     string
	DSCP      int
	Scheduler Scheduler
	// Messages handed to Send/SendTo and what became of them at the
	// source: sent, dropped by the scheduler, sent after their deadline.
	SentMsgs, SentBytes       uint64
	DroppedMsgs, DroppedBytes uint64
	LateMsgs, LateBytes       uint64
	// Packets and bytes (L2 frames) that left through hostqos's
	// classifier, and their rate over the last complete second (bit/s).
	Packets, Bytes uint64
	Rate           uint64
	// The host's scheduler (DWCS, EDF across the link's qsockets, in the
	// kernel) on this socket's datagrams: sent predicted after their
	// deadline, dropped because they could not meet it, dropped with
	// the rest of their frame, the bytes of both, and DWCS messages
	// sent late with no loss left in their window.
	SchedLate, SchedDropped, SchedFrameDropped, SchedDroppedBytes, SchedViolations uint64
	// Queueing delay on the host (time in the qdisc, from sampled
	// transmit timestamps): mean and 99th percentile, and the samples.
	QDelayMean, QDelayP99 time.Duration
	QDelaySamples         int
	// TCP holds TCP_INFO for a TCP socket (nil otherwise).
	TCP *unix.TCPInfo
}

// Client is the daemon connection the package uses; nil means
// api.NewClient("") ($HOSTQOS_SOCKET or the default socket).
var Client *api.Client

func client() *api.Client {
	if Client != nil {
		return Client
	}
	return api.NewClient("")
}

// callTimeout bounds one call to the daemon.
var callTimeout = 10 * time.Second

// Error is a refused or failed call: the daemon's reason, and an errno
// (EPERM refused, EINVAL bad parameters, EBUSY/EAGAIN limits, ENOENT not a
// qsocket, ECONNREFUSED no daemon).
type Error struct {
	Op    string
	Errno syscall.Errno
	Err   error
}

func (e *Error) Error() string { return e.Op + ": " + e.Err.Error() }
func (e *Error) Unwrap() []error {
	return []error{e.Err, e.Errno}
}

func wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	errno := syscall.EIO
	var ae *api.Error
	switch {
	case errors.As(err, &ae):
		switch ae.Status {
		case 400:
			errno = syscall.EINVAL
		case 403:
			errno = syscall.EPERM
		case 404:
			errno = syscall.ENOENT
		case 409:
			errno = syscall.EEXIST
		case 429, 503:
			errno = syscall.EAGAIN
		}
	case errors.Is(err, api.ErrDaemonDown):
		errno = syscall.ECONNREFUSED
	}
	return &Error{Op: op, Errno: errno, Err: err}
}

// Init prepares a link for qsockets (qsockinit): hostqos manages it (its
// classifier and HTB root, at egressRate, e.g. "100mbit"; "" leaves the
// rate unset). Root or group hostqos only.
func Init(link, egressRate string) error {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	return wrap("qsockinit", client().QSockets().Init(ctx, api.QSockInit{Link: link, EgressRate: egressRate}))
}

// Socket is a qsocket.
type Socket struct {
	mu    sync.Mutex
	fd    int
	raw   syscall.RawConn // set by Attach: the connection's own descriptor
	owned bool            // Close closes fd (Socket made it)
	close func() error    // closes what Attach was given
	info  api.QSocket
	p     Params
	sched scheduler
	st    sourceStats
	ts    tstamps
	// txtime: SO_TXTIME is on, each message carries its attributes to
	// the host's scheduler (a scheduled datagram socket).
	txtime bool
}

// NewSocket creates a socket (socket(2): domain, typ, proto) and makes it
// a qsocket with p (qsocket).
func NewSocket(domain, typ, proto int, p Params) (*Socket, error) {
	fd, err := unix.Socket(domain, typ|unix.SOCK_CLOEXEC, proto)
	if err != nil {
		return nil, &Error{Op: "qsocket", Errno: err.(syscall.Errno), Err: fmt.Errorf("create socket: %w", err)}
	}
	s := &Socket{fd: fd, owned: true, p: p}
	if err := s.attach(); err != nil {
		unix.Close(fd)
		return nil, wrap("qsocket", err)
	}
	return s, nil
}

// Attach makes an open socket a qsocket with p (qattach), without
// reconnecting: a *net.TCPConn, *net.UDPConn, or anything with a
// SyscallConn. Close detaches and closes it; Detach only detaches.
func Attach(conn syscall.Conn, p Params) (*Socket, error) {
	raw, err := conn.SyscallConn()
	if err != nil {
		return nil, &Error{Op: "qattach", Errno: syscall.EBADF, Err: err}
	}
	s := &Socket{fd: -1, raw: raw, p: p}
	if c, ok := conn.(interface{ Close() error }); ok {
		s.close = c.Close
	}
	if err := s.attach(); err != nil {
		return nil, wrap("qattach", err)
	}
	return s, nil
}

// AttachFD makes the socket behind descriptor fd a qsocket (qattach on a
// descriptor); Close closes fd.
func AttachFD(fd int, p Params) (*Socket, error) {
	s := &Socket{fd: fd, owned: true, p: p}
	if err := s.attach(); err != nil {
		return nil, wrap("qattach", err)
	}
	return s, nil
}

// withFD calls fn with the socket's descriptor.
func (s *Socket) withFD(fn func(fd int) error) error {
	if s.raw == nil {
		return fn(s.fd)
	}
	var ferr error
	if err := s.raw.Control(func(fd uintptr) { ferr = fn(int(fd)) }); err != nil {
		return err
	}
	return ferr
}

func (s *Socket) call(fn func(ctx context.Context, fd int) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	return s.withFD(func(fd int) error { return fn(ctx, fd) })
}

func (s *Socket) attach() error {
	sched, err := newScheduler(s.p)
	if err != nil {
		return err
	}
	err = s.call(func(ctx context.Context, fd int) error {
		q, err := client().QSockets().Attach(ctx, fd, s.p.wire())
		s.info = q
		return err
	})
	if err != nil {
		return err
	}
	s.sched = sched
	return s.useTxtime(s.p)
}

// useTxtime turns on SO_TXTIME when p's scheduler is the host's and the
// socket carries datagrams (it stays on; a fifo socket sends none).
func (s *Socket) useTxtime(p Params) error {
	if s.txtime || !scheduledSched(p.Scheduler) {
		return nil
	}
	return s.withFD(func(fd int) error {
		on, err := enableTxtime(fd)
		if err != nil {
			return fmt.Errorf("enable SO_TXTIME for the host's scheduler: %w", err)
		}
		s.txtime = on
		return nil
	})
}

// FD is the socket's descriptor (-1 for an attached connection; use its
// own methods).
func (s *Socket) FD() int { return s.fd }

// ID is the qsocket's id on the host.
func (s *Socket) ID() uint32 { return s.info.ID }

// Change gives the qsocket new QoS (qchange), effective at its next
// packet.
func (s *Socket) Change(p Params) error {
	sched, err := newScheduler(p)
	if err != nil {
		return wrap("qchange", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	err = s.call(func(ctx context.Context, fd int) error {
		q, err := client().QSockets().Change(ctx, fd, p.wire())
		if err == nil {
			s.info = q
		}
		return err
	})
	if err != nil {
		return wrap("qchange", err)
	}
	s.p, s.sched = p, sched
	return wrap("qchange", s.useTxtime(p))
}

// Info returns the qsocket's feedback (qinfo).
func (s *Socket) Info() (Info, error) {
	var di api.QSockInfo
	err := s.call(func(ctx context.Context, fd int) error {
		var err error
		di, err = client().QSockets().Info(ctx, fd)
		return err
	})
	if err != nil {
		return Info{}, wrap("qinfo", err)
	}
	s.mu.Lock()
	_ = s.withFD(func(fd int) error { s.ts.drain(fd); return nil })
	in := Info{ID: di.ID, Class: di.Class, DSCP: di.DSCP, Scheduler: Scheduler(di.Scheduler),
		SentMsgs: s.st.sentMsgs, SentBytes: s.st.sentBytes, DroppedMsgs: s.st.droppedMsgs, DroppedBytes: s.st.droppedBytes,
		LateMsgs: s.st.lateMsgs, LateBytes: s.st.lateBytes, Packets: di.Packets, Bytes: di.Bytes, Rate: di.Rate,
		SchedLate: di.Late, SchedDropped: di.LateDropped, SchedFrameDropped: di.FrameDropped,
		SchedDroppedBytes: di.DroppedBytes, SchedViolations: di.Violations}
	in.QDelayMean, in.QDelayP99, in.QDelaySamples = s.ts.summary()
	s.mu.Unlock()
	_ = s.withFD(func(fd int) error {
		if t, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_PROTOCOL); err == nil && t == unix.IPPROTO_TCP {
			if ti, err := unix.GetsockoptTCPInfo(fd, unix.IPPROTO_TCP, unix.TCP_INFO); err == nil {
				in.TCP = ti
			}
		}
		return nil
	})
	return in, nil
}

// ErrDropped is what Send and SendTo return for a message the socket's
// scheduler dropped at the source (a lossy scheduler's late message, or
// the rest of its frame): nothing was sent, and it is counted.
var ErrDropped = errors.New("message dropped by the qsocket's scheduler (too late for its deadline)")

// Send sends b on a connected qsocket with flags f (qsend; f may be nil).
func (s *Socket) Send(b []byte, f *Flags) (int, error) { return s.send(b, nil, f) }

// SendTo sends b to to with flags f (qsendto; f may be nil).
func (s *Socket) SendTo(b []byte, to netip.AddrPort, f *Flags) (int, error) {
	var sa unix.Sockaddr
	if to.Addr().Is4() {
		sa = &unix.SockaddrInet4{Port: int(to.Port()), Addr: to.Addr().As4()}
	} else {
		sa = &unix.SockaddrInet6{Port: int(to.Port()), Addr: to.Addr().As16()}
	}
	return s.send(b, sa, f)
}

func (s *Socket) send(b []byte, to unix.Sockaddr, f *Flags) (int, error) {
	var fl Flags
	if f != nil {
		fl = *f
	}
	s.mu.Lock()
	now := time.Now()
	// With the host's scheduler deciding (txtime), the source drops only
	// what is already too late: the host predicts by band and backlog,
	// which the socket's own queueing delay does not know.
	qdelay := s.ts.estimate()
	if s.txtime {
		qdelay = 0
	}
	d := s.sched.decide(now, &fl, qdelay)
	if d == drop {
		s.st.droppedMsgs++
		s.st.droppedBytes += uint64(len(b))
		s.mu.Unlock()
		return 0, ErrDropped
	}
	var oob []byte
	sample := false
	err := s.withFD(func(fd int) error {
		s.ts.drain(fd)
		sample = s.ts.wantSample(fd)
		return nil
	})
	if err != nil {
		s.mu.Unlock()
		return 0, err
	}
	if s.txtime && scheduledSched(s.p.Scheduler) {
		oob = txtimeCmsg(txtimeWord(now, monoNanos(), &fl))
	}
	if sample {
		oob = append(oob, tstampCmsg...)
	}
	s.mu.Unlock()
	if wait := s.sched.pace(now, len(b)); wait > 0 {
		time.Sleep(wait)
	}
	var n int
	write := func(fd int) error {
		var err error
		if oob == nil && to == nil {
			n, err = unix.Write(fd, b)
			return err
		}
		n, err = unix.SendmsgN(fd, b, oob, to, 0)
		return err
	}
	if s.raw != nil {
		// The connection's descriptor is non-blocking: wait as its own
		// Write does.
		var werr error
		if err = s.raw.Write(func(fd uintptr) bool {
			werr = write(int(fd))
			return !errors.Is(werr, unix.EAGAIN)
		}); err == nil {
			err = werr
		}
	} else {
		err = write(s.fd)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		if sample {
			s.ts.unsample()
		}
		return n, err
	}
	s.st.sentMsgs++
	s.st.sentBytes += uint64(n)
	if !fl.Deadline.IsZero() && time.Now().After(fl.Deadline) {
		s.st.lateMsgs++
		s.st.lateBytes += uint64(n)
	}
	return n, nil
}

// Detach makes the socket an ordinary socket again; it stays open.
func (s *Socket) Detach() error {
	return wrap("qdetach", s.call(func(ctx context.Context, fd int) error {
		return client().QSockets().Detach(ctx, fd)
	}))
}

// Close closes the qsocket (qclose): the socket is closed, and the host
// forgets it with it.
func (s *Socket) Close() error {
	switch {
	case s.close != nil:
		return s.close()
	case s.owned && s.fd >= 0:
		err := unix.Close(s.fd)
		s.fd = -1
		return err
	}
	return nil
}
