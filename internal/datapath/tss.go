package datapath

import (
	"encoding/binary"
	"fmt"
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
// Rules are named by their positions (c.pos), chain nodes by tnodeOf.
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
		// lo and hi bound the tuple's keys field by field (see
		// keyBounds): a packet outside them skips the tuple's lookup.
		lo, hi keyBounds
		boxed  bool
		// keys counts the tuple's distinct keys; key is its first.
		keys int
		key  hostqosHqTssKey
	}
	var tuples [2][]*tuple
	byShape := [2]map[tupleShape]*tuple{{}, {}}
	// Rules come in policy order (increasing positions), so a tuple made
	// at its first rule is already in the order of its earliest rule: its
	// place in the family's list is final when it is made, and so is every
	// key (this runs over the whole policy on every change: one map, sized
	// up front). tails holds the last chain node of the entries with more
	// than one rule.
	c.tss = make(map[hostqosHqTssKey]hostqosHqTnode, len(c.rules))
	c.tnodes = make([]hostqosHqTnode, 1) // node 0 unused
	var tails map[hostqosHqTssKey]uint32
	nodes := 0
	for i := range c.rules {
		r := &c.rules[i]
		if r.HasApp != 0 {
			continue
		}
		at := c.pos[i]
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
		protos, nprotos := [2]uint8{0}, 1
		if r.Proto != 0 {
			sh.proto = 0xff
			protos[0] = r.Proto
			if r.Proto == 1 {
				protos, nprotos = [2]uint8{1, 58}, 2
			}
		}
		for fi, fam := range [2]uint8{famIPv4, famIPv6} {
			if r.Family != famAny && r.Family != fam {
				continue
			}
			t := byShape[fi][sh]
			if t == nil {
				t = &tuple{shape: sh, min: at, pos: len(tuples[fi])}
				byShape[fi][sh] = t
				tuples[fi] = append(tuples[fi], t)
			}
			// The tuple's index within the buffer's part of hq_tuples;
			// Apply adds the buffer's offset.
			k.Tuple = uint32(fi*maxTuples + t.pos)
			for pi, pr := range protos[:nprotos] {
				if !t.hasKey {
					t.proto, t.hasKey = pr, true
				} else if t.proto != pr {
					t.mixed = true
				}
				k.Proto = pr
				if b := boundsOf(&k); !t.boxed {
					t.lo, t.hi, t.boxed = b, b, true
				} else {
					t.lo, t.hi = t.lo.least(b), t.hi.greatest(b)
				}
				head, ok := c.tss[k]
				if !ok {
					c.tss[k] = hostqosHqTnode{Rule: at}
					if t.keys++; t.keys == 1 {
						t.key = k
					}
					continue
				}
				// A later rule of the entry: a node at the chain's end.
				id := tnodeOf(at, fi, pi)
				if head.Next == 0 {
					head.Next = id
					c.tss[k] = head
				} else {
					c.tnodes[tails[k]].Next = id
				}
				if tails == nil {
					tails = map[hostqosHqTssKey]uint32{}
				}
				tails[k] = id
				if int(id) >= len(c.tnodes) {
					c.tnodes = append(c.tnodes, make([]hostqosHqTnode, int(id)+1-len(c.tnodes))...)
				}
				c.tnodes[id] = hostqosHqTnode{Rule: at}
				nodes++
			}
		}
	}
	// The bound is the rule count, which MaxRules caps.
	for fi := range tuples {
		if len(tuples[fi]) > maxTuples {
			return fmt.Errorf("policy has %d distinct flow-selector shapes, the datapath holds at most %d", len(tuples[fi]), maxTuples)
		}
		c.tuples[fi] = make([]hostqosHqTuple, len(tuples[fi]))
		for j, t := range tuples[fi] {
			c.tuples[fi][j] = hostqosHqTuple{SrcMask: t.shape.src, DstMask: t.shape.dst, Min: t.min,
				LportMask: t.shape.lport, RportMask: t.shape.rport, ProtoMask: t.shape.proto, DscpMask: t.shape.dscp}
			if !t.mixed {
				c.tuples[fi][j].Proto = t.proto
			}
			tt := &c.tuples[fi][j]
			tt.LportLo, tt.LportHi = t.lo.lport, t.hi.lport
			tt.RportLo, tt.RportHi = t.lo.rport, t.hi.rport
			tt.SrcLo, tt.SrcHi = t.lo.src, t.hi.src
			tt.DstLo, tt.DstHi = t.lo.dst, t.hi.dst
			// One key: the classifier compares the packet's masked key
			// with the range (the key itself) and DSCP instead of looking
			// it up, when the range holds all of it (no address word
			// past the first).
			if t.keys == 1 && t.shape.src[1]|t.shape.src[2]|t.shape.src[3]|t.shape.dst[1]|t.shape.dst[2]|t.shape.dst[3] == 0 {
				tt.Single, tt.Dscp, tt.Head = 1, t.key.Dscp, c.tss[t.key]
			}
		}
	}
	if len(c.tss) > tssEntries || nodes >= tssEntries || len(c.tnodes) > tssEntries {
		return fmt.Errorf("policy needs %d search entries and %d chain nodes, the datapath holds at most %d of each", len(c.tss), nodes+1, tssEntries)
	}
	return nil
}

// keyBounds is one corner of the box that holds a tuple's keys: a masked
// local and remote port, and the first word of a masked local and remote
// address as a number (host order; IPv6: its top 32 bits). The classifier
// compares a packet's masked key with both corners before looking it up
// (hq_tuple's lport_lo … dst_hi).
type keyBounds struct {
	lport, rport uint16
	src, dst     uint32
}

// boundsOf is key k's point in keyBounds' terms.
func boundsOf(k *hostqosHqTssKey) keyBounds {
	return keyBounds{lport: k.Lport, rport: k.Rport, src: wordValue(k.Src[0]), dst: wordValue(k.Dst[0])}
}

// wordValue is an address word as the classifier keeps it (network byte
// order in memory, see prefixWords) read as a number.
func wordValue(w uint32) uint32 {
	var b [4]byte
	binary.NativeEndian.PutUint32(b[:], w)
	return binary.BigEndian.Uint32(b[:])
}

// least is the corner of the least of each field of a and b.
func (a keyBounds) least(b keyBounds) keyBounds {
	return keyBounds{lport: min(a.lport, b.lport), rport: min(a.rport, b.rport), src: min(a.src, b.src), dst: min(a.dst, b.dst)}
}

// greatest is the corner of the greatest of each field of a and b.
func (a keyBounds) greatest(b keyBounds) keyBounds {
	return keyBounds{lport: max(a.lport, b.lport), rport: max(a.rport, b.rport), src: max(a.src, b.src), dst: max(a.dst, b.dst)}
}
