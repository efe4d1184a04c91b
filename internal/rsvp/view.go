package rsvp

import (
	"net/netip"
	"sort"
	"time"
)

// PathView is one path state as Node.View reports it.
type PathView struct {
	Key        FlowKey
	Tspec      Tspec
	PrevHop    netip.Addr // invalid: originated here (this host sends)
	Originated bool       // this host is the sender
	Self       bool       // this host is the session's destination
	Refresh    time.Duration
	Expires    time.Time // of received state (zero for originated state)
}

// ResvView is one reservation state as Node.View reports it.
type ResvView struct {
	Key        FlowKey
	Flowspec   Flowspec
	Style      Style
	NextHop    netip.Addr // invalid: originated here (this host receives)
	Originated bool       // this host asked for it (the receiver)
	Installed  bool       // admitted and installed here (sender host, router)
	Refresh    time.Duration
	Expires    time.Time // of received state
}

// View reports the path and reservation states of the sessions for which
// want is true (nil: all), at most limit of each (0: no limit), ordered
// by session and sender.
func (n *Node) View(want func(Session) bool, limit int) ([]PathView, []ResvView) {
	n.mu.Lock()
	var paths []PathView
	for k, ps := range n.paths {
		if want != nil && !want(k.Session) {
			continue
		}
		v := PathView{Key: k, Tspec: ps.tspec, Originated: ps.phop == nil, Self: ps.self, Refresh: ps.refresh}
		if ps.phop != nil {
			v.PrevHop, v.Expires = ps.phop.Addr, ps.expires
		}
		paths = append(paths, v)
	}
	var resvs []ResvView
	for k, rs := range n.resvs {
		if want != nil && !want(k.Session) {
			continue
		}
		v := ResvView{Key: k, Flowspec: rs.fs, Style: rs.style, Originated: rs.nhop == nil, Installed: rs.nhop != nil, Refresh: rs.refresh}
		if rs.nhop != nil {
			v.NextHop, v.Expires = rs.nhop.Addr, rs.expires
		}
		resvs = append(resvs, v)
	}
	n.mu.Unlock()
	less := func(a, b FlowKey) bool { return a.String() < b.String() }
	sort.Slice(paths, func(i, j int) bool { return less(paths[i].Key, paths[j].Key) })
	sort.Slice(resvs, func(i, j int) bool { return less(resvs[i].Key, resvs[j].Key) })
	if limit > 0 && len(paths) > limit {
		paths = paths[:limit]
	}
	if limit > 0 && len(resvs) > limit {
		resvs = resvs[:limit]
	}
	return paths, resvs
}

// Senders are the senders whose Path to this host (the session's
// destination) arrived for sess.
func (n *Node) Senders(sess Session) []Filter {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []Filter
	for k, ps := range n.paths {
		if k.Session == sess && ps.self {
			out = append(out, k.Sender)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Src != out[j].Src {
			return out[i].Src.Less(out[j].Src)
		}
		return out[i].Port < out[j].Port
	})
	return out
}

// Reserved reports whether this receiver has a reservation request for k.
func (n *Node) Reserved(k FlowKey) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	rs := n.resvs[k]
	return rs != nil && rs.nhop == nil
}
