package main

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/hostqos/hostqos/internal/policy"
)

// TestFieldFlagsHoldPolicyLimits: the flags that the CLI checks against a
// policy limit accept the limit itself and refuse one past it, naming the
// flag and the value, before anything is sent.
func TestFieldFlagsHoldPolicyLimits(t *testing.T) {
	for _, c := range []struct {
		cmd       []string
		flag      string
		ok, wrong string
	}{
		{[]string{"rule", "set", "r"}, "precedence", strconv.Itoa(policy.MaxPrecedence), strconv.Itoa(policy.MaxPrecedence + 1)},
		{[]string{"rule", "set", "r"}, "comm", strings.Repeat("c", policy.MaxCommLen), strings.Repeat("c", policy.MaxCommLen+1)},
		{[]string{"resv", "set", "v"}, "comm", strings.Repeat("c", policy.MaxCommLen), strings.Repeat("c", policy.MaxCommLen+1)},
		{[]string{"rule", "set", "r"}, "max-sessions", strconv.Itoa(policy.MaxSessions), strconv.Itoa(policy.MaxSessions + 1)},
		{[]string{"class", "set", "c"}, "priority", strconv.Itoa(policy.MaxPriority), strconv.Itoa(policy.MaxPriority + 1)},
		{[]string{"link", "set", "eth0"}, "syn-rate", strconv.Itoa(policy.MaxSynRate), strconv.Itoa(policy.MaxSynRate + 1)},
	} {
		f := &fakeClient{}
		if _, errOut, code := runFake(f, append(c.cmd, "--"+c.flag, c.ok)...); code != exitOK || len(f.calls) != 1 {
			t.Errorf("%v --%s %s: exit %d, %q, calls %q; want it sent", c.cmd, c.flag, c.ok, code, errOut, f.calls)
		}
		f = &fakeClient{}
		_, errOut, code := runFake(f, append(c.cmd, "--"+c.flag, c.wrong)...)
		if want := fmt.Sprintf("hostqos: flag --%s = %q: ", c.flag, c.wrong); code != exitUsage || !strings.HasPrefix(errOut, want) || len(f.calls) != 0 {
			t.Errorf("%v --%s %s: exit %d, %q, calls %q; want refused with %q…", c.cmd, c.flag, c.wrong, code, errOut, f.calls, want)
		}
	}
}

// TestFieldFlagsComplete: a flag with a fixed set of values completes them
// (hostqos completion …), and only them.
func TestFieldFlagsComplete(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"rule", "add", "r", "--proto", ""}, "tcp\nudp\nicmp\n"},
		{[]string{"rule", "set", "r", "--action", ""}, "pass\ndrop\nobserve\n"},
		{[]string{"rule", "add", "r", "--quota-period", ""}, "day\nweek\nmonth\n"},
		{[]string{"resv", "add", "v", "--service", ""}, "guaranteed\ncontrolled-load\nbest-effort\n"},
		{[]string{"class", "set", "c", "--user-allowed", ""}, "true\nfalse\n"},
	} {
		out, _, code := runFake(&fakeClient{}, append([]string{"__complete"}, c.args...)...)
		if code != exitOK || !strings.HasPrefix(out, c.want+":4\n") {
			t.Errorf("complete %v: exit %d, %q; want %q and no file completion", c.args, code, out, c.want)
		}
	}
}

// TestFieldFlagsClear: a flag given as "" clears its field (0 too, where
// 0 means none); one not given is not sent.
func TestFieldFlagsClear(t *testing.T) {
	for _, c := range []struct {
		args []string
		call string
	}{
		{[]string{"rule", "set", "r", "--maxbw", "", "--proto", "", "--lport", "", "--max-sessions", ""},
			`Rules.Set r lport=null max_sessions=null maxbw=null proto=null`},
		{[]string{"rule", "set", "r", "--maxbw", "0", "--precedence", "0"}, `Rules.Set r maxbw="0" precedence=0`},
		{[]string{"class", "set", "c", "--minbw", "0", "--maxbw", ""}, `Classes.Set c maxbw=null minbw=null`},
		{[]string{"resv", "set", "v", "--peak", "", "--slack", ""}, `Reservations.Set v peak=null slack_us=null`},
		{[]string{"link", "set", "eth0", "--syn-rate", "0/s", "--reservable", "0"}, `Links.Set eth0 reservable=null syn_rate=null`},
	} {
		f := &fakeClient{}
		if _, errOut, code := runFake(f, c.args...); code != exitOK || len(f.calls) != 1 || f.calls[0] != c.call {
			t.Errorf("%v: exit %d, %q, calls %q; want %q", c.args, code, errOut, f.calls, c.call)
		}
	}
}
