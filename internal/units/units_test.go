package units

import "testing"

func TestExactRate(t *testing.T) {
	for bps, want := range map[uint64]string{
		0: "0", 500: "500bit", 128_000: "128kbit", 1_500_000: "1.5mbit", 1_234_567: "1.234567mbit",
		10_000_000: "10mbit", 2_500_000_000: "2.5gbit", 3e12: "3tbit", 1_000_001: "1.000001mbit",
	} {
		if got := ExactRate(bps); got != want {
			t.Errorf("ExactRate(%d) = %q, want %q", bps, got, want)
		}
	}
}
