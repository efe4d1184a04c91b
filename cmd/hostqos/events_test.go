package main

import (
	"strings"
	"testing"
	"time"

	"github.com/hostqos/hostqos/api"
)

func TestEventsCommand(t *testing.T) {
	uid := uint32(1000)
	c := &fakeClient{events: []api.Event{
		{Seq: 7, Time: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), Kind: "rule.added", Subject: "rule/web", Message: `rule "web" added`},
		{Seq: 8, Time: time.Date(2026, 1, 2, 3, 4, 6, 0, time.UTC), Kind: "run.started", Subject: "run/r1", UID: &uid, Fields: map[string]any{"pid": 42}},
		{Seq: 9, Kind: "rule.removed"},
	}}
	out, errOut, code := runFake(c, "events", "--kind", "rule,run", "--since", "6", "--count", "2")
	if code != exitOK || errOut != "" {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "7  rule.added  rule/web  rule \"web\" added") ||
		!strings.Contains(lines[1], "run.started  run/r1 pid=42 uid=1000") {
		t.Fatalf("output:\n%s", out)
	}
	if want := `Events.Follow {"Since":6,"Kinds":["rule","run"],"NoResume":false}`; c.calls[0] != want {
		t.Errorf("call %q, want %q", c.calls[0], want)
	}
	out, _, code = runFake(c, "events", "-o", "json", "--count", "1")
	if code != exitOK || !strings.HasPrefix(out, `{"seq":7,"time":"2026-01-02T03:04:05Z","kind":"rule.added"`) || strings.Count(out, "\n") != 1 {
		t.Fatalf("json output: %q", out)
	}
	if _, errOut, code := runFake(c, "events", "--count", "-1"); code != exitUsage || !strings.Contains(errOut, "--count") {
		t.Fatalf("negative count: exit %d, %q", code, errOut)
	}
}
