package engine

import (
	"errors"

	"github.com/hostqos/hostqos/internal/apps"
	"github.com/hostqos/hostqos/internal/datapath"
)

// Send buffers of sockets that were open before their reservation. A
// socket that connects under a guaranteed reservation gets the
// reservation's send buffer from the connect hook, so that a sender
// faster than R blocks in send() (shaping by flow control). A socket that
// was already open — bound when the reservation was applied, or bound by
// its first packet or its unconnected sendmsg() — keeps its own, which
// may let it queue more than the reservation's leaf holds. The
// reservation poller sizes those (through the process's pidfd, matching
// the socket by its cookie) and, when the socket leaves the reservation
// while it stays open (the reservation was removed or changed), gives it
// back the send buffer it had.

// sizedSocket is a socket whose send buffer the poller set.
type sizedSocket struct {
	pid    uint32
	resv   uint16
	size   uint32 // what it was given (setsockopt's value)
	old    int    // what it had (getsockopt's value); 0: unknown
	failed bool   // the poller could not set it; not retried
}

// sizeSendBuffers gives the bound sockets of guaranteed reservations
// whose send buffer the connect hook did not set the reservation's, and
// restores the send buffer of those that left their reservation. Called by
// the poller without the engine lock (it talks to other processes).
func (e *Engine) sizeSendBuffers(k Kernel, binds []datapath.Binding) {
	e.mu.Lock()
	want := map[uint16]uint32{}
	if e.desired != nil {
		for _, r := range e.desired.Datapath.Reservations {
			if r.SendBuffer > 0 {
				want[r.ID] = r.SendBuffer
			}
		}
	}
	e.mu.Unlock()
	w := &e.resvW
	if w.sized == nil {
		w.sized = map[uint64]sizedSocket{}
	}
	now := make(map[uint64]datapath.Binding, len(binds))
	for _, b := range binds {
		now[b.Cookie] = b
		size := want[b.Reservation]
		if size == 0 || !b.Counted || b.SendBufferSet {
			continue
		}
		prev, had := w.sized[b.Cookie]
		if had && (prev.failed || prev.resv == b.Reservation && prev.size == size) {
			continue
		}
		old, err := k.SetSendBuffer(b.PID, b.Cookie, int(size))
		if err != nil {
			if !errors.Is(err, apps.ErrSocketGone) {
				e.log.Warn("size the send buffer of a socket open before its reservation", "pid", b.PID, "err", err)
			}
			w.sized[b.Cookie] = sizedSocket{pid: b.PID, resv: b.Reservation, size: size, failed: true}
			continue
		}
		if had && !prev.failed {
			old = prev.old // the socket's own, from before the first change
		}
		w.sized[b.Cookie] = sizedSocket{pid: b.PID, resv: b.Reservation, size: size, old: old}
	}
	for c, s := range w.sized {
		b, bound := now[c]
		if bound && b.Counted && b.Reservation == s.resv && (s.failed || want[s.resv] == s.size) {
			continue
		}
		delete(w.sized, c)
		if s.failed || s.old == 0 {
			continue
		}
		// Unbound while open, or its reservation no longer asks for this
		// size: the socket gets its own send buffer back (setsockopt
		// takes half of what getsockopt read). A closed socket is gone.
		if _, err := k.SetSendBuffer(s.pid, c, s.old/2); err != nil && !errors.Is(err, apps.ErrSocketGone) {
			e.log.Warn("restore the send buffer of a socket that left its reservation", "pid", s.pid, "err", err)
		}
	}
}
