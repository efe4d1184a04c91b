package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/policy"
)

func newLinkCmd(f *factory) *cobra.Command {
	link := &cobra.Command{Use: "link", Short: "Manage the network interfaces hostqos shapes and marks"}
	list := getCmd(f, "list", "List managed links", cobra.NoArgs,
		func(ctx context.Context, c apiClient, _ []string) ([]api.LinkStatus, error) {
			return c.Links().List(ctx)
		},
		printLinks)
	rm := removeCmd(f, "link", "Stop managing an interface (removes hostqos's classifier and HTB tree from it)",
		func(ctx context.Context, c apiClient, name string) error { return c.Links().Remove(ctx, name) })
	link.AddCommand(newLinkSetCmd(f), list, rm)
	return link
}

// linkSetOptions are those of `hostqos link set`.
type linkSetOptions struct {
	io               ioStreams
	client           func() apiClient
	name             string
	rate, reservable string
	synRate, synSrc  string
	ingressRate      string
	temp             bool
}

func newLinkSetCmd(f *factory) *cobra.Command {
	o := &linkSetOptions{io: f.io, client: f.client}
	set := &cobra.Command{
		Use:   "set IFACE [--egress-rate RATE] [--ingress-rate RATE] [--reservable FRACTION] [--syn-rate N/s] [--syn-rate-per-source N/s]",
		Short: "Manage an interface: classify and mark its egress, and shape it at RATE",
		Long: `set makes IFACE a managed link. Its egress traffic is classified, marked and
counted; with --egress-rate hostqos also builds an HTB tree at that rate, so
priorities, guarantees (minbw) and ceilings (maxbw) take effect. Set the rate a
little below the real bottleneck (e.g. 95 % of your uplink) so the queue forms
here, where hostqos controls it. Without a rate the link is marked, not shaped.

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
A set replaces all of the link's settings: give every flag you want to keep.`,
		Example: "  hostqos link set eth0 --egress-rate 20mbit\n  hostqos link set eth0 --egress-rate 19mbit --ingress-rate 95mbit\n  hostqos link set wg0 --egress-rate 1gbit --reservable 0.9",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.name = args[0]
			return o.run()
		},
	}
	set.Flags().StringVar(&o.rate, "egress-rate", "", "egress capacity to shape at, e.g. 20mbit (units: bit, kbit, mbit, gbit)")
	set.Flags().StringVar(&o.ingressRate, "ingress-rate", "", "download budget shared by class priority, a little below the downlink's bottleneck, e.g. 95mbit")
	set.Flags().StringVar(&o.reservable, "reservable", "", "fraction of the rate guarantees may claim (default 0.8)")
	set.Flags().StringVar(&o.synRate, "syn-rate", "", "throttle pure TCP SYNs arriving on the link to N per second, e.g. 1000/s (XDP; established connections are never touched)")
	set.Flags().StringVar(&o.synSrc, "syn-rate-per-source", "", "throttle pure TCP SYNs from each source (IPv4 address, IPv6 /64) to N per second, e.g. 20/s")
	set.Flags().BoolVar(&o.temp, "temporary", false, "do not persist: forget the change when the daemon stops (a crash keeps it)")
	return set
}

func (o *linkSetOptions) run() error {
	l := policy.Link{Name: o.name}
	if o.rate != "" {
		r, err := policy.ParseRate(o.rate)
		if err != nil {
			return fmt.Errorf("flag --egress-rate = %q: %w", o.rate, err)
		}
		l.EgressRate = r
	}
	if o.ingressRate != "" {
		r, err := policy.ParseRate(o.ingressRate)
		if err != nil {
			return fmt.Errorf("flag --ingress-rate = %q: %w", o.ingressRate, err)
		}
		l.IngressRate = r
	}
	if o.reservable != "" {
		f, err := strconv.ParseFloat(o.reservable, 64)
		if err != nil || f <= 0 || f > 1 {
			return fmt.Errorf("flag --reservable = %q: want a fraction in (0, 1], e.g. 0.8", o.reservable)
		}
		l.Reservable = f
	}
	for _, f := range []struct {
		flag, v string
		dst     *int
	}{{"--syn-rate", o.synRate, &l.SynRate}, {"--syn-rate-per-source", o.synSrc, &l.SynRatePerSource}} {
		if f.v == "" {
			continue
		}
		n, err := strconv.Atoi(strings.TrimSuffix(f.v, "/s"))
		if err != nil || n < 0 || n > policy.MaxSynRate {
			return fmt.Errorf("flag %s = %q: want SYNs per second, 0 .. %d, e.g. 1000/s", f.flag, f.v, policy.MaxSynRate)
		}
		*f.dst = n
	}
	c, cancel := apiCtx()
	defer cancel()
	ls, err := o.client().Links().Set(c, l, api.Temporary(o.temp))
	if err != nil {
		return err
	}
	printLinks(o.io.Out, ls)
	return nil
}
