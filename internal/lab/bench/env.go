package bench

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/hostqos/hostqos/internal/cgroups"
	"github.com/hostqos/hostqos/internal/lab"
	"github.com/hostqos/hostqos/internal/testbed"
)

// env is what the benchmarks of one run share: binaries, a scratch
// directory, options.
type env struct {
	ctx      context.Context
	opts     Options
	quick    bool
	binDir   string
	self     string
	scratch  string
	progress io.Writer
	log      *slog.Logger
}

func newEnv(ctx context.Context, opts Options) (*env, error) {
	e := &env{ctx: ctx, opts: opts, quick: opts.Quick, progress: opts.Progress, log: opts.Log}
	if e.progress == nil {
		e.progress = io.Discard
	}
	if e.log == nil {
		e.log = slog.Default()
	}
	e.self = opts.Self
	if e.self == "" {
		s, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("find own executable: %w", err)
		}
		e.self = s
	}
	e.binDir = opts.BinDir
	if e.binDir == "" {
		d, err := lab.FindBinaries(e.self)
		if err != nil {
			return nil, err
		}
		e.binDir = d
	}
	if !lab.HasBinaries(e.binDir) {
		return nil, fmt.Errorf("find hostqos and hostqosd in %s: missing or not executable; build them with `make build`", e.binDir)
	}
	dir, err := os.MkdirTemp("", "hostqos-bench-")
	if err != nil {
		return nil, fmt.Errorf("create scratch directory: %w", err)
	}
	e.scratch = dir
	return e, nil
}

func (e *env) close() { os.RemoveAll(e.scratch) }

func (e *env) printf(format string, a ...any) { fmt.Fprintf(e.progress, format, a...) }

// dur picks the full or the quick value.
func (e *env) dur(full, quick time.Duration) time.Duration {
	if e.quick {
		return quick
	}
	return full
}

func (e *env) n(full, quick int) int {
	if e.quick {
		return quick
	}
	return full
}

// app makes a distinct copy of the helper executable (its own inode, so an
// exe rule can name it) and returns its path.
func (e *env) app(name string) (string, error) {
	p := filepath.Join(e.scratch, name)
	if _, err := os.Stat(p); err == nil {
		return p, nil
	}
	if err := lab.CopyExecutable(e.self, p); err != nil {
		return "", err
	}
	return p, nil
}

// testbed builds a two-node topology a—b with one veth, a = 198.18.0.1,
// b = 198.18.0.2 (and 2001:db8::1/2), no rate limit.
func (e *env) pair(name, a, b string) (*testbed.Testbed, error) {
	tb, err := testbed.Build(testbed.Topology{
		Name:  name,
		Nodes: []testbed.NodeSpec{{Name: a}, {Name: b}},
		Links: []testbed.LinkSpec{{
			A: a, B: b,
			AAddrs: []netip.Prefix{netip.MustParsePrefix("198.18.0.1/24"), netip.MustParsePrefix("2001:db8::1/64")},
			BAddrs: []netip.Prefix{netip.MustParsePrefix("198.18.0.2/24"), netip.MustParsePrefix("2001:db8::2/64")},
		}},
	}, testbed.WithLogger(e.log))
	if err != nil {
		return nil, fmt.Errorf("build testbed %s: %w", name, err)
	}
	return tb, nil
}

// daemon starts the real hostqosd in node with the given TOML policy.
func (e *env) daemon(node *testbed.Node, toml string) (*lab.Daemon, error) {
	dir, err := os.MkdirTemp(e.scratch, "hostqosd-")
	if err != nil {
		return nil, fmt.Errorf("create daemon directory: %w", err)
	}
	d := lab.NewDaemon(node, e.binDir, dir)
	if err := d.WriteConfig(toml); err != nil {
		return nil, err
	}
	if err := d.Start(); err != nil {
		_ = d.Stop()
		return nil, err
	}
	return d, nil
}

// helperResult runs `exe bench-helper sub args...` in node and decodes its
// JSON answer into out.
func (e *env) helper(node *testbed.Node, exe string, out any, sub string, args ...string) error {
	cmd := e.helperCmd(node, exe, sub, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("run helper %s %s: %w: %s", filepath.Base(exe), sub, err, strings.TrimSpace(stderr.String()))
	}
	if err := json.Unmarshal(stdout.Bytes(), out); err != nil {
		return fmt.Errorf("decode output of helper %s: %w (%q)", sub, err, stdout.String())
	}
	return nil
}

func (e *env) helperCmd(node *testbed.Node, exe, sub string, args ...string) *exec.Cmd {
	cmd := node.Command(exe, append([]string{HelperCommand, sub}, args...)...)
	cmd.Env = append(os.Environ(), HelperEnv+"=1")
	return cmd
}

// startHelper starts a helper and returns a wait function that decodes its
// answer.
func (e *env) startHelper(node *testbed.Node, exe string, sub string, args ...string) (func(out any) error, error) {
	wait, _, err := e.startHelperPID(node, exe, sub, args...)
	return wait, err
}

// startHelperPID is startHelper that also returns the helper's pid.
func (e *env) startHelperPID(node *testbed.Node, exe string, sub string, args ...string) (func(out any) error, int, error) {
	cmd := e.helperCmd(node, exe, sub, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		return nil, 0, fmt.Errorf("start helper %s: %w", sub, err)
	}
	return func(out any) error {
		if err := cmd.Wait(); err != nil {
			return fmt.Errorf("run helper %s %s: %w: %s", filepath.Base(exe), sub, err, strings.TrimSpace(stderr.String()))
		}
		if out == nil {
			return nil
		}
		if err := json.Unmarshal(stdout.Bytes(), out); err != nil {
			return fmt.Errorf("decode output of helper %s: %w (%q)", sub, err, stdout.String())
		}
		return nil
	}, cmd.Process.Pid, nil
}

// run runs a command in node and returns an error with its output.
func run(node *testbed.Node, name string, args ...string) error {
	out, err := node.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("run %s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// ---- kernel counters read inside a node ----

// ifStats are an interface's counters from /proc/net/dev.
type ifStats struct {
	RxBytes, RxPackets, RxDrops uint64
	TxBytes, TxPackets, TxDrops uint64
}

// netdev reads iface's counters in node's namespace.
func netdev(node *testbed.Node, iface string) (ifStats, error) {
	var st ifStats
	var data []byte
	err := node.Do(func() error {
		var err error
		data, err = os.ReadFile("/proc/thread-self/net/dev")
		return err
	})
	if err != nil {
		return st, fmt.Errorf("read /proc/net/dev in %s: %w", node.Name, err)
	}
	for _, l := range strings.Split(string(data), "\n") {
		name, rest, ok := strings.Cut(l, ":")
		if !ok || strings.TrimSpace(name) != iface {
			continue
		}
		f := strings.Fields(rest)
		if len(f) < 12 {
			break
		}
		u := func(i int) uint64 { v, _ := strconv.ParseUint(f[i], 10, 64); return v }
		st = ifStats{RxBytes: u(0), RxPackets: u(1), RxDrops: u(3), TxBytes: u(8), TxPackets: u(9), TxDrops: u(11)}
		return st, nil
	}
	return st, fmt.Errorf("read counters of %s in %s: no such interface", iface, node.Name)
}

// snmp reads /proc/net/snmp and /proc/net/netstat in node as
// "Proto.Field" → value (e.g. "Tcp.RetransSegs", "TcpExt.ListenDrops").
func snmp(node *testbed.Node) (map[string]uint64, error) {
	out := map[string]uint64{}
	err := node.Do(func() error {
		for _, f := range []string{"/proc/thread-self/net/snmp", "/proc/thread-self/net/netstat"} {
			data, err := os.ReadFile(f)
			if err != nil {
				return err
			}
			lines := strings.Split(string(data), "\n")
			for i := 0; i+1 < len(lines); i += 2 {
				h, v := strings.Fields(lines[i]), strings.Fields(lines[i+1])
				if len(h) != len(v) || len(h) == 0 {
					continue
				}
				proto := strings.TrimSuffix(h[0], ":")
				for j := 1; j < len(h); j++ {
					n, _ := strconv.ParseInt(v[j], 10, 64)
					out[proto+"."+h[j]] = uint64(n)
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read SNMP counters in %s: %w", node.Name, err)
	}
	return out, nil
}

// ---- cgroups ----

// benchCgroup creates a cgroup v2 directory for the run; it returns its
// absolute path, its path relative to the cgroup2 mount, and a remover.
func benchCgroup() (abs, rel string, remove func(), err error) {
	root, err := cgroups.Root()
	if err != nil {
		return "", "", nil, fmt.Errorf("find the cgroup2 mount: %w", err)
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	rel = "hqbench-" + hex.EncodeToString(b[:])
	abs = filepath.Join(root, rel)
	if err := os.Mkdir(abs, 0o755); err != nil {
		return "", "", nil, fmt.Errorf("create cgroup %s: %w", abs, err)
	}
	return abs, rel, func() {
		// Processes are gone by now; retry briefly while the kernel
		// finishes releasing them.
		for i := 0; i < 50; i++ {
			if err := os.Remove(abs); err == nil || errors.Is(err, os.ErrNotExist) {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}, nil
}

// ---- process memory ----

// procRSS is VmRSS of pid in bytes.
func procRSS(pid int) (uint64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("read status of pid %d: %w", pid, err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			f := strings.Fields(v)
			if len(f) >= 1 {
				kb, _ := strconv.ParseUint(f[0], 10, 64)
				return kb * 1024, nil
			}
		}
	}
	return 0, fmt.Errorf("read VmRSS of pid %d: not found", pid)
}

// bpfMap is one BPF map a process holds, from /proc/PID/fdinfo.
type bpfMap struct {
	ID, Type, MaxEntries, KeySize, ValueSize uint64
	Memlock                                  uint64
}

// procBPFMaps lists the distinct BPF maps pid holds open.
func procBPFMaps(pid int) ([]bpfMap, error) {
	dir := fmt.Sprintf("/proc/%d/fdinfo", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", dir, err)
	}
	seen := map[uint64]bool{}
	var out []bpfMap
	for _, ent := range ents {
		data, err := os.ReadFile(filepath.Join(dir, ent.Name()))
		if err != nil || !bytes.Contains(data, []byte("map_type:")) {
			continue
		}
		var m bpfMap
		for _, l := range strings.Split(string(data), "\n") {
			k, v, ok := strings.Cut(l, ":")
			if !ok {
				continue
			}
			n, _ := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			switch k {
			case "map_id":
				m.ID = n
			case "map_type":
				m.Type = n
			case "max_entries":
				m.MaxEntries = n
			case "key_size":
				m.KeySize = n
			case "value_size":
				m.ValueSize = n
			case "memlock":
				m.Memlock = n
			}
		}
		if m.ID == 0 || seen[m.ID] {
			continue
		}
		seen[m.ID] = true
		out = append(out, m)
	}
	return out, nil
}

// execOut runs a command in the host namespace and returns its combined
// output.
func execOut(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}
