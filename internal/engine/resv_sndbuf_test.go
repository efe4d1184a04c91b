package engine

import (
	"context"
	"testing"

	"github.com/hostqos/hostqos/internal/datapath"
	"github.com/hostqos/hostqos/internal/policy"
)

// Sockets open before their guaranteed reservation get its send buffer
// from the poller (one the connect hook sized is left alone); a socket
// that leaves the reservation while open gets its own back; a socket that
// is gone is not retried.
func TestSendBufferOfOpenSockets(t *testing.T) {
	env := newEnv(t, resvConfig)
	e := env.start(t)
	ctx := context.Background()
	if _, err := e.AddReservation(ctx, root, testResv("g", policy.ServiceGuaranteed, 2_000_000), false); err != nil {
		t.Fatal(err)
	}
	var want uint32
	id := uint16(e.slots.Resv["resv:g"] + 1)
	for _, r := range env.k.Rules.Reservations {
		if r.ID == id {
			want = r.SendBuffer
		}
	}
	if want == 0 {
		t.Fatal("the guaranteed reservation has no send buffer")
	}
	const own = 212992
	env.k.SendBuffers = map[uint64]int{1: own, 2: own, 3: own}
	env.k.BindingList = []datapath.Binding{
		{Cookie: 1, Reservation: id, PID: 10, Counted: true},                      // open before
		{Cookie: 2, Reservation: id, PID: 10, Counted: true, SendBufferSet: true}, // connected after
		{Cookie: 4, Reservation: id, PID: 11, Counted: true},                      // gone already
	}
	e.pollReservations() // primes
	e.pollReservations()
	if got := env.k.SendBuffers[1]; got != 2*int(want) {
		t.Errorf("socket open before the reservation: SO_SNDBUF %d, want %d", got, 2*want)
	}
	if got := env.k.SendBuffers[2]; got != own {
		t.Errorf("socket the connect hook sized was changed: %d", got)
	}
	calls := len(env.k.Calls)
	e.pollReservations()
	for _, c := range env.k.Calls[calls:] {
		if len(c) > 13 && c[:13] == "SetSendBuffer" {
			t.Errorf("sized again or retried: %s", c)
		}
	}
	// The reservation goes; the socket stays open (still in the map with
	// the old id until it closes): it gets its own send buffer back.
	if err := e.RemoveReservation(ctx, root, "g"); err != nil {
		t.Fatal(err)
	}
	e.pollReservations()
	if got := env.k.SendBuffers[1]; got != own {
		t.Errorf("after the reservation went: SO_SNDBUF %d, want its own %d back", got, own)
	}
	if got := env.k.SendBuffers[2]; got != own {
		t.Errorf("socket the connect hook sized: %d", got)
	}
}
