package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/history"
	"github.com/hostqos/hostqos/internal/observe"
	"github.com/hostqos/hostqos/internal/rsvp"
	"github.com/hostqos/hostqos/internal/rsvpfront"
)

// What a route reads of a request, and so what the fuzzed bytes become.
type fuzzInput int

const (
	fuzzBody  fuzzInput = iota // the request body
	fuzzParam                  // its last path parameter
	fuzzQuery                  // its query string
)

// fuzzRoute is how FuzzAPIBody sends one route.
type fuzzRoute struct {
	route string
	// args are the path parameters: objects the fuzzed daemon has (with
	// fuzzParam, all but the last, which is the fuzzed input).
	args []string
	in   fuzzInput
	// user: sent by an ordinary user (uid 65534) whose process is gone,
	// so that nothing real is moved or torn down; else by root.
	user bool
	// fd: a socket (of the fake kernel) passed with the request, as
	// SCM_RIGHTS would pass it.
	fd bool
	// conn: the request's connection has a peer (this process).
	conn  bool
	seeds []string
}

// fuzzRoutes covers every route of the API (TestFuzzCoversEveryRoute
// holds it to api.Routes), each with the seeds FuzzAPIBody starts from.
var fuzzRoutes = []fuzzRoute{
	{route: api.RouteSetLink, args: []string{"eth0"}, seeds: []string{`{"egress_rate":"100mbit"}`, `{"egress_rate":"1gbit","reservable":0.5}`, `{"egress_rate":"1gbit","reservable":1.5}`}},
	{route: api.RoutePatchLink, args: []string{"eth0"}, seeds: []string{`{"syn_rate":"2000/s","syn_rate_per_source":"20/s"}`, `{"egress_rate":null}`, `{"ingress_rate":"50mbit"}`}},
	{route: api.RouteAddClass, seeds: []string{`{"name":"silver","dscp":"AF12","priority":3,"user_allowed":true}`, `{"name":"g2","dscp":"AF11","minbw":"10mbit","maxbw":"20mbit"}`}},
	{route: api.RouteSetClass, args: []string{"gold"}, seeds: []string{`{"dscp":"AF22"}`, `{"name":"other"}`}},
	{route: api.RouteAddRule, seeds: []string{`{"name":"r1","proto":"udp","rport":"5000-5010","remote":"198.18.1.0/24","dscp":"EF"}`,
		`{"name":"r2","exe":"/usr/bin/true","class":"bulk","maxbw":"1mbit"}`, `{"name":"r3","local":"2001:db8::/32","action":"drop"}`,
		`{"name":"r4","comm":"x","max_bw":"1mbit"}`, `null`, ``, `{"name":"r5"} {}`, `{"name":"r6","remote":" 198.18.1.0/24"}`}},
	{route: api.RouteSetRule, args: []string{"web"}, seeds: []string{`{"class":"bulk"}`, `{"maxbw":"1 donut"}`}},
	{route: api.RouteStartRun, user: true, seeds: []string{`{"pid":1073741824,"class":"bulk"}`, `{"pid":1,"dscp":"EF","cmd":"x"}`}},
	{route: api.RouteAddRSVPSession, seeds: []string{`{"name":"rtp6","dest":"[2001:db8:2::2]:5004","proto":"udp"}`, `{"name":"m","dest":"224.0.0.5:5004","proto":"tcp"}`}},
	{route: api.RouteRSVPSender, args: []string{"rtp"}, seeds: []string{`{"port":4000,"tspec":{"r_Bps":250000,"b_B":3000,"p_Bps":1e38,"m_B":64,"M_B":1500}}`, `{"tspec":{"r_Bps":-1,"b_B":3000}}`}},
	{route: api.RouteRSVPReserve, args: []string{"rtp"}, seeds: []string{`{"service":"guaranteed","flowspec":{"r_Bps":250000,"b_B":3000,"M_B":1500,"R_Bps":275000,"S_us":10},"style":"se","confirm":true}`,
		`{"service":"controlled-load","flowspec":{"r_Bps":250000,"b_B":3000},"style":"ff"}`}},

	{route: api.RouteStatus, seeds: []string{``}},
	{route: api.RouteContainers, seeds: []string{``}},
	{route: api.RouteContainers, user: true, seeds: []string{``}},
	{route: api.RouteWebToken, seeds: []string{``, `{}`}},
	{route: api.RouteLinks, seeds: []string{``}},
	{route: api.RouteRemoveLink, in: fuzzParam, seeds: []string{`eth0`, `eth1`, `..`}},
	{route: api.RouteClasses, seeds: []string{``}},
	{route: api.RouteClass, in: fuzzParam, seeds: []string{`gold`, `nothing`}},
	{route: api.RouteRemoveClass, in: fuzzParam, seeds: []string{`gold`, `default`}},
	{route: api.RouteRules, seeds: []string{``}},
	{route: api.RouteRule, in: fuzzParam, seeds: []string{`web`, `prot:198.51.100.7:443`}},
	{route: api.RouteRemoveRule, in: fuzzParam, seeds: []string{`web`, `run-1`}},
	{route: api.RouteRuns, seeds: []string{``}},
	{route: api.RouteEndRun, in: fuzzParam, seeds: []string{`run-1`, `x`}},
	{route: api.RouteStats, in: fuzzParam, seeds: []string{api.StatFlows, api.StatRules, `nothing`}},
	{route: api.RouteHistory, in: fuzzQuery, args: []string{"links"}, seeds: []string{`since=1h&step=1m`, `name=eth0&limit=-1`, `bogus=1`}},
	{route: api.RouteHistory, in: fuzzParam, seeds: []string{`flows`, `rules`, `nothing`}},
	{route: api.RouteExplain, in: fuzzQuery, seeds: []string{`proto=tcp&remote=198.18.0.2&rport=443`, `pid=1`, `exe=/usr/bin/true&dscp=46`, `pid=-1&bogus=1`, `lport=0&proto=icmp`}},
	{route: api.RouteExplain, in: fuzzQuery, user: true, seeds: []string{`pid=1`, `exe=/etc/shadow`, `remote=198.18.0.2`}},
	{route: api.RouteReload, user: true, seeds: []string{``}},
	{route: api.RouteDown, user: true, seeds: []string{``}},
	{route: api.RouteEvents, in: fuzzQuery, seeds: []string{`since=0`, `kind=rule,link`, `since=-1`}},

	{route: api.RouteReservations, seeds: []string{``}},
	{route: api.RouteReservation, in: fuzzParam, seeds: []string{`vc`, `nothing`}},
	{route: api.RouteAddReservation, seeds: []string{`{"name":"r2","proto":"udp","rport":"6000","service":"guaranteed","rate":"1mbit","burst":"3000b","max_unit":"1500b"}`,
		`{"name":"r3","service":"controlled-load","rate":"0","burst":"1b"}`}},
	{route: api.RouteSetReservation, args: []string{"vc"}, seeds: []string{`{"rate":"2mbit"}`, `{"service":"none"}`}},
	{route: api.RouteRemoveReservation, in: fuzzParam, seeds: []string{`vc`, `nothing`}},

	{route: api.RouteRSVP, in: fuzzQuery, seeds: []string{``, `offset=1&limit=1`, `limit=100000`, `offset=-1`}},
	{route: api.RouteRSVPSession, in: fuzzParam, seeds: []string{`rtp`, `nothing`}},
	{route: api.RouteRemoveRSVPSession, in: fuzzParam, seeds: []string{`rtp`, `nothing`}},

	{route: api.RouteQSockInit, seeds: []string{`{"link":"eth0","egress_rate":"100mbit"}`, `{"link":"nothing"}`}},
	{route: api.RouteQSockets, seeds: []string{``}},
	{route: api.RouteQSockAttach, fd: true, seeds: []string{`{"class":"interactive"}`, `{"scheduler":"edf-lossy","rate":18446744073705551617}`, `{"dscp":64}`}},
	{route: api.RouteQSockChange, fd: true, seeds: []string{`{"class":"bulk"}`, `{"scheduler":"dwcs","oln":3,"old":2}`}},
	{route: api.RouteQSockInfo, fd: true, seeds: []string{`{}`, `[]`}},
	{route: api.RouteQSockDetach, fd: true, seeds: []string{`{}`}},

	{route: api.RouteRTChannels, seeds: []string{``}},
	{route: api.RouteRTChannel, in: fuzzParam, seeds: []string{`1`, `0`, `x`}},
	{route: api.RouteAdmitRTChannel, conn: true, seeds: []string{`{"link":"eth0","message_bytes":1400,"period_ns":20000000,"burst":1,"delay_ns":50000000}`,
		`{"link":"eth0","message_bytes":1400,"period_ns":180000,"burst":1,"delay_ns":3600e9}`}},
	{route: api.RouteCloseRTChannel, in: fuzzParam, seeds: []string{`1`, `18446744073709551616`}},

	{route: api.RouteBlocks, seeds: []string{``}},
	{route: api.RouteAddBlock, seeds: []string{`{"prefix":"198.51.100.0/24","maxbw_in":"1mbit","ttl_s":60}`, `{"prefix":"1.2.3.4/32 "}`,
		`{"prefix":"1.2.3.4/32","maxbw_in":"0bit"}`, `{"prefix":"2001:db8:bad::/48","ttl_s":-1}`}},
	{route: api.RouteRemoveBlock, in: fuzzParam, seeds: []string{`203.0.113.0/24`, `1.2.3.4/32 `}},
	{route: api.RouteProtected, seeds: []string{``}},
	{route: api.RouteAddProtected, seeds: []string{`{"addr":"198.51.100.8","port":443,"class":"voice"}`, `{"addr":"0.0.0.0"}`, `{"addr":"255.255.255.255"}`, `{"addr":"fe80::1%eth0"}`}},
	{route: api.RouteRemoveProtected, in: fuzzParam, seeds: []string{`198.51.100.7:443`, `[::]:0`}},
}

// fuzzSetup are the objects every fuzzed daemon starts with (added by
// root), for the routes that name one.
var fuzzSetup = []struct {
	route, body string
	args        []string
}{
	{api.RouteAddClass, `{"name":"gold","dscp":"AF21"}`, nil},
	{api.RouteAddRule, `{"name":"web","proto":"tcp","rport":"443","class":"interactive"}`, nil},
	{api.RouteAddRSVPSession, `{"name":"rtp","dest":"198.18.2.2:5004","proto":"udp"}`, nil},
	{api.RouteSetLink, `{"egress_rate":"100mbit"}`, []string{"eth0"}},
	{api.RouteAddReservation, `{"name":"vc","proto":"udp","rport":"5004","service":"guaranteed","rate":"1mbit","burst":"3000b","max_unit":"1500b"}`, nil},
	{api.RouteAddBlock, `{"prefix":"203.0.113.0/24"}`, nil},
	{api.RouteAddProtected, `{"addr":"198.51.100.7","port":443}`, nil},
}

// TestFuzzCoversEveryRoute: FuzzAPIBody has seeds for every route of the
// API (api.Routes, which its own test holds to the package's Route
// constants), names no route the API lacks, and the daemon serves each.
func TestFuzzCoversEveryRoute(t *testing.T) {
	_, _, h := startTestDaemon(t)
	routes := api.Routes()
	for _, r := range routes {
		seeded := false
		for _, fr := range fuzzRoutes {
			seeded = seeded || (fr.route == r && len(fr.seeds) > 0)
		}
		if !seeded {
			t.Errorf("route %q has no seed in fuzzRoutes (FuzzAPIBody): add it with what it reads", r)
		}
	}
	for _, fr := range fuzzRoutes {
		if !slices.Contains(routes, fr.route) {
			t.Errorf("fuzzRoutes names %q, which api.Routes does not have", fr.route)
			continue
		}
		args := fr.args
		if fr.in == fuzzParam {
			args = append(slices.Clip(args), fr.seeds[0])
		}
		w := serve(h, &peer{Privileged: true, UID: 65534}, fr.route, "{}", args...)
		if strings.Contains(w.Body.String(), "no such endpoint") {
			t.Errorf("the daemon does not serve %q: %s", fr.route, w.Body)
		}
	}
}

// FuzzAPIBody sends each route of the API a fuzzed input — its body, path
// parameter or query, whichever it reads — through the daemon's real
// handlers over an engine on the fake kernel (with qsockets and the XDP
// shield), as root, or, where a route would act on the real host (a run,
// down, reload), as an ordinary user whose process is gone. Whatever the
// input: no panic; the answer is one of the API's codes (never a 500: the
// fake kernel takes whatever the engine accepts) with a JSON body; a
// refused request changes nothing (links, classes, rules, runs, RSVP
// sessions, reservations, qsockets, channels, blocks and protected
// clients as before).
// Without -fuzz it runs the seeds of fuzzRoutes and testdata/fuzz/FuzzAPIBody.
func FuzzAPIBody(f *testing.F) {
	for i, fr := range fuzzRoutes {
		for _, s := range fr.seeds {
			f.Add(uint8(i), []byte(s))
		}
	}
	// One history store for every run (opening one is slow); only read.
	hist, err := history.Open(filepath.Join(f.TempDir(), "history.db"), history.Options{})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { hist.Close() })
	f.Fuzz(func(t *testing.T, route uint8, input []byte) {
		d, k, h := startTestDaemon(t)
		d.eng.SetHistory(hist, observe.HistoryOptions{})
		// RSVP's front door without sockets: what it sends is dropped.
		local := func(dst netip.Addr) (netip.Addr, bool, error) {
			a := netip.MustParseAddr("198.18.1.2")
			return a, dst == a, nil
		}
		d.rsvp = &rsvpAgent{front: rsvpfront.New(d.eng, rsvpfront.Options{Refresh: time.Second, Local: local, MaxSessions: 4})}
		d.rsvp.front.SetSend(func([]rsvp.Out) {})
		root := &peer{Privileged: true}
		for _, s := range fuzzSetup {
			if w := serve(h, root, s.route, s.body, s.args...); w.Code != http.StatusOK && w.Code != http.StatusCreated {
				t.Fatalf("setup %s: %d %s", s.route, w.Code, w.Body)
			}
		}
		snapshot := func() string {
			rules, err := d.eng.Rules(*root, "")
			if err != nil {
				t.Fatal(err)
			}
			classes, err := d.eng.Classes("")
			if err != nil {
				t.Fatal(err)
			}
			resvs, err := d.eng.Reservations(*root, "")
			if err != nil {
				t.Fatal(err)
			}
			blocks, err := d.eng.Blocks()
			if err != nil {
				t.Fatal(err)
			}
			prot, err := d.eng.Protected(*root)
			if err != nil {
				t.Fatal(err)
			}
			qs, err := d.eng.QSocks(*root)
			if err != nil {
				t.Fatal(err)
			}
			chans, err := d.eng.RTChannels(*root, 0)
			if err != nil {
				t.Fatal(err)
			}
			b, err := json.Marshal([]any{d.eng.Links(), classes, rules, d.eng.Runs(*root), d.rsvp.front.Status(*root, api.RSVPListQuery{}).Sessions,
				resvs, blocks, prot, qs, chans})
			if err != nil {
				t.Fatal(err)
			}
			return string(b)
		}
		before := snapshot()

		fr := fuzzRoutes[int(route)%len(fuzzRoutes)]
		who := root
		if fr.user {
			who = &peer{UID: 65534, GID: 65534, PID: 1 << 30} // gone: nothing to move
		}
		args, body, query := fr.args, []byte(nil), ""
		switch fr.in {
		case fuzzBody:
			body = input
		case fuzzParam:
			args = append(slices.Clip(args), string(input))
		case fuzzQuery:
			query = string(input)
		}
		r := httptest.NewRequest(api.Method(fr.route), api.Path(fr.route, args...), bytes.NewReader(body))
		r.URL.RawQuery = query
		ctx, cancel := context.WithTimeout(r.Context(), 100*time.Millisecond) // ends an event stream
		defer cancel()
		ctx = context.WithValue(ctx, credKey{}, who)
		if fr.fd {
			fd, err := unix.Open(os.DevNull, unix.O_RDONLY|unix.O_CLOEXEC, 0)
			if err != nil {
				t.Fatal(err)
			}
			k.Socket(fd, who.UID, uint64(1000+fd))
			q := &fdQueue{fds: []int{fd}}
			defer q.closeAll()
			ctx = context.WithValue(ctx, fdsKey{}, q)
		}
		if fr.conn {
			c := selfConn(t)
			ctx = context.WithValue(ctx, connKey{}, c)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r.WithContext(ctx))
		t.Logf("%s %q: %d %s", fr.route, input, w.Code, w.Body)
		switch w.Code {
		case 200, 201, 400, 403, 404, 409, 413, 429:
		case 301, 307, 308:
			if p := r.URL.Path; path.Clean(p) != p {
				return // "." or ".." as the parameter: the mux redirects to the clean path
			}
			t.Fatalf("%s %q: status %d: %s", fr.route, input, w.Code, w.Body)
		default:
			t.Fatalf("%s %q: status %d: %s", fr.route, input, w.Code, w.Body)
		}
		valid := json.Valid(w.Body.Bytes())
		if fr.route == api.RouteEvents && w.Code == http.StatusOK { // a stream: one JSON object per line
			valid = true
			for _, line := range bytes.Split(w.Body.Bytes(), []byte("\n")) {
				valid = valid && (len(bytes.TrimSpace(line)) == 0 || json.Valid(line))
			}
		}
		if !valid {
			t.Fatalf("%s %q: answer %d is not JSON: %q", fr.route, input, w.Code, w.Body)
		}
		if w.Code >= 400 {
			var eb api.ErrorBody
			if err := json.Unmarshal(w.Body.Bytes(), &eb); err != nil || eb.Error == "" {
				t.Fatalf("%s %q: refusal %d without an error text: %s", fr.route, input, w.Code, w.Body)
			}
			if after := snapshot(); after != before {
				t.Fatalf("%s %q: refused (%d %s) yet the policy changed:\nbefore %s\nafter  %s", fr.route, input, w.Code, w.Body, before, after)
			}
		}
	})
}

// selfConn is a Unix connection whose peer is this process (closed at the
// end of the test).
func selfConn(t *testing.T) *net.UnixConn {
	t.Helper()
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(pair[0]) })
	f := os.NewFile(uintptr(pair[1]), "peer")
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c.(*net.UnixConn)
}
