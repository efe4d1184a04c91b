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
// results are produced and sane, never how fast anything is.
func TestQuickCheap(t *testing.T) {
	testutil.NeedRoot(t)
	bin := t.TempDir()
	if err := lab.BuildBinaries(modRoot(t), bin); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var progress strings.Builder
	reports, err := Run(ctx, Options{Quick: true, BinDir: bin, ConnectCount: 40, Progress: &progress}, []string{"datapath", "connect"})
	if err != nil {
		t.Fatalf("run: %v\n%s", err, progress.String())
	}
	if len(reports) != 2 {
		t.Fatalf("got %d reports, want 2", len(reports))
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

	// Recording appends and leaves what was there alone.
	res := filepath.Join(t.TempDir(), "RESULTS.md")
	prior := "# results\n\n## Real-time channels\n\nsomeone else's section\n"
	if err := os.WriteFile(res, []byte(prior), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Record(res, reports, lab.HostInfo(), "abc1234", true, time.Now()); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(res)
	if !strings.HasPrefix(string(data), prior) || !strings.Contains(string(data), "### datapath") || !strings.Contains(string(data), "commit abc1234") {
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
