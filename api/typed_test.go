package api

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/netip"
	"testing"

	"github.com/hostqos/hostqos/internal/policy"
)

func TestPath(t *testing.T) {
	for _, c := range []struct {
		route  string
		params []string
		want   string
	}{
		{RouteStatus, nil, "/v1/status"},
		{RouteRule, []string{"web"}, "/v1/rules/web"},
		{RouteSetClass, []string{"a/b c"}, "/v1/classes/a%2Fb%20c"},
		{RouteStats, []string{StatFlows}, "/v1/stats/flows"},
	} {
		if got := Path(c.route, c.params...); got != c.want {
			t.Errorf("Path(%q, %q) = %q, want %q", c.route, c.params, got, c.want)
		}
	}
	for _, bad := range []func(){func() { Path(RouteRule) }, func() { Path(RouteRules, "x") }} {
		func() {
			defer func() {
				if recover() == nil {
					t.Error("Path with the wrong number of parameters did not panic")
				}
			}()
			bad()
		}()
	}
}

// TestTypedClientRequests: each typed method sends its route's method and
// path, the body and the options, and decodes the answer.
func TestTypedClientRequests(t *testing.T) {
	type req struct{ method, uri, key, body string }
	var got req
	answer := "null"
	sock := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got = req{r.Method, r.URL.RequestURI(), r.Header.Get(IdempotencyKeyHeader), string(b)}
		_, _ = io.WriteString(w, answer)
	}))
	c := NewClient(sock)
	ctx := context.Background()
	check := func(name string, err error, method, uri, body string) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got.method != method || got.uri != uri {
			t.Errorf("%s sent %s %s, want %s %s", name, got.method, got.uri, method, uri)
		}
		if body != "" && got.body != body {
			t.Errorf("%s sent body %s, want %s", name, got.body, body)
		}
		if method != "GET" && got.key == "" {
			t.Errorf("%s: change sent without an idempotency key", name)
		}
	}

	answer = `[{"rule":{"name":"web","comm":"nginx"},"source":"api"}]`
	rs, err := c.Rules().List(ctx)
	check("Rules().List", err, "GET", "/v1/rules", "")
	if len(rs) != 1 || rs[0].Rule.Name != "web" || rs[0].Rule.Comm != "nginx" {
		t.Errorf("Rules().List decoded %+v", rs)
	}
	answer = "null"
	err = c.Rules().Set(ctx, "a/b", Fields{"maxbw": nil}, Temporary(true), WithIdempotencyKey("key-0123456789abcdef"))
	check("Rules().Set", err, "PATCH", "/v1/rules/a%2Fb?temporary=1", `{"maxbw":null}`)
	if got.key != "key-0123456789abcdef" {
		t.Errorf("Rules().Set sent key %q, want the one given", got.key)
	}
	err = c.Rules().AddFields(ctx, "r", Fields{"comm": "x", "dscp": nil})
	check("Rules().AddFields", err, "POST", "/v1/rules", `{"comm":"x","name":"r"}`)
	err = c.Rules().Add(ctx, policy.Rule{Name: "r", Comm: "x", MaxBW: 5e6, DSCP: policy.NoDSCP, DSCPIn: policy.NoDSCP})
	check("Rules().Add", err, "POST", "/v1/rules", "")
	var r policy.Rule
	if err := json.Unmarshal([]byte(got.body), &r); err != nil || r.Name != "r" || r.Comm != "x" || r.MaxBW != 5e6 {
		t.Errorf("Rules().Add sent body %s (%v)", got.body, err)
	}
	err = c.Classes().Remove(ctx, "gold")
	check("Classes().Remove", err, "DELETE", "/v1/classes/gold", "")
	_, err = c.Links().Replace(ctx, policy.Link{Name: "eth0", EgressRate: 10e6}, Temporary(true))
	check("Links().Replace", err, "PUT", "/v1/links/eth0?temporary=1", "")
	var l policy.Link
	if json.Unmarshal([]byte(got.body), &l) != nil || l.EgressRate != 10e6 {
		t.Errorf("Links().Replace sent body %s", got.body)
	}
	_, err = c.Links().Set(ctx, "eth0", Fields{"syn_rate": 2000, "egress_rate": nil}, Temporary(true), Force(true))
	check("Links().Set", err, "PATCH", "/v1/links/eth0?temporary=1&force=1", `{"egress_rate":null,"syn_rate":2000}`)
	_, err = c.Reload(ctx, Force(true))
	check("Reload", err, "POST", "/v1/reload?force=1", "")
	err = c.Runs().End(ctx, "r1")
	check("Runs().End", err, "DELETE", "/v1/runs/r1", "")
	answer = `{"flows":[{"proto":"tcp","local":"a","remote":"b"}]}`
	st, err := c.Stats().Flows(ctx)
	check("Stats().Flows", err, "GET", "/v1/stats/flows", "")
	if len(st.Flows) != 1 || st.Flows[0].Proto != "tcp" {
		t.Errorf("Stats().Flows decoded %+v", st)
	}
	answer = `{"down":"removed it all"}`
	msg, err := c.Down(ctx)
	check("Down", err, "POST", "/v1/down", "")
	if msg != "removed it all" {
		t.Errorf("Down = %q", msg)
	}

	answer = `{"class":{"name":"gold","dscp":"AF21"},"source":"api"}`
	ci, err := c.Classes().Get(ctx, "gold")
	check("Classes().Get", err, "GET", "/v1/classes/gold", "")
	if ci.Class.Name != "gold" || ci.Source != "api" {
		t.Errorf("Classes().Get decoded %+v", ci)
	}
	answer = `[{"name":"eth0","egress_rate":"10mbit"}]`
	ls, err := c.Links().Set(ctx, "eth0", Fields{"egress_rate": "10mbit"})
	check("Links().Set", err, "PATCH", "/v1/links/eth0", `{"egress_rate":"10mbit"}`)
	if len(ls) != 1 || ls[0].Link.EgressRate != 10e6 {
		t.Errorf("Links().Set decoded %+v", ls)
	}
	answer = `{"reservation":{"name":"rtp","service":"guaranteed"},"admission":{"reserved":"2mbit"}}`
	ri, err := c.Reservations().Set(ctx, "rtp", Fields{"rate": "2mbit"}, Temporary(true))
	check("Reservations().Set", err, "PATCH", "/v1/reservations/rtp?temporary=1", `{"rate":"2mbit"}`)
	if ri.Reservation.Name != "rtp" || ri.Admission.Reserved != 2e6 {
		t.Errorf("Reservations().Set decoded %+v", ri)
	}
	ri, err = c.Reservations().Add(ctx, policy.NewReservation("rtp"))
	check("Reservations().Add", err, "POST", "/v1/reservations", "")
	if ri.Reservation.Name != "rtp" {
		t.Errorf("Reservations().Add decoded %+v", ri)
	}
	_, err = c.Reservations().Get(ctx, "rtp")
	check("Reservations().Get", err, "GET", "/v1/reservations/rtp", "")
	answer = `{"prefix":"203.0.113.0/24","source":"api","dropped":3}`
	bi, err := c.Shield().Block(ctx, BlockRequest{Prefix: netip.MustParsePrefix("203.0.113.0/24")})
	check("Shield().Block", err, "POST", "/v1/blocks", `{"prefix":"203.0.113.0/24"}`)
	if bi.Dropped != 3 {
		t.Errorf("Shield().Block decoded %+v", bi)
	}
	err = c.Shield().Unblock(ctx, netip.MustParsePrefix("203.0.113.0/24"))
	check("Shield().Unblock", err, "DELETE", "/v1/blocks/203.0.113.0%2F24", "")
	err = c.Shield().Unprotect(ctx, netip.MustParseAddr("2001:db8::1"), 443)
	check("Shield().Unprotect", err, "DELETE", "/v1/protected/%5B2001:db8::1%5D:443", "")
	answer = `[{"addr":"198.51.100.7","port":443,"uid":0,"class":"interactive"}]`
	ps, err := c.Shield().Protected(ctx)
	check("Shield().Protected", err, "GET", "/v1/protected", "")
	if len(ps) != 1 || ps[0].Port != 443 {
		t.Errorf("Shield().Protected decoded %+v", ps)
	}
}
