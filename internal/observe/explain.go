package observe

import (
	"errors"
	"fmt"
	"net/netip"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/datapath"
	"github.com/hostqos/hostqos/internal/datapath/xdp"
	"github.com/hostqos/hostqos/internal/derive"
	"github.com/hostqos/hostqos/internal/policy"
)

// Explanations (`hostqos explain`): why a flow, or an app, gets what it
// gets. The policy the datapath holds (the last derive's rules, in
// evaluation order) is checked rule by rule against the subject with the
// datapath's reference evaluation (datapath.CheckRule), which says which
// selector of each rule failed; then the datapath's flow table says how
// the subject's flows were really classified, and its counters (the
// flows', the rules', the reservations', the XDP shield's and the HTB
// leaves') where their packets were dropped. Counters of a rule, a prefix,
// a link or a leaf are shared by every flow they count: the answer says
// by how many of the flow table's.

// ExplainKernel is what an explanation reads of the kernel; the engine's
// Kernel has all of it.
type ExplainKernel interface {
	Kernel
	ReservationCounters() (map[uint16]datapath.ResvCounters, error)
	Bindings() ([]datapath.Binding, error)
	Generation() uint32
}

// ShieldCounters is what an explanation reads of the XDP shield.
type ShieldCounters interface {
	BlockCounters() ([]xdp.BlockCounters, error)
	SynCounters(ifindex int) (xdp.SynCounters, error)
}

// ExplainView is the engine as an explanation reads it: one snapshot
// taken under the engine's lock (nothing in it is changed afterwards).
type ExplainView struct {
	// Kernel is nil while the datapath is not loaded; Shield nil without
	// the XDP shield.
	Kernel ExplainKernel
	Shield ShieldCounters
	// Desired is what the last derive gave the kernel (nil before the
	// first).
	Desired *derive.Desired
	// Rules name the rule slots (as RuleView's do).
	Rules []Rule
	// Hidden are the slots of rules the caller may not see (another
	// user's run or object): they are left out of the answer.
	Hidden map[int]bool
	// Written are the rules as written, by the name the answer gives
	// them (a reservation's session rule by "reservation/NAME"), for
	// what their selectors want.
	Written map[string]policy.Rule
	// Resv names the datapath's reservations and session groups by id:
	// "reservation/NAME", or the name of the rule whose session limit it
	// is.
	Resv map[uint16]string
	// Links are the managed links as the policy has them; Up those set up
	// now (name → ifindex).
	Links []policy.Link
	Up    map[string]int
}

// AppIdentity is a process's (or an executable's) app identity: what the
// datapath's sock_create program would record for a socket it creates,
// with the paths that name it.
type AppIdentity struct {
	Ident datapath.Identity
	// Unknown are the parts of Ident that are not known.
	Unknown datapath.Selectors
	// Exe and Cgroup are the executable's path and the cgroup's path
	// (relative to the cgroup2 root).
	Exe, Cgroup string
}

// ExplainRequest is a query with what the engine resolved of it.
type ExplainRequest struct {
	Query api.ExplainQuery
	// App is the identity of the process or executable the query names
	// (nil: it names none).
	App *AppIdentity
	// UID, when >= 0, limits the flows to that user's.
	UID int64
	// Identify resolves the identity of a flow's process now (nil: not
	// resolved, the flows' app selectors stay undecided).
	Identify func(pid uint32) (*AppIdentity, error)
}

// maxIdentified bounds the processes one explanation resolves.
const maxIdentified = 256

// Explain answers req over the snapshot v.
func Explain(v ExplainView, req ExplainRequest) (api.Explanation, error) {
	if v.Kernel == nil || v.Desired == nil {
		return api.Explanation{}, errors.New("explain: the datapath is not loaded (hostqos down?)")
	}
	x := newExplainer(v, req)
	if err := x.walkFlows(); err != nil {
		return api.Explanation{}, err
	}
	out := api.Explanation{Generation: uint64(x.gen), RuleCount: len(x.visible), Flows: []api.FlowExplanation{}}
	s, app := x.subject(&out)
	out.App = app
	x.checkRules(&out, s)
	if err := x.explainFlows(&out); err != nil {
		return api.Explanation{}, err
	}
	if out.Service != nil {
		out.Drops = x.drops(out.Service, s.Key, nil)
	}
	out.Off = x.offRules()
	x.notes(&out, s)
	return out, nil
}

// explainer is one explanation under way.
type explainer struct {
	v   ExplainView
	req ExplainRequest
	gen uint32
	// visible are the indexes of the datapath's rules the caller sees,
	// in evaluation order (their positions are 1, 2, ...).
	visible []int
	pos     map[int]int // rule index → position
	names   slotOwners
	bySlot  map[int]int // rule index of each slot
	// states are the rules' runtime states by name (Desired.View).
	states map[string]string
	// The flow table: the subject's flows (the busiest MaxExplainFlows)
	// and how many flows each rule slot, classid and remote address
	// holds.
	flows       []datapath.Flow
	flowsTotal  int
	perSlot     map[int]int
	perClass    map[uint32]int
	sessLeaf    map[datapath.FlowKey]uint32
	idents      map[uint32]*AppIdentity
	identErrs   map[uint32]error
	identCapped bool
	// Counters read once.
	ruleCtr  []datapath.Counters
	resvCtr  map[uint16]datapath.ResvCounters
	classCtr map[int]map[uint16]classCounters
	linkLeaf map[int]*linkLeaves
	blockCtr []xdp.BlockCounters
	readErr  []string
}

type classCounters struct {
	packets, drops, overlimits uint64
	backlog                    uint32
}

func newExplainer(v ExplainView, req ExplainRequest) *explainer {
	x := &explainer{v: v, req: req, gen: v.Kernel.Generation(), pos: map[int]int{}, names: newSlotOwners(v.Rules),
		bySlot: map[int]int{}, states: map[string]string{}, perSlot: map[int]int{}, perClass: map[uint32]int{},
		idents: map[uint32]*AppIdentity{}, identErrs: map[uint32]error{}}
	for i, r := range v.Desired.Datapath.Rules {
		x.bySlot[int(r.Slot)] = i
		if v.Hidden[int(r.Slot)] {
			continue
		}
		x.visible = append(x.visible, i)
		x.pos[i] = len(x.visible)
	}
	if view := v.Desired.View; view != "" {
		for _, kv := range strings.Split(view, ",") {
			if name, st, ok := strings.Cut(kv, ":"); ok {
				x.states[name] = st
			}
		}
	}
	return x
}

// name is how the answer names the datapath's rule i.
func (x *explainer) name(i int) string {
	r := x.v.Desired.Datapath.Rules[i]
	if o, ok := x.names[int(r.Slot)]; ok {
		return o.name
	}
	return fmt.Sprintf("slot %d", r.Slot)
}

// state is the runtime state of a rule as the answer says it ("" as
// written).
func (x *explainer) state(name string) string {
	switch st := x.states[name]; st {
	case "":
		return ""
	case "off":
		return "off: outside its schedule"
	default:
		return "over its quota: " + st
	}
}

// offRules are the visible rules not in force now.
func (x *explainer) offRules() []string {
	var out []string
	for _, r := range x.v.Rules {
		if x.states[r.Name] == "off" && !x.v.Hidden[r.Slot] {
			out = append(out, r.Name)
		}
	}
	sort.Strings(out)
	return out
}

// queryKey is the flow the query names, as a subject's key and the parts
// it leaves unknown (nil: it names no part of a flow).
func queryKey(q api.ExplainQuery) (*datapath.FlowKey, datapath.Selectors) {
	if !q.HasFlow() {
		return nil, 0
	}
	var unknown datapath.Selectors
	k := &datapath.FlowKey{}
	switch q.Proto {
	case "tcp":
		k.Proto = unix.IPPROTO_TCP
	case "udp":
		k.Proto = unix.IPPROTO_UDP
	case "icmp":
		k.Proto = unix.IPPROTO_ICMP
		if q.Local.Is6() || q.Remote.Is6() {
			k.Proto = unix.IPPROTO_ICMPV6
		}
	default:
		unknown |= datapath.SelProto
	}
	if !q.Local.IsValid() {
		unknown |= datapath.SelLocal
	}
	if !q.Remote.IsValid() {
		unknown |= datapath.SelRemote
	}
	if q.LPort == 0 && q.Proto != "icmp" {
		unknown |= datapath.SelLPort
	}
	if q.RPort == 0 && q.Proto != "icmp" {
		unknown |= datapath.SelRPort
	}
	k.Local = netip.AddrPortFrom(q.Local, q.LPort)
	k.Remote = netip.AddrPortFrom(q.Remote, q.RPort)
	return k, unknown
}

// subject is what the rules are checked against: the query's flow and
// app, or, when the query names no process and the flow table holds
// exactly one flow that fits it, that flow and its socket's identity.
type subject struct {
	datapath.Subject
	app  *AppIdentity
	flow *datapath.Flow // the one flow of the table
}

func (x *explainer) subject(out *api.Explanation) (subject, *api.ExplainApp) {
	q := x.req.Query
	key, unknown := queryKey(q)
	s := subject{Subject: datapath.Subject{Key: key, DSCP: -1, Unknown: unknown}, app: x.req.App}
	if q.DSCP != nil {
		s.DSCP = int8(*q.DSCP)
	}
	if x.flowsTotal == 1 && q.HasFlow() {
		// The one flow the query names: its whole key, and its socket's
		// identity as the datapath recorded it.
		f := x.flows[0]
		s.flow = &f
		s.Key, s.Unknown = &f.Key, 0
		s.app = x.identity(f)
	}
	if s.Key == nil {
		s.Unknown |= datapath.SelProto | datapath.SelLocal | datapath.SelRemote | datapath.SelLPort | datapath.SelRPort
	}
	var app *api.ExplainApp
	switch {
	case s.app != nil:
		s.Ident = &s.app.Ident
		s.Unknown |= s.app.Unknown
		app = apiApp(s.app)
	case s.flow != nil && s.flow.PID == 0:
		s.NoIdent = true
	default:
		s.Unknown |= datapath.AppSelectors
	}
	// The subject's name.
	var parts []string
	if s.Key != nil && s.Unknown&(datapath.SelProto|datapath.SelLocal|datapath.SelRemote|datapath.SelLPort|datapath.SelRPort) == 0 {
		k := flowKey(*s.Key)
		out.Flow = &k
		parts = append(parts, "flow "+k.String())
	} else if s.Key != nil {
		parts = append(parts, "flows "+partialKey(q))
	}
	if app != nil {
		who := appName(app)
		if len(parts) > 0 {
			parts = append(parts, "of "+who)
		} else {
			parts = append(parts, who)
		}
	}
	out.Subject = strings.Join(parts, " ")
	return s, app
}

// appName names an app identity: "comm[pid]", or "exe PATH".
func appName(a *api.ExplainApp) string {
	if a.PID != 0 {
		return fmt.Sprintf("app %s[%d]", a.Comm, a.PID)
	}
	return "exe " + a.Exe
}

func apiApp(a *AppIdentity) *api.ExplainApp {
	out := &api.ExplainApp{PID: a.Ident.PID, Exe: a.Exe, Cgroup: a.Cgroup, Unknown: a.Unknown.Names()}
	if a.Unknown&datapath.SelComm == 0 {
		out.Comm = a.Ident.Comm
	}
	if a.Unknown&datapath.SelUID == 0 {
		uid := a.Ident.UID
		out.UID = &uid
	}
	if a.Unknown&datapath.SelExe != 0 {
		out.Exe = ""
	}
	if a.Unknown&datapath.SelCgroup != 0 {
		out.Cgroup = ""
	}
	return out
}

// partialKey writes the parts of a flow a query names, e.g. "tcp * →
// 198.18.0.2:443".
func partialKey(q api.ExplainQuery) string {
	side := func(a netip.Addr, p uint16) string {
		s := "*"
		if a.IsValid() {
			s = a.String()
		}
		if p != 0 {
			if a.Is6() {
				s = "[" + s + "]"
			}
			s += ":" + strconv.Itoa(int(p))
		}
		return s
	}
	proto := q.Proto
	if proto == "" {
		proto = "any"
	}
	return proto + " " + side(q.Local, q.LPort) + " → " + side(q.Remote, q.RPort)
}

func flowKey(k datapath.FlowKey) api.ExplainFlowKey {
	return api.ExplainFlowKey{Proto: ProtoName(k.Proto), Local: addrPort(k.Local), Remote: addrPort(k.Remote)}
}

// checkRules checks the visible rules against s in evaluation order, up
// to the first that matches for certain, and fills out's Rules, Match
// and Service.
func (x *explainer) checkRules(out *api.Explanation, s subject) {
	rules := x.v.Desired.Datapath.Rules
	var checks []api.RuleCheck
	maybe := 0
	winner := -1
	for _, i := range x.visible {
		c := datapath.CheckRule(&rules[i], &s.Subject)
		if c.Maybe() {
			maybe++
		}
		last := c.Matches()
		// At most MaxExplainRules, the earliest; the winner always.
		if len(checks) < api.MaxExplainRules-1 || last {
			checks = append(checks, x.ruleCheck(i, c, s))
		} else {
			out.RulesOmitted++
		}
		if last {
			winner = i
			break
		}
	}
	if checks == nil {
		checks = []api.RuleCheck{}
	}
	out.Rules = checks
	switch {
	case winner >= 0 && maybe == 0:
		out.Match = &api.ExplainMatch{Rule: x.name(winner), Position: x.pos[winner]}
		svc := x.service(winner, s.flow)
		out.Service = &svc
	case winner < 0 && maybe == 0:
		svc := x.service(-1, s.flow)
		out.Service = &svc
	}
}

// ruleCheck is how rule i fares against s, with what each failed or
// undecided selector wants and what the subject has.
func (x *explainer) ruleCheck(i int, c datapath.Check, s subject) api.RuleCheck {
	name := x.name(i)
	rc := api.RuleCheck{Position: x.pos[i], Rule: name, State: x.state(name)}
	switch {
	case c.Matches():
		rc.Result = api.CheckMatched
	case c.Maybe():
		rc.Result = api.CheckMaybe
	default:
		rc.Result = api.CheckNo
	}
	w, written := x.v.Written[name]
	r := &x.v.Desired.Datapath.Rules[i]
	for _, sel := range []datapath.Selectors{datapath.SelExe, datapath.SelComm, datapath.SelUID, datapath.SelCgroup,
		datapath.SelProto, datapath.SelLocal, datapath.SelRemote, datapath.SelLPort, datapath.SelRPort, datapath.SelDSCPIn} {
		failed, undecided := c.Failed&sel != 0, c.Undecided&sel != 0
		if !failed && !undecided {
			continue
		}
		sc := selectorCheck(sel, r, w, written)
		if failed {
			sc.Got = x.got(sel, s)
			rc.Failed = append(rc.Failed, sc)
		} else {
			rc.Undecided = append(rc.Undecided, sc)
		}
	}
	return rc
}

// selectorCheck names selector sel of a rule and what it wants: as the
// rule is written when it is known (w), else as the datapath holds it.
func selectorCheck(sel datapath.Selectors, r *datapath.Rule, w policy.Rule, written bool) api.SelectorCheck {
	sc := api.SelectorCheck{Selector: sel.String()}
	switch sel {
	case datapath.SelExe:
		sc.Want = fmt.Sprintf("one of %d file(s)", len(r.Exes))
		if written && w.Exe != "" {
			sc.Want = w.Exe
		}
	case datapath.SelComm:
		sc.Want = r.Comm
	case datapath.SelUID:
		sc.Selector = "user"
		if written && w.User != "" {
			sc.Want = w.User
		} else if r.UID != nil {
			sc.Want = strconv.FormatUint(uint64(*r.UID), 10)
		}
	case datapath.SelCgroup:
		sc.Want = fmt.Sprintf("one of %d cgroup(s)", len(r.Cgroups))
		switch {
		case written && w.Unit != "":
			sc.Selector, sc.Want = "unit", w.Unit
		case written && w.Cgroup != "":
			sc.Want = w.Cgroup
		}
	case datapath.SelProto:
		sc.Want = ProtoName(r.Proto)
	case datapath.SelLocal:
		sc.Want = r.Local.String()
	case datapath.SelRemote:
		sc.Want = r.Remote.String()
	case datapath.SelLPort:
		sc.Want = policy.PortRange{From: r.LPortFrom, To: r.LPortTo}.String()
	case datapath.SelRPort:
		sc.Want = policy.PortRange{From: r.RPortFrom, To: r.RPortTo}.String()
	case datapath.SelDSCPIn:
		sc.Want = policy.DSCP(r.DSCPIn).String()
	}
	return sc
}

// got is what the subject has for selector sel ("" unknown).
func (x *explainer) got(sel datapath.Selectors, s subject) string {
	if sel&datapath.AppSelectors != 0 {
		if s.NoIdent {
			return "no process (the flow's socket has no app identity)"
		}
		if s.app == nil {
			return ""
		}
	}
	id, k := s.Ident, s.Key
	switch sel {
	case datapath.SelExe:
		if s.app.Exe != "" {
			return s.app.Exe
		}
		return fmt.Sprintf("file %d:%d", id.Exe.Dev, id.Exe.Ino)
	case datapath.SelComm:
		return id.Comm
	case datapath.SelUID:
		return strconv.FormatUint(uint64(id.UID), 10)
	case datapath.SelCgroup:
		return s.app.Cgroup
	case datapath.SelProto:
		return ProtoName(k.Proto)
	case datapath.SelLocal:
		return k.Local.Addr().String()
	case datapath.SelRemote:
		return k.Remote.Addr().String()
	case datapath.SelLPort:
		return strconv.Itoa(int(portOf(k, k.Local)))
	case datapath.SelRPort:
		return strconv.Itoa(int(portOf(k, k.Remote)))
	case datapath.SelDSCPIn:
		return policy.DSCP(s.DSCP).String()
	}
	return ""
}

// portOf is a side's port as the classifier sees it (0 but for TCP and
// UDP).
func portOf(k *datapath.FlowKey, ap netip.AddrPort) uint16 {
	if k.Proto != unix.IPPROTO_TCP && k.Proto != unix.IPPROTO_UDP {
		return 0
	}
	return ap.Port()
}

// notes say what else the answer depends on.
func (x *explainer) notes(out *api.Explanation, s subject) {
	if undecidedSelector(out.Rules, "dscp_in") {
		out.Notes = append(out.Notes, "rules that select by the DSCP a packet arrives with (dscp_in) depend on the packets: give --dscp to decide them")
	}
	if out.Match == nil && out.Service == nil {
		var maybe []string
		for _, c := range out.Rules {
			if c.Result == api.CheckMaybe {
				maybe = append(maybe, c.Rule)
			}
		}
		if len(maybe) > 0 {
			out.Notes = append(out.Notes, fmt.Sprintf("which rule applies depends on what the subject does not tell (see undecided): %s may match; each of its flows gets the first that does", strings.Join(maybe, ", ")))
		}
	}
	if x.req.Query.PID != 0 {
		out.Notes = append(out.Notes, "a socket keeps the identity its process had when it created it (exe, comm, user, cgroup): sockets created before an exec or a cgroup move match as that process was then")
	}
	if x.identCapped {
		out.Notes = append(out.Notes, fmt.Sprintf("the identities of only %d processes were read: flows of further processes were left out", maxIdentified))
	}
	if len(x.readErr) > 0 {
		out.Notes = append(out.Notes, "not read: "+strings.Join(x.readErr, "; "))
	}
}

// undecidedSelector reports whether a check left selector sel undecided.
func undecidedSelector(checks []api.RuleCheck, sel string) bool {
	for _, c := range checks {
		for _, u := range c.Undecided {
			if u.Selector == sel {
				return true
			}
		}
	}
	return false
}
