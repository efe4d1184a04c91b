/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * libhostqos: QSockets over hostqosd's API socket.
 *
 * qattach, qchange, qinfo and qdetach send one HTTP/1.1 request on a
 * connection of their own to hostqosd's Unix socket; the socket they act
 * on travels with the request's bytes as SCM_RIGHTS. The daemon checks who
 * may do what and tags the socket in the datapath. qsend/qsendto run the
 * socket's scheduler here, in the calling thread, and never talk to the
 * daemon.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include <linux/errqueue.h>
#include <linux/net_tstamp.h>

#include "hostqos/qsock.h"

#define ERRLEN 1024
#define MAXANSWER (64 * 1024)
#define CALL_TIMEOUT_MS 10000
#define SAMPLE_EVERY 16
#define KEEP_SAMPLES 256
#define SAMPLE_WAIT_NS 1000000000LL

static __thread char errbuf[ERRLEN];

static int fail(int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(errbuf, sizeof(errbuf), fmt, ap);
	va_end(ap);
	errno = err;
	return -1;
}

const char *qstrerror(void)
{
	return errbuf[0] ? errbuf : "no error";
}

void qos_params_init(struct qos_params *p)
{
	memset(p, 0, sizeof(*p));
	p->priority = -1;
	p->dscp = -1;
	p->scheduler = QOS_SCHED_FIFO;
}

static const char *sched_names[] = {"fifo", "dwcs", "edf-lossy",
				    "edf-lossless"};

static const char *sched_name(enum qos_sched s)
{
	if ((unsigned)s < sizeof(sched_names) / sizeof(sched_names[0]))
		return sched_names[s];
	return NULL;
}

/* ------------------------------------------------------------------ */
/* Per-socket state: the scheduler, the source's counts, timestamps    */
/* ------------------------------------------------------------------ */

struct qstate {
	int used;
	enum qos_sched sched;
	uint64_t rate;	  /* bit/s paced at (fifo only), 0 = none */
	int64_t tat;	  /* pacing: earliest start of the next message, ns */
	int txtime;	  /* pass each message's attributes (SCM_TXTIME) */
	int in_frame;	  /* edf-lossy: inside a frame */
	int frame_drop;	  /* edf-lossy: the frame is dropped */
	uint64_t sent_msgs, sent_bytes, dropped_msgs, dropped_bytes;
	uint64_t late_msgs, late_bytes;
	/* Queueing delay samples (see drain). */
	int ts_on, ts_failed, ts_out;
	int64_t ts_since, ts_sched, ts_snd;
	uint64_t ts_count;
	uint64_t samples[KEEP_SAMPLES];
	uint32_t nsamples, next;
	uint64_t ewma;
};

static pthread_mutex_t table_mu = PTHREAD_MUTEX_INITIALIZER;
static struct qstate *table;
static int table_len;

/* The state of fd, created when create; table_mu held. */
static struct qstate *state(int fd, int create)
{
	if (fd < 0)
		return NULL;
	if (fd >= table_len) {
		int n;
		struct qstate *t;

		if (!create)
			return NULL;
		n = table_len ? table_len : 64;
		while (n <= fd)
			n *= 2;
		t = realloc(table, (size_t)n * sizeof(*t));
		if (!t)
			return NULL;
		memset(t + table_len, 0, (size_t)(n - table_len) * sizeof(*t));
		table = t;
		table_len = n;
	}
	if (!table[fd].used && !create)
		return NULL;
	return &table[fd];
}

static int64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int64_t ts_ns(const struct timespec *ts)
{
	return (int64_t)ts->tv_sec * 1000000000LL + ts->tv_nsec;
}

/* ------------------------------------------------------------------ */
/* The daemon protocol                                                  */
/* ------------------------------------------------------------------ */

static const char *daemon_socket(void)
{
	const char *s = getenv("HOSTQOS_SOCKET");

	return s && *s ? s : HOSTQOS_DEFAULT_SOCKET;
}

/* Appends a JSON string (escaped) to b. */
static void json_str(char *b, size_t n, const char *s)
{
	size_t l = strlen(b);

	if (l + 2 >= n)
		return;
	b[l++] = '"';
	for (; *s && l + 8 < n; s++) {
		unsigned char c = (unsigned char)*s;

		if (c == '"' || c == '\\') {
			b[l++] = '\\';
			b[l++] = (char)c;
		} else if (c < 0x20) {
			l += (size_t)snprintf(b + l, n - l, "\\u%04x", c);
		} else {
			b[l++] = (char)c;
		}
	}
	b[l++] = '"';
	b[l] = 0;
}

static void add(char *b, size_t n, const char *fmt, ...)
{
	size_t l = strlen(b);
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(b + l, n - l, fmt, ap);
	va_end(ap);
}

/* The JSON body of struct qos_params; 0, or -1 for a bad scheduler. */
static int params_json(const struct qos_params *p, char *b, size_t n)
{
	const char *sn = sched_name(p->scheduler);

	if (!sn)
		return fail(EINVAL, "qos_params.scheduler %d is not a scheduler (QOS_SCHED_FIFO, _DWCS, _EDF_LOSSY, _EDF_LOSSLESS)",
			    (int)p->scheduler);
	if (memchr(p->class_name, 0, sizeof(p->class_name)) == NULL)
		return fail(EINVAL, "qos_params.class_name is not NUL-terminated");
	b[0] = 0;
	add(b, n, "{\"scheduler\":\"%s\"", sn);
	if (p->class_name[0]) {
		add(b, n, ",\"class\":");
		json_str(b, n, p->class_name);
	}
	if (p->priority >= 0)
		add(b, n, ",\"priority\":%d", p->priority);
	if (p->dscp >= 0)
		add(b, n, ",\"dscp\":%d", p->dscp);
	if (p->rate)
		add(b, n, ",\"rate\":%llu", (unsigned long long)p->rate);
	if (p->scheduler == QOS_SCHED_DWCS)
		add(b, n, ",\"ipg_us\":%u,\"oln\":%u,\"old\":%u", p->dwcs.ipg_us,
		    p->dwcs.oln, p->dwcs.old);
	add(b, n, "}");
	return 0;
}

/* Finds "key": in a JSON text; returns what follows (spaces skipped). */
static const char *json_find(const char *j, const char *key)
{
	char pat[80];
	const char *p;

	snprintf(pat, sizeof(pat), "\"%s\"", key);
	for (p = strstr(j, pat); p; p = strstr(p + 1, pat)) {
		const char *q = p + strlen(pat);

		while (*q == ' ' || *q == '\n' || *q == '\t')
			q++;
		if (*q != ':')
			continue;
		q++;
		while (*q == ' ' || *q == '\n' || *q == '\t')
			q++;
		return q;
	}
	return NULL;
}

static uint64_t json_u64(const char *j, const char *key)
{
	const char *p = json_find(j, key);

	return p ? strtoull(p, NULL, 10) : 0;
}

static int json_bool(const char *j, const char *key)
{
	const char *p = json_find(j, key);

	return p && strncmp(p, "true", 4) == 0;
}

/* Copies the JSON string value of key (unescaping \" \\ \n \t) into out. */
static void json_string(const char *j, const char *key, char *out, size_t n)
{
	const char *p = json_find(j, key);
	size_t l = 0;

	out[0] = 0;
	if (!p || *p != '"')
		return;
	for (p++; *p && *p != '"' && l + 1 < n; p++) {
		if (*p == '\\' && p[1]) {
			p++;
			switch (*p) {
			case 'n':
				out[l++] = '\n';
				continue;
			case 't':
				out[l++] = '\t';
				continue;
			case 'u':
				/* \u00XX and others: keep a '?' */
				if (strlen(p) >= 5)
					p += 4;
				out[l++] = '?';
				continue;
			}
		}
		out[l++] = *p;
	}
	out[l] = 0;
}

/* The errno of an HTTP status of the daemon. */
static int status_errno(int status)
{
	switch (status) {
	case 400:
		return EINVAL;
	case 403:
		return EPERM;
	case 404:
		return ENOENT;
	case 409:
		return EEXIST;
	case 413:
		return EMSGSIZE;
	case 429:
	case 503:
		return EAGAIN;
	}
	return EIO;
}

/* Reads the whole answer (the daemon closes the connection). */
static int read_answer(int c, char *buf, size_t n, size_t *got)
{
	struct pollfd pfd = {.fd = c, .events = POLLIN};
	int64_t end = mono_ns() + (int64_t)CALL_TIMEOUT_MS * 1000000;
	size_t l = 0;

	for (;;) {
		int64_t left = (end - mono_ns()) / 1000000;
		ssize_t r;

		if (left <= 0)
			return fail(ETIMEDOUT, "hostqosd did not answer within %d s", CALL_TIMEOUT_MS / 1000);
		if (poll(&pfd, 1, (int)left) < 0) {
			if (errno == EINTR)
				continue;
			return fail(errno, "wait for hostqosd's answer: %s", strerror(errno));
		}
		if (l + 1 >= n)
			return fail(EMSGSIZE, "hostqosd's answer is longer than %zu bytes", n);
		r = read(c, buf + l, n - 1 - l);
		if (r < 0) {
			if (errno == EINTR || errno == EAGAIN)
				continue;
			return fail(errno, "read hostqosd's answer: %s", strerror(errno));
		}
		if (r == 0)
			break;
		l += (size_t)r;
	}
	buf[l] = 0;
	*got = l;
	return 0;
}

/* Decodes a chunked body in place. */
static void dechunk(char *body)
{
	char *in = body, *out = body;

	for (;;) {
		char *end;
		unsigned long len = strtoul(in, &end, 16);

		if (end == in || len == 0)
			break;
		in = strstr(end, "\r\n");
		if (!in)
			break;
		in += 2;
		if (strlen(in) < len)
			len = strlen(in);
		memmove(out, in, len);
		out += len;
		in += len;
		if (strncmp(in, "\r\n", 2) == 0)
			in += 2;
	}
	*out = 0;
}

/*
 * Sends one request (method, path, JSON body) to hostqosd with socket fd
 * (-1: none) attached, and reads the answer's body into ans. Returns the
 * HTTP status, or -1 (errno, qstrerror) when the daemon cannot be asked.
 */
static int request(const char *method, const char *path, const char *body,
		   int fd, char *ans, size_t ansn)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	const char *sock = daemon_socket();
	char req[8192], *hdr_end;
	char ctl[CMSG_SPACE(sizeof(int))];
	struct iovec iov;
	struct msghdr mh = {0};
	size_t got, sent = 0, rl;
	int c, status = 0;

	if (strlen(sock) >= sizeof(sa.sun_path))
		return fail(ENAMETOOLONG, "hostqosd socket path %s is too long", sock);
	strcpy(sa.sun_path, sock);
	rl = (size_t)snprintf(req, sizeof(req),
			      "%s %s HTTP/1.1\r\nHost: hostqosd\r\nContent-Type: application/json\r\n"
			      "Content-Length: %zu\r\nConnection: close\r\n\r\n%s",
			      method, path, strlen(body), body);
	if (rl >= sizeof(req))
		return fail(EMSGSIZE, "request too long");
	c = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (c < 0)
		return fail(errno, "create a socket to reach hostqosd: %s", strerror(errno));
	if (connect(c, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		int e = errno;

		close(c);
		return fail(e, "connect to hostqosd at %s: %s (is hostqosd running? $HOSTQOS_SOCKET names another socket)",
			    sock, strerror(e));
	}
	while (sent < rl) {
		ssize_t w;

		iov.iov_base = req + sent;
		iov.iov_len = rl - sent;
		memset(&mh, 0, sizeof(mh));
		mh.msg_iov = &iov;
		mh.msg_iovlen = 1;
		if (sent == 0 && fd >= 0) {
			struct cmsghdr *cm;

			memset(ctl, 0, sizeof(ctl));
			mh.msg_control = ctl;
			mh.msg_controllen = sizeof(ctl);
			cm = CMSG_FIRSTHDR(&mh);
			cm->cmsg_level = SOL_SOCKET;
			cm->cmsg_type = SCM_RIGHTS;
			cm->cmsg_len = CMSG_LEN(sizeof(int));
			memcpy(CMSG_DATA(cm), &fd, sizeof(int));
		}
		w = sendmsg(c, &mh, MSG_NOSIGNAL);
		if (w < 0) {
			int e = errno;

			if (e == EINTR)
				continue;
			close(c);
			return fail(e, "send request to hostqosd: %s", strerror(e));
		}
		sent += (size_t)w;
	}
	if (read_answer(c, ans, ansn, &got) < 0) {
		int e = errno;

		close(c);
		errno = e;
		return -1;
	}
	close(c);
	if (sscanf(ans, "HTTP/1.%*d %d", &status) != 1)
		return fail(EPROTO, "hostqosd's answer is not HTTP");
	hdr_end = strstr(ans, "\r\n\r\n");
	if (!hdr_end)
		return fail(EPROTO, "hostqosd's answer has no end of headers");
	*hdr_end = 0;
	{
		int chunked = strcasestr(ans, "transfer-encoding: chunked") != NULL;

		memmove(ans, hdr_end + 4, strlen(hdr_end + 4) + 1);
		if (chunked)
			dechunk(ans);
	}
	return status;
}

/* Turns an error answer into errno and a message; returns -1. */
static int refused(const char *op, int status, const char *ans)
{
	char msg[512], field[64], value[128], reason[256], fix[256];
	const char *f;

	json_string(ans, "error", msg, sizeof(msg));
	f = json_find(ans, "fields");
	if (f) {
		json_string(f, "Field", field, sizeof(field));
		json_string(f, "Value", value, sizeof(value));
		json_string(f, "Reason", reason, sizeof(reason));
		json_string(f, "Fix", fix, sizeof(fix));
		return fail(status_errno(status), "%s: field %s = \"%s\": %s%s%s", op,
			    field, value, reason, fix[0] ? "; " : "", fix);
	}
	return fail(status_errno(status), "%s: %s", op, msg[0] ? msg : "refused by hostqosd");
}

static int call(const char *op, const char *method, const char *path,
		const char *body, int fd, char *ans, size_t ansn)
{
	int st = request(method, path, body, fd, ans, ansn);

	if (st < 0) {
		int e = errno;
		char why[ERRLEN];

		snprintf(why, sizeof(why), "%s", errbuf);
		return fail(e, "%s: %s", op, why);
	}
	if (st >= 300)
		return refused(op, st, ans);
	return 0;
}

/* ------------------------------------------------------------------ */
/* The calls                                                            */
/* ------------------------------------------------------------------ */

int qsockinit(const struct qos_params *p)
{
	char body[256], ans[4096];

	if (!p)
		return fail(EINVAL, "qsockinit: no qos_params");
	if (!p->dev[0] || !memchr(p->dev, 0, sizeof(p->dev)))
		return fail(EINVAL, "qsockinit: qos_params.dev names no link");
	body[0] = 0;
	add(body, sizeof(body), "{\"link\":");
	json_str(body, sizeof(body), p->dev);
	if (p->egress_rate[0] && memchr(p->egress_rate, 0, sizeof(p->egress_rate))) {
		add(body, sizeof(body), ",\"egress_rate\":");
		json_str(body, sizeof(body), p->egress_rate);
	}
	add(body, sizeof(body), "}");
	return call("qsockinit", "POST", "/v1/qsockets/init", body, -1, ans, sizeof(ans));
}

/* The rate the library paces at: fifo's; the host's scheduler serves
 * dwcs and edf-* at theirs (the rate it admitted), unpaced. */
static uint64_t pace_rate(const struct qos_params *p)
{
	return p->scheduler == QOS_SCHED_FIFO ? p->rate : 0;
}

static void reset_state(struct qstate *s, const struct qos_params *p)
{
	memset(s, 0, sizeof(*s));
	s->used = 1;
	s->sched = p->scheduler;
	s->rate = pace_rate(p);
}

/*
 * Whether qsocket fd passes its messages' attributes to the kernel with
 * scheduler sched: a datagram socket whose scheduler is not fifo. Such a
 * socket gets SO_TXTIME with CLOCK_MONOTONIC (allowed to everyone) before
 * the daemon is asked, so a failure changes nothing there. The kernel
 * cannot clear SO_TXTIME: back to fifo the library just stops passing
 * SCM_TXTIME, and the packets carry no time. 1, 0, or -1 (errno).
 */
static int want_txtime(const char *op, int fd, enum qos_sched sched)
{
	struct {
		int32_t clockid; /* struct sock_txtime */
		uint32_t flags;
	} st = {CLOCK_MONOTONIC, 0};
	int type = 0;
	socklen_t len = sizeof(type);

	if (sched == QOS_SCHED_FIFO)
		return 0;
	if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) < 0)
		return fail(errno, "%s: read the socket's type: %s", op, strerror(errno));
	if (type != SOCK_DGRAM)
		return 0;
	if (setsockopt(fd, SOL_SOCKET, SO_TXTIME, &st, sizeof(st)) < 0)
		return fail(errno, "%s: enable SO_TXTIME (CLOCK_MONOTONIC) for the messages' attributes: %s",
			    op, strerror(errno));
	return 1;
}

int qattach(int fd, const struct qos_params *p)
{
	char body[512], ans[4096];
	struct qstate *s;
	int txtime;

	if (!p)
		return fail(EINVAL, "qattach: no qos_params");
	if (params_json(p, body, sizeof(body)) < 0)
		return -1;
	if ((txtime = want_txtime("qattach", fd, p->scheduler)) < 0)
		return -1;
	if (call("qattach", "POST", "/v1/qsockets", body, fd, ans, sizeof(ans)) < 0)
		return -1;
	pthread_mutex_lock(&table_mu);
	s = state(fd, 1);
	if (s) {
		reset_state(s, p);
		s->txtime = txtime;
	}
	pthread_mutex_unlock(&table_mu);
	if (!s)
		return fail(ENOMEM, "qattach: no memory for the socket's state");
	return 0;
}

int qsocket(int domain, int type, int protocol, const struct qos_params *p)
{
	int fd = socket(domain, type | SOCK_CLOEXEC, protocol);

	if (fd < 0)
		return fail(errno, "qsocket: socket(): %s", strerror(errno));
	if (qattach(fd, p) < 0) {
		int e = errno;

		close(fd);
		errno = e;
		return -1;
	}
	return fd;
}

int qchange(int fd, const struct qos_params *p)
{
	char body[512], ans[4096];
	struct qstate *s;
	int txtime;

	if (!p)
		return fail(EINVAL, "qchange: no qos_params");
	if (params_json(p, body, sizeof(body)) < 0)
		return -1;
	if ((txtime = want_txtime("qchange", fd, p->scheduler)) < 0)
		return -1;
	if (call("qchange", "PATCH", "/v1/qsockets", body, fd, ans, sizeof(ans)) < 0)
		return -1;
	pthread_mutex_lock(&table_mu);
	s = state(fd, 1);
	if (s) {
		s->used = 1;
		s->sched = p->scheduler;
		s->rate = pace_rate(p);
		s->txtime = txtime;
		s->in_frame = 0;
	}
	pthread_mutex_unlock(&table_mu);
	return 0;
}

/* Reads the error queue's transmit timestamps without waiting (s locked). */
static void drain(int fd, struct qstate *s)
{
	char ctl[512];

	while (s->ts_out) {
		struct msghdr mh = {.msg_control = ctl, .msg_controllen = sizeof(ctl)};
		struct cmsghdr *cm;
		int64_t t = 0;
		int info = -1;

		if (recvmsg(fd, &mh, MSG_ERRQUEUE | MSG_DONTWAIT) < 0) {
			if (mono_ns() - s->ts_since > SAMPLE_WAIT_NS)
				s->ts_out = 0;
			return;
		}
		for (cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
			if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SO_TIMESTAMPING) {
				struct timespec tss[3];

				memcpy(tss, CMSG_DATA(cm), sizeof(tss));
				t = ts_ns(&tss[0]);
			} else if ((cm->cmsg_level == SOL_IP && cm->cmsg_type == IP_RECVERR) ||
				   (cm->cmsg_level == SOL_IPV6 && cm->cmsg_type == IPV6_RECVERR)) {
				struct sock_extended_err ee;

				memcpy(&ee, CMSG_DATA(cm), sizeof(ee));
				if (ee.ee_origin == SO_EE_ORIGIN_TIMESTAMPING)
					info = (int)ee.ee_info;
			}
		}
		if (info == SCM_TSTAMP_SCHED)
			s->ts_sched = t;
		else if (info == SCM_TSTAMP_SND)
			s->ts_snd = t;
		if (s->ts_sched && s->ts_snd) {
			uint64_t d = s->ts_snd > s->ts_sched ? (uint64_t)(s->ts_snd - s->ts_sched) : 0;

			s->samples[s->next] = d;
			s->next = (s->next + 1) % KEEP_SAMPLES;
			if (s->nsamples < KEEP_SAMPLES)
				s->nsamples++;
			s->ewma = s->ewma ? s->ewma + ((int64_t)d - (int64_t)s->ewma) / 8 : d;
			s->ts_out = 0;
		}
	}
}

/* Whether this message asks for transmit timestamps (s locked). */
static int want_sample(int fd, struct qstate *s)
{
	if (s->ts_failed || s->ts_out)
		return 0;
	if (s->ts_count++ % SAMPLE_EVERY != 0)
		return 0;
	if (!s->ts_on) {
		int v = SOF_TIMESTAMPING_SOFTWARE | SOF_TIMESTAMPING_OPT_TSONLY;

		if (setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPING, &v, sizeof(v)) < 0) {
			s->ts_failed = 1;
			return 0;
		}
		s->ts_on = 1;
	}
	s->ts_out = 1;
	s->ts_since = mono_ns();
	s->ts_sched = s->ts_snd = 0;
	return 1;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

int qinfo(int fd, struct qos_info *info)
{
	char ans[4096], sched[32];
	struct qstate *s;
	uint64_t sorted[KEEP_SAMPLES];
	int proto = 0;
	socklen_t len = sizeof(proto);

	if (!info)
		return fail(EINVAL, "qinfo: no qos_info");
	if (call("qinfo", "POST", "/v1/qsockets/info", "{}", fd, ans, sizeof(ans)) < 0)
		return -1;
	memset(info, 0, sizeof(*info));
	info->id = (uint32_t)json_u64(ans, "id");
	json_string(ans, "class", info->class_name, sizeof(info->class_name));
	info->dscp = (int)json_u64(ans, "dscp");
	json_string(ans, "scheduler", sched, sizeof(sched));
	for (int i = 0; i < 4; i++)
		if (strcmp(sched, sched_names[i]) == 0)
			info->scheduler = (enum qos_sched)i;
	info->packets = json_u64(ans, "packets");
	info->bytes = json_u64(ans, "bytes");
	info->rate_bps = json_u64(ans, "rate");
	info->sched_late = json_u64(ans, "late");
	info->sched_dropped = json_u64(ans, "late_dropped");
	info->sched_frame_dropped = json_u64(ans, "frame_dropped");
	info->sched_dropped_bytes = json_u64(ans, "dropped_bytes");
	info->sched_violations = json_u64(ans, "violations");
	(void)json_bool;

	pthread_mutex_lock(&table_mu);
	s = state(fd, 0);
	if (s) {
		drain(fd, s);
		info->sent_msgs = s->sent_msgs;
		info->sent_bytes = s->sent_bytes;
		info->dropped_msgs = s->dropped_msgs;
		info->dropped_bytes = s->dropped_bytes;
		info->late_msgs = s->late_msgs;
		info->late_bytes = s->late_bytes;
		if (s->nsamples) {
			uint64_t sum = 0;
			uint32_t n = s->nsamples, k;

			memcpy(sorted, s->samples, n * sizeof(uint64_t));
			qsort(sorted, n, sizeof(uint64_t), cmp_u64);
			for (k = 0; k < n; k++)
				sum += sorted[k];
			info->qdelay_mean_ns = sum / n;
			k = (n * 99 + 99) / 100;
			info->qdelay_p99_ns = sorted[(k ? k : 1) - 1];
			info->qdelay_samples = n;
		}
	}
	pthread_mutex_unlock(&table_mu);
	if (getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &proto, &len) == 0 && proto == IPPROTO_TCP) {
		len = sizeof(info->tcp);
		if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info->tcp, &len) == 0)
			info->is_tcp = 1;
	}
	return 0;
}

/* The scheduler's decision at the source: 1 send, 0 drop (s locked). */
static int decide(struct qstate *s, const struct packet_flags *pf, int64_t now)
{
	int64_t dl;
	int late, drop;

	if (s->sched != QOS_SCHED_EDF_LOSSY || !pf)
		return 1;
	dl = ts_ns(&pf->deadline);
	/* With the host's scheduler deciding (txtime), only what is already
	 * too late: the host predicts by band and backlog, which the
	 * socket's own queueing delay does not know. */
	late = dl != 0 && now + (s->txtime ? 0 : (int64_t)s->ewma) > dl;
	if (pf->flags & QPF_FRAME_START) {
		s->frame_drop = late;
		s->in_frame = !(pf->flags & QPF_FRAME_END);
		drop = late;
	} else if (s->in_frame) {
		drop = s->frame_drop;
		if (pf->flags & QPF_FRAME_END)
			s->in_frame = 0;
	} else {
		drop = late;
	}
	return !drop || (pf->flags & QPF_NON_DROPPABLE);
}

/* The SCM_TXTIME value of a message sent at now (QSOCK_TXTIME_*). */
static uint64_t txtime_word(const struct packet_flags *pf, int64_t now)
{
	int64_t dl = pf ? ts_ns(&pf->deadline) : 0;
	uint64_t w = (uint64_t)(dl > 0 ? dl : now) & ~(uint64_t)QSOCK_TXTIME_FLAGS_MASK;

	w |= QSOCK_TXTIME_MARKER;
	if (dl > 0)
		w |= QSOCK_TXTIME_HAS_DEADLINE;
	if (!pf)
		return w;
	if (pf->flags & QPF_NON_DROPPABLE)
		w |= QSOCK_TXTIME_NON_DROPPABLE;
	if (pf->flags & QPF_FRAME_START)
		w |= QSOCK_TXTIME_FRAME_START;
	if (pf->flags & QPF_FRAME_END)
		w |= QSOCK_TXTIME_FRAME_END;
	w |= ((uint64_t)pf->drop_priority << QSOCK_TXTIME_PRIO_SHIFT) & QSOCK_TXTIME_PRIO_MASK;
	return w;
}

/* Appends a control message to mh's buffer (sized by the caller). */
static void add_cmsg(struct msghdr *mh, size_t *used, int level, int type,
		     const void *data, size_t len)
{
	struct cmsghdr *cm = (struct cmsghdr *)((char *)mh->msg_control + *used);

	cm->cmsg_level = level;
	cm->cmsg_type = type;
	cm->cmsg_len = CMSG_LEN(len);
	memcpy(CMSG_DATA(cm), data, len);
	*used += CMSG_SPACE(len);
	mh->msg_controllen = *used;
}

ssize_t qsendto(int fd, const void *buf, size_t len, int flags,
		const struct sockaddr *to, socklen_t tolen,
		const struct packet_flags *pf)
{
	union {
		char b[CMSG_SPACE(sizeof(uint32_t)) + CMSG_SPACE(sizeof(uint64_t))];
		struct cmsghdr align;
	} ctl;
	struct qstate *s;
	int64_t now = 0, wait = 0;
	int sample = 0, txtime;
	ssize_t n;

	if (pf && pf->drop_priority > QPF_DROP_PRIORITY_MAX)
		return fail(EINVAL, "qsend: packet_flags.drop_priority %u is out of range: use 0 (dropped last) … %d (dropped first)",
			    pf->drop_priority, QPF_DROP_PRIORITY_MAX);
	pthread_mutex_lock(&table_mu);
	s = state(fd, 0);
	if (!s) {
		pthread_mutex_unlock(&table_mu);
		/* Not a qsocket of this process: a plain send. */
		return sendto(fd, buf, len, flags, to, tolen);
	}
	if (s->sched == QOS_SCHED_EDF_LOSSY || s->rate)
		now = mono_ns();
	if (!decide(s, pf, now)) {
		s->dropped_msgs++;
		s->dropped_bytes += len;
		pthread_mutex_unlock(&table_mu);
		return fail(ETIME, "qsend: the message was dropped by the socket's edf-lossy scheduler: it cannot meet its deadline");
	}
	if (s->rate) {
		int64_t start = s->tat > now ? s->tat : now;

		wait = start - now;
		s->tat = start + (int64_t)(len * 8 * 1000000000ULL / s->rate);
	}
	if (s->ts_out)
		drain(fd, s);
	sample = want_sample(fd, s);
	txtime = s->txtime;
	pthread_mutex_unlock(&table_mu);

	if (wait > 0) {
		struct timespec ts = {.tv_sec = wait / 1000000000LL, .tv_nsec = wait % 1000000000LL};

		while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
			;
	}
	if (sample || txtime) {
		struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};
		struct msghdr mh = {.msg_name = (void *)to, .msg_namelen = to ? tolen : 0,
				    .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.b};
		size_t used = 0;

		memset(&ctl, 0, sizeof(ctl));
		if (sample) {
			uint32_t v = SOF_TIMESTAMPING_TX_SCHED | SOF_TIMESTAMPING_TX_SOFTWARE;

			add_cmsg(&mh, &used, SOL_SOCKET, SO_TIMESTAMPING, &v, sizeof(v));
		}
		if (txtime) {
			uint64_t w = txtime_word(pf, mono_ns());

			add_cmsg(&mh, &used, SOL_SOCKET, SCM_TXTIME, &w, sizeof(w));
		}
		n = sendmsg(fd, &mh, flags);
	} else {
		n = sendto(fd, buf, len, flags, to, tolen);
	}
	{
		int e = errno;

		pthread_mutex_lock(&table_mu);
		s = state(fd, 0);
		if (s && n >= 0) {
			s->sent_msgs++;
			s->sent_bytes += (uint64_t)n;
			if (pf && (pf->deadline.tv_sec || pf->deadline.tv_nsec) &&
			    mono_ns() > ts_ns(&pf->deadline)) {
				s->late_msgs++;
				s->late_bytes += (uint64_t)n;
			}
		} else if (s && sample) {
			s->ts_out = 0;
		}
		pthread_mutex_unlock(&table_mu);
		if (n < 0)
			return fail(e, "qsend: %s", strerror(e));
	}
	return n;
}

ssize_t qsend(int fd, const void *buf, size_t len, int flags,
	      const struct packet_flags *pf)
{
	return qsendto(fd, buf, len, flags, NULL, 0, pf);
}

static void forget(int fd)
{
	struct qstate *s;

	pthread_mutex_lock(&table_mu);
	s = state(fd, 0);
	if (s)
		memset(s, 0, sizeof(*s));
	pthread_mutex_unlock(&table_mu);
}

int qdetach(int fd)
{
	char ans[4096];

	if (call("qdetach", "POST", "/v1/qsockets/detach", "{}", fd, ans, sizeof(ans)) < 0)
		return -1;
	forget(fd);
	return 0;
}

int qclose(int fd)
{
	forget(fd);
	/* The datapath frees the qsocket when the socket is released. */
	if (close(fd) < 0)
		return fail(errno, "qclose: %s", strerror(errno));
	return 0;
}

/* ------------------------------------------------------------------ */
/* RSVP (RAPI-like)                                                     */
/* ------------------------------------------------------------------ */

/* A session name that can go into a URL path as it is. */
static int rsvp_name_ok(const char *op, const char *name)
{
	size_t i, n;

	if (!name || !name[0])
		return fail(EINVAL, "%s: no session name", op);
	n = strlen(name);
	if (n > 63)
		return fail(EINVAL, "%s: session name of %zu characters; at most 63", op, n);
	for (i = 0; i < n; i++) {
		char c = name[i];

		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		      (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-'))
			return fail(EINVAL, "%s: session name \"%s\": use letters, digits, '.', '_', '-'", op, name);
	}
	return 0;
}

static void tspec_json(char *b, size_t n, const struct rsvp_tspec *t, int flowspec)
{
	add(b, n, "{\"r_Bps\":%llu,\"b_B\":%llu", (unsigned long long)t->r,
	    (unsigned long long)t->b);
	if (t->p)
		add(b, n, ",\"p_Bps\":%llu", (unsigned long long)t->p);
	add(b, n, ",\"m_B\":%llu,\"M_B\":%llu", (unsigned long long)(t->m ? t->m : 64),
	    (unsigned long long)(t->M ? t->M : 1500));
	if (flowspec && t->R)
		add(b, n, ",\"R_Bps\":%llu", (unsigned long long)t->R);
	if (flowspec && t->S_us)
		add(b, n, ",\"S_us\":%u", t->S_us);
	add(b, n, "}");
}

int rsvp_session(const char *name, const char *dest, const char *proto)
{
	char body[512], ans[8192];

	if (rsvp_name_ok("rsvp_session", name) < 0)
		return -1;
	if (!dest || !proto)
		return fail(EINVAL, "rsvp_session: no destination or protocol");
	body[0] = 0;
	add(body, sizeof(body), "{\"name\":");
	json_str(body, sizeof(body), name);
	add(body, sizeof(body), ",\"dest\":");
	json_str(body, sizeof(body), dest);
	add(body, sizeof(body), ",\"proto\":");
	json_str(body, sizeof(body), proto);
	add(body, sizeof(body), "}");
	return call("rsvp_session", "POST", "/v1/rsvp/sessions", body, -1, ans, sizeof(ans));
}

int rsvp_sender(const char *name, uint16_t port, const struct rsvp_tspec *t)
{
	char body[512], path[128], ans[8192];

	if (rsvp_name_ok("rsvp_sender", name) < 0)
		return -1;
	if (!t)
		return fail(EINVAL, "rsvp_sender: no Tspec");
	body[0] = 0;
	add(body, sizeof(body), "{\"port\":%u,\"tspec\":", (unsigned)port);
	tspec_json(body, sizeof(body), t, 0);
	add(body, sizeof(body), "}");
	snprintf(path, sizeof(path), "/v1/rsvp/sessions/%s/sender", name);
	return call("rsvp_sender", "PUT", path, body, -1, ans, sizeof(ans));
}

int rsvp_reserve(const char *name, const char *service,
		 const struct rsvp_tspec *fs, const char *style, int confirm)
{
	char body[512], path[128], ans[8192];

	if (rsvp_name_ok("rsvp_reserve", name) < 0)
		return -1;
	if (!service || !fs)
		return fail(EINVAL, "rsvp_reserve: no service or flowspec");
	body[0] = 0;
	add(body, sizeof(body), "{\"service\":");
	json_str(body, sizeof(body), service);
	add(body, sizeof(body), ",\"flowspec\":");
	tspec_json(body, sizeof(body), fs, 1);
	if (style) {
		add(body, sizeof(body), ",\"style\":");
		json_str(body, sizeof(body), style);
	}
	if (confirm)
		add(body, sizeof(body), ",\"confirm\":true");
	add(body, sizeof(body), "}");
	snprintf(path, sizeof(path), "/v1/rsvp/sessions/%s/reservation", name);
	return call("rsvp_reserve", "PUT", path, body, -1, ans, sizeof(ans));
}

int rsvp_remove(const char *name)
{
	char path[128], ans[4096];

	if (rsvp_name_ok("rsvp_remove", name) < 0)
		return -1;
	snprintf(path, sizeof(path), "/v1/rsvp/sessions/%s", name);
	return call("rsvp_remove", "DELETE", path, "", -1, ans, sizeof(ans));
}
