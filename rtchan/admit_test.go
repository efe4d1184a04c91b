package rtchan

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// Regime C_p < L_x(S): the seed's Table 2b with a 60 KB message.
func TestHqrtServiceTimeLinkBound(t *testing.T) {
	p := SeedParams()
	if got := p.Lx(4096); got != 244800*time.Nanosecond {
		t.Fatalf("Lx(4096) = %v, want 244.8µs", got)
	}
	st := p.Service(60 * KB)
	want := ServiceTime{
		Np: 15, SLast: 4096,
		LxS: 244800, LxLast: 244800,
		Lxm:       3672000, // 15 × 244.8 µs
		Clm:       2400000, // 15 × 160 µs
		Cpr:       577500,  // 14/4 × (90 + 20 + 55) µs
		Cpm:       2800000, // 420 + 14 × 170 µs
		LinkBound: true,
		Ts:        7069500, // 420 + 3672 + 2400 + 577.5 µs
		Cb1st:     2800000, // 420 + (max(15,4) − 1) × 170 µs
		TwCPU:     4885000, // 2800 + ceil(2800/244.8)=12 × 160 + 90 + 75 µs
		TwLink:    244800,
		Tw:        5129800,
	}
	if st != want {
		t.Fatalf("Service(60KB) =\n %+v\nwant\n %+v", st, want)
	}
}

// Regime C_p ≥ L_x(S): 1 KB packets make the CPU dominate.
func TestHqrtServiceTimeCPUBound(t *testing.T) {
	p := SeedParams()
	p.S = 1024
	st := p.Service(10000)
	want := ServiceTime{
		Np: 10, SLast: 784,
		LxS:       91200, // 40 µs + 1024 × 50 ns
		LxLast:    79200, // 40 µs + 784 × 50 ns
		Lxm:       9*91200 + 79200,
		Clm:       1600000,
		Cpr:       371250, // 9/4 × 165 µs
		Cpm:       1950000,
		LinkBound: false,
		Ts:        4000450, // 1950 + 1600 + 79.2 + 371.25 µs
		Cb1st:     1950000,
		TwCPU:     5635000, // 1950 + ceil(1950/91.2)=22 × 160 + 165 µs
		TwLink:    91200,
		Tw:        5726200,
	}
	if st != want {
		t.Fatalf("Service(10000) =\n %+v\nwant\n %+v", st, want)
	}
}

// table3Specs is the channel set of the seed's Table 3.
func table3Specs() []Spec { return SeedSpecs() }

func TestHqrtAdmitTable3(t *testing.T) {
	res, err := SeedParams().Analyze(table3Specs())
	if err != nil {
		t.Fatalf("Table 3 refused: %v", err)
	}
	// D_order: ch1 (25 ms) > ch2 (30 ms) > ch0 (40 ms).
	want := map[string]struct {
		prio int
		resp time.Duration
	}{
		"ch1": {0, 12199300}, // Tw + Ts
		"ch2": {1, 19268800}, // Tw + 2 Ts
		"ch0": {2, 26338300}, // Tw + 3 Ts
	}
	for _, r := range res {
		if r.Priority < 0 {
			continue
		}
		w := want[r.Name]
		if r.Priority != w.prio || r.Response != w.resp || !r.OK {
			t.Errorf("%s: prio %d response %v ok %v, want prio %d response %v", r.Name, r.Priority, r.Response, r.OK, w.prio, w.resp)
		}
	}
}

func TestHqrtAdmitRefusesExistingBound(t *testing.T) {
	p := SeedParams()
	tight := Spec{Name: "tight", Mmax: 60 * KB, Bmax: 1, Imin: 30 * time.Millisecond, Delay: 12500 * time.Microsecond}
	_, err := p.Admit(table3Specs(), tight)
	var ae *AdmissionError
	if !errors.As(err, &ae) {
		t.Fatalf("want *AdmissionError, got %v", err)
	}
	// tight itself fits (12.1993 ms ≤ 12.5 ms) but pushes ch0 past 40 ms:
	// w = Tw + Ts + ceil(w/30ms)·3·Ts = 5.1298 + 7.0695 + 6 × 7.0695 ms.
	if ae.Channel != "tight" || ae.Failing != "ch0" || ae.Reason != "delay" {
		t.Fatalf("refusal %+v, want channel tight failing ch0", ae)
	}
	if ae.Response != 54616300 || ae.Bound != 40*time.Millisecond {
		t.Fatalf("response %v bound %v, want 54.6163ms / 40ms", ae.Response, ae.Bound)
	}
	if !strings.Contains(err.Error(), `established channel "ch0"`) || !strings.Contains(err.Error(), "by 14.6163ms") {
		t.Fatalf("error text %q does not name the failing bound", err)
	}
}

func TestHqrtAdmitRefusesOwnBoundAndCapacity(t *testing.T) {
	p := SeedParams()
	self := Spec{Name: "fast", Mmax: 60 * KB, Bmax: 1, Imin: 100 * time.Millisecond, Delay: 10 * time.Millisecond}
	_, err := p.Admit(table3Specs(), self)
	var ae *AdmissionError
	if !errors.As(err, &ae) || ae.Failing != "fast" || ae.Response != 12199300 {
		t.Fatalf("want own bound failure at 12.1993ms, got %v", err)
	}
	if !strings.Contains(err.Error(), "its worst-case response time 12.1993ms exceeds delay bound 10ms by 2.1993ms") {
		t.Fatalf("error text %q", err)
	}
	hog := Spec{Name: "hog", Mmax: 60 * KB, Bmax: 1, Imin: 15 * time.Millisecond, Delay: 100 * time.Millisecond}
	_, err = p.Admit(table3Specs(), hog)
	if !errors.As(err, &ae) || ae.Reason != "utilization" || ae.Failing != "hog" {
		t.Fatalf("want utilization refusal naming hog, got %v", err)
	}
	if ae.Util < 1 {
		t.Fatalf("utilization %v, want ≥ 1", ae.Util)
	}
}

func TestHqrtSimCreateRunsAdmission(t *testing.T) {
	s, err := NewSim(SeedParams(), DefaultPolicy())
	if err != nil {
		t.Fatal(err)
	}
	for _, sp := range table3Specs() {
		if _, err := s.Create("", sp); err != nil {
			t.Fatalf("create %s: %v", sp.Name, err)
		}
	}
	hog := Spec{Name: "hog", Mmax: 60 * KB, Bmax: 1, Imin: 15 * time.Millisecond, Delay: 100 * time.Millisecond}
	if _, err := s.Create("", hog); err == nil {
		t.Fatal("over-capacity channel admitted")
	}
	// Closing ch0 releases its reservation and makes room.
	if err := s.Close(0); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create("", hog); err != nil {
		t.Fatalf("after closing ch0: %v", err)
	}
}

// TestAnalyzeBusyPeriodBounded: two channels whose utilization together
// is within a nanosecond's worth of 1 (a channel of half the link beside
// one of half the link less 1 ns per period) have a busy period of
// millions of messages, which took the test seconds; past
// MaxBusyMessages the set is refused as utilization. A gap of a
// microsecond is still searched and admitted.
func TestAnalyzeBusyPeriodBounded(t *testing.T) {
	p := UDPParams(10_000_000)
	ts := p.Service(1400).Ts
	pair := func(gap time.Duration) []Spec {
		return []Spec{{Name: "half", Mmax: 1400, Imin: 2 * ts, Bmax: 1, Delay: 20 * time.Millisecond},
			{Name: "rest", Mmax: 1400, Imin: 2*ts + gap, Bmax: 1, Delay: 10 * time.Second}}
	}
	if _, err := p.Analyze(pair(time.Microsecond)); err != nil {
		t.Errorf("a gap of 1 µs per period: %v, want admitted", err)
	}
	_, err := p.Analyze(pair(time.Nanosecond))
	var ae *AdmissionError
	if !errors.As(err, &ae) || ae.Reason != "utilization" || ae.Failing != "rest" || ae.Util < 0.9999 {
		t.Errorf("a gap of 1 ns per period: %v (%+v), want refused as utilization of channel rest", err, ae)
	}
}

func TestWireRate(t *testing.T) {
	p := UDPParams(20e6)
	// 1200 bytes every 2 ms: one packet, its headers on the wire too.
	if got, want := p.WireRate(Spec{Mmax: 1200, Imin: 2 * time.Millisecond}), int64(1200+p.HeaderBytes)*8*500; got != want {
		t.Errorf("1200 B / 2 ms: %d bit/s, want %d", got, want)
	}
	// 3000 bytes: three packets of at most S = 1400 bytes.
	if got, want := p.WireRate(Spec{Mmax: 3000, Imin: time.Second}), int64(3000+3*p.HeaderBytes)*8; got != want {
		t.Errorf("3000 B / s: %d bit/s, want %d", got, want)
	}
	if p.WireRate(Spec{Mmax: 100}) != 0 {
		t.Error("a spec without an interval has no rate")
	}
}
