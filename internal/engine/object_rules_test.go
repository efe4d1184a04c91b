package engine

import (
	"context"
	"net/netip"
	"testing"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/datapath"
	"github.com/hostqos/hostqos/internal/policy"
)

// The rules made for a reservation and a protected client are not rules
// (rule list and rule show do not know them), and the views that report
// traffic by rule show it under the object: stat rules has a row
// "reservation/NAME" and "protect/ADDR:PORT" with its class and counters,
// and their flows name the object.
func TestObjectRulesInViews(t *testing.T) {
	env := newEnv(t, protConfig)
	e, _ := env.startShield(t)
	ctx := context.Background()
	// A reservation needs a shaped link to enforce it.
	if err := e.SetLink(ctx, root, "eth0", policy.Link{Name: "eth0", EgressRate: 100_000_000}, LinkChange{}); err != nil {
		t.Fatal(err)
	}
	g := testResv("g", policy.ServiceControlledLoad, 1_000_000)
	if _, err := e.AddReservation(ctx, root, g, false); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Protect(ctx, root, api.ProtectRequest{Addr: netip.MustParseAddr("198.51.100.7"), Port: 443}); err != nil {
		t.Fatal(err)
	}
	e.mu.Lock()
	rslot, pslot := e.slots.Rules["resv:g"], e.slots.Rules[protRuleName(netip.MustParseAddrPort("198.51.100.7:443"))]
	e.mu.Unlock()
	env.k.Counters = make([]datapath.Counters, max(rslot, pslot)+1)
	env.k.Counters[rslot] = datapath.Counters{Packets: 3, Bytes: 3000}
	env.k.Counters[pslot] = datapath.Counters{Packets: 2, Bytes: 120}
	env.k.FlowTable = []datapath.Flow{
		{Key: datapath.FlowKey{Proto: 17, Local: netip.MustParseAddrPort("192.0.2.1:4000"), Remote: netip.MustParseAddrPort("192.0.2.2:5004")}, RuleSlot: rslot},
		{Key: datapath.FlowKey{Proto: 6, Local: netip.MustParseAddrPort("192.0.2.1:443"), Remote: netip.MustParseAddrPort("198.51.100.7:5555")}, RuleSlot: pslot},
	}

	rules, err := e.Rules(root, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rules {
		if objectLabel(r.Rule.Name) != "" {
			t.Errorf("rule list shows the internal rule %q", r.Rule.Name)
		}
	}
	if _, err := e.Rules(root, "resv:g"); err == nil {
		t.Error("rule show finds the internal rule resv:g")
	}

	var st api.Stats
	if err := e.Stats(root, "rules", &st); err != nil {
		t.Fatal(err)
	}
	rows := map[string]api.RuleStat{}
	for _, r := range st.Rules {
		rows[r.Rule] = r
	}
	if r, ok := rows["reservation/g"]; !ok || r.Packets != 3 || r.Bytes != 3000 || r.Class != "interactive" {
		t.Errorf("stat rules: reservation row %+v (present %v), want 3 packets, 3000 bytes, class interactive", r, ok)
	}
	if r, ok := rows["protect/198.51.100.7:443"]; !ok || r.Packets != 2 || r.Class != "interactive" {
		t.Errorf("stat rules: protected client row %+v (present %v)", r, ok)
	}
	for name := range rows {
		if name == "resv:g" || objectLabel(name) != "" {
			t.Errorf("stat rules shows the internal name %q", name)
		}
	}

	st = api.Stats{}
	if err := e.Stats(root, "flows", &st); err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, f := range st.Flows {
		got[f.Rule] = true
	}
	if !got["reservation/g"] || !got["protect/198.51.100.7:443"] {
		t.Errorf("stat flows names the flows' rules %v, want reservation/g and protect/198.51.100.7:443", got)
	}
}
