package daemon

import (
	"os"

	"golang.org/x/sys/unix"

	"github.com/hostqos/hostqos/internal/apps"
	"github.com/hostqos/hostqos/internal/datapath"
)

// tagExistingSockets gives an identity to inet sockets that were opened
// before the datapath was loaded (sockets born later are tagged by the
// sock_create program). It borrows each socket with pidfd_getfd, so the
// owning process is not disturbed. Sockets of other network namespaces are
// left alone.
func (d *Daemon) tagExistingSockets() {
	pids, err := apps.PIDs()
	if err != nil {
		d.log.Warn("tag existing sockets", "err", err)
		return
	}
	self := os.Getpid()
	tagged := 0
	for _, pid := range pids {
		if pid == self {
			continue
		}
		if ns, err := apps.NetnsOf(pid); err != nil || ns != d.netns {
			continue
		}
		fds, err := apps.SocketFDs(pid)
		if err != nil || len(fds) == 0 {
			continue
		}
		id, err := datapath.IdentityForPID(pid, d.cgRoot)
		if err != nil {
			continue
		}
		pidfd, err := unix.PidfdOpen(pid, 0)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			if d.tagOne(pidfd, fd, id) {
				tagged++
			}
		}
		unix.Close(pidfd)
	}
	d.mu.Lock()
	d.tagged += tagged
	dp := d.dp
	d.mu.Unlock()
	if tagged > 0 && dp != nil {
		// Flows of these sockets were classified without an identity.
		dp.Reevaluate()
	}
	d.log.Info("tagged existing sockets", "count", tagged)
}

func (d *Daemon) tagOne(pidfd, fd int, id datapath.Identity) bool {
	local, err := unix.PidfdGetfd(pidfd, fd, 0)
	if err != nil {
		return false
	}
	defer unix.Close(local)
	dom, err := unix.GetsockoptInt(local, unix.SOL_SOCKET, unix.SO_DOMAIN)
	if err != nil || (dom != unix.AF_INET && dom != unix.AF_INET6) {
		return false
	}
	d.mu.Lock()
	dp := d.dp
	d.mu.Unlock()
	if dp == nil {
		return false
	}
	ok, err := dp.TagSocket(local, id)
	return err == nil && ok
}
