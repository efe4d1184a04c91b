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
	HQ_ABI_VERSION = 3,
	/* Rule slots, and rules per policy buffer. */
	HQ_MAX_RULES = 4096,
	/* Rules with app selectors (bits of a bitmap). */
	HQ_MAX_APP_RULES = 256,
	HQ_BITMAP_WORDS = 4, /* 256 bits */
	/* Cgroup ancestor ids kept per socket (levels 0..7). */
	HQ_CG_LEVELS = 8,
	HQ_COMM_LEN = 16,
	HQ_SLOT_NONE = 0xffff,
	/* Rule lists per policy buffer and the app-rule list (hq_rlist). */
	HQ_RLISTS = 9,
	HQ_RLIST_APP = 8,
	/* Entries of each flow table unless the loader sets another size. */
	HQ_FLOW_ENTRIES = 65536,
	/* App-selector map sizes (both policy buffers share them). */
	HQ_EXE_ENTRIES = 8192,
	HQ_COMM_ENTRIES = 4096,
	HQ_UID_ENTRIES = 4096,
	HQ_CG_ENTRIES = 8192,
	/* A policer's cost per byte is kept in 1/2^HQ_POLICE_SHIFT ns. */
	HQ_POLICE_SHIFT = 16,
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
};

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
	__u32 pad1;
	__u64 pad2[2];
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
 * A rule list: indexes (within the policy buffer) of rules, in policy
 * order. Each buffer has HQ_RLISTS of them at keys buf * HQ_RLISTS + k:
 * k = family (0 IPv4, 1 IPv6) * 4 + protocol class (0 TCP, 1 UDP, 2 ICMP
 * and ICMPv6, 3 other) lists the rules without app selectors that can
 * match such a packet; k = HQ_RLIST_APP lists the rules with app selectors
 * by app bit (which follows policy order too).
 */
struct hq_rlist {
	__u32 n;
	__u16 idx[HQ_MAX_RULES];
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
};

/* Per-buffer policy header. */
struct hq_buf {
	__u32 nrules;
	__u32 pad;
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
	__u32 pad;
	/* coarse ns - jiffies * tick ns, measured once; 0 = not yet */
	__u64 clock_base;
	struct hq_buf buf[2];
	/* Counter slot allocation cursor, in its own cache line. */
	__u64 fcursor __attribute__((aligned(64)));
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
