package engine

import (
	"net/netip"
	"sort"
	"strings"

	"github.com/hostqos/hostqos/internal/derive"
)

// Rules the engine makes for other objects — a reservation's session rule
// ("resv:NAME") and a protected client's rule ("prot:ADDR:PORT") — are not
// rules anyone can list, show or change (`rule list` and `rule show` never
// show them). The views that report traffic by rule (`stat rules`, `stat
// flows`, `top`, history's flow records) show their traffic under the
// object instead, by the object's name as the event stream spells it:
// "reservation/NAME", "protect/ADDR:PORT"; a Kubernetes pod's rule by its
// own name, "k8s/NAMESPACE/NAME". No rule name contains "/", so these
// never collide with a rule.

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
	case strings.HasPrefix(rule, derive.PodPrefix):
		return rule // k8s/NAMESPACE/NAME: the pod's rule, named as rule list names it
	}
	return ""
}

// objectRulesLocked lists the rules the engine made for objects that are
// in the compiled policy, with their class. Cheap enough for every tick:
// no policy is expanded. Caller holds e.mu.
func (e *Engine) objectRulesLocked() []objectRule {
	if e.desired == nil {
		return nil
	}
	classes := map[int]string{}
	for _, c := range e.desired.Classes {
		classes[c.Index] = c.Name
	}
	classOf := map[int]string{}
	for _, r := range e.desired.Datapath.Rules {
		classOf[int(r.Slot)] = classes[int(r.ServiceClass)]
	}
	var out []objectRule
	for name, slot := range e.slots.Rules {
		label := objectLabel(name)
		class, compiled := classOf[slot]
		if label == "" || !compiled {
			continue
		}
		or := objectRule{name: name, label: label, class: class, slot: slot, owner: -1}
		if ap, err := netip.ParseAddrPort(strings.TrimPrefix(name, "prot:")); err == nil && e.shield != nil {
			if rec, ok := e.shield.Protected[ap]; ok && !rec.Admin {
				or.owner = int64(rec.UID)
			}
		}
		out = append(out, or)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].label < out[j].label })
	return out
}
