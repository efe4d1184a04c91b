package rtchan

import (
	"fmt"
	"time"
)

// Message is a message delivered to a receiving endpoint.
type Message struct {
	Channel ChannelID
	Seq     uint64
	Size    int
	Data    []byte // nil when the sender sent only a size (virtual time)
	// Deadline, Arrival and Laxity (= Deadline - Arrival) are offsets from
	// the clock origin: the start of the run in virtual time, the Unix
	// epoch for UDP.
	Deadline time.Duration
	Arrival  time.Duration
	Laxity   time.Duration
	// BestEffort messages carry no deadline.
	BestEffort bool
}

// nullDevice is the seed's null device: it consumes L_x(s) per packet and
// signals completion; nothing is sent anywhere.
type nullDevice struct{ p Params }

func (d nullDevice) transmit(pk *packet, now int64) int64 {
	return now + int64(d.p.Lx(pk.size))
}

// Sim is a host with real-time channels over the emulated link (the null
// device), run in virtual time by a deterministic discrete-event engine
// that charges the CPU costs of Params. It is not safe for concurrent use:
// drive it from one goroutine, scheduling application actions with At.
type Sim struct {
	vc       *vclock
	c        *core
	p        Params
	eps      map[string]*SimEndpoint
	admitted map[ChannelID]Spec
}

// SimEndpoint is a receiving endpoint (rtc_init) in a Sim: a bounded local
// queue of messages that completed transmission.
type SimEndpoint struct {
	name     string
	q        []Message
	cap      int
	Overflow uint64 // messages lost because the queue was full
}

// NewSim makes a virtual-time host.
func NewSim(p Params, pol Policy) (*Sim, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	vc := &vclock{}
	s := &Sim{vc: vc, p: p, eps: map[string]*SimEndpoint{}, admitted: map[ChannelID]Spec{}}
	s.c = newCore(vc, p, pol, true, nullDevice{p})
	s.c.onMsg = s.deliver
	return s, nil
}

// SimPacket is a packet whose transmission completed in a Sim. Times are
// virtual, from the start of the run.
type SimPacket struct {
	Channel    ChannelID
	Seq        uint64 // its message's
	Index      int    // within its message
	Size       int    // bytes of its message it carries
	BestEffort bool
	Logical    time.Duration // its message's logical arrival time
	Deadline   time.Duration // zero for best effort
	Start      time.Duration // its transmission began
	Done       time.Duration // and completed
}

// SimDrop is Packets packets of message Seq of a channel dropped by
// overload protection at At: the whole message (Packets == Of) when its
// message queue was full, one packet when its packet queue was.
type SimDrop struct {
	Channel     ChannelID
	Seq         uint64
	Packets, Of int
	At          time.Duration
}

// SimTrace receives a Sim's events as they happen, for experiments that
// measure a run (the seed's evaluation in internal/lab/rtchanlab). Any
// field may be nil; each runs on the goroutine that drives the Sim.
type SimTrace struct {
	Packet  func(SimPacket)
	Message func(Message) // every message completed, delivered or not
	Drop    func(SimDrop)
}

// Trace sends the Sim's events to t from now on, in place of an earlier
// trace.
func (s *Sim) Trace(t SimTrace) {
	s.c.onPkt, s.c.onDrop = nil, nil
	if t.Packet != nil {
		s.c.onPkt = func(p *packet, now int64) {
			t.Packet(SimPacket{Channel: p.msg.ch.id, Seq: p.msg.seq, Index: p.idx, Size: p.size, BestEffort: !p.msg.ch.rt,
				Logical: time.Duration(p.logical), Deadline: time.Duration(p.deadline), Start: time.Duration(p.txStart), Done: time.Duration(now)})
		}
	}
	s.c.onMsg = s.deliver
	if t.Message != nil {
		s.c.onMsg = func(m *message, now int64) {
			s.deliver(m, now)
			t.Message(simMessage(m, now))
		}
	}
	if t.Drop != nil {
		s.c.onDrop = func(ch *channel, m *message, pkts int, now int64) {
			t.Drop(SimDrop{Channel: ch.id, Seq: m.seq, Packets: pkts, Of: m.npkts, At: time.Duration(now)})
		}
	}
}

// Init creates a receiving endpoint named name whose queue holds up to
// capacity messages (rtc_init). capacity <= 0 means "count only, keep
// nothing".
func (s *Sim) Init(name string, capacity int) (*SimEndpoint, error) {
	if _, ok := s.eps[name]; ok {
		return nil, fmt.Errorf("create endpoint %q: already exists", name)
	}
	ep := &SimEndpoint{name: name, cap: capacity}
	s.eps[name] = ep
	return ep, nil
}

// Create establishes a channel to endpoint dest after admission control
// (rtc_create). A refusal is an *AdmissionError.
func (s *Sim) Create(dest string, spec Spec) (ChannelID, error) {
	if _, ok := s.eps[dest]; !ok && dest != "" {
		return -1, fmt.Errorf("create channel %q to %q: %w", spec.Name, dest, ErrNoEndpoint)
	}
	if err := spec.Validate(); err != nil {
		return -1, err
	}
	if !spec.BestEffort {
		var est []Spec
		for id := ChannelID(0); int(id) < len(s.c.chans); id++ {
			if sp, ok := s.admitted[id]; ok {
				est = append(est, sp)
			}
		}
		if _, err := s.p.Admit(est, spec); err != nil {
			return -1, err
		}
	}
	ch := s.c.addChannel(spec, dest)
	if !spec.BestEffort {
		s.admitted[ch.id] = spec
	}
	return ch.id, nil
}

func (s *Sim) channel(id ChannelID) (*channel, error) {
	if id < 0 || int(id) >= len(s.c.chans) {
		return nil, fmt.Errorf("use channel %d: %w", id, ErrNoChannel)
	}
	return s.c.chans[id], nil
}

// Send presents msg on channel id at the current virtual instant
// (rtc_send). ErrQueueFull reports a message dropped by overflow
// protection.
func (s *Sim) Send(id ChannelID, msg []byte) error {
	return s.SendSize(id, len(msg), msg)
}

// SendSize is Send for a message of size bytes whose content does not
// matter (data may be nil).
func (s *Sim) SendSize(id ChannelID, size int, data []byte) error {
	ch, err := s.channel(id)
	if err != nil {
		return err
	}
	return s.c.send(ch, size, data)
}

// Close tears channel id down (rtc_close): no more messages are accepted,
// queued ones are still transmitted, and its reservation is released.
func (s *Sim) Close(id ChannelID) error {
	ch, err := s.channel(id)
	if err != nil {
		return err
	}
	s.c.closeChannel(ch)
	delete(s.admitted, id)
	return nil
}

// Stats returns channel id's counters.
func (s *Sim) Stats(id ChannelID) (ChannelStats, error) {
	ch, err := s.channel(id)
	if err != nil {
		return ChannelStats{}, err
	}
	return ch.st.clean(), nil
}

// Now is the current virtual time.
func (s *Sim) Now() time.Duration { return time.Duration(s.vc.now()) }

// At schedules fn (an application action such as a Send) at virtual time t.
func (s *Sim) At(t time.Duration, fn func()) { s.vc.at(int64(t), fn) }

// RunUntil advances virtual time to t, running everything due.
func (s *Sim) RunUntil(t time.Duration) { s.vc.runUntil(int64(t)) }

// RunWhile runs events while cond holds and events remain.
func (s *Sim) RunWhile(cond func() bool) {
	for cond() && s.vc.step() {
	}
}

// Busy reports the CPU time consumed (handlers, link scheduling, context
// switches) and the link time used so far.
func (s *Sim) Busy() (cpu, link time.Duration) { return s.c.busy() }

func (s *Sim) deliver(m *message, now int64) {
	ep := s.eps[m.ch.dest]
	if ep == nil || ep.cap <= 0 {
		return
	}
	if len(ep.q) >= ep.cap {
		ep.Overflow++
		return
	}
	ep.q = append(ep.q, simMessage(m, now))
}

// simMessage is m, completed at now, as its receiver sees it.
func simMessage(m *message, now int64) Message {
	return Message{
		Channel:    m.ch.id,
		Seq:        m.seq,
		Size:       m.size,
		Data:       m.data,
		Deadline:   time.Duration(m.deadline),
		Arrival:    time.Duration(now),
		Laxity:     time.Duration(m.deadline - now),
		BestEffort: !m.ch.rt,
	}
}

// Recv takes the next message from the endpoint queue (rtc_rcv); false if
// the queue is empty (advance the Sim to get more).
func (e *SimEndpoint) Recv() (Message, bool) {
	if len(e.q) == 0 {
		return Message{}, false
	}
	m := e.q[0]
	e.q = e.q[1:]
	return m, true
}

// Len is the number of queued messages.
func (e *SimEndpoint) Len() int { return len(e.q) }
