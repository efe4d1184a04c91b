package datapath

import (
	"net/netip"
	"testing"
)

// TestTrackCarriesMemos: the tracker's memo of a flow survives rescans
// (a flow that keeps its slot, and one that moved to another slot after a
// takeover); flows evicted from the table are reported once as gone, with
// the memo's counters.
func TestTrackCarriesMemos(t *testing.T) {
	d := openTest(t, Options{FlowTableSize: 16})
	if err := d.Apply(Policy{Rules: []Rule{{Slot: 1, Proto: 17, DSCPIn: -1}}}); err != nil {
		t.Fatal(err)
	}
	run := func(i, n int) {
		t.Helper()
		for k := 0; k < n; k++ {
			if _, err := d.TestRun(churnFrame(i), 1); err != nil {
				t.Fatal(err)
			}
		}
	}
	r := d.NewFlowReader()
	// track walks the table: every memo gets Seen, the flow's counters and
	// Mark = its port; it returns the memos met (by port) and the gone.
	track := func() (met map[uint16]FlowMemo, gone map[uint16]FlowMemo) {
		t.Helper()
		met, gone = map[uint16]FlowMemo{}, map[uint16]FlowMemo{}
		err := r.Track(func(f Flow, m *FlowMemo) bool {
			met[f.Key.Local.Port()] = *m
			m.Seen, m.Counters, m.LastSeenNS, m.Mark = true, f.Counters, f.LastSeenNS, uint64(f.Key.Local.Port())
			return true
		}, func(f Flow, m FlowMemo) {
			if f.Counters != m.Counters || f.PID != 0 && f.Comm == "" {
				t.Errorf("gone flow %+v, memo %+v", f, m)
			}
			gone[f.Key.Local.Port()] = m
		})
		if err != nil {
			t.Fatal(err)
		}
		return met, gone
	}
	run(0, 3)
	run(1, 1)
	if met, gone := track(); len(met) != 2 || met[20000].Seen || len(gone) != 0 {
		t.Fatalf("first walk: met %+v gone %+v", met, gone)
	}
	run(2, 1) // a new flow: a rescan
	met, gone := track()
	if len(met) != 3 || !met[20000].Seen || met[20000].Mark != 20000 || met[20000].Packets != 3 || !met[20001].Seen || met[20002].Seen || len(gone) != 0 {
		t.Fatalf("after a new flow: met %+v gone %+v", met, gone)
	}

	// Flow 1's slot taken over by flow 3, then flow 1 moves to a new slot.
	old, ok, err := r.Lookup(churnKey(1))
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	var c hostqosHqFctr
	if err := d.objs.HqFctr.Lookup(old.Ref.Slot, &c); err != nil {
		t.Fatal(err)
	}
	c.LastNs -= 2_000_000_000
	if err := d.objs.HqFctr.Put(old.Ref.Slot, &c); err != nil {
		t.Fatal(err)
	}
	d.stateView().Fcursor = uint64(d.fctrN)*3 + uint64(old.Ref.Slot)
	run(3, 1)
	run(1, 1)
	met, gone = track()
	if len(met) != 4 || !met[20001].Seen || met[20001].Mark != 20001 || met[20003].Seen || len(gone) != 0 {
		t.Fatalf("after a slot takeover and move: met %+v gone %+v", met, gone)
	}

	// Many new flows evict the old ones from the 16-entry table.
	for i := 10; i < 40; i++ {
		run(i, 1)
	}
	met, gone = track()
	for p := uint16(20000); p <= 20003; p++ {
		if _, in := met[p]; in {
			continue
		}
		if m, ok := gone[p]; !ok || m.Mark != uint64(p) {
			t.Errorf("flow %d left the table; gone reports %+v", p, gone)
		}
	}
	if len(gone) == 0 {
		t.Errorf("no tracked flow gone after 30 new flows in a table of 16: met %d", len(met))
	}
	if _, gone2 := track(); len(gone2) != 0 {
		t.Errorf("gone flows reported twice: %+v", gone2)
	}
}

// churnKey is the key of churnFrame(i)'s flow.
func churnKey(i int) FlowKey {
	return FlowKey{Proto: 17, Local: netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 18, byte(i >> 8), byte(i)}), uint16(20000+i)),
		Remote: netipAP("198.19.0.1:53")}
}
