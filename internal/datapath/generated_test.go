package datapath

import (
	"bytes"
	"encoding/binary"
	"log/slog"
	"strings"
	"testing"
	"unsafe"

	"github.com/hostqos/hostqos/internal/policy"
)

// TestLimitsMatchObject: the Go limits, derived from the C enums, agree
// with the map sizes compiled into the BPF object. Needs no root.
func TestLimitsMatchObject(t *testing.T) {
	spec, err := loadHostqos()
	if err != nil {
		t.Fatal(err)
	}
	var specs hostqosSpecs
	if err := spec.Assign(&specs); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		what      string
		got, want int
	}{
		{"rule counter slots", int(specs.HqRuleCtr.MaxEntries), MaxRules},
		{"rules (two buffers)", int(specs.HqRules.MaxEntries), 2 * MaxRules},
		{"policers", int(specs.HqPolice.MaxEntries), MaxRules},
		{"app-rule index (two buffers)", int(specs.HqAppidx.MaxEntries), 2 * MaxAppRules},
		{"search tuples (two buffers, two families)", int(specs.HqTuples.MaxEntries), 4 * maxTuples},
		{"search entries (two buffers)", int(specs.HqTss.MaxEntries), 2 * tssEntries},
		{"search chain nodes (two buffers)", int(specs.HqTnodes.MaxEntries), 2 * tssEntries},
		{"flow table", int(specs.HqFlows4.MaxEntries), DefaultFlowTable},
		{"exe keys (two buffers)", int(specs.HqExe.MaxEntries), 2 * maxExeKeys},
		{"comm keys (two buffers)", int(specs.HqComm.MaxEntries), 2 * maxCommKeys},
		{"uid keys (two buffers)", int(specs.HqUid.MaxEntries), 2 * maxUIDKeys},
		{"cgroup keys (two buffers)", int(specs.HqCg.MaxEntries), 2 * maxCgroupKeys},
		{"app-rule bitmap bits", len(bitmap{}) * 64, MaxAppRules},
		{"kept cgroup levels", len(hostqosHqIdent{}.Cg), cgLevels},
	} {
		if c.got != c.want {
			t.Errorf("%s: object has %d, Go uses %d", c.what, c.got, c.want)
		}
	}
	if tcxNext != -1 {
		t.Errorf("tcxNext = %d, want -1", tcxNext)
	}
	// The test-run context is encoded with encoding/binary: it must cover
	// the whole struct __sk_buff mirror.
	if n, sz := binary.Size(skBuff{}), int(unsafe.Sizeof(skBuff{})); n != sz || n != 192 {
		t.Errorf("skBuff encodes to %d bytes, the struct has %d; struct __sk_buff has 192", n, sz)
	}
	if off := unsafe.Offsetof(skBuff{}.Priority); off != 32 {
		t.Errorf("skBuff.Priority at offset %d, want 32", off)
	}
}

// TestOpenLogsToGivenLogger: Open logs to Options.Logger, tagged
// component=datapath.
func TestOpenLogsToGivenLogger(t *testing.T) {
	var buf bytes.Buffer
	openTest(t, Options{Logger: slog.New(slog.NewTextHandler(&buf, nil))})
	out := buf.String()
	for _, want := range []string{"datapath ready", "component=datapath"} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
}

// TestLimitsMatchPolicy: the rule capacity the policy package enforces
// (config check and the daemon) is the datapath's.
func TestLimitsMatchPolicy(t *testing.T) {
	if MaxRules != policy.MaxRules || MaxAppRules != policy.MaxAppRules {
		t.Errorf("datapath holds %d rules, %d with app selectors; policy allows %d and %d",
			MaxRules, MaxAppRules, policy.MaxRules, policy.MaxAppRules)
	}
	if BoundedFlowRules != policy.BoundedFlowRules || BoundedAppRules != policy.BoundedAppRules {
		t.Errorf("the bounded datapath holds %d rules without and %d with app selectors; policy allows %d and %d",
			BoundedFlowRules, BoundedAppRules, policy.BoundedFlowRules, policy.BoundedAppRules)
	}
	if LoopsBPFLoop != policy.LoopsBPFLoop || LoopsBounded != policy.LoopsBounded {
		t.Errorf("loop variants %q, %q; policy knows %q, %q", LoopsBPFLoop, LoopsBounded, policy.LoopsBPFLoop, policy.LoopsBounded)
	}
}
