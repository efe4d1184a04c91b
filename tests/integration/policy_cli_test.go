package integration

import (
	"context"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/policy"
)

// TestCLIManagesPolicy: classes and rules are added, changed and removed
// through the CLI; persistent changes survive a daemon restart, temporary
// ones a crash but not a clean restart; errors name what is wrong.
func TestCLIManagesPolicy(t *testing.T) {
	parallel(t)
	e := newEnv(t)
	e.startDaemon()
	e.hostqos("link", "set", e.iface(), "--egress-rate", "50mbit")
	e.hostqos("class", "add", "gold", "--dscp", "AF31", "--priority", "1", "--minbw", "2mbit")
	e.hostqos("class", "set", "gold", "--maxbw", "10mbit")
	e.hostqos("rule", "add", "r1", "--proto", "udp", "--class", "gold")
	e.hostqos("rule", "set", "r1", "--dscp", "EF", "--rport", "5000-5010")
	e.hostqos("rule", "add", "t1", "--proto", "tcp", "--temporary")

	if out, err := e.hostqosErr("rule", "add", "r1", "--proto", "tcp"); err == nil || !strings.Contains(out, "already exists") {
		t.Errorf("duplicate rule: %v\n%s", err, out)
	}
	if out, err := e.hostqosErr("rule", "set", "nope", "--dscp", "EF"); err == nil || !strings.Contains(out, `rule "nope" not found`) {
		t.Errorf("unknown rule: %v\n%s", err, out)
	}
	if out, err := e.hostqosErr("class", "remove", "gold"); err == nil || !strings.Contains(out, "r1") {
		t.Errorf("removing a class in use: %v\n%s", err, out)
	}
	if out, err := e.hostqosErr("rule", "add", "x", "--proto", "udp", "--maxbw", "10mbt"); err == nil || !strings.Contains(out, "--maxbw") {
		t.Errorf("bad flag value: %v\n%s", err, out)
	}

	check := func(when string) {
		t.Helper()
		var c api.ClassInfo
		e.hostqosJSON(&c, "class", "show", "gold")
		if c.Class.DSCP != 26 || c.Class.Priority != 1 || c.Class.MinBW != 2e6 || c.Class.MaxBW != 10e6 {
			t.Errorf("%s: class gold = %+v", when, c.Class)
		}
		var r api.RuleInfo
		e.hostqosJSON(&r, "rule", "show", "r1")
		if r.Rule.DSCP != 46 || r.Rule.Class != "gold" || r.Rule.RPort != (policy.PortRange{From: 5000, To: 5010}) || r.Source != "api" {
			t.Errorf("%s: rule r1 = %+v (source %s)", when, r.Rule, r.Source)
		}
	}
	temporaryThere := func() bool {
		var tr api.RuleInfo
		if err := e.d.CLIJSON(&tr, "rule", "show", "t1"); err != nil {
			return false
		}
		return tr.Source == "temporary"
	}
	check("before restart")
	if !temporaryThere() {
		t.Fatal("temporary rule t1 missing")
	}
	e.killDaemon(syscall.SIGKILL)
	e.startDaemon()
	check("after a crash")
	if !temporaryThere() {
		t.Error("a crash lost the temporary rule")
	}
	e.killDaemon(syscall.SIGTERM)
	e.startDaemon()
	check("after a clean restart")
	if temporaryThere() {
		t.Error("the temporary rule outlived a clean restart")
	}

	e.hostqos("rule", "remove", "r1")
	e.hostqos("class", "remove", "gold")
	var rules []api.RuleInfo
	e.hostqosJSON(&rules, "rule", "list")
	if len(rules) != 0 {
		t.Errorf("rules after removal: %+v", rules)
	}
}

// TestRunExitCodeAndCleanup: `hostqos run` exits with the program's exit
// code (128+N for a signal), and its rule and cgroup go away afterwards.
func TestRunExitCodeAndCleanup(t *testing.T) {
	parallel(t)
	e := sharedEnv(t)
	for _, c := range []struct {
		script string
		code   int
	}{{"exit 0", 0}, {"exit 7", 7}, {"kill -TERM $$", 128 + 15}} {
		cmd := e.client.Command(hostqosBin(), "--socket", e.d.Socket, "run", "--class", "bulk", "--", "sh", "-c", c.script)
		err := cmd.Run()
		got := 0
		if err != nil {
			xe, ok := err.(*exec.ExitError)
			if !ok {
				t.Fatalf("run %q: %v", c.script, err)
			}
			got = xe.ExitCode()
		}
		if got != c.code {
			t.Errorf("run %q: exit code %d, want %d", c.script, got, c.code)
		}
	}
	var rules []api.RuleInfo
	e.hostqosJSON(&rules, "rule", "list")
	if len(rules) != 0 {
		t.Errorf("run rules left after the programs ended: %+v", rules)
	}
	runs, err := e.cli.Runs().List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 0 {
		t.Errorf("runs left: %+v", runs)
	}
}
