package observe

import (
	"context"
	"io"
	"log/slog"
	"maps"
	"net/netip"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/datapath"
	"github.com/hostqos/hostqos/internal/history"
	"github.com/hostqos/hostqos/internal/host/fakehost"
	"github.com/hostqos/hostqos/internal/shaper"
)

// fakeSource is an engine as the observer reads it: what it returns is
// what the test put in it.
type fakeSource struct {
	k          *fakehost.FakeKernel
	rules      []Rule
	up         map[string]int
	order      []string
	classes    []shaper.ClassSpec
	classRules []shaper.RuleSpec
	ctrs       map[int]Container
}

func (s *fakeSource) LinkView() LinkView {
	return LinkView{Kernel: s.k, Up: maps.Clone(s.up), Order: s.order, Classes: s.classes, ClassRules: s.classRules}
}

func (s *fakeSource) RuleView() RuleView {
	return RuleView{Kernel: s.k, Rules: slices.Clone(s.rules), Containers: maps.Clone(s.ctrs)}
}

func newFake(t *testing.T) *fakeSource {
	return &fakeSource{k: fakehost.NewFakeKernel(t.TempDir()), up: map[string]int{}}
}

func udpFlow(port uint16, pid, uid uint32, slot int, gen uint32) datapath.Flow {
	return datapath.Flow{
		Key: datapath.FlowKey{Proto: 17, Local: netip.MustParseAddrPort("198.18.0.1:" + strconv.Itoa(int(port))),
			Remote: netip.MustParseAddrPort("198.18.0.2:53")},
		RuleSlot: slot, Gen: gen, PID: pid, UID: uid, Comm: "app" + strconv.Itoa(int(pid)),
		Counters: datapath.Counters{Packets: 1, Bytes: 100}, FirstSeenNS: monoNow(), LastSeenNS: monoNow(),
	}
}

// TestRuleStatsCountFromTheRulesBaseline: a rule's counters are its slot's
// less what the slot had counted before the rule got it, with rates
// between samples; hidden rules and other users' objects' rules are left
// out, and so is a slot the kernel did not report.
func TestRuleStatsCountFromTheRulesBaseline(t *testing.T) {
	src := newFake(t)
	src.rules = []Rule{
		{Name: "web", Class: "default", Slot: 0, Base: datapath.Counters{Packets: 5, Bytes: 500}, Owner: -1},
		{Name: "run-other", Class: "bulk", Slot: 1, Owner: 1001},
		{Name: "reservation/call", Class: "voice", Slot: 2, Owner: 1001, Object: true},
		{Name: "protect/198.18.0.9:22", Class: "voice", Slot: 3, Owner: -1, Object: true},
		{Name: "far", Class: "default", Slot: 9, Owner: -1},
	}
	o := New(src, nil)
	src.k.Counters = make([]datapath.Counters, 4)
	src.k.Counters[0] = datapath.Counters{Packets: 10, Bytes: 1000}
	o.Sample()
	src.k.Counters[0] = datapath.Counters{Packets: 15, Bytes: 1500, RxPackets: 3, RxBytes: 300}
	o.Sample()

	names := func(rs []api.RuleStat) []string {
		var out []string
		for _, r := range rs {
			out = append(out, r.Rule)
		}
		return out
	}
	rs, err := o.RuleStats(map[string]bool{"run-other": true}, 1002)
	if err != nil {
		t.Fatal(err)
	}
	if got := names(rs); !slices.Equal(got, []string{"web", "protect/198.18.0.9:22"}) {
		t.Errorf("uid 1002 sees rules %v, want web and the admin's protected client", got)
	}
	if w := rs[0]; w.Packets != 10 || w.Bytes != 1000 || w.In.Packets != 3 || w.RateBps <= 0 {
		t.Errorf("web %+v, want 10 packets and 1000 bytes since it got its slot, 3 in, and a rate", w)
	}
	rs, err = o.RuleStats(nil, 1001)
	if err != nil {
		t.Fatal(err)
	}
	if got := names(rs); !slices.Equal(got, []string{"web", "run-other", "reservation/call", "protect/198.18.0.9:22"}) {
		t.Errorf("uid 1001 sees rules %v, want its run and reservation too", got)
	}
}

// TestFlowsOfASlotsEarlierOwnerAreUnnamed: a flow classified before its
// rule slot was handed to the rule that holds it now is named after no
// rule, in stat flows, stat apps and its history record; a flow classified
// since is named after the new owner.
func TestFlowsOfASlotsEarlierOwnerAreUnnamed(t *testing.T) {
	src := newFake(t)
	src.rules = []Rule{{Name: "dl", Class: "bulk", Slot: 3, Since: 7, Owner: -1}}
	o := New(src, nil)
	hs, err := history.Open(filepath.Join(t.TempDir(), "history.db"), history.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer hs.Close()
	o.SetHistory(hs, HistoryOptions{FlowIdle: time.Hour})
	old, fresh, none := udpFlow(4000, 10, 0, 3, 6), udpFlow(4001, 11, 0, 3, 7), udpFlow(4002, 12, 0, -1, 7)
	src.k.FlowTable = []datapath.Flow{old, fresh, none}
	o.RecordHistory() // the first walk

	fs, err := o.FlowStats(-1)
	if err != nil {
		t.Fatal(err)
	}
	rule := map[string]string{}
	for _, f := range fs {
		rule[f.Local] = f.Rule
	}
	if rule["198.18.0.1:4000"] != "" || rule["198.18.0.1:4001"] != "dl" || rule["198.18.0.1:4002"] != "" {
		t.Errorf("stat flows names the rules %v; want dl only for the flow classified since dl has the slot", rule)
	}
	as, err := o.AppStats(-1)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range as {
		if want := a.PID == fresh.PID; slices.Contains(a.Rules, "dl") != want {
			t.Errorf("stat apps: pid %d under rules %v", a.PID, a.Rules)
		}
	}

	src.k.FlowTable = []datapath.Flow{fresh, none}
	o.RecordHistory()
	if err := hs.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	h, err := o.History(context.Background(), api.HistoryQuery{Kind: api.HistoryFlows, Since: time.Now().Add(-time.Hour)}, -1)
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Flows) != 1 || h.Flows[0].Local != "198.18.0.1:4000" || h.Flows[0].Rule != "" {
		t.Errorf("history flow records %+v, want the earlier owner's flow without a rule", h.Flows)
	}
}

// TestClassStatsSumTheClassesLeaves: a class on a link carried what its
// own leaf and its rules' leaves carried; links not set up have no row;
// class default's IN includes what no rule matched.
func TestClassStatsSumTheClassesLeaves(t *testing.T) {
	src := newFake(t)
	src.up = map[string]int{"eth0": 2}
	src.order = []string{"eth0", "eth1"}
	src.classes = []shaper.ClassSpec{{Name: "default", Index: 0}, {Name: "voice", Index: 1}}
	src.classRules = []shaper.RuleSpec{{Slot: 5, Class: 1}}
	src.k.ClassCounters[2] = []shaper.ClassStats{
		{Minor: shaper.ClassLeafMinor(1), Packets: 5, Bytes: 500},
		{Minor: shaper.RuleLeafMinor(5), Packets: 7, Bytes: 700, Backlog: 2},
		{Minor: shaper.ClassLeafMinor(0), Packets: 1, Bytes: 100},
	}
	src.k.RxUnmatched = datapath.Counters{RxPackets: 4, RxBytes: 400}
	o := New(src, nil)
	o.Sample()
	cs, err := o.ClassStats()
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != 2 {
		t.Fatalf("class rows %+v, want default and voice on eth0", cs)
	}
	for _, c := range cs {
		switch {
		case c.Link != "eth0":
			t.Errorf("a row for link %s, which is not set up", c.Link)
		case c.Class == "voice" && (c.Packets != 12 || c.Bytes != 1200 || c.Backlog != 2):
			t.Errorf("voice %+v, want its leaf's and its rule's leaf's 12 packets", c)
		case c.Class == "default" && (c.Packets != 1 || c.In.Packets != 4):
			t.Errorf("default %+v, want 1 packet out and the 4 unmatched in", c)
		}
	}
}

// TestScanAppsAnnouncesANewAppOnce: the first scan learns the apps
// running; an app that opens its first flow later is announced once, to
// its owner (and the admins), at the next scan AppScanEvery on.
func TestScanAppsAnnouncesANewAppOnce(t *testing.T) {
	src := newFake(t)
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	o := New(src, func() time.Time { return now })
	src.k.FlowTable = []datapath.Flow{{PID: 999999, Comm: "sshd"}}
	if evs := o.ScanApps(); len(evs) != 0 {
		t.Fatalf("first scan announced %+v", evs)
	}
	src.k.FlowTable = append(src.k.FlowTable, datapath.Flow{PID: 999998, Comm: "curl", UID: 1002})
	now = now.Add(time.Second)
	if evs := o.ScanApps(); len(evs) != 0 {
		t.Errorf("a scan a second after the last announced %+v", evs)
	}
	now = now.Add(AppScanEvery)
	evs := o.ScanApps()
	if len(evs) != 1 || evs[0].Kind != EventAppSeen || evs[0].Subject != "app/curl" || evs[0].UID == nil || *evs[0].UID != 1002 {
		t.Fatalf("new app: events %+v, want app.seen of curl for uid 1002", evs)
	}
	now = now.Add(AppScanEvery)
	if evs := o.ScanApps(); len(evs) != 0 {
		t.Errorf("curl announced again: %+v", evs)
	}
}

// TestLinkStatsOneShot: stat links shows the rate of the last sample (as
// rules and classes do), so that a first reading, or one long after the
// previous, shows what the link carries now rather than 0 or an average
// since whoever asked before.
func TestLinkStatsOneShot(t *testing.T) {
	src := newFake(t)
	src.up = map[string]int{"eth0": 2}
	o := New(src, nil)
	var dev history.Counters
	o.s.netDev = func() map[string]history.Counters {
		return map[string]history.Counters{"eth0": dev, "lo": {BytesOut: 1 << 30}}
	}
	for range 3 { // 5 Mbit/s out, 1 Mbit/s in, a second apart at most
		o.Sample()
		time.Sleep(100 * time.Millisecond)
		dev.BytesOut += 62500
		dev.PacketsOut += 50
		dev.BytesIn += 12500
		dev.PacketsIn += 10
	}
	o.Sample()
	ls, err := o.LinkStats()
	if err != nil {
		t.Fatal(err)
	}
	if len(ls) != 1 || ls[0].Link != "eth0" {
		t.Fatalf("links %+v, want the managed eth0 only", ls)
	}
	l := ls[0]
	if l.RateBps <= 0 || l.PktRate <= 0 || l.In.RateBps <= 0 || l.In.RateBps >= l.RateBps || l.Bytes != dev.BytesOut {
		t.Errorf("a one-shot stat links: %+v, want the last sample's rates both ways and the counters now", l)
	}
}
