package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"runtime/debug"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/hostqos/hostqos/api"
	deploy "github.com/hostqos/hostqos/deploy/kubernetes"
	"github.com/hostqos/hostqos/internal/kubetest"
	"github.com/hostqos/hostqos/internal/lab"
	"github.com/hostqos/hostqos/internal/testbed"
)

// benchKube: hostqosd as a Kubernetes node agent on a real control plane
// (internal/kubetest's etcd and kube-apiserver): from a policy change in
// the API server to the rule in force on the node; the daemon's memory
// and CPU with 500 pods and 100 policies; the agent's requests a minute
// at steady state.
func benchKube(e *env, r *Report) error {
	const (
		node     = "bench-node"
		pods     = 500
		policies = 100
	)
	rounds := e.n(20, 5)
	windows := e.n(3, 1)
	w := e.dur(20*time.Second, 2*time.Second)
	settle := e.dur(10*time.Second, time.Second)
	r.Columns = []string{"figure", "value", "target"}
	r.setup("%s", hostLine())

	tb := &benchTB{scratch: e.scratch}
	defer tb.cleanup()
	var cp *kubetest.ControlPlane
	var kubeconfig string
	if err := tb.do(func() {
		cp = kubetest.Start(tb)
		cp.Apply(tb, deploy.CRDs)
		cp.Apply(tb, deploy.RBAC)
		cp.Namespace(tb, "app")
		kubeconfig = cp.WriteKubeconfig(tb, cp.ServiceAccountConfig(tb, deploy.Namespace, deploy.ServiceAccount))
	}); err != nil {
		return fmt.Errorf("start the control plane: %w", err)
	}
	ctx, cancel := context.WithTimeout(e.ctx, 15*time.Minute)
	defer cancel()
	if _, err := cp.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create node %s: %w", node, err)
	}
	tbed, err := e.pair("benchkube", "host", "peer")
	if err != nil {
		return err
	}
	defer tbed.Close()
	host := tbed.Node("host")
	stop, err := forwardLoopback(host, cp.Server)
	if err != nil {
		return err
	}
	defer stop()
	cfg := fmt.Sprintf("[kubernetes]\nkubeconfig = %q\nnode_name = %q\n\n[[link]]\nname = %q\negress_rate = \"1gbit\"\n", kubeconfig, node, host.Iface("peer"))
	d, err := e.daemon(host, cfg)
	if err != nil {
		return err
	}
	defer d.Stop()
	pid := d.PID()
	r.setup("control plane: etcd and kube-apiserver %s (scripts/kube-apiserver.sh) on loopback, token auth and RBAC; the real hostqosd in a namespace of its own, as node %s, with a token of the manifests' ServiceAccount (deploy/kubernetes/rbac.yaml) and one managed link at 1gbit; pods are API objects bound to the node (no kubelet, no containers: their rules match nothing, as a pod's do before its containers start)", kubetest.Version, node)
	if err := waitAgent(ctx, d, func(k *api.KubernetesStatus) bool { return k.Connected && !k.LastSync.IsZero() }); err != nil {
		return err
	}

	// The latency of a policy change.
	if _, err := cp.Client.CoreV1().Pods("app").Create(ctx, benchPod(node, "lat", "lat"), metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create pod app/lat: %w", err)
	}
	if err := tb.do(func() {
		cp.Apply(tb, "apiVersion: hostqos.io/v1alpha1\nkind: QoSPolicy\nmetadata: {name: lat, namespace: app}\nspec:\n  podSelector: {matchLabels: {group: lat}}\n  dscp: AF41\n")
	}); err != nil {
		return err
	}
	if _, err := waitRuleDSCP(ctx, d, "k8s/app/lat", 34); err != nil {
		return err
	}
	qos := cp.Dynamic.Resource(schema.GroupVersionResource{Group: "hostqos.io", Version: "v1alpha1", Resource: "qospolicies"}).Namespace("app")
	var lat []float64
	for i := 0; i < rounds; i++ {
		dscp, name := 26, "AF31"
		if i%2 == 1 {
			dscp, name = 34, "AF41"
		}
		t0 := time.Now()
		if _, err := qos.Patch(ctx, "lat", types.MergePatchType, []byte(fmt.Sprintf(`{"spec":{"dscp":%q}}`, name)), metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("patch QoSPolicy app/lat: %w", err)
		}
		if _, err := waitRuleDSCP(ctx, d, "k8s/app/lat", dscp); err != nil {
			return err
		}
		lat = append(lat, ms(time.Since(t0)))
	}
	p50 := percentile(lat, 50)
	r.setup("policy change → enforcement: %d merge patches of a QoSPolicy's dscp (AF31 ↔ AF41) selecting one pod, timed from before the patch to the daemon's API showing the pod's rule with the new DSCP (polled every 5 ms; the rule is in force in the datapath when the daemon shows it); the agent coalesces changes for 100 ms", rounds)
	r.row("policy change → rule in force on the node, p50", fmt.Sprintf("%.0f ms", p50), "≤ 500 ms "+mark(p50 <= 500))
	r.row("policy change → rule in force on the node, p90 (max)", fmt.Sprintf("%.0f ms (%.0f ms)", percentile(lat, 90), percentile(lat, 100)), "—")
	r.metric("change_ms_p50", p50)
	r.metric("change_ms_p90", percentile(lat, 90))

	// Memory and CPU: baseline with one pod, then 500 pods and 100
	// policies.
	if _, err := waitQuiet(ctx, d, settle); err != nil {
		return err
	}
	rss0, err := procRSS(pid)
	if err != nil {
		return err
	}
	base, err := cpuWindows(e, pid, windows, w, nil)
	if err != nil {
		return err
	}
	for k := 0; k < policies; k++ {
		doc := fmt.Sprintf("apiVersion: hostqos.io/v1alpha1\nkind: QoSPolicy\nmetadata: {name: g%d, namespace: app}\nspec:\n  podSelector: {matchLabels: {group: g%d}}\n  dscp: %d\n  maxbw: %dmbit\n", k, k, k%64, 1+k)
		if err := tb.do(func() { cp.Apply(tb, doc) }); err != nil {
			return err
		}
	}
	t0 := time.Now()
	for i := 0; i < pods; i++ {
		name := fmt.Sprintf("p%03d", i)
		if _, err := cp.Client.CoreV1().Pods("app").Create(ctx, benchPod(node, name, fmt.Sprintf("g%d", i%policies)), metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create pod app/%s: %w", name, err)
		}
	}
	made := time.Since(t0)
	if err := waitAgent(ctx, d, func(k *api.KubernetesStatus) bool {
		return k.Pods == pods+1 && k.Refused == 0 && k.Policies == policies+1
	}); err != nil {
		return err
	}
	synced := time.Since(t0)
	quietAfter, err := waitQuiet(ctx, d, settle)
	if err != nil {
		return err
	}
	st0, err := d.Status()
	if err != nil || st0.Kubernetes == nil {
		return fmt.Errorf("read the daemon's status: %w", err)
	}
	t1 := time.Now()
	busy, err := cpuWindows(e, pid, windows, w, nil)
	if err != nil {
		return err
	}
	st1, err := d.Status()
	if err != nil || st1.Kubernetes == nil {
		return fmt.Errorf("read the daemon's status: %w", err)
	}
	perMin := float64(st1.Kubernetes.Requests-st0.Kubernetes.Requests) / time.Since(t1).Minutes()
	rss1, err := procRSS(pid)
	if err != nil {
		return err
	}
	growth := float64(rss1-rss0) / (1 << 20)
	r.setup("memory and CPU: VmRSS of hostqosd once its agent sent no request for %v, with one pod and one policy, then after %d more pods (each bound to the node, in one of %d groups) and %d QoSPolicies (one per group: a dscp and a maxbw) were made (%.1f s to create the pods; the daemon had all %d pods with QoS %.1f s after the first, and its agent had sent its last request (the policies' status entries, written at most 5 a second) %.1f s after the first); steady state: after the agent sent no request for %v; utime+stime of hostqosd over %d windows of %v each, and the agent's requests to the API server (its status's counter) over those windows", settle, pods, policies, policies, made.Seconds(), pods+1, synced.Seconds(), quietAfter.Sub(t0).Seconds(), settle, windows, w)
	r.row("daemon RSS growth, 1 → 501 pods and 2 → 101 policies", fmt.Sprintf("%+.1f MB (%.1f → %.1f MB)", growth, float64(rss0)/(1<<20), float64(rss1)/(1<<20)), "≤ 100 MB "+mark(growth <= 100))
	r.row("daemon CPU at steady state, 1 pod (% of a core, median)", f2(median(base)), "—")
	r.row("daemon CPU at steady state, 501 pods, 101 policies (% of a core, median)", f2(median(busy)), "≤ 2 % "+mark(median(busy) <= 2))
	r.row("agent's requests to the API server at steady state (per minute)", f1(perMin), "—")
	r.note("the requests a minute are the agent's own count (every request its client sends, a watch being one) over the windows; at steady state nothing changes and the agent writes nothing (the HostQoSNode's lastSync is refreshed, at most once a minute, only when the agent syncs), so what remains are the renewals of its 5 watches (pods, namespaces, node and the two policy kinds), which client-go ends after 5–10 minutes each: about 0.5–1 a minute over a long run, and none in windows this short when no watch happens to end")
	r.metric("rss_growth_mb", growth)
	r.metric("cpu_pct_median_base", median(base))
	r.metric("cpu_pct_median_500", median(busy))
	r.metric("requests_per_min", perMin)
	r.metric("sync_500_s", synced.Seconds())
	return nil
}

// benchPod is pod app/name bound to node, labelled group.
func benchPod(node, name, group string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "app", Labels: map[string]string{"group": group}},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/c"}}},
	}
}

// waitAgent waits until the daemon's agent status satisfies ok.
func waitAgent(ctx context.Context, d *lab.Daemon, ok func(*api.KubernetesStatus) bool) error {
	var last string
	for deadline := time.Now().Add(3 * time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if err := ctx.Err(); err != nil {
			return err
		}
		st, err := d.Status()
		if err == nil && st.Kubernetes != nil && ok(st.Kubernetes) {
			return nil
		}
		last = fmt.Sprintf("%+v %v", st.Kubernetes, err)
	}
	return fmt.Errorf("the node agent did not get there within 3 minutes: %s", last)
}

// waitQuiet waits until the agent has sent no request to the API server
// for quiet; it returns when it sent its last.
func waitQuiet(ctx context.Context, d *lab.Daemon, quiet time.Duration) (time.Time, error) {
	var n uint64
	last := time.Now()
	for deadline := time.Now().Add(5 * time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if err := ctx.Err(); err != nil {
			return last, err
		}
		st, err := d.Status()
		if err != nil || st.Kubernetes == nil {
			return last, fmt.Errorf("read the daemon's status: %w", err)
		}
		if st.Kubernetes.Requests != n {
			n, last = st.Kubernetes.Requests, time.Now()
			continue
		}
		if time.Since(last) >= quiet {
			return last, nil
		}
	}
	return last, fmt.Errorf("the node agent did not stop sending requests within 5 minutes (%d sent)", n)
}

// waitRuleDSCP polls rule name every 5 ms until it has dscp; it returns
// how long that took.
func waitRuleDSCP(ctx context.Context, d *lab.Daemon, name string, dscp int) (time.Duration, error) {
	t0 := time.Now()
	var last string
	for time.Since(t0) < time.Minute {
		qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		ri, err := d.Client.Rules().Get(qctx, name)
		cancel()
		if err == nil && int(ri.Rule.DSCP) == dscp {
			return time.Since(t0), nil
		}
		last = fmt.Sprintf("%+v %v", ri.Rule, err)
		time.Sleep(5 * time.Millisecond)
	}
	return 0, fmt.Errorf("rule %s did not get DSCP %d within a minute: %s", name, dscp, last)
}

// forwardLoopback makes the API server at server (https://127.0.0.1:PORT
// of the bench's own namespace) reachable at the same address inside
// node, where hostqosd runs.
func forwardLoopback(node *testbed.Node, server string) (func(), error) {
	u, err := url.Parse(server)
	if err != nil {
		return nil, fmt.Errorf("read API server URL %s: %w", server, err)
	}
	var ln net.Listener
	if err := node.Do(func() (err error) {
		ln, err = net.Listen("tcp", u.Host)
		return err
	}); err != nil {
		return nil, fmt.Errorf("listen on %s in the daemon's namespace: %w", u.Host, err)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				up, err := net.DialTimeout("tcp", u.Host, 2*time.Second)
				if err != nil {
					return
				}
				defer up.Close()
				go func() { _, _ = io.Copy(up, c); up.Close() }()
				_, _ = io.Copy(c, up)
			}()
		}
	}()
	return func() { ln.Close() }, nil
}

// benchTB lets the bench use internal/kubetest, written for tests: the
// methods kubetest calls, a failure ending the call that do runs. The
// embedded testing.TB is nil: kubetest calls nothing else.
type benchTB struct {
	testing.TB
	scratch  string
	cleanups []func()
	failed   bool
}

// benchFailure is a Fatal or Skip of kubetest, caught by do.
type benchFailure struct{ msg string }

func (b *benchTB) Helper()                   {}
func (b *benchTB) Logf(string, ...any)       {}
func (b *benchTB) Failed() bool              { return b.failed }
func (b *benchTB) Cleanup(f func())          { b.cleanups = append(b.cleanups, f) }
func (b *benchTB) Fatal(args ...any)         { b.fail(fmt.Sprint(args...)) }
func (b *benchTB) Fatalf(f string, a ...any) { b.fail(fmt.Sprintf(f, a...)) }
func (b *benchTB) Skip(args ...any)          { b.fail("skipped: " + fmt.Sprint(args...)) }

func (b *benchTB) fail(msg string) {
	b.failed = true
	panic(benchFailure{msg})
}

func (b *benchTB) TempDir() string {
	dir, err := os.MkdirTemp(b.scratch, "kubetest-")
	if err != nil {
		b.fail(fmt.Sprintf("make a directory for the control plane: %v", err))
	}
	return dir
}

// do runs f, returning a failure of kubetest as an error.
func (b *benchTB) do(f func()) (err error) {
	defer func() {
		if p := recover(); p != nil {
			bf, ok := p.(benchFailure)
			if !ok {
				panic(fmt.Sprintf("%v\n%s", p, debug.Stack()))
			}
			err = errors.New(bf.msg)
		}
	}()
	f()
	return nil
}

// cleanup runs the cleanups kubetest registered, last first.
func (b *benchTB) cleanup() {
	for i := len(b.cleanups) - 1; i >= 0; i-- {
		b.cleanups[i]()
	}
}
