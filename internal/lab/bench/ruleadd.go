package bench

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hostqos/hostqos/internal/policy"
)

// benchRuleAdd: the latency of adding one rule through the real daemon's
// API with 1 or 100 managed (shaped) links and 10 or 10,000 rules; a change
// re-applies only the links and datapath entries it touches.
func benchRuleAdd(e *env, r *Report) error {
	adds := e.n(7, 3)
	r.setup("%s", hostLine())
	r.setup("real hostqosd in a namespace; N managed links, each with egress_rate 100mbit (an HTB tree): the veth to the peer plus N-1 veth ends made in the namespace; a config of M rules (UDP remote port → class bulk); then %d times `rule add` of one more such rule through the API (typed client, over the Unix socket, timed in the client: validation, compile, datapath write, state write), and %d times a rule with its own ceiling (maxbw, a leaf on every shaped link, so every link is re-shaped); the median", adds, adds)
	r.Columns = []string{"links × rules", "add a rule (median)", "add a rule with maxbw (median)", "target", "before (issue 9)"}
	tb, err := e.pair("benchruleadd", "app", "peer")
	if err != nil {
		return err
	}
	defer tb.Close()
	app := tb.Node("app")
	var extra []string
	for i := 1; i < 100; i++ {
		name := fmt.Sprintf("hqra%d", i)
		if out, err := app.Command("ip", "link", "add", name, "type", "veth", "peer", "name", name+"p").CombinedOutput(); err != nil {
			return fmt.Errorf("add veth %s: %w: %s", name, err, out)
		}
		if out, err := app.Command("ip", "link", "set", name, "up").CombinedOutput(); err != nil {
			return fmt.Errorf("set %s up: %w: %s", name, err, out)
		}
		extra = append(extra, name)
	}
	for _, nl := range []int{1, 100} {
		for _, nr := range []int{10, 10_000} {
			if err := e.ctx.Err(); err != nil {
				return err
			}
			var cfg strings.Builder
			links := append([]string{app.Iface("peer")}, extra[:nl-1]...)
			for _, l := range links {
				fmt.Fprintf(&cfg, "[[link]]\nname = %q\negress_rate = \"100mbit\"\n\n", l)
			}
			for i := 0; i < nr; i++ {
				fmt.Fprintf(&cfg, "[[rule]]\nname = \"r%d\"\nproto = \"udp\"\nrport = %d\nclass = \"bulk\"\n\n", i, 1+i%60000)
			}
			d, err := e.daemon(app, cfg.String())
			if err != nil {
				return err
			}
			timeAdds := func(prefix string, maxbw policy.Rate) (time.Duration, error) {
				var ds []time.Duration
				for i := 0; i < adds; i++ {
					rule := policy.Rule{Name: fmt.Sprintf("%s%d", prefix, i), Proto: "udp", RPort: policy.PortRange{From: uint16(61000 + i), To: uint16(61000 + i)},
						Class: "bulk", MaxBW: maxbw, DSCP: policy.NoDSCP, DSCPIn: policy.NoDSCP}
					t0 := time.Now()
					if err := d.Client.Rules().Add(e.ctx, rule); err != nil {
						return 0, fmt.Errorf("add rule %s: %w", rule.Name, err)
					}
					ds = append(ds, time.Since(t0))
				}
				slices.Sort(ds)
				return ds[len(ds)/2], nil
			}
			plain, err := timeAdds("new", 0)
			var capped time.Duration
			if err == nil {
				capped, err = timeAdds("capped", 5e6)
			}
			_ = d.Stop()
			if err != nil {
				return err
			}
			target := "—"
			if nl == 100 && nr == 10_000 {
				target = "≤ 50 ms " + mark(plain <= 50*time.Millisecond)
			}
			before := "—"
			if nr == 10 {
				before = map[int]string{1: "0.04 s", 100: "0.36 s"}[nl]
			}
			r.row(fmt.Sprintf("%d × %d", nl, nr), fmtDur(plain), fmtDur(capped), target, before)
			r.metric(fmt.Sprintf("add_ms_%d_links_%d_rules", nl, nr), float64(plain.Microseconds())/1000)
			r.metric(fmt.Sprintf("add_maxbw_ms_%d_links_%d_rules", nl, nr), float64(capped.Microseconds())/1000)
		}
	}
	r.note("a rule without bandwidth changes no HTB tree: only the datapath's rules are written (and of them only the entries that differ); a rule with maxbw adds a leaf to every shaped link's tree, so each of those links is re-shaped; the state write is one journal record of the change (fsync), not the whole state")
	return nil
}
