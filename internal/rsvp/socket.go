package rsvp

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Conn is a raw IP protocol 46 socket of one address family. It sends RSVP
// messages (Path with the Router Alert option: an IPv4 option, RFC 2113, or
// an IPv6 hop-by-hop option, RFC 2711) and receives them with the arrival
// interface, so the caller can accept messages on managed links only.
type Conn struct {
	v6   bool
	fd   int // receives; sends without Router Alert
	ra   int // sends with Router Alert
	mu   sync.Mutex
	rbuf []byte
	// rafd is an IPv6 router's interception socket (InterceptRouterAlert):
	// AF_INET6, IPPROTO_RAW, handed whole packets (IPv6 header included).
	rafd  int
	ramu  sync.Mutex
	rabuf []byte

	isClosed atomic.Bool
}

// Received is one message as it arrived.
type Received struct {
	Msg     []byte // the RSVP message (IP header removed)
	IPv4    []byte // IPv4: the whole packet as received, header included
	Src     netip.Addr
	Dst     netip.Addr
	Ifindex int
}

// routerAlert6 is the IPv6 hop-by-hop header carrying Router Alert value 1
// (RSVP), padded to 8 bytes; the kernel fills in the next header.
var routerAlert6 = []byte{0, 0, 5, 2, 0, 1, 1, 0}

// routerAlert4 is the IPv4 Router Alert option: type 148, length 4, value 0.
var routerAlert4 = []byte{148, 4, 0, 0}

// Listen opens the sockets for IPv4 (v6 false) or IPv6. Needs CAP_NET_RAW.
func Listen(v6 bool) (*Conn, error) {
	c := &Conn{v6: v6, fd: -1, ra: -1, rafd: -1, rbuf: make([]byte, MaxMessage+60)}
	fam := unix.AF_INET
	if v6 {
		fam = unix.AF_INET6
	}
	var err error
	if c.fd, err = unix.Socket(fam, unix.SOCK_RAW|unix.SOCK_CLOEXEC, Protocol); err != nil {
		return nil, fmt.Errorf("open raw RSVP socket: %w", err)
	}
	if c.ra, err = unix.Socket(fam, unix.SOCK_RAW|unix.SOCK_CLOEXEC, Protocol); err != nil {
		c.Close()
		return nil, fmt.Errorf("open raw RSVP socket: %w", err)
	}
	if v6 {
		err = unix.SetsockoptInt(c.fd, unix.IPPROTO_IPV6, unix.IPV6_RECVPKTINFO, 1)
		if err == nil {
			err = unix.SetsockoptString(c.ra, unix.IPPROTO_IPV6, unix.IPV6_HOPOPTS, string(routerAlert6))
		}
		if err == nil {
			// Sending side only: the receiving socket keeps its buffer small.
			err = unix.SetsockoptInt(c.ra, unix.SOL_SOCKET, unix.SO_RCVBUF, 0)
		}
	} else {
		err = unix.SetsockoptInt(c.fd, unix.IPPROTO_IP, unix.IP_PKTINFO, 1)
		if err == nil {
			err = unix.SetsockoptString(c.ra, unix.IPPROTO_IP, unix.IP_OPTIONS, string(routerAlert4))
		}
		if err == nil {
			err = unix.SetsockoptInt(c.ra, unix.SOL_SOCKET, unix.SO_RCVBUF, 0)
		}
	}
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("set RSVP socket options: %w", err)
	}
	return c, nil
}

// Close closes the sockets; a blocked Recv returns an error.
func (c *Conn) Close() error {
	if !c.isClosed.CompareAndSwap(false, true) {
		return nil
	}
	for _, fd := range []int{c.fd, c.ra, c.rafd} {
		if fd >= 0 {
			unix.Shutdown(fd, unix.SHUT_RDWR)
		}
	}
	// The receiving socket is closed by the last Recv's return (or here,
	// when nobody is receiving): closing it under a blocked recvmsg could
	// hand its number to another file.
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, fd := range []int{c.fd, c.ra} {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
	if c.rafd >= 0 {
		c.ramu.Lock()
		defer c.ramu.Unlock()
		unix.Close(c.rafd)
	}
	return nil
}

// Send sends msg (an encoded message) to dst with IP TTL/hop limit ttl,
// with the Router Alert option when alert is set (Path, PathTear).
func (c *Conn) Send(msg []byte, dst netip.Addr, ttl int, alert bool) error {
	fd := c.fd
	if alert {
		fd = c.ra
	}
	var sa unix.Sockaddr
	var oob []byte
	if c.v6 {
		sa = &unix.SockaddrInet6{Addr: dst.As16()}
		oob = cmsgInt(unix.IPPROTO_IPV6, unix.IPV6_HOPLIMIT, ttl)
	} else {
		sa = &unix.SockaddrInet4{Addr: dst.As4()}
		oob = cmsgInt(unix.IPPROTO_IP, unix.IP_TTL, ttl)
	}
	if err := unix.Sendmsg(fd, msg, oob, sa, 0); err != nil {
		return fmt.Errorf("send RSVP message to %s: %w", dst, err)
	}
	return nil
}

func cmsgInt(level, typ, v int) []byte {
	b := make([]byte, unix.CmsgSpace(4))
	h := (*unix.Cmsghdr)(unsafe.Pointer(&b[0]))
	h.Level = int32(level)
	h.Type = int32(typ)
	h.SetLen(unix.CmsgLen(4))
	binary.NativeEndian.PutUint32(b[unix.CmsgLen(0):], uint32(v))
	return b
}

// Recv blocks for the next RSVP packet. The returned Msg is valid until the
// next Recv. One Recv at a time.
func (c *Conn) Recv() (Received, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return recvFrom(c.fd, c.rbuf, !c.v6)
}

// Intercepting reports whether an IPv6 Conn has an interception socket
// (RecvIntercepted).
func (c *Conn) Intercepting() bool { return c.rafd >= 0 }

// RecvIntercepted blocks for the next RSVP packet with Router Alert that
// the kernel would have forwarded (IPv6 router; see InterceptRouterAlert).
// The returned Msg is valid until the next RecvIntercepted; one at a time.
func (c *Conn) RecvIntercepted() (Received, error) {
	c.ramu.Lock()
	defer c.ramu.Unlock()
	r, err := recvFrom(c.rafd, c.rabuf, false)
	if err != nil {
		return r, err
	}
	msg, err := ipv6Payload(r.Msg)
	if err != nil {
		return r, err
	}
	r.Msg = msg
	return r, nil
}

// ipv6Payload is the RSVP message of a whole IPv6 packet: after the fixed
// header and the hop-by-hop, routing and destination options headers.
func ipv6Payload(p []byte) ([]byte, error) {
	if len(p) < 40 || p[0]>>4 != 6 {
		return nil, errMsg("IPv6 packet of %d bytes, too short for its header", len(p))
	}
	next, off := p[6], 40
	for {
		switch next {
		case Protocol:
			return p[off:], nil
		case unix.IPPROTO_HOPOPTS, unix.IPPROTO_ROUTING, unix.IPPROTO_DSTOPTS:
			if off+8 > len(p) {
				return nil, errMsg("IPv6 extension header at %d beyond the packet's %d bytes", off, len(p))
			}
			next, off = p[off], off+(int(p[off+1])+1)*8
		default:
			return nil, errMsg("IPv6 packet of next header %d, not RSVP", next)
		}
	}
}

func recvFrom(fd int, buf []byte, ipv4 bool) (Received, error) {
	oob := make([]byte, 128)
	n, oobn, _, from, err := unix.Recvmsg(fd, buf, oob, 0)
	if err != nil {
		return Received{}, fmt.Errorf("receive RSVP message: %w", err)
	}
	if n == 0 && oobn == 0 {
		return Received{}, fmt.Errorf("receive RSVP message: %w", unix.EBADF) // closed
	}
	r := Received{Msg: buf[:n]}
	switch sa := from.(type) {
	case *unix.SockaddrInet4:
		r.Src = netip.AddrFrom4(sa.Addr)
	case *unix.SockaddrInet6:
		r.Src = netip.AddrFrom16(sa.Addr)
	}
	cms, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err == nil {
		for _, cm := range cms {
			switch {
			case cm.Header.Level == unix.IPPROTO_IP && cm.Header.Type == unix.IP_PKTINFO && len(cm.Data) >= 12:
				r.Ifindex = int(binary.NativeEndian.Uint32(cm.Data))
				r.Dst = netip.AddrFrom4([4]byte(cm.Data[8:12]))
			case cm.Header.Level == unix.IPPROTO_IPV6 && cm.Header.Type == unix.IPV6_PKTINFO && len(cm.Data) >= 20:
				r.Dst = netip.AddrFrom16([16]byte(cm.Data[:16]))
				r.Ifindex = int(binary.NativeEndian.Uint32(cm.Data[16:]))
			}
		}
	}
	if ipv4 {
		// IPv4 raw sockets deliver the IP header (with its options).
		if n < 20 || int(r.Msg[0]&0xf)*4 > n {
			return r, errMsg("IPv4 packet of %d bytes, too short for its header", n)
		}
		r.IPv4 = r.Msg
		r.Msg = r.Msg[int(r.Msg[0]&0xf)*4:]
	}
	return r, nil
}

// HasRouterAlert4 reports whether an IPv4 header carries the Router Alert
// option (used by tests; the kernel's IP_ROUTER_ALERT delivers such packets
// to a router instead of forwarding them).
func HasRouterAlert4(hdr []byte) bool {
	if len(hdr) < 20 {
		return false
	}
	ihl := int(hdr[0]&0xf) * 4
	if ihl > len(hdr) {
		return false
	}
	for o := hdr[20:ihl]; len(o) > 0; {
		switch o[0] {
		case 0:
			return false
		case 1:
			o = o[1:]
			continue
		}
		if len(o) < 2 || int(o[1]) < 2 || int(o[1]) > len(o) {
			return false
		}
		if o[0] == 148 {
			return true
		}
		o = o[o[1]:]
	}
	return false
}
