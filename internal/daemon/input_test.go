package daemon

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/engine"
	"github.com/hostqos/hostqos/internal/policy"
)

// answer runs writeErr on err and returns the status and the message.
func answer(t *testing.T, err error) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	writeErr(rec, err)
	var body api.ErrorBody
	if e := json.Unmarshal(rec.Body.Bytes(), &body); e != nil {
		t.Fatalf("decode error body %q: %v", rec.Body.String(), e)
	}
	msg := body.Error
	for _, f := range body.Fields {
		msg += "\n" + f.Error()
	}
	return rec.Code, msg
}

// TestDecodeRequest: API bodies are decoded strictly, with 400s naming the
// field (and the closest valid one), 413 for a body over 1 MiB, and no Go
// type names.
func TestDecodeRequest(t *testing.T) {
	cases := []struct {
		name string
		body string
		dst  func() any
		code int
		want string
	}{
		{"rule unknown field", `{"name":"r","comm":"x","max_bw":"1mbit"}`, func() any { r := policy.NewRule(""); return &r }, 400,
			`api: rule "r": unknown field "max_bw"; did you mean maxbw?`},
		{"class unknown field", `{"name":"gold","dscp":"AF21","user_alowed":true}`, func() any { return &policy.Class{} }, 400,
			`api: class "gold": unknown field "user_alowed"; did you mean user_allowed?`},
		{"link null", `null`, func() any { return &policy.Link{} }, 400, "want a JSON object {...}, got null"},
		{"empty body", ``, func() any { return &policy.Link{} }, 400, "want a JSON object {...}, got nothing"},
		{"run unknown field", `{"clas":"bulk"}`, func() any { return &api.RunRequest{} }, 400, `api: run: unknown field "clas"; did you mean class?`},
		{"run cmd too long", `{"cmd":"` + strings.Repeat("x", 5000) + `"}`, func() any { return &api.RunRequest{} }, 400,
			`field cmd = "` + strings.Repeat("x", 64) + `… (5000 bytes)": too long: 5000 bytes, at most 4096`},
		{"wrong kind", `{"name":"c","priority":"high"}`, func() any { return &policy.Class{} }, 400, `field priority = "high": want a whole number, got string`},
		{"trailing data", `{"name":"eth0"} {}`, func() any { return &policy.Link{} }, 400, "invalid character"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := httptest.NewRequest("POST", routePath(api.RouteAddRule), strings.NewReader(c.body))
			err := decode(r, c.dst())
			if err == nil {
				t.Fatal("no error")
			}
			code, msg := answer(t, err)
			if code != c.code || !strings.Contains(msg, c.want) {
				t.Errorf("got %d %q, want %d and %q", code, msg, c.code, c.want)
			}
			if strings.Contains(msg, "Go value") || strings.Contains(msg, "Go struct") || strings.Contains(msg, "policy.") {
				t.Errorf("message names a Go type: %q", msg)
			}
			if len(msg) > 1000 {
				t.Errorf("message echoes too much: %d bytes", len(msg))
			}
		})
	}
	// Over 1 MiB: 413 with the limit, not "unexpected EOF".
	big := `{"name":"r","exe":"/` + strings.Repeat("a", 1<<20) + `"}`
	err := decode(httptest.NewRequest("POST", routePath(api.RouteAddRule), strings.NewReader(big)), &policy.Rule{})
	code, msg := answer(t, err)
	if code != http.StatusRequestEntityTooLarge || !strings.Contains(msg, "limit of 1048576 bytes (1 MiB)") {
		t.Errorf("large body: %d %q", code, msg)
	}
}

// TestPatchStrict: a PATCH body is decoded as strictly as a whole object.
func TestPatchStrict(t *testing.T) {
	cur := policy.Rule{Name: "web", Comm: "x", DSCP: policy.NoDSCP, DSCPIn: policy.NoDSCP}
	for body, want := range map[string]string{
		`{"max_bw":"1mbit"}`:  `rule "web": unknown field "max_bw"; did you mean maxbw?`,
		`{"MaxBW":"1mbit"}`:   `unknown field "MaxBW"; did you mean maxbw?`,
		`null`:                "want a JSON object {...}, got null",
		`{"precedence":"x"}`:  `field precedence = "x": want a whole number, got string`,
		`{"name":"other"}`:    "the name cannot be changed",
		`["maxbw","1mbit"]`:   "got an array",
		`{"maxbw":"1 donut"}`: `field maxbw = "1 donut"`,
	} {
		out := policy.NewRule("")
		err := engine.PatchJSON(cur, []byte(body), &out)
		if err == nil {
			t.Errorf("%s: no error", body)
			continue
		}
		code, msg := answer(t, err)
		if code != 400 || !strings.Contains(msg, want) {
			t.Errorf("%s: got %d %q, want 400 and %q", body, code, msg, want)
		}
	}
	out := policy.NewRule("")
	if err := engine.PatchJSON(cur, []byte(`{"maxbw":"1mbit","comm":null,"proto":"udp"}`), &out); err != nil || out.MaxBW != 1e6 || out.Comm != "" || out.Proto != "udp" {
		t.Errorf("good patch: %+v, %v", out, err)
	}
}

// TestNotFoundClipped: a not-found answer does not echo a huge name.
func TestNotFoundClipped(t *testing.T) {
	_, msg := answer(t, &engine.NotFoundError{What: "rule", Name: strings.Repeat("n", 10000)})
	if len(msg) > 200 {
		t.Errorf("not-found message echoes the whole name: %d bytes", len(msg))
	}
}
