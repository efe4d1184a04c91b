package integration

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hostqos/hostqos/api"
)

// window is a daily schedule window in UTC from now+from to now+to
// (minutes; it may run past midnight).
func window(from, to int) string {
	now := time.Now().UTC()
	a, b := now.Add(time.Duration(from)*time.Minute), now.Add(time.Duration(to)*time.Minute)
	return fmt.Sprintf("daily %02d:%02d-%02d:%02d", a.Hour(), a.Minute(), b.Hour(), b.Minute())
}

// TestScheduleInDaemon: the real daemon honours a rule's schedule. A UDP
// drop rule whose window holds now drops the app's packets; given a window
// that does not hold now it is switched off within a second (rule show says
// so, a schedule.off event is published) and the packets reach the
// receiver. (Switching at the windows' edges over a controllable clock is
// the engine's unit test TestScheduleSwitchesRule.)
func TestScheduleInDaemon(t *testing.T) {
	parallel(t)
	e := newEnv(t)
	e.startDaemon()
	e.hostqos("link", "set", e.iface())
	e.hostqos("rule", "add", "nightly", "--proto", "udp", "--rport", "7500-7509", "--action", "drop",
		"--schedule", window(-60, 60), "--timezone", "UTC")
	send := func(port int) (drops, got, sent uint64) {
		t.Helper()
		to := fmt.Sprintf("%s:%d", serverV4.Addr(), port)
		sink, endSink := e.udpSinkEnd(to, 3*time.Second)
		e.runApp(hostqosBin(), "tool", "udp-send", "--to", to, "--rate", "1mbit", "--size", "500", "--duration", "1s")
		endSink()
		r := waitResult(t, sink, 10*time.Second)
		// sent: what the app says it sent (its FIN); a loaded machine's
		// sender falls behind its 250 a second.
		return e.ruleStat("nightly").Drops, r.Packets, r.Expected
	}
	var ri api.RuleInfo
	e.hostqosJSON(&ri, "rule", "show", "nightly")
	if ri.Schedule == nil || !ri.Schedule.Active {
		t.Fatalf("schedule %s holding now: %+v", ri.Rule.Schedule, ri.Schedule)
	}
	if drops, got, _ := send(7500); got != 0 || drops == 0 {
		t.Fatalf("inside the window: receiver got %d packets, rule dropped %d; want all dropped", got, drops)
	}
	time.Sleep(1500 * time.Millisecond) // a tick sees the rule on

	e.hostqos("rule", "set", "nightly", "--schedule", window(120, 180))
	eventually(t, 5*time.Second, "rule show says the rule is off", func() (bool, string) {
		e.hostqosJSON(&ri, "rule", "show", "nightly")
		return ri.Schedule != nil && !ri.Schedule.Active, fmt.Sprintf("%+v", ri.Schedule)
	})
	before := e.ruleStat("nightly").Drops
	if drops, got, sent := send(7501); got == 0 || got < sent*9/10 || drops != before {
		t.Errorf("outside the window: receiver got %d of %d packets sent, rule dropped %d more; want them delivered", got, sent, drops-before)
	}
	out := e.hostqos("events", "--kind", "schedule", "--since", "0", "--count", "2")
	if !strings.Contains(out, "schedule.off") || !strings.Contains(out, "rule/nightly") {
		t.Errorf("no schedule.off event for rule nightly:\n%s", out)
	}
}
