package daemon

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"path"
	"reflect"
	"time"

	"github.com/hostqos/hostqos/internal/api"
	"github.com/hostqos/hostqos/internal/cgroups"
	"github.com/hostqos/hostqos/internal/datapath"
	"github.com/hostqos/hostqos/internal/policy"
)

// runPrecedence puts `hostqos run` rules ahead of ordinary rules: the user
// asked for this program explicitly.
const runPrecedence = 60000

func sameDatapath(a, b datapath.Policy) bool { return reflect.DeepEqual(a, b) }

// startRun creates a cgroup for a `hostqos run`, a temporary rule matching
// it, and moves the caller's process into it; the program the CLI starts
// next is born inside.
func (d *Daemon) startRun(req api.RunRequest, uid uint32) (*api.Run, error) {
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, fmt.Errorf("make run id: %w", err)
	}
	id := hex.EncodeToString(b[:])
	cg := path.Join(d.cgBase, "run-"+id)
	rule := policy.Rule{
		Name:       "run-" + id,
		Cgroup:     cg,
		Class:      req.Class,
		DSCP:       req.DSCP,
		DSCPIn:     policy.NoDSCP,
		MaxBW:      req.MaxBW,
		Precedence: runPrecedence,
	}
	origin, err := cgroups.OfPID(req.PID)
	if err != nil {
		return nil, err
	}
	if err := cgroups.Create(d.cgRoot, cg); err != nil {
		return nil, err
	}
	run := &runState{ID: id, PID: req.PID, UID: uid, Cgroup: cg, Origin: origin, Rule: rule.Name, Cmd: req.Cmd, Since: time.Now().Unix()}
	err = d.change("api", func(_, temp *overlay, _ *policy.Policy) error {
		r := rule
		temp.Rules[rule.Name] = &r
		temp.Runs[id] = run
		return nil
	})
	if err != nil {
		_ = cgroups.RemoveTree(d.cgRoot, cg)
		return nil, err
	}
	if err := cgroups.MovePID(d.cgRoot, cg, req.PID); err != nil {
		_ = d.endRun(id)
		return nil, err
	}
	d.log.Info("run started", "id", id, "pid", req.PID, "cmd", req.Cmd, "cgroup", cg)
	return toAPIRun(run), nil
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
