package engine

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/hostqos/hostqos/internal/store"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/datapath"
	"github.com/hostqos/hostqos/internal/policy"
	"github.com/hostqos/hostqos/internal/shaper"
)

const resvConfig = `
[[link]]
name = "eth0"
egress_rate = "10mbit"
`

func testResv(name string, svc policy.Service, rate policy.Rate) policy.Reservation {
	r := policy.NewReservation(name)
	r.Proto, r.RPort, r.Service, r.Rate, r.Burst = "udp", policy.PortRange{From: 5004, To: 5004}, svc, rate, 16000
	return r
}

// Admission through the engine: 8mbit reservable on eth0; a refusal names
// the numbers, changes nothing (kernel, state file) and is published.
func TestReservationAdmission(t *testing.T) {
	env := newEnv(t, resvConfig)
	e := env.start(t)
	ctx := context.Background()
	sub, err := e.Subscribe(root, nil, []string{"reservation"})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	g := testResv("g", policy.ServiceGuaranteed, 2_000_000)
	g.ServiceRate = 3_000_000
	if _, err := e.AddReservation(ctx, root, g, false); err != nil {
		t.Fatal(err)
	}
	if _, err := e.AddReservation(ctx, root, testResv("cl", policy.ServiceControlledLoad, 5_000_000), false); err != nil {
		t.Fatal(err)
	}
	before, gen := env.k.Snapshot(), env.k.Gen
	_, err = e.AddReservation(ctx, root, testResv("over", policy.ServiceControlledLoad, 1_000), false)
	want := `guarantees 8.001mbit exceed reservable capacity 8mbit (0.8 × 10mbit): reservation cl 5mbit, reservation g 3mbit, reservation over 1kbit`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("over capacity: %v\nwant …%s…", err, want)
	}
	if env.k.Gen != gen || !reflect.DeepEqual(env.k.Snapshot(), before) {
		t.Fatal("a refused reservation changed the kernel")
	}
	if rs, _ := e.Reservations(root, ""); len(rs) != 2 {
		t.Fatalf("reservations after a refusal: %d, want 2", len(rs))
	}
	// A change of the link that would break them is refused too.
	if err := e.SetLink(ctx, root, "eth0", policy.Link{EgressRate: 9_000_000}, LinkChange{}); err == nil ||
		!strings.Contains(err.Error(), "guarantees 8mbit exceed reservable capacity 7.2mbit") {
		t.Fatalf("link rate below the reservations: %v", err)
	}
	// M above the MTU.
	env.k.MTUs = map[int]int{2: 1400}
	big := testResv("big", policy.ServiceBestEffort, 1_000_000)
	if _, err := e.AddReservation(ctx, root, big, false); err == nil || !strings.Contains(err.Error(), "max_unit = 1500: above the MTU 1400 of link eth0") {
		t.Fatalf("M above the MTU: %v", err)
	}
	big.MaxUnit = 1400
	if _, err := e.AddReservation(ctx, root, big, false); err != nil {
		t.Fatalf("M = MTU: %v", err)
	}
	env.k.MTUs = nil
	if _, err := e.SetReservation(ctx, root, "g", []byte(`{"rate":"1mbit"}`), false); err != nil {
		t.Fatal(err)
	}
	if err := e.RemoveReservation(ctx, root, "cl"); err != nil {
		t.Fatal(err)
	}
	got := kindsOf(next(t, sub))
	wantKinds := "[reservation.admitted reservation/g reservation.admitted reservation/cl reservation.refused reservation/over " +
		"reservation.refused reservation/big reservation.admitted reservation/big reservation.modified reservation/g reservation.removed reservation/cl]"
	if fmt.Sprint(got) != wantKinds {
		t.Fatalf("events %v\nwant %s", got, wantKinds)
	}
}

// Nothing half-applies: a kernel failure midway leaves no reservation, in
// memory or in the state file; a restarted engine has what was admitted.
func TestReservationRollbackAndPersistence(t *testing.T) {
	env := newEnv(t, resvConfig)
	e := env.start(t)
	ctx := context.Background()
	if _, err := e.AddReservation(ctx, root, testResv("a", policy.ServiceGuaranteed, 1_000_000), false); err != nil {
		t.Fatal(err)
	}
	before := env.k.Snapshot()
	// A reservation changes no HTB tree and no datapath rule here, so the
	// kernel is not written (changes write only what they change): the
	// failure is the state write's, after the kernel took the change.
	state := readFile(t, env.cfg.StatePath)
	journal := readFile(t, store.JournalPath(env.cfg.StatePath))
	stateDir := filepath.Dir(env.cfg.StatePath)
	breakWrites(t, e.stPersist)
	if _, err := e.AddReservation(ctx, root, testResv("b", policy.ServiceGuaranteed, 1_000_000), false); err == nil {
		t.Fatal("add with a failing state write succeeded")
	}
	if !reflect.DeepEqual(env.k.Snapshot(), before) {
		t.Fatal("the kernel kept part of a failed change")
	}
	if err := os.Remove(stateDir); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(stateDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(env.cfg.StatePath, state, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(store.JournalPath(env.cfg.StatePath), journal, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := e.AddReservation(ctx, root, testResv("t", policy.ServiceBestEffort, 1_000_000), true); err != nil {
		t.Fatal(err)
	}
	e2 := env.start(t)
	rs, err := e2.Reservations(root, "")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, ri := range rs {
		names = append(names, ri.Reservation.Name+"/"+ri.Source)
	}
	if fmt.Sprint(names) != "[a/api t/temporary]" {
		t.Fatalf("after restart: %v, want [a/api t/temporary]", names)
	}
	ri, err := e2.Reservations(nobody, "a")
	if err != nil {
		t.Fatal(err)
	}
	if a := ri[0].Admission; a.Reserved != 1_000_000 || a.BufferPackets != 250 || a.BufferSize != 2048 || a.Buffer != 250*2048 {
		t.Fatalf("admission figures %+v", a)
	}
	if ri[0].Tspec != (api.Tspec{Rate: 125000, Bucket: 16000, MinUnit: 64, MaxUnit: 1500, ServiceRate: 125000}) {
		t.Fatalf("tspec %+v", ri[0].Tspec)
	}
	if len(ri[0].Links) != 1 || ri[0].Links[0].Capacity != 8_000_000 || ri[0].Links[0].Guaranteed != 1_000_000 {
		t.Fatalf("link figures %+v", ri[0].Links)
	}
}

func TestReservationForbiddenAndNotFound(t *testing.T) {
	env := newEnv(t, resvConfig)
	e := env.start(t)
	ctx := context.Background()
	var fb *ForbiddenError
	if _, err := e.AddReservation(ctx, nobody, testResv("x", policy.ServiceGuaranteed, 1_000_000), false); !errors.As(err, &fb) {
		t.Fatalf("nobody adds: %v", err)
	}
	var nf *NotFoundError
	if _, err := e.SetReservation(ctx, root, "x", []byte(`{"rate":"1mbit"}`), false); !errors.As(err, &nf) {
		t.Fatalf("set of none: %v", err)
	}
	if _, err := e.Reservations(nobody, "x"); !errors.As(err, &nf) {
		t.Fatalf("show of none: %v", err)
	}
	if _, err := e.AddReservation(ctx, root, testResv("x", policy.ServiceGuaranteed, 1_000_000), false); err != nil {
		t.Fatal(err)
	}
	var cf *ConflictError
	if _, err := e.AddReservation(ctx, root, testResv("x", policy.ServiceGuaranteed, 1_000_000), false); !errors.As(err, &cf) {
		t.Fatalf("add twice: %v", err)
	}
}

func TestReservationBrokenByMTU(t *testing.T) {
	env := newEnv(t, resvConfig)
	e := env.start(t)
	ctx := context.Background()
	if _, err := e.AddReservation(ctx, root, testResv("g", policy.ServiceGuaranteed, 1_000_000), false); err != nil {
		t.Fatal(err)
	}
	sub, err := e.Subscribe(nobody, nil, []string{"reservation"})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	env.k.MTUs = map[int]int{2: 1280}
	e.Tick()
	e.Tick() // once only
	env.k.MTUs = nil
	e.Tick()
	evs := next(t, sub)
	if len(evs) != 2 || evs[0].Kind != EventResvBroken || !strings.Contains(evs[0].Message, "M = 1500 is above the MTU 1280 of link eth0") ||
		evs[1].Kind != EventResvRestored {
		t.Fatalf("events %+v", evs)
	}
	env.k.MTUs = map[int]int{2: 1280}
	ri, _ := e.Reservations(root, "g")
	if len(ri[0].Broken) != 1 {
		t.Fatalf("show: broken %v", ri[0].Broken)
	}
}

// What the kernel gets: a rule per reservation before the other rules,
// naming a datapath reservation with the Tspec in bytes; a guaranteed
// leaf at R with its queue; controlled load demoted to the default class.
func TestReservationCompile(t *testing.T) {
	env := newEnv(t, resvConfig+`
[[rule]]
name = "calls"
proto = "tcp"
rport = "5060"
max_sessions = 3
per_session_minbw = "100kbit"
`)
	e := env.start(t)
	ctx := context.Background()
	g := testResv("g", policy.ServiceGuaranteed, 2_000_000)
	g.ServiceRate, g.Peak, g.MinUnit, g.MaxUnit = 3_000_000, 8_000_000, 100, 1400
	if _, err := e.AddReservation(ctx, root, g, false); err != nil {
		t.Fatal(err)
	}
	cl := testResv("cl", policy.ServiceControlledLoad, 1_000_000)
	cl.RPort = policy.PortRange{From: 6000, To: 6000}
	if _, err := e.AddReservation(ctx, root, cl, false); err != nil {
		t.Fatal(err)
	}
	dp := env.k.Rules
	if len(dp.Reservations) != 3 {
		t.Fatalf("datapath reservations %+v, want 3", dp.Reservations)
	}
	byID := map[uint16]datapath.Reservation{}
	for _, r := range dp.Reservations {
		byID[r.ID] = r
	}
	var gr, clr, sess *datapath.Reservation
	for i, r := range dp.Rules {
		rv, ok := byID[r.Reservation]
		if !ok {
			continue
		}
		switch {
		case rv.Service == datapath.ServiceGuaranteed:
			gr = &rv
			if i != 0 && i != 1 {
				t.Errorf("guaranteed reservation's rule is at %d, want before the others", i)
			}
			if r.ClassID != shaper.RuleClassID(r.Slot) {
				t.Errorf("guaranteed rule class %x, want its own leaf", r.ClassID)
			}
		case rv.Service == datapath.ServiceControlledLoad:
			clr = &rv
		case rv.Service == datapath.ServiceNone:
			sess = &rv
		}
	}
	if gr == nil || gr.Rate != 250_000 || gr.Bucket != 16000 || gr.Peak != 1_000_000 || gr.MinUnit != 100 || gr.MaxUnit != 1400 || gr.SendBuffer == 0 {
		t.Fatalf("guaranteed %+v", gr)
	}
	if clr == nil || clr.Rate != 125_000 || clr.DemoteClassID != shaper.ClassLeafID(e.slots.Classes["default"]) || clr.DemoteDSCP != 0 {
		t.Fatalf("controlled load %+v", clr)
	}
	if sess == nil || sess.MaxSessions != 3 || sess.Rate != 0 {
		t.Fatalf("session limit %+v", sess)
	}
	// The guaranteed leaf: shaped to the Tspec (r = 2 Mbit/s, p = 8 Mbit/s
	// in frames of M = 1400: × 1414/1400), under a class of its own, a
	// queue of at least ⌈b/m⌉ = 160.
	tree := env.k.Trees[2]
	slot := e.slots.Rules["resv:g"]
	var leaf, parent *shaper.HTBClass
	for i := range tree.Classes {
		if tree.Classes[i].Minor == uint16(shaper.RuleClassID(uint16(slot))&0xffff) {
			leaf = &tree.Classes[i]
		}
		if tree.Classes[i].Minor == shaper.TspecMinor(uint16(e.slots.Resv["resv:g"]+1)) {
			parent = &tree.Classes[i]
		}
	}
	if leaf == nil || parent == nil || leaf.ParentMinor != parent.Minor || leaf.Rate < 2_020_000 || leaf.Rate > 2_020_016 ||
		leaf.Ceil < 8_080_000 || leaf.Ceil > 8_080_016 || leaf.Cburst != 1414 || leaf.QueueLimit < 160 || parent.Ceil != leaf.Rate {
		t.Fatalf("guaranteed leaf %+v under %+v", leaf, parent)
	}
	// Ids stay when others come and go.
	id := e.slots.Resv["resv:g"]
	if err := e.RemoveReservation(ctx, root, "cl"); err != nil {
		t.Fatal(err)
	}
	if e.slots.Resv["resv:g"] != id {
		t.Fatal("the id of g changed when cl went")
	}
}

// The poller publishes bindings, unbindings, refusals (with who and why,
// seen by the socket's owner) and rate-limited violations.
func TestReservationEventsFromKernel(t *testing.T) {
	env := newEnv(t, resvConfig)
	e := env.start(t)
	ctx := context.Background()
	if _, err := e.AddReservation(ctx, root, testResv("g", policy.ServiceGuaranteed, 1_000_000), false); err != nil {
		t.Fatal(err)
	}
	id := uint16(e.slots.Resv["resv:g"] + 1)
	sub, err := e.Subscribe(alice, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	key := datapath.FlowKey{Proto: 17, Remote: netip.MustParseAddrPort("198.18.0.2:5004")}
	env.k.BindingList = []datapath.Binding{{Cookie: 7, Reservation: id, PID: 42, UID: alice.UID, Comm: "rtp", Key: key}}
	env.k.Refusals = []datapath.Refusal{{Seq: 1, Kind: datapath.RefusedConnect, Reservation: id, Limit: 3, PID: 43, UID: alice.UID, Comm: "rtp", Key: key},
		{Seq: 2, Kind: datapath.RefusedConnect, Reservation: id, Limit: 3, PID: 44, UID: 2000, Comm: "x", Key: key}}
	env.k.ResvCounters = map[uint16]datapath.ResvCounters{id: {NonConformantPackets: 5, ShapedPackets: 5, Sessions: 1}}
	e.Tick()
	env.k.BindingList = nil
	env.k.ResvCounters = map[uint16]datapath.ResvCounters{id: {NonConformantPackets: 9}}
	e.Tick() // the second violation within 5 s is not published
	got := kindsOf(next(t, sub))
	want := "[socket.bound reservation/g session.refused reservation/g policing.violation reservation/g socket.unbound reservation/g]"
	if fmt.Sprint(got) != want {
		t.Fatalf("alice sees %v\nwant %s", got, want)
	}
	// show: counters and sockets; nobody does not see alice's socket.
	env.k.BindingList = []datapath.Binding{{Cookie: 7, Reservation: id, PID: 42, UID: alice.UID, Comm: "rtp", Key: key}}
	ri, _ := e.Reservations(alice, "g")
	if len(ri[0].Sockets) != 1 || ri[0].Sockets[0].Remote != "198.18.0.2:5004" || ri[0].Counters == nil || ri[0].Counters.NonConformantPackets != 9 {
		t.Fatalf("show as alice: %+v", ri[0])
	}
	if ri, _ := e.Reservations(nobody, "g"); len(ri[0].Sockets) != 0 {
		t.Fatalf("nobody sees %+v", ri[0].Sockets)
	}
}

// TestBindOnlyForNewReservations: the walk that binds open sockets is
// asked for after a reservation is added or changed, and not for a
// removal or a rule change while reservations are held; the engine never
// walks on a change's path.
func TestBindOnlyForNewReservations(t *testing.T) {
	env := newEnv(t, resvConfig)
	e := env.start(t)
	ctx := context.Background()
	wanted := func() bool {
		select {
		case <-e.BindWanted():
			return true
		default:
			return false
		}
	}
	wanted()
	if _, err := e.AddReservation(ctx, root, testResv("a", policy.ServiceGuaranteed, 1_000_000), false); err != nil {
		t.Fatal(err)
	}
	if !wanted() {
		t.Error("no bind asked for after a reservation was added")
	}
	if n := len(env.k.CallsOf("BindOpenSockets")); n != 0 {
		t.Errorf("the change walked the sockets %d times on its path", n)
	}
	r := rule("plain")
	r.RPort = policy.PortRange{From: 7000, To: 7000}
	if _, err := e.AddRule(ctx, root, r, false); err != nil {
		t.Fatal(err)
	}
	if wanted() {
		t.Error("a rule change asked for a bind")
	}
	if _, err := e.SetReservation(ctx, root, "a", []byte(`{"rate":"2mbit"}`), false); err != nil {
		t.Fatal(err)
	}
	if !wanted() {
		t.Error("no bind asked for after a reservation changed")
	}
	if err := e.RemoveReservation(ctx, root, "a"); err != nil {
		t.Fatal(err)
	}
	if wanted() {
		t.Error("a removal asked for a bind")
	}
	e.BindOpenSockets()
	if c := env.k.CallsOf("BindOpenSockets"); len(c) != 1 {
		t.Errorf("BindOpenSockets walked %d times, want 1", len(c))
	} else if c[0] != "BindOpenSockets [17]" {
		t.Errorf("a UDP reservation's bind was %q, want the UDP walk alone", c[0])
	}
	e.BindOpenSockets() // nothing asked since: no walk
	if n := len(env.k.CallsOf("BindOpenSockets")); n != 1 {
		t.Errorf("BindOpenSockets walked %d times with nothing asked, want 1 in all", n)
	}
}
