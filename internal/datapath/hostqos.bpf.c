//go:build ignore

// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * hostqos datapath.
 *
 *  - hq_sock_create (cgroup/sock_create): records the creating task's app
 *    identity with every AF_INET/AF_INET6 socket of our network namespace.
 *  - hq_tc_egress / hq_tc_egress_l3 (tcx/egress): classify each packet by
 *    flow (LRU cache, one per address family) and rules (evaluated on a
 *    flow miss only), then police, drop, count, mark DSCP and pick the
 *    HTB class via skb->priority.
 *
 * Neither program ever blocks: sock_create always allows, the classifier
 * only drops for an explicit drop rule or a rule's policer.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>

#include "hostqos.h"

#define AF_INET 2
#define AF_INET6 10
#define ETH_P_IP 0x0800
#define ETH_P_IPV6 0x86DD
#define ETH_HLEN 14
#define IPPROTO_HOPOPTS 0
#define IPPROTO_ROUTING 43
#define IPPROTO_FRAGMENT 44
#define IPPROTO_AH 51
#define IPPROTO_DSTOPTS 60
#define IPPROTO_ICMPV6 58

/*
 * Never read: these make types no map or variable uses part of the
 * object's BTF, so that bpf2go exports them to Go. .rodata is not pinned,
 * so they do not change the pinned layout.
 */
const volatile enum hq_limits hq_type_limits = 0;
const volatile enum hq_action hq_type_action = 0;
const volatile enum hq_family hq_type_family = 0;
const volatile enum hq_verdict hq_type_verdict = 0;
const volatile struct hq_ctr_rec hq_type_ctr_rec = {};
const volatile enum hq_service hq_type_service = 0;
const volatile enum hq_refuse hq_type_refuse = 0;
const volatile enum hq_bind_flags hq_type_bind_flags = 0;
const volatile struct hq_forget hq_type_forget = {};
const volatile enum hq_txtime hq_type_txtime = 0;
const volatile enum hq_sched hq_type_sched = 0;

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* Network namespace cookie of the daemon; set at load time. */
const volatile __u64 hq_netns_cookie = 0;

/* Number of possible CPUs (per-CPU value stride count); set at load. */
const volatile __u32 hq_ncpu = 1;

/* Number of flow counter slots (hq_fctr and hq_fkey entries); set at load. */
const volatile __u32 hq_fctr_n = 1;

/* Nanoseconds per jiffy (1e9 / CONFIG_HZ), 0 = unknown; set at load. */
const volatile __u64 hq_tick_ns = 0;

/*
 * What the kernel has, set at load from the loader's probes (datapath.go,
 * features.go). The verifier reads them as constants and never visits the
 * branch not taken, so a helper the kernel lacks may stand in it.
 *
 * hq_bounded: every loop is a bounded for loop (verifier bounded loops,
 * Linux 5.3) instead of bpf_loop (5.17). The verifier walks each iteration
 * of a bounded loop, so the rule search then covers at most
 * HQ_BOUNDED_FLOW_RULES rules without and HQ_BOUNDED_APP_RULES rules with
 * app selectors (the engine refuses bigger policies on such a datapath).
 * hq_mptcp: bpf_skc_to_mptcp_sock exists (5.19); without it MPTCP
 * subflows have no identity.
 */
const volatile __u8 hq_bounded = 0;
const volatile __u8 hq_mptcp = 1;

/*
 * Calls cb(i, ctx) for i = 0 .. n-1 until it returns non-zero: through
 * bpf_loop, or, on a bounded datapath, in a for loop of at most bound
 * iterations (n never exceeds bound there: the policy limits see to it).
 */
#define hq_loop(n, bound, cb, ctx)                                             \
	do {                                                                   \
		if (hq_bounded) {                                              \
			for (__u32 _i = 0; _i < (bound) && _i < (n); _i++)     \
				if (cb(_i, ctx))                               \
					break;                                 \
		} else {                                                       \
			bpf_loop(n, cb, ctx, 0);                               \
		}                                                              \
	} while (0)

/* Policy state; see struct hq_state. Pinned by the loader. */
struct hq_state hq_policy;

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC | BPF_F_CLONE);
	__type(key, int);
	__type(value, struct hq_ident);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} hq_sk_ident SEC(".maps");

/*
 * qsockets by id (struct hq_qsock); ids are handed out by the daemon,
 * which writes the entries in place (memory-mapped) so that a change never
 * loses a count.
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, HQ_MAX_QSOCK);
	__type(key, __u32);
	__type(value, struct hq_qsock);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} hq_qsock SEC(".maps");

/* Links' qsocket schedulers by ifindex; see struct hq_qsched. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, HQ_MAX_QSCHED_LINKS);
	__type(key, __u32);
	__type(value, struct hq_qsched);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} hq_qsched SEC(".maps");

/* IPv4 flows; a key of its own, less than half the size, hashes faster. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, HQ_FLOW_ENTRIES); /* set by the loader */
	__type(key, struct hq_flow_key4);
	__type(value, struct hq_flow);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} hq_flows4 SEC(".maps");

/* IPv6 flows. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, HQ_FLOW_ENTRIES); /* set by the loader */
	__type(key, struct hq_flow_key);
	__type(value, struct hq_flow);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} hq_flows6 SEC(".maps");

/* Rule index (within the buffer) of each app bit, by buffer. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2 * HQ_MAX_APP_RULES);
	__type(key, __u32);
	__type(value, __u32);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} hq_appidx SEC(".maps");

/*
 * Tuple-space search (see struct hq_tuple): tuples at (buf * 2 + family
 * (0 IPv4, 1 IPv6)) * HQ_MAX_TUPLES + i, in the order of their earliest
 * rule; the hash of masked keys; chain nodes at buf * HQ_TSS_ENTRIES +
 * node.
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2 * 2 * HQ_MAX_TUPLES);
	__type(key, __u32);
	__type(value, struct hq_tuple);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} hq_tuples SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 2 * HQ_TSS_ENTRIES);
	__type(key, struct hq_tss_key);
	__type(value, struct hq_tnode);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} hq_tss SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2 * HQ_TSS_ENTRIES);
	__type(key, __u32);
	__type(value, struct hq_tnode);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} hq_tnodes SEC(".maps");

/* Per-flow counters, memory-mapped by the daemon; see struct hq_fctr. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, 1); /* set by the loader: hq_fctr_n */
	__type(key, __u32);
	__type(value, struct hq_fctr);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} hq_fctr SEC(".maps");

/* Key (full form) of the flow each counter slot was last handed to. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1); /* set by the loader: hq_fctr_n */
	__type(key, __u32);
	__type(value, struct hq_flow_key);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} hq_fkey SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2 * HQ_MAX_RULES);
	__type(key, __u32);
	__type(value, struct hq_rule);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} hq_rules SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, HQ_MAX_RULES);
	__type(key, __u32);
	__type(value, struct hq_counters);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} hq_rule_ctr SEC(".maps");

/* Policers by rule slot; see struct hq_police. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, HQ_MAX_RULES);
	__type(key, __u32);
	__type(value, struct hq_police);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} hq_police SEC(".maps");

/* Receive-side counters by rule slot (TC ingress). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, HQ_MAX_RULES);
	__type(key, __u32);
	__type(value, struct hq_counters);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} hq_rule_ctr_in SEC(".maps");

/* Download limits by rule slot; see struct hq_in. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, HQ_MAX_RULES);
	__type(key, __u32);
	__type(value, struct hq_in);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} hq_in SEC(".maps");

/* Ingress budgets of links by ifindex; see struct hq_link_in. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, HQ_MAX_LINKS_IN);
	__type(key, __u32);
	__type(value, struct hq_link_in);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} hq_link_in SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct hq_stats);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} hq_health SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, HQ_EXE_ENTRIES);
	__type(key, struct hq_exe_key);
	__type(value, struct hq_bitmap);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} hq_exe SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, HQ_COMM_ENTRIES);
	__type(key, struct hq_comm_key);
	__type(value, struct hq_bitmap);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} hq_comm SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, HQ_UID_ENTRIES);
	__type(key, struct hq_uid_key);
	__type(value, struct hq_bitmap);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} hq_uid SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, HQ_CG_ENTRIES);
	__type(key, struct hq_cg_key);
	__type(value, struct hq_bitmap);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} hq_cg SEC(".maps");

/*
 * Per-CPU scratch of a rule evaluation (app_match): bitmaps too large for
 * the stack, one per kind of caller (enum hq_scratch_slot). The TC
 * programs run with bottom halves off, so their evaluations on one CPU
 * never overlap. The socket hooks and the socket iterator run in process
 * context, where another task may be scheduled on the CPU midway: their
 * evaluation marks the scratch with a token and redoes the app part if the
 * mark changed.
 */
struct hq_scratch {
	struct hq_bitmap app;
	struct hq_bitmap cg;
	__u64 token;
};

enum hq_scratch_slot {
	HQ_SCRATCH_TC = 0,
	HQ_SCRATCH_SOCK = 1,
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, struct hq_scratch);
} hq_scratch SEC(".maps");

/*
 * CLOCK_MONOTONIC at tick resolution, i.e. bpf_ktime_get_coarse_ns(). That
 * helper call costs about 10 ns a packet; jiffies are read inline, and
 * both advance at the tick, so coarse ns = jiffies * tick + a constant,
 * measured once (clock_sync) and kept with the policy state.
 */
static __always_inline __u64 coarse_ns(void)
{
	__u64 base;

	if (hq_tick_ns) {
		base = *(volatile __u64 *)&hq_policy.clock_base;
		if (base)
			return base + bpf_jiffies64() * hq_tick_ns;
	}
	return bpf_ktime_get_coarse_ns();
}

static __always_inline void clock_sync(void)
{
	__u64 j, ns;

	if (!hq_tick_ns || *(volatile __u64 *)&hq_policy.clock_base)
		return;
	j = bpf_jiffies64();
	ns = bpf_ktime_get_coarse_ns();
	if (j == bpf_jiffies64()) /* no tick in between */
		hq_policy.clock_base = ns - j * hq_tick_ns;
}

static __always_inline struct hq_stats *stats(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&hq_health, &zero);
}

/* ---------------------------------------------------------------------- */
/* sock_create: identity at socket birth                                   */
/* ---------------------------------------------------------------------- */

SEC("cgroup/sock_create")
int hq_sock_create(struct bpf_sock *ctx)
{
	struct task_struct *task;
	struct hq_ident *id;
	__u64 own, cg;
	__u32 l;

	/* Other network namespaces belong to other daemons (or nobody). */
	if (bpf_get_netns_cookie(ctx) != hq_netns_cookie)
		return 1;
	if (ctx->family != AF_INET && ctx->family != AF_INET6)
		return 1;

	id = bpf_sk_storage_get(&hq_sk_ident, ctx, 0,
				BPF_SK_STORAGE_GET_F_CREATE);
	if (!id) {
		struct hq_stats *st = stats();

		if (st)
			__sync_fetch_and_add(&st->ident_fail, 1);
		return 1;
	}

	id->tgid = bpf_get_current_pid_tgid() >> 32;
	id->uid = (__u32)bpf_get_current_uid_gid();
	bpf_get_current_comm(id->comm, sizeof(id->comm));

	task = (struct task_struct *)bpf_get_current_task();
	id->exe_dev = BPF_CORE_READ(task, mm, exe_file, f_inode, i_sb, s_dev);
	id->exe_ino = BPF_CORE_READ(task, mm, exe_file, f_inode, i_ino);

	own = bpf_get_current_cgroup_id();
	id->cg_own = own;
	id->cg_level = 0;
	for (l = 0; l < HQ_CG_LEVEL_WALK; l++) {
		cg = bpf_get_current_ancestor_cgroup_id(l);
		if (!cg)
			break;
		if (l < HQ_CG_LEVELS)
			id->cg[l] = cg;
		id->cg_level = l;
		if (cg == own)
			break;
	}
	return 1;
}

/* ---------------------------------------------------------------------- */
/* TC egress classifier                                                    */
/* ---------------------------------------------------------------------- */

/*
 * A parsed packet. The flow key is built in place: an IPv4 packet fills
 * k4 (the hq_flows4 key), an IPv6 packet key (the hq_flows6 key); both
 * share family, proto, ports and the first source word.
 */
struct hq_pkt {
	union {
		struct hq_flow_key4 k4;
		struct hq_flow_key key;
	};
	__u64 now;   /* bpf_ktime_get_coarse_ns */
	__u64 len;   /* bytes counted: skb->len */
	__u32 gen;   /* active policy generation */
	__u32 l4off; /* offset of the L4 header from skb->data */
	__u32 dscp_in;
	__u32 pad; /* named, so that parse writes it (see parse) */
};

#define HQ_OFF(t, m) __builtin_offsetof(struct t, m)

_Static_assert(HQ_OFF(hq_flow_key4, saddr) == HQ_OFF(hq_flow_key, src),
	       "hq_flow_key4 and hq_flow_key must share their first 12 bytes");

/*
 * State of one rule evaluation. best is the index (within the buffer) of
 * the earliest matching rule found so far; the buffer's rule count while
 * none matched. Both walks stop as soon as nothing left can beat it.
 */
struct hq_eval {
	const struct hq_flow_key *key; /* the packet's flow, full form */
	struct hq_bitmap *app;	       /* app rules the identity satisfies */
	__u64 bits;		       /* app walk: untried bits of word w */
	__u32 w;
	__u32 done;  /* app walk: the earliest app rule is found */
	__u32 abase; /* first hq_appidx entry of the buffer */
	__u32 base;  /* first rule index of the active buffer */
	__u32 best;
	__u32 tbase; /* first hq_tuples entry of the buffer and family */
	__u32 node;  /* tuple walk: chain node, 0 = end */
	__u32 nbase; /* first hq_tnodes entry of the buffer */
	__u8 dscp_in;
	__u8 pad[7]; /* named, so that = {} clears it (hq_bstep_* read it all) */
};

static __always_inline int ports_in(__u16 p, __u16 lo, __u16 hi)
{
	return p >= lo && p <= hi;
}

static __always_inline int addr_match(const __u32 *a, const __u32 *addr,
				      const __u32 *mask)
{
	return ((a[0] & mask[0]) == addr[0]) & ((a[1] & mask[1]) == addr[1]) &
	       ((a[2] & mask[2]) == addr[2]) & ((a[3] & mask[3]) == addr[3]);
}

/*
 * The flow selectors of rule ri (within the buffer) match the packet k
 * (ev->key; a bounded walk's step passes it apart, see hq_bstep_tss).
 */
static __always_inline int flow_match(struct hq_eval *ev,
				      const struct hq_flow_key *k, __u32 ri)
{
	struct hq_rule *r;
	__u32 idx = ev->base + ri;

	r = bpf_map_lookup_elem(&hq_rules, &idx);
	if (!r)
		return 0;
	if (r->proto && r->proto != k->proto) {
		/* ICMP rules also match ICMPv6. */
		if (!(r->proto == IPPROTO_ICMP && k->proto == IPPROTO_ICMPV6))
			return 0;
	}
	if (r->family && r->family != k->family)
		return 0;
	if (!addr_match(k->src, r->local_addr, r->local_mask))
		return 0;
	if (!addr_match(k->dst, r->remote_addr, r->remote_mask))
		return 0;
	if (!ports_in(k->sport, r->lport_lo, r->lport_hi))
		return 0;
	if (!ports_in(k->dport, r->rport_lo, r->rport_hi))
		return 0;
	if (r->dscp_in >= 0 && r->dscp_in != ev->dscp_in)
		return 0;
	return 1;
}

/*
 * Index of a bit by de Bruijn multiplication: (b * HQ_DEBRUIJN) >> 58
 * is distinct for each single-bit b. Branch-free, so the verifier walks
 * one path, not one per bit position.
 */
#define HQ_DEBRUIJN 0x03f79d71b4ca8b09ULL
static const __u8 hq_debruijn[64] = {
	0,  1,	56, 2,	57, 49, 28, 3,	61, 58, 42, 50, 38, 29, 17, 4,
	62, 47, 59, 36, 45, 43, 51, 22, 53, 39, 33, 30, 24, 18, 12, 5,
	63, 55, 48, 27, 60, 41, 37, 16, 46, 35, 44, 21, 52, 32, 23, 11,
	54, 26, 40, 15, 34, 20, 31, 10, 25, 14, 19, 9,	13, 8,	7,  6,
};

/* Index of the lowest set bit of x (x != 0). */
static __always_inline __u32 ctz64(__u64 x)
{
	return hq_debruijn[((x & -x) * HQ_DEBRUIJN) >> 58];
}

/*
 * The app-rule walk: the set bits of the app bitmap in order (app bits
 * follow policy order); the first app rule whose flow selectors match is
 * the earliest. Every walk position comes from a bpf_loop index or a map,
 * never from a counter, so that the verifier sees each callback converge.
 */
static __always_inline long app_bit(struct hq_eval *ev,
				    const struct hq_flow_key *k)
{
	__u32 bit, idx, *ri;
	__u64 b = ev->bits;

	if (!b)
		return 1;
	ev->bits = b & (b - 1);
	bit = (ev->w * 64 + ctz64(b)) & (HQ_MAX_APP_RULES - 1);
	idx = ev->abase + bit;
	ri = bpf_map_lookup_elem(&hq_appidx, &idx);
	if (!ri || *ri >= ev->best)
		return 1;
	if (flow_match(ev, k, *ri)) {
		ev->best = *ri;
		ev->done = 1;
		return 1;
	}
	return 0;
}

static long eval_app_bit(__u32 i, void *data)
{
	struct hq_eval *ev = data;

	return app_bit(ev, ev->key);
}

/* One word (w) of the app bitmap. */
static long eval_app_word(__u32 w, void *data)
{
	struct hq_eval *ev = data;

	if (ev->done || !ev->app)
		return 1;
	ev->w = w & (HQ_BITMAP_WORDS - 1);
	ev->bits = ev->app->w[ev->w];
	if (ev->bits)
		bpf_loop(64, eval_app_bit, ev, 0);
	return 0;
}

/*
 * One node of a tuple's chain (ev->node): rules in policy order, so the
 * walk stops at a match or at a rule not before best.
 */
static __always_inline long tss_node(struct hq_eval *ev,
				     const struct hq_flow_key *k)
{
	struct hq_tnode *n;
	__u32 idx;

	if (!ev->node)
		return 1;
	idx = ev->nbase + ev->node;
	n = bpf_map_lookup_elem(&hq_tnodes, &idx);
	if (!n || n->rule >= ev->best)
		return 1;
	if (flow_match(ev, k, n->rule)) {
		ev->best = n->rule;
		return 1;
	}
	ev->node = n->next;
	return 0;
}

static long eval_tss_node(__u32 i, void *data)
{
	struct hq_eval *ev = data;

	return tss_node(ev, ev->key);
}

/*
 * The tuple-space search, one tuple (i-th of the family's) a step: the
 * packet's key masked by the tuple's masks is looked up in hq_tss, and the
 * chain it finds is to be walked from ev->node (return 2; the caller walks
 * it). Tuples come in the order of their earliest rule: the search ends
 * (return 1) at the first tuple whose earliest rule is not before best.
 */
static __always_inline long tss_tuple(struct hq_eval *ev,
				      const struct hq_flow_key *k, __u32 i)
{
	struct hq_tss_key tk;
	struct hq_tuple *t;
	struct hq_tnode *n;
	__u32 idx;

	idx = ev->tbase + (i & (HQ_MAX_TUPLES - 1));
	t = bpf_map_lookup_elem(&hq_tuples, &idx);
	if (!t || t->min >= ev->best)
		return 1;
	if (t->proto && t->proto != k->proto)
		return 0; /* no key of this tuple can match: skip the lookup */
	tk.tuple = idx;
	tk.proto = k->proto & t->proto_mask;
	tk.dscp = ev->dscp_in & t->dscp_mask;
	tk.lport = k->sport & t->lport_mask;
	tk.rport = k->dport & t->rport_mask;
	tk.pad = 0;
	tk.src[0] = k->src[0] & t->src_mask[0];
	tk.src[1] = k->src[1] & t->src_mask[1];
	tk.src[2] = k->src[2] & t->src_mask[2];
	tk.src[3] = k->src[3] & t->src_mask[3];
	tk.dst[0] = k->dst[0] & t->dst_mask[0];
	tk.dst[1] = k->dst[1] & t->dst_mask[1];
	tk.dst[2] = k->dst[2] & t->dst_mask[2];
	tk.dst[3] = k->dst[3] & t->dst_mask[3];
	/* Outside the range of the tuple's keys: skip the lookup. */
	if (tk.lport < t->lport_lo || tk.lport > t->lport_hi ||
	    tk.rport < t->rport_lo || tk.rport > t->rport_hi ||
	    bpf_ntohl(tk.src[0]) < t->src_lo ||
	    bpf_ntohl(tk.src[0]) > t->src_hi ||
	    bpf_ntohl(tk.dst[0]) < t->dst_lo ||
	    bpf_ntohl(tk.dst[0]) > t->dst_hi)
		return 0;
	if (t->single) /* within the range: the key itself, but for DSCP */
		n = tk.dscp == t->dscp ? &t->head : NULL;
	else
		n = bpf_map_lookup_elem(&hq_tss, &tk);
	if (!n || n->rule >= ev->best)
		return 0;
	if (flow_match(ev, k, n->rule)) {
		ev->best = n->rule; /* the rest of the chain comes later */
		return 0;
	}
	ev->node = n->next;
	return ev->node ? 2 : 0; /* 2: the chain from ev->node is to walk */
}

/*
 * tss_tuple, then the chain it found. The bounded walk's step follows the
 * chain itself (hq_bstep_tss): the global functions, which older kernels
 * verify on their own even when unused, must not call bpf_loop with their
 * plain-memory argument.
 */
static long eval_tss_tuple(__u32 i, void *data)
{
	struct hq_eval *ev = data;
	long r = tss_tuple(ev, ev->key, i);

	if (r == 2)
		bpf_loop(HQ_TSS_ENTRIES, eval_tss_node, ev, 0);
	return r == 1;
}

/*
 * The bounded datapath's rule search (hq_bounded). A bounded loop costs
 * the verifier its body once per iteration, and every branch in it a
 * pending state, so each step of the search is a global function, which
 * the verifier checks once on its own; the loops around them are a call
 * and a test. The callee gets the caller's struct hq_eval as plain memory
 * (so the packet's key comes as an argument of its own, and the app
 * pointer is not used there), and the caller takes the result back
 * through the walk's return value (hq_bwalk_*), never by reading the
 * struct itself (older verifiers assume a callee leaves it unchanged).
 * A step is
 * one tuple, one chain node, one app rule bit or one bitmap word, and a
 * packet meets each rule at most once (one tuple per family, one chain
 * per tuple), so HQ_BOUNDED_*_STEPS steps always finish the search.
 */
#define HQ_BOUNDED_TSS_STEPS (2 * HQ_BOUNDED_FLOW_RULES + 1)
#define HQ_BOUNDED_APP_STEPS (HQ_BOUNDED_APP_RULES + HQ_BOUNDED_WORDS + 1)

/*
 * One step of the tuple-space search over nt tuples; non-zero when it is
 * over. The next tuple's index is kept in ev->w (the app walk is done).
 */
__attribute__((noinline)) int
hq_bstep_tss(struct hq_eval *ev, const struct hq_flow_key *k, __u32 nt)
{
	if (!ev || !k)
		return 1;
	if (ev->node) {
		if (tss_node(ev, k))
			ev->node = 0;
		return 0;
	}
	if (ev->w >= nt || ev->w >= HQ_MAX_TUPLES)
		return 1;
	return tss_tuple(ev, k, ev->w++) == 1;
}

/*
 * One step of the app-rule walk over words 0..nw-1 of the socket's app
 * bitmap (hq_scratch slot): the next set bit of word w, or the next word.
 * It ends at the first matching rule, or at a rule not before best (the
 * bits follow policy order).
 */
__attribute__((noinline)) int hq_bstep_app(struct hq_eval *ev,
					   const struct hq_flow_key *k,
					   __u32 nw, __u32 slot)
{
	struct hq_scratch *s;

	if (!ev || !k)
		return 1;
	if (!ev->bits) {
		if (++ev->w >= nw)
			return 1;
		s = bpf_map_lookup_elem(&hq_scratch, &slot);
		if (!s)
			return 1;
		ev->bits = s->app.w[ev->w & (HQ_BITMAP_WORDS - 1)];
		return 0;
	}
	return app_bit(ev, k) || ev->done;
}

/*
 * The bounded walks themselves are global functions too, each returning
 * the walk's best: their caller sees one call, not a loop whose every
 * exit (a break at a different step) the verifier would carry through
 * the rest of the caller (hq_flow_slow, resv_session). Here the exits
 * meet at once, at the return. ev is the caller's, as for the steps;
 * the caller sets the walk's state (w, node, bits) and never reads back
 * what the steps wrote but the returned best.
 */
__attribute__((noinline)) int
hq_bwalk_tss(struct hq_eval *ev, const struct hq_flow_key *k, __u32 nt)
{
	__u32 i;

	if (!ev)
		return -1; /* never: ev is on the caller's stack */
	for (i = 0; i < HQ_BOUNDED_TSS_STEPS; i++)
		if (hq_bstep_tss(ev, k, nt))
			break;
	return ev->best;
}

__attribute__((noinline)) int hq_bwalk_app(struct hq_eval *ev,
					   const struct hq_flow_key *k,
					   __u32 nw, __u32 slot)
{
	__u32 i;

	if (!ev)
		return -1; /* never: ev is on the caller's stack */
	for (i = 0; i < HQ_BOUNDED_APP_STEPS; i++)
		if (hq_bstep_app(ev, k, nw, slot))
			break;
	return ev->best;
}

/* The tuple-space search over the family's nt tuples for packet k. */
static __always_inline void tss_walk(struct hq_eval *ev,
				     const struct hq_flow_key *k, __u32 nt)
{
	if (!hq_bounded) {
		bpf_loop(nt, eval_tss_tuple, ev, 0);
		return;
	}
	ev->w = 0;
	ev->node = 0;
	ev->best = hq_bwalk_tss(ev, k, nt);
}

/* The app-rule walk over words 0..nw-1 of s->app (s in slot) for k. */
static __always_inline void app_walk(struct hq_eval *ev,
				     const struct hq_flow_key *k,
				     struct hq_scratch *s, __u32 nw, __u32 slot)
{
	if (!hq_bounded) {
		bpf_loop(nw, eval_app_word, ev, 0);
		return;
	}
	ev->w = 0;
	ev->bits = s->app.w[0];
	ev->best = hq_bwalk_app(ev, k, nw, slot);
}

/* State of app_match's word loops (bpf_loop callbacks). */
struct hq_appm {
	struct hq_scratch *s;
	const struct hq_buf *hb;
	struct hq_bitmap *exe; /* the identity's entries; NULL = none */
	struct hq_bitmap *comm;
	struct hq_bitmap *uid;
	struct hq_bitmap *cg; /* one cgroup level's entry */
	__u64 any;
};

static long am_clear_word(__u32 k, void *data)
{
	struct hq_appm *m = data;

	if (!m->s)
		return 1;
	/* volatile: a bounded loop of these must not become a memset. */
	*(volatile __u64 *)&m->s->cg.w[k & (HQ_BITMAP_WORDS - 1)] = 0;
	return 0;
}

static long am_cg_word(__u32 k, void *data)
{
	struct hq_appm *m = data;

	if (!m->s || !m->cg)
		return 1;
	k &= HQ_BITMAP_WORDS - 1;
	m->s->cg.w[k] |= m->cg->w[k];
	return 0;
}

/*
 * Word k of the app bitmap: a rule's bit survives when each selector type
 * it uses matches (its bit is set in the identity's entry of that type).
 * Bits of no rule (every app rule has some selector) stay clear.
 */
static long am_word(__u32 k, void *data)
{
	struct hq_appm *m = data;
	const struct hq_buf *hb = m->hb;
	__u64 w;

	if (!m->s || !hb)
		return 1;
	k &= HQ_BITMAP_WORDS - 1;
	w = hb->r_exe.w[k] | hb->r_comm.w[k] | hb->r_uid.w[k] | hb->r_cg.w[k];
	w &= (m->exe ? m->exe->w[k] : 0) | ~hb->r_exe.w[k];
	w &= (m->comm ? m->comm->w[k] : 0) | ~hb->r_comm.w[k];
	w &= (m->uid ? m->uid->w[k] : 0) | ~hb->r_uid.w[k];
	w &= m->s->cg.w[k] | ~hb->r_cg.w[k];
	m->s->app.w[k] = w;
	m->any |= w;
	return 0;
}

/*
 * Computes into s->app the bitmap of app rules the socket's identity
 * satisfies (words 0..nw-1, nw <= HQ_BITMAP_WORDS); returns whether any
 * bit is set. Cgroups match as the union over the socket's own cgroup and
 * its ancestors. A global function (verified once, on its own: its
 * pointers are plain memory that may be NULL), as hq_flow_slow.
 */
__noinline int hq_app_match(struct hq_scratch *s, __u32 buf,
			    const struct hq_buf *hb, const struct hq_ident *id,
			    __u32 nw)
{
	/* One key at a time: a smaller frame (the stack limit counts it). */
	union {
		struct hq_exe_key ek;
		struct hq_comm_key ck;
		struct hq_uid_key uk;
	} u;
	struct hq_cg_key gk = {};
	struct hq_appm m = {};
	__u32 l, top;

	if (!s || !hb || !id)
		return 0;
	m.s = s;
	m.hb = hb;
	__builtin_memset(&u, 0, sizeof(u));
	u.ek.buf = buf;
	u.ek.dev = id->exe_dev;
	u.ek.ino = id->exe_ino;
	m.exe = bpf_map_lookup_elem(&hq_exe, &u.ek);
	__builtin_memset(&u, 0, sizeof(u));
	u.ck.buf = buf;
	__builtin_memcpy(u.ck.comm, id->comm, HQ_COMM_LEN);
	m.comm = bpf_map_lookup_elem(&hq_comm, &u.ck);
	__builtin_memset(&u, 0, sizeof(u));
	u.uk.buf = buf;
	u.uk.uid = id->uid;
	m.uid = bpf_map_lookup_elem(&hq_uid, &u.uk);

	hq_loop(nw, HQ_BOUNDED_WORDS, am_clear_word, &m);
	gk.buf = buf;
	top = id->cg_level;
	for (l = 0; l <= HQ_CG_LEVELS; l++) {
		if (l < HQ_CG_LEVELS) {
			if (l > top)
				break;
			gk.id = id->cg[l];
		} else {
			if (top < HQ_CG_LEVELS)
				break;
			gk.id = id->cg_own;
		}
		m.cg = bpf_map_lookup_elem(&hq_cg, &gk);
		if (m.cg)
			hq_loop(nw, HQ_BOUNDED_WORDS, am_cg_word, &m);
	}
	hq_loop(nw, HQ_BOUNDED_WORDS, am_word, &m);
	return m.any != 0;
}

/*
 * The identity of an MPTCP subflow (NULL: sk is none): its MPTCP socket's.
 * The subflows are kernel sockets, which sock_create never sees; the
 * MPTCP socket is the one the application made (an accepted one a clone
 * of its listener, storage included: BPF_F_CLONE). Go listens with MPTCP
 * by default, and a plain TCP peer makes the connection a fallback
 * subflow of it.
 */
static __always_inline struct hq_ident *mptcp_ident(struct bpf_sock *sk)
{
	struct mptcp_sock *msk;

	if (!hq_mptcp)
		return NULL;
	msk = bpf_skc_to_mptcp_sock(sk);
	if (!msk)
		return NULL;
	return bpf_sk_storage_get(&hq_sk_ident, msk, 0, 0);
}

/* The identity stored with a socket, NULL for none. */
static __always_inline struct hq_ident *sk_ident(struct bpf_sock *sk,
						 struct hq_stats *st)
{
	struct hq_ident *id = NULL;

	if (sk) {
		sk = bpf_sk_fullsock(sk);
		if (sk) {
			id = bpf_sk_storage_get(&hq_sk_ident, sk, 0, 0);
			if (!id)
				id = mptcp_ident(sk);
			if (!id && st)
				st->no_identity++;
		}
	}
	return id;
}

/* The identity of the packet's (full) socket, NULL for none. */
static __always_inline struct hq_ident *skb_ident(struct __sk_buff *skb,
						  struct hq_stats *st)
{
	struct bpf_sock *sk = skb->sk;
	struct hq_ident *id;

	if (!sk)
		return NULL;
	sk = bpf_sk_fullsock(sk);
	if (!sk)
		return NULL;
	id = bpf_sk_storage_get(&hq_sk_ident, sk, 0, 0);
	if (!id)
		id = mptcp_ident(sk);
	if (!id && st)
		st->no_identity++;
	return id;
}

/*
 * Evaluates the active policy for flow k of a socket with identity id
 * (NULL: none) and fills the cached part of *f (gen, slot, action, dscp,
 * classid, owner): the earliest rule in policy order whose selectors all
 * match. Rules with app selectors are found through the identity's app
 * bitmap, the others by tuple-space search (struct hq_tuple); the earlier
 * of the two wins.
 */
static __always_inline void evaluate(const struct hq_ident *id,
				     const struct hq_flow_key *k, __u8 dscp_in,
				     struct hq_flow *f, __u32 gen,
				     struct hq_stats *st, __u32 slot)
{
	struct hq_eval ev = {};
	struct hq_scratch *s;
	const struct hq_buf *hb;
	struct hq_rule *r;
	__u32 buf = gen & 1;
	__u32 idx, fam, nt, nw, nrules;
	__u64 token;

	hb = &hq_policy.buf[buf];

	f->gen = gen;
	f->slot = HQ_SLOT_NONE;
	f->action = HQ_ACT_PASS;
	f->dscp = -1;
	f->classid = 0;

	nrules = hb->nrules;
	if (nrules > HQ_MAX_RULES)
		nrules = HQ_MAX_RULES;
	ev.key = k;
	ev.dscp_in = dscp_in;
	ev.base = buf * HQ_MAX_RULES;
	ev.best = nrules;
	if (st)
		st->evaluations++;

	/* Without an identity no app rule matches. */
	if (id) {
		f->tgid = id->tgid;
		f->uid = id->uid;
		__builtin_memcpy(f->comm, id->comm, HQ_COMM_LEN);
		nw = (hb->napp + 63) / 64;
		if (nw > HQ_BITMAP_WORDS)
			nw = HQ_BITMAP_WORDS;
		s = bpf_map_lookup_elem(&hq_scratch, &slot);
#pragma unroll
		for (int try = 0; try < 2; try++) {
			if (!s || !nw)
				break;
			token = bpf_get_prandom_u32() | 1;
			s->token = token;
			ev.best = nrules;
			ev.done = 0;
			if (hq_app_match(s, buf, hb, id, nw)) {
				ev.app = &s->app;
				ev.abase = buf * HQ_MAX_APP_RULES;
				app_walk(&ev, k, s, nw, slot);
			}
			if (s->token == token)
				break;
			/* Overwritten midway (socket hooks only): again, or none. */
			ev.best = nrules;
		}
	}

	fam = k->family == HQ_AF_INET6;
	nt = hb->ntuples[fam];
	if (nt > HQ_MAX_TUPLES)
		nt = HQ_MAX_TUPLES;
	ev.tbase = (buf * 2 + fam) * HQ_MAX_TUPLES;
	ev.nbase = buf * HQ_TSS_ENTRIES;
	if (nt)
		tss_walk(&ev, k, nt);

	if (ev.best >= nrules)
		return;
	idx = ev.base + ev.best;
	r = bpf_map_lookup_elem(&hq_rules, &idx);
	if (!r)
		return;
	f->slot = r->slot;
	f->action = r->action;
	f->dscp = r->dscp;
	f->classid = r->classid;
}

/*
 * Parses the packet at l3 offset off into p, writing every byte of its
 * flow key (p->k4 for IPv4, p->key for IPv6) and dscp_in. Returns 0 on
 * success, 1 for non-IP, -1 for a malformed/truncated packet. For IPv4 it
 * zeroes the rest of p->key too, and it writes p->pad: p goes to global
 * functions as plain memory, and 5.15's verifier wants every byte of that
 * written (the caller writes now, len and gen).
 */
static __always_inline int parse(struct __sk_buff *skb, __u32 off,
				 struct hq_pkt *p)
{
	void *data = (void *)(long)skb->data;
	void *end = (void *)(long)skb->data_end;
	__u16 proto = bpf_ntohs(skb->protocol);
	__u16 sport = 0, dport = 0;
	__u8 l4, family;
	int frag = 0;

	if (proto == ETH_P_IP) {
		struct iphdr *ip = data + off;

		if ((void *)(ip + 1) > end)
			return -1;
		if (ip->version != 4 || ip->ihl < 5)
			return -1;
		family = HQ_AF_INET;
		p->k4.saddr = ip->saddr;
		p->k4.daddr = ip->daddr;
		/* The full form's rest (see above). */
		__builtin_memset((char *)p + sizeof(p->k4), 0,
				 sizeof(p->key) - sizeof(p->k4));
		p->dscp_in = ip->tos >> 2;
		l4 = ip->protocol;
		frag = (bpf_ntohs(ip->frag_off) & 0x1fff) != 0;
		off += ip->ihl * 4;
	} else if (proto == ETH_P_IPV6) {
		struct ipv6hdr *ip6 = data + off;

		if ((void *)(ip6 + 1) > end)
			return -1;
		if (ip6->version != 6)
			return -1;
		family = HQ_AF_INET6;
		__builtin_memcpy(p->key.src, &ip6->saddr, 16);
		__builtin_memcpy(p->key.dst, &ip6->daddr, 16);
		p->dscp_in =
			((ip6->priority << 4) | (ip6->flow_lbl[0] >> 4)) >> 2;
		l4 = ip6->nexthdr;
		off += sizeof(*ip6);
#pragma unroll
		for (int k = 0; k < HQ_IPV6_EXT_MAX; k++) {
			struct ipv6_opt_hdr *oh = data + off;

			if (l4 != IPPROTO_HOPOPTS && l4 != IPPROTO_ROUTING &&
			    l4 != IPPROTO_DSTOPTS && l4 != IPPROTO_FRAGMENT &&
			    l4 != IPPROTO_AH)
				break;
			if ((void *)(oh + 1) > end)
				return -1;
			if (l4 == IPPROTO_FRAGMENT) {
				struct frag_hdr *fh = data + off;

				if ((void *)(fh + 1) > end)
					return -1;
				if (bpf_ntohs(fh->frag_off) & 0xfff8)
					frag = 1;
				l4 = fh->nexthdr;
				off += sizeof(*fh);
			} else if (l4 == IPPROTO_AH) {
				l4 = oh->nexthdr;
				off += (oh->hdrlen + 2) * 4;
			} else {
				l4 = oh->nexthdr;
				off += (oh->hdrlen + 1) * 8;
			}
		}
	} else {
		return 1;
	}

	if (!frag && (l4 == IPPROTO_TCP || l4 == IPPROTO_UDP)) {
		__u16 *ports;

		/* Bound off so the verifier can track the access. */
		if (off > 512)
			return -1;
		ports = data + off;
		if ((void *)(ports + 2) > end)
			return -1;
		sport = bpf_ntohs(ports[0]);
		dport = bpf_ntohs(ports[1]);
	}
	p->l4off = off;
	p->pad = 0;
	/* The header both key layouts share. */
	p->key.family = family;
	p->key.proto = l4;
	p->key.sport = sport;
	p->key.dport = dport;
	p->key.pad = 0;
	return 0;
}

/* Rewrites DSCP keeping ECN. Invalidates packet pointers. */
static __always_inline void set_dscp(struct __sk_buff *skb, __u32 off,
				     __u8 family, __u8 dscp)
{
	void *data = (void *)(long)skb->data;
	void *end = (void *)(long)skb->data_end;

	if (family == HQ_AF_INET) {
		struct iphdr *ip = data + off;
		__u16 oldw, neww;
		__u8 tos;

		if ((void *)(ip + 1) > end)
			return;
		tos = (dscp << 2) | (ip->tos & 3);
		if (tos == ip->tos)
			return;
		/* The 16-bit header word holding TOS, as big-endian values. */
		oldw = bpf_htons(((__u16)((__u8 *)ip)[0] << 8) | ip->tos);
		neww = bpf_htons(((__u16)((__u8 *)ip)[0] << 8) | tos);
		ip->tos = tos;
		bpf_l3_csum_replace(skb, off + offsetof(struct iphdr, check),
				    oldw, neww, 2);
	} else {
		__u8 *b = data + off;
		__u8 tc, ntc;

		if ((void *)(b + 2) > end)
			return;
		tc = ((b[0] & 0x0f) << 4) | (b[1] >> 4);
		ntc = (dscp << 2) | (tc & 3);
		b[0] = (b[0] & 0xf0) | (ntc >> 4);
		b[1] = (b[1] & 0x0f) | (ntc << 4);
	}
}

/*
 * The cached classification of a flow, packed into one register: classid
 * | slot << 32 | action << 48 | (u8)dscp << 56, which is how the four
 * fields lie in memory (little endian), so it is one load.
 */
#define HQ_RES_OFF HQ_OFF(hq_flow, classid)
_Static_assert(HQ_RES_OFF % 8 == 0 && HQ_OFF(hq_flow, slot) == HQ_RES_OFF + 4 &&
		       HQ_OFF(hq_flow, action) == HQ_RES_OFF + 6 &&
		       HQ_OFF(hq_flow, dscp) == HQ_RES_OFF + 7,
	       "hq_flow's cached result must form one 64-bit word");

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "pack_result assumes a little-endian target"
#endif

static __always_inline __u64 pack_result(const struct hq_flow *f)
{
	return *(const __u64 *)&f->classid;
}

/*
 * The flow that owns counter slot idx under tag t, or NULL when the slot is
 * free or its flow has left the flow table (or moved to another slot).
 */
static __always_inline struct hq_flow *fctr_owner(__u32 idx, __u64 t)
{
	struct hq_flow_key4 k4;
	struct hq_flow_key *k;
	struct hq_flow *o;

	if (!t)
		return NULL;
	k = bpf_map_lookup_elem(&hq_fkey, &idx);
	if (!k)
		return NULL;
	if (k->family == HQ_AF_INET) {
		k4.family = HQ_AF_INET;
		k4.proto = k->proto;
		k4.sport = k->sport;
		k4.dport = k->dport;
		k4.pad = 0;
		k4.saddr = k->src[0];
		k4.daddr = k->dst[0];
		o = bpf_map_lookup_elem(&hq_flows4, &k4);
	} else {
		o = bpf_map_lookup_elem(&hq_flows6, k);
	}
	if (!o || o->tag != t || o->cslot != idx)
		return NULL;
	return o;
}

/*
 * Hands flow f (key *key) a counter slot: the first of HQ_FCTR_TRIES
 * slots after the cursor that is free or whose flow is gone or idle for
 * HQ_FCTR_IDLE_NS, else the least recently used of them. A live owner of
 * the slot gets the slot's counts added to its base first, so its counters
 * stay monotonic; it gets a new slot on its next packet. Returns the
 * slot's index, negative for none. A global function (see hq_flow_slow),
 * so it returns the index, not the slot (6.1 takes no pointer back). The
 * tries are unrolled: as a loop, clang spills its counter to the stack as
 * 32 bits, which 5.15's verifier does not track (5.16 does), so that the
 * loop looks unbounded to it.
 */
__noinline int hq_fctr_alloc(__u64 now, const struct hq_flow_key *key,
			     struct hq_flow *f)
{
	struct hq_fctr *c, *best = NULL;
	struct hq_flow *o, *best_o = NULL;
	struct hq_flow_key *k;
	__u64 n, best_n = 0, t;
	__u32 idx, best_idx = 0;
	int i;

	if (!key || !f)
		return -1;
#pragma unroll
	for (i = 0; i < HQ_FCTR_TRIES; i++) {
		n = __sync_fetch_and_add(&hq_policy.fcursor, 1);
		idx = n % hq_fctr_n;
		c = bpf_map_lookup_elem(&hq_fctr, &idx);
		if (!c)
			return -1;
		t = c->tag;
		o = fctr_owner(idx, t);
		if (!o || now - c->last_ns >= HQ_FCTR_IDLE_NS) {
			best = c;
			best_o = o;
			best_n = n;
			best_idx = idx;
			break;
		}
		if (!best || c->last_ns < best->last_ns) {
			best = c;
			best_o = o;
			best_n = n;
			best_idx = idx;
		}
	}
	if (!best)
		return -1;
	c = best;
	t = __sync_lock_test_and_set(&c->tag, best_n + 1);
	o = best_o;
	if (o && o->tag == t) {
		__sync_fetch_and_add(&o->base_packets, c->packets);
		__sync_fetch_and_add(&o->base_bytes, c->bytes);
		__sync_fetch_and_add(&o->base_drops, c->drops);
		__sync_fetch_and_add(&o->base_rx_packets, c->rx_packets);
		__sync_fetch_and_add(&o->base_rx_bytes, c->rx_bytes);
		__sync_fetch_and_add(&o->base_rx_drops, c->rx_drops);
		o->base_last_ns = c->last_ns;
	}
	c->packets = 0;
	c->bytes = 0;
	c->drops = 0;
	c->rx_packets = 0;
	c->rx_bytes = 0;
	c->rx_drops = 0;
	c->last_ns = now;
	c->rule = f->slot;
	k = bpf_map_lookup_elem(&hq_fkey, &best_idx);
	if (k)
		*k = *key;
	f->cslot = best_idx;
	f->tag = best_n + 1;
	return best_idx;
}

/* The slot hq_fctr_alloc gave f, NULL when it found none. */
static __always_inline struct hq_fctr *
fctr_alloc(__u64 now, const struct hq_flow_key *key, struct hq_flow *f)
{
	int r = hq_fctr_alloc(now, key, f);
	__u32 idx = r;

	if (r < 0)
		return NULL;
	return bpf_map_lookup_elem(&hq_fctr, &idx);
}

/*
 * Rule slot's policer verdict for a packet of len bytes (struct hq_police):
 * HQ_ACT_PASS when it conforms (and is charged), HQ_ACT_DROP when not.
 *
 * Time: the packet's coarse time (tick resolution, already read) first,
 * the precise clock (bpf_ktime_get_ns, ~75 ns in a VM) only when the
 * coarse time says drop. The coarse time lags the real one by less than a
 * tick, so the coarse test is the stricter one: every packet it passes
 * conforms, and a packet that conforms at the real time is never dropped.
 * A packet charged at coarse time may be charged from up to a tick too
 * early while the bucket is full, so the policer lets through at most one
 * tick of extra burst (rate * 1/HZ bytes), never more over time.
 *
 * Lock-free: tat moves by compare-and-swap; a packet that loses the race
 * HQ_POLICE_TRIES times is charged with an atomic add and passes, so the
 * bucket stays exact in total. Fails open: no policer state passes.
 */
static __always_inline int gcra(__u64 *tatp, __u64 cost, __u64 tau,
				__u64 coarse)
{
	__u64 now = coarse, old, tat;
	int i, precise = 0;

	for (i = 0; i < HQ_POLICE_TRIES; i++) {
		old = *(volatile __u64 *)tatp;
		tat = old > now ? old : now;
		if (tat + cost - now > tau) {
			if (precise)
				return HQ_ACT_DROP;
			now = bpf_ktime_get_ns();
			precise = 1;
			continue;
		}
		if (__sync_val_compare_and_swap(tatp, old, tat + cost) == old)
			return HQ_ACT_PASS;
	}
	__sync_fetch_and_add(tatp, cost);
	return HQ_ACT_PASS;
}

static __noinline int police(__u32 slot, __u32 len, __u64 coarse)
{
	struct hq_police *pl;

	pl = bpf_map_lookup_elem(&hq_police, &slot);
	if (!pl || !pl->ns_q16)
		return HQ_ACT_PASS;
	return gcra(&pl->tat, ((__u64)len * pl->ns_q16) >> HQ_POLICE_SHIFT,
		    pl->tau, coarse);
}

/*
 * A packet's action after its rule's policer: a policed packet passes as
 * HQ_ACT_PASS or is dropped as HQ_ACT_DROP (counted as a drop everywhere).
 */
static __always_inline __u64 police_result(__u64 res, __u32 len, __u64 now)
{
	if ((__u8)(res >> 48) != HQ_ACT_POLICE)
		return res;
	res &= ~(0xffULL << 48);
	return res | ((__u64)police((__u16)(res >> 32), len, now) << 48);
}

/* ---------------------------------------------------------------------- */
/* Reservations: policing (t_m, t_p), socket binding, session admission   */
/* ---------------------------------------------------------------------- */

#define SOL_SOCKET 1
#define SO_SNDBUF 7

/* Reservation of each rule slot, by buffer * HQ_MAX_RULES + slot. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2 * HQ_MAX_RULES);
	__type(key, __u32);
	__type(value, struct hq_resv);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} hq_rule_resv SEC(".maps");

/* Policer times and counters by reservation id. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, HQ_MAX_RESV);
	__type(key, __u32);
	__type(value, struct hq_resv_state);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} hq_resv_state SEC(".maps");

/* Sockets bound to a reservation, by socket cookie. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, HQ_BIND_ENTRIES);
	__type(key, __u64);
	__type(value, struct hq_binding);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} hq_bind SEC(".maps");

/* The latest session refusals, by seq % HQ_REFUSALS. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, HQ_REFUSALS);
	__type(key, __u32);
	__type(value, struct hq_refusal);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} hq_refusal SEC(".maps");

/*
 * Tests only: the policer takes t from skb->tstamp (which test-run lets the
 * caller set) instead of the clock, so that t_m/t_p sequences can be
 * computed by hand. Set at load; 0 in the daemon, where the verifier
 * removes the branch.
 */
const volatile __u8 hq_test_clock = 0;

static __always_inline __s64 smax(__s64 a, __s64 b)
{
	return a > b ? a : b;
}

/* c bytes at a rate of q16 (ns per byte << 16), rounded up to the ns. */
static __always_inline __s64 charge(__u64 c, __u64 q16)
{
	return (__s64)((c * q16 + 0xffff) >> 16);
}

enum {
	HQ_CONFORM = 0,
	HQ_NONCONFORM = 1,
};

/*
 * The seed's policer (§III-C), for a packet of L bytes (segs segments) at
 * time t. Conformant: t >= max(t_m, t_p) and no segment above M; then
 *     t_m = max(t - b/r, t_m) + max(L, m)/r,
 *     t_p = max(t - M/p, t_p) + max(L, m)/p.
 * A non-conformant packet of a guaranteed reservation is shaped (its HTB
 * leaf delays it): it is charged as the seed's session-level shaper
 * charges it, at the time it becomes conformant, te = max(t_m, t_p), and
 * te - t is added to the shaped time. Any other non-conformant packet
 * leaves the times as they are (it is not sent under the reservation).
 * One lock per reservation (hq_resv_state.busy): the two times move
 * together, and every CPU and every bound socket of the reservation shares
 * them. The classifier runs with bottom halves off, so the holder is on
 * another CPU for a few instructions; a packet that finds it held tries
 * HQ_RESV_TRIES times inline, then HQ_RESV_WAIT times in bpf_loop, and only
 * then passes uncharged under its rule's class, counted in busy_misses.
 */
static __always_inline int resv_trylock(struct hq_resv_state *s)
{
	return !*(volatile __u32 *)&s->busy &&
	       !__sync_val_compare_and_swap(&s->busy, 0, 1);
}

/* The policer lock's slow wait (bpf_loop): until taken or HQ_RESV_WAIT. */
struct resv_wait {
	struct hq_resv_state *s;
	int taken;
};

static long resv_wait_cb(__u64 i, void *ctx)
{
	struct resv_wait *w = ctx;

	if (!w->s || !resv_trylock(w->s))
		return 0;
	w->taken = 1;
	return 1;
}

static __always_inline int resv_police(const struct hq_resv *rv,
				       struct hq_resv_state *s, __s64 t,
				       __u64 L, __u32 segs)
{
	__u64 c = L, cmin = (__u64)rv->min_unit * segs;
	__s64 cm, cp = 0, te, tm, tp;
	int i, over, verdict = HQ_CONFORM;

	if (c < cmin)
		c = cmin;
	cm = charge(c, rv->r_q16);
	if (rv->p_q16)
		cp = charge(c, rv->p_q16);
	/* A GSO packet's segments are at most M each if its average is. */
	over = L > (__u64)rv->max_unit * segs;

	for (i = 0; i < HQ_RESV_TRIES; i++)
		if (resv_trylock(s))
			break;
	if (i == HQ_RESV_TRIES) {
		struct resv_wait w = {.s = s};

		hq_loop(HQ_RESV_WAIT, HQ_BOUNDED_RESV_WAIT, resv_wait_cb, &w);
		if (!w.taken) {
			__sync_fetch_and_add(&s->busy_misses, 1);
			return HQ_CONFORM;
		}
	}
	if (s->epoch != rv->epoch) {
		s->epoch = rv->epoch;
		s->t_m = HQ_T_NEG_INF;
		s->t_p = HQ_T_NEG_INF;
	}
	tm = s->t_m;
	tp = s->t_p;
	te = smax(tm, tp);
	if (!over && t >= te) {
		s->t_m = smax(t - (__s64)rv->b_ns, tm) + cm;
		if (rv->p_q16)
			s->t_p = smax(t - (__s64)rv->mp_ns, tp) + cp;
		s->conf_packets++;
		s->conf_bytes += L;
	} else {
		verdict = HQ_NONCONFORM;
		s->nonconf_packets++;
		s->nonconf_bytes += L;
		if (over) {
			s->oversize_packets++;
		} else if (rv->service == HQ_SVC_GUARANTEED) {
			s->t_m = smax(te - (__s64)rv->b_ns, tm) + cm;
			if (rv->p_q16)
				s->t_p = smax(te - (__s64)rv->mp_ns, tp) + cp;
			s->shaped_packets++;
			s->shaped_ns += te - t;
		}
		if (rv->service == HQ_SVC_CONTROLLED_LOAD)
			s->demoted_bytes += L;
	}
	__sync_lock_test_and_set(&s->busy, 0);
	return verdict;
}

/*
 * The result of a packet classified under a reservation (action
 * HQ_ACT_RESV): it passes; a non-conformant controlled-load packet leaves
 * as best effort (the reservation's demote class and DSCP); every other
 * packet keeps the class and DSCP of its rule (a guaranteed
 * reservation's leaf shapes the non-conformant ones). Never drops.
 */
__noinline __u64 hq_resv_result(struct __sk_buff *skb, __u64 res, __u32 gen,
				__u32 off)
{
	struct hq_resv_state *s;
	struct hq_resv *rv;
	__u32 slot = (__u16)(res >> 32), idx, id, segs;
	__u64 L;
	__s64 t;

	res &= ~(0xffULL << 48); /* HQ_ACT_PASS */
	if (slot >= HQ_MAX_RULES)
		return res;
	idx = (gen & 1) * HQ_MAX_RULES + slot;
	rv = bpf_map_lookup_elem(&hq_rule_resv, &idx);
	if (!rv || !rv->r_q16)
		return res;
	id = rv->id;
	s = bpf_map_lookup_elem(&hq_resv_state, &id);
	if (!s)
		return res;
	/* L: the IP packet (RFC 2210: m and M count no link-layer header). */
	L = skb->len > off ? skb->len - off : 0;
	segs = skb->gso_segs > 1 ? skb->gso_segs : 1;
	t = hq_test_clock ? (__s64)skb->tstamp : (__s64)bpf_ktime_get_ns();
	if (resv_police(rv, s, t, L, segs) == HQ_CONFORM ||
	    rv->service != HQ_SVC_CONTROLLED_LOAD)
		return res;
	return (res & (0xffffULL << 32)) | rv->demote_classid |
	       ((__u64)(__u8)rv->demote_dscp << 56);
}

/* The reservation a rule slot names in the policy of generation gen. */
static __always_inline struct hq_resv *slot_resv(__u32 slot, __u32 gen)
{
	__u32 idx = (gen & 1) * HQ_MAX_RULES + slot;

	if (slot >= HQ_MAX_RULES)
		return NULL;
	return bpf_map_lookup_elem(&hq_rule_resv, &idx);
}

/*
 * Takes a free per-session leaf of reservation rv for a socket that now
 * holds one of its sessions: 1 + the leaf's index, 0 when rv has no
 * per-session leaves or all are taken (the socket's traffic then uses the
 * leaf of traffic without a session).
 */
static __always_inline __u8 sess_take(const struct hq_resv *rv,
				      struct hq_resv_state *s)
{
	__u32 i, bit, free, all, n = rv->max_sessions;

	if (!rv->sess_classid)
		return 0;
	all = n >= HQ_SESSION_LEAVES ? ~0U : (1U << n) - 1;
	/*
	 * The lowest free leaf, found without a branch per leaf (a branch
	 * per leaf is a path per leaf for older verifiers: 5.15 ran out of
	 * its 1M instructions on them). An attempt fails only when another
	 * CPU took that leaf meanwhile; then the next free one is tried.
	 */
	for (i = 0; i < HQ_SESSION_LEAVES; i++) {
		free = all & ~*(volatile __u32 *)&s->sess_used;
		if (!free)
			return 0;
		bit = free & -free;
		if (!(__sync_fetch_and_or(&s->sess_used, bit) & bit))
			return ctz64(bit) + 1;
	}
	return 0;
}

/* Gives back the session binding b holds, if it still holds one. */
static __always_inline void resv_uncount(struct hq_binding *b)
{
	struct hq_resv_state *s;
	__u32 id = b->resv;
	__u8 sess = b->sess;

	if (!b->counted)
		return;
	b->counted = 0;
	b->sess = 0;
	s = bpf_map_lookup_elem(&hq_resv_state, &id);
	if (!s || s->incarnation != b->incarnation)
		return;
	__sync_fetch_and_add(&s->sessions, -1);
	if (sess && sess <= HQ_SESSION_LEAVES)
		__sync_fetch_and_and(&s->sess_used, ~(1U << (sess - 1)));
}

/*
 * The HTB class of the packets of the socket of skb under reservation rv:
 * the per-session leaf the socket holds, or 0 (rv has no per-session
 * leaves, or the socket holds none: the rule's class stays).
 */
static __always_inline __u32 sess_classid(struct __sk_buff *skb,
					  const struct hq_resv *rv)
{
	struct hq_resv_state *s;
	struct hq_binding *b;
	__u64 cookie;
	__u32 rid = rv->id;

	if (!rv->sess_classid)
		return 0;
	cookie = bpf_get_socket_cookie(skb);
	b = cookie ? bpf_map_lookup_elem(&hq_bind, &cookie) : NULL;
	s = bpf_map_lookup_elem(&hq_resv_state, &rid);
	if (b && s && b->resv == rv->id && b->counted && b->sess &&
	    b->sess <= rv->max_sessions && b->incarnation == s->incarnation)
		return rv->sess_classid + b->sess - 1;
	return 0;
}

static __always_inline void fill_owner(struct hq_binding *b,
				       const struct hq_ident *id)
{
	if (!id)
		return;
	b->tgid = id->tgid;
	b->uid = id->uid;
	b->exe_ino = id->exe_ino;
	b->exe_dev = id->exe_dev;
	__builtin_memcpy(b->comm, id->comm, HQ_COMM_LEN);
}

/*
 * Whether a socket may still send data: any UDP socket; a TCP socket
 * connecting, established or half-closed by its peer. A TCP socket the
 * application closed (or shut down for writing) still sends its FIN and
 * retransmissions, possibly after sock_release unbound it: it must not be
 * bound again (its session would never be given back).
 */
static __always_inline int tcp_may_send(const struct bpf_sock *sk)
{
	if (sk->protocol != IPPROTO_TCP)
		return 1;
	return sk->state == BPF_TCP_ESTABLISHED ||
	       sk->state == BPF_TCP_SYN_SENT || sk->state == BPF_TCP_SYN_RECV ||
	       sk->state == BPF_TCP_CLOSE_WAIT;
}

/*
 * A packet of a socket with no binding yet was classified under a
 * reservation: the socket was open before the reservation (or connected
 * in a way the hooks do not see). Bind it, holding a session it is never
 * refused; complete the 5-tuple of a socket bound at connect.
 */
static __noinline void resv_bind_skb(struct __sk_buff *skb,
				     const struct hq_flow_key *key,
				     const struct hq_flow *f,
				     const struct hq_ident *id, __u32 gen)
{
	struct hq_binding nb = {}, *b;
	struct hq_resv_state *s;
	struct hq_resv *rv;
	struct bpf_sock *sk;
	__u64 cookie;
	__u32 rid;

	sk = skb->sk;
	if (!sk)
		return;
	sk = bpf_sk_fullsock(sk);
	if (!sk || !tcp_may_send(sk))
		return;
	cookie = bpf_get_socket_cookie(skb);
	if (!cookie)
		return;
	rv = slot_resv(f->slot, gen);
	if (!rv)
		return;
	b = bpf_map_lookup_elem(&hq_bind, &cookie);
	if (b && b->resv == rv->id) {
		b->key = *key;
		return;
	}
	if (b)
		resv_uncount(b);
	rid = rv->id;
	s = bpf_map_lookup_elem(&hq_resv_state, &rid);
	if (!s)
		return;
	nb.key = *key;
	nb.bound_ns = bpf_ktime_get_ns();
	nb.resv = rv->id;
	nb.incarnation = s->incarnation;
	nb.counted = 1;
	fill_owner(&nb, id);
	if (!id) {
		nb.tgid = f->tgid;
		nb.uid = f->uid;
	}
	nb.sess = sess_take(rv, s);
	if (bpf_map_update_elem(&hq_bind, &cookie, &nb, BPF_ANY) == 0) {
		__sync_fetch_and_add(&s->sessions, 1);
		__sync_fetch_and_add(&s->sessions_total, 1);
	} else if (nb.sess) {
		__sync_fetch_and_and(&s->sess_used, ~(1U << (nb.sess - 1)));
	}
}

/*
 * A flow of a reservation with per-session leaves goes to the leaf of the
 * session its socket holds (looked up once, when the flow is evaluated).
 */
static __noinline void resv_flow_class(struct __sk_buff *skb,
				       struct hq_flow *nf, __u32 gen)
{
	struct hq_resv *rv = slot_resv(nf->slot, gen);
	__u32 c;

	if (!rv)
		return;
	c = sess_classid(skb, rv);
	if (c)
		nf->classid = c;
}

/* Records a refused session for the daemon (hq_refusal ring). */
static __always_inline void refusal(const struct hq_flow_key *key,
				    const struct hq_ident *id, __u16 resv,
				    __u32 limit, __u8 why)
{
	struct hq_refusal *e;
	__u64 seq = __sync_fetch_and_add(&hq_policy.refuse_seq, 1) + 1;
	__u32 idx = seq % HQ_REFUSALS;

	e = bpf_map_lookup_elem(&hq_refusal, &idx);
	if (!e)
		return;
	e->seq = 0; /* readers skip the entry while it is rewritten */
	e->ns = bpf_ktime_get_ns();
	e->key = *key;
	e->resv = resv;
	e->why = why;
	e->sessions = limit;
	if (id) {
		e->tgid = id->tgid;
		e->uid = id->uid;
		__builtin_memcpy(e->comm, id->comm, HQ_COMM_LEN);
	} else {
		e->tgid = bpf_get_current_pid_tgid() >> 32;
		e->uid = (__u32)bpf_get_current_uid_gid();
		bpf_get_current_comm(e->comm, sizeof(e->comm));
	}
	e->seq = seq;
}

/*
 * connect() or an unconnected sendmsg() of a socket to the address in
 * ctx. When the policy classifies the session under a reservation, the
 * socket is bound to it here, before it sends anything: it takes one of
 * the reservation's sessions (or, over max_sessions, the call fails with
 * EPERM and nothing is sent) and a guaranteed reservation sets its send
 * buffer. Returns the hook's verdict (1 allow, 0 refuse with EPERM).
 */
static __noinline int resv_session(struct bpf_sock_addr *ctx, __u8 family,
				   __u8 why)
{
	struct hq_flow nf = {};
	struct hq_flow_key key = {};
	struct hq_binding nb = {}, *b;
	struct hq_resv_state *s;
	struct hq_ident *id = NULL;
	struct hq_resv *rv;
	struct bpf_sock *sk;
	__u32 gen, rid, max;
	__u64 cookie;
	__s64 n;

	gen = *(volatile __u32 *)&hq_policy.gen;
	if (!hq_policy.buf[gen & 1].nresv)
		return 1;
	if (why == HQ_REFUSE_SENDMSG && !hq_policy.buf[gen & 1].nsess)
		return 1;
	if (bpf_get_netns_cookie(ctx) != hq_netns_cookie)
		return 1;
	cookie = bpf_get_socket_cookie(ctx);
	b = bpf_map_lookup_elem(&hq_bind, &cookie);
	/* An unconnected socket that holds its session sends freely. */
	if (why == HQ_REFUSE_SENDMSG && b && b->counted)
		return 1;

	key.family = family;
	key.proto = ctx->protocol;
	key.dport = bpf_ntohs((__u16)ctx->user_port);
	if (family == HQ_AF_INET) {
		key.dst[0] = ctx->user_ip4;
	} else {
		key.dst[0] = ctx->user_ip6[0];
		key.dst[1] = ctx->user_ip6[1];
		key.dst[2] = ctx->user_ip6[2];
		key.dst[3] = ctx->user_ip6[3];
	}
	sk = ctx->sk;
	if (sk) {
		/* Known only when the socket was bound before. */
		key.sport = sk->src_port;
		if (family == HQ_AF_INET) {
			key.src[0] = sk->src_ip4;
		} else {
			key.src[0] = sk->src_ip6[0];
			key.src[1] = sk->src_ip6[1];
			key.src[2] = sk->src_ip6[2];
			key.src[3] = sk->src_ip6[3];
		}
		id = bpf_sk_storage_get(&hq_sk_ident, sk, 0, 0);
	}

	evaluate(id, &key, 0, &nf, gen, NULL, HQ_SCRATCH_SOCK);
	rv = nf.action == HQ_ACT_RESV ? slot_resv(nf.slot, gen) : NULL;
	if (!rv) {
		/* Connected elsewhere: the socket leaves its reservation. */
		if (b) {
			resv_uncount(b);
			bpf_map_delete_elem(&hq_bind, &cookie);
		}
		return 1;
	}
	rid = rv->id;
	s = bpf_map_lookup_elem(&hq_resv_state, &rid);
	if (!s)
		return 1;
	if (b && b->resv == rid && b->counted &&
	    b->incarnation == s->incarnation) {
		b->key = key;
		return 1;
	}
	if (b)
		resv_uncount(b);

	max = rv->max_sessions;
	n = __sync_fetch_and_add(&s->sessions, 1);
	if (max && n >= max) {
		__sync_fetch_and_add(&s->sessions, -1);
		if (why == HQ_REFUSE_CONNECT)
			__sync_fetch_and_add(&s->refused_connects, 1);
		else
			__sync_fetch_and_add(&s->refused_sends, 1);
		if (b)
			bpf_map_delete_elem(&hq_bind, &cookie);
		refusal(&key, id, rid, max, why);
		return 0;
	}
	__sync_fetch_and_add(&s->sessions_total, 1);
	nb.key = key;
	nb.bound_ns = bpf_ktime_get_ns();
	nb.resv = rid;
	nb.counted = 1;
	nb.incarnation = s->incarnation;
	fill_owner(&nb, id);
	if (!id) {
		nb.tgid = bpf_get_current_pid_tgid() >> 32;
		nb.uid = (__u32)bpf_get_current_uid_gid();
	}
	nb.sess = sess_take(rv, s);
	if (rv->sndbuf && why == HQ_REFUSE_CONNECT) {
		int v = rv->sndbuf;

		if (!bpf_setsockopt(ctx, SOL_SOCKET, SO_SNDBUF, &v, sizeof(v)))
			nb.flags |= HQ_BIND_SNDBUF;
	}
	if (bpf_map_update_elem(&hq_bind, &cookie, &nb, BPF_ANY)) {
		/* No room to remember it: do not hold a session we cannot give back. */
		__sync_fetch_and_add(&s->sessions, -1);
		if (nb.sess)
			__sync_fetch_and_and(&s->sess_used,
					     ~(1U << (nb.sess - 1)));
		return 1;
	}
	return 1;
}

/*
 * Sockets open before their reservation: when a policy with reservations
 * is applied, the daemon runs these iterators over the TCP and UDP sockets
 * of its network namespace. A connected socket the policy classifies under
 * a reservation is bound (and holds a session, never refused) as if it
 * had connected now; the daemon sizes its send buffer (HQ_BIND_SNDBUF is
 * not set).
 */

static __noinline void resv_bind_open(struct sock *sk, __u8 proto)
{
	struct sock_common *skc = &sk->__sk_common;
	struct hq_binding nb = {};
	struct hq_flow_key key = {};
	struct hq_flow nf = {};
	struct hq_resv_state *s;
	struct hq_ident *id;
	struct hq_resv *rv;
	__u32 gen, rid;
	__u64 cookie;

	if (BPF_CORE_READ(skc, skc_net.net, net_cookie) != hq_netns_cookie)
		return;
	key.proto = proto;
	key.sport = BPF_CORE_READ(skc, skc_num);
	key.dport = bpf_ntohs(BPF_CORE_READ(skc, skc_dport));
	if (!key.dport)
		return; /* not connected */
	if (BPF_CORE_READ(skc, skc_family) == AF_INET) {
		key.family = HQ_AF_INET;
		key.src[0] = BPF_CORE_READ(skc, skc_rcv_saddr);
		key.dst[0] = BPF_CORE_READ(skc, skc_daddr);
	} else if (BPF_CORE_READ(skc, skc_family) == AF_INET6) {
		key.family = HQ_AF_INET6;
		BPF_CORE_READ_INTO(&key.src, skc, skc_v6_rcv_saddr);
		BPF_CORE_READ_INTO(&key.dst, skc, skc_v6_daddr);
	} else {
		return;
	}
	cookie = bpf_get_socket_cookie(sk);
	if (!cookie || bpf_map_lookup_elem(&hq_bind, &cookie))
		return;
	gen = *(volatile __u32 *)&hq_policy.gen;
	id = bpf_sk_storage_get(&hq_sk_ident, sk, 0, 0);
	evaluate(id, &key, 0, &nf, gen, NULL, HQ_SCRATCH_SOCK);
	if (nf.action != HQ_ACT_RESV)
		return;
	rv = slot_resv(nf.slot, gen);
	if (!rv)
		return;
	rid = rv->id;
	s = bpf_map_lookup_elem(&hq_resv_state, &rid);
	if (!s)
		return;
	nb.key = key;
	nb.bound_ns = bpf_ktime_get_ns();
	nb.resv = rid;
	nb.incarnation = s->incarnation;
	nb.counted = 1;
	fill_owner(&nb, id);
	nb.sess = sess_take(rv, s);
	if (bpf_map_update_elem(&hq_bind, &cookie, &nb, BPF_NOEXIST) == 0) {
		__sync_fetch_and_add(&s->sessions, 1);
		__sync_fetch_and_add(&s->sessions_total, 1);
	} else if (nb.sess) {
		__sync_fetch_and_and(&s->sess_used, ~(1U << (nb.sess - 1)));
	}
}

SEC("iter/tcp")
int hq_iter_bind_tcp(struct bpf_iter__tcp *ctx)
{
	struct sock_common *skc = ctx->sk_common;
	struct tcp_sock *tp;
	__u8 state;

	if (!skc)
		return 0;
	state = BPF_CORE_READ(skc, skc_state);
	/* Only sockets that may still send (see tcp_may_send). */
	if (state != BPF_TCP_ESTABLISHED && state != BPF_TCP_SYN_SENT &&
	    state != BPF_TCP_SYN_RECV && state != BPF_TCP_CLOSE_WAIT)
		return 0;
	tp = bpf_skc_to_tcp_sock(skc);
	if (tp)
		resv_bind_open((struct sock *)tp, IPPROTO_TCP);
	return 0;
}

SEC("iter/udp")
int hq_iter_bind_udp(struct bpf_iter__udp *ctx)
{
	struct udp_sock *us = ctx->udp_sk;

	if (us)
		resv_bind_open((struct sock *)us, IPPROTO_UDP);
	return 0;
}

SEC("cgroup/connect4")
int hq_connect4(struct bpf_sock_addr *ctx)
{
	return resv_session(ctx, HQ_AF_INET, HQ_REFUSE_CONNECT);
}

SEC("cgroup/connect6")
int hq_connect6(struct bpf_sock_addr *ctx)
{
	return resv_session(ctx, HQ_AF_INET6, HQ_REFUSE_CONNECT);
}

SEC("cgroup/sendmsg4")
int hq_sendmsg4(struct bpf_sock_addr *ctx)
{
	return resv_session(ctx, HQ_AF_INET, HQ_REFUSE_SENDMSG);
}

SEC("cgroup/sendmsg6")
int hq_sendmsg6(struct bpf_sock_addr *ctx)
{
	return resv_session(ctx, HQ_AF_INET6, HQ_REFUSE_SENDMSG);
}

/*
 * The flow of a closed socket that held a per-session leaf is evaluated
 * afresh by its next packet: a new socket with the same 5-tuple must not
 * inherit the leaf, which another session may hold by then.
 */
static __noinline void resv_flow_forget(const struct hq_flow_key *k)
{
	struct hq_flow_key4 k4 = {};
	struct hq_flow *f;

	if (k->family == HQ_AF_INET) {
		k4.family = HQ_AF_INET;
		k4.proto = k->proto;
		k4.sport = k->sport;
		k4.dport = k->dport;
		k4.saddr = k->src[0];
		k4.daddr = k->dst[0];
		f = bpf_map_lookup_elem(&hq_flows4, &k4);
	} else {
		f = bpf_map_lookup_elem(&hq_flows6, k);
	}
	if (f) /* a past generation: never the current one */
		f->gen = *(volatile __u32 *)&hq_policy.gen - 1;
}

/*
 * A closed qsocket frees its hq_qsock entry (cookie 0); the counts stay
 * until the daemon hands the id out again.
 */
static __noinline void qsock_release(struct bpf_sock *sk, __u64 cookie)
{
	struct hq_ident *id;
	struct hq_qsock *q;
	__u32 qid;

	if (!sk)
		return;
	id = bpf_sk_storage_get(&hq_sk_ident, sk, 0, 0);
	if (!id || !id->qsock)
		return;
	qid = id->qsock;
	q = bpf_map_lookup_elem(&hq_qsock, &qid);
	if (q && q->cookie == cookie)
		__sync_val_compare_and_swap(&q->cookie, cookie, 0);
}

/* A closed socket unbinds and gives its session back; a closed qsocket
 * frees its entry. */
SEC("cgroup/sock_release")
int hq_sock_release(struct bpf_sock *ctx)
{
	struct hq_binding *b;
	__u64 cookie;

	if (ctx->family != AF_INET && ctx->family != AF_INET6)
		return 1;
	cookie = bpf_get_socket_cookie(ctx);
	qsock_release(ctx, cookie);
	b = bpf_map_lookup_elem(&hq_bind, &cookie);
	if (!b)
		return 1;
	if (b->sess)
		resv_flow_forget(&b->key);
	resv_uncount(b);
	bpf_map_delete_elem(&hq_bind, &cookie);
	return 1;
}

/*
 * The identity of the local socket a received packet is for (NULL: none),
 * found the way the stack will find the socket: TCP established,
 * time-wait or listening sockets, UDP bound or connected ones. p's key is
 * in egress orientation (local = source). A function of its own keeps the
 * lookup's tuple off the stack of the rule evaluation.
 */
static __noinline struct hq_ident *
in_ident(struct __sk_buff *skb, const struct hq_pkt *p, struct hq_stats *st)
{
	struct bpf_sock_tuple t = {};
	struct hq_ident *id;
	struct bpf_sock *sk;
	__u32 sz;

	if (p->key.family == HQ_AF_INET) {
		t.ipv4.saddr = p->k4.daddr; /* key is egress-oriented */
		t.ipv4.daddr = p->k4.saddr;
		t.ipv4.sport = bpf_htons(p->k4.dport);
		t.ipv4.dport = bpf_htons(p->k4.sport);
		sz = sizeof(t.ipv4);
	} else {
		__builtin_memcpy(t.ipv6.saddr, p->key.dst, 16);
		__builtin_memcpy(t.ipv6.daddr, p->key.src, 16);
		t.ipv6.sport = bpf_htons(p->key.dport);
		t.ipv6.dport = bpf_htons(p->key.sport);
		sz = sizeof(t.ipv6);
	}
	if (p->key.proto == IPPROTO_TCP)
		sk = bpf_sk_lookup_tcp(skb, &t, sz, BPF_F_CURRENT_NETNS, 0);
	else if (p->key.proto == IPPROTO_UDP)
		sk = bpf_sk_lookup_udp(skb, &t, sz, BPF_F_CURRENT_NETNS, 0);
	else
		return NULL;
	if (!sk) {
		if (st)
			st->rx_no_socket++;
		return NULL;
	}
	/* The storage outlives the reference: sockets are RCU-freed. */
	id = sk_ident(sk, st);
	bpf_sk_release(sk);
	return id;
}

/*
 * Per-CPU room for the flow a slow-path evaluation builds (hq_flow_slow): a
 * struct hq_flow is too large for the stack beside the rule evaluation's
 * frames. TC programs run with bottom halves off, so uses on one CPU never
 * overlap.
 */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct hq_flow);
} hq_nf SEC(".maps");

/* A result that matches no rule and passes (pack_result layout). */
#define HQ_RES_NONE                                                            \
	((__u64)HQ_SLOT_NONE << 32 | (__u64)HQ_ACT_PASS << 48 |                \
	 (__u64)(__u8)-1 << 56)

/*
 * The flow of a qsocket (id->qsock) is classified by the qsocket
 * (HQ_ACT_QSOCK, the id in classid) unless the qsocket is an ordinary
 * user's and a rule matched: the admin's rules come first. The entry must
 * be this socket's: on egress its cookie is the packet's socket cookie; on
 * ingress (no socket on the skb) the one the identity was tagged with.
 */
static __noinline void qsock_claim(struct __sk_buff *skb,
				   const struct hq_ident *id, struct hq_flow *f,
				   int rx)
{
	struct hq_qsock *q;
	__u64 cookie;
	__u32 qid;

	if (!skb || !id || !f)
		return;
	qid = id->qsock;
	q = bpf_map_lookup_elem(&hq_qsock, &qid);
	if (!q)
		return;
	cookie = rx ? id->qcookie : bpf_get_socket_cookie(skb);
	if (!cookie || q->cookie != cookie)
		return;
	if (q->user && f->slot != HQ_SLOT_NONE)
		return;
	f->action = HQ_ACT_QSOCK;
	f->slot = HQ_SLOT_NONE;
	f->classid = qid;
	f->dscp = -1;
}

/*
 * The band of a message with slack ns before its deadline: < 1 ms → 0,
 * then one band per doubling (1–2 ms → 1 … 32–64 ms → 6), ≥ 64 ms → 7.
 */
static __always_inline __u32 qsched_band(__u64 slack)
{
	__u64 ms = slack / 1000000;
	__u32 b = 0;

	if (ms >= 64)
		return HQ_QSCHED_BANDS - 1;
	while (ms && b < HQ_QSCHED_BANDS - 1) {
		ms >>= 1;
		b++;
	}
	return b;
}

#define HQ_ROOM_NONE 0x7fffffffffffffffLL

/*
 * What a message of tx ns in band b would meet: its predicted departure
 * (*fin: when bands 0..b's backlog has left at the class's rate, then the
 * message) and the least room of the messages it would overtake (bands
 * after b that still hold some): more than that and one of them, promised
 * its deadline, would be late.
 */
static __always_inline void qsched_view(struct hq_qsched *qs, __u32 b,
					__u64 now, __u64 tx, __u64 *fin,
					__s64 *room)
{
	__s64 r = HQ_ROOM_NONE;
	__u64 v;
	__u32 j;

	b &= HQ_QSCHED_BANDS - 1;
	bpf_spin_lock(&qs->lock);
	v = qs->vtime[b];
	for (j = 0; j < HQ_QSCHED_BANDS; j++)
		if (j > b && qs->lastfin[j] > now && qs->room[j] < r)
			r = qs->room[j];
	bpf_spin_unlock(&qs->lock);
	*fin = (v > now ? v : now) + tx;
	*room = r;
}

/*
 * A message of tx ns sent in band b, predicted to leave at fin with room
 * (HQ_ROOM_NONE: no deadline promised): it delays bands b..7 and uses up
 * room of the messages of the bands after b.
 */
static __always_inline void qsched_admit(struct hq_qsched *qs, __u32 b,
					 __u64 now, __u64 tx, __u64 fin,
					 __s64 room)
{
	__u32 j;
	int held;

	bpf_spin_lock(&qs->lock);
	for (j = 0; j < HQ_QSCHED_BANDS; j++) {
		if (j < b)
			continue;
		held = qs->lastfin[j] > now;
		qs->vtime[j] = (qs->vtime[j] > now ? qs->vtime[j] : now) + tx;
		if (j > b) {
			if (held)
				qs->room[j] -= tx;
			continue;
		}
		if (!held || room < qs->room[j])
			qs->room[j] = room;
		qs->lastfin[j] = fin;
	}
	bpf_spin_unlock(&qs->lock);
}

/*
 * DWCS's loss window of q: the message (frame) at position seq leaves the
 * window of the last old; lost says whether it was lost. Returns the
 * losses among the old-1 before it (what the window holds without it).
 */
static __always_inline __u32 dwcs_window(struct hq_qsock *q, int push, int lost)
{
	__u32 old = q->old, pos, w;
	__u64 bit;

	if (!old || old > HQ_DWCS_WINDOW)
		return 0;
	pos = q->seq % old;
	w = pos / 64;
	/* clang knows w < 16 here; the verifier must see the mask. */
	asm volatile("" : "+r"(w));
	w &= HQ_DWCS_WINDOW / 64 - 1;
	bit = 1ULL << (pos % 64);
	if (!push)
		return q->lost - ((q->win[w] & bit) ? 1 : 0);
	if (q->win[w] & bit)
		q->lost--;
	if (lost) {
		q->win[w] |= bit;
		q->lost++;
	} else {
		q->win[w] &= ~bit;
	}
	q->seq++;
	return q->lost;
}

/*
 * The host-wide scheduler's decision for a datagram of a scheduled qsocket
 * (sched other than fifo): its attributes come from skb->tstamp
 * (enum hq_txtime, cleared here). The predicted departure is the link's
 * virtual finish time at the qsched class's admitted rate: max(now, V) +
 * len/R. EDF lossy drops a droppable message predicted after its deadline
 * (less drop priority × len/R: higher drop priorities go first); DWCS
 * does so while its window has a loss left (oln of any old consecutive),
 * else sends it late; EDF lossless sends all. A frame shares the fate of
 * its first message; a non-droppable message is never dropped. Returns
 * 1 to drop; *classid gets the band's leaf (unchanged without a qsched
 * subtree on the link).
 */
static __noinline int qsock_sched(struct __sk_buff *skb, struct hq_qsock *q,
				  __u64 len, __u32 *classid)
{
	struct hq_qsched *qs;
	__u64 ts, flags, dl = 0, now, fin, tx = 0, guard, slack;
	__s64 room;
	__u32 ifindex, band, dp, sched;
	int has_dl, nodrop, miss, drop = 0, fresh = 1, in_frame, window = 0;

	if (!skb || !q || !classid)
		return 0;
	sched = q->sched;
	ts = skb->tstamp;
	flags = 0;
	if (ts & HQ_TXT_MARK) {
		flags = ts & HQ_TXT_FLAGS;
		skb->tstamp = 0;
	}
	now = bpf_ktime_get_ns();
	has_dl = flags & HQ_TXT_DEADLINE;
	if (has_dl)
		dl = ts & ~(__u64)HQ_TXT_FLAGS;
	nodrop = flags & HQ_TXT_NODROP;
	dp = (flags & HQ_TXT_PRIO_MASK) >> HQ_TXT_PRIO_SHIFT;

	ifindex = skb->ifindex;
	qs = bpf_map_lookup_elem(&hq_qsched, &ifindex);
	if (qs)
		tx = (len * qs->ns_q16) >> 16;

	if (__sync_val_compare_and_swap(&q->busy, 0, 1) != 0) {
		__sync_fetch_and_add(&q->lock_misses, 1);
		if (qs) {
			*classid = qs->classid0 + HQ_QSCHED_BANDS - 1;
			qsched_view(qs, HQ_QSCHED_BANDS - 1, now, tx, &fin,
				    &room);
			qsched_admit(qs, HQ_QSCHED_BANDS - 1, now, tx, fin,
				     HQ_ROOM_NONE);
		}
		return 0;
	}
	in_frame = q->frame & HQ_QF_IN;
	if (sched == HQ_SCHED_DWCS && !has_dl &&
	    !(in_frame && !(flags & HQ_TXT_FRAME_START))) {
		/* d_k = max(d_{k-1}, arrival) + ipg */
		dl = (q->dl_prev > now ? q->dl_prev : now) + q->ipg_ns;
		q->dl_prev = dl;
		has_dl = 1;
	} else if (sched == HQ_SCHED_DWCS && !has_dl) {
		dl = q->dl_prev; /* the rest of a frame: the frame's deadline */
		has_dl = dl != 0;
	}
	band = HQ_QSCHED_BANDS - 1;
	if (has_dl) {
		slack = dl > now ? dl - now : 0;
		band = qsched_band(slack);
		/* DWCS: a stream with no loss left comes first among equals. */
		if (sched == HQ_SCHED_DWCS && band &&
		    dwcs_window(q, 0, 0) >= q->oln)
			band--;
	}
	fin = now;
	room = HQ_ROOM_NONE;
	if (qs)
		qsched_view(qs, band, now, tx, &fin, &room);
	/*
	 * HTB may send what other classes hold on their own tokens first:
	 * the link's margin (the daemon's, from the HTB tree). A droppable
	 * message of drop priority p also needs p of its own times.
	 */
	guard = qs ? qs->margin : 0;
	if (!nodrop)
		guard += dp * tx;
	/* It would be late, or make a message promised its deadline late. */
	miss = has_dl && (fin + guard > dl || room < (__s64)tx);

	if (in_frame && !(flags & HQ_TXT_FRAME_START)) {
		/* The rest of a frame: its first message decided. */
		fresh = 0;
		drop = (q->frame & HQ_QF_DROP) && !nodrop;
		if (flags & HQ_TXT_FRAME_END)
			q->frame = 0;
	} else if (sched == HQ_SCHED_EDF_LOSSY) {
		drop = miss && !nodrop;
	} else if (sched == HQ_SCHED_DWCS) {
		window = 1;
		drop = miss && !nodrop && dwcs_window(q, 0, 0) < q->oln;
	}
	if (fresh && (flags & HQ_TXT_FRAME_START) &&
	    !(flags & HQ_TXT_FRAME_END))
		q->frame = HQ_QF_IN | (drop ? HQ_QF_DROP : 0);
	else if (fresh)
		q->frame = 0;
	if (window)
		dwcs_window(q, 1, drop);
	if (drop) {
		__sync_fetch_and_add(
			fresh ? &q->late_dropped : &q->frame_dropped, 1);
		__sync_fetch_and_add(&q->dropped_bytes, len);
	} else if (miss) {
		__sync_fetch_and_add(&q->late, 1);
		if (sched == HQ_SCHED_DWCS)
			__sync_fetch_and_add(&q->violations, 1);
		/*
		 * Sent though it will miss (lossless, non-droppable, DWCS with
		 * no loss left): it goes last and is promised nothing, so that
		 * no message that can still be on time is made late.
		 */
		if (band != HQ_QSCHED_BANDS - 1 && qs)
			qsched_view(qs, HQ_QSCHED_BANDS - 1, now, tx, &fin,
				    &room);
		band = HQ_QSCHED_BANDS - 1;
		has_dl = 0;
	}
	__sync_lock_test_and_set(&q->busy, 0);
	if (drop)
		return 1;
	if (qs) {
		*classid = qs->classid0 + band;
		qsched_admit(qs, band, now, tx, fin,
			     has_dl ? (__s64)(dl - fin) : HQ_ROOM_NONE);
	}
	return 0;
}

/*
 * The result of a packet of a qsocket's flow (action HQ_ACT_QSOCK, the id
 * in the classid): the qsocket's class and DSCP as they are now (qchange
 * takes effect at the next packet), counted. A flow whose entry is no
 * longer its socket's (the socket closed, the 5-tuple reused) is evaluated
 * again at its next packet (f, when known) and passes unchanged now.
 */
/* A global function (verified once; see hq_flow_slow). */
__noinline __u64 hq_qsock_result(struct __sk_buff *skb, __u64 res,
				 struct hq_flow *f, const struct hq_pkt *p)
{
	struct hq_qsock *q;
	__u64 start, bytes, dt, now, len;
	__u32 qid = (__u32)res, gen, classid;

	if (!skb || !p)
		return HQ_RES_NONE;
	now = p->now;
	len = p->len;
	gen = p->gen;
	q = bpf_map_lookup_elem(&hq_qsock, &qid);
	if (!q || !q->cookie || q->cookie != bpf_get_socket_cookie(skb)) {
		if (f)
			f->gen = gen - 1;
		return HQ_RES_NONE;
	}
	classid = q->classid;
	if (q->sched > HQ_SCHED_FIFO && p->key.proto != IPPROTO_TCP &&
	    qsock_sched(skb, q, len, &classid))
		return (__u64)HQ_SLOT_NONE << 32 | (__u64)HQ_ACT_DROP << 48 |
		       (__u64)(__u8)-1 << 56;
	__sync_fetch_and_add(&q->packets, 1);
	__sync_fetch_and_add(&q->bytes, len);
	if (!q->first_ns)
		q->first_ns = now;
	q->last_ns = now;
	start = *(volatile __u64 *)&q->win_ns;
	if (now - start >= HQ_QSOCK_WIN_NS &&
	    __sync_val_compare_and_swap(&q->win_ns, start, now) == start) {
		bytes = __sync_lock_test_and_set(&q->win_bytes, 0);
		dt = now - start;
		/* The first window, or one after a pause of 2 s: no rate. */
		q->rate = start && dt < 2 * HQ_QSOCK_WIN_NS
				  ? bytes * 1000000000ULL / dt
				  : 0;
	}
	__sync_fetch_and_add(&q->win_bytes, len);
	return (__u64)classid | (__u64)HQ_SLOT_NONE << 32 |
	       (__u64)HQ_ACT_PASS << 48 | (__u64)(__u8)q->dscp << 56;
}

/*
 * Everything but the common case: a new flow (f == NULL), a flow evaluated
 * under an older policy, or a flow without a valid counter slot. id is
 * the identity of the flow's local socket (NULL: none). Counts the packet and returns the
 * flow's classification (pack_result); with rx (TC ingress) it neither
 * polices nor counts, which the caller does.
 *
 * A global function: the verifier checks it once, on its own, not again
 * for every state its callers reach it in (6.1's verifier ran out of its
 * 1M instructions on the classifiers when it was static). Its pointers
 * are plain memory that may be NULL; it reads *p and never writes it.
 */
__noinline __u64 hq_flow_slow(struct __sk_buff *skb, struct hq_ident *id,
			      struct hq_pkt *p, struct hq_flow *f, int rx)
{
	struct hq_flow *nf;
	__u32 zero = 0;
	struct hq_flow_key key;
	struct hq_flow_key4 k4;
	struct hq_stats *st = stats();
	struct hq_fctr *c;
	__u32 idx;
	__u64 res;
	long err;
	int fresh = 0; /* f is nf, just inserted with its counter slot */

	if (!p)
		return HQ_RES_NONE;
	/* The flow key in full form, for the rules and hq_fkey. */
	if (p->key.family == HQ_AF_INET) {
		__builtin_memset(&key, 0, sizeof(key));
		key.family = HQ_AF_INET;
		key.proto = p->k4.proto;
		key.sport = p->k4.sport;
		key.dport = p->k4.dport;
		key.src[0] = p->k4.saddr;
		key.dst[0] = p->k4.daddr;
	} else {
		key = p->key;
	}

	clock_sync();
	if (!f || f->gen != p->gen) {
		/* The new result, off the stack (see hq_nf). Fails open. */
		nf = bpf_map_lookup_elem(&hq_nf, &zero);
		if (!nf)
			return HQ_RES_NONE;
		__builtin_memset(nf, 0, sizeof(*nf));
		evaluate(id, &key, p->dscp_in, nf, p->gen, st, HQ_SCRATCH_TC);
		if (id && id->qsock)
			qsock_claim(skb, id, nf, rx);
		if (nf->action == HQ_ACT_RESV && !rx) {
			resv_bind_skb(skb, &key, nf, id, p->gen);
			resv_flow_class(skb, nf, p->gen);
		}
		if (!f) {
			nf->first_ns = p->now;
			nf->base_last_ns = p->now;
			/*
			 * Its counter slot first, so that the entry goes into
			 * the table complete and this packet is counted
			 * without looking the entry up again. A slot whose
			 * entry never made it in has no owner (fctr_owner):
			 * the next allocation takes it.
			 */
			hq_fctr_alloc(p->now, &key, nf);
			/*
			 * The table's key on the stack: p is plain memory
			 * here, which 6.1 does not take for a map key. Built
			 * after the evaluation, whose frame it may share.
			 */
			k4 = p->k4;
			if (key.family == HQ_AF_INET)
				err = bpf_map_update_elem(&hq_flows4, &k4, nf,
							  BPF_NOEXIST);
			else
				err = bpf_map_update_elem(&hq_flows6, &key, nf,
							  BPF_NOEXIST);
			if (!err) {
				/* Counted below through nf, the entry's copy. */
				f = nf;
				fresh = 1;
			} else if (err != -17 /* EEXIST: raced */) {
				if (st)
					st->flow_insert_fail++;
				if (rx)
					return pack_result(nf);
				return police_result(pack_result(nf), p->len,
						     p->now);
			} else {
				if (key.family == HQ_AF_INET)
					f = bpf_map_lookup_elem(&hq_flows4,
								&k4);
				else
					f = bpf_map_lookup_elem(&hq_flows6,
								&key);
				if (!f) {
					if (rx)
						return pack_result(nf);
					return police_result(pack_result(nf),
							     p->len, p->now);
				}
			}
		}
		if (f->gen != p->gen) {
			f->classid = nf->classid;
			f->slot = nf->slot;
			f->action = nf->action;
			f->dscp = nf->dscp;
			f->tgid = nf->tgid;
			f->uid = nf->uid;
			__builtin_memcpy(f->comm, nf->comm, HQ_COMM_LEN);
			f->gen = p->gen;
		}
	}

	if (rx) {
		idx = f->cslot;
		c = bpf_map_lookup_elem(&hq_fctr, &idx);
		if (!c || !f->tag || c->tag != f->tag)
			c = fresh ? NULL : fctr_alloc(p->now, &key, f);
		/*
		 * A received packet may be the first of a flow after a policy
		 * change: its re-evaluation is the flow's, and egress then
		 * takes the fast path, which does not write the slot's rule.
		 */
		if (c)
			c->rule = f->slot;
		return pack_result(f);
	}
	res = police_result(pack_result(f), p->len, p->now);
	idx = f->cslot;
	c = bpf_map_lookup_elem(&hq_fctr, &idx);
	if (!c || !f->tag || c->tag != f->tag)
		c = fresh ? NULL : fctr_alloc(p->now, &key, f);
	if (c) {
		__sync_fetch_and_add(&c->packets, 1);
		__sync_fetch_and_add(&c->bytes, p->len);
		if ((__u8)(res >> 48) == HQ_ACT_DROP)
			__sync_fetch_and_add(&c->drops, 1);
		c->last_ns = p->now;
		c->rule = f->slot;
	}
	return res;
}

/* ---------------------------------------------------------------------- */
/* Download limits: TCP receive window (egress), UDP policer (ingress)     */
/* ---------------------------------------------------------------------- */

/*
 * The flows a download limit (a rule's, or a level of a link's ingress
 * budget) is shared by: those active in the last epoch (prev) or this one
 * (cur), the more, and at least one.
 */
static __always_inline __u64 in_active(__u64 prev, __u64 cur)
{
	__u64 n = prev > cur ? prev : cur;

	return n ? n : 1;
}

/*
 * One flow's share of rule slot's download limit, bytes/s in Q10 (with the
 * window gain): rate × gain / active flows; 0 = no limit.
 */
static __always_inline __u64 in_share(__u32 slot)
{
	struct hq_in *in;
	__u64 rate, n, gain;

	if (slot >= HQ_MAX_RULES)
		return 0;
	in = bpf_map_lookup_elem(&hq_in, &slot);
	if (!in)
		return 0;
	rate = *(volatile __u64 *)&in->rate;
	if (!rate)
		return 0;
	n = in_active(in->flows_prev, in->flows);
	gain = in->gain ? in->gain : HQ_IN_GAIN_ONE;
	return rate * gain / n;
}

/* The link's ingress budget of the packet's device, NULL for none. */
static __always_inline struct hq_link_in *link_in(struct __sk_buff *skb)
{
	struct hq_link_in *li;
	__u32 key;

	if (!*(volatile __u32 *)&hq_policy.in_links)
		return NULL;
	key = skb->ifindex;
	li = bpf_map_lookup_elem(&hq_link_in, &key);
	if (!li || !*(volatile __u64 *)&li->rate)
		return NULL;
	return li;
}

/*
 * The level of a link's ingress budget that rule slot's traffic (slot
 * HQ_SLOT_NONE: traffic no rule matches) belongs to: its class priority.
 */
static __always_inline __u32 in_level(struct hq_link_in *li, __u32 slot)
{
	struct hq_in *in;
	__u32 l = li->prio_none;

	if (slot < HQ_MAX_RULES) {
		in = bpf_map_lookup_elem(&hq_in, &slot);
		if (in)
			l = in->prio;
	}
	return l < HQ_IN_LEVELS ? l : HQ_IN_LEVELS - 1;
}

/*
 * One TCP flow's share of its level of the link's ingress budget, bytes/s
 * in Q10 (with the level's window gain); 0 = the link has none.
 */
static __always_inline __u64 link_share(struct __sk_buff *skb, __u32 slot)
{
	struct hq_link_in *li = link_in(skb);
	struct hq_in_level *v;
	__u64 avail, n, gain;

	if (!li)
		return 0;
	v = &li->lv[in_level(li, slot)];
	avail = *(volatile __u64 *)&v->avail;
	if (!avail)
		avail = li->rate;
	n = in_active(v->flows_prev, v->flows);
	gain = v->gain ? v->gain : HQ_IN_GAIN_ONE;
	return avail * gain / n;
}

/*
 * Ends a link budget's epoch when it is over (one CPU wins the swap):
 * measures what each level received, corrects its window gain as struct
 * hq_in's estimator does, and gives each level what the levels above it
 * left: avail = rate − Σ used of higher levels (at least rate /
 * HQ_IN_LEVEL_FLOOR, so a lower class is slowed, never cut off).
 */
static __noinline void link_roll(struct hq_link_in *li, __u64 now)
{
	__u64 start, dt, rate, acc = 0, bytes, used, avail, prev, g;
	struct hq_in_level *v;
	__u32 l;

	start = *(volatile __u64 *)&li->epoch_ns;
	if (now - start < HQ_IN_EPOCH_NS ||
	    __sync_val_compare_and_swap(&li->epoch_ns, start, now) != start)
		return;
	dt = (now - start) / 1000; /* us */
	rate = li->rate;
	li->epoch++;
	for (l = 0; l < HQ_IN_LEVELS; l++) {
		v = &li->lv[l];
		bytes = __sync_lock_test_and_set(&v->epoch_bytes, 0);
		v->flows_prev = __sync_lock_test_and_set(&v->flows, 0);
		used = 0;
		/* A long gap (or the first epoch) measures nothing. */
		if (start && dt && dt < 2 * HQ_IN_EPOCH_NS / 1000)
			used = bytes * 1000000 / dt;
		prev = v->avail;
		g = v->gain ? v->gain : HQ_IN_GAIN_ONE;
		/*
		 * Windows sized on the path's least round trip give the
		 * share without a queue; the gain makes up for delayed
		 * ACKs, but little more (a larger one would build the queue
		 * the budget is for).
		 */
		if (prev && used * 2 > prev) {
			g = g * (prev + used) / (2 * used);
			if (g < HQ_IN_GAIN_MIN)
				g = HQ_IN_GAIN_MIN;
			if (g > HQ_IN_LINK_GAIN_MAX)
				g = HQ_IN_LINK_GAIN_MAX;
		}
		avail = rate > acc ? rate - acc : 0;
		if (avail < rate / HQ_IN_LEVEL_FLOOR)
			avail = rate / HQ_IN_LEVEL_FLOOR;
		if (!avail)
			avail = 1;
		v->gain = g;
		v->used = used;
		v->avail = avail;
		v->ns_q16 = (1000000000ULL << HQ_POLICE_SHIFT) / avail;
		acc += used;
	}
}

/*
 * Charges a received packet of rule slot's flow f (NULL: unknown) to its
 * level of the link's ingress budget. UDP beyond the level's budget is
 * dropped (returns 1); TCP is only counted (its window does the rest). A
 * global function: the verifier checks it once.
 */
__noinline int hq_link_in_charge(struct __sk_buff *skb, __u32 slot, __u32 proto,
				 struct hq_flow *f)
{
	struct hq_link_in *li;
	struct hq_in_level *v;
	__u64 now, len, tau, q;

	if (!skb)
		return 0;
	li = link_in(skb);
	if (!li)
		return 0;
	now = coarse_ns();
	link_roll(li, now);
	v = &li->lv[in_level(li, slot)];
	len = skb->len;
	q = *(volatile __u64 *)&v->ns_q16;
	if (proto == IPPROTO_UDP && q) {
		tau = (HQ_LINK_IN_MIN_BURST * q) >> HQ_POLICE_SHIFT;
		if (tau < HQ_IN_EPOCH_NS / 10)
			tau = HQ_IN_EPOCH_NS / 10;
		if (gcra(&v->tat, (len * q) >> HQ_POLICE_SHIFT, tau, now) ==
		    HQ_ACT_DROP)
			return 1;
	}
	__sync_fetch_and_add(&v->epoch_bytes, len);
	if (f && f->lin_epoch != li->epoch + 1) {
		f->lin_epoch = li->epoch + 1;
		__sync_fetch_and_add(&v->flows, 1);
	}
	return 0;
}

/* hq_rwnd_limit's answer: the window was lowered; the segment is a pure
 * ACK to pace (send it to the slot's ACK leaf, in_ack_classid). */
#define HQ_RWND_CLAMPED 1
#define HQ_RWND_PACE 2

/* The HTB class of rule slot's ACK leaf; 0 = none. */
static __always_inline __u32 in_ack_classid(__u32 slot)
{
	struct hq_in *in;

	if (slot >= HQ_MAX_RULES)
		return 0;
	in = bpf_map_lookup_elem(&hq_in, &slot);
	if (!in || !*(volatile __u64 *)&in->rate)
		return 0;
	return *(volatile __u32 *)&in->ack_classid;
}

/*
 * The window of a flow of rule slot whose ACKs are paced, 0 if they are
 * not: its share of the limit for one round trip srtt (us, without the
 * window gain) is less than HQ_IN_PACE_SEGS full segments of mss bytes,
 * below which the window does not go, and the rule has an ACK leaf. The
 * leaf's rate gives the sender HQ_IN_PACE_SEGS segments per ACK; the
 * window gain (at least 1 here) makes up for ACKs that acknowledge less
 * (window updates, ACKs of single segments): the window is that many
 * segments times the gain, a whole number of segments (a sender sends no
 * partial ones), rounded up at random in proportion to the fraction so
 * that it is right on average.
 */
static __always_inline __u64 in_pace_win(__u32 slot, __u64 srtt, __u64 mss)
{
	struct hq_in *in;
	__u64 rate, n, segs, k;
	__u32 g;

	if (slot >= HQ_MAX_RULES)
		return 0;
	in = bpf_map_lookup_elem(&hq_in, &slot);
	if (!in || !*(volatile __u32 *)&in->ack_classid)
		return 0;
	rate = *(volatile __u64 *)&in->rate;
	if (!rate)
		return 0;
	n = in_active(in->flows_prev, in->flows);
	if (rate / n * srtt / 1000000 >= HQ_IN_PACE_SEGS * mss)
		return 0;
	g = in->gain;
	if (g < HQ_IN_GAIN_ONE)
		g = HQ_IN_GAIN_ONE;
	segs = HQ_IN_PACE_SEGS * (__u64)g; /* Q10 */
	k = segs >> 10;
	if ((bpf_get_prandom_u32() & 1023) < (segs & 1023))
		k++;
	return k * mss;
}

/*
 * Lowers the receive window an outgoing TCP segment of a flow of rule slot
 * `slot` advertises to the flow's share of the slot's download limit
 * (struct hq_in) or of its level of the link's ingress budget (struct
 * hq_link_in), the smaller, for one round trip. The window is scaled by the socket's
 * receive window scale; SYNs (unscaled) are left alone. The TCP checksum
 * is fixed incrementally. Anything missing (socket, limit) leaves the
 * segment as it is. off is the TCP header's offset. Returns
 * HQ_RWND_CLAMPED if it lowered the window, and HQ_RWND_PACE for a pure
 * ACK of a flow whose ACKs are paced (in_pace). A global function: the
 * verifier checks it once, not for every path that reaches it.
 */
__noinline int hq_rwnd_limit(struct __sk_buff *skb, __u32 off, __u32 slot)
{
	struct hq_stats *st;
	struct bpf_sock *sk;
	struct tcp_sock *tp;
	struct tcphdr th;
	__u64 per, lper, srtt, mrtt, rrtt, crtt, win, lwin, minwin, pwin;
	__u32 ws;
	__u16 old, neww;
	int pace;

	if (!skb)
		return 0;
	/* Each flow's share, bytes/s in Q10: of the rule's limit, the link's. */
	per = in_share(slot);
	lper = link_share(skb, slot);
	if (!per && !lper)
		return 0;
	sk = skb->sk;
	if (!sk)
		return 0;
	tp = bpf_skc_to_tcp_sock(sk);
	if (!tp)
		return 0;
	srtt = tp->srtt_us >> 3;
	if (!srtt)
		return 0;
	/*
	 * The path's own round trip: the least the socket has seen. A socket
	 * that only receives measured it at its handshake, perhaps behind a
	 * queue; its receive-side estimate (timestamps) follows the path.
	 */
	mrtt = tp->rtt_min.s[0].v;
	if (!mrtt || mrtt > srtt)
		mrtt = srtt;
	rrtt = tp->rcv_rtt_est.rtt_us >> 3;
	if (rrtt && rrtt < mrtt)
		mrtt = rrtt;
	/*
	 * The round trip the flow sees now. A socket that only receives
	 * never updates srtt after its handshake, so when a queue builds at
	 * the bottleneck (another download filling it) only the receive-side
	 * estimate follows; it counts in timestamp ticks (1 ms), so it is
	 * taken only when it exceeds srtt by more than one.
	 */
	crtt = srtt;
	if (rrtt > srtt + HQ_TS_TICK_US)
		crtt = rrtt;
	ws = BPF_CORE_READ_BITFIELD(tp, rx_opt.rcv_wscale);
	minwin = tp->advmss;
	if (minwin < 536)
		minwin = 536;

	/*
	 * A share's bytes/s for one round trip; no overflow below 1 Tbit/s.
	 * A rule's limit takes the current round trip (its gain corrects
	 * the rest); a link's budget the path's least, so that the window
	 * never pays for a queue at the bottleneck and the queue drains.
	 */
	win = 0;
	if (per)
		win = per / 1024 * crtt / 1000000;
	if (lper) {
		lwin = lper / 1024 * mrtt / 1000000;
		if (!per || lwin < win)
			win = lwin;
	}
	if (win < HQ_IN_PACE_SEGS * minwin)
		win = HQ_IN_PACE_SEGS * minwin;
	win >>= ws;
	if (win > 0xffff)
		return 0;

	if (off > 512 || bpf_skb_load_bytes(skb, off, &th, sizeof(th)))
		return 0;
	if (th.syn)
		return 0;
	/*
	 * A flow that the window cannot hold is paced: its pure ACKs (no
	 * payload, no FIN or RST) go to the rule's ACK leaf, and every
	 * segment carries the pacing window.
	 */
	pace = 0;
	pwin = per ? in_pace_win(slot, srtt, minwin) : 0;
	if (pwin) {
		win = pwin >> ws;
		if (th.ack && !th.fin && !th.rst &&
		    skb->len <= off + (__u32)th.doff * 4)
			pace = HQ_RWND_PACE;
	}
	old = th.window;
	if (bpf_ntohs(old) <= win)
		return pace;
	neww = bpf_htons((__u16)win);
	if (bpf_skb_store_bytes(skb, off + offsetof(struct tcphdr, window),
				&neww, 2, 0))
		return pace;
	bpf_l4_csum_replace(skb, off + offsetof(struct tcphdr, check), old,
			    neww, 2);
	st = stats();
	if (st)
		st->rwnd_clamps++;
	return pace | HQ_RWND_CLAMPED;
}

/*
 * Accounts a packet of payload bytes to the download limit of a slot:
 * the flow (if known) is counted once per epoch, and at the end of an
 * epoch one CPU rolls it and adjusts the window gain (struct hq_in).
 */
static __noinline void in_account(struct hq_in *in, struct hq_flow *f,
				  __u64 payload, __u64 now)
{
	__u64 start, bytes, dt, got, rate, g;
	__u32 flows;

	start = *(volatile __u64 *)&in->epoch_ns;
	if (now - start >= HQ_IN_EPOCH_NS &&
	    __sync_val_compare_and_swap(&in->epoch_ns, start, now) == start) {
		bytes = __sync_lock_test_and_set(&in->epoch_bytes, 0);
		flows = __sync_lock_test_and_set(&in->flows, 0);
		in->flows_prev = flows;
		in->epoch++;
		dt = now - start;
		rate = in->rate;
		g = in->gain ? in->gain : HQ_IN_GAIN_ONE;
		/* A long gap (or the first epoch) measures nothing. */
		if (start && dt < 2 * HQ_IN_EPOCH_NS && rate && bytes) {
			got = bytes * 1000000000ULL / dt;
			/*
			 * Half of the error, linear in got: the gain's fixed
			 * point is the mean rate at the limit however noisy
			 * an epoch's count (a paced flow at 1 Mbit/s gets a
			 * few ACKs an epoch); (rate + got) / (2 got) would
			 * settle the harmonic mean there, above the limit.
			 */
			if (got * 2 > rate) {
				got = got < 2 * rate ? got : 2 * rate;
				g = g * (3 * rate - got) / (2 * rate);
				if (g < HQ_IN_GAIN_MIN)
					g = HQ_IN_GAIN_MIN;
				if (g > HQ_IN_GAIN_MAX)
					g = HQ_IN_GAIN_MAX;
			}
		}
		in->gain = g;
	}
	__sync_fetch_and_add(&in->epoch_bytes, payload);
	if (f && f->in_epoch != in->epoch + 1) {
		f->in_epoch = in->epoch + 1;
		__sync_fetch_and_add(&in->flows, 1);
	}
}

/* The UDP download policer of a slot (the GCRA of police()): HQ_ACT_PASS
 * or HQ_ACT_DROP. */
static __noinline int in_police(struct hq_in *in, __u64 payload, __u64 coarse)
{
	if (!in->ns_q16)
		return HQ_ACT_PASS;
	return gcra(&in->tat, (payload * in->ns_q16) >> HQ_POLICE_SHIFT,
		    in->tau, coarse);
}

static __always_inline int egress(struct __sk_buff *skb, __u32 off)
{
	struct hq_pkt p; /* parse writes every byte the lookup reads */
	struct hq_flow *f;
	struct hq_fctr *c;
	struct hq_stats *st;
	struct hq_counters *rc;
	__u32 slot, classid, idx;
	__u64 res;
	int action, dscp, ret;

	st = stats();
	if (st)
		st->packets++;

	ret = parse(skb, off, &p);
	if (ret) {
		if (ret < 0 && st)
			st->parse_errors++;
		return HQ_TC_NEXT;
	}

	/*
	 * Bytes counted = skb->len: the frame as the qdisc sees it, i.e. the
	 * L2 header plus the IP packet (for GSO packets, all segments).
	 */
	p.len = skb->len;
	p.gen = *(volatile __u32 *)&hq_policy.gen;
	p.now = coarse_ns();

	/*
	 * Two call sites: the verifier inlines a lookup only where the map is
	 * known. The empty asm keeps clang from merging them into one call
	 * on a map pointer chosen at run time.
	 */
	if (p.key.family == HQ_AF_INET) {
		f = bpf_map_lookup_elem(&hq_flows4, &p.k4);
	} else {
		f = bpf_map_lookup_elem(&hq_flows6, &p.key);
		asm volatile("" : "+r"(f));
	}
	if (f && f->gen == p.gen) {
		idx = f->cslot;
		c = bpf_map_lookup_elem(&hq_fctr, &idx);
		if (c && c->tag == f->tag) {
			/* The common case: one flow hit, two atomic adds. */
			__sync_fetch_and_add(&c->packets, 1);
			__sync_fetch_and_add(&c->bytes, p.len);
			c->last_ns = p.now;
			res = police_result(pack_result(f), p.len, p.now);
			if ((__u8)(res >> 48) == HQ_ACT_DROP)
				__sync_fetch_and_add(&c->drops, 1);
			goto classified;
		}
	}
	res = hq_flow_slow(skb, skb_ident(skb, stats()), &p, f, 0);
	f = NULL;

classified:
	if ((__u8)(res >> 48) == HQ_ACT_QSOCK)
		res = hq_qsock_result(skb, res, f, &p);
	if ((__u8)(res >> 48) == HQ_ACT_RESV)
		res = hq_resv_result(skb, res, p.gen, off);
	classid = (__u32)res;
	slot = (__u16)(res >> 32);
	action = (__u8)(res >> 48);
	dscp = (__s8)(res >> 56);

	if (slot < HQ_MAX_RULES) {
		if (st)
			st->classified++;
		rc = bpf_map_lookup_elem(&hq_rule_ctr, &slot);
		if (rc) {
			rc->packets++;
			rc->bytes += p.len;
			if (action == HQ_ACT_DROP)
				rc->drops++;
		}
	}

	if (action == HQ_ACT_DROP) {
		if (st)
			st->drops++;
		return HQ_TC_DROP;
	}
	if (action == HQ_ACT_OBSERVE)
		return HQ_TC_NEXT;

	if (p.key.proto == IPPROTO_TCP &&
	    (slot < HQ_MAX_RULES || *(volatile __u32 *)&hq_policy.in_links) &&
	    (hq_rwnd_limit(skb, p.l4off, slot) & HQ_RWND_PACE)) {
		idx = in_ack_classid(slot);
		if (idx)
			classid = idx;
	}
	if (classid)
		skb->priority = classid;
	if (dscp >= 0 && (__u8)dscp != p.dscp_in)
		set_dscp(skb, off, p.key.family, dscp & 0x3f);
	return HQ_TC_NEXT;
}

/* For Ethernet devices (veth, physical NICs, bridges). */
SEC("tc")
int hq_tc_egress(struct __sk_buff *skb)
{
	return egress(skb, ETH_HLEN);
}

/* For devices without a link-layer header (tun, wireguard, ipip). */
SEC("tc")
int hq_tc_egress_l3(struct __sk_buff *skb)
{
	return egress(skb, 0);
}

/* ---------------------------------------------------------------------- */
/* TC ingress: receive-side classification, counters, download limits     */
/* ---------------------------------------------------------------------- */

/* Turns the parsed (received) packet's key into the egress orientation. */
static __always_inline void in_reverse(struct hq_pkt *p)
{
	__u32 a[4];
	__u16 port = p->key.sport;

	p->key.sport = p->key.dport;
	p->key.dport = port;
	if (p->key.family == HQ_AF_INET) {
		a[0] = p->k4.saddr;
		p->k4.saddr = p->k4.daddr;
		p->k4.daddr = a[0];
	} else {
		__builtin_memcpy(a, p->key.src, 16);
		__builtin_memcpy(p->key.src, p->key.dst, 16);
		__builtin_memcpy(p->key.dst, a, 16);
	}
}

/*
 * Applies rule slot's download limit to a received packet of flow f
 * (NULL: unknown) whose L4 header is at off: UDP beyond the limit is
 * dropped (returns 1), the rest is accounted to the limit's estimator
 * (returns 0). A global function: the verifier checks it once.
 */
__noinline int hq_in_limit(struct __sk_buff *skb, __u32 slot, __u32 off,
			   __u32 proto, struct hq_flow *f)
{
	struct hq_in *in;
	struct tcphdr th;
	__u64 payload, now;
	__u32 hl, len;

	if (!skb)
		return 0;
	in = bpf_map_lookup_elem(&hq_in, &slot);
	if (!in || !*(volatile __u64 *)&in->rate)
		return 0;
	/* L4 payload bytes: what the receiving application reads. */
	if (proto == IPPROTO_TCP) {
		if (bpf_skb_load_bytes(skb, off, &th, sizeof(th)))
			return 0;
		hl = th.doff * 4;
	} else if (proto == IPPROTO_UDP) {
		hl = 8;
	} else {
		return 0;
	}
	len = skb->len;
	payload = len > off + hl ? len - off - hl : 0;
	now = coarse_ns();
	if (proto == IPPROTO_UDP && in_police(in, payload, now) == HQ_ACT_DROP)
		return 1;
	in_account(in, f, payload, now);
	return 0;
}

static __always_inline struct hq_flow *flow_get(struct hq_pkt *p)
{
	struct hq_flow *f;

	if (p->key.family == HQ_AF_INET) {
		f = bpf_map_lookup_elem(&hq_flows4, &p->k4);
	} else {
		f = bpf_map_lookup_elem(&hq_flows6, &p->key);
		asm volatile("" : "+r"(f));
	}
	return f;
}

/*
 * Classifies a received packet like the egress classifier classifies the
 * packets of its flow (the same flow entry, the key turned around, rules
 * evaluated with the receiving socket's identity), counts it for the flow
 * and rule, and applies the rule's download limit: UDP over the limit is
 * dropped and counted. Fails open: whatever cannot be done passes.
 */
static __always_inline int ingress(struct __sk_buff *skb, __u32 off)
{
	struct hq_pkt p; /* parse writes every byte the lookup reads */
	struct hq_flow *f;
	struct hq_fctr *c = NULL;
	struct hq_stats *st;
	struct hq_counters *rc;
	__u32 slot, idx;
	__u64 res;
	int ret, drop = 0;

	st = stats();
	if (st)
		st->rx_packets++;
	ret = parse(skb, off, &p);
	if (ret) {
		if (ret < 0 && st)
			st->rx_parse_errors++;
		return HQ_TC_NEXT;
	}
	in_reverse(&p);
	p.len = skb->len;
	p.gen = *(volatile __u32 *)&hq_policy.gen;
	p.now = coarse_ns();

	f = flow_get(&p);
	if (!f || f->gen != p.gen) {
		res = hq_flow_slow(skb, in_ident(skb, &p, st), &p, f, 1);
		f = flow_get(&p);
	} else {
		res = pack_result(f);
	}
	if (f) {
		idx = f->cslot;
		c = bpf_map_lookup_elem(&hq_fctr, &idx);
		if (c && c->tag != f->tag)
			c = NULL;
	}
	slot = (__u16)(res >> 32);

	if (slot < HQ_MAX_RULES)
		drop = hq_in_limit(skb, slot, p.l4off, p.key.proto, f);
	/* The call only where some link has an ingress budget. */
	if (!drop && *(volatile __u32 *)&hq_policy.in_links)
		drop = hq_link_in_charge(skb, slot, p.key.proto, f);
	if (slot < HQ_MAX_RULES) {
		if (st)
			st->rx_classified++;
		rc = bpf_map_lookup_elem(&hq_rule_ctr_in, &slot);
		if (rc) {
			rc->packets++;
			rc->bytes += p.len;
			if (drop)
				rc->drops++;
		}
	}
	if (slot >= HQ_MAX_RULES && st) {
		st->rx_none_packets++;
		st->rx_none_bytes += p.len;
		if (drop)
			st->rx_none_drops++;
	}
	if (c) {
		__sync_fetch_and_add(&c->rx_packets, 1);
		__sync_fetch_and_add(&c->rx_bytes, p.len);
		if (drop)
			__sync_fetch_and_add(&c->rx_drops, 1);
		c->last_ns = p.now;
	}
	if (drop) {
		if (st)
			st->rx_drops++;
		return HQ_TC_DROP;
	}
	return HQ_TC_NEXT;
}

/* For Ethernet devices (veth, physical NICs, bridges). */
SEC("tc")
int hq_tc_ingress(struct __sk_buff *skb)
{
	return ingress(skb, ETH_HLEN);
}

/* For devices without a link-layer header (tun, wireguard, ipip). */
SEC("tc")
int hq_tc_ingress_l3(struct __sk_buff *skb)
{
	return ingress(skb, 0);
}

/* ---------------------------------------------------------------------- */
/* One socket's flows, classified again (the daemon runs this program)    */
/* ---------------------------------------------------------------------- */

/* A scan's filter and result, on hq_forget_flows's stack. */
struct hq_forget_scan {
	__u32 src[4];
	__u32 gen;
	__u32 count;
	__u16 sport;
	__u8 proto;
	__u8 any;
};

/* A past generation: the flow is evaluated again by its next packet. */
static __always_inline void forget_flow(struct hq_flow *f, __u32 gen)
{
	f->gen = gen - 1;
}

static long forget4_cb(struct bpf_map *map, struct hq_flow_key4 *k,
		       struct hq_flow *f, struct hq_forget_scan *s)
{
	if (k->proto == s->proto && k->sport == s->sport &&
	    (s->any || k->saddr == s->src[0])) {
		forget_flow(f, s->gen);
		s->count++;
	}
	return 0;
}

static long forget6_cb(struct bpf_map *map, struct hq_flow_key *k,
		       struct hq_flow *f, struct hq_forget_scan *s)
{
	if (k->proto == s->proto && k->sport == s->sport &&
	    (s->any || (k->src[0] == s->src[0] && k->src[1] == s->src[1] &&
			k->src[2] == s->src[2] && k->src[3] == s->src[3]))) {
		forget_flow(f, s->gen);
		s->count++;
	}
	return 0;
}

/*
 * Invalidates the flows of one socket (struct hq_forget): a connected
 * socket's one flow by its key, an unconnected one's by a walk of its
 * family's table in the kernel. Every other flow keeps its cached result,
 * so making a socket a qsocket costs the host no re-classification.
 */
SEC("syscall")
int hq_forget_flows(struct hq_forget *a)
{
	struct hq_forget_scan s = {};
	struct hq_flow_key4 k4 = {};
	struct hq_flow_key k = {};
	struct hq_flow *f;
	long n;

	s.gen = *(volatile __u32 *)&hq_policy.gen;
	a->count = 0;
	if (a->dport) {
		if (a->family == HQ_AF_INET) {
			k4.family = HQ_AF_INET;
			k4.proto = a->proto;
			k4.sport = a->sport;
			k4.dport = a->dport;
			k4.saddr = a->src[0];
			k4.daddr = a->dst[0];
			f = bpf_map_lookup_elem(&hq_flows4, &k4);
		} else {
			k.family = HQ_AF_INET6;
			k.proto = a->proto;
			k.sport = a->sport;
			k.dport = a->dport;
			__builtin_memcpy(k.src, a->src, sizeof(k.src));
			__builtin_memcpy(k.dst, a->dst, sizeof(k.dst));
			f = bpf_map_lookup_elem(&hq_flows6, &k);
		}
		if (f) {
			forget_flow(f, s.gen);
			a->count = 1;
		}
		return 0;
	}
	s.proto = a->proto;
	s.sport = a->sport;
	s.any = a->any;
	__builtin_memcpy(s.src, a->src, sizeof(s.src));
	/*
	 * Two call sites (the empty asm keeps clang from merging them into
	 * one on a map chosen at run time, which 6.1's verifier refuses:
	 * "tail_call abusing map_ptr").
	 */
	if (a->family == HQ_AF_INET) {
		n = bpf_for_each_map_elem(&hq_flows4, forget4_cb, &s, 0);
	} else {
		n = bpf_for_each_map_elem(&hq_flows6, forget6_cb, &s, 0);
		asm volatile("" : "+r"(n));
	}
	a->count = s.count;
	return 0;
}

/* ---------------------------------------------------------------------- */
/* Map dumps for the daemon (bpf_iter): far cheaper per element than the  */
/* batch syscalls, which copy to user space bucket by bucket.             */
/* ---------------------------------------------------------------------- */

/*
 * Emit each flow of hq_flows4 / hq_flows6 as its key in full form (struct
 * hq_flow_key) followed by its value, so that both dumps have one record
 * layout.
 */
SEC("iter/bpf_map_elem")
int hq_iter_flows4(struct bpf_iter__bpf_map_elem *ctx)
{
	struct seq_file *seq = ctx->meta->seq;
	struct hq_flow_key4 *k4 = ctx->key;
	struct hq_flow *v = ctx->value;
	struct hq_flow_key k = {};

	if (!k4 || !v)
		return 0;
	k.family = HQ_AF_INET;
	k.proto = k4->proto;
	k.sport = k4->sport;
	k.dport = k4->dport;
	k.src[0] = k4->saddr;
	k.dst[0] = k4->daddr;
	bpf_seq_write(seq, &k, sizeof(k));
	bpf_seq_write(seq, v, sizeof(*v));
	return 0;
}

SEC("iter/bpf_map_elem")
int hq_iter_flows6(struct bpf_iter__bpf_map_elem *ctx)
{
	struct seq_file *seq = ctx->meta->seq;
	struct hq_flow_key *k = ctx->key;
	struct hq_flow *v = ctx->value;

	if (!k || !v)
		return 0;
	bpf_seq_write(seq, k, sizeof(*k));
	bpf_seq_write(seq, v, sizeof(*v));
	return 0;
}

/* Emits the per-CPU sum of every rule slot that counted anything. */
SEC("iter/bpf_map_elem")
int hq_iter_rule_ctr(struct bpf_iter__bpf_map_elem *ctx)
{
	struct seq_file *seq = ctx->meta->seq;
	__u32 *k = ctx->key;
	struct hq_counters *v = ctx->value;
	struct hq_ctr_rec r = {};
	__u32 c;

	if (!k || !v)
		return 0;
	for (c = 0; c < hq_ncpu && c < HQ_MAX_CPUS; c++) {
		r.packets += v[c].packets;
		r.bytes += v[c].bytes;
		r.drops += v[c].drops;
	}
	if (!r.packets && !r.drops)
		return 0;
	r.slot = *k;
	bpf_seq_write(seq, &r, sizeof(r));
	return 0;
}
