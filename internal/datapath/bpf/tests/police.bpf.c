//go:build ignore

// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Tests only (bpf_helpers_test.go): the rule policer of bpf/police.h
 * alone, as syscall programs the test runs with its arguments as context:
 * gcra() on a bucket time of the caller's, and police_result() on a
 * result word, with the policers in hq_police (unpinned in the test).
 */
#include "../police.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* gcra()'s arguments and answer. */
struct hqt_gcra_args {
	__u64 tat;  /* in: the bucket's time; out: after the packet */
	__u64 cost; /* ns */
	__u64 tau;  /* ns */
	__u64 now;  /* the packet's coarse time */
	enum hq_action verdict; /* out: HQ_ACT_PASS or HQ_ACT_DROP */
	__u32 pad;
};

/* police_result()'s arguments and answer. */
struct hqt_police_args {
	__u64 res; /* in: a result word; out: as the policer leaves it */
	__u64 now; /* the packet's coarse time */
	__u32 len; /* bytes */
	__u32 pad;
};

SEC("syscall")
int hqt_gcra(struct hqt_gcra_args *a)
{
	__u64 tat = a->tat;

	a->verdict = gcra(&tat, a->cost, a->tau, a->now);
	a->tat = tat;
	return 0;
}

SEC("syscall")
int hqt_police_result(struct hqt_police_args *a)
{
	a->res = police_result(a->res, a->len, a->now);
	return 0;
}
