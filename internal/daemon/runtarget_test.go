package daemon

import (
	"errors"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestRunTargetCheck: the process a run moves is checked through a
// pidfd: alive, and every uid the caller's.
func TestRunTargetCheck(t *testing.T) {
	uid := uint32(os.Getuid())
	// The caller's own process, through the connection's peer pidfd.
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fds[0]), "peer")
	defer unix.Close(fds[1])
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	who := &peer{PID: os.Getpid(), UID: uid}
	tg, err := openRunTarget(c.(*net.UnixConn), who, os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if err := tg.Check(); err != nil {
		t.Errorf("own live process: %v", err)
	}
	tg.uid = uid + 1 // as if the process now acted as someone else
	var fb *forbidden
	if err := tg.Check(); !errors.As(err, &fb) || !strings.Contains(err.Error(), "no longer acts as") {
		t.Errorf("other identity: %v", err)
	}
	tg.Close()

	// A process that exits after its pidfd was taken, and one that is gone.
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	tg, err = openRunTarget(nil, &peer{PID: 1, UID: uid, Privileged: true}, pid)
	if err != nil {
		t.Fatal(err)
	}
	defer tg.Close()
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	var br *badRequest
	if err := tg.Check(); !errors.As(err, &br) || !strings.Contains(err.Error(), "has exited") {
		t.Errorf("exited process: %v", err)
	}
	if _, err := openRunTarget(nil, &peer{PID: 1, UID: uid, Privileged: true}, pid); !errors.As(err, &br) {
		t.Errorf("open exited process: %v", err)
	}
}
