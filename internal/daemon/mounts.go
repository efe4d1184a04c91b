package daemon

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/cgroups"
	"github.com/hostqos/hostqos/internal/mounts"
)

// The daemon needs a cgroup2 and a BPF file system. Where they are not
// mounted in its mount namespace — `ip netns exec` mounts a fresh /sys
// without either, containers may lack the host's mounts — it mounts them
// itself: cgroup2 in a place of its own next to the API socket
// (ownCgroupDir), bpffs at /sys/fs/bpf (datapath.Open). A mount made in a
// mount namespace of the daemon's own goes away with the daemon; for the
// bpffs this means the pinned datapath does too, which status says.

// ownCgroupDir is where this daemon mounts cgroup2 when none is mounted:
// next to its API socket, so each daemon (each socket) has its own.
func ownCgroupDir(cfg Config) string {
	return filepath.Join(filepath.Dir(filepath.Clean(cfg.Socket)), "cgroup2")
}

// findOrMountCgroup returns the cgroup2 mount point, mounting cgroup2 at
// ownCgroupDir when none is mounted. own says the mount point is that
// place (mounted now or by an earlier hostqosd with the same socket).
func findOrMountCgroup(cfg Config, log *slog.Logger) (root string, own bool, err error) {
	own0 := ownCgroupDir(cfg)
	root, err = cgroups.Root()
	if err == nil {
		return root, filepath.Clean(root) == own0, nil
	}
	if !errors.Is(err, cgroups.ErrNoCgroup2) {
		return "", false, err
	}
	if err := os.MkdirAll(own0, 0o755); err != nil {
		return "", false, fmt.Errorf("mount cgroup2 (none is mounted): create %s: %w", own0, err)
	}
	if err := unix.Mount("cgroup2", own0, "cgroup2", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return "", false, fmt.Errorf("mount cgroup2 at %s (none is mounted): %w", own0, err)
	}
	log.Info("no cgroup2 file system was mounted; mounted one", "path", own0)
	return own0, true, nil
}

// unmountOwnCgroup unmounts the cgroup2 mount at ownCgroupDir, if any, and
// removes the directory.
func unmountOwnCgroup(cfg Config) error {
	dir := ownCgroupDir(cfg)
	for {
		// The daemon may find it mounted more than once (a restarted
		// daemon in the same mount namespace mounts only if none is).
		err := unix.Unmount(dir, unix.MNT_DETACH)
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
			break // not a mount point (any more)
		}
		if err != nil {
			return fmt.Errorf("unmount own cgroup2 mount %s: %w", dir, err)
		}
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove %s: %w", dir, err)
	}
	return nil
}

// diesWithDaemon reports whether the mount at mountPoint, made by this
// process, lives only in a mount namespace of its own that ends with the
// daemon: the namespace is not that of PID 1 (or, where PID 1's cannot be
// read, of the parent: `ip netns exec` and `unshare -m` make a new one)
// and the mount did not propagate to a peer (no "shared:" tag).
func diesWithDaemon(mountPoint string) bool {
	self, err := os.Readlink("/proc/self/ns/mnt")
	if err != nil {
		return false
	}
	other := ""
	for _, pid := range []int{1, os.Getppid()} {
		if ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", pid)); err == nil {
			other = ns
			break
		}
	}
	if other == "" || other == self {
		return false
	}
	table, err := mounts.Read()
	if err != nil {
		return false
	}
	m, err := mounts.At(table, mountPoint)
	return err == nil && !m.Shared()
}

// mountStatus fills in status's mount fields and warnings.
func (d *Daemon) mountStatus(st *api.Status) {
	st.Daemon.CgroupMount, st.Daemon.CgroupMountOwn = d.cgRoot, d.cgOwn
	if m, err := mounts.Of(d.cfg.BPFFSDir); err == nil {
		st.Daemon.BPFFSMount = m.Point
	}
	st.Daemon.BPFFSMountOwn = d.bpffsOwn != ""
	st.Daemon.PinsDieWithDaemon = d.pinsDie
	st.Warnings = append(st.Warnings, d.mountWarnings()...)
}

// mountWarnings are status's words on the mounts the daemon made.
func (d *Daemon) mountWarnings() []string {
	var w []string
	if d.cgOwn {
		w = append(w, fmt.Sprintf("no cgroup2 file system was mounted here; hostqosd mounted one at %s (`hostqos down` unmounts it)", d.cgRoot))
	}
	if d.bpffsOwn != "" {
		w = append(w, fmt.Sprintf("no BPF file system was mounted here; hostqosd mounted one at %s for its pins", d.bpffsOwn))
	}
	if d.pinsDie {
		w = append(w, fmt.Sprintf("the pins in %s live in a mount namespace of hostqosd's own (as under `ip netns exec`): they go away when the daemon exits, and with them the datapath — traffic then flows unclassified and a restarted daemon starts afresh instead of adopting it; to keep them, mount bpffs where the host sees it (mount -t bpf bpf /sys/fs/bpf) and start hostqosd with `nsenter --net=/run/netns/NAME` instead", d.cfg.BPFFSDir))
	}
	return w
}
