package observe

import (
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/apps"
	"github.com/hostqos/hostqos/internal/datapath"
	"github.com/hostqos/hostqos/internal/history"
	"github.com/hostqos/hostqos/internal/shaper"
)

// sampler keeps the previous reading of every counter so the API can show
// current rates next to the cumulative counts.
type sampler struct {
	mu sync.Mutex

	ruleAt   time.Time
	rulePrev []datapath.Counters
	ruleRate map[int][2]float64 // slot → bits/s, pkts/s
	// ruleRateIn is ruleRate of the received side.
	ruleRateIn map[int][2]float64

	classAt   time.Time
	classPrev map[[2]int]shaper.ClassStats // (ifindex, minor)
	classRate map[[2]int][2]float64

	flowAt   time.Time
	flowPrev map[uint64]rateBase // by counter slot tag; nil once older than flowBaseline
	flowDrop *time.Timer         // drops flowPrev then

	exeCache map[uint32]string

	in inRates // the received side of classes and links (stats_in.go)
	// classReads counts the readings of a link's classes (mark).
	classReads uint64
	// ctrs is the last reading of the rule counters, with the packets
	// the classifiers had seen then (ruleCounters).
	ctrs struct {
		cs   []datapath.Counters
		seen [2]uint64
		ok   bool
	}
	// egressPrev is the classifier's packet count at the last sample
	// (egressSeen: one was read).
	egressPrev uint64
	egressSeen bool
	// netDev reads the interface counters (ReadNetDev; tests replace it).
	netDev func() map[string]history.Counters
}

func newSampler() *sampler {
	return &sampler{ruleRate: map[int][2]float64{}, ruleRateIn: map[int][2]float64{}, classPrev: map[[2]int]shaper.ClassStats{},
		classRate: map[[2]int][2]float64{}, exeCache: map[uint32]string{}, netDev: ReadNetDev}
}

func rate(now, prev uint64, dt float64) float64 {
	if dt <= 0 || now < prev {
		return 0
	}
	return float64(now-prev) / dt
}

// sample reads rule and class counters and updates their rates.
func (s *sampler) sample(v LinkView) {
	dp := v.Kernel
	if dp == nil {
		return
	}
	now := time.Now()
	cs, err := s.ruleCounters(dp, 0)
	s.mu.Lock()
	netDev := s.netDev
	s.mu.Unlock()
	dev := netDev()
	s.mu.Lock()
	defer s.mu.Unlock()
	devPrev := s.in.devPrev
	s.sampleDev(now, dev, v.Up)
	switch {
	case err == nil && len(cs) > 0 && len(s.rulePrev) > 0 && &cs[0] == &s.rulePrev[0]:
		// The same reading (nothing counted since): every rate is zero.
		clear(s.ruleRate)
		clear(s.ruleRateIn)
		s.ruleAt = now
	case err == nil:
		if s.rulePrev != nil {
			dt := now.Sub(s.ruleAt).Seconds()
			for i := range cs {
				if i < len(s.rulePrev) {
					s.ruleRate[i] = [2]float64{8 * rate(cs[i].Bytes, s.rulePrev[i].Bytes, dt), rate(cs[i].Packets, s.rulePrev[i].Packets, dt)}
					s.ruleRateIn[i] = [2]float64{8 * rate(cs[i].RxBytes, s.rulePrev[i].RxBytes, dt), rate(cs[i].RxPackets, s.rulePrev[i].RxPackets, dt)}
				}
			}
		}
		s.rulePrev, s.ruleAt = cs, now
	}
	dst, derr := dp.Stats()
	if derr == nil {
		s.sampleIn(now, dst)
	}
	// The classifier sees every packet a managed link sends before its
	// HTB tree does: when it saw none since the last sample, the classes
	// of a link whose queues were empty then counted nothing since.
	// So did those of a link whose interface sent nothing since.
	quiet := derr == nil && s.egressSeen && dst.Packets == s.egressPrev
	s.egressSeen, s.egressPrev = derr == nil, dst.Packets
	seen := map[[2]int]bool{}
	for name, ifindex := range v.Up {
		c, ok := dev[name]
		p, okp := devPrev[name]
		linkQuiet := ok && okp && c.PacketsOut == p.PacketsOut && c.DropsOut == p.DropsOut
		if (quiet || linkQuiet) && s.classesIdle(ifindex, seen) {
			continue
		}
		st, err := dp.ClassStats(ifindex)
		if err != nil {
			continue
		}
		s.classReads++
		dt := now.Sub(s.classAt).Seconds()
		for _, c := range st {
			k := [2]int{ifindex, int(c.Minor)}
			seen[k] = true
			if p, ok := s.classPrev[k]; ok {
				s.classRate[k] = [2]float64{8 * rate(c.Bytes, p.Bytes, dt), rate(c.Packets, p.Packets, dt)}
			}
			s.classPrev[k] = c
		}
	}
	for k := range s.classPrev {
		if !seen[k] {
			delete(s.classPrev, k)
			delete(s.classRate, k)
		}
	}
	s.classAt = now
}

// ruleCounters reads the rules' counters, or gives those of the last
// reading when the classifiers saw no packet since: a rule counts only
// packets the egress and ingress programs see, so with 10,000 rules an
// idle daemon does not read 10,000 per-CPU slots several times a second.
// The slice is shared: callers only read it. A reading shorter than need
// slots (it covers the slots in use when it was made) is made again: a
// rule added since, while no packet moved, would be missing from it.
func (s *sampler) ruleCounters(dp Kernel, need int) ([]datapath.Counters, error) {
	st, serr := dp.Stats()
	seen := [2]uint64{st.Packets, st.RxPackets}
	s.mu.Lock()
	if serr == nil && s.ctrs.ok && s.ctrs.seen == seen && len(s.ctrs.cs) >= need {
		cs := s.ctrs.cs
		s.mu.Unlock()
		return cs, nil
	}
	s.mu.Unlock()
	cs, err := dp.RuleCounters()
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.ctrs.cs, s.ctrs.seen, s.ctrs.ok = cs, seen, serr == nil
	s.mu.Unlock()
	return cs, nil
}

// samplerMark is what a reader saw of the sampler's counters: the rule
// counters' reading (its first element) and the class readings so far.
type samplerMark struct {
	first      *datapath.Counters
	n          int
	classReads uint64
}

// mark refreshes the rule counters (ruleCounters) and tells what the
// sampler holds now; two equal marks mean that no rule or class counter
// changed between them.
func (s *sampler) mark(k Kernel) (samplerMark, bool) {
	cs, err := s.ruleCounters(k, 0)
	if err != nil {
		return samplerMark{}, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	m := samplerMark{n: len(cs), classReads: s.classReads}
	if len(cs) > 0 {
		m.first = &cs[0]
	}
	return m, true
}

// classesIdle reports whether a link's HTB classes are those read at the
// last sample, with nothing queued then, so that (no packet having reached
// the link since) their counters did not move: their rates are zero and no
// netlink dump of the classes is needed (an idle daemon makes none). It
// marks the link's classes seen. Called with s.mu held.
func (s *sampler) classesIdle(ifindex int, seen map[[2]int]bool) bool {
	known := false
	for k, c := range s.classPrev {
		if k[0] != ifindex {
			continue
		}
		if c.Backlog != 0 {
			return false
		}
		known = true
	}
	if !known {
		return false
	}
	for k := range s.classPrev {
		if k[0] == ifindex {
			seen[k] = true
			s.classRate[k] = [2]float64{}
		}
	}
	return true
}

// ruleStats are the rules' counters and rates, without the rules in hidden
// (other users' runs, for an ordinary caller) and the objects' rules uid
// may not see.
func (s *sampler) ruleStats(v RuleView, hidden map[string]bool, uid int64) ([]api.RuleStat, error) {
	dp := v.Kernel
	if dp == nil {
		return nil, fmt.Errorf("read rule counters: datapath not loaded")
	}
	need := 0
	for _, r := range v.Rules {
		need = max(need, r.Slot+1)
	}
	cs, err := s.ruleCounters(dp, need)
	if err != nil {
		return nil, fmt.Errorf("read rule counters: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []api.RuleStat
	for _, r := range v.Rules {
		if r.Slot >= len(cs) || !r.Object && hidden[r.Name] || r.Object && !visibleTo(r.Owner, uid) {
			continue
		}
		b, c := r.Base, cs[r.Slot]
		rr, ri := s.ruleRate[r.Slot], s.ruleRateIn[r.Slot]
		out = append(out, api.RuleStat{Rule: r.Name, Class: r.Class, Counter: api.Counter{
			Packets: sub(c.Packets, b.Packets), Bytes: sub(c.Bytes, b.Bytes), Drops: sub(c.Drops, b.Drops),
			RateBps: rr[0], PktRate: rr[1],
		}, In: api.Counter{
			Packets: sub(c.RxPackets, b.RxPackets), Bytes: sub(c.RxBytes, b.RxBytes), Drops: sub(c.RxDrops, b.RxDrops),
			RateBps: ri[0], PktRate: ri[1],
		}})
	}
	return out, nil
}

// visibleTo reports whether a caller who may only see uid's objects (-1:
// everything) sees the rule of an object of owner (-1: everyone's).
func visibleTo(owner, uid int64) bool {
	return uid < 0 || owner < 0 || owner == uid
}

func sub(a, b uint64) uint64 {
	if a < b {
		return 0
	}
	return a - b
}

// classStats are, per managed link, what each
// class's HTB subtree carried. Links without shaping report the sum of the
// class's rules instead. rv gives the rules of the classes' IN.
func (s *sampler) classStats(v LinkView, rv RuleView) ([]api.ClassStat, error) {
	k := v.Kernel
	if v.Classes == nil || k == nil {
		return nil, nil
	}
	var in map[string]api.Counter
	if rs, err := s.ruleStats(rv, nil, -1); err == nil {
		in = s.classIn(rs, k)
	}
	// Each class's HTB leaves: its general leaf and its rules' own leaves,
	// as the compiled policy gave them to the shaper.
	leaves := map[string][]int{}
	for _, c := range v.Classes {
		leaves[c.Name] = append(leaves[c.Name], int(shaper.ClassLeafMinor(c.Index)))
		for _, r := range v.ClassRules {
			if r.Class == c.Index {
				leaves[c.Name] = append(leaves[c.Name], int(shaper.RuleLeafMinor(r.Slot)))
			}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []api.ClassStat
	for _, name := range v.Order {
		ifindex, ok := v.Up[name]
		if !ok {
			continue
		}
		for _, c := range v.Classes {
			row := api.ClassStat{Class: c.Name, Link: name, In: in[c.Name]}
			for _, m := range leaves[c.Name] {
				k := [2]int{ifindex, m}
				st, ok := s.classPrev[k]
				if !ok {
					continue
				}
				row.Packets += st.Packets
				row.Bytes += st.Bytes
				row.Drops += st.Drops
				row.Overlimits += st.Overlimits
				row.Backlog += st.Backlog
				rr := s.classRate[k]
				row.RateBps += rr[0]
				row.PktRate += rr[1]
				// A flow-queued general leaf is an inner class: its
				// children hold the queues and count the drops.
				for j := 0; j <= shaper.FQBuckets; j++ {
					if c.Index < 0 || m != int(shaper.ClassLeafMinor(c.Index)) {
						break
					}
					if fq, ok := s.classPrev[[2]int{ifindex, int(shaper.FQMinor(c.Index, j))}]; ok {
						row.Drops += fq.Drops
						row.Overlimits += fq.Overlimits
						row.Backlog += fq.Backlog
					}
				}
			}
			out = append(out, row)
		}
	}
	return out, nil
}

// flowBaseline is how long a flow reading stays usable as the base of the
// next request's rates; without a recent one, a request first takes a
// reading and waits flowProbe so that its rates mean something.
const (
	flowBaseline = 5 * time.Second
	flowProbe    = 300 * time.Millisecond
)

// flowStats are the flows with their rates; uid >= 0 limits the answer to that
// user's flows.
func (s *sampler) flowStats(v RuleView, uid int64) ([]api.FlowStat, error) {
	dp := v.Kernel
	if dp == nil {
		return nil, fmt.Errorf("read flows: datapath not loaded")
	}
	s.mu.Lock()
	stale := time.Since(s.flowAt) > flowBaseline
	s.mu.Unlock()
	if stale {
		base := map[uint64]rateBase{}
		if err := dp.Flows(func(f datapath.Flow) bool { noteRateBase(base, f); return true }); err != nil {
			return nil, fmt.Errorf("read flows: %w", err)
		}
		s.mu.Lock()
		s.flowPrev, s.flowAt = base, time.Now()
		s.dropFlowBaseLater()
		s.mu.Unlock()
		time.Sleep(flowProbe)
	}
	names := newSlotOwners(v.Rules)
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	mono := uint64(ts.Nano())
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	dt := now.Sub(s.flowAt).Seconds()
	fresh := make(map[uint64]rateBase, len(s.flowPrev))
	gone := map[uint32]bool{} // by pid, asked once per answer
	var out []api.FlowStat
	err := dp.Flows(func(f datapath.Flow) bool {
		noteRateBase(fresh, f)
		if uid >= 0 && int64(f.UID) != uid {
			return true
		}
		fs := api.FlowStat{
			Proto: ProtoName(f.Key.Proto), Local: addrPort(f.Key.Local), Remote: addrPort(f.Key.Remote),
			PID: f.PID, Comm: f.Comm, UID: f.UID, Exe: s.exe(f.PID), Exited: exited(gone, f.PID),
			Counter: api.Counter{Packets: f.Packets, Bytes: f.Bytes, Drops: f.Drops},
			In:      api.Counter{Packets: f.RxPackets, Bytes: f.RxBytes, Drops: f.RxDrops},
		}
		fs.Rule = names.of(f)
		if f.Veth != 0 {
			if c, ok := v.Containers[f.Veth]; ok {
				fs.Container, fs.Runtime, fs.Image = c.Name, c.Runtime, c.Image
			} else {
				fs.Container = "?" // a container that is gone
			}
		}
		if mono > f.FirstSeenNS && f.FirstSeenNS > 0 {
			fs.AgeSec = float64(mono-f.FirstSeenNS) / 1e9
		}
		if mono > f.LastSeenNS && f.LastSeenNS > 0 {
			fs.IdleSec = float64(mono-f.LastSeenNS) / 1e9
		}
		if p, ok := s.flowPrev[f.Ref.Tag]; ok && f.Ref.Tag != 0 && dt > 0 && dt < 30 {
			fs.RateBps = 8 * rate(f.Bytes, p.Bytes, dt)
			fs.PktRate = rate(f.Packets, p.Packets, dt)
			fs.In.RateBps = 8 * rate(f.RxBytes, p.RxBytes, dt)
			fs.In.PktRate = rate(f.RxPackets, p.RxPackets, dt)
		}
		out = append(out, fs)
		return true
	})
	if err != nil {
		return nil, fmt.Errorf("read flows: %w", err)
	}
	s.flowPrev, s.flowAt = fresh, now
	s.dropFlowBaseLater()
	sort.Slice(out, func(i, j int) bool { return out[i].Bytes+out[i].In.Bytes > out[j].Bytes+out[j].In.Bytes })
	return out, nil
}

// slotOwners are the rules of the rule slots as the views name them
// (rules by name, the engine's object rules by their label), each with the
// policy generation from which it holds its slot.
type slotOwners map[int]slotOwner

type slotOwner struct {
	name  string
	since uint32 // Rule.Since
}

func newSlotOwners(rules []Rule) slotOwners {
	o := make(slotOwners, len(rules))
	for _, r := range rules {
		o[r.Slot] = slotOwner{name: r.Name, since: r.Since}
	}
	return o
}

// of names the rule flow f was classified under: "" for none, and for a
// flow classified before its slot was handed to the rule that holds it now
// (its own rule was removed since; its next packet classifies it again).
// A slot's new owner never gets the flows counted under an earlier one.
func (o slotOwners) of(f datapath.Flow) string {
	if f.RuleSlot < 0 {
		return ""
	}
	w, ok := o[f.RuleSlot]
	if !ok || f.Gen < w.since {
		return ""
	}
	return w.name
}

// rateBase is a flow's counters as the base of its rates. The readings
// are keyed by the tag of the flow's counter slot, which identifies one
// flow in one slot (8 bytes, where its 5-tuple takes 38): a flow without a
// slot, or that just moved to another, has no rate until the next answer.
type rateBase struct {
	Bytes, Packets, RxBytes, RxPackets uint64
}

func noteRateBase(m map[uint64]rateBase, f datapath.Flow) {
	if f.Ref.Tag != 0 {
		m[f.Ref.Tag] = rateBase{Bytes: f.Bytes, Packets: f.Packets, RxBytes: f.RxBytes, RxPackets: f.RxPackets}
	}
}

// dropFlowBaseLater drops the flow reading (on a full table, about 3 MB
// per 60,000 flows) once it is too old to be the base of rates: the next
// answer takes a new one anyway. Called with s.mu held.
func (s *sampler) dropFlowBaseLater() {
	if s.flowDrop != nil {
		s.flowDrop.Reset(flowBaseline)
		return
	}
	s.flowDrop = time.AfterFunc(flowBaseline, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if time.Since(s.flowAt) >= flowBaseline {
			s.flowPrev = nil
		}
	})
}

// appStats aggregates flows by owning process.
func (s *sampler) appStats(v RuleView, uid int64) ([]api.AppStat, error) {
	flows, err := s.flowStats(v, uid)
	if err != nil {
		return nil, err
	}
	// A process is an app; a container is one app, whichever of its
	// processes the flows are of.
	type appKey struct {
		pid       uint32
		container string
	}
	byKey := map[appKey]*api.AppStat{}
	var order []appKey
	for _, f := range flows {
		k := appKey{pid: f.PID}
		if f.Container != "" {
			k = appKey{container: f.Runtime + "/" + f.Container}
		} else if f.PID == 0 {
			continue
		}
		a, ok := byKey[k]
		if !ok {
			a = &api.AppStat{PID: f.PID, Comm: f.Comm, Exe: f.Exe, UID: f.UID, Exited: f.Exited}
			if f.Container != "" {
				a = &api.AppStat{Container: f.Container, Runtime: f.Runtime, Image: f.Image}
			}
			byKey[k] = a
			order = append(order, k)
		}
		a.Flows++
		a.Counter.Add(f.Counter)
		a.In.Add(f.In)
		if f.Rule != "" && !slices.Contains(a.Rules, f.Rule) {
			a.Rules = append(a.Rules, f.Rule)
		}
	}
	out := make([]api.AppStat, 0, len(order))
	for _, k := range order {
		out = append(out, *byKey[k])
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Bytes+out[i].In.Bytes > out[j].Bytes+out[j].In.Bytes })
	return out, nil
}

// exited reports whether process pid has exited, asking the kernel once
// per pid of an answer (gone holds the answers).
func exited(gone map[uint32]bool, pid uint32) bool {
	if pid == 0 {
		return false
	}
	g, ok := gone[pid]
	if !ok {
		g = unix.Kill(int(pid), 0) == unix.ESRCH
		gone[pid] = g
	}
	return g
}

// exe resolves (and caches) a pid's executable path.
func (s *sampler) exe(pid uint32) string {
	if pid == 0 {
		return ""
	}
	if e, ok := s.exeCache[pid]; ok {
		return e
	}
	if len(s.exeCache) > 4096 {
		s.exeCache = map[uint32]string{}
	}
	e := apps.Exe(int(pid))
	s.exeCache[pid] = e
	return e
}

// ProtoName names an IP protocol as the views do ("tcp", "udp", …, or
// its number).
func ProtoName(p uint8) string {
	switch p {
	case unix.IPPROTO_TCP:
		return "tcp"
	case unix.IPPROTO_UDP:
		return "udp"
	case unix.IPPROTO_ICMP:
		return "icmp"
	case unix.IPPROTO_ICMPV6:
		return "icmpv6"
	}
	return fmt.Sprint(p)
}

func addrPort(ap netip.AddrPort) string {
	if ap.Port() == 0 {
		return ap.Addr().String()
	}
	return ap.String()
}
