package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hostqos/hostqos/internal/policy"
)

// scaleConfig writes a config of exes rules by executable (each its own
// file) and flows rules by remote host, UDP port and protocol, then the
// rule a test's traffic hits, last.
func scaleConfig(t *testing.T, e *env, exes, flows int, last string) string {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "[[link]]\nname = %q\n", e.iface())
	bin := filepath.Join(e.dir, "exes")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < exes; i++ {
		p := filepath.Join(bin, fmt.Sprintf("app%d", i))
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "\n[[rule]]\nname = \"exe-%d\"\nexe = %q\nclass = \"interactive\"\n", i, p)
	}
	for i := 0; i < flows; i++ {
		fmt.Fprintf(&b, "\n[[rule]]\nname = \"flow-%d\"\nproto = \"udp\"\nremote = \"198.19.%d.%d/32\"\nrport = %d\nclass = \"bulk\"\n", i, i/250, i%250, 5000+i%50)
	}
	b.WriteString(last)
	path := filepath.Join(e.dir, fmt.Sprintf("scale-%d.toml", exes+flows))
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestTenThousandRules: a config of 10,000 rules (1,000
// by executable, 9,000 by flow) passes `hostqos config check` and runs in
// the daemon, whose classifier finds the last rule for a UDP flow; a config
// over the limit is refused by both, with the same message.
func TestTenThousandRules(t *testing.T) {
	parallel(t)
	e := newEnv(t)
	last := fmt.Sprintf("\n[[rule]]\nname = \"last\"\nproto = \"udp\"\nremote = %q\nrport = 5999\nclass = \"voice\"\n", serverV4.Addr().String()+"/32")
	cfg := scaleConfig(t, e, 1000, 8999, last)
	out := e.hostqos("config", "check", cfg)
	if !strings.Contains(out, "10000 rules") {
		t.Errorf("config check: %s", out)
	}
	raw, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.writeConfig(string(raw))
	t0 := time.Now()
	e.startDaemon()
	t.Logf("daemon started with 10,000 rules in %v", time.Since(t0).Round(time.Millisecond))
	if st := e.status(); st.Counts.Rules != 10000 {
		t.Errorf("daemon holds %d rules, want 10000", st.Counts.Rules)
	}
	// A datagram to the last rule's host and port is counted by it.
	e.runApp(hostqosBin(), "tool", "udp-send", "--to", serverV4.Addr().String()+":5999", "--pps", "200", "--count", "3", "--size", "100")
	eventually(t, 5*time.Second, "the last rule counts the datagrams", func() (bool, string) {
		r := e.ruleStat("last")
		return r.Packets >= 3, fmt.Sprintf("%+v", r)
	})

	// Over the limit: the same refusal from config check and the daemon.
	e.d.Stop()
	over := scaleConfig(t, e, 0, policy.MaxRules, last)
	checkOut, err := e.hostqosErr("config", "check", over)
	if err == nil {
		t.Fatalf("config check accepted %d rules:\n%s", policy.MaxRules+1, checkOut)
	}
	want := fmt.Sprintf("%d rules: more rules than hostqos holds (%d)", policy.MaxRules+1, policy.MaxRules)
	if !strings.Contains(checkOut, want) {
		t.Errorf("config check says %q, want it to contain %q", checkOut, want)
	}
	raw, err = os.ReadFile(over)
	if err != nil {
		t.Fatal(err)
	}
	e.writeConfig(string(raw))
	err = e.d.Start()
	if err == nil {
		t.Fatalf("the daemon started with %d rules", policy.MaxRules+1)
	}
	line := checkOut[strings.Index(checkOut, "policy: "):]
	line = strings.TrimSpace(strings.SplitN(line, "\n", 2)[0])
	if !strings.Contains(err.Error(), line) {
		t.Errorf("the daemon refused with\n%v\nnot with config check's\n%s", err, line)
	}
}
