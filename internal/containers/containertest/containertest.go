// Package containertest runs real Podman and Docker containers for tests,
// offline and off the host's network: the image is imported from a local
// tarball (scripts/container-image.sh), Podman containers join a network
// namespace the test made (--network ns:PATH), Docker containers start
// with --network none and get their veth from the test (AddVeth).
//
// Every helper needs root; a missing runtime fails the test (CI installs
// them with scripts/install-deps.sh), it is not skipped.
package containertest

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
)

// PodmanFlags are the flags every Podman container needs here: runc (crun
// refuses hybrid cgroup layouts), the cgroupfs manager (no systemd), and
// rlimits the sandbox can set.
var PodmanFlags = []string{"--runtime", "runc", "--cgroup-manager", "cgroupfs",
	"--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1000:1000"}

// DockerFlags are the flags every Docker container needs here.
var DockerFlags = []string{"--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1000:1000"}

// RepoRoot is the directory holding go.mod, from the test's directory up.
func RepoRoot(tb testing.TB) string {
	tb.Helper()
	dir, err := os.Getwd()
	if err != nil {
		tb.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			tb.Fatal("go.mod not found above the test's directory")
		}
		dir = parent
	}
}

func run(tb testing.TB, name string, args ...string) string {
	tb.Helper()
	var out, errb bytes.Buffer
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		tb.Fatalf("%s %s: %v\n%s%s", name, strings.Join(args, " "), err, out.String(), errb.String())
	}
	return strings.TrimSpace(out.String())
}

// Image imports the test image (busybox-static and the static binaries
// given, in /bin) into rt ("podman", "docker" or "all") and returns its
// tag, localhost/hostqos-test:<hash of the contents>; a no-op when it is
// there.
func Image(tb testing.TB, rt string, binaries ...string) string {
	tb.Helper()
	out := run(tb, filepath.Join(RepoRoot(tb), "scripts", "container-image.sh"), append([]string{rt}, binaries...)...)
	lines := strings.Split(out, "\n")
	return lines[len(lines)-1]
}

// StartDocker starts Docker's daemon (scripts/dockerd.sh) unless it runs.
func StartDocker(tb testing.TB) {
	tb.Helper()
	run(tb, filepath.Join(RepoRoot(tb), "scripts", "dockerd.sh"))
}

// Name is a fresh container name with prefix.
func Name(prefix string) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return prefix + "-" + hex.EncodeToString(b)
}

// Container is a running container a test started; it is removed (killed)
// at the test's cleanup.
type Container struct {
	Runtime string // "podman" or "docker"
	ID      string
	Name    string
	PID     int
	Started time.Time // when the run command was started
	Ran     time.Time // when it returned
}

// Options of a container.
type Options struct {
	Image  string // the tag Image returned
	Name   string
	Labels map[string]string
	Cmd    []string // default: sleep 3600
	Netns  string   // Podman: the path of the network namespace to join (required)
	// CgroupParent (Podman) is the cgroup the container's goes under, e.g.
	// /kubepods/besteffort/pod<UID> as kubelet's cgroupfs driver names a
	// pod's ("": Podman's default).
	CgroupParent string
}

func (o Options) args() []string {
	args := []string{"run", "-d", "--name", o.Name}
	keys := make([]string, 0, len(o.Labels))
	for k := range o.Labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		args = append(args, "--label", k+"="+o.Labels[k])
	}
	return args
}

func (o Options) cmd() []string {
	if len(o.Cmd) == 0 {
		return []string{"sleep", "3600"}
	}
	return o.Cmd
}

// RunPodman starts a Podman container of the test image in the network
// namespace o.Netns.
func RunPodman(tb testing.TB, o Options) *Container {
	tb.Helper()
	if o.Netns == "" {
		tb.Fatal("RunPodman: Options.Netns is required (a namespace the test made)")
	}
	args := append(o.args(), PodmanFlags...)
	if o.CgroupParent != "" {
		args = append(args, "--cgroup-parent", o.CgroupParent)
	}
	args = append(args, "--network", "ns:"+o.Netns, o.Image)
	return start(tb, "podman", o.Name, append(args, o.cmd()...))
}

// RunDocker starts a Docker container of the test image with no network
// (only lo): give it a veth with AddVeth.
func RunDocker(tb testing.TB, o Options) *Container {
	tb.Helper()
	args := append(o.args(), DockerFlags...)
	args = append(args, "--network", "none", o.Image)
	return start(tb, "docker", o.Name, append(args, o.cmd()...))
}

func start(tb testing.TB, rt, name string, args []string) *Container {
	tb.Helper()
	c := &Container{Runtime: rt, Name: name, Started: time.Now()}
	tb.Cleanup(func() { c.Remove(tb) })
	c.ID = run(tb, rt, args...)
	c.Ran = time.Now()
	pid := run(tb, rt, "inspect", "--format", "{{.State.Pid}}", c.ID)
	var err error
	if c.PID, err = strconv.Atoi(pid); err != nil || c.PID <= 0 {
		tb.Fatalf("%s inspect %s: pid %q", rt, name, pid)
	}
	return c
}

// Remove kills and removes the container (again: a no-op).
func (c *Container) Remove(tb testing.TB) {
	tb.Helper()
	args := []string{"rm", "-f", c.Name}
	if c.Runtime == "podman" {
		args = []string{"rm", "-f", "-t", "0", c.Name}
	}
	out, err := exec.Command(c.Runtime, args...).CombinedOutput()
	if err != nil && !bytes.Contains(bytes.ToLower(out), []byte("no such container")) {
		tb.Errorf("%s rm %s: %v\n%s", c.Runtime, c.Name, err, out)
	}
}

// AddVeth makes a veth between the namespace of h (the host side, named
// hostName) and the container's (named inside, e.g. eth0), both up, and
// returns the host side's ifindex.
func (c *Container) AddVeth(tb testing.TB, h *netlink.Handle, hostName, inside string) int {
	tb.Helper()
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: hostName}, PeerName: inside,
		PeerNamespace: netlink.NsPid(c.PID)}
	if err := h.LinkAdd(veth); err != nil {
		tb.Fatalf("add veth %s to %s container %s: %v", hostName, c.Runtime, c.Name, err)
	}
	l, err := h.LinkByName(hostName)
	if err != nil {
		tb.Fatalf("find veth %s: %v", hostName, err)
	}
	if err := h.LinkSetUp(l); err != nil {
		tb.Fatalf("set %s up: %v", hostName, err)
	}
	return l.Attrs().Index
}

// Cgroup2 is the container process's cgroup v2 path ("" if none).
func (c *Container) Cgroup2(tb testing.TB) string {
	tb.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", c.PID))
	if err != nil {
		tb.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "0::"); ok {
			return rest
		}
	}
	return ""
}

// NeedRuntimes fails the test when a runtime is missing (CI installs
// them) and skips it without root.
func NeedRuntimes(tb testing.TB, runtimes ...string) {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skip("needs root (container runtimes, network namespaces)")
	}
	if runtime.GOOS != "linux" {
		tb.Skip("Linux only")
	}
	for _, rt := range runtimes {
		if _, err := exec.LookPath(rt); err != nil {
			tb.Fatalf("%s is not installed (scripts/install-deps.sh installs it)", rt)
		}
	}
}
