package daemon

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/hostqos/hostqos/api"
)

// TestObjectChangesAnswer: every kind of named object answers its changes
// as the API documents: an add with 201 and what was added (a reservation
// with its admission figures), a shield entry's add with 200 (it replaces
// one of the same prefix or client), a link change with the managed links,
// a patch with the object as changed, a remove with what it removed; a
// change by an ordinary user is refused with 403, except a protected
// client's, which the engine decides.
func TestObjectChangesAnswer(t *testing.T) {
	_, _, h := startTestDaemon(t)
	root, user := &peer{Privileged: true}, &peer{UID: 1000, GID: 1000, PID: 1 << 30}
	for _, c := range []struct {
		who   *peer
		route string
		body  string
		args  []string
		code  int
		has   string // a field of the answer (of its first element for a list)
		value string // the field's value, as JSON
	}{
		{root, api.RouteSetLink, `{"egress_rate":"100mbit"}`, []string{"eth0"}, 200, "egress_rate", `"100mbit"`},
		{root, api.RoutePatchLink, `{"syn_rate":2000}`, []string{"eth0"}, 200, "syn_rate", `2000`},
		{user, api.RoutePatchLink, `{"syn_rate":1}`, []string{"eth0"}, 403, "error", ""},
		{root, api.RouteAddClass, `{"name":"gold","dscp":"AF21"}`, nil, 201, "priority", `2`},
		{root, api.RouteSetClass, `{"priority":5}`, []string{"gold"}, 200, "priority", `5`},
		{root, api.RouteAddRule, `{"name":"web","proto":"tcp","rport":"443","class":"gold"}`, nil, 201, "class", `"gold"`},
		{user, api.RouteAddRule, `{"name":"w2","proto":"tcp"}`, nil, 403, "error", ""},
		{root, api.RouteSetRule, `{"maxbw":"1mbit"}`, []string{"web"}, 200, "maxbw", `"1mbit"`},
		{root, api.RouteAddReservation, `{"name":"vc","proto":"udp","rport":"5004","service":"guaranteed","rate":"1mbit","burst":"3000b","max_unit":"1500b"}`,
			nil, 201, "admission", ""},
		{root, api.RouteSetReservation, `{"rate":"2mbit"}`, []string{"vc"}, 200, "admission", ""},
		{root, api.RouteAddBlock, `{"prefix":"203.0.113.0/24"}`, nil, 200, "prefix", `"203.0.113.0/24"`},
		{user, api.RouteRemoveBlock, "", []string{"203.0.113.0/24"}, 403, "error", ""},
		{root, api.RouteAddProtected, `{"addr":"198.51.100.7","port":443}`, nil, 200, "addr", `"198.51.100.7"`},
		{user, api.RouteRemoveProtected, "", []string{"198.51.100.7:443"}, 403, "error", ""}, // the engine's refusal: not theirs
		{root, api.RouteRemoveProtected, "", []string{"198.51.100.7:443"}, 200, "removed", `"198.51.100.7:443"`},
		{root, api.RouteRemoveBlock, "", []string{"203.0.113.0/24"}, 200, "removed", `"203.0.113.0/24"`},
		{root, api.RouteRemoveReservation, "", []string{"vc"}, 200, "removed", `"vc"`},
		{root, api.RouteRemoveRule, "", []string{"web"}, 200, "removed", `"web"`},
		{root, api.RouteRemoveRule, "", []string{"web"}, 404, "error", ""},
		{root, api.RouteRemoveClass, "", []string{"gold"}, 200, "removed", `"gold"`},
		{root, api.RouteRemoveLink, "", []string{"eth0"}, 200, "removed", `"eth0"`},
	} {
		w := serve(h, c.who, c.route, c.body, c.args...)
		if w.Code != c.code {
			t.Errorf("%s %v: %d %s, want %d", c.route, c.args, w.Code, w.Body, c.code)
			continue
		}
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(w.Body.Bytes(), &obj); err != nil {
			var list []map[string]json.RawMessage
			if err := json.Unmarshal(w.Body.Bytes(), &list); err != nil || len(list) == 0 {
				t.Errorf("%s %v: answer %s is neither an object nor a list of them", c.route, c.args, w.Body)
				continue
			}
			obj = list[0]
		}
		v, ok := obj[c.has]
		if !ok || (c.value != "" && string(v) != c.value) {
			t.Errorf("%s %v: answer %s; want %s = %s", c.route, c.args, w.Body, c.has, c.value)
		}
	}
	if w := serve(h, root, api.RouteLinks, ""); w.Code != http.StatusOK || w.Body.String() != "null\n" {
		t.Errorf("links after removing the last: %d %q", w.Code, w.Body)
	}
}
