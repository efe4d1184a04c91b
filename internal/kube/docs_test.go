package kube

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/hostqos/hostqos/internal/policy"
)

// TestKubernetesDoc keeps docs/kubernetes.md true: a row for every
// annotation the agent reads, config examples that load with the agent
// on, and a pod example whose annotations map.
func TestKubernetesDoc(t *testing.T) {
	data, err := os.ReadFile("../../docs/kubernetes.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(data)
	for _, a := range Annotations {
		if !strings.Contains(doc, "| `"+a+"` |") {
			t.Errorf("docs/kubernetes.md: no row for annotation %s", a)
		}
	}
	blocks := regexp.MustCompile("(?s)```toml\n(.*?)```").FindAllStringSubmatch(doc, -1)
	if len(blocks) == 0 {
		t.Fatal("docs/kubernetes.md has no toml example")
	}
	for _, b := range blocks {
		p, err := policy.Load([]byte(b[1]), "kubernetes.md")
		if err != nil || !p.Kubernetes.Enabled {
			t.Errorf("docs/kubernetes.md example %q: %v (agent on: %v)", b[1], err, err == nil && p.Kubernetes.Enabled)
		}
	}
	for _, a := range []string{"kubernetes.io/egress-bandwidth: 5M", "hostqos.io/class: interactive"} {
		if !strings.Contains(doc, a) {
			t.Errorf("docs/kubernetes.md: the pod example no longer has %q", a)
		}
	}
	pp, ok := PodPolicyOf(annotated(map[string]string{AnnotationEgress: "5M", AnnotationClass: "interactive"}))
	if !ok || pp.Err != nil || pp.MaxBW != 5e6 || pp.Class != "interactive" {
		t.Errorf("the pod example maps to %+v", pp)
	}
}
