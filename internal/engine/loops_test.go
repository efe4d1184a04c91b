package engine

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/hostqos/hostqos/internal/policy"
)

// TestBoundedLoopsCapacity: an engine for the bounded datapath (hostqosd
// --loops bounded, or a kernel without bpf_loop) takes rules up to its
// capacity and refuses the next one with policy.CheckCapacity's message,
// changing nothing; one over the capacity in the config file keeps it from
// starting.
func TestBoundedLoopsCapacity(t *testing.T) {
	var b strings.Builder
	for i := 0; i < policy.BoundedFlowRules; i++ {
		fmt.Fprintf(&b, "[[rule]]\nname = \"f%d\"\nproto = \"udp\"\nrport = %d\nclass = \"bulk\"\n", i, 1000+i)
	}
	env := newEnv(t, b.String())
	env.cfg.Loops = policy.LoopsBounded
	e := env.start(t)
	gen := env.k.Generation()
	_, err := e.AddRule(context.Background(), root, policy.Rule{Name: "one-more", Proto: "udp", RPort: policy.PortRange{From: 9, To: 9}, Class: "bulk"}, false)
	want := fmt.Sprintf("%d rules without app selectors: more than the bounded datapath holds (%d;", policy.BoundedFlowRules+1, policy.BoundedFlowRules)
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("rule %d on the bounded datapath: error %v, want %q", policy.BoundedFlowRules+1, err, want)
	}
	if g := env.k.Generation(); g != gen {
		t.Errorf("a refused rule changed the datapath: generation %d → %d", gen, g)
	}
	// An app rule still fits.
	if _, err := e.AddRule(context.Background(), root, policy.Rule{Name: "app", Comm: "x", Class: "bulk"}, false); err != nil {
		t.Fatal(err)
	}

	over := newEnv(t, b.String()+"[[rule]]\nname = \"over\"\nproto = \"tcp\"\nclass = \"bulk\"\n")
	over.cfg.Loops = policy.LoopsBounded
	if _, err := New(over.cfg); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("engine over the bounded capacity: error %v, want %q", err, want)
	}
	over.cfg.Loops = policy.LoopsBPFLoop
	if _, err := New(over.cfg); err != nil {
		t.Errorf("the same policy on the bpf_loop datapath: %v", err)
	}
}
