package datapath

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strings"
	"testing"
)

const (
	verdictNext = -1
	verdictDrop = 2
)

func testPolicy() Policy {
	return Policy{Rules: []Rule{
		// 0: UDP to 198.18.1.0/24 ports 5000-5010 → EF, class 1:10.
		{Slot: 10, Proto: 17, Remote: pfx("198.18.1.0/24"), RPortFrom: 5000, RPortTo: 5010, DSCPIn: -1, DSCP: 46, ClassID: 0x10010},
		// 1: IPv6 TCP from local port 8080 to 2001:db8::/32 → AF41.
		{Slot: 11, Proto: 6, Remote: pfx("2001:db8::/32"), LPortFrom: 8080, DSCPIn: -1, DSCP: 34, ClassID: 0x10020},
		// 2: anything from 198.18.5.0/24 → drop.
		{Slot: 12, Local: pfx("198.18.5.0/24"), DSCPIn: -1, DSCP: -1, ActionCode: ActDrop},
		// 3: packets already marked AF11 (dscp 10) → observe only.
		{Slot: 13, DSCPIn: 10, DSCP: 0, ActionCode: ActObserve},
		// 4 and 5: precedence — both match TCP to 198.19.0.0/16, 4 wins.
		{Slot: 14, Proto: 6, Remote: pfx("198.19.0.0/16"), DSCPIn: -1, DSCP: 8},
		{Slot: 15, Proto: 6, Remote: pfx("198.19.7.0/24"), RPortFrom: 80, DSCPIn: -1, DSCP: 16},
		// 6: ICMP (also ICMPv6) → CS6, classid only.
		{Slot: 16, Proto: 1, DSCPIn: -1, DSCP: 48, ClassID: 0x10030},
		// 7: IPv4-only rule by local prefix (must not match IPv6).
		{Slot: 17, Local: pfx("0.0.0.0/0"), Proto: 17, LPortFrom: 7000, LPortTo: 7001, DSCPIn: -1, DSCP: 26},
		// 8: IPv6 prefix with non-byte-aligned length.
		{Slot: 18, Proto: 17, Local: pfx("2001:db8:8000::/33"), DSCPIn: -1, DSCP: 18},
	}}
}

func TestClassify(t *testing.T) {
	d := openTest(t, Options{})
	if err := d.Apply(testPolicy()); err != nil {
		t.Fatalf("apply: %v", err)
	}
	cases := []struct {
		name     string
		f        FrameSpec
		verdict  int32
		tos      uint8 // expected TOS/TC after the program
		priority uint32
		slot     int // -1 no rule
	}{
		{"v4 udp port range → EF, ECN kept", FrameSpec{Src: addr("198.18.0.1"), Dst: addr("198.18.1.9"), Proto: 17, SPort: 1234, DPort: 5003, TOS: 0x01}, verdictNext, 46<<2 | 1, 0x10010, 10},
		{"v4 udp port outside range", FrameSpec{Src: addr("198.18.0.1"), Dst: addr("198.18.1.9"), Proto: 17, SPort: 1234, DPort: 5011, TOS: 0x02}, verdictNext, 0x02, 0, -1},
		{"v4 udp other subnet", FrameSpec{Src: addr("198.18.0.1"), Dst: addr("198.18.2.9"), Proto: 17, SPort: 1234, DPort: 5003}, verdictNext, 0, 0, -1},
		{"v6 tcp local port → AF41, ECN CE kept", FrameSpec{Src: addr("2001:db8::1"), Dst: addr("2001:db8:1::2"), Proto: 6, SPort: 8080, DPort: 50000, TOS: 0x03}, verdictNext, 34<<2 | 3, 0x10020, 11},
		{"v6 tcp outside prefix", FrameSpec{Src: addr("2001:db8::1"), Dst: addr("2001:db9::2"), Proto: 6, SPort: 8080, DPort: 50000}, verdictNext, 0, 0, -1},
		{"drop by local prefix", FrameSpec{Src: addr("198.18.5.77"), Dst: addr("198.18.2.9"), Proto: 17, SPort: 1, DPort: 5003}, verdictDrop, 0, 0, 12},
		{"observe by dscp_in, no rewrite", FrameSpec{Src: addr("198.18.0.1"), Dst: addr("198.18.9.9"), Proto: 17, SPort: 9, DPort: 9, TOS: 10<<2 | 1}, verdictNext, 10<<2 | 1, 0, 13},
		{"precedence: first match wins", FrameSpec{Src: addr("198.18.0.1"), Dst: addr("198.19.7.7"), Proto: 6, SPort: 40000, DPort: 80}, verdictNext, 8 << 2, 0, 14},
		{"icmp v4", FrameSpec{Src: addr("198.18.0.1"), Dst: addr("198.19.7.7"), Proto: 1}, verdictNext, 48 << 2, 0x10030, 16},
		{"icmpv6 matches icmp rule", FrameSpec{Src: addr("2001:db8::1"), Dst: addr("2001:db8::2"), Proto: 58}, verdictNext, 48 << 2, 0x10030, 16},
		{"v4-only rule matches v4", FrameSpec{Src: addr("198.18.0.1"), Dst: addr("198.18.3.3"), Proto: 17, SPort: 7001, DPort: 1}, verdictNext, 26 << 2, 0, 17},
		{"v4-only rule skips v6", FrameSpec{Src: addr("2001:db9::1"), Dst: addr("2001:db9::3"), Proto: 17, SPort: 7001, DPort: 1}, verdictNext, 0, 0, -1},
		{"v6 /33 inside", FrameSpec{Src: addr("2001:db8:8000::1"), Dst: addr("2001:db9::3"), Proto: 17, SPort: 1, DPort: 1}, verdictNext, 18 << 2, 0, 18},
		{"v6 /33 outside", FrameSpec{Src: addr("2001:db8:7fff::1"), Dst: addr("2001:db9::3"), Proto: 17, SPort: 1, DPort: 1}, verdictNext, 0, 0, -1},
	}
	wantCtr := map[int]Counters{}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := BuildFrame(c.f)
			res, err := d.TestRun(in, 1)
			if err != nil {
				t.Fatal(err)
			}
			if res.Verdict != c.verdict {
				t.Errorf("verdict %d, want %d", res.Verdict, c.verdict)
			}
			if got := tosOf(res.Packet); got != c.tos {
				t.Errorf("tos %#x, want %#x", got, c.tos)
			}
			if res.Priority != c.priority {
				t.Errorf("priority %#x, want %#x", res.Priority, c.priority)
			}
			if c.f.Src.Is4() {
				ip := res.Packet[14:34]
				if got, want := binary.BigEndian.Uint16(ip[10:]), IPv4Checksum(ip); got != want {
					t.Errorf("IPv4 checksum %#04x, want %#04x", got, want)
				}
			}
			// Nothing but the TOS/TC bits may change.
			if c.verdict == verdictNext {
				out := append([]byte(nil), res.Packet...)
				exp := BuildFrame(FrameSpec{Src: c.f.Src, Dst: c.f.Dst, Proto: c.f.Proto, SPort: c.f.SPort, DPort: c.f.DPort, TOS: c.tos, Payload: c.f.Payload})
				if !bytes.Equal(out, exp) {
					t.Errorf("packet changed beyond the DSCP:\n got %x\nwant %x", out, exp)
				}
			}
			if c.slot >= 0 {
				w := wantCtr[c.slot]
				w.Packets++
				w.Bytes += uint64(len(in))
				if c.verdict == verdictDrop {
					w.Drops++
				}
				wantCtr[c.slot] = w
			}
		})
	}

	ctr, err := d.RuleCounters()
	if err != nil {
		t.Fatal(err)
	}
	for slot := range ctr {
		if ctr[slot] != wantCtr[slot] {
			t.Errorf("slot %d counters %+v, want %+v", slot, ctr[slot], wantCtr[slot])
		}
	}

	// Every case is its own flow; each saw one packet.
	nflows := 0
	err = d.Flows(func(f Flow) bool {
		nflows++
		if f.Packets != 1 {
			t.Errorf("flow %+v: %d packets, want 1", f.Key, f.Packets)
		}
		if f.RuleSlot == 12 && f.Drops != 1 {
			t.Errorf("dropped flow %+v: drops %d, want 1", f.Key, f.Drops)
		}
		if f.FirstSeenNS == 0 || f.LastSeenNS < f.FirstSeenNS {
			t.Errorf("flow %+v: seen %d..%d", f.Key, f.FirstSeenNS, f.LastSeenNS)
		}
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	if nflows != len(cases) {
		t.Errorf("%d flows, want %d", nflows, len(cases))
	}
	st, err := d.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st.Packets != uint64(len(cases)) || st.Drops != 1 || st.ParseErrors != 0 || st.Evaluations != uint64(len(cases)) {
		t.Errorf("stats %+v", st)
	}
}

func TestFlowCountersAndKey(t *testing.T) {
	d := openTest(t, Options{})
	if err := d.Apply(testPolicy()); err != nil {
		t.Fatal(err)
	}
	f := FrameSpec{Src: addr("198.18.0.1"), Dst: addr("198.18.1.9"), Proto: 17, SPort: 1234, DPort: 5003, Payload: 100}
	frame := BuildFrame(f)
	for i := 0; i < 5; i++ {
		if _, err := d.TestRun(frame, 1); err != nil {
			t.Fatal(err)
		}
	}
	var got []Flow
	if err := d.Flows(func(fl Flow) bool { got = append(got, fl); return true }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 {
		t.Fatalf("%d flows, want 1", len(got))
	}
	fl := got[0]
	want := FlowKey{Proto: 17, Local: netipAP("198.18.0.1:1234"), Remote: netipAP("198.18.1.9:5003")}
	if fl.Key != want {
		t.Errorf("key %+v, want %+v", fl.Key, want)
	}
	if fl.Packets != 5 || fl.Bytes != 5*uint64(len(frame)) || fl.RuleSlot != 10 || fl.PID != 0 {
		t.Errorf("flow %+v", fl)
	}
	st, _ := d.Stats()
	if st.Evaluations != 1 {
		t.Errorf("evaluations %d, want 1 (later packets hit the flow cache)", st.Evaluations)
	}
}

func TestGenerationFlip(t *testing.T) {
	d := openTest(t, Options{})
	rule := Rule{Slot: 1, Proto: 6, DSCPIn: -1, DSCP: 10}
	if err := d.Apply(Policy{Rules: []Rule{rule}}); err != nil {
		t.Fatal(err)
	}
	g1 := d.Generation()
	f := FrameSpec{Src: addr("2001:db8::1"), Dst: addr("2001:db8::2"), Proto: 6, SPort: 1, DPort: 2}
	res, err := d.TestRun(BuildFrame(f), 1)
	if err != nil {
		t.Fatal(err)
	}
	if tosOf(res.Packet) != 10<<2 {
		t.Fatalf("tos %#x before flip", tosOf(res.Packet))
	}
	rule2 := Rule{Slot: 2, Proto: 6, DSCPIn: -1, DSCP: 20, ClassID: 0x10005}
	if err := d.Apply(Policy{Rules: []Rule{rule2}}); err != nil {
		t.Fatal(err)
	}
	if d.Generation() != g1+1 {
		t.Fatalf("generation %d, want %d", d.Generation(), g1+1)
	}
	res, err = d.TestRun(BuildFrame(f), 1)
	if err != nil {
		t.Fatal(err)
	}
	if tosOf(res.Packet) != 20<<2 || res.Priority != 0x10005 {
		t.Fatalf("after flip: tos %#x priority %#x", tosOf(res.Packet), res.Priority)
	}
	n := 0
	_ = d.Flows(func(fl Flow) bool {
		n++
		if fl.Packets != 2 || fl.RuleSlot != 2 {
			t.Errorf("flow after flip %+v", fl)
		}
		return true
	})
	if n != 1 {
		t.Errorf("%d flows, want 1", n)
	}
	// Empty policy: nothing matches any more.
	if err := d.Apply(Policy{}); err != nil {
		t.Fatal(err)
	}
	res, _ = d.TestRun(BuildFrame(f), 1)
	if tosOf(res.Packet) != 0 || res.Priority != 0 {
		t.Errorf("empty policy: tos %#x priority %#x", tosOf(res.Packet), res.Priority)
	}
}

func TestNonIPAndMalformed(t *testing.T) {
	d := openTest(t, Options{})
	if err := d.Apply(Policy{Rules: []Rule{{Slot: 0, DSCPIn: -1, DSCP: 46, ActionCode: ActDrop}}}); err != nil {
		t.Fatal(err)
	}
	arp := make([]byte, 60)
	copy(arp, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 2, 0, 0, 0, 0, 1, 0x08, 0x06})
	for i := 14; i < len(arp); i++ {
		arp[i] = byte(i)
	}
	res, err := d.TestRun(arp, 1)
	if err != nil {
		t.Fatal(err)
	}
	if res.Verdict != verdictNext || !bytes.Equal(res.Packet, arp) {
		t.Errorf("ARP: verdict %d, changed %v", res.Verdict, !bytes.Equal(res.Packet, arp))
	}
	// Malformed IPv4 header (IHL 4): counted as parse error and passed.
	// (Test-run refuses frames shorter than an IP header, so truncation
	// can't be tested here.)
	bad := BuildFrame(FrameSpec{Src: addr("198.18.0.1"), Dst: addr("198.18.0.2"), Proto: 17})
	bad[14] = 0x44
	res, err = d.TestRun(bad, 1)
	if err != nil {
		t.Fatal(err)
	}
	if res.Verdict != verdictNext {
		t.Errorf("truncated: verdict %d", res.Verdict)
	}
	st, _ := d.Stats()
	if st.Packets != 2 || st.ParseErrors != 1 || st.Drops != 0 {
		t.Errorf("stats %+v", st)
	}
}

func TestIPv6ExtensionAndFragments(t *testing.T) {
	d := openTest(t, Options{})
	if err := d.Apply(Policy{Rules: []Rule{
		{Slot: 0, Proto: 17, RPortFrom: 53, DSCPIn: -1, DSCP: 12},
		{Slot: 1, Proto: 17, DSCPIn: -1, DSCP: 14}, // catches portless fragments
	}}); err != nil {
		t.Fatal(err)
	}
	base := BuildFrame(FrameSpec{Src: addr("2001:db8::1"), Dst: addr("2001:db8::2"), Proto: 17, SPort: 999, DPort: 53})
	// Insert hop-by-hop (8 bytes) + fragment header (8 bytes, first fragment).
	build := func(fragOff uint16) []byte {
		f := append([]byte(nil), base[:54]...)
		f[20] = 0 // next header: hop-by-hop
		hbh := []byte{44, 0, 1, 4, 0, 0, 0, 0}
		frag := []byte{17, 0, 0, 0, 0, 0, 0, 1}
		binary.BigEndian.PutUint16(frag[2:], fragOff<<3|1)
		f = append(f, hbh...)
		f = append(f, frag...)
		f = append(f, base[54:]...)
		binary.BigEndian.PutUint16(f[18:], uint16(len(f)-54))
		return f
	}
	res, err := d.TestRun(build(0), 1)
	if err != nil {
		t.Fatal(err)
	}
	if tosOf(res.Packet) != 12<<2 {
		t.Errorf("first fragment with ext headers: tos %#x, want %#x", tosOf(res.Packet), 12<<2)
	}
	res, err = d.TestRun(build(100), 1)
	if err != nil {
		t.Fatal(err)
	}
	if tosOf(res.Packet) != 14<<2 {
		t.Errorf("non-first fragment: tos %#x, want %#x (no ports)", tosOf(res.Packet), 14<<2)
	}
}

func TestApplyRejects(t *testing.T) {
	d := openTest(t, Options{})
	good := Policy{Rules: []Rule{{Slot: 1, DSCPIn: -1, DSCP: 10}}}
	if err := d.Apply(good); err != nil {
		t.Fatal(err)
	}
	g := d.Generation()
	uid := uint32(1000)
	many := Policy{}
	for i := 0; i <= MaxAppRules; i++ {
		many.Rules = append(many.Rules, Rule{Slot: uint16(i), UID: &uid, DSCPIn: -1, DSCP: -1})
	}
	bad := []struct {
		p    Policy
		want string
	}{
		{Policy{Rules: []Rule{{Slot: 1, DSCPIn: -1, DSCP: 64}}}, "DSCP 64"},
		{Policy{Rules: []Rule{{Slot: 1, DSCPIn: -1, DSCP: 1}, {Slot: 1, DSCPIn: -1, DSCP: 1}}}, "slot 1 already used"},
		{Policy{Rules: []Rule{{Slot: uint16(MaxRules), DSCPIn: -1, DSCP: 1}}}, "out of range"},
		{Policy{Rules: []Rule{{Slot: 2, Local: pfx("198.18.0.0/15"), Remote: pfx("2001:db8::/32"), DSCPIn: -1, DSCP: 1}}}, "different address families"},
		{Policy{Rules: []Rule{{Slot: 2, LPortFrom: 10, LPortTo: 5, DSCPIn: -1, DSCP: 1}}}, "local ports"},
		{Policy{Rules: []Rule{{Slot: 2, Comm: "a-very-long-command-name", DSCPIn: -1, DSCP: 1}}}, "longer than 15"},
		{many, fmt.Sprintf("more than %d rules with app selectors", MaxAppRules)},
	}
	for _, b := range bad {
		err := d.Apply(b.p)
		if err == nil || !strings.Contains(err.Error(), b.want) {
			t.Errorf("apply: error %v, want one containing %q", err, b.want)
		}
	}
	if d.Generation() != g {
		t.Errorf("rejected policies changed the generation")
	}
}
