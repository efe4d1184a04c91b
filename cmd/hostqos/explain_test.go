package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/hostqos/hostqos/api"
)

// testExplanation is a flow that matched its 3rd rule of 12, policed, in
// the flow table.
func testExplanation() api.Explanation {
	af41, uid := 34, uint32(1000)
	svc := api.ExplainService{Rule: "web", Action: "pass", Class: "interactive", Priority: 1, DSCP: &af41,
		Police: &api.ExplainPolicer{Rate: 2e6, Burst: 16384},
		Leaves: []api.ExplainLeaf{{Link: "eth0", ClassID: "4851:105", Label: "rule 5", Rate: 1e6, Ceil: 20e6, Drops: 7, Flows: 3}}}
	key := api.ExplainFlowKey{Proto: "tcp", Local: "198.18.0.1:40000", Remote: "198.18.0.2:443"}
	return api.Explanation{
		Subject: "flow tcp 198.18.0.1:40000 → 198.18.0.2:443 of app curl[42]", Flow: &key,
		App:       &api.ExplainApp{PID: 42, Exe: "/usr/bin/curl", Comm: "curl", UID: &uid, Cgroup: "/user.slice"},
		RuleCount: 12,
		Rules: []api.RuleCheck{
			{Position: 1, Rule: "zoom", Result: api.CheckNo, Failed: []api.SelectorCheck{{Selector: "exe", Want: "/opt/zoom/*", Got: "/usr/bin/curl"}}},
			{Position: 2, Rule: "dns", Result: api.CheckNo, Failed: []api.SelectorCheck{{Selector: "rport", Want: "53", Got: "443"}}},
			{Position: 3, Rule: "web", Result: api.CheckMatched},
		},
		Match: &api.ExplainMatch{Rule: "web", Position: 3}, Service: &svc,
		Flows: []api.FlowExplanation{{ExplainFlowKey: key, PID: 42, Comm: "curl", UID: 1000, Rule: "web", Position: 3, Certain: true,
			Kernel:  api.KernelFlow{Rule: "web", Current: true, Agrees: true, Out: api.Counter{Packets: 100, Bytes: 100_000, Drops: 12}},
			Service: svc,
			Drops: []api.ExplainDrop{{Cause: "policer", By: "rule web", Packets: 12, Scope: api.ScopeFlow, Why: "the rule's policer passes 2mbit"},
				{Cause: "queue", By: "link eth0 leaf 4851:105", Packets: 7, Scope: api.ScopeShared, SharedBy: 3, Why: "the HTB leaf's queue was full"}}}},
		FlowsTotal: 1,
	}
}

// TestExplainCommand: the flags make the query (checked before anything is
// sent), the answer reads as one, and -o json is the daemon's answer.
func TestExplainCommand(t *testing.T) {
	c := &fakeClient{explain: testExplanation()}
	out, errOut, code := runFake(c, "explain", "--proto", "tcp", "--local", "198.18.0.1", "--lport", "40000", "--remote", "198.18.0.2", "--rport", "443", "--dscp", "AF41")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if want := `Explain {"PID":0,"Exe":"","Proto":"tcp","Local":"198.18.0.1","Remote":"198.18.0.2","LPort":40000,"RPort":443,"DSCP":34}`; len(c.calls) != 1 || c.calls[0] != want {
		t.Errorf("calls %q, want %q", c.calls, want)
	}
	for _, want := range []string{
		"flow tcp 198.18.0.1:40000 → 198.18.0.2:443 of app curl[42] matched rule web (3rd of 12 considered):",
		"checked as curl[42], exe /usr/bin/curl, uid 1000, cgroup /user.slice",
		"1  zoom  no: exe wants /opt/zoom/*, has /usr/bin/curl",
		"2  dns   no: rport wants 53, has 443",
		"3  web   matched",
		"rule web gives: class interactive (priority 1), DSCP AF41, policed at 2mbit (bucket 16384 bytes)",
		"link eth0: HTB leaf 4851:105 (rule 5), rate 1.00mbit/s, ceil 20.00mbit/s; its queue: 7 drops, 0B queued, shared by 3 flow(s)",
		"in the datapath: classified under rule web (under the policy in force); out 100 packets 97.7KiB, 12 dropped",
		"policer (rule web): 12 of this flow's packets — the rule's policer passes 2mbit",
		"queue (link eth0 leaf 4851:105): 7 packets, a counter shared by 3 flow(s)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("answer lacks %q:\n%s", want, out)
		}
	}

	out, _, code = runFake(c, "explain", "--pid", "42", "-o", "json")
	var x api.Explanation
	if err := json.Unmarshal([]byte(out), &x); code != exitOK || err != nil || x.Match == nil || x.Match.Rule != "web" {
		t.Errorf("-o json: exit %d, %v: %s", code, err, out)
	}

	for _, bad := range []struct {
		args []string
		want string
	}{
		{[]string{"explain"}, "say what to explain"},
		{[]string{"explain", "--pid", "42", "--exe", "/usr/bin/curl"}, "--pid or --exe, not both"},
		{[]string{"explain", "--remote", "198.18.0.0/24"}, `flag --remote = "198.18.0.0/24": want an IPv4 or IPv6 address`},
		{[]string{"explain", "--rport", "0"}, `flag --rport = "0"`},
		{[]string{"explain", "--proto", "sctp"}, `flag --proto = "sctp"`},
		{[]string{"explain", "--exe", "curl"}, `flag --exe = "curl": want an absolute path`},
		{[]string{"explain", "--proto", "icmp", "--rport", "5"}, "ICMP has no ports"},
		{[]string{"explain", "--local", "198.18.0.1", "--remote", "2001:db8::2"}, "address family"},
		{[]string{"explain", "--pid", "42", "-o", "yaml"}, "yaml"},
	} {
		c := &fakeClient{}
		_, errOut, code := runFake(c, bad.args...)
		if code != exitUsage || !strings.Contains(errOut, bad.want) || len(c.calls) != 0 {
			t.Errorf("%q: exit %d, %q, calls %q; want a usage error with %q, nothing sent", bad.args, code, errOut, c.calls, bad.want)
		}
	}
}

// TestExplainCutsRulesThatDidNotMatch: a table lists at most --rules of
// the rules that did not match, and says how many more there were.
func TestExplainCutsRulesThatDidNotMatch(t *testing.T) {
	x := testExplanation()
	x.RulesOmitted = 5
	c := &fakeClient{explain: x}
	out, _, _ := runFake(c, "explain", "--pid", "42", "--rules", "1")
	if strings.Contains(out, "dns") || !strings.Contains(out, "(6 more rules considered did not match; -o json lists them)") {
		t.Errorf("--rules 1:\n%s", out)
	}
}
