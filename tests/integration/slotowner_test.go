package integration

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/testutil"
)

// TestRemovedRulesFlowNotNamedAfterNewOwner (live stats named the wrong
// rule): an app's flow is classified under rule top-hostqos; the rule is
// removed and rule dl added — a drop rule for a program that never runs,
// which cannot match the flow — and dl takes the rule slot top-hostqos
// freed. `stat flows` and `stat apps` must not show the flow under dl.
// When the flow sends again it is classified under the current policy:
// not dropped by dl, not counted under it.
func TestRemovedRulesFlowNotNamedAfterNewOwner(t *testing.T) {
	parallel(t)
	e := newEnv(t)
	e.startDaemon()
	e.hostqos("link", "set", e.iface())
	app := e.app("top-app")
	never := e.app("never-runs")
	sn, err := testutil.StartReceiver(e.server, e.server.Iface("client"))
	if err != nil {
		t.Fatal(err)
	}
	defer sn.Stop()
	const port = 7410
	to := serverV4.Addr().String() + ":7410"
	from := clientV4.Addr().String() + ":47410" // one flow, the same 5-tuple every time
	send := func() {
		t.Helper()
		e.runApp(app, "tool", "udp-send", "--to", to, "--from", from, "--pps", "200", "--count", "20", "--size", "100")
	}
	var pid uint32 // the app's, as the flow table has it
	flowRule := func() (rule string, found bool) {
		t.Helper()
		var st api.Stats
		e.hostqosJSON(&st, "stat", "flows", "-o", "json")
		for _, f := range st.Flows {
			if f.Local == from && f.Remote == to {
				pid = f.PID
				return f.Rule, true
			}
		}
		return "", false
	}
	appRules := func() (rules []string, found bool) {
		t.Helper()
		var st api.Stats
		e.hostqosJSON(&st, "stat", "apps", "-o", "json")
		for _, a := range st.Apps {
			if a.PID == pid {
				return a.Rules, true
			}
		}
		return nil, false
	}

	e.hostqos("rule", "add", "top-hostqos", "--exe", app)
	send()
	if rule, ok := flowRule(); !ok || rule != "top-hostqos" {
		t.Fatalf("the app's flow: found %v, rule %q; want it under top-hostqos", ok, rule)
	}
	e.hostqos("rule", "remove", "top-hostqos")
	e.hostqos("rule", "add", "dl", "--exe", never, "--action", "drop")
	slots := ruleSlots(t, e)
	if _, gone := slots["top-hostqos"]; gone || slots["dl"] != 0 {
		t.Fatalf("rule slots %v: dl did not take the slot top-hostqos had (0); the test shows nothing", slots)
	}
	if rule, ok := flowRule(); !ok || rule != "" {
		t.Errorf("stat flows after top-hostqos was removed and dl added: found %v, rule %q; want the flow without a rule (dl cannot match it)", ok, rule)
	}
	if rules, ok := appRules(); !ok || slices.Contains(rules, "dl") {
		t.Errorf("stat apps: the app (pid %d) found %v, under rules %v; want it, not under dl, which cannot match it", pid, ok, rules)
	}

	// The flow again: classified under the current policy, which no rule
	// of matches it.
	_, before := sn.DSCPCounts(unix.IPPROTO_UDP, port)
	send()
	eventually(t, 5*time.Second, "the flow's second packets at the receiver", func() (bool, string) {
		_, n := sn.DSCPCounts(unix.IPPROTO_UDP, port)
		return n-before >= 20, fmt.Sprintf("%d of 20 arrived", n-before) // and the sender's end markers
	})
	if st := e.ruleStat("dl"); st.Packets != 0 || st.Drops != 0 {
		t.Errorf("dl counted %d packets, %d drops of a flow it cannot match", st.Packets, st.Drops)
	}
	if rule, ok := flowRule(); !ok || rule != "" {
		t.Errorf("stat flows after the flow sent again: found %v, rule %q; want no rule", ok, rule)
	}
}

// ruleSlots reads the rule slots the daemon's state file holds (snapshot
// and journal).
func ruleSlots(t *testing.T, e *env) map[string]int {
	t.Helper()
	path := filepath.Join(e.d.Dir, "state", "state.json")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var snap struct {
		Slots struct {
			Rules map[string]int `json:"rules"`
		} `json:"slots"`
	}
	if err := json.Unmarshal(data, &snap); err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	slots := snap.Slots.Rules
	if slots == nil {
		slots = map[string]int{}
	}
	f, err := os.Open(path + ".journal")
	if err != nil {
		return slots
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		_, rec, _ := strings.Cut(sc.Text(), " ")
		var r struct {
			Ops []struct {
				Kind  string           `json:"k"`
				Name  string           `json:"n"`
				Value *json.RawMessage `json:"v"`
			} `json:"ops"`
		}
		if err := json.Unmarshal([]byte(rec), &r); err != nil {
			t.Fatalf("read %s.journal: %v", path, err)
		}
		for _, op := range r.Ops {
			if op.Kind != "slot.rules" {
				continue
			}
			if op.Value == nil {
				delete(slots, op.Name)
				continue
			}
			var v int
			if err := json.Unmarshal(*op.Value, &v); err != nil {
				t.Fatal(err)
			}
			slots[op.Name] = v
		}
	}
	return slots
}
