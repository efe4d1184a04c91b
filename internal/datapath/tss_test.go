package datapath

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// refMatch is the reference evaluation (Evaluate) of packet s, the first
// of its flow, under rules: the index of the first rule whose selectors
// all match, -1 for none. App rules never match (the packet has no socket
// identity).
func refMatch(rules []Rule, s FrameSpec) int {
	k := FlowKey{Proto: s.Proto, Local: netip.AddrPortFrom(s.Src, s.SPort), Remote: netip.AddrPortFrom(s.Dst, s.DPort)}
	return Evaluate(rules, &Subject{Key: &k, DSCP: int8(s.TOS >> 2), NoIdent: true})
}

// randomPacket draws a packet from addresses inside and around the pools'
// prefixes.
// matchedRule test-runs the egress classifier on frame s and returns the
// index of the rule that classified it (-1: none), from the priority the
// classifier gave the packet (0x10000 + slot + 1, as the rules' slots are
// their indices here).
func matchedRule(t *testing.T, d *Datapath, s FrameSpec) int {
	t.Helper()
	res, err := d.TestRun(BuildFrame(s), 1)
	if err != nil {
		t.Fatal(err)
	}
	if res.Priority == 0 {
		return -1
	}
	return int(res.Priority-0x10000) - 1
}

func randomPacket(rng *rand.Rand) FrameSpec {
	v4 := func() netip.Addr {
		switch rng.IntN(4) {
		case 0:
			return netip.AddrFrom4([4]byte{198, 18, 1, []byte{7, 200, 129, 1}[rng.IntN(4)]})
		case 1:
			return netip.AddrFrom4([4]byte{198, 19, 5, byte(8 + rng.IntN(3))})
		case 2:
			return netip.AddrFrom4([4]byte{198, 18, byte(rng.IntN(4)), byte(rng.IntN(256))})
		}
		return netip.AddrFrom4([4]byte{10, byte(rng.IntN(256)), byte(rng.IntN(256)), byte(rng.IntN(256))})
	}
	v6 := func() netip.Addr {
		b := netip.MustParseAddr("2001:db8:1::7").As16()
		switch rng.IntN(4) {
		case 0:
		case 1:
			b[15] = byte(rng.IntN(256))
		case 2:
			b[5] = byte(rng.IntN(4))
			b[9] = byte(rng.IntN(256))
		default:
			b[3] = byte(rng.IntN(256))
		}
		return netip.AddrFrom16(b)
	}
	port := func() uint16 {
		switch rng.IntN(3) {
		case 0:
			return uint16(5000 + rng.IntN(20))
		case 1:
			return []uint16{53, 80, 443, 1023, 1024, 5000, 5005, 5010, 5011, 6000}[rng.IntN(10)]
		}
		return uint16(rng.IntN(65536))
	}
	s := FrameSpec{SPort: port(), DPort: port(), TOS: []uint8{0, 10, 46, 12}[rng.IntN(4)]<<2 | uint8(rng.IntN(4))}
	if rng.IntN(10) < 6 {
		s.Src, s.Dst = v4(), v4()
		s.Proto = []uint8{6, 17, 1, 47}[rng.IntN(4)]
	} else {
		s.Src, s.Dst = v6(), v6()
		s.Proto = []uint8{6, 17, 58, 47}[rng.IntN(4)]
	}
	if s.Proto != 6 && s.Proto != 17 {
		s.SPort, s.DPort = 0, 0
	}
	return s
}

// TestClassifyMatchesReference: the classifier's tuple-space search gives
// the same rule as the reference evaluation (first match in policy order)
// for 100,000 random packets, each the first of its flow, under a policy
// of 10,000 rules (1,000 with exe selectors, 9,000 flow rules of many
// overlapping shapes), through the BPF test-run.
func TestClassifyMatchesReference(t *testing.T) {
	if !HaveBPFLoop() {
		t.Skip("10,000 rules need bpf_loop (Linux 5.17); TestClassifyMatchesReferenceBounded is this kernel's")
	}
	d := openTest(t, Options{FlowTableSize: 1 << 17})
	rng := rand.New(rand.NewPCG(9, 10_000))
	classifyMatchesReference(t, d, rng, randomRules(rng, 10_000, 1_000), 100_000, 300)
}

// TestClassifyMatchesReferenceBounded is TestClassifyMatchesReference on
// the bounded datapath (kernels without bpf_loop), at its full capacity:
// its rule search must end where the bpf_loop one does. Fewer packets:
// the policy is 20 times smaller.
func TestClassifyMatchesReferenceBounded(t *testing.T) {
	d := openTest(t, Options{FlowTableSize: 1 << 16, Loops: LoopsBounded})
	if d.Loops() != LoopsBounded {
		t.Fatalf("loops %q, want %q", d.Loops(), LoopsBounded)
	}
	rng := rand.New(rand.NewPCG(9, 10_000))
	// As many rules of each kind as the bounded datapath holds, or nearly
	// (randomRules spreads its app rules evenly).
	var rules []Rule
	for apps := BoundedAppRules; ; apps++ {
		rules = randomRules(rng, BoundedFlowRules+BoundedAppRules, apps)
		n := 0
		for _, r := range rules {
			if len(r.Exes) > 0 || r.Comm != "" || len(r.Cgroups) > 0 || r.UID != nil {
				n++
			}
		}
		if n <= BoundedAppRules && len(rules)-n <= BoundedFlowRules {
			t.Logf("%d rules without app selectors, %d with", len(rules)-n, n)
			break
		}
	}
	classifyMatchesReference(t, d, rng, rules, 20_000, 50)
	// One rule more of either kind is refused, and nothing changes.
	gen := d.Generation()
	flows := randomRules(rng, BoundedFlowRules+1, 0)
	apps := randomRules(rng, BoundedAppRules+1, 0)
	for i := range apps {
		apps[i].Exes = []FileID{{Dev: 1, Ino: uint64(i + 1)}}
	}
	for _, rules := range [][]Rule{flows, apps} {
		err := d.Apply(Policy{Rules: rules})
		if err == nil || !strings.Contains(err.Error(), "bounded datapath") {
			t.Errorf("%d rules on the bounded datapath: error %v, want a refusal", len(rules), err)
		}
	}
	if g := d.Generation(); g != gen {
		t.Errorf("a refused policy changed the generation %d → %d", gen, g)
	}
}

// classifyMatchesReference applies a policy of rules (randomRules) and
// checks the classification of packets distinct random flows against
// refMatch; at least minHits distinct rules must match some packet.
func classifyMatchesReference(t *testing.T, d *Datapath, rng *rand.Rand, rules []Rule, packets, minHits int) {
	p := Policy{Rules: rules}
	if err := d.Apply(p); err != nil {
		t.Fatal(err)
	}
	type fkey struct {
		proto    uint8
		src, dst netip.Addr
		sp, dp   uint16
	}
	// Distinct flows, each packet the first of its flow (later packets of
	// a flow keep its first classification).
	seen := map[fkey]bool{}
	specs := make([]FrameSpec, 0, packets)
	for len(specs) < packets {
		s := randomPacket(rng)
		k := fkey{s.Proto, s.Src, s.Dst, s.SPort, s.DPort}
		if !seen[k] {
			seen[k] = true
			specs = append(specs, s)
		}
	}
	t0 := time.Now()
	want := make([]int, len(specs))
	var wg sync.WaitGroup
	workers := runtime.NumCPU()
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < len(specs); i += workers {
				want[i] = refMatch(p.Rules, specs[i])
			}
		}()
	}
	wg.Wait()
	tRef := time.Since(t0)
	t0 = time.Now()
	matched, bad := 0, 0
	hits := map[int]bool{}
	for i, s := range specs {
		got := matchedRule(t, d, s)
		if got != want[i] {
			if bad++; bad <= 10 {
				t.Errorf("packet %+v: rule %d, reference says %d", s, got, want[i])
			}
			continue
		}
		if got >= 0 {
			matched++
			hits[got] = true
		}
	}
	t.Logf("reference %v, test-run %v", tRef, time.Since(t0))
	if bad > 0 {
		t.Fatalf("%d of %d packets classified unlike the reference", bad, packets)
	}
	// The packets must exercise the rules, not just miss them.
	if matched < packets/4 || len(hits) < minHits {
		t.Errorf("only %d packets matched a rule, %d distinct rules: the test packets miss the policy", matched, len(hits))
	}
	t.Logf("%d packets: %d matched a rule (%d distinct rules), all as the reference", packets, matched, len(hits))
}

// TestTupleSpaceRandomSmall: small random policies (few rules, so that
// rule order decides more often), each against 2,000 random packets.
func TestTupleSpaceRandomSmall(t *testing.T) {
	d := openTest(t, Options{FlowTableSize: 1 << 16})
	rng := rand.New(rand.NewPCG(1, 2))
	for round := 0; round < 5; round++ {
		p := Policy{Rules: randomRules(rng, 20+round*10, 0)}
		if err := d.Apply(p); err != nil {
			t.Fatal(err)
		}
		for n := 0; n < 2000; n++ {
			s := randomPacket(rng)
			s.SPort = uint16(n) // new flow each time within the round
			if s.Proto != 6 && s.Proto != 17 {
				continue
			}
			want := refMatch(p.Rules, s)
			got := matchedRule(t, d, s)
			if got != want {
				t.Fatalf("round %d: packet %+v: rule %d, reference says %d (rules %s)", round, s, got, want, fmt.Sprint(len(p.Rules)))
			}
		}
	}
}

// TestBoundedWalkReachesTheEnd: the bounded datapath's tuple-space search
// at its worst for one packet — BoundedFlowRules/2 tuples that miss it,
// then one chain holding every other rule, only the last matching — still
// finds the last rule (the walk's step bound covers tuples plus chain
// nodes). The bpf_loop datapath finds the same.
func TestBoundedWalkReachesTheEnd(t *testing.T) {
	n := BoundedFlowRules
	var rules []Rule
	for i := 0; i < n/2; i++ {
		// Distinct shapes (remote and local prefix lengths), no match.
		remote := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 0, 0, 0}), 1+i%32).Masked()
		local := netip.PrefixFrom(netip.AddrFrom4([4]byte{0, 0, 0, 0}), i/32)
		rules = append(rules, Rule{Slot: uint16(i), Remote: remote, Local: local, DSCPIn: -1, DSCP: -1, ClassID: 0x10000 + uint32(i) + 1})
	}
	dst := netip.MustParseAddr("198.18.0.2")
	for i := n / 2; i < n; i++ {
		// One key (a port range is not part of it): one chain.
		r := Rule{Slot: uint16(i), Proto: 17, Remote: netip.PrefixFrom(dst, 32), RPortFrom: 100, RPortTo: 200, DSCPIn: -1, DSCP: -1, ClassID: 0x10000 + uint32(i) + 1}
		if i == n-1 {
			r.RPortFrom, r.RPortTo = 4000, 6000
		}
		rules = append(rules, r)
	}
	frame := BuildFrame(FrameSpec{Src: netip.MustParseAddr("198.18.0.1"), Dst: dst, Proto: 17, SPort: 1234, DPort: 5000})
	eachLoops(t, rules, func(loops string, d *Datapath) {
		res, err := d.TestRun(frame, 1)
		if err != nil {
			t.Fatal(err)
		}
		if got := int(res.Priority) - 0x10000 - 1; got != n-1 {
			t.Errorf("%s: the packet got rule %d, want the last, %d", loops, got, n-1)
		}
	})
}

// eachLoops opens a test datapath in each loop variant the kernel has
// (bounded; bpf_loop from 5.17), applies rules and calls fn with it.
func eachLoops(t *testing.T, rules []Rule, fn func(loops string, d *Datapath)) {
	t.Helper()
	for _, loops := range []string{LoopsBounded, LoopsBPFLoop} {
		if loops == LoopsBPFLoop && !HaveBPFLoop() {
			t.Logf("%s: not on this kernel (before 5.17)", loops)
			continue
		}
		d := openTest(t, Options{FlowTableSize: 1 << 16, Loops: loops})
		if err := d.Apply(Policy{Rules: rules}); err != nil {
			t.Fatal(err)
		}
		fn(loops, d)
	}
}

// TestTupleBoundsEdges: a tuple's lookup is skipped for a packet outside
// the range of its keys (hq_tuple's lport_lo … dst_hi), and a tuple of one
// key is compared, not looked up (hq_tuple's single); packets on, just
// inside and just outside each bound (local and remote port, IPv4 and
// IPv6 address words, DSCP) are classified as the reference says, in both
// loop variants.
func TestTupleBoundsEdges(t *testing.T) {
	pfx := netip.MustParsePrefix
	var rules []Rule
	add := func(r Rule) {
		r.Slot, r.DSCPIn, r.DSCP, r.ClassID = uint16(len(rules)), -1, -1, 0x10000+uint32(len(rules))+1
		rules = append(rules, r)
	}
	add(Rule{Proto: 6, LPortFrom: 100})                             // TCP local port: 100 … 200
	add(Rule{Proto: 6, LPortFrom: 200})                             //
	add(Rule{Proto: 17, RPortFrom: 5000})                           // UDP remote port: 5000 … 6000
	add(Rule{Proto: 17, RPortFrom: 6000})                           //
	add(Rule{Remote: pfx("198.18.10.0/24")})                        // remote /24: 198.18.10.0 … 198.18.20.0
	add(Rule{Remote: pfx("198.18.20.0/24")})                        //
	add(Rule{Local: pfx("198.19.0.0/16")})                          // local /16, alone in its tuple
	add(Rule{Remote: pfx("2001:db8:10::/48")})                      // remote IPv6 /48: top words 2001:db8 …
	add(Rule{Remote: pfx("2001:db9:20::/48")})                      // … 2001:db9
	add(Rule{Remote: pfx("198.18.0.0/15"), Proto: 6, RPortFrom: 1}) // a later shape that matches most TCP
	add(Rule{Proto: 17, RPortFrom: 7777})                           // one key with a DSCP: compared, not looked up
	rules[len(rules)-1].DSCPIn = 10
	v4 := func(s string) netip.Addr { return netip.MustParseAddr(s) }
	var pkts []FrameSpec
	for _, p := range []uint16{99, 100, 150, 200, 201} {
		pkts = append(pkts, FrameSpec{Src: v4("198.18.0.1"), Dst: v4("198.18.0.2"), Proto: 6, SPort: p, DPort: 1})
	}
	for _, p := range []uint16{4999, 5000, 5500, 6000, 6001} {
		pkts = append(pkts, FrameSpec{Src: v4("198.18.0.1"), Dst: v4("198.18.0.2"), Proto: 17, SPort: 40000, DPort: p})
	}
	for _, a := range []string{"198.18.9.255", "198.18.10.0", "198.18.15.7", "198.18.20.255", "198.18.21.0"} {
		pkts = append(pkts, FrameSpec{Src: v4("198.18.0.1"), Dst: v4(a), Proto: 17, SPort: 40001, DPort: 7})
	}
	for _, a := range []string{"198.18.255.255", "198.19.0.0", "198.19.255.255", "198.20.0.0"} {
		pkts = append(pkts, FrameSpec{Src: v4(a), Dst: v4("198.18.0.2"), Proto: 17, SPort: 40002, DPort: 7})
	}
	for _, a := range []string{"2001:db7:ffff::1", "2001:db8::1", "2001:db8:10::1", "2001:db8:ffff::1", "2001:db9:20::1", "2001:db9:21::1", "2001:dba::1"} {
		pkts = append(pkts, FrameSpec{Src: v4("2001:db8::2"), Dst: v4(a), Proto: 17, SPort: 40003, DPort: 7})
	}
	for _, tos := range []uint8{9 << 2, 10 << 2, 11 << 2} {
		pkts = append(pkts, FrameSpec{Src: v4("198.18.0.1"), Dst: v4("198.18.0.2"), Proto: 17, SPort: 40004 + uint16(tos), DPort: 7777, TOS: tos})
	}
	eachLoops(t, rules, func(loops string, d *Datapath) {
		for _, s := range pkts {
			if got, want := matchedRule(t, d, s), refMatch(rules, s); got != want {
				t.Errorf("%s: packet %s:%d → %s:%d proto %d: rule %d, the reference says %d", loops, s.Src, s.SPort, s.Dst, s.DPort, s.Proto, got, want)
			}
		}
	})
}
