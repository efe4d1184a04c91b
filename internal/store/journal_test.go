package store

import (
	"encoding/json"
	"testing"
)

// TestJournalOverSparseSnapshot replays records over a snapshot whose
// slot table left out its empty maps (a daemon restarted after a rule
// add whose slot had a baseline panicked here).
func TestJournalOverSparseSnapshot(t *testing.T) {
	p := &Persisted{Overlay: NewOverlay(), Slots: &Slots{}}
	r := Record{Ops: []Op{
		{Kind: KindBaseline, Name: "3", Value: json.RawMessage(`{"packets":1,"bytes":2,"drops":0}`)},
		{Kind: KindSlotRule, Name: "r", Value: json.RawMessage(`3`)},
		{Kind: KindSlotClass, Name: "bulk", Value: json.RawMessage(`1`)},
		{Kind: KindSlotResv, Name: "resv:x", Value: json.RawMessage(`0`)},
	}}
	if err := p.apply(r); err != nil {
		t.Fatal(err)
	}
	if p.Slots.Baselines[3].Bytes != 2 || p.Slots.Rules["r"] != 3 || p.Slots.Classes["bulk"] != 1 || p.Slots.Resv["resv:x"] != 0 {
		t.Errorf("slots after replay: %+v", p.Slots)
	}
}
