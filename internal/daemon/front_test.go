package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/engine"
	"github.com/hostqos/hostqos/internal/host/fakehost"
	"github.com/hostqos/hostqos/internal/policy"
)

// TestErrorCodes: each of the engine's refusals has its status code and
// its class (what the CLI's exit code is made from).
func TestErrorCodes(t *testing.T) {
	adm := &policy.AdmissionError{Errors: policy.Errors{&policy.FieldError{Object: `link "eth0"`, Reason: "guarantees 30mbit exceed reservable capacity 16mbit"}}}
	for _, c := range []struct {
		err   error
		code  int
		class string
	}{
		{&engine.NotFoundError{What: "rule", Name: "x"}, 404, api.ErrNotFound},
		{&engine.ForbiddenError{Why: "no"}, 403, api.ErrForbidden},
		{&engine.ConflictError{What: "rule", Name: "x"}, 409, api.ErrInvalid},
		{&engine.BadRequestError{Err: errors.New("bad")}, 400, api.ErrInvalid},
		{&engine.TooManyError{Why: "many"}, 429, api.ErrLimit},
		{&engine.TooManyError{Why: "delay bound cannot be met", Admission: true}, 429, api.ErrAdmission},
		{&policy.FieldError{Field: "maxbw"}, 400, api.ErrInvalid},
		{policy.Errors{&policy.FieldError{Field: "a"}, &policy.FieldError{Field: "b"}}, 400, api.ErrInvalid},
		{fmt.Errorf("apply: %w", adm), 400, api.ErrAdmission},
		{&tooLarge{limit: maxBody}, 413, api.ErrInvalid},
		{errors.New("kernel said no"), 500, api.ErrInternal},
	} {
		rec := httptest.NewRecorder()
		writeErr(rec, c.err)
		var body api.ErrorBody
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
			t.Fatal(err)
		}
		if rec.Code != c.code || body.Class != c.class {
			t.Errorf("%T: %d %q, want %d %q", c.err, rec.Code, body.Class, c.code, c.class)
		}
	}
	if _, msg := answer(t, adm); !strings.Contains(msg, "refused by admission control: 1 problem(s); nothing was changed\nlink \"eth0\": guarantees 30mbit") {
		t.Errorf("admission refusal reads %q", msg)
	}
}

// TestFrontDoor: requests reach the engine as the caller, and its answers
// and refusals come back with their codes: root adds a rule (201, then a
// conflict), an ordinary user is refused before the body is read, and a
// keyed change is recorded with the change and replayed.
func TestFrontDoor(t *testing.T) {
	dir := t.TempDir()
	d := newTestDaemon(t, dir)
	if err := d.eng.Start(engine.Host{Kernel: fakehost.NewFakeKernel(dir)}); err != nil {
		t.Fatal(err)
	}
	h := d.routes()
	call := func(who *peer, route, body, key string, args ...string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(routeMethod(route), routePath(route, args...), strings.NewReader(body))
		r = r.WithContext(context.WithValue(r.Context(), credKey{}, who))
		if key != "" {
			r.Header.Set(api.IdempotencyKeyHeader, key)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	rootP, nobodyP := &peer{Privileged: true}, &peer{UID: 65534, PID: 1}
	body := `{"name":"web","proto":"tcp","rport":"443","class":"interactive"}`
	if w := call(rootP, api.RouteAddRule, body, testKey); w.Code != 201 {
		t.Fatalf("add: %d %s", w.Code, w.Body)
	}
	if w := call(rootP, api.RouteAddRule, body, testKey); w.Code != 201 || w.Header().Get(api.IdempotentReplayHeader) != "true" {
		t.Errorf("replay: %d %v", w.Code, w.Header())
	}
	if w := call(rootP, api.RouteAddRule, body, ""); w.Code != 409 {
		t.Errorf("add again: %d %s", w.Code, w.Body)
	}
	if w := call(nobodyP, api.RouteAddRule, `not json`, ""); w.Code != 403 {
		t.Errorf("nobody adds: %d %s", w.Code, w.Body)
	}
	w := call(nobodyP, api.RouteRule, "", "", "web")
	var ri api.RuleInfo
	if err := json.Unmarshal(w.Body.Bytes(), &ri); w.Code != 200 || err != nil || ri.Rule.Class != "interactive" || ri.Source != "api" {
		t.Errorf("get rule: %d %s", w.Code, w.Body)
	}
	if w := call(rootP, api.RouteSetRule, `{"class":"bulk"}`, "", "web"); w.Code != 200 || !strings.Contains(w.Body.String(), `"bulk"`) {
		t.Errorf("set rule: %d %s", w.Code, w.Body)
	}
	if w := call(rootP, api.RouteRemoveRule, "", "", "nosuch"); w.Code != 404 {
		t.Errorf("remove a missing rule: %d", w.Code)
	}
	if w := call(rootP, api.RouteAddClass, `{"name":"gold","dscp":"AF21","user_allowed":true}`, ""); w.Code != 201 {
		t.Errorf("add class: %d %s", w.Code, w.Body)
	}
	if w := call(nobodyP, api.RouteStartRun, `{"class":"voice"}`, ""); w.Code != 403 {
		t.Errorf("nobody runs in a closed class: %d %s", w.Code, w.Body)
	}
	if w := call(nobodyP, api.RouteEndRun, "", "", "nosuch"); w.Code != 404 {
		t.Errorf("end a missing run: %d", w.Code)
	}
	if w := call(nobodyP, api.RouteStats, "", "", "colour"); w.Code != 404 {
		t.Errorf("unknown stats: %d", w.Code)
	}
	if w := call(nobodyP, api.RouteContainers, "", ""); w.Code != 403 || !strings.Contains(w.Body.String(), "group hostqos") {
		t.Errorf("nobody lists the host's containers: %d %s", w.Code, w.Body)
	}
	if w := call(rootP, api.RouteContainers, "", ""); w.Code != 200 || strings.TrimSpace(w.Body.String()) != "[]" {
		t.Errorf("root lists no containers: %d %s", w.Code, w.Body)
	}
	w = call(nobodyP, api.RouteStatus, "", "")
	var st api.Status
	if err := json.Unmarshal(w.Body.Bytes(), &st); err != nil || !st.Datapath.Loaded || st.Counts.Rules != 1 {
		t.Errorf("status: %d %s", w.Code, w.Body)
	}
	if _, ok := d.eng.LookupKey(testKey); !ok {
		t.Error("the key of the change was not recorded")
	}
}
