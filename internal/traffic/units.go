// Package traffic holds hostqos's traffic generators and measurement tools:
// CBR UDP with a sink that reports loss, latency, jitter and the DSCP of what
// it received; a voice-call emulator; a UDP echo server; bulk TCP; Pareto
// bursty cross traffic; frame-based video; and short TCP transfers with
// completion times.
//
// Everything is pure Go (no netlink, no eBPF) so the CLI can carry it. Every
// API creates its sockets synchronously in the calling goroutine before it
// starts any other goroutine, so a caller running inside a network namespace
// on a locked OS thread (testbed.Node.Do) gets every socket in that namespace.
//
// Latencies are one-way where sender and receiver share a clock (all network
// namespaces of one host do): the sender writes its wall-clock time into each
// packet and the receiver subtracts it from its own.
package traffic

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// ParseRate parses a bit rate such as "10mbit", "128kbit", "1gbit", "500bit",
// "2.5mbit" or a bare number of bits per second. Units are decimal (k = 1000).
// "bps" suffixes mean bits per second too ("10mbps" = 10mbit); bytes are not
// accepted, to avoid the classic factor-of-8 mistake.
//
// TODO(lead): unify with internal/policy's Rate parser once it lands.
func ParseRate(s string) (uint64, error) {
	in := strings.ToLower(strings.TrimSpace(s))
	if in == "" {
		return 0, fmt.Errorf("parse rate %q: empty", s)
	}
	mult := 1.0
	num := in
	units := []struct {
		suffix string
		mult   float64
	}{
		{"tbit", 1e12}, {"gbit", 1e9}, {"mbit", 1e6}, {"kbit", 1e3}, {"bit", 1},
		{"tbps", 1e12}, {"gbps", 1e9}, {"mbps", 1e6}, {"kbps", 1e3}, {"bps", 1},
		{"t", 1e12}, {"g", 1e9}, {"m", 1e6}, {"k", 1e3},
	}
	for _, u := range units {
		if strings.HasSuffix(in, u.suffix) {
			num = strings.TrimSpace(strings.TrimSuffix(in, u.suffix))
			mult = u.mult
			break
		}
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("parse rate %q: not a number with a unit (bit, kbit, mbit, gbit)", s)
	}
	if v < 0 {
		return 0, fmt.Errorf("parse rate %q: negative", s)
	}
	r := v * mult
	if r > 1e13 {
		return 0, fmt.Errorf("parse rate %q: above 10 tbit", s)
	}
	return uint64(math.Round(r)), nil
}

// FormatRate renders bits per second with a decimal unit, e.g. "19.97mbit".
func FormatRate(bps float64) string {
	switch {
	case bps >= 1e9:
		return fmt.Sprintf("%.3fgbit", bps/1e9)
	case bps >= 1e6:
		return fmt.Sprintf("%.2fmbit", bps/1e6)
	case bps >= 1e3:
		return fmt.Sprintf("%.1fkbit", bps/1e3)
	default:
		return fmt.Sprintf("%.0fbit", bps)
	}
}

// NoDSCP means "do not set / none seen".
const NoDSCP = -1

var dscpNames = map[string]int{
	"CS0": 0, "BE": 0, "DEFAULT": 0, "DF": 0,
	"CS1": 8, "LE": 1,
	"AF11": 10, "AF12": 12, "AF13": 14,
	"CS2": 16, "AF21": 18, "AF22": 20, "AF23": 22,
	"CS3": 24, "AF31": 26, "AF32": 28, "AF33": 30,
	"CS4": 32, "AF41": 34, "AF42": 36, "AF43": 38,
	"CS5": 40, "VA": 44, "EF": 46,
	"CS6": 48, "CS7": 56,
}

// ParseDSCP parses a DSCP name (EF, AF41, CS1, BE, ...) or a number 0..63
// (decimal or 0x hex).
func ParseDSCP(s string) (int, error) {
	in := strings.ToUpper(strings.TrimSpace(s))
	if v, ok := dscpNames[in]; ok {
		return v, nil
	}
	v, err := strconv.ParseInt(strings.ToLower(in), 0, 16)
	if err != nil {
		return 0, fmt.Errorf("parse DSCP %q: not a name (EF, AF11..AF43, CS0..CS7, BE, VA, LE) or a number 0..63", s)
	}
	if v < 0 || v > 63 {
		return 0, fmt.Errorf("parse DSCP %q: out of range 0..63", s)
	}
	return int(v), nil
}

var dscpCanonical = map[int]string{
	0: "CS0", 1: "LE", 8: "CS1", 10: "AF11", 12: "AF12", 14: "AF13",
	16: "CS2", 18: "AF21", 20: "AF22", 22: "AF23",
	24: "CS3", 26: "AF31", 28: "AF32", 30: "AF33",
	32: "CS4", 34: "AF41", 36: "AF42", 38: "AF43",
	40: "CS5", 44: "VA", 46: "EF", 48: "CS6", 56: "CS7",
}

// DSCPName names a DSCP value, e.g. 46 → "EF", 0 → "CS0", 5 → "5".
func DSCPName(d int) string {
	if n, ok := dscpCanonical[d]; ok {
		return n
	}
	return strconv.Itoa(d)
}
