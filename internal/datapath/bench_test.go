package datapath

import (
	"fmt"
	"github.com/hostqos/hostqos/internal/testutil"
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

// BenchmarkPerPacket reports the classifier's per-packet cost on a flow
// hit (BPF test-run), net of an empty program.
func BenchmarkPerPacket(b *testing.B) {
	testutil.NeedRoot(b)
	for _, n := range []int{10, 10_000, 100_000} {
		b.Run(fmt.Sprintf("flows=%d", n), func(b *testing.B) {
			var r PerPacketResult
			var err error
			for i := 0; i < b.N; i++ {
				if r, err = MeasurePerPacket(n, 200_000, false); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(r.EmptyNS, "empty-ns/pkt")
			b.ReportMetric(r.ClassifierNS, "hostqos-ns/pkt")
			b.ReportMetric(r.NetNS, "net-ns/pkt")
		})
	}
}

// TestMeasurePerPacket runs the egress benchmark with and without a
// policer on the package's shared datapath (lab/bench's TestQuickCheap
// runs MeasurePerPacket itself, which opens its own).
func TestMeasurePerPacket(t *testing.T) {
	for _, police := range []bool{false, true} {
		r, err := openTest(t, Options{}).measurePerPacket(100, 1000, police)
		if err != nil {
			t.Fatal(err)
		}
		if r.ClassifierNS <= 0 || r.Flows != 100 {
			t.Errorf("police %v: result %+v", police, r)
		}
		t.Logf("police %v: %+v", police, r)
	}
}

// TestMeasureIngressPerPacket: the ingress benchmark runs its program on
// the pass path (timeNet refuses any other verdict) with and without a
// download limit (the latter on the package's shared datapath).
func TestMeasureIngressPerPacket(t *testing.T) {
	testutil.NeedRoot(t)
	for _, limit := range []bool{false, true} {
		measure := MeasureIngressPerPacket
		if limit {
			measure = openTest(t, Options{}).measureIngressPerPacket
		}
		r, err := measure(100, 1000, limit)
		if err != nil {
			t.Fatal(err)
		}
		if r.ClassifierNS <= 0 || r.Flows != 100 {
			t.Errorf("limit %v: result %+v", limit, r)
		}
	}
}
