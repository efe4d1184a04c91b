package api

import (
	"context"
	"fmt"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
)

// RouteExplain answers why a flow or an app gets what it gets
// (ExplainQuery in the query string, Explanation back).
const RouteExplain = "GET /v1/explain"

// Bounds of an explanation: at most MaxExplainRules rule checks (the
// earliest in evaluation order, and every rule that may match) and
// MaxExplainFlows flows of the flow table; the totals still count all.
const (
	MaxExplainRules = 256
	MaxExplainFlows = 32
	// MaxExplainPath bounds the executable path of a query.
	MaxExplainPath = 4096
)

// ExplainQuery asks why a flow, or an app, gets what it gets. It names an
// app (a process, or an executable), a flow (any of its 5-tuple's parts,
// from this host's side: local is this host's address), or both; the
// parts of a flow that are not given match any flow's. At least one part
// must be given.
type ExplainQuery struct {
	PID int    // a process (0: none)
	Exe string // an executable's absolute path ("": none)
	// The flow: proto "tcp", "udp" or "icmp" ("" any); addresses (zero:
	// any); ports (0: any).
	Proto         string
	Local, Remote netip.Addr
	LPort, RPort  uint16
	// DSCP is the DSCP the flow's packets carry when they reach the
	// classifier, for rules that select by it (dscp_in); nil: unknown.
	DSCP *int
}

// HasFlow reports whether q names any part of a flow.
func (q ExplainQuery) HasFlow() bool {
	return q.Proto != "" || q.Local.IsValid() || q.Remote.IsValid() || q.LPort != 0 || q.RPort != 0
}

// values encodes q as the route's query string.
func (q ExplainQuery) values() url.Values {
	v := url.Values{}
	if q.PID != 0 {
		v.Set("pid", strconv.Itoa(q.PID))
	}
	if q.Exe != "" {
		v.Set("exe", q.Exe)
	}
	if q.Proto != "" {
		v.Set("proto", q.Proto)
	}
	if q.Local.IsValid() {
		v.Set("local", q.Local.String())
	}
	if q.Remote.IsValid() {
		v.Set("remote", q.Remote.String())
	}
	if q.LPort != 0 {
		v.Set("lport", strconv.Itoa(int(q.LPort)))
	}
	if q.RPort != 0 {
		v.Set("rport", strconv.Itoa(int(q.RPort)))
	}
	if q.DSCP != nil {
		v.Set("dscp", strconv.Itoa(*q.DSCP))
	}
	return v
}

// ParseExplainQuery reads an ExplainQuery from the route's query string
// (the daemon's side of its encoding) and checks it.
func ParseExplainQuery(v url.Values) (ExplainQuery, error) {
	var q ExplainQuery
	for k, vals := range v {
		switch k {
		case "pid", "exe", "proto", "local", "remote", "lport", "rport", "dscp":
		default:
			return q, &ParamError{Param: clip(k), Reason: "unknown parameter; known: pid, exe, proto, local, remote, lport, rport, dscp"}
		}
		if len(vals) > 1 {
			return q, &ParamError{Param: k, Reason: "given more than once"}
		}
	}
	num := func(key string, lo, hi int) (int, error) {
		s := v.Get(key)
		if s == "" {
			return 0, nil
		}
		n, err := strconv.Atoi(s)
		if err != nil || n < lo || n > hi {
			return 0, &ParamError{Param: key, Value: clip(s), Reason: fmt.Sprintf("want a whole number %d … %d", lo, hi)}
		}
		return n, nil
	}
	var err error
	if q.PID, err = num("pid", 1, 1<<22); err != nil {
		return q, err
	}
	lport, err := num("lport", 1, 65535)
	if err != nil {
		return q, err
	}
	rport, err := num("rport", 1, 65535)
	if err != nil {
		return q, err
	}
	q.LPort, q.RPort = uint16(lport), uint16(rport)
	if s := v.Get("dscp"); s != "" {
		d, err := num("dscp", 0, 63)
		if err != nil {
			return q, err
		}
		q.DSCP = &d
	}
	q.Exe = v.Get("exe")
	switch {
	case len(q.Exe) > MaxExplainPath:
		return q, &ParamError{Param: "exe", Value: clip(q.Exe), Reason: fmt.Sprintf("longer than %d bytes", MaxExplainPath)}
	case q.Exe != "" && !strings.HasPrefix(q.Exe, "/"):
		return q, &ParamError{Param: "exe", Value: clip(q.Exe), Reason: "want an absolute path, e.g. /usr/bin/curl"}
	}
	switch q.Proto = v.Get("proto"); q.Proto {
	case "", "tcp", "udp", "icmp":
	default:
		return q, &ParamError{Param: "proto", Value: clip(q.Proto), Reason: "want tcp, udp or icmp"}
	}
	for _, a := range []struct {
		key string
		dst *netip.Addr
	}{{"local", &q.Local}, {"remote", &q.Remote}} {
		if s := v.Get(a.key); s != "" {
			if *a.dst, err = netip.ParseAddr(s); err != nil || a.dst.Zone() != "" {
				return q, &ParamError{Param: a.key, Value: clip(s), Reason: "want an IPv4 or IPv6 address, e.g. 198.18.0.2 or 2001:db8::2"}
			}
			*a.dst = a.dst.Unmap()
		}
	}
	if q.Local.IsValid() && q.Remote.IsValid() && q.Local.Is4() != q.Remote.Is4() {
		return q, &ParamError{Param: "remote", Value: q.Remote.String(), Reason: "of another address family than local " + q.Local.String()}
	}
	if (q.LPort != 0 || q.RPort != 0) && q.Proto == "icmp" {
		return q, &ParamError{Param: "proto", Value: q.Proto, Reason: "ICMP has no ports; give tcp or udp with lport/rport"}
	}
	if q.PID == 0 && q.Exe == "" && !q.HasFlow() {
		return q, &ParamError{Param: "pid", Reason: "say what to explain: a process (pid), an executable (exe), or a flow (proto, local, remote, lport, rport)"}
	}
	return q, nil
}

// clip cuts a value quoted in an error to 64 bytes.
func clip(s string) string {
	if len(s) <= 64 {
		return s
	}
	return strings.ToValidUTF8(s[:64], "") + "…"
}

// Explanation is the answer to GET /v1/explain: the policy evaluated for
// the subject the query names, rule by rule, in the order the datapath
// evaluates them, what the rule that wins gives, and, from the datapath's
// own counters, what happened to the subject's flows.
type Explanation struct {
	// Subject says what was explained, e.g. "flow tcp 198.18.0.1:40000 →
	// 198.18.0.2:443 of curl[1234]" or "app curl[1234]".
	Subject string `json:"subject"`
	// Flow is the flow explained, when the query (or the one flow of the
	// flow table it matched) gives it whole.
	Flow *ExplainFlowKey `json:"flow,omitempty"`
	// App is the app identity the rules were checked against (nil: none
	// was named, and the flow's socket is not known).
	App *ExplainApp `json:"app,omitempty"`
	// Generation is the datapath's policy generation.
	Generation uint64 `json:"generation"`
	// RuleCount is how many rules the datapath evaluates, in order.
	RuleCount int `json:"rule_count"`
	// Rules are the rules checked against the subject, in evaluation
	// order up to the first that matches for certain (at most
	// MaxExplainRules; RulesOmitted more were not listed).
	Rules        []RuleCheck `json:"rules"`
	RulesOmitted int         `json:"rules_omitted,omitempty"`
	// Match is the first rule that matches for certain; nil when none
	// does (the subject gets the default class) or when it cannot be
	// told (an app without a flow: see Rules).
	Match *ExplainMatch `json:"match,omitempty"`
	// Service is what the subject gets by the policy as it is now: the
	// match's, or the default class's when no rule can match; nil when it
	// depends on what is not known (an app's flows: see Flows).
	Service *ExplainService `json:"service,omitempty"`
	// Drops are where the subject's packets can be dropped by the policy
	// in force, with the counters kept there, shared with the other
	// flows they count (a flow's own counts are in Flows).
	Drops []ExplainDrop `json:"drops,omitempty"`
	// Off are rules not in force now (outside their schedule); they were
	// not considered.
	Off []string `json:"off,omitempty"`
	// Flows are the subject's flows in the datapath's flow table (at most
	// MaxExplainFlows, the busiest first, of FlowsTotal).
	Flows      []FlowExplanation `json:"flows"`
	FlowsTotal int               `json:"flows_total"`
	// Notes are what else the answer depends on.
	Notes []string `json:"notes,omitempty"`
}

// ExplainFlowKey is a flow's 5-tuple, from this host's side.
type ExplainFlowKey struct {
	Proto  string `json:"proto"`
	Local  string `json:"local"`
	Remote string `json:"remote"`
}

// String writes the key as "tcp 198.18.0.1:40000 → 198.18.0.2:443".
func (k ExplainFlowKey) String() string { return k.Proto + " " + k.Local + " → " + k.Remote }

// ExplainApp is an app identity as the datapath's sock_create program
// records it for a socket: the executable, the command name, the user
// and the cgroup of the process that creates it.
type ExplainApp struct {
	PID    uint32  `json:"pid,omitempty"`
	Exe    string  `json:"exe,omitempty"`
	Comm   string  `json:"comm,omitempty"`
	UID    *uint32 `json:"uid,omitempty"`
	Cgroup string  `json:"cgroup,omitempty"`
	// Unknown names the parts of the identity that are not known (an
	// executable named without a process: comm, user, cgroup).
	Unknown []string `json:"unknown,omitempty"`
}

// RuleCheck is how one rule fares against the subject.
type RuleCheck struct {
	// Position is the rule's place in evaluation order (1 first).
	Position int    `json:"position"`
	Rule     string `json:"rule"`
	// Result is "matched" (every selector matched), "no" (some selector
	// failed) or "maybe" (none failed, some depend on what is not known).
	Result string `json:"result"`
	// Failed are the selectors that did not match; Undecided those that
	// cannot be told for the subject.
	Failed    []SelectorCheck `json:"failed,omitempty"`
	Undecided []SelectorCheck `json:"undecided,omitempty"`
	// State is the rule's runtime state when it differs from the policy
	// as written ("over its quota: block").
	State string `json:"state,omitempty"`
}

// Results of a RuleCheck.
const (
	CheckMatched = "matched"
	CheckNo      = "no"
	CheckMaybe   = "maybe"
)

// SelectorCheck is one selector of a rule: what the rule wants and what
// the subject has ("" when not known).
type SelectorCheck struct {
	Selector string `json:"selector"`
	Want     string `json:"want"`
	Got      string `json:"got,omitempty"`
}

// ExplainMatch is the rule that wins.
type ExplainMatch struct {
	Rule     string `json:"rule"`
	Position int    `json:"position"`
}

// ExplainService is what a rule (or, when none matches, the default
// class) gives a flow.
type ExplainService struct {
	// Rule is the rule that gives it ("": none matched).
	Rule string `json:"rule,omitempty"`
	// Action is "pass", "drop" or "observe" (counted, nothing changed).
	Action string `json:"action"`
	// Class is the service class; Priority its priority (0 highest).
	Class    string `json:"class,omitempty"`
	Priority int    `json:"priority"`
	// DSCP is the mark the flow's packets leave with (nil: left as the
	// application set it).
	DSCP *int `json:"dscp,omitempty"`
	// Police is the rule's policer, MaxBWIn its download limit (bit/s).
	Police  *ExplainPolicer `json:"police,omitempty"`
	MaxBWIn uint64          `json:"maxbw_in,omitempty"`
	// Leaves are the HTB leaves its packets wait in, one per shaped link.
	Leaves []ExplainLeaf `json:"leaves,omitempty"`
	// Sessions are its reservation or session limit.
	Sessions *ExplainSessions `json:"sessions,omitempty"`
	// State is the rule's runtime state when it differs from the policy
	// as written ("over its quota: block").
	State string `json:"state,omitempty"`
}

// ExplainPolicer is a rule's policer: the rate it passes (bit/s) with a
// bucket of Burst bytes; what exceeds it is dropped.
type ExplainPolicer struct {
	Rate  uint64 `json:"rate"`
	Burst uint32 `json:"burst"`
}

// ExplainLeaf is an HTB leaf on a shaped link: its class id, guarantee
// (Rate) and ceiling (bit/s), and its queue's counters, shared by every
// flow the leaf carries (Flows of them are in the flow table now).
type ExplainLeaf struct {
	Link       string `json:"link"`
	ClassID    string `json:"classid"`
	Label      string `json:"label"`
	Rate       uint64 `json:"rate"`
	Ceil       uint64 `json:"ceil"`
	Packets    uint64 `json:"packets"`
	Drops      uint64 `json:"drops"`
	Overlimits uint64 `json:"overlimits"`
	Backlog    uint32 `json:"backlog"`
	Flows      int    `json:"flows"`
}

// ExplainSessions is a rule's reservation (Reservation set) or session
// limit, as admitted, with its counters, shared by its sessions.
type ExplainSessions struct {
	Reservation string `json:"reservation,omitempty"`
	// Service is guaranteed, controlled-load or best-effort ("" a
	// session limit only); Rate (bit/s), Burst (bytes) and Peak (bit/s)
	// its Tspec.
	Service string `json:"service,omitempty"`
	Rate    uint64 `json:"rate,omitempty"`
	Burst   uint64 `json:"burst,omitempty"`
	Peak    uint64 `json:"peak,omitempty"`
	// Link is the link it was admitted on ("" every link).
	Link        string `json:"link,omitempty"`
	MaxSessions int    `json:"max_sessions,omitempty"`
	Sessions    int64  `json:"sessions"`
	// RefusedConnects and RefusedSends are calls refused for being over
	// MaxSessions (EPERM).
	RefusedConnects uint64 `json:"refused_connects"`
	RefusedSends    uint64 `json:"refused_sends"`
	// Conformance of its packets to the Tspec: non-conformant packets are
	// not dropped (controlled load sends them as best effort, guaranteed
	// service's leaf shapes them).
	ConformantPackets    uint64 `json:"conformant_packets"`
	NonConformantPackets uint64 `json:"nonconformant_packets"`
	OversizePackets      uint64 `json:"oversize_packets"`
}

// FlowExplanation is one flow of the datapath's flow table: what the
// policy gives it now, and what the datapath did with it.
type FlowExplanation struct {
	ExplainFlowKey
	PID  uint32 `json:"pid,omitempty"`
	Comm string `json:"comm,omitempty"`
	UID  uint32 `json:"uid"`
	// Rule is the rule the policy gives the flow now ("": none) at
	// Position; Certain is false when that depends on what is not known
	// (its process is gone, or the DSCP its packets carry).
	Rule     string `json:"rule,omitempty"`
	Position int    `json:"position,omitempty"`
	Certain  bool   `json:"certain"`
	// Kernel is the flow as the datapath holds it.
	Kernel KernelFlow `json:"kernel"`
	// Service is what the datapath's rule for it gives.
	Service ExplainService `json:"service"`
	// Drops are the places its packets can be dropped, with the counts.
	Drops []ExplainDrop `json:"drops,omitempty"`
	Notes []string      `json:"notes,omitempty"`
}

// KernelFlow is a flow's flow-table entry: the rule the datapath
// classified it under at its first packet (or its first after a policy
// change), and its counters of both directions.
type KernelFlow struct {
	Rule string `json:"rule,omitempty"`
	// Current: classified under the policy in force; otherwise under an
	// earlier one, and its next packet is classified again.
	Current bool `json:"current"`
	// Agrees: the datapath's rule is the one the policy gives it now.
	Agrees  bool    `json:"agrees"`
	Out     Counter `json:"out"`
	In      Counter `json:"in"`
	AgeSec  float64 `json:"age_s"`
	IdleSec float64 `json:"idle_s"`
}

// ExplainDrop is one place a flow's packets can be dropped, by whom and
// why, with what the datapath counted there.
type ExplainDrop struct {
	// Cause is drop_rule, policer, download_limit, ingress_budget,
	// xdp_block, xdp_quarantine, syn_limit or queue.
	Cause string `json:"cause"`
	// By names who drops: "rule NAME", "block PREFIX", "link NAME",
	// "link NAME leaf CLASSID".
	By string `json:"by"`
	// Packets are the drops counted. Scope "flow": this flow's own;
	// "shared": a counter of the rule, prefix, link or leaf, which
	// SharedBy flows of the flow table share now (0: not known).
	Packets  uint64 `json:"packets"`
	Scope    string `json:"scope"`
	SharedBy int    `json:"shared_by,omitempty"`
	Why      string `json:"why"`
}

// Scopes of an ExplainDrop.
const (
	ScopeFlow   = "flow"
	ScopeShared = "shared"
)

// Explain asks the daemon why a flow or an app gets what it gets.
func (c *Client) Explain(ctx context.Context, q ExplainQuery) (Explanation, error) {
	var out Explanation
	path := Path(RouteExplain)
	if v := q.values(); len(v) > 0 {
		path += "?" + v.Encode()
	}
	err := c.Do(ctx, Method(RouteExplain), path, nil, &out)
	return out, err
}
