// Package policy holds hostqos's policy model: links, service classes and
// rules, their units (rates, DSCP, ports, prefixes), validation of a whole
// policy, the TOML config file, and admission control of guarantees.
//
// Everything here is pure Go with no kernel access, so it can be unit-tested
// anywhere and imported by the CLI.
package policy

import "net/netip"

// Rate is a bit rate in bits per second. Zero means "not set".
type Rate uint64

// DSCP is a Differentiated Services code point 0..63. NoDSCP means "not set".
type DSCP int8

// NoDSCP marks an unset DSCP field.
const NoDSCP DSCP = -1

// PortRange is an inclusive port range. The zero value means "any port".
type PortRange struct {
	From, To uint16
}

// Action is what a rule does to matching packets.
type Action string

const (
	ActionPass    Action = "pass"    // classify, mark, shape (default)
	ActionDrop    Action = "drop"    // drop and count
	ActionObserve Action = "observe" // count only; no marking, no class change
)

// Link is a managed network interface.
type Link struct {
	Name string `json:"name" toml:"name"`
	// EgressRate is the link's egress capacity; the HTB root is built at this
	// rate. Zero means "mark and count only, no shaping"; RateAuto
	// ("auto") means the daemon finds the capacity and follows it within
	// EgressMin .. EgressMax (docs/autorate.md).
	EgressRate LinkRate `json:"egress_rate" toml:"egress_rate,omitzero"`
	// EgressMin and EgressMax bound an automatic egress rate (0: the
	// defaults DefaultAutoMin and DefaultAutoMax).
	EgressMin Rate `json:"egress_min,omitempty" toml:"egress_min,omitzero"`
	EgressMax Rate `json:"egress_max,omitempty" toml:"egress_max,omitzero"`
	// Reservable is the fraction of EgressRate that guarantees (minbw) may
	// claim in total. Zero means the default, DefaultReservable.
	Reservable float64 `json:"reservable" toml:"reservable,omitzero"`
	// ResvBuffer is the buffer pool reservations may claim on this link
	// (see Reservation.Buffer). Zero means DefaultResvBuffer.
	ResvBuffer Size `json:"resv_buffer,omitempty" toml:"resv_buffer,omitzero"`
	// SynRate throttles pure TCP SYNs (SYN without ACK) arriving on the
	// link to this many per second, in its XDP shield; SynRatePerSource
	// to this many per second from each source (IPv4 address, IPv6 /64).
	// Zero: no limit. Packets of established connections are never
	// touched.
	SynRate          int `json:"syn_rate,omitempty" toml:"syn_rate,omitzero"`
	SynRatePerSource int `json:"syn_rate_per_source,omitempty" toml:"syn_rate_per_source,omitzero"`
	// IngressRate is the link's download budget (frames received, L2
	// header included): set a little below the downlink's bottleneck, it
	// shares the downlink by class priority — each class may receive what
	// the higher classes leave of it, TCP by the receive window the host
	// advertises, UDP by dropping the excess — so that no queue forms at
	// the bottleneck and a voice download is not queued behind bulk.
	// Zero: none.
	IngressRate LinkRate `json:"ingress_rate,omitempty" toml:"ingress_rate,omitzero"`
	// IngressMin and IngressMax bound an automatic ingress rate.
	IngressMin Rate `json:"ingress_min,omitempty" toml:"ingress_min,omitzero"`
	IngressMax Rate `json:"ingress_max,omitempty" toml:"ingress_max,omitzero"`
}

// MaxSynRate bounds the SYN limits of a link (SYNs per second).
const MaxSynRate = 10_000_000

// Block is a drop-list entry of the XDP shield: packets from Prefix are
// dropped before the stack on every managed link, or, with MaxBWIn,
// passed at most at that rate (quarantine: Crossbow's low-bandwidth ring,
// which still lets the admin observe the source).
type Block struct {
	Prefix  netip.Prefix `json:"prefix" toml:"prefix"`
	MaxBWIn Rate         `json:"maxbw_in,omitempty" toml:"maxbw_in,omitzero"`
}

// Bounds of a quarantine rate.
const (
	MinBlockRate Rate = 8000
	MaxBlockRate Rate = 100_000_000_000
)

// DefaultReservable is the share of a link that admission control lets
// guarantees claim when a link does not say.
const DefaultReservable = 0.8

// Class is a named service level.
type Class struct {
	Name     string `json:"name" toml:"name"`
	DSCP     DSCP   `json:"dscp" toml:"dscp"`
	Priority int    `json:"priority" toml:"priority"` // 0 (highest) .. 7
	MinBW    Rate   `json:"minbw,omitempty" toml:"minbw,omitzero"`
	MaxBW    Rate   `json:"maxbw,omitempty" toml:"maxbw,omitzero"`
	// UserAllowed lets non-root users run their own programs in this class.
	UserAllowed bool `json:"user_allowed" toml:"user_allowed"`
}

// Rule maps selectors to properties. A selector that is empty matches
// anything; all set selectors must match (AND).
//
// The config file and the API read and write the fields by their tags
// (see fields.go): a new field needs its tags, its validation and its
// compile step, no decoder change.
type Rule struct {
	Name string `json:"name" toml:"name"`

	// App selectors.
	Exe    string `json:"exe,omitempty" toml:"exe,omitzero"`       // absolute path or glob
	Comm   string `json:"comm,omitempty" toml:"comm,omitzero"`     // task command name (<= 15 bytes)
	Cgroup string `json:"cgroup,omitempty" toml:"cgroup,omitzero"` // path relative to the cgroup2 root, e.g. /system.slice/x.service
	Unit   string `json:"unit,omitempty" toml:"unit,omitzero"`     // systemd unit, e.g. nginx.service
	User   string `json:"user,omitempty" toml:"user,omitzero,uid"` // user name or numeric uid
	// Container selectors (containers.md): a container's name (a glob) or
	// id (12 or more hex digits of it), its image (a glob) and a label
	// KEY=VALUE. The daemon finds the containers on the host.
	Container      string `json:"container,omitempty" toml:"container,omitzero"`
	Image          string `json:"image,omitempty" toml:"image,omitzero"`
	ContainerLabel string `json:"container_label,omitempty" toml:"container_label,omitzero"`

	// Flow selectors.
	Proto  string       `json:"proto,omitempty" toml:"proto,omitzero"` // tcp|udp|icmp ("" any); icmp covers icmpv6
	Local  netip.Prefix `json:"local,omitzero" toml:"local,omitzero"`
	Remote netip.Prefix `json:"remote,omitzero" toml:"remote,omitzero"`
	LPort  PortRange    `json:"lport,omitzero" toml:"lport,omitzero"`
	RPort  PortRange    `json:"rport,omitzero" toml:"rport,omitzero"`
	DSCPIn DSCP         `json:"dscp_in,omitzero" toml:"dscp_in,omitzero"`

	// Properties.
	Class string `json:"class,omitempty" toml:"class,omitzero"` // "" = default
	DSCP  DSCP   `json:"dscp,omitzero" toml:"dscp,omitzero"`    // overrides the class's DSCP
	MaxBW Rate   `json:"maxbw,omitempty" toml:"maxbw,omitzero"`
	MinBW Rate   `json:"minbw,omitempty" toml:"minbw,omitzero"`
	// Police drops what exceeds this rate (a token bucket of Burst bytes,
	// shared by all the rule's traffic) in the classifier, before any
	// queue: the tool for UDP floods and traffic that must not queue.
	Police Rate `json:"police,omitempty" toml:"police,omitzero"`
	Burst  Size `json:"burst,omitempty" toml:"burst,omitzero"` // police's bucket depth; 0 = DefaultBurst(Police)
	// MaxBWIn limits what the rule's flows receive together (L4 payload,
	// i.e. what the applications read), shared fairly between them: TCP
	// by the receive window the host advertises, UDP by dropping the
	// excess on arrival (counted).
	MaxBWIn    Rate   `json:"maxbw_in,omitempty" toml:"maxbw_in,omitzero"`
	Action     Action `json:"action,omitempty" toml:"action,omitzero"`
	Precedence int    `json:"precedence,omitempty" toml:"precedence,omitzero"`
	// Per-session admission (Q-Pod): at most MaxSessions of the rule's
	// sockets connected at once (0: any; the next connect() fails with
	// EPERM); each session's guarantee and ceiling.
	MaxSessions     int  `json:"max_sessions,omitempty" toml:"max_sessions,omitzero"`
	PerSessionMaxBW Rate `json:"per_session_maxbw,omitempty" toml:"per_session_maxbw,omitzero"`
	PerSessionMinBW Rate `json:"per_session_minbw,omitempty" toml:"per_session_minbw,omitzero"`

	// Quota and schedule (quota.go): a volume per period with what to do
	// when it is used up, and the weekday/time windows the rule is on in.
	Quota          Size   `json:"quota,omitempty" toml:"quota,omitzero"`
	QuotaPeriod    string `json:"quota_period,omitempty" toml:"quota_period,omitzero"`       // day (default), week, month
	QuotaDirection string `json:"quota_direction,omitempty" toml:"quota_direction,omitzero"` // out (default); in, both refused until rx counters exist
	QuotaReset     string `json:"quota_reset,omitempty" toml:"quota_reset,omitzero"`         // HH:MM (default 00:00)
	QuotaAction    string `json:"quota_action,omitempty" toml:"quota_action,omitzero"`       // event (default), block, "limit RATE"
	Schedule       string `json:"schedule,omitempty" toml:"schedule,omitzero"`               // e.g. "Mon-Fri 09:00-18:00, Sat 10:00-14:00"
	TimeZone       string `json:"timezone,omitempty" toml:"timezone,omitzero"`               // IANA zone of quota_reset and schedule (default: the host's)

	Temporary bool `json:"temporary,omitempty" toml:"-"`
	// UserRun marks the rule of a `hostqos run` started by an ordinary
	// user. The daemon sets it (it is not read from the config file, and
	// the daemon overwrites what the API sends): such rules form a tier of
	// their own, evaluated after every other rule whatever its precedence,
	// so a user's run never overrides the admin's drops, limits or marks.
	UserRun bool `json:"user_run,omitempty" toml:"-"`
}

// Policy is the whole desired state the daemon enforces.
type Policy struct {
	Links   []Link  `json:"links" toml:"link"`
	Classes []Class `json:"classes" toml:"class"`
	Rules   []Rule  `json:"rules" toml:"rule"`
	// Reservations (see Reservation).
	Reservations []Reservation `json:"reservations,omitempty" toml:"reservation"`
	// Settings are the daemon's top-level settings of the config file
	// (not policy: never merged, changed or sent through the API).
	Settings Settings `json:"-" toml:"-"`
	// RSVP is the config file's [rsvp] table (like Settings, read when
	// the daemon starts; see RSVP).
	RSVP RSVP `json:"-" toml:"-"`
	// Containers is the config file's [containers] table (read when the
	// daemon starts).
	Containers ContainerSettings `json:"-" toml:"-"`
	// Kubernetes is the config file's [kubernetes] table (read when the
	// daemon starts).
	Kubernetes KubernetesSettings `json:"-" toml:"-"`
	// Web is the config file's [web] table (read when the daemon
	// starts).
	Web WebSettings `json:"-" toml:"-"`
	// Blocks are the config file's drop-list entries (permanent; the API
	// adds more, with a TTL if asked).
	Blocks []Block `json:"blocks,omitempty" toml:"block"`
}

// Policer limits. MinPoliceBurst holds one full-size Ethernet frame (the
// policer counts frames with their L2 header); MaxPoliceBurst keeps the
// datapath's arithmetic exact.
const (
	MinPolice      Rate = 1000
	MinPoliceBurst Size = 1514
	MaxPoliceBurst Size = 1 << 30
)

// Download limit bounds: below MinMaxBWIn a window of two segments per
// round trip is already more than the limit on any path; above
// MaxMaxBWIn the datapath's per-flow window arithmetic could overflow.
const (
	MinMaxBWIn Rate = 64000
	MaxMaxBWIn Rate = 400e9
)

// DefaultBurst is the bucket depth of a policer at rate r when the rule
// sets none: 10 ms of traffic at r, and at least 64 KiB, the largest
// packet TCP hands a link with segmentation offload (a GSO packet is
// policed whole).
func DefaultBurst(r Rate) Size {
	return max(Size(64<<10), Size(uint64(r)/800))
}

// PoliceBurst is the rule's effective policer bucket depth.
func (r Rule) PoliceBurst() Size {
	if r.Burst != 0 {
		return r.Burst
	}
	return DefaultBurst(r.Police)
}
