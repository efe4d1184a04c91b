//go:build linux

package shaper

import (
	"errors"
	"fmt"
	"log/slog"
	"sort"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// ErrForeignQdisc is wrapped by Apply's error when the link's root qdisc
// belongs to someone else.
var ErrForeignQdisc = errors.New("foreign root qdisc")

// dumpTries is how often a netlink dump is tried when the kernel reports
// that the list changed while it was read (NLM_F_DUMP_INTR).
const dumpTries = 5

// retryDump runs dump until it is not interrupted, at most dumpTries
// times; an interrupted dump's partial result is never used.
func retryDump[T any](dump func() (T, error)) (T, error) {
	var (
		v   T
		err error
	)
	for range dumpTries {
		dumps.Add(1)
		v, err = dump()
		if !errors.Is(err, netlink.ErrDumpInterrupted) {
			return v, err
		}
	}
	var zero T
	return zero, err
}

// kclass is an HTB class in kernel units: rates in bytes/s, buffers in psched
// ticks, as rtnetlink carries them.
type kclass struct {
	minor, parent   uint16
	rate, ceil      uint64
	buffer, cbuffer uint32
	quantum, prio   uint32
	leaf            bool
	label           string
}

func toKernel(c HTBClass) kclass {
	rate, ceil := c.Rate/8, c.Ceil/8
	return kclass{
		minor: c.Minor, parent: c.ParentMinor,
		rate: rate, ceil: ceil,
		buffer:  netlink.Xmittime(rate, c.Burst),
		cbuffer: netlink.Xmittime(ceil, c.Cburst),
		quantum: c.Quantum, prio: uint32(c.Prio),
		leaf: c.Leaf, label: c.Label,
	}
}

func fromNetlink(c *netlink.HtbClass) kclass {
	_, minor := netlink.MajorMinor(c.Handle)
	var parent uint16
	if c.Parent != netlink.HANDLE_ROOT {
		_, parent = netlink.MajorMinor(c.Parent)
	}
	return kclass{
		minor: minor, parent: parent,
		rate: c.Rate, ceil: c.Ceil,
		buffer: c.Buffer, cbuffer: c.Cbuffer,
		quantum: c.Quantum, prio: c.Prio,
		leaf:  c.Level == 0,
		label: fmt.Sprintf("class %x", minor),
	}
}

func (k kclass) netlink(ifindex int) *netlink.HtbClass {
	parent := netlink.MakeHandle(Handle, 0)
	if k.parent != 0 {
		parent = classID(k.parent)
	}
	return &netlink.HtbClass{
		ClassAttrs: netlink.ClassAttrs{LinkIndex: ifindex, Handle: classID(k.minor), Parent: parent},
		Rate:       k.rate, Ceil: k.ceil,
		Buffer: k.buffer, Cbuffer: k.cbuffer,
		Quantum: k.quantum, Prio: k.prio,
	}
}

// sameParams reports whether have already carries want's parameters. The
// kernel only updates quantum and prio of leaf classes (and they mean nothing
// for inner ones), so they are compared for leaves only.
func sameParams(want, have kclass) bool {
	if want.rate != have.rate || want.ceil != have.ceil || want.buffer != have.buffer || want.cbuffer != have.cbuffer {
		return false
	}
	return !want.leaf || (want.quantum == have.quantum && want.prio == have.prio)
}

// txn applies netlink operations and remembers how to undo each one.
type txn struct {
	log  *slog.Logger
	h    *netlink.Handle
	link netlink.Link
	undo []func() error
	ops  int
}

func (t *txn) do(what string, op func() error, undo func() error) error {
	if err := op(); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	t.ops++
	t.log.Debug("applied", "op", what, "link", t.link.Attrs().Name)
	if undo != nil {
		t.undo = append(t.undo, undo)
	}
	return nil
}

func (t *txn) rollback() error {
	var errs []error
	for i := len(t.undo) - 1; i >= 0; i-- {
		if err := t.undo[i](); err != nil {
			errs = append(errs, err)
		}
	}
	t.undo = nil
	return errors.Join(errs...)
}

func (t *txn) addClass(k kclass) error {
	ifx := t.link.Attrs().Index
	return t.do(fmt.Sprintf("add HTB class %s (%s)", netlink.HandleStr(classID(k.minor)), k.label),
		func() error { return t.h.ClassAdd(k.netlink(ifx)) },
		func() error { return t.h.ClassDel(k.netlink(ifx)) })
}

func (t *txn) changeClass(want, old kclass) error {
	ifx := t.link.Attrs().Index
	return t.do(fmt.Sprintf("change HTB class %s (%s)", netlink.HandleStr(classID(want.minor)), want.label),
		func() error { return t.h.ClassChange(want.netlink(ifx)) },
		func() error { return t.h.ClassChange(old.netlink(ifx)) })
}

func (t *txn) delClass(old kclass) error {
	ifx := t.link.Attrs().Index
	return t.do(fmt.Sprintf("delete HTB class %s", netlink.HandleStr(classID(old.minor))),
		func() error { return t.h.ClassDel(old.netlink(ifx)) },
		func() error { return t.h.ClassAdd(old.netlink(ifx)) })
}

func htbRoot(ifindex int, defcls uint16) *netlink.Htb {
	q := netlink.NewHtb(netlink.QdiscAttrs{
		LinkIndex: ifindex,
		Handle:    netlink.MakeHandle(Handle, 0),
		Parent:    netlink.HANDLE_ROOT,
	})
	q.Defcls = uint32(defcls)
	return q
}

// createRoot adds our HTB root in place of the kernel's default root qdisc;
// undoing deletes it, which brings the default back.
func (t *txn) createRoot(defcls uint16) error {
	q := htbRoot(t.link.Attrs().Index, defcls)
	return t.do(fmt.Sprintf("add HTB root qdisc %x: default %x", Handle, defcls),
		func() error { return t.h.QdiscAdd(q) },
		func() error { return t.h.QdiscDel(q) })
}

// deleteRoot removes our HTB root; undoing recreates it with old classes.
func (t *txn) deleteRoot(defcls uint16, old []kclass) error {
	ifx := t.link.Attrs().Index
	q := htbRoot(ifx, defcls)
	return t.do(fmt.Sprintf("delete HTB root qdisc %x:", Handle),
		func() error { return t.h.QdiscDel(q) },
		func() error {
			if err := t.h.QdiscAdd(q); err != nil {
				return fmt.Errorf("restore HTB root qdisc: %w", err)
			}
			for _, k := range parentsFirst(old) {
				if err := t.h.ClassAdd(k.netlink(ifx)); err != nil {
					return fmt.Errorf("restore HTB class %s: %w", netlink.HandleStr(classID(k.minor)), err)
				}
			}
			return nil
		})
}

// Apply makes the kernel's HTB tree on plan.Link match plan, in the network
// namespace of the calling thread. Existing classes are changed in place and
// keep their queues and counters; classes not in the plan are deleted. A
// foreign root qdisc makes Apply fail with ErrForeignQdisc and is left alone.
// On error Apply undoes what it did, as far as the kernel lets it. Its
// errors start with "apply HTB plan to <link>".
func Apply(plan Plan, opts ...Option) error {
	_, err := apply(plan, newOptions(opts))
	return err
}

// ApplyFrom is Apply on a link that holds the tree was (what an earlier
// Apply of was left there): it writes only the difference, with targeted
// operations and no dump of the tree. If the kernel turns out not to hold
// was (an operation fails), ApplyFrom undoes what it did and does what
// Apply does; nothing is torn down on the assumption.
func ApplyFrom(was, plan Plan, opts ...Option) error {
	_, err := applyFrom(&was, plan, newOptions(opts))
	return err
}

// apply is Apply returning the number of kernel changes it made.
func apply(plan Plan, o options) (int, error) {
	return applyFrom(nil, plan, o)
}

// applyFrom is apply from the tree was (nil: unknown, read it).
func applyFrom(was *Plan, plan Plan, o options) (int, error) {
	ops, err := applyPlan(was, plan, o)
	if err != nil {
		return 0, fmt.Errorf("apply HTB plan to %s: %w", linkName(plan.Link), err)
	}
	return ops, nil
}

// applyPlan does apply's work; its errors do not name the link (apply does).
func applyPlan(was *Plan, plan Plan, o options) (int, error) {
	if err := checkPlan(plan); err != nil {
		return 0, err
	}
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return 0, fmt.Errorf("open rtnetlink: %w", err)
	}
	defer h.Close()
	link, err := h.LinkByIndex(plan.Link.Ifindex)
	if err != nil {
		return 0, fmt.Errorf("look up link: %w", err)
	}
	if plan.Link.Name != "" && link.Attrs().Name != plan.Link.Name {
		return 0, fmt.Errorf("look up link: ifindex %d is now %s", plan.Link.Ifindex, link.Attrs().Name)
	}
	t := &txn{log: o.log, h: h, link: link}
	if was != nil && was.Link.Ifindex == plan.Link.Ifindex && was.Link.Name == plan.Link.Name {
		// Only the difference, with no dump. Any error (the kernel does
		// not hold was) undoes it and falls back to reading the tree.
		err := t.syncKnown(plan, knownOf(*was))
		if err == nil {
			err = setGSO(o.log, h, link, GSOCap(plan.Link.Rate))
		}
		if err == nil {
			if t.ops > 0 {
				o.log.Info("HTB tree updated", "link", link.Attrs().Name, "changes", t.ops, "classes", len(plan.Classes))
			}
			return t.ops, nil
		}
		if rerr := t.rollback(); rerr != nil {
			o.log.Warn("undo HTB changes before reading the tree", "link", link.Attrs().Name, "err", rerr)
		}
		o.log.Debug("HTB tree is not the one applied last; reading it", "link", link.Attrs().Name, "err", err)
		t = &txn{log: o.log, h: h, link: link}
	}
	if err := t.sync(plan); err != nil {
		if rerr := t.rollback(); rerr != nil {
			err = fmt.Errorf("%w (rolling back: %v)", err, rerr)
		}
		return 0, err
	}
	if err := t.syncQueues(plan); err != nil {
		if rerr := t.rollback(); rerr != nil {
			err = fmt.Errorf("%w (rolling back: %v)", err, rerr)
		}
		return 0, err
	}
	if err := setGSO(o.log, h, link, GSOCap(plan.Link.Rate)); err != nil {
		if rerr := t.rollback(); rerr != nil {
			err = fmt.Errorf("%w (rolling back: %v)", err, rerr)
		}
		return 0, err
	}
	if t.ops > 0 {
		o.log.Info("HTB tree updated", "link", link.Attrs().Name, "changes", t.ops, "classes", len(plan.Classes))
	}
	return t.ops, nil
}

func (t *txn) sync(plan Plan) error {
	root, err := rootQdisc(t.h, t.link)
	if err != nil {
		return err
	}
	var have map[uint16]kclass
	switch {
	case root != nil && isOurs(root):
		have, err = ourClasses(t.h, t.link)
		if err != nil {
			return err
		}
		if uint16(root.(*netlink.Htb).Defcls) != plan.DefaultMinor {
			// HTB cannot change its default class: rebuild the root.
			old := make([]kclass, 0, len(have))
			for _, k := range have {
				old = append(old, k)
			}
			if err := t.deleteRoot(uint16(root.(*netlink.Htb).Defcls), old); err != nil {
				return err
			}
			if err := t.createRoot(plan.DefaultMinor); err != nil {
				return err
			}
			have = nil
		}
	case root == nil || root.Attrs().Handle == 0:
		if err := t.createRoot(plan.DefaultMinor); err != nil {
			return err
		}
	default:
		return fmt.Errorf("root qdisc %s %s not created by hostqos: %w",
			root.Type(), netlink.HandleStr(root.Attrs().Handle), ErrForeignQdisc)
	}
	_, err = t.syncClasses(plan, have)
	return err
}

// syncClasses makes the classes have (by minor) into plan's; it returns
// the minors of the classes it added (new, or deleted and made again:
// their queues are the kernel's default).
func (t *txn) syncClasses(plan Plan, have map[uint16]kclass) (map[uint16]bool, error) {
	want := make(map[uint16]kclass, len(plan.Classes))
	for _, c := range plan.Classes {
		want[c.Minor] = toKernel(c)
	}
	// Delete what the plan lacks, what moved to another parent (HTB cannot
	// re-parent a class) and everything below those.
	del := map[uint16]bool{}
	for m, k := range have {
		if w, ok := want[m]; !ok || w.parent != k.parent {
			del[m] = true
		}
	}
	for changed := true; changed; {
		changed = false
		for m, k := range have {
			if !del[m] && k.parent != 0 && del[k.parent] {
				del[m] = true
				changed = true
			}
		}
	}
	var dels []kclass
	for m := range del {
		dels = append(dels, have[m])
	}
	dels = parentsFirst(dels)
	for i := len(dels) - 1; i >= 0; i-- {
		if err := t.delClass(dels[i]); err != nil {
			return nil, err
		}
	}
	added := map[uint16]bool{}
	for _, c := range plan.Classes {
		w := want[c.Minor]
		old, exists := have[c.Minor]
		switch {
		case !exists || del[c.Minor]:
			if err := t.addClass(w); err != nil {
				return nil, err
			}
			added[c.Minor] = true
		case !sameParams(w, old):
			if err := t.changeClass(w, old); err != nil {
				return nil, err
			}
		}
	}
	return added, nil
}

// parentsFirst orders classes so that every parent precedes its children
// (depth first by depth, then by minor).
func parentsFirst(ks []kclass) []kclass {
	parent := map[uint16]uint16{}
	for _, k := range ks {
		parent[k.minor] = k.parent
	}
	depth := func(m uint16) int {
		d := 0
		for p, ok := parent[m]; ok && p != 0 && d < 16; p, ok = parent[p] {
			d++
		}
		return d
	}
	out := append([]kclass(nil), ks...)
	sort.Slice(out, func(i, j int) bool {
		di, dj := depth(out[i].minor), depth(out[j].minor)
		if di != dj {
			return di < dj
		}
		return out[i].minor < out[j].minor
	})
	return out
}

// checkPlan rejects plans Build would not produce: duplicate minors, children
// before parents, a default that is not a leaf, rates below MinRate or
// ceilings below rates.
func checkPlan(p Plan) error {
	if len(p.Classes) == 0 {
		return errors.New("plan has no classes")
	}
	seen := map[uint16]HTBClass{}
	for _, c := range p.Classes {
		if c.Minor == 0 {
			return fmt.Errorf("class %q: minor 0", c.Label)
		}
		if _, dup := seen[c.Minor]; dup {
			return fmt.Errorf("class %q: minor %x used twice", c.Label, c.Minor)
		}
		if c.ParentMinor != 0 {
			if par, ok := seen[c.ParentMinor]; !ok || par.Leaf {
				return fmt.Errorf("class %q: parent %x is not an inner class listed before it", c.Label, c.ParentMinor)
			}
		}
		if (c.Rate < MinRate && !(isAckMinor(c.Minor) && c.Rate >= MinAckRate)) || c.Ceil < c.Rate {
			return fmt.Errorf("class %q: rate %s, ceil %s", c.Label, fmtRate(c.Rate), fmtRate(c.Ceil))
		}
		if c.Prio < 0 || c.Prio > 7 {
			return fmt.Errorf("class %q: prio %d outside 0..7", c.Label, c.Prio)
		}
		seen[c.Minor] = c
	}
	if d, ok := seen[p.DefaultMinor]; !ok || !d.Leaf {
		return fmt.Errorf("default minor %x is not a leaf of the plan", p.DefaultMinor)
	}
	return nil
}

// rootQdisc returns the link's root qdisc (nil if none); its error does
// not name the link.
func rootQdisc(h *netlink.Handle, link netlink.Link) (netlink.Qdisc, error) {
	qs, err := retryDump(func() ([]netlink.Qdisc, error) { return h.QdiscList(link) })
	if err != nil {
		return nil, fmt.Errorf("list qdiscs: %w", err)
	}
	for _, q := range qs {
		if q.Attrs().Parent == netlink.HANDLE_ROOT {
			return q, nil
		}
	}
	return nil, nil
}

func isOurs(q netlink.Qdisc) bool {
	_, ok := q.(*netlink.Htb)
	return ok && q.Attrs().Handle == netlink.MakeHandle(Handle, 0)
}

// ourClasses returns the link's HTB classes of our handle by minor; its
// error does not name the link.
func ourClasses(h *netlink.Handle, link netlink.Link) (map[uint16]kclass, error) {
	cs, err := retryDump(func() ([]netlink.Class, error) { return h.ClassList(link, 0) })
	if err != nil {
		return nil, fmt.Errorf("list HTB classes: %w", err)
	}
	out := map[uint16]kclass{}
	for _, c := range cs {
		hc, ok := c.(*netlink.HtbClass)
		if !ok {
			continue
		}
		if major, _ := netlink.MajorMinor(hc.Handle); major != Handle {
			continue
		}
		k := fromNetlink(hc)
		out[k.minor] = k
	}
	return out, nil
}

// Remove deletes our HTB root qdisc (and with it every class) from the link
// with index ifindex. It is a no-op when the link has no root of ours or the
// link is gone; other qdiscs (clsact, ingress, foreign roots) are untouched.
// Its errors start with "remove HTB tree of <link>".
func Remove(ifindex int, opts ...Option) error {
	o := newOptions(opts)
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return fmt.Errorf("remove HTB tree of ifindex %d: open rtnetlink: %w", ifindex, err)
	}
	defer h.Close()
	link, err := h.LinkByIndex(ifindex)
	if err != nil {
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) {
			return nil
		}
		return fmt.Errorf("remove HTB tree of ifindex %d: look up link: %w", ifindex, err)
	}
	name := link.Attrs().Name
	root, err := rootQdisc(h, link)
	if err != nil {
		return fmt.Errorf("remove HTB tree of %s: %w", name, err)
	}
	if root == nil || !isOurs(root) {
		return nil
	}
	if err := h.QdiscDel(root); err != nil {
		return fmt.Errorf("remove HTB tree of %s: delete HTB root qdisc: %w", name, err)
	}
	if err := setGSO(o.log, h, link, defaultGSO(link)); err != nil {
		return fmt.Errorf("remove HTB tree of %s: %w", name, err)
	}
	o.log.Info("HTB tree removed", "link", name)
	return nil
}

// Owned reports whether the root qdisc of the link with index ifindex is our
// HTB.
func Owned(ifindex int) (bool, error) {
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return false, fmt.Errorf("read root qdisc of ifindex %d: open rtnetlink: %w", ifindex, err)
	}
	defer h.Close()
	link, err := h.LinkByIndex(ifindex)
	if err != nil {
		return false, fmt.Errorf("read root qdisc of ifindex %d: look up link: %w", ifindex, err)
	}
	root, err := rootQdisc(h, link)
	if err != nil {
		return false, fmt.Errorf("read root qdisc of %s: %w", link.Attrs().Name, err)
	}
	return root != nil && isOurs(root), nil
}

// ClassStats are the kernel counters of one HTB class.
type ClassStats struct {
	Minor      uint16
	Bytes      uint64 // bytes sent, as HTB counts them (L2 frames, GSO expanded)
	Packets    uint64 // packets sent (GSO packets count once per segment)
	Drops      uint64 // packets dropped by the class's queue
	Overlimits uint64 // times the class was throttled
	Backlog    uint32 // bytes queued now
	// RateBps is the kernel rate estimator's bytes per second; 0 unless an
	// estimator is attached (HTB attaches none by default). Derive rates from
	// Bytes deltas instead.
	RateBps uint64
}

// Stats returns the counters of every class of our HTB tree on the link with
// index ifindex, ordered by minor. It returns no classes when the link's root
// is not ours.
func Stats(ifindex int) ([]ClassStats, error) {
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("read HTB class counters of ifindex %d: open rtnetlink: %w", ifindex, err)
	}
	defer h.Close()
	link, err := h.LinkByIndex(ifindex)
	if err != nil {
		return nil, fmt.Errorf("read HTB class counters of ifindex %d: look up link: %w", ifindex, err)
	}
	root, err := rootQdisc(h, link)
	if err != nil {
		return nil, fmt.Errorf("read HTB class counters of %s: %w", link.Attrs().Name, err)
	}
	if root == nil || !isOurs(root) {
		return nil, nil
	}
	cs, err := retryDump(func() ([]netlink.Class, error) { return h.ClassList(link, 0) })
	if err != nil {
		return nil, fmt.Errorf("read HTB class counters of %s: list HTB classes: %w", link.Attrs().Name, err)
	}
	var out []ClassStats
	for _, c := range cs {
		hc, ok := c.(*netlink.HtbClass)
		if !ok {
			continue
		}
		major, minor := netlink.MajorMinor(hc.Handle)
		if major != Handle {
			continue
		}
		s := ClassStats{Minor: minor}
		if st := hc.Statistics; st != nil {
			if st.Basic != nil {
				s.Bytes, s.Packets = st.Basic.Bytes, uint64(st.Basic.Packets)
			}
			if st.Queue != nil {
				s.Drops, s.Overlimits, s.Backlog = uint64(st.Queue.Drops), uint64(st.Queue.Overlimits), st.Queue.Backlog
			}
			if st.RateEst != nil {
				s.RateBps = uint64(st.RateEst.Bps)
			}
		}
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Minor < out[j].Minor })
	return out, nil
}
