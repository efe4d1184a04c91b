package datapath

import (
	"net/netip"
	"slices"
	"testing"
)

func churnFrame(i int) []byte {
	return BuildFrame(FrameSpec{Src: netip.AddrFrom4([4]byte{198, 18, byte(i >> 8), byte(i)}), Dst: addr("198.19.0.1"),
		Proto: 17, SPort: uint16(20000 + i), DPort: 53, Payload: 10})
}

// TestFlowReaderFollowsTable: Flows sees new flows at once, counters move
// without a rescan, and FlowCounters rereads one flow by its FlowRef.
func TestFlowReaderFollowsTable(t *testing.T) {
	d := openTest(t, Options{})
	if err := d.Apply(Policy{Rules: []Rule{{Slot: 7, Proto: 17, DSCPIn: -1, DSCP: 10}}}); err != nil {
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
	count := func() map[uint16]Flow {
		t.Helper()
		got := map[uint16]Flow{}
		if err := d.Flows(func(f Flow) bool { got[f.Key.Local.Port()] = f; return true }); err != nil {
			t.Fatal(err)
		}
		return got
	}
	run(0, 2)
	got := count()
	if len(got) != 1 || got[20000].Packets != 2 || got[20000].RuleSlot != 7 || got[20000].Ref.Tag == 0 || got[20000].Gen != d.Generation() {
		t.Fatalf("after 2 packets: %+v", got)
	}
	cur := d.flowCursor()
	run(0, 3) // hits only: no slot allocated, no rescan needed
	if d.flowCursor() != cur {
		t.Errorf("cursor moved on flow hits: %d → %d", cur, d.flowCursor())
	}
	got = count()
	if got[20000].Packets != 5 || got[20000].Bytes != 5*uint64(len(churnFrame(0))) {
		t.Errorf("after 5 packets: %+v", got[20000])
	}
	c, ok := d.FlowCounters(got[20000].Ref)
	if !ok || c.Packets != 5 || c.RuleSlot != 7 || c.LastSeenNS < got[20000].FirstSeenNS {
		t.Errorf("FlowCounters: %+v ok=%v", c, ok)
	}
	run(1, 1) // a new flow appears without an explicit rescan
	got = count()
	if len(got) != 2 || got[20001].Packets != 1 {
		t.Errorf("after a new flow: %+v", got)
	}
	// A policy change re-evaluates the flow on its next packet; the rule
	// shows without a rescan.
	if err := d.Apply(Policy{Rules: []Rule{{Slot: 9, Proto: 17, DSCPIn: -1, DSCP: 12}}}); err != nil {
		t.Fatal(err)
	}
	run(0, 1)
	if f := count()[20000]; f.RuleSlot != 9 || f.Packets != 6 || f.Gen != d.Generation() {
		t.Errorf("after policy change: %+v (generation now %d)", f, d.Generation())
	}
	// The flow that sent nothing since keeps the rule slot and the
	// generation it was classified at: the slot's rule then.
	if f := count()[20001]; f.RuleSlot != 7 || f.Gen != d.Generation()-1 {
		t.Errorf("a flow of the previous policy: %+v (generation now %d)", f, d.Generation())
	}
	// Classified again after the reader's last scan (no flow came, the
	// policy stayed): the new slot, of the scan's generation.
	cur = d.flowCursor()
	run(1, 1)
	if f := count()[20001]; d.flowCursor() != cur || f.RuleSlot != 9 || f.Gen != d.Generation() {
		t.Errorf("a flow classified again since the scan: %+v (generation now %d, cursor moved %v)", f, d.Generation(), d.flowCursor() != cur)
	}
	r := d.NewFlowReader()
	if f, ok, err := r.Lookup(got[20001].Key); err != nil || !ok || f.Packets != 2 {
		t.Errorf("Lookup: %+v ok=%v err=%v", f, ok, err)
	}
}

// TestFlowSlotsUnderChurn: with a tiny flow table, a flood of new flows
// recycles counter slots; every flow still in the table reports exactly
// its own packets (nothing lost to, or borrowed from, another flow), and a
// long-lived busy flow keeps counting.
func TestFlowSlotsUnderChurn(t *testing.T) {
	d := openTest(t, Options{FlowTableSize: 16})
	if err := d.Apply(Policy{Rules: []Rule{{Slot: 1, Proto: 17, DSCPIn: -1}}}); err != nil {
		t.Fatal(err)
	}
	sent := map[uint16]uint64{}
	send := func(i int) {
		t.Helper()
		if _, err := d.TestRun(churnFrame(i), 1); err != nil {
			t.Fatal(err)
		}
		sent[uint16(20000+i)]++
	}
	busyRef := func() FlowRef {
		t.Helper()
		var ref FlowRef
		_ = d.Flows(func(f Flow) bool {
			if f.Key.Local.Port() == 20000 {
				ref = f.Ref
			}
			return true
		})
		return ref
	}
	send(0)
	first := busyRef()
	for i := 1; i <= 400; i++ {
		send(0) // the busy flow
		send(i)
		if i%5 == 0 {
			send(i) // some flows get a second packet
		}
		if i%3 == 0 {
			// Three busy flows that stay in the table and keep their
			// slots live, so that allocation has to take slots over.
			send(1001)
			send(1002)
			send(1003)
		}
	}
	if now := busyRef(); now.Tag == 0 {
		t.Errorf("busy flow lost its slot: first %+v, now %+v", first, now)
	}
	seen := 0
	err := d.Flows(func(f Flow) bool {
		seen++
		p := f.Key.Local.Port()
		if f.Packets != sent[p] || f.Bytes != sent[p]*uint64(len(churnFrame(0))) {
			t.Errorf("flow %v: %d packets %d bytes, sent %d", f.Key, f.Packets, f.Bytes, sent[p])
		}
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	if seen == 0 || seen > 16 {
		t.Errorf("%d flows in a table of 16", seen)
	}
	if d.flowCursor() < 400 {
		t.Errorf("cursor %d after 400 new flows", d.flowCursor())
	}
	st, err := d.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st.FlowInsertFail != 0 {
		t.Errorf("stats %+v", st)
	}
}

// TestFlowSlotTakeover: a new flow takes over the counter slot of an idle
// live flow; the old owner's counts move to its base and it gets a new
// slot on its next packet, so its counters stay exact.
func TestFlowSlotTakeover(t *testing.T) {
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
	flow := func(i int) Flow {
		t.Helper()
		r := d.NewFlowReader()
		k := FlowKey{Proto: 17, Local: netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 18, byte(i >> 8), byte(i)}), uint16(20000+i)),
			Remote: netipAP("198.19.0.1:53")}
		f, ok, err := r.Lookup(k)
		if err != nil || !ok {
			t.Fatalf("flow %d: ok=%v err=%v", i, ok, err)
		}
		return f
	}
	run(0, 3)
	old := flow(0)
	// Make the slot look idle for 2 s and point the cursor at it.
	var c hostqosHqFctr
	if err := d.objs.HqFctr.Lookup(old.Ref.Slot, &c); err != nil {
		t.Fatal(err)
	}
	c.LastNs -= 2_000_000_000
	if err := d.objs.HqFctr.Put(old.Ref.Slot, &c); err != nil {
		t.Fatal(err)
	}
	d.stateView().Fcursor = uint64(d.fctrN)*3 + uint64(old.Ref.Slot)

	run(1, 1) // takes flow 0's slot over
	taker := flow(1)
	if taker.Ref.Slot != old.Ref.Slot || taker.Packets != 1 {
		t.Fatalf("new flow %+v did not take slot %d over", taker.Ref, old.Ref.Slot)
	}
	moved := flow(0)
	if moved.Packets != 3 || moved.Ref.Tag != old.Ref.Tag {
		t.Errorf("old owner after takeover: %+v (packets %d)", moved.Ref, moved.Packets)
	}
	if _, ok := d.FlowCounters(old.Ref); ok {
		t.Error("FlowCounters still accepts the taken-over slot")
	}
	run(0, 2) // the old owner gets a new slot
	now := flow(0)
	if now.Packets != 5 || now.Ref.Slot == old.Ref.Slot || now.Ref.Tag == old.Ref.Tag {
		t.Errorf("old owner after its next packets: %+v, %d packets, want 5", now.Ref, now.Packets)
	}
	if f := flow(1); f.Packets != 1 {
		t.Errorf("taker has %d packets, want 1", f.Packets)
	}
}

func TestTestRunKernelTiming(t *testing.T) {
	d := openTest(t, Options{})
	verdict, ns, err := d.TimeRun(churnFrame(0), 1000)
	if err != nil {
		t.Fatal(err)
	}
	if ns == 0 || verdict != -1 {
		t.Errorf("verdict %d, %v per run", verdict, ns)
	}
}

// TestTupleSpaceLayout: the rules without app selectors form one tuple
// per distinct shape and family, in the order of their earliest rule; an
// ICMP rule is keyed under ICMP and ICMPv6; rules sharing a masked key are
// chained in policy order; app rules are indexed by app bit.
func TestTupleSpaceLayout(t *testing.T) {
	uid := uint32(1)
	c, err := compile(Policy{Rules: []Rule{
		{Slot: 0, Proto: 6, DSCPIn: -1, DSCP: -1},                                // v4+v6 TCP
		{Slot: 1, UID: &uid, DSCPIn: -1, DSCP: -1},                               // app bit 0
		{Slot: 2, Proto: 17, Remote: pfx("198.18.0.0/15"), DSCPIn: -1, DSCP: -1}, // v4 UDP /15
		{Slot: 3, DSCPIn: -1, DSCP: -1},                                          // everything
		{Slot: 4, Proto: 1, Local: pfx("2001:db8::/32"), DSCPIn: -1, DSCP: -1},   // v6 ICMP
		{Slot: 5, Proto: 6, RPortFrom: 10, RPortTo: 20, DSCPIn: -1, DSCP: -1},    // v4+v6 TCP, range
		{Slot: 6, Comm: "x", Proto: 17, DSCPIn: -1, DSCP: -1},                    // app bit 1
	}})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.appIdx, []uint32{1, 6}) {
		t.Errorf("app index %v, want [1 6]", c.appIdx)
	}
	mins := func(ts []hostqosHqTuple) []uint32 {
		var out []uint32
		for _, t := range ts {
			out = append(out, t.Min)
		}
		return out
	}
	// IPv4: {proto} (0, 5), {proto, remote /15} (2), {} (3). IPv6: {proto}
	// (0, 5), {} (3), {proto, local /32} (4).
	if got := mins(c.tuples[0]); !slices.Equal(got, []uint32{0, 2, 3}) {
		t.Errorf("IPv4 tuples by earliest rule %v, want [0 2 3]", got)
	}
	if got := mins(c.tuples[1]); !slices.Equal(got, []uint32{0, 3, 4}) {
		t.Errorf("IPv6 tuples by earliest rule %v, want [0 3 4]", got)
	}
	// A tuple whose keys share one protocol says so (the classifier skips
	// it for other protocols); the ICMP rule's tuple has two (ICMP, ICMPv6).
	if p0, p2 := c.tuples[0][0].Proto, c.tuples[1][2].Proto; p0 != 6 || p2 != 0 {
		t.Errorf("tuple protocols: IPv4 TCP tuple %d (want 6), IPv6 ICMP tuple %d (want 0, mixed)", p0, p2)
	}
	tcp4 := hostqosHqTssKey{Tuple: 0, Proto: 6}
	head, ok := c.tss[tcp4]
	if !ok || head.Rule != 0 || head.Next == 0 || c.tnodes[head.Next].Rule != 5 || c.tnodes[head.Next].Next != 0 {
		t.Errorf("IPv4 TCP chain: head %+v (found %v), nodes %+v; want rule 0 then rule 5", head, ok, c.tnodes)
	}
	for _, proto := range []uint8{1, 58} {
		k := hostqosHqTssKey{Tuple: uint32(maxTuples) + 2, Proto: proto}
		k.Src = c.rules[4].LocalAddr
		if n, ok := c.tss[k]; !ok || n.Rule != 4 {
			t.Errorf("IPv6 ICMP rule under protocol %d: %+v, %v", proto, n, ok)
		}
	}
}
