package daemon

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"path"
	"reflect"
	"time"

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

// tooMany is a request refused because a limit is reached.
type tooMany struct{ why string }

func (e *tooMany) Error() string { return e.why }

// ordinary reports whether the run was started by an ordinary user (not
// root, not group hostqos). State of an older daemon has no Admin field:
// then only uid 0 counts as admin, which errs on the safe side.
func (r *runState) ordinary() bool { return !r.Admin && r.UID != 0 }

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
func (d *Daemon) checkAppSlots(p *policy.Policy) error {
	admin, user := appSlots(p)
	if admin+user <= datapath.MaxAppRules {
		return nil
	}
	return &tooMany{why: fmt.Sprintf("the datapath holds at most %d rules with app selectors (exe, comm, user, cgroup, unit); this change needs %d: %d admin rule(s) and %d run(s) of ordinary users. "+
		"%d slots are always kept for admin rules (%d − hostqosd --max-user-runs %d); remove app rules you no longer need, or lower --max-user-runs",
		datapath.MaxAppRules, admin+user, admin, user, datapath.MaxAppRules-d.cfg.MaxUserRuns, datapath.MaxAppRules, d.cfg.MaxUserRuns)}
}

// admitUserRun applies the limits on ordinary users' runs to a new run of
// uid: runs per user, runs of all ordinary users, and the app-selector
// slots, of which admin rules may always use MaxAppRules − MaxUserRuns.
func (d *Daemon) admitUserRun(temp *overlay, eff *policy.Policy, uid uint32) error {
	mine, users := 0, 0
	for _, run := range temp.Runs {
		if !run.ordinary() {
			continue
		}
		users++
		if run.UID == uid {
			mine++
		}
	}
	if mine >= d.cfg.MaxRunsPerUser {
		return &tooMany{why: fmt.Sprintf("you have %d runs going, the most one user may have (hostqosd --max-runs-per-user %d); wait for one to end", mine, d.cfg.MaxRunsPerUser)}
	}
	if users >= d.cfg.MaxUserRuns {
		return &tooMany{why: fmt.Sprintf("ordinary users have %d runs going, the most hostqosd allows (--max-user-runs %d); try again when one ends", users, d.cfg.MaxUserRuns)}
	}
	if admin, user := appSlots(eff); admin+user >= datapath.MaxAppRules {
		return &tooMany{why: fmt.Sprintf("no free app-selector slot: the datapath holds %d rules with app selectors; admin rules use %d and runs %d; try again when a run ends", datapath.MaxAppRules, admin, user)}
	}
	return nil
}

// startRun creates a cgroup for a `hostqos run`, a temporary rule matching
// it, and moves the caller's process (held by t) into it; the program the
// CLI starts next is born inside. The process is checked (alive, the
// caller's identity) before the move and again after it; a change undoes
// the move.
func (d *Daemon) startRun(req api.RunRequest, who *peer, t *runTarget) (*api.Run, error) {
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, fmt.Errorf("make run id: %w", err)
	}
	id := hex.EncodeToString(b[:])
	cg := path.Join(d.cgBase, "run-"+id)
	rule := policy.Rule{
		Name:   "run-" + id,
		Cgroup: cg,
		Class:  req.Class,
		DSCP:   req.DSCP,
		DSCPIn: policy.NoDSCP,
		MaxBW:  req.MaxBW,
	}
	if who.Privileged {
		rule.Precedence = runPrecedence
	}
	if err := t.check(); err != nil {
		return nil, err
	}
	origin, err := cgroups.OfPID(t.pid)
	if err != nil {
		return nil, err
	}
	if err := cgroups.Create(d.cgRoot, cg); err != nil {
		return nil, err
	}
	run := &runState{ID: id, PID: t.pid, UID: who.UID, Admin: who.Privileged, Cgroup: cg, Origin: origin, Rule: rule.Name, Cmd: req.Cmd, Since: time.Now().Unix()}
	err = d.change("api", func(_, temp *overlay, eff *policy.Policy) error {
		if run.ordinary() {
			if err := d.admitUserRun(temp, eff, who.UID); err != nil {
				return err
			}
		}
		r := rule
		temp.Rules[rule.Name] = &r
		temp.Runs[id] = run
		return nil
	})
	if err != nil {
		_ = cgroups.RemoveTree(d.cgRoot, cg)
		return nil, err
	}
	if err := t.check(); err != nil {
		_ = d.endRun(id)
		return nil, err
	}
	if err := cgroups.MovePID(d.cgRoot, cg, t.pid); err != nil {
		_ = d.endRun(id)
		if cerr := t.check(); cerr != nil {
			return nil, cerr // it ended meanwhile: say so, not "write cgroup.procs"
		}
		return nil, err
	}
	if err := t.check(); err != nil {
		// Changed between the check and the move: put it back.
		if merr := cgroups.MovePID(d.cgRoot, origin, t.pid); merr != nil {
			d.log.Warn("move process back after a refused run", "pid", t.pid, "err", merr)
		}
		_ = d.endRun(id)
		return nil, err
	}
	d.log.Info("run started", "id", id, "pid", t.pid, "uid", who.UID, "cmd", req.Cmd, "cgroup", cg)
	return toAPIRun(run), nil
}

// hiddenRulesLocked names the rules the caller may not see: for an
// ordinary user, the rules of other users' runs (root's included). Their
// own runs, the admin's rules and classes stay visible.
func (d *Daemon) hiddenRulesLocked(who *peer) map[string]bool {
	hidden := map[string]bool{}
	if who.Privileged {
		return hidden
	}
	for _, run := range d.temp.Runs {
		if run.UID != who.UID {
			hidden[run.Rule] = true
		}
	}
	return hidden
}

// endRun removes a run's rule and cgroup.
func (d *Daemon) endRun(id string) error {
	var cg string
	err := d.change("api", func(_, temp *overlay, _ *policy.Policy) error {
		run, ok := temp.Runs[id]
		if !ok {
			return &notFoundError{what: "run", name: id}
		}
		cg = run.Cgroup
		delete(temp.Rules, run.Rule)
		delete(temp.Runs, id)
		return nil
	})
	if err != nil {
		return err
	}
	if err := cgroups.RemoveTree(d.cgRoot, cg); err != nil {
		d.log.Warn("remove run cgroup", "cgroup", cg, "err", err)
	}
	d.log.Info("run ended", "id", id)
	return nil
}

// reapRuns ends runs whose cgroup has emptied (the CLI was killed before
// it could say so).
func (d *Daemon) reapRuns() {
	d.mu.Lock()
	var done []string
	for id, run := range d.temp.Runs {
		if time.Since(time.Unix(run.Since, 0)) < 3*time.Second {
			continue // the CLI may not have moved itself in yet
		}
		pop, err := cgroups.Populated(d.cgRoot, run.Cgroup)
		if err != nil || !pop {
			done = append(done, id)
		}
	}
	d.mu.Unlock()
	for _, id := range done {
		if err := d.endRun(id); err != nil {
			d.log.Warn("reap run", "id", id, "err", err)
		}
	}
}

func toAPIRun(r *runState) *api.Run {
	return &api.Run{ID: r.ID, PID: r.PID, UID: r.UID, Cgroup: r.Cgroup, Rule: r.Rule, Cmd: r.Cmd, Since: time.Unix(r.Since, 0)}
}

// notFoundError is a request for an object that does not exist.
type notFoundError struct{ what, name string }

func (e *notFoundError) Error() string {
	return fmt.Sprintf("%s %q not found; see hostqos %s list", e.what, policy.Clip(e.name), e.what)
}

// releaseRuns moves the processes of every run back to the cgroup they
// came from, so that removing our cgroups leaves programs where they were.
func releaseRuns(cgRoot string, runs map[string]*runState) {
	for _, run := range runs {
		origin := run.Origin
		if origin == "" {
			origin = "/"
		}
		_ = cgroups.MoveAll(cgRoot, run.Cgroup, origin)
	}
}
