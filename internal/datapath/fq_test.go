package datapath

import (
	"testing"
	"time"
)

// Flow queueing classids: class i's general leaf 0x40+i becomes child
// 0xc000 + 16·i + k (k = 0 sparse, 1..8 a bucket); see bpf/fq.h.
const (
	fqMajor    = uint32(HTBMajor) << 16
	fqBase     = 0xc000
	fqStride   = 16
	fqBuckets  = 8
	fqLeafBase = 0x40
)

func fqChild(class, k int) uint32 { return fqMajor | uint32(fqBase+class*fqStride+k) }

// With flow queueing on, a flow's packets go to its class's sparse leaf
// until it sends more than a few KB in a window, then to one bucket of its
// own for good; flows started one after the other get different buckets;
// unclassified packets are the default class's; classids that are not a
// general leaf are left alone; and a flow silent for long enough is sparse
// again.
func TestFlowQueueing(t *testing.T) {
	d := openTest(t, Options{})
	p := Policy{Rules: []Rule{
		{Slot: 1, Proto: 17, Remote: pfx("198.18.1.0/24"), DSCPIn: -1, DSCP: -1, ClassID: fqMajor | fqLeafBase + 1},
		{Slot: 2, Proto: 17, Remote: pfx("198.18.2.0/24"), DSCPIn: -1, DSCP: -1, ClassID: fqMajor | 0x105},
	}, FlowQueueDefault: fqLeafBase + 3}
	if err := d.Apply(p); err != nil {
		t.Fatal(err)
	}
	run := func(f FrameSpec) uint32 {
		t.Helper()
		res, err := d.TestRun(BuildFrame(f), 1)
		if err != nil {
			t.Fatal(err)
		}
		return res.Priority
	}
	small := func(dst string, sport uint16) FrameSpec {
		return FrameSpec{Src: addr("198.18.0.1"), Dst: addr(dst), Proto: 17, SPort: sport, DPort: 9, Payload: 64}
	}
	big := func(dst string, sport uint16) FrameSpec {
		f := small(dst, sport)
		f.Payload = 1400
		return f
	}

	for i := 0; i < 20; i++ {
		if got := run(small("198.18.1.7", 1000)); got != fqChild(1, 0) {
			t.Fatalf("sparse packet %d of class 1: priority %#x, want %#x", i, got, fqChild(1, 0))
		}
	}
	if got := run(small("198.18.9.7", 1000)); got != fqChild(3, 0) {
		t.Errorf("unclassified sparse packet: priority %#x, want the default class's sparse leaf %#x", got, fqChild(3, 0))
	}
	if got := run(big("198.18.2.7", 1000)); got != fqMajor|0x105 {
		t.Errorf("a rule leaf's packet: priority %#x, want it unchanged", got)
	}

	bucketOf := func(sport uint16) uint32 {
		t.Helper()
		var last uint32
		for i := 0; i < 8; i++ {
			last = run(big("198.18.1.7", sport))
			if i == 0 && last != fqChild(1, 0) {
				t.Errorf("flow %d: first packet in %#x, want the sparse leaf", sport, last)
			}
		}
		if last < fqChild(1, 1) || last > fqChild(1, fqBuckets) {
			t.Fatalf("flow %d after 11 KB: priority %#x, want a bucket of class 1", sport, last)
		}
		for i := 0; i < 20; i++ {
			if got := run(small("198.18.1.7", sport)); got != last {
				t.Fatalf("bulk flow %d: packet %d in %#x, then %#x", sport, i, last, got)
			}
		}
		return last
	}
	seen := map[uint32]uint16{}
	for sport := uint16(2000); sport < 2004; sport++ {
		b := bucketOf(sport)
		if other, dup := seen[b]; dup {
			t.Errorf("flows %d and %d share bucket %#x", other, sport, b)
		}
		seen[b] = sport
	}

	time.Sleep(300 * time.Millisecond)
	if got := run(small("198.18.1.7", 2000)); got != fqChild(1, 0) {
		t.Errorf("bulk flow after 300 ms of silence: priority %#x, want the sparse leaf", got)
	}

	p.FlowQueueDefault = 0
	if err := d.Apply(p); err != nil {
		t.Fatal(err)
	}
	if got := run(big("198.18.1.7", 2001)); got != fqMajor|fqLeafBase+1 {
		t.Errorf("flow queueing off: priority %#x, want the general leaf", got)
	}
	if got := run(small("198.18.9.7", 1000)); got != 0 {
		t.Errorf("flow queueing off, unclassified: priority %#x, want 0", got)
	}
}
