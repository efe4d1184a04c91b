package engine

import (
	"context"
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/policy"
)

// guaranteedConfig is a shaped link with guarantees on it: class voice's
// minbw of 4 Mbit/s (and a guaranteed reservation, added by the tests).
const guaranteedConfig = `
[[link]]
name = "eth0"
egress_rate = "10mbit"

[[class]]
name = "voice"
minbw = "4mbit"
`

// TestPatchLinkKeepsWhatIsNotGiven: a link change gives only the fields
// it changes (docs/ddos.md's `link set eth0 --syn-rate 2000/s
// --syn-rate-per-source 20/s`); the rate, and the guarantees it enforces,
// stay. null clears a field; a link not managed yet is managed.
func TestPatchLinkKeepsWhatIsNotGiven(t *testing.T) {
	env := newEnv(t, guaranteedConfig)
	e, sk := env.startShield(t)
	ctx := context.Background()
	if _, err := e.AddReservation(ctx, root, testResv("g", policy.ServiceGuaranteed, 2_000_000), false); err != nil {
		t.Fatal(err)
	}
	tree := env.k.Snapshot().Trees[2]
	l, err := e.PatchLink(ctx, root, "eth0", []byte(`{"syn_rate": 2000, "syn_rate_per_source": 20}`), LinkChange{})
	if err != nil {
		t.Fatal(err)
	}
	if l.EgressRate != 10_000_000 || l.SynRate != 2000 || l.SynRatePerSource != 20 {
		t.Errorf("after the SYN limits: %+v, want the rate kept", l)
	}
	if after := env.k.Snapshot().Trees[2]; !reflect.DeepEqual(after, tree) {
		t.Error("setting the SYN limits changed the HTB tree")
	}
	if got := sk.XDP[2]; got.Rate != 2000 || got.PerSource != 20 {
		t.Errorf("SYN limits in the datapath: %+v", got)
	}
	if ls := e.Links(); len(ls) != 1 || ls[0].EgressRate != 10_000_000 || ls[0].SynRate != 2000 {
		t.Errorf("links: %+v", ls)
	}
	l, err = e.PatchLink(ctx, root, "eth0", []byte(`{"syn_rate": null, "ingress_rate": "95mbit"}`), LinkChange{})
	if err != nil || l.SynRate != 0 || l.SynRatePerSource != 20 || l.IngressRate != 95e6 || l.EgressRate != 10e6 {
		t.Errorf("null clears one field: %+v, %v", l, err)
	}
	if _, err := e.PatchLink(ctx, root, "eth0", []byte(`{"name": "eth1"}`), LinkChange{}); err == nil {
		t.Error("a patch renamed the link")
	}
	var fe *policy.FieldError
	if _, err := e.PatchLink(ctx, root, "eth0", []byte(`{"egress": "1mbit"}`), LinkChange{}); !errors.As(err, &fe) || !strings.Contains(err.Error(), "egress_rate") {
		t.Errorf("unknown field: %v, want the field named with a suggestion", err)
	}
	if _, err := e.PatchLink(ctx, nobody, "eth0", []byte(`{}`), LinkChange{}); !errors.As(err, new(*ForbiddenError)) {
		t.Errorf("nobody's link change: %v", err)
	}
	// A new link: managed with the fields given.
	env.k.Ifindexes["eth1"] = 3
	if l, err := e.PatchLink(ctx, root, "eth1", []byte(`{"egress_rate": "20mbit"}`), LinkChange{Temporary: true}); err != nil || l.EgressRate != 20e6 {
		t.Errorf("a new link: %+v, %v", l, err)
	}
}

// TestLinkChangeKeepsShaping: a change that takes away the shaping
// admitted guarantees rely on is refused with the numbers (what is
// admitted, what the link would reserve) and changes nothing, unless
// forced: the same for a patch, a whole link (PUT) and a reload of the
// config file. A rate below the guarantees is refused even forced.
func TestLinkChangeKeepsShaping(t *testing.T) {
	env := newEnv(t, guaranteedConfig)
	e := env.start(t)
	ctx := context.Background()
	if _, err := e.AddReservation(ctx, root, testResv("g", policy.ServiceGuaranteed, 2_000_000), false); err != nil {
		t.Fatal(err)
	}
	before := env.k.Snapshot()
	want := `link "eth0": field egress_rate = 0: removing the shaping (egress_rate 10mbit) leaves guarantees 6mbit admitted on the link unenforced (class voice 4mbit, reservation g 2mbit): it would reserve 0, marking only; keep egress_rate`
	refusedUnchanged := func(what string, err error, want string) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v\nwant …%s…", what, err, want)
		}
		if !reflect.DeepEqual(env.k.Snapshot(), before) {
			t.Fatalf("%s: a refused change reached the kernel", what)
		}
		if ls := e.Links(); len(ls) != 1 || ls[0].EgressRate != 10e6 {
			t.Fatalf("%s: links %+v", what, ls)
		}
	}
	_, err := e.PatchLink(ctx, root, "eth0", []byte(`{"egress_rate": null}`), LinkChange{})
	refusedUnchanged("removing the rate", err, want)
	refusedUnchanged("a whole link without a rate", e.SetLink(ctx, root, "eth0", policy.Link{SynRate: 2000}, LinkChange{}), want)
	refusedUnchanged("a temporary link without a rate", e.SetLink(ctx, root, "eth0", policy.Link{}, LinkChange{Temporary: true}), want)
	// A rate cut under the guarantees: admission, forced or not.
	for _, force := range []bool{false, true} {
		_, err := e.PatchLink(ctx, root, "eth0", []byte(`{"egress_rate": "5mbit"}`), LinkChange{Force: force})
		refusedUnchanged("a rate cut under the guarantees", err, "guarantees 6mbit exceed reservable capacity 4mbit (0.8 × 5mbit): class voice 4mbit, reservation g 2mbit")
	}
	// A cut that keeps them is no question.
	if _, err := e.PatchLink(ctx, root, "eth0", []byte(`{"egress_rate": "8mbit"}`), LinkChange{}); err != nil {
		t.Errorf("8mbit (6.4mbit reservable) under 6mbit of guarantees: %v", err)
	}
	// Forced: applied, the link marks only.
	if _, err := e.PatchLink(ctx, root, "eth0", []byte(`{"egress_rate": null}`), LinkChange{Force: true}); err != nil {
		t.Fatalf("forced: %v", err)
	}
	if _, shaped := env.k.Snapshot().Trees[2]; shaped {
		t.Error("the forced change left the HTB tree")
	}
	// Shaping again; removing the link is unmanaging it, not a question.
	if err := e.SetLink(ctx, root, "eth0", policy.Link{EgressRate: 10e6}, LinkChange{}); err != nil {
		t.Fatal(err)
	}
	if err := e.RemoveLink(ctx, root, "eth0"); err != nil {
		t.Errorf("link remove: %v", err)
	}
}

// TestReloadKeepsShaping: a config file that drops a link's rate under
// guarantees is refused by reload unless forced.
func TestReloadKeepsShaping(t *testing.T) {
	env := newEnv(t, guaranteedConfig)
	e := env.start(t)
	before := env.k.Snapshot()
	if err := os.WriteFile(env.cfg.ConfigPath, []byte(strings.Replace(guaranteedConfig, `egress_rate = "10mbit"`, "", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	err := e.Reload(false)
	if err == nil || !strings.Contains(err.Error(), `hostqos.toml: link "eth0": field egress_rate = 0: removing the shaping (egress_rate 10mbit) leaves guarantees 4mbit admitted on the link unenforced (class voice 4mbit)`) {
		t.Errorf("reload without the rate: %v", err)
	}
	if !reflect.DeepEqual(env.k.Snapshot(), before) {
		t.Fatal("a refused reload reached the kernel")
	}
	if err := e.Reload(true); err != nil {
		t.Fatalf("forced reload: %v", err)
	}
	if _, shaped := env.k.Snapshot().Trees[2]; shaped {
		t.Error("the forced reload left the HTB tree")
	}
}

// TestLinkChangeKeepsQSched: a rate cut that leaves the scheduled
// qsockets over their share of the link is refused naming what they are
// admitted at and what the link would give them; forced, it applies.
func TestLinkChangeKeepsQSched(t *testing.T) {
	env := newEnv(t, qschedConfig)
	e, qk := env.startQSock(t)
	ctx := context.Background()
	qk.Socket(5, 0, 1005)
	if _, err := e.AttachQSock(ctx, root, 5, api.QSockParams{Scheduler: api.SchedEDFLossy, Rate: 4_000_000}); err != nil {
		t.Fatal(err)
	}
	_, err := e.PatchLink(ctx, root, "eth0", []byte(`{"egress_rate": "6mbit"}`), LinkChange{})
	want := `link "eth0": field egress_rate = "6mbit": the scheduled qsockets are admitted at 4mbit together; at this rate the link would reserve them 3mbit (50 % of 6mbit); keep at least 8mbit`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("a cut under the qsockets: %v\nwant …%s…", err, want)
	}
	if r := qschedClass(t, qk); r != 4_000_000 || e.Links()[0].EgressRate != 10e6 {
		t.Errorf("after the refusal: qsched class %d, links %+v", r, e.Links())
	}
	if _, err := e.PatchLink(ctx, root, "eth0", []byte(`{"egress_rate": "8mbit"}`), LinkChange{}); err != nil {
		t.Errorf("8mbit keeps 4mbit for them: %v", err)
	}
	if _, err := e.PatchLink(ctx, root, "eth0", []byte(`{"egress_rate": "6mbit"}`), LinkChange{Force: true}); err != nil {
		t.Errorf("forced: %v", err)
	}
	if e.Links()[0].EgressRate != 6e6 || qschedClass(t, qk) != 4_000_000 {
		t.Errorf("after the forced cut: links %+v, qsched class %d", e.Links(), qschedClass(t, qk))
	}
}
