package engine

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/hostqos/hostqos/internal/host/fakehost"
	"github.com/hostqos/hostqos/internal/policy"
	"github.com/hostqos/hostqos/internal/shaper"
)

// manyLinksEnv is an engine over 100 managed links: link0..link49 shaped
// (ifindexes 10..59), link50..link99 mark only (60..109), and 200 rules.
func manyLinksEnv(t *testing.T) (*testEnv, *Engine) {
	t.Helper()
	var b strings.Builder
	for i := 0; i < 100; i++ {
		fmt.Fprintf(&b, "[[link]]\nname = \"link%d\"\n", i)
		if i < 50 {
			b.WriteString("egress_rate = \"100mbit\"\n")
		}
		b.WriteString("\n")
	}
	for i := 0; i < 200; i++ {
		fmt.Fprintf(&b, "[[rule]]\nname = \"r%d\"\nproto = \"udp\"\nrport = %d\nclass = \"bulk\"\n\n", i, 1000+i)
	}
	env := newEnv(t, b.String())
	for i := 0; i < 100; i++ {
		env.k.Ifindexes[fmt.Sprintf("link%d", i)] = 10 + i
	}
	e := env.start(t)
	return env, e
}

// callCounts counts the recorded kernel calls that change something, by
// operation, and the ifindexes Shape was called for.
func callCounts(k *fakehost.FakeKernel) (map[string]int, []string) {
	k.Lock()
	defer k.Unlock()
	n := map[string]int{}
	var shaped []string
	for _, c := range k.Calls {
		op, arg, _ := strings.Cut(c, " ")
		n[op]++
		if op == "Shape" {
			shaped = append(shaped, arg)
		}
	}
	return n, shaped
}

func resetCalls(k *fakehost.FakeKernel) {
	k.Lock()
	defer k.Unlock()
	k.Calls = nil
}

// TestChangeWritesOnlyWhatItTouches: with 100 managed
// links, a change re-applies only the links and the datapath rules it
// changes: a rule without bandwidth writes the rules and no link; a link's
// new rate re-shapes that link alone; a rule with its own ceiling
// re-shapes the shaped links (each carries the rule's class) and leaves
// the mark-only ones alone. Nothing is attached again.
func TestChangeWritesOnlyWhatItTouches(t *testing.T) {
	env, e := manyLinksEnv(t)
	if len(env.k.Trees) != 50 || len(env.k.Attached) != 100 {
		t.Fatalf("start: %d trees, %d attached", len(env.k.Trees), len(env.k.Attached))
	}

	resetCalls(env.k)
	if _, err := e.AddRule(ctx, root, rule("plain"), false); err != nil {
		t.Fatal(err)
	}
	if n, _ := callCounts(env.k); n["ApplyRules"] != 1 || n["Shape"] != 0 || n["Unshape"] != 0 || n["Shaped"] != 0 || n["AttachLink"] != 0 {
		t.Errorf("adding a rule without bandwidth: calls %v; want only ApplyRules once", n)
	}

	resetCalls(env.k)
	if err := e.SetLink(ctx, root, "link7", policy.Link{EgressRate: 50e6}, LinkChange{}); err != nil {
		t.Fatal(err)
	}
	if n, shaped := callCounts(env.k); n["Shape"] != 1 || len(shaped) != 1 || shaped[0] != "17" || n["ApplyRules"] != 0 || n["AttachLink"] != 0 {
		t.Errorf("changing link7's rate: calls %v, shaped %v; want Shape of ifindex 17 only", n, shaped)
	}

	resetCalls(env.k)
	r := rule("capped")
	r.MaxBW = 5e6
	if _, err := e.AddRule(ctx, root, r, false); err != nil {
		t.Fatal(err)
	}
	if n, _ := callCounts(env.k); n["Shape"] != 50 || n["ApplyRules"] != 1 || n["AttachLink"] != 0 || n["Shaped"] != 0 {
		t.Errorf("adding a rule with a ceiling: calls %v; want Shape of the 50 shaped links and ApplyRules once", n)
	}

	// A repair writes everything again: someone else changed the kernel.
	delete(env.k.Trees, 12)
	resetCalls(env.k)
	e.Rescan()
	if n, _ := callCounts(env.k); n["Shape"] != 50 || n["AttachLink"] != 100 {
		t.Errorf("repair after a removed tree: calls %v; want every link set up again", n)
	}
}

// TestIncrementalRollback: a change that fails midway (the 20th of the 50
// links it re-shapes) leaves the kernel as it was; the restore re-shapes
// only the links the failed push reached (19 changed, 1 unknown), and the
// next change goes through.
func TestIncrementalRollback(t *testing.T) {
	env, e := manyLinksEnv(t)
	before := env.k.Snapshot()
	resetCalls(env.k)
	env.k.FailNth("Shape", 20, errors.New("boom"))
	r := rule("capped")
	r.MaxBW = 5e6
	if _, err := e.AddRule(ctx, root, r, false); err == nil {
		t.Fatal("the change succeeded")
	}
	if after := env.k.Snapshot(); !reflect.DeepEqual(after, before) {
		t.Error("kernel after the failed change differs from before")
	}
	if n, _ := callCounts(env.k); n["Shape"] != 20+20 || n["ApplyRules"] != 0 {
		t.Errorf("failed change and restore: calls %v; want 20 Shape calls each, no rules written", n)
	}
	resetCalls(env.k)
	if _, err := e.AddRule(ctx, root, r, false); err != nil {
		t.Fatalf("change after the failure: %v", err)
	}
	if n, _ := callCounts(env.k); n["Shape"] != 50 || n["ApplyRules"] != 1 {
		t.Errorf("change after the failure: calls %v", n)
	}

	// A failure writing the rules restores them and no link.
	before = env.k.Snapshot()
	resetCalls(env.k)
	env.k.FailNth("ApplyRules", 1, errors.New("boom"))
	if _, err := e.AddRule(ctx, root, rule("plain"), false); err == nil {
		t.Fatal("the change succeeded")
	}
	if after := env.k.Snapshot(); !reflect.DeepEqual(after, before) {
		t.Error("kernel after the failed rules write differs from before")
	}
	if n, _ := callCounts(env.k); n["Shape"] != 0 || n["ApplyRules"] != 2 {
		t.Errorf("failed rules write and restore: calls %v; want ApplyRules twice, no Shape", n)
	}
}

// TestRuleSlotsFitShaper: every rule slot the policy allows can have an
// HTB leaf of its own (rules with minbw or maxbw).
func TestRuleSlotsFitShaper(t *testing.T) {
	if shaper.MaxRuleSlot != policy.MaxRules-1 {
		t.Errorf("the shaper's rule leaves cover slots 0..%d; the policy allows %d rules", shaper.MaxRuleSlot, policy.MaxRules)
	}
}
