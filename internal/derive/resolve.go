package derive

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/hostqos/hostqos/internal/cgroups"
	"github.com/hostqos/hostqos/internal/datapath"
	"github.com/hostqos/hostqos/internal/policy"
)

// Resolver resolves app selectors against the running system. The engine
// uses a SystemResolver; tests give a table.
type Resolver interface {
	// Exe turns an exe selector (a path or glob) into the kernel
	// identities of its files. An error says nothing about the files (out
	// of descriptors, an I/O error): the derive fails, so a re-resolution
	// keeps the last good rules.
	Exe(pattern string) (ExeResolution, error)
	// Unit finds the cgroups (relative to the cgroup2 root) of a systemd
	// unit; none when it is not running.
	Unit(unit string) ([]string, error)
	// Cgroup gives a cgroup's id and level; an error when it does not
	// exist.
	Cgroup(path string) (datapath.CgroupRef, error)
	// User resolves a user name or a numeric uid.
	User(name string) (uint32, error)
}

// SystemResolver resolves against this host's file systems: exe files by
// their kernel identity (one inotify instance serves a whole derive:
// closing one waits for an RCU grace period, which per exe rule made a
// 1,000-exe policy take seconds), units and cgroups under the cgroup2 root.
type SystemResolver struct {
	CgroupRoot string
	files      *datapath.FileIdentifier
}

// NewSystemResolver resolves against cgroup2 root cgRoot; Close releases
// what it opened.
func NewSystemResolver(cgRoot string) *SystemResolver { return &SystemResolver{CgroupRoot: cgRoot} }

// Close releases the file identifier, if one was opened.
func (r *SystemResolver) Close() {
	if r.files != nil {
		r.files.Close()
		r.files = nil
	}
}

// unitSearchDepth is how deep below the cgroup2 root a unit is looked for.
const unitSearchDepth = 6

// selectorReads counts the app selectors resolved against the file
// systems (an exe selector's files, a unit's cgroups); SelectorReads reads
// it. An idle daemon resolves none: the count is how a test and a
// benchmark see that.
var selectorReads atomic.Uint64

// SelectorReads is the number of exe and unit selectors resolved against
// the file systems since the process started.
func SelectorReads() uint64 { return selectorReads.Load() }

func (r *SystemResolver) Exe(pattern string) (ExeResolution, error) {
	selectorReads.Add(1)
	if r.files == nil {
		fi, err := datapath.NewFileIdentifier()
		if err != nil {
			return ExeResolution{}, fmt.Errorf("resolve exe %s: %w", pattern, err)
		}
		r.files = fi
	}
	return resolveExe(pattern, r.files)
}

func (r *SystemResolver) Unit(unit string) ([]string, error) {
	selectorReads.Add(1)
	return cgroups.FindUnit(r.CgroupRoot, unit, unitSearchDepth)
}

func (r *SystemResolver) Cgroup(path string) (datapath.CgroupRef, error) {
	ref, err := cgroups.Resolve(r.CgroupRoot, path)
	if err != nil {
		return datapath.CgroupRef{}, err
	}
	return datapath.CgroupRef{ID: ref.ID, Level: ref.Level}, nil
}

func (r *SystemResolver) User(name string) (uint32, error) { return policy.ResolveUser(name) }

// maxUnresolvedNotes bounds the files a rule's notes and warnings name one
// by one as having no kernel identity (a glob may match many).
const maxUnresolvedNotes = 5

// ExeResolution is what an exe selector resolved to.
type ExeResolution struct {
	IDs []datapath.FileID // kernel identities, sorted, without duplicates
	// Unresolved are files that exist but whose kernel identity could not
	// be read, each "path (reason)".
	Unresolved []string
	// NotFiles counts the paths the selector matched that are no regular
	// file (directories, mostly: a glob like /opt/app/* matches them too),
	// which no process can have as its executable; they are left out.
	NotFiles int
	// Shared is a resolved file whose file system numbers inodes per
	// subvolume or layer (stat(2) reports another device than the
	// superblock's), so that its kernel identity is not unique; "" if none.
	Shared string
}

// resolveExe turns a path or glob into the file identities the kernel
// gives the files (datapath.FileIDOf), which the datapath compares with
// task->mm->exe_file. Symlinks are followed: the kernel knows a process by
// the file it executes. Missing files are skipped; a failure that says
// nothing about the file (out of file descriptors or inotify watches) is
// an error, so that a re-resolution keeps the last good rules.
func resolveExe(pattern string, fi *datapath.FileIdentifier) (ExeResolution, error) {
	var res ExeResolution
	paths := []string{pattern}
	if strings.ContainsAny(pattern, "*?[") {
		m, err := globStrict(pattern)
		if err != nil {
			return res, fmt.Errorf("expand exe glob %s: %w", pattern, err)
		}
		paths = m
	}
	if len(paths) == 0 {
		return res, nil
	}
	seen := map[datapath.FileID]bool{}
	for _, p := range paths {
		// exec runs regular files only (symlinks followed); a directory's
		// identity would count as a file the rule matches and never
		// match. A path stat cannot read is left to FileID, which says
		// why.
		if st, err := os.Stat(p); err == nil && !st.Mode().IsRegular() {
			res.NotFiles++
			continue
		}
		id, err := fi.FileID(p)
		if err != nil {
			switch {
			case errors.Is(err, fs.ErrNotExist), errors.Is(err, unix.ENOTDIR):
				continue // no such file (now): a warning, not a failed change
			case errors.Is(err, unix.ELOOP), errors.Is(err, unix.ENAMETOOLONG), errors.Is(err, fs.ErrPermission):
				// Facts about the path: reported as unresolvable below.
			default:
				// Anything else (out of descriptors, watches or memory, an
				// I/O error) says nothing about the file: fail, so that a
				// re-resolution keeps the rule's last identities.
				return res, fmt.Errorf("resolve exe %s: %w", p, err)
			}
			var pe *fs.PathError
			if errors.As(err, &pe) {
				err = pe.Err
			}
			res.Unresolved = append(res.Unresolved, fmt.Sprintf("%s (%v)", p, err))
			continue
		}
		var st unix.Stat_t
		if res.Shared == "" && unix.Stat(p, &st) == nil && datapath.KernelDev(st.Dev) != id.Dev {
			res.Shared = p
		}
		if !seen[id] {
			seen[id] = true
			res.IDs = append(res.IDs, id)
		}
	}
	sort.Slice(res.IDs, func(i, j int) bool {
		if res.IDs[i].Dev != res.IDs[j].Dev {
			return res.IDs[i].Dev < res.IDs[j].Dev
		}
		return res.IDs[i].Ino < res.IDs[j].Ino
	})
	return res, nil
}

// globStrict is filepath.Glob that fails on a directory it cannot read
// for a reason other than its absence or its permissions (out of file
// descriptors, an I/O error): filepath.Glob skips such a directory, and a
// glob that silently matched nothing would let a re-resolution unmark the
// rule's programs on an error that proves nothing.
func globStrict(pattern string) ([]string, error) {
	if _, err := filepath.Match(pattern, ""); err != nil {
		return nil, err // a malformed pattern
	}
	if !strings.ContainsAny(pattern, "*?[\\") {
		if _, err := os.Lstat(pattern); err != nil {
			if ignorableDirErr(err) {
				return nil, nil
			}
			return nil, err
		}
		return []string{pattern}, nil
	}
	dir, file := filepath.Split(pattern)
	dir = filepath.Clean(dir)
	dirs := []string{dir}
	if dir != pattern && strings.ContainsAny(dir, "*?[\\") {
		var err error
		if dirs, err = globStrict(dir); err != nil {
			return nil, err
		}
	}
	var out []string
	for _, d := range dirs {
		entries, err := os.ReadDir(d)
		if err != nil {
			if ignorableDirErr(err) {
				continue
			}
			return nil, err
		}
		for _, e := range entries {
			if ok, _ := filepath.Match(file, e.Name()); ok {
				out = append(out, filepath.Join(d, e.Name()))
			}
		}
	}
	sort.Strings(out)
	return out, nil
}

// ignorableDirErr is an error that a glob may take as "nothing here".
func ignorableDirErr(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, fs.ErrPermission)
}
