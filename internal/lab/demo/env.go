package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/hostqos/hostqos/internal/cgroups"
	"github.com/hostqos/hostqos/internal/lab"
	"github.com/hostqos/hostqos/internal/testbed"
)

func mp(s string) netip.Prefix { return netip.MustParsePrefix(s) }

// serverAddr is the server's address in the demo topology (IPv4 only,
// from 198.18.0.0/15; see starTopology for the others).
var serverAddr = netip.MustParseAddr("198.18.2.2")

// starTopology is
//
//	client ── router ══ server       (══ = bottleneck, DiffServ egress)
//	            │
//	          cross
//
// The bottleneck is the router's egress towards the server; 0 = none.
func starTopology(name string, bottleneck uint64, withCross bool) testbed.Topology {
	t := testbed.Topology{
		Name:  name,
		Nodes: []testbed.NodeSpec{{Name: "client"}, {Name: "router", Router: true}, {Name: "server"}},
		Links: []testbed.LinkSpec{
			{A: "client", B: "router", AAddrs: []netip.Prefix{mp("198.18.1.1/24")}, BAddrs: []netip.Prefix{mp("198.18.1.2/24")}},
			{A: "router", B: "server", AAddrs: []netip.Prefix{mp("198.18.2.1/24")}, BAddrs: []netip.Prefix{mp("198.18.2.2/24")},
				RateAtoB: bottleneck, DiffServAtoB: bottleneck > 0},
		},
	}
	if withCross {
		t.Nodes = append(t.Nodes, testbed.NodeSpec{Name: "cross"})
		t.Links = append(t.Links, testbed.LinkSpec{A: "cross", B: "router",
			AAddrs: []netip.Prefix{mp("198.18.3.1/24")}, BAddrs: []netip.Prefix{mp("198.18.3.2/24")}})
	}
	return t
}

// build creates the testbed and registers its removal.
func (r *runner) build(t testbed.Topology) (*testbed.Testbed, error) {
	tb, err := testbed.Build(t, testbed.WithLogger(r.opts.Log))
	if err != nil {
		return nil, fmt.Errorf("build testbed %s: %w", t.Name, err)
	}
	r.onCleanup("remove testbed "+t.Name, tb.Close)
	for _, n := range tb.Nodes() {
		r.addCreated(filepath.Join("/run/netns", n.NetnsName), filepath.Join(testbed.MarkerDir, n.NetnsName+".pid"))
	}
	return tb, nil
}

// startDaemon runs the real hostqosd in node and registers its stop
// (SIGTERM, then `hostqosd down`: qdiscs, programs, pins, cgroups).
func (r *runner) startDaemon(node *testbed.Node) (*lab.Daemon, error) {
	dir := filepath.Join(r.scratch, "hostqosd-"+node.NetnsName) // one per testbed: a scenario may build two
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create daemon directory: %w", err)
	}
	d := lab.NewDaemon(node, r.opts.BinDir, dir)
	var ino uint64
	var st syscall.Stat_t
	if syscall.Stat(filepath.Join("/run/netns", node.NetnsName), &st) == nil {
		ino = st.Ino
	}
	r.addCreated(d.BPFFS)
	if root, err := cgroups.Root(); err == nil && ino != 0 {
		r.addCreated(filepath.Join(root, cgroups.NetnsDir(ino)))
	}
	// Registered before Start so that a half-started daemon is removed too.
	// The daemon records itself for lab.CleanStale once it runs.
	r.onCleanup("stop hostqosd", d.Stop)
	if err := d.Start(); err != nil {
		return nil, err
	}
	return d, nil
}

// cli runs one hostqos CLI command against d and reports it as progress.
func (r *runner) cli(d *lab.Daemon, args ...string) error {
	r.progress("      $ hostqos %s", strings.Join(args, " "))
	_, err := d.CLI(args...)
	return err
}

// app is a generator process inside a node.
type app struct {
	name   string
	cmd    *exec.Cmd
	stdout bytes.Buffer
	stderr bytes.Buffer
	done   chan struct{}
	err    error
}

// copyApp makes a distinct executable (its own inode) for an app, so an
// exe rule can select it: a copy of the hostqos binary, whose `tool`
// subcommands are the generators.
func (r *runner) copyApp(name string) (string, error) {
	dst := filepath.Join(r.scratch, name)
	if _, err := os.Stat(dst); err == nil {
		return dst, nil
	}
	if err := lab.CopyExecutable(filepath.Join(r.opts.BinDir, "hostqos"), dst); err != nil {
		return "", err
	}
	return dst, nil
}

// startApp runs exe args... in node. The process is killed when the run is
// cancelled and at cleanup if it is still running.
func (r *runner) startApp(node *testbed.Node, name, exe string, args ...string) (*app, error) {
	a := &app{name: name, cmd: node.Command(exe, args...), done: make(chan struct{})}
	a.cmd.Stdout, a.cmd.Stderr = &a.stdout, &a.stderr
	setPgid(a.cmd)
	if err := a.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() {
		a.err = a.cmd.Wait()
		close(a.done)
	}()
	kill := func() error {
		select {
		case <-a.done:
		default:
			_ = syscall.Kill(-a.cmd.Process.Pid, syscall.SIGKILL)
			<-a.done
		}
		return nil
	}
	go func() {
		select {
		case <-r.ctx.Done():
			_ = kill()
		case <-a.done:
		}
	}()
	r.onCleanup("stop "+name, kill)
	return a, nil
}

// wait waits for the app to end (at most timeout) and decodes its JSON
// output into out (if not nil).
func (a *app) wait(ctx context.Context, timeout time.Duration, out any) error {
	select {
	case <-a.done:
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(timeout):
		_ = syscall.Kill(-a.cmd.Process.Pid, syscall.SIGKILL)
		<-a.done
		return fmt.Errorf("%s did not end within %v", a.name, timeout)
	}
	if a.err != nil {
		return fmt.Errorf("%s: %w: %s", a.name, a.err, strings.TrimSpace(a.stderr.String()))
	}
	if out != nil {
		if err := json.Unmarshal(a.stdout.Bytes(), out); err != nil {
			return fmt.Errorf("decode the output of %s: %w: %q", a.name, err, truncate(a.stdout.String(), 300))
		}
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode %s: %w", path, err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

func hp(a netip.Addr, port uint16) string { return netip.AddrPortFrom(a, port).String() }

func secs(d time.Duration) string { return fmt.Sprintf("%gs", d.Seconds()) }
