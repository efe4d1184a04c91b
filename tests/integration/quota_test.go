package integration

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hostqos/hostqos/api"
)

// TestQuotaLimitsApp: a quota of 5 MB with action "limit 1mbit" on an app:
// the app sends at full speed until the daemon has counted 5 MB; then
// rule show says the quota is reached, a quota.reached event is
// published, and the app's TCP goodput, measured at the receiver, falls to
// the 1 Mbit/s limit.
func TestQuotaLimitsApp(t *testing.T) {
	e := newEnv(t)
	e.startDaemon()
	app := e.app("quota-app")
	e.hostqos("link", "set", e.iface(), "--egress-rate", "200mbit")
	e.hostqos("rule", "add", "dl", "--exe", app, "--quota", "5MiB", "--quota-action", "limit 1mbit")

	// Full speed until the quota is used up; the sink ends after 3 s,
	// cutting what is still queued.
	to := serverV4.Addr().String() + ":7300"
	sink := e.tcpSink(to, 3*time.Second, 0)
	before := e.ruleStat("dl").Bytes
	begin := time.Now()
	e.start(app, "tool", "tcp-send", "--to", to, "--duration", "10s")
	var ri api.RuleInfo
	eventually(t, 8*time.Second, "quota reached in rule show", func() (bool, string) {
		e.hostqosJSON(&ri, "rule", "show", "dl")
		if ri.Quota == nil {
			return false, "no quota in rule show"
		}
		return ri.Quota.Reached, fmt.Sprintf("used %d of %d", ri.Quota.Used, ri.Quota.Quota)
	})
	took := time.Since(begin)
	first := waitResult(t, sink, 30*time.Second)
	if first == nil || first.Bytes < 5<<20 {
		t.Fatalf("before the quota: the receiver got %+v; want more than 5 MB", first)
	}
	t.Logf("quota of 5 MB reached after %.1f s; the receiver got %.1f MB in its 3 s", took.Seconds(), float64(first.Bytes)/(1<<20))
	// The daemon counts a quota every 50 ms between its ticks (sooner
	// near the end): at this link's 200 Mbit/s the app gets little past
	// 5 MB before the limit applies (counted once a second, up to 25 MB).
	// Allowed: 5 MB, 3 s at 1 Mbit/s, and 8 MiB (a third of a second at
	// full speed) for a late reading on a loaded machine.
	if most := uint64(5<<20 + 3*1e6/8 + 8<<20); first.Bytes > most {
		t.Errorf("the receiver got %.1f MiB in 3 s with a 5 MB quota and a 1 Mbit/s limit; want at most %.1f MiB",
			float64(first.Bytes)/(1<<20), float64(most)/(1<<20))
	}
	if sent := e.ruleStat("dl").Bytes - before; ri.Quota.Used < 5<<20 || ri.Quota.Used > sent {
		t.Errorf("quota used %d bytes; the rule counted %d (want 5 MB ≤ used ≤ counted)", ri.Quota.Used, sent)
	}
	if ri.Rule.MaxBW != 0 {
		t.Errorf("the quota's limit changed the rule itself: maxbw %s", ri.Rule.MaxBW)
	}
	t.Logf("rule show: %s", e.hostqos("rule", "show", "dl"))
	// All held events (a "lost" marker for those before this daemon comes
	// first), then the quota's.
	var ev api.Event
	for _, line := range strings.Split(e.hostqos("events", "--kind", "quota", "--since", "0", "--count", "2", "-o", "json"), "\n") {
		if strings.HasPrefix(line, "{") {
			if err := json.Unmarshal([]byte(line), &ev); err != nil {
				t.Fatalf("event line %q: %v", line, err)
			}
		}
	}
	if ev.Kind != "quota.reached" || ev.Subject != "rule/dl" || ev.Fields["action"] != "limit 1mbit" {
		t.Errorf("event: %+v; want quota.reached of rule/dl with action limit 1mbit", ev)
	}
	t.Logf("event: %s (used_bytes %v)", ev.Message, ev.Fields["used_bytes"])

	measured(t, "goodput over quota / 1 Mbit/s", func(n int) (bool, string) {
		to := serverV4.Addr().String() + ":" + strconv.Itoa(7300+n)
		sink := e.tcpSink(to, 4*time.Second, 0)
		e.start(app, "tool", "tcp-send", "--to", to, "--duration", "7s")
		r := waitResult(t, sink, 30*time.Second)
		if r == nil {
			t.Fatal("no sink result")
		}
		// HTB's bucket lets a few frames more through at the start, which
		// weighs more at 1 Mbit/s over 4 s than at the rates of the
		// shaping tests: hence the upper bound of 1.1.
		ratio := r.GoodputBps / (1e6 * tcpPayloadShare)
		msg := fmt.Sprintf("goodput %.3f Mbit/s = %.3f of the 1 Mbit/s limit in payload (want 0.8–1.1)", r.GoodputBps/1e6, ratio)
		t.Log(msg)
		return ratio >= 0.8 && ratio <= 1.1, msg
	})
}
