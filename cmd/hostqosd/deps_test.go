package main

import (
	"os/exec"
	"strings"
	"testing"
)

// goList runs `go list` with args in this package's directory and returns
// its output lines.
func goList(t *testing.T, args ...string) []string {
	t.Helper()
	out, err := exec.Command("go", append([]string{"list"}, args...)...).Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			t.Fatalf("go list %s: %v\n%s", strings.Join(args, " "), err, ee.Stderr)
		}
		t.Fatalf("go list %s: %v", strings.Join(args, " "), err)
	}
	return strings.Split(strings.TrimSpace(string(out)), "\n")
}

// TestDependencies keeps the dependency rules of docs/architecture.md
// true: hostqosd and the public rtchan package link no plotting, no
// terminal UI and no lab, test or fake code (benchmarks, packet
// generators, the seed's evaluation, the fake kernels) and not
// client-go's clientset (every Kubernetes API group), the CLI links
// neither cilium/ebpf nor netlink, the daemon and the engine import
// neither themselves, the engine does not import the kernel adapter it
// drives (internal/host: the engine defines the interfaces, the daemon
// wires them), and only the kernel-facing packages (datapath, shaper,
// host) and the lab and test helpers import the kernel libraries.
func TestDependencies(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command")
	}
	tooling := func(p string) bool {
		return strings.HasPrefix(p, "gonum.org/") || strings.HasPrefix(p, "github.com/gdamore/tcell") ||
			p == "github.com/hostqos/hostqos/internal/plot" || strings.HasPrefix(p, "github.com/hostqos/hostqos/internal/lab") ||
			strings.HasPrefix(p, "github.com/hostqos/hostqos/internal/test") || p == "github.com/hostqos/hostqos/internal/host/fakehost" ||
			strings.HasPrefix(p, "github.com/chromedp/") // the web view's browser test drives chromium
	}
	for name, dir := range map[string]string{"hostqosd": ".", "rtchan": "../../rtchan"} {
		for _, dep := range goList(t, "-deps", dir) {
			if tooling(dep) {
				t.Errorf("%s links %s", name, dep)
			}
			// client-go's clientset and informers register every API group
			// of Kubernetes at start: the node agent has clients of its own
			// two (internal/kube/client.go).
			if dep == "k8s.io/client-go/kubernetes/scheme" || dep == "k8s.io/client-go/informers" {
				t.Errorf("%s links %s", name, dep)
			}
		}
	}
	kernel := func(p string) bool {
		return strings.HasPrefix(p, "github.com/cilium/ebpf") || strings.HasPrefix(p, "github.com/vishvananda/netlink")
	}
	for _, dep := range goList(t, "-deps", "../hostqos") {
		if kernel(dep) {
			t.Errorf("the CLI links %s", dep)
		}
	}
	const mod = "github.com/hostqos/hostqos/"
	for _, line := range goList(t, "-f", "{{.ImportPath}} {{join .Imports \" \"}}", "../../internal/daemon", "../../internal/engine") {
		f := strings.Fields(line)
		for _, imp := range f[1:] {
			if kernel(imp) || tooling(imp) || f[0] == mod+"internal/engine" && strings.HasPrefix(imp, mod+"internal/host") {
				t.Errorf("%s imports %s", f[0], imp)
			}
		}
	}
	kernelFacing := func(p string) bool {
		for _, k := range []string{"internal/datapath", "internal/shaper", "internal/host", "internal/containers", "internal/lab", "internal/testbed", "internal/testutil"} {
			if p == mod+k || strings.HasPrefix(p, mod+k+"/") {
				return true
			}
		}
		return false
	}
	for _, line := range goList(t, "-f", "{{.ImportPath}} {{join .Imports \" \"}}", "../../...") {
		f := strings.Fields(line)
		for _, imp := range f[1:] {
			if kernel(imp) && !kernelFacing(f[0]) {
				t.Errorf("%s imports %s; only the kernel-facing packages (datapath, shaper, host, containers) and the lab and test helpers may", f[0], imp)
			}
		}
	}
}
