/* Shared by the examples: address parsing and the qinfo summary line. */
#ifndef EXAMPLES_COMMON_H
#define EXAMPLES_COMMON_H

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <hostqos/qsock.h>

static inline int parse_dst(const char *addr, const char *port,
			    struct sockaddr_storage *ss, socklen_t *len)
{
	struct sockaddr_in *s4 = (struct sockaddr_in *)ss;
	struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;

	memset(ss, 0, sizeof(*ss));
	if (inet_pton(AF_INET, addr, &s4->sin_addr) == 1) {
		s4->sin_family = AF_INET;
		s4->sin_port = htons((unsigned short)atoi(port));
		*len = sizeof(*s4);
		return AF_INET;
	}
	if (inet_pton(AF_INET6, addr, &s6->sin6_addr) == 1) {
		s6->sin6_family = AF_INET6;
		s6->sin6_port = htons((unsigned short)atoi(port));
		*len = sizeof(*s6);
		return AF_INET6;
	}
	fprintf(stderr, "not an IPv4 or IPv6 address: %s\n", addr);
	exit(2);
}

static inline struct timespec mono_after(long ns)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	t.tv_nsec += ns % 1000000000L;
	t.tv_sec += ns / 1000000000L + t.tv_nsec / 1000000000L;
	t.tv_nsec %= 1000000000L;
	return t;
}

static inline void print_info(int fd)
{
	struct qos_info in;

	if (qinfo(fd, &in) < 0) {
		fprintf(stderr, "qinfo: %s\n", qstrerror());
		exit(1);
	}
	printf("qinfo id=%u class=%s dscp=%d sent=%llu sent_bytes=%llu dropped=%llu late=%llu "
	       "packets=%llu bytes=%llu rate_bps=%llu qdelay_mean_ns=%llu qdelay_p99_ns=%llu samples=%u "
	       "sched_late=%llu sched_dropped=%llu sched_frame_dropped=%llu sched_violations=%llu\n",
	       in.id, in.class_name, in.dscp, (unsigned long long)in.sent_msgs,
	       (unsigned long long)in.sent_bytes, (unsigned long long)in.dropped_msgs,
	       (unsigned long long)in.late_msgs, (unsigned long long)in.packets,
	       (unsigned long long)in.bytes, (unsigned long long)in.rate_bps,
	       (unsigned long long)in.qdelay_mean_ns, (unsigned long long)in.qdelay_p99_ns,
	       in.qdelay_samples, (unsigned long long)in.sched_late,
	       (unsigned long long)in.sched_dropped, (unsigned long long)in.sched_frame_dropped,
	       (unsigned long long)in.sched_violations);
	fflush(stdout);
}

#endif
