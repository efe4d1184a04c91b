package integration

import (
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hostqos/hostqos/internal/testutil"
)

// TestRulesThatMatchNothingKeepThePolicyApplying: a rule whose cgroup,
// unit or executable does not exist matches nothing until it does — and
// the rest of the policy applies beside it. The derive used to give such a
// rule cgroup id 0 (which the datapath refuses, so every later change
// failed) or executable identity 0:0 (what a socket of a task without an
// executable carries). Now it is left out of the datapath, with a warning.
func TestRulesThatMatchNothingKeepThePolicyApplying(t *testing.T) {
	parallel(t)
	e := newEnv(t)
	e.startDaemon()
	e.hostqos("link", "set", e.iface())
	gone := "/hqtest-" + testutil.RandHex(4) + ".slice"
	e.hostqos("rule", "add", "bycgroup", "--cgroup", gone, "--dscp", "EF")
	e.hostqos("rule", "add", "byunit", "--unit", "hqtest-"+testutil.RandHex(4)+".service", "--dscp", "EF")
	e.hostqos("rule", "add", "byexe", "--exe", "/opt/hqtest-"+testutil.RandHex(4)+"/app", "--action", "drop")
	// A later change applies (it failed once a rule named a missing cgroup).
	e.hostqos("rule", "add", "marked", "--proto", "udp", "--rport", "7201", "--dscp", "AF41")
	warnings := strings.Join(e.status().Warnings, "\n")
	for _, name := range []string{"bycgroup", "byunit", "byexe"} {
		if !strings.Contains(warnings, `rule "`+name+`"`) {
			t.Errorf("status names no warning of rule %s:\n%s", name, warnings)
		}
	}

	sn, err := testutil.StartReceiver(e.server, e.server.Iface("client"))
	if err != nil {
		t.Fatal(err)
	}
	defer sn.Stop()
	srv := serverV4.Addr().String()
	e.udpSink(srv+":7201", 20*time.Second)
	e.runApp(e.app("plainapp"), "tool", "udp-send", "--to", srv+":7201", "--pps", "200", "--count", "20", "--size", "100")
	time.Sleep(300 * time.Millisecond)
	allDSCP(t, sn, unix.IPPROTO_UDP, 7201, dscpAF41, 20)

	// Removing them applies too.
	for _, name := range []string{"bycgroup", "byunit", "byexe", "marked"} {
		e.hostqos("rule", "remove", name)
	}
}
