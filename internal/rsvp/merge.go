package rsvp

import (
	"net/netip"
	"time"
)

// Merging and blockade state (RFC 2205 §2.2, §3.5) as they apply to a
// unicast session with fixed-filter or shared-explicit style: a node may
// hold, for one sender of a session, requests from more than one next hop
// (while a route changes, or from two interfaces toward the receiver).
// The node installs their least upper bound and sends that upstream.
//
// When a request is refused upstream (a ResvErr for admission control
// failure with flowspec Qe), the node keeps blockade state Qb = Qe for
// that sender for Kb·R. A request that Qb blockades — one not strictly
// smaller than Qb — is taken out of the merge, so the other next hops'
// smaller requests go on being reserved upstream (the second killer
// reservation problem, RFC 2205 §2.5). Where RFC 2205 keeps a blockaded
// request installed locally and leaves it to time out, a node here
// removes it and passes the ResvErr to its next hop, and while the
// blockade lasts it answers a blockaded request at once with the
// upstream node's refusal, without installing it: a refusal anywhere
// leaves nothing of that request on any hop, and a request that was just
// refused does not go upstream again until Kb·R has passed.

// Kb is the blockade multiplier: blockade state lives Kb·R after the
// ResvErr that made it (RFC 2205 §3.5 leaves Kb to the node).
const Kb = 2

// MaxNextHops bounds the next hops whose requests a node merges for one
// sender of a session; a request from one more is refused.
const MaxNextHops = 4

// request is one next hop's reservation request for a flow.
type request struct {
	hop     Hop
	fs      Flowspec
	refresh time.Duration
	expires time.Time
}

// blockade is the state a ResvErr for admission control failure leaves
// for a flow: its flowspec Qb, until when it lasts, and which node
// refused, with the error value (to answer blockaded requests with).
type blockade struct {
	qb    Flowspec
	until time.Time
	node  netip.Addr
	value uint16
}

// lub is the least upper bound of two flowspecs: the larger token bucket
// (r, b, p and M the larger, m the smaller) and, when either is
// guaranteed service, the guaranteed request with the larger R and the
// smaller slack S (RFC 2210 §3.2; RFC 2212 merges controlled load into
// guaranteed service).
func lub(a, b Flowspec) Flowspec {
	out := Flowspec{Service: a.Service, Tspec: Tspec{
		Rate:      max(a.Tspec.Rate, b.Tspec.Rate),
		Bucket:    max(a.Tspec.Bucket, b.Tspec.Bucket),
		Peak:      max(a.Tspec.Peak, b.Tspec.Peak),
		MinUnit:   min(a.Tspec.MinUnit, b.Tspec.MinUnit),
		MaxPacket: max(a.Tspec.MaxPacket, b.Tspec.MaxPacket),
	}}
	switch {
	case a.Service == ServiceGuaranteed && b.Service == ServiceGuaranteed:
		out.RspecRate, out.RspecSlack = max(a.RspecRate, b.RspecRate), min(a.RspecSlack, b.RspecSlack)
	case a.Service == ServiceGuaranteed:
		out.RspecRate, out.RspecSlack = a.RspecRate, a.RspecSlack
	case b.Service == ServiceGuaranteed:
		out.Service, out.RspecRate, out.RspecSlack = ServiceGuaranteed, b.RspecRate, b.RspecSlack
	}
	return out
}

// atLeast reports whether a asks for at least what b does in every
// component (the order lub is the least upper bound of).
func atLeast(a, b Flowspec) bool {
	if b.Service == ServiceGuaranteed && a.Service != ServiceGuaranteed {
		return false
	}
	ta, tb := a.Tspec, b.Tspec
	if ta.Rate < tb.Rate || ta.Bucket < tb.Bucket || ta.Peak < tb.Peak || ta.MinUnit > tb.MinUnit || ta.MaxPacket < tb.MaxPacket {
		return false
	}
	if b.Service == ServiceGuaranteed {
		return a.RspecRate >= b.RspecRate && a.RspecSlack <= b.RspecSlack
	}
	return true
}

// blockades reports whether blockade flowspec qb blockades request q: qb
// is not strictly greater than q (RFC 2205 §3.5), so q asks for as much
// as what was refused in some component.
func blockades(qb, q Flowspec) bool {
	return !(atLeast(qb, q) && qb != q)
}

// merged is the least upper bound of requests (at least one).
func merged(reqs []*request) Flowspec {
	fs := reqs[0].fs
	for _, r := range reqs[1:] {
		fs = lub(fs, r.fs)
	}
	return fs
}

// find is the index of next hop addr's request, or -1.
func (rs *resvState) find(addr netip.Addr) int {
	for i, r := range rs.reqs {
		if r.hop.Addr == addr {
			return i
		}
	}
	return -1
}

// originated reports whether this node asked for the reservation itself
// (the receiver) rather than holding next hops' requests.
func (rs *resvState) originated() bool { return len(rs.reqs) == 0 }

// blockedBy is the live blockade state of flow k that blockades request
// fs, if any; expired state is forgotten here.
func (n *Node) blockedBy(k FlowKey, fs Flowspec, now time.Time) (blockade, bool) {
	b, ok := n.blocks[k]
	if !ok {
		return blockade{}, false
	}
	if now.After(b.until) {
		delete(n.blocks, k)
		return blockade{}, false
	}
	return b, blockades(b.qb, fs)
}

// dropRequests removes the requests of flow k that drop selects. With
// none left, the reservation goes: torn down upstream (tear) or not (an
// upstream refusal already removed it there). With some left, their merge
// is installed and, when it shrank, sent upstream at once.
func (n *Node) dropRequests(k FlowKey, rs *resvState, drop func(*request) bool, event string, tear bool, now time.Time) []Out {
	var kept []*request
	for _, r := range rs.reqs {
		if !drop(r) {
			kept = append(kept, r)
		}
	}
	if len(kept) == 0 {
		if tear {
			return n.tearResvLocked(k, event)
		}
		n.cfg.Install.Remove(k)
		delete(n.resvs, k)
		return nil
	}
	rs.reqs = kept
	fs := merged(kept)
	if fs == rs.fs {
		return nil
	}
	if err := n.cfg.Install.Install(k, fs); err != nil {
		// Shrinking failed: the larger reservation stays installed (and is
		// what goes upstream) until the next change or refresh.
		return nil
	}
	rs.fs = fs
	ps := n.paths[k]
	if ps == nil {
		return nil
	}
	if ps.phop == nil {
		f := fs
		n.cfg.Upcall(Event{Kind: "resv", Key: k, Flowspec: &f})
		return nil
	}
	rs.next = now.Add(n.jitter())
	o, err := n.resvOut(k, rs, ps)
	if err != nil {
		return nil
	}
	return []Out{o}
}
