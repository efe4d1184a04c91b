package datapath

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
)

// RuleCounter reads the counters of one rule slot, both directions: two
// map lookups where RuleCounters reads every slot. The engine reads a slot
// it hands to a new rule (the baseline its counters start from).
func (d *Datapath) RuleCounter(slot int) (Counters, error) {
	var c Counters
	if slot < 0 || slot >= MaxRules {
		return c, fmt.Errorf("read counters of rule slot %d: out of range 0..%d", slot, MaxRules-1)
	}
	k := uint32(slot)
	vals := make([]hostqosHqCounters, d.ncpu)
	for _, m := range []struct {
		m    *ebpf.Map
		what string
		p    [3]*uint64
	}{
		{d.objs.HqRuleCtr, "counters", [3]*uint64{&c.Packets, &c.Bytes, &c.Drops}},
		{d.objs.HqRuleCtrIn, "receive counters", [3]*uint64{&c.RxPackets, &c.RxBytes, &c.RxDrops}},
	} {
		err := m.m.Lookup(&k, vals)
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			continue
		}
		if err != nil {
			return Counters{}, fmt.Errorf("read %s of rule slot %d: %w", m.what, slot, err)
		}
		for _, v := range vals {
			*m.p[0] += v.Packets
			*m.p[1] += v.Bytes
			*m.p[2] += v.Drops
		}
	}
	return c, nil
}
