package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"

	"github.com/hostqos/hostqos/internal/store"

	"golang.org/x/sys/unix"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/datapath"
	"github.com/hostqos/hostqos/internal/host/fakehost"
	"github.com/hostqos/hostqos/internal/policy"
)

const shapedConfig = `
[[link]]
name = "eth0"
egress_rate = "20mbit"

[[class]]
name = "voice"
minbw = "2mbit"

[[class]]
name = "gold"
dscp = "AF21"
user_allowed = true

[[rule]]
name = "a"
proto = "udp"
rport = "7000"
class = "voice"
`

var ctx = context.Background()

// ruleNames lists the rules root sees, in evaluation order, with sources.
func ruleNames(t *testing.T, e *Engine, who Caller) string {
	t.Helper()
	rs, err := e.Rules(who, "")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range rs {
		out = append(out, r.Rule.Name+":"+r.Source)
	}
	return strings.Join(out, " ")
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	return b
}

// readPersisted is what a state file holds: its snapshot and its journal.
func readPersisted(t *testing.T, path string) []byte {
	t.Helper()
	return append(readFile(t, path), readFile(t, store.JournalPath(path))...)
}

// breakWrites makes the next writes of a state file fail (its journal
// closed under it; the store then compacts into a directory that is a
// file now).
func breakWrites(t *testing.T, st *store.File) {
	t.Helper()
	dir := filepath.Dir(st.Path())
	st.Close()
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir, nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestStartApplies: starting applies the config: the link's HTB tree,
// the classifier, the rules, in that order (classes before packets are
// steered into them).
func TestStartApplies(t *testing.T) {
	env := newEnv(t, shapedConfig)
	e := env.start(t)
	if _, ok := env.k.Trees[2]; !ok || !env.k.Attached[2] {
		t.Fatalf("eth0 not set up: trees %v attached %v", env.k.Trees, env.k.Attached)
	}
	if len(env.k.Rules.Rules) != 1 {
		t.Fatalf("datapath rules %+v", env.k.Rules.Rules)
	}
	var order []string
	for _, c := range env.k.Calls {
		op, _, _ := strings.Cut(c, " ")
		switch op {
		case "Shape", "ApplyRules", "AttachLink":
			order = append(order, op)
		}
	}
	if got := strings.Join(order, ","); got != "Shape,ApplyRules,AttachLink" {
		t.Errorf("apply order %s", got)
	}
	var st api.Status
	e.Status(root, &st)
	if !st.Datapath.Loaded || st.Counts.Links != 1 || st.Counts.Rules != 1 || len(st.Links) != 1 || !st.Links[0].Attached || !st.Links[0].Shaping {
		t.Errorf("status %+v", st)
	}
}

// TestRollbackWhenKernelFailsMidway: a change whose apply fails at any
// step — the HTB tree, the datapath rules, the attachment, the state
// write — leaves the engine's policy, the kernel and the state files as
// they were before it.
func TestRollbackWhenKernelFailsMidway(t *testing.T) {
	for _, step := range []string{"Shape", "ApplyRules", "AttachLink", "state write"} {
		t.Run(step, func(t *testing.T) {
			env := newEnv(t, shapedConfig)
			e := env.start(t)
			if _, err := e.AddRule(ctx, root, rule("keep"), false); err != nil {
				t.Fatal(err)
			}
			before := env.k.Snapshot()
			rulesBefore := ruleNames(t, e, root)
			state, runtime := readPersisted(t, env.cfg.StatePath), readPersisted(t, env.cfg.RuntimePath)
			boom := errors.New("boom")
			if step == "state write" {
				// The write fails after the kernel took the change.
				breakWrites(t, e.stPersist)
			} else {
				env.k.FailNth(step, 1, boom)
			}
			r := rule("b")
			r.MaxBW, r.Class = 5e6, "voice" // a leaf of its own: the tree changes too
			if step == "AttachLink" {
				// Only a link not attached yet is attached: the change
				// also brings a new link.
				env.k.Ifindexes["eth1"] = 3
				if err := e.SetLink(ctx, root, "eth1", policy.Link{EgressRate: 10e6}, LinkChange{Temporary: true}); err == nil {
					t.Fatal("the link change succeeded")
				}
				delete(env.k.Ifindexes, "eth1")
				if after := env.k.Snapshot(); !reflect.DeepEqual(after, before) {
					t.Errorf("kernel after the failed link change:\n%+v\nwant\n%+v", after, before)
				}
				env.k.FailNth(step, 1, boom)
			}
			_, err := e.AddRule(ctx, root, r, false)
			if err == nil && step == "AttachLink" {
				return // the rule change attaches nothing: it goes through
			}
			if err == nil {
				t.Fatal("the change succeeded")
			}
			if step != "state write" && !errors.Is(err, boom) {
				t.Errorf("error %v does not wrap the kernel's", err)
			}
			if got := ruleNames(t, e, root); got != rulesBefore {
				t.Errorf("rules after the failed change: %s, want %s", got, rulesBefore)
			}
			if after := env.k.Snapshot(); !reflect.DeepEqual(after, before) {
				t.Errorf("kernel after the failed change:\n%+v\nwant\n%+v", after, before)
			}
			if step != "state write" {
				if s, r := readPersisted(t, env.cfg.StatePath), readPersisted(t, env.cfg.RuntimePath); !bytes.Equal(s, state) || !bytes.Equal(r, runtime) {
					t.Error("the failed change was persisted")
				}
			}
			// The next change goes through.
			if step != "state write" {
				if _, err := e.AddRule(ctx, root, r, false); err != nil {
					t.Errorf("change after the failure: %v", err)
				}
			}
		})
	}
}

// TestLayering: temporary changes override API changes, which override
// the config file; removing a config object hides it; a temporary change
// ends with DropTemporary (a clean stop) and the rest stays across a
// restart.
func TestLayering(t *testing.T) {
	env := newEnv(t, shapedConfig+"\n[[rule]]\nname = \"z\"\nproto = \"tcp\"\n")
	e := env.start(t)
	if got := ruleNames(t, e, root); got != "a:config z:config" {
		t.Fatalf("config rules: %s", got)
	}
	if _, err := e.SetRule(ctx, root, "a", []byte(`{"class":"bulk"}`), false); err != nil {
		t.Fatal(err)
	}
	if _, err := e.SetRule(ctx, root, "a", []byte(`{"class":"gold"}`), true); err != nil {
		t.Fatal(err)
	}
	tmp := rule("t")
	if _, err := e.AddRule(ctx, root, tmp, true); err != nil {
		t.Fatal(err)
	}
	if err := e.RemoveRule(ctx, root, "z"); err != nil {
		t.Fatal(err)
	}
	got, _ := e.Rules(root, "a")
	if got[0].Rule.Class != "gold" || got[0].Source != "temporary" || !got[0].Rule.Temporary {
		t.Errorf("rule a: %+v, want the temporary class gold", got[0])
	}
	if names := ruleNames(t, e, root); names != "a:temporary t:temporary" {
		t.Errorf("rules: %s", names)
	}
	if _, err := e.Rules(root, "z"); !errors.As(err, new(*NotFoundError)) {
		t.Errorf("removed config rule: %v", err)
	}
	// A persistent set of a temporarily changed object stays temporary.
	if _, err := e.SetRule(ctx, root, "a", []byte(`{"maxbw":"1mbit"}`), false); err != nil {
		t.Fatal(err)
	}

	e.DropTemporary()
	e2 := env.start(t)
	got, _ = e2.Rules(root, "a")
	if got[0].Rule.Class != "bulk" || got[0].Source != "api" {
		t.Errorf("rule a after a restart: %+v, want the API's class bulk", got[0])
	}
	if names := ruleNames(t, e2, root); names != "a:api" {
		t.Errorf("rules after a restart: %s, want the tombstone of z kept and t gone", names)
	}
	// Removing the API's override of a config rule hides it too.
	if err := e2.RemoveRule(ctx, root, "a"); err != nil {
		t.Fatal(err)
	}
	if names := ruleNames(t, e2, root); names != "" {
		t.Errorf("rules: %s", names)
	}
	// Reload keeps the layers over a new file.
	if err := os.WriteFile(env.cfg.ConfigPath, []byte(shapedConfig+"\n[[rule]]\nname = \"n\"\nproto = \"tcp\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := e2.Reload(false); err != nil {
		t.Fatal(err)
	}
	if names := ruleNames(t, e2, root); names != "n:config" {
		t.Errorf("rules after reload: %s", names)
	}
}

// TestPersistenceAndAdoption: a new engine over the same state adopts the
// policy: same rules, same slots, same idempotency keys, and the kernel
// gets the same datapath rules.
func TestPersistenceAndAdoption(t *testing.T) {
	env := newEnv(t, shapedConfig)
	e := env.start(t)
	kctx, _ := WithPendingKey(ctx, testKey, "fp")
	if _, err := e.AddRule(kctx, root, rule("p"), false); err != nil {
		t.Fatal(err)
	}
	tkey := strings.Repeat("t", 32)
	kctx, pk := WithPendingKey(ctx, tkey, "fp2")
	if _, err := e.AddClass(kctx, root, policy.Class{Name: "tmp", DSCP: policy.NoDSCP, Priority: policy.NoPriority}, true); err != nil {
		t.Fatal(err)
	}
	e.RecordAnswer(pk, 201, []byte(`{"name":"tmp"}`))
	rules := env.k.Rules
	before, _ := e.Rules(root, "")

	k2 := fakehost.NewFakeKernel(env.k.Root)
	k2.Ifindexes["eth0"] = 2
	e2, err := New(env.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := e2.Start(Host{Kernel: k2}); err != nil {
		t.Fatal(err)
	}
	after, _ := e2.Rules(root, "")
	if !reflect.DeepEqual(before, after) {
		t.Errorf("rules after a restart:\n%+v\nwant\n%+v", after, before)
	}
	if !reflect.DeepEqual(k2.Rules, rules) {
		t.Errorf("datapath rules after a restart differ")
	}
	if ent, ok := e2.LookupKey(testKey); !ok || ent.Fingerprint != "fp" {
		t.Errorf("persistent change's key after a restart: %+v %v", ent, ok)
	}
	if ent, ok := e2.LookupKey(tkey); !ok || ent.Fingerprint != "fp2" {
		t.Errorf("temporary change's key after a restart: %+v %v", ent, ok)
	}
	if cs, _ := e2.Classes("tmp"); len(cs) != 1 || cs[0].Source != "temporary" {
		t.Errorf("temporary class after a crash: %+v", cs)
	}
	// A key of a change that failed is not recorded.
	kctx, _ = WithPendingKey(ctx, strings.Repeat("f", 32), "fp3")
	if _, err := e2.AddRule(kctx, root, rule("p"), false); !errors.As(err, new(*ConflictError)) {
		t.Errorf("adding an existing rule: %v", err)
	}
	if _, ok := e2.LookupKey(strings.Repeat("f", 32)); ok {
		t.Error("the key of a failed change was recorded")
	}
}

// TestAuthorization: root and group hostqos change policy; an ordinary
// user does not, may run only their own process in a class the admin
// allows, sees only their own runs, and never another user's run rule.
func TestAuthorization(t *testing.T) {
	env := newEnv(t, shapedConfig)
	e := env.start(t)
	var fb *ForbiddenError
	for name, err := range map[string]error{
		"add rule":     second(e.AddRule(ctx, nobody, rule("x"), false)),
		"set rule":     second(e.SetRule(ctx, nobody, "a", []byte(`{}`), false)),
		"remove rule":  e.RemoveRule(ctx, nobody, "a"),
		"add class":    second(e.AddClass(ctx, nobody, policy.NewClass(""), false)),
		"set class":    second(e.SetClass(ctx, nobody, "gold", []byte(`{}`), false)),
		"remove class": e.RemoveClass(ctx, nobody, "gold"),
		"set link":     e.SetLink(ctx, nobody, "eth0", policy.Link{}, LinkChange{}),
		"remove link":  e.RemoveLink(ctx, nobody, "eth0"),
	} {
		if !errors.As(err, &fb) || !strings.Contains(err.Error(), "needs root or membership of group hostqos") {
			t.Errorf("%s by nobody: %v", name, err)
		}
	}
	if _, err := e.AddRule(ctx, admin, rule("by-group"), false); err != nil {
		t.Errorf("group hostqos adds a rule: %v", err)
	}

	for name, c := range map[string]struct {
		who Caller
		req api.RunRequest
		ok  bool
	}{
		"own, allowed class":   {nobody, api.RunRequest{Class: "gold", DSCP: policy.NoDSCP}, true},
		"own, default class":   {nobody, api.RunRequest{DSCP: policy.NoDSCP}, true},
		"own, closed class":    {nobody, api.RunRequest{Class: "voice", DSCP: policy.NoDSCP}, false},
		"other's process":      {nobody, api.RunRequest{PID: 1, Class: "gold", DSCP: policy.NoDSCP}, false},
		"own, DSCP":            {nobody, api.RunRequest{Class: "gold", DSCP: 46}, false},
		"root, any class":      {root, api.RunRequest{PID: 77, Class: "voice", DSCP: 46}, true},
		"group, other process": {admin, api.RunRequest{PID: 77, DSCP: policy.NoDSCP}, true},
	} {
		req := c.req
		err := e.AuthorizeRun(c.who, &req)
		if (err == nil) != c.ok || (err != nil && !errors.As(err, &fb)) {
			t.Errorf("%s: %v", name, err)
		}
		if err == nil && c.req.PID == 0 && req.PID != c.who.PID {
			t.Errorf("%s: pid %d, want the caller's", name, req.PID)
		}
	}

	mine, err := e.StartRun(ctx, nobody, api.RunRequest{Class: "gold", DSCP: policy.NoDSCP, Cmd: "sleep"}, &fakeTarget{pid: nobody.PID})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.StartRun(ctx, alice, api.RunRequest{DSCP: policy.NoDSCP}, &fakeTarget{pid: alice.PID}); err != nil {
		t.Fatal(err)
	}
	rootRun, err := e.StartRun(ctx, root, api.RunRequest{PID: 99, Class: "voice", DSCP: policy.NoDSCP}, &fakeTarget{pid: 99})
	if err != nil {
		t.Fatal(err)
	}
	if env.k.Procs[nobody.PID] != mine.Cgroup || !env.k.Cgroups[mine.Cgroup] || !strings.HasPrefix(mine.Cgroup, "/hostqos/ns-1/run-") {
		t.Errorf("run %+v: process in %q, cgroups %v", mine, env.k.Procs[nobody.PID], env.k.Cgroups)
	}
	if runs := e.Runs(nobody); len(runs) != 1 || runs[0].ID != mine.ID {
		t.Errorf("nobody's runs: %+v", runs)
	}
	if runs := e.Runs(root); len(runs) != 3 {
		t.Errorf("root's runs: %d", len(runs))
	}
	if names := ruleNames(t, e, nobody); strings.Contains(names, rootRun.Rule) || !strings.Contains(names, mine.Rule) || strings.Count(names, "run-") != 1 {
		t.Errorf("nobody sees rules %s", names)
	}
	if _, err := e.Rules(nobody, rootRun.Rule); !errors.As(err, new(*NotFoundError)) {
		t.Errorf("nobody asks for root's run rule: %v", err)
	}
	var st api.Stats
	env.k.Counters = make([]datapath.Counters, 4096)
	if err := e.Stats(nobody, "rules", &st); err != nil {
		t.Fatal(err)
	}
	for _, r := range st.Rules {
		if r.Rule == rootRun.Rule {
			t.Error("nobody's rule stats show root's run")
		}
	}
	if err := e.EndRun(alice, mine.ID); !errors.As(err, &fb) {
		t.Errorf("alice ends nobody's run: %v", err)
	}
	if err := e.EndRun(nobody, "nosuch"); !errors.As(err, new(*NotFoundError)) {
		t.Errorf("end of an unknown run: %v", err)
	}
	if err := e.RemoveRule(ctx, root, mine.Rule); !errors.As(err, new(*BadRequestError)) {
		t.Errorf("root removes a run's rule: %v", err)
	}
	if err := e.EndRun(nobody, mine.ID); err != nil {
		t.Fatal(err)
	}
	if env.k.Cgroups[mine.Cgroup] {
		t.Error("the run's cgroup stayed")
	}
	if err := e.EndRun(root, rootRun.ID); err != nil {
		t.Errorf("root ends its run: %v", err)
	}
}

func second[T any](_ T, err error) error { return err }

// fakeTarget is a run's process; fail makes its nth check fail.
type fakeTarget struct {
	pid    int
	checks int
	failAt int
	err    error
}

func (f *fakeTarget) PID() int { return f.pid }
func (f *fakeTarget) Check() error {
	f.checks++
	if f.failAt != 0 && f.checks >= f.failAt {
		return f.err
	}
	return nil
}

// TestRunLimitsAndChecks: the limits on ordinary users' runs refuse with
// TooMany and leave no cgroup; a process that changes identity after the
// move is moved back and its run ended.
func TestRunLimitsAndChecks(t *testing.T) {
	env := newEnv(t, shapedConfig)
	env.cfg.MaxRunsPerUser, env.cfg.MaxUserRuns = 1, 2
	e := env.start(t)
	if _, err := e.StartRun(ctx, nobody, api.RunRequest{DSCP: policy.NoDSCP}, &fakeTarget{pid: 3}); err != nil {
		t.Fatal(err)
	}
	_, err := e.StartRun(ctx, nobody, api.RunRequest{DSCP: policy.NoDSCP}, &fakeTarget{pid: 3})
	if !errors.As(err, new(*TooManyError)) || !strings.Contains(err.Error(), "--max-runs-per-user 1") {
		t.Errorf("second run of nobody: %v", err)
	}
	if _, err := e.StartRun(ctx, alice, api.RunRequest{DSCP: policy.NoDSCP}, &fakeTarget{pid: 4}); err != nil {
		t.Fatal(err)
	}
	bob := Caller{PID: 5, UID: 1002}
	if _, err := e.StartRun(ctx, bob, api.RunRequest{DSCP: policy.NoDSCP}, &fakeTarget{pid: 5}); !errors.As(err, new(*TooManyError)) {
		t.Errorf("run beyond the total: %v", err)
	}
	if _, err := e.StartRun(ctx, root, api.RunRequest{PID: 6, DSCP: policy.NoDSCP}, &fakeTarget{pid: 6}); err != nil {
		t.Errorf("root's run is not limited: %v", err)
	}
	if n := len(env.k.Cgroups); n != 3 {
		t.Errorf("%d cgroups, want those of the 3 runs: %v", n, env.k.Cgroups)
	}

	// The process acts as someone else after the move: moved back, no run.
	changed := &fakeTarget{pid: 7, failAt: 3, err: &ForbiddenError{Why: "no longer acts as uid 1003"}}
	carol := Caller{PID: 7, UID: 1003}
	env.k.Procs[7] = "/user.slice/carol"
	e.cfg.MaxUserRuns = 8
	if _, err := e.StartRun(ctx, carol, api.RunRequest{DSCP: policy.NoDSCP}, changed); !errors.As(err, new(*ForbiddenError)) {
		t.Errorf("changed process: %v", err)
	}
	if env.k.Procs[7] != "/user.slice/carol" {
		t.Errorf("process left in %s", env.k.Procs[7])
	}
	if len(e.Runs(carol)) != 0 {
		t.Error("the refused run stayed")
	}
	// It exits before the move.
	gone := &fakeTarget{pid: 8, failAt: 1, err: &BadRequestError{Err: errors.New("process 8 has exited")}}
	if _, err := e.StartRun(ctx, Caller{PID: 8, UID: 1004}, api.RunRequest{DSCP: policy.NoDSCP}, gone); !errors.As(err, new(*BadRequestError)) {
		t.Errorf("exited process: %v", err)
	}
	// The move fails: no run remains.
	env.k.FailNth("MovePID", 1, unix.EACCES)
	if _, err := e.StartRun(ctx, Caller{PID: 9, UID: 1005}, api.RunRequest{DSCP: policy.NoDSCP}, &fakeTarget{pid: 9}); !errors.Is(err, unix.EACCES) {
		t.Errorf("failed move: %v", err)
	}
	if n := len(e.Runs(root)); n != 3 {
		t.Errorf("%d runs, want 3", n)
	}

	// Reaping: a run whose cgroup emptied ends (after its grace time).
	for _, r := range e.temp.Runs {
		r.Since -= 10
	}
	delete(env.k.Procs, 3)
	e.ReapRuns()
	if len(e.Runs(nobody)) != 0 || len(e.Runs(root)) != 2 {
		t.Errorf("after reaping: nobody's runs %d, all %d", len(e.Runs(nobody)), len(e.Runs(root)))
	}
}

// TestRepair: the repair loop rebuilds a link whose HTB root or classifier
// someone removed; a failed lookup keeps the link as it is set up; a link
// proven gone is released and managed again when it comes back.
func TestRepair(t *testing.T) {
	env := newEnv(t, shapedConfig)
	e := env.start(t)
	k := env.k
	delete(k.Trees, 2) // tc qdisc del dev eth0 root
	e.Rescan()
	if _, ok := k.Trees[2]; !ok {
		t.Fatal("the HTB root was not rebuilt")
	}
	delete(k.Attached, 2)
	// The status answers from the engine's state, asking the kernel
	// nothing (the daemon's netlink watch wakes the repair instead).
	k.Calls = nil
	var st api.Status
	e.Status(root, &st)
	if n := len(k.CallsOf("LinkAttached")) + len(k.CallsOf("Shaped")); n != 0 || !st.Links[0].Attached || !st.Links[0].Shaping {
		t.Errorf("status asked the kernel %d times; link %+v", n, st.Links[0])
	}
	e.Rescan()
	if !k.Attached[2] {
		t.Fatal("the classifier was not put back")
	}

	// A lookup that fails proves nothing: nothing is released.
	k.LookupErrs["eth0"] = unix.EMFILE
	k.Calls = nil
	e.Rescan()
	e.Rescan()
	if len(k.CallsOf("DetachLink")) != 0 || len(k.CallsOf("Unshape")) != 0 || !k.Attached[2] {
		t.Errorf("a failed lookup released the link: %v", k.Calls)
	}
	delete(k.Trees, 2)
	e.Rescan() // damaged while unknown: rebuilt on the ifindex it has
	if _, ok := k.Trees[2]; !ok {
		t.Error("not rebuilt while the lookup fails")
	}
	delete(k.LookupErrs, "eth0")

	// Gone: released, reported missing; back with a new ifindex: managed.
	delete(k.Ifindexes, "eth0")
	e.Rescan()
	if len(k.CallsOf("DetachLink")) != 1 || k.Attached[2] {
		t.Errorf("a gone link was not released: %v", k.Calls)
	}
	st = api.Status{}
	e.Status(root, &st)
	if !strings.Contains(strings.Join(st.Warnings, "\n"), `link "eth0": no such interface now`) {
		t.Errorf("warnings: %q", st.Warnings)
	}
	k.Ifindexes["eth0"] = 5
	e.Rescan()
	if _, ok := k.Trees[5]; !ok || !k.Attached[5] {
		t.Errorf("the recreated link is not managed: trees %v attached %v", k.Trees, k.Attached)
	}

	// Repair that fails is retried on the next tick.
	delete(k.Trees, 5)
	k.FailNth("Shape", 1, unix.ENOMEM)
	e.Rescan()
	e.Tick()
	if _, ok := k.Trees[5]; !ok {
		t.Error("a failed repair is not retried")
	}
}

// TestAdmissionRefusals: a change that over-commits a link, names a class
// that does not exist, or needs more app slots than the datapath has is
// refused whole, naming the field; nothing changes.
func TestAdmissionRefusals(t *testing.T) {
	env := newEnv(t, shapedConfig)
	e := env.start(t)
	before := env.k.Snapshot()
	big := rule("big")
	big.MinBW = 15e6 // 2 mbit of voice + 15 > 16 reservable
	_, err := e.AddRule(ctx, root, big, false)
	var fes policy.Errors
	if !errors.As(err, &fes) || !strings.Contains(err.Error(), "exceed reservable capacity") {
		t.Errorf("over-commit: %v", err)
	}
	bad := rule("bad")
	bad.Class = "nosuch"
	if _, err := e.AddRule(ctx, root, bad, false); !errors.As(err, &fes) || !strings.Contains(err.Error(), "no such class") {
		t.Errorf("unknown class: %v", err)
	}
	if err := e.SetLink(ctx, root, "eth0", policy.Link{EgressRate: 2e6}, LinkChange{}); err == nil || !strings.Contains(err.Error(), "exceed reservable capacity") {
		t.Errorf("link below its guarantees: %v", err)
	}
	if err := e.SetLink(ctx, root, "eth0", policy.Link{Name: "eth1"}, LinkChange{}); err == nil || !strings.Contains(err.Error(), "differs from the interface in the path") || !strings.Contains(err.Error(), "links/eth1") {
		t.Errorf("link name mismatch: %v", err)
	}
	if err := e.SetLink(ctx, root, "nosuch0", policy.Link{}, LinkChange{}); err == nil || !strings.Contains(err.Error(), "no such interface") {
		t.Errorf("missing interface: %v", err)
	}
	if _, err := e.SetClass(ctx, root, "nosuch", []byte(`{}`), false); !errors.As(err, new(*NotFoundError)) {
		t.Errorf("set of a missing class: %v", err)
	}
	if _, err := e.SetRule(ctx, root, "a", []byte(`{"name":"b"}`), false); !errors.As(err, new(*BadRequestError)) {
		t.Errorf("rename: %v", err)
	}
	if err := e.RemoveLink(ctx, root, "nosuch0"); !errors.As(err, new(*NotFoundError)) {
		t.Errorf("remove of a missing link: %v", err)
	}
	if after := env.k.Snapshot(); !reflect.DeepEqual(after, before) {
		t.Error("a refused change reached the kernel")
	}
	if b := readPersisted(t, env.cfg.StatePath); b != nil {
		t.Errorf("a refused change was persisted: %s", b)
	}
	// A reload of an invalid file keeps the running policy.
	if err := os.WriteFile(env.cfg.ConfigPath, []byte("[[rule]]\nname = \"x\"\nmaxbw = \"1 donut\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := e.Reload(false); err == nil {
		t.Error("an invalid config was loaded")
	}
	if names := ruleNames(t, e, root); names != "a:config" {
		t.Errorf("rules after a refused reload: %s", names)
	}

	// Links: a temporary set, then a persistent one replaces it.
	if err := e.SetLink(ctx, root, "eth0", policy.Link{EgressRate: 50e6}, LinkChange{Temporary: true}); err != nil {
		t.Fatal(err)
	}
	if err := e.SetLink(ctx, root, "eth0", policy.Link{EgressRate: 40e6}, LinkChange{}); err != nil {
		t.Fatal(err)
	}
	if ls := e.Links(); len(ls) != 1 || ls[0].EgressRate != 40e6 {
		t.Errorf("links: %+v", ls)
	}
	if err := e.RemoveLink(ctx, root, "eth0"); err != nil {
		t.Fatal(err)
	}
	if len(env.k.Trees) != 0 || len(env.k.Attached) != 0 {
		t.Errorf("a removed link keeps hostqos's tree or classifier: %v %v", env.k.Trees, env.k.Attached)
	}
}

// TestDetach: after hostqos down the engine applies nothing and reports
// the datapath as not loaded.
func TestDetach(t *testing.T) {
	env := newEnv(t, shapedConfig)
	e := env.start(t)
	e.Detach()
	if _, err := e.AddRule(ctx, root, rule("x"), false); err == nil {
		t.Error("a change applied after detach")
	}
	var st api.Status
	e.Status(root, &st)
	if st.Datapath.Loaded {
		t.Error("status says loaded")
	}
	e.Rescan()
	e.ReapRuns()
	e.TagExistingSockets()
	if err := e.Stats(root, "rules", &api.Stats{}); err == nil {
		t.Error("rule stats without a datapath")
	}
}

// TestRollbackReleasesNewLink: a change that makes a new link managed and
// fails after the link was shaped (here at the attachment; the datapath
// rules do not change, so they are not written) leaves no HTB tree and no
// classifier on it: the restore releases what the failed push set up.
func TestRollbackReleasesNewLink(t *testing.T) {
	env := newEnv(t, shapedConfig)
	env.k.Ifindexes["eth1"] = 3
	e := env.start(t)
	before := env.k.Snapshot()
	env.k.FailNth("AttachLink", 1, errors.New("boom"))
	if err := e.SetLink(ctx, root, "eth1", policy.Link{EgressRate: 10e6}, LinkChange{}); err == nil {
		t.Fatal("the change succeeded")
	}
	if after := env.k.Snapshot(); !reflect.DeepEqual(after, before) {
		t.Errorf("kernel after the failed change:\n%+v\nwant\n%+v", after, before)
	}
}

// TestFailedRuntimeWriteRestoresStateFile: when the state file was written
// but the runtime file cannot be, the change fails and the state file is
// put back, so that a restart does not bring the failed change back.
func TestFailedRuntimeWriteRestoresStateFile(t *testing.T) {
	env := newEnv(t, shapedConfig)
	e := env.start(t)
	if _, err := e.AddRule(ctx, root, rule("keep"), false); err != nil {
		t.Fatal(err)
	}
	// A temporary rate on eth0: making a rate persistent drops it, so the
	// next change writes both files.
	if err := e.SetLink(ctx, root, "eth0", policy.Link{EgressRate: 20e6}, LinkChange{Temporary: true}); err != nil {
		t.Fatal(err)
	}
	state := readPersisted(t, env.cfg.StatePath)
	breakWrites(t, e.stTemp) // only the second write fails
	if err := e.SetLink(ctx, root, "eth0", policy.Link{EgressRate: 30e6}, LinkChange{}); err == nil {
		t.Fatal("the change succeeded")
	}
	if got := readPersisted(t, env.cfg.StatePath); !bytes.Equal(got, state) {
		t.Errorf("state file after the failed change:\n%s\nwant\n%s", got, state)
	}
	// A restart has the state before the failed change.
	p, err := store.Read(env.cfg.StatePath)
	if err != nil {
		t.Fatal(err)
	}
	if l, ok := p.Overlay.Links["eth0"]; ok {
		t.Errorf("the failed change's link %+v was persisted", l)
	}
}

// TestReapKeepsRunOnReadError: a run whose cgroup cannot be read (out of
// descriptors) is kept; one whose cgroup is empty or gone ends.
func TestReapKeepsRunOnReadError(t *testing.T) {
	env := newEnv(t, shapedConfig)
	e := env.start(t)
	env.k.Procs[3] = "/user.slice/nobody"
	if _, err := e.StartRun(ctx, nobody, api.RunRequest{DSCP: policy.NoDSCP}, &fakeTarget{pid: 3}); err != nil {
		t.Fatal(err)
	}
	e.mu.Lock()
	for _, run := range e.temp.Runs {
		run.Since -= 10 // old enough to be reaped
	}
	e.mu.Unlock()
	env.k.FailNth("Populated", 1, fmt.Errorf("read events of cgroup: %w", syscall.EMFILE))
	e.ReapRuns()
	if runs := e.Runs(root); len(runs) != 1 {
		t.Fatalf("after a failed read: %d runs, want the run kept", len(runs))
	}
	delete(env.k.Procs, 3) // the program ended: its cgroup is empty
	e.ReapRuns()
	if runs := e.Runs(root); len(runs) != 0 {
		t.Errorf("after the program ended: %d runs, want none", len(runs))
	}
}

// TestUnwrittenKeysStayInMemory: the key of a change made without a state
// write (a reload) is answered while the daemon runs but never written by a
// later, unrelated change: after a restart that change is not known to have
// happened.
func TestUnwrittenKeysStayInMemory(t *testing.T) {
	env := newEnv(t, shapedConfig)
	e := env.start(t)
	const key = "reload-key-0123456789abcdef"
	_, pk := WithPendingKey(ctx, key, "fp")
	e.RecordAnswer(pk, 200, []byte(`{}`))
	if _, ok := e.LookupKey(key); !ok {
		t.Fatal("the key is not known")
	}
	if _, err := e.AddRule(ctx, root, rule("other"), false); err != nil {
		t.Fatal(err)
	}
	if s := readPersisted(t, env.cfg.StatePath); bytes.Contains(s, []byte(key)) {
		t.Errorf("the key of an unwritten change was written to the state file:\n%s", s)
	}
}
