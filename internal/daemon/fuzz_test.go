package daemon

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/engine"
	"github.com/hostqos/hostqos/internal/rsvp"
)

// fuzzRoutes are the routes whose handlers decode a request body, with
// the path arguments they get (objects the fuzzed daemon has).
var fuzzRoutes = []struct {
	route string
	args  []string
}{
	{api.RouteSetLink, []string{"eth0"}},
	{api.RoutePatchLink, []string{"eth0"}},
	{api.RouteAddClass, nil},
	{api.RouteSetClass, []string{"gold"}},
	{api.RouteAddRule, nil},
	{api.RouteSetRule, []string{"web"}},
	{api.RouteStartRun, nil},
	{api.RouteAddRSVPSession, nil},
	{api.RouteRSVPSender, []string{"rtp"}},
	{api.RouteRSVPReserve, []string{"rtp"}},
}

// FuzzAPIBody sends each route that reads a body (every decoder of the
// API) a fuzzed body, through the daemon's real handlers over an engine
// on the fake kernel, as root (and, for a run, as an ordinary user whose
// process is gone, so that no real process is moved). Whatever the body:
// no panic; the answer is one of the API's codes (never a 500: the fake
// kernel takes whatever the engine accepts) with a JSON body; a refused
// request changes nothing (links, classes, rules, runs and RSVP sessions
// as before).
// Without -fuzz it runs the seeds below and testdata/fuzz/FuzzAPIBody.
func FuzzAPIBody(f *testing.F) {
	for _, s := range []struct {
		route int
		body  string
	}{
		{0, `{"egress_rate":"100mbit"}`},
		{0, `{"egress_rate":"1gbit","reservable":0.5}`},
		{0, `{"egress_rate":"1gbit","reservable":1.5}`},
		{1, `{"name":"silver","dscp":"AF12","priority":3,"user_allowed":true}`},
		{1, `{"name":"g2","dscp":"AF11","minbw":"10mbit","maxbw":"20mbit"}`},
		{2, `{"dscp":"AF22"}`},
		{2, `{"name":"other"}`},
		{3, `{"name":"r1","proto":"udp","rport":"5000-5010","remote":"198.18.1.0/24","dscp":"EF"}`},
		{3, `{"name":"r2","exe":"/usr/bin/true","class":"bulk","maxbw":"1mbit"}`},
		{3, `{"name":"r3","local":"2001:db8::/32","action":"drop"}`},
		{3, `{"name":"r4","comm":"x","max_bw":"1mbit"}`},
		{4, `{"class":"bulk"}`},
		{4, `{"maxbw":"1 donut"}`},
		{5, `{"pid":1073741824,"class":"bulk"}`},
		{5, `{"pid":1,"dscp":"EF","cmd":"x"}`},
		{3, `null`},
		{3, ``},
		{3, `{"name":"r5"} {}`},
		{6, `{"name":"rtp6","dest":"[2001:db8:2::2]:5004","proto":"udp"}`},
		{6, `{"name":"m","dest":"224.0.0.5:5004","proto":"tcp"}`},
		{7, `{"port":4000,"tspec":{"r_Bps":250000,"b_B":3000,"p_Bps":1e38,"m_B":64,"M_B":1500}}`},
		{7, `{"tspec":{"r_Bps":-1,"b_B":3000}}`},
		{8, `{"service":"guaranteed","flowspec":{"r_Bps":250000,"b_B":3000,"M_B":1500,"R_Bps":275000,"S_us":10},"style":"se","confirm":true}`},
		{8, `{"service":"controlled-load","flowspec":{"r_Bps":250000,"b_B":3000},"style":"ff"}`},
	} {
		f.Add(uint8(s.route), []byte(s.body))
	}
	f.Fuzz(func(t *testing.T, route uint8, body []byte) {
		dir := t.TempDir()
		d := newTestDaemon(t, dir)
		k := engine.NewFakeKernel(dir)
		k.Ifindexes["eth0"] = 2
		if err := d.eng.Start(k); err != nil {
			t.Fatal(err)
		}
		// RSVP's front door without sockets: what it sends is dropped.
		local := func(dst netip.Addr) (netip.Addr, bool, error) {
			a := netip.MustParseAddr("198.18.1.2")
			return a, dst == a, nil
		}
		d.rsvp = &rsvpAgent{front: engine.NewRSVP(d.eng, engine.RSVPOptions{Refresh: time.Second, Local: local, MaxSessions: 4})}
		d.rsvp.front.SetSend(func([]rsvp.Out) {})
		h := d.routes()
		rootP := &peer{Privileged: true}
		call := func(who *peer, route string, body []byte, args ...string) *httptest.ResponseRecorder {
			r := httptest.NewRequest(routeMethod(route), routePath(route, args...), strings.NewReader(string(body)))
			r = r.WithContext(context.WithValue(r.Context(), credKey{}, who))
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			return w
		}
		// Objects for the PATCH and PUT routes.
		for _, setup := range []struct{ route, body string }{
			{api.RouteAddClass, `{"name":"gold","dscp":"AF21"}`},
			{api.RouteAddRule, `{"name":"web","proto":"tcp","rport":"443","class":"interactive"}`},
			{api.RouteAddRSVPSession, `{"name":"rtp","dest":"198.18.2.2:5004","proto":"udp"}`},
		} {
			if w := call(rootP, setup.route, []byte(setup.body)); w.Code != 201 {
				t.Fatalf("setup %s: %d %s", setup.route, w.Code, w.Body)
			}
		}
		snapshot := func() string {
			rules, err := d.eng.Rules(*rootP, "")
			if err != nil {
				t.Fatal(err)
			}
			classes, err := d.eng.Classes("")
			if err != nil {
				t.Fatal(err)
			}
			b, err := json.Marshal([]any{d.eng.Links(), classes, rules, d.eng.Runs(*rootP), d.rsvp.front.Status(*rootP, api.RSVPListQuery{}).Sessions})
			if err != nil {
				t.Fatal(err)
			}
			return string(b)
		}
		before := snapshot()

		rt := fuzzRoutes[int(route)%len(fuzzRoutes)]
		who := rootP
		if rt.route == api.RouteStartRun {
			who = &peer{UID: 65534, GID: 65534, PID: 1 << 30} // gone: nothing to move
		}
		w := call(who, rt.route, body, rt.args...)
		t.Logf("%s %q: %d %s", rt.route, body, w.Code, w.Body)
		switch w.Code {
		case 200, 201, 400, 403, 404, 409, 413, 429:
		default:
			t.Fatalf("%s %q: status %d: %s", rt.route, body, w.Code, w.Body)
		}
		if !json.Valid(w.Body.Bytes()) {
			t.Fatalf("%s %q: answer %d is not JSON: %q", rt.route, body, w.Code, w.Body)
		}
		if w.Code >= 400 {
			var eb api.ErrorBody
			if err := json.Unmarshal(w.Body.Bytes(), &eb); err != nil || eb.Error == "" {
				t.Fatalf("%s %q: refusal %d without an error text: %s", rt.route, body, w.Code, w.Body)
			}
			if after := snapshot(); after != before {
				t.Fatalf("%s %q: refused (%d %s) yet the policy changed:\nbefore %s\nafter  %s", rt.route, body, w.Code, w.Body, before, after)
			}
		}
	})
}
