package store

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"math/rand/v2"
	"os"
	"strconv"

	"github.com/hostqos/hostqos/internal/policy"
)

// A state file is a snapshot (the whole persisted state, written
// atomically) plus a journal beside it (path + ".journal"): a change
// appends one record with only the entries it changed, and fsyncs it, so
// the cost of persisting a change follows the change, not the policy.
// The journal is folded into a new snapshot (compacted) at start and when
// it grows past journalMaxRecords or the snapshot's size.
//
// Each record is one line, "CRC32(hex) JSON", and names the snapshot it
// continues (its epoch, a random number written in the snapshot). A
// compaction writes the snapshot with a new epoch first and then empties
// the journal, so a crash between the two leaves a journal of the old
// epoch, which is ignored: nothing is replayed twice or over the wrong
// snapshot. A record cut short by a crash (the last line, incomplete or
// failing its checksum) was never acknowledged and is dropped; a bad record
// before the last one is an error like a corrupt state file.
//
// A record sets or deletes entries: an overlay entry (a nil value is a
// tombstone, which is not a deletion), a slot number, a counter baseline,
// an idempotency key. Replaying sets absolute values, so a record applied
// to a snapshot that already holds it changes nothing.

// journalMaxRecords bounds the journal before it is compacted.
const journalMaxRecords = 4096

// Record is one change to a state file (one line of its journal).
type Record struct {
	Epoch uint64 `json:"epoch"`
	Ops   []Op   `json:"ops"`
}

// Op sets (Value present; "null" is an overlay tombstone) or
// deletes (Value absent) one entry of kind Kind named Name.
type Op struct {
	Kind  string          `json:"k"`
	Name  string          `json:"n"`
	Value json.RawMessage `json:"v,omitempty"`
}

// Kinds of journal entries.
const (
	KindLinks        = "links"
	KindClasses      = "classes"
	KindRules        = "rules"
	KindRuns         = "runs"
	KindReservations = "reservations"
	KindSlotRule     = "slot.rules"
	KindSlotClass    = "slot.classes"
	KindSlotResv     = "slot.resv"
	KindBaseline     = "baseline"
	KindKey          = "key"
)

// JournalPath is the journal beside the snapshot at path.
func JournalPath(path string) string { return path + ".journal" }

// File writes one state file as snapshot + journal and remembers
// what the file holds, to write only the difference.
type File struct {
	path  string
	epoch uint64 // of the snapshot on disk; 0: none (or written before journals)
	// cur is what the file holds now (as read or last written).
	cur State
	// The journal: open for appending (nil: not yet), its size in bytes
	// and records, and whether a failed append could not be undone (the
	// next write compacts).
	f       *os.File
	size    int64
	records int
	broken  bool
	// snapSize is the snapshot's size; a journal larger than it is
	// compacted.
	snapSize int64
	// answered are the keys written by the last record: their answers
	// are recorded after the write (RecordAnswer), so the next record
	// carries them again.
	answered []string
	// migrate: the sections were taken from legacy files, which the next
	// compaction (Ready) writes into the snapshot; legacy are those files,
	// removed once the snapshot holds what they held.
	migrate bool
	legacy  []string
}

// State is what a state file holds. Overlay entries are compared by
// pointer (a change replaces an entry, it never writes through one); the
// sections' entries by value.
type State struct {
	Overlay *Overlay
	Slots   *Slots // the persistent file's; nil in the runtime file
	Keys    Keys
	// The sections (sections.go): the persistent file's shield and quota
	// usage, the runtime file's real-time channels.
	Shield *Shield
	Quota  map[string]*QuotaUsage
	RT     map[uint64]*RTChannel
	Pods   map[string]*Pod // the persistent file's Kubernetes pods
}

// State is what p holds.
func (p *Persisted) State() State {
	return State{Overlay: p.Overlay, Slots: p.Slots, Keys: p.Keys, Shield: p.Shield, Quota: p.Quota, RT: p.RTChannels, Pods: p.Pods}
}

// Open reads the state file at path (snapshot and journal). A file written
// before state version 2 takes the sections from the legacy files that
// exist (Ready writes them into the snapshot and removes those files).
func Open(path string, legacy Legacy) (*File, *Persisted, error) {
	p, epoch, records, snapSize, err := readStateJournal(path)
	if err != nil {
		return nil, nil, err
	}
	s := &File{path: path, epoch: epoch, records: records, snapSize: snapSize}
	if p.Version < stateVersion {
		if s.legacy, err = p.takeLegacy(legacy); err != nil {
			return nil, nil, err
		}
		s.migrate = len(s.legacy) > 0
	} else {
		for _, f := range legacy.files() {
			if _, err := os.Stat(f); err == nil {
				s.legacy = append(s.legacy, f) // left by a migration cut short
			}
		}
	}
	s.cur = p.State()
	s.Hold(p.Slots)
	return s, p, nil
}

// Holds is what the file holds now. A writer of one part of the state
// (a section) writes Holds with that part replaced.
func (s *File) Holds() State { return s.cur }

// Path is the snapshot's path (the journal is JournalPath of it).
func (s *File) Path() string { return s.path }

// Close closes the journal; the next write folds it into a new snapshot.
func (s *File) Close() error {
	if s.f == nil {
		return nil
	}
	err := s.f.Close()
	s.f = nil
	return err
}

// Slots is the slot table the file holds.
func (s *File) Slots() *Slots { return s.cur.Slots }

// CompactNext makes the next write fold the journal into a new snapshot,
// as if the journal were full.
func (s *File) CompactNext() { s.records = journalMaxRecords }

// Hold records that the file holds slots. A table made from what the file
// held (Slots.Clone) then names only the entries it changed, and the
// next write diffs only those: the table gets an id of its own as its
// base, unless it already has one and changed nothing since (its content
// is then its base's). Only the id is kept, never the table it was made
// from, so no chain of earlier tables stays alive.
func (s *File) Hold(slots *Slots) {
	s.cur.Slots = slots
	if slots != nil && (slots.base == 0 || slots.changed.size() > 0) {
		slots.base, slots.changed = slotTableIDs.Add(1), slotChanges{}
	}
}

// Ready prepares the journal for appending, at start: a journal with
// content (records, or a record cut short by a crash) is folded into a new
// snapshot, as are sections taken from legacy files (which are removed
// then); otherwise an existing snapshot is continued by an empty journal;
// a state file that does not exist yet is written whole by the first
// change.
func (s *File) Ready() error {
	if fi, err := os.Stat(JournalPath(s.path)); s.migrate || (err == nil && fi.Size() > 0) {
		if err := s.Compact(s.cur); err != nil {
			return err
		}
		s.migrate = false
		return s.removeLegacy()
	}
	if err := s.removeLegacy(); err != nil {
		return err
	}
	if s.epoch == 0 {
		return nil
	}
	f, err := os.OpenFile(JournalPath(s.path), os.O_CREATE|os.O_TRUNC|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("open state journal %s: %w", JournalPath(s.path), err)
	}
	s.f, s.size, s.records, s.broken = f, 0, 0, false
	return nil
}

// Write makes the file hold ov, slots and keys: one journal record with
// what differs, or a new snapshot when there is none yet or the journal
// is due for compaction. A write that changes nothing writes nothing. The
// returned undo puts the file back as it was (for a change that failed
// after this write); it is nil when nothing was written.
func (s *File) Write(st State) (undo func() error, err error) {
	ops, err := s.diff(st)
	if err != nil {
		return nil, err
	}
	if len(ops) == 0 {
		return nil, nil
	}
	prev, prevAnswered := s.cur, s.answered
	if s.f == nil || s.epoch == 0 || s.broken || s.records >= journalMaxRecords || s.size > max(s.snapSize, 1<<20) {
		if err := s.Compact(st); err != nil {
			return nil, err
		}
		return func() error { return s.Compact(prev) }, nil
	}
	line, err := encodeRecord(Record{Epoch: s.epoch, Ops: ops})
	if err != nil {
		return nil, err
	}
	off := s.size
	if err := s.appendLine(line); err != nil {
		s.truncate(off)
		return nil, fmt.Errorf("write state %s: %w", JournalPath(s.path), err)
	}
	s.cur = st
	s.Hold(st.Slots)
	s.answered = nil
	for k, v := range st.Keys {
		if prev.Keys[k] != v {
			s.answered = append(s.answered, k) // new: answered after this write
		}
	}
	return func() error {
		s.cur, s.answered = prev, prevAnswered // prev.Slots keeps its base
		if err := s.truncate(off); err != nil {
			// The record stays: a restart must not bring it back, so
			// the journal is folded into a snapshot of the old state.
			return s.Compact(prev)
		}
		return nil
	}, nil
}

func (s *File) appendLine(line []byte) error {
	if _, err := s.f.Write(line); err != nil {
		return err
	}
	if err := s.f.Sync(); err != nil {
		return err
	}
	s.size += int64(len(line))
	s.records++
	return nil
}

// truncate cuts the journal back to off bytes (a failed or undone
// append); on failure the journal is marked broken so that the next write
// compacts.
func (s *File) truncate(off int64) error {
	err := s.f.Truncate(off)
	if err == nil {
		err = s.f.Sync()
	}
	if err != nil {
		s.broken = true
		return fmt.Errorf("truncate state journal %s: %w", JournalPath(s.path), err)
	}
	if off < s.size {
		s.records--
	}
	s.size = off
	return nil
}

// removeLegacy removes the legacy files whose content the snapshot holds.
func (s *File) removeLegacy() error {
	if s.migrate {
		return nil // not written yet
	}
	var errs []error
	for _, f := range s.legacy {
		if err := os.Remove(f); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("remove %s (the state file holds what it held): %w", f, err))
		}
	}
	s.legacy = nil
	return errors.Join(errs...)
}

// Compact writes the whole state as a new snapshot (a new epoch) and
// starts an empty journal.
func (s *File) Compact(st State) error {
	epoch := rand.Uint64() | 1
	n, err := WriteSnapshot(s.path, st, epoch)
	if err != nil {
		return err
	}
	s.epoch, s.snapSize, s.cur, s.answered = epoch, n, st, nil
	s.Hold(st.Slots)
	if s.f != nil {
		s.f.Close()
		s.f = nil
	}
	f, err := os.OpenFile(JournalPath(s.path), os.O_CREATE|os.O_TRUNC|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		// The snapshot holds everything; the next write tries again.
		return nil
	}
	s.f, s.size, s.records, s.broken = f, 0, 0, false
	return nil
}

// diff lists what differs between the file's state and the new one.
// Overlay entries are compared by pointer: a change replaces an entry, it
// never writes through one (see Overlay.clone).
func (s *File) diff(st State) ([]Op, error) {
	var ops []Op
	var err error
	add := func(kind, name string, v any, del bool) {
		if err != nil {
			return
		}
		op := Op{Kind: kind, Name: name}
		if !del {
			if op.Value, err = json.Marshal(v); err != nil {
				err = fmt.Errorf("encode state: %w", err)
				return
			}
		}
		ops = append(ops, op)
	}
	old, ov := s.cur.Overlay, st.Overlay
	if old == nil {
		old = NewOverlay()
	}
	if ov == nil {
		ov = NewOverlay()
	}
	diffVals(KindLinks, old.Links, ov.Links, add)
	diffVals(KindClasses, old.Classes, ov.Classes, add)
	diffVals(KindRules, old.Rules, ov.Rules, add)
	diffVals(KindRuns, old.Runs, ov.Runs, add)
	diffVals(KindReservations, old.Reservations, ov.Reservations, add)
	os, ns := s.cur.Slots, st.Slots
	if os == nil {
		os = &Slots{}
	}
	if ns == nil {
		ns = &Slots{}
	}
	if ns.base != 0 && s.cur.Slots != nil && ns.base == s.cur.Slots.base {
		// Made from what the file holds: only what assign changed.
		ch := ns.changed
		diffKeys(KindSlotRule, os.Rules, ns.Rules, ch.rules, add)
		diffKeys(KindSlotClass, os.Classes, ns.Classes, ch.classes, add)
		diffKeys(KindSlotResv, os.Resv, ns.Resv, ch.resv, add)
		diffKeys(KindBaseline, os.Baselines, ns.Baselines, ch.baselines, add)
	} else {
		diffVals(KindSlotRule, os.Rules, ns.Rules, add)
		diffVals(KindSlotClass, os.Classes, ns.Classes, add)
		diffVals(KindSlotResv, os.Resv, ns.Resv, add)
		diffVals(KindBaseline, os.Baselines, ns.Baselines, add)
	}
	diffVals(KindKey, s.cur.Keys, st.Keys, add)
	for _, k := range s.answered {
		if e, ok := st.Keys[k]; ok && e == s.cur.Keys[k] {
			add(KindKey, k, e, false)
		}
	}
	diffSections(s.cur, st, add)
	return ops, err
}

// diffVals adds a set for every entry of cur that old lacks or holds
// differently (pointers compare by identity: a change replaces an object,
// never writes through it) and a delete for every entry cur lacks.
func diffVals[K comparable, V comparable](kind string, old, cur map[K]V, add func(kind, name string, v any, del bool)) {
	for n, v := range cur {
		if ov, ok := old[n]; !ok || ov != v {
			add(kind, fmt.Sprint(n), v, false)
		}
	}
	for n := range old {
		if _, ok := cur[n]; !ok {
			add(kind, fmt.Sprint(n), nil, true)
		}
	}
}

// diffKeys is diffVals over the entries named in keys only (the others
// are known to be equal).
func diffKeys[K comparable, V comparable](kind string, old, cur map[K]V, keys map[K]bool, add func(kind, name string, v any, del bool)) {
	for n := range keys {
		ov, had := old[n]
		v, has := cur[n]
		switch {
		case has && (!had || ov != v):
			add(kind, fmt.Sprint(n), v, false)
		case !has && had:
			add(kind, fmt.Sprint(n), nil, true)
		}
	}
}

func encodeRecord(r Record) ([]byte, error) {
	data, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("encode state: %w", err)
	}
	line := fmt.Appendf(nil, "%08x ", crc32.ChecksumIEEE(data))
	line = append(line, data...)
	return append(line, '\n'), nil
}

// DecodeRecord checks and decodes one journal line (without its newline).
func DecodeRecord(line []byte) (Record, error) {
	var r Record
	sum, data, ok := bytes.Cut(line, []byte(" "))
	if !ok || len(sum) != 8 {
		return r, errors.New("no checksum")
	}
	want, err := strconv.ParseUint(string(sum), 16, 32)
	if err != nil || uint32(want) != crc32.ChecksumIEEE(data) {
		return r, errors.New("checksum mismatch")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return r, describeStateError(err)
	}
	return r, nil
}

// apply lays a journal record over a Persisted state.
func (p *Persisted) apply(r Record) error {
	if p.Slots == nil {
		p.Slots = NewSlots()
	}
	// A snapshot leaves out the maps it had nothing in (omitempty): give
	// the record somewhere to write.
	if p.Slots.Rules == nil {
		p.Slots.Rules = map[string]int{}
	}
	if p.Slots.Classes == nil {
		p.Slots.Classes = map[string]int{}
	}
	if p.Slots.Baselines == nil {
		p.Slots.Baselines = map[int]BaseCounter{}
	}
	if p.Slots.Resv == nil {
		p.Slots.Resv = map[string]int{}
	}
	if p.Keys == nil {
		p.Keys = Keys{}
	}
	for _, op := range r.Ops {
		if ok, err := p.applySection(op); ok {
			if err != nil {
				return fmt.Errorf("%s %q: %w", op.Kind, policy.Clip(op.Name), err)
			}
			continue
		}
		var err error
		switch op.Kind {
		case KindLinks:
			err = applyOp(p.Overlay.Links, op)
		case KindClasses:
			err = applyOp(p.Overlay.Classes, op)
		case KindRules:
			err = applyOp(p.Overlay.Rules, op)
		case KindRuns:
			err = applyOp(p.Overlay.Runs, op)
		case KindReservations:
			err = applyOp(p.Overlay.Reservations, op)
		case KindKey:
			err = applyOp(p.Keys, op)
		case KindSlotRule:
			err = applyVal(p.Slots.Rules, op)
		case KindSlotClass:
			err = applyVal(p.Slots.Classes, op)
		case KindSlotResv:
			err = applyVal(p.Slots.Resv, op)
		case KindBaseline:
			slot, perr := strconv.Atoi(op.Name)
			if perr != nil {
				return fmt.Errorf("baseline of slot %q: not a number", policy.Clip(op.Name))
			}
			if op.Value == nil {
				delete(p.Slots.Baselines, slot)
				continue
			}
			var v BaseCounter
			if err = strictJSON(op.Value, &v); err == nil {
				p.Slots.Baselines[slot] = v
			}
		default:
			return fmt.Errorf("unknown entry kind %q", policy.Clip(op.Kind))
		}
		if err != nil {
			return fmt.Errorf("%s %q: %w", op.Kind, policy.Clip(op.Name), err)
		}
	}
	return nil
}

func applyOp[T any](m map[string]*T, op Op) error {
	if op.Value == nil {
		delete(m, op.Name)
		return nil
	}
	if string(op.Value) == "null" {
		m[op.Name] = nil
		return nil
	}
	v := new(T)
	if err := strictJSON(op.Value, v); err != nil {
		return err
	}
	m[op.Name] = v
	return nil
}

func applyVal[V any](m map[string]V, op Op) error {
	if op.Value == nil {
		delete(m, op.Name)
		return nil
	}
	var v V
	if err := strictJSON(op.Value, &v); err != nil {
		return err
	}
	m[op.Name] = v
	return nil
}

func strictJSON(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	return describeStateError(dec.Decode(v))
}

// readStateJournal reads a state file's snapshot and replays its journal:
// the state, the snapshot's epoch, the journal's records of that epoch and
// the snapshot's size.
func readStateJournal(path string) (*Persisted, uint64, int, int64, error) {
	p, err := readSnapshot(path)
	if err != nil {
		return nil, 0, 0, 0, err
	}
	var snapSize int64
	if fi, err := os.Stat(path); err == nil {
		snapSize = fi.Size()
	}
	if p.Journal == 0 {
		return p, 0, 0, snapSize, nil // no journal continues this snapshot
	}
	data, err := os.ReadFile(JournalPath(path))
	if errors.Is(err, fs.ErrNotExist) {
		return p, p.Journal, 0, snapSize, nil
	}
	if err != nil {
		return nil, 0, 0, 0, fmt.Errorf("read state %s: %w", JournalPath(path), err)
	}
	const fix = "move it away to start from the state file alone"
	records := 0
	for n, rest := 1, data; len(rest) > 0; n++ {
		i := bytes.IndexByte(rest, '\n')
		if i < 0 {
			break // no newline: cut short by a crash, never acknowledged
		}
		line := rest[:i]
		rest = rest[i+1:]
		r, err := DecodeRecord(line)
		if err != nil {
			if len(rest) == 0 {
				break // the last record, cut short by a crash
			}
			return nil, 0, 0, 0, fmt.Errorf("read state %s: record %d: %w (%s)", JournalPath(path), n, err, fix)
		}
		if r.Epoch != p.Journal {
			continue // of an older snapshot (a compaction was cut short)
		}
		if err := p.apply(r); err != nil {
			return nil, 0, 0, 0, fmt.Errorf("read state %s: record %d: %w (%s)", JournalPath(path), n, err, fix)
		}
		records++
	}
	if p.Slots != nil {
		if err := p.Slots.check(); err != nil {
			return nil, 0, 0, 0, fmt.Errorf("read state %s: %w; %s", JournalPath(path), err, fix)
		}
	}
	if err := p.Keys.check(); err != nil {
		return nil, 0, 0, 0, fmt.Errorf("read state %s: %w; %s", JournalPath(path), err, fix)
	}
	return p, p.Journal, records, snapSize, nil
}

// WriteSnapshot writes a whole state file with the journal epoch that
// continues it, atomically (see WriteState); it returns its size.
func WriteSnapshot(path string, st State, epoch uint64) (int64, error) {
	if err := writeStateEpoch(path, st, epoch); err != nil {
		return 0, err
	}
	fi, err := os.Stat(path)
	if err != nil {
		return 0, nil
	}
	return fi.Size(), nil
}
