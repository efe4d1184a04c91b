package integration

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hostqos/hostqos/api"
)

// TestTopInTmux: `hostqos top` in a tmux pane shows the test app and the
// rate it sends (about its 4 Mbit/s ceiling), and not an app that exited
// (its flow is still in the flow table); pressing c, typing bulk, Enter and
// y puts it in class bulk, and `rule show` confirms the rule top made for
// it, keeping the app's 4mbit ceiling; a limit typed as 2mbits is refused
// on the prompt's line, saying why.
func TestTopInTmux(t *testing.T) {
	parallel(t)
	if _, err := exec.LookPath("tmux"); err != nil {
		t.Fatal("tmux is not installed; run scripts/install-deps.sh")
	}
	e := newEnv(t)
	e.startDaemon()
	app := e.app("top-app")
	e.hostqos("link", "set", e.iface(), "--egress-rate", "100mbit")
	e.hostqos("rule", "add", "capped", "--exe", app, "--maxbw", "4mbit")
	to := serverV4.Addr().String() + ":7400"
	e.tcpSink(to, 40*time.Second, 0)
	e.start(app, "tool", "tcp-send", "--to", to, "--duration", "30s")
	gone := e.app("gone-app") // sends a little and exits before top starts
	goneTo := serverV4.Addr().String() + ":7401"
	e.udpSink(goneTo, 40*time.Second)
	e.runApp(gone, "tool", "udp-send", "--to", goneTo, "--pps", "200", "--count", "20", "--size", "100")

	sock := filepath.Join(e.dir, "tmux.sock") // a tmux server of this test's own
	tmux := func(args ...string) string {
		t.Helper()
		out, err := exec.Command("tmux", append([]string{"-S", sock}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("tmux %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	tmux("new-session", "-d", "-s", "top", "-x", "200", "-y", "30",
		fmt.Sprintf("%s --socket %s top; sleep 60", hostqosBin(), e.d.Socket))
	t.Cleanup(func() { _ = exec.Command("tmux", "-S", sock, "kill-server").Run() })
	screen := func() string { return tmux("capture-pane", "-p", "-t", "top") }

	// The app's row: its pid, its name, then its rate (OUT) near 4mbit.
	row := regexp.MustCompile(`(?m)^\d+\s+[+-] top-app\s+0\s+\d+\s+([0-9.]+)mbit/s`)
	eventually(t, 15*time.Second, "top shows the app sending about 4 Mbit/s", func() (bool, string) {
		s := screen()
		m := row.FindStringSubmatch(s)
		if m == nil {
			return false, s
		}
		var rate float64
		fmt.Sscan(m[1], &rate)
		return rate > 2 && rate < 5, s
	})
	t.Logf("top:\n%s", screen())
	if s := screen(); strings.Contains(s, "gone-app") {
		t.Errorf("top shows gone-app, which exited:\n%s", s)
	}
	st, err := e.d.Stats("flows")
	if err != nil {
		t.Fatal(err)
	}
	goneFlows := 0
	for _, f := range st.Flows {
		if f.Comm == "gone-app" && f.Exited {
			goneFlows++
		}
	}
	if goneFlows == 0 {
		t.Errorf("stat flows has no flow of gone-app marked exited: %+v", st.Flows)
	}

	tmux("send-keys", "-t", "top", "c")
	eventually(t, 5*time.Second, "class prompt", func() (bool, string) { s := screen(); return strings.Contains(s, "class for top-app"), s })
	tmux("send-keys", "-t", "top", "bulk", "Enter")
	eventually(t, 5*time.Second, "confirmation", func() (bool, string) {
		s := screen()
		return strings.Contains(s, "add rule top-top-app") && strings.Contains(s, "[y/N]"), s
	})
	tmux("send-keys", "-t", "top", "y")
	var ri api.RuleInfo
	eventually(t, 5*time.Second, "rule show confirms class bulk", func() (bool, string) {
		if err := e.d.CLIJSON(&ri, "rule", "show", "top-top-app"); err != nil {
			return false, err.Error() + "\n" + screen()
		}
		return ri.Rule.Class == "bulk" && ri.Rule.Exe == app && ri.Rule.MaxBW == 4e6, fmt.Sprintf("%+v", ri.Rule)
	})
	eventually(t, 5*time.Second, "top shows the app in class bulk", func() (bool, string) {
		s := screen()
		return regexp.MustCompile(`top-app .*top-top-app\s+bulk\s+max 4mbit`).MatchString(s), s
	})
	t.Logf("after c bulk y:\n%s", screen())

	tmux("send-keys", "-t", "top", "l")
	eventually(t, 5*time.Second, "limit prompt", func() (bool, string) { s := screen(); return strings.Contains(s, "limit for top-app"), s })
	tmux("send-keys", "-t", "top", "2mbits", "Enter")
	eventually(t, 5*time.Second, "the prompt says why 2mbits is refused", func() (bool, string) {
		s := screen()
		return strings.Contains(s, "2mbits_") && strings.Contains(s, `unknown rate unit "mbits"; write 2mbit`), s
	})
	tmux("send-keys", "-t", "top", "Escape")
}
