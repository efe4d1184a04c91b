package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hostqos/hostqos/internal/cgroups"
	"github.com/hostqos/hostqos/internal/lab"
	"github.com/hostqos/hostqos/internal/testutil"
)

// cgroupLayouts runs test once with the daemon in each cgroup layout (in
// a private mount namespace, whatever the host has): pure cgroup v2 at
// /sys/fs/cgroup, and the hybrid layout with cgroup2 at
// /sys/fs/cgroup/unified. The test's own processes stay
// in the host's view: the hierarchy is the same.
func cgroupLayouts(t *testing.T, test func(t *testing.T, e *env)) {
	for _, l := range []struct {
		name, mount string
		wrap        []string
	}{{"pure-v2", "/sys/fs/cgroup", lab.PureCgroup2}, {"hybrid", "/sys/fs/cgroup/unified", lab.HybridCgroup2}} {
		t.Run(l.name, func(t *testing.T) {
			e := newEnv(t)
			e.d.Wrap = l.wrap
			e.startDaemon()
			if d := e.status().Daemon; d.CgroupMount != l.mount || d.CgroupMountOwn {
				t.Fatalf("status: the daemon uses the cgroup2 mount %q (own %v), want %s", d.CgroupMount, d.CgroupMountOwn, l.mount)
			}
			test(t, e)
		})
	}
}

// TestAppSelectors: rules by command name, by user, by systemd unit (its
// cgroup) and by executable mark exactly the programs they describe, in both cgroup
// layouts.
func TestAppSelectors(t *testing.T) {
	parallel(t)
	cgroupLayouts(t, appSelectors)
}

func appSelectors(t *testing.T, e *env) {
	e.hostqos("link", "set", e.iface())
	commApp := e.app("commapp")
	exeApp := e.app("exeapp")
	plain := e.app("plainapp")
	for _, d := range []string{e.dir, filepath.Dir(e.dir)} { // reachable for nobody
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// A unit's cgroup, as systemd would make it.
	root, err := cgroups.Root()
	if err != nil {
		t.Fatal(err)
	}
	// Names of this test's own (tests run in parallel).
	slice := "hqtest-" + testutil.RandHex(4) + ".slice"
	unit := "hqtest-" + strconv.Itoa(os.Getpid()) + "-" + testutil.RandHex(4) + ".service"
	unitDir := filepath.Join(root, slice, unit)
	if err := os.MkdirAll(unitDir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cgroups.RemoveTree(root, "/"+slice) })

	e.hostqos("rule", "add", "bycomm", "--comm", "commapp", "--dscp", "AF21")
	e.hostqos("rule", "add", "byuser", "--user", "nobody", "--dscp", "AF41")
	e.hostqos("rule", "add", "byunit", "--unit", unit, "--dscp", "EF")
	e.hostqos("rule", "add", "byexe", "--exe", exeApp, "--dscp", "CS5")

	sn, err := testutil.StartReceiver(e.server, e.server.Iface("client"))
	if err != nil {
		t.Fatal(err)
	}
	defer sn.Stop()
	srv := serverV4.Addr().String()
	for _, p := range []string{"7101", "7102", "7103", "7104", "7105"} {
		e.udpSink(srv+":"+p, 20*time.Second)
	}
	send := func(port string) []string {
		return []string{"tool", "udp-send", "--to", srv + ":" + port, "--pps", "200", "--count", "20", "--size", "100"}
	}
	e.runApp(commApp, send("7101")...)
	// As user nobody.
	// nsenter enters the namespace first, then becomes nobody.
	cmd := exec.Command("nsenter", append([]string{"--net=/run/netns/" + e.client.NetnsName, "-S", "65534", "-G", "65534", "--", plain}, send("7102")...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("send as nobody: %v\n%s", err, out)
	}
	// In the unit's cgroup: a shell moves itself in, then execs the app.
	if out, err := e.client.Command("sh", "-c", "echo $$ > "+filepath.Join(unitDir, "cgroup.procs")+" && exec "+plain+" "+strings.Join(send("7103"), " ")).CombinedOutput(); err != nil {
		t.Fatalf("send in unit: %v\n%s", err, out)
	}
	e.runApp(plain, send("7104")...)
	e.runApp(exeApp, send("7105")...)
	time.Sleep(300 * time.Millisecond)
	allDSCP(t, sn, unix.IPPROTO_UDP, 7101, dscpAF21, 20)
	allDSCP(t, sn, unix.IPPROTO_UDP, 7102, dscpAF41, 20)
	allDSCP(t, sn, unix.IPPROTO_UDP, 7103, dscpEF, 20)
	allDSCP(t, sn, unix.IPPROTO_UDP, 7104, 0, 20)
	allDSCP(t, sn, unix.IPPROTO_UDP, 7105, 40, 20) // CS5
}
