package integration

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/hostqos/hostqos/api"
	deploy "github.com/hostqos/hostqos/deploy/kubernetes"
	"github.com/hostqos/hostqos/internal/containers/containertest"
	"github.com/hostqos/hostqos/internal/kubetest"
	"github.com/hostqos/hostqos/internal/testbed"
)

// forwardInto makes the API server of the test's namespace reachable at
// the same address inside node's (where hostqosd runs): a listener there
// whose connections are relayed to the server. The server's certificate
// names 127.0.0.1, so the agent's kubeconfig is the one a host would use.
func forwardInto(t *testing.T, node *testbed.Node, server string) {
	t.Helper()
	u, err := url.Parse(server)
	if err != nil {
		t.Fatal(err)
	}
	var ln net.Listener
	if err := node.Do(func() (err error) {
		ln, err = net.Listen("tcp", u.Host)
		return err
	}); err != nil {
		t.Fatalf("listen on %s in the daemon's namespace: %v", u.Host, err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				up, err := net.DialTimeout("tcp", u.Host, 2*time.Second) // the API server gone: refused
				if err != nil {
					return
				}
				defer up.Close()
				go func() { _, _ = io.Copy(up, c); up.Close() }()
				_, _ = io.Copy(c, up)
			}()
		}
	}()
}

// TestKubernetesPodAnnotations: hostqosd as the node agent of a real
// control plane (kube-apiserver and etcd), with only the deploy
// manifests' RBAC, and a Podman container under the pod's kubelet cgroup
// playing the pod:
//   - kubernetes.io/egress-bandwidth: 5M holds the pod's TCP upload to
//     5 Mbit/s; changed to 10M, 10 Mbit/s, with nothing restarted;
//   - the pod's rule is listed as k8s/app/web from kubernetes, and a local
//     rule remove is refused;
//   - a hostqos.io/minbw over the link's budget is refused with an Event
//     naming the numbers, and the pod's ceiling stays;
//   - the API server gone for 10 s changes nothing on the node (the pod
//     stays held to its ceiling, and hostqosd restarted meanwhile
//     enforces it); a change made right after it returns applies;
//   - the pod deleted leaves no rule and no HTB leaf.
func TestKubernetesPodAnnotations(t *testing.T) {
	containertest.NeedRuntimes(t, "podman")
	image := containertest.Image(t, "podman", hostqosBin())
	cp := kubetest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cp.Apply(t, deploy.CRDs)
	cp.Apply(t, deploy.RBAC)
	cp.Namespace(t, "app")
	kubeconfig := cp.WriteKubeconfig(t, cp.ServiceAccountConfig(t, deploy.Namespace, deploy.ServiceAccount))

	c := newCtrEnv(t)
	forwardInto(t, c.client, cp.Server)
	const node = "hq-node-1"
	c.writeConfig(fmt.Sprintf("[kubernetes]\nkubeconfig = %q\nnode_name = %q\n\n[[link]]\nname = %q\negress_rate = \"50mbit\"\n", kubeconfig, node, c.iface()))
	c.startDaemon()

	// The pod, bound to the daemon's node; its container under the
	// cgroup kubelet's cgroupfs driver gives a best-effort pod.
	pod, err := cp.Client.CoreV1().Pods("app").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "app", Annotations: map[string]string{"kubernetes.io/egress-bandwidth": "5M"}},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "web", Image: "registry.invalid/web"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	containertest.RunPodman(t, containertest.Options{Image: image, Name: containertest.Name("hqk8s"),
		Netns: "/run/netns/" + c.ctrName, CgroupParent: "/kubepods/besteffort/pod" + string(pod.UID)})
	const rule = "k8s/app/web"
	var showErr error
	ruleShow := func() (api.RuleInfo, bool) {
		var ri api.RuleInfo
		if showErr = c.d.CLIJSON(&ri, "rule", "show", rule); showErr != nil {
			return api.RuleInfo{}, false
		}
		return ri, true
	}
	waitRule := func(what string, ok func(api.RuleInfo) bool) {
		t.Helper()
		eventually(t, 20*time.Second, what, func() (bool, string) {
			ri, found := ruleShow()
			return found && ok(ri), fmt.Sprintf("rule %s: %+v, %v", rule, ri, showErr)
		})
	}
	waitRule("the pod's rule, selecting its container", func(ri api.RuleInfo) bool {
		return ri.Source == "kubernetes" && ri.Rule.MaxBW == 5e6 && strings.Contains(strings.Join(ri.Resolved, " "), "podman/")
	})
	upload := func(rate float64, port int) func(n int) (bool, string) {
		return func(n int) (bool, string) {
			to := serverAddr(c) + ":" + strconv.Itoa(port+n)
			sink := c.tcpSink(to, 30*time.Second, 2)
			c.inCtr(hostqosBin(), "tool", "tcp-send", "--to", to, "--streams", "2", "--duration", "5s")
			r := waitResult(t, sink, 30*time.Second)
			ratio := r.GoodputBps / (rate * tcpPayloadShare)
			msg := fmt.Sprintf("goodput %.3f Mbit/s = %.3f of the pod's %g Mbit/s egress-bandwidth (in TCP payload)", r.GoodputBps/1e6, ratio, rate/1e6)
			t.Log(msg)
			return ratio >= 0.95 && ratio <= 1.01, msg + " (want 0.95–1.01)"
		}
	}
	measured(t, "the pod's upload at 5M", upload(5e6, 7900))

	if out, err := c.hostqosErr("rule", "remove", rule); err == nil || !strings.Contains(out+err.Error(), "annotations") {
		t.Errorf("hostqos rule remove %s: %v\n%s; want a refusal: the cluster owns it", rule, err, out)
	}

	patch := func(annotations string) {
		t.Helper()
		body := fmt.Sprintf(`{"metadata":{"annotations":%s}}`, annotations)
		if _, err := cp.Client.CoreV1().Pods("app").Patch(ctx, "web", types.MergePatchType, []byte(body), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	changed := time.Now()
	patch(`{"kubernetes.io/egress-bandwidth":"10M"}`)
	waitRule("the new annotation applied", func(ri api.RuleInfo) bool { return ri.Rule.MaxBW == 10e6 })
	t.Logf("annotation changed to rule show having it: %v (polled every 100 ms)", time.Since(changed).Round(time.Millisecond))
	measured(t, "the pod's upload at 10M", upload(10e6, 7910))

	// 45 Mbit/s guaranteed on a 50 Mbit/s link (40 reservable), with a
	// ceiling of 50: refused whole, an Event says why, the 10 Mbit/s
	// ceiling stays.
	patch(`{"hostqos.io/minbw":"45mbit","hostqos.io/maxbw":"50mbit"}`)
	var note string
	eventually(t, 20*time.Second, "an Event on the pod", func() (bool, string) {
		evs, err := cp.Client.EventsV1().Events("app").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, e := range evs.Items {
			if e.Regarding.UID == pod.UID && e.Reason == "QoSRefused" {
				note = e.Note
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d events", len(evs.Items))
	})
	t.Logf("event: %s", note)
	if !strings.Contains(note, "45mbit") || !strings.Contains(note, "40mbit") || !strings.Contains(note, c.iface()) {
		t.Errorf("the Event %q does not name the guarantee, the budget and the link", note)
	}
	if ri, _ := ruleShow(); ri.Rule.MaxBW != 10e6 || ri.Rule.MinBW != 0 {
		t.Errorf("after the refusal the pod's rule is %+v; want its 10 Mbit/s ceiling and no guarantee", ri.Rule)
	}

	// The API server gone for 10 s: the node keeps the pod's ceiling
	// (measured while it is gone) and says it is not connected.
	cp.Stop(t)
	gone := time.Now()
	eventually(t, 20*time.Second, "status says the API server is gone", func() (bool, string) {
		st := c.status()
		return st.Kubernetes != nil && !st.Kubernetes.Connected, fmt.Sprintf("%+v", st.Kubernetes)
	})
	measured(t, "the pod's upload with the API server gone", upload(10e6, 7920))
	if ri, ok := ruleShow(); !ok || ri.Rule.MaxBW != 10e6 {
		t.Errorf("with the API server gone the pod's rule is %+v (found %v)", ri.Rule, ok)
	}
	// hostqosd restarted meanwhile enforces the last pods it knew.
	c.killDaemon(syscall.SIGTERM)
	c.startDaemon()
	if ri, ok := ruleShow(); !ok || ri.Rule.MaxBW != 10e6 || ri.Source != "kubernetes" {
		t.Errorf("hostqosd restarted with the API server gone: the pod's rule is %+v (found %v, %v)", ri, ok, showErr)
	}
	if st := c.status(); st.Kubernetes == nil || st.Kubernetes.Connected || !st.Kubernetes.LastSync.IsZero() {
		t.Errorf("hostqosd restarted with the API server gone: status %+v, want not connected, never synced", st.Kubernetes)
	}
	time.Sleep(time.Until(gone.Add(10 * time.Second)))
	cp.Restart(t)
	patch(`{"hostqos.io/minbw":null,"hostqos.io/maxbw":null,"kubernetes.io/egress-bandwidth":"5M"}`)
	waitRule("a change made right after the API server returned", func(ri api.RuleInfo) bool { return ri.Rule.MaxBW == 5e6 })
	eventually(t, 20*time.Second, "status says connected", func() (bool, string) {
		st := c.status()
		return st.Kubernetes != nil && st.Kubernetes.Connected && st.Kubernetes.Pods == 1, fmt.Sprintf("%+v", st.Kubernetes)
	})

	// Deleted: no rule, no leaf.
	leaves := c.classCount()
	cp.DeletePod(t, "app", "web")
	eventually(t, 20*time.Second, "the deleted pod's rule gone", func() (bool, string) {
		_, found := ruleShow()
		return !found && c.classCount() == leaves-1, fmt.Sprintf("rule found %v, %d HTB classes (%d with the pod)", found, c.classCount(), leaves)
	})
}
