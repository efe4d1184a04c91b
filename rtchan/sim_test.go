package rtchan

import (
	"reflect"
	"testing"
	"time"
)

// TestHqrtSimTrace: the trace sees each packet of a completed message once,
// transmitted after its message's logical arrival and, for a real-time
// channel, within the deadline it carries; the message itself with the
// laxity its receiver gets; and a message dropped at a full queue, whole.
func TestHqrtSimTrace(t *testing.T) {
	s, ep := newTestSim(t, DefaultPolicy())
	spec := Spec{Name: "a", Mmax: 8 * KB, Bmax: 2, Imin: 10 * time.Millisecond, Delay: 5 * time.Millisecond}
	ch, err := s.Create("rx", spec)
	if err != nil {
		t.Fatal(err)
	}
	var pkts []SimPacket
	var msgs []Message
	var drops []SimDrop
	s.Trace(SimTrace{
		Packet:  func(p SimPacket) { pkts = append(pkts, p) },
		Message: func(m Message) { msgs = append(msgs, m) },
		Drop:    func(d SimDrop) { drops = append(drops, d) },
	})
	for i := 0; i < 3; i++ { // Bmax 2: the third is dropped
		_ = s.SendSize(ch, 8*KB, nil)
	}
	s.RunUntil(time.Second)

	n := SeedParams().Packets(8 * KB)
	if len(pkts) != 2*n {
		t.Fatalf("traced %d packets, want %d (two messages of %d)", len(pkts), 2*n, n)
	}
	bytes := 0
	for _, p := range pkts {
		bytes += p.Size
		if p.Channel != ch || p.BestEffort || p.Start < p.Logical || p.Done <= p.Start || p.Done > p.Deadline {
			t.Errorf("packet %+v", p)
		}
	}
	if bytes != 2*8*KB {
		t.Errorf("traced packets carry %d bytes, want %d", bytes, 2*8*KB)
	}
	if len(msgs) != 2 || msgs[0].Seq != 1 || msgs[1].Seq != 2 {
		t.Fatalf("traced messages %+v", msgs)
	}
	for _, m := range msgs {
		got, ok := ep.Recv()
		if !ok || !reflect.DeepEqual(got, m) || m.Laxity != m.Deadline-m.Arrival || m.Laxity < 0 {
			t.Errorf("traced %+v, received %+v", m, got)
		}
	}
	if len(drops) != 1 || drops[0] != (SimDrop{Channel: ch, Seq: 3, Packets: n, Of: n}) {
		t.Errorf("traced drops %+v, want message 3's %d packets", drops, n)
	}
}
