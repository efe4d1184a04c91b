/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Flows and their counters: the flow tables (hq_flows4, hq_flows6), the
 * counter slots the daemon reads memory-mapped (hq_fctr) and the key each
 * slot was handed to (hq_fkey), the per-rule counters, looking a flow up
 * by either key form, handing out counter slots, and invalidating one
 * socket's flows (the hq_forget_flows walk).
 */
#ifndef HQ_BPF_FLOW_H
#define HQ_BPF_FLOW_H

#include "parse.h"

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

/* Counters by rule slot, per CPU (TC egress). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, HQ_MAX_RULES);
	__type(key, __u32);
	__type(value, struct hq_counters);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} hq_rule_ctr SEC(".maps");

/* Receive-side counters by rule slot, per CPU (TC ingress). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, HQ_MAX_RULES);
	__type(key, __u32);
	__type(value, struct hq_counters);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} hq_rule_ctr_in SEC(".maps");

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

/*
 * A socket's copy of its flow's cache entry (hq_sk_flow), for the egress
 * classifier of the host's own sockets: a packet of the socket whose key
 * is key, under generation gen and flow epoch epoch, whose counter slot
 * cslot still carries tag, takes res without looking the flow table up.
 * Only for results that need nothing else of the entry (not a qsocket's
 * or a reservation's, not with flow queueing on).
 */
struct hq_skflow {
	struct hq_flow_key key; /* the hq_pkt key union: IPv4 zero-padded */
	__u64 res;
	__u64 tag;
	__u32 gen;
	__u32 epoch;
	__u32 cslot;
	__u32 pad;
};

/*
 * The socket copies. Not pinned: a cache, empty after a restart, whose
 * storage the kernel frees with each socket.
 */
struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct hq_skflow);
} hq_sk_flow SEC(".maps");

/*
 * A flow entry's cached result, generation or veth changed, or an entry
 * was inserted (one whose key a socket's copy may name, after the LRU
 * dropped the entry): every socket's copy is stale.
 */
static __always_inline void flow_changed(void)
{
	__sync_fetch_and_add(&hq_policy.flow_epoch, 1);
}

/* The flow epoch now; read before the flow entry a copy is made from. */
static __always_inline __u32 flow_epoch(void)
{
	return *(volatile __u32 *)&hq_policy.flow_epoch;
}

/* Whether a result may be kept in a socket's copy (see hq_skflow). */
static __always_inline int skflow_keeps(__u64 res)
{
	__u8 a = (__u8)(res >> 48);

	return a != HQ_ACT_QSOCK && a != HQ_ACT_RESV;
}

/*
 * The full socket an egress packet was sent by (NULL: none, or not a full
 * socket): forwarded packets have none.
 */
static __always_inline struct bpf_sock *skflow_sock(struct __sk_buff *skb)
{
	struct bpf_sock *sk = skb->sk;

	if (!sk)
		return NULL;
	return bpf_sk_fullsock(sk);
}

/* Whether copy s is of the flow with key k (both 40 bytes, zero-padded). */
static __always_inline int skflow_same(const struct hq_skflow *s,
				       const struct hq_flow_key *k)
{
	const __u64 *a = (const __u64 *)&s->key, *b = (const __u64 *)k;

	return a[0] == b[0] && a[1] == b[1] && a[2] == b[2] && a[3] == b[3] &&
	       a[4] == b[4];
}

/*
 * The flow of a parsed packet, NULL for none. Two call sites: the verifier
 * inlines a lookup only where the map is known. The empty asm keeps clang
 * from merging them into one call on a map pointer chosen at run time.
 */
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
 * The flow of key k in full form, NULL for none: an IPv4 flow is looked up
 * by its own, shorter key (struct hq_flow_key4).
 */
static __always_inline struct hq_flow *flow_lookup(const struct hq_flow_key *k)
{
	struct hq_flow_key4 k4;
	struct hq_flow *f;

	if (k->family == HQ_AF_INET) {
		k4.family = HQ_AF_INET;
		k4.proto = k->proto;
		k4.sport = k->sport;
		k4.dport = k->dport;
		k4.pad = 0;
		k4.saddr = k->src[0];
		k4.daddr = k->dst[0];
		f = bpf_map_lookup_elem(&hq_flows4, &k4);
	} else {
		f = bpf_map_lookup_elem(&hq_flows6, k);
	}
	return f;
}

/* The full form of IPv4 key k4 (struct hq_flow_key). */
static __always_inline void flow_key_full(struct hq_flow_key *k,
					  const struct hq_flow_key4 *k4)
{
	__builtin_memset(k, 0, sizeof(*k));
	k->family = HQ_AF_INET;
	k->proto = k4->proto;
	k->sport = k4->sport;
	k->dport = k4->dport;
	k->src[0] = k4->saddr;
	k->dst[0] = k4->daddr;
}

/*
 * The flow that owns counter slot idx under tag t, or NULL when the slot is
 * free or its flow has left the flow table (or moved to another slot).
 */
static __always_inline struct hq_flow *fctr_owner(__u32 idx, __u64 t)
{
	struct hq_flow_key *k;
	struct hq_flow *o;

	if (!t)
		return NULL;
	k = bpf_map_lookup_elem(&hq_fkey, &idx);
	if (!k)
		return NULL;
	o = flow_lookup(k);
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

/* A scan's filter and result, on hq_forget_flows's stack. */
struct hq_forget_scan {
	__u32 src[4];
	__u32 gen;
	__u32 count;
	__u16 sport;
	__u8 proto;
	__u8 any;
};

/*
 * A past generation: the flow is evaluated again by its next packet. Only a
 * flow of the current generation gen is moved back; one of a past
 * generation already is, and keeps the generation its cached rule slot was
 * found at (the daemon names a flow's rule only if the slot has not changed
 * hands since).
 */
static __always_inline void forget_flow(struct hq_flow *f, __u32 gen)
{
	if (f->gen == gen) {
		f->gen = gen - 1;
		flow_changed();
	}
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

#endif /* HQ_BPF_FLOW_H */
