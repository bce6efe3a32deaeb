/* bench_ps: parameter-server push-pull throughput against raw ZeroMQ.
 *
 * A 100 MB float vector (override: --mb N) is cut by ps/placement into 4 MB
 * chunks and spread over 1 and then 2 parameter-server processes (sync, one
 * worker, plain SGD). One round = push every chunk (zero-copy) and collect
 * every chunk's new values. The peer figure is raw ZeroMQ ROUTER/DEALER with
 * the same messages: echo processes that send each received message straight
 * back. Both are measured in the same run on loopback; the figure is the
 * vector's bytes per second of round trips (GB/s), the median of --runs
 * rounds after one warm-up; the ratio ps/raw is printed (target >= 0.8).
 * The same parameter servers are then measured with ZeroMQ CURVE (encryption
 * and the ZAP key check, as weft runs them by default) and the ratio
 * CURVE/plain is printed (target >= 0.7).
 * --servers 1|2 runs one configuration only. Ports are picked free by the
 * kernel; a peer that does not answer fails the run after 60 s, never hangs. */
#include "common/util.h"
#include "ps/auth.h"
#include "ps/client.h"
#include "ps/placement.h"
#include "ps/server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

#define JOB 99

static pid_t kids[4];
static int nkids;

static void stop_kids(void)
{
	for (int i = 0; i < nkids; i++) {
		kill(kids[i], SIGKILL);
		waitpid(kids[i], NULL, 0);
	}
	nkids = 0;
}

/* A loopback TCP port that is free now (the kernel picks it). */
static int free_port(void)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0), port = -1;
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(a);
	if (fd >= 0 && !bind(fd, (struct sockaddr *)&a, sizeof(a)) &&
	    !getsockname(fd, (struct sockaddr *)&a, &len))
		port = ntohs(a.sin_port);
	if (fd >= 0)
		close(fd);
	return port;
}

/* ---- raw ZeroMQ echo peer ---- */

static void echo_main(const char *ep)
{
	void *ctx = zmq_ctx_new(), *s = zmq_socket(ctx, ZMQ_ROUTER);
	if (zmq_bind(s, ep))
		_exit(1);
	for (;;) {
		zmq_msg_t id, body;
		zmq_msg_init(&id);
		zmq_msg_init(&body);
		if (zmq_msg_recv(&id, s, 0) < 0 || zmq_msg_recv(&body, s, 0) < 0)
			_exit(1);
		zmq_msg_send(&id, s, ZMQ_SNDMORE);
		zmq_msg_send(&body, s, 0); /* the same message back, no copy */
	}
}

/* One round over raw sockets: every chunk to its peer and back into params;
 * -1 when a peer did not answer (receives time out). */
static double raw_round(void **socks, const wf_ps_placement *pl, float *grads, float *params)
{
	double t0 = wf_now();
	for (int k = 0; k < pl->nchunks; k++) {
		const wf_ps_chunk *c = &pl->chunks[k];
		zmq_msg_t m;
		zmq_msg_init_data(&m, grads + c->offset, c->count * sizeof(float), NULL, NULL);
		zmq_msg_send(&m, socks[c->server], 0);
	}
	for (int k = 0; k < pl->nchunks; k++) {
		const wf_ps_chunk *c = &pl->chunks[k];
		zmq_msg_t m;
		zmq_msg_init(&m);
		if (zmq_msg_recv(&m, socks[c->server], 0) < 0) {
			zmq_msg_close(&m);
			return -1;
		}
		memcpy(params + c->offset, zmq_msg_data(&m), zmq_msg_size(&m));
		zmq_msg_close(&m);
	}
	return wf_now() - t0;
}

static double bench_raw(int nservers, const wf_ps_placement *pl, float *grads, float *params,
			int runs)
{
	char eps[4][64];
	void *ctx = zmq_ctx_new(), *socks[4];
	for (int s = 0; s < nservers; s++) {
		snprintf(eps[s], sizeof(eps[s]), "tcp://127.0.0.1:%d", free_port());
		pid_t pid = fork();
		if (pid == 0)
			echo_main(eps[s]);
		kids[nkids++] = pid;
		socks[s] = zmq_socket(ctx, ZMQ_DEALER);
		int linger = 0, rcvtimeo = 60000;
		zmq_setsockopt(socks[s], ZMQ_LINGER, &linger, sizeof(linger));
		zmq_setsockopt(socks[s], ZMQ_RCVTIMEO, &rcvtimeo, sizeof(rcvtimeo));
		zmq_connect(socks[s], eps[s]);
	}
	double t[64], med = -1;
	int ok = raw_round(socks, pl, grads, params) >= 0; /* warm-up and connect */
	for (int r = 0; r < runs && ok; r++)
		ok = (t[r] = raw_round(socks, pl, grads, params)) >= 0;
	if (ok)
		med = wf_median(t, runs);
	else
		fprintf(stderr, "bench_ps: raw echo peer did not answer within 60 s\n");
	for (int s = 0; s < nservers; s++)
		zmq_close(socks[s]);
	zmq_ctx_term(ctx);
	stop_kids();
	return med;
}

/* ---- parameter servers ---- */

static double bench_ps(int nservers, size_t n, const wf_ps_placement *pl, float *grads,
		       float *params, int runs, const wf_ps_keys *keys)
{
	char eps[4][64];
	const char *cep[4];
	for (int s = 0; s < nservers; s++) {
		snprintf(eps[s], sizeof(eps[s]), "tcp://127.0.0.1:%d", free_port());
		cep[s] = eps[s];
		pid_t pid = fork();
		if (pid == 0) {
			wf_ps_server_cfg c;
			wf_ps_server_cfg_default(&c);
			c.bind = eps[s];
			c.index = s;
			c.nservers = nservers;
			c.job_id = JOB;
			c.nparams = n;
			c.optim.momentum = 0;
			c.optim.lr = 1e-6;
			c.stats_every = 0;
			c.keys = keys;
			wf_err err = {0};
			int rc = wf_ps_server_run(&c, &err);
			if (rc)
				fprintf(stderr, "bench_ps: server %d: %s\n", s, err.msg);
			_exit(rc ? 1 : 0);
		}
		kids[nkids++] = pid;
	}
	wf_ps_client_cfg cc = {.nservers = nservers,
			       .endpoints = cep,
			       .job_id = JOB,
			       .role = WF_PS_ROLE_WORKER,
			       .index = 0,
			       .pl = pl,
			       .params = params,
			       .contributors = 1,
			       .timeout = 120,
			       .connect_timeout = 30,
			       .keys = keys};
	wf_ps_client *c = NULL;
	wf_err err = {0};
	double t[64], med = -1;
	if (wf_ps_client_create(&c, &cc, &err) || wf_ps_client_register(c, 0, NULL, NULL, &err) ||
	    wf_ps_client_init(c, params, NULL, NULL, 0, &err)) {
		fprintf(stderr, "bench_ps: %s\n", err.msg);
		goto done;
	}
	for (int r = 0; r <= runs; r++) {
		double t0 = wf_now();
		for (int k = 0; k < pl->nchunks; k++)
			wf_ps_client_push_pull_async(c, k, grads, r, 0, &err);
		if (wf_ps_client_wait_all(c, &err)) {
			fprintf(stderr, "bench_ps: %s\n", err.msg);
			goto done;
		}
		if (r > 0) /* round 0 warms up */
			t[r - 1] = wf_now() - t0;
	}
	med = wf_median(t, runs);
	wf_ps_client_shutdown(c, &err);
done:
	wf_ps_client_free(c);
	stop_kids();
	return med;
}

int main(int argc, char **argv)
{
	size_t mb = 100;
	int runs = 5, only = 0;
	const char *tune = getenv("WEFT_PS_MALLOC_TUNE"); /* as weft's cluster.malloc_tune */
	if (tune && !strcmp(tune, "0"))
		wf_ps_tune_malloc_enable(0);
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--mb") && i + 1 < argc)
			mb = (size_t)atol(argv[++i]);
		else if (!strcmp(argv[i], "--runs") && i + 1 < argc)
			runs = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--servers") && i + 1 < argc)
			only = atoi(argv[++i]);
		else {
			fprintf(stderr, "usage: bench_ps [--mb MB] [--runs N] [--servers 1|2]\n");
			return 2;
		}
	}
	if (runs < 1 || runs > 64 || mb < 1) {
		fprintf(stderr, "bench_ps: --runs 1..64, --mb >= 1\n");
		return 2;
	}
	size_t n = mb * (1u << 20) / sizeof(float);
	float *grads = malloc(n * sizeof(float)), *params = malloc(n * sizeof(float));
	if (!grads || !params) {
		fprintf(stderr, "bench_ps: out of memory\n");
		return 1;
	}
	wf_rng r;
	wf_rng_seed(&r, 1);
	for (size_t i = 0; i < n; i++)
		grads[i] = params[i] = (float)wf_rng_uniform(&r);
	atexit(stop_kids);
	printf("bench_ps: %zu MB float vector, 4 MB chunks, median of %d rounds, loopback\n", mb,
	       runs);
	wf_ps_keys keys;
	wf_err kerr = {0};
	if (wf_ps_keys_new(&keys, &kerr)) {
		fprintf(stderr, "bench_ps: %s\n", kerr.msg);
		return 1;
	}
	printf("%-8s %8s %12s %12s %7s %12s %12s\n", "servers", "chunks", "ps GB/s", "raw GB/s",
	       "ratio", "curve GB/s", "curve/plain");
	int worst = 0;
	for (int ns = 1; ns <= 2; ns++) {
		if (only && ns != only)
			continue;
		wf_ps_placement pl;
		wf_err err = {0};
		if (wf_ps_place(&pl, NULL, 0, n, ns, 0, &err)) {
			fprintf(stderr, "bench_ps: %s\n", err.msg);
			return 1;
		}
		double traw = bench_raw(ns, &pl, grads, params, runs);
		double tps = bench_ps(ns, n, &pl, grads, params, runs, NULL);
		double tcv = bench_ps(ns, n, &pl, grads, params, runs, &keys);
		double gb = (double)n * sizeof(float) / 1e9;
		if (tps <= 0 || traw <= 0 || tcv <= 0) {
			printf("%-8d %8d %12s %12s %7s %12s %12s\n", ns, pl.nchunks, "failed",
			       "failed", "-", "failed", "-");
			worst = 1;
		} else {
			printf("%-8d %8d %12.2f %12.2f %7.2f %12.2f %12.2f\n", ns, pl.nchunks,
			       gb / tps, gb / traw, traw / tps, gb / tcv, tps / tcv);
		}
		fflush(stdout);
		wf_ps_placement_free(&pl);
	}
	free(grads);
	free(params);
	return worst;
}
