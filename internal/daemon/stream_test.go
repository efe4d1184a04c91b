package daemon

import (
	"bytes"
	"encoding/json"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/policy"
)

// TestStreamedAnswers: lists and stats written element by element are
// byte for byte what json.Encoder writes for the whole value.
func TestStreamedAnswers(t *testing.T) {
	rules := []api.RuleInfo{{Rule: rule("a"), Slot: 1}, {Rule: rule("b<&>"), Slot: -1, Resolved: []string{"x"}}}
	for _, v := range []any{rules, []api.ClassInfo{{Class: policy.DefaultClasses()[0]}}, []*api.Run{}, []api.RuleInfo(nil), map[string]string{"a": "b"}} {
		var want bytes.Buffer
		enc := json.NewEncoder(&want)
		enc.SetIndent("", "  ")
		_ = enc.Encode(v)
		w := httptest.NewRecorder()
		writeJSON(w, 200, v)
		if w.Body.String() != want.String() {
			t.Errorf("writeJSON(%T):\n%s\nwant\n%s", v, w.Body, &want)
		}
	}
	now := time.Now()
	for _, st := range []api.Stats{
		{Time: now, Interval: 1, Flows: []api.FlowStat{{Proto: "udp", Local: "1.2.3.4:5", UID: 7}, {Proto: "tcp", Exe: "/a<b>"}}},
		{Time: now, Interval: 1, Rules: []api.RuleStat{{Rule: "a"}}},
		{Time: now, Interval: 1, Apps: []api.AppStat{}},
		{Time: now, Interval: 1},
	} {
		var want bytes.Buffer
		_ = json.NewEncoder(&want).Encode(st)
		var got bytes.Buffer
		if err := writeStats(&got, st); err != nil {
			t.Fatal(err)
		}
		if got.String() != want.String() {
			t.Errorf("writeStats:\n%s\nwant\n%s", &got, &want)
		}
	}
}
