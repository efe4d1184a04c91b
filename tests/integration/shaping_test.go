package integration

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/hostqos/hostqos/internal/testutil"
	"github.com/hostqos/hostqos/internal/traffic"
)

// tcpPayloadShare is the share of a full frame HTB counts that is TCP
// payload: 1448 bytes of a 1514-byte frame (20 IP + 32 TCP with
// timestamps + 14 Ethernet). The rate a rule sets counts whole frames.
const tcpPayloadShare = 1448.0 / 1514.0

// TestMaxBWLimitsTCPGoodput: `--maxbw 10mbit` on an app holds its TCP
// goodput, measured at the receiver, within 0.93–1.01 of 10 Mbit/s.
func TestMaxBWLimitsTCPGoodput(t *testing.T) {
	e := newEnv(t)
	e.startDaemon()
	app := e.app("capped-app")
	e.hostqos("link", "set", e.iface(), "--egress-rate", "200mbit")
	e.hostqos("rule", "add", "capped", "--exe", app, "--maxbw", "10mbit")
	measured(t, "goodput/ceiling", func(n int) (bool, string) {
		to := serverV4.Addr().String() + ":" + strconv.Itoa(7100+n)
		sink := e.tcpSink(to, 30*time.Second, 2)
		e.runApp(app, "tool", "tcp-send", "--to", to, "--streams", "2", "--duration", "6s")
		r := waitResult(t, sink, 30*time.Second)
		if r == nil {
			t.Fatal("no sink result")
		}
		ratio := r.GoodputBps / 10e6
		t.Logf("goodput %.3f Mbit/s = %.3f of the 10 Mbit/s ceiling (payload share of a frame %.3f)", r.GoodputBps/1e6, ratio, tcpPayloadShare)
		return ratio >= 0.93 && ratio <= 1.01, fmt.Sprintf("%.3f, want 0.93–1.01", ratio)
	})
}

// TestMinBWSharesSaturatedLink: two rules with guarantees share a
// saturated link in proportion to their minbw.
func TestMinBWSharesSaturatedLink(t *testing.T) {
	e := newEnv(t)
	e.startDaemon()
	a, b := e.app("small-app"), e.app("large-app")
	e.hostqos("link", "set", e.iface(), "--egress-rate", "20mbit")
	e.hostqos("rule", "add", "small", "--exe", a, "--minbw", "3mbit")
	e.hostqos("rule", "add", "large", "--exe", b, "--minbw", "9mbit")
	measured(t, "shares of the guarantees", func(n int) (bool, string) {
		toA, toB := serverV4.Addr().String()+":"+strconv.Itoa(7110+n), serverV4.Addr().String()+":"+strconv.Itoa(7120+n)
		sa, sb := e.tcpSink(toA, 30*time.Second, 2), e.tcpSink(toB, 30*time.Second, 2)
		ca, _ := e.start(a, "tool", "tcp-send", "--to", toA, "--streams", "2", "--duration", "6s")
		cb, _ := e.start(b, "tool", "tcp-send", "--to", toB, "--streams", "2", "--duration", "6s")
		_ = ca.Wait()
		_ = cb.Wait()
		ra, rb := waitResult(t, sa, 30*time.Second), waitResult(t, sb, 30*time.Second)
		if ra == nil || rb == nil {
			t.Fatal("no sink result")
		}
		ratio := rb.GoodputBps / ra.GoodputBps
		total := (ra.GoodputBps + rb.GoodputBps) / (20e6 * tcpPayloadShare)
		msg := fmt.Sprintf("small %.2f Mbit/s, large %.2f Mbit/s: ratio %.2f (want 2.2–4, guarantees 9:3), link use %.2f (want ≥ 0.85), small ≥ 90 %% of its 3 Mbit/s",
			ra.GoodputBps/1e6, rb.GoodputBps/1e6, ratio, total)
		t.Log(msg)
		return ratio >= 2.2 && ratio <= 4 && ra.GoodputBps >= 0.9*3e6*tcpPayloadShare && total >= 0.85, msg
	})
}

// voiceRTT runs one G.729-like call (50 pkt/s) from bin through the echo
// server and returns the result.
func (e *env) voiceRTT(bin, to string, dur time.Duration) traffic.VoiceResult {
	e.t.Helper()
	out := e.runApp(bin, "tool", "voice", "--to", to, "--calls", "1", "--duration", dur.String(), "-o", "json")
	var r traffic.VoiceResult
	decodeLast(e.t, out, &r)
	return r
}

// TestVoicePriorityUnderBulk: on a 20 Mbit/s egress saturated by bulk TCP
// of an unmanaged app, a voice flow of an app in class voice loses nothing
// and its p99 round trip is at least 10x lower than without the rule. It
// tests class priority alone: with flow queueing the unmarked voice flow
// is already protected as a sparse flow of class default
// (TestFlowQueueingSparseFlowBehindUploads), so it runs with one FIFO per
// class.
func TestVoicePriorityUnderBulk(t *testing.T) {
	e := newEnv(t)
	e.writeConfig("flow_queueing = \"off\"\n")
	e.startDaemon()
	voice, bulk := e.app("voice-app"), e.app("bulk-app")
	e.hostqos("link", "set", e.iface(), "--egress-rate", "20mbit")
	echoAddr := serverV4.Addr().String() + ":7007"
	bulkAddr := serverV4.Addr().String() + ":7008"
	e.echo(echoAddr, 60*time.Second)
	e.tcpSink(bulkAddr, 60*time.Second, 0)
	e.start(bulk, "tool", "tcp-send", "--to", bulkAddr, "--streams", "16", "--duration", "40s")
	time.Sleep(1500 * time.Millisecond) // let the bulk queue build

	without := e.voiceRTT(voice, echoAddr, 3*time.Second)
	e.hostqos("rule", "add", "voice", "--exe", voice, "--class", "voice")
	var sent uint64
	measured(t, "voice with the rule", func(int) (bool, string) {
		with := e.voiceRTT(voice, echoAddr, 3*time.Second)
		sent += with.Sent
		msg := fmt.Sprintf("p99 RTT without rule %.2f ms (loss %.3f), with rule %.2f ms (loss %.3f, %d of %d lost); want none lost and ≥ 10x lower p99",
			without.RTT.P99, without.Loss, with.RTT.P99, with.Loss, with.Lost, with.Sent)
		t.Log(msg)
		return with.Sent >= 120 && with.Lost == 0 && with.RTT.P99 > 0 && without.RTT.P99 >= 10*with.RTT.P99, msg
	})
	st := e.ruleStat("voice")
	if st.Packets < sent {
		t.Errorf("rule voice counted %d packets, the app sent %d", st.Packets, sent)
	}
}

// TestRuleAppliesToOpenConnection: a rule added while the app has an open
// connection takes effect on that connection.
func TestRuleAppliesToOpenConnection(t *testing.T) {
	e := newEnv(t)
	e.startDaemon()
	app := e.app("longlived-app")
	e.hostqos("link", "set", e.iface())
	sn, err := testutil.StartReceiver(e.server, e.server.Iface("client"))
	if err != nil {
		t.Fatal(err)
	}
	defer sn.Stop()
	to := serverV4.Addr().String() + ":7010"
	e.udpSink(to, 30*time.Second)
	e.start(app, "tool", "udp-send", "--to", to, "--pps", "200", "--size", "200", "--duration", "8s")
	eventually(t, 5*time.Second, "traffic before the rule", func() (bool, string) {
		c, n := sn.DSCPCounts(17, 7010)
		return n >= 100 && c[0] == n, fmt.Sprintf("DSCP counts %v", c)
	})
	e.hostqos("rule", "add", "late", "--exe", app, "--dscp", "EF")
	eventually(t, 2*time.Second, "marking of the open socket", func() (bool, string) {
		c, _ := sn.DSCPCounts(17, 7010)
		return c[dscpEF] >= 50, fmt.Sprintf("DSCP counts %v", c)
	})
	flows := sn.To(17, 7010)
	if len(flows) != 1 {
		t.Fatalf("want one flow (the same socket throughout), got %d", len(flows))
	}
}

// TestSocketsOpenBeforeDaemonStart: sockets an app opened before hostqosd
// was running get an identity from the daemon's /proc walk, so a rule for
// the app applies to them within a second.
func TestSocketsOpenBeforeDaemonStart(t *testing.T) {
	e := newEnv(t)
	app := e.app("early-app")
	sn, err := testutil.StartReceiver(e.server, e.server.Iface("client"))
	if err != nil {
		t.Fatal(err)
	}
	defer sn.Stop()
	to := serverV4.Addr().String() + ":7030"
	e.udpSink(to, 30*time.Second)
	e.start(app, "tool", "udp-send", "--to", to, "--pps", "200", "--size", "200", "--duration", "10s")
	eventually(t, 5*time.Second, "traffic before the daemon", func() (bool, string) {
		_, n := sn.DSCPCounts(17, 7030)
		return n >= 50, fmt.Sprintf("%d packets", n)
	})
	e.startDaemon()
	e.hostqos("link", "set", e.iface())
	e.hostqos("rule", "add", "early", "--exe", app, "--dscp", "EF")
	_, n0 := sn.DSCPCounts(17, 7030)
	eventually(t, 3*time.Second, "marking of the socket opened before the daemon", func() (bool, string) {
		c, n := sn.DSCPCounts(17, 7030)
		return c[dscpEF] >= 50 && n > n0, fmt.Sprintf("DSCP counts %v", c)
	})
	if st := e.status(); st.Datapath.TaggedSockets < 1 {
		t.Errorf("status reports %d sockets tagged at start", st.Datapath.TaggedSockets)
	}
}
