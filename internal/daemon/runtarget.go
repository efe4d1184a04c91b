package daemon

import (
	"errors"
	"fmt"
	"io/fs"
	"net"

	"golang.org/x/sys/unix"

	"github.com/hostqos/hostqos/internal/apps"
)

// runTarget is the process a `hostqos run` moves, held by a pidfd taken
// when the request is handled, not by the PID number seen at connect
// time: the process may have exec'd a setuid program or ended since, and
// its PID may be someone else's by now.
type runTarget struct {
	pid int
	fd  int // pidfd
	// uid, when checkUID, is the uid all of the process's uids (real,
	// effective, saved, filesystem) must be: the caller's.
	uid      uint32
	checkUID bool
}

// errNoPeerPidfd: the kernel has no SO_PEERPIDFD (before 6.5).
var errNoPeerPidfd = errors.New("SO_PEERPIDFD not supported")

// openRunTarget takes a pidfd of the process to move. For the caller's
// own process it is the connection's peer (SO_PEERPIDFD: the very process
// that connected, wherever its PID number went since); an admin may name
// another process by PID.
func openRunTarget(conn *net.UnixConn, who *peer, pid int) (*runTarget, error) {
	t := &runTarget{pid: pid, fd: -1, uid: who.UID, checkUID: !who.Privileged || pid == who.PID}
	var err error
	if pid == who.PID && conn != nil {
		t.fd, err = peerPidfd(conn)
		if errors.Is(err, errNoPeerPidfd) {
			t.fd, err = unix.PidfdOpen(pid, 0)
		}
	} else {
		t.fd, err = unix.PidfdOpen(pid, 0)
	}
	if errors.Is(err, unix.ESRCH) {
		return nil, exited(pid)
	}
	if err != nil {
		return nil, fmt.Errorf("open pidfd of process %d: %w", pid, err)
	}
	return t, nil
}

func peerPidfd(conn *net.UnixConn) (int, error) {
	raw, err := conn.SyscallConn()
	if err != nil {
		return -1, fmt.Errorf("get peer pidfd: %w", err)
	}
	fd := -1
	cerr := raw.Control(func(s uintptr) {
		fd, err = unix.GetsockoptInt(int(s), unix.SOL_SOCKET, unix.SO_PEERPIDFD)
	})
	if cerr != nil {
		return -1, fmt.Errorf("get peer pidfd: %w", cerr)
	}
	if errors.Is(err, unix.ENOPROTOOPT) || errors.Is(err, unix.EINVAL) {
		return -1, errNoPeerPidfd
	}
	if err != nil {
		return -1, err
	}
	return fd, nil
}

func (t *runTarget) Close() {
	if t != nil && t.fd >= 0 {
		unix.Close(t.fd)
		t.fd = -1
	}
}

// Check confirms that the process is alive and, when checkUID, acts as the
// caller with every one of its uids. It reads /proc/PID/status, then asks
// the pidfd whether its process still lives: if it does, the PID was not
// reused, so what was read is that process's.
func (t *runTarget) Check() error {
	id, err := apps.IdentityOf(t.pid)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ESRCH) {
		return exited(t.pid)
	}
	if err != nil {
		return err
	}
	// A pidfd turns readable when its process exits. Polling it needs no
	// permission over the process, where a null signal to another user's
	// process would need CAP_KILL, which the service unit does not give.
	pfd := []unix.PollFd{{Fd: int32(t.fd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(pfd, 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("check process %d is alive: poll its pidfd: %w", t.pid, err)
		}
		if n > 0 {
			return exited(t.pid)
		}
		break
	}
	if id.Gone() {
		return exited(t.pid)
	}
	if t.checkUID && !id.AllUIDs(t.uid) {
		return &forbidden{Why: fmt.Sprintf("process %d no longer acts as uid %d alone (uids real %d, effective %d, saved %d, fs %d; it exec'd a setuid program?): a run moves only a process of the caller's own identity; start hostqos run directly",
			t.pid, t.uid, id.UIDs[0], id.UIDs[1], id.UIDs[2], id.UIDs[3])}
	}
	return nil
}

func exited(pid int) error {
	return &badRequest{Err: fmt.Errorf("process %d has exited; a run moves a live process (start hostqos run again)", pid)}
}

// PID is the number of the process (as seen when the request came).
func (t *runTarget) PID() int { return t.pid }
