package testbed_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hostqos/hostqos/internal/testbed"
	"github.com/hostqos/hostqos/internal/testutil"
	"github.com/hostqos/hostqos/internal/traffic"
)

func mp(s string) netip.Prefix { return netip.MustParsePrefix(s) }

// threeNode is client — router — server with IPv4 and IPv6; the router's
// egress toward the server is the bottleneck (rate, optional DiffServ).
func threeNode(name string, rate uint64, diffserv bool) testbed.Topology {
	return testbed.Topology{
		Name: name,
		Nodes: []testbed.NodeSpec{
			{Name: "client"}, {Name: "router", Router: true}, {Name: "server"},
		},
		Links: []testbed.LinkSpec{
			{A: "client", B: "router",
				AAddrs: []netip.Prefix{mp("198.18.1.1/24"), mp("2001:db8:1::1/64")},
				BAddrs: []netip.Prefix{mp("198.18.1.2/24"), mp("2001:db8:1::2/64")}},
			{A: "router", B: "server",
				AAddrs:   []netip.Prefix{mp("198.18.2.1/24"), mp("2001:db8:2::1/64")},
				BAddrs:   []netip.Prefix{mp("198.18.2.2/24"), mp("2001:db8:2::2/64")},
				RateAtoB: rate, DiffServAtoB: diffserv},
		},
	}
}

func build(t *testing.T, topo testbed.Topology) *testbed.Testbed {
	t.Helper()
	testutil.NeedRoot(t)
	tb, err := testbed.Build(topo)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := tb.Close(); err != nil {
			t.Error(err)
		}
	})
	return tb
}

func hp(a netip.Addr, port uint16) string { return netip.AddrPortFrom(a, port).String() }

// sink opens a UDP sink inside node and runs it in the background.
func startSink(t *testing.T, n *testbed.Node, addr netip.Addr, cfg traffic.SinkConfig) (netip.AddrPort, <-chan *traffic.SinkResult) {
	t.Helper()
	cfg.Listen = hp(addr, 0)
	var s *traffic.Sink
	if err := n.Do(func() (err error) {
		s, err = traffic.ListenSink(context.Background(), cfg)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	out := make(chan *traffic.SinkResult, 1)
	go func() {
		r, err := s.Run(context.Background())
		if err != nil {
			t.Error(err)
		}
		out <- r
	}()
	return s.Addr(), out
}

func TestReachabilityBothFamilies(t *testing.T) {
	tb := build(t, threeNode("hqtbreach", 0, false))
	client, server := tb.Node("client"), tb.Node("server")
	if client.Iface("router") == "" || client.AddrV4() != netip.MustParseAddr("198.18.1.1") ||
		server.LinkAddr("router", true) != netip.MustParseAddr("2001:db8:2::2") {
		t.Fatalf("lookup: iface %q v4 %v v6 %v", client.Iface("router"), client.AddrV4(), server.LinkAddr("router", true))
	}
	for _, v6 := range []bool{false, true} {
		dst := server.AddrV4()
		if v6 {
			dst = server.AddrV6()
		}
		// Echo in the server, client pings it through the router.
		var e *traffic.Echo
		if err := server.Do(func() (err error) {
			e, err = traffic.ListenEcho(context.Background(), hp(dst, 0))
			return err
		}); err != nil {
			t.Fatal(err)
		}
		ctx, stop := context.WithCancel(context.Background())
		done := make(chan *traffic.EchoResult, 1)
		go func() { er, _ := e.Run(ctx, 10*time.Second); done <- er }()
		var r *traffic.VoiceResult
		// A generous drain: a stalled shared machine must not turn a late
		// echo into a "lost" one.
		err := client.Do(func() (err error) {
			r, err = traffic.RunVoice(context.Background(), traffic.VoiceConfig{To: e.Addr().String(), Calls: 1, PacketRate: 100,
				Duration: 200 * time.Millisecond, DSCP: traffic.NoDSCP, Drain: 2 * time.Second})
			return err
		})
		stop()
		er := <-done
		if err != nil {
			t.Fatal(err)
		}
		if r.Sent == 0 || r.Received != r.Sent {
			t.Fatalf("v6=%v: sent %d received %d (echo server saw %+v)", v6, r.Sent, r.Received, er)
		}
	}
	// Command runs inside the namespace.
	out, err := client.Command("ip", "-o", "addr", "show", "dev", client.Iface("router")).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "198.18.1.1/24") {
		t.Fatalf("Command: %v: %s", err, out)
	}
	// No route out of the testbed.
	if err := client.Do(func() error {
		c, err := net.Dial("udp", "192.0.2.1:9")
		if err == nil {
			c.Close()
			return errors.New("192.0.2.1 routable from inside the testbed")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

func TestRateLimit(t *testing.T) {
	const rate = 20_000_000
	tb := build(t, threeNode("hqtbrate", rate, false))
	client, server := tb.Node("client"), tb.Node("server")
	// A stall of the shared VM can spoil one 2-second measurement; a
	// broken limit fails every attempt.
	testutil.Measured(t, "rate through the bottleneck", 3, func(attempt int) (bool, string) {
		addr, res := startSink(t, server, server.AddrV4(), traffic.SinkConfig{Duration: 10 * time.Second, Flows: 1})
		var sent *traffic.SendResult
		if err := client.Do(func() (err error) {
			// Offer 1.5× the bottleneck for 2 s.
			sent, err = traffic.SendCBR(context.Background(), traffic.CBRConfig{To: addr.String(), Size: 1400, BitRate: rate * 3 / 2, Duration: 2 * time.Second, DSCP: traffic.NoDSCP})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		r := <-res
		if len(r.Flows) != 1 {
			t.Fatalf("flows %+v", r.Flows)
		}
		got := r.Flows[0].IPBitRate
		// HTB counts the 14-byte Ethernet header too; the sink sees IP bytes.
		wire := got * float64(1400+28+14) / float64(1400+28)
		t.Logf("attempt %d: offered %.1f Mbit/s, received %.2f Mbit/s IP (%.2f on the wire), loss %.1f%%", attempt, sent.IPBitRate/1e6, got/1e6, wire/1e6, r.Loss*100)
		return wire >= 0.9*rate && wire <= 1.1*rate, fmt.Sprintf("achieved %.2f Mbit/s on a %d Mbit/s limit", wire/1e6, rate/1_000_000)
	})
}

func TestDiffServProtectsEF(t *testing.T) {
	const rate = 20_000_000
	tb := build(t, threeNode("hqtbds", rate, true))
	client, server := tb.Node("client"), tb.Node("server")
	// Latency and loss are measurements a stall of the shared VM can spoil:
	// up to three attempts; a broken DiffServ queue fails every one.
	testutil.Measured(t, "EF under default-class load", 3, func(int) (bool, string) {
		problem := diffServAttempt(t, client, server, rate)
		return problem == "", problem
	})
}

// diffServAttempt sends default traffic at 1.5× the bottleneck and EF
// voice through it, and says what is wrong ("" when EF was protected).
func diffServAttempt(t *testing.T, client, server *testbed.Node, rate uint64) string {
	bulkAddr, bulkRes := startSink(t, server, server.AddrV4(), traffic.SinkConfig{Duration: 15 * time.Second, Flows: 1})
	voiceAddr, voiceRes := startSink(t, server, server.AddrV4(), traffic.SinkConfig{Duration: 15 * time.Second, Flows: 10})
	bulkDone := make(chan error, 1)
	go func() {
		bulkDone <- client.Do(func() error {
			// Default-class traffic at 1.5× the bottleneck.
			_, err := traffic.SendCBR(context.Background(), traffic.CBRConfig{To: bulkAddr.String(), Size: 1400, BitRate: rate * 3 / 2, Duration: 2500 * time.Millisecond, DSCP: 0})
			return err
		})
	}()
	time.Sleep(500 * time.Millisecond) // let the default queue fill
	if err := client.Do(func() error {
		_, err := traffic.RunVoice(context.Background(), traffic.VoiceConfig{To: voiceAddr.String(), Calls: 10, Mode: traffic.VoiceOneWay, Duration: 1500 * time.Millisecond, DSCP: 46})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if err := <-bulkDone; err != nil {
		t.Fatal(err)
	}
	v, b := <-voiceRes, <-bulkRes
	t.Logf("EF: %d pkts loss %.2f%% p50 %.3fms p99 %.3fms; default: loss %.1f%% p50 %.3fms p99 %.3fms",
		v.Packets, v.Loss*100, v.Latency.P50, v.Latency.P99, b.Loss*100, b.Latency.P50, b.Latency.P99)
	if v.Packets == 0 || v.DSCP["EF"] != v.Packets {
		t.Fatalf("voice sink %+v", v)
	}
	switch {
	case b.Loss < 0.1:
		return fmt.Sprintf("default traffic did not saturate the bottleneck: loss %.3f", b.Loss)
	case v.Loss > 0.01:
		return fmt.Sprintf("EF loss %.3f under saturating default traffic", v.Loss)
	case v.Latency.P99*5 > b.Latency.P50:
		// EF's queueing is a small fraction of the default class's.
		return fmt.Sprintf("EF p99 %.3fms not well below default p50 %.3fms", v.Latency.P99, b.Latency.P50)
	}
	return ""
}

func TestCloseLeavesNothing(t *testing.T) {
	testutil.NeedRoot(t)
	tb, err := testbed.Build(threeNode("hqtbclose", 10_000_000, true))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, n := range tb.Nodes() {
		names = append(names, n.NetnsName)
		if _, err := os.Stat(filepath.Join("/run/netns", n.NetnsName)); err != nil {
			t.Fatalf("namespace %s missing: %v", n.NetnsName, err)
		}
		if !strings.HasPrefix(n.NetnsName, "hq-hqtbclose-"+n.Name+"-") {
			t.Fatalf("namespace name %q", n.NetnsName)
		}
	}
	if err := tb.Close(); err != nil {
		t.Fatal(err)
	}
	if err := tb.Close(); err != nil {
		t.Fatal("second Close:", err)
	}
	for _, n := range names {
		for _, p := range []string{filepath.Join("/run/netns", n), filepath.Join(testbed.MarkerDir, n+".pid")} {
			if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("%s left behind (%v)", p, err)
			}
		}
	}
}

func TestBuildIsAllOrNothing(t *testing.T) {
	testutil.NeedRoot(t)
	topo := threeNode("hqtbfail", 0, false)
	// The same address twice on one node's two links fails at the second.
	topo.Links[1].AAddrs = []netip.Prefix{mp("198.18.1.2/24")}
	before := netnsWithPrefix(t, "hq-hqtbfail-")
	if _, err := testbed.Build(topo); err == nil {
		t.Fatal("Build succeeded with a duplicate address")
	}
	if after := netnsWithPrefix(t, "hq-hqtbfail-"); after != before {
		t.Fatalf("failed Build left %d namespaces (before %d)", after, before)
	}
	if _, err := testbed.Build(testbed.Topology{Name: "Bad Name"}); err == nil || !strings.Contains(err.Error(), "topology name") {
		t.Fatalf("bad name: %v", err)
	}
}

func netnsWithPrefix(t *testing.T, prefix string) int {
	ents, _ := os.ReadDir("/run/netns")
	n := 0
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), prefix) {
			n++
		}
	}
	return n
}

func TestCleanStaleRemovesDeadRunsLeftovers(t *testing.T) {
	testutil.NeedRoot(t)
	// A "crashed run": a namespace with a marker naming a dead pid.
	tb, err := testbed.Build(testbed.Topology{Name: "hqtbstale", Nodes: []testbed.NodeSpec{{Name: "a"}}})
	if err != nil {
		t.Fatal(err)
	}
	n := tb.Node("a").NetnsName
	t.Cleanup(func() { tb.Close() })
	dead := deadPid(t)
	if err := os.WriteFile(filepath.Join(testbed.MarkerDir, n+".pid"), []byte(strconv.Itoa(dead)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A live one (ours) must survive.
	live, err := testbed.Build(testbed.Topology{Name: "hqtblive", Nodes: []testbed.NodeSpec{{Name: "b"}}})
	if err != nil { // Build runs CleanStale first
		t.Fatal(err)
	}
	t.Cleanup(func() { live.Close() })
	if _, err := os.Stat(filepath.Join("/run/netns", n)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("stale namespace %s not removed (%v)", n, err)
	}
	if _, err := os.Stat(filepath.Join(testbed.MarkerDir, n+".pid")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("stale marker not removed (%v)", err)
	}
	if err := testbed.CleanStale(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join("/run/netns", live.Node("b").NetnsName)); err != nil {
		t.Fatalf("live namespace removed: %v", err)
	}
}

// deadPid returns the pid of a process that has exited.
func deadPid(t *testing.T) int {
	p, err := os.StartProcess("/bin/true", []string{"true"}, &os.ProcAttr{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Wait(); err != nil {
		t.Fatal(err)
	}
	return p.Pid
}

func TestDiffServDropPrecedence(t *testing.T) {
	const rate = 20_000_000
	tb := build(t, threeNode("hqtbdp", rate, true))
	client, server := tb.Node("client"), tb.Node("server")
	lowAddr, lowRes := startSink(t, server, server.AddrV6(), traffic.SinkConfig{Duration: 10 * time.Second, Flows: 1})
	highAddr, highRes := startSink(t, server, server.AddrV6(), traffic.SinkConfig{Duration: 10 * time.Second, Flows: 1})
	errc := make(chan error, 1)
	go func() {
		errc <- client.Do(func() error {
			_, err := traffic.SendCBR(context.Background(), traffic.CBRConfig{To: highAddr.String(), Size: 1400, BitRate: rate * 3 / 2, Duration: 2 * time.Second, DSCP: 14}) // AF13
			return err
		})
	}()
	if err := client.Do(func() error {
		_, err := traffic.SendCBR(context.Background(), traffic.CBRConfig{To: lowAddr.String(), Size: 1000, BitRate: rate / 10, Duration: 2 * time.Second, DSCP: 10}) // AF11
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	low, high := <-lowRes, <-highRes
	t.Logf("AF11 loss %.2f%% p99 %.2fms; AF13 loss %.1f%% p99 %.2fms", low.Loss*100, low.Latency.P99, high.Loss*100, high.Latency.P99)
	if high.Loss < 0.2 || low.Loss > 0.01 || low.DSCP["AF11"] == 0 || high.DSCP["AF13"] == 0 {
		t.Fatalf("AF11 %+v / AF13 %+v", low, high)
	}
}

// TestDiffServLEBelowDefault: the router role serves LE (RFC 8622) below
// default, on both families, and its class counters say where the packets
// went. Default traffic at 80 % of the bottleneck and LE at 80 % more:
// default loses (almost) nothing, LE takes what is left.
func TestDiffServLEBelowDefault(t *testing.T) {
	const rate = 20_000_000
	tb := build(t, threeNode("hqtble", rate, true))
	client, server, router := tb.Node("client"), tb.Node("server"), tb.Node("router")
	before, err := router.DiffServStats("server")
	if err != nil {
		t.Fatal(err)
	}
	defAddr, defRes := startSink(t, server, server.AddrV4(), traffic.SinkConfig{Duration: 10 * time.Second, Flows: 1})
	le4Addr, le4Res := startSink(t, server, server.AddrV4(), traffic.SinkConfig{Duration: 10 * time.Second, Flows: 1})
	le6Addr, le6Res := startSink(t, server, server.AddrV6(), traffic.SinkConfig{Duration: 10 * time.Second, Flows: 1})
	send := func(to netip.AddrPort, bps uint64, dscp int) <-chan error {
		errc := make(chan error, 1)
		go func() {
			errc <- client.Do(func() error {
				_, err := traffic.SendCBR(context.Background(), traffic.CBRConfig{To: to.String(), Size: 1200, BitRate: bps, Duration: 2 * time.Second, DSCP: dscp})
				return err
			})
		}()
		return errc
	}
	errs := []<-chan error{send(defAddr, rate*8/10, 0), send(le4Addr, rate*4/10, 1), send(le6Addr, rate*4/10, 1)}
	for _, e := range errs {
		if err := <-e; err != nil {
			t.Fatal(err)
		}
	}
	def, le4, le6 := <-defRes, <-le4Res, <-le6Res
	t.Logf("default loss %.2f%% p99 %.2fms; LE over IPv4 loss %.1f%%, over IPv6 loss %.1f%%", def.Loss*100, def.Latency.P99, le4.Loss*100, le6.Loss*100)
	if def.Loss > 0.02 || le4.Loss < 0.3 || le6.Loss < 0.3 || le4.DSCP["LE"] == 0 || le6.DSCP["LE"] == 0 {
		t.Fatalf("want default loss ≤ 2 %% and LE loss ≥ 30 %% on both families, marked LE: default loss %.3f, LE over IPv4 loss %.3f (DSCP %v), over IPv6 loss %.3f (DSCP %v)",
			def.Loss, le4.Loss, le4.DSCP, le6.Loss, le6.DSCP)
	}
	after, err := router.DiffServStats("server")
	if err != nil {
		t.Fatal(err)
	}
	sent := map[string]uint64{}
	for i := range after {
		sent[after[i].Name] = after[i].Packets - before[i].Packets
	}
	if got, want := sent["scavenger"], le4.Packets+le6.Packets; got < want {
		t.Errorf("router counters: scavenger sent %d packets, the LE sinks received %d (%+v)", got, want, after)
	}
	if got := sent["default"]; got < def.Packets {
		t.Errorf("router counters: default sent %d packets, the default sink received %d", got, def.Packets)
	}
}

func TestShortestPathRoutesThroughTwoRouters(t *testing.T) {
	// h1 — r1 — r2 — h2, plus a direct r1 — h3 stub; every node reaches every
	// other node's addresses in both families.
	tb := build(t, testbed.Topology{
		Name:  "hqtbchain",
		Nodes: []testbed.NodeSpec{{Name: "h1"}, {Name: "r1", Router: true}, {Name: "r2", Router: true}, {Name: "h2"}, {Name: "h3"}},
		Links: []testbed.LinkSpec{
			{A: "h1", B: "r1", AAddrs: []netip.Prefix{mp("198.18.10.1/24"), mp("2001:db8:10::1/64")}, BAddrs: []netip.Prefix{mp("198.18.10.2/24"), mp("2001:db8:10::2/64")}},
			{A: "r1", B: "r2", AAddrs: []netip.Prefix{mp("198.18.11.1/30"), mp("2001:db8:11::1/64")}, BAddrs: []netip.Prefix{mp("198.18.11.2/30"), mp("2001:db8:11::2/64")}},
			{A: "r2", B: "h2", AAddrs: []netip.Prefix{mp("198.18.12.1/24"), mp("2001:db8:12::1/64")}, BAddrs: []netip.Prefix{mp("198.18.12.2/24"), mp("2001:db8:12::2/64")}},
			{A: "r1", B: "h3", AAddrs: []netip.Prefix{mp("198.18.13.1/24")}, BAddrs: []netip.Prefix{mp("198.18.13.2/24")}},
		},
	})
	for _, from := range tb.Nodes() {
		for _, to := range tb.Nodes() {
			if from == to {
				continue
			}
			for _, p := range to.Prefixes() {
				if p.Addr().Is6() && !from.AddrV6().IsValid() {
					continue // h3 has no IPv6
				}
				var e *traffic.Echo
				if err := to.Do(func() (err error) {
					e, err = traffic.ListenEcho(context.Background(), hp(p.Addr(), 0))
					return err
				}); err != nil {
					t.Fatal(err)
				}
				ctx, stop := context.WithCancel(context.Background())
				done := make(chan struct{})
				go func() { defer close(done); e.Run(ctx, 10*time.Second) }()
				var r *traffic.VoiceResult
				err := from.Do(func() (err error) {
					r, err = traffic.RunVoice(context.Background(), traffic.VoiceConfig{To: e.Addr().String(), Calls: 1, PacketRate: 200, Duration: 10 * time.Millisecond, DSCP: traffic.NoDSCP, Drain: time.Second})
					return err
				})
				stop()
				<-done
				if err != nil {
					t.Fatal(err)
				}
				if r.Sent == 0 || r.Received != r.Sent {
					t.Errorf("%s → %s %v: sent %d received %d", from.Name, to.Name, p.Addr(), r.Sent, r.Received)
				}
			}
		}
	}
}

func TestDoRunsInNamespaceAndPropagatesPanics(t *testing.T) {
	tb := build(t, testbed.Topology{Name: "hqtbdo", Nodes: []testbed.NodeSpec{{Name: "a"}}})
	a := tb.Node("a")
	var inside, outside string
	if err := a.Do(func() error {
		l, err := os.Readlink("/proc/thread-self/ns/net")
		inside = l
		return err
	}); err != nil {
		t.Fatal(err)
	}
	outside, _ = os.Readlink("/proc/self/ns/net")
	if inside == outside || inside == "" {
		t.Fatalf("Do ran in %q, process is in %q", inside, outside)
	}
	defer func() {
		if p := recover(); p != "boom" {
			t.Fatalf("recovered %v, want boom", p)
		}
	}()
	a.Do(func() error { panic("boom") })
}
