/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Rule policers: a lock-free GCRA (gcra(), shared with the download
 * limits), the per-rule policer state hq_police, and how a result word
 * with the police action becomes pass or drop.
 */
#ifndef HQ_BPF_POLICE_H
#define HQ_BPF_POLICE_H

#include "result.h"

/* Policers by rule slot; see struct hq_police. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, HQ_MAX_RULES);
	__type(key, __u32);
	__type(value, struct hq_police);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} hq_police SEC(".maps");

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
	if (res_action(res) != HQ_ACT_POLICE)
		return res;
	return res_with_action(res, police(res_slot(res), len, now));
}

#endif /* HQ_BPF_POLICE_H */
