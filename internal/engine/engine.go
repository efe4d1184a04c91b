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
	"path/filepath"
	"sync"
	"time"

	"github.com/hostqos/hostqos/internal/store"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/derive"
	"github.com/hostqos/hostqos/internal/events"
	"github.com/hostqos/hostqos/internal/observe"
	"github.com/hostqos/hostqos/internal/policy"
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
	persist *store.Overlay
	temp    *store.Overlay
	slots   *store.Slots
	eff     store.Merged
	// desired is what the last sync derived and the kernel holds (nil
	// before the first).
	desired *derive.Desired
	links   map[string]int // managed link name → ifindex currently set up
	// auto are the automatic link rates in force (autorate.go), by link.
	auto map[string]*autoLink
	// autoChosen are the links the zero-configuration start manages
	// (autolinks.go).
	autoChosen []string
	pushed     pushed // what the pushes left in the kernel (see pushed)
	// lastLinkErr is the last error of setting up links again in Rescan,
	// so that a lasting problem is logged once.
	lastLinkErr string
	lookupErr   map[string]string // link → last lookup error, logged once
	tagged      int
	// The kernel's capabilities Start was given (Host); nil without k.
	qk QSockKernel
	sk ShieldKernel
	ck ContainerKernel
	// rtHeld are the admitted real-time channels' shares of their links'
	// budgets (budget.go), kept by the channel registry under e.mu.
	rtHeld map[string][]rtHold
	// rtOwnerIDs number the admitted channels (their leaves under each
	// link's real-time class, shaper.RTOwnerClassID), stable while the
	// channel is held.
	rtOwnerIDs map[uint64]uint16
	// containers are the containers found on the host that the kernel
	// holds (SetContainers); ctrWant the ones last reported, which a
	// rescan applies when a push of them failed.
	containers, ctrWant []derive.Container
	// pods are the admitted Kubernetes pods by NAMESPACE/NAME (SetPods),
	// a section of the persistent state file.
	pods map[string]*store.Pod
	// podRefused are the reasons of the pods refused at the last SetPods
	// (each published once).
	podRefused map[string]string

	// obs samples rates, answers the statistics, watches for new apps
	// and records the history (package observe, reading observed).
	obs   *observe.Observer
	times *ruleTimes // quota usage and schedule state (quota.go)

	// Idempotency keys (see keys.go): those recorded in the state file and
	// in the runtime file, and the keyed change being applied.
	keysPersist, keysTemp store.Keys
	keysMem               store.Keys // keys of changes without a state write (RecordAnswer)
	// The state and runtime files (snapshot and journal, journal.go).
	stPersist, stTemp *store.File

	// The last count of the flow table for status (flowCount).
	flowsMu sync.Mutex
	flowsAt time.Time
	flows   int
	commit  *PendingKey

	events *events.Stream // the event stream and its limits (publish.go)
	rt     rtRegistry     // real-time channels admitted host-wide (rtchannels.go)
	// resvBroken are the reservations' current problems, "name\x00why"
	// (see watchReservations).
	resvBroken map[string]bool
	// The XDP shield (shield.go): the API's drop list and protected
	// clients (read on first use), the whole drop list last built, and the
	// links carrying the XDP program.
	shield *shieldState
	// rtSaved are the real-time channels the runtime file held at start
	// (RestoreRTChannels takes their owners again).
	rtSaved map[uint64]*store.RTChannel
	blocks  blockMemo
	xdp     map[string]int
	resvW   resvWatch      // the reservation poller's memory (Tick only)
	rf      refreshState   // what Refresh decides from (refresh.go)
	bindC   chan struct{}  // BindWanted (reservations.go)
	binds   map[uint8]bool // the protocols the next BindOpenSockets walks
	status  statusMemo     // what the status derives from the policy (views.go)
	// ruleView is the rule view last built, for the sync that derived
	// desired (observed.RuleView).
	ruleView struct {
		desired *derive.Desired
		k       Kernel
		view    observe.RuleView
	}
	// timed says whether policy has a rule with a quota or a schedule
	// (hasTimedLocked).
	timed struct {
		policy *policy.Policy
		any    bool
	}
	// identify resolves a process's app identity for explanations (nil:
	// identifyProcess; tests give their own).
	identify func(pid int, cgRoot string) (*observe.AppIdentity, error)
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
	e.rf.wakeC = make(chan struct{}, 1)
	e.bindC = make(chan struct{}, 1)
	e.obs = observe.New(observed{e}, cfg.Now)
	e.events = e.newEvents(events.Limits{}, time.Now)
	var err error
	if e.base, err = e.loadConfig(); err != nil {
		return nil, err
	}
	var ps, rt *store.Persisted
	if e.stPersist, ps, err = store.Open(cfg.StatePath, legacyPersist(cfg)); err != nil {
		return nil, err
	}
	if e.stTemp, rt, err = store.Open(cfg.RuntimePath, legacyRuntime(cfg)); err != nil {
		return nil, err
	}
	for _, w := range append(ps.Warnings, rt.Warnings...) {
		e.log.Warn(w)
	}
	e.persist, e.temp, e.keysPersist, e.keysTemp = ps.Overlay, rt.Overlay, ps.Keys, rt.Keys
	e.shield = ps.Shield
	if e.shield == nil {
		e.shield = store.NewShield()
	}
	e.times = newRuleTimes(ps.Quota, e.saveQuotaLocked)
	e.rtSaved = rt.RTChannels
	e.slots = store.NewSlots()
	if ps.Slots != nil {
		e.slots = ps.Slots
	}
	e.eff = store.Merge(e.base, e.persist, e.temp)
	if err := checkPolicy(e.eff.Policy, "state"); err != nil {
		return nil, fmt.Errorf("validate policy (config %s with changes in %s): %w", cfg.ConfigPath, cfg.StatePath, err)
	}
	if err := e.eff.Policy.CheckCapacity("state", cfg.Loops); err != nil {
		return nil, fmt.Errorf("validate policy (config %s with changes in %s): %w", cfg.ConfigPath, cfg.StatePath, err)
	}
	e.pods = e.readmitPods(ps.Pods)
	return e, nil
}

// legacyPersist and legacyRuntime name the files in which daemons before
// state version 2 kept the sections of the state files (store.Legacy):
// the shield's entries and quota usage beside the state file, real-time
// channels beside the runtime file.
func legacyPersist(cfg Config) store.Legacy {
	if cfg.StatePath == "" {
		return store.Legacy{}
	}
	return store.Legacy{Shield: cfg.StatePath + ".shield", Quota: filepath.Join(filepath.Dir(cfg.StatePath), "quota.json")}
}

func legacyRuntime(cfg Config) store.Legacy {
	if cfg.RuntimePath == "" {
		return store.Legacy{}
	}
	return store.Legacy{RT: filepath.Join(filepath.Dir(cfg.RuntimePath), "rtchannels.json")}
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

// Start makes the kernel match the policy read by New, through h.
func (e *Engine) Start(h Host) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	k := h.Kernel
	e.k, e.qk, e.sk, e.ck = k, h.QSockets, h.Shield, h.Containers
	// A new datapath starts its policy generations from zero: the slot
	// handovers recorded under an earlier one mean nothing to it.
	if s := e.slots.Clone(); s.ForgetHandoversAfter(k.Generation()) {
		e.slots = s
	}
	if err := e.syncLocked("start", syncChange{}); err != nil {
		e.k, e.qk, e.sk, e.ck = nil, nil, nil, nil
		return err
	}
	e.primeReservations(k)
	for _, st := range []*store.File{e.stPersist, e.stTemp} {
		if err := st.Ready(); err != nil {
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
	e.k, e.qk, e.sk, e.ck = nil, nil, nil, nil
	e.links = map[string]int{}
	e.xdp, e.pushed, e.desired = nil, pushed{}, nil
}

// Settings are the daemon settings of the config file read at New.
func (e *Engine) Settings() policy.Settings {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.base.Settings
}

// Counts is the size of the effective policy.
func (e *Engine) Counts() (links, rules int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.eff.Policy.Links), len(e.eff.Policy.Rules)
}

var errNotLoaded = errors.New("the datapath is not loaded (hostqos down?)")

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
		if l.EgressRate > 0 || (e.desired != nil && len(e.desired.Acks) > 0) {
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

// counterReader returns a function that gives a rule slot's raw counters
// (the baseline of a reused slot), reading only that slot.
func (e *Engine) counterReader() func(slot int) store.BaseCounter {
	return func(slot int) store.BaseCounter {
		if e.k == nil {
			return store.BaseCounter{}
		}
		c, err := e.k.RuleCounter(slot)
		if err != nil {
			e.log.Warn("read counters of a reused rule slot; its counters start from the slot's", "slot", slot, "err", err)
			return store.BaseCounter{}
		}
		return store.BaseCounter{Packets: c.Packets, Bytes: c.Bytes, Drops: c.Drops, RxPackets: c.RxPackets, RxBytes: c.RxBytes, RxDrops: c.RxDrops}
	}
}

// change runs a mutation of the overlays as one transaction: mutate works
// on copies; the result is validated, admitted, applied and persisted, or
// nothing changes. An idempotency key in ctx (WithPendingKey) is recorded
// in the same state write.
func (e *Engine) change(ctx context.Context, source string, mutate func(persist, temp *store.Overlay, eff *policy.Policy) error) error {
	return e.changeWith(ctx, source, false, mutate)
}

// changeWith is change; force applies a change that takes away shaping
// admitted guarantees rely on (checkShapingKept).
func (e *Engine) changeWith(ctx context.Context, source string, force bool, mutate func(persist, temp *store.Overlay, eff *policy.Policy) error) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	defer func() { e.commit = nil }() // the key is this change's only
	persist, temp := e.persist.Clone(), e.temp.Clone()
	if err := mutate(persist, temp, e.eff.Policy); err != nil {
		return err
	}
	m := store.Merge(e.base, persist, temp)
	if err := e.admitLocked(m.Policy, source, force); err != nil {
		return err
	}
	e.commit = pendingFrom(ctx)
	return e.syncLocked("change", e.overlayChange(m, persist, temp))
}

// overlayChange is the sync of a change of the overlays: the effective
// policy m, with persist and temp written to the state files (only what
// differs from what each holds: a journal record, see journal.go) once the
// kernel holds it.
func (e *Engine) overlayChange(m store.Merged, persist, temp *store.Overlay) syncChange {
	var keysP, keysT store.Keys
	return syncChange{m: &m,
		save: func(slots *store.Slots) error {
			keysP, keysT = e.recordKeyLocked(temp.Differs(e.temp))
			sp := e.stPersist.Holds()
			sp.Overlay, sp.Slots, sp.Keys = persist, slots, keysP
			undo, err := e.stPersist.Write(sp)
			if err != nil {
				return err
			}
			st := e.stTemp.Holds()
			st.Overlay, st.Keys = temp, keysT
			if _, err := e.stTemp.Write(st); err != nil {
				// The state file already holds the change: put the previous
				// one back, or a restart would bring the failed change back.
				if undo != nil {
					if rerr := undo(); rerr != nil {
						e.log.Error("restore the state file after a failed change", "err", rerr)
					}
				}
				return err
			}
			return nil
		},
		commit: func() { e.persist, e.temp, e.keysPersist, e.keysTemp = persist, temp, keysP, keysT },
	}
}

// admitLocked checks a new effective policy as a whole before it replaces
// the current one: valid and admitted (checkPolicy), within the
// datapath's capacity and app slots, and, unless force, keeping the
// shaping admitted guarantees rely on (checkShapingKept).
func (e *Engine) admitLocked(p *policy.Policy, source string, force bool) error {
	if err := p.Validate(source); err != nil {
		return err
	}
	if err := p.AdmitWith(source, e.extraLocked()); err != nil {
		return err
	}
	if err := checkEnforceable(e.eff.Policy, p, source); err != nil {
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
	m := store.Merge(base, e.persist, e.temp)
	if err := e.admitLocked(m.Policy, e.cfg.ConfigPath, force); err != nil {
		e.log.Error("reload: policy rejected; keeping the running policy", "err", err)
		return err
	}
	n := e.overlayChange(m, e.persist, e.temp)
	n.base = base
	if err := e.syncLocked("reload", n); err != nil {
		e.log.Error("reload: apply failed; kept the running policy", "err", err)
		return err
	}
	e.Publish(api.Event{Kind: EventPolicyLoaded, Message: "the config file was read again and applied", Fields: map[string]any{"config": e.cfg.ConfigPath}})
	e.log.Info("reloaded", "config", e.cfg.ConfigPath, "rules", len(m.Policy.Rules))
	return nil
}

// Tick is the periodic work: sampling counters for rates, reaping finished
// runs, and repairing what asked for it (Refresh).
func (e *Engine) Tick() {
	e.obs.Sample()
	e.obs.RecordHistory()
	e.tickTimes()
	e.publish(e.obs.ScanApps()...)
	e.ReapRuns()
	e.ExpireShield()
	e.Refresh()
	e.watchReservations()
	e.pollReservations()
	e.FlushEvents(false)
}

// Rescan repairs: it sets managed links up again when interfaces appeared,
// vanished or were recreated, or someone removed hostqos's HTB root or
// classifier; otherwise it derives again, which writes what changed of
// what the app selectors resolve to (new files for an exe glob, units that
// started), the qsocket scheduler's rate (closed sockets) and the runtime
// view (a schedule that switched).
func (e *Engine) Rescan() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.k == nil {
		return
	}
	e.rf.auditAt = time.Now().Add(auditEvery)
	if e.linksChanged() || e.linksDamaged() {
		before := maps.Clone(e.links)
		e.pushed.forget() // someone else changed the kernel: write it all
		err := e.syncLocked("repair", e.containerRetryLocked())
		if err == nil {
			e.publish(linkEvents(before, e.links)...)
		} else {
			e.rf.woken.Store(true) // tried again at the next tick
		}
		msg := ""
		if err != nil {
			msg = err.Error()
		}
		if msg != e.lastLinkErr { // log changes, not every second
			if err != nil {
				e.log.Warn("rescan: set up managed links again", "err", err)
			} else {
				e.log.Info("managed links set up again", "links", e.links, "missing", e.desired.Missing)
			}
			e.lastLinkErr = msg
		}
		return
	}
	rules := e.pushed.rules
	if err := e.syncLocked("rescan", e.containerRetryLocked()); err != nil {
		e.log.Warn("rescan", "err", err)
		e.rf.woken.Store(true) // tried again at the next tick
		return
	}
	if rules != nil && e.pushed.rules != rules {
		e.log.Info("app selectors re-resolved; datapath updated")
	}
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
	keep := store.NewOverlay()
	for id, run := range e.temp.Runs {
		keep.Runs[id] = run
		if r, ok := e.temp.Rules[run.Rule]; ok {
			keep.Rules[run.Rule] = r
		}
	}
	// The running engine keeps them; the file (and the next change's
	// record) holds only what stays.
	st := e.stTemp.Holds()
	st.Overlay, st.Keys = keep, e.keysTemp
	if err := e.stTemp.Compact(st); err != nil {
		e.log.Warn("forget temporary changes", "err", err)
	}
}

// ReleaseRuns moves the processes of the runs recorded in the runtime state
// file at runtimePath back to the cgroups they came from (cgroup2 mounted
// at cgRoot), so that removing hostqos's cgroups leaves programs where they
// were. It is for `hostqos down` without a running engine.
func ReleaseRuns(runtimePath, cgRoot string) {
	temp, _, err := store.ReadState(runtimePath)
	if err == nil {
		releaseRuns(cgRoot, temp.Runs)
	}
}
