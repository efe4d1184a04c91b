package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/cliflag"
	"github.com/hostqos/hostqos/internal/policy"
)

// rsvpKinds are the event kinds `rsvp watch` follows.
var rsvpKinds = []string{"rsvp"}

func newRSVPCmd(f *factory) *cobra.Command {
	c := &cobra.Command{
		Use:   "rsvp",
		Short: "RSVP signalling: reserve along the path, sender host — routers — receiver host (RFC 2205/2210)",
		Long: `RSVP makes a reservation on every hop of a path instead of the first link only.
hostqosd speaks it when the config file has [rsvp] enabled = true (and
router = true on a host that forwards). A session names the receiver's
address, port and protocol:

  on the sender host:    hostqos rsvp session add S --dest ADDR:PORT --proto udp
                         hostqos rsvp sender S --tspec r=…,b=…   (Path, every R)
  on the receiver host:  hostqos rsvp session add S --dest ADDR:PORT --proto udp
                         hostqos rsvp reserve S --service guaranteed --flowspec r=…,b=…,R=…

The receiver's Resv travels back hop by hop; every RSVP router and the sender
host admit it on their outgoing link and install it as a reservation object
(hostqos resv list: rsvp-…), or answer with a ResvErr naming the refusing node
and nothing stays installed anywhere. What arrives is published as events
(hostqos rsvp watch): rsvp.path, rsvp.resv, rsvp.resv-error, rsvp.confirm, …

Rates (r, p, R) are bytes/s without a unit (RFC 2210 units), or any rate with
one (2mbit, 250kB/s); sizes (b, m, M) are bytes. Changes need root or group
hostqos. See docs/rsvp.md.`,
	}
	session := &cobra.Command{Use: "session", Short: "Manage RSVP sessions (add; list, show and remove are hostqos rsvp list|show|remove)"}
	session.AddCommand(newRSVPSessionAddCmd(f))
	rm := removeCmd(f, "rsvp session", "Tear a session down (PathTear of this host's sender, ResvTear of its reservations) and forget it",
		func(ctx context.Context, c apiClient, name string) error { return c.RSVP().Remove(ctx, name) })
	var page api.RSVPListQuery
	list := getCmd(f, "list", "List the RSVP agent's counters, the API's sessions and a page of the path and reservation states", cobra.NoArgs,
		func(ctx context.Context, c apiClient, _ []string) (api.RSVPStatus, error) {
			return c.RSVP().Status(ctx, page)
		}, printRSVPStatus)
	list.Flags().IntVar(&page.Limit, "limit", 0, fmt.Sprintf("list at most this many path and this many reservation states (1 … %d; 0: %d)", api.MaxRSVPStates, api.DefaultRSVPPage))
	list.Flags().IntVar(&page.Offset, "offset", 0, "skip this many of each first, in the order of session and sender (the next page: the offset a page names)")
	list.Example = "  hostqos rsvp list\n  hostqos rsvp list --limit 100 --offset 100 -o json"
	show := getCmd(f, "show NAME", "Show a session: its sender and reservation requests, path and reservation states, last upcall", cobra.ExactArgs(1),
		func(ctx context.Context, c apiClient, a []string) (api.RSVPSession, error) {
			return c.RSVP().Get(ctx, a[0])
		}, printRSVPSession)
	watch := eventsCmd(f, "watch", "Follow RSVP upcalls: Path and Resv received, errors, confirmations, timeouts, tears",
		"watch is hostqos events --kind rsvp (see hostqos events --help).", "  hostqos rsvp watch\n  hostqos rsvp watch -o json", rsvpKinds)
	c.AddCommand(session, newRSVPSenderCmd(f), newRSVPReserveCmd(f), list, show, rm, watch)
	return c
}

func newRSVPSessionAddCmd(f *factory) *cobra.Command {
	var dest, proto string
	var output cliflag.Output
	c := &cobra.Command{
		Use:     "add NAME --dest ADDR:PORT --proto udp|tcp",
		Short:   "Register a session: the receiver's unicast address and port and the protocol (nothing is sent yet)",
		Example: "  hostqos rsvp session add rtp --dest 198.18.2.2:5004 --proto udp\n  hostqos rsvp session add rtp6 --dest [2001:db8:2::2]:5004 --proto udp",
		Args:    cobra.ExactArgs(1),
	}
	c.Flags().StringVar(&dest, "dest", "", "the receiver's address and port, ADDR:PORT ([ADDR]:PORT for IPv6); multicast is not supported")
	c.Flags().StringVar(&proto, "proto", "udp", "udp or tcp")
	c.RunE = func(cmd *cobra.Command, args []string) error {
		if dest == "" {
			return usagef("flag --dest: missing; give the receiver's ADDR:PORT, e.g. --dest 198.18.2.2:5004")
		}
		cx, cancel := apiCtx()
		defer cancel()
		s, err := f.client().RSVP().AddSession(cx, api.RSVPSessionRequest{Name: args[0], Dest: dest, Proto: proto})
		if err != nil {
			return err
		}
		return report(f.io.Out, output, changeResult{Action: "added", Kind: "rsvp session", Name: s.Name, Result: s},
			func(w io.Writer) { fmt.Fprintf(w, "session %s: %s/%s\n", s.Name, s.Dest, s.Proto) })
	}
	cliflag.AddOutput(c.Flags(), &output)
	return c
}

func newRSVPSenderCmd(f *factory) *cobra.Command {
	var tspec string
	var sport uint16
	var output cliflag.Output
	c := &cobra.Command{
		Use:   "sender NAME --tspec r=R,b=B[,p=P,m=M,M=MAX] [--sport PORT]",
		Short: "Announce this host as a sender of a session: a Path with its Tspec toward the receiver now and every R",
		Long: `sender announces (or changes) what this host will send in the session: its
Tspec (RFC 2210 token bucket): token rate r, bucket depth b, peak rate p (no
peak limit if left out), minimum policed unit m (64) and maximum packet size M
(1500). The Path carries it hop by hop to the receiver, which may then reserve.`,
		Example: "  hostqos rsvp sender rtp --tspec r=250000,b=3000,M=1500 --sport 4000\n  hostqos rsvp sender rtp --tspec r=2mbit,b=16KiB,p=4mbit",
		Args:    cobra.ExactArgs(1),
	}
	c.Flags().StringVar(&tspec, "tspec", "", "the Tspec: r=RATE,b=BYTES[,p=RATE,m=BYTES,M=BYTES]; a rate without a unit is bytes/s")
	c.Flags().Uint16Var(&sport, "sport", 0, "the source port the data will be sent from (0: any port of this host)")
	c.RunE = func(cmd *cobra.Command, args []string) error {
		t, err := parseTspec("tspec", tspec, false)
		if err != nil {
			return err
		}
		cx, cancel := apiCtx()
		defer cancel()
		s, err := f.client().RSVP().Sender(cx, args[0], api.RSVPSenderRequest{Port: sport, Tspec: t})
		if err != nil {
			return err
		}
		return report(f.io.Out, output, changeResult{Action: "announced", Kind: "rsvp sender", Name: s.Name, Result: s}, func(w io.Writer) {
			fmt.Fprintf(w, "sender of %s announced: Path to %s with %s, refreshed every R\n", s.Name, s.Dest, tspecText(s.Sender.Tspec))
		})
	}
	cliflag.AddOutput(c.Flags(), &output)
	return c
}

func newRSVPReserveCmd(f *factory) *cobra.Command {
	var service, flowspec, style string
	var confirm bool
	var output cliflag.Output
	c := &cobra.Command{
		Use:   "reserve NAME --service guaranteed|controlled-load --flowspec r=R,b=B[,p=P,m=M,M=MAX,R=RATE,S=US] [--style ff|se] [--confirm]",
		Short: "As the receiver, reserve for the session's senders along the path (a Resv to every sender, hop by hop)",
		Long: `reserve asks every hop back to each sender whose Path arrived (and to senders
that arrive later) for the flowspec: guaranteed service (Tspec and Rspec: the
service rate R ≥ r, default r, and slack S in µs) or controlled-load (Tspec).
Each RSVP router and the sender host admit it on their outgoing link; the
answer comes as events: rsvp.confirm (with --confirm) when the sender host
installed it, rsvp.resv-error naming the refusing node and the flowspec.`,
		Example: "  hostqos rsvp reserve rtp --service guaranteed --flowspec r=250000,b=3000,R=275000 --confirm\n  hostqos rsvp reserve rtp --service controlled-load --flowspec r=2mbit,b=16KiB",
		Args:    cobra.ExactArgs(1),
	}
	c.Flags().StringVar(&service, "service", "", "guaranteed or controlled-load")
	c.Flags().StringVar(&flowspec, "flowspec", "", "the flowspec: r=RATE,b=BYTES[,p=RATE,m=BYTES,M=BYTES,R=RATE,S=MICROSECONDS]")
	c.Flags().StringVar(&style, "style", "ff", "ff (fixed filter: a reservation per sender) or se (shared explicit: one for all senders)")
	c.Flags().BoolVar(&confirm, "confirm", false, "ask for a confirmation (ResvConf, event rsvp.confirm) from the sender host")
	c.RunE = func(cmd *cobra.Command, args []string) error {
		if service != string(policy.ServiceGuaranteed) && service != string(policy.ServiceControlledLoad) {
			return usagef("flag --service = %q: want guaranteed or controlled-load", service)
		}
		if style != "ff" && style != "se" {
			return usagef("flag --style = %q: want ff or se", style)
		}
		t, err := parseTspec("flowspec", flowspec, service == string(policy.ServiceGuaranteed))
		if err != nil {
			return err
		}
		cx, cancel := apiCtx()
		defer cancel()
		s, err := f.client().RSVP().Reserve(cx, args[0], api.RSVPReserveRequest{Service: service, Flowspec: t, Style: style, Confirm: confirm})
		if err != nil {
			return err
		}
		senders := 0
		for _, r := range s.Resvs {
			if r.Role == "receiver" {
				senders++
			}
		}
		return report(f.io.Out, output, changeResult{Action: "reserved", Kind: "rsvp session", Name: s.Name, Result: s}, func(w io.Writer) {
			if senders == 0 {
				fmt.Fprintf(w, "reservation of %s asked; no sender's Path has arrived yet: it is sent when one does (hostqos rsvp watch)\n", s.Name)
				return
			}
			fmt.Fprintf(w, "reservation of %s sent to %d sender(s); the answer comes as events (hostqos rsvp watch)\n", s.Name, senders)
		})
	}
	cliflag.AddOutput(c.Flags(), &output)
	return c
}

// parseTspec reads "r=…,b=…,p=…,m=…,M=…" (and R, S when rspec): rates
// without a unit are bytes/s, with one any rate; sizes bytes.
func parseTspec(flag, s string, rspec bool) (api.Tspec, error) {
	var t api.Tspec
	if s == "" {
		return t, usagef("flag --%s: missing; give at least r and b, e.g. --%s r=250000,b=3000", flag, flag)
	}
	seen := map[string]bool{}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok || v == "" {
			return t, usagef("flag --%s: %q is not KEY=VALUE", flag, kv)
		}
		if seen[k] {
			return t, usagef("flag --%s: %s given twice", flag, k)
		}
		seen[k] = true
		var err error
		switch k {
		case "r":
			t.Rate, err = bytesPerSecond(v)
		case "p":
			t.Peak, err = bytesPerSecond(v)
		case "b":
			t.Bucket, err = sizeBytes(v)
		case "m":
			t.MinUnit, err = sizeBytes(v)
		case "M":
			t.MaxUnit, err = sizeBytes(v)
		case "R", "S":
			if !rspec {
				return t, usagef("flag --%s: %s is an Rspec term of guaranteed service only", flag, k)
			}
			if k == "R" {
				t.ServiceRate, err = bytesPerSecond(v)
			} else {
				var n int
				n, err = strconv.Atoi(v)
				if err == nil && n < 0 {
					err = fmt.Errorf("negative")
				}
				t.Slack = n
			}
		default:
			keys := "r, b, p, m, M"
			if rspec {
				keys += ", R, S"
			}
			return t, usagef("flag --%s: unknown term %q; use %s", flag, k, keys)
		}
		if err != nil {
			return t, usagef("flag --%s: %s = %q: %w", flag, k, v, err)
		}
	}
	if !seen["r"] || !seen["b"] {
		return t, usagef("flag --%s: give at least r (token rate) and b (bucket depth), e.g. r=250000,b=3000", flag)
	}
	return t, nil
}

// bytesPerSecond reads a rate: a plain number is bytes/s (RFC 2210), a
// number with a unit any rate.
func bytesPerSecond(v string) (uint64, error) {
	if n, err := strconv.ParseUint(v, 10, 64); err == nil {
		return n, nil
	}
	r, err := policy.ParseRate(v)
	if err != nil {
		return 0, err
	}
	return uint64(r) / 8, nil
}

func sizeBytes(v string) (uint64, error) {
	s, err := policy.ParseSize(v)
	return uint64(s), err
}

func tspecText(t api.Tspec) string {
	s := fmt.Sprintf("r=%d b=%d", t.Rate, t.Bucket)
	if t.Peak > 0 {
		s += fmt.Sprintf(" p=%d", t.Peak)
	}
	s += fmt.Sprintf(" m=%d M=%d", t.MinUnit, t.MaxUnit)
	if t.ServiceRate > 0 {
		s += fmt.Sprintf(" R=%d S=%d", t.ServiceRate, t.Slack)
	}
	return s
}

func printRSVPStatus(w io.Writer, st api.RSVPStatus) {
	defer printRestartNeeded(w, st.RestartNeeded)
	if !st.Enabled {
		why := st.NotRunning
		if why == "" { // an older daemon
			why = "the config file does not set [rsvp] enabled = true"
		}
		fmt.Fprintln(w, "RSVP is not running:", why)
		return
	}
	role := "host"
	if st.Router {
		role = "router"
	}
	c := st.Counters
	fmt.Fprintf(w, "RSVP %s, refresh R %s, state lifetime %s\n", role, st.Refresh, st.Lifetime)
	fmt.Fprintf(w, "messages: %d received, %d malformed, %d from unmanaged links, %d dropped, %d send failures; %d path, %d reservation states\n",
		c.Received, c.Malformed, c.Foreign, c.Dropped, c.SendFail, c.Paths, c.Resvs)
	fmt.Fprintf(w, "refused: %d Paths of sessions not here, %d over the previous hop's cap, %d over the source's cap, %d tears not from the state's hop; %d errors without a route back; %d Resvs blockaded, %d over the next hops' cap\n",
		c.NotHere, c.OverHop, c.OverSource, c.BadTear, c.NoRoute, c.Blockaded, c.OverNhop)
	if len(st.Sessions) > 0 {
		var rows [][]string
		for _, s := range st.Sessions {
			snd, resv := "-", "-"
			if s.Sender != nil {
				snd = tspecText(s.Sender.Tspec)
			}
			if s.Reserve != nil {
				resv = s.Reserve.Service + " " + tspecText(s.Reserve.Flowspec)
			}
			rows = append(rows, []string{s.Name, s.Dest + "/" + s.Proto, snd, resv, orDash(s.LastEvent)})
		}
		table(w, []string{"SESSION", "DEST", "SENDER TSPEC", "RESERVE", "LAST EVENT"}, rows)
	}
	printRSVPStates(w, st.Paths, st.Resvs)
	if len(st.Sessions) == 0 && len(st.Paths) == 0 && len(st.Resvs) == 0 && st.Counters.Paths == 0 && st.Counters.Resvs == 0 {
		fmt.Fprintln(w, noRSVPSessionHint)
	}
	if st.Truncated {
		fmt.Fprintf(w, "(more states follow: hostqos rsvp list --offset %d)\n", st.NextOffset)
	}
}

func printRSVPStates(w io.Writer, paths []api.RSVPPath, resvs []api.RSVPResv) {
	if len(paths) > 0 {
		var rows [][]string
		for _, p := range paths {
			rows = append(rows, []string{p.Session, p.Sender, p.Role, tspecText(p.Tspec), orDash(p.PrevHop), expires(p.Expires)})
		}
		table(w, []string{"PATH SESSION", "SENDER", "ROLE", "TSPEC", "PREVIOUS HOP", "EXPIRES"}, rows)
	}
	if len(resvs) > 0 {
		var rows [][]string
		for _, r := range resvs {
			rows = append(rows, []string{r.Session, r.Sender, r.Role, r.Service, r.Style, tspecText(r.Flowspec), orDash(r.NextHop), orDash(r.Reservation), expires(r.Expires)})
		}
		table(w, []string{"RESV SESSION", "SENDER", "ROLE", "SERVICE", "STYLE", "FLOWSPEC", "NEXT HOP", "INSTALLED AS", "EXPIRES"}, rows)
	}
}

func expires(s float64) string {
	if s == 0 {
		return "-"
	}
	return strconv.FormatFloat(s, 'f', 1, 64) + "s"
}

func printRSVPSession(w io.Writer, s api.RSVPSession) {
	fmt.Fprintf(w, "session %s: %s/%s\n", s.Name, s.Dest, s.Proto)
	if s.Sender != nil {
		fmt.Fprintf(w, "sender:   port %d, tspec %s\n", s.Sender.Port, tspecText(s.Sender.Tspec))
	}
	if r := s.Reserve; r != nil {
		fmt.Fprintf(w, "reserve:  %s %s, style %s, confirm %v\n", r.Service, tspecText(r.Flowspec), orDash(r.Style), r.Confirm)
	}
	fmt.Fprintf(w, "last:     %s\n", orDash(s.LastEvent))
	printRSVPStates(w, s.Paths, s.Resvs)
}
