package kubetest_test

import (
	"context"
	"testing"
	"time"

	"github.com/hostqos/hostqos/internal/kubetest"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// TestControlPlane: the control plane a node agent's tests run against
// behaves as a cluster's does. The admin's kubeconfig works as a file; a
// pod needs the ServiceAccount the harness made; a ServiceAccount's token
// has only what RBAC gives it; with the API server stopped requests fail,
// and after Restart what was stored is there and the token still works.
// A deleted pod stays, marked, until DeletePod plays kubelet's part.
func TestControlPlane(t *testing.T) {
	cp := kubetest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// The admin kubeconfig, read the way a client tool reads it.
	cfg, err := clientcmd.BuildConfigFromFlags("", cp.Kubeconfig)
	if err != nil {
		t.Fatalf("load the admin kubeconfig: %v", err)
	}
	admin, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	v, err := admin.Discovery().ServerVersion()
	if err != nil {
		t.Fatalf("server version through the admin kubeconfig: %v", err)
	}
	if v.GitVersion != kubetest.Version {
		t.Errorf("the API server says it is %s, want %s", v.GitVersion, kubetest.Version)
	}

	// A pod bound to a node that does not exist (no kubelet runs): the
	// ServiceAccount admission plugin needs the account default.
	cp.Namespace(t, "app")
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "app", Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{
			NodeName:   "n1",
			Containers: []corev1.Container{{Name: "web", Image: "registry.invalid/web"}},
		},
	}
	if _, err := cp.Client.CoreV1().Pods("app").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create a pod: %v", err)
	}

	// A ServiceAccount bound to a ClusterRole that reads pods reads them
	// and cannot delete them. (The built-in view is empty here: the
	// controller that aggregates its rules does not run.)
	cp.Apply(t, `
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: pod-reader}
rules:
- {apiGroups: [""], resources: [pods], verbs: [get, list, watch]}
`)
	cp.BindClusterRole(t, "app", "reader", "pod-reader")
	reader := cp.ClientFor(t, cp.ServiceAccountConfig(t, "app", "reader"))
	pods, err := reader.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=n1"})
	if err != nil {
		t.Fatalf("list the node's pods as a viewer: %v", err)
	}
	if len(pods.Items) != 1 || pods.Items[0].Name != "web" {
		t.Errorf("the viewer lists %d pods on n1, want web alone", len(pods.Items))
	}
	err = reader.CoreV1().Pods("app").Delete(ctx, "web", metav1.DeleteOptions{})
	if !apierrors.IsForbidden(err) {
		t.Errorf("a viewer deleting a pod: got %v, want forbidden", err)
	}

	// The API server away: requests fail; back: the pod is still there
	// and the token issued before works.
	cp.Stop(t)
	short, cancelShort := context.WithTimeout(ctx, 5*time.Second)
	_, err = reader.CoreV1().Pods("app").Get(short, "web", metav1.GetOptions{})
	cancelShort()
	if err == nil {
		t.Fatal("a request to the stopped API server succeeded")
	}
	cp.Restart(t)
	if _, err := reader.CoreV1().Pods("app").Get(ctx, "web", metav1.GetOptions{}); err != nil {
		t.Fatalf("get the pod after the restart, with the token issued before: %v", err)
	}

	// Deleting a pod bound to a node marks it; kubelet's part (DeletePod)
	// removes it.
	if err := cp.Client.CoreV1().Pods("app").Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete the pod: %v", err)
	}
	got, err := cp.Client.CoreV1().Pods("app").Get(ctx, "web", metav1.GetOptions{})
	if err != nil || got.DeletionTimestamp == nil {
		t.Fatalf("after a delete, the pod bound to n1 should stay, marked: %v, %v", err, got)
	}
	cp.DeletePod(t, "app", "web")
	if _, err := cp.Client.CoreV1().Pods("app").Get(ctx, "web", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("after DeletePod: got %v, want not found", err)
	}
}
