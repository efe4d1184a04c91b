package api

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
)

// RSVP signalling: the application's side of RSVP (RAPI-like).
// A session names a destination (address, port, protocol); on the sender
// host `Sender` announces a Tspec (Path messages toward the destination),
// on the receiver host `Reserve` asks every hop back to the senders for a
// flowspec (Resv messages). What the network answers arrives as events
// (rsvp.path, rsvp.resv, rsvp.resv-error, rsvp.confirm, …).

// RSVPSessionRequest creates a session.
type RSVPSessionRequest struct {
	Name  string `json:"name"`
	Dest  string `json:"dest"`  // ADDR:PORT (IPv6: [ADDR]:PORT), unicast
	Proto string `json:"proto"` // udp or tcp
}

// RSVPSenderRequest announces this host as a sender of a session: a
// Tspec (r, b, p, m, M; RFC 2210 units: bytes/s and bytes; p 0 = no peak
// limit) from source port Port (0: any port of this host).
type RSVPSenderRequest struct {
	Port  uint16 `json:"port,omitempty"`
	Tspec Tspec  `json:"tspec"`
}

// RSVPReserveRequest asks, as the receiver, for a reservation for every
// sender of the session whose Path arrived (now or later): service
// guaranteed (flowspec with R, S) or controlled-load; style ff (one
// reservation per sender, default) or se (one shared by all); Confirm asks
// for a ResvConf.
type RSVPReserveRequest struct {
	Service  string `json:"service"`
	Flowspec Tspec  `json:"flowspec"`
	Style    string `json:"style,omitempty"`
	Confirm  bool   `json:"confirm,omitempty"`
}

// RSVPSession is a session of the API with what signalling holds for it.
type RSVPSession struct {
	Name    string              `json:"name"`
	Dest    string              `json:"dest"`
	Proto   string              `json:"proto"`
	Sender  *RSVPSenderRequest  `json:"sender,omitempty"`
	Reserve *RSVPReserveRequest `json:"reserve,omitempty"`
	// LastEvent is the last upcall for the session ("resv-error from
	// 198.18.2.1 …"), empty before any.
	LastEvent string     `json:"last_event,omitempty"`
	Paths     []RSVPPath `json:"paths"`
	Resvs     []RSVPResv `json:"resvs"`
}

// RSVPPath is one path state: a sender's Path as this node keeps it.
type RSVPPath struct {
	Session string  `json:"session"` // DEST:PORT/PROTO
	Sender  string  `json:"sender"`  // SRC:PORT
	Role    string  `json:"role"`    // sender (originated here), receiver (addressed here), router
	Tspec   Tspec   `json:"tspec"`
	PrevHop string  `json:"prev_hop,omitempty"`
	Expires float64 `json:"expires_in_s,omitempty"` // received state: seconds left
}

// RSVPResv is one reservation state.
type RSVPResv struct {
	Session  string `json:"session"`
	Sender   string `json:"sender"`
	Role     string `json:"role"` // receiver (asked here), sender or router (installed here)
	Service  string `json:"service"`
	Style    string `json:"style"`
	Flowspec Tspec  `json:"flowspec"`
	NextHop  string `json:"next_hop,omitempty"`
	// NextHops is how many next hops' requests are merged into it (their
	// least upper bound is installed and sent upstream; NextHop is one).
	NextHops int `json:"next_hops,omitempty"`
	// Reservation is the host's reservation object that holds it
	// (hostqos resv show NAME), on the sender and routers.
	Reservation string  `json:"reservation,omitempty"`
	Expires     float64 `json:"expires_in_s,omitempty"`
}

// RSVPCounters are the agent's message counters.
type RSVPCounters struct {
	Received  uint64 `json:"received"`  // accepted and handled
	Malformed uint64 `json:"malformed"` // refused by the parser, dropped
	Foreign   uint64 `json:"foreign"`   // arrived on a link that is not managed, dropped
	SendFail  uint64 `json:"send_failed"`
	Dropped   uint64 `json:"dropped"` // well-formed but meaningless here (no path state, …)
	// NotHere are Paths a host (not a router) dropped: of sessions it
	// neither sends nor receives.
	NotHere uint64 `json:"not_here"`
	// OverHop and OverSource are Paths of new states dropped over the
	// per-previous-hop and per-source-address caps ([rsvp]
	// max_paths_per_hop, max_paths_per_source).
	OverHop    uint64 `json:"over_hop_cap"`
	OverSource uint64 `json:"over_source_cap"`
	// BadTear are PathTear, ResvTear and ResvErr messages ignored because
	// they did not come from the hop that holds the state.
	BadTear uint64 `json:"bad_tear"`
	// NoRoute are ResvErr answers not sent: no route back to the hop.
	NoRoute uint64 `json:"no_route"`
	// Blockaded are Resv requests answered at once with an upstream
	// refusal still in blockade state; OverNhop are Resvs of one next hop
	// more than a flow merges.
	Blockaded uint64 `json:"blockaded"`
	OverNhop  uint64 `json:"over_nhop_cap"`
	Paths     int    `json:"paths"` // path states held
	Resvs     int    `json:"resvs"` // reservation states held
}

// RSVPStatus is the RSVP agent: its settings, counters, the API's
// sessions and a page of the signalled states (RSVPListQuery).
type RSVPStatus struct {
	Enabled bool `json:"enabled"`
	// NotRunning says why the agent is not running, when not Enabled.
	NotRunning string `json:"not_running,omitempty"`
	// RestartNeeded lists the [rsvp] settings the config file changed
	// since hostqosd started, which apply when it restarts (see
	// Status.RestartNeeded).
	RestartNeeded []string `json:"restart_needed,omitempty"`
	Router        bool     `json:"router"`
	Refresh       string   `json:"refresh,omitempty"`  // R
	Lifetime      string   `json:"lifetime,omitempty"` // L of state refreshed every R
	// MaxPeerRefresh is the longest refresh period taken from a received
	// TIME_VALUES (4 R, at least 30 s): received state lives at most
	// 5.25 times it.
	MaxPeerRefresh string        `json:"max_peer_refresh,omitempty"`
	Counters       RSVPCounters  `json:"counters"`
	Sessions       []RSVPSession `json:"sessions"`
	Paths          []RSVPPath    `json:"paths"`
	Resvs          []RSVPResv    `json:"resvs"`
	// Truncated: more states follow this page; NextOffset is the
	// RSVPListQuery.Offset of the next page.
	Truncated  bool `json:"truncated,omitempty"`
	NextOffset int  `json:"next_offset,omitempty"`
}

// MaxRSVPStates bounds the states one answer lists (of each kind);
// DefaultRSVPPage is a page's size when the query names none.
const (
	MaxRSVPStates   = 10000
	DefaultRSVPPage = 1000
)

// RSVPListQuery pages the states of an RSVP listing: of the path states
// and of the reservation states, each in the order of session and sender,
// the first Offset are skipped and at most Limit listed (0:
// DefaultRSVPPage; 1 … MaxRSVPStates).
type RSVPListQuery struct {
	Offset int
	Limit  int
}

// values encodes q as the query string of the route.
func (q RSVPListQuery) values() url.Values {
	v := url.Values{}
	if q.Offset > 0 {
		v.Set("offset", strconv.Itoa(q.Offset))
	}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	return v
}

// ParseRSVPListQuery reads an RSVPListQuery from a query string (the
// daemon's side of its encoding).
func ParseRSVPListQuery(v url.Values) (RSVPListQuery, error) {
	var q RSVPListQuery
	for k := range v {
		if k != "offset" && k != "limit" {
			return q, &ParamError{Param: k, Reason: "unknown parameter; known: offset, limit"}
		}
	}
	if s := v.Get("offset"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			return q, &ParamError{Param: "offset", Value: s, Reason: "want a whole number ≥ 0 (a page's next_offset)"}
		}
		q.Offset = n
	}
	if s := v.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 || n > MaxRSVPStates {
			return q, &ParamError{Param: "limit", Value: s, Reason: fmt.Sprintf("want 1 … %d states of each kind (0: %d)", MaxRSVPStates, DefaultRSVPPage)}
		}
		q.Limit = n
	}
	return q, nil
}

// RSVPAPI is RSVP signalling.
type RSVPAPI interface {
	Status(ctx context.Context, q RSVPListQuery) (RSVPStatus, error)
	Get(ctx context.Context, name string) (RSVPSession, error)
	AddSession(ctx context.Context, s RSVPSessionRequest, opts ...ChangeOption) (RSVPSession, error)
	Sender(ctx context.Context, name string, s RSVPSenderRequest, opts ...ChangeOption) (RSVPSession, error)
	Reserve(ctx context.Context, name string, r RSVPReserveRequest, opts ...ChangeOption) (RSVPSession, error)
	Remove(ctx context.Context, name string, opts ...ChangeOption) error
}

// RSVP returns the client for RSVP signalling.
func (c *Client) RSVP() RSVPAPI { return &rsvpClient{c} }

type rsvpClient struct{ c *Client }

// Status returns the agent, its sessions and a page of its states.
func (r *rsvpClient) Status(ctx context.Context, q RSVPListQuery) (RSVPStatus, error) {
	var out RSVPStatus
	path := Path(RouteRSVP)
	if v := q.values(); len(v) > 0 {
		path += "?" + v.Encode()
	}
	err := r.c.Do(ctx, Method(RouteRSVP), path, nil, &out)
	return out, err
}

// Get returns one session.
func (r *rsvpClient) Get(ctx context.Context, name string) (RSVPSession, error) {
	var out RSVPSession
	err := r.c.call(ctx, RouteRSVPSession, []string{name}, nil, &out, nil)
	return out, err
}

// AddSession creates a session.
func (r *rsvpClient) AddSession(ctx context.Context, s RSVPSessionRequest, opts ...ChangeOption) (RSVPSession, error) {
	var out RSVPSession
	err := r.c.call(ctx, RouteAddRSVPSession, nil, s, &out, opts)
	return out, err
}

// Sender announces (or changes) this host as a sender of session name.
func (r *rsvpClient) Sender(ctx context.Context, name string, s RSVPSenderRequest, opts ...ChangeOption) (RSVPSession, error) {
	var out RSVPSession
	err := r.c.call(ctx, RouteRSVPSender, []string{name}, s, &out, opts)
	return out, err
}

// Reserve asks (or changes) this receiver's reservation for session name.
func (r *rsvpClient) Reserve(ctx context.Context, name string, req RSVPReserveRequest, opts ...ChangeOption) (RSVPSession, error) {
	var out RSVPSession
	err := r.c.call(ctx, RouteRSVPReserve, []string{name}, req, &out, opts)
	return out, err
}

// Remove tears the session down (PathTear, ResvTear) and forgets it.
func (r *rsvpClient) Remove(ctx context.Context, name string, opts ...ChangeOption) error {
	return r.c.call(ctx, RouteRemoveRSVPSession, []string{name}, nil, nil, opts)
}
