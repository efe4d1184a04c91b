package observe

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/apps"
	"github.com/hostqos/hostqos/internal/datapath"
	"github.com/hostqos/hostqos/internal/history"
	"github.com/hostqos/hostqos/internal/policy"
)

// HistoryOptions configure what the observer records in the history store.
type HistoryOptions struct {
	// FlowIdle is how long a flow may go without a packet before it is
	// recorded as ended (NetFlow's inactive timeout; config flow_idle).
	FlowIdle time.Duration
	// MaxApps is how many apps (executable and user, or container) get
	// a name of their own in history and metrics; the traffic of later
	// ones is counted as app "other" of their user (a container's: of
	// root) (config max_apps).
	MaxApps int
}

// OtherApp names the apps beyond HistoryOptions.MaxApps.
const OtherApp = "other"

// recorder follows the flow table from tick to tick: it adds each flow's
// new traffic to its app's counters, and records the flows that ended.
// Flows end in the datapath's LRU tables in one of two ways: they fall
// silent (recorded once idle for FlowIdle) or they are evicted (recorded
// when they are gone from a walk of the table, with their last counters).
//
// What it remembers of each flow between walks lives in the flow reader's
// record of the flow (datapath.FlowMemo, about 70 bytes), not in a table
// of its own.
type recorder struct {
	mu    sync.Mutex
	store *history.Store
	opt   HistoryOptions

	walked bool // the first walk after start only takes a baseline
	// appTotal and named: see app.
	appTotal map[appKey]*appCount
	named    int
	procs    map[uint32]procInfo
	// mark is what the last sample saw of the sampler (marked: one was
	// taken); while it holds, the rules' and classes' series are left
	// out as unchanged.
	mark   samplerMark
	marked bool
	// maps are the rules' owners, classes and slot owners, for the rule
	// list they were made of (the engine hands the same list until it
	// changes).
	maps struct {
		first   *Rule
		n       int
		owners  map[string]int64
		classOf map[string]string
		names   slotOwners
	}
}

// ruleMaps are the owners, classes and slot owners of rules, made again
// only when the list is another.
func (r *recorder) ruleMaps(rules []Rule) (map[string]int64, map[string]string, slotOwners) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var first *Rule
	if len(rules) > 0 {
		first = &rules[0]
	}
	m := &r.maps
	if m.owners == nil || m.first != first || m.n != len(rules) {
		m.first, m.n = first, len(rules)
		m.owners = make(map[string]int64, len(rules))
		m.classOf = make(map[string]string, len(rules))
		for _, rule := range rules {
			m.owners[rule.Name], m.classOf[rule.Name] = rule.Owner, rule.Class
		}
		m.names = newSlotOwners(rules)
	}
	return m.owners, m.classOf, m.names
}

// maxIdleRecords is how many flows that fell idle a walk records at most;
// the others stay idle in the table and are recorded by the next walks, so
// that 60,000 flows falling silent at once do not make one huge batch of
// records (and a heap to match).
const maxIdleRecords = 4096

// appKey is an app of history and metrics: an executable (or command
// name) and its user, or a container (history.ContainerApp) whichever of
// its processes sent, of uid 0: a container is the host's business, and
// only root and group hostqos see it (as they see containers).
type appKey struct {
	name string
	uid  uint32
}

// appCount is an app's cumulative counters, and a container's image.
type appCount struct {
	history.Counters
	image string
}

// procInfo is what a flow record says of its process, read when the
// recorder first saw it (the process may be gone when the flow ends).
type procInfo struct {
	exe, cgroup, unit string
}

// SetHistory makes RecordHistory record a sample in st (nil: keep the
// apps' totals only, for metrics).
func (o *Observer) SetHistory(st *history.Store, opt HistoryOptions) {
	var none policy.Settings
	if opt.FlowIdle == 0 {
		opt.FlowIdle = none.Span("flow_idle")
	}
	if opt.MaxApps == 0 {
		opt.MaxApps = none.Apps()
	}
	r := &recorder{store: st, opt: opt,
		appTotal: map[appKey]*appCount{}, procs: map[uint32]procInfo{}}
	o.histMu.Lock()
	o.hist = r
	o.histMu.Unlock()
}

func (o *Observer) recorder() *recorder {
	o.histMu.Lock()
	defer o.histMu.Unlock()
	return o.hist
}

// RecordEvent records a published event in the history store (when there
// is one); it never blocks.
func (o *Observer) RecordEvent(ev api.Event) {
	r := o.recorder()
	if r == nil || r.store == nil {
		return
	}
	owner := int64(-1)
	if ev.UID != nil {
		owner = int64(*ev.UID)
	}
	r.store.RecordEvent(history.Event{Time: time.Now(), Kind: ev.Kind, Subject: ev.Subject, Message: ev.Message, Fields: ev.Fields, Owner: owner})
}

// History answers a history query as a caller who may only see uid's apps,
// runs and flows (uid < 0: everything) may see it; ErrNoHistory without a
// history store, a *history.QueryError for a query that is not one.
func (o *Observer) History(ctx context.Context, q api.HistoryQuery, uid int64) (api.History, error) {
	r := o.recorder()
	if r == nil || r.store == nil {
		return api.History{}, ErrNoHistory
	}
	return r.store.Query(ctx, q, uid)
}

// HistoryWarning is status's warning while the history store is out of
// room and not recording ("" while it records).
func (o *Observer) HistoryWarning() string {
	r := o.recorder()
	if r == nil || r.store == nil {
		return ""
	}
	st := r.store.Stats()
	if st.Recording {
		return ""
	}
	return fmt.Sprintf("history is not recording (%d samples and events not recorded): %s; enforcement and policy changes are not affected", st.Refused, st.WhyNot)
}

// ErrNoHistory is History's error without a history store.
var ErrNoHistory = errors.New("hostqosd keeps no history: its history store did not open (see its log)")

// RecordHistory reads every counter once and hands the sample to the
// store (which writes it off the engine's lock, without blocking); the
// engine's Tick, every second.
func (o *Observer) RecordHistory() {
	r := o.recorder()
	if r == nil {
		return
	}
	sm, ok := o.readSample(r)
	if ok && r.store != nil {
		r.store.Record(sm)
	}
}

// readSample reads the sample of this tick.
func (o *Observer) readSample(r *recorder) (history.Sample, bool) {
	lv, rv := o.src.LinkView(), o.src.RuleView()
	k := rv.Kernel
	if k == nil {
		return history.Sample{}, false
	}
	linkNames := make([]string, 0, len(lv.Up))
	for name := range lv.Up {
		linkNames = append(linkNames, name)
	}
	owners, classOf, names := r.ruleMaps(rv.Rules)
	sm := history.Sample{Time: time.Now()}
	m, ok := o.s.mark(k)
	r.mu.Lock()
	unchanged := ok && r.marked && m == r.mark
	r.mark, r.marked = m, ok
	r.mu.Unlock()
	if unchanged {
		// Nothing counted since the last sample: no rule or class
		// series changed (a rule added since shows once it counts).
		sm.Unchanged = []string{history.KindRules, history.KindClasses}
	} else if rs, err := o.s.ruleStats(rv, nil, -1); err == nil {
		for _, rule := range rs {
			owner, ok := owners[rule.Rule]
			if !ok {
				owner = -1
			}
			sm.Series = append(sm.Series, history.Series{Kind: history.KindRules, Name: rule.Rule, Owner: owner,
				Counters: history.Counters{BytesOut: rule.Bytes, PacketsOut: rule.Packets, DropsOut: rule.Drops,
					BytesIn: rule.In.Bytes, PacketsIn: rule.In.Packets, DropsIn: rule.In.Drops}})
		}
	}
	if cs, err := o.classStatsUnless(unchanged, lv, rv); err == nil {
		for _, c := range classTotals(cs) {
			sm.Series = append(sm.Series, history.Series{Kind: history.KindClasses, Name: c.Class, Owner: -1,
				Counters: history.Counters{BytesOut: c.Bytes, PacketsOut: c.Packets, DropsOut: c.Drops,
					BytesIn: c.In.Bytes, PacketsIn: c.In.Packets, DropsIn: c.In.Drops}})
		}
	}
	dev := ReadNetDev()
	sort.Strings(linkNames)
	for _, name := range linkNames {
		if c, ok := dev[name]; ok {
			sm.Series = append(sm.Series, history.Series{Kind: history.KindLinks, Name: name, Owner: -1, Counters: c})
		}
	}
	ended := r.walk(k, rv.Containers, names, classOf, sm.Time)
	sm.Flows = ended
	r.mu.Lock()
	for key, c := range r.appTotal {
		owner := int64(key.uid)
		sm.Series = append(sm.Series, history.Series{Kind: history.KindApps, Name: key.name, Owner: owner, Image: c.image, Counters: c.Counters})
	}
	r.mu.Unlock()
	return sm, true
}

// classStatsUnless is the classes' statistics, none when unchanged.
func (o *Observer) classStatsUnless(unchanged bool, lv LinkView, rv RuleView) ([]api.ClassStat, error) {
	if unchanged {
		return nil, nil
	}
	return o.s.classStats(lv, rv)
}

// classTotals sums each class over the links.
func classTotals(cs []api.ClassStat) []api.ClassStat {
	idx := map[string]int{}
	var out []api.ClassStat
	for _, c := range cs {
		i, ok := idx[c.Class]
		if !ok {
			i = len(out)
			idx[c.Class] = i
			// IN is the class's on all links; every row repeats it.
			out = append(out, api.ClassStat{Class: c.Class, In: c.In})
		}
		out[i].Bytes += c.Bytes
		out[i].Packets += c.Packets
		out[i].Drops += c.Drops
	}
	return out
}

// monoNow is CLOCK_MONOTONIC, the clock of the datapath's flow times.
func monoNow() uint64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return uint64(ts.Nano())
}

// walk reads the flow table once: it adds each flow's new traffic to its
// app's counters and returns the flows that ended since the last walk.
// ctrs are the containers by the ifindex of their host-side veth
// (RuleView.Containers): a flow classified at one is its container's.
func (r *recorder) walk(k Kernel, ctrs map[int]Container, ruleNames slotOwners, classOf map[string]string, now time.Time) []history.Flow {
	r.mu.Lock()
	defer r.mu.Unlock()
	mono := monoNow()
	wall := func(ns uint64) time.Time {
		if ns == 0 || ns > mono {
			return now
		}
		return now.Add(-time.Duration(mono - ns))
	}
	var ended []history.Flow
	idle := uint64(r.opt.FlowIdle)
	idleRecords := 0
	err := k.TrackFlows(func(f datapath.Flow, m *datapath.FlowMemo) bool {
		if r.walked && (f.PID != 0 || f.Veth != 0) {
			d := flowCounters(f.Counters)
			if m.Seen {
				d = d.Delta(flowCounters(m.Counters))
			}
			if d != (history.Counters{}) {
				if a := r.app(k, ctrs, f); a != nil {
					a.Add(d)
				}
			}
		}
		m.Seen, m.Counters, m.LastSeenNS = true, f.Counters, f.LastSeenNS
		if f.LastSeenNS > 0 && mono > f.LastSeenNS && mono-f.LastSeenNS >= idle &&
			m.Mark != f.LastSeenNS && idleRecords < maxIdleRecords {
			idleRecords++
			m.Mark = f.LastSeenNS
			ended = append(ended, r.flowRecord(k, ctrs, f, ruleNames, classOf, wall))
		}
		return true
	}, func(f datapath.Flow, m datapath.FlowMemo) {
		// Evicted, or its 5-tuple taken by a new flow: recorded with
		// its last reading, unless that was recorded already.
		if m.Mark != m.LastSeenNS {
			ended = append(ended, r.flowRecord(k, ctrs, f, ruleNames, classOf, wall))
		}
	})
	if err != nil {
		return ended // the flows not walked keep their last reading
	}
	r.walked = true
	if len(r.procs) > 8192 {
		r.procs = map[uint32]procInfo{}
	}
	return ended
}

// app is the counters of f's app, creating them (or, beyond MaxApps, the
// "other" app of the flow's user); nil for the flow of a container that
// is gone (no name to count it under).
func (r *recorder) app(k Kernel, ctrs map[int]Container, f datapath.Flow) *appCount {
	var key appKey
	image := ""
	if f.Veth != 0 {
		c, ok := ctrs[f.Veth]
		if !ok {
			return nil
		}
		key, image = appKey{name: history.ContainerApp(c.Runtime, c.Name)}, c.Image
	} else {
		name := r.proc(k, f.PID).exe
		if name == "" {
			name = f.Comm
		}
		key = appKey{name: name, uid: f.UID}
	}
	if c, ok := r.appTotal[key]; ok {
		if image != "" {
			c.image = image // the latest: a container recreated from another image
		}
		return c
	}
	if r.named >= r.opt.MaxApps {
		key.name = OtherApp
		if c, ok := r.appTotal[key]; ok {
			return c
		}
	} else {
		r.named++
	}
	c := &appCount{}
	if key.name != OtherApp {
		c.image = image
	}
	r.appTotal[key] = c
	return c
}

// proc reads (once per pid) the executable, cgroup and unit of a process.
func (r *recorder) proc(k Kernel, pid uint32) procInfo {
	if p, ok := r.procs[pid]; ok {
		return p
	}
	p := procInfo{exe: apps.Exe(int(pid))}
	if cg, err := k.CgroupOf(int(pid)); err == nil {
		p.cgroup = cg
		p.unit = unitOf(cg)
	}
	r.procs[pid] = p
	return p
}

// flowCounters are a flow's counters in both directions.
func flowCounters(c datapath.Counters) history.Counters {
	return history.Counters{BytesOut: c.Bytes, PacketsOut: c.Packets, DropsOut: c.Drops,
		BytesIn: c.RxBytes, PacketsIn: c.RxPackets, DropsIn: c.RxDrops}
}

// unitOf is the systemd unit a cgroup path belongs to: its innermost
// element that is a service or a scope ("" when none is).
func unitOf(cgroup string) string {
	for dir := cgroup; dir != "/" && dir != "." && dir != ""; dir = path.Dir(dir) {
		b := path.Base(dir)
		if strings.HasSuffix(b, ".service") || strings.HasSuffix(b, ".scope") {
			return b
		}
	}
	return ""
}

func (r *recorder) flowRecord(k Kernel, ctrs map[int]Container, f datapath.Flow, ruleNames slotOwners, classOf map[string]string, wall func(uint64) time.Time) history.Flow {
	rec := history.Flow{Proto: ProtoName(f.Key.Proto), Local: addrPort(f.Key.Local), Remote: addrPort(f.Key.Remote),
		FirstNS: f.FirstSeenNS, PID: f.PID, Comm: f.Comm, UID: f.UID,
		Start: wall(f.FirstSeenNS), End: wall(f.LastSeenNS),
		Counters: flowCounters(f.Counters)}
	if f.PID != 0 {
		p := r.proc(k, f.PID)
		rec.Exe, rec.Cgroup, rec.Unit = p.exe, p.cgroup, p.unit
	}
	if c, ok := ctrs[f.Veth]; ok && f.Veth != 0 {
		rec.Container, rec.Image = history.ContainerApp(c.Runtime, c.Name), c.Image
	}
	if rec.Rule = ruleNames.of(f); rec.Rule != "" {
		rec.Class = classOf[rec.Rule]
	}
	return rec
}

// AppCounters are an app's cumulative counters since the daemon started.
// An app that is a container has its Container, Runtime and Image set (and
// UID 0); Name is then history.ContainerApp's.
type AppCounters struct {
	Name string
	UID  uint32
	// Container, Runtime and Image name an app that is a container.
	Container, Runtime, Image string
	history.Counters
}

// AppTotals are the apps' cumulative counters (for metrics); nil without
// history recording.
func (o *Observer) AppTotals() []AppCounters {
	r := o.recorder()
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]AppCounters, 0, len(r.appTotal))
	for k, c := range r.appTotal {
		a := AppCounters{Name: k.name, UID: k.uid, Counters: c.Counters}
		if rt, name, ok := history.ParseContainerApp(k.name); ok {
			a.Container, a.Runtime, a.Image = name, rt, c.image
		}
		out = append(out, a)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Name != out[j].Name {
			return out[i].Name < out[j].Name
		}
		return out[i].UID < out[j].UID
	})
	return out
}

// ReadNetDev reads the interface counters of the calling thread's network
// namespace (/proc/net/dev): received → in, transmitted → out.
func ReadNetDev() map[string]history.Counters {
	data, err := os.ReadFile("/proc/thread-self/net/dev")
	if err != nil {
		return nil
	}
	return parseNetDev(data)
}

func parseNetDev(data []byte) map[string]history.Counters {
	out := map[string]history.Counters{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) < 16 {
			continue
		}
		n := func(i int) uint64 { v, _ := strconv.ParseUint(f[i], 10, 64); return v }
		// Receive: bytes packets errs drop fifo frame compressed multicast;
		// transmit: bytes packets errs drop ...
		out[strings.TrimSpace(name)] = history.Counters{BytesIn: n(0), PacketsIn: n(1), DropsIn: n(3),
			BytesOut: n(8), PacketsOut: n(9), DropsOut: n(11)}
	}
	return out
}
