// Package derive turns hostqos's desired state into what the kernel must
// hold. It is pure: everything it reads is in its Input (the effective
// policy, the runs, the XDP shield's lists, the slots the engine's store
// gave the rules, the links' interface indexes, the qsocket scheduler's
// rate, the quotas that are used up), and its Desired is a value the
// engine's reconcile compares with what it pushed last. Nothing here talks
// to the kernel; app selectors are resolved through a Resolver, which the
// engine backs with the file system and tests with a table.
//
// A derive runs in three steps:
//
//  1. Expand: every front door that becomes rules contributes them
//     (contributors in expand.go: per-session groups of rules,
//     reservations, protected clients, Kubernetes pods).
//     Each contributor owns one key prefix, so the rules it adds can never
//     take a user rule's name and keep their counter slot across changes.
//  2. The runtime view: rules outside their schedule are left out, rules
//     over their quota blocked or capped (rewrites of the expansion, after
//     slots were given, so a rule that is off keeps its counters).
//  3. Compile and plan: datapath rules and reservations, the HTB plan of
//     every managed link, its ingress budget, XDP program and qsocket
//     scheduler, and the drop list and protected clients.
//
// The engine calls Expand, gives slots to the expansion's keys (its
// store), then Compile; Derive does both for tests and tools whose slots
// are given.
package derive

import (
	"net/netip"
	"time"

	"github.com/hostqos/hostqos/internal/datapath"
	"github.com/hostqos/hostqos/internal/datapath/xdp"
	"github.com/hostqos/hostqos/internal/policy"
	"github.com/hostqos/hostqos/internal/shaper"
)

// Input is everything a derive reads.
type Input struct {
	// Policy is the effective policy: the config file with the API's
	// changes, the temporary changes and the runs' rules merged in.
	Policy *policy.Policy
	// Runs are where the runs' processes were moved from and to, sorted by
	// rule (see runsInside).
	Runs []Run
	// Shield is the XDP shield's part of the state; nil when the kernel
	// has no XDP shield (protected clients then add no rules, and a link
	// with SYN limits cannot be set up).
	Shield *Shield
	// Now is the time the schedules are judged at; OverQuota are the rules
	// whose quota is used up in the current period (their quota action
	// applies; an "event" quota is never listed).
	Now       time.Time
	OverQuota map[string]bool
	// Slots are the numbers the store gave the expansion's keys.
	Slots Slots
	// Ifindexes are the managed links to set up now, by name. A link of
	// the policy without one (its interface is missing) is reported in
	// Desired.Missing.
	Ifindexes map[string]int
	// QSchedRate is the sum of the declared rates of the open scheduled
	// qsockets (bit/s; 0: none): every shaped link gets a qsched class of
	// that rate.
	QSchedRate uint64
	// Resolver resolves app selectors (exe files, units, cgroups, users).
	Resolver Resolver
	// Containers are the containers found on the host now (container
	// selectors pick from them).
	Containers []Container
	// Pods are the admitted Kubernetes pods' rules (pods.go).
	Pods []Pod
	// RTRates are the admitted real-time channels' wire rates together,
	// by link (bit/s): each such shaped link gets a real-time leaf of that
	// rate (shaper.LinkSpec.RT).
	RTRates map[string]uint64
	// RTOwners split each link's real-time leaf by the processes that own
	// its channels (shaper.LinkSpec.RTOwners).
	RTOwners map[string][]shaper.RTOwner
	// AutoRates are the rates in force of the links whose egress_rate or
	// ingress_rate is "auto" (bits/s; a direction without one starts at
	// its maximum).
	AutoRates map[string]LinkRates
	// FlowQueues gives every shaped link flow queueing inside its
	// classes (shaper.LinkSpec.FlowQueues).
	FlowQueues bool
}

// Run is a `hostqos run`'s cgroup and the one its process came from.
type Run struct {
	Rule, Cgroup, Origin string
}

// Shield is what the XDP shield holds besides the config file's blocks.
type Shield struct {
	// Blocks is the whole drop list (the config file's entries and the
	// API's); the engine keeps it built (it can hold many entries) and
	// the derive passes it on.
	Blocks []xdp.BlockEntry
	// Protected are the protected clients.
	Protected []Protected
}

// Protected is a protected client: its SYNs to Addr's port bypass SYN
// throttling, and its flows go into Class.
type Protected struct {
	Client netip.AddrPort // port 0: every local port
	Class  string         // "" : ProtectedClass
	// Admin: protected by root or group hostqos (its rule comes before the
	// admin's rules); otherwise the rule of UID's tier.
	Admin bool
	UID   uint32
}

// Slots are the stable numbers of the expansion's keys: a counter slot per
// rule (Expansion.RuleKeys), an index per class, a datapath id less one
// per reservation and session group (Expansion.ResvKeys).
type Slots struct {
	Rules, Classes, Resv map[string]int
}

// Desired is what the kernel must hold.
type Desired struct {
	// Datapath are the datapath's rules, reservations and ingress
	// budgets.
	Datapath datapath.Policy
	// Links are the managed links to set up, in the policy's order.
	Links []Link
	// Missing are the managed links whose interface does not exist now.
	Missing []string
	// Blocks and Protected are the XDP shield's drop list and protected
	// clients (nil without a shield).
	Blocks    []xdp.BlockEntry
	Protected []xdp.Protected
	// Classes, Rules and Acks are the shaper's inputs (what the links'
	// plans were built from; status and stats read them).
	Classes []shaper.ClassSpec
	Rules   []shaper.RuleSpec
	Acks    []shaper.AckSpec
	// RuleLink is the one link whose HTB tree holds a rule slot's leaves
	// (a reservation admitted on one link); slots not in it: every link.
	RuleLink map[uint16]string
	// QSchedRate is the rate the links were planned with.
	QSchedRate uint64
	// View names the runtime view (the rules that are off or over their
	// quota), so the engine can tell when it changes; "" when none is.
	View string
	// Resolved says what each rule's app selectors resolved to; Warnings
	// are what the user should know (selectors that match nothing).
	Resolved map[string][]string
	Warnings []string
	// Containers are the containers' namespaces and veths the datapath
	// must know.
	Containers Containers
}

// Link is one managed link's kernel state.
type Link struct {
	Name    string
	Ifindex int
	// Plan is the link's HTB tree (nil: mark only, nothing shaped).
	Plan *shaper.Plan
	// Syn are the link's SYN limits; XDP says whether it carries the XDP
	// shield (SYN limits, or a drop list that is not empty).
	Syn xdp.SynLimits
	XDP bool
	// QSched is the qsocket scheduler of the link's qsched class (nil:
	// none).
	QSched *datapath.QSched
}

// Derive expands, compiles and plans in with the slots it carries (every
// key of the expansion must have one).
func Derive(in Input) (*Desired, error) {
	return Compile(in, Expand(in))
}

// LinkRates are a link's automatic rates in force (0: not estimated yet).
type LinkRates struct{ Egress, Ingress uint64 }

// EgressRate is the rate link l's egress is shaped at: its egress_rate,
// or for "auto" the rate in force (at first its maximum).
func (in *Input) EgressRate(l policy.Link) uint64 {
	if !l.EgressRate.Auto() {
		return uint64(l.EgressRate)
	}
	if r := in.AutoRates[l.Name].Egress; r > 0 {
		return r
	}
	_, hi := policy.AutoBounds(l.EgressMin, l.EgressMax)
	return uint64(hi)
}

// IngressRate is link l's ingress budget: its ingress_rate, or for
// "auto" the rate in force (at first its maximum).
func (in *Input) IngressRate(l policy.Link) uint64 {
	if !l.IngressRate.Auto() {
		return uint64(l.IngressRate)
	}
	if r := in.AutoRates[l.Name].Ingress; r > 0 {
		return r
	}
	_, hi := policy.AutoBounds(l.IngressMin, l.IngressMax)
	return uint64(hi)
}
