package integration

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hostqos/hostqos/internal/testbed"
)

// flowID names a direction of a flow as the receiver sees it.
type flowID struct {
	Proto    uint8
	Src, Dst netip.AddrPort
}

func (f flowID) String() string { return fmt.Sprintf("%d %s→%s", f.Proto, f.Src, f.Dst) }

// flowSeen is what the sniffer saw of one flow.
type flowSeen struct {
	Packets   int
	FirstDSCP int
	FirstSYN  bool // the first packet seen was a TCP SYN
	DSCP      map[int]int
}

// sniffer captures every IPv4/IPv6 packet arriving on an interface of a
// node (an AF_PACKET socket inside the node's namespace) and records the
// DSCP of each flow's packets, first packet included.
type sniffer struct {
	fd    int
	mu    sync.Mutex
	flows map[flowID]*flowSeen
	done  chan struct{}
}

func startSniffer(node *testbed.Node, iface string) (*sniffer, error) {
	s := &sniffer{flows: map[flowID]*flowSeen{}, done: make(chan struct{})}
	err := node.Do(func() error {
		ifi, err := net.InterfaceByName(iface)
		if err != nil {
			return err
		}
		proto := htons(unix.ETH_P_ALL)
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(proto))
		if err != nil {
			return fmt.Errorf("open packet socket: %w", err)
		}
		if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: proto, Ifindex: ifi.Index}); err != nil {
			unix.Close(fd)
			return fmt.Errorf("bind packet socket: %w", err)
		}
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 8<<20)
		tv := unix.NsecToTimeval(int64(100 * time.Millisecond))
		_ = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
		s.fd = fd
		return nil
	})
	if err != nil {
		return nil, err
	}
	go s.loop()
	return s, nil
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

func (s *sniffer) loop() {
	buf := make([]byte, 65536)
	for {
		select {
		case <-s.done:
			unix.Close(s.fd)
			return
		default:
		}
		n, from, err := unix.Recvfrom(s.fd, buf, 0)
		if err != nil {
			continue
		}
		if ll, ok := from.(*unix.SockaddrLinklayer); ok && ll.Pkttype == unix.PACKET_OUTGOING {
			continue // only what arrives
		}
		if n < 14 {
			continue
		}
		s.record(buf[14:n], binary.BigEndian.Uint16(buf[12:14]))
	}
}

func (s *sniffer) record(p []byte, etype uint16) {
	var id flowID
	var dscp int
	var l4 []byte
	switch etype {
	case unix.ETH_P_IP:
		if len(p) < 20 {
			return
		}
		ihl := int(p[0]&0xf) * 4
		if len(p) < ihl {
			return
		}
		dscp = int(p[1] >> 2)
		id.Proto = p[9]
		src, _ := netip.AddrFromSlice(p[12:16])
		dst, _ := netip.AddrFromSlice(p[16:20])
		id.Src, id.Dst = netip.AddrPortFrom(src, 0), netip.AddrPortFrom(dst, 0)
		l4 = p[ihl:]
	case unix.ETH_P_IPV6:
		if len(p) < 40 {
			return
		}
		dscp = int((binary.BigEndian.Uint16(p[0:2]) >> 6) & 0x3f)
		id.Proto = p[6]
		src, _ := netip.AddrFromSlice(p[8:24])
		dst, _ := netip.AddrFromSlice(p[24:40])
		id.Src, id.Dst = netip.AddrPortFrom(src, 0), netip.AddrPortFrom(dst, 0)
		l4 = p[40:]
	default:
		return
	}
	syn := false
	if (id.Proto == unix.IPPROTO_TCP || id.Proto == unix.IPPROTO_UDP) && len(l4) >= 4 {
		id.Src = netip.AddrPortFrom(id.Src.Addr(), binary.BigEndian.Uint16(l4[0:2]))
		id.Dst = netip.AddrPortFrom(id.Dst.Addr(), binary.BigEndian.Uint16(l4[2:4]))
		if id.Proto == unix.IPPROTO_TCP && len(l4) >= 14 {
			syn = l4[13]&0x02 != 0 && l4[13]&0x10 == 0
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	f, ok := s.flows[id]
	if !ok {
		f = &flowSeen{FirstDSCP: dscp, FirstSYN: syn, DSCP: map[int]int{}}
		s.flows[id] = f
	}
	f.Packets++
	f.DSCP[dscp]++
}

// stop ends the capture.
func (s *sniffer) stop() { close(s.done) }

// to returns the flows towards a destination port (any address).
func (s *sniffer) to(proto uint8, dport uint16) map[flowID]flowSeen {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[flowID]flowSeen{}
	for id, f := range s.flows {
		if id.Proto == proto && id.Dst.Port() == dport {
			c := *f
			c.DSCP = map[int]int{}
			for k, v := range f.DSCP {
				c.DSCP[k] = v
			}
			out[id] = c
		}
	}
	return out
}

// dscpCounts sums packets per DSCP over flows towards dport.
func (s *sniffer) dscpCounts(proto uint8, dport uint16) (map[int]int, int) {
	total := 0
	out := map[int]int{}
	for _, f := range s.to(proto, dport) {
		for d, n := range f.DSCP {
			out[d] += n
			total += n
		}
	}
	return out, total
}
