package daemon

import (
	"net/http"
	"strings"
	"testing"

	"github.com/hostqos/hostqos/api"
)

// TestShieldRequestValidation: the XDP shield's requests are validated
// with an answer naming the field, the value and the fix, and nothing
// changes: a protected client must be one host that can connect (not the
// unspecified, broadcast, a multicast or a loopback address); a prefix is
// taken as written (no spaces around it); a block's maxbw_in given as 0
// is refused rather than taken as "drop" (0 is "no limit" for every
// rate; a block without maxbw_in drops).
func TestShieldRequestValidation(t *testing.T) {
	d, k, h := startTestDaemon(t)
	root := &peer{Privileged: true}
	for _, c := range []struct {
		route, body, field, has string
	}{
		{api.RouteAddProtected, `{"addr":"0.0.0.0"}`, "addr", "unspecified"},
		{api.RouteAddProtected, `{"addr":"::"}`, "addr", "unspecified"},
		{api.RouteAddProtected, `{"addr":"::ffff:0.0.0.0"}`, "addr", "unspecified"},
		{api.RouteAddProtected, `{"addr":"255.255.255.255"}`, "addr", "broadcast"},
		{api.RouteAddProtected, `{"addr":"224.0.0.1","port":443}`, "addr", "multicast"},
		{api.RouteAddProtected, `{"addr":"ff02::1"}`, "addr", "multicast"},
		{api.RouteAddProtected, `{"addr":"127.0.0.1"}`, "addr", "loopback"},
		{api.RouteAddProtected, `{"addr":"::1","port":22}`, "addr", "loopback"},
		{api.RouteAddProtected, `{"addr":" 198.51.100.7"}`, "addr", `has spaces around it; write \"198.51.100.7\"`},
		{api.RouteAddBlock, `{"prefix":"1.2.3.4/32 "}`, "prefix", `has spaces around it; write \"1.2.3.4/32\"`},
		{api.RouteAddBlock, `{"prefix":"1.2.3.4/32","maxbw_in":"0bit"}`, "maxbw_in", "leave maxbw_in out to drop everything"},
		{api.RouteAddBlock, `{"prefix":"1.2.3.4/32","maxbw_in":0}`, "maxbw_in", "0 is no limit"},
		{api.RouteAddBlock, `{"prefix":"1.2.3.4/32","maxbw_in":"1bit"}`, "maxbw_in", "left out to drop everything"},
	} {
		w := serve(h, root, c.route, c.body)
		if w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), `"Field": "`+c.field+`"`) || !strings.Contains(w.Body.String(), c.has) {
			t.Errorf("%s %s: %d %s; want 400 on field %s saying %q", c.route, c.body, w.Code, w.Body, c.field, c.has)
		}
	}
	if len(k.Blocks) != 0 || len(k.Protected) != 0 {
		t.Errorf("refused requests changed the shield: blocks %v, protected %v", k.Blocks, k.Protected)
	}
	// What is valid still is.
	for _, c := range []struct{ route, body string }{
		{api.RouteAddBlock, `{"prefix":"1.2.3.4/32"}`},
		{api.RouteAddBlock, `{"prefix":"198.51.100.0/24","maxbw_in":"1mbit"}`},
		{api.RouteAddProtected, `{"addr":"198.51.100.7","port":443}`},
		{api.RouteAddProtected, `{"addr":"fe80::1"}`},
	} {
		if w := serve(h, root, c.route, c.body); w.Code != http.StatusOK {
			t.Errorf("%s %s: %d %s", c.route, c.body, w.Code, w.Body)
		}
	}
	blocks, err := d.eng.Blocks()
	if err != nil || len(blocks) != 2 || blocks[0].MaxBWIn != 0 || blocks[1].MaxBWIn != 1e6 {
		t.Errorf("blocks after the valid requests: %+v, %v", blocks, err)
	}
}
