// Package events is the daemon's event stream (docs/events.md): front
// doors and the engine publish events; readers subscribe and read them in
// order, each seeing only the events of objects it may see. Publishing
// never waits for a reader (hub.go: a bounded ring of recent events, a
// bounded number of readers per ordinary user), and what one ordinary
// user or one remote party may have published one by one is limited
// (limit.go: a token bucket per principal, coalesced summaries at the end
// of a minute).
//
// The stream's locks are its own: it may be used with or without the
// engine's lock held, and it calls nothing of its caller's while it holds
// them.
package events

import (
	"time"

	"github.com/hostqos/hostqos/api"
)

// Viewer is who reads the stream.
type Viewer struct {
	UID uint32
	// Privileged readers (root and group hostqos) see every event and are
	// not counted against the bounds of ordinary users' readers; others
	// see host-policy events and those of their own objects.
	Privileged bool
}

// TooManyError is a reader refused because a bound on readers is reached.
type TooManyError struct{ Why string }

func (e *TooManyError) Error() string { return e.Why }

// KindError is a kinds filter that is not one (empty, too long, too many).
type KindError struct{ Err error }

func (e *KindError) Error() string { return e.Err.Error() }
func (e *KindError) Unwrap() error { return e.Err }

// Config sets up a Stream; zero values are the defaults.
type Config struct {
	// Ring is how many recent events are held (0: DefaultRing).
	Ring int
	// MaxPerUser and MaxUsers bound the readers of one ordinary user and
	// of all of them (0: DefaultMaxPerUser, DefaultMaxUsers).
	MaxPerUser, MaxUsers int
	// Limits bound what one principal may have published one by one.
	Limits Limits
	// Now is the clock of seqs, event times and the limiter's windows
	// (nil: time.Now).
	Now func() time.Time
	// Record, when set, is given every event published, after it is in
	// the ring and outside the stream's locks (the history recorder). It
	// must not block.
	Record func(api.Event)
}

// Stream is the event stream: the ring of recent events and its readers,
// and the limiter in front of it.
type Stream struct {
	hub    *eventHub
	lim    *evLimiter
	record func(api.Event)
}

// New makes a stream. Seqs start at the clock in microseconds, so that
// they keep increasing across restarts of the daemon.
func New(cfg Config) *Stream {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Stream{hub: newEventHub(cfg.Ring, cfg.MaxPerUser, cfg.MaxUsers, cfg.Now),
		lim: newEvLimiter(cfg.Limits, cfg.Now), record: cfg.Record}
}

// Publish adds an event to the stream (its Seq and Time are set here) and
// returns its seq. It never waits for a reader.
// An event about an ordinary user's object (UID set and not 0) is charged
// to that user: over the user's limits it is counted, not published (seq
// 0), and a summary stands for it at the end of the minute. Other events
// are published as they are.
func (s *Stream) Publish(ev api.Event) uint64 {
	p, limited := userPrincipal(ev)
	return s.publishLimited(p, limited, ev)
}

// PublishBy publishes ev charged to p (e.g. Host of the remote party whose
// message caused it), as Publish does for a user.
func (s *Stream) PublishBy(p Principal, ev api.Event) uint64 {
	return s.publishLimited(p, true, ev)
}

// publishLimited publishes ev charged to p (limited) or, without a
// principal, as it is; first the summaries of a window that ended.
func (s *Stream) publishLimited(p Principal, limited bool, ev api.Event) uint64 {
	show := true
	var due []api.Event
	if limited {
		show, due = s.lim.admit(p, ev)
	}
	for _, d := range due {
		s.publishNow(d)
	}
	if !show {
		return 0
	}
	return s.publishNow(ev)
}

// publishNow publishes ev as it is.
func (s *Stream) publishNow(ev api.Event) uint64 {
	seq := s.hub.publish(ev)
	if s.record != nil {
		s.record(ev)
	}
	return seq
}

// Flush publishes the summaries of the limiter's window when it has ended
// (all of them now, with force: the daemon stops).
func (s *Stream) Flush(force bool) {
	for _, d := range s.lim.roll(force) {
		s.publishNow(d)
	}
}

// SetLimits sets the limits of what one ordinary user or one remote party
// may have published one by one (zero: the defaults).
func (s *Stream) SetLimits(l Limits) { s.lim.set(l) }

// LimitStats reads the limiter's counters.
func (s *Stream) LimitStats() LimitStats { return s.lim.stats() }

// Subscribe opens a reader of the stream for who: since (nil: from the
// next event) resumes after that seq; kinds filters by kind (see
// api.EventsOptions; a *KindError when it is not a filter). An ordinary
// user may hold a bounded number of readers (a *TooManyError beyond).
// Close it when done.
func (s *Stream) Subscribe(who Viewer, since *uint64, kinds []string) (*Subscription, error) {
	return s.hub.subscribe(who, since, kinds)
}

// LastSeq is the seq of the last event published (the first one's minus
// one before any).
func (s *Stream) LastSeq() uint64 { return s.hub.last() }
