package rsvp

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/hostqos/hostqos/internal/testbed"
	"github.com/hostqos/hostqos/internal/testutil"
)

// TestRouterAgents: sender — router — receiver, three namespaces, the
// router forwarding in the kernel and intercepting Path by its Router
// Alert option. A reservation installs on the sender and the router and is
// confirmed; one over the router's capacity gets a ResvErr naming the
// router and installs nothing; when the receiver's agent dies the
// reservation times out on both hops within L for the test's R.
func TestRouterAgents(t *testing.T) {
	const refresh = 200 * time.Millisecond
	snd, rtr, rcv := threeNodes(t, refresh)
	S, D, R2 := snd.addr, rcv.addr, rtr.addr

	sess := Session{Dest: D, Proto: 17, Port: 5004}
	k := FlowKey{sess, Filter{Src: S, Port: 4000}}
	k2 := FlowKey{sess, Filter{Src: S, Port: 4001}}
	for _, key := range []FlowKey{k, k2} {
		outs, err := snd.agent.Node.Sender(key, testTspec, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		snd.agent.Send(outs)
		waitEvent(t, rcv, "path")
	}
	if p, _ := rtr.agent.Node.Counts(); p != 2 {
		t.Fatalf("router holds %d path states, want 2 (it must intercept Path)", p)
	}

	// Within the router's capacity: installed on sender and router, confirmed.
	fs := Flowspec{Service: ServiceGuaranteed, Tspec: testTspec, RspecRate: 150000}
	outs, err := rcv.agent.Node.Reserve(sess, StyleFF, fs, []Filter{k.Sender}, true, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	rcv.agent.Send(outs)
	if e := waitEvent(t, rcv, "confirm"); e.Node != S {
		t.Fatalf("confirmed by %s, want the sender", e.Node)
	}
	if !snd.inst.has(k) || !rtr.inst.has(k) {
		t.Fatalf("installed on sender %v, router %v; want both", snd.inst.has(k), rtr.inst.has(k))
	}

	// Over the router's capacity (150000 of 200000 taken): ResvErr naming
	// the router, nothing installed for the second sender anywhere.
	outs, err = rcv.agent.Node.Reserve(sess, StyleFF, fs, []Filter{k2.Sender}, false, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	rcv.agent.Send(outs)
	e := waitEvent(t, rcv, "resv-error")
	if e.Node != R2 || e.Code != ErrAdmission || e.Value != 2 || e.Flowspec.RspecRate != 150000 {
		t.Fatalf("ResvErr %+v: want the router %s, admission failure, bandwidth unavailable, R 150000", e, R2)
	}
	if r := waitEvent(t, rtr, "resv-refused"); r.Reason != "r: 150000 B/s requested, 50000 of 200000 B/s reservable left" {
		t.Errorf("router's reason %q", r.Reason)
	}
	if snd.inst.has(k2) || rtr.inst.has(k2) {
		t.Fatal("refused reservation installed somewhere")
	}

	// The receiver dies: both hops time out within L (the deadline leaves
	// a loaded machine room; state that never times out misses it).
	rcv.cancel()
	<-rcv.done
	start := time.Now()
	gone, cancelGone := context.WithTimeout(context.Background(), Lifetime(refresh)+5*time.Second)
	defer cancelGone()
	for snd.inst.has(k) || rtr.inst.has(k) {
		select {
		case <-gone.Done():
			t.Fatalf("reservation still installed %v after the receiver died (L = %v)", time.Since(start).Round(time.Millisecond), Lifetime(refresh))
		case <-time.After(10 * time.Millisecond):
		}
	}
	t.Logf("gone on both hops %v after the receiver died (L = %v, R = %v)", time.Since(start).Round(time.Millisecond), Lifetime(refresh), refresh)
	if m := rtr.agent.Malformed.Load() + snd.agent.Malformed.Load(); m != 0 {
		t.Errorf("%d malformed messages", m)
	}
}

// side is one node of threeNodes: its agent, installer and upcalls.
type side struct {
	agent  *Agent
	inst   *lockedInstall
	events chan Event
	cancel context.CancelFunc
	done   chan struct{}
	addr   netip.Addr // its address (the router's toward the receiver)
}

// threeNodes builds sender s (198.18.1.2) — router r (198.18.1.1,
// 198.18.2.1; 200000 B/s reservable) — receiver d (198.18.2.2) and runs
// an agent on each.
func threeNodes(t testing.TB, refresh time.Duration) (snd, rtr, rcv *side) {
	snd, rtr, rcv, _ = threeNodesR(t, refresh, refresh, refresh)
	return snd, rtr, rcv
}

// threeNodesR is threeNodes with each node's own refresh period R (sender,
// router, receiver), and the testbed.
func threeNodesR(t testing.TB, rs, rr, rd time.Duration) (snd, rtr, rcv *side, bed *testbed.Testbed) {
	testutil.NeedRoot(t)
	var err error
	bed, err = testbed.Build(testbed.Topology{Name: "rs" + testutil.RandHex(4),
		Nodes: []testbed.NodeSpec{{Name: "s"}, {Name: "r", Router: true}, {Name: "d"}},
		Links: []testbed.LinkSpec{
			{A: "s", B: "r", AAddrs: []netip.Prefix{netip.MustParsePrefix("198.18.1.2/24")}, BAddrs: []netip.Prefix{netip.MustParsePrefix("198.18.1.1/24")}},
			{A: "r", B: "d", AAddrs: []netip.Prefix{netip.MustParsePrefix("198.18.2.1/24")}, BAddrs: []netip.Prefix{netip.MustParsePrefix("198.18.2.2/24")}},
		}})
	if err != nil {
		t.Fatalf("build namespaces: %v", err)
	}
	t.Cleanup(func() { _ = bed.Close() })

	net1 := netip.MustParsePrefix("198.18.1.0/24")
	mk := func(name string, refresh time.Duration, capacity float32, router bool, local func(netip.Addr) (netip.Addr, bool, error)) *side {
		sd := &side{inst: &lockedInstall{f: fakeInstall{name: name, capacity: capacity, installed: map[FlowKey]Flowspec{}}},
			events: make(chan Event, 64), done: make(chan struct{})}
		var c *Conn
		if err := bed.Node(name).Do(func() (err error) {
			if c, err = Listen(false); err != nil {
				return err
			}
			if router {
				return c.InterceptRouterAlert()
			}
			return nil
		}); err != nil {
			t.Fatalf("sockets in %s: %v", name, err)
		}
		node := NewNode(Config{Local: local, Install: sd.inst, Refresh: refresh, Router: router,
			Upcall: func(e Event) {
				select {
				case sd.events <- e:
				default:
				}
			}})
		sd.agent = &Agent{Node: node, V4: c, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Period: 20 * time.Millisecond}
		ctx, cancel := context.WithCancel(context.Background())
		sd.cancel = cancel
		go func() { defer close(sd.done); sd.agent.Run(ctx) }()
		t.Cleanup(func() { cancel(); <-sd.done })
		return sd
	}
	fixed := func(a netip.Addr) func(netip.Addr) (netip.Addr, bool, error) {
		return func(dst netip.Addr) (netip.Addr, bool, error) { return a, dst == a, nil }
	}
	S, D := netip.MustParseAddr("198.18.1.2"), netip.MustParseAddr("198.18.2.2")
	R1, R2 := netip.MustParseAddr("198.18.1.1"), netip.MustParseAddr("198.18.2.1")
	snd = mk("s", rs, 1e9, false, fixed(S))
	rtr = mk("r", rr, 200000, true, func(dst netip.Addr) (netip.Addr, bool, error) {
		if net1.Contains(dst) {
			return R1, dst == R1, nil
		}
		return R2, dst == R2, nil
	})
	rcv = mk("d", rd, 1e9, false, fixed(D))

	snd.addr, rtr.addr, rcv.addr = S, R2, D
	return snd, rtr, rcv, bed
}

// TestRouterRefreshesOnItsOwnTimer: a router refreshes the state it
// forwards on its own timer with its own refresh period R (RFC 2205
// §3.7), not when the sender's or the receiver's refreshes pass through.
// The sender and receiver refresh every 3 s, the router every 150 ms: in
// 2 s of steady state, tshark on the router's links sees about 13 Paths
// toward the receiver and as many Resvs toward the sender, every one with
// the router's TIME_VALUES of 150 ms.
func TestRouterRefreshesOnItsOwnTimer(t *testing.T) {
	tshark, err := exec.LookPath("tshark")
	if err != nil {
		t.Fatal("tshark is not installed (scripts/install-deps.sh installs it)")
	}
	const slow, fast = 3 * time.Second, 150 * time.Millisecond
	snd, _, rcv, bed := threeNodesR(t, slow, fast, slow)
	sess := Session{Dest: rcv.addr, Proto: 17, Port: 5004}
	k := FlowKey{sess, Filter{Src: snd.addr, Port: 4000}}
	outs, err := snd.agent.Node.Sender(k, testTspec, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	snd.agent.Send(outs)
	waitEvent(t, rcv, "path")
	outs, err = rcv.agent.Node.Reserve(sess, StyleFF, Flowspec{Service: ServiceGuaranteed, Tspec: testTspec, RspecRate: 150000}, []Filter{k.Sender}, false, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	rcv.agent.Send(outs)
	waitEvent(t, snd, "resv")

	r := bed.Node("r")
	capture := func(peer string) *exec.Cmd {
		return r.Command(tshark, "-l", "-n", "-i", r.Iface(peer), "-f", "ip proto 46", "-a", "duration:2",
			"-T", "fields", "-e", "rsvp.msg", "-e", "rsvp.refresh_interval", "-e", "ip.src")
	}
	down, up := capture("d"), capture("s")
	var dout, uout bytes.Buffer
	down.Stdout, up.Stdout = &dout, &uout
	for _, c := range []*exec.Cmd{down, up} {
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []*exec.Cmd{down, up} {
		if err := c.Wait(); err != nil {
			t.Fatalf("tshark: %v", err)
		}
	}
	count := func(out, msg, from string) (n int, bad []string) {
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			f := strings.Split(line, "\t")
			if len(f) < 3 || f[0] != msg || f[2] != from {
				continue
			}
			n++
			if f[1] != "150" {
				bad = append(bad, line)
			}
		}
		return n, bad
	}
	paths, badP := count(dout.String(), "1", "198.18.2.1")
	resvs, badR := count(uout.String(), "2", "198.18.1.1")
	t.Logf("in 2 s the router sent %d Paths downstream and %d Resvs upstream (R 150 ms; the hosts' R 3 s)", paths, resvs)
	if paths < 6 || resvs < 6 || len(badP) > 0 || len(badR) > 0 {
		t.Errorf("router's refreshes: %d Paths, %d Resvs in 2 s, want ≥ 6 of each at its own R = 150 ms; with another refresh period: %q %q\ndown:\n%s\nup:\n%s",
			paths, resvs, badP, badR, dout.String(), uout.String())
	}
}

// waitEvent waits for an upcall of kind at sd.
func waitEvent(t *testing.T, sd *side, kind string) Event {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case e := <-sd.events:
			if e.Kind == kind {
				return e
			}
		case <-deadline:
			t.Fatalf("no %s upcall", kind)
		}
	}
}
