package integration

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/hostqos/hostqos/internal/traffic"
)

// TestPoliceLimitsUDP: a rule with --police drops what exceeds its rate in
// the classifier. A UDP flood at 4x the rate reaches the receiver at the
// policed rate (bucket depth included), IPv4 and IPv6, and the rule's drop
// counter holds exactly what was cut.
func TestPoliceLimitsUDP(t *testing.T) {
	e := newEnv(t)
	e.startDaemon()
	e.hostqos("link", "set", e.iface())
	const (
		rate    = 5e6
		burst   = 16 << 10
		payload = 1000
		finMax  = 3 // end-of-flow markers the sender adds, which the policer may drop too
	)
	e.hostqos("rule", "add", "flood", "--proto", "udp", "--rport", "7200-7299", "--police", "5mbit", "--burst", "16KiB")
	for i, fam := range []struct {
		name string
		addr netip.Addr
		ip   int // IP header bytes
	}{{"IPv4", serverV4.Addr(), 20}, {"IPv6", serverV6.Addr(), 40}} {
		measured(t, fam.name+" policed rate", func(n int) (bool, string) {
			to := netip.AddrPortFrom(fam.addr, uint16(7200+10*i+n)).String()
			sink, endSink := e.udpSinkEnd(to, 8*time.Second)
			before := e.ruleStat("flood")
			out := e.runApp(hostqosBin(), "tool", "udp-send", "--to", to, "--rate", "20mbit", "--size", fmt.Sprint(payload), "--duration", "3s", "-o", "json")
			endSink()
			var s traffic.SendResult
			decodeLast(t, out, &s)
			r := waitResult(t, sink, 15*time.Second)
			after := e.ruleStat("flood")
			// The policer counts whole frames: payload + UDP + IP + Ethernet.
			frame := float64(payload + 8 + fam.ip + 14)
			ratio := float64(r.Packets) * frame * 8 / s.DurationS / rate
			upper := 1 + burst*8/(rate*s.DurationS) + 0.01
			drops := after.Drops - before.Drops
			cut := s.Packets - r.Packets
			msg := fmt.Sprintf("sent %d in %.2f s, received %d: %.3f of 5 Mbit/s in frames (want 0.95–%.3f); rule dropped %d, sent − received %d (+ up to %d end markers)",
				s.Packets, s.DurationS, r.Packets, ratio, upper, drops, cut, finMax)
			t.Log(msg)
			return ratio >= 0.95 && ratio <= upper && drops >= cut && drops <= cut+finMax && r.Lost >= cut, msg
		})
	}
}
