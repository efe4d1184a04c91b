// Package mounts reads the mount table of the caller's mount namespace
// (/proc/self/mountinfo): where a file system type is mounted, which mount
// holds a path, and the superblock device of a mount.
package mounts

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Mount is one line of the mount table:
//
//	36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue
type Mount struct {
	ID, Parent uint64
	// Dev is the superblock's device (sb->s_dev, fs/proc_namespace.c
	// show_mountinfo) in the kernel's internal encoding major<<20 | minor,
	// the one BPF programs read from i_sb->s_dev.
	Dev      uint32
	Root     string   // the mount's root within its file system
	Point    string   // mount point
	Optional []string // propagation tags, e.g. shared:1 master:2
	FSType   string
	Source   string
}

// Shared reports whether mounts and unmounts below this mount propagate
// to peers (a "shared:N" tag).
func (m Mount) Shared() bool {
	for _, o := range m.Optional {
		if strings.HasPrefix(o, "shared:") {
			return true
		}
	}
	return false
}

// ErrNotFound is the error of a look-up that matches no mount.
var ErrNotFound = errors.New("not in the mount table")

// Read returns the mount table of the caller's mount namespace, in order.
func Read() ([]Mount, error) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("read mount table: %w", err)
	}
	return Parse(string(data)), nil
}

// Parse parses mountinfo text; malformed lines are skipped.
func Parse(text string) []Mount {
	var out []Mount
	for _, line := range strings.Split(text, "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if !ok || len(f) < 6 || len(g) < 1 {
			continue
		}
		id, err1 := strconv.ParseUint(f[0], 10, 64)
		parent, err2 := strconv.ParseUint(f[1], 10, 64)
		dev, err3 := parseDev(f[2])
		if err1 != nil || err2 != nil || err3 != nil {
			continue
		}
		m := Mount{ID: id, Parent: parent, Dev: dev, Root: Unescape(f[3]), Point: Unescape(f[4]),
			Optional: f[6:], FSType: g[0]}
		if len(g) > 1 {
			m.Source = Unescape(g[1])
		}
		out = append(out, m)
	}
	return out
}

// parseDev turns "major:minor" into the kernel's internal encoding.
func parseDev(s string) (uint32, error) {
	maj, min, ok := strings.Cut(s, ":")
	if !ok {
		return 0, fmt.Errorf("device %q: want major:minor", s)
	}
	ma, err := strconv.ParseUint(maj, 10, 12)
	if err != nil {
		return 0, fmt.Errorf("device %q: %w", s, err)
	}
	mi, err := strconv.ParseUint(min, 10, 20)
	if err != nil {
		return 0, fmt.Errorf("device %q: %w", s, err)
	}
	return uint32(ma)<<20 | uint32(mi), nil
}

// Unescape decodes the octal escapes of the mount table (\040 for space).
func Unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// FirstOfType returns the first mount of file system type fstype; the
// first is the system's, later ones are usually bind mounts made for
// containers or tests.
func FirstOfType(table []Mount, fstype string) (Mount, error) {
	for _, m := range table {
		if m.FSType == fstype {
			return m, nil
		}
	}
	return Mount{}, fmt.Errorf("find %s mount: %w", fstype, ErrNotFound)
}

// FirstVisibleOfType returns the first mount of file system type fstype
// whose mount point leads to it: of reports the mount that holds a path
// (Of), so a mount hidden under a later one (on its point or on a parent
// of it) is skipped. Mounts whose point cannot be looked up are skipped
// too; when no mount of the type is visible, the error wraps ErrNotFound.
func FirstVisibleOfType(table []Mount, fstype string, of func(path string) (Mount, error)) (Mount, error) {
	for _, m := range table {
		if m.FSType != fstype {
			continue
		}
		if got, err := of(m.Point); err == nil && got.ID == m.ID {
			return m, nil
		}
	}
	return Mount{}, fmt.Errorf("find visible %s mount: %w", fstype, ErrNotFound)
}

// At returns the mount at point that is on top (the last one mounted
// there).
func At(table []Mount, point string) (Mount, error) {
	for i := len(table) - 1; i >= 0; i-- {
		if table[i].Point == point {
			return table[i], nil
		}
	}
	return Mount{}, fmt.Errorf("find mount at %s: %w", point, ErrNotFound)
}

// ByID returns the mount with the given id.
func ByID(table []Mount, id uint64) (Mount, error) {
	for _, m := range table {
		if m.ID == id {
			return m, nil
		}
	}
	return Mount{}, fmt.Errorf("find mount %d: %w", id, ErrNotFound)
}

// Of returns the mount that holds path (following symlinks), by the mount
// id the kernel gives the file.
func Of(path string) (Mount, error) {
	var stx unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, path, 0, unix.STATX_MNT_ID, &stx); err != nil {
		return Mount{}, &os.PathError{Op: "statx", Path: path, Err: err}
	}
	if stx.Mask&unix.STATX_MNT_ID == 0 {
		return Mount{}, fmt.Errorf("find mount of %s: the kernel gives no mount id", path)
	}
	table, err := Read()
	if err != nil {
		return Mount{}, err
	}
	m, err := ByID(table, stx.Mnt_id)
	if err != nil {
		return Mount{}, fmt.Errorf("find mount of %s: %w", path, err)
	}
	return m, nil
}
