package engine

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"reflect"
	"time"

	"github.com/hostqos/hostqos/internal/store"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/cgroups"
	"github.com/hostqos/hostqos/internal/datapath"
	"github.com/hostqos/hostqos/internal/policy"
)

// runPrecedence puts the runs of root and group hostqos ahead of ordinary
// rules: the admin asked for this program explicitly. The runs of
// ordinary users instead form the last tier (policy.Rule.UserRun), after
// every admin rule.
const runPrecedence = 60000

// Defaults of the limits on ordinary users' runs (Config.MaxRunsPerUser,
// Config.MaxUserRuns).
const (
	DefaultMaxRunsPerUser = 4
	DefaultMaxUserRuns    = 32
	// maxUserRunsCap keeps at least half of the app-selector slots for
	// admin rules whatever the flags say.
	maxUserRunsCap = datapath.MaxAppRules / 2
)

// CheckRunLimits validates the limits on ordinary users' runs.
func CheckRunLimits(perUser, total int) error {
	if total < 1 || total > maxUserRunsCap {
		return fmt.Errorf("flag --max-user-runs = %d: want 1 … %d (the datapath has %d app-selector slots; the rest are kept for admin rules)", total, maxUserRunsCap, datapath.MaxAppRules)
	}
	if perUser < 1 || perUser > total {
		return fmt.Errorf("flag --max-runs-per-user = %d: want 1 … %d (--max-user-runs)", perUser, total)
	}
	return nil
}

func sameDatapath(a, b datapath.Policy) bool { return reflect.DeepEqual(a, b) }

// hasApp reports whether a rule uses an app selector, i.e. one of the
// datapath's MaxAppRules slots.
func hasApp(r policy.Rule) bool {
	return r.Exe != "" || r.Comm != "" || r.Cgroup != "" || r.Unit != "" || r.User != ""
}

// appSlots counts the app-selector slots a policy uses: by admin rules
// (every rule but ordinary users' runs) and by ordinary users' runs.
func appSlots(p *policy.Policy) (admin, user int) {
	for _, r := range p.Rules {
		switch {
		case !hasApp(r):
		case r.UserRun:
			user++
		default:
			admin++
		}
	}
	return admin, user
}

// checkAppSlots refuses a change that needs more app-selector slots than
// the datapath has. Ordinary users' runs never take a slot an admin rule
// could need beyond MaxAppRules − MaxUserRuns (see admitUserRun), so an
// admin who meets this has filled that share.
func (e *Engine) checkAppSlots(p *policy.Policy) error {
	admin, user := appSlots(p)
	admin += len(e.pods) // the cluster's pods (pods.go)
	if admin+user <= datapath.MaxAppRules {
		return nil
	}
	return &TooManyError{Why: fmt.Sprintf("the datapath holds at most %d rules with app selectors (exe, comm, user, cgroup, unit); this change needs %d: %d admin rule(s) and %d run(s) of ordinary users. "+
		"%d slots are always kept for admin rules (%d − hostqosd --max-user-runs %d); remove app rules you no longer need, or lower --max-user-runs",
		datapath.MaxAppRules, admin+user, admin, user, datapath.MaxAppRules-e.cfg.MaxUserRuns, datapath.MaxAppRules, e.cfg.MaxUserRuns)}
}

// admitUserRun applies the limits on ordinary users' runs to a new run of
// uid: runs per user, runs of all ordinary users, and the app-selector
// slots, of which admin rules may always use MaxAppRules − MaxUserRuns.
func (e *Engine) admitUserRun(temp *store.Overlay, eff *policy.Policy, uid uint32) error {
	mine, users := 0, 0
	for _, run := range temp.Runs {
		if !run.Ordinary() {
			continue
		}
		users++
		if run.UID == uid {
			mine++
		}
	}
	if mine >= e.cfg.MaxRunsPerUser {
		return &TooManyError{Why: fmt.Sprintf("you have %d runs going, the most one user may have (hostqosd --max-runs-per-user %d); wait for one to end", mine, e.cfg.MaxRunsPerUser)}
	}
	if users >= e.cfg.MaxUserRuns {
		return &TooManyError{Why: fmt.Sprintf("ordinary users have %d runs going, the most hostqosd allows (--max-user-runs %d); try again when one ends", users, e.cfg.MaxUserRuns)}
	}
	if admin, user := appSlots(eff); admin+user >= datapath.MaxAppRules {
		return &TooManyError{Why: fmt.Sprintf("no free app-selector slot: the datapath holds %d rules with app selectors; admin rules use %d and runs %d; try again when a run ends", datapath.MaxAppRules, admin, user)}
	}
	return nil
}

// Target is the process a run moves, held so that it cannot be swapped
// (the daemon holds it by a pidfd): Check confirms that it is alive and
// still acts as the caller; it returns a *BadRequestError when the process
// has exited and a *ForbiddenError when it acts as someone else.
type Target interface {
	PID() int
	Check() error
}

// AuthorizeRun decides whether caller may start the run req asks for, and
// fills in the caller's own process when req names none. An ordinary user
// may run only their own process, without a DSCP of their choosing, in a
// class the admin allows (user_allowed).
func (e *Engine) AuthorizeRun(who Caller, req *api.RunRequest) error {
	if req.PID == 0 {
		req.PID = who.PID
	}
	if who.Privileged {
		return nil
	}
	if req.PID != who.PID {
		return &ForbiddenError{Why: fmt.Sprintf("you may only put your own process under a policy (pid %d is not the caller)", req.PID)}
	}
	if req.DSCP != policy.NoDSCP {
		return &ForbiddenError{Why: "choosing a DSCP needs root or group hostqos; use --class with a class the admin allows (user_allowed = true)"}
	}
	e.mu.Lock()
	c, ok := e.eff.Policy.Class(req.Class) // "" is the default class
	e.mu.Unlock()
	if ok && !c.UserAllowed {
		return &ForbiddenError{Why: fmt.Sprintf("class %q is not open to ordinary users; ask the admin to set user_allowed = true, or pick another class", c.Name)}
	}
	return nil
}

// StartRun creates a cgroup for a `hostqos run`, a temporary rule matching
// it, and moves the target process into it; the program the CLI starts
// next is born inside. The process is checked (alive, the caller's
// identity) before the move and again after it; a change undoes the move.
// It decides with AuthorizeRun first. ctx is the request's (its idempotency
// key is not recorded in the state files, see below).
func (e *Engine) StartRun(ctx context.Context, who Caller, req api.RunRequest, t Target) (*api.Run, error) {
	if err := e.AuthorizeRun(who, &req); err != nil {
		return nil, err
	}
	e.mu.Lock()
	k := e.k
	e.mu.Unlock()
	if k == nil {
		return nil, errNotLoaded
	}
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, fmt.Errorf("make run id: %w", err)
	}
	id := hex.EncodeToString(b[:])
	cg := path.Join(e.cfg.CgroupBase, "run-"+id)
	rule := policy.Rule{
		Name:   "run-" + id,
		Cgroup: cg,
		Class:  req.Class,
		DSCP:   req.DSCP,
		DSCPIn: policy.NoDSCP,
		MaxBW:  req.MaxBW,

		MaxBWIn: req.MaxBWIn,
	}
	if who.Privileged {
		rule.Precedence = runPrecedence
	}
	if err := t.Check(); err != nil {
		return nil, err
	}
	pid := t.PID()
	origin, err := k.CgroupOf(pid)
	if err != nil {
		return nil, err
	}
	if err := k.CreateCgroup(cg); err != nil {
		return nil, err
	}
	run := &store.Run{ID: id, PID: pid, UID: who.UID, Admin: who.Privileged, Cgroup: cg, Origin: origin, Rule: rule.Name, Cmd: req.Cmd, Since: time.Now().Unix()}
	// A run is not recorded under the request's idempotency key in the
	// state files: it is one process's, which a restarted daemon cannot
	// answer for again (the front door keeps its answer in memory).
	err = e.change(context.Background(), "api", func(_, temp *store.Overlay, eff *policy.Policy) error {
		if run.Ordinary() {
			if err := e.admitUserRun(temp, eff, who.UID); err != nil {
				return err
			}
		}
		r := rule
		temp.Rules[rule.Name] = &r
		temp.Runs[id] = run
		return nil
	})
	if err != nil {
		_ = k.RemoveCgroup(cg)
		return nil, err
	}
	if err := t.Check(); err != nil {
		_ = e.endRun(id)
		return nil, err
	}
	if err := k.MovePID(cg, pid); err != nil {
		_ = e.endRun(id)
		if cerr := t.Check(); cerr != nil {
			return nil, cerr // it ended meanwhile: say so, not "write cgroup.procs"
		}
		return nil, err
	}
	if err := t.Check(); err != nil {
		// Changed between the check and the move: put it back — only when
		// the check saw the process alive (a changed identity); an exited
		// process's PID may be someone else's by now.
		var fb *ForbiddenError
		if errors.As(err, &fb) {
			if merr := k.MovePID(origin, pid); merr != nil {
				e.log.Warn("move process back after a refused run", "pid", pid, "err", merr)
			}
		}
		_ = e.endRun(id)
		return nil, err
	}
	e.log.Info("run started", "id", id, "pid", pid, "uid", who.UID, "cmd", req.Cmd, "cgroup", cg)
	uid := who.UID
	e.Publish(api.Event{Kind: "run.started", Subject: "run/" + id, UID: &uid, Message: fmt.Sprintf("run %s started (pid %d)", id, pid),
		Fields: map[string]any{"pid": pid, "cmd": req.Cmd}})
	return toAPIRun(run), nil
}

// hiddenRulesLocked names the rules the caller may not see: for an
// ordinary user, the rules of other users' runs (root's included). Their
// own runs, the admin's rules and classes stay visible.
func (e *Engine) hiddenRulesLocked(who Caller) map[string]bool {
	hidden := map[string]bool{}
	if who.Privileged {
		return hidden
	}
	for _, run := range e.temp.Runs {
		if run.UID != who.UID {
			hidden[run.Rule] = true
		}
	}
	return hidden
}

// Runs lists the runs the caller may see: all for a privileged caller,
// their own for an ordinary user.
func (e *Engine) Runs(who Caller) []*api.Run {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := []*api.Run{}
	for _, id := range store.SortedKeys(e.temp.Runs) {
		if run := e.temp.Runs[id]; who.Privileged || run.UID == who.UID {
			out = append(out, toAPIRun(run))
		}
	}
	return out
}

// EndRun ends a run: its rule and cgroup go. An ordinary user may end only
// their own runs.
func (e *Engine) EndRun(who Caller, id string) error {
	e.mu.Lock()
	run, ok := e.temp.Runs[id]
	e.mu.Unlock()
	if !ok {
		return &NotFoundError{What: "run", Name: id}
	}
	if !who.Privileged && run.UID != who.UID {
		return &ForbiddenError{Why: "that run belongs to another user"}
	}
	return e.endRun(id)
}

// endRun removes a run's rule and cgroup.
func (e *Engine) endRun(id string) error {
	var cg string
	var uid uint32
	err := e.change(context.Background(), "api", func(_, temp *store.Overlay, _ *policy.Policy) error {
		run, ok := temp.Runs[id]
		if !ok {
			return &NotFoundError{What: "run", Name: id}
		}
		cg, uid = run.Cgroup, run.UID
		delete(temp.Rules, run.Rule)
		delete(temp.Runs, id)
		return nil
	})
	if err != nil {
		return err
	}
	e.mu.Lock()
	k := e.k
	e.mu.Unlock()
	if k != nil {
		if err := k.RemoveCgroup(cg); err != nil {
			e.log.Warn("remove run cgroup", "cgroup", cg, "err", err)
		}
	}
	e.log.Info("run ended", "id", id)
	e.Publish(api.Event{Kind: "run.ended", Subject: "run/" + id, UID: &uid, Message: fmt.Sprintf("run %s ended", id)})
	return nil
}

// ReapRuns ends runs whose cgroup has emptied (the CLI was killed before
// it could say so).
func (e *Engine) ReapRuns() {
	e.mu.Lock()
	if e.k == nil {
		e.mu.Unlock()
		return
	}
	var done []string
	for id, run := range e.temp.Runs {
		if time.Since(time.Unix(run.Since, 0)) < 3*time.Second {
			continue // the CLI may not have moved itself in yet
		}
		// Only an empty or vanished cgroup ends a run: a failed read (out
		// of descriptors, memory) proves nothing, and ending the run would
		// move its live processes out of their class.
		pop, err := e.k.Populated(run.Cgroup)
		switch {
		case err == nil && !pop, errors.Is(err, fs.ErrNotExist):
			done = append(done, id)
		case err != nil:
			e.log.Warn("read run cgroup; keeping the run", "id", id, "cgroup", run.Cgroup, "err", err)
		}
	}
	e.mu.Unlock()
	for _, id := range done {
		if err := e.endRun(id); err != nil {
			e.log.Warn("reap run", "id", id, "err", err)
		}
	}
}

func toAPIRun(r *store.Run) *api.Run {
	return &api.Run{ID: r.ID, PID: r.PID, UID: r.UID, Cgroup: r.Cgroup, Rule: r.Rule, Cmd: r.Cmd, Since: time.Unix(r.Since, 0)}
}

// releaseRuns moves the processes of every run back to the cgroup they
// came from, so that removing our cgroups leaves programs where they were.
func releaseRuns(cgRoot string, runs map[string]*store.Run) {
	for _, run := range runs {
		origin := run.Origin
		if origin == "" {
			origin = "/"
		}
		_ = cgroups.MoveAll(cgRoot, run.Cgroup, origin)
	}
}
