package engine

import (
	"context"
	"maps"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/datapath"
	"github.com/hostqos/hostqos/internal/derive"
	"github.com/hostqos/hostqos/internal/history"
	"github.com/hostqos/hostqos/internal/observe"
	"github.com/hostqos/hostqos/internal/store"
)

// The observation side (rates, statistics, the app watch, the history
// recorder) is package observe. It reads the engine through observed, one
// snapshot under e.mu at a time, and the kernel after e.mu is released.

// observed is the engine as the observer reads it (observe.Source).
type observed struct{ e *Engine }

var _ observe.Source = observed{}

// LinkView is the kernel, the managed links set up and the classes of the
// last derive.
func (v observed) LinkView() observe.LinkView {
	e := v.e
	e.mu.Lock()
	k, eff, d := e.k, e.eff, e.desired
	up := maps.Clone(e.links)
	e.mu.Unlock()
	lv := observe.LinkView{Kernel: k, Up: up, Order: make([]string, 0, len(eff.Policy.Links))}
	for _, l := range eff.Policy.Links {
		lv.Order = append(lv.Order, l.Name)
	}
	if d != nil {
		lv.Classes, lv.ClassRules = d.Classes, d.Rules
	}
	return lv
}

// RuleView is the kernel and the rules that hold a slot: the effective
// policy's and those made for objects (object_rules.go), with their slot's
// baseline and handover generation. The policy and the slot table are read
// after the lock is released: a change replaces them, never writes them.
//
// The view is kept until the next sync (every change of what it is made
// of commits through one): the sampler and the history ask for it each
// second, and with 10,000 rules building it is most of an idle tick.
func (v observed) RuleView() observe.RuleView {
	e := v.e
	e.mu.Lock()
	if e.ruleView.desired == e.desired && e.ruleView.k == e.k && e.desired != nil {
		rv := e.ruleView.view
		e.mu.Unlock()
		return rv
	}
	desired, k := e.desired, e.k
	s := e.ruleSnapLocked()
	e.mu.Unlock()
	rv := s.view()
	e.mu.Lock()
	if e.desired == desired && e.k == k {
		e.ruleView.desired, e.ruleView.k, e.ruleView.view = desired, k, rv
	}
	e.mu.Unlock()
	return rv
}

// ruleSnap is what RuleView takes under the engine's lock.
type ruleSnap struct {
	k        Kernel
	eff      store.Merged
	slots    *store.Slots
	objs     []objectRule
	runOwner map[string]int64
	ctrs     []derive.Container // replaced on a change, never written
}

// ruleSnapLocked takes RuleView's snapshot; the caller holds e.mu.
func (e *Engine) ruleSnapLocked() ruleSnap {
	s := ruleSnap{k: e.k, eff: e.eff, slots: e.slots, ctrs: e.containers}
	if e.k == nil {
		return s
	}
	s.objs = e.objectRulesLocked()
	s.runOwner = map[string]int64{}
	for _, run := range e.temp.Runs {
		if run.Ordinary() {
			s.runOwner[run.Rule] = int64(run.UID)
		}
	}
	return s
}

// view builds the rule view of the snapshot (without the lock).
func (s ruleSnap) view() observe.RuleView {
	if s.k == nil {
		return observe.RuleView{}
	}
	rules := make([]observe.Rule, 0, len(s.eff.Policy.Rules)+len(s.objs))
	add := func(r observe.Rule) {
		b := s.slots.Baselines[r.Slot]
		r.Base = datapath.Counters{Packets: b.Packets, Bytes: b.Bytes, Drops: b.Drops,
			RxPackets: b.RxPackets, RxBytes: b.RxBytes, RxDrops: b.RxDrops}
		r.Since = b.Gen
		rules = append(rules, r)
	}
	for _, r := range s.eff.Policy.Rules {
		slot, ok := s.slots.Rules[r.Name]
		if !ok {
			continue
		}
		owner, ok := s.runOwner[r.Name]
		if !ok {
			owner = -1
		}
		add(observe.Rule{Name: r.Name, Class: r.EffectiveClass(), Slot: slot, Owner: owner})
	}
	for _, o := range s.objs {
		add(observe.Rule{Name: o.label, Class: o.class, Slot: o.slot, Owner: o.owner, Object: true})
	}
	v := observe.RuleView{Kernel: s.k, Rules: rules}
	for _, c := range s.ctrs {
		for _, ifindex := range c.Veths {
			if v.Containers == nil {
				v.Containers = map[int]observe.Container{}
			}
			v.Containers[ifindex] = observe.Container{Runtime: c.Runtime, Name: c.Name, Image: c.Image}
		}
	}
	return v
}

// SetHistory makes the engine record a sample in st at every Tick (nil:
// keep the apps' totals only, for metrics).
func (e *Engine) SetHistory(st *history.Store, o observe.HistoryOptions) { e.obs.SetHistory(st, o) }

// History answers a history query as who may see it: an ordinary user
// sees the links, classes and admin rules, and only their own apps, runs
// and flows.
func (e *Engine) History(ctx context.Context, who Caller, q api.HistoryQuery) (api.History, error) {
	h, err := e.obs.History(ctx, q, who.MayOnlySeeOwn())
	if qe, ok := err.(*history.QueryError); ok {
		return h, &BadRequestError{Err: qe}
	}
	return h, err
}

// AppTotals are the apps' cumulative counters (for metrics); nil without
// history recording.
func (e *Engine) AppTotals() []observe.AppCounters { return e.obs.AppTotals() }
