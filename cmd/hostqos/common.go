package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/cliflag"
	"github.com/hostqos/hostqos/internal/traffic"
)

// ioStreams are where a command reads and writes.
type ioStreams struct {
	In       io.Reader
	Out, Err io.Writer
}

// apiClient is what the commands need of the daemon's API; *api.Client is
// it, tests pass a fake.
type apiClient interface {
	Status(ctx context.Context) (api.Status, error)
	Reload(ctx context.Context, opts ...api.ChangeOption) (api.Status, error)
	Down(ctx context.Context, opts ...api.ChangeOption) (string, error)
	Links() api.LinksAPI
	Classes() api.ClassesAPI
	Rules() api.RulesAPI
	Runs() api.RunsAPI
	Stats() api.StatsAPI
	Events() api.EventsAPI
	Reservations() api.ReservationsAPI
	RSVP() api.RSVPAPI
	History() api.HistoryAPI
	Shield() api.ShieldAPI
	QSockets() api.QSocketsAPI
	Explain(ctx context.Context, q api.ExplainQuery) (api.Explanation, error)
	Containers(ctx context.Context) ([]api.Container, error)
	WebToken(ctx context.Context) (api.WebLogin, error)
}

var _ apiClient = (*api.Client)(nil)

// factory gives the commands their streams and their client. The client
// is made when a command runs, after the global flags were parsed.
type factory struct {
	io                     ioStreams
	socket, idempotencyKey string // the global flags
	// newClient makes the client; nil means the real one for --socket.
	newClient func() apiClient
	now       func() time.Time // the clock (status shows the uptime)
	// uplink names the interface the empty views suggest managing (the
	// default route's; "": the fallback).
	uplink func() string
	// unknownCmd is an unknown subcommand found while running (see
	// execute).
	unknownCmd error
}

func newFactory(io ioStreams) *factory {
	return &factory{io: io, now: time.Now, uplink: defaultRouteIface}
}

// addGlobalFlags adds the flags every command takes.
func (f *factory) addGlobalFlags(root *cobra.Command) {
	pf := root.PersistentFlags()
	pf.StringVar(&f.socket, "socket", "", "hostqosd API socket (default $HOSTQOS_SOCKET or "+api.DefaultSocket+")")
	// Advanced: a change's key, to learn the outcome of a change whose
	// answer was lost (the CLI names the key when it cannot tell).
	pf.StringVar(&f.idempotencyKey, "idempotency-key", "", "send the change with this idempotency key (16-64 of A-Z a-z 0-9 _ -); a change is applied at most once per key")
	_ = pf.MarkHidden("idempotency-key")
}

// client returns the client commands talk to the daemon with.
func (f *factory) client() apiClient {
	if f.newClient != nil {
		return f.newClient()
	}
	c := api.NewClient(f.socket)
	c.IdempotencyKey = f.idempotencyKey
	return c
}

// apiCtx bounds one exchange with the daemon.
func apiCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 60*time.Second)
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// table prints rows under a header, aligned.
func table(w io.Writer, header []string, rows [][]string) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	tw.Flush()
}

// humanRate formats a measured rate in bits per second.
func humanRate(bps float64) string { return traffic.FormatRate(bps) + "/s" }

// humanBytes formats a byte count.
func humanBytes(b uint64) string {
	f := float64(b)
	switch {
	case f >= 1<<30:
		return fmt.Sprintf("%.2fGiB", f/(1<<30))
	case f >= 1<<20:
		return fmt.Sprintf("%.2fMiB", f/(1<<20))
	case f >= 1<<10:
		return fmt.Sprintf("%.1fKiB", f/(1<<10))
	}
	return fmt.Sprintf("%dB", b)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// getOptions are those of a read-only command: list or show.
type getOptions struct {
	io     ioStreams
	client func() apiClient
	output cliflag.Output
}

// getCmd makes a read-only command that fetches something with get and
// prints it as a table (with print) or, with -o json, as it came.
func getCmd[T any](f *factory, use, short string, args cobra.PositionalArgs,
	get func(ctx context.Context, c apiClient, args []string) (T, error), print func(io.Writer, T)) *cobra.Command {
	o := &getOptions{io: f.io, client: f.client}
	c := &cobra.Command{Use: use, Short: short, Args: args}
	cliflag.AddOutput(c.Flags(), &o.output)
	c.RunE = func(cmd *cobra.Command, a []string) error {
		cx, cancel := apiCtx()
		defer cancel()
		v, err := get(cx, o.client(), a)
		if err != nil {
			return err
		}
		if o.output == cliflag.JSON {
			return printJSON(o.io.Out, jsonValue(v))
		}
		print(o.io.Out, v)
		return nil
	}
	return c
}

// changeResult is what a changing command prints with -o json: what it
// did (added, changed, removed, …) to which object, the fields it sent
// (null: cleared), and the object as the daemon answered, when it answers
// one. The table form prints a line, or the object's table.
type changeResult struct {
	Action    string     `json:"action"`
	Kind      string     `json:"kind"`
	Name      string     `json:"name,omitempty"`
	Fields    api.Fields `json:"fields,omitempty"`
	Temporary bool       `json:"temporary,omitempty"`
	Forced    bool       `json:"forced,omitempty"`
	Result    any        `json:"result,omitempty"`
}

// report prints what a changing command did: r with -o json, else what
// table prints (nil: "ACTION KIND NAME").
func report(w io.Writer, o cliflag.Output, r changeResult, table func(io.Writer)) error {
	if o == cliflag.JSON {
		return printJSON(w, r)
	}
	if table == nil {
		fmt.Fprintf(w, "%s %s %s\n", r.Action, r.Kind, r.Name)
		return nil
	}
	table(w)
	return nil
}

// removeOptions are those of `KIND remove NAME`.
type removeOptions struct {
	io     ioStreams
	client func() apiClient
	output cliflag.Output
	name   string
}

// removeCmd makes `KIND remove NAME`, which removes with remove.
func removeCmd(f *factory, kind, short string, remove func(ctx context.Context, c apiClient, name string) error) *cobra.Command {
	o := &removeOptions{io: f.io, client: f.client}
	c := &cobra.Command{
		Use:   "remove NAME",
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.name = args[0]
			cx, cancel := apiCtx()
			defer cancel()
			if err := remove(cx, o.client(), o.name); err != nil {
				return err
			}
			return report(o.io.Out, o.output, changeResult{Action: "removed", Kind: kind, Name: o.name}, nil)
		},
	}
	cliflag.AddOutput(c.Flags(), &o.output)
	return c
}

// changeAPI is the part of RulesAPI and ClassesAPI that add and set use.
type changeAPI interface {
	AddFields(ctx context.Context, name string, f api.Fields, opts ...api.ChangeOption) error
	Set(ctx context.Context, name string, f api.Fields, opts ...api.ChangeOption) error
}

// objectChange is `KIND add NAME` or `KIND set NAME` of an object whose
// flags are a flag table (rules, classes): it sends the fields given as
// flags, to add NAME (fields not given left out) or to change it (a field
// given as nil is cleared).
type objectChange struct {
	kind  string // what the output names: "rule", "class"
	add   bool
	table func() fieldFlags
	temp  string // what --temporary keeps from being persisted
	to    func(apiClient) changeAPI
	// check looks at the fields given before they are sent: it may fill
	// in defaults, or refuse (nil: none).
	check func(api.Fields) error
}

// objectChangeOptions are those of an objectChange command.
type objectChangeOptions struct {
	io     ioStreams
	client func() apiClient
	output cliflag.Output
	flags  changeFlags
	name   string
}

// changeCmd makes cmd (its use, help and examples given) the command of
// c: one argument, NAME, and c's flag table.
func changeCmd(f *factory, cmd *cobra.Command, c objectChange) *cobra.Command {
	o := &objectChangeOptions{io: f.io, client: f.client}
	cmd.Args = cobra.ExactArgs(1)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		o.name = args[0]
		p := o.flags.fields(cmd)
		if c.check != nil {
			if err := c.check(p); err != nil {
				return err
			}
		}
		cx, cancel := apiCtx()
		defer cancel()
		to := c.to(o.client())
		verb, send := "changed", to.Set
		if c.add {
			verb, send = "added", to.AddFields
		}
		if err := send(cx, o.name, p, api.Temporary(o.flags.temp)); err != nil {
			return err
		}
		return report(o.io.Out, o.output, changeResult{Action: verb, Kind: c.kind, Name: o.name, Fields: p, Temporary: o.flags.temp}, nil)
	}
	o.flags.register(cmd, c.table(), c.temp)
	cliflag.AddOutput(cmd.Flags(), &o.output)
	return cmd
}

// someField refuses to send no field at all, saying why.
func someField(why string) func(api.Fields) error {
	return func(p api.Fields) error {
		if len(p) == 0 {
			return &usageError{errors.New(why)}
		}
		return nil
	}
}

// jsonMarshal encodes v as JSON.
func jsonMarshal(v any) ([]byte, error) { return json.Marshal(v) }
