package apps

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// ErrSocketGone: the process has no socket with the cookie asked for (it
// closed it, or the process is gone).
var ErrSocketGone = errors.New("no such socket in the process")

// SetSendBuffer sets SO_SNDBUF of the socket with cookie cookie (SO_COOKIE)
// that process pid holds, to size (the kernel doubles it and caps it at
// net.core.wmem_max, as for the process's own setsockopt), and returns the
// value SO_SNDBUF had (as getsockopt reads it: doubled).
//
// It acts on the process through a pidfd: the process is pinned by
// pidfd_open, each socket descriptor is copied with pidfd_getfd, and only
// the socket whose cookie matches is changed — a cookie names one socket
// for the life of the system, so a reused PID or descriptor number never
// makes it touch another socket. The copies are closed before it returns,
// so the socket's life is still the process's. Needs CAP_SYS_PTRACE over
// the process (the daemon runs as root).
func SetSendBuffer(pid int, cookie uint64, size int) (old int, err error) {
	pfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		if errors.Is(err, unix.ESRCH) {
			return 0, fmt.Errorf("set send buffer of socket %d of pid %d: %w", cookie, pid, ErrSocketGone)
		}
		return 0, fmt.Errorf("set send buffer of socket %d of pid %d: pidfd_open: %w", cookie, pid, err)
	}
	defer unix.Close(pfd)
	fds, err := SocketFDs(pid)
	if err != nil {
		return 0, fmt.Errorf("set send buffer of socket %d: %w", cookie, err)
	}
	for _, fd := range fds {
		sfd, err := unix.PidfdGetfd(pfd, fd, 0)
		if err != nil {
			if errors.Is(err, unix.EBADF) {
				continue // closed since it was listed
			}
			return 0, fmt.Errorf("set send buffer of socket %d of pid %d: pidfd_getfd %d: %w", cookie, pid, fd, err)
		}
		c, err := unix.GetsockoptUint64(sfd, unix.SOL_SOCKET, unix.SO_COOKIE)
		if err != nil || c != cookie {
			unix.Close(sfd)
			continue
		}
		old, err = unix.GetsockoptInt(sfd, unix.SOL_SOCKET, unix.SO_SNDBUF)
		if err == nil {
			err = unix.SetsockoptInt(sfd, unix.SOL_SOCKET, unix.SO_SNDBUF, size)
		}
		unix.Close(sfd)
		if err != nil {
			return 0, fmt.Errorf("set send buffer of socket %d of pid %d: %w", cookie, pid, err)
		}
		return old, nil
	}
	return 0, fmt.Errorf("set send buffer of socket %d of pid %d: %w", cookie, pid, ErrSocketGone)
}
