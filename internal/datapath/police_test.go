package datapath

import (
	"strings"
	"testing"
	"time"
)

// policeRun test-runs frames (cycling through them) n times and returns
// how many passed, checking each verdict's marking, and the wall time the
// runs took (the bucket refills meanwhile).
func policeRun(t *testing.T, d *Datapath, frames [][]byte, n int, tos uint8) (passed int, took time.Duration) {
	t.Helper()
	start := time.Now()
	for i := 0; i < n; i++ {
		res, err := d.TestRun(frames[i%len(frames)], 1)
		if err != nil {
			t.Fatal(err)
		}
		switch res.Verdict {
		case verdictNext:
			passed++
			if got := tosOf(res.Packet); got != tos {
				t.Errorf("run %d passed with tos %#x, want %#x", i, got, tos)
			}
		case verdictDrop:
		default:
			t.Fatalf("run %d: verdict %d", i, res.Verdict)
		}
	}
	return passed, time.Since(start)
}

// refill is how many more frames of size bytes a bucket of rate bit/s can
// have taken in during d: what a slow machine may legitimately let pass
// beyond the burst.
func refill(d time.Duration, rate uint64, size int) int {
	return int(d.Seconds()*float64(rate)/8/float64(size)) + 1
}

func TestPolicer(t *testing.T) {
	d := openTest(t, Options{})
	const size = 1000 // frame bytes: the policer counts skb->len
	v4 := BuildFrame(FrameSpec{Src: addr("198.18.0.1"), Dst: addr("198.18.1.9"), Proto: 17, SPort: 1000, DPort: 6000, Payload: size - 14 - 20 - 8})
	v6a := BuildFrame(FrameSpec{Src: addr("2001:db8::1"), Dst: addr("2001:db8:1::9"), Proto: 17, SPort: 1000, DPort: 6000, Payload: size - 14 - 40 - 8})
	v6b := BuildFrame(FrameSpec{Src: addr("2001:db8::1"), Dst: addr("2001:db8:1::9"), Proto: 17, SPort: 1001, DPort: 6000, Payload: size - 14 - 40 - 8})
	fast := BuildFrame(FrameSpec{Src: addr("198.18.0.1"), Dst: addr("198.18.2.9"), Proto: 17, SPort: 1000, DPort: 6000, Payload: size - 14 - 20 - 8})
	if len(v4) != size || len(v6a) != size {
		t.Fatalf("frame sizes %d, %d", len(v4), len(v6a))
	}
	// 8 kbit/s = 1000 bytes (one frame) a second: a test run refills a
	// negligible fraction of a frame.
	const slow = 8000
	pol := func(burst4, burst6 uint32) Policy {
		return Policy{Rules: []Rule{
			{Slot: 20, Proto: 17, Remote: pfx("198.18.1.0/24"), DSCPIn: -1, DSCP: 46, PoliceRate: slow, PoliceBurst: burst4},
			{Slot: 21, Proto: 17, Remote: pfx("2001:db8:1::/48"), DSCPIn: -1, DSCP: 34, PoliceRate: slow, PoliceBurst: burst6},
			{Slot: 22, Proto: 17, Remote: pfx("198.18.2.0/24"), DSCPIn: -1, DSCP: 10, PoliceRate: 1e9, PoliceBurst: 64 << 10},
			{Slot: 23, Proto: 17, Remote: pfx("198.18.3.0/24"), DSCPIn: -1, DSCP: 12, PoliceRate: 8e6, PoliceBurst: 1514},
		}}
	}
	if err := d.Apply(pol(3*size, 2*size)); err != nil {
		t.Fatal(err)
	}
	want := map[int]Counters{}
	check := func(name string, slot, passed, n, burst int, took time.Duration) {
		t.Helper()
		if hi := burst + refill(took, slow, size); passed < burst || passed > hi {
			t.Errorf("%s: %d of %d frames passed, want %d (up to %d after %v of refill)", name, passed, n, burst, hi, took)
		}
		w := want[slot]
		w.Packets += uint64(n)
		w.Bytes += uint64(n * size)
		w.Drops += uint64(n - passed)
		want[slot] = w
	}

	// A full bucket of 3 frames, then drops; passed frames are marked.
	p4, took := policeRun(t, d, [][]byte{v4}, 10, 46<<2)
	check("IPv4, burst 3", 20, p4, 10, 3, took)
	// One policer per rule, shared by its flows: two IPv6 flows take 2
	// frames between them.
	p6, took := policeRun(t, d, [][]byte{v6a, v6b}, 10, 34<<2)
	check("IPv6, two flows, burst 2", 21, p6, 10, 2, took)
	// Traffic inside the policer's rate and burst is untouched.
	pf, _ := policeRun(t, d, [][]byte{fast}, 20, 10<<2)
	if pf != 20 {
		t.Errorf("1 gbit policer passed %d of 20 frames", pf)
	}
	want[22] = Counters{Packets: 20, Bytes: 20 * size}

	// A flow that keeps to its contract is never dropped, even with a
	// bucket of one frame, which the policer's tick-resolution time alone
	// would get wrong: 1000-byte frames at 8 mbit/s cost 1 ms each, sent
	// 2 ms or more apart (a slow machine only widens the gaps).
	paced := BuildFrame(FrameSpec{Src: addr("198.18.0.1"), Dst: addr("198.18.3.9"), Proto: 17, SPort: 1000, DPort: 6000, Payload: size - 14 - 20 - 8})
	for i := 0; i < 20; i++ {
		if i > 0 {
			time.Sleep(2 * time.Millisecond)
		}
		if p, _ := policeRun(t, d, [][]byte{paced}, 1, 12<<2); p != 1 {
			t.Fatalf("conforming frame %d dropped", i)
		}
	}
	want[23] = Counters{Packets: 20, Bytes: 20 * size}

	// Applying the same policer again keeps its (empty) bucket ...
	if err := d.Apply(pol(3*size, 2*size)); err != nil {
		t.Fatal(err)
	}
	p4b, took := policeRun(t, d, [][]byte{v4}, 2, 46<<2)
	if hi := refill(took, slow, size) + 1; p4b > hi {
		t.Errorf("same policer re-applied: %d of 2 frames passed, want at most %d (the bucket stays drained)", p4b, hi)
	}
	w := want[20]
	w.Packets, w.Bytes, w.Drops = w.Packets+2, w.Bytes+2*size, w.Drops+uint64(2-p4b)
	want[20] = w
	// ... a changed one starts full.
	if err := d.Apply(pol(5*size, 2*size)); err != nil {
		t.Fatal(err)
	}
	p4c, took := policeRun(t, d, [][]byte{v4}, 8, 46<<2)
	check("IPv4, burst changed to 5", 20, p4c, 8, 5, took)

	ctr, err := d.RuleCounters()
	if err != nil {
		t.Fatal(err)
	}
	for _, slot := range []int{20, 21, 22, 23} {
		if ctr[slot] != want[slot] {
			t.Errorf("slot %d counters %+v, want %+v", slot, ctr[slot], want[slot])
		}
	}
	// Flow counters carry the same drops.
	var flowDrops, flowPackets uint64
	if err := d.Flows(func(f Flow) bool {
		if f.RuleSlot == 20 || f.RuleSlot == 21 {
			flowDrops += f.Drops
			flowPackets += f.Packets
		}
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if wd := want[20].Drops + want[21].Drops; flowDrops != wd || flowPackets != want[20].Packets+want[21].Packets {
		t.Errorf("flow counters: %d packets %d drops, want %d and %d", flowPackets, flowDrops, want[20].Packets+want[21].Packets, wd)
	}
	st, err := d.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if wd := want[20].Drops + want[21].Drops; st.Drops != wd {
		t.Errorf("datapath drops %d, want %d", st.Drops, wd)
	}
}

func TestPolicerCompileErrors(t *testing.T) {
	for _, c := range []struct {
		r    Rule
		want string
	}{
		{Rule{Slot: 1, DSCPIn: -1, DSCP: -1, ActionCode: ActDrop, PoliceRate: 1e6, PoliceBurst: 1500}, "needs action pass"},
		{Rule{Slot: 1, DSCPIn: -1, DSCP: -1, ActionCode: ActObserve, PoliceRate: 1e6, PoliceBurst: 1500}, "needs action pass"},
		{Rule{Slot: 1, DSCPIn: -1, DSCP: -1, PoliceRate: 1e6}, "burst 0"},
	} {
		if _, err := compile(Policy{Rules: []Rule{c.r}}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want %q", c.r, err, c.want)
		}
	}
}
