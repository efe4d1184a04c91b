package rtchan

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"
)

// Wire format of a real-time channel packet over UDP (big endian):
//
//	0  magic 0x5254 ("RT")   2  version (1)   3  flags (bit 0: best effort)
//	4  channel id (u32)      8  message sequence (u64)
//	16 packet index (u16)    18 packets in message (u16)
//	20 message size (u32)    24 deadline, Unix ns (i64; 0 for best effort)
//	32 fragment offset (u32) 36 payload
const (
	wireMagic   = 0x5254
	wireVersion = 1
	// WireHeader is the size of our header in every datagram.
	WireHeader = 36
	// UDPOverhead is the IPv4 + UDP header added by the kernel.
	UDPOverhead = 28
	flagBE      = 1
)

type wireHdr struct {
	be       bool
	channel  uint32
	seq      uint64
	idx      uint16
	npkts    uint16
	size     uint32
	deadline int64
	offset   uint32
}

func (h wireHdr) put(b []byte) {
	binary.BigEndian.PutUint16(b[0:], wireMagic)
	b[2] = wireVersion
	b[3] = 0
	if h.be {
		b[3] = flagBE
	}
	binary.BigEndian.PutUint32(b[4:], h.channel)
	binary.BigEndian.PutUint64(b[8:], h.seq)
	binary.BigEndian.PutUint16(b[16:], h.idx)
	binary.BigEndian.PutUint16(b[18:], h.npkts)
	binary.BigEndian.PutUint32(b[20:], h.size)
	binary.BigEndian.PutUint64(b[24:], uint64(h.deadline))
	binary.BigEndian.PutUint32(b[32:], h.offset)
}

func parseHdr(b []byte) (wireHdr, error) {
	if len(b) < WireHeader || binary.BigEndian.Uint16(b) != wireMagic || b[2] != wireVersion {
		return wireHdr{}, errors.New("not a real-time channel packet")
	}
	return wireHdr{
		be:       b[3]&flagBE != 0,
		channel:  binary.BigEndian.Uint32(b[4:]),
		seq:      binary.BigEndian.Uint64(b[8:]),
		idx:      binary.BigEndian.Uint16(b[16:]),
		npkts:    binary.BigEndian.Uint16(b[18:]),
		size:     binary.BigEndian.Uint32(b[20:]),
		deadline: int64(binary.BigEndian.Uint64(b[24:])),
		offset:   binary.BigEndian.Uint32(b[32:]),
	}, nil
}

// UDPParams is a parameter set for the UDP backend on a link of bitsPerSec:
// 1,400-byte fragments, every datagram charged our header plus IPv4/UDP
// headers, and modest per-packet CPU cost estimates for admission control
// (the real CPU is not modelled at run time).
func UDPParams(bitsPerSec int64) Params {
	return Params{
		CswXK:       5 * time.Microsecond,
		CswEDF:      5 * time.Microsecond,
		Ccm:         10 * time.Microsecond,
		Cp1st:       50 * time.Microsecond,
		Cp:          20 * time.Microsecond,
		Cl:          10 * time.Microsecond,
		P:           4,
		S:           1400,
		LinkBps:     bitsPerSec / 8,
		HeaderBytes: WireHeader + UDPOverhead,
		NetDelay:    time.Millisecond,
	}
}

// rclock drives the core in real time from a single goroutine: every core
// action (API calls, timers, transmit completions) runs on it in turn.
type rclock struct {
	base  time.Time
	q     timers
	inbox chan func()
	stop  chan struct{}
	done  chan struct{}
	// maxLate is the worst lateness of a timer seen by the loop: how long
	// the process was kept off the CPU when it had work due.
	maxLate int64
}

func newRclock() *rclock {
	return &rclock{base: time.Now(), inbox: make(chan func(), 64), stop: make(chan struct{}), done: make(chan struct{})}
}

func (r *rclock) now() int64                   { return int64(time.Since(r.base)) }
func (r *rclock) at(t int64, fn func()) *event { return r.q.push(t, fn) }
func (r *rclock) cancel(e *event)              { r.q.remove(e) }

// unix converts a clock instant to Unix nanoseconds.
func (r *rclock) unix(t int64) int64 { return r.base.UnixNano() + t }

func (r *rclock) loop() {
	defer close(r.done)
	tm := time.NewTimer(time.Hour)
	defer tm.Stop()
	for {
		for {
			e := r.q.peek()
			if e == nil || e.t > r.now() {
				break
			}
			r.q.pop()
			r.maxLate = max(r.maxLate, r.now()-e.t)
			e.fn()
		}
		wait := time.Hour
		if e := r.q.peek(); e != nil {
			wait = time.Duration(e.t - r.now())
		}
		tm.Reset(wait)
		select {
		case fn := <-r.inbox:
			fn()
		case <-tm.C:
		case <-r.stop:
			return
		}
	}
}

// do runs fn on the loop goroutine and waits for it.
func (r *rclock) do(fn func()) error {
	ch := make(chan struct{})
	select {
	case r.inbox <- func() { fn(); close(ch) }:
	case <-r.done:
		return ErrClosed
	}
	select {
	case <-ch:
		return nil
	case <-r.done:
		return ErrClosed
	}
}

// udpLink transmits packets as UDP datagrams, paced at the configured link
// rate: each packet occupies the link for L_x(s) of nominal time. A late
// timer does not slow the link down: up to catchUp of lateness is absorbed
// by starting the next packet at the nominal instant.
type udpLink struct {
	conn     *net.UDPConn
	p        Params
	clk      *rclock
	dests    map[ChannelID]*net.UDPAddr
	conns    map[ChannelID]*net.UDPConn // channels admitted by hostqosd: their own sockets
	buf      []byte
	nextFree int64
	errs     uint64
	log      *slog.Logger
}

const catchUp = int64(2 * time.Millisecond)

func (l *udpLink) transmit(pk *packet, now int64) int64 {
	m := pk.msg
	n := WireHeader + pk.size
	if cap(l.buf) < n {
		l.buf = make([]byte, n)
	}
	b := l.buf[:n]
	off := pk.idx * l.p.S
	hdr := wireHdr{be: !m.ch.rt, channel: uint32(m.ch.id), seq: m.seq, idx: uint16(pk.idx), npkts: uint16(m.npkts), size: uint32(m.size), offset: uint32(off)}
	if m.ch.rt {
		hdr.deadline = l.clk.unix(pk.deadline)
	}
	hdr.put(b)
	if m.data != nil && off < len(m.data) {
		copy(b[WireHeader:], m.data[off:min(off+pk.size, len(m.data))])
	} else {
		clear(b[WireHeader:])
	}
	conn := l.conn
	if c, ok := l.conns[m.ch.id]; ok {
		conn = c
	}
	if _, err := conn.WriteToUDP(b, l.dests[m.ch.id]); err != nil {
		l.errs++
		if l.errs == 1 || l.errs%1000 == 0 {
			l.log.Warn("send datagram", "channel", m.ch.id, "errors", l.errs, "err", err)
		}
	}
	start := now
	if now-l.nextFree < catchUp {
		start = max(l.nextFree, now-catchUp)
	}
	done := start + int64(l.p.Lx(pk.size))
	l.nextFree = done
	return done
}

// UDPHost is the sending side of real-time channels over a UDP socket: the
// same handlers and link scheduler as Sim, in real time, with the link
// scheduler pacing datagrams at the configured link rate. Methods are safe
// for concurrent use.
type UDPHost struct {
	clk      *rclock
	c        *core
	p        Params
	link     *udpLink
	admitted map[ChannelID]Spec
	once     sync.Once
	host     *hostAdmission // set by UseDaemon (daemon.go)
}

// NewUDPHost starts a sending host on conn (which it owns from now on).
func NewUDPHost(conn *net.UDPConn, p Params, pol Policy) (*UDPHost, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if WireHeader+p.S > 65507 {
		return nil, fmt.Errorf("check params: packet size %d does not fit a UDP datagram", p.S)
	}
	clk := newRclock()
	link := &udpLink{conn: conn, p: p, clk: clk, dests: map[ChannelID]*net.UDPAddr{}, conns: map[ChannelID]*net.UDPConn{}, log: slog.Default().With("component", "rtchan")}
	h := &UDPHost{clk: clk, p: p, link: link, admitted: map[ChannelID]Spec{}}
	h.c = newCore(clk, p, pol, false, link)
	go clk.loop()
	return h, nil
}

// Create establishes a channel to the receiver at dest ("host:port") after
// admission control (rtc_create).
func (h *UDPHost) Create(dest string, spec Spec) (ChannelID, error) {
	addr, err := net.ResolveUDPAddr("udp", dest)
	if err != nil {
		return -1, fmt.Errorf("resolve destination %q: %w", dest, err)
	}
	if err := spec.Validate(); err != nil {
		return -1, err
	}
	if h.p.Packets(spec.Mmax) > 65535 {
		return -1, fmt.Errorf("check spec %q: mmax %d needs more than 65535 packets", spec.Name, spec.Mmax)
	}
	var hostID uint64
	var own *net.UDPConn // the channel's own socket, when hostqosd admitted it
	if h.host != nil && !spec.BestEffort {
		if hostID, err = h.host.admit(spec, addr); err != nil {
			return -1, err
		}
		if hostID != 0 {
			if own, err = h.host.channelConn(h.link.conn, hostID); err != nil {
				_ = h.host.release(hostID)
				return -1, err
			}
		}
	}
	id := ChannelID(-1)
	err2 := h.clk.do(func() {
		if !spec.BestEffort {
			var est []Spec
			for i := ChannelID(0); int(i) < len(h.c.chans); i++ {
				if sp, ok := h.admitted[i]; ok {
					est = append(est, sp)
				}
			}
			if _, err = h.p.Admit(est, spec); err != nil {
				return
			}
		}
		ch := h.c.addChannel(spec, dest)
		h.link.dests[ch.id] = addr
		if own != nil {
			h.link.conns[ch.id] = own
		}
		if !spec.BestEffort {
			h.admitted[ch.id] = spec
		}
		id = ch.id
	})
	if err2 == nil && err == nil && hostID != 0 {
		h.host.keep(id, hostID)
	} else if hostID != 0 {
		_ = h.host.release(hostID) // not admitted here: give the link back
		own.Close()
	}
	if err2 != nil {
		return -1, err2
	}
	return id, err
}

// Send presents msg on channel id (rtc_send). The message is not copied:
// do not modify it until it has been transmitted. ErrQueueFull reports a
// message dropped because the channel's message queue (Bmax) is full.
func (h *UDPHost) Send(id ChannelID, msg []byte) error {
	var err error
	if err2 := h.clk.do(func() {
		if id < 0 || int(id) >= len(h.c.chans) {
			err = fmt.Errorf("use channel %d: %w", id, ErrNoChannel)
			return
		}
		ch := h.c.chans[id]
		if h.p.Packets(len(msg)) > 65535 {
			err = fmt.Errorf("send on channel %d: %w", id, ErrMessageTooBig)
			return
		}
		err = h.c.send(ch, len(msg), msg)
	}); err2 != nil {
		return err2
	}
	return err
}

// Close tears channel id down (rtc_close); queued messages are still sent
// (a channel admitted by hostqosd keeps its socket until Shutdown, for
// them).
func (h *UDPHost) Close(id ChannelID) error {
	var err error
	if err2 := h.clk.do(func() {
		if id < 0 || int(id) >= len(h.c.chans) {
			err = fmt.Errorf("close channel %d: %w", id, ErrNoChannel)
			return
		}
		h.c.closeChannel(h.c.chans[id])
		delete(h.admitted, id)
	}); err2 != nil {
		return err2
	}
	if err == nil && h.host != nil {
		err = h.host.release(h.host.forget(id))
	}
	return err
}

// Stats returns channel id's sender-side counters. Laxity is measured at
// the nominal end of the last packet's transmission on the paced link.
func (h *UDPHost) Stats(id ChannelID) (ChannelStats, error) {
	var st ChannelStats
	var err error
	if err2 := h.clk.do(func() {
		if id < 0 || int(id) >= len(h.c.chans) {
			err = fmt.Errorf("read channel %d: %w", id, ErrNoChannel)
			return
		}
		st = h.c.chans[id].st.clean()
	}); err2 != nil {
		return st, err2
	}
	return st, err
}

// Idle reports whether every channel's queues are empty and the link idle.
func (h *UDPHost) Idle() bool {
	idle := false
	_ = h.clk.do(func() {
		idle = !h.c.linkBusy && len(h.c.lq) == 0
		for _, ch := range h.c.chans {
			if len(ch.msgq) > 0 || len(ch.pktq) > 0 || ch.h.cur != nil {
				idle = false
			}
		}
	})
	return idle
}

// MaxTimerLateness is the worst delay seen between a timer's due time and
// its run: a measure of how much the host's CPU starved the scheduler.
func (h *UDPHost) MaxTimerLateness() time.Duration {
	var d time.Duration
	_ = h.clk.do(func() { d = time.Duration(h.clk.maxLate) })
	return d
}

// Shutdown stops the host and closes its sockets.
func (h *UDPHost) Shutdown() error {
	var err error
	h.once.Do(func() {
		close(h.clk.stop)
		<-h.clk.done
		err = h.link.conn.Close()
		for _, c := range h.link.conns {
			c.Close()
		}
	})
	return err
}
