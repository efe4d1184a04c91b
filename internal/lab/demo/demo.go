// Package demo runs hostqos's end-to-end demo and the reproductions of the
// Q-Pod seed's network experiments in private network namespaces:
//
//   - "default": a client running the real hostqosd, a DiffServ router with
//     a 20 Mbit/s bottleneck towards a server, and a cross-traffic host
//     sending bursty Pareto traffic through the same bottleneck. The client
//     runs G.729 voice calls, a video stream and bulk TCP uploads, once
//     without hostqos and once with it, and the demo compares what each
//     class got.
//   - "qpod-voip": the seed's §5.2 VoIP experiment (Figures 23–25) scaled to
//     this machine: G.729 calls under capped Pareto cross traffic, marked by
//     hostqos vs best effort.
//   - "qpod-scale": the seed's §4.7 stress test (Figures 19–20): concurrent
//     1 Mbit/s UDP sessions launched 2 s apart, each's throughput/offered.
//   - "qpod-tct": the seed's §4.6 TCP session completion times (Figures
//     17–18) for 50 KB … 5 MB payloads, unmanaged vs managed by hostqos,
//     idle and through a congested DiffServ router.
//   - "qpod-cos": the seed's §5.3 two classes of service chosen by
//     destination (Figure 27): gold AF11 vs silver AF12 video through the
//     DiffServ router under bursty AF13 cross traffic.
//
// Everything the demo creates (namespaces, veths, the daemon, its pins and
// cgroups, scratch files) is removed when it ends, is interrupted, or
// panics; what a killed run left behind is removed by the next run.
package demo

import (
	"context"
	"errors"
	"fmt"
	"github.com/hostqos/hostqos/internal/lab"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"time"
)

// Scenarios.
const (
	ScenarioDefault   = "default"
	ScenarioQPodVoIP  = "qpod-voip"
	ScenarioQPodScale = "qpod-scale"
	ScenarioQPodTCT   = "qpod-tct"
	ScenarioQPodCoS   = "qpod-cos"
)

// Options configure a demo run. Zero values mean the scenario's defaults.
type Options struct {
	Scenario string
	Duration time.Duration // measured time per run (default 20s; qpod-voip 40s)
	Calls    int           // voice calls (default 8; qpod-voip 64)
	OutDir   string        // where plots and result.json go (required)
	// Keep keeps the scratch directory (daemon config, state and log, the
	// app copies, the generators' raw JSON output) under OutDir/scratch.
	// Network namespaces and the daemon are removed regardless.
	Keep bool
	// BinDir holds hostqos and hostqosd (see lab.FindBinaries).
	BinDir string
	// qpod-scale: number of sessions (default 75), launch gap (default
	// 2s), and how long all sessions run together (default 10s).
	Sessions int
	Gap      time.Duration
	Hold     time.Duration
	// qpod-tct: transfers per payload size and run (default 20 idle; a
	// quarter of it, at least 1, congested).
	Transfers int
	// Progress receives progress lines (nil: discard).
	Progress io.Writer
	Log      *slog.Logger
}

func (o *Options) normalize() error {
	if o.Scenario == "" {
		o.Scenario = ScenarioDefault
	}
	switch o.Scenario {
	case ScenarioDefault, ScenarioQPodVoIP, ScenarioQPodScale, ScenarioQPodTCT, ScenarioQPodCoS:
	default:
		return fmt.Errorf("scenario %q: unknown; use %s, %s, %s, %s or %s", o.Scenario, ScenarioDefault, ScenarioQPodVoIP, ScenarioQPodScale,
			ScenarioQPodTCT, ScenarioQPodCoS)
	}
	if o.Transfers == 0 {
		o.Transfers = 20
	}
	if o.Transfers < 1 || o.Transfers > 1000 {
		return fmt.Errorf("transfers %d: must be 1..1000", o.Transfers)
	}
	if o.Duration == 0 {
		o.Duration = 20 * time.Second
		if o.Scenario == ScenarioQPodVoIP || o.Scenario == ScenarioQPodCoS {
			o.Duration = 40 * time.Second
		}
	}
	if o.Duration < 3*time.Second || o.Duration > 10*time.Minute {
		return fmt.Errorf("duration %v: must be between 3s and 10m", o.Duration)
	}
	if o.Calls == 0 {
		o.Calls = 8
		if o.Scenario == ScenarioQPodVoIP {
			o.Calls = 64
		}
	}
	if o.Calls < 1 || o.Calls > 200 {
		return fmt.Errorf("calls %d: must be 1..200 (each is a 50 pkt/s G.729 call)", o.Calls)
	}
	if o.Sessions == 0 {
		o.Sessions = 75
	}
	if o.Sessions < 1 || o.Sessions > 200 {
		return fmt.Errorf("sessions %d: must be 1..200", o.Sessions)
	}
	if o.Gap == 0 {
		o.Gap = 2 * time.Second
	}
	if o.Gap < 0 || o.Gap > time.Minute {
		return fmt.Errorf("gap %v: must be between 0 and 1m", o.Gap)
	}
	if o.Hold == 0 {
		o.Hold = 10 * time.Second
	}
	if o.Hold < 3*time.Second || o.Hold > 10*time.Minute {
		return fmt.Errorf("hold %v: must be between 3s and 10m", o.Hold)
	}
	if o.OutDir == "" {
		return fmt.Errorf("output directory: empty")
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	o.Log = o.Log.With("component", "demo")
	return nil
}

// Env describes the machine a result was measured on.
type Env struct {
	Date    string `json:"date"`
	Kernel  string `json:"kernel"`
	CPU     string `json:"cpu"`
	CPUs    int    `json:"cpus"`
	Load1   string `json:"loadavg_1m_at_start"`
	Version string `json:"hostqos_version,omitempty"`
}

func readEnv() Env {
	h := lab.HostInfo()
	e := Env{Date: time.Now().Format(time.RFC3339), Kernel: h.Kernel, CPU: h.CPU, CPUs: h.Cores}
	if l := lab.LoadAverage(); l != nil {
		e.Load1 = l[0]
	}
	return e
}

// Result is everything one demo run measured; the table and result.json
// are made from it.
type Result struct {
	Scenario string         `json:"scenario"`
	Env      Env            `json:"env"`
	Default  *DefaultResult `json:"default,omitempty"`
	VoIP     *VoIPResult    `json:"qpod_voip,omitempty"`
	Scale    *ScaleResult   `json:"qpod_scale,omitempty"`
	TCT      *TCTResult     `json:"qpod_tct,omitempty"`
	CoS      *CoSResult     `json:"qpod_cos,omitempty"`
	Files    []string       `json:"files"`
	// Created lists what the run created outside the output directory
	// (namespaces, daemon pins and cgroups, scratch); all of it is gone
	// when Run returns.
	Created []string `json:"created"`
	OutDir  string   `json:"out_dir"`
	Scratch string   `json:"scratch_kept,omitempty"`
	WallS   float64  `json:"wall_s"`
}

// Run runs the scenario. It removes everything it created before it
// returns, also when ctx is cancelled (the caller cancels it on SIGINT /
// SIGTERM) or a panic unwinds through it.
func Run(ctx context.Context, opts Options) (res *Result, err error) {
	if err := opts.normalize(); err != nil {
		return nil, err
	}
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("run the demo: needs root (network namespaces, BPF, qdiscs)")
	}
	if opts.BinDir == "" {
		d, err := lab.FindBinaries("")
		if err != nil {
			return nil, err
		}
		opts.BinDir = d
	}
	if !lab.HasBinaries(opts.BinDir) {
		return nil, fmt.Errorf("find hostqos and hostqosd in %s: missing; run make build", opts.BinDir)
	}
	start := time.Now()
	if n, err := CleanStale(); err != nil {
		opts.Log.Warn("clean leftovers of earlier demo runs", "err", err)
	} else if n > 0 {
		fmt.Fprintf(opts.Progress, "removed the leftovers of %d earlier demo run(s) that did not end cleanly\n", n)
	}
	if err := os.MkdirAll(opts.OutDir, 0o755); err != nil {
		return nil, fmt.Errorf("create output directory %s: %w", opts.OutDir, err)
	}
	abs, err := filepath.Abs(opts.OutDir)
	if err == nil {
		opts.OutDir = abs
	}
	var scratch string
	if opts.Keep {
		scratch = filepath.Join(opts.OutDir, "scratch")
		err = os.MkdirAll(scratch, 0o755)
	} else {
		scratch, err = os.MkdirTemp("", "hostqos-demo-")
	}
	if err != nil {
		return nil, fmt.Errorf("create scratch directory: %w", err)
	}
	r := &runner{opts: opts, ctx: ctx, scratch: scratch,
		mark: &marker{PID: os.Getpid(), Started: time.Now().Format(time.RFC3339), Scratch: scratch, Keep: opts.Keep}}
	if err := r.mark.save(); err != nil {
		return nil, err
	}
	defer func() {
		cerr := r.cleanup()
		if !opts.Keep {
			if e := os.RemoveAll(scratch); e != nil {
				cerr = errors.Join(cerr, fmt.Errorf("remove scratch directory: %w", e))
			}
		}
		if cerr == nil {
			r.mark.remove()
		} else {
			err = errors.Join(err, cerr)
		}
	}()
	res = &Result{Scenario: opts.Scenario, Env: readEnv(), OutDir: opts.OutDir}
	defer func() {
		if res != nil {
			r.mu.Lock()
			res.Created = append([]string{r.mark.path()}, r.created...)
			if !opts.Keep {
				res.Created = append(res.Created, scratch)
			}
			r.mu.Unlock()
		}
	}()
	if opts.Keep {
		res.Scratch = scratch
	}
	switch opts.Scenario {
	case ScenarioDefault:
		res.Default, err = r.runDefault()
	case ScenarioQPodVoIP:
		res.VoIP, err = r.runVoIP()
	case ScenarioQPodScale:
		res.Scale, err = r.runScale()
	case ScenarioQPodTCT:
		res.TCT, err = r.runTCT()
	case ScenarioQPodCoS:
		res.CoS, err = r.runCoS()
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("demo interrupted (%v); everything it created is being removed", context.Cause(ctx))
		}
		return nil, err
	}
	files, err := r.plots(res)
	if err != nil {
		return nil, err
	}
	res.Files = files
	res.WallS = round3(time.Since(start).Seconds())
	if err := writeJSON(filepath.Join(opts.OutDir, "result.json"), res); err != nil {
		return nil, err
	}
	res.Files = append(res.Files, filepath.Join(opts.OutDir, "result.json"))
	return res, nil
}

// runner holds what one run created, in creation order, for cleanup.
type runner struct {
	opts    Options
	ctx     context.Context
	scratch string
	mark    *marker

	mu       sync.Mutex
	cleanups []cleanupFn
	created  []string
}

func (r *runner) addCreated(paths ...string) {
	r.mu.Lock()
	r.created = append(r.created, paths...)
	r.mu.Unlock()
}

type cleanupFn struct {
	what string
	fn   func() error
}

// onCleanup registers fn to run at the end (last registered runs first).
func (r *runner) onCleanup(what string, fn func() error) {
	r.mu.Lock()
	r.cleanups = append(r.cleanups, cleanupFn{what, fn})
	r.mu.Unlock()
}

// cleanup runs every registered cleanup now, newest first.
func (r *runner) cleanup() error {
	r.mu.Lock()
	fns := r.cleanups
	r.cleanups = nil
	r.mu.Unlock()
	var errs []error
	for i := len(fns) - 1; i >= 0; i-- {
		if err := fns[i].fn(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", fns[i].what, err))
		}
	}
	return errors.Join(errs...)
}

func (r *runner) progress(format string, args ...any) {
	fmt.Fprintf(r.opts.Progress, format+"\n", args...)
}

// sleep waits d or until the run is cancelled.
func (r *runner) sleep(d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-r.ctx.Done():
		return r.ctx.Err()
	case <-t.C:
		return nil
	}
}

// goSafe runs fn in a goroutine; a panic there becomes an error instead of
// killing the process before the cleanup ran.
func goSafe(fn func() error) <-chan error {
	ch := make(chan error, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				buf := make([]byte, 8192)
				n := runtime.Stack(buf, false)
				ch <- fmt.Errorf("panic: %v\n%s", p, buf[:n])
			}
		}()
		ch <- fn()
	}()
	return ch
}

// setPgid puts a child in its own process group, so a Ctrl-C at the
// terminal reaches only the demo, which then stops the child itself.
func setPgid(c *exec.Cmd) {
	if c.SysProcAttr == nil {
		c.SysProcAttr = &syscall.SysProcAttr{}
	}
	c.SysProcAttr.Setpgid = true
}
