package rsvp

import (
	"context"
	"log/slog"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Agent runs a Node on raw sockets: it receives messages (on managed links
// only), decodes them strictly, hands them to the node, sends what the
// node answers, and ticks the node's timers.
type Agent struct {
	Node    *Node
	V4, V6  *Conn                  // either may be nil
	Managed func(ifindex int) bool // links messages are accepted on
	Log     *slog.Logger
	Period  time.Duration // timer tick (R/10 is plenty; 100 ms if 0)

	Received  atomic.Uint64 // accepted and handled
	Malformed atomic.Uint64 // refused by Decode
	Foreign   atomic.Uint64 // arrived on a link that is not managed
	SendFail  atomic.Uint64
}

// Run serves until ctx ends, then closes the sockets.
func (a *Agent) Run(ctx context.Context) {
	if a.Period <= 0 {
		a.Period = 100 * time.Millisecond
	}
	var wg sync.WaitGroup
	for _, c := range []*Conn{a.V4, a.V6} {
		if c == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			a.serve(c)
		}()
	}
	t := time.NewTicker(a.Period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			for _, c := range []*Conn{a.V4, a.V6} {
				if c != nil {
					c.Close()
				}
			}
			wg.Wait()
			return
		case now := <-t.C:
			a.Send(a.Node.Tick(now))
		}
	}
}

func (a *Agent) serve(c *Conn) {
	for {
		r, err := c.Recv()
		if err != nil {
			if c.closed() {
				return
			}
			a.Malformed.Add(1)
			continue
		}
		if a.Managed != nil && !a.Managed(r.Ifindex) {
			a.Foreign.Add(1)
			continue
		}
		m, err := Decode(r.Msg)
		if err != nil {
			a.Malformed.Add(1)
			a.Log.Debug("dropped RSVP message", "from", r.Src, "error", err)
			continue
		}
		a.Received.Add(1)
		a.Send(a.Node.Handle(m, time.Now()))
	}
}

// Send encodes and sends outs.
func (a *Agent) Send(outs []Out) {
	for _, o := range outs {
		b, err := o.Msg.Encode()
		if err != nil {
			a.SendFail.Add(1)
			a.Log.Warn("encode RSVP message", "type", o.Msg.Type.String(), "error", err)
			continue
		}
		c := a.V4
		if o.To.Is6() {
			c = a.V6
		}
		if c == nil {
			a.SendFail.Add(1)
			continue
		}
		if err := c.Send(b, o.To, int(o.Msg.TTL), o.Alert); err != nil {
			a.SendFail.Add(1)
			a.Log.Warn("send RSVP message", "type", o.Msg.Type.String(), "to", o.To, "error", err)
		}
	}
}

// InterceptRouterAlert makes the kernel hand this socket the packets with
// the Router Alert option that it would forward (IP_ROUTER_ALERT,
// IPV6_ROUTER_ALERT with value 1, RSVP): what an RSVP router needs to see
// Path messages addressed beyond it.
func (c *Conn) InterceptRouterAlert() error {
	var err error
	if c.v6 {
		err = unix.SetsockoptInt(c.fd, unix.IPPROTO_IPV6, unix.IPV6_ROUTER_ALERT, 1)
	} else {
		err = unix.SetsockoptInt(c.fd, unix.IPPROTO_IP, unix.IP_ROUTER_ALERT, 1)
	}
	if err != nil {
		return err
	}
	return nil
}

func (c *Conn) closed() bool { return c.isClosed.Load() }

// LocalFunc is a Config.Local for a host or router: the source address the
// kernel would use toward dst (a connected UDP socket's local address) and
// whether dst is one of addrs.
func LocalFunc(addrs func() []netip.Addr) func(dst netip.Addr) (netip.Addr, bool, error) {
	return func(dst netip.Addr) (netip.Addr, bool, error) {
		for _, a := range addrs() {
			if a == dst {
				return a, true, nil
			}
		}
		fam := unix.AF_INET
		var sa unix.Sockaddr = &unix.SockaddrInet4{Port: 9, Addr: dst.As4()}
		if dst.Is6() {
			fam = unix.AF_INET6
			sa = &unix.SockaddrInet6{Port: 9, Addr: dst.As16()}
		}
		fd, err := unix.Socket(fam, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return netip.Addr{}, false, err
		}
		defer unix.Close(fd)
		if err := unix.Connect(fd, sa); err != nil {
			return netip.Addr{}, false, err
		}
		ls, err := unix.Getsockname(fd)
		if err != nil {
			return netip.Addr{}, false, err
		}
		switch s := ls.(type) {
		case *unix.SockaddrInet4:
			return netip.AddrFrom4(s.Addr), false, nil
		case *unix.SockaddrInet6:
			return netip.AddrFrom16(s.Addr), false, nil
		}
		return netip.Addr{}, false, unix.EAFNOSUPPORT
	}
}
