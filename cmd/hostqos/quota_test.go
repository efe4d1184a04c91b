package main

import (
	"strings"
	"testing"
	"time"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/policy"
)

// TestRuleQuotaScheduleOutput: rule list names a rule's quota and schedule
// in LIMITS; rule show adds usage, state and the next reset and switch;
// the flags become the API's fields, checked before sending.
func TestRuleQuotaScheduleOutput(t *testing.T) {
	r := policy.NewRule("dl")
	r.Exe, r.Quota, r.QuotaAction, r.Schedule, r.TimeZone = "/usr/bin/wget", 5<<20, "limit 1mbit", "Mon-Fri 09:00-18:00", "UTC"
	reached := time.Date(2026, 11, 22, 19, 32, 22, 0, time.UTC)
	next := time.Date(2026, 11, 23, 9, 0, 0, 0, time.UTC)
	ri := api.RuleInfo{Rule: r, Source: "api",
		Quota: &api.QuotaStatus{Quota: 5 << 20, Used: 6 << 20, Period: "day", Direction: "out", Action: "limit 1mbit", Reached: true, ReachedAt: &reached,
			NextReset: time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC)},
		Schedule: &api.ScheduleStatus{Active: false, NextChange: &next}}
	c := &fakeClient{rules: []api.RuleInfo{ri}}
	out, _, code := runFake(c, "rule", "list")
	if code != 0 || !strings.Contains(out, "quota 5MiB/day → limit 1mbit") || !strings.Contains(out, "schedule Mon-Fri 09:00-18:00 (off now)") {
		t.Errorf("rule list:\n%s", out)
	}
	out, _, code = runFake(c, "rule", "show", "dl")
	if code != 0 || !strings.Contains(out, "quota: 6.00MiB of 5.00MiB per day used (120.0%, out); reached at") ||
		!strings.Contains(out, "limit 1mbit until the reset; next reset") || !strings.Contains(out, "schedule: Mon-Fri 09:00-18:00 UTC; off") {
		t.Errorf("rule show:\n%s", out)
	}

	c = &fakeClient{}
	if _, _, code := runFake(c, "rule", "add", "q", "--comm", "wget", "--quota", "5GiB", "--quota-period", "week", "--quota-reset", "06:30",
		"--quota-action", "limit  2mbit", "--schedule", "Sat-Sun", "--timezone", "Europe/Berlin"); code != 0 {
		t.Fatalf("rule add with quota and schedule: exit %d", code)
	}
	want := `Rules.AddFields q comm="wget" quota="5GiB" quota_action="limit 2mbit" quota_period="week" quota_reset="06:30" schedule="Sat-Sun" timezone="Europe/Berlin"`
	if len(c.calls) != 1 || c.calls[0] != want {
		t.Errorf("calls %q\nwant %q", c.calls, want)
	}
	for _, bad := range [][]string{{"--quota-period", "year"}, {"--quota-reset", "25:00"}, {"--quota-action", "throttle"}, {"--schedule", "Mon 9-10"}, {"--timezone", "Mars/Base"}} {
		c = &fakeClient{}
		if _, errOut, code := runFake(c, append([]string{"rule", "add", "q", "--comm", "wget", "--quota", "1GiB"}, bad...)...); code == 0 || len(c.calls) != 0 || !strings.Contains(errOut, bad[0]) {
			t.Errorf("%v: exit %d, calls %v, stderr %q", bad, code, c.calls, errOut)
		}
	}
}
