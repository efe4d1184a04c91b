package main

import (
	"strings"
	"testing"

	"github.com/hostqos/hostqos/api"
)

// The conventions every command follows (docs/cli.md "Conventions").

// TestDurationsEverywhere: every duration flag takes Go's and systemd's
// forms and a plain number of seconds, and refuses a bad one naming the
// flag, the value and what to write.
func TestDurationsEverywhere(t *testing.T) {
	for _, c := range []struct {
		args []string
		call string // a call the command makes with the duration read
	}{
		{[]string{"stat", "links", "-i", "1s", "-c", "1"}, "Stats.Get links"},
		{[]string{"stat", "links", "-i", "1", "-c", "1"}, "Stats.Get links"},
		{[]string{"stat", "links", "--interval", "0.5", "-c", "1"}, "Stats.Get links"},
		{[]string{"top", "--interval", "1s"}, "Stats.Get apps"},
		{[]string{"top", "--interval", "2"}, "Stats.Get apps"},
		{[]string{"block", "add", "203.0.113.0/24", "--ttl", "1d"}, `Shield.Block {"prefix":"203.0.113.0/24","ttl_s":86400}`},
		{[]string{"block", "add", "203.0.113.0/24", "--ttl", "2h 30min"}, `Shield.Block {"prefix":"203.0.113.0/24","ttl_s":9000}`},
		{[]string{"protect", "add", "198.51.100.7", "--ttl", "90"}, `Shield.Protect {"addr":"198.51.100.7","ttl_s":90}`},
		{[]string{"stat", "history", "rules", "--step", "5min"}, "History.Get rules  2026-01-02T02:04:05Z 2026-01-02T03:04:05Z 5m0s"},
		{[]string{"stat", "history", "rules", "--since", "1d 2h"}, "History.Get rules  2026-01-01T01:04:05Z 2026-01-02T03:04:05Z 0s"},
	} {
		fc := &fakeClient{stats: map[string]api.Stats{}}
		_, errOut, code := runFake(fc, c.args...)
		if code != exitOK || len(fc.calls) == 0 || fc.calls[0] != c.call {
			t.Errorf("%q: exit %d, %q, calls %q; want %q", c.args, code, errOut, fc.calls, c.call)
		}
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"stat", "links", "-i", "1x"}, `flag --interval = "1x": unknown unit "x"; write e.g. 90s, 500ms`},
		{[]string{"stat", "links", "-i", "100ms"}, `flag --interval = "100ms": want 0 (once) or at least 200ms`},
		{[]string{"top", "--interval", "0.1"}, `flag --interval = "0.1": want at least 200ms`},
		{[]string{"block", "add", "203.0.113.0/24", "--ttl", "-5m"}, `flag --ttl = "-5m": a duration cannot be negative`},
		{[]string{"tool", "udp-send", "--to", "198.18.0.2:7", "--pps", "10", "--duration", "5 parsecs"}, `flag --duration = "5 parsecs": unknown unit "parsecs"`},
		{[]string{"stat", "history", "--step", "500ms"}, `flag --step = "500ms": want a duration of at least 1s`},
	} {
		fc := &fakeClient{}
		_, errOut, code := runFake(fc, c.args...)
		if code == exitOK || len(fc.calls) != 0 || !strings.Contains(errOut, c.want) {
			t.Errorf("%q: exit %d, calls %q, stderr %q; want %q", c.args, code, fc.calls, errOut, c.want)
		}
	}
}
