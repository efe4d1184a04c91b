package rsvp

import (
	"net/netip"
	"slices"
	"testing"
	"time"
)

// View pages: walking the states a page at a time lists each once, in
// the order of session and sender, with the totals on every page.
func TestViewPages(t *testing.T) {
	n, _, _ := hostNode(t, Config{})
	now := time.Unix(1000, 0)
	const states = 25
	for i := range states {
		// Ports and senders out of order, so map order is not sorted order.
		sess := Session{Dest: addrHost, Proto: 17, Port: uint16(5000 + (i*7)%states)}
		src := netip.AddrFrom4([4]byte{198, 18, 0, byte(10 + i%3)})
		n.Handle(wire(t, pathMsg(sess, Filter{Src: src, Port: 4000}, addrPeer, 1000)), addrPeer, now)
	}
	var all []FlowKey
	for off := 0; off < states+10; off += 10 {
		pg := n.View(nil, off, 10)
		if pg.PathsTotal != states || pg.ResvsTotal != 0 {
			t.Fatalf("offset %d: totals %d, %d; want %d, 0", off, pg.PathsTotal, pg.ResvsTotal, states)
		}
		if want := min(10, max(states-off, 0)); len(pg.Paths) != want {
			t.Fatalf("offset %d: %d paths, want %d", off, len(pg.Paths), want)
		}
		for _, p := range pg.Paths {
			all = append(all, p.Key)
		}
	}
	if len(all) != states || !slices.IsSortedFunc(all, CompareKeys) || len(slices.CompactFunc(slices.Clone(all), func(a, b FlowKey) bool { return a == b })) != states {
		t.Fatalf("pages listed %d states %v; want each of %d once, in order", len(all), all, states)
	}
	mine := func(s Session) bool { return s.Port == 5003 }
	if pg := n.View(mine, 0, 0); pg.PathsTotal != 1 || len(pg.Paths) != 1 || pg.Paths[0].Key.Session.Port != 5003 {
		t.Errorf("one session's states: %+v", pg)
	}
}
