package engine

import (
	"context"
	"strings"
	"testing"

	"github.com/hostqos/hostqos/internal/datapath"
	"github.com/hostqos/hostqos/internal/policy"
	"github.com/hostqos/hostqos/internal/shaper"
)

// Per-session guarantees: a rule with max_sessions and per_session_minbw,
// and a reservation with them, give each session an HTB leaf of its own
// under the rule's class (guaranteed its share, so one greedy session
// cannot take the others'), and the datapath reservation names the first
// session leaf; traffic without a session keeps the class's general leaf.
func TestSessionLeaves(t *testing.T) {
	for _, n := range []int{shaper.MaxSessionLeaves, datapath.SessionLeaves} {
		if n != policy.MaxSessionLeaves {
			t.Fatalf("session leaf limits differ: policy %d, shaper and datapath %d", policy.MaxSessionLeaves, n)
		}
	}
	env := newEnv(t, resvConfig+`
[[rule]]
name = "calls"
proto = "tcp"
rport = "5060"
max_sessions = 3
per_session_minbw = "100kbit"
per_session_maxbw = "400kbit"
`)
	e := env.start(t)
	ctx := context.Background()
	g := testResv("g", policy.ServiceGuaranteed, 1_200_000)
	g.MaxSessions, g.PerSessionMinBW = 4, 200_000
	if _, err := e.AddReservation(ctx, root, g, false); err != nil {
		t.Fatal(err)
	}
	tree := env.k.Trees[2]
	classes := map[uint16]shaper.HTBClass{}
	for _, c := range tree.Classes {
		classes[c.Minor] = c
	}
	dp := env.k.Rules
	byID := map[uint16]datapath.Reservation{}
	for _, r := range dp.Reservations {
		byID[r.ID] = r
	}
	for _, tc := range []struct {
		key              string
		slotName         string
		n                int
		rate, ceil       uint64 // each session leaf's
		parent, parentCl uint64
	}{
		// 3 × 100kbit under the rule's class, each capped at 400kbit.
		{"rule:calls", "calls", 3, 100_000, 400_000, 300_000, 1_200_000},
		// R = 1.2mbit split in four (each ≥ 200kbit), ceiling R.
		{"resv:g", "resv:g", 4, 300_000, 1_200_000, 1_200_000, 1_200_000},
	} {
		id := uint16(e.slots.Resv[tc.key] + 1)
		rv := byID[id]
		if rv.SessionClassID != shaper.SessionClassID(id, 0) || rv.MaxSessions != uint32(tc.n) {
			t.Fatalf("%s: datapath reservation %+v, want session leaves from %x", tc.key, rv, shaper.SessionClassID(id, 0))
		}
		slot := uint16(e.slots.Rules[tc.slotName])
		parent, ok := classes[shaper.RuleLeafMinor(slot)]
		if !ok || parent.Leaf || parent.Rate != tc.parent || parent.Ceil != tc.parentCl {
			t.Fatalf("%s: rule class %+v, want an inner class at %d ceil %d", tc.key, parent, tc.parent, tc.parentCl)
		}
		for i := 0; i < tc.n; i++ {
			sl, ok := classes[shaper.SessionMinor(id, i)]
			if !ok || !sl.Leaf || sl.ParentMinor != parent.Minor || sl.Rate != tc.rate || sl.Ceil != tc.ceil {
				t.Fatalf("%s: session %d leaf %+v, want rate %d ceil %d under %x", tc.key, i, sl, tc.rate, tc.ceil, parent.Minor)
			}
		}
		if _, extra := classes[shaper.SessionMinor(id, tc.n)]; extra {
			t.Errorf("%s: a leaf for session %d of %d", tc.key, tc.n+1, tc.n)
		}
		for _, r := range dp.Rules {
			if r.Slot == slot && r.ClassID == shaper.RuleClassID(slot) {
				t.Errorf("%s: the rule's traffic without a session goes to the inner class %x", tc.key, r.ClassID)
			}
		}
	}
	// The guaranteed queue (⌈b/m⌉ packets) is every session leaf's.
	gid := uint16(e.slots.Resv["resv:g"] + 1)
	if q := classes[shaper.SessionMinor(gid, 0)].QueueLimit; q == 0 {
		t.Error("a guaranteed session leaf has no queue limit")
	}

	// Over the leaves: refused, naming the field and the limit.
	big := testResv("big", policy.ServiceControlledLoad, 1_000_000)
	big.RPort = policy.PortRange{From: 6001, To: 6001}
	big.MaxSessions, big.PerSessionMinBW = 33, 8000
	if _, err := e.AddReservation(ctx, root, big, false); err == nil || !containsAll(err.Error(), "max_sessions", "33", "≤ 32") {
		t.Fatalf("33 sessions with per-session bandwidth: %v", err)
	}
	// Without per-session bandwidth, max_sessions has no such bound and no leaves.
	big.PerSessionMinBW = 0
	big.MaxSessions = 1000
	if _, err := e.AddReservation(ctx, root, big, false); err != nil {
		t.Fatal(err)
	}
	id := uint16(e.slots.Resv["resv:big"] + 1)
	for _, r := range env.k.Rules.Reservations {
		if r.ID == id && r.SessionClassID != 0 {
			t.Errorf("a reservation without per-session bandwidth has session leaves: %+v", r)
		}
	}
}

// containsAll reports whether s holds every one of subs.
func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}
