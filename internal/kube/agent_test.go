package kube_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/hostqos/hostqos/api"
	deploy "github.com/hostqos/hostqos/deploy/kubernetes"
	"github.com/hostqos/hostqos/internal/engine"
	"github.com/hostqos/hostqos/internal/kube"
	"github.com/hostqos/hostqos/internal/kubetest"
	"github.com/hostqos/hostqos/internal/policy"
)

// recorder is a Target that keeps every list it was given and refuses the
// pods whose minbw is above 100 Mbit/s, as the engine does when a
// guarantee does not fit.
type recorder struct {
	mu    sync.Mutex
	calls [][]engine.PodPolicy
	// The link's settings and the patches it was given.
	link    policy.Link
	patches []string
}

func (r *recorder) SetPods(pods []engine.PodPolicy) (map[string]error, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, pods)
	refused := map[string]error{}
	for _, p := range pods {
		if p.MinBW > 100e6 {
			refused[p.Key()] = &policy.FieldError{Source: engine.PodSource, Object: "pod " + p.Key(), Field: "minbw", Value: p.MinBW.String(),
				Reason: fmt.Sprintf("the guarantees on node link eth0 would be %s, over its reservable capacity 80mbit", p.MinBW)}
		}
	}
	return refused, nil
}

// Links are the target's one link, as the engine would list it.
func (r *recorder) Links() []api.LinkStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	l := r.link
	l.Name = "eth0"
	if l.EgressRate == 0 {
		l.EgressRate = 100e6
	}
	return []api.LinkStatus{{Link: l, Reservable: 80e6, Reserved: 2e6,
		Guarantees: []policy.Contribution{{Kind: "pod", Name: "app/flood", Rate: 2e6}}}}
}

// PatchLink takes the link's settings as the engine does.
func (r *recorder) PatchLink(_ context.Context, _ engine.Caller, name string, patch []byte, _ engine.LinkChange) (policy.Link, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if name != "eth0" {
		return policy.Link{}, fmt.Errorf("no link %s", name)
	}
	if err := json.Unmarshal(patch, &r.link); err != nil {
		return policy.Link{}, err
	}
	r.patches = append(r.patches, string(patch))
	return r.link, nil
}

func (r *recorder) linkPatches() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.patches)
}

// last is the last list, by NAMESPACE/NAME, and how many lists came.
func (r *recorder) last() (map[string]engine.PodPolicy, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]engine.PodPolicy{}
	if len(r.calls) == 0 {
		return out, 0
	}
	for _, p := range r.calls[len(r.calls)-1] {
		out[p.Key()] = p
	}
	return out, len(r.calls)
}

func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ok, msg := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s", what, msg)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestAgentOnAPIServer runs the agent against a real API server with the
// deploy manifests' ServiceAccount and nothing more: it hands the target
// its node's annotated pods only, follows an annotation change, writes an
// Event naming the numbers on a pod the target refuses, keeps the last
// list while the API server is gone (and says so), lists anew when it is
// back, and drops a deleted pod.
func TestAgentOnAPIServer(t *testing.T) {
	cp := kubetest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cp.Apply(t, deploy.CRDs)
	cp.Apply(t, deploy.RBAC)
	cp.Namespace(t, "app")
	pod := func(name, node string, a map[string]string) *corev1.Pod {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "app", Annotations: a},
			Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/c"}}},
		}
		p, err := cp.Client.CoreV1().Pods("app").Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	web := pod("web", "n1", map[string]string{kube.AnnotationEgress: "5M"})
	pod("other-node", "n2", map[string]string{kube.AnnotationEgress: "5M"})
	pod("plain", "n1", nil)

	rec := &recorder{}
	a, err := kube.New(kube.Config{NodeName: "n1", REST: cp.ServiceAccountConfig(t, deploy.Namespace, deploy.ServiceAccount),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, rec)
	if err != nil {
		t.Fatal(err)
	}
	actx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); a.Run(actx) }()
	defer func() { stop(); <-done }()

	eventually(t, "the node's annotated pod synced", func() (bool, string) {
		got, _ := rec.last()
		return len(got) == 1 && got["app/web"].MaxBW == 5e6 && got["app/web"].UID == string(web.UID), fmt.Sprintf("%+v", got)
	})
	if st := a.Status(); !st.Connected || st.Node != "n1" || st.Pods != 1 || st.LastSync.IsZero() {
		t.Errorf("status %+v", st)
	}

	// An annotation changed: the next list has it.
	patch := func(name, ann string) {
		t.Helper()
		body := fmt.Sprintf(`{"metadata":{"annotations":%s}}`, ann)
		if _, err := cp.Client.CoreV1().Pods("app").Patch(ctx, name, types.MergePatchType, []byte(body), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// Ten changes, one at a time: how long from the API server's answer
	// to the patch until the target has it (logged, not asserted).
	var took []time.Duration
	for i := 1; i <= 10; i++ {
		start := time.Now()
		patch("web", fmt.Sprintf(`{"kubernetes.io/egress-bandwidth":"%dM"}`, i))
		eventually(t, "the changed annotation synced", func() (bool, string) {
			got, _ := rec.last()
			return got["app/web"].MaxBW == policy.Rate(i)*1e6, fmt.Sprintf("%+v", got)
		})
		took = append(took, time.Since(start))
	}
	slices.Sort(took)
	t.Logf("annotation change to the engine's SetPods: median %v, max %v of %d (polled every 5 ms; 100 ms of it is the coalescing)", took[len(took)/2], took[len(took)-1], len(took))

	// Refused: an Event on the pod, written with the agent's own token,
	// names the numbers; once per reason.
	patch("web", `{"hostqos.io/minbw":"900mbit"}`)
	var note string
	eventually(t, "an Event on the refused pod", func() (bool, string) {
		evs, err := cp.Client.EventsV1().Events("app").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, e := range evs.Items {
			if e.Regarding.Name == "web" && e.Regarding.UID == web.UID && e.Type == corev1.EventTypeWarning && e.Reason == "QoSRefused" {
				note = e.Note
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d events", len(evs.Items))
	})
	if !strings.Contains(note, "900mbit") || !strings.Contains(note, "80mbit") || !strings.Contains(note, "node n1") {
		t.Errorf("the Event's note %q does not name the numbers and the node", note)
	}
	if st := a.Status(); st.Refused != 1 || st.Pods != 1 {
		t.Errorf("status after a refusal %+v", st)
	}

	// The API server away: the target hears nothing (no empty list); the
	// status says so. Back: a change made then applies.
	_, before := rec.last()
	cp.Stop(t)
	eventually(t, "the agent sees the API server gone", func() (bool, string) {
		st := a.Status()
		return !st.Connected && st.Error != "", fmt.Sprintf("%+v", st)
	})
	if got, n := rec.last(); n != before || len(got) != 1 {
		t.Errorf("the target was called %d times while the API server was gone; last list %+v", n-before, got)
	}
	cp.Restart(t)
	patch("web", `{"hostqos.io/minbw":null,"kubernetes.io/egress-bandwidth":"20M"}`)
	eventually(t, "a change made after the API server returned applies", func() (bool, string) {
		got, _ := rec.last()
		return got["app/web"].MaxBW == 20e6 && got["app/web"].MinBW == 0, fmt.Sprintf("%+v", got)
	})
	eventually(t, "connected again", func() (bool, string) {
		st := a.Status()
		return st.Connected, fmt.Sprintf("%+v", st)
	})

	// Deleted: the pod leaves the list.
	cp.DeletePod(t, "app", "web")
	eventually(t, "the deleted pod gone from the list", func() (bool, string) {
		got, _ := rec.last()
		return len(got) == 0, fmt.Sprintf("%+v", got)
	})
}
