// Package bench is hostqos's benchmark suite (`hostqos bench`, `make bench`).
//
// Every benchmark builds its own private testbed (network namespaces whose
// names start with "hq-bench"), runs the alternatives it compares side by
// side in the same run, and returns a Report: the setup it ran on, a table
// with the DESIGN.md target beside each figure, and the raw metrics. The
// command prints the reports and appends them, dated, to bench/RESULTS.md.
//
// Programs that must be told apart by an exe rule (a "managed" and an
// "unmanaged" app) are copies of the running executable invoked as
// `<copy> bench-helper SUB ...` with HelperEnv set; see helper.go.
package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"sort"
	"strings"
	"time"

	"github.com/hostqos/hostqos/internal/atomicfile"
	"github.com/hostqos/hostqos/internal/lab"
)

// Options configure a run of the suite.
type Options struct {
	// Quick shortens every benchmark (fewer rounds, shorter windows): the
	// whole suite in about two minutes, for smoke runs and tests.
	Quick bool
	// BinDir holds hostqos and hostqosd; "" = next to Self, else PATH.
	BinDir string
	// Self is an executable that runs the helpers (`bench-helper`); "" =
	// os.Executable().
	Self string
	// Progress receives the setup lines and tables as they are produced
	// (nil = discard).
	Progress io.Writer
	// Log is the structured logger (nil = slog.Default()).
	Log *slog.Logger
	// ConnectCount overrides the connects per alternative of "connect"
	// (0 = 2000, quick 300).
	ConnectCount int
	// Containers overrides the bare-netns containers of "containers"
	// daemon-CPU part (0 = 200).
	Containers int
	// PlotDir receives the plots of the benchmarks that draw one
	// ("" = none are saved).
	PlotDir string
}

// Report is the outcome of one benchmark.
type Report struct {
	Name      string             `json:"name"`
	Title     string             `json:"title"`
	Setup     []string           `json:"setup"`
	Columns   []string           `json:"columns"`
	Rows      [][]string         `json:"rows"`
	Notes     []string           `json:"notes,omitempty"`
	Metrics   map[string]float64 `json:"metrics"`
	Error     string             `json:"error,omitempty"`
	DurationS float64            `json:"duration_s"`

	progress io.Writer // setup lines are printed here as they are added
}

func (r *Report) setup(format string, a ...any) {
	line := fmt.Sprintf(format, a...)
	r.Setup = append(r.Setup, line)
	if r.progress != nil {
		fmt.Fprintf(r.progress, "- %s\n", line)
	}
}
func (r *Report) note(format string, a ...any)  { r.Notes = append(r.Notes, fmt.Sprintf(format, a...)) }
func (r *Report) row(cells ...string)           { r.Rows = append(r.Rows, cells) }
func (r *Report) metric(name string, v float64) { r.Metrics[name] = v }

// benchmark is one entry of the suite.
type benchmark struct {
	name, title string
	run         func(e *env, r *Report) error
}

var suite = []benchmark{
	{"datapath", "Datapath cost per packet (BPF test-run)", benchDatapath},
	{"ingress", "Ingress classifier cost per packet (BPF test-run)", benchIngress},
	{"pps", "Packet rate through a veth: no QoS vs hostqos vs nftables vs tc", benchPPS},
	{"connect", "Added TCP connect latency for a managed app", benchConnect},
	{"stats", "Cost of reading one flow's counters", benchStats},
	{"ratelimit", "Rate-limit accuracy (rule maxbw through the real daemon)", benchRateLimit},
	{"isolation", "Voice latency under saturating bulk TCP on a 20 Mbit/s uplink", benchIsolation},
	{"scale", "10k managed flows and 10k rules: per-packet cost and memory", benchScale},
	{"ruleadd", "Rule-add latency with 1/100 managed links and 10/10,000 rules", benchRuleAdd},
	{"memory", "Daemon memory over 10,000 policy changes at 10 and 2,000 rules", benchMemory},
	{"idle", "Idle daemon: CPU, RSS, netlink dumps and status latency at 10 / 10,000 rules and 1 / 100 links", benchIdle},
	{"startup", "Daemon start and restart with adoption at 10 and 10,000 rules", benchStartup},
	{"resv-cost", "Reservation component costs (seed Table II): policing, bind at connect, backpressure", benchResvCost},
	{"resv-latency", "UDP round trips best effort vs reserved (seed Table III)", benchResvLatency},
	{"resv-goodput", "Goodput vs reserved rate: none, policing, session shaping, link shaping (seed Figs. 6–8)", benchResvGoodput},
	{"history", "Cost of the history store and the metrics: sampling 10k flows, DB growth, a day's query, a 10k-series scrape", benchHistory},
	{"xdpdrop", "Drop list: hostqos XDP vs an nftables drop rule, 10 and 100,000 prefixes", benchXDPDrop},
	{"synflood", "SYN flood: an unlisted client's connections without throttling, with nftables, with hostqos", benchSYNFlood},
	{"resv-api", "Reservation add and remove latency through the API (seed Table IV)", benchResvAPI},
	{"resv-scale", "Reservations held on one host from 1 to 10,000: add latency and daemon memory", benchResvScale},
	{"download", "TCP download vs configured limit, IFB + HTB vs hostqos maxbw_in, 0 and 40 ms RTT (Crossbow Table 1)", benchDownload},
	{"download-compete", "Two competing TCP downloads, maxbw_in set on one mid-run (Crossbow Fig. 3)", benchDownloadCompete},
	{"rsvp-signal", "Reservation across one RSVP router through three hostqosd: reserve → active, remove → gone (seed Table IV with signalling)", benchRSVPSignal},
	{"qsock", "QSockets: cost of each call beside its plain socket counterpart (seed Table 1)", benchQSock},
	{"download-priority", "Two competing TCP downloads of different class priority, without and with the link's ingress_rate (Crossbow Table 2)", benchDownloadPriority},
	{"qsock-video", "QSockets: a 20 fps video on a qsocket (dwcs) and on a plain socket under bulk TCP perturbations (seed Figs. 4–5)", benchQSockVideo},
	{"qsock-streams", "QSockets: two qsocket video streams (20, 15 fps) and a plain one (20 fps) on an overloaded link (seed Fig. 6)", benchQSockStreams},
	{"qsock-edf", "QSockets: a sensor's deadline misses per 5 s, edf-lossy vs edf-lossless vs plain socket, bulk TCP from half-way (seed Fig. 7)", benchQSockEDF},
	{"containers", "Containers as apps: per packet and pps on a container's path vs a host process's, discovery latency, daemon CPU with 200 containers", benchContainers},
	{"kube", "Kubernetes node agent: policy change to enforcement, memory and CPU with 500 pods and 100 policies, API requests at steady state", benchKube},
	{"echo-rtt", "UDP echo round trip with and without hostqos on the echoing host (Q-Pod Table 8)", benchEchoRTT},
	{"throughput", "Bulk TCP through a veth shaped by HTB at 1/10/40 Gbit/s: goodput and CPU per Gbit/s, hostqos vs plain tc HTB vs no QoS", benchThroughput},
	{"qpod-load", "Reading a flow's counters lock-free (mmap) vs by system call under CPU load (Q-Pod Figs. 9–14)", benchQPodLoad},
	{"web", "Web view: the page's initial load, and the live view's refresh cost to the daemon with 1,000 flows", benchWeb},
	{"flowqueue", "Flow queueing: an unmarked sparse flow behind 4 uploads of its class at 5/20/100 Mbit/s, one FIFO per class vs hostqos flow queueing", benchFlowQueue},
	{"autorate", "Link capacity tracking: a bottleneck stepping 30 → 8 → 20 Mbit/s behind 40 ms, no shaping vs static too high vs too low vs egress_rate auto", benchAutorate},
}

// Names lists the benchmarks in the order the suite runs them.
func Names() []string {
	var out []string
	for _, b := range suite {
		out = append(out, b.name)
	}
	return out
}

// hostLine is the first setup line of every report: the host and how busy
// it was when the benchmark started (other load skews every figure).
func hostLine() string {
	load := "unknown"
	if l := lab.LoadAverage(); l != nil {
		load = strings.Join(l, " ")
	}
	return fmt.Sprintf("%s; load average at start %s", lab.HostInfo(), load)
}

// Run runs the named benchmarks (all when names is empty) in suite order.
// A benchmark that fails gets a Report with Error set and the suite goes
// on; the returned error joins the failures.
func Run(ctx context.Context, opts Options, names []string) ([]*Report, error) {
	want := map[string]bool{}
	for _, n := range names {
		found := false
		for _, b := range suite {
			if b.name == n {
				found = true
			}
		}
		if !found {
			return nil, fmt.Errorf("benchmark %q: no such benchmark; known: %s", n, strings.Join(Names(), ", "))
		}
		want[n] = true
	}
	if os.Geteuid() != 0 {
		return nil, errors.New("run benchmarks: needs root (network namespaces, BPF, qdiscs)")
	}
	if n, err := lab.CleanStale(); err != nil || n > 0 {
		fmt.Fprintf(progressWriter(opts), "cleaned %d stale daemon(s) of killed runs (%v)\n", n, err)
	}
	e, err := newEnv(ctx, opts)
	if err != nil {
		return nil, err
	}
	defer e.close()
	var reports []*Report
	var errs []error
	for _, b := range suite {
		if len(want) > 0 && !want[b.name] {
			continue
		}
		if ctx.Err() != nil {
			errs = append(errs, ctx.Err())
			break
		}
		r := &Report{Name: b.name, Title: b.title, Metrics: map[string]float64{}, progress: e.progress}
		e.printf("\n=== %s: %s\n", b.name, b.title)
		start := time.Now()
		err := b.run(e, r)
		r.DurationS = time.Since(start).Seconds()
		if err != nil {
			r.Error = err.Error()
			errs = append(errs, fmt.Errorf("benchmark %s: %w", b.name, err))
			e.log.Error("benchmark failed", "component", "bench", "bench", b.name, "err", err)
		}
		if e.progress != io.Discard {
			_ = writeReport(e.progress, r, false)
		}
		reports = append(reports, r)
	}
	return reports, errors.Join(errs...)
}

// WriteTable writes a report as text: setup lines, a Markdown table, notes.
func WriteTable(w io.Writer, r *Report) error { return writeReport(w, r, true) }

func writeReport(w io.Writer, r *Report, withSetup bool) error {
	var b strings.Builder
	for _, s := range r.Setup {
		if withSetup {
			fmt.Fprintf(&b, "- %s\n", s)
		}
	}
	if len(r.Columns) > 0 {
		b.WriteString("\n")
		writeMarkdownTable(&b, r.Columns, r.Rows)
	}
	if len(r.Notes) > 0 {
		b.WriteString("\n")
		for _, n := range r.Notes {
			fmt.Fprintf(&b, "- %s\n", n)
		}
	}
	if r.Error != "" {
		fmt.Fprintf(&b, "\n**error:** %s\n", r.Error)
	}
	fmt.Fprintf(&b, "\n(%s took %.0f s)\n", r.Name, r.DurationS)
	_, err := io.WriteString(w, b.String())
	return err
}

func writeMarkdownTable(b *strings.Builder, cols []string, rows [][]string) {
	b.WriteString("| " + strings.Join(cols, " | ") + " |\n|")
	for range cols {
		b.WriteString("---|")
	}
	b.WriteString("\n")
	for _, r := range rows {
		cells := make([]string, len(cols))
		copy(cells, r)
		b.WriteString("| " + strings.Join(cells, " | ") + " |\n")
	}
}

// GitRevision is `git rev-parse --short HEAD` in dir, with "-dirty" when
// the tree has uncommitted changes, or "unknown".
func GitRevision(dir string) string {
	c := exec.Command("git", "rev-parse", "--short", "HEAD")
	c.Dir = dir
	out, err := c.Output()
	if err != nil {
		return "unknown"
	}
	rev := strings.TrimSpace(string(out))
	d := exec.Command("git", "diff", "--quiet", "HEAD")
	d.Dir = dir
	if err := d.Run(); err != nil {
		var xe *exec.ExitError
		if errors.As(err, &xe) && xe.ExitCode() == 1 {
			rev += "-dirty"
		}
	}
	return rev
}

// Record appends a dated section with the reports to the results file
// (created if missing) and rewrites the summary at its top from the
// sections (summary.go). Sections other people maintain in the file are
// left exactly as they are.
func Record(path string, reports []*Report, host lab.Host, rev string, quick bool, when time.Time) error {
	var b strings.Builder
	mode := "full length"
	if quick {
		mode = "quick: shorter windows, fewer rounds"
	}
	names := make([]string, len(reports))
	for i, r := range reports {
		names[i] = r.Name
	}
	fmt.Fprintf(&b, "\n## Benchmarks %s, commit %s\n\n", when.UTC().Format("2006-01-02 15:04 UTC"), rev)
	fmt.Fprintf(&b, "`hostqos bench %s` (%s) on %s. Targets are those of DESIGN.md, "+
		"quoted beside each figure. How to read these tables: docs/benchmarks.md.\n", strings.Join(names, " "), mode, host)
	for _, r := range reports {
		fmt.Fprintf(&b, "\n### %s — %s\n\n", r.Name, r.Title)
		if err := WriteTable(&b, r); err != nil {
			return err
		}
	}
	old, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("read results file %s: %w", path, err)
	}
	doc := string(old)
	if strings.TrimSpace(doc) == "" {
		doc = "# hostqos benchmark results\n"
	}
	doc = strings.TrimRight(doc, "\n") + "\n" + b.String()
	return atomicfile.Write(path, []byte(withSummary(doc, Names())))
}

// ---- small numeric helpers ----

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func minOf(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	m := xs[0]
	for _, x := range xs[1:] {
		m = min(m, x)
	}
	return m
}

// percentile by nearest rank on a copy of xs (0 < p ≤ 100).
func percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	k := int(float64(len(s))*p/100+0.999999) - 1
	k = max(0, min(k, len(s)-1))
	return s[k]
}

func f0(v float64) string  { return fmt.Sprintf("%.0f", v) }
func f1(v float64) string  { return fmt.Sprintf("%.1f", v) }
func f2(v float64) string  { return fmt.Sprintf("%.2f", v) }
func f3(v float64) string  { return fmt.Sprintf("%.3f", v) }
func pct(v float64) string { return fmt.Sprintf("%.1f %%", v*100) }

// mark is "✓" when ok, "✗" otherwise — a verdict beside a target.
func mark(ok bool) string {
	if ok {
		return "✓"
	}
	return "✗"
}

// progressWriter is where progress lines go (nowhere when not asked for).
func progressWriter(o Options) io.Writer {
	if o.Progress == nil {
		return io.Discard
	}
	return o.Progress
}
