/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Shared definitions of hostqos's BPF programs: map value layouts and limits.
 * The Go side (internal/datapath) has no copies: it uses the types and
 * constants bpf2go generates from these (make generate). Bump
 * HQ_ABI_VERSION whenever a pinned map's layout changes, so that an old
 * pinned state is refused rather than misread.
 */
#ifndef HOSTQOS_H
#define HOSTQOS_H

/*
 * Limits and fixed parameters of the datapath, defined once here and
 * exported to Go by bpf2go (-type hq_limits: internal/datapath's
 * MaxRules, MaxAppRules and the rest derive from the generated constants).
 */
enum hq_limits {
	/* Layout version of the pinned maps; bump on any layout change. */
	HQ_ABI_VERSION = 12,
	/*
	 * Rule slots, and rules per policy buffer. internal/policy's MaxRules
	 * and MaxAppRules are these (a test keeps them equal).
	 */
	HQ_MAX_RULES = 16384,
	/* Rules with app selectors (bits of a bitmap). */
	HQ_MAX_APP_RULES = 2048,
	HQ_BITMAP_WORDS = 32, /* 2048 bits */
	/*
	 * Tuple-space search over the rules without app selectors: tuples
	 * (distinct selector shapes) per address family and buffer, and
	 * entries (hq_tss keys and hq_tnodes chain nodes) per buffer. A rule
	 * adds at most one tuple per family and at most four entries (two
	 * families, ICMP also under ICMPv6).
	 */
	HQ_MAX_TUPLES = HQ_MAX_RULES,
	HQ_TSS_ENTRIES = 4 * HQ_MAX_RULES,
	/*
	 * The bounded datapath (kernels without bpf_loop, before 5.17: every
	 * loop a bounded for loop the verifier walks in full) holds smaller
	 * policies: at most HQ_BOUNDED_FLOW_RULES rules without app selectors
	 * and HQ_BOUNDED_APP_RULES with them (HQ_BOUNDED_WORDS bitmap words).
	 * 5.15's verifier bounds them: it keeps at most 8,192 branches
	 * pending, one per step of a walk (2 * HQ_BOUNDED_FLOW_RULES + 1
	 * tuple steps), and more app rules grow hq_app_match's frame past
	 * a call chain's 512 bytes (docs/kernels.md).
	 * The reservation lock's slow wait is HQ_BOUNDED_RESV_WAIT attempts.
	 */
	HQ_BOUNDED_FLOW_RULES = 2048,
	HQ_BOUNDED_APP_RULES = 128,
	HQ_BOUNDED_WORDS = HQ_BOUNDED_APP_RULES / 64,
	HQ_BOUNDED_RESV_WAIT = 64,
	/* Cgroup ancestor ids kept per socket (levels 0..7). */
	HQ_CG_LEVELS = 8,
	HQ_COMM_LEN = 16,
	HQ_SLOT_NONE = 0xffff,
	/* Entries of each flow table unless the loader sets another size. */
	HQ_FLOW_ENTRIES = 65536,
	/* App-selector map sizes (both policy buffers share them). */
	HQ_EXE_ENTRIES = 8192,
	HQ_COMM_ENTRIES = 4096,
	HQ_UID_ENTRIES = 4096,
	HQ_CG_ENTRIES = 8192,
	/* A policer's cost per byte is kept in 1/2^HQ_POLICE_SHIFT ns. */
	HQ_POLICE_SHIFT = 16,
	/* Reservation ids 1..HQ_MAX_RESV-1 (0 = none); see struct hq_resv. */
	HQ_MAX_RESV = 10240,
	/* Per-session leaves of one reservation (bits of sess_used). */
	HQ_SESSION_LEAVES = 32,
	/* Sockets bound to reservations at once (hq_bind). */
	HQ_BIND_ENTRIES = 65536,
	/* Session refusals kept for the daemon (hq_refusal ring). */
	HQ_REFUSALS = 64,
	/* qsocket ids 1..HQ_MAX_QSOCK-1 (0 = none); see struct hq_qsock. */
	HQ_MAX_QSOCK = 4096,
	/* Links with a qsocket scheduler subtree (hq_qsched, by ifindex). */
	HQ_MAX_QSCHED_LINKS = 256,
	/* Bands of a link's qsched subtree (HTB leaves prio 0..7). */
	HQ_QSCHED_BANDS = 8,
	/* Bits of a DWCS loss window (old <= 1000). */
	HQ_DWCS_WINDOW = 1024,
	/*
	 * Containers: network namespaces whose sockets get an identity
	 * (hq_cnetns) and host-side veths with a container's identity
	 * (hq_veth).
	 */
	HQ_MAX_CONTAINERS = 4096,
	/*
	 * A container's key in the cgroup selector map (hq_cg): its number
	 * (hq_ident.ctr) with bit HQ_CTR_KEY_SHIFT set, which no cgroup id
	 * has.
	 */
	HQ_CTR_KEY_SHIFT = 63,
	/*
	 * skb->tc_index of a container's packet classified at its veth: the
	 * minor of its HTB class under HQ_HTB_MAJOR, or HQ_TCI_NOCLASS when it
	 * has none there (leave skb->priority); 0 = not classified at a veth.
	 * HTB minors use all 16 bits but 0 and 0xffff (ACK leaves reach
	 * 0xbfff). The managed link it leaves by sets the class and neither
	 * counts nor marks it again.
	 */
	HQ_TCI_NOCLASS = 0xffff,
	/* Major number of hostqos's HTB root qdisc ("HQ", shaper.Handle). */
	HQ_HTB_MAJOR = 0x4851,
	/*
	 * Flow queueing (shaper.FlowQueues): the general leaf of service
	 * class i (minor HQ_LEAF_BASE + i) is an inner class whose children
	 * are HQ_FQ_BASE + i * HQ_FQ_STRIDE + k: k = 0 the sparse-flow leaf,
	 * k = 1..HQ_FQ_BUCKETS the flow buckets (see fq.h).
	 */
	HQ_LEAF_BASE = 0x40,
	HQ_MAX_CLASS = 63,
	HQ_FQ_BASE = 0xc000,
	HQ_FQ_STRIDE = 16,
	HQ_FQ_BUCKETS = 8,
};

#define HQ_CG_LEVEL_WALK 32 /* bound of the walk that finds the own level */
#define HQ_IPV6_EXT_MAX 4   /* IPv6 extension headers skipped at most */
#define HQ_MAX_CPUS 1024    /* bound of per-CPU sums */
#define HQ_FCTR_TRIES 4	    /* counter slots probed per allocation */
/* A counter slot whose flow was idle this long may be taken over. */
#define HQ_FCTR_IDLE_NS 1000000000ULL

/* TCX verdicts of the egress classifier (TC_ACT_UNSPEC, TC_ACT_SHOT). */
enum hq_verdict {
	HQ_TC_NEXT = -1,
	HQ_TC_DROP = 2,
};

enum hq_action {
	HQ_ACT_PASS = 0,
	HQ_ACT_DROP = 1,
	HQ_ACT_OBSERVE = 2,
	HQ_ACT_POLICE = 3, /* pass, within the rule's policer (hq_police) */
	HQ_ACT_RESV = 4, /* pass under the rule's reservation (hq_rule_resv) */
	/*
	 * Pass as the flow's qsocket says (hq_qsock): the cached result's
	 * classid holds the qsocket id, its slot is HQ_SLOT_NONE.
	 */
	HQ_ACT_QSOCK = 5,
};

/* Service of a reservation (RFC 2210/2211/2212). */
enum hq_service {
	HQ_SVC_NONE = 0, /* sessions counted and limited, no Tspec */
	HQ_SVC_GUARANTEED = 1,
	HQ_SVC_CONTROLLED_LOAD = 2,
	HQ_SVC_BEST_EFFORT = 3,
};

/* Why a session was refused (struct hq_refusal). */
/* struct hq_binding flags. */
enum hq_bind_flags {
	/* The connect hook set the socket's SO_SNDBUF to the reservation's. */
	HQ_BIND_SNDBUF = 1,
};

enum hq_refuse {
	HQ_REFUSE_CONNECT = 1, /* connect() failed with EPERM */
	HQ_REFUSE_SENDMSG = 2, /* unconnected sendmsg() failed with EPERM */
};

enum hq_family {
	HQ_AF_ANY = 0,
	HQ_AF_INET = 4,
	HQ_AF_INET6 = 6,
};

/* A socket owner's identity, stored with the socket at birth (sk_storage). */
struct hq_ident {
	__u32 tgid;
	__u32 uid;
	__u64 exe_ino;
	__u32 exe_dev;	/* s_dev, kernel encoding major<<20|minor */
	__u32 cg_level; /* level of the own cgroup (root = 0) */
	__u64 cg_own;	/* own cgroup id (also valid when cg_level >= 8) */
	__u64 cg[HQ_CG_LEVELS]; /* ancestor ids, levels 0..min(cg_level,7) */
	char comm[HQ_COMM_LEN];
	/*
	 * The socket's qsocket (app API): id in hq_qsock (0 = none) and the
	 * socket cookie it was registered with; written by the daemon.
	 */
	__u32 qsock;
	/*
	 * The container whose network namespace the socket was made in
	 * (hq_cnetns), 0 = the daemon's namespace.
	 */
	__u32 ctr;
	__u64 qcookie;
};

/*
 * A qsocket: a socket an application registered through the app API
 * (libhostqos, package qsock). hq_qsock is an array by id; the daemon
 * writes cookie, classid, dscp and user, the classifier counts. A flow of
 * the socket is classified by it (HQ_ACT_QSOCK) while cookie is the
 * packet's socket cookie; sock_release clears cookie (the counts stay for
 * the daemon's last reading).
 */
struct hq_qsock {
	__u64 cookie;  /* socket cookie; 0 = free or closed */
	__u32 classid; /* skb->priority to set, 0 = leave */
	__s8 dscp;     /* DSCP to write, -1 = leave */
	__u8 user;     /* an ordinary user's: a rule that matches wins */
	__u16 pad;
	__u64 packets;	 /* packets that left through the classifier */
	__u64 bytes;	 /* their bytes (skb->len) */
	__u64 first_ns;	 /* coarse CLOCK_MONOTONIC of the first packet */
	__u64 last_ns;	 /* and of the latest */
	__u64 win_ns;	 /* start of the current rate window */
	__u64 win_bytes; /* bytes in it */
	__u64 rate;	 /* bytes/s over the last complete window */
	__u32 uid;	 /* the owner (the daemon's record) */
	__u32 sched;	 /* the scheduler (enum hq_sched) */
	/*
	 * Scheduling across the link's qsockets (sched other than fifo, not
	 * TCP): the daemon writes the attributes, the classifier the rest
	 * under busy (a compare-and-swap lock).
	 */
	__u64 sched_rate; /* declared rate, bit/s (the daemon's admission) */
	__u64 ipg_ns;	  /* DWCS: inter-packet gap */
	__u16 oln;	  /* DWCS: losses allowed in any old consecutive */
	__u16 old;
	__u32 busy;    /* the scheduling state's lock */
	__u64 dl_prev; /* DWCS: the previous message's deadline */
	__u32 seq;     /* DWCS: messages (frames) decided */
	__u16 lost;    /* DWCS: losses among the last old */
	__u8 frame;    /* enum hq_qframe */
	__u8 pad2;
	__u64 win[HQ_DWCS_WINDOW / 64]; /* DWCS: loss bits, by seq % old */
	__u64 late;	     /* sent predicted after their deadline */
	__u64 late_dropped;  /* dropped: could not meet their deadline */
	__u64 frame_dropped; /* dropped with the rest of their frame */
	__u64 dropped_bytes; /* bytes of both (skb->len) */
	__u64 violations;    /* DWCS: sent late, no loss left in the window */
	__u64 lock_misses;   /* passed undecided: the lock was held */
};

/*
 * Per-message attributes of a scheduled qsocket's datagram: the library
 * passes one SCM_TXTIME per message (SO_TXTIME, CLOCK_MONOTONIC), a u64
 * whose bits 8..63 are the deadline (CLOCK_MONOTONIC ns rounded down to
 * 256 ns; the send time without one) and bits 0..7 these flags. The
 * egress program decodes skb->tstamp of a qsocket's non-TCP packet that
 * carries HQ_TXT_MARK and clears it. The public header
 * <hostqos/qsock.h> (QSOCK_TXT_*), the Python module and package qsock
 * spell the same values; TestTxtimeConstantsAgree keeps them equal.
 */
enum hq_txtime {
	HQ_TXT_DEADLINE = 0x01,	   /* bits 8..63 are a deadline */
	HQ_TXT_NODROP = 0x02,	   /* never dropped by a lossy scheduler */
	HQ_TXT_FRAME_START = 0x04, /* first message of a frame */
	HQ_TXT_FRAME_END = 0x08,   /* last message of a frame */
	HQ_TXT_PRIO_SHIFT = 4,	   /* drop priority 0..7 in bits 4..6 */
	HQ_TXT_PRIO_MASK = 0x70,
	HQ_TXT_MARK = 0x80, /* hostqos's encoding (not another txtime) */
	HQ_TXT_FLAGS = 0xff,
};

/* Schedulers (struct hq_qsock.sched): api.Schedulers' order, from 1. */
enum hq_sched {
	HQ_SCHED_FIFO = 1,
	HQ_SCHED_DWCS = 2,
	HQ_SCHED_EDF_LOSSY = 3,
	HQ_SCHED_EDF_LOSSLESS = 4,
};

/* struct hq_qsock.frame */
enum hq_qframe {
	HQ_QF_IN = 1,	/* inside a frame (after its start, before its end) */
	HQ_QF_DROP = 2, /* the frame's first message was dropped */
};

/*
 * A link's qsocket scheduler (hq_qsched, by ifindex): the class's
 * admitted rate and the classid of its band 0 (band b is classid0 + b),
 * written by the daemon; and per band, moved by the packets under lock:
 * the virtual time at which what bands 0..b hold would have left at that
 * rate (strict priority: a message of band b waits for those), when the
 * last message admitted to band b leaves, and the least room (deadline −
 * predicted departure) of the messages band b holds, which a message of
 * a more urgent band, sent later, must not use up.
 */
struct hq_qsched {
	struct bpf_spin_lock lock;
	__u32 classid0; /* HTB classid of band 0 */
	__u64 ns_q16;	/* ns per byte at the admitted rate, << 16 */
	__u64 margin;	/* ns a packet may leave later than predicted */
	__u64 vtime[HQ_QSCHED_BANDS];	/* CLOCK_MONOTONIC ns */
	__u64 lastfin[HQ_QSCHED_BANDS]; /* CLOCK_MONOTONIC ns */
	__s64 room[HQ_QSCHED_BANDS];	/* ns */
};

/* A qsocket's rate window (struct hq_qsock). */
#define HQ_QSOCK_WIN_NS 1000000000ULL

struct hq_bitmap {
	__u64 w[HQ_BITMAP_WORDS];
};

/*
 * Flow key: egress direction, local = source. IPv4 addresses live in
 * src[0]/dst[0] (network byte order) with the other words zero. Ports are
 * in host byte order; 0 for ICMP and non-first fragments. This is the key
 * of the IPv6 flow table (hq_flows6), of the counter slots' owner records
 * (hq_fkey) and of the flow table dumps, for both families.
 */
struct hq_flow_key {
	__u8 family; /* HQ_AF_INET or HQ_AF_INET6 */
	__u8 proto;
	__u16 sport;
	__u16 dport;
	__u16 pad;
	__u32 src[4];
	__u32 dst[4];
};

/*
 * Key of the IPv4 flow table (hq_flows4): 16 bytes, which the kernel
 * hashes in a fraction of the time the 40-byte key takes. Its first 12
 * bytes are laid out as struct hq_flow_key's (saddr is src[0]), so the
 * classifier builds either key in the same place.
 */
struct hq_flow_key4 {
	__u8 family; /* HQ_AF_INET */
	__u8 proto;
	__u16 sport;
	__u16 dport;
	__u16 pad;
	__u32 saddr;
	__u32 daddr;
};

/*
 * The flows of one socket, for hq_forget_flows (the daemon's request when
 * a socket becomes, or stops being, a qsocket): the flow of its 5-tuple
 * when connected (dport != 0), else every flow from its local port (and
 * its address unless any). IPv4 addresses in src[0]/dst[0]; family names
 * the table. The program writes count: the flows it invalidated.
 */
struct hq_forget {
	__u8 family; /* HQ_AF_INET: hq_flows4, HQ_AF_INET6: hq_flows6 */
	__u8 proto;
	__u16 sport; /* the socket's local port (host order) */
	__u16 dport; /* its peer's port; 0: not connected */
	__u8 any;    /* bound to no address: any local address */
	__u8 pad;
	__u32 src[4];
	__u32 dst[4];
	__u32 count; /* out */
};

/*
 * Flow table value (hq_flows4, hq_flows6: LRU hashes, one per address
 * family, each of the configured flow table size). Read-only on a packet
 * that hits a flow evaluated at the current policy generation: everything
 * a packet changes lives in the flow's counter slot (struct hq_fctr),
 * which the daemon reads in place through a memory mapping.
 */
struct hq_flow {
	__u64 tag;   /* owner tag of the counter slot (hq_fctr); 0 = none */
	__u32 cslot; /* index of the counter slot in hq_fctr */
	__u32 gen;   /* policy generation of the cached result */
	/*
	 * The cached result: classid, slot, action and dscp form one
	 * little-endian 64-bit word, which the classifier loads at once.
	 */
	__u32 classid; /* cached: skb->priority to set, 0 = leave */
	__u16 slot;    /* cached: matching rule slot, HQ_SLOT_NONE = none */
	__u8 action;   /* cached: enum hq_action */
	__s8 dscp;     /* cached: DSCP to write, -1 = leave */
	__u64 first_ns;
	/*
	 * Counts of the flow's earlier counter slots: when another flow takes
	 * the slot over, the taker adds the slot's counts here first.
	 */
	__u64 base_packets;
	__u64 base_bytes;
	__u64 base_drops;
	__u64 base_last_ns;
	__u32 tgid; /* owner at socket birth, 0 = unknown */
	__u32 uid;
	char comm[HQ_COMM_LEN];
	/* Receive side: the earlier slots' counts, as base_* above. */
	__u64 base_rx_packets;
	__u64 base_rx_bytes;
	__u64 base_rx_drops;
	/* Download limit: the hq_in epoch this flow was last counted in. */
	__u32 in_epoch;
	/* Link ingress budget: the hq_link_in epoch (+1) it was counted in. */
	__u32 lin_epoch;
	/*
	 * A container's flow: the ifindex of the host-side veth its packets
	 * are classified and counted at (0: a flow of the host's own).
	 */
	__u32 veth;
	/* Flow queueing state (fq.h); 0 = not seen by it yet. */
	__u32 fq;
};

/*
 * A flow's counter slot (hq_fctr: a BPF_F_MMAPABLE array, one cache line
 * per slot). Slots are handed out by a global cursor (hq_state.fcursor)
 * modulo the array size; tag is the cursor value that allocated the slot
 * plus one, so it is unique for ever and names the flow that owns the
 * slot. The classifier counts into a slot only while its tag equals the
 * flow's; readers ignore a slot whose tag is not the one they expect.
 */
struct hq_fctr {
	__u64 tag;
	__u64 packets;
	__u64 bytes;
	__u64 drops;
	__u64 last_ns;
	__u16 rule; /* rule slot of the flow, HQ_SLOT_NONE = none */
	__u16 pad0;
	/* Receive side (TC ingress): packets dropped, received, bytes. */
	__u32 rx_drops;
	__u64 rx_packets;
	__u64 rx_bytes;
};

/* One compiled rule; addresses and masks are pre-masked by the loader. */
struct hq_rule {
	__u32 local_addr[4];
	__u32 local_mask[4];
	__u32 remote_addr[4];
	__u32 remote_mask[4];
	__u32 classid;
	__u16 slot;
	__u16 app_bit;	/* valid when has_app */
	__u16 lport_lo; /* port ranges, inclusive; 0..65535 = any */
	__u16 lport_hi;
	__u16 rport_lo;
	__u16 rport_hi;
	__u8 proto;  /* 0 = any */
	__u8 family; /* enum hq_family */
	__u8 action;
	__s8 dscp;    /* -1 = leave */
	__s8 dscp_in; /* -1 = any */
	__u8 has_app;
	__u8 pad[2];
};

/*
 * A rule slot's download limit (hq_in, indexed by rule slot), applied at
 * TC ingress and, for TCP, at egress on the receive window the host
 * advertises. rate counts L4 payload bytes, i.e. what the application
 * reads. The daemon writes rate, ns_q16 and tau (0 everywhere = no
 * limit); the datapath keeps the rest.
 *
 *  - UDP (no flow control): a GCRA token bucket like struct hq_police on
 *    payload bytes (tau = the bucket depth in ns); excess is dropped and
 *    counted.
 *  - TCP: every outgoing segment of a limited flow advertises at most
 *    rate * gain / flows * rtt bytes of window, so the sender never has
 *    more in flight than the share of the limit one round trip carries:
 *    it is slowed, nothing is dropped, no queue builds. rtt is the
 *    socket's srtt, or its receive-side estimate when that is more than a
 *    timestamp tick longer (a receiving socket's srtt is its handshake's;
 *    a queue another flow builds at the bottleneck shows only there). flows is the
 *    number of the slot's flows that received data in the last epoch
 *    (HQ_IN_EPOCH_NS); gain (Q10, 1024 = 1) corrects, once an epoch, for
 *    what the window misses (delayed ACKs, a round trip longer than the
 *    handshake's): gain *= (3 * rate - got) / (2 * rate) when the slot got
 *    more than half its rate in the epoch, kept in [HQ_IN_GAIN_MIN,
 *    HQ_IN_GAIN_MAX].
 *  - TCP on a short path (ACK pacing): where a flow's share for one round
 *    trip is less than HQ_IN_PACE_SEGS full segments, the window cannot
 *    hold it (it never goes below that), so the flow's pure ACKs go to
 *    the HTB class ack_classid instead (the rule's ACK leaf on the link,
 *    made by the daemon at a rate that lets the limit through): the
 *    sender, window-limited, sends as fast as its ACKs come back.
 *    ack_classid 0 = no leaf: the window alone.
 */
struct hq_in {
	__u64 rate;	   /* payload bytes per second; 0 = no limit */
	__u64 ns_q16;	   /* UDP: cost of a payload byte in 1/65536 ns */
	__u64 tau;	   /* UDP: bucket depth, ns */
	__u64 tat;	   /* UDP: theoretical arrival time, ns */
	__u64 epoch_ns;	   /* start of the current epoch (coarse ns) */
	__u64 epoch_bytes; /* payload bytes received in the current epoch */
	__u32 epoch;	   /* number of the current epoch */
	__u32 flows;	   /* flows that received in the current epoch */
	__u32 flows_prev;  /* the same for the previous epoch */
	__u32 gain;	   /* TCP window gain, Q10; 0 = 1024 */
	__u32 prio; /* the rule's class priority: its link ingress level */
	__u32 ack_classid; /* HTB class of the rule's ACK leaf; 0 = none */
};

#define HQ_IN_EPOCH_NS 200000000ULL /* estimator epoch: 200 ms */
/* Below this many full segments per round trip a flow's ACKs are paced. */
#define HQ_IN_PACE_SEGS 2
#define HQ_IN_GAIN_ONE 1024
#define HQ_IN_GAIN_MIN 512
#define HQ_IN_GAIN_MAX 2048
#define HQ_TS_TICK_US                                                          \
	1000 /* a TCP timestamp tick: the receive-side RTT's resolution */

/*
 * A link's ingress budget (hq_link_in, keyed by ifindex): the frames the
 * link receives are held to rate by class priority. Each level (a class
 * priority, 0 highest) may receive avail = rate minus what the levels above
 * it received in the last epoch: TCP flows of a level get receive windows
 * of avail / (the level's active flows) per round trip (with the level's
 * gain, as struct hq_in), UDP beyond avail is dropped (a GCRA at avail).
 * One CPU rolls the epoch (HQ_IN_EPOCH_NS) and recomputes every level.
 */
#define HQ_IN_LEVELS 8

struct hq_in_level {
	__u64 avail;	   /* frame bytes per second this level may receive */
	__u64 used;	   /* frame bytes per second it received last epoch */
	__u64 epoch_bytes; /* frame bytes received in the current epoch */
	__u64 ns_q16;	   /* UDP: cost of a byte at avail, 1/65536 ns */
	__u64 tat;	   /* UDP: theoretical arrival time, ns */
	__u32 flows;	   /* flows that received in the current epoch */
	__u32 flows_prev;  /* the same for the previous epoch */
	__u32 gain;	   /* TCP window gain, Q10; 0 = 1024 */
	__u32 pad;
};

struct hq_link_in {
	__u64 rate;	 /* frame bytes per second; 0 = no budget */
	__u64 epoch_ns;	 /* start of the current epoch (coarse ns) */
	__u32 epoch;	 /* number of the current epoch */
	__u32 prio_none; /* level of traffic no rule matches (class default) */
	struct hq_in_level lv[HQ_IN_LEVELS];
};

/* UDP bucket of a level: 20 ms at avail, and at least this many bytes. */
#define HQ_LINK_IN_MIN_BURST 3000
/* A level's window gain stays within [HQ_IN_GAIN_MIN, this]. */
#define HQ_IN_LINK_GAIN_MAX 1280
/* A level's budget is never below rate / this. */
#define HQ_IN_LEVEL_FLOOR 100
/* Links with an ingress budget. */
#define HQ_MAX_LINKS_IN 1024

/*
 * Tuple-space search (hq_tuples, hq_tss, hq_tnodes). The rules without app
 * selectors are grouped by their shape: the masks their selectors apply
 * to a packet's flow key (address prefixes, exact port or not, protocol or
 * not, DSCP or not). Each shape is a tuple; a packet's key, masked by the
 * tuple's masks, is looked up in one hash (hq_tss) whose value starts the
 * chain of the tuple's rules with those masked values, earliest first.
 * Tuples are kept in the order of their earliest rule, so the search stops
 * at the first tuple that cannot hold an earlier rule than the best found.
 * Every candidate is checked against its full rule (port ranges included).
 */
/*
 * A chain node: a rule index (within the buffer) and the next node
 * (index within the buffer's part of hq_tnodes, 0 = end). The hq_tss value
 * is the chain's first node.
 */
struct hq_tnode {
	__u32 rule;
	__u32 next;
};

struct hq_tuple {
	__u32 src_mask[4];
	__u32 dst_mask[4];
	__u32 min; /* index of the tuple's earliest rule */
	__u16 lport_mask;
	__u16 rport_mask;
	__u8 proto_mask;
	__u8 dscp_mask;
	__u8 proto; /* every key of the tuple has this protocol; 0 = mixed */
	__u8 pad;
	/*
	 * The range of the tuple's keys: least and greatest masked local and
	 * remote port, and masked first word of the local and remote address
	 * (host order; IPv6: the top 32 bits). A packet whose masked key falls
	 * outside them matches no key of the tuple: its lookup is skipped.
	 */
	__u16 lport_lo;
	__u16 lport_hi;
	__u16 rport_lo;
	__u16 rport_hi;
	__u32 src_lo;
	__u32 src_hi;
	__u32 dst_lo;
	__u32 dst_hi;
	/*
	 * A tuple of one key whose masks cover no address word past the
	 * first (single = 1): the range above is that key, dscp its masked
	 * DSCP, head its hq_tss value. The search compares instead of
	 * looking the key up.
	 */
	struct hq_tnode head;
	__u8 single;
	__u8 dscp;
	__u16 pad2;
};

/* hq_tss key: the tuple's index in hq_tuples and the masked packet key. */
struct hq_tss_key {
	__u32 tuple;
	__u8 proto;
	__u8 dscp;
	__u16 lport;
	__u16 rport;
	__u16 pad;
	__u32 src[4];
	__u32 dst[4];
};

struct hq_counters {
	__u64 packets;
	__u64 bytes;
	__u64 drops;
};

/*
 * A rule's policer (hq_police, indexed by rule slot): a token bucket of
 * depth b bytes filled at r bit/s, kept as GCRA state. tat is the
 * theoretical arrival time, i.e. the time at which the bucket would be
 * full again; a packet of L bytes costs L * 8e9 / r ns of it and conforms
 * when, charged, the bucket is not below empty:
 *     max(tat, now) + cost - now <= tau,   tau = b * 8e9 / r (ns)
 * and then tat = max(tat, now) + cost. The cost per byte is kept in
 * 1/65536 ns (ns_q16 = 8e9 * 65536 / r), so the classifier multiplies
 * instead of dividing. The daemon writes ns_q16 and tau; the classifier
 * advances tat with compare-and-swap.
 */
struct hq_police {
	__u64 ns_q16; /* 0 = no policer (pass) */
	__u64 tau;    /* ns */
	__u64 tat;    /* ns, bpf_ktime_get_ns */
	__u64 pad;
};

#define HQ_POLICE_TRIES                                                        \
	4 /* compare-and-swap attempts before charging blindly */

/* Record of the rule-counter dump (hq_iter_rule_ctr). */
struct hq_ctr_rec {
	__u32 slot;
	__u32 pad;
	__u64 packets;
	__u64 bytes;
	__u64 drops;
};

struct hq_stats {
	__u64 packets;
	__u64 classified;
	__u64 flow_insert_fail;
	__u64 parse_errors;
	__u64 no_identity;
	__u64 evaluations;
	__u64 drops;
	__u64 ident_fail; /* sock_create could not store an identity */
	/* Receive side (TC ingress). */
	__u64 rx_packets;
	__u64 rx_classified; /* matched a rule */
	__u64 rx_drops;	     /* dropped by a download limit (UDP) */
	__u64 rx_parse_errors;
	__u64 rx_no_socket; /* no local socket and no flow: rules by tuple only */
	__u64 rwnd_clamps; /* TCP segments whose window was lowered */
	/* Received packets no rule matched (class default's share). */
	__u64 rx_none_packets;
	__u64 rx_none_bytes;
	__u64 rx_none_drops; /* dropped by a link's ingress budget (UDP) */
};

/* Per-buffer policy header. */
struct hq_buf {
	__u32 nrules;
	__u16 nresv;	  /* rules with a reservation (HQ_ACT_RESV) */
	__u16 nsess;	  /* of them, with a session limit */
	__u32 napp;	  /* rules with app selectors (app bits 0..napp-1) */
	__u32 ntuples[2]; /* tuples per family: IPv4, IPv6 */
	/*
	 * Flow queueing: the minor of the default class's general leaf when
	 * the shaped links' class leaves are flow-queued (unclassified
	 * packets go there), 0 = off.
	 */
	__u16 fq_default;
	__u16 fq_pad;
	struct hq_bitmap r_exe; /* rules that have an exe selector */
	struct hq_bitmap r_comm;
	struct hq_bitmap r_uid;
	struct hq_bitmap r_cg;
};

/*
 * Policy state, a global variable of the program (.bss). It is pinned and
 * shared by every load so a restarted daemon keeps the active policy.
 * gen's low bit selects the active buffer; Apply writes buf[gen+1 & 1] and
 * then stores gen+1 atomically.
 */
struct hq_state {
	__u32 gen;
	__u32 in_links; /* links with an ingress budget (hq_link_in) */
	__u32 veths;	/* containers' veths (hq_veth) */
	/*
	 * Bumped whenever a flow entry's cached result, generation or veth
	 * changes, or an entry is inserted: a socket's copy of its flow
	 * (hq_sk_flow) is only good under the epoch it was made in.
	 */
	__u32 flow_epoch;
	/* coarse ns - jiffies * tick ns, measured once; 0 = not yet */
	__u64 clock_base;
	struct hq_buf buf[2];
	/* Counter slot allocation cursor, in its own cache line. */
	__u64 fcursor __attribute__((aligned(64)));
	/* Session refusals so far (struct hq_refusal). */
	__u64 refuse_seq __attribute__((aligned(64)));
};

/*
 * A reservation as the rules that name it see it (hq_rule_resv, keyed by
 * buffer * HQ_MAX_RULES + rule slot, written with the rules and made
 * active by the same generation flip). Rates are in bytes/s, sizes in
 * bytes, times in ns. The policer keeps the seed's two terms
 *     t_m = max(t - b/r, t_m) + max(L, m)/r
 *     t_p = max(t - M/p, t_p) + max(L, m)/p
 * with t_m = t_p = -inf at setup; a packet conforms when L <= M and
 * t >= max(t_m, t_p) before the update. A charge c/r is computed as
 * ceil(c * r_q16 / 65536) ns with r_q16 = ceil(1e9 * 65536 / r), which is
 * exact when r divides 1e9 and never undercharges otherwise.
 */
struct hq_resv {
	__u64 r_q16;	/* ns per byte at r, in 1/65536 ns; 0 = no policing */
	__u64 p_q16;	/* ns per byte at p, in 1/65536 ns; 0 = no peak term */
	__u64 b_ns;	/* b/r */
	__u64 mp_ns;	/* M/p */
	__u32 min_unit; /* m: minimum policed unit */
	__u32 max_unit; /* M: maximum packet size */
	__u32 classid;	/* class of conformant (guaranteed: all) packets */
	__u32 demote_classid; /* class of non-conformant controlled load */
	__u32 max_sessions;   /* sockets admitted at once; 0 = any number */
	__u32 sndbuf;	      /* SO_SNDBUF of bound sockets; 0 = leave */
	__u16 id;	      /* 1..HQ_MAX_RESV-1 */
	__u8 service;	      /* enum hq_service */
	__s8 dscp;	      /* conformant packets; -1 = leave */
	__s8 demote_dscp;     /* non-conformant controlled load; -1 = leave */
	__u8 pad;
	/*
	 * Names the Tspec (never 0): a packet that finds another epoch in the
	 * state restarts t_m and t_p at -inf, so a changed Tspec starts afresh.
	 */
	__u32 epoch;
	/*
	 * Per-session leaves (0 = none): the classid of session 0's HTB leaf;
	 * session i (0..max_sessions-1, at most HQ_SESSION_LEAVES) has
	 * sess_classid + i. Traffic of the reservation's rules without a
	 * session keeps its rule's class.
	 */
	__u32 sess_classid;
};

/*
 * A reservation's state (hq_resv_state, by id): the policer's two times
 * under its lock (busy), shared by every CPU and every socket bound to the
 * reservation, and its counters (also under the lock, except the session
 * counts, which the socket hooks change atomically).
 */
struct hq_resv_state {
	struct bpf_spin_lock lock;
	__u32 incarnation; /* changes when the id is given up (daemon) */
	__s64 t_m;	   /* ns; HQ_T_NEG_INF at setup */
	__s64 t_p;
	__u64 conf_packets;
	__u64 conf_bytes;
	__u64 nonconf_packets; /* includes the shaped and demoted ones */
	__u64 nonconf_bytes;
	__u64 demoted_bytes;  /* controlled load sent as best effort */
	__u64 shaped_packets; /* guaranteed packets left to the leaf's shaping */
	__u64 shaped_ns;      /* sum of max(t_m, t_p) - t over them */
	__u64 oversize_packets; /* L > M */
	__s64 sessions;		/* sockets counted now */
	__u64 sessions_total;	/* sockets ever counted */
	__u64 refused_connects; /* connect() refused: over max_sessions */
	__u64 refused_sends;	/* unconnected sendmsg() refused */
	__u32 epoch; /* hq_resv.epoch the times were computed under; 0 = none */
	__u32 sess_used; /* per-session leaves taken: bit i = session i */
	/*
	 * The policer's lock: 0 free, 1 held. The classifier takes it with a
	 * compare-and-swap and gives it back with an exchange (bpf_spin_lock
	 * costs two helper calls and an interrupt save/restore, ~50 ns a
	 * packet); lock above still serves the daemon's BPF_F_LOCK reads.
	 */
	__u32 busy;
	/* Packets that found busy held HQ_RESV_WAIT times: passed uncharged. */
	__u32 busy_misses;
};

#define HQ_RESV_TRIES 4	       /* inline attempts to take hq_resv_state.busy */
#define HQ_RESV_WAIT (1 << 20) /* then attempts in bpf_loop */

/* -inf of the policer's times: far below any time, safe to subtract from. */
#define HQ_T_NEG_INF (-(1LL << 62))

/*
 * A socket bound to a reservation (hq_bind, keyed by socket cookie): the
 * connect/sendmsg hooks and the classifier (for sockets older than the
 * reservation) add it, sock_release removes it. The 5-tuple is the
 * egress one (local = source), completed by the first classified packet.
 */
struct hq_binding {
	struct hq_flow_key key;
	__u64 bound_ns;
	__u32 tgid;
	__u32 uid;
	__u64 exe_ino;
	__u32 exe_dev;
	__u16 resv;
	__u8 counted; /* holds one of the reservation's sessions */
	__u8 sess;    /* 1 + its per-session leaf (sess_used bit); 0 = none */
	__u32 incarnation; /* of the reservation when counted */
	__u32 flags;	   /* enum hq_bind_flags */
	char comm[HQ_COMM_LEN];
};

/* A refused session (hq_refusal ring; seq 0 = empty). */
struct hq_refusal {
	__u64 seq; /* 1, 2, ...: hq_state.refuse_seq when written */
	__u64 ns;
	struct hq_flow_key key; /* remote part and protocol; local if bound */
	__u32 tgid;
	__u32 uid;
	__u16 resv;
	__u8 why; /* enum hq_refuse */
	__u8 pad;
	__u32 sessions; /* the reservation's limit */
	char comm[HQ_COMM_LEN];
};

/* App-selector map keys: (buffer, value). */
struct hq_exe_key {
	__u32 buf;
	__u32 dev;
	__u64 ino;
};

struct hq_comm_key {
	__u32 buf;
	char comm[HQ_COMM_LEN];
};

struct hq_uid_key {
	__u32 buf;
	__u32 uid;
};

struct hq_cg_key {
	__u64 buf;
	__u64 id;
};

#endif /* HOSTQOS_H */
