package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hostqos/hostqos/internal/testbed"
)

// benchWeb: the web view (docs/web.md) of the real daemon: what the page's
// initial load weighs and takes on the loopback, and what the live view's
// refresh (the apps stream once a second, the rules and classes every 5 s)
// costs the daemon with 1,000 active flows.
func benchWeb(e *env, r *Report) error {
	flows := e.n(1_000, 1_000)
	window := e.dur(30*time.Second, 8*time.Second)
	loads := e.n(50, 10)
	r.setup("%s", hostLine())
	r.setup("real hostqosd in namespace app managing its veth (rule `--exe <app copy>`), `[web] listen = \"127.0.0.1:9465\"`; the app keeps %d UDP flows active (one datagram from each of %d bound source ports every second) to the peer; a login from POST /v1/web/token", flows, flows)
	r.setup("initial load: GET / and every file it names (/assets/…), one fresh HTTP/1.1 connection per load, from inside the namespace (loopback), %d loads, bytes as sent (no compression)", loads)
	r.setup("refresh cost: the daemon's utime+stime from /proc/PID/stat over %v without a page, then over %v with one page's live view: GET /api/live (apps, once a second, read as it comes) and GET /api/v1/rules and /api/v1/classes every 5 s, as the page does; then over 200 GET /api/v1/stats/apps back to back (one refresh's CPU)", window, window)
	r.Columns = []string{"measure", "value", "target", "anchor"}

	tb, err := e.pair("benchweb", "app", "peer")
	if err != nil {
		return err
	}
	defer tb.Close()
	app, peer := tb.Node("app"), tb.Node("peer")
	exe, err := e.app("hqb-web")
	if err != nil {
		return err
	}
	hole, err := bindUDP(peer, "198.18.0.2:5300", true)
	if err != nil {
		return err
	}
	defer hole.Close()
	d, err := e.daemon(app, fmt.Sprintf("[web]\nlisten = \"127.0.0.1:9465\"\n\n[[link]]\nname = %q\n\n[[rule]]\nname = \"bench-web\"\nexe = %q\nclass = \"bulk\"\n", app.Iface("peer"), exe))
	if err != nil {
		return err
	}
	defer d.Stop()
	total := 2*window + 15*time.Second
	wait, err := e.startHelper(app, exe, "flows-active", "--to", "198.18.0.2:5300", "--count", strconv.Itoa(flows),
		"--base-port", "20000", "--duration", total.String())
	if err != nil {
		return err
	}
	defer func() { _ = wait(nil) }()
	ctx, cancel := context.WithTimeout(e.ctx, 10*time.Second)
	login, err := d.Client.WebToken(ctx)
	cancel()
	if err != nil {
		return fmt.Errorf("web login: %w", err)
	}
	base := "http://127.0.0.1:9465"
	client := func() *http.Client { return nodeHTTPClient(app) }
	get := func(c *http.Client, path string) ([]byte, error) {
		req, err := http.NewRequestWithContext(e.ctx, http.MethodGet, base+path, nil)
		if err != nil {
			return nil, err
		}
		req.Header.Set("Authorization", "Bearer "+login.Token)
		resp, err := c.Do(req)
		if err != nil {
			return nil, fmt.Errorf("GET %s: %w", path, err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err == nil && resp.StatusCode != http.StatusOK {
			err = fmt.Errorf("GET %s: %s", path, resp.Status)
		}
		return b, err
	}

	// Initial load.
	assets := regexp.MustCompile(`(?:src|href)="(/assets/[^"]+)"`)
	var times []float64
	var size int
	for i := 0; i < loads+1; i++ {
		c := client()
		t0 := time.Now()
		page, err := get(c, "/")
		if err != nil {
			return err
		}
		n := len(page)
		for _, m := range assets.FindAllStringSubmatch(string(page), -1) {
			b, err := get(c, m[1])
			if err != nil {
				return err
			}
			n += len(b)
		}
		el := time.Since(t0)
		c.CloseIdleConnections()
		size = n
		if i > 0 { // the first warms the daemon (its asset table is built at start)
			times = append(times, float64(el.Microseconds())/1e3)
		}
	}
	med, worst := median(times), maxOf(times)
	r.row("initial load, bytes", fmt.Sprintf("%d (%.0f kB)", size, float64(size)/1e3), "< 300 kB "+mark(size < 300_000), "issue: a small page, no framework")
	r.row("initial load, time (median)", f1(med)+" ms", "< 100 ms "+mark(med < 100), "loopback, one fresh connection")
	r.row("initial load, time (slowest)", f1(worst)+" ms", "", "")
	r.metric("initial_load_bytes", float64(size))
	r.metric("initial_load_ms_median", med)
	r.metric("initial_load_ms_max", worst)

	// Refresh cost: without a page, then with one.
	time.Sleep(5 * time.Second) // the flows are all active
	cpu := func() (float64, error) {
		c0, err := procCPU(d.PID())
		if err != nil {
			return 0, err
		}
		t0 := time.Now()
		select {
		case <-time.After(window):
		case <-e.ctx.Done():
			return 0, e.ctx.Err()
		}
		c1, err := procCPU(d.PID())
		if err != nil {
			return 0, err
		}
		return (c1 - c0).Seconds() / time.Since(t0).Seconds(), nil
	}
	idle, err := cpu()
	if err != nil {
		return err
	}
	sctx, stop := context.WithCancel(e.ctx)
	defer stop()
	var events, frameBytes atomic.Int64
	streamErr := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(sctx, http.MethodGet, base+"/api/live?kind=apps", nil)
		req.Header.Set("Authorization", "Bearer "+login.Token)
		resp, err := client().Do(req)
		if err != nil {
			streamErr <- err
			return
		}
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 16<<20)
		for sc.Scan() {
			if l := sc.Text(); strings.HasPrefix(l, "data: ") {
				events.Add(1)
				frameBytes.Store(int64(len(l)))
			}
		}
		streamErr <- nil
	}()
	go func() {
		c := client()
		for {
			_, _ = get(c, "/api/v1/rules")
			_, _ = get(c, "/api/v1/classes")
			select {
			case <-sctx.Done():
				return
			case <-time.After(5 * time.Second):
			}
		}
	}()
	time.Sleep(2 * time.Second)
	evAt := events.Load()
	withPage, err := cpu()
	evs := events.Load() - evAt
	stop()
	if err != nil {
		return err
	}
	select {
	case err := <-streamErr:
		if err != nil {
			return fmt.Errorf("live stream: %w", err)
		}
	case <-time.After(5 * time.Second):
	}
	// One refresh's CPU, from many back to back: the window's difference
	// above is within the noise of the daemon's own second.
	const burst = 200
	c := client()
	c0, err := procCPU(d.PID())
	if err != nil {
		return err
	}
	for i := 0; i < burst; i++ {
		if _, err := get(c, "/api/v1/stats/apps"); err != nil {
			return err
		}
	}
	c1, err := procCPU(d.PID())
	if err != nil {
		return err
	}
	perRefresh := (c1 - c0).Seconds() / burst
	st, _ := d.Status()
	cost := withPage - idle
	r.row("daemon CPU without a page", fmt.Sprintf("%.2f %% of a core", 100*idle), "", fmt.Sprintf("%d flows in the table", st.Counts.Flows))
	r.row("daemon CPU with one page's live view", fmt.Sprintf("%.2f %% of a core", 100*withPage), "", fmt.Sprintf("%d refreshes in the window, %d bytes each", evs, frameBytes.Load()))
	r.row("the live view's refresh cost (the two windows' difference)", fmt.Sprintf("%.2f %% of a core", 100*cost), "≤ 1 % "+mark(cost <= 0.01), "issue: ≤ 1 % of a core with 1,000 flows")
	r.row("one refresh's CPU (200 GET /api/v1/stats/apps back to back)", fmt.Sprintf("%.2f ms, i.e. %.2f %% of a core at one a second", 1e3*perRefresh, 100*perRefresh), "≤ 1 % "+mark(perRefresh <= 0.01), "issue: ≤ 1 % of a core with 1,000 flows")
	r.metric("cpu_idle", idle)
	r.metric("cpu_with_page", withPage)
	r.metric("refresh_cpu", cost)
	r.metric("refreshes", float64(evs))
	r.metric("refresh_cpu_seconds", perRefresh)
	r.metric("frame_bytes", float64(frameBytes.Load()))
	r.note("the refresh answers GET /v1/stats/apps, which aggregates the whole flow table per app: its cost grows with the flows, not with the apps shown")
	return nil
}

// nodeHTTPClient is an HTTP client whose connections are made inside the
// node's network namespace.
func nodeHTTPClient(n *testbed.Node) *http.Client {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			var c net.Conn
			err := n.Do(func() (err error) {
				var d net.Dialer
				c, err = d.DialContext(ctx, network, addr)
				return err
			})
			return c, err
		},
		DisableCompression: true,
	}
	return &http.Client{Transport: tr, Timeout: time.Minute}
}
