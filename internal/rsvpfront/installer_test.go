package rsvpfront

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/hostqos/hostqos/internal/events"
	"github.com/hostqos/hostqos/internal/policy"
	"github.com/hostqos/hostqos/internal/rsvp"
)

// Signalled reservations are the engine's reservation objects: admitted,
// changed, refused with the numbers, removed.
func TestRSVPInstaller(t *testing.T) {
	env := newEnv(t, resvConfig) // 8mbit reservable
	e := env.start(t)
	inst := &Installer{E: e}
	k := rsvp.FlowKey{Session: rsvp.Session{Dest: netip.MustParseAddr("198.18.2.2"), Proto: 17, Port: 5004},
		Sender: rsvp.Filter{Src: netip.MustParseAddr("198.18.1.2"), Port: 4000}}
	ts := rsvp.Tspec{Rate: 125000, Bucket: 3000, Peak: 250000, MinUnit: 64, MaxPacket: 1500}
	fs := rsvp.Flowspec{Service: rsvp.ServiceGuaranteed, Tspec: ts, RspecRate: 150000, RspecSlack: 10}
	if err := inst.Install(k, fs); err != nil {
		t.Fatal(err)
	}
	rs, err := e.Reservations(root, ReservationName(k))
	if err != nil || len(rs) != 1 {
		t.Fatalf("reservations %v, %v", rs, err)
	}
	want, _ := Reservation(k, fs)
	if want.Rate != 1_000_000 || want.ServiceRate != 1_200_000 || want.Peak != 2_000_000 || want.Burst != 3000 ||
		want.Service != policy.ServiceGuaranteed || want.Local.String() != "198.18.1.2/32" || want.RPort.From != 5004 {
		t.Fatalf("mapped to %+v", want)
	}
	// A changed flowspec changes the object, zero fields too (an
	// infinite peak is no peak term).
	fs.RspecRate = 250000
	fs.Tspec.Peak = float32(math.Inf(1))
	if err := inst.Install(k, fs); err != nil {
		t.Fatal(err)
	}
	if rs, _ := e.Reservations(root, ReservationName(k)); len(rs) != 1 || rs[0].Reservation.Peak != 0 || rs[0].Reservation.ServiceRate != 2_000_000 {
		t.Fatalf("after the change: %+v", rs)
	}
	// Over capacity (8mbit): an admission error with the engine's numbers;
	// the admitted one stays as it was.
	fs.RspecRate = 1_250_000 // 10 mbit
	err = inst.Install(k, fs)
	var ae *rsvp.AdmissionError
	if !errors.As(err, &ae) || ae.Value != 2 || !strings.Contains(ae.Reason, "exceed reservable capacity 8mbit") {
		t.Fatalf("over capacity: %v", err)
	}
	sub, err := e.Subscribe(root, nil, []string{"rsvp"})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	inst.publish(rsvp.Event{Kind: "resv-error", Key: k, Node: netip.MustParseAddr("198.18.1.1"), Code: 1, Value: 2, Flowspec: &fs})
	evs, err := sub.Next(context.Background())
	if err != nil || len(evs) != 1 {
		t.Fatalf("events %v, %v", evs, err)
	}
	if ev := evs[0]; ev.Kind != "rsvp.resv-error" || !strings.Contains(ev.Message, "from 198.18.1.1 (error code 1, value 2)") {
		t.Errorf("upcall published as %+v", evs[0])
	}
	inst.Remove(k)
	if rs, _ := e.Reservations(root, ""); len(rs) != 0 {
		t.Fatalf("after Remove: %d reservations", len(rs))
	}
}

// A router admits a signalled reservation on the outgoing link toward the
// session's destination only (the route's interface, when it is managed)
// and gives it an HTB leaf there only; a destination whose route leaves
// by an unmanaged interface counts on every shaped link.
func TestRSVPAdmitsOnOutgoingLink(t *testing.T) {
	env := newEnv(t, `
[[link]]
name = "eth0"
egress_rate = "10mbit"
[[link]]
name = "eth1"
egress_rate = "10mbit"
`) // 8mbit reservable on each
	env.k.Ifindexes["eth1"] = 3
	e := env.start(t)
	D0, D1, Dx := netip.MustParseAddr("198.18.1.9"), netip.MustParseAddr("198.18.2.2"), netip.MustParseAddr("198.18.3.3")
	routes := map[netip.Addr]int{D0: 2, D1: 3, Dx: 7} // 7: not managed
	inst := &Installer{E: e, Route: func(dst netip.Addr) (int, error) { return routes[dst], nil }}
	key := func(dst netip.Addr, port uint16) rsvp.FlowKey {
		return rsvp.FlowKey{Session: rsvp.Session{Dest: dst, Proto: 17, Port: 5004}, Sender: rsvp.Filter{Src: netip.MustParseAddr("198.18.1.2"), Port: port}}
	}
	fs := func(mbit float32) rsvp.Flowspec {
		return rsvp.Flowspec{Service: rsvp.ServiceGuaranteed, Tspec: rsvp.Tspec{Rate: mbit * 125000, Bucket: 3000, MinUnit: 64, MaxPacket: 1500}, RspecRate: mbit * 125000}
	}
	leaves := func(ifindex int) int {
		n := 0
		for _, c := range env.k.Trees[ifindex].Classes {
			if c.Leaf && strings.HasPrefix(c.Label, "rule ") {
				n++
			}
		}
		return n
	}
	// 6 mbit toward eth1 and 6 mbit toward eth0: each fits its own link.
	if err := inst.Install(key(D1, 4000), fs(6)); err != nil {
		t.Fatalf("6mbit toward eth1: %v", err)
	}
	if err := inst.Install(key(D0, 4001), fs(6)); err != nil {
		t.Fatalf("6mbit toward eth0 with 6mbit reserved toward eth1: %v (counted against every link?)", err)
	}
	rs, _ := e.Reservations(root, ReservationName(key(D1, 4000)))
	if len(rs) != 1 || rs[0].Reservation.Link != "eth1" {
		t.Fatalf("reservation toward eth1: %+v", rs)
	}
	// Another 6 mbit toward eth1: refused, with eth1's numbers.
	err := inst.Install(key(D1, 4002), fs(6))
	var ae *rsvp.AdmissionError
	if !errors.As(err, &ae) || !strings.Contains(ae.Reason, "eth1") || strings.Contains(ae.Reason, "eth0") {
		t.Fatalf("12mbit toward eth1: %v, want refused on eth1", err)
	}
	// Unmanaged outgoing interface: counts on every shaped link, so 3 mbit
	// more does not fit (6 + 3 > 8 on both).
	if err := inst.Install(key(Dx, 4003), fs(3)); err == nil {
		t.Fatal("3mbit toward an unmanaged interface admitted although every shaped link has 6mbit reserved")
	}
	if n0, n1 := leaves(2), leaves(3); n0 != 1 || n1 != 1 {
		t.Errorf("signalled reservations' HTB leaves: eth0 %d, eth1 %d; want one each (on its own link only)", n0, n1)
	}
	// The link views count each link's own.
	for _, l := range e.Links() {
		if l.Reserved != 6_000_000 {
			t.Errorf("link %s: reserved %s, want 6mbit", l.Name, l.Reserved)
		}
	}
}

// A refusal's RSVP error value says why: 3 (MTU too big) when M is above
// a managed link's MTU or above the largest IP packet, 2 (bandwidth
// unavailable) otherwise, even when the reason mentions M; the engine's
// reason goes with it.
func TestRSVPAdmissionValues(t *testing.T) {
	env := newEnv(t, resvConfig) // 8mbit reservable
	e := env.start(t)
	inst := &Installer{E: e}
	k := rsvp.FlowKey{Session: rsvp.Session{Dest: netip.MustParseAddr("198.18.2.2"), Proto: 17, Port: 5004},
		Sender: rsvp.Filter{Src: netip.MustParseAddr("198.18.1.2"), Port: 4000}}
	cl := func(rate, bucket float32, M uint32) rsvp.Flowspec {
		return rsvp.Flowspec{Service: rsvp.ServiceCL, Tspec: rsvp.Tspec{Rate: rate, Bucket: bucket, Peak: float32(math.Inf(1)), MinUnit: 64, MaxPacket: M}}
	}
	env.k.MTUs = map[int]int{2: 1400}
	for _, c := range []struct {
		what string
		fs   rsvp.Flowspec
		v    uint16
		says string
	}{
		{"M above the MTU", cl(125000, 3000, 1500), 3, "field max_unit = 1500: above the MTU 1400 of link eth0"},
		{"M above the largest IP packet", cl(125000, 100000, 70000), 3, "field max_unit = 70000"},
		{"over capacity", cl(1_250_000, 3000, 1400), 2, "exceed reservable capacity 8mbit"},
		{"b below M", cl(125000, 1000, 1400), 2, "field burst = 1000: smaller than the maximum packet size M = 1400"},
	} {
		err := inst.Install(k, c.fs)
		var ae *rsvp.AdmissionError
		if !errors.As(err, &ae) || ae.Value != c.v || !strings.Contains(ae.Reason, c.says) {
			t.Errorf("%s: %v (%+v), want value %d saying %q", c.what, err, ae, c.v, c.says)
		}
	}
	if rs, _ := e.Reservations(root, ""); len(rs) != 0 {
		t.Errorf("after refusals: %d reservations", len(rs))
	}
}

// Upcalls are charged to the remote party that caused them (the event
// limits of remote hosts): path state to its sender, reservation state to
// the receiver, an error or confirmation to the node that sent it; so one
// sender over its limit holds back only its own upcalls.
func TestRSVPUpcallsChargedToRemoteParty(t *testing.T) {
	env := newEnv(t, "")
	e := env.start(t)
	e.SetEventLimits(events.Limits{Rate: 1, Burst: 2})
	sub, err := e.Subscribe(root, nil, []string{"rsvp"})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	inst := &Installer{E: e}
	A, B, D, N := netip.MustParseAddr("198.18.1.2"), netip.MustParseAddr("198.18.1.3"), netip.MustParseAddr("198.18.2.2"), netip.MustParseAddr("198.18.1.1")
	k := func(sender netip.Addr) rsvp.FlowKey {
		return rsvp.FlowKey{Session: rsvp.Session{Dest: D, Proto: 17, Port: 5004}, Sender: rsvp.Filter{Src: sender, Port: 4000}}
	}
	ts := rsvp.Tspec{Rate: 125000, Bucket: 3000, Peak: 250000, MinUnit: 64, MaxPacket: 1500}
	for range 5 {
		inst.publish(rsvp.Event{Kind: "path", Key: k(A), Tspec: &ts}) // A's 2, then held
	}
	inst.publish(rsvp.Event{Kind: "path-timeout", Key: k(A)})        // A's: held
	inst.publish(rsvp.Event{Kind: "resv", Key: k(A)})                // D's
	inst.publish(rsvp.Event{Kind: "resv-error", Key: k(A), Node: N}) // N's
	inst.publish(rsvp.Event{Kind: "path", Key: k(B), Tspec: &ts})    // B's
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	evs, err := sub.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, ev := range evs {
		got = append(got, ev.Kind+" "+fmt.Sprint(ev.Fields["sender"]))
	}
	want := "[rsvp.path 198.18.1.2 rsvp.path 198.18.1.2 rsvp.resv 198.18.1.2 rsvp.resv-error 198.18.1.2 rsvp.path 198.18.1.3]"
	if fmt.Sprint(got) != want {
		t.Errorf("shown %v\nwant %s", got, want)
	}
}
