package integration

import (
	"context"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/testbed"
	"github.com/hostqos/hostqos/internal/testutil"
	"github.com/hostqos/hostqos/internal/testutil/daemontest"
	"github.com/hostqos/hostqos/internal/traffic"
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
		ratio := r.GoodputBps / (5e6 * tcpPayloadShare)
		msg := fmt.Sprintf("goodput %.3f Mbit/s = %.3f of the container's 5 Mbit/s ceiling (in TCP payload)", r.GoodputBps/1e6, ratio)
		t.Log(msg)
		return ratio >= 0.95 && ratio <= 1.01, msg + " (want 0.95–1.01)"
	})

	// Its download through the NAT, under its download limit: the
	// receive window it advertises (rewritten at its veth) and its ACKs
	// paced on the uplink hold the sender to the limit.
	c.hostqos("rule", "set", "ctr", "--maxbw-in", "4mbit")
	dl := appCopy(c.env, "ctr-dl")
	inCtr := *c.env
	inCtr.client = c.ctr
	measured(t, "container download limit through NAT", func(n int) (bool, string) {
		d := startDownloadFrom(&inCtr, c.server, testutil.PathServer4.Addr(), dl, 1, 3*time.Second)()
		ratio := d.Total / 4e6
		msg := fmt.Sprintf("goodput %.3f Mbit/s = %.3f of the container's 4 Mbit/s download limit (want 0.95–1.01)", d.Total/1e6, ratio)
		t.Log(msg)
		return ratio >= 0.95 && ratio <= 1.01, msg
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

	// hostqos down takes the classifiers off the container's veth too.
	veth := c.client.Handle()
	l, err := veth.LinkByName(c.client.Iface("client"))
	if err != nil {
		t.Fatal(err)
	}
	if p := tcxOn(t, c.client, l.Attrs().Index); len(p) != 2 {
		t.Fatalf("programs on the container's veth: %v, want the two classifiers", p)
	}
	c.hostqos("down")
	if p := tcxOn(t, c.client, l.Attrs().Index); len(p) != 0 {
		t.Errorf("programs left on the container's veth after hostqos down: %v", p)
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

// TestContainerGuaranteeAndDownload: two plain network-namespace
// containers behind the daemon's host. One's 4 Mbit/s guarantee holds on
// the uplink while the other floods it (in class bulk, below the flood's:
// only the guarantee protects it); its download limit holds UDP
// arriving at 4× the limit; its IPv6 traffic is classified as its IPv4 is.
func TestContainerGuaranteeAndDownload(t *testing.T) {
	cs := testutil.NewContainers(t, 2)
	e := &env{t: t, client: cs.Host.Node, server: cs.Server.Node}
	e.d = daemontest.New(t, e.client, binDir)
	e.dir, e.cli = e.d.Dir, e.d.Client
	a, b := cs.Ctrs[0], cs.Ctrs[1]
	e.writeConfig(fmt.Sprintf(`[containers]
netns = [%q, %q]

[[link]]
name = %q
egress_rate = "20mbit"

[[rule]]
name = "guar"
container = %q
minbw = "4mbit"
maxbw_in = "5mbit"
class = "bulk"
`, a.NetnsName, b.NetnsName, e.iface(), a.NetnsName))
	e.startDaemon()
	eventually(t, 5*time.Second, "both containers found", func() (bool, string) {
		var list []api.Container
		e.hostqosJSON(&list, "container", "list")
		return len(list) == 2 && list[0].Seen && list[1].Seen, fmt.Sprintf("%+v", list)
	})
	server := cs.ServerV4.String()

	// b floods the uplink at twice its rate; a's upload keeps its guarantee.
	measured(t, "guarantee beside a flooding container", func(n int) (bool, string) {
		to := server + ":" + strconv.Itoa(7500+n)
		sink := e.tcpSink(to, 30*time.Second, 2)
		flood := b.Command(hostqosBin(), "tool", "udp-send", "--to", server+":7599", "--rate", "40mbit", "--duration", "7s")
		if err := flood.Start(); err != nil {
			t.Fatal(err)
		}
		defer flood.Wait()
		time.Sleep(500 * time.Millisecond)
		if out, err := a.Command(hostqosBin(), "tool", "tcp-send", "--to", to, "--streams", "2", "--duration", "5s").CombinedOutput(); err != nil {
			t.Fatalf("tcp-send: %v\n%s", err, out)
		}
		r := waitResult(t, sink, 30*time.Second)
		ratio := r.GoodputBps / (4e6 * tcpPayloadShare)
		msg := fmt.Sprintf("goodput %.2f Mbit/s = %.2f of the 4 Mbit/s guarantee (in payload) beside a 40 Mbit/s flood", r.GoodputBps/1e6, ratio)
		t.Log(msg)
		return ratio >= 0.95, msg + " (want ≥ 0.95)"
	})

	// a's download: UDP at 4× its limit reaches it at the limit; the
	// excess is dropped at its veth and counted.
	measured(t, "container download limit", func(n int) (bool, string) {
		listen := netip.AddrPortFrom(cs.CtrV4[0], uint16(7600+n)).String()
		sinkCmd := a.Command(hostqosBin(), "tool", "udp-sink", "--listen", listen, "--duration", "6s", "--flows", "1", "-o", "json")
		var out strings.Builder
		sinkCmd.Stdout, sinkCmd.Stderr = &out, &out
		if err := sinkCmd.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(300 * time.Millisecond)
		before := e.ruleStat("guar").In
		var s *traffic.SendResult
		if err := e.server.Do(func() (err error) {
			s, err = traffic.SendCBR(context.Background(), traffic.CBRConfig{To: listen, Size: 1000, BitRate: 20e6, Duration: 3 * time.Second, DSCP: traffic.NoDSCP})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if err := sinkCmd.Wait(); err != nil {
			t.Fatalf("udp-sink: %v\n%s", err, out.String())
		}
		var r traffic.SinkResult
		decodeLast(t, out.String(), &r)
		drops := e.ruleStat("guar").In.Drops - before.Drops
		ratio := float64(r.Packets) * 1000 * 8 / s.DurationS / 5e6
		msg := fmt.Sprintf("sent %d, the container received %d: %.3f of its 5 Mbit/s limit in payload (want 0.95–1.01); %d dropped at its veth", s.Packets, r.Packets, ratio, drops)
		t.Log(msg)
		return ratio >= 0.95 && ratio <= 1.01 && drops > 0, msg
	})

	// IPv6: the same rule, the same mark.
	bulk := dscpOf(t, e, "bulk")
	to := "[" + cs.ServerV6.String() + "]:7700"
	sink := e.udpSink(to, 10*time.Second)
	if out, err := a.Command(hostqosBin(), "tool", "udp-send", "--to", to, "--pps", "100", "--count", "20").CombinedOutput(); err != nil {
		t.Fatalf("udp-send over IPv6: %v\n%s", err, out)
	}
	if r := waitResult(t, sink, 15*time.Second); r == nil || r.FirstDSCPValue != bulk || r.DSCP[r.FirstDSCP] != 20 {
		t.Errorf("container's IPv6 UDP: %+v, want 20 packets with DSCP %d", r, bulk)
	}
}

// TestContainerClsact: on kernels without TCX (--attach clsact) the
// container's classifiers are cls_bpf filters on its veth's clsact: its
// rule marks its traffic, and hostqos down removes them with the clsact
// hostqos added.
func TestContainerClsact(t *testing.T) {
	parallel(t)
	c := newCtrEnv(t)
	c.d.ExtraArgs = []string{"--attach", "clsact"}
	c.writeConfig(c.config("50mbit", fmt.Sprintf("\n[[rule]]\nname = \"ctr\"\ncontainer = %q\nclass = \"voice\"\n", c.ctrName)))
	c.startDaemon()
	veth := c.client.Iface("client")
	eventually(t, 5*time.Second, "filters on the container's veth", func() (bool, string) {
		out, _ := c.client.Command("tc", "filter", "show", "dev", veth, "ingress").CombinedOutput()
		return strings.Contains(string(out), "bpf"), string(out)
	})
	voice := dscpOf(t, c.env, "voice")
	to := serverAddr(c) + ":7801"
	sink := c.udpSink(to, 10*time.Second)
	c.inCtr(hostqosBin(), "tool", "udp-send", "--to", to, "--pps", "100", "--count", "20")
	if r := waitResult(t, sink, 15*time.Second); r == nil || r.FirstDSCPValue != voice || r.DSCP[r.FirstDSCP] != 20 {
		t.Errorf("container's UDP in clsact mode: %+v, want 20 packets with DSCP %d", r, voice)
	}
	c.hostqos("down")
	if out, _ := c.client.Command("tc", "qdisc", "show", "dev", veth).CombinedOutput(); strings.Contains(string(out), "clsact") {
		t.Errorf("clsact left on the container's veth after hostqos down: %s", out)
	}
}
