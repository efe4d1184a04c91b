package engine

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"time"

	"github.com/hostqos/hostqos/internal/policy"
	"github.com/hostqos/hostqos/internal/shaper"
	"github.com/hostqos/hostqos/internal/store"
	"github.com/hostqos/hostqos/internal/units"
)

// One admission per link (docs/config.md, "Admission control"). Every
// guarantee a shaped link carries is admitted against one budget, the
// link's reservable capacity: the classes' and rules' minbw and the
// reservations (the policy's, policy.Admit), the scheduled qsockets'
// declared rates (their qsched class is on every shaped link), and the
// real-time channels admitted on the link (their wire rates: their own
// HTB leaf), and the Kubernetes pods' guarantees (pods.go; like rules',
// counted on every shaped link). The per-kind bounds remain as limits inside it (QSchedShare,
// the channels' D_order test and per-user bounds). A refusal names every
// contributor and the numbers; nothing half-applies.

// rtHold is a real-time channel's share of its link's budget.
type rtHold struct {
	id    uint64
	name  string
	pid   uint32
	rate  policy.Rate
	burst uint32        // bytes on the wire of a burst of Bmax messages
	bound time.Duration // the local delay bound (its leaf's priority rank)
}

// extraLocked is what the qsockets, channels and pods hold outside the policy,
// for policy.AdmitWith (the scheduled qsockets' sum is read once).
func (e *Engine) extraLocked() policy.Extra {
	return e.extraWith(policy.Rate(e.qschedRateLocked()))
}

// extraWith is extraLocked with the scheduled qsockets holding qsched.
func (e *Engine) extraWith(qsched policy.Rate) policy.Extra {
	return e.holdersWith(qsched, e.pods)
}

// holdersWith is what the scheduled qsockets (holding qsched), the
// channels and pods hold outside the policy.
func (e *Engine) holdersWith(qsched policy.Rate, pods map[string]*store.Pod) policy.Extra {
	return e.holders(qsched, pods, false)
}

// publicExtraLocked is extraLocked as the views show it to everyone: a
// channel by its id and name, not its process.
func (e *Engine) publicExtraLocked() policy.Extra {
	return e.holders(policy.Rate(e.qschedRateLocked()), e.pods, true)
}

// holders lists the holders outside the policy on each link; public
// leaves out the process of a channel.
func (e *Engine) holders(qsched policy.Rate, pods map[string]*store.Pod, public bool) policy.Extra {
	held := e.rtHeld
	podCs := podContributions(pods)
	return func(link string) []policy.Contribution {
		var cs []policy.Contribution
		if qsched > 0 {
			cs = append(cs, policy.Contribution{Kind: "qsockets", Name: "scheduled", Rate: qsched})
		}
		for _, h := range held[link] {
			name := fmt.Sprintf("%d %q of pid %d", h.id, h.name, h.pid)
			if public {
				name = fmt.Sprintf("%d %q", h.id, h.name)
			}
			cs = append(cs, policy.Contribution{Kind: "rtchannel", Name: name, Rate: h.rate})
		}
		return append(cs, podCs...)
	}
}

// budgetRefusal is the error of a guarantee that does not fit link's
// budget: what it asks, what is held (each contributor), the capacity.
func budgetRefusal(l policy.Link, asked policy.Contribution, held policy.Rate, cs []policy.Contribution, fix string) error {
	return &TooManyError{Admission: true, Why: fmt.Sprintf("refuse %s %s of %s on link %s: the link's guarantees would be %s, over its reservable capacity %s (%g × %s); held now: %s; %s",
		asked.Kind, asked.Name, asked.Rate, l.Name, units.Add(held, asked.Rate), l.Capacity(), l.ReservableShare(), l.EgressFloor(),
		policy.FormatContributions(cs), fix)}
}

// admitRTBudgetLocked checks that a channel of rate fits link's budget
// beside everything held on it.
func (e *Engine) admitRTBudgetLocked(link string, asked policy.Contribution) error {
	for _, l := range e.eff.Policy.Links {
		if l.Name != link || l.EgressRate == 0 {
			continue
		}
		held, cs := e.eff.Policy.HeldOn(l.Name, e.extraLocked())
		if units.Add(held, asked.Rate) > l.Capacity() {
			return budgetRefusal(l, asked, held, cs, "ask for a longer period or smaller messages, or lower a guarantee (hostqos link list shows who holds what)")
		}
	}
	return nil
}

// admitQSchedBudgetLocked checks that the scheduled qsockets holding sum
// together (a new or changed one's rate included) fit every shaped link's
// budget beside the policy's guarantees and the channels.
func (e *Engine) admitQSchedBudgetLocked(sum, rate uint64) error {
	extra := e.extraWith(0)
	for _, l := range e.eff.Policy.Links {
		if l.EgressRate == 0 {
			continue
		}
		held, cs := e.eff.Policy.HeldOn(l.Name, extra)
		if units.Add(held, policy.Rate(sum)) > l.Capacity() {
			asked := policy.Contribution{Kind: "scheduled qsocket", Name: "rate", Rate: policy.Rate(rate)}
			others := policy.Rate(sum - rate)
			if others > 0 {
				cs = append(cs, policy.Contribution{Kind: "qsockets", Name: "scheduled", Rate: others})
			}
			return qsockField("rate", units.ExactRate(rate), budgetRefusal(l, asked, units.Add(held, others), cs, "").Error(),
				"declare a lower rate, close other scheduled qsockets, or lower a guarantee (hostqos link list shows who holds what)")
		}
	}
	return nil
}

// setRTHeldLocked makes the channels' holds these (by link) and derives
// the links' real-time leaves again; an error puts the old ones back.
func (e *Engine) setRTHeldLocked(held map[string][]rtHold) error {
	prev, prevIDs := e.rtHeld, e.rtOwnerIDs
	e.rtHeld, e.rtOwnerIDs = held, rtOwnerIDs(prevIDs, held)
	if e.k == nil {
		return nil
	}
	if err := e.syncLocked("rtchannel", syncChange{}); err != nil {
		e.rtHeld, e.rtOwnerIDs = prev, prevIDs
		return err
	}
	return nil
}

// rtOwnerIDs numbers the channels in held, each with a leaf of its own:
// those numbered in prev keep their number, the others take the lowest
// free one (a new map). Numbers go up to shaper.MaxRTOwners; the last one
// is shared by every channel beyond (they share one leaf, as every
// channel of a process did before leaves were per channel).
func rtOwnerIDs(prev map[uint64]uint16, held map[string][]rtHold) map[uint64]uint16 {
	var ids []uint64
	for _, hs := range held {
		for _, h := range hs {
			ids = append(ids, h.id)
		}
	}
	slices.Sort(ids)
	ids = slices.Compact(ids)
	out := map[uint64]uint16{}
	used := map[uint16]bool{}
	for _, id := range ids {
		if n, ok := prev[id]; ok {
			out[id], used[n] = n, true
		}
	}
	next := uint16(1)
	for _, id := range ids {
		if _, ok := out[id]; ok {
			continue
		}
		for used[next] && int(next) < shaper.MaxRTOwners {
			next++
		}
		out[id], used[next] = next, true
	}
	return out
}

// rtMaxPrio is the lowest HTB priority a channel's leaf takes: the
// channels with the tightest local bound on a link take 0, every other 1.
// HTB serves the leaves that may send by priority across the whole tree,
// so a channel's leaf must rank above the guaranteed shares of the
// classes best effort uses (default 2, bulk 4 in the default policy):
// only priorities 0 (voice's) and 1 (interactive's) are free for
// channels.
const rtMaxPrio = 1

// rtOwnersLocked are the links' real-time leaves, one per channel
// (derive.Input): its wire rate, its burst, and the HTB priority of its
// local delay bound's rank among the link's channels (equal bounds, equal
// rank), so that HTB serves the channels that can send in the order the
// D_order test assumed. Channels sharing a leaf number (past
// shaper.MaxRTOwners) share its rate and its best priority.
func (e *Engine) rtOwnersLocked() map[string][]shaper.RTOwner {
	if len(e.rtHeld) == 0 {
		return nil
	}
	out := make(map[string][]shaper.RTOwner, len(e.rtHeld))
	for link, hs := range e.rtHeld {
		bounds := make([]time.Duration, 0, len(hs))
		for _, h := range hs {
			bounds = append(bounds, h.bound)
		}
		slices.Sort(bounds)
		bounds = slices.Compact(bounds)
		by := map[uint16]*shaper.RTOwner{}
		for _, h := range hs {
			n := e.rtOwnerIDs[h.id]
			prio := min(slices.Index(bounds, h.bound), rtMaxPrio)
			o := by[n]
			if o == nil {
				o = &shaper.RTOwner{ID: n, Prio: prio}
				by[n] = o
			}
			o.Rate = units.Add(o.Rate, uint64(h.rate))
			o.Burst = uint32(min(uint64(o.Burst)+uint64(h.burst), 1<<30))
			o.Prio = min(o.Prio, prio)
		}
		for _, n := range slices.Sorted(maps.Keys(by)) {
			out[link] = append(out[link], *by[n])
		}
	}
	return out
}

// rtRatesLocked are the links' real-time leaves' rates (derive.Input).
func (e *Engine) rtRatesLocked() map[string]uint64 {
	if len(e.rtHeld) == 0 {
		return nil
	}
	out := make(map[string]uint64, len(e.rtHeld))
	for link, hs := range e.rtHeld {
		var sum uint64
		for _, h := range hs {
			sum = units.Add(sum, uint64(h.rate))
		}
		out[link] = sum
	}
	return out
}

// rtLeafLocked is the classid of the leaf of channel id held by pid, or
// false when pid holds no such channel.
func (e *Engine) rtLeafLocked(pid uint32, id uint64) (uint32, bool) {
	for _, hs := range e.rtHeld {
		for _, h := range hs {
			if h.pid == pid && h.id == id {
				return shaper.RTOwnerClassID(e.rtOwnerIDs[id]), true
			}
		}
	}
	return 0, false
}

// rtFirstLeafLocked is the leaf of pid's lowest-numbered channel, for a
// socket bound to the channels' class without naming one.
func (e *Engine) rtFirstLeafLocked(pid uint32) (uint32, bool) {
	first := uint64(0)
	for _, hs := range e.rtHeld {
		for _, h := range hs {
			if h.pid == pid && (first == 0 || h.id < first) {
				first = h.id
			}
		}
	}
	if first == 0 {
		return 0, false
	}
	return shaper.RTOwnerClassID(e.rtOwnerIDs[first]), true
}

// withHold is held with h added on link (a copy).
func withHold(held map[string][]rtHold, link string, h rtHold) map[string][]rtHold {
	out := maps.Clone(held)
	if out == nil {
		out = map[string][]rtHold{}
	}
	out[link] = append(append([]rtHold(nil), out[link]...), h)
	sort.Slice(out[link], func(i, j int) bool { return out[link][i].id < out[link][j].id })
	return out
}

// withoutHold is held without channel id (a copy).
func withoutHold(held map[string][]rtHold, id uint64) map[string][]rtHold {
	out := make(map[string][]rtHold, len(held))
	for link, hs := range held {
		var keep []rtHold
		for _, h := range hs {
			if h.id != id {
				keep = append(keep, h)
			}
		}
		if len(keep) > 0 {
			out[link] = keep
		}
	}
	return out
}
