package policy

import (
	"errors"
	"strings"
	"testing"
)

func TestMutations(t *testing.T) {
	p := basePolicy()
	before, _ := p.MarshalTOML()

	r := NewRule("ssh")
	r.Proto, r.RPort, r.Class = "tcp", PortRange{22, 22}, "interactive"
	q, err := p.AddRule(r)
	if err != nil || len(q.Rules) != 2 || len(p.Rules) != 1 {
		t.Fatalf("AddRule: %v (%d, %d rules)", err, len(q.Rules), len(p.Rules))
	}
	if err := q.Validate("api"); err != nil {
		t.Fatal(err)
	}
	if _, err := q.AddRule(r); !errors.Is(err, ErrExists) || !strings.Contains(err.Error(), `rule "ssh" already exists`) {
		t.Errorf("duplicate AddRule: %v", err)
	}
	q2, err := q.SetRule("ssh", func(r *Rule) { r.MaxBW = 1e6 })
	if err != nil || q2.Rules[1].MaxBW != 1e6 || q.Rules[1].MaxBW != 0 {
		t.Errorf("SetRule: %v", err)
	}
	if _, err := q.SetRule("x", func(*Rule) {}); !errors.Is(err, ErrNotFound) || err.Error() != `rule "x" not found; see hostqos rule list` {
		t.Errorf("SetRule unknown: %v", err)
	}
	q3, err := q.RemoveRule("web")
	if err != nil || len(q3.Rules) != 1 || q3.Rules[0].Name != "ssh" || len(q.Rules) != 2 {
		t.Errorf("RemoveRule: %v", err)
	}
	if _, err := q.RemoveRule("web2"); !errors.Is(err, ErrNotFound) {
		t.Errorf("RemoveRule unknown: %v", err)
	}

	// Classes.
	c, err := p.AddClass(Class{Name: "gold", DSCP: NoDSCP, Priority: NoPriority, MinBW: 1e6})
	if err != nil {
		t.Fatal(err)
	}
	if g, _ := c.Class("gold"); g.DSCP != 0 || g.Priority != 2 {
		t.Errorf("AddClass defaults: %+v", g)
	}
	if _, err := c.AddClass(Class{Name: "gold"}); !errors.Is(err, ErrExists) {
		t.Errorf("duplicate AddClass: %v", err)
	}
	c2, err := c.SetClass("gold", func(c *Class) { c.Priority = 3 })
	if g, _ := c2.Class("gold"); err != nil || g.Priority != 3 {
		t.Errorf("SetClass: %v %+v", err, g)
	}
	if _, err := c.SetClass("silver", func(*Class) {}); !errors.Is(err, ErrNotFound) {
		t.Errorf("SetClass unknown: %v", err)
	}
	if _, err := c.RemoveClass("default"); err == nil || !strings.Contains(err.Error(), "class default cannot be removed") {
		t.Errorf("RemoveClass default: %v", err)
	}
	if _, err := c.RemoveClass("bulk"); err == nil || !strings.Contains(err.Error(), "in use by rule web") {
		t.Errorf("RemoveClass in use: %v", err)
	}
	if c3, err := c.RemoveClass("gold"); err != nil || len(c3.Classes) != len(p.Classes) {
		t.Errorf("RemoveClass: %v", err)
	}
	if _, err := c.RemoveClass("silver"); !errors.Is(err, ErrNotFound) {
		t.Errorf("RemoveClass unknown: %v", err)
	}

	// Links: SetLink upserts.
	l, err := p.SetLink("eth1", func(l *Link) { l.EgressRate = 1e9 })
	if err != nil || len(l.Links) != 2 || l.Links[1] != (Link{Name: "eth1", EgressRate: 1e9}) {
		t.Errorf("SetLink insert: %v %+v", err, l.Links)
	}
	l, err = l.SetLink("veth0", func(l *Link) { l.Reservable = 0.5 })
	if err != nil || len(l.Links) != 2 || l.Links[0].Reservable != 0.5 || p.Links[0].Reservable != 0 {
		t.Errorf("SetLink update: %v %+v", err, l.Links)
	}
	if _, err := l.AddLink(Link{Name: "eth1"}); !errors.Is(err, ErrExists) {
		t.Errorf("duplicate AddLink: %v", err)
	}
	if l2, err := l.RemoveLink("eth1"); err != nil || len(l2.Links) != 1 {
		t.Errorf("RemoveLink: %v", err)
	}
	if _, err := l.RemoveLink("eth9"); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "see hostqos link list") {
		t.Errorf("RemoveLink unknown: %v", err)
	}

	after, _ := p.MarshalTOML()
	if string(before) != string(after) {
		t.Error("a mutation changed the original policy")
	}
}
