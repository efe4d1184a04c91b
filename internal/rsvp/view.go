package rsvp

import (
	"cmp"
	"net/netip"
	"slices"
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
	NextHops   int        // next hops whose requests are merged here (RFC 2205 §2.2)
	Originated bool       // this host asked for it (the receiver)
	Installed  bool       // admitted and installed here (sender host, router)
	Refresh    time.Duration
	Expires    time.Time // of received state
}

// Page is a part of a node's states as View reports it.
type Page struct {
	Paths      []PathView
	Resvs      []ResvView
	PathsTotal int // the path states that matched, before offset and limit
	ResvsTotal int // the reservation states that matched
}

// View reports the path and reservation states of the sessions for which
// want is true (nil: all), in the order of session and sender (CompareKeys):
// of each list, the first offset are skipped and then at most limit
// reported (0: no limit). The lock is held while the keys are collected
// and while the page's states are read, not while they are sorted.
func (n *Node) View(want func(Session) bool, offset, limit int) Page {
	n.mu.Lock()
	pk := make([]FlowKey, 0, len(n.paths))
	for k := range n.paths {
		if want == nil || want(k.Session) {
			pk = append(pk, k)
		}
	}
	rk := make([]FlowKey, 0, len(n.resvs))
	for k := range n.resvs {
		if want == nil || want(k.Session) {
			rk = append(rk, k)
		}
	}
	n.mu.Unlock()
	pg := Page{PathsTotal: len(pk), ResvsTotal: len(rk)}
	pk, rk = pageOf(pk, offset, limit), pageOf(rk, offset, limit)
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, k := range pk {
		ps := n.paths[k]
		if ps == nil {
			continue // gone meanwhile
		}
		v := PathView{Key: k, Tspec: ps.tspec, Originated: ps.phop == nil, Self: ps.self, Refresh: ps.refresh}
		if ps.phop != nil {
			v.PrevHop, v.Expires = ps.phop.Addr, ps.expires
		}
		pg.Paths = append(pg.Paths, v)
	}
	for _, k := range rk {
		rs := n.resvs[k]
		if rs == nil {
			continue
		}
		v := ResvView{Key: k, Flowspec: rs.fs, Style: rs.style, Originated: rs.originated(), Installed: !rs.originated(), Refresh: rs.refresh}
		if !rs.originated() {
			// The merge of the next hops' requests: the first hop's, and
			// the state lasts as long as the longest-lived request.
			v.NextHop, v.NextHops, v.Refresh = rs.reqs[0].hop.Addr, len(rs.reqs), rs.reqs[0].refresh
			for _, r := range rs.reqs {
				if r.expires.After(v.Expires) {
					v.Expires = r.expires
				}
			}
		}
		pg.Resvs = append(pg.Resvs, v)
	}
	return pg
}

// pageOf sorts keys and returns [offset, offset+limit) of them (limit 0:
// to the end).
func pageOf(keys []FlowKey, offset, limit int) []FlowKey {
	slices.SortFunc(keys, CompareKeys)
	if offset < 0 || offset >= len(keys) {
		return nil
	}
	keys = keys[offset:]
	if limit > 0 && len(keys) > limit {
		keys = keys[:limit]
	}
	return keys
}

// CompareKeys orders flows by session (destination, port, protocol,
// flags) and then sender (address, port).
func CompareKeys(a, b FlowKey) int {
	return cmp.Or(a.Session.Dest.Compare(b.Session.Dest), cmp.Compare(a.Session.Port, b.Session.Port),
		cmp.Compare(a.Session.Proto, b.Session.Proto), cmp.Compare(a.Session.Flags, b.Session.Flags),
		a.Sender.Src.Compare(b.Sender.Src), cmp.Compare(a.Sender.Port, b.Sender.Port))
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
	return rs != nil && rs.originated()
}
