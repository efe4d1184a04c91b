package datapath

// This file is plain Go (no cilium/ebpf): it computes, from what
// apps.ProcessOf reads in /proc, the same identity the sock_create program
// records, for processes whose sockets were created before the datapath
// was loaded.

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/hostqos/hostqos/internal/apps"
	"github.com/hostqos/hostqos/internal/mounts"
)

// KernelDev converts a userspace dev_t (as stat(2) returns it) to the
// kernel's internal encoding used in struct super_block.s_dev:
// major<<20 | minor.
func KernelDev(dev uint64) uint32 {
	return unix.Major(dev)<<20 | unix.Minor(dev)
}

// FileIDOf returns the identity the kernel gives the file at path
// (following symlinks): the device of its inode's superblock (i_sb->s_dev)
// and its inode number (i_ino) — what the sock_create program reads from
// task->mm->exe_file. stat(2) is not asked: on btrfs it reports the
// subvolume's anonymous device and on overlayfs (layers on different file
// systems, no xino) a per-layer pseudo device, neither of which is s_dev.
// The kernel reports both numbers of an inotify watch in the watcher's
// fdinfo ("ino:%lx sdev:%x", fs/notify/fdinfo.c), and a watch on a path is
// on the inode the path resolves to, the one exec opens. A path that does
// not exist yields an error matching fs.ErrNotExist.
func FileIDOf(path string) (FileID, error) {
	r, err := NewFileIdentifier()
	if err != nil {
		return FileID{}, err
	}
	defer r.Close()
	return r.FileID(path)
}

// FileIdentifier asks the kernel for file identities (see FileIDOf); one
// serves many paths. It is not safe for concurrent use.
type FileIdentifier struct {
	fd int
}

// NewFileIdentifier opens an inotify instance for FileID.
func NewFileIdentifier() (*FileIdentifier, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("open inotify instance to identify files: %w", err)
	}
	return &FileIdentifier{fd: fd}, nil
}

// Close releases the inotify instance.
func (r *FileIdentifier) Close() error { return unix.Close(r.fd) }

// FileID returns the kernel identity of the file at path.
func (r *FileIdentifier) FileID(path string) (FileID, error) {
	// The mask only has to be valid: the watch lives for this call.
	wd, err := unix.InotifyAddWatch(r.fd, path, unix.IN_DELETE_SELF)
	if errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM) {
		// A watch needs read permission, which root may lack (NFS
		// with root_squash); the mount table does not.
		return FileIDFromMountTable(path)
	}
	if err != nil {
		return FileID{}, &os.PathError{Op: "watch", Path: path, Err: err}
	}
	defer unix.InotifyRmWatch(r.fd, uint32(wd))
	info, err := os.ReadFile(fmt.Sprintf("/proc/self/fdinfo/%d", r.fd))
	if err != nil {
		return FileID{}, fmt.Errorf("read inotify fdinfo for %s: %w", path, err)
	}
	id, ok := parseInotifyFdinfo(string(info), wd)
	if !ok {
		return FileID{}, fmt.Errorf("identify %s: the kernel's inotify fdinfo shows no ino/sdev for watch %d", path, wd)
	}
	return id, nil
}

// FileIDFromMountTable computes the kernel identity of the file at path
// without a watch: the inode number from statx (st_ino is i_ino for the
// files an exe can be, on btrfs and overlayfs too; only the device
// differs) and the superblock's device from the line of the file's mount
// in /proc/self/mountinfo, whose third field is sb->s_dev
// (fs/proc_namespace.c show_mountinfo). A path whose mount is not in this
// mount namespace's table is an error.
func FileIDFromMountTable(path string) (FileID, error) {
	var stx unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, path, 0, unix.STATX_INO|unix.STATX_MNT_ID, &stx); err != nil {
		return FileID{}, &os.PathError{Op: "statx", Path: path, Err: err}
	}
	if stx.Mask&unix.STATX_MNT_ID == 0 {
		return FileID{}, fmt.Errorf("identify %s: the kernel gives no mount id", path)
	}
	table, err := mounts.Read()
	if err != nil {
		return FileID{}, fmt.Errorf("identify %s: %w", path, err)
	}
	m, err := mounts.ByID(table, stx.Mnt_id)
	if err != nil {
		return FileID{}, fmt.Errorf("identify %s: its mount %d is not in this mount namespace's table", path, stx.Mnt_id)
	}
	return FileID{Dev: m.Dev, Ino: stx.Ino}, nil
}

// parseInotifyFdinfo finds the line of watch wd in an inotify fdinfo:
//
//	inotify wd:1 ino:1a2b sdev:2900029 mask:400 ignored_mask:0 fhandle-bytes:…
//
// All numbers are hexadecimal; sdev is the kernel's dev_t encoding
// (major<<20 | minor), the same the datapath reads.
func parseInotifyFdinfo(info string, wd int) (FileID, bool) {
	for _, line := range strings.Split(info, "\n") {
		rest, ok := strings.CutPrefix(line, "inotify ")
		if !ok {
			continue
		}
		var (
			id                   FileID
			gotWD, gotIno, gotDv bool
		)
		for _, f := range strings.Fields(rest) {
			k, v, ok := strings.Cut(f, ":")
			if !ok {
				continue
			}
			switch k {
			case "wd":
				n, err := strconv.ParseUint(v, 16, 31)
				gotWD = err == nil && int(n) == wd
			case "ino":
				n, err := strconv.ParseUint(v, 16, 64)
				id.Ino, gotIno = n, err == nil
			case "sdev":
				n, err := strconv.ParseUint(v, 16, 32)
				id.Dev, gotDv = uint32(n), err == nil
			}
		}
		if gotWD {
			return id, gotIno && gotDv
		}
	}
	return FileID{}, false
}

// IdentityForPID computes pid's app identity: what apps.ProcessOf reads
// from /proc (comm, real uid, cgroup path) in the kernel's terms, the
// executable as a file identity and the cgroup as the ids of its cgroup v2
// ancestors. cgroup2Root is where the cgroup2 hierarchy is mounted.
func IdentityForPID(pid int, cgroup2Root string) (Identity, error) {
	p, err := apps.ProcessOf(pid)
	if err != nil {
		return Identity{}, err
	}
	exe, err := FileIDOf(p.ExeLink)
	if err != nil {
		return Identity{}, fmt.Errorf("identify executable of pid %d: %w", pid, err)
	}
	cgs, err := CgroupAncestors(cgroup2Root, p.Cgroup)
	if err != nil {
		return Identity{}, fmt.Errorf("resolve cgroup of pid %d: %w", pid, err)
	}
	return Identity{PID: uint32(pid), UID: p.UID, Comm: p.Comm, Exe: exe, Cgroups: cgs}, nil
}

// CgroupAncestors returns the ids of the cgroup2 directories from the root
// down to rel (a path relative to the cgroup2 mount, as /proc/<pid>/cgroup
// shows it): result[0] is the root, result[len-1] the cgroup itself.
func CgroupAncestors(cgroup2Root, rel string) ([]uint64, error) {
	rel = strings.Trim(filepath.Clean("/"+rel), "/")
	var parts []string
	if rel != "" {
		parts = strings.Split(rel, "/")
	}
	ids := make([]uint64, 0, len(parts)+1)
	p := cgroup2Root
	for i := 0; i <= len(parts); i++ {
		if i > 0 {
			p = filepath.Join(p, parts[i-1])
		}
		var st unix.Stat_t
		if err := unix.Stat(p, &st); err != nil {
			return nil, fmt.Errorf("stat cgroup %s: %w", p, err)
		}
		ids = append(ids, st.Ino)
	}
	return ids, nil
}
