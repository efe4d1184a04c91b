package daemon

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/engine"
	"github.com/hostqos/hostqos/internal/host/fakehost"
)

// TestReloadSaysWhatNeedsARestart: a reload that changes a setting read
// only at start ([rsvp] enabled) says so in its answer (and status), and
// rsvp's answers say why RSVP is not running.
func TestReloadSaysWhatNeedsARestart(t *testing.T) {
	dir := t.TempDir()
	d := newTestDaemon(t, dir)
	if err := d.eng.Start(engine.Host{Kernel: fakehost.NewFakeKernel(dir)}); err != nil {
		t.Fatal(err)
	}
	d.inForce = d.startTime()
	h := d.routes()
	call := func(route string, out any) int {
		r := httptest.NewRequest(routeMethod(route), routePath(route), nil)
		r = r.WithContext(context.WithValue(r.Context(), credKey{}, &peer{Privileged: true}))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if err := json.Unmarshal(w.Body.Bytes(), out); err != nil {
			t.Fatalf("%s: %v: %s", route, err, w.Body)
		}
		return w.Code
	}
	var st api.Status
	if code := call(api.RouteReload, &st); code != 200 || len(st.RestartNeeded) != 0 {
		t.Fatalf("reload of an unchanged file: %d, restart needed %q", code, st.RestartNeeded)
	}
	var rs api.RSVPStatus
	if call(api.RouteRSVP, &rs); rs.Enabled || !strings.Contains(rs.NotRunning, "does not set enabled = true in its [rsvp] section") {
		t.Errorf("RSVP off in the file: %+v", rs)
	}

	if err := os.WriteFile(filepath.Join(dir, "none.toml"), []byte("history_raw = \"2h\"\n[rsvp]\nenabled = true\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	want := []string{`history_raw: (default) in force, "2h" in the config file`, `[rsvp] enabled: false in force, true in the config file`}
	if code := call(api.RouteReload, &st); code != 200 || !reflect.DeepEqual(st.RestartNeeded, want) {
		t.Errorf("reload enabling RSVP: %d, restart needed %q, want %q", code, st.RestartNeeded, want)
	}
	if call(api.RouteStatus, &st); !reflect.DeepEqual(st.RestartNeeded, want) {
		t.Errorf("status after it: restart needed %q", st.RestartNeeded)
	}
	call(api.RouteRSVP, &rs)
	if rs.Enabled || !strings.Contains(rs.NotRunning, "was read by a reload after hostqosd started with it off; RSVP starts when hostqosd restarts") ||
		!reflect.DeepEqual(rs.RestartNeeded, want[1:]) {
		t.Errorf("RSVP enabled by a reload: %+v", rs)
	}
}
