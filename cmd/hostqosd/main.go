// Command hostqosd is the hostqos daemon: it loads the eBPF datapath,
// builds the HTB trees, enforces the policy and serves the API.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/daemon"
	"github.com/hostqos/hostqos/internal/datapath"
	"github.com/hostqos/hostqos/internal/engine"
	"github.com/hostqos/hostqos/internal/policy"
	"github.com/hostqos/hostqos/internal/units"
)

// description is what hostqosd does; -h prints it before the flags and
// the manual page (hostqosd(8), made by `make man`) opens with it.
const description = `It reads the policy from --config, keeps API changes in --state-dir, pins its
BPF programs and maps under --bpffs-dir and serves the API on --socket.
SIGHUP reloads the config (an invalid file changes nothing); SIGTERM stops the
daemon and leaves the datapath enforcing the last policy; a restarted daemon
adopts it without a gap.`

const usage = `hostqosd — the hostqos daemon

Usage:
  hostqosd [flags]          run the daemon (as root)
  hostqosd down [flags]     remove everything hostqos made in this network
                            namespace without a running daemon (what
                            'hostqos down' falls back to)
  hostqosd --version        print the version

` + description + `

Flags:
`

// flags are hostqosd's command line: the daemon's configuration and the
// values main checks before it is used.
type flags struct {
	cfg            daemon.Config
	userQSchedRate *string
	logLevel       *string
	logJSON        *bool
	version        *bool
}

// newFlags defines every flag of hostqosd on a new flag set.
func newFlags() (*flag.FlagSet, *flags) {
	fs := flag.NewFlagSet("hostqosd", flag.ContinueOnError)
	fl := &flags{}
	cfg := &fl.cfg
	fs.StringVar(&cfg.ConfigPath, "config", "/etc/hostqos/hostqos.toml", "policy file (TOML); a missing default file means no policy yet")
	fs.StringVar(&cfg.StateDir, "state-dir", "/var/lib/hostqos", "directory for persistent state (policy changes made through the API)")
	fs.StringVar(&cfg.BPFFSDir, "bpffs-dir", "/sys/fs/bpf/hostqos", "where BPF programs and maps are pinned")
	fs.StringVar(&cfg.Socket, "socket", api.DefaultSocket, "Unix socket of the API")
	fs.StringVar(&cfg.Attach, "attach", "auto", "how the classifier is attached to links: tcx (Linux 6.6+), clsact (cls_bpf on a clsact qdisc, any kernel), or auto (tcx where the kernel has it)")
	fs.StringVar(&cfg.Loops, "loops", "auto", fmt.Sprintf("loops of the BPF rule search: bpf_loop (Linux 5.17+), bounded (Linux 5.12+; at most %d rules without and %d with app selectors), or auto (bpf_loop where the kernel has it)", policy.BoundedFlowRules, policy.BoundedAppRules))
	fs.IntVar(&cfg.FlowTableSize, "flow-table-size", 0, fmt.Sprintf("entries of each flow table (LRU; one for IPv4, one for IPv6); 0 = from the host's memory: %d on hosts of about 2.6 GiB or more, fewer on smaller ones (the tables take about %d bytes of kernel memory per entry, at most a sixteenth of the memory), at least %d", datapath.MaxAutoFlowTable, datapath.FlowEntryBytes, datapath.MinAutoFlowTable))
	fs.IntVar(&cfg.MaxRunsPerUser, "max-runs-per-user", daemon.DefaultMaxRunsPerUser, "hostqos runs one ordinary user (not root, not group hostqos) may have at once")
	fs.IntVar(&cfg.MaxUserRuns, "max-user-runs", daemon.DefaultMaxUserRuns, fmt.Sprintf("hostqos runs of all ordinary users together (at most %d); the other app-selector slots of the %d are kept for admin rules", policy.MaxAppRules/2, policy.MaxAppRules))
	fs.IntVar(&cfg.MaxQSocksPerUser, "max-qsocks-per-user", engine.DefaultMaxQSocksPerUser, "qsockets (sockets registered through libhostqos and the app API) one ordinary user may have open at once")
	fs.IntVar(&cfg.MaxRTChannelsPerUser, "max-rtchannels-per-user", engine.DefaultMaxRTChannelsPerUser, "real-time channels (rtchan, admitted host-wide) one ordinary user may hold at once; 1 … 256")
	fs.Float64Var(&cfg.MaxUserRTUtilization, "max-user-rt-utilization", engine.DefaultMaxUserRTUtilization, "share of a link's real-time utilization (the admission test's, 0 … 1) one ordinary user's real-time channels may take together")
	fs.IntVar(&cfg.MaxUserQSocks, "max-user-qsocks", engine.DefaultMaxUserQSocks, "qsockets all ordinary users together may have open at once")
	fl.userQSchedRate = fs.String("max-user-qsched-rate", units.ExactRate(engine.DefaultMaxUserQSchedRate), "rate one ordinary user's qsockets with a per-message scheduler (dwcs, edf-*) may declare together; the host's qsocket scheduler serves them ahead of every class (e.g. 4mbit)")
	fs.IntVar(&cfg.MaxConnsPerUser, "max-conns-per-user", daemon.DefaultMaxConnsPerUser, "API connections one ordinary user may hold at once; more are refused at once (root and group hostqos are not limited)")
	fs.IntVar(&cfg.MaxUserConns, "max-user-conns", daemon.DefaultMaxUserConns, "API connections all ordinary users together may hold at once")
	fs.StringVar(&cfg.Settings.MetricsListen, "metrics-listen", "", "serve Prometheus metrics on this host:port at /metrics, e.g. 127.0.0.1:9464 (overrides metrics_listen; default: no listener)")
	fs.StringVar(&cfg.WebListen, "web-listen", "", "serve the local web view on this host:port, e.g. 127.0.0.1:9465 (overrides [web] listen; default: no web view); hostqos web prints its URL with a login token")
	fs.IntVar(&cfg.Settings.MaxApps, "max-apps", 0, "apps named in history and metrics; the others are app \"other\" of their user (overrides max_apps; default 100)")
	fs.StringVar(&cfg.Settings.HistoryRaw, "history-raw", "", "keep per-second history this long (overrides history_raw; default 1h)")
	fs.StringVar(&cfg.Settings.HistoryMinutes, "history-minutes", "", "keep per-minute history this long (overrides history_minutes; default 30d)")
	fs.StringVar(&cfg.Settings.HistoryHours, "history-hours", "", "keep per-hour history this long (overrides history_hours; default 365d)")
	fs.StringVar(&cfg.Settings.HistoryFlows, "history-flows", "", "keep flow records and events this long (overrides history_flows; default 30d)")
	fs.IntVar(&cfg.Settings.HistoryMaxFlows, "history-max-flows", 0, "keep at most this many flow records (overrides history_max_flows; default 1000000)")
	fs.IntVar(&cfg.Settings.HistoryMaxEvents, "history-max-events", 0, "keep at most this many events (overrides history_max_events; default 100000)")
	fs.StringVar(&cfg.Settings.HistoryMaxEventBytes, "history-max-event-bytes", "", "keep at most this many bytes of events, e.g. 64MiB (overrides history_max_event_bytes; default 64MiB)")
	fs.StringVar(&cfg.Settings.HistoryMaxBytes, "history-max-bytes", "", "the history database's budget: at it, history stops recording until retention frees room (overrides history_max_bytes; default 4GiB)")
	fs.StringVar(&cfg.Settings.HistoryMinFree, "history-min-free", "", "free space history leaves on its file system for the policy state: below it, history stops recording (overrides history_min_free; default 64MiB)")
	fs.StringVar(&cfg.HistoryPath, "history-db", "", "the history database (default STATE_DIR/history.db); on a file system of its own, history cannot fill the policy state's")
	fs.IntVar(&cfg.Settings.EventRate, "event-rate", 0, "events one ordinary user or remote RSVP host may have published one by one, a minute on average; more are counted and summarised (overrides event_rate; default 30)")
	fs.IntVar(&cfg.Settings.EventBurst, "event-burst", 0, "events one ordinary user or remote RSVP host may have published one by one at once (overrides event_burst; default 60)")
	fs.StringVar(&cfg.Settings.FlowIdle, "flow-idle", "", "a flow without packets this long is recorded as ended (overrides flow_idle; default 15s)")
	fs.BoolVar(&cfg.NoHistory, "no-history", false, "keep no history database")
	fl.logLevel = fs.String("log-level", "info", "debug, info, warn or error")
	fl.logJSON = fs.Bool("log-json", false, "log as JSON lines")
	fl.version = fs.Bool("version", false, "print the version and exit")
	return fs, fl
}

func main() {
	fs, fl := newFlags()
	fs.Usage = func() {
		fmt.Fprint(os.Stderr, usage)
		fs.PrintDefaults()
	}
	cfg := &fl.cfg
	args := os.Args[1:]
	downMode := false
	if len(args) > 0 && args[0] == "down" {
		downMode, args = true, args[1:]
	}
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			os.Exit(0)
		}
		os.Exit(2)
	}
	if *fl.version {
		fmt.Println("hostqosd", daemon.Version)
		return
	}
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "config" {
			cfg.ConfigExplicit = true
		}
	})
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(*fl.logLevel)); err != nil {
		fmt.Fprintf(os.Stderr, "hostqosd: flag --log-level = %q: want debug, info, warn or error\n", *fl.logLevel)
		os.Exit(2)
	}
	opts := &slog.HandlerOptions{Level: lvl}
	var h slog.Handler = slog.NewTextHandler(os.Stderr, opts)
	if *fl.logJSON {
		h = slog.NewJSONHandler(os.Stderr, opts)
	}
	cfg.Logger = slog.New(h)
	slog.SetDefault(cfg.Logger)
	if cfg.FlowTableSize != 0 && (cfg.FlowTableSize < 1024 || cfg.FlowTableSize > 1<<24) {
		fmt.Fprintf(os.Stderr, "hostqosd: flag --flow-table-size = %d: want 1024 … 16777216, or 0 to size the tables from the host's memory\n", cfg.FlowTableSize)
		os.Exit(2)
	}
	if cfg.FlowTableSize == 0 {
		mem, err := datapath.MemTotal()
		cfg.FlowTableSize = datapath.AutoFlowTable(mem)
		if err != nil {
			cfg.FlowTableSize = datapath.MaxAutoFlowTable
			cfg.Logger.Warn("flow tables sized without knowing the host's memory", "error", err, "entries", cfg.FlowTableSize)
		} else {
			cfg.Logger.Info("flow tables sized from the host's memory", "entries", cfg.FlowTableSize, "mem_mib", mem>>20)
		}
	}
	if err := daemon.CheckRunLimits(cfg.MaxRunsPerUser, cfg.MaxUserRuns); err != nil {
		fmt.Fprintln(os.Stderr, "hostqosd:", err)
		os.Exit(2)
	}
	if cfg.MaxQSocksPerUser < 1 || cfg.MaxUserQSocks < 1 || cfg.MaxUserQSocks > 4095 {
		fmt.Fprintf(os.Stderr, "hostqosd: flags --max-qsocks-per-user = %d, --max-user-qsocks = %d: want at least 1, and --max-user-qsocks at most 4095\n", cfg.MaxQSocksPerUser, cfg.MaxUserQSocks)
		os.Exit(2)
	}
	if r, err := policy.ParseRate(*fl.userQSchedRate); err != nil || r == 0 {
		fmt.Fprintf(os.Stderr, "hostqosd: flag --max-user-qsched-rate = %q: want a rate above 0, such as 4mbit\n", *fl.userQSchedRate)
		os.Exit(2)
	} else {
		cfg.MaxUserQSchedRate = uint64(r)
	}
	if cfg.MaxRTChannelsPerUser < 1 || cfg.MaxRTChannelsPerUser > engine.DefaultMaxRTChannels {
		fmt.Fprintf(os.Stderr, "hostqosd: flag --max-rtchannels-per-user = %d: want 1 … %d\n", cfg.MaxRTChannelsPerUser, engine.DefaultMaxRTChannels)
		os.Exit(2)
	}
	if err := engine.CheckRTUtilization(cfg.MaxUserRTUtilization); err != nil {
		fmt.Fprintln(os.Stderr, "hostqosd:", err)
		os.Exit(2)
	}
	if cfg.MaxConnsPerUser < 1 || cfg.MaxConnsPerUser > 1<<16 {
		fmt.Fprintf(os.Stderr, "hostqosd: flag --max-conns-per-user = %d: want 1 … 65536\n", cfg.MaxConnsPerUser)
		os.Exit(2)
	}
	if cfg.MaxUserConns < 1 || cfg.MaxUserConns > 1<<16 {
		fmt.Fprintf(os.Stderr, "hostqosd: flag --max-user-conns = %d: want 1 … 65536\n", cfg.MaxUserConns)
		os.Exit(2)
	}
	if cfg.WebListen != "" && !policy.CheckWebListen(cfg.WebListen) {
		fmt.Fprintf(os.Stderr, "hostqosd: flag --web-listen = %q: want HOST:PORT with an IP address or localhost, e.g. 127.0.0.1:9465\n", cfg.WebListen)
		os.Exit(2)
	}
	if err := cfg.Settings.Validate("flags"); err != nil {
		fmt.Fprintln(os.Stderr, "hostqosd:", err)
		os.Exit(2)
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "hostqosd: must run as root (it loads BPF programs and changes qdiscs)")
		os.Exit(1)
	}
	if downMode {
		if err := daemon.Teardown(*cfg); err != nil {
			fmt.Fprintln(os.Stderr, "hostqosd down:", err)
			os.Exit(1)
		}
		fmt.Println("hostqos removed: classifiers, HTB trees, pins and cgroups of this network namespace")
		return
	}
	if err := run(*cfg); err != nil {
		fmt.Fprintln(os.Stderr, "hostqosd:", err)
		os.Exit(1)
	}
}

func run(cfg daemon.Config) error {
	d, err := daemon.New(cfg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := d.Start(ctx); err != nil {
		return err
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	done := make(chan struct{})
	go func() {
		d.Wait(ctx)
		close(done)
	}()
	for {
		select {
		case s := <-sigs:
			if s == syscall.SIGHUP {
				_ = d.Reload(false) // errors are logged; the running policy stays
				continue
			}
			cfg.Logger.Info("stopping", "signal", s.String())
			cancel()
			d.Stop()
			return nil
		case <-done:
			// hostqos down: give the answer a moment to leave.
			time.Sleep(100 * time.Millisecond)
			d.Stop()
			return nil
		}
	}
}
