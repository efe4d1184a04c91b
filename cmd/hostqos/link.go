package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/cliflag"
	"github.com/hostqos/hostqos/internal/policy"
)

func newLinkCmd(f *factory) *cobra.Command {
	link := &cobra.Command{Use: "link", Short: "Manage the network interfaces hostqos shapes and marks"}
	list := getCmd(f, "list", "List managed links", cobra.NoArgs,
		func(ctx context.Context, c apiClient, _ []string) ([]api.LinkStatus, error) {
			return c.Links().List(ctx)
		},
		func(w io.Writer, ls []api.LinkStatus) { orHint(noLinkHint(f.iface()), printLinks)(w, ls) })
	rm := removeCmd(f, "link", "Stop managing an interface (removes hostqos's classifier and HTB tree from it)",
		func(ctx context.Context, c apiClient, name string) error { return c.Links().Remove(ctx, name) })
	link.AddCommand(newLinkSetCmd(f), list, rm)
	return link
}

// linkSetOptions are those of `hostqos link set`.
type linkSetOptions struct {
	io     ioStreams
	client func() apiClient
	output cliflag.Output
	name   string
	flags  changeFlags
	bounds autoBoundFlags
	force  bool
}

// autoBoundFlags are --min and --max: the bounds of the automatic rate(s)
// set in the same command (--egress-rate auto, --ingress-rate auto).
type autoBoundFlags struct{ min, max *parsed[policy.Rate] }

func (b *autoBoundFlags) register(cmd *cobra.Command) {
	b.min, b.max = rateValue(), rateValue()
	cmd.Flags().Var(b.min, "min", "with --egress-rate auto or --ingress-rate auto: the lowest rate it may set (default 1mbit)")
	cmd.Flags().Var(b.max, "max", "with --egress-rate auto or --ingress-rate auto: the highest rate it may set (default 1gbit)")
}

// apply turns --min and --max into the fields of the directions set to
// auto in fields.
func (b *autoBoundFlags) apply(cmd *cobra.Command, fields api.Fields) error {
	given := map[string]*parsed[policy.Rate]{"min": b.min, "max": b.max}
	for _, name := range []string{"min", "max"} {
		if !cmd.Flags().Changed(name) {
			continue
		}
		n := 0
		for _, dir := range []string{"egress", "ingress"} {
			if r, ok := fields[dir+"_rate"].(policy.LinkRate); ok && r.Auto() {
				fields[dir+"_"+name] = given[name].field()
				n++
			}
		}
		if n == 0 {
			return fmt.Errorf("--%s %s: bounds an automatic rate: give --egress-rate auto or --ingress-rate auto with it", name, given[name].raw)
		}
	}
	return nil
}

// linkFlags is the flag table of link set; a flag given as 0 (or "")
// clears its setting.
func linkFlags() fieldFlags {
	synRate := func() *parsed[int] {
		return value("N/s", func(v string) (int, error) {
			n, err := strconv.Atoi(strings.TrimSuffix(v, "/s"))
			if err != nil || n < 0 || n > policy.MaxSynRate {
				return 0, fmt.Errorf("want SYNs per second, 0 .. %d, e.g. 1000/s", policy.MaxSynRate)
			}
			return n, nil
		}).zeroClears()
	}
	return fieldFlags{
		{"egress-rate", "egress_rate", "egress capacity to shape at, e.g. 20mbit (units: bit, kbit, mbit, gbit), or auto to find and follow it (docs/autorate.md); 0 stops shaping", linkRateValue().zeroClears()},
		{"ingress-rate", "ingress_rate", "download budget shared by class priority, a little below the downlink's bottleneck, e.g. 95mbit; 0 for none", linkRateValue().zeroClears()},
		{"reservable", "reservable", "fraction of the rate guarantees may claim (default 0.8); 0 for the default",
			value("fraction", func(v string) (float64, error) {
				if v == "0" {
					return 0, nil // the default
				}
				x, err := strconv.ParseFloat(v, 64)
				if err != nil || x <= 0 || x > 1 {
					return 0, errors.New("want a fraction in (0, 1], e.g. 0.8")
				}
				return x, nil
			}).zeroClears()},
		{"syn-rate", "syn_rate", "throttle pure TCP SYNs arriving on the link to N per second, e.g. 1000/s (XDP; established connections are never touched); 0 for no limit", synRate()},
		{"syn-rate-per-source", "syn_rate_per_source", "throttle pure TCP SYNs from each source (IPv4 address, IPv6 /64) to N per second, e.g. 20/s; 0 for no limit", synRate()},
	}
}

func newLinkSetCmd(f *factory) *cobra.Command {
	o := &linkSetOptions{io: f.io, client: f.client}
	set := &cobra.Command{
		Use:   "set IFACE [--egress-rate RATE|auto [--min RATE] [--max RATE]] [--ingress-rate RATE] [--reservable FRACTION] [--syn-rate N/s] [--syn-rate-per-source N/s] [--force]",
		Short: "Manage an interface: classify and mark its egress, and shape it at RATE",
		Long: `set makes IFACE a managed link, or changes one. Its egress traffic is
classified, marked and counted; with --egress-rate hostqos also builds an HTB
tree at that rate, so priorities, guarantees (minbw) and ceilings (maxbw) take
effect. Set the rate a little below the real bottleneck (e.g. 95 % of your
uplink) so the queue forms here, where hostqos controls it. Without a rate the
link is marked, not shaped.

set changes only the flags given and keeps the link's other settings, as rule
set and class set do; a flag given as 0 (or "") clears its setting: --egress-rate
0 stops shaping.

--egress-rate auto has the daemon find the uplink's capacity and follow it,
shaping just below it: it cuts fast when the round trips of the host's TCP
connections grow, probes up slowly while the link is busy, and holds while it
is idle, within --min and --max (defaults 1mbit and 1gbit). hostqos status
and hostqos stat links show the rate in force and the estimate; each change
is a link.rate event. See docs/autorate.md.

--ingress-rate is the link's download budget (received frames): set it a little
below the downlink's bottleneck (e.g. 95 % of your downlink) and the classes'
priorities apply to downloads. Each class may receive what the higher classes
leave of it: TCP senders are slowed by the receive window hostqos advertises,
UDP beyond it is dropped and counted. So no queue builds up in front of the
bottleneck and a call is not stuck behind a download. See docs/receive.md.

--reservable is the share of the rate that guarantees may claim in total
(default 0.8); admission control refuses guarantees beyond it.

--syn-rate and --syn-rate-per-source throttle pure TCP SYNs (SYN without ACK)
arriving on the link, in hostqos's XDP program: per source (an IPv4 address, an
IPv6 /64) first, then for the link. Packets of established connections are never
touched; clients protected with hostqos protect add bypass both. See docs/ddos.md.

A change that takes away shaping admitted guarantees rely on (the rate removed
while minbw or reservations count on the link, or lowered under the scheduled
qsockets' rates) is refused, naming what is admitted and what the link would
reserve; --force applies it. A rate below the guarantees themselves is refused
even with --force: lower them first.`,
		Example: "  hostqos link set eth0 --egress-rate 20mbit\n  hostqos link set wlan0 --egress-rate auto --min 2mbit --max 50mbit\n  hostqos link set eth0 --egress-rate 19mbit --ingress-rate 95mbit\n  hostqos link set eth0 --syn-rate 2000/s   # keeps the rates\n  hostqos link set wg0 --egress-rate 1gbit --reservable 0.9",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.name = args[0]
			fields := o.flags.fields(cmd)
			if err := o.bounds.apply(cmd, fields); err != nil {
				return err
			}
			return o.run(fields)
		},
	}
	o.flags.register(set, linkFlags(), "change")
	o.bounds.register(set)
	cliflag.AddOutput(set.Flags(), &o.output)
	set.Flags().BoolVar(&o.force, "force", false, "apply a change that takes away shaping admitted guarantees rely on (removes the rate under minbw or reservations, or lowers it under the scheduled qsockets' rates)")
	return set
}

func (o *linkSetOptions) run(fields api.Fields) error {
	c, cancel := apiCtx()
	defer cancel()
	ls, err := o.client().Links().Set(c, o.name, fields, api.Temporary(o.flags.temp), api.Force(o.force))
	if err != nil {
		return err
	}
	return report(o.io.Out, o.output, changeResult{Action: "changed", Kind: "link", Name: o.name, Fields: fields,
		Temporary: o.flags.temp, Forced: o.force, Result: ls}, func(w io.Writer) { printLinks(w, ls) })
}
