package integration

import (
	"os"
	"strings"
	"testing"
	"time"
)

// TestZeroConfigManagesDefaultRoute: with the shipped config (no link) on
// a host with a default route, the daemon manages the default route's
// interface on its own — counting and marking, not shaping — so an app's
// flow shows at once, and status says what it chose and how to change it;
// auto_links = "off" turns this off.
func TestZeroConfigManagesDefaultRoute(t *testing.T) {
	shipped, err := os.ReadFile("../../packaging/hostqos.toml")
	if err != nil {
		t.Fatal(err)
	}
	for _, off := range []bool{false, true} {
		e := newEnv(t)
		if out, err := e.client.Command("ip", "route", "add", "default", "via", serverV4.Addr().String()).CombinedOutput(); err != nil {
			t.Fatalf("add default route: %v: %s", err, out)
		}
		cfg := string(shipped)
		if off {
			cfg = "auto_links = \"off\"\n" + cfg
		}
		e.writeConfig(cfg)
		e.startDaemon()
		e.start(hostqosBin(), "tool", "udp-send", "--to", serverV4.Addr().String()+":7510", "--pps", "100", "--size", "200", "--duration", "30s")
		if off {
			time.Sleep(time.Second)
			if out := e.hostqos("status"); !strings.Contains(out, "no managed link") {
				t.Errorf("auto_links = off: status\n%s\nwant the no-link hint", out)
			}
			continue
		}
		st := e.status()
		if len(st.AutoLinks) != 1 || st.AutoLinks[0] != e.iface() || len(st.Links) != 1 || st.Links[0].EgressRate != 0 {
			t.Fatalf("auto links %v, links %+v; want %s managed, unshaped", st.AutoLinks, st.Links, e.iface())
		}
		if out := e.hostqos("status"); !strings.Contains(out, "no link configured: hostqos manages "+e.iface()) || !strings.Contains(out, "auto_links") {
			t.Errorf("status does not say what it chose and how to change it:\n%s", out)
		}
		var out string
		for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(300 * time.Millisecond) {
			if out = e.hostqos("stat", "flows"); strings.Contains(out, ":7510") {
				break
			}
		}
		if !strings.Contains(out, ":7510") {
			t.Errorf("stat flows with the automatic link:\n%s\nwant the app's flow to port 7510", out)
		}
		// Managing a link replaces the choice.
		e.hostqos("link", "set", e.iface(), "--egress-rate", "50mbit")
		if st := e.status(); len(st.AutoLinks) != 0 || len(st.Links) != 1 || st.Links[0].EgressRate != 50_000_000 {
			t.Errorf("after link set: auto links %v, links %+v", st.AutoLinks, st.Links)
		}
	}
}
