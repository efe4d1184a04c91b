package main

import (
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/cliflag"
	"github.com/hostqos/hostqos/internal/policy"
	"github.com/hostqos/hostqos/internal/units"
)

// explainOptions are those of `hostqos explain`.
type explainOptions struct {
	io     ioStreams
	client func() apiClient
	output cliflag.Output
	// The query's flags (values of the rule flag table's kinds).
	pid, lport, rport *parsed[int]
	exe, proto        *parsed[string]
	local, remote     *parsed[netip.Addr]
	dscp              *parsed[policy.DSCP]
	rules             int
}

func newExplainCmd(f *factory) *cobra.Command {
	o := &explainOptions{io: f.io, client: f.client,
		pid:   intValue(1, 1<<22, "want a process id, e.g. 1234").noClear(),
		exe:   absPath("want an absolute path, e.g. /usr/bin/curl").noClear(),
		proto: enumValue("tcp", "udp", "icmp").noClear(),
		local: addrValue(), remote: addrValue(),
		lport: intValue(1, 65535, "want a port, 1 … 65535").noClear(),
		rport: intValue(1, 65535, "want a port, 1 … 65535").noClear(),
		dscp:  dscpValue().noClear(),
	}
	c := &cobra.Command{
		Use:   "explain [--pid PID | --exe PATH] [--proto P] [--local ADDR] [--lport N] [--remote ADDR] [--rport N]",
		Short: "Say why a flow or an app gets its class, mark and limits, and where its packets were dropped",
		Long: `explain checks the policy the datapath holds, rule by rule in the order the
datapath evaluates them, against a flow (--proto, --local, --lport, --remote,
--rport: this host's side is local; any part left out matches any flow's), an
app (--pid, a process: its executable, command name, user and cgroup as the
datapath records them for a socket it creates; --exe, an executable alone), or
both. For each rule considered it says which selector failed (what the rule
wants, what the flow or process has) or what it depends on, up to the rule that
wins; then what that rule gives (class, priority, DSCP, policer, download limit,
reservation or session limit, and the HTB leaf on each shaped link with its
guarantee and ceiling); then, from the datapath's own flow table and counters,
how the matching flows were really classified (and whether under the policy in
force), their counters, and where their packets were dropped, by whom and why:
a drop rule, a policer, a download limit or ingress budget (counted per flow), a
drop-list entry of the XDP shield, SYN limits, an HTB leaf's full queue (shared
counters: it says by how many flows of the table). Rules that select by the
DSCP a packet arrives with need --dscp. Ordinary users may explain only their
own processes and see only their own flows.`,
		Example: "  hostqos explain --proto tcp --remote 198.18.0.2 --rport 443\n  hostqos explain --pid 1234\n" +
			"  hostqos explain --exe /usr/bin/restic\n  hostqos explain --proto udp --lport 5004 -o json",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return o.run() },
	}
	fs := c.Flags()
	fs.Var(o.pid, "pid", "the app: a process (its identity as the datapath records it)")
	fs.Var(o.exe, "exe", "the app: an executable path (its command name, user and cgroup stay unknown)")
	fs.Var(o.proto, "proto", "the flow's protocol: tcp, udp or icmp")
	fs.Var(o.local, "local", "the flow's local address (this host's)")
	fs.Var(o.remote, "remote", "the flow's remote address")
	fs.Var(o.lport, "lport", "the flow's local port")
	fs.Var(o.rport, "rport", "the flow's remote port")
	fs.Var(o.dscp, "dscp", "the DSCP the flow's packets carry, for rules with dscp_in (e.g. EF, AF41, 46)")
	fs.IntVar(&o.rules, "rules", 20, "list at most this many rules that did not match in a table (0: all; -o json lists all)")
	_ = c.RegisterFlagCompletionFunc("proto", cobra.FixedCompletions(o.proto.choices(), cobra.ShellCompDirectiveNoFileComp))
	cliflag.AddOutput(fs, &o.output)
	return c
}

// addrValue is one IPv4 or IPv6 address (no prefix).
func addrValue() *parsed[netip.Addr] {
	return value("address", func(v string) (netip.Addr, error) {
		a, err := netip.ParseAddr(v)
		if err != nil || a.Zone() != "" {
			return netip.Addr{}, fmt.Errorf("want an IPv4 or IPv6 address, e.g. 198.18.0.2 or 2001:db8::2")
		}
		return a.Unmap(), nil
	}).noClear()
}

// query is the explanation the flags ask for.
func (o *explainOptions) query() (api.ExplainQuery, error) {
	var q api.ExplainQuery
	if o.pid.v != nil {
		q.PID = *o.pid.v
	}
	if o.exe.v != nil {
		q.Exe = *o.exe.v
	}
	if o.pid.v != nil && o.exe.v != nil {
		return q, usagef("give --pid or --exe, not both: a process has its executable")
	}
	if o.proto.v != nil {
		q.Proto = *o.proto.v
	}
	if o.local.v != nil {
		q.Local = *o.local.v
	}
	if o.remote.v != nil {
		q.Remote = *o.remote.v
	}
	if o.lport.v != nil {
		q.LPort = uint16(*o.lport.v)
	}
	if o.rport.v != nil {
		q.RPort = uint16(*o.rport.v)
	}
	if o.dscp.v != nil {
		d := int(*o.dscp.v)
		q.DSCP = &d
	}
	switch {
	case q.PID == 0 && q.Exe == "" && !q.HasFlow():
		return q, usagef("say what to explain: --pid or --exe (an app), and/or --proto, --local, --lport, --remote, --rport (a flow)")
	case q.Local.IsValid() && q.Remote.IsValid() && q.Local.Is4() != q.Remote.Is4():
		return q, usagef("flag --remote = %q: not of the address family of --local %s", q.Remote, q.Local)
	case q.Proto == "icmp" && (q.LPort != 0 || q.RPort != 0):
		return q, usagef("flag --proto = \"icmp\": ICMP has no ports; give --proto tcp or udp with --lport/--rport")
	}
	return q, nil
}

func (o *explainOptions) run() error {
	q, err := o.query()
	if err != nil {
		return err
	}
	cx, cancel := apiCtx()
	defer cancel()
	x, err := o.client().Explain(cx, q)
	if err != nil {
		return err
	}
	if o.output == cliflag.JSON {
		return printJSON(o.io.Out, x)
	}
	printExplanation(o.io.Out, x, o.rules)
	return nil
}

// printExplanation writes an explanation as an answer: what matched and
// why, what it gives, what the datapath did.
func printExplanation(w io.Writer, x api.Explanation, maxNo int) {
	switch {
	case x.Match != nil:
		fmt.Fprintf(w, "%s matched rule %s (%s of %d considered)", x.Subject, x.Match.Rule, ordinal(x.Match.Position), x.RuleCount)
	case x.Service != nil:
		fmt.Fprintf(w, "%s matched no rule (%d considered): it gets the default class", x.Subject, x.RuleCount)
	default:
		fmt.Fprintf(w, "%s: which rule applies depends on each flow (%d rules)", x.Subject, x.RuleCount)
	}
	fmt.Fprintln(w, ":")
	if a := x.App; a != nil {
		fmt.Fprintf(w, "  checked as %s\n", appLine(a))
	}
	printChecks(w, x, maxNo)
	if x.Service != nil {
		printService(w, "  ", *x.Service)
	}
	if len(x.Off) > 0 {
		fmt.Fprintf(w, "not in force now (outside their schedule): %s\n", strings.Join(x.Off, ", "))
	}
	switch {
	case len(x.Flows) == 0 && x.Flow != nil:
		fmt.Fprintln(w, "in the datapath: not in the flow table (no packet yet, or gone)")
	case len(x.Flows) == 0:
		fmt.Fprintln(w, "in the datapath: no such flow in the flow table")
	case len(x.Flows) == 1 && x.Flow != nil:
		printFlow(w, x.Flows[0], false)
	default:
		fmt.Fprintf(w, "in the datapath: %d flow(s)", x.FlowsTotal)
		if x.FlowsTotal > len(x.Flows) {
			fmt.Fprintf(w, ", the busiest %d", len(x.Flows))
		}
		fmt.Fprintln(w, ":")
		for _, f := range x.Flows {
			printFlow(w, f, true)
		}
	}
	if len(x.Flows) == 0 && len(x.Drops) > 0 {
		fmt.Fprintln(w, "where its packets can be dropped:")
		printDrops(w, "  ", x.Drops)
	}
	for _, n := range x.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
}

// appLine describes an app identity: "wget[42], exe /usr/bin/wget, uid
// 1000, cgroup /user.slice".
func appLine(a *api.ExplainApp) string {
	var parts []string
	if a.PID != 0 {
		parts = append(parts, fmt.Sprintf("%s[%d]", a.Comm, a.PID))
	}
	if a.Exe != "" {
		parts = append(parts, "exe "+a.Exe)
	}
	if a.UID != nil {
		parts = append(parts, "uid "+strconv.FormatUint(uint64(*a.UID), 10))
	}
	if a.Cgroup != "" {
		parts = append(parts, "cgroup "+a.Cgroup)
	}
	line := strings.Join(parts, ", ")
	if len(a.Unknown) > 0 {
		line += " (not known: " + strings.Join(a.Unknown, ", ") + ")"
	}
	return line
}

// printChecks lists the rules considered, those that did not match cut to
// maxNo (0: all).
func printChecks(w io.Writer, x api.Explanation, maxNo int) {
	var rows [][]string
	skipped := 0
	no := 0
	for _, c := range x.Rules {
		if c.Result == api.CheckNo {
			if no++; maxNo > 0 && no > maxNo {
				skipped++
				continue
			}
		}
		why := c.Result
		switch c.Result {
		case api.CheckNo:
			why = "no: " + selectorList(c.Failed, true)
		case api.CheckMaybe:
			why = "maybe: depends on " + selectorList(c.Undecided, false)
		}
		if c.State != "" {
			why += " [" + c.State + "]"
		}
		rows = append(rows, []string{"  " + strconv.Itoa(c.Position), c.Rule, why})
	}
	if len(rows) > 0 {
		tableNoHeader(w, rows)
	}
	if skipped+x.RulesOmitted > 0 {
		fmt.Fprintf(w, "  (%d more rules considered did not match; -o json lists them)\n", skipped+x.RulesOmitted)
	}
}

// selectorList words selector checks: "comm wants curl, has wget".
func selectorList(cs []api.SelectorCheck, failed bool) string {
	var parts []string
	for _, c := range cs {
		switch {
		case failed && c.Got != "":
			parts = append(parts, fmt.Sprintf("%s wants %s, has %s", c.Selector, c.Want, c.Got))
		case failed:
			parts = append(parts, fmt.Sprintf("%s wants %s", c.Selector, c.Want))
		default:
			parts = append(parts, fmt.Sprintf("%s (%s)", c.Selector, c.Want))
		}
	}
	return strings.Join(parts, "; ")
}

// tableNoHeader prints rows aligned, without a header.
func tableNoHeader(w io.Writer, rows [][]string) {
	var b strings.Builder
	table(&b, nil, rows)
	s := strings.TrimPrefix(b.String(), "\n")
	fmt.Fprint(w, s)
}

// printService writes what a rule gives.
func printService(w io.Writer, indent string, s api.ExplainService) {
	var parts []string
	switch s.Action {
	case "drop":
		parts = append(parts, "dropped (action drop)")
	case "observe":
		parts = append(parts, "counted only (action observe): no mark, the link's default leaf")
	}
	if s.Class != "" && s.Action != "drop" {
		parts = append(parts, fmt.Sprintf("class %s (priority %d)", s.Class, s.Priority))
	}
	if s.DSCP != nil {
		parts = append(parts, "DSCP "+policy.DSCP(*s.DSCP).String())
	} else if s.Action == "pass" {
		parts = append(parts, "DSCP left as sent")
	}
	if s.Police != nil {
		parts = append(parts, fmt.Sprintf("policed at %s (bucket %d bytes)", units.ExactRate(s.Police.Rate), s.Police.Burst))
	}
	if s.MaxBWIn > 0 {
		parts = append(parts, "download limit "+units.ExactRate(s.MaxBWIn))
	}
	if s.State != "" {
		parts = append(parts, "rule "+s.State)
	}
	who := "rule " + s.Rule
	if s.Rule == "" {
		who = "no rule"
	}
	fmt.Fprintf(w, "%s%s gives: %s\n", indent, who, strings.Join(parts, ", "))
	for _, l := range s.Leaves {
		fmt.Fprintf(w, "%s  link %s: HTB leaf %s (%s), rate %s, ceil %s; its queue: %d drops, %s queued, shared by %d flow(s)\n",
			indent, l.Link, l.ClassID, l.Label, humanRate(float64(l.Rate)), humanRate(float64(l.Ceil)), l.Drops, humanBytes(uint64(l.Backlog)), l.Flows)
	}
	if ss := s.Sessions; ss != nil {
		what := "session limit"
		if ss.Reservation != "" {
			what = fmt.Sprintf("reservation %s (%s, rate %s, burst %d bytes)", ss.Reservation, ss.Service, units.ExactRate(ss.Rate), ss.Burst)
		}
		limit := "any"
		if ss.MaxSessions > 0 {
			limit = strconv.Itoa(ss.MaxSessions)
		}
		fmt.Fprintf(w, "%s  %s, admitted: %d of %s sessions now, %d connects and %d sends refused; %d packets conformant, %d not (not dropped: demoted or shaped), %d oversize\n",
			indent, what, ss.Sessions, limit, ss.RefusedConnects, ss.RefusedSends, ss.ConformantPackets, ss.NonConformantPackets, ss.OversizePackets)
	}
}

// printFlow writes one flow of the flow table.
func printFlow(w io.Writer, f api.FlowExplanation, many bool) {
	indent := ""
	if many {
		app := "no process"
		if f.PID != 0 {
			app = fmt.Sprintf("%s[%d]", f.Comm, f.PID)
		}
		rule := ruleOrNone(f.Rule)
		if f.Position > 0 {
			rule += " (" + ordinal(f.Position) + ")"
		}
		if !f.Certain {
			rule += ", not certain"
		}
		fmt.Fprintf(w, "  %s of %s: the policy gives it %s\n", f.ExplainFlowKey, app, rule)
		indent = "    "
	}
	where := "in the datapath"
	if many {
		where = "the datapath"
	}
	k := f.Kernel
	state := "under the policy in force"
	if !k.Current {
		state = "under an earlier policy"
	}
	agree := ""
	if k.Current && !k.Agrees {
		agree = ", not the rule the policy gives it now"
	}
	fmt.Fprintf(w, "%s%s: classified under %s (%s%s); out %d packets %s, %d dropped; in %d packets %s, %d dropped; age %.0fs, idle %.0fs\n",
		indent, where, ruleOrNone(k.Rule), state, agree, k.Out.Packets, humanBytes(k.Out.Bytes), k.Out.Drops, k.In.Packets, humanBytes(k.In.Bytes), k.In.Drops, k.AgeSec, k.IdleSec)
	if many {
		printService(w, indent, f.Service)
	}
	if len(f.Drops) > 0 {
		fmt.Fprintf(w, "%swhere its packets can be dropped:\n", indent)
		printDrops(w, indent+"  ", f.Drops)
	}
	for _, n := range f.Notes {
		fmt.Fprintf(w, "%snote: %s\n", indent, n)
	}
}

func ruleOrNone(r string) string {
	if r == "" {
		return "no rule"
	}
	return "rule " + r
}

// printDrops writes drop places: "policer (rule cap): 30 of this flow's
// packets — why".
func printDrops(w io.Writer, indent string, ds []api.ExplainDrop) {
	for _, d := range ds {
		n := fmt.Sprintf("%d of this flow's packets", d.Packets)
		if d.Scope == api.ScopeShared {
			n = fmt.Sprintf("%d packets", d.Packets)
			if d.SharedBy > 0 {
				n += fmt.Sprintf(", a counter shared by %d flow(s)", d.SharedBy)
			} else {
				n += ", a shared counter"
			}
		}
		fmt.Fprintf(w, "%s%s (%s): %s — %s\n", indent, d.Cause, d.By, n, d.Why)
	}
}

// ordinal writes n as "1st", "2nd", "3rd", "4th", ….
func ordinal(n int) string {
	suffix := "th"
	switch {
	case n%100 >= 11 && n%100 <= 13:
	case n%10 == 1:
		suffix = "st"
	case n%10 == 2:
		suffix = "nd"
	case n%10 == 3:
		suffix = "rd"
	}
	return strconv.Itoa(n) + suffix
}
