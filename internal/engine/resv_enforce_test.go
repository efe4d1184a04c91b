package engine

import (
	"context"
	"reflect"
	"strings"
	"testing"

	"github.com/hostqos/hostqos/internal/policy"
)

// TestReservationNeedsEnforcingLink: with no shaped link a guaranteed or
// controlled-load reservation is refused, naming why and the fix, and
// nothing changes; best effort (counted only) is admitted. Once the link
// is shaped it is admitted; the link's shaping taken away by force keeps
// it, reported as not enforced; a change of it or a new one is refused
// until the link is shaped again, which clears the report.
func TestReservationNeedsEnforcingLink(t *testing.T) {
	env := newEnv(t, "[[link]]\nname = \"eth0\"\n")
	e := env.start(t)
	ctx := context.Background()
	const want = `reservation "g": field service = "guaranteed": cannot be enforced: no managed link has an egress_rate`
	g := testResv("g", policy.ServiceGuaranteed, 2_000_000)
	before := env.k.Snapshot()
	if _, err := e.AddReservation(ctx, root, g, false); err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "egress-rate") {
		t.Fatalf("guaranteed on an unshaped link: %v, want …%s… and the fix", err, want)
	}
	if ri, _ := e.Reservations(root, ""); len(ri) != 0 || !reflect.DeepEqual(before, env.k.Snapshot()) {
		t.Fatalf("a refused reservation changed something: %+v", ri)
	}
	cl := testResv("cl", policy.ServiceControlledLoad, 1_000_000)
	cl.Link = "eth0"
	if _, err := e.AddReservation(ctx, root, cl, false); err == nil || !strings.Contains(err.Error(), "its link eth0 has no egress_rate") {
		t.Errorf("controlled load on the unshaped link it names: %v", err)
	}
	if _, err := e.AddReservation(ctx, root, testResv("be", policy.ServiceBestEffort, 1_000_000), false); err != nil {
		t.Errorf("best effort needs no shaping: %v", err)
	}

	if err := e.SetLink(ctx, root, "eth0", policy.Link{EgressRate: 10e6}, LinkChange{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.AddReservation(ctx, root, g, false); err != nil {
		t.Fatalf("guaranteed on a shaped link: %v", err)
	}
	broken := func() []string {
		t.Helper()
		ri, err := e.Reservations(root, "g")
		if err != nil || len(ri) != 1 {
			t.Fatalf("resv show g: %v", err)
		}
		return ri[0].Broken
	}
	if b := broken(); len(b) != 0 {
		t.Errorf("enforced reservation reported broken: %v", b)
	}
	if _, err := e.PatchLink(ctx, root, "eth0", []byte(`{"egress_rate": null}`), LinkChange{}); err == nil {
		t.Fatal("the shaping of a link holding a reservation was taken away unforced")
	}
	if _, err := e.PatchLink(ctx, root, "eth0", []byte(`{"egress_rate": null}`), LinkChange{Force: true}); err != nil {
		t.Fatalf("forced: %v", err)
	}
	if b := broken(); len(b) != 1 || !strings.HasPrefix(b[0], "not enforced: no managed link has an egress_rate") {
		t.Errorf("after the forced change: broken %v, want not enforced", b)
	}
	if _, err := e.SetReservation(ctx, root, "g", []byte(`{"rate": "1mbit"}`), false); err == nil || !strings.Contains(err.Error(), "cannot be enforced") {
		t.Errorf("changing the unenforced reservation: %v, want refused", err)
	}
	if _, err := e.AddReservation(ctx, root, testResv("g2", policy.ServiceGuaranteed, 1_000_000), false); err == nil {
		t.Error("a new reservation was admitted with nothing to enforce it")
	}
	// Other changes go on.
	if _, err := e.AddReservation(ctx, root, testResv("be2", policy.ServiceBestEffort, 1_000_000), false); err != nil {
		t.Errorf("an unrelated change while g is unenforced: %v", err)
	}
	if err := e.SetLink(ctx, root, "eth0", policy.Link{EgressRate: 10e6}, LinkChange{}); err != nil {
		t.Fatal(err)
	}
	if b := broken(); len(b) != 0 {
		t.Errorf("shaped again: broken %v", b)
	}
}
