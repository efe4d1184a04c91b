// Package shaper builds and maintains hostqos's HTB tree on a managed link.
//
// Planning (Build) is pure Go and runs anywhere; applying a plan (Apply,
// Remove, Owned, Stats) talks rtnetlink in the network namespace of the
// calling thread and needs CAP_NET_ADMIN.
//
// # Tree shape
//
// With H = Handle (0x4851, "HQ") and rates in bits/s:
//
//	H:0       root qdisc htb, default = general leaf of the default class
//	└─ H:1        root class, rate = ceil = link rate
//	   ├─ H:10+i  inner class of service class i (0..63), parent H:1
//	   │          rate = share(i) + Σ rate of i's rule leaves
//	   │          ceil = MaxBW(i) or the link rate
//	   │  ├─ H:40+i    general leaf of class i: rate = share(i),
//	   │  │            ceil = class ceil, prio = class priority
//	   │  └─ H:100+s   leaf of rule slot s (0..16383), only for rules with a
//	   │               MinBW or MaxBW: rate = MinBW (or a token rate of
//	   │               max(8 kbit, link/1000) when only MaxBW is set — not a
//	   │               guarantee), ceil = MaxBW (or the class ceil),
//	   │               prio = class priority
//	   │  └─ H:7200+n  class of a rule shaped to a Tspec (reservation n,
//	   │     │         TspecShape): rate = ceil = r, burst = cburst = b
//	   │     └─ H:100+s its leaf: rate r, burst b, ceil p, cburst M
//	   ├─ ...
//	   └─ H:8000+s ACK leaf of rule slot s, for rules with a download
//	               limit (see AckSpec): rate = ceil = AckRate(limit),
//	               prio 0, a bucket of three ACKs
//
// (Minors above are hexadecimal, as tc prints them.) A link without an
// egress rate that needs ACK leaves gets PassThrough: a root class and one
// default leaf H:7f00 at PassRate, and the ACK leaves.
//
// The real-time class H:7100 (LinkSpec.RT: the admitted real-time
// channels' wire rates, rate = ceil, prio 0) is a leaf, or, with
// LinkSpec.RTOwners, an inner class with a leaf H:7100+n per channel
// (guaranteed its wire rate with a bucket of its burst, ceil the class's,
// at the HTB priority of its local delay bound's rank).
//
// Session leaves of reservations (H:4100 and up, under their rule's class)
// are described at SessionBase.
//
// share(i) is the class's MinBW when set. Classes without MinBW split what
// the explicit guarantees (class MinBW + rule MinBW + rule token rates) leave
// of the link: equal weights, a quarter weight for scavenger-like classes
// (priority 7), each at least 8 kbit and at most what fits under the class
// ceiling. The children of every class (but the qsched class, whose bands
// 0..6 each have its rate; see QSchedMinor) sum to at most its rate and the inner
// classes sum to exactly the link rate whenever some class has an implicit
// share; ceil >= rate everywhere; every rate is at least 8 kbit and a whole
// number of bytes per second.
//
// The BPF datapath selects a leaf by writing its classid (H<<16 | minor) into
// skb->priority (see ClassIDFor and RuleClassID); unclassified traffic goes to
// the default class's general leaf.
//
// # Bursts and quanta
//
// HTB charges each packet with its length as the qdisc sees it: skb->len of
// the L2 frame (Ethernet header + IP packet, no FCS, preamble or inter-frame
// gap), and for GSO packets the sum over the segments they will become
// (qdisc_pkt_len). Rates in a plan are in those units.
//
// burst and cburst are one full-size frame plus 2 ms at the class's rate or
// ceil. HTB's own default (rate/HZ + MTU) is tight at high rates, where a 64
// KiB GSO packet or a late watchdog timer then costs throughput; the 2 ms term
// covers timer slack, and bursts stay small enough that a priority class
// waits at most about 2 ms behind a bulk class. The quantum (DRR share when
// classes borrow) is max(frame, rate/8/100) bytes clamped to 200000, set
// explicitly so the kernel's r2q heuristics never warn.
//
// Leaves keep HTB's default pfifo (limit = txqueuelen), but those with a
// QueueLimit.
//
// # Flow queueing
//
// With LinkSpec.FlowQueues the general leaf H:40+i of every class is an
// inner class (same rate, ceil and prio) with leaves H:c000+16i (sparse
// flows: a quarter of the share) and H:c001+16i … H:c008+16i (flow
// buckets: equal parts of the rest), all with the class's ceil and prio
// and short pfifos (FQSparseQueue, FQBucketQueue, handles
// QueueMajor = 0x1000 + minor - FQBase). The tree's default class is then
// the default class's sparse leaf (non-IP frames). The datapath keeps
// writing general-leaf classids into its results and turns them into a
// child per packet (bpf/fq.h); ClassIDFor and friends are unchanged.
//
// # Ownership
//
// Any HTB root qdisc whose handle is Handle is ours; Apply replaces a kernel
// default root (handle 0: noqueue, pfifo_fast, mq, ...) but refuses any other
// root qdisc, and never touches clsact/ingress qdiscs or their filters.
// HTB cannot change its default class in place, so a plan whose default class
// differs from the kernel's rebuilds the root (its counters restart).
package shaper
