package cgroups

import (
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
