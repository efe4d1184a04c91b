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
