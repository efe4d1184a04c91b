package engine

import (
	"fmt"
	"time"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/derive"
	"github.com/hostqos/hostqos/internal/policy"
)

// Automatic link rates (`egress_rate = "auto"`, docs/autorate.md): the
// daemon's estimator loop reads the links to follow (AutoLinks), estimates
// each one's capacity (internal/autorate) and hands a new rate to
// SetAutoRate, which makes it one more trigger of the one sync. The rates
// in force live here, not in the policy: they are measurements, not
// settings, and restart at the link's maximum with the daemon.

// autoLink is a link's automatic rates: egress and ingress.
type autoLink struct{ dir [2]autoDir }

// autoDir is one direction's rate in force and what set it.
type autoDir struct {
	rate, estimate uint64
	changed        time.Time
	reason         string
	changes        uint64
}

// Directions of an automatic rate (index of autoLink.dir).
const (
	AutoEgress  = 0
	AutoIngress = 1
)

// AutoLink is a managed link with an automatic rate in one or both
// directions, as the estimator needs it.
type AutoLink struct {
	Name    string
	Ifindex int
	// Auto, Min, Max and Rate by direction (AutoEgress, AutoIngress):
	// whether it is automatic, its bounds and its rate in force (bits/s).
	Auto     [2]bool
	Min, Max [2]uint64
	Rate     [2]uint64
}

// AutoLinks are the links set up now with an automatic rate.
func (e *Engine) AutoLinks() []AutoLink {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []AutoLink
	keep := map[string]bool{}
	for _, l := range e.eff.Policy.Links {
		ifindex, ok := e.links[l.Name]
		if !ok || (!l.EgressRate.Auto() && !l.IngressRate.Auto()) {
			continue
		}
		keep[l.Name] = true
		al := AutoLink{Name: l.Name, Ifindex: ifindex, Auto: [2]bool{l.EgressRate.Auto(), l.IngressRate.Auto()}}
		lo, hi := policy.AutoBounds(l.EgressMin, l.EgressMax)
		al.Min[AutoEgress], al.Max[AutoEgress] = uint64(lo), uint64(hi)
		lo, hi = policy.AutoBounds(l.IngressMin, l.IngressMax)
		al.Min[AutoIngress], al.Max[AutoIngress] = uint64(lo), uint64(hi)
		in := derive.Input{AutoRates: e.autoRatesLocked()}
		al.Rate = [2]uint64{in.EgressRate(l), in.IngressRate(l)}
		out = append(out, al)
	}
	for name := range e.auto {
		if !keep[name] {
			delete(e.auto, name)
		}
	}
	return out
}

// autoRatesLocked are the rates in force for derive.
func (e *Engine) autoRatesLocked() map[string]derive.LinkRates {
	if len(e.auto) == 0 {
		return nil
	}
	out := make(map[string]derive.LinkRates, len(e.auto))
	for name, a := range e.auto {
		out[name] = derive.LinkRates{Egress: a.dir[AutoEgress].rate, Ingress: a.dir[AutoIngress].rate}
	}
	return out
}

// SetAutoRate puts rate (bits/s) in force in direction dir of link name,
// whose capacity is estimated at estimate (0: none yet), for reason ("cut",
// "probe", …), through the one sync, and publishes a link.rate event. A
// link no longer automatic in dir is left alone.
func (e *Engine) SetAutoRate(name string, dir int, rate, estimate uint64, reason string) error {
	if dir != AutoEgress && dir != AutoIngress {
		return fmt.Errorf("set automatic rate of link %s: direction %d", name, dir)
	}
	e.mu.Lock()
	l, ok := e.eff.Policy.Link(name)
	if !ok || !([2]bool{l.EgressRate.Auto(), l.IngressRate.Auto()})[dir] {
		e.mu.Unlock()
		return nil
	}
	if e.auto == nil {
		e.auto = map[string]*autoLink{}
	}
	a := e.auto[name]
	if a == nil {
		a = &autoLink{}
		e.auto[name] = a
	}
	d := &a.dir[dir]
	d.estimate = estimate
	if d.rate == rate {
		e.mu.Unlock()
		return nil
	}
	prev := *d
	d.rate, d.changed, d.reason = rate, e.cfg.Now(), reason
	d.changes++
	if err := e.syncLocked("automatic link rate", syncChange{}); err != nil {
		*d = prev
		d.estimate = estimate
		e.mu.Unlock()
		return fmt.Errorf("set automatic rate of link %s: %w", name, err)
	}
	e.mu.Unlock()
	field := [2]string{"egress", "ingress"}[dir]
	e.Publish(api.Event{Kind: EventLinkRate, Subject: "link/" + name,
		Message: fmt.Sprintf("link %q %s rate %s (%s; estimate %s)", name, field, policy.Rate(rate), reason, policy.Rate(estimate)),
		Fields:  map[string]any{"direction": field, "rate_bps": rate, "estimate_bps": estimate, "reason": reason, "previous_bps": prev.rate}})
	return nil
}

// autoStatus fills ls with link l's automatic rates (e.mu held).
func (e *Engine) autoStatusLocked(ls *api.LinkStatus, l policy.Link) {
	in := derive.Input{AutoRates: e.autoRatesLocked()}
	a := e.auto[l.Name]
	if l.EgressRate.Auto() {
		ls.EgressAuto = &api.AutoRate{InForce: in.EgressRate(l)}
		if a != nil {
			fillAuto(ls.EgressAuto, a.dir[AutoEgress])
		}
	}
	if l.IngressRate.Auto() {
		ls.IngressAuto = &api.AutoRate{InForce: in.IngressRate(l)}
		if a != nil {
			fillAuto(ls.IngressAuto, a.dir[AutoIngress])
		}
	}
}

func fillAuto(r *api.AutoRate, d autoDir) {
	r.Estimate, r.Changes, r.Reason = d.estimate, d.changes, d.reason
	if !d.changed.IsZero() {
		t := d.changed
		r.Changed = &t
	}
}

// LinkQueued is the bytes queued now in hostqos's HTB tree on ifindex
// (the host's own queue, which the estimator takes off the round trips
// its flows see).
func (e *Engine) LinkQueued(ifindex int) (uint64, error) {
	e.mu.Lock()
	k := e.k
	e.mu.Unlock()
	if k == nil {
		return 0, errNotLoaded
	}
	st, err := k.ClassStats(ifindex)
	if err != nil {
		return 0, err
	}
	var sum uint64
	for _, c := range st {
		sum += uint64(c.Backlog)
	}
	return sum, nil
}
