package integration

import (
	"os"
	"strings"
	"testing"
	"time"
)

// TestIdleDaemonAsksNothing: a daemon with 10,000 rules (1,000 by
// executable, each its own file) and a shaped link that nothing changes
// makes no netlink dump and resolves no app selector over 10 s, answering
// status meanwhile; a file created in the exe selectors' directory is
// still noticed (the rules resolve again), and a removed HTB root is
// still put back.
func TestIdleDaemonAsksNothing(t *testing.T) {
	parallel(t)
	e := newEnv(t)
	// No IPv6 on the link: router solicitations and MLD reports would be
	// traffic through the shaper.
	if out, err := e.client.Command("sysctl", "-qw", "net.ipv6.conf."+e.iface()+".disable_ipv6=1").CombinedOutput(); err != nil {
		t.Fatalf("disable IPv6 on %s: %v: %s", e.iface(), err, out)
	}
	cfg := scaleConfig(t, e, 1000, 9000, "")
	raw, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	link := "[[link]]\nname = \"" + e.iface() + "\"\n"
	e.writeConfig(strings.Replace(string(raw), link, link+"egress_rate = \"100mbit\"\n", 1))
	e.startDaemon()
	time.Sleep(3 * time.Second) // the first audit after the start
	before := e.status()
	if before.Counts.Rules != 10000 || len(before.Links) != 1 || !before.Links[0].Shaping {
		t.Fatalf("daemon holds %d rules, links %+v", before.Counts.Rules, before.Links)
	}
	for range 10 {
		time.Sleep(time.Second)
		e.status()
	}
	after := e.status()
	w0, w1 := before.Daemon.Work, after.Daemon.Work
	if n := w1.NetlinkDumps - w0.NetlinkDumps; n != 0 {
		t.Errorf("the idle daemon made %d netlink dumps in 10 s (packets through the classifier: %d → %d)", n, before.Datapath.Packets, after.Datapath.Packets)
	}
	if n := w1.SelectorReads - w0.SelectorReads; n != 0 {
		t.Errorf("the idle daemon resolved %d app selectors in 10 s", n)
	}

	// Still awake: a new file in the selectors' directory resolves them
	// again, and a removed HTB root is put back.
	if err := os.WriteFile(e.dir+"/exes/new", []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "the exe selectors resolved again", func() (bool, string) {
		w := e.status().Daemon.Work
		return w.SelectorReads > w1.SelectorReads, "no selector read"
	})
	if out, err := e.client.Command("tc", "qdisc", "del", "dev", e.iface(), "root").CombinedOutput(); err != nil {
		t.Fatalf("tc qdisc del: %v\n%s", err, out)
	}
	eventually(t, 5*time.Second, "HTB root restored", func() (bool, string) {
		out, _ := e.client.Command("tc", "qdisc", "show", "dev", e.iface()).CombinedOutput()
		return strings.Contains(string(out), "htb 4851:"), string(out)
	})
}
