/*
 * The acceptance program of TestQSockets, built against the installed
 * <hostqos/qsock.h> and libhostqos with `pkg-config --cflags --libs
 * hostqos`.
 *
 *   qsock_accept send ADDR PORT CLASS1 N1 CLASS2 N2
 *	qsocket in CLASS1, N1 datagrams, qinfo; qchange to CLASS2 (a refusal
 *	is printed as "qchange refused errno=E: MSG" and ends the program
 *	with 3), N2 datagrams, qinfo.
 *   qsock_accept attach FD CLASS
 *	qattach of descriptor FD (inherited): "qattach ok" or
 *	"qattach refused errno=E: MSG" (exit 3).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hostqos/qsock.h>

static int info(int fd, const char *when)
{
	struct qos_info in;

	if (qinfo(fd, &in) < 0) {
		printf("qinfo failed errno=%d: %s\n", errno, qstrerror());
		return -1;
	}
	printf("%s id=%u class=%s dscp=%d sent=%llu packets=%llu bytes=%llu\n", when, in.id,
	       in.class_name, in.dscp, (unsigned long long)in.sent_msgs,
	       (unsigned long long)in.packets, (unsigned long long)in.bytes);
	return 0;
}

static int sendn(int fd, struct sockaddr_in *dst, int n)
{
	char msg[100];

	for (int i = 0; i < n; i++) {
		memset(msg, 'q', sizeof(msg));
		if (qsendto(fd, msg, sizeof(msg), 0, (struct sockaddr *)dst, sizeof(*dst), NULL) < 0) {
			printf("qsendto failed errno=%d: %s\n", errno, qstrerror());
			return -1;
		}
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct qos_params p;

	qos_params_init(&p);
	if (argc == 4 && strcmp(argv[1], "attach") == 0) {
		snprintf(p.class_name, sizeof(p.class_name), "%s", argv[3]);
		if (qattach(atoi(argv[2]), &p) < 0) {
			printf("qattach refused errno=%d: %s\n", errno, qstrerror());
			return 3;
		}
		printf("qattach ok\n");
		return 0;
	}
	if (argc == 8 && strcmp(argv[1], "send") == 0) {
		struct sockaddr_in dst = {.sin_family = AF_INET, .sin_port = htons((unsigned short)atoi(argv[3]))};
		int fd;

		inet_pton(AF_INET, argv[2], &dst.sin_addr);
		snprintf(p.class_name, sizeof(p.class_name), "%s", argv[4]);
		fd = qsocket(AF_INET, SOCK_DGRAM, 0, &p);
		if (fd < 0) {
			printf("qsocket refused errno=%d: %s\n", errno, qstrerror());
			return 3;
		}
		if (sendn(fd, &dst, atoi(argv[5])) < 0 || info(fd, "first") < 0)
			return 1;
		snprintf(p.class_name, sizeof(p.class_name), "%s", argv[6]);
		if (qchange(fd, &p) < 0) {
			printf("qchange refused errno=%d: %s\n", errno, qstrerror());
			return 3;
		}
		if (sendn(fd, &dst, atoi(argv[7])) < 0 || info(fd, "second") < 0)
			return 1;
		qclose(fd);
		return 0;
	}
	fprintf(stderr, "usage: %s send ADDR PORT CLASS1 N1 CLASS2 N2 | attach FD CLASS\n", argv[0]);
	return 2;
}
