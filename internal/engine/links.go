package engine

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
