package events

import (
	"fmt"
	"net/netip"
	"sort"
	"sync"
	"time"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/policy"
)

// Limits on what one principal can make the daemon publish and record
// (docs/events.md, "Limits per user and remote host"). A principal is the
// ordinary user an event is about (its uid; root's events and host-policy
// events are not limited) or the remote RSVP party whose message caused it.
//
// Each principal has a token bucket (Limits: Rate a minute, Burst at
// once), and may have at most eventKindBurst events of one kind published
// one by one in a window (eventWindow); all remote parties together have
// RemoteFactor times one's bucket. An event over a bound is not
// published: it is counted under its principal and kind, and when the
// window ends one event of that kind says how many there were, by whom,
// why, and what the last one was (its field "coalesced" is the count).
// Nothing is silently lost: beyond maxEventPrincipals principals the
// others share one ("other users", "other hosts"), and beyond
// MaxSummaries summaries in a window one "events.suppressed" event
// counts the rest.

// Fixed bounds of the event limiter.
const (
	// eventWindow is the window of coalescing: its summaries are
	// published when it ends.
	eventWindow = time.Minute
	// eventKindBurst is how many events of one kind one principal may
	// have published one by one in a window.
	eventKindBurst = 10
	// RemoteFactor: all remote parties together get this many times one
	// principal's rate and burst.
	RemoteFactor = 4
	// maxEventPrincipals bounds the principals tracked at once.
	maxEventPrincipals = 256
	// maxEventKinds bounds the kinds one principal has counters for.
	maxEventKinds = 32
	// MaxSummaries bounds the summaries of one window.
	MaxSummaries = 256
)

// Suppressed is the kind of the event that counts, at the end of a
// window, the held events beyond MaxSummaries summaries.
const Suppressed = "events.suppressed"

// Limits bound the events one principal may have published one by one:
// Rate a minute on average, Burst at once (zero: the defaults,
// policy.DefaultEventRate and DefaultEventBurst).
type Limits struct {
	Rate, Burst int
}

// Principal is who an event is charged to (Host, or the ordinary user an
// event is about; see Stream.Publish).
type Principal struct {
	uid    uint32
	host   netip.Addr // a remote party; invalid: a user
	remote bool
	other  bool // the principal shared beyond maxEventPrincipals
}

// userPrincipal is who an event is charged to: the ordinary user it is
// about; ok is false for events that are not limited.
func userPrincipal(ev api.Event) (Principal, bool) {
	if ev.UID == nil || *ev.UID == 0 {
		return Principal{}, false
	}
	return Principal{uid: *ev.UID}, true
}

// Host is a remote party (e.g. the RSVP node whose message caused an
// event).
func Host(a netip.Addr) Principal {
	return Principal{host: a.Unmap(), remote: true}
}

func (p Principal) String() string {
	switch {
	case p.other && p.remote:
		return "other remote hosts"
	case p.other:
		return "other users"
	case p.remote:
		return "host " + p.host.String()
	}
	return fmt.Sprintf("uid %d", p.uid)
}

// tokenBucket holds up to burst tokens, refilled at rate a second.
type tokenBucket struct {
	tokens float64
	at     time.Time
}

func (b *tokenBucket) fill(now time.Time, rate, burst float64) {
	if b.at.IsZero() {
		b.tokens = burst
	} else if d := now.Sub(b.at).Seconds(); d > 0 {
		b.tokens = min(burst, b.tokens+d*rate)
	}
	b.at = now
}

// take takes a token if there is one.
func (b *tokenBucket) take(now time.Time, rate, burst float64) bool {
	b.fill(now, rate, burst)
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// evPrincipal is a principal's bucket and what it had published one by
// one, per kind, in this window.
type evPrincipal struct {
	tokenBucket
	shown map[string]int
}

// heldKey names a summary: a principal's events of one kind.
type heldKey struct {
	p    Principal
	kind string
}

// held counts the events of a principal and kind not published one by
// one in this window.
type held struct {
	n                  uint64
	overKind, overRate bool
	first, last        time.Time
	subject, message   string // of the last
	uid                *uint32
}

// evLimiter applies the limits. Its lock is its own; nothing is called
// while it is held.
type evLimiter struct {
	mu     sync.Mutex
	rate   float64 // tokens a second
	burst  float64
	lim    Limits
	now    func() time.Time
	start  time.Time // of the window
	who    map[Principal]*evPrincipal
	remote tokenBucket // all remote parties together
	held   map[heldKey]*held
	// overflow counts the held events beyond MaxSummaries.
	overflow     uint64
	overflowWho  map[Principal]bool
	suppressed   uint64 // all events ever held (for metrics)
	summariesOut uint64
}

func newEvLimiter(l Limits, now func() time.Time) *evLimiter {
	lm := &evLimiter{now: now, start: now(), who: map[Principal]*evPrincipal{}, held: map[heldKey]*held{}, overflowWho: map[Principal]bool{}}
	lm.set(l)
	return lm
}

func (l *evLimiter) set(lim Limits) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if lim.Rate <= 0 {
		lim.Rate = policy.DefaultEventRate
	}
	if lim.Burst <= 0 {
		lim.Burst = policy.DefaultEventBurst
	}
	l.lim, l.rate, l.burst = lim, float64(lim.Rate)/60, float64(lim.Burst)
}

// admit decides whether ev, charged to p, is published now (show) or
// counted; due are the summaries of a window that ended, to publish
// first.
func (l *evLimiter) admit(p Principal, ev api.Event) (show bool, due []api.Event) {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	due = l.rollLocked(now, false)
	b := l.who[p]
	if b == nil && len(l.who) >= maxEventPrincipals {
		p = Principal{remote: p.remote, other: true}
		b = l.who[p]
	}
	if b == nil {
		b = &evPrincipal{shown: map[string]int{}}
		l.who[p] = b
	}
	n, known := b.shown[ev.Kind]
	kindOK := n < eventKindBurst && (known || len(b.shown) < maxEventKinds)
	rateOK := kindOK && b.take(now, l.rate, l.burst) &&
		(!p.remote || l.remote.take(now, l.rate*RemoteFactor, l.burst*RemoteFactor))
	if rateOK {
		b.shown[ev.Kind]++
		return true, due
	}
	l.suppressed++
	k := heldKey{p, ev.Kind}
	h := l.held[k]
	if h == nil {
		if len(l.held) >= MaxSummaries {
			l.overflow++
			l.overflowWho[p] = true
			return false, due
		}
		h = &held{first: now}
		l.held[k] = h
	}
	h.n++
	h.last, h.subject, h.message = now, ev.Subject, ev.Message
	if ev.UID != nil {
		uid := *ev.UID
		h.uid = &uid
	}
	if kindOK {
		h.overRate = true
	} else {
		h.overKind = true
	}
	return false, due
}

// roll ends the window when it is over (or now, with force) and returns
// its summaries.
func (l *evLimiter) roll(force bool) []api.Event {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.rollLocked(now, force)
}

func (l *evLimiter) rollLocked(now time.Time, force bool) []api.Event {
	if !force && now.Sub(l.start) < eventWindow {
		return nil
	}
	span := now.Sub(l.start).Round(time.Second)
	keys := make([]heldKey, 0, len(l.held))
	for k := range l.held {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return l.held[keys[i]].first.Before(l.held[keys[j]].first) })
	var out []api.Event
	for _, k := range keys {
		out = append(out, l.summary(k, l.held[k], span))
	}
	if l.overflow > 0 {
		out = append(out, api.Event{Kind: Suppressed,
			Message: fmt.Sprintf("%d more events of %d users or hosts over their limits in the last %v not shown one by one (more than %d kinds and principals over their limits at once)",
				l.overflow, len(l.overflowWho), span, MaxSummaries),
			Fields: map[string]any{"coalesced": l.overflow, "principals": len(l.overflowWho), "window_s": int(span / time.Second)}})
	}
	l.summariesOut += uint64(len(out))
	clear(l.held)
	clear(l.overflowWho)
	l.overflow, l.start = 0, now
	for p, b := range l.who {
		b.fill(now, l.rate, l.burst)
		if b.tokens >= l.burst {
			delete(l.who, p) // full again: it is as if it were new
			continue
		}
		clear(b.shown)
	}
	return out
}

// summary is the event that stands for a principal's held events of one
// kind.
func (l *evLimiter) summary(k heldKey, h *held, span time.Duration) api.Event {
	var why []string
	if h.overKind {
		why = append(why, fmt.Sprintf("more than %d of one kind a minute", eventKindBurst))
	}
	if h.overRate {
		why = append(why, fmt.Sprintf("over the limit of %d events a minute, %d at once, per user or host", l.lim.Rate, l.lim.Burst))
		if k.p.remote {
			why[len(why)-1] += fmt.Sprintf(" (all remote hosts together: %d times that)", RemoteFactor)
		}
	}
	return api.Event{Kind: k.kind, Subject: h.subject, UID: h.uid,
		Message: fmt.Sprintf("%s ×%d by %s in the last %v, not shown one by one (%s); the last: %s",
			k.kind, h.n, k.p, span, joinAnd(why), h.message),
		Fields: map[string]any{"coalesced": h.n, "by": k.p.String(), "window_s": int(span / time.Second),
			"first": h.first.UTC().Format(time.RFC3339Nano), "last": h.last.UTC().Format(time.RFC3339Nano)}}
}

func joinAnd(s []string) string {
	switch len(s) {
	case 0:
		return ""
	case 1:
		return s[0]
	}
	return s[0] + " and " + s[1]
}

// LimitStats are the limiter's counters.
type LimitStats struct {
	Suppressed uint64 // events not published one by one
	Summaries  uint64 // events published in their place
}

// stats reads the limiter's counters.
func (l *evLimiter) stats() LimitStats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return LimitStats{Suppressed: l.suppressed, Summaries: l.summariesOut}
}
