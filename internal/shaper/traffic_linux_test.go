package shaper

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hostqos/hostqos/internal/testutil"
	"golang.org/x/sys/unix"
)

// Rate accuracy with real traffic: a sender namespace and a receiver
// namespace joined by a veth; our HTB on the sender's end; the sender's
// socket carries SO_PRIORITY = the rule leaf's classid (standing in for the
// BPF datapath). HTB charges every packet with its L2 frame length
// (skb->len: Ethernet header + IP packet; for GSO packets, the frames they
// become), so the configured rate is compared with frame bytes per second.
//
// HQSH_TRAFFIC_RATES (comma-separated bits/s, e.g. "1000000,100000000")
// adds rates to the default 10 Mbit/s for measurement runs.
//
// HTB does not segment GSO packets: it releases a 64 KiB TCP TSO packet at
// once and then waits until the debt is repaid. Across a veth the RTT is a
// few microseconds, so TCP builds full 64 KiB TSO packets (tcp_tso_autosize
// adds gso_max_size >> (min_rtt >> tcp_tso_rtt_log)); at 1 Mbit/s that is a
// burst every half second, and a goodput window of a few seconds sees whole
// bursts or none. Long-run rates stay exact. HQSH_GSO_MAX=<bytes> caps the
// sender veth's gso_max_size to measure low rates without that lumpiness.

// The sender's and the receiver's addresses.
var (
	senderAddr   = testutil.PairA4.Addr().String()
	receiverAddr = testutil.PairB4.Addr().String()
)

const (
	mtu        = 1500
	frameLen   = mtu + 14 // what HTB counts for a full-size packet
	udpPayload = mtu - 20 - 8
	testSlot   = 5
)

// newPair makes the sender namespace (p.A, whose end of the veth is a0)
// and the receiver namespace (p.B).
func newPair(t *testing.T) *testutil.Pair {
	t.Helper()
	p := testutil.NewPairNamed(t, "snd", "a0")
	// HQSH_GSO_MAX caps a0's gso_max_size (measurement knob, see the
	// package comment of the traffic tests).
	if v := os.Getenv("HQSH_GSO_MAX"); v != "" {
		sh(t, "ip", "-n", p.A.NetnsName, "link", "set", p.IfA, "gso_max_size", v)
	}
	return p
}

// shapeRule applies a plan on a0 with a leaf for rule testSlot capped at ceil.
func shapeRule(t *testing.T, p *testutil.Pair, ceil uint64) {
	t.Helper()
	linkRate := max(uint64(100*mbit), 2*ceil)
	plan, err := Build(LinkSpec{Ifindex: p.IndexA, Name: p.IfA, Rate: linkRate},
		[]ClassSpec{
			{Name: "default", Index: 2, Priority: 4, Default: true},
			{Name: "bulk", Index: 3, Priority: 6},
		},
		[]RuleSpec{{Slot: testSlot, Class: 3, MaxBW: ceil}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := applyIn(t, p.A, plan); err != nil {
		t.Fatal(err)
	}
}

func testRates(t *testing.T) []uint64 {
	rates := []uint64{10 * mbit}
	for _, s := range strings.Split(os.Getenv("HQSH_TRAFFIC_RATES"), ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		r, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("HQSH_TRAFFIC_RATES: %v", err)
		}
		rates = append(rates, r)
	}
	return rates
}

func setPriority(prio uint32) func(network, address string, c syscall.RawConn) error {
	return func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_PRIORITY, int(prio))
		})
		return errors.Join(err, serr)
	}
}

// sample is the cumulative byte count seen by a receiver at a time.
type sample struct {
	at    time.Time
	bytes uint64
}

// rateBetween returns bits/s over the samples in [from, to]: the
// least-squares slope of cumulative bytes against time, which averages out
// the steps that GSO bursts put in a TCP receiver's byte count.
func rateBetween(s []sample, from, to time.Time) (float64, error) {
	var pts []sample
	for _, x := range s {
		if !x.at.Before(from) && !x.at.After(to) {
			pts = append(pts, x)
		}
	}
	if len(pts) < 3 {
		return 0, fmt.Errorf("too few samples (%d of %d) in the window", len(pts), len(s))
	}
	if d := pts[len(pts)-1].at.Sub(pts[0].at).Seconds(); d < 0.5 {
		return 0, fmt.Errorf("window of %.3fs too short", d)
	}
	t0, b0 := pts[0].at, float64(pts[0].bytes)
	var n, sx, sy, sxx, sxy float64
	for _, x := range pts {
		tx, by := x.at.Sub(t0).Seconds(), float64(x.bytes)-b0
		n++
		sx += tx
		sy += by
		sxx += tx * tx
		sxy += tx * by
	}
	return (n*sxy - sx*sy) / (n*sxx - sx*sx) * 8, nil
}

func TestRateAccuracyUDP(t *testing.T) {
	testutil.NeedRoot(t)
	for _, ceil := range testRates(t) {
		t.Run(fmtRate(ceil), func(t *testing.T) {
			withinAttempts(t, "UDP achieved/configured", 0.90, 1.05, func() float64 { return udpAccuracy(t, ceil) })
		})
	}
}

// udpAccuracy measures achieved/configured once, on a fresh pair.
func udpAccuracy(t *testing.T, ceil uint64) float64 {
	p := newPair(t)
	shapeRule(t, p, ceil)

	var rc *net.UDPConn
	p.B.MustDo(t, func() error {
		var err error
		rc, err = net.ListenUDP("udp4", &net.UDPAddr{IP: net.ParseIP(receiverAddr), Port: 9000})
		if err == nil {
			err = rc.SetReadBuffer(8 << 20)
		}
		return err
	})
	defer rc.Close()

	// Receiver: one sample per datagram, counting frame bytes.
	var samples []sample
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 65536)
		var frames uint64
		for {
			rc.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
			n, err := rc.Read(buf)
			if err != nil {
				return
			}
			if n == udpPayload {
				frames++
				samples = append(samples, sample{time.Now(), frames * frameLen})
			}
		}
	}()

	// Sender: a blocking loop; the socket's send buffer flow-controls it
	// once the leaf's queue holds a buffer's worth (no pacing needed).
	const sendFor = 2500 * time.Millisecond
	var sent uint64
	p.A.MustDo(t, func() error {
		d := net.Dialer{Control: setPriority(RuleClassID(testSlot)),
			LocalAddr: &net.UDPAddr{IP: net.ParseIP(senderAddr)}}
		c, err := d.Dial("udp4", net.JoinHostPort(receiverAddr, "9000"))
		if err != nil {
			return err
		}
		defer c.Close()
		// About 250 ms of queue at the ceiling, so the test ends soon
		// after the sender stops.
		if err := c.(*net.UDPConn).SetWriteBuffer(int(min(max(ceil/8/4, 8192), 212992))); err != nil {
			return err
		}
		payload := make([]byte, udpPayload)
		end := time.Now().Add(sendFor)
		c.SetWriteDeadline(end)
		for time.Now().Before(end) {
			if _, err := c.Write(payload); err != nil {
				if errors.Is(err, os.ErrDeadlineExceeded) {
					break
				}
				if errors.Is(err, unix.ENOBUFS) {
					continue
				}
				return err
			}
			sent++
		}
		return nil
	})
	<-done
	if len(samples) < 10 {
		t.Fatalf("receiver got %d datagrams of %d sent", len(samples), sent)
	}
	first, last := samples[0].at, samples[len(samples)-1].at
	got, err := rateBetween(samples, first, last)
	if err != nil {
		t.Fatal(err)
	}
	st := statsIn(t, p.A, p.IndexA)[RuleBase+testSlot]
	ratio := got / float64(ceil)
	t.Logf("UDP ceil %s: sent %d datagrams, received %d over %.2fs, achieved %.4f Mbit/s (frame bytes), ratio %.4f; HTB leaf %d pkts %d bytes (%.1f B/pkt), %d drops, %d overlimits",
		fmtRate(ceil), sent, len(samples), last.Sub(first).Seconds(), got/1e6, ratio,
		st.Packets, st.Bytes, float64(st.Bytes)/float64(max(st.Packets, 1)), st.Drops, st.Overlimits)
	if st.Packets > 0 && st.Bytes != st.Packets*frameLen {
		t.Errorf("HTB counted %d bytes for %d packets, want %d per packet (skb->len of the L2 frame)", st.Bytes, st.Packets, frameLen)
	}
	return ratio
}

func TestRateAccuracyTCP(t *testing.T) {
	testutil.NeedRoot(t)
	for _, ceil := range testRates(t) {
		t.Run(fmtRate(ceil), func(t *testing.T) {
			withinAttempts(t, "TCP goodput/expected", 0.90, 1.02, func() float64 { return tcpAccuracy(t, ceil) })
		})
	}
}

// tcpAccuracy measures goodput/expected once, on a fresh pair.
func tcpAccuracy(t *testing.T, ceil uint64) float64 {
	p := newPair(t)
	shapeRule(t, p, ceil)

	var ln net.Listener
	p.B.MustDo(t, func() error {
		var err error
		ln, err = net.Listen("tcp4", net.JoinHostPort(receiverAddr, "9001"))
		return err
	})
	defer ln.Close()

	var (
		mu      sync.Mutex
		samples []sample
	)
	done := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			done <- err
			return
		}
		defer c.Close()
		buf := make([]byte, 256<<10)
		var total uint64
		for {
			n, err := c.Read(buf)
			if n > 0 {
				total += uint64(n)
				mu.Lock()
				samples = append(samples, sample{time.Now(), total})
				mu.Unlock()
			}
			if err != nil {
				done <- nil
				return
			}
		}
	}()

	const sendFor = 3500 * time.Millisecond
	var mss int
	p.A.MustDo(t, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		d := net.Dialer{Control: setPriority(RuleClassID(testSlot)),
			LocalAddr: &net.TCPAddr{IP: net.ParseIP(senderAddr)}}
		c, err := d.DialContext(ctx, "tcp4", net.JoinHostPort(receiverAddr, "9001"))
		if err != nil {
			return err
		}
		defer c.Close()
		raw, err := c.(*net.TCPConn).SyscallConn()
		if err != nil {
			return err
		}
		var serr error
		if err := raw.Control(func(fd uintptr) { mss, serr = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_MAXSEG) }); err != nil {
			return err
		}
		if serr != nil {
			return serr
		}
		// Discard unsent data at close instead of draining it slowly.
		if err := c.(*net.TCPConn).SetLinger(0); err != nil {
			return err
		}
		chunk := make([]byte, 64<<10)
		c.SetWriteDeadline(time.Now().Add(sendFor))
		for {
			if _, err := c.Write(chunk); err != nil {
				if errors.Is(err, os.ErrDeadlineExceeded) {
					return nil
				}
				return err
			}
		}
	})
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(samples) < 10 {
		t.Fatalf("receiver read %d times", len(samples))
	}
	// Skip the first second (handshake, slow start, initial burst); stop
	// where the sender stopped.
	start := samples[0].at
	got, err := rateBetween(samples, start.Add(time.Second), start.Add(sendFor-200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	var maxGap time.Duration
	var maxRead uint64
	for i := 1; i < len(samples); i++ {
		maxGap = max(maxGap, samples[i].at.Sub(samples[i-1].at))
		maxRead = max(maxRead, samples[i].bytes-samples[i-1].bytes)
	}
	expected := float64(ceil) * float64(mss) / frameLen
	ratio := got / expected
	st := statsIn(t, p.A, p.IndexA)[RuleBase+testSlot]
	t.Logf("TCP ceil %s: mss %d, goodput %.4f Mbit/s, expected %.4f (ceil × %d/%d), ratio %.4f; HTB leaf %d pkts %d bytes (%.1f B/pkt), %d drops; receiver: largest read %d B, longest gap %v",
		fmtRate(ceil), mss, got/1e6, expected/1e6, mss, frameLen, ratio,
		st.Packets, st.Bytes, float64(st.Bytes)/float64(max(st.Packets, 1)), st.Drops, maxRead, maxGap.Round(time.Millisecond))
	return ratio
}

// withinAttempts passes when one of up to three measurements lies in
// [lo, hi] (testutil.Measured): a stall of the shared VM can spoil a
// few-second measurement; a real regression fails every attempt.
func withinAttempts(t *testing.T, what string, lo, hi float64, measure func() float64) {
	t.Helper()
	testutil.Measured(t, what, 3, func(int) (bool, string) {
		r := measure()
		return r >= lo && r <= hi, fmt.Sprintf("%.4f, want within [%.2f, %.2f]", r, lo, hi)
	})
}
