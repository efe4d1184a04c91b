package main

import (
	"bytes"
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
