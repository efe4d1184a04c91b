//go:build ignore

// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * hostqos datapath.
 *
 *  - hq_sock_create (cgroup/sock_create): records the creating task's app
 *    identity with every AF_INET/AF_INET6 socket of our network namespace.
 *  - hq_tc_egress / hq_tc_egress_l3 (tcx/egress): classify each packet by
 *    flow (LRU cache) and rules (evaluated on a flow miss only), then drop,
 *    count, mark DSCP and pick the HTB class via skb->priority.
 *
 * Neither program ever blocks: sock_create always allows, the classifier
 * only drops for an explicit drop rule.
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

/* TCX verdicts (same values as TC_ACT_UNSPEC / TC_ACT_SHOT). */
#define HQ_TC_NEXT -1
#define HQ_TC_DROP 2

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* Network namespace cookie of the daemon; set at load time. */
const volatile __u64 hq_netns_cookie = 0;

/* Number of possible CPUs (per-CPU value stride count); set at load. */
const volatile __u32 hq_ncpu = 1;

/* Policy state; see struct hq_state. Pinned by the loader. */
struct hq_state hq_policy;

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC | BPF_F_CLONE);
	__type(key, int);
	__type(value, struct hq_ident);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} hq_sk_ident SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536); /* overridden by the loader */
	__type(key, struct hq_flow_key);
	__type(value, struct hq_flow);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} hq_flows SEC(".maps");

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

struct hq_pkt {
	struct hq_flow_key key;
	__u8 dscp_in;
};

struct hq_eval {
	struct hq_pkt *pkt;
	struct hq_bitmap appmatch;
	__u32 base;      /* first rule index of the active buffer */
	__u32 nrules;
	__s32 match;     /* rule index (within buffer) or -1 */
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

static long eval_rule(__u32 i, void *data)
{
	struct hq_eval *ev = data;
	struct hq_pkt *p = ev->pkt;
	struct hq_rule *r;
	__u32 idx;

	if (i >= ev->nrules)
		return 1;
	idx = ev->base + i;
	r = bpf_map_lookup_elem(&hq_rules, &idx);
	if (!r)
		return 1;

	if (r->has_app) {
		__u16 bit = r->app_bit & (HQ_MAX_APP_RULES - 1);

		if (!(ev->appmatch.w[bit >> 6] & (1ULL << (bit & 63))))
			return 0;
	}
	if (r->proto && r->proto != p->key.proto) {
		/* ICMP rules also match ICMPv6. */
		if (!(r->proto == IPPROTO_ICMP && p->key.proto == IPPROTO_ICMPV6))
			return 0;
	}
	if (r->family && r->family != p->key.family)
		return 0;
	if (!addr_match(p->key.src, r->local_addr, r->local_mask))
		return 0;
	if (!addr_match(p->key.dst, r->remote_addr, r->remote_mask))
		return 0;
	if (!ports_in(p->key.sport, r->lport_lo, r->lport_hi))
		return 0;
	if (!ports_in(p->key.dport, r->rport_lo, r->rport_hi))
		return 0;
	if (r->dscp_in >= 0 && r->dscp_in != p->dscp_in)
		return 0;

	ev->match = i;
	return 1;
}

static __always_inline void bm_or(struct hq_bitmap *dst,
				  const struct hq_bitmap *src)
{
	dst->w[0] |= src->w[0];
	dst->w[1] |= src->w[1];
	dst->w[2] |= src->w[2];
	dst->w[3] |= src->w[3];
}

/* acc &= (b | ~r) for one selector type; b may be NULL (empty set). */
static __always_inline void bm_sel(struct hq_bitmap *acc,
				   const struct hq_bitmap *b,
				   const struct hq_bitmap *r)
{
#pragma unroll
	for (int k = 0; k < HQ_BITMAP_WORDS; k++)
		acc->w[k] &= (b ? b->w[k] : 0) | ~r->w[k];
}

/* Computes the bitmap of app rules the socket's identity satisfies. */
static __always_inline void app_match(struct hq_eval *ev, __u32 buf,
				      const struct hq_buf *hb,
				      const struct hq_ident *id)
{
	struct hq_exe_key ek = {};
	struct hq_comm_key ck = {};
	struct hq_uid_key uk = {};
	struct hq_cg_key gk = {};
	struct hq_bitmap cg = {};
	struct hq_bitmap *b;
	__u32 l, top;

	ev->appmatch.w[0] = ~0ULL;
	ev->appmatch.w[1] = ~0ULL;
	ev->appmatch.w[2] = ~0ULL;
	ev->appmatch.w[3] = ~0ULL;

	ek.buf = buf;
	ek.dev = id->exe_dev;
	ek.ino = id->exe_ino;
	bm_sel(&ev->appmatch, bpf_map_lookup_elem(&hq_exe, &ek), &hb->r_exe);

	ck.buf = buf;
	__builtin_memcpy(ck.comm, id->comm, HQ_COMM_LEN);
	bm_sel(&ev->appmatch, bpf_map_lookup_elem(&hq_comm, &ck), &hb->r_comm);

	uk.buf = buf;
	uk.uid = id->uid;
	bm_sel(&ev->appmatch, bpf_map_lookup_elem(&hq_uid, &uk), &hb->r_uid);

	gk.buf = buf;
	top = id->cg_level;
	for (l = 0; l < HQ_CG_LEVELS; l++) {
		if (l > top)
			break;
		gk.id = id->cg[l];
		b = bpf_map_lookup_elem(&hq_cg, &gk);
		if (b)
			bm_or(&cg, b);
	}
	if (top >= HQ_CG_LEVELS) {
		gk.id = id->cg_own;
		b = bpf_map_lookup_elem(&hq_cg, &gk);
		if (b)
			bm_or(&cg, b);
	}
	bm_sel(&ev->appmatch, &cg, &hb->r_cg);
}

/*
 * Evaluates the active policy for a packet and fills the cached part of
 * *f (gen, slot, action, dscp, classid, owner).
 */
static __always_inline void evaluate(struct __sk_buff *skb, struct hq_pkt *p,
				     struct hq_flow *f, __u32 gen,
				     struct hq_stats *st)
{
	struct hq_eval ev = {};
	struct hq_ident *id = NULL;
	struct bpf_sock *sk;
	const struct hq_buf *hb;
	struct hq_rule *r;
	__u32 buf = gen & 1;
	__u32 idx;

	hb = &hq_policy.buf[buf];

	sk = skb->sk;
	if (sk) {
		sk = bpf_sk_fullsock(sk);
		if (sk) {
			id = bpf_sk_storage_get(&hq_sk_ident, sk, 0, 0);
			if (!id && st)
				st->no_identity++;
		}
	}

	f->gen = gen;
	f->slot = HQ_SLOT_NONE;
	f->action = HQ_ACT_PASS;
	f->dscp = -1;
	f->classid = 0;
	if (id) {
		f->tgid = id->tgid;
		f->uid = id->uid;
		__builtin_memcpy(f->comm, id->comm, HQ_COMM_LEN);
		app_match(&ev, buf, hb, id);
	}
	/* Without an identity ev.appmatch stays 0: no app rule matches. */

	ev.pkt = p;
	ev.base = buf * HQ_MAX_RULES;
	ev.nrules = hb->nrules;
	if (ev.nrules > HQ_MAX_RULES)
		ev.nrules = HQ_MAX_RULES;
	ev.match = -1;
	if (st)
		st->evaluations++;
	bpf_loop(ev.nrules, eval_rule, &ev, 0);
	if (ev.match < 0)
		return;

	idx = ev.base + (__u32)ev.match;
	r = bpf_map_lookup_elem(&hq_rules, &idx);
	if (!r)
		return;
	f->slot = r->slot;
	f->action = r->action;
	f->dscp = r->dscp;
	f->classid = r->classid;
}

/*
 * Parses the packet at l3 offset off into p. Returns 0 on success, 1 for
 * non-IP, -1 for a malformed/truncated packet. *l3proto gets the family.
 */
static __always_inline int parse(struct __sk_buff *skb, __u32 off,
				 struct hq_pkt *p)
{
	void *data = (void *)(long)skb->data;
	void *end = (void *)(long)skb->data_end;
	__u16 proto = bpf_ntohs(skb->protocol);
	__u8 l4;
	int frag = 0;

	if (proto == ETH_P_IP) {
		struct iphdr *ip = data + off;

		if ((void *)(ip + 1) > end)
			return -1;
		if (ip->version != 4 || ip->ihl < 5)
			return -1;
		p->key.family = HQ_AF_INET;
		p->key.src[0] = ip->saddr;
		p->key.dst[0] = ip->daddr;
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
		p->key.family = HQ_AF_INET6;
		__builtin_memcpy(p->key.src, &ip6->saddr, 16);
		__builtin_memcpy(p->key.dst, &ip6->daddr, 16);
		p->dscp_in = ((ip6->priority << 4) | (ip6->flow_lbl[0] >> 4)) >> 2;
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

	p->key.proto = l4;
	if (frag)
		return 0;
	if (l4 == IPPROTO_TCP || l4 == IPPROTO_UDP) {
		__u16 *ports;

		/* Bound off so the verifier can track the access. */
		if (off > 512)
			return -1;
		ports = data + off;
		if ((void *)(ports + 2) > end)
			return -1;
		p->key.sport = bpf_ntohs(ports[0]);
		p->key.dport = bpf_ntohs(ports[1]);
	}
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

static __always_inline int egress(struct __sk_buff *skb, __u32 off)
{
	struct hq_pkt p = {};
	struct hq_flow nf = {};
	struct hq_flow *f;
	struct hq_stats *st;
	struct hq_counters *c;
	__u32 gen, slot;
	__u64 now;
	int action, dscp, ret;
	__u32 classid;
	/*
	 * Bytes counted = skb->len: the frame as the qdisc sees it, i.e. the
	 * L2 header plus the IP packet (for GSO packets, all segments).
	 */
	__u64 len = skb->len;

	st = stats();
	if (st)
		st->packets++;

	ret = parse(skb, off, &p);
	if (ret) {
		if (ret < 0 && st)
			st->parse_errors++;
		return HQ_TC_NEXT;
	}

	gen = *(volatile __u32 *)&hq_policy.gen;
	now = bpf_ktime_get_coarse_ns();
	f = bpf_map_lookup_elem(&hq_flows, &p.key);
	if (f && f->gen == gen) {
		__sync_fetch_and_add(&f->packets, 1);
		__sync_fetch_and_add(&f->bytes, len);
		f->last_ns = now;
	} else if (f) {
		/* Policy changed since this flow was evaluated. */
		evaluate(skb, &p, f, gen, st);
		__sync_fetch_and_add(&f->packets, 1);
		__sync_fetch_and_add(&f->bytes, len);
		f->last_ns = now;
	} else {
		evaluate(skb, &p, &nf, gen, st);
		nf.packets = 1;
		nf.bytes = len;
		nf.first_ns = now;
		nf.last_ns = now;
		if (nf.action == HQ_ACT_DROP)
			nf.drops = 1;
		if (bpf_map_update_elem(&hq_flows, &p.key, &nf, BPF_ANY) && st)
			st->flow_insert_fail++;
		f = &nf;
	}

	slot = f->slot;
	action = f->action;
	dscp = f->dscp;
	classid = f->classid;

	if (slot < HQ_MAX_RULES) {
		if (st)
			st->classified++;
		c = bpf_map_lookup_elem(&hq_rule_ctr, &slot);
		if (c) {
			c->packets++;
			c->bytes += len;
			if (action == HQ_ACT_DROP)
				c->drops++;
		}
	}

	if (action == HQ_ACT_DROP) {
		if (f != &nf)
			__sync_fetch_and_add(&f->drops, 1);
		if (st)
			st->drops++;
		return HQ_TC_DROP;
	}
	if (action == HQ_ACT_OBSERVE)
		return HQ_TC_NEXT;

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
/* Map dumps for the daemon (bpf_iter): far cheaper per element than the  */
/* batch syscalls, which copy to user space bucket by bucket.             */
/* ---------------------------------------------------------------------- */

/* Emits each flow as its key followed by its value. */
SEC("iter/bpf_map_elem")
int hq_iter_flows(struct bpf_iter__bpf_map_elem *ctx)
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
