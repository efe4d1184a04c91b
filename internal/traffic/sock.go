package traffic

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// setTOS sets the DSCP of a socket for both IPv4 (IP_TOS) and IPv6
// (IPV6_TCLASS). An AF_INET socket refuses the IPv6 option; that is fine as
// long as one of the two applies.
func setTOS(fd uintptr, dscp int) error {
	tos := dscp << 2
	e4 := unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_TOS, tos)
	e6 := unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_TCLASS, tos)
	if e4 != nil && e6 != nil {
		return fmt.Errorf("set DSCP %d on socket: %w", dscp, e4)
	}
	return nil
}

// setRecvTOS asks the kernel for the TOS / traffic class of every received
// datagram as a control message.
func setRecvTOS(fd uintptr) error {
	e4 := unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_RECVTOS, 1)
	e6 := unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_RECVTCLASS, 1)
	if e4 != nil && e6 != nil {
		return fmt.Errorf("enable IP_RECVTOS on socket: %w", e4)
	}
	return nil
}

func controlTOS(dscp int) func(network, address string, c syscall.RawConn) error {
	return func(network, address string, c syscall.RawConn) error {
		if dscp < 0 {
			return nil
		}
		var serr error
		if err := c.Control(func(fd uintptr) { serr = setTOS(fd, dscp) }); err != nil {
			return err
		}
		return serr
	}
}

// dialUDP opens a connected UDP socket to addr with the given DSCP (NoDSCP
// leaves the system default).
func dialUDP(ctx context.Context, to, from string, dscp int) (*net.UDPConn, error) {
	d := net.Dialer{Control: controlTOS(dscp)}
	if from != "" {
		la, err := net.ResolveUDPAddr("udp", from)
		if err != nil {
			return nil, fmt.Errorf("resolve local address %q: %w", from, err)
		}
		d.LocalAddr = la
	}
	c, err := d.DialContext(ctx, "udp", to)
	if err != nil {
		return nil, fmt.Errorf("open UDP socket to %s: %w", to, err)
	}
	return c.(*net.UDPConn), nil
}

// listenUDP opens a UDP socket on addr that reports the TOS of what it
// receives.
func listenUDP(ctx context.Context, addr string) (*net.UDPConn, error) {
	lc := net.ListenConfig{Control: func(network, address string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) {
			serr = setRecvTOS(fd)
			// Large receive buffer: sinks must not lose what the network delivered.
			_ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 4<<20)
		}); err != nil {
			return err
		}
		return serr
	}}
	pc, err := lc.ListenPacket(ctx, "udp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on UDP %s: %w", addr, err)
	}
	return pc.(*net.UDPConn), nil
}

// oobSize is enough for one TOS and one TCLASS control message.
var oobSize = unix.CmsgSpace(4) * 2

// parseTOS extracts the DSCP from received control messages, or NoDSCP.
func parseTOS(oob []byte) int {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return NoDSCP
	}
	for _, m := range msgs {
		switch {
		case m.Header.Level == unix.IPPROTO_IP && m.Header.Type == unix.IP_TOS && len(m.Data) >= 1:
			return int(m.Data[0]) >> 2
		case m.Header.Level == unix.IPPROTO_IPV6 && m.Header.Type == unix.IPV6_TCLASS && len(m.Data) >= 4:
			return int(binary.NativeEndian.Uint32(m.Data)&0xff) >> 2
		}
	}
	return NoDSCP
}

// tosCmsg builds a control message that sets the DSCP of one sent datagram.
func tosCmsg(dst netip.Addr, dscp int) []byte {
	if dscp < 0 {
		return nil
	}
	b := make([]byte, unix.CmsgSpace(4))
	h := (*unix.Cmsghdr)(unsafe.Pointer(&b[0]))
	if dst.Is4() || dst.Is4In6() {
		h.Level, h.Type = unix.IPPROTO_IP, unix.IP_TOS
	} else {
		h.Level, h.Type = unix.IPPROTO_IPV6, unix.IPV6_TCLASS
	}
	h.SetLen(unix.CmsgLen(4))
	binary.NativeEndian.PutUint32(b[unix.CmsgLen(0):], uint32(dscp<<2))
	return b
}

// isV6 reports whether a UDP/TCP address is a real IPv6 address.
func isV6(a net.Addr) bool {
	switch v := a.(type) {
	case *net.UDPAddr:
		return v.IP.To4() == nil
	case *net.TCPAddr:
		return v.IP.To4() == nil
	}
	return false
}

// isTimeout reports a deadline expiry.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// sleepUntil waits until t or until ctx is done; it reports false on ctx.
func sleepUntil(ctx context.Context, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err() == nil
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-tm.C:
		return true
	}
}

// sendFIN tells a sink that a flow ended and how many packets it sent.
func sendFIN(c *net.UDPConn, flow uint32, sent uint64, aux uint64) {
	b := make([]byte, HeaderSize)
	for i := 0; i < finCopies; i++ {
		h := header{flags: flagFIN, flow: flow, seq: sent, sent: time.Now().UnixNano(), aux: aux}
		h.put(b)
		_, _ = c.Write(b)
		time.Sleep(finInterval)
	}
}
