package rsvp

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"slices"
	"sync"
	"time"
)

// K is the number of refresh messages that may be lost before state times
// out (RFC 2205 §3.7).
const K = 3

// Lifetime is the local state lifetime for a refresh period r announced in
// TIME_VALUES: L ≥ (K + 0.5) · 1.5 · R (RFC 2205 §3.7).
func Lifetime(r time.Duration) time.Duration {
	return time.Duration(float64(r) * (K + 0.5) * 1.5)
}

// DefaultRefresh is the default refresh period R.
const DefaultRefresh = 30 * time.Second

// MaxState bounds the path states of one node (a Path beyond it is
// dropped and counted, nothing stored).
const MaxState = 65536

// PeerRefreshFactor caps the refresh period a received TIME_VALUES may
// ask: at most this many times the node's own R, and never below
// DefaultRefresh (so a peer on RFC 2205's default always works). A peer's
// state then lives at most Lifetime(4 R) = 21 R after its last refresh,
// however long a period the message names (2^32-1 ms would be 261 days).
// A peer whose R is up to the cap keeps its state through K lost
// refreshes; one up to 3.5 times the cap still keeps it while nothing is
// lost (its refreshes come at most 1.5 R_peer apart).
const PeerRefreshFactor = 4

// FlowKey names one sender of one session: the unit a reservation is
// installed for (fixed-filter; a shared-explicit flowspec is installed for
// each of its filters).
type FlowKey struct {
	Session Session
	Sender  Filter
}

func (k FlowKey) String() string {
	return fmt.Sprintf("%s:%d/%d from %s:%d", k.Session.Dest, k.Session.Port, k.Session.Proto, k.Sender.Src, k.Sender.Port)
}

// Installer is how a node admits and installs a reservation in its own
// datapath: the engine's reservation objects, on the sender host's link or
// a router's outgoing link toward the receiver. Install is called again
// with a changed flowspec; it must leave nothing installed when it fails.
type Installer interface {
	Install(k FlowKey, fs Flowspec) error
	Remove(k FlowKey)
}

// AdmissionError is what Install returns when admission refuses: the
// ResvErr carries error code 1 with Value (RFC 2210: 2 bandwidth
// unavailable, 3 MTU too big, 1 delay bound).
type AdmissionError struct {
	Value  uint16
	Reason string
}

func (e *AdmissionError) Error() string { return e.Reason }

// Event is an upcall to applications (RAPI-like): what arrived or changed.
type Event struct {
	Kind     string // path, resv, path-error, resv-error, confirm, path-timeout, resv-timeout, path-tear, resv-tear
	Key      FlowKey
	Tspec    *Tspec
	Flowspec *Flowspec
	Node     netip.Addr // the node that reported an error or confirmed
	Code     uint8
	Value    uint16
	Reason   string // local admission reason (on the refusing node)
}

// Out is a message a node sends: To is the session destination (Path,
// PathTear: routed, with Router Alert) or the neighbour / receiver.
type Out struct {
	To    netip.Addr
	Msg   *Message
	Alert bool
}

// Config of a node.
type Config struct {
	// Local reports this node's address on the interface toward dst and
	// whether dst is this node (the receiver).
	Local   func(dst netip.Addr) (addr netip.Addr, self bool, err error)
	Install Installer
	Upcall  func(Event)
	Refresh time.Duration // R of the state this node originates (DefaultRefresh if 0)
	TTL     uint8         // Send_TTL of originated messages (64 if 0)
	Rand    *rand.Rand    // refresh jitter (seeded randomly if nil)
	// Router makes the node an RSVP router: it keeps the path state of
	// sessions passing through and installs their reservations. A host
	// (false) keeps path state only for its own senders and for sessions
	// addressed to it, and installs reservations only for its own senders.
	Router bool
	// MaxPerHop and MaxPerSource bound the path states received from one
	// previous hop (the RSVP_HOP address of the Paths) and from one source
	// address (the IP source of the packets that carried them); a new
	// state beyond either is dropped and counted. 0: MaxState.
	MaxPerHop, MaxPerSource int
	// Log gets what a remote party was refused, at most one line per
	// reason a minute (nil: not logged; the counters count it all).
	Log *slog.Logger
}

// Counters are the well-formed messages a node refused, by reason.
type Counters struct {
	Dropped    uint64 // meaningless here: no path state, a looped Path, over MaxState
	NotHere    uint64 // a host's: a Path of a session it neither sends nor receives
	OverHop    uint64 // a new path state over its previous hop's cap (MaxPerHop)
	OverSource uint64 // a new path state over its source address's cap (MaxPerSource)
	BadTear    uint64 // a PathTear, ResvTear or ResvErr not from the hop that holds the state
	NoRoute    uint64 // a ResvErr not sent: no route back to the hop that asked
	Blockaded  uint64 // a Resv answered from blockade state: refused upstream within Kb·R
	OverNhop   uint64 // a Resv from one next hop more than MaxNextHops for its flow
}

// Node is one RSVP node's soft state: a sender host, a receiver host or a
// router — which one follows from the messages and calls it sees. Methods
// return the messages to send; the caller sends them. Safe for concurrent use.
type Node struct {
	cfg   Config
	mu    sync.Mutex
	paths map[FlowKey]*pathState
	resvs map[FlowKey]*resvState
	// blocks is the blockade state of flows refused upstream (merge.go);
	// at most one per path state, forgotten with it.
	blocks map[FlowKey]blockade
	// deferRemove: a torn-down reservation's local removal waits in
	// removals until the messages of the same step are sent
	// (RemoveDeferred), so a ResvTear goes upstream before this hop's own
	// engine change instead of after it (RFC 2205 does not order the two).
	deferRemove bool
	removals    []FlowKey
	// perHop and perSrc count the received path states of each previous
	// hop and source address (for MaxPerHop, MaxPerSource).
	perHop, perSrc map[netip.Addr]int
	count          Counters
	notes          noteLog
}

// DeferRemovals makes the node hold local removals until RemoveDeferred
// (the Agent calls it after sending each step's messages).
func (n *Node) DeferRemovals() {
	n.mu.Lock()
	n.deferRemove = true
	n.mu.Unlock()
}

// RemoveDeferred removes the reservations torn down since the last call,
// but not those reserved again meanwhile.
func (n *Node) RemoveDeferred() {
	n.mu.Lock()
	defer n.mu.Unlock()
	ks := n.removals
	n.removals = nil
	for _, k := range ks {
		if n.resvs[k] == nil {
			n.cfg.Install.Remove(k)
		}
	}
}

type pathState struct {
	tspec   Tspec
	phop    *Hop       // nil: originated here (sender host)
	from    netip.Addr // received state: the IP source of the Path (MaxPerSource)
	self    bool       // this node is the session's destination
	refresh time.Duration
	expires time.Time // of received state
	// next refresh this node sends: of originated state, and (a router)
	// of the state it forwards downstream, with ttl
	next time.Time
	ttl  uint8
}

type resvState struct {
	// fs is the receiver's own request (originated here), or the merge
	// of the next hops' requests: what is installed here and sent
	// upstream.
	fs      Flowspec
	style   Style
	reqs    []*request    // the next hops' requests; none: originated here (receiver host)
	confirm netip.Addr    // asked in the next message upstream
	refresh time.Duration // of originated state (the node's own R)
	next    time.Time
	filters []Filter // SE: the shared group (for forwarding)
}

// NewNode makes a node.
func NewNode(cfg Config) *Node {
	if cfg.Refresh <= 0 {
		cfg.Refresh = DefaultRefresh
	}
	if cfg.TTL == 0 {
		cfg.TTL = 64
	}
	if cfg.Rand == nil {
		cfg.Rand = rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	}
	if cfg.Upcall == nil {
		cfg.Upcall = func(Event) {}
	}
	if cfg.MaxPerHop <= 0 {
		cfg.MaxPerHop = MaxState
	}
	if cfg.MaxPerSource <= 0 {
		cfg.MaxPerSource = MaxState
	}
	return &Node{cfg: cfg, paths: map[FlowKey]*pathState{}, resvs: map[FlowKey]*resvState{},
		blocks: map[FlowKey]blockade{}, perHop: map[netip.Addr]int{}, perSrc: map[netip.Addr]int{}}
}

// MaxPeerRefresh is the longest refresh period this node takes from a
// received TIME_VALUES (PeerRefreshFactor).
func (n *Node) MaxPeerRefresh() time.Duration {
	return max(PeerRefreshFactor*n.cfg.Refresh, DefaultRefresh)
}

// peerRefresh is the refresh period R of received state: the message's,
// capped at MaxPeerRefresh.
func (n *Node) peerRefresh(ms uint32) time.Duration {
	return min(time.Duration(ms)*time.Millisecond, n.MaxPeerRefresh())
}

// Counters reports what the node refused, by reason.
func (n *Node) Counters() Counters {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.count
}

// addPath stores path state and counts received state against its
// previous hop and source; delPath forgets state (received or originated).
func (n *Node) addPath(k FlowKey, ps *pathState) {
	n.paths[k] = ps
	n.account(ps, 1)
}

func (n *Node) delPath(k FlowKey) {
	if ps := n.paths[k]; ps != nil {
		delete(n.paths, k)
		delete(n.blocks, k)
		n.account(ps, -1)
	}
}

// account adds d (1 or -1) to the counts of the previous hop and source
// of received state ps (MaxPerHop, MaxPerSource).
func (n *Node) account(ps *pathState, d int) {
	if ps.phop == nil {
		return
	}
	bump(n.perHop, ps.phop.Addr, d)
	if ps.from.IsValid() {
		bump(n.perSrc, ps.from, d)
	}
}

func bump(m map[netip.Addr]int, a netip.Addr, d int) {
	if m[a] += d; m[a] <= 0 {
		delete(m, a)
	}
}

// jitter is the next refresh interval: uniform in [0.5 R, 1.5 R] (§3.7).
func (n *Node) jitter() time.Duration {
	r := n.cfg.Refresh
	return r/2 + time.Duration(n.cfg.Rand.Int64N(int64(r)+1))
}

func (n *Node) hop(dst netip.Addr) (*Hop, bool, error) {
	a, self, err := n.cfg.Local(dst)
	if err != nil {
		return nil, false, fmt.Errorf("find the local address toward %s: %w", dst, err)
	}
	return &Hop{Addr: a}, self, nil
}

// Sender announces (or changes) a sender of a session on this host: a Path
// now and every R.
func (n *Node) Sender(k FlowKey, t Tspec, now time.Time) ([]Out, error) {
	if err := t.Validate(); err != nil {
		return nil, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	ps := n.paths[k]
	if ps == nil && len(n.paths) >= MaxState {
		return nil, fmt.Errorf("add sender %s: %d path states, the most a node keeps", k, MaxState)
	}
	if ps != nil && ps.phop != nil {
		n.delPath(k) // received state of the same key: this host's own sender takes it over
		ps = nil
	}
	if ps == nil {
		ps = &pathState{}
		n.addPath(k, ps)
	}
	ps.tspec, ps.phop, ps.refresh = t, nil, n.cfg.Refresh
	ps.next = now.Add(n.jitter())
	o, err := n.pathOut(k, ps, n.cfg.TTL)
	if err != nil {
		n.delPath(k)
		return nil, err
	}
	return []Out{o}, nil
}

func (n *Node) pathOut(k FlowKey, ps *pathState, ttl uint8) (Out, error) {
	h, _, err := n.hop(k.Session.Dest)
	if err != nil {
		return Out{}, err
	}
	t := ps.tspec
	m := &Message{Type: Path, TTL: ttl, Session: k.Session, Hop: h, Refresh: uint32(n.cfg.Refresh / time.Millisecond),
		Sender: &Sender{Template: k.Sender, Tspec: &t}}
	return Out{To: k.Session.Dest, Msg: m, Alert: true}, nil
}

// Reserve makes (or changes) this receiver's reservation for the senders
// in filters: style FF (one reservation each) or SE (one shared flowspec).
// The path state for each sender must have arrived. With confirm set, the
// sender's side answers with a ResvConf.
func (n *Node) Reserve(sess Session, style Style, fs Flowspec, filters []Filter, confirm bool, now time.Time) ([]Out, error) {
	if err := fs.Validate(); err != nil {
		return nil, err
	}
	if style != StyleFF && style != StyleSE {
		return nil, fmt.Errorf("reserve: style %s: %w (FF and SE only)", style, ErrUnsupported)
	}
	if len(filters) == 0 || len(filters) > MaxFlows {
		return nil, fmt.Errorf("reserve: %d senders (want 1 to %d)", len(filters), MaxFlows)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, f := range filters {
		k := FlowKey{sess, f}
		if ps := n.paths[k]; ps == nil || !ps.self {
			return nil, fmt.Errorf("reserve %s: no Path from this sender to this host (has the sender announced it?)", k)
		}
	}
	var outs []Out
	for _, f := range filters {
		k := FlowKey{sess, f}
		rs := &resvState{fs: fs, style: style, refresh: n.cfg.Refresh, next: now.Add(n.jitter()), filters: filters}
		if confirm {
			h, _, err := n.hop(sess.Dest)
			if err != nil {
				return nil, err
			}
			rs.confirm = h.Addr
		}
		n.resvs[k] = rs
		o, err := n.resvOut(k, rs, n.paths[k])
		if err != nil {
			return nil, err
		}
		rs.confirm = netip.Addr{} // asked once, not on every refresh
		outs = append(outs, o)
	}
	return outs, nil
}

func (n *Node) resvOut(k FlowKey, rs *resvState, ps *pathState) (Out, error) {
	h, _, err := n.hop(ps.phop.Addr)
	if err != nil {
		return Out{}, err
	}
	fs := rs.fs
	m := &Message{Type: Resv, TTL: n.cfg.TTL, Session: k.Session, Hop: h, Refresh: uint32(n.cfg.Refresh / time.Millisecond),
		Confirm: rs.confirm, Style: rs.style, Flows: []FlowDesc{{Flowspec: &fs, Filters: []Filter{k.Sender}}}}
	return Out{To: ps.phop.Addr, Msg: m}, nil
}

// RemoveSender tears down a sender's path (and the reservations on it).
func (n *Node) RemoveSender(k FlowKey) []Out {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.tearPathLocked(k, "")
}

// RemoveReservation tears down this receiver's reservation for k.
func (n *Node) RemoveReservation(k FlowKey) []Out {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.tearResvLocked(k, "")
}

func (n *Node) tearPathLocked(k FlowKey, event string) []Out {
	ps := n.paths[k]
	if ps == nil {
		return nil
	}
	outs := n.tearResvLocked(k, "")
	n.delPath(k)
	if event != "" {
		n.cfg.Upcall(Event{Kind: event, Key: k})
	}
	if ps.self {
		return outs
	}
	h, _, err := n.hop(k.Session.Dest)
	if err != nil {
		return outs
	}
	t := ps.tspec
	return append(outs, Out{To: k.Session.Dest, Alert: true, Msg: &Message{Type: PathTear, TTL: n.cfg.TTL, Session: k.Session, Hop: h,
		Sender: &Sender{Template: k.Sender, Tspec: &t}}})
}

// tearResvLocked removes the reservation for k here and sends a ResvTear
// upstream (unless this node is the sender).
func (n *Node) tearResvLocked(k FlowKey, event string) []Out {
	rs := n.resvs[k]
	if rs == nil {
		return nil
	}
	delete(n.resvs, k)
	ps := n.paths[k]
	if !rs.originated() {
		if n.deferRemove {
			n.removals = append(n.removals, k)
		} else {
			n.cfg.Install.Remove(k)
		}
	}
	if event != "" {
		n.cfg.Upcall(Event{Kind: event, Key: k})
	}
	if ps == nil || ps.phop == nil {
		return nil
	}
	h, _, err := n.hop(ps.phop.Addr)
	if err != nil {
		return nil
	}
	return []Out{{To: ps.phop.Addr, Msg: &Message{Type: ResvTear, TTL: n.cfg.TTL, Session: k.Session, Hop: h, Style: rs.style,
		Flows: []FlowDesc{{Filters: []Filter{k.Sender}}}}}}
}

// Handle processes one received message (already decoded) that came from
// source address src (the IP source of its packet) and returns the
// messages to send. Messages that make no sense here (a Resv without path
// state, an unknown sender) are answered with the RFC's error or counted
// and dropped; so are a host's Paths of sessions it neither sends nor
// receives, Paths over a cap, and tears from a hop that does not hold the
// state (Counters).
func (n *Node) Handle(m *Message, src netip.Addr, now time.Time) []Out {
	n.mu.Lock()
	defer n.mu.Unlock()
	switch m.Type {
	case Path:
		return n.handlePath(m, src, now)
	case Resv:
		return n.handleResv(m, now)
	case PathTear:
		return n.handlePathTear(m, src, now)
	case ResvTear:
		return n.handleResvTear(m, src, now)
	case ResvErr:
		return n.handleResvErr(m, src, now)
	case PathErr:
		if m.Sender == nil {
			n.count.Dropped++
			return nil
		}
		k := FlowKey{m.Session, m.Sender.Template}
		ps := n.paths[k]
		if ps == nil {
			n.count.Dropped++
			return nil
		}
		if ps.phop == nil {
			n.cfg.Upcall(Event{Kind: "path-error", Key: k, Node: m.Error.Node, Code: m.Error.Code, Value: m.Error.Value})
			return nil
		}
		return []Out{{To: ps.phop.Addr, Msg: m}}
	case ResvConf:
		for _, f := range m.Flows {
			for _, flt := range f.Filters {
				n.cfg.Upcall(Event{Kind: "confirm", Key: FlowKey{m.Session, flt}, Node: m.Error.Node, Flowspec: f.Flowspec})
			}
		}
	}
	return nil
}

func (n *Node) handlePath(m *Message, src netip.Addr, now time.Time) []Out {
	k := FlowKey{m.Session, m.Sender.Template}
	ps := n.paths[k]
	if ps != nil && ps.phop == nil {
		// A Path for a sender this host originates: a loop or a forgery.
		n.count.Dropped++
		return nil
	}
	if ps == nil && len(n.paths) >= MaxState {
		n.count.Dropped++
		n.refused(now, "path state table full", src, k, func() string {
			return fmt.Sprintf("a Path of a new session or sender dropped: the node keeps at most %d path states", MaxState)
		})
		return nil
	}
	_, self, err := n.hop(m.Session.Dest)
	if err != nil {
		n.count.Dropped++
		return nil
	}
	if !self && !n.cfg.Router {
		// A host keeps the state of its own senders and of sessions
		// addressed to it; routers ([rsvp] router) keep the others.
		n.count.NotHere++
		n.refused(now, "not here", src, k, func() string {
			return "a Path of a session this host neither sends nor receives dropped (it is not an RSVP router)"
		})
		return nil
	}
	h := *m.Hop
	if ps == nil || ps.phop.Addr != h.Addr || ps.from != src {
		if n.overCap(h.Addr, src, ps, now, k) {
			return nil
		}
	}
	fresh := ps == nil || ps.tspec != *m.Sender.Tspec || *ps.phop != h
	switch {
	case ps == nil:
		ps = &pathState{phop: &h, from: src}
		n.addPath(k, ps)
	case ps.phop.Addr != h.Addr || ps.from != src:
		n.account(ps, -1) // counted again under its new hop and source
		ps.phop, ps.from = &h, src
		n.account(ps, 1)
	default:
		ps.phop = &h // the same address; the LIH may differ
	}
	ps.tspec, ps.self = *m.Sender.Tspec, self
	ps.refresh = n.peerRefresh(m.Refresh)
	ps.expires = now.Add(Lifetime(ps.refresh))
	if self {
		if fresh {
			t := ps.tspec
			n.cfg.Upcall(Event{Kind: "path", Key: k, Tspec: &t})
		}
		return nil
	}
	if m.TTL <= 1 {
		ps.ttl = 0
		return nil
	}
	ps.ttl = m.TTL - 1
	// A router refreshes the state downstream on its own timer, with its
	// own refresh period R (RFC 2205 §3.7): an upstream refresh that
	// changes nothing only keeps the state alive here. New or changed
	// state goes on at once (a trigger message), and the timer restarts.
	if !fresh {
		return nil
	}
	ps.next = now.Add(n.jitter())
	o, err := n.pathOut(k, ps, ps.ttl)
	if err != nil {
		return nil
	}
	return []Out{o}
}

// overCap reports (and counts) whether a path state from previous hop hop
// and source src would go over the per-hop or per-source cap; old is the
// state it replaces (nil: a new one), whose own place is not counted twice.
func (n *Node) overCap(hop, src netip.Addr, old *pathState, now time.Time, k FlowKey) bool {
	if (old == nil || old.phop.Addr != hop) && n.perHop[hop] >= n.cfg.MaxPerHop {
		n.count.OverHop++
		n.refused(now, "over the previous hop's cap", src, k, func() string {
			return fmt.Sprintf("a Path dropped: its previous hop %s holds %d path states, the most one hop may ([rsvp] max_paths_per_hop)", hop, n.cfg.MaxPerHop)
		})
		return true
	}
	if src.IsValid() && (old == nil || old.from != src) && n.perSrc[src] >= n.cfg.MaxPerSource {
		n.count.OverSource++
		n.refused(now, "over the source's cap", src, k, func() string {
			return fmt.Sprintf("a Path dropped: its source %s holds %d path states, the most one source address may ([rsvp] max_paths_per_source)", src, n.cfg.MaxPerSource)
		})
		return true
	}
	return false
}

// handlePathTear removes path state when the PathTear comes from the hop
// that holds it: the RSVP_HOP of the state (RFC 2205 §3.1.5: SESSION,
// SENDER_TEMPLATE and PHOP must match), sent from that hop's address or
// from the sender's (an RFC 2205 router sends it with the sender's).
func (n *Node) handlePathTear(m *Message, src netip.Addr, now time.Time) []Out {
	if m.Sender == nil {
		n.count.Dropped++
		return nil
	}
	k := FlowKey{m.Session, m.Sender.Template}
	ps := n.paths[k]
	if ps == nil {
		n.count.Dropped++
		return nil
	}
	if ps.phop == nil || *ps.phop != *m.Hop || (src != ps.phop.Addr && src != k.Sender.Src) {
		n.badTear(now, "PathTear", src, m.Hop, k)
		return nil
	}
	return n.tearPathLocked(k, "path-tear")
}

// handleResvTear removes the reservations whose next hop sent the
// ResvTear: RSVP_HOP (address and LIH) and STYLE as the state's (RFC 2205
// §3.1.6), from that hop's address.
func (n *Node) handleResvTear(m *Message, src netip.Addr, now time.Time) []Out {
	var outs []Out
	for _, f := range m.Flows {
		for _, flt := range f.Filters {
			k := FlowKey{m.Session, flt}
			rs := n.resvs[k]
			if rs == nil {
				continue
			}
			i := rs.find(m.Hop.Addr)
			if i < 0 || rs.reqs[i].hop != *m.Hop || src != m.Hop.Addr || rs.style != m.Style {
				n.badTear(now, "ResvTear", src, m.Hop, k)
				continue
			}
			from := rs.reqs[i]
			outs = append(outs, n.dropRequests(k, rs, func(r *request) bool { return r == from }, "resv-tear", true, now)...)
		}
	}
	return outs
}

// refused logs (rate-limited) that a message from address from, naming
// flow k, was refused for reason; detail is formatted only when logged.
func (n *Node) refused(now time.Time, reason string, from netip.Addr, k FlowKey, detail func() string) {
	n.notes.note(n.cfg.Log, now, "RSVP message refused", reason, func() []any {
		return []any{"detail", detail(), "from", from.String(), "flow", k.String()}
	})
}

func (n *Node) badTear(now time.Time, what string, src netip.Addr, hop *Hop, k FlowKey) {
	n.count.BadTear++
	n.refused(now, "tear not from the state's hop", src, k, func() string {
		return fmt.Sprintf("a %s ignored: not from the hop that holds the state (its RSVP_HOP %s)", what, hop.Addr)
	})
}

func (n *Node) handleResv(m *Message, now time.Time) []Out {
	var outs []Out
	for _, f := range m.Flows {
		for _, flt := range f.Filters {
			outs = append(outs, n.resvOne(m, FlowKey{m.Session, flt}, *f.Flowspec, now)...)
		}
	}
	return outs
}

func (n *Node) resvOne(m *Message, k FlowKey, fs Flowspec, now time.Time) []Out {
	ps := n.paths[k]
	if ps == nil || ps.self || (ps.phop != nil && !n.cfg.Router) {
		// No path state to reserve on: none, a session this host
		// receives, or (a host's) a sender that is not this host's.
		return n.resvErr(m, k, fs, ErrNoPathInfo, 0, now)
	}
	rs := n.resvs[k]
	if rs != nil && rs.style != m.Style {
		return n.resvErr(m, k, fs, ErrConflictingStyle, 0, now)
	}
	if b, ok := n.blockedBy(k, fs, now); ok {
		// Refused upstream within Kb·R: answered with that refusal, not
		// installed, not sent upstream again (merge.go).
		n.count.Blockaded++
		return n.resvErrAs(m, k, b.qb, b.node, ErrAdmission, b.value, now)
	}
	h := *m.Hop
	i := -1
	if rs != nil {
		i = rs.find(h.Addr)
	}
	if rs != nil && i < 0 && len(rs.reqs) >= MaxNextHops {
		n.count.OverNhop++
		n.refused(now, "over the next hops' cap", h.Addr, k, func() string {
			return fmt.Sprintf("a Resv refused: %d next hops already ask to reserve this flow, the most a node merges", MaxNextHops)
		})
		return n.resvErr(m, k, fs, ErrTrafficControl, 0, now)
	}
	req := &request{hop: h, fs: fs, refresh: n.peerRefresh(m.Refresh)}
	req.expires = now.Add(Lifetime(req.refresh))
	var reqs []*request
	if rs != nil {
		reqs = append(reqs, rs.reqs...)
	}
	if i >= 0 {
		reqs[i] = req
	} else {
		reqs = append(reqs, req)
	}
	want := merged(reqs)
	if rs == nil || rs.fs != want {
		if err := n.cfg.Install.Install(k, want); err != nil {
			var ae *AdmissionError
			code, value := uint8(ErrTrafficControl), uint16(0)
			if errors.As(err, &ae) {
				code, value = ErrAdmission, ae.Value
			}
			n.cfg.Upcall(Event{Kind: "resv-refused", Key: k, Flowspec: &fs, Code: code, Value: value, Reason: err.Error()})
			return n.resvErr(m, k, fs, code, value, now)
		}
	}
	// A confirmation request is a trigger too (a receiver asks once).
	fresh := rs == nil || rs.fs != want || m.Confirm.IsValid()
	if rs == nil {
		rs = &resvState{style: m.Style}
		n.resvs[k] = rs
	}
	rs.fs, rs.reqs, rs.confirm = want, reqs, m.Confirm
	if ps.phop == nil {
		// The sender host: the reservation is complete here.
		if fresh {
			f := want
			n.cfg.Upcall(Event{Kind: "resv", Key: k, Flowspec: &f})
		}
		if m.Confirm.IsValid() {
			me, _, err := n.hop(m.Confirm)
			if err != nil {
				return nil
			}
			f := fs
			return []Out{{To: m.Confirm, Msg: &Message{Type: ResvConf, TTL: n.cfg.TTL, Session: k.Session,
				Error: &ErrorSpec{Node: me.Addr, Code: ErrConfirm}, Confirm: m.Confirm, Style: m.Style,
				Flows: []FlowDesc{{Flowspec: &f, Filters: []Filter{k.Sender}}}}}}
		}
		return nil
	}
	// A router refreshes the reservation upstream on its own timer, with
	// its own R; a new or changed one goes on at once (RFC 2205 §3.7).
	if !fresh {
		return nil
	}
	rs.next = now.Add(n.jitter())
	o, err := n.resvOut(k, rs, ps)
	rs.confirm = netip.Addr{} // asked once, not on this node's refreshes
	if err != nil {
		return nil
	}
	return []Out{o}
}

// resvErr answers a Resv that failed here: a ResvErr to the next hop it
// came from, naming this node, with this node's address toward that hop
// as its RSVP_HOP. Without a route back to the hop there is no such
// address and nothing could be sent: the answer is counted (NoRoute)
// instead.
func (n *Node) resvErr(m *Message, k FlowKey, fs Flowspec, code uint8, value uint16, now time.Time) []Out {
	return n.resvErrAs(m, k, fs, netip.Addr{}, code, value, now)
}

// resvErrAs is resvErr naming node as the one that refused (invalid: this
// node).
func (n *Node) resvErrAs(m *Message, k FlowKey, fs Flowspec, node netip.Addr, code uint8, value uint16, now time.Time) []Out {
	me, _, err := n.hop(m.Hop.Addr)
	if err != nil {
		n.count.NoRoute++
		n.refused(now, "no route to the hop", m.Hop.Addr, k, func() string {
			return fmt.Sprintf("a ResvErr (error code %d) not sent: %v", code, err)
		})
		return nil
	}
	f := fs
	return []Out{{To: m.Hop.Addr, Msg: &Message{Type: ResvErr, TTL: n.cfg.TTL, Session: k.Session, Hop: me,
		Error: &ErrorSpec{Node: cmp.Or(node, me.Addr), Code: code, Value: value}, Style: m.Style,
		Flows: []FlowDesc{{Flowspec: &f, Filters: []Filter{k.Sender}}}}}}
}

// handleResvErr passes a ResvErr toward the receiver. It is taken only
// from the previous hop of the flow's path state (its RSVP_HOP, from that
// hop's address): the hop the Resv went to. An admission failure leaves
// blockade state and removes the requests it blockades here, passing the
// ResvErr to their next hops; the others stay and their merge goes
// upstream (merge.go). Other errors go to every next hop.
func (n *Node) handleResvErr(m *Message, src netip.Addr, now time.Time) []Out {
	var outs []Out
	for _, f := range m.Flows {
		for _, flt := range f.Filters {
			k := FlowKey{m.Session, flt}
			rs := n.resvs[k]
			if rs == nil {
				n.count.Dropped++
				continue
			}
			if ps := n.paths[k]; ps == nil || ps.phop == nil || *ps.phop != *m.Hop || src != ps.phop.Addr {
				n.badTear(now, "ResvErr", src, m.Hop, k)
				continue
			}
			if rs.originated() {
				// The receiver: tell the application, drop the request.
				delete(n.resvs, k)
				n.cfg.Upcall(Event{Kind: "resv-error", Key: k, Flowspec: f.Flowspec, Node: m.Error.Node, Code: m.Error.Code, Value: m.Error.Value})
				continue
			}
			to := rs.reqs
			if m.Error.Code == ErrAdmission {
				hit := func(*request) bool { return true }
				if f.Flowspec != nil {
					qb := *f.Flowspec
					n.blocks[k] = blockade{qb: qb, until: now.Add(Kb * n.cfg.Refresh), node: m.Error.Node, value: m.Error.Value}
					hit = func(r *request) bool { return blockades(qb, r.fs) }
				}
				to = nil
				for _, r := range rs.reqs {
					if hit(r) {
						to = append(to, r)
					}
				}
				outs = append(outs, n.dropRequests(k, rs, hit, "", false, now)...)
			}
			for _, r := range to {
				h, _, err := n.hop(r.hop.Addr)
				if err != nil {
					continue
				}
				fwd := *m
				fwd.Hop = h
				fwd.Flows = []FlowDesc{{Flowspec: f.Flowspec, Filters: []Filter{flt}}}
				outs = append(outs, Out{To: r.hop.Addr, Msg: &fwd})
			}
		}
	}
	return outs
}

// Tick refreshes the state this node originates and times out received
// state whose lifetime passed; call it at least every R/2.
func (n *Node) Tick(now time.Time) []Out {
	n.mu.Lock()
	defer n.mu.Unlock()
	var outs []Out
	for k, ps := range n.paths {
		switch {
		case ps.phop == nil && !now.Before(ps.next):
			ps.next = now.Add(n.jitter())
			if o, err := n.pathOut(k, ps, n.cfg.TTL); err == nil {
				outs = append(outs, o)
			}
		case ps.phop != nil && now.After(ps.expires):
			outs = append(outs, n.tearPathLocked(k, "path-timeout")...)
		case ps.phop != nil && !ps.self && ps.ttl > 0 && !ps.next.IsZero() && !now.Before(ps.next):
			// A router's own refresh of the state it forwards.
			ps.next = now.Add(n.jitter())
			if o, err := n.pathOut(k, ps, ps.ttl); err == nil {
				outs = append(outs, o)
			}
		}
	}
	for k, rs := range n.resvs {
		switch {
		case rs.originated() && !now.Before(rs.next):
			rs.next = now.Add(n.jitter())
			if ps := n.paths[k]; ps != nil {
				if o, err := n.resvOut(k, rs, ps); err == nil {
					outs = append(outs, o)
				}
			}
		case slices.ContainsFunc(rs.reqs, func(r *request) bool { return now.After(r.expires) }):
			outs = append(outs, n.dropRequests(k, rs, func(r *request) bool { return now.After(r.expires) }, "resv-timeout", true, now)...)
		case !rs.originated() && !rs.next.IsZero() && !now.Before(rs.next):
			// A router's own refresh of the reservation upstream.
			rs.next = now.Add(n.jitter())
			if ps := n.paths[k]; ps != nil && ps.phop != nil {
				if o, err := n.resvOut(k, rs, ps); err == nil {
					outs = append(outs, o)
				}
			}
		}
	}
	for k, b := range n.blocks {
		if now.After(b.until) {
			delete(n.blocks, k)
		}
	}
	return outs
}

// Counts is the number of path and reservation states held.
func (n *Node) Counts() (paths, resvs int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.paths), len(n.resvs)
}
