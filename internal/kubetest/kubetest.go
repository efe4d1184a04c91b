// Package kubetest runs a real Kubernetes control plane for tests: Debian's
// etcd and a kube-apiserver built from the k8s.io/kubernetes module by
// scripts/kube-apiserver.sh, both on loopback, in a temporary directory.
// The API server authenticates with static tokens (an admin in
// system:masters) and service account tokens it signs, authorizes with
// RBAC, and runs with few admission plugins. No controller-manager,
// scheduler or kubelet runs: a test makes the ServiceAccounts it needs
// (ServiceAccount, Namespace) and plays kubelet's part itself (DeletePod
// ends a pod's deletion as kubelet would); aggregated ClusterRoles (view,
// edit, admin) are empty for want of the controller that fills them.
//
//	cp := kubetest.Start(t)
//	cp.Apply(t, manifests)                       // CRDs wait until Established
//	agent := cp.ServiceAccountConfig(t, "hostqos-system", "hostqos")
//	kubeconfig := cp.WriteKubeconfig(t, agent)   // for the node agent
//	cp.Stop(t); …; cp.Restart(t)                 // the API server away and back
//
// Everything it starts is stopped at the test's cleanup, and on SIGINT or
// SIGTERM (testutil.OnSignal); the processes die with the test binary
// (SIGKILL on the parent's death), so a killed run leaves none behind.
package kubetest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hostqos/hostqos/internal/testutil"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// How long the control plane may take to come up: etcd and the API
// server's post-start hooks on a loaded 2-core machine.
const readyTimeout = 3 * time.Minute

// ServiceAccountIssuer is the issuer of the service account tokens the API
// server signs (and the audience it accepts).
const ServiceAccountIssuer = "https://kubernetes.default.svc.cluster.local"

// adminUser is the user of the static token that Config, Client and
// Kubeconfig carry (group system:masters).
const adminUser = "kubetest-admin"

// The admission plugins the API server runs: the namespace lifecycle and
// the ServiceAccount plugin (a pod names an existing ServiceAccount and
// gets its token volume, as in a real cluster). Every other plugin enabled
// by default is off: they need controllers that do not run here or add
// nothing the tests look at.
var (
	enabledAdmission  = []string{"NamespaceLifecycle", "ServiceAccount"}
	disabledAdmission = []string{
		"LimitRanger", "TaintNodesByCondition", "PodSecurity", "Priority",
		"DefaultTolerationSeconds", "DefaultStorageClass", "StorageObjectInUseProtection",
		"PersistentVolumeClaimResize", "RuntimeClass", "CertificateApproval",
		"CertificateSigning", "ClusterTrustBundleAttest", "CertificateSubjectRestriction",
		"DefaultIngressClass", "MutatingAdmissionWebhook", "ValidatingAdmissionWebhook",
		"ResourceQuota",
	}
)

// ControlPlane is a running etcd and kube-apiserver.
type ControlPlane struct {
	// Dir holds the control plane's files: etcd's data, the certificates
	// and keys, the token file, the kubeconfigs and both logs
	// (etcd.log, apiserver.log).
	Dir string
	// Server is the API server's URL, https://127.0.0.1:PORT.
	Server string
	// Kubeconfig is the admin's kubeconfig file.
	Kubeconfig string
	// Config is the admin's client configuration (system:masters).
	Config *rest.Config
	// Client and Dynamic are the admin's clients.
	Client  kubernetes.Interface
	Dynamic dynamic.Interface

	caPEM      []byte
	adminToken string
	apiArgs    []string
	apiBin     string

	mu        sync.Mutex
	etcd      *proc
	apiserver *proc
	mapper    *mapper
}

// Start runs etcd and the kube-apiserver on free loopback ports, waits
// until the API server answers /readyz, and makes the ServiceAccount
// default in the namespace default. It skips the test when the API server
// has not been built (and fails it under CI; see apiServerBinary).
func Start(tb testing.TB) *ControlPlane {
	tb.Helper()
	apiBin := apiServerBinary(tb)
	etcdBin := etcdBinary(tb)
	cp := &ControlPlane{Dir: tb.TempDir(), apiBin: apiBin, adminToken: testutil.RandHex(16)}
	unregister := testutil.OnSignal(cp.stopAll)
	tb.Cleanup(func() {
		unregister()
		cp.stopAll()
		if tb.Failed() {
			tb.Logf("kubetest: the control plane ran in %s", cp.Dir)
			for _, name := range []string{"apiserver.log", "etcd.log"} {
				tb.Logf("kubetest: last lines of %s:\n%s", name, tail(filepath.Join(cp.Dir, name), 30))
			}
		}
	})

	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	etcdURL, err := cp.startEtcd(ctx, etcdBin)
	if err != nil {
		tb.Fatalf("start etcd: %v", err)
	}
	if err := cp.configureAPIServer(etcdURL); err != nil {
		tb.Fatalf("configure the kube-apiserver: %v", err)
	}
	if err := cp.startAPIServer(ctx); err != nil {
		tb.Fatalf("start the kube-apiserver: %v", err)
	}
	if err := cp.makeClients(); err != nil {
		tb.Fatal(err)
	}
	cp.EnsureServiceAccount(tb, "default", "default")
	return cp
}

// startEtcd runs etcd with its data in Dir/etcd, on two free loopback
// ports, and waits until it answers /health. A port taken between the
// choice and etcd's bind is retried with new ones.
func (cp *ControlPlane) startEtcd(ctx context.Context, bin string) (string, error) {
	var lastErr error
	for range 3 {
		ports, err := freePorts(2)
		if err != nil {
			return "", err
		}
		client := "http://127.0.0.1:" + strconv.Itoa(ports[0])
		peer := "http://127.0.0.1:" + strconv.Itoa(ports[1])
		data := filepath.Join(cp.Dir, "etcd")
		if err := os.RemoveAll(data); err != nil {
			return "", err
		}
		p, err := startProc(bin, filepath.Join(cp.Dir, "etcd.log"),
			"--name=kubetest", "--data-dir="+data,
			"--listen-client-urls="+client, "--advertise-client-urls="+client,
			"--listen-peer-urls="+peer, "--initial-advertise-peer-urls="+peer,
			"--initial-cluster=kubetest="+peer, "--initial-cluster-state=new",
			"--logger=zap", "--log-level=warn", "--log-outputs=stderr")
		if err != nil {
			return "", err
		}
		cp.mu.Lock()
		cp.etcd = p
		cp.mu.Unlock()
		hc := &http.Client{Timeout: 2 * time.Second}
		err = p.waitReady(ctx, func() bool {
			resp, err := hc.Get(client + "/health")
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK
		})
		if err == nil {
			return client, nil
		}
		lastErr = fmt.Errorf("%w; last lines of its log:\n%s", err, tail(p.logPath, 20))
		p.stop()
		if ctx.Err() != nil {
			break
		}
	}
	return "", lastErr
}

// configureAPIServer writes the serving certificate, the service account
// key and the token file, chooses the API server's port and sets its
// arguments (kept for Restart).
func (cp *ControlPlane) configureAPIServer(etcdURL string) error {
	certFile, keyFile, caPEM, err := writeServingCert(cp.Dir)
	if err != nil {
		return err
	}
	cp.caPEM = caPEM
	saKey, saPub, err := writeServiceAccountKey(cp.Dir)
	if err != nil {
		return err
	}
	tokens := filepath.Join(cp.Dir, "tokens.csv")
	// token,user,uid,"group1,group2"
	line := fmt.Sprintf("%s,%s,%s-uid,\"system:masters\"\n", cp.adminToken, adminUser, adminUser)
	if err := os.WriteFile(tokens, []byte(line), 0o600); err != nil {
		return err
	}
	ports, err := freePorts(1)
	if err != nil {
		return err
	}
	cp.Server = "https://127.0.0.1:" + strconv.Itoa(ports[0])
	cp.apiArgs = []string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(ports[0]),
		"--tls-cert-file=" + certFile, "--tls-private-key-file=" + keyFile,
		"--cert-dir=" + filepath.Join(cp.Dir, "certs"),
		"--token-auth-file=" + tokens,
		"--authorization-mode=RBAC",
		"--anonymous-auth=false",
		"--service-account-issuer=" + ServiceAccountIssuer,
		"--service-account-signing-key-file=" + saKey,
		"--service-account-key-file=" + saPub,
		"--service-cluster-ip-range=10.96.0.0/24",
		"--enable-admission-plugins=" + strings.Join(enabledAdmission, ","),
		"--disable-admission-plugins=" + strings.Join(disabledAdmission, ","),
		"--allow-privileged=true",
		// No endpoints for the service kubernetes: it would need a
		// non-loopback address, and nothing here reaches the API through it.
		"--endpoint-reconciler-type=none",
		"--enable-priority-and-fairness=false",
		"--profiling=false",
		"--v=0",
	}
	return nil
}

// startAPIServer runs the kube-apiserver with the configured arguments and
// waits until /readyz answers ok (RBAC's bootstrap roles exist then).
func (cp *ControlPlane) startAPIServer(ctx context.Context) error {
	p, err := startProc(cp.apiBin, filepath.Join(cp.Dir, "apiserver.log"), cp.apiArgs...)
	if err != nil {
		return err
	}
	cp.mu.Lock()
	cp.apiserver = p
	cp.mu.Unlock()
	cfg := cp.adminConfig()
	cfg.Timeout = 5 * time.Second
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return fmt.Errorf("make the readiness client: %w", err)
	}
	err = p.waitReady(ctx, func() bool {
		resp, err := hc.Get(cp.Server + "/readyz")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
		return resp.StatusCode == http.StatusOK && strings.TrimSpace(string(body)) == "ok"
	})
	if err != nil {
		return fmt.Errorf("%w; last lines of its log:\n%s", err, tail(p.logPath, 30))
	}
	return nil
}

// Stop stops the API server (etcd and everything stored stay) and waits
// until it has exited: clients get connection errors until Restart.
func (cp *ControlPlane) Stop(tb testing.TB) {
	tb.Helper()
	cp.mu.Lock()
	p := cp.apiserver
	cp.apiserver = nil
	cp.mu.Unlock()
	if p != nil {
		p.stop()
	}
}

// Restart starts the API server again on the same address, with the same
// keys and tokens (a token issued before stays valid), and waits until it
// is ready; when it is running, Restart stops it first.
func (cp *ControlPlane) Restart(tb testing.TB) {
	tb.Helper()
	cp.Stop(tb)
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	if err := cp.startAPIServer(ctx); err != nil {
		tb.Fatalf("restart the kube-apiserver: %v", err)
	}
}

// stopAll stops the API server, then etcd.
func (cp *ControlPlane) stopAll() {
	cp.mu.Lock()
	api, etcd := cp.apiserver, cp.etcd
	cp.apiserver, cp.etcd = nil, nil
	cp.mu.Unlock()
	if api != nil {
		api.stop()
	}
	if etcd != nil {
		etcd.stop()
	}
}

// adminConfig is a fresh copy of the admin's client configuration.
func (cp *ControlPlane) adminConfig() *rest.Config {
	return &rest.Config{
		Host:            cp.Server,
		BearerToken:     cp.adminToken,
		TLSClientConfig: rest.TLSClientConfig{CAData: cp.caPEM},
		QPS:             200,
		Burst:           400,
		UserAgent:       "hostqos-kubetest",
	}
}

// makeClients sets Config, Client, Dynamic and the admin's kubeconfig.
func (cp *ControlPlane) makeClients() error {
	cp.Config = cp.adminConfig()
	var err error
	if cp.Client, err = kubernetes.NewForConfig(cp.Config); err != nil {
		return fmt.Errorf("make the admin client: %w", err)
	}
	if cp.Dynamic, err = dynamic.NewForConfig(cp.Config); err != nil {
		return fmt.Errorf("make the admin's dynamic client: %w", err)
	}
	cp.Kubeconfig = filepath.Join(cp.Dir, "admin.kubeconfig")
	if err := writeKubeconfig(cp.Kubeconfig, cp.Config); err != nil {
		return err
	}
	cp.mapper = newMapper(cp.Client.Discovery())
	return nil
}

// freePorts returns n distinct loopback TCP ports free at the time of the
// call (the listeners are closed before it returns).
func freePorts(n int) ([]int, error) {
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("choose a free loopback port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// proc is one process of the control plane.
type proc struct {
	cmd     *exec.Cmd
	logPath string
	done    chan struct{} // closed when the process has exited
	err     error         // Wait's result, set before done closes
}

// The processes are started from one OS thread that never exits, so that
// their parent-death signal (SIGKILL, sent when the thread that forked them
// ends) fires when the test binary dies and not when the Go runtime retires
// a thread.
var spawn = sync.OnceValue(func() chan func() {
	c := make(chan func())
	go func() {
		runtime.LockOSThread()
		for fn := range c {
			fn()
		}
	}()
	return c
})

func startProc(bin, logPath string, args ...string) (*proc, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	errc := make(chan error, 1)
	spawn() <- func() { errc <- cmd.Start() }
	if err := <-errc; err != nil {
		return nil, fmt.Errorf("run %s: %w", bin, err)
	}
	p := &proc{cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// waitReady polls ready until it is true, the process exits or ctx ends.
func (p *proc) waitReady(ctx context.Context, ready func() bool) error {
	name := filepath.Base(p.cmd.Path)
	for {
		if ready() {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("%s exited before it was ready: %v", name, p.err)
		case <-ctx.Done():
			return fmt.Errorf("%s not ready: %w", name, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// stop sends SIGTERM, and SIGKILL after 3 s, and waits for the exit. The
// apiserver does not end on SIGTERM while watches are open; a test has no
// use for its graceful shutdown (a stop is the server going away).
func (p *proc) stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(3 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// tail is the last n lines of a file, for failure messages.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "(no log)"
		}
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
