package daemon

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hostqos/hostqos/api"
)

const testKey = "0123456789abcdef0123456789abcdef"

// keyed sends a request with an idempotency key through h as uid 0.
func keyed(h http.Handler, method, path, key, body string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, path, strings.NewReader(body))
	r = r.WithContext(context.WithValue(r.Context(), credKey{}, &peer{UID: 0, Privileged: true}))
	if key != "" {
		r.Header.Set(api.IdempotencyKeyHeader, key)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	return rec
}

// TestIdempotentReplay: a repeated key gets the recorded answer and the
// change is applied once; the same key with another request is a 422; a
// failed change is not recorded; a malformed key is a 400.
func TestIdempotentReplay(t *testing.T) {
	d := newTestDaemon(t, t.TempDir())
	var applied atomic.Int32
	h := d.idempotent(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := readBody(r)
		if strings.Contains(string(b), "bad") {
			writeErr(w, &badRequest{Err: fmt.Errorf("bad")})
			return
		}
		n := applied.Add(1)
		writeJSON(w, http.StatusCreated, map[string]any{"n": n})
	}))
	first := keyed(h, "POST", routePath(api.RouteAddRule), testKey, `{"name":"a"}`)
	if first.Code != 201 || first.Header().Get(api.IdempotentReplayHeader) != "" {
		t.Fatalf("first: %d %v", first.Code, first.Header())
	}
	again := keyed(h, "POST", routePath(api.RouteAddRule), testKey, `{"name":"a"}`)
	if again.Code != 201 || again.Header().Get(api.IdempotentReplayHeader) != "true" || again.Body.String() != first.Body.String() {
		t.Errorf("replay: %d %v %q (first %q)", again.Code, again.Header(), again.Body, first.Body)
	}
	if n := applied.Load(); n != 1 {
		t.Errorf("applied %d times, want once", n)
	}
	other := keyed(h, "POST", routePath(api.RouteAddRule), testKey, `{"name":"b"}`)
	if other.Code != http.StatusUnprocessableEntity || !strings.Contains(other.Body.String(), "already used for another request") {
		t.Errorf("reuse for another request: %d %s", other.Code, other.Body)
	}
	otherPath := keyed(h, "DELETE", routePath(api.RouteRemoveRule, "a"), testKey, ``)
	if otherPath.Code != http.StatusUnprocessableEntity {
		t.Errorf("reuse for another path: %d", otherPath.Code)
	}
	k2 := strings.Repeat("b", 32)
	if rec := keyed(h, "POST", routePath(api.RouteAddRule), k2, `{"bad":1}`); rec.Code != 400 {
		t.Fatalf("failing change: %d", rec.Code)
	}
	if _, ok := d.eng.LookupKey(k2); ok {
		t.Error("a failed change was recorded")
	}
	for _, bad := range []string{"short", strings.Repeat("x", 65), "0123456789abcdef/0123456789abcdef"} {
		if rec := keyed(h, "POST", routePath(api.RouteAddRule), bad, `{}`); rec.Code != 400 || !strings.Contains(rec.Body.String(), "Idempotency-Key") {
			t.Errorf("key %q: %d %s", bad, rec.Code, rec.Body)
		}
	}
	if n := applied.Load(); n != 1 {
		t.Errorf("applied %d times, want once", n)
	}
	// Without a key nothing is recorded or replayed.
	keyed(h, "POST", routePath(api.RouteAddRule), "", `{"name":"c"}`)
	keyed(h, "POST", routePath(api.RouteAddRule), "", `{"name":"c"}`)
	if n := applied.Load(); n != 3 {
		t.Errorf("unkeyed requests applied %d times in all, want 3", n)
	}
	// An ordinary user's keys are not kept (they could push root's out).
	r := httptest.NewRequest("POST", routePath(api.RouteStartRun), strings.NewReader(`{}`))
	r = r.WithContext(context.WithValue(r.Context(), credKey{}, &peer{UID: 65534}))
	r.Header.Set(api.IdempotencyKeyHeader, strings.Repeat("u", 32))
	h.ServeHTTP(httptest.NewRecorder(), r)
	if _, ok := d.eng.LookupKey(testKey); !ok {
		t.Error("root's key was not kept")
	}
	if _, ok := d.eng.LookupKey(strings.Repeat("u", 32)); ok {
		t.Error("an ordinary user's key was kept")
	}
}

// TestIdempotentInFlight: a retry arriving while the first attempt is at
// work waits for it and gets its answer; the change is applied once.
func TestIdempotentInFlight(t *testing.T) {
	d := newTestDaemon(t, t.TempDir())
	var applied atomic.Int32
	release := make(chan struct{})
	h := d.idempotent(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		applied.Add(1)
		<-release
		writeJSON(w, http.StatusOK, map[string]string{"ok": "yes"})
	}))
	var wg sync.WaitGroup
	codes := make([]*httptest.ResponseRecorder, 3)
	for i := range codes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes[i] = keyed(h, "PUT", routePath(api.RouteSetLink, "eth0"), testKey, `{}`)
		}()
	}
	time.Sleep(100 * time.Millisecond)
	close(release)
	wg.Wait()
	for i, rec := range codes {
		if rec.Code != 200 {
			t.Errorf("request %d: %d %s", i, rec.Code, rec.Body)
		}
	}
	if n := applied.Load(); n != 1 {
		t.Errorf("applied %d times, want once", n)
	}
}

// TestReplayAfterRestart: a key recorded in the runtime state file (a
// change applied before the daemon restarted, its answer not kept) is
// answered as applied, and the change is not applied again.
func TestReplayAfterRestart(t *testing.T) {
	dir := t.TempDir()
	r := httptest.NewRequest(routeMethod(api.RouteAddRule), routePath(api.RouteAddRule), strings.NewReader(`{}`))
	r.Header.Set(api.IdempotencyKeyHeader, testKey)
	r = r.WithContext(context.WithValue(r.Context(), credKey{}, &peer{UID: 0, Privileged: true}))
	state := fmt.Sprintf(`{"version": 1, "overlay": {}, "idempotency_keys": {%q: {"fingerprint": %q, "at_unix": %d}}}`,
		testKey, fingerprint(0, r, []byte(`{}`)), time.Now().Unix())
	if err := os.WriteFile(filepath.Join(dir, "runtime.json"), []byte(state), 0o644); err != nil {
		t.Fatal(err)
	}
	d := newTestDaemon(t, dir)
	h := d.idempotent(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Error("the change was applied again")
	}))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	if rec.Code != 200 || rec.Header().Get(api.IdempotentReplayHeader) != "true" || !strings.Contains(rec.Body.String(), `"applied": true`) {
		t.Errorf("replay after restart: %d %s", rec.Code, rec.Body)
	}
}
