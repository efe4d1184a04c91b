package policy

import (
	"fmt"
	"math/bits"
	"net/netip"
	"slices"
	"strconv"

	"github.com/hostqos/hostqos/internal/units"
)

// Service is the service a reservation asks for (RFC 2210/2211/2212 and
// the RSVP QoS manager seed 001, §III-C/D).
type Service string

// The services.
const (
	// ServiceGuaranteed: traffic inside the Tspec is never dropped on the
	// host; by default its senders are shaped to the Tspec (they wait in
	// send() until what they send conforms), see Enforcement.
	ServiceGuaranteed Service = "guaranteed"
	// ServiceControlledLoad: traffic inside the Tspec gets the reserved
	// rate; excess goes out as best effort (never dropped for being
	// excess).
	ServiceControlledLoad Service = "controlled-load"
	// ServiceBestEffort: the Tspec is counted (conformant or not), nothing
	// is reserved.
	ServiceBestEffort Service = "best-effort"
)

// Enforcement is how the host holds a reservation's senders to its Tspec
// (the seed makes shaping a choice per session, §III-C/D).
type Enforcement string

// The enforcements.
const (
	// EnforceShape: what leaves conforms to the Tspec (r, b, p, M): the
	// reservation's HTB leaf holds it to both buckets and a sender that
	// goes faster waits in send() (its send buffer fills), nothing is
	// dropped. The default of guaranteed service.
	EnforceShape Enforcement = "shape"
	// EnforcePolice: each packet is checked against the Tspec as it
	// leaves; what conforms gets the reservation's rate and DSCP, the
	// excess is sent as best effort. The default of controlled load.
	EnforcePolice Enforcement = "police"
)

// Reservation defaults and bounds.
const (
	// DefaultMinUnit is m when a reservation does not say: smaller packets
	// are charged as this many bytes.
	DefaultMinUnit Size = 64
	// DefaultMaxUnit is M when a reservation does not say (an Ethernet
	// MTU).
	DefaultMaxUnit Size = 1500
	// MaxMaxUnit is the largest M (an IPv4/IPv6 packet without jumbograms).
	MaxMaxUnit Size = 65535
	// MinReservationRate is the smallest token or peak rate (1 kbit/s).
	MinReservationRate Rate = 1000
	// MaxReservationBurst bounds b (1 GiB).
	MaxReservationBurst Size = 1 << 30
	// LinkHeader is L_header of the seed's buffer size: the link-layer
	// header a packet of M bytes gets on an Ethernet link (14 bytes plus
	// a VLAN tag).
	LinkHeader Size = 18
	// DefaultResvBuffer is a link's buffer pool for reservations when it
	// does not say (Link.ResvBuffer).
	DefaultResvBuffer Size = 4 << 20
	// MaxSessions bounds a rule's or reservation's max_sessions.
	MaxSessions = 1 << 16
	// MaxSessionLeaves bounds max_sessions when per-session bandwidth is
	// set: each session has a leaf of its own (the datapath's and the
	// shaper's limit, kept equal by a test).
	MaxSessionLeaves = 32
)

// Reservation is a resource reservation: a session selector (the same
// selectors as a rule; any of them wildcard), a traffic specification
// (Tspec, RFC 2210) and a service. Rates are written in any rate unit
// (RFC 2210 counts bytes/s: "125kB/s" is r = 125000 bytes/s, the same as
// "1mbit"); sizes in bytes.
type Reservation struct {
	Name string `json:"name" toml:"name"`

	// Session selector: as a rule's (see Rule).
	Exe    string `json:"exe,omitempty" toml:"exe,omitzero"`
	Comm   string `json:"comm,omitempty" toml:"comm,omitzero"`
	Cgroup string `json:"cgroup,omitempty" toml:"cgroup,omitzero"`
	Unit   string `json:"unit,omitempty" toml:"unit,omitzero"`
	User   string `json:"user,omitempty" toml:"user,omitzero,uid"`
	// Container selectors, as a rule's.
	Container      string `json:"container,omitempty" toml:"container,omitzero"`
	Image          string `json:"image,omitempty" toml:"image,omitzero"`
	ContainerLabel string `json:"container_label,omitempty" toml:"container_label,omitzero"`

	Proto  string       `json:"proto,omitempty" toml:"proto,omitzero"`
	Local  netip.Prefix `json:"local,omitzero" toml:"local,omitzero"`
	Remote netip.Prefix `json:"remote,omitzero" toml:"remote,omitzero"`
	LPort  PortRange    `json:"lport,omitzero" toml:"lport,omitzero"`
	RPort  PortRange    `json:"rport,omitzero" toml:"rport,omitzero"`

	Service Service `json:"service" toml:"service"`
	// Tspec: token rate r, bucket depth b, peak rate p (0: no peak term),
	// minimum policed unit m, maximum packet size M (IP packet, bytes).
	Rate    Rate `json:"rate" toml:"rate"`
	Burst   Size `json:"burst" toml:"burst"`
	Peak    Rate `json:"peak,omitempty" toml:"peak,omitzero"`
	MinUnit Size `json:"min_unit,omitempty" toml:"min_unit,omitzero"`
	MaxUnit Size `json:"max_unit,omitempty" toml:"max_unit,omitzero"`
	// Rspec of guaranteed service: service rate R ≥ r (0: R = r) and
	// slack S in microseconds.
	ServiceRate Rate `json:"service_rate,omitempty" toml:"service_rate,omitzero"`
	Slack       int  `json:"slack_us,omitempty" toml:"slack_us,omitzero"`
	// Enforce chooses shaping or policing ("": the service's default,
	// EffEnforce); best effort has nothing to enforce.
	Enforce Enforcement `json:"enforce,omitempty" toml:"enforce,omitzero"`
	// DSCP marks the reservation's conformant packets (unset: the class
	// voice's for guaranteed, video's for controlled load).
	DSCP DSCP `json:"dscp,omitzero" toml:"dscp,omitzero"`
	// Per-session admission (Q-Pod): at most MaxSessions sockets bound at
	// once (0: any); each session's guarantee PerSessionMinBW and ceiling
	// PerSessionMaxBW.
	MaxSessions     int  `json:"max_sessions,omitempty" toml:"max_sessions,omitzero"`
	PerSessionMaxBW Rate `json:"per_session_maxbw,omitempty" toml:"per_session_maxbw,omitzero"`
	PerSessionMinBW Rate `json:"per_session_minbw,omitempty" toml:"per_session_minbw,omitzero"`
	// Link is the one shaped link the reservation is admitted on and given
	// its HTB leaf on (an RSVP router's outgoing link toward the
	// receiver); "" = every shaped link.
	Link string `json:"link,omitempty" toml:"link,omitzero"`

	Temporary bool `json:"temporary,omitempty" toml:"-"`
}

// NewReservation is a reservation with its unset markers (no DSCP).
func NewReservation(name string) Reservation {
	return Reservation{Name: name, DSCP: NoDSCP}
}

// UnmarshalJSON decodes a reservation strictly, replacing it whole.
func (r *Reservation) UnmarshalJSON(b []byte) error {
	type plain Reservation
	*r = NewReservation("")
	return DecodeJSONObject(b, (*plain)(r), "reservation", nil)
}

// Reservation returns the reservation named name.
func (p *Policy) Reservation(name string) (Reservation, bool) {
	for _, r := range p.Reservations {
		if r.Name == name {
			return r, true
		}
	}
	return Reservation{}, false
}

// EffMinUnit is m with its default.
func (r Reservation) EffMinUnit() Size {
	if r.MinUnit == 0 {
		return DefaultMinUnit
	}
	return r.MinUnit
}

// EffMaxUnit is M with its default.
func (r Reservation) EffMaxUnit() Size {
	if r.MaxUnit == 0 {
		return DefaultMaxUnit
	}
	return r.MaxUnit
}

// EffServiceRate is R: the service rate of guaranteed service (r when not
// set); r for the other services.
func (r Reservation) EffServiceRate() Rate {
	if r.Service == ServiceGuaranteed && r.ServiceRate != 0 {
		return r.ServiceRate
	}
	return r.Rate
}

// EffEnforce is Enforce with the service's default: shape for guaranteed
// service, police for controlled load, "" for best effort.
func (r Reservation) EffEnforce() Enforcement {
	switch {
	case r.Service == ServiceBestEffort:
		return ""
	case r.Enforce != "":
		return r.Enforce
	case r.Service == ServiceGuaranteed:
		return EnforceShape
	}
	return EnforcePolice
}

// Reserved is what admission control counts against a link: R for
// guaranteed service, r for controlled load, nothing for best effort.
func (r Reservation) Reserved() Rate {
	switch r.Service {
	case ServiceGuaranteed:
		return r.EffServiceRate()
	case ServiceControlledLoad:
		return r.Rate
	}
	return 0
}

// BufferPackets is the number of buffers of the reservation's pool,
// ⌈b/m⌉ (seed §III-C: enough for a bucket of minimum-size packets).
func (r Reservation) BufferPackets() uint64 {
	m := uint64(r.EffMinUnit())
	return (uint64(r.Burst) + m - 1) / m
}

// BufferSize is the size of each buffer of the pool: M + L_header rounded
// up to a power of two (seed §III-C).
func (r Reservation) BufferSize() uint64 {
	n := uint64(r.EffMaxUnit() + LinkHeader)
	return 1 << bits.Len64(n-1)
}

// Buffer is the bytes the reservation's pool takes from its link's pool:
// ⌈b/m⌉ × pow2(M + L_header) for guaranteed and controlled-load service,
// 0 for best effort (it gets no pool).
func (r Reservation) Buffer() Size {
	if r.Service != ServiceGuaranteed && r.Service != ServiceControlledLoad {
		return 0
	}
	return Size(units.Mul(r.BufferPackets(), r.BufferSize()))
}

// SessionRule is the rule that selects the reservation's sessions: its
// selectors, action pass.
func (r Reservation) SessionRule() Rule {
	return Rule{Name: r.Name, Exe: r.Exe, Comm: r.Comm, Cgroup: r.Cgroup, Unit: r.Unit, User: r.User,
		Container: r.Container, Image: r.Image, ContainerLabel: r.ContainerLabel,
		Proto: r.Proto, Local: r.Local, Remote: r.Remote, LPort: r.LPort, RPort: r.RPort,
		DSCP: r.DSCP, DSCPIn: NoDSCP, Action: ActionPass}
}

// Unenforced says why nothing can enforce reservation r under p ("" when
// something can): a guaranteed or controlled-load reservation is enforced
// by the HTB tree of a shaped link (one with an egress_rate): its own link,
// or any managed link when it names none. Best effort needs nothing.
func (p *Policy) Unenforced(r Reservation) string {
	if r.Service != ServiceGuaranteed && r.Service != ServiceControlledLoad {
		return ""
	}
	if r.Link != "" {
		if l, ok := p.Link(r.Link); ok && l.EgressRate == 0 {
			return fmt.Sprintf("its link %s has no egress_rate, so nothing shapes or polices it there", r.Link)
		}
		return ""
	}
	for _, l := range p.Links {
		if l.EgressRate > 0 {
			return ""
		}
	}
	if len(p.Links) == 0 {
		return "no link is managed, so nothing shapes or polices it"
	}
	return "no managed link has an egress_rate, so nothing shapes or polices it"
}

// EffResvBuffer is the link's buffer pool for reservations.
func (l Link) EffResvBuffer() Size {
	if l.ResvBuffer == 0 {
		return DefaultResvBuffer
	}
	return l.ResvBuffer
}

func (v *validator) reservations(p *Policy) {
	seen := map[string]bool{}
	for i, r := range p.Reservations {
		obj := v.checkName("reservation", r.Name, i, seen)
		v.maxRates(obj, rateField{"rate", r.Rate}, rateField{"peak", r.Peak}, rateField{"service_rate", r.ServiceRate},
			rateField{"per_session_minbw", r.PerSessionMinBW}, rateField{"per_session_maxbw", r.PerSessionMaxBW})
		sr := r.SessionRule()
		if !sr.HasSelector() {
			v.add(obj, "", "", "a reservation needs a session selector (proto, local, remote, lport, rport, or an app selector: exe, comm, cgroup, unit, user)",
				"e.g. proto = \"udp\" and rport = \"5004\"")
		} else {
			v.ruleSelectors(obj, sr)
		}
		switch r.Service {
		case ServiceGuaranteed, ServiceControlledLoad, ServiceBestEffort:
		case "":
			v.add(obj, "service", "", "missing", "use guaranteed, controlled-load or best-effort")
		default:
			v.add(obj, "service", string(r.Service), "unknown service", "use guaranteed, controlled-load or best-effort")
		}
		v.tspec(obj, r)
		switch {
		case r.Enforce == "":
		case r.Enforce != EnforceShape && r.Enforce != EnforcePolice:
			v.add(obj, "enforce", string(r.Enforce), "unknown enforcement", "use shape (senders wait until they conform) or police (the excess is sent as best effort), or leave it out for the service's default")
		case r.Service == ServiceBestEffort:
			v.add(obj, "enforce", string(r.Enforce), "best-effort service reserves nothing to enforce", "remove enforce, or use service guaranteed or controlled-load")
		}
		if r.Link != "" && !slices.ContainsFunc(p.Links, func(l Link) bool { return l.Name == r.Link }) {
			v.add(obj, "link", r.Link, "not a managed link", "name a [[link]] of the policy, or leave link out to admit on every shaped link")
		}
		if r.DSCP != NoDSCP && !r.DSCP.Valid() {
			v.addNum(obj, "dscp", strconv.Itoa(int(r.DSCP)), "out of range", "use 0..63 or a name such as EF")
		}
		v.sessions(obj, r.MaxSessions, r.PerSessionMinBW, r.PerSessionMaxBW)
		if r.MaxSessions > 0 && r.PerSessionMinBW > 0 && r.Reserved() > 0 {
			if need := units.Mul(Rate(r.MaxSessions), r.PerSessionMinBW); need > r.Reserved() {
				v.add(obj, "per_session_minbw", r.PerSessionMinBW.String(),
					fmt.Sprintf("%d sessions × %s = %s exceed the reservation's %s", r.MaxSessions, r.PerSessionMinBW, need, r.Reserved()),
					"lower per_session_minbw or max_sessions, or reserve more")
			}
		}
	}
}

// tspec checks a reservation's Tspec and Rspec.
func (v *validator) tspec(obj string, r Reservation) {
	m, M := r.EffMinUnit(), r.EffMaxUnit()
	switch {
	case r.Rate == 0:
		v.add(obj, "rate", "", "missing", "give the token rate r, e.g. rate = \"1mbit\" (or \"125kB/s\": RFC 2210 counts bytes/s)")
	case r.Rate < MinReservationRate:
		v.add(obj, "rate", r.Rate.String(), "below "+MinReservationRate.String(), "reserve at least "+MinReservationRate.String())
	}
	if r.Peak != 0 && r.Peak < r.Rate {
		v.add(obj, "peak", r.Peak.String(), "below the token rate "+r.Rate.String(), "the peak rate p must be at least r, or 0 for no peak limit")
	}
	if M > MaxMaxUnit {
		v.addNum(obj, "max_unit", strconv.FormatUint(uint64(M), 10), fmt.Sprintf("above %d bytes, the largest IP packet", MaxMaxUnit), "use the path MTU, e.g. 1500")
	}
	if m > M {
		v.addNum(obj, "min_unit", strconv.FormatUint(uint64(m), 10), fmt.Sprintf("above the maximum packet size M = %d", M), "m must be at most M")
	}
	switch {
	case r.Burst == 0:
		v.add(obj, "burst", "", "missing", fmt.Sprintf("give the bucket depth b, at least one packet of M = %d bytes, e.g. burst = \"16KiB\"", M))
	case r.Burst < M:
		v.addNum(obj, "burst", strconv.FormatUint(uint64(r.Burst), 10), fmt.Sprintf("smaller than the maximum packet size M = %d: such a packet could never conform", M),
			fmt.Sprintf("use at least %d, or lower max_unit", M))
	case r.Burst > MaxReservationBurst:
		v.add(obj, "burst", r.Burst.String(), "larger than "+MaxReservationBurst.String(), "use at most "+MaxReservationBurst.String())
	}
	if r.Service == ServiceGuaranteed {
		if r.ServiceRate != 0 && r.ServiceRate < r.Rate {
			v.add(obj, "service_rate", r.ServiceRate.String(), "below the token rate "+r.Rate.String(), "guaranteed service needs R ≥ r (leave it out for R = r)")
		}
		if r.Slack < 0 {
			v.addNum(obj, "slack_us", strconv.Itoa(r.Slack), "negative", "the slack S is ≥ 0 microseconds")
		}
	} else {
		if r.ServiceRate != 0 {
			v.add(obj, "service_rate", r.ServiceRate.String(), "only guaranteed service has a service rate (Rspec)", "remove service_rate or use service guaranteed")
		}
		if r.Slack != 0 {
			v.addNum(obj, "slack_us", strconv.Itoa(r.Slack), "only guaranteed service has a slack term (Rspec)", "remove slack_us or use service guaranteed")
		}
	}
}

// sessions checks per-session admission fields (of a rule or a
// reservation).
func (v *validator) sessions(obj string, n int, minbw, maxbw Rate) {
	if n < 0 || n > MaxSessions {
		v.addNum(obj, "max_sessions", strconv.Itoa(n), "out of range", fmt.Sprintf("use 1..%d, or 0 for no limit", MaxSessions))
	}
	if (minbw != 0 || maxbw != 0) && n == 0 {
		f, val := "per_session_minbw", minbw
		if minbw == 0 {
			f, val = "per_session_maxbw", maxbw
		}
		v.add(obj, f, val.String(), "set without max_sessions: per-session admission needs a session count", "add max_sessions = N")
	}
	if maxbw != 0 && minbw > maxbw {
		v.add(obj, "per_session_minbw", minbw.String(), "greater than per_session_maxbw "+maxbw.String(), "a session's guarantee cannot exceed its ceiling")
	}
	if (minbw != 0 || maxbw != 0) && n > MaxSessionLeaves {
		v.addNum(obj, "max_sessions", strconv.Itoa(n), fmt.Sprintf("above %d with per-session bandwidth: each session gets an HTB leaf of its own, at most %d per rule or reservation", MaxSessionLeaves, MaxSessionLeaves),
			fmt.Sprintf("use max_sessions ≤ %d, or drop per_session_minbw/per_session_maxbw", MaxSessionLeaves))
	}
}

// reservationContributions are the reservations' shares of every shaped
// link's reservable capacity and their sum.
func (p *Policy) reservationContributions() ([]Contribution, Rate) {
	return p.reservationContributionsOn("")
}

// reservationContributionsOn are those counted on link: a reservation
// with a Link only on that one ("" counts every reservation).
func (p *Policy) reservationContributionsOn(link string) ([]Contribution, Rate) {
	var cs []Contribution
	var total Rate
	for _, r := range p.Reservations {
		if link != "" && r.Link != "" && r.Link != link {
			continue
		}
		if x := r.Reserved(); x > 0 {
			cs = append(cs, Contribution{"reservation", r.Name, x})
			total = units.Add(total, x)
		}
	}
	return cs, total
}

// admitBuffers checks each shaped link's buffer pool against the
// reservations' buffers: Σ ⌈b/m⌉ × pow2(M + L_header) ≤ the link's
// resv_buffer.
func (p *Policy) admitBuffers(source string) Errors {
	var errs Errors
	for i, l := range p.Links {
		var total Size
		var cs []string
		for _, r := range p.Reservations {
			if r.Link != "" && r.Link != l.Name {
				continue
			}
			if b := r.Buffer(); b > 0 {
				total = units.Add(total, b)
				cs = append(cs, fmt.Sprintf("reservation %s %d B (%d × %d)", r.Name, uint64(b), r.BufferPackets(), r.BufferSize()))
			}
		}
		if l.EgressRate == 0 || total <= l.EffResvBuffer() {
			continue
		}
		errs = append(errs, &FieldError{
			Source: source, Object: objectLabel("link", l.Name, i),
			Reason: fmt.Sprintf("reservation buffers %d B exceed the buffer pool %d B (resv_buffer) — ⌈b/m⌉ buffers of pow2(M + %d) bytes each: %s",
				uint64(total), uint64(l.EffResvBuffer()), LinkHeader, joinFirst(cs, 5)),
			Fix: "lower a reservation's burst, raise its min_unit, or raise the link's resv_buffer",
		})
	}
	return errs
}

func joinFirst(s []string, n int) string {
	out := ""
	for i, x := range s {
		if i == n {
			return out + fmt.Sprintf(", and %d more", len(s)-n)
		}
		if i > 0 {
			out += ", "
		}
		out += x
	}
	return out
}
