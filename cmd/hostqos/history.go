package main

import (
	"encoding/csv"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/cliflag"
	"github.com/hostqos/hostqos/internal/plot"
	"github.com/hostqos/hostqos/internal/policy"
)

// historyKinds are the kinds `stat history` takes, in display order.
var historyKinds = []string{api.HistoryLinks, api.HistoryClasses, api.HistoryRules, api.HistoryApps, api.HistoryFlows}

// historyOptions are those of `hostqos stat history` and `hostqos plot`.
type historyOptions struct {
	io           ioStreams
	client       func() apiClient
	now          func() time.Time
	iface        func() string // the interface the empty views suggest
	output       string
	since, until string
	step         time.Duration
	limit        int
	out          string         // plot: the file
	plotOutput   cliflag.Output // plot: -o
	q            api.HistoryQuery
}

// parseTime reads a time as the history commands take it: RFC 3339
// ("2026-11-22T18:00:00Z"), a date and time in local time ("2026-11-22
// 18:00", "2026-11-22"), or a duration ago ("2h", "30m", "7d").
func parseTime(s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	for _, layout := range []string{"2006-01-02 15:04:05", "2006-01-02 15:04", "2006-01-02T15:04", "2006-01-02"} {
		if t, err := time.ParseInLocation(layout, s, time.Local); err == nil {
			return t, nil
		}
	}
	if d, err := policy.ParseDuration(s); err == nil {
		return now.Add(-d), nil
	}
	return time.Time{}, fmt.Errorf("%q: want an RFC 3339 time (2026-11-22T18:00:00Z), a date and time (2026-11-22 18:00), or a duration ago (2h, 30m, 7d)", s)
}

// parse turns the arguments and flags into the query.
func (o *historyOptions) parse(args []string, kinds []string) error {
	o.q = api.HistoryQuery{Kind: api.HistoryRules, Limit: o.limit}
	if len(args) > 0 {
		o.q.Kind = args[0]
	}
	ok := false
	for _, k := range kinds {
		ok = ok || k == o.q.Kind
	}
	if !ok {
		return badArgument(o.q.Kind, kinds)
	}
	if len(args) > 1 {
		o.q.Name = args[1]
	}
	now := o.now()
	var err error
	if o.until != "" {
		if o.q.Until, err = parseTime(o.until, now); err != nil {
			return usagef("flag --until = %w", err)
		}
	} else {
		o.q.Until = now
	}
	if o.q.Since, err = parseTime(o.since, now); err != nil {
		return usagef("flag --since = %w", err)
	}
	if !o.q.Since.Before(o.q.Until) {
		return usagef("flag --since = %q: not before --until (%s)", o.since, o.q.Until.Format(time.RFC3339))
	}
	o.q.Step = o.step
	if o.limit < 0 {
		return usagef("flag --limit = %d: want 0 (the daemon's maximum) or more", o.limit)
	}
	return nil
}

func (o *historyOptions) addRangeFlags(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&o.since, "since", "1h", "start: RFC 3339, a date (and time), or a duration ago (2h, 7d)")
	fl.StringVar(&o.until, "until", "", "end: as --since (default now)")
	durationFlag(fl, &o.step, "step", "", 0, "width of a point, e.g. 10s, 5min, 1h (default: the finest the range allows, at most 2000 points)").
		within(time.Second, 0, "want a duration of at least 1s, e.g. 10s, 5min, 1h")
	fl.IntVar(&o.limit, "limit", 0, "at most this many series or flow records (0: the daemon's maximum)")
}

func newStatHistoryCmd(f *factory) *cobra.Command {
	o := &historyOptions{io: f.io, client: f.client, now: f.now, iface: f.iface}
	cmd := &cobra.Command{
		Use:   "history [links|classes|rules|apps|flows] [NAME]",
		Short: "Show what links, classes, rules, apps or finished flows carried over a time range",
		Long: `stat history reads hostqosd's history database: per link, class, rule and app,
the bytes, packets and drops of each direction (in = received, out = sent),
kept per second for the last hour, per minute for 30 days and per hour for a
year (see docs/observability.md); and the records of flows that ended, with
their app, rule, class, start, end and bytes each way.

NAME picks one object (for flows: an app's comm or exe, a rule, a class or a
unit). A container is one app, named container:RUNTIME/NAME (e.g.
container:docker/db), whichever of its processes sent; only root and group
hostqos see it. --since and --until take an RFC 3339 time, a local date and time
("2026-11-22 18:00"), or a duration ago ("2h", "7d"). The table shows each
series' total over the range; -o json and -o csv give every point. Ordinary
users see links, classes, the admin's rules, and only their own apps, runs and
flows.`,
		Example: "  hostqos stat history rules --since 2h\n  hostqos stat history apps /usr/bin/curl --since 2026-11-22 --step 1h -o csv\n  hostqos stat history flows curl --since 30m -o json",
		Args:    cobra.MaximumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.parse(args, historyKinds); err != nil {
				return err
			}
			switch o.output {
			case "table", "json", "csv":
			default:
				return usagef("flag --output = %q: want table, json or csv", o.output)
			}
			c, cancel := apiCtx()
			defer cancel()
			cl := o.client()
			h, err := cl.History().Get(c, o.q)
			if err != nil {
				return err
			}
			hint := ""
			if o.output == "table" && len(h.Series) == 0 && len(h.Flows) == 0 {
				hint = historyHint(cl, o.iface(), h, o.q.Name)
			}
			return printHistory(o.io.Out, o.output, h, hint)
		},
	}
	cmd.Flags().StringVarP(&o.output, "output", "o", "table", "output format: table, json or csv")
	o.addRangeFlags(cmd)
	return cmd
}

func historyCols(c api.HistoryCounters) []string {
	u := func(v uint64) string { return strconv.FormatUint(v, 10) }
	return []string{humanBytes(c.BytesIn), humanBytes(c.BytesOut), u(c.PacketsIn), u(c.PacketsOut), u(c.DropsIn), u(c.DropsOut)}
}

var historyHead = []string{"BYTES IN", "BYTES OUT", "PKTS IN", "PKTS OUT", "DROPS IN", "DROPS OUT"}

func rawCols(c api.HistoryCounters) []string {
	u := func(v uint64) string { return strconv.FormatUint(v, 10) }
	return []string{u(c.BytesIn), u(c.BytesOut), u(c.PacketsIn), u(c.PacketsOut), u(c.DropsIn), u(c.DropsOut)}
}

var rawHead = []string{"bytes_in", "bytes_out", "packets_in", "packets_out", "drops_in", "drops_out"}

func seriesName(s api.HistorySeries) string {
	if s.Container != "" && s.Image != "" { // container:RUNTIME/NAME and its image
		return fmt.Sprintf("%s (%s)", s.Name, s.Image)
	}
	if s.UID != nil {
		return fmt.Sprintf("%s (uid %d)", s.Name, *s.UID)
	}
	return s.Name
}

// printHistory prints a history answer as format says; hint, for a table
// of an empty answer, says why it is empty.
func printHistory(w io.Writer, format string, h api.History, hint string) error {
	switch format {
	case "json":
		return printJSON(w, h)
	case "csv":
		cw := csv.NewWriter(w)
		if h.Kind == api.HistoryFlows {
			// The container's columns come last, after those of before.
			_ = cw.Write(append(append([]string{"proto", "local", "remote", "pid", "comm", "exe", "uid", "unit", "rule", "class", "start", "end"}, rawHead...),
				"runtime", "container", "image"))
			for _, f := range h.Flows {
				_ = cw.Write(append(append([]string{f.Proto, f.Local, f.Remote, strconv.Itoa(int(f.PID)), f.Comm, f.Exe,
					strconv.Itoa(int(f.UID)), f.Unit, f.Rule, f.Class, f.Start.Format(time.RFC3339Nano), f.End.Format(time.RFC3339Nano)},
					rawCols(f.HistoryCounters)...), f.Runtime, f.Container, f.Image))
			}
		} else {
			_ = cw.Write(append(append([]string{"name", "time"}, rawHead...), "peak_bytes_in", "peak_bytes_out"))
			for _, s := range h.Series {
				for _, p := range s.Points {
					_ = cw.Write(append(append([]string{seriesName(s), p.Time.Format(time.RFC3339)}, rawCols(p.HistoryCounters)...),
						strconv.FormatUint(p.PeakBytesIn, 10), strconv.FormatUint(p.PeakBytesOut, 10)))
				}
			}
		}
		cw.Flush()
		return cw.Error()
	}
	var rows [][]string
	if h.Kind == api.HistoryFlows && len(h.Flows) == 0 && hint != "" {
		fmt.Fprintln(w, hint)
	} else if h.Kind == api.HistoryFlows {
		for _, f := range h.Flows {
			app := "-"
			switch {
			case f.Container != "":
				app = f.Runtime + "/" + f.Container
			case f.PID != 0:
				app = fmt.Sprintf("%s[%d]", f.Comm, f.PID)
			}
			rows = append(rows, append([]string{f.Proto, f.Local, f.Remote, app, orDash(f.Rule), orDash(f.Class),
				f.Start.Local().Format("01-02 15:04:05"), f.End.Sub(f.Start).Round(time.Second).String()}, historyCols(f.HistoryCounters)...))
		}
		table(w, append([]string{"PROTO", "LOCAL", "REMOTE", "APP", "RULE", "CLASS", "START", "LASTED"}, historyHead...), rows)
	} else {
		name := strings.ToUpper(strings.TrimSuffix(h.Kind, "s"))
		for _, s := range h.Series {
			rows = append(rows, append([]string{seriesName(s)}, historyCols(s.Total)...))
		}
		fmt.Fprintf(w, "%s … %s (points of %s, from the %s table)\n", h.Since.Local().Format("2006-01-02 15:04:05"),
			h.Until.Local().Format("2006-01-02 15:04:05"), time.Duration(h.Step*float64(time.Second)), h.Resolution)
		if len(rows) == 0 && hint != "" {
			fmt.Fprintln(w, hint)
		} else {
			table(w, append([]string{name}, historyHead...), rows)
		}
	}
	if h.Truncated {
		fmt.Fprintln(w, "(more matched than one answer holds; narrow the range, name one object, or use --limit)")
	}
	return nil
}

func newPlotCmd(f *factory) *cobra.Command {
	o := &historyOptions{io: f.io, client: f.client, now: f.now, iface: f.iface}
	cmd := &cobra.Command{
		Use:   "plot [links|classes|rules|apps] [NAME] --out FILE.png|FILE.svg",
		Short: "Draw the rates of links, classes, rules or apps over time from the history",
		Long: `plot draws, from hostqosd's history database (see 'hostqos stat history'), the
rate of each link, class, rule or app over a time range against the time of
day: one panel for what was sent (out) and one for what was received (in), in
bit/s. Each point's mean over its step is a line; a shade over it reaches the
point's busiest second, so a burst a minute or an hour averages away still
shows (the history keeps per-second rows for an hour, then the busiest second
of each minute and hour). The file's extension picks the format (.png or
.svg). With many series, the 8 that carried the most are drawn.`,
		Example: "  hostqos plot rules --since 2h --out rules.png\n  hostqos plot apps /usr/bin/curl --since 2026-11-22 --step 5m --out curl.svg",
		Args:    cobra.MaximumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.parse(args, historyKinds[:4]); err != nil {
				return err
			}
			ext := strings.ToLower(filepath.Ext(o.out))
			if o.out == "" || (ext != ".png" && ext != ".svg") {
				return usagef("flag --out = %q: want a file name ending in .png or .svg", o.out)
			}
			c, cancel := apiCtx()
			defer cancel()
			cl := o.client()
			h, err := cl.History().Get(c, o.q)
			if err != nil {
				return err
			}
			fig, peak, n := historyFigure(h, 8)
			var data []byte
			if ext == ".png" {
				data, err = fig.PNG()
			} else {
				data, err = fig.SVG()
			}
			if err != nil {
				return fmt.Errorf("draw plot %s: %w", o.out, err)
			}
			if err := os.WriteFile(o.out, data, 0o644); err != nil {
				return fmt.Errorf("write plot %s: %w", o.out, err)
			}
			drawn := min(len(h.Series), 8)
			if o.plotOutput == cliflag.JSON {
				return printJSON(o.io.Out, plotResult{File: o.out, Series: drawn, Points: n,
					Since: h.Since, Until: h.Until, PeakBps: peak})
			}
			fmt.Fprintf(o.io.Out, "wrote %s: %d series, %d points, %s … %s, busiest second %s\n", o.out, drawn, n,
				h.Since.Local().Format("2006-01-02 15:04:05"), h.Until.Local().Format("2006-01-02 15:04:05"), humanRate(peak))
			if len(h.Series) == 0 {
				printHint(o.io.Out, historyHint(cl, o.iface(), h, o.q.Name))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&o.out, "out", "", "the file to write (.png or .svg)")
	cliflag.AddOutput(cmd.Flags(), &o.plotOutput)
	o.addRangeFlags(cmd)
	return cmd
}

// plotResult is what plot prints with -o json.
type plotResult struct {
	File    string    `json:"file"`
	Series  int       `json:"series"`
	Points  int       `json:"points"`
	Since   time.Time `json:"since"`
	Until   time.Time `json:"until"`
	PeakBps float64   `json:"peak_bps"`
}

// historyFigure draws the rates of at most maxSeries series (the answer is
// sorted by bytes) against the time of day: each point's mean as a line
// and, over it, a band up to the point's busiest second (a point of a
// minute or an hour averages its seconds; its peak is kept apart). It
// returns the figure, the highest rate drawn (a busiest second) and the
// number of points.
func historyFigure(h api.History, maxSeries int) (*plot.Figure, float64, int) {
	series := h.Series
	if len(series) > maxSeries {
		series = series[:maxSeries]
	}
	step := h.Step
	if step <= 0 {
		step = 1
	}
	stepD := time.Duration(step * float64(time.Second))
	out := plot.Panel{Title: "sent (out)", YLabel: "Mbit/s"}
	in := plot.Panel{Title: "received (in)", YLabel: "Mbit/s"}
	peak, n := 0.0, 0
	bands := false
	for i, s := range series {
		so := plot.Series{Name: plot.Lower(seriesName(s)), Color: plot.Cycle(i), Marks: plot.Line}
		si := so
		// The band from each point's mean to its busiest second.
		bo := plot.Series{Color: so.Color, Lo: []float64{}}
		bi := bo
		// Points are only those with traffic: put zeros between them.
		var last time.Time
		add := func(t time.Time, meanOut, meanIn, peakOut, peakIn float64) {
			x := float64(t.Unix())
			so.X, so.Y = append(so.X, x), append(so.Y, meanOut/1e6)
			si.X, si.Y = append(si.X, x), append(si.Y, meanIn/1e6)
			bo.X, bo.Lo, bo.Y = append(bo.X, x), append(bo.Lo, meanOut/1e6), append(bo.Y, peakOut/1e6)
			bi.X, bi.Lo, bi.Y = append(bi.X, x), append(bi.Lo, meanIn/1e6), append(bi.Y, peakIn/1e6)
		}
		for _, p := range s.Points {
			if !last.IsZero() && p.Time.Sub(last).Seconds() > step*1.5 {
				add(last.Add(stepD), 0, 0, 0, 0)
				add(p.Time.Add(-stepD), 0, 0, 0, 0)
			}
			mo := 8 * float64(p.BytesOut) / step
			mi := 8 * float64(p.BytesIn) / step
			// A daemon that keeps no peaks (older) sends none: the mean.
			po := max(mo, 8*float64(p.PeakBytesOut))
			pi := max(mi, 8*float64(p.PeakBytesIn))
			bands = bands || po > mo || pi > mi
			peak = math.Max(peak, math.Max(po, pi))
			add(p.Time, mo, mi, po, pi)
			last = p.Time
			n++
		}
		if step > 1 {
			out.Series = append(out.Series, bo)
			in.Series = append(in.Series, bi)
		}
		out.Series = append(out.Series, so)
		in.Series = append(in.Series, si)
	}
	span := h.Since.Local().Format("2006-01-02 15:04:05") + " … " + h.Until.Local().Format("15:04:05")
	xlabel := "local time, " + h.Since.Local().Format("2006-01-02")
	if d := h.Until.Local().Format("2006-01-02"); d != h.Since.Local().Format("2006-01-02") {
		span = h.Since.Local().Format("2006-01-02 15:04:05") + " … " + h.Until.Local().Format("2006-01-02 15:04:05")
		xlabel += " … " + d
	}
	notes := []string{fmt.Sprintf("%s, points of %s (%s table), busiest second %s", span, stepD, h.Resolution, humanRate(peak))}
	if bands {
		notes = append(notes, "line: each point's mean; shade: up to its busiest second")
	}
	fig := &plot.Figure{
		Title: fmt.Sprintf("%s: rate from the history", h.Kind), XLabel: xlabel, XClock: time.Local,
		Panels: []plot.Panel{out, in}, Notes: notes,
	}
	if len(series) == 0 {
		fig.Notes = append(fig.Notes, "no traffic recorded in this range")
		empty := plot.Series{X: []float64{float64(h.Since.Unix()), float64(h.Until.Unix())}, Y: []float64{0, 0}, Color: plot.Grey}
		fig.Panels[0].Series = []plot.Series{empty}
		fig.Panels[1].Series = []plot.Series{empty}
	}
	return fig, peak, n
}
