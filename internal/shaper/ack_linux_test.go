//go:build linux

package shaper

import "testing"

// TestAckLeaves: ACK leaves hang under the root of a built tree or of a
// pass-through tree at rate = ceil = their rate (at least MinAckRate, a
// rate below MinRate being fine for them only), with a bucket of a few
// ACKs; the plans pass Apply's checks.
func TestAckLeaves(t *testing.T) {
	if got, want := AckRate(10e6), uint64(10_000_000*AckFrameBytes/AckedBytes)&^7; got != want {
		t.Errorf("AckRate(10 Mbit/s) = %d, want %d", got, want)
	}
	if got := AckRate(30000); got != MinAckRate {
		t.Errorf("AckRate(30 kbit/s) = %d, want the minimum %d", got, MinAckRate)
	}
	built, err := Build(LinkSpec{Ifindex: 2, Name: "eth0", Rate: 100e6},
		[]ClassSpec{{Name: "default", Index: 0, Priority: 4, Default: true}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for name, p := range map[string]Plan{"built": built, "pass-through": PassThrough(LinkSpec{Ifindex: 3, Name: "eth1"})} {
		acks := []AckSpec{{Slot: 7, Rate: AckRate(1e6)}, {Slot: 9, Rate: AckRate(64000)}}
		if err := p.AddAckLeaves(acks); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if err := checkPlan(p); err != nil {
			t.Errorf("%s: plan refused: %v", name, err)
		}
		for _, a := range acks {
			var found bool
			for _, c := range p.Classes {
				if c.Minor != AckBase+a.Slot {
					continue
				}
				found = true
				if c.ParentMinor != RootMinor || !c.Leaf || c.Rate != a.Rate || c.Ceil != a.Rate || c.Prio != 0 || c.Burst != ackBurstBytes {
					t.Errorf("%s: ACK leaf %+v, want a prio-0 leaf under the root at rate = ceil = %d, burst %d", name, c, a.Rate, ackBurstBytes)
				}
			}
			if !found {
				t.Errorf("%s: no ACK leaf for slot %d", name, a.Slot)
			}
		}
	}
	p := PassThrough(LinkSpec{Ifindex: 3})
	if err := p.AddAckLeaves([]AckSpec{{Slot: MaxRuleSlot + 1, Rate: 8000}}); err == nil {
		t.Error("ACK leaf of slot beyond MaxRuleSlot accepted")
	}
	if p.Link.Rate != PassRate || p.DefaultMinor != PassMinor {
		t.Errorf("pass-through plan: rate %d default %x, want %d and %x", p.Link.Rate, p.DefaultMinor, PassRate, PassMinor)
	}
}
