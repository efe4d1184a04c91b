package integration

import (
	"os"
	"strings"
	"testing"
	"time"
)

// TestFreshInstallSaysWhatToDo: a new user's first minutes. hostqosd runs
// with the config file the packages ship (no link) while an app sends;
// status, stat flows, top and the history say that nothing is counted
// without a managed link and how to add one — to root and to an ordinary
// user alike — instead of staying empty. Once the link is managed, the
// app's flow shows.
func TestFreshInstallSaysWhatToDo(t *testing.T) {
	parallel(t)
	shipped, err := os.ReadFile("../../packaging/hostqos.toml")
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t)
	e.writeConfig(string(shipped))
	e.startDaemon()
	openForNobody(t, e)
	e.start(hostqosBin(), "tool", "udp-send", "--to", serverV4.Addr().String()+":7500", "--pps", "100", "--size", "200", "--duration", "60s")
	time.Sleep(500 * time.Millisecond)

	const hint = "no managed link: hostqos counts and shapes traffic only on managed links; add one with `hostqos link set "
	for _, args := range [][]string{{"status"}, {"stat", "flows"}, {"stat", "apps"}, {"stat"}, {"top"}, {"stat", "history"}, {"link", "list"}} {
		if out := e.hostqos(args...); !strings.Contains(out, hint) {
			t.Errorf("hostqos %s on a fresh install:\n%s\nsays nothing of managing a link", strings.Join(args, " "), out)
		}
	}
	if out, err := e.userHostqos(uidNobody, "stat", "flows"); err != nil || !strings.Contains(out, hint) {
		t.Errorf("hostqos stat flows as nobody on a fresh install: %v\n%s", err, out)
	}
	if out := e.hostqos("stat", "flows", "-o", "json"); strings.Contains(out, "no managed link") {
		t.Errorf("stat flows -o json carries the hint; JSON stays data:\n%s", out)
	}

	// What the hint says to do works: the app's flow shows.
	e.hostqos("link", "set", e.iface(), "--egress-rate", "19mbit")
	var out string
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(300 * time.Millisecond) {
		if out = e.hostqos("stat", "flows"); strings.Contains(out, ":7500") {
			break
		}
	}
	if !strings.Contains(out, ":7500") || strings.Contains(out, "no managed link") {
		t.Errorf("stat flows after link set:\n%s\nwant the app's flow to port 7500", out)
	}
}
