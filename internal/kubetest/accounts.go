package kubetest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// requestTimeout bounds each call the helpers make.
const requestTimeout = 30 * time.Second

// Namespace makes a namespace (when missing) with its ServiceAccount
// default, which a pod needs under the ServiceAccount admission plugin
// and which no controller makes here.
func (cp *ControlPlane) Namespace(tb testing.TB, name string) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if _, err := cp.Client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		tb.Fatalf("create namespace %s: %v", name, err)
	}
	cp.EnsureServiceAccount(tb, name, "default")
}

// EnsureServiceAccount makes the ServiceAccount namespace/name unless it
// exists.
func (cp *ControlPlane) EnsureServiceAccount(tb testing.TB, namespace, name string) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	if _, err := cp.Client.CoreV1().ServiceAccounts(namespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		tb.Fatalf("create service account %s/%s: %v", namespace, name, err)
	}
}

// BindClusterRole binds the ClusterRole role to the ServiceAccount
// namespace/name across the cluster (a ClusterRoleBinding named
// kubetest:<namespace>:<name>:<role>).
func (cp *ControlPlane) BindClusterRole(tb testing.TB, namespace, name, role string) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	b := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("kubetest:%s:%s:%s", namespace, name, role)},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: namespace, Name: name}},
	}
	if _, err := cp.Client.RbacV1().ClusterRoleBindings().Create(ctx, b, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		tb.Fatalf("bind cluster role %s to %s/%s: %v", role, namespace, name, err)
	}
}

// ServiceAccountToken makes the ServiceAccount namespace/name when it is
// missing and returns a token the API server issued for it (TokenRequest,
// valid for an hour): requests made with it have exactly the permissions
// RBAC gives the account.
func (cp *ControlPlane) ServiceAccountToken(tb testing.TB, namespace, name string) string {
	tb.Helper()
	cp.EnsureServiceAccount(tb, namespace, name)
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	expiry := int64(3600)
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &expiry}}
	got, err := cp.Client.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, tr, metav1.CreateOptions{})
	if err != nil {
		tb.Fatalf("request a token for service account %s/%s: %v", namespace, name, err)
	}
	return got.Status.Token
}

// ServiceAccountConfig is a client configuration that authenticates as the
// ServiceAccount namespace/name (see ServiceAccountToken).
func (cp *ControlPlane) ServiceAccountConfig(tb testing.TB, namespace, name string) *rest.Config {
	tb.Helper()
	cfg := cp.adminConfig()
	cfg.BearerToken = cp.ServiceAccountToken(tb, namespace, name)
	cfg.UserAgent = "hostqos-kubetest-" + name
	return cfg
}

// ClientFor is a clientset for cfg (e.g. ServiceAccountConfig's).
func (cp *ControlPlane) ClientFor(tb testing.TB, cfg *rest.Config) kubernetes.Interface {
	tb.Helper()
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		tb.Fatalf("make a client: %v", err)
	}
	return c
}

// DynamicFor is a dynamic client for cfg, for ApplyAs.
func (cp *ControlPlane) DynamicFor(tb testing.TB, cfg *rest.Config) dynamic.Interface {
	tb.Helper()
	c, err := dynamic.NewForConfig(cfg)
	if err != nil {
		tb.Fatalf("make a dynamic client: %v", err)
	}
	return c
}

// WriteKubeconfig writes a kubeconfig file for cfg (the server, its CA and the
// bearer token) into a new file under Dir and returns its path: what a
// node agent is given with --kubeconfig or [kubernetes] kubeconfig.
func (cp *ControlPlane) WriteKubeconfig(tb testing.TB, cfg *rest.Config) string {
	tb.Helper()
	f, err := os.CreateTemp(cp.Dir, "*.kubeconfig")
	if err != nil {
		tb.Fatal(err)
	}
	f.Close()
	if err := writeKubeconfig(f.Name(), cfg); err != nil {
		tb.Fatal(err)
	}
	return f.Name()
}

// writeKubeconfig writes a kubeconfig with one cluster, user and context
// (all named kubetest) from cfg's host, CA data and bearer token.
func writeKubeconfig(path string, cfg *rest.Config) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["kubetest"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["kubetest"] = &clientcmdapi.AuthInfo{Token: cfg.BearerToken}
	kc.Contexts["kubetest"] = &clientcmdapi.Context{Cluster: "kubetest", AuthInfo: "kubetest", Namespace: "default"}
	kc.CurrentContext = "kubetest"
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		return fmt.Errorf("write kubeconfig %s: %w", filepath.Base(path), err)
	}
	return nil
}
