//go:build ignore

// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * hostqos XDP shield, on managed links that need it:
 *
 *  - drop list: the source address is looked up in a hash of host entries
 *    (/32, /128), then, if that misses and shorter prefixes exist, in a
 *    longest-prefix trie per family (a host entry is always the longest
 *    match); a hit is counted per entry (packets, bytes, dropped) and
 *    either dropped or, for a quarantined entry, passed at most at the
 *    entry's rate (GCRA, shared by the entry's sources);
 *  - SYN throttling: pure SYNs (SYN without ACK) to a link with SYN limits
 *    pass a per-source bucket, then the link's bucket; protected clients
 *    (exact address, local port) bypass both. No other packet is touched,
 *    so established connections never are.
 *
 * Fail open: anything the program cannot parse or look up passes.
 * Buckets are updated without locks: two CPUs racing may admit a little
 * more than the rate, never less.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "hqxdp.h"

#define ETH_P_IP 0x0800
#define ETH_P_IPV6 0x86DD
#define ETH_HLEN 14
#define IP_MF 0x2000
#define IP_OFFSET 0x1fff
#define TCP_FLAG_SYN 0x02
#define TCP_FLAG_ACK 0x10

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* Type anchors (never read): export the enum to Go. */
const volatile enum hqx_limits hqx_type_limits = 0;

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, HQX_BLOCK_ENTRIES);
	__type(key, struct hqx_key4);
	__type(value, struct hqx_entry);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} hqx_block4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, HQX_BLOCK_ENTRIES);
	__type(key, struct hqx_key6);
	__type(value, struct hqx_entry);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} hqx_block6 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, HQX_BLOCK_ENTRIES);
	__type(key, __u32);
	__type(value, struct hqx_entry);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} hqx_host4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, HQX_BLOCK_ENTRIES);
	__type(key, struct hqx_addr6);
	__type(value, struct hqx_entry);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} hqx_host6 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct hqx_tries);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} hqx_tries SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, HQX_BLOCK_SLOTS);
	__type(key, __u32);
	__type(value, struct hqx_counters);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} hqx_ctr SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, HQX_BLOCK_SLOTS);
	__type(key, __u32);
	__type(value, struct hqx_bucket);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} hqx_bucket SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, HQX_LINKS);
	__type(key, __u32);
	__type(value, struct hqx_syn);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} hqx_syn SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, HQX_SYN_SOURCES);
	__type(key, struct hqx_src_key);
	__type(value, __u64);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} hqx_syn_src SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, HQX_PROTECT_ENTRIES);
	__type(key, struct hqx_protect_key);
	__type(value, __u32);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} hqx_protect SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct hqx_stats);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} hqx_health SEC(".maps");

/* gcra admits one unit of cost at *tat (theoretical arrival time) within
 * the tolerance tau; it returns 1 when the unit conforms. */
static __always_inline int gcra(__u64 *tat, __u64 now, __u64 cost, __u64 tau)
{
	__u64 t = *tat;
	if (t < now)
		t = now;
	if (t - now > tau)
		return 0;
	*tat = t + cost;
	return 1;
}

/* drop_list applies the entry e (slot counters, quarantine bucket);
 * it returns the verdict. */
static __always_inline int drop_list(struct hqx_entry *e, __u64 len,
				     struct hqx_stats *st)
{
	__u32 slot = e->slot;
	struct hqx_counters *c = bpf_map_lookup_elem(&hqx_ctr, &slot);
	if (c) {
		c->packets++;
		c->bytes += len;
	}
	if (e->rate == 0) {
		if (c)
			c->dropped++;
		if (st)
			st->blocked++;
		return XDP_DROP;
	}
	struct hqx_bucket *b = bpf_map_lookup_elem(&hqx_bucket, &slot);
	if (!b)
		return XDP_PASS;
	__u64 cost = len * 1000000000ULL / e->rate;
	__u64 tau = HQX_BURST_NS;
	__u64 min_tau = (__u64)HQX_MIN_BURST_BYTES * 1000000000ULL / e->rate;
	if (tau < min_tau)
		tau = min_tau;
	if (gcra(&b->tat, bpf_ktime_get_ns(), cost, tau))
		return XDP_PASS;
	if (c)
		c->dropped++;
	if (st)
		st->quarantined++;
	return XDP_DROP;
}

/* syn_check throttles a pure SYN from addr (IPv4-mapped or IPv6) to
 * dport on the link ifindex. */
static __always_inline int syn_check(__u32 ifindex, const __u8 *addr, int v6,
				     __u16 dport, struct hqx_stats *st)
{
	struct hqx_syn *s = bpf_map_lookup_elem(&hqx_syn, &ifindex);
	if (!s)
		return XDP_PASS;
	__sync_fetch_and_add(&s->seen, 1);
	if (st)
		st->syn_seen++;
	struct hqx_protect_key pk = {};
	__builtin_memcpy(pk.addr, addr, 16);
	pk.port = dport;
	if (bpf_map_lookup_elem(&hqx_protect, &pk))
		goto protected;
	pk.port = 0;
	if (bpf_map_lookup_elem(&hqx_protect, &pk))
		goto protected;

	__u64 now = bpf_ktime_get_ns();
	if (s->src_interval_ns) {
		struct hqx_src_key sk = {.ifindex = ifindex};
		if (v6)
			__builtin_memcpy(sk.addr, addr, 8); /* IPv6: by /64 */
		else
			__builtin_memcpy(sk.addr, addr, 16);
		__u64 *tat = bpf_map_lookup_elem(&hqx_syn_src, &sk);
		if (!tat) {
			__u64 first = now + s->src_interval_ns;
			bpf_map_update_elem(&hqx_syn_src, &sk, &first, BPF_ANY);
		} else if (!gcra(tat, now, s->src_interval_ns, s->src_tau_ns)) {
			goto drop;
		}
	}
	if (s->interval_ns && !gcra(&s->tat, now, s->interval_ns, s->tau_ns))
		goto drop;
	return XDP_PASS;
drop:
	__sync_fetch_and_add(&s->dropped, 1);
	if (st)
		st->syn_dropped++;
	return XDP_DROP;

      protected:
	if (st)
		st->syn_protected++;
	return XDP_PASS;
}

SEC("xdp")
int hqx_xdp(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u32 zero = 0;
	struct hqx_stats *st = bpf_map_lookup_elem(&hqx_health, &zero);
	struct hqx_tries *tries = bpf_map_lookup_elem(&hqx_tries, &zero);
	__u64 len = (__u64)(end - data);
	if (st)
		st->packets++;

	struct ethhdr *eth = data;
	if ((void *)(eth + 1) > end)
		goto truncated;
	__u16 proto = eth->h_proto;
	__u8 addr[16] = {};
	__u8 l4 = 0;
	void *l4p = 0;
	int v6 = 0;
	int first_frag = 1;

	if (proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = (void *)(eth + 1);
		if ((void *)(ip + 1) > end)
			goto truncated;
		__u32 saddr = ip->saddr;
		struct hqx_entry *e = bpf_map_lookup_elem(&hqx_host4, &saddr);
		if (!e && tries && tries->n4) {
			struct hqx_key4 k = {.prefixlen = 32, .addr = saddr};
			e = bpf_map_lookup_elem(&hqx_block4, &k);
		}
		if (e && drop_list(e, len, st) == XDP_DROP)
			return XDP_DROP;
		addr[10] = 0xff;
		addr[11] = 0xff;
		__builtin_memcpy(&addr[12], &ip->saddr, 4);
		l4 = ip->protocol;
		__u32 ihl = ip->ihl * 4;
		if (ihl < sizeof(*ip))
			goto truncated;
		l4p = (void *)ip + ihl;
		if (ip->frag_off & bpf_htons(IP_OFFSET))
			first_frag = 0;
	} else if (proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = (void *)(eth + 1);
		if ((void *)(ip6 + 1) > end)
			goto truncated;
		struct hqx_addr6 a6;
		__builtin_memcpy(a6.addr, &ip6->saddr, 16);
		struct hqx_entry *e = bpf_map_lookup_elem(&hqx_host6, &a6);
		if (!e && tries && tries->n6) {
			struct hqx_key6 k = {.prefixlen = 128};
			__builtin_memcpy(k.addr, a6.addr, 16);
			e = bpf_map_lookup_elem(&hqx_block6, &k);
		}
		if (e && drop_list(e, len, st) == XDP_DROP)
			return XDP_DROP;
		__builtin_memcpy(addr, &ip6->saddr, 16);
		v6 = 1;
		l4 = ip6->nexthdr; /* extension headers: not throttled */
		l4p = ip6 + 1;
	} else {
		if (st)
			st->not_ip++;
		return XDP_PASS;
	}

	if (l4 != IPPROTO_TCP || !first_frag)
		return XDP_PASS;
	struct tcphdr *th = l4p;
	if ((void *)(th + 1) > end)
		goto truncated;
	__u8 flags = ((__u8 *)th)[13];
	if ((flags & (TCP_FLAG_SYN | TCP_FLAG_ACK)) != TCP_FLAG_SYN)
		return XDP_PASS;
	return syn_check(ctx->ingress_ifindex, addr, v6, bpf_ntohs(th->dest),
			 st);
truncated:
	if (st)
		st->truncated++;
	return XDP_PASS;
}
