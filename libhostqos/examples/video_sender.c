/*
 * video_sender: a simulated MPEG video server on a qsocket (seed §4.2.1).
 *
 *   video_sender ADDR PORT SECONDS [CLASS]
 *
 * 20 frames per second in the group of pictures IBBPBBPBBPBB; a frame is
 * cut into messages of at most 1200 bytes, marked as one frame
 * (QPF_FRAME_START … QPF_FRAME_END). The scheduler is DWCS with an
 * inter-packet gap of 50 ms (one frame every 50 ms: the host gives frame
 * k the deadline d_k = max(d_{k-1}, its arrival) + 50 ms) and a loss
 * tolerance of 1 frame in any 4 consecutive: under overload the host
 * drops a late frame whole while the window allows it, and sends it late
 * otherwise. I frames are non-droppable; B frames go before P frames
 * (drop priority 2 and 1). Served at 4 Mbit/s (an I frame of 12 kB
 * leaves in 24 ms, well within its 50 ms). Prints the qinfo summary at
 * the end.
 */
#include <unistd.h>

#include "common.h"

#define FPS 20
#define MSG 1200

int main(int argc, char **argv)
{
	static const char gop[] = "IBBPBBPBBPBB";
	struct sockaddr_storage dst;
	struct qos_params p;
	socklen_t dlen;
	char buf[MSG];
	int fd, fam, seconds, frames, f;
	long period = 1000000000L / FPS;
	struct timespec next;

	if (argc < 4) {
		fprintf(stderr, "usage: %s ADDR PORT SECONDS [CLASS]\n", argv[0]);
		return 2;
	}
	fam = parse_dst(argv[1], argv[2], &dst, &dlen);
	seconds = atoi(argv[3]);
	qos_params_init(&p);
	snprintf(p.class_name, sizeof(p.class_name), "%s", argc > 4 ? argv[4] : "interactive");
	p.scheduler = QOS_SCHED_DWCS;
	p.dwcs.ipg_us = 1000000 / FPS;
	p.dwcs.oln = 1;
	p.dwcs.old = 4;
	p.rate = 4000000;
	fd = qsocket(fam, SOCK_DGRAM, 0, &p);
	if (fd < 0) {
		fprintf(stderr, "qsocket: %s\n", qstrerror());
		return 1;
	}
	frames = seconds * FPS;
	clock_gettime(CLOCK_MONOTONIC, &next);
	for (f = 0; f < frames; f++) {
		char type = gop[f % (sizeof(gop) - 1)];
		int size = type == 'I' ? 12000 : type == 'P' ? 4000 : 1500;
		int nmsg = (size + MSG - 1) / MSG, m;
		struct packet_flags pf = {0};

		pf.drop_priority = type == 'B' ? 2 : type == 'P' ? 1 : 0;
		for (m = 0; m < nmsg; m++) {
			int len = m == nmsg - 1 ? size - m * MSG : MSG;

			pf.flags = (m == 0 ? QPF_FRAME_START : 0) | (m == nmsg - 1 ? QPF_FRAME_END : 0) |
				   (type == 'I' ? QPF_NON_DROPPABLE : 0);
			snprintf(buf, sizeof(buf), "frame %d type %c msg %d/%d", f, type, m + 1, nmsg);
			if (qsendto(fd, buf, (size_t)len, 0, (struct sockaddr *)&dst, dlen, &pf) < 0) {
				fprintf(stderr, "qsendto: %s\n", qstrerror());
				return 1;
			}
		}
		next.tv_nsec += period;
		if (next.tv_nsec >= 1000000000L) {
			next.tv_sec++;
			next.tv_nsec -= 1000000000L;
		}
		clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL);
	}
	print_info(fd);
	qclose(fd);
	return 0;
}
