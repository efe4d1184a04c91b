package integration

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hostqos/hostqos/internal/policy"
	"github.com/hostqos/hostqos/internal/testutil"
)

// TestClsactFallback: with --attach clsact (the path of
// kernels without TCX) the classifier is a cls_bpf filter beside a foreign
// one on the foreign clsact; it marks and counts only the matching flow;
// a daemon killed with -9 and started again (on the bounded datapath of
// kernels without bpf_loop: --loops bounded) adopts the filter in place
// and marks by flow and by app rule; a removed filter is put back by the
// repair; `hostqos down` removes only our filter (the foreign clsact and
// filter stay), and a clsact hostqos added itself goes with it. A config
// over the bounded datapath's capacity is refused by `config check
// --loops bounded` and the bounded daemon alike.
func TestClsactFallback(t *testing.T) {
	parallel(t)
	e := newEnv(t)
	e.d.ExtraArgs = []string{"--attach", "clsact"}
	ifc := e.iface()
	tc := func(args ...string) string {
		out, err := e.client.Command("tc", args...).CombinedOutput()
		if err != nil {
			t.Fatalf("tc %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	ours := func() int { return strings.Count(tc("filter", "show", "dev", ifc, "egress"), "hostqos") }
	oursIn := func() int { return strings.Count(tc("filter", "show", "dev", ifc, "ingress"), "hostqos") }
	tc("qdisc", "add", "dev", ifc, "clsact")
	tc("filter", "add", "dev", ifc, "egress", "prio", "7", "protocol", "all", "u32", "match", "u32", "0", "0", "flowid", "1:1")
	e.startDaemon()
	e.hostqos("link", "set", ifc, "--egress-rate", "50mbit")
	e.hostqos("rule", "add", "f4", "--proto", "udp", "--rport", "6000", "--remote", serverV4.Addr().String()+"/32", "--dscp", "AF21", "--maxbw", "20mbit")
	if f := tc("filter", "show", "dev", ifc, "egress"); ours() != 1 || !strings.Contains(f, "direct-action") || !strings.Contains(f, "u32") {
		t.Fatalf("egress filters: want hostqos's (direct-action) beside the foreign u32:\n%s", f)
	}
	if oursIn() != 1 {
		t.Errorf("no hostqos ingress filter:\n%s", tc("filter", "show", "dev", ifc, "ingress"))
	}
	if hasTCX(t, e, ifc) {
		t.Error("a TCX program is attached in clsact mode")
	}

	sn, err := testutil.StartReceiver(e.server, e.server.Iface("client"))
	if err != nil {
		t.Fatal(err)
	}
	defer sn.Stop()
	app := e.app("clsact-app")
	srv4 := serverV4.Addr().String()
	e.udpSink(srv4+":6000", 30*time.Second)
	e.udpSink(srv4+":6001", 30*time.Second)
	send := func() {
		for _, to := range []string{srv4 + ":6000", srv4 + ":6001"} {
			e.runApp(app, "tool", "udp-send", "--to", to, "--pps", "500", "--count", "50", "--size", "100")
		}
		time.Sleep(300 * time.Millisecond)
	}
	check := func(when string, port uint16, want, atLeast int) int {
		got, total := map[int]int{}, 0
		for _, f := range sn.To(unix.IPPROTO_UDP, port) {
			for d, n := range f.DSCP {
				got[d] += n
				total += n
			}
		}
		if total < atLeast || got[want] != total {
			t.Errorf("%s: port %d: DSCP counts %v of %d packets, want all %d", when, port, got, total, want)
		}
		return total
	}
	send()
	n := check("clsact", 6000, dscpAF21, 50)
	check("clsact", 6001, 0, 50)
	eventually(t, 3*time.Second, "rule counter", func() (bool, string) {
		r := e.ruleStat("f4")
		return r.Packets == uint64(n), fmt.Sprintf("f4 counted %d, the receiver saw %d", r.Packets, n)
	})
	// Shaping: the rule's packets went to its own HTB leaf (minor 0x100 +
	// slot, the only rule leaf), as the priority the filter set says.
	if got := ruleLeafPackets(t, tc("-s", "class", "show", "dev", ifc)); got < n {
		t.Errorf("the rule's HTB leaf sent %d packets, the receiver saw %d on the rule's port", got, n)
	}

	// Restart after kill -9, onto the bounded datapath (what a kernel
	// without bpf_loop, such as 5.15, gets; forced here): the filter is
	// adopted (its program replaced in place) and marks as before.
	e.killDaemon(syscall.SIGKILL)
	if ours() != 1 {
		t.Fatal("the filter went with the daemon")
	}
	e.d.ExtraArgs = []string{"--attach", "clsact", "--loops", "bounded"}
	e.startDaemon()
	if c := ours(); c != 1 {
		t.Errorf("after the restart: %d hostqos filters, want 1", c)
	}
	if st := e.status(); st.Datapath.Loops != "bounded" || st.Datapath.Attach != "clsact" {
		t.Errorf("status after the restart: loops %q attach %q, want bounded and clsact", st.Datapath.Loops, st.Datapath.Attach)
	}
	if out := e.hostqos("status"); !strings.Contains(out, "loops bounded") || !strings.Contains(out, "attach clsact") {
		t.Errorf("hostqos status does not show the bounded datapath on clsact:\n%s", out)
	}
	send()
	check("after restart", 6000, dscpAF21, 100)
	// An app rule on the bounded datapath (its app-bit walk).
	e.udpSink(srv4+":6002", 30*time.Second)
	e.hostqos("rule", "add", "app-ef", "--exe", app, "--proto", "udp", "--rport", "6002", "--dscp", "EF")
	e.runApp(app, "tool", "udp-send", "--to", srv4+":6002", "--pps", "500", "--count", "50", "--size", "100")
	time.Sleep(300 * time.Millisecond)
	check("bounded, app rule", 6002, dscpEF, 50)

	// Repair: a removed filter comes back.
	tc("filter", "del", "dev", ifc, "egress", "prio", "1", "handle", "0x4851", "protocol", "all", "bpf")
	eventually(t, 5*time.Second, "the repair puts the filter back", func() (bool, string) {
		return ours() == 1, tc("filter", "show", "dev", ifc, "egress")
	})

	// Down: only ours goes.
	e.hostqos("down")
	eventually(t, 5*time.Second, "daemon exit after down", func() (bool, string) {
		return syscall.Kill(e.d.PID(), 0) != nil, "still running"
	})
	f := tc("filter", "show", "dev", ifc, "egress")
	if ours() != 0 || oursIn() != 0 || !strings.Contains(f, "u32") {
		t.Errorf("after down: want the foreign u32 filter only:\n%s", f)
	}
	if q := tc("qdisc", "show", "dev", ifc); !strings.Contains(q, "clsact") || strings.Contains(q, "4851:") {
		t.Errorf("after down: want the foreign clsact and no HTB:\n%s", q)
	}

	// A clsact hostqos added is removed by down once empty.
	tc("qdisc", "del", "dev", ifc, "clsact")
	e.startDaemon()
	e.hostqos("link", "set", ifc)
	if ours() != 1 {
		t.Fatal("no hostqos filter on a link without clsact")
	}
	e.hostqos("down")
	eventually(t, 5*time.Second, "daemon exit after the second down", func() (bool, string) {
		return syscall.Kill(e.d.PID(), 0) != nil, "still running"
	})
	if q := tc("qdisc", "show", "dev", ifc); strings.Contains(q, "clsact") {
		t.Errorf("the clsact hostqos added is left after down:\n%s", q)
	}

	// Over the bounded datapath's capacity: the same refusal from config
	// check and the daemon.
	over := scaleConfig(t, e, 0, policy.BoundedFlowRules+1, "")
	checkOut, err := e.hostqosErr("config", "check", "--loops", "bounded", over)
	want := fmt.Sprintf("%d rules without app selectors: more than the bounded datapath holds (%d;", policy.BoundedFlowRules+1, policy.BoundedFlowRules)
	if err == nil || !strings.Contains(checkOut, want) {
		t.Fatalf("config check --loops bounded of %d flow rules: %v, want a refusal containing %q:\n%s", policy.BoundedFlowRules+1, err, want, checkOut)
	}
	raw, err := os.ReadFile(over)
	if err != nil {
		t.Fatal(err)
	}
	e.writeConfig(string(raw))
	// The daemon counts the rules added above too (kept in its state).
	line := strings.TrimSpace(strings.SplitN(checkOut[strings.Index(checkOut, " rules without app selectors"):], "\n", 2)[0])
	if err := e.d.Start(); err == nil {
		t.Fatalf("the bounded daemon started with %d flow rules", policy.BoundedFlowRules+1)
	} else if !strings.Contains(err.Error(), line) {
		t.Errorf("the daemon refused with\n%v\nnot with config check's\n%s", err, line)
	}
}

// ruleLeafPackets sums the packets sent by hostqos's rule leaves (minors
// 0x100 and up) in `tc -s class show` output.
func ruleLeafPackets(t *testing.T, out string) int {
	t.Helper()
	lines := strings.Split(out, "\n")
	total := 0
	for i, l := range lines {
		f := strings.Fields(l)
		if len(f) < 3 || f[0] != "class" || f[1] != "htb" || !strings.HasPrefix(f[2], "4851:") {
			continue
		}
		var minor int
		if _, err := fmt.Sscanf(strings.TrimPrefix(f[2], "4851:"), "%x", &minor); err != nil || minor < 0x100 {
			continue
		}
		for _, next := range lines[i+1:] {
			g := strings.Fields(next)
			if len(g) >= 5 && g[0] == "Sent" && g[4] == "pkt" {
				var n int
				fmt.Sscanf(g[3], "%d", &n)
				total += n
				break
			}
		}
	}
	return total
}
