package events

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/hostqos/hostqos/api"
)

// TestStreamRecordsWhatItPublishes: the stream charges an ordinary user's
// events to the user and a remote party's to its host, publishes the
// summaries when the window ends, and hands the recorder exactly what a
// privileged reader sees.
func TestStreamRecordsWhatItPublishes(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1_800_000_000, 0)}
	var mu sync.Mutex
	var recorded []api.Event
	s := New(Config{Limits: Limits{Rate: 30, Burst: 60}, Now: clock.now, Record: func(ev api.Event) {
		mu.Lock()
		recorded = append(recorded, ev)
		mu.Unlock()
	}})
	sub, err := s.Subscribe(root, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	uid := nobody.UID
	for i := 0; i < 20; i++ {
		s.Publish(api.Event{Kind: "run.started", Subject: fmt.Sprintf("run/%d", i), UID: &uid})
		s.PublishBy(Host(netip.MustParseAddr("198.18.0.2")), api.Event{Kind: "rsvp.path"})
		s.Publish(api.Event{Kind: "rule.added"})
	}
	if seq := s.Publish(api.Event{Kind: "run.started", UID: &uid}); seq != 0 {
		t.Errorf("a held event got seq %d, want 0", seq)
	}
	clock.set(clock.now().Add(time.Minute))
	s.Flush(false)
	var seen []api.Event
	for {
		evs := takeNow(sub)
		if len(evs) == 0 {
			break
		}
		seen = append(seen, evs...)
	}
	shown, summed := map[string]int{}, map[string]uint64{}
	for _, ev := range seen {
		if n, ok := ev.Fields["coalesced"].(uint64); ok {
			summed[ev.Kind] += n
		} else {
			shown[ev.Kind]++
		}
	}
	if shown["run.started"] != 10 || summed["run.started"] != 11 || shown["rsvp.path"] != 10 || summed["rsvp.path"] != 10 || shown["rule.added"] != 20 {
		t.Errorf("shown %v, summaries %v; want 10 of the user's and 10 of the host's one by one, summaries for the other 11 and 10, all 20 host-policy events", shown, summed)
	}
	if len(seen) == 0 {
		t.Fatal("a privileged reader saw nothing")
	}
	if last := s.LastSeq(); seen[len(seen)-1].Seq != last {
		t.Errorf("last seq %d, the last event read %+v", last, seen[len(seen)-1])
	}
	mu.Lock()
	defer mu.Unlock()
	if len(recorded) != len(seen) {
		t.Fatalf("recorded %d events, a privileged reader saw %d", len(recorded), len(seen))
	}
	for i := range seen {
		if recorded[i].Kind != seen[i].Kind || recorded[i].Subject != seen[i].Subject {
			t.Errorf("recorded #%d %s %s, read %s %s", i, recorded[i].Kind, recorded[i].Subject, seen[i].Kind, seen[i].Subject)
		}
	}
	if st := s.LimitStats(); st.Suppressed != 21 || st.Summaries != 2 {
		t.Errorf("stats %+v, want 21 suppressed, 2 summaries", st)
	}
}

// takeNow returns what s holds now (at most a batch), without waiting.
func takeNow(s *Subscription) []api.Event {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	evs, _ := s.Next(ctx)
	return evs
}
