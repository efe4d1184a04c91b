package daemon

import (
	"fmt"
	"io"
	"log/slog"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/hostqos/hostqos/internal/policy"
)

// linkDaemon is a daemon with one managed link "eth9", set up on ifindex 7,
// whose interface lookups answer with lookup.
func linkDaemon(lookup lookupFunc) *Daemon {
	p := &policy.Policy{Links: []policy.Link{{Name: "eth9"}}, Classes: policy.DefaultClasses()}
	return &Daemon{
		log:    slog.New(slog.NewTextHandler(io.Discard, nil)),
		eff:    merged{Policy: p},
		links:  map[string]int{"eth9": 7},
		lookup: lookup,
	}
}

// TestLookupFailureKeepsLink: a lookup that fails without saying that the
// interface is gone (here EMFILE, what a flood of API connections caused)
// neither counts as a change nor drops the link from the plan, so a rescan
// detaches nothing and removes no HTB tree. Only proof (gone) does.
func TestLookupFailureKeepsLink(t *testing.T) {
	emfile := func(string) (int, bool, error) {
		return 0, false, fmt.Errorf("look up interface eth9: open socket: %w", unix.EMFILE)
	}
	d := linkDaemon(emfile)
	if d.linksChanged() {
		t.Error("a failed lookup counts as a change of the managed links")
	}
	plans, idx, missing, err := d.planLinks(d.eff.Policy, &compiled{})
	if err != nil {
		t.Fatal(err)
	}
	if len(missing) != 0 || idx["eth9"] != 7 || len(plans) != 1 || plans[0].ifindex != 7 {
		t.Errorf("failed lookup: plans %+v, ifindexes %v, missing %v; want eth9 kept on ifindex 7", plans, idx, missing)
	}

	gone := func(string) (int, bool, error) { return 0, true, nil }
	d = linkDaemon(gone)
	if !d.linksChanged() {
		t.Error("an interface that is gone is no change")
	}
	if _, idx, missing, _ := d.planLinks(d.eff.Policy, &compiled{}); len(missing) != 1 || len(idx) != 0 {
		t.Errorf("gone interface: ifindexes %v, missing %v; want it missing", idx, missing)
	}

	recreated := func(string) (int, bool, error) { return 8, false, nil }
	d = linkDaemon(recreated)
	if !d.linksChanged() {
		t.Error("a recreated interface (new ifindex) is no change")
	}

	// Not set up yet and the lookup fails: nothing to keep, nothing to do.
	d = linkDaemon(emfile)
	d.links = map[string]int{}
	if d.linksChanged() {
		t.Error("a failed lookup of a link not set up counts as a change")
	}
}

// TestLookupLink: the real lookup tells an existing interface from a
// missing one.
func TestLookupLink(t *testing.T) {
	ifindex, gone, err := lookupLink("lo")
	if err != nil || gone || ifindex <= 0 {
		t.Errorf("lookupLink(lo) = %d, %v, %v", ifindex, gone, err)
	}
	if _, gone, err := lookupLink("hqnosuch0"); err != nil || !gone {
		t.Errorf("lookupLink(hqnosuch0) = gone %v, %v; want gone", gone, err)
	}
}
