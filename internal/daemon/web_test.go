package daemon

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/web"
)

// webFixture is the web view over a test daemon's real API handler (the
// fake kernel), on a loopback port, with a login of root and one of
// nobody.
type webFixture struct {
	t             *testing.T
	d             *Daemon
	s             *web.Server
	root, nobody  api.WebLogin
	base          string
	noRedirects   *http.Client
	apiHandler    http.Handler
	policyAtStart string
}

func newWebFixture(t *testing.T) *webFixture {
	t.Helper()
	d, _, h := startTestDaemon(t)
	s, err := web.Start(web.Config{Listen: "127.0.0.1:0", API: h, As: asCaller, Logger: d.log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	f := &webFixture{t: t, d: d, s: s, apiHandler: h, base: "http://" + s.Addr()}
	f.noRedirects = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }, Timeout: 10 * time.Second}
	if f.root, err = s.Issue(peer{UID: 0, Privileged: true}); err != nil {
		t.Fatal(err)
	}
	if f.nobody, err = s.Issue(peer{UID: 65534, GID: 65534}); err != nil {
		t.Fatal(err)
	}
	// A rule of root's, for the ordinary user to try to change.
	if w := serve(h, &peer{Privileged: true}, api.RouteAddRule, `{"name":"admin","exe":"/usr/bin/true","maxbw":"4mbit"}`); w.Code != http.StatusCreated {
		t.Fatalf("add rule: %d %s", w.Code, w.Body)
	}
	f.policyAtStart = f.policy()
	return f
}

// policy is what the API shows of the policy (rules, classes, links,
// blocks), to tell that nothing changed.
func (f *webFixture) policy() string {
	var b strings.Builder
	for _, r := range []string{api.RouteRules, api.RouteClasses, api.RouteLinks, api.RouteBlocks, api.RouteReservations} {
		w := serve(f.apiHandler, &peer{Privileged: true}, r, "")
		b.WriteString(w.Body.String())
	}
	return b.String()
}

// do sends one request; token "" sends none; hdr adds headers.
func (f *webFixture) do(method, path, token string, body io.Reader, hdr map[string]string) (*http.Response, string) {
	f.t.Helper()
	r, err := http.NewRequest(method, f.base+path, body)
	if err != nil {
		f.t.Fatal(err)
	}
	if token != "" {
		r.Header.Set("Authorization", "Bearer "+token)
	}
	for k, v := range hdr {
		if k == "Host" {
			r.Host = v
			continue
		}
		r.Header.Set(k, v)
	}
	resp, err := f.noRedirects.Do(r)
	if err != nil {
		f.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp, string(b)
}

// TestWebLogin: the page and its API need a live token (missing or
// wrong: 401); the URL hostqos web prints logs in with a cookie that is
// HttpOnly and SameSite=Strict and sends the browser to the bare URL (the
// token leaves the address bar); the page comes with a strict
// Content-Security-Policy.
func TestWebLogin(t *testing.T) {
	f := newWebFixture(t)
	for _, c := range []struct{ path, token string }{
		{"/", ""}, {"/?token=" + strings.Repeat("0", 64), ""}, {"/?token=short", ""},
		{"/api/v1/rules", ""}, {"/api/v1/rules", strings.Repeat("ab", 32)}, {"/api/live", "x"}, {"/api/whoami", ""},
	} {
		if resp, body := f.do("GET", c.path, c.token, nil, nil); resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("GET %s with token %q: %d %s; want 401", c.path, c.token, resp.StatusCode, body)
		}
	}
	resp, _ := f.do("GET", "/?token="+f.root.Token, "", nil, nil)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/" {
		t.Fatalf("login: %d, Location %q; want 303 to /", resp.StatusCode, resp.Header.Get("Location"))
	}
	var cookie *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == "hostqos_web" {
			cookie = c
		}
	}
	if cookie == nil || !cookie.HttpOnly || cookie.SameSite != http.SameSiteStrictMode || cookie.Value != f.root.Token {
		t.Fatalf("login cookie %+v: want HttpOnly, SameSite=Strict, the token", cookie)
	}
	resp, body := f.do("GET", "/", "", nil, map[string]string{"Cookie": "hostqos_web=" + cookie.Value})
	csp := resp.Header.Get("Content-Security-Policy")
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "/assets/app.js") {
		t.Fatalf("the page with the cookie: %d %.200s", resp.StatusCode, body)
	}
	if !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe") {
		t.Errorf("Content-Security-Policy %q: want default-src 'none', script-src 'self', nothing unsafe", csp)
	}
	resp, body = f.do("GET", "/api/whoami", f.nobody.Token, nil, nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `"uid":65534`) || !strings.Contains(body, `"privileged":false`) {
		t.Errorf("whoami of nobody's token: %d %s", resp.StatusCode, body)
	}
}

// TestWebHostAndOrigin: a Host that is not the view's (DNS rebinding) and
// an Origin of another site (CSRF) are refused with 403, even with a good
// token; the page's own origin is served.
func TestWebHostAndOrigin(t *testing.T) {
	f := newWebFixture(t)
	for _, h := range []map[string]string{
		{"Host": "evil.example:9465"}, {"Host": "hostqos.attacker.example"},
		{"Origin": "http://evil.example"}, {"Origin": "null"}, {"Origin": "https://" + f.s.Addr()},
	} {
		resp, body := f.do("GET", "/api/v1/rules", f.root.Token, nil, h)
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("GET with %v: %d %s; want 403", h, resp.StatusCode, body)
		}
		resp, body = f.do("PATCH", "/api/v1/rules/admin", f.root.Token, strings.NewReader(`{"maxbw":"1mbit"}`), h)
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("PATCH with %v: %d %s; want 403", h, resp.StatusCode, body)
		}
	}
	for _, h := range []map[string]string{{"Origin": "http://" + f.s.Addr()}, {"Host": "localhost:1234"}, {}} {
		if resp, body := f.do("GET", "/api/v1/rules", f.root.Token, nil, h); resp.StatusCode != http.StatusOK {
			t.Errorf("GET with %v: %d %s; want 200", h, resp.StatusCode, body)
		}
	}
	if p := f.policy(); p != f.policyAtStart {
		t.Errorf("refused requests changed the policy:\n%s\nwas\n%s", p, f.policyAtStart)
	}
}

// TestWebGetChangesNothing: no GET changes policy: every route of the API
// and every page of the view, asked with GET (the changing routes' paths
// too) by root's token, leaves rules, classes, links, blocks and
// reservations as they were.
func TestWebGetChangesNothing(t *testing.T) {
	f := newWebFixture(t)
	paths := []string{"/", "/?token=" + f.root.Token, "/api/whoami", "/assets/app.js"}
	for _, r := range api.Routes() {
		paths = append(paths, "/api"+routePath(r, "admin", "x"))
	}
	for _, p := range paths {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		r, _ := http.NewRequestWithContext(ctx, "GET", f.base+p, nil)
		r.Header.Set("Authorization", "Bearer "+f.root.Token)
		if resp, err := f.noRedirects.Do(r); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		cancel()
	}
	if p := f.policy(); p != f.policyAtStart {
		t.Errorf("GET requests changed the policy:\n%s\nwas\n%s", p, f.policyAtStart)
	}
}

// TestWebOrdinaryUserCannotChangeRootRule: nobody's token may read but
// not change root's rule: 403 with the API's own message, nothing
// changed; root's token changes it.
func TestWebOrdinaryUserCannotChangeRootRule(t *testing.T) {
	f := newWebFixture(t)
	for _, c := range []struct{ method, path, body string }{
		{"PATCH", "/api/v1/rules/admin", `{"maxbw":"100mbit"}`},
		{"DELETE", "/api/v1/rules/admin", ``},
		{"POST", "/api/v1/rules", `{"name":"mine","exe":"/usr/bin/true","precedence":100,"action":"pass"}`},
	} {
		resp, body := f.do(c.method, c.path, f.nobody.Token, strings.NewReader(c.body), nil)
		var e api.ErrorBody
		_ = json.Unmarshal([]byte(body), &e)
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(e.Error, "changing host policy needs root or membership of group hostqos") {
			t.Errorf("%s %s as nobody: %d %s; want 403 with the API's message", c.method, c.path, resp.StatusCode, body)
		}
	}
	if p := f.policy(); p != f.policyAtStart {
		t.Errorf("nobody changed the policy:\n%s\nwas\n%s", p, f.policyAtStart)
	}
	if resp, body := f.do("GET", "/api/v1/rules/admin", f.nobody.Token, nil, nil); resp.StatusCode != http.StatusOK {
		t.Errorf("nobody reads the rule: %d %s", resp.StatusCode, body)
	}
	resp, body := f.do("PATCH", "/api/v1/rules/admin", f.root.Token, strings.NewReader(`{"maxbw":"2mbit"}`), map[string]string{"Origin": "http://" + f.s.Addr()})
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `"2mbit"`) {
		t.Errorf("root's PATCH: %d %s", resp.StatusCode, body)
	}
	// Routes that act on the caller's process or the whole daemon are not
	// passed on, whoever asks.
	for _, c := range []struct{ method, path string }{{"POST", "/api/v1/runs"}, {"POST", "/api/v1/down"}, {"POST", "/api/v1/qsockets"}, {"DELETE", "/api/v1/links/eth0"}} {
		if resp, body := f.do(c.method, c.path, f.root.Token, strings.NewReader(`{}`), nil); resp.StatusCode != http.StatusForbidden {
			t.Errorf("%s %s: %d %s; want 403", c.method, c.path, resp.StatusCode, body)
		}
	}
}

// TestWebBodyBound: a 10 MB body is refused (413), with its length given
// and without (chunked), and changes nothing.
func TestWebBodyBound(t *testing.T) {
	f := newWebFixture(t)
	big := `{"name":"big","comm":"` + strings.Repeat("x", 10<<20) + `"}`
	resp, body := f.do("POST", "/api/v1/rules", f.root.Token, strings.NewReader(big), nil)
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("10 MB body: %d %.300s; want 413", resp.StatusCode, body)
	}
	resp, body = f.do("POST", "/api/v1/rules", f.root.Token, io.MultiReader(strings.NewReader(big)), nil) // no length: chunked
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("10 MB chunked body: %d %.300s; want 413", resp.StatusCode, body)
	}
	if p := f.policy(); p != f.policyAtStart {
		t.Errorf("a refused body changed the policy")
	}
}

// TestWebLive: the live stream sends the apps' statistics as server-sent
// events, and one login holds at most 4 streams at once.
func TestWebLive(t *testing.T) {
	f := newWebFixture(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var open []*http.Response
	for i := 0; i < 4; i++ {
		r, _ := http.NewRequestWithContext(ctx, "GET", f.base+"/api/live", nil)
		r.Header.Set("Authorization", "Bearer "+f.nobody.Token)
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		open = append(open, resp)
	}
	if ct := open[0].Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("live stream type %q", ct)
	}
	line, err := bufio.NewReader(open[0].Body).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "data: {") || !json.Valid(bytes.TrimSpace([]byte(strings.TrimPrefix(line, "data: ")))) {
		t.Errorf("first line of the stream: %q, %v", line, err)
	}
	resp, body := f.do("GET", "/api/live", f.nobody.Token, nil, nil)
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Errorf("a fifth stream: %d %s; want 429", resp.StatusCode, body)
	}
	if resp, _ := f.do("GET", "/api/live?kind=nothing", f.root.Token, nil, nil); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("kind=nothing: %d; want 400", resp.StatusCode)
	}
}
