package store

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/hostqos/hostqos/internal/policy"
)

func TestMergeLayers(t *testing.T) {
	base := &policy.Policy{
		Links:   []policy.Link{{Name: "eth0", EgressRate: 20e6}},
		Classes: policy.DefaultClasses(),
		Rules:   []policy.Rule{rule("a"), rule("b")},
	}
	persist, temp := NewOverlay(), NewOverlay()
	persist.Rules["b"] = nil // removed through the API
	c := rule("c")
	persist.Rules["c"] = &c
	a2 := rule("a")
	a2.Class = "voice"
	temp.Rules["a"] = &a2 // temporarily changed
	m := Merge(base, persist, temp)
	var names []string
	for _, r := range m.Policy.Rules {
		names = append(names, r.Name)
	}
	if len(names) != 2 || names[0] != "a" || names[1] != "c" {
		t.Fatalf("rules = %v, want [a c]", names)
	}
	if m.Policy.Rules[0].Class != "voice" || !m.Policy.Rules[0].Temporary {
		t.Fatalf("temporary overlay not applied: %+v", m.Policy.Rules[0])
	}
	if m.Sources["rule/a"] != SrcTemp || m.Sources["rule/c"] != SrcAPI || m.Sources["link/eth0"] != SrcConfig {
		t.Fatalf("sources = %v", m.Sources)
	}
}

func TestSlotsStableAndBaselined(t *testing.T) {
	s := NewSlots()
	p := &policy.Policy{Classes: policy.DefaultClasses(), Rules: []policy.Rule{rule("a"), rule("b")}}
	if err := s.Assign(p, nil, nil); err != nil {
		t.Fatal(err)
	}
	a, b := s.Rules["a"], s.Rules["b"]
	if a == b {
		t.Fatalf("slots collide: %d", a)
	}
	// Remove a and add c in one change: c gets a slot of its own, not
	// the one a's flows use until the new policy takes over.
	p.Rules = []policy.Rule{rule("b"), rule("c")}
	counter := func(slot int) BaseCounter { return BaseCounter{Packets: uint64(100 + slot)} }
	if err := s.Assign(p, nil, counter); err != nil {
		t.Fatal(err)
	}
	if s.Rules["b"] != b {
		t.Fatalf("b moved from %d to %d", b, s.Rules["b"])
	}
	if c := s.Rules["c"]; c == a || c == b {
		t.Fatalf("c got slot %d in the change that removed a (slot %d)", c, a)
	}
	// A later change reuses a's slot, with a baseline.
	p.Rules = append(p.Rules, rule("d"))
	if err := s.Assign(p, nil, counter); err != nil {
		t.Fatal(err)
	}
	if s.Rules["d"] != a || s.Baselines[a].Packets != uint64(100+a) {
		t.Fatalf("d = %d baseline %+v, want slot %d baselined", s.Rules["d"], s.Baselines[a], a)
	}
	// With every other number taken, a number freed by the change is
	// handed out again rather than refused.
	m := map[string]int{"x": 0, "y": 1}
	if err := allocate(m, []string{"y", "z"}, 2, "number", nil, nil); err != nil || m["z"] != 0 {
		t.Fatalf("allocate with only the freed number left: %v, z = %d", err, m["z"])
	}
	if len(s.Classes) != len(policy.DefaultClasses()) {
		t.Fatalf("classes = %v", s.Classes)
	}
}

func TestStateRoundTrip(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.json")
	ov := NewOverlay()
	r := rule("x")
	r.MaxBW = 10e6
	ov.Rules["x"] = &r
	ov.Rules["gone"] = nil
	slots := NewSlots()
	slots.Rules["x"] = 7
	if err := WriteState(path, State{Overlay: ov, Slots: slots}); err != nil {
		t.Fatal(err)
	}
	got, gs, err := ReadState(path)
	if err != nil {
		t.Fatal(err)
	}
	if got.Rules["x"] == nil || got.Rules["x"].MaxBW != 10e6 {
		t.Fatalf("rule x = %+v", got.Rules["x"])
	}
	if v, ok := got.Rules["gone"]; !ok || v != nil {
		t.Fatal("tombstone lost")
	}
	if gs.Rules["x"] != 7 {
		t.Fatalf("slots = %+v", gs)
	}
	if _, _, err := ReadState(filepath.Join(dir, "missing.json")); err != nil {
		t.Fatalf("missing state must be empty, got %v", err)
	}
}

func rule(name string) policy.Rule {
	return policy.Rule{Name: name, Proto: "udp", DSCP: policy.NoDSCP, DSCPIn: policy.NoDSCP}
}

// TestSlotChangesBounded: a slot table carries the entries changed since
// what the state file holds only while they are fewer than its own: a
// churn of rules that no state write records (the protected clients'
// rules change without one) grows nothing per change.
func TestSlotChangesBounded(t *testing.T) {
	s := NewSlots()
	(&File{}).Hold(s)
	p := &policy.Policy{Classes: policy.DefaultClasses()}
	for i := range 1000 {
		n := s.Clone()
		p.Rules = []policy.Rule{rule(fmt.Sprintf("prot:198.18.0.%d:%d", i%250, 1000+i))}
		if err := n.Assign(p, nil, nil); err != nil {
			t.Fatal(err)
		}
		s = n
	}
	if n := s.changed.size(); n > 2*(len(s.Rules)+len(s.Classes)) {
		t.Errorf("after 1,000 changes never written the table carries %d changed entries; it holds %d rules and %d classes", n, len(s.Rules), len(s.Classes))
	}
}
