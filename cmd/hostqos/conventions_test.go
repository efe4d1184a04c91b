package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/policy"
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

// TestExitCodes: one exit code per kind of outcome, the same for every
// command: the daemon's error classes, the CLI's own refusals of the
// command line, a daemon that is not running, an unknown outcome.
func TestExitCodes(t *testing.T) {
	admission := &api.Error{Status: 400, Body: api.ErrorBody{Error: "refused by admission control: 1 problem(s); nothing was changed", Class: api.ErrAdmission,
		Fields: []*policy.FieldError{{Object: `link "eth0"`, Reason: "guarantees 30mbit exceed reservable capacity 16mbit"}}}}
	for _, c := range []struct {
		args []string
		fail error // what the daemon answers
		code exitCode
	}{
		{[]string{"status"}, nil, exitOK},
		{[]string{"rule", "add", "web", "--minbw", "30mbit"}, admission, exitAdmission},
		{[]string{"link", "set", "eth0", "--egress-rate", "0"}, admission, exitAdmission},
		{[]string{"resv", "add", "r", "--service", "guaranteed", "--rate", "1mbit", "--burst", "3000"}, admission, exitAdmission},
		{[]string{"rule", "add", "web", "--class", "gold"}, &api.Error{Status: 400, Body: api.ErrorBody{Error: "invalid policy", Class: api.ErrInvalid}}, exitInvalid},
		{[]string{"rule", "add", "web", "--class", "gold"}, &api.Error{Status: 409}, exitInvalid}, // an older daemon: no class
		{[]string{"rule", "add", "web", "--class", "gold"}, &api.Error{Status: 403, Body: api.ErrorBody{Class: api.ErrForbidden}}, exitForbidden},
		{[]string{"rule", "remove", "web"}, &api.Error{Status: 404}, exitNotFound},
		{[]string{"run", "--", "true"}, &api.Error{Status: 429, Body: api.ErrorBody{Class: api.ErrLimit}}, exitLimit},
		{[]string{"rule", "list"}, &api.Error{Status: 500}, exitFailure},
		{[]string{"status"}, fmt.Errorf("connect to /x.sock: %w", api.ErrDaemonDown), exitNoDaemon},
		{[]string{"rule", "add", "web", "--class", "voice"}, &api.OutcomeUnknownError{Method: "POST", Path: "/v1/rules", Key: "k"}, exitUnknown},
		// The command line, refused before anything is sent.
		{[]string{"rule", "add", "web", "--maxbw", "19mbps"}, nil, exitUsage},
		{[]string{"rule", "add"}, nil, exitUsage},
		{[]string{"rule", "set", "web"}, nil, exitUsage},
		{[]string{"stat", "-i", "1x"}, nil, exitUsage},
		{[]string{"rul", "list"}, nil, exitUsage},
		{[]string{"status", "--bogus"}, nil, exitUsage},
	} {
		fc := &fakeClient{err: c.fail, stats: map[string]api.Stats{}}
		_, errOut, code := runFake(fc, c.args...)
		if code != c.code {
			t.Errorf("%q (daemon: %v): exit %d, want %d; stderr %q", c.args, c.fail, code, c.code, errOut)
		}
		if c.code == exitUsage && len(fc.calls) != 0 {
			t.Errorf("%q: a usage error sent %q", c.args, fc.calls)
		}
	}
	if _, _, code := runFake(&fakeClient{}, "config", "check", "testdata/no-such-file.toml"); code != exitFailure {
		t.Errorf("config check of a missing file: exit %d, want %d", code, exitFailure)
	}
	bad := filepath.Join(t.TempDir(), "bad.toml")
	if err := os.WriteFile(bad, []byte("[[link]]\nname = \"eth0\"\negress_rate = \"19mbps\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := runFake(&fakeClient{}, "config", "check", bad); code != exitInvalid || !strings.Contains(errOut, "19mbps is ambiguous") {
		t.Errorf("config check of an invalid file: exit %d (%q), want %d", code, errOut, exitInvalid)
	}
}

// TestDidYouMean: a mistyped command, subcommand, flag or argument is
// refused with what it most likely meant (exit code 2), the flag's by the
// same function as the config file's keys.
func TestDidYouMean(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"rul", "list"}, `unknown command "rul" for "hostqos"; did you mean rule or run? (see hostqos --help)`},
		{[]string{"rule", "ad", "web"}, `unknown command "ad" for "hostqos rule"; did you mean add? (see hostqos rule --help)`},
		{[]string{"rule", "ad", "web", "--exe", "/usr/bin/curl"}, `unknown command "ad" for "hostqos rule"; did you mean add?`},
		{[]string{"resv", "lst"}, `unknown command "lst" for "hostqos resv"; did you mean list or set?`},
		{[]string{"rsvp", "session", "ad", "x"}, `unknown command "ad" for "hostqos rsvp session"; did you mean add?`},
		{[]string{"rule", "nonsense"}, `unknown command "nonsense" for "hostqos rule"; see hostqos rule --help`},
		{[]string{"rule", "add", "web", "--maxb", "1mbit"}, `unknown flag --maxb for "hostqos rule add"; did you mean --maxbw? (see hostqos rule add --help)`},
		{[]string{"link", "set", "eth0", "--egress", "20mbit"}, `unknown flag --egress for "hostqos link set"; did you mean --egress-rate?`},
		{[]string{"stat", "--intervall", "1s"}, `unknown flag --intervall for "hostqos stat"; did you mean --interval?`},
		{[]string{"status", "--sockett", "/x"}, `did you mean --socket?`},
		{[]string{"stat", "flow"}, `argument "flow": want rules, classes, apps, flows, links; did you mean flows?`},
		{[]string{"status", "now"}, `hostqos status takes no arguments; got "now"`},
	} {
		fc := &fakeClient{}
		_, errOut, code := runFake(fc, c.args...)
		if code != exitUsage || !strings.Contains(errOut, c.want) || len(fc.calls) != 0 {
			t.Errorf("%q: exit %d, calls %q, stderr %q; want %q", c.args, code, fc.calls, errOut, c.want)
		}
	}
	// A group command alone still shows its help.
	if out, _, code := runFake(&fakeClient{}, "rule"); code != exitOK || !strings.Contains(out, "Available Commands") {
		t.Errorf("hostqos rule: exit %d, %q", code, out)
	}
}

// TestReloadNamesRestartNeeded: a reload that changed a setting read only
// at start says which and that a restart applies it, and rsvp list says
// why RSVP is not running.
func TestReloadNamesRestartNeeded(t *testing.T) {
	fc := &fakeClient{status: api.Status{Daemon: api.DaemonStatus{Config: "/etc/hostqos/hostqos.toml"},
		RestartNeeded: []string{"[rsvp] enabled: false in force, true in the config file"}}}
	out, _, code := runFake(fc, "reload")
	want := "reloaded /etc/hostqos/hostqos.toml: 0 rules, 0 classes, 0 links\n" +
		"restart needed: hostqosd reads these settings only when it starts; restart it (systemctl restart hostqosd) to apply them:\n" +
		"  [rsvp] enabled: false in force, true in the config file\n"
	if code != exitOK || out != want {
		t.Errorf("reload: exit %d\n%s\nwant\n%s", code, out, want)
	}
	if out, _, _ := runFake(fc, "status"); !strings.Contains(out, "restart needed: ") {
		t.Errorf("status does not say a restart is needed:\n%s", out)
	}
	var b strings.Builder
	printRSVPStatus(&b, api.RSVPStatus{NotRunning: "[rsvp] enabled = true in /etc/hostqos/hostqos.toml was read by a reload after hostqosd started with it off; RSVP starts when hostqosd restarts",
		RestartNeeded: fc.status.RestartNeeded})
	if !strings.HasPrefix(b.String(), "RSVP is not running: [rsvp] enabled = true in /etc/hostqos/hostqos.toml was read by a reload") ||
		!strings.Contains(b.String(), "restart needed: ") {
		t.Errorf("rsvp list when RSVP is not running:\n%s", b.String())
	}
}

// TestEveryCommandTakesOutput: every command that prints takes -o
// table|json, changing ones and config check included.
func TestEveryCommandTakesOutput(t *testing.T) {
	// These print no output of their own: run and the lab commands show
	// their program's; version is one line.
	skip := map[string]bool{"hostqos run": true, "hostqos demo": true, "hostqos bench": true, "hostqos version": true}
	eachCommand(newRootCmd(newFactory(ioStreams{})), func(c *cobra.Command) {
		path := c.CommandPath()
		if !c.Runnable() || c.Hidden || skip[path] || strings.HasPrefix(path, "hostqos completion") || strings.HasPrefix(path, "hostqos help") {
			return
		}
		fl := c.Flags().Lookup("output")
		if fl == nil {
			fl = c.InheritedFlags().Lookup("output")
		}
		if fl == nil || fl.Shorthand != "o" || fl.Value.Set("json") != nil {
			t.Errorf("%s: no -o table|json", path)
		}
	})
}

// TestChangesPrintJSON: a changing command prints with -o json what it
// did, to what, the fields it sent and the daemon's answer; config check
// its verdict.
func TestChangesPrintJSON(t *testing.T) {
	for _, c := range []struct {
		args []string
		want changeResult
	}{
		{[]string{"rule", "add", "web", "--proto", "tcp", "--maxbw", "10mbit", "--temporary"},
			changeResult{Action: "added", Kind: "rule", Name: "web", Fields: api.Fields{"proto": "tcp", "maxbw": "10mbit"}, Temporary: true}},
		{[]string{"rule", "set", "web", "--maxbw", ""}, changeResult{Action: "changed", Kind: "rule", Name: "web", Fields: api.Fields{"maxbw": nil}}},
		{[]string{"class", "remove", "gold"}, changeResult{Action: "removed", Kind: "class", Name: "gold"}},
		{[]string{"link", "set", "eth0", "--egress-rate", "19mbit", "--force"},
			changeResult{Action: "changed", Kind: "link", Name: "eth0", Fields: api.Fields{"egress_rate": "19mbit"}, Forced: true}},
		{[]string{"reload"}, changeResult{Action: "reloaded", Kind: "config", Name: "/etc/hostqos/hostqos.toml"}},
	} {
		fc := &fakeClient{status: api.Status{Daemon: api.DaemonStatus{Config: "/etc/hostqos/hostqos.toml"}}}
		out, errOut, code := runFake(fc, append(c.args, "-o", "json")...)
		var got changeResult
		if code != exitOK || json.Unmarshal([]byte(out), &got) != nil {
			t.Errorf("%q: exit %d, %q %q", c.args, code, out, errOut)
			continue
		}
		got.Result = nil
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%q -o json: %+v, want %+v", c.args, got, c.want)
		}
	}
	out, _, _ := runFake(&fakeClient{links: []api.LinkStatus{{Link: policy.Link{Name: "eth0", EgressRate: 19e6}}}}, "link", "set", "eth0", "--egress-rate", "19mbit", "-o", "json")
	if !strings.Contains(out, `"result": [`) || !strings.Contains(out, `"egress_rate": "19mbit"`) {
		t.Errorf("link set -o json lacks the link as it is now:\n%s", out)
	}

	dir := t.TempDir()
	good, bad := filepath.Join(dir, "good.toml"), filepath.Join(dir, "bad.toml")
	if err := os.WriteFile(good, []byte("[[link]]\nname = \"eth0\"\negress_rate = \"19mbit\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, []byte("[[link]]\nname = \"eth0\"\negress_rate = \"19mbps\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var r checkResult
	out, _, code := runFake(&fakeClient{}, "config", "check", good, "-o", "json")
	if err := json.Unmarshal([]byte(out), &r); err != nil || code != exitOK || !r.OK || r.Links != 1 || r.File != good {
		t.Errorf("config check -o json of a good file: exit %d, %+v, %v", code, r, err)
	}
	r = checkResult{}
	out, errOut, code := runFake(&fakeClient{}, "config", "check", bad, "-o", "json")
	if err := json.Unmarshal([]byte(out), &r); err != nil || code != exitInvalid || r.OK || len(r.Problems) != 1 || r.Problems[0].Field != "egress_rate" || errOut != "" {
		t.Errorf("config check -o json of a bad file: exit %d, %+v, %v, stderr %q", code, r, err, errOut)
	}
}
