package engine

import (
	"fmt"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/store"
)

// linkVerdict is what a lookup of a managed link means for the engine.
type linkVerdict int

const (
	linkPresent linkVerdict = iota // exists with ifindex
	linkGone                       // positively does not exist
	linkUnknown                    // the lookup failed: keep what is set up
)

// judgeLink looks name up and decides. An unknown answer for a link that is
// set up now keeps it (same ifindex): enforcement is never torn down on an
// error that is not proof that the interface is gone. The error of an
// unknown answer is logged once until it changes.
func (e *Engine) judgeLink(name string) (linkVerdict, int) {
	ifindex, gone, err := e.k.LookupLink(name)
	if err != nil {
		if e.lookupErr == nil {
			e.lookupErr = map[string]string{}
		}
		if e.lookupErr[name] != err.Error() {
			e.log.Warn("cannot tell whether a managed interface exists; keeping it as it is set up", "link", name, "err", err)
			e.lookupErr[name] = err.Error()
		}
		return linkUnknown, e.links[name]
	}
	if _, ok := e.lookupErr[name]; ok {
		delete(e.lookupErr, name)
		e.log.Info("managed interface can be looked up again", "link", name, "gone", gone)
	}
	if gone {
		return linkGone, 0
	}
	return linkPresent, ifindex
}

// Kinds of the link events.
const (
	EventLinkUp   = "link.up"
	EventLinkDown = "link.down"
	// EventLinkRate: an automatic link rate changed (autorate.go).
	EventLinkRate = "link.rate"
)

// linkEvents are the link.up / link.down events of a repair that set
// managed links up again: links set up now that were not before, and
// links no longer set up.
func linkEvents(before, after map[string]int) []api.Event {
	var evs []api.Event
	for _, name := range store.SortedKeys(after) {
		if _, was := before[name]; !was {
			evs = append(evs, api.Event{Kind: EventLinkUp, Subject: "link/" + name,
				Message: fmt.Sprintf("link %s appeared (ifindex %d); hostqos manages it", name, after[name]), Fields: map[string]any{"ifindex": after[name]}})
		} else if before[name] != after[name] {
			evs = append(evs, api.Event{Kind: EventLinkUp, Subject: "link/" + name,
				Message: fmt.Sprintf("link %s was recreated (ifindex %d, was %d); hostqos manages it again", name, after[name], before[name]),
				Fields:  map[string]any{"ifindex": after[name], "previous_ifindex": before[name]}})
		}
	}
	for _, name := range store.SortedKeys(before) {
		if _, still := after[name]; !still {
			evs = append(evs, api.Event{Kind: EventLinkDown, Subject: "link/" + name,
				Message: fmt.Sprintf("link %s is gone (was ifindex %d); hostqos manages it again when it appears", name, before[name]),
				Fields:  map[string]any{"previous_ifindex": before[name]}})
		}
	}
	return evs
}
