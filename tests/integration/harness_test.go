// Package integration runs hostqos end to end: the real hostqosd in a
// private network namespace, real BPF programs and qdiscs, real traffic to a
// receiver in another namespace, and the real CLI over the real socket.
// These tests need root; without it they skip.
package integration

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hostqos/hostqos/internal/api"
	"github.com/hostqos/hostqos/internal/testbed"
)

// binDir holds hostqos and hostqosd built once for the whole run.
var binDir string

func TestMain(m *testing.M) {
	if os.Geteuid() != 0 {
		fmt.Println("integration: not root; the end-to-end tests skip")
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "hostqos-it-bin-")
	if err != nil {
		fmt.Println("integration:", err)
		os.Exit(1)
	}
	build := exec.Command("go", "build", "-o", dir+"/", "../../cmd/hostqos", "../../cmd/hostqosd")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Printf("integration: build binaries: %v\n%s", err, out)
		os.Exit(1)
	}
	binDir = dir
	_ = testbed.CleanStale()
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces, BPF, qdiscs)")
	}
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// env is one test's world: a client host running hostqosd and a server
// host, joined by a veth pair (client→server egress is what hostqos manages).
type env struct {
	t      *testing.T
	tb     *testbed.Testbed
	client *testbed.Node
	server *testbed.Node
	dir    string // per-test scratch: config, state, socket, app copies
	bpffs  string
	sock   string
	config string
	daemon *exec.Cmd
	logf   *os.File
	cli    *api.Client
}

// Client and server addresses.
var (
	clientV4 = netip.MustParsePrefix("198.18.0.1/24")
	serverV4 = netip.MustParsePrefix("198.18.0.2/24")
	clientV6 = netip.MustParsePrefix("2001:db8::1/64")
	serverV6 = netip.MustParsePrefix("2001:db8::2/64")
)

// newEnv builds the two hosts. It does not start the daemon.
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
	t.Cleanup(func() {
		if err := tb.Close(); err != nil {
			t.Errorf("close testbed: %v", err)
		}
	})
	dir := t.TempDir()
	e := &env{
		t: t, tb: tb, client: tb.Node("client"), server: tb.Node("server"), dir: dir,
		bpffs:  "/sys/fs/bpf/hqit-" + randHex(4),
		sock:   filepath.Join(dir, "run", "hostqosd.sock"),
		config: filepath.Join(dir, "hostqos.toml"),
	}
	e.cli = api.NewClient(e.sock)
	t.Cleanup(e.teardown)
	return e
}

// iface is the client's interface towards the server.
func (e *env) iface() string { return e.client.Iface("server") }

// writeConfig writes the daemon's config file.
func (e *env) writeConfig(toml string) {
	e.t.Helper()
	if err := os.WriteFile(e.config, []byte(toml), 0o644); err != nil {
		e.t.Fatal(err)
	}
}

// daemonArgs are the flags every hostqosd of this env gets.
func (e *env) daemonArgs() []string {
	return []string{"--socket", e.sock, "--state-dir", filepath.Join(e.dir, "state"),
		"--bpffs-dir", e.bpffs, "--config", e.config}
}

// startDaemon runs hostqosd in the client namespace and waits until its API
// answers.
func (e *env) startDaemon() {
	e.t.Helper()
	if _, err := os.Stat(e.config); err != nil {
		e.writeConfig("")
	}
	logf, err := os.OpenFile(filepath.Join(e.dir, "hostqosd.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		e.t.Fatal(err)
	}
	e.logf = logf
	cmd := e.client.Command(filepath.Join(binDir, "hostqosd"), e.daemonArgs()...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		e.t.Fatalf("start hostqosd: %v", err)
	}
	e.daemon = cmd
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		var st api.Status
		err := e.cli.Get(ctx, "/v1/status", &st)
		cancel()
		if err == nil {
			// Keep reaping in the background.
			go func() { <-exited }()
			return
		}
		select {
		case werr := <-exited:
			e.daemon = nil
			e.t.Fatalf("hostqosd exited during start: %v\n%s", werr, e.daemonLog())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("hostqosd did not answer within 20 s: %v\n%s", err, e.daemonLog())
		}
	}
}

// killDaemon sends sig to the daemon and waits until it is gone.
func (e *env) killDaemon(sig syscall.Signal) {
	e.t.Helper()
	if e.daemon == nil || e.daemon.Process == nil {
		return
	}
	// nsenter execs hostqosd, so the pid is the daemon's.
	_ = e.daemon.Process.Signal(sig)
	for i := 0; i < 100; i++ {
		if err := syscall.Kill(e.daemon.Process.Pid, 0); err != nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	e.daemon = nil
}

func (e *env) daemonLog() string {
	data, _ := os.ReadFile(filepath.Join(e.dir, "hostqosd.log"))
	return string(data)
}

// teardown stops the daemon and removes whatever hostqos left.
func (e *env) teardown() {
	e.killDaemon(syscall.SIGTERM)
	down := e.client.Command(filepath.Join(binDir, "hostqosd"), append([]string{"down"}, e.daemonArgs()...)...)
	if out, err := down.CombinedOutput(); err != nil {
		e.t.Logf("hostqosd down: %v\n%s", err, out)
	}
	if e.logf != nil {
		e.logf.Close()
	}
	if e.t.Failed() {
		e.t.Logf("hostqosd log:\n%s", e.daemonLog())
	}
	os.RemoveAll(e.bpffs)
}

// hostqos runs the CLI (in the client namespace) and returns its output;
// it fails the test on a non-zero exit.
func (e *env) hostqos(args ...string) string {
	e.t.Helper()
	out, err := e.hostqosErr(args...)
	if err != nil {
		e.t.Fatalf("hostqos %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// hostqosErr runs the CLI and returns its combined output and exit error.
func (e *env) hostqosErr(args ...string) (string, error) {
	cmd := e.client.Command(filepath.Join(binDir, "hostqos"), append([]string{"--socket", e.sock}, args...)...)
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	err := cmd.Run()
	return buf.String(), err
}

// hostqosJSON runs the CLI with -o json and decodes the answer.
func (e *env) hostqosJSON(out any, args ...string) {
	e.t.Helper()
	cmd := e.client.Command(filepath.Join(binDir, "hostqos"), append(append([]string{"--socket", e.sock}, args...), "-o", "json")...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		e.t.Fatalf("hostqos %s -o json: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	if err := json.Unmarshal(stdout.Bytes(), out); err != nil {
		e.t.Fatalf("decode output of hostqos %s: %v\n%s", strings.Join(args, " "), err, stdout.String())
	}
}

// app copies the hostqos binary to a new file: a distinct executable
// (its own inode) that exe rules can name. It is a static binary (built
// with CGO_ENABLED=0); its `tool` subcommands generate the traffic.
func (e *env) app(name string) string {
	e.t.Helper()
	src, err := os.Open(filepath.Join(binDir, "hostqos"))
	if err != nil {
		e.t.Fatal(err)
	}
	defer src.Close()
	dst := filepath.Join(e.dir, name)
	f, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := io.Copy(f, src); err != nil {
		e.t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		e.t.Fatal(err)
	}
	return dst
}

// start runs a program in the client namespace in the background.
func (e *env) start(name string, args ...string) (*exec.Cmd, *bytes.Buffer) {
	e.t.Helper()
	cmd := e.client.Command(name, args...)
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	if err := cmd.Start(); err != nil {
		e.t.Fatalf("start %s: %v", name, err)
	}
	e.t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	return cmd, &buf
}

// runApp runs a program in the client namespace to completion.
func (e *env) runApp(name string, args ...string) string {
	e.t.Helper()
	cmd := e.client.Command(name, args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		e.t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// status reads the daemon's status through the API.
func (e *env) status() api.Status {
	e.t.Helper()
	var st api.Status
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.cli.Get(ctx, "/v1/status", &st); err != nil {
		e.t.Fatalf("status: %v", err)
	}
	return st
}

// ruleStat returns the counters of one rule.
func (e *env) ruleStat(name string) api.RuleStat {
	e.t.Helper()
	var s api.Stats
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.cli.Get(ctx, "/v1/stats/rules", &s); err != nil {
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
