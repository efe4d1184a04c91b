package main

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/cliflag"
	"github.com/hostqos/hostqos/internal/policy"
)

// The XDP shield's commands: block (the drop list) and protect
// (protected clients); see docs/ddos.md.

func newBlockCmd(f *factory) *cobra.Command {
	block := &cobra.Command{Use: "block", Short: "Drop (or rate-starve) traffic from address prefixes at XDP, before the network stack"}
	list := getCmd(f, "list", "List the drop list with per-entry counters", cobra.NoArgs,
		func(ctx context.Context, c apiClient, _ []string) ([]api.BlockInfo, error) {
			return c.Shield().Blocks(ctx)
		},
		orHint(noBlockHint, printBlocks))
	rm := removeCmd(f, "block", "Remove a drop-list entry added with block add",
		func(ctx context.Context, c apiClient, name string) error {
			p, err := netip.ParsePrefix(name)
			if err != nil {
				return usagef("argument CIDR = %q: not an address prefix, e.g. 203.0.113.0/24", name)
			}
			return c.Shield().Unblock(ctx, p)
		})
	rm.Use = "remove CIDR"
	block.AddCommand(newBlockAddCmd(f), list, rm)
	return block
}

type blockAddOptions struct {
	io     ioStreams
	client func() apiClient
	output cliflag.Output
	rate   string
	ttl    time.Duration
}

func newBlockAddCmd(f *factory) *cobra.Command {
	o := &blockAddOptions{io: f.io, client: f.client}
	c := &cobra.Command{
		Use:   "add CIDR [--ttl DURATION] [--maxbw-in RATE]",
		Short: "Drop packets from a prefix on every managed link (or, with --maxbw-in, pass them at most at RATE)",
		Long: `add puts a source prefix (IPv4 or IPv6) on the drop list of hostqos's XDP
program, which runs on every managed link before the network stack: packets from
the prefix are counted and dropped. With --maxbw-in they are quarantined instead:
passed at most at RATE (all the prefix's sources together), the rest dropped, so
the source can still be observed. The longest matching prefix wins. Adding a
prefix that is on the list replaces its rate and TTL.

With --ttl the entry is removed after DURATION (kept across daemon restarts).
The list holds up to 131072 entries per family. The entries stay enforced if the
daemon dies; hostqos down removes them.`,
		Example: "  hostqos block add 203.0.113.0/24\n  hostqos block add 2001:db8:bad::/48 --ttl 1h\n  hostqos block add 198.51.100.7/32 --maxbw-in 1mbit",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.run(args[0])
		},
	}
	ttlFlag(c, &o.ttl, "remove the entry after this long, e.g. 30m, 24h or 7d (default: never)")
	cliflag.AddOutput(c.Flags(), &o.output)
	c.Flags().StringVar(&o.rate, "maxbw-in", "", "quarantine: pass the prefix's packets at most at RATE, e.g. 1mbit (default: drop all)")
	return c
}

func (o *blockAddOptions) run(cidr string) error {
	p, err := netip.ParsePrefix(cidr)
	if err != nil {
		return usagef("argument CIDR = %q: not an address prefix, e.g. 203.0.113.0/24 or 2001:db8:bad::/48", cidr)
	}
	if p != p.Masked() {
		return usagef("argument CIDR = %q: has bits set beyond the prefix length; write %s", cidr, p.Masked())
	}
	req := api.BlockRequest{Prefix: p}
	if o.rate != "" {
		r, err := policy.ParseRate(o.rate)
		if err != nil {
			return usagef("flag --maxbw-in = %q: %w", o.rate, err)
		}
		if r == 0 {
			return usagef("flag --maxbw-in = %q: %s; %s", o.rate, policy.ZeroBlockRateReason,
				strings.ReplaceAll(policy.ZeroBlockRateFix, "maxbw_in", "--maxbw-in"))
		}
		req.MaxBWIn = r
	}
	req.TTLSeconds = int64(o.ttl / time.Second)
	cx, cancel := apiCtx()
	defer cancel()
	bi, err := o.client().Shield().Block(cx, req)
	if err != nil {
		return err
	}
	return report(o.io.Out, o.output, changeResult{Action: "added", Kind: "block", Name: p.String(), Result: bi},
		func(w io.Writer) { printBlocks(w, []api.BlockInfo{bi}) })
}

// ttlFlag adds --ttl: a duration from a second to api.MaxTTLSeconds (0,
// the default: never).
func ttlFlag(c *cobra.Command, p *time.Duration, help string) {
	durationFlag(c.Flags(), p, "ttl", "", 0, help).
		within(time.Second, api.MaxTTLSeconds*time.Second, fmt.Sprintf("want a duration from 1s to %dh, e.g. 30m or 24h", api.MaxTTLSeconds/3600))
}

func printBlocks(w io.Writer, bs []api.BlockInfo) {
	var rows [][]string
	for _, b := range bs {
		action := "drop"
		if b.MaxBWIn != 0 {
			action = "quarantine " + b.MaxBWIn.String()
		}
		exp := "-"
		if b.Expires != nil {
			exp = b.Expires.Local().Format(time.DateTime)
		}
		rows = append(rows, []string{b.Prefix.String(), action, b.Source, exp,
			strconv.FormatUint(b.Packets, 10), humanBytes(b.Bytes), strconv.FormatUint(b.Dropped, 10)})
	}
	table(w, []string{"PREFIX", "ACTION", "SOURCE", "EXPIRES", "PACKETS", "BYTES", "DROPPED"}, rows)
}

func newProtectCmd(f *factory) *cobra.Command {
	pr := &cobra.Command{Use: "protect", Short: "Let a client's connections bypass SYN throttling (Crossbow's white list)"}
	list := getCmd(f, "list", "List protected clients (yours, unless you are root or in group hostqos)", cobra.NoArgs,
		func(ctx context.Context, c apiClient, _ []string) ([]api.ProtectedInfo, error) {
			return c.Shield().Protected(ctx)
		},
		orHint(noProtectHint, printProtected))
	rm := removeCmd(f, "protected client", "End a client's protection (ADDR, or ADDR:PORT / [ADDR]:PORT as added)",
		func(ctx context.Context, c apiClient, name string) error {
			a, port, err := parseClient(name)
			if err != nil {
				return err
			}
			return c.Shield().Unprotect(ctx, a, port)
		})
	rm.Use = "remove ADDR[:PORT]"
	pr.AddCommand(newProtectAddCmd(f), list, rm)
	return pr
}

func parseClient(s string) (netip.Addr, uint16, error) {
	if a, err := netip.ParseAddr(s); err == nil {
		return a, 0, nil
	}
	ap, err := netip.ParseAddrPort(s)
	if err != nil {
		return netip.Addr{}, 0, usagef("argument %q: want ADDR, ADDR:PORT or [IPv6]:PORT", s)
	}
	return ap.Addr(), ap.Port(), nil
}

type protectAddOptions struct {
	io     ioStreams
	client func() apiClient
	output cliflag.Output
	port   uint16
	ttl    time.Duration
	class  string
}

func newProtectAddCmd(f *factory) *cobra.Command {
	o := &protectAddOptions{io: f.io, client: f.client}
	c := &cobra.Command{
		Use:   "add ADDR [--port PORT] [--class CLASS] [--ttl DURATION]",
		Short: "Protect a client: never SYN-throttled, and our answers to it go into a protected class",
		Long: `add protects a client address (e.g. one your server has authenticated): its
SYNs to the local TCP port PORT bypass the links' SYN limits, so it can still
connect during a SYN flood. Root and group hostqos may protect any client, on
every port (no --port). Any other user may protect a client only on a port on
which they have a listening TCP socket, at most 256 at a time.

What the host sends to the client (from PORT, or from any port without
--port) goes into CLASS: its DSCP, priority and HTB leaf. The default is the
class interactive (the default class when the policy has no interactive; for
an ordinary user, the default class unless interactive is user_allowed). An
ordinary user may name only classes with user_allowed = true, and their
protection applies to their own sockets after every admin rule; an admin's
protection is evaluated before the admin's ordinary rules.`,
		Example: "  hostqos protect add 198.51.100.7 --port 443 --ttl 1h\n  hostqos protect add 2001:db8::7 --port 22 --class voice",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			a, err := netip.ParseAddr(args[0])
			if err != nil {
				return usagef("argument ADDR = %q: not an IP address", args[0])
			}
			cx, cancel := apiCtx()
			defer cancel()
			pi, err := o.client().Shield().Protect(cx, api.ProtectRequest{Addr: a, Port: o.port, TTLSeconds: int64(o.ttl / time.Second), Class: o.class})
			if err != nil {
				return err
			}
			return report(o.io.Out, o.output, changeResult{Action: "added", Kind: "protected client", Name: args[0], Result: pi},
				func(w io.Writer) { printProtected(w, []api.ProtectedInfo{pi}) })
		},
	}
	c.Flags().Uint16Var(&o.port, "port", 0, "the local TCP port the client connects to (default: every port; root or group hostqos only)")
	ttlFlag(c, &o.ttl, "end the protection after this long, e.g. 1h (default: never)")
	cliflag.AddOutput(c.Flags(), &o.output)
	c.Flags().StringVar(&o.class, "class", "", "the class the client's flows go into (default: interactive)")
	return c
}

func printProtected(w io.Writer, ps []api.ProtectedInfo) {
	var rows [][]string
	for _, p := range ps {
		port := "any"
		if p.Port != 0 {
			port = strconv.Itoa(int(p.Port))
		}
		exp := "-"
		if p.Expires != nil {
			exp = p.Expires.Local().Format(time.DateTime)
		}
		rows = append(rows, []string{p.Addr.String(), port, strconv.FormatUint(uint64(p.UID), 10), p.Class, exp})
	}
	table(w, []string{"CLIENT", "PORT", "UID", "CLASS", "EXPIRES"}, rows)
}
