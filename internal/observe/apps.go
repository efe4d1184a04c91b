package observe

import (
	"fmt"
	"sync"
	"time"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/datapath"
)

// The kind of the event of a new app.
const EventAppSeen = "app.seen"

// New apps are looked for in the flow table every AppScanEvery; the
// observer remembers at most maxAppsSeen apps (then it forgets them all
// and starts over, so an app may be announced again).
const (
	AppScanEvery = 5 * time.Second
	maxAppsSeen  = 4096
)

// appWatch remembers the apps seen in the flow table.
type appWatch struct {
	mu   sync.Mutex
	at   time.Time
	seen map[string]bool // nil until the first scan
}

// ScanApps returns the app.seen events to publish, one for each app
// (executable, or command name when the executable is unknown) that owns
// a flow and was not seen before; it looks at most every AppScanEvery.
// The first scan only learns what is there: the apps running when the
// daemon started are not announced.
func (o *Observer) ScanApps() []api.Event {
	k := o.src.LinkView().Kernel
	w := &o.apps
	w.mu.Lock()
	defer w.mu.Unlock()
	now := o.now()
	if k == nil || (w.seen != nil && now.Sub(w.at) < AppScanEvery && now.After(w.at)) {
		return nil
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
	for pid, ow := range pids {
		o.s.mu.Lock()
		exe := o.s.exe(pid)
		o.s.mu.Unlock()
		key := exe
		if key == "" {
			key = "comm:" + ow.comm
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
			name = ow.comm
		}
		ev := api.Event{Kind: EventAppSeen, Subject: "app/" + name,
			Message: fmt.Sprintf("new app %s (pid %d, uid %d) opened its first flow", name, pid, ow.uid),
			Fields:  map[string]any{"exe": exe, "comm": ow.comm, "pid": pid, "uid": ow.uid}}
		if ow.uid != 0 {
			uid := ow.uid
			ev.UID = &uid // an ordinary user's app: theirs to see (and the admins')
		}
		evs = append(evs, ev)
	}
	return evs
}
