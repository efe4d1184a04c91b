package datapath

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/hostqos/hostqos/internal/testutil"
)

// TestFlowTablesPerFamily: IPv4 and IPv6 flows live in tables of their
// own that share the counter slots. Both show in Flows with their exact
// keys; a counter slot passes between flows of different families with
// the old owner's counts kept; a flood of one family does not evict the
// other's flows.
func TestFlowTablesPerFamily(t *testing.T) {
	d := openTest(t, Options{FlowTableSize: 16})
	if err := d.Apply(Policy{Rules: []Rule{{Slot: 1, Proto: 17, DSCPIn: -1, DSCP: 10}}}); err != nil {
		t.Fatal(err)
	}
	if d.FlowTableSize() != 16 || d.fctrN != 32 {
		t.Fatalf("flow table size %d, counter slots %d; want 16 per family, 32 slots", d.FlowTableSize(), d.fctrN)
	}
	v4 := func(i int) FlowKey {
		return FlowKey{Proto: 17, Local: netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 18, 3, byte(i)}), uint16(30000+i)),
			Remote: netipAP("198.19.0.1:53")}
	}
	v6 := func(i int) FlowKey {
		a := netip.MustParseAddr("2001:db8:1:2:3:4:5:0").As16()
		a[15] = byte(i)
		return FlowKey{Proto: 17, Local: netip.AddrPortFrom(netip.AddrFrom16(a), uint16(40000+i)),
			Remote: netipAP("[2001:db8:ffff::1]:53")}
	}
	frame := func(k FlowKey) []byte {
		return BuildFrame(FrameSpec{Src: k.Local.Addr(), Dst: k.Remote.Addr(), Proto: k.Proto,
			SPort: k.Local.Port(), DPort: k.Remote.Port(), Payload: 10})
	}
	send := func(k FlowKey, n int) {
		t.Helper()
		for i := 0; i < n; i++ {
			res, err := d.TestRun(frame(k), 1)
			if err != nil {
				t.Fatal(err)
			}
			if tosOf(res.Packet) != 10<<2 {
				t.Fatalf("flow %v: tos %#x, want %#x", k, tosOf(res.Packet), 10<<2)
			}
		}
	}
	lookup := func(k FlowKey) (Flow, bool) {
		t.Helper()
		f, ok, err := d.NewFlowReader().Lookup(k)
		if err != nil {
			t.Fatal(err)
		}
		return f, ok
	}
	flow := func(k FlowKey) Flow {
		t.Helper()
		f, ok := lookup(k)
		if !ok {
			t.Fatalf("flow %v not in the flow tables", k)
		}
		return f
	}
	// takeover makes k's counter slot look idle for 2 s and points the
	// allocation cursor at it, so that the next new flow takes it over.
	takeover := func(k FlowKey) Flow {
		t.Helper()
		old := flow(k)
		var c hostqosHqFctr
		if err := d.objs.HqFctr.Lookup(old.Ref.Slot, &c); err != nil {
			t.Fatal(err)
		}
		c.LastNs -= 2_000_000_000
		if err := d.objs.HqFctr.Put(old.Ref.Slot, &c); err != nil {
			t.Fatal(err)
		}
		d.stateView().Fcursor = uint64(d.fctrN)*5 + uint64(old.Ref.Slot)
		return old
	}

	send(v4(1), 3)
	send(v6(1), 2)
	got := map[FlowKey]Flow{}
	if err := d.Flows(func(f Flow) bool { got[f.Key] = f; return true }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[v4(1)].Packets != 3 || got[v6(1)].Packets != 2 ||
		got[v4(1)].RuleSlot != 1 || got[v6(1)].RuleSlot != 1 {
		t.Fatalf("flows %+v, want %v with 3 packets and %v with 2", got, v4(1), v6(1))
	}

	// An IPv4 flow takes over an IPv6 flow's slot, and the other way.
	for _, c := range []struct {
		name        string
		owner, next FlowKey
		ownerPkts   uint64
	}{
		{"IPv4 takes IPv6's slot", v6(1), v4(2), 2},
		{"IPv6 takes IPv4's slot", v4(1), v6(2), 3},
	} {
		old := takeover(c.owner)
		send(c.next, 1)
		if f := flow(c.next); f.Ref.Slot != old.Ref.Slot || f.Packets != 1 {
			t.Fatalf("%s: new flow %+v did not take slot %d over", c.name, f, old.Ref.Slot)
		}
		if f := flow(c.owner); f.Packets != c.ownerPkts || f.Ref.Tag != old.Ref.Tag {
			t.Errorf("%s: old owner %+v, want its %d packets kept", c.name, f, c.ownerPkts)
		}
		if _, ok := d.FlowCounters(old.Ref); ok {
			t.Errorf("%s: FlowCounters still accepts the taken-over slot", c.name)
		}
		send(c.owner, 1) // the old owner gets a new slot
		if f := flow(c.owner); f.Packets != c.ownerPkts+1 || f.Ref.Slot == old.Ref.Slot {
			t.Errorf("%s: old owner after its next packet %+v, want %d packets in a new slot", c.name, f, c.ownerPkts+1)
		}
	}

	// A flood of IPv6 flows (four times the table) leaves the IPv4 flows.
	for i := 10; i < 10+4*16; i++ {
		send(v6(i), 1)
	}
	for _, k := range []FlowKey{v4(1), v4(2)} {
		if f, ok := lookup(k); !ok || f.Packets == 0 {
			t.Errorf("IPv4 flow %v after an IPv6 flood: %+v ok=%v", k, f, ok)
		}
	}
	n6 := 0
	if err := d.Flows(func(f Flow) bool {
		if f.Key.Local.Addr().Is6() {
			n6++
		}
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if n6 == 0 || n6 > 16 {
		t.Errorf("%d IPv6 flows in a table of 16", n6)
	}
	st, err := d.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st.FlowInsertFail != 0 || st.ParseErrors != 0 {
		t.Errorf("stats %+v", st)
	}

	// The fallback without map iterators (batch lookups) reads the same.
	read := func() map[FlowKey]uint64 {
		t.Helper()
		m := map[FlowKey]uint64{}
		if err := d.NewFlowReader().Flows(func(f Flow) bool { m[f.Key] = f.Packets; return true }); err != nil {
			t.Fatal(err)
		}
		return m
	}
	byIter := read()
	d.noIter.Store(true)
	byBatch := read()
	if len(byBatch) != len(byIter) || len(byIter) != 2+n6 {
		t.Errorf("%d flows by batch lookups, %d by iterators, want %d", len(byBatch), len(byIter), 2+n6)
	}
	for k, p := range byIter {
		if byBatch[k] != p {
			t.Errorf("flow %v: %d packets by batch lookups, %d by iterators", k, byBatch[k], p)
		}
	}
}

// TestAdoptOldLayoutVersion: pins of the previous layout (one flow table)
// are refused with the hint to remove them.
func TestAdoptOldLayoutVersion(t *testing.T) {
	testutil.NeedRoot(t)
	dir := testutil.TempPinDir(t)
	t.Cleanup(func() {
		if err := Remove(dir); err != nil {
			t.Errorf("remove %s: %v", dir, err)
		}
	})
	d := openTest(t, Options{BPFFSDir: dir})
	cookie, err := NetnsCookie()
	if err != nil {
		t.Fatal(err)
	}
	d.Close()
	m, err := ebpf.LoadPinnedMap(filepath.Join(dir, metaMapName), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := m.Put(uint32(0), meta{Version: abiVersion - 1, NetnsCookie: cookie}); err != nil {
		t.Fatal(err)
	}
	_, err = Open(Options{BPFFSDir: dir})
	t.Logf("open error: %v", err)
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("layout version %d", abiVersion-1)) || !strings.Contains(err.Error(), "hostqos down") {
		t.Errorf("open with old pins: %v", err)
	}
}
