package history

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"
)

// The history's bounds on disk (docs/observability.md, "Bounds on disk").
//
//   - Events have a row cap (Options.MaxEvents) and a byte cap
//     (Options.MaxEventBytes), as flow records have a row cap: after a
//     write that takes the table past either, the oldest rows go (trimmed
//     to 15/16 of the cap, so that a trim does not run at every write).
//     Each event is clipped first (kind, subject, message and fields to a
//     few hundred bytes to 2 KiB), so one event cannot be large.
//   - The database has a byte budget (Options.MaxBytes), and history
//     leaves Options.MinFree of its file system free: the state snapshot
//     and journal (the policy) live in the same directory by default, and
//     a policy change must never find the disk filled by history.
//
// Out of room — at the budget, with less than MinFree free, or after a
// write failed with a full disk — history fails soft: it stops recording,
// counts what it did not record (Stats.Refused), logs a warning once and
// keeps answering queries. The room is checked before every write, so
// recording resumes by itself once retention, an admin or a larger disk
// made room.

// Bounds of one event's text in the database (bytes).
const (
	maxEventKind    = 64
	maxEventSubject = 256
	maxEventMessage = 1024
	maxEventFields  = 2048
	// eventRowOverhead is what a row takes besides its text: its id,
	// time and owner, the row header and the time index's entry.
	eventRowOverhead = 48
	// trimKeep: a trim keeps trimKeep-1 of every trimKeep rows (bytes)
	// of the cap.
	trimKeep = 16
	// warnEvery bounds the log lines of failed writes.
	warnEvery = time.Minute
)

// clipText cuts s to at most n bytes on a character boundary, marking
// the cut with "…".
func clipText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	n -= len("…")
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// clipEvent bounds ev's text and returns its fields as stored (JSON; a
// note in place of fields too long to keep).
func clipEvent(ev *Event) string {
	ev.Kind = clipText(ev.Kind, maxEventKind)
	ev.Subject = clipText(ev.Subject, maxEventSubject)
	ev.Message = clipText(ev.Message, maxEventMessage)
	if len(ev.Fields) == 0 {
		return ""
	}
	b, err := json.Marshal(ev.Fields)
	if err != nil {
		return ""
	}
	if len(b) > maxEventFields {
		return fmt.Sprintf(`{"clipped":%d}`, len(b))
	}
	return string(b)
}

// eventBytes is what a stored event counts against Options.MaxEventBytes.
func eventBytes(ev *Event, fields string) int64 {
	return int64(len(ev.Kind) + len(ev.Subject) + len(ev.Message) + len(fields) + eventRowOverhead)
}

// migrateEvents adds the bytes column to an events table of an older
// store and fills it.
func (s *Store) migrateEvents() error {
	var n int
	if err := s.db.QueryRow(`SELECT count(*) FROM pragma_table_info('events') WHERE name = 'bytes'`).Scan(&n); err != nil {
		return fmt.Errorf("read events table: %w", err)
	}
	if n > 0 {
		return nil
	}
	if _, err := s.db.Exec(`ALTER TABLE events ADD COLUMN bytes INTEGER NOT NULL DEFAULT 0`); err != nil {
		return fmt.Errorf("add bytes to events table: %w", err)
	}
	_, err := s.db.Exec(`UPDATE events SET bytes = length(CAST(kind AS BLOB)) + length(CAST(subject AS BLOB)) +
		length(CAST(message AS BLOB)) + length(CAST(fields AS BLOB)) + ?`, eventRowOverhead)
	if err != nil {
		return fmt.Errorf("size events: %w", err)
	}
	return nil
}

// countEvents reads the events table's rows and bytes.
func (s *Store) countEvents() error {
	if err := s.db.QueryRow(`SELECT count(*), coalesce(sum(bytes), 0) FROM events`).Scan(&s.events, &s.eventBytes); err != nil {
		return fmt.Errorf("count events: %w", err)
	}
	return nil
}

// trimOldest deletes the oldest rows of table (by id) beyond keep: the
// cap of flow records and of events.
func (s *Store) trimOldest(table string, keep int) error {
	_, err := s.db.Exec(`DELETE FROM `+table+` WHERE id <= (SELECT id FROM `+table+` ORDER BY id DESC LIMIT 1 OFFSET ?)`, keep)
	if err != nil {
		return fmt.Errorf("trim %s to %d rows: %w", table, keep, err)
	}
	return nil
}

// trimEventBytes deletes the oldest events beyond the newest keep bytes.
func (s *Store) trimEventBytes(keep int64) error {
	_, err := s.db.Exec(`DELETE FROM events WHERE id <= (SELECT id FROM
		(SELECT id, sum(bytes) OVER (ORDER BY id DESC ROWS UNBOUNDED PRECEDING) AS c FROM events)
		WHERE c > ? ORDER BY id DESC LIMIT 1)`, keep)
	if err != nil {
		return fmt.Errorf("trim events to %d bytes: %w", keep, err)
	}
	return nil
}

// capEvents trims the events table when a write took it past its caps.
func (s *Store) capEvents() {
	rows, bytes := int64(s.opt.MaxEvents), s.opt.MaxEventBytes
	if s.events <= rows && s.eventBytes <= bytes {
		return
	}
	err := s.trimOldest("events", int(rows-rows/trimKeep))
	if err == nil {
		err = s.trimEventBytes(bytes - bytes/trimKeep)
	}
	if err == nil {
		err = s.countEvents()
	}
	if err != nil {
		s.warnLimited("cap history events", err)
	}
}

// freeBytes is the space an unprivileged writer may still use on the file
// system of dir.
func freeBytes(dir string) (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, fmt.Errorf("read free space of %s: %w", dir, err)
	}
	return int64(st.Bavail) * st.Bsize, nil
}

// usedBytes is what the database holds: its pages in use and its WAL.
func (s *Store) usedBytes() (int64, error) {
	var pages, free, size int64
	for _, q := range []struct {
		pragma string
		v      *int64
	}{{"page_count", &pages}, {"freelist_count", &free}, {"page_size", &size}} {
		if err := s.db.QueryRow(`PRAGMA ` + q.pragma).Scan(q.v); err != nil {
			return 0, fmt.Errorf("size history database: %w", err)
		}
	}
	used := (pages - free) * size
	if fi, err := os.Stat(s.path + "-wal"); err == nil {
		used += fi.Size()
	}
	return used, nil
}

// room reports whether history may write now, and if not, why.
func (s *Store) room() (bool, string) {
	dir := filepath.Dir(s.path)
	if free, err := freeBytes(dir); err == nil && free < s.opt.MinFree {
		return false, fmt.Sprintf("%s has %s free, less than history_min_free %s (kept free for the policy state)",
			dir, mib(free), mib(s.opt.MinFree))
	}
	if used, err := s.usedBytes(); err == nil && used >= s.opt.MaxBytes {
		return false, fmt.Sprintf("the history database holds %s, its budget history_max_bytes is %s",
			mib(used), mib(s.opt.MaxBytes))
	}
	return true, ""
}

// mib writes a size in MiB for a message.
func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

// diskFull reports whether err is SQLite's "database or disk is full".
func diskFull(err error) bool {
	var c interface{ Code() int }
	if errors.As(err, &c) {
		return c.Code()&0xff == 13 // SQLITE_FULL
	}
	return errors.Is(err, unix.ENOSPC) || strings.Contains(err.Error(), "disk is full")
}

// setRecording notes whether history records, logging a change of state.
func (s *Store) setRecording(ok bool, why string) {
	s.mu.Lock()
	was := s.recording
	s.recording, s.whyNot = ok, why
	s.mu.Unlock()
	switch {
	case ok && !was:
		s.log.Info("history records again", "refused", s.refused.Load())
	case !ok && was:
		s.log.Warn("history stopped recording; the daemon keeps enforcing and serving, queries are answered", "reason", why)
	}
}

// warnLimited logs a failed write at most every warnEvery.
func (s *Store) warnLimited(msg string, err error) {
	now := time.Now()
	if now.Sub(s.lastWarn) < warnEvery {
		return
	}
	s.lastWarn = now
	s.log.Warn(msg, "err", err, "write_errors", s.writeErrs.Load())
}
