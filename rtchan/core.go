package rtchan

import (
	"math"
	"time"
)

// This file is the QoS-sensitive communication subsystem itself: channels
// with their message and packet queues, one handler per channel run as a
// state machine on a single modelled CPU under multi-class EDF with
// cooperative preemption, and the multi-class non-preemptive EDF link
// scheduler of the seed's Fig. 6 invoked as a function call (option 1).
// It is driven by a clock (virtual or real) and a link device.

// handler run classes (CPU run queues and link packet queues alike).
const (
	classCurrent = 1 // Q1: current real-time, by deadline
	classBE      = 2 // Q2: best effort, FIFO
	classEarly   = 3 // Q3: early real-time, by logical arrival time
)

type hstate int

const (
	hIdle    hstate = iota // waiting on the message queue semaphore
	hSleep                 // early message, waiting for its logical arrival
	hReady                 // in a CPU run queue
	hRunning               // has the CPU
	hBlocked               // waiting on the packet queue semaphore
)

type message struct {
	ch       *channel
	seq      uint64
	size     int
	data     []byte
	arrival  int64
	logical  int64
	deadline int64 // 0 for best effort
	npkts    int
	done     int // packets transmitted
	dropped  int // packets dropped
}

type packet struct {
	msg      *message
	idx      int
	size     int
	deadline int64
	logical  int64
	class    int   // link queue
	key      int64 // deadline (Q1), logical arrival (Q3)
	order    uint64
	txStart  int64
}

type channel struct {
	id     ChannelID
	spec   Spec
	rt     bool
	local  int64 // local delay bound, ns
	imin   int64
	npmax  int
	msgq   []*message
	backlg []*message // held-back senders when overflow is not dropped
	pktq   []*packet
	pktcap int
	h      *handler
	seq    uint64
	closed bool
	dest   string

	hasLast     bool
	lastLogical int64
	nextGap     int64

	st ChannelStats
}

type handler struct {
	ch       *channel
	state    hstate
	cur      *message
	next     int     // next packet index of cur
	pending  *packet // made but not yet queued (packet queue full)
	since    int     // packets since the last preemption point
	atPoint  bool
	class    int
	key      int64
	order    uint64
	viaProxy bool
	timer    *event // sleep / promotion timer
}

// linkDev is the adapter: transmit starts sending a packet now and returns
// the instant its transmission completes.
type linkDev interface {
	transmit(p *packet, now int64) int64
}

type core struct {
	clk   clock
	p     Params
	pol   Policy
	costs bool // charge modelled CPU costs (virtual time only)
	link  linkDev

	chans []*channel
	seq   uint64

	// CPU
	ready     []*handler
	running   *handler
	lastRun   *handler
	seg       *event
	segFn     func()
	intrUntil int64
	cpuBusyNs int64

	// link
	lq       []*packet
	linkBusy bool
	linkWake *event
	txBusyNs int64

	onPkt  func(p *packet, now int64)
	onMsg  func(m *message, now int64)
	onDrop func(ch *channel, m *message, pkts int, now int64)
}

func newCore(clk clock, p Params, pol Policy, costs bool, link linkDev) *core {
	return &core{clk: clk, p: p, pol: pol, costs: costs, link: link}
}

func (c *core) nextSeq() uint64 { c.seq++; return c.seq }

// addChannel establishes a channel (admission is the caller's business).
func (c *core) addChannel(spec Spec, dest string) *channel {
	ch := &channel{
		id:    ChannelID(len(c.chans)),
		spec:  spec,
		rt:    !spec.BestEffort,
		npmax: c.p.Packets(spec.Mmax),
		dest:  dest,
	}
	if ch.rt {
		ch.imin = int64(spec.MinInterval())
		ch.local = int64(c.p.Requested(spec))
	}
	ch.pktcap = spec.Bmax * ch.npmax
	ch.h = &handler{ch: ch, state: hIdle}
	ch.st = ChannelStats{ID: ch.id, Name: spec.Name, BestEffort: spec.BestEffort, MinLaxity: math.MaxInt64, MaxLaxity: math.MinInt64}
	c.chans = append(c.chans, ch)
	return ch
}

// ---- traffic enforcement (rtc_send) ----

// send presents a message to channel ch at the current instant.
func (c *core) send(ch *channel, size int, data []byte) error {
	if ch.closed {
		return ErrClosed
	}
	now := c.clk.now()
	ch.seq++
	m := &message{ch: ch, seq: ch.seq, size: size, data: data, arrival: now, npkts: c.p.Packets(size)}
	if len(ch.msgq) >= ch.spec.Bmax {
		if c.pol.DropOverflow {
			ch.st.MsgsDropped++
			ch.st.PktsDropped += uint64(m.npkts)
			if c.onDrop != nil {
				c.onDrop(ch, m, m.npkts, now)
			}
			return ErrQueueFull
		}
		ch.backlg = append(ch.backlg, m)
		ch.st.MsgsHeld++
		return nil
	}
	c.accept(ch, m)
	return nil
}

// accept assigns the logical arrival time and deadline and queues m.
func (c *core) accept(ch *channel, m *message) {
	now := c.clk.now()
	if !ch.rt {
		m.logical = now
	} else {
		if !c.pol.EnforceImin || !ch.hasLast {
			m.logical = now
		} else {
			m.logical = max(now, ch.lastLogical+ch.nextGap)
		}
		ch.hasLast = true
		ch.lastLogical = m.logical
		ch.nextGap = ch.imin
		if m.npkts > ch.npmax {
			// Mmax violation: stretch the logical spacing in proportion to
			// the extra packets.
			ch.nextGap = ceilDiv(ch.imin*int64(m.npkts), int64(ch.npmax))
			ch.st.MmaxViolations++
		}
		m.deadline = m.logical + ch.local
	}
	ch.st.MsgsAccepted++
	ch.msgq = append(ch.msgq, m)
	if ch.h.state == hIdle {
		c.wakeIdle(ch.h, m)
	}
}

// wakeIdle signals an idle handler's message queue semaphore for message m.
// The handler inherits m's priority. In non-work-conserving mode an early
// message keeps the handler suspended until the message is current (the
// shaping of the API); in work-conserving mode its proxy competes in Q3.
func (c *core) wakeIdle(h *handler, m *message) {
	now := c.clk.now()
	switch {
	case !h.ch.rt:
		h.class, h.key = classBE, 0
	case m.logical <= now:
		h.class, h.key = classCurrent, c.pktDeadline(h.ch, m, 0)
	case !c.pol.WorkConserving:
		h.state = hSleep
		h.timer = c.clk.at(m.logical, func() {
			h.timer = nil
			h.class, h.key = classCurrent, c.pktDeadline(h.ch, m, 0)
			c.makeReady(h)
			c.dispatch()
		})
		return
	default:
		h.class, h.key = classEarly, m.logical
		h.viaProxy = true
		c.armPromote(h, m)
	}
	c.makeReady(h)
	c.dispatch()
}

// armPromote moves h from Q3 to Q1 when message m becomes current.
func (c *core) armPromote(h *handler, m *message) {
	if h.timer != nil {
		return
	}
	h.timer = c.clk.at(m.logical, func() {
		h.timer = nil
		if h.state != hReady || h.class != classEarly {
			return
		}
		if h.cur == m || (h.cur == nil && len(h.ch.msgq) > 0 && h.ch.msgq[0] == m) {
			h.class, h.key = classCurrent, c.pktDeadline(h.ch, m, h.next)
		}
	})
}

func (c *core) popMsg(ch *channel) *message {
	if len(ch.msgq) == 0 {
		return nil
	}
	m := ch.msgq[0]
	ch.msgq[0] = nil
	ch.msgq = ch.msgq[1:]
	if len(ch.backlg) > 0 {
		b := ch.backlg[0]
		ch.backlg[0] = nil
		ch.backlg = ch.backlg[1:]
		c.accept(ch, b)
	}
	return m
}

// pktDeadline is the deadline of packet idx of m, degraded for packets
// beyond the Mmax-derived count when DecayDeadline is on.
func (c *core) pktDeadline(ch *channel, m *message, idx int) int64 {
	d := m.deadline
	if c.pol.DecayDeadline && idx >= ch.npmax {
		extra := int64(idx + 1 - ch.npmax)
		d += ceilDiv(extra*ch.imin, int64(ch.npmax))
	}
	return d
}

// ---- CPU: run queues, dispatch, cooperative preemption ----

func (c *core) rank(class int) int {
	switch class {
	case classCurrent:
		return 0
	case classBE:
		if c.pol.EarlyAboveBE {
			return 2
		}
		return 1
	default:
		if c.pol.EarlyAboveBE {
			return 1
		}
		return 2
	}
}

// beats reports whether a has strictly higher priority than b.
func (c *core) beats(a, b *handler) bool {
	ra, rb := c.rank(a.class), c.rank(b.class)
	if ra != rb {
		return ra < rb
	}
	if a.class == classBE {
		return false // FIFO: no preemption within the class
	}
	return a.key < b.key
}

func (c *core) better(a, b *handler) bool {
	ra, rb := c.rank(a.class), c.rank(b.class)
	if ra != rb {
		return ra < rb
	}
	if a.class != classBE && a.key != b.key {
		return a.key < b.key
	}
	return a.order < b.order
}

func (c *core) bestReady() (int, *handler) {
	bi := -1
	var best *handler
	for i, h := range c.ready {
		if best == nil || c.better(h, best) {
			bi, best = i, h
		}
	}
	return bi, best
}

func (c *core) makeReady(h *handler) {
	if h.state == hReady {
		return
	}
	h.state = hReady
	h.order = c.nextSeq()
	if h.class == 0 {
		h.class = classBE
		if h.ch.rt {
			h.class = classCurrent
		}
	}
	c.ready = append(c.ready, h)
}

// classify sets h's class and key from its current message.
func (c *core) classify(h *handler) {
	m := h.cur
	if m == nil {
		return
	}
	if !h.ch.rt {
		h.class, h.key = classBE, 0
		return
	}
	if m.logical > c.clk.now() {
		h.class, h.key = classEarly, m.logical
		return
	}
	h.class, h.key = classCurrent, c.pktDeadline(h.ch, m, h.next)
}

// runSeg occupies the CPU for cost (plus interrupt time stolen meanwhile)
// and then calls fn.
func (c *core) runSeg(cost time.Duration, fn func()) {
	if !c.costs {
		cost = 0
	}
	now := c.clk.now()
	start := max(now, c.intrUntil)
	end := start + int64(cost)
	c.cpuBusyNs += int64(cost)
	c.segFn = fn
	c.seg = c.clk.at(end, c.segDone)
}

func (c *core) segDone() {
	fn := c.segFn
	c.seg, c.segFn = nil, nil
	fn()
}

// interrupt runs cost of interrupt-context work now, preempting any handler
// segment, and returns when it completes.
func (c *core) interrupt(cost time.Duration) int64 {
	if !c.costs {
		cost = 0
	}
	now := c.clk.now()
	start := max(now, c.intrUntil)
	c.intrUntil = start + int64(cost)
	c.cpuBusyNs += int64(cost)
	if c.seg != nil && cost > 0 {
		t := c.seg.t + int64(cost)
		c.clk.cancel(c.seg)
		c.seg = c.clk.at(t, c.segDone)
	}
	return c.intrUntil
}

// release gives up the CPU held by h.
func (c *core) release(h *handler) {
	if c.running == h {
		c.running = nil
	}
	c.dispatch()
}

// dispatch gives an idle CPU to the best runnable handler, paying a context
// switch (C_sw + C_cm) when the handler differs from the last one that ran,
// and one more C_sw for the channel proxy that wakes an early handler.
func (c *core) dispatch() {
	if c.running != nil || c.seg != nil {
		return
	}
	i, h := c.bestReady()
	if h == nil {
		return
	}
	copy(c.ready[i:], c.ready[i+1:])
	c.ready[len(c.ready)-1] = nil
	c.ready = c.ready[:len(c.ready)-1]
	c.running = h
	h.state = hRunning
	var cost time.Duration
	if h != c.lastRun {
		cost += c.p.Csw() + c.p.Ccm
		h.ch.st.ContextSwitches++
	}
	if h.class == classEarly && h.viaProxy {
		cost += c.p.Csw()
		h.viaProxy = false
	}
	c.lastRun = h
	if cost > 0 && c.costs {
		c.runSeg(cost, func() { c.step(h) })
		return
	}
	c.step(h)
}

func (c *core) gran(h *handler) Granularity {
	if h.ch.rt {
		return c.pol.RTPreempt
	}
	return c.pol.BEPreempt
}

// step is the handler's loop body (seed Fig. 3b); h holds the CPU.
func (c *core) step(h *handler) {
	ch := h.ch
	if h.pending != nil {
		c.placePacket(h)
		return
	}
	if h.cur == nil {
		m := c.popMsg(ch)
		if m == nil {
			h.state = hIdle
			h.class = 0
			c.release(h)
			return
		}
		h.cur, h.next = m, 0
		ch.st.MsgsStarted++
		if c.gran(h) != PreemptNever {
			h.atPoint = true
		}
	}
	c.classify(h)
	if h.class == classEarly && !c.pol.WorkConserving {
		// Non-work-conserving: suspend until the message is current.
		h.state = hSleep
		h.timer = c.clk.at(h.cur.logical, func() {
			h.timer = nil
			h.class = classCurrent
			h.key = c.pktDeadline(ch, h.cur, h.next)
			c.makeReady(h)
			c.dispatch()
		})
		c.release(h)
		return
	}
	if h.class == classEarly {
		// Work-conserving: the proxy in Q3 lets the handler run early; a
		// timer promotes it to Q1 when the message becomes current.
		c.armPromote(h, h.cur)
	}
	if h.atPoint {
		h.atPoint = false
		h.since = 0
		if _, b := c.bestReady(); b != nil && c.beats(b, h) {
			ch.st.Preemptions++
			if h.class == classEarly {
				h.viaProxy = true
			}
			c.running = nil
			c.makeReady(h)
			c.dispatch()
			return
		}
	}
	cost := c.p.Cp
	if h.next == 0 {
		cost = c.p.Cp1st
	}
	c.runSeg(cost, func() { c.packetMade(h) })
}

func (c *core) packetMade(h *handler) {
	m := h.cur
	ch := h.ch
	p := &packet{
		msg:      m,
		idx:      h.next,
		size:     c.p.PacketSize(m.size, h.next),
		deadline: c.pktDeadline(ch, m, h.next),
		logical:  m.logical,
	}
	if !ch.rt {
		p.deadline = 0
	}
	h.pending = p
	c.placePacket(h)
}

// placePacket queues h's pending packet, blocking h if the channel's packet
// queue is full, and calls the link scheduler.
func (c *core) placePacket(h *handler) {
	ch := h.ch
	p := h.pending
	if len(ch.pktq) >= ch.pktcap {
		if c.pol.BlockHandler {
			h.state = hBlocked
			ch.st.Blocks++
			c.release(h)
			return
		}
		h.pending = nil
		p.msg.dropped++
		ch.st.PktsDropped++
		if c.onDrop != nil {
			c.onDrop(ch, p.msg, 1, c.clk.now())
		}
		c.advance(h)
		return
	}
	h.pending = nil
	ch.pktq = append(ch.pktq, p)
	if len(ch.pktq) == 1 {
		c.enterLink(p)
	}
	if !c.linkBusy {
		if tx := c.selectPacket(); tx != nil {
			// Option 1: the handler runs the link scheduler itself.
			c.runSeg(c.p.Cl, func() {
				c.startTx(tx)
				c.advance(h)
			})
			return
		}
	}
	c.advance(h)
}

// advance moves h past the packet it just queued and continues the loop.
func (c *core) advance(h *handler) {
	h.next++
	h.since++
	if h.next >= h.cur.npkts {
		h.cur = nil
		h.next = 0
		if h.timer != nil {
			c.clk.cancel(h.timer)
			h.timer = nil
		}
	}
	if c.gran(h) == PreemptBlock && h.since >= c.p.P {
		h.atPoint = true
	}
	c.step(h)
}

// ---- link: three link packet queues, Fig. 6 ----

// enterLink puts a channel's head packet into the link packet queues.
func (c *core) enterLink(p *packet) {
	p.order = c.nextSeq()
	switch {
	case !p.msg.ch.rt:
		p.class, p.key = classBE, 0
	case p.logical <= c.clk.now()+int64(c.p.Horizon):
		p.class, p.key = classCurrent, p.deadline
	default:
		p.class, p.key = classEarly, p.logical
	}
	c.lq = append(c.lq, p)
}

// selectPacket is the processing of the seed's Fig. 6. It marks the link
// busy and returns the packet to transmit, or marks it idle (registering a
// wake-up for the first early packet) and returns nil.
func (c *core) selectPacket() *packet {
	c.linkBusy = true
	now := c.clk.now()
	horizon := now + int64(c.p.Horizon)
	bi := -1
	for i, p := range c.lq {
		if p.class == classEarly && p.logical <= horizon {
			p.class, p.key = classCurrent, p.deadline
		}
		if p.class == classEarly {
			continue
		}
		if bi < 0 {
			bi = i
			continue
		}
		b := c.lq[bi]
		switch {
		case p.class < b.class:
			bi = i
		case p.class > b.class:
		case p.class == classCurrent && p.key != b.key:
			if p.key < b.key {
				bi = i
			}
		case p.order < b.order:
			bi = i
		}
	}
	if bi >= 0 {
		p := c.lq[bi]
		copy(c.lq[bi:], c.lq[bi+1:])
		c.lq[len(c.lq)-1] = nil
		c.lq = c.lq[:len(c.lq)-1]
		return p
	}
	c.linkBusy = false
	var first *packet
	for _, p := range c.lq {
		if first == nil || p.logical < first.logical {
			first = p
		}
	}
	if first != nil {
		t := first.logical - int64(c.p.Horizon)
		if c.linkWake == nil || c.linkWake.t != t {
			if c.linkWake != nil {
				c.clk.cancel(c.linkWake)
			}
			c.linkWake = c.clk.at(t, func() {
				c.linkWake = nil
				c.linkSchedule()
			})
		}
	}
	return nil
}

// linkSchedule runs the link scheduler in interrupt context.
func (c *core) linkSchedule() {
	if c.linkBusy {
		return
	}
	tx := c.selectPacket()
	if tx == nil {
		return
	}
	t := c.interrupt(c.p.Cl)
	c.clk.at(t, func() { c.startTx(tx) })
}

func (c *core) startTx(p *packet) {
	now := c.clk.now()
	p.txStart = now
	done := c.link.transmit(p, now)
	c.txBusyNs += done - now
	c.clk.at(done, func() { c.txDone(p) })
}

func (c *core) txDone(p *packet) {
	now := c.clk.now()
	m := p.msg
	ch := m.ch
	ch.st.PktsSent++
	ch.st.BytesSent += uint64(p.size)
	if ch.rt && now > p.deadline {
		ch.st.Misses++
	}
	m.done++
	if c.onPkt != nil {
		c.onPkt(p, now)
	}
	if m.done+m.dropped == m.npkts && m.dropped == 0 {
		ch.st.MsgsSent++
		if ch.rt {
			lax := m.deadline - now
			if lax < 0 {
				ch.st.MsgMisses++
			}
			ch.st.SumLaxity += lax
			ch.st.MinLaxity = min(ch.st.MinLaxity, time.Duration(lax))
			ch.st.MaxLaxity = max(ch.st.MaxLaxity, time.Duration(lax))
		}
		if c.onMsg != nil {
			c.onMsg(m, now)
		}
	}
	// The channel's next packet joins the link queues.
	if len(ch.pktq) > 0 && ch.pktq[0] == p {
		ch.pktq[0] = nil
		ch.pktq = ch.pktq[1:]
		if len(ch.pktq) > 0 {
			c.enterLink(ch.pktq[0])
		}
	}
	c.linkBusy = false
	c.linkSchedule()
	// Signal the packet queue semaphore.
	if h := ch.h; h.state == hBlocked {
		c.makeReady(h)
		c.dispatch()
	}
}

// closeChannel stops accepting messages; queued ones are still served.
func (c *core) closeChannel(ch *channel) {
	ch.closed = true
	ch.backlg = nil
}

// utilisation of the CPU and the link so far.
func (c *core) busy() (cpu, link time.Duration) {
	return time.Duration(c.cpuBusyNs), time.Duration(c.txBusyNs)
}
