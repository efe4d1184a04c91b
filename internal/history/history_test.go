package history

import (
	"context"
	"database/sql"
	"fmt"
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

// TestPeaksKept: a point of a minute or an hour keeps its busiest second
// each way, so a plot of a long range shows a burst its mean hides; a
// reading that covers seconds a dropped sample left out counts as spread
// over them; points of the per-second table have their largest second.
func TestPeaksKept(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "history.db"))
	defer s.Close()
	// The readings fall in one minute (so in one minute row and one hour
	// row) within the per-second table's hour.
	t0 := time.Now().Add(-5 * time.Minute).Truncate(time.Minute)
	var out, in uint64
	rec := func(sec int, dOut, dIn uint64) {
		out, in = out+dOut, in+dIn
		s.Record(Sample{Time: t0.Add(time.Duration(sec) * time.Second), Series: []Series{
			{Kind: KindRules, Name: "web", Owner: -1, Counters: Counters{BytesOut: out, BytesIn: in}}}})
	}
	rec(0, 100e3, 10e3)
	for sec := 1; sec < 20; sec++ {
		rec(sec, 100e3, 10e3)
	}
	rec(20, 1e6, 10e3) // the burst
	rec(21, 100e3, 10e3)
	rec(25, 2e6, 400e3) // 4 s since the last reading: 500 KB/s out, 100 KB/s in
	flush(t, s)
	for _, step := range []time.Duration{time.Minute, time.Hour} {
		h, err := s.Query(context.Background(), api.HistoryQuery{Kind: KindRules, Since: t0, Until: t0.Add(59 * time.Second), Step: step}, -1)
		if err != nil {
			t.Fatal(err)
		}
		if len(h.Series) != 1 || len(h.Series[0].Points) != 1 {
			t.Fatalf("step %s: %+v", step, h)
		}
		p := h.Series[0].Points[0]
		if p.BytesOut != out || p.PeakBytesOut != 1e6 || p.PeakBytesIn != 100e3 {
			t.Errorf("step %s (%s table): %d bytes out, busiest second %d out, %d in; want %d, 1000000 and 100000",
				step, h.Resolution, p.BytesOut, p.PeakBytesOut, p.PeakBytesIn, out)
		}
	}
	h, err := s.Query(context.Background(), api.HistoryQuery{Kind: KindRules, Since: t0, Until: t0.Add(59 * time.Second), Step: 30 * time.Second}, -1)
	if err != nil {
		t.Fatal(err)
	}
	if h.Resolution != "1s" || len(h.Series) != 1 || len(h.Series[0].Points) != 1 || h.Series[0].Points[0].PeakBytesOut != 2e6 {
		t.Errorf("30 s points of the per-second table: %+v; want one point whose busiest row is the 2 MB one", h)
	}
}

// TestPeaksOfAnOlderStore: a store written before peaks were kept gains
// the columns when opened; its old minute rows read their mean as their
// peak, new rows their busiest second.
func TestPeaksOfAnOlderStore(t *testing.T) {
	path := filepath.Join(t.TempDir(), "history.db")
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now().Add(-20 * time.Minute).Truncate(time.Minute).Unix()
	for _, q := range []string{
		`CREATE TABLE series (id INTEGER PRIMARY KEY, kind TEXT NOT NULL, name TEXT NOT NULL, owner INTEGER NOT NULL, UNIQUE (kind, name, owner))`,
		`CREATE TABLE m1 (series INTEGER NOT NULL, t INTEGER NOT NULL, bi INTEGER NOT NULL, bo INTEGER NOT NULL, pi INTEGER NOT NULL,
			po INTEGER NOT NULL, di INTEGER NOT NULL, do INTEGER NOT NULL, PRIMARY KEY (series, t)) WITHOUT ROWID`,
		`INSERT INTO series VALUES (1, 'rules', 'web', -1)`,
		fmt.Sprintf(`INSERT INTO m1 VALUES (1, %d, 0, 6000000, 0, 0, 0, 0)`, t0),
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()
	s := open(t, path)
	defer s.Close()
	h, err := s.Query(context.Background(), api.HistoryQuery{Kind: KindRules, Since: time.Unix(t0, 0), Until: time.Unix(t0+59, 0), Step: time.Minute}, -1)
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Series) != 1 || len(h.Series[0].Points) != 1 || h.Series[0].Points[0].PeakBytesOut != 100e3 {
		t.Errorf("an old minute row of 6 MB: %+v; want its mean, 100 KB a second, as its peak", h)
	}
}

// TestContainerApps: an app that is a container is one series named
// container:RUNTIME/NAME, with its runtime, name and latest image and no
// uid; its flow records name it; and a store written before containers
// were named opens, gains the columns, keeps its rows and records them.
func TestContainerApps(t *testing.T) {
	path := filepath.Join(t.TempDir(), "history.db")
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for _, q := range []string{
		`CREATE TABLE series (id INTEGER PRIMARY KEY, kind TEXT NOT NULL, name TEXT NOT NULL, owner INTEGER NOT NULL, UNIQUE (kind, name, owner))`,
		`CREATE TABLE flows (id INTEGER PRIMARY KEY, proto TEXT NOT NULL, local TEXT NOT NULL, remote TEXT NOT NULL, first_ns INTEGER NOT NULL,
			pid INTEGER NOT NULL, comm TEXT NOT NULL, exe TEXT NOT NULL, uid INTEGER NOT NULL, cgroup TEXT NOT NULL, unit TEXT NOT NULL,
			rule TEXT NOT NULL, class TEXT NOT NULL, start_ms INTEGER NOT NULL, end_ms INTEGER NOT NULL, bi INTEGER NOT NULL, bo INTEGER NOT NULL,
			pi INTEGER NOT NULL, po INTEGER NOT NULL, di INTEGER NOT NULL, do INTEGER NOT NULL, UNIQUE (proto, local, remote, first_ns))`,
		`INSERT INTO series VALUES (1, 'apps', '/usr/bin/curl', 1000)`,
		fmt.Sprintf(`INSERT INTO flows VALUES (1, 'tcp', '198.18.0.1:1', '198.18.0.2:80', 1, 7, 'curl', '/usr/bin/curl', 1000, '', '', '', '',
			%d, %d, 0, 10, 0, 1, 0, 0)`, now.Add(-time.Minute).UnixMilli(), now.Add(-time.Minute).UnixMilli()),
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()
	s := open(t, path)
	defer func() { s.Close() }()
	app := ContainerApp("docker", "db")
	if rt, name, ok := ParseContainerApp(app); !ok || rt != "docker" || name != "db" {
		t.Errorf("ParseContainerApp(%q) = %q, %q, %v", app, rt, name, ok)
	}
	if _, _, ok := ParseContainerApp("/usr/bin/curl"); ok {
		t.Error("/usr/bin/curl parsed as a container")
	}
	t0 := now.Add(-10 * time.Second).Truncate(time.Second)
	for i, img := range []string{"postgres:15", "postgres:16"} { // recreated from a newer image
		s.Record(Sample{Time: t0.Add(time.Duration(i) * time.Second), Series: []Series{
			{Kind: KindApps, Name: app, Owner: 0, Image: img, Counters: Counters{BytesOut: uint64(100 * (i + 1))}},
			{Kind: KindApps, Name: "/usr/bin/curl", Owner: 1000, Counters: Counters{BytesOut: uint64(10 * (i + 1))}},
		}})
	}
	s.Record(Sample{Time: t0.Add(2 * time.Second), Flows: []Flow{{Proto: "udp", Local: "198.19.0.2:5000", Remote: "198.18.0.2:53", FirstNS: 9,
		Container: app, Image: "postgres:16", Start: t0, End: t0.Add(time.Second), Counters: Counters{BytesOut: 42}}}})
	flush(t, s)
	h, err := s.Query(context.Background(), api.HistoryQuery{Kind: KindApps, Since: now.Add(-time.Hour)}, -1)
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Series) != 2 {
		t.Fatalf("apps %+v: want the container and curl", h.Series)
	}
	c := h.Series[0]
	if c.Name != app || c.Container != "db" || c.Runtime != "docker" || c.Image != "postgres:16" || c.UID != nil || c.Total.BytesOut != 200 {
		t.Errorf("container series %+v; want db of docker, image postgres:16, no uid, 200 bytes out", c)
	}
	if cu := h.Series[1]; cu.Name != "/usr/bin/curl" || cu.Container != "" || cu.UID == nil || *cu.UID != 1000 {
		t.Errorf("curl's series %+v", cu)
	}
	h, err = s.Query(context.Background(), api.HistoryQuery{Kind: api.HistoryFlows, Since: now.Add(-time.Hour)}, -1)
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Flows) != 2 || h.Flows[0].Container != "db" || h.Flows[0].Runtime != "docker" || h.Flows[0].Image != "postgres:16" ||
		h.Flows[1].Comm != "curl" || h.Flows[1].Container != "" {
		t.Errorf("flow records %+v; want the container's (named) and the old curl flow", h.Flows)
	}
	h, _ = s.Query(context.Background(), api.HistoryQuery{Kind: api.HistoryFlows, Name: app, Since: now.Add(-time.Hour)}, -1)
	if len(h.Flows) != 1 || h.Flows[0].BytesOut != 42 {
		t.Errorf("flow records of %s: %+v", app, h.Flows)
	}
	// The image persists across a reopen.
	s.Close()
	s = open(t, path)
	h, _ = s.Query(context.Background(), api.HistoryQuery{Kind: KindApps, Name: app, Since: now.Add(-time.Hour)}, -1)
	if len(h.Series) != 1 || h.Series[0].Image != "postgres:16" {
		t.Errorf("after a reopen: %+v", h.Series)
	}
}

// TestUnchangedSeriesLeftOut: samples that leave the rules out as
// unchanged (an idle daemon) write nothing for them, and the next reading
// that counts is the busiest second of its own, not spread over the idle
// seconds before it.
func TestUnchangedSeriesLeftOut(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "history.db"))
	defer s.Close()
	t0 := time.Now().Add(-5 * time.Minute).Truncate(time.Minute)
	web := func(out uint64) []Series {
		return []Series{{Kind: KindRules, Name: "web", Owner: -1, Counters: Counters{BytesOut: out}}}
	}
	s.Record(Sample{Time: t0, Series: web(100e3)})
	for sec := 1; sec < 30; sec++ {
		s.Record(Sample{Time: t0.Add(time.Duration(sec) * time.Second), Unchanged: []string{KindRules, KindClasses}})
	}
	s.Record(Sample{Time: t0.Add(30 * time.Second), Series: web(100e3 + 600e3)})
	flush(t, s)
	h, err := s.Query(context.Background(), api.HistoryQuery{Kind: KindRules, Since: t0, Until: t0.Add(59 * time.Second), Step: time.Minute}, -1)
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Series) != 1 || len(h.Series[0].Points) != 1 {
		t.Fatalf("%+v", h)
	}
	if p := h.Series[0].Points[0]; p.BytesOut != 700e3 || p.PeakBytesOut != 600e3 {
		t.Errorf("%d bytes out, busiest second %d; want 700000 and 600000", p.BytesOut, p.PeakBytesOut)
	}
}
