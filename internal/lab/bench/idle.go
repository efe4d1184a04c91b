package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/lab"
)

// benchIdle: what the real daemon costs doing nothing — its CPU, RSS,
// the netlink dumps and selector reads it makes and how long `status`
// takes — with 10 or 10,000 rules (a tenth of them by executable, each its
// own file) and 1 or 100 shaped links. DESIGN.md: an idle daemon reacts to
// changes instead of re-reading every rule and link each second.
func benchIdle(e *env, r *Report) error {
	window, statuses := time.Duration(e.n(10, 3))*time.Second, e.n(20, 5)
	const settle = 3 * time.Second
	r.setup("%s", hostLine())
	r.setup("real hostqosd in a namespace; N managed links, each with egress_rate 100mbit (an HTB tree): the veth to the peer plus N-1 veth ends made in the namespace; a config of M rules, a tenth by executable (each its own file) and the rest by UDP remote port; no traffic. After the start and %v of settling: the daemon's utime+stime from /proc/PID/stat over %v, the netlink dumps and selector reads it counted over that window (status `daemon.work`), then %d `status` requests through the API (typed client, Unix socket; the median) and its RSS", settle, window, statuses)
	r.setup("the machine's 2 cores were shared with other work: CPU figures of a fraction of a percent are within its noise")
	r.Columns = []string{"links × rules", "CPU (% of a core)", "netlink dumps / s", "selector reads / s", "status (median)", "RSS", "target", "before (main at 0fed41b)"}
	tb, err := e.pair("benchidle", "app", "peer")
	if err != nil {
		return err
	}
	defer tb.Close()
	app := tb.Node("app")
	var extra []string
	for i := 1; i < 100; i++ {
		name := fmt.Sprintf("hqid%d", i)
		if out, err := app.Command("ip", "link", "add", name, "type", "veth", "peer", "name", name+"p").CombinedOutput(); err != nil {
			return fmt.Errorf("add veth %s: %w: %s", name, err, out)
		}
		if out, err := app.Command("ip", "link", "set", name, "up").CombinedOutput(); err != nil {
			return fmt.Errorf("set %s up: %w: %s", name, err, out)
		}
		extra = append(extra, name)
	}
	bin := filepath.Join(e.scratch, "idle-exes")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		return fmt.Errorf("create exe directory: %w", err)
	}
	// This benchmark on main at 0fed41b (the daemon re-read every rule and
	// link each second), same machine, shared.
	before := map[[2]int]string{
		{1, 10}:       "0.50 %, 3.1 dumps/s, 1.0 reads/s, status 0.75 ms",
		{1, 10_000}:   "9.55 %, 3.1 dumps/s, 995 reads/s, status 13.1 ms",
		{100, 10}:     "6.07 %, 308 dumps/s, 1.0 reads/s, status 24.5 ms",
		{100, 10_000}: "14.0 %, 320 dumps/s, 1,100 reads/s, status 34.2 ms",
	}
	for _, c := range [][2]int{{1, 10}, {1, 10_000}, {100, 10}, {100, 10_000}} {
		nl, nr := c[0], c[1]
		if err := e.ctx.Err(); err != nil {
			return err
		}
		cfg, err := idleConfig(bin, append([]string{app.Iface("peer")}, extra[:nl-1]...), nr)
		if err != nil {
			return err
		}
		d, err := e.daemon(app, cfg)
		if err != nil {
			return err
		}
		m, err := measureIdle(e, d, settle, window, statuses)
		_ = d.Stop()
		if err != nil {
			return fmt.Errorf("%d links × %d rules: %w", nl, nr, err)
		}
		target := "≤ 0.5 %, status ≤ 5 ms " + mark(m.cpu <= 0.005 && m.status <= 5*time.Millisecond)
		b := before[c]
		r.row(fmt.Sprintf("%d × %d", nl, nr), fmt.Sprintf("%.2f %%", 100*m.cpu), fmt.Sprintf("%.1f", m.dumps), fmt.Sprintf("%.1f", m.reads),
			fmtDur(m.status), fmtBytes(m.rss), target, b)
		key := fmt.Sprintf("%d_links_%d_rules", nl, nr)
		r.metric("cpu_pct_"+key, 100*m.cpu)
		r.metric("netlink_dumps_per_s_"+key, m.dumps)
		r.metric("selector_reads_per_s_"+key, m.reads)
		r.metric("status_ms_"+key, float64(m.status.Microseconds())/1000)
		r.metric("rss_bytes_"+key, float64(m.rss))
	}
	return nil
}

// idleConfig is a config of links (each shaped) and nr rules, a tenth of
// them by executable (files made in bin).
func idleConfig(bin string, links []string, nr int) (string, error) {
	var cfg strings.Builder
	for _, l := range links {
		fmt.Fprintf(&cfg, "[[link]]\nname = %q\negress_rate = \"100mbit\"\n\n", l)
	}
	exes := nr / 10
	for i := 0; i < exes; i++ {
		p := filepath.Join(bin, fmt.Sprintf("app%d", i))
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
			return "", fmt.Errorf("write exe %s: %w", p, err)
		}
		fmt.Fprintf(&cfg, "[[rule]]\nname = \"exe%d\"\nexe = %q\nclass = \"interactive\"\n\n", i, p)
	}
	for i := exes; i < nr; i++ {
		fmt.Fprintf(&cfg, "[[rule]]\nname = \"r%d\"\nproto = \"udp\"\nrport = %d\nclass = \"bulk\"\n\n", i, 1+i%60000)
	}
	return cfg.String(), nil
}

// idleFigures are what an idle daemon cost over the window.
type idleFigures struct {
	cpu          float64 // share of a core
	dumps, reads float64 // per second
	status       time.Duration
	rss          uint64
}

func measureIdle(e *env, d *lab.Daemon, settle, window time.Duration, statuses int) (idleFigures, error) {
	var m idleFigures
	select {
	case <-e.ctx.Done():
		return m, e.ctx.Err()
	case <-time.After(settle):
	}
	work := func() (api.DaemonWork, error) {
		st, err := d.Client.Status(e.ctx)
		if err != nil {
			return api.DaemonWork{}, fmt.Errorf("read status: %w", err)
		}
		return st.Daemon.Work, nil
	}
	w0, err := work()
	if err != nil {
		return m, err
	}
	c0, err := procCPU(d.PID())
	if err != nil {
		return m, err
	}
	t0 := time.Now()
	select {
	case <-e.ctx.Done():
		return m, e.ctx.Err()
	case <-time.After(window):
	}
	c1, err := procCPU(d.PID())
	if err != nil {
		return m, err
	}
	dt := time.Since(t0)
	w1, err := work()
	if err != nil {
		return m, err
	}
	m.cpu = float64(c1-c0) / float64(dt)
	m.dumps = float64(w1.NetlinkDumps-w0.NetlinkDumps) / dt.Seconds()
	m.reads = float64(w1.SelectorReads-w0.SelectorReads) / dt.Seconds()
	var ds []time.Duration
	for range statuses {
		t := time.Now()
		if _, err := d.Client.Status(e.ctx); err != nil {
			return m, fmt.Errorf("read status: %w", err)
		}
		ds = append(ds, time.Since(t))
	}
	slices.Sort(ds)
	m.status = ds[len(ds)/2]
	if m.rss, err = procRSS(d.PID()); err != nil {
		return m, err
	}
	return m, nil
}
