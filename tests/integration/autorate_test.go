package integration

import (
	"context"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/testbed"
	"github.com/hostqos/hostqos/internal/testutil"
	"github.com/hostqos/hostqos/internal/testutil/daemontest"
	"github.com/hostqos/hostqos/internal/traffic"
)

// newSteppingEnv is client — router — server with 20 ms each way between
// router and server and a bottleneck of rate with a 1000-packet FIFO on
// the router's egress toward the server (a modem's), unknown to the
// client, where the daemon runs.
// With down, the bottleneck is the router's egress toward the client
// instead (the downlink).
func newSteppingEnv(t *testing.T, rate uint64, down bool) (*env, *testbed.Testbed) {
	t.Helper()
	testutil.NeedRoot(t)
	mp := netip.MustParsePrefix
	up := testbed.LinkSpec{A: "client", B: "router", AAddrs: []netip.Prefix{mp("198.18.31.1/24")}, BAddrs: []netip.Prefix{mp("198.18.31.2/24")}}
	far := testbed.LinkSpec{A: "router", B: "server", AAddrs: []netip.Prefix{mp("198.18.32.1/24")}, BAddrs: []netip.Prefix{mp("198.18.32.2/24")},
		DelayAtoB: 20 * time.Millisecond, DelayBtoA: 20 * time.Millisecond}
	if down {
		up.RateBtoA, up.QueueBtoA = rate, 1000
	} else {
		far.RateAtoB, far.QueueAtoB = rate, 1000
	}
	tb, err := testbed.Build(testbed.Topology{Name: "autorate",
		Nodes: []testbed.NodeSpec{{Name: "client"}, {Name: "router", Router: true}, {Name: "server"}},
		Links: []testbed.LinkSpec{up, far}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := tb.Close(); err != nil {
			t.Error(err)
		}
	})
	e := &env{t: t, client: tb.Node("client"), server: tb.Node("server")}
	e.d = daemontest.New(t, e.client, binDir)
	e.dir = e.d.Dir
	e.cli = e.d.Client
	return e, tb
}

// watchAutoRate polls link name's automatic egress (or ingress) rate
// for up to d until ok holds of the rate in force, and returns how long
// that took (-1: it did not) and the last reading; a rate outside the
// tests' [1mbit, 40mbit] bounds fails the test at once.
func (e *env) watchAutoRate(name string, ingress bool, d time.Duration, ok func(r uint64) bool) (time.Duration, api.AutoRate) {
	e.t.Helper()
	start := time.Now()
	var a api.AutoRate
	for time.Since(start) < d {
		a = e.autoRate(name, ingress)
		if a.InForce > 40_000_000 || a.InForce < 1_000_000 {
			e.t.Fatalf("rate in force %d outside [min, max]", a.InForce)
		}
		if ok(a.InForce) {
			return time.Since(start), a
		}
		time.Sleep(100 * time.Millisecond)
	}
	return -1, a
}

// autoRate is the automatic egress (or ingress) rate of link name now.
func (e *env) autoRate(name string, ingress bool) api.AutoRate {
	e.t.Helper()
	ls, err := e.cli.Links().List(context.Background())
	if err != nil {
		e.t.Fatal(err)
	}
	for _, l := range ls {
		a := l.EgressAuto
		if ingress {
			a = l.IngressAuto
		}
		if l.Name == name && a != nil {
			return *a
		}
	}
	e.t.Fatalf("link %s has no automatic rate (ingress %v): %+v", name, ingress, ls)
	return api.AutoRate{}
}

// TestAutoEgressFollowsStepDown: with --egress-rate auto and 4 uploads
// running, a 4× step down of a bottleneck the host does not know about
// brings the rate in force to within 15 % of the new capacity (without
// the step being told to anyone), and a step up back to 85 % of it,
// reported in the link's status and as link.rate events; the rate never
// leaves [--min, --max].
func TestAutoEgressFollowsStepDown(t *testing.T) {
	e, tb := newSteppingEnv(t, 30_000_000, false)
	e.startDaemon()
	ifc := e.client.Iface("router")
	bulk := e.app("upload-app")
	e.hostqos("link", "set", ifc, "--egress-rate", "auto", "--min", "1mbit", "--max", "40mbit")
	srv := "198.18.32.2"
	to := srv + ":" + strconv.Itoa(7301)
	e.tcpSink(to, 90*time.Second, 0)
	e.start(bulk, "tool", "tcp-send", "--to", to, "--streams", "4", "--duration", "45s")

	watch := func(d time.Duration, ok func(r uint64) bool) (time.Duration, api.AutoRate) {
		return e.watchAutoRate(ifc, false, d, ok)
	}
	// Settle below 30 Mbit/s first.
	at, a := watch(20*time.Second, func(r uint64) bool { return r <= 30_000_000 && r >= 20_000_000 })
	t.Logf("at 30 Mbit/s: rate in force %d after %v, estimate %d, %d changes (%s)", a.InForce, at, a.Estimate, a.Changes, a.Reason)
	if at < 0 {
		t.Fatalf("the rate did not settle below the 30 Mbit/s bottleneck: %+v", a)
	}
	time.Sleep(3 * time.Second)
	if err := tb.SetRate("router", "server", 7_500_000); err != nil {
		t.Fatal(err)
	}
	// The acceptance figure is 2 s; a shared 2-core machine gets room
	// (the figure measured is logged and in bench/RESULTS.md).
	at, a = watch(8*time.Second, func(r uint64) bool { return r <= 7_500_000*115/100 && r >= 7_500_000*85/100 })
	t.Logf("4× step down to 7.5 Mbit/s followed after %v: rate in force %d, estimate %d, %d changes (%s)", at, a.InForce, a.Estimate, a.Changes, a.Reason)
	if at < 0 {
		t.Fatalf("4× step down not followed within 8 s: %+v", a)
	}
	// A step up to 20 Mbit/s: the acceptance figure is 10 s.
	if err := tb.SetRate("router", "server", 20_000_000); err != nil {
		t.Fatal(err)
	}
	at, a = watch(20*time.Second, func(r uint64) bool { return r >= 20_000_000*85/100 })
	t.Logf("step up to 20 Mbit/s followed after %v: rate in force %d, estimate %d, %d changes (%s)", at, a.InForce, a.Estimate, a.Changes, a.Reason)
	if at < 0 {
		t.Fatalf("step up not followed within 20 s: %+v", a)
	}
	t.Log(e.hostqos("status"))
	if out := e.hostqos("events", "--since", "0", "--kind", "link.rate", "--count", "2"); !strings.Contains(out, "link.rate") {
		t.Errorf("no link.rate event: %s", out)
	}
}

// TestAutoIngressFollowsStepDown: the same for downloads with
// --ingress-rate auto: the downlink's 4× step down brings the download
// budget in force to within 15 % of the new capacity.
func TestAutoIngressFollowsStepDown(t *testing.T) {
	e, tb := newSteppingEnv(t, 30_000_000, true)
	e.startDaemon()
	ifc := e.client.Iface("router")
	e.hostqos("link", "set", ifc, "--ingress-rate", "auto", "--min", "1mbit", "--max", "40mbit")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var sink *traffic.TCPSink
	if err := e.client.Do(func() (err error) {
		sink, err = traffic.ListenTCPSink(ctx, traffic.TCPSinkConfig{Listen: "198.18.31.1:7401", Duration: 90 * time.Second})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = sink.Run(ctx) }()
	go func() {
		_ = e.server.Do(func() error {
			_, err := traffic.SendBulk(ctx, traffic.BulkConfig{To: "198.18.31.1:7401", Streams: 4, Duration: 45 * time.Second, DSCP: traffic.NoDSCP})
			return err
		})
	}()
	watch := func(d time.Duration, ok func(r uint64) bool) (time.Duration, api.AutoRate) {
		return e.watchAutoRate(ifc, true, d, ok)
	}
	at, a := watch(20*time.Second, func(r uint64) bool { return r <= 31_000_000 && r >= 20_000_000 })
	t.Logf("at 30 Mbit/s: budget in force %d after %v, estimate %d, %d changes (%s)", a.InForce, at, a.Estimate, a.Changes, a.Reason)
	if at < 0 {
		t.Fatalf("the budget did not settle at the 30 Mbit/s downlink: %+v", a)
	}
	time.Sleep(3 * time.Second)
	if err := tb.SetRate("router", "client", 7_500_000); err != nil {
		t.Fatal(err)
	}
	at, a = watch(10*time.Second, func(r uint64) bool { return r <= 7_500_000*115/100 && r >= 7_500_000*85/100 })
	t.Logf("4× step down to 7.5 Mbit/s followed after %v: budget in force %d, estimate %d, %d changes (%s)", at, a.InForce, a.Estimate, a.Changes, a.Reason)
	if at < 0 {
		t.Fatalf("4× downlink step down not followed within 10 s: %+v", a)
	}
}
