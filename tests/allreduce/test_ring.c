/* test_ring.c: the TCP ring of elastic allreduce (worker/ring.h) with real
 * processes on loopback: for several world sizes and odd lengths (shorter
 * than the ring, and larger than the sockets' buffers) every rank ends with
 * the serial sum, bitwise, in the order the ring adds (chunk c: ranks c,
 * c + 1, ...); a broadcast reaches every rank; with the job key a rank that
 * does not hold it is refused; a peer killed mid-allreduce makes the others
 * fail at once naming a peer, and a peer that stops answering makes them
 * fail after the timeout naming it, instead of hanging. */
#include "common/error.h"
#include "common/util.h"
#include "tests/test.h"
#include "worker/netio.h"
#include "worker/ring.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define JOB	 0x7269e6ull
#define MAX_RANK 8
#define BIG	 1000003 /* floats: an odd length, 4 MB, past the sockets' buffers */

typedef struct peer {
	pid_t pid;
	int fd;	 /* read end: the rank's report */
	int lfd; /* its listening socket (the parent's copy, closed after fork) */
	int port;
} peer;

typedef struct report {
	int rc;
	double seconds; /* how long the failing call took */
	char msg[1024];
} report;

/* What a rank does once its ring is formed. */
typedef enum { DO_SUM, DO_BCAST, DO_IDLE, DO_SUM_SIGNAL } action;

static const uint8_t KEY[32] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
static const uint8_t OTHER_KEY[32] = {9, 9, 9};

static void values(float *v, size_t n, int rank)
{
	wf_rng r;
	wf_rng_seed(&r, 1000 + (uint64_t)rank);
	for (size_t i = 0; i < n; i++)
		v[i] = (float)(wf_rng_u64(&r) % 2000001) / 1000.0f - 1000.0f;
}

static void write_all(int fd, const void *p, size_t n)
{
	const char *c = p;
	while (n > 0) {
		ssize_t k = write(fd, c, n);
		if (k <= 0)
			return;
		c += k;
		n -= (size_t)k;
	}
}

static int read_all(int fd, void *p, size_t n)
{
	char *c = p;
	while (n > 0) {
		ssize_t k = read(fd, c, n);
		if (k <= 0)
			return -1;
		c += k;
		n -= (size_t)k;
	}
	return 0;
}

/* The ranks' listening sockets, made before any fork so every port is known. */
static int listen_all(peer *p, int w)
{
	wf_err err = {0};
	for (int r = 0; r < w; r++) {
		p[r].lfd = wf_net_listen(0, 16, "test ring", &err);
		if (p[r].lfd < 0)
			return -1;
		p[r].port = wf_net_local_port(p[r].lfd);
	}
	return 0;
}

/* Rank r: form the ring, act, report (rc, seconds, message, then the
 * floats), exit 0. */
static void rank_main(peer *p, int w, int r, action act, size_t n, const uint8_t *key,
		      double timeout, int out)
{
	for (int k = 0; k < w; k++)
		if (k != r)
			close(p[k].lfd);
	char right[64], rname[32], lname[32];
	snprintf(right, sizeof(right), "127.0.0.1:%d", p[(r + 1) % w].port);
	snprintf(rname, sizeof(rname), "rank %d", (r + 1) % w);
	snprintf(lname, sizeof(lname), "rank %d", (r + w - 1) % w);
	wf_ring_cfg cfg = {.rank = r,
			   .size = w,
			   .listen_fd = p[r].lfd,
			   .right = right,
			   .right_name = rname,
			   .left_name = lname,
			   .job = JOB,
			   .gen = 7,
			   .key = key,
			   .timeout = timeout};
	report rep = {0};
	wf_err err = {0};
	wf_ring *ring = NULL;
	float *v = malloc((n ? n : 1) * sizeof(float));
	values(v, n, r);
	rep.rc = wf_ring_create(&ring, &cfg, &err);
	if (rep.rc == 0 && act == DO_IDLE) {
		char b = 1;
		write_all(out, &b, 1); /* formed: the parent may stop or kill it now */
		pause();
	}
	if (rep.rc == 0 && act == DO_SUM_SIGNAL) {
		char b = 1;
		write_all(out, &b, 1); /* entering the allreduce */
	}
	double t0 = wf_now();
	if (rep.rc == 0 && act == DO_BCAST)
		rep.rc = wf_ring_bcast(ring, v, n * sizeof(float), 1 % w, "the test vector", &err);
	else if (rep.rc == 0)
		rep.rc = wf_ring_allreduce(ring, v, n, "the test vector", &err);
	rep.seconds = wf_now() - t0;
	snprintf(rep.msg, sizeof(rep.msg), "%s", rep.rc ? err.msg : "");
	write_all(out, &rep, sizeof(rep));
	if (rep.rc == 0)
		write_all(out, v, n * sizeof(float));
	wf_ring_free(ring);
	free(v);
	_exit(0);
}

/* Start w ranks (keys[r]: rank r's key, NULL none); acts[r] what each does. */
static int start(peer *p, int w, const action *acts, size_t n, const uint8_t *const *keys,
		 double timeout)
{
	if (listen_all(p, w) != 0)
		return -1;
	for (int r = 0; r < w; r++) {
		int fds[2];
		if (pipe(fds) != 0)
			return -1;
		fflush(NULL);
		p[r].pid = fork();
		if (p[r].pid == 0) {
			close(fds[0]);
			for (int k = 0; k < r; k++)
				close(p[k].fd);
			rank_main(p, w, r, acts[r], n, keys[r], timeout, fds[1]);
		}
		close(fds[1]);
		p[r].fd = fds[0];
	}
	for (int r = 0; r < w; r++)
		close(p[r].lfd);
	return 0;
}

static void reap(peer *p, int w)
{
	for (int r = 0; r < w; r++) {
		if (p[r].pid > 0) {
			kill(p[r].pid, SIGKILL);
			kill(p[r].pid, SIGCONT);
			waitpid(p[r].pid, NULL, 0);
		}
		close(p[r].fd);
	}
}

/* The ring's sum of element i of chunk c: ranks c, c + 1, ... in turn. */
static void expected_sum(float *want, size_t n, int w)
{
	float *x[MAX_RANK];
	for (int r = 0; r < w; r++) {
		x[r] = malloc((n ? n : 1) * sizeof(float));
		values(x[r], n, r);
	}
	for (int c = 0; c < w; c++) {
		size_t lo = n * (size_t)c / (size_t)w, hi = n * (size_t)(c + 1) / (size_t)w;
		for (size_t i = lo; i < hi; i++) {
			float acc = x[c][i];
			for (int k = 1; k < w; k++)
				acc = acc + x[(c + k) % w][i];
			want[i] = acc;
		}
	}
	for (int r = 0; r < w; r++)
		free(x[r]);
}

static void check_sum(int w, size_t n)
{
	peer p[MAX_RANK];
	action acts[MAX_RANK];
	const uint8_t *keys[MAX_RANK];
	for (int r = 0; r < w; r++) {
		acts[r] = DO_SUM;
		keys[r] = KEY;
	}
	WF_CHECK(start(p, w, acts, n, keys, 30) == 0);
	float *want = malloc((n ? n : 1) * sizeof(float)),
	      *got = malloc((n ? n : 1) * sizeof(float));
	expected_sum(want, n, w);
	for (int r = 0; r < w; r++) {
		report rep;
		WF_CHECK(read_all(p[r].fd, &rep, sizeof(rep)) == 0);
		WF_CHECK_MSG(rep.rc == 0, "world %d, %zu floats, rank %d: %s", w, n, r, rep.msg);
		if (rep.rc != 0)
			continue;
		WF_CHECK(read_all(p[r].fd, got, n * sizeof(float)) == 0);
		WF_CHECK_MSG(memcmp(got, want, n * sizeof(float)) == 0,
			     "world %d, %zu floats: rank %d differs from the serial sum", w, n, r);
	}
	reap(p, w);
	free(want);
	free(got);
}

static void test_sum_equals_the_serial_sum_bitwise(void)
{
	static const int worlds[] = {1, 2, 3, 5};
	static const size_t lengths[] = {1, 3, 7, 1001, BIG};
	for (size_t i = 0; i < sizeof(worlds) / sizeof(*worlds); i++)
		for (size_t k = 0; k < sizeof(lengths) / sizeof(*lengths); k++)
			check_sum(worlds[i], lengths[k]);
}

static void test_bcast_reaches_every_rank(void)
{
	int w = 4;
	size_t n = BIG;
	peer p[MAX_RANK];
	action acts[MAX_RANK] = {DO_BCAST, DO_BCAST, DO_BCAST, DO_BCAST};
	const uint8_t *keys[MAX_RANK] = {KEY, KEY, KEY, KEY};
	WF_CHECK(start(p, w, acts, n, keys, 30) == 0);
	float *want = malloc(n * sizeof(float)), *got = malloc(n * sizeof(float));
	values(want, n, 1); /* the root's */
	for (int r = 0; r < w; r++) {
		report rep;
		WF_CHECK(read_all(p[r].fd, &rep, sizeof(rep)) == 0);
		WF_CHECK_MSG(rep.rc == 0, "rank %d: %s", r, rep.msg);
		if (rep.rc == 0) {
			WF_CHECK(read_all(p[r].fd, got, n * sizeof(float)) == 0);
			WF_CHECK_MSG(memcmp(got, want, n * sizeof(float)) == 0, "rank %d", r);
		}
	}
	reap(p, w);
	free(want);
	free(got);
}

static void test_rank_without_the_key_is_refused(void)
{
	int w = 3;
	peer p[MAX_RANK];
	action acts[MAX_RANK] = {DO_SUM, DO_SUM, DO_SUM};
	const uint8_t *keys[MAX_RANK] = {KEY, OTHER_KEY, KEY};
	WF_CHECK(start(p, w, acts, 16, keys, 3) == 0);
	int refused = 0;
	for (int r = 0; r < w; r++) {
		report rep;
		WF_CHECK(read_all(p[r].fd, &rep, sizeof(rep)) == 0);
		WF_CHECK_MSG(rep.rc == WF_ETRANSIENT, "rank %d formed a ring with a wrong key", r);
		refused += strstr(rep.msg, "did not prove it holds the job key") != NULL;
	}
	WF_CHECK_MSG(refused >= 1, "nobody named the missing key");
	reap(p, w);
}

/* Rank 1 forms the ring and then is killed (sig SIGKILL) or stopped
 * (SIGSTOP) while ranks 0 and 2 are in the allreduce. */
static void peer_lost(int sig, double timeout, double within)
{
	int w = 3;
	peer p[MAX_RANK];
	action acts[MAX_RANK] = {DO_SUM_SIGNAL, DO_IDLE, DO_SUM_SIGNAL};
	const uint8_t *keys[MAX_RANK] = {KEY, KEY, KEY};
	WF_CHECK(start(p, w, acts, BIG, keys, timeout) == 0);
	char b;
	for (int r = 0; r < w; r++)
		WF_CHECK(read(p[r].fd, &b, 1) == 1); /* formed / entering */
	double t0 = wf_now();
	kill(p[1].pid, sig);
	for (int r = 0; r < w; r += 2) {
		report rep;
		WF_CHECK(read_all(p[r].fd, &rep, sizeof(rep)) == 0);
		double waited = wf_now() - t0;
		WF_CHECK_MSG(rep.rc == WF_ETRANSIENT, "rank %d: rc %d after the peer was lost", r,
			     rep.rc);
		WF_CHECK_MSG(waited < within, "rank %d failed after %.1f s, want < %.1f s", r,
			     waited, within);
		WF_CHECK_MSG(strstr(rep.msg, "rank 1") || strstr(rep.msg, "rank 2") ||
				     strstr(rep.msg, "rank 0"),
			     "rank %d's error names no peer: %s", r, rep.msg);
		fprintf(stderr, "  rank %d (%.2f s): %s\n", r, waited, rep.msg);
		/* rank 2 receives from rank 1: its error names rank 1 */
		if (r == 2)
			WF_CHECK_MSG(strstr(rep.msg, "rank 1") != NULL, "rank 2: %s", rep.msg);
	}
	reap(p, w);
}

static void test_killed_peer_fails_the_others_at_once(void)
{
	peer_lost(SIGKILL, 30, 10);
}

static void test_silent_peer_fails_the_others_after_the_timeout(void)
{
	peer_lost(SIGSTOP, 1.5, 10);
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	WF_RUN(test_sum_equals_the_serial_sum_bitwise);
	WF_RUN(test_bcast_reaches_every_rank);
	WF_RUN(test_rank_without_the_key_is_refused);
	WF_RUN(test_killed_peer_fails_the_others_at_once);
	WF_RUN(test_silent_peer_fails_the_others_after_the_timeout);
	return wf_test_summary();
}
