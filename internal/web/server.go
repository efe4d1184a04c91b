// Package web is hostqosd's local web view (docs/web.md): a small page
// and its JSON and streaming endpoints, served over TCP beside the API
// socket. Every request of the page goes through the daemon's own API
// handler, as the user a login token stands for: the API's authorization
// applies unchanged.
package web

import (
	"bytes"
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/url"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/engine"
)

//go:embed assets
var assetFS embed.FS

// Config is what the web view needs of the daemon.
type Config struct {
	// Listen is the TCP address to serve on (host:port).
	Listen string
	// API is the daemon's API handler (the routes of the API socket).
	API http.Handler
	// As returns r as a request of caller c to API: the daemon's
	// authorization then sees c, as if c had called over the socket.
	As     func(r *http.Request, c engine.Caller) *http.Request
	Logger *slog.Logger
}

// Server is a running web view.
type Server struct {
	cfg    Config
	log    *slog.Logger
	tokens *tokens
	ln     net.Listener
	srv    *http.Server
	assets map[string]asset
	done   chan struct{}
	once   sync.Once
}

// asset is an embedded file with its type and validator.
type asset struct {
	body  []byte
	ctype string
	etag  string
}

// Bounds of the web listener: connections at once, header and body
// sizes, and how long a request may take to arrive.
const (
	maxConns        = 64
	maxHeaderBytes  = 16 << 10
	maxBody         = 1 << 20 // the API's bound
	readTimeout     = 30 * time.Second
	writeTimeout    = 30 * time.Second
	cookieName      = "hostqos_web"
	liveInterval    = time.Second
	contentSecurity = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)

// Start listens on cfg.Listen and serves the web view.
func Start(cfg Config) (*Server, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	s := &Server{cfg: cfg, log: cfg.Logger, tokens: newTokens(), done: make(chan struct{})}
	if err := s.loadAssets(); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("listen for the web view on %s: %w", cfg.Listen, err)
	}
	s.ln = &limitListener{Listener: ln, slots: make(chan struct{}, maxConns)}
	s.srv = &http.Server{
		Handler:           s.Handler(),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       readTimeout,
		IdleTimeout:       time.Minute,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelDebug),
	}
	go func() {
		if err := s.srv.Serve(s.ln); err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, net.ErrClosed) {
			s.log.Error("web view stopped", "err", err)
		}
	}()
	s.log.Info("web view listening", "listen", ln.Addr().String())
	return s, nil
}

// Close stops serving; live streams end.
func (s *Server) Close() {
	if s == nil {
		return
	}
	s.once.Do(func() { close(s.done) })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = s.srv.Shutdown(ctx)
}

// Addr is the address the view listens on.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Issue makes a fresh login token for caller c and returns the URL that
// logs in with it.
func (s *Server) Issue(c engine.Caller) (api.WebLogin, error) {
	tok, err := s.tokens.issue(c)
	if err != nil {
		return api.WebLogin{}, err
	}
	host, port, _ := net.SplitHostPort(s.Addr())
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	base := "http://" + net.JoinHostPort(host, port) + "/"
	return api.WebLogin{URL: base + "?token=" + tok.Value, Base: base, Token: tok.Value, Expires: tok.Expires, UID: c.UID}, nil
}

// loadAssets reads the embedded files once, with their types and ETags.
func (s *Server) loadAssets() error {
	s.assets = map[string]asset{}
	return fs.WalkDir(assetFS, "assets", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := assetFS.ReadFile(p)
		if err != nil {
			return fmt.Errorf("read web asset %s: %w", p, err)
		}
		sum := sha256.Sum256(b)
		ct := mime.TypeByExtension(path.Ext(p))
		if ct == "" {
			ct = "application/octet-stream"
		}
		s.assets[strings.TrimPrefix(p, "assets/")] = asset{body: b, ctype: ct, etag: `"` + hex.EncodeToString(sum[:8]) + `"`}
		return nil
	})
}

// Handler is the web view's handler (Start serves it).
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", s.index)
	mux.HandleFunc("GET /assets/", s.asset)
	mux.HandleFunc("GET /api/whoami", s.authed(s.whoami))
	mux.HandleFunc("GET /api/live", s.authed(s.live))
	mux.HandleFunc("GET /api/events", s.authed(s.events))
	mux.HandleFunc("/api/v1/", s.authed(s.forward))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "no such page: "+r.Method+" "+clip(r.URL.Path))
	})
	return s.guard(mux)
}

func clip(s string) string {
	if len(s) > 200 {
		return s[:200] + "…"
	}
	return s
}

func writeError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(api.ErrorBody{Error: msg, Class: api.ClassOfStatus(code)})
}

// loopbackName says whether host (without port) names the loopback.
func loopbackName(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// guard refuses requests whose Host is not the view's (DNS rebinding) or
// whose Origin is not the page's own (cross-site requests), and sets the
// security headers of every answer.
func (s *Server) guard(next http.Handler) http.Handler {
	listenHost, _, _ := net.SplitHostPort(s.cfg.Listen)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", contentSecurity)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		host, _, err := net.SplitHostPort(r.Host)
		if err != nil {
			host = r.Host
		}
		host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
		if !loopbackName(host) && (host == "" || host != listenHost) {
			writeError(w, http.StatusForbidden, "host "+clip(r.Host)+" is not this web view's address; open the URL hostqos web prints")
			return
		}
		if o := r.Header.Get("Origin"); o != "" && o != "http://"+r.Host {
			writeError(w, http.StatusForbidden, "origin "+clip(o)+" is not this web view's; requests from other sites are refused")
			return
		}
		if site := r.Header.Get("Sec-Fetch-Site"); site == "cross-site" {
			writeError(w, http.StatusForbidden, "cross-site request refused")
			return
		}
		// Every answer is sent within writeTimeout (a stream moves its
		// deadline on with each event).
		_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(writeTimeout))
		next.ServeHTTP(w, r)
	})
}

// tokenOf is the request's token: the cookie, else an Authorization:
// Bearer header (scripts, tests).
func tokenOf(r *http.Request) string {
	if c, err := r.Cookie(cookieName); err == nil {
		return c.Value
	}
	if a := r.Header.Get("Authorization"); strings.HasPrefix(a, "Bearer ") {
		return strings.TrimPrefix(a, "Bearer ")
	}
	return ""
}

const errNoToken = "missing or wrong web token: run hostqos web for a fresh URL"

type loginKey struct{}

// authed runs h for requests with a live token; others get 401.
func (s *Server) authed(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		l := s.tokens.lookup(tokenOf(r))
		if l == nil {
			writeError(w, http.StatusUnauthorized, errNoToken)
			return
		}
		h(w, r.WithContext(context.WithValue(r.Context(), loginKey{}, l)))
	}
}

func loginOf(r *http.Request) *login { return r.Context().Value(loginKey{}).(*login) }

// index serves the page. ?token= logs in: the token goes into a cookie
// and the browser is sent to the bare URL, so the token leaves the
// address bar and the history.
func (s *Server) index(w http.ResponseWriter, r *http.Request) {
	if tok := r.URL.Query().Get("token"); tok != "" {
		l := s.tokens.lookup(tok)
		if l == nil {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprintln(w, "hostqos web: this login token is wrong or expired; run hostqos web for a fresh URL")
			return
		}
		http.SetCookie(w, &http.Cookie{Name: cookieName, Value: tok, Path: "/", HttpOnly: true,
			SameSite: http.SameSiteStrictMode, Expires: l.expires})
		w.Header().Set("Cache-Control", "no-store")
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	if s.tokens.lookup(tokenOf(r)) == nil {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprintln(w, "hostqos web: not logged in; run hostqos web and open the URL it prints")
		return
	}
	a := s.assets["index.html"]
	w.Header().Set("Content-Type", a.ctype)
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(a.body)
}

// asset serves an embedded file (no data of the host: no token needed).
func (s *Server) asset(w http.ResponseWriter, r *http.Request) {
	a, ok := s.assets[strings.TrimPrefix(r.URL.Path, "/assets/")]
	if !ok || strings.HasSuffix(r.URL.Path, ".html") {
		writeError(w, http.StatusNotFound, "no such file: "+clip(r.URL.Path))
		return
	}
	w.Header().Set("Content-Type", a.ctype)
	w.Header().Set("ETag", a.etag)
	w.Header().Set("Cache-Control", "no-cache")
	if r.Header.Get("If-None-Match") == a.etag {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	_, _ = w.Write(a.body)
}

// whoami tells the page whose token it holds.
func (s *Server) whoami(w http.ResponseWriter, r *http.Request) {
	l := loginOf(r)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(map[string]any{"uid": l.caller.UID, "privileged": l.caller.Privileged, "expires": l.expires})
}

// allowed says whether the web view passes a request on to the API: any
// read but the event stream (served as /api/events), and the changes of
// rules (the page's actions). The API authorizes them as for the socket.
func allowed(method, p string) bool {
	switch method {
	case http.MethodGet, http.MethodHead:
		return strings.HasPrefix(p, "/v1/") && p != "/v1/events"
	case http.MethodPost:
		return p == "/v1/rules"
	case http.MethodPatch, http.MethodDelete:
		name, ok := strings.CutPrefix(p, "/v1/rules/")
		return ok && name != "" && !strings.Contains(name, "/")
	}
	return false
}

// forward passes /api/v1/… to the API as the token's user, with the
// body bounded as the API bounds it.
func (s *Server) forward(w http.ResponseWriter, r *http.Request) {
	p := strings.TrimPrefix(r.URL.Path, "/api")
	if !allowed(r.Method, p) {
		writeError(w, http.StatusForbidden, r.Method+" "+clip(p)+" is not available from the web view; use the hostqos command")
		return
	}
	if r.ContentLength > maxBody {
		writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body larger than the limit of %d bytes (%d MiB); nothing was changed", maxBody, maxBody>>20))
		return
	}
	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(time.Now().Add(writeTimeout))
	r.Body = http.MaxBytesReader(w, r.Body, maxBody+1) // the API answers 413 past maxBody
	r2 := r.Clone(r.Context())
	r2.URL.Path, r2.URL.RawPath, r2.RequestURI = p, "", ""
	r2.Header.Del("Cookie")
	r2.Header.Del("Authorization")
	w.Header().Set("Cache-Control", "no-store")
	s.cfg.API.ServeHTTP(w, s.cfg.As(r2, loginOf(r).caller))
}

// call runs one GET of the API as c and returns the status and body.
func (s *Server) call(ctx context.Context, c engine.Caller, target string) (int, []byte) {
	r, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return http.StatusInternalServerError, nil
	}
	var b bufWriter
	s.cfg.API.ServeHTTP(&b, s.cfg.As(r, c))
	if b.code == 0 {
		b.code = http.StatusOK
	}
	return b.code, b.buf.Bytes()
}

// bufWriter is a ResponseWriter into memory.
type bufWriter struct {
	h    http.Header
	code int
	buf  bytes.Buffer
}

func (b *bufWriter) Header() http.Header {
	if b.h == nil {
		b.h = http.Header{}
	}
	return b.h
}

func (b *bufWriter) WriteHeader(code int) {
	if b.code == 0 {
		b.code = code
	}
}

func (b *bufWriter) Write(p []byte) (int, error) { return b.buf.Write(p) }

// liveKinds are the statistics a live stream may carry.
var liveKinds = map[string]bool{api.StatApps: true, api.StatFlows: true, api.StatLinks: true, api.StatRules: true, api.StatClasses: true}

// startStream takes a stream place of the request's token and starts an
// event-stream answer; false: refused (answered).
func (s *Server) startStream(w http.ResponseWriter, r *http.Request) (*http.ResponseController, func(), bool) {
	l := loginOf(r)
	if !s.tokens.openStream(l) {
		writeError(w, http.StatusTooManyRequests, fmt.Sprintf("%d live streams of this login are open (the limit); close a tab", maxStreamsPerToken))
		return nil, nil, false
	}
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Time{})
	_ = rc.SetWriteDeadline(time.Now().Add(writeTimeout))
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	return rc, func() { s.tokens.closeStream(l) }, true
}

// live streams the statistics of one kind (?kind=, apps by default) once
// a second as server-sent events: what GET /v1/stats/KIND answers the
// token's user.
func (s *Server) live(w http.ResponseWriter, r *http.Request) {
	kind := r.URL.Query().Get("kind")
	if kind == "" {
		kind = api.StatApps
	}
	if !liveKinds[kind] {
		writeError(w, http.StatusBadRequest, "kind = "+clip(kind)+": want apps, flows, links, rules or classes")
		return
	}
	rc, end, ok := s.startStream(w, r)
	if !ok {
		return
	}
	defer end()
	caller := loginOf(r).caller
	tick := time.NewTicker(liveInterval)
	defer tick.Stop()
	var out bytes.Buffer
	for {
		code, body := s.call(r.Context(), caller, "/v1/stats/"+kind)
		out.Reset()
		if code != http.StatusOK {
			out.WriteString("event: failed\n")
		}
		out.WriteString("data: ")
		if err := json.Compact(&out, body); err != nil {
			out.WriteString(`{"error":"bad answer"}`)
		}
		out.WriteString("\n\n")
		_ = rc.SetWriteDeadline(time.Now().Add(writeTimeout))
		if _, err := w.Write(out.Bytes()); err != nil {
			return
		}
		if err := rc.Flush(); err != nil {
			return
		}
		select {
		case <-tick.C:
		case <-r.Context().Done():
			return
		case <-s.done:
			return
		}
	}
}

// events passes the API's event stream on as server-sent events, one
// event per line of it.
func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	target := "/v1/events"
	if k := q.Get("kind"); k != "" {
		target += "?" + url.Values{"kind": {clip(k)}}.Encode()
	}
	_, end, ok := s.startStream(w, r)
	if !ok {
		return
	}
	defer end()
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	go func() {
		select {
		case <-s.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	sub, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return
	}
	s.cfg.API.ServeHTTP(&sseWriter{w: w}, s.cfg.As(sub, loginOf(r).caller))
}

// sseWriter turns an answer of JSON lines into server-sent events.
type sseWriter struct {
	w       http.ResponseWriter
	partial []byte
	h       http.Header
}

func (s *sseWriter) Header() http.Header {
	if s.h == nil {
		s.h = http.Header{}
	}
	return s.h // the stream's own headers are set
}

func (s *sseWriter) WriteHeader(int) {}

func (s *sseWriter) Write(p []byte) (int, error) {
	s.partial = append(s.partial, p...)
	for {
		i := bytes.IndexByte(s.partial, '\n')
		if i < 0 {
			break
		}
		line := bytes.TrimSpace(s.partial[:i])
		s.partial = s.partial[i+1:]
		msg := []byte(": keepalive\n\n")
		if len(line) > 0 {
			msg = append(append([]byte("data: "), line...), '\n', '\n')
		}
		if _, err := s.w.Write(msg); err != nil {
			return 0, err
		}
	}
	if len(s.partial) > 1<<20 {
		return 0, errors.New("event line too long")
	}
	return len(p), nil
}

func (s *sseWriter) FlushError() error { return http.NewResponseController(s.w).Flush() }

func (s *sseWriter) Unwrap() http.ResponseWriter { return s.w }

// limitListener accepts at most cap(slots) connections at once.
type limitListener struct {
	net.Listener
	slots chan struct{}
}

func (l *limitListener) Accept() (net.Conn, error) {
	l.slots <- struct{}{}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.slots
		return nil, err
	}
	return &slotConn{Conn: c, free: func() { <-l.slots }}, nil
}

type slotConn struct {
	net.Conn
	once sync.Once
	free func()
}

func (c *slotConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.free)
	return err
}
