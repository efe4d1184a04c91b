package traffic

import (
	"math"
	"testing"
	"time"
)

func TestPercentileNearestRank(t *testing.T) {
	v := []float64{15, 20, 35, 40, 50}
	for _, c := range []struct{ p, want float64 }{{5, 15}, {30, 20}, {40, 20}, {50, 35}, {100, 50}, {0, 15}} {
		if got := Percentile(v, c.p); got != c.want {
			t.Errorf("Percentile(%v) = %v, want %v", c.p, got, c.want)
		}
	}
	if Percentile(nil, 50) != 0 {
		t.Error("empty percentile not 0")
	}
	var s []float64
	for i := 1; i <= 1000; i++ {
		s = append(s, float64(i))
	}
	if Percentile(s, 99) != 990 || Percentile(s, 90) != 900 || Percentile(s, 50) != 500 {
		t.Errorf("1..1000: p50 %v p90 %v p99 %v", Percentile(s, 50), Percentile(s, 90), Percentile(s, 99))
	}
}

func TestRecorderSummary(t *testing.T) {
	var r Recorder
	for i := 100; i >= 1; i-- {
		r.Add(time.Duration(i) * time.Millisecond)
	}
	s := r.Summary()
	if s.N != 100 || s.Min != 1 || s.Max != 100 || s.P50 != 50 || s.P90 != 90 || s.P99 != 99 || s.Mean != 50.5 {
		t.Fatalf("summary %+v", s)
	}
	var o Recorder
	o.Add(200 * time.Millisecond)
	r.Merge(&o)
	if s := r.Summary(); s.N != 101 || s.Max != 200 {
		t.Fatalf("merged %+v", s)
	}
}

func TestRecorderReservoirKeepsExactExtremes(t *testing.T) {
	var r Recorder
	n := maxSamples * 2
	for i := 0; i < n; i++ {
		r.Add(time.Duration(i%1000) * time.Microsecond)
	}
	r.Add(time.Second)
	s := r.Summary()
	if s.N != uint64(n+1) || s.Max != 1000 || s.Min != 0 {
		t.Fatalf("summary %+v", s)
	}
	if math.Abs(s.P50-0.5) > 0.02 {
		t.Fatalf("reservoir p50 %v, want ≈0.5ms", s.P50)
	}
}

func TestJitterRFC3550(t *testing.T) {
	var j Jitter
	// Constant transit: no jitter.
	for i := 0; i < 10; i++ {
		j.Add(5 * time.Millisecond)
	}
	if j.Value() != 0 {
		t.Fatalf("constant transit jitter %v", j.Value())
	}
	// Hand-computed: transits 0, 16ms, 0 → D = 16ms, then 16ms.
	j = Jitter{}
	j.Add(0)
	j.Add(16 * time.Millisecond)
	if j.Value() != time.Millisecond { // 0 + (16 - 0)/16
		t.Fatalf("after one step %v, want 1ms", j.Value())
	}
	j.Add(0)
	want := 1.0 + (16.0-1.0)/16 // ms
	if math.Abs(j.Millis()-want) > 1e-3 {
		t.Fatalf("after two steps %v ms, want %v", j.Millis(), want)
	}
	// Alternating transits ±d converge to d.
	j = Jitter{}
	for i := 0; i < 500; i++ {
		j.Add(time.Duration(i%2) * 4 * time.Millisecond)
	}
	if math.Abs(j.Millis()-4) > 0.01 {
		t.Fatalf("alternating jitter %v ms, want 4", j.Millis())
	}
}

func TestCappedParetoMean(t *testing.T) {
	// Seed parameters: k = 40 Mbit/s, α = 1.05, cap 155 Mbit/s.
	k, a, c := 40e6, 1.05, 155e6
	want := CappedParetoMean(k, a, c)
	if want <= k || want >= c {
		t.Fatalf("capped mean %v outside (k, cap)", want)
	}
	// Numeric integral of the survival function as a cross-check.
	integ := k
	const steps = 200000
	dx := (c - k) / steps
	for i := 0; i < steps; i++ {
		x := k + (float64(i)+0.5)*dx
		integ += math.Pow(k/x, a) * dx
	}
	if math.Abs(integ-want)/want > 1e-4 {
		t.Fatalf("closed form %v vs integral %v", want, integ)
	}
	// Sample mean of the generator's draws.
	cfg := ParetoConfig{K: uint64(k), Alpha: a, Cap: uint64(c), Seed: 7}
	rates := ParetoRates(cfg, 200000)
	var sum float64
	for _, r := range rates {
		if r < k || r > c {
			t.Fatalf("draw %v outside [k, cap]", r)
		}
		sum += r
	}
	if m := sum / float64(len(rates)); math.Abs(m-want)/want > 0.01 {
		t.Fatalf("sample mean %v, want %v ±1%%", m, want)
	}
	// Uncapped with finite variance: mean αk/(α-1).
	cfg = ParetoConfig{K: 1e6, Alpha: 3, Cap: 1e15, Seed: 3}
	sum = 0
	rates = ParetoRates(cfg, 200000)
	for _, r := range rates {
		sum += r
	}
	if m, w := sum/float64(len(rates)), 3*1e6/2.0; math.Abs(m-w)/w > 0.01 {
		t.Fatalf("uncapped sample mean %v, want %v", m, w)
	}
	// Repeatable per seed; on/off makes silent intervals.
	cfg = ParetoConfig{K: 1e6, Alpha: 1.5, Cap: 1e7, Seed: 42, OffProb: 0.5}
	a1, a2 := ParetoRates(cfg, 100), ParetoRates(cfg, 100)
	zeros := 0
	for i := range a1 {
		if a1[i] != a2[i] {
			t.Fatal("same seed, different draws")
		}
		if a1[i] == 0 {
			zeros++
		}
	}
	if zeros < 30 || zeros > 70 {
		t.Fatalf("off intervals %d of 100 with p=0.5", zeros)
	}
}

func TestHeaderRoundTrip(t *testing.T) {
	b := make([]byte, HeaderSize)
	h := header{flags: flagFIN, flow: 7, seq: 1 << 40, sent: -5, aux: videoAux(9, 2, 3)}
	h.put(b)
	g, ok := parseHeader(b)
	if !ok || g != h {
		t.Fatalf("round trip %+v vs %+v", g, h)
	}
	if fr, i, n := splitVideoAux(g.aux); fr != 9 || i != 2 || n != 3 {
		t.Fatal("video aux")
	}
	if _, ok := parseHeader(b[:HeaderSize-1]); ok {
		t.Fatal("short header accepted")
	}
	// The G.729 packet: 32-byte payload + UDP + IPv4 + Ethernet + FCS = 78.
	if G729PayloadSize+udpHeader+ipv4Header+14+4 != G729WireBytes {
		t.Fatal("g729 wire size")
	}
}
