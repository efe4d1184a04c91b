package engine

import (
	"context"
	"net/netip"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/datapath"
	"github.com/hostqos/hostqos/internal/history"
	"github.com/hostqos/hostqos/internal/observe"
)

func flowAt(port uint16, pid, uid uint32, bytes uint64, firstNS, lastNS uint64) datapath.Flow {
	return datapath.Flow{
		Key: datapath.FlowKey{Proto: 6, Local: netip.MustParseAddrPort("198.18.0.1:" + strconv.Itoa(int(port))),
			Remote: netip.MustParseAddrPort("198.18.0.2:80")},
		RuleSlot: -1, PID: pid, Comm: "curl", UID: uid,
		Counters:    datapath.Counters{Bytes: bytes, Packets: bytes / 100},
		FirstSeenNS: firstNS, LastSeenNS: lastNS,
	}
}

// TestHistoryRecordsAppsAndEndedFlows: after the first walk (a baseline),
// each flow's new bytes go to its app; a flow idle for FlowIdle is recorded
// once, however many ticks see it idle; an evicted flow is recorded with
// its last counters; an ordinary user's query shows only their own.
func TestHistoryRecordsAppsAndEndedFlows(t *testing.T) {
	env := newEnv(t, "")
	e := env.start(t)
	st, err := history.Open(filepath.Join(env.dir, "history.db"), history.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	e.SetHistory(st, observe.HistoryOptions{FlowIdle: 2 * time.Second})
	mono := monoNow()
	busy := flowAt(4000, 4242, 1001, 1000, mono-uint64(time.Minute), mono)
	env.k.FlowTable = []datapath.Flow{busy}
	e.Tick() // baseline: 1000 bytes were before the daemon
	busy.Bytes, busy.Packets = 6000, 60
	idle := flowAt(4001, 4242, 1001, 700, mono-uint64(time.Minute), mono-uint64(10*time.Second))
	evicted := flowAt(4002, 4243, 1001, 300, monoNow(), monoNow())
	env.k.FlowTable = []datapath.Flow{busy, idle, evicted}
	e.Tick()
	e.Tick() // idle again: not recorded twice
	env.k.FlowTable = []datapath.Flow{busy, idle}
	e.Tick()
	uid := uint32(1001)
	e.Publish(api.Event{Kind: "quota.reached", Subject: "rule/web", Message: "5 MB", UID: &uid})
	if err := st.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	since := time.Now().Add(-time.Minute)
	if evs, err := st.Events(context.Background(), since, time.Now(), 1001, 0); err != nil || len(evs) != 1 || evs[0].Kind != "quota.reached" {
		t.Errorf("events in the history: %+v, %v; want the published one", evs, err)
	}
	if evs, _ := st.Events(context.Background(), since, time.Now(), 1002, 0); len(evs) != 0 {
		t.Errorf("uid 1002 sees uid 1001's event: %+v", evs)
	}
	h, err := e.History(context.Background(), alice, api.HistoryQuery{Kind: api.HistoryFlows, Since: since})
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Flows) != 2 {
		t.Fatalf("flow records = %+v, want the idle and the evicted flow once each", h.Flows)
	}
	for _, f := range h.Flows {
		if f.Local == "198.18.0.1:4001" && f.BytesOut != 700 || f.Local == "198.18.0.1:4002" && f.BytesOut != 300 {
			t.Errorf("flow %s: %d bytes out", f.Local, f.BytesOut)
		}
		if f.End.Before(f.Start) || f.Comm != "curl" || f.PID == 0 {
			t.Errorf("flow record %+v", f)
		}
	}
	apps, err := e.History(context.Background(), alice, api.HistoryQuery{Kind: api.HistoryApps, Since: since})
	if err != nil {
		t.Fatal(err)
	}
	var out uint64
	for _, s := range apps.Series {
		out += s.Total.BytesOut
	}
	// 5000 new bytes of busy, all 700 of idle and 300 of evicted (new
	// flows after the baseline).
	if out != 6000 {
		t.Errorf("apps carried %d bytes out, want 6000: %+v", out, apps.Series)
	}
	other, _ := e.History(context.Background(), nobody, api.HistoryQuery{Kind: api.HistoryApps, Since: since})
	flows, _ := e.History(context.Background(), nobody, api.HistoryQuery{Kind: api.HistoryFlows, Since: since})
	if len(other.Series) != 0 || len(flows.Flows) != 0 {
		t.Errorf("nobody sees alice's apps %+v and flows %+v", other.Series, flows.Flows)
	}
	if _, err := e.History(context.Background(), alice, api.HistoryQuery{Kind: "nope"}); err == nil {
		t.Error("kind nope accepted")
	} else if _, ok := err.(*BadRequestError); !ok {
		t.Errorf("kind nope: %T %v, want a BadRequestError", err, err)
	}
}

func TestMaxAppsAggregatesOthers(t *testing.T) {
	env := newEnv(t, "")
	e := env.start(t)
	e.SetHistory(nil, observe.HistoryOptions{MaxApps: 1})
	mono := monoNow()
	env.k.FlowTable = nil
	e.Tick()
	a := flowAt(5000, 10, 1001, 100, mono, mono)
	b := flowAt(5001, 11, 1001, 200, mono, mono)
	b.Comm = "wget"
	env.k.FlowTable = []datapath.Flow{a, b}
	e.Tick()
	got := map[string]uint64{}
	for _, c := range e.AppTotals() {
		got[c.Name] += c.BytesOut
	}
	if len(got) != 2 || got[observe.OtherApp] == 0 {
		t.Errorf("apps = %v, want one named and %q", got, observe.OtherApp)
	}
}
