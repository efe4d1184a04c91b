package xdpgen

import (
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/hostqos/hostqos/internal/datapath/xdp"
	"github.com/hostqos/hostqos/internal/testutil"
)

// openShield is an XDP shield pinned in the test's own directory.
func openShield(t *testing.T) *xdp.Shield {
	t.Helper()
	testutil.NeedRoot(t)
	s, err := xdp.OpenShield(testutil.TempPinDir(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestGeneratorIntoShield: the in-kernel generator's frames cross the
// veth as XDP frames and the peer's shield drops and counts every one of
// them against the listed source.
func TestGeneratorIntoShield(t *testing.T) {
	s := openShield(t)
	p := testutil.NewPair(t)
	src := testutil.PairA4.Addr()
	listed := netip.PrefixFrom(src, 32)
	if err := s.SetBlocks([]xdp.BlockEntry{{Prefix: listed}}); err != nil {
		t.Fatal(err)
	}
	p.B.MustDo(t, func() error { return s.AttachXDP(p.IndexB, xdp.SynLimits{}) })
	frame := BuildFrame(FrameSpec{Src: src, Dst: testutil.PairB4.Addr(), Proto: 17, SPort: 40000, DPort: 5201, Payload: 22})
	const n = 10_000
	p.A.MustDo(t, func() error {
		g, err := NewGenerator(p.IndexA)
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

// TestInjector: frames injected into a device's receive path reach the
// stack (a UDP socket reads them) with the pass-everything program, and,
// run through the shield's own program (Borrow), are dropped and counted
// against the listed source as when it is attached.
func TestInjector(t *testing.T) {
	s := openShield(t)
	p := testutil.NewPair(t)
	src := testutil.PairA4.Addr()
	listed := netip.PrefixFrom(src, 32)
	if err := s.SetBlocks([]xdp.BlockEntry{{Prefix: listed}}); err != nil {
		t.Fatal(err)
	}
	frame := BuildFrame(FrameSpec{Src: src, Dst: testutil.PairB4.Addr(), Proto: 17, SPort: 40000, DPort: 5201, Payload: 22})
	const n = 10_000
	p.B.MustDo(t, func() error {
		ifi, err := net.InterfaceByIndex(p.IndexB)
		if err != nil {
			return err
		}
		copy(frame[0:6], ifi.HardwareAddr)
		c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: testutil.PairB4.Addr().AsSlice(), Port: 5201})
		if err != nil {
			return err
		}
		defer c.Close()
		g, err := NewInjector(p.IndexB)
		if err != nil {
			return err
		}
		defer g.Close()
		if _, err := g.Send(frame, 3, 0); err != nil {
			return err
		}
		_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
		buf := make([]byte, 64)
		if k, err := c.Read(buf); err != nil || k != 22 {
			return fmt.Errorf("read an injected datagram: %d bytes, %v", k, err)
		}
		sh := Borrow(s.XDPProgram(), p.IndexB)
		defer sh.Close()
		_, err = sh.Send(frame, n, 64)
		return err
	})
	cs, err := s.BlockCounters()
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != 1 || cs[0].Prefix != listed || cs[0].Dropped != n {
		t.Fatalf("block counters %+v: want %d dropped for %v", cs, n, listed)
	}
	// The borrowed program is still the shield's: it runs after Close.
	if _, err := s.TestRun(frame, p.IndexB); err != nil {
		t.Fatalf("test-run the shield after closing its borrowed injector: %v", err)
	}
}
