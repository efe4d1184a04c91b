package engine

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/events"
	"github.com/hostqos/hostqos/internal/history"
	"github.com/hostqos/hostqos/internal/observe"
)

// next reads one batch from s, failing the test when none comes soon.
func next(t *testing.T, s *events.Subscription) []api.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	evs, err := s.Next(ctx)
	if err != nil {
		t.Fatalf("next events: %v", err)
	}
	return evs
}

// takeNow returns what s holds now (at most a batch), without waiting.
func takeNow(s *events.Subscription) []api.Event {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	evs, _ := s.Next(ctx)
	return evs
}

func kindsOf(evs []api.Event) []string {
	out := make([]string, len(evs))
	for i, ev := range evs {
		out[i] = ev.Kind
		if ev.Subject != "" {
			out[i] += " " + ev.Subject
		}
	}
	return out
}

func TestEventsInOrderFromPolicyChanges(t *testing.T) {
	env := newEnv(t, "")
	e := env.start(t)
	s, err := e.Subscribe(root, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	if _, err := e.AddRule(ctx, root, rule("a"), false); err != nil {
		t.Fatal(err)
	}
	if _, err := e.SetRule(ctx, root, "a", []byte(`{"dscp":46}`), false); err != nil {
		t.Fatal(err)
	}
	// A failed change publishes nothing.
	env.k.FailNth("ApplyRules", 1, errors.New("injected"))
	if _, err := e.AddRule(ctx, root, rule("b"), false); err == nil {
		t.Fatal("add with a failing kernel succeeded")
	}
	if err := e.RemoveRule(ctx, root, "a"); err != nil {
		t.Fatal(err)
	}
	got := kindsOf(next(t, s))
	want := []string{"rule.added rule/a", "rule.modified rule/a", "rule.removed rule/a"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("events = %q, want %q", got, want)
	}
}

func TestEventsRestartedEngineResumesAbove(t *testing.T) {
	env := newEnv(t, "")
	e := env.start(t)
	last := e.LastEventSeq()
	// A restarted daemon (a new engine over the same state) numbers its
	// events above the last one's.
	e2 := env.start(t)
	s, err := e2.Subscribe(root, &last, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	evs := next(t, s)
	if evs[0].Kind != api.EventLost || evs[len(evs)-1].Kind != EventDaemonStarted || evs[len(evs)-1].Seq <= last {
		t.Fatalf("resume across restart: %+v, want a lost marker then daemon.started above seq %d", evs, last)
	}
}

// drain reads what s holds now.
func drain(t *testing.T, s *events.Subscription) []api.Event {
	t.Helper()
	var out []api.Event
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		evs, err := s.Next(ctx)
		cancel()
		if err != nil {
			return out
		}
		out = append(out, evs...)
	}
}

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

// tally counts, per kind, the events shown one by one and what the
// summaries stand for.
func tally(evs []api.Event) (shown, summed map[string]uint64) {
	shown, summed = map[string]uint64{}, map[string]uint64{}
	for _, ev := range evs {
		if n := coalesced(ev); n > 0 {
			summed[ev.Kind] += n
		} else {
			shown[ev.Kind]++
		}
	}
	return shown, summed
}

// TestEventsCoalescedPerUserAndKind: an ordinary user's events beyond 10
// of one kind a minute are not published one by one; at the minute's end
// one event of that kind says how many there were, visible to the user.
// Other users, other kinds, root's and host-policy events are not held.
func TestEventsCoalescedPerUserAndKind(t *testing.T) {
	env := newEnv(t, "")
	e := env.start(t)
	clock := &fakeClock{t: time.Unix(1_800_000_000, 0)}
	e.events = e.newEvents(events.Limits{Rate: 30, Burst: 60}, clock.now)
	st, err := history.Open(filepath.Join(t.TempDir(), "history.db"), history.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	e.SetHistory(st, observe.HistoryOptions{})
	subRoot, err := e.Subscribe(root, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer subRoot.Close()
	subNobody, err := e.Subscribe(nobody, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer subNobody.Close()
	nobodyUID, aliceUID, rootUID := nobody.UID, alice.UID, root.UID
	for i := 0; i < 500; i++ {
		e.Publish(api.Event{Kind: "qsocket.attached", Subject: fmt.Sprintf("qsocket/%d", i), UID: &nobodyUID, Message: fmt.Sprintf("qsocket %d attached", i)})
		if i < 5 {
			e.Publish(api.Event{Kind: "qsocket.detached", Subject: fmt.Sprintf("qsocket/%d", i), UID: &nobodyUID})
			e.Publish(api.Event{Kind: "qsocket.attached", Subject: "qsocket/a", UID: &aliceUID})
		}
		if i < 100 {
			e.Publish(api.Event{Kind: "run.started", Subject: "run/r", UID: &rootUID})
			e.Publish(api.Event{Kind: "rule.added", Subject: "rule/r"})
		}
		clock.set(clock.now().Add(50 * time.Millisecond)) // 500 in 25 s
	}
	shown, summed := tally(drain(t, subRoot))
	drain(t, subNobody)
	if shown["qsocket.attached"] != 10+5 || shown["qsocket.detached"] != 5 || shown["run.started"] != 100 || shown["rule.added"] != 100 || len(summed) != 0 {
		t.Errorf("within the minute root saw %v one by one, summaries %v; want nobody's first 10 attaches, alice's 5, nobody's 5 detaches, all 100 of root's runs and rules, no summary yet", shown, summed)
	}
	// The minute ends (the engine's tick): one summary for the 490.
	clock.set(clock.now().Add(40 * time.Second))
	e.FlushEvents(false)
	evs := drain(t, subNobody)
	if len(evs) != 1 || coalesced(evs[0]) != 490 || evs[0].Kind != "qsocket.attached" || evs[0].UID == nil || *evs[0].UID != nobodyUID ||
		!strings.Contains(evs[0].Message, "qsocket.attached ×490 by uid 65534 in the last 1m5s") ||
		!strings.Contains(evs[0].Message, "the last: qsocket 499 attached") || evs[0].Subject != "qsocket/499" {
		t.Fatalf("nobody's events after the minute: %d, the first %+v; want one qsocket.attached standing for 490, with the last one's subject and message", len(evs), evs[0])
	}
	t.Logf("summary: %s %v", evs[0].Message, evs[0].Fields)
	// History holds the same: the rows shown plus one row with the count.
	if err := st.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	rows, err := st.Events(context.Background(), time.Now().Add(-time.Hour), time.Now().Add(time.Hour), int64(nobodyUID), 1000)
	if err != nil {
		t.Fatal(err)
	}
	var n, total uint64
	for _, r := range rows {
		if r.Kind != "qsocket.attached" || r.Owner != int64(nobodyUID) {
			continue
		}
		n++
		if c, ok := r.Fields["coalesced"].(float64); ok {
			total += uint64(c)
		} else {
			total++
		}
	}
	if n != 11 || total != 500 {
		t.Errorf("history: %d qsocket.attached rows of nobody standing for %d events; want 11 rows (10 and a summary) for 500", n, total)
	}
}

// TestRSVPEventsLimitedPerRemoteHost: RSVP upcalls are charged to the
// remote party (here the sender whose Path churns); one host's churn is
// coalesced like a user's, and a flood from many (spoofed) addresses is
// bounded by all remote hosts' bucket and the table of principals, with
// every event counted.
func TestRSVPEventsLimitedPerRemoteHost(t *testing.T) {
	env := newEnv(t, "")
	e := env.start(t)
	clock := &fakeClock{t: time.Unix(1_800_000_000, 0)}
	e.events = e.newEvents(events.Limits{Rate: 30, Burst: 60}, clock.now)
	sub, err := e.Subscribe(root, nil, []string{"rsvp", events.Suppressed})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	// An upcall of path state as the RSVP front door publishes it:
	// charged to the sender (internal/rsvpfront).
	upcall := func(kind, sender string) {
		e.PublishBy(events.Host(netip.MustParseAddr(sender)), api.Event{Kind: "rsvp." + kind, Subject: "rsvp/198.18.0.1:5004",
			Message: fmt.Sprintf("RSVP %s for 198.18.0.1:5004/17 from %s", kind, sender)})
	}
	for i := 0; i < 1000; i++ { // a churn: path, timeout, path, …
		upcall("path", "198.18.0.2")
		upcall("path-timeout", "198.18.0.2")
	}
	clock.set(clock.now().Add(time.Minute))
	e.FlushEvents(false)
	shown, summed := tally(drain(t, sub))
	if shown["rsvp.path"] != 10 || shown["rsvp.path-timeout"] != 10 || summed["rsvp.path"] != 990 || summed["rsvp.path-timeout"] != 990 {
		t.Errorf("one host's churn of 1000: shown %v, summaries %v; want 10 of each kind and summaries for 990 of each", shown, summed)
	}
	// 3000 Paths from 3000 addresses at once.
	for i := 0; i < 3000; i++ {
		src := netip.AddrFrom4([4]byte{198, 19, byte(i >> 8), byte(i)})
		upcall("path", src.String())
	}
	clock.set(clock.now().Add(time.Minute))
	e.FlushEvents(false)
	evs := drain(t, sub)
	shown, summed = tally(evs)
	n := 0
	for _, ev := range evs {
		if coalesced(ev) > 0 {
			n++
		}
	}
	t.Logf("3000 spoofed senders: %d shown, %d summaries standing for %v", shown["rsvp.path"], n, summed)
	if shown["rsvp.path"] > 60*events.RemoteFactor || shown["rsvp.path"]+summed["rsvp.path"]+summed[events.Suppressed] != 3000 || n > events.MaxSummaries+1 {
		t.Errorf("3000 senders: %d shown, %d summaries for %v; want at most %d shown (all remote hosts' burst), at most %d summaries, all counted",
			shown["rsvp.path"], n, summed, 60*events.RemoteFactor, events.MaxSummaries+1)
	}
}
