package datapath

import "testing"

// TestLinkInBudget: a link's ingress budget (test-run packets arrive on
// lo, ifindex 1) drops UDP beyond it, counted as IN drops of the rule,
// never a TCP segment (TCP is held by its window); what no rule matches
// is counted as unmatched; removing the budget stops the drops.
func TestLinkInBudget(t *testing.T) {
	d := openTest(t, Options{})
	const rate = 8e6 // 1 MB/s: a level's UDP bucket holds 20 ms = 20 KB
	p := Policy{
		Rules:      []Rule{{Slot: 3, Remote: pfx("198.18.7.0/24"), DSCPIn: -1, DSCP: -1, InPrio: 4}},
		LinksIn:    []LinkIn{{Ifindex: 1, Rate: rate}},
		InPrioNone: 2,
	}
	if err := d.Apply(p); err != nil {
		t.Fatalf("apply: %v", err)
	}
	udp := BuildFrame(FrameSpec{Src: addr("198.18.7.1"), Dst: addr("198.18.0.1"), Proto: 17, SPort: 9, DPort: 9, Payload: 1000})
	tcp := BuildFrame(FrameSpec{Src: addr("198.18.7.1"), Dst: addr("198.18.0.1"), Proto: 6, SPort: 80, DPort: 40000, Payload: 1000})
	other := BuildFrame(FrameSpec{Src: addr("198.18.9.1"), Dst: addr("198.18.0.1"), Proto: 6, SPort: 80, DPort: 40001, Payload: 100})
	run := func(frame []byte, n int) (pass, drop int) {
		t.Helper()
		for range n {
			res, err := d.TestRunIngress(frame)
			if err != nil {
				t.Fatal(err)
			}
			switch res.Verdict {
			case verdictNext:
				pass++
			case verdictDrop:
				drop++
			}
		}
		return pass, drop
	}
	pass, drop := run(udp, 100)
	if pass < 15 || pass > 30 || drop != 100-pass {
		t.Errorf("UDP far above the link's budget: %d passed, %d dropped; want about 20 passed (the bucket), the rest dropped", pass, drop)
	}
	if tp, td := run(tcp, 50); tp != 50 || td != 0 {
		t.Errorf("TCP under a link budget: %d passed, %d dropped; want every segment passed", tp, td)
	}
	if op, _ := run(other, 10); op != 10 {
		t.Errorf("unmatched TCP: %d of 10 passed", op)
	}
	ctr, err := d.RuleCounters()
	if err != nil {
		t.Fatal(err)
	}
	if c := ctr[3]; c.RxPackets != 150 || c.RxDrops != uint64(drop) {
		t.Errorf("rule counters %+v: want 150 received, %d dropped", c, drop)
	}
	st, err := d.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st.RxUnmatchedPackets != 10 || st.RxUnmatchedBytes != 10*uint64(len(other)) || st.RxUnmatchedDrops != 0 {
		t.Errorf("unmatched received %d packets, %d bytes, %d drops; want 10, %d, 0", st.RxUnmatchedPackets, st.RxUnmatchedBytes, st.RxUnmatchedDrops, 10*len(other))
	}
	p.LinksIn = nil
	if err := d.Apply(p); err != nil {
		t.Fatalf("apply without a budget: %v", err)
	}
	if pass, drop := run(udp, 100); pass != 100 || drop != 0 {
		t.Errorf("UDP without a budget: %d passed, %d dropped; want all passed", pass, drop)
	}
	if levels, err := d.LinkInLevels(1); err != nil || levels != nil {
		t.Errorf("budget after removal: %+v, %v; want none", levels, err)
	}
}
