package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestVersionFlags builds hostqosd and hostqos as `make build` does, with
// the Makefile's LDFLAGS for a given VERSION, and as plain `go build`
// does, and checks that --version prints that version, or "dev", and
// exits 0 before anything else (no root, no config, no daemon needed).
func TestVersionFlags(t *testing.T) {
	for _, tool := range []string{"go", "make"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s command", tool)
		}
	}
	const v = "9.9.9-versiontest"
	// The Makefile's own value of LDFLAGS for VERSION=v.
	mk := exec.Command("make", "-s", "--no-print-directory", "-f", "Makefile", "-f", "-", "VERSION="+v, "print-ldflags")
	mk.Dir = "../.."
	mk.Stdin = strings.NewReader("print-ldflags:\n\t@echo '$(LDFLAGS)'\n")
	ldflags, err := mk.Output()
	if err != nil {
		t.Fatalf("read LDFLAGS from the Makefile: %v", err)
	}
	dir := t.TempDir()
	for _, c := range []struct {
		pkg, bin, ldflags, want string
	}{
		{".", "hostqosd", strings.TrimSpace(string(ldflags)), "hostqosd " + v},
		{"../hostqos", "hostqos", strings.TrimSpace(string(ldflags)), "hostqos " + v},
		{".", "hostqosd-dev", "", "hostqosd dev"},
	} {
		bin := filepath.Join(dir, c.bin)
		build := exec.Command("go", "build", "-ldflags", c.ldflags, "-o", bin, c.pkg)
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("go build -ldflags %q %s: %v\n%s", c.ldflags, c.pkg, err, out)
		}
		out, err := exec.Command(bin, "--version").CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != c.want {
			t.Errorf("%s --version: %v, %q; want %q", c.bin, err, out, c.want)
		}
	}
}
