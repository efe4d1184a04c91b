package policy

import (
	"os"
	"strings"
	"testing"
)

// TestKubernetesTable: [kubernetes] turns the node agent on (an empty
// table: in-cluster credentials, the default node name), loads its keys
// strictly (a relative kubeconfig, a node name that is no DNS name and an
// unknown key are refused with the line), and docs/config.md documents
// every key in its [kubernetes] section.
func TestKubernetesTable(t *testing.T) {
	p, err := Load([]byte("[kubernetes]\nkubeconfig = \"/etc/hostqos/kubeconfig\"\nnode_name = \"n1.example\"\n"), "t.toml")
	if err != nil {
		t.Fatal(err)
	}
	if want := (KubernetesSettings{Enabled: true, Kubeconfig: "/etc/hostqos/kubeconfig", NodeName: "n1.example"}); p.Kubernetes != want {
		t.Errorf("[kubernetes] = %+v, want %+v", p.Kubernetes, want)
	}
	if p, err := Load([]byte("[kubernetes]\n"), "t.toml"); err != nil || p.Kubernetes != (KubernetesSettings{Enabled: true}) {
		t.Errorf("an empty [kubernetes]: %+v, %v", p.Kubernetes, err)
	}
	if p, err := Load(nil, "t.toml"); err != nil || p.Kubernetes.Enabled {
		t.Errorf("without [kubernetes]: %+v, %v", p.Kubernetes, err)
	}
	for conf, msg := range map[string]string{
		"[kubernetes]\nkubeconfig = \"kubeconfig\"\n": "t.toml:2",
		"[kubernetes]\nnode_name = \"Node_1\"\n":      "not a Kubernetes node name",
		"[kubernetes]\nnode_name = 7\n":               "not a Kubernetes node name",
		"[kubernetes]\nnamespace = \"x\"\n":           "namespace",
		"kubernetes = true\n":                         "want a table",
	} {
		if _, err := Load([]byte(conf), "t.toml"); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("Load(%q) = %v; want an error saying %q", conf, err, msg)
		}
	}
	doc, err := os.ReadFile("../../docs/config.md")
	if err != nil {
		t.Fatal(err)
	}
	sec := docSection(string(doc), "## `[kubernetes]`")
	for _, k := range kubernetesKeys {
		if !strings.Contains(sec, "| `"+k+"` |") {
			t.Errorf("docs/config.md, section [kubernetes]: no row for %s", k)
		}
	}
}
