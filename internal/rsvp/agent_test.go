package rsvp

import (
	"context"
	"io"
	"log/slog"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/hostqos/hostqos/internal/testutil"
)

// lockedInstall is fakeInstall safe for the agent's goroutines.
type lockedInstall struct {
	mu sync.Mutex
	f  fakeInstall
}

func (l *lockedInstall) Install(k FlowKey, fs Flowspec) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.f.Install(k, fs)
}

func (l *lockedInstall) Remove(k FlowKey) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.f.Remove(k)
}

func (l *lockedInstall) has(k FlowKey) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, ok := l.f.installed[k]
	return ok
}

// TestAgentsOverVeth: a sender host and a receiver host, each an Agent on
// real raw sockets in its own namespace: Path, Resv (installed on the
// sender), ResvConf, then ResvTear; a malformed message is counted and
// dropped.
func TestAgentsOverVeth(t *testing.T) {
	testutil.NeedRoot(t)
	p := testutil.NewPair(t)
	a, b := testutil.PairA4.Addr(), testutil.PairB4.Addr()
	events := make(chan Event, 16)
	inst := &lockedInstall{f: fakeInstall{name: "sender", capacity: 1e9, installed: map[FlowKey]Flowspec{}}}
	mk := func(ns *testutil.NetNS, self netip.Addr, up func(Event)) (*Agent, *Conn) {
		var c *Conn
		ns.MustDo(t, func() (err error) { c, err = Listen(false); return err })
		node := NewNode(Config{
			Local:   func(dst netip.Addr) (netip.Addr, bool, error) { return self, dst == self, nil },
			Install: inst, Upcall: up, Refresh: 200 * time.Millisecond,
		})
		return &Agent{Node: node, V4: c, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Period: 20 * time.Millisecond}, c
	}
	sa, _ := mk(p.A, a, func(Event) {})
	ra, _ := mk(p.B, b, func(e Event) { events <- e })
	ra.Managed = func(ifindex int) bool { return ifindex == p.IndexB }
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, ag := range []*Agent{sa, ra} {
		wg.Add(1)
		go func() { defer wg.Done(); ag.Run(ctx) }()
	}
	defer func() { cancel(); wg.Wait() }()

	wait := func(kind string) Event {
		t.Helper()
		deadline := time.After(5 * time.Second)
		for {
			select {
			case e := <-events:
				if e.Kind == kind {
					return e
				}
			case <-deadline:
				t.Fatalf("no %s upcall on the receiver", kind)
			}
		}
	}
	sess := Session{Dest: b, Proto: 17, Port: 5004}
	k := FlowKey{sess, Filter{Src: a, Port: 4000}}
	outs, err := sa.Node.Sender(k, testTspec, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	sa.Send(outs)
	if e := wait("path"); *e.Tspec != testTspec {
		t.Fatalf("receiver got Tspec %+v, sent %+v", *e.Tspec, testTspec)
	}
	fs := Flowspec{Service: ServiceCL, Tspec: testTspec}
	outs, err = ra.Node.Reserve(sess, StyleFF, fs, []Filter{k.Sender}, true, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ra.Send(outs)
	if e := wait("confirm"); e.Node != a {
		t.Fatalf("confirmation from %s, want the sender %s", e.Node, a)
	}
	if !inst.has(k) {
		t.Fatal("confirmed, but nothing installed on the sender")
	}
	// Garbage to the receiver: counted as malformed, nothing else happens.
	if err := sa.V4.Send([]byte{0x10, 2, 0, 0, 64, 0, 0, 12, 0, 0, 0, 0}, b, 64, false); err != nil {
		t.Fatal(err)
	}
	ra.Send(ra.Node.RemoveReservation(k))
	for end := time.Now().Add(5 * time.Second); inst.has(k); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("ResvTear did not remove the sender's reservation")
		}
	}
	for end := time.Now().Add(5 * time.Second); ra.Malformed.Load() == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("malformed message not counted")
		}
	}
}

// TestLocalFuncIPv6: the local-address lookup takes IPv6 destinations
// (it once built an IPv4 socket address first and panicked).
func TestLocalFuncIPv6(t *testing.T) {
	me := netip.MustParseAddr("2001:db8::1")
	local := LocalFunc(func() []netip.Addr { return []netip.Addr{me} })
	if a, self, err := local(me); err != nil || !self || a != me {
		t.Fatalf("local(%s) = %s, %v, %v; want itself", me, a, self, err)
	}
	// Not ours: whatever the kernel's route says, no panic.
	_, self, _ := local(netip.MustParseAddr("::1"))
	if self {
		t.Fatal("::1 taken for one of this host's addresses")
	}
}
