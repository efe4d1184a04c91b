package engine

import (
	"fmt"
	"maps"
	"slices"
	"sort"

	"github.com/hostqos/hostqos/internal/store"

	"github.com/hostqos/hostqos/internal/datapath"
	"github.com/hostqos/hostqos/internal/datapath/xdp"
	"github.com/hostqos/hostqos/internal/derive"
	"github.com/hostqos/hostqos/internal/policy"
)

// The one recipe for what the kernel must hold. Every trigger (a change
// through the API, a reload of the config file, a rescan of the links and
// app selectors, a quota or schedule tick, a qsocket or shield change)
// calls syncLocked: it takes a snapshot of the engine's state with the
// trigger's parts in place, derives what the kernel must hold
// (internal/derive, a pure function), writes only what differs from what
// the last pushes left (reconcileLocked, over the pushed memo), persists
// what the trigger asks, and commits. On any error nothing of the trigger
// remains: the kernel is put back by deriving again from the committed
// state. No other code plans links or pushes policy to the kernel.

// syncChange are the parts of the engine's state a trigger changes; nil parts
// keep the committed ones.
type syncChange struct {
	m      *store.Merged  // the effective policy
	base   *policy.Policy // the config file's policy (a reload)
	shield *shieldState   // the XDP shield's state
	// containers are the containers found on the host
	containers *[]derive.Container
	// pods are the admitted Kubernetes pods (pods.go)
	pods *map[string]*store.Pod
	// save persists the change, with the slot table the derive gave,
	// once the kernel holds it (an error puts the kernel back); commit
	// then makes the trigger's own state current.
	save   func(slots *store.Slots) error
	commit func()
}

// syncLocked makes the kernel hold what the engine's state with n's parts
// derives to, and commits n (see above). reason names the trigger in
// errors and logs.
func (e *Engine) syncLocked(reason string, n syncChange) error {
	if e.k == nil {
		return errNotLoaded
	}
	st := e.stateWith(n)
	d, slots, err := e.deriveLocked(st)
	if err != nil {
		return err
	}
	if err := e.reconcileLocked(d); err != nil {
		e.restoreLocked(reason)
		return err
	}
	// A slot handed to a new rule is the new rule's from the generation
	// the push made; the views name no flow classified before it after
	// the new owner (slotOwners).
	slots.StampHandover(e.k.Generation())
	if n.save != nil {
		if err := n.save(slots); err != nil {
			e.restoreLocked(reason)
			return err
		}
	}
	e.eff, e.base, e.slots, e.desired = st.m, st.base, slots, d
	if n.shield != nil {
		e.shield = n.shield
	}
	e.containers = st.containers
	e.pods = st.pods
	if n.commit != nil {
		n.commit()
	}
	e.times.view = d.View
	e.derivedLocked()
	e.startUsageLocked(e.counterReader())
	return nil
}

// engineState is what a derive starts from.
type engineState struct {
	m          store.Merged
	base       *policy.Policy
	shield     *shieldState
	containers []derive.Container
	pods       map[string]*store.Pod
}

func (e *Engine) stateWith(n syncChange) engineState {
	st := engineState{m: e.eff, base: e.base, shield: e.shield, containers: e.containers, pods: e.pods}
	if n.m != nil {
		st.m = *n.m
	}
	if n.base != nil {
		st.base = n.base
	}
	if n.shield != nil {
		st.shield = n.shield
	}
	if n.containers != nil {
		st.containers = *n.containers
	}
	if n.pods != nil {
		st.pods = *n.pods
	}
	st.m = e.withAutoLinksLocked(st.m, st.base)
	return st
}

// restoreLocked puts the committed state back into the kernel after a
// trigger failed midway (what the failed push left is unknown in the
// pushed memo, so it is written again).
func (e *Engine) restoreLocked(reason string) {
	if e.desired == nil {
		return // nothing was ever applied: the next sync writes it all
	}
	d, _, err := e.deriveLocked(e.stateWith(syncChange{}))
	if err == nil {
		err = e.reconcileLocked(d)
	}
	if err != nil {
		e.log.Error("restore the previous policy after a failed "+reason, "err", err)
	}
}

// deriveLocked takes the snapshot of st the derive needs (the links'
// interfaces, the qsocket scheduler's rate, the used-up quotas), gives the
// expansion's keys their slots (on a copy of the slot table, with the
// counters of reused slots as their baselines) and derives.
func (e *Engine) deriveLocked(st engineState) (*derive.Desired, *store.Slots, error) {
	in := derive.Input{
		Policy:     st.m.Policy,
		Runs:       st.m.Runs,
		Now:        e.cfg.Now(),
		Ifindexes:  e.ifindexesLocked(st.m.Policy),
		QSchedRate: e.qschedRateLocked(),
		Containers: st.containers,
		RTRates:    e.rtRatesLocked(),
		RTOwners:   e.rtOwnersLocked(),
		Pods:       podInputs(st.pods),
		FlowQueues: e.base.Settings.FlowQueues(),
		AutoRates:  e.autoRatesLocked(),
	}
	in.OverQuota = e.times.overQuota(st.m.Policy, in.Now)
	if e.shieldKernel() != nil {
		in.Shield = e.shieldInput(st.base, st.shield)
	}
	res := derive.NewSystemResolver(e.k.CgroupRoot())
	defer res.Close()
	rec := &derive.Recorder{Resolver: res}
	in.Resolver = rec
	x := derive.Expand(in)
	slots := e.slots
	if !slots.Holds(x.Policy, x.ResvKeys) {
		slots = e.slots.Clone()
		if err := slots.Assign(x.Policy, x.ResvKeys, e.counterReader()); err != nil {
			return nil, nil, err
		}
	}
	in.Slots = slots.View()
	d, err := derive.Compile(in, x)
	if err != nil {
		return nil, nil, err
	}
	e.rf.pending, e.rf.pendingQSched = rec.Got, in.QSchedRate
	return d, slots, nil
}

// ifindexesLocked looks the managed links of p up: a link that exists is
// set up on its interface; one whose lookup fails without proof that it
// is gone stays on the ifindex it is set up on, so that a sync releases
// nothing on an error that proves nothing.
func (e *Engine) ifindexesLocked(p *policy.Policy) map[string]int {
	out := make(map[string]int, len(p.Links))
	for _, l := range p.Links {
		if verdict, ifindex := e.judgeLink(l.Name); verdict != linkGone && ifindex != 0 {
			out[l.Name] = ifindex
		}
	}
	return out
}

// shieldInput is the shield's part of a derive's input: the whole drop
// list (built again only when the config file's policy or the shield
// state changed: it may hold many entries) and the protected clients.
func (e *Engine) shieldInput(base *policy.Policy, s *shieldState) *derive.Shield {
	if e.blocks.base != base || e.blocks.shield != s {
		e.blocks.base, e.blocks.shield, e.blocks.list = base, s, blockEntries(base, s)
	}
	out := &derive.Shield{Blocks: e.blocks.list, Protected: make([]derive.Protected, 0, len(s.Protected))}
	for ap, rec := range s.Protected {
		out.Protected = append(out.Protected, derive.Protected{Client: ap, Class: rec.Class, Admin: rec.Admin, UID: rec.UID})
	}
	sort.Slice(out.Protected, func(i, j int) bool { return out.Protected[i].Client.Compare(out.Protected[j].Client) < 0 })
	return out
}

// blockMemo is the drop list last built, and what it was built from.
type blockMemo struct {
	base   *policy.Policy
	shield *shieldState
	list   []xdp.BlockEntry
}

// reconcileLocked makes the kernel hold d, writing only what differs from
// what the pushes left (e.pushed): shaper trees first (so that classes
// exist before packets are steered into them), then the datapath's rules,
// the classifier on each link, the XDP shield and the qsocket schedulers;
// links no longer managed are released last.
func (e *Engine) reconcileLocked(d *derive.Desired) error {
	// Every link this push may set up counts as set up from here on, so
	// that a failure midway and the restore that follows release a newly
	// shaped or attached link instead of leaving it behind.
	want := make(map[string]int, len(d.Links))
	for _, l := range d.Links {
		want[l.Name] = l.Ifindex
		if _, ok := e.links[l.Name]; !ok {
			e.links[l.Name] = l.Ifindex
		}
	}
	for _, l := range d.Links {
		if e.pushed.planIs(l.Ifindex, l.Plan) {
			continue
		}
		was := e.pushed.plans[l.Ifindex] // nil: unknown, the shaper reads the tree
		delete(e.pushed.plans, l.Ifindex)
		if l.Plan != nil {
			if err := e.k.Shape(*l.Plan, was); err != nil {
				return err // the shaper names the link and its step
			}
		} else if owned, _ := e.k.Shaped(l.Ifindex); owned {
			if err := e.k.Unshape(l.Ifindex); err != nil {
				return err // the shaper names the link and its step
			}
		}
		e.pushed.setPlan(l.Ifindex, l.Plan)
	}
	if !e.pushed.rulesAre(d.Datapath) {
		var was []datapath.Reservation
		if e.pushed.rules != nil {
			was = e.pushed.rules.Reservations
		}
		e.pushed.rules = nil
		if err := e.k.ApplyRules(d.Datapath); err != nil {
			return fmt.Errorf("apply datapath rules: %w", err)
		}
		if ids := newReservations(was, d.Datapath.Reservations); len(ids) > 0 {
			e.wantBindLocked(d.Datapath.Rules, ids)
		}
		rules := d.Datapath
		e.pushed.rules = &rules
	}
	for _, l := range d.Links {
		if e.pushed.attached[l.Ifindex] {
			continue
		}
		if err := e.k.AttachLink(l.Ifindex); err != nil {
			return fmt.Errorf("link %s: %w", l.Name, err) // the datapath names its step
		}
		e.pushed.setAttached(l.Ifindex)
	}
	if err := e.reconcileShieldLocked(d); err != nil {
		return err
	}
	if err := e.reconcileQSchedsLocked(d); err != nil {
		return err
	}
	if err := e.reconcileContainersLocked(d); err != nil {
		return err
	}
	for name, ifindex := range e.links {
		if _, still := want[name]; still {
			continue
		}
		e.pushed.forgetLink(ifindex)
		if err := e.k.DetachLink(ifindex); err != nil {
			e.log.Warn("detach classifier", "link", name, "err", err)
		}
		if owned, _ := e.k.Shaped(ifindex); owned {
			if err := e.k.Unshape(ifindex); err != nil {
				e.log.Warn("remove HTB tree", "link", name, "err", err)
			}
		}
	}
	e.links = want
	return nil
}

// reconcileShieldLocked makes the XDP shield hold d's drop list and
// protected clients, and the XDP program (with its SYN limits) be on the
// links that need it and on no other.
func (e *Engine) reconcileShieldLocked(d *derive.Desired) error {
	sk := e.shieldKernel()
	if sk == nil {
		return nil // the derive refused what needs it
	}
	if e.pushed.blocks == nil || !sameBlocks(*e.pushed.blocks, d.Blocks) {
		e.pushed.blocks = nil
		if err := sk.SetBlocks(d.Blocks); err != nil {
			return err
		}
		e.pushed.blocks = &d.Blocks
	}
	if e.pushed.protected == nil || !slices.Equal(*e.pushed.protected, d.Protected) {
		e.pushed.protected = nil
		if err := sk.SetProtected(d.Protected); err != nil {
			return err
		}
		e.pushed.protected = &d.Protected
	}
	if e.xdp == nil {
		e.xdp = map[string]int{}
	}
	for _, l := range d.Links {
		if !l.XDP {
			if ifindex, ok := e.xdp[l.Name]; ok {
				delete(e.pushed.xdp, ifindex)
				if err := sk.DetachXDP(ifindex); err != nil {
					return fmt.Errorf("link %s: %w", l.Name, err)
				}
				delete(e.xdp, l.Name)
			}
			continue
		}
		if syn, ok := e.pushed.xdp[l.Ifindex]; ok && syn == l.Syn && e.xdp[l.Name] == l.Ifindex {
			continue
		}
		delete(e.pushed.xdp, l.Ifindex)
		if err := sk.AttachXDP(l.Ifindex, l.Syn); err != nil {
			return fmt.Errorf("link %s: %w", l.Name, err)
		}
		e.xdp[l.Name] = l.Ifindex
		e.pushed.setXDP(l.Ifindex, l.Syn)
	}
	for name, ifindex := range e.xdp {
		if l, ok := d.Link(name); ok && l.XDP {
			continue
		}
		delete(e.pushed.xdp, ifindex)
		if err := sk.DetachXDP(ifindex); err != nil {
			e.log.Warn("detach XDP shield", "link", name, "err", err)
		}
		delete(e.xdp, name)
	}
	return nil
}

// sameBlocks compares drop lists, the same list without a walk.
func sameBlocks(a, b []xdp.BlockEntry) bool {
	if len(a) != len(b) {
		return false
	}
	if len(a) == 0 || &a[0] == &b[0] {
		return true
	}
	return slices.Equal(a, b)
}

// reconcileQSchedsLocked gives the datapath the qsocket scheduler of every
// link whose plan has a qsched class, and takes it from the others.
func (e *Engine) reconcileQSchedsLocked(d *derive.Desired) error {
	if e.qk == nil {
		return nil
	}
	want := map[int]datapath.QSched{}
	for _, l := range d.Links {
		if l.QSched != nil {
			want[l.Ifindex] = *l.QSched
		}
	}
	if e.pushed.qscheds != nil && maps.Equal(want, *e.pushed.qscheds) {
		return nil
	}
	e.pushed.qscheds = nil
	if err := e.qk.SetQScheds(want); err != nil {
		return err // the datapath names its step
	}
	e.pushed.qscheds = &want
	return nil
}

// missingLocked are the managed links whose interface did not exist at the
// last sync.
func (e *Engine) missingLocked() []string {
	if e.desired == nil {
		return nil
	}
	return e.desired.Missing
}
