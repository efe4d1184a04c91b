package policy

import (
	"errors"
	"strings"
	"testing"
)

func admPolicy() *Policy {
	p := DefaultPolicy()
	p.Links = []Link{{Name: "veth0", EgressRate: 20_000_000}}
	p.Classes[0].MinBW = 2_000_000 // voice
	up := NewRule("upload")
	up.Exe, up.Class, up.MinBW = "/usr/bin/rsync", "bulk", 14_000_000
	p.Rules = []Rule{up}
	return p
}

func TestAdmitExactCapacity(t *testing.T) {
	p := admPolicy() // 2 + 14 = 16mbit = 0.8 × 20mbit
	if err := p.Admit(""); err != nil {
		t.Fatalf("16mbit on 16mbit capacity: %v", err)
	}
	p.Rules[0].MinBW++ // one bit over
	err := p.Admit("")
	if err == nil {
		t.Fatal("one bit over capacity admitted")
	}
	if !strings.Contains(err.Error(), "guarantees 16.000001mbit exceed reservable capacity 16mbit") {
		t.Errorf("got %v", err)
	}
	// A refusal by admission says so (the API's class, the CLI's exit
	// code), and still gives its field errors.
	var ae *AdmissionError
	if !errors.As(err, &ae) || len(AsErrors(err)) != 1 {
		t.Errorf("refusal %T is not an admission error with its field errors", err)
	}
}

func TestAdmitMessage(t *testing.T) {
	p := admPolicy()
	p.Rules[0].MinBW = 16_000_000
	es := AsErrors(p.Admit(""))
	if len(es) != 1 {
		t.Fatalf("got %v", es)
	}
	want := `link "veth0": guarantees 18mbit exceed reservable capacity 16mbit (0.8 × 20mbit): rule upload 16mbit, class voice 2mbit; lower a minbw or raise egress_rate/reservable`
	if es[0].Error() != want {
		t.Errorf("got  %s\nwant %s", es[0].Error(), want)
	}
}

func TestAdmitReservableAndLinks(t *testing.T) {
	p := admPolicy()
	p.Rules[0].MinBW = 16_000_000 // 18mbit total
	p.Links[0].Reservable = 0.9   // 18mbit capacity
	if err := p.Admit(""); err != nil {
		t.Fatalf("18mbit on 0.9 × 20mbit: %v", err)
	}
	// A second, slower link: every guarantee counts on every shaped link.
	p.Links = append(p.Links, Link{Name: "eth1", EgressRate: 10_000_000, Reservable: 1})
	es := AsErrors(p.Admit(""))
	if len(es) != 1 || es[0].Object != `link "eth1"` || !strings.Contains(es[0].Reason, "capacity 10mbit (1 × 10mbit)") {
		t.Fatalf("got %v", es)
	}
	// Unshaped links are not checked.
	p.Links[1].EgressRate = 0
	if err := p.Admit(""); err != nil {
		t.Fatalf("unshaped link checked: %v", err)
	}
}

func TestAdmitIgnoresDropRules(t *testing.T) {
	p := admPolicy()
	r := NewRule("x")
	r.Comm, r.Action, r.MinBW = "x", ActionDrop, 100_000_000 // invalid, but admission must not count it
	p.Rules = append(p.Rules, r)
	if err := p.Admit(""); err != nil {
		t.Fatalf("drop rule counted: %v", err)
	}
}

func TestAdmitClassCeiling(t *testing.T) {
	p := DefaultPolicy()
	p.Classes[3].MinBW, p.Classes[3].MaxBW = 1_000_000, 4_000_000 // bulk
	a, b := NewRule("a"), NewRule("b")
	a.Comm, a.Class, a.MinBW = "a", "bulk", 2_000_000
	b.Comm, b.Class, b.MinBW = "b", "bulk", 1_000_000
	p.Rules = []Rule{a, b}
	if err := p.Admit(""); err != nil {
		t.Fatalf("4mbit in 4mbit ceiling: %v", err)
	}
	p.Rules[1].MinBW = 1_500_000
	es := AsErrors(p.Admit(""))
	want := `class "bulk": guarantees 4.5mbit exceed the class ceiling maxbw 4mbit: rule a 2mbit, rule b 1.5mbit, class bulk 1mbit; lower a minbw or raise the class's maxbw`
	if len(es) != 1 || es[0].Error() != want {
		t.Fatalf("got %v\nwant %s", es, want)
	}
}

func TestAdmitManyContributors(t *testing.T) {
	p := DefaultPolicy()
	p.Links = []Link{{Name: "veth0", EgressRate: 1_000_000, Reservable: 1}}
	for i := 0; i < 7; i++ {
		r := NewRule(string(rune('a' + i)))
		r.Comm, r.MinBW = r.Name, Rate(200_000+i*1000)
		p.Rules = append(p.Rules, r)
	}
	err := p.Admit("")
	if err == nil || !strings.Contains(err.Error(), "rule g 206kbit, rule f 205kbit") || !strings.Contains(err.Error(), "and 2 more (401kbit)") {
		t.Fatalf("got %v", err)
	}
}

func TestWarnings(t *testing.T) {
	p := DefaultPolicy()
	p.Classes[0].MinBW = 1_000_000
	r := NewRule("a")
	r.Comm, r.MinBW = "a", 1_000_000
	dup := r
	dup.Name, dup.MinBW = "b", 0
	p.Rules = []Rule{r, dup}
	ws := strings.Join(p.Warnings(), "\n")
	for _, want := range []string{
		`class "voice": minbw/maxbw are not enforced`,
		`rule "a": minbw 1mbit is not enforced`,
		`rule "b" never matches: rule "a" has the same selectors`,
	} {
		if !strings.Contains(ws, want) {
			t.Errorf("warnings lack %q:\n%s", want, ws)
		}
	}
	p.Links = []Link{{Name: "eth0", EgressRate: 10_000_000}}
	p.Classes[1].MaxBW = 20_000_000
	ws = strings.Join(p.Warnings(), "\n")
	if strings.Contains(ws, "not enforced") || !strings.Contains(ws, `class "interactive": maxbw 20mbit exceeds link "eth0" egress_rate 10mbit`) {
		t.Errorf("warnings with a shaped link:\n%s", ws)
	}
}

// TestAdmitNamesSource: admission errors say where the policy came from,
// like validation errors do.
func TestAdmitNamesSource(t *testing.T) {
	p := admPolicy()
	p.Rules[0].MinBW = 16_000_000
	p.Classes[3].MaxBW = 1_000_000 // bulk: its rule's guarantee exceeds the ceiling
	es := AsErrors(p.Admit("api"))
	if len(es) != 2 {
		t.Fatalf("got %v", es)
	}
	for _, e := range es {
		if e.Source != "api" || !strings.HasPrefix(e.Error(), "api: ") {
			t.Errorf("error without its source: %q (Source %q)", e.Error(), e.Source)
		}
	}
}

// TestAdmitSumsDoNotWrap: guarantees whose sum does not fit in 64 bits
// are refused, not wrapped below the capacity (two classes at 2⁶³−1 bit/s
// and one at 10 Mbit/s summed to 9.999998 Mbit/s and passed config
// check). A policy built in code is refused by Validate too; the config
// file's rates are refused when parsed.
func TestAdmitSumsDoNotWrap(t *testing.T) {
	const huge = Rate(1<<63 - 1)
	p := DefaultPolicy()
	p.Links = []Link{{Name: "eth0", EgressRate: 100_000_000}}
	p.Classes = append(p.Classes, Class{Name: "a", DSCP: 10, Priority: 3, MinBW: huge}, Class{Name: "b", DSCP: 12, Priority: 3, MinBW: huge},
		Class{Name: "c", DSCP: 14, Priority: 3, MinBW: 10_000_000})
	err := p.Admit("x.toml")
	if err == nil || !strings.Contains(err.Error(), "guarantees more than 18446744tbit exceed reservable capacity 80mbit") {
		t.Errorf("Admit: %v, want the saturated sum refused", err)
	}
	if err := p.Validate("x.toml"); err == nil || !strings.Contains(err.Error(), `class "a": field minbw = 9223372036854775807: above 10tbit`) {
		t.Errorf("Validate: %v, want minbw above MaxRate refused", err)
	}
	// Sessions: N × per-session guarantee saturates too.
	p = DefaultPolicy()
	p.Links = []Link{{Name: "eth0", EgressRate: 100_000_000}}
	r := NewRule("s")
	r.Comm, r.MaxSessions, r.PerSessionMinBW = "s", 1<<16, huge
	p.Rules = []Rule{r}
	if err := p.Admit(""); err == nil || !strings.Contains(err.Error(), "more than 18446744tbit") {
		t.Errorf("sessions: %v, want the saturated product refused", err)
	}
	// A class ceiling over rules whose sum wraps.
	p = DefaultPolicy()
	p.Classes[3].MaxBW = 4_000_000
	a, b := NewRule("a"), NewRule("b")
	a.Comm, a.Class, a.MinBW = "a", "bulk", huge
	b.Comm, b.Class, b.MinBW = "b", "bulk", huge+2
	p.Rules = []Rule{a, b}
	if err := p.Admit(""); err == nil || !strings.Contains(err.Error(), `class "bulk": guarantees more than`) {
		t.Errorf("class ceiling: %v, want refused", err)
	}
}

// TestConfigRefusesOverflowingMinBW: the config of the report (two classes
// at minbw 2⁶³−1 bit/s and one at 10mbit) is refused by the loader with
// the field, the value and the bound.
func TestConfigRefusesOverflowingMinBW(t *testing.T) {
	cfg := `
[[link]]
name = "eth0"
egress_rate = "100mbit"
[[class]]
name = "a"
minbw = "9223372036854775807bit"
[[class]]
name = "b"
minbw = "9223372036854775807bit"
[[class]]
name = "c"
minbw = "10mbit"
`
	_, err := Load([]byte(cfg), "x.toml")
	want := `x.toml:7: class "a": field minbw = "9223372036854775807bit": above 10tbit, the most a rate may be; give the real rate, at most 10tbit`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("got %v\nwant %s", err, want)
	}
}
