package daemon

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hostqos/hostqos/internal/datapath"
	"github.com/hostqos/hostqos/internal/policy"
)

// TestResolveExeSaysWhatItCannotResolve: a file that exists but has no
// kernel identity to read (here a symlink loop) is reported in the rule's
// notes and the warnings, and the rule matches no file; a missing file is
// "no such file yet"; a real file resolves to its kernel identity.
func TestResolveExeSaysWhatItCannotResolve(t *testing.T) {
	dir := t.TempDir()
	loopA, loopB := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	if err := os.Symlink(loopB, loopA); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(loopA, loopB); err != nil {
		t.Fatal(err)
	}
	real := filepath.Join(dir, "app")
	if err := os.WriteFile(real, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	want, err := datapath.FileIDOf(real)
	if err != nil {
		t.Fatal(err)
	}

	c := &compiled{Resolved: map[string][]string{}}
	var dr datapath.Rule
	if err := resolveApp(&dr, policy.Rule{Name: "loop", Exe: loopA}, "", c); err != nil {
		t.Fatal(err)
	}
	if len(dr.Exes) != 1 || dr.Exes[0] != never {
		t.Errorf("unresolvable exe: identities %v, want only the never-matching one", dr.Exes)
	}
	if n := strings.Join(c.Resolved["loop"], "; "); !strings.Contains(n, "no kernel identity") || !strings.Contains(n, loopA) {
		t.Errorf("notes %q do not say the file has no kernel identity", n)
	}
	if w := strings.Join(c.Warnings, "; "); !strings.Contains(w, `rule "loop"`) || !strings.Contains(w, "cannot be resolved") {
		t.Errorf("warnings %q do not name the unresolvable rule", w)
	}

	c = &compiled{Resolved: map[string][]string{}}
	dr = datapath.Rule{}
	if err := resolveApp(&dr, policy.Rule{Name: "glob", Exe: filepath.Join(dir, "*")}, "", c); err != nil {
		t.Fatal(err)
	}
	if len(dr.Exes) != 1 || dr.Exes[0] != want {
		t.Errorf("glob: identities %v, want [%v]", dr.Exes, want)
	}
	if n := strings.Join(c.Resolved["glob"], "; "); !strings.Contains(n, "exe: 1 file(s)") || !strings.Contains(n, "no kernel identity") {
		t.Errorf("glob notes %q", n)
	}

	c = &compiled{Resolved: map[string][]string{}}
	dr = datapath.Rule{}
	if err := resolveApp(&dr, policy.Rule{Name: "missing", Exe: filepath.Join(dir, "nope")}, "", c); err != nil {
		t.Fatal(err)
	}
	if n := strings.Join(c.Resolved["missing"], "; "); n != "exe: no such file yet" || len(c.Warnings) != 1 {
		t.Errorf("missing: notes %q warnings %q", n, c.Warnings)
	}
}
