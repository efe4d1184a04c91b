package daemon

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/engine"
	"github.com/hostqos/hostqos/internal/host/fakehost"
	"github.com/hostqos/hostqos/internal/rsvp"
	"github.com/hostqos/hostqos/internal/rsvpfront"
)

// The RSVP routes decode strictly, name the bad field, refuse ordinary
// users' changes and change nothing when they refuse; with RSVP off they
// say how to turn it on.
func TestRSVPRoutes(t *testing.T) {
	dir := t.TempDir()
	d := newTestDaemon(t, dir)
	k := fakehost.NewFakeKernel(dir)
	k.Ifindexes["eth0"] = 2
	if err := d.eng.Start(engine.Host{Kernel: k}); err != nil {
		t.Fatal(err)
	}
	h := d.routes()
	call := func(who *peer, route, body string, args ...string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(routeMethod(route), routePath(route, args...), strings.NewReader(body))
		r = r.WithContext(context.WithValue(r.Context(), credKey{}, who))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	rootP, user := &peer{Privileged: true}, &peer{UID: 1000}
	if w := call(rootP, api.RouteAddRSVPSession, `{"name":"rtp","dest":"198.18.2.2:5004","proto":"udp"}`); w.Code != http.StatusBadRequest ||
		!strings.Contains(w.Body.String(), "[rsvp] section") {
		t.Fatalf("RSVP off: %d %s", w.Code, w.Body)
	}
	if w := call(user, api.RouteRSVP, ""); w.Code != http.StatusOK {
		t.Fatalf("status with RSVP off: %d %s", w.Code, w.Body)
	}

	local := func(dst netip.Addr) (netip.Addr, bool, error) {
		a := netip.MustParseAddr("198.18.1.2")
		return a, dst == a, nil
	}
	d.rsvp = &rsvpAgent{front: rsvpfront.New(d.eng, rsvpfront.Options{Refresh: time.Second, Local: local, MaxSessions: 2})}
	var sent []rsvp.Out
	d.rsvp.front.SetSend(func(o []rsvp.Out) { sent = append(sent, o...) })
	for _, c := range []struct {
		who   *peer
		route string
		args  []string
		body  string
		code  int
		says  string
	}{
		{rootP, api.RouteAddRSVPSession, nil, `{"name":"rtp","dest":"198.18.2.2:5004","proto":"udp","ttl":3}`, 400, `invalid policy: 1 problem(s); nothing was changed`}, // the field error names "ttl"
		{rootP, api.RouteAddRSVPSession, nil, `{"name":"rtp","dest":"198.18.2.2","proto":"udp"}`, 400, `field dest = "198.18.2.2": want ADDR:PORT`},
		{rootP, api.RouteAddRSVPSession, nil, `{"name":"rtp","dest":"224.0.0.5:5004","proto":"udp"}`, 400, "multicast"},
		{rootP, api.RouteAddRSVPSession, nil, `{"name":"rtp","dest":"198.18.2.2:5004","proto":"sctp"}`, 400, `field proto = "sctp": want udp or tcp`},
		{rootP, api.RouteAddRSVPSession, nil, `{"name":"a b","dest":"198.18.2.2:5004","proto":"udp"}`, 400, "not a valid name"},
		{user, api.RouteAddRSVPSession, nil, `{"name":"rtp","dest":"198.18.2.2:5004","proto":"udp"}`, 403, ""},
		{rootP, api.RouteAddRSVPSession, nil, `{"name":"rtp","dest":"198.18.2.2:5004","proto":"udp"}`, 201, ""},
		{rootP, api.RouteAddRSVPSession, nil, `{"name":"rtp2","dest":"198.18.2.2:5004","proto":"udp"}`, 400, `session "rtp" has the same destination`},
		{rootP, api.RouteRSVPSender, []string{"rtp"}, `{"port":4000,"tspec":{"r_Bps":250000}}`, 400, "tspec b: missing"},
		{rootP, api.RouteRSVPSender, []string{"rtp"}, `{"port":4000,"tspec":{"r_Bps":250000,"b_B":3000,"p_Bps":1000}}`, 400, "tspec p = 1000 B/s: below r"},
		{rootP, api.RouteRSVPSender, []string{"nope"}, `{"tspec":{"r_Bps":250000,"b_B":3000}}`, 404, ""},
		{user, api.RouteRSVPSender, []string{"rtp"}, `{"tspec":{"r_Bps":250000,"b_B":3000}}`, 403, ""},
		{rootP, api.RouteRSVPReserve, []string{"rtp"}, `{"service":"guaranteed","flowspec":{"r_Bps":250000,"b_B":3000,"R_Bps":1000}}`, 400, "flowspec R = 1000 B/s: below r"},
		{rootP, api.RouteRSVPReserve, []string{"rtp"}, `{"service":"controlled-load","flowspec":{"r_Bps":250000,"b_B":3000},"style":"wf"}`, 400, `field style = "wf"`},
		{rootP, api.RouteRSVPSender, []string{"rtp"}, `{"port":4000,"tspec":{"r_Bps":250000,"b_B":3000}}`, 200, ""},
		{rootP, api.RouteAddRSVPSession, nil, `{"name":"s2","dest":"198.18.2.2:5006","proto":"tcp"}`, 201, ""},
		{rootP, api.RouteAddRSVPSession, nil, `{"name":"s3","dest":"198.18.2.2:5008","proto":"tcp"}`, 429, "[rsvp] max_sessions"},
		{user, api.RouteRemoveRSVPSession, []string{"rtp"}, ``, 403, ""},
		{rootP, api.RouteRemoveRSVPSession, []string{"s2"}, ``, 200, ""},
	} {
		w := call(c.who, c.route, c.body, c.args...)
		var eb api.ErrorBody
		_ = json.Unmarshal(w.Body.Bytes(), &eb)
		if w.Code != c.code || !strings.Contains(eb.Error, c.says) || !json.Valid(w.Body.Bytes()) {
			t.Errorf("%s %s: %d %s; want %d with %q", c.route, c.body, w.Code, w.Body, c.code, c.says)
		}
	}
	w := call(user, api.RouteRSVP, "")
	var st api.RSVPStatus
	if err := json.Unmarshal(w.Body.Bytes(), &st); err != nil || len(st.Sessions) != 1 || st.Sessions[0].Sender == nil || len(st.Paths) != 1 {
		t.Fatalf("status as an ordinary user: %v %s", err, w.Body)
	}
	if len(sent) != 1 || sent[0].Msg.Type != rsvp.Path {
		t.Errorf("sent %d messages, want the one Path", len(sent))
	}
}

// TestBoundRSVPAnswers: ordinary users get at most maxUserLargeAnswers RSVP
// listings at once, both routes together (the next waits, then gets 503);
// root is not held back; a bad page is refused naming the parameter.
func TestBoundRSVPAnswers(t *testing.T) {
	defer func(w time.Duration) { largeAnswerWait = w }(largeAnswerWait)
	largeAnswerWait = 100 * time.Millisecond
	release := make(chan struct{})
	var inside atomic.Int32
	bound := newLargeAnswers(maxUserLargeAnswers).bound
	held := func(w http.ResponseWriter, r *http.Request) { inside.Add(1); <-release }
	mux := http.NewServeMux()
	mux.HandleFunc(api.RouteRSVP, bound(held))
	mux.HandleFunc(api.RouteRSVPSession, bound(held))
	call := func(p *peer, route string, args ...string) int {
		r := httptest.NewRequest(http.MethodGet, routePath(route, args...), nil)
		r = r.WithContext(context.WithValue(r.Context(), credKey{}, p))
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		return w.Code
	}
	user := &peer{UID: 1000}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); call(user, api.RouteRSVP) }()
	go func() { defer wg.Done(); call(&peer{UID: 1001}, api.RouteRSVPSession, "rtp") }()
	for inside.Load() != maxUserLargeAnswers {
		time.Sleep(time.Millisecond)
	}
	for _, route := range []string{api.RouteRSVP, api.RouteRSVPSession} {
		if code := call(user, route, "rtp"); code != http.StatusServiceUnavailable {
			t.Errorf("%s beyond the limit: status %d, want 503", route, code)
		}
	}
	rootDone := make(chan int)
	go func() { rootDone <- call(&peer{Privileged: true}, api.RouteRSVP) }()
	for inside.Load() != maxUserLargeAnswers+1 {
		time.Sleep(time.Millisecond) // root's is under way beside the two
	}
	close(release)
	if code := <-rootDone; code != http.StatusOK {
		t.Errorf("root's listing: status %d", code)
	}
	wg.Wait()

	d := newTestDaemon(t, t.TempDir())
	h := d.routes()
	for q, want := range map[string]string{"?limit=10001": "parameter limit", "?offset=-1": "parameter offset", "?page=2": "parameter page", "?limit=5&offset=5": ""} {
		r := httptest.NewRequest(http.MethodGet, api.Path(api.RouteRSVP)+q, nil)
		r = r.WithContext(context.WithValue(r.Context(), credKey{}, user))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if want == "" && w.Code != http.StatusOK || want != "" && (w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), want)) {
			t.Errorf("GET %s: %d %s, want %q", q, w.Code, w.Body, want)
		}
	}
}
