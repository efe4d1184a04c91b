package rsvp

import (
	"context"
	"fmt"
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

	notes noteLog // the failures above, logged at most once a minute each
}

// Run serves until ctx ends, then closes the sockets.
func (a *Agent) Run(ctx context.Context) {
	if a.Period <= 0 {
		a.Period = 100 * time.Millisecond
	}
	a.Node.DeferRemovals()
	var wg sync.WaitGroup
	for _, c := range []*Conn{a.V4, a.V6} {
		if c == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			a.serve(c, c.Recv)
		}()
		if c.Intercepting() {
			wg.Add(1)
			go func() {
				defer wg.Done()
				a.serve(c, c.RecvIntercepted)
			}()
		}
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

func (a *Agent) serve(c *Conn, recv func() (Received, error)) {
	for {
		r, err := recv()
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
		a.Send(a.Node.Handle(m, r.Src, time.Now()))
	}
}

// Send encodes and sends outs, then makes the local removals of the step
// that produced them (a ResvTear leaves before this hop's engine change).
func (a *Agent) Send(outs []Out) {
	defer a.Node.RemoveDeferred()
	for _, o := range outs {
		b, err := o.Msg.Encode()
		if err != nil {
			a.SendFail.Add(1)
			a.notes.note(a.Log, time.Now(), "encode RSVP message", "encode", func() []any { return []any{"type", o.Msg.Type.String(), "error", err} })
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
			a.notes.note(a.Log, time.Now(), "send RSVP message", "send", func() []any { return []any{"type", o.Msg.Type.String(), "to", o.To, "error", err} })
		}
	}
}

// InterceptRouterAlert makes the kernel hand this Conn the RSVP packets
// with the Router Alert option that it would forward: what an RSVP router
// needs to see Path messages addressed beyond it. IPv4: IP_ROUTER_ALERT on
// the receiving socket (per network namespace). IPv6: Linux takes
// IPV6_ROUTER_ALERT only on an IPPROTO_RAW socket, the option's value
// selecting the Router Alert value (RFC 2711: 1, RSVP), and hands it whole
// packets, IPv6 header included (RecvIntercepted strips it); its list of
// such sockets spans network namespaces unless IPV6_ROUTER_ALERT_ISOLATE
// is set, so it is set first.
func (c *Conn) InterceptRouterAlert() error {
	if !c.v6 {
		return unix.SetsockoptInt(c.fd, unix.IPPROTO_IP, unix.IP_ROUTER_ALERT, 1)
	}
	if c.rafd >= 0 {
		return nil
	}
	fd, err := unix.Socket(unix.AF_INET6, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_RAW)
	if err != nil {
		return fmt.Errorf("open IPv6 Router Alert socket: %w", err)
	}
	for _, o := range []struct {
		name string
		opt  int
	}{{"IPV6_ROUTER_ALERT_ISOLATE", unix.IPV6_ROUTER_ALERT_ISOLATE}, {"IPV6_RECVPKTINFO", unix.IPV6_RECVPKTINFO}, {"IPV6_ROUTER_ALERT", unix.IPV6_ROUTER_ALERT}} {
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, o.opt, 1); err != nil {
			unix.Close(fd)
			return fmt.Errorf("set %s: %w", o.name, err)
		}
	}
	c.rabuf = make([]byte, MaxMessage+40+256)
	c.rafd = fd
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
		fam := unix.AF_INET6
		var sa unix.Sockaddr = &unix.SockaddrInet6{Port: 9, Addr: dst.As16()}
		if dst.Is4() {
			fam = unix.AF_INET
			sa = &unix.SockaddrInet4{Port: 9, Addr: dst.As4()}
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
