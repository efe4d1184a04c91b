package daemon

import (
	"os"
	"syscall"
	"testing"
)

// TestExpectContainers: containers are expected (and their classifiers
// verified at start) only by a daemon in PID 1's network namespace on a
// host with a container runtime.
func TestExpectContainers(t *testing.T) {
	var st syscall.Stat_t
	if err := syscall.Stat("/proc/1/ns/net", &st); err != nil {
		t.Skipf("cannot read PID 1's network namespace: %v", err)
	}
	runtime := false
	for _, p := range runtimeDirs {
		if _, err := os.Stat(p); err == nil {
			runtime = true
		}
	}
	if got := (&Daemon{netns: st.Ino}).expectContainers(); got != runtime {
		t.Errorf("in PID 1's namespace, a runtime installed %v: expect containers %v", runtime, got)
	}
	if (&Daemon{netns: st.Ino + 1}).expectContainers() {
		t.Error("a daemon in a namespace of its own expects containers")
	}
}
