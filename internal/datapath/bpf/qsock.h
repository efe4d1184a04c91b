/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * QSockets: the qsocket table (hq_qsock) and the links' qsocket schedulers
 * (hq_qsched); how a qsocket claims its flows, is counted and rated, and
 * how a scheduled qsocket's datagram is given a band or dropped (EDF lossy
 * and lossless, DWCS with its loss window).
 */
#ifndef HQ_BPF_QSOCK_H
#define HQ_BPF_QSOCK_H

#include "flow.h"
#include "ident.h"
#include "result.h"

/*
 * qsockets by id (struct hq_qsock); ids are handed out by the daemon,
 * which writes the entries in place (memory-mapped) so that a change never
 * loses a count.
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, HQ_MAX_QSOCK);
	__type(key, __u32);
	__type(value, struct hq_qsock);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} hq_qsock SEC(".maps");

/* Links' qsocket schedulers by ifindex; see struct hq_qsched. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, HQ_MAX_QSCHED_LINKS);
	__type(key, __u32);
	__type(value, struct hq_qsched);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} hq_qsched SEC(".maps");

/*
 * A closed qsocket frees its hq_qsock entry (cookie 0); the counts stay
 * until the daemon hands the id out again.
 */
static __noinline void qsock_release(struct bpf_sock *sk, __u64 cookie)
{
	struct hq_ident *id;
	struct hq_qsock *q;
	__u32 qid;

	if (!sk)
		return;
	id = bpf_sk_storage_get(&hq_sk_ident, sk, 0, 0);
	if (!id || !id->qsock)
		return;
	qid = id->qsock;
	q = bpf_map_lookup_elem(&hq_qsock, &qid);
	if (q && q->cookie == cookie)
		__sync_val_compare_and_swap(&q->cookie, cookie, 0);
}

/*
 * The flow of a qsocket (id->qsock) is classified by the qsocket
 * (HQ_ACT_QSOCK, the id in classid) unless the qsocket is an ordinary
 * user's and a rule matched: the admin's rules come first. The entry must
 * be this socket's: on egress its cookie is the packet's socket cookie; on
 * ingress (no socket on the skb) the one the identity was tagged with.
 */
static __noinline void qsock_claim(struct __sk_buff *skb,
				   const struct hq_ident *id, struct hq_flow *f,
				   int rx)
{
	struct hq_qsock *q;
	__u64 cookie;
	__u32 qid;

	if (!skb || !id || !f)
		return;
	qid = id->qsock;
	q = bpf_map_lookup_elem(&hq_qsock, &qid);
	if (!q)
		return;
	cookie = rx ? id->qcookie : bpf_get_socket_cookie(skb);
	if (!cookie || q->cookie != cookie)
		return;
	if (q->user && f->slot != HQ_SLOT_NONE)
		return;
	f->action = HQ_ACT_QSOCK;
	f->slot = HQ_SLOT_NONE;
	f->classid = qid;
	f->dscp = -1;
}

/*
 * The band of a message with slack ns before its deadline: < 1 ms → 0,
 * then one band per doubling (1–2 ms → 1 … 32–64 ms → 6), ≥ 64 ms → 7.
 */
static __always_inline __u32 qsched_band(__u64 slack)
{
	__u64 ms = slack / 1000000;
	__u32 b = 0;

	if (ms >= 64)
		return HQ_QSCHED_BANDS - 1;
	while (ms && b < HQ_QSCHED_BANDS - 1) {
		ms >>= 1;
		b++;
	}
	return b;
}

#define HQ_ROOM_NONE 0x7fffffffffffffffLL

/*
 * What a message of tx ns in band b would meet: its predicted departure
 * (*fin: when bands 0..b's backlog has left at the class's rate, then the
 * message) and the least room of the messages it would overtake (bands
 * after b that still hold some): more than that and one of them, promised
 * its deadline, would be late.
 */
static __always_inline void qsched_view(struct hq_qsched *qs, __u32 b,
					__u64 now, __u64 tx, __u64 *fin,
					__s64 *room)
{
	__s64 r = HQ_ROOM_NONE;
	__u64 v;
	__u32 j;

	b &= HQ_QSCHED_BANDS - 1;
	bpf_spin_lock(&qs->lock);
	v = qs->vtime[b];
	for (j = 0; j < HQ_QSCHED_BANDS; j++)
		if (j > b && qs->lastfin[j] > now && qs->room[j] < r)
			r = qs->room[j];
	bpf_spin_unlock(&qs->lock);
	*fin = (v > now ? v : now) + tx;
	*room = r;
}

/*
 * A message of tx ns sent in band b, predicted to leave at fin with room
 * (HQ_ROOM_NONE: no deadline promised): it delays bands b..7 and uses up
 * room of the messages of the bands after b.
 */
static __always_inline void qsched_admit(struct hq_qsched *qs, __u32 b,
					 __u64 now, __u64 tx, __u64 fin,
					 __s64 room)
{
	__u32 j;
	int held;

	bpf_spin_lock(&qs->lock);
	for (j = 0; j < HQ_QSCHED_BANDS; j++) {
		if (j < b)
			continue;
		held = qs->lastfin[j] > now;
		qs->vtime[j] = (qs->vtime[j] > now ? qs->vtime[j] : now) + tx;
		if (j > b) {
			if (held)
				qs->room[j] -= tx;
			continue;
		}
		if (!held || room < qs->room[j])
			qs->room[j] = room;
		qs->lastfin[j] = fin;
	}
	bpf_spin_unlock(&qs->lock);
}

/*
 * DWCS's loss window of q: the message (frame) at position seq leaves the
 * window of the last old; lost says whether it was lost. Returns the
 * losses among the old-1 before it (what the window holds without it).
 */
static __always_inline __u32 dwcs_window(struct hq_qsock *q, int push, int lost)
{
	__u32 old = q->old, pos, w;
	__u64 bit;

	if (!old || old > HQ_DWCS_WINDOW)
		return 0;
	pos = q->seq % old;
	w = pos / 64;
	/* clang knows w < 16 here; the verifier must see the mask. */
	asm volatile("" : "+r"(w));
	w &= HQ_DWCS_WINDOW / 64 - 1;
	bit = 1ULL << (pos % 64);
	if (!push)
		return q->lost - ((q->win[w] & bit) ? 1 : 0);
	if (q->win[w] & bit)
		q->lost--;
	if (lost) {
		q->win[w] |= bit;
		q->lost++;
	} else {
		q->win[w] &= ~bit;
	}
	q->seq++;
	return q->lost;
}

/*
 * The host-wide scheduler's decision for a datagram of a scheduled qsocket
 * (sched other than fifo): its attributes come from skb->tstamp
 * (enum hq_txtime, cleared here). The predicted departure is the link's
 * virtual finish time at the qsched class's admitted rate: max(now, V) +
 * len/R. EDF lossy drops a droppable message predicted after its deadline
 * (less drop priority × len/R: higher drop priorities go first); DWCS
 * does so while its window has a loss left (oln of any old consecutive),
 * else sends it late; EDF lossless sends all. A frame shares the fate of
 * its first message; a non-droppable message is never dropped. Returns
 * 1 to drop; *classid gets the band's leaf (unchanged without a qsched
 * subtree on the link).
 */
static __noinline int qsock_sched(struct __sk_buff *skb, struct hq_qsock *q,
				  __u64 len, __u32 *classid)
{
	struct hq_qsched *qs;
	__u64 ts, flags, dl = 0, now, fin, tx = 0, guard, slack;
	__s64 room;
	__u32 ifindex, band, dp, sched;
	int has_dl, nodrop, miss, drop = 0, fresh = 1, in_frame, window = 0;

	if (!skb || !q || !classid)
		return 0;
	sched = q->sched;
	ts = skb->tstamp;
	flags = 0;
	if (ts & HQ_TXT_MARK) {
		flags = ts & HQ_TXT_FLAGS;
		skb->tstamp = 0;
	}
	now = bpf_ktime_get_ns();
	has_dl = flags & HQ_TXT_DEADLINE;
	if (has_dl)
		dl = ts & ~(__u64)HQ_TXT_FLAGS;
	nodrop = flags & HQ_TXT_NODROP;
	dp = (flags & HQ_TXT_PRIO_MASK) >> HQ_TXT_PRIO_SHIFT;

	ifindex = skb->ifindex;
	qs = bpf_map_lookup_elem(&hq_qsched, &ifindex);
	if (qs)
		tx = (len * qs->ns_q16) >> 16;

	if (__sync_val_compare_and_swap(&q->busy, 0, 1) != 0) {
		__sync_fetch_and_add(&q->lock_misses, 1);
		if (qs) {
			*classid = qs->classid0 + HQ_QSCHED_BANDS - 1;
			qsched_view(qs, HQ_QSCHED_BANDS - 1, now, tx, &fin,
				    &room);
			qsched_admit(qs, HQ_QSCHED_BANDS - 1, now, tx, fin,
				     HQ_ROOM_NONE);
		}
		return 0;
	}
	in_frame = q->frame & HQ_QF_IN;
	if (sched == HQ_SCHED_DWCS && !has_dl &&
	    !(in_frame && !(flags & HQ_TXT_FRAME_START))) {
		/* d_k = max(d_{k-1}, arrival) + ipg */
		dl = (q->dl_prev > now ? q->dl_prev : now) + q->ipg_ns;
		q->dl_prev = dl;
		has_dl = 1;
	} else if (sched == HQ_SCHED_DWCS && !has_dl) {
		dl = q->dl_prev; /* the rest of a frame: the frame's deadline */
		has_dl = dl != 0;
	}
	band = HQ_QSCHED_BANDS - 1;
	if (has_dl) {
		slack = dl > now ? dl - now : 0;
		band = qsched_band(slack);
		/* DWCS: a stream with no loss left comes first among equals. */
		if (sched == HQ_SCHED_DWCS && band &&
		    dwcs_window(q, 0, 0) >= q->oln)
			band--;
	}
	fin = now;
	room = HQ_ROOM_NONE;
	if (qs)
		qsched_view(qs, band, now, tx, &fin, &room);
	/*
	 * HTB may send what other classes hold on their own tokens first:
	 * the link's margin (the daemon's, from the HTB tree). A droppable
	 * message of drop priority p also needs p of its own times.
	 */
	guard = qs ? qs->margin : 0;
	if (!nodrop)
		guard += dp * tx;
	/* It would be late, or make a message promised its deadline late. */
	miss = has_dl && (fin + guard > dl || room < (__s64)tx);

	if (in_frame && !(flags & HQ_TXT_FRAME_START)) {
		/* The rest of a frame: its first message decided. */
		fresh = 0;
		drop = (q->frame & HQ_QF_DROP) && !nodrop;
		if (flags & HQ_TXT_FRAME_END)
			q->frame = 0;
	} else if (sched == HQ_SCHED_EDF_LOSSY) {
		drop = miss && !nodrop;
	} else if (sched == HQ_SCHED_DWCS) {
		window = 1;
		drop = miss && !nodrop && dwcs_window(q, 0, 0) < q->oln;
	}
	if (fresh && (flags & HQ_TXT_FRAME_START) &&
	    !(flags & HQ_TXT_FRAME_END))
		q->frame = HQ_QF_IN | (drop ? HQ_QF_DROP : 0);
	else if (fresh)
		q->frame = 0;
	if (window)
		dwcs_window(q, 1, drop);
	if (drop) {
		__sync_fetch_and_add(
			fresh ? &q->late_dropped : &q->frame_dropped, 1);
		__sync_fetch_and_add(&q->dropped_bytes, len);
	} else if (miss) {
		__sync_fetch_and_add(&q->late, 1);
		if (sched == HQ_SCHED_DWCS)
			__sync_fetch_and_add(&q->violations, 1);
		/*
		 * Sent though it will miss (lossless, non-droppable, DWCS with
		 * no loss left): it goes last and is promised nothing, so that
		 * no message that can still be on time is made late.
		 */
		if (band != HQ_QSCHED_BANDS - 1 && qs)
			qsched_view(qs, HQ_QSCHED_BANDS - 1, now, tx, &fin,
				    &room);
		band = HQ_QSCHED_BANDS - 1;
		has_dl = 0;
	}
	__sync_lock_test_and_set(&q->busy, 0);
	if (drop)
		return 1;
	if (qs) {
		*classid = qs->classid0 + band;
		qsched_admit(qs, band, now, tx, fin,
			     has_dl ? (__s64)(dl - fin) : HQ_ROOM_NONE);
	}
	return 0;
}

/*
 * The result of a packet of a qsocket's flow (action HQ_ACT_QSOCK, the id
 * in the classid): the qsocket's class and DSCP as they are now (qchange
 * takes effect at the next packet), counted. A flow whose entry is no
 * longer its socket's (the socket closed, the 5-tuple reused) is evaluated
 * again at its next packet (f, when known) and passes unchanged now.
 */
/* A global function (verified once; see hq_flow_slow). */
__noinline __u64 hq_qsock_result(struct __sk_buff *skb, __u64 res,
				 struct hq_flow *f, const struct hq_pkt *p)
{
	struct hq_qsock *q;
	__u64 start, bytes, dt, now, len;
	__u32 qid = res_classid(res), gen, classid;

	if (!skb || !p)
		return HQ_RES_NONE;
	now = p->now;
	len = p->len;
	gen = p->gen;
	q = bpf_map_lookup_elem(&hq_qsock, &qid);
	if (!q || !q->cookie || q->cookie != bpf_get_socket_cookie(skb)) {
		if (f) {
			f->gen = gen - 1;
			flow_changed();
		}
		return HQ_RES_NONE;
	}
	classid = q->classid;
	if (q->sched > HQ_SCHED_FIFO && p->key.proto != IPPROTO_TCP &&
	    qsock_sched(skb, q, len, &classid))
		return res_make(0, HQ_SLOT_NONE, HQ_ACT_DROP, -1);
	__sync_fetch_and_add(&q->packets, 1);
	__sync_fetch_and_add(&q->bytes, len);
	if (!q->first_ns)
		q->first_ns = now;
	q->last_ns = now;
	start = *(volatile __u64 *)&q->win_ns;
	if (now - start >= HQ_QSOCK_WIN_NS &&
	    __sync_val_compare_and_swap(&q->win_ns, start, now) == start) {
		bytes = __sync_lock_test_and_set(&q->win_bytes, 0);
		dt = now - start;
		/* The first window, or one after a pause of 2 s: no rate. */
		q->rate = start && dt < 2 * HQ_QSOCK_WIN_NS
				  ? bytes * 1000000000ULL / dt
				  : 0;
	}
	__sync_fetch_and_add(&q->win_bytes, len);
	return res_make(classid, HQ_SLOT_NONE, HQ_ACT_PASS, q->dscp);
}

#endif /* HQ_BPF_QSOCK_H */
