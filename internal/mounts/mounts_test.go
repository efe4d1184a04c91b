package mounts

import (
	"errors"
	"os"
	"testing"
)

func TestParse(t *testing.T) {
	table := Parse(`25 1 0:23 / /sys rw - sysfs sysfs rw
30 25 0:26 / /sys/fs/cgroup rw - tmpfs tmpfs rw
40 30 0:35 / /sys/fs/cgroup/unified rw shared:7 - cgroup2 cgroup2 rw
41 30 0:36 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu
43 22 0:41 /sv /mnt/my\040sv rw,relatime master:1 - btrfs /dev/loop0 rw,subvol=/sv
99 1 0:35 / /m rw - cgroup2 cgroup2 rw
malformed line
22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw
`)
	if len(table) != 7 {
		t.Fatalf("%d mounts, want 7: %+v", len(table), table)
	}
	cg, err := FirstOfType(table, "cgroup2")
	if err != nil || cg.Point != "/sys/fs/cgroup/unified" || !cg.Shared() {
		t.Errorf("first cgroup2 mount: %+v %v", cg, err)
	}
	if _, err := FirstOfType(table, "bpf"); !errors.Is(err, ErrNotFound) {
		t.Errorf("bpf mount: %v, want ErrNotFound", err)
	}
	sv, err := ByID(table, 43)
	if err != nil || sv.Point != "/mnt/my sv" || sv.Dev != 41 || sv.Root != "/sv" || sv.Shared() || sv.Source != "/dev/loop0" {
		t.Errorf("mount 43: %+v %v", sv, err)
	}
	if root, _ := ByID(table, 22); root.Dev != 254<<20 {
		t.Errorf("mount 22: dev %#x, want 254:0", root.Dev)
	}
	if m, err := At(table, "/m"); err != nil || m.ID != 99 {
		t.Errorf("mount at /m: %+v %v", m, err)
	}
	if _, err := ByID(table, 4); !errors.Is(err, ErrNotFound) {
		t.Errorf("mount 4: %v", err)
	}
}

func TestOf(t *testing.T) {
	m, err := Of("/proc/self/status")
	if err != nil || m.FSType != "proc" {
		t.Errorf("mount of /proc/self/status: %+v %v", m, err)
	}
	if _, err := Of("/nonexistent/x"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing path: %v", err)
	}
}

// A namespace that mounted cgroup2 over a hybrid /sys/fs/cgroup still
// lists the hybrid .../unified mount first; it is hidden, so the one on
// top is the visible cgroup2 mount.
func TestFirstVisibleOfType(t *testing.T) {
	table := Parse(`30 25 0:26 / /sys/fs/cgroup rw - tmpfs tmpfs rw
40 30 0:35 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw
50 30 0:35 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw
`)
	top := func(path string) (Mount, error) { // what statx sees
		if path == "/sys/fs/cgroup" || path == "/sys/fs/cgroup/unified" {
			if path == "/sys/fs/cgroup/unified" {
				return Mount{}, os.ErrNotExist // no such directory in the top mount
			}
			return ByID(table, 50)
		}
		return Mount{}, os.ErrNotExist
	}
	m, err := FirstVisibleOfType(table, "cgroup2", top)
	if err != nil || m.ID != 50 {
		t.Errorf("visible cgroup2 mount: %+v %v, want id 50 at /sys/fs/cgroup", m, err)
	}
	hybrid := func(path string) (Mount, error) { return At(table[:2], path) }
	if m, err := FirstVisibleOfType(table[:2], "cgroup2", hybrid); err != nil || m.ID != 40 {
		t.Errorf("hybrid layout: %+v %v, want id 40", m, err)
	}
	if _, err := FirstVisibleOfType(table[:1], "cgroup2", hybrid); !errors.Is(err, ErrNotFound) {
		t.Errorf("no cgroup2 mount: %v, want ErrNotFound", err)
	}
}
