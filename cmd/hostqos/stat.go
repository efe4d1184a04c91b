package main

import (
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/hostqos/hostqos/api"
)

func init() {
	var interval float64
	var count int
	var limit int
	st := &cobra.Command{
		Use:   "stat [rules|classes|apps|flows]",
		Short: "Show live counters and rates per rule, class, app or flow",
		Long: `stat shows what each rule, class, app (process) or flow actually got: bytes,
packets, drops and the current rate. Rates are over the daemon's last sample
(1 s) for rules and classes, and since the previous 'stat flows' call for flows
and apps. Byte counts are frames as the egress queue sees them (IP packet plus
link-layer header). With -i it repeats every SECONDS until interrupted.
Ordinary users see only their own processes' apps and flows.`,
		Example:   "  hostqos stat\n  hostqos stat flows -i 1\n  hostqos stat apps -o json",
		Args:      cobra.MaximumNArgs(1),
		ValidArgs: []string{"rules", "classes", "apps", "flows"},
	}
	out := outputFlag(st)
	st.Flags().Float64VarP(&interval, "interval", "i", 0, "repeat every SECONDS (0: once)")
	st.Flags().IntVarP(&count, "count", "c", 0, "with -i: stop after this many reports (0: until interrupted)")
	st.Flags().IntVar(&limit, "limit", 50, "show at most this many rows of flows/apps in a table (0: all)")
	st.RunE = func(cmd *cobra.Command, args []string) error {
		if err := checkOutput(*out); err != nil {
			return err
		}
		kind := "rules"
		if len(args) == 1 {
			kind = args[0]
		}
		switch kind {
		case "rules", "classes", "apps", "flows":
		default:
			return fmt.Errorf("argument %q: want rules, classes, apps or flows", kind)
		}
		if interval < 0 || (interval > 0 && interval < 0.2) {
			return fmt.Errorf("flag --interval = %v: want 0 (once) or at least 0.2 seconds", interval)
		}
		stop := make(chan os.Signal, 1)
		signal.Notify(stop, os.Interrupt)
		for n := 1; ; n++ {
			c, cancel := ctx()
			var s api.Stats
			err := client().Get(c, "/v1/stats/"+kind, &s)
			cancel()
			if err != nil {
				return err
			}
			if *out == "json" {
				if err := printJSON(s); err != nil {
					return err
				}
			} else {
				if interval > 0 {
					fmt.Printf("--- %s %s\n", s.Time.Format("15:04:05"), kind)
				}
				printStats(kind, s, limit)
			}
			if interval == 0 || (count > 0 && n >= count) {
				return nil
			}
			select {
			case <-stop:
				return nil
			case <-time.After(time.Duration(interval * float64(time.Second))):
			}
		}
	}
	rootCmd.AddCommand(st)
}

func counterCols(c api.Counter) []string {
	return []string{humanRate(c.RateBps), strconv.FormatFloat(c.PktRate, 'f', 0, 64), humanBytes(c.Bytes),
		strconv.FormatUint(c.Packets, 10), strconv.FormatUint(c.Drops, 10)}
}

var counterHead = []string{"RATE", "PKT/S", "BYTES", "PACKETS", "DROPS"}

func printStats(kind string, s api.Stats, limit int) {
	var rows [][]string
	switch kind {
	case "rules":
		for _, r := range s.Rules {
			rows = append(rows, append([]string{r.Rule, r.Class}, counterCols(r.Counter)...))
		}
		table(append([]string{"RULE", "CLASS"}, counterHead...), rows)
	case "classes":
		for _, c := range s.Classes {
			rows = append(rows, append([]string{c.Link, c.Class, strconv.FormatUint(uint64(c.Backlog), 10)}, counterCols(c.Counter)...))
		}
		table(append([]string{"LINK", "CLASS", "BACKLOG"}, counterHead...), rows)
	case "apps":
		for i, a := range s.Apps {
			if limit > 0 && i >= limit {
				break
			}
			rows = append(rows, append([]string{strconv.Itoa(int(a.PID)), a.Comm, orDash(a.Exe), strconv.Itoa(a.Flows),
				orDash(strings.Join(a.Rules, ","))}, counterCols(a.Counter)...))
		}
		table(append([]string{"PID", "COMM", "EXE", "FLOWS", "RULES"}, counterHead...), rows)
		if limit > 0 && len(s.Apps) > limit {
			fmt.Printf("(%d more; --limit 0 shows all)\n", len(s.Apps)-limit)
		}
	case "flows":
		for i, f := range s.Flows {
			if limit > 0 && i >= limit {
				break
			}
			app := "-"
			if f.PID != 0 {
				app = fmt.Sprintf("%s[%d]", f.Comm, f.PID)
			}
			rows = append(rows, append([]string{f.Proto, f.Local, f.Remote, app, orDash(f.Rule)}, counterCols(f.Counter)...))
		}
		table(append([]string{"PROTO", "LOCAL", "REMOTE", "APP", "RULE"}, counterHead...), rows)
		if limit > 0 && len(s.Flows) > limit {
			fmt.Printf("(%d more; --limit 0 shows all)\n", len(s.Flows)-limit)
		}
	}
}
