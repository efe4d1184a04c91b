package engine

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/hostqos/hostqos/internal/policy"
)

// PutReservation adds, then replaces whole (zero fields too), in one
// change each with the add's and set's admission and events; a refusal
// keeps what was there and is published; a temporary one stays
// temporary, a persistent one and the change's idempotency key survive a
// restart.
func TestPutReservation(t *testing.T) {
	env := newEnv(t, resvConfig) // 8mbit reservable on eth0
	e := env.start(t)
	ctx := context.Background()
	sub, err := e.Subscribe(root, nil, []string{"reservation"})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	get := func(name string) (policy.Reservation, string) {
		t.Helper()
		rs, err := e.Reservations(root, name)
		if err != nil || len(rs) != 1 {
			t.Fatalf("reservation %s: %v, %v", name, rs, err)
		}
		return rs[0].Reservation, rs[0].Source
	}

	g := testResv("g", policy.ServiceGuaranteed, 2_000_000)
	g.ServiceRate, g.Peak, g.Comm, g.DSCP = 3_000_000, 4_000_000, "rtp", policy.DSCP(46)
	if out, created, err := e.PutReservation(ctx, root, g, true); err != nil || !created || out.Name != "g" {
		t.Fatalf("put a new one: %+v created %v, %v", out, created, err)
	}
	if r, src := get("g"); src != "temporary" || r.Comm != "rtp" || r.ServiceRate != 3_000_000 {
		t.Fatalf("added %+v from %s", r, src)
	}

	// Replaced whole: what the new one leaves zero is zero, not kept.
	g2 := testResv("g", policy.ServiceControlledLoad, 1_000_000)
	if _, created, err := e.PutReservation(ctx, root, g2, false); err != nil || created {
		t.Fatalf("put over it: created %v, %v", created, err)
	}
	r, src := get("g")
	r.Temporary = false
	if src != "temporary" || !reflect.DeepEqual(r, g2) {
		t.Fatalf("replaced:\n%+v from %s\nwant\n%+v from temporary", r, src, g2)
	}

	// Refusals (over capacity, M above the MTU, an ordinary user) keep it.
	before, gen := env.k.Snapshot(), env.k.Gen
	over := testResv("g", policy.ServiceGuaranteed, 9_000_000)
	if _, _, err := e.PutReservation(ctx, root, over, true); err == nil || !strings.Contains(err.Error(), "exceed reservable capacity 8mbit") {
		t.Fatalf("over capacity: %v", err)
	}
	env.k.MTUs = map[int]int{2: 1400}
	_, _, err = e.PutReservation(ctx, root, testResv("g", policy.ServiceControlledLoad, 1_000_000), true)
	var fe *policy.FieldError
	if !errors.As(err, &fe) || fe.Field != "max_unit" || !strings.Contains(err.Error(), "above the MTU 1400 of link eth0") {
		t.Fatalf("M above the MTU: %v", err)
	}
	env.k.MTUs = nil
	var fb *ForbiddenError
	if _, _, err := e.PutReservation(ctx, nobody, g, true); !errors.As(err, &fb) {
		t.Fatalf("nobody puts: %v", err)
	}
	if r, _ := get("g"); r.Rate != 1_000_000 || env.k.Gen != gen || !reflect.DeepEqual(env.k.Snapshot(), before) {
		t.Fatalf("a refused put changed something: %+v", r)
	}

	// A persistent one, put under an idempotency key: both kept.
	key := strings.Repeat("p", 32)
	kctx, _ := WithPendingKey(ctx, key, "fp")
	if _, created, err := e.PutReservation(kctx, root, testResv("p", policy.ServiceBestEffort, 1_000_000), false); err != nil || !created {
		t.Fatalf("put a persistent one: created %v, %v", created, err)
	}
	got := kindsOf(next(t, sub))
	want := "[reservation.admitted reservation/g reservation.modified reservation/g reservation.refused reservation/g " +
		"reservation.refused reservation/g reservation.admitted reservation/p]"
	if fmt.Sprint(got) != want {
		t.Fatalf("events %v\nwant %s", got, want)
	}
	e2 := env.start(t)
	rs, err := e2.Reservations(root, "")
	var names []string
	for _, ri := range rs {
		names = append(names, ri.Reservation.Name+"/"+ri.Source)
	}
	if err != nil || fmt.Sprint(names) != "[p/api g/temporary]" {
		t.Fatalf("after a restart: %v, %v; want [p/api g/temporary]", names, err)
	}
	if ent, ok := e2.LookupKey(key); !ok || ent.Fingerprint != "fp" {
		t.Errorf("the put's idempotency key after a restart: %+v %v", ent, ok)
	}
}
