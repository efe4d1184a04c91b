package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/hostqos/hostqos/api"
)

// TestWebCommand: hostqos web prints the login URL the daemon made (and
// opens no browser without a display); -o json prints the login.
func TestWebCommand(t *testing.T) {
	t.Setenv("DISPLAY", "")
	t.Setenv("WAYLAND_DISPLAY", "")
	c := &fakeClient{}
	out, errOut, code := runFake(c, "web")
	if code != 0 || !strings.HasPrefix(out, "http://127.0.0.1:9465/?token=0123\n") || !strings.Contains(out, "keep it secret") {
		t.Errorf("hostqos web: exit %d\n%s%s", code, out, errOut)
	}
	if len(c.calls) != 1 || c.calls[0] != "WebToken" {
		t.Errorf("calls: %v", c.calls)
	}
	out, errOut, code = runFake(&fakeClient{}, "web", "-o", "json")
	var l api.WebLogin
	if code != 0 || json.Unmarshal([]byte(out), &l) != nil || l.Token != "0123" || l.Base != "http://127.0.0.1:9465/" {
		t.Errorf("hostqos web -o json: exit %d\n%s%s", code, out, errOut)
	}
}
