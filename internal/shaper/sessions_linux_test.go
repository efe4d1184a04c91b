//go:build linux

package shaper

import (
	"fmt"
	"strings"
	"testing"
)

// TestSessionLeavesTransitions: a rule leaf with a queue becomes an inner
// class with a leaf per session (each with the queue), the sessions'
// count changes, and it goes back to one leaf with its queue — each step
// applied in place on the kernel, which then holds exactly the plan.
func TestSessionLeavesTransitions(t *testing.T) {
	ns, ifx := newVeth(t)
	plan := func(sessions int) Plan {
		p, err := Build(LinkSpec{Ifindex: ifx, Name: "hq0", Rate: 100_000_000},
			[]ClassSpec{{Name: "default", Index: 0, Priority: 4, Default: true}},
			[]RuleSpec{{Slot: 7, Class: 0, MinBW: 3_000_000, MaxBW: 3_000_000, QueueLimit: 40,
				Sessions: sessions, SessionGroup: 2, SessionMinBW: 500_000}})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	qdiscs := func() string {
		return sh(t, "ip", "netns", "exec", ns.NetnsName, "tc", "qdisc", "show", "dev", "hq0")
	}
	for _, n := range []int{0, 3, 5, 2, 0} {
		p := plan(n)
		if _, err := applyIn(t, ns, p); err != nil {
			t.Fatalf("%d sessions: %v", n, err)
		}
		checkTree(t, ns, ifx, p)
		out := qdiscs()
		hasRuleQueue := strings.Contains(out, "qdisc pfifo 5107: parent 4851:107 limit 40p")
		if (n == 0) != hasRuleQueue {
			t.Errorf("%d sessions: the rule leaf's own queue present = %v:\n%s", n, hasRuleQueue, out)
		}
		for i := 0; i < 5; i++ {
			minor := SessionMinor(2, i)
			q := fmt.Sprintf("qdisc pfifo %x: parent 4851:%x limit 40p", QueueMajor(minor), minor)
			if got := strings.Contains(out, q); got != (i < n) {
				t.Errorf("%d sessions: session %d's queue present = %v:\n%s", n, i, got, out)
			}
		}
	}
}
