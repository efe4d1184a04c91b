package kube

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hostqos/hostqos/internal/engine"
	"github.com/hostqos/hostqos/internal/policy"
)

func annotated(a map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: "web", UID: "11111111-2222-4333-8444-555555555555", Annotations: a},
		Spec:       corev1.PodSpec{NodeName: "n1"},
	}
}

// TestPodPolicyOf: the bandwidth plugin's annotations in its units (a
// quantity of bits per second) and hostqos's own map to the engine's pod
// settings, hostqos's winning; a pod without them, or finished, asks
// nothing; a value that cannot be read refuses the pod naming the
// annotation and the value.
func TestPodPolicyOf(t *testing.T) {
	for _, tc := range []struct {
		a    map[string]string
		want engine.Pod
	}{
		{map[string]string{AnnotationEgress: "5M", AnnotationIngress: "1Gi"}, engine.Pod{MaxBW: 5e6, MaxBWIn: 1 << 30}},
		{map[string]string{AnnotationEgress: "10M", AnnotationMaxBW: "20mbit", AnnotationMinBW: "2.5MB/s"}, engine.Pod{MaxBW: 20e6, MinBW: 20e6}},
		{map[string]string{AnnotationClass: "voice", AnnotationDSCP: "ef", AnnotationMaxBWIn: "500k"}, engine.Pod{Class: "voice", DSCP: 46, MaxBWIn: 500e3}},
		{map[string]string{AnnotationEgress: "100", AnnotationDSCP: "10"}, engine.Pod{MaxBW: 100, DSCP: 10}},
	} {
		pp, ok := PodPolicyOf(annotated(tc.a))
		want := tc.want
		want.Namespace, want.Name, want.UID = "app", "web", "11111111-2222-4333-8444-555555555555"
		if tc.want.DSCP == 0 {
			want.DSCP = policy.NoDSCP
		}
		if !ok || pp.Err != nil || pp.Pod != want {
			t.Errorf("%v: %+v, %v; want %+v", tc.a, pp, ok, want)
		}
	}
	if _, ok := PodPolicyOf(annotated(map[string]string{"other.io/x": "1"})); ok {
		t.Error("a pod without QoS annotations asks for QoS")
	}
	done := annotated(map[string]string{AnnotationEgress: "5M"})
	done.Status.Phase = corev1.PodSucceeded
	if _, ok := PodPolicyOf(done); ok {
		t.Error("a finished pod asks for QoS")
	}
	for a, v := range map[string]string{
		AnnotationEgress: "5mbps", AnnotationIngress: "-1M", AnnotationMinBW: "1.5", AnnotationDSCP: "XX",
		AnnotationMaxBW: "20T" + strings.Repeat("0", 70), AnnotationClass: "",
	} {
		pp, ok := PodPolicyOf(annotated(map[string]string{a: v}))
		if !ok || pp.Err == nil || !strings.Contains(pp.Err.Error(), "field "+a) || !strings.Contains(pp.Err.Error(), "pod app/web") {
			t.Errorf("%s: %q: %+v; want a refusal naming the pod and the annotation", a, v, pp)
		}
	}
}
