package policy

import (
	"strings"
)

// KubernetesSettings is the config file's [kubernetes] table: hostqosd as
// a Kubernetes node agent (docs/kubernetes.md). Read when the daemon
// starts, like Settings.
type KubernetesSettings struct {
	// Enabled: the table is present; the agent runs.
	Enabled bool
	// Kubeconfig is the kubeconfig file the agent reads its API server
	// and credentials from ("": the pod's in-cluster credentials).
	Kubeconfig string
	// NodeName is the node whose pods it enforces ("": $NODE_NAME, else
	// the host name).
	NodeName string
}

// kubernetesKey is the config file's [kubernetes] table.
const kubernetesKey = "kubernetes"

// kubernetesKeys are the keys of the [kubernetes] table.
var kubernetesKeys = []string{"kubeconfig", "node_name"}

// MaxNodeName is the longest Kubernetes node name (a DNS subdomain).
const MaxNodeName = 253

// ValidNodeName tells whether s is written as a Kubernetes node name: a
// DNS subdomain (lower-case letters, digits, '-' and '.', starting and
// ending with a letter or digit).
func ValidNodeName(s string) bool {
	if s == "" || len(s) > MaxNodeName {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case (c == '-' || c == '.') && i > 0 && i < len(s)-1:
		default:
			return false
		}
	}
	return true
}

// kubernetes decodes the [kubernetes] table of raw into p.Kubernetes.
func (ld *loader) kubernetes(raw map[string]any, p *Policy) {
	v, ok := raw[kubernetesKey]
	if !ok {
		return
	}
	m, ok := v.(map[string]any)
	if !ok {
		ld.fail("", kubernetesKey, ld.loc[keyLoc{"", -1, kubernetesKey}], nil, "want a table", "write it as a [kubernetes] section, with single brackets")
		return
	}
	p.Kubernetes.Enabled = true
	line := func(k string) int { return ld.loc[keyLoc{kubernetesKey, -1, k}] }
	for _, k := range sortedKeys(m) {
		switch v := m[k]; k {
		case "kubeconfig":
			s, ok := v.(string)
			if !ok || !strings.HasPrefix(s, "/") || len(s) > MaxPathLen || strings.ContainsRune(s, 0) {
				ld.fail(kubernetesKey, k, line(k), v, "want the absolute path of a kubeconfig file", "leave it out to use the pod's in-cluster credentials")
				continue
			}
			p.Kubernetes.Kubeconfig = s
		case "node_name":
			s, ok := v.(string)
			if !ok || !ValidNodeName(s) {
				ld.fail(kubernetesKey, k, line(k), v, "not a Kubernetes node name (lower-case letters, digits, '-' and '.')", "leave it out for $NODE_NAME, else the host name")
				continue
			}
			p.Kubernetes.NodeName = s
		default:
			ld.unknownKey(kubernetesKey, k, line(k), kubernetesKeys)
		}
	}
}
