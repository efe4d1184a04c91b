package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image/png"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/hostqos/hostqos/api"
)

// The web view's end-to-end test: the real hostqosd with [web], real
// traffic from two apps, and Debian's chromium driven headless through the
// DevTools protocol (chromedp).

// webListen is the web view's address inside the client namespace (each
// test has its own namespace: the port is free).
const webListen = "127.0.0.1:9465"

// chromiumPath is the browser, or the test skips (not in CI: there
// scripts/install-deps.sh installs it and the test must run).
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, n := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("chromium is not installed; scripts/install-deps.sh installs Debian's chromium, which the web view's browser test needs in CI")
	}
	t.Skip("chromium is not installed (scripts/install-deps.sh installs it); the web view's browser test skips outside CI")
	return ""
}

// forwardToNode listens on the host's loopback and passes each connection
// to addr inside the node's namespace, where the daemon's web view
// listens: the browser runs on the host. It returns the host address.
func (e *env) forwardToNode(addr string) string {
	e.t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				var up net.Conn
				if err := e.client.Do(func() (err error) {
					up, err = net.DialTimeout("tcp", addr, 5*time.Second)
					return err
				}); err != nil {
					return
				}
				defer up.Close()
				go func() { _, _ = io.Copy(up, c); up.(*net.TCPConn).CloseWrite() }()
				_, _ = io.Copy(c, up)
			}()
		}
	}()
	return ln.Addr().String()
}

// countingSink accepts TCP connections on addr in the server namespace
// and counts the bytes received, for the receiver's own rate.
type countingSink struct{ n atomic.Uint64 }

func (e *env) countingSink(addr string) *countingSink {
	e.t.Helper()
	s := &countingSink{}
	var ln net.Listener
	if err := e.server.Do(func() (err error) {
		ln, err = net.Listen("tcp", addr)
		return err
	}); err != nil {
		e.t.Fatalf("listen %s: %v", addr, err)
	}
	e.t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 64<<10)
				for {
					n, err := c.Read(buf)
					s.n.Add(uint64(n))
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	return s
}

// rate is what the sink receives over d, in bit/s.
func (s *countingSink) rate(d time.Duration) float64 {
	a, t0 := s.n.Load(), time.Now()
	time.Sleep(d)
	return float64(s.n.Load()-a) * 8 / time.Since(t0).Seconds()
}

// startBrowser starts headless chromium for the test (ended at cleanup);
// its context ends after limit.
func startBrowser(t *testing.T, chromium string, limit time.Duration) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium), chromedp.NoSandbox,
		chromedp.WindowSize(1400, 900), chromedp.Flag("disable-gpu", true), chromedp.UserDataDir(t.TempDir()))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc)
	ctx, cancelBrowser := chromedp.NewContext(actx, chromedp.WithErrorf(t.Logf))
	t.Cleanup(cancelBrowser)
	ctx, cancelAll := context.WithTimeout(ctx, limit)
	t.Cleanup(cancelAll)
	return ctx
}

// screenshot saves the page as docs/img/web-NAME.png (with
// HOSTQOS_UPDATE_SCREENSHOTS=1; else in the test's directory) and fails
// when it is blank: fewer than 1 % of its pixels differ from the
// background, or it has fewer than 8 colours.
func screenshot(t *testing.T, ctx context.Context, dir, name string) {
	t.Helper()
	if err := chromedp.Do(ctx, chromedp.Sleep(300*time.Millisecond)); err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	b, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	bg := img.At(img.Bounds().Min.X, img.Bounds().Max.Y-1)
	colours := map[[4]uint32]bool{}
	differ, all := 0, 0
	r0, g0, b0, _ := bg.RGBA()
	for y := img.Bounds().Min.Y; y < img.Bounds().Max.Y; y += 2 {
		for x := img.Bounds().Min.X; x < img.Bounds().Max.X; x += 2 {
			r, g, b, a := img.At(x, y).RGBA()
			colours[[4]uint32{r, g, b, a}] = true
			if r != r0 || g != g0 || b != b0 {
				differ++
			}
			all++
		}
	}
	if len(colours) < 8 || differ*100 < all {
		t.Errorf("screenshot %s is blank: %d colours, %d of %d pixels differ from the background", name, len(colours), differ, all)
	}
	if os.Getenv("HOSTQOS_UPDATE_SCREENSHOTS") == "1" {
		dir = "../../docs/img"
	}
	p := filepath.Join(dir, "web-"+name+".png")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot %s: %s (%dx%d, %d colours)", name, p, img.Bounds().Dx(), img.Bounds().Dy(), len(colours))
}

// TestWebViewInBrowser: hostqosd with [web] in a test namespace, two apps
// sending to a receiver, Debian's chromium headless on the page that
// `hostqos web` logs into: the apps table shows both apps with the rates
// the receiver measures (within 10 %), sorted by a click on a column and
// filtered by a class; on one app's page a click on "Set
// limit", a value and Apply (the confirmation) change its limit (a value
// the daemon refuses first: its message shows in the dialog), and what
// the receiver gets follows within 2 s; the history chart renders points
// from the history store; the reservations and links views show a
// reservation; a screenshot of each view is saved and not blank. Then nobody's login (from `hostqos web` run as nobody) is
// refused the change of root's rule with the API's message.
func TestWebViewInBrowser(t *testing.T) {
	chromium := chromiumPath(t)
	e := newEnv(t)
	e.writeConfig(fmt.Sprintf("[web]\nlisten = %q\n", webListen))
	e.startDaemon()
	e.hostqos("link", "set", e.iface(), "--egress-rate", "100mbit")
	alpha, beta := e.app("web-alpha"), e.app("web-beta")
	e.hostqos("rule", "add", "alpha", "--exe", alpha, "--maxbw", "8mbit")
	e.hostqos("rule", "add", "beta", "--exe", beta, "--class", "bulk", "--maxbw", "6mbit")
	toA, toB := serverV4.Addr().String()+":7501", serverV4.Addr().String()+":7502"
	recvA, recvB := e.countingSink(toA), e.countingSink(toB)
	e.start(alpha, "tool", "tcp-send", "--to", toA, "--duration", "80s")
	e.start(beta, "tool", "tcp-send", "--to", toB, "--duration", "80s")

	var login api.WebLogin
	e.hostqosJSON(&login, "web", "-o", "json")
	host := e.forwardToNode(webListen)
	base := "http://" + host + "/"

	ctx := startBrowser(t, chromium, 75*time.Second)
	shots := t.TempDir()

	// Log in: the URL with the token; the page sets the cookie and drops
	// the token from the address.
	if err := chromedp.Do(ctx, chromedp.Navigate(base+"?token="+login.Token),
		chromedp.WaitVisible(`#apps tbody tr[data-name="web-alpha"]`), chromedp.WaitVisible(`#apps tbody tr[data-name="web-beta"]`)); err != nil {
		t.Fatalf("the apps table with both apps: %v", err)
	}
	if loc, err := chromedp.Run(ctx, chromedp.Location()); err != nil || strings.Contains(loc, "token") {
		t.Errorf("after login the address is %q (%v); want it without the token", loc, err)
	}

	// The table's rates against the receiver's, over the same seconds.
	webRate := func(name string) float64 {
		a, err := chromedp.Run(ctx, chromedp.AttributeValue(`#apps tbody tr[data-name="`+name+`"] td.out`, "data-bps"))
		if err != nil {
			t.Fatalf("rate of %s in the table: %v", name, err)
		}
		v, _ := strconv.ParseFloat(a.Value, 64)
		return v
	}
	measured(t, "the table's rates match the receiver's", func(int) (bool, string) {
		time.Sleep(2 * time.Second) // both at their ceilings
		var wg sync.WaitGroup
		var ra, rb float64
		wg.Add(2)
		go func() { defer wg.Done(); ra = recvA.rate(3 * time.Second) }()
		go func() { defer wg.Done(); rb = recvB.rate(3 * time.Second) }()
		var wa, wb float64
		for i := 0; i < 3; i++ {
			time.Sleep(time.Second)
			wa += webRate("web-alpha") / 3
			wb += webRate("web-beta") / 3
		}
		wg.Wait()
		msg := fmt.Sprintf("web-alpha: table %.2f Mbit/s, receiver %.2f; web-beta: table %.2f, receiver %.2f", wa/1e6, ra/1e6, wb/1e6, rb/1e6)
		t.Log(msg)
		ok := ra > 1e6 && rb > 1e6 && abs(wa-ra) <= 0.1*ra && abs(wb-rb) <= 0.1*rb
		return ok, msg
	})
	screenshot(t, ctx, shots, "apps")

	// Sorting by a column's header, and the filter.
	names := func() string {
		s, err := chromedp.Run(ctx, chromedp.Evaluate[string](`Array.from(document.querySelectorAll("#apps tbody tr")).map((r) => r.dataset.name).join(",")`))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	if err := chromedp.Do(ctx, chromedp.Click(`#apps th[data-sort="name"]`)); err != nil {
		t.Fatal(err)
	}
	if got := names(); got != "web-alpha,web-beta" {
		t.Errorf("sorted by name: %s", got)
	}
	if err := chromedp.Do(ctx, chromedp.Click(`#apps th[data-sort="name"]`)); err != nil {
		t.Fatal(err)
	}
	if got := names(); got != "web-beta,web-alpha" {
		t.Errorf("sorted by name, descending: %s", got)
	}
	if err := chromedp.Do(ctx, chromedp.SendKeys(`#filter`, "bulk")); err != nil {
		t.Fatal(err)
	}
	if got := names(); got != "web-beta" {
		t.Errorf("filtered by bulk (beta's class): %s", got)
	}
	if err := chromedp.Do(ctx, script(`document.querySelector("#filter").value = ""; document.querySelector("#filter").dispatchEvent(new Event("input"))`)); err != nil {
		t.Fatal(err)
	}

	// A click changes beta's limit: its page, Set limit, 2mbit, Apply.
	if err := chromedp.Do(ctx, chromedp.Click(`#apps tbody tr[data-name="web-beta"]`), chromedp.WaitVisible(`#act-limit`),
		chromedp.Click(`#act-limit`), chromedp.WaitVisible(`#confirm-value`),
		script(`document.querySelector("#confirm-value").value = ""`), chromedp.SendKeys(`#confirm-value`, "2mbits"),
		chromedp.Click(`#confirm-ok`)); err != nil {
		t.Fatalf("open the limit dialog: %v", err)
	}
	// A value the daemon refuses: its message stays in the dialog.
	eventually(t, 5*time.Second, "the dialog shows the daemon's refusal of 2mbits", func() (bool, string) {
		msg, err := chromedp.Run(ctx, chromedp.Text(`#confirm-error`))
		return err == nil && strings.Contains(msg, "unknown rate unit"), fmt.Sprintf("%q %v", msg, err)
	})
	screenshot(t, ctx, shots, "refused")
	if err := chromedp.Do(ctx, script(`document.querySelector("#confirm-value").value = ""`), chromedp.SendKeys(`#confirm-value`, "2mbit")); err != nil {
		t.Fatal(err)
	}
	if plan, err := chromedp.Run(ctx, chromedp.Text(`#confirm-plan`)); err != nil || !strings.Contains(plan, "change rule beta") {
		t.Errorf("the confirmation says %q (%v); want it to name rule beta", plan, err)
	}
	screenshot(t, ctx, shots, "confirm")
	if err := chromedp.Do(ctx, chromedp.Click(`#confirm-ok`), chromedp.WaitNotVisible(`#confirm`)); err != nil {
		t.Fatalf("apply: %v", err)
	}
	clicked := time.Now()
	var ri api.RuleInfo
	e.hostqosJSON(&ri, "rule", "show", "beta")
	if ri.Rule.MaxBW != 2e6 || ri.Rule.Class != "bulk" {
		t.Errorf("rule beta after the click: %+v; want maxbw 2mbit, class bulk kept", ri.Rule)
	}
	// What the receiver gets in the second that ends 2 s after the click.
	time.Sleep(time.Until(clicked.Add(time.Second)))
	rb := recvB.rate(time.Until(clicked.Add(2 * time.Second)))
	t.Logf("web-beta after the click: receiver %.2f Mbit/s in the second ending 2 s after it (limit 2mbit, was 6mbit)", rb/1e6)
	if rb > 2.4e6 || rb < 1e6 {
		t.Errorf("web-beta receives %.2f Mbit/s 2 s after its limit became 2mbit; want about 2", rb/1e6)
	}

	// The history chart of alpha: points from the store.
	var h api.History
	eventually(t, 20*time.Second, "alpha's history in the store", func() (bool, string) {
		var err error
		h, err = e.cli.History().Get(context.Background(), api.HistoryQuery{Kind: api.HistoryApps, Name: alpha})
		n := 0
		for _, s := range h.Series {
			n += len(s.Points)
		}
		return err == nil && n >= 3, fmt.Sprintf("%d points, %v", n, err)
	})
	if err := chromedp.Do(ctx, setHash("#app/"+urlEscape(alpha)),
		chromedp.WaitVisible(`#chart canvas`), chromedp.WaitVisible(`#chart[data-points]`)); err != nil {
		t.Fatalf("alpha's chart: %v", err)
	}
	pts, err := chromedp.Run(ctx, chromedp.AttributeValue(`#chart`, "data-points"))
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := strconv.Atoi(pts.Value); n < 3 {
		t.Errorf("alpha's chart has %s points; the store has more", pts.Value)
	}
	t.Logf("alpha's chart: %s points", pts.Value)
	screenshot(t, ctx, shots, "app")
	// A reservation for the reservations and links views to show.
	e.hostqos("resv", "add", "video", "--service", "guaranteed", "--proto", "udp", "--rport", "5004", "--rate", "1mbit", "--burst", "16KiB")
	for _, v := range []string{"links", "reservations", "sockets", "events", "explain"} {
		if err := chromedp.Do(ctx, setHash("#"+v), chromedp.WaitVisible(`#view-`+v)); err != nil {
			t.Fatalf("view %s: %v", v, err)
		}
		if v == "events" { // an event to show: a change made now
			e.hostqos("rule", "set", "alpha", "--maxbw", "7mbit")
			_ = chromedp.Do(ctx, chromedp.WaitVisible(`#events tbody tr`))
		}
		if v == "links" || v == "reservations" {
			// The reservation is in the table (and in the link's guarantees).
			eventually(t, 5*time.Second, "the reservation in view "+v, func() (bool, string) {
				text, err := chromedp.Run(ctx, chromedp.Text(`#`+v+` tbody`))
				return err == nil && strings.Contains(text, "video"), fmt.Sprintf("%q %v", text, err)
			})
		}
		screenshot(t, ctx, shots, v)
	}

	// nobody's login, from hostqos web run as nobody: it may read the
	// rules but not change root's.
	openForNobody(t, e)
	out, err := e.userHostqos(uidNobody, "web", "-o", "json")
	if err != nil {
		t.Fatalf("hostqos web as nobody: %v\n%s", err, out)
	}
	var nl api.WebLogin
	if err := json.Unmarshal([]byte(out), &nl); err != nil || nl.UID != uidNobody {
		t.Fatalf("nobody's login: %v %+v", err, nl)
	}
	req, _ := http.NewRequest("PATCH", base+"api/v1/rules/beta", strings.NewReader(`{"maxbw":"100mbit"}`))
	req.Header.Set("Authorization", "Bearer "+nl.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(body), "changing host policy needs root or membership of group hostqos") {
		t.Errorf("nobody's PATCH of rule beta: %d %s; want 403 with the API's message", resp.StatusCode, body)
	}
	e.hostqosJSON(&ri, "rule", "show", "beta")
	if ri.Rule.MaxBW != 2e6 {
		t.Errorf("rule beta after nobody's PATCH: maxbw %v", ri.Rule.MaxBW)
	}
}

// setHash moves the page to another view (a same-document navigation).
func setHash(h string) chromedp.Action[chromedp.Void] {
	return script(`location.hash = ` + strconv.Quote(h))
}

// script runs a statement in the page.
func script(js string) chromedp.Action[chromedp.Void] {
	return func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		_, err := chromedp.Evaluate[any](js+`; 0`)(ctx, t)
		return chromedp.Void{}, err
	}
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

// urlEscape escapes a path for the page's #app/ fragment as the page's
// encodeURIComponent does.
func urlEscape(s string) string {
	var b strings.Builder
	for _, c := range []byte(s) {
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("-_.!~*'()", c) >= 0 {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

// TestWebViewShowsContainer: a container (a network-namespace container
// declared in [containers], behind the host hostqosd runs on) sending TCP
// through the host is one row of the apps table, marked a container of
// its runtime, with its rule, limit and a rate near the receiver's (20 %:
// see below); a screenshot is saved.
func TestWebViewShowsContainer(t *testing.T) {
	chromium := chromiumPath(t)
	c := newCtrEnv(t)
	c.writeConfig(c.config("100mbit", fmt.Sprintf("\n[web]\nlisten = %q\n", webListen)))
	c.startDaemon()
	eventually(t, 5*time.Second, "the container found", func() (bool, string) {
		cs := c.containers()
		return len(cs) == 1 && cs[0].Seen, fmt.Sprintf("%+v", cs)
	})
	c.hostqos("rule", "add", "ctr", "--container", c.ctrName, "--class", "bulk", "--maxbw", "5mbit")
	to := serverAddr(c) + ":7520"
	recv := c.countingSink(to)
	cmd := c.ctr.Command(hostqosBin(), "tool", "tcp-send", "--to", to, "--duration", "60s")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	var login api.WebLogin
	c.hostqosJSON(&login, "web", "-o", "json")
	base := "http://" + c.forwardToNode(webListen) + "/"
	ctx := startBrowser(t, chromium, 45*time.Second)
	row := `#apps tbody tr[data-name="` + c.ctrName + `"]`
	if err := chromedp.Do(ctx, chromedp.Navigate(base+"?token="+login.Token), chromedp.WaitVisible(row)); err != nil {
		t.Fatalf("the container's row: %v", err)
	}
	measured(t, "the container's rate in the table", func(int) (bool, string) {
		time.Sleep(2 * time.Second)
		var wg sync.WaitGroup
		var r float64
		wg.Add(1)
		go func() { defer wg.Done(); r = recv.rate(5 * time.Second) }()
		var w float64
		for i := 0; i < 5; i++ {
			time.Sleep(time.Second)
			a, err := chromedp.Run(ctx, chromedp.AttributeValue(row+` td.out`, "data-bps"))
			if err != nil {
				return false, err.Error()
			}
			v, _ := strconv.ParseFloat(a.Value, 64)
			w += v / 5
		}
		wg.Wait()
		msg := fmt.Sprintf("container: table %.2f Mbit/s, receiver %.2f", w/1e6, r/1e6)
		t.Log(msg)
		// The daemon's per-second rate of a container's forwarded flow
		// swings more than a host process's (3.3 to 5.1 Mbit/s seen
		// around a steady 4.8 at the receiver): the table is held to the
		// receiver within 20 % over 5 s here; the apps' 10 % is above.
		return r > 1e6 && abs(w-r) <= 0.2*r, msg
	})
	text, err := chromedp.Run(ctx, chromedp.Text(row))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"container (netns)", "ctr", "bulk", "5mbit"} {
		if !strings.Contains(text, want) {
			t.Errorf("the container's row %q does not say %q", text, want)
		}
	}
	screenshot(t, ctx, t.TempDir(), "container")
}
