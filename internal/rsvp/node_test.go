package rsvp

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
	"time"
)

// fakeInstall admits reservations up to a capacity in bytes/s (R for
// guaranteed, r for controlled load), like the engine's admission.
type fakeInstall struct {
	name      string
	capacity  float32
	installed map[FlowKey]Flowspec
}

func rate(fs Flowspec) float32 {
	if fs.Service == ServiceGuaranteed {
		return fs.RspecRate
	}
	return fs.Tspec.Rate
}

func (f *fakeInstall) Install(k FlowKey, fs Flowspec) error {
	var sum float32
	for kk, v := range f.installed {
		if kk != k {
			sum += rate(v)
		}
	}
	if sum+rate(fs) > f.capacity {
		return &AdmissionError{Value: 2, Reason: fmt.Sprintf("%s: %v B/s requested, %v of %v B/s reservable left", f.name, rate(fs), f.capacity-sum, f.capacity)}
	}
	f.installed[k] = fs
	return nil
}

func (f *fakeInstall) Remove(k FlowKey) { delete(f.installed, k) }

type simNode struct {
	name   string
	addrs  []netip.Addr
	local  func(netip.Addr) netip.Addr // its address toward a destination: the source of what it sends
	node   *Node
	inst   *fakeInstall
	events []Event
}

// sim is sender S — router Rt — receiver D, messages passed through the
// wire format (Encode, Decode) so each one is a valid RSVP message.
type sim struct {
	t     *testing.T
	nodes []*simNode // in path order
	now   time.Time
	sent  map[MsgType]int
}

var (
	addrS  = netip.MustParseAddr("198.18.1.2")
	addrR1 = netip.MustParseAddr("198.18.1.1")
	addrR2 = netip.MustParseAddr("198.18.2.1")
	addrD  = netip.MustParseAddr("198.18.2.2")
)

func newSim(t *testing.T, routerCap float32, refresh time.Duration) *sim {
	s := &sim{t: t, now: time.Unix(1000, 0), sent: map[MsgType]int{}}
	mk := func(name string, cap float32, local func(netip.Addr) netip.Addr, addrs ...netip.Addr) *simNode {
		sn := &simNode{name: name, addrs: addrs, local: local, inst: &fakeInstall{name: name, capacity: cap, installed: map[FlowKey]Flowspec{}}}
		sn.node = NewNode(Config{
			Local: func(dst netip.Addr) (netip.Addr, bool, error) {
				return local(dst), slices.Contains(addrs, dst), nil
			},
			Install: sn.inst, Upcall: func(e Event) { sn.events = append(sn.events, e) },
			Refresh: refresh, Rand: rand.New(rand.NewPCG(1, 2)), Router: name == "router",
		})
		return sn
	}
	s.nodes = []*simNode{
		mk("sender", 1e9, func(netip.Addr) netip.Addr { return addrS }, addrS),
		mk("router", routerCap, func(d netip.Addr) netip.Addr {
			if netip.MustParsePrefix("198.18.1.0/24").Contains(d) {
				return addrR1
			}
			return addrR2
		}, addrR1, addrR2),
		mk("receiver", 1e9, func(netip.Addr) netip.Addr { return addrD }, addrD),
	}
	return s
}

// run delivers outs (sent by node from) and everything they cause.
func (s *sim) run(from int, outs []Out) {
	type item struct {
		from int
		o    Out
	}
	q := []item{}
	for _, o := range outs {
		q = append(q, item{from, o})
	}
	for len(q) > 0 {
		it := q[0]
		q = q[1:]
		b, err := it.o.Msg.Encode()
		if err != nil {
			s.t.Fatalf("%s sends %s: %v", s.nodes[it.from].name, it.o.Msg.Type, err)
		}
		m, err := Decode(b)
		if err != nil {
			s.t.Fatalf("%s sent an undecodable %s: %v", s.nodes[it.from].name, it.o.Msg.Type, err)
		}
		s.sent[m.Type]++
		to := -1
		if it.o.Alert {
			to = it.from + 1 // routed toward the destination; the next RSVP hop intercepts
		} else {
			for i, n := range s.nodes {
				if slices.Contains(n.addrs, it.o.To) {
					to = i
				}
			}
		}
		if to < 0 || to >= len(s.nodes) {
			s.t.Fatalf("%s sends %s to %s: nobody there", s.nodes[it.from].name, m.Type, it.o.To)
		}
		src := s.nodes[it.from].local(it.o.To)
		for _, o := range s.nodes[to].node.Handle(m, src, s.now) {
			q = append(q, item{to, o})
		}
	}
}

func (s *sim) tick(d time.Duration, skip int) {
	s.now = s.now.Add(d)
	for i, n := range s.nodes {
		if i == skip {
			continue
		}
		s.run(i, n.node.Tick(s.now))
	}
}

var (
	testSess   = Session{Dest: addrD, Proto: 17, Port: 5004}
	testSender = Filter{Src: addrS, Port: 4000}
	testKey    = FlowKey{testSess, testSender}
	testTspec  = Tspec{Rate: 125000, Bucket: 3000, Peak: 250000, MinUnit: 64, MaxPacket: 1500}
)

func (s *sim) setup(t *testing.T, fs Flowspec) {
	outs, err := s.nodes[0].node.Sender(testKey, testTspec, s.now)
	if err != nil {
		t.Fatal(err)
	}
	s.run(0, outs)
	if ev := s.nodes[2].events; len(ev) != 1 || ev[0].Kind != "path" || *ev[0].Tspec != testTspec {
		t.Fatalf("receiver upcalls %+v, want one path with the sender's Tspec", ev)
	}
	outs, err = s.nodes[2].node.Reserve(testSess, StyleFF, fs, []Filter{testSender}, true, s.now)
	if err != nil {
		t.Fatal(err)
	}
	s.run(2, outs)
}

func (s *sim) installed(t *testing.T) (sender, router bool) {
	_, a := s.nodes[0].inst.installed[testKey]
	_, b := s.nodes[1].inst.installed[testKey]
	return a, b
}

func lastEvent(n *simNode) Event {
	if len(n.events) == 0 {
		return Event{}
	}
	return n.events[len(n.events)-1]
}

func TestReserveAcrossRouter(t *testing.T) {
	s := newSim(t, 1e6, time.Second)
	fs := Flowspec{Service: ServiceGuaranteed, Tspec: testTspec, RspecRate: 150000, RspecSlack: 0}
	s.setup(t, fs)
	if a, b := s.installed(t); !a || !b {
		t.Fatalf("installed on sender %v, router %v; want both", a, b)
	}
	if got := s.nodes[0].inst.installed[testKey]; got != fs {
		t.Errorf("sender installed %+v, want %+v", got, fs)
	}
	if e := lastEvent(s.nodes[2]); e.Kind != "confirm" || e.Node != addrS {
		t.Errorf("receiver's last upcall %+v, want a confirmation from the sender", e)
	}
	if e := lastEvent(s.nodes[0]); e.Kind != "resv" {
		t.Errorf("sender's last upcall %+v, want resv", e)
	}
	// Refreshes keep it: 20 R later everything is still there.
	for range 40 {
		s.tick(500*time.Millisecond, -1)
	}
	if a, b := s.installed(t); !a || !b {
		t.Fatalf("after refreshes installed on sender %v, router %v", a, b)
	}
	// ResvTear removes it at once, everywhere.
	s.run(2, s.nodes[2].node.RemoveReservation(testKey))
	if a, b := s.installed(t); a || b {
		t.Fatalf("after ResvTear installed on sender %v, router %v", a, b)
	}
	if s.sent[ResvTear] != 2 || s.sent[ResvConf] != 1 {
		t.Errorf("messages %v: want 2 ResvTear (receiver→router→sender), 1 ResvConf", s.sent)
	}
	// PathTear removes the path state downstream.
	s.run(0, s.nodes[0].node.RemoveSender(testKey))
	for _, n := range s.nodes {
		if p, r := n.node.Counts(); p != 0 || r != 0 {
			t.Errorf("%s keeps %d paths, %d reservations after the tears", n.name, p, r)
		}
	}
}

func TestRefusedAtRouter(t *testing.T) {
	s := newSim(t, 100000, time.Second) // below the 150000 B/s asked
	s.setup(t, Flowspec{Service: ServiceGuaranteed, Tspec: testTspec, RspecRate: 150000})
	if a, b := s.installed(t); a || b {
		t.Fatalf("installed on sender %v, router %v; want neither", a, b)
	}
	e := lastEvent(s.nodes[2])
	if e.Kind != "resv-error" || e.Node != addrR2 || e.Code != ErrAdmission || e.Value != 2 || e.Flowspec.RspecRate != 150000 {
		t.Fatalf("receiver's upcall %+v; want resv-error from the router %s, admission (1), bandwidth unavailable (2), R 150000", e, addrR2)
	}
	if e := lastEvent(s.nodes[1]); e.Kind != "resv-refused" || e.Reason != "router: 150000 B/s requested, 100000 of 100000 B/s reservable left" {
		t.Errorf("router's upcall %+v; want the admission reason", e)
	}
	if _, r := s.nodes[2].node.Counts(); r != 0 {
		t.Errorf("receiver keeps %d reservations after the ResvErr", r)
	}
}

// TestRefusedAtSender: the router admitted and installed, the sender's
// link refuses; the ResvErr passing the router removes its reservation.
func TestRefusedAtSender(t *testing.T) {
	s := newSim(t, 1e6, time.Second)
	s.nodes[0].inst.capacity = 1000
	s.setup(t, Flowspec{Service: ServiceCL, Tspec: testTspec})
	if a, b := s.installed(t); a || b {
		t.Fatalf("installed on sender %v, router %v; want neither", a, b)
	}
	if e := lastEvent(s.nodes[2]); e.Kind != "resv-error" || e.Node != addrS {
		t.Fatalf("receiver's upcall %+v; want resv-error from the sender", e)
	}
}

// TestReceiverDies: the receiver stops refreshing; the router's and then
// the sender's reservation time out within L = (K + 0.5) · 1.5 · R.
func TestReceiverDies(t *testing.T) {
	const r = time.Second
	s := newSim(t, 1e6, r)
	s.setup(t, Flowspec{Service: ServiceCL, Tspec: testTspec})
	start := s.now
	var gone time.Duration
	for s.now.Sub(start) < 2*Lifetime(r) {
		s.tick(100*time.Millisecond, 2) // the receiver is dead: no ticks
		if a, b := s.installed(t); !a && !b {
			gone = s.now.Sub(start)
			break
		}
	}
	if gone == 0 || gone > Lifetime(r)+100*time.Millisecond {
		t.Fatalf("reservation gone after %v, want within L = %v", gone, Lifetime(r))
	}
	if gone < Lifetime(r)-1500*time.Millisecond {
		t.Errorf("reservation gone after %v, before L - 1.5 R (%v): timed out too early", gone, Lifetime(r))
	}
	t.Logf("gone on both hops %v after the receiver's last refresh (L = %v)", gone, Lifetime(r))
}

func TestReserveNeedsPath(t *testing.T) {
	s := newSim(t, 1e6, time.Second)
	if _, err := s.nodes[2].node.Reserve(testSess, StyleFF, Flowspec{Service: ServiceCL, Tspec: testTspec}, []Filter{testSender}, false, s.now); err == nil {
		t.Fatal("reserve without a Path succeeded")
	}
	if _, err := s.nodes[2].node.Reserve(testSess, StyleWF, Flowspec{Service: ServiceCL, Tspec: testTspec}, []Filter{testSender}, false, s.now); err == nil {
		t.Fatal("reserve with WF succeeded")
	}
}

func TestLifetime(t *testing.T) {
	if got := Lifetime(30 * time.Second); got != 157500*time.Millisecond {
		t.Errorf("L(30 s) = %v, want 157.5 s", got)
	}
}

// With deferred removals (an Agent's nodes), a hop hands out the ResvTear
// before removing its own reservation, and a reservation made again before
// the removal runs stays.
func TestResvTearForwardedBeforeLocalRemoval(t *testing.T) {
	s := newSim(t, 1e6, time.Second)
	fs := Flowspec{Service: ServiceGuaranteed, Tspec: testTspec, RspecRate: 150000}
	s.setup(t, fs)
	rtr := s.nodes[1]
	rtr.node.DeferRemovals()
	tear := s.nodes[2].node.RemoveReservation(testKey)
	b, err := tear[0].Msg.Encode()
	if err != nil {
		t.Fatal(err)
	}
	m, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	outs := rtr.node.Handle(m, addrD, s.now)
	if len(outs) != 1 || outs[0].Msg.Type != ResvTear {
		t.Fatalf("router answers the ResvTear with %v, want one ResvTear upstream", outs)
	}
	if _, ok := rtr.inst.installed[testKey]; !ok {
		t.Fatal("router removed its reservation before the ResvTear was sent")
	}
	rtr.node.RemoveDeferred()
	if _, ok := rtr.inst.installed[testKey]; ok {
		t.Fatal("router kept its reservation after RemoveDeferred")
	}
	// Torn down and reserved again before the removal runs: kept.
	reserve := func() {
		rs, err := s.nodes[2].node.Reserve(testKey.Session, StyleFF, fs, []Filter{testKey.Sender}, false, s.now)
		if err != nil {
			t.Fatal(err)
		}
		s.run(2, rs)
	}
	reserve()
	s.run(2, s.nodes[2].node.RemoveReservation(testKey))
	reserve()
	rtr.node.RemoveDeferred()
	if _, ok := rtr.inst.installed[testKey]; !ok {
		t.Fatal("a reservation made again before the deferred removal ran was removed")
	}
}
