package engine

import (
	"fmt"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/datapath"
	"github.com/hostqos/hostqos/internal/observe"
)

// Event kinds of sockets and sessions.
const (
	EventSocketBound     = "socket.bound"
	EventSocketUnbound   = "socket.unbound"
	EventSessionRefused  = "session.refused"
	EventPolicingViolate = "policing.violation"
)

// violationEvery is the least time between two policing.violation events
// of one reservation (each carries the counts since the last).
const violationEvery = 5 * time.Second

// resvWatch is what the reservation poller remembers between ticks.
type resvWatch struct {
	bound     map[uint64]datapath.Binding // by socket cookie
	refuseSeq uint64
	primed    bool
	lastNC    map[uint16]uint64      // non-conformant packets at the last event
	lastAt    map[uint16]time.Time   // time of the last violation event
	sized     map[uint64]sizedSocket // send buffers set by the poller (resv_sndbuf.go)
}

// pollReservations publishes what the kernel did with reservations since
// the last tick: sockets bound and unbound, sessions refused (each with
// who and why), policing violations (at most one event per reservation
// every violationEvery, with counts).
func (e *Engine) pollReservations() {
	e.mu.Lock()
	k := e.k
	names := e.resvIDNamesLocked()
	e.mu.Unlock()
	if k == nil {
		return
	}
	w := &e.resvW
	if !w.primed {
		e.primeReservations(k)
		return
	}
	binds, berr := k.Bindings()
	refusals, last, rerr := k.SessionRefusals(w.refuseSeq)
	counters, cerr := k.ReservationCounters()
	if berr == nil {
		now := map[uint64]datapath.Binding{}
		for _, b := range binds {
			now[b.Cookie] = b
			if _, ok := w.bound[b.Cookie]; !ok {
				e.publishBinding(EventSocketBound, "bound to", b, names)
			}
		}
		for c, b := range w.bound {
			if _, ok := now[c]; !ok {
				e.publishBinding(EventSocketUnbound, "unbound from", b, names)
			}
		}
		w.bound = now
		e.sizeSendBuffers(k, binds)
	}
	if rerr == nil {
		if len(refusals) > 0 && refusals[0].Seq > w.refuseSeq+1 {
			e.Publish(api.Event{Kind: EventSessionRefused, Message: fmt.Sprintf("%d session refusals were not read in time (the kernel keeps the last ones)", refusals[0].Seq-w.refuseSeq-1),
				Fields: map[string]any{"missed": refusals[0].Seq - w.refuseSeq - 1}})
		}
		for _, r := range refusals {
			uid := r.UID
			call := "connect()"
			if r.Kind == datapath.RefusedSend {
				call = "sendmsg()"
			}
			subj := subjectOf(names[r.Reservation])
			e.Publish(api.Event{Kind: EventSessionRefused, Subject: subj, UID: &uid,
				Message: fmt.Sprintf("%s of pid %d (%s) to %s refused with EPERM: %s admits at most %d sessions", call, r.PID, r.Comm, r.Key.Remote, subj, r.Limit),
				Fields:  map[string]any{"pid": r.PID, "comm": r.Comm, "call": call, "remote": r.Key.Remote.String(), "limit": r.Limit, "errno": "EPERM"}})
		}
		w.refuseSeq = last
	}
	if cerr == nil {
		now := time.Now()
		for id, c := range counters {
			d := c.NonConformantPackets - w.lastNC[id]
			if c.NonConformantPackets < w.lastNC[id] { // the reservation started afresh
				w.lastNC[id], d = c.NonConformantPackets, 0
			}
			if d == 0 || now.Sub(w.lastAt[id]) < violationEvery {
				continue
			}
			subj := subjectOf(names[id])
			e.Publish(api.Event{Kind: EventPolicingViolate, Subject: subj,
				Message: fmt.Sprintf("%s: %d packets outside the Tspec since the last report (%d in all; %d oversize; %d shaped; %d bytes demoted)",
					subj, d, c.NonConformantPackets, c.OversizePackets, c.ShapedPackets, c.DemotedBytes),
				Fields: map[string]any{"nonconformant_packets": d, "nonconformant_total": c.NonConformantPackets,
					"oversize_total": c.OversizePackets, "shaped_total": c.ShapedPackets, "demoted_bytes_total": c.DemotedBytes}})
			w.lastNC[id], w.lastAt[id] = c.NonConformantPackets, now
		}
	}
}

// primeReservations learns what the kernel holds now, so that the poller
// publishes only what happens afterwards (called by Start; a restarted
// daemon does not replay old refusals or bindings).
func (e *Engine) primeReservations(k Kernel) {
	w := &e.resvW
	w.primed = true
	w.bound, w.lastNC, w.lastAt = map[uint64]datapath.Binding{}, map[uint16]uint64{}, map[uint16]time.Time{}
	if binds, err := k.Bindings(); err == nil {
		for _, b := range binds {
			w.bound[b.Cookie] = b
		}
	}
	if _, last, err := k.SessionRefusals(0); err == nil {
		w.refuseSeq = last
	}
	if counters, err := k.ReservationCounters(); err == nil {
		for id, c := range counters {
			w.lastNC[id] = c.NonConformantPackets
		}
	}
}

func (e *Engine) publishBinding(kind, verb string, b datapath.Binding, names map[uint16]string) {
	uid := b.UID
	subj := subjectOf(names[b.Reservation])
	e.Publish(api.Event{Kind: kind, Subject: subj, UID: &uid,
		Message: fmt.Sprintf("%s socket of pid %d (%s) to %s %s %s", observe.ProtoName(b.Key.Proto), b.PID, b.Comm, b.Key.Remote, verb, subj),
		Fields:  map[string]any{"pid": b.PID, "comm": b.Comm, "proto": observe.ProtoName(b.Key.Proto), "local": b.Key.Local.String(), "remote": b.Key.Remote.String(), "cookie": b.Cookie}})
}

// subjectOf turns "resv:NAME" / "rule:NAME" into an event subject.
func subjectOf(key string) string {
	switch {
	case len(key) > 5 && key[:5] == "resv:":
		return "reservation/" + key[5:]
	case len(key) > 5 && key[:5] == "rule:":
		return "rule/" + key[5:]
	}
	return "reservation/?"
}

// monotonicNS is CLOCK_MONOTONIC in ns (the kernel's bpf_ktime_get_ns).
func monotonicNS() uint64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return uint64(ts.Nano())
}
