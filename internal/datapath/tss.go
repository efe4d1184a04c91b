package datapath

import (
	"cmp"
	"fmt"
	"slices"
)

// Tuple-space search sizes (HQ_MAX_TUPLES per family and buffer,
// HQ_TSS_ENTRIES hash entries and chain nodes per buffer).
const (
	maxTuples  = int(hostqosHqLimitsHQ_MAX_TUPLES)
	tssEntries = int(hostqosHqLimitsHQ_TSS_ENTRIES)
)

// tupleShape is a tuple's identity: the masks a rule's flow selectors
// apply to a packet's key.
type tupleShape struct {
	src, dst     [4]uint32
	lport, rport uint16
	proto, dscp  uint8
}

// buildTSS groups the rules without app selectors into tuples (one per
// distinct selector shape and family), keys each rule under the masked
// values it matches, and chains the rules sharing a key in policy order.
// A rule of either family goes into both families' tuples; an ICMP rule is
// keyed under ICMP and ICMPv6 (it matches both). Port ranges that are not
// one port are left to the full-rule check the classifier makes on every
// candidate: their tuple does not mask the port.
func (c *compiled) buildTSS() error {
	type tuple struct {
		shape tupleShape
		min   uint32
		pos   int
		// proto is the protocol of every key of the tuple, 0 when they
		// differ (or any): the classifier skips the tuple's lookup for a
		// packet of another protocol.
		proto  uint8
		hasKey bool
		mixed  bool
	}
	var tuples [2][]*tuple
	byShape := [2]map[tupleShape]*tuple{{}, {}}
	type entry struct {
		fam   int
		t     *tuple
		key   hostqosHqTssKey // Tuple filled in once tuples are ordered
		rules []uint32
	}
	entries := map[struct {
		fam   int
		shape tupleShape
		key   hostqosHqTssKey
	}]*entry{}
	var order []*entry
	for i := range c.rules {
		r := &c.rules[i]
		if r.HasApp != 0 {
			continue
		}
		var sh tupleShape
		var k hostqosHqTssKey
		sh.src, sh.dst = r.LocalMask, r.RemoteMask
		k.Src, k.Dst = r.LocalAddr, r.RemoteAddr
		if r.LportLo == r.LportHi {
			sh.lport, k.Lport = 0xffff, r.LportLo
		}
		if r.RportLo == r.RportHi {
			sh.rport, k.Rport = 0xffff, r.RportLo
		}
		if r.DscpIn >= 0 {
			sh.dscp, k.Dscp = 0x3f, uint8(r.DscpIn)
		}
		protos := []uint8{0}
		if r.Proto != 0 {
			sh.proto = 0xff
			protos = []uint8{r.Proto}
			if r.Proto == 1 {
				protos = []uint8{1, 58}
			}
		}
		for fi, fam := range []uint8{famIPv4, famIPv6} {
			if r.Family != famAny && r.Family != fam {
				continue
			}
			t := byShape[fi][sh]
			if t == nil {
				t = &tuple{shape: sh, min: uint32(i)}
				byShape[fi][sh] = t
				tuples[fi] = append(tuples[fi], t)
			}
			for _, pr := range protos {
				if !t.hasKey {
					t.proto, t.hasKey = pr, true
				} else if t.proto != pr {
					t.mixed = true
				}
				k.Proto = pr
				ek := struct {
					fam   int
					shape tupleShape
					key   hostqosHqTssKey
				}{fi, sh, k}
				e := entries[ek]
				if e == nil {
					e = &entry{fam: fi, t: t, key: k}
					entries[ek] = e
					order = append(order, e)
				}
				e.rules = append(e.rules, uint32(i))
			}
		}
	}
	// Tuples are created at their earliest rule, so they are already in
	// the order of it; the bound is the rule count, which MaxRules caps.
	for fi := range tuples {
		if len(tuples[fi]) > maxTuples {
			return fmt.Errorf("policy has %d distinct flow-selector shapes, the datapath holds at most %d", len(tuples[fi]), maxTuples)
		}
		slices.SortStableFunc(tuples[fi], func(a, b *tuple) int { return cmp.Compare(a.min, b.min) })
		c.tuples[fi] = make([]hostqosHqTuple, len(tuples[fi]))
		for j, t := range tuples[fi] {
			t.pos = j
			c.tuples[fi][j] = hostqosHqTuple{SrcMask: t.shape.src, DstMask: t.shape.dst, Min: t.min,
				LportMask: t.shape.lport, RportMask: t.shape.rport, ProtoMask: t.shape.proto, DscpMask: t.shape.dscp}
			if !t.mixed {
				c.tuples[fi][j].Proto = t.proto
			}
		}
	}
	c.tss = make(map[hostqosHqTssKey]hostqosHqTnode, len(order))
	c.tnodes = []hostqosHqTnode{{}}
	for _, e := range order {
		// The tuple's index within the buffer's part of hq_tuples; Apply
		// adds the buffer's offset.
		e.key.Tuple = uint32(e.fam*maxTuples + e.t.pos)
		head := hostqosHqTnode{Rule: e.rules[0]}
		prev := -1
		for _, ri := range e.rules[1:] {
			n := uint32(len(c.tnodes))
			if prev < 0 {
				head.Next = n
			} else {
				c.tnodes[prev].Next = n
			}
			c.tnodes = append(c.tnodes, hostqosHqTnode{Rule: ri})
			prev = int(n)
		}
		c.tss[e.key] = head
	}
	if len(c.tss) > tssEntries || len(c.tnodes) > tssEntries {
		return fmt.Errorf("policy needs %d search entries and %d chain nodes, the datapath holds at most %d of each", len(c.tss), len(c.tnodes), tssEntries)
	}
	return nil
}
