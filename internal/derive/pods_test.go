package derive

import (
	"reflect"
	"strings"
	"testing"

	"github.com/hostqos/hostqos/internal/datapath"
	"github.com/hostqos/hostqos/internal/policy"
)

// TestDerivePods: a pod's rule selects exactly the containers whose pod
// UID is its own (not a container of another pod, not the host), is
// evaluated before the node's rules of ordinary precedence, gets its
// ceiling's HTB leaf and its download limit; a pod none of whose
// containers runs is not in the datapath (it would match everything
// without a selector) and is named in a warning.
func TestDerivePods(t *testing.T) {
	const uidA, uidB = "0a0a0a0a-0000-4000-8000-00000000000a", "0b0b0b0b-0000-4000-8000-00000000000b"
	p := basePolicy(policy.Link{Name: "eth0", EgressRate: 100e6})
	p.Rules = []policy.Rule{udpRule("node")}
	cs := append([]Container(nil), testContainers...)
	cs[0].PodUID = uidA // db: pod a
	cs = append(cs, Container{Runtime: "podman", ID: "eeee11112222333344445555", Name: "db-sidecar", NetnsCookie: 0x100000007, Veths: []int{10, 11}, PodUID: uidA})
	in := Input{Policy: p, Containers: cs, Pods: []Pod{
		{UID: uidA, Rule: policy.Rule{Name: PodKey("app", "a"), Class: "bulk", DSCP: policy.NoDSCP, DSCPIn: policy.NoDSCP, MaxBW: 5e6, MaxBWIn: 4e6}},
		{UID: uidB, Rule: policy.Rule{Name: PodKey("app", "b"), DSCP: 46, DSCPIn: policy.NoDSCP}},
	}}
	filled := testInput(p, nil)
	in.Resolver, in.Now, in.Ifindexes = filled.Resolver, filled.Now, filled.Ifindexes
	x := Expand(in)
	in.Slots = Slots{Rules: map[string]int{}, Classes: filled.Slots.Classes, Resv: map[string]int{}}
	for i, r := range x.Policy.Rules {
		in.Slots.Rules[r.Name] = i
		if r.Name != "node" && !Contributed(r.Name) {
			t.Errorf("rule %q: not a contributed name", r.Name)
		}
	}
	d, err := Compile(in, x)
	if err != nil {
		t.Fatal(err)
	}
	a := rule(t, in, d, "k8s/app/a")
	if want := []datapath.CgroupRef{{ID: datapath.ContainerKey(ContainerNumber(0x100000007))}}; !reflect.DeepEqual(a.Cgroups, want) {
		t.Errorf("pod a selects %v, want its containers' namespace %v once", a.Cgroups, want)
	}
	if a.MaxBWIn != 4e6 || a.Proto != 0 {
		t.Errorf("pod a's datapath rule %+v", a)
	}
	if d.Datapath.Rules[0].Slot != uint16(in.Slots.Rules["k8s/app/a"]) {
		t.Errorf("the first rule evaluated is slot %d, want pod a's", d.Datapath.Rules[0].Slot)
	}
	if len(d.Rules) != 1 || d.Rules[0].MaxBW != 5e6 || d.Rules[0].Slot != a.Slot {
		t.Errorf("shaper rules %+v, want pod a's 5 Mbit/s leaf", d.Rules)
	}
	for _, r := range d.Datapath.Rules {
		if int(r.Slot) == in.Slots.Rules["k8s/app/b"] {
			t.Errorf("pod b, with no container here, is in the datapath: %+v", r)
		}
	}
	if w := strings.Join(d.Warnings, "\n"); !strings.Contains(w, `rule "k8s/app/b": no container of pod UID `+uidB) {
		t.Errorf("warnings %q", w)
	}
	if got := strings.Join(d.Resolved["k8s/app/a"], ","); got != "containers: podman/db,podman/db-sidecar" {
		t.Errorf("resolved %q", got)
	}
}
