package engine

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/apps"
	"github.com/hostqos/hostqos/internal/datapath"
	"github.com/hostqos/hostqos/internal/derive"
	"github.com/hostqos/hostqos/internal/observe"
)

// Explain answers why a flow or an app gets what it gets (`hostqos
// explain`, observe.Explain), as who may see it: an ordinary user explains
// only their own processes, sees only their own flows, and sees no rule of
// another user's run or object. The engine's state is a snapshot taken
// under its lock; /proc, the file system, the flow table and the counters
// are read after the lock is released.
func (e *Engine) Explain(ctx context.Context, who Caller, q api.ExplainQuery) (api.Explanation, error) {
	uid := who.MayOnlySeeOwn()
	v, cgRoot := e.explainView(who)
	if v.Kernel == nil {
		return api.Explanation{}, errNotLoaded
	}
	identify := e.identify
	if identify == nil {
		identify = identifyProcess
	}
	req := observe.ExplainRequest{Query: q, UID: uid,
		Identify: func(pid uint32) (*observe.AppIdentity, error) { return identify(int(pid), cgRoot) }}
	switch {
	case q.PID != 0:
		a, err := identify(q.PID, cgRoot)
		if errors.Is(err, fs.ErrNotExist) {
			return api.Explanation{}, &NotFoundError{What: "process", Name: strconv.Itoa(q.PID), Fix: "see ps, or hostqos stat apps"}
		}
		if err != nil {
			return api.Explanation{}, &BadRequestError{Err: fmt.Errorf("identify process %d: %w", q.PID, err)}
		}
		if uid >= 0 && int64(a.Ident.UID) != uid {
			return api.Explanation{}, &ForbiddenError{Why: fmt.Sprintf(
				"process %d is another user's; an ordinary user may explain only their own processes and flows (root and group hostqos may explain any)", q.PID)}
		}
		req.App = a
	case q.Exe != "":
		a, err := identifyExe(q.Exe, uid >= 0)
		if err != nil {
			return api.Explanation{}, err
		}
		req.App = a
	}
	if err := ctx.Err(); err != nil {
		return api.Explanation{}, err
	}
	return observe.Explain(v, req)
}

// identifyProcess is the app identity process pid has now: what the
// datapath's sock_create program would record for a socket it creates
// (datapath.IdentityForPID), with its executable's path and its cgroup's.
// A process that does not exist is an error matching fs.ErrNotExist.
func identifyProcess(pid int, cgRoot string) (*observe.AppIdentity, error) {
	p, err := apps.ProcessOf(pid)
	if err != nil {
		return nil, err
	}
	id, err := datapath.IdentityForPID(pid, cgRoot)
	if err != nil {
		return nil, err
	}
	return &observe.AppIdentity{Ident: id, Exe: apps.Exe(pid), Cgroup: p.Cgroup}, nil
}

// identifyExe is the identity of an executable named by path: its file
// identity alone (a process running it has its own command name, user
// and cgroup). For an ordinary user (forUser) the path must be one every
// user may find — each directory on the way searchable by others and the
// file executable by them — so that the answer tells nobody what a
// directory they cannot search holds: any other path is "not found",
// whether it exists or not.
func identifyExe(path string, forUser bool) (*observe.AppIdentity, error) {
	notFound := &NotFoundError{What: "executable", Name: path, Fix: "give the absolute path of an executable file every user may run, or --pid of a process running it"}
	if forUser && !visibleToOthers(path) {
		return nil, notFound
	}
	id, err := datapath.FileIDOf(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, notFound
	}
	if err != nil {
		return nil, &BadRequestError{Err: fmt.Errorf("identify executable %s: %w", path, err)}
	}
	return &observe.AppIdentity{Ident: datapath.Identity{Exe: id}, Exe: path,
		Unknown: datapath.SelComm | datapath.SelUID | datapath.SelCgroup}, nil
}

// visibleToOthers reports whether every user may find the executable at
// path: each directory on the way, as written and with symbolic links
// resolved, searchable by others, and the file a regular file others may
// execute.
func visibleToOthers(path string) bool {
	searchable := func(p string) bool {
		for dir := filepath.Dir(p); ; dir = filepath.Dir(dir) {
			st, err := os.Stat(dir)
			if err != nil || !st.IsDir() || st.Mode().Perm()&0o001 == 0 {
				return false
			}
			if dir == "/" {
				return true
			}
		}
	}
	clean := filepath.Clean(path)
	if !strings.HasPrefix(clean, "/") || !searchable(clean) {
		return false
	}
	real, err := filepath.EvalSymlinks(clean)
	if err != nil || !searchable(real) {
		return false
	}
	st, err := os.Stat(real)
	return err == nil && st.Mode().IsRegular() && st.Mode().Perm()&0o001 != 0
}

// explainView takes an explanation's snapshot of the engine (and the
// cgroup2 root app identities resolve against).
func (e *Engine) explainView(who Caller) (observe.ExplainView, string) {
	e.mu.Lock()
	rs := e.ruleSnapLocked()
	d, sk := e.desired, e.shieldKernel()
	hidden := e.hiddenRulesLocked(who)
	links := make(map[string]int, len(e.links))
	for n, i := range e.links {
		links[n] = i
	}
	e.mu.Unlock()
	if rs.k == nil || d == nil {
		return observe.ExplainView{}, ""
	}
	rv := rs.view()
	v := observe.ExplainView{Kernel: rs.k, Desired: d, Rules: rv.Rules, Hidden: map[int]bool{},
		Written: observe.Written(rs.eff.Policy), Resv: map[uint16]string{}, Links: rs.eff.Policy.Links, Up: links}
	if sk != nil {
		v.Shield = sk
	}
	uid := who.MayOnlySeeOwn()
	for _, r := range rv.Rules {
		if !r.Object && hidden[r.Name] || r.Object && uid >= 0 && r.Owner >= 0 && r.Owner != uid {
			v.Hidden[r.Slot] = true
		}
	}
	for key, n := range rs.slots.Resv {
		switch {
		case strings.HasPrefix(key, derive.ResvPrefix):
			v.Resv[uint16(n+1)] = objectLabel(key)
		case strings.HasPrefix(key, derive.SessionPrefix):
			v.Resv[uint16(n+1)] = strings.TrimPrefix(key, derive.SessionPrefix)
		}
	}
	return v, rs.k.CgroupRoot()
}
