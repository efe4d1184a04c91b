// Package datapath loads, pins, adopts and feeds hostqos's eBPF programs:
// the cgroup sock_create program that records each socket's app identity at
// birth, and the TCX egress program that classifies, marks, counts, drops and
// selects the HTB class of every packet on a managed link.
//
// With its sub-packages (pin: the pin directory shared with the XDP
// shield; xdp: the shield) it is the only product package that imports
// cilium/ebpf.
package datapath

import (
	"log/slog"
	"net/netip"
)

// Action codes as the BPF program sees them (enum hq_action in
// bpf/include/hostqos.h).
type Action uint8

const (
	ActPass    = Action(hostqosHqActionHQ_ACT_PASS)
	ActDrop    = Action(hostqosHqActionHQ_ACT_DROP)
	ActObserve = Action(hostqosHqActionHQ_ACT_OBSERVE)
	// ActPolice passes packets within the rule's policer and drops the
	// rest; compile sets it for ActPass rules with a PoliceRate.
	ActPolice = Action(hostqosHqActionHQ_ACT_POLICE)
)

// FileID identifies an executable by device and inode, as the kernel sees
// task->mm->exe_file->f_inode (dev is the superblock's s_dev, in the
// kernel's internal encoding: major<<20 | minor).
type FileID struct {
	Dev uint32
	Ino uint64
}

// CgroupRef is a cgroup v2 directory: its id (the inode number of the
// directory in cgroup2fs) and its level (root = 0).
type CgroupRef struct {
	ID    uint64
	Level int
}

// Rule is one compiled rule. Rules are evaluated in slice order; the first
// rule whose selectors all match wins.
type Rule struct {
	// Slot is the rule's stable index (0..MaxRules-1) into the per-rule
	// counter array; it must stay the same for a rule across Apply calls so
	// counters continue.
	Slot uint16

	// App selectors; a nil/zero field matches any. Within a field, any
	// element matching is enough; across fields all must match.
	Exes    []FileID
	Comm    string      // exact task comm, "" = any
	Cgroups []CgroupRef // socket's creating task is in this cgroup or below
	UID     *uint32

	// Flow selectors.
	Proto        uint8        // IPPROTO_TCP/UDP/ICMP; 0 = any (ICMP also matches ICMPv6)
	Local        netip.Prefix // invalid = any; an IPv4 prefix matches only IPv4
	Remote       netip.Prefix
	LPortFrom    uint16 // 0..65535 = any when From=0 and To=0
	LPortTo      uint16
	RPortFrom    uint16
	RPortTo      uint16
	DSCPIn       int8 // -1 = any
	ActionCode   Action
	DSCP         int8   // -1 = do not rewrite
	ClassID      uint32 // HTB classid (major<<16|minor) for skb->priority; 0 = leave
	ServiceClass uint8  // index of the service class, for attribution
	// PoliceRate (bit/s), when not 0, polices the rule's packets as one
	// aggregate: a token bucket of PoliceBurst bytes filled at PoliceRate
	// passes what fits and drops the rest (counted as drops). Only for
	// ActPass rules. Bytes are counted as skb->len (L2 frame, all
	// segments of a GSO packet), so PoliceBurst must hold the largest
	// packet the link sends.
	PoliceRate  uint64
	PoliceBurst uint32
	// Reservation, when not 0, is the ID of the policy's reservation the
	// rule's sessions and packets belong to (see Reservation). Only for
	// ActPass rules without a policer.
	Reservation uint16
	// MaxBWIn (bit/s of L4 payload), when not 0, limits what the rule's
	// flows receive together: TCP by the receive window the host
	// advertises (the sender slows down), UDP by dropping the excess at
	// TC ingress (counted as receive drops). Only for ActPass rules.
	MaxBWIn uint64
	// AckClassID, with MaxBWIn, is the HTB class of the rule's ACK leaf
	// (shaper.AckClassID): pure ACKs of its TCP flows whose share of the
	// limit is less than two segments per round trip (a short path, where
	// the window cannot hold them) are sent there, so that the leaf's rate
	// paces the sender. 0 = no leaf: the window alone.
	AckClassID uint32
	// InPrio is the priority (0 highest .. 7) of the rule's class: the
	// level of a link's ingress budget its received traffic belongs to
	// (see LinkIn).
	InPrio uint8
}

// LinkIn is a link's ingress budget: what the link receives (frames, L2
// header included) is held to Rate by class priority. Each priority level
// may receive Rate minus what the levels above it received: TCP by the
// receive window the host advertises, UDP by dropping the excess.
type LinkIn struct {
	Ifindex int
	Rate    uint64 // bit/s of received frames
}

// Policy is a complete compiled policy, applied atomically: the rules and
// the reservations they name take effect with one generation flip.
type Policy struct {
	Rules        []Rule
	Reservations []Reservation
	// LinksIn are the links with an ingress budget; InPrioNone is the
	// level there of traffic no rule matches (the default class's
	// priority).
	LinksIn    []LinkIn
	InPrioNone uint8
	// FlowQueueDefault turns flow queueing on: the shaped links' class
	// leaves are flow-queued (shaper.FlowQueues) and this is the minor of
	// the default class's general leaf, where unclassified packets go.
	// 0 = off.
	FlowQueueDefault uint16
}

// Options configure Open.
type Options struct {
	BPFFSDir   string // pin directory, e.g. /sys/fs/bpf/hostqos
	CgroupPath string // cgroup v2 directory to attach sock_create to (the cgroup2 root)
	// FlowTableSize is the number of entries of each of the two LRU flow
	// tables (IPv4 flows, IPv6 flows); 0 = default 65536. The flow
	// counter array has 2 × FlowTableSize slots (64 bytes each).
	FlowTableSize int
	// Logger receives the datapath's log records (with "component" =
	// "datapath"); nil = slog.Default() at the time of Open.
	Logger *slog.Logger
	// Loops is the loop variant of the programs (LoopsAuto when empty,
	// LoopsBPFLoop, LoopsBounded; see ResolveLoops).
	Loops string
	// testClock makes the reservation policer take t from skb->tstamp
	// (tests set it through test-run's context).
	testClock bool
}

// Counters are cumulative packet/byte/drop counts: sent (egress, where
// drops are drop rules and policers) and received (TC ingress, where drops
// are what a download limit dropped). Bytes are frames as the link carries
// them (L2 header included).
type Counters struct {
	Packets   uint64 `json:"packets"`
	Bytes     uint64 `json:"bytes"`
	Drops     uint64 `json:"drops"`
	RxPackets uint64 `json:"rx_packets"`
	RxBytes   uint64 `json:"rx_bytes"`
	RxDrops   uint64 `json:"rx_drops"`
}

// FlowKey is a flow's 5-tuple, egress direction (local = source).
type FlowKey struct {
	Proto  uint8
	Local  netip.AddrPort
	Remote netip.AddrPort
}

// Flow is one entry of the flow table.
type Flow struct {
	Key      FlowKey
	RuleSlot int // -1 = no rule matched
	// Gen is the policy generation RuleSlot was found under, or an
	// earlier one (never a later one): the rule that held the slot then.
	Gen  uint32
	PID  uint32 // owning process (tgid) at socket birth, 0 = unknown/forwarded
	Comm string
	UID  uint32
	// Veth is the ifindex of the host-side veth a container's flow is
	// classified at (0: a flow of the host's own).
	Veth int
	Counters
	FirstSeenNS uint64 // bpf_ktime_get_coarse_ns (CLOCK_MONOTONIC, tick resolution) at first packet
	LastSeenNS  uint64 // same clock, at the latest packet
	// Ref rereads the flow's counters cheaply (Datapath.FlowCounters).
	Ref FlowRef
}

// Identity is a socket owner's app identity, as the sock_create program
// records it; the daemon computes it for sockets created before the
// datapath was loaded.
type Identity struct {
	PID     uint32
	UID     uint32
	Comm    string
	Exe     FileID
	Cgroups []uint64 // ancestor cgroup ids by level: Cgroups[0] = root ... Cgroups[n] = own
	// Container is the number of the container the socket was made in
	// (SetContainerNetns), 0 for the daemon's own namespace.
	Container uint32
}

// Stats are the datapath's own health counters (things it could not do).
type Stats struct {
	Packets        uint64 // packets seen by the egress program
	Classified     uint64 // packets that matched a rule
	FlowInsertFail uint64
	ParseErrors    uint64
	NoIdentity     uint64 // local-socket packets whose socket had no identity
	Evaluations    uint64 // rule evaluations (flow misses and policy changes)
	Drops          uint64 // packets dropped by drop rules and policers
	IdentityFail   uint64 // sockets sock_create could not attach an identity to
	// Receive side (TC ingress).
	RxPackets     uint64 // packets seen by the ingress program
	RxClassified  uint64 // received packets that matched a rule
	RxDrops       uint64 // received packets dropped by download limits (UDP)
	RxParseErrors uint64
	RxNoSocket    uint64 // new received flows without a local socket (rules by tuple only)
	RwndClamps    uint64 // outgoing TCP segments whose receive window a download limit lowered
	// Received packets no rule matched (class default's): packets, bytes
	// (frames), and drops by a link's ingress budget (UDP).
	RxUnmatchedPackets, RxUnmatchedBytes, RxUnmatchedDrops uint64
}
