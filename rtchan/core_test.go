package rtchan

import (
	"errors"
	"testing"
	"time"
)

// KB is the seed's kilobyte (its messages are 60 KB).
const KB = 1024

func newTestSim(t *testing.T, pol Policy) (*Sim, *SimEndpoint) {
	t.Helper()
	s, err := NewSim(SeedParams(), pol)
	if err != nil {
		t.Fatal(err)
	}
	ep, err := s.Init("rx", 100)
	if err != nil {
		t.Fatal(err)
	}
	return s, ep
}

func TestHqrtLoneMessageWithinAnalysis(t *testing.T) {
	s, ep := newTestSim(t, DefaultPolicy())
	spec := Spec{Name: "a", Mmax: 60 * KB, Bmax: 2, Imin: 50 * time.Millisecond, Delay: 40 * time.Millisecond}
	ch, err := s.Create("rx", spec)
	if err != nil {
		t.Fatal(err)
	}
	msg := make([]byte, 60*KB)
	msg[0] = 7
	if err := s.Send(ch, msg); err != nil {
		t.Fatal(err)
	}
	s.RunUntil(time.Second)
	m, ok := ep.Recv()
	if !ok {
		t.Fatal("no message delivered")
	}
	st := SeedParams().Service(60 * KB)
	if m.Seq != 1 || m.Size != 60*KB || m.Data[0] != 7 || m.Deadline != 40*time.Millisecond {
		t.Fatalf("message %+v", m)
	}
	if resp := m.Arrival; resp > st.Ts+st.Tw || resp < st.Lxm {
		t.Fatalf("response %v outside [Lxm %v, Ts+Tw %v]", resp, st.Lxm, st.Ts+st.Tw)
	}
	if m.Laxity != m.Deadline-m.Arrival {
		t.Fatalf("laxity %v", m.Laxity)
	}
	if _, ok := ep.Recv(); ok {
		t.Fatal("extra message")
	}
}

func TestHqrtLogicalArrivalAndOverflow(t *testing.T) {
	s, ep := newTestSim(t, DefaultPolicy())
	spec := Spec{Name: "a", Mmax: 8 * KB, Bmax: 2, Imin: 10 * time.Millisecond, Delay: 5 * time.Millisecond}
	ch, err := s.Create("rx", spec)
	if err != nil {
		t.Fatal(err)
	}
	var dropped int
	for i := 0; i < 5; i++ {
		if err := s.SendSize(ch, 8*KB, nil); errors.Is(err, ErrQueueFull) {
			dropped++
		} else if err != nil {
			t.Fatal(err)
		}
	}
	// The handler has not dequeued yet (it is paying its context switch),
	// so a Bmax=2 queue takes two messages and drops three.
	if dropped != 3 {
		t.Fatalf("dropped %d, want 3", dropped)
	}
	// A message twice Mmax stretches the next logical gap to 2·Imin.
	s.RunUntil(12 * time.Millisecond)
	if err := s.SendSize(ch, 16*KB, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.SendSize(ch, 8*KB, nil); err != nil {
		t.Fatal(err)
	}
	s.RunUntil(time.Second)
	var deadlines []time.Duration
	for {
		m, ok := ep.Recv()
		if !ok {
			break
		}
		deadlines = append(deadlines, m.Deadline)
		if m.Laxity < 0 {
			t.Errorf("message %d late by %v", m.Seq, -m.Laxity)
		}
		if m.Arrival < m.Deadline-5*time.Millisecond {
			t.Errorf("message %d completed at %v before its logical arrival", m.Seq, m.Arrival)
		}
	}
	want := []time.Duration{5, 15, 25, 45}
	if len(deadlines) != len(want) {
		t.Fatalf("deadlines %v", deadlines)
	}
	for i := range want {
		if deadlines[i] != want[i]*time.Millisecond {
			t.Fatalf("deadlines %v, want %v ms", deadlines, want)
		}
	}
	st, _ := s.Stats(ch)
	if st.MsgsDropped != 3 || st.PktsDropped != 6 || st.MmaxViolations != 1 || st.MsgsSent != 4 {
		t.Fatalf("stats %+v", st)
	}
}

func TestHqrtBlockedSenderAndClose(t *testing.T) {
	pol := DefaultPolicy()
	pol.DropOverflow = false
	s, ep := newTestSim(t, pol)
	ch, err := s.Create("rx", Spec{Name: "a", Mmax: 4 * KB, Bmax: 1, Imin: time.Millisecond, Delay: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 4; i++ {
		if err := s.SendSize(ch, 4*KB, nil); err != nil {
			t.Fatal(err)
		}
	}
	s.RunUntil(100 * time.Millisecond)
	if ep.Len() != 4 {
		t.Fatalf("delivered %d, want 4 (held back, not dropped)", ep.Len())
	}
	if err := s.Close(ch); err != nil {
		t.Fatal(err)
	}
	if err := s.SendSize(ch, 10, nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("send after close: %v", err)
	}
	if err := s.SendSize(99, 10, nil); !errors.Is(err, ErrNoChannel) {
		t.Fatalf("send on unknown channel: %v", err)
	}
}
