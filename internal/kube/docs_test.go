package kube

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

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

// TestKubernetesDocPolicies keeps the policy examples of
// docs/kubernetes.md true: each reads strictly into a policy the agent
// can apply, and the flows example makes the rules the text names.
func TestKubernetesDocPolicies(t *testing.T) {
	data, err := os.ReadFile("../../docs/kubernetes.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(data)
	n := 0
	for _, b := range regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllStringSubmatch(doc, -1) {
		var obj struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Metadata   struct {
				Name      string `json:"name"`
				Namespace string `json:"namespace,omitempty"`
			} `json:"metadata"`
			Spec PolicySpec `json:"spec"`
		}
		var probe map[string]any
		if err := yaml.Unmarshal([]byte(b[1]), &probe); err != nil || (probe["kind"] != KindQoSPolicy && probe["kind"] != KindClusterQoSPolicy) {
			continue
		}
		if err := yaml.UnmarshalStrict([]byte(b[1]), &obj); err != nil {
			t.Errorf("docs/kubernetes.md example %q: %v", b[1], err)
			continue
		}
		n++
		p := &Policy{Kind: obj.Kind, Namespace: obj.Metadata.Namespace, Name: obj.Metadata.Name, Spec: obj.Spec}
		c, err := compile(p)
		if err != nil {
			t.Errorf("docs/kubernetes.md example %s: %v", p.ID(), err)
			continue
		}
		if p.Name == "sip" {
			var names []string
			for _, f := range c.flows {
				names = append(names, f.name)
			}
			if got := strings.Join(names, " "); got != "sip:0 sip:0:1" {
				t.Errorf("the flows example makes flows %q; the text says sip:0 and sip:0:1", got)
			}
		}
	}
	if n < 3 {
		t.Errorf("docs/kubernetes.md has %d policy examples, want the three of its policies section", n)
	}
	for _, s := range []string{"`k8s/NAMESPACE/NAME/POLICY:I`", "the oldest first", "hostqos-NODE"} {
		if !strings.Contains(doc, s) {
			t.Errorf("docs/kubernetes.md no longer says %q", s)
		}
	}
}
