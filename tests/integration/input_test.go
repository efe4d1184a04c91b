package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hostqos/hostqos/api"
)

// call sends a raw JSON body to the daemon and returns the status and the
// error message (with its field errors).
func (e *env) call(method, path, body string) (int, string) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var b any
	if body != "" {
		b = json.RawMessage(body)
	}
	err := e.d.Client.Do(ctx, method, path, b, nil)
	if err == nil {
		return 200, ""
	}
	var ae *api.Error
	if !errors.As(err, &ae) {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	return ae.Status, ae.Error()
}

// TestAPIRejectsBadInput: unknown fields, null
// bodies, over-long values and bodies are precise 4xx errors that change
// nothing and echo no unbounded value; a class added without a priority
// gets the default one.
func TestAPIRejectsBadInput(t *testing.T) {
	parallel(t)
	e := sharedEnv(t)
	e.hostqos("link", "set", e.iface(), "--egress-rate", "20mbit")
	long := "/" + strings.Repeat("a", 100000)
	for _, c := range []struct {
		method, path, body string
		code               int
		want               string
	}{
		{"POST", api.Path(api.RouteAddRule), `{"name":"r","comm":"x","max_bw":"1mbit"}`, 400, `rule "r": unknown field "max_bw"; did you mean maxbw?`},
		{"POST", api.Path(api.RouteAddClass), `{"name":"gold","dscp":"AF21","user_alowed":true}`, 400, `class "gold": unknown field "user_alowed"; did you mean user_allowed?`},
		{"PATCH", api.Path(api.RouteSetClass, "bulk"), `{"user_alowed":true}`, 400, `class "bulk": unknown field "user_alowed"; did you mean user_allowed?`},
		{"PUT", api.Path(api.RouteSetLink, e.iface()), `{"egress":"1mbit"}`, 400, `unknown field "egress"; did you mean egress_rate?`},
		{"PUT", api.Path(api.RouteSetLink, e.iface()), `null`, 400, "want a JSON object {...}, got null"},
		{"POST", api.Path(api.RouteAddRule), `{"name":"r","exe":"` + long + `"}`, 400, "(100001 bytes)\": too long: 100001 bytes, at most 4095"},
		{"POST", api.Path(api.RouteAddRule), `{"name":"r","exe":"` + strings.Repeat("a", 2<<20) + `"}`, 413, "limit of 1048576 bytes"},
		{"POST", api.Path(api.RouteAddClass), `{"name":"c","dscp":"EF","priority":"high"}`, 400, `field priority = "high": want a whole number, got string`},
		{"POST", api.Path(api.RouteStartRun), `{"cmd":"` + strings.Repeat("x", 900000) + `"}`, 400, "too long: 900000 bytes, at most 4096"},
	} {
		code, msg := e.call(c.method, c.path, c.body)
		if code != c.code || !strings.Contains(msg, c.want) {
			t.Errorf("%s %s: %d %q, want %d and %q", c.method, c.path, code, msg, c.code, c.want)
		}
		if len(msg) > 2000 || strings.Contains(msg, "Go value") || strings.Contains(msg, "Go struct") {
			t.Errorf("%s %s: message too long or names a Go type: %d bytes: %.300s", c.method, c.path, len(msg), msg)
		}
	}
	var rules []api.RuleInfo
	e.hostqosJSON(&rules, "rule", "list")
	if len(rules) != 0 {
		t.Errorf("rules after refused adds: %+v", rules)
	}
	var links []api.LinkStatus
	e.hostqosJSON(&links, "link", "list")
	if len(links) != 1 || links[0].EgressRate != 20e6 || !links[0].Shaping {
		t.Errorf("link after refused changes: %+v", links)
	}
	// A class without priority gets the default, not "priority -1".
	if code, msg := e.call("POST", api.Path(api.RouteAddClass), `{"name":"gold","dscp":"AF21"}`); code != 200 {
		t.Errorf("class without priority: %d %s", code, msg)
	}
	// The config file check gives the same message as the API.
	bad := filepath.Join(e.dir, "bad.toml")
	if err := os.WriteFile(bad, []byte("[[rule]]\nname = \"r\"\ncomm = \"x\"\nmax_bw = \"1mbit\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := e.hostqosErr("config", "check", bad); err == nil || !strings.Contains(out, `rule "r": unknown key "max_bw"; did you mean maxbw?`) {
		t.Errorf("config check: %v\n%s", err, out)
	}
}

// TestPersistentLinkSetOverTemporary: a persistent
// `link set` while a temporary override exists takes effect at once and
// stays after a restart.
func TestPersistentLinkSetOverTemporary(t *testing.T) {
	parallel(t)
	e := newEnv(t)
	e.startDaemon()
	rate := func() uint64 {
		var ls []api.LinkStatus
		e.hostqosJSON(&ls, "link", "list")
		if len(ls) != 1 {
			t.Fatalf("links: %+v", ls)
		}
		return uint64(ls[0].EgressRate)
	}
	e.hostqos("link", "set", e.iface(), "--egress-rate", "50mbit")
	e.hostqos("link", "set", e.iface(), "--egress-rate", "10mbit", "--temporary")
	if r := rate(); r != 10e6 {
		t.Fatalf("temporary set: rate %d", r)
	}
	out := e.hostqos("link", "set", e.iface(), "--egress-rate", "30mbit")
	if r := rate(); r != 30e6 {
		t.Errorf("persistent set over a temporary override: rate %d, want 30mbit\n%s", r, out)
	}
	e.killDaemon(syscall.SIGTERM) // a clean stop forgets temporary changes
	e.startDaemon()
	if r := rate(); r != 30e6 {
		t.Errorf("after restart: rate %d, want 30mbit", r)
	}
}

// rawChange sends a keyed change over its own connection and closes it
// without reading the answer, as a client killed by a timeout does.
func rawChange(t *testing.T, socket, method, path, key, body string) {
	t.Helper()
	c, err := net.Dial("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(c, "%s %s HTTP/1.1\r\nHost: hostqosd\r\nContent-Type: application/json\r\n%s: %s\r\nContent-Length: %d\r\n\r\n%s",
		method, path, api.IdempotencyKeyHeader, key, len(body), body)
	c.Close()
}

// keyedAdd sends a keyed rule add and returns the status and whether the
// answer was a replay.
func keyedAdd(t *testing.T, socket, key, body string) (int, bool) {
	t.Helper()
	c, err := net.Dial("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	req, _ := http.NewRequest("POST", "http://hostqosd/v1/rules", strings.NewReader(body))
	req.Header.Set(api.IdempotencyKeyHeader, key)
	req.Header.Set("Content-Type", "application/json")
	if err := req.Write(c); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get(api.IdempotentReplayHeader) == "true"
}

// TestIdempotentChange: a change whose answer was lost
// (connection dropped; daemon killed with -9 after applying it) is
// answered, when sent again with its key, with the recorded success: no
// 409, applied once, also across a restart.
func TestIdempotentChange(t *testing.T) {
	parallel(t)
	e := newEnv(t)
	e.startDaemon()
	sock := e.d.Socket
	ruleNames := func() []string {
		var rules []api.RuleInfo
		e.hostqosJSON(&rules, "rule", "list")
		var n []string
		for _, r := range rules {
			n = append(n, r.Rule.Name)
		}
		return n
	}
	has := func(name string) func() (bool, string) {
		return func() (bool, string) {
			n := ruleNames()
			return strings.Contains(" "+strings.Join(n, " ")+" ", " "+name+" "), fmt.Sprint(n)
		}
	}

	// Connection dropped before the answer was read.
	k1 := "11111111111111111111111111111111"
	body := `{"name":"a","proto":"udp","class":"bulk"}`
	rawChange(t, sock, "POST", api.Path(api.RouteAddRule), k1, body)
	eventually(t, 10*time.Second, "rule a applied", has("a"))
	if code, replay := keyedAdd(t, sock, k1, body); code != http.StatusCreated || !replay {
		t.Errorf("retry with the same key: %d (replay %v), want 201 replayed", code, replay)
	}
	if code, _ := keyedAdd(t, sock, k1, `{"name":"other","proto":"udp"}`); code != http.StatusUnprocessableEntity {
		t.Errorf("same key, another change: %d, want 422", code)
	}

	// Killed with -9 after the change was written, before the answer.
	k2 := "22222222222222222222222222222222"
	rawChange(t, sock, "POST", api.Path(api.RouteAddRule), k2, `{"name":"b","proto":"tcp"}`)
	state := filepath.Join(e.d.Dir, "state", "state.json")
	eventually(t, 10*time.Second, "key recorded in the state file", func() (bool, string) {
		data, _ := os.ReadFile(state)
		journal, _ := os.ReadFile(state + ".journal") // changes are journal records
		return strings.Contains(string(data)+string(journal), k2), ""
	})
	e.killDaemon(syscall.SIGKILL)
	e.startDaemon()
	out, err := e.hostqosErr("--idempotency-key", k2, "rule", "add", "b", "--proto", "tcp")
	if err != nil || !strings.Contains(out, "added rule b") {
		t.Errorf("retry after kill -9 and restart: %v\n%s", err, out)
	}
	if n := ruleNames(); strings.Join(n, " ") != "a b" {
		t.Errorf("rules = %v, want [a b] (each applied once)", n)
	}

	// The CLI itself retries across a restart: the daemon is down when it
	// sends; it answers once it is back.
	e.killDaemon(syscall.SIGKILL)
	cmd, buf := e.start(hostqosBin(), "--socket", sock, "rule", "add", "c", "--proto", "icmp")
	time.Sleep(time.Second)
	e.startDaemon()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil || !strings.Contains(buf.String(), "added rule c") {
			t.Errorf("CLI across a restart: %v\n%s", err, buf)
		}
	case <-time.After(60 * time.Second):
		t.Errorf("CLI did not end within 60 s:\n%s", buf)
	}
	eventually(t, 5*time.Second, "rule c applied", has("c"))
}
