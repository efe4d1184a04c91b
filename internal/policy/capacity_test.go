package policy

import (
	"fmt"
	"strings"
	"testing"
)

// TestBoundedCapacity: the bounded datapath takes BoundedFlowRules rules
// without and BoundedAppRules with app selectors; one more of either is
// refused, naming the count, the limit and why; the bpf_loop datapath
// takes them all.
func TestBoundedCapacity(t *testing.T) {
	mk := func(flows, apps int) *Policy {
		p := &Policy{Classes: DefaultClasses()}
		for i := 0; i < flows+apps; i++ {
			r := Rule{Name: fmt.Sprintf("r%d", i), Class: "bulk", Proto: "udp", RPort: PortRange{From: uint16(1 + i), To: uint16(1 + i)}}
			if i < apps {
				r = Rule{Name: r.Name, Class: "bulk", Comm: fmt.Sprintf("c%d", i)}
			}
			p.Rules = append(p.Rules, r)
		}
		return p
	}
	if err := mk(BoundedFlowRules, BoundedAppRules).CheckCapacity("t", LoopsBounded); err != nil {
		t.Fatalf("policy at the bounded limits refused: %v", err)
	}
	for _, c := range []struct {
		p    *Policy
		want string
	}{
		{mk(BoundedFlowRules+1, 0), fmt.Sprintf("t: policy: field rule = %d rules without app selectors: more than the bounded datapath holds (%d; kernels without bpf_loop (before Linux 5.17) run the bounded datapath)", BoundedFlowRules+1, BoundedFlowRules)},
		{mk(0, BoundedAppRules+1), fmt.Sprintf("t: policy: field rule = %d rules with app selectors: more than the bounded datapath holds (%d;", BoundedAppRules+1, BoundedAppRules)},
	} {
		err := c.p.CheckCapacity("t", LoopsBounded)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("error %v, want one containing %q", err, c.want)
		}
		if err := c.p.CheckCapacity("t", LoopsBPFLoop); err != nil {
			t.Errorf("bpf_loop datapath refused %d rules: %v", len(c.p.Rules), err)
		}
	}
}
