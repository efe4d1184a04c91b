package engine

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
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
	journal := string(readFile(t, journalPath(env.cfg.StatePath)))
	// y, z, y removed, cfg hidden, the temporary rule's slot (the rule
	// itself goes to the runtime file).
	if n := strings.Count(journal, "\n"); n != 5 {
		t.Errorf("journal has %d records, want 5:\n%s", n, journal)
	}
	wantSlots, wantRules := e.slots.Rules, ruleNames(t, e, root)

	// A crash: the engine is not stopped; a record was being appended.
	f, err := os.OpenFile(journalPath(env.cfg.StatePath), os.O_APPEND|os.O_WRONLY, 0)
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
	if b := readFile(t, journalPath(env.cfg.StatePath)); len(b) != 0 {
		t.Errorf("journal after start: %q, want it folded into the snapshot", b)
	}

	// A compaction cut short: the new snapshot is written, the old
	// journal is still there; its records are not replayed over it.
	if _, err := e2.AddRule(ctx, root, rule("d"), false); err != nil {
		t.Fatal(err)
	}
	old := readFile(t, journalPath(env.cfg.StatePath))
	e2.mu.Lock()
	persist, slots, keys := e2.persist.clone(), e2.slots, e2.keysPersist
	e2.mu.Unlock()
	delete(persist.Rules, "d")
	if _, err := writeSnapshot(env.cfg.StatePath, persist, slots, keys, 12345); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(journalPath(env.cfg.StatePath), old, 0o644); err != nil {
		t.Fatal(err)
	}
	if p, _, _, _, err := readStateJournal(env.cfg.StatePath); err != nil {
		t.Fatal(err)
	} else if _, ok := p.Overlay.Rules["d"]; ok {
		t.Error("a journal of an older snapshot was replayed")
	}

	// A damaged record before the last one.
	lines := strings.SplitAfter(journal, "\n")
	bad := lines[0][:12] + "X" + lines[0][13:] + lines[1]
	if err := os.WriteFile(journalPath(env.cfg.StatePath), []byte(bad), 0o644); err != nil {
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
	e.stPersist.records = journalMaxRecords
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
	if b := readFile(t, journalPath(env.cfg.StatePath)); len(b) != 0 {
		t.Errorf("journal after compaction: %q", b)
	}
	p, _, _, _, err := readStateJournal(env.cfg.StatePath)
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Overlay.Rules["second"]; got == nil || got.Class != "voice" {
		t.Errorf("rule second after compaction: %+v", got)
	}
}

// TestJournalOverSparseSnapshot replays records over a snapshot whose
// slot table left out its empty maps (a daemon restarted after a rule
// add whose slot had a baseline panicked here).
func TestJournalOverSparseSnapshot(t *testing.T) {
	p := &persisted{Overlay: newOverlay(), Slots: &slotTable{}}
	r := journalRecord{Ops: []journalOp{
		{Kind: jBaseline, Name: "3", Value: json.RawMessage(`{"packets":1,"bytes":2,"drops":0}`)},
		{Kind: jSlotRule, Name: "r", Value: json.RawMessage(`3`)},
		{Kind: jSlotClass, Name: "bulk", Value: json.RawMessage(`1`)},
		{Kind: jSlotResv, Name: "resv:x", Value: json.RawMessage(`0`)},
	}}
	if err := p.apply(r); err != nil {
		t.Fatal(err)
	}
	if p.Slots.Baselines[3].Bytes != 2 || p.Slots.Rules["r"] != 3 || p.Slots.Classes["bulk"] != 1 || p.Slots.Resv["resv:x"] != 0 {
		t.Errorf("slots after replay: %+v", p.Slots)
	}
}
