package integration

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/testbed"
	"github.com/hostqos/hostqos/internal/testutil"
	"github.com/hostqos/hostqos/internal/testutil/daemontest"
)

// ctrEnv is a container behind the host hostqosd runs on: the path's
// client namespace is the container (a plain network-namespace container,
// named in [containers] netns), its router the host, which forwards to the
// server over the managed link.
type ctrEnv struct {
	*env
	ctr     *testbed.Node
	ctrName string // the container's name: its /run/netns entry
	ctrAddr string // its IPv4 address
}

func newCtrEnv(t *testing.T) *ctrEnv {
	t.Helper()
	p := testutil.NewPath(t, 0)
	e := &env{t: t, client: p.Router.Node, server: p.Server.Node}
	e.d = daemontest.New(t, e.client, binDir)
	e.dir, e.cli = e.d.Dir, e.d.Client
	return &ctrEnv{env: e, ctr: p.Client.Node, ctrName: p.Client.NetnsName, ctrAddr: p.ClientV4.String()}
}

// config is the daemon's config: the container declared, the managed link
// shaped at rate, and more.
func (c *ctrEnv) config(rate, more string) string {
	return fmt.Sprintf("[containers]\nnetns = [%q]\n\n[[link]]\nname = %q\negress_rate = %q\n%s", c.ctrName, c.iface(), rate, more)
}

// inCtr runs a program in the container's namespace and waits for it.
func (c *ctrEnv) inCtr(name string, args ...string) string {
	c.t.Helper()
	out, err := c.ctr.Command(name, args...).CombinedOutput()
	if err != nil {
		c.t.Fatalf("%s %s in the container: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// containers lists the containers the daemon found.
func (c *ctrEnv) containers() []api.Container {
	var cs []api.Container
	c.hostqosJSON(&cs, "container", "list")
	return cs
}

// TestContainerRule: a rule for a container (found by the daemon, not a
// process of the host) caps its TCP upload on the host's uplink and marks
// its UDP with its class's DSCP from the first packet, through NAT; a class
// changed at run time applies to the running container; stat apps and
// container list name it.
func TestContainerRule(t *testing.T) {
	c := newCtrEnv(t)
	c.writeConfig(c.config("50mbit", ""))
	c.startDaemon()
	eventually(t, 5*time.Second, "the container found", func() (bool, string) {
		cs := c.containers()
		return len(cs) == 1 && cs[0].Name == c.ctrName && cs[0].Runtime == "netns" && cs[0].Seen && len(cs[0].Veths) == 1,
			fmt.Sprintf("%+v", cs)
	})
	c.hostqos("rule", "add", "ctr", "--container", c.ctrName, "--class", "bulk", "--maxbw", "5mbit")
	if cs := c.containers(); len(cs[0].Rules) != 1 || cs[0].Rules[0] != "ctr" {
		t.Errorf("container list names rules %v, want ctr", cs[0].Rules)
	}
	// The host NATs the container's traffic: the mark is the one on the
	// wire, the class still holds on the uplink.
	nat := c.client.Command("nft", "-f", "-")
	nat.Stdin = strings.NewReader(fmt.Sprintf("table ip hqt {\n chain post {\n  type nat hook postrouting priority 100;\n  oifname %q masquerade\n }\n}\n", c.iface()))
	if out, err := nat.CombinedOutput(); err != nil {
		t.Fatalf("nft: %v: %s", err, out)
	}

	// UDP: the class's DSCP from the first packet.
	bulk := dscpOf(t, c.env, "bulk")
	to := serverAddr(c) + ":7301"
	sink := c.udpSink(to, 10*time.Second)
	c.inCtr(hostqosBin(), "tool", "udp-send", "--to", to, "--pps", "50", "--count", "20")
	r := waitResult(t, sink, 15*time.Second)
	if r == nil || r.FirstDSCPValue != bulk || r.DSCP[r.FirstDSCP] != 20 {
		t.Fatalf("container's UDP: %+v, want all 20 packets with the class's DSCP %d", r, bulk)
	}

	// TCP: the ceiling on the uplink.
	measured(t, "container upload under its ceiling", func(n int) (bool, string) {
		to := serverAddr(c) + ":" + strconv.Itoa(7310+n)
		sink := c.tcpSink(to, 30*time.Second, 2)
		c.inCtr(hostqosBin(), "tool", "tcp-send", "--to", to, "--streams", "2", "--duration", "5s")
		r := waitResult(t, sink, 30*time.Second)
		ratio := r.GoodputBps / 5e6
		msg := fmt.Sprintf("goodput %.3f Mbit/s = %.3f of the container's 5 Mbit/s ceiling", r.GoodputBps/1e6, ratio)
		t.Log(msg)
		return ratio >= 0.9 && ratio <= 1.01, msg + " (want 0.90–1.01)"
	})

	// The class changed while the container runs: its next packets.
	c.hostqos("rule", "set", "ctr", "--class", "voice")
	voice := dscpOf(t, c.env, "voice")
	to = serverAddr(c) + ":7302"
	sink = c.udpSink(to, 10*time.Second)
	c.inCtr(hostqosBin(), "tool", "udp-send", "--to", to, "--pps", "50", "--count", "20")
	if r := waitResult(t, sink, 15*time.Second); r == nil || r.FirstDSCPValue != voice {
		t.Errorf("after rule set --class voice: %+v, want DSCP %d", r, voice)
	}

	// stat apps names the container, not a process of the host.
	var apps api.Stats
	c.hostqosJSON(&apps, "stat", "apps")
	found := false
	for _, a := range apps.Apps {
		if a.Container == c.ctrName {
			found = true
			if a.Bytes == 0 {
				t.Errorf("app %+v: no bytes sent", a)
			}
		}
	}
	if !found {
		t.Errorf("stat apps names no container %s: %+v", c.ctrName, apps.Apps)
	}
}

func serverAddr(c *ctrEnv) string { return testutil.PathServer4.Addr().String() }

// dscpOf is the DSCP value of a class as the daemon has it.
func dscpOf(t *testing.T, e *env, class string) int {
	t.Helper()
	var cs []api.ClassInfo
	e.hostqosJSON(&cs, "class", "list")
	for _, c := range cs {
		if c.Class.Name == class {
			return int(c.Class.DSCP)
		}
	}
	t.Fatalf("no class %s", class)
	return -1
}

