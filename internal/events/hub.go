package events

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/hostqos/hostqos/api"
)

// The ring and its readers. Publishing never waits for a reader: events
// go into a bounded ring of recent events, and each reader reads the ring
// at its own pace from its own position. A reader that falls more than
// the ring behind gets one api.EventLost marker with the number it missed,
// then continues with the oldest event still held. Each event is seen only
// by who may see its object (see visible).

// Default bounds of the event stream.
const (
	// DefaultRing is how many recent events the stream holds for readers
	// and for resuming (?since=SEQ).
	DefaultRing = 4096
	// DefaultMaxPerUser bounds the event streams one ordinary user may
	// follow at once (root and group hostqos are not limited).
	DefaultMaxPerUser = 4
	// DefaultMaxUsers bounds the event streams of all ordinary users
	// together.
	DefaultMaxUsers = 64
	// maxEventBatch is the most events one Next returns.
	maxEventBatch = 256
)

// eventHub holds the ring and the readers. Its lock is its own (never the
// engine's), and nothing is called while it is held.
type eventHub struct {
	mu      sync.Mutex
	ring    []api.Event // ring[i%len] holds seq first+i… ; len(ring) fixed
	first   uint64      // seq of the oldest event held
	next    uint64      // seq the next event gets
	start   uint64      // seq of this stream's first event
	subs    map[*Subscription]struct{}
	byUID   map[uint32]int // readers of ordinary users
	users   int
	perUser int
	total   int
	now     func() time.Time
}

// newEventHub makes a hub holding ringSize events. Seqs start at the clock
// in microseconds, so that they keep increasing across restarts (a reader
// resuming after a restart is not stuck behind a seq the new daemon has
// not reached).
func newEventHub(ringSize, perUser, total int, now func() time.Time) *eventHub {
	if ringSize <= 0 {
		ringSize = DefaultRing
	}
	if perUser <= 0 {
		perUser = DefaultMaxPerUser
	}
	if total <= 0 {
		total = DefaultMaxUsers
	}
	s := uint64(now().UnixMicro())
	return &eventHub{ring: make([]api.Event, ringSize), first: s, next: s, start: s,
		subs: map[*Subscription]struct{}{}, byUID: map[uint32]int{}, perUser: perUser, total: total, now: now}
}

// publish adds ev to the ring (its Seq and Time are set here), wakes the
// readers and returns its seq.
func (h *eventHub) publish(ev api.Event) uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	ev.Seq, ev.Time = h.next, h.now()
	h.ring[int(h.next%uint64(len(h.ring)))] = ev
	h.next++
	if h.next-h.first > uint64(len(h.ring)) {
		h.first = h.next - uint64(len(h.ring))
	}
	for s := range h.subs {
		select {
		case s.wake <- struct{}{}:
		default: // already woken
		}
	}
	return ev.Seq
}

// Subscription is one reader of the event stream.
type Subscription struct {
	h      *eventHub
	who    Viewer
	kinds  []string
	pos    uint64 // seq of the next event to read
	lostAt bool   // the reader resumed from before this stream's events
	wake   chan struct{}
	closed bool
}

// subscribe opens a reader for who (see Stream.Subscribe).
func (h *eventHub) subscribe(who Viewer, since *uint64, kinds []string) (*Subscription, error) {
	for _, k := range kinds {
		if k == "" || len(k) > 64 || strings.ContainsAny(k, " \t\n") {
			return nil, &KindError{fmt.Errorf("event kind %q: want a kind or its prefix, e.g. reservation or reservation.admitted", clipKind(k))}
		}
	}
	if len(kinds) > 32 {
		return nil, &KindError{fmt.Errorf("event kinds: %d given, at most 32", len(kinds))}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	s := &Subscription{h: h, who: who, kinds: kinds, pos: h.next, wake: make(chan struct{}, 1)}
	if since != nil {
		switch {
		case *since >= h.next:
			// Nothing after it yet (or a seq this daemon never gave,
			// e.g. after the clock went back): from the next event.
			s.pos = h.next
		case *since < h.start:
			// From an earlier daemon: what it did not send is gone.
			s.pos, s.lostAt = h.start, true
		default:
			s.pos = *since + 1
		}
	}
	if !who.Privileged {
		switch {
		case h.byUID[who.UID] >= h.perUser:
			return nil, &TooManyError{Why: fmt.Sprintf("too many event streams of uid %d (limit %d per user); close one", who.UID, h.perUser)}
		case h.users >= h.total:
			return nil, &TooManyError{Why: fmt.Sprintf("too many event streams of ordinary users (limit %d in all); try again later", h.total)}
		}
		h.byUID[who.UID]++
		h.users++
	}
	h.subs[s] = struct{}{}
	return s, nil
}

func clipKind(k string) string {
	if len(k) > 64 {
		return k[:64] + "…"
	}
	return k
}

// Close ends the reader and frees its place.
func (s *Subscription) Close() {
	h := s.h
	h.mu.Lock()
	defer h.mu.Unlock()
	if s.closed {
		return
	}
	s.closed = true
	delete(h.subs, s)
	if !s.who.Privileged {
		h.users--
		if h.byUID[s.who.UID]--; h.byUID[s.who.UID] <= 0 {
			delete(h.byUID, s.who.UID)
		}
	}
}

// Next returns the next events the reader may see (at most a batch), in
// seq order, waiting for one until ctx ends (then ctx's error). A reader
// that fell behind the ring first gets an api.EventLost marker saying how
// many it missed (its Seq is the last missed one).
func (s *Subscription) Next(ctx context.Context) ([]api.Event, error) {
	for {
		if out := s.take(); len(out) > 0 {
			return out, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-s.wake:
		}
	}
}

// take returns what is there to read now.
func (s *Subscription) take() []api.Event {
	h := s.h
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []api.Event
	if s.lostAt {
		s.lostAt = false
		out = append(out, api.Event{Kind: api.EventLost, Time: h.now(),
			Message: "the daemon restarted; events it had not sent before are lost"})
	}
	if s.pos < h.first {
		n := h.first - s.pos
		out = append(out, api.Event{Kind: api.EventLost, Seq: h.first - 1, Time: h.now(), Lost: n,
			Message: fmt.Sprintf("missed %d events (read too slowly: the daemon holds the last %d)", n, len(h.ring))})
		s.pos = h.first
	}
	for ; s.pos < h.next && len(out) < maxEventBatch; s.pos++ {
		ev := h.ring[int(s.pos%uint64(len(h.ring)))]
		if visible(s.who, ev) && s.wants(ev.Kind) {
			out = append(out, ev)
		}
	}
	if s.pos < h.next {
		select { // more to read: the next Next does not wait
		case s.wake <- struct{}{}:
		default:
		}
	}
	return out
}

// wants reports whether the reader's kinds filter keeps kind.
func (s *Subscription) wants(kind string) bool {
	if len(s.kinds) == 0 {
		return true
	}
	for _, k := range s.kinds {
		if kind == k || strings.HasPrefix(kind, k+".") {
			return true
		}
	}
	return false
}

// visible reports whether who may see ev: privileged callers see all;
// ordinary users see public events (host policy) and those of their own
// objects.
func visible(who Viewer, ev api.Event) bool {
	return who.Privileged || ev.UID == nil || *ev.UID == who.UID
}

// last is the seq of the last event published (the first one's minus one
// before any).
func (h *eventHub) last() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.next - 1
}
