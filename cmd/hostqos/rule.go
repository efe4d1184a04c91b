package main

import (
	"context"
	"errors"
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

// ruleFlags are the selector and property flags of rule add/set.
type ruleFlags struct {
	exe, comm, cgroup, unit, user                 string
	proto, local, remote, lport, rport, dscpIn    string
	class, dscp, maxbw, minbw, action, precedence string
	police, burst                                 string
	sessions                                      sessionFlags
	quota, quotaPeriod, quotaDir, quotaReset      string
	quotaAction, schedule, timezone               string
	maxbwIn                                       string
	temp                                          bool
}

func (f *ruleFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.exe, "exe", "", "app selector: executable path or glob (e.g. /usr/bin/restic, /opt/zoom/*)")
	fl.StringVar(&f.comm, "comm", "", "app selector: process command name (as in ps -o comm, at most 15 bytes)")
	fl.StringVar(&f.cgroup, "cgroup", "", "app selector: cgroup v2 path, e.g. /system.slice/nginx.service (and below)")
	fl.StringVar(&f.unit, "unit", "", "app selector: systemd unit, e.g. nginx.service")
	fl.StringVar(&f.user, "user", "", "app selector: user name or uid owning the process")
	fl.StringVar(&f.proto, "proto", "", "flow selector: tcp, udp or icmp")
	fl.StringVar(&f.local, "local", "", "flow selector: local address or CIDR (IPv4 or IPv6)")
	fl.StringVar(&f.remote, "remote", "", "flow selector: remote address or CIDR (IPv4 or IPv6)")
	fl.StringVar(&f.lport, "lport", "", "flow selector: local port or range N-M (needs --proto tcp|udp)")
	fl.StringVar(&f.rport, "rport", "", "flow selector: remote port or range N-M (needs --proto tcp|udp)")
	fl.StringVar(&f.dscpIn, "dscp-in", "", "flow selector: DSCP the packet already carries")
	fl.StringVar(&f.class, "class", "", "property: service class (default: default)")
	fl.StringVar(&f.dscp, "dscp", "", "property: DSCP to mark, overriding the class's (name or 0-63)")
	fl.StringVar(&f.maxbw, "maxbw", "", "property: ceiling for all matching traffic together, e.g. 20mbit")
	fl.StringVar(&f.minbw, "minbw", "", "property: guaranteed rate (admission-controlled), e.g. 5mbit")
	fl.StringVar(&f.police, "police", "", "property: drop what exceeds this rate at once, no queueing (all matching traffic together), e.g. 5mbit")
	fl.StringVar(&f.burst, "burst", "", "property: --police bucket depth in bytes, e.g. 64kb (default: 10 ms at the rate, at least 64kb)")
	fl.StringVar(&f.maxbwIn, "maxbw-in", "", "property: download limit for all matching flows together (what the apps receive), e.g. 50mbit: TCP senders are slowed by the receive window (on a LAN by paced ACKs), excess UDP is dropped")
	fl.StringVar(&f.action, "action", "", "property: pass (default), drop, or observe (count only)")
	fl.StringVar(&f.precedence, "precedence", "", "evaluation order: higher first (0-65535); ties go to the most specific rule")
	fl.StringVar(&f.quota, "quota", "", "quota: volume per period, e.g. 5gb (see --quota-action)")
	fl.StringVar(&f.quotaPeriod, "quota-period", "", "quota: day (default), week (from Monday) or month (from the 1st)")
	fl.StringVar(&f.quotaDir, "quota-direction", "", "quota: which traffic counts: out (sent, default), in (received) or both")
	fl.StringVar(&f.quotaReset, "quota-reset", "", "quota: time of day a period starts, HH:MM (default 00:00, in --timezone)")
	fl.StringVar(&f.quotaAction, "quota-action", "", "quota: when used up, until the reset: event (default), block, or \"limit RATE\" (e.g. \"limit 1mbit\")")
	fl.StringVar(&f.schedule, "schedule", "", "active only in these windows, e.g. \"Mon-Fri 09:00-18:00, Sat 10:00-14:00\" (default: always)")
	fl.StringVar(&f.timezone, "timezone", "", "IANA time zone of --schedule and --quota-reset, e.g. Europe/Berlin (default: the host's)")
	fl.BoolVar(&f.temp, "temporary", false, "do not persist: forget the rule when the daemon stops (a crash keeps it)")
	f.sessions.register(cmd)
}

// patch checks every flag that was given and turns it into its JSON field
// (rates, DSCPs and ports in canonical form); "" clears a field on rule set.
func (f *ruleFlags) patch(cmd *cobra.Command) (api.Fields, error) {
	p := api.Fields{}
	var firstErr error
	field := func(flag, name, v string, conv func(string) (any, error)) {
		if firstErr != nil || !cmd.Flags().Changed(flag) {
			return
		}
		if v == "" {
			p[name] = nil
			return
		}
		x, err := conv(v)
		if err != nil {
			firstErr = fmt.Errorf("flag --%s = %q: %w", flag, v, err)
			return
		}
		p[name] = x
	}
	field("exe", "exe", f.exe, check(func(v string) bool { return strings.HasPrefix(v, "/") }, "want an absolute path or glob, e.g. /usr/bin/curl"))
	field("comm", "comm", f.comm, check(func(v string) bool { return len(v) <= 15 }, "command names have at most 15 bytes (the kernel truncates them)"))
	field("cgroup", "cgroup", f.cgroup, check(func(v string) bool { return strings.HasPrefix(v, "/") }, "want a path below the cgroup2 root starting with /, e.g. /system.slice/nginx.service"))
	field("unit", "unit", f.unit, asIs)
	field("user", "user", f.user, asIs)
	field("proto", "proto", f.proto, oneOf("tcp", "udp", "icmp"))
	field("local", "local", f.local, parsed(policy.ParsePrefix))
	field("remote", "remote", f.remote, parsed(policy.ParsePrefix))
	field("lport", "lport", f.lport, parsed(policy.ParsePortRange))
	field("rport", "rport", f.rport, parsed(policy.ParsePortRange))
	field("dscp-in", "dscp_in", f.dscpIn, parsed(policy.ParseDSCP))
	field("class", "class", f.class, asIs)
	field("dscp", "dscp", f.dscp, parsed(policy.ParseDSCP))
	field("maxbw", "maxbw", f.maxbw, parsed(policy.ParseRate))
	field("minbw", "minbw", f.minbw, parsed(policy.ParseRate))
	field("police", "police", f.police, parsed(policy.ParseRate))
	field("burst", "burst", f.burst, parsed(policy.ParseSize))
	field("maxbw-in", "maxbw_in", f.maxbwIn, parsed(policy.ParseRate))
	field("action", "action", f.action, oneOf("pass", "drop", "observe"))
	field("quota", "quota", f.quota, parsed(policy.ParseSize))
	field("quota-period", "quota_period", f.quotaPeriod, oneOf(policy.PeriodDay, policy.PeriodWeek, policy.PeriodMonth))
	field("quota-direction", "quota_direction", f.quotaDir, asIs) // the daemon says why in and both are refused
	field("quota-reset", "quota_reset", f.quotaReset, check(func(v string) bool { _, err := policy.ParseClock(v, false); return err == nil }, "want a time of day HH:MM, e.g. 06:00"))
	field("quota-action", "quota_action", f.quotaAction, parsed(func(v string) (string, error) {
		a, err := policy.ParseQuotaAction(v)
		return a.String(), err
	}))
	field("schedule", "schedule", f.schedule, parsed(func(v string) (string, error) { _, err := policy.ParseSchedule(v); return v, err }))
	field("timezone", "timezone", f.timezone, parsed(func(v string) (string, error) { _, err := policy.Location(v); return v, err }))
	field("precedence", "precedence", f.precedence, func(v string) (any, error) {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > 65535 {
			return nil, fmt.Errorf("want 0 … 65535 (higher is evaluated first)")
		}
		return n, nil
	})
	if firstErr == nil {
		firstErr = f.sessions.patch(cmd, p)
	}
	if firstErr != nil {
		return nil, firstErr
	}
	return p, nil
}

// Flag converters: the value to send, or why the flag is wrong.
func asIs(v string) (any, error) { return v, nil }

func parsed[T any](parse func(string) (T, error)) func(string) (any, error) {
	return func(v string) (any, error) { return parse(v) }
}

func check(ok func(string) bool, want string) func(string) (any, error) {
	return func(v string) (any, error) {
		if !ok(v) {
			return nil, errors.New(want)
		}
		return v, nil
	}
}

func oneOf(choices ...string) func(string) (any, error) {
	return check(func(v string) bool { return slices.Contains(choices, v) }, "want "+strings.Join(choices, ", "))
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
		printRules)
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

// ruleChangeOptions are those of rule add and rule set.
type ruleChangeOptions struct {
	io     ioStreams
	client func() apiClient
	flags  ruleFlags
	name   string
}

func newRuleAddCmd(f *factory) *cobra.Command {
	o := &ruleChangeOptions{io: f.io, client: f.client}
	add := &cobra.Command{
		Use:   "add NAME [selectors] [properties]",
		Short: "Add a rule",
		Example: `  hostqos rule add zoom --exe /opt/zoom/zoom --class voice
  hostqos rule add backup --exe /usr/bin/restic --maxbw 20mbit
  hostqos rule add steam --exe '/opt/steam/*' --maxbw-in 50mbit
  hostqos rule add https --proto tcp --rport 443 --minbw 5mbit
  hostqos rule add stream --proto udp --rport 9000 --police 20mbit --burst 32kb
  hostqos rule add block-dns --proto udp --rport 53 --remote 198.18.0.0/15 --action drop`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.name = args[0]
			p, err := o.flags.patch(cmd)
			if err != nil {
				return err
			}
			return sendChange(o.io.Out, o.client().Rules(), "rule", o.name, true, o.flags.temp, p)
		},
	}
	o.flags.register(add)
	return add
}

func newRuleSetCmd(f *factory) *cobra.Command {
	o := &ruleChangeOptions{io: f.io, client: f.client}
	set := &cobra.Command{
		Use:     "set NAME [selectors] [properties]",
		Short:   "Change a rule; only the flags given change (give a flag as \"\" to clear it)",
		Example: "  hostqos rule set backup --maxbw 50mbit\n  hostqos rule set backup --maxbw \"\"",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.name = args[0]
			p, err := o.flags.patch(cmd)
			if err != nil {
				return err
			}
			if len(p) == 0 {
				return fmt.Errorf("nothing to change: give at least one selector or property flag (see hostqos rule set --help)")
			}
			return sendChange(o.io.Out, o.client().Rules(), "rule", o.name, false, o.flags.temp, p)
		},
	}
	o.flags.register(set)
	return set
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
