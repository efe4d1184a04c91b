package rtchanlab

import (
	"math"
	"reflect"
	"testing"

	"github.com/hostqos/hostqos/internal/plot"
	"github.com/hostqos/hostqos/rtchan"
)

// These tests run the seed's own evaluation (Table 2b parameters, Table 3
// workload, 60 KB messages, 32K packets with the first and last 2K ignored)
// on the null device in virtual time, and assert the seed's conclusions.

func checkRTClean(t *testing.T, r Result) {
	t.Helper()
	for _, c := range r.Channels {
		if c.BestEffort {
			continue
		}
		if c.Misses != 0 || c.TotalMisses != 0 || c.MsgMisses != 0 {
			t.Errorf("%s: %s missed %d packet deadlines (%d over the run)", r.Name, c.Name, c.Misses, c.TotalMisses)
		}
		if c.Drops != 0 || c.TotalDrops != 0 {
			t.Errorf("%s: %s dropped %d packets (%d over the run)", r.Name, c.Name, c.Drops, c.TotalDrops)
		}
		if c.MinLaxity < 0 {
			t.Errorf("%s: %s min laxity %v", r.Name, c.Name, c.MinLaxity)
		}
		if c.Msgs == 0 {
			t.Errorf("%s: %s completed no message", r.Name, c.Name)
		}
	}
}

func within(got, want, rel float64) bool { return math.Abs(got-want) <= rel*want }

// Fig. 7: compliant channels keep their guarantees at every best-effort
// load up to overload, and best-effort throughput rises linearly until the
// system capacity, then saturates.
func TestHqrtFig7GuaranteesUnderBestEffortLoad(t *testing.T) {
	loads := []float64{0, 1000, 2000, 3000, 4000, 5000, 6000, 8000}
	var res []Result
	for _, l := range loads {
		r, err := VariantExperiment(VariantFig7, l, false).Run()
		if err != nil {
			t.Fatal(err)
		}
		checkRTClean(t, r)
		for _, c := range r.Channels[:3] {
			if !within(c.ThroughputKBs, c.OfferedKBs, 0.02) {
				t.Errorf("%s: %s throughput %.0f KB/s, reserved %.0f", r.Name, c.Name, c.ThroughputKBs, c.OfferedKBs)
			}
		}
		res = append(res, r)
	}
	sat := res[len(res)-1].Channels[3].ThroughputKBs
	if sat < 3000 {
		t.Fatalf("best-effort saturates at %.0f KB/s; expected the remaining capacity (> 3000)", sat)
	}
	for i, l := range loads {
		be := res[i].Channels[3]
		switch {
		case l <= 0.85*sat:
			if !within(be.ThroughputKBs, l, 0.03) && !(l == 0 && be.ThroughputKBs == 0) {
				t.Errorf("below capacity: best effort offered %.0f got %.0f KB/s", l, be.ThroughputKBs)
			}
			if be.Drops != 0 {
				t.Errorf("below capacity: best effort dropped %d at %.0f KB/s", be.Drops, l)
			}
		case l >= 1.2*sat:
			if be.ThroughputKBs < 0.95*sat {
				t.Errorf("overload %.0f: best effort %.0f KB/s, saturation %.0f", l, be.ThroughputKBs, sat)
			}
			if be.Drops == 0 {
				t.Errorf("overload %.0f: best effort dropped nothing", l)
			}
		}
	}
}

// Fig. 8: channel 0 sends faster than R_max; it gets only its reserved
// service and only it drops; nobody misses a deadline.
func TestHqrtFig8RmaxViolation(t *testing.T) {
	for _, f := range []float64{2, 4} {
		e := VariantExperiment(VariantFig7, 1900, false)
		e.Loads[0].RateFactor = f
		r, err := e.Run()
		if err != nil {
			t.Fatal(err)
		}
		ch0 := r.Channels[0]
		if !within(ch0.ThroughputKBs, 1200, 0.02) {
			t.Errorf("factor %g: ch0 throughput %.0f KB/s, reserved 1200", f, ch0.ThroughputKBs)
		}
		if ch0.Drops == 0 {
			t.Errorf("factor %g: ch0 dropped nothing", f)
		}
		if ch0.Misses != 0 || ch0.MinLaxity < 0 {
			t.Errorf("factor %g: ch0 missed %d deadlines", f, ch0.Misses)
		}
		r.Channels = r.Channels[1:]
		checkRTClean(t, r)
		be := r.Channels[2]
		if be.Drops != 0 || !within(be.ThroughputKBs, 1900, 0.03) {
			t.Errorf("factor %g: best effort %.0f KB/s, %d drops", f, be.ThroughputKBs, be.Drops)
		}
	}
}

func rtViolations(r Result) (misses, drops uint64) {
	for _, c := range r.Channels {
		if !c.BestEffort {
			misses += c.Misses
			drops += c.Drops
		}
	}
	return
}

// Fig. 9: without cooperative preemption the guarantees break, even at low
// best-effort load.
func TestHqrtFig9NoCooperativePreemption(t *testing.T) {
	for _, tc := range []struct {
		v    Variant
		load float64
	}{
		{VariantFig9a, 500},
		{VariantFig9a, 2000},
		{VariantFig9a, 3000},
		{VariantFig9bDrain, 500},
		{VariantFig9bDrain, 3000},
	} {
		r, err := VariantExperiment(tc.v, tc.load, false).Run()
		if err != nil {
			t.Fatal(err)
		}
		m, d := rtViolations(r)
		if m == 0 {
			t.Errorf("%s: no real-time deadline miss without cooperative preemption", r.Name)
		}
		t.Logf("%s: real-time misses %d drops %d", r.Name, m, d)
	}
	// The same loads with cooperative preemption are clean.
	for _, l := range []float64{500, 3000} {
		r, err := VariantExperiment(VariantFig7, l, false).Run()
		if err != nil {
			t.Fatal(err)
		}
		checkRTClean(t, r)
	}
}

func TestHqrtDeterministic(t *testing.T) {
	e := VariantExperiment(VariantFig9a, 2500, true)
	a, err := e.Run()
	if err != nil {
		t.Fatal(err)
	}
	b, err := e.Run()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("two runs differ:\n%+v\n%+v", a, b)
	}
}

func TestHqrtBenchQuickAndPlots(t *testing.T) {
	sw, err := RunBench(BenchOptions{Quick: true, Loads: []float64{0, 3000, 6000}, Factors: []float64{1, 3}})
	if err != nil {
		t.Fatal(err)
	}
	if len(sw) != 5 {
		t.Fatalf("%d sweeps", len(sw))
	}
	dir := t.TempDir()
	files, err := WriteCharts(dir, sw)
	if err != nil {
		t.Fatal(err)
	}
	// 20 plots (4 per sweep), each as a PNG that decodes and an SVG that
	// parses, with lower-case text (the house style).
	count := map[string]int{}
	for _, f := range files {
		ext, err := plot.CheckFile(f)
		if err != nil {
			t.Error(err)
		}
		count[ext]++
	}
	if len(files) != 40 || count[".png"] != 20 || count[".svg"] != 20 {
		t.Fatalf("%d plots: %d PNG, %d SVG; want 20 of each", len(files), count[".png"], count[".svg"])
	}
	for _, s := range sw {
		for name, c := range s.Charts() {
			if bad := c.figure().NotLowerCase(); len(bad) > 0 {
				t.Errorf("%s: text not in lower case: %q", name, bad)
			}
		}
	}
	if tb := sw[0].Table(); len(tb) == 0 {
		t.Fatal("empty table")
	}
}

// In non-work-conserving mode with no horizon, no real-time packet leaves
// before its message's logical arrival time; in work-conserving mode early
// packets are processed ahead but wait in link queue Q3.
func TestHqrtNoWorkAhead(t *testing.T) {
	for _, wc := range []bool{false, true} {
		e := SeedExperiment("nwc", 2000)
		e.Policy.WorkConserving = wc
		e.TotalPackets, e.Warmup, e.Cooldown = 4096, 256, 256
		e.hook = func(p rtchan.SimPacket) {
			if !p.BestEffort && p.Start < p.Logical {
				t.Fatalf("wc=%v: packet of channel %d sent at %v before logical arrival %v", wc, p.Channel, p.Start, p.Logical)
			}
		}
		r, err := e.Run()
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range r.Channels {
			if !c.BestEffort && (c.Misses != 0 || c.Drops != 0) {
				t.Fatalf("wc=%v: %s misses %d drops %d", wc, c.Name, c.Misses, c.Drops)
			}
		}
	}
}
