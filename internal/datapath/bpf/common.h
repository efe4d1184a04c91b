/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * What every part of the datapath shares: the values the loader sets
 * before loading (network namespace, CPU count, tick length, what the
 * kernel has), the loop macro both loop variants go through, the policy
 * state hq_policy, the health counters and the coarse clock. It also
 * includes the kernel's types (vmlinux.h), the libbpf helpers and the
 * ABI with Go (hostqos.h), so that every header stands on its own.
 */
#ifndef HQ_BPF_COMMON_H
#define HQ_BPF_COMMON_H

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

#define HQ_OFF(t, m) __builtin_offsetof(struct t, m)

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

/* Health counters (struct hq_stats), per CPU; the daemon sums them. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct hq_stats);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} hq_health SEC(".maps");

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

#endif /* HQ_BPF_COMMON_H */
