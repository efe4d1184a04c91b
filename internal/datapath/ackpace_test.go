package datapath

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/hostqos/hostqos/internal/shaper"
	"github.com/hostqos/hostqos/internal/testutil"
	"golang.org/x/sys/unix"
)

// TestAckPacing: on a veth (a round trip of tens of µs, where even a
// two-segment window is hundreds of Mbit/s) a TCP download of a rule with a
// download limit and an ACK leaf has its pure ACKs, and nothing else, sent
// to the leaf, which holds the download far below what the window alone
// lets through; a rule with the same limit but no leaf (ack class 0)
// leaves the leaf alone, and so does a flow of no limited rule.
func TestAckPacing(t *testing.T) {
	b := newResvBed(t)
	const (
		slot  = 5
		other = 6
		limit = 4_000_000 // bit/s of payload
	)
	plan := shaper.PassThrough(shaper.LinkSpec{Ifindex: b.p.IndexA, Name: b.p.IfA})
	if err := plan.AddAckLeaves([]shaper.AckSpec{{Slot: slot, Rate: shaper.AckRate(limit)}}); err != nil {
		t.Fatal(err)
	}
	b.p.A.MustDo(t, func() error { return shaper.Apply(plan) })
	srv := netip.PrefixFrom(testutil.PairB4.Addr(), 32)
	pol := Policy{Rules: []Rule{
		{Slot: slot, Proto: unix.IPPROTO_TCP, Remote: srv, RPortFrom: 9100, RPortTo: 9100, DSCPIn: -1, DSCP: -1,
			MaxBWIn: limit, AckClassID: shaper.AckClassID(slot)},
		{Slot: other, Proto: unix.IPPROTO_TCP, Remote: srv, RPortFrom: 9101, RPortTo: 9101, DSCPIn: -1, DSCP: -1,
			MaxBWIn: limit},
	}}
	if err := b.d.Apply(pol); err != nil {
		t.Fatal(err)
	}
	leaf := func() shaper.ClassStats {
		t.Helper()
		var st []shaper.ClassStats
		b.p.A.MustDo(t, func() (err error) { st, err = shaper.Stats(b.p.IndexA); return err })
		for _, c := range st {
			if c.Minor == shaper.AckBase+slot {
				return c
			}
		}
		t.Fatal("no ACK leaf on the link")
		return shaper.ClassStats{}
	}

	paced := download(t, b.p, 9100, time.Second)
	got := leaf()
	t.Logf("paced: %.2f Mbit/s; ACK leaf sent %d packets, %d bytes", paced/1e6, got.Packets, got.Bytes)
	if got.Packets < 20 || got.Bytes > got.Packets*100 {
		t.Errorf("ACK leaf sent %d packets of %d bytes in all: want the download's pure ACKs (≤ 100 bytes each) there", got.Packets, got.Bytes)
	}
	// Well below what the window alone gives here (hundreds of Mbit/s),
	// with room for a noisy machine.
	if paced > 3*limit {
		t.Errorf("download with paced ACKs at %.1f Mbit/s, want about %d (far below the window floor)", paced/1e6, limit/1_000_000)
	}

	time.Sleep(300 * time.Millisecond) // the paced connection's last ACKs
	for _, port := range []uint16{9101, 9102} {
		before := leaf()
		rate := download(t, b.p, port, 300*time.Millisecond)
		if after := leaf(); after.Packets != before.Packets {
			t.Errorf("port %d (%.0f Mbit/s): %d packets went to another rule's ACK leaf", port, rate/1e6, after.Packets-before.Packets)
		}
	}
}

// download connects from A to a bulk sender in B on port and returns the
// payload rate A read (bit/s) over dur.
func download(t *testing.T, p *testutil.Pair, port uint16, dur time.Duration) float64 {
	t.Helper()
	ap := netip.AddrPortFrom(testutil.PairB4.Addr(), port)
	var lfd int
	p.B.MustDo(t, func() (err error) {
		if lfd, err = unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0); err != nil {
			return err
		}
		_ = unix.SetsockoptInt(lfd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1)
		if err := unix.Bind(lfd, sockaddr(ap)); err != nil {
			return err
		}
		return unix.Listen(lfd, 1)
	})
	defer unix.Close(lfd)
	go func() {
		fd, _, err := unix.Accept(lfd)
		for err == unix.EINTR { // the Go runtime's preemption signal
			fd, _, err = unix.Accept(lfd)
		}
		if err != nil {
			return
		}
		defer unix.Close(fd)
		_ = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_SNDTIMEO, &unix.Timeval{Sec: 1})
		buf := make([]byte, 64<<10)
		for {
			if _, err := unix.Write(fd, buf); err != nil && err != unix.EINTR {
				return
			}
		}
	}()
	fd := b4Socket(t, p)
	defer unix.Close(fd)
	err := unix.Connect(fd, sockaddr(ap))
	for err == unix.EINTR || err == unix.EALREADY { // interrupted: the handshake goes on
		time.Sleep(time.Millisecond)
		err = unix.Connect(fd, sockaddr(ap))
	}
	if err != nil && err != unix.EISCONN {
		t.Fatalf("connect to port %d: %v", port, err)
	}
	_ = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Usec: 200000})
	buf := make([]byte, 256<<10)
	var n int
	start := time.Now()
	for time.Since(start) < dur {
		m, err := unix.Read(fd, buf)
		if err != nil && err != unix.EAGAIN && err != unix.EINTR {
			t.Fatal(fmt.Errorf("read port %d: %w", port, err))
		}
		n += max(m, 0)
	}
	return float64(n) * 8 / time.Since(start).Seconds()
}

// b4Socket makes a TCP socket in A.
func b4Socket(t *testing.T, p *testutil.Pair) int {
	t.Helper()
	var fd int
	p.A.MustDo(t, func() (err error) {
		fd, err = unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		return err
	})
	return fd
}
