package policy

import (
	"fmt"
	"math"
	"net/netip"
	"sort"
	"strconv"
	"strings"

	"github.com/hostqos/hostqos/internal/units"
)

// Admission control
//
// A guarantee (minbw) is a promise that the shaper can always deliver that
// rate, however busy the link. Promises can only be kept if, on every link
// the traffic may leave by, they add up to no more than the link can carry.
// hostqos follows the RSVP QoS manager's bandwidth bookkeeping (seed 001): a
// link has a configured capacity, each class has a minimum and a maximum,
// and a reservation is admitted only while the reserved total stays within
// the configured bounds. Concretely, Admit checks:
//
//  1. Per shaped link (EgressRate > 0):
//
//     Σ class.MinBW + Σ rule.MinBW (pass rules)  ≤  Reservable × EgressRate
//
//     Rules are not bound to a link (a flow may leave by any of them), so
//     every guarantee is counted on every shaped link. Reservable (default
//     0.8) keeps a share of the link that no guarantee can claim, for
//     unclassified and control traffic and for the shaper's own error; like
//     the RSVP manager's minimum for best effort, it means best effort is
//     never starved. The capacity is rounded to the nearest bit per second.
//
//  2. Per class with a ceiling (MaxBW > 0) whose rules claim guarantees:
//
//     class.MinBW + Σ rule.MinBW (pass rules in the class)  ≤  class.MaxBW
//
//     A class's ceiling caps everything inside it, so guarantees given to
//     its rules must fit under it (the RSVP manager's per-queue maximum).
//
// Links without an EgressRate only mark and count; guarantees are not
// enforceable there and produce a warning (see Warnings), not an error.

// AdmissionError is a refusal by admission control: guarantees that do not
// fit (Admit), or a change that would take away the shaping they rely on.
// Its Errors name every violation; errors.As finds them (and each
// *FieldError) through it.
type AdmissionError struct{ Errors Errors }

func (e *AdmissionError) Error() string { return e.Errors.Error() }

// Unwrap gives the violations.
func (e *AdmissionError) Unwrap() error { return e.Errors }

// Contribution is one object's share of a link's guarantees: its kind
// (class, rule, reservation, qsockets, rtchannel), name and rate.
type Contribution struct {
	Kind string `json:"kind"`
	Name string `json:"name"`
	Rate Rate   `json:"rate"`
}

func (c Contribution) String() string { return c.Kind + " " + c.Name + " " + c.Rate.String() }

// sortContributions orders contributions largest first (then by kind and
// name).
func sortContributions(cs []Contribution) {
	sort.SliceStable(cs, func(i, j int) bool {
		if cs[i].Rate != cs[j].Rate {
			return cs[i].Rate > cs[j].Rate
		}
		if cs[i].Kind != cs[j].Kind {
			return cs[i].Kind < cs[j].Kind
		}
		return cs[i].Name < cs[j].Name
	})
}

// FormatContributions lists the largest contributions first, at most
// five, for messages.
func FormatContributions(cs []Contribution) string { return formatContributions(cs) }

// formatContributions lists the largest contributions first, at most five.
func formatContributions(cs []Contribution) string {
	sortContributions(cs)
	const show = 5
	parts := make([]string, 0, show+1)
	for i, c := range cs {
		if i == show {
			var rest Rate
			for _, r := range cs[show:] {
				rest = units.Add(rest, r.Rate)
			}
			parts = append(parts, fmt.Sprintf("and %d more (%s)", len(cs)-show, rest))
			break
		}
		parts = append(parts, c.String())
	}
	return strings.Join(parts, ", ")
}

// guarantees returns every explicit guarantee in the policy and their sum.
func (p *Policy) guarantees() ([]Contribution, Rate) { return p.guaranteesOn("") }

// guaranteesOn returns the guarantees counted on link: every one but the
// reservations admitted on another link only ("": every one).
func (p *Policy) guaranteesOn(link string) ([]Contribution, Rate) {
	cs, total := p.classAndRuleGuarantees()
	rcs, rtotal := p.reservationContributionsOn(link)
	return append(cs, rcs...), units.Add(total, rtotal)
}

// classAndRuleGuarantees are the guarantees counted on every link: the
// classes' and the pass rules' (their sessions' included). Sums and
// products saturate (units.Add, units.Mul): a total too large for 64 bits
// exceeds every capacity instead of wrapping below it.
func (p *Policy) classAndRuleGuarantees() ([]Contribution, Rate) {
	var cs []Contribution
	var total Rate
	for _, c := range p.Classes {
		if c.MinBW > 0 {
			cs = append(cs, Contribution{"class", c.Name, c.MinBW})
			total = units.Add(total, c.MinBW)
		}
	}
	for _, r := range p.Rules {
		if r.MinBW > 0 && r.EffectiveAction() == ActionPass {
			cs = append(cs, Contribution{"rule", r.Name, r.MinBW})
			total = units.Add(total, r.MinBW)
		}
		// Each admitted session's guarantee (Q-Pod): N × per-session minbw.
		if n := r.MaxSessions; n > 0 && r.PerSessionMinBW > 0 && r.EffectiveAction() == ActionPass {
			x := units.Mul(Rate(n), r.PerSessionMinBW)
			cs = append(cs, Contribution{"rule", fmt.Sprintf("%s sessions %d × %s", r.Name, n, r.PerSessionMinBW), x})
			total = units.Add(total, x)
		}
	}
	return cs, total
}

// Guaranteed is the sum of every explicit guarantee (class minbw and pass
// rules' minbw) that admission control counts against each shaped link.
func (p *Policy) Guaranteed() Rate {
	_, total := p.guarantees()
	return total
}

// GuaranteedOn is what admission control counts against link: every
// guarantee but the reservations admitted on another link only.
func (p *Policy) GuaranteedOn(link string) Rate {
	_, total := p.guaranteesOn(link)
	return total
}

// HeldOn is what admission counts against link, extra's included: the
// total and every contribution, largest first.
func (p *Policy) HeldOn(link string, extra Extra) (Rate, []Contribution) {
	cs, total := p.guaranteesOn(link)
	xcs, xtotal := extra.sum(link)
	cs = append(cs, xcs...)
	sortContributions(cs)
	return units.Add(total, xtotal), cs
}

// GuaranteesOn is GuaranteedOn with the largest contributions written out
// ("class voice 4mbit, reservation r 2mbit"), for messages.
func (p *Policy) GuaranteesOn(link string) (Rate, string) {
	cs, total := p.guaranteesOn(link)
	return total, formatContributions(cs)
}

// Capacity is the total that guarantees may claim on the link:
// ReservableShare × EgressFloor (an automatic rate's minimum), rounded
// to the nearest bit per second. It is 0 for a link without an
// EgressRate.
func (l Link) Capacity() Rate {
	return Rate(math.Round(l.ReservableShare() * float64(l.EgressFloor())))
}

// Admit runs admission control over the whole policy (see the comment at
// the top of admission.go) and returns every violation, as an
// *AdmissionError whose Errors name source (a file path or "api"), or nil.
func (p *Policy) Admit(source string) error { return p.AdmitWith(source, nil) }

// Extra gives the guarantees held on a link outside the policy: the
// scheduled qsockets' rates and the real-time channels (nil: none).
type Extra func(link string) []Contribution

// sum is what extra holds on link and its total.
func (extra Extra) sum(link string) ([]Contribution, Rate) {
	if extra == nil {
		return nil, 0
	}
	cs := extra(link)
	var total Rate
	for _, c := range cs {
		total = units.Add(total, c.Rate)
	}
	return cs, total
}

// AdmitWith is Admit with the guarantees extra holds on each link counted
// in the same budget: one admission per link for every kind of guarantee.
func (p *Policy) AdmitWith(source string, extra Extra) error {
	var errs Errors
	// The classes' and rules' part is the same on every link: summed once,
	// not once per link (100 links × 10,000 rules on every change).
	var common []Contribution
	var commonTotal Rate
	summed := false
	for i, l := range p.Links {
		if l.EgressRate == 0 {
			continue
		}
		if !summed {
			common, commonTotal = p.classAndRuleGuarantees()
			summed = true
		}
		rcs, rtotal := p.reservationContributionsOn(l.Name)
		xcs, xtotal := extra.sum(l.Name)
		cs := append(append(common[:len(common):len(common)], rcs...), xcs...)
		total := units.Add(units.Add(commonTotal, rtotal), xtotal)
		capacity := l.Capacity()
		if total > capacity {
			errs = append(errs, &FieldError{
				Source: source,
				Object: objectLabel("link", l.Name, i),
				Reason: fmt.Sprintf("guarantees %s exceed reservable capacity %s (%s × %s): %s",
					total, capacity, strconv.FormatFloat(l.ReservableShare(), 'g', -1, 64), l.EgressRate,
					formatContributions(append([]Contribution(nil), cs...))),
				Fix: admitFix(p),
			})
		}
	}
	errs = append(errs, p.admitBuffers(source)...)
	for i, c := range p.Classes {
		if c.MaxBW == 0 {
			continue
		}
		var in []Contribution
		var sum, rules Rate
		if c.MinBW > 0 {
			in = append(in, Contribution{"class", c.Name, c.MinBW})
			sum = c.MinBW
		}
		for _, r := range p.Rules {
			if r.MinBW > 0 && r.EffectiveAction() == ActionPass && r.EffectiveClass() == c.Name {
				in = append(in, Contribution{"rule", r.Name, r.MinBW})
				sum = units.Add(sum, r.MinBW)
				rules = units.Add(rules, r.MinBW)
			}
		}
		if rules > 0 && sum > c.MaxBW {
			errs = append(errs, &FieldError{
				Source: source,
				Object: objectLabel("class", c.Name, i),
				Reason: fmt.Sprintf("guarantees %s exceed the class ceiling maxbw %s: %s", sum, c.MaxBW, formatContributions(in)),
				Fix:    "lower a minbw or raise the class's maxbw",
			})
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return &AdmissionError{Errors: errs}
}

// Warnings lists things that are valid but probably not what the admin
// meant: guarantees and ceilings with no shaped link to enforce them, class
// ceilings above a link's rate, and rules that can never match because an
// earlier rule has the same selectors.
func (p *Policy) Warnings() []string {
	var ws []string
	shaped := false
	for _, l := range p.Links {
		if l.EgressRate > 0 {
			shaped = true
		}
	}
	if !shaped {
		for _, c := range p.Classes {
			if c.MinBW > 0 || c.MaxBW > 0 {
				ws = append(ws, fmt.Sprintf("class %q: minbw/maxbw are not enforced: no link has an egress_rate, so nothing is shaped", c.Name))
			}
		}
		for _, r := range p.Rules {
			if r.MinBW > 0 {
				ws = append(ws, fmt.Sprintf("rule %q: minbw %s is not enforced: no link has an egress_rate, so nothing is shaped", r.Name, r.MinBW))
			}
		}
	}
	for _, l := range p.Links {
		if l.EgressRate == 0 {
			continue
		}
		for _, c := range p.Classes {
			if !l.EgressRate.Auto() && c.MaxBW > Rate(l.EgressRate) {
				ws = append(ws, fmt.Sprintf("class %q: maxbw %s exceeds link %q egress_rate %s; it is capped at the link rate there", c.Name, c.MaxBW, l.Name, l.EgressRate))
			}
		}
	}
	// The first rule evaluated with each set of selectors (a map, not a
	// pairwise comparison: policies have up to MaxRules rules).
	first := map[selectorKey]string{}
	for _, r := range p.OrderedRules() {
		k := selectorsOf(r)
		if earlier, ok := first[k]; ok {
			ws = append(ws, fmt.Sprintf("rule %q never matches: rule %q has the same selectors and is evaluated first", r.Name, earlier))
			continue
		}
		first[k] = r.Name
	}
	return ws
}

// selectorKey is what a rule selects by: two rules with equal keys match
// the same packets.
type selectorKey struct {
	exe, comm, cgroup, unit, user, proto string
	local, remote                        netip.Prefix
	lport, rport                         PortRange
	dscpIn                               DSCP
}

func selectorsOf(r Rule) selectorKey {
	return selectorKey{r.Exe, r.Comm, r.Cgroup, r.Unit, r.User, r.Proto, r.Local, r.Remote, r.LPort, r.RPort, r.DSCPIn}
}

// admitFix is how to fix a refusal of guarantees.
func admitFix(p *Policy) string {
	if _, r := p.reservationContributions(); r > 0 {
		return "lower a minbw or a reservation's rate, or raise egress_rate/reservable"
	}
	return "lower a minbw or raise egress_rate/reservable"
}
