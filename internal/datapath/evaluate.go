package datapath

// This file is plain Go (no cilium/ebpf): the reference evaluation of a
// policy, read straight off the Rule fields. It is what the classifier's
// evaluate() (bpf/classify.h) computes by tuple-space search and app
// bitmaps — the earliest rule, in policy order, whose selectors all match
// — checked rule by rule, so that it can also say which selector of each
// rule failed. The classifier's tests compare the two over random
// policies (TestClassifyMatchesReference); `hostqos explain` uses it to
// tell why a flow got its rule.

import (
	"net/netip"
	"strings"

	"golang.org/x/sys/unix"
)

// Selectors is a set of a rule's selectors.
type Selectors uint16

// The selectors of a rule, in the order explanations list them.
const (
	SelExe Selectors = 1 << iota
	SelComm
	SelUID
	SelCgroup
	SelProto
	SelLocal
	SelRemote
	SelLPort
	SelRPort
	SelDSCPIn
)

// AppSelectors are the selectors on the socket's identity.
const AppSelectors = SelExe | SelComm | SelUID | SelCgroup

var selectorNames = []string{"exe", "comm", "uid", "cgroup", "proto", "local", "remote", "lport", "rport", "dscp_in"}

// Names are the set's selectors by the names the policy gives them
// ("exe", "comm", "uid", "cgroup", "proto", "local", "remote", "lport",
// "rport", "dscp_in"), in that order.
func (s Selectors) Names() []string {
	var out []string
	for i, n := range selectorNames {
		if s&(1<<i) != 0 {
			out = append(out, n)
		}
	}
	return out
}

func (s Selectors) String() string { return strings.Join(s.Names(), ",") }

// Subject is what rules are evaluated for: a flow (its egress 5-tuple and
// the DSCP its packets carry) and the app identity of its socket. A part
// left unknown leaves the selectors on it undecided: explaining an app
// without a flow, or a flow whose socket is not known.
type Subject struct {
	// Key is the flow (local = this host's side); nil: unknown. Ports of
	// protocols other than TCP and UDP are 0, as the classifier parses
	// them.
	Key *FlowKey
	// DSCP is the DSCP of the flow's packets as they reach the
	// classifier; -1: unknown.
	DSCP int8
	// Ident is the socket's identity; nil with NoIdent: the packet has
	// none (forwarded, or a socket created before any identity could be
	// given), and no app rule matches it; nil without NoIdent: unknown.
	Ident   *Identity
	NoIdent bool
	// Unknown are the parts of Key and Ident that are not known: the
	// selectors on them are undecided (an executable given without a
	// process knows only its exe; a flow named by its remote port alone
	// knows nothing else).
	Unknown Selectors
}

// Check is how one rule fares against a subject: the selectors it has
// that failed, and those that cannot be decided for the subject.
type Check struct {
	Failed, Undecided Selectors
}

// Matches reports whether every selector of the rule matched.
func (c Check) Matches() bool { return c.Failed == 0 && c.Undecided == 0 }

// Maybe reports whether none failed but some cannot be decided: the rule
// matches some flows (or processes) of the subject.
func (c Check) Maybe() bool { return c.Failed == 0 && c.Undecided != 0 }

// HasApp reports whether r has an app selector.
func (r *Rule) HasApp() bool {
	return len(r.Exes) > 0 || r.Comm != "" || len(r.Cgroups) > 0 || r.UID != nil
}

// CheckRule checks every selector of r against s.
func CheckRule(r *Rule, s *Subject) Check { return checkRule(r, s, true) }

// Evaluate returns the index of the first rule of rules (in policy order)
// whose selectors all match s, or -1 when none does. For a subject known
// whole, this is the rule the classifier gives the flow.
func Evaluate(rules []Rule, s *Subject) int {
	for i := range rules {
		if checkRule(&rules[i], s, false).Matches() {
			return i
		}
	}
	return -1
}

// checkRule checks r's selectors against s in the order of Selectors;
// unless all, it stops at the first that fails.
func checkRule(r *Rule, s *Subject, all bool) (c Check) {
	// note records one selector's outcome and reports whether to stop.
	note := func(c *Check, sel Selectors, decided, ok bool) bool {
		switch {
		case !decided:
			c.Undecided |= sel
		case !ok:
			c.Failed |= sel
			return !all
		}
		return false
	}
	if r.HasApp() {
		id := s.Ident
		none := id == nil && s.NoIdent
		known := func(sel Selectors) bool { return none || id != nil && s.Unknown&sel == 0 }
		has := !none && id != nil
		if len(r.Exes) > 0 && note(&c, SelExe, known(SelExe), has && containsFile(r.Exes, id.Exe)) {
			return c
		}
		if r.Comm != "" && note(&c, SelComm, known(SelComm), has && r.Comm == id.Comm) {
			return c
		}
		if r.UID != nil && note(&c, SelUID, known(SelUID), has && *r.UID == id.UID) {
			return c
		}
		if len(r.Cgroups) > 0 && note(&c, SelCgroup, known(SelCgroup), has && cgroupMatch(r.Cgroups, id.Cgroups)) {
			return c
		}
	}
	k := s.Key
	// flowKnown: the part of the flow sel selects by is known.
	flowKnown := func(sel Selectors) bool { return k != nil && s.Unknown&sel == 0 }
	if r.Proto != 0 && note(&c, SelProto, flowKnown(SelProto), k != nil && (r.Proto == k.Proto || r.Proto == unix.IPPROTO_ICMP && k.Proto == unix.IPPROTO_ICMPV6)) {
		return c
	}
	if r.Local.IsValid() && note(&c, SelLocal, flowKnown(SelLocal), k != nil && prefixHas(r.Local, k.Local.Addr())) {
		return c
	}
	if r.Remote.IsValid() && note(&c, SelRemote, flowKnown(SelRemote), k != nil && prefixHas(r.Remote, k.Remote.Addr())) {
		return c
	}
	// Ports: those of TCP and UDP; any other protocol's are 0, known or
	// not.
	lport, rport := uint16(0), uint16(0)
	portless := flowKnown(SelProto) && k.Proto != unix.IPPROTO_TCP && k.Proto != unix.IPPROTO_UDP
	if k != nil && !portless {
		lport, rport = k.Local.Port(), k.Remote.Port()
	}
	if (r.LPortFrom != 0 || r.LPortTo != 0) && note(&c, SelLPort, portless || flowKnown(SelLPort), portIn(lport, r.LPortFrom, r.LPortTo)) {
		return c
	}
	if (r.RPortFrom != 0 || r.RPortTo != 0) && note(&c, SelRPort, portless || flowKnown(SelRPort), portIn(rport, r.RPortFrom, r.RPortTo)) {
		return c
	}
	if r.DSCPIn >= 0 {
		note(&c, SelDSCPIn, s.DSCP >= 0, r.DSCPIn == s.DSCP)
	}
	return c
}

func containsFile(ids []FileID, id FileID) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

// cgroupMatch: a rule's cgroup matches the socket's own cgroup and its
// ancestors, as far as the identity records them — the first cgLevels
// levels and the socket's own cgroup (struct hq_ident's cg and cg_own).
func cgroupMatch(refs []CgroupRef, levels []uint64) bool {
	has := func(id uint64) bool {
		for _, r := range refs {
			if r.ID == id {
				return true
			}
		}
		return false
	}
	for i, id := range levels {
		if (i < cgLevels || i == len(levels)-1) && has(id) {
			return true
		}
	}
	return false
}

// prefixHas reports whether a rule's prefix holds a, as the classifier
// compiles it: an IPv4-mapped prefix of at least 96 bits is the IPv4
// prefix it maps, and a prefix matches only addresses of its family.
func prefixHas(p netip.Prefix, a netip.Addr) bool {
	if p.Addr().Is4In6() && p.Bits() >= 96 {
		p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
	}
	return p.Contains(a) // Contains ignores the host bits
}

// portIn reports whether p is in from..to (to 0: from alone; both 0:
// any).
func portIn(p, from, to uint16) bool {
	if from == 0 && to == 0 {
		return true
	}
	if to == 0 {
		to = from
	}
	return p >= from && p <= to
}
