package bench

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hostqos/hostqos/internal/lab"
	"github.com/hostqos/hostqos/internal/testutil"
)

// checkCtrReport checks what a containers report produced: its rows, the
// metrics of the parts that ran, and that the container's packets were
// marked at its veth when it was known and left as the host's when not.
// Never how fast anything was.
func checkCtrReport(t *testing.T, r *Report, rows int, metrics []string, progress string) {
	t.Helper()
	if r.Error != "" || len(r.Rows) != rows {
		t.Errorf("error %q, %d rows, want none and %d\n%s", r.Error, len(r.Rows), rows, progress)
	}
	for _, row := range r.Rows {
		if len(row) != len(r.Columns) {
			t.Errorf("row %q has %d cells for %d columns", row, len(row), len(r.Columns))
		}
		switch {
		case strings.Contains(row[0], "container known"):
			if !strings.Contains(row[4], "all AF41") {
				t.Errorf("container known: %q, want all its packets AF41 at rx", row[4])
			}
		case strings.Contains(row[0], "uplink only"):
			if !strings.Contains(row[4], "all CS0") {
				t.Errorf("container not known: %q, want its packets unmarked at rx", row[4])
			}
		}
	}
	for _, k := range metrics {
		if !(r.Metrics[k] > 0) {
			t.Errorf("metric %s = %v, want > 0", k, r.Metrics[k])
		}
	}
}

// TestContainersQuick runs the per-packet and discovery parts of the
// containers benchmark in quick mode (the other two, which start three
// daemons, run in TestContainersQuickAll): each program timed on its own
// path, and a Podman container started after its rule gets the rule's
// mark (Podman must be installed: CI installs it).
func TestContainersQuick(t *testing.T) {
	testutil.NeedRoot(t)
	bin := t.TempDir()
	if err := lab.TestBinaries(modRoot(t), bin); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var progress strings.Builder
	e, err := newEnv(ctx, Options{Quick: true, BinDir: bin, Progress: &progress})
	if err != nil {
		t.Fatal(err)
	}
	defer e.close()
	r := &Report{Name: "containers", Metrics: map[string]float64{}, progress: e.progress}
	if err := runCtrParts(e, r, []ctrPart{ctrParts[0], ctrParts[2]}); err != nil {
		t.Fatalf("%v\n%s", err, progress.String())
	}
	checkCtrReport(t, r, 15, []string{"pkt_ns_median_host_hit", "pkt_ns_median_veth_hit", "disc_ms_median_startup", "disc_ms_median_run_to_mark"}, progress.String())
}

// TestContainersQuickAll runs the whole containers benchmark in quick
// mode with 10 bare-netns containers in its CPU part. A long test: make
// test-long.
func TestContainersQuickAll(t *testing.T) {
	testutil.NeedRoot(t)
	testutil.Long(t)
	bin := t.TempDir()
	if err := lab.TestBinaries(modRoot(t), bin); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var progress strings.Builder
	reports, err := Run(ctx, Options{Quick: true, BinDir: bin, Containers: 10, Progress: &progress}, []string{"containers"})
	if err != nil {
		t.Fatalf("run: %v\n%s", err, progress.String())
	}
	r := reports[0]
	checkCtrReport(t, r, 21, []string{"pkt_ns_median_host_hit", "pps_alt0", "pps_alt2", "disc_ms_median_startup"}, progress.String())
	if r.Metrics["containers"] != 10 || len(r.Notes) != 1 {
		t.Errorf("the CPU part ran with %v containers and noted %q, want 10 and how long the daemon took to list them", r.Metrics["containers"], r.Notes)
	}
}
