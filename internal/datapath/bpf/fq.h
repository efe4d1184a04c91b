/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Flow queueing inside a service class, built from HTB alone: with it on
 * (hq_buf.fq_default != 0) the general leaf of every class is an inner
 * class with a sparse-flow leaf and HQ_FQ_BUCKETS flow buckets under it
 * (shaper.FlowQueues). The classifier picks the child here:
 *
 *   - a flow is sparse until it sends more than HQ_FQ_SPARSE_BYTES within
 *     one window of HQ_FQ_WIN_SHIFT (about 134 ms); then it is bulk until
 *     it has been silent for HQ_FQ_GAP_NS. Sparse packets go to the
 *     sparse leaf, which HTB serves first (it has a guaranteed rate that
 *     such flows never exhaust, and green classes go before borrowing
 *     ones);
 *   - a bulk flow keeps one bucket for its life, handed out round robin
 *     by the flow's counter tag (consecutive flows get different buckets),
 *     and HTB serves the buckets round robin by quantum: backlogged flows
 *     share the class's rate and one flow's queue does not delay another's.
 *
 * A flow only moves from sparse to bulk while it sends (its earlier
 * packets, in the sparse leaf, leave first: no reordering), and from bulk
 * back to sparse only after a silence long enough for its bucket to have
 * drained at any rate the class keeps up for one flow.
 *
 * State: one 32-bit word in the flow entry (struct hq_flow.fq), written
 * without atomics (a lost update between two CPUs only misjudges a packet
 * as sparse or bulk):
 *   bits 0..2   bucket (0..HQ_FQ_BUCKETS-1)
 *   bit  3      bulk
 *   bit  4      set once the word is initialised
 *   bits 8..19  bytes in the current window, in 64-byte units (saturating)
 *   bits 20..31 window start, in 2^20 ns units modulo 4096
 */
#ifndef HQ_BPF_FQ_H
#define HQ_BPF_FQ_H

#include "common.h"

#define HQ_FQ_WIN_SHIFT 27 /* window of 2^27 ns, about 134 ms */
#define HQ_FQ_SPARSE_BYTES 4096
#define HQ_FQ_GAP_NS 200000000ULL /* 200 ms of silence: sparse again */
#define HQ_FQ_BULK 0x8
#define HQ_FQ_INIT 0x10

/* Minor of child k (0 sparse, 1.. buckets) of class leaf minor. */
static __always_inline __u32 fq_child(__u32 minor, __u32 k)
{
	return HQ_FQ_BASE + (minor - HQ_LEAF_BASE) * HQ_FQ_STRIDE + k;
}

/*
 * The child (0 sparse, 1..HQ_FQ_BUCKETS a bucket) for a packet of len
 * bytes of flow f at time now; prev is the time of the flow's packet
 * before (now when unknown). f NULL: a flow without an entry, sparse.
 */
static __always_inline __u32 fq_pick(struct hq_flow *f, __u64 now, __u64 prev,
				     __u64 len)
{
	__u32 s, win, bytes, units;

	if (!f)
		return 0;
	s = f->fq;
	if (!(s & HQ_FQ_INIT))
		s = HQ_FQ_INIT | (__u32)(f->tag ? f->tag : f->first_ns >> 10) %
					 HQ_FQ_BUCKETS;
	if (now - prev >= HQ_FQ_GAP_NS)
		s &= ~(__u32)HQ_FQ_BULK;
	win = (now >> 20) & 0xfff;
	bytes = (s >> 8) & 0xfff;
	if (((win - (s >> 20)) & 0xfff) >= (1 << (HQ_FQ_WIN_SHIFT - 20)))
		bytes = 0;
	units = (len + 63) >> 6;
	if (units > 0xfff)
		units = 0xfff;
	bytes += units;
	if (bytes > 0xfff)
		bytes = 0xfff;
	if (bytes > (HQ_FQ_SPARSE_BYTES >> 6))
		s |= HQ_FQ_BULK;
	if (bytes == units) /* a new window starts with this packet */
		s = (s & 0xff) | win << 20;
	s = (s & 0xfff000ff) | bytes << 8;
	f->fq = s;
	if (s & HQ_FQ_BULK)
		return 1 + (s & 7);
	return 0;
}

/*
 * The classid a packet leaves by with flow queueing: classid (0 = none,
 * the default class) unchanged unless it names a class's general leaf,
 * which becomes the child fq_pick chose.
 */
static __always_inline __u32 fq_classid(__u32 classid, __u32 gen,
					struct hq_flow *f, __u64 now,
					__u64 prev, __u64 len)
{
	__u32 def = *(volatile __u16 *)&hq_policy.buf[gen & 1].fq_default;
	__u32 minor;

	if (!def)
		return classid;
	if (!classid)
		minor = def;
	else if ((classid >> 16) == HQ_HTB_MAJOR)
		minor = classid & 0xffff;
	else
		return classid;
	if (minor < HQ_LEAF_BASE || minor > HQ_LEAF_BASE + HQ_MAX_CLASS)
		return classid;
	return HQ_HTB_MAJOR << 16 | fq_child(minor, fq_pick(f, now, prev, len));
}

#endif /* HQ_BPF_FQ_H */
