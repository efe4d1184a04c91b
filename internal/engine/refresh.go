package engine

import (
	"slices"
	"sync/atomic"
	"time"

	"github.com/hostqos/hostqos/internal/derive"
	"github.com/hostqos/hostqos/internal/policy"
)

// The engine reacts to changes instead of deriving again every second
// (DESIGN.md, the event-driven engine). What may change the kernel's
// state or the derive's input without going through the engine is told to
// it: the links and hostqos's qdiscs and filters by netlink events, the
// directories of exe selectors by inotify (both watched by the daemon,
// package internal/watch), each a Wake. Refresh, run by the daemon on a
// wake and on every tick, derives again (Rescan) only when something
// asked for it: a wake, the audit (auditEvery: what has no event, such as
// a TCX link detached by someone else), a container push to retry, the
// qsocket scheduler's rate (closed sockets), or an app selector that no
// watch covers (units, exe globs in a directory part, missing
// directories) resolving otherwise than at the last derive. An idle
// daemon makes no netlink dumps and reads no selector's files.

// auditEvery is how often Refresh looks at the links for what no event
// reports.
const auditEvery = time.Minute

// SelectorWatcher watches the directories of exe selectors for files
// created, removed, renamed or changed in their metadata, and wakes the
// engine when one is (and once when it starts watching a directory, so
// that nothing between the derive and the watch is missed). Watch
// replaces the watched set and returns the directories it could not
// watch, which the engine polls instead.
type SelectorWatcher interface {
	Watch(dirs []string) (unwatched map[string]bool)
}

// refreshState is what Refresh decides from.
type refreshState struct {
	woken   atomic.Bool
	wakeC   chan struct{} // a wake for the daemon's loop (capacity 1)
	auditAt time.Time     // the next audit
	qsched  uint64        // the qsocket scheduler's rate of the last derive
	// resolved are the resolutions of the last derive's app selectors;
	// polled the selectors of them no watch covers.
	resolved derive.Resolutions
	polled   derive.Resolutions
	// pending are the resolutions and the rate of the derive under way.
	pending       derive.Resolutions
	pendingQSched uint64
	watcher       SelectorWatcher
	unwatched     map[string]bool
	watched       *policy.Policy // the policy whose directories are watched
}

// Wake asks for a Refresh that derives again (a watched link, qdisc,
// filter or directory changed). It never blocks.
func (e *Engine) Wake() {
	e.rf.woken.Store(true)
	select {
	case e.rf.wakeC <- struct{}{}:
	default:
	}
}

// Woken is signalled after a Wake; the daemon then calls Refresh.
func (e *Engine) Woken() <-chan struct{} { return e.rf.wakeC }

// SetSelectorWatcher gives the engine the watcher of exe selectors'
// directories; without one every app selector is polled by Refresh.
func (e *Engine) SetSelectorWatcher(w SelectorWatcher) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.rf.watcher, e.rf.watched = w, nil
	e.watchSelectorsLocked()
}

// Refresh derives again (Rescan) when something asked for it (see above);
// otherwise it touches neither the kernel nor the file systems.
func (e *Engine) Refresh() {
	e.mu.Lock()
	if e.k == nil {
		e.mu.Unlock()
		return
	}
	woken := e.rf.woken.Swap(false)
	if woken {
		e.rf.watched = nil // a watch the kernel dropped is tried again
	}
	due := woken || !time.Now().Before(e.rf.auditAt) ||
		e.containerRetryLocked().containers != nil ||
		(e.qk != nil && e.qschedRateLocked() != e.rf.qsched) ||
		e.polledMovedLocked()
	e.mu.Unlock()
	if due {
		e.Rescan()
	}
}

// derivedLocked records what the derive that the kernel now holds
// resolved its selectors to, and watches the directories of a new
// policy's exe selectors.
func (e *Engine) derivedLocked() {
	e.rf.resolved, e.rf.qsched = e.rf.pending, e.rf.pendingQSched
	e.watchSelectorsLocked()
	e.rf.polled = e.pollSetLocked()
}

// watchSelectorsLocked gives the watcher the directories of the effective
// policy's exe selectors when the policy changed.
func (e *Engine) watchSelectorsLocked() {
	if e.rf.watcher == nil || e.rf.watched == e.eff.Policy || e.eff.Policy == nil {
		return
	}
	e.rf.watched = e.eff.Policy
	dirs := map[string]bool{}
	for _, r := range e.eff.Policy.Rules {
		if d, ok := derive.ExeWatchDir(r.Exe); ok {
			dirs[d] = true
		}
	}
	list := make([]string, 0, len(dirs))
	for d := range dirs {
		list = append(list, d)
	}
	slices.Sort(list)
	e.rf.unwatched = e.rf.watcher.Watch(list)
}

// pollSetLocked are the last derive's selectors no watch covers: units,
// and exe selectors without a watched directory.
func (e *Engine) pollSetLocked() derive.Resolutions {
	var out derive.Resolutions
	for pattern, res := range e.rf.resolved.Exe {
		if d, ok := derive.ExeWatchDir(pattern); ok && e.rf.watcher != nil && !e.rf.unwatched[d] {
			continue
		}
		if out.Exe == nil {
			out.Exe = map[string]derive.ExeResolution{}
		}
		out.Exe[pattern] = res
	}
	out.Unit = e.rf.resolved.Unit
	return out
}

// polledMovedLocked resolves the polled selectors again and reports
// whether any resolves otherwise than at the last derive.
func (e *Engine) polledMovedLocked() bool {
	if e.rf.polled.Empty() {
		return false
	}
	res := derive.NewSystemResolver(e.k.CgroupRoot())
	defer res.Close()
	return e.rf.polled.Moved(res)
}
