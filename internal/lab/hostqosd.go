// Package lab runs the real hostqos daemon and CLI inside testbed nodes. The
// integration tests, the demo and the benchmarks all start hostqos this
// way, so there is one way to do it.
package lab

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/testbed"
)

// Daemon is a hostqosd running in a testbed node, with private paths so
// that several can run at once and none touches the host's hostqos.
type Daemon struct {
	Node   *testbed.Node
	BinDir string // where hostqos and hostqosd are
	Dir    string // scratch: config, state, socket, log
	BPFFS  string
	Socket string
	Config string
	Client *api.Client
	// IPNetnsExec starts hostqosd (and hostqosd down) with `ip netns exec`
	// instead of nsenter --net: in a mount namespace of its own with a
	// fresh /sys, without the host's cgroup2 and bpffs mounts.
	IPNetnsExec bool
	// Wrap, when set, is a command (with its arguments) that runs
	// hostqosd and hostqosd down inside the node: it gets hostqosd's path
	// and arguments appended and must exec it (keep its pid), like
	// setpriv or unshare do. PureCgroup2 and the service-unit tests use it.
	Wrap []string
	// ExtraArgs are more flags for hostqosd (not for hostqosd down).
	ExtraArgs []string
	cmd       *exec.Cmd
	exited    chan error
	logFile   *os.File
}

// NewDaemon prepares (does not start) a daemon for node. dir must exist.
func NewDaemon(node *testbed.Node, binDir, dir string) *Daemon {
	var b [4]byte
	_, _ = rand.Read(b[:])
	d := &Daemon{
		Node: node, BinDir: binDir, Dir: dir,
		BPFFS:  "/sys/fs/bpf/hqlab-" + hex.EncodeToString(b[:]),
		Socket: filepath.Join(dir, "run", "hostqosd.sock"),
		Config: filepath.Join(dir, "hostqos.toml"),
	}
	d.Client = api.NewClient(d.Socket)
	return d
}

// Args are the flags every hostqosd (and hostqosd down) of this daemon gets.
func (d *Daemon) Args() []string {
	return []string{"--socket", d.Socket, "--state-dir", filepath.Join(d.Dir, "state"),
		"--bpffs-dir", d.BPFFS, "--config", d.Config}
}

// WriteConfig writes the policy file.
func (d *Daemon) WriteConfig(toml string) error {
	if err := os.WriteFile(d.Config, []byte(toml), 0o644); err != nil {
		return fmt.Errorf("write config %s: %w", d.Config, err)
	}
	return nil
}

// startTimeout is how long Start waits for the daemon's API.
const startTimeout = 60 * time.Second

// Start runs hostqosd in the node and waits until its API answers.
func (d *Daemon) Start() error {
	if _, err := os.Stat(d.Config); err != nil {
		if err := d.WriteConfig(""); err != nil {
			return err
		}
	}
	logf, err := os.OpenFile(d.LogPath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("open daemon log: %w", err)
	}
	d.logFile = logf
	cmd := d.daemonCommand(append(d.Args(), d.ExtraArgs...)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start hostqosd: %w", err)
	}
	d.cmd = cmd
	d.exited = make(chan error, 1)
	go func() { d.exited <- cmd.Wait() }()
	// A daemon answers within a second or two once the kernel has
	// verified its programs; the bound only ends a start that hangs, so
	// it leaves room for a verifier sharing a loaded 2-core machine with
	// other tests' (parallel tests, other helpers' runs).
	deadline := time.Now().Add(startTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := d.Client.Status(ctx)
		cancel()
		if err == nil {
			return d.mark()
		}
		select {
		case werr := <-d.exited:
			d.cmd = nil
			return fmt.Errorf("hostqosd exited during start: %v\n%s", werr, d.Log())
		case <-time.After(25 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("hostqosd did not answer within %v: %v\n%s", startTimeout, err, d.Log())
		}
	}
}

// PID is the daemon's process id (0 when not running).
func (d *Daemon) PID() int {
	if d.cmd == nil || d.cmd.Process == nil {
		return 0
	}
	return d.cmd.Process.Pid // nsenter and ip netns exec exec hostqosd: same pid
}

// daemonCommand runs hostqosd with args in the node (see IPNetnsExec).
func (d *Daemon) daemonCommand(args ...string) *exec.Cmd {
	bin := filepath.Join(d.BinDir, "hostqosd")
	if len(d.Wrap) > 0 {
		args = append(append(append([]string{}, d.Wrap[1:]...), bin), args...)
		bin = d.Wrap[0]
	}
	if d.IPNetnsExec {
		return exec.Command("ip", append([]string{"netns", "exec", d.Node.NetnsName, bin}, args...)...)
	}
	return d.Node.Command(bin, args...)
}

// PureCgroup2 is a Wrap that runs hostqosd in a private mount namespace
// with the pure cgroup v2 layout most distributions have: whatever is
// mounted at /sys/fs/cgroup (here the hybrid layout's tmpfs, v1
// hierarchies and .../unified) is unmounted there and cgroup2 mounted at
// /sys/fs/cgroup itself. It is the same hierarchy (same cgroup ids) as the
// host's cgroup2 mount; the host's mount table is not touched.
//
// HybridCgroup2 is the other layout (systemd's hybrid, what older
// distributions have): a tmpfs at /sys/fs/cgroup with cgroup2 at
// /sys/fs/cgroup/unified. Tests run the daemon under both, whatever the
// host has.
var (
	PureCgroup2   = cgroupLayout(`mount -t cgroup2 cgroup2 /sys/fs/cgroup`)
	HybridCgroup2 = cgroupLayout(`mount -t tmpfs -o mode=0755 cgroup /sys/fs/cgroup && mkdir /sys/fs/cgroup/unified && mount -t cgroup2 cgroup2 /sys/fs/cgroup/unified`)
)

func cgroupLayout(mount string) []string {
	return []string{"unshare", "--mount", "--propagation", "private", "--", "sh", "-c",
		`umount -R /sys/fs/cgroup 2>/dev/null; ` + mount + ` && exec "$@"`, "cgroup-layout"}
}

// Signal sends sig and, for SIGTERM/SIGKILL, waits until the daemon is gone.
func (d *Daemon) Signal(sig syscall.Signal) error {
	if d.cmd == nil {
		return nil
	}
	if err := d.cmd.Process.Signal(sig); err != nil {
		if errors.Is(err, os.ErrProcessDone) {
			<-d.exited
			unmark(d.cmd.Process.Pid)
			d.cmd = nil
			return nil
		}
		return fmt.Errorf("signal hostqosd: %w", err)
	}
	if sig != syscall.SIGTERM && sig != syscall.SIGKILL {
		return nil
	}
	pid := d.cmd.Process.Pid
	defer unmark(pid)
	select {
	case <-d.exited:
	case <-time.After(10 * time.Second):
		return fmt.Errorf("hostqosd still running 10 s after %v", sig)
	}
	d.cmd = nil
	return nil
}

// Stop ends the daemon (SIGTERM) and removes everything hostqos made
// (hostqosd down), leaving the node as it was.
func (d *Daemon) Stop() error {
	err := d.Signal(syscall.SIGTERM)
	down := d.daemonCommand(append([]string{"down"}, d.Args()...)...)
	if out, derr := down.CombinedOutput(); derr != nil && err == nil {
		err = fmt.Errorf("hostqosd down: %v: %s", derr, out)
	}
	if d.logFile != nil {
		d.logFile.Close()
		d.logFile = nil
	}
	os.RemoveAll(d.BPFFS)
	return err
}

// LogPath is the daemon's log file.
func (d *Daemon) LogPath() string { return filepath.Join(d.Dir, "hostqosd.log") }

// Log returns the daemon's log so far.
func (d *Daemon) Log() string {
	data, _ := os.ReadFile(d.LogPath())
	return string(data)
}

// CLI runs `hostqos --socket S args...` inside the node; it returns the
// combined output and the exit error.
func (d *Daemon) CLI(args ...string) (string, error) {
	cmd := d.Node.Command(filepath.Join(d.BinDir, "hostqos"), append([]string{"--socket", d.Socket}, args...)...)
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	err := cmd.Run()
	if err != nil {
		return buf.String(), fmt.Errorf("hostqos %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(buf.String()))
	}
	return buf.String(), nil
}

// CLIJSON runs the CLI with -o json and decodes its answer into out.
func (d *Daemon) CLIJSON(out any, args ...string) error {
	cmd := d.Node.Command(filepath.Join(d.BinDir, "hostqos"), append(append([]string{"--socket", d.Socket}, args...), "-o", "json")...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("hostqos %s -o json: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	if err := json.Unmarshal(stdout.Bytes(), out); err != nil {
		return fmt.Errorf("decode output of hostqos %s: %w", strings.Join(args, " "), err)
	}
	return nil
}

// Stats reads /v1/stats/{kind}.
func (d *Daemon) Stats(kind string) (api.Stats, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return d.Client.Stats().Get(ctx, kind)
}

// Status reads /v1/status.
func (d *Daemon) Status() (api.Status, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return d.Client.Status(ctx)
}

// BuildBinaries compiles hostqos, hostqosd (static, CGO off) into dir from
// the module rooted at modRoot. Programs that ship next to the binaries
// (the demo, the benchmarks) use their own directory instead.
func BuildBinaries(modRoot, dir string) error {
	build := exec.Command("go", "build", "-o", dir+"/", "./cmd/hostqos", "./cmd/hostqosd")
	build.Dir = modRoot
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("build hostqos binaries: %v\n%s", err, out)
	}
	return nil
}

// BinEnv names a directory holding hostqos and hostqosd already built for
// the tests: make test sets it to bin/, which its build target has just
// made, so that the packages that run the daemon do not build their own.
const BinEnv = "HOSTQOS_BIN"

// TestBinaries puts hostqos and hostqosd into dir (a test's scratch
// directory) for a test run: copies of those in $HOSTQOS_BIN when it is set
// (they must be there), else a build from the module at modRoot. Copies,
// not the directory itself: tests open their binaries to other users and
// copy them, and a checkout may be out of an ordinary user's reach.
func TestBinaries(modRoot, dir string) error {
	from := os.Getenv(BinEnv)
	if from == "" {
		return BuildBinaries(modRoot, dir)
	}
	if !HasBinaries(from) {
		return fmt.Errorf("use the binaries of %s=%s: hostqos and hostqosd not there (make build makes them)", BinEnv, from)
	}
	for _, b := range []string{"hostqos", "hostqosd"} {
		if err := CopyExecutable(filepath.Join(from, b), filepath.Join(dir, b)); err != nil {
			return err
		}
	}
	return nil
}

// CopyExecutable copies the binary at src to dst as a new file: a distinct
// executable (its own inode) that exe rules can name. The copy is written
// holding syscall.ForkLock for reading, so that no process this program
// starts meanwhile (a parallel test's) inherits the open file: running the
// copy would then fail with "text file busy" until that process execs.
func CopyExecutable(src, dst string) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return fmt.Errorf("copy executable %s: %w", src, err)
	}
	syscall.ForkLock.RLock()
	err = os.WriteFile(dst, data, 0o755)
	syscall.ForkLock.RUnlock()
	if err != nil {
		return fmt.Errorf("copy executable to %s: %w", dst, err)
	}
	return nil
}

// HasBinaries reports whether dir holds executable hostqos and hostqosd.
func HasBinaries(dir string) bool {
	for _, b := range []string{"hostqos", "hostqosd"} {
		st, err := os.Stat(filepath.Join(dir, b))
		if err != nil || !st.Mode().IsRegular() || st.Mode()&0o111 == 0 {
			return false
		}
	}
	return true
}

// FindBinaries returns the directory holding hostqos and hostqosd: that of
// the executable self ("" means this program's), else that of hostqosd in
// PATH. Programs that ship next to them (hostqos-lab) find them this way.
func FindBinaries(self string) (string, error) {
	if self == "" {
		self, _ = os.Executable()
	}
	if self != "" && HasBinaries(filepath.Dir(self)) {
		return filepath.Dir(self), nil
	}
	if p, err := exec.LookPath("hostqosd"); err == nil && HasBinaries(filepath.Dir(p)) {
		return filepath.Dir(p), nil
	}
	return "", fmt.Errorf("find hostqos and hostqosd: not next to %s nor in PATH; run make build (it puts hostqos, hostqosd and hostqos-lab in bin/)", self)
}
