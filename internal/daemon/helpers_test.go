package daemon

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/engine"
	"github.com/hostqos/hostqos/internal/host/fakehost"
	"github.com/hostqos/hostqos/internal/policy"
)

// routePath is the path of an api.Route* pattern ("GET /v1/rules/{name}"),
// each {…} filled with the next of args.
func routePath(route string, args ...string) string {
	_, p, _ := strings.Cut(route, " ")
	for _, a := range args {
		i, j := strings.Index(p, "{"), strings.Index(p, "}")
		if i < 0 || j < i {
			break
		}
		p = p[:i] + a + p[j+1:]
	}
	return p
}

// routeMethod is the method of an api.Route* pattern.
func routeMethod(route string) string {
	m, _, _ := strings.Cut(route, " ")
	return m
}

func rule(name string) policy.Rule {
	return policy.Rule{Name: name, Proto: "udp", DSCP: policy.NoDSCP, DSCPIn: policy.NoDSCP}
}

// newTestDaemon is a daemon whose engine reads its state from dir (the
// default policy, no kernel); nothing is started.
func newTestDaemon(t *testing.T, dir string) *Daemon {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	eng, err := engine.New(engine.Config{
		ConfigPath: filepath.Join(dir, "none.toml"), StatePath: filepath.Join(dir, "state.json"),
		RuntimePath: filepath.Join(dir, "runtime.json"), Logger: log,
	})
	if err != nil {
		t.Fatal(err)
	}
	return &Daemon{log: log, eng: eng, down: make(chan struct{})}
}

// testKernel is the engine's fake kernel with qsockets and the XDP
// shield: every route of the API has a kernel to act on.
type testKernel struct {
	*fakehost.FakeKernel
	*fakehost.FakeQSockKernel
	*fakehost.FakeShieldKernel
}

// startTestDaemon is a daemon over an engine started on a testKernel (link
// eth0 known as ifindex 2), with its routes.
func startTestDaemon(t *testing.T) (*Daemon, *testKernel, http.Handler) {
	t.Helper()
	dir := t.TempDir()
	d := newTestDaemon(t, dir)
	fk := fakehost.NewFakeKernel(dir)
	fk.Ifindexes["eth0"] = 2
	k := &testKernel{FakeKernel: fk, FakeQSockKernel: fakehost.NewFakeQSockKernel(fk), FakeShieldKernel: fakehost.NewFakeShieldKernel(fk)}
	if err := d.eng.Start(engine.Host{Kernel: fk, QSockets: k.FakeQSockKernel, Shield: k.FakeShieldKernel}); err != nil {
		t.Fatal(err)
	}
	return d, k, d.routes()
}

// serve sends h a request of route (path arguments args) as who, with body.
// The request's context ends after a second (which ends an event stream).
func serve(h http.Handler, who *peer, route string, body string, args ...string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(api.Method(route), api.Path(route, args...), strings.NewReader(body))
	ctx, cancel := context.WithTimeout(r.Context(), time.Second)
	defer cancel()
	r = r.WithContext(context.WithValue(ctx, credKey{}, who))
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}
