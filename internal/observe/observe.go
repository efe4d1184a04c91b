// Package observe is the observation side of hostqos's engine: the rates
// of rules, classes, flows, apps and links (`hostqos stat`, `top`,
// metrics), the watch for new apps, and the recorder that hands each
// second's counters and the flows that ended to the history store.
//
// It changes nothing in the kernel and nothing in the engine. It reads
// the engine through a Source, one snapshot taken under the engine's lock
// at a time, and reads the kernel's counters and flows after that lock is
// released: no kernel read and no client waits on the engine's lock.
package observe

import (
	"sync"
	"time"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/datapath"
	"github.com/hostqos/hostqos/internal/history"
	"github.com/hostqos/hostqos/internal/shaper"
)

// Kernel is what observation reads of the kernel: the engine's Kernel
// has all of it.
type Kernel interface {
	// RuleCounters reads the counters of the rule slots (those beyond
	// the answer's end have counted nothing).
	RuleCounters() ([]datapath.Counters, error)
	// ClassStats reads the counters of the HTB classes on a link.
	ClassStats(ifindex int) ([]shaper.ClassStats, error)
	// Flows walks the flow table.
	Flows(fn func(datapath.Flow) bool) error
	// TrackFlows walks the flow table for its one tracker (the history
	// recorder), with the tracker's memo of each flow, then reports the
	// tracked flows that left the table since.
	TrackFlows(fn func(datapath.Flow, *datapath.FlowMemo) bool, gone func(datapath.Flow, datapath.FlowMemo)) error
	// Stats reads the datapath's global counters.
	Stats() (datapath.Stats, error)
	// CgroupOf is the cgroup of a process.
	CgroupOf(pid int) (string, error)
}

// Source is the engine as observation reads it. Each method takes one
// snapshot under the engine's lock and returns it; nothing in a snapshot
// is changed afterwards (its maps are copies, its slices the engine's
// state that a change replaces and never writes through), and no method
// reads the kernel.
type Source interface {
	LinkView() LinkView
	RuleView() RuleView
}

// LinkView is the kernel and the managed links.
type LinkView struct {
	// Kernel is nil while the datapath is not loaded.
	Kernel Kernel
	// Up are the managed links set up now: name → ifindex.
	Up map[string]int
	// Order are the policy's managed links (set up or not), in its order.
	Order []string
	// Classes and ClassRules are what the last derive gave the shaper
	// (nil before the first): the service classes, and the rules with
	// their class (a rule with a leaf of its own has it under its class).
	Classes    []shaper.ClassSpec
	ClassRules []shaper.RuleSpec
}

// RuleView is the kernel and the rules that hold a rule slot.
type RuleView struct {
	// Kernel is nil while the datapath is not loaded.
	Kernel Kernel
	// Rules are the effective policy's rules that hold a slot, in the
	// policy's order, then the rules the engine made for objects, by
	// their label.
	Rules []Rule
	// Containers are the containers found, by the ifindex of the
	// host-side veth their flows are classified at (datapath.Flow.Veth).
	Containers map[int]Container
}

// Container names a container's flows in the views.
type Container struct {
	Runtime, Name, Image string
}

// Rule is a rule that holds a rule slot, as the views name it.
type Rule struct {
	// Name is the rule's name, or for a rule the engine made for an
	// object (a reservation, a protected client) the object's label
	// ("reservation/NAME", "protect/ADDR:PORT").
	Name  string
	Class string
	Slot  int
	// Base is what the slot had counted when it was handed to this rule:
	// the rule's counters are the slot's less Base.
	Base datapath.Counters
	// Since is the first policy generation in which the slot is this
	// rule's (0: older than any the datapath remembers). A flow the
	// datapath classified at an earlier generation was classified under
	// an earlier owner of the slot and is never named after this rule.
	Since uint32
	// Owner is the uid of the ordinary user whose run or object made the
	// rule; -1: an admin's, everyone's to see in history.
	Owner int64
	// Object says the rule is an object's: its statistics are its
	// owner's (and the admins') to see. The visibility of the other
	// rules is the caller's hidden set (RuleStats).
	Object bool
}

// Observer samples the counters, answers the statistics, watches for new
// apps and records the history. Its methods may be called concurrently.
type Observer struct {
	src  Source
	now  func() time.Time // the app watch's clock
	s    *sampler
	apps appWatch

	// The history recorder (SetHistory); nil: no history.
	histMu sync.Mutex
	hist   *recorder
}

// New makes an observer of src; now is the clock of the app watch (nil:
// time.Now).
func New(src Source, now func() time.Time) *Observer {
	if now == nil {
		now = time.Now
	}
	return &Observer{src: src, now: now, s: newSampler()}
}

// Sample reads the rule and class counters and updates their rates (the
// engine's Tick, every second).
func (o *Observer) Sample() { o.s.sample(o.src.LinkView()) }

// SetNetDev replaces the reader of the interfaces' counters (ReadNetDev),
// for tests whose links are not this host's interfaces.
func (o *Observer) SetNetDev(f func() map[string]history.Counters) {
	o.s.mu.Lock()
	defer o.s.mu.Unlock()
	o.s.netDev = f
}

// RuleStats are the rules' counters and rates, without the rules in hidden
// and the objects' rules of other users than uid (uid < 0: everyone's).
func (o *Observer) RuleStats(hidden map[string]bool, uid int64) ([]api.RuleStat, error) {
	return o.s.ruleStats(o.src.RuleView(), hidden, uid)
}

// ClassStats are, per managed link, what each class carried.
func (o *Observer) ClassStats() ([]api.ClassStat, error) {
	return o.s.classStats(o.src.LinkView(), o.src.RuleView())
}

// FlowStats are the flows with their rates; uid >= 0 limits the answer to
// that user's flows.
func (o *Observer) FlowStats(uid int64) ([]api.FlowStat, error) {
	return o.s.flowStats(o.src.RuleView(), uid)
}

// AppStats are the flows of FlowStats by owning process.
func (o *Observer) AppStats(uid int64) ([]api.AppStat, error) {
	return o.s.appStats(o.src.RuleView(), uid)
}

// LinkStats are the managed links' interface counters, both directions,
// with rates.
func (o *Observer) LinkStats() ([]api.LinkStat, error) {
	return o.s.linkStats(o.src.LinkView())
}
