package engine

import (
	"context"
	"net/netip"
	"os"
	"os/exec"
	"testing"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/datapath"
	"github.com/hostqos/hostqos/internal/policy"
	"github.com/hostqos/hostqos/internal/shaper"
)

// TestStats: rule, class, flow and app statistics come from the kernel's
// counters with rates between samples; an ordinary user sees only their
// own flows and apps; an unknown kind is not found.
func TestStats(t *testing.T) {
	env := newEnv(t, shapedConfig)
	e := env.start(t)
	k := env.k
	slot := e.slots.Rules["a"]
	voice := e.slots.Classes["voice"]
	k.Counters = make([]datapath.Counters, datapath.MaxRules)
	k.Counters[slot] = datapath.Counters{Packets: 10, Bytes: 1000}
	k.ClassCounters[2] = []shaper.ClassStats{{Minor: shaper.ClassLeafMinor(voice), Packets: 5, Bytes: 500}}
	e.Tick()
	k.Counters[slot] = datapath.Counters{Packets: 20, Bytes: 3000}
	k.ClassCounters[2] = []shaper.ClassStats{{Minor: shaper.ClassLeafMinor(voice), Packets: 9, Bytes: 900, Backlog: 3}}
	k.EgressPackets += 4
	e.Tick()

	var st api.Stats
	if err := e.Stats(root, "rules", &st); err != nil {
		t.Fatal(err)
	}
	if len(st.Rules) != 1 || st.Rules[0].Rule != "a" || st.Rules[0].Packets != 20 || st.Rules[0].RateBps <= 0 {
		t.Errorf("rule stats %+v", st.Rules)
	}
	if err := e.Stats(root, "classes", &st); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, c := range st.Classes {
		if c.Class == "voice" {
			found = true
			if c.Link != "eth0" || c.Packets != 9 || c.Backlog != 3 || c.RateBps <= 0 {
				t.Errorf("voice on eth0: %+v", c)
			}
		}
	}
	if !found {
		t.Errorf("class stats %+v", st.Classes)
	}

	flow := func(uid, pid uint32, port uint16, bytes uint64) datapath.Flow {
		return datapath.Flow{
			Key:      datapath.FlowKey{Proto: 17, Local: netip.MustParseAddrPort("198.18.0.1:5000"), Remote: netip.AddrPortFrom(netip.MustParseAddr("198.18.0.2"), port)},
			RuleSlot: slot, PID: pid, UID: uid, Comm: "app", Counters: datapath.Counters{Packets: 1, Bytes: bytes},
		}
	}
	k.FlowTable = []datapath.Flow{flow(0, 0, 7000, 10), flow(65534, 42, 7001, 300), flow(1001, 43, 7002, 200), flow(65534, 42, 7003, 100)}
	if err := e.Stats(root, "flows", &st); err != nil {
		t.Fatal(err)
	}
	if len(st.Flows) != 4 || st.Flows[0].Bytes != 300 || st.Flows[0].Rule != "a" || st.Flows[0].Proto != "udp" || st.Flows[0].Remote != "198.18.0.2:7001" {
		t.Errorf("root's flows %+v", st.Flows)
	}
	if err := e.Stats(nobody, "flows", &st); err != nil {
		t.Fatal(err)
	}
	if len(st.Flows) != 2 {
		t.Errorf("nobody's flows %+v", st.Flows)
	}
	if err := e.Stats(nobody, "apps", &st); err != nil {
		t.Fatal(err)
	}
	if len(st.Apps) != 1 || st.Apps[0].PID != 42 || st.Apps[0].Flows != 2 || st.Apps[0].Bytes != 400 {
		t.Errorf("nobody's apps %+v", st.Apps)
	}
	if err := e.Stats(root, "colour", &st); err == nil {
		t.Error("unknown kind answered")
	}
	var s api.Status
	e.Status(nobody, &s)
	if s.Counts.Flows != 4 || s.Datapath.Packets != 10+4+20 { // the fake's 10, 4 more, the rule's 20
		t.Errorf("status counts %+v datapath %+v", s.Counts, s.Datapath)
	}

	// A flow of a process that exited says so (top drops its app).
	k.FlowTable = []datapath.Flow{flow(0, uint32(os.Getpid()), 7000, 10), flow(0, exitedPID(t), 7001, 10)}
	if err := e.Stats(root, "apps", &st); err != nil {
		t.Fatal(err)
	}
	if len(st.Apps) != 2 {
		t.Fatalf("apps %+v, want the living and the exited process", st.Apps)
	}
	for _, a := range st.Apps {
		if a.Exited != (a.PID != uint32(os.Getpid())) {
			t.Errorf("app %d: exited %v", a.PID, a.Exited)
		}
	}
}

// exitedPID is the pid of a process that has exited (and was reaped).
func exitedPID(t *testing.T) uint32 {
	t.Helper()
	c := exec.Command("true")
	if err := c.Run(); err != nil {
		t.Skipf("cannot run true: %v", err)
	}
	return uint32(c.Process.Pid)
}

// TestStatsRuleAddedWhileIdle: the rule counters are read again only when
// the classifiers saw packets, and a reading is only as long as the slots
// in use then; a rule added while nothing moved is still listed, at zero.
func TestStatsRuleAddedWhileIdle(t *testing.T) {
	env := newEnv(t, shapedConfig)
	e := env.start(t)
	k := env.k
	slot := e.slots.Rules["a"]
	k.Counters = make([]datapath.Counters, slot+1) // the slots in use
	k.Counters[slot] = datapath.Counters{Packets: 10, Bytes: 1000}
	e.Tick()
	if _, err := e.AddRule(context.Background(), root, policy.Rule{Name: "late", Proto: "udp", DSCP: policy.NoDSCP, DSCPIn: policy.NoDSCP}, false); err != nil {
		t.Fatal(err)
	}
	late := e.slots.Rules["late"]
	if late < len(k.Counters) {
		t.Fatalf("the new rule's slot %d is within the old reading's %d", late, len(k.Counters))
	}
	// The kernel now reports the new slot too; no packet moved.
	k.Counters = append(k.Counters, make([]datapath.Counters, late+1-len(k.Counters))...)
	e.Tick()
	var st api.Stats
	if err := e.Stats(root, "rules", &st); err != nil {
		t.Fatal(err)
	}
	got := map[string]uint64{}
	for _, r := range st.Rules {
		got[r.Rule] = r.Packets
	}
	if p, ok := got["late"]; !ok || p != 0 || got["a"] != 10 {
		t.Errorf("rule stats %+v; want a with 10 packets and late with none", st.Rules)
	}
}
