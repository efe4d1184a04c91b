package derive

import (
	"net/netip"
	"sort"
	"strconv"
	"strings"

	"github.com/hostqos/hostqos/internal/datapath"
	"github.com/hostqos/hostqos/internal/policy"
	"github.com/hostqos/hostqos/internal/units"
)

// Front doors that become rules. Each contributor adds rules (or session
// groups) under a key prefix of its own, which no user rule can have
// (policy names allow no ':' or '/'), so the store keeps their slots and ids
// apart from the user's. The order of the table is the order their rules
// follow the user's rules in (the evaluation order among rules of one
// precedence).
var contributors = []contributor{
	{name: "session groups", prefix: SessionPrefix, add: sessionGroups},
	{name: "protected clients", prefix: ProtPrefix, add: protectedClients},
	{name: "reservations", prefix: ResvPrefix, add: reservations},
	{name: "kubernetes pods", prefix: PodPrefix, add: pods},
}

type contributor struct {
	name   string
	prefix string
	add    func(in *Input, x *Expansion)
}

// Key prefixes of the contributors.
const (
	// SessionPrefix keys the session group (reservation id) of a rule
	// with max_sessions: "rule:NAME".
	SessionPrefix = "rule:"
	// ResvPrefix keys a reservation's rule and its id: "resv:NAME".
	ResvPrefix = "resv:"
	// ProtPrefix keys a protected client's rule: "prot:ADDR:PORT".
	ProtPrefix = "prot:"
)

// ResvKey is the key of reservation name's rule and id.
func ResvKey(name string) string { return ResvPrefix + name }

// SessionKey is the key of the session group of rule name.
func SessionKey(name string) string { return SessionPrefix + name }

// ProtKey is the key of a protected client's rule.
func ProtKey(ap netip.AddrPort) string { return ProtPrefix + ap.String() }

// Contributed reports whether a rule name is one a contributor made (not
// a user's).
func Contributed(name string) bool { return strings.ContainsAny(name, ":/") }

// Expansion is the policy with the contributors' rules in it.
type Expansion struct {
	// Policy is the input's policy with the contributed rules (the
	// input's own when nothing was contributed; never changed in place).
	Policy *policy.Policy
	// ResvKeys are the keys that need a datapath reservation id, sorted
	// (one per reservation and per rule with a session limit).
	ResvKeys []string
	// attached is what contributed rules carry beyond a policy.Rule, by
	// rule name.
	attached map[string]attachment
	owned    bool // Policy.Rules is the expansion's own copy
}

// attachment is what a rule of the expansion carries beyond its
// policy.Rule: the reservation or session group that counts its sessions,
// the one link whose HTB tree holds its leaves, and the pod whose
// containers it selects.
type attachment struct {
	resv *resvSpec
	link string // "": every link
	pod  string // the UID of the pod whose containers the rule selects
}

// resvSpec is a reservation of the datapath, before its id and the
// default class's leaf are known.
type resvSpec struct {
	key   string // its id's key (ResvKeys)
	shape bool   // shaped to its Tspec (its leaf: shaper.TspecShape)
	r     datapath.Reservation
	// sessionGroup: a rule's session limit only (no Tspec); it applies
	// while the rule passes traffic unpoliced.
	sessionGroup bool
	// Sessions with a leaf each (see sessionLeaves).
	sessions          int
	sessionMinBW, max policy.Rate
}

// Expand adds the contributors' rules to in's policy.
func Expand(in Input) *Expansion {
	x := &Expansion{Policy: in.Policy}
	for _, c := range contributors {
		c.add(&in, x)
	}
	sort.Strings(x.ResvKeys)
	return x
}

// rules returns the expansion's rules to change or append to, copying the
// input's first.
func (x *Expansion) rules() *[]policy.Rule {
	if !x.owned {
		p := *x.Policy
		p.Rules = append(make([]policy.Rule, 0, len(p.Rules)+8), p.Rules...)
		x.Policy, x.owned = &p, true
	}
	return &x.Policy.Rules
}

func (x *Expansion) attach(name string, a attachment) {
	if x.attached == nil {
		x.attached = map[string]attachment{}
	}
	x.attached[name] = a
}

// sessionGroups: a rule with max_sessions counts its sessions in a
// session group of its own (SessionKey), and its per-session guarantee and
// ceiling, times max_sessions, become the rule's own when it sets none.
func sessionGroups(_ *Input, x *Expansion) {
	for i, r := range x.Policy.Rules {
		if r.MaxSessions == 0 {
			continue
		}
		x.ResvKeys = append(x.ResvKeys, SessionKey(r.Name))
		x.attach(r.Name, attachment{resv: &resvSpec{key: SessionKey(r.Name), sessionGroup: true,
			r:        datapath.Reservation{Service: datapath.ServiceNone, DSCP: -1, DemoteDSCP: -1, MaxSessions: uint32(r.MaxSessions)},
			sessions: r.MaxSessions, sessionMinBW: r.PerSessionMinBW, max: r.PerSessionMaxBW}})
		if r.EffectiveAction() != policy.ActionPass {
			continue
		}
		n := policy.Rate(r.MaxSessions)
		minbw, maxbw := r.MinBW, r.MaxBW
		if r.PerSessionMinBW > 0 && minbw == 0 {
			minbw = units.Mul(n, r.PerSessionMinBW)
		}
		if r.PerSessionMaxBW > 0 && maxbw == 0 {
			maxbw = units.Mul(n, r.PerSessionMaxBW)
		}
		if minbw != r.MinBW || maxbw != r.MaxBW {
			rs := x.rules()
			(*rs)[i].MinBW, (*rs)[i].MaxBW = minbw, maxbw
		}
	}
}

// Classes a reservation's rule goes into (when the policy has them).
const (
	guaranteedClass     = "voice"
	controlledLoadClass = "interactive"
)

// ResvPrecedence is the precedence of a reservation's rule: before every
// rule and admin run.
const ResvPrecedence = policy.MaxPrecedence

// reservations: each reservation becomes a rule (ResvKey) with its
// session selector, evaluated before the other rules, that names a
// datapath reservation: its Tspec in bytes/s and bytes, its service, its
// session limit and, when it is shaped, the send buffer of its sockets.
// The rule's HTB leaf is the reservation's. Shaped (the default of
// guaranteed service): every packet goes to the leaf, which holds it to
// the Tspec (shaper.TspecShape, attached by attachReservation) with a
// queue of at least ⌈b/m⌉ packets (datapath.FlowControl), so its senders
// wait. Policed (the default of controlled load): the leaf is guaranteed
// what was reserved (R or r), the excess is demoted to the default
// class.
func reservations(_ *Input, x *Expansion) {
	p := x.Policy
	for _, rv := range p.Reservations {
		ru := rv.SessionRule()
		ru.Name, ru.Precedence = ResvKey(rv.Name), ResvPrecedence
		ru.Class = policy.DefaultClassName
		spec := &resvSpec{key: ResvKey(rv.Name), sessions: rv.MaxSessions, sessionMinBW: rv.PerSessionMinBW, max: rv.PerSessionMaxBW,
			r: datapath.Reservation{
				Rate: uint64(rv.Rate) / 8, Bucket: uint64(rv.Burst), Peak: uint64(rv.Peak) / 8,
				MinUnit: uint32(rv.EffMinUnit()), MaxUnit: uint32(rv.EffMaxUnit()),
				DSCP: -1, DemoteDSCP: -1, MaxSessions: uint32(rv.MaxSessions), Service: datapath.ServiceBestEffort,
			}}
		switch rv.Service {
		case policy.ServiceGuaranteed:
			ru.Class = classOr(p, guaranteedClass)
		case policy.ServiceControlledLoad:
			ru.Class = classOr(p, controlledLoadClass)
		}
		switch rv.EffEnforce() {
		case policy.EnforceShape:
			ru.MinBW, ru.MaxBW = rv.Reserved(), rv.Reserved()
			spec.r.Service = datapath.ServiceGuaranteed
			spec.r.SendBuffer, _ = datapath.FlowControl(spec.r.Bucket, spec.r.MinUnit, spec.r.MaxSessions)
			spec.shape = true
		case policy.EnforcePolice:
			ru.MinBW = rv.Reserved()
			spec.r.Service = datapath.ServiceControlledLoad
		}
		if rv.MaxSessions > 0 && rv.PerSessionMaxBW > 0 && ru.MaxBW == 0 {
			ru.MaxBW = units.Mul(policy.Rate(rv.MaxSessions), rv.PerSessionMaxBW)
		}
		rs := x.rules()
		*rs = append(*rs, ru)
		x.ResvKeys = append(x.ResvKeys, spec.key)
		x.attach(ru.Name, attachment{resv: spec, link: rv.Link})
	}
}

// classOr is name when the policy has that class, else the default class.
func classOr(p *policy.Policy, name string) string {
	if _, ok := p.Class(name); ok {
		return name
	}
	return policy.DefaultClassName
}

// ProtectedClass is the class a protected client's flows go into when
// the request names none (the default class when the policy lacks it).
const ProtectedClass = "interactive"

// ProtPrecedence is the precedence of an admin's protected client.
const ProtPrecedence = policy.MaxPrecedence

// protectedClients (docs/ddos.md, "Protected clients get a class"):
// besides its XDP entry (never SYN-throttled), each protected client
// becomes a rule (ProtKey): remote = the client's address, proto tcp and
// lport = the protected port (any protocol and port when 0, the admin's
// "every port"), class = the class the entry names; so the answers to the
// client leave with that class's DSCP, priority and HTB leaf. A client
// protected by root or group hostqos is evaluated with the reservations,
// before the admin's ordinary rules; one protected by an ordinary user
// compiles as a rule of that user's tier (like their runs: after every
// admin rule, and only for sockets of their uid), so the admin's drops,
// limits and marks win.
func protectedClients(in *Input, x *Expansion) {
	if in.Shield == nil || len(in.Shield.Protected) == 0 {
		return
	}
	list := append([]Protected(nil), in.Shield.Protected...)
	sort.Slice(list, func(i, j int) bool { return list[i].Client.Compare(list[j].Client) < 0 })
	rs := x.rules()
	for _, pc := range list {
		ap := pc.Client
		class := pc.Class
		if class == "" {
			class = ProtectedClass
		}
		r := policy.Rule{
			Name:   ProtKey(ap),
			Remote: netip.PrefixFrom(ap.Addr(), ap.Addr().BitLen()),
			Class:  classOr(x.Policy, class),
			DSCP:   policy.NoDSCP, DSCPIn: policy.NoDSCP, // the class's DSCP, any incoming
		}
		if ap.Port() != 0 {
			r.Proto, r.LPort = "tcp", policy.PortRange{From: ap.Port(), To: ap.Port()}
		}
		if pc.Admin {
			r.Precedence = ProtPrecedence
		} else {
			r.UserRun, r.User = true, strconv.FormatUint(uint64(pc.UID), 10)
		}
		*rs = append(*rs, r)
	}
}
