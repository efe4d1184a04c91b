package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/policy"
)

// ruleFlags is the flag table of rule add and rule set: selectors and
// properties.
func ruleFlags() fieldFlags {
	return slices.Concat(selectorFlags("app", "flow"), fieldFlags{
		{"dscp-in", "dscp_in", "flow selector: DSCP the packet already carries", dscpValue()},
		{"class", "class", "property: service class (default: default)", textValue("class")},
		{"dscp", "dscp", "property: DSCP to mark, overriding the class's (name or 0-63)", dscpValue()},
		{"maxbw", "maxbw", "property: ceiling for all matching traffic together, e.g. 20mbit", rateValue()},
		{"minbw", "minbw", "property: guaranteed rate (admission-controlled), e.g. 5mbit", rateValue()},
		{"police", "police", "property: drop what exceeds this rate at once, no queueing (all matching traffic together), e.g. 5mbit", rateValue()},
		{"burst", "burst", "property: --police bucket depth in bytes, e.g. 64KiB (default: 10 ms at the rate, at least 64KiB)", sizeValue()},
		{"maxbw-in", "maxbw_in", "property: download limit for all matching flows together (what the apps receive), e.g. 50mbit: TCP senders are slowed by the receive window (on a LAN by paced ACKs), excess UDP is dropped", rateValue()},
		{"action", "action", "property: pass (default), drop, or observe (count only)",
			enumValue(string(policy.ActionPass), string(policy.ActionDrop), string(policy.ActionObserve))},
		{"precedence", "precedence", fmt.Sprintf("evaluation order: higher first (0-%d); ties go to the most specific rule", policy.MaxPrecedence),
			intValue(0, policy.MaxPrecedence, fmt.Sprintf("want 0 … %d (higher is evaluated first)", policy.MaxPrecedence))},
		{"quota", "quota", "quota: volume per period, e.g. 5GiB (see --quota-action)", sizeValue()},
		{"quota-period", "quota_period", "quota: day (default), week (from Monday) or month (from the 1st)",
			enumValue(policy.PeriodDay, policy.PeriodWeek, policy.PeriodMonth)},
		// Any direction is sent: the daemon says why in and both are refused.
		{"quota-direction", "quota_direction", "quota: which traffic counts: out (sent, default), in (received) or both", textValue("out|in|both")},
		{"quota-reset", "quota_reset", "quota: time of day a period starts, HH:MM (default 00:00, in --timezone)",
			checkedValue("HH:MM", func(v string) bool { _, err := policy.ParseClock(v, false); return err == nil }, "want a time of day HH:MM, e.g. 06:00")},
		{"quota-action", "quota_action", "quota: when used up, until the reset: event (default), block, or \"limit RATE\" (e.g. \"limit 1mbit\")",
			value("action", func(v string) (string, error) { a, err := policy.ParseQuotaAction(v); return a.String(), err })},
		{"schedule", "schedule", "active only in these windows, e.g. \"Mon-Fri 09:00-18:00, Sat 10:00-14:00\" (default: always)",
			checkedBy("windows", policy.ParseSchedule)},
		{"timezone", "timezone", "IANA time zone of --schedule and --quota-reset, e.g. Europe/Berlin (default: the host's)",
			checkedBy("zone", policy.Location)},
	}, sessionFlags())
}

func newRuleCmd(f *factory) *cobra.Command {
	rule := &cobra.Command{
		Use:   "rule",
		Short: "Manage rules: selectors (app and flow attributes) → properties (class, DSCP, limits, action)",
		Long: `A rule selects traffic by app (executable, command name, cgroup, systemd unit,
user) and/or by flow (protocol, local/remote address or CIDR, ports, incoming
DSCP) and gives it properties: a class, a DSCP mark, a ceiling (maxbw, which
queues the excess), a guarantee (minbw), a policer (police, which drops the
excess at once) or an action (drop, observe). All selectors given must match.
Rules are evaluated by --precedence (higher first), then the most specific rule
first; the first match wins. Apps are recognised when they open a socket, so
programs started later and static binaries are covered, UDP included.`,
	}
	rm := removeCmd(f, "rule", "Remove a rule", func(ctx context.Context, c apiClient, name string) error {
		return c.Rules().Remove(ctx, name)
	})
	list := getCmd(f, "list", "List rules in evaluation order", cobra.NoArgs,
		func(ctx context.Context, c apiClient, _ []string) ([]api.RuleInfo, error) { return c.Rules().List(ctx) },
		orHint(noRuleHint, printRules))
	show := getCmd(f, "show NAME", "Show one rule and what its selectors resolve to", cobra.ExactArgs(1),
		func(ctx context.Context, c apiClient, a []string) (api.RuleInfo, error) {
			return c.Rules().Get(ctx, a[0])
		},
		func(w io.Writer, ri api.RuleInfo) {
			printRules(w, []api.RuleInfo{ri})
			for _, r := range ri.Resolved {
				fmt.Fprintln(w, "resolved:", r)
			}
			printQuotaSchedule(w, ri)
		})
	rule.AddCommand(newRuleAddCmd(f), newRuleSetCmd(f), rm, list, show)
	return rule
}

// ruleChange is rule add (add) or rule set.
func ruleChange(add bool) objectChange {
	c := objectChange{kind: "rule", add: add, table: ruleFlags, temp: "rule",
		to: func(c apiClient) changeAPI { return c.Rules() }}
	if !add {
		c.check = someField("nothing to change: give at least one selector or property flag (see hostqos rule set --help)")
	}
	return c
}

func newRuleAddCmd(f *factory) *cobra.Command {
	return changeCmd(f, &cobra.Command{
		Use:   "add NAME [selectors] [properties]",
		Short: "Add a rule",
		Example: `  hostqos rule add zoom --exe /opt/zoom/zoom --class voice
  hostqos rule add backup --exe /usr/bin/restic --maxbw 20mbit
  hostqos rule add steam --exe '/opt/steam/*' --maxbw-in 50mbit
  hostqos rule add https --proto tcp --rport 443 --minbw 5mbit
  hostqos rule add stream --proto udp --rport 9000 --police 20mbit --burst 32KiB
  hostqos rule add block-dns --proto udp --rport 53 --remote 198.18.0.0/15 --action drop`,
	}, ruleChange(true))
}

func newRuleSetCmd(f *factory) *cobra.Command {
	return changeCmd(f, &cobra.Command{
		Use:     "set NAME [selectors] [properties]",
		Short:   "Change a rule; only the flags given change (give a flag as \"\" to clear it)",
		Example: "  hostqos rule set backup --maxbw 50mbit\n  hostqos rule set backup --maxbw \"\"",
	}, ruleChange(false))
}

// selectors renders a rule's selectors compactly.
func selectors(r policy.Rule) string {
	var s []string
	add := func(k, v string) {
		if v != "" {
			s = append(s, k+"="+v)
		}
	}
	add("exe", r.Exe)
	add("comm", r.Comm)
	add("cgroup", r.Cgroup)
	add("unit", r.Unit)
	add("user", r.User)
	add("container", r.Container)
	add("image", r.Image)
	add("container_label", r.ContainerLabel)
	add("proto", r.Proto)
	if r.Local.IsValid() {
		add("local", r.Local.String())
	}
	if r.Remote.IsValid() {
		add("remote", r.Remote.String())
	}
	if r.LPort != (policy.PortRange{}) {
		add("lport", r.LPort.String())
	}
	if r.RPort != (policy.PortRange{}) {
		add("rport", r.RPort.String())
	}
	if r.DSCPIn != policy.NoDSCP {
		add("dscp-in", r.DSCPIn.String())
	}
	return strings.Join(s, " ")
}

func printRules(w io.Writer, rs []api.RuleInfo) {
	var rows [][]string
	for _, ri := range rs {
		r := ri.Rule
		dscp := "class"
		if r.DSCP != policy.NoDSCP {
			dscp = r.DSCP.String()
		}
		limits := []string{}
		if r.MinBW > 0 {
			limits = append(limits, "min "+r.MinBW.String())
		}
		if r.MaxBW > 0 {
			limits = append(limits, "max "+r.MaxBW.String())
		}
		if r.Police > 0 {
			limits = append(limits, "police "+r.Police.String()+"/"+r.PoliceBurst().String())
		}
		if r.MaxBWIn > 0 {
			limits = append(limits, "in "+r.MaxBWIn.String())
		}
		if q, ok := r.QuotaOf(); ok {
			limits = append(limits, fmt.Sprintf("quota %s/%s → %s", policy.Size(q.Size), q.Period, q.Action))
		}
		if r.Schedule != "" {
			state := ""
			if ri.Schedule != nil && !ri.Schedule.Active {
				state = " (off now)"
			}
			limits = append(limits, "schedule "+r.Schedule+state)
		}
		src := ri.Source
		prec := strconv.Itoa(r.Precedence)
		if r.UserRun {
			prec, src = "user", "run (user, after admin rules)"
		}
		rows = append(rows, []string{r.Name, prec, selectors(r), string(r.EffectiveAction()), r.EffectiveClass(), dscp,
			orDash(strings.Join(limits, ", ")), src})
	}
	table(w, []string{"RULE", "PREC", "SELECTORS", "ACTION", "CLASS", "DSCP", "LIMITS", "SOURCE"}, rows)
}

// printQuotaSchedule adds a rule's quota usage and schedule state to rule
// show.
func printQuotaSchedule(w io.Writer, ri api.RuleInfo) {
	if q := ri.Quota; q != nil {
		state := "not reached"
		if q.Reached {
			state = "reached"
			if q.ReachedAt != nil {
				state += " at " + q.ReachedAt.Local().Format(time.RFC3339)
			}
			state += ", " + q.Action + " until the reset"
		}
		pct := 0.0
		if q.Quota > 0 {
			pct = 100 * float64(q.Used) / float64(q.Quota)
		}
		fmt.Fprintf(w, "quota: %s of %s per %s used (%.1f%%, %s); %s; next reset %s\n",
			humanBytes(q.Used), humanBytes(uint64(q.Quota)), q.Period, pct, q.Direction, state, q.NextReset.Local().Format(time.RFC3339))
	}
	if s := ri.Schedule; s != nil {
		state := "off (outside its windows: the rule does not match now)"
		if s.Active {
			state = "on"
		}
		next := "never"
		if s.NextChange != nil {
			next = s.NextChange.Local().Format(time.RFC3339)
		}
		fmt.Fprintf(w, "schedule: %s %s; %s; next switch %s\n", ri.Rule.Schedule, orDash(ri.Rule.TimeZone), state, next)
	}
}
