package engine

import (
	"context"
	"fmt"

	"github.com/hostqos/hostqos/internal/store"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/policy"
	"github.com/hostqos/hostqos/internal/units"
)

// Changing a link. PATCH /v1/links/{name} (`hostqos link set`) changes
// only the fields given, as rule set and class set do; PUT gives the whole
// link. Either, and a reload of the config file, is refused when it takes
// away the shaping that admitted guarantees rely on, with the numbers,
// unless forced (checkShapingKept, in every change's admission).

// LinkChange says how a link is changed.
type LinkChange struct {
	// Temporary: until the daemon stops. A persistent change replaces a
	// temporary override of the link, so that it is in force now.
	Temporary bool
	// Force applies a change that leaves admitted guarantees without the
	// shaping that enforces them (see checkShapingKept).
	Force bool
}

// SetLink manages a link (an interface that exists now) with the settings
// of l, all of them: a field l leaves out takes its default.
func (e *Engine) SetLink(ctx context.Context, who Caller, name string, l policy.Link, o LinkChange) error {
	if l.Name != "" && l.Name != name {
		return &policy.FieldError{Source: "api", Object: fmt.Sprintf("link %q", policy.Clip(name)), Field: "name", Value: policy.Clip(l.Name),
			Reason: "differs from the interface in the path", Fix: "leave name out of the body, or send it to " + pathOf(api.RouteSetLink, policy.Clip(l.Name))}
	}
	l.Name = name
	_, err := e.changeLink(ctx, who, name, o, func(policy.Link) (policy.Link, error) { return l, nil })
	return err
}

// PatchLink changes the fields of link name given in patch (a JSON
// object; null clears a field) and keeps the others; a link not managed
// yet is managed with them. It returns the link as it is now.
func (e *Engine) PatchLink(ctx context.Context, who Caller, name string, patch []byte, o LinkChange) (policy.Link, error) {
	return e.changeLink(ctx, who, name, o, func(cur policy.Link) (policy.Link, error) {
		var n policy.Link
		if err := PatchJSON(cur, patch, &n); err != nil {
			return n, err
		}
		n.Name = name
		return n, nil
	})
}

// changeLink manages link name with what update makes of its current
// settings (those of a new link: only its name).
func (e *Engine) changeLink(ctx context.Context, who Caller, name string, o LinkChange, update func(cur policy.Link) (policy.Link, error)) (policy.Link, error) {
	var out policy.Link
	if err := who.MayChange(); err != nil {
		return out, err
	}
	e.mu.Lock()
	k := e.k
	e.mu.Unlock()
	if k == nil {
		return out, errNotLoaded
	}
	if _, gone, err := k.LookupLink(name); err != nil {
		return out, err
	} else if gone {
		return out, &policy.FieldError{Source: "api", Object: fmt.Sprintf("link %q", policy.Clip(name)), Field: "name", Value: policy.Clip(name),
			Reason: "no such interface in this network namespace", Fix: "check the name with `ip link`; to manage an interface that comes later (a VPN tunnel), add it to the config file"}
	}
	err := e.changeWith(ctx, "api", o.Force, func(persist, temp *store.Overlay, eff *policy.Policy) error {
		cur, ok := eff.Link(name)
		if !ok {
			cur = policy.Link{Name: name}
		}
		l, err := update(cur)
		if err != nil {
			return err
		}
		out = l
		if o.Temporary {
			temp.Links[name] = &l
			return nil
		}
		// A persistent change replaces a temporary override of the link:
		// the setting asked for takes effect now and stays after a
		// restart (leaving the override would make the change do nothing
		// now).
		persist.Links[name] = &l
		delete(temp.Links, name)
		return nil
	})
	if err == nil {
		e.publishChange("link", "set", name, map[string]any{"egress_rate": out.EgressRate, "ingress_rate": out.IngressRate, "forced": o.Force})
	}
	return out, err
}

// forceFix is how to apply a change refused by checkShapingKept anyway.
const forceFix = "force it (hostqos link set --force, hostqos reload --force; ?force=1 in the API)"

// checkShapingKept refuses a change (of the policy prev into next) that
// takes away shaping admitted guarantees rely on, on a link managed before
// and after it that was shaped: its egress_rate removed while guarantees
// (class and rule minbw, reservations) are counted on it — they would go
// unenforced there — or lowered below what the scheduled qsockets were
// admitted at (QSchedShare of the rate; none without one). A rate below
// the guarantees themselves is refused by admission (Admit) whether
// forced or not: admission never over-commits a shaped link. The refusal
// says what is admitted and what the link would reserve. A link removed
// (`link remove`) is not checked: that is unmanaging it.
func (e *Engine) checkShapingKept(prev, next *policy.Policy, source string) error {
	var errs policy.Errors
	qsched, read := uint64(0), false
	for _, l := range next.Links {
		was, ok := prev.Link(l.Name)
		if !ok || was.EgressRate == 0 {
			continue
		}
		obj := fmt.Sprintf("link %q", l.Name)
		if l.EgressRate == 0 {
			// The policy's guarantees and those held outside it (the
			// real-time channels on the link, the pods); the scheduled
			// qsockets have their own check below.
			if g, cs := next.HeldOn(l.Name, e.holdersWith(0, e.pods)); g > 0 {
				detail := policy.FormatContributions(cs)
				errs = append(errs, &policy.FieldError{Source: source, Object: obj, Field: "egress_rate", Value: "0", Literal: true,
					Reason: fmt.Sprintf("removing the shaping (egress_rate %s) leaves guarantees %s admitted on the link unenforced (%s): it would reserve 0, marking only",
						was.EgressRate, g, detail),
					Fix: "keep egress_rate (link set changes only the flags given), remove the guarantees first, or " + forceFix})
			}
		}
		bound := qschedBound(l)
		if bound >= qschedBound(was) {
			continue
		}
		if !read {
			qsched, read = e.qschedRateLocked(), true
		}
		if qsched > bound {
			errs = append(errs, &policy.FieldError{Source: source, Object: obj, Field: "egress_rate", Value: l.EgressRate.String(),
				Reason: fmt.Sprintf("the scheduled qsockets are admitted at %s together; at this rate the link would reserve them %s (%d %% of %s)",
					units.ExactRate(qsched), units.ExactRate(bound), QSchedShare, l.EgressRate),
				Fix: fmt.Sprintf("keep at least %s, close scheduled qsockets first (hostqos qsock list), or %s",
					policy.Rate(units.Mul(qsched, 100)/QSchedShare), forceFix)})
		}
	}
	if len(errs) > 0 {
		return &policy.AdmissionError{Errors: errs}
	}
	return nil
}
