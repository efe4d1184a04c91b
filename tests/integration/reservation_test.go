package integration

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hostqos/hostqos/api"
)

// eventLog collects a follower's events.
type eventLog struct {
	mu  sync.Mutex
	evs []api.Event
}

func (l *eventLog) add(ev api.Event) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.evs = append(l.evs, ev)
	return nil
}

// wait waits for an event of kind about subject (and containing text in
// its message) and returns it.
func (l *eventLog) wait(t *testing.T, kind, subject, text string) api.Event {
	t.Helper()
	return l.waitAfter(t, 0, kind, subject, text)
}

// waitAfter is wait for an event after seq.
func (l *eventLog) waitAfter(t *testing.T, seq uint64, kind, subject, text string) api.Event {
	t.Helper()
	var got api.Event
	eventually(t, 10*time.Second, "event "+kind+" "+subject, func() (bool, string) {
		l.mu.Lock()
		defer l.mu.Unlock()
		for _, ev := range l.evs {
			if ev.Seq > seq && ev.Kind == kind && ev.Subject == subject && strings.Contains(ev.Message, text) {
				got = ev
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d events so far", len(l.evs))
	})
	return got
}

// resvSockets are the pids bound to a reservation, as resv show says.
func (e *env) resvSockets(name string) []api.BoundSocket {
	e.t.Helper()
	var ri api.ReservationInfo
	e.hostqosJSON(&ri, "resv", "show", name, "-o", "json")
	return ri.Sockets
}

func hasPID(ss []api.BoundSocket, pid int) bool {
	for _, s := range ss {
		if int(s.PID) == pid {
			return true
		}
	}
	return false
}

// TestReservations: admission refusals with the numbers that change
// nothing; a socket binds at connect when the reservation came first, within
// 1 s when it came while the socket was open, and unbinds at close, as
// resv show says; a socket open before its guaranteed reservation gets
// the reservation's send buffer and its own back when the reservation
// goes; --max-sessions 3 refuses the fourth TCP connect with EPERM
// and an event, and lets the next in after a close, each admitted session
// getting its per-session guarantee under a saturating bulk flow; kill -9 of the daemon
// keeps enforcing, a restarted daemon adopts the reservations and the event
// stream resumes; every event arrived in order.
func TestReservations(t *testing.T) {
	e := newEnv(t)
	e.writeConfig(fmt.Sprintf("[[link]]\nname = %q\negress_rate = \"20mbit\"\n", e.iface()))
	e.startDaemon()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	log := &eventLog{}
	zero := uint64(0)
	followed := make(chan error, 1)
	go func() { followed <- e.cli.Events().Follow(ctx, api.EventsOptions{Since: &zero}, log.add) }()
	pid := os.Getpid()
	server := serverV4.Addr().String()

	// Admission: over the reservable capacity (16mbit), over the buffer
	// pool (4 MiB): refused with the numbers, nothing changed.
	out, err := e.hostqosErr("resv", "add", "big", "--service", "guaranteed", "--proto", "udp", "--rport", "9",
		"--rate", "10mbit", "--burst", "16KiB", "--service-rate", "17mbit")
	if err == nil || !strings.Contains(out, "guarantees 17mbit exceed reservable capacity 16mbit (0.8 × 20mbit): reservation big 17mbit") {
		t.Fatalf("over capacity: %v\n%s", err, out)
	}
	out, err = e.hostqosErr("resv", "add", "deep", "--service", "controlled-load", "--proto", "udp", "--rport", "9",
		"--rate", "1mbit", "--burst", "4MiB")
	if err == nil || !strings.Contains(out, "reservation buffers 134217728 B exceed the buffer pool 4194304 B") {
		t.Fatalf("over the buffer pool: %v\n%s", err, out)
	}
	var list []api.ReservationInfo
	e.hostqosJSON(&list, "resv", "list", "-o", "json")
	if len(list) != 0 {
		t.Fatalf("refusals left reservations: %+v", list)
	}
	log.wait(t, "reservation.refused", "reservation/big", "17mbit")

	// Before the socket: bound at connect.
	e.hostqos("resv", "add", "pre", "--service", "guaranteed", "--proto", "udp", "--rport", "5004", "--rate", "1mbit", "--burst", "16KiB")
	log.wait(t, "reservation.admitted", "reservation/pre", "")
	var fd int
	mustDo(t, e.client.Do, func() error {
		var err error
		if fd, err = unix.Socket(unix.AF_INET, unix.SOCK_DGRAM, 0); err != nil {
			return err
		}
		return unix.Connect(fd, &unix.SockaddrInet4{Port: 5004, Addr: serverV4.Addr().As4()})
	})
	if ss := e.resvSockets("pre"); !hasPID(ss, pid) {
		t.Fatalf("socket connected after the reservation is not bound at once: %+v", ss)
	}
	log.wait(t, "socket.bound", "reservation/pre", "")
	unix.Close(fd)
	eventually(t, 5*time.Second, "unbound at close", func() (bool, string) {
		ss := e.resvSockets("pre")
		return !hasPID(ss, pid), fmt.Sprint(ss)
	})
	if out := e.hostqos("resv", "show", "pre"); !strings.Contains(out, "sockets:   none bound") {
		t.Errorf("resv show after close:\n%s", out)
	}
	log.wait(t, "socket.unbound", "reservation/pre", "")

	// While the socket is open (and sending): bound within 1 s.
	var open *net.UDPConn
	mustDo(t, e.client.Do, func() error {
		c, err := net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(netip.MustParseAddrPort(server+":5006")))
		open = c
		return err
	})
	defer open.Close()
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
				_, _ = open.Write(make([]byte, 100))
			}
		}
	}()
	time.Sleep(200 * time.Millisecond)
	e.hostqos("resv", "add", "open", "--service", "controlled-load", "--proto", "udp", "--rport", "5006", "--rate", "1mbit", "--burst", "16KiB")
	added := time.Now()
	eventually(t, 5*time.Second, "bound while open", func() (bool, string) {
		ss := e.resvSockets("open")
		return hasPID(ss, pid), fmt.Sprint(ss)
	})
	if el := time.Since(added); el > time.Second {
		t.Errorf("an open socket was bound %v after the reservation, want within 1 s", el)
	}
	log.wait(t, "socket.bound", "reservation/open", "")
	checkOpenSocketSendBuffer(t, e)

	// Per-session admission: the fourth TCP connect fails with EPERM.
	var ln net.Listener
	mustDo(t, e.server.Do, func() error {
		var err error
		ln, err = net.Listen("tcp4", server+":7000")
		return err
	})
	defer ln.Close()
	sink := &sessionSink{got: map[string]*atomic.Int64{}}
	go sink.serve(ln)
	e.hostqos("resv", "add", "calls", "--service", "guaranteed", "--proto", "tcp", "--rport", "7000",
		"--rate", "1mbit", "--burst", "16KiB", "--max-sessions", "3", "--per-session-minbw", "100kbit")
	dial := func() (net.Conn, error) {
		var c net.Conn
		err := e.client.Do(func() error {
			var err error
			c, err = net.DialTimeout("tcp4", server+":7000", 5*time.Second)
			return err
		})
		return c, err
	}
	var conns []net.Conn
	for i := 0; i < 3; i++ {
		c, err := dial()
		if err != nil {
			t.Fatalf("session %d: %v", i+1, err)
		}
		conns = append(conns, c)
	}
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	if _, err := dial(); !errors.Is(err, syscall.EPERM) {
		t.Fatalf("fourth session: %v, want EPERM", err)
	}
	ev := log.wait(t, "session.refused", "reservation/calls", "EPERM")
	if ev.Fields["limit"] != float64(3) || ev.UID == nil {
		t.Errorf("refusal event %+v", ev)
	}
	conns[0].Close()
	eventually(t, 5*time.Second, "a session after a close", func() (bool, string) {
		c, err := dial()
		if err != nil {
			return false, err.Error()
		}
		conns[0] = c
		return true, ""
	})
	// Each session holds a leaf of its own (resv show says which) and gets
	// its guarantee under a saturating bulk flow.
	leaves := map[int]bool{}
	for _, s := range e.resvSockets("calls") {
		leaves[s.Session] = true
	}
	if len(leaves) != 3 || leaves[0] {
		t.Errorf("per-session leaves of the 3 sessions in resv show: %v, want 3 different ones", leaves)
	}
	checkSessionGuarantees(t, e, sink, conns, 100e3, 200e3)

	// kill -9: enforcement stays; a restarted daemon adopts; events resume.
	e.killDaemon(syscall.SIGKILL)
	if _, err := dial(); !errors.Is(err, syscall.EPERM) {
		t.Fatalf("a fourth session with the daemon dead: %v, want EPERM", err)
	}
	log.mu.Lock()
	lastSeq := log.evs[len(log.evs)-1].Seq
	log.mu.Unlock()
	e.startDaemon()
	if ss := e.resvSockets("calls"); len(ss) != 3 {
		t.Errorf("after restart: %d sockets bound to calls, want 3", len(ss))
	}
	if ss := e.resvSockets("open"); !hasPID(ss, pid) {
		t.Errorf("after restart: the open socket is not bound: %+v", ss)
	}
	log.waitAfter(t, lastSeq, "daemon.started", "", "") // the stream resumed, seqs above the last
	cancel()
	<-followed
	// Order: seqs increase; the milestones came in the order they happened.
	log.mu.Lock()
	defer log.mu.Unlock()
	var marks []string
	want := []string{"reservation.refused reservation/big", "reservation.admitted reservation/pre", "socket.bound reservation/pre",
		"socket.unbound reservation/pre", "reservation.admitted reservation/open", "socket.bound reservation/open",
		"reservation.admitted reservation/calls", "session.refused reservation/calls"}
	for i, ev := range log.evs {
		if i > 0 && ev.Kind != api.EventLost && ev.Seq <= log.evs[i-1].Seq {
			t.Errorf("event %d seq %d after %d", i, ev.Seq, log.evs[i-1].Seq)
		}
		k := ev.Kind + " " + ev.Subject
		if len(marks) < len(want) && k == want[len(marks)] {
			marks = append(marks, k)
		}
	}
	if len(marks) != len(want) {
		t.Errorf("events in order: got %q of %q", marks, want)
	}
}

// mustDo runs fn in a node (its Do) and fails the test on an error.
func mustDo(t *testing.T, do func(func() error) error, fn func() error) {
	t.Helper()
	if err := do(fn); err != nil {
		t.Fatal(err)
	}
}
