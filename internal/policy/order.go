package policy

import (
	"math/bits"
	"sort"
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
	out := append([]Rule(nil), p.Rules...)
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.UserRun != b.UserRun {
			return b.UserRun
		}
		if a.Precedence != b.Precedence {
			return a.Precedence > b.Precedence
		}
		if sa, sb := a.Specificity(), b.Specificity(); sa != sb {
			return sa > sb
		}
		return a.Name < b.Name
	})
	return out
}
