package engine

import (
	"testing"

	"github.com/hostqos/hostqos/internal/policy"
	"github.com/hostqos/hostqos/internal/shaper"
)

// ackLeaf returns the ACK leaf of rule slot in a link's plan.
func ackLeaf(p shaper.Plan, slot uint16) (shaper.HTBClass, bool) {
	for _, c := range p.Classes {
		if c.Minor == shaper.AckBase+slot {
			return c, true
		}
	}
	return shaper.HTBClass{}, false
}

// TestDownloadLimitAckLeaves: a rule with a download limit gets an ACK
// leaf on every managed link at the rate its limit needs (a link without
// an egress rate gets a pass-through tree for it), and its datapath rule
// names the leaf; rule set changes the leaf's rate live, and without a
// download limit the link is left unshaped again.
func TestDownloadLimitAckLeaves(t *testing.T) {
	env := newEnv(t, "")
	e := env.start(t)
	if err := e.SetLink(ctx, root, "eth0", policy.Link{}, LinkChange{}); err != nil {
		t.Fatal(err)
	}
	if _, ok := env.k.Trees[2]; ok {
		t.Fatal("a link without egress rate is shaped before any download limit")
	}
	r := rule("dl")
	r.MaxBWIn = 10e6
	if _, err := e.AddRule(ctx, root, r, false); err != nil {
		t.Fatal(err)
	}
	slot := uint16(e.slots.Rules["dl"])
	if got := env.k.Rules.Rules[0].AckClassID; got != shaper.AckClassID(slot) {
		t.Errorf("datapath rule's ACK class %#x, want %#x", got, shaper.AckClassID(slot))
	}
	tree, ok := env.k.Trees[2]
	if !ok {
		t.Fatal("link eth0 (no egress rate) has no HTB tree for the ACK leaf")
	}
	if tree.Link.Rate != shaper.PassRate {
		t.Errorf("pass-through root at %d bit/s, want %d", tree.Link.Rate, shaper.PassRate)
	}
	leaf, ok := ackLeaf(tree, slot)
	if want := shaper.AckRate(10e6); !ok || leaf.Rate != want || leaf.Ceil != want || !leaf.Leaf {
		t.Errorf("ACK leaf %+v (found %v), want a leaf at rate = ceil = %d", leaf, ok, want)
	}

	if _, err := e.SetRule(ctx, root, "dl", []byte(`{"maxbw_in":"1mbit"}`), false); err != nil {
		t.Fatal(err)
	}
	if leaf, _ := ackLeaf(env.k.Trees[2], slot); leaf.Rate != shaper.AckRate(1e6) {
		t.Errorf("after rule set: ACK leaf at %d bit/s, want %d", leaf.Rate, shaper.AckRate(1e6))
	}

	// A link with an egress rate keeps its tree and gets the leaf too.
	if err := e.SetLink(ctx, root, "eth0", policy.Link{EgressRate: 100e6}, LinkChange{}); err != nil {
		t.Fatal(err)
	}
	tree = env.k.Trees[2]
	if _, ok := ackLeaf(tree, slot); !ok || tree.Link.Rate != 100e6 {
		t.Errorf("shaped link: root %d bit/s, ACK leaf found %v; want 100 Mbit/s and the leaf", tree.Link.Rate, ok)
	}

	// No download limit left: no leaf, and the unshaped link no tree.
	if err := e.SetLink(ctx, root, "eth0", policy.Link{}, LinkChange{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.SetRule(ctx, root, "dl", []byte(`{"maxbw_in":"0"}`), false); err != nil {
		t.Fatal(err)
	}
	if tree, ok := env.k.Trees[2]; ok {
		t.Errorf("link without egress rate and download limits still shaped: %+v", tree)
	}
	if got := env.k.Rules.Rules[0].AckClassID; got != 0 {
		t.Errorf("rule without a download limit names ACK class %#x", got)
	}
}
