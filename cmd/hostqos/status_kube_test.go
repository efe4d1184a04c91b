package main

import (
	"testing"
	"time"

	"github.com/hostqos/hostqos/api"
)

// TestKubernetesLine: status names the node agent's node, its connection
// (and why not) and its last sync.
func TestKubernetesLine(t *testing.T) {
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		k    api.KubernetesStatus
		want string
	}{
		{api.KubernetesStatus{Node: "n1", Connected: true, Since: now.Add(-time.Hour), LastSync: now.Add(-3 * time.Second), Pods: 4, Refused: 1, Policies: 2},
			"node n1, connected since 1h0m0s ago; last sync 3s ago: 4 pods with QoS, 1 refused, 2 policies"},
		{api.KubernetesStatus{Node: "n1", Error: "connection refused", Since: now.Add(-10 * time.Second)},
			"node n1, NOT connected (connection refused); enforcing the last known pods since 10s ago; last sync never: 0 pods with QoS, 0 refused, 0 policies"},
		{api.KubernetesStatus{Node: "n1", Connected: true, Since: now.Add(-time.Minute), PolicyError: "the CRDs are not installed"},
			"node n1, connected since 1m0s ago; last sync never: 0 pods with QoS, 0 refused, 0 policies; the CRDs are not installed"},
	} {
		if got := kubernetesLine(&tc.k, now); got != tc.want {
			t.Errorf("kubernetesLine(%+v) =\n%q, want\n%q", tc.k, got, tc.want)
		}
	}
}
