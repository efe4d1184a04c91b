// Package daemon is hostqosd, a thin front door over the policy engine
// (internal/engine): it runs the process (mounts, loading the datapath,
// the periodic loop, stop and down), serves the HTTP API on a Unix socket
// (peer credentials, connection limits, idempotency keys, streamed
// answers), and maps requests to engine calls and engine errors to status
// codes.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hostqos/hostqos/internal/cgroups"
	"github.com/hostqos/hostqos/internal/datapath"
	"github.com/hostqos/hostqos/internal/datapath/xdp"
	"github.com/hostqos/hostqos/internal/engine"
	"github.com/hostqos/hostqos/internal/history"
	"github.com/hostqos/hostqos/internal/host"
	"github.com/hostqos/hostqos/internal/metrics"
	"github.com/hostqos/hostqos/internal/policy"
	"github.com/hostqos/hostqos/internal/watch"
	"github.com/hostqos/hostqos/internal/web"
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
	// Limits on `hostqos run` by ordinary users: runs one user may have
	// at once, and runs of all ordinary users together (0: the defaults;
	// the engine applies and checks them, see engine.CheckRunLimits). The
	// datapath's app-selector slots beyond MaxUserRuns are kept for admin
	// rules.
	MaxRunsPerUser int
	MaxUserRuns    int
	// Limits on ordinary users' qsockets: of one user, of all together
	// (0: the engine's defaults).
	MaxQSocksPerUser, MaxUserQSocks int
	// MaxUserQSchedRate bounds the declared rates of one ordinary user's
	// scheduled qsockets together (bit/s; 0: the engine's default).
	MaxUserQSchedRate uint64
	// MaxRTChannelsPerUser bounds an ordinary user's real-time channels.
	MaxRTChannelsPerUser int
	// MaxUserRTUtilization bounds the share of a link's real-time
	// utilization one ordinary user's channels take together (0: the
	// engine's default).
	MaxUserRTUtilization float64
	Logger               *slog.Logger
	// MaxConnsPerUser and MaxUserConns bound the API connections of
	// ordinary users: of one uid, and of all of them together (0: the
	// defaults). Root and group hostqos are not counted.
	MaxConnsPerUser int
	MaxUserConns    int
	// Settings override the config file's settings (metrics listener,
	// history retention) where they are set (flags).
	Settings policy.Settings
	// NoHistory runs without the history store.
	NoHistory bool
	// HistoryPath is the history database ("": STATE_DIR/history.db);
	// on a file system of its own, history can never fill the one of
	// the policy state.
	HistoryPath string
	// Attach is how the classifier is attached to links: auto (TCX where
	// the kernel has it, else clsact), tcx or clsact (host.ResolveAttach).
	Attach string
	// Loops is the loop variant of the datapath: auto (bpf_loop where the
	// kernel has it, else bounded), bpf_loop or bounded
	// (datapath.ResolveLoops); the bounded one holds smaller policies.
	Loops string
	// WebListen is the web view's address (--web-listen); it overrides
	// the config file's [web] listen.
	WebListen string
}

// Daemon is a running hostqosd: the process around the engine — its
// cgroup2 and bpffs mounts, the datapath it loads, the API socket and the
// periodic loop.
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

	eng *engine.Engine

	mu      sync.Mutex // guards dp, adopted, attach and mptcp
	dp      *datapath.Datapath
	shield  *xdp.Shield // XDP drop list and SYN limits; nil if it did not load
	adopted bool

	// loops is the datapath's loop variant (set by New), attach how the
	// classifier is attached, mptcp whether MPTCP subflows get an
	// identity (set by Start); for status.
	loops, attach string
	mptcp         bool

	srv  *http.Server
	down chan struct{}
	// large bounds the large answers to ordinary users (large.go); made
	// by routes().
	large *largeAnswers
	// streamsEnd is closed when the server shuts down: event streams end
	// (see events.go).
	streamsEnd chan struct{}

	// inForce are the start-time settings the daemon started with (set by
	// Start): a reload reads the file's, which apply at the next start.
	inForce policy.StartTime

	rsvp    *rsvpAgent        // nil: RSVP off ([rsvp] enabled)
	ctrs    *containerWatcher // nil: containers not looked for
	kube    *kubeAgent        // nil: no [kubernetes], or it did not start
	hist    *history.Store    // nil: no history
	metrics *metrics.Server   // nil: no metrics listener
	web     *web.Server       // nil: no web view; guarded by mu

	// Requests at work by idempotency key (see idempotency.go).
	keyMu    sync.Mutex
	inflight map[string]chan struct{}
}

func (d *Daemon) statePath() string { return filepath.Join(d.cfg.StateDir, "state.json") }

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
	if cfg.MaxConnsPerUser <= 0 {
		cfg.MaxConnsPerUser = DefaultMaxConnsPerUser
	}
	if cfg.MaxUserConns <= 0 {
		cfg.MaxUserConns = DefaultMaxUserConns
	}
	d := &Daemon{
		cfg: cfg, log: cfg.Logger.With("component", "daemon"), started: time.Now(),
		down: make(chan struct{}), streamsEnd: make(chan struct{}),
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
	// The loop variant decides the policy's capacity, which the engine
	// checks from the start.
	if d.loops, err = datapath.ResolveLoops(cfg.Loops); err != nil {
		return nil, err
	}
	d.eng, err = engine.New(engine.Config{
		Loops:      d.loops,
		ConfigPath: cfg.ConfigPath, ConfigExplicit: cfg.ConfigExplicit,
		StatePath: d.statePath(), RuntimePath: runtimePath(cfg), CgroupBase: d.cgBase,
		MaxRunsPerUser: cfg.MaxRunsPerUser, MaxUserRuns: cfg.MaxUserRuns,
		MaxQSocksPerUser: cfg.MaxQSocksPerUser, MaxUserQSocks: cfg.MaxUserQSocks,
		MaxUserQSchedRate:    cfg.MaxUserQSchedRate,
		MaxRTChannelsPerUser: cfg.MaxRTChannelsPerUser,
		MaxUserRTUtilization: cfg.MaxUserRTUtilization,
		// An ordinary user's event streams take at most half their API
		// connections.
		MaxSubscribersPerUser: max(1, cfg.MaxConnsPerUser/2), MaxUserSubscribers: max(1, cfg.MaxUserConns/2),
		Logger: cfg.Logger.With("component", "engine"),
	})
	if err != nil {
		return nil, err
	}
	return d, nil
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
	attach, err := host.ResolveAttach(d.cfg.Attach)
	if err != nil {
		return err
	}
	dp, err := datapath.Open(datapath.Options{
		BPFFSDir: d.cfg.BPFFSDir, CgroupPath: d.cgRoot, FlowTableSize: d.cfg.FlowTableSize, Logger: d.cfg.Logger,
		Loops: d.loops,
	})
	if err != nil {
		return fmt.Errorf("load datapath: %w", err)
	}
	d.mu.Lock()
	d.dp = dp
	d.adopted = dp.Adopted()
	d.attach, d.mptcp = attach, dp.MPTCPIdentity()
	d.mu.Unlock()
	if d.bpffsOwn = dp.MountedBPFFS(); d.bpffsOwn != "" && diesWithDaemon(d.bpffsOwn) {
		d.pinsDie = true
		d.log.Warn("the bpffs holding the pins lives in a mount namespace of the daemon's own: the pinned datapath goes away when the daemon exits", "path", d.bpffsOwn)
	}
	// The XDP shield is optional: without it the daemon works, and the
	// drop list and SYN limits are refused.
	shield, err := xdp.OpenShield(dp.Dir(), d.cfg.Logger)
	if err != nil {
		d.log.Error("XDP shield not loaded; the drop list and SYN limits are unavailable", "err", err)
		shield = nil
	}
	d.mu.Lock()
	d.shield = shield
	d.mu.Unlock()
	d.log.Info("classifier attachment", "attach", attach, "loops", d.loops)
	sys := &host.System{DP: dp, CgRoot: d.cgRoot, Netns: d.netns, Log: d.cfg.Logger, Attach: attach}
	h := engine.Host{Kernel: sys, QSockets: sys, Containers: sys}
	d.ctrs = d.openContainers()
	if shield != nil {
		h.Shield = host.NewShield(shield)
	}
	d.startWatches(ctx)
	if err := d.eng.Start(h); err != nil {
		return fmt.Errorf("apply policy: %w", err)
	}
	d.inForce = d.startTime()
	if err := d.startObservability(); err != nil {
		return err
	}
	if err := d.startRSVP(); err != nil {
		d.stopObservability()
		return err
	}
	if err := d.eng.RestoreRTChannels(reopenRTOwner); err != nil {
		d.log.Warn("restore real-time channels", "err", err)
	}
	d.kube = d.startKube(ctx)
	if err := d.listen(); err != nil {
		d.kube.stop()
		d.stopRSVP()
		d.stopObservability()
		return err
	}
	go d.eng.TagExistingSockets()
	if d.ctrs != nil {
		d.runContainers(ctx, d.ctrs)
	}
	go d.loop(ctx)
	go d.quotaLoop(ctx)
	go d.rtSweepLoop(ctx)
	go d.autorateLoop(ctx)
	links, rules := d.eng.Counts()
	d.log.Info("hostqosd running", "socket", d.cfg.Socket, "adopted", d.adopted, "netns", d.netns,
		"links", links, "rules", rules)
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
	d.stopWeb()
	if d.srv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		_ = d.srv.Shutdown(ctx) // let answers in flight (e.g. to down) go out
		cancel()
		os.Remove(d.cfg.Socket)
	}
	d.stopRSVP()
	d.kube.stop()
	d.ctrs.stop()
	select {
	case <-d.down: // hostqos down removed the runtime state already
	default:
		d.eng.DropTemporary() // after the API is closed: no change can bring them back
	}
	d.eng.Detach()
	d.stopObservability()
	d.mu.Lock()
	if d.dp != nil {
		d.dp.Close()
		d.dp = nil
	}
	if d.shield != nil {
		d.shield.Close()
		d.shield = nil
	}
	d.mu.Unlock()
	d.log.Info("hostqosd stopped; the datapath keeps enforcing the last policy")
}

// Reload re-reads the config file. An invalid file changes nothing, nor
// does one that takes away shaping admitted guarantees rely on, unless
// force (see engine.Reload). Start-time settings it changed are logged
// (and shown by status) as needing a restart.
func (d *Daemon) Reload(force bool) error {
	if err := d.eng.Reload(force); err != nil {
		return err
	}
	if c := d.restartNeeded(); len(c) > 0 {
		d.log.Warn("reload: settings read only at start changed; restart hostqosd to apply them", "changes", c)
	}
	return nil
}

// startTime are the start-time settings as the config file (and the
// flags over it) give them now.
func (d *Daemon) startTime() policy.StartTime {
	return policy.StartTime{Settings: d.settings(), RSVP: d.eng.RSVPSettings(), Web: policy.WebSettings{Listen: d.webListen()}}
}

// restartNeeded lists the start-time settings the config file changed
// since the daemon started (see policy.StartTime.Changes).
func (d *Daemon) restartNeeded() []string { return d.inForce.Changes(d.startTime()) }

// Down removes everything hostqos made in this network namespace (see
// Teardown) and ends the daemon. The persistent state (the policy the admin
// wrote) is kept; temporary changes are dropped.
func (d *Daemon) Down() error {
	d.eng.Detach()
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.dp != nil {
		d.dp.Close()
		d.dp = nil
	}
	if d.shield != nil {
		d.shield.Close()
		d.shield = nil
	}
	err := Teardown(d.cfg)
	if d.bpffsOwn != "" {
		// The bpffs mounted for the pins goes, unless something else
		// pinned there since.
		if ents, rerr := os.ReadDir(d.bpffsOwn); rerr == nil && len(ents) == 0 {
			_ = unix.Unmount(d.bpffsOwn, 0)
		}
	}
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
			d.eng.Tick()
		case <-d.eng.Woken():
			d.eng.Refresh()
		case <-d.eng.BindWanted():
			d.eng.BindOpenSockets()
		}
	}
}

// startWatches tells the engine of changes it does not make itself
// (package watch): interfaces, hostqos's root and clsact qdiscs and
// filters, and the directories of exe selectors, until the daemon goes
// down. A watch that cannot start leaves that part to the engine's audit
// and polling.
func (d *Daemon) startWatches(ctx context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		defer cancel()
		select {
		case <-ctx.Done():
		case <-d.down:
		}
	}()
	if err := watch.Netlink(ctx, d.log, d.eng.Wake); err != nil {
		d.log.Warn("watch links; changes by others are found by the audit each minute", "err", err)
	}
	dirs, err := watch.NewDirs(ctx, d.log, d.eng.Wake)
	if err != nil {
		d.log.Warn("watch exe selector directories; exe selectors are resolved again each second", "err", err)
		return
	}
	d.eng.SetSelectorWatcher(dirs)
}

// quotaLoop counts the quotas between ticks while one may be used up soon
// (engine.QuotaCheckIn), in a goroutine of its own so that a long tick
// does not delay it.
func (d *Daemon) quotaLoop(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		in := d.eng.QuotaCheckIn()
		if in >= d.cfg.RescanInterval {
			in = time.Hour // the ticks count them; QuotaWake says when not
		}
		timer.Reset(in)
		select {
		case <-ctx.Done():
			return
		case <-d.down:
			return
		case <-d.eng.QuotaWake():
		case <-timer.C:
			d.eng.CheckQuotas()
		}
	}
}

// Teardown removes what hostqos made in this network namespace without a
// running daemon: every HTB root of ours on any interface, the pinned
// programs and maps, our cgroups and the temporary state.
func Teardown(cfg Config) error {
	var errs []error
	if err := host.RemoveKernelState(cfg.BPFFSDir); err != nil {
		errs = append(errs, err)
	}
	rt := runtimePath(cfg)
	if ns, err := netnsInode(); err == nil {
		// Without a cgroup2 mount (`ip netns exec`), one is mounted to
		// remove our cgroups, and unmounted again.
		if root, own, err := findOrMountCgroup(cfg, slog.Default()); err == nil {
			engine.ReleaseRuns(rt, root)
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
	for _, p := range []string{rt, rt + ".journal"} { // the snapshot and its journal
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("remove runtime state: %w", err))
		}
	}
	return errors.Join(errs...)
}

// Defaults and checks of the limits on ordinary users' runs (flags
// --max-runs-per-user and --max-user-runs); see the engine.
const (
	DefaultMaxRunsPerUser = engine.DefaultMaxRunsPerUser
	DefaultMaxUserRuns    = engine.DefaultMaxUserRuns
)

// CheckRunLimits validates the limits on ordinary users' runs.
func CheckRunLimits(perUser, total int) error { return engine.CheckRunLimits(perUser, total) }
