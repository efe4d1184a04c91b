package daemontest_test

import (
	"errors"
	"os"
	"syscall"
	"testing"

	"github.com/hostqos/hostqos/internal/lab"
	"github.com/hostqos/hostqos/internal/testutil"
	"github.com/hostqos/hostqos/internal/testutil/daemontest"
)

// TestDaemonStoppedAtCleanup: a daemon started in a test's namespace
// answers, and is gone with its pins after the test.
func TestDaemonStoppedAtCleanup(t *testing.T) {
	testutil.NeedRoot(t)
	bin := t.TempDir()
	if err := lab.TestBinaries("../../..", bin); err != nil {
		t.Fatal(err)
	}
	var pid int
	var pins string
	t.Run("run", func(t *testing.T) {
		ns := testutil.NewNetNS(t)
		d := daemontest.Start(t, ns.Node, bin, "")
		if _, err := d.Status(); err != nil {
			t.Fatalf("status: %v", err)
		}
		pid, pins = d.PID(), d.BPFFS
	})
	if pid == 0 {
		t.Fatal("the daemon did not start")
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("hostqosd (pid %d) still there after the test: %v", pid, err)
	}
	if _, err := os.Stat(pins); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("pins %s left after the test (%v)", pins, err)
	}
}
