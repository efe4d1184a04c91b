package datapath

import (
	"testing"
)

// TestUsedRuleCounters: the counters of the slots in use equal the full
// read's; counts that an earlier daemon left in a slot beyond the policy
// (adopted maps) are in the first answer and every later one.
func TestUsedRuleCounters(t *testing.T) {
	d := openTest(t, Options{})
	left := make([]hostqosHqCounters, d.ncpu)
	left[0] = hostqosHqCounters{Packets: 2, Bytes: 300}
	if err := d.objs.HqRuleCtrIn.Put(uint32(40), left); err != nil {
		t.Fatal(err)
	}
	if err := d.Apply(Policy{Rules: []Rule{{Slot: 2, Proto: 17, DSCPIn: -1}, {Slot: 5, Proto: 6, DSCPIn: -1}}}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		used, err := d.UsedRuleCounters()
		if err != nil {
			t.Fatal(err)
		}
		full, err := d.RuleCounters()
		if err != nil {
			t.Fatal(err)
		}
		if len(used) != 41 {
			t.Errorf("read %d: %d slots, want 41 (up to the adopted counts in slot 40)", i, len(used))
		}
		for s := range full {
			if s < len(used) && used[s] != full[s] || s >= len(used) && full[s] != (Counters{}) {
				t.Errorf("read %d: slot %d: used %+v, full %+v", i, s, used[min(s, len(used)-1)], full[s])
			}
		}
		if full[2].Packets != uint64(i) || full[40].RxBytes != 300 {
			t.Errorf("read %d: slot 2 %+v, slot 40 %+v", i, full[2], full[40])
		}
		if _, err := d.TestRun(churnFrame(i), 1); err != nil {
			t.Fatal(err)
		}
	}
}
