package datapath

import (
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/cilium/ebpf"
)

// Link ingress budgets (struct hq_link_in): a link's received frames are
// held to its ingress rate by class priority. Each level (a class
// priority, 0 highest) may receive the rate minus what the levels above it
// received in the last epoch; its TCP flows get receive windows of their
// share of that (hq_rwnd_limit), its UDP beyond it is dropped.

const (
	// inLevels is the number of priority levels of a budget (HQ_IN_LEVELS).
	inLevels = 8
	// MaxLinksIn is how many links may have an ingress budget at once.
	MaxLinksIn = 1024
)

// checkLinksIn validates the link budgets of a policy.
func checkLinksIn(ls []LinkIn, prioNone uint8) error {
	if len(ls) > MaxLinksIn {
		return fmt.Errorf("policy has %d links with an ingress rate, the datapath holds at most %d", len(ls), MaxLinksIn)
	}
	if prioNone >= inLevels {
		return fmt.Errorf("ingress level of unmatched traffic %d out of range 0..%d", prioNone, inLevels-1)
	}
	seen := map[int]bool{}
	for _, l := range ls {
		if l.Ifindex <= 0 {
			return fmt.Errorf("link ingress budget: ifindex %d invalid", l.Ifindex)
		}
		if seen[l.Ifindex] {
			return fmt.Errorf("link ingress budget: ifindex %d given twice", l.Ifindex)
		}
		seen[l.Ifindex] = true
		if l.Rate < 8 {
			return fmt.Errorf("link ingress budget of ifindex %d: rate %d bit/s: want at least 8", l.Ifindex, l.Rate)
		}
	}
	return nil
}

// writeLinksIn makes the budgets in hq_link_in those of ls and removes the
// others. A budget whose rate and default level did not change keeps its
// state (levels' estimates and window gains); a new rate restarts the
// levels' budgets from it. Called with d.mu held.
func (d *Datapath) writeLinksIn(ls []LinkIn, prioNone uint8) error {
	want := map[uint32]LinkIn{}
	for _, l := range ls {
		want[uint32(l.Ifindex)] = l
	}
	var stale []uint32
	var k uint32
	it := d.objs.HqLinkIn.Iterate()
	var v hostqosHqLinkIn
	for it.Next(&k, &v) {
		if _, ok := want[k]; !ok {
			stale = append(stale, k)
		}
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("read link ingress budgets: %w", err)
	}
	for _, l := range ls {
		k := uint32(l.Ifindex)
		var v hostqosHqLinkIn
		err := d.objs.HqLinkIn.Lookup(&k, &v)
		if err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("read ingress budget of ifindex %d: %w", l.Ifindex, err)
		}
		rate := l.Rate / 8
		if err == nil && v.Rate == rate && v.PrioNone == uint32(prioNone) {
			continue
		}
		if v.Rate != rate {
			for i := range v.Lv {
				v.Lv[i].Avail, v.Lv[i].NsQ16 = 0, 0
			}
		}
		v.Rate, v.PrioNone = rate, uint32(prioNone)
		if err := d.objs.HqLinkIn.Update(&k, &v, ebpf.UpdateAny); err != nil {
			return fmt.Errorf("write ingress budget of ifindex %d: %w", l.Ifindex, err)
		}
	}
	for _, k := range stale {
		if err := d.objs.HqLinkIn.Delete(&k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("remove ingress budget of ifindex %d: %w", k, err)
		}
	}
	atomic.StoreUint32(&d.stateView().InLinks, uint32(len(ls)))
	return nil
}

// InLevel is one priority level of a link's ingress budget as the datapath
// last computed it (bytes of frames per second).
type InLevel struct {
	Priority int    `json:"priority"`
	Avail    uint64 `json:"avail_bps"` // bit/s the level may receive
	Used     uint64 `json:"used_bps"`  // bit/s it received in the last epoch
	Flows    uint32 `json:"flows"`     // flows that received in the last epoch
}

// LinkInLevels reads a link's ingress budget: its levels that received
// anything or were limited below the rate; nil when the link has none.
func (d *Datapath) LinkInLevels(ifindex int) ([]InLevel, error) {
	k := uint32(ifindex)
	var v hostqosHqLinkIn
	if err := d.objs.HqLinkIn.Lookup(&k, &v); err != nil {
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("read ingress budget of ifindex %d: %w", ifindex, err)
	}
	var out []InLevel
	for i, l := range v.Lv {
		if l.Used == 0 && l.FlowsPrev == 0 {
			continue
		}
		out = append(out, InLevel{Priority: i, Avail: l.Avail * 8, Used: l.Used * 8, Flows: l.FlowsPrev})
	}
	return out, nil
}
