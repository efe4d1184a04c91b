package engine

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/datapath"
	"github.com/hostqos/hostqos/internal/history"
	"github.com/hostqos/hostqos/internal/observe"
	"github.com/hostqos/hostqos/internal/policy"
)

// Status fills in what the engine knows of st (the datapath, links,
// counts, warnings), as who may see it: an ordinary user gets no warning
// about another user's run. The flow table is counted after the lock is
// released (a walk of a full table takes milliseconds, and status is open
// to everyone).
func (e *Engine) Status(who Caller, st *api.Status) {
	k := e.statusLocked(who, st)
	if k != nil {
		st.Counts.Flows = e.flowCount(k)
	}
}

// flowCount counts the flow table at most once a second: status is open to
// everyone, and one walk of a full table at a time is enough for all
// callers (the others wait for it and share its count).
func (e *Engine) flowCount(k Kernel) int {
	e.flowsMu.Lock()
	defer e.flowsMu.Unlock()
	if time.Since(e.flowsAt) < time.Second {
		return e.flows
	}
	n := 0
	_ = k.Flows(func(datapath.Flow) bool { n++; return true })
	e.flows, e.flowsAt = n, time.Now()
	return n
}

func (e *Engine) statusLocked(who Caller, st *api.Status) Kernel {
	e.mu.Lock()
	defer e.mu.Unlock()
	st.Datapath.Loaded = e.k != nil
	st.Datapath.TaggedSockets = e.tagged
	if e.k != nil {
		st.Daemon.Generation = uint64(e.k.Generation())
		if s, err := e.k.Stats(); err == nil {
			st.Datapath.Packets, st.Datapath.Classified = s.Packets, s.Classified
			st.Datapath.FlowInsertFail, st.Datapath.ParseErrors, st.Datapath.NoIdentity = s.FlowInsertFail, s.ParseErrors, s.NoIdentity
			st.Datapath.RxPackets, st.Datapath.RxClassified, st.Datapath.RxDrops = s.RxPackets, s.RxClassified, s.RxDrops
			st.Datapath.RxParseErrors, st.Datapath.RxNoSocket, st.Datapath.RwndClamps = s.RxParseErrors, s.RxNoSocket, s.RwndClamps
		} else {
			st.Datapath.Error = err.Error()
		}
	}
	st.Links = e.linkStatusLocked()
	st.AutoLinks = slices.Clone(e.autoChosen)
	st.Counts.Links = len(e.eff.Policy.Links)
	st.Counts.Classes = len(e.eff.Policy.Classes)
	hidden := e.hiddenRulesLocked(who)
	st.Counts.Rules = len(e.eff.Policy.Rules) - len(hidden)
	st.Counts.Runs = len(e.temp.Runs) - len(hidden) // a hidden rule is another user's run
	st.Warnings = append(st.Warnings, e.statusMemoLocked().warnings...)
	if w := e.obs.HistoryWarning(); w != "" {
		st.Warnings = append(st.Warnings, w)
	}
	if e.desired != nil {
		for _, w := range e.desired.Warnings {
			if !mentionsRule(w, hidden) {
				st.Warnings = append(st.Warnings, w)
			}
		}
	}
	for _, name := range e.missingLocked() {
		if why, ok := e.lookupErr[name]; ok {
			st.Warnings = append(st.Warnings, fmt.Sprintf("link %q: cannot tell whether the interface exists (%s); hostqos manages it once it can", name, why))
			continue
		}
		st.Warnings = append(st.Warnings, fmt.Sprintf("link %q: no such interface now; hostqos manages it as soon as it appears", name))
	}
	return e.k
}

// mentionsRule reports whether a compile warning is about one of the rules
// named in set (warnings name their rule as `rule "NAME"`).
func mentionsRule(warning string, set map[string]bool) bool {
	for name := range set {
		if strings.Contains(warning, fmt.Sprintf("rule %q", name)) {
			return true
		}
	}
	return false
}

// Links reports every managed link: where it is set up, and whether
// hostqos's classifier and HTB root are on it.
func (e *Engine) Links() []api.LinkStatus {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.linkStatusLocked()
}

func (e *Engine) linkStatusLocked() []api.LinkStatus {
	var out []api.LinkStatus
	extra := e.publicExtraLocked()
	for _, l := range e.eff.Policy.Links {
		ls := api.LinkStatus{Link: l}
		if ifindex, ok := e.links[l.Name]; ok && e.k != nil {
			ls.Ifindex = ifindex
			// From what the pushes left, not from the kernel: someone
			// else's change is an event that repairs it (refresh.go).
			attached, known := e.pushed.attached[ifindex]
			ls.Attached = attached || !known // unknown is not reported as detached
			if !ls.Attached {
				ls.Error = "hostqos's classifier is not attached in the kernel (detached by someone else?); the daemon puts it back within a second"
			}
			if l.EgressRate > 0 {
				plan, known := e.pushed.plans[ifindex]
				ls.Shaping = plan != nil || !known // unknown is not reported as removed
				if !ls.Shaping {
					ls.Error = "hostqos's HTB root is not on the link (removed by someone else?); the daemon rebuilds it within a second unless another root qdisc took its place"
				}
			}
			e.shieldLinkStatus(&ls, l.Name)
			if l.IngressRate > 0 {
				ls.IngressLevels = ingressLevels(e.k, ifindex)
			}
		} else {
			ls.Error = "no such interface now; managed as soon as it appears"
		}
		e.autoStatusLocked(&ls, l)
		ls.Reservable = l.Capacity()
		ls.Reserved, ls.Guarantees = e.heldOnLocked(l.Name, extra)
		out = append(out, ls)
	}
	return out
}

// Stats fills in the statistics of kind ("rules", "classes", "apps",
// "flows") the caller may see: an ordinary user sees no other user's run
// rules, flows or apps. An unknown kind is a *NotFoundError.
func (e *Engine) Stats(who Caller, kind string, st *api.Stats) error {
	uid := who.MayOnlySeeOwn()
	var err error
	switch kind {
	case "rules":
		e.mu.Lock()
		hidden := e.hiddenRulesLocked(who)
		e.mu.Unlock()
		st.Rules, err = e.obs.RuleStats(hidden, uid)
	case "classes":
		st.Classes, err = e.obs.ClassStats()
	case "apps":
		st.Apps, err = e.obs.AppStats(uid)
	case "flows":
		st.Flows, err = e.obs.FlowStats(uid)
	case "links":
		st.Links, err = e.obs.LinkStats()
	default:
		err = &NotFoundError{What: "stat kind", Name: kind}
	}
	return err
}

// ingressLevels reads how a link's ingress budget is shared now; nil when
// the kernel cannot tell.
func ingressLevels(k Kernel, ifindex int) []api.IngressLevel {
	ls, err := k.LinkInLevels(ifindex)
	if err != nil || len(ls) == 0 {
		return nil
	}
	out := make([]api.IngressLevel, 0, len(ls))
	for _, l := range ls {
		out = append(out, api.IngressLevel{Priority: l.Priority, Avail: l.Avail, Used: l.Used, Flows: l.Flows})
	}
	return out
}

// LinkCounters are a managed link's interface counters (both directions)
// with its reservation figures.
type LinkCounters struct {
	Name string
	history.Counters
	Reserved, Reservable uint64 // bit/s
	// Auto are the automatic rates by direction ("egress", "ingress").
	Auto map[string]api.AutoRate
}

// LinkTotals reads the managed links' interface counters.
func (e *Engine) LinkTotals() []LinkCounters {
	ls := e.Links()
	dev := observe.ReadNetDev()
	out := make([]LinkCounters, 0, len(ls))
	for _, l := range ls {
		lc := LinkCounters{Name: l.Name, Counters: dev[l.Name], Reserved: uint64(l.Reserved), Reservable: uint64(l.Reservable)}
		for dir, a := range map[string]*api.AutoRate{"egress": l.EgressAuto, "ingress": l.IngressAuto} {
			if a != nil {
				if lc.Auto == nil {
					lc.Auto = map[string]api.AutoRate{}
				}
				lc.Auto[dir] = *a
			}
		}
		out = append(out, lc)
	}
	return out
}

// statusMemo is what the status derives from the effective policy alone,
// kept until the policy changes (status is asked often; a policy of
// 10,000 rules is not walked for each answer): the policy's warnings and,
// by link, the guarantees held there with the holders outside the policy
// they were summed with.
type statusMemo struct {
	policy   *policy.Policy
	warnings []string
	held     map[string]heldOn
}

type heldOn struct {
	extra []policy.Contribution
	rate  policy.Rate
	cs    []policy.Contribution
}

func (e *Engine) statusMemoLocked() *statusMemo {
	if e.status.policy != e.eff.Policy {
		e.status = statusMemo{policy: e.eff.Policy, warnings: e.eff.Policy.Warnings(), held: map[string]heldOn{}}
	}
	return &e.status
}

// heldOnLocked is the policy's HeldOn, from the memo while neither the
// policy nor the link's holders outside it changed.
func (e *Engine) heldOnLocked(link string, extra policy.Extra) (policy.Rate, []policy.Contribution) {
	m := e.statusMemoLocked()
	var x []policy.Contribution
	if extra != nil {
		x = extra(link)
	}
	if h, ok := m.held[link]; ok && slices.Equal(h.extra, x) {
		return h.rate, h.cs
	}
	rate, cs := e.eff.Policy.HeldOn(link, extra)
	m.held[link] = heldOn{extra: x, rate: rate, cs: cs}
	return rate, cs
}
