package main

import (
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/cliflag"
)

// statOptions are those of `hostqos stat`.
type statOptions struct {
	io       ioStreams
	client   func() apiClient
	iface    func() string // the interface the empty views suggest
	output   cliflag.Output
	kind     string
	interval time.Duration
	count    int
	limit    int
}

func newStatCmd(f *factory) *cobra.Command {
	o := &statOptions{io: f.io, client: f.client, iface: f.iface}
	st := &cobra.Command{
		Use:   "stat [rules|classes|apps|flows|links]",
		Short: "Show live counters and rates per rule, class, app, flow or link",
		Long: `stat shows what each rule, class, app (process) or flow actually got: bytes,
packets, drops and the current rate. Rates are over the daemon's last sample
(1 s) for rules, classes and links, and since the previous reading of the flow
table for flows and apps. Byte counts are frames as the link carries them (IP packet plus
link-layer header). Rules, apps and flows show both directions side by side:
OUT is what was sent (drops: drop rules and policers), IN what was received
(drops: UDP beyond a download limit, maxbw_in); -o json has the received side
under "in". Classes show their egress queues on each link (OUT) beside what
the class received on all managed links (IN: its rules' IN, and for class
default what no rule matched; the receive side is counted per rule, not per
link). Links show the interface's own counters, every frame it carried. With
-i it repeats every DURATION (1s, 500ms, 2m; a plain number is seconds) until
interrupted.
Ordinary users see only their own processes' apps and flows.`,
		Example:   "  hostqos stat\n  hostqos stat flows -i 1\n  hostqos stat apps -o json",
		Args:      cobra.MaximumNArgs(1),
		ValidArgs: []string{api.StatRules, api.StatClasses, api.StatApps, api.StatFlows, api.StatLinks},
		RunE: func(cmd *cobra.Command, args []string) error {
			o.kind = api.StatRules
			if len(args) == 1 {
				o.kind = args[0]
			}
			return o.run()
		},
	}
	st.AddCommand(newStatHistoryCmd(f))
	cliflag.AddOutput(st.Flags(), &o.output)
	durationFlag(st.Flags(), &o.interval, "interval", "i", 0, "repeat every DURATION, e.g. 1s or 500ms (a plain number is seconds; 0: once)").
		within(minRefresh, 0, "want 0 (once) or at least 200ms, e.g. 1s").orZero()
	st.Flags().IntVarP(&o.count, "count", "c", 0, "with -i: stop after this many reports (0: until interrupted)")
	st.Flags().IntVar(&o.limit, "limit", 50, "show at most this many rows of flows/apps in a table (0: all)")
	return st
}

func (o *statOptions) run() error {
	if kinds := []string{api.StatRules, api.StatClasses, api.StatApps, api.StatFlows, api.StatLinks}; !slices.Contains(kinds, o.kind) {
		return badArgument(o.kind, kinds)
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, os.Interrupt)
	defer signal.Stop(stop)
	w := o.io.Out
	cl := o.client()
	for n := 1; ; n++ {
		c, cancel := apiCtx()
		s, err := cl.Stats().Get(c, o.kind)
		cancel()
		if err != nil {
			return err
		}
		if o.output == cliflag.JSON {
			if err := printJSON(w, s); err != nil {
				return err
			}
		} else {
			if o.interval > 0 {
				fmt.Fprintf(w, "--- %s %s\n", s.Time.Format("15:04:05"), o.kind)
			}
			printStats(w, o.kind, s, o.limit, statsHint(cl, o.iface(), o.kind, s))
		}
		if o.interval == 0 || (o.count > 0 && n >= o.count) {
			return nil
		}
		select {
		case <-stop:
			return nil
		case <-time.After(o.interval):
		}
	}
}

// inOutCols are the sent and received sides of a counter, side by side.
func inOutCols(out, in api.Counter) []string {
	return []string{humanRate(out.RateBps), humanRate(in.RateBps), humanBytes(out.Bytes), humanBytes(in.Bytes),
		strconv.FormatUint(out.Packets, 10), strconv.FormatUint(in.Packets, 10),
		strconv.FormatUint(out.Drops, 10), strconv.FormatUint(in.Drops, 10)}
}

// inOutHead is the header of inOutCols.
func inOutHead() []string {
	return []string{"OUT RATE", "IN RATE", "OUT BYTES", "IN BYTES", "OUT PKTS", "IN PKTS", "OUT DROPS", "IN DROPS"}
}

// statsHint says why a stat view shows no traffic (docs/cli.md, "Empty
// views"): it asks the daemon for the managed links only when the view
// has no row, or no row that counted anything.
func statsHint(c apiClient, iface, kind string, s api.Stats) string {
	var counters []api.Counter
	switch kind {
	case api.StatRules:
		for _, r := range s.Rules {
			counters = append(counters, r.Counter, r.In)
		}
	case api.StatClasses:
		for _, c := range s.Classes {
			counters = append(counters, c.Counter, c.In)
		}
	case api.StatLinks:
		for _, l := range s.Links {
			counters = append(counters, l.Counter, l.In)
		}
	case api.StatApps:
		for _, a := range s.Apps {
			counters = append(counters, a.Counter, a.In)
		}
	case api.StatFlows:
		for _, f := range s.Flows {
			counters = append(counters, f.Counter, f.In)
		}
	}
	for _, c := range counters {
		if c.Bytes != 0 || c.Packets != 0 || c.Drops != 0 {
			return ""
		}
	}
	return trafficHint(c, iface, func(ls []api.LinkStatus) string {
		switch kind {
		case api.StatRules:
			if len(s.Rules) == 0 {
				return noRuleHint
			}
		case api.StatApps, api.StatFlows:
			if len(counters) == 0 {
				return noFlowsHint(ls)
			}
		}
		return ""
	})
}

// printStats prints a stat view; hint, when set, says why it shows no
// traffic: alone when the view has no row, else under the table.
func printStats(w io.Writer, kind string, s api.Stats, limit int, hint string) {
	empty := map[string]bool{api.StatRules: len(s.Rules) == 0, api.StatClasses: len(s.Classes) == 0,
		api.StatLinks: len(s.Links) == 0, api.StatApps: len(s.Apps) == 0, api.StatFlows: len(s.Flows) == 0}[kind]
	if empty && hint != "" {
		fmt.Fprintln(w, hint)
		return
	}
	defer printHint(w, hint)
	var rows [][]string
	switch kind {
	case api.StatRules:
		for _, r := range s.Rules {
			rows = append(rows, append([]string{r.Rule, r.Class}, inOutCols(r.Counter, r.In)...))
		}
		table(w, append([]string{"RULE", "CLASS"}, inOutHead()...), rows)
	case api.StatClasses:
		for _, c := range s.Classes {
			rows = append(rows, append([]string{c.Link, c.Class, strconv.FormatUint(uint64(c.Backlog), 10)}, inOutCols(c.Counter, c.In)...))
		}
		table(w, append([]string{"LINK", "CLASS", "BACKLOG"}, inOutHead()...), rows)
	case api.StatLinks:
		for _, l := range s.Links {
			rows = append(rows, append([]string{l.Link}, inOutCols(l.Counter, l.In)...))
		}
		table(w, append([]string{"LINK"}, inOutHead()...), rows)
	case api.StatApps:
		for i, a := range s.Apps {
			if limit > 0 && i >= limit {
				break
			}
			pid, comm, exe := strconv.Itoa(int(a.PID)), a.Comm, orDash(a.Exe)
			if a.Container != "" { // a container: runtime/name and its image
				pid, comm, exe = "-", a.Runtime+"/"+a.Container, orDash(a.Image)
			}
			rows = append(rows, append([]string{pid, comm, exe, strconv.Itoa(a.Flows),
				orDash(strings.Join(a.Rules, ","))}, inOutCols(a.Counter, a.In)...))
		}
		table(w, append([]string{"PID", "COMM", "EXE", "FLOWS", "RULES"}, inOutHead()...), rows)
		if limit > 0 && len(s.Apps) > limit {
			fmt.Fprintf(w, "(%d more; --limit 0 shows all)\n", len(s.Apps)-limit)
		}
	case api.StatFlows:
		for i, f := range s.Flows {
			if limit > 0 && i >= limit {
				break
			}
			app := "-"
			if f.PID != 0 {
				app = fmt.Sprintf("%s[%d]", f.Comm, f.PID)
			}
			rows = append(rows, append([]string{f.Proto, f.Local, f.Remote, app, orDash(f.Rule)}, inOutCols(f.Counter, f.In)...))
		}
		table(w, append([]string{"PROTO", "LOCAL", "REMOTE", "APP", "RULE"}, inOutHead()...), rows)
		if limit > 0 && len(s.Flows) > limit {
			fmt.Fprintf(w, "(%d more; --limit 0 shows all)\n", len(s.Flows)-limit)
		}
	}
}
