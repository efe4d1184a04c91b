package datapath

// Helpers of the BPF C tested alone: each unit* object (bpf/tests/*.bpf.c,
// see gen.go) includes one header of bpf/ and exposes a helper as a
// program, which these tests run through BPF_PROG_TEST_RUN with crafted
// arguments and compare with what the helper must do. The whole-program
// tests (police_test.go, resv_test.go, classify_test.go) check the same
// helpers in their place.

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/hostqos/hostqos/internal/testutil"
)

// loadUnit loads a test object (its spec from load) into objs, on fresh
// unpinned maps, and closes it at cleanup. A bounded-loop kernel gets the
// bounded loop variant.
func loadUnit(t *testing.T, load func() (*ebpf.CollectionSpec, error), objs interface{ Close() error }) {
	t.Helper()
	testutil.NeedRoot(t)
	spec, err := load()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range spec.Maps {
		m.Pinning = ebpf.PinNone
	}
	if v := spec.Variables["hq_bounded"]; v != nil {
		if err := v.Set(boolByte(!HaveBPFLoop())); err != nil {
			t.Fatal(err)
		}
	}
	if err := spec.LoadAndAssign(objs, nil); err != nil {
		t.Fatalf("load test object: %v", err)
	}
	t.Cleanup(func() { objs.Close() })
}

// ipv4Sum is the ones' complement sum of an IPv4 header's 16-bit words,
// folded: 0xffff for a header whose checksum is right.
func ipv4Sum(h []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(h); i += 2 {
		s += uint32(binary.BigEndian.Uint16(h[i:]))
	}
	for s > 0xffff {
		s = s&0xffff + s>>16
	}
	return uint16(s)
}

// dscpFrame is a frame for hqt_set_dscp: the arguments (family, DSCP, the
// IP header's offset 14) in the destination MAC, the ethertype, then the
// IP header ip.
func dscpFrame(family, dscp uint8, ip []byte) []byte {
	f := make([]byte, 14, 14+len(ip))
	f[0], f[1], f[2] = family, dscp, 14
	if family == uint8(hostqosHqFamilyHQ_AF_INET) {
		binary.BigEndian.PutUint16(f[12:], 0x0800)
	} else {
		binary.BigEndian.PutUint16(f[12:], 0x86dd)
	}
	return append(f, ip...)
}

// ipv4Header is a 20-byte IPv4 header (and 8 bytes of UDP header) with
// TOS tos and a right checksum; rnd varies its other fields.
func ipv4Header(tos uint8, rnd *rand.Rand) []byte {
	h := make([]byte, 28)
	h[0] = 0x45
	h[1] = tos
	binary.BigEndian.PutUint16(h[2:], 28)
	binary.BigEndian.PutUint32(h[4:], rnd.Uint32())
	h[8] = uint8(rnd.IntN(255) + 1)
	h[9] = 17
	binary.BigEndian.PutUint32(h[12:], 0xc6120000|rnd.Uint32()&0x1ffff) // 198.18.0.0/15
	binary.BigEndian.PutUint32(h[16:], 0xc6120000|rnd.Uint32()&0x1ffff)
	binary.BigEndian.PutUint16(h[10:], ^ipv4Sum(h[:20]))
	return h
}

// ipv6Header is an IPv6 header (and 8 bytes of UDP header) with traffic
// class tc and flow label fl.
func ipv6Header(tc uint8, fl uint32, rnd *rand.Rand) []byte {
	h := make([]byte, 48)
	binary.BigEndian.PutUint32(h, 6<<28|uint32(tc)<<20|fl&0xfffff)
	binary.BigEndian.PutUint16(h[4:], 8)
	h[6], h[7] = 17, 64
	copy(h[8:], []byte{0x20, 0x01, 0x0d, 0xb8}) // 2001:db8::/32
	copy(h[24:], []byte{0x20, 0x01, 0x0d, 0xb8})
	for i := 12; i < 24; i++ {
		h[i], h[i+16] = byte(rnd.Uint32()), byte(rnd.Uint32())
	}
	return h
}

// TestSetDSCPAlone: set_dscp (bpf/parse.h) writes the DSCP and keeps the
// ECN bits, for every DSCP from every starting TOS / traffic class; an
// IPv4 header's checksum stays right (for headers of any checksum); the
// IPv6 version and flow label stay; a DSCP the packet already has, or a
// header too short to hold it, leaves the packet byte for byte.
func TestSetDSCPAlone(t *testing.T) {
	var objs unitDscpObjects
	loadUnit(t, loadUnitDscp, &objs)
	run := func(t *testing.T, frame []byte) []byte {
		t.Helper()
		opts := &ebpf.RunOptions{Data: frame, DataOut: make([]byte, len(frame)+256)}
		ret, err := objs.HqtSetDscp.Run(opts)
		if err != nil {
			t.Fatalf("run hqt_set_dscp on % x: %v", frame, err)
		}
		if ret != 0 {
			t.Fatalf("hqt_set_dscp returned %d", ret)
		}
		return opts.DataOut
	}
	v4, v6 := uint8(hostqosHqFamilyHQ_AF_INET), uint8(hostqosHqFamilyHQ_AF_INET6)
	rnd := rand.New(rand.NewPCG(1, 2))

	t.Run("IPv4", func(t *testing.T) {
		for _, tos := range []uint8{0x00, 0x01, 0x02, 0x03, 0x28, 0x2b, 0xb8, 0xba, 0xfc, 0xff} {
			for dscp := uint8(0); dscp < 64; dscp++ {
				ip := ipv4Header(tos, rnd)
				in := dscpFrame(v4, dscp, ip)
				out := run(t, in)
				if len(out) != len(in) {
					t.Fatalf("TOS %#02x, DSCP %d: %d bytes out of %d", tos, dscp, len(out), len(in))
				}
				want := append([]byte(nil), in...)
				want[14+1] = dscp<<2 | tos&3
				if out[15] != want[15] {
					t.Errorf("TOS %#02x, DSCP %d: TOS %#02x, want %#02x", tos, dscp, out[15], want[15])
				}
				if s := ipv4Sum(out[14 : 14+20]); s != 0xffff {
					t.Errorf("TOS %#02x, DSCP %d: header checksum %#04x wrong (sum %#04x)", tos, dscp, binary.BigEndian.Uint16(out[14+10:]), s)
				}
				// Everything but TOS and the checksum is as it was.
				copy(want[14+10:14+12], out[14+10:14+12])
				if string(out) != string(want) {
					t.Errorf("TOS %#02x, DSCP %d: frame\n% x\nwant\n% x", tos, dscp, out, want)
				}
				if dscp == tos>>2 && string(out) != string(in) {
					t.Errorf("TOS %#02x, DSCP %d (no change): frame changed", tos, dscp)
				}
			}
		}
	})

	t.Run("IPv6", func(t *testing.T) {
		for _, tc := range []uint8{0x00, 0x01, 0x02, 0x03, 0xb8, 0xbb, 0xfc, 0xff} {
			for dscp := uint8(0); dscp < 64; dscp++ {
				fl := rnd.Uint32() & 0xfffff
				in := dscpFrame(v6, dscp, ipv6Header(tc, fl, rnd))
				out := run(t, in)
				want := dscpFrame(v6, dscp, nil)
				want = append(want, in[14:]...)
				binary.BigEndian.PutUint32(want[14:], 6<<28|uint32(dscp<<2|tc&3)<<20|fl)
				if string(out) != string(want) {
					t.Errorf("traffic class %#02x, flow label %#05x, DSCP %d: frame\n% x\nwant\n% x", tc, fl, dscp, out, want)
				}
			}
		}
	})

	t.Run("no change", func(t *testing.T) {
		// The DSCP the packet has: nothing is written, so a wrong
		// checksum stays wrong.
		ip := ipv4Header(46<<2|1, rnd)
		ip[10] ^= 0x5a
		in := dscpFrame(v4, 46, ip)
		if out := run(t, in); string(out) != string(in) {
			t.Errorf("same DSCP: frame\n% x\nwant it unchanged\n% x", out, in)
		}
		// Headers cut short by the end of the packet (the offset
		// says where they start): too short to hold TOS (IPv4: a
		// whole header is needed for the checksum) or the traffic
		// class.
		for _, c := range []struct {
			family uint8
			ip     []byte
			left   int // bytes of it in the packet
		}{
			{v4, ipv4Header(0, rnd), 19},
			{v6, ipv6Header(0, 0, rnd), 1},
		} {
			in := dscpFrame(c.family, 46, c.ip)
			in[2] = uint8(len(in) - c.left)
			if out := run(t, in); string(out) != string(in) {
				t.Errorf("family %d, %d bytes of header: frame\n% x\nwant it unchanged\n% x", c.family, c.left, out, in)
			}
		}
	})
}

// A time the tests' coarse clock reads that the real clock is far from
// reaching: a packet the coarse time drops is then dropped at the precise
// time too, so the policer's answers are exact.
const farNS = 1 << 62

// TestGCRAAlone: gcra (bpf/police.h) passes a packet exactly while the
// bucket's backlog after it, tat + cost - now, is within tau, charging
// it; a dropped packet leaves the bucket alone; an idle bucket holds no
// more than tau of credit; a packet the coarse time would drop is passed
// and charged from the precise time when that is late enough.
func TestGCRAAlone(t *testing.T) {
	var objs unitPoliceObjects
	loadUnit(t, loadUnitPolice, &objs)
	run := func(a unitPoliceHqtGcraArgs) unitPoliceHqtGcraArgs {
		t.Helper()
		ret, err := objs.HqtGcra.Run(&ebpf.RunOptions{Context: &a, ContextOut: &a})
		if err != nil || ret != 0 {
			t.Fatalf("hqt_gcra: %d, %v", ret, err)
		}
		return a
	}
	pass, drop := uint32(hostqosHqActionHQ_ACT_PASS), uint32(hostqosHqActionHQ_ACT_DROP)
	const T = farNS
	for _, c := range []struct {
		name                string
		tat, cost, tau, now uint64
		verdict             uint32
		tatAfter            uint64
	}{
		{"empty bucket", 0, 1000, 5000, T, pass, T + 1000},
		{"cost is tau", T, 5000, 5000, T, pass, T + 5000},
		{"cost one past tau", T, 5001, 5000, T, drop, T},
		{"backlog reaches tau", T + 4000, 1000, 5000, T, pass, T + 5000},
		{"backlog one past tau", T + 4001, 1000, 5000, T, drop, T + 4001},
		{"full bucket, one cost later", T + 5000, 1000, 5000, T + 1000, pass, T + 6000},
		{"full bucket, a ns short", T + 5000, 1000, 5000, T + 999, drop, T + 5000},
		{"idle: credit of tau at most", 1, 1000, 5000, T, pass, T + 1000},
	} {
		got := run(unitPoliceHqtGcraArgs{Tat: c.tat, Cost: c.cost, Tau: c.tau, Now: c.now})
		if got.Verdict != c.verdict || got.Tat != c.tatAfter {
			t.Errorf("%s (tat %d, cost %d, tau %d, now %d): verdict %d, tat %d; want %d, %d",
				c.name, int64(c.tat-T), c.cost, c.tau, int64(c.now-T), got.Verdict, int64(got.Tat-T), c.verdict, int64(c.tatAfter-T))
		}
	}

	// The coarse time (1 µs after boot) says drop; the precise time
	// (now) says pass, and the packet is charged from it.
	var before, after unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &before); err != nil {
		t.Fatal(err)
	}
	got := run(unitPoliceHqtGcraArgs{Tat: 1000 + 5000, Cost: 1000, Tau: 5000, Now: 1000})
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &after); err != nil {
		t.Fatal(err)
	}
	from := got.Tat - 1000
	if got.Verdict != pass || from < uint64(before.Nano()) || from > uint64(after.Nano()) {
		t.Errorf("coarse time behind: verdict %d, charged from %d; want pass, from between %d and %d (the precise clock)", got.Verdict, from, before.Nano(), after.Nano())
	}
	// Both times say drop: the bucket is far ahead of either.
	if got := run(unitPoliceHqtGcraArgs{Tat: T, Cost: 1000, Tau: 5000, Now: 1000}); got.Verdict != drop || got.Tat != T {
		t.Errorf("bucket ahead of both clocks: verdict %d, tat %d; want drop, unchanged", got.Verdict, got.Tat)
	}
}

// result is a packed result word (bpf/result.h).
func result(classid uint32, slot uint16, action hostqosHqAction, dscp int8) uint64 {
	return uint64(classid) | uint64(slot)<<32 | uint64(action)<<48 | uint64(uint8(dscp))<<56
}

// TestPoliceResultAlone: police_result (bpf/police.h) turns the police
// action into pass or drop by the slot's policer, at a cost of len bytes
// at ns_q16 (rounded down), and leaves every other field of the result as
// it was; any other action passes through untouched, and a slot without a
// policer passes (fail open).
func TestPoliceResultAlone(t *testing.T) {
	var objs unitPoliceObjects
	loadUnit(t, loadUnitPolice, &objs)
	run := func(res uint64, len uint32, now uint64) uint64 {
		t.Helper()
		a := unitPoliceHqtPoliceArgs{Res: res, Len: len, Now: now}
		ret, err := objs.HqtPoliceResult.Run(&ebpf.RunOptions{Context: &a, ContextOut: &a})
		if err != nil || ret != 0 {
			t.Fatalf("hqt_police_result: %d, %v", ret, err)
		}
		return a.Res
	}
	const (
		T       = farNS
		slot    = 7 // a policer that drops everything now
		open    = 8 // no policer (ns_q16 0)
		metered = 9
	)
	police := func(s uint32, p unitPoliceHqPolice) {
		t.Helper()
		if err := objs.HqPolice.Put(s, &p); err != nil {
			t.Fatal(err)
		}
	}
	police(slot, unitPoliceHqPolice{NsQ16: 1 << 16, Tau: 1, Tat: T + 1<<40})
	police(open, unitPoliceHqPolice{Tat: T + 1<<40})
	acts := []hostqosHqAction{hostqosHqActionHQ_ACT_PASS, hostqosHqActionHQ_ACT_DROP, hostqosHqActionHQ_ACT_OBSERVE, hostqosHqActionHQ_ACT_RESV, hostqosHqActionHQ_ACT_QSOCK}
	for _, a := range acts {
		res := result(0x10020, slot, a, 46)
		if got := run(res, 1500, T); got != res {
			t.Errorf("action %d: result %#x, want it unchanged (%#x)", a, got, res)
		}
	}
	pol := hostqosHqActionHQ_ACT_POLICE
	for _, c := range []struct {
		name string
		slot uint16
	}{{"a slot without a policer", open}, {"no rule", uint16(hostqosHqLimitsHQ_SLOT_NONE)}} {
		if got, want := run(result(0x10020, c.slot, pol, -1), 1500, T), result(0x10020, c.slot, hostqosHqActionHQ_ACT_PASS, -1); got != want {
			t.Errorf("%s: result %#x, want %#x", c.name, got, want)
		}
	}

	// 1.5 ns a byte: 1001 bytes cost 1501 ns (1501.5 rounded down); a
	// burst of three packets, then drops.
	const cost = 1501
	police(metered, unitPoliceHqPolice{NsQ16: 3 << (hostqosHqLimitsHQ_POLICE_SHIFT - 1), Tau: 3 * cost})
	pass, dropped := result(0x10030, metered, hostqosHqActionHQ_ACT_PASS, 10), result(0x10030, metered, hostqosHqActionHQ_ACT_DROP, 10)
	for i, step := range []struct {
		now  uint64
		want uint64
		tat  uint64
	}{
		{T, pass, T + cost},
		{T, pass, T + 2*cost},
		{T, pass, T + 3*cost},
		{T, dropped, T + 3*cost},
		{T + cost - 1, dropped, T + 3*cost},
		{T + cost, pass, T + 4*cost},
	} {
		got := run(result(0x10030, metered, pol, 10), 1001, step.now)
		var p unitPoliceHqPolice
		if err := objs.HqPolice.Lookup(uint32(metered), &p); err != nil {
			t.Fatal(err)
		}
		if got != step.want || p.Tat != step.tat {
			t.Errorf("packet %d at %d: result %#x, bucket at %d; want %#x, %d", i, step.now-T, got, int64(p.Tat-T), step.want, step.tat-T)
		}
	}
}

// TestResvPoliceAlone: resv_police (bpf/resv.h), the seed's policer: a
// packet conforms when L <= M·segs and t >= max(t_m, t_p), and then
// t_m = max(t - b/r, t_m) + max(L, m)/r and t_p = max(t - M/p, t_p) +
// max(L, m)/p, each charge rounded up to the ns; a non-conformant
// guaranteed packet is charged at te = max(t_m, t_p) and its te - t
// counted as shaped; a non-conformant controlled-load packet leaves the
// times and is counted as demoted; an oversized one is only counted; a
// new Tspec epoch starts the times afresh.
func TestResvPoliceAlone(t *testing.T) {
	var objs unitResvObjects
	loadUnit(t, loadUnitResv, &objs)
	const id = 3
	conform, nonconform := unitResvHqConformanceHQ_CONFORM, unitResvHqConformanceHQ_NONCONFORM
	reset := func() {
		t.Helper()
		if err := objs.HqResvState.Put(uint32(id), &unitResvHqResvState{}); err != nil {
			t.Fatal(err)
		}
	}
	state := func() unitResvHqResvState {
		t.Helper()
		var s unitResvHqResvState
		if err := objs.HqResvState.Lookup(uint32(id), &s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	run := func(rv unitResvHqResv, at int64, l uint64, segs uint32) unitResvHqConformance {
		t.Helper()
		// The arguments after an Ethernet header.
		frame, err := binary.Append(make([]byte, 14), binary.NativeEndian, unitResvHqtResvArgs{Rv: rv, T: at, Len: l, Segs: segs})
		if err != nil {
			t.Fatal(err)
		}
		ret, err := objs.HqtResvPolice.Run(&ebpf.RunOptions{Data: frame})
		if err != nil || ret > uint32(nonconform) {
			t.Fatalf("hqt_resv_police: %d, %v", int32(ret), err)
		}
		return unitResvHqConformance(ret)
	}
	type step struct {
		at       int64 // ns after t0
		l        uint64
		segs     uint32
		verdict  unitResvHqConformance
		tm, tp   int64 // after the packet, ns after t0 (tp: with a peak term)
		shapedNS uint64
	}
	check := func(name string, rv unitResvHqResv, steps []step) {
		t.Helper()
		const t0 = 1_000_000_000_000
		reset()
		for i, s := range steps {
			segs := max(s.segs, 1)
			v := run(rv, t0+s.at, s.l, segs)
			st := state()
			tp := st.T_p
			if rv.P_q16 == 0 {
				tp, s.tp = 0, 0
			} else {
				tp -= t0
			}
			if v != s.verdict || st.T_m-t0 != s.tm || tp != s.tp || st.ShapedNs != s.shapedNS {
				t.Errorf("%s, packet %d (%d bytes, %d segments at t0%+d): %s, t_m t0%+d, t_p t0%+d, shaped %d ns; want %s, t0%+d, t0%+d, %d ns",
					name, i, s.l, segs, s.at, v, st.T_m-t0, tp, st.ShapedNs, s.verdict, s.tm, s.tp, s.shapedNS)
			}
		}
	}
	// r = 1 MB/s (1000 ns a byte), b = 3000 bytes (3 ms), m = 100, M = 1500.
	guaranteed := unitResvHqResv{R_q16: 1000 << 16, B_ns: 3_000_000, MinUnit: 100, MaxUnit: 1500, Id: id, Service: uint8(hostqosHqServiceHQ_SVC_GUARANTEED), Epoch: 1}
	check("guaranteed", guaranteed, []step{
		// At one instant: b/r of backlog, then the one packet beyond
		// it still conforms (the test is before the charge).
		{at: 0, l: 1000, verdict: conform, tm: -2_000_000},
		{at: 0, l: 1000, verdict: conform, tm: -1_000_000},
		{at: 0, l: 1000, verdict: conform, tm: 0},
		{at: 0, l: 1000, verdict: conform, tm: 1_000_000},
		// Then it is shaped: charged at te = t_m, te - t counted.
		{at: 0, l: 1000, verdict: nonconform, tm: 2_000_000, shapedNS: 1_000_000},
		{at: 2_000_000 - 1, l: 1000, verdict: nonconform, tm: 3_000_000, shapedNS: 1_000_001},
		{at: 3_000_000, l: 1000, verdict: conform, tm: 4_000_000, shapedNS: 1_000_001},
		// Below m, charged m; above M, not charged.
		{at: 4_000_000, l: 40, verdict: conform, tm: 4_100_000, shapedNS: 1_000_001},
		{at: 4_100_000, l: 1501, verdict: nonconform, tm: 4_100_000, shapedNS: 1_000_001},
		// A GSO packet of 2 segments may hold 2·M and is charged
		// at least 2·m.
		{at: 4_100_000, l: 3000, segs: 2, verdict: conform, tm: 7_100_000, shapedNS: 1_000_001},
		{at: 7_100_000, l: 3001, segs: 2, verdict: nonconform, tm: 7_100_000, shapedNS: 1_000_001},
		{at: 7_100_000, l: 150, segs: 2, verdict: conform, tm: 7_300_000, shapedNS: 1_000_001},
		// Idle for long: the backlog is b/r at most.
		{at: 1_000_000_000, l: 1000, verdict: conform, tm: 1_000_000_000 - 2_000_000, shapedNS: 1_000_001},
	})
	if s := state(); s.ConfPackets != 9 || s.ConfBytes != 6*1000+40+3000+150 || s.NonconfPackets != 4 || s.ShapedPackets != 2 || s.OversizePackets != 2 || s.DemotedBytes != 0 {
		t.Errorf("guaranteed: counters %+v", s)
	}

	cl := guaranteed
	cl.Service = uint8(hostqosHqServiceHQ_SVC_CONTROLLED_LOAD)
	check("controlled load", cl, []step{
		{at: 0, l: 1500, verdict: conform, tm: -1_500_000},
		{at: 0, l: 1500, verdict: conform, tm: 0},
		{at: 0, l: 1500, verdict: conform, tm: 1_500_000},
		// Not charged: it leaves as best effort.
		{at: 0, l: 1500, verdict: nonconform, tm: 1_500_000},
		{at: 1_500_000, l: 1500, verdict: conform, tm: 3_000_000},
	})
	if s := state(); s.DemotedBytes != 1500 || s.ShapedPackets != 0 || s.NonconfBytes != 1500 {
		t.Errorf("controlled load: counters %+v", s)
	}

	// A peak term: p = 10 MB/s (100 ns a byte), M/p = 150 µs.
	peak := guaranteed
	peak.B_ns = 100_000_000
	peak.P_q16 = 100 << 16
	peak.MpNs = 150_000
	check("peak", peak, []step{
		{at: 0, l: 1500, verdict: conform, tm: -100_000_000 + 1_500_000, tp: 0},
		{at: 0, l: 1500, verdict: conform, tm: -100_000_000 + 3_000_000, tp: 150_000},
		// t_p binds: shaped until it.
		{at: 0, l: 1500, verdict: nonconform, tm: -100_000_000 + 4_500_000, tp: 300_000, shapedNS: 150_000},
		{at: 300_000, l: 1500, verdict: conform, tm: -100_000_000 + 6_000_000, tp: 450_000, shapedNS: 150_000},
	})

	// r = 65536/65537 of 1 GB/s: a charge of c bytes is c·65537/65536 ns,
	// rounded up (1000 bytes: 1000.015 → 1001 ns), never down.
	odd := unitResvHqResv{R_q16: 65537, B_ns: 0, MinUnit: 1, MaxUnit: 1 << 20, Id: id, Service: uint8(hostqosHqServiceHQ_SVC_GUARANTEED), Epoch: 1}
	check("rounding", odd, []step{
		{at: 0, l: 1000, verdict: conform, tm: 1001},
		{at: 1001, l: 65536, verdict: conform, tm: 1001 + 65537},
		{at: 1001 + 65537, l: 1, verdict: conform, tm: 1001 + 65537 + 2},
	})

	// A new epoch (a changed Tspec) starts from -inf: the backlog the
	// old one left is forgotten.
	reset()
	for range 5 {
		run(guaranteed, 0, 1500, 1)
	}
	if v := run(guaranteed, 0, 1500, 1); v != nonconform {
		t.Fatalf("burst beyond b: %s, want non-conformant", v)
	}
	next := guaranteed
	next.Epoch = 2
	if v := run(next, 0, 1500, 1); v != conform {
		t.Errorf("first packet of a new epoch: %s, want conformant", v)
	}
	if s := state(); s.Epoch != 2 || s.T_m != -3_000_000+1_500_000 {
		t.Errorf("new epoch: epoch %d, t_m %d; want 2, %d", s.Epoch, s.T_m, -3_000_000+1_500_000)
	}
}

// String names a verdict in test messages.
func (v unitResvHqConformance) String() string {
	switch v {
	case unitResvHqConformanceHQ_CONFORM:
		return "conformant"
	case unitResvHqConformanceHQ_NONCONFORM:
		return "non-conformant"
	}
	return fmt.Sprintf("verdict %d", uint32(v))
}
