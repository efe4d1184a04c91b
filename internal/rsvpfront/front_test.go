package rsvpfront

import (
	"context"
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/datapath"
	"github.com/hostqos/hostqos/internal/engine"
	"github.com/hostqos/hostqos/internal/events"
	"github.com/hostqos/hostqos/internal/rsvp"
)

// rsvpHop is one engine of rsvpNet with its front door.
type rsvpHop struct {
	e   *engine.Engine
	env *testEnv
	f   *Front
	sub *events.Subscription
}

// rsvpNet is sender s (198.18.1.2) — router r (198.18.1.1 on eth0, the
// unshaped link toward s; 198.18.2.1 on eth1, 10mbit, 8mbit reservable) —
// receiver d (198.18.2.2), each an engine over a fake kernel, their RSVP
// messages encoded, decoded and delivered in memory: a Path (Router
// Alert) from s is intercepted by r, anything else goes to the address.
type rsvpNet struct {
	s, r, d *rsvpHop
}

var (
	rsS  = netip.MustParseAddr("198.18.1.2")
	rsR1 = netip.MustParseAddr("198.18.1.1")
	rsR2 = netip.MustParseAddr("198.18.2.1")
	rsD  = netip.MustParseAddr("198.18.2.2")
)

func newRSVPNet(t *testing.T) *rsvpNet {
	t.Helper()
	n := &rsvpNet{}
	mk := func(config string, ifs map[string]int, router bool, local func(netip.Addr) (netip.Addr, bool, error), from netip.Addr) *rsvpHop {
		env := newEnv(t, config)
		for name, i := range ifs {
			env.k.Ifindexes[name] = i
		}
		e := env.start(t)
		h := &rsvpHop{e: e, env: env}
		h.f = New(e, Options{Router: router, Refresh: time.Second, Local: local})
		h.f.SetSend(func(outs []rsvp.Out) { n.deliver(t, from, local, outs) })
		sub, err := e.Subscribe(root, nil, []string{"rsvp"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(sub.Close)
		h.sub = sub
		return h
	}
	fixed := func(a netip.Addr) func(netip.Addr) (netip.Addr, bool, error) {
		return func(dst netip.Addr) (netip.Addr, bool, error) { return a, dst == a, nil }
	}
	n.s = mk("[[link]]\nname = \"eth0\"\negress_rate = \"100mbit\"\n", nil, false, fixed(rsS), rsS)
	n.r = mk("[[link]]\nname = \"eth0\"\n[[link]]\nname = \"eth1\"\negress_rate = \"10mbit\"\n", map[string]int{"eth1": 3}, true,
		func(dst netip.Addr) (netip.Addr, bool, error) {
			if netip.MustParsePrefix("198.18.1.0/24").Contains(dst) {
				return rsR1, dst == rsR1, nil
			}
			return rsR2, dst == rsR2, nil
		}, rsR2)
	n.d = mk("", nil, false, fixed(rsD), rsD)
	return n
}

func (n *rsvpNet) deliver(t *testing.T, from netip.Addr, local func(netip.Addr) (netip.Addr, bool, error), outs []rsvp.Out) {
	for _, o := range outs {
		b, err := o.Msg.Encode()
		if err != nil {
			t.Errorf("encode %s: %v", o.Msg.Type, err)
			continue
		}
		m, err := rsvp.Decode(b)
		if err != nil {
			t.Errorf("decode %s: %v", o.Msg.Type, err)
			continue
		}
		var to *rsvpHop
		switch {
		case o.Alert && from == rsS:
			to = n.r
		case o.To == rsS:
			to = n.s
		case o.To == rsR1 || o.To == rsR2:
			to = n.r
		case o.To == rsD:
			to = n.d
		default:
			t.Errorf("%s to %s: no such node", o.Msg.Type, o.To)
			continue
		}
		src, _, _ := local(o.To) // the source address of the packet
		next := to.f.Node.Handle(m, src, time.Now())
		to.f.sendOut(next)
	}
}

// fieldText is an event field as text (events carry in-memory types).
func fieldText(ev api.Event, k string) string { return fmt.Sprint(ev.Fields[k]) }

// wait returns the first event of kind on h within a second.
func (h *rsvpHop) wait(t *testing.T, kind string) api.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	for {
		evs, err := h.sub.Next(ctx)
		if err != nil {
			t.Fatalf("no %s event: %v", kind, err)
		}
		for _, ev := range evs {
			if ev.Kind == kind {
				return ev
			}
		}
	}
}

// A receiver's reserve installs the reservation on the sender host and on
// the router; the router's is a 5-tuple rule (no app selector: it matches
// forwarded packets) with an HTB leaf of rate R on its outgoing link. A
// reservation over the router's capacity is refused with a ResvErr naming
// the router, and nothing is installed anywhere; remove tears down at once.
func TestRSVPThreeHops(t *testing.T) {
	n := newRSVPNet(t)
	for _, h := range []*rsvpHop{n.s, n.d} {
		if _, err := h.f.AddSession(root, api.RSVPSessionRequest{Name: "rtp", Dest: "198.18.2.2:5004", Proto: "udp"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := n.s.f.AddSession(nobody, api.RSVPSessionRequest{Name: "x", Dest: "198.18.2.2:5006", Proto: "udp"}); err == nil {
		t.Fatal("an ordinary user added a session")
	}
	ts := api.Tspec{Rate: 250000, Bucket: 3000, MaxUnit: 1500}
	if _, err := n.s.f.Sender(root, "rtp", api.RSVPSenderRequest{Port: 4000, Tspec: ts}); err != nil {
		t.Fatal(err)
	}
	if ev := n.d.wait(t, "rsvp.path"); fieldText(ev, "r") != "250000" {
		t.Fatalf("path upcall %+v", ev)
	}
	fs := ts
	fs.ServiceRate = 275000
	if _, err := n.d.f.Reserve(root, "rtp", api.RSVPReserveRequest{Service: "guaranteed", Flowspec: fs, Confirm: true}); err != nil {
		t.Fatal(err)
	}
	if ev := n.d.wait(t, "rsvp.confirm"); fieldText(ev, "node") != rsS.String() {
		t.Fatalf("confirmed by %v, want the sender", ev.Fields["node"])
	}
	k := rsvp.FlowKey{Session: rsvp.Session{Dest: rsD, Proto: 17, Port: 5004}, Sender: rsvp.Filter{Src: rsS, Port: 4000}}
	name := ReservationName(k)
	for _, h := range []*rsvpHop{n.s, n.r} {
		if rs, err := h.e.Reservations(root, name); err != nil || len(rs) != 1 {
			t.Fatalf("reservation %s: %v, %v", name, rs, err)
		}
	}
	// The router's rule: flow selectors only, bound to the reservation,
	// with a leaf at R = 275000 B/s = 2.2 Mbit/s on eth1.
	var found bool
	for _, r := range n.r.env.k.Rules.Rules {
		if r.Reservation == 0 {
			continue
		}
		found = true
		if len(r.Exes) != 0 || r.Comm != "" || len(r.Cgroups) != 0 || r.UID != nil || r.Proto != 17 ||
			r.Local.String() != "198.18.1.2/32" || r.Remote.String() != "198.18.2.2/32" || r.LPortFrom != 4000 || r.RPortFrom != 5004 {
			t.Errorf("router's rule %+v: want the flow's 5-tuple only", r)
		}
		leaf := false
		for _, c := range n.r.env.k.Trees[3].Classes {
			if c.Leaf && c.Rate == 2_200_000 { // R, policed: a router has no sender to hold back
				leaf = true
			}
		}
		if !leaf {
			t.Errorf("no 2.2mbit leaf on the router's eth1: %+v", n.r.env.k.Trees[3].Classes)
		}
		for _, rv := range n.r.env.k.Rules.Reservations {
			if rv.ID == r.Reservation && (rv.Service != datapath.ServiceControlledLoad || rv.SendBuffer != 0) {
				t.Errorf("router's reservation %+v: want it policed (a forwarded flow has no sender to hold back)", rv)
			}
		}
	}
	if !found {
		t.Fatal("no reservation rule on the router")
	}
	st := n.r.f.Status(root, api.RSVPListQuery{})
	if len(st.Resvs) != 1 || st.Resvs[0].Role != "router" || st.Resvs[0].Reservation != name || len(st.Paths) != 1 || st.Paths[0].PrevHop != rsS.String() {
		t.Errorf("router status %+v", st)
	}

	// ResvTear: gone on every hop at once.
	if err := n.d.f.Remove(root, "rtp"); err != nil {
		t.Fatal(err)
	}
	for _, h := range []*rsvpHop{n.s, n.r} {
		if rs, _ := h.e.Reservations(root, ""); len(rs) != 0 {
			t.Errorf("after remove: %d reservations left", len(rs))
		}
	}
	if _, err := n.d.f.Session(root, "rtp"); err == nil {
		t.Error("removed session still listed")
	}

	// Over the router's 8mbit: ResvErr from the router, nothing installed.
	if _, err := n.d.f.AddSession(root, api.RSVPSessionRequest{Name: "rtp", Dest: "198.18.2.2:5004", Proto: "udp"}); err != nil {
		t.Fatal(err)
	}
	fs.ServiceRate = 1_250_000 // 10 mbit
	if _, err := n.d.f.Reserve(root, "rtp", api.RSVPReserveRequest{Service: "guaranteed", Flowspec: fs}); err != nil {
		t.Fatal(err)
	}
	ev := n.d.wait(t, "rsvp.resv-error")
	if fieldText(ev, "node") != rsR2.String() || fieldText(ev, "error_code") != "1" || fieldText(ev, "error_value") != "2" || fieldText(ev, "R") != "1.25e+06" {
		t.Fatalf("ResvErr %+v: want the router %s, code 1 value 2, R 1250000", ev, rsR2)
	}
	if r := n.r.wait(t, "rsvp.resv-refused"); !strings.Contains(r.Message, "exceed reservable capacity 8mbit") {
		t.Errorf("router's reason: %s", r.Message)
	}
	for _, h := range []*rsvpHop{n.s, n.r} {
		if rs, _ := h.e.Reservations(root, ""); len(rs) != 0 {
			t.Errorf("after the refusal: %d reservations left", len(rs))
		}
	}
	if s, _ := n.d.f.Session(root, "rtp"); !strings.Contains(s.LastEvent, "resv-error 198.18.1.2:4000 from 198.18.2.1 (error code 1, value 2)") {
		t.Errorf("session's last event %q", s.LastEvent)
	}
	// Controlled load within capacity: installed again.
	if _, err := n.d.f.Reserve(root, "rtp", api.RSVPReserveRequest{Service: "controlled-load", Flowspec: api.Tspec{Rate: 250000, Bucket: 3000}}); err != nil {
		t.Fatal(err)
	}
	if rs, _ := n.r.e.Reservations(root, ""); len(rs) != 1 || rs[0].Reservation.Service != "controlled-load" {
		t.Fatalf("reserved again: %+v on the router", rs)
	}
}

// The API's sessions survive a restart: the new front door announces the
// sender's Path again at once and keeps the reserve request for when the
// senders' Paths arrive.
func TestRSVPSessionsRestored(t *testing.T) {
	env := newEnv(t, "")
	e := env.start(t)
	path := filepath.Join(env.dir, "state", "rsvp.json")
	local := func(dst netip.Addr) (netip.Addr, bool, error) { return rsS, dst == rsS, nil }
	var sent []rsvp.Out
	mk := func() *Front {
		f := New(e, Options{Refresh: time.Second, Local: local, StatePath: path})
		f.SetSend(func(o []rsvp.Out) { sent = append(sent, o...) })
		return f
	}
	f := mk()
	for _, name := range []string{"a", "b"} {
		if _, err := f.AddSession(root, api.RSVPSessionRequest{Name: name, Dest: map[string]string{"a": "198.18.2.2:5004", "b": "198.18.2.2:5006"}[name], Proto: "udp"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := f.Sender(root, "a", api.RSVPSenderRequest{Port: 4000, Tspec: api.Tspec{Rate: 250000, Bucket: 3000}}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Reserve(root, "b", api.RSVPReserveRequest{Service: "controlled-load", Flowspec: api.Tspec{Rate: 250000, Bucket: 3000}}); err != nil {
		t.Fatal(err)
	}
	if err := f.Remove(root, "b"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.AddSession(root, api.RSVPSessionRequest{Name: "c", Dest: "198.18.2.2:5008", Proto: "tcp"}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Reserve(root, "c", api.RSVPReserveRequest{Service: "guaranteed", Flowspec: api.Tspec{Rate: 250000, Bucket: 3000, ServiceRate: 300000}}); err != nil {
		t.Fatal(err)
	}

	sent = nil
	g := mk()
	if err := g.Restore(); err != nil {
		t.Fatal(err)
	}
	st := g.Status(root, api.RSVPListQuery{})
	if len(st.Sessions) != 2 || st.Sessions[0].Name != "a" || st.Sessions[0].Sender == nil || st.Sessions[0].Sender.Port != 4000 ||
		st.Sessions[1].Name != "c" || st.Sessions[1].Proto != "tcp" || st.Sessions[1].Reserve == nil || st.Sessions[1].Reserve.Flowspec.ServiceRate != 300000 {
		t.Fatalf("restored %+v", st.Sessions)
	}
	if len(sent) != 1 || sent[0].Msg.Type != rsvp.Path || sent[0].Msg.Sender.Template.Port != 4000 {
		t.Fatalf("after the restore sent %+v, want the Path of a", sent)
	}
	if len(st.Paths) != 1 || st.Paths[0].Role != "sender" {
		t.Errorf("restored path states %+v", st.Paths)
	}
}
