package engine

import (
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/hostqos/hostqos/internal/store"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/datapath"
	"github.com/hostqos/hostqos/internal/events"
	"github.com/hostqos/hostqos/internal/host/fakehost"
	"github.com/hostqos/hostqos/internal/observe"
	"github.com/hostqos/hostqos/internal/policy"
	"github.com/hostqos/hostqos/internal/shaper"
)

// fakeClock is the engine's clock in these tests.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) set(t time.Time) { c.mu.Lock(); c.t = t; c.mu.Unlock() }

// evRecorder reads the quota and schedule events of the engines it is
// attached to from their event streams.
type evRecorder struct {
	sub *events.Subscription
	got []api.Event
}

func (r *evRecorder) read() {
	if r.sub != nil {
		r.got = append(r.got, takeNow(r.sub)...)
	}
}

// kinds lists the kinds of the events published so far.
func (r *evRecorder) kinds() []string {
	r.read()
	var out []string
	for _, ev := range r.got {
		out = append(out, ev.Kind)
	}
	return out
}

// startAt starts an engine over env whose clock reads clk; rec reads its
// quota and schedule events.
func startAt(t *testing.T, env *testEnv, clk *fakeClock, rec *evRecorder) *Engine {
	t.Helper()
	env.cfg.Now = clk.now
	e, err := New(env.cfg)
	if err != nil {
		t.Fatal(err)
	}
	rec.read()
	if rec.sub, err = e.Subscribe(root, nil, []string{"quota", "schedule"}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rec.sub.Close)
	if err := e.Start(Host{Kernel: env.k}); err != nil {
		t.Fatal(err)
	}
	return e
}

// dpRule is the datapath rule of slot, if the datapath has it.
func dpRule(k *fakehost.FakeKernel, slot int) (datapath.Rule, bool) {
	for _, r := range k.Snapshot().Rules.Rules {
		if int(r.Slot) == slot {
			return r, true
		}
	}
	return datapath.Rule{}, false
}

// TestScheduleSwitchesRule: a rule with a schedule is in the datapath only
// inside its windows; Tick switches it on and off at the configured times
// (in its time zone) and publishes schedule.on / schedule.off.
func TestScheduleSwitchesRule(t *testing.T) {
	env := newEnv(t, `
[[link]]
name = "eth0"
egress_rate = "100mbit"

[[rule]]
name = "backup"
comm = "restic"
maxbw = "10mbit"
schedule = "Mon-Fri 09:00-18:00"
timezone = "Europe/Berlin"
`)
	berlin, _ := time.LoadLocation("Europe/Berlin")
	clk := &fakeClock{t: time.Date(2026, 11, 23, 8, 59, 30, 0, berlin)} // a Monday
	var evs evRecorder
	e := startAt(t, env, clk, &evs)
	slot := e.slots.Rules["backup"]
	if _, on := dpRule(env.k, slot); on {
		t.Fatal("rule in the datapath at 08:59 on Monday; its schedule starts at 09:00")
	}
	e.Tick()
	if len(evs.kinds()) != 0 {
		t.Fatalf("events before any switch: %v", evs.kinds())
	}
	ri, _ := e.Rules(root, "backup")
	if s := ri[0].Schedule; s == nil || s.Active || s.NextChange == nil || !s.NextChange.Equal(time.Date(2026, 11, 23, 9, 0, 0, 0, berlin)) {
		t.Errorf("schedule status at 08:59: %+v", ri[0].Schedule)
	}

	clk.set(time.Date(2026, 11, 23, 9, 0, 0, 0, berlin))
	e.Tick()
	r, on := dpRule(env.k, slot)
	if !on || r.ClassID != shaper.RuleClassID(uint16(slot)) {
		t.Fatalf("at 09:00 the rule is not in the datapath with its own HTB leaf: on=%v %+v", on, r)
	}
	if got := evs.kinds(); len(got) != 1 || got[0] != "schedule.on" {
		t.Fatalf("events at 09:00: %v", got)
	}
	ri, _ = e.Rules(root, "backup")
	if s := ri[0].Schedule; s == nil || !s.Active || s.NextChange == nil || !s.NextChange.Equal(time.Date(2026, 11, 23, 18, 0, 0, 0, berlin)) {
		t.Errorf("schedule status at 09:00: %+v", ri[0].Schedule)
	}

	clk.set(time.Date(2026, 11, 23, 18, 0, 1, 0, berlin))
	e.Tick()
	if _, on := dpRule(env.k, slot); on {
		t.Fatal("rule still in the datapath after 18:00")
	}
	if got := evs.kinds(); len(got) != 2 || got[1] != "schedule.off" {
		t.Fatalf("events after 18:00: %v", got)
	}
	// Saturday: stays off all day, no event.
	clk.set(time.Date(2026, 11, 28, 10, 0, 0, 0, berlin))
	e.Tick()
	if _, on := dpRule(env.k, slot); on || len(evs.kinds()) != 2 {
		t.Fatalf("Saturday 10:00: on=%v events %v", on, evs.kinds())
	}
	// The time zone counts: 09:30 in Berlin is 08:30 UTC on a Monday.
	clk.set(time.Date(2026, 11, 30, 8, 30, 0, 0, time.UTC))
	e.Tick()
	if _, on := dpRule(env.k, slot); !on {
		t.Fatal("Monday 09:30 Berlin time (08:30 UTC): rule not on")
	}
}

const quotaConfig = `
[[link]]
name = "eth0"
egress_rate = "100mbit"

[[rule]]
name = "dl"
comm = "wget"
quota = "5MiB"
quota_action = "limit 1mbit"
quota_reset = "06:00"
timezone = "UTC"
`

// TestQuotaLimitsPersistsAndResets: the rule's sent bytes count against its
// quota; at 5 MB the rule gets a 1mbit ceiling and quota.reached is
// published; usage and the limit survive a restart; at the reset time the
// limit goes and quota.reset is published.
func TestQuotaLimitsPersistsAndResets(t *testing.T) {
	env := newEnv(t, quotaConfig)
	clk := &fakeClock{t: time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)}
	var evs evRecorder
	e := startAt(t, env, clk, &evs)
	k := env.k
	slot := e.slots.Rules["dl"]
	k.Counters = make([]datapath.Counters, datapath.MaxRules)
	k.Counters[slot].Bytes = 1000 // sent after the rule was applied, before the first reading: counted
	e.Tick()
	k.Counters[slot].Bytes = 1000 + 3<<20
	clk.set(clk.now().Add(time.Second))
	e.Tick()
	ri, _ := e.Rules(root, "dl")
	q := ri[0].Quota
	if q == nil || q.Used != 1000+3<<20 || q.Reached || q.Quota != 5<<20 ||
		!q.NextReset.Equal(time.Date(2026, 11, 23, 6, 0, 0, 0, time.UTC)) || !q.PeriodStart.Equal(time.Date(2026, 11, 22, 6, 0, 0, 0, time.UTC)) {
		t.Fatalf("quota after 3 MB: %+v", q)
	}
	if r, _ := dpRule(k, slot); r.ClassID != shaper.ClassLeafID(e.slots.Classes["default"]) {
		t.Fatalf("limited before the quota was reached: %+v", r)
	}
	k.Counters[slot].Bytes = 1000 + 5<<20
	clk.set(clk.now().Add(time.Second))
	e.Tick()
	if got := evs.kinds(); len(got) != 1 || got[0] != "quota.reached" {
		t.Fatalf("events at 5 MB: %v", got)
	}
	limited := func(e *Engine) {
		t.Helper()
		r, _ := dpRule(k, slot)
		if r.ClassID != shaper.RuleClassID(uint16(slot)) {
			t.Fatalf("over quota, the rule has no leaf of its own: %+v", r)
		}
		var ceil uint64
		for _, c := range k.Snapshot().Trees[2].Classes {
			if c.Minor == shaper.RuleLeafMinor(uint16(slot)) {
				ceil = c.Ceil
			}
		}
		if ceil != 1_000_000 {
			t.Fatalf("over quota, the rule's ceiling is %d, want 1mbit", ceil)
		}
		// The policy itself is unchanged: the limit is the quota's.
		ri, _ := e.Rules(root, "dl")
		if ri[0].Rule.MaxBW != 0 || ri[0].Quota == nil || !ri[0].Quota.Reached || ri[0].Quota.ReachedAt == nil {
			t.Fatalf("rule show over quota: %+v %+v", ri[0].Rule, ri[0].Quota)
		}
	}
	limited(e)

	// A restart (the datapath's counters go on, pinned) keeps usage and limit.
	e2 := startAt(t, env, clk, &evs)
	limited(e2)
	k.Counters[slot].Bytes = 1000 + 6<<20
	e2.Tick()
	ri, _ = e2.Rules(root, "dl")
	if ri[0].Quota.Used != 1000+6<<20 || len(evs.kinds()) != 1 {
		t.Fatalf("after restart and 1 MB more: used %d, events %v", ri[0].Quota.Used, evs.kinds())
	}

	// 06:00 next day: a new period.
	clk.set(time.Date(2026, 11, 23, 6, 0, 0, 0, time.UTC))
	e2.Tick()
	if r, _ := dpRule(k, slot); r.ClassID != shaper.ClassLeafID(e2.slots.Classes["default"]) {
		t.Fatalf("still limited after the reset: %+v", r)
	}
	if got := evs.kinds(); len(got) != 2 || got[1] != "quota.reset" {
		t.Fatalf("events at the reset: %v", got)
	}
	ri, _ = e2.Rules(root, "dl")
	if ri[0].Quota.Used != 0 || ri[0].Quota.Reached {
		t.Fatalf("quota after the reset: %+v", ri[0].Quota)
	}
}

// TestQuotaBlockAndPolice: action block drops the rule's traffic once the
// quota is reached; on a link without shaping, limit becomes a policer.
func TestQuotaBlockAndPolice(t *testing.T) {
	for _, c := range []struct{ action string }{{"block"}, {"limit 2mbit"}} {
		env := newEnv(t, `
[[link]]
name = "eth0"

[[rule]]
name = "dl"
comm = "wget"
quota = "1KiB"
quota_action = "`+c.action+`"
`)
		clk := &fakeClock{t: time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)}
		var evs evRecorder
		e := startAt(t, env, clk, &evs)
		slot := e.slots.Rules["dl"]
		env.k.Counters = make([]datapath.Counters, datapath.MaxRules)
		e.Tick()
		env.k.Counters[slot].Bytes = 2048
		e.Tick()
		r, _ := dpRule(env.k, slot)
		switch c.action {
		case "block":
			if r.ActionCode != datapath.ActDrop {
				t.Errorf("block: rule not dropping: %+v", r)
			}
		default:
			if r.PoliceRate != 2_000_000 || r.ActionCode != datapath.ActPass {
				t.Errorf("limit on an unshaped link: want a 2mbit policer, got %+v", r)
			}
		}
		if len(evs.kinds()) != 1 || evs.got[0].Kind != "quota.reached" {
			t.Errorf("%s: events %v", c.action, evs.kinds())
		}
	}
}

// TestQuotaFieldsValidated: bad quota and schedule fields are refused
// naming the field, and change nothing.
func TestQuotaFieldsValidated(t *testing.T) {
	env := newEnv(t, "")
	e := env.start(t)
	for _, c := range []struct {
		patch func(*policy.Rule)
		field string
	}{
		{func(r *policy.Rule) { r.Quota, r.QuotaDirection = 1<<20, "sideways" }, "quota_direction"},
		{func(r *policy.Rule) { r.Quota, r.QuotaDirection, r.QuotaAction = 1<<20, "in", "limit 10kbit" }, "quota_action"},
		{func(r *policy.Rule) { r.Quota, r.QuotaAction = 1<<20, "limit" }, "quota_action"},
		{func(r *policy.Rule) { r.Quota, r.QuotaAction = 1<<20, "throttle" }, "quota_action"},
		{func(r *policy.Rule) { r.Quota, r.QuotaPeriod = 1<<20, "year" }, "quota_period"},
		{func(r *policy.Rule) { r.Quota, r.QuotaReset = 1<<20, "25:00" }, "quota_reset"},
		{func(r *policy.Rule) { r.QuotaAction = "block" }, "quota_action"},
		{func(r *policy.Rule) { r.Schedule = "Mon-Fry 09:00-18:00" }, "schedule"},
		{func(r *policy.Rule) { r.Schedule = "Mon 09:00-09:00" }, "schedule"},
		{func(r *policy.Rule) { r.Schedule, r.TimeZone = "daily", "Mars/Olympus" }, "timezone"},
		{func(r *policy.Rule) { r.Quota, r.Action, r.QuotaAction = 1<<20, policy.ActionObserve, "block" }, "quota_action"},
	} {
		r := rule("q")
		c.patch(&r)
		_, err := e.AddRule(t.Context(), root, r, false)
		fes := policy.AsErrors(err)
		if len(fes) == 0 || fes[0].Field != c.field {
			t.Errorf("%+v: want an error on field %s, got %v", r, c.field, err)
		}
	}
	if rs, _ := e.Rules(root, ""); len(rs) != 0 {
		t.Errorf("refused rules were added: %+v", rs)
	}
}

// TestLinkAndAppEvents: a managed link that goes away and comes back
// publishes link.down and link.up; an app that opens its first flow after
// the first scan publishes app.seen once, visible to its owner and not to
// another user.
func TestLinkAndAppEvents(t *testing.T) {
	env := newEnv(t, `
[[link]]
name = "eth0"
`)
	clk := &fakeClock{t: time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)}
	var rec evRecorder
	e := startAt(t, env, clk, &rec)
	sub, err := e.Subscribe(root, nil, []string{"link", "app"})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	other, err := e.Subscribe(alice, nil, []string{"app"})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	got := func(s *events.Subscription) []string {
		var out []string
		for _, ev := range takeNow(s) {
			out = append(out, ev.Kind+" "+ev.Subject)
		}
		return out
	}
	env.k.FlowTable = []datapath.Flow{{PID: 999999, Comm: "sshd", UID: 0}}
	e.Tick() // the first scan learns sshd silently
	delete(env.k.Ifindexes, "eth0")
	e.Rescan()
	if g := got(sub); len(g) != 1 || g[0] != "link.down link/eth0" {
		t.Fatalf("interface gone: events %v", g)
	}
	env.k.Ifindexes["eth0"] = 5
	e.Rescan()
	if g := got(sub); len(g) != 1 || g[0] != "link.up link/eth0" {
		t.Fatalf("interface back: events %v", g)
	}
	env.k.FlowTable = append(env.k.FlowTable, datapath.Flow{PID: 999998, Comm: "curl", UID: 1002})
	clk.set(clk.now().Add(observe.AppScanEvery))
	e.Tick()
	clk.set(clk.now().Add(observe.AppScanEvery))
	e.Tick()
	if g := got(sub); len(g) != 1 || g[0] != "app.seen app/curl" {
		t.Fatalf("new app: events %v", g)
	}
	if g := got(other); len(g) != 0 {
		t.Errorf("uid 1001 sees the app of uid 1002: %v", g)
	}
}

// TestQuotaFileDamaged: an unreadable quota.json (kept by daemons before
// state version 2) does not stop the engine: it is moved aside and quotas
// count from zero, in the state file from then on.
func TestQuotaFileDamaged(t *testing.T) {
	env := newEnv(t, quotaConfig)
	path := filepath.Join(filepath.Dir(env.cfg.StatePath), "quota.json")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("{half"), 0o644); err != nil {
		t.Fatal(err)
	}
	clk := &fakeClock{t: time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)}
	var evs evRecorder
	e := startAt(t, env, clk, &evs)
	if _, err := os.Stat(path + ".bad"); err != nil {
		t.Errorf("damaged file not moved aside: %v", err)
	}
	env.k.Counters = make([]datapath.Counters, datapath.MaxRules)
	e.Tick()
	if ri, _ := e.Rules(root, "dl"); ri[0].Quota == nil || ri[0].Quota.Used != 0 {
		t.Errorf("quota after a damaged file: %+v", ri[0].Quota)
	}
	if p, err := store.Read(env.cfg.StatePath); err != nil || p.Quota["dl"] == nil {
		t.Errorf("quota usage not in the state file: %v", err)
	}
}

// TestQuotaReceived: a quota of direction in counts the rule's received
// bytes, both counts both; reached, limit caps what the rule's flows
// receive (a download limit), and with both also what they send.
func TestQuotaReceived(t *testing.T) {
	for _, dir := range []string{"in", "both"} {
		env := newEnv(t, `
[[link]]
name = "eth0"
egress_rate = "100mbit"

[[rule]]
name = "dl"
comm = "wget"
quota = "1MiB"
quota_direction = "`+dir+`"
quota_action = "limit 2mbit"
`)
		clk := &fakeClock{t: time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)}
		var evs evRecorder
		e := startAt(t, env, clk, &evs)
		slot := e.slots.Rules["dl"]
		env.k.Counters = make([]datapath.Counters, datapath.MaxRules)
		e.Tick()
		env.k.Counters[slot] = datapath.Counters{Bytes: 600 << 10, RxBytes: 600 << 10}
		e.Tick()
		ri, _ := e.Rules(root, "dl")
		want := map[string]uint64{"in": 600 << 10, "both": 1200 << 10}[dir]
		if ri[0].Quota.Used != want || ri[0].Quota.Direction != dir {
			t.Fatalf("%s: used %d, want %d (%+v)", dir, ri[0].Quota.Used, want, ri[0].Quota)
		}
		r, _ := dpRule(env.k, slot)
		if dir == "in" {
			if r.MaxBWIn != 0 {
				t.Fatalf("in: limited at 600 KiB of 1 MiB: %+v", r)
			}
			env.k.Counters[slot].RxBytes = 2 << 20
			e.Tick()
			r, _ = dpRule(env.k, slot)
		}
		if r.MaxBWIn != 2_000_000 {
			t.Errorf("%s over quota: download limit %d, want 2mbit", dir, r.MaxBWIn)
		}
		ownLeaf := r.ClassID == shaper.RuleClassID(uint16(slot))
		if ownLeaf != (dir == "both") {
			t.Errorf("%s over quota: sent traffic capped %v", dir, ownLeaf)
		}
		if got := evs.kinds(); len(got) != 1 || got[0] != "quota.reached" {
			t.Errorf("%s: events %v", dir, got)
		}
	}
}

// TestQuotaPacedChecks: between Ticks, a quota not used up is counted
// every 50 ms, and sooner when it is about to be used up: after half the
// time its rest takes at the pace of the last two readings (at least
// 10 ms); the reading that finds it used up applies the action at once.
func TestQuotaPacedChecks(t *testing.T) {
	env := newEnv(t, `
[[link]]
name = "eth0"

[[rule]]
name = "dl"
comm = "wget"
quota = "5MiB"
quota_action = "limit 2mbit"
`)
	clk := &fakeClock{t: time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)}
	var evs evRecorder
	e := startAt(t, env, clk, &evs)
	slot := e.slots.Rules["dl"]
	q, _ := e.eff.Policy.Rules[0].QuotaOf()
	// The quota counts from the apply that added it, and is read soon.
	select {
	case <-e.QuotaWake():
	default:
		t.Error("a quota added without a wake-up")
	}
	if in := e.QuotaCheckIn(); in != quotaCheckIdle {
		t.Errorf("quota just added: next check in %v, want %v", in, quotaCheckIdle)
	}
	env.k.Counters = make([]datapath.Counters, datapath.MaxRules)
	e.Tick()
	if in := e.QuotaCheckIn(); in != quotaCheckIdle {
		t.Errorf("idle quota: next check in %v, want %v", in, quotaCheckIdle)
	}
	// Half used in 50 ms: the other half takes 50 ms at that pace; read
	// again in 25.
	clk.set(clk.now().Add(quotaCheckIdle))
	env.k.Counters[slot].Bytes = q.Size / 2
	e.CheckQuotas()
	want := quotaCheckIdle / 2
	if in := e.QuotaCheckIn(); in < want-time.Millisecond || in > want+time.Millisecond {
		t.Errorf("half the quota used in %v: next check in %v, want %v", quotaCheckIdle, in, want)
	}
	clk.set(clk.now().Add(want))
	env.k.Counters[slot].Bytes = q.Size - 1000
	e.CheckQuotas()
	if in := e.QuotaCheckIn(); in != quotaCheckMin {
		t.Errorf("1 kB left: next check in %v, want %v", in, quotaCheckMin)
	}
	clk.set(clk.now().Add(quotaCheckMin))
	env.k.Counters[slot].Bytes = q.Size + 1000
	e.CheckQuotas()
	if r, _ := dpRule(env.k, slot); r.PoliceRate != 2_000_000 {
		t.Errorf("quota used up: rule %+v, want a 2mbit policer", r)
	}
	if k := evs.kinds(); len(k) != 1 || k[0] != "quota.reached" {
		t.Errorf("events %v", k)
	}
	if in := e.QuotaCheckIn(); in != quotaCheckMax {
		t.Errorf("reached quota: next check in %v, want %v (the next Tick)", in, quotaCheckMax)
	}
}
