package shaper

import (
	"strings"
	"testing"
)

// TestBuildQSched: a link with a qsocket scheduler gets the qsched class
// (rate = ceil = its rate, a guarantee beside the classes') and eight
// band leaves with long queues: 0..6 at its rate, priority 0; 7 borrowing; a scheduler that does
// not fit beside the guarantees is refused, naming it.
func TestBuildQSched(t *testing.T) {
	p, err := Build(LinkSpec{Ifindex: 1, Name: "eth0", Rate: 20 * mbit, QSched: 3 * mbit}, defaultClasses(), nil)
	if err != nil {
		t.Fatal(err)
	}
	checkInvariants(t, p)
	m := byMinor(t, p)
	q, ok := m[QSchedMinor]
	if !ok || q.Leaf || q.ParentMinor != RootMinor || q.Rate != 3*mbit || q.Ceil != 3*mbit {
		t.Fatalf("qsched class %+v (present %v), want inner, rate = ceil = 3mbit under the root", q, ok)
	}
	var sum uint64
	for _, c := range p.Classes {
		if c.ParentMinor == RootMinor {
			sum += c.Rate
		}
	}
	if sum != 20*mbit {
		t.Errorf("root's children sum to %d, want the link's 20mbit", sum)
	}
	for b := 0; b < QSchedBands; b++ {
		c := m[QSchedMinor+1+uint16(b)]
		rate, prio := uint64(3*mbit), 0
		if b == QSchedBands-1 {
			rate, prio = MinRate, 7
		}
		if !c.Leaf || c.Prio != prio || c.ParentMinor != QSchedMinor || c.Rate != rate || c.Ceil != 3*mbit || c.QueueLimit != QSchedQueueLimit {
			t.Errorf("band %d: %+v", b, c)
		}
		if QSchedBandClassID(b) != uint32(Handle)<<16|uint32(QSchedMinor+1+uint16(b)) {
			t.Errorf("band %d classid %x", b, QSchedBandClassID(b))
		}
	}
	if m := QSchedMargin(p); m != 2*1514*8*1000/20 {
		t.Errorf("margin %d ns, want two frames at 20 Mbit/s", m)
	}
	if _, err := Build(LinkSpec{Ifindex: 1, Name: "eth0", Rate: 4 * mbit, QSched: 3 * mbit}, defaultClasses(), nil); err == nil ||
		!strings.Contains(err.Error(), "qsocket scheduler") {
		t.Errorf("qsched beside voice's 2mbit on 4mbit: %v, want a refusal naming the qsocket scheduler", err)
	}
	p, err = Build(LinkSpec{Ifindex: 1, Name: "eth0", Rate: 20 * mbit}, defaultClasses(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := byMinor(t, p)[QSchedMinor]; ok {
		t.Error("a link without scheduled qsockets has a qsched class")
	}
}
