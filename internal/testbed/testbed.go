// Package testbed builds declarative network topologies for tests, demos
// and benchmarks: hosts and routers as network namespaces joined by veth
// pairs, with IPv4/IPv6 addresses, shortest-path routes, per-link rate
// limits and a DiffServ router role on a link's egress.
//
// Every namespace is named "hq-<topology>-<node>-<random>" and has a marker
// file /run/hostqos-testbed/<namespace>.pid holding the creating process's
// pid; CleanStale (which Build calls first) removes the namespaces of dead
// creators, so a crashed run's leftovers are cleaned by the next one.
//
// A host interface that hostqos itself manages must not be given a testbed
// rate or DiffServ role: the daemon puts its own HTB root (handle 0x4851) on
// its egress. Put the testbed's bottleneck on the router's egress instead.
package testbed

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Topology is a set of nodes joined by links.
type Topology struct {
	Name  string // short (1..12 of a-z, 0-9), used in namespace names
	Nodes []NodeSpec
	Links []LinkSpec
}

// NodeSpec is one host or router.
type NodeSpec struct {
	Name   string // 1..15 of a-z, 0-9, '-'
	Router bool   // forwards IPv4 and IPv6
}

// LinkSpec is a veth pair between nodes A and B.
type LinkSpec struct {
	A, B           string
	AAddrs, BAddrs []netip.Prefix // e.g. 198.18.1.1/24, 2001:db8:1::1/64
	// RateAtoB and RateBtoA limit that direction's egress, in bits/s
	// (0 = unlimited), with an HTB root and a short FIFO.
	RateAtoB, RateBtoA uint64
	// DiffServAtoB and DiffServBtoA give that egress the DiffServ router
	// role (see DiffServ in the docs); they need the direction's rate.
	DiffServAtoB, DiffServBtoA bool
	// DelayAtoB and DelayBtoA add that one-way delay (0 .. MaxDelay) to
	// the packets the link carries in that direction. The delay line runs
	// in the link's router end (B if both are routers), so one end must
	// be a router; see delay.go.
	DelayAtoB, DelayBtoA time.Duration
	// QueueAtoB and QueueBtoA are the packets the FIFO behind that
	// direction's rate holds (0: QueueTime's worth at the rate; at most
	// MaxQueue). A rate can change at run time: see SetRate.
	QueueAtoB, QueueBtoA int
}

// MaxQueue bounds a link's FIFO (packets).
const MaxQueue = 100000

// Option changes how Build works.
type Option func(*options)

type options struct {
	signals bool
	log     *slog.Logger
}

// WithSignalCleanup makes SIGINT and SIGTERM remove everything the testbed
// made and then exit the process with status 130.
func WithSignalCleanup() Option { return func(o *options) { o.signals = true } }

// WithLogger sets the logger (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// Testbed is a built topology. Close removes it.
type Testbed struct {
	Name  string
	nodes []*Node
	byNm  map[string]*Node
	links []*link
	log   *slog.Logger

	mu       sync.Mutex
	closed   bool
	sigStop  chan struct{}
	sigWatch chan os.Signal
}

// Node is a network namespace of a testbed.
type Node struct {
	Name      string
	NetnsName string
	Router    bool

	tb     *Testbed
	ns     netns.NsHandle
	h      *netlink.Handle
	ifaces []nodeIface
	expect []netip.Addr // addresses the routes must reach (waitRoutes)
	delays []*delayLine // this router's delay lines (setupDelays)
}

type nodeIface struct {
	name  string
	peer  string
	link  *link
	addrs []netip.Prefix
}

type link struct {
	spec         LinkSpec
	aIf, bIf     string
	aNode, bNode *Node
}

// MarkerDir holds one marker file per namespace a testbed created.
const MarkerDir = "/run/hostqos-testbed"

// NetnsPrefix starts the name of every namespace a testbed creates.
const NetnsPrefix = "hq-"

var (
	topoNameRE = regexp.MustCompile(`^[a-z0-9]{1,12}$`)
	nodeNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,14}$`)
)

func (t *Topology) validate() error {
	if !topoNameRE.MatchString(t.Name) {
		return fmt.Errorf("topology name %q: must be 1..12 characters of a-z and 0-9", t.Name)
	}
	if len(t.Nodes) == 0 {
		return fmt.Errorf("topology %q: no nodes", t.Name)
	}
	seen := map[string]bool{}
	for i, n := range t.Nodes {
		if !nodeNameRE.MatchString(n.Name) {
			return fmt.Errorf("node %d name %q: must be 1..15 characters of a-z, 0-9 and '-'", i, n.Name)
		}
		if seen[n.Name] {
			return fmt.Errorf("node %q: defined twice", n.Name)
		}
		seen[n.Name] = true
	}
	for i, l := range t.Links {
		if !seen[l.A] || !seen[l.B] {
			return fmt.Errorf("link %d (%s-%s): names a node that does not exist", i, l.A, l.B)
		}
		if l.A == l.B {
			return fmt.Errorf("link %d (%s-%s): joins a node to itself", i, l.A, l.B)
		}
		for _, p := range append(append([]netip.Prefix{}, l.AAddrs...), l.BAddrs...) {
			if !p.IsValid() || p.Addr().Zone() != "" {
				return fmt.Errorf("link %d (%s-%s) address %v: not a valid address/prefix", i, l.A, l.B, p)
			}
		}
		if (l.DiffServAtoB && l.RateAtoB == 0) || (l.DiffServBtoA && l.RateBtoA == 0) {
			return fmt.Errorf("link %d (%s-%s): DiffServ needs the direction's rate (the HTB root runs at the link rate)", i, l.A, l.B)
		}
		for _, d := range []time.Duration{l.DelayAtoB, l.DelayBtoA} {
			if d < 0 || d > MaxDelay {
				return fmt.Errorf("link %d (%s-%s) delay %v: must be 0 .. %v", i, l.A, l.B, d, MaxDelay)
			}
			if d > 0 && !routerOf(t.Nodes, l.A) && !routerOf(t.Nodes, l.B) {
				return fmt.Errorf("link %d (%s-%s) delay %v: one end must be a router (the delay line runs there); insert a router node", i, l.A, l.B, d)
			}
		}
		for _, q := range []int{l.QueueAtoB, l.QueueBtoA} {
			if q < 0 || q > MaxQueue {
				return fmt.Errorf("link %d (%s-%s) queue %d: must be 0 (from the rate) .. %d packets", i, l.A, l.B, q, MaxQueue)
			}
		}
		if (l.QueueAtoB != 0 && l.RateAtoB == 0) || (l.QueueBtoA != 0 && l.RateBtoA == 0) {
			return fmt.Errorf("link %d (%s-%s): a queue length needs the direction's rate", i, l.A, l.B)
		}
		for _, r := range []uint64{l.RateAtoB, l.RateBtoA} {
			if r != 0 && (r < 8000 || r > 100e9) {
				return fmt.Errorf("link %d (%s-%s) rate %d: must be 0 (unlimited) or 8 kbit/s .. 100 gbit/s", i, l.A, l.B, r)
			}
		}
	}
	return nil
}

func routerOf(nodes []NodeSpec, name string) bool {
	for _, n := range nodes {
		if n.Name == name {
			return n.Router
		}
	}
	return false
}

// Build creates the topology: all or nothing — on error everything created
// so far is removed. It first removes stale leftovers of dead runs.
func Build(t Topology, opts ...Option) (*Testbed, error) {
	o := options{log: slog.Default()}
	for _, f := range opts {
		f(&o)
	}
	if err := t.validate(); err != nil {
		return nil, err
	}
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("build testbed %q: needs root (network namespaces)", t.Name)
	}
	if err := CleanStale(); err != nil {
		o.log.Warn("clean stale testbeds", "component", "testbed", "err", err)
	}
	tb := &Testbed{Name: t.Name, byNm: map[string]*Node{}, log: o.log.With("component", "testbed", "topology", t.Name)}
	if err := tb.build(t); err != nil {
		if cerr := tb.Close(); cerr != nil {
			err = errors.Join(err, cerr)
		}
		return nil, err
	}
	if o.signals {
		tb.watchSignals()
	}
	return tb, nil
}

func (tb *Testbed) build(t Topology) error {
	sfx, err := randSuffix()
	if err != nil {
		return err
	}
	for _, ns := range t.Nodes {
		n := &Node{Name: ns.Name, Router: ns.Router, tb: tb, ns: -1,
			NetnsName: NetnsPrefix + t.Name + "-" + ns.Name + "-" + sfx}
		if err := n.create(); err != nil {
			tb.nodes = append(tb.nodes, n) // so Close removes a half-made one
			return err
		}
		tb.nodes = append(tb.nodes, n)
		tb.byNm[n.Name] = n
	}
	for i, ls := range t.Links {
		if err := tb.addLink(i, ls); err != nil {
			return err
		}
	}
	if err := tb.addRoutes(); err != nil {
		return err
	}
	if err := tb.waitRoutes(5 * time.Second); err != nil {
		return err
	}
	if err := tb.setupDelays(); err != nil {
		return err
	}
	for _, l := range tb.links {
		if l.spec.RateAtoB > 0 {
			if err := l.aNode.shape(l.aIf, l.spec.RateAtoB, l.spec.QueueAtoB, l.spec.DiffServAtoB); err != nil {
				return err
			}
		}
		if l.spec.RateBtoA > 0 {
			if err := l.bNode.shape(l.bIf, l.spec.RateBtoA, l.spec.QueueBtoA, l.spec.DiffServBtoA); err != nil {
				return err
			}
		}
	}
	tb.log.Debug("testbed built", "nodes", len(tb.nodes), "links", len(tb.links))
	return nil
}

func randSuffix() (string, error) {
	b := make([]byte, 3)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("read random suffix: %w", err)
	}
	return hex.EncodeToString(b), nil
}

func markerPath(nsName string) string { return filepath.Join(MarkerDir, nsName+".pid") }

// netnsDir is where named network namespaces are mounted.
const netnsDir = "/run/netns"

var netnsDirOnce sync.Once
var netnsDirErr error

// prepareNetnsDir makes /run/netns a shared mount of its own, as
// iproute2's `ip netns` does the first time it runs when it is not one. If
// `ip netns exec` did that after a namespace was mounted there, its bind
// mount of the directory would hide that namespace's mount: the file could
// then be neither unmounted nor removed (EBUSY) and the namespace would
// outlive its test. So the testbed does it first, once per process.
func prepareNetnsDir() error {
	netnsDirOnce.Do(func() {
		if err := os.MkdirAll(netnsDir, 0o755); err != nil {
			netnsDirErr = fmt.Errorf("create %s: %w", netnsDir, err)
			return
		}
		if isMountPoint(netnsDir) {
			return
		}
		if err := unix.Mount(netnsDir, netnsDir, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			netnsDirErr = fmt.Errorf("bind-mount %s onto itself: %w", netnsDir, err)
			return
		}
		if err := unix.Mount("", netnsDir, "", unix.MS_SHARED|unix.MS_REC, ""); err != nil {
			netnsDirErr = fmt.Errorf("make %s a shared mount: %w", netnsDir, err)
		}
	})
	return netnsDirErr
}

// isMountPoint reports whether dir is a mount point (its mount id differs
// from its parent's, read from /proc/self/mountinfo).
func isMountPoint(dir string) bool {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) > 4 && f[4] == dir {
			return true
		}
	}
	return false
}

// create makes the node's namespace, its marker, loopback and sysctls.
func (n *Node) create() error {
	if err := os.MkdirAll(MarkerDir, 0o755); err != nil {
		return fmt.Errorf("create marker directory %s: %w", MarkerDir, err)
	}
	if err := prepareNetnsDir(); err != nil {
		return err
	}
	if err := os.WriteFile(markerPath(n.NetnsName), []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
		return fmt.Errorf("write marker for namespace %s: %w", n.NetnsName, err)
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("get current network namespace: %w", err)
			return
		}
		defer orig.Close()
		ns, err := netns.NewNamed(n.NetnsName)
		if err != nil {
			// NewNamed may have switched the thread already; restore or let it die.
			if netns.Set(orig) == nil {
				runtime.UnlockOSThread()
			}
			errc <- fmt.Errorf("create network namespace %s: %w", n.NetnsName, err)
			return
		}
		n.ns = ns
		if err := netns.Set(orig); err != nil {
			errc <- fmt.Errorf("return to the original network namespace: %w", err) // thread stays locked and dies
			return
		}
		runtime.UnlockOSThread()
		errc <- nil
	}()
	if err := <-errc; err != nil {
		return err
	}
	h, err := netlink.NewHandleAt(n.ns)
	if err != nil {
		return fmt.Errorf("open netlink in namespace %s: %w", n.NetnsName, err)
	}
	n.h = h
	lo, err := h.LinkByName("lo")
	if err != nil {
		return fmt.Errorf("find lo in namespace %s: %w", n.NetnsName, err)
	}
	if err := h.LinkSetUp(lo); err != nil {
		return fmt.Errorf("set lo up in namespace %s: %w", n.NetnsName, err)
	}
	sysctls := map[string]string{
		"net/ipv6/conf/all/accept_dad":     "0",
		"net/ipv6/conf/default/accept_dad": "0",
		"net/ipv4/conf/all/rp_filter":      "0",
		"net/ipv4/conf/default/rp_filter":  "0",
	}
	if n.Router {
		sysctls["net/ipv4/ip_forward"] = "1"
		sysctls["net/ipv6/conf/all/forwarding"] = "1"
		sysctls["net/ipv6/conf/default/forwarding"] = "1"
	}
	return n.Do(func() error {
		for k, v := range sysctls {
			if err := os.WriteFile("/proc/sys/"+k, []byte(v), 0o644); err != nil {
				return fmt.Errorf("set sysctl %s=%s in namespace %s: %w", strings.ReplaceAll(k, "/", "."), v, n.NetnsName, err)
			}
		}
		return nil
	})
}

func (n *Node) ifaceName(peer string, idx int) string {
	name := peer
	if len(name) > 15 {
		name = name[:15]
	}
	for _, f := range n.ifaces {
		if f.name == name {
			s := "-" + strconv.Itoa(idx)
			return peer[:min(len(peer), 15-len(s))] + s
		}
	}
	return name
}

func (tb *Testbed) addLink(i int, ls LinkSpec) error {
	a, b := tb.byNm[ls.A], tb.byNm[ls.B]
	l := &link{spec: ls, aNode: a, bNode: b, aIf: a.ifaceName(b.Name, i), bIf: b.ifaceName(a.Name, i)}
	veth := &netlink.Veth{
		LinkAttrs:     netlink.LinkAttrs{Name: l.aIf, MTU: 1500},
		PeerName:      l.bIf,
		PeerNamespace: netlink.NsFd(int(b.ns)),
	}
	if err := a.h.LinkAdd(veth); err != nil {
		return fmt.Errorf("create veth %s/%s - %s/%s: %w", a.Name, l.aIf, b.Name, l.bIf, err)
	}
	tb.links = append(tb.links, l)
	a.ifaces = append(a.ifaces, nodeIface{name: l.aIf, peer: b.Name, link: l, addrs: ls.AAddrs})
	b.ifaces = append(b.ifaces, nodeIface{name: l.bIf, peer: a.Name, link: l, addrs: ls.BAddrs})
	sides := []struct {
		n     *Node
		ifc   string
		addrs []netip.Prefix
		lk    netlink.Link
	}{{a, l.aIf, ls.AAddrs, nil}, {b, l.bIf, ls.BAddrs, nil}}
	for i := range sides {
		side := &sides[i]
		lk, err := side.n.h.LinkByName(side.ifc)
		if err != nil {
			return fmt.Errorf("find %s in %s: %w", side.ifc, side.n.Name, err)
		}
		side.lk = lk
		for _, p := range side.addrs {
			ad := &netlink.Addr{IPNet: prefixNet(p)}
			if p.Addr().Is6() {
				ad.Flags = unix.IFA_F_NODAD
			}
			if err := side.n.h.AddrAdd(lk, ad); err != nil {
				return fmt.Errorf("add address %v to %s/%s: %w", p, side.n.Name, side.ifc, err)
			}
		}
		if err := side.n.h.LinkSetUp(lk); err != nil {
			return fmt.Errorf("set %s/%s up: %w", side.n.Name, side.ifc, err)
		}
	}
	// Permanent neighbor entries for the peer's addresses: no ARP or
	// neighbor discovery, so the first packet of a test never waits for
	// (or is lost to) address resolution.
	for i, side := range sides {
		peer := sides[1-i]
		for _, p := range peer.addrs {
			fam := netlink.FAMILY_V4
			if p.Addr().Is6() {
				fam = netlink.FAMILY_V6
			}
			nb := &netlink.Neigh{LinkIndex: side.lk.Attrs().Index, Family: fam, State: netlink.NUD_PERMANENT,
				IP: p.Addr().AsSlice(), HardwareAddr: peer.lk.Attrs().HardwareAddr}
			if err := side.n.h.NeighSet(nb); err != nil {
				return fmt.Errorf("add neighbor %v on %s/%s: %w", p.Addr(), side.n.Name, side.ifc, err)
			}
		}
	}
	return nil
}

// Close removes every namespace (and with them every veth) the testbed
// made, and their markers. It is safe to call more than once.
func (tb *Testbed) Close() error {
	if tb == nil {
		return nil
	}
	tb.mu.Lock()
	defer tb.mu.Unlock()
	if tb.closed {
		return nil
	}
	tb.closed = true
	if tb.sigStop != nil {
		signal.Stop(tb.sigWatch)
		close(tb.sigStop)
	}
	var errs []error
	for _, n := range tb.nodes {
		for _, dl := range n.delays {
			dl.stop()
		}
		if n.h != nil {
			n.h.Close()
		}
		if n.ns >= 0 {
			n.ns.Close()
		}
		if err := removeNetns(n.NetnsName); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// removeNetns unmounts and deletes a named namespace and its marker; a
// namespace that is already gone is not an error.
func removeNetns(name string) error {
	var errs []error
	if err := netns.DeleteNamed(name); err != nil && !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.EINVAL) {
		errs = append(errs, fmt.Errorf("delete network namespace %s: %w", name, err))
	} else {
		// DeleteNamed stops at the failed unmount of a file that is no
		// mount point; remove the file anyway.
		if err := os.Remove(filepath.Join("/run/netns", name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("remove /run/netns/%s: %w", name, err))
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...) // keep the marker: a later CleanStale retries
	}
	if err := os.Remove(markerPath(name)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove marker of %s: %w", name, err)
	}
	return nil
}

func (tb *Testbed) watchSignals() {
	tb.sigStop = make(chan struct{})
	tb.sigWatch = make(chan os.Signal, 1)
	signal.Notify(tb.sigWatch, syscall.SIGINT, syscall.SIGTERM)
	go func(stop chan struct{}, sig chan os.Signal) {
		select {
		case s := <-sig:
			tb.log.Warn("signal: removing testbed", "signal", s.String())
			if err := tb.Close(); err != nil {
				tb.log.Error("remove testbed", "err", err)
			}
			os.Exit(130)
		case <-stop:
		}
	}(tb.sigStop, tb.sigWatch)
}

// CleanStale removes testbed namespaces whose creating process is dead
// (and markers whose namespace is already gone). Namespaces of live
// processes are left alone.
func CleanStale() error {
	ents, err := os.ReadDir(MarkerDir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("read %s: %w", MarkerDir, err)
	}
	var errs []error
	for _, e := range ents {
		name, ok := strings.CutSuffix(e.Name(), ".pid")
		if !ok || !strings.HasPrefix(name, NetnsPrefix) {
			continue
		}
		b, err := os.ReadFile(filepath.Join(MarkerDir, e.Name()))
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err == nil && pid > 0 && processAlive(pid) {
			continue
		}
		if err := removeNetns(name); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func processAlive(pid int) bool {
	err := unix.Kill(pid, 0)
	return err == nil || errors.Is(err, unix.EPERM)
}

// Node returns the node of that name, or nil.
func (tb *Testbed) Node(name string) *Node { return tb.byNm[name] }

// Nodes returns all nodes in topology order.
func (tb *Testbed) Nodes() []*Node { return append([]*Node(nil), tb.nodes...) }

// Do runs fn on a locked OS thread inside the node's network namespace.
// Sockets fn creates stay in the namespace after it returns; goroutines fn
// starts do not run in it. A panic in fn is re-raised in the caller.
func (n *Node) Do(fn func() error) error {
	type result struct {
		err   error
		panic any
	}
	rc := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			rc <- result{err: fmt.Errorf("get current network namespace: %w", err)}
			return
		}
		defer orig.Close()
		if err := netns.Set(n.ns); err != nil {
			runtime.UnlockOSThread()
			rc <- result{err: fmt.Errorf("enter network namespace %s: %w", n.NetnsName, err)}
			return
		}
		var res result
		func() {
			defer func() {
				if p := recover(); p != nil {
					res.panic = p
				}
			}()
			res.err = fn()
		}()
		if err := netns.Set(orig); err == nil {
			runtime.UnlockOSThread()
		} // else the thread stays locked and exits with the goroutine
		rc <- res
	}()
	r := <-rc
	if r.panic != nil {
		panic(r.panic)
	}
	return r.err
}

// Command returns a command that runs inside the node's network namespace
// via nsenter (not "ip netns exec", which would remount /sys in a new mount
// namespace and hide /sys/fs/bpf pins and the cgroup2 mount).
func (n *Node) Command(name string, args ...string) *exec.Cmd {
	return exec.Command("nsenter", append([]string{"--net=/run/netns/" + n.NetnsName, "--", name}, args...)...)
}

// Handle is a netlink handle bound to the node's namespace.
func (n *Node) Handle() *netlink.Handle { return n.h }

// Iface is the name of n's interface facing peer ("" if none).
func (n *Node) Iface(peer string) string {
	for _, f := range n.ifaces {
		if f.peer == peer {
			return f.name
		}
	}
	return ""
}

// Ifaces lists n's interface names in link order.
func (n *Node) Ifaces() []string {
	var out []string
	for _, f := range n.ifaces {
		out = append(out, f.name)
	}
	return out
}

// Prefixes lists every address/prefix of n in link order.
func (n *Node) Prefixes() []netip.Prefix {
	var out []netip.Prefix
	for _, f := range n.ifaces {
		out = append(out, f.addrs...)
	}
	return out
}

// AddrV4 is n's first IPv4 address (in link order), or the zero Addr.
func (n *Node) AddrV4() netip.Addr { return n.firstAddr(false, "") }

// AddrV6 is n's first IPv6 address (in link order), or the zero Addr.
func (n *Node) AddrV6() netip.Addr { return n.firstAddr(true, "") }

// LinkAddr is n's address of the family (v6 or not) on the link facing peer.
func (n *Node) LinkAddr(peer string, v6 bool) netip.Addr { return n.firstAddr(v6, peer) }

func (n *Node) firstAddr(v6 bool, peer string) netip.Addr {
	for _, f := range n.ifaces {
		if peer != "" && f.peer != peer {
			continue
		}
		for _, p := range f.addrs {
			if p.Addr().Is6() == v6 {
				return p.Addr()
			}
		}
	}
	return netip.Addr{}
}
