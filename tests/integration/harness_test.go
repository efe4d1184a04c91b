// Package integration runs hostqos end to end: the real hostqosd in a
// private network namespace, real BPF programs and qdiscs, real traffic to a
// receiver in another namespace, and the real CLI over the real socket.
// These tests need root; without it they skip.
package integration

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/lab"
	"github.com/hostqos/hostqos/internal/testbed"
)

// binDir holds hostqos and hostqosd built once for the whole run.
var binDir string

func TestMain(m *testing.M) {
	if os.Getenv(attackerEnv) != "" { // the test binary as an ordinary user's program (userrun_test.go)
		os.Exit(attackerMain())
	}
	if os.Geteuid() != 0 {
		fmt.Println("integration: not root; the end-to-end tests skip")
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "hostqos-it-bin-")
	if err != nil {
		fmt.Println("integration:", err)
		os.Exit(1)
	}
	if err := lab.BuildBinaries("../..", dir); err != nil {
		fmt.Println("integration:", err)
		os.Exit(1)
	}
	binDir = dir
	go cleanupOnSignal()
	if n, err := lab.CleanStale(); err != nil || n > 0 {
		fmt.Printf("integration: cleaned %d stale daemon(s) of killed runs (%v)\n", n, err)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// live holds the environments of running tests, so that an interrupted run
// (Ctrl-C, a CI timeout's SIGTERM) still removes everything it made.
var live struct {
	sync.Mutex
	envs map[*env]bool
}

func cleanupOnSignal() {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	s := <-sigs
	fmt.Printf("integration: %v: removing every daemon and namespace of the running tests\n", s)
	live.Lock()
	for e := range live.envs {
		_ = e.d.Stop()
		_ = e.tb.Close()
	}
	live.Unlock()
	os.RemoveAll(binDir)
	os.Exit(130)
}

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces, BPF, qdiscs)")
	}
}

// env is one test's world: a client host running hostqosd and a server
// host, joined by a veth pair; the client's egress is what hostqos manages.
type env struct {
	t      *testing.T
	tb     *testbed.Testbed
	client *testbed.Node
	server *testbed.Node
	dir    string
	d      *lab.Daemon
	cli    *api.Client
}

// Addresses of the two hosts.
var (
	clientV4 = netip.MustParsePrefix("198.18.0.1/24")
	serverV4 = netip.MustParsePrefix("198.18.0.2/24")
	clientV6 = netip.MustParsePrefix("2001:db8::1/64")
	serverV6 = netip.MustParsePrefix("2001:db8::2/64")
)

// newEnv builds the two hosts; the daemon is prepared, not started.
func newEnv(t *testing.T) *env {
	t.Helper()
	needRoot(t)
	tb, err := testbed.Build(testbed.Topology{
		Name:  "it",
		Nodes: []testbed.NodeSpec{{Name: "client"}, {Name: "server"}},
		Links: []testbed.LinkSpec{{
			A: "client", B: "server",
			AAddrs: []netip.Prefix{clientV4, clientV6},
			BAddrs: []netip.Prefix{serverV4, serverV6},
		}},
	})
	if err != nil {
		t.Fatalf("build testbed: %v", err)
	}
	dir := t.TempDir()
	e := &env{t: t, tb: tb, client: tb.Node("client"), server: tb.Node("server"), dir: dir}
	e.d = lab.NewDaemon(e.client, binDir, dir)
	e.cli = e.d.Client
	live.Lock()
	if live.envs == nil {
		live.envs = map[*env]bool{}
	}
	live.envs[e] = true
	live.Unlock()
	t.Cleanup(func() {
		live.Lock()
		delete(live.envs, e)
		live.Unlock()
		if err := e.d.Stop(); err != nil {
			t.Errorf("stop daemon: %v", err)
		}
		if t.Failed() {
			t.Logf("hostqosd log:\n%s", e.d.Log())
		}
		if err := tb.Close(); err != nil {
			t.Errorf("close testbed: %v", err)
		}
	})
	return e
}

// iface is the client's interface towards the server.
func (e *env) iface() string { return e.client.Iface("server") }

func (e *env) writeConfig(toml string) {
	e.t.Helper()
	if err := e.d.WriteConfig(toml); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) startDaemon() {
	e.t.Helper()
	if err := e.d.Start(); err != nil {
		e.t.Fatal(err)
	}
}

// hostqos runs the CLI in the client namespace; a non-zero exit fails.
func (e *env) hostqos(args ...string) string {
	e.t.Helper()
	out, err := e.d.CLI(args...)
	if err != nil {
		e.t.Fatal(err)
	}
	return out
}

// hostqosErr runs the CLI and returns its output and exit error.
func (e *env) hostqosErr(args ...string) (string, error) { return e.d.CLI(args...) }

// hostqosJSON runs the CLI with -o json and decodes the answer.
func (e *env) hostqosJSON(out any, args ...string) {
	e.t.Helper()
	if err := e.d.CLIJSON(out, args...); err != nil {
		e.t.Fatal(err)
	}
}

// app copies the (static) hostqos binary to a new file: a distinct
// executable that exe rules can name, whose `tool` subcommands generate
// traffic.
func (e *env) app(name string) string {
	e.t.Helper()
	dst := filepath.Join(e.dir, name)
	if err := lab.CopyExecutable(filepath.Join(binDir, "hostqos"), dst); err != nil {
		e.t.Fatal(err)
	}
	return dst
}

// hostqosBin is the CLI binary (for `hostqos run`).
func hostqosBin() string { return filepath.Join(binDir, "hostqos") }

// start runs a program in the client namespace in the background; it is
// killed at cleanup if still running.
func (e *env) start(name string, args ...string) (*exec.Cmd, *bytes.Buffer) {
	e.t.Helper()
	cmd := e.client.Command(name, args...)
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		e.t.Fatalf("start %s: %v", name, err)
	}
	e.t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // and its children
			_ = cmd.Wait()
		}
	})
	return cmd, &buf
}

// runApp runs a program in the client namespace to completion.
func (e *env) runApp(name string, args ...string) string {
	e.t.Helper()
	out, err := e.client.Command(name, args...).CombinedOutput()
	if err != nil {
		e.t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

func (e *env) status() api.Status {
	e.t.Helper()
	st, err := e.d.Status()
	if err != nil {
		e.t.Fatalf("status: %v", err)
	}
	return st
}

// ruleStat returns the counters of one rule.
func (e *env) ruleStat(name string) api.RuleStat {
	e.t.Helper()
	s, err := e.d.Stats("rules")
	if err != nil {
		e.t.Fatalf("stats: %v", err)
	}
	for _, r := range s.Rules {
		if r.Rule == name {
			return r
		}
	}
	e.t.Fatalf("rule %q not in stats", name)
	return api.RuleStat{}
}

// killDaemon signals the daemon and waits until it is gone.
func (e *env) killDaemon(sig syscall.Signal) {
	e.t.Helper()
	if err := e.d.Signal(sig); err != nil {
		e.t.Fatal(err)
	}
}

// eventually polls cond until it holds or the timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	last := ""
	for time.Now().Before(deadline) {
		ok, msg := cond()
		if ok {
			return
		}
		last = msg
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s: not within %v: %s", what, timeout, last)
}

// measured runs a measurement that a stall of the shared VM can spoil, up
// to three times with a pause between; it passes when one attempt passes.
// A real regression fails every attempt.
func measured(t *testing.T, what string, attempt func(n int) (ok bool, msg string)) {
	t.Helper()
	for n := 1; n <= 3; n++ {
		ok, msg := attempt(n)
		if ok {
			return
		}
		t.Logf("attempt %d: %s: %s", n, what, msg)
		if n == 3 {
			t.Errorf("%s: %s (in 3 attempts)", what, msg)
			return
		}
		time.Sleep(2 * time.Second)
	}
}

var _ = context.Background
