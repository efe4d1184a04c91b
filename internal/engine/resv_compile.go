package engine

import (
	"fmt"

	"github.com/hostqos/hostqos/internal/datapath"
	"github.com/hostqos/hostqos/internal/policy"
	"github.com/hostqos/hostqos/internal/shaper"
	"github.com/hostqos/hostqos/internal/units"
)

// How reservations compile. Each reservation becomes a rule of its own in
// the compiled policy (resvRuleName: "resv:NAME", a name no user rule can
// have) with its session selector, evaluated before the other rules
// (precedence resvPrecedence), plus a datapath.Reservation the rule names
// (Rule.Reservation): its Tspec in bytes/s and bytes, its service, its
// session limit and, for guaranteed service, the send buffer of its
// sockets. The rule's HTB leaf is the reservation's: guaranteed at
// rate = ceiling = R with a queue of at least ⌈b/m⌉ packets
// (datapath.FlowControl); controlled load guaranteed r, excess demoted to
// the default class. A rule with max_sessions gets a reservation of no
// service (session counting only), and its per-session guarantee and
// ceiling become its leaf's, times max_sessions, and each session gets a
// leaf of its own under it (sessionLeaves).

// resvPrecedence is the precedence of a reservation's rule: before every
// rule and admin run (60000) but after nothing else.
const resvPrecedence = policy.MaxPrecedence

// Classes a reservation's rule goes into (when the policy has them).
const (
	guaranteedClass     = "voice"
	controlledLoadClass = "interactive"
)

// resvKeys names the policy's reservation ids: one per reservation and
// per rule with a session limit (sorted, so that ids are given in a
// stable order).
func resvKeys(p *policy.Policy) []string {
	var keys []string
	for _, r := range p.Reservations {
		keys = append(keys, resvRuleName(r.Name))
	}
	for _, r := range p.Rules {
		if r.MaxSessions > 0 {
			keys = append(keys, "rule:"+r.Name)
		}
	}
	return sortedStrings(keys)
}

// expandReservations returns p with a rule per reservation (and leaves
// for the per-session guarantees of rules); p is not changed.
func expandReservations(p *policy.Policy) *policy.Policy {
	if len(p.Reservations) == 0 && !anySessions(p) {
		return p
	}
	ep := *p
	ep.Rules = make([]policy.Rule, 0, len(p.Rules)+len(p.Reservations))
	for _, r := range p.Rules {
		if r.MaxSessions > 0 && r.EffectiveAction() == policy.ActionPass {
			n := policy.Rate(r.MaxSessions)
			if r.PerSessionMinBW > 0 && r.MinBW == 0 {
				r.MinBW = units.Mul(n, r.PerSessionMinBW)
			}
			if r.PerSessionMaxBW > 0 && r.MaxBW == 0 {
				r.MaxBW = units.Mul(n, r.PerSessionMaxBW)
			}
		}
		ep.Rules = append(ep.Rules, r)
	}
	for _, rv := range p.Reservations {
		ru := rv.SessionRule()
		ru.Name, ru.Precedence = resvRuleName(rv.Name), resvPrecedence
		ru.Class = policy.DefaultClassName
		switch rv.Service {
		case policy.ServiceGuaranteed:
			ru.MinBW, ru.MaxBW = rv.EffServiceRate(), rv.EffServiceRate()
			ru.Class = classOr(p, guaranteedClass)
		case policy.ServiceControlledLoad:
			ru.MinBW = rv.Rate
			ru.Class = classOr(p, controlledLoadClass)
		}
		if rv.MaxSessions > 0 && rv.PerSessionMaxBW > 0 && ru.MaxBW == 0 {
			ru.MaxBW = units.Mul(policy.Rate(rv.MaxSessions), rv.PerSessionMaxBW)
		}
		ep.Rules = append(ep.Rules, ru)
	}
	return &ep
}

func anySessions(p *policy.Policy) bool {
	for _, r := range p.Rules {
		if r.MaxSessions > 0 {
			return true
		}
	}
	return false
}

// classOr is name when the policy has that class, else the default class.
func classOr(p *policy.Policy, name string) string {
	if _, ok := p.Class(name); ok {
		return name
	}
	return policy.DefaultClassName
}

// compileAll compiles p with its reservations (see above).
func compileAll(p *policy.Policy, runs []runCgroup, slots *slotTable, cgRoot string) (*compiled, error) {
	ep := expandReservations(p)
	c, err := compile(ep, runs, slots, cgRoot)
	if err != nil {
		return nil, err
	}
	if err := attachReservations(p, c, slots); err != nil {
		return nil, err
	}
	return c, nil
}

// attachReservations adds the datapath reservations of p to c and names
// them in their rules.
func attachReservations(p *policy.Policy, c *compiled, slots *slotTable) error {
	if len(p.Reservations) == 0 && !anySessions(p) {
		return nil
	}
	bySlot := map[uint16]datapath.Reservation{}
	def, _ := p.Class(policy.DefaultClassName)
	defLeaf := shaper.ClassLeafID(slots.Classes[policy.DefaultClassName])
	idOf := func(key string) (uint16, error) {
		n, ok := slots.Resv[key]
		if !ok {
			return 0, fmt.Errorf("compile %s: no reservation id assigned", key)
		}
		return uint16(n + 1), nil
	}
	for _, rv := range p.Reservations {
		key := resvRuleName(rv.Name)
		id, err := idOf(key)
		if err != nil {
			return err
		}
		slot, ok := slots.Rules[key]
		if !ok {
			return fmt.Errorf("compile reservation %q: no rule slot assigned", rv.Name)
		}
		dr := datapath.Reservation{
			ID: id, Rate: uint64(rv.Rate) / 8, Bucket: uint64(rv.Burst), Peak: uint64(rv.Peak) / 8,
			MinUnit: uint32(rv.EffMinUnit()), MaxUnit: uint32(rv.EffMaxUnit()),
			DSCP: -1, DemoteDSCP: -1, MaxSessions: uint32(rv.MaxSessions),
		}
		switch rv.Service {
		case policy.ServiceGuaranteed:
			dr.Service = datapath.ServiceGuaranteed
			sndbuf, queue := datapath.FlowControl(dr.Bucket, dr.MinUnit, dr.MaxSessions)
			dr.SendBuffer = sndbuf
			for i := range c.Rules {
				if c.Rules[i].Slot == uint16(slot) {
					c.Rules[i].QueueLimit = queue
				}
			}
		case policy.ServiceControlledLoad:
			dr.Service = datapath.ServiceControlledLoad
			dr.DemoteClassID, dr.DemoteDSCP = defLeaf, int8(def.DSCP)
		default:
			dr.Service = datapath.ServiceBestEffort
		}
		sessionLeaves(c, &dr, uint16(slot), rv.MaxSessions, rv.PerSessionMinBW, rv.PerSessionMaxBW)
		if rv.Link != "" {
			if c.RuleLink == nil {
				c.RuleLink = map[uint16]string{}
			}
			c.RuleLink[uint16(slot)] = rv.Link
		}
		bySlot[uint16(slot)] = dr
	}
	for _, r := range p.Rules {
		if r.MaxSessions == 0 || r.EffectiveAction() != policy.ActionPass || r.Police != 0 {
			continue
		}
		id, err := idOf("rule:" + r.Name)
		if err != nil {
			return err
		}
		dr := datapath.Reservation{ID: id, Service: datapath.ServiceNone,
			DSCP: -1, DemoteDSCP: -1, MaxSessions: uint32(r.MaxSessions)}
		sessionLeaves(c, &dr, uint16(slots.Rules[r.Name]), r.MaxSessions, r.PerSessionMinBW, r.PerSessionMaxBW)
		bySlot[uint16(slots.Rules[r.Name])] = dr
	}
	for i := range c.Datapath.Rules {
		dr := &c.Datapath.Rules[i]
		if rv, ok := bySlot[dr.Slot]; ok && dr.ActionCode == datapath.ActPass {
			dr.Reservation = rv.ID
			if rv.SessionClassID != 0 {
				// Traffic without a session: the class's general leaf
				// (the rule's own class is the sessions' parent).
				dr.ClassID = shaper.ClassLeafID(int(dr.ServiceClass))
			}
			c.Datapath.Reservations = append(c.Datapath.Reservations, rv)
		}
	}
	return nil
}

// sessionLeaves gives every session of a rule or reservation with
// per-session bandwidth (max_sessions with per_session_minbw or
// per_session_maxbw) an HTB leaf of its own under the rule's class: each
// is guaranteed its share (per_session_minbw, or an equal part of the
// rule's guarantee if that is more), capped at per_session_maxbw, so one
// greedy session cannot take what the others were admitted with. The
// datapath gives a socket a free leaf when it takes a session (at
// connect) and back when it gives the session up (close). Leaves are
// numbered by the reservation id (its session group).
func sessionLeaves(c *compiled, dr *datapath.Reservation, slot uint16, n int, minbw, maxbw policy.Rate) {
	if n == 0 || n > shaper.MaxSessionLeaves || (minbw == 0 && maxbw == 0) || int(dr.ID) > shaper.MaxSessionGroups {
		return
	}
	for i := range c.Rules {
		if c.Rules[i].Slot == slot {
			rs := &c.Rules[i]
			rs.Sessions, rs.SessionGroup = n, dr.ID
			rs.SessionMinBW, rs.SessionMaxBW = uint64(minbw), uint64(maxbw)
			dr.SessionClassID = shaper.SessionClassID(dr.ID, 0)
			return
		}
	}
}

func sortedStrings(s []string) []string {
	m := make(map[string]bool, len(s))
	for _, x := range s {
		m[x] = true
	}
	return sortedKeys(m)
}

// rulesOn are the shaper rules of the link named link: all but those
// of reservations admitted on another link.
func (c *compiled) rulesOn(link string) []shaper.RuleSpec {
	if len(c.RuleLink) == 0 {
		return c.Rules
	}
	out := make([]shaper.RuleSpec, 0, len(c.Rules))
	for _, r := range c.Rules {
		if l, ok := c.RuleLink[r.Slot]; !ok || l == link {
			out = append(out, r)
		}
	}
	return out
}
