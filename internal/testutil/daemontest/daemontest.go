// Package daemontest runs the real hostqosd in a test's namespace: a
// lab.Daemon that is stopped (and `hostqosd down` run) at the test's
// cleanup and on SIGINT or SIGTERM. It is apart from testutil because lab
// imports hostqos packages whose own tests use testutil.
package daemontest

import (
	"fmt"
	"sync"
	"testing"

	"github.com/hostqos/hostqos/internal/lab"
	"github.com/hostqos/hostqos/internal/testbed"
	"github.com/hostqos/hostqos/internal/testutil"
)

var staleOnce sync.Once

// CleanStale stops and removes, once per process, the daemons (with their
// pins and cgroups) and namespaces of runs that were killed (lab.CleanStale).
// New calls it; a TestMain may call it first to report what it found.
func CleanStale() (int, error) {
	n, err := 0, error(nil)
	staleOnce.Do(func() { n, err = lab.CleanStale() })
	return n, err
}

// New prepares (does not start) a hostqosd for node with the binaries in
// binDir and a scratch directory of the test. At cleanup it is stopped and
// what it made removed; the test fails if that fails, and its log is
// printed if the test failed.
func New(tb testing.TB, node *testbed.Node, binDir string) *lab.Daemon {
	tb.Helper()
	testutil.NeedRoot(tb)
	if n, err := CleanStale(); err != nil || n > 0 {
		tb.Logf("cleaned %d stale daemon(s) of killed runs (%v)", n, err)
	}
	d := lab.NewDaemon(node, binDir, tb.TempDir())
	unregister := testutil.OnSignal(func() { _ = d.Stop() })
	tb.Cleanup(func() {
		unregister()
		if err := d.Stop(); err != nil {
			tb.Errorf("stop daemon: %v", err)
		}
		if tb.Failed() {
			tb.Logf("hostqosd log:\n%s", d.Log())
		}
	})
	return d
}

// Start is New followed by Start with config as the policy file.
func Start(tb testing.TB, node *testbed.Node, binDir, config string) *lab.Daemon {
	tb.Helper()
	d := New(tb, node, binDir)
	if err := d.WriteConfig(config); err != nil {
		tb.Fatal(err)
	}
	if err := d.Start(); err != nil {
		tb.Fatal(fmt.Errorf("start daemon: %w", err))
	}
	return d
}
