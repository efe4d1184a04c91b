package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/datapath"
	"github.com/hostqos/hostqos/internal/engine"
	"github.com/hostqos/hostqos/internal/history"
	"github.com/hostqos/hostqos/internal/host/fakehost"
	"github.com/hostqos/hostqos/internal/lab"
	"github.com/hostqos/hostqos/internal/metrics"
	"github.com/hostqos/hostqos/internal/observe"
	"github.com/hostqos/hostqos/internal/testbed"
)

// benchHistory: the cost of the history store and of the metrics.
//
//   - daemon CPU while N active flows (each sending a datagram a second)
//     are sampled every second, the real daemon with history and the same
//     daemon with --no-history in the same run;
//   - the database's growth over that window, per day;
//   - a query of one app over a day, through the daemon's API, on a
//     database holding a day of 100 apps' minute rows and 10k flow records;
//   - a Prometheus scrape of 10,000 series (the collector over the engine
//     with 1,667 apps, through HTTP, in this process).
func benchHistory(e *env, r *Report) error {
	flows := e.n(10_000, 2_000)
	window := e.dur(30*time.Second, 8*time.Second)
	r.setup("%s", hostLine())
	r.setup("CPU: real hostqosd in namespace app managing its veth (rule `--exe <app copy>`); the app keeps %d UDP flows active (one datagram from each of %d bound source ports every second, paced over the second) to the peer; the daemon's utime+stime from /proc/PID/stat over %s, after 5 s of warm-up; once with history (default retention), once with --no-history", flows, flows, window)
	r.setup("growth: the per-second rows the window added (one per series with traffic in a second, counted through the daemon's history API) × the per-minute and per-hour rows they become in a day × the bytes per row of the query database below; per-second rows are kept 1 h, so they are a bounded amount")
	r.Columns = []string{"measure", "value", "target", "anchor"}

	tb, err := e.pair("benchhist", "app", "peer")
	if err != nil {
		return err
	}
	defer tb.Close()
	app, peer := tb.Node("app"), tb.Node("peer")
	exe, err := e.app("hqb-hist")
	if err != nil {
		return err
	}
	hole, err := bindUDP(peer, "198.18.0.2:5300", true)
	if err != nil {
		return err
	}
	defer hole.Close()
	conf := fmt.Sprintf("[[link]]\nname = %q\n\n[[rule]]\nname = \"bench-hist\"\nexe = %q\nclass = \"bulk\"\n", app.Iface("peer"), exe)
	total := window + 5*time.Second
	type run struct {
		cpu, rowsPerSecond float64
		flows              int
		dbBytes            int64
	}
	measure := func(withHistory bool) (run, error) {
		var out run
		dir, err := os.MkdirTemp(e.scratch, "hostqosd-")
		if err != nil {
			return out, err
		}
		d := lab.NewDaemon(app, e.binDir, dir)
		if !withHistory {
			d.ExtraArgs = []string{"--no-history"}
		}
		if err := d.WriteConfig(conf); err != nil {
			return out, err
		}
		if err := d.Start(); err != nil {
			_ = d.Stop()
			return out, err
		}
		defer d.Stop()
		wait, err := e.startHelper(app, exe, "flows-active", "--to", "198.18.0.2:5300", "--count", strconv.Itoa(flows),
			"--base-port", "20000", "--duration", (total + 2*time.Second).String())
		if err != nil {
			return out, err
		}
		defer func() { _ = wait(nil) }()
		time.Sleep(5 * time.Second)
		dbPath := filepath.Join(dir, "state", "history.db")
		c0, err := procCPU(d.PID())
		if err != nil {
			return out, err
		}
		t0 := time.Now()
		time.Sleep(window)
		c1, err := procCPU(d.PID())
		if err != nil {
			return out, err
		}
		el := time.Since(t0)
		out.cpu = (c1 - c0).Seconds() / el.Seconds()
		st, err := d.Status()
		if err == nil {
			out.flows = st.Counts.Flows
		}
		if withHistory {
			// Rows the window added to the per-second table: one per
			// series with traffic in a second.
			rows := 0
			for _, kind := range []string{api.HistoryLinks, api.HistoryClasses, api.HistoryRules, api.HistoryApps} {
				ctx, cancel := context.WithTimeout(e.ctx, 30*time.Second)
				h, err := d.Client.History().Get(ctx, api.HistoryQuery{Kind: kind, Since: t0, Until: t0.Add(el), Step: time.Second})
				cancel()
				if err != nil {
					return out, fmt.Errorf("GET /v1/history/%s: %w", kind, err)
				}
				for _, se := range h.Series {
					rows += len(se.Points)
				}
			}
			out.rowsPerSecond = float64(rows) / el.Seconds()
			if out.dbBytes, err = history.DatabaseSize(e.ctx, dbPath); err != nil {
				return out, err
			}
		}
		return out, nil
	}
	with, err := measure(true)
	if err != nil {
		return err
	}
	without, err := measure(false)
	if err != nil {
		return err
	}
	cost := (with.cpu - without.cpu) * 100
	r.row(fmt.Sprintf("daemon CPU, %d active flows sampled every second, with history (%% of one core)", with.flows), f2(with.cpu*100), "≤ 2 % "+mark(with.cpu*100 <= 2), "")
	r.row(fmt.Sprintf("daemon CPU, %d active flows, --no-history (%% of one core)", without.flows), f2(without.cpu*100), "—", "")
	r.row("difference: history's share (% of one core; within the noise of a shared machine when near 0)", f2(cost), "—", "")
	r.metric("cpu_with_history_pct", with.cpu*100)
	r.metric("cpu_without_history_pct", without.cpu*100)
	r.metric("history_cpu_pct", cost)
	r.metric("rows_per_second", with.rowsPerSecond)
	r.note("the flows are one app's: the store keeps one series per link, class, rule and app (not per flow), so its growth is the same for 10 or 10,000 flows of one app; ended flows add a record each (≈ 200 B, see the query database below)")

	rowBytes, err := benchHistoryQuery(e, r, app, conf)
	if err != nil {
		return err
	}
	// A series with traffic every second adds a per-second row each
	// second (kept 1 h: bounded), and a per-minute and a per-hour row.
	perDay := with.rowsPerSecond * (1440 + 24) * rowBytes
	bounded := with.rowsPerSecond * 3600 * rowBytes
	r.row(fmt.Sprintf("rows written per second at this load (series with traffic); database %s after the window", humanSize(float64(with.dbBytes))), f2(with.rowsPerSecond), "—", "")
	r.row("database growth per day at this load (per-minute and per-hour rows)", humanSize(perDay), "—", "")
	r.row("… plus the per-second rows of the last hour (bounded)", humanSize(bounded), "—", "")
	r.metric("db_growth_bytes_per_day", perDay)
	r.note("growth = rows per second × (1440 + 24) rows a day × %.0f B per row (measured on the query database below: its size over its rows, indexes included); flow records of ended flows add ≈ 200 B each", rowBytes)
	return benchScrape(e, r)
}

// benchHistoryQuery times a query of one app over a day through the real
// daemon's API, on a database prefilled with a day of minute samples.
func benchHistoryQuery(e *env, r *Report, node *testbed.Node, conf string) (float64, error) {
	apps := 100
	flowRecs := e.n(10_000, 2_000)
	dir, err := os.MkdirTemp(e.scratch, "hostqosd-")
	if err != nil {
		return 0, err
	}
	if err := os.MkdirAll(filepath.Join(dir, "state"), 0o755); err != nil {
		return 0, err
	}
	dbPath := filepath.Join(dir, "state", "history.db")
	st, err := history.Open(dbPath, history.Options{})
	if err != nil {
		return 0, err
	}
	now := time.Now()
	start := now.Add(-24 * time.Hour)
	cum := make([]history.Counters, apps)
	fillStart := time.Now()
	for t := start; t.Before(now); t = t.Add(time.Minute) {
		sm := history.Sample{Time: t}
		for i := range cum {
			cum[i].BytesOut += uint64(60 * 1e5 * (1 + i%7))
			cum[i].PacketsOut += uint64(60 * 100)
			sm.Series = append(sm.Series, history.Series{Kind: history.KindApps, Name: fmt.Sprintf("/usr/bin/app%03d", i), Owner: 1000, Counters: cum[i]})
		}
		if t.Minute() == 0 {
			for j := 0; j < flowRecs/24; j++ {
				sm.Flows = append(sm.Flows, history.Flow{Proto: "tcp", Local: "198.18.0.1:" + strconv.Itoa(10000+j), Remote: "198.18.0.2:443",
					FirstNS: uint64(t.UnixNano()), PID: uint32(j), Comm: "app", Exe: "/usr/bin/app000", UID: 1000, Rule: "web", Class: "bulk",
					Start: t.Add(-time.Minute), End: t, Counters: history.Counters{BytesOut: 1e6, PacketsOut: 700}})
			}
		}
		for !st.Record(sm) {
			if err := st.Flush(e.ctx); err != nil {
				return 0, err
			}
		}
	}
	if err := st.Flush(e.ctx); err != nil {
		return 0, err
	}
	fill := time.Since(fillStart)
	if err := st.Close(); err != nil {
		return 0, err
	}
	r.setup("query: a history.db prefilled in this process with a day of samples a minute apart for %d apps (per-minute and per-hour rows; %d flow records), %s on disk, written in %s; then a real hostqosd started on it answers `GET /v1/history/apps?name=/usr/bin/app042&since=<24 h ago>` (1440 minute points) over its Unix socket, timed in the client with JSON decoding, median of 11 after one warm-up", apps, flowRecs, humanSize(float64(fileSize(dbPath))), fill.Round(time.Millisecond))
	d := lab.NewDaemon(node, e.binDir, dir)
	if err := d.WriteConfig(conf); err != nil {
		return 0, err
	}
	if err := d.Start(); err != nil {
		_ = d.Stop()
		return 0, err
	}
	defer d.Stop()
	var times []float64
	var points int
	for i := 0; i < 12; i++ {
		ctx, cancel := context.WithTimeout(e.ctx, 30*time.Second)
		t0 := time.Now()
		h, err := d.Client.History().Get(ctx, api.HistoryQuery{Kind: api.HistoryApps, Name: "/usr/bin/app042", Since: now.Add(-24 * time.Hour), Until: now})
		el := time.Since(t0)
		cancel()
		if err != nil {
			return 0, fmt.Errorf("GET /v1/history/apps: %w", err)
		}
		if len(h.Series) == 1 {
			points = len(h.Series[0].Points)
		}
		if i > 0 {
			times = append(times, float64(el.Microseconds())/1000)
		}
	}
	sort.Float64s(times)
	med := times[len(times)/2]
	r.row(fmt.Sprintf("query one app over a day (%d points), API round trip (ms, median)", points), f2(med), "≤ 50 ms "+mark(med <= 50), "")
	r.metric("query_app_day_ms", med)
	r.metric("query_db_bytes", float64(fileSize(dbPath)))
	rows := apps*(2*1440+24) + flowRecs // per-second (not pruned yet), per-minute, per-hour rows and flow records
	return float64(fileSize(dbPath)) / float64(rows), nil
}

// benchScrape times scrapes of the metrics handler over HTTP with about
// 10,000 series: the engine over the fake kernel with 1,667 apps (6 series
// each) and the engine's own series.
func benchScrape(e *env, r *Report) error {
	apps := 1667
	dir, err := os.MkdirTemp(e.scratch, "scrape-")
	if err != nil {
		return err
	}
	cg := filepath.Join(dir, "cgroup")
	if err := os.MkdirAll(cg, 0o755); err != nil {
		return err
	}
	eng, err := engine.New(engine.Config{ConfigPath: filepath.Join(dir, "none.toml"), StatePath: filepath.Join(dir, "state.json"),
		RuntimePath: filepath.Join(dir, "runtime.json"), CgroupBase: "/hostqos", Logger: e.log})
	if err != nil {
		return err
	}
	// The engine's unit-test fake kernel (internal/host/fakehost)
	// stands in for the kernel: what is timed is the engine's read path
	// and the handler, and the fake gives it many apps' flows cheaply.
	k := fakehost.NewFakeKernel(cg)
	if err := eng.Start(engine.Host{Kernel: k}); err != nil {
		return err
	}
	eng.SetHistory(nil, observe.HistoryOptions{MaxApps: apps})
	eng.Tick() // baseline
	for i := 0; i < apps; i++ {
		k.FlowTable = append(k.FlowTable, datapath.Flow{
			Key:      datapath.FlowKey{Proto: 17, Local: netip.AddrPortFrom(netip.MustParseAddr("198.18.0.1"), uint16(10000+i)), Remote: netip.MustParseAddrPort("198.18.0.2:53")},
			RuleSlot: -1, PID: uint32(4_000_000 + i), Comm: fmt.Sprintf("app%04d", i), UID: 1000,
			Counters: datapath.Counters{Bytes: 1000, Packets: 10}, FirstSeenNS: 1, LastSeenNS: 1 << 62,
		})
	}
	eng.Tick()
	srv := httptest.NewServer(metrics.Handler(metrics.Source{Engine: eng, Version: "bench"}))
	defer srv.Close()
	var times []float64
	series := 0
	for i := 0; i < 21; i++ {
		t0 := time.Now()
		resp, err := http.Get(srv.URL)
		if err != nil {
			return err
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		el := time.Since(t0)
		if err != nil {
			return err
		}
		if i == 0 {
			for _, line := range strings.Split(string(body), "\n") {
				if line != "" && !strings.HasPrefix(line, "#") {
					series++
				}
			}
			continue
		}
		times = append(times, float64(el.Microseconds())/1000)
	}
	sort.Float64s(times)
	med := times[len(times)/2]
	r.setup("scrape: the metrics collector over an engine on the fake kernel holding %d apps (named, max_apps %d) and the built-in classes, served by promhttp on a loopback HTTP server in this process, fetched with net/http (Prometheus text format), median of 20 after one warm-up; the real daemon's kernel reads (rule counters, /proc/net/dev, status) add their time on top", apps, apps)
	r.row(fmt.Sprintf("Prometheus scrape, %d series (ms, median)", series), f2(med), "≤ 100 ms "+mark(med <= 100), "")
	r.metric("scrape_series", float64(series))
	r.metric("scrape_ms", med)
	return nil
}

func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// procCPU is a process's user + system CPU time (/proc/PID/stat).
func procCPU(pid int) (time.Duration, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("read CPU time of pid %d: %w", pid, err)
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("read CPU time of pid %d: short stat", pid)
	}
	ut, _ := strconv.ParseUint(f[11], 10, 64)
	st, _ := strconv.ParseUint(f[12], 10, 64)
	return time.Duration(ut+st) * time.Second / 100, nil // USER_HZ = 100
}

func humanSize(b float64) string {
	switch {
	case b >= 1<<30:
		return fmt.Sprintf("%.2f GiB", b/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.2f MiB", b/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.1f KiB", b/(1<<10))
	}
	return fmt.Sprintf("%.0f B", b)
}
