package integration

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hostqos/hostqos/internal/lab"
)

// daemonMemory is what the daemon's metrics say of its memory.
type daemonMemory struct {
	live float64 // go_gc_heap_live_bytes: the heap held at the last collection
	gcs  float64 // go_gc_duration_seconds_count: collections so far
	rss  float64 // process_resident_memory_bytes
}

// scrapeMemory reads the daemon's memory from its metrics (metricsAddr, in
// the client namespace).
func (e *env) scrapeMemory(t *testing.T) daemonMemory {
	t.Helper()
	v, err := lab.ScrapeMetrics(context.Background(), e.client, metricsAddr,
		"go_gc_heap_live_bytes", "go_gc_duration_seconds_count", "process_resident_memory_bytes")
	if err != nil {
		t.Fatalf("the daemon's metrics lack its memory: %v", err)
	}
	m := daemonMemory{live: v["go_gc_heap_live_bytes"], gcs: v["go_gc_duration_seconds_count"], rss: v["process_resident_memory_bytes"]}
	return m
}

// settledMemory reads the daemon's memory once a collection has run since
// the call (the live heap is the one marked by the last collection): each
// try lists the 2,000 rules, which allocates a few megabytes.
func (e *env) settledMemory(t *testing.T) daemonMemory {
	t.Helper()
	start := e.scrapeMemory(t)
	for range 200 {
		e.hostqos("rule", "list", "-o", "json")
		if m := e.scrapeMemory(t); m.gcs > start.gcs {
			return m
		}
	}
	t.Fatal("the daemon ran no garbage collection in 200 rule lists")
	return daemonMemory{}
}

// TestUserRunsKeepDaemonMemoryBounded: with 2,000 rules in the config, an
// ordinary user running `hostqos run --class bulk -- true` again and again
// (four at once, each run a change that adds a rule and one that removes
// it) leaves the daemon's live heap where it was after the first runs:
// what a change keeps follows the size of the policy, not the number of
// changes (docs/security.md#bounded-memory). Before the fix every change
// kept a copy of the rule-slot table (about 350 kB at 2,000 rules): 200
// runs added 137 MiB to the live heap, 100 runs about 70.
func TestUserRunsKeepDaemonMemoryBounded(t *testing.T) {
	parallel(t)
	e := newEnv(t)
	var cfg strings.Builder
	// bulk is open to ordinary users (the built-in class says so too).
	fmt.Fprintf(&cfg, "metrics_listen = %q\n\n[[class]]\nname = \"bulk\"\nuser_allowed = true\n\n", metricsAddr)
	for i := range 2000 {
		fmt.Fprintf(&cfg, "[[rule]]\nname = \"r%d\"\nproto = \"udp\"\nrport = %d\nclass = \"bulk\"\n\n", i, 1+i)
	}
	e.writeConfig(cfg.String())
	e.startDaemon()
	openForNobody(t, e)
	runs := func(n int) {
		t.Helper()
		var wg sync.WaitGroup
		errs := make(chan error, 4)
		for range 4 { // the runs one user may have at once
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range n / 4 {
					if out, err := e.userHostqos(uidNobody, "run", "--class", "bulk", "--", "true"); err != nil {
						errs <- fmt.Errorf("hostqos run as nobody: %v\n%s", err, out)
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
	}
	runs(20)
	before := e.settledMemory(t)
	t0 := time.Now()
	const n = 100
	runs(n)
	took := time.Since(t0)
	after := e.settledMemory(t)
	if st := e.status(); st.Counts.Runs != 0 || st.Counts.Rules != 2000 {
		t.Errorf("after the runs: %d runs, %d rules; want 0 and the config's 2,000", st.Counts.Runs, st.Counts.Rules)
	}
	const mib = 1 << 20
	t.Logf("%d runs (%d changes) in %v; live heap %.1f → %.1f MiB, RSS %.1f → %.1f MiB", n, 2*n, took.Round(time.Millisecond),
		before.live/mib, after.live/mib, before.rss/mib, after.rss/mib)
	// The daemon's bounded tables (the event ring, the answers kept for
	// idempotency keys) fill by less than a megabyte over these runs; the
	// rest is the collector's timing (200 runs measured -2.8 MiB).
	const bound = 8 * mib
	if grown := after.live - before.live; grown > bound {
		t.Errorf("the daemon's live heap grew by %.1f MiB over %d runs of an ordinary user (bound %d MiB): memory grows with changes", grown/mib, n, bound/mib)
	}
}
