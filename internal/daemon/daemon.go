// Package daemon is hostqosd: it keeps the desired policy (config file plus
// changes made through the API), validates and admits every change whole,
// compiles it into BPF map entries and HTB classes, applies it as one
// transaction, persists it, and serves the API and statistics.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hostqos/hostqos/internal/cgroups"
	"github.com/hostqos/hostqos/internal/datapath"
	"github.com/hostqos/hostqos/internal/policy"
	"github.com/hostqos/hostqos/internal/shaper"
)

// Version is set at build time.
var Version = "dev"

// Config are the daemon's command-line settings.
type Config struct {
	ConfigPath     string // TOML policy file
	ConfigExplicit bool   // the path was given on the command line: it must exist
	StateDir       string // persistent state (API changes, slots)
	BPFFSDir       string // pins
	Socket         string // API socket
	FlowTableSize  int
	RescanInterval time.Duration
	// Limits on `hostqos run` by ordinary users (0 = the default): runs
	// one user may have at once, and runs of all ordinary users together.
	// The datapath's app-selector slots beyond MaxUserRuns are kept for
	// admin rules. See CheckRunLimits.
	MaxRunsPerUser int
	MaxUserRuns    int
	Logger         *slog.Logger
	// MaxConnsPerUser and MaxUserConns bound the API connections of
	// ordinary users: of one uid, and of all of them together (0: the
	// defaults). Root and group hostqos are not counted.
	MaxConnsPerUser int
	MaxUserConns    int
}

// Daemon is a running hostqosd.
type Daemon struct {
	cfg     Config
	log     *slog.Logger
	started time.Time
	netns   uint64
	cgRoot  string
	cgBase  string // our cgroup subtree, relative to cgRoot
	cgOwn   bool   // cgRoot is the daemon's own cgroup2 mount (ownCgroupDir)
	// bpffsOwn is where the datapath mounted a bpffs ("" if it found one);
	// pinsDie says that mount ends with the daemon (diesWithDaemon).
	bpffsOwn string
	pinsDie  bool

	mu      sync.Mutex // serialises changes
	base    *policy.Policy
	persist *overlay
	temp    *overlay
	slots   *slotTable
	eff     merged
	comp    *compiled
	links   map[string]int // managed link name → ifindex currently set up
	missing []string       // managed links whose interface does not exist now
	// lastLinkErr is the last error of setting up links again in rescan,
	// so that a lasting problem is logged once.
	lastLinkErr string
	lookup      lookupFunc        // finds interfaces; nil means lookupLink
	lookupErr   map[string]string // link → last lookup error, logged once

	dp      *datapath.Datapath
	adopted bool
	tagged  int

	stats *sampler
	srv   *http.Server
	down  chan struct{}

	// Idempotency keys (see idempotency.go): those recorded in the state
	// file and in the runtime file, the keyed change being applied, and
	// the keys of requests at work (keyMu).
	keysPersist, keysTemp keyTable
	commit                *pendingKey
	keyMu                 sync.Mutex
	inflight              map[string]chan struct{}
}

func (d *Daemon) statePath() string   { return filepath.Join(d.cfg.StateDir, "state.json") }
func (d *Daemon) runtimePath() string { return runtimePath(d.cfg) }

// runtimePath is where temporary state lives: next to the API socket, on
// the run-time file system, so it survives a crash but not a reboot.
func runtimePath(cfg Config) string { return filepath.Join(filepath.Dir(cfg.Socket), "runtime.json") }

// New prepares a daemon: it reads the config and state and validates them,
// but touches nothing in the kernel yet.
func New(cfg Config) (*Daemon, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.RescanInterval == 0 {
		cfg.RescanInterval = time.Second
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
	if cfg.MaxConnsPerUser <= 0 {
		cfg.MaxConnsPerUser = DefaultMaxConnsPerUser
	}
	if cfg.MaxUserConns <= 0 {
		cfg.MaxUserConns = DefaultMaxUserConns
	}
	d := &Daemon{
		cfg: cfg, log: cfg.Logger.With("component", "daemon"), started: time.Now(),
		links: map[string]int{}, down: make(chan struct{}),
	}
	var err error
	if d.netns, err = netnsInode(); err != nil {
		return nil, err
	}
	// Without a cgroup2 mount, Start mounts one (findOrMountCgroup).
	if d.cgRoot, err = cgroups.Root(); err != nil && !errors.Is(err, cgroups.ErrNoCgroup2) {
		return nil, err
	}
	d.cgOwn = d.cgRoot != "" && filepath.Clean(d.cgRoot) == ownCgroupDir(cfg)
	d.cgBase = cgroups.NetnsDir(d.netns)
	if d.base, err = d.loadConfig(); err != nil {
		return nil, err
	}
	ps, err := readStateFile(d.statePath())
	if err != nil {
		return nil, err
	}
	rt, err := readStateFile(d.runtimePath())
	if err != nil {
		return nil, err
	}
	d.persist, d.temp, d.keysPersist, d.keysTemp = ps.Overlay, rt.Overlay, ps.Keys, rt.Keys
	d.slots = newSlotTable()
	if ps.Slots != nil {
		d.slots = ps.Slots
	}
	d.eff = merge(d.base, d.persist, d.temp)
	if err := checkPolicy(d.eff.Policy, "state"); err != nil {
		return nil, fmt.Errorf("validate policy (config %s with changes in %s): %w", d.cfg.ConfigPath, d.statePath(), err)
	}
	return d, nil
}

// loadConfig reads the policy file. A missing default file means "no
// policy yet"; a missing file named on the command line is an error.
func (d *Daemon) loadConfig() (*policy.Policy, error) {
	p, err := policy.LoadFile(d.cfg.ConfigPath)
	if errors.Is(err, fs.ErrNotExist) && !d.cfg.ConfigExplicit {
		d.log.Info("no config file; starting with the default classes", "path", d.cfg.ConfigPath)
		return policy.Load(nil, d.cfg.ConfigPath)
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

// Start loads (or adopts) the datapath, applies the policy, and starts the
// API and the background loops. It returns once the API socket listens.
func (d *Daemon) Start(ctx context.Context) error {
	if d.cgRoot == "" {
		root, own, err := findOrMountCgroup(d.cfg, d.log)
		if err != nil {
			return err
		}
		d.cgRoot, d.cgOwn = root, own
	}
	dp, err := datapath.Open(datapath.Options{
		BPFFSDir: d.cfg.BPFFSDir, CgroupPath: d.cgRoot, FlowTableSize: d.cfg.FlowTableSize,
	})
	if err != nil {
		return fmt.Errorf("load datapath: %w", err)
	}
	d.dp = dp
	d.adopted = dp.Adopted()
	if d.bpffsOwn = dp.MountedBPFFS(); d.bpffsOwn != "" && diesWithDaemon(d.bpffsOwn) {
		d.pinsDie = true
		d.log.Warn("the bpffs holding the pins lives in a mount namespace of the daemon's own: the pinned datapath goes away when the daemon exits", "path", d.bpffsOwn)
	}
	d.stats = newSampler(d)
	d.mu.Lock()
	err = d.applyLocked(d.eff, d.slots.clone(), nil, nil)
	d.mu.Unlock()
	if err != nil {
		return fmt.Errorf("apply policy: %w", err)
	}
	if err := d.listen(); err != nil {
		return err
	}
	go d.tagExistingSockets()
	go d.loop(ctx)
	d.log.Info("hostqosd running", "socket", d.cfg.Socket, "adopted", d.adopted, "netns", d.netns,
		"links", len(d.eff.Policy.Links), "rules", len(d.eff.Policy.Rules))
	return nil
}

// Wait blocks until the daemon was told to go down or ctx ends.
func (d *Daemon) Wait(ctx context.Context) {
	select {
	case <-ctx.Done():
	case <-d.down:
	}
}

// Stop ends serving and releases file descriptors. Pinned programs and maps
// stay in the kernel and keep enforcing the last applied policy. Temporary
// changes end with a clean stop (a crash keeps them, so that a restarted
// daemon loses nothing); the policies of running `hostqos run` programs
// stay.
func (d *Daemon) Stop() {
	if d.srv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		_ = d.srv.Shutdown(ctx) // let answers in flight (e.g. to down) go out
		cancel()
		os.Remove(d.cfg.Socket)
	}
	d.dropTemporary() // after the API is closed: no change can bring them back
	if d.dp != nil {
		d.dp.Close()
	}
	d.log.Info("hostqosd stopped; the datapath keeps enforcing the last policy")
}

// applyLocked makes the kernel match m and, when persist and temp are
// given, writes them as the state files and makes them current. On any
// error it restores the previous kernel state and returns the error;
// nothing of the change remains.
func (d *Daemon) applyLocked(m merged, slots *slotTable, persist, temp *overlay) error {
	if err := slots.assign(m.Policy, d.counterReader()); err != nil {
		return err
	}
	comp, err := compile(m.Policy, slots, d.cgRoot)
	if err != nil {
		return err
	}
	plans, ifindexes, missing, err := d.planLinks(m.Policy, comp)
	if err != nil {
		return err
	}
	if err := d.pushKernel(comp, plans, ifindexes); err != nil {
		d.restoreKernel()
		return err
	}
	if persist != nil {
		keysP, keysT := d.recordKeyLocked(!reflect.DeepEqual(temp, d.temp))
		err := writeState(d.statePath(), persist, slots, keysP)
		if err == nil {
			err = writeState(d.runtimePath(), temp, nil, keysT)
		}
		if err != nil {
			d.restoreKernel()
			return err
		}
		d.persist, d.temp, d.keysPersist, d.keysTemp = persist, temp, keysP, keysT
	}
	d.eff, d.comp, d.slots, d.missing = m, comp, slots, missing
	return nil
}

// restoreKernel puts the last applied policy back after a failed change.
func (d *Daemon) restoreKernel() {
	if d.comp == nil {
		return
	}
	plans, idx, _, err := d.planLinks(d.eff.Policy, d.comp)
	if err == nil {
		err = d.pushKernel(d.comp, plans, idx)
	}
	if err != nil {
		d.log.Error("restore previous policy after a failed change", "err", err)
	}
}

// linkPlan is the shaper plan of one managed link (nil Plan: mark only).
type linkPlan struct {
	name    string
	ifindex int
	plan    *shaper.Plan
}

// planLinks builds the HTB plan of every managed link that exists now.
// Interfaces come and go (VPN tunnels, hot-plugged NICs): a missing one is
// reported in missing and managed once it appears (see rescan). A link whose
// lookup fails without proof that it is gone stays planned on the ifindex
// it is set up on, so that applying the plan releases nothing.
func (d *Daemon) planLinks(p *policy.Policy, comp *compiled) ([]linkPlan, map[string]int, []string, error) {
	var out []linkPlan
	var missing []string
	idx := map[string]int{}
	for _, l := range p.Links {
		verdict, ifindex := d.judgeLink(l.Name)
		if verdict == linkGone || ifindex == 0 { // unknown and not set up: nothing to keep
			missing = append(missing, l.Name)
			continue
		}
		lp := linkPlan{name: l.Name, ifindex: ifindex}
		if l.EgressRate > 0 {
			plan, err := shaper.Build(shaper.LinkSpec{Ifindex: ifindex, Name: l.Name, Rate: uint64(l.EgressRate)}, comp.Classes, comp.Rules)
			if err != nil {
				return nil, nil, nil, fmt.Errorf("plan HTB tree for link %s: %w", l.Name, err)
			}
			lp.plan = &plan
		}
		out = append(out, lp)
		idx[l.Name] = ifindex
	}
	return out, idx, missing, nil
}

// linksDamaged reports whether someone removed hostqos's HTB root or egress
// classifier from a managed link; the next apply puts them back.
func (d *Daemon) linksDamaged() bool {
	damaged := false
	for _, l := range d.eff.Policy.Links {
		ifindex, ok := d.links[l.Name]
		if !ok {
			continue
		}
		if attached, err := d.dp.LinkAttached(ifindex); err == nil && !attached {
			damaged = true
		}
		if l.EgressRate > 0 {
			if owned, err := shaper.Owned(ifindex); err == nil && !owned {
				damaged = true
			}
		}
	}
	return damaged
}

// linksChanged reports whether managed interfaces appeared, disappeared or
// were recreated (new ifindex) since the last apply. A failed lookup is no
// change: only proof that an interface is gone counts as gone.
func (d *Daemon) linksChanged() bool {
	for _, l := range d.eff.Policy.Links {
		verdict, ifindex := d.judgeLink(l.Name)
		have, managed := d.links[l.Name]
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
func (d *Daemon) pushKernel(comp *compiled, plans []linkPlan, ifindexes map[string]int) error {
	for _, lp := range plans {
		if lp.plan != nil {
			if err := shaper.Apply(*lp.plan); err != nil {
				return fmt.Errorf("shape link %s: %w", lp.name, err)
			}
		} else if owned, _ := shaper.Owned(lp.ifindex); owned {
			if err := shaper.Remove(lp.ifindex); err != nil {
				return fmt.Errorf("stop shaping link %s: %w", lp.name, err)
			}
		}
	}
	if err := d.dp.Apply(comp.Datapath); err != nil {
		return fmt.Errorf("apply datapath rules: %w", err)
	}
	for _, lp := range plans {
		if err := d.dp.AttachLink(lp.ifindex); err != nil {
			return fmt.Errorf("attach classifier to link %s: %w", lp.name, err)
		}
	}
	for name, ifindex := range d.links {
		if _, still := ifindexes[name]; still {
			continue
		}
		if err := d.dp.DetachLink(ifindex); err != nil {
			d.log.Warn("detach classifier", "link", name, "err", err)
		}
		if owned, _ := shaper.Owned(ifindex); owned {
			if err := shaper.Remove(ifindex); err != nil {
				d.log.Warn("remove HTB tree", "link", name, "err", err)
			}
		}
	}
	d.links = ifindexes
	return nil
}

// counterReader returns a function that gives a rule slot's raw counters
// (the baseline of a reused slot), reading the counter array at most once.
func (d *Daemon) counterReader() func(slot int) baseCounter {
	var cs []datapath.Counters
	read := false
	return func(slot int) baseCounter {
		if !read && d.dp != nil {
			cs, _ = d.dp.RuleCounters()
			read = true
		}
		if slot >= len(cs) {
			return baseCounter{}
		}
		return baseCounter{Packets: cs[slot].Packets, Bytes: cs[slot].Bytes, Drops: cs[slot].Drops}
	}
}

// change runs a mutation of the overlays as one transaction: mutate works
// on copies; the result is validated, admitted, applied and persisted, or
// nothing changes.
func (d *Daemon) change(source string, mutate func(persist, temp *overlay, eff *policy.Policy) error) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	defer func() { d.commit = nil }() // a key set by changeFor is this change's only
	persist, temp := d.persist.clone(), d.temp.clone()
	if err := mutate(persist, temp, d.eff.Policy); err != nil {
		return err
	}
	m := merge(d.base, persist, temp)
	if err := checkPolicy(m.Policy, source); err != nil {
		return err
	}
	if err := d.checkAppSlots(m.Policy); err != nil {
		return err
	}
	return d.applyLocked(m, d.slots.clone(), persist, temp)
}

// Reload re-reads the config file. An invalid file changes nothing.
func (d *Daemon) Reload() error {
	base, err := d.loadConfig()
	if err != nil {
		d.log.Error("reload: config rejected; keeping the running policy", "err", err)
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	m := merge(base, d.persist, d.temp)
	if err := checkPolicy(m.Policy, d.cfg.ConfigPath); err != nil {
		d.log.Error("reload: policy rejected; keeping the running policy", "err", err)
		return err
	}
	if err := d.checkAppSlots(m.Policy); err != nil {
		d.log.Error("reload: policy rejected; keeping the running policy", "err", err)
		return err
	}
	if err := d.applyLocked(m, d.slots.clone(), d.persist, d.temp); err != nil {
		d.log.Error("reload: apply failed; kept the running policy", "err", err)
		return err
	}
	d.base = base
	d.log.Info("reloaded", "config", d.cfg.ConfigPath, "rules", len(m.Policy.Rules))
	return nil
}

// Down removes everything hostqos made in this network namespace (see
// Teardown) and ends the daemon. The persistent state (the policy the admin
// wrote) is kept; temporary changes are dropped.
func (d *Daemon) Down() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.dp != nil {
		d.dp.Close()
		d.dp = nil
	}
	err := Teardown(d.cfg)
	if d.bpffsOwn != "" {
		// The bpffs mounted for the pins goes, unless something else
		// pinned there since.
		if ents, rerr := os.ReadDir(d.bpffsOwn); rerr == nil && len(ents) == 0 {
			_ = unix.Unmount(d.bpffsOwn, 0)
		}
	}
	d.links = map[string]int{}
	select {
	case <-d.down:
	default:
		close(d.down)
	}
	return err
}

// netnsInode identifies the daemon's network namespace.
func netnsInode() (uint64, error) {
	var st syscall.Stat_t
	if err := syscall.Stat("/proc/self/ns/net", &st); err != nil {
		return 0, fmt.Errorf("identify network namespace: %w", err)
	}
	return st.Ino, nil
}

// loop runs the periodic work: re-resolving app selectors (new files for
// an exe glob, units that started), reaping finished runs, and sampling
// counters for rates.
func (d *Daemon) loop(ctx context.Context) {
	t := time.NewTicker(d.cfg.RescanInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-d.down:
			return
		case <-t.C:
			d.stats.sample()
			d.reapRuns()
			d.rescan()
		}
	}
}

// rescan recompiles the current policy and pushes it when what the app
// selectors resolve to has changed.
func (d *Daemon) rescan() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.dp == nil {
		return
	}
	if d.linksChanged() || d.linksDamaged() {
		err := d.applyLocked(d.eff, d.slots.clone(), nil, nil)
		msg := ""
		if err != nil {
			msg = err.Error()
		}
		if msg != d.lastLinkErr { // log changes, not every second
			if err != nil {
				d.log.Warn("rescan: set up managed links again", "err", err)
			} else {
				d.log.Info("managed links set up again", "links", d.links, "missing", d.missing)
			}
			d.lastLinkErr = msg
		}
		return
	}
	comp, err := compile(d.eff.Policy, d.slots, d.cgRoot)
	if err != nil {
		d.log.Warn("rescan", "err", err)
		return
	}
	if d.comp != nil && sameDatapath(comp.Datapath, d.comp.Datapath) {
		d.comp.Warnings, d.comp.Resolved = comp.Warnings, comp.Resolved
		return
	}
	if err := d.dp.Apply(comp.Datapath); err != nil {
		d.log.Warn("rescan: apply datapath rules", "err", err)
		return
	}
	d.comp = comp
	d.log.Info("app selectors re-resolved; datapath updated")
}

// Teardown removes what hostqos made in this network namespace without a
// running daemon: every HTB root of ours on any interface, the pinned
// programs and maps, our cgroups and the temporary state.
func Teardown(cfg Config) error {
	var errs []error
	ifs, err := net.Interfaces()
	if err != nil {
		return fmt.Errorf("list interfaces: %w", err)
	}
	for _, ifi := range ifs {
		if owned, _ := shaper.Owned(ifi.Index); owned {
			if err := shaper.Remove(ifi.Index); err != nil {
				errs = append(errs, fmt.Errorf("remove HTB tree of %s: %w", ifi.Name, err))
			}
		}
	}
	if err := datapath.Remove(cfg.BPFFSDir); err != nil {
		errs = append(errs, err)
	}
	rt := runtimePath(cfg)
	if ns, err := netnsInode(); err == nil {
		// Without a cgroup2 mount (`ip netns exec`), one is mounted to
		// remove our cgroups, and unmounted again.
		if root, own, err := findOrMountCgroup(cfg, slog.Default()); err == nil {
			if temp, _, err := readState(rt); err == nil {
				releaseRuns(root, temp.Runs)
			}
			if err := cgroups.RemoveNetnsDir(root, ns); err != nil {
				errs = append(errs, err)
			}
			if own {
				if err := unmountOwnCgroup(cfg); err != nil {
					errs = append(errs, err)
				}
			}
		} else {
			errs = append(errs, err)
		}
	}
	if err := os.Remove(rt); err != nil && !errors.Is(err, fs.ErrNotExist) {
		errs = append(errs, fmt.Errorf("remove runtime state: %w", err))
	}
	return errors.Join(errs...)
}

// dropTemporary forgets temporary links, classes and rules (not those of
// runs) in the runtime state, for the next start.
func (d *Daemon) dropTemporary() {
	select {
	case <-d.down:
		return // hostqos down removed the runtime state already
	default:
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.temp == nil {
		return
	}
	keep := newOverlay()
	for id, run := range d.temp.Runs {
		keep.Runs[id] = run
		if r, ok := d.temp.Rules[run.Rule]; ok {
			keep.Rules[run.Rule] = r
		}
	}
	if err := writeState(d.runtimePath(), keep, nil, d.keysTemp); err != nil {
		d.log.Warn("forget temporary changes", "err", err)
	}
}
