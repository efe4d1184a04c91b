package integration

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/cgroups"
	"github.com/hostqos/hostqos/internal/datapath"
	"github.com/hostqos/hostqos/internal/testutil"
)

// TestKill9KeepsEnforcing: after kill -9 of the daemon under traffic,
// marking and limits continue; a restarted daemon adopts the pinned state
// and its counters continue instead of restarting.
func TestKill9KeepsEnforcing(t *testing.T) {
	e := newEnv(t)
	e.startDaemon()
	marked, capped := e.app("marked-app"), e.app("capped-app")
	e.hostqos("link", "set", e.iface(), "--egress-rate", "200mbit")
	e.hostqos("rule", "add", "mark", "--exe", marked, "--dscp", "EF")
	e.hostqos("rule", "add", "cap", "--exe", capped, "--maxbw", "10mbit")
	sn, err := testutil.StartReceiver(e.server, e.server.Iface("client"))
	if err != nil {
		t.Fatal(err)
	}
	defer sn.Stop()
	to := serverV4.Addr().String() + ":7020"
	e.udpSink(to, 60*time.Second)
	// The sender runs until the test stops it, after the restart.
	sender, _ := e.start(marked, "tool", "udp-send", "--to", to, "--pps", "200", "--size", "200", "--duration", "50s")
	eventually(t, 5*time.Second, "marked traffic", func() (bool, string) {
		c, n := sn.DSCPCounts(unix.IPPROTO_UDP, 7020)
		return n > 100, fmt.Sprintf("%v", c)
	})
	before := e.ruleStat("mark")
	pid := e.d.PID()
	e.killDaemon(syscall.SIGKILL)
	if err := syscall.Kill(pid, 0); err == nil {
		t.Fatal("daemon still alive after SIGKILL")
	}
	// Marking goes on without the daemon.
	_, n0 := sn.DSCPCounts(unix.IPPROTO_UDP, 7020)
	time.Sleep(1500 * time.Millisecond)
	c, n1 := sn.DSCPCounts(unix.IPPROTO_UDP, 7020)
	if n1-n0 < 100 {
		t.Fatalf("only %d packets arrived in 1.5 s after the kill", n1-n0)
	}
	if c[dscpEF] != n1 {
		t.Errorf("DSCP counts %v: some packets were not marked EF while the daemon was dead", c)
	}
	// So does the limit.
	measured(t, "limit without the daemon", func(n int) (bool, string) {
		tcpTo := serverV4.Addr().String() + ":" + strconv.Itoa(7130+n)
		sink := e.tcpSink(tcpTo, 30*time.Second, 1)
		e.runApp(capped, "tool", "tcp-send", "--to", tcpTo, "--duration", "4s")
		r := waitResult(t, sink, 30*time.Second)
		ratio := r.GoodputBps / 10e6
		return ratio >= 0.90 && ratio <= 1.01, fmt.Sprintf("goodput %.2f Mbit/s, want the 10 Mbit/s limit to hold", r.GoodputBps/1e6)
	})
	// A restarted daemon adopts the state; counters continue.
	e.startDaemon()
	st := e.status()
	if !st.Daemon.Adopted {
		t.Errorf("restarted daemon did not adopt the pinned state: %+v", st.Daemon)
	}
	after := e.ruleStat("mark")
	if after.Packets <= before.Packets {
		t.Errorf("rule counter went from %d to %d across the restart; want it to continue upward", before.Packets, after.Packets)
	}
	// Some packets under the restarted daemon, then the sender stops.
	_, n2 := sn.DSCPCounts(unix.IPPROTO_UDP, 7020)
	eventually(t, 5*time.Second, "traffic after the restart", func() (bool, string) {
		_, n := sn.DSCPCounts(unix.IPPROTO_UDP, 7020)
		return n >= n2+100, fmt.Sprintf("%d packets since", n-n2)
	})
	_ = syscall.Kill(-sender.Process.Pid, syscall.SIGKILL)
	_ = sender.Wait()
	final := e.ruleStat("mark")
	_, seen := sn.DSCPCounts(unix.IPPROTO_UDP, 7020)
	if final.Packets < uint64(seen) {
		t.Errorf("rule counted %d packets, the receiver saw %d", final.Packets, seen)
	}
}

// TestDownRemovesOnlyOurs: `hostqos down` leaves no hostqos qdisc,
// program, pin or cgroup; a foreign clsact filter survives.
func TestDownRemovesOnlyOurs(t *testing.T) {
	parallel(t)
	e := newEnv(t)
	e.startDaemon()
	ifc := e.iface()
	tc := func(args ...string) string {
		out, err := e.client.Command("tc", args...).CombinedOutput()
		if err != nil {
			t.Fatalf("tc %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	tc("qdisc", "add", "dev", ifc, "clsact")
	tc("filter", "add", "dev", ifc, "egress", "prio", "7", "protocol", "all", "u32", "match", "u32", "0", "0", "flowid", "1:1")
	e.hostqos("link", "set", ifc, "--egress-rate", "50mbit")
	e.hostqos("rule", "add", "r", "--proto", "udp", "--dscp", "AF21", "--maxbw", "5mbit")
	// A run makes a cgroup; keep it alive over the down.
	runCmd, _ := e.start(hostqosBin(), "--socket", e.d.Socket, "run", "--class", "bulk", "--", "sleep", "30")
	netns, err := netnsInode(e)
	if err != nil {
		t.Fatal(err)
	}
	cgRoot, err := cgroups.Root()
	if err != nil {
		t.Fatal(err)
	}
	ours := filepath.Join(cgRoot, cgroups.NetnsDir(netns))
	eventually(t, 5*time.Second, "run cgroup", func() (bool, string) {
		m, _ := filepath.Glob(filepath.Join(ours, "run-*"))
		return len(m) == 1, fmt.Sprint(m)
	})
	if !strings.Contains(tc("qdisc", "show", "dev", ifc), "htb 4851:") {
		t.Fatal("no hostqos HTB before down")
	}
	if !hasTCX(t, e, ifc) {
		t.Fatal("no hostqos egress program before down")
	}

	e.hostqos("down")
	_ = syscall.Kill(-runCmd.Process.Pid, syscall.SIGKILL)
	eventually(t, 5*time.Second, "daemon exit after down", func() (bool, string) {
		return syscall.Kill(e.d.PID(), 0) != nil, "still running"
	})
	if q := tc("qdisc", "show", "dev", ifc); strings.Contains(q, "4851:") {
		t.Errorf("hostqos qdisc left behind:\n%s", q)
	}
	if hasTCX(t, e, ifc) {
		t.Error("hostqos egress program still attached")
	}
	if _, err := os.Stat(e.d.BPFFS); !os.IsNotExist(err) {
		t.Errorf("pins left under %s (err %v)", e.d.BPFFS, err)
	}
	if _, err := os.Stat(ours); !os.IsNotExist(err) {
		t.Errorf("cgroup %s left behind", ours)
	}
	if cg, err := cgroups.OfPID(runCmd.Process.Pid); err == nil && strings.HasPrefix(cg, "/hostqos") {
		t.Errorf("the running program was left in %s; want it back in its own cgroup", cg)
	}
	for _, f := range []string{"runtime.json", "runtime.json.journal"} {
		if _, err := os.Stat(filepath.Join(filepath.Dir(e.d.Socket), f)); !os.IsNotExist(err) {
			t.Errorf("runtime state %s left behind after down (err %v)", f, err)
		}
	}
	if f := tc("filter", "show", "dev", ifc, "egress"); !strings.Contains(f, "u32") {
		t.Errorf("the foreign clsact filter is gone:\n%s", f)
	}
	if q := tc("qdisc", "show", "dev", ifc); !strings.Contains(q, "clsact") {
		t.Errorf("the foreign clsact qdisc is gone:\n%s", q)
	}
}

// hasTCX reports whether a hostqos program is attached to the interface's
// TCX egress hook, asking the kernel.
func hasTCX(t *testing.T, e *env, ifc string) bool {
	t.Helper()
	var names []string
	err := e.client.Do(func() error {
		ifi, err := net.InterfaceByName(ifc)
		if err != nil {
			return err
		}
		names, err = datapath.EgressPrograms(ifi.Index)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if strings.HasPrefix(n, "hq_tc_egress") {
			return true
		}
	}
	return false
}

func netnsInode(e *env) (uint64, error) {
	var st syscall.Stat_t
	if err := syscall.Stat("/run/netns/"+e.client.NetnsName, &st); err != nil {
		return 0, err
	}
	return st.Ino, nil
}

// TestInvalidConfigChangesNothing: a bad CIDR, an unknown class, a
// guarantee over capacity and a malformed rate are rejected with a message
// naming the field, and the running policy stays; a daemon refuses to start
// on an invalid file.
func TestInvalidConfigChangesNothing(t *testing.T) {
	parallel(t)
	e := newEnv(t)
	good := fmt.Sprintf(`
[[link]]
name = %q
egress_rate = "20mbit"

[[rule]]
name = "web"
proto = "tcp"
rport = "443"
minbw = "4mbit"
`, e.iface())
	e.writeConfig(good)
	e.startDaemon()
	var before []api.RuleInfo
	e.hostqosJSON(&before, "rule", "list")
	cases := []struct{ name, body, field string }{
		{"bad CIDR", `remote = "10.0.0.300/8"`, "remote"},
		{"unknown class", `class = "platinum"`, "class"},
		{"over capacity", `minbw = "19mbit"`, "minbw"},
		{"malformed rate", `maxbw = "fast"`, "maxbw"},
	}
	for _, c := range cases {
		e.writeConfig(good + "\n[[rule]]\nname = \"bad\"\nproto = \"udp\"\n" + c.body + "\n")
		out, err := e.hostqosErr("reload")
		if err == nil {
			t.Errorf("%s: reload succeeded", c.name)
			continue
		}
		if !strings.Contains(out, c.field) || !strings.Contains(out, "bad") {
			t.Errorf("%s: error does not name rule bad and field %s:\n%s", c.name, c.field, out)
		}
		var after []api.RuleInfo
		e.hostqosJSON(&after, "rule", "list")
		if len(after) != len(before) || after[0].Rule.Name != "web" {
			t.Errorf("%s: policy changed: %+v", c.name, after)
		}
	}
	// SIGHUP: a bad file keeps the running policy; a good one is applied.
	e.writeConfig(good + "\n[[rule]]\nname = \"bad\"\nproto = \"udp\"\nmaxbw = \"fast\"\n")
	if err := e.d.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	var afterHup []api.RuleInfo
	e.hostqosJSON(&afterHup, "rule", "list")
	if len(afterHup) != 1 {
		t.Errorf("SIGHUP with a bad file changed the policy: %+v", afterHup)
	}
	e.writeConfig(good + "\n[[rule]]\nname = \"added\"\nproto = \"udp\"\ndscp = \"AF21\"\n")
	if err := e.d.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	eventually(t, 3*time.Second, "reload on SIGHUP", func() (bool, string) {
		var rs []api.RuleInfo
		e.hostqosJSON(&rs, "rule", "list")
		return len(rs) == 2, fmt.Sprintf("%d rules", len(rs))
	})
	// First load: the daemon refuses to start and says why.
	bad := filepath.Join(e.dir, "bad.toml")
	if err := os.WriteFile(bad, []byte("[[rule]]\nname = \"x\"\nremote = \"nonsense\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := e.client.Command(filepath.Join(binDir, "hostqosd"), "--config", bad, "--socket", filepath.Join(e.dir, "other.sock"),
		"--state-dir", filepath.Join(e.dir, "other-state"), "--bpffs-dir", e.d.BPFFS+"-other")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("hostqosd started with an invalid config:\n%s", out)
	}
	if !strings.Contains(string(out), "remote") || !strings.Contains(string(out), "nonsense") {
		t.Errorf("refusal does not name the field and value:\n%s", out)
	}
}

// TestUnprivilegedUser: the API refuses policy changes from a user who is
// neither root nor in group hostqos, and lets them read status.
func TestUnprivilegedUser(t *testing.T) {
	parallel(t)
	e := sharedEnv(t)
	openForNobody(t, e)
	asNobody := func(args ...string) (string, error) { return e.userHostqos(uidNobody, args...) }
	if out, err := asNobody("status"); err != nil {
		t.Fatalf("status as nobody: %v\n%s", err, out)
	}
	if out, err := asNobody("rule", "list"); err != nil {
		t.Fatalf("rule list as nobody: %v\n%s", err, out)
	}
	for _, args := range [][]string{
		{"rule", "add", "sneaky", "--proto", "udp", "--dscp", "EF"},
		{"link", "set", e.iface(), "--egress-rate", "1mbit"},
		{"class", "set", "default", "--maxbw", "1mbit"},
		{"down"},
	} {
		out, err := asNobody(args...)
		if err == nil {
			t.Errorf("hostqos %s as nobody succeeded:\n%s", strings.Join(args, " "), out)
			continue
		}
		if !strings.Contains(out, "root or membership of group hostqos") {
			t.Errorf("hostqos %s as nobody: unexpected refusal:\n%s", strings.Join(args, " "), out)
		}
	}
	if out, err := asNobody("run", "--class", "voice", "--", "true"); err == nil || !strings.Contains(out, "not open to ordinary users") {
		t.Errorf("run in class voice as nobody: %v\n%s", err, out)
	}
	if out, err := asNobody("run", "--class", "bulk", "--", "true"); err != nil {
		t.Errorf("run in class bulk as nobody (allowed): %v\n%s", err, out)
	}
	var rules []api.RuleInfo
	e.hostqosJSON(&rules, "rule", "list")
	for _, r := range rules {
		if r.Rule.Name == "sneaky" {
			t.Error("the refused rule exists")
		}
	}
}

// TestLinkThatAppearsLater: a configured interface that does not exist yet
// (a VPN tunnel, a hot-plugged NIC) does not stop the daemon; hostqos
// manages it once it appears and again after it is recreated. An explicit
// `link set` of a missing interface is an error.
func TestLinkThatAppearsLater(t *testing.T) {
	parallel(t)
	e := newEnv(t)
	e.writeConfig("[[link]]\nname = \"late0\"\negress_rate = \"10mbit\"\n")
	e.startDaemon()
	st := e.status()
	if len(st.Links) != 1 || st.Links[0].Attached || st.Links[0].Error == "" {
		t.Fatalf("missing link not reported: %+v", st.Links)
	}
	if out, err := e.hostqosErr("link", "set", "nosuch0"); err == nil || !strings.Contains(out, "no such interface") {
		t.Errorf("link set of a missing interface: %v\n%s", err, out)
	}
	ip := func(args ...string) {
		if out, err := e.client.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	attached := func() (bool, string) {
		st := e.status()
		q, _ := e.client.Command("tc", "qdisc", "show", "dev", "late0").CombinedOutput()
		return len(st.Links) == 1 && st.Links[0].Attached && strings.Contains(string(q), "htb 4851:"),
			fmt.Sprintf("%+v / %s", st.Links, q)
	}
	ip("link", "add", "late0", "type", "veth", "peer", "name", "late1")
	ip("link", "set", "late0", "up")
	eventually(t, 5*time.Second, "late link managed", attached)
	first := e.status().Links[0].Ifindex
	ip("link", "del", "late0")
	ip("link", "add", "late0", "type", "veth", "peer", "name", "late1")
	ip("link", "set", "late0", "up")
	eventually(t, 5*time.Second, "recreated link managed", func() (bool, string) {
		ok, msg := attached()
		return ok && e.status().Links[0].Ifindex != first, msg
	})
	if !hasTCX(t, e, "late0") {
		t.Error("no classifier on the recreated link")
	}
}

// TestDaemonRestoresRemovedQdisc: when someone deletes hostqos's HTB root
// from a managed link, the daemon notices and builds it again.
func TestDaemonRestoresRemovedQdisc(t *testing.T) {
	parallel(t)
	e := sharedEnv(t)
	e.hostqos("link", "set", e.iface(), "--egress-rate", "20mbit")
	qdisc := func() string {
		out, _ := e.client.Command("tc", "qdisc", "show", "dev", e.iface()).CombinedOutput()
		return string(out)
	}
	if !strings.Contains(qdisc(), "htb 4851:") {
		t.Fatalf("no hostqos HTB: %s", qdisc())
	}
	if out, err := e.client.Command("tc", "qdisc", "del", "dev", e.iface(), "root").CombinedOutput(); err != nil {
		t.Fatalf("tc qdisc del: %v\n%s", err, out)
	}
	eventually(t, 5*time.Second, "HTB root restored", func() (bool, string) {
		q := qdisc()
		st := e.status()
		return strings.Contains(q, "htb 4851:") && st.Links[0].Shaping && st.Links[0].Attached, q
	})
	if !hasTCX(t, e, e.iface()) {
		t.Error("classifier missing after the repair")
	}
}
