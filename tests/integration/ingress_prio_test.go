package integration

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hostqos/hostqos/internal/testutil"
)

// bloatedDownlink shapes the path router's egress towards the client (the
// client's downlink) to rate with HTB and a deep FIFO (queue packets): a
// bufferbloated bottleneck, as in front of a home line.
func bloatedDownlink(t *testing.T, p *testutil.Path, rate string, queue int) {
	t.Helper()
	dev := p.Router.Iface("client")
	for _, args := range [][]string{
		{"qdisc", "add", "dev", dev, "root", "handle", "1:", "htb", "default", "10"},
		{"class", "add", "dev", dev, "parent", "1:", "classid", "1:10", "htb", "rate", rate, "ceil", rate},
		{"qdisc", "add", "dev", dev, "parent", "1:10", "handle", "10:", "pfifo", "limit", fmt.Sprint(queue)},
	} {
		if out, err := p.Router.Command("tc", args...).CombinedOutput(); err != nil {
			t.Fatalf("tc %s in the router: %v: %s", strings.Join(args, " "), err, out)
		}
	}
}

// TestDownloadPriority: a 20 Mbit/s downlink with a deep queue (2000
// packets, 1.2 s) on a 20 ms path, saturated by 4 bulk TCP downloads of an
// app no rule names (class default); a 50 pkt/s UDP echo of an app in
// class voice. Without an ingress rate the queue fills and the voice round
// trip grows by hundreds of ms; with the link's ingress_rate just below the
// bottleneck (19 Mbit/s) the bulk senders are held to what the voice class
// leaves by their receive windows, the queue stays empty: the voice p99
// round trip is at least 10× lower, nothing of it is lost, and bulk keeps
// at least 90 % of the downlink (of the TCP payload 20 Mbit/s of frames
// carry). The server's senders use Reno, which fills a deep buffer (Cubic's
// HyStart leaves slow start early and fills it only slowly).
func TestDownloadPriority(t *testing.T) {
	e, p := newPathEnvRTT(t, 20*time.Millisecond)
	bloatedDownlink(t, p, "20mbit", 2000)
	// Senders that fill the buffer: Reno leaves slow start only at a
	// loss (Cubic's HyStart leaves it when the delay grows, and fills a
	// deep queue only slowly), a per-namespace setting.
	if out, err := p.Server.Command("sysctl", "-qw", "net.ipv4.tcp_congestion_control=reno").CombinedOutput(); err != nil {
		t.Fatalf("sysctl in the server: %v: %s", err, out)
	}
	e.startDaemon()
	e.hostqos("link", "set", p.IfClient, "--ingress-rate", "0")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// The voice flow is this test process's UDP echo client.
	e.hostqos("rule", "add", "voice", "--exe", self, "--proto", "udp", "--class", "voice")
	bulk := appCopy(e, "bulkapp")

	const dur = 4 * time.Second
	// What 20 Mbit/s of frames carry as TCP payload: 1448 of every 1514
	// bytes (Ethernet, IPv4, TCP with timestamps).
	const lineGoodput = 20e6 * 1448 / 1514
	type result struct {
		p99, p50, bulk float64
		lost           uint64
	}
	run := func() result {
		ping := pingDuring(e, p, dur-time.Second)
		d := startDownload(e, p, bulk, 4, dur)()
		pr := ping()
		return result{p99: pr.RTT.P99, p50: pr.RTT.P50, bulk: d.Total, lost: pr.Lost}
	}

	var without result
	measured(t, "download priority", func(n int) (bool, string) {
		e.hostqos("link", "set", p.IfClient, "--ingress-rate", "0")
		without = run()
		e.hostqos("link", "set", p.IfClient, "--ingress-rate", "19mbit")
		time.Sleep(1500 * time.Millisecond) // the deep queue drains
		with := run()
		line := with.bulk / lineGoodput
		msg := fmt.Sprintf("voice round trip p50/p99: without ingress_rate %.1f/%.1f ms, with %.1f/%.1f ms (p99 %.1f× lower, want ≥ 10×), voice lost %d with (want 0); bulk goodput %.2f Mbit/s without, %.2f with ingress_rate = %.3f of the line's TCP goodput (want ≥ 0.90)",
			without.p50, without.p99, with.p50, with.p99, without.p99/max(with.p99, 0.001), with.lost,
			without.bulk/1e6, with.bulk/1e6, line)
		t.Log(msg)
		return with.p99*10 <= without.p99 && with.lost == 0 && line >= 0.9, msg
	})
	st := e.ruleStat("voice")
	if st.In.Packets == 0 || st.In.Drops != 0 {
		t.Errorf("rule voice received side %+v: want packets counted, none dropped", st.In)
	}
	checkClassAndLinkIn(t, e, p.IfClient)
	checkAcceptedIdentity(t, e, p.ClientV4)

	// A download limit behind a queue that builds after the limited
	// download started: another download (its window bounded by its
	// receive buffer, so the queue stands without losses) keeps ~80 ms
	// queued at the bottleneck. The limited app's window must follow the
	// round trip its packets see now, not the 20 ms its receiving socket
	// measured at the handshake and never again (with that it got 0.34 of
	// its limit; the gain's range, at most 2×, cannot make up 5×).
	e.hostqos("link", "set", p.IfClient, "--ingress-rate", "0")
	lim := appCopy(e, "limapp")
	e.hostqos("rule", "add", "lim", "--exe", lim, "--maxbw-in", "4mbit")
	measured(t, "download limit behind a queue built after its handshake", func(n int) (bool, string) {
		dl := startDownload(e, p, lim, 1, dur)
		time.Sleep(500 * time.Millisecond)
		ping := pingDuring(e, p, dur-2*time.Second)
		other := startDownload(e, p, bulk, 1, dur, rcvbufEnv+"=150000")
		d, pr, o := dl(), ping(), other()
		ratio := d.Total / 4e6
		msg := fmt.Sprintf("limited app %.3f Mbit/s = %.3f of 4 Mbit/s (want 0.8–1.2), retransmitted %d of %d; the other download %.2f Mbit/s; round trip p50 %.1f ms (the path's 20 ms plus the standing queue)",
			d.Total/1e6, ratio, d.retrans, d.segs, o.Total/1e6, pr.RTT.P50)
		t.Log(msg)
		return ratio >= 0.8 && ratio <= 1.2, msg
	})
}

// checkClassAndLinkIn: stat classes has the received side of class voice
// (its rule's) and class default (the bulk downloads no rule matched);
// stat links the link's interface counters, both directions.
func checkClassAndLinkIn(t *testing.T, e *env, link string) {
	t.Helper()
	s, err := e.d.Stats("classes")
	if err != nil {
		t.Fatal(err)
	}
	in := map[string]uint64{}
	for _, c := range s.Classes {
		if c.Link == link {
			in[c.Class] = c.In.Bytes
		}
	}
	if in["voice"] == 0 || in["default"] < 10<<20 {
		t.Errorf("classes' received bytes on %s: %v; want voice's echo replies and default's downloads (> 10 MiB)", link, in)
	}
	s, err = e.d.Stats("links")
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Links) != 1 || s.Links[0].Link != link || s.Links[0].In.Bytes < in["default"] || s.Links[0].Packets == 0 {
		t.Errorf("stat links %+v: want %s with at least what its classes received (%d bytes) and what it sent", s.Links, link, in["default"])
	}
}
