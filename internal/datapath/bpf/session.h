/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Reservation sessions: sockets bound to a reservation (hq_bind) at
 * connect() or an unconnected sendmsg() (refused over the reservation's
 * session limit, recorded in hq_refusal), at their first classified packet,
 * or by the socket iterators for sockets older than the reservation; the
 * per-session HTB leaves they hold and give back.
 */
#ifndef HQ_BPF_SESSION_H
#define HQ_BPF_SESSION_H

#include "classify.h"
#include "flow.h"
#include "ident.h"
#include "resv.h"

#define SOL_SOCKET 1
#define SO_SNDBUF 7

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
	if (!netns_served(bpf_get_netns_cookie(ctx)))
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
 * is applied, the daemon runs the socket iterators (hq_iter_bind_tcp,
 * hq_iter_bind_udp) over the TCP and UDP sockets of its network namespace.
 * A connected socket the policy classifies under a reservation is bound
 * (and holds a session, never refused) as if it had connected now; the
 * daemon sizes its send buffer (HQ_BIND_SNDBUF is not set).
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

	if (!netns_served(BPF_CORE_READ(skc, skc_net.net, net_cookie)))
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

/*
 * The flow of a closed socket that held a per-session leaf is evaluated
 * afresh by its next packet: a new socket with the same 5-tuple must not
 * inherit the leaf, which another session may hold by then.
 */
static __noinline void resv_flow_forget(const struct hq_flow_key *k)
{
	struct hq_flow *f = flow_lookup(k);

	if (f) /* a past generation: never the current one */
		forget_flow(f, *(volatile __u32 *)&hq_policy.gen);
}

#endif /* HQ_BPF_SESSION_H */
