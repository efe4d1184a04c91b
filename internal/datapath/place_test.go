package datapath

import (
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
)

// checkPlaced fails unless pos are strictly increasing positions below
// capacity, one per rule.
func checkPlaced(t *testing.T, pos []uint32, n, capacity int) {
	t.Helper()
	if len(pos) != n {
		t.Fatalf("%d positions for %d rules", len(pos), n)
	}
	for i, p := range pos {
		if int(p) >= capacity || i > 0 && p <= pos[i-1] {
			t.Fatalf("position %d of rule %d (previous %d, capacity %d): not increasing within the buffer", p, i, pos[max(i-1, 0)], capacity)
		}
	}
}

// asPrev is the placement a compiled policy would leave: position by slot.
func asPrev(slots []uint16, pos []uint32) []uint32 {
	prev := make([]uint32, MaxRules)
	for i := range prev {
		prev[i] = noPos
	}
	for i, s := range slots {
		prev[s] = pos[i]
	}
	return prev
}

// moved counts the rules of slots placed elsewhere than prev had them
// (rules new to the policy not counted).
func moved(slots []uint16, pos, prev []uint32) int {
	n := 0
	for i, s := range slots {
		if prev[s] != noPos && prev[s] != pos[i] {
			n++
		}
	}
	return n
}

// TestPlaceRulesAddOne: adding a rule to a policy of
// 10,000 leaves almost every rule where it was, wherever the new rule
// goes (first, between two, last), also for 200 additions in a row at the
// same place; removing a rule moves none.
func TestPlaceRulesAddOne(t *testing.T) {
	var slots []uint16
	for i := 0; i < 10_000; i++ {
		slots = append(slots, uint16(i))
	}
	pos := placeRules(slots, nil, MaxRules)
	checkPlaced(t, pos, len(slots), MaxRules)
	next := uint16(10_000)
	for _, at := range []int{0, 5000, 10_000} {
		cur, cpos := slices.Clone(slots), slices.Clone(pos)
		total, worst := 0, 0
		for k := 0; k < 200; k++ {
			prev := asPrev(cur, cpos)
			cur = slices.Insert(cur, at+k, next) // after the ones added before
			next++
			cpos = placeRules(cur, prev, MaxRules)
			checkPlaced(t, cpos, len(cur), MaxRules)
			m := moved(cur, cpos, prev)
			total += m
			worst = max(worst, m)
			if k == 0 && m > 8 {
				t.Errorf("a rule added at %d of 10,000 moved %d others, want at most 8", at, m)
			}
		}
		t.Logf("200 rules added one by one at %d: %d moves in all, %d at most at once", at, total, worst)
		if total > 200*100 { // log² 10,000 ≈ 177; renumbering moved 10,000 − at each
			t.Errorf("200 additions at %d moved %d rules in all; want at most 100 each on average", at, total)
		}
		next -= 200
	}
	prev := asPrev(slots, pos)
	rest := slices.Delete(slices.Clone(slots), 1234, 1235)
	p := placeRules(rest, prev, MaxRules)
	checkPlaced(t, p, len(rest), MaxRules)
	if m := moved(rest, p, prev); m != 0 {
		t.Errorf("removing a rule moved %d others", m)
	}
}

// TestPlaceRulesReorderAndFull: a rule moved in the order (a precedence
// change) keeps the others in place; random changes always give a valid
// placement; a full buffer (MaxRules rules) is placed 0..MaxRules-1.
func TestPlaceRulesReorderAndFull(t *testing.T) {
	slots := make([]uint16, 1000)
	for i := range slots {
		slots[i] = uint16(i)
	}
	pos := placeRules(slots, nil, MaxRules)
	prev := asPrev(slots, pos)
	re := slices.Clone(slots)
	re = slices.Delete(re, 10, 11)
	re = slices.Insert(re, 900, 10) // rule 10 is now evaluated after 900 others
	p := placeRules(re, prev, MaxRules)
	checkPlaced(t, p, len(re), MaxRules)
	if m := moved(re, p, prev); m != 1 {
		t.Errorf("moving one rule in the order moved %d, want 1", m)
	}

	rng := rand.New(rand.NewPCG(3, 4))
	cur := slices.Clone(slots)
	cpos := pos
	for round := 0; round < 200; round++ {
		prev := asPrev(cur, cpos)
		for k := rng.IntN(20); k > 0; k-- {
			switch i := rng.IntN(len(cur) + 1); {
			case rng.IntN(2) == 0 && len(cur) > 0:
				cur = slices.Delete(cur, min(i, len(cur)-1), min(i, len(cur)-1)+1)
			default:
				var s uint16
				for s = uint16(rng.IntN(MaxRules)); slices.Contains(cur, s); s = uint16(rng.IntN(MaxRules)) {
				}
				cur = slices.Insert(cur, i, s)
			}
		}
		rng.Shuffle(min(len(cur), 5), func(i, j int) { cur[i], cur[j] = cur[j], cur[i] })
		cpos = placeRules(cur, prev, 2048)
		checkPlaced(t, cpos, len(cur), 2048)
	}

	// Half the rules new, between the old ones: laid out afresh.
	var half []uint16
	for i, s := range slots {
		half = append(half, s, uint16(5000+i))
	}
	if p, fresh := placeRules(half, prev, MaxRules), placeRules(half, nil, MaxRules); !slices.Equal(p, fresh) {
		t.Error("a change that adds as many rules as it keeps is not laid out afresh")
	}

	full := make([]uint16, MaxRules)
	for i := range full {
		full[i] = uint16(MaxRules - 1 - i)
	}
	p = placeRules(full, asPrev(slots, pos), MaxRules)
	checkPlaced(t, p, MaxRules, MaxRules)
}

// TestAddRuleWritesFewEntries: with 10,000 flow rules,
// adding one before all of them (the case that used to renumber every
// rule) changes only a handful of the buffer's entries: rules, search
// entries and chain nodes.
func TestAddRuleWritesFewEntries(t *testing.T) {
	mk := func(extra int) Policy {
		var p Policy
		for i := 0; i < extra; i++ {
			p.Rules = append(p.Rules, Rule{Slot: uint16(10_000 + i), Proto: 17, RPortFrom: uint16(61_000 + i), DSCP: -1, DSCPIn: -1})
		}
		for i := 0; i < 10_000; i++ {
			// Pairs of rules share a port: chains of two.
			p.Rules = append(p.Rules, Rule{Slot: uint16(i), Proto: 17, RPortFrom: uint16(1 + i/2), DSCP: -1, DSCPIn: -1})
		}
		return p
	}
	var prev []uint32
	build := func(p Policy) *bufState {
		t.Helper()
		slots := make([]uint16, len(p.Rules))
		for i := range p.Rules {
			slots[i] = p.Rules[i].Slot
		}
		c, err := compileAt(p, placeRules(slots, prev, MaxRules))
		if err != nil {
			t.Fatal(err)
		}
		prev = c.placement()
		return c.bufState(0)
	}
	diffArr := func(a, b []hostqosHqRule) int {
		n := 0
		for i := range max(len(a), len(b)) {
			if i >= len(a) || i >= len(b) || a[i] != b[i] {
				n++
			}
		}
		return n
	}
	diffNodes := func(a, b []hostqosHqTnode) int {
		n := 0
		for i := range max(len(a), len(b)) {
			if i >= len(a) || i >= len(b) || a[i] != b[i] {
				n++
			}
		}
		return n
	}
	diffTSS := func(a, b map[hostqosHqTssKey]hostqosHqTnode) int {
		n := 0
		for k, v := range b {
			if w, ok := a[k]; !ok || w != v {
				n++
			}
		}
		for k := range a {
			if _, ok := b[k]; !ok {
				n++
			}
		}
		return n
	}
	before := build(mk(0))
	for extra := 1; extra <= 3; extra++ {
		after := build(mk(extra))
		r, s, n := diffArr(before.rules, after.rules), diffTSS(before.tss, after.tss), diffNodes(before.tnodes, after.tnodes)
		t.Logf("rule %d added: %d rule entries, %d search entries, %d chain nodes changed", extra, r, s, n)
		if r > 10 || s > 20 || n > 10 {
			t.Errorf("adding rule %d to 10,000 changed %d rule entries, %d search entries, %d chain nodes; want a handful", extra, r, s, n)
		}
		before = after
	}
}

// TestClassifyAfterIncrementalChanges: a policy of 3,000 rules changed 30
// times (rules added anywhere, removed, moved in the order), each change
// laid over the positions of the one before, classifies like the
// reference evaluation of the current rules (BPF test-run).
func TestClassifyAfterIncrementalChanges(t *testing.T) {
	if !HaveBPFLoop() {
		t.Skip("3,000 rules: more than the bounded datapath of kernels without bpf_loop holds (TestClassifyMatchesReferenceBounded covers it)")
	}
	d := openTest(t, Options{FlowTableSize: 1 << 16})
	rng := rand.New(rand.NewPCG(11, 12))
	rules := randomRules(rng, 3000, 100)
	next := uint16(len(rules))
	if err := d.Apply(Policy{Rules: rules}); err != nil {
		t.Fatal(err)
	}
	type fkey struct {
		proto    uint8
		src, dst netip.Addr
		sp, dp   uint16
	}
	check := func(round int) {
		t.Helper()
		// Each packet the first of its flow: a flow keeps its first
		// packet's classification (incoming DSCP included).
		seen := map[fkey]bool{}
		matched, hits := 0, map[uint32]bool{}
		defer func() {
			t.Logf("round %d: %d packets, %d matched a rule (%d distinct rules), all as the reference", round, len(seen), matched, len(hits))
			if matched < len(seen)/5 || len(hits) < 30 {
				t.Errorf("round %d: %d of %d packets matched a rule, %d distinct rules: the packets miss the policy", round, matched, len(seen), len(hits))
			}
		}()
		for n := 0; n < 3000; n++ {
			s := randomPacket(rng)
			if k := (fkey{s.Proto, s.Src, s.Dst, s.SPort, s.DPort}); seen[k] {
				continue
			} else {
				seen[k] = true
			}
			want := uint32(0)
			if i := refMatch(rules, s); i >= 0 {
				want = rules[i].ClassID
				matched++
				hits[want] = true
			}
			res, err := d.TestRun(BuildFrame(s), 1)
			if err != nil {
				t.Fatal(err)
			}
			if res.Priority != want {
				t.Fatalf("round %d: packet %+v: classid %#x, the reference's rule has %#x", round, s, res.Priority, want)
			}
		}
	}
	for round := 1; round <= 30; round++ {
		for k := rng.IntN(6); k > 0; k-- {
			r := randomRules(rng, 60, 0)[20+rng.IntN(40)] // of the varied shapes
			r.Slot, r.ClassID = next, 0x10000+uint32(next)+1
			next++
			at := rng.IntN(len(rules) + 1)
			if rng.IntN(3) == 0 {
				at = rng.IntN(10) // early: the window around it is spread again
			}
			rules = slices.Insert(rules, at, r)
		}
		for k := rng.IntN(4); k > 0; k-- {
			i := rng.IntN(len(rules))
			rules = slices.Delete(rules, i, i+1)
		}
		if rng.IntN(4) == 0 { // a precedence change: one rule elsewhere in the order
			i := rng.IntN(len(rules))
			r := rules[i]
			rules = slices.Delete(rules, i, i+1)
			rules = slices.Insert(rules, rng.IntN(len(rules)+1), r)
		}
		if err := d.Apply(Policy{Rules: rules}); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if round%15 == 0 {
			check(round)
		}
	}
}
