package kube_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	deploy "github.com/hostqos/hostqos/deploy/kubernetes"
	"github.com/hostqos/hostqos/internal/kube"
	"github.com/hostqos/hostqos/internal/kubetest"
)

var (
	qosPolicies  = kube.GroupVersion.WithResource("qospolicies")
	hostQoSNodes = kube.GroupVersion.WithResource("hostqosnodes")
)

// startAgent runs an agent of node n1 with the manifests' ServiceAccount
// until the test ends.
func startAgent(t *testing.T, cp *kubetest.ControlPlane, target kube.Target) *kube.Agent {
	t.Helper()
	a, err := kube.New(kube.Config{NodeName: "n1", Version: "test", REST: cp.ServiceAccountConfig(t, deploy.Namespace, deploy.ServiceAccount),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, target)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); a.Run(ctx) }()
	t.Cleanup(func() { stop(); <-done })
	return a
}

// condition is node n1's Admitted condition in a policy's status.
func condition(u *unstructured.Unstructured) (status, msg string, found bool) {
	nodes, _, _ := unstructured.NestedSlice(u.Object, "status", "nodes")
	for _, n := range nodes {
		m, _ := n.(map[string]any)
		if m["node"] != "n1" {
			continue
		}
		conds, _, _ := unstructured.NestedSlice(m, "conditions")
		for _, c := range conds {
			cm, _ := c.(map[string]any)
			if cm["type"] == "Admitted" {
				s, _ := cm["status"].(string)
				msg, _ := cm["message"].(string)
				return s, msg, true
			}
		}
		return "", "", true
	}
	return "", "", false
}

// TestAgentPolicies: the agent, with only the manifests' permissions,
// enforces QoSPolicies and ClusterQoSPolicies on a real API server:
//   - precedence, field by field: the pod's annotation, then the
//     QoSPolicy, then the ClusterQoSPolicy (selected by namespace and
//     node labels);
//   - each policy's status gets node n1's Admitted condition; a policy
//     whose guarantee the node refuses gets False with the numbers and
//     the pod an Event naming the policy;
//   - a policy edited applies; a policy that no longer selects a pod of
//     the node loses the node's entry;
//   - the node's HostQoSNode has its links.
func TestAgentPolicies(t *testing.T) {
	cp := kubetest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cp.Apply(t, deploy.CRDs)
	cp.Apply(t, deploy.RBAC)
	cp.Namespace(t, "app")
	if _, err := cp.Client.CoreV1().Namespaces().Patch(ctx, "app", types.MergePatchType, []byte(`{"metadata":{"labels":{"tier":"gold"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cp.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{"zone": "a"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := func(name string, lbl, ann map[string]string) *corev1.Pod {
		p, err := cp.Client.CoreV1().Pods("app").Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "app", Labels: lbl, Annotations: ann},
			Spec:       corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/c"}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	pod("call", map[string]string{"app": "call"}, map[string]string{kube.AnnotationMaxBW: "3mbit"})
	flood := pod("flood", map[string]string{"app": "flood"}, nil)
	cp.Apply(t, `
apiVersion: hostqos.io/v1alpha1
kind: QoSPolicy
metadata: {name: call, namespace: app}
spec:
  podSelector: {matchLabels: {app: call}}
  class: voice
  dscp: EF
  maxbw: 9mbit
---
apiVersion: hostqos.io/v1alpha1
kind: ClusterQoSPolicy
metadata: {name: gold}
spec:
  namespaceSelector: {matchLabels: {tier: gold}}
  nodeSelector: {matchLabels: {zone: a}}
  minbw: 2M
  maxbwIn: 20mbit
  link: {egressRate: 50mbit, reservable: 0.5}
---
apiVersion: hostqos.io/v1alpha1
kind: ClusterQoSPolicy
metadata: {name: zone-b}
spec:
  nodeSelector: {matchLabels: {zone: b}}
  class: bulk
`)
	rec := &recorder{}
	a := startAgent(t, cp, rec)
	eventually(t, "the policies applied with their precedence", func() (bool, string) {
		got, _ := rec.last()
		c, f := got["app/call"], got["app/flood"]
		return c.Class == "voice" && c.DSCP == 46 && c.MaxBW == 3e6 && c.MinBW == 2e6 && c.MaxBWIn == 20e6 &&
			f.MinBW == 2e6 && f.Class == "", fmt.Sprintf("%+v", got)
	})
	get := func(res string, ns, name string) *unstructured.Unstructured {
		t.Helper()
		r := cp.Dynamic.Resource(kube.GroupVersion.WithResource(res))
		var u *unstructured.Unstructured
		var err error
		if ns != "" {
			u, err = r.Namespace(ns).Get(ctx, name, metav1.GetOptions{})
		} else {
			u, err = r.Get(ctx, name, metav1.GetOptions{})
		}
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
	for _, p := range []struct{ res, ns, name string }{{"qospolicies", "app", "call"}, {"clusterqospolicies", "", "gold"}} {
		eventually(t, p.name+" Admitted on n1", func() (bool, string) {
			s, msg, _ := condition(get(p.res, p.ns, p.name))
			return s == "True" && strings.Contains(msg, "node n1"), s + ": " + msg
		})
	}
	if p := rec.linkPatches(); len(p) != 1 || p[0] != `{"egress_rate":"50mbit","reservable":0.5}` {
		t.Errorf("the node's link was patched with %q; want gold's link once", p)
	}
	if _, msg, _ := condition(get("clusterqospolicies", "", "gold")); !strings.Contains(msg, "link") {
		t.Errorf("gold's condition %q does not say the node's link took its settings", msg)
	}
	if _, _, found := condition(get("clusterqospolicies", "", "zone-b")); found {
		t.Error("node n1 wrote an entry in zone-b's status: it selects no pod of the node")
	}
	eventually(t, "the node's HostQoSNode", func() (bool, string) {
		u, err := cp.Dynamic.Resource(hostQoSNodes).Get(ctx, "n1", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		links, _, _ := unstructured.NestedSlice(u.Object, "status", "links")
		return len(links) == 1 && links[0].(map[string]any)["admitted"] == "2mbit" && links[0].(map[string]any)["reservable"] == "80mbit", fmt.Sprintf("%v", u.Object["status"])
	})

	// A guarantee the node refuses: the policy's condition and an Event
	// on the pod name the numbers and the policy; the pod keeps what it
	// had.
	cp.Apply(t, `
apiVersion: hostqos.io/v1alpha1
kind: QoSPolicy
metadata: {name: big, namespace: app}
spec:
  podSelector: {matchLabels: {app: flood}}
  minbw: 900mbit
`)
	eventually(t, "big refused on n1 with the numbers", func() (bool, string) {
		s, msg, _ := condition(get("qospolicies", "app", "big"))
		return s == "False" && strings.Contains(msg, "900mbit") && strings.Contains(msg, "80mbit") && strings.Contains(msg, "node n1"), s + ": " + msg
	})
	eventually(t, "an Event on the pod naming the policy", func() (bool, string) {
		evs, err := cp.Client.EventsV1().Events("app").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		var notes []string
		for _, e := range evs.Items {
			if e.Regarding.UID == flood.UID && e.Reason == "QoSRefused" {
				if strings.Contains(e.Note, "900mbit") && strings.Contains(e.Note, "QoSPolicy app/big") {
					return true, ""
				}
				notes = append(notes, e.Note)
			}
		}
		return false, strings.Join(notes, "\n")
	})

	// Edited: applies (timed, logged: the benchmark records it).
	var took []time.Duration
	for i, d := range []string{"AF41", "CS5", "EF"} {
		start := time.Now()
		body := fmt.Sprintf(`{"spec":{"dscp":%q}}`, d)
		if _, err := cp.Dynamic.Resource(qosPolicies).Namespace("app").Patch(ctx, "call", types.MergePatchType, []byte(body), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		want := []int{34, 40, 46}[i]
		eventually(t, "the edited policy applied", func() (bool, string) {
			got, _ := rec.last()
			return int(got["app/call"].DSCP) == want, fmt.Sprintf("%+v", got["app/call"])
		})
		took = append(took, time.Since(start))
	}
	slices.Sort(took)
	t.Logf("policy edit to the engine's SetPods: median %v of %d", took[len(took)/2], len(took))

	// No longer selecting a pod of the node: its entry goes.
	if _, err := cp.Dynamic.Resource(qosPolicies).Namespace("app").Patch(ctx, "big", types.MergePatchType,
		[]byte(`{"spec":{"podSelector":{"matchLabels":{"app":"nothing"}}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "big's entry for n1 gone", func() (bool, string) {
		_, msg, found := condition(get("qospolicies", "app", "big"))
		return !found, msg
	})
	eventually(t, "flood back to gold's guarantee", func() (bool, string) {
		got, _ := rec.last()
		return got["app/flood"].MinBW == 2e6, fmt.Sprintf("%+v", got["app/flood"])
	})
	// A link rate of auto: the node's link follows its capacity.
	if _, err := cp.Dynamic.Resource(kube.GroupVersion.WithResource("clusterqospolicies")).Patch(ctx, "gold", types.MergePatchType,
		[]byte(`{"spec":{"link":{"egressRate":"auto"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "gold's link set to auto", func() (bool, string) {
		p := rec.linkPatches()
		return len(p) == 2 && strings.Contains(p[1], `"egress_rate":"auto"`), fmt.Sprintf("%q", p)
	})
	if s, msg, _ := condition(get("clusterqospolicies", "", "gold")); s != "True" {
		t.Errorf("gold with an auto rate: %s: %s; want admitted", s, msg)
	}
	if st := a.Status(); st.PolicyError != "" || st.Policies != 2 || st.Refused != 0 {
		t.Errorf("status %+v; want 2 policies (call, gold), none refused", st)
	}
}

// TestAgentWithoutPolicies: an agent enforces the pods' annotations and
// says why it enforces no policy, first without the CRDs, then with them
// but with a ClusterRole that does not let it list the policies (after a
// grace period); granted the policies, it enforces them.
func TestAgentWithoutPolicies(t *testing.T) {
	defer kube.SetPoliciesProbeInterval(time.Second)()
	defer kube.SetPolicyGrace(time.Second)()
	cp := kubetest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cp.Namespace(t, "app")
	cp.EnsureServiceAccount(t, "app", "limited")
	cp.Apply(t, `
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: limited}
rules:
- {apiGroups: [""], resources: [pods, nodes, namespaces], verbs: [list, watch]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: limited}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: limited}
subjects: [{kind: ServiceAccount, name: limited, namespace: app}]
`)
	if _, err := cp.Client.CoreV1().Pods("app").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "app", Labels: map[string]string{"app": "web"}, Annotations: map[string]string{kube.AnnotationEgress: "5M"}},
		Spec:       corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/c"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	a, err := kube.New(kube.Config{NodeName: "n1", REST: cp.ServiceAccountConfig(t, "app", "limited"),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, rec)
	if err != nil {
		t.Fatal(err)
	}
	actx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); a.Run(actx) }()
	defer func() { stop(); <-done }()
	eventually(t, "the annotation enforced without the CRDs", func() (bool, string) {
		got, _ := rec.last()
		st := a.Status()
		return got["app/web"].MaxBW == 5e6 && st.Connected && strings.Contains(st.PolicyError, "CRDs"), fmt.Sprintf("%+v %+v", got, st)
	})

	// The CRDs installed, the policies not listable.
	cp.Apply(t, deploy.CRDs)
	cp.Apply(t, "apiVersion: hostqos.io/v1alpha1\nkind: QoSPolicy\nmetadata: {name: web, namespace: app}\nspec:\n  podSelector: {matchLabels: {app: web}}\n  dscp: AF41\n")
	eventually(t, "the annotation enforced, the policies not listable", func() (bool, string) {
		got, _ := rec.last()
		st := a.Status()
		return got["app/web"].MaxBW == 5e6 && strings.Contains(st.PolicyError, "cannot list"), fmt.Sprintf("%+v %+v", got, st)
	})

	// Granted: enforced.
	cp.Apply(t, `
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: limited}
rules:
- {apiGroups: [""], resources: [pods, nodes, namespaces], verbs: [list, watch]}
- {apiGroups: [hostqos.io], resources: [qospolicies, clusterqospolicies], verbs: [list, watch]}
`)
	eventually(t, "the policy enforced once the agent may list it", func() (bool, string) {
		got, _ := rec.last()
		st := a.Status()
		return got["app/web"].DSCP == 34 && got["app/web"].MaxBW == 5e6 && st.PolicyError == "", fmt.Sprintf("%+v %+v", got, st)
	})
}
