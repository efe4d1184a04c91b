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
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/apps"
	"github.com/hostqos/hostqos/internal/derive"
	"github.com/hostqos/hostqos/internal/engine"
	"github.com/hostqos/hostqos/internal/policy"
	"github.com/hostqos/hostqos/internal/shaper"
)

type credKey struct{}

// connKey holds the request's connection, for what must be asked of the
// peer at request time (its pidfd).
type connKey struct{}

// peer is who is calling, from SO_PEERCRED of the connection.
type peer = engine.Caller

// listen creates the API socket and starts serving it; authorisation is
// by peer credentials.
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
	ln, err := listenWithRename(d.cfg.Socket, 0o666)
	if err != nil {
		return err
	}
	h := d.routes()
	if err := d.startWeb(h); err != nil {
		ln.Close()
		return err
	}
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: apiReadHeaderTimeout,
		ReadTimeout:       apiReadTimeout,
		WriteTimeout:      apiWriteTimeout,
		IdleTimeout:       apiIdleTimeout,
		MaxHeaderBytes:    apiMaxHeaderBytes,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			if ac, ok := c.(*apiConn); ok {
				ctx = context.WithValue(ctx, fdsKey{}, &ac.fds)
				ctx = context.WithValue(ctx, connKey{}, ac.Conn)
				return context.WithValue(ctx, credKey{}, ac.peer)
			}
			ctx = context.WithValue(ctx, connKey{}, c)
			return context.WithValue(ctx, credKey{}, peerOf(c))
		},
	}
	d.srv = srv
	var endOnce sync.Once
	srv.RegisterOnShutdown(func() { endOnce.Do(func() { close(d.streamsEnd) }) })
	limited := newConnLimiter(ln, d.cfg.MaxConnsPerUser, d.cfg.MaxUserConns, peerOf, d.log)
	go func() {
		if err := srv.Serve(limited); err != nil && !errors.Is(err, net.ErrClosed) && !errors.Is(err, http.ErrServerClosed) {
			d.log.Error("api server stopped", "err", err)
		}
	}()
	return nil
}

// listenWithRename listens on a Unix socket at path with file mode mode,
// without touching the process's umask (process-wide, so racy in a
// program with threads): it binds in a fresh private (0700) directory next
// to path, where nobody else can reach the socket, sets the mode, and
// renames it into place. The socket file is not removed when the listener
// closes (the caller removes path).
func listenWithRename(path string, mode os.FileMode) (net.Listener, error) {
	tmpDir, err := os.MkdirTemp(filepath.Dir(path), ".hostqosd-sock-*") // 0700
	if err != nil {
		return nil, fmt.Errorf("listen on %s: create private dir: %w", path, err)
	}
	defer os.RemoveAll(tmpDir)
	tmp := filepath.Join(tmpDir, "sock")
	ln, err := net.Listen("unix", tmp)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	if err := os.Chmod(tmp, mode); err != nil {
		ln.Close()
		return nil, fmt.Errorf("listen on %s: set mode %o: %w", path, mode, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		ln.Close()
		return nil, fmt.Errorf("listen on %s: move socket into place: %w", path, err)
	}
	return ln, nil
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
	var groups []uint32
	var gerr error
	_ = raw.Control(func(fd uintptr) {
		cred, err = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
		groups, gerr = peerGroups(int(fd))
	})
	if err != nil || cred == nil {
		return &peer{UID: ^uint32(0), GID: ^uint32(0)}
	}
	p := &peer{PID: int(cred.Pid), UID: cred.Uid, GID: cred.Gid}
	if errors.Is(gerr, unix.ENOPROTOOPT) {
		// No SO_PEERGROUPS (Linux < 4.13): the groups of the PID seen at
		// connect time.
		groups, gerr = apps.PeerGroups(p.PID)
	}
	p.Privileged = cred.Uid == 0 || (gerr == nil && inHostqosGroup(p.GID, groups))
	return p
}

// peerGroups returns the supplementary groups the peer of a Unix socket had
// when it connected (SO_PEERGROUPS): taken by the kernel with the
// connection, so no later exec or PID reuse changes them.
func peerGroups(fd int) ([]uint32, error) {
	for n := 64; n <= 1<<16; n *= 4 {
		buf := make([]uint32, n)
		size := uint32(4 * n)
		_, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_SOCKET, unix.SO_PEERGROUPS,
			uintptr(unsafe.Pointer(&buf[0])), uintptr(unsafe.Pointer(&size)), 0)
		if errno == unix.ERANGE {
			continue // more groups than buf holds: size says how many
		}
		if errno != 0 {
			return nil, errno
		}
		return buf[:size/4], nil
	}
	return nil, unix.ERANGE
}

// inHostqosGroup reports whether a caller with primary group gid and
// supplementary groups belongs to group "hostqos".
func inHostqosGroup(gid uint32, groups []uint32) bool {
	g, err := user.LookupGroup("hostqos")
	if err != nil {
		return false
	}
	want, err := strconv.ParseUint(g.Gid, 10, 32)
	if err != nil {
		return false
	}
	if gid == uint32(want) {
		return true
	}
	for _, x := range groups {
		if x == uint32(want) {
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

// The engine's refusals, by the names the daemon's code uses.
type (
	forbidden  = engine.ForbiddenError
	badRequest = engine.BadRequestError
)

func writeJSON(w http.ResponseWriter, code int, v any) {
	if e, ok := v.(api.ErrorBody); ok && e.Class == "" {
		e.Class = api.ClassOfStatus(code) // every error answer says its class
		v = e
	}
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

// An error answer lists at most maxFieldErrors field errors, and each of
// their texts is cut to maxFieldText bytes: a reason may quote its input
// (e.g. an unknown DSCP), which an ordinary user's request can make long.
const (
	maxFieldErrors = 100
	maxFieldText   = 512
)

// boundFieldErrors returns copies of the first maxFieldErrors field errors
// with every text cut to maxFieldText bytes.
func boundFieldErrors(fes []*policy.FieldError) []*policy.FieldError {
	cut := func(s string) string {
		if len(s) <= maxFieldText {
			return s
		}
		return strings.ToValidUTF8(s[:maxFieldText], "") + fmt.Sprintf("… (%d bytes)", len(s))
	}
	out := make([]*policy.FieldError, 0, min(len(fes), maxFieldErrors))
	for _, fe := range fes[:min(len(fes), maxFieldErrors)] {
		c := *fe
		c.Source, c.Object, c.Field, c.Value = cut(c.Source), cut(c.Object), cut(c.Field), cut(c.Value)
		c.Reason, c.Fix = cut(c.Reason), cut(c.Fix)
		out = append(out, &c)
	}
	return out
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
	var ae *policy.AdmissionError
	var nf *engine.NotFoundError
	var fb *engine.ForbiddenError
	var cf *engine.ConflictError
	var br *engine.BadRequestError
	var tm *engine.TooManyError
	var tl *tooLarge
	switch {
	case errors.As(err, &ae):
		code, body.Class = http.StatusBadRequest, api.ErrAdmission
		body.Fields = boundFieldErrors(ae.Errors)
		body.Error = fmt.Sprintf("refused by admission control: %d problem(s); nothing was changed", len(ae.Errors))
	case errors.As(err, &fes):
		code = http.StatusBadRequest
		body.Fields = boundFieldErrors(fes)
		body.Error = fmt.Sprintf("invalid policy: %d problem(s); nothing was changed", len(fes))
	case errors.As(err, &fe):
		code = http.StatusBadRequest
		body.Fields = boundFieldErrors([]*policy.FieldError{fe})
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
		if tm.Admission {
			body.Class = api.ErrAdmission
		}
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

// mutating wraps handlers that change policy: only privileged callers,
// refused before the request is read.
func mutating(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := callerOf(r).MayChange(); err != nil {
			writeErr(w, err)
			return
		}
		h(w, r)
	}
}

// readBody reads a request body of at most maxBody bytes; a longer one is
// a tooLarge (413).
func readBody(r *http.Request) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil {
		return nil, &badRequest{Err: fmt.Errorf("read request body: %w", err)}
	}
	if len(b) > maxBody {
		return nil, &tooLarge{limit: maxBody}
	}
	return b, nil
}

// decode reads a request body (at most maxBody bytes) and decodes it, as
// one JSON object, strictly (see engine.Decode).
func decode(r *http.Request, v any) error {
	b, err := readBody(r)
	if err != nil {
		return err
	}
	return engine.Decode(b, v)
}

func temporary(r *http.Request) bool { return queryFlag(r, "temporary") }

// force: ?force=1 applies a change that takes away shaping admitted
// guarantees rely on (engine.LinkChange.Force).
func force(r *http.Request) bool { return queryFlag(r, "force") }

func queryFlag(r *http.Request, name string) bool {
	v := r.URL.Query().Get(name)
	return v == "1" || v == "true"
}

func (d *Daemon) routes() http.Handler {
	mux := http.NewServeMux()
	d.large = newLargeAnswers(maxUserLargeAnswers)
	mux.HandleFunc(api.RouteStatus, d.handleStatus)
	for _, o := range objectRoutesOf(d.eng) {
		o.register(mux, d.large)
	}
	mux.HandleFunc(api.RouteRuns, d.handleRuns)
	mux.HandleFunc(api.RouteStartRun, d.handleStartRun)
	mux.HandleFunc(api.RouteEndRun, d.handleEndRun)
	mux.HandleFunc(api.RouteStats, d.large.boundIf(largeStats, d.handleStats))
	mux.HandleFunc(api.RouteHistory, d.handleHistory())
	mux.HandleFunc(api.RouteExplain, d.large.bound(d.handleExplain))
	mux.HandleFunc(api.RouteReload, mutating(d.handleReload))
	mux.HandleFunc(api.RouteDown, mutating(d.handleDown))
	mux.HandleFunc(api.RouteEvents, d.handleEvents)
	mux.HandleFunc(api.RouteContainers, d.large.bound(d.handleContainers))
	mux.HandleFunc(api.RouteWebToken, d.handleWebToken)
	d.qsockRoutes(mux)
	d.rsvpRoutes(mux)
	d.rtRoutes(mux)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusNotFound, api.ErrorBody{Error: fmt.Sprintf("no such endpoint: %s %s", r.Method, r.URL.Path)})
	})
	return d.idempotent(mux)
}

// largeStats says whether a statistics request asks for a list that grows
// with the flow table or the policy (flows, apps, rules), not with the
// links or classes.
func largeStats(r *http.Request) bool {
	k := r.PathValue("kind")
	return k != api.StatLinks && k != api.StatClasses
}

func (d *Daemon) handleStatus(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, d.statusFor(callerOf(r)))
}

// status is what a privileged caller sees of the daemon.
func (d *Daemon) status() api.Status { return d.statusFor(&peer{Privileged: true}) }

// statusFor is the daemon's status as who may see it (the engine decides
// what an ordinary user sees).
func (d *Daemon) statusFor(who *peer) api.Status {
	d.mu.Lock()
	st := api.Status{Daemon: api.DaemonStatus{
		Version: Version, PID: os.Getpid(), Started: d.started, Config: d.cfg.ConfigPath,
		StateDir: d.cfg.StateDir, BPFFSDir: d.cfg.BPFFSDir, Socket: d.cfg.Socket,
		Netns: d.netns, Adopted: d.adopted,
	}}
	attach, mptcp := d.attach, d.mptcp
	d.mu.Unlock()
	d.mountStatus(&st)
	d.eng.Status(*who, &st)
	st.Datapath.Loops, st.Datapath.Attach, st.Datapath.MPTCPIdentity = d.loops, attach, mptcp
	st.RestartNeeded = d.restartNeeded()
	st.Kubernetes = d.kube.status()
	st.Daemon.Work = api.DaemonWork{NetlinkDumps: shaper.Dumps(), SelectorReads: derive.SelectorReads()}
	return st
}

func (d *Daemon) handleRuns(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, d.eng.Runs(*callerOf(r)))
}

func (d *Daemon) handleStartRun(w http.ResponseWriter, r *http.Request) {
	req := api.RunRequest{DSCP: policy.NoDSCP}
	if err := decode(r, &req); err != nil {
		writeErr(w, err)
		return
	}
	who := callerOf(r)
	if err := d.eng.AuthorizeRun(*who, &req); err != nil {
		writeErr(w, err)
		return
	}
	t, err := openRunTarget(connOf(r), who, req.PID)
	if err != nil {
		writeErr(w, err)
		return
	}
	defer t.Close()
	run, err := d.eng.StartRun(r.Context(), *who, req, t)
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, run)
}

func (d *Daemon) handleEndRun(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := d.eng.EndRun(*callerOf(r), id); err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"ended": id})
}

func (d *Daemon) handleStats(w http.ResponseWriter, r *http.Request) {
	st := api.Stats{Time: time.Now(), Interval: d.cfg.RescanInterval.Seconds()}
	if err := d.eng.Stats(*callerOf(r), r.PathValue("kind"), &st); err != nil {
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
	if err := d.Reload(force(r)); err != nil {
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
