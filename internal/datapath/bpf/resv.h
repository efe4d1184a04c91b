/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Reservation policing: the reservation each rule slot names
 * (hq_rule_resv), its policer times and counters (hq_resv_state), the
 * seed's t_m/t_p arithmetic (resv_police) and the result of a packet under
 * a reservation (hq_resv_result: pass, or demote a non-conformant
 * controlled-load packet).
 */
#ifndef HQ_BPF_RESV_H
#define HQ_BPF_RESV_H

#include "result.h"

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

/* resv_police()'s verdict. */
enum hq_conformance {
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
	__u32 slot = res_slot(res), idx, id, segs;
	__u64 L;
	__s64 t;

	res = res_with_action(res, HQ_ACT_PASS);
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
	return res_make(rv->demote_classid, slot, HQ_ACT_PASS, rv->demote_dscp);
}

/* The reservation a rule slot names in the policy of generation gen. */
static __always_inline struct hq_resv *slot_resv(__u32 slot, __u32 gen)
{
	__u32 idx = (gen & 1) * HQ_MAX_RULES + slot;

	if (slot >= HQ_MAX_RULES)
		return NULL;
	return bpf_map_lookup_elem(&hq_rule_resv, &idx);
}

#endif /* HQ_BPF_RESV_H */
