/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Socket identity: the per-socket storage hq_sock_create fills at a
 * socket's birth (hq_sk_ident: who made it, and the qsocket it is), and how
 * a packet finds it: through its own socket, an MPTCP subflow's parent, or
 * on ingress the local socket the stack will deliver it to. Containers:
 * the network namespaces whose sockets get an identity besides the
 * daemon's own (hq_cnetns), and the identity a container's packet takes
 * at the host side of its veth when its socket has none (hq_veth).
 */
#ifndef HQ_BPF_IDENT_H
#define HQ_BPF_IDENT_H

#include "parse.h"

/* The identity of each socket (struct hq_ident), stored at its birth. */
struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC | BPF_F_CLONE);
	__type(key, int);
	__type(value, struct hq_ident);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} hq_sk_ident SEC(".maps");

/*
 * The containers' network namespaces: netns cookie -> container number
 * (hq_ident.ctr, 1..). hq_sock_create gives the sockets made in them an
 * identity as it does the daemon's own namespace's. Written by the daemon
 * as it finds containers.
 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, HQ_MAX_CONTAINERS);
	__type(key, __u64);
	__type(value, __u32);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} hq_cnetns SEC(".maps");

/* Whether a network namespace is the daemon's or a known container's. */
static __always_inline int netns_served(__u64 ns)
{
	return ns == hq_netns_cookie ||
	       bpf_map_lookup_elem(&hq_cnetns, &ns) != NULL;
}

/*
 * The host-side veths of containers: ifindex -> the container's identity
 * (ctr, and its cgroup where it has one; no exe, comm or uid). A packet
 * classified at the veth whose socket has no identity of that container
 * (made before the daemon knew it, or none: forwarded by the container)
 * takes this one. Written by the daemon.
 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, HQ_MAX_CONTAINERS);
	__type(key, __u32);
	__type(value, struct hq_ident);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} hq_veth SEC(".maps");

/*
 * The identity of a container's packet at the host side of veth ifindex:
 * its socket's (sid) when that socket was made in the container, else
 * the veth's; NULL when the veth is not a known container's.
 */
static __always_inline struct hq_ident *veth_ident(__u32 ifindex,
						   struct hq_ident *sid)
{
	struct hq_ident *vid = bpf_map_lookup_elem(&hq_veth, &ifindex);

	if (!vid)
		return NULL;
	if (sid && sid->ctr == vid->ctr)
		return sid;
	return vid;
}

/*
 * Whether a received packet (p in egress orientation: local = its
 * destination) is routed on to a container's veth, where hq_veth_out
 * counts it. Asked only while some container is known and only for a
 * packet of a flow not in the table yet (later ones find the flow's veth).
 * A global function: the lookup's parameters stay off its caller's stack.
 */
__noinline int hq_to_container(struct __sk_buff *skb, const struct hq_pkt *p)
{
	struct bpf_fib_lookup fl = {};
	long ret;

	if (!skb || !p)
		return 0;
	fl.ifindex = skb->ingress_ifindex;
	fl.l4_protocol = p->key.proto;
	if (p->key.family == HQ_AF_INET) {
		fl.family = AF_INET;
		fl.ipv4_src = p->k4.daddr;
		fl.ipv4_dst = p->k4.saddr;
	} else {
		fl.family = AF_INET6;
		__builtin_memcpy(fl.ipv6_src, p->key.dst, 16);
		__builtin_memcpy(fl.ipv6_dst, p->key.src, 16);
	}
	ret = bpf_fib_lookup(skb, &fl, sizeof(fl), 0);
	if (ret != BPF_FIB_LKUP_RET_SUCCESS && ret != BPF_FIB_LKUP_RET_NO_NEIGH)
		return 0;
	return bpf_map_lookup_elem(&hq_veth, &fl.ifindex) != NULL;
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

#endif /* HQ_BPF_IDENT_H */
