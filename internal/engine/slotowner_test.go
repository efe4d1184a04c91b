package engine

import (
	"context"
	"net/netip"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/datapath"
	"github.com/hostqos/hostqos/internal/history"
	"github.com/hostqos/hostqos/internal/host/fakehost"
	"github.com/hostqos/hostqos/internal/observe"
	"github.com/hostqos/hostqos/internal/policy"
)

// TestRemovedRulesFlowNotNamedAfterNewOwner: rule top-hostqos is removed
// and dl added, which takes the freed rule slot; a flow classified under
// top-hostqos (and not since) shows no rule in `stat flows`, `stat apps`
// and its history record — never dl, which cannot match it — while a flow
// classified after dl came shows dl. So after a restart over the same
// datapath; over a new datapath (generations from zero again) flows are
// named as before.
func TestRemovedRulesFlowNotNamedAfterNewOwner(t *testing.T) {
	env := newEnv(t, "")
	e := env.start(t)
	k := env.k
	hs, err := history.Open(filepath.Join(env.dir, "history.db"), history.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer hs.Close()
	e.SetHistory(hs, observe.HistoryOptions{FlowIdle: time.Hour})

	top := rule("top-hostqos")
	top.Proto, top.RPort = "tcp", policy.PortRange{From: 7000, To: 7000}
	if _, err := e.AddRule(ctx, root, top, false); err != nil {
		t.Fatal(err)
	}
	slot := e.slots.Rules[top.Name]
	mono := monoNow()
	old := flowAt(4000, 4242, 0, 1000, mono-uint64(time.Minute), mono)
	old.Comm, old.RuleSlot, old.Gen = "hostqos", slot, k.Generation()
	k.FlowTable = []datapath.Flow{old}
	e.Tick() // the history's first walk
	if got := flowRules(t, e); got[4000] != top.Name {
		t.Fatalf("before the change, the flow's rule is %q, want %s", got[4000], top.Name)
	}

	if err := e.RemoveRule(ctx, root, top.Name); err != nil {
		t.Fatal(err)
	}
	dl := rule("dl")
	dl.Proto, dl.RPort = "tcp", policy.PortRange{From: 8000, To: 8000}
	if _, err := e.AddRule(ctx, root, dl, false); err != nil {
		t.Fatal(err)
	}
	if got := e.slots.Rules[dl.Name]; got != slot {
		t.Fatalf("dl has slot %d, not the one top-hostqos freed (%d): the test shows nothing", got, slot)
	}
	fresh := flowAt(4001, 4243, 0, 500, mono, mono)
	fresh.Comm, fresh.RuleSlot, fresh.Gen = "wget", slot, k.Generation()
	k.FlowTable = []datapath.Flow{old, fresh}
	check := func(e *Engine, when string) {
		t.Helper()
		if got := flowRules(t, e); got[4000] != "" || got[4001] != dl.Name {
			t.Errorf("%s: stat flows names the rules %v; want none for port 4000 (its rule was removed) and %s for 4001", when, got, dl.Name)
		}
		var st api.Stats
		if err := e.Stats(root, "apps", &st); err != nil {
			t.Fatal(err)
		}
		for _, a := range st.Apps {
			if a.PID == old.PID && slices.Contains(a.Rules, dl.Name) || a.PID == fresh.PID && !slices.Equal(a.Rules, []string{dl.Name}) {
				t.Errorf("%s: stat apps: %s (pid %d) under rules %v", when, a.Comm, a.PID, a.Rules)
			}
		}
	}
	check(e, "after the change")

	// The flow leaves the table: its history record names no rule.
	k.FlowTable = []datapath.Flow{fresh}
	e.Tick()
	if err := hs.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	h, err := e.History(context.Background(), root, api.HistoryQuery{Kind: api.HistoryFlows, Since: time.Now().Add(-time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Flows) != 1 || h.Flows[0].Local != "198.18.0.1:4000" || h.Flows[0].Rule != "" {
		t.Errorf("history flow records %+v, want the removed rule's flow without a rule", h.Flows)
	}

	k.FlowTable = []datapath.Flow{old, fresh}
	check(env.start(t), "after a restart")

	// A new datapath: generations start from zero again, and its flows
	// are named whatever their generation.
	k2 := fakehost.NewFakeKernel(k.Root)
	k2.Ifindexes["eth0"] = 2
	e3, err := New(env.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := e3.Start(Host{Kernel: k2}); err != nil {
		t.Fatal(err)
	}
	f := fresh
	f.Gen = k2.Generation()
	k2.FlowTable = []datapath.Flow{f}
	if got := flowRules(t, e3); got[4001] != dl.Name {
		t.Errorf("over a new datapath (generation %d), the flow's rule is %q, want %s", k2.Generation(), got[4001], dl.Name)
	}
}

// flowRules are the rules `stat flows` names, by local port.
func flowRules(t *testing.T, e *Engine) map[uint16]string {
	t.Helper()
	var st api.Stats
	if err := e.Stats(root, "flows", &st); err != nil {
		t.Fatal(err)
	}
	out := map[uint16]string{}
	for _, f := range st.Flows {
		ap, err := netip.ParseAddrPort(f.Local)
		if err != nil {
			t.Fatal(err)
		}
		out[ap.Port()] = f.Rule
	}
	return out
}
