package integration

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hostqos/hostqos/internal/datapath"
	"github.com/hostqos/hostqos/internal/shaper"
	"github.com/hostqos/hostqos/internal/testutil"
)

// resvSink counts the UDP payload bytes the server receives on port until
// stop is called.
func (e *env) resvSink(port uint16) (got *atomic.Int64, stop func()) {
	e.t.Helper()
	var fd int
	resvDo(e.t, e.server.Do, func() error {
		var err error
		if fd, err = unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0); err != nil {
			return err
		}
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 8<<20)
		return unix.Bind(fd, &unix.SockaddrInet4{Port: int(port), Addr: serverV4.Addr().As4()})
	})
	_ = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Usec: 100000})
	got = new(atomic.Int64)
	var done atomic.Bool
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		buf := make([]byte, 65536)
		for !done.Load() {
			if n, _, err := unix.Recvfrom(fd, buf, 0); err == nil {
				got.Add(int64(n))
			}
		}
	}()
	return got, func() { done.Store(true); <-finished; unix.Close(fd) }
}

// clientUDP is a UDP socket of the client connected to port of the server.
func (e *env) clientUDP(port uint16) int {
	e.t.Helper()
	var fd int
	resvDo(e.t, e.client.Do, func() error {
		var err error
		if fd, err = unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0); err != nil {
			return err
		}
		return unix.Connect(fd, &unix.SockaddrInet4{Port: int(port), Addr: serverV4.Addr().As4()})
	})
	return fd
}

// sendPaced writes size-byte datagrams on fd at rate bit/s of payload for
// dur and reports what happened: sent, refused with EAGAIN, and the time
// spent inside send().
func sendPaced(fd, size int, rate float64, dur time.Duration) (sent, eagain int, inSend, took time.Duration, err error) {
	msg := make([]byte, size)
	gap := time.Duration(float64(time.Second) * float64(size*8) / rate)
	start := time.Now()
	for next := start; time.Since(start) < dur; {
		t0 := time.Now()
		_, werr := unix.Write(fd, msg)
		inSend += time.Since(t0)
		switch {
		case werr == nil:
			sent++
		case errors.Is(werr, unix.EAGAIN):
			eagain++
		default:
			return sent, eagain, inSend, time.Since(start), werr
		}
		next = next.Add(gap)
		if d := time.Until(next); d > 0 {
			time.Sleep(d)
		}
	}
	return sent, eagain, inSend, time.Since(start), nil
}

// hostDrops sums the drops of every HTB class on the client's link.
func (e *env) hostDrops() uint64 {
	e.t.Helper()
	var drops uint64
	resvDo(e.t, e.client.Do, func() error {
		l, err := e.client.Handle().LinkByName(e.iface())
		if err != nil {
			return err
		}
		st, err := shaper.Stats(l.Attrs().Index)
		for _, c := range st {
			drops += c.Drops
		}
		return err
	})
	return drops
}

// TestGuaranteedReservationFlowControl: through the real daemon, an app
// sending UDP at 3× the rate of its guaranteed reservation through a
// blocking socket is held in send() — its socket got the send buffer of
// the reservation at connect — and the receiver gets R (0.98–1.01) with
// nothing dropped on the host; through a non-blocking socket the app gets
// EAGAIN and again nothing is dropped.
func TestGuaranteedReservationFlowControl(t *testing.T) {
	e := newEnv(t)
	e.writeConfig(fmt.Sprintf("[[link]]\nname = %q\negress_rate = \"100mbit\"\n", e.iface()))
	e.startDaemon()
	const (
		R       = 4_000_000
		payload = 1000
		// The reservation is shaped to its Tspec, whose r counts IP
		// datagrams (RFC 2210): the leaf's frame rate is scaled so that
		// IP bytes leave at r.
		ipLen = payload + 8 + 20
		dur   = 3 * time.Second
	)
	e.hostqos("resv", "add", "gs", "--service", "guaranteed", "--proto", "udp", "--rport", "7400-7409",
		"--rate", "4mbit", "--burst", "6000", "--min-unit", "500", "--max-sessions", "2")
	sndbuf, _ := datapath.FlowControl(6000, 500, 2)
	port := uint16(7400)
	for _, blocking := range []bool{true, false} {
		name := map[bool]string{true: "blocking", false: "non-blocking"}[blocking]
		measured(t, name, func(int) (bool, string) {
			port++
			got, stop := e.resvSink(port)
			fd := e.clientUDP(port)
			if v, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF); err != nil || v != int(2*sndbuf) {
				t.Errorf("%s: SO_SNDBUF after connect %d (%v), want %d (the reservation's %d, doubled by the kernel)", name, v, err, 2*sndbuf, sndbuf)
			}
			if !blocking {
				if err := unix.SetNonblock(fd, true); err != nil {
					t.Fatal(err)
				}
			}
			// The non-blocking sender is held to nothing but EAGAIN: a
			// second shows it.
			d := dur
			if !blocking {
				d = time.Second
			}
			sent, eagain, inSend, took, err := sendPaced(fd, payload, 3*R*payload/ipLen, d)
			unix.Close(fd)
			if err != nil {
				t.Fatalf("%s: send: %v", name, err)
			}
			time.Sleep(300 * time.Millisecond)
			stop()
			if want := int64(sent * payload); got.Load() != want {
				t.Errorf("%s: the receiver got %d bytes of %d sent", name, got.Load(), want)
			}
			rate := float64(sent*ipLen*8) / took.Seconds()
			msg := fmt.Sprintf("%d sent, %d EAGAIN, %v in send() of %v, %.3f × R", sent, eagain, inSend.Round(time.Millisecond), took.Round(time.Millisecond), rate/R)
			t.Logf("%s: %s", name, msg)
			if !blocking {
				return eagain > 0, msg + "; want EAGAIN"
			}
			return rate/R >= 0.98 && rate/R <= 1.01 && inSend >= dur/3, msg + "; want 0.98–1.01 × R, a third of the time or more in send()"
		})
	}
	if d := e.hostDrops(); d != 0 {
		t.Errorf("the link's HTB classes dropped %d packets, want none", d)
	}
}

// TestControlledLoadReservation: through the real daemon, a
// controlled-load app at 3× r on an idle link loses nothing; its
// conformant part (what the policer counted, at most r × T + b) arrives
// with the reservation's DSCP and the excess with best effort's; under a
// best-effort flood of the link the conformant part still arrives at
// 0.98 r or more.
func TestControlledLoadReservation(t *testing.T) {
	e := newEnv(t)
	e.writeConfig(fmt.Sprintf("[[link]]\nname = %q\negress_rate = \"20mbit\"\n", e.iface()))
	e.startDaemon()
	const (
		r       = 2_000_000 // bit/s of IP packets (RFC 2210 counts IP bytes)
		bucket  = 3000
		payload = 1000
		ip      = payload + 28
		dscp    = 34
		dur     = 3 * time.Second
	)
	e.hostqos("resv", "add", "cl", "--service", "controlled-load", "--proto", "udp", "--rport", "7500-7509",
		"--rate", "2mbit", "--burst", fmt.Sprint(bucket), "--dscp", fmt.Sprint(dscp))
	rx := testutil.NewReceiver(t, e.server, e.server.Iface("client"))

	// Idle link.
	got, stop := e.resvSink(7500)
	fd := e.clientUDP(7500)
	sent, _, _, took, err := sendPaced(fd, payload, 3*r*payload/ip, dur)
	unix.Close(fd)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	stop()
	if got.Load() != int64(sent*payload) {
		t.Errorf("idle link: the receiver got %d bytes of %d sent", got.Load(), sent*payload)
	}
	counts, total := rx.DSCPCounts(17, 7500)
	want := (r/8*took.Seconds() + bucket) / ip
	excess := total - counts[dscp]
	if total != sent || counts[dscp] == 0 || excess == 0 || len(counts) != 2 {
		t.Errorf("idle link: DSCPs %v of %d packets (%d sent): want the reservation's %d and one best-effort DSCP", counts, total, sent, dscp)
	}
	// Exactly the packets the policer found conformant carry the
	// reservation's DSCP, never more than the Tspec allows.
	var shown struct {
		Counters struct {
			Conformant    uint64 `json:"conformant_packets"`
			NonConformant uint64 `json:"nonconformant_packets"`
		} `json:"counters"`
	}
	e.hostqosJSON(&shown, "resv", "show", "cl", "-o", "json")
	if uint64(counts[dscp]) != shown.Counters.Conformant || uint64(excess) != shown.Counters.NonConformant {
		t.Errorf("idle link: %d packets with the reservation's DSCP and %d without; the policer counted %d conformant and %d not",
			counts[dscp], excess, shown.Counters.Conformant, shown.Counters.NonConformant)
	}
	if c := float64(counts[dscp]); c > 1.02*want+2 {
		t.Errorf("idle link: %d packets with the reservation's DSCP, more than the %.0f the Tspec allows (r × %v + b)", counts[dscp], want, took.Round(time.Millisecond))
	}
	t.Logf("idle link: %d sent, DSCPs %v, %.0f conformant expected", sent, counts, want)

	// A best-effort flood: 40 Mbit/s offered into the 20 Mbit/s link.
	measured(t, "under a best-effort flood", func(n int) (bool, string) {
		port := uint16(7500 + n)
		_, stopRes := e.resvSink(port)
		defer stopRes()
		_, stopFlood := e.resvSink(7600)
		defer stopFlood()
		flood := e.clientUDP(7600)
		done := make(chan struct{})
		go func() {
			defer close(done)
			msg := make([]byte, payload)
			start := time.Now()
			for next := start; time.Since(start) < dur+time.Second; {
				for i := 0; i < 10; i++ {
					_, _ = unix.Write(flood, msg)
				}
				next = next.Add(2 * time.Millisecond) // 10 × 8000 bits / 2 ms = 40 Mbit/s
				if d := time.Until(next); d > 0 {
					time.Sleep(d)
				}
			}
		}()
		time.Sleep(500 * time.Millisecond)
		fd := e.clientUDP(port)
		sent, _, _, took, err := sendPaced(fd, payload, 3*r*payload/ip, dur)
		unix.Close(fd)
		<-done
		unix.Close(flood)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(300 * time.Millisecond)
		counts, _ := rx.DSCPCounts(17, port)
		rate := float64(counts[dscp]*ip*8) / took.Seconds()
		msg := fmt.Sprintf("%d sent, DSCPs %v: conformant %.3f × r", sent, counts, rate/r)
		t.Log(msg)
		return rate >= 0.98*r, msg + "; want ≥ 0.98 × r"
	})
}

// resvDo runs fn with do (a namespace's Do) and fails the test on error.
func resvDo(t *testing.T, do func(func() error) error, fn func() error) {
	t.Helper()
	if err := do(fn); err != nil {
		t.Fatal(err)
	}
}
