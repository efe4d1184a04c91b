package integration

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/containers/containertest"
	"github.com/hostqos/hostqos/internal/testbed"
	"github.com/hostqos/hostqos/internal/testutil"
)

// TestContainerRuntimes runs real Podman and Docker containers (an image
// imported offline, networks of the test's own) behind the host hostqosd
// runs on, NATed on its uplink:
//   - a rule by name added before a Podman container starts marks its
//     traffic from its first packet;
//   - a rule by label classes a Docker container's traffic;
//   - container list and stat apps name both;
//   - after kill -9 and a restart with both running, the daemon adopts
//     them and enforcement never stops;
//   - a container removed leaves no classifier, map entry or HTB leaf.
func TestContainerRuntimes(t *testing.T) {
	containertest.NeedRuntimes(t, "podman", "docker")
	containertest.StartDocker(t)
	image := containertest.Image(t, "all", hostqosBin())
	c := newCtrEnv(t)
	host := c.client
	// The Docker container's network: a veth from the host, its own
	// subnet; the host NATs both containers on the uplink.
	nat := host.Command("nft", "-f", "-")
	nat.Stdin = strings.NewReader(fmt.Sprintf("table ip hqt {\n chain post {\n  type nat hook postrouting priority 100;\n  oifname %q masquerade\n }\n}\n", c.iface()))
	if out, err := nat.CombinedOutput(); err != nil {
		t.Fatalf("nft: %v: %s", err, out)
	}
	podName, dockName := containertest.Name("hqpod"), containertest.Name("hqdock")
	c.writeConfig(fmt.Sprintf(`[[link]]
name = %q
egress_rate = "50mbit"

[[rule]]
name = "pod"
container = %q
class = "voice"

[[rule]]
name = "dock"
container_label = "tier=db"
class = "bulk"
maxbw = "5mbit"
`, c.iface(), podName))
	c.startDaemon()
	voice, bulk := dscpOf(t, c.env, "voice"), dscpOf(t, c.env, "bulk")
	server := serverAddr(c)

	// Docker first: its veth is the first container veth, whose
	// classifiers the daemon verifies on first use.
	dock := containertest.RunDocker(t, containertest.Options{Image: image, Name: dockName, Labels: map[string]string{"tier": "db"}})
	vethName := "hqd" + testutil.RandHex(4)
	dockVeth := dock.AddVeth(t, host.Handle(), vethName, "eth0")
	mustRun(t, host.Command("ip", "addr", "add", "198.18.3.1/24", "dev", vethName))
	for _, args := range [][]string{
		{"ip", "addr", "add", "198.18.3.2/24", "dev", "eth0"}, {"ip", "link", "set", "eth0", "up"},
		{"ip", "route", "add", "default", "via", "198.18.3.1"},
	} {
		mustRun(t, exec.Command("nsenter", append([]string{"-t", strconv.Itoa(dock.PID), "-n"}, args...)...))
	}
	eventually(t, 10*time.Second, "the Docker container found and classified at its veth", func() (bool, string) {
		cs := c.containers()
		for _, x := range cs {
			if x.Name == dockName && x.Runtime == "docker" && x.Labels["tier"] == "db" && strings.Contains(x.Image, "hostqos-test") &&
				len(x.Rules) == 1 && x.Rules[0] == "dock" && len(x.Veths) == 1 && x.Veths[0] == vethName {
				return len(tcxOn(t, host, dockVeth)) == 2, "classifiers on its veth: " + fmt.Sprint(tcxOn(t, host, dockVeth))
			}
		}
		return false, fmt.Sprintf("%+v", cs)
	})
	to := server + ":7401"
	sink := c.udpSink(to, 10*time.Second)
	mustRun(t, exec.Command("docker", "exec", dockName, "/bin/hostqos", "tool", "udp-send", "--to", to, "--pps", "100", "--count", "20"))
	if r := waitResult(t, sink, 15*time.Second); r == nil || r.FirstDSCPValue != bulk || r.DSCP[r.FirstDSCP] != 20 {
		t.Errorf("Docker container's UDP: %+v, want 20 packets with DSCP %d (rule dock, by label)", r, bulk)
	}

	// Podman, started after its rule, sends from its first instruction.
	to = server + ":7402"
	sink = c.udpSink(to, 15*time.Second)
	pod := containertest.RunPodman(t, containertest.Options{Image: image, Name: podName, Netns: "/run/netns/" + c.ctrName,
		Cmd: []string{"/bin/hostqos", "tool", "udp-send", "--to", to, "--pps", "100", "--duration", "600s"}})
	r := waitResult(t, sink, 20*time.Second)
	if r == nil || r.FirstDSCPValue != voice {
		t.Errorf("Podman container started after its rule: %+v, want its first packet with DSCP %d", r, voice)
	}
	var apps api.Stats
	c.hostqosJSON(&apps, "stat", "apps")
	named := map[string]bool{}
	for _, a := range apps.Apps {
		if a.Container != "" {
			named[a.Runtime+"/"+a.Container] = true
		}
	}
	if !named["podman/"+podName] || !named["docker/"+dockName] {
		t.Errorf("stat apps names containers %v, want podman/%s and docker/%s", named, podName, dockName)
	}

	// kill -9 with both running: the marks go on; the restarted daemon
	// adopts the containers (the Podman one keeps its class).
	rx := testutil.NewReceiver(t, c.server, c.server.Iface("router"))
	c.killDaemon(syscall.SIGKILL)
	countEF := func() int {
		n := 0
		for f, s := range rx.To(17, 7402) {
			_ = f
			if s.FirstDSCP == voice {
				n += s.Packets
			}
		}
		return n
	}
	eventually(t, 5*time.Second, "the Podman container's packets marked while the daemon is dead", func() (bool, string) {
		n := countEF()
		return n >= 50, fmt.Sprintf("%d EF packets", n)
	})
	c.startDaemon()
	eventually(t, 10*time.Second, "both containers adopted", func() (bool, string) {
		cs := c.containers()
		return len(cs) == 2, fmt.Sprintf("%+v", cs)
	})
	n0 := countEF()
	eventually(t, 5*time.Second, "marks after the restart", func() (bool, string) {
		n := countEF()
		return n-n0 >= 50, fmt.Sprintf("%d EF packets since the restart", n-n0)
	})

	// Removed: no classifier, identity or leaf is left for them.
	leaves := c.classCount()
	pod.Remove(t)
	dock.Remove(t)
	eventually(t, 5*time.Second, "the removed containers forgotten", func() (bool, string) {
		cs := c.containers()
		return len(cs) == 0, fmt.Sprintf("%+v", cs)
	})
	podVeth := host.Handle()
	l, err := podVeth.LinkByName(host.Iface("client"))
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "no classifier left on the Podman container's veth", func() (bool, string) {
		p := tcxOn(t, host, l.Attrs().Index)
		return len(p) == 0, fmt.Sprint(p)
	})
	pins, _ := filepath.Glob(filepath.Join(c.d.BPFFS, "links", "tcx_veth_*"))
	if len(pins) != 0 {
		t.Errorf("pinned veth links left: %v", pins)
	}
	// Rule dock's 5 Mbit/s leaf goes with the last container it matched.
	eventually(t, 5*time.Second, "rule dock's leaf removed", func() (bool, string) {
		n := c.classCount()
		return n == leaves-1, fmt.Sprintf("%d HTB classes on the uplink, %d with the containers", n, leaves)
	})
}

// classCount counts the HTB classes on the managed link.
func (c *ctrEnv) classCount() int {
	c.t.Helper()
	out, err := c.client.Command("tc", "class", "show", "dev", c.iface()).CombinedOutput()
	if err != nil {
		c.t.Fatalf("tc class show: %v: %s", err, out)
	}
	return strings.Count(string(out), "class htb")
}

// tcxOn lists the program ids on both TCX hooks of ifindex in node.
func tcxOn(t *testing.T, node *testbed.Node, ifindex int) []ebpf.ProgramID {
	t.Helper()
	var ids []ebpf.ProgramID
	if err := node.Do(func() error {
		for _, at := range []ebpf.AttachType{ebpf.AttachTCXIngress, ebpf.AttachTCXEgress} {
			res, err := link.QueryPrograms(link.QueryOptions{Target: ifindex, Attach: at})
			if err != nil {
				return err
			}
			for _, p := range res.Programs {
				ids = append(ids, p.ID)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return ids
}
