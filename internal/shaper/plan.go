package shaper

import (
	"fmt"
	"sort"

	"github.com/hostqos/hostqos/internal/units"
)

// Handle is the major number of our HTB root qdisc ("HQ"). Any HTB root qdisc
// with this handle is ours.
const Handle = 0x4851

// Minor numbers of the tree (see the package comment).
const (
	RootMinor   uint16 = 0x1   // root class, rate = ceil = link rate
	InnerBase   uint16 = 0x10  // + class index: inner class of a service class
	LeafBase    uint16 = 0x40  // + class index: general leaf of a service class
	RuleBase    uint16 = 0x100 // + rule slot: a rule's own leaf
	MaxClass           = 63    // highest service-class index
	MaxRuleSlot        = 16383 // highest rule slot (policy.MaxRules - 1; minors up to 0x40ff)
)

// SessionBase + (group-1)*MaxSessionLeaves + i is the minor of the leaf of
// session i of session group group (1..MaxSessionGroups), under its
// rule's class.
const SessionBase uint16 = 0x4100

// Per-session leaves: at most MaxSessionLeaves per rule, MaxSessionGroups
// rules with them (minors up to 0x60ff).
const (
	MaxSessionLeaves = 32
	MaxSessionGroups = 255
)

// SessionClassID is the classid of the leaf of session i (0-based) of
// session group group.
func SessionClassID(group uint16, i int) uint32 { return classID(SessionMinor(group, i)) }

// SessionMinor is the minor number of the leaf of session i (0-based) of
// session group group (1..MaxSessionGroups).
func SessionMinor(group uint16, i int) uint16 {
	return SessionBase + (group-1)*MaxSessionLeaves + uint16(i)
}

// MinRate is the smallest rate (bits/s) the shaper configures on any class.
const MinRate uint64 = 8000

const (
	// frameBytes is the full-size frame HTB charges on an Ethernet link with a
	// 1500-byte MTU: IP packet + 14-byte Ethernet header.
	frameBytes = 1514
	// burstMillis is the time at a class's rate (ceil) added to one frame to
	// give its burst (cburst).
	burstMillis = 2
	// maxQuantum is the largest quantum the kernel accepts without warning.
	maxQuantum = 200000
	// scavengerPriority gets a quarter weight when splitting implicit shares.
	scavengerPriority = 7
)

// ClassSpec is one service class as the shaper needs it.
type ClassSpec struct {
	Name     string
	Index    int    // 0..63, stable service-class index
	Priority int    // 0 (highest) .. 7
	MinBW    uint64 // bits/s, 0 = unset
	MaxBW    uint64 // bits/s, 0 = unset
	Default  bool   // the class unmatched traffic goes to
}

// RuleSpec is one rule as the shaper needs it. Rules with neither MinBW nor
// MaxBW get no leaf of their own; their traffic uses the class's general leaf.
type RuleSpec struct {
	Slot  uint16 // stable rule slot 0..MaxRuleSlot
	Class int    // ClassSpec.Index
	MinBW uint64 // bits/s, 0 = unset
	MaxBW uint64 // bits/s, 0 = unset
	// QueueLimit is the length in packets of the queue of the rule's own
	// leaf (a reservation's buffers); 0 = the kernel's default (the
	// link's txqueuelen). Only for rules with a leaf (MinBW or MaxBW).
	QueueLimit uint32
	// Sessions > 0 gives each of the rule's sessions a leaf of its own
	// (per-session admission): the rule's class becomes an inner class
	// (rate MinBW or its token rate, ceiling MaxBW) with Sessions leaves
	// SessionMinor(SessionGroup, 0..Sessions-1) under it, each guaranteed
	// SessionMinBW or an equal part of the rule's rate, whichever is more,
	// with ceiling
	// SessionMaxBW (0: the rule's); each gets QueueLimit. At most
	// MaxSessionLeaves.
	Sessions                   int
	SessionGroup               uint16
	SessionMinBW, SessionMaxBW uint64
	// Tspec (with Sessions 0) shapes the rule's traffic to a token-bucket
	// specification instead of MinBW/MaxBW: see TspecShape.
	Tspec *TspecShape
}

// TspecShape is the traffic specification a rule's leaf shapes to
// (guaranteed service shaped to its Tspec, RFC 2210 units: IP packets).
// HTB holds a class to two buckets at once: its rate with burst and its
// ceil with cburst. The leaf gets rate = r, burst = b and ceil = p,
// cburst = one packet, so what leaves stays within b + r·t and M + p·t.
// A leaf whose rate bucket is empty borrows from its parent, so the leaf
// hangs from a class of its own (TspecMinor(ID)) with rate = ceil = r and
// the same burst: charged with the same bytes, its bucket empties with
// the leaf's and it never lends. HTB counts L2 frames (IP + 14 bytes):
// rates and buckets are scaled by (M + 14)/M, which makes a stream of
// M-byte packets leave at exactly r and any smaller packets below it.
// One packet may overdraw a bucket; a GSO packet is up to the link's
// GSO cap (GSOCap), so the burst is cut by what that adds over one
// frame and the bucket never lets more than b + M out at once.
type TspecShape struct {
	ID              uint16 // 1..MaxTspecShapes: its class is TspecMinor(ID)
	Rate, Peak      uint64 // r and p, bits/s of IP packets; Peak 0: no peak term
	Bucket, MaxUnit uint32 // b and M, bytes
}

// TspecBase + id (1..MaxTspecShapes) is the minor of the class a leaf
// shaped to a Tspec hangs from.
const (
	TspecBase      uint16 = 0x7200
	MaxTspecShapes        = 255
	ethHeader             = frameBytes - 1500
)

// TspecMinor is the minor of the parent class of the leaf shaped to Tspec
// id.
func TspecMinor(id uint16) uint16 { return TspecBase + id }

// tspecFrames is x (bytes or bits/s of IP packets of at most M bytes)
// scaled to the frames HTB counts, rounded up.
func tspecFrames(x uint64, M uint32) uint64 {
	m := uint64(max(M, 1))
	return units.Mul(x, m+ethHeader)/m + 1
}

// LinkSpec is the managed link.
type LinkSpec struct {
	Ifindex int
	Name    string
	Rate    uint64 // bits/s
	// QSched > 0 gives the link a qsched class (bits/s): the rate of the
	// host-wide qsocket scheduler, guaranteed and its ceiling, with
	// QSchedBands band leaves under it (QSchedBandClassID).
	QSched uint64
	// RT > 0 gives the link a real-time leaf (RTClassID, bits/s): the
	// admitted real-time channels' wire rates together, guaranteed and
	// its ceiling, at the highest priority.
	RT uint64
	// RTOwners (with RT) split the real-time class into a leaf per
	// admitted channel: RTMinor becomes an inner class (rate = ceil = RT)
	// and each channel gets a leaf of its own (RTOwnerClassID(ID)),
	// guaranteed its wire rate (Rate, summing to RT) with a bucket of its
	// burst (Burst), at the priority of its local delay bound (Prio), and
	// borrowing up to RT what the others leave. A channel whose socket
	// sends more than it was admitted with queues in its own leaf: the
	// others keep their rates.
	RTOwners []RTOwner
	// FlowQueues makes the general leaf of every class an inner class
	// with a sparse-flow leaf and FQBuckets flow buckets under it (see
	// FQMinor and "Flow queueing" in the package comment).
	FlowQueues bool
}

// Flow queueing: with LinkSpec.FlowQueues the general leaf LeafBase+i of
// class i is an inner class (same rate, ceiling and priority) with the
// leaves FQMinor(i, 0) (sparse flows) and FQMinor(i, 1..FQBuckets) (flow
// buckets). The datapath picks the child (bpf/fq.h).
const FQBase uint16 = 0xc000

// FQStride minors per class, FQBuckets flow buckets per class.
const (
	FQStride  = 16
	FQBuckets = 8
	// FQSparseQueue and FQBucketQueue are the packets the sparse leaf
	// and each bucket hold: short, so that a bulk flow's own queue stays
	// short too.
	FQSparseQueue = 128
	FQBucketQueue = 256
	// fqQueueMajorBase + (minor - FQBase) is the major handle of a flow
	// queueing leaf's pfifo (QueueMajor).
	fqQueueMajorBase uint16 = 0x1000
)

// FQMinor is the minor of child k (0 = sparse, 1..FQBuckets = bucket) of
// the general leaf of class index idx.
func FQMinor(idx, k int) uint16 { return FQBase + uint16(idx*FQStride+k) }

// IsFQMinor reports whether minor is a flow queueing leaf, and whose
// (the class's general leaf minor).
func IsFQMinor(minor uint16) (uint16, bool) {
	if minor < FQBase || minor >= FQBase+uint16((MaxClass+1)*FQStride) {
		return 0, false
	}
	k := int(minor-FQBase) % FQStride
	if k > FQBuckets {
		return 0, false
	}
	return LeafBase + (minor-FQBase)/FQStride, true
}

// RTOwner is one real-time channel's leaf in a link's real-time class.
type RTOwner struct {
	ID    uint16 // 1..MaxRTOwners, the same on every link
	Rate  uint64 // bits/s
	Burst uint32 // bytes the leaf's bucket holds (at least burstBytes(Rate))
	Prio  int    // HTB priority 0..7: the rank of the channel's local bound
}

// MaxRTOwners is the number of real-time channels with leaves of their
// own on a link (minors RTMinor+1 … RTMinor+MaxRTOwners).
const MaxRTOwners = 255

// RTOwnerClassID is the classid of the real-time leaf of owner id.
func RTOwnerClassID(id uint16) uint32 { return classID(RTMinor + id) }

// RTMinor is the minor of a link's real-time leaf: the class the
// real-time channels' datagrams leave in (LinkSpec.RT).
const RTMinor uint16 = 0x7100

// RTQueueLimit is the packets the real-time leaf's queue holds.
const RTQueueLimit = 1024

// RTClassID is the classid of the real-time leaf.
func RTClassID() uint32 { return classID(RTMinor) }

// The qsched subtree: an inner class at QSchedMinor (rate = ceil =
// LinkSpec.QSched, a guarantee beside the classes') and its band leaves
// QSchedMinor+1+b, b = 0..QSchedBands-1. Bands 0..6 hold only messages
// the datapath's scheduler admitted on time, within the class's rate in
// all: each may send at that rate on its own tokens, at HTB priority 0,
// so that no class's burst goes ahead of them (HTB sends what classes
// send on their own tokens before anything borrowed). Band 7 (no
// deadline, far deadlines, and messages sent late) has MinRate and
// priority 7, and borrows what bands 0..6 leave of the class. Their
// queues hold QSchedQueueLimit packets.
const QSchedMinor uint16 = 0x7000

// QSchedBands is the number of band leaves, QSchedQueueLimit the packets
// each one's queue holds.
const (
	QSchedBands      = 8
	QSchedQueueLimit = 4096
)

// QSchedBandClassID is the classid of band b of the qsched subtree.
func QSchedBandClassID(b int) uint32 { return classID(QSchedMinor + 1 + uint16(b)) }

// Plan is the complete HTB tree for one link.
type Plan struct {
	Link LinkSpec
	// Classes lists every class, parents before their children: the root
	// class, then per service class (by index) its inner class, its general
	// leaf and its rule leaves (by slot).
	Classes      []HTBClass
	DefaultMinor uint16
}

// HTBClass is one HTB class of a plan.
type HTBClass struct {
	Minor       uint16
	ParentMinor uint16 // 0 = qdisc root
	Rate, Ceil  uint64 // bits/s, multiples of 8
	Prio        int
	Leaf        bool
	Label       string // e.g. "class voice", "rule 12"
	// Burst and Cburst are the token bucket depths in bytes at Rate and
	// Ceil; Quantum is the DRR quantum in bytes.
	Burst, Cburst, Quantum uint32
	// QueueLimit (leaves only) is the packets the leaf's queue holds: a
	// pfifo of that length, handle QueueMajor(Minor); 0 = the kernel's
	// default queue.
	QueueLimit uint32
}

// queueMajorBase + a leaf's minor is the major handle of the pfifo that
// Apply gives a leaf with a QueueLimit.
const queueMajorBase = 0x5000

// QueueMajor is the major handle of the queue of leaf minor.
func QueueMajor(minor uint16) uint16 {
	if minor >= FQBase {
		return fqQueueMajorBase + (minor - FQBase)
	}
	return queueMajorBase + minor
}

// DefaultClassMinor is the minor of the default class's general leaf (an
// inner class with flow queueing) or, for a tree without classes, its
// default leaf.
func (p Plan) DefaultClassMinor() uint16 {
	if parent, ok := IsFQMinor(p.DefaultMinor); ok {
		return parent
	}
	return p.DefaultMinor
}

// ClassIDFor returns the HTB classid (Handle<<16 | minor) of the general leaf
// of service class index class: the value the datapath writes into
// skb->priority. A class the plan does not have maps to the default leaf.
func ClassIDFor(plan Plan, class int) uint32 {
	if class >= 0 && class <= MaxClass {
		minor := LeafBase + uint16(class)
		for _, c := range plan.Classes {
			if c.Minor == minor {
				return classID(minor)
			}
		}
	}
	return classID(plan.DefaultClassMinor())
}

// RuleClassID returns the classid of the leaf of rule slot slot.
func RuleClassID(slot uint16) uint32 {
	return classID(RuleBase + slot)
}

// ClassIDForRule returns the classid a rule's traffic should carry: its own
// leaf when the plan has one, otherwise its class's general leaf.
func ClassIDForRule(plan Plan, r RuleSpec) uint32 {
	minor := RuleBase + r.Slot
	for _, c := range plan.Classes {
		if c.Minor == minor {
			return classID(minor)
		}
	}
	return ClassIDFor(plan, r.Class)
}

func classID(minor uint16) uint32 { return uint32(Handle)<<16 | uint32(minor) }

// ClassIndexes is how many service-class indexes the class-id scheme has
// room for: a class's inner class InnerBase+index must stay below the
// general leaves at LeafBase.
const ClassIndexes = int(LeafBase - InnerBase)

// ClassLeafID returns the classid of the general leaf of the service class
// with index idx, the same on every shaped link.
func ClassLeafID(idx int) uint32 { return classID(ClassLeafMinor(idx)) }

// ClassLeafMinor is the minor number of the general leaf of the service
// class with index idx.
func ClassLeafMinor(idx int) uint16 { return LeafBase + uint16(idx) }

// RuleLeafMinor is the minor number of the leaf of rule slot slot.
func RuleLeafMinor(slot uint16) uint16 { return RuleBase + slot }

// Build plans the HTB tree of link for classes and rules. It checks the
// inputs (indexes, slots, priorities, min <= max, guarantees within the link)
// and returns an error naming the offending class or rule.
func Build(link LinkSpec, classes []ClassSpec, rules []RuleSpec) (Plan, error) {
	p, err := build(link, classes, rules)
	if err != nil {
		return Plan{}, fmt.Errorf("plan HTB tree for link %s: %w", linkName(link), err)
	}
	return p, nil
}

func linkName(l LinkSpec) string {
	if l.Name != "" {
		return l.Name
	}
	return fmt.Sprintf("ifindex %d", l.Ifindex)
}

// classPlan is the working state of one service class in build.
type classPlan struct {
	spec     ClassSpec
	ceil     uint64
	rules    []*rulePlan
	ruleSum  uint64 // Σ rule leaf rates
	share    uint64
	implicit bool
}

type rulePlan struct {
	spec  RuleSpec
	rate  uint64
	ceil  uint64
	token bool // rate is a token rate, not a guarantee
	// Per-session leaves (spec.Sessions > 0): each one's rate and ceiling.
	sessRate, sessCeil uint64
	// Shaped to a Tspec (spec.Tspec): the leaf's buckets in frame bytes.
	burst, cburst uint32
}

// planTspec gives rp, a rule shaped to its Tspec on a link of rate L,
// its rate, ceiling and buckets in frame bytes (see TspecShape).
func planTspec(rp *rulePlan, L uint64) error {
	ts := rp.spec.Tspec
	switch {
	case rp.spec.Sessions > 0:
		return fmt.Errorf("a Tspec and per-session leaves together")
	case ts.ID == 0 || ts.ID > MaxTspecShapes:
		return fmt.Errorf("id %d of the Tspec outside 1..%d", ts.ID, MaxTspecShapes)
	case ts.Rate < MinRate:
		return fmt.Errorf("token rate %s below the %s minimum", fmtRate(ts.Rate), fmtRate(MinRate))
	case ts.Peak != 0 && ts.Peak < ts.Rate:
		return fmt.Errorf("peak rate %s below the token rate %s", fmtRate(ts.Peak), fmtRate(ts.Rate))
	case ts.MaxUnit == 0 || ts.Bucket < ts.MaxUnit:
		return fmt.Errorf("bucket %d bytes smaller than the maximum packet size %d", ts.Bucket, ts.MaxUnit)
	}
	frame := uint64(ts.MaxUnit) + ethHeader
	rp.rate = round8(tspecFrames(ts.Rate, ts.MaxUnit) + 7)
	rp.ceil = rp.rate
	overdraw := max(frame, uint64(GSOCap(L)))
	burst := tspecFrames(uint64(ts.Bucket), ts.MaxUnit) + frame
	burst = max(burst-min(burst, overdraw), frame)
	rp.burst, rp.cburst = uint32(min(burst, 1<<30)), uint32(min(burst, 1<<30))
	if ts.Peak != 0 {
		rp.ceil = max(round8(tspecFrames(ts.Peak, ts.MaxUnit)+7), rp.rate)
		rp.cburst = uint32(frame)
	}
	return nil
}

// planSessions gives the session leaves of rp their rate and ceiling: an
// equal part of the rule's rate, or each one's own guarantee
// (SessionMinBW) if that is more; the rule's rate grows to their sum if
// it is less.
func planSessions(rp *rulePlan) error {
	n := uint64(rp.spec.Sessions)
	if n == 0 {
		return nil
	}
	rp.sessCeil = rp.ceil
	if m := round8(rp.spec.SessionMaxBW); m != 0 && m < rp.ceil {
		rp.sessCeil = m
	}
	rp.sessRate = max(round8(rp.spec.SessionMinBW), round8(rp.rate/n), MinRate)
	if rp.sessRate > rp.sessCeil {
		return fmt.Errorf("a session's guarantee %s exceeds its ceiling %s", fmtRate(rp.sessRate), fmtRate(rp.sessCeil))
	}
	if sum := units.Mul(n, rp.sessRate); sum > rp.rate {
		if sum > rp.ceil {
			return fmt.Errorf("%d sessions × %s exceed the rule's ceiling %s", n, fmtRate(rp.sessRate), fmtRate(rp.ceil))
		}
		rp.rate = sum
	}
	return nil
}

func build(link LinkSpec, classes []ClassSpec, rules []RuleSpec) (Plan, error) {
	L := round8(link.Rate)
	if L < MinRate {
		return Plan{}, fmt.Errorf("link rate %s below the %s minimum", fmtRate(link.Rate), fmtRate(MinRate))
	}
	if link.Rate > units.MaxRate {
		return Plan{}, fmt.Errorf("link rate %s above the %s maximum", fmtRate(link.Rate), fmtRate(units.MaxRate))
	}
	if len(classes) == 0 {
		return Plan{}, fmt.Errorf("no service classes")
	}

	byIndex := map[int]*classPlan{}
	var order []*classPlan
	var def *classPlan
	for _, c := range classes {
		name := fmt.Sprintf("class %q (index %d)", c.Name, c.Index)
		if c.Index < 0 || c.Index > MaxClass {
			return Plan{}, fmt.Errorf("%s: index outside 0..%d", name, MaxClass)
		}
		if prev, dup := byIndex[c.Index]; dup {
			return Plan{}, fmt.Errorf("%s: index already used by class %q", name, prev.spec.Name)
		}
		if c.Priority < 0 || c.Priority > 7 {
			return Plan{}, fmt.Errorf("%s: priority %d outside 0..7", name, c.Priority)
		}
		if err := checkSet(c.MinBW, "minbw"); err != nil {
			return Plan{}, fmt.Errorf("%s: %w", name, err)
		}
		if err := checkSet(c.MaxBW, "maxbw"); err != nil {
			return Plan{}, fmt.Errorf("%s: %w", name, err)
		}
		cp := &classPlan{spec: c, ceil: L}
		cp.spec.MinBW = round8(c.MinBW)
		if c.MaxBW != 0 && round8(c.MaxBW) < L {
			cp.ceil = round8(c.MaxBW)
		}
		if cp.spec.MinBW > cp.ceil {
			return Plan{}, fmt.Errorf("%s: minbw %s exceeds its ceiling %s", name, fmtRate(c.MinBW), fmtRate(cp.ceil))
		}
		if c.Default {
			if def != nil {
				return Plan{}, fmt.Errorf("%s: class %q is already the default class", name, def.spec.Name)
			}
			def = cp
		}
		byIndex[c.Index] = cp
		order = append(order, cp)
	}
	if def == nil {
		return Plan{}, fmt.Errorf("no default class")
	}
	sort.Slice(order, func(i, j int) bool { return order[i].spec.Index < order[j].spec.Index })

	slots := map[uint16]bool{}
	var explicit uint64 // Σ class MinBW + Σ rule MinBW
	var tokenRules []*rulePlan
	for _, cp := range order {
		explicit = units.Add(explicit, cp.spec.MinBW)
	}
	sorted := append([]RuleSpec(nil), rules...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Slot < sorted[j].Slot })
	for _, r := range sorted {
		name := fmt.Sprintf("rule %d", r.Slot)
		if r.Slot > MaxRuleSlot {
			return Plan{}, fmt.Errorf("%s: slot outside 0..%d", name, MaxRuleSlot)
		}
		if slots[r.Slot] {
			return Plan{}, fmt.Errorf("%s: slot used twice", name)
		}
		slots[r.Slot] = true
		cp, ok := byIndex[r.Class]
		if !ok {
			return Plan{}, fmt.Errorf("%s: unknown class index %d", name, r.Class)
		}
		if err := checkSet(r.MinBW, "minbw"); err != nil {
			return Plan{}, fmt.Errorf("%s: %w", name, err)
		}
		if err := checkSet(r.MaxBW, "maxbw"); err != nil {
			return Plan{}, fmt.Errorf("%s: %w", name, err)
		}
		if r.MinBW == 0 && r.MaxBW == 0 {
			continue // uses the class's general leaf
		}
		if r.Sessions < 0 || r.Sessions > MaxSessionLeaves {
			return Plan{}, fmt.Errorf("%s: %d session leaves outside 0..%d", name, r.Sessions, MaxSessionLeaves)
		}
		if r.Sessions > 0 && (r.SessionGroup == 0 || r.SessionGroup > MaxSessionGroups) {
			return Plan{}, fmt.Errorf("%s: session group %d outside 1..%d", name, r.SessionGroup, MaxSessionGroups)
		}
		if r.MinBW != 0 && r.MaxBW != 0 && r.MinBW > r.MaxBW {
			return Plan{}, fmt.Errorf("%s: minbw %s exceeds maxbw %s", name, fmtRate(r.MinBW), fmtRate(r.MaxBW))
		}
		rp := &rulePlan{spec: r, ceil: cp.ceil}
		if r.Tspec != nil {
			if err := planTspec(rp, L); err != nil {
				return Plan{}, fmt.Errorf("%s: %w", name, err)
			}
			if rp.rate > cp.ceil {
				return Plan{}, fmt.Errorf("%s: token rate %s exceeds the ceiling %s of class %q", name, fmtRate(rp.rate), fmtRate(cp.ceil), cp.spec.Name)
			}
			rp.ceil = min(rp.ceil, cp.ceil)
			explicit = units.Add(explicit, rp.rate)
			cp.rules = append(cp.rules, rp)
			continue
		}
		if r.MaxBW != 0 && round8(r.MaxBW) < cp.ceil {
			rp.ceil = round8(r.MaxBW)
		}
		if r.MinBW != 0 {
			rp.rate = round8(r.MinBW)
			if rp.rate > cp.ceil {
				return Plan{}, fmt.Errorf("%s: minbw %s exceeds the ceiling %s of class %q", name, fmtRate(r.MinBW), fmtRate(cp.ceil), cp.spec.Name)
			}
			explicit = units.Add(explicit, rp.rate)
		} else {
			rp.token = true
			tokenRules = append(tokenRules, rp)
		}
		cp.rules = append(cp.rules, rp)
	}
	if explicit > L {
		return Plan{}, fmt.Errorf("explicit guarantees %s exceed the link rate %s", fmtRate(explicit), fmtRate(L))
	}

	// Token rates: max(8 kbit, link/1000), shrunk to 8 kbit when they do not
	// fit beside the guarantees; never above the rule's ceiling.
	token := round8(L / 1000)
	if token < MinRate {
		token = MinRate
	}
	if !fits(order, L, token, explicit) {
		token = MinRate
	}
	for _, rp := range tokenRules {
		rp.rate = min(token, rp.ceil)
	}
	for _, cp := range order {
		for _, rp := range cp.rules {
			if err := planSessions(rp); err != nil {
				return Plan{}, fmt.Errorf("rule %d: %w", rp.spec.Slot, err)
			}
		}
	}
	for _, cp := range order {
		cp.ruleSum = 0
		for _, rp := range cp.rules {
			cp.ruleSum = units.Add(cp.ruleSum, rp.rate)
		}
		cp.implicit = cp.spec.MinBW == 0
		floor := cp.spec.MinBW
		if cp.implicit {
			floor = MinRate
		}
		if units.Add(floor, cp.ruleSum) > cp.ceil {
			return Plan{}, fmt.Errorf("class %q: its share %s and its rules' rates %s exceed its ceiling %s",
				cp.spec.Name, fmtRate(floor), fmtRate(cp.ruleSum), fmtRate(cp.ceil))
		}
	}
	var used uint64
	for _, cp := range order {
		used = units.Add(used, cp.ruleSum)
		if !cp.implicit {
			cp.share = cp.spec.MinBW
			used = units.Add(used, cp.share)
		}
	}
	var qs uint64
	if link.QSched > 0 {
		qs = max(round8(link.QSched), QSchedBands*MinRate)
		used = units.Add(used, qs)
	}
	var rt uint64
	if link.RT > 0 {
		rt = max(round8(link.RT), MinRate)
		var owners uint64 // each owner's leaf has at least MinRate
		for _, o := range link.RTOwners {
			owners = units.Add(owners, max(round8(o.Rate), MinRate))
		}
		rt = max(rt, owners)
		used = units.Add(used, rt)
	}
	if used > L {
		if rt > 0 {
			return Plan{}, fmt.Errorf("guarantees, rule rates, the qsocket scheduler and the real-time channels' %s exceed the link rate %s", fmtRate(rt), fmtRate(L))
		}
		if qs > 0 {
			return Plan{}, fmt.Errorf("guarantees, rule rates and the qsocket scheduler's %s exceed the link rate %s", fmtRate(qs), fmtRate(L))
		}
		return Plan{}, fmt.Errorf("guarantees and rule rates %s exceed the link rate %s", fmtRate(used), fmtRate(L))
	}
	if err := splitImplicit(order, def, L-used); err != nil {
		return Plan{}, err
	}

	p := Plan{Link: link, DefaultMinor: LeafBase + uint16(def.spec.Index)}
	if link.FlowQueues {
		// A leaf: what the datapath does not steer (non-IP) waits with
		// the sparse flows.
		p.DefaultMinor = FQMinor(def.spec.Index, 0)
	}
	p.Link.Rate = L
	p.Classes = append(p.Classes, mkClass(RootMinor, 0, L, L, 0, false, "link "+linkName(link)))
	for _, cp := range order {
		i := uint16(cp.spec.Index)
		label := "class " + cp.spec.Name
		prio := cp.spec.Priority
		p.Classes = append(p.Classes,
			mkClass(InnerBase+i, RootMinor, cp.share+cp.ruleSum, cp.ceil, prio, false, label),
			mkClass(LeafBase+i, InnerBase+i, cp.share, cp.ceil, prio, !link.FlowQueues, label+" general"))
		if link.FlowQueues {
			p.Classes = append(p.Classes, fqLeaves(cp.spec.Index, cp.share, cp.ceil, prio, label)...)
		}
		for _, rp := range cp.rules {
			minor := RuleBase + rp.spec.Slot
			if ts := rp.spec.Tspec; ts != nil {
				parent := mkClass(TspecMinor(ts.ID), InnerBase+i, rp.rate, rp.rate, prio, false, fmt.Sprintf("rule %d tspec", rp.spec.Slot))
				parent.Burst, parent.Cburst = rp.burst, rp.burst
				leaf := mkClass(minor, TspecMinor(ts.ID), rp.rate, rp.ceil, prio, true, fmt.Sprintf("rule %d", rp.spec.Slot))
				leaf.Burst, leaf.Cburst, leaf.QueueLimit = rp.burst, rp.cburst, rp.spec.QueueLimit
				p.Classes = append(p.Classes, parent, leaf)
				continue
			}
			leaf := mkClass(minor, InnerBase+i, rp.rate, rp.ceil, prio, rp.spec.Sessions == 0, fmt.Sprintf("rule %d", rp.spec.Slot))
			if rp.spec.Sessions == 0 {
				leaf.QueueLimit = rp.spec.QueueLimit
			}
			p.Classes = append(p.Classes, leaf)
			for k := 0; k < rp.spec.Sessions; k++ {
				sl := mkClass(SessionMinor(rp.spec.SessionGroup, k), minor, rp.sessRate, rp.sessCeil, prio, true,
					fmt.Sprintf("rule %d session %d", rp.spec.Slot, k))
				sl.QueueLimit = rp.spec.QueueLimit
				p.Classes = append(p.Classes, sl)
			}
		}
	}
	if qs > 0 {
		p.Classes = append(p.Classes, mkClass(QSchedMinor, RootMinor, qs, qs, 0, false, "qsched"))
		for b := 0; b < QSchedBands; b++ {
			rate, prio := qs, 0
			if b == QSchedBands-1 {
				rate, prio = MinRate, QSchedBands-1
			}
			c := mkClass(QSchedMinor+1+uint16(b), QSchedMinor, rate, qs, prio, true, fmt.Sprintf("qsched band %d", b))
			c.QueueLimit = QSchedQueueLimit
			p.Classes = append(p.Classes, c)
		}
	}
	if rt > 0 && len(link.RTOwners) > 0 {
		owners := append([]RTOwner(nil), link.RTOwners...)
		sort.Slice(owners, func(i, j int) bool { return owners[i].ID < owners[j].ID })
		leaves := make([]HTBClass, 0, len(owners))
		for i, o := range owners {
			if o.ID == 0 || o.ID > MaxRTOwners || i > 0 && owners[i-1].ID == o.ID {
				return Plan{}, fmt.Errorf("real-time leaf id %d: outside 1..%d or used twice", o.ID, MaxRTOwners)
			}
			if o.Prio < 0 || o.Prio > 7 {
				return Plan{}, fmt.Errorf("real-time leaf %d: priority %d outside 0..7", o.ID, o.Prio)
			}
			r := max(round8(o.Rate), MinRate)
			c := mkClass(RTMinor+o.ID, RTMinor, r, rt, o.Prio, true, fmt.Sprintf("real-time channel leaf %d", o.ID))
			c.Burst = max(c.Burst, min(o.Burst, 1<<30))
			c.Cburst = max(c.Cburst, c.Burst)
			c.QueueLimit = RTQueueLimit
			leaves = append(leaves, c)
		}
		p.Classes = append(p.Classes, mkClass(RTMinor, RootMinor, rt, rt, 0, false, "real-time channels"))
		p.Classes = append(p.Classes, leaves...)
	} else if rt > 0 {
		c := mkClass(RTMinor, RootMinor, rt, rt, 0, true, "real-time channels")
		c.QueueLimit = RTQueueLimit
		p.Classes = append(p.Classes, c)
	}
	return p, nil
}

// fits reports whether explicit guarantees, token rates and an 8 kbit floor
// for every implicit share fit in the link and under every class ceiling.
func fits(order []*classPlan, L, token, explicit uint64) bool {
	total := explicit
	for _, cp := range order {
		sum := cp.spec.MinBW
		if sum == 0 {
			sum = MinRate
			total = units.Add(total, MinRate)
		}
		for _, rp := range cp.rules {
			if rp.token {
				t := min(token, rp.ceil)
				sum = units.Add(sum, t)
				total = units.Add(total, t)
			} else {
				sum = units.Add(sum, rp.rate)
			}
		}
		if sum > cp.ceil {
			return false
		}
	}
	return total <= L
}

// splitImplicit gives the classes without MinBW their shares of rest:
// weighted water-filling with a floor of MinRate and a cap of what fits under
// each class ceiling. What rounding leaves goes to the default class (or the
// first implicit class with room) so the root sums to the link rate.
func splitImplicit(order []*classPlan, def *classPlan, rest uint64) error {
	var active []*classPlan
	for _, cp := range order {
		if cp.implicit {
			active = append(active, cp)
		}
	}
	if len(active) == 0 {
		return nil
	}
	all := append([]*classPlan(nil), active...)
	weight := func(cp *classPlan) uint64 {
		if cp.spec.Priority == scavengerPriority {
			return 1
		}
		return 4
	}
	capOf := func(cp *classPlan) uint64 { return cp.ceil - cp.ruleSum }
	remaining := rest
	for len(active) > 0 {
		var W uint64
		for _, cp := range active {
			W += weight(cp)
		}
		pool := remaining // tentative shares split the pool as it was at the start of the round
		tentative := func(cp *classPlan) uint64 { return pool * weight(cp) / W }
		var keep []*classPlan
		fixed := false
		for _, cp := range active {
			if t := tentative(cp); t > capOf(cp) {
				cp.share = capOf(cp)
				remaining -= cp.share
				fixed = true
			} else {
				keep = append(keep, cp)
			}
		}
		if fixed {
			active = keep
			continue
		}
		keep = keep[:0]
		for _, cp := range active {
			if t := tentative(cp); t < MinRate {
				if remaining < MinRate {
					return fmt.Errorf("class %q: guarantees leave less than %s of the link for it", cp.spec.Name, fmtRate(MinRate))
				}
				cp.share = MinRate
				remaining -= MinRate
				fixed = true
			} else {
				keep = append(keep, cp)
			}
		}
		if fixed {
			active = keep
			continue
		}
		for _, cp := range active {
			cp.share = round8(tentative(cp))
		}
		for _, cp := range active {
			remaining -= cp.share
		}
		active = nil
	}
	// remaining is a multiple of 8: hand it out without crossing a cap.
	cands := all
	if def.implicit {
		cands = append([]*classPlan{def}, all...)
	}
	for _, cp := range cands {
		if remaining == 0 {
			break
		}
		room := capOf(cp) - cp.share
		add := min(room, remaining)
		cp.share += add
		remaining -= add
	}
	return nil
}

// fqLeaves are the flow queueing leaves under the general leaf of class
// idx, whose rate is share: the sparse leaf gets a quarter of it, the
// buckets equal parts of the rest (each at least MinRate, so below
// (1+FQBuckets)·MinRate their rates sum to more than share: HTB then
// lends them the difference), all with the class's ceiling and priority.
// The sparse leaf is served first because sparse flows stay within its
// rate: HTB sends classes within their own rate before borrowing ones.
func fqLeaves(idx int, share, ceil uint64, prio int, label string) []HTBClass {
	parent := LeafBase + uint16(idx)
	sparse := max(round8(share/4), MinRate)
	bucket := MinRate
	if share > sparse {
		bucket = max(round8((share-sparse)/FQBuckets), MinRate)
	}
	out := make([]HTBClass, 0, 1+FQBuckets)
	c := mkClass(FQMinor(idx, 0), parent, min(sparse, ceil), ceil, prio, true, label+" sparse flows")
	c.QueueLimit = FQSparseQueue
	out = append(out, c)
	for k := 1; k <= FQBuckets; k++ {
		c := mkClass(FQMinor(idx, k), parent, min(bucket, ceil), ceil, prio, true, fmt.Sprintf("%s flow bucket %d", label, k))
		c.QueueLimit = FQBucketQueue
		out = append(out, c)
	}
	return out
}

func mkClass(minor, parent uint16, rate, ceil uint64, prio int, leaf bool, label string) HTBClass {
	return HTBClass{
		Minor: minor, ParentMinor: parent,
		Rate: rate, Ceil: ceil, Prio: prio, Leaf: leaf, Label: label,
		Burst: burstBytes(rate), Cburst: burstBytes(ceil), Quantum: quantumBytes(rate),
	}
}

// burstBytes is one full frame plus burstMillis at rate (bits/s).
func burstBytes(rate uint64) uint32 {
	b := uint64(frameBytes) + rate/8*burstMillis/1000
	if b > 1<<30 {
		b = 1 << 30
	}
	return uint32(b)
}

// quantumBytes is max(frame, rate/8/100) clamped to maxQuantum.
func quantumBytes(rate uint64) uint32 {
	q := rate / 8 / 100
	if q < frameBytes {
		q = frameBytes
	}
	if q > maxQuantum {
		q = maxQuantum
	}
	return uint32(q)
}

func checkSet(r uint64, field string) error {
	if r != 0 && r < MinRate {
		return fmt.Errorf("%s %s below the %s minimum", field, fmtRate(r), fmtRate(MinRate))
	}
	return nil
}

// round8 rounds a rate in bits/s down to whole bytes per second.
func round8(r uint64) uint64 { return r &^ 7 }

// fmtRate writes a configured rate as the policy does ("1.5mbit").
func fmtRate(r uint64) string { return units.ExactRate(r) }

// QSchedMargin is how much later than predicted at the qsched class's
// rate a band's packet may leave (ns): two full-size frames at the link's
// rate (the frame on the wire, and one of another band or class of
// priority 0 first). 0 for a plan without a qsched class.
func QSchedMargin(p Plan) uint64 {
	for _, c := range p.Classes {
		if c.Minor == QSchedMinor && p.Link.Rate > 0 {
			return 2 * frameBytes * 8 * 1e9 / p.Link.Rate
		}
	}
	return 0
}
