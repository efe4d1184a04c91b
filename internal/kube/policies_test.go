package kube

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/hostqos/hostqos/internal/engine"
	"github.com/hostqos/hostqos/internal/policy"
)

func testPod(ns, name, uid string, lbl, ann map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(uid), Labels: lbl, Annotations: ann},
		Spec:       corev1.PodSpec{NodeName: "n1"},
	}
}

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func qosPolicy(ns, name string, age int, spec PolicySpec) *Policy {
	return &Policy{Kind: KindQoSPolicy, Namespace: ns, Name: name, Created: t0.Add(time.Duration(age) * time.Hour), Spec: spec}
}

func clusterPolicy(name string, age int, spec PolicySpec) *Policy {
	return &Policy{Kind: KindClusterQoSPolicy, Name: name, Created: t0.Add(time.Duration(age) * time.Hour), Spec: spec}
}

func selector(kv ...string) *metav1.LabelSelector {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return &metav1.LabelSelector{MatchLabels: m}
}

const (
	uidCall  = "11111111-2222-4333-8444-555555555555"
	uidFlood = "66666666-7777-4888-8999-aaaaaaaaaaaa"
	uidOther = "bbbbbbbb-cccc-4ddd-8eee-ffffffffffff"
)

// TestMapPrecedence: field by field, a pod's annotations win over the
// QoSPolicies that select it, which win over the ClusterQoSPolicies;
// among policies of one kind the oldest decides (then the name). A
// ClusterQoSPolicy selects by namespace labels and node labels; a
// QoSPolicy only in its namespace.
func TestMapPrecedence(t *testing.T) {
	ef := intstr.FromString("EF")
	af41 := intstr.FromInt32(34)
	v := View{
		Pods: []*corev1.Pod{
			testPod("app", "call", uidCall, map[string]string{"app": "call"}, map[string]string{AnnotationMaxBW: "3mbit"}),
			testPod("app", "flood", uidFlood, map[string]string{"app": "flood"}, nil),
			testPod("other", "call", uidOther, map[string]string{"app": "call"}, nil),
		},
		Namespaces: map[string]map[string]string{"app": {"tier": "gold"}, "other": {}},
		Node:       map[string]string{"zone": "a"}, NodeKnown: true,
		Policies: []*Policy{
			// Newer than "call": loses class to it, gives minbw.
			qosPolicy("app", "newer", 2, PolicySpec{PodSelector: selector("app", "call"), Class: "bulk", MinBW: "1M"}),
			qosPolicy("app", "call", 1, PolicySpec{PodSelector: selector("app", "call"), Class: "voice", DSCP: &ef, MaxBW: "9mbit"}),
			// Oldest of all, but a cluster policy: only what no
			// QoSPolicy or annotation set.
			clusterPolicy("gold", 0, PolicySpec{NamespaceSelector: selector("tier", "gold"), DSCP: &af41, MaxBWIn: "20mbit", MinBW: "2M"}),
			clusterPolicy("zone-b", 0, PolicySpec{NodeSelector: selector("zone", "b"), Class: "bulk"}),
		},
	}
	m := Map(v)
	byKey := map[string]engine.PodPolicy{}
	for _, p := range m.Pods {
		byKey[p.Key()] = p
	}
	call := byKey["app/call"]
	if call.Class != "voice" || call.DSCP != 46 || call.MaxBW != 3e6 || call.MinBW != 1e6 || call.MaxBWIn != 20e6 {
		t.Errorf("app/call: %+v; want class voice and EF (QoSPolicy call), maxbw 3mbit (annotation), minbw 1M (QoSPolicy newer), maxbw-in 20mbit (ClusterQoSPolicy gold)", call.Pod)
	}
	if want := []string{"annotations", "QoSPolicy app/call", "QoSPolicy app/newer", "ClusterQoSPolicy gold"}; !slices.Equal(m.Sources["app/call"], want) {
		t.Errorf("app/call's sources %v, want %v", m.Sources["app/call"], want)
	}
	if flood := byKey["app/flood"]; flood.DSCP != 34 || flood.MinBW != 2e6 || flood.Class != "" {
		t.Errorf("app/flood: %+v; want the gold namespace's cluster policy alone", flood.Pod)
	}
	if _, ok := byKey["other/call"]; ok {
		t.Errorf("other/call got %+v: no policy selects it (QoSPolicy app/call is of another namespace, gold of other namespaces, zone-b of other nodes)", byKey["other/call"])
	}
	if got := m.Selected["ClusterQoSPolicy zone-b"]; len(got) != 0 {
		t.Errorf("ClusterQoSPolicy zone-b selects %v on a node of zone a", got)
	}
	if got := m.Selected["QoSPolicy app/call"]; !slices.Equal(got, []string{"app/call"}) {
		t.Errorf("QoSPolicy app/call selects %v", got)
	}
	// Same age: by name.
	v.Policies = []*Policy{
		qosPolicy("app", "b", 1, PolicySpec{PodSelector: selector(), Class: "bulk"}),
		qosPolicy("app", "a", 1, PolicySpec{PodSelector: selector(), Class: "voice"}),
	}
	if m := Map(v); m.Pods[0].Class != "voice" {
		t.Errorf("two policies of one age: class %q, want voice (policy a)", m.Pods[0].Class)
	}
}

// TestMapFlows: a policy's flows become entries of their own (one per
// port range) with that policy's settings alone; the pod's own entry
// stays what the other sources give it, and a pod that only flows select
// has no entry of its own.
func TestMapFlows(t *testing.T) {
	ef := intstr.FromString("EF")
	end := int32(5061)
	v := View{
		Pods: []*corev1.Pod{
			testPod("app", "call", uidCall, map[string]string{"app": "call"}, nil),
			testPod("app", "web", uidFlood, map[string]string{"app": "web"}, map[string]string{AnnotationEgress: "5M"}),
		},
		Policies: []*Policy{qosPolicy("app", "sip", 0, PolicySpec{PodSelector: &metav1.LabelSelector{}, DSCP: &ef, Flows: []FlowSpec{
			{Protocol: "UDP", RemoteCIDR: "198.18.0.0/15", Ports: []PortSpec{{Port: 5060, EndPort: &end}, {Port: 5080}}},
			{RemoteCIDR: "2001:db8::/32"},
		}})},
	}
	m := Map(v)
	var keys []string
	for _, p := range m.Pods {
		keys = append(keys, p.Key())
	}
	want := []string{"app/call/sip:0", "app/call/sip:0:1", "app/call/sip:1", "app/web", "app/web/sip:0", "app/web/sip:0:1", "app/web/sip:1"}
	if !slices.Equal(keys, want) {
		t.Fatalf("entries %v, want %v", keys, want)
	}
	f := m.Pods[1]
	if f.Proto != "udp" || f.RPort != (policy.PortRange{From: 5080, To: 5080}) || f.Remote != netip.MustParsePrefix("198.18.0.0/15") || f.DSCP != 46 || f.UID != uidCall {
		t.Errorf("flow entry %+v", f.Pod)
	}
	if web := m.Pods[3]; web.MaxBW != 5e6 || web.DSCP != policy.NoDSCP {
		t.Errorf("app/web's own entry %+v; want its annotation alone", web.Pod)
	}
	if got := len(m.Entries["QoSPolicy app/sip"]); got != 6 {
		t.Errorf("QoSPolicy app/sip gave %d entries, want 6", got)
	}
}

// TestMapInvalid: a policy the agent cannot read gives nothing and says
// why; the link of a ClusterQoSPolicy that selects the node is the
// oldest's.
func TestMapInvalid(t *testing.T) {
	r := 0.5
	v := View{
		Pods: []*corev1.Pod{testPod("app", "call", uidCall, nil, nil)},
		Node: map[string]string{"zone": "a"}, NodeKnown: true,
		Policies: []*Policy{
			qosPolicy("app", "bad", 0, PolicySpec{MinBW: "lots"}),
			clusterPolicy("link-new", 2, PolicySpec{Link: &LinkSpec{EgressRate: "1gbit"}}),
			clusterPolicy("link-old", 1, PolicySpec{Link: &LinkSpec{EgressRate: "50mbit", Reservable: &r}}),
			clusterPolicy("link-b", 0, PolicySpec{NodeSelector: selector("zone", "b"), Link: &LinkSpec{EgressRate: "10mbit"}}),
		},
	}
	m := Map(v)
	if err := m.Invalid["QoSPolicy app/bad"]; err == nil || !strings.Contains(err.Error(), "minbw") {
		t.Errorf("invalid policy: %v", err)
	}
	if len(m.Pods) != 0 {
		t.Errorf("pods %+v from an invalid policy", m.Pods)
	}
	if m.Link == nil || m.Link.EgressRate != "50mbit" || m.LinkFrom != "ClusterQoSPolicy link-old" {
		t.Errorf("link %+v from %q; want link-old's", m.Link, m.LinkFrom)
	}
}
