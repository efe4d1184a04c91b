package datapath

import (
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hostqos/hostqos/internal/testutil"
)

// TestQSockClassifies: a UDP socket made a qsocket leaves with its DSCP
// from the next packet, counted exactly; a change takes effect at the next
// packet; an ordinary user's qsocket yields to a rule that matches; a
// detached one is classified by the rules again; a TCP connection open
// before the attach changes without reconnecting; a closed socket frees
// its entry.
func TestQSockClassifies(t *testing.T) {
	b := newResvBed(t)
	b4 := testutil.PairB4.Addr()
	rx := testutil.NewReceiver(t, b.p.B, b.p.IfB)
	b.p.A.MustDo(t, func() error {
		return b.d.Apply(Policy{Rules: []Rule{
			{Slot: 1, Proto: 17, RPortFrom: 9401, DSCPIn: -1, DSCP: 10},
		}})
	})

	fd := b.socket(t, unix.SOCK_DGRAM)
	defer unix.Close(fd)
	cookie, err := SocketCookie(fd)
	if err != nil {
		t.Fatal(err)
	}
	send := func(port uint16) int {
		t.Helper()
		if err := unix.Sendto(fd, []byte("hello qsocket"), 0, sockaddr(netip.AddrPortFrom(b4, port))); err != nil {
			t.Fatal(err)
		}
		p, err := rx.Next(2*time.Second, testutil.UDPTo(port))
		if err != nil {
			t.Fatal(err)
		}
		return p.DSCP
	}
	if d := send(9400); d != 0 {
		t.Fatalf("before attach: DSCP %d, want 0", d)
	}
	if err := b.d.AttachQSock(fd, 7, QSock{Cookie: cookie, ClassID: 0x10005, DSCP: 34}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		if d := send(9400); d != 34 {
			t.Fatalf("qsocket packet %d: DSCP %d, want 34 (AF41)", i, d)
		}
	}
	c, err := b.d.ReadQSock(7)
	if err != nil {
		t.Fatal(err)
	}
	if !c.Open || c.Packets != 5 || c.Bytes != 5*(14+20+8+13) {
		t.Errorf("counters %+v, want 5 packets of %d bytes, open", c, 14+20+8+13)
	}
	if err := b.d.ChangeQSock(7, QSock{Cookie: cookie, ClassID: 0x10001, DSCP: 46}); err != nil {
		t.Fatal(err)
	}
	if d := send(9400); d != 46 {
		t.Errorf("after change: DSCP %d, want 46 (EF)", d)
	}
	// The admin's rule for port 9401 beats an ordinary user's qsocket,
	// not the admin's own.
	if d := send(9401); d != 46 {
		t.Errorf("admin's qsocket to a rule's port: DSCP %d, want 46", d)
	}
	if err := b.d.ChangeQSock(7, QSock{Cookie: cookie, ClassID: 0x10001, DSCP: 46, User: true}); err != nil {
		t.Fatal(err)
	}
	b.d.Reevaluate()
	if d := send(9401); d != 10 {
		t.Errorf("user's qsocket to a rule's port: DSCP %d, want the rule's 10", d)
	}
	if err := b.d.DetachQSock(fd, 7, cookie); err != nil {
		t.Fatal(err)
	}
	if d := send(9400); d != 0 {
		t.Errorf("after detach: DSCP %d, want 0", d)
	}
	if c, _ := b.d.ReadQSock(7); c.Open {
		t.Errorf("detached entry still open: %+v", c)
	}

	// TCP: connected and sending before the attach.
	var lfd int
	b.p.B.MustDo(t, func() error {
		var err error
		if lfd, err = unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0); err != nil {
			return err
		}
		if err := unix.Bind(lfd, sockaddr(netip.AddrPortFrom(b4, 9402))); err != nil {
			return err
		}
		return unix.Listen(lfd, 4)
	})
	defer unix.Close(lfd)
	tfd := b.socket(t, unix.SOCK_STREAM)
	if err := unix.Connect(tfd, sockaddr(netip.AddrPortFrom(b4, 9402))); err != nil {
		t.Fatal(err)
	}
	tcpTo := func(p testutil.Packet) bool {
		return p.Flow.Proto == unix.IPPROTO_TCP && p.Flow.Dst.Port() == 9402 && !p.SYN && p.Len > 52
	}
	write := func() int {
		t.Helper()
		if _, err := unix.Write(tfd, []byte("data")); err != nil {
			t.Fatal(err)
		}
		p, err := rx.Next(2*time.Second, tcpTo)
		if err != nil {
			t.Fatal(err)
		}
		return p.DSCP
	}
	if d := write(); d != 0 {
		t.Fatalf("TCP before attach: DSCP %d", d)
	}
	tc, _ := SocketCookie(tfd)
	if err := b.d.AttachQSock(tfd, 8, QSock{Cookie: tc, ClassID: 0x10005, DSCP: 34}); err != nil {
		t.Fatal(err)
	}
	if d := write(); d != 34 {
		t.Errorf("TCP after attach: DSCP %d, want 34", d)
	}
	unix.Close(tfd)
	deadline := time.Now().Add(2 * time.Second)
	for {
		c, _ := b.d.ReadQSock(8)
		if !c.Open {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("closed socket's entry still open: %+v", c)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if qs, err := b.d.QSocks(); err != nil || len(qs) != 0 {
		t.Errorf("QSocks = %v, %v; want none open", qs, err)
	}
}

// TestQSockForgetsOnlyItsFlows: making a socket a qsocket (or an ordinary
// socket again) classifies its own flows again at their next packet and
// leaves every other flow's cached result alone: no new policy generation.
// A connected socket's one flow; an unconnected one's flows from its local
// port, to any peer; an IPv6 socket bound to no address, its flows in both
// tables; a socket that never sent, nothing.
func TestQSockForgetsOnlyItsFlows(t *testing.T) {
	d := openTest(t, Options{})
	p := testutil.NewPair(t)
	a4, b4 := testutil.PairA4.Addr(), testutil.PairB4.Addr()
	b6 := testutil.PairB6.Addr()
	gen := d.Generation()
	mk := func(fam, typ int, bind unix.Sockaddr, peer unix.Sockaddr) (int, uint16) {
		t.Helper()
		var fd int
		p.A.MustDo(t, func() error {
			var err error
			if fd, err = unix.Socket(fam, typ|unix.SOCK_CLOEXEC, 0); err != nil {
				return err
			}
			if bind != nil {
				if err := unix.Bind(fd, bind); err != nil {
					return err
				}
			}
			if peer != nil {
				return unix.Connect(fd, peer)
			}
			return nil
		})
		t.Cleanup(func() { unix.Close(fd) })
		sa, err := unix.Getsockname(fd)
		if err != nil {
			t.Fatal(err)
		}
		ap, _ := sockaddrAddrPort(sa)
		return fd, ap.Port()
	}
	type flow struct {
		proto      uint8
		src, dst   netip.AddrPort
		wantForgot bool
	}
	put := func(fs []flow) {
		t.Helper()
		for _, f := range fs {
			v := hostqosHqFlow{Gen: gen, Classid: 0x10003, Slot: 0xffff, Action: uint8(ActQSock), Dscp: 10}
			k := hostqosHqFlowKey{Proto: f.proto, Sport: f.src.Port(), Dport: f.dst.Port()}
			putAddrWords(&k.Src, f.src.Addr())
			putAddrWords(&k.Dst, f.dst.Addr())
			var err error
			if f.src.Addr().Is4() {
				k4 := hostqosHqFlowKey4{Family: famIPv4, Proto: k.Proto, Sport: k.Sport, Dport: k.Dport, Saddr: k.Src[0], Daddr: k.Dst[0]}
				err = d.objs.HqFlows4.Put(&k4, &v)
			} else {
				k.Family = famIPv6
				err = d.objs.HqFlows6.Put(&k, &v)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	check := func(what string, fs []flow, forgot, wantN int) {
		t.Helper()
		if forgot != wantN {
			t.Errorf("%s: %d flows classified again, want %d", what, forgot, wantN)
		}
		for _, f := range fs {
			var v hostqosHqFlow
			k := hostqosHqFlowKey{Proto: f.proto, Sport: f.src.Port(), Dport: f.dst.Port()}
			putAddrWords(&k.Src, f.src.Addr())
			putAddrWords(&k.Dst, f.dst.Addr())
			var err error
			if f.src.Addr().Is4() {
				k4 := hostqosHqFlowKey4{Family: famIPv4, Proto: k.Proto, Sport: k.Sport, Dport: k.Dport, Saddr: k.Src[0], Daddr: k.Dst[0]}
				err = d.objs.HqFlows4.Lookup(&k4, &v)
			} else {
				k.Family = famIPv6
				err = d.objs.HqFlows6.Lookup(&k, &v)
			}
			if err != nil {
				t.Fatalf("%s: flow %v %v→%v: %v", what, f.proto, f.src, f.dst, err)
			}
			if got := v.Gen != gen; got != f.wantForgot {
				t.Errorf("%s: flow %v %v→%v classified again = %v, want %v", what, f.proto, f.src, f.dst, got, f.wantForgot)
			}
			if v.Classid != 0x10003 || v.Dscp != 10 {
				t.Errorf("%s: flow %v %v→%v: cached result changed: %+v", what, f.proto, f.src, f.dst, v)
			}
		}
		if g := d.Generation(); g != gen {
			t.Errorf("%s: policy generation %d → %d: every flow is classified again", what, gen, g)
		}
	}
	ap := netip.AddrPortFrom

	// A connected UDP socket: its 5-tuple only.
	fd, port := mk(unix.AF_INET, unix.SOCK_DGRAM, &unix.SockaddrInet4{Addr: a4.As4()}, sockaddr(ap(b4, 9000)))
	fs := []flow{
		{17, ap(a4, port), ap(b4, 9000), true},
		{17, ap(a4, port), ap(b4, 9001), false},
		{17, ap(a4, port+1), ap(b4, 9000), false},
		{6, ap(a4, port), ap(b4, 9000), false},
	}
	put(fs)
	check("connected", fs, d.forgetSocketFlows(fd), 1)

	// An unconnected one, bound to its address: every flow from its port.
	fd, port = mk(unix.AF_INET, unix.SOCK_DGRAM, &unix.SockaddrInet4{Addr: a4.As4()}, nil)
	fs = []flow{
		{17, ap(a4, port), ap(b4, 9000), true},
		{17, ap(a4, port), ap(b4, 9001), true},
		{17, ap(a4, port+1), ap(b4, 9000), false},
		{6, ap(a4, port), ap(b4, 9000), false},
		{17, ap(testutil.PairA6.Addr(), port), ap(b6, 9000), false},
	}
	put(fs)
	check("unconnected", fs, d.forgetSocketFlows(fd), 2)

	// An IPv6 socket bound to no address sends IPv4 too: both tables.
	fd, port = mk(unix.AF_INET6, unix.SOCK_DGRAM, &unix.SockaddrInet6{}, nil)
	fs = []flow{
		{17, ap(a4, port), ap(b4, 9000), true},
		{17, ap(testutil.PairA6.Addr(), port), ap(b6, 9000), true},
		{17, ap(testutil.PairA6.Addr(), port+1), ap(b6, 9000), false},
	}
	put(fs)
	check("dual-stack", fs, d.forgetSocketFlows(fd), 2)

	// A connected IPv6 socket (its address chosen by the route).
	fd, port = mk(unix.AF_INET6, unix.SOCK_DGRAM, nil, &unix.SockaddrInet6{Addr: b6.As16(), Port: 9002})
	fs = []flow{
		{17, ap(testutil.PairA6.Addr(), port), ap(b6, 9002), true},
		{17, ap(testutil.PairA6.Addr(), port), ap(b6, 9003), false},
	}
	put(fs)
	check("connected IPv6", fs, d.forgetSocketFlows(fd), 1)

	// A socket that has sent nothing has no flows.
	fd, _ = mk(unix.AF_INET, unix.SOCK_DGRAM, nil, nil)
	check("fresh", nil, d.forgetSocketFlows(fd), 0)

	// A flow of a past generation keeps its own: it is classified again
	// anyway, and its generation tells which policy its cached rule slot
	// is of (a later rule may hold the slot now).
	fd, port = mk(unix.AF_INET, unix.SOCK_DGRAM, &unix.SockaddrInet4{Addr: a4.As4()}, sockaddr(ap(b4, 9004)))
	var src, dst [4]uint32
	putAddrWords(&src, a4)
	putAddrWords(&dst, b4)
	k4 := hostqosHqFlowKey4{Family: famIPv4, Proto: 17, Sport: port, Dport: 9004, Saddr: src[0], Daddr: dst[0]}
	old := hostqosHqFlow{Gen: gen - 3, Slot: 5}
	if err := d.objs.HqFlows4.Put(&k4, &old); err != nil {
		t.Fatal(err)
	}
	if n := d.forgetSocketFlows(fd); n != 1 {
		t.Errorf("past generation: %d flows classified again, want 1", n)
	}
	var v hostqosHqFlow
	if err := d.objs.HqFlows4.Lookup(&k4, &v); err != nil {
		t.Fatal(err)
	}
	if v.Gen != gen-3 || v.Slot != 5 {
		t.Errorf("a flow of generation %d (now %d) forgotten: generation %d, slot %d; want it unchanged", gen-3, gen, v.Gen, v.Slot)
	}
}
