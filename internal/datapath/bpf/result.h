/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The packed result word: a flow's cached classification (classid, rule
 * slot, action, DSCP) as one 64-bit register, how it is read out of a
 * flow entry (pack_result), taken apart (res_*) and put together. No maps.
 */
#ifndef HQ_BPF_RESULT_H
#define HQ_BPF_RESULT_H

#include "common.h"

/*
 * The cached classification of a flow, packed into one register: classid
 * | slot << 32 | action << 48 | (u8)dscp << 56, which is how the four
 * fields lie in memory (little endian), so it is one load.
 */
#define HQ_RES_OFF HQ_OFF(hq_flow, classid)
_Static_assert(HQ_RES_OFF % 8 == 0 && HQ_OFF(hq_flow, slot) == HQ_RES_OFF + 4 &&
		       HQ_OFF(hq_flow, action) == HQ_RES_OFF + 6 &&
		       HQ_OFF(hq_flow, dscp) == HQ_RES_OFF + 7,
	       "hq_flow's cached result must form one 64-bit word");

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "pack_result assumes a little-endian target"
#endif

static __always_inline __u64 pack_result(const struct hq_flow *f)
{
	return *(const __u64 *)&f->classid;
}

/* The HTB class (skb->priority; HQ_ACT_QSOCK: the qsocket id), 0 = none. */
static __always_inline __u32 res_classid(__u64 res)
{
	return (__u32)res;
}

/* The matching rule's slot, HQ_SLOT_NONE when no rule matched. */
static __always_inline __u32 res_slot(__u64 res)
{
	return (__u16)(res >> 32);
}

/* What to do with the packet (enum hq_action). */
static __always_inline __u8 res_action(__u64 res)
{
	return (__u8)(res >> 48);
}

/* The DSCP to write, -1 to leave the packet's. */
static __always_inline __s8 res_dscp(__u64 res)
{
	return (__s8)(res >> 56);
}

/* res with its action replaced by action (enum hq_action). */
static __always_inline __u64 res_with_action(__u64 res, __u64 action)
{
	return (res & ~(0xffULL << 48)) | action << 48;
}

/* A result from its four fields (dscp -1: leave). */
static __always_inline __u64 res_make(__u32 classid, __u16 slot, __u8 action,
				      __s8 dscp)
{
	return (__u64)classid | (__u64)slot << 32 | (__u64)action << 48 |
	       (__u64)(__u8)dscp << 56;
}

/* A result that matches no rule and passes. */
#define HQ_RES_NONE res_make(0, HQ_SLOT_NONE, HQ_ACT_PASS, -1)

#endif /* HQ_BPF_RESULT_H */
