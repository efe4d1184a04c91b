/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * <hostqos/qsock.h> — QSockets: the application API of hostqos.
 *
 * A qsocket is a socket registered with hostqosd: the host's classifier
 * gives its traffic a class (DSCP mark, HTB class) from its next packet,
 * and the library schedules its messages at the source by per-message
 * attributes (deadline, drop priority, frame boundaries). See qsock(3) and
 * docs/qsockets.md.
 *
 * Every call returns -1 on failure with errno set, and a message saying
 * why, for the calling thread, in qstrerror().
 *
 * Link with `pkg-config --cflags --libs hostqos`.
 */
#ifndef HOSTQOS_QSOCK_H
#define HOSTQOS_QSOCK_H

#include <stdint.h>
#include <time.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

#define HOSTQOS_QSOCK_VERSION 2

/* Longest class name, with its terminating NUL. */
#define QOS_NAMELEN 64

/* A qsocket's message scheduler. */
enum qos_sched {
	QOS_SCHED_FIFO = 0,	    /* send in order (optionally paced at rate) */
	QOS_SCHED_DWCS = 1,	    /* window-constrained: ipg, oln out of old */
	QOS_SCHED_EDF_LOSSY = 2,    /* drop at the source what would be late */
	QOS_SCHED_EDF_LOSSLESS = 3, /* send all, late ones late */
};

/* DWCS attributes: one message every ipg_us; at most oln of every old
 * consecutive messages may be lost. */
struct q_dwcs_attr {
	uint32_t ipg_us;
	uint32_t oln;
	uint32_t old;
};

/* A qsocket's QoS. Start from qos_params_init(). */
struct qos_params {
	/* qsockinit(): the link to prepare and its egress rate ("" = unset). */
	char dev[IF_NAMESIZE];
	char egress_rate[32];
	/* The class ("" = the class of priority, else class default). */
	char class_name[QOS_NAMELEN];
	int priority;  /* picks the class when class_name is "", -1 = unset */
	int dscp;      /* overrides the class's DSCP (root or group hostqos), -1 = unset */
	/* bit/s: fifo paces its messages at it (0 = none); dwcs and edf-*
	 * are served at it by the host's scheduler (0 = 1 Mbit/s). */
	uint64_t rate;
	enum qos_sched scheduler;
	struct q_dwcs_attr dwcs; /* QOS_SCHED_DWCS only */
};

/* packet_flags.flags */
#define QPF_NON_DROPPABLE 0x1u /* never dropped by a lossy scheduler */
#define QPF_FRAME_START 0x2u   /* first message of a frame */
#define QPF_FRAME_END 0x4u     /* last message of a frame */

/* Highest packet_flags.drop_priority. */
#define QPF_DROP_PRIORITY_MAX 7

/* One message's attributes (qsend, qsendto). */
struct packet_flags {
	/* Absolute CLOCK_MONOTONIC deadline; {0, 0} = none. */
	struct timespec deadline;
	/* 0..QPF_DROP_PRIORITY_MAX: among droppable messages of equal
	 * urgency, higher is dropped first. */
	uint8_t drop_priority;
	uint32_t flags; /* QPF_* */
};

/*
 * How a message's attributes reach the host's scheduler (the kernel): on a
 * datagram qsocket whose scheduler is not fifo, the library sets SO_TXTIME
 * (CLOCK_MONOTONIC) and qsend/qsendto pass one SCM_TXTIME control message
 * per message. Its 64-bit value is the deadline in CLOCK_MONOTONIC
 * nanoseconds rounded down to 256 ns (the send time when the message has
 * none) with the low 8 bits replaced by these flags. hostqosd's classifier
 * reads it from the packet and clears it. Other languages that speak the
 * daemon's protocol pass the same (docs/qsockets.md).
 */
#define QSOCK_TXTIME_HAS_DEADLINE 0x01u	 /* the time is a deadline */
#define QSOCK_TXTIME_NON_DROPPABLE 0x02u /* QPF_NON_DROPPABLE */
#define QSOCK_TXTIME_FRAME_START 0x04u	 /* QPF_FRAME_START */
#define QSOCK_TXTIME_FRAME_END 0x08u	 /* QPF_FRAME_END */
#define QSOCK_TXTIME_PRIO_SHIFT 4	 /* drop priority in bits 4..6 */
#define QSOCK_TXTIME_PRIO_MASK 0x70u
#define QSOCK_TXTIME_MARKER 0x80u     /* always set: hostqos's encoding */
#define QSOCK_TXTIME_FLAGS_MASK 0xffu /* the time is value & ~this */

/* A qsocket's feedback (qinfo). */
struct qos_info {
	uint32_t id; /* the qsocket's id on the host */
	char class_name[QOS_NAMELEN];
	int dscp;
	enum qos_sched scheduler;
	/* Messages given to qsend/qsendto: sent, dropped at the source by the
	 * scheduler, sent after their deadline. */
	uint64_t sent_msgs, sent_bytes;
	uint64_t dropped_msgs, dropped_bytes;
	uint64_t late_msgs, late_bytes;
	/* Packets and bytes (L2 frames) that left through hostqos's
	 * classifier; their rate over the last complete second, bit/s. */
	uint64_t packets, bytes, rate_bps;
	/* Time in the host's qdisc, from sampled transmit timestamps. */
	uint64_t qdelay_mean_ns, qdelay_p99_ns;
	uint32_t qdelay_samples;
	/* TCP_INFO of a TCP socket (is_tcp = 1). */
	int is_tcp;
	struct tcp_info tcp;
	/* The host's scheduler (dwcs, edf-*; datagram qsockets), across
	 * every qsocket of the link: messages it sent predicted after their
	 * deadline; dropped because they could not meet it, or with the rest
	 * of their frame; the bytes of both; DWCS messages sent late with no
	 * loss left in their window (violations). */
	uint64_t sched_late;
	uint64_t sched_dropped, sched_frame_dropped, sched_dropped_bytes;
	uint64_t sched_violations;
};

/* Fills p with the defaults: class default, fifo, nothing else set. */
void qos_params_init(struct qos_params *p);

/* Prepares link p->dev for qsockets (root or group hostqos). */
int qsockinit(const struct qos_params *p);

/* socket(2) that is a qsocket with p. */
int qsocket(int domain, int type, int protocol, const struct qos_params *p);

/* Makes the open socket fd a qsocket with p, without reconnecting. */
int qattach(int fd, const struct qos_params *p);

/* Gives qsocket fd new QoS, effective at its next packet. */
int qchange(int fd, const struct qos_params *p);

/* Reads qsocket fd's feedback into *info. */
int qinfo(int fd, struct qos_info *info);

/* send(2)/sendto(2) with a message's attributes (pf may be NULL). A
 * message the scheduler drops is not sent: -1 with errno ETIME. */
ssize_t qsend(int fd, const void *buf, size_t len, int flags,
	      const struct packet_flags *pf);
ssize_t qsendto(int fd, const void *buf, size_t len, int flags,
		const struct sockaddr *to, socklen_t tolen,
		const struct packet_flags *pf);

/* Makes qsocket fd an ordinary socket again; it stays open. */
int qdetach(int fd);

/* Closes qsocket fd (the host forgets it with the socket). */
int qclose(int fd);

/* Why the calling thread's last failed call failed. */
const char *qstrerror(void);

/* RSVP, RAPI-like (rsvp_session(3), docs/rsvp.md): name a session, send
 * within a Tspec or reserve with a flowspec; what the network granted comes
 * as rsvp.* events on the daemon's event stream. Root or group hostqos.
 * RFC 2210 units: rates in bytes/s, sizes in bytes. */
struct rsvp_tspec {
	uint64_t r; /* token rate */
	uint64_t b; /* bucket depth */
	uint64_t p; /* peak rate, 0 = no peak term */
	uint64_t m; /* minimum policed unit (0: 64) */
	uint64_t M; /* maximum packet size (0: 1500) */
	uint64_t R; /* guaranteed service: rate R >= r (flowspec only) */
	uint32_t S_us; /* guaranteed service: slack (flowspec only) */
};

/* Creates session name toward dest "ADDR:PORT" ("[ADDR]:PORT" for IPv6),
 * proto "udp" or "tcp". Names: letters, digits, '.', '_', '-'. */
int rsvp_session(const char *name, const char *dest, const char *proto);

/* This host sends for session name from port (0: any) within *t. */
int rsvp_sender(const char *name, uint16_t port, const struct rsvp_tspec *t);

/* As the receiver, asks service "guaranteed" or "controlled-load" with
 * flowspec *fs, style "ff" or "se" (NULL: ff), a ResvConf if confirm. */
int rsvp_reserve(const char *name, const char *service,
		 const struct rsvp_tspec *fs, const char *style, int confirm);

/* Tears session name down (PathTear, ResvTear) and forgets it. */
int rsvp_remove(const char *name);

/* The daemon's socket: $HOSTQOS_SOCKET, else this. */
#define HOSTQOS_DEFAULT_SOCKET "/run/hostqos/hostqosd.sock"

#ifdef __cplusplus
}
#endif

#endif /* HOSTQOS_QSOCK_H */
