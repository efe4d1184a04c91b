// Package units writes configured quantities the way the config file
// takes them, bounds them, and adds them up without wrapping. It is a leaf
// (standard library only), so the packages that talk to the kernel
// (shaper) can name rates in their messages as the policy does without
// importing the policy package. Measured rates, which are not exact, are
// written by traffic.FormatRate.
package units

import (
	"fmt"
	"math"
	"math/bits"
	"strconv"
	"strings"
)

// MaxRate is the highest rate hostqos takes anywhere (bit/s): 10 Tbit/s,
// above any link a host has. The rate parser refuses more, so every
// configured or requested rate is at most this, and sums of them stay far
// from 64 bits.
const MaxRate = 10_000_000_000_000

// Saturated is what Add and Mul give when the exact result does not fit
// in 64 bits; it compares above every bound.
const Saturated = math.MaxUint64

// Add returns a + b, or Saturated when the sum does not fit in 64 bits. A
// total of rates or bytes built with Add never wraps below a bound it
// exceeds: admission compares it as it is and refuses.
func Add[T ~uint64](a, b T) T {
	s, carry := bits.Add64(uint64(a), uint64(b), 0)
	if carry != 0 {
		return Saturated
	}
	return T(s)
}

// Mul returns a × b, or Saturated when the product does not fit in 64
// bits (n sessions × a per-session rate).
func Mul[T ~uint64](a, b T) T {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi != 0 {
		return Saturated
	}
	return T(lo)
}

// ExactRate writes a rate in bits per second with the largest bit unit
// that keeps it exact to the bit: "10mbit", "1.5mbit", "128kbit",
// "500bit". Zero is "0"; a Saturated sum is "more than 18446744tbit". It
// is policy.Rate's String.
func ExactRate(bps uint64) string {
	if bps == 0 {
		return "0"
	}
	if bps == Saturated {
		return "more than " + strconv.FormatUint(bps/1e12, 10) + "tbit"
	}
	for _, u := range []struct {
		s string
		m uint64
	}{{"tbit", 1e12}, {"gbit", 1e9}, {"mbit", 1e6}, {"kbit", 1e3}} {
		if bps >= u.m {
			whole, frac := bps/u.m, bps%u.m
			if frac == 0 {
				return strconv.FormatUint(whole, 10) + u.s
			}
			digits := len(strconv.FormatUint(u.m, 10)) - 1
			fs := strings.TrimRight(fmt.Sprintf("%0*d", digits, frac), "0")
			return strconv.FormatUint(whole, 10) + "." + fs + u.s
		}
	}
	return strconv.FormatUint(bps, 10) + "bit"
}
