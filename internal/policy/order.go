package policy

import (
	"cmp"
	"math/bits"
	"slices"
	"strings"
)

// Specificity points of each selector; see docs/config.md, "Precedence".
const (
	scoreExe     = 48 // exact executable path
	scoreExeGlob = 32 // executable glob
	scoreUnit    = 40
	scoreCgroup  = 40
	scoreComm    = 32
	scoreUser    = 16
	scoreProto   = 8
	scoreDSCPIn  = 8
	// Prefixes score 1 + 32·len/maxlen: 1 (/0) .. 33 (one host, v4 or v6).
	// Port ranges score 17 − ⌈log2(width)⌉: 17 (one port) .. 1 (all ports).
)

// Specificity is the rule's specificity score: the sum of the points of
// its set selectors. Among rules of equal Precedence, higher scores are
// evaluated first.
func (r Rule) Specificity() int {
	s := 0
	if r.Exe != "" {
		if IsGlob(r.Exe) {
			s += scoreExeGlob
		} else {
			s += scoreExe
		}
	}
	if r.Unit != "" {
		s += scoreUnit
	}
	if r.Cgroup != "" {
		s += scoreCgroup
	}
	if r.Comm != "" {
		s += scoreComm
	}
	if r.User != "" {
		s += scoreUser
	}
	if r.Proto != "" {
		s += scoreProto
	}
	if r.DSCPIn != NoDSCP {
		s += scoreDSCPIn
	}
	for _, p := range []PortRange{r.LPort, r.RPort} {
		if p.IsZero() || p.To < p.From {
			continue
		}
		width := uint64(p.To) - uint64(p.From) + 1
		s += 17 - bits.Len64(width-1) // ⌈log2(width)⌉
	}
	if r.Local.IsValid() {
		s += 1 + 32*r.Local.Bits()/r.Local.Addr().BitLen()
	}
	if r.Remote.IsValid() {
		s += 1 + 32*r.Remote.Bits()/r.Remote.Addr().BitLen()
	}
	return s
}

// OrderedRules returns the rules in evaluation order; the first rule whose
// selectors all match a packet decides it. The order is:
//
//  0. every admin rule before every rule of an ordinary user's run
//     (UserRun): no precedence reaches below that tier, so what an admin
//     rule matches keeps the admin's treatment;
//  1. higher Precedence first (0 means unset and sorts after every set
//     precedence);
//  2. then higher Specificity first;
//  3. then by name, for determinism.
func (p *Policy) OrderedRules() []Rule {
	order := p.RuleOrder()
	out := make([]Rule, len(order))
	for i, j := range order {
		out[i] = p.Rules[j]
	}
	return out
}

// RuleOrder is OrderedRules as indexes into p.Rules, without copying the
// rules (a policy of 10,000 rules is ordered on every change).
func (p *Policy) RuleOrder() []int {
	// Sort indexes with each rule's key computed once: a policy of
	// 10,000 rules is ordered on every change.
	type key struct {
		userRun    bool
		precedence int
		spec       int
		i          int
	}
	keys := make([]key, len(p.Rules))
	for i := range p.Rules {
		r := &p.Rules[i]
		keys[i] = key{r.UserRun, r.Precedence, r.Specificity(), i}
	}
	// A total order (the index last, for equal names), so an unstable
	// sort gives what a stable one would, in O(n log n).
	slices.SortFunc(keys, func(a, b key) int {
		if a.userRun != b.userRun {
			if b.userRun {
				return -1
			}
			return 1
		}
		if c := cmp.Compare(b.precedence, a.precedence); c != 0 {
			return c
		}
		if c := cmp.Compare(b.spec, a.spec); c != 0 {
			return c
		}
		if c := strings.Compare(p.Rules[a.i].Name, p.Rules[b.i].Name); c != 0 {
			return c
		}
		return cmp.Compare(a.i, b.i)
	})
	out := make([]int, len(keys))
	for i, k := range keys {
		out[i] = k.i
	}
	return out
}
