package history

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/hostqos/hostqos/api"
)

func open(t *testing.T, path string) *Store {
	t.Helper()
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func flush(t *testing.T, s *Store) {
	t.Helper()
	if err := s.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestSumsEqualCounters: the per-second amounts of a range add up to what
// the cumulative counters grew by, also across a reopened store (the last
// readings persist), and the minute and hour roll-ups hold the same.
func TestSumsEqualCounters(t *testing.T) {
	path := filepath.Join(t.TempDir(), "history.db")
	s := open(t, path)
	t0 := time.Now().Add(-30 * time.Second).Truncate(time.Second)
	var out uint64
	for i := 0; i < 10; i++ {
		out += uint64(1000 * (i + 1))
		s.Record(Sample{Time: t0.Add(time.Duration(i) * time.Second), Series: []Series{
			{Kind: KindRules, Name: "web", Owner: -1, Counters: Counters{BytesOut: out, PacketsOut: uint64(i + 1)}},
			{Kind: KindLinks, Name: "eth0", Owner: -1, Counters: Counters{BytesIn: 5e9 + uint64(i)*10, BytesOut: 7e9}},
		}})
	}
	flush(t, s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = open(t, path)
	defer s.Close()
	// After the restart the counters continue from where they were.
	out += 500
	s.Record(Sample{Time: t0.Add(10 * time.Second), Series: []Series{
		{Kind: KindRules, Name: "web", Owner: -1, Counters: Counters{BytesOut: out, PacketsOut: 11}},
	}})
	flush(t, s)
	q := api.HistoryQuery{Kind: KindRules, Since: t0.Add(-time.Minute), Until: time.Now()}
	h, err := s.Query(context.Background(), q, -1)
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Series) != 1 || h.Series[0].Name != "web" || h.Series[0].Total.BytesOut != out || h.Series[0].Total.PacketsOut != 11 {
		t.Fatalf("rules history = %+v, want web with %d bytes out, 11 packets", h, out)
	}
	if h.Resolution != "1s" {
		t.Errorf("resolution = %s, want 1s for the last minutes", h.Resolution)
	}
	for _, step := range []time.Duration{time.Minute, time.Hour} {
		q.Step = step
		q.Since = t0.Add(-2 * time.Hour)
		h, err := s.Query(context.Background(), q, -1)
		if err != nil {
			t.Fatal(err)
		}
		if len(h.Series) != 1 || h.Series[0].Total.BytesOut != out {
			t.Errorf("step %s: %+v, want %d bytes out", step, h, out)
		}
	}
	// A link seen for the first time is a baseline, not traffic.
	h, err = s.Query(context.Background(), api.HistoryQuery{Kind: KindLinks, Since: t0.Add(-time.Minute)}, -1)
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Series) != 1 || h.Series[0].Total.BytesIn != 90 || h.Series[0].Total.BytesOut != 0 {
		t.Errorf("links history = %+v, want 90 bytes in, 0 out", h)
	}
	if v, err := s.IntegrityCheck(context.Background()); err != nil || v != "ok" {
		t.Errorf("integrity_check = %q, %v", v, err)
	}
}

// TestFlowRecordedOnce: a flow recorded again (it resumed, or a restarted
// daemon saw it) updates its one record; an ordinary user sees only their
// own flows and series.
func TestFlowRecordedOnce(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "history.db"))
	defer s.Close()
	now := time.Now()
	f := Flow{Proto: "tcp", Local: "198.18.0.1:4000", Remote: "198.18.0.2:80", FirstNS: 12345, PID: 7, Comm: "curl",
		UID: 1000, Rule: "web", Class: "bulk", Start: now.Add(-5 * time.Second), End: now.Add(-3 * time.Second),
		Counters: Counters{BytesOut: 100}}
	s.Record(Sample{Time: now, Flows: []Flow{f}})
	f.End, f.BytesOut = now.Add(-time.Second), 300
	s.Record(Sample{Time: now, Flows: []Flow{f}, Series: []Series{
		{Kind: KindApps, Name: "/usr/bin/curl", Owner: 1000, Counters: Counters{BytesOut: 300}},
		{Kind: KindApps, Name: "/usr/bin/wget", Owner: 1001, Counters: Counters{BytesOut: 200}},
	}})
	s.RecordEvent(Event{Kind: "quota", Subject: "web", Message: "reached", Owner: -1, Fields: map[string]any{"bytes": 5e6}})
	flush(t, s)
	h, err := s.Query(context.Background(), api.HistoryQuery{Kind: api.HistoryFlows, Since: now.Add(-time.Minute)}, -1)
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Flows) != 1 || h.Flows[0].BytesOut != 300 || h.Flows[0].Comm != "curl" || !h.Flows[0].End.Equal(f.End.Truncate(time.Millisecond)) {
		t.Fatalf("flows = %+v, want one curl flow with 300 bytes out", h.Flows)
	}
	h, _ = s.Query(context.Background(), api.HistoryQuery{Kind: api.HistoryFlows, Since: now.Add(-time.Minute)}, 1001)
	if len(h.Flows) != 0 {
		t.Errorf("uid 1001 sees %d flows of uid 1000", len(h.Flows))
	}
	h, _ = s.Query(context.Background(), api.HistoryQuery{Kind: KindApps, Since: now.Add(-time.Minute)}, 1001)
	if len(h.Series) != 1 || h.Series[0].Name != "/usr/bin/wget" {
		t.Errorf("uid 1001 sees apps %+v, want only its wget", h.Series)
	}
	evs, err := s.Events(context.Background(), now.Add(-time.Minute), time.Now().Add(time.Second), 1001, 0)
	if err != nil || len(evs) != 1 || evs[0].Kind != "quota" || evs[0].Fields["bytes"] != 5e6 {
		t.Errorf("events = %+v, %v", evs, err)
	}
}

func TestQueryChecks(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "history.db"))
	defer s.Close()
	now := time.Now()
	for _, q := range []api.HistoryQuery{
		{Kind: "nope"},
		{Kind: KindRules, Since: now, Until: now.Add(-time.Hour)},
		{Kind: KindRules, Step: -time.Second},
	} {
		if _, err := s.Query(context.Background(), q, -1); err == nil {
			t.Errorf("query %+v: no error", q)
		}
	}
	// A year at most 2000 points: the step grows.
	r, step := s.pick(api.HistoryQuery{Since: now.Add(-365 * 24 * time.Hour), Until: now}, now)
	if r.table != "h1" || step < 365*24*3600/api.MaxHistoryPoints {
		t.Errorf("a year: table %s step %d", r.table, step)
	}
	r, step = s.pick(api.HistoryQuery{Since: now.Add(-10 * time.Minute), Until: now}, now)
	if r.table != "s1" || step != 1 {
		t.Errorf("10 minutes: table %s step %d, want s1 and 1 s", r.table, step)
	}
}

func TestOptions(t *testing.T) {
	o := Options{Raw: time.Second}
	if err := o.Check(); err == nil {
		t.Error("raw 1s accepted")
	}
	o = Options{}
	if err := o.Check(); err != nil || o.Raw != time.Hour || o.Minutes != 30*24*time.Hour {
		t.Errorf("defaults %+v: %v", o, err)
	}
}
