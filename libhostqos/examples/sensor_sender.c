/*
 * sensor_sender: a remote data acquisition sensor on a qsocket (seed
 * §4.2.2).
 *
 *   sensor_sender ADDR PORT COUNT [CLASS [SCHEDULER]]
 *
 * Sends COUNT readings at random intervals of 5 … 25 ms, each with its
 * own deadline 5 … 30 ms ahead (a reading is useless after it), which
 * travels with it to the host's scheduler (SCM_TXTIME). The scheduler
 * (default edf-lossy) drops a reading that cannot meet its deadline: at
 * the source when the measured queueing delay says so, else in the host
 * when its predicted departure across all qsockets of the link is after
 * it; edf-lossless sends all and counts the late ones. Prints the qinfo
 * summary at the end.
 */
#include <unistd.h>

#include "common.h"

int main(int argc, char **argv)
{
	struct sockaddr_storage dst;
	struct qos_params p;
	socklen_t dlen;
	int fd, fam, count, i;
	unsigned seed = 13;

	if (argc < 4) {
		fprintf(stderr, "usage: %s ADDR PORT COUNT [CLASS [edf-lossy|edf-lossless|fifo]]\n", argv[0]);
		return 2;
	}
	fam = parse_dst(argv[1], argv[2], &dst, &dlen);
	count = atoi(argv[3]);
	qos_params_init(&p);
	snprintf(p.class_name, sizeof(p.class_name), "%s", argc > 4 ? argv[4] : "interactive");
	p.scheduler = QOS_SCHED_EDF_LOSSY;
	if (argc > 5 && strcmp(argv[5], "edf-lossless") == 0)
		p.scheduler = QOS_SCHED_EDF_LOSSLESS;
	else if (argc > 5 && strcmp(argv[5], "fifo") == 0)
		p.scheduler = QOS_SCHED_FIFO;
	fd = qsocket(fam, SOCK_DGRAM, 0, &p);
	if (fd < 0) {
		fprintf(stderr, "qsocket: %s\n", qstrerror());
		return 1;
	}
	for (i = 0; i < count; i++) {
		char reading[64];
		struct packet_flags pf = {0};
		long ahead = (5 + rand_r(&seed) % 26) * 1000000L;
		int n;

		pf.deadline = mono_after(ahead);
		n = snprintf(reading, sizeof(reading), "reading %d deadline_ms %ld", i, ahead / 1000000L);
		if (qsendto(fd, reading, (size_t)n, 0, (struct sockaddr *)&dst, dlen, &pf) < 0 &&
		    errno != ETIME) {
			fprintf(stderr, "qsendto: %s\n", qstrerror());
			return 1;
		}
		usleep((useconds_t)(5 + rand_r(&seed) % 21) * 1000);
	}
	print_info(fd);
	qclose(fd);
	return 0;
}
