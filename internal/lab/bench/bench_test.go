package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hostqos/hostqos/internal/lab"
	"github.com/hostqos/hostqos/internal/testutil"
)

// TestMain lets the test binary serve as the benchmark's helper executable:
// the suite runs copies of os.Executable() as `<copy> bench-helper SUB`.
func TestMain(m *testing.M) {
	if os.Getenv(HelperEnv) != "" && len(os.Args) > 1 && os.Args[1] == HelperCommand {
		if err := Helper(os.Args[2:], os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func modRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("go.mod not found")
		}
		dir = parent
	}
}

// TestQuickCheap runs the cheap benchmarks (datapath, connect with few
// connects) in quick mode to keep the suite from rotting. It checks that
// results are produced and sane, never how fast anything is. A long test:
// make test-long.
func TestQuickCheap(t *testing.T) {
	testutil.NeedRoot(t)
	testutil.Long(t)
	bin := t.TempDir()
	if err := lab.TestBinaries(modRoot(t), bin); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var progress strings.Builder
	reports, err := Run(ctx, Options{Quick: true, BinDir: bin, ConnectCount: 40, Progress: &progress}, []string{"datapath", "connect", "echo-rtt"})
	if err != nil {
		t.Fatalf("run: %v\n%s", err, progress.String())
	}
	if len(reports) != 3 {
		t.Fatalf("got %d reports, want 3", len(reports))
	}
	for _, r := range reports {
		if r.Error != "" || len(r.Rows) == 0 || len(r.Setup) == 0 {
			t.Errorf("%s: error %q, %d rows, %d setup lines", r.Name, r.Error, len(r.Rows), len(r.Setup))
		}
		for _, row := range r.Rows {
			if len(row) != len(r.Columns) {
				t.Errorf("%s: row %q has %d cells for %d columns", r.Name, row, len(row), len(r.Columns))
			}
		}
	}
	dp := reports[0].Metrics
	for _, k := range []string{"empty_ns_median", "classifier_ns_median_10", "classifier_ns_median_10000", "classifier_ns_median_100000"} {
		if !(dp[k] > 0) {
			t.Errorf("datapath metric %s = %v, want > 0", k, dp[k])
		}
	}
	if dp["classifier_ns_median_10"] <= dp["empty_ns_median"]/2 {
		t.Errorf("classifier %v ns cheaper than half the empty program %v ns: not measuring the classifier", dp["classifier_ns_median_10"], dp["empty_ns_median"])
	}
	c := reports[1].Metrics
	if c["attempted"] != 120 || c["connected"] != c["attempted"] || c["accepted"] != c["connected"] || c["failed"] != 0 {
		t.Errorf("connect counts: attempted %v connected %v accepted %v failed %v; want 120 each and 0 failed",
			c["attempted"], c["connected"], c["accepted"], c["failed"])
	}
	for _, k := range []string{"p50_us_no_hostqos", "p50_us_hostqos_running_unmanaged_app", "p50_us_hostqos_running_managed_app_exe_rule"} {
		if !(c[k] > 0) {
			t.Errorf("connect metric %s = %v, want > 0", k, c[k])
		}
	}
	if c["managed_rule_packets"] == 0 {
		t.Error("the managed app's exe rule counted no packets")
	}

	// Recording appends, leaves what was there alone, and the summary
	// shows the run.
	res := filepath.Join(t.TempDir(), "RESULTS.md")
	prior := "## Real-time channels\n\nsomeone else's section\n"
	if err := os.WriteFile(res, []byte("# results\n\n"+prior), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Record(res, reports, lab.HostInfo(), "abc1234", true, time.Now()); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(res)
	if !strings.Contains(string(data), prior) || !strings.Contains(string(data), "### datapath") || !strings.Contains(string(data), "commit abc1234") ||
		!strings.Contains(string(data), "| datapath | [") {
		t.Errorf("results file after Record:\n%s", data)
	}
}

func TestHelpers(t *testing.T) {
	if got := percentile([]float64{5, 1, 4, 2, 3}, 50); got != 3 {
		t.Errorf("p50 = %v", got)
	}
	if got := percentile([]float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 99); got != 10 {
		t.Errorf("p99 = %v", got)
	}
	if got := median([]float64{4, 1, 3, 2}); got != 2.5 {
		t.Errorf("median = %v", got)
	}
	if got := key("hostqos running, managed app (exe rule)"); got != "hostqos_running_managed_app_exe_rule" {
		t.Errorf("key = %q", got)
	}
	if err := Helper([]string{"nope", "--to", "198.18.0.2:1"}, os.Stdout); err == nil {
		t.Error("unknown helper subcommand accepted")
	}
	if _, err := Run(context.Background(), Options{}, []string{"no-such-bench"}); err == nil || !strings.Contains(err.Error(), "no such benchmark") {
		t.Errorf("unknown benchmark: %v", err)
	}
}

// resultsDoc is a results file as the suite and people write it: a
// hand-written section, two runs of datapath (the later one met its
// target), a quick run of connect, a failed run of pps.
const resultsDoc = `# hostqos benchmark results

Intro.

## Real-time channels

| a | b |
|---|---|
| x ✗ | y |

## Benchmarks 2026-11-22 11:27 UTC, commit 93fa2cc

` + "`hostqos bench datapath`" + ` (full length) on a host.

### datapath — Datapath cost per packet (BPF test-run)

- setup

| program | ns | target (net) |
|---|---|---|
| classifier | 70 | ≤ 60 ns ✗ |

(datapath took 8 s)

## Benchmarks 2026-11-23 09:00 UTC, commit 19e749d-dirty (uncommitted: notes)

` + "`hostqos bench datapath connect pps`" + ` (quick: shorter windows, fewer rounds) on a host.

### datapath — Datapath cost per packet (BPF test-run)

| program | ns | target (net) |
|---|---|---|
| classifier | 50 | ≤ 60 ns ✓ |
| classifier + policing | 90 | ≤ 100 ns ✓ |

| another table | ✗ |
|---|---|
| not counted | ✗ |

### connect — Added TCP connect latency for a managed app

| alternative | p50 | target |
|---|---|---|
| managed | 40 | ✗ |

### pps — Packet rate through a veth

**error:** no veth
`

// TestSummary: the summary shows each benchmark's latest recorded run —
// when, at which commit, linked to its section (GitHub's anchor, with the
// suffix of a repeated heading), whether it was quick or failed — and the
// targets its first table met and missed, naming the missed ones.
func TestSummary(t *testing.T) {
	sum := summary(resultsDoc, []string{"datapath", "connect", "pps", "stats"})
	for _, want := range []string{
		"| datapath | [2026-11-23 09:00 UTC, 19e749d-dirty](#datapath--datapath-cost-per-packet-bpf-test-run-1) (quick) | 2 of 2 | — |",
		"| connect | [2026-11-23 09:00 UTC, 19e749d-dirty](#connect--added-tcp-connect-latency-for-a-managed-app) (quick) | 0 of 1 | managed, 40: target ✗ |",
		"| pps | [2026-11-23 09:00 UTC, 19e749d-dirty](#pps--packet-rate-through-a-veth) (quick) | failed (error) | — |",
		"| stats | not recorded yet | — | — |",
	} {
		if !strings.Contains(sum, want+"\n") {
			t.Errorf("summary lacks\n%s\n%s", want, sum)
		}
	}
	// In place of an old summary, once; elsewhere after the intro.
	doc := withSummary(resultsDoc, Names())
	if !strings.HasPrefix(doc, "# hostqos benchmark results\n\nIntro.\n\n"+summaryBegin+"\n") || !strings.HasSuffix(doc, resultsDoc[len("# hostqos benchmark results\n\nIntro.\n\n"):]) {
		t.Errorf("summary not put after the intro, the rest untouched:\n%s", doc)
	}
	if again := withSummary(doc, Names()); again != doc || strings.Count(again, summaryBegin) != 1 {
		t.Errorf("rewriting the summary changed the file:\n%s", again)
	}
}

// TestRecordRewritesSummary: recording a run appends its section, leaves
// the rest as it was, and the summary then shows that run.
func TestRecordRewritesSummary(t *testing.T) {
	path := filepath.Join(t.TempDir(), "RESULTS.md")
	if err := os.WriteFile(path, []byte(withSummary(resultsDoc, Names())), 0o644); err != nil {
		t.Fatal(err)
	}
	r := &Report{Name: "connect", Title: "Added TCP connect latency for a managed app", Columns: []string{"alternative", "p50", "target"},
		Rows: [][]string{{"managed", "5", "≤ 10 µs ✓"}}, Metrics: map[string]float64{}}
	when := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	if err := Record(path, []*Report{r}, lab.Host{}, "abc1234", false, when); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(path)
	doc := string(data)
	if !strings.Contains(doc, "| connect | [2026-12-01 10:00 UTC, abc1234](#connect--added-tcp-connect-latency-for-a-managed-app-1) | 1 of 1 | — |\n") {
		t.Errorf("the summary does not show the recorded run:\n%s", doc)
	}
	if !strings.Contains(doc, resultsDoc[len("# hostqos benchmark results\n\nIntro.\n\n"):]) || !strings.HasSuffix(doc, "(connect took 0 s)\n") {
		t.Errorf("the sections were not kept and the run appended:\n%s", doc)
	}
	// A new file gets a title and a summary.
	path = filepath.Join(t.TempDir(), "new.md")
	if err := Record(path, []*Report{r}, lab.Host{}, "abc1234", true, when); err != nil {
		t.Fatal(err)
	}
	data, _ = os.ReadFile(path)
	if !strings.HasPrefix(string(data), "# hostqos benchmark results\n\n"+summaryBegin) || !strings.Contains(string(data), "(quick) | 1 of 1 |") {
		t.Errorf("new results file:\n%s", data)
	}
}

// TestResultsSummaryIsCurrent: the summary of bench/RESULTS.md is the one
// its sections give (a section added by hand needs `hostqos bench
// --update-summary`).
func TestResultsSummaryIsCurrent(t *testing.T) {
	path := filepath.Join(modRoot(t), "bench", "RESULTS.md")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if want := withSummary(string(data), Names()); want != string(data) {
		t.Errorf("bench/RESULTS.md: its summary is not what its sections give; run hostqos bench --update-summary")
	}
}
