package observe

import (
	"fmt"
	"net/netip"
	"sort"

	"golang.org/x/sys/unix"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/datapath"
	"github.com/hostqos/hostqos/internal/datapath/xdp"
	"github.com/hostqos/hostqos/internal/policy"
	"github.com/hostqos/hostqos/internal/shaper"
	"github.com/hostqos/hostqos/internal/units"
)

// The flow table's side of an explanation: the subject's flows, what the
// datapath did with them, and the counters of where their packets can be
// dropped.

// walkFlows walks the flow table once: it keeps the subject's flows (the
// busiest api.MaxExplainFlows of them) and counts the flows of every
// rule slot and HTB class id, for the counters they share.
func (x *explainer) walkFlows() error {
	q := x.req.Query
	key, unknown := queryKey(q)
	x.sessionLeaves()
	var kept []datapath.Flow
	trim := func() {
		sort.Slice(kept, func(i, j int) bool { return busier(kept[i], kept[j]) })
		kept = kept[:min(len(kept), api.MaxExplainFlows)]
	}
	err := x.v.Kernel.Flows(func(f datapath.Flow) bool {
		x.perSlot[f.RuleSlot]++
		if c, queued := x.classOf(f); queued {
			x.perClass[c]++
		}
		if !x.fits(f, key, unknown) {
			return true
		}
		x.flowsTotal++
		if kept = append(kept, f); len(kept) >= 4*api.MaxExplainFlows {
			trim()
		}
		return true
	})
	if err != nil {
		return fmt.Errorf("explain: read flows: %w", err)
	}
	trim()
	x.flows = kept
	return nil
}

// busier orders flows by their bytes, both directions.
func busier(a, b datapath.Flow) bool { return a.Bytes+a.RxBytes > b.Bytes+b.RxBytes }

// fits reports whether flow f is one of the subject's: the caller's to
// see, of the query's process or executable, and with the parts of its
// 5-tuple the query names.
func (x *explainer) fits(f datapath.Flow, key *datapath.FlowKey, unknown datapath.Selectors) bool {
	q := x.req.Query
	switch {
	case x.req.UID >= 0 && int64(f.UID) != x.req.UID:
		return false
	case q.PID != 0 && f.PID != uint32(q.PID):
		return false
	}
	if key != nil {
		k := f.Key
		icmp := key.Proto == unix.IPPROTO_ICMP || key.Proto == unix.IPPROTO_ICMPV6
		switch {
		case unknown&datapath.SelProto == 0 && k.Proto != key.Proto && !(icmp && (k.Proto == unix.IPPROTO_ICMP || k.Proto == unix.IPPROTO_ICMPV6)):
			return false
		case unknown&datapath.SelLocal == 0 && k.Local.Addr() != key.Local.Addr():
			return false
		case unknown&datapath.SelRemote == 0 && k.Remote.Addr() != key.Remote.Addr():
			return false
		case unknown&datapath.SelLPort == 0 && k.Local.Port() != key.Local.Port():
			return false
		case unknown&datapath.SelRPort == 0 && k.Remote.Port() != key.Remote.Port():
			return false
		}
	}
	if q.Exe != "" && q.PID == 0 && x.req.App != nil {
		// An executable: the flows of the processes that run it now.
		a := x.identity(f)
		return a != nil && a.Unknown&datapath.SelExe == 0 && a.Ident.Exe == x.req.App.Ident.Exe
	}
	return true
}

// identity is the app identity of flow f's socket: the user and command
// name the datapath recorded at the socket's birth, with the executable
// and cgroup its process has now (unknown when it is gone); nil for a
// flow without a process (forwarded, or a socket without an identity).
func (x *explainer) identity(f datapath.Flow) *AppIdentity {
	if f.PID == 0 {
		return nil
	}
	proc, ok := x.idents[f.PID]
	if !ok {
		_, failed := x.identErrs[f.PID]
		full := len(x.idents)+len(x.identErrs) >= maxIdentified
		x.identCapped = x.identCapped || !failed && full
		if !failed && x.req.Identify != nil && !full {
			p, err := x.req.Identify(f.PID)
			if err != nil {
				x.identErrs[f.PID] = err
			} else {
				x.idents[f.PID], proc = p, p
			}
		}
	}
	a := &AppIdentity{Ident: datapath.Identity{PID: f.PID, UID: f.UID, Comm: f.Comm}}
	// A process of another user now holds the pid: not the flow's (its
	// pid was reused), and not the caller's to see.
	if proc == nil || proc.Ident.UID != f.UID {
		a.Unknown = datapath.SelExe | datapath.SelCgroup
		return a
	}
	a.Ident.Exe, a.Ident.Cgroups = proc.Ident.Exe, proc.Ident.Cgroups
	a.Exe, a.Cgroup, a.Unknown = proc.Exe, proc.Cgroup, proc.Unknown&(datapath.SelExe|datapath.SelCgroup)
	return a
}

// ruleOf is the index of the datapath's rule of slot (-1: none).
func (x *explainer) ruleOf(slot int) int {
	if i, ok := x.bySlot[slot]; ok && slot >= 0 {
		return i
	}
	return -1
}

// classOf is the HTB class id flow f's packets carry: its rule's leaf
// (0 for none, or a rule that observes: the link's default leaf), or its
// session's; queued is false for a flow its rule drops.
func (x *explainer) classOf(f datapath.Flow) (classid uint32, queued bool) {
	i := x.ruleOf(f.RuleSlot)
	if i < 0 {
		return 0, true
	}
	r := x.v.Desired.Datapath.Rules[i]
	switch r.ActionCode {
	case datapath.ActDrop:
		return 0, false
	case datapath.ActObserve:
		return 0, true
	}
	if c, ok := x.sessLeaf[f.Key]; ok {
		return c, true
	}
	return r.ClassID, true
}

// sessionLeaves finds the per-session leaves of the sockets bound to
// reservations that have them (the datapath gives a session's flows its
// leaf).
func (x *explainer) sessionLeaves() {
	first := map[uint16]uint32{}
	for _, r := range x.v.Desired.Datapath.Reservations {
		if r.SessionClassID != 0 {
			first[r.ID] = r.SessionClassID
		}
	}
	if len(first) == 0 {
		return
	}
	bs, err := x.v.Kernel.Bindings()
	if err != nil {
		x.readErr = append(x.readErr, "reservation bindings: "+err.Error())
		return
	}
	x.sessLeaf = map[datapath.FlowKey]uint32{}
	for _, b := range bs {
		if c, ok := first[b.Reservation]; ok && b.Session > 0 {
			x.sessLeaf[b.Key] = c + uint32(b.Session-1)
		}
	}
}

// reference is the rule the policy gives subject s now (-1: none), and
// whether that is certain (no earlier rule may match).
func (x *explainer) reference(s *datapath.Subject) (int, bool) {
	rules := x.v.Desired.Datapath.Rules
	certain := true
	for _, i := range x.visible {
		c := datapath.CheckRule(&rules[i], s)
		switch {
		case c.Matches():
			return i, certain
		case c.Maybe():
			certain = false
		}
	}
	return -1, certain
}

// explainFlows fills out's Flows: each of the subject's flows with the
// rule the policy gives it, the datapath's entry, its service and its
// drops.
func (x *explainer) explainFlows(out *api.Explanation) error {
	out.FlowsTotal = x.flowsTotal
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	mono := uint64(ts.Nano())
	for _, f := range x.flows {
		fe := api.FlowExplanation{ExplainFlowKey: flowKey(f.Key), PID: f.PID, Comm: f.Comm, UID: f.UID}
		s := datapath.Subject{Key: &f.Key, DSCP: -1}
		if q := x.req.Query; q.DSCP != nil {
			s.DSCP = int8(*q.DSCP)
		}
		if a := x.identity(f); a != nil {
			s.Ident, s.Unknown = &a.Ident, a.Unknown
		} else {
			s.NoIdent = true
		}
		ref, certain := x.reference(&s)
		fe.Certain = certain
		if ref >= 0 {
			fe.Rule, fe.Position = x.name(ref), x.pos[ref]
		}
		ki := x.ruleOf(f.RuleSlot)
		kf := api.KernelFlow{Rule: x.names.of(f), Current: f.Gen == x.gen,
			Out: api.Counter{Packets: f.Packets, Bytes: f.Bytes, Drops: f.Drops},
			In:  api.Counter{Packets: f.RxPackets, Bytes: f.RxBytes, Drops: f.RxDrops}}
		if f.RuleSlot >= 0 && kf.Rule == "" {
			kf.Rule = fmt.Sprintf("slot %d (a rule removed since)", f.RuleSlot)
		}
		kf.Agrees = kf.Current && certain && ki == ref
		if mono > f.FirstSeenNS && f.FirstSeenNS > 0 {
			kf.AgeSec = float64(mono-f.FirstSeenNS) / 1e9
		}
		if mono > f.LastSeenNS && f.LastSeenNS > 0 {
			kf.IdleSec = float64(mono-f.LastSeenNS) / 1e9
		}
		fe.Kernel = kf
		// What the datapath applies: its entry's rule, or, for an entry
		// of an earlier policy, the rule its next packet gets.
		applied := ki
		switch {
		case !kf.Current:
			applied = ref
			fe.Notes = append(fe.Notes, "classified under an earlier policy; its next packet is classified again under the policy in force (shown as its service)")
		case !kf.Agrees && certain:
			fe.Notes = append(fe.Notes, disagreement(f))
		case !certain:
			fe.Notes = append(fe.Notes, "the rule the policy gives it depends on what is not known of it (its process is gone, or the DSCP its packets carry); the datapath's entry is what it got")
		}
		fl := f
		fe.Service = x.service(applied, &fl)
		fe.Drops = x.drops(&fe.Service, &fl.Key, &fl)
		out.Flows = append(out.Flows, fe)
	}
	return nil
}

// disagreement says why a flow classified under the policy in force can
// have another rule than the reference evaluation gives it now.
func disagreement(f datapath.Flow) string {
	if f.PID == 0 {
		return "the datapath classified it otherwise than the policy would now; a received flow is classified by the socket that receives it, a forwarded one without any"
	}
	return "the datapath classified it otherwise than the policy would now: its socket's identity is the one its process had when it created it (an exec or a cgroup move since changes the process, not the socket), or the socket is a qsocket or a reservation's session"
}

// service is what rule i (-1: none, the default class) gives flow f (nil:
// any flow of the subject).
func (x *explainer) service(i int, f *datapath.Flow) api.ExplainService {
	d := x.v.Desired
	svc := api.ExplainService{Action: "pass"}
	classIdx := -1
	var classid uint32
	if i >= 0 {
		r := &d.Datapath.Rules[i]
		svc.Rule = x.name(i)
		svc.State = x.state(svc.Rule)
		classIdx = int(r.ServiceClass)
		switch r.ActionCode {
		case datapath.ActDrop:
			svc.Action = "drop"
		case datapath.ActObserve:
			svc.Action = "observe"
		default:
			if r.DSCP >= 0 {
				v := int(r.DSCP)
				svc.DSCP = &v
			}
			classid = r.ClassID
			if r.PoliceRate > 0 {
				svc.Police = &api.ExplainPolicer{Rate: r.PoliceRate, Burst: r.PoliceBurst}
			}
			svc.MaxBWIn = r.MaxBWIn
			svc.Sessions = x.sessions(r)
			if f != nil {
				if c, ok := x.sessLeaf[f.Key]; ok {
					classid = c
				}
			}
		}
	}
	for _, c := range d.Classes {
		if c.Index == classIdx || classIdx < 0 && c.Default {
			svc.Class, svc.Priority = c.Name, c.Priority
		}
	}
	if svc.Action != "drop" {
		svc.Leaves = x.leaves(classid)
	}
	return svc
}

// sessions are rule r's reservation or session limit, with its counters.
func (x *explainer) sessions(r *datapath.Rule) *api.ExplainSessions {
	if r.Reservation == 0 {
		return nil
	}
	d := x.v.Desired
	s := &api.ExplainSessions{Link: d.RuleLink[r.Slot]}
	if name := x.v.Resv[r.Reservation]; len(name) > len(resvLabel) && name[:len(resvLabel)] == resvLabel {
		s.Reservation = name[len(resvLabel):]
	}
	for _, res := range d.Datapath.Reservations {
		if res.ID != r.Reservation {
			continue
		}
		s.MaxSessions = int(res.MaxSessions)
		s.Rate, s.Burst, s.Peak = res.Rate*8, res.Bucket, res.Peak*8
		switch res.Service {
		case datapath.ServiceGuaranteed:
			s.Service = "guaranteed"
		case datapath.ServiceControlledLoad:
			s.Service = "controlled-load"
		case datapath.ServiceBestEffort:
			s.Service = "best-effort"
		}
	}
	if x.resvCtr == nil {
		c, err := x.v.Kernel.ReservationCounters()
		if err != nil {
			x.readErr = append(x.readErr, "reservation counters: "+err.Error())
			c = map[uint16]datapath.ResvCounters{}
		}
		x.resvCtr = c
	}
	c := x.resvCtr[r.Reservation]
	s.Sessions, s.RefusedConnects, s.RefusedSends = c.Sessions, c.RefusedConnects, c.RefusedSends
	s.ConformantPackets, s.NonConformantPackets, s.OversizePackets = c.ConformantPackets, c.NonConformantPackets, c.OversizePackets
	return s
}

// resvLabel starts the name of a reservation's rule (Resv, RuleView).
const resvLabel = "reservation/"

// leaves are the HTB leaves packets of class id classid (0: none) wait in,
// one per link that shapes (a link without an egress rate shapes
// nothing), with the counters of their queues.
func (x *explainer) leaves(classid uint32) []api.ExplainLeaf {
	shaped := map[string]bool{}
	for _, l := range x.v.Links {
		shaped[l.Name] = l.EgressRate > 0
	}
	var out []api.ExplainLeaf
	for _, l := range x.v.Desired.Links {
		if l.Plan == nil || !shaped[l.Name] {
			continue
		}
		ll := x.linkLeaves(l.Ifindex, l.Plan)
		minor := ll.minor(classid)
		c := ll.leaf[minor]
		leaf := api.ExplainLeaf{Link: l.Name, ClassID: fmt.Sprintf("%x:%x", shaper.Handle, minor), Label: c.Label, Rate: c.Rate, Ceil: c.Ceil,
			Flows: ll.flows[minor]}
		ctr := x.classCounters(l.Ifindex)[minor]
		leaf.Packets, leaf.Drops, leaf.Overlimits, leaf.Backlog = ctr.packets, ctr.drops, ctr.overlimits, ctr.backlog
		out = append(out, leaf)
	}
	return out
}

// linkLeaves are a link's HTB leaves by minor, and the flows of the flow
// table each carries.
type linkLeaves struct {
	leaf     map[uint16]shaper.HTBClass
	fallback uint16 // the tree's default leaf
	flows    map[uint16]int
}

// minor is the leaf packets of class id classid wait in: the class's own
// when the tree has it, else the tree's default leaf.
func (ll *linkLeaves) minor(classid uint32) uint16 {
	if classid>>16 == shaper.Handle {
		if _, ok := ll.leaf[uint16(classid)]; ok {
			return uint16(classid)
		}
	}
	return ll.fallback
}

func (x *explainer) linkLeaves(ifindex int, plan *shaper.Plan) *linkLeaves {
	if ll, ok := x.linkLeaf[ifindex]; ok {
		return ll
	}
	ll := &linkLeaves{leaf: map[uint16]shaper.HTBClass{}, fallback: plan.DefaultClassMinor(), flows: map[uint16]int{}}
	for _, c := range plan.Classes {
		// A flow-queued general leaf stands for its children.
		_, fq := shaper.IsFQMinor(c.Minor)
		general := c.Minor >= shaper.LeafBase && c.Minor <= shaper.LeafBase+shaper.MaxClass
		if (c.Leaf && !fq) || general {
			ll.leaf[c.Minor] = c
		}
	}
	for c, n := range x.perClass {
		ll.flows[ll.minor(c)] += n
	}
	if x.linkLeaf == nil {
		x.linkLeaf = map[int]*linkLeaves{}
	}
	x.linkLeaf[ifindex] = ll
	return ll
}

// classCounters reads (once) the HTB class counters of a link.
func (x *explainer) classCounters(ifindex int) map[uint16]classCounters {
	if x.classCtr == nil {
		x.classCtr = map[int]map[uint16]classCounters{}
	}
	if m, ok := x.classCtr[ifindex]; ok {
		return m
	}
	m := map[uint16]classCounters{}
	st, err := x.v.Kernel.ClassStats(ifindex)
	if err != nil {
		x.readErr = append(x.readErr, "HTB class counters: "+err.Error())
	}
	for _, c := range st {
		m[c.Minor] = classCounters{packets: c.Packets, drops: c.Drops, overlimits: c.Overlimits, backlog: c.Backlog}
	}
	x.classCtr[ifindex] = m
	return m
}

// ruleCounters are slot's counters since the rule took it.
func (x *explainer) ruleCounters(slot int) datapath.Counters {
	if x.ruleCtr == nil {
		c, err := x.v.Kernel.RuleCounters()
		if err != nil {
			x.readErr = append(x.readErr, "rule counters: "+err.Error())
			c = []datapath.Counters{}
		}
		x.ruleCtr = c
	}
	if slot < 0 || slot >= len(x.ruleCtr) {
		return datapath.Counters{}
	}
	c := x.ruleCtr[slot]
	for _, r := range x.v.Rules {
		if r.Slot == slot {
			b := r.Base
			c = datapath.Counters{Packets: sub(c.Packets, b.Packets), Bytes: sub(c.Bytes, b.Bytes), Drops: sub(c.Drops, b.Drops),
				RxPackets: sub(c.RxPackets, b.RxPackets), RxBytes: sub(c.RxBytes, b.RxBytes), RxDrops: sub(c.RxDrops, b.RxDrops)}
		}
	}
	return c
}

// drops are the places packets given svc can be dropped, with their
// counts: flow f's own where the datapath counts them per flow (f nil:
// the subject's, the shared counters only); key is the flow (nil or
// partial: the places that depend on its remote address are left out).
func (x *explainer) drops(svc *api.ExplainService, key *datapath.FlowKey, f *datapath.Flow) []api.ExplainDrop {
	var out []api.ExplainDrop
	slot := -1
	if i := x.ruleByName(svc.Rule); i >= 0 {
		slot = int(x.v.Desired.Datapath.Rules[i].Slot)
	}
	by := "rule " + svc.Rule
	// own is a drop count of the flow's own when there is a flow, else
	// the rule's, shared by its flows.
	own := func(d api.ExplainDrop, flowDrops, ruleDrops uint64) api.ExplainDrop {
		if f != nil {
			d.Packets, d.Scope = flowDrops, api.ScopeFlow
		} else {
			d.Packets, d.Scope, d.SharedBy = ruleDrops, api.ScopeShared, x.perSlot[slot]
		}
		return d
	}
	var rc datapath.Counters
	if slot >= 0 {
		rc = x.ruleCounters(slot)
	}
	var fd, frx uint64
	if f != nil {
		fd, frx = f.Drops, f.RxDrops
	}
	switch {
	case svc.Action == "drop":
		why := "the rule's action is drop: the classifier drops every packet it sends"
		if svc.State != "" {
			why = "the rule is " + svc.State + ": the classifier drops every packet it sends"
		}
		out = append(out, own(api.ExplainDrop{Cause: "drop_rule", By: by, Why: why}, fd, rc.Drops))
	case svc.Police != nil:
		out = append(out, own(api.ExplainDrop{Cause: "policer", By: by,
			Why: fmt.Sprintf("the rule's policer passes %s with a bucket of %d bytes, shared by all its flows, and drops what exceeds it before any queue",
				units.ExactRate(svc.Police.Rate), svc.Police.Burst)}, fd, rc.Drops))
	case fd > 0:
		out = append(out, api.ExplainDrop{Cause: "drop_rule", By: "the classifier", Packets: fd, Scope: api.ScopeFlow,
			Why: "dropped under a rule in force earlier (a drop rule or a policer); its rule now drops nothing"})
	}
	budget := ""
	for _, l := range x.v.Links {
		if l.IngressRate > 0 {
			budget = l.Name
		}
	}
	switch {
	case svc.MaxBWIn > 0:
		why := fmt.Sprintf("UDP beyond the rule's download limit (maxbw_in %s, shared by its flows) is dropped on arrival; TCP is slowed by the receive window instead", units.ExactRate(svc.MaxBWIn))
		if budget != "" {
			why += fmt.Sprintf(", and so is UDP beyond its class's share of link %s's ingress_rate", budget)
		}
		d := own(api.ExplainDrop{Cause: "download_limit", By: by, Why: why}, frx, rc.RxDrops)
		out = append(out, d)
	case budget != "" && svc.Action == "pass":
		d := api.ExplainDrop{Cause: "ingress_budget", By: "link " + budget,
			Why: fmt.Sprintf("UDP beyond its class's share of link %s's ingress_rate is dropped on arrival; TCP is slowed by the receive window", budget)}
		switch {
		case f != nil:
			d.Packets, d.Scope = frx, api.ScopeFlow
		case slot >= 0:
			d.Packets, d.Scope, d.SharedBy = rc.RxDrops, api.ScopeShared, x.perSlot[slot]
		default: // what no rule matched
			d.Scope, d.SharedBy = api.ScopeShared, x.perSlot[-1]
			if st, err := x.v.Kernel.Stats(); err == nil {
				d.Packets = st.RxUnmatchedDrops
			}
		}
		out = append(out, d)
	}
	if key != nil && key.Remote.Addr().IsValid() {
		out = append(out, x.shieldDrops(key, f)...)
	}
	for _, l := range svc.Leaves {
		out = append(out, api.ExplainDrop{Cause: "queue", By: "link " + l.Link + " leaf " + l.ClassID, Packets: l.Drops, Scope: api.ScopeShared, SharedBy: l.Flows,
			Why: "the HTB leaf's queue was full: it holds what waits for the leaf's share of the link (its rate, up to its ceil)"})
	}
	return out
}

// ruleByName is the index of the datapath's rule the answer names name
// (-1: none).
func (x *explainer) ruleByName(name string) int {
	if name == "" {
		return -1
	}
	for _, i := range x.visible {
		if x.name(i) == name {
			return i
		}
	}
	return -1
}

// shieldDrops are the XDP shield's drops of what arrives from the flow's
// remote address: its drop-list entry (the longest prefix holding it) and
// the SYN limits of the links.
func (x *explainer) shieldDrops(key *datapath.FlowKey, f *datapath.Flow) []api.ExplainDrop {
	d := x.v.Desired
	xdpOn := false
	for _, l := range d.Links {
		xdpOn = xdpOn || l.XDP
	}
	if !xdpOn || x.v.Shield == nil {
		return nil
	}
	var out []api.ExplainDrop
	remote := key.Remote.Addr()
	best := -1
	for i, b := range d.Blocks {
		if b.Prefix.Contains(remote) && (best < 0 || b.Prefix.Bits() > d.Blocks[best].Prefix.Bits()) {
			best = i
		}
	}
	if best >= 0 {
		b := d.Blocks[best]
		if x.blockCtr == nil {
			c, err := x.v.Shield.BlockCounters()
			if err != nil {
				x.readErr = append(x.readErr, "drop-list counters: "+err.Error())
			}
			x.blockCtr = c
		}
		drop := api.ExplainDrop{Cause: "xdp_block", By: "block " + b.Prefix.String(), Scope: api.ScopeShared, SharedBy: x.flowsFrom(b.Prefix),
			Why: fmt.Sprintf("the XDP shield drops every packet from %s as it arrives, before the host's stack sees it (what this host sends still leaves)", b.Prefix)}
		if b.Rate > 0 {
			drop.Cause = "xdp_quarantine"
			drop.Why = fmt.Sprintf("the XDP shield passes at most %s from %s (all its sources together) and drops the rest as it arrives", units.ExactRate(b.Rate), b.Prefix)
		}
		for _, c := range x.blockCtr {
			if c.Prefix == b.Prefix {
				drop.Packets = c.Dropped
			}
		}
		out = append(out, drop)
	}
	if key.Proto != unix.IPPROTO_TCP {
		return out
	}
	protected := false
	for _, p := range d.Protected {
		if p.Addr == remote && (p.Port == 0 || p.Port == key.Local.Port()) {
			protected = true
		}
	}
	for _, l := range d.Links {
		if !l.Syn.Enabled() {
			continue
		}
		c, err := x.v.Shield.SynCounters(l.Ifindex)
		if err != nil {
			x.readErr = append(x.readErr, "SYN counters: "+err.Error())
			continue
		}
		why := fmt.Sprintf("pure SYNs arriving on link %s beyond its SYN limits (%s) are dropped by the XDP shield: new connections to this host, from every source together", l.Name, synLimits(l.Syn))
		if protected {
			why = fmt.Sprintf("%s is a protected client: its SYNs to local port %d pass link %s's SYN limits (%s)", remote, key.Local.Port(), l.Name, synLimits(l.Syn))
		}
		out = append(out, api.ExplainDrop{Cause: "syn_limit", By: "link " + l.Name, Packets: c.Dropped, Scope: api.ScopeShared, Why: why})
	}
	return out
}

func synLimits(s xdp.SynLimits) string {
	var parts []string
	if s.Rate > 0 {
		parts = append(parts, fmt.Sprintf("syn_rate %d/s", s.Rate))
	}
	if s.PerSource > 0 {
		parts = append(parts, fmt.Sprintf("syn_rate_per_source %d/s", s.PerSource))
	}
	if len(parts) == 2 {
		return parts[0] + ", " + parts[1]
	}
	return parts[0]
}

// flowsFrom counts the flows of the flow table whose remote address is in
// p (a walk of its own: only an explanation that meets a drop-list entry
// needs it).
func (x *explainer) flowsFrom(p netip.Prefix) int {
	n := 0
	err := x.v.Kernel.Flows(func(f datapath.Flow) bool {
		if p.Contains(f.Key.Remote.Addr()) {
			n++
		}
		return true
	})
	if err != nil {
		return 0
	}
	return n
}

// Written is what an explanation shows of a policy's rules as written:
// each by name, and each reservation's session rule by its label.
func Written(p *policy.Policy) map[string]policy.Rule {
	out := make(map[string]policy.Rule, len(p.Rules)+len(p.Reservations))
	for _, r := range p.Rules {
		out[r.Name] = r
	}
	for _, rv := range p.Reservations {
		out[resvLabel+rv.Name] = rv.SessionRule()
	}
	return out
}
