package rsvp

import (
	"net/netip"
	"testing"
	"time"
)

func gs(rate float32) Flowspec {
	return Flowspec{Service: ServiceGuaranteed, Tspec: testTspec, RspecRate: rate}
}

func TestLUBAndBlockade(t *testing.T) {
	cl := Flowspec{Service: ServiceCL, Tspec: Tspec{Rate: 1000, Bucket: 4000, Peak: 2000, MinUnit: 64, MaxPacket: 1500}}
	cl2 := Flowspec{Service: ServiceCL, Tspec: Tspec{Rate: 3000, Bucket: 1000, Peak: 5000, MinUnit: 20, MaxPacket: 1000}}
	want := Flowspec{Service: ServiceCL, Tspec: Tspec{Rate: 3000, Bucket: 4000, Peak: 5000, MinUnit: 20, MaxPacket: 1500}}
	if got := lub(cl, cl2); got != want {
		t.Errorf("lub of two controlled loads %+v, want %+v", got, want)
	}
	g := Flowspec{Service: ServiceGuaranteed, Tspec: cl.Tspec, RspecRate: 9000, RspecSlack: 50}
	g2 := Flowspec{Service: ServiceGuaranteed, Tspec: cl.Tspec, RspecRate: 5000, RspecSlack: 10}
	if got := lub(g, g2); got.RspecRate != 9000 || got.RspecSlack != 10 || got.Service != ServiceGuaranteed {
		t.Errorf("lub of two guaranteed %+v: want R 9000, S 10", got)
	}
	if got := lub(cl2, g); got.Service != ServiceGuaranteed || got.RspecRate != 9000 || got.Tspec != want.Tspec {
		t.Errorf("lub of controlled load and guaranteed %+v: want guaranteed, R 9000, the larger bucket", got)
	}
	for _, c := range []struct {
		name  string
		qb, q Flowspec
		want  bool
	}{
		{"equal", gs(9000), gs(9000), true},
		{"larger", gs(9000), gs(12000), true},
		{"strictly smaller", gs(9000), gs(5000), false},
		{"incomparable (larger R, smaller bucket)", gs(9000), Flowspec{Service: ServiceGuaranteed, Tspec: Tspec{Rate: testTspec.Rate, Bucket: testTspec.Bucket * 2, Peak: testTspec.Peak, MinUnit: testTspec.MinUnit, MaxPacket: testTspec.MaxPacket}, RspecRate: 5000}, true},
		{"guaranteed over controlled load", gs(9000), Flowspec{Service: ServiceCL, Tspec: testTspec}, false},
	} {
		if got := blockades(c.qb, c.q); got != c.want {
			t.Errorf("%s: blockades = %v, want %v", c.name, got, c.want)
		}
	}
}

// mergeBed is a router with one previous hop (the sender, upstream) and
// next hops on its downstream network, fed messages by hand.
type mergeBed struct {
	t    *testing.T
	n    *Node
	inst *fakeInstall
	k    FlowKey
	now  time.Time
}

var (
	addrUp   = netip.MustParseAddr("198.18.1.2") // the sender, previous hop
	addrMine = netip.MustParseAddr("198.18.1.1") // the router toward it
	addrDown = netip.MustParseAddr("198.18.2.1") // the router toward next hops
)

func newMergeBed(t *testing.T) *mergeBed {
	b := &mergeBed{t: t, now: time.Unix(1000, 0)}
	b.k = FlowKey{Session{Dest: netip.MustParseAddr("198.18.9.9"), Proto: 17, Port: 5004}, Filter{Src: addrUp, Port: 4000}}
	b.inst = &fakeInstall{name: "router", capacity: 1e9, installed: map[FlowKey]Flowspec{}}
	b.n = NewNode(Config{
		Local: func(dst netip.Addr) (netip.Addr, bool, error) {
			if netip.MustParsePrefix("198.18.1.0/24").Contains(dst) {
				return addrMine, false, nil
			}
			return addrDown, false, nil
		},
		Install: b.inst, Refresh: time.Second, Router: true,
	})
	b.handle(pathMsg(b.k.Session, b.k.Sender, addrUp, 1000), addrUp)
	return b
}

func (b *mergeBed) handle(m *Message, src netip.Addr) []Out {
	b.t.Helper()
	return b.n.Handle(wire(b.t, m), src, b.now)
}

// resv is a Resv from next hop nh asking for R = rate.
func (b *mergeBed) resv(nh string, rate float32) []Out {
	b.t.Helper()
	a := netip.MustParseAddr(nh)
	return b.handle(resvMsg(b.k.Session, b.k.Sender, a, gs(rate)), a)
}

// refused is a ResvErr from the previous hop: admission failure of fs at
// node refuser.
func (b *mergeBed) refused(fs Flowspec, refuser netip.Addr) []Out {
	b.t.Helper()
	m := &Message{Type: ResvErr, TTL: 64, Session: b.k.Session, Hop: &Hop{Addr: addrUp}, Style: StyleFF,
		Error: &ErrorSpec{Node: refuser, Code: ErrAdmission, Value: 2}, Flows: []FlowDesc{{Flowspec: &fs, Filters: []Filter{b.k.Sender}}}}
	return b.handle(m, addrUp)
}

// upstream is the flowspec of the one Resv in outs sent to the previous
// hop (ok false: none).
func upstream(outs []Out) (Flowspec, bool) {
	for _, o := range outs {
		if o.To == addrUp && o.Msg.Type == Resv {
			return *o.Msg.Flows[0].Flowspec, true
		}
	}
	return Flowspec{}, false
}

func errorsTo(outs []Out) map[netip.Addr]*Message {
	got := map[netip.Addr]*Message{}
	for _, o := range outs {
		if o.Msg.Type == ResvErr {
			got[o.To] = o.Msg
		}
	}
	return got
}

// Two next hops ask to reserve one flow: the router installs the larger
// and sends it upstream; the smaller one changes nothing upstream; when
// the larger leaves, the smaller one is installed and sent upstream at
// once (RFC 2205 §2.2, §3.1.6).
func TestMergeNextHops(t *testing.T) {
	b := newMergeBed(t)
	a, c := "198.18.2.10", "198.18.2.20"
	if fs, ok := upstream(b.resv(a, 500000)); !ok || fs.RspecRate != 500000 {
		t.Fatalf("first request: upstream %+v %v, want R 500000", fs, ok)
	}
	if fs, ok := upstream(b.resv(c, 900000)); !ok || fs.RspecRate != 900000 {
		t.Fatalf("a larger second request: upstream %+v %v, want the merge R 900000", fs, ok)
	}
	if got := b.inst.installed[b.k].RspecRate; got != 900000 {
		t.Fatalf("installed R %v, want the merge 900000", got)
	}
	if _, ok := upstream(b.resv(a, 600000)); ok {
		t.Fatal("a change under the merge went upstream: nothing there changed")
	}
	pg := b.n.View(nil, 0, 0)
	if len(pg.Resvs) != 1 || pg.Resvs[0].NextHops != 2 || pg.Resvs[0].Flowspec.RspecRate != 900000 {
		t.Fatalf("view %+v: want one reservation merged from 2 next hops, R 900000", pg.Resvs)
	}
	// A tear from one hop leaves the other's request.
	tear := &Message{Type: ResvTear, TTL: 64, Session: b.k.Session, Hop: &Hop{Addr: netip.MustParseAddr(c)}, Style: StyleFF,
		Flows: []FlowDesc{{Filters: []Filter{b.k.Sender}}}}
	fs, ok := upstream(b.handle(tear, netip.MustParseAddr(c)))
	if !ok || fs.RspecRate != 600000 || b.inst.installed[b.k].RspecRate != 600000 {
		t.Fatalf("after the larger hop's tear: upstream %+v %v, installed %+v; want R 600000 both", fs, ok, b.inst.installed[b.k])
	}
	// A style that conflicts with the merged requests' is refused.
	m := resvMsg(b.k.Session, b.k.Sender, netip.MustParseAddr(c), gs(200000))
	m.Style = StyleSE
	if e := errorsTo(b.handle(m, netip.MustParseAddr(c)))[netip.MustParseAddr(c)]; e == nil || e.Error.Code != ErrConflictingStyle {
		t.Fatalf("a conflicting style: ResvErr %+v, want code %d", e, ErrConflictingStyle)
	}
	// The remaining request times out by itself: nothing stays.
	b.now = b.now.Add(Lifetime(time.Second) + time.Second)
	b.n.Tick(b.now)
	if len(b.inst.installed) != 0 {
		t.Fatalf("installed after every request timed out: %+v", b.inst.installed)
	}
}

// The second killer reservation problem (RFC 2205 §2.5, §3.5): a next
// hop's large request, refused upstream, must not keep a smaller one of
// another next hop from being reserved. The ResvErr goes to the large
// request's hop only; the smaller is installed and sent upstream at once;
// while the blockade lasts (Kb·R) the large request is answered at once
// with the upstream refusal, installing nothing and sending nothing up;
// after it, it is tried again.
func TestBlockadeKeepsSmallerRequests(t *testing.T) {
	b := newMergeBed(t)
	small, big := netip.MustParseAddr("198.18.2.10"), netip.MustParseAddr("198.18.2.20")
	refuser := netip.MustParseAddr("198.18.0.7")
	b.resv(small.String(), 500000)
	fs, _ := upstream(b.resv(big.String(), 5000000))
	outs := b.refused(fs, refuser)
	errs := errorsTo(outs)
	if len(errs) != 1 || errs[big] == nil || errs[big].Error.Node != refuser {
		t.Fatalf("ResvErr sent to %v, want only the large request's hop %s, naming %s", errs, big, refuser)
	}
	if up, ok := upstream(outs); !ok || up.RspecRate != 500000 {
		t.Fatalf("after the refusal: upstream %+v %v, want the smaller request at once", up, ok)
	}
	if got := b.inst.installed[b.k].RspecRate; got != 500000 {
		t.Fatalf("installed R %v, want the smaller request's 500000", got)
	}

	// The large request's refresh within Kb·R: refused at once with the
	// upstream node's error, nothing changes.
	b.now = b.now.Add(time.Second)
	outs = b.resv(big.String(), 5000000)
	if e := errorsTo(outs)[big]; e == nil || e.Error.Node != refuser || e.Error.Code != ErrAdmission || e.Error.Value != 2 {
		t.Fatalf("blockaded request answered %+v, want the upstream refusal by %s", outs, refuser)
	}
	if _, ok := upstream(outs); ok || b.inst.installed[b.k].RspecRate != 500000 {
		t.Fatalf("blockaded request went upstream or was installed: %+v", b.inst.installed[b.k])
	}
	if c := b.n.Counters(); c.Blockaded != 1 {
		t.Fatalf("Blockaded counter %d, want 1", c.Blockaded)
	}
	// A request strictly smaller than the blockade is not blockaded.
	if up, ok := upstream(b.resv(big.String(), 2000000)); !ok || up.RspecRate != 2000000 {
		t.Fatalf("a request under the blockade: upstream %+v %v, want R 2000000", up, ok)
	}
	b.handle(&Message{Type: ResvTear, TTL: 64, Session: b.k.Session, Hop: &Hop{Addr: big}, Style: StyleFF,
		Flows: []FlowDesc{{Filters: []Filter{b.k.Sender}}}}, big)

	// After Kb·R the blockade is gone: the large request is tried again.
	b.now = b.now.Add(Kb*time.Second + time.Millisecond)
	b.n.Tick(b.now)
	b.resv(small.String(), 500000) // keep the small request alive
	if up, ok := upstream(b.resv(big.String(), 5000000)); !ok || up.RspecRate != 5000000 {
		t.Fatalf("after Kb·R: upstream %+v %v, want the large request tried again", up, ok)
	}
}

// A next hop's Resv beyond MaxNextHops for one flow is refused and
// counted; the merged requests stay as they were.
func TestNextHopsCapped(t *testing.T) {
	b := newMergeBed(t)
	for i := range MaxNextHops {
		b.resv(netip.AddrFrom4([4]byte{198, 18, 2, byte(10 + i)}).String(), 200000)
	}
	one := netip.AddrFrom4([4]byte{198, 18, 2, 99})
	outs := b.resv(one.String(), 9000000)
	if e := errorsTo(outs)[one]; e == nil || e.Error.Code != ErrTrafficControl {
		t.Fatalf("one next hop over the cap answered %+v, want a traffic control error", outs)
	}
	if c := b.n.Counters(); c.OverNhop != 1 || b.inst.installed[b.k].RspecRate != 200000 {
		t.Fatalf("OverNhop %d, installed %+v: want 1 and R 200000", c.OverNhop, b.inst.installed[b.k])
	}
}
