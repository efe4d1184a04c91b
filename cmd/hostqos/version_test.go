package main

import (
	"bytes"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestVersionFlag: `hostqos --version` prints what `hostqos version`
// prints, the version set at link time ("dev" in a test binary), and
// talks to no daemon. cmd/hostqosd's TestVersionFlags checks both
// binaries built with the Makefile's LDFLAGS.
func TestVersionFlag(t *testing.T) {
	out := func(args ...string) string {
		var o, e bytes.Buffer
		root := newRootCmd(newFactory(ioStreams{In: strings.NewReader(""), Out: &o, Err: &e}))
		root.SetArgs(args)
		if err := root.Execute(); err != nil {
			t.Fatalf("hostqos %s: %v\n%s", strings.Join(args, " "), err, e.String())
		}
		return o.String()
	}
	flag, cmd := out("--version"), out("version")
	if flag != "hostqos "+version+"\n" || flag != cmd {
		t.Errorf("hostqos --version = %q, hostqos version = %q; want both %q", flag, cmd, "hostqos "+version+"\n")
	}
}

// TestReadmeNamesGoVersion: README's install section names the Go version
// the go line of go.mod requires, so a reader with an older Go (Debian
// 12's is 1.19) knows before the build fails.
func TestReadmeNamesGoVersion(t *testing.T) {
	mod, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^go (\d+)\.(\d+)`).FindSubmatch(mod)
	if m == nil {
		t.Fatal("go.mod has no go line")
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("Go %s.%s or newer", m[1], m[2])
	if !strings.Contains(string(readme), want) {
		t.Errorf("README.md does not say %q (go.mod: go %s.%s)", want, m[1], m[2])
	}
}
