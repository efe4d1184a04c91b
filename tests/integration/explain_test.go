package integration

import (
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/traffic"
)

// explainDrop is the drop of cause in x's one flow (nil: none).
func explainDrop(t *testing.T, x api.Explanation, cause string) *api.ExplainDrop {
	t.Helper()
	if len(x.Flows) != 1 {
		t.Fatalf("%s: %d flows in the answer (%d in all), want the one: %+v", x.Subject, len(x.Flows), x.FlowsTotal, x.Flows)
	}
	for i, d := range x.Flows[0].Drops {
		if d.Cause == cause {
			return &x.Flows[0].Drops[i]
		}
	}
	return nil
}

// TestExplainNamesRuleAndCause: real flows between namespaces, one
// policed, one dropped by a drop rule, one whose answers an XDP drop-list
// entry drops; `hostqos explain -o json` names for each the rule the
// datapath classified it under (the one the policy gives it, after the
// rules considered before it), and the cause of its drops with the
// datapath's counts: the policer's and the drop rule's drops of the flow
// itself (all the rule counted: it is the rule's only flow), the drop-list
// entry's drops (its counter, as block list shows it). The human answer
// reads as one.
func TestExplainNamesRuleAndCause(t *testing.T) {
	parallel(t)
	e := newEnv(t)
	e.startDaemon()
	e.addServerAddrs(t, legitV4)
	e.hostqos("link", "set", e.iface(), "--egress-rate", "100mbit")
	e.hostqos("rule", "add", "flood", "--proto", "udp", "--rport", "7400", "--police", "1mbit", "--burst", "16KiB")
	e.hostqos("rule", "add", "deny", "--proto", "udp", "--rport", "7401", "--action", "drop")
	e.hostqos("rule", "add", "web", "--proto", "tcp", "--rport", "443", "--class", "interactive")
	srv := serverV4.Addr().String()
	e.udpSink(srv+":7400", 30*time.Second)
	e.udpSink(srv+":7401", 30*time.Second)
	e.echo(legitV4.String()+":7402", 30*time.Second)

	var sent traffic.SendResult
	decodeLast(t, e.runApp(hostqosBin(), "tool", "udp-send", "--to", srv+":7400", "--rate", "10mbit", "--size", "1000", "--duration", "1s", "-o", "json"), &sent)
	e.runApp(hostqosBin(), "tool", "udp-send", "--to", srv+":7401", "--pps", "200", "--count", "50", "--size", "100")
	e.hostqos("block", "add", legitV4.String()+"/32")
	e.runApp(hostqosBin(), "tool", "udp-send", "--to", legitV4.String()+":7402", "--pps", "200", "--count", "40", "--size", "100")

	explain := func(args ...string) api.Explanation {
		t.Helper()
		var x api.Explanation
		e.hostqosJSON(&x, append([]string{"explain"}, args...)...)
		return x
	}

	// Policed: the rule, and the policer's drops of this flow.
	x := explain("--proto", "udp", "--remote", srv, "--rport", "7400")
	if x.Match == nil || x.Match.Rule != "flood" || x.Flow == nil {
		t.Fatalf("policed flow: match %+v, flow %+v, want rule flood", x.Match, x.Flow)
	}
	if len(x.Rules) != x.Match.Position || x.Rules[0].Rule != "deny" || x.Rules[0].Result != api.CheckNo || x.Rules[0].Failed[0].Selector != "rport" {
		t.Errorf("rules considered before flood: %+v, want deny failing on its rport", x.Rules)
	}
	d := explainDrop(t, x, "policer")
	st := e.ruleStat("flood")
	f := x.Flows[0]
	if d == nil || d.Scope != api.ScopeFlow || d.Packets == 0 || d.Packets != f.Kernel.Out.Drops || d.Packets != st.Drops || f.Kernel.Rule != "flood" || !f.Kernel.Agrees {
		t.Errorf("policed flow: drops %+v, kernel %+v; the rule dropped %d of the %d sent", f.Drops, f.Kernel, st.Drops, sent.Packets)
	}
	if len(x.Service.Leaves) != 1 || x.Service.Police == nil || x.Service.Police.Rate != 1_000_000 {
		t.Errorf("policed flow's service %+v", x.Service)
	}

	// Dropped by a drop rule: every packet, counted on the flow.
	x = explain("--proto", "udp", "--remote", srv, "--rport", "7401")
	if x.Match == nil || x.Match.Rule != "deny" || x.Service.Action != "drop" {
		t.Fatalf("dropped flow: match %+v, service %+v, want rule deny", x.Match, x.Service)
	}
	// 50 datagrams and the sender's end-of-flow markers (up to 3).
	if d, n := explainDrop(t, x, "drop_rule"), e.ruleStat("deny").Drops; d == nil || d.Packets < 50 || d.Packets != n || d.Scope != api.ScopeFlow || d.By != "rule deny" {
		t.Errorf("dropped flow: drops %+v, want drop_rule by rule deny: all of the flow's 50 (and end markers), all the rule dropped (%d)", x.Flows[0].Drops, n)
	}

	// Its answers dropped at XDP: no rule, and the drop-list entry.
	x = explain("--proto", "udp", "--remote", legitV4.String(), "--rport", "7402")
	if x.Match != nil || x.Service == nil || x.Service.Rule != "" {
		t.Errorf("echoed flow: match %+v, service %+v, want no rule", x.Match, x.Service)
	}
	blk := e.blocks(t)[legitV4.String()+"/32"]
	d = explainDrop(t, x, "xdp_block")
	if d == nil || d.By != "block "+legitV4.String()+"/32" || d.Scope != api.ScopeShared || d.Packets == 0 || d.Packets > blk.Dropped || d.SharedBy != 1 {
		t.Errorf("echoed flow: drops %+v, want xdp_block of %s/32 (block list: %d dropped), shared by its 1 flow", x.Flows[0].Drops, legitV4, blk.Dropped)
	}
	if in := x.Flows[0].Kernel.In.Packets; in != 0 {
		t.Errorf("echoed flow: %d answers reached the classifier past the drop list", in)
	}

	t.Logf("hostqos explain --proto udp:\n%s", e.hostqos("explain", "--proto", "udp"))

	// The human answer.
	out := e.hostqos("explain", "--proto", "udp", "--remote", srv, "--rport", "7400")
	t.Logf("hostqos explain --proto udp --remote %s --rport 7400:\n%s", srv, out)
	for _, want := range []string{"matched rule flood (2nd of 3 considered)", "rport wants 7401, has 7400", "policer (rule flood): " + strconv.FormatUint(st.Drops, 10) + " of this flow's packets"} {
		if !strings.Contains(out, want) {
			t.Errorf("the human answer lacks %q", want)
		}
	}
}

// TestExplainOnlyOwnProcesses: nobody cannot explain root's process
// (refused, exit code 5, nothing of it shown) and can explain their own.
func TestExplainOnlyOwnProcesses(t *testing.T) {
	parallel(t)
	e := newEnv(t)
	e.startDaemon()
	openForNobody(t, e)
	e.hostqos("link", "set", e.iface())
	rootProc, _ := e.start("sleep", "60")
	own := e.asUser(uidNobody, "sleep", "60")
	if err := own.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = own.Process.Kill(); _ = own.Wait() })

	out, err := e.userHostqos(uidNobody, "explain", "--pid", strconv.Itoa(rootProc.Process.Pid), "-o", "json")
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 5 || !strings.Contains(out, "another user's") {
		t.Errorf("nobody explains root's process: %v\n%s\nwant exit code 5 (not permitted)", err, out)
	}
	if strings.Contains(out, "sleep") {
		t.Errorf("the refusal tells of root's process: %s", out)
	}
	out, err = e.userHostqos(uidNobody, "explain", "--pid", strconv.Itoa(own.Process.Pid), "-o", "json")
	if err != nil {
		t.Fatalf("nobody explains their own process: %v\n%s", err, out)
	}
	if !strings.Contains(out, fmt.Sprintf(`"pid": %d`, own.Process.Pid)) || !strings.Contains(out, `"comm": "sleep"`) {
		t.Errorf("nobody's own process: %s", out)
	}
	// Root explains either.
	var x api.Explanation
	e.hostqosJSON(&x, "explain", "--pid", strconv.Itoa(rootProc.Process.Pid))
	if x.App == nil || x.App.UID == nil || *x.App.UID != 0 {
		t.Errorf("root explains root's process: app %+v", x.App)
	}
}
