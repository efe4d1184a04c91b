package engine

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// kernelAsks are the Kernel calls that read or write the links and the
// datapath's policy (what an idle engine must not make).
var kernelAsks = []string{"LookupLink", "Shaped", "LinkAttached", "Shape", "Unshape", "ApplyRules", "AttachLink"}

func asked(env *testEnv) int {
	n := 0
	for _, op := range kernelAsks {
		n += len(env.k.CallsOf(op))
	}
	return n
}

// dirWatcher is a SelectorWatcher that records what it is given to watch
// and cannot watch the directories in missing.
type dirWatcher struct {
	dirs    []string
	missing map[string]bool
}

func (w *dirWatcher) Watch(dirs []string) map[string]bool {
	w.dirs = slices.Clone(dirs)
	return w.missing
}

// TestRefreshIdle: with nothing changed, Refresh asks the kernel nothing
// and resolves no selector whose directory is watched; a wake (a netlink
// or directory event) makes it look at the links and derive again.
func TestRefreshIdle(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "app")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	env := newEnv(t, shapedConfig+"\n[[rule]]\nname = \"app\"\nexe = \""+exe+"\"\nclass = \"voice\"\n")
	e := env.start(t)
	w := &dirWatcher{}
	e.SetSelectorWatcher(w)
	if !slices.Equal(w.dirs, []string{dir}) {
		t.Fatalf("watched %v, want [%s]", w.dirs, dir)
	}
	e.Refresh() // the first audit
	env.k.Calls = nil
	for range 3 {
		e.Refresh()
		e.Tick()
	}
	if n := asked(env); n != 0 {
		t.Errorf("idle refreshes asked the kernel %d times: %v", n, env.k.Calls)
	}
	if len(e.rf.polled.Exe) != 0 {
		t.Errorf("a watched exe selector is polled: %v", e.rf.polled.Exe)
	}

	e.Wake()
	select {
	case <-e.Woken():
	default:
		t.Fatal("a wake did not signal Woken")
	}
	e.Refresh()
	if len(env.k.CallsOf("LookupLink")) == 0 {
		t.Error("a wake did not look at the links")
	}
}

// TestRefreshPollsUnwatched: a selector whose directory cannot be
// watched is resolved again at each refresh, and a change of what it
// resolves to derives again.
func TestRefreshPollsUnwatched(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "later")
	exe := filepath.Join(dir, "app")
	env := newEnv(t, shapedConfig+"\n[[rule]]\nname = \"app\"\nexe = \""+exe+"\"\nclass = \"voice\"\n")
	e := env.start(t)
	e.SetSelectorWatcher(&dirWatcher{missing: map[string]bool{dir: true}})
	e.Refresh()
	if _, ok := e.rf.polled.Exe[exe]; !ok {
		t.Fatalf("the unwatched selector is not polled: %v", e.rf.polled)
	}
	env.k.Calls = nil
	e.Refresh()
	if n := len(env.k.CallsOf("ApplyRules")); n != 0 {
		t.Errorf("nothing changed, yet the rules were applied %d times", n)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	e.Refresh()
	if n := len(env.k.CallsOf("ApplyRules")); n != 1 {
		t.Errorf("the file appeared; the rules were applied %d times, want 1", n)
	}
}
