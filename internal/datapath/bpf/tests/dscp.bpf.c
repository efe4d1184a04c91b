//go:build ignore

// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Tests only (bpf_helpers_test.go): set_dscp() of bpf/parse.h alone, as a
 * TC program. The frame's first three bytes (in its destination MAC) say
 * what to do: the family (HQ_AF_INET, HQ_AF_INET6), the DSCP to write and
 * the offset of the IP header (ETH_HLEN on an Ethernet link).
 */
#include "../parse.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

SEC("tc")
int hqt_set_dscp(struct __sk_buff *skb)
{
	void *data = (void *)(long)skb->data;
	void *end = (void *)(long)skb->data_end;
	__u8 *arg = data;

	if ((void *)(arg + 3) > end)
		return 1;
	set_dscp(skb, arg[2], arg[0], arg[1]);
	return 0;
}
