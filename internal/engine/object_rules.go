package engine

import (
	"strconv"
	"strings"
)

// Rules the engine makes for other objects — a reservation's session rule
// ("resv:NAME") and a protected client's rule ("prot:ADDR:PORT") — are not
// rules anyone can list, show or change (`rule list` and `rule show` never
// show them). The views that report traffic by rule (`stat rules`, `stat
// flows`, `top`, history's flow records) show their traffic under the
// object instead, by the object's name as the event stream spells it:
// "reservation/NAME", "protect/ADDR:PORT". No rule name contains "/", so
// these never collide with a rule.

// objectRule is such a rule as the views show it.
type objectRule struct {
	name  string // internal rule name
	label string // "reservation/NAME", "protect/ADDR:PORT"
	class string
	slot  int
	owner int64 // -1: everyone may see it; else the uid of the ordinary user whose object it is
}

// objectLabel is how the views name the rule the engine made for an
// object ("" for every other rule).
func objectLabel(rule string) string {
	switch {
	case strings.HasPrefix(rule, "resv:"):
		return "reservation/" + rule[len("resv:"):]
	case strings.HasPrefix(rule, "prot:"):
		return "protect/" + rule[len("prot:"):]
	}
	return ""
}

// objectRulesLocked lists the rules the engine made for objects that
// have a rule slot. Caller holds e.mu.
func (e *Engine) objectRulesLocked() []objectRule {
	if e.eff.Policy == nil {
		return nil
	}
	var out []objectRule
	for _, r := range expandReservations(e.withProtectedLocked(e.eff.Policy)).Rules {
		label := objectLabel(r.Name)
		if label == "" {
			continue
		}
		slot, ok := e.slots.Rules[r.Name]
		if !ok {
			continue
		}
		or := objectRule{name: r.Name, label: label, class: r.EffectiveClass(), slot: slot, owner: -1}
		if r.UserRun {
			if uid, err := strconv.ParseInt(r.User, 10, 64); err == nil {
				or.owner = uid
			}
		}
		out = append(out, or)
	}
	return out
}

// visibleTo reports whether a caller who may only see uid's objects (-1:
// everything) sees the object's rule.
func (o objectRule) visibleTo(uid int64) bool {
	return uid < 0 || o.owner < 0 || o.owner == uid
}
