package datapath

// This file is plain Go (no cilium/ebpf): it computes, from /proc, the same
// identity the sock_create program records, for processes whose sockets
// were created before the datapath was loaded.

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/hostqos/hostqos/internal/cgroups"
)

// KernelDev converts a userspace dev_t (as stat(2) returns it) to the
// kernel's internal encoding used in struct super_block.s_dev:
// major<<20 | minor.
func KernelDev(dev uint64) uint32 {
	return unix.Major(dev)<<20 | unix.Minor(dev)
}

// FileIDOf returns the kernel file identity of path (following symlinks).
// Caveat: on filesystems whose stat(2) reports another device than the
// superblock (btrfs subvolumes, overlayfs) the identity will not match
// what the kernel sees in task->mm->exe_file.
func FileIDOf(path string) (FileID, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return FileID{}, fmt.Errorf("stat %s: %w", path, err)
	}
	return FileID{Dev: KernelDev(st.Dev), Ino: st.Ino}, nil
}

// IdentityForPID computes pid's app identity from /proc: executable file
// identity, comm, real uid and the ids of its cgroup v2 ancestors.
// cgroup2Root is where the cgroup2 hierarchy is mounted.
func IdentityForPID(pid int, cgroup2Root string) (Identity, error) {
	proc := filepath.Join("/proc", strconv.Itoa(pid))
	id := Identity{PID: uint32(pid)}

	exe, err := FileIDOf(filepath.Join(proc, "exe"))
	if err != nil {
		return Identity{}, fmt.Errorf("identify executable of pid %d: %w", pid, err)
	}
	id.Exe = exe

	comm, err := os.ReadFile(filepath.Join(proc, "comm"))
	if err != nil {
		return Identity{}, fmt.Errorf("read comm of pid %d: %w", pid, err)
	}
	id.Comm = strings.TrimSuffix(string(comm), "\n")

	status, err := os.ReadFile(filepath.Join(proc, "status"))
	if err != nil {
		return Identity{}, fmt.Errorf("read status of pid %d: %w", pid, err)
	}
	uidFound := false
	for _, line := range strings.Split(string(status), "\n") {
		if rest, ok := strings.CutPrefix(line, "Uid:"); ok {
			f := strings.Fields(rest)
			if len(f) == 0 {
				break
			}
			u, err := strconv.ParseUint(f[0], 10, 32)
			if err != nil {
				return Identity{}, fmt.Errorf("parse uid of pid %d: %w", pid, err)
			}
			id.UID = uint32(u)
			uidFound = true
			break
		}
	}
	if !uidFound {
		return Identity{}, fmt.Errorf("read uid of pid %d: no Uid line in status", pid)
	}

	cgPath, err := cgroups.OfPID(pid)
	if err != nil {
		return Identity{}, err
	}
	id.Cgroups, err = CgroupAncestors(cgroup2Root, cgPath)
	if err != nil {
		return Identity{}, fmt.Errorf("resolve cgroup of pid %d: %w", pid, err)
	}
	return id, nil
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
