/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Download limits: a rule's limit (hq_in: its window share, ACK pacing,
 * UDP policer and the estimator that corrects the window gain) and a
 * link's ingress budget shared by class priority (hq_link_in); the TCP
 * receive window they lower on egress (hq_rwnd_limit) and the received
 * packets they charge and, for UDP, drop on ingress.
 */
#ifndef HQ_BPF_RXLIMIT_H
#define HQ_BPF_RXLIMIT_H

#include "police.h"

/* Download limits by rule slot; see struct hq_in. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, HQ_MAX_RULES);
	__type(key, __u32);
	__type(value, struct hq_in);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} hq_in SEC(".maps");

/* Ingress budgets of links by ifindex; see struct hq_link_in. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, HQ_MAX_LINKS_IN);
	__type(key, __u32);
	__type(value, struct hq_link_in);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} hq_link_in SEC(".maps");

/*
 * The flows a download limit (a rule's, or a level of a link's ingress
 * budget) is shared by: those active in the last epoch (prev) or this one
 * (cur), the more, and at least one.
 */
static __always_inline __u64 in_active(__u64 prev, __u64 cur)
{
	__u64 n = prev > cur ? prev : cur;

	return n ? n : 1;
}

/*
 * One flow's share of rule slot's download limit, bytes/s in Q10 (with the
 * window gain): rate × gain / active flows; 0 = no limit.
 */
static __always_inline __u64 in_share(__u32 slot)
{
	struct hq_in *in;
	__u64 rate, n, gain;

	if (slot >= HQ_MAX_RULES)
		return 0;
	in = bpf_map_lookup_elem(&hq_in, &slot);
	if (!in)
		return 0;
	rate = *(volatile __u64 *)&in->rate;
	if (!rate)
		return 0;
	n = in_active(in->flows_prev, in->flows);
	gain = in->gain ? in->gain : HQ_IN_GAIN_ONE;
	return rate * gain / n;
}

/* The link's ingress budget of the packet's device, NULL for none. */
static __always_inline struct hq_link_in *link_in(struct __sk_buff *skb)
{
	struct hq_link_in *li;
	__u32 key;

	if (!*(volatile __u32 *)&hq_policy.in_links)
		return NULL;
	key = skb->ifindex;
	li = bpf_map_lookup_elem(&hq_link_in, &key);
	if (!li || !*(volatile __u64 *)&li->rate)
		return NULL;
	return li;
}

/*
 * The level of a link's ingress budget that rule slot's traffic (slot
 * HQ_SLOT_NONE: traffic no rule matches) belongs to: its class priority.
 */
static __always_inline __u32 in_level(struct hq_link_in *li, __u32 slot)
{
	struct hq_in *in;
	__u32 l = li->prio_none;

	if (slot < HQ_MAX_RULES) {
		in = bpf_map_lookup_elem(&hq_in, &slot);
		if (in)
			l = in->prio;
	}
	return l < HQ_IN_LEVELS ? l : HQ_IN_LEVELS - 1;
}

/*
 * One TCP flow's share of its level of the link's ingress budget, bytes/s
 * in Q10 (with the level's window gain); 0 = the link has none.
 */
static __always_inline __u64 link_share(struct __sk_buff *skb, __u32 slot)
{
	struct hq_link_in *li = link_in(skb);
	struct hq_in_level *v;
	__u64 avail, n, gain;

	if (!li)
		return 0;
	v = &li->lv[in_level(li, slot)];
	avail = *(volatile __u64 *)&v->avail;
	if (!avail)
		avail = li->rate;
	n = in_active(v->flows_prev, v->flows);
	gain = v->gain ? v->gain : HQ_IN_GAIN_ONE;
	return avail * gain / n;
}

/*
 * Ends a link budget's epoch when it is over (one CPU wins the swap):
 * measures what each level received, corrects its window gain as struct
 * hq_in's estimator does, and gives each level what the levels above it
 * left: avail = rate − Σ used of higher levels (at least rate /
 * HQ_IN_LEVEL_FLOOR, so a lower class is slowed, never cut off).
 */
static __noinline void link_roll(struct hq_link_in *li, __u64 now)
{
	__u64 start, dt, rate, acc = 0, bytes, used, avail, prev, g;
	struct hq_in_level *v;
	__u32 l;

	start = *(volatile __u64 *)&li->epoch_ns;
	if (now - start < HQ_IN_EPOCH_NS ||
	    __sync_val_compare_and_swap(&li->epoch_ns, start, now) != start)
		return;
	dt = (now - start) / 1000; /* us */
	rate = li->rate;
	li->epoch++;
	for (l = 0; l < HQ_IN_LEVELS; l++) {
		v = &li->lv[l];
		bytes = __sync_lock_test_and_set(&v->epoch_bytes, 0);
		v->flows_prev = __sync_lock_test_and_set(&v->flows, 0);
		used = 0;
		/* A long gap (or the first epoch) measures nothing. */
		if (start && dt && dt < 2 * HQ_IN_EPOCH_NS / 1000)
			used = bytes * 1000000 / dt;
		prev = v->avail;
		g = v->gain ? v->gain : HQ_IN_GAIN_ONE;
		/*
		 * Windows sized on the path's least round trip give the
		 * share without a queue; the gain makes up for delayed
		 * ACKs, but little more (a larger one would build the queue
		 * the budget is for).
		 */
		if (prev && used * 2 > prev) {
			g = g * (prev + used) / (2 * used);
			if (g < HQ_IN_GAIN_MIN)
				g = HQ_IN_GAIN_MIN;
			if (g > HQ_IN_LINK_GAIN_MAX)
				g = HQ_IN_LINK_GAIN_MAX;
		}
		avail = rate > acc ? rate - acc : 0;
		if (avail < rate / HQ_IN_LEVEL_FLOOR)
			avail = rate / HQ_IN_LEVEL_FLOOR;
		if (!avail)
			avail = 1;
		v->gain = g;
		v->used = used;
		v->avail = avail;
		v->ns_q16 = (1000000000ULL << HQ_POLICE_SHIFT) / avail;
		acc += used;
	}
}

/*
 * Charges a received packet of rule slot's flow f (NULL: unknown) to its
 * level of the link's ingress budget. UDP beyond the level's budget is
 * dropped (returns 1); TCP is only counted (its window does the rest). A
 * global function: the verifier checks it once.
 */
__noinline int hq_link_in_charge(struct __sk_buff *skb, __u32 slot, __u32 proto,
				 struct hq_flow *f)
{
	struct hq_link_in *li;
	struct hq_in_level *v;
	__u64 now, len, tau, q;

	if (!skb)
		return 0;
	li = link_in(skb);
	if (!li)
		return 0;
	now = coarse_ns();
	link_roll(li, now);
	v = &li->lv[in_level(li, slot)];
	len = skb->len;
	q = *(volatile __u64 *)&v->ns_q16;
	if (proto == IPPROTO_UDP && q) {
		tau = (HQ_LINK_IN_MIN_BURST * q) >> HQ_POLICE_SHIFT;
		if (tau < HQ_IN_EPOCH_NS / 10)
			tau = HQ_IN_EPOCH_NS / 10;
		if (gcra(&v->tat, (len * q) >> HQ_POLICE_SHIFT, tau, now) ==
		    HQ_ACT_DROP)
			return 1;
	}
	__sync_fetch_and_add(&v->epoch_bytes, len);
	if (f && f->lin_epoch != li->epoch + 1) {
		f->lin_epoch = li->epoch + 1;
		__sync_fetch_and_add(&v->flows, 1);
	}
	return 0;
}

/* hq_rwnd_limit's answer: the window was lowered; the segment is a pure
 * ACK to pace (send it to the slot's ACK leaf, in_ack_classid). */
#define HQ_RWND_CLAMPED 1
#define HQ_RWND_PACE 2

/* The HTB class of rule slot's ACK leaf; 0 = none. */
static __always_inline __u32 in_ack_classid(__u32 slot)
{
	struct hq_in *in;

	if (slot >= HQ_MAX_RULES)
		return 0;
	in = bpf_map_lookup_elem(&hq_in, &slot);
	if (!in || !*(volatile __u64 *)&in->rate)
		return 0;
	return *(volatile __u32 *)&in->ack_classid;
}

/*
 * The window of a flow of rule slot whose ACKs are paced, 0 if they are
 * not: its share of the limit for one round trip srtt (us, without the
 * window gain) is less than HQ_IN_PACE_SEGS full segments of mss bytes,
 * below which the window does not go, and the rule has an ACK leaf. The
 * leaf's rate gives the sender HQ_IN_PACE_SEGS segments per ACK; the
 * window gain (at least 1 here) makes up for ACKs that acknowledge less
 * (window updates, ACKs of single segments): the window is that many
 * segments times the gain, a whole number of segments (a sender sends no
 * partial ones), rounded up at random in proportion to the fraction so
 * that it is right on average.
 */
static __always_inline __u64 in_pace_win(__u32 slot, __u64 srtt, __u64 mss)
{
	struct hq_in *in;
	__u64 rate, n, segs, k;
	__u32 g;

	if (slot >= HQ_MAX_RULES)
		return 0;
	in = bpf_map_lookup_elem(&hq_in, &slot);
	if (!in || !*(volatile __u32 *)&in->ack_classid)
		return 0;
	rate = *(volatile __u64 *)&in->rate;
	if (!rate)
		return 0;
	n = in_active(in->flows_prev, in->flows);
	if (rate / n * srtt / 1000000 >= HQ_IN_PACE_SEGS * mss)
		return 0;
	g = in->gain;
	if (g < HQ_IN_GAIN_ONE)
		g = HQ_IN_GAIN_ONE;
	segs = HQ_IN_PACE_SEGS * (__u64)g; /* Q10 */
	k = segs >> 10;
	if ((bpf_get_prandom_u32() & 1023) < (segs & 1023))
		k++;
	return k * mss;
}

/*
 * Lowers the receive window an outgoing TCP segment of a flow of rule slot
 * `slot` advertises to the flow's share of the slot's download limit
 * (struct hq_in) or of its level of the link's ingress budget (struct
 * hq_link_in), the smaller, for one round trip. The window is scaled by the socket's
 * receive window scale; SYNs (unscaled) are left alone. The TCP checksum
 * is fixed incrementally. Anything missing (socket, limit) leaves the
 * segment as it is. off is the TCP header's offset. Returns
 * HQ_RWND_CLAMPED if it lowered the window, and HQ_RWND_PACE for a pure
 * ACK of a flow whose ACKs are paced (in_pace). A global function: the
 * verifier checks it once, not for every path that reaches it.
 */
__noinline int hq_rwnd_limit(struct __sk_buff *skb, __u32 off, __u32 slot)
{
	struct hq_stats *st;
	struct bpf_sock *sk;
	struct tcp_sock *tp;
	struct tcphdr th;
	__u64 per, lper, srtt, mrtt, rrtt, crtt, win, lwin, minwin, pwin;
	__u32 ws;
	__u16 old, neww;
	int pace;

	if (!skb)
		return 0;
	/* Each flow's share, bytes/s in Q10: of the rule's limit, the link's. */
	per = in_share(slot);
	lper = link_share(skb, slot);
	if (!per && !lper)
		return 0;
	sk = skb->sk;
	if (!sk)
		return 0;
	tp = bpf_skc_to_tcp_sock(sk);
	if (!tp)
		return 0;
	srtt = tp->srtt_us >> 3;
	if (!srtt)
		return 0;
	/*
	 * The path's own round trip: the least the socket has seen. A socket
	 * that only receives measured it at its handshake, perhaps behind a
	 * queue; its receive-side estimate (timestamps) follows the path.
	 */
	mrtt = tp->rtt_min.s[0].v;
	if (!mrtt || mrtt > srtt)
		mrtt = srtt;
	rrtt = tp->rcv_rtt_est.rtt_us >> 3;
	if (rrtt && rrtt < mrtt)
		mrtt = rrtt;
	/*
	 * The round trip the flow sees now. A socket that only receives
	 * never updates srtt after its handshake, so when a queue builds at
	 * the bottleneck (another download filling it) only the receive-side
	 * estimate follows; it counts in timestamp ticks (1 ms), so it is
	 * taken only when it exceeds srtt by more than one.
	 */
	crtt = srtt;
	if (rrtt > srtt + HQ_TS_TICK_US)
		crtt = rrtt;
	ws = BPF_CORE_READ_BITFIELD(tp, rx_opt.rcv_wscale);
	minwin = tp->advmss;
	if (minwin < 536)
		minwin = 536;

	/*
	 * A share's bytes/s for one round trip; no overflow below 1 Tbit/s.
	 * A rule's limit takes the current round trip (its gain corrects
	 * the rest); a link's budget the path's least, so that the window
	 * never pays for a queue at the bottleneck and the queue drains.
	 */
	win = 0;
	if (per)
		win = per / 1024 * crtt / 1000000;
	if (lper) {
		lwin = lper / 1024 * mrtt / 1000000;
		if (!per || lwin < win)
			win = lwin;
	}
	if (win < HQ_IN_PACE_SEGS * minwin)
		win = HQ_IN_PACE_SEGS * minwin;
	win >>= ws;
	if (win > 0xffff)
		return 0;

	if (off > 512 || bpf_skb_load_bytes(skb, off, &th, sizeof(th)))
		return 0;
	if (th.syn)
		return 0;
	/*
	 * A flow that the window cannot hold is paced: its pure ACKs (no
	 * payload, no FIN or RST) go to the rule's ACK leaf, and every
	 * segment carries the pacing window.
	 */
	pace = 0;
	pwin = per ? in_pace_win(slot, srtt, minwin) : 0;
	if (pwin) {
		win = pwin >> ws;
		if (th.ack && !th.fin && !th.rst &&
		    skb->len <= off + (__u32)th.doff * 4)
			pace = HQ_RWND_PACE;
	}
	old = th.window;
	if (bpf_ntohs(old) <= win)
		return pace;
	neww = bpf_htons((__u16)win);
	if (bpf_skb_store_bytes(skb, off + offsetof(struct tcphdr, window),
				&neww, 2, 0))
		return pace;
	bpf_l4_csum_replace(skb, off + offsetof(struct tcphdr, check), old,
			    neww, 2);
	st = stats();
	if (st)
		st->rwnd_clamps++;
	return pace | HQ_RWND_CLAMPED;
}

/*
 * Accounts a packet of payload bytes to the download limit of a slot:
 * the flow (if known) is counted once per epoch, and at the end of an
 * epoch one CPU rolls it and adjusts the window gain (struct hq_in).
 */
static __noinline void in_account(struct hq_in *in, struct hq_flow *f,
				  __u64 payload, __u64 now)
{
	__u64 start, bytes, dt, got, rate, g;
	__u32 flows;

	start = *(volatile __u64 *)&in->epoch_ns;
	if (now - start >= HQ_IN_EPOCH_NS &&
	    __sync_val_compare_and_swap(&in->epoch_ns, start, now) == start) {
		bytes = __sync_lock_test_and_set(&in->epoch_bytes, 0);
		flows = __sync_lock_test_and_set(&in->flows, 0);
		in->flows_prev = flows;
		in->epoch++;
		dt = now - start;
		rate = in->rate;
		g = in->gain ? in->gain : HQ_IN_GAIN_ONE;
		/* A long gap (or the first epoch) measures nothing. */
		if (start && dt < 2 * HQ_IN_EPOCH_NS && rate && bytes) {
			got = bytes * 1000000000ULL / dt;
			/*
			 * Half of the error, linear in got: the gain's fixed
			 * point is the mean rate at the limit however noisy
			 * an epoch's count (a paced flow at 1 Mbit/s gets a
			 * few ACKs an epoch); (rate + got) / (2 got) would
			 * settle the harmonic mean there, above the limit.
			 */
			if (got * 2 > rate) {
				got = got < 2 * rate ? got : 2 * rate;
				g = g * (3 * rate - got) / (2 * rate);
				if (g < HQ_IN_GAIN_MIN)
					g = HQ_IN_GAIN_MIN;
				if (g > HQ_IN_GAIN_MAX)
					g = HQ_IN_GAIN_MAX;
			}
		}
		in->gain = g;
	}
	__sync_fetch_and_add(&in->epoch_bytes, payload);
	if (f && f->in_epoch != in->epoch + 1) {
		f->in_epoch = in->epoch + 1;
		__sync_fetch_and_add(&in->flows, 1);
	}
}

/* The UDP download policer of a slot (the GCRA of police()): HQ_ACT_PASS
 * or HQ_ACT_DROP. */
static __noinline int in_police(struct hq_in *in, __u64 payload, __u64 coarse)
{
	if (!in->ns_q16)
		return HQ_ACT_PASS;
	return gcra(&in->tat, (payload * in->ns_q16) >> HQ_POLICE_SHIFT,
		    in->tau, coarse);
}

/*
 * Applies rule slot's download limit to a received packet of flow f
 * (NULL: unknown) whose L4 header is at off: UDP beyond the limit is
 * dropped (returns 1), the rest is accounted to the limit's estimator
 * (returns 0). A global function: the verifier checks it once.
 */
__noinline int hq_in_limit(struct __sk_buff *skb, __u32 slot, __u32 off,
			   __u32 proto, struct hq_flow *f)
{
	struct hq_in *in;
	struct tcphdr th;
	__u64 payload, now;
	__u32 hl, len;

	if (!skb)
		return 0;
	in = bpf_map_lookup_elem(&hq_in, &slot);
	if (!in || !*(volatile __u64 *)&in->rate)
		return 0;
	/* L4 payload bytes: what the receiving application reads. */
	if (proto == IPPROTO_TCP) {
		if (bpf_skb_load_bytes(skb, off, &th, sizeof(th)))
			return 0;
		hl = th.doff * 4;
	} else if (proto == IPPROTO_UDP) {
		hl = 8;
	} else {
		return 0;
	}
	len = skb->len;
	payload = len > off + hl ? len - off - hl : 0;
	now = coarse_ns();
	if (proto == IPPROTO_UDP && in_police(in, payload, now) == HQ_ACT_DROP)
		return 1;
	in_account(in, f, payload, now);
	return 0;
}

#endif /* HQ_BPF_RXLIMIT_H */
