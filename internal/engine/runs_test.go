package engine

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hostqos/hostqos/internal/store"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/cgroups"
	"github.com/hostqos/hostqos/internal/datapath"
	"github.com/hostqos/hostqos/internal/derive"
	"github.com/hostqos/hostqos/internal/observe"
	"github.com/hostqos/hostqos/internal/policy"
)

// runOverlay adds a run of uid (admin or not) with its rule to temp.
func runOverlay(temp *store.Overlay, id string, uid uint32, admin bool) {
	r := policy.Rule{Name: "run-" + id, Cgroup: "/hostqos/run-" + id, Class: "bulk", DSCP: policy.NoDSCP, DSCPIn: policy.NoDSCP}
	if admin {
		r.Precedence = runPrecedence
	}
	temp.Rules[r.Name] = &r
	temp.Runs[id] = &store.Run{ID: id, UID: uid, Admin: admin, Cgroup: r.Cgroup, Rule: r.Name}
}

// TestUserRunEvaluatedAfterAdminRules: an ordinary user's run rule comes
// after every admin rule in the datapath's first-match order, an admin's
// run keeps its place ahead of ordinary rules, and
// the API cannot make a rule "user_run".
func TestUserRunEvaluatedAfterAdminRules(t *testing.T) {
	block := rule("block")
	block.Proto, block.Remote, block.Action, block.Precedence = "", netip.MustParsePrefix("198.18.0.2/32"), policy.ActionDrop, 1000
	ef := rule("ef")
	ef.RPort, ef.DSCP = policy.PortRange{From: 7000, To: 7000}, 46
	limit := rule("limit")
	limit.Proto, limit.Remote, limit.Police = "", netip.MustParsePrefix("198.18.0.3/32"), 100e3
	catchAll := rule("catch-all")
	catchAll.Proto, catchAll.Remote = "", netip.MustParsePrefix("0.0.0.0/0")
	base := &policy.Policy{Classes: policy.DefaultClasses(), Rules: []policy.Rule{block, ef, limit, catchAll}}
	persist, temp := store.NewOverlay(), store.NewOverlay()
	sneaky := rule("sneaky") // an admin rule sent with user_run set
	sneaky.UserRun = true
	persist.Rules["sneaky"] = &sneaky
	runOverlay(temp, "u1", 65534, false)
	runOverlay(temp, "r1", 0, true)
	runOverlay(temp, "g1", 1000, true) // group hostqos
	m := store.Merge(base, persist, temp)
	if err := checkPolicy(m.Policy, "test"); err != nil {
		t.Fatal(err)
	}
	cgRoot := t.TempDir() // the runs' cgroups exist (a rule of one that does not is in no datapath)
	for _, id := range []string{"u1", "r1", "g1"} {
		if err := os.MkdirAll(filepath.Join(cgRoot, "hostqos", "run-"+id), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	c, slots, err := deriveForTest(m, cgRoot)
	if err != nil {
		t.Fatal(err)
	}
	byslot := map[uint16]string{}
	for name, s := range slots.Rules {
		byslot[uint16(s)] = name
	}
	var got []string
	for _, r := range c.Datapath.Rules {
		got = append(got, byslot[r.Slot])
	}
	want := []string{"run-g1", "run-r1", "block", "limit", "ef", "sneaky", "catch-all", "run-u1"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("datapath order = %v\nwant             %v", got, want)
	}
	for _, r := range m.Policy.Rules {
		if r.UserRun != (r.Name == "run-u1") {
			t.Errorf("rule %s: UserRun = %v", r.Name, r.UserRun)
		}
	}
}

func TestAdmitUserRun(t *testing.T) {
	d := &Engine{cfg: Config{MaxRunsPerUser: 2, MaxUserRuns: 3}}
	eff := &policy.Policy{Classes: policy.DefaultClasses()}
	temp := store.NewOverlay()
	runOverlay(temp, "a", 65534, false)
	if err := d.admitUserRun(temp, eff, 65534); err != nil {
		t.Fatalf("second run of a user: %v", err)
	}
	runOverlay(temp, "b", 65534, false)
	runOverlay(temp, "root", 0, true) // admin runs count for neither limit
	err := d.admitUserRun(temp, eff, 65534)
	var tm *TooManyError
	if !errors.As(err, &tm) || !strings.Contains(err.Error(), "--max-runs-per-user 2") {
		t.Fatalf("third run of a user: %v", err)
	}
	if err := d.admitUserRun(temp, eff, 1001); err != nil {
		t.Fatalf("another user's first run: %v", err)
	}
	runOverlay(temp, "c", 1001, false)
	if err := d.admitUserRun(temp, eff, 1002); !errors.As(err, &tm) || !strings.Contains(err.Error(), "--max-user-runs 3") {
		t.Fatalf("run beyond the total: %v", err)
	}

	// App-selector slots: admin rules fill all but one; one user run fits,
	// the next does not.
	d.cfg = Config{MaxRunsPerUser: 4, MaxUserRuns: 32}
	temp = store.NewOverlay()
	for i := range datapath.MaxAppRules - 1 {
		r := rule(fmt.Sprintf("exe%d", i))
		r.Exe = fmt.Sprintf("/usr/bin/x%d", i)
		eff.Rules = append(eff.Rules, r)
	}
	if err := d.admitUserRun(temp, eff, 65534); err != nil {
		t.Fatalf("run in the last free slot: %v", err)
	}
	u := rule("run-u")
	u.Cgroup, u.UserRun = "/hostqos/run-u", true
	eff.Rules = append(eff.Rules, u)
	runOverlay(temp, "u", 65534, false)
	if err := d.admitUserRun(temp, eff, 1001); !errors.As(err, &tm) || !strings.Contains(err.Error(), "no free app-selector slot") {
		t.Fatalf("run with no free slot: %v", err)
	}
	if err := d.checkAppSlots(eff); err != nil {
		t.Fatalf("a full table is not an error: %v", err)
	}
	eff.Rules = append(eff.Rules, policy.Rule{Name: "one-more", User: "nobody"})
	if err := d.checkAppSlots(eff); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("%d − hostqosd --max-user-runs 32", datapath.MaxAppRules)) {
		t.Fatalf("admin rule beyond the table: %v", err)
	}
}

func TestCheckRunLimits(t *testing.T) {
	for _, c := range []struct {
		per, total int
		ok         bool
	}{{4, 32, true}, {1, 1, true}, {maxUserRunsCap, maxUserRunsCap, true}, {0, 32, false}, {5, 4, false}, {1, maxUserRunsCap + 1, false}, {1, 0, false}} {
		if err := CheckRunLimits(c.per, c.total); (err == nil) != c.ok {
			t.Errorf("CheckRunLimits(%d, %d) = %v", c.per, c.total, err)
		}
	}
}

// TestHiddenRules: an ordinary user does not see the rules of other
// users' runs; a privileged caller sees all.
func TestHiddenRules(t *testing.T) {
	d := &Engine{temp: store.NewOverlay()}
	runOverlay(d.temp, "mine", 65534, false)
	runOverlay(d.temp, "other", 1001, false)
	runOverlay(d.temp, "root", 0, true)
	h := d.hiddenRulesLocked(Caller{UID: 65534})
	if h["run-mine"] || !h["run-other"] || !h["run-root"] {
		t.Errorf("hidden for nobody = %v", h)
	}
	if h := d.hiddenRulesLocked(Caller{UID: 0, Privileged: true}); len(h) != 0 {
		t.Errorf("hidden for root = %v", h)
	}
}

// TestStatusHidesOtherUsersRuns: an ordinary user's status counts only
// their own runs and carries no warning about another user's run rule;
// root sees all.
func TestStatusHidesOtherUsersRuns(t *testing.T) {
	d := &Engine{temp: store.NewOverlay(), persist: store.NewOverlay(), base: policy.DefaultPolicy()}
	d.obs = observe.New(observed{d}, nil)
	runOverlay(d.temp, "mine", 65534, false)
	runOverlay(d.temp, "other", 1001, false)
	d.eff = store.Merge(d.base, d.persist, d.temp)
	d.desired = &derive.Desired{Warnings: []string{
		`rule "run-other": cgroup /hostqos/run-other does not exist; the rule matches nothing until it does`,
		`rule "run-mine": cgroup /hostqos/run-mine does not exist; the rule matches nothing until it does`,
	}}
	var st api.Status
	d.Status(Caller{UID: 65534}, &st)
	if st.Counts.Runs != 1 || st.Counts.Rules != len(d.eff.Policy.Rules)-1 {
		t.Errorf("nobody's counts: runs %d rules %d (of %d)", st.Counts.Runs, st.Counts.Rules, len(d.eff.Policy.Rules))
	}
	all := strings.Join(st.Warnings, "\n")
	if strings.Contains(all, "run-other") || !strings.Contains(all, "run-mine") {
		t.Errorf("nobody's warnings:\n%s", all)
	}
	st = api.Status{}
	d.Status(Caller{Privileged: true}, &st)
	if st.Counts.Runs != 2 || !strings.Contains(strings.Join(st.Warnings, "\n"), "run-other") {
		t.Errorf("root's status: runs %d warnings %q", st.Counts.Runs, st.Warnings)
	}
}

// TestRunStaysUnderAdminCgroupRule: a run takes its process out of its
// cgroup, but an admin rule on that cgroup (or a unit above it) still
// matches the run's cgroup, also of a run started inside that run; a run
// from elsewhere and a run's own rule are left alone.
func TestRunStaysUnderAdminCgroupRule(t *testing.T) {
	cgRoot := t.TempDir()
	ids := map[string]uint64{}
	for _, p := range []string{
		"/user.slice/user-65534.slice/user@65534.service/app.slice/x.scope",
		"/system.slice/cron.service",
		"/hostqos/run-u1", "/hostqos/run-u2", "/hostqos/run-u3", "/hostqos/run-r1",
	} {
		if err := os.MkdirAll(filepath.Join(cgRoot, p), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{"/user.slice", "/hostqos/run-u1", "/hostqos/run-u2", "/hostqos/run-u3", "/hostqos/run-r1", "/system.slice/cron.service", "/system.slice"} {
		ref, err := cgroups.Resolve(cgRoot, p)
		if err != nil {
			t.Fatal(err)
		}
		ids[p] = ref.ID
	}
	temp := store.NewOverlay()
	runOverlay(temp, "u1", 65534, false)
	temp.Runs["u1"].Origin = "/user.slice/user-65534.slice/user@65534.service/app.slice/x.scope"
	runOverlay(temp, "u2", 65534, false)
	temp.Runs["u2"].Origin = "/system.slice/cron.service/"
	runOverlay(temp, "u3", 65534, false) // started inside run u1
	temp.Runs["u3"].Origin = "/hostqos/run-u1"
	runOverlay(temp, "r1", 0, true)
	temp.Runs["r1"].Origin = "/user.slice"
	// A run's rule naming a cgroup its own origin lies in gets nothing.
	temp.Rules["run-u2"].Cgroup = "/system.slice"
	persist := store.NewOverlay()
	users := rule("users")
	users.Proto, users.Cgroup, users.Action = "", "/user.slice/", policy.ActionDrop
	persist.Rules["users"] = &users
	unit := rule("unit")
	unit.Proto, unit.Unit, unit.MaxBW = "", "user@65534.service", 1e6
	persist.Rules["unit"] = &unit
	m := store.Merge(&policy.Policy{Classes: policy.DefaultClasses()}, persist, temp)
	c, slots, err := deriveForTest(m, cgRoot)
	if err != nil {
		t.Fatal(err)
	}
	byslot := map[uint16]string{}
	for name, s := range slots.Rules {
		byslot[uint16(s)] = name
	}
	got := map[string]map[uint64]bool{}
	for _, r := range c.Datapath.Rules {
		got[byslot[r.Slot]] = map[uint64]bool{}
		for _, g := range r.Cgroups {
			got[byslot[r.Slot]][g.ID] = true
		}
	}
	for _, name := range []string{"users", "unit"} {
		g := got[name]
		if !g[ids["/hostqos/run-u1"]] || !g[ids["/hostqos/run-u3"]] {
			t.Errorf("rule %s: the cgroups of runs u1 and u3 (from inside it) are missing: %v", name, g)
		}
		if g[ids["/hostqos/run-u2"]] {
			t.Errorf("rule %s matches run u2, which came from elsewhere", name)
		}
	}
	if !got["users"][ids["/user.slice"]] || !got["users"][ids["/hostqos/run-r1"]] || len(got["users"]) != 4 {
		t.Errorf("rule users: cgroups %v, want /user.slice and runs u1, u3, r1", got["users"])
	}
	if n := strings.Join(c.Resolved["users"], "; "); !strings.Contains(n, "also the runs started inside") {
		t.Errorf("rule users: notes %q", n)
	}
	if g := got["run-u2"]; len(g) != 1 || !g[ids["/system.slice"]] {
		t.Errorf("run u2's own rule: cgroups %v, want only /system.slice", g)
	}
	if g := got["run-r1"]; len(g) != 1 || !g[ids["/hostqos/run-r1"]] {
		t.Errorf("admin run r1's own rule: cgroups %v, want only its own", g)
	}
}
