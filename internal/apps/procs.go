// Package apps maps processes to their identity (executable, command name,
// user, cgroup) and their sockets. It reads /proc, off the packet path.
package apps

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"

	"github.com/hostqos/hostqos/internal/cgroups"
)

// PIDs lists the process ids in /proc.
func PIDs() ([]int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("list processes: %w", err)
	}
	var out []int
	for _, e := range entries {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, pid)
		}
	}
	return out, nil
}

// NetnsOf returns the inode of a process's network namespace.
func NetnsOf(pid int) (uint64, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(fmt.Sprintf("/proc/%d/ns/net", pid), &st); err != nil {
		return 0, fmt.Errorf("read netns of pid %d: %w", pid, err)
	}
	return st.Ino, nil
}

// SocketFDs lists the descriptors of a process that refer to sockets.
func SocketFDs(pid int) ([]int, error) {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("list fds of pid %d: %w", pid, err)
	}
	var out []int
	for _, e := range entries {
		target, err := os.Readlink(dir + "/" + e.Name())
		if err != nil || !strings.HasPrefix(target, "socket:[") {
			continue
		}
		if fd, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, fd)
		}
	}
	return out, nil
}

// Exe returns the path of a process's executable ("" when gone or hidden).
func Exe(pid int) string {
	p, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		return ""
	}
	return strings.TrimSuffix(p, " (deleted)")
}

// PeerGroups returns the real gid and supplementary groups of a process.
func PeerGroups(pid int) ([]uint32, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil, fmt.Errorf("read groups of pid %d: %w", pid, err)
	}
	var out []uint32
	for _, line := range strings.Split(string(data), "\n") {
		switch {
		case strings.HasPrefix(line, "Gid:"):
			f := strings.Fields(line)
			if len(f) > 1 {
				if g, err := strconv.ParseUint(f[1], 10, 32); err == nil {
					out = append(out, uint32(g))
				}
			}
		case strings.HasPrefix(line, "Groups:"):
			for _, g := range strings.Fields(strings.TrimPrefix(line, "Groups:")) {
				if v, err := strconv.ParseUint(g, 10, 32); err == nil {
					out = append(out, uint32(v))
				}
			}
		}
	}
	return out, nil
}

// Identity is what /proc/PID/status says about who a process is.
type Identity struct {
	UIDs  [4]uint32 // real, effective, saved set, filesystem
	State byte      // 'R', 'S', … 'Z' (zombie), 'X' (dead)
}

// Gone reports whether the process has ended (a zombie or dead).
func (id Identity) Gone() bool { return id.State == 'Z' || id.State == 'X' }

// AllUIDs reports whether the real, effective, saved and filesystem uids
// are all uid: the process acts as that user and nobody else.
func (id Identity) AllUIDs(uid uint32) bool {
	for _, u := range id.UIDs {
		if u != uid {
			return false
		}
	}
	return true
}

// IdentityOf reads a process's uids and state from /proc/PID/status. The
// PID may be reused once the process is gone: callers that hold a pidfd
// confirm it is still alive after reading.
func IdentityOf(pid int) (Identity, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return Identity{}, fmt.Errorf("read identity of pid %d: %w", pid, err)
	}
	id, err := parseIdentity(string(data))
	if err != nil {
		return Identity{}, fmt.Errorf("read identity of pid %d: %w", pid, err)
	}
	return id, nil
}

func parseIdentity(status string) (Identity, error) {
	var id Identity
	var haveUID, haveState bool
	for _, line := range strings.Split(status, "\n") {
		switch {
		case strings.HasPrefix(line, "State:"):
			f := strings.Fields(strings.TrimPrefix(line, "State:"))
			if len(f) > 0 && len(f[0]) == 1 {
				id.State, haveState = f[0][0], true
			}
		case strings.HasPrefix(line, "Uid:"):
			f := strings.Fields(strings.TrimPrefix(line, "Uid:"))
			if len(f) != 4 {
				return Identity{}, fmt.Errorf("malformed Uid line %q", line)
			}
			for i, s := range f {
				v, err := strconv.ParseUint(s, 10, 32)
				if err != nil {
					return Identity{}, fmt.Errorf("malformed Uid line %q", line)
				}
				id.UIDs[i] = uint32(v)
			}
			haveUID = true
		}
	}
	if !haveUID || !haveState {
		return Identity{}, fmt.Errorf("no State or Uid line")
	}
	return id, nil
}

// Process is what the app selectors of a rule (exe, comm, user, cgroup)
// look at in a process, read from /proc.
type Process struct {
	PID int
	// ExeLink is /proc/PID/exe. Identify the executable through the link,
	// not through its target: the target may be deleted, replaced or in
	// another mount namespace, while the link reaches the inode the
	// process runs.
	ExeLink string
	Comm    string // the task's command name, as the kernel keeps it
	UID     uint32 // real uid
	Cgroup  string // cgroup v2 path relative to the cgroup2 root, e.g. /system.slice/x.service
}

// ProcessOf reads pid's command name, real uid and cgroup v2 path. The PID
// may be reused once the process is gone: callers that must be sure act on
// a pidfd and check it is still alive afterwards.
func ProcessOf(pid int) (Process, error) {
	p := Process{PID: pid, ExeLink: fmt.Sprintf("/proc/%d/exe", pid)}
	comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	if err != nil {
		return Process{}, fmt.Errorf("read comm of pid %d: %w", pid, err)
	}
	p.Comm = strings.TrimSuffix(string(comm), "\n")
	id, err := IdentityOf(pid)
	if err != nil {
		return Process{}, err
	}
	p.UID = id.UIDs[0]
	if p.Cgroup, err = cgroups.OfPID(pid); err != nil {
		return Process{}, err
	}
	return p, nil
}
