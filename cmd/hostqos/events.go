package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/cliflag"
)

// eventsOptions are those of `hostqos events` (and of the watch commands
// built on it).
type eventsOptions struct {
	io       ioStreams
	client   func() apiClient
	output   cliflag.Output
	kinds    []string
	since    int64 // -1: from now
	count    int   // stop after this many events (0: follow until interrupted)
	noResume bool
	// tty tells whether a stream is a terminal (there, the table form
	// first says it waits).
	tty func(io.Writer) bool
}

func newEventsCmd(f *factory) *cobra.Command {
	return eventsCmd(f, "events", "Follow the daemon's event stream: changes, reservations, sockets, refusals",
		`events prints the daemon's events as they happen, one per line: policy changes,
reservations admitted, refused, modified or removed, sockets bound and unbound,
policing violations, sessions refused, runs started and ended. An ordinary user
sees the events of host policy and of their own objects (runs, sockets).

--kind keeps only events of these kinds or kind prefixes (reservation keeps
reservation.admitted, reservation.refused, …). --since SEQ first prints the
events after SEQ that the daemon still holds (it holds the last 4096); a
"lost" line says how many were missed. When the daemon restarts, events
reconnects and resumes after the last event it printed.

-o json prints each event as one JSON object per line (seq, time, kind,
subject, uid, message, fields).`,
		"  hostqos events\n  hostqos events --kind reservation,socket -o json\n  hostqos events --since 1732300000000123 --count 10", nil)
}

// eventsCmd makes a command following the event stream; fixed kinds, when
// given, replace --kind.
func eventsCmd(f *factory, use, short, long, example string, fixed []string) *cobra.Command {
	o := &eventsOptions{io: f.io, client: f.client, tty: isTerminal}
	usage := " [--kind K[,K…]] [--since SEQ] [--count N] [-o json]"
	if fixed != nil {
		usage = " [--since SEQ] [--count N] [-o json]"
	}
	c := &cobra.Command{
		Use: use + usage, Short: short, Long: long, Example: example,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if fixed != nil {
				o.kinds = fixed
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			return o.run(ctx)
		},
	}
	cliflag.AddOutput(c.Flags(), &o.output)
	if fixed == nil {
		c.Flags().StringSliceVar(&o.kinds, "kind", nil, "only these event kinds or kind prefixes, e.g. reservation or run.started (repeat or comma-separate)")
	}
	c.Flags().Int64Var(&o.since, "since", -1, "first print the held events after this seq (0: all held)")
	c.Flags().IntVar(&o.count, "count", 0, "exit after this many events (0: follow until interrupted)")
	c.Flags().BoolVar(&o.noResume, "no-resume", false, "exit when the daemon stops instead of waiting for it and resuming")
	return c
}

func (o *eventsOptions) run(ctx context.Context) error {
	if o.count < 0 {
		return usagef("flag --count = %d: want 0 (follow) or a positive number", o.count)
	}
	if o.since < -1 {
		return usagef("flag --since = %d: want the seq of an event (≥ 0)", o.since)
	}
	opts := api.EventsOptions{Kinds: o.kinds, NoResume: o.noResume}
	if o.since >= 0 {
		s := uint64(o.since)
		opts.Since = &s
	}
	if o.output != cliflag.JSON && o.since < 0 && o.tty(o.io.Err) {
		// Nothing shows until something happens: say so to the one
		// watching (on standard error, so that the stream stays events).
		fmt.Fprintln(o.io.Err, "waiting for events (none is printed until something happens; --since 0 first shows the last ones the daemon holds; Ctrl-C stops)")
	}
	n := 0
	errDone := fmt.Errorf("done")
	err := o.client().Events().Follow(ctx, opts, func(ev api.Event) error {
		if o.output == cliflag.JSON {
			b, err := json.Marshal(ev)
			if err != nil {
				return err
			}
			fmt.Fprintf(o.io.Out, "%s\n", b)
		} else {
			printEvent(o.io.Out, ev)
		}
		if n++; o.count > 0 && n >= o.count {
			return errDone
		}
		return nil
	})
	if err == errDone || (err != nil && ctx.Err() != nil && err == ctx.Err()) {
		return nil
	}
	return err
}

// printEvent writes one event as a line: time, seq, kind, subject,
// message and its fields.
func printEvent(w io.Writer, ev api.Event) {
	var b strings.Builder
	fmt.Fprintf(&b, "%s  %d  %s", ev.Time.Local().Format(time.TimeOnly+".000"), ev.Seq, ev.Kind)
	if ev.Subject != "" {
		b.WriteString("  " + ev.Subject)
	}
	if ev.Message != "" {
		b.WriteString("  " + ev.Message)
	}
	keys := make([]string, 0, len(ev.Fields))
	for k := range ev.Fields {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v, _ := json.Marshal(ev.Fields[k])
		fmt.Fprintf(&b, " %s=%s", k, v)
	}
	if ev.UID != nil {
		fmt.Fprintf(&b, " uid=%d", *ev.UID)
	}
	fmt.Fprintln(w, b.String())
}
