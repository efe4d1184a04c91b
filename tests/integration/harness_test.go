// Package integration runs hostqos end to end: the real hostqosd in a
// private network namespace, real BPF programs and qdiscs, real traffic to a
// receiver in another namespace, and the real CLI over the real socket.
// These tests need root; without it they skip.
package integration

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/lab"
	"github.com/hostqos/hostqos/internal/testbed"
	"github.com/hostqos/hostqos/internal/testutil"
	"github.com/hostqos/hostqos/internal/testutil/daemontest"
)

// binDir holds hostqos and hostqosd for the whole run (lab.TestBinaries:
// those make test built, or built here).
var binDir string

func TestMain(m *testing.M) {
	if os.Getenv(attackerEnv) != "" { // the test binary as an ordinary user's program (userrun_test.go)
		os.Exit(attackerMain())
	}
	if os.Getenv(downloaderEnv) != "" { // the test binary as a downloading app (receive_test.go)
		os.Exit(downloaderMain())
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
	if err := lab.TestBinaries("../..", dir); err != nil {
		fmt.Println("integration:", err)
		os.Exit(1)
	}
	binDir = dir
	testutil.OnSignal(func() { os.RemoveAll(dir) })
	if n, err := daemontest.CleanStale(); err != nil || n > 0 {
		fmt.Printf("integration: cleaned %d stale daemon(s) of killed runs (%v)\n", n, err)
	}
	code := m.Run()
	if err := stopShared(); err != nil {
		fmt.Println("integration: stop the shared daemons:", err)
		code = max(code, 1)
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

// env is one test's world: a client host running hostqosd and a server
// host, joined by a veth pair; the client's egress is what hostqos manages.
type env struct {
	t      *testing.T
	client *testbed.Node
	server *testbed.Node
	dir    string
	d      *lab.Daemon
	cli    *api.Client
}

// Addresses of the two hosts.
var (
	clientV4 = testutil.PairA4
	serverV4 = testutil.PairB4
	serverV6 = testutil.PairB6
)

// newEnv builds the two hosts (a testutil pair); the daemon is prepared,
// not started. Both are removed at cleanup, and on SIGINT or SIGTERM. A
// test that checks only what the API or the CLI answers takes the running
// shared daemon instead (sharedEnv, shared_test.go).
func newEnv(t *testing.T) *env {
	t.Helper()
	p := testutil.NewPairNamed(t, "client", "server")
	e := &env{t: t, client: p.A.Node, server: p.B.Node}
	e.d = daemontest.New(t, e.client, binDir)
	e.dir = e.d.Dir
	e.cli = e.d.Client
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

// parallel marks a test that measures no rate, latency or memory (one
// that checks marks, counts, state and cleanup): it runs beside another
// such test (up to -parallel, GOMAXPROCS by default) after the package's
// other tests are done, never beside a measurement. Most of its time is
// the kernel verifying the daemon's BPF programs on one core. Names it
// makes outside its namespaces and scratch directory (cgroups, mounts)
// must be its own.
func parallel(t *testing.T) { t.Parallel() }

// measured runs a measurement that a stall of the shared VM can spoil, up
// to three times (testutil.Measured); it passes when one attempt passes.
// A real regression fails every attempt.
func measured(t *testing.T, what string, attempt func(n int) (ok bool, msg string)) {
	t.Helper()
	testutil.Measured(t, what, 3, attempt)
}

var _ = context.Background
