/* rsvp_rapi: the RAPI-like calls of libhostqos, for TestRSVPThreeHosts.
 *
 *   rsvp_rapi send NAME DEST PROTO PORT r b M   rsvp_session + rsvp_sender
 *   rsvp_rapi remove NAME                        rsvp_remove
 *
 * Also checks that refusals come back as errno and a reason: a bad name is
 * refused by the library (EINVAL), a bad protocol by hostqosd (EINVAL).
 * Prints one line per call; exits 1 on an unexpected result. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hostqos/qsock.h>

int main(int argc, char **argv)
{
	struct rsvp_tspec t = {0};

	if (argc == 3 && strcmp(argv[1], "remove") == 0) {
		if (rsvp_remove(argv[2]) < 0) {
			printf("rsvp_remove failed errno=%d: %s\n", errno, qstrerror());
			return 1;
		}
		printf("rsvp_remove ok\n");
		return 0;
	}
	if (argc != 9 || strcmp(argv[1], "send") != 0) {
		fprintf(stderr, "usage: rsvp_rapi send NAME DEST PROTO PORT r b M | remove NAME\n");
		return 2;
	}
	if (rsvp_session("a/b", argv[3], argv[4]) != -1 || errno != EINVAL) {
		printf("rsvp_session with a bad name not refused\n");
		return 1;
	}
	printf("bad name refused errno=%d: %s\n", errno, qstrerror());
	if (rsvp_session(argv[2], argv[3], "sctp") != -1 || errno != EINVAL) {
		printf("rsvp_session with proto sctp not refused\n");
		return 1;
	}
	printf("bad proto refused errno=%d: %s\n", errno, qstrerror());
	if (rsvp_session(argv[2], argv[3], argv[4]) < 0) {
		printf("rsvp_session failed errno=%d: %s\n", errno, qstrerror());
		return 1;
	}
	t.r = strtoull(argv[6], NULL, 10);
	t.b = strtoull(argv[7], NULL, 10);
	t.M = strtoull(argv[8], NULL, 10);
	if (rsvp_sender(argv[2], (uint16_t)atoi(argv[5]), &t) < 0) {
		printf("rsvp_sender failed errno=%d: %s\n", errno, qstrerror());
		return 1;
	}
	printf("rsvp_session and rsvp_sender ok\n");
	return 0;
}
