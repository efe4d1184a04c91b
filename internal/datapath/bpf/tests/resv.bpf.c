//go:build ignore

// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Tests only (bpf_helpers_test.go): the reservation policer of
 * bpf/resv.h alone (resv_police: the t_m/t_p arithmetic and its charges).
 * A TC program, not a syscall one: syscall programs are sleepable, and
 * older kernels (6.1) keep sleepable programs from maps whose values hold
 * a bpf_spin_lock, as hq_resv_state's do. Its arguments follow the
 * frame's (empty) Ethernet header; it returns the verdict; the
 * reservation's state is in hq_resv_state (unpinned in the test).
 */
#include "../resv.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* resv_police()'s arguments. */
struct hqt_resv_args {
	struct hq_resv rv; /* the reservation; its id keys hq_resv_state */
	__s64 t;	   /* the packet's time, ns */
	__u64 len;	   /* L: the IP packet's bytes */
	__u32 segs;	   /* its GSO segments (1 for none) */
	__u32 pad;
};

/* Anchors (never read): export the arguments and the verdict to Go. */
const volatile struct hqt_resv_args hqt_type_args = {};
const volatile enum hq_conformance hqt_type_conformance = 0;

SEC("tc")
int hqt_resv_police(struct __sk_buff *skb)
{
	struct hqt_resv_args a;
	struct hq_resv_state *s;
	__u32 id;

	if (bpf_skb_load_bytes(skb, ETH_HLEN, &a, sizeof(a)))
		return -1;
	id = a.rv.id;
	s = bpf_map_lookup_elem(&hq_resv_state, &id);
	if (!s)
		return -1;
	return resv_police(&a.rv, s, a.t, a.len, a.segs);
}
