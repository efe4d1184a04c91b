package engine

import (
	"context"
	"errors"
	"math"
	"net/netip"
	"strings"
	"testing"

	"github.com/hostqos/hostqos/internal/policy"
	"github.com/hostqos/hostqos/internal/rsvp"
)

// Signalled reservations are the engine's reservation objects: admitted,
// changed, refused with the numbers, removed.
func TestRSVPInstaller(t *testing.T) {
	env := newEnv(t, resvConfig) // 8mbit reservable
	e := env.start(t)
	inst := &RSVPInstaller{E: e}
	k := rsvp.FlowKey{Session: rsvp.Session{Dest: netip.MustParseAddr("198.18.2.2"), Proto: 17, Port: 5004},
		Sender: rsvp.Filter{Src: netip.MustParseAddr("198.18.1.2"), Port: 4000}}
	ts := rsvp.Tspec{Rate: 125000, Bucket: 3000, Peak: 250000, MinUnit: 64, MaxPacket: 1500}
	fs := rsvp.Flowspec{Service: rsvp.ServiceGuaranteed, Tspec: ts, RspecRate: 150000, RspecSlack: 10}
	if err := inst.Install(k, fs); err != nil {
		t.Fatal(err)
	}
	rs, err := e.Reservations(root, RSVPReservationName(k))
	if err != nil || len(rs) != 1 {
		t.Fatalf("reservations %v, %v", rs, err)
	}
	want, _ := RSVPReservation(k, fs)
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
	if rs, _ := e.Reservations(root, RSVPReservationName(k)); len(rs) != 1 || rs[0].Reservation.Peak != 0 || rs[0].Reservation.ServiceRate != 2_000_000 {
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
	inst.RSVPUpcall(rsvp.Event{Kind: "resv-error", Key: k, Node: netip.MustParseAddr("198.18.1.1"), Code: 1, Value: 2, Flowspec: &fs})
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
