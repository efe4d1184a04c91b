package integration

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/hostqos/hostqos/api"
	deploy "github.com/hostqos/hostqos/deploy/kubernetes"
	"github.com/hostqos/hostqos/internal/containers/containertest"
	"github.com/hostqos/hostqos/internal/kubetest"
	"github.com/hostqos/hostqos/internal/testutil"
	"github.com/hostqos/hostqos/internal/testutil/daemontest"
)

// TestKubernetesPolicies: hostqosd as the node agent of a real control
// plane, with only the deploy manifests' RBAC, two Podman containers
// under their pods' kubelet cgroups playing pods call and flood:
//   - a ClusterQoSPolicy selecting the node by its labels sets its link
//     (20 Mbit/s, half of it reservable) over the config file's 50;
//   - a QoSPolicy selecting app=call puts the pod's UDP (a flow selector)
//     in class voice marked EF: on the wire at the receiver, and nearly
//     all of it arrives while pod flood sends 40 Mbit/s of UDP through
//     the 20 Mbit/s link;
//   - a QoSPolicy asking 15 Mbit/s guaranteed for pod flood (10
//     reservable) is refused: a False condition and an Event naming the
//     numbers, and the pod keeps its annotation's ceiling, nothing of the
//     policy;
//   - the API server gone for 10 s (hostqosd restarted meanwhile) changes
//     nothing; the policy edited after it returns applies;
//   - pod call deleted leaves no rule.
func TestKubernetesPolicies(t *testing.T) {
	containertest.NeedRuntimes(t, "podman")
	image := containertest.Image(t, "podman", hostqosBin())
	cp := kubetest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cp.Apply(t, deploy.CRDs)
	cp.Apply(t, deploy.RBAC)
	cp.Namespace(t, "app")
	kubeconfig := cp.WriteKubeconfig(t, cp.ServiceAccountConfig(t, deploy.Namespace, deploy.ServiceAccount))
	const node = "hq-node-2"
	if _, err := cp.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node, Labels: map[string]string{"hostqos.io/edge": "true"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	cs := testutil.NewContainers(t, 2)
	e := &env{t: t, client: cs.Host.Node, server: cs.Server.Node}
	e.d = daemontest.New(t, e.client, binDir)
	e.dir, e.cli = e.d.Dir, e.d.Client
	forwardInto(t, e.client, cp.Server)
	e.writeConfig(fmt.Sprintf("[kubernetes]\nkubeconfig = %q\nnode_name = %q\n\n[[link]]\nname = %q\negress_rate = \"50mbit\"\n", kubeconfig, node, e.iface()))
	e.startDaemon()

	cp.Apply(t, fmt.Sprintf(`
apiVersion: hostqos.io/v1alpha1
kind: ClusterQoSPolicy
metadata: {name: edge-link}
spec:
  nodeSelector: {matchLabels: {hostqos.io/edge: "true"}}
  podSelector: {matchLabels: {none: none}}
  class: bulk
  link: {name: %s, egressRate: 20mbit, reservable: 0.5}
---
apiVersion: hostqos.io/v1alpha1
kind: QoSPolicy
metadata: {name: call, namespace: app}
spec:
  podSelector: {matchLabels: {app: call}}
  class: voice
  dscp: EF
  flows: [{protocol: UDP}]
`, e.iface()))
	eventually(t, 20*time.Second, "the ClusterQoSPolicy's link", func() (bool, string) {
		st := e.status()
		return len(st.Links) == 1 && st.Links[0].EgressRate == 20e6 && st.Links[0].Reservable == 10e6, fmt.Sprintf("%+v", st.Links)
	})

	pods := map[string]*corev1.Pod{}
	for i, name := range []string{"call", "flood"} {
		ann := map[string]string{}
		if name == "flood" {
			ann["kubernetes.io/egress-bandwidth"] = "30M"
		}
		pod, err := cp.Client.CoreV1().Pods("app").Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "app", Labels: map[string]string{"app": name}, Annotations: ann},
			Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: name, Image: "registry.invalid/" + name}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pods[name] = pod
		containertest.RunPodman(t, containertest.Options{Image: image, Name: containertest.Name("hqk8s" + name),
			Netns: "/run/netns/" + cs.Ctrs[i].NetnsName, CgroupParent: "/kubepods/besteffort/pod" + string(pod.UID)})
	}
	const flowRule = "k8s/app/call/call:0"
	ruleShow := func(name string) (api.RuleInfo, error) {
		var ri api.RuleInfo
		err := e.d.CLIJSON(&ri, "rule", "show", name)
		return ri, err
	}
	waitRule := func(name, what string, ok func(api.RuleInfo) bool) {
		t.Helper()
		eventually(t, 20*time.Second, what, func() (bool, string) {
			ri, err := ruleShow(name)
			return err == nil && ok(ri), fmt.Sprintf("rule %s: %+v, %v", name, ri, err)
		})
	}
	waitRule(flowRule, "pod call's UDP rule, selecting its container", func(ri api.RuleInfo) bool {
		return ri.Source == "kubernetes" && ri.Rule.Proto == "udp" && ri.Rule.DSCP == 46 && ri.Rule.Class == "voice" &&
			strings.Contains(strings.Join(ri.Resolved, " "), "podman/")
	})
	waitRule("k8s/app/flood", "pod flood's ceiling", func(ri api.RuleInfo) bool {
		return ri.Rule.MaxBW == 30e6 && strings.Contains(strings.Join(ri.Resolved, " "), "podman/")
	})
	if _, err := ruleShow("k8s/app/call"); err == nil {
		t.Error("pod call has a rule for all its traffic; its policy selects its UDP only")
	}

	// EF on the wire, and priority under the neighbour's flood.
	server := cs.ServerV4.String()
	measured(t, "pod call's UDP beside pod flood's", func(n int) (bool, string) {
		to := fmt.Sprintf("%s:%d", server, 7700+n)
		sink := e.udpSink(to, 10*time.Second)
		flood := cs.Ctrs[1].Command(hostqosBin(), "tool", "udp-send", "--to", fmt.Sprintf("%s:%d", server, 7790), "--rate", "40mbit", "--duration", "6s")
		if err := flood.Start(); err != nil {
			t.Fatal(err)
		}
		defer flood.Wait()
		time.Sleep(500 * time.Millisecond)
		if out, err := cs.Ctrs[0].Command(hostqosBin(), "tool", "udp-send", "--to", to, "--rate", "1mbit", "--duration", "4s").CombinedOutput(); err != nil {
			t.Fatalf("udp-send: %v\n%s", err, out)
		}
		r := waitResult(t, sink, 20*time.Second)
		msg := fmt.Sprintf("pod call's UDP: %d packets, loss %.4f, DSCP %v (first %s)", r.Packets, r.Loss, r.DSCP, r.FirstDSCP)
		t.Log(msg)
		return r.Packets > 0 && r.FirstDSCPValue == 46 && r.DSCP[r.FirstDSCP] == r.Packets && r.Loss <= 0.01, msg + " (want all EF, loss ≤ 1%)"
	})

	// Over the reservable 10 Mbit/s: refused, with the numbers, whole.
	cp.Apply(t, `
apiVersion: hostqos.io/v1alpha1
kind: QoSPolicy
metadata: {name: big, namespace: app}
spec:
  podSelector: {matchLabels: {app: flood}}
  class: voice
  minbw: 15mbit
`)
	qos := cp.Dynamic.Resource(schema.GroupVersionResource{Group: "hostqos.io", Version: "v1alpha1", Resource: "qospolicies"}).Namespace("app")
	eventually(t, 20*time.Second, "QoSPolicy big refused on the node", func() (bool, string) {
		u, err := qos.Get(ctx, "big", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		s, msg := nodeCondition(u, node)
		return s == "False" && strings.Contains(msg, "15mbit") && strings.Contains(msg, "10mbit") && strings.Contains(msg, e.iface()), s + ": " + msg
	})
	eventually(t, 20*time.Second, "an Event on pod flood naming the policy", func() (bool, string) {
		evs, err := cp.Client.EventsV1().Events("app").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, ev := range evs.Items {
			if ev.Regarding.UID == pods["flood"].UID && ev.Reason == "QoSRefused" && strings.Contains(ev.Note, "15mbit") && strings.Contains(ev.Note, "QoSPolicy app/big") {
				t.Logf("event: %s", ev.Note)
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d events", len(evs.Items))
	})
	if ri, err := ruleShow("k8s/app/flood"); err != nil || ri.Rule.MaxBW != 30e6 || ri.Rule.MinBW != 0 || ri.Rule.Class == "voice" {
		t.Errorf("pod flood after the refusal: %+v, %v; want its ceiling and nothing of QoSPolicy big", ri.Rule, err)
	}
	u, err := qos.Get(ctx, "call", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if s, msg := nodeCondition(u, node); s != "True" {
		t.Errorf("QoSPolicy call on the node: %s %q; want Admitted", s, msg)
	}

	// The API server gone for 10 s: nothing changes, across a restart of
	// hostqosd; the policy edited when it is back applies.
	cp.Stop(t)
	gone := time.Now()
	eventually(t, 20*time.Second, "status says the API server is gone", func() (bool, string) {
		st := e.status()
		return st.Kubernetes != nil && !st.Kubernetes.Connected, fmt.Sprintf("%+v", st.Kubernetes)
	})
	e.killDaemon(syscall.SIGTERM)
	e.startDaemon()
	if ri, err := ruleShow(flowRule); err != nil || ri.Rule.DSCP != 46 {
		t.Errorf("with the API server gone, after a restart: %s is %+v, %v", flowRule, ri.Rule, err)
	}
	if st := e.status(); len(st.Links) != 1 || st.Links[0].EgressRate != 20e6 {
		t.Errorf("with the API server gone, after a restart: links %+v; want the cluster's 20 Mbit/s", st.Links)
	}
	time.Sleep(time.Until(gone.Add(10 * time.Second)))
	cp.Restart(t)
	if _, err := qos.Patch(ctx, "call", types.MergePatchType, []byte(`{"spec":{"dscp":"AF41"}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitRule(flowRule, "the policy edited after the API server returned", func(ri api.RuleInfo) bool { return ri.Rule.DSCP == 34 })

	// Deleted: none of its rules left.
	cp.DeletePod(t, "app", "call")
	eventually(t, 20*time.Second, "pod call's rules gone", func() (bool, string) {
		var list []api.RuleInfo
		e.hostqosJSON(&list, "rule", "list")
		var left []string
		for _, ri := range list {
			if strings.HasPrefix(ri.Rule.Name, "k8s/app/call") {
				left = append(left, ri.Rule.Name)
			}
		}
		return len(left) == 0, fmt.Sprintf("left: %v", left)
	})
}

// nodeCondition is node's Admitted condition in a policy's status.
func nodeCondition(u *unstructured.Unstructured, node string) (status, msg string) {
	nodes, _, _ := unstructured.NestedSlice(u.Object, "status", "nodes")
	for _, n := range nodes {
		m, _ := n.(map[string]any)
		if m["node"] != node {
			continue
		}
		conds, _, _ := unstructured.NestedSlice(m, "conditions")
		for _, c := range conds {
			cm, _ := c.(map[string]any)
			if cm["type"] == "Admitted" {
				s, _ := cm["status"].(string)
				msg, _ := cm["message"].(string)
				return s, msg
			}
		}
	}
	return "", ""
}
