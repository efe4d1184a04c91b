package engine

import (
	"strings"
	"testing"

	"github.com/hostqos/hostqos/internal/datapath"
	"github.com/hostqos/hostqos/internal/policy"
)

// TestLinkIngressRate: a link's ingress_rate reaches the datapath as the
// budget of its ifindex, every rule carries its class's priority (the
// level its downloads are charged to) and unmatched traffic the default
// class's; removing the rate removes the budget, a rescan keeps it, and an
// invalid rate is refused naming the field and changes nothing.
func TestLinkIngressRate(t *testing.T) {
	env := newEnv(t, "")
	e := env.start(t)
	r := rule("call")
	r.Class = "voice"
	if _, err := e.AddRule(ctx, root, r, false); err != nil {
		t.Fatal(err)
	}
	b := rule("dl")
	b.Class = "bulk"
	if _, err := e.AddRule(ctx, root, b, false); err != nil {
		t.Fatal(err)
	}
	if err := e.SetLink(ctx, root, "eth0", policy.Link{IngressRate: 95e6}, LinkChange{}); err != nil {
		t.Fatal(err)
	}
	got := env.k.Rules
	if len(got.LinksIn) != 1 || got.LinksIn[0] != (datapath.LinkIn{Ifindex: 2, Rate: 95e6}) {
		t.Errorf("datapath link budgets %+v, want ifindex 2 at 95 Mbit/s", got.LinksIn)
	}
	if got.InPrioNone != 2 {
		t.Errorf("level of unmatched traffic %d, want 2 (class default)", got.InPrioNone)
	}
	prio := map[string]uint8{"voice": 0, "bulk": 4}
	for i, dr := range got.Rules {
		want := prio["voice"]
		if i == 1 {
			want = prio["bulk"]
		}
		if dr.InPrio != want {
			t.Errorf("rule %d: ingress level %d, want %d", i, dr.InPrio, want)
		}
	}

	// A rescan (app selectors re-resolved) keeps the budget.
	e.Rescan()
	if len(env.k.Rules.LinksIn) != 1 {
		t.Errorf("a rescan dropped the link budget: %+v", env.k.Rules.LinksIn)
	}

	before := env.k.Rules
	err := e.SetLink(ctx, root, "eth0", policy.Link{IngressRate: 1000}, LinkChange{})
	if err == nil || !strings.Contains(err.Error(), "ingress_rate") {
		t.Errorf("ingress_rate 1000 bit/s: err %v, want the field named", err)
	}
	if len(env.k.Rules.LinksIn) != 1 || env.k.Rules.LinksIn[0] != before.LinksIn[0] {
		t.Errorf("a refused rate changed the datapath: %+v", env.k.Rules.LinksIn)
	}

	if err := e.SetLink(ctx, root, "eth0", policy.Link{}, LinkChange{}); err != nil {
		t.Fatal(err)
	}
	if len(env.k.Rules.LinksIn) != 0 {
		t.Errorf("link without ingress_rate keeps a budget: %+v", env.k.Rules.LinksIn)
	}
}
