// Package units writes configured quantities the way the config file
// takes them. It is a leaf (standard library only), so the packages that
// talk to the kernel (shaper) can name rates in their messages as the
// policy does without importing the policy package. Measured rates, which
// are not exact, are written by traffic.FormatRate.
package units

import (
	"fmt"
	"strconv"
	"strings"
)

// ExactRate writes a rate in bits per second with the largest bit unit
// that keeps it exact to the bit: "10mbit", "1.5mbit", "128kbit",
// "500bit". Zero is "0". It is policy.Rate's String.
func ExactRate(bps uint64) string {
	if bps == 0 {
		return "0"
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
