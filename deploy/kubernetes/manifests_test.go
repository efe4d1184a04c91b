package kubernetes_test

import (
	"context"
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	deploy "github.com/hostqos/hostqos/deploy/kubernetes"
	"github.com/hostqos/hostqos/internal/kubetest"
	"github.com/hostqos/hostqos/internal/policy"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"
)

var (
	qosPolicies        = schema.GroupVersionResource{Group: "hostqos.io", Version: "v1alpha1", Resource: "qospolicies"}
	clusterQoSPolicies = schema.GroupVersionResource{Group: "hostqos.io", Version: "v1alpha1", Resource: "clusterqospolicies"}
	hostQoSNodes       = schema.GroupVersionResource{Group: "hostqos.io", Version: "v1alpha1", Resource: "hostqosnodes"}
)

// podSettings are the spec fields a QoSPolicy and a ClusterQoSPolicy share.
var podSettings = []string{"class", "dscp", "minbw", "maxbw", "maxbwIn", "flows"}

// TestPodSettingsAlike: QoSPolicy and ClusterQoSPolicy validate the pod
// settings they share with the same schema (the files are edited by hand).
func TestPodSettingsAlike(t *testing.T) {
	specOf := func(crd string) map[string]any {
		t.Helper()
		for doc := range strings.SplitSeq(deploy.CRDs, "\n---\n") {
			var m map[string]any
			if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
				t.Fatal(err)
			}
			obj := unstructured.Unstructured{Object: m}
			if obj.GetName() != crd {
				continue
			}
			versions, _, _ := unstructured.NestedSlice(m, "spec", "versions")
			props, _, _ := unstructured.NestedMap(versions[0].(map[string]any), "schema", "openAPIV3Schema", "properties", "spec", "properties")
			return props
		}
		t.Fatalf("no CRD %s in deploy.CRDs", crd)
		return nil
	}
	ns, cluster := specOf("qospolicies.hostqos.io"), specOf("clusterqospolicies.hostqos.io")
	for _, f := range podSettings {
		if ns[f] == nil {
			t.Errorf("QoSPolicy has no spec.%s", f)
		}
		if !reflect.DeepEqual(ns[f], cluster[f]) {
			t.Errorf("spec.%s differs between QoSPolicy and ClusterQoSPolicy", f)
		}
	}
}

// TestRatePattern: every rate the CRDs accept is one hostqos's own rate
// parser takes (so a node never refuses what the API server stored), or
// the bandwidth annotations' spelling (a bare k, M, G or T: bits per
// second), which the parser refuses as ambiguous. The CRDs are stricter
// in form ("5 mbit", ".5mbit" are refused); the range (at most 10tbit) is
// left to the node, which refuses a larger rate in the policy's status.
func TestRatePattern(t *testing.T) {
	var m map[string]any
	if err := yaml.Unmarshal([]byte(strings.SplitN(deploy.CRDs, "\n---\n", 2)[0]), &m); err != nil {
		t.Fatal(err)
	}
	versions, _, _ := unstructured.NestedSlice(m, "spec", "versions")
	pattern, _, _ := unstructured.NestedString(versions[0].(map[string]any), "schema", "openAPIV3Schema", "properties", "spec", "properties", "minbw", "pattern")
	re, err := regexp.Compile(pattern)
	if err != nil {
		t.Fatalf("spec.minbw's pattern %q: %v", pattern, err)
	}
	annotation := regexp.MustCompile(`^[0-9.]+[kMGT]$`)
	for _, s := range []string{"0", "5mbit", "5Mbit", "5mbit/s", "1.5gbit", "128kbit", "500bit", "10tbit", "625kB/s", "2.5MB/s", "1GB/s", "5M", "100k", "1G", "1.5M"} {
		if !re.MatchString(s) {
			t.Errorf("rate %q: the CRDs refuse it", s)
		}
		if _, err := policy.ParseRate(s); err != nil && !annotation.MatchString(s) {
			t.Errorf("rate %q: the CRDs take it, hostqos refuses it: %v", s, err)
		}
	}
	for _, s := range []string{"", " 5mbit", "5 mbit", "5", "100", "-1mbit", "5mbps", "5Mbps", "5Mb/s", "5mb", "5MB", "5m", "fast", "5mbit5", "1e6bit", "5Mi", "0x10mbit", ".5mbit"} {
		if re.MatchString(s) {
			t.Errorf("rate %q: the CRDs take it", s)
		}
	}
}

const validPolicies = `
apiVersion: hostqos.io/v1alpha1
kind: QoSPolicy
metadata: {name: call, namespace: app}
spec:
  podSelector: {matchLabels: {app: call}}
  class: voice
  dscp: EF
  minbw: 5M
  maxbw: 20mbit
  maxbwIn: 2.5MB/s
  flows:
  - {remoteCIDR: 198.18.0.0/15, protocol: UDP, ports: [{port: 5060}, {port: 10000, endPort: 20000}]}
  - {remoteCIDR: "2001:db8::/32"}
---
apiVersion: hostqos.io/v1alpha1
kind: QoSPolicy
metadata: {name: bulk, namespace: app}
spec:
  podSelector: {matchExpressions: [{key: tier, operator: In, values: [batch]}]}
  dscp: 8
  maxbw: "0"
---
apiVersion: hostqos.io/v1alpha1
kind: ClusterQoSPolicy
metadata: {name: edge}
spec:
  namespaceSelector: {matchLabels: {team: media}}
  nodeSelector: {matchLabels: {hostqos.io/edge: "true"}}
  class: video
  dscp: af41
  link: {name: eth0, egressRate: 1gbit, ingressRate: auto, reservable: 0.8}
---
apiVersion: hostqos.io/v1alpha1
kind: ClusterQoSPolicy
metadata: {name: default-route}
spec:
  link: {egressRate: auto, ingressRate: 500mbit, reservable: 1}
---
apiVersion: hostqos.io/v1alpha1
kind: HostQoSNode
metadata: {name: n1}
`

// TestManifestsOnAPIServer applies deploy/kubernetes to a real API
// server: the CRDs, RBAC and DaemonSet are accepted; valid policies are
// stored; invalid ones are refused by the server's validation with the
// field named; and the agent's ServiceAccount can do what the agent needs
// (list its node's pods, patch policy status, write events and its
// HostQoSNode) and nothing more.
func TestManifestsOnAPIServer(t *testing.T) {
	cp := kubetest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cp.Apply(t, deploy.CRDs)
	cp.Apply(t, deploy.RBAC)
	cp.Apply(t, deploy.DaemonSet)
	cp.Namespace(t, "app")
	cp.Namespace(t, "other")
	cp.Apply(t, readmeExample(t))
	cp.Apply(t, validPolicies)

	t.Run("Invalid", func(t *testing.T) {
		for _, tc := range []struct {
			name, spec, want string
		}{
			{"rate with a space", `{podSelector: {}, maxbw: 5 mbit}`, "spec.maxbw"},
			{"ambiguous rate", `{podSelector: {}, minbw: 10mbps}`, "spec.minbw"},
			{"rate without unit", `{podSelector: {}, maxbwIn: "100"}`, "spec.maxbwIn"},
			{"negative rate", `{podSelector: {}, maxbw: -1mbit}`, "spec.maxbw"},
			{"dscp above 63", `{podSelector: {}, dscp: 64}`, "spec.dscp"},
			{"unknown dscp name", `{podSelector: {}, dscp: XX}`, "spec.dscp"},
			{"unknown field", `{podSelector: {}, class: voice, bandwidth: 5M}`, "bandwidth"},
			{"no setting", `{podSelector: {}}`, "at least one of"},
			{"no podSelector", `{class: voice}`, "podSelector"},
			{"bad selector operator", `{podSelector: {matchExpressions: [{key: a, operator: Is}]}, class: voice}`, "operator"},
			{"In without values", `{podSelector: {matchExpressions: [{key: a, operator: In}]}, class: voice}`, "need values"},
			{"class name", `{podSelector: {}, class: Voice!}`, "spec.class"},
			{"bad CIDR", `{podSelector: {}, class: voice, flows: [{remoteCIDR: 10.0.0.0/33}]}`, "remoteCIDR"},
			{"CIDR with host bits", `{podSelector: {}, class: voice, flows: [{remoteCIDR: 10.0.0.1/8}]}`, "without host bits"},
			{"ports without protocol", `{podSelector: {}, class: voice, flows: [{ports: [{port: 53}]}]}`, "need a protocol"},
			{"endPort below port", `{podSelector: {}, class: voice, flows: [{protocol: TCP, ports: [{port: 90, endPort: 80}]}]}`, "endPort"},
			{"port 0", `{podSelector: {}, class: voice, flows: [{protocol: TCP, ports: [{port: 0}]}]}`, "port"},
		} {
			doc := "apiVersion: hostqos.io/v1alpha1\nkind: QoSPolicy\nmetadata: {name: bad, namespace: app}\nspec: " + tc.spec + "\n"
			checkRefused(t, cp, cp.Dynamic, tc.name, doc, tc.want)
		}
		for _, tc := range []struct {
			name, spec, want string
		}{
			{"link rate", `{link: {egressRate: automatic}}`, "spec.link.egressRate"},
			{"reservable above 1", `{link: {reservable: 1.5}}`, "spec.link.reservable"},
			{"interface name", `{link: {name: this-name-is-too-long0}}`, "spec.link.name"},
			{"unknown link field", `{link: {mtu: 1500}}`, "mtu"},
		} {
			doc := "apiVersion: hostqos.io/v1alpha1\nkind: ClusterQoSPolicy\nmetadata: {name: bad}\nspec: " + tc.spec + "\n"
			checkRefused(t, cp, cp.Dynamic, tc.name, doc, tc.want)
		}
		noSpec := "apiVersion: hostqos.io/v1alpha1\nkind: QoSPolicy\nmetadata: {name: bad, namespace: app}\n"
		checkRefused(t, cp, cp.Dynamic, "no spec", noSpec, "spec")
		// Strict field validation refuses an unknown field on create too
		// (what kubectl create sends).
		obj := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "hostqos.io/v1alpha1", "kind": "QoSPolicy",
			"metadata": map[string]any{"name": "bad-create", "namespace": "app"},
			"spec":     map[string]any{"podSelector": map[string]any{}, "class": "voice", "priority": int64(1)},
		}}
		_, err := cp.Dynamic.Resource(qosPolicies).Namespace("app").Create(ctx, obj, metav1.CreateOptions{FieldValidation: "Strict"})
		if !apierrors.IsBadRequest(err) || !strings.Contains(err.Error(), `unknown field "spec.priority"`) {
			t.Errorf("create with an unknown field: got %v, want a refusal naming spec.priority", err)
		}
	})

	t.Run("AgentPermissions", func(t *testing.T) {
		agentCfg := cp.ServiceAccountConfig(t, deploy.Namespace, deploy.ServiceAccount)
		agent := cp.ClientFor(t, agentCfg)
		agentDyn := cp.DynamicFor(t, agentCfg)
		for _, p := range []struct{ ns, name, node string }{{"app", "call", "n1"}, {"other", "db", "n2"}} {
			pod := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: p.name, Namespace: p.ns, Labels: map[string]string{"app": p.name}},
				Spec:       corev1.PodSpec{NodeName: p.node, Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/c"}}},
			}
			if _, err := cp.Client.CoreV1().Pods(p.ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
				t.Fatalf("create pod %s/%s: %v", p.ns, p.name, err)
			}
		}
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{"hostqos.io/edge": "true"}}}
		if _, err := cp.Client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create node n1: %v", err)
		}

		// Allowed: what the agent does.
		pods, err := agent.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=n1"})
		if err != nil {
			t.Fatalf("agent lists its node's pods: %v", err)
		}
		if len(pods.Items) != 1 || pods.Items[0].Name != "call" {
			t.Errorf("agent on n1 lists %d pods, want call alone", len(pods.Items))
		}
		w, err := agent.CoreV1().Pods("").Watch(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=n1"})
		if err != nil {
			t.Errorf("agent watches its node's pods: %v", err)
		} else {
			w.Stop()
		}
		if nodes, err := agent.CoreV1().Nodes().List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=n1"}); err != nil || len(nodes.Items) != 1 {
			t.Errorf("agent reads its node's labels: %v", err)
		}
		if _, err := agent.CoreV1().Namespaces().List(ctx, metav1.ListOptions{}); err != nil {
			t.Errorf("agent lists namespaces (namespaceSelector): %v", err)
		}
		for _, gvr := range []schema.GroupVersionResource{qosPolicies, clusterQoSPolicies} {
			if _, err := agentDyn.Resource(gvr).List(ctx, metav1.ListOptions{}); err != nil {
				t.Errorf("agent lists %s: %v", gvr.Resource, err)
			}
		}
		// Its entry in a policy's status, by server-side apply.
		status := `{"apiVersion":"hostqos.io/v1alpha1","kind":"QoSPolicy","metadata":{"name":"call","namespace":"app"},` +
			`"status":{"nodes":[{"node":"n1","observedGeneration":1,"pods":1,"conditions":[{"type":"Admitted","status":"False",` +
			`"reason":"OverCapacity","message":"guarantees 24mbit exceed reservable 15.2mbit on node n1 link eth0",` +
			`"lastTransitionTime":"2026-01-02T03:04:05Z","observedGeneration":1}]}]}}`
		_, err = agentDyn.Resource(qosPolicies).Namespace("app").Patch(ctx, "call", types.ApplyPatchType, []byte(status),
			metav1.PatchOptions{FieldManager: "hostqos-n1", Force: new(true)}, "status")
		if err != nil {
			t.Errorf("agent applies its status entry to QoSPolicy app/call: %v", err)
		}
		got, err := cp.Dynamic.Resource(qosPolicies).Namespace("app").Get(ctx, "call", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		nodes, _, _ := unstructured.NestedSlice(got.Object, "status", "nodes")
		if len(nodes) != 1 {
			t.Errorf("QoSPolicy app/call has %d node entries in status, want 1", len(nodes))
		}
		// An event on the pod, both APIs.
		ev := &eventsv1.Event{
			ObjectMeta:          metav1.ObjectMeta{Name: "call.hostqos1", Namespace: "app"},
			EventTime:           metav1.NewMicroTime(time.Now()),
			ReportingController: "hostqos.io/node-agent", ReportingInstance: "hostqos-n1",
			Action: "Apply", Reason: "InvalidAnnotation", Type: corev1.EventTypeWarning,
			Note:      "hostqos.io/dscp: unknown DSCP \"XX\"",
			Regarding: corev1.ObjectReference{Kind: "Pod", Namespace: "app", Name: "call", APIVersion: "v1"},
		}
		if _, err := agent.EventsV1().Events("app").Create(ctx, ev, metav1.CreateOptions{}); err != nil {
			t.Errorf("agent creates an event (events.k8s.io): %v", err)
		}
		coreEv := &corev1.Event{
			ObjectMeta:     metav1.ObjectMeta{Name: "call.hostqos2", Namespace: "app"},
			InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: "app", Name: "call", APIVersion: "v1"},
			Reason:         "InvalidAnnotation", Message: "x", Type: corev1.EventTypeWarning,
			Source: corev1.EventSource{Component: "hostqos", Host: "n1"},
		}
		_, err = agent.CoreV1().Events("app").Create(ctx, coreEv, metav1.CreateOptions{})
		if !apierrors.IsForbidden(err) {
			t.Errorf("agent creates an event in the core group (it writes events.k8s.io's only): got %v, want forbidden", err)
		}
		// Its HostQoSNode: create, then status.
		hqnApply := `{"apiVersion":"hostqos.io/v1alpha1","kind":"HostQoSNode","metadata":{"name":"n2"}}`
		if _, err := agentDyn.Resource(hostQoSNodes).Patch(ctx, "n2", types.ApplyPatchType, []byte(hqnApply),
			metav1.PatchOptions{FieldManager: "hostqos-n2", Force: new(true)}); err != nil {
			t.Errorf("agent makes its HostQoSNode by server-side apply: %v", err)
		}
		nodeStatus := `{"apiVersion":"hostqos.io/v1alpha1","kind":"HostQoSNode","metadata":{"name":"n2"},"status":{` +
			`"agent":{"version":"dev","lastSync":"2026-01-02T03:04:05Z"},` +
			`"links":[{"name":"eth0","defaultRoute":true,"egressRate":"1gbit","ingressRate":"1gbit","reservable":"800mbit","admitted":"24mbit","guarantees":3}]}}`
		if _, err := agentDyn.Resource(hostQoSNodes).Patch(ctx, "n2", types.ApplyPatchType, []byte(nodeStatus),
			metav1.PatchOptions{FieldManager: "hostqos-n2", Force: new(true)}, "status"); err != nil {
			t.Errorf("agent applies its HostQoSNode status: %v", err)
		}

		// Refused: everything else (the real API server's RBAC decides).
		forbidden := func(what string, err error) {
			t.Helper()
			if !apierrors.IsForbidden(err) {
				t.Errorf("agent %s: got %v, want forbidden", what, err)
			}
		}
		forbidden("deletes a pod", agent.CoreV1().Pods("app").Delete(ctx, "call", metav1.DeleteOptions{}))
		_, err = agent.CoreV1().Pods("app").Patch(ctx, "call", types.MergePatchType, []byte(`{"metadata":{"labels":{"x":"y"}}}`), metav1.PatchOptions{})
		forbidden("patches a pod", err)
		_, err = agent.CoreV1().Secrets("app").List(ctx, metav1.ListOptions{})
		forbidden("lists secrets", err)
		_, err = agent.CoreV1().Secrets(deploy.Namespace).Get(ctx, "any", metav1.GetOptions{})
		forbidden("reads a secret", err)
		_, err = agent.CoreV1().ConfigMaps(deploy.Namespace).List(ctx, metav1.ListOptions{})
		forbidden("lists configmaps", err)
		_, err = agent.CoreV1().Nodes().Patch(ctx, "n1", types.MergePatchType, []byte(`{"metadata":{"labels":{"x":"y"}}}`), metav1.PatchOptions{})
		forbidden("patches a node", err)
		_, err = agentDyn.Resource(qosPolicies).Namespace("app").Patch(ctx, "call", types.MergePatchType, []byte(`{"spec":{"class":"bulk"}}`), metav1.PatchOptions{})
		forbidden("patches a policy's spec", err)
		forbidden("deletes a policy", agentDyn.Resource(qosPolicies).Namespace("app").Delete(ctx, "call", metav1.DeleteOptions{}))
		mine := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "hostqos.io/v1alpha1", "kind": "ClusterQoSPolicy",
			"metadata": map[string]any{"name": "mine"}, "spec": map[string]any{"class": "voice"},
		}}
		_, err = agentDyn.Resource(clusterQoSPolicies).Create(ctx, mine, metav1.CreateOptions{})
		forbidden("creates a ClusterQoSPolicy", err)
		_, err = agent.CoreV1().Pods("app").Get(ctx, "call", metav1.GetOptions{})
		forbidden("gets a pod (it lists and watches its node's)", err)
		_, err = agentDyn.Resource(qosPolicies).Namespace("app").Get(ctx, "call", metav1.GetOptions{}, "status")
		forbidden("gets a policy's status", err)
		forbidden("deletes a HostQoSNode", agentDyn.Resource(hostQoSNodes).Delete(ctx, "n1", metav1.DeleteOptions{}))
		_, err = agent.RbacV1().ClusterRoles().List(ctx, metav1.ListOptions{})
		forbidden("lists cluster roles", err)
		err = cp.ApplyAs(agentDyn, "apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: x, namespace: app}\n")
		forbidden("creates a service account", err)
	})
}

// readmeExample is the YAML example of README.md.
func readmeExample(t *testing.T) string {
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "\n```yaml\n")
	example, _, ok2 := strings.Cut(rest, "\n```\n")
	if !ok || !ok2 {
		t.Fatal("README.md has no ```yaml example")
	}
	return example
}

// checkRefused applies doc through client and requires the API server to
// refuse it with a message containing want: a validation error (422), or
// for a field the schema does not have, server-side apply's refusal to
// build the typed object (which the server reports with status 500).
func checkRefused(t *testing.T, cp *kubetest.ControlPlane, client dynamic.Interface, name, doc, want string) {
	t.Helper()
	err := cp.ApplyAs(client, doc)
	switch {
	case err == nil:
		t.Errorf("%s: the API server accepted\n%s", name, doc)
	case !apierrors.IsInvalid(err) && !strings.Contains(err.Error(), "field not declared in schema"):
		t.Errorf("%s: got %v, want a validation error", name, err)
	case !strings.Contains(err.Error(), want):
		t.Errorf("%s: the refusal does not name %q: %v", name, want, err)
	}
}
