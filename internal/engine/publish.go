package engine

import (
	"errors"
	"fmt"
	"time"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/events"
)

// The engine's side of the event stream (internal/events): front doors and
// the engine publish through the engine, readers subscribe through it as
// a Caller. The stream's locks are its own, so these may be called with or
// without the engine's lock held.

// Event kinds the engine publishes itself.
const (
	EventDaemonStarted = "daemon.started"
	EventPolicyLoaded  = "policy.reloaded"
)

// Kinds of the events of quotas and schedules.
const (
	EventQuotaReached = "quota.reached"
	EventQuotaReset   = "quota.reset"
	EventScheduleOn   = "schedule.on"
	EventScheduleOff  = "schedule.off"
)

// publish hands events to the event stream and the log.
func (e *Engine) publish(evs ...api.Event) {
	for _, ev := range evs {
		e.Publish(ev)
		e.log.Info("event", "kind", ev.Kind, "subject", ev.Subject, "message", ev.Message)
	}
}

// newEvents makes the engine's event stream on the clock now; what it
// publishes is also recorded in the history store, when there is one.
func (e *Engine) newEvents(lim events.Limits, now func() time.Time) *events.Stream {
	return events.New(events.Config{MaxPerUser: e.cfg.MaxSubscribersPerUser, MaxUsers: e.cfg.MaxUserSubscribers,
		Limits: lim, Now: now, Record: e.obs.RecordEvent})
}

// Publish adds an event to the stream (its Seq and Time are set there) and
// returns its seq. It never waits for a reader.
// The event is also recorded in the history store, when there is one.
// An event about an ordinary user's object is charged to that user: over
// the user's limits it is counted, not published (seq 0), and a summary
// stands for it at the end of the minute (docs/events.md).
func (e *Engine) Publish(ev api.Event) uint64 { return e.events.Publish(ev) }

// PublishBy publishes ev charged to p (a remote party: events.Host), as
// Publish does for a user.
func (e *Engine) PublishBy(p events.Principal, ev api.Event) uint64 {
	return e.events.PublishBy(p, ev)
}

// publishChange publishes the event of a policy object changed through a
// front door: kind "<what>.<verb>" (verb added, modified or removed).
func (e *Engine) publishChange(what, verb, name string, fields map[string]any) {
	e.Publish(api.Event{Kind: what + "." + verb, Subject: what + "/" + name,
		Message: fmt.Sprintf("%s %q %s", what, name, verb), Fields: fields})
}

// Subscribe opens a reader of the event stream for who: since (nil: from
// the next event) resumes after that seq; kinds filters by kind (see
// api.EventsOptions; a *BadRequestError when it is not a filter). An
// ordinary user may hold a bounded number of readers (a *TooManyError
// beyond). Close it when done.
func (e *Engine) Subscribe(who Caller, since *uint64, kinds []string) (*events.Subscription, error) {
	s, err := e.events.Subscribe(events.Viewer{UID: who.UID, Privileged: who.Privileged}, since, kinds)
	var tm *events.TooManyError
	var ke *events.KindError
	switch {
	case errors.As(err, &tm):
		return nil, &TooManyError{Why: tm.Why}
	case errors.As(err, &ke):
		return nil, &BadRequestError{Err: ke.Err}
	}
	return s, err
}

// LastEventSeq is the seq of the last event published (the first one's
// minus one before any).
func (e *Engine) LastEventSeq() uint64 { return e.events.LastSeq() }

// SetEventLimits sets the limits of what one ordinary user or one remote
// RSVP party may have published one by one (hostqosd --event-rate,
// --event-burst).
func (e *Engine) SetEventLimits(l events.Limits) { e.events.SetLimits(l) }

// EventLimitStats reads the limiter's counters.
func (e *Engine) EventLimitStats() events.LimitStats { return e.events.LimitStats() }

// FlushEvents publishes the summaries of the window that ended (all of
// them, with force: the daemon stops).
func (e *Engine) FlushEvents(force bool) { e.events.Flush(force) }
