package datapath

import (
	"encoding/binary"
	"fmt"
	"testing"
)

// BenchmarkFlowRead measures reading the flow table with Flows (batch
// lookups); the ns/flow metric is the amortized cost of one flow's
// counters.
func BenchmarkFlowRead(b *testing.B) {
	for _, n := range []int{1000, 65536} {
		b.Run(fmt.Sprintf("flows=%d", n), func(b *testing.B) {
			d := openTest(b, Options{FlowTableSize: 65536})
			fillFlows(b, d, n)
			b.ResetTimer()
			seen := 0
			for i := 0; i < b.N; i++ {
				seen = 0
				if err := d.Flows(func(Flow) bool { seen++; return true }); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			if seen != n {
				b.Fatalf("saw %d flows, want %d", seen, n)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/flow")
		})
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
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/MaxRules, "ns/rule")
}

func fillFlows(tb testing.TB, d *Datapath, n int) {
	tb.Helper()
	keys := make([]hostqosHqFlowKey, n)
	vals := make([]hostqosHqFlow, n)
	for i := range keys {
		keys[i] = hostqosHqFlowKey{Family: famIPv4, Proto: 17, Sport: uint16(i), Dport: 53}
		keys[i].Src[0] = binary.NativeEndian.Uint32([]byte{198, 18, byte(i >> 16), byte(i >> 8)})
		keys[i].Dst[0] = binary.NativeEndian.Uint32([]byte{198, 19, 0, 1})
		vals[i] = hostqosHqFlow{Packets: uint64(i), Slot: slotNone}
	}
	if _, err := d.objs.HqFlows.BatchUpdate(keys, vals, nil); err != nil {
		tb.Fatal(err)
	}
}

// BenchmarkPerPacket reports the classifier's per-packet cost on a flow
// hit (BPF test-run), net of an empty program.
func BenchmarkPerPacket(b *testing.B) {
	needRoot(b)
	for _, n := range []int{10, 10_000, 100_000} {
		b.Run(fmt.Sprintf("flows=%d", n), func(b *testing.B) {
			var r PerPacketResult
			var err error
			for i := 0; i < b.N; i++ {
				if r, err = MeasurePerPacket(n, 200_000); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(r.EmptyNS, "empty-ns/pkt")
			b.ReportMetric(r.ClassifierNS, "hostqos-ns/pkt")
			b.ReportMetric(r.NetNS, "net-ns/pkt")
		})
	}
}

func TestMeasurePerPacket(t *testing.T) {
	needRoot(t)
	r, err := MeasurePerPacket(100, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if r.ClassifierNS <= 0 || r.Flows != 100 {
		t.Errorf("result %+v", r)
	}
	t.Logf("%+v", r)
}
