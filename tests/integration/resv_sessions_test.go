package integration

import (
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hostqos/hostqos/internal/shaper"
)

// sessionSink accepts TCP connections on ln and counts what each one
// receives, by the client's address.
type sessionSink struct {
	mu  sync.Mutex
	got map[string]*atomic.Int64
}

func (s *sessionSink) serve(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		n := new(atomic.Int64)
		s.mu.Lock()
		s.got[c.RemoteAddr().String()] = n
		s.mu.Unlock()
		go func() {
			defer c.Close()
			buf := make([]byte, 64<<10)
			for {
				k, err := c.Read(buf)
				n.Add(int64(k))
				if err != nil {
					return
				}
			}
		}()
	}
}

// bytesFrom is what the connection from the client address addr delivered.
func (s *sessionSink) bytesFrom(addr string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n, ok := s.got[addr]; ok {
		return n.Load()
	}
	return 0
}

// checkSessionGuarantees: the three admitted sessions of a reservation
// with per_session_minbw send under a saturating best-effort UDP flow on
// the client's link — conns[0] as fast as it can, the other two at
// modest bit/s each — and each session gets at least its per-session
// guarantee minbw at the receiver; each went through an HTB leaf of its
// own (the greedy one cannot take the others' share).
func checkSessionGuarantees(t *testing.T, e *env, sink *sessionSink, conns []net.Conn, minbw, modest float64) {
	t.Helper()
	const (
		warm = time.Second
		dur  = 3 * time.Second
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	defer func() { close(stop); wg.Wait() }()
	// A best-effort flood of the 20mbit link (into the default class).
	got, stopSink := e.resvSink(9)
	defer stopSink()
	bulk := e.clientUDP(9)
	defer unix.Close(bulk)
	wg.Add(1)
	go func() {
		defer wg.Done()
		msg := make([]byte, 1400)
		for {
			select {
			case <-stop:
				return
			default:
			}
			_, _ = unix.Write(bulk, msg)
		}
	}()
	greedy := conns[0]
	wg.Add(1)
	go func() {
		defer wg.Done()
		buf := make([]byte, 16<<10)
		for {
			select {
			case <-stop:
				return
			default:
			}
			_ = greedy.SetWriteDeadline(time.Now().Add(200 * time.Millisecond))
			_, _ = greedy.Write(buf)
		}
	}()
	for _, c := range conns[1:] {
		wg.Add(1)
		go func(c net.Conn) {
			defer wg.Done()
			const size = 1000
			gap := time.Duration(float64(time.Second) * size * 8 / modest)
			buf := make([]byte, size)
			for next := time.Now(); ; next = next.Add(gap) {
				select {
				case <-stop:
					return
				case <-time.After(time.Until(next)):
				}
				_ = c.SetWriteDeadline(time.Now().Add(time.Second))
				_, _ = c.Write(buf)
			}
		}(c)
	}
	time.Sleep(warm)
	before := make([]int64, len(conns))
	for i, c := range conns {
		before[i] = sink.bytesFrom(c.LocalAddr().String())
	}
	bulk0 := got.Load()
	time.Sleep(dur)
	bulkRate := float64(got.Load()-bulk0) * 8 / dur.Seconds()
	for i, c := range conns {
		rate := float64(sink.bytesFrom(c.LocalAddr().String())-before[i]) * 8 / dur.Seconds()
		t.Logf("session %d (%s): %.0f bit/s", i, c.LocalAddr(), rate)
		if rate < minbw {
			t.Errorf("session %d got %.0f bit/s under a saturating bulk flow, below its per-session guarantee %.0f", i, rate, minbw)
		}
	}
	t.Logf("best-effort bulk: %.0f bit/s", bulkRate)
	if bulkRate < 10e6 {
		t.Errorf("the bulk flow got %.0f bit/s: it did not saturate the 20mbit link", bulkRate)
	}
	// Each session's packets went through a leaf of its own.
	var leaves int
	resvDo(t, e.client.Do, func() error {
		l, err := e.client.Handle().LinkByName(e.iface())
		if err != nil {
			return err
		}
		st, err := shaper.Stats(l.Attrs().Index)
		for _, c := range st {
			session := c.Minor >= shaper.SessionBase && c.Minor < shaper.SessionMinor(shaper.MaxSessionGroups+1, 0)
			if session && c.Bytes > 0 {
				leaves++
			}
		}
		return err
	})
	if leaves != len(conns) {
		t.Errorf("%d per-session leaves carried traffic, want %d (one per session)", leaves, len(conns))
	}
}

// checkOpenSocketSendBuffer: a UDP socket connected before its guaranteed
// reservation is bound when the reservation comes and gets the send buffer
// a socket connecting under the reservation gets (so that it too blocks
// in send() instead of overfilling the leaf); when the reservation is
// removed while the socket stays open, it gets its own back.
func checkOpenSocketSendBuffer(t *testing.T, e *env) {
	t.Helper()
	const port = 5008
	early := e.clientUDP(port)
	defer unix.Close(early)
	sndbuf := func(fd int) int {
		v, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	own := sndbuf(early)
	e.hostqos("resv", "add", "late", "--service", "guaranteed", "--proto", "udp", "--rport", fmt.Sprint(port),
		"--rate", "1mbit", "--burst", "16KiB")
	_, _ = unix.Write(early, []byte("x"))
	fresh := e.clientUDP(port)
	ref := sndbuf(fresh)
	unix.Close(fresh)
	if ref == own {
		t.Fatalf("a socket connected under the reservation has the default send buffer %d", own)
	}
	eventually(t, 5*time.Second, "the open socket's send buffer sized", func() (bool, string) {
		v := sndbuf(early)
		return v == ref, fmt.Sprintf("SO_SNDBUF %d, want %d (was %d)", v, ref, own)
	})
	e.hostqos("resv", "remove", "late")
	eventually(t, 5*time.Second, "the open socket's own send buffer back", func() (bool, string) {
		v := sndbuf(early)
		return v == own, fmt.Sprintf("SO_SNDBUF %d, want %d", v, own)
	})
}
