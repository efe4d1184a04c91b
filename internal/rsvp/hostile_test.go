package rsvp

import (
	"bytes"
	"errors"
	"log/slog"
	"math"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// What a remote party on a managed link can make a node do with
// well-formed messages: each test plays the attacker against one node.

var (
	addrHost = netip.MustParseAddr("198.18.0.1") // the node under attack
	addrPeer = netip.MustParseAddr("198.18.0.2") // the attacker
)

// hostNode is a node at addrHost (its only address; every destination is
// reached from it) with a recording installer.
func hostNode(t *testing.T, cfg Config) (*Node, *fakeInstall, *[]Event) {
	t.Helper()
	inst := &fakeInstall{name: "host", capacity: 1e12, installed: map[FlowKey]Flowspec{}}
	var evs []Event
	if cfg.Local == nil {
		cfg.Local = func(dst netip.Addr) (netip.Addr, bool, error) { return addrHost, dst == addrHost, nil }
	}
	cfg.Install, cfg.Upcall = inst, func(e Event) { evs = append(evs, e) }
	if cfg.Refresh == 0 {
		cfg.Refresh = time.Second
	}
	return NewNode(cfg), inst, &evs
}

// wire passes m through Encode and Decode, as the agent would get it.
func wire(t *testing.T, m *Message) *Message {
	t.Helper()
	b, err := m.Encode()
	if err != nil {
		t.Fatalf("encode %s: %v", m.Type, err)
	}
	d, err := Decode(b)
	if err != nil {
		t.Fatalf("decode %s: %v", m.Type, err)
	}
	return d
}

func pathMsg(sess Session, snd Filter, hop netip.Addr, refresh uint32) *Message {
	ts := testTspec
	return &Message{Type: Path, TTL: 64, Session: sess, Hop: &Hop{Addr: hop}, Refresh: refresh, Sender: &Sender{Template: snd, Tspec: &ts}}
}

func resvMsg(sess Session, snd Filter, hop netip.Addr, fs Flowspec) *Message {
	return &Message{Type: Resv, TTL: 64, Session: sess, Hop: &Hop{Addr: hop}, Refresh: 1000, Style: StyleFF,
		Flows: []FlowDesc{{Flowspec: &fs, Filters: []Filter{snd}}}}
}

// A host (not a router) keeps no path state for a session it neither
// sends nor receives, and installs reservations only for its own senders:
// the attacker's Path naming its own address as the session (so that the
// host would act as a router toward it), then a Resv for that flow, get a
// drop and a ResvErr "no path information"; nothing is installed. A Path
// addressed to the host is kept (it receives that session), but a Resv for
// it is refused too; a Resv for the host's own sender is installed. A
// router keeps the Path it would forward.
func TestHostKeepsOnlyItsOwnSessions(t *testing.T) {
	big := Flowspec{Service: ServiceGuaranteed, Tspec: testTspec, RspecRate: 9e6}
	for _, fam := range []struct{ host, peer netip.Addr }{
		{addrHost, addrPeer},
		{netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("2001:db8::2")},
	} {
		local := func(dst netip.Addr) (netip.Addr, bool, error) { return fam.host, dst == fam.host, nil }
		n, inst, evs := hostNode(t, Config{Local: local})
		now := time.Unix(1000, 0)
		foreign := Session{Dest: fam.peer, Proto: 17, Port: 5004}
		victim := Filter{Src: fam.host, Port: 4000} // the attacker names the host as the sender
		if outs := n.Handle(wire(t, pathMsg(foreign, victim, fam.peer, 1000)), fam.peer, now); len(outs) != 0 {
			t.Errorf("%s: a host forwarded a foreign Path: %+v", fam.host, outs)
		}
		if p, _ := n.Counts(); p != 0 || n.Counters().NotHere != 1 {
			t.Fatalf("%s: %d path states, counters %+v after a Path of a session the host neither sends nor receives; want none kept, 1 not here", fam.host, p, n.Counters())
		}
		outs := n.Handle(wire(t, resvMsg(foreign, victim, fam.peer, big)), fam.peer, now)
		if len(outs) != 1 || outs[0].Msg.Type != ResvErr || outs[0].Msg.Error.Code != ErrNoPathInfo || outs[0].To != fam.peer {
			t.Fatalf("%s: a Resv for a foreign session answered %+v, want a ResvErr (no path information) to the attacker", fam.host, outs)
		}
		wire(t, outs[0].Msg)

		// A session addressed to the host: kept (the receiver's), but
		// nothing to install for a Resv.
		mine := Session{Dest: fam.host, Proto: 17, Port: 5004}
		other := Filter{Src: fam.peer, Port: 4000}
		n.Handle(wire(t, pathMsg(mine, other, fam.peer, 1000)), fam.peer, now)
		if p, _ := n.Counts(); p != 1 || len(*evs) != 1 || (*evs)[0].Kind != "path" {
			t.Fatalf("%s: a Path addressed to the host: %d states, upcalls %+v; want it kept with a path upcall", fam.host, p, *evs)
		}
		if outs := n.Handle(wire(t, resvMsg(mine, other, fam.peer, big)), fam.peer, now); len(outs) != 1 || outs[0].Msg.Type != ResvErr {
			t.Fatalf("%s: a Resv for a session the host receives answered %+v, want a ResvErr", fam.host, outs)
		}

		// The host's own sender: the Resv is installed.
		own := FlowKey{Session{Dest: fam.peer, Proto: 17, Port: 6000}, Filter{Src: fam.host, Port: 4001}}
		if _, err := n.Sender(own, testTspec, now); err != nil {
			t.Fatal(err)
		}
		if outs := n.Handle(wire(t, resvMsg(own.Session, own.Sender, fam.peer, big)), fam.peer, now); len(outs) != 0 {
			t.Fatalf("%s: a Resv for the host's own sender answered %+v", fam.host, outs)
		}
		if len(inst.installed) != 1 || inst.installed[own] != big {
			t.Fatalf("%s: installed %+v, want only the host's own sender's reservation", fam.host, inst.installed)
		}

		// A router keeps (and forwards) the foreign Path.
		r, _, _ := hostNode(t, Config{Local: local, Router: true})
		if outs := r.Handle(wire(t, pathMsg(foreign, victim, fam.peer, 1000)), fam.peer, now); len(outs) != 1 || outs[0].Msg.Type != Path {
			t.Errorf("%s: a router answered a Path passing through with %+v, want it forwarded", fam.host, outs)
		}
	}
}

// The refresh period a message asks (TIME_VALUES) is capped at
// PeerRefreshFactor times the node's R (at least DefaultRefresh): a Path
// and a Resv with R = 2^32-1 ms (261 days) time out within L of the cap.
func TestPeerRefreshCapped(t *testing.T) {
	for _, c := range []struct {
		refresh, cap time.Duration
	}{{time.Second, 30 * time.Second}, {30 * time.Second, 2 * time.Minute}, {time.Hour, 4 * time.Hour}} {
		n, inst, _ := hostNode(t, Config{Refresh: c.refresh})
		if got := n.MaxPeerRefresh(); got != c.cap {
			t.Errorf("R %v: longest refresh taken from a peer %v, want %v", c.refresh, got, c.cap)
		}
		now := time.Unix(1000, 0)
		mine := Session{Dest: addrHost, Proto: 17, Port: 5004}
		n.Handle(wire(t, pathMsg(mine, Filter{Src: addrPeer, Port: 4000}, addrPeer, math.MaxUint32)), addrPeer, now)
		own := FlowKey{Session{Dest: addrPeer, Proto: 17, Port: 6000}, Filter{Src: addrHost, Port: 4001}}
		if _, err := n.Sender(own, testTspec, now); err != nil {
			t.Fatal(err)
		}
		m := resvMsg(own.Session, own.Sender, addrPeer, Flowspec{Service: ServiceCL, Tspec: testTspec})
		m.Refresh = math.MaxUint32
		n.Handle(wire(t, m), addrPeer, now)
		pg := n.View(nil, 0, 0)
		L := Lifetime(c.cap)
		for _, p := range pg.Paths {
			if !p.Originated && (p.Refresh != c.cap || p.Expires.After(now.Add(L))) {
				t.Errorf("R %v: path state of R 2^32-1 ms kept with R %v until %v, want R %v, expiry within %v", c.refresh, p.Refresh, p.Expires.Sub(now), c.cap, L)
			}
		}
		if len(pg.Resvs) != 1 || pg.Resvs[0].Refresh != c.cap || pg.Resvs[0].Expires.After(now.Add(L)) {
			t.Errorf("R %v: reservation states %+v, want R %v, expiry within %v", c.refresh, pg.Resvs, c.cap, L)
		}
		n.Tick(now.Add(L + time.Millisecond))
		if p, r := n.Counts(); p != 1 || r != 0 || len(inst.installed) != 0 {
			t.Errorf("R %v: %d path, %d reservation states, %d installed after L = %v of the cap; want only the host's own sender's path", c.refresh, p, r, len(inst.installed), L)
		}
	}
}

// The path states of one previous hop and of one source address are
// capped; a Path over a cap is dropped and counted, and logged at most
// once a minute per reason; a torn-down state frees its place, and a
// refresh of a kept state is never refused.
func TestPathStateCaps(t *testing.T) {
	var logged bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logged, nil))
	n, _, _ := hostNode(t, Config{MaxPerHop: 3, MaxPerSource: 5, Log: log})
	now := time.Unix(1000, 0)
	src2 := netip.MustParseAddr("198.18.0.3")
	hop := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{198, 18, 9, byte(i)}) }
	path := func(port uint16, h, src netip.Addr) {
		sess := Session{Dest: addrHost, Proto: 17, Port: port}
		n.Handle(wire(t, pathMsg(sess, Filter{Src: addrPeer, Port: 4000}, h, 1000)), src, now)
	}
	for i := range 5 { // 3 kept, 2 over the hop's cap
		path(uint16(5000+i), hop(1), addrPeer)
	}
	for i := range 4 { // 2 kept (the source's 5), 2 over the source's cap
		path(uint16(6000+i), hop(2), addrPeer)
	}
	path(7000, hop(3), src2) // another source: kept
	path(5000, hop(1), addrPeer)
	path(6000, hop(2), addrPeer) // refreshes: kept, not counted again
	c := n.Counters()
	if p, _ := n.Counts(); p != 6 || c.OverHop != 2 || c.OverSource != 2 {
		t.Fatalf("%d path states, counters %+v; want 6 kept, 2 over the hop's cap, 2 over the source's", p, c)
	}
	// A PathTear from the hop frees a place of that hop and that source.
	tear := &Message{Type: PathTear, TTL: 64, Session: Session{Dest: addrHost, Proto: 17, Port: 5000}, Hop: &Hop{Addr: hop(1)},
		Sender: &Sender{Template: Filter{Src: addrPeer, Port: 4000}}}
	n.Handle(wire(t, tear), hop(1), now)
	path(5003, hop(1), addrPeer)
	if p, _ := n.Counts(); p != 6 || n.Counters().OverHop != 2 {
		t.Fatalf("after a tear and a new Path: %d path states, counters %+v; want the freed place taken", p, n.Counters())
	}
	if lines := strings.Count(logged.String(), "RSVP message refused"); lines != 2 {
		t.Errorf("%d log lines for 4 refusals of two reasons within a minute, want 2:\n%s", lines, logged.String())
	}
	now = now.Add(time.Minute)
	path(5004, hop(1), addrPeer)
	if !strings.Contains(logged.String(), "count=1") || strings.Count(logged.String(), "RSVP message refused") != 3 {
		t.Errorf("a refusal a minute later is not logged with its count:\n%s", logged.String())
	}
}

// Tears are taken only from the hop that holds the state (RFC 2205
// §3.1.5–3.1.6): a ResvTear, a PathTear and a ResvErr (which removes a
// refused reservation on every hop) from another address, or naming
// another RSVP_HOP, are ignored and counted; the real hop's still work.
func TestTearsOnlyFromTheStateHop(t *testing.T) {
	s := newSim(t, 1e6, time.Second)
	fs := Flowspec{Service: ServiceGuaranteed, Tspec: testTspec, RspecRate: 150000}
	s.setup(t, fs)
	rtr, snd := s.nodes[1], s.nodes[0]
	evil := netip.MustParseAddr("198.18.2.66")
	resvTear := func(hop netip.Addr) *Message {
		return wire(t, &Message{Type: ResvTear, TTL: 64, Session: testSess, Hop: &Hop{Addr: hop}, Style: StyleFF,
			Flows: []FlowDesc{{Filters: []Filter{testSender}}}})
	}
	pathTear := func(hop netip.Addr) *Message {
		return wire(t, &Message{Type: PathTear, TTL: 64, Session: testSess, Hop: &Hop{Addr: hop}, Sender: &Sender{Template: testSender}})
	}
	resvErr := func(hop netip.Addr) *Message {
		f := fs
		return wire(t, &Message{Type: ResvErr, TTL: 64, Session: testSess, Hop: &Hop{Addr: hop}, Error: &ErrorSpec{Node: hop, Code: ErrAdmission, Value: 2},
			Style: StyleFF, Flows: []FlowDesc{{Flowspec: &f, Filters: []Filter{testSender}}}})
	}
	for _, c := range []struct {
		name string
		to   *simNode
		m    *Message
		src  netip.Addr
	}{
		{"ResvTear at the router naming the attacker", rtr, resvTear(evil), evil},
		{"ResvTear at the router naming the receiver, from the attacker", rtr, resvTear(addrD), evil},
		{"ResvTear at the sender naming the receiver (not its next hop)", snd, resvTear(addrD), addrD},
		{"PathTear at the router naming the attacker", rtr, pathTear(evil), evil},
		{"PathTear at the router naming the sender, from the attacker", rtr, pathTear(addrS), evil},
		{"PathTear at the receiver naming the sender (not its previous hop)", s.nodes[2], pathTear(addrS), addrS},
		{"ResvErr at the router from the receiver's side", rtr, resvErr(addrD), addrD},
		{"ResvErr at the receiver naming the attacker", s.nodes[2], resvErr(evil), evil},
	} {
		before := c.to.node.Counters().BadTear
		if outs := c.to.node.Handle(c.m, c.src, s.now); len(outs) != 0 {
			t.Errorf("%s: answered %+v", c.name, outs)
		}
		if a, b := s.installed(t); !a || !b {
			t.Fatalf("%s: installed on sender %v, router %v afterwards; want both kept", c.name, a, b)
		}
		if p, r := c.to.node.Counts(); p != 1 || r != 1 {
			t.Fatalf("%s: %d path, %d reservation states left, want 1 and 1", c.name, p, r)
		}
		if c.to.node.Counters().BadTear != before+1 {
			t.Errorf("%s: not counted as a tear from the wrong hop (%+v)", c.name, c.to.node.Counters())
		}
	}
	// The receiver's own tear still removes it everywhere.
	s.run(2, s.nodes[2].node.RemoveReservation(testKey))
	if a, b := s.installed(t); a || b {
		t.Fatalf("after the receiver's ResvTear: installed on sender %v, router %v", a, b)
	}
}

// A ResvErr needs the node's address toward the hop that asked as its
// RSVP_HOP: without a route there, none is built (it would not encode)
// and the answer is counted as not sent.
func TestResvErrWithoutRoute(t *testing.T) {
	noRoute := netip.MustParseAddr("203.0.113.9")
	n, _, _ := hostNode(t, Config{Local: func(dst netip.Addr) (netip.Addr, bool, error) {
		if dst == noRoute {
			return netip.Addr{}, false, errors.New("network is unreachable")
		}
		return addrHost, dst == addrHost, nil
	}})
	now := time.Unix(1000, 0)
	sess := Session{Dest: addrPeer, Proto: 17, Port: 5004}
	for _, hop := range []netip.Addr{noRoute, addrPeer} {
		outs := n.Handle(wire(t, resvMsg(sess, Filter{Src: addrPeer, Port: 4000}, hop, Flowspec{Service: ServiceCL, Tspec: testTspec})), hop, now)
		for _, o := range outs {
			if _, err := o.Msg.Encode(); err != nil {
				t.Errorf("Resv from %s answered with a %s that does not encode: %v", hop, o.Msg.Type, err)
			}
		}
		want := 1
		if hop == noRoute {
			want = 0
		}
		if len(outs) != want {
			t.Errorf("Resv from %s: %d answers, want %d", hop, len(outs), want)
		}
	}
	if c := n.Counters(); c.NoRoute != 1 {
		t.Errorf("counters %+v, want 1 answer without a route", c)
	}
}
