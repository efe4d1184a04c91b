package testbed

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

func prefixNet(p netip.Prefix) *net.IPNet {
	bits := 32
	if p.Addr().Is6() {
		bits = 128
	}
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), bits)}
}

// hop is how a node reaches another: the first link and neighbor.
type hop struct {
	dist  int
	iface string
	via   netip.Addr
}

func familyAddr(addrs []netip.Prefix, v6 bool) (netip.Prefix, bool) {
	for _, p := range addrs {
		if p.Addr().Is6() == v6 {
			return p, true
		}
	}
	return netip.Prefix{}, false
}

// paths runs a breadth-first search from src over links that carry the
// family on both ends, expanding only through routers (and src itself).
func (tb *Testbed) paths(src *Node, v6 bool) map[*Node]hop {
	out := map[*Node]hop{src: {dist: 0}}
	queue := []*Node{src}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		if cur != src && !cur.Router {
			continue
		}
		for _, f := range cur.ifaces {
			l := f.link
			var peer *Node
			var peerAddrs []netip.Prefix
			if l.aNode == cur {
				peer, peerAddrs = l.bNode, l.spec.BAddrs
			} else {
				peer, peerAddrs = l.aNode, l.spec.AAddrs
			}
			pa, ok := familyAddr(peerAddrs, v6)
			if _, mine := familyAddr(f.addrs, v6); !ok || !mine {
				continue
			}
			if _, seen := out[peer]; seen {
				continue
			}
			h := out[cur]
			nh := hop{dist: h.dist + 1, iface: h.iface, via: h.via}
			if cur == src {
				nh.iface, nh.via = f.name, pa.Addr()
			}
			out[peer] = nh
			queue = append(queue, peer)
		}
	}
	return out
}

// addRoutes gives every node a route to every address in the testbed: the
// subnet of a remote link through the nearest router on it, or host routes
// to the ends of a link that has no router.
func (tb *Testbed) addRoutes() error {
	for _, n := range tb.nodes {
		for _, v6 := range []bool{false, true} {
			reach := tb.paths(n, v6)
			done := map[netip.Prefix]bool{}
			for _, f := range n.ifaces {
				if p, ok := familyAddr(f.addrs, v6); ok {
					done[p.Masked()] = true
					peerAddrs := f.link.spec.BAddrs
					if f.link.bNode == n {
						peerAddrs = f.link.spec.AAddrs
					}
					if pp, ok := familyAddr(peerAddrs, v6); ok {
						n.expect = append(n.expect, pp.Addr())
					}
				}
			}
			for _, l := range tb.links {
				pa, okA := familyAddr(l.spec.AAddrs, v6)
				pb, okB := familyAddr(l.spec.BAddrs, v6)
				if !okA && !okB {
					continue
				}
				subnet := pa.Masked()
				if !okA {
					subnet = pb.Masked()
				}
				if done[subnet] {
					continue
				}
				// Nearest router end.
				var best *hop
				for _, end := range []*Node{l.aNode, l.bNode} {
					if h, ok := reach[end]; ok && end.Router && end != n && (best == nil || h.dist < best.dist) {
						hh := h
						best = &hh
					}
				}
				if best != nil {
					if err := n.addRoute(subnet, *best); err != nil {
						return err
					}
					done[subnet] = true
					for _, e := range []struct {
						p  netip.Prefix
						ok bool
					}{{pa, okA}, {pb, okB}} {
						if e.ok {
							n.expect = append(n.expect, e.p.Addr())
						}
					}
					continue
				}
				// No router on the link: host routes to each end's own address.
				for _, end := range []struct {
					node *Node
					p    netip.Prefix
					ok   bool
				}{{l.aNode, pa, okA}, {l.bNode, pb, okB}} {
					h, reached := reach[end.node]
					if !end.ok || !reached || end.node == n {
						continue
					}
					hp := netip.PrefixFrom(end.p.Addr(), end.p.Addr().BitLen())
					if done[hp] {
						continue
					}
					if err := n.addRoute(hp, h); err != nil {
						return err
					}
					done[hp] = true
					n.expect = append(n.expect, hp.Addr())
				}
			}
		}
	}
	return nil
}

func (n *Node) addRoute(dst netip.Prefix, h hop) error {
	lk, err := n.h.LinkByName(h.iface)
	if err != nil {
		return fmt.Errorf("find %s in %s: %w", h.iface, n.Name, err)
	}
	r := &netlink.Route{LinkIndex: lk.Attrs().Index, Dst: prefixNet(dst), Gw: h.via.AsSlice()}
	if err := n.h.RouteAdd(r); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("add route %v via %v dev %s in %s: %w", dst, h.via, h.iface, n.Name, err)
	}
	return nil
}

// waitRoutes waits until every node has a route to every address in the
// testbed (IPv6 connected routes appear asynchronously after link up).
func (tb *Testbed) waitRoutes(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	if err := tb.waitActive(deadline); err != nil {
		return err
	}
	// A node's own IPv6 addresses get their local route only when the
	// kernel's address-configuration work ran, after link up: until then
	// the node drops packets sent to them.
	for _, n := range tb.nodes {
		for _, p := range n.Prefixes() {
			for {
				rs, err := n.h.RouteGet(p.Addr().AsSlice())
				if err == nil && len(rs) > 0 && rs[0].Type == unix.RTN_LOCAL {
					break
				}
				if time.Now().After(deadline) {
					return fmt.Errorf("wait for the local route of %v in %s: %v", p.Addr(), n.Name, err)
				}
				time.Sleep(5 * time.Millisecond)
			}
		}
	}
	for _, n := range tb.nodes {
		for _, a := range n.expect {
			for {
				_, err := n.h.RouteGet(a.AsSlice())
				if err == nil {
					break
				}
				if time.Now().After(deadline) {
					return fmt.Errorf("wait for a route to %v in %s: %w", a, n.Name, err)
				}
				time.Sleep(10 * time.Millisecond)
			}
		}
	}
	return nil
}

// waitActive waits until the kernel has activated every interface's
// transmit path. After link up, a veth sends through the built-in noop
// qdisc, which drops everything, until the kernel's link-watch work runs
// and attaches the real one; on a loaded machine that can be late enough
// to lose a test's first packet. The noop qdisc is never dumped, so a
// root qdisc in the dump means the device is activated.
func (tb *Testbed) waitActive(deadline time.Time) error {
	for _, n := range tb.nodes {
		for _, ifc := range n.ifaces {
			for {
				lk, err := n.h.LinkByName(ifc.name)
				if err != nil {
					return fmt.Errorf("find %s in %s: %w", ifc.name, n.Name, err)
				}
				qs, err := n.h.QdiscList(lk)
				if err == nil && lk.Attrs().OperState == netlink.OperUp && hasRoot(qs) {
					break
				}
				if time.Now().After(deadline) {
					return fmt.Errorf("wait for %s in %s to be activated (operstate %v, qdiscs %d): %v",
						ifc.name, n.Name, lk.Attrs().OperState, len(qs), err)
				}
				time.Sleep(5 * time.Millisecond)
			}
		}
	}
	return nil
}

func hasRoot(qs []netlink.Qdisc) bool {
	for _, q := range qs {
		if q.Attrs().Parent == netlink.HANDLE_ROOT {
			return true
		}
	}
	return false
}
