package testutil

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/hostqos/hostqos/internal/testbed"
)

// NetNS is a network namespace made for one test: a testbed node, with its
// Do (code on a locked OS thread inside the namespace), Command (a program
// run in it with nsenter), Handle (netlink), NetnsName (the name under
// /run/netns, for `ip -n` and `tc -n`) and addresses.
type NetNS struct {
	*testbed.Node
}

// MustDo runs fn inside the namespace (Do) and fails the test on an error.
// fn runs on another goroutine: it may call tb.Error but not tb.Fatal.
func (n *NetNS) MustDo(tb testing.TB, fn func() error) {
	tb.Helper()
	if err := n.Do(fn); err != nil {
		tb.Fatalf("in namespace %s: %v", n.NetnsName, err)
	}
}

// Ifindex is the index of interface name inside the namespace.
func (n *NetNS) Ifindex(tb testing.TB, name string) int {
	tb.Helper()
	l, err := n.Handle().LinkByName(name)
	if err != nil {
		tb.Fatalf("find %s in namespace %s: %v", name, n.NetnsName, err)
	}
	return l.Attrs().Index
}

// topology is the testbed name of every namespace these helpers make:
// they are called hq-tu-<node>-<random>.
const topology = "tu"

// build builds t for one test: it is removed at cleanup and on SIGINT or
// SIGTERM; a killed run's leftovers go with the next run's CleanStale.
func build(tb testing.TB, t testbed.Topology) *testbed.Testbed {
	tb.Helper()
	NeedRoot(tb)
	cleanStaleOnce(tb)
	bed, err := testbed.Build(t)
	if err != nil {
		tb.Fatalf("build network namespaces: %v", err)
	}
	unregister := onSignal(func() { _ = bed.Close() })
	tb.Cleanup(func() {
		unregister()
		if err := bed.Close(); err != nil {
			tb.Errorf("remove network namespaces: %v", err)
		}
	})
	return bed
}

// NewNetNS makes a network namespace with only lo, up. It needs root
// (without it the test is skipped).
func NewNetNS(tb testing.TB) *NetNS {
	tb.Helper()
	bed := build(tb, testbed.Topology{Name: topology, Nodes: []testbed.NodeSpec{{Name: "ns"}}})
	return &NetNS{bed.Node("ns")}
}

// The addresses of a pair's ends (documentation and benchmarking ranges).
var (
	PairA4 = netip.MustParsePrefix("198.18.0.1/24")
	PairB4 = netip.MustParsePrefix("198.18.0.2/24")
	PairA6 = netip.MustParsePrefix("2001:db8::1/64")
	PairB6 = netip.MustParsePrefix("2001:db8::2/64")
)

// Pair is two namespaces joined by a veth: A has PairA4 and PairA6 on its
// end IfA, B has PairB4 and PairB6 on IfB. Each end knows the other's
// link-layer address (no ARP or neighbour discovery), IPv6 addresses need
// no duplicate detection.
type Pair struct {
	A, B     *NetNS
	IfA, IfB string // the veth's end in A and in B
	IndexA   int    // ifindex of IfA in A
	IndexB   int    // ifindex of IfB in B
}

// NewPair makes a Pair whose namespaces are the testbed nodes "a" and "b".
// It needs root (without it the test is skipped).
func NewPair(tb testing.TB) *Pair {
	tb.Helper()
	return NewPairNamed(tb, "a", "b")
}

// NewPairNamed makes a Pair whose namespaces are the testbed nodes a and b
// (1..15 of a-z, 0-9 and '-'); the veth's end in A is called b and the one
// in B is called a.
func NewPairNamed(tb testing.TB, a, b string) *Pair {
	tb.Helper()
	bed := build(tb, PairTopology(a, b))
	p := &Pair{A: &NetNS{bed.Node(a)}, B: &NetNS{bed.Node(b)}}
	p.IfA, p.IfB = p.A.Iface(b), p.B.Iface(a)
	p.IndexA, p.IndexB = p.A.Ifindex(tb, p.IfA), p.B.Ifindex(tb, p.IfB)
	return p
}

// PairTopology is the testbed topology of NewPairNamed, for a fixture that
// outlives one test (built with testbed.Build, closed by its owner).
func PairTopology(a, b string) testbed.Topology {
	return testbed.Topology{
		Name:  topology,
		Nodes: []testbed.NodeSpec{{Name: a}, {Name: b}},
		Links: []testbed.LinkSpec{{A: a, B: b,
			AAddrs: []netip.Prefix{PairA4, PairA6},
			BAddrs: []netip.Prefix{PairB4, PairB6}}},
	}
}

// Path is a wide-area path: client — router — server, where the router
// delays every packet it forwards (testbed's TUN delay line), so the
// round trip between client and server is RTT. The client's interface
// towards the router is IfClient.
type Path struct {
	Client, Router, Server *NetNS
	IfClient               string
	ClientV4, ServerV4     netip.Addr
	ClientV6, ServerV6     netip.Addr
}

// The addresses of a path's ends.
var (
	PathClient4  = netip.MustParsePrefix("198.18.1.1/24")
	PathRouterC  = netip.MustParsePrefix("198.18.1.2/24")
	PathRouterS  = netip.MustParsePrefix("198.18.2.1/24")
	PathServer4  = netip.MustParsePrefix("198.18.2.2/24")
	PathClient6  = netip.MustParsePrefix("2001:db8:1::1/64")
	PathRouterC6 = netip.MustParsePrefix("2001:db8:1::2/64")
	PathRouterS6 = netip.MustParsePrefix("2001:db8:2::1/64")
	PathServer6  = netip.MustParsePrefix("2001:db8:2::2/64")
)

// NewPath makes a Path with the given round-trip time (a quarter of it
// on each link in each direction). It needs root (without it the test is
// skipped).
func NewPath(tb testing.TB, rtt time.Duration) *Path {
	tb.Helper()
	q := rtt / 4
	bed := build(tb, testbed.Topology{
		Name:  topology,
		Nodes: []testbed.NodeSpec{{Name: "client"}, {Name: "router", Router: true}, {Name: "server"}},
		Links: []testbed.LinkSpec{
			{A: "client", B: "router",
				AAddrs: []netip.Prefix{PathClient4, PathClient6}, BAddrs: []netip.Prefix{PathRouterC, PathRouterC6},
				DelayAtoB: q, DelayBtoA: q},
			{A: "router", B: "server",
				AAddrs: []netip.Prefix{PathRouterS, PathRouterS6}, BAddrs: []netip.Prefix{PathServer4, PathServer6},
				DelayAtoB: q, DelayBtoA: q},
		},
	})
	p := &Path{Client: &NetNS{bed.Node("client")}, Router: &NetNS{bed.Node("router")}, Server: &NetNS{bed.Node("server")},
		ClientV4: PathClient4.Addr(), ServerV4: PathServer4.Addr(), ClientV6: PathClient6.Addr(), ServerV6: PathServer6.Addr()}
	p.IfClient = p.Client.Iface("router")
	return p
}

// Containers is n plain network-namespace containers behind a host that
// forwards to a server: container i has 198.18.(10+i).2/24 and
// 2001:db8:(10+i)::2/64 on its veth to the host (which has .1 and ::1 on
// its end), the host 198.18.2.1/24 towards the server's 198.18.2.2/24
// (2001:db8:2::1, ::2). Each namespace routes to the others.
type Containers struct {
	Host, Server *NetNS
	Ctrs         []*NetNS
	CtrV4        []netip.Addr
	CtrV6        []netip.Addr
	ServerV4     netip.Addr
	ServerV6     netip.Addr
}

// NewContainers makes Containers with n (1..8) containers. It needs root
// (without it the test is skipped).
func NewContainers(tb testing.TB, n int) *Containers {
	tb.Helper()
	if n < 1 || n > 8 {
		tb.Fatalf("NewContainers: %d containers, want 1..8", n)
	}
	top := testbed.Topology{Name: topology, Nodes: []testbed.NodeSpec{{Name: "host", Router: true}, {Name: "server"}},
		Links: []testbed.LinkSpec{{A: "host", B: "server",
			AAddrs: []netip.Prefix{PathRouterS, PathRouterS6}, BAddrs: []netip.Prefix{PathServer4, PathServer6}}}}
	c := &Containers{ServerV4: PathServer4.Addr(), ServerV6: PathServer6.Addr()}
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("ctr%d", i)
		v4 := netip.AddrFrom4([4]byte{198, 18, byte(10 + i), 2})
		v6 := netip.MustParseAddr(fmt.Sprintf("2001:db8:%x::2", 0x10+i))
		top.Nodes = append(top.Nodes, testbed.NodeSpec{Name: name})
		top.Links = append(top.Links, testbed.LinkSpec{A: name, B: "host",
			AAddrs: []netip.Prefix{netip.PrefixFrom(v4, 24), netip.PrefixFrom(v6, 64)},
			BAddrs: []netip.Prefix{netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 18, byte(10 + i), 1}), 24),
				netip.MustParsePrefix(fmt.Sprintf("2001:db8:%x::1/64", 0x10+i))}})
		c.CtrV4, c.CtrV6 = append(c.CtrV4, v4), append(c.CtrV6, v6)
	}
	bed := build(tb, top)
	c.Host, c.Server = &NetNS{bed.Node("host")}, &NetNS{bed.Node("server")}
	for i := 0; i < n; i++ {
		c.Ctrs = append(c.Ctrs, &NetNS{bed.Node(fmt.Sprintf("ctr%d", i))})
	}
	return c
}
