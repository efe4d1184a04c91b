package engine

import (
	"fmt"
	"sync"
	"time"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/datapath"
)

// The kind of the event of a new app.
const EventAppSeen = "app.seen"

// New apps are looked for in the flow table every appScanEvery; the
// engine remembers at most maxAppsSeen apps (then it forgets them all and
// starts over, so an app may be announced again).
const (
	appScanEvery = 5 * time.Second
	maxAppsSeen  = 4096
)

// appWatch remembers the apps seen in the flow table.
type appWatch struct {
	mu   sync.Mutex
	at   time.Time
	seen map[string]bool // nil until the first scan
}

// scanApps publishes app.seen for each app (executable, or command name
// when the executable is unknown) that owns a flow and was not seen
// before. The first scan only learns what is there: the apps running when
// the daemon started are not announced.
func (e *Engine) scanApps() {
	e.mu.Lock()
	k := e.k
	e.mu.Unlock()
	w := &e.apps
	w.mu.Lock()
	defer w.mu.Unlock()
	now := e.cfg.Now()
	if k == nil || (w.seen != nil && now.Sub(w.at) < appScanEvery && now.After(w.at)) {
		return
	}
	w.at = now
	type owner struct {
		uid  uint32
		comm string
	}
	pids := map[uint32]owner{}
	_ = k.Flows(func(f datapath.Flow) bool {
		if f.PID != 0 {
			pids[f.PID] = owner{f.UID, f.Comm}
		}
		return true
	})
	first := w.seen == nil
	if first || len(w.seen) > maxAppsSeen {
		w.seen = map[string]bool{}
	}
	var evs []api.Event
	for pid, o := range pids {
		e.stats.mu.Lock()
		exe := e.stats.exe(pid)
		e.stats.mu.Unlock()
		key := exe
		if key == "" {
			key = "comm:" + o.comm
		}
		if w.seen[key] {
			continue
		}
		w.seen[key] = true
		if first {
			continue
		}
		name := exe
		if name == "" {
			name = o.comm
		}
		ev := api.Event{Kind: EventAppSeen, Subject: "app/" + name,
			Message: fmt.Sprintf("new app %s (pid %d, uid %d) opened its first flow", name, pid, o.uid),
			Fields:  map[string]any{"exe": exe, "comm": o.comm, "pid": pid, "uid": o.uid}}
		if o.uid != 0 {
			uid := o.uid
			ev.UID = &uid // an ordinary user's app: theirs to see (and the admins')
		}
		evs = append(evs, ev)
	}
	e.publish(evs...)
}
