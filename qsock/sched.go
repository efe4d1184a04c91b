package qsock

import (
	"fmt"
	"time"
)

// The scheduler seam. A qsocket's scheduler decides, at the source, for
// each message handed to Send/SendTo: send it now, or drop it (counted,
// never sent). It may also pace (delay) a message. The library runs fifo
// (with optional pacing at Params.Rate), edf-lossless (send all, count
// the late) and edf-lossy (drop what already cannot meet its deadline
// given the measured queueing delay, whole frames together, never a
// non-droppable message); dwcs sends. The decisions across all qsockets
// of a link (DWCS windows, EDF against the link's backlog, drop
// priorities) are the host's, in the TC egress program, from the
// attributes each message carries (txtime.go; docs/qsockets.md,
// "Schedulers"). No packet is held: every decision is taken in the
// sending thread or as the packet passes.

type decision int

const (
	send decision = iota
	drop
)

type scheduler interface {
	// decide is asked once per message, before it is sent; qdelay is
	// the current estimate of the host's queueing delay.
	decide(now time.Time, f *Flags, qdelay time.Duration) decision
	// pace is how long to wait before sending n bytes.
	pace(now time.Time, n int) time.Duration
}

func newScheduler(p Params) (scheduler, error) {
	pc := pacer{rate: p.Rate}
	if scheduledSched(p.Scheduler) {
		pc.rate = 0 // the declared rate is the host scheduler's
	}
	switch p.Scheduler {
	case "", FIFO, DWCS, EDFLossless:
		return &fifo{pacer: pc}, nil
	case EDFLossy:
		return &edfLossy{pacer: pc}, nil
	}
	return nil, fmt.Errorf("unknown scheduler %q: use fifo, dwcs, edf-lossy or edf-lossless", p.Scheduler)
}

// pacer spaces messages at rate bit/s (virtual scheduling: each message
// starts no earlier than the previous one's end at that rate).
type pacer struct {
	rate uint64
	tat  time.Time
}

func (p *pacer) pace(now time.Time, n int) time.Duration {
	if p.rate == 0 {
		return 0
	}
	start := p.tat
	if start.Before(now) {
		start = now
	}
	p.tat = start.Add(time.Duration(uint64(n) * 8 * uint64(time.Second) / p.rate))
	return start.Sub(now)
}

type fifo struct{ pacer }

func (*fifo) decide(time.Time, *Flags, time.Duration) decision { return send }

// edfLossy drops, at the source, a message that cannot arrive before its
// deadline: one whose deadline is before now plus the queueing delay
// expected on the host. A frame's fate is decided at its first message
// and shared by the rest of it. A non-droppable message is always sent.
type edfLossy struct {
	pacer
	inFrame, frameDropped bool
}

func late(now time.Time, f *Flags, qdelay time.Duration) bool {
	return !f.Deadline.IsZero() && now.Add(qdelay).After(f.Deadline)
}

func (e *edfLossy) decide(now time.Time, f *Flags, qdelay time.Duration) decision {
	var dropIt bool
	switch {
	case f.FrameStart:
		e.frameDropped = late(now, f, qdelay)
		e.inFrame = !f.FrameEnd
		dropIt = e.frameDropped
	case e.inFrame:
		dropIt = e.frameDropped
		if f.FrameEnd {
			e.inFrame = false
		}
	default:
		dropIt = late(now, f, qdelay)
	}
	if dropIt && !f.NonDroppable {
		return drop
	}
	return send
}

// sourceStats are the library's own counts of a qsocket's messages.
type sourceStats struct {
	sentMsgs, sentBytes       uint64
	droppedMsgs, droppedBytes uint64
	lateMsgs, lateBytes       uint64
}
