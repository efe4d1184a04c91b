package testutil

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Namespace is where a Receiver listens: a NetNS or a testbed node.
type Namespace interface {
	Do(fn func() error) error
}

// Flow is one direction of a flow as the receiver sees it: the protocol,
// and the source and destination (with ports for TCP and UDP).
type Flow struct {
	Proto    uint8
	Src, Dst netip.AddrPort
}

func (f Flow) String() string { return fmt.Sprintf("%d %s→%s", f.Proto, f.Src, f.Dst) }

// Packet is one IPv4 or IPv6 packet that arrived.
type Packet struct {
	Flow Flow
	TOS  uint8 // the IPv4 TOS or IPv6 traffic class byte as received
	DSCP int   // TOS >> 2
	SYN  bool  // a TCP SYN without ACK
	Len  int   // bytes of the IP packet
	At   time.Time
}

// FlowSeen is what the receiver saw of one flow.
type FlowSeen struct {
	Packets   int
	FirstDSCP int
	FirstSYN  bool // the first packet seen was a TCP SYN
	DSCP      map[int]int
}

// QueueLen is how many unread packets Next can return; later ones are only
// counted in the flows.
const QueueLen = 4096

// Receiver records the DSCP (IPv4 TOS, IPv6 traffic class) of every IPv4
// and IPv6 packet arriving on one interface of a namespace, UDP and TCP
// with their ports, the first packet of each flow included. It captures
// with an AF_PACKET socket, so it sees what arrives whether or not a
// program receives it, and leaves the receiving to whoever does.
type Receiver struct {
	fd    int
	mu    sync.Mutex
	flows map[Flow]*FlowSeen
	queue chan Packet
	done  chan struct{}
	ended chan struct{}
	stop  sync.Once
}

// NewReceiver starts a Receiver on iface in ns; it stops at cleanup.
func NewReceiver(tb testing.TB, ns Namespace, iface string) *Receiver {
	tb.Helper()
	r, err := StartReceiver(ns, iface)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(r.Stop)
	return r
}

// StartReceiver starts a Receiver on iface in ns; Stop ends it.
func StartReceiver(ns Namespace, iface string) (*Receiver, error) {
	r := &Receiver{flows: map[Flow]*FlowSeen{}, queue: make(chan Packet, QueueLen),
		done: make(chan struct{}), ended: make(chan struct{})}
	err := ns.Do(func() error {
		ifi, err := net.InterfaceByName(iface)
		if err != nil {
			return fmt.Errorf("start receiver: %w", err)
		}
		proto := htons(unix.ETH_P_ALL)
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(proto))
		if err != nil {
			return fmt.Errorf("start receiver: open packet socket: %w", err)
		}
		if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: proto, Ifindex: ifi.Index}); err != nil {
			unix.Close(fd)
			return fmt.Errorf("start receiver: bind packet socket to %s: %w", iface, err)
		}
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 8<<20)
		tv := unix.NsecToTimeval(int64(100 * time.Millisecond))
		_ = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
		r.fd = fd
		return nil
	})
	if err != nil {
		return nil, err
	}
	go r.loop()
	return r, nil
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

func (r *Receiver) loop() {
	defer close(r.ended)
	defer unix.Close(r.fd)
	buf := make([]byte, 65536)
	for {
		select {
		case <-r.done:
			return
		default:
		}
		n, from, err := unix.Recvfrom(r.fd, buf, 0)
		if err != nil {
			continue
		}
		if ll, ok := from.(*unix.SockaddrLinklayer); ok && ll.Pkttype == unix.PACKET_OUTGOING {
			continue // only what arrives
		}
		if n < 14 {
			continue
		}
		if p, ok := decode(buf[14:n], binary.BigEndian.Uint16(buf[12:14])); ok {
			p.At = time.Now()
			r.record(p)
		}
	}
}

// decode reads the addresses, ports and DSCP of an IPv4 or IPv6 packet.
func decode(b []byte, etype uint16) (Packet, bool) {
	var p Packet
	var l4 []byte
	switch etype {
	case unix.ETH_P_IP:
		if len(b) < 20 {
			return p, false
		}
		ihl := int(b[0]&0xf) * 4
		if len(b) < ihl {
			return p, false
		}
		p.TOS = b[1]
		p.Flow.Proto = b[9]
		src, _ := netip.AddrFromSlice(b[12:16])
		dst, _ := netip.AddrFromSlice(b[16:20])
		p.Flow.Src, p.Flow.Dst = netip.AddrPortFrom(src, 0), netip.AddrPortFrom(dst, 0)
		l4 = b[ihl:]
	case unix.ETH_P_IPV6:
		if len(b) < 40 {
			return p, false
		}
		p.TOS = uint8(binary.BigEndian.Uint16(b[0:2]) >> 4)
		p.Flow.Proto = b[6]
		src, _ := netip.AddrFromSlice(b[8:24])
		dst, _ := netip.AddrFromSlice(b[24:40])
		p.Flow.Src, p.Flow.Dst = netip.AddrPortFrom(src, 0), netip.AddrPortFrom(dst, 0)
		l4 = b[40:]
	default:
		return p, false
	}
	p.DSCP = int(p.TOS >> 2)
	p.Len = len(b)
	if (p.Flow.Proto == unix.IPPROTO_TCP || p.Flow.Proto == unix.IPPROTO_UDP) && len(l4) >= 4 {
		p.Flow.Src = netip.AddrPortFrom(p.Flow.Src.Addr(), binary.BigEndian.Uint16(l4[0:2]))
		p.Flow.Dst = netip.AddrPortFrom(p.Flow.Dst.Addr(), binary.BigEndian.Uint16(l4[2:4]))
		if p.Flow.Proto == unix.IPPROTO_TCP && len(l4) >= 14 {
			p.SYN = l4[13]&0x02 != 0 && l4[13]&0x10 == 0
		}
	}
	return p, true
}

func (r *Receiver) record(p Packet) {
	r.mu.Lock()
	f, ok := r.flows[p.Flow]
	if !ok {
		f = &FlowSeen{FirstDSCP: p.DSCP, FirstSYN: p.SYN, DSCP: map[int]int{}}
		r.flows[p.Flow] = f
	}
	f.Packets++
	f.DSCP[p.DSCP]++
	r.mu.Unlock()
	select {
	case r.queue <- p:
	default:
	}
}

// Stop ends the capture; it may be called more than once.
func (r *Receiver) Stop() {
	r.stop.Do(func() {
		close(r.done)
		<-r.ended
	})
}

// ErrNoPacket is Next's error when no matching packet arrived in time.
var ErrNoPacket = errors.New("no matching packet arrived")

// Next returns the oldest unread packet that match accepts (nil accepts
// every packet), skipping the others, waiting up to timeout for it.
func (r *Receiver) Next(timeout time.Duration, match func(Packet) bool) (Packet, error) {
	tm := time.NewTimer(timeout)
	defer tm.Stop()
	for {
		select {
		case p := <-r.queue:
			if match == nil || match(p) {
				return p, nil
			}
		case <-tm.C:
			return Packet{}, fmt.Errorf("receive within %v: %w", timeout, ErrNoPacket)
		}
	}
}

// UDPTo accepts the UDP packets to port dport.
func UDPTo(dport uint16) func(Packet) bool {
	return func(p Packet) bool { return p.Flow.Proto == unix.IPPROTO_UDP && p.Flow.Dst.Port() == dport }
}

// To returns the flows of protocol proto towards destination port dport
// (any address).
func (r *Receiver) To(proto uint8, dport uint16) map[Flow]FlowSeen {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[Flow]FlowSeen{}
	for id, f := range r.flows {
		if id.Proto == proto && id.Dst.Port() == dport {
			c := *f
			c.DSCP = make(map[int]int, len(f.DSCP))
			for k, v := range f.DSCP {
				c.DSCP[k] = v
			}
			out[id] = c
		}
	}
	return out
}

// DSCPCounts sums the packets per DSCP of the flows To(proto, dport) and
// returns them with the total.
func (r *Receiver) DSCPCounts(proto uint8, dport uint16) (map[int]int, int) {
	total := 0
	out := map[int]int{}
	for _, f := range r.To(proto, dport) {
		for d, n := range f.DSCP {
			out[d] += n
			total += n
		}
	}
	return out, total
}
