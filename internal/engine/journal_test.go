package engine

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/hostqos/hostqos/internal/store"

	"github.com/hostqos/hostqos/internal/datapath"
	"github.com/hostqos/hostqos/internal/policy"
)

// TestJournalSurvivesCrash: changes are persisted as journal records
// (the snapshot is not rewritten per change); an engine started over the
// files of one that was never stopped (a crash) has every acknowledged
// change — adds, a removal, a tombstone over a config rule, a slot, an
// idempotency key and its answer — and folds the journal into a new
// snapshot at start. A record cut short by the crash is dropped; a
// damaged record before the last is an error naming the journal.
func TestJournalSurvivesCrash(t *testing.T) {
	env := newEnv(t, shapedConfig+"\n[[rule]]\nname = \"cfg\"\nproto = \"tcp\"\n")
	e := env.start(t)
	for _, n := range []string{"x", "y", "z"} {
		if _, err := e.AddRule(ctx, root, rule(n), false); err != nil {
			t.Fatal(err)
		}
	}
	snap := readFile(t, env.cfg.StatePath)
	const key = "journal-key-0123456789"
	kctx, pk := WithPendingKey(ctx, key, "fp")
	if err := e.RemoveRule(kctx, root, "y"); err != nil {
		t.Fatal(err)
	}
	e.RecordAnswer(pk, 204, []byte(`{"ok":true}`))
	if err := e.RemoveRule(ctx, root, "cfg"); err != nil { // a tombstone
		t.Fatal(err)
	}
	if _, err := e.AddRule(ctx, root, rule("tmp"), true); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, env.cfg.StatePath); string(got) != string(snap) {
		t.Error("a change rewrote the snapshot; want a journal record")
	}
	journal := string(readFile(t, store.JournalPath(env.cfg.StatePath)))
	// y, z, y removed, cfg hidden, the temporary rule's slot (the rule
	// itself goes to the runtime file).
	if n := strings.Count(journal, "\n"); n != 5 {
		t.Errorf("journal has %d records, want 5:\n%s", n, journal)
	}
	wantSlots, wantRules := e.slots.Rules, ruleNames(t, e, root)

	// A crash: the engine is not stopped; a record was being appended.
	f, err := os.OpenFile(store.JournalPath(env.cfg.StatePath), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(`0badc0de {"epoch":1,"ops":[{"k":"rules","n":"ghost","v":{"na`)
	f.Close()
	e2 := env.start(t)
	if got := ruleNames(t, e2, root); got != wantRules || strings.Contains(got, "cfg") || strings.Contains(got, "y:") {
		t.Errorf("rules after the crash: %s, want %s", got, wantRules)
	}
	if ent, ok := e2.LookupKey(key); !ok || ent.Status != 204 {
		t.Errorf("key after the crash: %+v %v, want its answer (204)", ent, ok)
	}
	e2.mu.Lock()
	for _, n := range []string{"x", "z"} {
		if e2.slots.Rules[n] != wantSlots[n] {
			t.Errorf("slot of %s: %d, want %d", n, e2.slots.Rules[n], wantSlots[n])
		}
	}
	e2.mu.Unlock()
	if b := readFile(t, store.JournalPath(env.cfg.StatePath)); len(b) != 0 {
		t.Errorf("journal after start: %q, want it folded into the snapshot", b)
	}

	// A compaction cut short: the new snapshot is written, the old
	// journal is still there; its records are not replayed over it.
	if _, err := e2.AddRule(ctx, root, rule("d"), false); err != nil {
		t.Fatal(err)
	}
	old := readFile(t, store.JournalPath(env.cfg.StatePath))
	e2.mu.Lock()
	persist, slots, keys := e2.persist.Clone(), e2.slots, e2.keysPersist
	e2.mu.Unlock()
	delete(persist.Rules, "d")
	if _, err := store.WriteSnapshot(env.cfg.StatePath, store.State{Overlay: persist, Slots: slots, Keys: keys}, 12345); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(store.JournalPath(env.cfg.StatePath), old, 0o644); err != nil {
		t.Fatal(err)
	}
	if p, err := store.Read(env.cfg.StatePath); err != nil {
		t.Fatal(err)
	} else if _, ok := p.Overlay.Rules["d"]; ok {
		t.Error("a journal of an older snapshot was replayed")
	}

	// A damaged record before the last one.
	lines := strings.SplitAfter(journal, "\n")
	bad := lines[0][:12] + "X" + lines[0][13:] + lines[1]
	if err := os.WriteFile(store.JournalPath(env.cfg.StatePath), []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(env.cfg.StatePath, snap, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := New(env.cfg); err == nil || !strings.Contains(err.Error(), "state.json.journal: record 1: checksum mismatch") {
		t.Errorf("damaged record: %v", err)
	}
}

// TestJournalCompacts: a journal past its bound is folded into a new
// snapshot by the next change.
func TestJournalCompacts(t *testing.T) {
	env := newEnv(t, shapedConfig)
	e := env.start(t)
	if _, err := e.AddRule(ctx, root, rule("first"), false); err != nil { // writes the snapshot
		t.Fatal(err)
	}
	e.mu.Lock()
	e.stPersist.CompactNext()
	e.mu.Unlock()
	before := readFile(t, env.cfg.StatePath)
	r := rule("second")
	r.Class = "voice"
	if _, err := e.AddRule(ctx, root, r, false); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, env.cfg.StatePath); string(got) == string(before) || !strings.Contains(string(got), `"second"`) {
		t.Error("the change past the bound did not write a new snapshot")
	}
	if b := readFile(t, store.JournalPath(env.cfg.StatePath)); len(b) != 0 {
		t.Errorf("journal after compaction: %q", b)
	}
	p, err := store.Read(env.cfg.StatePath)
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Overlay.Rules["second"]; got == nil || got.Class != "voice" {
		t.Errorf("rule second after compaction: %+v", got)
	}
}

// TestJournalRecordOfOneRule: over a config of 10,000
// rules, adding, then removing a rule journals only that rule, its slot
// and its slot's baseline (the slot table is not diffed whole), and an
// engine started over the files (a crash) has the same slots and rules.
func TestJournalRecordOfOneRule(t *testing.T) {
	env := newEnv(t, scaleConfig(1, 10_000))
	env.k.Ifindexes["link0"] = 10
	e := env.start(t)
	// The first change also records the slots the start gave the config's
	// rules; the next ones are a clone of what the file holds.
	if _, err := e.AddRule(ctx, root, rule("first"), false); err != nil {
		t.Fatal(err)
	}
	lastRecord := func() store.Record {
		t.Helper()
		lines := strings.Split(strings.TrimSpace(string(readFile(t, store.JournalPath(env.cfg.StatePath)))), "\n")
		r, err := store.DecodeRecord([]byte(lines[len(lines)-1]))
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	kinds := func(r store.Record) string {
		var out []string
		for _, op := range r.Ops {
			out = append(out, op.Kind+":"+op.Name)
		}
		slices.Sort(out)
		return strings.Join(out, " ")
	}
	if _, err := e.AddRule(ctx, root, rule("second"), false); err != nil {
		t.Fatal(err)
	}
	if e.stPersist.Slots() != e.slots {
		t.Error("the state file's slot table is not the engine's: every change would diff all 10,000 slots")
	}
	slot := e.slots.Rules["second"]
	want := fmt.Sprintf("%s:%d %s:second %s:second", store.KindBaseline, slot, store.KindRules, store.KindSlotRule)
	if got := kinds(lastRecord()); got != want {
		t.Errorf("record of a rule added to 10,000: %s, want %s", got, want)
	}
	if err := e.RemoveRule(ctx, root, "first"); err != nil {
		t.Fatal(err)
	}
	if got, want := kinds(lastRecord()), fmt.Sprintf("%s:first %s:first", store.KindRules, store.KindSlotRule); got != want {
		t.Errorf("record of a rule removed: %s, want %s", got, want)
	}
	wantSlots := maps.Clone(e.slots.Rules)
	e2 := env.start(t)
	if !maps.Equal(e2.slots.Rules, wantSlots) {
		t.Error("slots after a restart differ from before")
	}
	if _, ok := e2.slots.Rules["second"]; !ok || len(e2.slots.Rules) != 10_001 {
		t.Errorf("%d slots after a restart, want 10,001 with second's", len(e2.slots.Rules))
	}
}

// TestJournalSlotsAfterRandomChanges: after random additions and removals
// of rules and classes (slots freed and reused, with counters, so
// baselines change), an engine started over the files has exactly the
// running engine's slot table: the records of only the changed entries
// lose nothing.
func TestJournalSlotsAfterRandomChanges(t *testing.T) {
	env := newEnv(t, shapedConfig)
	e := env.start(t)
	rng := rand.New(rand.NewPCG(5, 6))
	var rules, classes []string
	for i := 0; i < 300; i++ {
		env.k.Lock()
		env.k.Counters = make([]datapath.Counters, 64)
		for j := range env.k.Counters {
			env.k.Counters[j].Packets = uint64(i*100 + j)
		}
		env.k.Unlock()
		var err error
		switch op := rng.IntN(4); {
		case op == 0 && len(rules) > 0:
			j := rng.IntN(len(rules))
			err = e.RemoveRule(ctx, root, rules[j])
			rules = slices.Delete(rules, j, j+1)
		case op == 1 && len(classes) > 0:
			j := rng.IntN(len(classes))
			err = e.RemoveClass(ctx, root, classes[j])
			classes = slices.Delete(classes, j, j+1)
		case op == 2 && len(classes) < 20:
			c := policy.NewClass(fmt.Sprintf("c%d", i))
			_, err = e.AddClass(ctx, root, c, false)
			classes = append(classes, c.Name)
		default:
			_, err = e.AddRule(ctx, root, rule(fmt.Sprintf("r%d", i)), rng.IntN(5) == 0)
			rules = append(rules, fmt.Sprintf("r%d", i))
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	want := e.slots
	e2 := env.start(t)
	got := e2.slots
	if !maps.Equal(got.Rules, want.Rules) || !maps.Equal(got.Classes, want.Classes) || !maps.Equal(got.Resv, want.Resv) {
		t.Errorf("slots after a restart:\n%v %v\nwant\n%v %v", got.Rules, got.Classes, want.Rules, want.Classes)
	}
	for slot, b := range want.Baselines {
		if got.Baselines[slot] != b {
			t.Errorf("baseline of slot %d after a restart: %+v, want %+v", slot, got.Baselines[slot], b)
		}
	}
}

// TestJournalRecordsSlotsOfApplyWithoutWrite: slots handed out by an
// apply that writes no state file (the start gives a rule new in the
// config file its slot) are in the next change's record, which holds only
// the entries changed since what the file holds; a restart finds them.
func TestJournalRecordsSlotsOfApplyWithoutWrite(t *testing.T) {
	env := newEnv(t, shapedConfig)
	e := env.start(t)
	if _, err := e.AddRule(ctx, root, rule("x"), false); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(env.cfg.ConfigPath, []byte(shapedConfig+"\n[[rule]]\nname = \"b\"\nproto = \"tcp\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	e2 := env.start(t)
	e2.mu.Lock() // a repair (Rescan): one more apply without a write
	e2.pushed.forget()
	err := e2.syncLocked("rescan", syncChange{})
	e2.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e2.AddRule(ctx, root, rule("y"), false); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(readFile(t, store.JournalPath(env.cfg.StatePath)))), "\n")
	r, err := store.DecodeRecord([]byte(lines[len(lines)-1]))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, op := range r.Ops {
		if op.Kind == store.KindSlotRule {
			got = append(got, op.Name)
		}
	}
	slices.Sort(got)
	if strings.Join(got, " ") != "b y" {
		t.Errorf("rule slots in the change's record: %v, want those of b (given by the start) and y", got)
	}
	want := maps.Clone(e2.slots.Rules)
	if e3 := env.start(t); !maps.Equal(e3.slots.Rules, want) {
		t.Errorf("rule slots after a restart: %v, want %v", e3.slots.Rules, want)
	}
}
