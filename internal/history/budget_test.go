package history

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hostqos/hostqos/internal/testutil"
)

// recordEvents records n events (flushing as it goes, so that the queue
// never refuses one) made by mk.
func recordEvents(t *testing.T, s *Store, n int, mk func(i int) Event) {
	t.Helper()
	for i := 0; i < n; i++ {
		if !s.RecordEvent(mk(i)) {
			t.Fatalf("event %d refused by the queue", i)
		}
		if i%32 == 31 {
			flush(t, s)
		}
	}
	flush(t, s)
}

// eventTable reads the events table's rows, bytes and lowest and highest
// message numbers ("e<N> …").
func eventTable(t *testing.T, s *Store) (rows, bytes int64, first, last string) {
	t.Helper()
	err := s.db.QueryRow(`SELECT count(*), coalesce(sum(bytes), 0), coalesce(min(id), 0), coalesce(max(id), 0) FROM events`).Scan(&rows, &bytes, new(int64), new(int64))
	if err != nil {
		t.Fatal(err)
	}
	_ = s.db.QueryRow(`SELECT subject FROM events ORDER BY id LIMIT 1`).Scan(&first)
	_ = s.db.QueryRow(`SELECT subject FROM events ORDER BY id DESC LIMIT 1`).Scan(&last)
	return rows, bytes, first, last
}

// TestEventsCapped: the events table keeps within its row cap when events
// are small and within its byte cap when they are large; the oldest go
// first, the newest are kept, and the counts Stats reports are the table's.
func TestEventsCapped(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "history.db"), Options{MaxEvents: 1000, MaxEventBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	small := func(i int) Event {
		return Event{Kind: "qsocket.attached", Subject: fmt.Sprintf("e%d", i), Message: "qsocket attached", Owner: 65534}
	}
	recordEvents(t, s, 3000, small)
	rows, bytes, first, last := eventTable(t, s)
	t.Logf("small events: %d rows, %d bytes, %s … %s", rows, bytes, first, last)
	if rows > 1000 || rows < 1000-1000/trimKeep-64 || last != "e2999" || first == "e0" {
		t.Errorf("3000 small events: %d rows kept (%s … %s), want at most 1000 (the cap), the newest kept", rows, first, last)
	}
	if st := s.Stats(); st.Events != rows || st.EventBytes != bytes {
		t.Errorf("stats say %d events of %d bytes, the table holds %d of %d", st.Events, st.EventBytes, rows, bytes)
	}
	// Events of about 3 KiB: the byte cap (1 MiB) binds before the rows.
	big := func(i int) Event {
		return Event{Kind: "rsvp.path", Subject: fmt.Sprintf("e%d", 10000+i), Message: strings.Repeat("m", 1000),
			Fields: map[string]any{"r": strings.Repeat("f", 1900)}, Owner: -1}
	}
	recordEvents(t, s, 800, big)
	rows, bytes, first, last = eventTable(t, s)
	t.Logf("large events: %d rows, %d bytes, %s … %s", rows, bytes, first, last)
	if bytes > 1<<20 || rows > 1000 || last != "e10799" || !strings.HasPrefix(first, "e10") {
		t.Errorf("800 events of 3 KiB: %d rows, %d bytes kept (%s … %s), want at most 1 MiB, the newest kept", rows, bytes, first, last)
	}
}

// TestEventClipped: an event's text is bounded whatever its publisher
// wrote.
func TestEventClipped(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "history.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.RecordEvent(Event{Kind: strings.Repeat("k", 500), Subject: strings.Repeat("s", 5000), Message: strings.Repeat("é", 50000),
		Fields: map[string]any{"x": strings.Repeat("f", 100000)}, Owner: -1})
	flush(t, s)
	evs, err := s.Events(context.Background(), time.Now().Add(-time.Minute), time.Now(), -1, 0)
	if err != nil || len(evs) != 1 {
		t.Fatalf("events = %v, %v", evs, err)
	}
	ev := evs[0]
	if len(ev.Kind) > maxEventKind || len(ev.Subject) > maxEventSubject || len(ev.Message) > maxEventMessage ||
		!strings.HasSuffix(ev.Message, "é…") || fmt.Sprint(ev.Fields) != "map[clipped:100008]" {
		t.Errorf("stored kind %d, subject %d, message %d bytes (…%q), fields %v; want clipped to %d, %d, %d and a note",
			len(ev.Kind), len(ev.Subject), len(ev.Message), ev.Message[len(ev.Message)-8:], ev.Fields, maxEventKind, maxEventSubject, maxEventMessage)
	}
}

// TestHistoryLeavesMinFree: with less than MinFree free on its file
// system, history records nothing, counts what it did not record, says
// why, and still answers queries; with room again it records by itself.
func TestHistoryLeavesMinFree(t *testing.T) {
	dir := t.TempDir()
	free, err := freeBytes(dir)
	if err != nil {
		t.Fatal(err)
	}
	if free+1<<30 > 1<<40 {
		t.Skipf("%s has %d bytes free, more than a MinFree above it can say", dir, free)
	}
	s, err := Open(filepath.Join(dir, "history.db"), Options{MinFree: free + 1<<30})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	recordEvents(t, s, 10, func(i int) Event { return Event{Kind: "k.x", Subject: fmt.Sprintf("e%d", i), Owner: -1} })
	st := s.Stats()
	if rows, _, _, _ := eventTable(t, s); rows != 0 || st.Recording || st.Refused != 10 || !strings.Contains(st.WhyNot, "less than history_min_free") {
		t.Errorf("short of free space: %d events written, stats %+v; want none, 10 refused, not recording with the reason", rows, st)
	}
	if _, err := s.Events(context.Background(), time.Now().Add(-time.Hour), time.Now(), -1, 0); err != nil {
		t.Errorf("query while not recording: %v", err)
	}
	s.opt.MinFree = 1 << 20 // the admin made room
	recordEvents(t, s, 3, func(i int) Event { return Event{Kind: "k.x", Subject: fmt.Sprintf("again%d", i), Owner: -1} })
	if rows, _, _, last := eventTable(t, s); rows != 3 || last != "again2" || !s.Stats().Recording {
		t.Errorf("with room again: %d events (last %s), stats %+v; want 3 recorded", rows, last, s.Stats())
	}
}

// TestHistoryKeepsItsBudget: a database at MaxBytes stops growing; what
// it did not record is counted.
func TestHistoryKeepsItsBudget(t *testing.T) {
	path := filepath.Join(t.TempDir(), "history.db")
	const budget = 16 << 20
	s, err := Open(path, Options{MaxBytes: budget, MaxEvents: 1_000_000, MaxEventBytes: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	recordEvents(t, s, 20000, func(i int) Event {
		return Event{Kind: "k.x", Subject: fmt.Sprintf("e%d", i), Message: strings.Repeat("m", 1000), Owner: -1}
	})
	st := s.Stats()
	used, err := s.usedBytes()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("20000 events of 1 KiB: %d bytes used, stats %+v", used, st)
	// A batch may cross the budget (it is checked before each write).
	if used > budget+256<<10 || st.Recording || st.Refused == 0 || !strings.Contains(st.WhyNot, "history_max_bytes") {
		t.Errorf("database of %d bytes with a budget of %d, stats %+v; want it held near the budget and refusals counted", used, budget, st)
	}
}

// TestEventsTableMigrated: a store written before events had sizes is
// opened, sized and capped.
func TestEventsTableMigrated(t *testing.T) {
	path := filepath.Join(t.TempDir(), "history.db")
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`CREATE TABLE events (id INTEGER PRIMARY KEY, t_ms INTEGER NOT NULL, kind TEXT NOT NULL, subject TEXT NOT NULL,
		message TEXT NOT NULL, owner INTEGER NOT NULL, fields TEXT NOT NULL DEFAULT '');
		INSERT INTO events (t_ms, kind, subject, message, owner) VALUES (?, 'k', 's', 'hello', -1)`, time.Now().UnixMilli()); err != nil {
		t.Fatal(err)
	}
	db.Close()
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	flush(t, s)
	rows, bytes, _, _ := eventTable(t, s)
	if rows != 1 || bytes != int64(len("k")+len("s")+len("hello")+eventRowOverhead) {
		t.Errorf("migrated: %d rows of %d bytes, want 1 of %d", rows, bytes, len("kshello")+eventRowOverhead)
	}
}

// TestHistoryOnFullDisk: on a file system that is full, a write fails
// with SQLite's "disk is full"; history stops recording, counts, says
// why, keeps answering, and records again once there is room.
func TestHistoryOnFullDisk(t *testing.T) {
	dir := testutil.SmallFS(t, 8<<20)
	s, err := Open(filepath.Join(dir, "history.db"), Options{MinFree: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	recordEvents(t, s, 10, func(i int) Event { return Event{Kind: "k.x", Subject: fmt.Sprintf("e%d", i), Owner: -1} })
	filler := testutil.Fill(t, dir, 0)
	s.opt.MinFree = 0 // no reserve: the write itself finds the disk full
	big := strings.Repeat("m", 1000)
	for i := 0; i < 20 && s.Stats().Recording; i++ {
		recordEvents(t, s, 64, func(j int) Event { return Event{Kind: "k.x", Subject: "full", Message: big, Owner: -1} })
	}
	st := s.Stats()
	t.Logf("full disk: %+v", st)
	if st.Recording || st.Refused == 0 {
		t.Errorf("on a full disk: stats %+v; want not recording and refusals counted", st)
	}
	if evs, err := s.Events(context.Background(), time.Now().Add(-time.Hour), time.Now(), -1, 0); err != nil || len(evs) < 10 {
		t.Errorf("query on a full disk: %d events, %v; want the 10 recorded before", len(evs), err)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	recordEvents(t, s, 1, func(int) Event { return Event{Kind: "k.x", Subject: "after", Owner: -1} })
	if _, _, _, last := eventTable(t, s); last != "after" || !s.Stats().Recording {
		t.Errorf("with room again: last event %q, stats %+v; want it recorded", last, s.Stats())
	}
}
