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

/* A result that matches no rule and passes (pack_result layout). */
#define HQ_RES_NONE                                                            \
	((__u64)HQ_SLOT_NONE << 32 | (__u64)HQ_ACT_PASS << 48 |                \
	 (__u64)(__u8)-1 << 56)

#endif /* HQ_BPF_RESULT_H */
