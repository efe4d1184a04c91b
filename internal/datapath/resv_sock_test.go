package datapath

import (
	"errors"
	"fmt"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hostqos/hostqos/internal/shaper"
	"github.com/hostqos/hostqos/internal/testutil"
	"golang.org/x/sys/unix"
)

// resvBed is a pair of namespaces with the datapath (and its socket hooks)
// loaded in A, the classifier on A's veth end and an HTB tree on it.
type resvBed struct {
	p           *testutil.Pair
	d           *Datapath
	dir, cgroot string
}

func newResvBed(t *testing.T) *resvBed {
	testutil.NeedRoot(t)
	cgroot := cgroupRoot(t)
	p := testutil.NewPair(t)
	dir := testutil.TempPinDir(t)
	b := &resvBed{p: p, dir: dir, cgroot: cgroot}
	p.A.MustDo(t, func() error {
		var err error
		if b.d, err = Open(Options{BPFFSDir: dir, CgroupPath: cgroot}); err != nil {
			return err
		}
		return attachAsDaemon(b.d, p.IndexA)
	})
	t.Cleanup(func() {
		// Unpin the cgroup links: they are attached to the host's root cgroup.
		b.d.Close()
		if err := Remove(dir); err != nil {
			t.Errorf("remove datapath: %v", err)
		}
	})
	return b
}

// shape gives A's veth end an HTB tree of linkRate bit/s with the rules'
// leaves.
func (b *resvBed) shape(t *testing.T, linkRate uint64, rules []shaper.RuleSpec) {
	t.Helper()
	plan, err := shaper.Build(shaper.LinkSpec{Ifindex: b.p.IndexA, Name: b.p.IfA, Rate: linkRate},
		[]shaper.ClassSpec{{Name: "default", Index: 0, Priority: 4, Default: true}}, rules)
	if err != nil {
		t.Fatal(err)
	}
	b.p.A.MustDo(t, func() error { return shaper.Apply(plan) })
}

// socket makes a socket in A.
func (b *resvBed) socket(t *testing.T, typ int) int {
	t.Helper()
	var fd int
	b.p.A.MustDo(t, func() error {
		var err error
		fd, err = unix.Socket(unix.AF_INET, typ|unix.SOCK_CLOEXEC, 0)
		return err
	})
	return fd
}

func sockaddr(ap netip.AddrPort) *unix.SockaddrInet4 {
	return &unix.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}
}

// udpSink counts the UDP payload bytes B receives on port.
func udpSink(t *testing.T, p *testutil.Pair, port uint16) (bytes *atomic.Int64, stop func()) {
	t.Helper()
	var fd int
	p.B.MustDo(t, func() error {
		var err error
		if fd, err = unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0); err != nil {
			return err
		}
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 8<<20)
		return unix.Bind(fd, sockaddr(netip.AddrPortFrom(testutil.PairB4.Addr(), port)))
	})
	_ = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Usec: 100000})
	bytes = new(atomic.Int64)
	var done atomic.Bool
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		buf := make([]byte, 65536)
		for !done.Load() {
			n, _, err := unix.Recvfrom(fd, buf, 0)
			if err == nil {
				bytes.Add(int64(n))
			}
		}
	}()
	return bytes, func() { done.Store(true); <-finished; unix.Close(fd) }
}

// TestGuaranteedShapingByFlowControl: a guaranteed reservation's sender
// going at 3× its rate through a blocking socket is held back in send()
// (its send buffer, sized by FlowControl, fills before the leaf's queue),
// the receiver gets the service rate R and the host drops nothing; a
// non-blocking sender gets EAGAIN instead.
func TestGuaranteedShapingByFlowControl(t *testing.T) {
	b := newResvBed(t)
	const (
		R       = 4_000_000 // bit/s, the leaf's rate and ceil (= r)
		payload = 1000
		frame   = payload + 8 + 20 + 14 // what HTB counts
		slot    = 7
	)
	sndbuf, queue := FlowControl(6000, 500, 2)
	b.shape(t, 100_000_000, []shaper.RuleSpec{{Slot: slot, Class: 0, MinBW: R, MaxBW: R, QueueLimit: queue}})
	res := Reservation{ID: 1, Service: ServiceGuaranteed, Rate: R / 8, Bucket: 6000, MinUnit: 500, MaxUnit: 1500,
		ClassID: shaper.RuleClassID(slot), DSCP: 46, DemoteDSCP: -1, MaxSessions: 2, SendBuffer: sndbuf}
	pol := Policy{Rules: []Rule{{Slot: slot, Proto: 17, Remote: netip.PrefixFrom(testutil.PairB4.Addr(), 32), RPortFrom: 9000, RPortTo: 9001,
		DSCPIn: -1, DSCP: 46, ClassID: shaper.RuleClassID(slot), Reservation: 1}}, Reservations: []Reservation{res}}
	if err := b.d.Apply(pol); err != nil {
		t.Fatal(err)
	}

	for _, blocking := range []bool{true, false} {
		port := uint16(9000)
		name := "blocking"
		if !blocking {
			port, name = 9001, "non-blocking"
		}
		testutil.Measured(t, name, 3, func(int) (bool, string) {
			got, stop := udpSink(t, b.p, port)
			fd := b.socket(t, unix.SOCK_DGRAM)
			if err := unix.Connect(fd, sockaddr(netip.AddrPortFrom(testutil.PairB4.Addr(), port))); err != nil {
				t.Fatalf("%s: connect: %v", name, err)
			}
			if v, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF); err != nil || v != int(2*sndbuf) {
				t.Errorf("%s: SO_SNDBUF after connect = %d (%v), want %d (2 × %d, set at connect)", name, v, err, 2*sndbuf, sndbuf)
			}
			if !blocking {
				if err := unix.SetNonblock(fd, true); err != nil {
					t.Fatal(err)
				}
			}
			// The app tries 3× R for 3 s (the non-blocking one, held to
			// nothing but EAGAIN, for 1 s).
			dur := 3 * time.Second
			if !blocking {
				dur = time.Second
			}
			gap := time.Second * payload * 8 / (3 * R)
			msg := make([]byte, payload)
			var sent, eagain int
			var inSend time.Duration
			start := time.Now()
			next := start
			for time.Since(start) < dur {
				t0 := time.Now()
				_, err := unix.Write(fd, msg)
				inSend += time.Since(t0)
				switch {
				case err == nil:
					sent++
				case errors.Is(err, unix.EAGAIN):
					eagain++
				default:
					t.Fatalf("%s: send: %v", name, err)
				}
				next = next.Add(gap)
				if d := time.Until(next); d > 0 {
					time.Sleep(d)
				}
			}
			elapsed := time.Since(start)
			unix.Close(fd)
			time.Sleep(300 * time.Millisecond) // the queue drains
			stop()

			// Everything sent arrived: nothing dropped on the way.
			if want := int64(sent * payload); got.Load() != want {
				t.Errorf("%s: receiver got %d bytes, the sender sent %d", name, got.Load(), want)
			}
			// The receiver got R (in frames as HTB counts them), give or
			// take the leaf's initial burst and the time the queue took to drain.
			rate := float64(sent) * frame * 8 / elapsed.Seconds()
			res := fmt.Sprintf("%d sent, %d EAGAIN, %v in send() of %v, goodput %.3f × R", sent, eagain, inSend.Round(time.Millisecond), elapsed.Round(time.Millisecond), rate/R)
			t.Logf("%s: %s", name, res)
			if !blocking {
				// A non-blocking sender that skips what EAGAIN refused sends
				// less: only the blocking one is held to the rate.
				return eagain > 0, res + "; want EAGAIN"
			}
			return rate/R >= 0.98 && rate/R <= 1.01 && inSend >= dur/3, res + "; want 0.98–1.01 × R and at least a third of the time in send()"
		})
	}

	var drops uint64
	b.p.A.MustDo(t, func() error {
		st, err := shaper.Stats(b.p.IndexA)
		for _, c := range st {
			drops += c.Drops
		}
		return err
	})
	ds, err := b.d.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if drops != 0 || ds.Drops != 0 {
		t.Errorf("host drops: qdisc %d, datapath %d; want none", drops, ds.Drops)
	}
	c, err := b.d.ReservationCounters()
	if err != nil {
		t.Fatal(err)
	}
	if c[1].ConformantPackets == 0 || c[1].SessionsTotal < 2 || c[1].Sessions != 0 {
		t.Errorf("reservation counters %+v: want conformant packets, a session per socket, none now", c[1])
	}
}

// TestSessionAdmission: a reservation admitting 3 sessions refuses the
// fourth TCP connect() with EPERM (recorded as a refusal) until one of the
// three closes, also after a restart adopted the datapath; an unconnected
// UDP socket over the limit gets EPERM from sendmsg(); a socket opened
// before its reservation is bound when the policy is applied; closing a
// socket unbinds it.
func TestSessionAdmission(t *testing.T) {
	b := newResvBed(t)
	b4 := testutil.PairB4.Addr()
	var lfd int
	b.p.B.MustDo(t, func() error {
		var err error
		if lfd, err = unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0); err != nil {
			return err
		}
		if err := unix.Bind(lfd, sockaddr(netip.AddrPortFrom(b4, 9100))); err != nil {
			return err
		}
		return unix.Listen(lfd, 16)
	})
	defer unix.Close(lfd)

	// Opened and connected before any reservation exists.
	early := b.socket(t, unix.SOCK_DGRAM)
	defer unix.Close(early)
	if err := unix.Connect(early, sockaddr(netip.AddrPortFrom(b4, 9300))); err != nil {
		t.Fatal(err)
	}

	pol := Policy{
		Rules: []Rule{
			{Slot: 1, Proto: 6, RPortFrom: 9100, DSCPIn: -1, DSCP: -1, Reservation: 1},
			{Slot: 2, Proto: 17, RPortFrom: 9200, DSCPIn: -1, DSCP: -1, Reservation: 2},
			{Slot: 3, Proto: 17, RPortFrom: 9300, DSCPIn: -1, DSCP: 34, Reservation: 3},
		},
		Reservations: []Reservation{
			{ID: 1, MaxSessions: 3, SessionClassID: 0x48514100},
			{ID: 2, MaxSessions: 1},
			{ID: 3, Service: ServiceControlledLoad, Rate: 125000, Bucket: 3000, MinUnit: 64, MaxUnit: 1500, DSCP: 34, DemoteDSCP: 0},
		},
	}
	// Applied in A: the early socket is bound at once, before it sends.
	b.p.A.MustDo(t, func() error {
		if err := b.d.Apply(pol); err != nil {
			return err
		}
		return b.d.BindOpenSockets()
	})
	if bs, _ := b.d.Bindings(); countBound(bs, 3) != 1 {
		t.Errorf("socket open before its reservation not bound when the policy was applied: %+v", bs)
	}

	dial := func() (int, error) {
		fd := b.socket(t, unix.SOCK_STREAM)
		err := unix.Connect(fd, sockaddr(netip.AddrPortFrom(b4, 9100)))
		if err != nil {
			unix.Close(fd)
			return -1, err
		}
		return fd, nil
	}
	var conns []int
	for i := 0; i < 3; i++ {
		fd, err := dial()
		if err != nil {
			t.Fatalf("connect %d of 3: %v", i+1, err)
		}
		conns = append(conns, fd)
	}
	if fd, err := dial(); !errors.Is(err, unix.EPERM) {
		if err == nil {
			unix.Close(fd)
		}
		t.Fatalf("fourth connect: %v, want EPERM", err)
	}
	refs, seq, err := b.d.SessionRefusals(0)
	if err != nil {
		t.Fatal(err)
	}
	if len(refs) != 1 || refs[0].Kind != RefusedConnect || refs[0].Reservation != 1 || refs[0].Limit != 3 ||
		refs[0].Key.Remote != netip.AddrPortFrom(b4, 9100) || refs[0].Key.Proto != 6 {
		t.Errorf("refusals %+v, want the fourth connect to %s", refs, netip.AddrPortFrom(b4, 9100))
	}
	bs, err := b.d.Bindings()
	if err != nil {
		t.Fatal(err)
	}
	if n := countBound(bs, 1); n != 3 {
		t.Errorf("%d sockets bound to reservation 1, want 3: %+v", n, bs)
	}
	// Each session holds a per-session leaf of its own.
	if got := sessionsOf(t, bs, conns); got[0] == 0 || got[0] == got[1] || got[1] == got[2] || got[0] == got[2] {
		t.Errorf("per-session leaves of the three sessions: %v, want three different ones", got)
	}
	leafOfFirst := sessionsOf(t, bs, conns[:1])[0]
	// The daemon dies (its datapath closes without removing anything) and
	// a new one adopts the pinned state: the sessions are still counted
	// and the limit still holds.
	b.d.Close()
	b.p.A.MustDo(t, func() error {
		var err error
		b.d, err = Open(Options{BPFFSDir: b.dir, CgroupPath: b.cgroot})
		return err
	})
	if fd, err := dial(); !errors.Is(err, unix.EPERM) {
		if err == nil {
			unix.Close(fd)
		}
		t.Errorf("fourth connect after the datapath was adopted: %v, want EPERM", err)
	}
	if refs, _, _ := b.d.SessionRefusals(seq); len(refs) != 1 {
		t.Errorf("refusals after adoption: %+v, want the new one", refs)
	} else {
		seq = refs[0].Seq
	}

	// Closing one lets the next in.
	unix.Close(conns[0])
	fd, err := dial()
	if err != nil {
		t.Fatalf("connect after a close: %v", err)
	}
	conns = append(conns[1:], fd)
	if refs, _, _ := b.d.SessionRefusals(seq); len(refs) != 0 {
		t.Errorf("new refusals %+v", refs)
	}
	// ... and takes the leaf the closed session gave back.
	bs, _ = b.d.Bindings()
	if got := sessionsOf(t, bs, conns[2:]); got[0] != leafOfFirst {
		t.Errorf("the session after a close holds leaf %d, want the freed %d", got[0], leafOfFirst)
	}

	// Unconnected UDP: the second socket's sendto is refused.
	u1, u2 := b.socket(t, unix.SOCK_DGRAM), b.socket(t, unix.SOCK_DGRAM)
	to := sockaddr(netip.AddrPortFrom(b4, 9200))
	if err := unix.Sendto(u1, []byte("x"), 0, to); err != nil {
		t.Fatalf("first unconnected sendto: %v", err)
	}
	if err := unix.Sendto(u1, []byte("x"), 0, to); err != nil {
		t.Fatalf("first socket's second sendto: %v", err)
	}
	if err := unix.Sendto(u2, []byte("x"), 0, to); !errors.Is(err, unix.EPERM) {
		t.Errorf("second socket's sendto: %v, want EPERM", err)
	}
	unix.Close(u1)
	if err := unix.Sendto(u2, []byte("x"), 0, to); err != nil {
		t.Errorf("sendto after the first socket closed: %v", err)
	}
	unix.Close(u2)

	// The early socket's packets are under its reservation; it stays bound once.
	if _, err := unix.Write(early, []byte("hello")); err != nil {
		t.Fatal(err)
	}
	bs, _ = b.d.Bindings()
	if n := countBound(bs, 3); n != 1 {
		t.Errorf("socket opened before its reservation: %d bindings after it sent, want 1: %+v", n, bs)
	}
	for _, c := range conns {
		unix.Close(c)
	}
	bs, _ = b.d.Bindings()
	if n := countBound(bs, 1); n != 0 {
		t.Errorf("%d sockets still bound to reservation 1 after every one closed", n)
	}
	c, err := b.d.ReservationCounters()
	if err != nil {
		t.Fatal(err)
	}
	if c[1].Sessions != 0 || c[1].SessionsTotal != 4 || c[1].RefusedConnects != 2 {
		t.Errorf("reservation 1: %+v, want 0 sessions now, 4 in all, 2 refused connects", c[1])
	}
	if c[2].Sessions != 0 || c[2].RefusedSends != 1 {
		t.Errorf("reservation 2: %+v, want 0 sessions now, 1 refused send", c[2])
	}
	if c[3].Sessions != 1 || c[3].ConformantPackets != 1 {
		t.Errorf("reservation 3: %+v, want the early socket's session and its packet", c[3])
	}
}

// sessionsOf is the per-session leaf (Binding.Session) of each socket.
func sessionsOf(t *testing.T, bs []Binding, fds []int) []int {
	t.Helper()
	out := make([]int, len(fds))
	for i, fd := range fds {
		c, err := unix.GetsockoptUint64(fd, unix.SOL_SOCKET, unix.SO_COOKIE)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range bs {
			if b.Cookie == c {
				out[i] = b.Session
			}
		}
	}
	return out
}

func countBound(bs []Binding, id uint16) int {
	n := 0
	for _, b := range bs {
		if b.Reservation == id {
			n++
		}
	}
	return n
}

// paceUDP sends size-byte datagrams from a socket connected to port of B
// at rate bit/s (of UDP payload) for dur, batch datagrams at a time, and
// returns how many it sent.
func paceUDP(t *testing.T, b *resvBed, port uint16, size int, rate float64, batch int, dur time.Duration) int {
	fd := b.socket(t, unix.SOCK_DGRAM)
	defer unix.Close(fd)
	if err := unix.Connect(fd, sockaddr(netip.AddrPortFrom(testutil.PairB4.Addr(), port))); err != nil {
		t.Errorf("connect to port %d: %v", port, err)
		return 0
	}
	msg := make([]byte, size)
	gap := time.Duration(float64(time.Second) * float64(size*8*batch) / rate)
	sent := 0
	start := time.Now()
	for next := start; time.Since(start) < dur; {
		for i := 0; i < batch; i++ {
			if _, err := unix.Write(fd, msg); err == nil {
				sent++
			}
		}
		next = next.Add(gap)
		if d := time.Until(next); d > 0 {
			time.Sleep(d)
		}
	}
	return sent
}

// TestControlledLoad: a controlled-load sender at 3× r on an idle link
// loses nothing, its conformant part (exactly what the policer counted, at
// most r × T + b) arrives with the reservation's DSCP and the excess with
// best effort's;
// under a best-effort flood of the link its conformant part still gets
// through at r or more.
func TestControlledLoad(t *testing.T) {
	b := newResvBed(t)
	const (
		r       = 2_000_000 // bit/s of IP packets
		bucket  = 3000
		payload = 1000
		ip      = payload + 28
		slot    = 9
		dscpRes = 34
	)
	b.shape(t, 20_000_000, []shaper.RuleSpec{{Slot: slot, Class: 0, MinBW: r * (ip + 14) / ip}})
	rx := testutil.NewReceiver(t, b.p.B, b.p.IfB)
	res := Reservation{ID: 4, Service: ServiceControlledLoad, Rate: r / 8, Bucket: bucket, MinUnit: 64, MaxUnit: 1500,
		ClassID: shaper.RuleClassID(slot), DSCP: dscpRes, DemoteClassID: shaper.ClassLeafID(0), DemoteDSCP: 0}
	if err := b.d.Apply(Policy{Rules: []Rule{{Slot: slot, Proto: 17, RPortFrom: 9500, RPortTo: 9503, DSCPIn: -1, DSCP: dscpRes,
		ClassID: shaper.RuleClassID(slot), Reservation: 4}}, Reservations: []Reservation{res}}); err != nil {
		t.Fatal(err)
	}
	const dur = 2 * time.Second

	// Idle link.
	got, stop := udpSink(t, b.p, 9500)
	start := time.Now()
	sent := paceUDP(t, b, 9500, payload, 3*r*payload/ip, 1, dur)
	active := time.Since(start)
	time.Sleep(300 * time.Millisecond)
	stop()
	if got.Load() != int64(sent*payload) {
		t.Errorf("idle link: receiver got %d bytes of %d sent", got.Load(), sent*payload)
	}
	counts, total := rx.DSCPCounts(17, 9500)
	want := (float64(r)/8*active.Seconds() + bucket) / ip // conformant packets the Tspec allows
	if total != sent || counts[dscpRes]+counts[0] != total {
		t.Errorf("idle link: DSCPs %v of %d packets (sent %d), want only %d (conformant) and 0 (excess)", counts, total, sent, dscpRes)
	}
	// Exactly what the policer found conformant carries the reservation's
	// DSCP, never more than the Tspec allows.
	pc, err := b.d.ReservationCounters()
	if err != nil {
		t.Fatal(err)
	}
	if uint64(counts[dscpRes]) != pc[4].ConformantPackets || uint64(counts[0]) != pc[4].NonConformantPackets {
		t.Errorf("idle link: DSCPs %v; the policer counted %d conformant, %d not", counts, pc[4].ConformantPackets, pc[4].NonConformantPackets)
	}
	if c := float64(counts[dscpRes]); c > 1.02*want+2 {
		t.Errorf("idle link: %d packets with the reservation's DSCP, more than the %.0f the Tspec allows (r × %v + b)", counts[dscpRes], want, active.Round(time.Millisecond))
	}
	t.Logf("idle link: %d sent, DSCP %v, %.0f conformant expected", sent, counts, want)

	// A best-effort flood of the link (40 Mbit/s offered into 20).
	testutil.Measured(t, "under a best-effort flood", 3, func(attempt int) (bool, string) {
		port := uint16(9500 + attempt)
		done := make(chan int)
		go func() { done <- paceUDP(t, b, 9600, payload, 40e6, 10, dur+time.Second) }()
		time.Sleep(500 * time.Millisecond)
		start := time.Now()
		sent := paceUDP(t, b, port, payload, 3*r*payload/ip, 1, dur)
		active := time.Since(start)
		<-done
		time.Sleep(300 * time.Millisecond)
		counts, _ = rx.DSCPCounts(17, port)
		rate := float64(counts[dscpRes]*ip*8) / active.Seconds()
		msg := fmt.Sprintf("%d sent, DSCP %v, conformant packets arrived at %.3f × r", sent, counts, rate/r)
		return rate >= 0.98*r, msg + "; want ≥ 0.98 × r"
	})
}
