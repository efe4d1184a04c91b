package datapath

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/features"
)

// How the programs' loops are built (Options.Loops, hostqosd --loops). One
// object serves both: the loader sets hq_bounded, and the verifier, which
// reads it as a constant, never visits the other branch (so bpf_loop may
// stand in a program loaded on a kernel without it).
const (
	// LoopsAuto is LoopsBPFLoop where the kernel has bpf_loop, else
	// LoopsBounded.
	LoopsAuto = "auto"
	// LoopsBPFLoop runs the rule search and the reservation lock's wait
	// in bpf_loop (Linux 5.17): the full capacity (MaxRules, MaxAppRules).
	LoopsBPFLoop = "bpf_loop"
	// LoopsBounded runs them in bounded for loops (Linux 5.3), which the
	// verifier walks iteration by iteration: at most BoundedFlowRules
	// rules without and BoundedAppRules rules with app selectors.
	LoopsBounded = "bounded"
)

// Capacity of a bounded datapath (LoopsBounded), from enum hq_limits.
const (
	BoundedFlowRules = int(hostqosHqLimitsHQ_BOUNDED_FLOW_RULES)
	BoundedAppRules  = int(hostqosHqLimitsHQ_BOUNDED_APP_RULES)
)

// HaveBPFLoop reports whether the kernel has the bpf_loop helper for TC
// programs (Linux 5.17).
func HaveBPFLoop() bool { return haveHelper(asm.FnLoop) }

// HaveMPTCPHelper reports whether the kernel has bpf_skc_to_mptcp_sock
// (Linux 5.19), with which MPTCP subflows take their MPTCP socket's
// identity.
func HaveMPTCPHelper() bool { return haveHelper(asm.FnSkcToMptcpSock) }

// haveHelper probes a helper for TC programs. A failed probe (other than
// "not supported") counts as missing: the fallbacks work everywhere.
func haveHelper(fn asm.BuiltinFunc) bool {
	err := features.HaveProgramHelper(ebpf.SchedCLS, fn)
	return err == nil
}

// ResolveLoops turns the --loops flag into the variant to load: auto is
// bpf_loop where the kernel has it, bounded otherwise; bpf_loop on a
// kernel without it is an error.
func ResolveLoops(flag string) (string, error) {
	switch flag {
	case LoopsAuto, "":
		if HaveBPFLoop() {
			return LoopsBPFLoop, nil
		}
		return LoopsBounded, nil
	case LoopsBPFLoop:
		if !HaveBPFLoop() {
			return "", errors.New("flag --loops = bpf_loop: this kernel has no bpf_loop helper (Linux 5.17 or later); use --loops bounded or auto")
		}
		return LoopsBPFLoop, nil
	case LoopsBounded:
		return LoopsBounded, nil
	}
	return "", fmt.Errorf("flag --loops = %q: want auto, bpf_loop or bounded", flag)
}

// Loops is the loop variant the datapath's programs were loaded with
// (LoopsBPFLoop or LoopsBounded).
func (d *Datapath) Loops() string { return d.loops }

// MPTCPIdentity reports whether MPTCP subflows take the identity of their
// MPTCP socket (the kernel has bpf_skc_to_mptcp_sock).
func (d *Datapath) MPTCPIdentity() bool { return d.mptcp }

// checkBounded refuses a compiled policy that a bounded datapath's rule
// search would not cover to its end (the engine refuses such policies
// first, with the same limits; this keeps the datapath honest).
func (d *Datapath) checkBounded(c *compiled) error {
	if d.loops != LoopsBounded {
		return nil
	}
	if c.appRules > BoundedAppRules {
		return fmt.Errorf("policy has %d rules with app selectors, the bounded datapath (kernel without bpf_loop) holds at most %d", c.appRules, BoundedAppRules)
	}
	if n := len(c.rules) - c.appRules; n > BoundedFlowRules {
		return fmt.Errorf("policy has %d rules without app selectors, the bounded datapath (kernel without bpf_loop) holds at most %d", n, BoundedFlowRules)
	}
	return nil
}
