//go:build ignore

// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * hostqos datapath: one BPF object (one bpf2go binding, one set of pins).
 * Each concern, its maps and its helpers, is a header in bpf/, included
 * below in dependency order; this file holds the programs, the classifier's
 * slow path that joins the concerns (hq_flow_slow) and the type anchors.
 * Fail open: no program blocks a socket or drops a packet but for an
 * explicit drop rule, a policer, a session limit or a download limit.
 *
 * Programs
 *
 * program            section, attached to      what it does
 * hq_sock_create     cgroup/sock_create,       stores the creating task's
 *                    the cgroup root           identity with every IPv4 or
 *                                              IPv6 socket of the daemon's
 *                                              network namespace and its
 *                                              containers'
 * hq_connect4/6      cgroup/connect4/6,        binds a socket the policy
 *                    the cgroup root           puts under a reservation
 *                                              (EPERM over its session
 *                                              limit), sets its SO_SNDBUF
 * hq_sendmsg4/6      cgroup/sendmsg4/6,        the same for an unconnected
 *                    the cgroup root           sendmsg()
 * hq_sock_release    cgroup/sock_release,      unbinds a closed socket
 *                    the cgroup root           (its session back), frees
 *                                              its qsocket entry
 * hq_tc_egress       tc, TCX egress (or        classifies (flow table, the
 *                    clsact) of Ethernet       rules on a miss), polices,
 *                    links                     counts, marks DSCP, picks the
 *                                              HTB class, lowers the TCP
 *                                              receive window
 * hq_tc_egress_l3    tc, the same, links       the same, for packets without
 *                    without an L2 header      an Ethernet header
 * hq_tc_ingress      tc, TCX ingress of        classifies received packets
 *                    Ethernet links            under their flow's entry,
 *                                              counts them, applies download
 *                                              limits and ingress budgets
 * hq_tc_ingress_l3   tc, the same, links       the same, for packets without
 *                    without an L2 header      an Ethernet header
 * hq_veth_in         tc, TCX ingress (or       a container's packets at the
 *                    clsact) of a container's  host side of its veth: as
 *                    host-side veth            hq_tc_egress, the HTB class
 *                                              handed on in skb->tc_index
 * hq_veth_out        tc, TCX egress (or        what a container receives:
 *                    clsact) of that veth      as hq_tc_ingress
 * hq_forget_flows    syscall, run by the       marks one socket's flows to
 *                    daemon (test-run)         be evaluated again
 * hq_iter_bind_tcp   iter/tcp, iter/udp,       bind the sockets opened
 * hq_iter_bind_udp   run by the daemon         before their reservation
 * hq_iter_flows4     iter/bpf_map_elem over    dump the flows, each with its
 * hq_iter_flows6     hq_flows4, hq_flows6      key in full form
 * hq_iter_rule_ctr   iter/bpf_map_elem over    dumps the rule counters that
 *                    hq_rule_ctr               counted anything, summed
 *                                              over the CPUs
 *
 * Maps ("daemon" is the Go side, internal/datapath; per-CPU scratch is
 * not pinned, everything else is)
 *
 * map                header      holds; written by
 * hq_policy (.bss)   common.h    active generation, both rule buffers'
 *                                counts and selector bitmaps, clock base,
 *                                cursors; daemon (buffers, the generation
 *                                flip), programs (clock base, cursors)
 * hq_health          common.h    per-CPU health counters; programs
 * hq_sk_ident        ident.h     each socket's identity and qsocket;
 *                                hq_sock_create, daemon (tags, qsockets)
 * hq_rules           classify.h  the rules of both buffers; daemon
 * hq_appidx          classify.h  rule of each app bit; daemon
 * hq_tuples          classify.h  tuple-space search tuples; daemon
 * hq_tss             classify.h  masked key -> first rule of its chain;
 *                                daemon
 * hq_tnodes          classify.h  chain nodes; daemon
 * hq_exe, hq_comm,   classify.h  app rules of each executable, command,
 * hq_uid, hq_cg                  uid and cgroup; daemon
 * hq_scratch         classify.h  per-CPU app bitmaps of an evaluation;
 *                                programs
 * hq_flows4          flow.h      IPv4 flows (LRU): cached result, owner,
 *                                counter slot; programs (hq_forget_flows
 *                                for the daemon)
 * hq_flows6          flow.h      IPv6 flows; as hq_flows4
 * hq_sk_flow         flow.h      a socket's copy of its flow's result
 *                                (not pinned); egress
 * hq_fctr            flow.h      flow counter slots (memory-mapped by the
 *                                daemon); programs
 * hq_fkey            flow.h      each counter slot's flow key; programs
 * hq_rule_ctr        flow.h      per-CPU counters by rule slot; egress
 * hq_rule_ctr_in     flow.h      the same for received packets; ingress
 * hq_nf              flow.h      per-CPU room for a new flow; hq_flow_slow
 * hq_police          police.h    GCRA by rule slot; daemon (rate, burst),
 *                                egress (its time)
 * hq_rule_resv       resv.h      reservation of each rule slot, both
 *                                buffers; daemon
 * hq_resv_state      resv.h      t_m, t_p and counters by reservation;
 *                                programs, daemon (incarnation)
 * hq_bind            session.h   sockets bound to a reservation, by
 *                                cookie; cgroup hooks, egress, iterators
 * hq_refusal         session.h   the latest session refusals; connect and
 *                                sendmsg hooks
 * hq_qsock           qsock.h     qsockets by id (memory-mapped); daemon
 *                                (settings), egress (counts, rate, DWCS
 *                                window), hq_sock_release (frees)
 * hq_qsched          qsock.h     qsocket scheduler by ifindex; daemon
 *                                (rate, class), egress (band times)
 * hq_in              rxlimit.h   download limit by rule slot; daemon
 *                                (limit), programs (estimator, policer)
 * hq_link_in         rxlimit.h   ingress budget by ifindex; daemon (rate),
 *                                programs (levels)
 * hq_cnetns          ident.h     containers' network namespaces (cookie ->
 *                                container number); daemon
 * hq_veth            ident.h     a container's identity by the ifindex of
 *                                its host-side veth; daemon
 */
#include "bpf/common.h"
#include "bpf/parse.h"
#include "bpf/result.h"
#include "bpf/ident.h"
#include "bpf/classify.h"
#include "bpf/flow.h"
#include "bpf/police.h"
#include "bpf/resv.h"
#include "bpf/session.h"
#include "bpf/qsock.h"
#include "bpf/rxlimit.h"
#include "bpf/fq.h"

/*
 * Never read: these make types no map or variable uses part of the
 * object's BTF, so that bpf2go exports them to Go. .rodata is not pinned,
 * so they do not change the pinned layout.
 */
const volatile enum hq_limits hq_type_limits = 0;
const volatile enum hq_action hq_type_action = 0;
const volatile enum hq_family hq_type_family = 0;
const volatile enum hq_verdict hq_type_verdict = 0;
const volatile struct hq_ctr_rec hq_type_ctr_rec = {};
const volatile enum hq_service hq_type_service = 0;
const volatile enum hq_refuse hq_type_refuse = 0;
const volatile enum hq_bind_flags hq_type_bind_flags = 0;
const volatile struct hq_forget hq_type_forget = {};
const volatile enum hq_txtime hq_type_txtime = 0;
const volatile enum hq_sched hq_type_sched = 0;

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* ---------------------------------------------------------------------- */
/* sock_create: identity at socket birth                                   */
/* ---------------------------------------------------------------------- */

SEC("cgroup/sock_create")
int hq_sock_create(struct bpf_sock *ctx)
{
	struct task_struct *task;
	struct hq_ident *id;
	__u64 own, cg, ns;
	__u32 l, ctr = 0, *c;

	if (ctx->family != AF_INET && ctx->family != AF_INET6)
		return 1;
	/*
	 * Other network namespaces belong to other daemons (or nobody), but
	 * for the containers this daemon found (their veths lead here).
	 */
	ns = bpf_get_netns_cookie(ctx);
	if (ns != hq_netns_cookie) {
		c = bpf_map_lookup_elem(&hq_cnetns, &ns);
		if (!c)
			return 1;
		ctr = *c;
	}

	id = bpf_sk_storage_get(&hq_sk_ident, ctx, 0,
				BPF_SK_STORAGE_GET_F_CREATE);
	if (!id) {
		struct hq_stats *st = stats();

		if (st)
			__sync_fetch_and_add(&st->ident_fail, 1);
		return 1;
	}

	id->ctr = ctr;
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
/* Reservation sessions: socket hooks and iterators (bpf/session.h)        */
/* ---------------------------------------------------------------------- */

/*
 * Sockets open before their reservation: when a policy with reservations
 * is applied, the daemon runs these iterators over its network namespace's
 * TCP and UDP sockets (resv_bind_open).
 */
SEC("iter/tcp")
int hq_iter_bind_tcp(struct bpf_iter__tcp *ctx)
{
	struct sock_common *skc = ctx->sk_common;
	struct tcp_sock *tp;
	__u8 state;

	if (!skc)
		return 0;
	state = BPF_CORE_READ(skc, skc_state);
	/* Only sockets that may still send (see tcp_may_send). */
	if (state != BPF_TCP_ESTABLISHED && state != BPF_TCP_SYN_SENT &&
	    state != BPF_TCP_SYN_RECV && state != BPF_TCP_CLOSE_WAIT)
		return 0;
	tp = bpf_skc_to_tcp_sock(skc);
	if (tp)
		resv_bind_open((struct sock *)tp, IPPROTO_TCP);
	return 0;
}

SEC("iter/udp")
int hq_iter_bind_udp(struct bpf_iter__udp *ctx)
{
	struct udp_sock *us = ctx->udp_sk;

	if (us)
		resv_bind_open((struct sock *)us, IPPROTO_UDP);
	return 0;
}

SEC("cgroup/connect4")
int hq_connect4(struct bpf_sock_addr *ctx)
{
	return resv_session(ctx, HQ_AF_INET, HQ_REFUSE_CONNECT);
}

SEC("cgroup/connect6")
int hq_connect6(struct bpf_sock_addr *ctx)
{
	return resv_session(ctx, HQ_AF_INET6, HQ_REFUSE_CONNECT);
}

SEC("cgroup/sendmsg4")
int hq_sendmsg4(struct bpf_sock_addr *ctx)
{
	return resv_session(ctx, HQ_AF_INET, HQ_REFUSE_SENDMSG);
}

SEC("cgroup/sendmsg6")
int hq_sendmsg6(struct bpf_sock_addr *ctx)
{
	return resv_session(ctx, HQ_AF_INET6, HQ_REFUSE_SENDMSG);
}

/* A closed socket unbinds and gives its session back; a closed qsocket
 * frees its entry. */
SEC("cgroup/sock_release")
int hq_sock_release(struct bpf_sock *ctx)
{
	struct hq_binding *b;
	__u64 cookie;

	if (ctx->family != AF_INET && ctx->family != AF_INET6)
		return 1;
	cookie = bpf_get_socket_cookie(ctx);
	qsock_release(ctx, cookie);
	b = bpf_map_lookup_elem(&hq_bind, &cookie);
	if (!b)
		return 1;
	if (b->sess)
		resv_flow_forget(&b->key);
	resv_uncount(b);
	bpf_map_delete_elem(&hq_bind, &cookie);
	return 1;
}

/* ---------------------------------------------------------------------- */
/* TC egress classifier                                                    */
/* ---------------------------------------------------------------------- */

/*
 * Everything but the common case: a new flow (f == NULL), a flow evaluated
 * under an older policy, or a flow without a valid counter slot. id is
 * the identity of the flow's local socket (NULL: none). Counts the packet
 * and returns the flow's classification (pack_result); with rx (TC
 * ingress) it neither polices nor counts, which the caller does.
 *
 * A global function: the verifier checks it once, on its own, not again
 * for every state its callers reach it in (6.1's verifier ran out of its
 * 1M instructions on the classifiers when it was static). Its pointers
 * are plain memory that may be NULL; it reads *p and never writes it.
 */
__noinline __u64 hq_flow_slow(struct __sk_buff *skb, struct hq_ident *id,
			      struct hq_pkt *p, struct hq_flow *f, int rx)
{
	struct hq_flow *nf;
	__u32 zero = 0;
	struct hq_flow_key key;
	struct hq_flow_key4 k4;
	struct hq_stats *st = stats();
	struct hq_fctr *c;
	__u32 idx;
	__u64 res;
	long err;
	int fresh = 0; /* f is nf, just inserted with its counter slot */

	if (!p)
		return HQ_RES_NONE;
	/* The flow key in full form, for the rules and hq_fkey. */
	if (p->key.family == HQ_AF_INET)
		flow_key_full(&key, &p->k4);
	else
		key = p->key;

	clock_sync();
	/*
	 * A flow is evaluated again under a new policy, and where it is seen
	 * first at a container's veth after a managed link classified it as
	 * the host's (before the container was found, or before its veth had
	 * the classifiers): there it is the container's.
	 */
	if (!f || f->gen != p->gen || f->veth != p->veth) {
		/* The new result, off the stack (see hq_nf). Fails open. */
		nf = bpf_map_lookup_elem(&hq_nf, &zero);
		if (!nf)
			return HQ_RES_NONE;
		__builtin_memset(nf, 0, sizeof(*nf));
		evaluate(id, &key, p->dscp_in, nf, p->gen, st, HQ_SCRATCH_TC);
		if (id && id->qsock)
			qsock_claim(skb, id, nf, rx);
		if (nf->action == HQ_ACT_RESV && !rx) {
			resv_bind_skb(skb, &key, nf, id, p->gen);
			resv_flow_class(skb, nf, p->gen);
		}
		nf->veth = p->veth;
		if (!f) {
			nf->first_ns = p->now;
			nf->base_last_ns = p->now;
			/*
			 * Its counter slot first, so that the entry goes into
			 * the table complete and this packet is counted
			 * without looking the entry up again. A slot whose
			 * entry never made it in has no owner (fctr_owner):
			 * the next allocation takes it.
			 */
			hq_fctr_alloc(p->now, &key, nf);
			/*
			 * The table's key on the stack: p is plain memory
			 * here, which 6.1 does not take for a map key. Built
			 * after the evaluation, whose frame it may share.
			 */
			k4 = p->k4;
			if (key.family == HQ_AF_INET)
				err = bpf_map_update_elem(&hq_flows4, &k4, nf,
							  BPF_NOEXIST);
			else
				err = bpf_map_update_elem(&hq_flows6, &key, nf,
							  BPF_NOEXIST);
			if (!err) {
				/* Counted below through nf, the entry's copy. */
				f = nf;
				fresh = 1;
				flow_changed();
			} else if (err != -17 /* EEXIST: raced */) {
				if (st)
					st->flow_insert_fail++;
				if (rx)
					return pack_result(nf);
				return police_result(pack_result(nf), p->len,
						     p->now);
			} else {
				if (key.family == HQ_AF_INET)
					f = bpf_map_lookup_elem(&hq_flows4,
								&k4);
				else
					f = bpf_map_lookup_elem(&hq_flows6,
								&key);
				if (!f) {
					if (rx)
						return pack_result(nf);
					return police_result(pack_result(nf),
							     p->len, p->now);
				}
			}
		}
		if (f->gen != p->gen || f->veth != nf->veth) {
			f->classid = nf->classid;
			f->slot = nf->slot;
			f->action = nf->action;
			f->dscp = nf->dscp;
			f->tgid = nf->tgid;
			f->uid = nf->uid;
			__builtin_memcpy(f->comm, nf->comm, HQ_COMM_LEN);
			f->veth = nf->veth;
			f->gen = p->gen;
			flow_changed();
		}
	}

	if (rx) {
		idx = f->cslot;
		c = bpf_map_lookup_elem(&hq_fctr, &idx);
		if (!c || !f->tag || c->tag != f->tag)
			c = fresh ? NULL : fctr_alloc(p->now, &key, f);
		/*
		 * A received packet may be the first of a flow after a policy
		 * change: its re-evaluation is the flow's, and egress then
		 * takes the fast path, which does not write the slot's rule.
		 */
		if (c)
			c->rule = f->slot;
		return pack_result(f);
	}
	res = police_result(pack_result(f), p->len, p->now);
	idx = f->cslot;
	c = bpf_map_lookup_elem(&hq_fctr, &idx);
	if (!c || !f->tag || c->tag != f->tag)
		c = fresh ? NULL : fctr_alloc(p->now, &key, f);
	if (c) {
		__sync_fetch_and_add(&c->packets, 1);
		__sync_fetch_and_add(&c->bytes, p->len);
		if (res_action(res) == HQ_ACT_DROP)
			__sync_fetch_and_add(&c->drops, 1);
		c->last_ns = p->now;
		c->rule = f->slot;
	}
	return res;
}

/*
 * The egress classifier of a managed link (veth = 0), or of a container's
 * packets at the host side of its veth (veth = 1: TCX ingress there, the
 * container's egress), which counts, polices and marks them there and
 * hands the HTB class to the managed link they leave by in skb->tc_index
 * (its minor, or HQ_TCI_NOCLASS): crossing into the host's namespace clears
 * skb->mark and skb->priority, and forwarding sets the priority from the
 * TOS, but the tc_index of a packet stays. A container's packet is
 * classified with its socket's identity where the socket was made in the
 * container, else with the veth's (hq_veth).
 */
static __always_inline int egress(struct __sk_buff *skb, __u32 off,
				  const int veth)
{
	struct hq_pkt p; /* parse writes every byte the lookup reads */
	struct hq_flow *f;
	struct hq_fctr *c;
	struct hq_stats *st;
	struct hq_counters *rc;
	struct hq_skflow *skf;
	struct bpf_sock *sk;
	__u32 slot, classid, idx, epoch = 0;
	__u64 res, prev;
	int action, dscp, ret, copies;

	st = stats();
	if (st)
		st->packets++;
	if (!veth && skb->tc_index) {
		/* Classified, counted and marked at its container's veth. */
		classid = skb->tc_index;
		if (classid != HQ_TCI_NOCLASS)
			skb->priority = HQ_HTB_MAJOR << 16 | classid;
		return HQ_TC_NEXT;
	}

	ret = parse(skb, off, &p);
	if (ret) {
		if (ret < 0 && st)
			st->parse_errors++;
		return HQ_TC_NEXT;
	}
	if (veth)
		p.veth = skb->ifindex;

	/*
	 * Bytes counted = skb->len: the frame as the qdisc sees it, i.e. the
	 * L2 header plus the IP packet (for GSO packets, all segments).
	 */
	p.len = skb->len;
	p.gen = *(volatile __u32 *)&hq_policy.gen;
	p.now = coarse_ns();
	prev = p.now; /* the flow's packet before, for flow queueing */

	/*
	 * The host's own socket, without flow queueing: its copy of its flow
	 * (hq_sk_flow) spares the flow table lookup. The epoch is read before
	 * the flow entry a new copy is made from.
	 */
	copies = 0;
	if (!veth && !*(volatile __u16 *)&hq_policy.buf[p.gen & 1].fq_default) {
		copies = 1;
		epoch = flow_epoch();
		sk = skflow_sock(skb);
		if (sk) {
			skf = bpf_sk_storage_get(&hq_sk_flow, sk, 0, 0);
			if (skf && skf->gen == p.gen && skf->epoch == epoch &&
			    skflow_same(skf, &p.key)) {
				idx = skf->cslot;
				c = bpf_map_lookup_elem(&hq_fctr, &idx);
				if (c && c->tag == skf->tag) {
					res = skf->res;
					f = NULL;
					goto hit;
				}
			}
		}
	}
	f = flow_get(&p);
	if (f && f->gen == p.gen && f->veth == p.veth) {
		idx = f->cslot;
		c = bpf_map_lookup_elem(&hq_fctr, &idx);
		if (c && c->tag == f->tag) {
			res = pack_result(f);
			/*
			 * The socket is found again: 5.15's verifier loses
			 * track of a flag spilled across the lookup.
			 */
			sk = copies && skflow_keeps(res) ? skflow_sock(skb)
							 : NULL;
			if (sk) {
				skf = bpf_sk_storage_get(
					&hq_sk_flow, sk, 0,
					BPF_SK_STORAGE_GET_F_CREATE);
				if (skf) {
					skf->key = p.key;
					skf->res = res;
					skf->tag = f->tag;
					skf->gen = p.gen;
					skf->epoch = epoch;
					skf->cslot = idx;
				}
			}
hit:
			/* The common case: one flow hit, two atomic adds. */
			__sync_fetch_and_add(&c->packets, 1);
			__sync_fetch_and_add(&c->bytes, p.len);
			prev = c->last_ns;
			c->last_ns = p.now;
			res = police_result(res, p.len, p.now);
			if (res_action(res) == HQ_ACT_DROP)
				__sync_fetch_and_add(&c->drops, 1);
			goto classified;
		}
	}
	if (veth)
		res = hq_flow_slow(skb, veth_ident(p.veth, skb_ident(skb, st)),
				   &p, f, 0);
	else
		res = hq_flow_slow(skb, skb_ident(skb, st), &p, f, 0);
	f = NULL;

classified:
	if (res_action(res) == HQ_ACT_QSOCK)
		res = hq_qsock_result(skb, res, f, &p);
	if (res_action(res) == HQ_ACT_RESV)
		res = hq_resv_result(skb, res, p.gen, off);
	classid = res_classid(res);
	slot = res_slot(res);
	action = res_action(res);
	dscp = res_dscp(res);

	if (slot < HQ_MAX_RULES) {
		if (st)
			st->classified++;
		rc = bpf_map_lookup_elem(&hq_rule_ctr, &slot);
		if (rc) {
			rc->packets++;
			rc->bytes += p.len;
			if (action == HQ_ACT_DROP)
				rc->drops++;
		}
	}

	if (action == HQ_ACT_DROP) {
		if (st)
			st->drops++;
		return HQ_TC_DROP;
	}
	if (action == HQ_ACT_OBSERVE)
		return HQ_TC_NEXT;

	if (p.key.proto == IPPROTO_TCP &&
	    (slot < HQ_MAX_RULES || *(volatile __u32 *)&hq_policy.in_links) &&
	    (hq_rwnd_limit(skb, p.l4off, slot) & HQ_RWND_PACE)) {
		idx = in_ack_classid(slot);
		if (idx)
			classid = idx;
	}
	/* Flow queueing needs the entry the slow path made or updated. */
	if (!f && *(volatile __u16 *)&hq_policy.buf[p.gen & 1].fq_default)
		f = flow_get(&p);
	classid = fq_classid(classid, p.gen, f, p.now, prev, p.len);
	if (veth) {
		/* Only a class of hostqos's HTB tree can be handed on. */
		if ((classid >> 16) != HQ_HTB_MAJOR || !(classid & 0xffff))
			classid = HQ_TCI_NOCLASS;
		skb->tc_index = classid & 0xffff;
	} else if (classid) {
		skb->priority = classid;
	}
	if (dscp >= 0 && (__u8)dscp != p.dscp_in)
		set_dscp(skb, off, p.key.family, dscp & 0x3f);
	return HQ_TC_NEXT;
}

/* For Ethernet devices (veth, physical NICs, bridges). */
SEC("tc")
int hq_tc_egress(struct __sk_buff *skb)
{
	return egress(skb, ETH_HLEN, 0);
}

/* For devices without a link-layer header (tun, wireguard, ipip). */
SEC("tc")
int hq_tc_egress_l3(struct __sk_buff *skb)
{
	return egress(skb, 0, 0);
}

/* A container's packets, at the TCX ingress of its host-side veth. */
SEC("tc")
int hq_veth_in(struct __sk_buff *skb)
{
	return egress(skb, ETH_HLEN, 1);
}

/* ---------------------------------------------------------------------- */
/* TC ingress: receive-side classification, counters, download limits     */
/* ---------------------------------------------------------------------- */

/*
 * Classifies a received packet like the egress classifier classifies the
 * packets of its flow (the same flow entry, the key turned around, rules
 * evaluated with the receiving socket's identity), counts it for the flow
 * and rule, and applies the rule's download limit: UDP over the limit is
 * dropped and counted. Fails open: whatever cannot be done passes.
 */
/*
 * veth = 1: the packets a container receives, at the TCX egress of its
 * host-side veth. They are counted and limited there and not on the
 * managed link they arrived by (a flow that is a container's, f->veth,
 * passes that link's ingress untouched; what the host NATs reaches it
 * under the host's address and counts as the host's).
 */
static __always_inline int ingress(struct __sk_buff *skb, __u32 off,
				   const int veth)
{
	struct hq_pkt p; /* parse writes every byte the lookup reads */
	struct hq_flow *f;
	struct hq_fctr *c = NULL;
	struct hq_stats *st;
	struct hq_counters *rc;
	__u32 slot, idx;
	__u64 res;
	int ret, drop = 0;

	st = stats();
	if (st)
		st->rx_packets++;
	ret = parse(skb, off, &p);
	if (ret) {
		if (ret < 0 && st)
			st->rx_parse_errors++;
		return HQ_TC_NEXT;
	}
	in_reverse(&p);
	p.len = skb->len;
	p.gen = *(volatile __u32 *)&hq_policy.gen;
	p.now = coarse_ns();
	if (veth)
		p.veth = skb->ifindex;

	f = flow_get(&p);
	if (!veth && f && f->veth)
		return HQ_TC_NEXT; /* a container's: counted at its veth */
	if (!veth && !f && *(volatile __u32 *)&hq_policy.veths &&
	    hq_to_container(skb, &p))
		return HQ_TC_NEXT;
	if (!f || f->gen != p.gen || f->veth != p.veth) {
		if (veth)
			res = hq_flow_slow(skb, veth_ident(p.veth, NULL), &p, f,
					   1);
		else
			res = hq_flow_slow(skb, in_ident(skb, &p, st), &p, f,
					   1);
		f = flow_get(&p);
	} else {
		res = pack_result(f);
	}
	if (f) {
		idx = f->cslot;
		c = bpf_map_lookup_elem(&hq_fctr, &idx);
		if (c && c->tag != f->tag)
			c = NULL;
	}
	slot = res_slot(res);

	if (slot < HQ_MAX_RULES)
		drop = hq_in_limit(skb, slot, p.l4off, p.key.proto, f);
	/* The call only where some link has an ingress budget. */
	if (!veth && !drop && *(volatile __u32 *)&hq_policy.in_links)
		drop = hq_link_in_charge(skb, slot, p.key.proto, f);
	if (slot < HQ_MAX_RULES) {
		if (st)
			st->rx_classified++;
		rc = bpf_map_lookup_elem(&hq_rule_ctr_in, &slot);
		if (rc) {
			rc->packets++;
			rc->bytes += p.len;
			if (drop)
				rc->drops++;
		}
	}
	if (slot >= HQ_MAX_RULES && st) {
		st->rx_none_packets++;
		st->rx_none_bytes += p.len;
		if (drop)
			st->rx_none_drops++;
	}
	if (c) {
		__sync_fetch_and_add(&c->rx_packets, 1);
		__sync_fetch_and_add(&c->rx_bytes, p.len);
		if (drop)
			__sync_fetch_and_add(&c->rx_drops, 1);
		c->last_ns = p.now;
	}
	if (drop) {
		if (st)
			st->rx_drops++;
		return HQ_TC_DROP;
	}
	return HQ_TC_NEXT;
}

/* For Ethernet devices (veth, physical NICs, bridges). */
SEC("tc")
int hq_tc_ingress(struct __sk_buff *skb)
{
	return ingress(skb, ETH_HLEN, 0);
}

/* For devices without a link-layer header (tun, wireguard, ipip). */
SEC("tc")
int hq_tc_ingress_l3(struct __sk_buff *skb)
{
	return ingress(skb, 0, 0);
}

/* What a container receives, at the TCX egress of its host-side veth. */
SEC("tc")
int hq_veth_out(struct __sk_buff *skb)
{
	return ingress(skb, ETH_HLEN, 1);
}

/* ---------------------------------------------------------------------- */
/* One socket's flows, classified again (the daemon runs this program)    */
/* ---------------------------------------------------------------------- */

/*
 * Invalidates the flows of one socket (struct hq_forget): a connected
 * socket's one flow by its key, an unconnected one's by a walk of its
 * family's table in the kernel. Every other flow keeps its cached result,
 * so making a socket a qsocket costs the host no re-classification.
 */
SEC("syscall")
int hq_forget_flows(struct hq_forget *a)
{
	struct hq_forget_scan s = {};
	struct hq_flow_key k = {};
	struct hq_flow *f;
	long n;

	s.gen = *(volatile __u32 *)&hq_policy.gen;
	a->count = 0;
	if (a->dport) {
		k.family = a->family == HQ_AF_INET ? HQ_AF_INET : HQ_AF_INET6;
		k.proto = a->proto;
		k.sport = a->sport;
		k.dport = a->dport;
		__builtin_memcpy(k.src, a->src, sizeof(k.src));
		__builtin_memcpy(k.dst, a->dst, sizeof(k.dst));
		f = flow_lookup(&k);
		if (f) {
			forget_flow(f, s.gen);
			a->count = 1;
		}
		return 0;
	}
	s.proto = a->proto;
	s.sport = a->sport;
	s.any = a->any;
	__builtin_memcpy(s.src, a->src, sizeof(s.src));
	/*
	 * Two call sites (the empty asm keeps clang from merging them into
	 * one on a map chosen at run time, which 6.1's verifier refuses:
	 * "tail_call abusing map_ptr").
	 */
	if (a->family == HQ_AF_INET) {
		n = bpf_for_each_map_elem(&hq_flows4, forget4_cb, &s, 0);
	} else {
		n = bpf_for_each_map_elem(&hq_flows6, forget6_cb, &s, 0);
		asm volatile("" : "+r"(n));
	}
	a->count = s.count;
	return 0;
}

/* ---------------------------------------------------------------------- */
/* Map dumps for the daemon (bpf_iter): far cheaper per element than the  */
/* batch syscalls, which copy to user space bucket by bucket.             */
/* ---------------------------------------------------------------------- */

/*
 * Emit each flow of hq_flows4 / hq_flows6 as its key in full form (struct
 * hq_flow_key) followed by its value, so that both dumps have one record
 * layout.
 */
SEC("iter/bpf_map_elem")
int hq_iter_flows4(struct bpf_iter__bpf_map_elem *ctx)
{
	struct seq_file *seq = ctx->meta->seq;
	struct hq_flow_key4 *k4 = ctx->key;
	struct hq_flow *v = ctx->value;
	struct hq_flow_key k;

	if (!k4 || !v)
		return 0;
	flow_key_full(&k, k4);
	bpf_seq_write(seq, &k, sizeof(k));
	bpf_seq_write(seq, v, sizeof(*v));
	return 0;
}

SEC("iter/bpf_map_elem")
int hq_iter_flows6(struct bpf_iter__bpf_map_elem *ctx)
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
