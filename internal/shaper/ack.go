package shaper

import "fmt"

// ACK leaves: how a download limit holds TCP on a short path. A TCP
// sender limited by the receive window sends as fast as its ACKs come
// back; where the round trip is so short that even the smallest window
// (two segments) is more than a flow's share of its download limit, the
// datapath sends the flow's pure ACKs to its rule's ACK leaf, whose rate
// lets through as many ACKs per second as the limit needs (each lets the
// sender send about two segments). The leaves hang under the root class
// at rate = ceil, with the highest priority and a bucket of a few ACKs,
// so that they pace without bursts and never borrow.

// AckBase + rule slot is the minor of the rule's ACK leaf (0x8000..0xbfff).
const AckBase uint16 = 0x8000

const (
	// AckFrameBytes is a pure ACK as HTB charges it on an Ethernet link:
	// 14 (Ethernet) + 20 (IPv4) + 20 (TCP) + 12 (timestamps).
	AckFrameBytes = 66
	// AckedBytes is the payload one ACK of a paced flow lets the sender
	// send: two full segments of a 1500-byte MTU with timestamps (the
	// window's floor, and what a receiver acknowledges at once).
	AckedBytes = 2 * 1448
	// ackBurstBytes is an ACK leaf's bucket: three ACKs, so that an
	// idle leaf does not let a burst of ACKs (and of data) through.
	ackBurstBytes = 3 * AckFrameBytes
	// MinAckRate is the smallest rate of an ACK leaf (bits/s): 1.5 ACKs
	// per second.
	MinAckRate uint64 = 800
)

// AckSpec is the ACK leaf of a rule with a download limit.
type AckSpec struct {
	Slot uint16 // rule slot 0..MaxRuleSlot
	Rate uint64 // bits/s of ACK frames (AckRate)
}

// AckRate is the rate (bits/s of ACK frames) of the ACK leaf of a download
// limit of limit bits/s of payload: AckFrameBytes for every AckedBytes.
func AckRate(limit uint64) uint64 {
	return max(round8(limit*AckFrameBytes/AckedBytes), MinAckRate)
}

// AckClassID is the classid of rule slot's ACK leaf.
func AckClassID(slot uint16) uint32 { return classID(AckBase + slot) }

// isAckMinor reports whether minor is an ACK leaf's.
func isAckMinor(minor uint16) bool { return minor >= AckBase && minor <= AckBase+MaxRuleSlot }

// PassRate is the root rate of the tree of a link without an egress rate
// that needs ACK leaves: far above what any link carries, so that HTB
// shapes nothing but the leaves.
const PassRate uint64 = 400e9

// PassMinor is the minor of the one default leaf of a PassThrough tree
// (outside every other range, so that no class's counters take it).
const PassMinor uint16 = 0x7f00

// PassThrough is the plan of a link that has no egress rate: a root and a
// default leaf at PassRate, for ACK leaves to hang under (AddAckLeaves).
// Traffic keeps its classids, which the tree does not have: HTB sends it to
// the default leaf.
func PassThrough(link LinkSpec) Plan {
	link.Rate = PassRate
	return Plan{Link: link, DefaultMinor: PassMinor, Classes: []HTBClass{
		mkClass(RootMinor, 0, PassRate, PassRate, 0, false, "link "+linkName(link)),
		mkClass(PassMinor, RootMinor, PassRate, PassRate, 0, true, "pass"),
	}}
}

// AddAckLeaves adds an ACK leaf per spec under p's root class.
func (p *Plan) AddAckLeaves(acks []AckSpec) error {
	for _, a := range acks {
		if a.Slot > MaxRuleSlot {
			return fmt.Errorf("plan HTB tree for link %s: ACK leaf of rule %d: slot outside 0..%d", linkName(p.Link), a.Slot, MaxRuleSlot)
		}
		rate := max(round8(a.Rate), MinAckRate)
		c := mkClass(AckBase+a.Slot, RootMinor, rate, rate, 0, true, fmt.Sprintf("rule %d ACKs", a.Slot))
		c.Burst, c.Cburst, c.Quantum = ackBurstBytes, ackBurstBytes, frameBytes
		p.Classes = append(p.Classes, c)
	}
	return nil
}
