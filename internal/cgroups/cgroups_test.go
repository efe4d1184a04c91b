package cgroups

import (
	"strings"
	"testing"
)

func TestParseMountinfo(t *testing.T) {
	in := `25 1 0:23 / /sys rw - sysfs sysfs rw
30 25 0:26 / /sys/fs/cgroup rw - tmpfs tmpfs rw
40 30 0:35 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw
41 30 0:36 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu
99 1 0:35 / /m rw - cgroup2 cgroup2 rw
`
	got, err := parseMountinfo(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if got != "/sys/fs/cgroup/unified" {
		t.Fatalf("root = %q", got)
	}
	if _, err := parseMountinfo(strings.NewReader("25 1 0:23 / /sys rw - sysfs sysfs rw\n")); err == nil {
		t.Fatal("want error without cgroup2")
	}
	if u := unescapeMount(`/mnt/my\040cg`); u != "/mnt/my cg" {
		t.Fatalf("unescape = %q", u)
	}
}

func TestResolveRoot(t *testing.T) {
	root, err := Root()
	if err != nil {
		t.Skip("no cgroup2 here:", err)
	}
	ref, err := Resolve(root, "/")
	if err != nil {
		t.Fatal(err)
	}
	if ref.Level != 0 || ref.ID == 0 {
		t.Fatalf("root ref = %+v", ref)
	}
	if _, err := Resolve(root, "/does-not-exist-hostqos"); err == nil {
		t.Fatal("want error for missing cgroup")
	}
}
