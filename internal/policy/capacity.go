package policy

import (
	"fmt"
	"strconv"
)

// Capacity of a bounded datapath: the one hostqosd loads on kernels
// without the bpf_loop helper (before Linux 5.17), or with `hostqosd
// --loops bounded`. Its rule search runs in loops the verifier walks
// iteration by iteration, so it holds smaller policies: at most
// BoundedFlowRules rules without app selectors and BoundedAppRules rules
// with them. internal/datapath is built for exactly these (a test keeps
// them equal).
const (
	BoundedFlowRules = 2048
	BoundedAppRules  = 128
)

// The loop variants of the datapath (hostqosd --loops, `hostqos config
// check --loops`); auto is decided by the daemon from the kernel.
const (
	LoopsBPFLoop = "bpf_loop"
	LoopsBounded = "bounded"
)

// CheckCapacity checks the policy against the capacity of the datapath
// variant loops (LoopsBPFLoop or "": what Validate checks already;
// LoopsBounded: the bounded datapath's smaller limits) and returns every
// excess as Errors. `hostqos config check --loops` and the daemon call it
// alike, so both refuse with the same message.
func (p *Policy) CheckCapacity(source, loops string) error {
	if loops != LoopsBounded {
		return nil
	}
	v := &validator{src: source}
	apps := 0
	for _, r := range p.Rules {
		if r.HasAppSelector() {
			apps++
		}
	}
	why := "kernels without bpf_loop (before Linux 5.17) run the bounded datapath"
	if flows := len(p.Rules) - apps; flows > BoundedFlowRules {
		v.addNum("policy", "rule", strconv.Itoa(flows)+" rules without app selectors",
			fmt.Sprintf("more than the bounded datapath holds (%d; %s)", BoundedFlowRules, why),
			"remove rules or merge rules with the same properties into one with a wider selector, or run hostqos on Linux 5.17 or later")
	}
	if apps > BoundedAppRules {
		v.addNum("policy", "rule", strconv.Itoa(apps)+" rules with app selectors",
			fmt.Sprintf("more than the bounded datapath holds (%d; %s)", BoundedAppRules, why),
			"select the apps by a common cgroup or unit instead of one rule per executable, or run hostqos on Linux 5.17 or later")
	}
	return v.errs.err()
}
