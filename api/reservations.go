package api

import (
	"context"
	"time"

	"github.com/hostqos/hostqos/internal/policy"
)

// ReservationInfo is a reservation as the API lists it: what was asked,
// what admission control counted, and what the kernel reports.
type ReservationInfo struct {
	// Reservation is nested, not embedded (it has its own UnmarshalJSON).
	Reservation policy.Reservation `json:"reservation"`
	Source      string             `json:"source"` // "config", "api" or "temporary"
	// Tspec is the Tspec and Rspec in RFC 2210 units (bytes/s, bytes).
	Tspec     Tspec               `json:"tspec"`
	Admission ResvAdmission       `json:"admission"`
	Counters  *ResvCounters       `json:"counters,omitempty"` // nil when the kernel cannot say
	Sockets   []BoundSocket       `json:"sockets"`            // bound now
	Error     string              `json:"error,omitempty"`    // reading the kernel's figures failed
	Broken    []string            `json:"broken,omitempty"`   // why it cannot be honoured now (a link's MTU fell below M…)
	Slot      int                 `json:"slot"`               // the rule slot of its session selector, -1 before it is applied
	Links     []ResvLinkAdmission `json:"links,omitempty"`
}

// Tspec is a reservation's traffic specification and Rspec in RFC 2210
// units.
type Tspec struct {
	Rate        uint64 `json:"r_Bps"`           // token rate r, bytes/s
	Bucket      uint64 `json:"b_B"`             // bucket depth b, bytes
	Peak        uint64 `json:"p_Bps,omitempty"` // peak rate p, bytes/s (0: none)
	MinUnit     uint64 `json:"m_B"`             // minimum policed unit m
	MaxUnit     uint64 `json:"M_B"`             // maximum packet size M
	ServiceRate uint64 `json:"R_Bps,omitempty"` // guaranteed: service rate R
	Slack       int    `json:"S_us,omitempty"`  // guaranteed: slack S (µs)
}

// ResvAdmission is what admission control counted for a reservation.
type ResvAdmission struct {
	Reserved      policy.Rate `json:"reserved"`       // R (guaranteed), r (controlled load), 0 (best effort)
	BufferPackets uint64      `json:"buffer_packets"` // ⌈b/m⌉
	BufferSize    uint64      `json:"buffer_size"`    // pow2(M + L_header) bytes
	Buffer        uint64      `json:"buffer"`         // bytes taken from each shaped link's pool
}

// ResvLinkAdmission is a shaped link's admission figures, with every
// reservation and guarantee counted.
type ResvLinkAdmission struct {
	Link       string      `json:"link"`
	Capacity   policy.Rate `json:"capacity"` // reservable × egress rate
	Guaranteed policy.Rate `json:"guaranteed"`
	BufferPool uint64      `json:"buffer_pool"`
	BufferUsed uint64      `json:"buffer_used"`
	MTU        int         `json:"mtu,omitempty"`
}

// ResvCounters are a reservation's counters since it was applied.
type ResvCounters struct {
	ConformantPackets    uint64  `json:"conformant_packets"`
	ConformantBytes      uint64  `json:"conformant_bytes"`
	NonConformantPackets uint64  `json:"nonconformant_packets"`
	NonConformantBytes   uint64  `json:"nonconformant_bytes"`
	DemotedBytes         uint64  `json:"demoted_bytes"`
	ShapedPackets        uint64  `json:"shaped_packets"`
	ShapedTime           float64 `json:"shaped_seconds"`
	OversizePackets      uint64  `json:"oversize_packets"`
	Sessions             int64   `json:"sessions"`
	SessionsTotal        uint64  `json:"sessions_total"`
	RefusedConnects      uint64  `json:"refused_connects"`
	RefusedSends         uint64  `json:"refused_sends"`
	// BacklogBytes is what waits in its HTB leaf's queue now (its buffers
	// in use; the most of any link), QueueLimit the packets that queue
	// holds, QueueDrops what the leaf dropped (summed over links).
	BacklogBytes uint32 `json:"backlog_bytes"`
	QueueLimit   uint32 `json:"queue_limit"`
	QueueDrops   uint64 `json:"queue_drops"`
}

// BoundSocket is a socket bound to a reservation.
type BoundSocket struct {
	PID    uint32    `json:"pid"`
	UID    uint32    `json:"uid"`
	Comm   string    `json:"comm,omitempty"`
	Exe    string    `json:"exe,omitempty"`
	Proto  string    `json:"proto"`
	Local  string    `json:"local,omitempty"`
	Remote string    `json:"remote,omitempty"`
	Since  time.Time `json:"since,omitzero"`
	// Session is the per-session leaf the socket holds (1..max_sessions)
	// when its reservation gives each session one; 0: none.
	Session int `json:"session,omitempty"`
}

// ReservationsAPI manages reservations.
type ReservationsAPI interface {
	List(ctx context.Context) ([]ReservationInfo, error)
	Get(ctx context.Context, name string) (ReservationInfo, error)
	Add(ctx context.Context, r policy.Reservation, opts ...ChangeOption) (ReservationInfo, error)
	Set(ctx context.Context, name string, f Fields, opts ...ChangeOption) (ReservationInfo, error)
	Remove(ctx context.Context, name string, opts ...ChangeOption) error
}

// Reservations returns the client for reservations.
func (c *Client) Reservations() ReservationsAPI {
	return resvClient{objectClient[ReservationInfo]{c, objectRoutes{list: RouteReservations, show: RouteReservation,
		add: RouteAddReservation, patch: RouteSetReservation, remove: RouteRemoveReservation}}}
}

// resvClient is the client of reservations: its changes answer with the
// reservation's admission figures.
type resvClient struct{ objectClient[ReservationInfo] }

// Add asks for a reservation; admission control refuses it (an *Error
// naming the numbers) or admits it.
func (r resvClient) Add(ctx context.Context, resv policy.Reservation, opts ...ChangeOption) (ReservationInfo, error) {
	return add[ReservationInfo](ctx, r.objectClient, resv, opts)
}

// Set changes the fields given of reservation name (nil clears a field);
// admission runs again.
func (r resvClient) Set(ctx context.Context, name string, f Fields, opts ...ChangeOption) (ReservationInfo, error) {
	return patch[ReservationInfo](ctx, r.objectClient, name, f, opts)
}
