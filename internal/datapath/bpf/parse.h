/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Packet headers: a parsed packet (struct hq_pkt), parse() from an IPv4 or
 * IPv6 header (with extension headers) and its ports into the flow key,
 * in_reverse() to turn a received packet's key around, and set_dscp() to
 * rewrite the DSCP of an outgoing packet. No maps.
 */
#ifndef HQ_BPF_PARSE_H
#define HQ_BPF_PARSE_H

#include "common.h"

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
	/*
	 * The host-side veth of a container's packet (0: the host's own);
	 * parse writes 0, the veth classifiers the veth's ifindex.
	 */
	__u32 veth;
};

_Static_assert(HQ_OFF(hq_flow_key4, saddr) == HQ_OFF(hq_flow_key, src),
	       "hq_flow_key4 and hq_flow_key must share their first 12 bytes");

/*
 * Parses the packet at l3 offset off into p, writing every byte of its
 * flow key (p->k4 for IPv4, p->key for IPv6) and dscp_in. Returns 0 on
 * success, 1 for non-IP, -1 for a malformed/truncated packet. For IPv4 it
 * zeroes the rest of p->key too, and it writes p->veth: p goes to global
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
	p->veth = 0;
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
		__u32 sum;
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
		/*
		 * The header checksum updated in place (RFC 1624, eqn. 3:
		 * HC' = ~(~HC + ~m + m')), as bpf_l3_csum_replace would, without
		 * the helper call: the header is writable already.
		 */
		sum = (__u16)~ip->check + (__u16)~oldw + (__u32)neww;
		sum = (sum & 0xffff) + (sum >> 16);
		sum = (sum & 0xffff) + (sum >> 16);
		ip->check = (__u16)~sum;
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

#endif /* HQ_BPF_PARSE_H */
