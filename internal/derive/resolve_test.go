package derive

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

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

	res := NewSystemResolver("")
	defer res.Close()
	c := &Desired{Resolved: map[string][]string{}}
	var dr datapath.Rule
	if nothing, err := resolveApp(res, &dr, policy.Rule{Name: "loop", Exe: loopA}, nil, c, nil); err != nil {
		t.Fatal(err)
	} else if len(dr.Exes) != 0 || !nothing {
		t.Errorf("unresolvable exe: identities %v, matches nothing %v; want none, and nothing", dr.Exes, nothing)
	}
	if n := strings.Join(c.Resolved["loop"], "; "); !strings.Contains(n, "no kernel identity") || !strings.Contains(n, loopA) {
		t.Errorf("notes %q do not say the file has no kernel identity", n)
	}
	if w := strings.Join(c.Warnings, "; "); !strings.Contains(w, `rule "loop"`) || !strings.Contains(w, "cannot be resolved") {
		t.Errorf("warnings %q do not name the unresolvable rule", w)
	}

	c = &Desired{Resolved: map[string][]string{}}
	dr = datapath.Rule{}
	if _, err := resolveApp(res, &dr, policy.Rule{Name: "glob", Exe: filepath.Join(dir, "*")}, nil, c, nil); err != nil {
		t.Fatal(err)
	}
	if len(dr.Exes) != 1 || dr.Exes[0] != want {
		t.Errorf("glob: identities %v, want [%v]", dr.Exes, want)
	}
	if n := strings.Join(c.Resolved["glob"], "; "); !strings.Contains(n, "exe: 1 file(s)") || !strings.Contains(n, "no kernel identity") {
		t.Errorf("glob notes %q", n)
	}

	c = &Desired{Resolved: map[string][]string{}}
	dr = datapath.Rule{}
	if _, err := resolveApp(res, &dr, policy.Rule{Name: "missing", Exe: filepath.Join(dir, "nope")}, nil, c, nil); err != nil {
		t.Fatal(err)
	}
	if n := strings.Join(c.Resolved["missing"], "; "); n != "exe: no such file yet" || len(c.Warnings) != 1 {
		t.Errorf("missing: notes %q warnings %q", n, c.Warnings)
	}
}

// TestGlobStrict: globStrict matches what filepath.Glob matches, and where
// filepath.Glob would silently match nothing because a directory cannot be
// read for want of file descriptors, it fails, so that a re-resolution
// keeps the rule's last identities instead of unmarking its programs.
func TestGlobStrict(t *testing.T) {
	dir := t.TempDir()
	for _, p := range []string{"a/app1", "a/app2", "a/other", "b/app3", "c/x/app4"} {
		p = filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, pat := range []string{"*/app*", "a/app?", "[ab]/*", "*/x/*", "a/app1", "nope/*", "a/nope", "*"} {
		pat = filepath.Join(dir, pat)
		want, _ := filepath.Glob(pat)
		got, err := globStrict(pat)
		if err != nil {
			t.Errorf("globStrict(%s): %v", pat, err)
		}
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("globStrict(%s) = %v, filepath.Glob = %v", pat, got, want)
		}
	}
	if _, err := globStrict(filepath.Join(dir, "[")); err == nil {
		t.Error("malformed pattern accepted")
	}

	// Out of file descriptors: an error, not an empty match.
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	fds, _ := os.ReadDir("/proc/self/fd")
	low := lim
	low.Cur = uint64(len(fds))
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &low); err != nil {
		t.Fatal(err)
	}
	var filler []int // take every descriptor still free below the limit
	for {
		fd, err := unix.Open("/dev/null", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			break
		}
		filler = append(filler, fd)
	}
	got, err := globStrict(filepath.Join(dir, "a/app*"))
	for _, fd := range filler {
		unix.Close(fd)
	}
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	if err == nil || !errors.Is(err, unix.EMFILE) {
		t.Errorf("glob without free descriptors: %v, %v; want EMFILE", got, err)
	}
}

// TestResolveExeCountsFilesOnly: a glob that matches directories (as
// /home/*/.local/share/Steam/* does) counts and keeps only the files a
// process can execute; directories are left out and said so, and a glob
// of directories alone matches no file and warns.
func TestResolveExeCountsFilesOnly(t *testing.T) {
	dir := t.TempDir()
	steam := filepath.Join(dir, "Steam")
	for _, d := range []string{"ubuntu12_32", "ubuntu12_64", "steamapps", "logs"} {
		if err := os.MkdirAll(filepath.Join(steam, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"ubuntu12_32/steam", "ubuntu12_64/steamwebhelper", "steam.sh"} {
		if err := os.WriteFile(filepath.Join(steam, f), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	res := NewSystemResolver("")
	defer res.Close()
	for _, c := range []struct {
		glob, note, warning string
		files               int
	}{
		{"*", "exe: 1 file(s); 4 directories or other non-files left out", "", 1},
		{"ubuntu12_*", "exe: no file; 2 directories or other non-files left out", "matches 2 directories or other non-files and no file", 0},
		{"ubuntu12_*/steam", "exe: 1 file(s)", "", 1},
	} {
		d := &Desired{Resolved: map[string][]string{}}
		var dr datapath.Rule
		if _, err := resolveApp(res, &dr, policy.Rule{Name: "r", Exe: filepath.Join(steam, c.glob)}, nil, d, nil); err != nil {
			t.Fatal(err)
		}
		if n := strings.Join(d.Resolved["r"], "; "); n != c.note {
			t.Errorf("exe %s: notes %q, want %q", c.glob, n, c.note)
		}
		w := strings.Join(d.Warnings, "; ")
		if (c.warning == "") != (w == "") || !strings.Contains(w, c.warning) {
			t.Errorf("exe %s: warnings %q, want %q", c.glob, w, c.warning)
		}
		if got := len(dr.Exes); got != c.files {
			t.Errorf("exe %s: identities %v, want %d file(s)", c.glob, dr.Exes, c.files)
		}
	}
}
