package engine

import (
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/datapath"
	"github.com/hostqos/hostqos/internal/datapath/xdp"
	"github.com/hostqos/hostqos/internal/host/fakehost"
	"github.com/hostqos/hostqos/internal/observe"
	"github.com/hostqos/hostqos/internal/policy"
	"github.com/hostqos/hostqos/internal/shaper"
	"github.com/hostqos/hostqos/internal/store"
)

const explainConfig = `
[[link]]
name = "eth0"
egress_rate = "20mbit"
syn_rate = 100

[[rule]]
name = "curl-web"
comm = "curl"
proto = "tcp"
class = "voice"

[[rule]]
name = "web"
proto = "tcp"
rport = "443"
class = "interactive"
maxbw = "5mbit"

[[rule]]
name = "cap"
proto = "udp"
rport = "7000-7099"
police = "1mbit"

[[rule]]
name = "deny"
remote = "198.18.9.0/24"
action = "drop"

[[rule]]
name = "marked"
proto = "udp"
dscp_in = "EF"
class = "voice"

[[block]]
prefix = "198.18.66.0/24"
`

// explainEnv is an engine over a fake kernel with the XDP shield and
// explainConfig, whose processes are those of procs (by pid); any other
// pid has exited.
func explainEnv(t *testing.T, procs map[int]*observe.AppIdentity) (*Engine, *fakehost.FakeShieldKernel) {
	t.Helper()
	env := newEnv(t, explainConfig)
	e, sk := env.startShield(t)
	e.identify = func(pid int, _ string) (*observe.AppIdentity, error) {
		if a, ok := procs[pid]; ok {
			c := *a
			return &c, nil
		}
		return nil, fmt.Errorf("read comm of pid %d: %w", pid, fs.ErrNotExist)
	}
	sk.Counters = map[netip.Prefix]xdp.BlockCounters{}
	sk.FakeKernel.Counters = make([]datapath.Counters, datapath.MaxRules)
	return e, sk
}

func wget(pid uint32, uid uint32) *observe.AppIdentity {
	return &observe.AppIdentity{Ident: datapath.Identity{PID: pid, UID: uid, Comm: "wget", Exe: datapath.FileID{Dev: 8, Ino: 77}, Cgroups: []uint64{1, 2}},
		Exe: "/usr/bin/wget", Cgroup: "/user.slice"}
}

func tcpFlow(local, remote string, pid, uid uint32, comm string, slot int) datapath.Flow {
	return datapath.Flow{Key: datapath.FlowKey{Proto: 6, Local: netip.MustParseAddrPort(local), Remote: netip.MustParseAddrPort(remote)},
		RuleSlot: slot, PID: pid, UID: uid, Comm: comm, Counters: datapath.Counters{Packets: 10, Bytes: 10_000}}
}

// TestExplainFlowNamesRuleWhyAndLeaf: a TCP flow to port 443 of a wget
// process matches rule web, the 3rd of 5: curl-web was considered first
// and failed on its comm (it wants curl, the socket's process is wget),
// then deny on its remote prefix;
// the answer gives web's class, mark and HTB leaf with its guarantee and
// ceiling, and the leaf's queue drops as shared by the flows of the flow
// table the leaf carries; the datapath's entry agrees.
func TestExplainFlowNamesRuleWhyAndLeaf(t *testing.T) {
	e, sk := explainEnv(t, map[int]*observe.AppIdentity{42: wget(42, 1000)})
	k := sk.FakeKernel
	web := e.slots.Rules["web"]
	k.FlowTable = []datapath.Flow{
		tcpFlow("198.18.0.1:40000", "198.18.0.2:443", 42, 1000, "wget", web),
		tcpFlow("198.18.0.1:40001", "198.18.0.3:443", 43, 1000, "wget", web),
	}
	k.ClassCounters[2] = []shaper.ClassStats{{Minor: shaper.RuleLeafMinor(uint16(web)), Packets: 100, Drops: 7, Backlog: 1500}}
	x, err := e.Explain(ctx, root, api.ExplainQuery{Proto: "tcp", Local: netip.MustParseAddr("198.18.0.1"), LPort: 40000,
		Remote: netip.MustParseAddr("198.18.0.2"), RPort: 443})
	if err != nil {
		t.Fatal(err)
	}
	if x.Match == nil || x.Match.Rule != "web" || x.Match.Position != 3 || x.RuleCount != 5 {
		t.Fatalf("match %+v of %d rules, want web 3rd of 5", x.Match, x.RuleCount)
	}
	if !strings.HasPrefix(x.Subject, "flow tcp 198.18.0.1:40000 → 198.18.0.2:443 of app wget[42]") {
		t.Errorf("subject %q", x.Subject)
	}
	if len(x.Rules) != 3 || x.Rules[0].Rule != "curl-web" || x.Rules[0].Result != api.CheckNo ||
		len(x.Rules[0].Failed) != 1 || x.Rules[0].Failed[0] != (api.SelectorCheck{Selector: "comm", Want: "curl", Got: "wget"}) {
		t.Fatalf("rules considered %+v, want curl-web failed on comm (curl, wget), deny, then web", x.Rules)
	}
	if d := x.Rules[1]; d.Rule != "deny" || len(d.Failed) != 1 || d.Failed[0] != (api.SelectorCheck{Selector: "remote", Want: "198.18.9.0/24", Got: "198.18.0.2"}) {
		t.Errorf("deny: %+v, want failed on its remote prefix", d)
	}
	if x.Rules[2].Result != api.CheckMatched {
		t.Errorf("web: %+v", x.Rules[2])
	}
	svc := x.Service
	if svc == nil || svc.Class != "interactive" || svc.DSCP == nil || *svc.DSCP != 34 || svc.Action != "pass" || len(svc.Leaves) != 1 {
		t.Fatalf("service %+v", svc)
	}
	leaf := svc.Leaves[0]
	if leaf.Link != "eth0" || leaf.ClassID != fmt.Sprintf("4851:%x", shaper.RuleLeafMinor(uint16(web))) || leaf.Ceil != 5_000_000 ||
		leaf.Drops != 7 || leaf.Flows != 2 {
		t.Errorf("leaf %+v, want web's own on eth0, ceil 5 Mbit/s, 7 drops shared by 2 flows", leaf)
	}
	if len(x.Flows) != 1 || x.FlowsTotal != 1 {
		t.Fatalf("flows %+v (total %d), want the one", x.Flows, x.FlowsTotal)
	}
	f := x.Flows[0]
	if !f.Kernel.Current || !f.Kernel.Agrees || f.Kernel.Rule != "web" || f.Rule != "web" || f.Kernel.Out.Packets != 10 {
		t.Errorf("flow %+v", f)
	}
	q := findDrop(f.Drops, "queue")
	if q == nil || q.Packets != 7 || q.Scope != api.ScopeShared || q.SharedBy != 2 {
		t.Errorf("queue drops %+v, want 7 shared by 2 flows", f.Drops)
	}
	if s := findDrop(f.Drops, "syn_limit"); s == nil || s.By != "link eth0" {
		t.Errorf("SYN limit of eth0 not among the drops: %+v", f.Drops)
	}
}

func findDrop(ds []api.ExplainDrop, cause string) *api.ExplainDrop {
	for i := range ds {
		if ds[i].Cause == cause {
			return &ds[i]
		}
	}
	return nil
}

// TestExplainDropsByCause: a policed flow's own drops are the policer's;
// a flow to a dropped prefix is the drop rule's; a flow from a blocked
// prefix names the drop-list entry and its drops, shared by the flows
// from the prefix.
func TestExplainDropsByCause(t *testing.T) {
	e, sk := explainEnv(t, map[int]*observe.AppIdentity{42: wget(42, 1000)})
	k := sk.FakeKernel
	cp, deny := e.slots.Rules["cap"], e.slots.Rules["deny"]
	policed := tcpFlow("198.18.0.1:5000", "198.18.0.2:7010", 42, 1000, "wget", cp)
	policed.Key.Proto = 17
	policed.Drops = 30
	denied := tcpFlow("198.18.0.1:5001", "198.18.9.5:80", 42, 1000, "wget", deny)
	denied.Drops = 10
	blocked := tcpFlow("198.18.0.1:5002", "198.18.66.7:80", 42, 1000, "wget", -1)
	k.FlowTable = []datapath.Flow{policed, denied, blocked}
	k.Counters[cp] = datapath.Counters{Packets: 100, Drops: 30}
	sk.Counters[netip.MustParsePrefix("198.18.66.0/24")] = xdp.BlockCounters{Packets: 20, Dropped: 12}

	for _, c := range []struct {
		q      api.ExplainQuery
		rule   string
		cause  string
		n      uint64
		scope  string
		shared int
	}{
		{api.ExplainQuery{Proto: "udp", RPort: 7010}, "cap", "policer", 30, api.ScopeFlow, 0},
		{api.ExplainQuery{Remote: netip.MustParseAddr("198.18.9.5")}, "deny", "drop_rule", 10, api.ScopeFlow, 0},
		{api.ExplainQuery{Remote: netip.MustParseAddr("198.18.66.7")}, "", "xdp_block", 12, api.ScopeShared, 1},
	} {
		x, err := e.Explain(ctx, root, c.q)
		if err != nil {
			t.Fatal(err)
		}
		if len(x.Flows) != 1 {
			t.Fatalf("%+v: flows %+v", c.q, x.Flows)
		}
		f := x.Flows[0]
		if f.Rule != c.rule || f.Service.Rule != c.rule {
			t.Errorf("%+v: rule %q (service %q), want %q", c.q, f.Rule, f.Service.Rule, c.rule)
		}
		d := findDrop(f.Drops, c.cause)
		if d == nil || d.Packets != c.n || d.Scope != c.scope || d.SharedBy != c.shared {
			t.Errorf("%+v: drops %+v, want %s: %d (%s, shared by %d)", c.q, f.Drops, c.cause, c.n, c.scope, c.shared)
		}
	}
	// Without a flow in the table, the drop rule's counter is the rule's,
	// shared by its flows. (UDP: curl-web, a TCP rule of curl's, cannot
	// match it, whatever process sends it.)
	k.FlowTable = []datapath.Flow{denied}
	k.Counters[deny] = datapath.Counters{Packets: 40, Drops: 40}
	x, err := e.Explain(ctx, root, api.ExplainQuery{Proto: "udp", Local: netip.MustParseAddr("198.18.0.1"), LPort: 6000,
		Remote: netip.MustParseAddr("198.18.9.6"), RPort: 80})
	if err != nil {
		t.Fatal(err)
	}
	if d := findDrop(x.Drops, "drop_rule"); x.FlowsTotal != 0 || d == nil || d.Packets != 40 || d.Scope != api.ScopeShared || d.SharedBy != 1 {
		t.Errorf("a flow not in the table: drops %+v (flows %d), want the rule's 40, shared by its 1 flow", x.Drops, x.FlowsTotal)
	}
}

// TestExplainSaysWhenTheDatapathDiffers: a flow classified under an
// earlier policy generation is said to be, and one the datapath holds
// under another rule than the policy gives it now is said not to agree.
func TestExplainSaysWhenTheDatapathDiffers(t *testing.T) {
	e, sk := explainEnv(t, map[int]*observe.AppIdentity{42: wget(42, 1000)})
	k := sk.FakeKernel
	k.Gen += 5 // policies applied since
	stale := tcpFlow("198.18.0.1:40000", "198.18.0.2:443", 42, 1000, "wget", e.slots.Rules["cap"])
	stale.Gen = k.Gen - 2
	other := tcpFlow("198.18.0.1:40001", "198.18.0.2:443", 42, 1000, "wget", e.slots.Rules["cap"])
	k.FlowTable = []datapath.Flow{stale, other}
	x, err := e.Explain(ctx, root, api.ExplainQuery{Proto: "tcp", RPort: 443})
	if err != nil {
		t.Fatal(err)
	}
	if x.FlowsTotal != 2 {
		t.Fatalf("flows %+v", x.Flows)
	}
	for _, f := range x.Flows {
		switch f.Local {
		case "198.18.0.1:40000":
			if f.Kernel.Current || f.Kernel.Agrees || f.Service.Rule != "web" || len(f.Notes) == 0 {
				t.Errorf("stale flow %+v: want not current, the service of its next packet (web)", f)
			}
		default:
			if !f.Kernel.Current || f.Kernel.Agrees || f.Kernel.Rule != "cap" || f.Rule != "web" || len(f.Notes) == 0 {
				t.Errorf("flow the datapath holds under cap %+v: want current, not agreeing with web", f)
			}
		}
	}
}

// TestExplainApp: a process without a flow: the rules its identity rules
// out and those that depend on the flow; its flows in the flow table;
// an executable's identity leaves its command name, user and cgroup
// undecided.
func TestExplainApp(t *testing.T) {
	e, sk := explainEnv(t, map[int]*observe.AppIdentity{42: wget(42, 1000)})
	sk.FakeKernel.FlowTable = []datapath.Flow{tcpFlow("198.18.0.1:40000", "198.18.0.2:443", 42, 1000, "wget", e.slots.Rules["web"])}
	x, err := e.Explain(ctx, root, api.ExplainQuery{PID: 42})
	if err != nil {
		t.Fatal(err)
	}
	if x.Match != nil || x.Service != nil || len(x.Rules) != 5 || x.Rules[0].Result != api.CheckNo || x.Rules[2].Result != api.CheckMaybe {
		t.Fatalf("app: match %+v, service %+v, rules %+v; want curl-web ruled out, the others maybe", x.Match, x.Service, x.Rules)
	}
	if u := x.Rules[2].Undecided; x.Rules[2].Rule != "web" || len(u) != 2 || u[0].Selector != "proto" || u[1] != (api.SelectorCheck{Selector: "rport", Want: "443"}) {
		t.Errorf("web's undecided selectors %+v", x.Rules[2])
	}
	if x.App == nil || x.App.Comm != "wget" || x.App.Exe != "/usr/bin/wget" || x.FlowsTotal != 1 || x.Flows[0].Rule != "web" {
		t.Errorf("app %+v, flows %+v", x.App, x.Flows)
	}
	if _, err := e.Explain(ctx, root, api.ExplainQuery{PID: 99}); !errors.As(err, new(*NotFoundError)) {
		t.Errorf("a process that exited: %v, want not found", err)
	}
}

// TestExplainOrdinaryUser: an ordinary user may not explain another
// user's process, sees only their own flows, and no rule of another
// user's run.
func TestExplainOrdinaryUser(t *testing.T) {
	e, sk := explainEnv(t, map[int]*observe.AppIdentity{42: wget(42, 1000), 50: wget(50, nobody.UID)})
	sk.FakeKernel.FlowTable = []datapath.Flow{
		tcpFlow("198.18.0.1:40000", "198.18.0.2:443", 42, 1000, "wget", e.slots.Rules["web"]),
		tcpFlow("198.18.0.1:40001", "198.18.0.2:443", 50, nobody.UID, "wget", e.slots.Rules["web"]),
	}
	_, err := e.Explain(ctx, nobody, api.ExplainQuery{PID: 42})
	if fe := new(ForbiddenError); !errors.As(err, &fe) || !strings.Contains(err.Error(), "another user's") {
		t.Fatalf("nobody explains uid 1000's process: %v, want forbidden", err)
	}
	x, err := e.Explain(ctx, nobody, api.ExplainQuery{Proto: "tcp", RPort: 443})
	if err != nil {
		t.Fatal(err)
	}
	if x.FlowsTotal != 1 || x.Flows[0].PID != 50 {
		t.Errorf("nobody's view of the flows to 443: %+v, want only their own", x.Flows)
	}
	if _, err := e.Explain(ctx, nobody, api.ExplainQuery{PID: 50}); err != nil {
		t.Errorf("nobody explains their own process: %v", err)
	}
	// A flow of nobody's whose pid another user's process holds now: its
	// executable and cgroup are not known (and not that process's).
	sk.FakeKernel.FlowTable = append(sk.FakeKernel.FlowTable, tcpFlow("198.18.0.1:40002", "198.18.0.2:80", 42, nobody.UID, "wget", -1))
	x, err = e.Explain(ctx, nobody, api.ExplainQuery{Proto: "tcp", RPort: 80})
	if err != nil {
		t.Fatal(err)
	}
	if x.FlowsTotal != 1 || x.App == nil || x.App.Exe != "" || x.App.Cgroup != "" || strings.Contains(fmt.Sprint(x), "/usr/bin/wget") {
		t.Errorf("nobody's flow of a reused pid: app %+v, %+v", x.App, x)
	}
	// Another user's run is no rule of nobody's answer. (Its cgroup
	// exists: a rule of a cgroup that does not is in no datapath.)
	if err := os.MkdirAll(filepath.Join(sk.FakeKernel.Root, "hostqos", "run-o1"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := e.change(ctx, "test", func(_, temp *store.Overlay, _ *policy.Policy) error {
		runOverlay(temp, "o1", 1001, false)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	x, err = e.Explain(ctx, nobody, api.ExplainQuery{PID: 50})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range x.Rules {
		if c.Rule == "run-o1" {
			t.Errorf("nobody sees another user's run rule: %+v", x.Rules)
		}
	}
	xr, err := e.Explain(ctx, root, api.ExplainQuery{PID: 50})
	if err != nil {
		t.Fatal(err)
	}
	if xr.RuleCount != x.RuleCount+1 {
		t.Errorf("root counts %d rules, nobody %d: want one more for root", xr.RuleCount, x.RuleCount)
	}
}

// TestExplainDSCPIn: a rule that selects by the incoming DSCP is
// undecided without --dscp (and the answer says so), decided with it.
func TestExplainDSCPIn(t *testing.T) {
	e, _ := explainEnv(t, nil)
	q := api.ExplainQuery{Proto: "udp", Local: netip.MustParseAddr("198.18.0.1"), LPort: 5000, Remote: netip.MustParseAddr("198.18.0.2"), RPort: 9}
	x, err := e.Explain(ctx, root, q)
	if err != nil {
		t.Fatal(err)
	}
	if x.Match != nil || !strings.Contains(strings.Join(x.Notes, " "), "--dscp") {
		t.Errorf("without a DSCP: match %+v, notes %q", x.Match, x.Notes)
	}
	ef := 46
	q.DSCP = &ef
	if x, err = e.Explain(ctx, root, q); err != nil || x.Match == nil || x.Match.Rule != "marked" {
		t.Errorf("with DSCP EF: %v %+v, want marked", err, x.Match)
	}
}

// TestVisibleToOthers: an ordinary user's executable must be one every
// user may find.
func TestVisibleToOthers(t *testing.T) {
	dir := t.TempDir()
	for _, d := range []string{dir, filepath.Dir(dir)} { // the test's own, made 0700
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	open := filepath.Join(dir, "open")
	closed := filepath.Join(dir, "closed")
	for _, d := range []string{open, closed} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "app"), []byte("#!/bin/true\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(closed, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(closed, "app"), filepath.Join(open, "link")); err != nil {
		t.Fatal(err)
	}
	for p := dir; p != "/"; p = filepath.Dir(p) {
		if st, err := os.Stat(p); err != nil || st.Mode().Perm()&0o001 == 0 {
			t.Skipf("%s is not searchable by others", p)
		}
	}
	for path, want := range map[string]bool{
		filepath.Join(open, "app"): true, filepath.Join(closed, "app"): false, filepath.Join(open, "link"): false,
		filepath.Join(open, "missing"): false, open: false,
	} {
		if got := visibleToOthers(path); got != want {
			t.Errorf("visibleToOthers(%s) = %v, want %v", path, got, want)
		}
	}
}

// TestExplainBounded: an answer lists at most api.MaxExplainRules rule
// checks (the earliest, and the rule that wins) and counts the others.
func TestExplainBounded(t *testing.T) {
	var b strings.Builder
	for i := 0; i < 400; i++ {
		fmt.Fprintf(&b, "[[rule]]\nname = \"r%03d\"\nproto = \"udp\"\nrport = \"%d\"\n\n", i, 10000+i)
	}
	env := newEnv(t, b.String())
	e := env.start(t)
	x, err := e.Explain(ctx, root, api.ExplainQuery{Proto: "udp", Local: netip.MustParseAddr("198.18.0.1"), LPort: 5000,
		Remote: netip.MustParseAddr("198.18.0.2"), RPort: 10399})
	if err != nil {
		t.Fatal(err)
	}
	n := len(x.Rules)
	if n != api.MaxExplainRules || x.RulesOmitted != 400-api.MaxExplainRules || x.Match == nil || x.Match.Position != 400 ||
		x.Rules[n-1].Rule != x.Match.Rule || x.Rules[n-2].Position != api.MaxExplainRules-1 {
		t.Errorf("%d checks (%d omitted), match %+v, last two %+v", n, x.RulesOmitted, x.Match, x.Rules[n-2:])
	}
	// An app: every flow rule may match; the answer is bounded the same.
	x, err = e.Explain(ctx, root, api.ExplainQuery{Proto: "udp"})
	if err != nil {
		t.Fatal(err)
	}
	if len(x.Rules) != api.MaxExplainRules-1 || x.RulesOmitted != 400-api.MaxExplainRules+1 || x.Match != nil {
		t.Errorf("udp flows: %d checks (%d omitted), match %+v", len(x.Rules), x.RulesOmitted, x.Match)
	}
}

// TestExplainReservation: a flow of a reservation's session names the
// reservation's rule and gives its Tspec, its sessions and its
// conformance, which are not drops.
func TestExplainReservation(t *testing.T) {
	env := newEnv(t, resvConfig)
	e := env.start(t)
	cl := testResv("cl", policy.ServiceControlledLoad, 2_000_000)
	cl.MaxSessions = 4
	if _, err := e.AddReservation(ctx, root, cl, false); err != nil {
		t.Fatal(err)
	}
	k := env.k
	slot := e.slots.Rules["resv:cl"]
	id := uint16(e.slots.Resv["resv:cl"] + 1)
	k.ResvCounters = map[uint16]datapath.ResvCounters{id: {ConformantPackets: 90, NonConformantPackets: 10, OversizePackets: 2, Sessions: 1, RefusedConnects: 3}}
	f := tcpFlow("198.18.0.1:40000", "198.18.0.2:5004", 0, 0, "", slot)
	f.Key.Proto = 17
	k.FlowTable = []datapath.Flow{f}
	x, err := e.Explain(ctx, root, api.ExplainQuery{Proto: "udp", RPort: 5004})
	if err != nil {
		t.Fatal(err)
	}
	if x.Match == nil || x.Match.Rule != "reservation/cl" || x.Service == nil || x.Service.Sessions == nil {
		t.Fatalf("match %+v, service %+v, want reservation/cl with its sessions", x.Match, x.Service)
	}
	s := x.Service.Sessions
	if s.Reservation != "cl" || s.Service != "controlled-load" || s.Rate != 2_000_000 || s.MaxSessions != 4 || s.Sessions != 1 ||
		s.RefusedConnects != 3 || s.ConformantPackets != 90 || s.NonConformantPackets != 10 || s.OversizePackets != 2 {
		t.Errorf("sessions %+v", s)
	}
	for _, d := range x.Flows[0].Drops {
		if d.Packets != 0 {
			t.Errorf("a reservation's non-conformant packets counted as drops: %+v", d)
		}
	}
}

// TestExplainDownloadDrops: what a download limit dropped of a flow is
// the flow's own count, by the rule; a flow no rule matches on a link
// with an ingress budget names the budget.
func TestExplainDownloadDrops(t *testing.T) {
	env := newEnv(t, `
[[link]]
name = "eth0"
ingress_rate = "50mbit"

[[rule]]
name = "steam"
proto = "udp"
lport = "27000-27100"
maxbw_in = "10mbit"
`)
	e := env.start(t)
	k := env.k
	dl := tcpFlow("198.18.0.1:27015", "198.18.0.2:4000", 0, 0, "", e.slots.Rules["steam"])
	dl.Key.Proto, dl.RxPackets, dl.RxDrops = 17, 500, 40
	other := tcpFlow("198.18.0.1:5000", "198.18.0.3:4000", 0, 0, "", -1)
	other.Key.Proto, other.RxDrops = 17, 9
	k.FlowTable = []datapath.Flow{dl, other}
	for _, c := range []struct {
		port      uint16
		cause, by string
		drops     uint64
	}{{27015, "download_limit", "rule steam", 40}, {5000, "ingress_budget", "link eth0", 9}} {
		x, err := e.Explain(ctx, root, api.ExplainQuery{Proto: "udp", LPort: c.port})
		if err != nil {
			t.Fatal(err)
		}
		if len(x.Flows) != 1 {
			t.Fatalf("lport %d: flows %+v", c.port, x.Flows)
		}
		d := findDrop(x.Flows[0].Drops, c.cause)
		if d == nil || d.By != c.by || d.Packets != c.drops || d.Scope != api.ScopeFlow || !strings.Contains(d.Why, "eth0's ingress_rate") {
			t.Errorf("lport %d: drops %+v, want %s by %s: %d of the flow's, naming eth0's ingress budget", c.port, x.Flows[0].Drops, c.cause, c.by, c.drops)
		}
	}
}
