package datapath

import (
	"errors"
	"fmt"
	"math"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/hostqos/hostqos/internal/datapath/pin"
)

// The receive side: the TC ingress classifier (hq_tc_ingress) counts
// received packets per flow and rule and enforces download limits
// (struct hq_in): UDP by dropping the excess, TCP by the receive window
// the egress classifier writes into the flow's outgoing segments.

const tcxIngressPrefix = "tcx_ingress_"

// inLimit is a rule slot's download limit as struct hq_in holds it.
type inLimit struct {
	slot       uint16
	rate       uint64 // payload bytes per second
	nsQ16, tau uint64 // UDP policer
	prio       uint8  // the rule's class priority (link ingress level)
	ackClass   uint32 // HTB class of the rule's ACK leaf (ACK pacing)
}

// InBurst is the depth of a UDP download limit's bucket: 20 ms at the
// rate, and at least two full-size frames.
func InBurst(rateBits uint64) uint64 {
	return max(3000, rateBits/8/50)
}

func newInLimit(slot uint16, rateBits uint64, prio uint8, ackClass uint32) inLimit {
	if rateBits == 0 {
		return inLimit{slot: slot, prio: prio}
	}
	burst := InBurst(rateBits)
	return inLimit{slot: slot, rate: rateBits / 8, prio: prio, ackClass: ackClass,
		nsQ16: uint64(math.Round(8e9 * (1 << policeShift) / float64(rateBits))),
		tau:   uint64(float64(burst) * 8e9 / float64(rateBits))}
}

// writeInLimits sets the download limit of every rule slot of the new
// policy (0 = none) before the flip. A slot whose limit did not change
// keeps its state (estimator, window gain, bucket) and costs no syscall:
// what was written last is remembered (d.inLast; nil after a failed write
// or an adoption, when each slot is read back once). Called with d.mu held.
func (d *Datapath) writeInLimits(ls []inLimit) error {
	last := d.inLast
	d.inLast = nil
	if last == nil {
		last = map[uint16]inLimit{}
	}
	for _, l := range ls {
		if old, ok := last[l.slot]; ok && old == l {
			continue
		}
		k := uint32(l.slot)
		var v hostqosHqIn
		if err := d.objs.HqIn.Lookup(&k, &v); err != nil {
			return fmt.Errorf("read download limit of slot %d: %w", l.slot, err)
		}
		if v.Rate == l.rate && v.NsQ16 == l.nsQ16 && v.Tau == l.tau && (v.Prio != uint32(l.prio) || v.AckClassid != l.ackClass) {
			// Only the class priority or the ACK leaf changed: the
			// limit keeps its state.
			v.Prio, v.AckClassid = uint32(l.prio), l.ackClass
			if err := d.objs.HqIn.Update(&k, &v, ebpf.UpdateAny); err != nil {
				return fmt.Errorf("write download limit of slot %d: %w", l.slot, err)
			}
		}
		if v.Rate != l.rate || v.NsQ16 != l.nsQ16 || v.Tau != l.tau {
			// A new rate keeps the window gain (it corrects for the
			// path, not the rate) and restarts the rest.
			v = hostqosHqIn{Rate: l.rate, NsQ16: l.nsQ16, Tau: l.tau, Gain: v.Gain, Prio: uint32(l.prio), AckClassid: l.ackClass}
			if err := d.objs.HqIn.Update(&k, &v, ebpf.UpdateAny); err != nil {
				return fmt.Errorf("write download limit of slot %d: %w", l.slot, err)
			}
		}
		last[l.slot] = l
	}
	d.inLast = last
	return nil
}

// addRxRuleCounters adds the receive-side rule counters to out.
func (d *Datapath) addRxRuleCounters(out []Counters) error {
	// The buffers (about 100 KB per CPU) are kept: the daemon reads
	// the rule counters several times a second.
	d.rxMu.Lock()
	defer d.rxMu.Unlock()
	if len(d.rxVals) != MaxRules*d.ncpu {
		d.rxKeys, d.rxVals = make([]uint32, MaxRules), make([]hostqosHqCounters, MaxRules*d.ncpu)
	}
	keys, vals := d.rxKeys, d.rxVals
	var cur ebpf.MapBatchCursor
	n, err := d.objs.HqRuleCtrIn.BatchLookup(&cur, keys, vals, nil)
	if err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("read receive rule counters: %w", err)
	}
	for i := 0; i < n; i++ {
		k := keys[i]
		if k >= uint32(len(out)) {
			continue
		}
		for c := 0; c < d.ncpu; c++ {
			v := &vals[i*d.ncpu+c]
			out[k].RxPackets += v.Packets
			out[k].RxBytes += v.Bytes
			out[k].RxDrops += v.Drops
		}
	}
	return nil
}

// ingressProgram picks the ingress classifier variant for the
// interface's link layer (see egressProgram).
func (d *Datapath) ingressProgram(ifindex int) (*ebpf.Program, error) {
	if !hasEthernetHeader(ifindex) {
		_, ingress, err := d.loadL3()
		return ingress, err
	}
	return d.objs.HqTcIngress, nil
}

// attachIngress attaches the ingress classifier to the TCX ingress hook
// of an interface (idempotent) and pins the link beside the egress one.
// Called with d.mu held.
func (d *Datapath) attachIngress(ifindex int) error {
	if l, ok := d.tcxIn[ifindex]; ok {
		live, err := onHookDir(ifindex, l, ebpf.AttachTCXIngress)
		if err != nil || live {
			return nil
		}
		delete(d.tcxIn, ifindex)
		_ = pin.Drop(l)
	}
	prog, err := d.ingressProgram(ifindex)
	if err != nil {
		return err
	}
	l, err := link.AttachTCX(link.TCXOptions{
		Interface: ifindex,
		Program:   prog,
		Attach:    ebpf.AttachTCXIngress,
		Anchor:    link.Head(),
	})
	if err != nil {
		return fmt.Errorf("attach ingress classifier to ifindex %d: %w", ifindex, err)
	}
	if err := d.ingressLinks().Pin(l, ifindex); err != nil {
		return err
	}
	d.tcxIn[ifindex] = l
	return nil
}

// detachIngress removes the ingress classifier of an interface. Called
// with d.mu held.
func (d *Datapath) detachIngress(ifindex int) error {
	l, ok := d.tcxIn[ifindex]
	if !ok {
		var err error
		if l, err = d.ingressLinks().Load(ifindex); err != nil || l == nil {
			return err
		}
	}
	delete(d.tcxIn, ifindex)
	return pin.Drop(l)
}

// ingressLinks are the pinned links of the TCX ingress classifier.
func (d *Datapath) ingressLinks() pin.Links {
	return pin.Links{Dir: d.dir, Prefix: tcxIngressPrefix, Type: link.TCXType, What: "ingress"}
}

// IngressAttached reports whether this datapath's ingress classifier is
// on the TCX ingress hook of ifindex, as the kernel sees it now.
func (d *Datapath) IngressAttached(ifindex int) (bool, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	l, ok := d.tcxIn[ifindex]
	if !ok {
		return false, nil
	}
	return onHookDir(ifindex, l, ebpf.AttachTCXIngress)
}

// onHookDir asks the kernel whether the program of link l is attached to
// the TCX hook (ingress or egress) of ifindex.
func onHookDir(ifindex int, l link.Link, at ebpf.AttachType) (bool, error) {
	info, err := l.Info()
	if err != nil {
		return false, fmt.Errorf("read TCX link of ifindex %d: %w", ifindex, err)
	}
	res, err := link.QueryPrograms(link.QueryOptions{Target: ifindex, Attach: at})
	if err != nil {
		return false, fmt.Errorf("query TCX programs of ifindex %d: %w", ifindex, err)
	}
	for _, p := range res.Programs {
		if p.ID == info.Program {
			return true, nil
		}
	}
	return false, nil
}
