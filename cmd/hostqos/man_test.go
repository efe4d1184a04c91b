package main

import (
	"strings"
	"testing"

	"github.com/hostqos/hostqos/internal/manpage"
)

// TestManPages keeps the CLI's manual pages (packaging/man/hostqos, one per
// command: hostqos(8), hostqos-rule-add(8), …) what the command tree
// makes of them, so a changed command, flag or help text cannot leave
// them stale. `make man` (HOSTQOS_UPDATE_MAN=1) writes them.
func TestManPages(t *testing.T) {
	date, err := manpage.Date("../../packaging/debian/changelog")
	if err != nil {
		t.Fatal(err)
	}
	root := newRootCmd(newFactory(ioStreams{}))
	root.InitDefaultCompletionCmd() // Execute adds it; its pages say how to load completion
	pages, err := manpage.Tree(root, "8", date, "hostqosd(8)", "hostqos.toml(5)", "qsock(3)")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"hostqos.8", "hostqos-rule-add.8", "hostqos-completion-bash.8"} {
		if pages[want] == nil {
			t.Errorf("no page %s", want)
		}
	}
	diffs, err := manpage.Sync("../../packaging/man/hostqos", pages, manpage.Update())
	if err != nil {
		t.Fatal(err)
	}
	if len(diffs) > 0 && !manpage.Update() {
		t.Errorf("packaging/man/hostqos differs from the command tree; run make man and commit the result:\n%s", strings.Join(diffs, "\n"))
	}
}
