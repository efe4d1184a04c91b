package units

import (
	"math"
	"testing"
)

func TestExactRate(t *testing.T) {
	for bps, want := range map[uint64]string{
		0: "0", 500: "500bit", 128_000: "128kbit", 1_500_000: "1.5mbit", 1_234_567: "1.234567mbit",
		10_000_000: "10mbit", 2_500_000_000: "2.5gbit", 3e12: "3tbit", 1_000_001: "1.000001mbit",
		MaxRate: "10tbit", Saturated: "more than 18446744tbit",
	} {
		if got := ExactRate(bps); got != want {
			t.Errorf("ExactRate(%d) = %q, want %q", bps, got, want)
		}
	}
}

// TestAddMulSaturate: a sum or product that does not fit in 64 bits is
// Saturated, never a small number that would pass under a bound (two
// classes at 2⁶³−1 bit/s and one at 10 Mbit/s summed to 9.999998 Mbit/s).
func TestAddMulSaturate(t *testing.T) {
	const big = math.MaxInt64 // 9223372036854775807
	for _, c := range []struct {
		a, b, want uint64
	}{
		{1, 2, 3},
		{big, big, math.MaxUint64 - 1},
		{big, big + 1, math.MaxUint64},
		{math.MaxUint64 - 1, 1, math.MaxUint64},
		{math.MaxUint64 - 3_999_999, 4_000_000, Saturated},
		{Saturated, 1, Saturated},
	} {
		if got := Add(c.a, c.b); got != c.want {
			t.Errorf("Add(%d, %d) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
	var total uint64
	for _, r := range []uint64{big, big, 10_000_000} {
		total = Add(total, r)
	}
	if total != Saturated || total <= 80_000_000 {
		t.Errorf("2 × (2⁶³−1) + 10 Mbit/s = %d, want Saturated (above any capacity)", total)
	}
	for _, c := range []struct {
		a, b, want uint64
	}{
		{32, 1_000_000, 32_000_000},
		{0, math.MaxUint64, 0},
		{1 << 32, 1 << 31, 1 << 63},
		{1 << 32, 1 << 32, Saturated},
		{65536, MaxRate * 100_000, Saturated},
	} {
		if got := Mul(c.a, c.b); got != c.want {
			t.Errorf("Mul(%d, %d) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
	type rate uint64 // the policy's Rate and Size are such types
	if got := Add(rate(MaxRate), rate(Saturated)); got != Saturated {
		t.Errorf("Add on a named type = %d", got)
	}
}
