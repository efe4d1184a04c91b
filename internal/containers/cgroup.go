package containers

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/hostqos/hostqos/internal/cgroups"
	"github.com/hostqos/hostqos/internal/mounts"
)

// A candidate is a cgroup directory named like a runtime's container.
type candidate struct {
	rt  Runtime
	id  string
	v2  string // path relative to the cgroup2 root ("" = none there)
	dir string // absolute directory holding its cgroup.procs (v2 if any, else v1)
}

type key struct {
	rt Runtime
	id string
}

func isHexID(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// classify says whether the cgroup directory base (in a directory named
// parent) is a container's: the layouts of the runtimes' systemd and
// cgroupfs drivers. containerdNS reports whether parent/base is a task of
// a containerd namespace (containerd's cgroupfs layout /<namespace>/<id>
// takes any id).
func classify(parent, base string, containerdNS func(ns, id string) bool) (Runtime, string, bool) {
	if id, ok := strings.CutPrefix(base, "docker-"); ok {
		if id, ok = strings.CutSuffix(id, ".scope"); ok && isHexID(id) {
			return Docker, id, true
		}
		return "", "", false
	}
	if id, ok := strings.CutPrefix(base, "libpod-"); ok {
		// libpod-<id>.scope (systemd), libpod-<id> (cgroupfs under
		// /libpod_parent or machine.slice); libpod-conmon-<id> is the
		// runtime's monitor, not the container.
		id = strings.TrimSuffix(id, ".scope")
		if isHexID(id) {
			return Podman, id, true
		}
		return "", "", false
	}
	if id, ok := strings.CutPrefix(base, "cri-containerd-"); ok {
		if id, ok = strings.CutSuffix(id, ".scope"); ok && isHexID(id) {
			return Containerd, id, true
		}
		return "", "", false
	}
	if isHexID(base) {
		switch parent {
		case "docker":
			return Docker, base, true
		case "libpod_parent":
			return Podman, base, true
		}
		return Containerd, base, true // /k8s.io/<id>, /default/<id>, kubepods/.../pod<uid>/<id>
	}
	if containerdNS != nil && parent != "" && containerdNS(parent, base) {
		return Containerd, base, true
	}
	return "", "", false
}

// walk lists the container cgroups below root, breadth first, at most
// maxCgroupDepth levels and maxCgroupDirs directories deep; it does not
// enter a container's cgroup. dirs gets every other directory visited (the
// parents whose changes the watcher listens to).
//
// Only cgroups owned by the owner of the root count, and the walk does not
// enter others: a subtree delegated to a user (user@UID.service, rootless
// containers) is that user's, who could name a directory like a rootful
// runtime's container and have its rules.
func walk(root string, containerdNS func(ns, id string) bool, found func(c candidate, rel string), dirs func(abs string)) (truncated bool) {
	var rootSt syscall.Stat_t
	if err := syscall.Stat(root, &rootSt); err != nil {
		return false
	}
	type item struct {
		rel   string
		depth int
	}
	queue := []item{{"/", 0}}
	visited := 0
	for len(queue) > 0 {
		it := queue[0]
		queue = queue[1:]
		abs := filepath.Join(root, it.rel)
		entries, err := os.ReadDir(abs)
		if err != nil {
			continue // gone meanwhile
		}
		if dirs != nil {
			dirs(abs)
		}
		parent := filepath.Base(it.rel)
		if it.rel == "/" {
			parent = ""
		}
		for _, e := range entries {
			if !e.IsDir() {
				continue
			}
			if visited++; visited > maxCgroupDirs {
				return true
			}
			if info, err := e.Info(); err != nil || info.Sys().(*syscall.Stat_t).Uid != rootSt.Uid {
				continue // gone meanwhile, or delegated to a user
			}
			rel := filepath.Join(it.rel, e.Name())
			if rt, id, ok := classify(parent, e.Name(), containerdNS); ok {
				found(candidate{rt: rt, id: id, dir: filepath.Join(root, rel)}, rel)
				continue
			}
			if it.depth+1 < maxCgroupDepth {
				queue = append(queue, item{rel, it.depth + 1})
			}
		}
	}
	return false
}

// firstPID is a process of the cgroup at dir: the first of its
// cgroup.procs, else of a child's (a v2 cgroup with children holds no
// process itself). 0 if it has none.
func firstPID(dir string) int {
	if pid := readFirstPID(filepath.Join(dir, "cgroup.procs")); pid > 0 {
		return pid
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		if n++; n > 64 {
			break
		}
		if pid := firstPID1(filepath.Join(dir, e.Name())); pid > 0 {
			return pid
		}
	}
	return 0
}

func firstPID1(dir string) int { return readFirstPID(filepath.Join(dir, "cgroup.procs")) }

func readFirstPID(path string) int {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	var buf [64]byte
	n, err := io.ReadFull(f, buf[:])
	if n == 0 && err != nil {
		return 0
	}
	line, _, _ := bytes.Cut(buf[:n], []byte("\n"))
	if n == len(buf) && !bytes.Contains(buf[:n], []byte("\n")) {
		return 0
	}
	pid, err := strconv.Atoi(string(line))
	if err != nil || pid <= 0 {
		return 0
	}
	return pid
}

// findCgroup2 is the cgroup2 mount point ("" if there is none).
func findCgroup2() string {
	root, err := cgroups.Root()
	if err != nil {
		return ""
	}
	return root
}

// findCgroupV1 picks the v1 hierarchy to search: the pids one (every
// runtime joins it), else memory, else name=systemd, else the first. dir
// is either a hierarchy itself or the directory holding the hierarchies'
// mounts (/sys/fs/cgroup); "" = from the mount table.
func findCgroupV1(dir string) string {
	if dir == "-" {
		return ""
	}
	if dir != "" {
		if _, err := os.Stat(filepath.Join(dir, "cgroup.procs")); err == nil {
			return dir
		}
		for _, sub := range []string{"pids", "memory", "systemd", "cpu"} {
			if _, err := os.Stat(filepath.Join(dir, sub, "cgroup.procs")); err == nil {
				return filepath.Join(dir, sub)
			}
		}
		return ""
	}
	table, err := mounts.Read()
	if err != nil {
		return ""
	}
	best, bestRank := "", 99
	for _, m := range table {
		if m.FSType != "cgroup" {
			continue
		}
		// The mount table here has no super options: go by the mount
		// point's name (/sys/fs/cgroup/pids, .../memory, .../systemd).
		rank := 4
		for i, name := range []string{"pids", "memory", "systemd"} {
			if slices.Contains(strings.Split(filepath.Base(m.Point), ","), name) {
				rank = min(rank, i)
			}
		}
		if rank < bestRank {
			best, bestRank = m.Point, rank
		}
	}
	return best
}

var errNoCgroups = errors.New("find containers: neither a cgroup2 nor a cgroup v1 hierarchy is mounted")
