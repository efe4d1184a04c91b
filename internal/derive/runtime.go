package derive

import (
	"strings"
	"time"

	"github.com/hostqos/hostqos/internal/policy"
)

// runtimeView is the expansion's policy as it applies at in.Now: rules
// outside their schedule left out, rules over their quota (in.OverQuota)
// blocked or capped. It runs after the store gave the expansion's keys
// their slots, so a rule that is off keeps its slot and counters. The key
// names the view (Desired.View), "" when every rule applies as written.
func runtimeView(in *Input, p *policy.Policy) (*policy.Policy, string) {
	shaped := false
	for _, l := range p.Links {
		shaped = shaped || l.EgressRate > 0
	}
	var out *policy.Policy
	var key []string
	for i, r := range p.Rules {
		v := ruleView(r, in.Now, in.OverQuota)
		if v == "" {
			if out != nil {
				out.Rules = append(out.Rules, r)
			}
			continue
		}
		key = append(key, r.Name+":"+v)
		if out == nil {
			out = withRules(p, p.Rules[:i])
		}
		if v == viewOff {
			continue
		}
		q, _ := r.QuotaOf()
		overQuota(&r, q, shaped)
		out.Rules = append(out.Rules, r)
	}
	if out == nil {
		return p, ""
	}
	return out, strings.Join(key, ",")
}

// View names the runtime view of p at now with the quotas of overQuota
// used up (Desired.View), without building it: the engine's quota tick
// asks it often.
func View(p *policy.Policy, now time.Time, overQuota map[string]bool) string {
	var key []string
	for _, r := range p.Rules {
		if v := ruleView(r, now, overQuota); v != "" {
			key = append(key, r.Name+":"+v)
		}
	}
	return strings.Join(key, ",")
}

const viewOff = "off"

// ruleView is how a rule applies at now: viewOff outside its schedule,
// its quota action when its quota is used up, "" as written.
func ruleView(r policy.Rule, now time.Time, overQuota map[string]bool) string {
	if s, loc, ok := r.ScheduleOf(); ok && !s.Active(now, loc) {
		return viewOff
	}
	if q, ok := r.QuotaOf(); ok && q.Action.Kind != policy.QuotaEvent && overQuota[r.Name] {
		return q.Action.String()
	}
	return ""
}

// overQuota applies a used-up quota's action to its rule: block drops the
// rule's traffic; "limit RATE" caps what it receives (a download limit)
// and what it sends (its ceiling on shaped links, a policer elsewhere),
// as the quota's direction says.
func overQuota(r *policy.Rule, q policy.QuotaSpec, shaped bool) {
	switch q.Action.Kind {
	case policy.QuotaBlock:
		r.Action = policy.ActionDrop
	case policy.QuotaLimit:
		if q.Direction != policy.DirOut { // received traffic: a download limit
			if r.MaxBWIn == 0 || r.MaxBWIn > q.Action.Limit {
				r.MaxBWIn = q.Action.Limit
			}
		}
		if q.Direction == policy.DirIn {
			return
		}
		if shaped {
			if r.MaxBW == 0 || r.MaxBW > q.Action.Limit {
				r.MaxBW = q.Action.Limit
			}
			r.MinBW = min(r.MinBW, r.MaxBW)
		} else if r.Police == 0 || r.Police > q.Action.Limit {
			r.Police = q.Action.Limit
		}
	}
}

// withRules is a shallow copy of p (every other part shared) with a copy
// of rules as its rules.
func withRules(p *policy.Policy, rules []policy.Rule) *policy.Policy {
	c := *p
	c.Rules = append(make([]policy.Rule, 0, len(p.Rules)), rules...)
	return &c
}
