package dpbench

import (
	"fmt"
	"testing"

	"github.com/hostqos/hostqos/internal/testutil"
)

// TestMeasurements runs each measurement on one private datapath: the
// egress classifier with and without a policer, the ingress classifier
// with and without a download limit (each on the pass path: bestOf3
// refuses any other verdict) and the reservation policer (on the
// conformant path: Policing checks the counters). MeasurePerPacket,
// which opens its own datapath, runs in lab/bench's TestQuickCheap.
func TestMeasurements(t *testing.T) {
	testutil.NeedRoot(t)
	s, err := OpenScratch(0)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, on := range []bool{false, true} {
		r, err := PerPacket(s.DP, 100, 1000, on)
		if err != nil {
			t.Fatalf("egress, policer %v: %v", on, err)
		}
		if r.ClassifierNS <= 0 || r.EmptyNS <= 0 || r.Flows != 100 || r.Repeat != 1000 {
			t.Errorf("egress, policer %v: result %+v", on, r)
		}
		if r, err = IngressPerPacket(s.DP, 100, 1000, on); err != nil {
			t.Fatalf("ingress, download limit %v: %v", on, err)
		}
		if r.ClassifierNS <= 0 || r.EmptyNS <= 0 || r.Flows != 100 || r.Repeat != 1000 {
			t.Errorf("ingress, download limit %v: result %+v", on, r)
		}
	}
	r, err := Policing(s.DP, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if r.PlainNS <= 0 || r.ReservedNS <= 0 || r.EmptyNS <= 0 {
		t.Errorf("policing: result %+v", r)
	}
}

// TestMeasureRefusesNoFlows: a measurement among no flows is refused
// before a datapath is loaded.
func TestMeasureRefusesNoFlows(t *testing.T) {
	for _, measure := range []func(int, uint32, bool) (PerPacketResult, error){MeasurePerPacket, MeasureIngressPerPacket} {
		if _, err := measure(0, 1, false); err == nil {
			t.Error("a measurement among 0 flows succeeded")
		}
	}
}

// BenchmarkPerPacket reports the egress classifier's per-packet cost on a
// flow hit (BPF test-run), net of an empty program.
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

// TestVeth: the container measurements run each program on its own path
// (Veth checks the rules counted and the class handed on) and report
// every figure.
func TestVeth(t *testing.T) {
	testutil.NeedRoot(t)
	r, err := MeasureVeth(100, 1000, 20)
	if err != nil {
		t.Fatal(err)
	}
	for name, v := range map[string]float64{"empty": r.EmptyNS, "host hit": r.HostHitNS, "veth hit": r.VethHitNS,
		"host single": r.HostSingleNS, "veth single": r.VethSingleNS, "host first": r.HostFirstNS, "veth first": r.VethFirstNS,
		"fast path": r.FastPathNS, "tail into empty": r.TailEmptyNS} {
		if v <= 0 {
			t.Errorf("%s: %v ns, want > 0 (%+v)", name, v, r)
		}
	}
	if _, err := MeasureVeth(0, 1, 1); err == nil {
		t.Error("a measurement among 0 flows succeeded")
	}
}
