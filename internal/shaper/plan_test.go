package shaper

import (
	"strings"
	"testing"
)

const (
	kbit = 1000
	mbit = 1000 * kbit
	gbit = 1000 * mbit
)

func defaultClasses() []ClassSpec {
	return []ClassSpec{
		{Name: "voice", Index: 0, Priority: 0, MinBW: 2 * mbit, MaxBW: 5 * mbit},
		{Name: "interactive", Index: 1, Priority: 2},
		{Name: "default", Index: 2, Priority: 4, Default: true},
		{Name: "bulk", Index: 3, Priority: 6},
		{Name: "scavenger", Index: 4, Priority: 7},
	}
}

func byMinor(t *testing.T, p Plan) map[uint16]HTBClass {
	t.Helper()
	m := map[uint16]HTBClass{}
	for _, c := range p.Classes {
		if _, dup := m[c.Minor]; dup {
			t.Fatalf("minor %x twice", c.Minor)
		}
		m[c.Minor] = c
	}
	return m
}

// checkInvariants verifies the structural promises of the package comment.
func checkInvariants(t *testing.T, p Plan) {
	t.Helper()
	m := byMinor(t, p)
	seen := map[uint16]bool{}
	sums := map[uint16]uint64{}
	for _, c := range p.Classes {
		if c.ParentMinor != 0 && !seen[c.ParentMinor] {
			t.Errorf("%s (%x): parent %x not listed before it", c.Label, c.Minor, c.ParentMinor)
		}
		seen[c.Minor] = true
		if c.Rate < MinRate {
			t.Errorf("%s: rate %d below 8 kbit", c.Label, c.Rate)
		}
		if c.Ceil < c.Rate {
			t.Errorf("%s: ceil %d < rate %d", c.Label, c.Ceil, c.Rate)
		}
		if c.Rate%8 != 0 || c.Ceil%8 != 0 {
			t.Errorf("%s: rate %d / ceil %d not whole bytes", c.Label, c.Rate, c.Ceil)
		}
		if c.ParentMinor != 0 {
			sums[c.ParentMinor] += c.Rate
			// A leaf shaped to a Tspec: its ceil is the peak rate, above
			// its parent's (which never lends), its cburst one frame.
			tspec := c.ParentMinor > TspecBase && c.ParentMinor <= TspecBase+MaxTspecShapes
			if par := m[c.ParentMinor]; c.Ceil > par.Ceil && !tspec {
				t.Errorf("%s: ceil %d above parent ceil %d", c.Label, c.Ceil, par.Ceil)
			}
		}
		tspec := c.ParentMinor > TspecBase && c.ParentMinor <= TspecBase+MaxTspecShapes
		if c.Burst < frameBytes || (c.Cburst < c.Burst && !tspec) || c.Quantum < frameBytes || c.Quantum > maxQuantum {
			t.Errorf("%s: burst %d cburst %d quantum %d", c.Label, c.Burst, c.Cburst, c.Quantum)
		}
	}
	for parent, sum := range sums {
		// The qsched bands 0..6 each have the class's rate; flow queueing
		// leaves have MinRate each even under a smaller general leaf.
		tiny := parent >= LeafBase && parent <= LeafBase+MaxClass && m[parent].Rate < (1+FQBuckets)*MinRate
		if sum > m[parent].Rate && parent != QSchedMinor && !tiny {
			t.Errorf("children of %s sum to %d > its rate %d", m[parent].Label, sum, m[parent].Rate)
		}
	}
	root := m[RootMinor]
	if root.Rate != p.Link.Rate || root.Ceil != p.Link.Rate || root.ParentMinor != 0 {
		t.Errorf("root class %+v, link rate %d", root, p.Link.Rate)
	}
	if d, ok := m[p.DefaultMinor]; !ok || !d.Leaf {
		t.Errorf("default minor %x is not a leaf", p.DefaultMinor)
	}
}

func TestBuildShares(t *testing.T) {
	link := LinkSpec{Ifindex: 2, Name: "eth0", Rate: 100 * mbit}
	rules := []RuleSpec{
		{Slot: 12, Class: 3, MaxBW: 10 * mbit}, // token rate only
		{Slot: 7, Class: 1, MinBW: 5 * mbit},   // guarantee, class ceil
		{Slot: 9, Class: 2},                    // no leaf
		{Slot: 30, Class: 0, MinBW: 1 * mbit, MaxBW: 2 * mbit},
	}
	p, err := Build(link, defaultClasses(), rules)
	if err != nil {
		t.Fatal(err)
	}
	checkInvariants(t, p)
	m := byMinor(t, p)

	if p.DefaultMinor != LeafBase+2 {
		t.Errorf("default minor %x, want %x", p.DefaultMinor, LeafBase+2)
	}
	// Voice: explicit share 2 Mbit, ceil 5 Mbit, plus a 1 Mbit rule leaf.
	if v := m[LeafBase+0]; v.Rate != 2*mbit || v.Ceil != 5*mbit || v.Prio != 0 {
		t.Errorf("voice leaf %+v", v)
	}
	if v := m[InnerBase+0]; v.Rate != 3*mbit || v.Ceil != 5*mbit {
		t.Errorf("voice inner %+v", v)
	}
	if r := m[RuleBase+30]; r.Rate != 1*mbit || r.Ceil != 2*mbit || r.ParentMinor != InnerBase+0 || !r.Leaf || r.Label != "rule 30" {
		t.Errorf("rule 30 leaf %+v", r)
	}
	// Rule 12: MaxBW only -> token rate link/1000 = 100 kbit, ceil 10 Mbit.
	if r := m[RuleBase+12]; r.Rate != 100*kbit || r.Ceil != 10*mbit || r.ParentMinor != InnerBase+3 || r.Prio != 6 {
		t.Errorf("rule 12 leaf %+v", r)
	}
	// Rule 7: MinBW only -> ceil = class ceil (link).
	if r := m[RuleBase+7]; r.Rate != 5*mbit || r.Ceil != 100*mbit {
		t.Errorf("rule 7 leaf %+v", r)
	}
	if _, ok := m[RuleBase+9]; ok {
		t.Errorf("rule 9 without bandwidth got a leaf")
	}
	// Implicit shares: 100 - 2 - 1 - 5 - 0.1 = 91.9 Mbit split 4:4:4:1.
	rest := uint64(100*mbit - 2*mbit - 1*mbit - 5*mbit - 100*kbit)
	unit := rest / 13
	for _, tc := range []struct {
		idx    uint16
		weight uint64
	}{{1, 4}, {2, 4}, {3, 4}, {4, 1}} {
		got := m[LeafBase+tc.idx].Rate
		want := unit * tc.weight
		if got+64 < want || got > want+64 {
			t.Errorf("class %d share %d, want ~%d", tc.idx, got, want)
		}
	}
	// The root's children sum to the link rate exactly.
	var sum uint64
	for _, c := range p.Classes {
		if c.ParentMinor == RootMinor {
			sum += c.Rate
		}
	}
	if sum != link.Rate {
		t.Errorf("inner classes sum to %d, want link rate %d", sum, link.Rate)
	}
	if ClassIDFor(p, 3) != Handle<<16|0x43 {
		t.Errorf("ClassIDFor(3) = %x", ClassIDFor(p, 3))
	}
	if ClassIDFor(p, 42) != Handle<<16|uint32(p.DefaultMinor) {
		t.Errorf("ClassIDFor(unknown) = %x, want the default leaf", ClassIDFor(p, 42))
	}
	if RuleClassID(12) != 0x4851010c {
		t.Errorf("RuleClassID(12) = %x", RuleClassID(12))
	}
	if got := ClassIDForRule(p, RuleSpec{Slot: 9, Class: 2}); got != 0x48510042 {
		t.Errorf("ClassIDForRule(no leaf) = %x", got)
	}
	if got := ClassIDForRule(p, RuleSpec{Slot: 12, Class: 3}); got != 0x4851010c {
		t.Errorf("ClassIDForRule(leaf) = %x", got)
	}
}

func TestBuildCapsAndFloors(t *testing.T) {
	// A capped implicit class gives its excess to the others; the sum at the
	// root stays the link rate.
	classes := []ClassSpec{
		{Name: "capped", Index: 0, Priority: 1, MaxBW: 1 * mbit},
		{Name: "default", Index: 1, Priority: 4, Default: true},
		{Name: "big", Index: 2, Priority: 5, MinBW: 9*mbit - 16*kbit},
		{Name: "scav", Index: 3, Priority: 7},
	}
	p, err := Build(LinkSpec{Name: "x", Rate: 10 * mbit}, classes, nil)
	if err != nil {
		t.Fatal(err)
	}
	checkInvariants(t, p)
	m := byMinor(t, p)
	var sum uint64
	for i := uint16(0); i < 4; i++ {
		sum += m[InnerBase+i].Rate
	}
	if sum != 10*mbit {
		t.Errorf("inner sum %d", sum)
	}
	for i := uint16(0); i < 4; i++ {
		if i != 2 && m[LeafBase+i].Rate < MinRate {
			t.Errorf("class %d below floor", i)
		}
	}

	// Everything explicit: nothing implicit to adjust, sum below the link.
	p, err = Build(LinkSpec{Rate: 10 * mbit}, []ClassSpec{
		{Name: "a", Index: 5, MinBW: 3 * mbit, Default: true},
		{Name: "b", Index: 9, MinBW: 2 * mbit, MaxBW: 4 * mbit},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	checkInvariants(t, p)
	if p.DefaultMinor != LeafBase+5 {
		t.Errorf("default minor %x", p.DefaultMinor)
	}
}

func TestBuildErrors(t *testing.T) {
	link := LinkSpec{Name: "eth0", Rate: 10 * mbit}
	def := ClassSpec{Name: "default", Index: 0, Default: true}
	for _, tc := range []struct {
		name    string
		classes []ClassSpec
		rules   []RuleSpec
		link    LinkSpec
		want    string
	}{
		{"guarantees over link", []ClassSpec{def, {Name: "v", Index: 1, MinBW: 6 * mbit}}, []RuleSpec{{Slot: 1, Class: 0, MinBW: 5 * mbit}}, link, "exceed the link rate"},
		{"no room for implicit", []ClassSpec{def, {Name: "v", Index: 1, MinBW: 10 * mbit}}, nil, link, "less than"},
		{"no default", []ClassSpec{{Name: "a", Index: 0}}, nil, link, "no default class"},
		{"two defaults", []ClassSpec{def, {Name: "b", Index: 1, Default: true}}, nil, link, "already the default"},
		{"dup index", []ClassSpec{def, {Name: "b", Index: 0}}, nil, link, "already used"},
		{"index range", []ClassSpec{def, {Name: "b", Index: 64}}, nil, link, "index outside"},
		{"prio range", []ClassSpec{{Name: "b", Index: 1, Priority: 8, Default: true}}, nil, link, "priority 8"},
		{"class min>max", []ClassSpec{{Name: "b", Index: 1, MinBW: 2 * mbit, MaxBW: 1 * mbit, Default: true}}, nil, link, "exceeds its ceiling"},
		{"tiny rate", []ClassSpec{{Name: "b", Index: 1, MaxBW: 100, Default: true}}, nil, link, "below the"},
		{"rule unknown class", []ClassSpec{def}, []RuleSpec{{Slot: 3, Class: 7, MaxBW: mbit}}, link, "unknown class"},
		{"rule dup slot", []ClassSpec{def}, []RuleSpec{{Slot: 3, Class: 0, MaxBW: mbit}, {Slot: 3, Class: 0}}, link, "slot used twice"},
		{"rule slot range", []ClassSpec{def}, []RuleSpec{{Slot: MaxRuleSlot + 1, Class: 0}}, link, "slot outside"},
		{"rule min>max", []ClassSpec{def}, []RuleSpec{{Slot: 3, Class: 0, MinBW: 2 * mbit, MaxBW: mbit}}, link, "exceeds maxbw"},
		{"rule min over class ceil", []ClassSpec{{Name: "c", Index: 0, MaxBW: mbit, Default: true}}, []RuleSpec{{Slot: 3, Class: 0, MinBW: 2 * mbit}}, link, "exceeds the ceiling"},
		{"rules fill class ceil", []ClassSpec{{Name: "c", Index: 0, MaxBW: mbit, Default: true}}, []RuleSpec{{Slot: 3, Class: 0, MinBW: mbit}}, link, "exceed its ceiling"},
		{"link too slow", []ClassSpec{def}, nil, LinkSpec{Rate: 100}, "link rate"},
		{"link too fast", []ClassSpec{def}, nil, LinkSpec{Rate: 20_000 * gbit}, "link rate 20tbit above the 10tbit maximum"},
		// A qsocket scheduler's rate near 2⁶⁴ (a sum of declared rates)
		// must not wrap the total below the link rate.
		{"qsched sum wraps", []ClassSpec{def, {Name: "v", Index: 1, MinBW: 2 * mbit}}, nil, LinkSpec{Name: "eth0", Rate: 10 * mbit, QSched: 1<<64 - 8}, "exceed the link rate"},
		{"no classes", nil, nil, link, "no service classes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Build(tc.link, tc.classes, tc.rules)
			if err == nil {
				t.Fatalf("Build succeeded, want error containing %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not contain %q", err, tc.want)
			}
		})
	}
}

func TestBuildTokensShrink(t *testing.T) {
	// 50 MaxBW-only rules: link/1000 tokens (1 Mbit at 1 Gbit) do not fit
	// under a 20 Mbit class ceiling, 8 kbit tokens do.
	classes := []ClassSpec{{Name: "bulk", Index: 3, Priority: 6, MaxBW: 20 * mbit, Default: true}}
	var rules []RuleSpec
	for i := 0; i < 50; i++ {
		rules = append(rules, RuleSpec{Slot: uint16(100 + i), Class: 3, MaxBW: 5 * mbit})
	}
	p, err := Build(LinkSpec{Rate: gbit}, classes, rules)
	if err != nil {
		t.Fatal(err)
	}
	checkInvariants(t, p)
	if r := byMinor(t, p)[RuleBase+100]; r.Rate != MinRate || r.Ceil != 5*mbit {
		t.Errorf("rule leaf %+v", r)
	}
}

func TestBuildBursts(t *testing.T) {
	for _, rate := range []uint64{128 * kbit, 1 * mbit, 10 * mbit, 100 * mbit, gbit, 10 * gbit} {
		p, err := Build(LinkSpec{Rate: rate}, []ClassSpec{{Name: "d", Index: 0, Default: true}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		checkInvariants(t, p)
		c := byMinor(t, p)[LeafBase]
		bytesPerMs := rate / 8 / 1000
		// At least one frame and at least 1 ms of traffic at the rate;
		// at most one frame + 3 ms (so a queue behind it waits little).
		if uint64(c.Burst) < frameBytes || uint64(c.Burst) < bytesPerMs || uint64(c.Burst) > frameBytes+3*bytesPerMs {
			t.Errorf("rate %s: burst %d bytes", fmtRate(rate), c.Burst)
		}
		if rate >= gbit && c.Burst < 65536 {
			t.Errorf("rate %s: burst %d below one GSO packet", fmtRate(rate), c.Burst)
		}
		wantQ := max(uint64(frameBytes), min(rate/800, maxQuantum))
		if uint64(c.Quantum) != wantQ {
			t.Errorf("rate %s: quantum %d, want %d", fmtRate(rate), c.Quantum, wantQ)
		}
	}
}

// TestBuildTspec: a rule shaped to a Tspec gets a leaf at r (in frames:
// × (M+14)/M) with burst b less the GSO overdraft, ceil p with a
// one-frame cburst, under a class of its own at rate = ceil = r that
// never lends; without a peak both buckets are (r, b).
func TestBuildTspec(t *testing.T) {
	link := LinkSpec{Ifindex: 2, Name: "eth0", Rate: 100 * mbit}
	rules := []RuleSpec{
		{Slot: 5, Class: 0, MinBW: 2 * mbit, MaxBW: 2 * mbit, QueueLimit: 40,
			Tspec: &TspecShape{ID: 3, Rate: 2 * mbit, Peak: 4 * mbit, Bucket: 16000, MaxUnit: 1500}},
		{Slot: 6, Class: 1, MinBW: mbit, MaxBW: mbit, Tspec: &TspecShape{ID: 4, Rate: mbit, Bucket: 30000, MaxUnit: 1000}},
	}
	p, err := Build(link, defaultClasses(), rules)
	if err != nil {
		t.Fatal(err)
	}
	checkInvariants(t, p)
	m := byMinor(t, p)
	gso := uint64(GSOCap(link.Rate))
	par, leaf := m[TspecMinor(3)], m[RuleBase+5]
	wantRate := round8(2*mbit*1514/1500 + 8)
	if par.ParentMinor != InnerBase+0 || par.Leaf || par.Rate != wantRate || par.Ceil != wantRate || par.Burst != par.Cburst {
		t.Errorf("tspec class %+v, want rate = ceil = %d under the voice class, burst = cburst", par, wantRate)
	}
	wantBurst := uint32(16000*1514/1500 + 1 + 1514 - gso)
	if leaf.ParentMinor != TspecMinor(3) || !leaf.Leaf || leaf.Rate != wantRate || leaf.Ceil != round8(4*mbit*1514/1500+8) ||
		leaf.Burst != wantBurst || leaf.Cburst != 1514 || leaf.QueueLimit != 40 || par.Burst != leaf.Burst {
		t.Errorf("tspec leaf %+v, want rate %d, burst %d (b + M − the %d-byte GSO cap), ceil p, cburst one frame, its parent's burst", leaf, wantRate, wantBurst, gso)
	}
	// No peak: the ceil bucket is the rate bucket.
	if l := m[RuleBase+6]; l.Ceil != l.Rate || l.Cburst != l.Burst || l.ParentMinor != TspecMinor(4) {
		t.Errorf("tspec leaf without a peak %+v, want ceil = rate, cburst = burst", l)
	}
	// A bucket smaller than the GSO overdraft keeps one frame.
	p, err = Build(link, defaultClasses(), []RuleSpec{{Slot: 5, Class: 0, MinBW: mbit, Tspec: &TspecShape{ID: 1, Rate: mbit, Bucket: 1500, MaxUnit: 1500}}})
	if err != nil {
		t.Fatal(err)
	}
	if l := byMinor(t, p)[RuleBase+5]; l.Burst != 1514 {
		t.Errorf("burst %d for b = M under a %d-byte GSO cap, want one frame", l.Burst, gso)
	}
	for _, bad := range []TspecShape{{ID: 0, Rate: mbit, Bucket: 1500, MaxUnit: 1500}, {ID: 1, Rate: mbit, Peak: kbit * 500, Bucket: 1500, MaxUnit: 1500},
		{ID: 1, Rate: mbit, Bucket: 1000, MaxUnit: 1500}} {
		if _, err := Build(link, defaultClasses(), []RuleSpec{{Slot: 5, Class: 0, MinBW: mbit, Tspec: &bad}}); err == nil {
			t.Errorf("Tspec %+v built, want an error", bad)
		}
	}
}

// TestBuildRTOwners: with channel leaves the real-time class is an inner
// class at the channels' total and every channel has a leaf guaranteed
// its rate, with its burst and priority, borrowing up to the total;
// without, one leaf.
func TestBuildRTOwners(t *testing.T) {
	link := LinkSpec{Ifindex: 2, Name: "eth0", Rate: 10 * mbit, RT: 3 * mbit,
		RTOwners: []RTOwner{{ID: 2, Rate: 2 * mbit, Prio: 1}, {ID: 1, Rate: mbit, Burst: 40000}}}
	p, err := Build(link, defaultClasses(), nil)
	if err != nil {
		t.Fatal(err)
	}
	checkInvariants(t, p)
	m := byMinor(t, p)
	if c := m[RTMinor]; c.Leaf || c.Rate != 3*mbit || c.Ceil != 3*mbit {
		t.Errorf("real-time class %+v, want an inner class at 3 Mbit/s", c)
	}
	for id, want := range map[uint16]RTOwner{1: {Rate: mbit, Burst: 40000}, 2: {Rate: 2 * mbit, Burst: burstBytes(2 * mbit), Prio: 1}} {
		c := m[RTMinor+id]
		if !c.Leaf || c.ParentMinor != RTMinor || c.Rate != want.Rate || c.Ceil != 3*mbit || c.Prio != want.Prio || c.Burst != want.Burst ||
			c.QueueLimit != RTQueueLimit || RTOwnerClassID(id) != classID(RTMinor+id) {
			t.Errorf("channel leaf %d %+v, want %+v under a 3 Mbit/s ceiling", id, c, want)
		}
	}
	link.RTOwners = nil
	p, err = Build(link, defaultClasses(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if c := byMinor(t, p)[RTMinor]; !c.Leaf || c.Rate != 3*mbit {
		t.Errorf("real-time leaf without owners %+v", c)
	}
	link.RTOwners = []RTOwner{{ID: 1, Rate: mbit}, {ID: 1, Rate: mbit}}
	if _, err := Build(link, defaultClasses(), nil); err == nil {
		t.Error("a leaf id used twice was built")
	}
	link.RTOwners = []RTOwner{{ID: 1, Rate: mbit, Prio: 8}}
	if _, err := Build(link, defaultClasses(), nil); err == nil {
		t.Error("a leaf at priority 8 was built")
	}
}

// With flow queueing every class's general leaf is an inner class with a
// sparse leaf and the buckets under it, each with a short queue of its
// own; unsteered packets default to the default class's sparse leaf;
// class ids the datapath is given stay the general leaves'.
func TestBuildFlowQueues(t *testing.T) {
	classes := []ClassSpec{
		{Name: "default", Index: 0, Priority: 3, Default: true},
		{Name: "voice", Index: 1, Priority: 0, MinBW: 8000},
		{Name: "bulk", Index: 2, Priority: 5, MaxBW: 2_000_000},
	}
	p, err := Build(LinkSpec{Name: "eth0", Rate: 7_000_000, FlowQueues: true}, classes, nil)
	if err != nil {
		t.Fatal(err)
	}
	checkInvariants(t, p)
	m := byMinor(t, p)
	for _, c := range classes {
		gen := m[LeafBase+uint16(c.Index)]
		if gen.Leaf {
			t.Errorf("class %s: general leaf is still a leaf", c.Name)
		}
		for k := 0; k <= FQBuckets; k++ {
			ch, ok := m[FQMinor(c.Index, k)]
			if !ok {
				t.Fatalf("class %s: no flow queueing leaf %d", c.Name, k)
			}
			if !ch.Leaf || ch.ParentMinor != gen.Minor || ch.Prio != gen.Prio || ch.Ceil != gen.Ceil || ch.QueueLimit == 0 {
				t.Errorf("class %s leaf %d: %+v under %+v", c.Name, k, ch, gen)
			}
			if parent, ok := IsFQMinor(ch.Minor); !ok || parent != gen.Minor {
				t.Errorf("IsFQMinor(%x) = %x, %v", ch.Minor, parent, ok)
			}
			if q := QueueMajor(ch.Minor); q == Handle || q >= queueMajorBase {
				t.Errorf("queue major %x of %x collides with another range", q, ch.Minor)
			}
		}
		if m[FQMinor(c.Index, 0)].Rate < m[FQMinor(c.Index, 1)].Rate {
			t.Errorf("class %s: sparse leaf's rate below a bucket's", c.Name)
		}
	}
	if p.DefaultMinor != FQMinor(0, 0) || p.DefaultClassMinor() != LeafBase {
		t.Errorf("default minor %x (class %x)", p.DefaultMinor, p.DefaultClassMinor())
	}
	if got := ClassIDFor(p, 9); got != classID(LeafBase) {
		t.Errorf("unknown class maps to %x, want the default general leaf", got)
	}
	if _, ok := IsFQMinor(FQMinor(0, FQBuckets+1)); ok {
		t.Error("a minor past the buckets counts as a flow queueing leaf")
	}
	plain, err := Build(LinkSpec{Name: "eth0", Rate: 7_000_000}, classes, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(plain.Classes)+len(classes)*(1+FQBuckets) != len(p.Classes) {
		t.Errorf("%d classes with flow queueing, %d without", len(p.Classes), len(plain.Classes))
	}
}
