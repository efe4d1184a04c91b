// Package kubernetes holds hostqos's Kubernetes manifests (the YAML files
// of this directory), embedded, so that tests apply exactly what a cluster
// gets: kubetest.ControlPlane.Apply(t, kubernetes.CRDs).
package kubernetes

import (
	_ "embed"
	"strings"
)

var (
	//go:embed crd-qospolicy.yaml
	crdQoSPolicy string
	//go:embed crd-clusterqospolicy.yaml
	crdClusterQoSPolicy string
	//go:embed crd-hostqosnode.yaml
	crdHostQoSNode string
	// RBAC is rbac.yaml: the namespace hostqos-system, the ServiceAccount
	// hostqos, the ClusterRole hostqos-node-agent and its binding.
	//go:embed rbac.yaml
	RBAC string
	// DaemonSet is daemonset.yaml: the agent's ConfigMap and DaemonSet.
	//go:embed daemonset.yaml
	DaemonSet string
)

// CRDs are the three CustomResourceDefinitions (QoSPolicy,
// ClusterQoSPolicy, HostQoSNode) as one YAML stream.
var CRDs = strings.Join([]string{crdQoSPolicy, crdClusterQoSPolicy, crdHostQoSNode}, "\n---\n")

// The agent's identity, as rbac.yaml names it.
const (
	Namespace      = "hostqos-system"
	ServiceAccount = "hostqos"
	ClusterRole    = "hostqos-node-agent"
)
