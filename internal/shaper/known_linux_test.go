//go:build linux

package shaper

import (
	"strings"
	"testing"

	"github.com/hostqos/hostqos/internal/testutil"
)

func applyFromIn(t *testing.T, ns *testutil.NetNS, was, p Plan) (int, error) {
	t.Helper()
	var ops int
	err := ns.Do(func() error {
		var err error
		ops, err = applyFrom(&was, p, newOptions(nil))
		return err
	})
	return ops, err
}

// TestApplyFrom: from the plan the link holds, ApplyFrom makes the same
// tree as Apply with no dump, sets a new leaf's queue, and when the link
// does not hold the plan it is told (someone removed the tree), it still
// makes the plan's tree.
func TestApplyFrom(t *testing.T) {
	ns, ifx := newVeth(t)
	a, b := testPlanA(t, ifx), testPlanB(t, ifx)
	if _, err := applyIn(t, ns, a); err != nil {
		t.Fatal(err)
	}
	before := Dumps()
	if _, err := applyFromIn(t, ns, a, b); err != nil {
		t.Fatal(err)
	}
	if d := Dumps() - before; d != 0 {
		t.Errorf("ApplyFrom A to B made %d netlink dumps, want none", d)
	}
	checkTree(t, ns, ifx, b)

	// A new leaf with a queue limit gets its queue.
	c := b
	c.Classes = append([]HTBClass(nil), b.Classes...)
	for i := range c.Classes {
		if c.Classes[i].Leaf {
			c.Classes[i].QueueLimit = 33
		}
	}
	if _, err := applyFromIn(t, ns, b, c); err != nil {
		t.Fatal(err)
	}
	if out := sh(t, "ip", "netns", "exec", ns.NetnsName, "tc", "qdisc", "show", "dev", "hq0"); !strings.Contains(out, "limit 33p") {
		t.Errorf("no leaf queue of 33 packets after ApplyFrom:\n%s", out)
	}
	checkTree(t, ns, ifx, c)

	// The tree removed behind its back: the targeted change fails and
	// ApplyFrom reads the link and builds the whole tree.
	sh(t, "tc", "-n", ns.NetnsName, "qdisc", "del", "dev", "hq0", "root")
	if _, err := applyFromIn(t, ns, c, a); err != nil {
		t.Fatal(err)
	}
	checkTree(t, ns, ifx, a)
}
