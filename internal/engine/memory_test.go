package engine

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/policy"
)

// liveHeap is the heap the program holds after a full collection (two:
// the first leaves sync.Pool's victims).
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// onTmpfs moves env's state files to a tmpfs when the host has one
// (/dev/shm): 10,000 fsyncs on a disk other work shares can take minutes,
// and the disk is not what the memory tests measure.
func onTmpfs(t *testing.T, env *testEnv) {
	t.Helper()
	dir, err := os.MkdirTemp("/dev/shm", "hostqos-engine-test-")
	if err != nil {
		return // no tmpfs: the test's own directory
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	env.cfg.StatePath = filepath.Join(dir, "state", "state.json")
	env.cfg.RuntimePath = filepath.Join(dir, "run", "runtime.json")
}

// TestMemoryBoundedOverChanges: 10,000 policy changes — rules added and
// removed by root under idempotency keys, and `hostqos run`s of an
// ordinary user started and ended (temporary changes) — leave the engine
// holding no more memory than after the first few: memory follows the
// size of the policy, not the number of changes (docs/security.md).
//
// The bound was measured once (go1.26, amd64): with 200 config rules the
// live heap grows by about 0.8 MB over the 10,000 changes, all of it
// tables that fill up to a fixed size and then stay there: the event ring
// (DefaultEventRing = 4,096 events, about 150 bytes each) and the
// idempotency keys (maxKeys = 1,024 per state file, about 200 bytes each
// with their answer). 4 MB leaves room for the runtime's own variation;
// a leak of one copy of the slot table per change (200 rules: about 12 kB)
// grows it by over 100 MB.
func TestMemoryBoundedOverChanges(t *testing.T) {
	env := newEnv(t, shapedConfig+scaleConfig(0, 200))
	onTmpfs(t, env)
	e := env.start(t)
	cycle := func(i int) {
		t.Helper()
		r := rule(fmt.Sprintf("x%d", i%3))
		r.RPort = policy.PortRange{From: 61000, To: 61000}
		kctx, pk := WithPendingKey(ctx, fmt.Sprintf("memory-test-key-%016d", i), "fp")
		if _, err := e.AddRule(kctx, root, r, false); err != nil {
			t.Fatalf("change %d: %v", 4*i, err)
		}
		e.RecordAnswer(pk, 201, []byte(`{"name":"`+r.Name+`"}`))
		if err := e.RemoveRule(ctx, root, r.Name); err != nil {
			t.Fatalf("change %d: %v", 4*i+1, err)
		}
		run, err := e.StartRun(ctx, nobody, api.RunRequest{Class: "gold", DSCP: policy.NoDSCP, Cmd: "true"}, &fakeTarget{pid: nobody.PID})
		if err != nil {
			t.Fatalf("change %d: %v", 4*i+2, err)
		}
		if err := e.EndRun(nobody, run.ID); err != nil {
			t.Fatalf("change %d: %v", 4*i+3, err)
		}
		if i%100 == 0 { // the fake kernel's call log is the test's, not the engine's
			env.k.Lock()
			env.k.Calls = nil
			env.k.Unlock()
		}
	}
	const changes, bound = 10_000, 4 << 20
	cycle(0)
	cycle(1)
	cycle(2)
	before := liveHeap()
	for i := 3; i < changes/4; i++ {
		cycle(i)
	}
	after := liveHeap()
	runtime.KeepAlive(e) // measured alive, or the collector frees it first
	grown := int64(after) - int64(before)
	t.Logf("live heap after 12 changes %.1f MB, after %d %.1f MB (%+.2f MB)", float64(before)/1e6, changes, float64(after)/1e6, float64(grown)/1e6)
	if grown > bound {
		t.Errorf("the live heap grew by %.1f MB over %d policy changes, more than the bounded tables (event ring, idempotency keys) allow (%.0f MB): something keeps memory per change", float64(grown)/1e6, changes, float64(bound)/1e6)
	}
}
