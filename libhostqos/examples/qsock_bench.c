/*
 * qsock_bench: the cost of each QSockets call beside its plain socket
 * counterpart (seed Table 1).
 *
 *   qsock_bench ADDR PORT [SENDS [CLASS]]
 *
 * socket()+close() vs qsocket()+qclose(), qattach, qchange, qinfo (each
 * 200 times), and sendto vs qsendto of 64-byte UDP datagrams to ADDR:PORT
 * (SENDS of each, default 200000, in alternating blocks of 10000 so that
 * all see the same machine): qsendto on a fifo qsocket, and on an
 * edf-lossless one with a deadline per message (its attributes passed to
 * the host with SCM_TXTIME, the host's scheduler deciding per packet).
 * Prints one line per call, in µs per call.
 */
#include <unistd.h>

#include "common.h"

static double now_us(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static void die(const char *what)
{
	fprintf(stderr, "%s: %s\n", what, qstrerror());
	exit(1);
}

int main(int argc, char **argv)
{
	struct sockaddr_storage dst;
	struct qos_params p, p2, pe;
	struct packet_flags pf = {0};
	socklen_t dlen;
	int fam, i, b, fd, qfd, efd, reps = 200;
	long sends;
	double t, t_sock = 0, t_qsock = 0, t_close = 0, t_qclose = 0, t_attach = 0, t_change = 0, t_info = 0;
	double t_send = 0, t_qsend = 0, t_esend = 0, t_tos = 0;
	char msg[64] = "qsock_bench";
	struct qos_info in;

	if (argc < 3) {
		fprintf(stderr, "usage: %s ADDR PORT [SENDS [CLASS]]\n", argv[0]);
		return 2;
	}
	fam = parse_dst(argv[1], argv[2], &dst, &dlen);
	sends = argc > 3 ? atol(argv[3]) : 200000;
	qos_params_init(&p);
	snprintf(p.class_name, sizeof(p.class_name), "%s", argc > 4 ? argv[4] : "interactive");
	qos_params_init(&p2);
	snprintf(p2.class_name, sizeof(p2.class_name), "%s", "default");

	for (i = 0; i < reps; i++) {
		t = now_us();
		fd = socket(fam, SOCK_DGRAM | SOCK_CLOEXEC, 0);
		t_sock += now_us() - t;
		if (fd < 0)
			die("socket");
		t = now_us();
		if (qattach(fd, &p) < 0)
			die("qattach");
		t_attach += now_us() - t;
		t = now_us();
		{
			int tos = 34 << 2;

			if (setsockopt(fd, IPPROTO_IP, IP_TOS, &tos, sizeof(tos)) < 0)
				die("setsockopt");
		}
		t_tos += now_us() - t;
		t = now_us();
		if (qchange(fd, &p2) < 0)
			die("qchange");
		t_change += now_us() - t;
		t = now_us();
		if (qinfo(fd, &in) < 0)
			die("qinfo");
		t_info += now_us() - t;
		t = now_us();
		close(fd);
		t_close += now_us() - t;

		t = now_us();
		qfd = qsocket(fam, SOCK_DGRAM, 0, &p);
		t_qsock += now_us() - t;
		if (qfd < 0)
			die("qsocket");
		t = now_us();
		qclose(qfd);
		t_qclose += now_us() - t;
	}

	fd = socket(fam, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	qfd = qsocket(fam, SOCK_DGRAM, 0, &p);
	pe = p;
	pe.scheduler = QOS_SCHED_EDF_LOSSLESS;
	/* The host's scheduler serves it at 4 Gbit/s: far above what one thread
	 * sending 64-byte messages offers, so every qsendto pays the
	 * scheduler's per-message work and never waits for its rate (at 100
	 * Mbit/s the figure was mostly that wait). */
	pe.rate = 4000000000ULL;
	efd = qsocket(fam, SOCK_DGRAM, 0, &pe);
	if (fd < 0 || qfd < 0 || efd < 0)
		die("socket");
	for (b = 0; b < sends / 10000; b++) {
		t = now_us();
		for (i = 0; i < 10000; i++)
			if (sendto(fd, msg, sizeof(msg), 0, (struct sockaddr *)&dst, dlen) < 0)
				die("sendto");
		t_send += now_us() - t;
		t = now_us();
		for (i = 0; i < 10000; i++)
			if (qsendto(qfd, msg, sizeof(msg), 0, (struct sockaddr *)&dst, dlen, NULL) < 0)
				die("qsendto");
		t_qsend += now_us() - t;
		pf.deadline = mono_after(1000000000L);
		pf.flags = QPF_FRAME_START | QPF_FRAME_END;
		t = now_us();
		for (i = 0; i < 10000; i++)
			if (qsendto(efd, msg, sizeof(msg), 0, (struct sockaddr *)&dst, dlen, &pf) < 0)
				die("qsendto");
		t_esend += now_us() - t;
	}
	sends = (sends / 10000) * 10000;
	printf("call=qsocket plain_us=%.3f q_us=%.3f (socket)\n", t_sock / reps, t_qsock / reps);
	printf("call=qattach q_us=%.3f\n", t_attach / reps);
	printf("call=qchange plain_us=%.3f q_us=%.3f (setsockopt IP_TOS)\n", t_tos / reps, t_change / reps);
	printf("call=qinfo q_us=%.3f\n", t_info / reps);
	printf("call=qclose plain_us=%.3f q_us=%.3f (close)\n", t_close / reps, t_qclose / reps);
	if (sends > 0)
		printf("call=qsendto plain_us=%.3f q_us=%.3f overhead_pct=%.1f sends=%ld\n", t_send / sends,
		       t_qsend / sends, 100.0 * (t_qsend - t_send) / t_send, sends);
	if (sends > 0)
		printf("call=qsendto_txtime plain_us=%.3f q_us=%.3f overhead_pct=%.1f sends=%ld (edf-lossless, SCM_TXTIME)\n",
		       t_send / sends, t_esend / sends, 100.0 * (t_esend - t_send) / t_send, sends);
	print_info(qfd);
	print_info(efd);
	close(fd);
	qclose(qfd);
	qclose(efd);
	return 0;
}
