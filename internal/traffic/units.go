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
)

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
