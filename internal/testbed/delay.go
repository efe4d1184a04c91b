package testbed

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Path delay: this kernel has no netem, so a router that ends a link with
// DelayAtoB or DelayBtoA runs a delay line in the test process. Policy
// routing sends every packet the router forwards into a TUN device, one per
// ingress interface ("ip rule iif X lookup T", table T: default dev dlyN);
// a goroutine reads it, holds it for the delay of its path through the
// router (the ingress link's inbound delay plus the egress link's outbound
// delay) and writes it back into the same TUN, from where the kernel
// routes it by the main table to its real next hop.
//
// Packets of one path share one FIFO with one constant delay, so nothing
// is reordered. Traffic addressed to the router itself is not delayed
// (the local rule comes first).

// MaxDelay bounds a link's one-way delay.
const MaxDelay = 10 * time.Second

// delayQueuePackets bounds each delay FIFO (about 45 MB of full frames);
// a packet beyond it is dropped and counted.
const delayQueuePackets = 32768

const (
	delayTableBase = 7100 // routing table of ingress interface i: base+i
	delayRulePrio  = 7100 // rule priority (before main, after local)
	tunBufSize     = 2048
)

// DelayStats counts what a node's delay lines carried.
type DelayStats struct {
	Node    string
	Packets uint64 // written back after their delay
	Dropped uint64 // FIFO full, or too large for a buffer
}

// delayLine is one TUN of a router: the packets that arrived on one
// interface.
type delayLine struct {
	node    *Node
	ingress string
	inDelay time.Duration
	tun     *os.File
	out     map[int]time.Duration // egress ifindex → outbound delay
	routes  []routeEntry          // the router's routes, longest first
	cache   map[netip.Addr]time.Duration

	mu     sync.Mutex
	queues map[time.Duration]chan delayed
	wg     sync.WaitGroup

	packets, dropped atomic.Uint64
	closing          atomic.Bool
}

type routeEntry struct {
	dst     netip.Prefix
	ifindex int
}

type delayed struct {
	due time.Time
	buf *[]byte
	n   int
}

var tunBufs = sync.Pool{New: func() any { b := make([]byte, tunBufSize); return &b }}

// linkDelayEnd says which end of a delayed link runs its delay line: the
// router end (B when both are routers).
func linkDelayEnd(l *link) *Node {
	if l.bNode.Router {
		return l.bNode
	}
	return l.aNode
}

// setupDelays starts the delay lines of every router that ends a link
// with a delay. It runs after the routes are in place.
func (tb *Testbed) setupDelays() error {
	// inbound/outbound delay per (router, interface).
	type ifDelay struct{ in, out time.Duration }
	per := map[*Node]map[string]*ifDelay{}
	for _, l := range tb.links {
		if l.spec.DelayAtoB == 0 && l.spec.DelayBtoA == 0 {
			continue
		}
		r := linkDelayEnd(l)
		if per[r] == nil {
			per[r] = map[string]*ifDelay{}
		}
		d := &ifDelay{}
		if r == l.bNode {
			per[r][l.bIf] = d
			d.in, d.out = l.spec.DelayAtoB, l.spec.DelayBtoA
		} else {
			per[r][l.aIf] = d
			d.in, d.out = l.spec.DelayBtoA, l.spec.DelayAtoB
		}
	}
	for _, r := range tb.nodes {
		delays, ok := per[r]
		if !ok {
			continue
		}
		out := map[int]time.Duration{}
		for ifc, d := range delays {
			lk, err := r.h.LinkByName(ifc)
			if err != nil {
				return fmt.Errorf("find %s in %s: %w", ifc, r.Name, err)
			}
			out[lk.Attrs().Index] = d.out
		}
		routes, err := r.routeTable()
		if err != nil {
			return err
		}
		// Every interface of the router gets a line: a packet from any of
		// them may leave through a delayed link.
		for i, f := range r.ifaces {
			dl := &delayLine{node: r, ingress: f.name, out: out, routes: routes,
				cache: map[netip.Addr]time.Duration{}, queues: map[time.Duration]chan delayed{}}
			if d, ok := delays[f.name]; ok {
				dl.inDelay = d.in
			}
			r.delays = append(r.delays, dl) // so Close stops a half-made one
			if err := dl.start(i); err != nil {
				return err
			}
		}
	}
	return nil
}

// routeTable lists the node's main-table routes of both families, longest
// prefix first.
func (n *Node) routeTable() ([]routeEntry, error) {
	var out []routeEntry
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		rs, err := n.h.RouteList(nil, fam)
		if err != nil {
			return nil, fmt.Errorf("list routes in %s: %w", n.Name, err)
		}
		for _, r := range rs {
			if r.Dst == nil || r.LinkIndex == 0 {
				continue
			}
			a, ok := netip.AddrFromSlice(r.Dst.IP)
			if !ok {
				continue
			}
			ones, _ := r.Dst.Mask.Size()
			if fam == netlink.FAMILY_V4 {
				a = a.Unmap()
			}
			out = append(out, routeEntry{dst: netip.PrefixFrom(a, ones).Masked(), ifindex: r.LinkIndex})
		}
	}
	// Longest prefix first (insertion sort: a testbed has few routes).
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && out[j].dst.Bits() > out[j-1].dst.Bits(); j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out, nil
}

// start creates TUN "dly<i>" in the router, routes iif <ingress> into it
// and starts the reader.
func (dl *delayLine) start(i int) error {
	n := dl.node
	name := fmt.Sprintf("dly%d", i)
	if err := n.Do(func() error {
		fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("open /dev/net/tun: %w", err)
		}
		ifr, err := unix.NewIfreq(name)
		if err != nil {
			unix.Close(fd)
			return fmt.Errorf("name TUN %s: %w", name, err)
		}
		ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI)
		if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
			unix.Close(fd)
			return fmt.Errorf("create TUN %s: %w", name, err)
		}
		dl.tun = os.NewFile(uintptr(fd), name)
		return nil
	}); err != nil {
		return fmt.Errorf("set up delay line of %s/%s: %w", n.Name, dl.ingress, err)
	}
	tl, err := n.h.LinkByName(name)
	if err != nil {
		return fmt.Errorf("find %s in %s: %w", name, n.Name, err)
	}
	if err := n.h.LinkSetMTU(tl, 1500); err != nil {
		return fmt.Errorf("set MTU of %s in %s: %w", name, n.Name, err)
	}
	if err := n.h.LinkSetUp(tl); err != nil {
		return fmt.Errorf("set %s up in %s: %w", name, n.Name, err)
	}
	table := delayTableBase + i
	for _, def := range []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0")} {
		rt := &netlink.Route{LinkIndex: tl.Attrs().Index, Dst: prefixNet(def), Table: table, Scope: netlink.SCOPE_LINK}
		if err := n.h.RouteAdd(rt); err != nil {
			return fmt.Errorf("add route %v dev %s table %d in %s: %w", def, name, table, n.Name, err)
		}
		rule := netlink.NewRule()
		rule.IifName = dl.ingress
		rule.Table = table
		rule.Priority = delayRulePrio + i
		rule.Family = netlink.FAMILY_V4
		if def.Addr().Is6() {
			rule.Family = netlink.FAMILY_V6
		}
		if err := n.h.RuleAdd(rule); err != nil {
			return fmt.Errorf("add rule iif %s lookup %d in %s: %w", dl.ingress, table, n.Name, err)
		}
	}
	dl.wg.Add(1)
	go dl.read()
	return nil
}

// delayFor is the delay of a packet to dst: inbound plus the outbound
// delay of the interface the router's main table sends dst to.
func (dl *delayLine) delayFor(dst netip.Addr) time.Duration {
	if d, ok := dl.cache[dst]; ok {
		return d
	}
	d := dl.inDelay
	for _, r := range dl.routes {
		if r.dst.Contains(dst) {
			d += dl.out[r.ifindex]
			break
		}
	}
	if len(dl.cache) >= 4096 {
		clear(dl.cache)
	}
	dl.cache[dst] = d
	return d
}

func packetDst(p []byte) (netip.Addr, bool) {
	if len(p) >= 20 && p[0]>>4 == 4 {
		return netip.AddrFrom4([4]byte(p[16:20])), true
	}
	if len(p) >= 40 && p[0]>>4 == 6 {
		return netip.AddrFrom16([16]byte(p[24:40])), true
	}
	return netip.Addr{}, false
}

func (dl *delayLine) read() {
	defer dl.wg.Done()
	for {
		bp := tunBufs.Get().(*[]byte)
		n, err := dl.tun.Read(*bp)
		if err != nil {
			tunBufs.Put(bp)
			if !errors.Is(err, os.ErrClosed) {
				dl.node.tb.log.Warn("delay line read", "node", dl.node.Name, "iface", dl.ingress, "err", err)
			}
			dl.stopQueues()
			return
		}
		now := time.Now()
		dst, ok := packetDst((*bp)[:n])
		var d time.Duration
		if ok {
			d = dl.delayFor(dst)
		}
		if d == 0 {
			dl.write(delayed{buf: bp, n: n})
			continue
		}
		q := dl.queue(d)
		select {
		case q <- delayed{due: now.Add(d), buf: bp, n: n}:
		default:
			dl.dropped.Add(1)
			tunBufs.Put(bp)
		}
	}
}

// queue is the FIFO (and its writer) of one delay value.
func (dl *delayLine) queue(d time.Duration) chan delayed {
	dl.mu.Lock()
	defer dl.mu.Unlock()
	q, ok := dl.queues[d]
	if !ok {
		q = make(chan delayed, delayQueuePackets)
		dl.queues[d] = q
		dl.wg.Add(1)
		go dl.drain(q)
	}
	return q
}

func (dl *delayLine) stopQueues() {
	dl.mu.Lock()
	defer dl.mu.Unlock()
	for d, q := range dl.queues {
		close(q)
		delete(dl.queues, d)
	}
}

func (dl *delayLine) drain(q chan delayed) {
	defer dl.wg.Done()
	for p := range q {
		if dl.closing.Load() {
			tunBufs.Put(p.buf)
			continue
		}
		if w := time.Until(p.due); w > 0 {
			time.Sleep(w)
		}
		dl.write(p)
	}
}

func (dl *delayLine) write(p delayed) {
	if _, err := dl.tun.Write((*p.buf)[:p.n]); err != nil {
		dl.dropped.Add(1)
	} else {
		dl.packets.Add(1)
	}
	tunBufs.Put(p.buf)
}

// stop closes the TUN (the reader ends, then the writers) and waits.
func (dl *delayLine) stop() {
	if dl.tun != nil {
		dl.closing.Store(true)
		dl.tun.Close()
		dl.wg.Wait()
	}
}

// DelayStats reports, per router with delay lines, what they carried.
func (tb *Testbed) DelayStats() []DelayStats {
	var out []DelayStats
	for _, n := range tb.nodes {
		if len(n.delays) == 0 {
			continue
		}
		s := DelayStats{Node: n.Name}
		for _, dl := range n.delays {
			s.Packets += dl.packets.Load()
			s.Dropped += dl.dropped.Load()
		}
		out = append(out, s)
	}
	return out
}
