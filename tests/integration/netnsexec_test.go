package integration

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hostqos/hostqos/internal/cgroups"
	"github.com/hostqos/hostqos/internal/testutil"
)

// TestDaemonUnderIPNetnsExec: hostqosd started with `ip netns exec` (a
// mount namespace of its own with a fresh /sys: no cgroup2, no bpffs)
// mounts what it needs itself, says so in status — and that its pins go
// away with it — and marks a static binary under `hostqos run --dscp AF41`
// from its first packet. The host's mount table is left as it was.
func TestDaemonUnderIPNetnsExec(t *testing.T) {
	parallel(t)
	e := newEnv(t)
	e.d.IPNetnsExec = true
	e.startDaemon()
	ownCg := filepath.Join(filepath.Dir(e.d.Socket), "cgroup2")

	st := e.status()
	d := st.Daemon
	if d.CgroupMount != ownCg || !d.CgroupMountOwn {
		t.Errorf("status: cgroup2 mount %q (own %v), want %q mounted by hostqosd", d.CgroupMount, d.CgroupMountOwn, ownCg)
	}
	if d.BPFFSMount != "/sys/fs/bpf" || !d.BPFFSMountOwn || !d.PinsDieWithDaemon {
		t.Errorf("status: bpffs mount %q (own %v, pins die with the daemon %v), want /sys/fs/bpf mounted by hostqosd, pins dying with it",
			d.BPFFSMount, d.BPFFSMountOwn, d.PinsDieWithDaemon)
	}
	warnings := strings.Join(st.Warnings, "\n")
	for _, want := range []string{"hostqosd mounted one at " + ownCg, "go away when the daemon exits"} {
		if !strings.Contains(warnings, want) {
			t.Errorf("status warnings do not say %q:\n%s", want, warnings)
		}
	}
	out := e.hostqos("status")
	for _, want := range []string{"cgroup2 " + ownCg + " (mounted by hostqosd)", "bpffs /sys/fs/bpf (mounted by hostqosd)", "the pins go away when the daemon exits"} {
		if !strings.Contains(out, want) {
			t.Errorf("hostqos status does not say %q:\n%s", want, out)
		}
	}
	t.Logf("hostqos status:\n%s", out)
	if mi, err := os.ReadFile("/proc/self/mountinfo"); err != nil {
		t.Fatal(err)
	} else if strings.Contains(string(mi), ownCg) {
		t.Errorf("the daemon's cgroup2 mount %s shows in the host's mount table", ownCg)
	}

	e.hostqos("link", "set", e.iface())
	static := e.app("static-app")
	assertStatic(t, static)
	sn, err := testutil.StartReceiver(e.server, e.server.Iface("client"))
	if err != nil {
		t.Fatal(err)
	}
	defer sn.Stop()
	to := serverV4.Addr().String() + ":5201"
	e.udpSink(to, 20*time.Second)
	e.runApp(hostqosBin(), "--socket", e.d.Socket, "run", "--dscp", "AF41", "--", static,
		"tool", "udp-send", "--to", to, "--pps", "200", "--count", "20", "--size", "200")
	time.Sleep(300 * time.Millisecond)
	allDSCP(t, sn, unix.IPPROTO_UDP, 5201, dscpAF41, 20)

	// hostqos down works from there too: the run's cgroup (made through
	// the daemon's own cgroup2 mount) and that mount go.
	cgRoot, err := cgroups.Root()
	if err != nil {
		t.Fatal(err)
	}
	ours := filepath.Join(cgRoot, cgroups.NetnsDir(d.Netns))
	if _, err := os.Stat(ours); err != nil {
		t.Fatalf("the daemon's cgroups are not in the hierarchy the host sees: %v", err)
	}
	e.hostqos("down")
	eventually(t, 5*time.Second, "daemon exit after down", func() (bool, string) {
		return syscall.Kill(e.d.PID(), 0) != nil, "still running"
	})
	if _, err := os.Stat(ours); !os.IsNotExist(err) {
		t.Errorf("cgroup %s left behind (err %v)", ours, err)
	}
	if _, err := os.Stat(ownCg); !os.IsNotExist(err) {
		t.Errorf("the own cgroup2 mount point %s left behind (err %v)", ownCg, err)
	}
}
