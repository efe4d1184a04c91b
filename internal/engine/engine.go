// Package engine is hostqos's policy engine: the desired state (config
// file, changes made through the API, temporary changes, runs), its
// validation and admission, compilation into BPF map entries and HTB
// classes, applying it as one transaction, persistence, repair, and who
// may see and do what. It knows nothing of HTTP: front doors (the daemon's
// API) map their requests to its methods and its errors to their answers.
// It reaches the kernel only through a Kernel.
package engine

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"sync"
	"time"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/datapath"
	"github.com/hostqos/hostqos/internal/policy"
	"github.com/hostqos/hostqos/internal/shaper"
)

// Config are the engine's settings.
type Config struct {
	ConfigPath     string // TOML policy file
	ConfigExplicit bool   // the path was given on the command line: it must exist
	StatePath      string // persistent state (API changes, slots, keys)
	RuntimePath    string // temporary state (temporary changes, runs): survives a crash, not a reboot
	// CgroupBase is the engine's cgroup subtree (relative to the cgroup2
	// root) where runs get their cgroups.
	CgroupBase string
	// Limits on `hostqos run` by ordinary users (0 = the default); see
	// CheckRunLimits.
	MaxRunsPerUser int
	MaxUserRuns    int
	// Limits on ordinary users' qsockets (0 = the defaults,
	// DefaultMaxQSocksPerUser and DefaultMaxUserQSocks).
	MaxQSocksPerUser, MaxUserQSocks int
	// MaxUserQSchedRate bounds the declared rates (bit/s) of one ordinary
	// user's scheduled qsockets together (0: DefaultMaxUserQSchedRate).
	MaxUserQSchedRate uint64
	// MaxRTChannelsPerUser bounds an ordinary user's real-time channels
	// (0: DefaultMaxRTChannelsPerUser; rtchannels.go).
	MaxRTChannelsPerUser int
	// MaxUserRTUtilization bounds the share of a link's real-time
	// utilization one ordinary user's channels may take together (0:
	// DefaultMaxUserRTUtilization; rtchannels.go).
	MaxUserRTUtilization float64
	// Bounds of ordinary users' event streams (0 = the defaults); see
	// Subscribe.
	MaxSubscribersPerUser, MaxUserSubscribers int
	Logger                                    *slog.Logger
	// Loops is the loop variant of the datapath (policy.LoopsBounded
	// holds smaller policies; see policy.CheckCapacity); "" = bpf_loop.
	Loops string
	// Now is the clock of quotas and schedules (nil: time.Now); tests
	// set their own.
	Now func() time.Time
}

// Engine holds the desired policy and makes the kernel match it.
type Engine struct {
	cfg Config
	log *slog.Logger

	mu      sync.Mutex // serialises changes
	k       Kernel     // nil before Start and after Detach
	base    *policy.Policy
	persist *overlay
	temp    *overlay
	slots   *slotTable
	eff     merged
	comp    *compiled
	links   map[string]int // managed link name → ifindex currently set up
	pushed  pushed         // what the pushes left in the kernel (see pushed)
	missing []string       // managed links whose interface does not exist now
	// lastLinkErr is the last error of setting up links again in Rescan,
	// so that a lasting problem is logged once.
	lastLinkErr string
	lookupErr   map[string]string // link → last lookup error, logged once
	tagged      int

	stats *sampler
	times *ruleTimes // quota usage and schedule state (quota.go)
	apps  appWatch   // apps seen in the flow table (notify.go)

	// The history recorder (SetHistory); nil: no history.
	histMu sync.Mutex
	hist   *recorder

	// Idempotency keys (see keys.go): those recorded in the state file and
	// in the runtime file, and the keyed change being applied.
	keysPersist, keysTemp keyTable
	keysMem               keyTable // keys of changes without a state write (RecordAnswer)
	// The state and runtime files (snapshot and journal, journal.go).
	stPersist, stTemp *stateStore

	// The last count of the flow table for status (flowCount).
	flowsMu sync.Mutex
	flowsAt time.Time
	flows   int
	commit  *PendingKey

	events *eventHub  // the event stream (events.go)
	evlim  *evLimiter // what one user or remote party may publish (evlimit.go)
	rt     rtRegistry // real-time channels admitted host-wide (rtchannels.go)
	// resvBroken are the reservations' current problems, "name\x00why"
	// (see watchReservations).
	resvBroken map[string]bool
	// The XDP shield (shield.go): the API's drop list and protected
	// clients (read on first use), whether they were pushed to this
	// kernel, and the links carrying the XDP program.
	shield       *shieldState
	shieldPushed bool
	xdp          map[string]int
	resvW        resvWatch // the reservation poller's memory (Tick only)
	// The qsocket scheduler (qsched.go): the rate the links were last
	// planned with, and the links' schedulers the datapath has.
	qschedPlanned uint64
	qschedPushed  map[int]datapath.QSched
}

// New reads the config and the state files and validates them; it touches
// nothing in the kernel.
func New(cfg Config) (*Engine, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MaxRunsPerUser == 0 {
		cfg.MaxRunsPerUser = DefaultMaxRunsPerUser
	}
	if cfg.MaxUserRuns == 0 {
		cfg.MaxUserRuns = DefaultMaxUserRuns
	}
	if err := CheckRunLimits(cfg.MaxRunsPerUser, cfg.MaxUserRuns); err != nil {
		return nil, err
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	e := &Engine{cfg: cfg, log: cfg.Logger, links: map[string]int{}}
	e.stats = newSampler(e)
	e.events = newEventHub(DefaultEventRing, cfg.MaxSubscribersPerUser, cfg.MaxUserSubscribers, time.Now)
	e.evlim = newEvLimiter(EventLimits{}, time.Now)
	var err error
	if e.times, err = newRuleTimes(cfg.StatePath, cfg.Logger); err != nil {
		return nil, err
	}
	if e.base, err = e.loadConfig(); err != nil {
		return nil, err
	}
	var ps, rt *persisted
	if e.stPersist, ps, err = openStore(cfg.StatePath); err != nil {
		return nil, err
	}
	if e.stTemp, rt, err = openStore(cfg.RuntimePath); err != nil {
		return nil, err
	}
	e.persist, e.temp, e.keysPersist, e.keysTemp = ps.Overlay, rt.Overlay, ps.Keys, rt.Keys
	e.slots = newSlotTable()
	if ps.Slots != nil {
		e.slots = ps.Slots
	}
	e.eff = merge(e.base, e.persist, e.temp)
	if err := checkPolicy(e.eff.Policy, "state"); err != nil {
		return nil, fmt.Errorf("validate policy (config %s with changes in %s): %w", cfg.ConfigPath, cfg.StatePath, err)
	}
	if err := e.eff.Policy.CheckCapacity("state", cfg.Loops); err != nil {
		return nil, fmt.Errorf("validate policy (config %s with changes in %s): %w", cfg.ConfigPath, cfg.StatePath, err)
	}
	return e, nil
}

// loadConfig reads the policy file. A missing default file means "no
// policy yet"; a missing file named on the command line is an error.
func (e *Engine) loadConfig() (*policy.Policy, error) {
	p, err := policy.LoadFile(e.cfg.ConfigPath)
	if errors.Is(err, fs.ErrNotExist) && !e.cfg.ConfigExplicit {
		e.log.Info("no config file; starting with the default classes", "path", e.cfg.ConfigPath)
		return policy.Load(nil, e.cfg.ConfigPath)
	}
	if err != nil {
		return nil, err
	}
	return p, nil
}

// checkPolicy validates and admits a whole policy.
func checkPolicy(p *policy.Policy, source string) error {
	if err := p.Validate(source); err != nil {
		return err
	}
	return p.Admit(source)
}

// Start makes the kernel match the policy read by New, through k.
func (e *Engine) Start(k Kernel) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.k = k
	if err := e.applyLocked(e.eff, e.slots.clone(), nil, nil); err != nil {
		e.k = nil
		return err
	}
	e.primeReservations(k)
	for _, st := range []*stateStore{e.stPersist, e.stTemp} {
		if err := st.ready(); err != nil {
			e.log.Warn("compact state journal; the next change writes the state file whole", "err", err)
		}
	}
	e.Publish(api.Event{Kind: EventDaemonStarted, Message: "the engine started and applied the policy",
		Fields: map[string]any{"generation": uint64(k.Generation())}})
	return nil
}

// Detach forgets the kernel (hostqos down removed what was there): the
// engine applies nothing more and reports the datapath as not loaded.
func (e *Engine) Detach() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.k = nil
	e.links = map[string]int{}
	e.xdp, e.shieldPushed = nil, false
}

// Counts is the size of the effective policy.
func (e *Engine) Counts() (links, rules int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.eff.Policy.Links), len(e.eff.Policy.Rules)
}

var errNotLoaded = errors.New("the datapath is not loaded (hostqos down?)")

// applyLocked makes the kernel match m and, when persist and temp are
// given, writes them as the state files and makes them current. On any
// error it restores the previous kernel state and returns the error;
// nothing of the change remains.
func (e *Engine) applyLocked(m merged, slots *slotTable, persist, temp *overlay) error {
	if e.k == nil {
		return errNotLoaded
	}
	read := e.counterReader()
	if err := slots.assign(expandReservations(e.withProtectedLocked(m.Policy)), read); err != nil {
		return err
	}
	now, view := e.runtimePolicy(m.Policy) // quotas and schedules (quota.go)
	comp, err := compileAll(e.withProtectedLocked(now), m.Runs, slots, e.k.CgroupRoot())
	if err != nil {
		return err
	}
	plans, ifindexes, missing, err := e.planLinks(now, comp)
	if err != nil {
		return err
	}
	if err := e.pushKernel(comp, plans, ifindexes); err != nil {
		e.restoreKernel()
		return err
	}
	if persist != nil {
		keysP, keysT := e.recordKeyLocked(temp.differs(e.temp))
		// Each file gets what differs from what it holds (a journal
		// record, see journal.go), or nothing.
		undo, err := e.stPersist.write(persist, slots, keysP)
		if err != nil {
			e.restoreKernel()
			return err
		}
		if _, err := e.stTemp.write(temp, nil, keysT); err != nil {
			// The state file already holds the change: put the previous
			// one back, or a restart would bring the failed change back.
			if undo != nil {
				if rerr := undo(); rerr != nil {
					e.log.Error("restore the state file after a failed change", "err", rerr)
				}
			}
			e.restoreKernel()
			return err
		}
		e.persist, e.temp, e.keysPersist, e.keysTemp = persist, temp, keysP, keysT
	}
	e.eff, e.comp, e.slots, e.missing = m, comp, slots, missing
	e.times.view = view
	e.startUsageLocked(read)
	return nil
}

// restoreKernel puts the last applied policy back after a failed change.
func (e *Engine) restoreKernel() {
	if e.comp == nil {
		return
	}
	now, _ := e.runtimePolicy(e.eff.Policy)
	plans, idx, _, err := e.planLinks(now, e.comp)
	if err == nil {
		err = e.pushKernel(e.comp, plans, idx)
	}
	if err != nil {
		e.log.Error("restore previous policy after a failed change", "err", err)
	}
}

// linkPlan is the shaper plan of one managed link (nil Plan: mark only).
type linkPlan struct {
	name    string
	ifindex int
	plan    *shaper.Plan
	syn     datapath.SynLimits // the link's SYN limits (XDP shield)
}

// planLinks builds the HTB plan of every managed link that exists now.
// Interfaces come and go (VPN tunnels, hot-plugged NICs): a missing one is
// reported in missing and managed once it appears (see Rescan). A link whose
// lookup fails without proof that it is gone stays planned on the ifindex
// it is set up on, so that applying the plan releases nothing.
func (e *Engine) planLinks(p *policy.Policy, comp *compiled) ([]linkPlan, map[string]int, []string, error) {
	var out []linkPlan
	var missing []string
	idx := map[string]int{}
	comp.Datapath.LinksIn = nil
	qsched := e.qschedRateLocked()
	e.qschedPlanned = qsched
	for _, l := range p.Links {
		verdict, ifindex := e.judgeLink(l.Name)
		if verdict == linkGone || ifindex == 0 { // unknown and not set up: nothing to keep
			missing = append(missing, l.Name)
			continue
		}
		lp := linkPlan{name: l.Name, ifindex: ifindex, syn: synLimits(l)}
		if l.IngressRate > 0 {
			comp.Datapath.LinksIn = append(comp.Datapath.LinksIn, datapath.LinkIn{Ifindex: ifindex, Rate: uint64(l.IngressRate)})
		}
		if l.EgressRate > 0 {
			// shaper.Build names the link in its errors.
			plan, err := shaper.Build(shaper.LinkSpec{Ifindex: ifindex, Name: l.Name, Rate: uint64(l.EgressRate), QSched: qsched}, comp.Classes, comp.rulesOn(l.Name))
			if err != nil {
				return nil, nil, nil, err
			}
			lp.plan = &plan
		} else if len(comp.Acks) > 0 {
			plan := shaper.PassThrough(shaper.LinkSpec{Ifindex: ifindex, Name: l.Name})
			lp.plan = &plan
		}
		if lp.plan != nil {
			if err := lp.plan.AddAckLeaves(comp.Acks); err != nil {
				return nil, nil, nil, err
			}
		}
		out = append(out, lp)
		idx[l.Name] = ifindex
	}
	return out, idx, missing, nil
}

// linksDamaged reports whether someone removed hostqos's HTB root or egress
// classifier from a managed link; the next apply puts them back.
func (e *Engine) linksDamaged() bool {
	damaged := false
	for _, l := range e.eff.Policy.Links {
		ifindex, ok := e.links[l.Name]
		if !ok {
			continue
		}
		if attached, err := e.k.LinkAttached(ifindex); err == nil && !attached {
			damaged = true
		}
		if l.EgressRate > 0 || (e.comp != nil && len(e.comp.Acks) > 0) {
			if owned, err := e.k.Shaped(ifindex); err == nil && !owned {
				damaged = true
			}
		}
	}
	return damaged
}

// linksChanged reports whether managed interfaces appeared, disappeared or
// were recreated (new ifindex) since the last apply. A failed lookup is no
// change: only proof that an interface is gone counts as gone.
func (e *Engine) linksChanged() bool {
	for _, l := range e.eff.Policy.Links {
		verdict, ifindex := e.judgeLink(l.Name)
		have, managed := e.links[l.Name]
		switch {
		case verdict == linkGone && managed, verdict == linkPresent && (!managed || ifindex != have):
			return true
		}
	}
	return false
}

// pushKernel applies a compiled policy: shaper trees first (so that classes
// exist before packets are steered into them), then the datapath rules,
// then attachments; links no longer managed are released last.
func (e *Engine) pushKernel(comp *compiled, plans []linkPlan, ifindexes map[string]int) error {
	// Every link this push may set up counts as set up from here on, so
	// that a failure midway and the restore that follows release a newly
	// shaped or attached link instead of leaving it behind.
	for name, ifindex := range ifindexes {
		if _, ok := e.links[name]; !ok {
			e.links[name] = ifindex
		}
	}
	// Only what differs from what the pushes left is written (e.pushed).
	for _, lp := range plans {
		if e.pushed.planIs(lp.ifindex, lp.plan) {
			continue
		}
		delete(e.pushed.plans, lp.ifindex)
		if lp.plan != nil {
			if err := e.k.Shape(*lp.plan); err != nil {
				return err // the shaper names the link and its step
			}
		} else if owned, _ := e.k.Shaped(lp.ifindex); owned {
			if err := e.k.Unshape(lp.ifindex); err != nil {
				return err // the shaper names the link and its step
			}
		}
		e.pushed.setPlan(lp.ifindex, lp.plan)
	}
	if !e.pushed.rulesAre(comp.Datapath) {
		e.pushed.rules = nil
		if err := e.k.ApplyRules(comp.Datapath); err != nil {
			return fmt.Errorf("apply datapath rules: %w", err)
		}
		rules := comp.Datapath
		e.pushed.rules = &rules
	}
	for _, lp := range plans {
		if e.pushed.attached[lp.ifindex] {
			continue
		}
		if err := e.k.AttachLink(lp.ifindex); err != nil {
			return fmt.Errorf("link %s: %w", lp.name, err) // the datapath names its step
		}
		e.pushed.setAttached(lp.ifindex)
	}
	if err := e.pushShieldLocked(plans, ifindexes, false); err != nil {
		return err
	}
	if err := e.pushQSchedsLocked(plans); err != nil {
		return err
	}
	for name, ifindex := range e.links {
		if _, still := ifindexes[name]; still {
			continue
		}
		e.pushed.forgetLink(ifindex)
		if err := e.k.DetachLink(ifindex); err != nil {
			e.log.Warn("detach classifier", "link", name, "err", err)
		}
		if owned, _ := e.k.Shaped(ifindex); owned {
			if err := e.k.Unshape(ifindex); err != nil {
				e.log.Warn("remove HTB tree", "link", name, "err", err)
			}
		}
	}
	e.links = ifindexes
	return nil
}

// counterReader returns a function that gives a rule slot's raw counters
// (the baseline of a reused slot), reading only that slot.
func (e *Engine) counterReader() func(slot int) baseCounter {
	return func(slot int) baseCounter {
		if e.k == nil {
			return baseCounter{}
		}
		c, err := e.k.RuleCounter(slot)
		if err != nil {
			e.log.Warn("read counters of a reused rule slot; its counters start from the slot's", "slot", slot, "err", err)
			return baseCounter{}
		}
		return baseCounter{Packets: c.Packets, Bytes: c.Bytes, Drops: c.Drops, RxPackets: c.RxPackets, RxBytes: c.RxBytes, RxDrops: c.RxDrops}
	}
}

// change runs a mutation of the overlays as one transaction: mutate works
// on copies; the result is validated, admitted, applied and persisted, or
// nothing changes. An idempotency key in ctx (WithPendingKey) is recorded
// in the same state write.
func (e *Engine) change(ctx context.Context, source string, mutate func(persist, temp *overlay, eff *policy.Policy) error) error {
	return e.changeWith(ctx, source, false, mutate)
}

// changeWith is change; force applies a change that takes away shaping
// admitted guarantees rely on (checkShapingKept).
func (e *Engine) changeWith(ctx context.Context, source string, force bool, mutate func(persist, temp *overlay, eff *policy.Policy) error) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	defer func() { e.commit = nil }() // the key is this change's only
	persist, temp := e.persist.clone(), e.temp.clone()
	if err := mutate(persist, temp, e.eff.Policy); err != nil {
		return err
	}
	m := merge(e.base, persist, temp)
	if err := e.admitLocked(m.Policy, source, force); err != nil {
		return err
	}
	e.commit = pendingFrom(ctx)
	return e.applyLocked(m, e.slots.clone(), persist, temp)
}

// admitLocked checks a new effective policy as a whole before it replaces
// the current one: valid and admitted (checkPolicy), within the
// datapath's capacity and app slots, and, unless force, keeping the
// shaping admitted guarantees rely on (checkShapingKept).
func (e *Engine) admitLocked(p *policy.Policy, source string, force bool) error {
	if err := checkPolicy(p, source); err != nil {
		return err
	}
	if err := p.CheckCapacity(source, e.cfg.Loops); err != nil {
		return err
	}
	if err := e.checkAppSlots(p); err != nil {
		return err
	}
	if !force {
		return e.checkShapingKept(e.eff.Policy, p, source)
	}
	return nil
}

// Reload re-reads the config file. An invalid file changes nothing, and
// nor does one that takes away shaping admitted guarantees rely on,
// unless force.
func (e *Engine) Reload(force bool) error {
	base, err := e.loadConfig()
	if err != nil {
		e.log.Error("reload: config rejected; keeping the running policy", "err", err)
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	m := merge(base, e.persist, e.temp)
	if err := e.admitLocked(m.Policy, e.cfg.ConfigPath, force); err != nil {
		e.log.Error("reload: policy rejected; keeping the running policy", "err", err)
		return err
	}
	if err := e.applyLocked(m, e.slots.clone(), e.persist, e.temp); err != nil {
		e.log.Error("reload: apply failed; kept the running policy", "err", err)
		return err
	}
	e.base = base
	e.Publish(api.Event{Kind: EventPolicyLoaded, Message: "the config file was read again and applied", Fields: map[string]any{"config": e.cfg.ConfigPath}})
	if plans, idx, _, err := e.planLinks(e.eff.Policy, e.comp); err == nil {
		if err := e.pushShieldLocked(plans, idx, true); err != nil {
			e.log.Error("reload: set the config file's drop list", "err", err)
		}
	}
	e.log.Info("reloaded", "config", e.cfg.ConfigPath, "rules", len(m.Policy.Rules))
	return nil
}

// Tick is the periodic work: sampling counters for rates, reaping finished
// runs, and repairing (Rescan).
func (e *Engine) Tick() {
	e.stats.sample()
	e.recordHistory()
	e.tickTimes()
	e.scanApps()
	e.ReapRuns()
	e.ExpireShield()
	e.Rescan()
	e.watchReservations()
	e.pollReservations()
	e.tickQSched()
	e.FlushEvents(false)
}

// Rescan repairs: it sets managed links up again when interfaces appeared,
// vanished or were recreated, or someone removed hostqos's HTB root or
// classifier; otherwise it recompiles the policy and pushes it when what
// the app selectors resolve to has changed (new files for an exe glob,
// units that started).
func (e *Engine) Rescan() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.k == nil {
		return
	}
	if e.linksChanged() || e.linksDamaged() {
		before := maps.Clone(e.links)
		e.pushed.forget() // someone else changed the kernel: write it all
		err := e.applyLocked(e.eff, e.slots.clone(), nil, nil)
		if err == nil {
			e.publish(linkEvents(before, e.links)...)
		}
		msg := ""
		if err != nil {
			msg = err.Error()
		}
		if msg != e.lastLinkErr { // log changes, not every second
			if err != nil {
				e.log.Warn("rescan: set up managed links again", "err", err)
			} else {
				e.log.Info("managed links set up again", "links", e.links, "missing", e.missing)
			}
			e.lastLinkErr = msg
		}
		return
	}
	now, view := e.runtimePolicy(e.eff.Policy)
	if view != e.times.view {
		return // a quota or schedule changed the view: tickTimes applies it whole
	}
	comp, err := compileAll(e.withProtectedLocked(now), e.eff.Runs, e.slots, e.k.CgroupRoot())
	if err != nil {
		e.log.Warn("rescan", "err", err)
		return
	}
	if e.comp != nil {
		// The links' ingress budgets come with the links (planLinks).
		comp.Datapath.LinksIn = e.comp.Datapath.LinksIn
	}
	if e.comp != nil && sameDatapath(comp.Datapath, e.comp.Datapath) {
		e.comp.Warnings, e.comp.Resolved = comp.Warnings, comp.Resolved
		return
	}
	if err := e.k.ApplyRules(comp.Datapath); err != nil {
		e.log.Warn("rescan: apply datapath rules", "err", err)
		return
	}
	e.comp = comp
	e.log.Info("app selectors re-resolved; datapath updated")
}

// TagExistingSockets tags the sockets opened before the datapath was
// loaded (see Kernel.TagExistingSockets); status counts them.
func (e *Engine) TagExistingSockets() {
	e.mu.Lock()
	k := e.k
	e.mu.Unlock()
	if k == nil {
		return
	}
	n, err := k.TagExistingSockets()
	if err != nil {
		e.log.Warn("tag existing sockets", "err", err)
		return
	}
	e.mu.Lock()
	e.tagged += n
	e.mu.Unlock()
	e.log.Info("tagged existing sockets", "count", n)
}

// DropTemporary forgets temporary links, classes and rules (not those of
// runs) in the runtime state, for the next start.
func (e *Engine) DropTemporary() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.temp == nil {
		return
	}
	keep := newOverlay()
	for id, run := range e.temp.Runs {
		keep.Runs[id] = run
		if r, ok := e.temp.Rules[run.Rule]; ok {
			keep.Rules[run.Rule] = r
		}
	}
	// The running engine keeps them; the file (and the next change's
	// record) holds only what stays.
	if err := e.stTemp.compact(keep, nil, e.keysTemp); err != nil {
		e.log.Warn("forget temporary changes", "err", err)
	}
}

// ReleaseRuns moves the processes of the runs recorded in the runtime state
// file at runtimePath back to the cgroups they came from (cgroup2 mounted
// at cgRoot), so that removing hostqos's cgroups leaves programs where they
// were. It is for `hostqos down` without a running engine.
func ReleaseRuns(runtimePath, cgRoot string) {
	temp, _, err := readState(runtimePath)
	if err == nil {
		releaseRuns(cgRoot, temp.Runs)
	}
}
