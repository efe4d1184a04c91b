package kubetest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Version is the Kubernetes release whose kube-apiserver the tests run:
// scripts/kube-apiserver.sh builds it from the k8s.io/kubernetes module,
// and the main module's k8s.io/client-go is its v0.x twin.
const Version = "v1.37.2"

// buildScript is the script that builds and caches the kube-apiserver,
// relative to the repository's root.
const buildScript = "scripts/kube-apiserver.sh"

// CachedAPIServer is where scripts/kube-apiserver.sh leaves the binary:
// $XDG_CACHE_HOME/hostqos/kube-apiserver-<Version>, or ~/.cache/… when
// XDG_CACHE_HOME is unset (the script's rule).
func CachedAPIServer() (string, error) {
	dir := os.Getenv("XDG_CACHE_HOME")
	if dir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("find the cache directory: %w", err)
		}
		dir = filepath.Join(home, ".cache")
	}
	return filepath.Join(dir, "hostqos", "kube-apiserver-"+Version), nil
}

// apiServerBinary finds the kube-apiserver to run: HOSTQOS_KUBE_APISERVER
// when set, else the cached build. When there is none, it builds it with
// scripts/kube-apiserver.sh if HOSTQOS_KUBE_BUILD is set; otherwise it
// fails the test under CI (.ci/run builds the binary first, so a missing
// one is a broken setup) and skips it elsewhere, naming the script.
func apiServerBinary(tb testing.TB) string {
	tb.Helper()
	if p := os.Getenv("HOSTQOS_KUBE_APISERVER"); p != "" {
		if _, err := os.Stat(p); err != nil {
			tb.Fatalf("HOSTQOS_KUBE_APISERVER: %v", err)
		}
		return p
	}
	p, err := CachedAPIServer()
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := os.Stat(p); err == nil {
		return p
	}
	if waitForBuild(tb, filepath.Join(filepath.Dir(p), buildLock)) {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if os.Getenv("HOSTQOS_KUBE_BUILD") != "" {
		root, err := repoRoot()
		if err != nil {
			tb.Fatalf("build the kube-apiserver: %v", err)
		}
		cmd := exec.Command(filepath.Join(root, buildScript))
		cmd.Dir = root
		out, err := cmd.CombinedOutput()
		if err != nil {
			tb.Fatalf("build the kube-apiserver (%s): %v\n%s", buildScript, err, out)
		}
		built := strings.TrimSpace(lastLine(string(out)))
		if _, err := os.Stat(built); err != nil {
			tb.Fatalf("%s printed %q, not the binary's path: %v", buildScript, built, err)
		}
		return built
	}
	msg := fmt.Sprintf("no kube-apiserver %s at %s: run %s (a few minutes, once), or set HOSTQOS_KUBE_BUILD=1 to have the test build it", Version, p, buildScript)
	if os.Getenv("CI") != "" {
		tb.Fatal(msg + " (under CI, .ci/run builds it before the tests)")
	}
	tb.Skip(msg)
	return ""
}

// buildLock is the file scripts/kube-apiserver.sh holds locked (flock)
// while it builds, in the cache directory.
const buildLock = "kube-build.lock"

// waitForBuild waits until no scripts/kube-apiserver.sh holds lock (.ci/run
// starts the build beside the first steps of make test) and reports
// whether one did.
func waitForBuild(tb testing.TB, lock string) bool {
	tb.Helper()
	f, err := os.Open(lock)
	if err != nil {
		return false
	}
	defer f.Close()
	if unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB) == nil {
		return false
	}
	tb.Logf("kubetest: %s is building the kube-apiserver; waiting for it", buildScript)
	start := time.Now()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_SH); err != nil {
		tb.Fatalf("wait for %s (lock %s): %v", buildScript, lock, err)
	}
	tb.Logf("kubetest: the build ended after %s of waiting", time.Since(start).Round(time.Second))
	return true
}

// etcdBinary is Debian's etcd-server (scripts/install-deps.sh installs
// it), or HOSTQOS_ETCD when set.
func etcdBinary(tb testing.TB) string {
	tb.Helper()
	if p := os.Getenv("HOSTQOS_ETCD"); p != "" {
		return p
	}
	p, err := exec.LookPath("etcd")
	if err == nil {
		return p
	}
	msg := "no etcd in PATH: run scripts/install-deps.sh (it installs Debian's etcd-server)"
	if os.Getenv("CI") != "" {
		tb.Fatal(msg)
	}
	tb.Skip(msg)
	return ""
}

// repoRoot is the directory holding the main module's go.mod, found from
// the working directory up (a test runs in its package's directory).
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && strings.HasPrefix(string(b), "module github.com/hostqos/hostqos\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no hostqos checkout above the working directory")
		}
		dir = parent
	}
}

func lastLine(s string) string {
	s = strings.TrimRight(s, "\n")
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}
