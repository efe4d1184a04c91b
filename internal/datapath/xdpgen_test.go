package datapath

import (
	"testing"

	"github.com/hostqos/hostqos/internal/testutil"
)

// TestXDPGeneratorIntoShield: the in-kernel generator's frames cross the
// veth as XDP frames and the peer's shield drops and counts every one of
// them against the listed source.
func TestXDPGeneratorIntoShield(t *testing.T) {
	s := openShieldTest(t)
	p := testutil.NewPair(t)
	src := testutil.PairA4.Addr()
	listed := pfx(src.String() + "/32")
	if err := s.SetBlocks([]BlockEntry{{Prefix: listed}}); err != nil {
		t.Fatal(err)
	}
	p.B.MustDo(t, func() error { return s.AttachXDP(p.IndexB, SynLimits{}) })
	frame := BuildFrame(FrameSpec{Src: src, Dst: testutil.PairB4.Addr(), Proto: 17, SPort: 40000, DPort: 5201, Payload: 22})
	const n = 10_000
	p.A.MustDo(t, func() error {
		g, err := NewXDPGenerator(p.IndexA)
		if err != nil {
			return err
		}
		defer g.Close()
		_, err = g.Send(frame, n, 64)
		return err
	})
	cs, err := s.BlockCounters()
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != 1 || cs[0].Prefix != listed || cs[0].Dropped != n {
		t.Fatalf("block counters %+v: want %d dropped for %v", cs, n, listed)
	}
}
