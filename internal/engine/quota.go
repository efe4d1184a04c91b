package engine

import (
	"fmt"
	"time"

	"github.com/hostqos/hostqos/internal/store"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/datapath"
	"github.com/hostqos/hostqos/internal/derive"
	"github.com/hostqos/hostqos/internal/policy"
)

// Quotas and schedules change what a rule does over time without changing
// the rule: the engine lays a runtime view over the effective policy before
// compiling it (the derive's runtime view). A rule outside its schedule's windows is
// left out of the datapath (its traffic falls to the next rule); a rule
// whose quota is used up is blocked (action drop) or capped (a ceiling on
// a shaped link, else a policer) until the quota's next reset. Tick (and
// CheckQuotas between ticks, see QuotaCheckIn) counts each quota's usage
// from the rule's byte counter, notices resets and schedule switches,
// publishes events, and syncs when the view changed. Usage is a section of
// the persistent state file.

// quotaSaveEvery is how often usage that grew is written (a crash loses at
// most this much counting); a reached quota or a reset is written at once.
const quotaSaveEvery = 5 * time.Second

// quotaUsage is one rule's quota usage in its current period (a section
// of the persistent state file).
type quotaUsage = store.QuotaUsage

// ruleTimes is the engine's quota and schedule state.
type ruleTimes struct {
	// usage is each rule's quota usage, by rule name; write persists it.
	usage   map[string]*quotaUsage
	write   func(map[string]*quotaUsage) error
	dirty   bool
	savedAt time.Time
	view    string          // runtime view last applied (derive.Desired.View)
	on      map[string]bool // schedule state last seen, by rule
	lastErr string          // last error of applying a changed view, logged once
	// pace is each quota's usage at the previous reading; due is how soon
	// the next reading should be (QuotaCheckIn).
	pace map[string]quotaPace
	due  time.Duration
	wake chan struct{} // QuotaWake
}

// newRuleTimes starts from the usage the state file holds; write
// persists usage.
func newRuleTimes(usage map[string]*quotaUsage, write func(map[string]*quotaUsage) error) *ruleTimes {
	t := &ruleTimes{usage: map[string]*quotaUsage{}, write: write, on: map[string]bool{},
		pace: map[string]quotaPace{}, due: quotaCheckMax, wake: make(chan struct{}, 1)}
	for name, u := range usage {
		c := *u
		t.usage[name] = &c // usage grows in place; the file keeps what it holds
	}
	return t
}

// save persists the usage.
func (t *ruleTimes) save(now time.Time) error {
	if err := t.write(t.usage); err != nil {
		return err
	}
	t.dirty, t.savedAt = false, now
	return nil
}

// saveQuotaLocked writes quota usage into the persistent state file: a
// copy, since usage grows in place and the file compares what it holds
// with what it is given.
func (e *Engine) saveQuotaLocked(usage map[string]*quotaUsage) error {
	st := e.stPersist.Holds()
	st.Quota = make(map[string]*quotaUsage, len(usage))
	for name, u := range usage {
		c := *u
		st.Quota[name] = &c
	}
	_, err := e.stPersist.Write(st)
	return err
}

// reached reports whether rule name's quota q is used up in the period
// that now falls in.
func (t *ruleTimes) reached(name string, q policy.QuotaSpec, now time.Time) bool {
	u := t.usage[name]
	if u == nil {
		return false
	}
	start, _ := policy.QuotaPeriodAt(now, q.Period, q.ResetMin, q.Loc)
	return u.PeriodStart.Equal(start) && u.Used >= q.Size
}

// overQuota are the rules of p whose quota is used up in the period now
// falls in (the derive applies their quota action).
func (t *ruleTimes) overQuota(p *policy.Policy, now time.Time) map[string]bool {
	var out map[string]bool
	for _, r := range p.Rules {
		if q, ok := r.QuotaOf(); ok && t.reached(r.Name, q, now) {
			if out == nil {
				out = map[string]bool{}
			}
			out[r.Name] = true
		}
	}
	return out
}

// tickTimes counts quota usage, notices quota resets and schedule
// switches, applies the runtime view when it changed, and publishes the
// events (after the lock is released).
func (e *Engine) tickTimes() {
	e.mu.Lock()
	evs := e.tickTimesLocked()
	e.mu.Unlock()
	e.publish(evs...)
}

func (e *Engine) tickTimesLocked() []api.Event {
	if e.k == nil {
		return nil
	}
	t := e.times
	if !e.hasTimedLocked() && len(t.usage) == 0 && len(t.on) == 0 && len(t.pace) == 0 && t.view == "" && !t.dirty {
		t.due = quotaCheckMax
		return nil // no quota or schedule: nothing to count or switch
	}
	now := e.cfg.Now()
	cs, cerr := e.k.RuleCounters()
	if cerr != nil {
		cs = nil // count nothing this time; the next reading catches up
	}
	var evs []api.Event
	saveNow := false
	quota := map[string]bool{}
	wasDue := t.due
	t.due = quotaCheckMax
	for _, r := range e.eff.Policy.Rules {
		q, ok := r.QuotaOf()
		if !ok {
			continue
		}
		quota[r.Name] = true
		start, next := policy.QuotaPeriodAt(now, q.Period, q.ResetMin, q.Loc)
		slot, hasSlot := e.slots.Rules[r.Name]
		var raw uint64
		haveRaw := hasSlot && slot < len(cs)
		if haveRaw {
			raw = quotaBytes(cs[slot], q.Direction)
		}
		u := t.usage[r.Name]
		if u == nil {
			if !haveRaw {
				continue
			}
			u = &quotaUsage{PeriodStart: start, Slot: slot, Counter: raw, Direction: q.Direction}
			t.usage[r.Name], saveNow = u, true
		}
		if !u.PeriodStart.Equal(start) {
			if !u.ReachedAt.IsZero() {
				evs = append(evs, quotaEvent(EventQuotaReset, r, q, 0, start, next,
					fmt.Sprintf("rule %s: quota of %s per %s starts again (%s used last period)", r.Name, policy.Size(q.Size), q.Period, mib(u.Used))))
			}
			u.PeriodStart, u.Used, u.ReachedAt, saveNow = start, 0, time.Time{}, true
		}
		if haveRaw {
			switch {
			case u.Slot != slot || dirOf(u.Direction) != q.Direction:
				// Another slot, or another direction counted: from here.
				u.Slot, u.Counter, u.Direction, saveNow = slot, raw, q.Direction, true
			case raw >= u.Counter:
				if raw > u.Counter {
					u.Used += raw - u.Counter
					u.Counter, t.dirty = raw, true
				}
			default: // the counter started again from zero (a new datapath)
				u.Used += raw
				u.Counter, t.dirty = raw, true
			}
		}
		if u.Used < q.Size && !u.ReachedAt.IsZero() {
			u.ReachedAt, saveNow = time.Time{}, true // the quota was raised
		}
		if haveRaw && u.ReachedAt.IsZero() {
			t.due = min(t.due, t.paceOf(r.Name, u.Used, q.Size, now))
		}
		if u.Used >= q.Size && u.ReachedAt.IsZero() {
			u.ReachedAt, saveNow = now, true
			what := "an event only"
			if q.Action.Kind != policy.QuotaEvent {
				what = q.Action.String() + " until " + next.Format(time.RFC3339)
			}
			evs = append(evs, quotaEvent(EventQuotaReached, r, q, u.Used, start, next,
				fmt.Sprintf("rule %s: quota of %s per %s reached (%s used); %s", r.Name, policy.Size(q.Size), q.Period, mib(u.Used), what)))
		}
	}
	for name := range t.usage {
		if !quota[name] {
			delete(t.usage, name)
			saveNow = true
		}
	}
	for name := range t.pace {
		if !quota[name] {
			delete(t.pace, name)
		}
	}
	sched := map[string]bool{}
	for _, r := range e.eff.Policy.Rules {
		s, loc, ok := r.ScheduleOf()
		if !ok {
			continue
		}
		sched[r.Name] = true
		on := s.Active(now, loc)
		if prev, seen := t.on[r.Name]; seen && prev != on {
			kind, msg := EventScheduleOff, "rule %s: outside its schedule (%s); off until %s"
			if on {
				kind, msg = EventScheduleOn, "rule %s: inside its schedule (%s); on until %s"
			}
			until := "further notice"
			if nc := s.NextChange(now, loc); !nc.IsZero() {
				until = nc.Format(time.RFC3339)
			}
			evs = append(evs, api.Event{Kind: kind, Subject: "rule/" + r.Name, Message: fmt.Sprintf(msg, r.Name, r.Schedule, until),
				Fields: map[string]any{"rule": r.Name, "schedule": r.Schedule, "active": on}})
		}
		t.on[r.Name] = on
	}
	for name := range t.on {
		if !sched[name] {
			delete(t.on, name)
		}
	}
	if e.viewChangedLocked() {
		err := e.syncLocked("quota or schedule change", syncChange{})
		msg := ""
		if err != nil {
			msg = err.Error()
		}
		if err != nil && msg != t.lastErr {
			e.log.Warn("apply quota and schedule changes", "err", err)
		}
		t.lastErr = msg
	}
	if t.due < quotaCheckMax && wasDue >= quotaCheckMax {
		t.wakeUp() // a quota to count between ticks again
	}
	if saveNow || (t.dirty && now.Sub(t.savedAt) >= quotaSaveEvery) {
		if err := t.save(now); err != nil {
			e.log.Warn("save quota usage", "err", err)
		}
	}
	return evs
}

// Counted every Tick (a second) only, a quota lets an app at 150 Mbit/s
// send up to 19 MB more before its action applies. So while a quota is not
// used up the engine counts it every quotaCheckIdle between Ticks (about
// 50 µs of CPU a reading: the rule counters of the slots in use), and
// sooner when, at the pace of its last two readings, the quota could be
// used up: after half the time the rest would take at that pace (at least
// quotaCheckMin), so that the readings close in on the crossing. What the
// rule sends past its quota is then what it sends in about quotaCheckIdle
// (at 150 Mbit/s about 1 MB) plus the time the action takes to apply.
const (
	quotaCheckMin  = 10 * time.Millisecond
	quotaCheckIdle = 50 * time.Millisecond
	quotaCheckMax  = time.Second
)

// quotaPace is a quota's usage at a reading.
type quotaPace struct {
	used uint64
	at   time.Time
}

// paceOf notes a quota's usage and returns how soon to read it again.
func (t *ruleTimes) paceOf(name string, used, size uint64, now time.Time) time.Duration {
	p, seen := t.pace[name]
	t.pace[name] = quotaPace{used: used, at: now}
	if used >= size {
		return quotaCheckMax
	}
	if !seen || !now.After(p.at) || used <= p.used {
		return quotaCheckIdle
	}
	rate := float64(used-p.used) / now.Sub(p.at).Seconds() // bytes a second
	half := time.Duration(float64(size-used) / rate / 2 * float64(time.Second))
	return min(max(half, quotaCheckMin), quotaCheckIdle)
}

// QuotaCheckIn is how soon the quotas should be counted again (CheckQuotas):
// sooner than the next Tick when a quota is about to be used up.
func (e *Engine) QuotaCheckIn() time.Duration {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.times == nil {
		return quotaCheckMax
	}
	return e.times.due
}

// CheckQuotas counts quota usage and applies what changed, as Tick does.
func (e *Engine) CheckQuotas() { e.tickTimes() }

// QuotaWake receives when QuotaCheckIn became sooner than the next Tick
// (a change added a quota, a new period began).
func (e *Engine) QuotaWake() <-chan struct{} { return e.times.wake }

// startUsageLocked starts counting the quotas that have no usage yet (a
// rule that was added or got a quota) from the counters of their slots as
// the sync read them before the push (read), so that what the rule
// sends before the next reading counts too; then it has the quotas read
// soon. Called with e.mu held after a successful apply.
func (e *Engine) startUsageLocked(read func(slot int) store.BaseCounter) {
	t := e.times
	now := e.cfg.Now()
	added := false
	for _, r := range e.eff.Policy.Rules {
		q, ok := r.QuotaOf()
		if !ok || t.usage[r.Name] != nil {
			continue
		}
		slot, ok := e.slots.Rules[r.Name]
		if !ok {
			continue
		}
		b := read(slot)
		start, _ := policy.QuotaPeriodAt(now, q.Period, q.ResetMin, q.Loc)
		t.usage[r.Name] = &quotaUsage{PeriodStart: start, Slot: slot, Direction: q.Direction,
			Counter: quotaBytes(datapath.Counters{Bytes: b.Bytes, RxBytes: b.RxBytes}, q.Direction)}
		t.dirty, added = true, true
	}
	if added {
		t.due = min(t.due, quotaCheckIdle)
		t.wakeUp()
	}
}

func (t *ruleTimes) wakeUp() {
	select {
	case t.wake <- struct{}{}:
	default:
	}
}

// quotaBytes is the byte counter a quota of direction dir counts.
func quotaBytes(c datapath.Counters, dir string) uint64 {
	switch dir {
	case policy.DirIn:
		return c.RxBytes
	case policy.DirBoth:
		return c.Bytes + c.RxBytes
	}
	return c.Bytes
}

func dirOf(d string) string {
	if d == "" {
		return policy.DirOut
	}
	return d
}

// mib writes a byte count in MiB for messages.
func mib(n uint64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

func quotaEvent(kind string, r policy.Rule, q policy.QuotaSpec, used uint64, start, next time.Time, msg string) api.Event {
	return api.Event{Kind: kind, Subject: "rule/" + r.Name, Message: msg, Fields: map[string]any{
		"rule": r.Name, "quota_bytes": q.Size, "used_bytes": used, "period": q.Period, "direction": q.Direction,
		"action": q.Action.String(), "period_start": start, "next_reset": next,
	}}
}

// quotaStatusLocked is what `rule show` reports of a rule's quota and
// schedule.
func (e *Engine) quotaStatusLocked(r policy.Rule, ri *api.RuleInfo) {
	now := e.cfg.Now()
	if q, ok := r.QuotaOf(); ok {
		start, next := policy.QuotaPeriodAt(now, q.Period, q.ResetMin, q.Loc)
		qs := &api.QuotaStatus{Quota: policy.Size(q.Size), Period: q.Period, Direction: q.Direction, Action: q.Action.String(),
			PeriodStart: start, NextReset: next}
		if u := e.times.usage[r.Name]; u != nil && u.PeriodStart.Equal(start) {
			qs.Used = u.Used
			qs.Reached = u.Used >= q.Size
			if !u.ReachedAt.IsZero() {
				at := u.ReachedAt
				qs.ReachedAt = &at
			}
		}
		ri.Quota = qs
	}
	if s, loc, ok := r.ScheduleOf(); ok {
		ss := &api.ScheduleStatus{Active: s.Active(now, loc)}
		if nc := s.NextChange(now, loc); !nc.IsZero() {
			ss.NextChange = &nc
		}
		ri.Schedule = ss
	}
}

// hasTimedLocked reports whether a rule of the effective policy has a
// quota or a schedule (remembered per policy: an idle tick does not walk
// every rule).
func (e *Engine) hasTimedLocked() bool {
	if e.timed.policy != e.eff.Policy {
		e.timed.policy, e.timed.any = e.eff.Policy, false
		for _, r := range e.eff.Policy.Rules {
			_, q := r.QuotaOf()
			_, _, s := r.ScheduleOf()
			if q || s {
				e.timed.any = true
				break
			}
		}
	}
	return e.timed.any
}

// viewChangedLocked reports whether the runtime view (the rules that are
// off or over their quota) differs from the one the kernel holds.
func (e *Engine) viewChangedLocked() bool {
	now := e.cfg.Now()
	return derive.View(e.eff.Policy, now, e.times.overQuota(e.eff.Policy, now)) != e.times.view
}
