package datapath

import (
	"errors"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/hostqos/hostqos/internal/testutil"
)

// TestVerifierCost reports what the kernel's verifier spends on each of
// the heavy programs, in both loop variants: the "processed N insns" line
// of its statistics, or the end of its log when it refuses the program.
// It asserts nothing (the cost differs between kernels); it is how
// docs/kernels.md's figures are measured, here and on other kernels
// (scripts/kernel-vm.sh -run TestVerifierCost). Set
// HOSTQOS_VERIFIER_COST=all to measure every program.
func TestVerifierCost(t *testing.T) {
	testutil.NeedRoot(t)
	if os.Getenv("HOSTQOS_VERIFIER_COST") == "" {
		t.Skip("set HOSTQOS_VERIFIER_COST=1 (or all) to measure the verifier's cost")
	}
	all := os.Getenv("HOSTQOS_VERIFIER_COST") == "all"
	heavy := map[string]bool{"hq_tc_egress": true, "hq_tc_ingress": true, "hq_forget_flows": true, "hq_connect4": true, "hq_sock_create": true}
	stat := regexp.MustCompile(`processed \d+ insns.*`)
	depth := regexp.MustCompile(`stack depth [0-9+]+`)
	for _, bounded := range []bool{false, true} {
		spec, err := loadHostqos()
		if err != nil {
			t.Fatal(err)
		}
		var specs hostqosSpecs
		if err := spec.Assign(&specs); err != nil {
			t.Fatal(err)
		}
		if err := specs.HqBounded.Set(boolByte(bounded)); err != nil {
			t.Fatal(err)
		}
		if err := specs.HqMptcp.Set(boolByte(HaveMPTCPHelper())); err != nil {
			t.Fatal(err)
		}
		if err := specs.HqNcpu.Set(uint32(2)); err != nil {
			t.Fatal(err)
		}
		maps := *spec
		maps.Programs = nil
		maps.Maps = make(map[string]*ebpf.MapSpec, len(spec.Maps))
		for name, m := range spec.Maps {
			c := m.Copy()
			c.Pinning = ebpf.PinNone
			maps.Maps[name] = c
		}
		coll, err := ebpf.NewCollection(&maps)
		if err != nil {
			t.Fatalf("create maps: %v", err)
		}
		for name, p := range spec.Programs {
			if p.Type == ebpf.UnspecifiedProgram || (!all && !heavy[name]) {
				continue
			}
			prog, err := loadProgram(spec, name, coll.Maps, ebpf.ProgramOptions{LogLevel: ebpf.LogLevelStats})
			if err != nil {
				var ve *ebpf.VerifierError
				tail := err.Error()
				if errors.As(err, &ve) {
					tail = strings.Join(ve.Log[max(0, len(ve.Log)-6):], " | ")
				}
				t.Logf("bounded=%v %s: REFUSED: %s", bounded, name, tail)
				continue
			}
			t.Logf("bounded=%v %s: %s, %s", bounded, name, stat.FindString(prog.VerifierLog), depth.FindString(prog.VerifierLog))
			if os.Getenv("HOSTQOS_VERIFIER_FUNCS") != "" {
				// In the order of the stack depths above (BTF func info).
				if info, err := prog.Info(); err == nil {
					if fis, err := info.FuncInfos(); err == nil {
						var fns []string
						for _, fi := range fis {
							fns = append(fns, fi.Func.Name)
						}
						t.Logf("  functions in order: %s", strings.Join(fns, " "))
					}
				}
			}
			prog.Close()
		}
		coll.Close()
	}
}
