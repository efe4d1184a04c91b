package xdp

import (
	"errors"
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"

	"github.com/hostqos/hostqos/internal/lab/xdpgen"
	"github.com/hostqos/hostqos/internal/testutil"
)

const (
	xdpDrop = 1
	xdpPass = 2
	loIndex = 1 // test runs need an existing ingress interface
)

func pfx(s string) netip.Prefix { return netip.MustParsePrefix(s) }
func addr(s string) netip.Addr  { return netip.MustParseAddr(s) }

func openShieldTest(t *testing.T) *Shield {
	t.Helper()
	testutil.NeedRoot(t)
	s, err := OpenShield(testutil.TempPinDir(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// tcpFrame is a TCP frame with the given flags (0x02 SYN, 0x10 ACK).
func tcpFrame(src, dst string, dport uint16, flags byte, payload int) []byte {
	f := xdpgen.BuildFrame(xdpgen.FrameSpec{Src: addr(src), Dst: addr(dst), Proto: 6, SPort: 40000, DPort: dport, Payload: payload})
	off := 14 + 20
	if addr(src).Is6() {
		off = 14 + 40
	}
	f[off+13] = flags
	return f
}

func udpFrame(src, dst string, payload int) []byte {
	return xdpgen.BuildFrame(xdpgen.FrameSpec{Src: addr(src), Dst: addr(dst), Proto: 17, SPort: 1000, DPort: 2000, Payload: payload})
}

func TestShieldDropList(t *testing.T) {
	s := openShieldTest(t)
	if err := s.SetBlocks([]BlockEntry{
		{Prefix: pfx("198.18.0.0/16")},
		{Prefix: pfx("198.18.5.0/24"), Rate: 8000}, // longer prefix: quarantine
		{Prefix: pfx("2001:db8:bad::/48")},
		{Prefix: pfx("2001:db8:bad:1::/64"), Rate: 8000},
		{Prefix: pfx("198.18.7.7/32"), Rate: 8000},         // a host entry (hash) inside a dropped /16
		{Prefix: pfx("2001:db8:bad:2::7/128"), Rate: 8000}, // … and inside a dropped /48
		{Prefix: pfx("198.51.100.9/32")},                   // a host entry alone
	}); err != nil {
		t.Fatal(err)
	}
	arp := make([]byte, 60)
	arp[12], arp[13] = 0x08, 0x06
	cases := []struct {
		name  string
		frame []byte
		want  uint32
	}{
		{"v4 listed /16", udpFrame("198.18.1.1", "198.19.0.1", 100), xdpDrop},
		{"v4 unlisted", udpFrame("198.19.1.1", "198.19.0.1", 100), xdpPass},
		{"v4 longest prefix quarantined (first frame fits the burst)", udpFrame("198.18.5.7", "198.19.0.1", 100), xdpPass},
		{"v6 listed /48", udpFrame("2001:db8:bad:2::1", "2001:db8::1", 100), xdpDrop},
		{"v6 unlisted", udpFrame("2001:db8:beef::1", "2001:db8::1", 100), xdpPass},
		{"v6 longest prefix quarantined", udpFrame("2001:db8:bad:1::9", "2001:db8::1", 100), xdpPass},
		{"v4 host entry wins over its /16", udpFrame("198.18.7.7", "198.19.0.1", 100), xdpPass},
		{"v6 host entry wins over its /48", udpFrame("2001:db8:bad:2::7", "2001:db8::1", 100), xdpPass},
		{"v4 host entry drops", udpFrame("198.51.100.9", "198.19.0.1", 100), xdpDrop},
		{"v4 next to a host entry", udpFrame("198.51.100.10", "198.19.0.1", 100), xdpPass},
		{"non-IP (ARP)", arp, xdpPass},
		{"truncated IPv4", udpFrame("198.18.1.1", "198.19.0.1", 100)[:20], xdpPass},
		{"truncated IPv6 (Ethernet header only; the kernel runs nothing shorter)", udpFrame("2001:db8:bad::1", "2001:db8::1", 10)[:14], xdpPass},
		{"truncated TCP of a listed-free source", tcpFrame("198.19.1.1", "198.19.0.1", 80, 0x02, 0)[:40], xdpPass},
	}
	for _, c := range cases {
		got, err := s.TestRun(c.frame, loIndex)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got != c.want {
			t.Errorf("%s: verdict %d, want %d", c.name, got, c.want)
		}
	}
	// Per-entry counters: one packet each, frame bytes.
	cs, err := s.BlockCounters()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]BlockCounters{}
	for _, c := range cs {
		got[c.Prefix.String()] = c
	}
	v4len, v6len := uint64(len(udpFrame("198.18.1.1", "198.19.0.1", 100))), uint64(len(udpFrame("2001:db8::1", "2001:db8::2", 100)))
	for p, want := range map[string]BlockCounters{
		"198.18.0.0/16":       {Packets: 1, Bytes: v4len, Dropped: 1},
		"198.18.5.0/24":       {Packets: 1, Bytes: v4len},
		"2001:db8:bad::/48":   {Packets: 1, Bytes: v6len, Dropped: 1},
		"2001:db8:bad:1::/64": {Packets: 1, Bytes: v6len},
	} {
		g := got[p]
		if g.Packets != want.Packets || g.Bytes != want.Bytes || g.Dropped != want.Dropped {
			t.Errorf("%s: counters %+v, want %+v", p, g, want)
		}
	}
	st, err := s.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st.NotIP != 1 || st.Truncated != 3 || st.Blocked != 3 {
		t.Errorf("stats %+v", st)
	}
	// Removing an entry passes its traffic; re-adding starts from zero.
	if err := s.SetBlocks([]BlockEntry{{Prefix: pfx("198.18.5.0/24"), Rate: 8000}}); err != nil {
		t.Fatal(err)
	}
	if v, _ := s.TestRun(udpFrame("198.18.1.1", "198.19.0.1", 100), loIndex); v != xdpPass {
		t.Errorf("removed entry still drops")
	}
	if err := s.SetBlocks([]BlockEntry{{Prefix: pfx("198.18.0.0/16")}}); err != nil {
		t.Fatal(err)
	}
	cs, _ = s.BlockCounters()
	if len(cs) != 1 || cs[0].Packets != 0 {
		t.Errorf("re-added entry counters %+v", cs)
	}
}

func TestShieldQuarantineRate(t *testing.T) {
	s := openShieldTest(t)
	// 8 kbit/s = 1000 bytes a second; a burst of at least 3028 bytes.
	if err := s.SetBlocks([]BlockEntry{{Prefix: pfx("198.18.5.0/24"), Rate: 8000}}); err != nil {
		t.Fatal(err)
	}
	f := udpFrame("198.18.5.7", "198.19.0.1", 1000-14-20-8) // 1000 bytes
	passed := 0
	for i := 0; i < 50; i++ {
		v, err := s.TestRun(f, loIndex)
		if err != nil {
			t.Fatal(err)
		}
		if v == xdpPass {
			passed++
		}
	}
	// The burst (3028 bytes of tolerance: 4 frames) plus what refills
	// while the loop runs (1 frame a second).
	if passed < 3 || passed > 6 {
		t.Fatalf("quarantine passed %d of 50 1000-byte frames at 8 kbit/s, want about 4", passed)
	}
	cs, _ := s.BlockCounters()
	if cs[0].Packets != 50 || cs[0].Dropped != uint64(50-passed) {
		t.Errorf("counters %+v (passed %d)", cs[0], passed)
	}
}

func TestShieldSynThrottle(t *testing.T) {
	s := openShieldTest(t)
	// SYN limits on lo without attaching (test runs give the ifindex).
	if err := s.setSyn(loIndex, SynLimits{Rate: 1, Burst: 3, PerSource: 1, PerSourceBurst: 2}); err != nil {
		t.Fatal(err)
	}
	syn := func(src string) []byte { return tcpFrame(src, "198.19.0.1", 80, 0x02, 0) }
	run := func(f []byte) uint32 {
		v, err := s.TestRun(f, loIndex)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	// Per source: 2 SYNs, then dropped.
	for i, want := range []uint32{xdpPass, xdpPass, xdpDrop, xdpDrop} {
		if v := run(syn("198.18.9.1")); v != want {
			t.Errorf("SYN %d from one source: verdict %d, want %d", i, v, want)
		}
	}
	// Packets of established connections are never throttled.
	for _, fl := range []byte{0x12 /* SYN-ACK */, 0x10 /* ACK */, 0x18 /* PSH-ACK */, 0x11 /* FIN-ACK */, 0x04 /* RST */} {
		for i := 0; i < 5; i++ {
			if v := run(tcpFrame("198.18.9.1", "198.19.0.1", 80, fl, 10)); v != xdpPass {
				t.Fatalf("flags %#x: verdict %d", fl, v)
			}
		}
	}
	// Link limit: burst 3, two used by the source above.
	if v := run(syn("198.18.9.2")); v != xdpPass {
		t.Errorf("third SYN on the link dropped")
	}
	if v := run(syn("198.18.9.3")); v != xdpDrop {
		t.Errorf("fourth SYN on the link passed")
	}
	// IPv6 SYNs count per /64.
	if v := run(tcpFrame("2001:db8:9::1", "2001:db8::1", 80, 0x02, 0)); v != xdpDrop {
		t.Errorf("IPv6 SYN over the link limit passed")
	}
	// Protected clients bypass both limits: exact port, or any port.
	if err := s.SetProtected([]Protected{{Addr: addr("198.18.9.1"), Port: 80}, {Addr: addr("2001:db8:9::1")}}); err != nil {
		t.Fatal(err)
	}
	if v := run(syn("198.18.9.1")); v != xdpPass {
		t.Errorf("protected client (port 80) dropped")
	}
	if v := run(tcpFrame("198.18.9.1", "198.19.0.1", 81, 0x02, 0)); v != xdpDrop {
		t.Errorf("protected client's SYN to another port passed")
	}
	if v := run(tcpFrame("2001:db8:9::1", "2001:db8::1", 443, 0x02, 0)); v != xdpPass {
		t.Errorf("protected IPv6 client (any port) dropped")
	}
	c, err := s.SynCounters(loIndex)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := s.Stats()
	t.Logf("syn counters %+v, stats %+v", c, st)
	if c.Seen != 10 || c.Dropped != 5 || st.SynProtected != 2 {
		t.Errorf("syn counters %+v, protected %d; want seen 10, dropped 5, protected 2", c, st.SynProtected)
	}
	// Without limits on the link, SYNs pass.
	if err := s.setSyn(loIndex, SynLimits{}); err != nil {
		t.Fatal(err)
	}
	if v := run(syn("198.18.9.4")); v != xdpPass {
		t.Errorf("SYN dropped on a link without limits")
	}
}

func TestShieldCapacity(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	s := openShieldTest(t)
	var es []BlockEntry
	for i := 0; i < 100_000; i++ {
		es = append(es, BlockEntry{Prefix: netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}), 32)})
	}
	es = append(es, BlockEntry{Prefix: pfx("2001:db8::/32")})
	if err := s.SetBlocks(es); err != nil {
		t.Fatal(err)
	}
	for _, a := range []string{"10.0.0.0", "10.1.134.159"} {
		if v, _ := s.TestRun(udpFrame(a, "198.19.0.1", 10), loIndex); v != xdpDrop {
			t.Errorf("%s of 100,000 entries not dropped", a)
		}
	}
	if v, _ := s.TestRun(udpFrame("10.1.134.160", "198.19.0.1", 10), loIndex); v != xdpPass {
		t.Errorf("unlisted address dropped")
	}
	// A reopened shield adopts all of them.
	s2, err := OpenShield(s.dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if len(s2.entries) != len(es) {
		t.Fatalf("adopted %d entries of %d", len(s2.entries), len(es))
	}
}

// TestShieldAttachRefusesForeignXDP: a link that has another XDP program
// keeps it; the shield says so and changes nothing. On a free link it
// attaches, is idempotent, and detaches.
func TestShieldAttachRefusesForeignXDP(t *testing.T) {
	s := openShieldTest(t)
	p := testutil.NewPair(t)
	foreign, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.XDP, License: "MIT",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 2), asm.Return()}})
	if err != nil {
		t.Fatal(err)
	}
	defer foreign.Close()
	p.A.MustDo(t, func() error {
		l, err := link.AttachXDP(link.XDPOptions{Program: foreign, Interface: p.IndexA})
		if err != nil {
			return err
		}
		t.Cleanup(func() { l.Close() })
		err = s.AttachXDP(p.IndexA, SynLimits{})
		if err == nil || !strings.Contains(err.Error(), "another XDP program") {
			t.Errorf("attach over a foreign XDP program: %v", err)
		}
		return nil
	})
	p.B.MustDo(t, func() error {
		for i := 0; i < 2; i++ {
			if err := s.AttachXDP(p.IndexB, SynLimits{Rate: 10}); err != nil {
				return err
			}
		}
		if got := s.XDPAttached(); len(got) != 1 || got[0] != p.IndexB {
			t.Errorf("attached to %v", got)
		}
		return s.DetachXDP(p.IndexB)
	})
	if got := s.XDPAttached(); len(got) != 0 {
		t.Errorf("still attached to %v", got)
	}
}

// TestShieldAdoptsPinnedXDP: a shield opened over the pins of a closed one
// (a restarted daemon) takes over its XDP link and swaps its own program
// into it, so the link never leaves the interface; a pinned XDP link
// whose name gives another interface than its own is stale and dropped.
func TestShieldAdoptsPinnedXDP(t *testing.T) {
	s := openShieldTest(t)
	p := testutil.NewPair(t)
	p.B.MustDo(t, func() error { return s.AttachXDP(p.IndexB, SynLimits{}) })
	s.Close() // as if killed: the pins stay

	linkProg := func(s *Shield) (onLink, own ebpf.ProgramID) {
		t.Helper()
		s.mu.Lock()
		l := s.xdp[p.IndexB]
		s.mu.Unlock()
		li, err := l.Info()
		if err != nil {
			t.Fatal(err)
		}
		pi, err := s.objs.HqxXdp.Info()
		if err != nil {
			t.Fatal(err)
		}
		id, _ := pi.ID()
		return li.Program, id
	}
	s2, err := OpenShield(s.dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := s2.XDPAttached(); len(got) != 1 || got[0] != p.IndexB {
		t.Fatalf("restarted shield attached to %v, want [%d]", got, p.IndexB)
	}
	if l, own := linkProg(s2); l != own {
		t.Errorf("adopted link runs program %d, want the restarted shield's %d", l, own)
	}
	s2.Close()

	stale := s2.links().Path(p.IndexB + 1000)
	if err := os.Rename(s2.links().Path(p.IndexB), stale); err != nil {
		t.Fatal(err)
	}
	s3, err := OpenShield(s.dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s3.Close()
	if got := s3.XDPAttached(); len(got) != 0 {
		t.Errorf("a stale pin adopted: attached to %v", got)
	}
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stale pin %s kept: %v", stale, err)
	}
}
