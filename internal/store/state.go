// Package store is hostqosd's persisted desired state: the overlays of
// changes made through the API (persistent) and of temporary changes and
// runs (a runtime file that survives a crash, not a reboot) laid over the
// config file (Merge), the stable numbers the derive gives rules, classes
// and reservations (Slots), the idempotency keys of keyed changes (Keys),
// and their files: each a snapshot plus an append-only journal (File), so
// persisting a change costs what the change is, not the policy. It knows
// nothing of the kernel; the engine decides when to write.
package store

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"sort"
	"sync/atomic"

	"github.com/hostqos/hostqos/internal/datapath"
	"github.com/hostqos/hostqos/internal/derive"
	"github.com/hostqos/hostqos/internal/policy"
	"github.com/hostqos/hostqos/internal/shaper"
)

// Overlay holds changes made through the API on top of the config file. A
// nil entry is a tombstone: the object of that name from the config file is
// removed.
type Overlay struct {
	Links   map[string]*policy.Link  `json:"links,omitempty"`
	Classes map[string]*policy.Class `json:"classes,omitempty"`
	Rules   map[string]*policy.Rule  `json:"rules,omitempty"`
	Runs    map[string]*Run          `json:"runs,omitempty"`
	// Reservations (see reservations.go).
	Reservations map[string]*policy.Reservation `json:"reservations,omitempty"`
}

// Run is an active `hostqos run`, kept in the temporary Overlay so a
// restarted daemon keeps the program under its policy.
type Run struct {
	ID     string `json:"id"`
	PID    int    `json:"pid"`
	UID    uint32 `json:"uid"`
	Admin  bool   `json:"admin,omitempty"` // started by root or group hostqos
	Cgroup string `json:"cgroup"`
	Origin string `json:"origin"` // the cgroup the process came from
	Rule   string `json:"rule"`
	Cmd    string `json:"cmd,omitempty"`
	Since  int64  `json:"since_unix"`
}

// Ordinary reports whether the run was started by an ordinary user (not
// root, not group hostqos). State of an older daemon has no Admin field:
// then only uid 0 counts as admin, which errs on the safe side.
func (r *Run) Ordinary() bool { return !r.Admin && r.UID != 0 }

func NewOverlay() *Overlay {
	return &Overlay{
		Links:   map[string]*policy.Link{},
		Classes: map[string]*policy.Class{},
		Rules:   map[string]*policy.Rule{},
		Runs:    map[string]*Run{},

		Reservations: map[string]*policy.Reservation{},
	}
}

// Clone copies the Overlay's maps so a change can be prepared and
// dropped. The objects are shared: a change replaces an entry with a new
// object and never writes through an entry's pointer, which is also how
// the state journal finds what a change changed (by pointer, see
// File.diff).
func (o *Overlay) Clone() *Overlay {
	return &Overlay{Links: maps.Clone(o.Links), Classes: maps.Clone(o.Classes), Rules: maps.Clone(o.Rules), Runs: maps.Clone(o.Runs),
		Reservations: maps.Clone(o.Reservations)}
}

// Differs reports whether o and n hold other entries (by pointer, see
// clone).
func (o *Overlay) Differs(n *Overlay) bool {
	return !ptrMapsEqual(o.Links, n.Links) || !ptrMapsEqual(o.Classes, n.Classes) || !ptrMapsEqual(o.Rules, n.Rules) ||
		!ptrMapsEqual(o.Runs, n.Runs) || !ptrMapsEqual(o.Reservations, n.Reservations)
}

func ptrMapsEqual[T any](a, b map[string]*T) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// Sources of objects, as shown by the API.
const (
	SrcDefault = "default"
	SrcConfig  = "config"
	SrcAPI     = "api"
	SrcTemp    = "temporary"
	SrcRun     = "run"
)

// Merged is the effective policy with where each object came from.
type Merged struct {
	Policy  *policy.Policy
	Sources map[string]string // "rule/NAME", "class/NAME", "link/NAME" → source
	// Runs are where each run's process was moved from and to, sorted by
	// rule (the derive keeps it under the admin cgroup and unit rules of
	// the cgroup it left).
	Runs []derive.Run
}

// Merge lays the persistent and temporary overlays over the config file's
// policy. The base must already contain the default classes.
func Merge(base *policy.Policy, persist, temp *Overlay) Merged {
	n := len(base.Links) + len(base.Classes) + len(base.Rules) + len(base.Reservations) + len(persist.Rules) + len(temp.Rules)
	m := Merged{Policy: &policy.Policy{}, Sources: make(map[string]string, n)}
	defaults := map[string]bool{}
	for _, c := range policy.DefaultClasses() {
		defaults[c.Name] = true
	}
	m.Policy.Links = layer(m.Sources, "link/", base.Links, func(l policy.Link) string { return l.Name },
		func(string) string { return SrcConfig }, persist.Links, temp.Links, nil)
	m.Policy.Classes = layer(m.Sources, "class/", base.Classes, func(c policy.Class) string { return c.Name },
		func(name string) string {
			if defaults[name] {
				return SrcDefault
			}
			return SrcConfig
		}, persist.Classes, temp.Classes, nil)
	m.Policy.Rules = layer(m.Sources, "rule/", base.Rules, func(r policy.Rule) string { return r.Name },
		func(string) string { return SrcConfig }, persist.Rules, temp.Rules,
		func(r *policy.Rule, temporary bool) { r.Temporary = temporary })
	m.Policy.Reservations = layer(m.Sources, "reservation/", base.Reservations, func(r policy.Reservation) string { return r.Name },
		func(string) string { return SrcConfig }, persist.Reservations, temp.Reservations,
		func(r *policy.Reservation, temporary bool) { r.Temporary = temporary })
	userRun := map[string]bool{}
	for _, run := range temp.Runs {
		m.Sources["rule/"+run.Rule] = SrcRun
		userRun[run.Rule] = run.Ordinary()
		m.Runs = append(m.Runs, derive.Run{Rule: run.Rule, Cgroup: run.Cgroup, Origin: run.Origin})
	}
	sort.Slice(m.Runs, func(i, j int) bool { return m.Runs[i].Rule < m.Runs[j].Rule })
	// Only the daemon says which rules are ordinary users' runs.
	for i := range m.Policy.Rules {
		m.Policy.Rules[i].UserRun = userRun[m.Policy.Rules[i].Name]
	}
	return m
}

// layer merges one kind of object: the base list, then the persistent and
// the temporary Overlay (a nil entry removes the object). Objects keep the
// base's order; new ones follow in name order. sources records where each
// object came from; mark, if set, tells an object whether it is temporary.
func layer[T any](sources map[string]string, prefix string, base []T, name func(T) string,
	baseSource func(string) string, persist, temp map[string]*T, mark func(*T, bool)) []T {
	// One copy of each object into out, by position; a removed object
	// keeps its slot (and gets it back if a later Overlay adds it again)
	// until the end. Runs on every change over the whole policy.
	n := len(base) + len(persist) + len(temp)
	out := make([]T, 0, n)
	alive := make([]bool, 0, n)
	pos := make(map[string]int, n)
	put := func(nm string, v *T, src string) {
		if i, ok := pos[nm]; ok {
			out[i], alive[i] = *v, true
		} else {
			pos[nm] = len(out)
			out, alive = append(out, *v), append(alive, true)
		}
		sources[prefix+nm] = src
	}
	for i := range base {
		nm := name(base[i])
		put(nm, &base[i], baseSource(nm))
	}
	for _, ov := range []struct {
		m   map[string]*T
		src string
	}{{persist, SrcAPI}, {temp, SrcTemp}} {
		for _, nm := range SortedKeys(ov.m) {
			v := ov.m[nm]
			if v == nil {
				if i, ok := pos[nm]; ok {
					alive[i] = false
				}
				continue
			}
			c := *v
			if mark != nil {
				mark(&c, ov.src == SrcTemp)
			}
			put(nm, &c, ov.src)
		}
	}
	kept := out[:0]
	for i := range out {
		if alive[i] {
			kept = append(kept, out[i])
		}
	}
	if len(kept) == 0 {
		return nil
	}
	return kept
}

func SortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// Slots gives every rule a stable slot in the datapath's counter array
// and every class a stable index, so counters survive restarts and edits.
// Baselines hold a slot's counter value when it was handed to its current
// owner, so a reused slot starts from zero.
type Slots struct {
	Rules     map[string]int      `json:"rules"`
	Classes   map[string]int      `json:"classes"`
	Baselines map[int]BaseCounter `json:"baselines,omitempty"`
	// Resv are the datapath ids of reservations and of rules with a
	// session limit, less one ("resv:NAME" or "rule:NAME" → id-1), stable
	// for their life (see resvIDs).
	Resv map[string]int `json:"resv,omitempty"`
	// base identifies the table whose content changed is counted from
	// (0: unknown), and changed are the entries assign changed since:
	// the state journal diffs only those when base is what the file
	// Holds (File.diff), not 10,000 slots on every change. An id,
	// not a pointer: a table must not keep the tables before it alive,
	// or memory would grow with every change (see File.hold).
	base    uint64
	changed slotChanges
	// handed are the rule slots the last assign gave a new owner, to be
	// stamped with the generation the push makes (stampHandover).
	handed []int
}

// slotTableIDs numbers the contents of slot tables that state files hold
// (Slots.base), unique across the process's state stores.
var slotTableIDs atomic.Uint64

// slotChanges are the entries of a Slots that may differ from its
// base's (nil maps: not recorded, the table has no base).
type slotChanges struct {
	rules, classes, resv map[string]bool
	baselines            map[int]bool
}

// Clone copies the sets, making them if they are nil.
func (c slotChanges) clone() slotChanges {
	return slotChanges{rules: cloneSet(c.rules), classes: cloneSet(c.classes), resv: cloneSet(c.resv), baselines: cloneSet(c.baselines)}
}

func (c slotChanges) size() int {
	return len(c.rules) + len(c.classes) + len(c.resv) + len(c.baselines)
}

func cloneSet[K comparable](m map[K]bool) map[K]bool {
	if m == nil {
		return map[K]bool{}
	}
	return maps.Clone(m)
}

// BaseCounter is what a rule slot held when it was handed to its current
// owner: its counters, and the datapath's policy generation from which the
// owner has it.
type BaseCounter struct {
	Packets uint64 `json:"packets"`
	Bytes   uint64 `json:"bytes"`
	Drops   uint64 `json:"drops"`
	// The received side (TC ingress).
	RxPackets uint64 `json:"rx_packets,omitempty"`
	RxBytes   uint64 `json:"rx_bytes,omitempty"`
	RxDrops   uint64 `json:"rx_drops,omitempty"`
	// Gen is the first policy generation in which the slot is the current
	// owner's (0: older than any the datapath remembers): a flow the
	// datapath classified at an earlier generation was classified under
	// an earlier owner (slotOwners).
	Gen uint32 `json:"gen,omitempty"`
}

// maxClasses bounds service class indexes (the shaper's class-id scheme).
const maxClasses = shaper.ClassIndexes

func NewSlots() *Slots {
	return &Slots{Rules: map[string]int{}, Classes: map[string]int{}, Baselines: map[int]BaseCounter{}}
}

// Clone copies the table for a change to be prepared on. The copy carries
// what changed since the base of s (see File.diff), unless that is
// more than the table holds (applies that write no state file, like the
// protected clients' rules, changed many entries): then its next write
// compares every entry, which costs no more, and no set grows with
// changes that are never written.
func (s *Slots) Clone() *Slots {
	n := &Slots{Rules: maps.Clone(s.Rules), Classes: maps.Clone(s.Classes), Baselines: maps.Clone(s.Baselines), Resv: maps.Clone(s.Resv)}
	if n.Baselines == nil {
		n.Baselines = map[int]BaseCounter{}
	}
	if s.base != 0 && s.changed.size() <= len(n.Rules)+len(n.Classes)+len(n.Resv)+len(n.Baselines) {
		n.base, n.changed = s.base, s.changed.clone()
	}
	return n
}

// Assign gives slots to new rules and classes of p (an expansion's) and
// ids to new reservation keys resv, and frees those of vanished ones.
// current reads the counter of a slot (for the baseline of a reused slot);
// it may be nil.
func (s *Slots) Assign(p *policy.Policy, resv []string, current func(slot int) BaseCounter) error {
	rules := make([]string, 0, len(p.Rules))
	var classes []string
	for _, r := range p.Rules {
		rules = append(rules, r.Name)
	}
	for _, c := range p.Classes {
		classes = append(classes, c.Name)
	}
	if s.Resv == nil {
		s.Resv = map[string]int{}
	}
	ch := s.changed // nil maps: not recorded
	s.handed = nil
	if err := allocate(s.Resv, resv, datapath.MaxReservations-1, "reservation id", ch.resv, nil); err != nil {
		return err
	}
	err := allocate(s.Rules, rules, datapath.MaxRules, "rule slot", ch.rules, func(slot int) {
		if ch.baselines != nil {
			ch.baselines[slot] = true
		}
		if current != nil {
			s.Baselines[slot] = current(slot)
		} else {
			delete(s.Baselines, slot)
		}
		s.handed = append(s.handed, slot)
	})
	if err != nil {
		return err
	}
	return allocate(s.Classes, classes, maxClasses, "class index", ch.classes, nil)
}

// Holds reports whether the table gives exactly p's rules and classes and
// the keys resv their numbers, each in range and once: then assign would
// change nothing (a rescan's sync needs no copy of the table).
func (s *Slots) Holds(p *policy.Policy, resv []string) bool {
	if len(s.Rules) != len(p.Rules) || len(s.Classes) != len(p.Classes) || len(s.Resv) != len(resv) {
		return false
	}
	return holdsAll(s.Rules, len(p.Rules), func(i int) string { return p.Rules[i].Name }, datapath.MaxRules) &&
		holdsAll(s.Classes, len(p.Classes), func(i int) string { return p.Classes[i].Name }, maxClasses) &&
		holdsAll(s.Resv, len(resv), func(i int) string { return resv[i] }, datapath.MaxReservations-1)
}

// holdsAll reports whether m gives each of the n names a number below
// limit that no other name has.
func holdsAll(m map[string]int, n int, name func(int) string, limit int) bool {
	used := make([]bool, limit)
	for i := 0; i < n; i++ {
		v, ok := m[name(i)]
		if !ok || v < 0 || v >= limit || used[v] {
			return false
		}
		used[v] = true
	}
	return true
}

// View is the table as the derive reads it (shared, not copied).
func (s *Slots) View() derive.Slots {
	return derive.Slots{Rules: s.Rules, Classes: s.Classes, Resv: s.Resv}
}

// StampHandover records gen, the policy generation the datapath has now
// that the last assign's policy is pushed, as the one from which the
// slots it handed out are their new owners'.
func (s *Slots) StampHandover(gen uint32) {
	for _, slot := range s.handed {
		b := s.Baselines[slot]
		b.Gen = gen
		s.Baselines[slot] = b
		if s.changed.baselines != nil {
			s.changed.baselines[slot] = true
		}
	}
	s.handed = nil
}

// ForgetHandoversAfter drops every handover generation when one is beyond
// gen, the datapath's: such a datapath was made anew (a reboot, hostqos
// down), its flow table holds no flow of an earlier owner of any slot, and
// its generations start again from zero. It reports whether it did.
func (s *Slots) ForgetHandoversAfter(gen uint32) bool {
	stale := false
	for _, b := range s.Baselines {
		stale = stale || b.Gen > gen
	}
	if !stale {
		return false
	}
	for slot, b := range s.Baselines {
		if b.Gen != 0 {
			b.Gen = 0
			s.Baselines[slot] = b
			if s.changed.baselines != nil {
				s.changed.baselines[slot] = true
			}
		}
	}
	return true
}

// allocate keeps the numbers of the names that stay, frees those of names
// gone, and gives each new name the lowest free number below limit that
// this call did not free, or, when only those are left, the lowest of
// them. A number is never handed from one name to another in one change
// unless it must: what the kernel holds under it (a rule slot's policer,
// download limit and counters) is written before the new policy takes
// over from the old one, whose flows still use the number meanwhile. The
// names it adds or removes are set in changed (if not nil).
func allocate(m map[string]int, names []string, limit int, what string, changed map[string]bool, assigned func(int)) error {
	// Numbers in use by the names that stay; a name of m not among names
	// (found < len(m)) is gone and frees its number.
	used := make([]bool, limit)
	found := 0
	for _, n := range names {
		if v, ok := m[n]; ok && v >= 0 && v < limit && !used[v] { // a name given twice counts once
			used[v] = true
			found++
		}
	}
	var freed []bool // numbers this call freed
	if found < len(m) {
		keep := make(map[string]bool, len(names))
		for _, n := range names {
			keep[n] = true
		}
		freed = make([]bool, limit)
		for n, v := range m {
			if !keep[n] {
				delete(m, n)
				if v >= 0 && v < limit && !used[v] {
					freed[v] = true
				}
				if changed != nil {
					changed[n] = true
				}
			}
		}
	}
	next, again := 0, 0 // the lowest candidates: not freed now, and any
	for _, n := range names {
		if _, ok := m[n]; ok {
			continue
		}
		for next < limit && (used[next] || freed != nil && freed[next]) {
			next++
		}
		v := next
		if v >= limit {
			for again < limit && used[again] {
				again++
			}
			v = again
		}
		if v >= limit {
			return fmt.Errorf("assign %s for %q: all %d in use", what, n, limit)
		}
		m[n] = v
		used[v] = true
		if changed != nil {
			changed[n] = true
		}
		if assigned != nil {
			assigned(v)
		}
	}
	return nil
}

// stateVersion is the format of the state files this daemon writes; it
// reads version 1 too (whose sections were files of their own, see
// Legacy).
const stateVersion = 2

// Persisted is the content of one state file.
type Persisted struct {
	Version int      `json:"version"`
	Overlay *Overlay `json:"overlay"`
	Slots   *Slots   `json:"slots,omitempty"`
	// Keys are the idempotency keys of the changes this file holds: a
	// change and its key are written in the same atomic write (see
	// idempotency.go).
	Keys Keys `json:"idempotency_keys,omitempty"`
	// Journal is the epoch of the journal records that continue this
	// snapshot (see journal.go); 0: none.
	Journal uint64 `json:"journal,omitempty"`
	// The sections (sections.go).
	Shield     *Shield                `json:"shield,omitempty"`
	Quota      map[string]*QuotaUsage `json:"quota,omitempty"`
	RTChannels map[uint64]*RTChannel  `json:"rtchannels,omitempty"`
	Pods       map[string]*Pod        `json:"k8s_pods,omitempty"`
	// Warnings are what reading it found and set aside (a legacy file
	// that could not be read), for the log.
	Warnings []string `json:"-"`
}

// Read reads a state file: its snapshot with its journal laid over it; a
// missing file is an empty state.
func Read(path string) (*Persisted, error) {
	p, _, _, _, err := readStateJournal(path)
	return p, err
}

// ReadState reads a state file and its journal; a missing file is an
// empty state.
func ReadState(path string) (*Overlay, *Slots, error) {
	p, _, _, _, err := readStateJournal(path)
	if err != nil {
		return nil, nil, err
	}
	return p.Overlay, p.Slots, nil
}

// readSnapshot reads a state file (its snapshot, not its journal) and checks it: its version, and
// slot numbers within their ranges. A missing file is an empty state.
func readSnapshot(path string) (*Persisted, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return &Persisted{Overlay: NewOverlay()}, nil // version 0: no file yet
	}
	if err != nil {
		return nil, fmt.Errorf("read state %s: %w", path, err)
	}
	const fix = "move it away to start from the config file alone"
	var head struct {
		Version *int `json:"version"`
	}
	if err := json.Unmarshal(data, &head); err != nil {
		return nil, fmt.Errorf("parse state %s: %w (%s)", path, describeStateError(err), fix)
	}
	if head.Version == nil || *head.Version < 1 || *head.Version > stateVersion {
		v := "no version"
		if head.Version != nil {
			v = fmt.Sprintf("version %d", *head.Version)
		}
		return nil, fmt.Errorf("read state %s: %s; this hostqosd reads versions 1 to %d (written by a later hostqos release?); %s, or run the hostqosd that wrote it", path, v, stateVersion, fix)
	}
	p := Persisted{Overlay: NewOverlay()} // maps the file leaves out stay empty
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return nil, fmt.Errorf("parse state %s: %w (%s)", path, describeStateError(err), fix)
	}
	if p.Overlay == nil {
		p.Overlay = NewOverlay()
	}
	if p.Shield != nil {
		p.shield()
	}
	if p.Slots != nil {
		if err := p.Slots.check(); err != nil {
			return nil, fmt.Errorf("read state %s: %w; %s (counters restart from zero)", path, err, fix)
		}
	}
	if err := p.Keys.check(); err != nil {
		return nil, fmt.Errorf("read state %s: %w; %s", path, err, fix)
	}
	return &p, nil
}

// describeStateError names the field of a JSON type error by its path in
// the file instead of Go types.
func describeStateError(err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return fmt.Errorf("field %s: wrong kind of value (%s)", te.Field, te.Value)
	}
	return err
}

// check reports slot numbers out of range or shared, printing them whole.
func (s *Slots) check() error {
	for _, t := range []struct {
		what  string
		m     map[string]int
		limit int
	}{{"rule slot", s.Rules, datapath.MaxRules}, {"class index", s.Classes, maxClasses}, {"reservation id", s.Resv, datapath.MaxReservations - 1}} {
		owner := map[int]string{}
		for _, name := range SortedKeys(t.m) {
			v := t.m[name]
			if v < 0 || v >= t.limit {
				return fmt.Errorf("%s %d of %q out of range 0..%d", t.what, v, policy.Clip(name), t.limit-1)
			}
			if o, dup := owner[v]; dup {
				return fmt.Errorf("%s %d given to both %q and %q", t.what, v, policy.Clip(o), policy.Clip(name))
			}
			owner[v] = name
		}
	}
	for slot := range s.Baselines {
		if slot < 0 || slot >= datapath.MaxRules {
			return fmt.Errorf("counter baseline of rule slot %d out of range 0..%d", slot, datapath.MaxRules-1)
		}
	}
	return nil
}

// WriteState replaces a state file atomically, continued by no journal
// (see writeStateEpoch).
func WriteState(path string, st State) error {
	return writeStateEpoch(path, st, 0)
}

// writeStateEpoch replaces a state file atomically: write a temporary file
// in the same directory, fsync it, rename it over the old one, fsync the
// dir. epoch names the journal records that continue it (0: none).
func writeStateEpoch(path string, st State, epoch uint64) error {
	data, err := json.Marshal(Persisted{Version: stateVersion, Overlay: st.Overlay, Slots: st.Slots, Keys: st.Keys, Journal: epoch,
		Shield: st.Shield, Quota: st.Quota, RTChannels: st.RT, Pods: st.Pods})
	if err != nil {
		return fmt.Errorf("encode state: %w", err)
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create state dir %s: %w", dir, err)
	}
	f, err := os.CreateTemp(dir, ".state-*")
	if err != nil {
		return fmt.Errorf("write state %s: %w", path, err)
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	if _, err := f.Write(append(data, '\n')); err != nil {
		f.Close()
		return fmt.Errorf("write state %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("sync state %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write state %s: %w", path, err)
	}
	if err := os.Chmod(tmp, 0o644); err != nil {
		return fmt.Errorf("write state %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("replace state %s: %w", path, err)
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}
