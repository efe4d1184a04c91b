// Package cgroups finds the cgroup v2 hierarchy, resolves cgroup paths and
// systemd units to cgroup ids, and manages the cgroups hostqos creates for
// `hostqos run`.
package cgroups

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/hostqos/hostqos/internal/mounts"
)

// ErrNoCgroup2 is Root's error when no cgroup2 file system is mounted in
// the caller's mount namespace (`ip netns exec` remounts /sys without it).
var ErrNoCgroup2 = errors.New("find cgroup v2 mount: no cgroup2 filesystem is mounted (mount one with: mount -t cgroup2 none /sys/fs/cgroup/unified)")

// Root returns the mount point of the cgroup v2 (unified) hierarchy, read
// from the mount table. Hybrid layouts mount it below /sys/fs/cgroup (for
// example /sys/fs/cgroup/unified); pure v2 systems at /sys/fs/cgroup. The
// first cgroup2 mount that can be reached is the system's; later ones are
// usually bind mounts made for containers or tests. A mount hidden by a
// later one on top of it or of a parent (a mount namespace that mounted
// cgroup2 over a hybrid /sys/fs/cgroup: the old .../unified is still in the
// table) is skipped.
func Root() (string, error) {
	table, err := mounts.Read()
	if err != nil {
		return "", err
	}
	m, err := mounts.FirstVisibleOfType(table, "cgroup2", mounts.Of)
	if err != nil {
		return "", ErrNoCgroup2
	}
	return m.Point, nil
}

// Ref is a resolved cgroup: its id (inode of its directory) and its depth
// below the root (the root itself is level 0).
type Ref struct {
	Path  string // relative to the root, starting with "/"
	ID    uint64
	Level int
}

// Resolve returns the id and level of the cgroup at rel (relative to root).
func Resolve(root, rel string) (Ref, error) {
	rel = "/" + strings.Trim(filepath.Clean("/"+rel), "/")
	full := filepath.Join(root, rel)
	var st syscall.Stat_t
	if err := syscall.Stat(full, &st); err != nil {
		return Ref{}, fmt.Errorf("resolve cgroup %s: %w", rel, err)
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFDIR {
		return Ref{}, fmt.Errorf("resolve cgroup %s: not a directory", rel)
	}
	level := 0
	if rel != "/" {
		level = strings.Count(rel, "/")
	}
	return Ref{Path: rel, ID: st.Ino, Level: level}, nil
}

// FindUnit searches the hierarchy for the cgroup of a systemd unit (a
// directory named like the unit, e.g. nginx.service), breadth first and at
// most maxDepth levels deep. It returns every match.
//
// Only cgroups owned by the owner of the hierarchy's root (root) count, and
// the search does not enter others: a cgroup subtree delegated to a user
// (user@UID.service and below) belongs to that user, who could create a
// directory named like any unit there and so take an admin's rule for that
// unit. Such cgroups are matched by `user` or `cgroup` selectors instead.
func FindUnit(root, unit string, maxDepth int) ([]string, error) {
	var rootSt syscall.Stat_t
	if err := syscall.Stat(root, &rootSt); err != nil {
		return nil, fmt.Errorf("search cgroups for unit %s: %w", unit, err)
	}
	var found []string
	type item struct {
		rel   string
		depth int
	}
	queue := []item{{"/", 0}}
	for len(queue) > 0 {
		it := queue[0]
		queue = queue[1:]
		entries, err := os.ReadDir(filepath.Join(root, it.rel))
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) {
				continue
			}
			return nil, fmt.Errorf("search cgroups for unit %s: %w", unit, err)
		}
		for _, e := range entries {
			if !e.IsDir() {
				continue
			}
			if info, err := e.Info(); err != nil || info.Sys().(*syscall.Stat_t).Uid != rootSt.Uid {
				continue // gone meanwhile, or delegated to a user
			}
			rel := filepath.Join(it.rel, e.Name())
			if e.Name() == unit {
				found = append(found, rel)
				continue
			}
			if it.depth+1 < maxDepth {
				queue = append(queue, item{rel, it.depth + 1})
			}
		}
	}
	return found, nil
}

// OfPID returns the cgroup v2 path (relative to the root) of a process.
func OfPID(pid int) (string, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return "", fmt.Errorf("read cgroup of pid %d: %w", pid, err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "0::"); ok {
			return rest, nil
		}
	}
	return "", fmt.Errorf("read cgroup of pid %d: no cgroup v2 entry", pid)
}

// Create makes the cgroup rel (and its parents) if missing.
func Create(root, rel string) error {
	if err := os.MkdirAll(filepath.Join(root, rel), 0o755); err != nil {
		return fmt.Errorf("create cgroup %s: %w", rel, err)
	}
	return nil
}

// MovePID moves a whole process into the cgroup rel.
func MovePID(root, rel string, pid int) error {
	p := filepath.Join(root, rel, "cgroup.procs")
	if err := os.WriteFile(p, []byte(strconv.Itoa(pid)), 0); err != nil {
		return fmt.Errorf("move pid %d into cgroup %s: %w", pid, rel, err)
	}
	return nil
}

// Populated reports whether any process lives in rel or below.
func Populated(root, rel string) (bool, error) {
	data, err := os.ReadFile(filepath.Join(root, rel, "cgroup.events"))
	if err != nil {
		return false, fmt.Errorf("read events of cgroup %s: %w", rel, err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "populated "); ok {
			return v == "1", nil
		}
	}
	return false, nil
}

// MoveAll moves every process of cgroup from into cgroup to; when to is
// gone, into the root.
func MoveAll(root, from, to string) error {
	procs, err := os.ReadFile(filepath.Join(root, from, "cgroup.procs"))
	if err != nil {
		return fmt.Errorf("list processes of cgroup %s: %w", from, err)
	}
	dst := filepath.Join(root, to, "cgroup.procs")
	if _, err := os.Stat(dst); err != nil {
		dst = filepath.Join(root, "cgroup.procs")
	}
	var errs []error
	for _, pid := range strings.Fields(string(procs)) {
		if err := os.WriteFile(dst, []byte(pid), 0); err != nil && !errors.Is(err, syscall.ESRCH) {
			errs = append(errs, fmt.Errorf("move pid %s out of cgroup %s: %w", pid, from, err))
		}
	}
	return errors.Join(errs...)
}

// RemoveTree removes rel and every cgroup below it, deepest first. Processes
// still inside (callers move them to where they belong first) are moved to
// the root so that the removal cannot fail on a busy cgroup.
func RemoveTree(root, rel string) error {
	full := filepath.Join(root, rel)
	if _, err := os.Stat(full); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	var dirs []string
	err := filepath.WalkDir(full, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("list cgroup %s: %w", rel, err)
	}
	parentProcs := filepath.Join(root, "cgroup.procs")
	for i := len(dirs) - 1; i >= 0; i-- {
		if procs, err := os.ReadFile(filepath.Join(dirs[i], "cgroup.procs")); err == nil {
			for _, pid := range strings.Fields(string(procs)) {
				_ = os.WriteFile(parentProcs, []byte(pid), 0)
			}
		}
		if err := syscall.Rmdir(dirs[i]); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("remove cgroup %s: %w", dirs[i], err)
		}
	}
	return nil
}

// NetnsDir is the cgroup (relative to the root) under which the daemon of
// the network namespace with inode netnsIno makes its cgroups.
func NetnsDir(netnsIno uint64) string { return fmt.Sprintf("/hostqos/ns-%d", netnsIno) }

// RemoveNetnsDir removes the cgroups of one network namespace's daemon and
// the shared /hostqos parent when no other daemon uses it.
func RemoveNetnsDir(root string, netnsIno uint64) error {
	err := RemoveTree(root, NetnsDir(netnsIno))
	_ = syscall.Rmdir(filepath.Join(root, "hostqos")) // fails while other daemons have cgroups there
	return err
}
