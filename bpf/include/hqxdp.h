/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Types and limits of hostqos's XDP shield (internal/datapath/hqxdp.bpf.c):
 * the drop list (blocked and quarantined source prefixes), SYN throttling
 * per link and per source, and protected clients. Defined once here; Go
 * gets them through bpf2go.
 */
#ifndef HQXDP_H
#define HQXDP_H

enum hqx_limits {
	/* Entries of each drop-list trie (IPv4, IPv6); a counter slot each. */
	HQX_BLOCK_ENTRIES = 131072,
	/* Counter/bucket slots: one per entry of both tries. */
	HQX_BLOCK_SLOTS = 262144,
	/* Links with SYN limits. */
	HQX_LINKS = 1024,
	/* Sources tracked for the per-source SYN limit (LRU). */
	HQX_SYN_SOURCES = 65536,
	/* Protected (client address, local port) pairs. */
	HQX_PROTECT_ENTRIES = 65536,
	/* Burst tolerance of a quarantine bucket: this many ns at its rate,
	 * and at least HQX_MIN_BURST_BYTES. */
	HQX_BURST_NS = 20000000,
	HQX_MIN_BURST_BYTES = 3028,
};

/* Global counters (per-CPU array, one element). */
struct hqx_stats {
	__u64 packets;	     /* seen by the program */
	__u64 not_ip;	     /* passed: not IPv4/IPv6 */
	__u64 truncated;     /* passed: headers cut short */
	__u64 blocked;	     /* dropped by a drop-list entry */
	__u64 quarantined;   /* dropped by a quarantine bucket */
	__u64 syn_seen;	     /* pure SYNs on links with SYN limits */
	__u64 syn_dropped;   /* pure SYNs dropped by a SYN limit */
	__u64 syn_protected; /* pure SYNs of protected clients */
};

/* Drop-list trie keys; value: struct hqx_entry. */
struct hqx_key4 {
	__u32 prefixlen;
	__u32 addr; /* network order */
};

struct hqx_key6 {
	__u32 prefixlen;
	__u8 addr[16];
};

/* Host entries (/32, /128) live in hash maps keyed by the address:
 * one hash lookup instead of a walk down a large trie. */
struct hqx_addr6 {
	__u8 addr[16];
};

/* How many shorter prefixes each trie holds: the program skips an
 * empty trie. */
struct hqx_tries {
	__u32 n4;
	__u32 n6;
};

struct hqx_entry {
	__u32 slot; /* counter and bucket slot */
	__u32 pad;
	__u64 rate; /* quarantine rate in bytes/s; 0 = drop everything */
};

/* Per-slot counters (per-CPU array). */
struct hqx_counters {
	__u64 packets;
	__u64 bytes;
	__u64 dropped;
};

/* Per-slot quarantine bucket: GCRA theoretical arrival time (ns). */
struct hqx_bucket {
	__u64 tat;
};

/* SYN limits of a link (hash by ifindex) and the link's bucket. */
struct hqx_syn {
	__u64 interval_ns;     /* 1e9 / link rate; 0 = no link limit */
	__u64 tau_ns;	       /* burst tolerance of the link limit */
	__u64 src_interval_ns; /* 1e9 / per-source rate; 0 = none */
	__u64 src_tau_ns;
	__u64 tat;     /* the link bucket */
	__u64 seen;    /* pure SYNs */
	__u64 dropped; /* pure SYNs dropped */
};

/* Per-source SYN bucket key (IPv4 as ::ffff:a.b.c.d; IPv6 by /64). */
struct hqx_src_key {
	__u32 ifindex;
	__u8 addr[16];
};

/* Protected client: exact address and local TCP port (0 = any port). */
struct hqx_protect_key {
	__u8 addr[16]; /* IPv4 as ::ffff:a.b.c.d */
	__u16 port;    /* host order */
	__u16 pad;
};

#endif
