/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Rule evaluation: the rule table and the search structures the daemon
 * compiles from the policy (tuple-space search for flow selectors, one
 * bitmap per app selector value for app selectors), the walks over them in
 * both loop variants (bpf_loop, or bounded loops through global step
 * functions), and evaluate(), which finds the earliest matching rule for a
 * flow key and an identity.
 */
#ifndef HQ_BPF_CLASSIFY_H
#define HQ_BPF_CLASSIFY_H

#include "common.h"

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

/* The rules of both buffers, by buffer * HQ_MAX_RULES + index. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2 * HQ_MAX_RULES);
	__type(key, __u32);
	__type(value, struct hq_rule);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} hq_rules SEC(".maps");

/*
 * The app rules each selector value satisfies (a bitmap of app bits), by
 * buffer and executable (device, inode), command name, uid and cgroup id.
 */
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
 * its ancestors, and the socket's container (if any) as one more cgroup. A global function (verified once, on its own: its
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
	/* A container matches as one more cgroup, under its own key. */
	if (id->ctr) {
		gk.id = (1ULL << HQ_CTR_KEY_SHIFT) | id->ctr;
		m.cg = bpf_map_lookup_elem(&hq_cg, &gk);
		if (m.cg)
			hq_loop(nw, HQ_BOUNDED_WORDS, am_cg_word, &m);
	}
	hq_loop(nw, HQ_BOUNDED_WORDS, am_word, &m);
	return m.any != 0;
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

#endif /* HQ_BPF_CLASSIFY_H */
