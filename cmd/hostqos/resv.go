package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/cliflag"
	"github.com/hostqos/hostqos/internal/policy"
)

// resvFlags is the flag table of resv add and resv set.
func resvFlags() fieldFlags {
	return slices.Concat(selectorFlags("session", "session"), fieldFlags{
		{"service", "service", "guaranteed (excess shaped to R, never dropped on the host), controlled-load (excess sent as best effort) or best-effort (counted only)",
			enumValue(string(policy.ServiceGuaranteed), string(policy.ServiceControlledLoad), string(policy.ServiceBestEffort))},
		{"rate", "rate", "Tspec token rate r, e.g. 2mbit or 250kB/s (RFC 2210 counts bytes/s)", rateValue()},
		{"burst", "burst", "Tspec bucket depth b in bytes, e.g. 16KiB (at least M)", sizeValue()},
		{"peak", "peak", "Tspec peak rate p ≥ r (default: no peak term)", rateValue()},
		{"min-unit", "min_unit", "Tspec minimum policed unit m in bytes: smaller packets are charged as m (default 64)", sizeValue()},
		{"max-unit", "max_unit", "Tspec maximum packet size M in bytes (IP packet; default 1500; at most the links' MTU)", sizeValue()},
		{"service-rate", "service_rate", "Rspec service rate R ≥ r of guaranteed service (default r)", rateValue()},
		{"slack", "slack_us", "Rspec slack term S in microseconds (guaranteed service)", intValue(0, math.MaxInt, "want microseconds ≥ 0")},
		{"enforce", "enforce", "shape (senders wait until they conform to the Tspec; default of guaranteed) or police (the excess is sent as best effort; default of controlled load)",
			enumValue(string(policy.EnforceShape), string(policy.EnforcePolice))},
		{"dscp", "dscp", "DSCP of conformant packets (default: EF for guaranteed, the interactive class's for controlled load)", dscpValue()},
	}, sessionFlags())
}

// resvKinds are the event kinds `resv watch` follows.
var resvKinds = []string{"reservation", "socket", "session", "policing"}

func newResvCmd(f *factory) *cobra.Command {
	resv := &cobra.Command{
		Use:   "resv",
		Short: "Manage reservations: a session, a Tspec (r, b, p, m, M) and a service (guaranteed, controlled-load, best-effort)",
		Long: `A reservation asks for network service for a session: the sockets its selector
matches (protocol, local/remote address and port, or an app selector), which
send within a traffic specification (Tspec, RFC 2210: token rate r, bucket b,
peak rate p, minimum policed unit m, maximum packet size M). Admission control
refuses it unless every shaped link can honour it (reserved rates and buffers);
a refusal names the numbers and changes nothing. Sockets are bound when they
connect, and when the reservation is added if they are open already.

  guaranteed       traffic inside the Tspec is never dropped on the host;
                   senders are shaped to the Tspec (they block until what
                   they send conforms: r, b and p)
  controlled-load  traffic inside the Tspec gets the reserved rate; excess is
                   sent as best effort
  best-effort      the Tspec is counted, nothing is reserved

--enforce shape|police overrides the service's default (shape for
guaranteed, police for controlled load). A reservation needs a link with an
egress rate to enforce it: without one it is refused.

See docs/reservations.md.`,
	}
	rm := removeCmd(f, "reservation", "Remove a reservation (its sockets go on as best effort)",
		func(ctx context.Context, c apiClient, name string) error { return c.Reservations().Remove(ctx, name) })
	list := getCmd(f, "list", "List reservations with their reserved rates and sessions", cobra.NoArgs,
		func(ctx context.Context, c apiClient, _ []string) ([]api.ReservationInfo, error) {
			return c.Reservations().List(ctx)
		}, orHint(noResvHint, printResvList))
	show := getCmd(f, "show NAME", "Show a reservation: Tspec, admission figures, bound sockets, counters", cobra.ExactArgs(1),
		func(ctx context.Context, c apiClient, a []string) (api.ReservationInfo, error) {
			return c.Reservations().Get(ctx, a[0])
		}, printResv)
	watch := eventsCmd(f, "watch", "Follow reservation events: admitted, refused, modified, removed, sockets bound and unbound, violations, sessions refused",
		"watch is hostqos events --kind "+strings.Join(resvKinds, ",")+" (see hostqos events --help).",
		"  hostqos resv watch\n  hostqos resv watch -o json", resvKinds)
	resv.AddCommand(newResvChangeCmd(f, true), newResvChangeCmd(f, false), rm, list, show, watch)
	return resv
}

// resvChangeOptions are those of resv add and resv set.
type resvChangeOptions struct {
	io     ioStreams
	client func() apiClient
	output cliflag.Output
	flags  changeFlags
}

func newResvChangeCmd(f *factory, add bool) *cobra.Command {
	o := &resvChangeOptions{io: f.io, client: f.client}
	c := &cobra.Command{
		Use:   "add NAME --service S [selectors] --rate r --burst b [--peak p] [--min-unit m] [--max-unit M] [--service-rate R] [--slack S]",
		Short: "Ask for a reservation (admission-controlled)",
		Example: `  hostqos resv add rtp --service guaranteed --proto udp --rport 5004 --rate 2mbit --burst 16KiB --max-unit 1400
  hostqos resv add video --service controlled-load --exe /usr/bin/ffmpeg --rate 4mbit --burst 64KiB --peak 10mbit
  hostqos resv add feed --service guaranteed --enforce police --proto udp --rport 6000 --rate 1mbit --burst 8KiB
  hostqos resv add calls --service controlled-load --proto tcp --rport 5060 --rate 2mbit --burst 16KiB --max-sessions 20 --per-session-minbw 100kbit`,
		Args: cobra.ExactArgs(1),
	}
	if !add {
		c.Use, c.Short = "set NAME [flags]", "Change a reservation; only the flags given change (admission runs again)"
		c.Example = "  hostqos resv set rtp --rate 3mbit --burst 24KiB"
	}
	c.RunE = func(cmd *cobra.Command, args []string) error {
		p := o.flags.fields(cmd)
		cx, cancel := apiCtx()
		defer cancel()
		var ri api.ReservationInfo
		var err error
		if add {
			p["name"] = args[0]
			var r policy.Reservation
			if err := decodeFields(p, &r); err != nil {
				return err
			}
			ri, err = o.client().Reservations().Add(cx, r, api.Temporary(o.flags.temp))
		} else {
			if len(p) == 0 {
				return usagef("nothing to change: give at least one flag (see hostqos resv set --help)")
			}
			ri, err = o.client().Reservations().Set(cx, args[0], p, api.Temporary(o.flags.temp))
		}
		if err != nil {
			return err
		}
		verb := "changed"
		if add {
			verb = "admitted"
		}
		return report(o.io.Out, o.output, changeResult{Action: verb, Kind: "reservation", Name: args[0], Fields: p, Temporary: o.flags.temp, Result: ri},
			func(w io.Writer) {
				fmt.Fprintf(w, "%s reservation %s: %s, reserved %s, buffers %d × %d B\n", verb, args[0],
					ri.Reservation.Service, ri.Admission.Reserved, ri.Admission.BufferPackets, ri.Admission.BufferSize)
			})
	}
	o.flags.register(c, resvFlags(), "reservation")
	cliflag.AddOutput(c.Flags(), &o.output)
	return c
}

// decodeFields turns flag fields into a reservation as the daemon would
// decode them.
func decodeFields(p api.Fields, r *policy.Reservation) error {
	b, err := jsonMarshal(p)
	if err != nil {
		return err
	}
	if err := r.UnmarshalJSON(b); err != nil {
		return fmt.Errorf("reservation: %w", err)
	}
	return nil
}

func printResvList(w io.Writer, rs []api.ReservationInfo) {
	var rows [][]string
	for _, ri := range rs {
		r := ri.Reservation
		sessions := strconv.Itoa(len(ri.Sockets))
		if r.MaxSessions > 0 {
			sessions += "/" + strconv.Itoa(r.MaxSessions)
		}
		state := "ok"
		if len(ri.Broken) > 0 {
			state = "broken"
		}
		rows = append(rows, []string{r.Name, string(r.Service), selectors(r.SessionRule()),
			fmt.Sprintf("r=%s b=%s", r.Rate, r.Burst), orDash(rateOrEmpty(ri.Admission.Reserved)), sessions, state, ri.Source})
	}
	table(w, []string{"RESERVATION", "SERVICE", "SESSION", "TSPEC", "RESERVED", "SOCKETS", "STATE", "SOURCE"}, rows)
}

func rateOrEmpty(r policy.Rate) string {
	if r == 0 {
		return ""
	}
	return r.String()
}

func printResv(w io.Writer, ri api.ReservationInfo) {
	r, t := ri.Reservation, ri.Tspec
	fmt.Fprintf(w, "reservation %s (%s), source %s\n", r.Name, r.Service, ri.Source)
	fmt.Fprintf(w, "session:   %s\n", selectors(r.SessionRule()))
	fmt.Fprintf(w, "tspec:     r=%d B/s (%s) b=%d B", t.Rate, r.Rate, t.Bucket)
	if t.Peak > 0 {
		fmt.Fprintf(w, " p=%d B/s (%s)", t.Peak, r.Peak)
	}
	fmt.Fprintf(w, " m=%d B M=%d B\n", t.MinUnit, t.MaxUnit)
	if r.Service == policy.ServiceGuaranteed {
		fmt.Fprintf(w, "rspec:     R=%d B/s (%s) S=%d µs\n", t.ServiceRate, r.EffServiceRate(), t.Slack)
	}
	switch r.EffEnforce() {
	case policy.EnforceShape:
		fmt.Fprintf(w, "enforce:   shape (senders wait until they conform to the Tspec)\n")
	case policy.EnforcePolice:
		fmt.Fprintf(w, "enforce:   police (beyond the Tspec: best effort)\n")
	}
	if r.MaxSessions > 0 {
		fmt.Fprintf(w, "sessions:  at most %d", r.MaxSessions)
		if r.PerSessionMinBW > 0 {
			fmt.Fprintf(w, ", each guaranteed %s", r.PerSessionMinBW)
		}
		if r.PerSessionMaxBW > 0 {
			fmt.Fprintf(w, ", each at most %s", r.PerSessionMaxBW)
		}
		fmt.Fprintln(w)
	}
	a := ri.Admission
	fmt.Fprintf(w, "admission: reserved %s; buffers ⌈b/m⌉ = %d × %d B = %d B\n", orDash(rateOrEmpty(a.Reserved)), a.BufferPackets, a.BufferSize, a.Buffer)
	for _, l := range ri.Links {
		fmt.Fprintf(w, "  link %s: guarantees %s of %s reservable; buffers %d of %d B", l.Link, l.Guaranteed, l.Capacity, l.BufferUsed, l.BufferPool)
		if l.MTU > 0 {
			fmt.Fprintf(w, "; MTU %d", l.MTU)
		}
		fmt.Fprintln(w)
	}
	for _, b := range ri.Broken {
		fmt.Fprintln(w, "BROKEN:", b)
	}
	if c := ri.Counters; c != nil {
		fmt.Fprintf(w, "conformant:     %d packets, %d bytes\n", c.ConformantPackets, c.ConformantBytes)
		fmt.Fprintf(w, "non-conformant: %d packets, %d bytes (oversize %d); demoted %d bytes; shaped %d packets, %.3f s\n",
			c.NonConformantPackets, c.NonConformantBytes, c.OversizePackets, c.DemotedBytes, c.ShapedPackets, c.ShapedTime)
		fmt.Fprintf(w, "buffers:        %d bytes queued; queue of %d packets; queue drops %d\n", c.BacklogBytes, c.QueueLimit, c.QueueDrops)
		fmt.Fprintf(w, "sessions:       %d now, %d in all; refused %d connects, %d sends\n", c.Sessions, c.SessionsTotal, c.RefusedConnects, c.RefusedSends)
	}
	if ri.Error != "" {
		fmt.Fprintln(w, "counters:", ri.Error)
	}
	if len(ri.Sockets) == 0 {
		fmt.Fprintln(w, "sockets:   none bound")
		return
	}
	var rows [][]string
	leaves := false
	for _, s := range ri.Sockets {
		leaves = leaves || s.Session > 0
	}
	for _, s := range ri.Sockets {
		row := []string{strconv.Itoa(int(s.PID)), strconv.Itoa(int(s.UID)), orDash(s.Comm), orDash(s.Exe), s.Proto, orDash(s.Local), orDash(s.Remote)}
		if leaves {
			sess := "-"
			if s.Session > 0 {
				sess = strconv.Itoa(s.Session)
			}
			row = append(row, sess)
		}
		rows = append(rows, row)
	}
	head := []string{"PID", "UID", "COMM", "EXE", "PROTO", "LOCAL", "REMOTE"}
	if leaves {
		head = append(head, "SESSION") // the per-session leaf it holds
	}
	table(w, head, rows)
}
