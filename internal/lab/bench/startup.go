package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"time"
)

// benchStartup: how long the real daemon takes to start with 10 and
// 10,000 rules (a tenth by executable), from nothing and restarted over
// the state a previous run left pinned (adoption: the datapath, the HTB
// tree and the classifier are taken over, not rebuilt).
func benchStartup(e *env, r *Report) error {
	rounds := e.n(5, 2)
	r.setup("%s", hostLine())
	r.setup("real hostqosd in a namespace; one managed link with egress_rate 100mbit (an HTB tree); a config of M rules, a tenth by executable (each its own file), the rest by UDP remote port. Cold: from the start of hostqosd until it answers `status` over its Unix socket (polled every 25 ms), after `hostqosd down` removed everything; restart: the same after SIGTERM, which leaves the pinned datapath for the next daemon to adopt. %d rounds each; the median (min–max)", rounds)
	r.setup("the machine's 2 cores were shared with other work")
	r.Columns = []string{"rules", "cold start (median, min–max)", "restart with adoption (median, min–max)", "adopted", "target"}
	tb, err := e.pair("benchstartup", "app", "peer")
	if err != nil {
		return err
	}
	defer tb.Close()
	app := tb.Node("app")
	bin := filepath.Join(e.scratch, "startup-exes")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		return fmt.Errorf("create exe directory: %w", err)
	}
	for _, nr := range []int{10, 10_000} {
		cfg, err := idleConfig(bin, []string{app.Iface("peer")}, nr)
		if err != nil {
			return err
		}
		d, err := e.daemon(app, cfg)
		if err != nil {
			return err
		}
		var cold, warm []time.Duration
		adopted := true
		err = func() error {
			defer d.Stop()
			for i := 0; i < rounds; i++ {
				if err := e.ctx.Err(); err != nil {
					return err
				}
				// Restart: the previous daemon's pins are adopted.
				if err := d.Signal(syscall.SIGTERM); err != nil {
					return err
				}
				t0 := time.Now()
				if err := d.Start(); err != nil {
					return err
				}
				warm = append(warm, time.Since(t0))
				st, err := d.Client.Status(e.ctx)
				if err != nil {
					return fmt.Errorf("read status: %w", err)
				}
				adopted = adopted && st.Daemon.Adopted
				// Cold: everything removed first.
				if err := d.Stop(); err != nil {
					return err
				}
				t0 = time.Now()
				if err := d.Start(); err != nil {
					return err
				}
				cold = append(cold, time.Since(t0))
			}
			return nil
		}()
		if err != nil {
			return fmt.Errorf("%d rules: %w", nr, err)
		}
		spread := func(ds []time.Duration) string {
			slices.Sort(ds)
			return fmt.Sprintf("%s (%s–%s)", fmtDur(ds[len(ds)/2]), fmtDur(ds[0]), fmtDur(ds[len(ds)-1]))
		}
		target := "—"
		if nr == 10_000 {
			target = "measured (no target set)"
		}
		r.row(fmt.Sprint(nr), spread(cold), spread(warm), fmt.Sprint(adopted), target)
		r.metric(fmt.Sprintf("cold_start_ms_%d_rules", nr), float64(cold[len(cold)/2].Microseconds())/1000)
		r.metric(fmt.Sprintf("restart_ms_%d_rules", nr), float64(warm[len(warm)/2].Microseconds())/1000)
	}
	return nil
}
