package datapath

import (
	"math"
	"slices"
)

// Rule positions
//
// The classifier knows a rule by its position in the policy buffer's part
// of hq_rules: the tuple-space entries and chains, the app-bit index and
// each tuple's earliest rule hold positions, and the search keeps the
// smallest position that matches. Only the order of positions matters
// (first match in policy order); they need not be contiguous. A policy is
// therefore laid out with gaps (positions spread over the buffer's
// MaxRules entries), and a change keeps every rule where the previous
// policy had it (by slot) as long as the order allows: a rule added
// between two others takes a free position between theirs, and only when
// there is none are a few neighbours spread again. Adding one rule to
// 10,000 then writes its own entries and a handful of moved ones instead
// of every entry after it.

// noPos marks a slot without a position in a placement.
const noPos = ^uint32(0)

// placeRules gives the rules, by slot in policy order, strictly increasing
// positions below capacity (len(slots) <= capacity), keeping the position
// prev gives a slot (prev[slot], noPos: none; nil: no previous placement)
// for as many rules as the order allows: the longest run, in policy order,
// of previous positions that still increase. The others are placed into
// the gaps around them; where a gap is too small, the window of rules
// around it grows until it has room to spare, and is spread evenly. When
// more than an eighth of the rules would be placed anew, all are.
func placeRules(slots []uint16, prev []uint32, capacity int) []uint32 {
	n := len(slots)
	pos := make([]uint32, n)
	for i := range pos {
		pos[i] = noPos
	}
	if prev != nil {
		keepIncreasing(slots, prev, capacity, pos)
		// A change that places more than an eighth of the rules anew (a
		// reload, a reordering) lays the policy out afresh: its windows
		// would cover most of it anyway, one at a time.
		placed := 0
		for _, p := range pos {
			if p != noPos {
				placed++
			}
		}
		if n-placed > n/8 {
			for i := range pos {
				pos[i] = noPos
			}
		}
	}
	// The density (rules per position) a window of w rules may have
	// after the change falls from 1 for one rule to the buffer's for the
	// whole policy as the window grows (log w / log n): a window spread
	// evenly leaves each window inside it room for more rules than that
	// one's bound, so that later additions nearby move few rules (list
	// labelling, amortised O(log² n) moves an addition).
	free := 1 - float64(n)/float64(capacity)
	logN := math.Log2(float64(n) + 1)
	fits := func(w int, room uint32) bool {
		if room == uint32(capacity) {
			return true
		}
		bound := 1 - free*min(1, math.Log2(float64(w)+1)/logN)
		return float64(w) <= bound*float64(room)
	}
	for i := 0; i < n; {
		if pos[i] != noPos {
			i++
			continue
		}
		a, b := i, i
		for b < n && pos[b] == noPos {
			b++
		}
		for {
			lo, hi := uint32(0), uint32(capacity)
			if a > 0 {
				lo = pos[a-1] + 1
			}
			if b < n {
				hi = pos[b]
			}
			if hi >= lo && hi-lo >= uint32(b-a) && fits(b-a, hi-lo) {
				spread(pos[a:b], lo, hi)
				break
			}
			if a > 0 {
				a--
			}
			if b < n {
				b++
				for b < n && pos[b] == noPos {
					b++
				}
			}
		}
		i = b
	}
	return pos
}

// spread places len(pos) rules evenly over [lo, hi) (hi-lo >= len(pos)).
func spread(pos []uint32, lo, hi uint32) {
	w, room := uint64(len(pos)), uint64(hi-lo)
	for t := range pos {
		pos[t] = lo + uint32((2*uint64(t)+1)*room/(2*w))
	}
}

// keepIncreasing sets pos[i] = prev[slots[i]] for the longest subsequence
// of rules whose previous positions (below capacity) increase in policy
// order (all of them when rules were only added or removed).
func keepIncreasing(slots []uint16, prev []uint32, capacity int, pos []uint32) {
	old := func(i int) uint32 {
		if int(slots[i]) < len(prev) && prev[slots[i]] < uint32(capacity) {
			return prev[slots[i]]
		}
		return noPos
	}
	last, sorted := int64(-1), true
	for i := range slots {
		if p := old(i); p != noPos {
			if int64(p) <= last {
				sorted = false
				break
			}
			last = int64(p)
		}
	}
	if sorted {
		for i := range slots {
			pos[i] = old(i)
		}
		return
	}
	// Longest strictly increasing subsequence (patience sorting): tails[k]
	// is the rule ending the best run of length k+1 found so far.
	var tails []int
	parent := make([]int, len(slots))
	for i := range slots {
		p := old(i)
		if p == noPos {
			continue
		}
		k, _ := slices.BinarySearchFunc(tails, p, func(j int, p uint32) int {
			switch q := old(j); {
			case q < p:
				return -1
			case q > p:
				return 1
			}
			return 0
		})
		parent[i] = -1
		if k > 0 {
			parent[i] = tails[k-1]
		}
		if k == len(tails) {
			tails = append(tails, i)
		} else {
			tails[k] = i
		}
	}
	if len(tails) == 0 {
		return
	}
	for i := tails[len(tails)-1]; i >= 0; i = parent[i] {
		pos[i] = old(i)
	}
}

// rulesAt lays the rules out by position: a rule's entry at its position,
// zero in the gaps (never referenced).
func (c *compiled) rulesAt() []hostqosHqRule {
	if len(c.rules) == 0 {
		return nil
	}
	out := make([]hostqosHqRule, c.pos[len(c.pos)-1]+1)
	for i := range c.rules {
		out[c.pos[i]] = c.rules[i]
	}
	return out
}

// placement is the position of each slot (noPos: none), for the next
// change's placeRules.
func (c *compiled) placement() []uint32 {
	out := make([]uint32, MaxRules)
	for i := range out {
		out[i] = noPos
	}
	for i := range c.rules {
		out[c.rules[i].Slot] = c.pos[i]
	}
	return out
}

// tnodeOf is the chain node of the rule at position pos in the entry of
// family fi (0, 1) and its protocol's index pi (0; 1 for ICMPv6 under an
// ICMP rule): fixed by the rule's position, so that a rule added to or
// removed from a chain rewrites its own node and its predecessor's link
// only. Node 0 (no node) would be the first rule's, which heads every
// entry it is in and so never needs a node; a rule is in at most four
// entries, so the nodes fit HQ_TSS_ENTRIES (4 × HQ_MAX_RULES).
func tnodeOf(pos uint32, fi, pi int) uint32 { return pos*4 + uint32(fi*2+pi) }
