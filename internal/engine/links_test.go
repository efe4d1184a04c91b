package engine

import (
	"fmt"
	"testing"

	"github.com/hostqos/hostqos/internal/store"

	"golang.org/x/sys/unix"

	"github.com/hostqos/hostqos/internal/host/fakehost"
	"github.com/hostqos/hostqos/internal/policy"
)

// linkEngine is an engine with one managed link "eth9", set up on ifindex
// 7, over kernel k.
func linkEngine(k *fakehost.FakeKernel) *Engine {
	p := &policy.Policy{Links: []policy.Link{{Name: "eth9"}}, Classes: policy.DefaultClasses()}
	return &Engine{log: quiet, k: k, eff: store.Merged{Policy: p}, links: map[string]int{"eth9": 7}}
}

// TestLookupFailureKeepsLink: a lookup that fails without saying that the
// interface is gone (here EMFILE, what a flood of API connections caused)
// neither counts as a change nor drops the link from the plan, so a rescan
// detaches nothing and removes no HTB tree. Only proof (gone) does.
func TestLookupFailureKeepsLink(t *testing.T) {
	emfile := fakehost.NewFakeKernel(t.TempDir())
	emfile.LookupErrs["eth9"] = fmt.Errorf("look up interface eth9: open socket: %w", unix.EMFILE)
	e := linkEngine(emfile)
	if e.linksChanged() {
		t.Error("a failed lookup counts as a change of the managed links")
	}
	if idx := e.ifindexesLocked(e.eff.Policy); len(idx) != 1 || idx["eth9"] != 7 {
		t.Errorf("failed lookup: ifindexes %v; want eth9 kept on ifindex 7", idx)
	}

	gone := fakehost.NewFakeKernel(t.TempDir())
	e = linkEngine(gone)
	if !e.linksChanged() {
		t.Error("an interface that is gone is no change")
	}
	if idx := e.ifindexesLocked(e.eff.Policy); len(idx) != 0 {
		t.Errorf("gone interface: ifindexes %v; want none (missing)", idx)
	}

	recreated := fakehost.NewFakeKernel(t.TempDir())
	recreated.Ifindexes["eth9"] = 8
	e = linkEngine(recreated)
	if !e.linksChanged() {
		t.Error("a recreated interface (new ifindex) is no change")
	}

	// Not set up yet and the lookup fails: nothing to keep, nothing to do.
	e = linkEngine(emfile)
	e.links = map[string]int{}
	if e.linksChanged() {
		t.Error("a failed lookup of a link not set up counts as a change")
	}
}
