package daemon

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/hostqos/hostqos/api"
)

// largeRoutes are the routes whose answers grow with the policy, the flow
// table or users' activity (with their path arguments): each takes one of
// the places of large answers when an ordinary user asks.
var largeRoutes = []struct {
	route string
	args  []string
}{
	{api.RouteRules, nil},
	{api.RouteStats, []string{api.StatFlows}},
	{api.RouteStats, []string{api.StatApps}},
	{api.RouteStats, []string{api.StatRules}},
	{api.RouteBlocks, nil},
	{api.RouteProtected, nil},
	{api.RouteReservations, nil},
	{api.RouteQSockets, nil},
	{api.RouteExplain, nil},
}

// TestLargeAnswersBounded: while maxUserLargeAnswers large answers to
// ordinary users are under way, an ordinary user's request of any large
// listing waits, then gets 503 naming the limit; root's is answered at
// once; small answers (a link list, link statistics, one rule) are not
// held back; a place given back is taken by the next request.
func TestLargeAnswersBounded(t *testing.T) {
	defer func(d time.Duration) { largeAnswerWait = d }(largeAnswerWait)
	largeAnswerWait = 50 * time.Millisecond
	d, _, h := startTestDaemon(t)
	call := func(who *peer, route string, args ...string) *httptest.ResponseRecorder {
		return serve(h, who, route, "", args...)
	}
	root, user := &peer{UID: 0, Privileged: true}, &peer{UID: 1000}
	for _, lr := range largeRoutes {
		if w := call(user, lr.route, lr.args...); w.Code == http.StatusServiceUnavailable {
			t.Fatalf("%s %v with every place free: 503 %s", lr.route, lr.args, w.Body)
		}
	}
	// Two answers under way (clients that do not read).
	for i := 0; i < maxUserLargeAnswers; i++ {
		d.large.places <- struct{}{}
	}
	for _, lr := range largeRoutes {
		w := call(user, lr.route, lr.args...)
		if w.Code != http.StatusServiceUnavailable || !strings.Contains(w.Body.String(), "busy: 2 large answers") {
			t.Errorf("%s %v of an ordinary user while 2 large answers are under way: %d %s, want 503 busy", lr.route, lr.args, w.Code, w.Body)
		}
		if w := call(root, lr.route, lr.args...); w.Code == http.StatusServiceUnavailable {
			t.Errorf("%s %v of root held back: %s", lr.route, lr.args, w.Body)
		}
	}
	for _, small := range []struct {
		route string
		args  []string
	}{{api.RouteLinks, nil}, {api.RouteStats, []string{api.StatLinks}}, {api.RouteClasses, nil}, {api.RouteStatus, nil}} {
		if w := call(user, small.route, small.args...); w.Code == http.StatusServiceUnavailable {
			t.Errorf("%s %v (a small answer) held back: %s", small.route, small.args, w.Body)
		}
	}
	<-d.large.places
	if w := call(user, api.RouteBlocks); w.Code == http.StatusServiceUnavailable {
		t.Errorf("block list with a place free: 503 %s", w.Body)
	}
}
