package events

import (
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hostqos/hostqos/api"
)

// fakeClock is a clock the test sets.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) set(t time.Time) { c.mu.Lock(); c.t = t; c.mu.Unlock() }

// coalesced is the count a summary stands for (0: not a summary).
func coalesced(ev api.Event) uint64 {
	switch v := ev.Fields["coalesced"].(type) {
	case uint64:
		return v
	case float64:
		return uint64(v)
	}
	return 0
}

// TestEventsRateLimitedPerUser: a user who spreads events over many kinds
// meets the token bucket: Burst at once, then Rate a minute; what is over
// is counted in each kind's summary, and nothing is lost.
func TestEventsRateLimitedPerUser(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1_800_000_000, 0)}
	l := newEvLimiter(Limits{Rate: 30, Burst: 60}, clock.now)
	uid := uint32(65534)
	p, ok := userPrincipal(api.Event{UID: &uid})
	if !ok {
		t.Fatal("an ordinary user's event is not limited")
	}
	total, shown := 0, 0
	publish := func(kinds, each int) {
		for k := 0; k < kinds; k++ {
			for i := 0; i < each; i++ {
				total++
				if ok, due := l.admit(p, api.Event{Kind: fmt.Sprintf("k.%d", k), UID: &uid}); ok {
					shown++
				} else if len(due) > 0 {
					t.Fatalf("summaries within the window: %v", due)
				}
			}
		}
	}
	publish(20, 5) // 100 events at once, 5 of each of 20 kinds: the burst binds
	if shown != 60 {
		t.Errorf("100 events at once over 20 kinds: %d shown, want the burst of 60", shown)
	}
	clock.set(clock.now().Add(20 * time.Second)) // 10 more tokens at 30 a minute
	publish(20, 1)
	if shown != 70 {
		t.Errorf("20 s later, 20 more: %d shown in all, want 70", shown)
	}
	clock.set(clock.now().Add(40 * time.Second))
	var summed uint64
	for _, ev := range l.roll(false) {
		if ev.UID == nil || *ev.UID != uid || !strings.Contains(ev.Message, "by uid 65534") || !strings.Contains(ev.Message, "over the limit of 30 events a minute, 60 at once") {
			t.Errorf("summary %+v", ev)
		}
		summed += coalesced(ev)
	}
	if summed+uint64(shown) != uint64(total) {
		t.Errorf("%d shown + %d in summaries, want all %d", shown, summed, total)
	}
	if s := l.roll(false); len(s) != 0 {
		t.Errorf("a second roll in the same window: %v", s)
	}
}

// TestEventLimiterForgetsQuietPrincipals: a principal whose bucket is full
// again at the end of a window is forgotten, so the table does not grow
// with every user or host ever seen.
func TestEventLimiterForgetsQuietPrincipals(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1_800_000_000, 0)}
	l := newEvLimiter(Limits{Rate: 60, Burst: 10}, clock.now)
	for i := 0; i < 1000; i++ {
		l.admit(Host(netip.AddrFrom4([4]byte{198, 18, byte(i >> 8), byte(i)})), api.Event{Kind: "rsvp.path"})
	}
	if len(l.who) > maxEventPrincipals+1 {
		t.Errorf("%d principals tracked, want at most %d and the shared one", len(l.who), maxEventPrincipals)
	}
	clock.set(clock.now().Add(time.Minute))
	l.roll(false)
	if len(l.who) > 1 { // the shared one may still be drained
		t.Errorf("after a quiet minute %d principals tracked, want those with a full bucket forgotten", len(l.who))
	}
}
