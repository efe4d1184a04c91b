package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/user"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/apps"
	"github.com/hostqos/hostqos/internal/datapath"
	"github.com/hostqos/hostqos/internal/policy"
	"github.com/hostqos/hostqos/internal/shaper"
)

type credKey struct{}

// connKey holds the request's connection, for what must be asked of the
// peer at request time (its pidfd).
type connKey struct{}

// peer is who is calling, from SO_PEERCRED of the connection.
type peer struct {
	PID        int
	UID, GID   uint32
	Privileged bool // root or member of group hostqos: may change policy
}

// listen creates the API socket. The socket file is born with mode 0600
// (umask) and only then opened up to 0666, so there is no moment when it is
// more open than intended; authorisation is by peer credentials.
func (d *Daemon) listen() error {
	dir := filepath.Dir(d.cfg.Socket)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create socket dir %s: %w", dir, err)
	}
	if c, err := net.DialTimeout("unix", d.cfg.Socket, time.Second); err == nil {
		c.Close()
		return fmt.Errorf("listen on %s: another hostqosd is already serving it", d.cfg.Socket)
	}
	_ = os.Remove(d.cfg.Socket) // stale socket of a dead daemon
	old := syscall.Umask(0o177)
	ln, err := net.Listen("unix", d.cfg.Socket)
	syscall.Umask(old)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", d.cfg.Socket, err)
	}
	if err := os.Chmod(d.cfg.Socket, 0o666); err != nil {
		ln.Close()
		return fmt.Errorf("open up socket %s: %w", d.cfg.Socket, err)
	}
	srv := &http.Server{
		Handler:           d.routes(),
		ReadHeaderTimeout: apiReadHeaderTimeout,
		ReadTimeout:       apiReadTimeout,
		WriteTimeout:      apiWriteTimeout,
		IdleTimeout:       apiIdleTimeout,
		MaxHeaderBytes:    apiMaxHeaderBytes,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			if ac, ok := c.(*apiConn); ok {
				ctx = context.WithValue(ctx, connKey{}, ac.Conn)
				return context.WithValue(ctx, credKey{}, ac.peer)
			}
			ctx = context.WithValue(ctx, connKey{}, c)
			return context.WithValue(ctx, credKey{}, peerOf(c))
		},
	}
	d.srv = srv
	limited := newConnLimiter(ln, d.cfg.MaxConnsPerUser, d.cfg.MaxUserConns, peerOf, d.log)
	go func() {
		if err := srv.Serve(limited); err != nil && !errors.Is(err, net.ErrClosed) && !errors.Is(err, http.ErrServerClosed) {
			d.log.Error("api server stopped", "err", err)
		}
	}()
	return nil
}

func peerOf(c net.Conn) *peer {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return &peer{UID: ^uint32(0), GID: ^uint32(0)}
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return &peer{UID: ^uint32(0), GID: ^uint32(0)}
	}
	var cred *unix.Ucred
	_ = raw.Control(func(fd uintptr) {
		cred, err = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	})
	if err != nil || cred == nil {
		return &peer{UID: ^uint32(0), GID: ^uint32(0)}
	}
	p := &peer{PID: int(cred.Pid), UID: cred.Uid, GID: cred.Gid}
	p.Privileged = cred.Uid == 0 || inHostqosGroup(p)
	return p
}

// inHostqosGroup reports whether the caller belongs to group "hostqos".
func inHostqosGroup(p *peer) bool {
	g, err := user.LookupGroup("hostqos")
	if err != nil {
		return false
	}
	gid, err := strconv.ParseUint(g.Gid, 10, 32)
	if err != nil {
		return false
	}
	if p.GID == uint32(gid) {
		return true
	}
	groups, err := apps.PeerGroups(p.PID)
	if err != nil {
		return false
	}
	for _, x := range groups {
		if x == uint32(gid) {
			return true
		}
	}
	return false
}

func callerOf(r *http.Request) *peer {
	if p, ok := r.Context().Value(credKey{}).(*peer); ok {
		return p
	}
	return &peer{UID: ^uint32(0)}
}

// connOf is the request's Unix connection (nil when there is none).
func connOf(r *http.Request) *net.UnixConn {
	c, _ := r.Context().Value(connKey{}).(*net.UnixConn)
	return c
}

// forbidden is a policy change by someone not allowed to make it.
type forbidden struct{ why string }

func (e *forbidden) Error() string { return e.why }

// conflict is an add of something that exists.
type conflict struct{ what, name string }

func (e *conflict) Error() string {
	return fmt.Sprintf("%s %q already exists; change it with hostqos %s set %s", e.what, e.name, e.what, e.name)
}

// badRequest is a malformed request body or parameter.
type badRequest struct{ err error }

func (e *badRequest) Error() string { return e.err.Error() }
func (e *badRequest) Unwrap() error { return e.err }

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	if rv := reflect.ValueOf(v); rv.Kind() == reflect.Slice && rv.Len() > 0 {
		_ = writeList(w, rv) // lists can be long: element by element
		return
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// maxErrorText bounds the message of an error answer: no error echoes an
// unbounded value (values in FieldErrors are clipped where they are made).
const maxErrorText = 2048

func writeErr(w http.ResponseWriter, err error) {
	body := api.ErrorBody{Error: err.Error()}
	if len(body.Error) > maxErrorText {
		body.Error = strings.ToValidUTF8(body.Error[:maxErrorText], "") + fmt.Sprintf("… (%d bytes)", len(body.Error))
	}
	code := http.StatusInternalServerError
	var fe *policy.FieldError
	var fes policy.Errors
	var nf *notFoundError
	var fb *forbidden
	var cf *conflict
	var br *badRequest
	var tm *tooMany
	var tl *tooLarge
	switch {
	case errors.As(err, &fes):
		code = http.StatusBadRequest
		body.Fields = fes
		body.Error = fmt.Sprintf("invalid policy: %d problem(s); nothing was changed", len(fes))
	case errors.As(err, &fe):
		code = http.StatusBadRequest
		body.Fields = []*policy.FieldError{fe}
		body.Error = "invalid policy; nothing was changed"
	case errors.As(err, &nf):
		code = http.StatusNotFound
	case errors.As(err, &fb):
		code = http.StatusForbidden
	case errors.As(err, &cf):
		code = http.StatusConflict
	case errors.As(err, &br):
		code = http.StatusBadRequest
	case errors.As(err, &tm):
		code = http.StatusTooManyRequests
	case errors.As(err, &tl):
		code = http.StatusRequestEntityTooLarge
	}
	writeJSON(w, code, body)
}

// maxBody bounds a request body.
const maxBody = 1 << 20

// tooLarge is a request body over maxBody.
type tooLarge struct{ limit int }

func (e *tooLarge) Error() string {
	return fmt.Sprintf("request body larger than the limit of %d bytes (%d MiB); nothing was changed", e.limit, e.limit>>20)
}

// fromAPI marks the FieldErrors in err as coming from the API and returns
// err; other errors become a badRequest about the body.
func fromAPI(err error) error {
	if err == nil {
		return nil
	}
	if fes := policy.AsErrors(err); fes != nil {
		for _, fe := range fes {
			if fe.Source == "" {
				fe.Source = "api"
			}
		}
		return fes
	}
	var br *badRequest
	if errors.As(err, &br) {
		return err
	}
	return &badRequest{fmt.Errorf("decode request body: %w", err)}
}

// mutating wraps handlers that change policy: only privileged callers.
func mutating(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !callerOf(r).Privileged {
			writeErr(w, &forbidden{why: "changing host policy needs root or membership of group hostqos; you may read status and stats, and run your own programs in classes the admin allows (hostqos run)"})
			return
		}
		h(w, r)
	}
}

// decode reads a request body (at most maxBody bytes) and decodes it, as
// one JSON object, strictly (see policy.DecodeJSONObject): unknown fields,
// values of the wrong kind and anything but an object are 400s naming the
// field. A value with a Check method (api.RunRequest) is then checked.
func decode(r *http.Request, v any) error {
	b, err := readBody(r)
	if err != nil {
		return err
	}
	return decodeBody(b, v)
}

func decodeBody(b []byte, v any) error {
	kind := "request"
	switch v.(type) {
	case *api.RunRequest:
		kind = "run"
	case *policy.Link:
		kind = "link"
	}
	if err := policy.CheckJSONObject(b, kind); err != nil {
		return fromAPI(err)
	}
	var err error
	if _, ok := v.(json.Unmarshaler); ok {
		err = json.Unmarshal(b, v) // the type decodes itself strictly
	} else {
		err = policy.DecodeJSONObject(b, v, kind, nil)
	}
	if err != nil {
		return fromAPI(err)
	}
	if c, ok := v.(interface{ Check() error }); ok {
		return fromAPI(c.Check())
	}
	return nil
}

func temporary(r *http.Request) bool {
	v := r.URL.Query().Get("temporary")
	return v == "1" || v == "true"
}

func (d *Daemon) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc(api.RouteStatus, d.handleStatus)
	mux.HandleFunc(api.RouteLinks, d.handleLinks)
	mux.HandleFunc(api.RouteSetLink, mutating(d.handleSetLink))
	mux.HandleFunc(api.RouteRemoveLink, mutating(d.handleRemoveLink))
	mux.HandleFunc(api.RouteClasses, d.handleClasses)
	mux.HandleFunc(api.RouteClass, d.handleClasses)
	mux.HandleFunc(api.RouteAddClass, mutating(handleAdd(d, classKind)))
	mux.HandleFunc(api.RouteSetClass, mutating(handleSet(d, classKind)))
	mux.HandleFunc(api.RouteRemoveClass, mutating(handleRemove(d, classKind)))
	mux.HandleFunc(api.RouteRules, d.handleRules)
	mux.HandleFunc(api.RouteRule, d.handleRules)
	mux.HandleFunc(api.RouteAddRule, mutating(handleAdd(d, ruleKind)))
	mux.HandleFunc(api.RouteSetRule, mutating(handleSet(d, ruleKind)))
	mux.HandleFunc(api.RouteRemoveRule, mutating(handleRemove(d, ruleKind)))
	mux.HandleFunc(api.RouteRuns, d.handleRuns)
	mux.HandleFunc(api.RouteStartRun, d.handleStartRun)
	mux.HandleFunc(api.RouteEndRun, d.handleEndRun)
	mux.HandleFunc(api.RouteStats, boundFlowAnswers(d.handleStats))
	mux.HandleFunc(api.RouteReload, mutating(d.handleReload))
	mux.HandleFunc(api.RouteDown, mutating(d.handleDown))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusNotFound, api.ErrorBody{Error: fmt.Sprintf("no such endpoint: %s %s", r.Method, r.URL.Path)})
	})
	return d.idempotent(mux)
}

func (d *Daemon) handleStatus(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, d.statusFor(callerOf(r)))
}

// status is what a privileged caller sees of the daemon.
func (d *Daemon) status() api.Status { return d.statusFor(&peer{Privileged: true}) }

// statusFor is the daemon's status as who may see it: an ordinary user gets
// no warning about another user's run. The flow table is counted after the
// lock is released (a walk of a full table takes milliseconds, and status
// is open to everyone).
func (d *Daemon) statusFor(who *peer) api.Status {
	st, dp := d.statusLocked(who)
	if dp != nil {
		n := 0
		_ = dp.Flows(func(datapath.Flow) bool { n++; return true })
		st.Counts.Flows = n
	}
	return st
}

func (d *Daemon) statusLocked(who *peer) (api.Status, *datapath.Datapath) {
	d.mu.Lock()
	defer d.mu.Unlock()
	st := api.Status{Daemon: api.DaemonStatus{
		Version: Version, PID: os.Getpid(), Started: d.started, Config: d.cfg.ConfigPath,
		StateDir: d.cfg.StateDir, BPFFSDir: d.cfg.BPFFSDir, Socket: d.cfg.Socket,
		Netns: d.netns, Adopted: d.adopted,
	}}
	d.mountStatus(&st)
	st.Datapath.Loaded = d.dp != nil
	st.Datapath.TaggedSockets = d.tagged
	if d.dp != nil {
		st.Daemon.Generation = uint64(d.dp.Generation())
		if s, err := d.dp.Stats(); err == nil {
			st.Datapath.Packets, st.Datapath.Classified = s.Packets, s.Classified
			st.Datapath.FlowInsertFail, st.Datapath.ParseErrors, st.Datapath.NoIdentity = s.FlowInsertFail, s.ParseErrors, s.NoIdentity
		} else {
			st.Datapath.Error = err.Error()
		}
	}
	st.Links = d.linkStatusLocked()
	st.Counts.Links = len(d.eff.Policy.Links)
	st.Counts.Classes = len(d.eff.Policy.Classes)
	hidden := d.hiddenRulesLocked(who)
	st.Counts.Rules = len(d.eff.Policy.Rules) - len(hidden)
	st.Counts.Runs = len(d.temp.Runs) - len(hidden) // a hidden rule is another user's run
	st.Warnings = append(st.Warnings, d.eff.Policy.Warnings()...)
	if d.comp != nil {
		for _, w := range d.comp.Warnings {
			if !mentionsRule(w, hidden) {
				st.Warnings = append(st.Warnings, w)
			}
		}
	}
	for _, name := range d.missing {
		if why, ok := d.lookupErr[name]; ok {
			st.Warnings = append(st.Warnings, fmt.Sprintf("link %q: cannot tell whether the interface exists (%s); hostqos manages it once it can", name, why))
			continue
		}
		st.Warnings = append(st.Warnings, fmt.Sprintf("link %q: no such interface now; hostqos manages it as soon as it appears", name))
	}
	return st, d.dp
}

// mentionsRule reports whether a compile warning is about one of the rules
// named in set (warnings name their rule as `rule "NAME"`).
func mentionsRule(warning string, set map[string]bool) bool {
	for name := range set {
		if strings.Contains(warning, fmt.Sprintf("rule %q", name)) {
			return true
		}
	}
	return false
}

func (d *Daemon) linkStatusLocked() []api.LinkStatus {
	var out []api.LinkStatus
	for _, l := range d.eff.Policy.Links {
		ls := api.LinkStatus{Link: l}
		if ifindex, ok := d.links[l.Name]; ok {
			ls.Ifindex = ifindex
			attached, err := d.dp.LinkAttached(ifindex)
			ls.Attached = attached || err != nil // unknown is not reported as detached
			if !ls.Attached {
				ls.Error = "hostqos's classifier is not attached in the kernel (detached by someone else?); the daemon puts it back within a second"
			}
			if l.EgressRate > 0 {
				owned, err := shaper.Owned(ifindex)
				ls.Shaping = owned || err != nil // unknown is not reported as removed
				if !ls.Shaping {
					ls.Error = "hostqos's HTB root is not on the link (removed by someone else?); the daemon rebuilds it within a second unless another root qdisc took its place"
				}
			}
		} else {
			ls.Error = "no such interface now; managed as soon as it appears"
		}
		ls.Reservable = l.Capacity()
		ls.Reserved = d.eff.Policy.Guaranteed()
		out = append(out, ls)
	}
	return out
}

func (d *Daemon) handleLinks(w http.ResponseWriter, r *http.Request) {
	d.mu.Lock()
	links := d.linkStatusLocked()
	d.mu.Unlock() // never write to a client under the lock: it may not read
	writeJSON(w, http.StatusOK, links)
}

func (d *Daemon) handleSetLink(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	var l policy.Link
	if err := decode(r, &l); err != nil {
		writeErr(w, err)
		return
	}
	if l.Name != "" && l.Name != name {
		writeErr(w, &policy.FieldError{Source: "api", Object: fmt.Sprintf("link %q", policy.Clip(name)), Field: "name", Value: policy.Clip(l.Name),
			Reason: "differs from the interface in the path", Fix: "leave name out of the body, or send it to /v1/links/" + policy.Clip(l.Name)})
		return
	}
	l.Name = name
	if _, gone, err := lookupLink(name); err != nil {
		writeErr(w, err)
		return
	} else if gone {
		writeErr(w, &policy.FieldError{Source: "api", Object: fmt.Sprintf("link %q", policy.Clip(name)), Field: "name", Value: policy.Clip(name),
			Reason: "no such interface in this network namespace", Fix: "check the name with `ip link`; to manage an interface that comes later (a VPN tunnel), add it to the config file"})
		return
	}
	tmp := temporary(r)
	err := d.changeFor(r, "api", func(persist, temp *overlay, _ *policy.Policy) error {
		if tmp {
			temp.Links[name] = &l
			return nil
		}
		// A persistent set replaces a temporary override of the link:
		// the rate asked for takes effect now and stays after a restart
		// (leaving the override would make the set do nothing now).
		persist.Links[name] = &l
		delete(temp.Links, name)
		return nil
	})
	if err != nil {
		writeErr(w, err)
		return
	}
	d.handleLinks(w, r)
}

func (d *Daemon) handleRemoveLink(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	err := d.changeFor(r, "api", func(persist, temp *overlay, eff *policy.Policy) error {
		if !hasLink(eff, name) {
			return &notFoundError{what: "link", name: name}
		}
		delete(temp.Links, name)
		persist.Links[name] = nil
		if !hasLink(d.base, name) {
			delete(persist.Links, name)
		}
		return nil
	})
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"removed": name})
}

func hasLink(p *policy.Policy, name string) bool {
	_, ok := p.Link(name)
	return ok
}

func (d *Daemon) handleClasses(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	d.mu.Lock()
	var out []api.ClassInfo
	for _, c := range d.eff.Policy.Classes {
		if name != "" && c.Name != name {
			continue
		}
		out = append(out, api.ClassInfo{Class: c, Source: d.eff.Sources["class/"+c.Name]})
	}
	d.mu.Unlock() // never write to a client under the lock: it may not read
	if name != "" {
		if len(out) == 0 {
			writeErr(w, &notFoundError{what: "class", name: name})
			return
		}
		writeJSON(w, http.StatusOK, out[0])
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// patchJSON lays the JSON object in patch over cur (any struct) into out.
func patchJSON(cur any, patch []byte, out any) error {
	base, err := json.Marshal(cur)
	if err != nil {
		return err
	}
	m := map[string]json.RawMessage{}
	if err := json.Unmarshal(base, &m); err != nil {
		return err
	}
	if err := policy.CheckJSONObject(patch, "change"); err != nil {
		return fromAPI(err)
	}
	pm := map[string]json.RawMessage{}
	if err := json.Unmarshal(patch, &pm); err != nil {
		return &badRequest{fmt.Errorf("decode request body: %w", err)}
	}
	for k, v := range pm {
		if k == "name" {
			return &badRequest{errors.New("decode request body: the name cannot be changed; remove and add instead")}
		}
		if string(v) == "null" {
			delete(m, k)
			continue
		}
		m[k] = v
	}
	merged, err := json.Marshal(m)
	if err != nil {
		return err
	}
	return decodeBody(merged, out)
}

// readBody reads a request body of at most maxBody bytes; a longer one is
// a tooLarge (413).
func readBody(r *http.Request) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil {
		return nil, &badRequest{fmt.Errorf("read request body: %w", err)}
	}
	if len(b) > maxBody {
		return nil, &tooLarge{limit: maxBody}
	}
	return b, nil
}

func (d *Daemon) handleRules(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	who := callerOf(r)
	d.mu.Lock()
	hidden := d.hiddenRulesLocked(who)
	var out []api.RuleInfo
	for _, ru := range d.eff.Policy.OrderedRules() {
		if (name != "" && ru.Name != name) || hidden[ru.Name] {
			continue
		}
		ri := api.RuleInfo{Rule: ru, Source: d.eff.Sources["rule/"+ru.Name], Slot: -1}
		if s, ok := d.slots.Rules[ru.Name]; ok {
			ri.Slot = s
		}
		if d.comp != nil {
			ri.Resolved = d.comp.Resolved[ru.Name]
		}
		out = append(out, ri)
	}
	d.mu.Unlock() // never write to a client under the lock: it may not read
	if name != "" {
		if len(out) == 0 {
			writeErr(w, &notFoundError{what: "rule", name: name})
			return
		}
		writeJSON(w, http.StatusOK, out[0])
		return
	}
	writeJSON(w, http.StatusOK, out)
}

func (d *Daemon) handleRuns(w http.ResponseWriter, r *http.Request) {
	who := callerOf(r)
	d.mu.Lock()
	out := []*api.Run{}
	for _, id := range sortedKeys(d.temp.Runs) {
		if run := d.temp.Runs[id]; who.Privileged || run.UID == who.UID {
			out = append(out, toAPIRun(run))
		}
	}
	d.mu.Unlock() // never write to a client under the lock: it may not read
	writeJSON(w, http.StatusOK, out)
}

func (d *Daemon) handleStartRun(w http.ResponseWriter, r *http.Request) {
	req := api.RunRequest{DSCP: policy.NoDSCP}
	if err := decode(r, &req); err != nil {
		writeErr(w, err)
		return
	}
	who := callerOf(r)
	if req.PID == 0 {
		req.PID = who.PID
	}
	if !who.Privileged {
		if req.PID != who.PID {
			writeErr(w, &forbidden{why: fmt.Sprintf("you may only put your own process under a policy (pid %d is not the caller)", req.PID)})
			return
		}
		if req.DSCP != policy.NoDSCP {
			writeErr(w, &forbidden{why: "choosing a DSCP needs root or group hostqos; use --class with a class the admin allows (user_allowed = true)"})
			return
		}
		d.mu.Lock()
		c, ok := d.eff.Policy.Class(req.Class) // "" is the default class
		d.mu.Unlock()
		if ok && !c.UserAllowed {
			writeErr(w, &forbidden{why: fmt.Sprintf("class %q is not open to ordinary users; ask the admin to set user_allowed = true, or pick another class", c.Name)})
			return
		}
	}
	t, err := openRunTarget(connOf(r), who, req.PID)
	if err != nil {
		writeErr(w, err)
		return
	}
	defer t.Close()
	run, err := d.startRun(req, who, t)
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, run)
}

func (d *Daemon) handleEndRun(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	who := callerOf(r)
	d.mu.Lock()
	run, ok := d.temp.Runs[id]
	d.mu.Unlock()
	if !ok {
		writeErr(w, &notFoundError{what: "run", name: id})
		return
	}
	if !who.Privileged && run.UID != who.UID {
		writeErr(w, &forbidden{why: "that run belongs to another user"})
		return
	}
	if err := d.endRun(id); err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"ended": id})
}

func (d *Daemon) handleStats(w http.ResponseWriter, r *http.Request) {
	kind := r.PathValue("kind")
	who := callerOf(r)
	uid := int64(-1)
	if !who.Privileged {
		uid = int64(who.UID)
	}
	st := api.Stats{Time: time.Now(), Interval: d.cfg.RescanInterval.Seconds()}
	var err error
	switch kind {
	case "rules":
		d.mu.Lock()
		hidden := d.hiddenRulesLocked(who)
		d.mu.Unlock()
		st.Rules, err = d.stats.ruleStats(hidden)
	case "classes":
		st.Classes, err = d.stats.classStats()
	case "apps":
		st.Apps, err = d.stats.appStats(uid)
	case "flows":
		st.Flows, err = d.stats.flowStats(uid)
	default:
		err = &notFoundError{what: "stat kind", name: kind}
	}
	if err != nil {
		writeErr(w, err)
		return
	}
	// Stats can hold a whole flow table: compact JSON, streamed.
	w.Header().Set("Content-Type", "application/json")
	if err := writeStats(w, st); err != nil {
		d.log.Warn("send stats", "err", err)
	}
}

func (d *Daemon) handleReload(w http.ResponseWriter, r *http.Request) {
	if err := d.Reload(); err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, d.status())
}

func (d *Daemon) handleDown(w http.ResponseWriter, r *http.Request) {
	if err := d.Down(); err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"down": "removed every qdisc, program, pin and cgroup hostqos made"})
}
