package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/policy"
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
	if err := e.SetLink(ctx, root, "eth0", policy.Link{EgressRate: 9_000_000}, false); err == nil ||
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
	stateDir := filepath.Dir(env.cfg.StatePath)
	if err := os.RemoveAll(stateDir); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(stateDir, nil, 0o644); err != nil {
		t.Fatal(err)
	}
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
