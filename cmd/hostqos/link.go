package main

import (
	"fmt"
	"net/url"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/policy"
)

func init() {
	link := &cobra.Command{Use: "link", Short: "Manage the network interfaces hostqos shapes and marks"}

	var rate, reservable string
	var temp bool
	set := &cobra.Command{
		Use:   "set IFACE [--egress-rate RATE] [--reservable FRACTION]",
		Short: "Manage an interface: classify and mark its egress, and shape it at RATE",
		Long: `set makes IFACE a managed link. Its egress traffic is classified, marked and
counted; with --egress-rate hostqos also builds an HTB tree at that rate, so
priorities, guarantees (minbw) and ceilings (maxbw) take effect. Set the rate a
little below the real bottleneck (e.g. 95 % of your uplink) so the queue forms
here, where hostqos controls it. Without a rate the link is marked, not shaped.

--reservable is the share of the rate that guarantees may claim in total
(default 0.8); admission control refuses guarantees beyond it.`,
		Example: "  hostqos link set eth0 --egress-rate 20mbit\n  hostqos link set wg0 --egress-rate 1gbit --reservable 0.9",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			l := policy.Link{Name: args[0]}
			if rate != "" {
				r, err := policy.ParseRate(rate)
				if err != nil {
					return fmt.Errorf("flag --egress-rate = %q: %w", rate, err)
				}
				l.EgressRate = r
			}
			if reservable != "" {
				f, err := strconv.ParseFloat(reservable, 64)
				if err != nil || f <= 0 || f > 1 {
					return fmt.Errorf("flag --reservable = %q: want a fraction in (0, 1], e.g. 0.8", reservable)
				}
				l.Reservable = f
			}
			c, cancel := ctx()
			defer cancel()
			var ls []api.LinkStatus
			if err := client().Do(c, "PUT", "/v1/links/"+url.PathEscape(l.Name)+tempQuery(temp), l, &ls); err != nil {
				return err
			}
			printLinks(ls)
			return nil
		},
	}
	set.Flags().StringVar(&rate, "egress-rate", "", "egress capacity to shape at, e.g. 20mbit (units: bit, kbit, mbit, gbit)")
	set.Flags().StringVar(&reservable, "reservable", "", "fraction of the rate guarantees may claim (default 0.8)")
	set.Flags().BoolVar(&temp, "temporary", false, "do not persist: forget the change when the daemon stops (a crash keeps it)")

	list := getCmd("list", "List managed links", cobra.NoArgs, fixed("/v1/links"), printLinks)
	rm := removeCmd("link", "links", "Stop managing an interface (removes hostqos's classifier and HTB tree from it)")
	link.AddCommand(set, list, rm)
	rootCmd.AddCommand(link)
}

func tempQuery(temp bool) string {
	if temp {
		return "?temporary=1"
	}
	return ""
}
