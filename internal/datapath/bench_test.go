package datapath

import (
	"fmt"
	"net/netip"
	"testing"
)

// BenchmarkFlowRead measures reading every flow's counters, in the same
// run: "scan" dumps the flow table on every read (the read path before the
// counter array: a BPF map iterator per read), "mmap" is Flows, which
// reads counters from the memory-mapped counter array and rescans the
// table only when flows came or went. The ns/flow metric is the amortized
// cost of one flow's counters. Flows are created by test-running the
// classifier, so each owns a real counter slot.
func BenchmarkFlowRead(b *testing.B) {
	for _, n := range []int{10_000, 65_000} {
		d := openTest(b, Options{FlowTableSize: 65536})
		if err := d.Apply(Policy{Rules: []Rule{{Slot: 1, Proto: 6, DSCPIn: -1, DSCP: 10}}}); err != nil {
			b.Fatal(err)
		}
		fillByRun(b, d, n)
		for _, path := range []string{"scan", "mmap"} {
			read := d.Flows
			if path == "scan" {
				read = d.flowsScanOnly
			}
			b.Run(fmt.Sprintf("flows=%d/path=%s", n, path), func(b *testing.B) {
				seen := 0
				var pkts uint64
				for b.Loop() {
					seen, pkts = 0, 0
					if err := read(func(f Flow) bool { seen++; pkts += f.Packets; return true }); err != nil {
						b.Fatal(err)
					}
				}
				if seen != n || pkts != uint64(n) {
					b.Fatalf("saw %d flows with %d packets, want %d", seen, pkts, n)
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/flow")
			})
		}
	}
}

// fillByRun creates n flows (TCP 198.18.x.y:p → 198.19.0.1:443) by
// test-running the classifier once on each.
func fillByRun(tb testing.TB, d *Datapath, n int) {
	tb.Helper()
	for i := 0; i < n; i++ {
		src := netip.AddrFrom4([4]byte{198, 18, byte(i >> 8), byte(i)})
		frame := BuildFrame(FrameSpec{Src: src, Dst: addr("198.19.0.1"), Proto: 6, SPort: uint16(10000 + i%50000), DPort: 443, Payload: 64})
		if _, err := d.TestRun(frame, 1); err != nil {
			tb.Fatal(err)
		}
	}
}

// BenchmarkRuleCounters measures reading all MaxRules per-CPU rule counters.
func BenchmarkRuleCounters(b *testing.B) {
	d := openTest(b, Options{})
	for i := 0; i < b.N; i++ {
		if _, err := d.RuleCounters(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(MaxRules), "ns/rule")
}
