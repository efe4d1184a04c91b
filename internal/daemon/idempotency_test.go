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
	d := &Daemon{}
	var applied atomic.Int32
	h := d.idempotent(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := readBody(r)
		if strings.Contains(string(b), "bad") {
			writeErr(w, &badRequest{fmt.Errorf("bad")})
			return
		}
		n := applied.Add(1)
		writeJSON(w, http.StatusCreated, map[string]any{"n": n})
	}))
	first := keyed(h, "POST", "/v1/rules", testKey, `{"name":"a"}`)
	if first.Code != 201 || first.Header().Get(api.IdempotentReplayHeader) != "" {
		t.Fatalf("first: %d %v", first.Code, first.Header())
	}
	again := keyed(h, "POST", "/v1/rules", testKey, `{"name":"a"}`)
	if again.Code != 201 || again.Header().Get(api.IdempotentReplayHeader) != "true" || again.Body.String() != first.Body.String() {
		t.Errorf("replay: %d %v %q (first %q)", again.Code, again.Header(), again.Body, first.Body)
	}
	if n := applied.Load(); n != 1 {
		t.Errorf("applied %d times, want once", n)
	}
	other := keyed(h, "POST", "/v1/rules", testKey, `{"name":"b"}`)
	if other.Code != http.StatusUnprocessableEntity || !strings.Contains(other.Body.String(), "already used for another request") {
		t.Errorf("reuse for another request: %d %s", other.Code, other.Body)
	}
	otherPath := keyed(h, "DELETE", "/v1/rules/a", testKey, ``)
	if otherPath.Code != http.StatusUnprocessableEntity {
		t.Errorf("reuse for another path: %d", otherPath.Code)
	}
	k2 := strings.Repeat("b", 32)
	if rec := keyed(h, "POST", "/v1/rules", k2, `{"bad":1}`); rec.Code != 400 {
		t.Fatalf("failing change: %d", rec.Code)
	}
	if _, ok := d.keysPersist[k2]; ok {
		t.Error("a failed change was recorded")
	}
	for _, bad := range []string{"short", strings.Repeat("x", 65), "0123456789abcdef/0123456789abcdef"} {
		if rec := keyed(h, "POST", "/v1/rules", bad, `{}`); rec.Code != 400 || !strings.Contains(rec.Body.String(), "Idempotency-Key") {
			t.Errorf("key %q: %d %s", bad, rec.Code, rec.Body)
		}
	}
	if n := applied.Load(); n != 1 {
		t.Errorf("applied %d times, want once", n)
	}
	// Without a key nothing is recorded or replayed.
	keyed(h, "POST", "/v1/rules", "", `{"name":"c"}`)
	keyed(h, "POST", "/v1/rules", "", `{"name":"c"}`)
	if n := applied.Load(); n != 3 {
		t.Errorf("unkeyed requests applied %d times in all, want 3", n)
	}
	// An ordinary user's keys are not kept (they could push root's out).
	r := httptest.NewRequest("POST", "/v1/runs", strings.NewReader(`{}`))
	r = r.WithContext(context.WithValue(r.Context(), credKey{}, &peer{UID: 65534}))
	r.Header.Set(api.IdempotencyKeyHeader, strings.Repeat("u", 32))
	h.ServeHTTP(httptest.NewRecorder(), r)
	if len(d.keysPersist) != 1 {
		t.Errorf("keys kept: %v, want root's only", d.keysPersist)
	}
}

// TestIdempotentInFlight: a retry arriving while the first attempt is at
// work waits for it and gets its answer; the change is applied once.
func TestIdempotentInFlight(t *testing.T) {
	d := &Daemon{}
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
			codes[i] = keyed(h, "PUT", "/v1/links/eth0", testKey, `{}`)
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

// TestKeyTableBound: the table keeps at most maxKeys keys and none older
// than keyTTL; the newest key always stays.
func TestKeyTableBound(t *testing.T) {
	now := time.Now()
	var tab keyTable
	for i := 0; i < maxKeys+10; i++ {
		tab = tab.with(fmt.Sprintf("%032d", i), &keyEntry{At: now.Unix() - int64(maxKeys+10-i)}, now)
	}
	if len(tab) != maxKeys {
		t.Errorf("%d keys kept, want %d", len(tab), maxKeys)
	}
	if _, ok := tab[fmt.Sprintf("%032d", 0)]; ok {
		t.Error("the oldest key was kept")
	}
	tab = tab.with(testKey, &keyEntry{At: now.Unix()}, now.Add(25*time.Hour))
	if len(tab) != 1 || tab[testKey] == nil {
		t.Errorf("after 25 h: %d keys", len(tab))
	}
}

// TestKeyPersistedWithChange: the key of a change is written in the same
// state file as the change (runtime file for a temporary change, state
// file otherwise) and read back at start.
func TestKeyPersistedWithChange(t *testing.T) {
	dir := t.TempDir()
	d := &Daemon{temp: newOverlay()}
	d.commit = &pendingKey{key: testKey, fingerprint: "fp"}
	keysP, keysT := d.recordKeyLocked(true)
	if keysT[testKey] == nil || keysP[testKey] != nil {
		t.Fatalf("temporary change: key in state %v, runtime %v", keysP, keysT)
	}
	d.commit = &pendingKey{key: strings.Repeat("c", 32), fingerprint: "fp2"}
	keysP, _ = d.recordKeyLocked(false)
	if keysP[strings.Repeat("c", 32)] == nil {
		t.Fatal("persistent change: key not in the state file's table")
	}
	path := filepath.Join(dir, "runtime.json")
	if err := writeState(path, newOverlay(), nil, keysT); err != nil {
		t.Fatal(err)
	}
	p, err := readStateFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if e := p.Keys[testKey]; e == nil || e.Fingerprint != "fp" {
		t.Errorf("key after restart: %+v", p.Keys)
	}
	// After a restart the key's change is answered as applied.
	d2 := &Daemon{keysTemp: p.Keys}
	h := d2.idempotent(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Error("the change was applied again")
	}))
	r := httptest.NewRequest("POST", "/v1/rules", strings.NewReader(`{}`))
	r.Header.Set(api.IdempotencyKeyHeader, testKey)
	r = r.WithContext(context.WithValue(r.Context(), credKey{}, &peer{UID: 0, Privileged: true}))
	d2.keysTemp[testKey].Fingerprint = fingerprint(0, r, []byte(`{}`))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	if rec.Code != 200 || rec.Header().Get(api.IdempotentReplayHeader) != "true" || !strings.Contains(rec.Body.String(), `"applied": true`) {
		t.Errorf("replay after restart: %d %s", rec.Code, rec.Body)
	}
}

// TestReadStateChecks: a state file of an unknown version, with slot
// numbers out of range (printed whole, not cut to 16 bits) or with unknown
// keys is refused, naming the file and the fix.
func TestReadStateChecks(t *testing.T) {
	dir := t.TempDir()
	for name, c := range map[string]struct{ content, want string }{
		"version":    {`{"version": 999, "overlay": {}}`, "version 999; this hostqosd reads version 1 only"},
		"no version": {`{"overlay": {}}`, "no version"},
		"rule slot":  {`{"version": 1, "overlay": {}, "slots": {"rules": {"r": 70000}, "classes": {}}}`, `rule slot 70000 of "r" out of range 0..4095`},
		"neg slot":   {`{"version": 1, "overlay": {}, "slots": {"rules": {"r": -1}, "classes": {}}}`, `rule slot -1 of "r" out of range`},
		"dup slot":   {`{"version": 1, "overlay": {}, "slots": {"rules": {"a": 3, "b": 3}, "classes": {}}}`, `rule slot 3 given to both "a" and "b"`},
		"class idx":  {`{"version": 1, "overlay": {}, "slots": {"rules": {}, "classes": {"c": 65540}}}`, `class index 65540 of "c" out of range`},
		"baseline":   {`{"version": 1, "overlay": {}, "slots": {"rules": {}, "classes": {}, "baselines": {"99999": {}}}}`, "rule slot 99999 out of range"},
		"unknown":    {`{"version": 1, "overlay": {}, "colour": 1}`, `unknown field "colour"`},
		"type":       {`{"version": 1, "overlay": {}, "slots": {"rules": {"r": "x"}}}`, "field slots.rules"},
		"bad key":    {`{"version": 1, "overlay": {}, "idempotency_keys": {"no way": {}}}`, `idempotency key "no way" malformed`},
	} {
		path := filepath.Join(dir, name+".json")
		if err := os.WriteFile(path, []byte(c.content), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := readStateFile(path)
		if err == nil {
			t.Errorf("%s: accepted", name)
			continue
		}
		msg := err.Error()
		if !strings.Contains(msg, c.want) || !strings.Contains(msg, path) || !strings.Contains(msg, "move it away") || strings.Contains(msg, "Go ") {
			t.Errorf("%s: %q lacks %q, the path or the fix", name, msg, c.want)
		}
	}
}
