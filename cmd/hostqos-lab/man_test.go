package main

import (
	"strings"
	"testing"

	"github.com/hostqos/hostqos/internal/manpage"
)

// TestManPages keeps hostqos-lab's manual pages (packaging/man/hostqos-lab)
// what its command tree makes of them; `make man` writes them.
func TestManPages(t *testing.T) {
	date, err := manpage.Date("../../packaging/debian/changelog")
	if err != nil {
		t.Fatal(err)
	}
	pages, err := manpage.Tree(rootCmd, "8", date, "hostqos(8)", "hostqos-demo(8)", "hostqos-bench(8)")
	if err != nil {
		t.Fatal(err)
	}
	diffs, err := manpage.Sync("../../packaging/man/hostqos-lab", pages, manpage.Update())
	if err != nil {
		t.Fatal(err)
	}
	if len(diffs) > 0 && !manpage.Update() {
		t.Errorf("packaging/man/hostqos-lab differs from the command tree; run make man and commit the result:\n%s", strings.Join(diffs, "\n"))
	}
}
