package kubetest

import (
	"context"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DeletePod removes a pod at once, as kubelet's last step does. Without
// a kubelet, a plain delete of a pod bound to a node only sets its
// deletionTimestamp (watchers see an update) and the pod stays until the
// node confirms with a grace period of 0; this is that confirmation, so
// watchers then see the delete. A test that wants both steps deletes
// first with the client, then calls DeletePod.
func (cp *ControlPlane) DeletePod(tb testing.TB, namespace, name string) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	now := int64(0)
	err := cp.Client.CoreV1().Pods(namespace).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &now})
	if err != nil && !apierrors.IsNotFound(err) {
		tb.Fatalf("delete pod %s/%s: %v", namespace, name, err)
	}
}
