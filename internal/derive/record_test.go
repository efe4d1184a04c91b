package derive

import (
	"os"
	"path/filepath"
	"testing"
)

// TestRecorderMoved: what a derive resolved is recorded; resolving again
// tells a file that appeared from nothing changed.
func TestRecorderMoved(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "app")
	res := NewSystemResolver(t.TempDir())
	defer res.Close()
	rec := &Recorder{Resolver: res}
	if _, err := rec.Exe(exe); err != nil {
		t.Fatal(err)
	}
	if rec.Got.Empty() || rec.Got.Moved(res) {
		t.Fatalf("recorded %+v; moved with nothing changed", rec.Got)
	}
	if err := os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if !rec.Got.Moved(res) {
		t.Error("a file that appeared did not move the selector")
	}
	if d, ok := ExeWatchDir(exe); !ok || d != dir {
		t.Errorf("watch dir of %s: %q %v", exe, d, ok)
	}
	if _, ok := ExeWatchDir("/opt/*/bin/app"); ok {
		t.Error("a glob in the directory part has a watch dir")
	}
}
