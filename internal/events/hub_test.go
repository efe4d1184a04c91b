package events

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/hostqos/hostqos/api"
)

// Readers of the tests, as the engine passes its callers.
var (
	root   = Viewer{UID: 0, Privileged: true}
	admin  = Viewer{UID: 1000, Privileged: true} // group hostqos
	nobody = Viewer{UID: 65534}
	alice  = Viewer{UID: 1001}
)

// next reads one batch from s, failing the test when none comes soon.
func next(t *testing.T, s *Subscription) []api.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	evs, err := s.Next(ctx)
	if err != nil {
		t.Fatalf("next events: %v", err)
	}
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

func TestEventsSeqResumeAndLost(t *testing.T) {
	clock := time.Unix(1_700_000_000, 0)
	h := newEventHub(4, 0, 0, func() time.Time { return clock })
	first := uint64(clock.UnixMicro())
	for i := 0; i < 3; i++ {
		h.publish(api.Event{Kind: fmt.Sprintf("k.%d", i)})
	}
	// Resuming after the first event gets the second and third.
	since := first
	s, err := h.subscribe(root, &since, nil)
	if err != nil {
		t.Fatal(err)
	}
	if evs := next(t, s); len(evs) != 2 || evs[0].Seq != first+1 || evs[1].Seq != first+2 {
		t.Fatalf("resumed events = %+v, want seqs %d, %d", evs, first+1, first+2)
	}
	// The reader falls behind the ring of 4: one lost marker with the
	// count, then the 4 events still held, in order.
	for i := 3; i < 9; i++ {
		h.publish(api.Event{Kind: fmt.Sprintf("k.%d", i)})
	}
	evs := next(t, s)
	if evs[0].Kind != api.EventLost || evs[0].Lost != 2 || evs[0].Seq != first+4 {
		t.Fatalf("first after falling behind = %+v, want lost 2 (seq %d)", evs[0], first+4)
	}
	if got := kindsOf(evs[1:]); fmt.Sprint(got) != "[k.5 k.6 k.7 k.8]" {
		t.Fatalf("after the marker: %q", got)
	}
	s.Close()
	// A seq of an earlier daemon (below this one's first): the reader gets
	// a marker that says so, then one with the count this daemon no longer
	// holds, then the rest.
	old := first - 100
	s2, err := h.subscribe(root, &old, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	evs = next(t, s2)
	if evs[0].Kind != api.EventLost || evs[0].Lost != 0 || evs[1].Kind != api.EventLost || evs[1].Lost != 5 || evs[2].Kind != "k.5" {
		t.Fatalf("resume from an earlier daemon: %+v, want a restart marker, lost 5, then k.5…", evs)
	}
	// A seq beyond the last: from the next event on.
	far := first + 1000
	s3, err := h.subscribe(root, &far, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s3.Close()
	h.publish(api.Event{Kind: "k.9"})
	if evs := next(t, s3); len(evs) != 1 || evs[0].Kind != "k.9" {
		t.Fatalf("after a far seq: %+v, want k.9 only", evs)
	}
}

func TestEventsVisibility(t *testing.T) {
	h := newEventHub(16, 0, 0, time.Now)
	aliceUID, nobodyUID := alice.UID, nobody.UID
	subs := map[string]*Subscription{}
	for name, who := range map[string]Viewer{"root": root, "alice": alice, "nobody": nobody} {
		s, err := h.subscribe(who, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		subs[name] = s
	}
	h.publish(api.Event{Kind: "rule.added", Subject: "rule/a"})
	h.publish(api.Event{Kind: "run.started", Subject: "run/1", UID: &aliceUID})
	h.publish(api.Event{Kind: "run.started", Subject: "run/2", UID: &nobodyUID})
	want := map[string]string{
		"root":   "[rule.added rule/a run.started run/1 run.started run/2]",
		"alice":  "[rule.added rule/a run.started run/1]",
		"nobody": "[rule.added rule/a run.started run/2]",
	}
	for name, s := range subs {
		if got := fmt.Sprint(kindsOf(next(t, s))); got != want[name] {
			t.Errorf("%s sees %s, want %s", name, got, want[name])
		}
	}
}

func TestEventsKindFilter(t *testing.T) {
	h := newEventHub(16, 0, 0, time.Now)
	s, err := h.subscribe(root, nil, []string{"reservation", "socket.bound"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, k := range []string{"rule.added", "reservation.admitted", "reservations.x", "socket.unbound", "socket.bound", "reservation.removed"} {
		h.publish(api.Event{Kind: k})
	}
	if got := fmt.Sprint(kindsOf(next(t, s))); got != "[reservation.admitted socket.bound reservation.removed]" {
		t.Fatalf("filtered = %s", got)
	}
	if _, err := h.subscribe(root, nil, []string{""}); err == nil {
		t.Fatal("an empty kind was accepted")
	}
}

func TestEventsBoundedSubscribers(t *testing.T) {
	h := newEventHub(16, 2, 3, time.Now)
	var held []*Subscription
	for i := 0; i < 2; i++ {
		s, err := h.subscribe(alice, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, s)
	}
	var tm *TooManyError
	if _, err := h.subscribe(alice, nil, nil); !errors.As(err, &tm) {
		t.Fatalf("third stream of alice: err = %v, want TooManyError", err)
	}
	s, err := h.subscribe(nobody, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.subscribe(nobody, nil, nil); !errors.As(err, &tm) {
		t.Fatalf("fourth stream of ordinary users: err = %v, want TooManyError", err)
	}
	// Privileged readers are not counted.
	for i := 0; i < 10; i++ {
		if _, err := h.subscribe(admin, nil, nil); err != nil {
			t.Fatalf("admin stream %d: %v", i, err)
		}
	}
	held[0].Close()
	held[0].Close() // twice is harmless
	if _, err := h.subscribe(alice, nil, nil); err != nil {
		t.Fatalf("after closing one: %v", err)
	}
	s.Close()
}

// A reader that does not read never slows a publisher: publishing into a
// full ring with a stalled reader returns at once.
func TestEventsPublishNeverWaits(t *testing.T) {
	h := newEventHub(8, 0, 0, time.Now)
	s, err := h.subscribe(nobody, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	done := make(chan struct{})
	go func() {
		for i := 0; i < 10000; i++ {
			h.publish(api.Event{Kind: "k"})
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("publishing 10000 events with a stalled reader did not finish")
	}
	evs := next(t, s)
	if evs[0].Kind != api.EventLost || evs[0].Lost != 10000-8 || len(evs) != 9 {
		t.Fatalf("stalled reader got %d events, first %+v; want lost %d then 8", len(evs), evs[0], 10000-8)
	}
}
