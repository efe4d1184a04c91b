package cgroups

import (
	"os"
	"path/filepath"
	"testing"
)

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

// TestFindUnitIgnoresDelegatedSubtrees: a directory named like a unit in a
// subtree owned by a user (a delegated user@UID.service) does not count, so
// that a user cannot take an admin's unit rule; the system unit does.
func TestFindUnitIgnoresDelegatedSubtrees(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give a directory to another user")
	}
	root := t.TempDir()
	sys := filepath.Join(root, "system.slice", "nginx.service")
	user := filepath.Join(root, "user.slice", "user-1001.slice", "user@1001.service")
	fake := filepath.Join(user, "app.slice", "nginx.service")
	for _, d := range []string{sys, fake} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{user, filepath.Dir(fake), fake} {
		if err := os.Chown(d, 1001, 1001); err != nil {
			t.Fatal(err)
		}
	}
	got, err := FindUnit(root, "nginx.service", 6)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0] != "/system.slice/nginx.service" {
		t.Errorf("FindUnit = %v, want only /system.slice/nginx.service", got)
	}
}
