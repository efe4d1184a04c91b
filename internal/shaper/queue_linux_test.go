//go:build linux

package shaper

import (
	"strconv"
	"strings"
	"testing"
)

// TestLeafQueueLimit: a rule leaf with a QueueLimit gets a pfifo of that
// many packets, changed in place when the limit changes and removed (the
// kernel's default queue back) when it is dropped.
func TestLeafQueueLimit(t *testing.T) {
	ns, ifx := newVeth(t)
	plan := func(limit uint32) Plan {
		p, err := Build(LinkSpec{Ifindex: ifx, Name: "hq0", Rate: 100_000_000},
			[]ClassSpec{{Name: "default", Index: 0, Priority: 4, Default: true}},
			[]RuleSpec{{Slot: 7, Class: 0, MinBW: 4_000_000, MaxBW: 4_000_000, QueueLimit: limit}})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	qdiscs := func() string {
		return sh(t, "ip", "netns", "exec", ns.NetnsName, "tc", "qdisc", "show", "dev", "hq0")
	}
	parent := "parent 4851:107"
	for _, limit := range []uint32{12, 40} {
		if _, err := applyIn(t, ns, plan(limit)); err != nil {
			t.Fatal(err)
		}
		out := qdiscs()
		if !strings.Contains(out, "qdisc pfifo 5107: "+parent+" limit "+strconv.Itoa(int(limit))+"p") {
			t.Errorf("limit %d: no pfifo 5107: of %dp below the rule's leaf:\n%s", limit, limit, out)
		}
	}
	if _, err := applyIn(t, ns, plan(0)); err != nil {
		t.Fatal(err)
	}
	if out := qdiscs(); strings.Contains(out, "pfifo 5107:") {
		t.Errorf("limit dropped, our pfifo still there:\n%s", out)
	}
}
