package datapath

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"testing"
)

// fuzzPolicy drops only IPv4 packets from 198.18.5.0/24 and marks or
// observes others.
func fuzzPolicy() Policy {
	return Policy{Rules: []Rule{
		{Slot: 0, Local: pfx("198.18.5.0/24"), DSCPIn: -1, DSCP: -1, ActionCode: ActDrop},
		{Slot: 1, Proto: 17, Remote: pfx("198.18.1.0/24"), RPortFrom: 5000, RPortTo: 5010, DSCPIn: -1, DSCP: 46, ClassID: 0x10010},
		{Slot: 2, Proto: 6, Remote: pfx("2001:db8::/32"), LPortFrom: 8080, DSCPIn: -1, DSCP: 34, ClassID: 0x10020},
		{Slot: 3, DSCPIn: 10, DSCP: 0, ActionCode: ActObserve},
		{Slot: 4, Proto: 1, DSCPIn: -1, DSCP: 48},
	}}
}

// managedDrop reports whether frame is one the fuzz policy may drop: IPv4
// from 198.18.5.0/24 (whatever else is wrong with it).
func managedDrop(frame []byte) bool {
	return len(frame) >= 30 && binary.BigEndian.Uint16(frame[12:]) == 0x0800 && bytes.Equal(frame[26:29], []byte{198, 18, 5})
}

// FuzzEgressFrames runs random and mutated frames through the egress
// classifier (BPF test-run) under fuzzPolicy. Whatever the frame:
//   - it is passed on (TCX_NEXT) or dropped, and dropped only when a drop
//     rule can match it: unmanaged traffic is never dropped;
//   - a passed frame leaves unchanged but for the DSCP bits of its IPv4
//     TOS (and the header checksum) or IPv6 traffic class; ECN bits are
//     kept, and a valid IPv4 header checksum stays valid;
//   - the counters agree: one more packet seen, one more drop exactly when
//     dropped (by rule 0), at most one rule counted.
//
// Needs root (it loads the datapath); without -fuzz it runs the seeds and
// testdata/fuzz/FuzzEgressFrames.
func FuzzEgressFrames(f *testing.F) {
	for _, s := range []FrameSpec{
		{Src: addr("198.18.0.1"), Dst: addr("198.18.1.9"), Proto: 17, SPort: 1234, DPort: 5003, TOS: 0x01},
		{Src: addr("198.18.0.1"), Dst: addr("198.18.1.9"), Proto: 17, SPort: 1234, DPort: 5011, TOS: 0x02, Payload: 100},
		{Src: addr("198.18.5.7"), Dst: addr("198.18.2.9"), Proto: 17, SPort: 1, DPort: 5003},
		{Src: addr("198.18.5.7"), Dst: addr("198.18.2.9"), Proto: 6, SPort: 1, DPort: 80},
		{Src: addr("198.18.0.1"), Dst: addr("198.19.7.7"), Proto: 6, SPort: 40000, DPort: 80, TOS: 10<<2 | 1},
		{Src: addr("198.18.0.1"), Dst: addr("198.19.7.7"), Proto: 1},
		{Src: addr("198.18.0.1"), Dst: addr("198.19.7.7"), Proto: 47, Payload: 20},
		{Src: addr("2001:db8::1"), Dst: addr("2001:db8:1::2"), Proto: 6, SPort: 8080, DPort: 50000, TOS: 0x03},
		{Src: addr("2001:db8::1"), Dst: addr("2001:db9::2"), Proto: 17, SPort: 53, DPort: 53},
		{Src: addr("2001:db8::1"), Dst: addr("2001:db8::2"), Proto: 58},
	} {
		f.Add(BuildFrame(s))
	}
	// IPv4 with options; IPv6 with hop-by-hop and fragment headers; ARP.
	v4opt := BuildFrame(FrameSpec{Src: addr("198.18.0.1"), Dst: addr("198.18.1.9"), Proto: 17, SPort: 9, DPort: 5005})
	v4opt = append(append(append([]byte{}, v4opt[:34]...), 1, 1, 1, 0), v4opt[34:]...)
	v4opt[14] = 0x46
	binary.BigEndian.PutUint16(v4opt[16:], uint16(len(v4opt)-14))
	binary.BigEndian.PutUint16(v4opt[24:], 0)
	binary.BigEndian.PutUint16(v4opt[24:], IPv4Checksum(v4opt[14:38]))
	f.Add(v4opt)
	v6 := BuildFrame(FrameSpec{Src: addr("2001:db8::1"), Dst: addr("2001:db8::2"), Proto: 17, SPort: 999, DPort: 53})
	ext := append(append([]byte{}, v6[:54]...), 44, 0, 1, 4, 0, 0, 0, 0, 17, 0, 0, 0x19, 0, 0, 0, 1)
	ext = append(ext, v6[54:]...)
	ext[20] = 0
	binary.BigEndian.PutUint16(ext[18:], uint16(len(ext)-54))
	f.Add(ext)
	f.Add(append([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 2, 0, 0, 0, 0, 1, 0x08, 0x06}, make([]byte, 46)...))

	d := openTest(f, Options{})
	if err := d.Apply(fuzzPolicy()); err != nil {
		f.Fatalf("apply: %v", err)
	}
	f.Fuzz(func(t *testing.T, frame []byte) { _, _ = checkEgressFrame(t, d, frame, true) })
}

// TestEgressRandomFrames runs the checks of FuzzEgressFrames on a fixed
// set of random and mutated frames (a seeded generator: the same frames
// every run): the fuzzer's coverage guidance sees only Go code, not the
// BPF program, so mutations aimed at the headers it parses are made here.
func TestEgressRandomFrames(t *testing.T) {
	d := openTest(t, Options{})
	if err := d.Apply(fuzzPolicy()); err != nil {
		t.Fatalf("apply: %v", err)
	}
	rng := rand.New(rand.NewPCG(9, 4))
	addrs4 := []string{"198.18.5.7", "198.18.0.1", "198.18.1.9", "198.19.7.7"}
	addrs6 := []string{"2001:db8::1", "2001:db8:1::2", "2001:db9::2"}
	protos := []uint8{6, 17, 1, 58, 47, 0}
	const frames = 1000
	drops, marks, ran := 0, 0, 0
	ctr0, err := d.RuleCounters()
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < frames && !t.Failed(); i++ {
		s := FrameSpec{Proto: protos[rng.IntN(len(protos))], SPort: uint16(4990 + rng.IntN(30)), DPort: uint16(4990 + rng.IntN(30)),
			TOS: uint8(rng.IntN(256)), Payload: rng.IntN(64)}
		if rng.IntN(2) == 0 {
			s.Src, s.Dst = addr(addrs4[rng.IntN(len(addrs4))]), addr(addrs4[rng.IntN(len(addrs4))])
		} else {
			s.Src, s.Dst = addr(addrs6[rng.IntN(len(addrs6))]), addr(addrs6[rng.IntN(len(addrs6))])
			if rng.IntN(3) == 0 {
				s.SPort = 8080
			}
		}
		frame := BuildFrame(s)
		for n := rng.IntN(4); n > 0; n-- { // mutate header bytes
			switch rng.IntN(5) {
			case 0: // ethertype
				binary.BigEndian.PutUint16(frame[12:], []uint16{0x0800, 0x86dd, 0x8100, 0x0806, uint16(rng.Uint32())}[rng.IntN(5)])
			case 1: // IPv4 version/IHL or IPv6 version/traffic class
				frame[14] = byte(rng.Uint32())
			case 2: // IPv4 protocol or IPv6 next header (extension headers)
				frame[14+9-3*boolInt(frame[12] == 0x86)] = []byte{0, 43, 44, 60, 51, 50, 59, 6, 17, 58, byte(rng.Uint32())}[rng.IntN(11)]
			case 3: // lengths, fragment fields
				frame[16+rng.IntN(6)] = byte(rng.Uint32())
			default: // any byte of the first 80
				frame[rng.IntN(min(len(frame), 80))] = byte(rng.Uint32())
			}
		}
		if rng.IntN(4) == 0 { // truncated
			frame = frame[:14+rng.IntN(len(frame)-13)]
		}
		dropped, marked := checkEgressFrame(t, d, frame, false)
		drops += boolInt(dropped)
		marks += boolInt(marked)
		ran++
	}
	ctr1, err := d.RuleCounters()
	if err != nil {
		t.Fatal(err)
	}
	checkRuleCounters(t, ctr0, ctr1, ran, drops)
	t.Logf("%d frames: %d dropped, %d marked", frames, drops, marks)
	if drops == 0 || marks == 0 {
		t.Errorf("the generator made no frame that a rule drops (%d) or marks (%d): the checks checked nothing", drops, marks)
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// checkEgressFrame runs one frame through the egress classifier and checks
// what FuzzEgressFrames promises.
// It returns whether the frame was dropped and whether it was marked.
// With perRule it also checks the rule counters around this one frame
// (reading them costs a dump of every rule slot; TestEgressRandomFrames
// checks them once over the whole batch instead).
func checkEgressFrame(t *testing.T, d *Datapath, frame []byte, perRule bool) (dropped, marked bool) {
	t.Helper()
	st0, err := d.Stats()
	if err != nil {
		t.Fatal(err)
	}
	var ctr0, ctr1 []Counters
	if perRule {
		if ctr0, err = d.RuleCounters(); err != nil {
			t.Fatal(err)
		}
	}
	res, err := d.TestRun(frame, 1)
	if err != nil {
		return false, false // test-run refuses frames shorter than Ethernet or too long
	}
	st1, err := d.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if perRule {
		if ctr1, err = d.RuleCounters(); err != nil {
			t.Fatal(err)
		}
	}
	dropped = res.Verdict == verdictDrop
	marked = !dropped && !bytes.Equal(frame, res.Packet)
	switch {
	case dropped && !managedDrop(frame):
		t.Fatalf("unmanaged frame dropped: %x", frame)
	case !dropped && res.Verdict != verdictNext:
		t.Fatalf("verdict %d, want TCX_NEXT (%d) or drop (%d): %x", res.Verdict, verdictNext, verdictDrop, frame)
	case !dropped:
		checkOnlyDSCPChanged(t, frame, res.Packet)
	}

	if st1.Packets != st0.Packets+1 {
		t.Errorf("packets seen %d → %d, want one more", st0.Packets, st1.Packets)
	}
	if wantDrops := st0.Drops + map[bool]uint64{true: 1}[dropped]; st1.Drops != wantDrops {
		t.Errorf("drops %d → %d with verdict %d", st0.Drops, st1.Drops, res.Verdict)
	}
	if st1.ParseErrors > st0.ParseErrors+1 || st1.Classified > st0.Classified+1 {
		t.Errorf("stats %+v → %+v for one packet", st0, st1)
	}
	if perRule {
		checkRuleCounters(t, ctr0, ctr1, 1, boolInt(dropped))
		for i := range ctr1 {
			if ctr1[i].Packets-ctr0[i].Packets == 1 && ctr1[i].Bytes-ctr0[i].Bytes != uint64(len(frame)) {
				t.Errorf("rule %d counted %d bytes for a %d-byte frame", i, ctr1[i].Bytes-ctr0[i].Bytes, len(frame))
			}
		}
	}
	if t.Failed() {
		t.Logf("frame %x", frame)
	}
	return dropped, marked
}

// checkRuleCounters checks the rule counters across frames test-runs of
// which drops were dropped: at most one rule counts each frame, only rule
// 0 drops, and it counted every drop.
func checkRuleCounters(t *testing.T, ctr0, ctr1 []Counters, frames, drops int) {
	t.Helper()
	var counted uint64
	for i := range ctr1 {
		dp, dd := ctr1[i].Packets-ctr0[i].Packets, ctr1[i].Drops-ctr0[i].Drops
		if dd > dp {
			t.Errorf("rule %d counters %+v → %+v: more drops than packets", i, ctr0[i], ctr1[i])
		}
		if dd > 0 && i != 0 {
			t.Errorf("rule %d counted %d drops; only rule 0 drops", i, dd)
		}
		counted += dp
	}
	if counted > uint64(frames) {
		t.Errorf("rules counted %d packets for %d frames", counted, frames)
	}
	if got := ctr1[0].Drops - ctr0[0].Drops; got != uint64(drops) {
		t.Errorf("rule 0 counted %d drops, %d frames were dropped", got, drops)
	}
}

// checkOnlyDSCPChanged fails unless out equals in but for the DSCP bits
// (and the IPv4 header checksum, which then must stay valid if it was).
func checkOnlyDSCPChanged(t *testing.T, in, out []byte) {
	t.Helper()
	if len(out) != len(in) {
		t.Fatalf("frame length %d → %d", len(in), len(out))
	}
	diff := func(i int) bool { return in[i] != out[i] }
	et := binary.BigEndian.Uint16(in[12:])
	for i := range in {
		if !diff(i) {
			continue
		}
		switch {
		case et == 0x0800 && i == 15 && in[15]&3 == out[15]&3: // DSCP, ECN kept
		case et == 0x0800 && (i == 24 || i == 25) && diff(15):
		case et == 0x86dd && i == 14 && in[14]&0xf0 == out[14]&0xf0: // version kept
		case et == 0x86dd && i == 15 && in[15]&0x3f == out[15]&0x3f: // ECN and flow label kept
		default:
			t.Fatalf("byte %d changed %#02x → %#02x (only the DSCP may change):\n in %x\nout %x", i, in[i], out[i], in, out)
		}
	}
	if et == 0x0800 && len(in) >= 34 && diff(15) && in[14] == 0x45 {
		if binary.BigEndian.Uint16(in[24:]) == IPv4Checksum(in[14:34]) && binary.BigEndian.Uint16(out[24:]) != IPv4Checksum(out[14:34]) {
			t.Fatalf("IPv4 checksum no longer valid after marking:\n in %x\nout %x", in, out)
		}
	}
}
