package daemon

import (
	"path/filepath"
	"testing"
)

// TestExpectContainers: containers are expected (and their classifiers
// verified at start) only by a daemon in PID 1's network namespace on a
// host with a container runtime.
func TestExpectContainers(t *testing.T) {
	dir := t.TempDir()
	installed := []string{filepath.Join(dir, "none"), dir}
	absent := []string{filepath.Join(dir, "none")}
	for _, c := range []struct {
		netns, init uint64
		dirs        []string
		want        bool
	}{
		{7, 7, installed, true},
		{7, 7, absent, false},    // no runtime installed
		{8, 7, installed, false}, // a namespace of its own
		{8, 7, absent, false},
	} {
		if got := containersExpected(c.netns, c.init, c.dirs); got != c.want {
			t.Errorf("netns %d, PID 1's %d, dirs %v: expect containers %v, want %v", c.netns, c.init, c.dirs, got, c.want)
		}
	}
}
