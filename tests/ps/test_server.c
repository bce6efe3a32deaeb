/* Parameter server and client over real ZeroMQ sockets on loopback: each
 * server is a forked process (killed at the end of its test, even on
 * failure). Proves: bad messages from a raw DEALER are refused, counted and
 * leave the values alone; sync aggregation of 2 workers equals one optimizer
 * step on the summed gradient; async and ssp:K semantics; checkpoint, kill -9
 * and restore; a refusal ends a step's wait; a restarted server is known
 * from the register on; with replicas a pull's data unit waits for the
 * backup; a backup its primary dropped joins again and holds what the
 * primary acknowledged after that; a group that failed over goes back to
 * its restarted server; a dead worker leaves the count; elastic_batch global shares each
 * step's units; a stalled worker is named. */
#include "tests/test.h"

#include "common/util.h"
#include "kernels/kernels.h"
#include "model/optim.h"
#include "ps/client.h"
#include "ps/placement.h"
#include "ps/server.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#define JOB	4242
#define NPARAMS 1000
#define CHUNKB	1024 /* 256 floats per chunk: 4 chunks */

static char tmpdir[256];
static int port_base;
static pid_t children[8];
static int nchildren;

/* ---- helpers ------------------------------------------------------------ */

static void sleep_s(double s)
{
	struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
	nanosleep(&ts, NULL);
}

static void kill_children(void)
{
	for (int i = 0; i < nchildren; i++) {
		if (children[i] > 0) {
			kill(children[i], SIGKILL);
			waitpid(children[i], NULL, 0);
		}
		children[i] = 0;
	}
	nchildren = 0;
}

static void base_cfg(wf_ps_server_cfg *c, int index, int nservers, int nworkers)
{
	wf_ps_server_cfg_default(c);
	c->index = index;
	c->nservers = nservers;
	c->nworkers = nworkers;
	c->job_id = JOB;
	c->nparams = NPARAMS;
	c->nstate = 10;
	c->chunk_bytes = CHUNKB;
	c->batch = 4;
	c->stats_every = 0;
	c->heartbeat_timeout = 30;
	c->stall_timeout = 0;
}

static char bind_ep[8][64], conn_ep[8][64];

/* Fork a server process; its stderr goes to tmpdir/ps-<index>.log. */
static pid_t start_server(wf_ps_server_cfg *c)
{
	snprintf(bind_ep[c->index], 64, "tcp://127.0.0.1:%d", port_base + c->index);
	c->bind = bind_ep[c->index];
	pid_t pid = fork();
	if (pid == 0) {
		char log[512];
		snprintf(log, sizeof(log), "%s/ps-%d.log", tmpdir, c->index);
		if (!freopen(log, "a", stderr))
			_exit(3);
		wf_err err = {0};
		int rc = wf_ps_server_run(c, &err);
		if (rc)
			fprintf(stderr, "server exit: %s\n", err.msg);
		fflush(stderr);
		_exit(rc ? 1 : 0);
	}
	children[nchildren++] = pid;
	return pid;
}

static const char *const *endpoints(int n)
{
	static const char *eps[8];
	for (int i = 0; i < n; i++) {
		snprintf(conn_ep[i], 64, "tcp://127.0.0.1:%d", port_base + i);
		eps[i] = conn_ep[i];
	}
	return eps;
}

/* Servers 0 and 1 with ps.replicas 2: each the other's backup. */
static void start_pair(wf_ps_server_cfg sc[2], int nworkers, int backup_workers,
		       double peer_timeout)
{
	const char *const *peers = endpoints(2);
	for (int i = 0; i < 2; i++) {
		base_cfg(&sc[i], i, 2, nworkers);
		sc[i].backup_workers = backup_workers;
		sc[i].replicas = 2;
		sc[i].peers = peers;
		sc[i].peer_timeout = peer_timeout;
		start_server(&sc[i]);
	}
}

static int push_contributors = 4; /* workers' mean gradients one push sums */

/* Worker 0 of the pair with heartbeats: a server silent for
 * server_timeout seconds has failed, and its groups go to their other copy. */
static wf_ps_client *silence_client(const wf_ps_placement *pl, float *params, float *state,
				    double server_timeout)
{
	wf_ps_client_cfg cc = {.nservers = 2,
			       .endpoints = endpoints(2),
			       .job_id = JOB,
			       .role = WF_PS_ROLE_WORKER,
			       .pl = pl,
			       .params = params,
			       .state = state,
			       .nstate = 10,
			       .nslots = 1,
			       .contributors = 1,
			       .timeout = 10,
			       .connect_timeout = 10,
			       .heartbeat_interval = 0.1,
			       .server_timeout = server_timeout,
			       .replicas = 2};
	wf_ps_client *c = NULL;
	wf_err e = {0};
	int rc = wf_ps_client_create(&c, &cc, &e);
	WF_CHECK_MSG(rc == 0, "%s", e.msg);
	return c;
}

static wf_ps_client *failover_client(const wf_ps_placement *pl, float *params, float *state)
{
	return silence_client(pl, params, state, 0.5);
}

static wf_ps_client *make_client(const wf_ps_placement *pl, float *params, float *state, int role,
				 int index, double hb)
{
	wf_ps_client_cfg cc = {.nservers = pl->nservers,
			       .endpoints = endpoints(pl->nservers),
			       .job_id = JOB,
			       .role = role,
			       .index = index,
			       .pl = pl,
			       .params = params,
			       .state = state,
			       .nstate = state ? 10 : 0,
			       .nslots = 1,
			       .contributors = push_contributors,
			       .timeout = 10,
			       .connect_timeout = 10,
			       .heartbeat_interval = hb};
	wf_ps_client *c = NULL;
	wf_err e = {0};
	int rc = wf_ps_client_create(&c, &cc, &e);
	WF_CHECK_MSG(rc == 0, "%s", e.msg);
	return c;
}

static void fill(float *p, size_t n, uint64_t seed)
{
	wf_rng r;
	wf_rng_seed(&r, seed);
	for (size_t i = 0; i < n; i++)
		p[i] = (float)wf_rng_normal(&r);
}

static float max_diff(const float *a, const float *b, size_t n)
{
	float m = 0;
	for (size_t i = 0; i < n; i++)
		m = fmaxf(m, fabsf(a[i] - b[i]));
	return m;
}

/* Lines of path holding a (and b, unless NULL). */
static int file_count(const char *path, const char *a, const char *b)
{
	char *data = NULL;
	size_t len;
	if (wf_read_file(path, &data, &len))
		return 0;
	int found = 0;
	for (char *line = strtok(data, "\n"); line; line = strtok(NULL, "\n"))
		if (strstr(line, a) && (!b || strstr(line, b)))
			found++;
	free(data);
	return found;
}

static int file_contains(const char *path, const char *a, const char *b)
{
	return file_count(path, a, b) > 0;
}

/* Wait (at most 10 s) until path holds more than `had` lines with a and b. */
static int wait_lines(const char *path, const char *a, const char *b, int had)
{
	for (double t0 = wf_now(); wf_now() - t0 < 10; sleep_s(0.02))
		if (file_count(path, a, b) > had)
			return 1;
	return 0;
}

/* Register and init (chief), returning the initial values in p0. */
static int setup_job(wf_ps_client *chief, float *p0)
{
	wf_err e = {0};
	long step = 0;
	int rc = wf_ps_client_register(chief, 0, NULL, &step, &e);
	WF_CHECK_MSG(rc == 0, "register: %s", e.msg);
	WF_CHECK_INT(step, -1); /* fresh servers are not initialized */
	fill(p0, NPARAMS, 1);
	float st[10];
	fill(st, 10, 2);
	rc = rc ? rc : wf_ps_client_init(chief, p0, NULL, st, 0, &e);
	WF_CHECK_MSG(rc == 0, "init: %s", e.msg);
	return rc;
}

/* Worker 0 of the pair registers and seeds the job: values p0 (seed 1) and
 * state st (seed 2). 0 on success. */
static int seed_pair(wf_ps_client *a, float *p0, float *st)
{
	wf_err e = {0};
	if (!a || wf_ps_client_register(a, 0, NULL, NULL, &e) != 0)
		return -1;
	fill(p0, NPARAMS, 1);
	fill(st, 10, 2);
	int rc = wf_ps_client_init(a, p0, NULL, st, 0, &e);
	WF_CHECK_MSG(rc == 0, "%s", e.msg);
	return rc;
}

/* The first chunk placement gave server `server`. */
static int first_chunk_of(const wf_ps_placement *pl, int server)
{
	for (int k = 0; k < pl->nchunks; k++)
		if (pl->chunks[k].server == server)
			return k;
	return -1;
}

/* Worker a reads every chunk again (failing over to the other copies where
 * a server is gone) and must get exactly `acked`; `what` names it. */
static void reads_exactly(wf_ps_client *a, float *pa, const float *acked, const char *what)
{
	wf_err e = {0};
	memset(pa, 0, NPARAMS * sizeof(float));
	WF_CHECK_MSG(wf_ps_client_pull(a, -1, NULL, &e) == 0, "%s", e.msg);
	WF_CHECK_MSG(max_diff(pa, acked, NPARAMS) == 0.0f, "%s was lost (max diff %g)", what,
		     (double)max_diff(pa, acked, NPARAMS));
}

/* kill -9 server `victim`, then reads_exactly. */
static void acked_survives_kill(wf_ps_client *a, float *pa, const float *acked, int victim,
				const char *what)
{
	kill(children[victim], SIGKILL);
	reads_exactly(a, pa, acked, what);
}

/* ---- raw messages ------------------------------------------------------- */

/* A raw DEALER connected to server `server`, in a context of its own. */
typedef struct raw_peer {
	void *ctx, *sock;
} raw_peer;

static raw_peer raw_open(int server)
{
	raw_peer r = {zmq_ctx_new(), NULL};
	int linger = 0;
	r.sock = zmq_socket(r.ctx, ZMQ_DEALER);
	zmq_setsockopt(r.sock, ZMQ_LINGER, &linger, sizeof(linger));
	zmq_connect(r.sock, conn_ep[server]);
	return r;
}

static void raw_close(raw_peer *r)
{
	zmq_close(r->sock);
	zmq_ctx_term(r->ctx);
}

/* Send frames from a raw DEALER and return the reply's flags (-1: no reply). */
static char last_text[2048]; /* payload of the last raw_exchange reply */

static int raw_exchange(void *sock, const void *const *f, const size_t *sz, int n)
{
	last_text[0] = '\0';
	for (int i = 0; i < n; i++)
		zmq_send(sock, f[i], sz[i], i + 1 < n ? ZMQ_SNDMORE : 0);
	zmq_pollitem_t it = {.socket = sock, .events = ZMQ_POLLIN};
	if (zmq_poll(&it, 1, 5000) <= 0)
		return -1;
	uint8_t hb[WF_PS_HEADER_BYTES];
	int flags = -1, more = 1, first = 1;
	while (more) {
		char buf[2048];
		int got = zmq_recv(sock, first ? (void *)hb : (void *)buf,
				   first ? sizeof(hb) : sizeof(buf) - 1, 0);
		if (!first && got >= 0 && !last_text[0]) {
			buf[got < (int)sizeof(buf) - 1 ? got : (int)sizeof(buf) - 1] = '\0';
			snprintf(last_text, sizeof(last_text), "%s", buf);
		}
		if (first && got == WF_PS_HEADER_BYTES) {
			wf_ps_hdr h;
			wf_ps_hdr_decode(&h, hb);
			flags = (int)h.flags;
		}
		first = 0;
		int m = 0;
		size_t ml = sizeof(m);
		zmq_getsockopt(sock, ZMQ_RCVMORE, &m, &ml);
		more = m;
	}
	return flags;
}

static void test_bad_messages_rejected_and_counted(void)
{
	wf_ps_server_cfg sc;
	base_cfg(&sc, 0, 1, 1);
	start_server(&sc);
	wf_ps_placement pl;
	wf_ps_place(&pl, NULL, 0, NPARAMS, 1, CHUNKB, NULL);
	float p0[NPARAMS], params[NPARAMS], st[10];
	wf_ps_client *chief = make_client(&pl, params, st, WF_PS_ROLE_CHIEF, 0, 0);
	if (!chief || setup_job(chief, p0))
		goto cleanup;

	raw_peer raw = raw_open(0);
	void *sock = raw.sock;
	float g[256];
	fill(g, 256, 9);
	size_t cb = pl.chunks[0].count * sizeof(float); /* 250 floats */
	wf_ps_hdr h = {.op = WF_PS_OP_PUSH_PULL,
		       .sender = WF_PS_SENDER(WF_PS_ROLE_WORKER, 0),
		       .job_id = JOB,
		       .chunk = 0,
		       .dtype = WF_PS_DTYPE_F32,
		       .tag = 7};
	uint8_t good[64], bad[64];
	const void *gf[1] = {g};
	size_t gs[1] = {cb};
	wf_ps_hdr_encode(&h, good, gf, gs, 1);
	const void *f[3] = {bad, g, g};
	size_t sz[3] = {64, cb, cb};
	int expect[WF_PS_REJECT__COUNT] = {0};

	memcpy(bad, good, 64); /* bad magic */
	bad[1] ^= 0x55;
	WF_CHECK(raw_exchange(sock, f, sz, 2) & WF_PS_FLAG_ERROR);
	expect[WF_PS_REJECT_MAGIC]++;
	size_t short_sz[2] = {20, cb}; /* short header */
	WF_CHECK(raw_exchange(sock, f, short_sz, 2) & WF_PS_FLAG_ERROR);
	expect[WF_PS_REJECT_HEADER]++;
	wf_ps_hdr v = h; /* wrong version */
	v.version = 9;
	wf_ps_hdr_encode(&v, bad, gf, gs, 1);
	WF_CHECK(raw_exchange(sock, f, sz, 2) & WF_PS_FLAG_ERROR);
	expect[WF_PS_REJECT_VERSION]++;
	v = h; /* wrong job */
	v.job_id = JOB + 1;
	wf_ps_hdr_encode(&v, bad, gf, gs, 1);
	WF_CHECK(raw_exchange(sock, f, sz, 2) & WF_PS_FLAG_ERROR);
	expect[WF_PS_REJECT_JOB]++;
	{ /* the error reply names the wrong job id, never the right one */
		char right[64];
		snprintf(right, sizeof(right), "%llu", (unsigned long long)JOB);
		WF_CHECK(strstr(last_text, "job id") != NULL);
		WF_CHECK_MSG(strstr(last_text, right) == NULL, "leaks the job id: %s", last_text);
		snprintf(right, sizeof(right), "%llx", (unsigned long long)JOB);
		WF_CHECK_MSG(strstr(last_text, right) == NULL, "leaks the job id: %s", last_text);
	}
	v = h; /* unknown op */
	v.op = 77;
	wf_ps_hdr_encode(&v, bad, gf, gs, 1);
	WF_CHECK(raw_exchange(sock, f, sz, 2) & WF_PS_FLAG_ERROR);
	expect[WF_PS_REJECT_OP]++;
	v = h; /* chunk out of range */
	v.chunk = 40;
	wf_ps_hdr_encode(&v, bad, gf, gs, 1);
	WF_CHECK(raw_exchange(sock, f, sz, 2) & WF_PS_FLAG_ERROR);
	expect[WF_PS_REJECT_CHUNK]++;
	size_t half[1] = {cb / 2}; /* byte count vs the chunk's size */
	v = h;
	wf_ps_hdr_encode(&v, bad, gf, half, 1);
	size_t szh[2] = {64, cb / 2};
	WF_CHECK(raw_exchange(sock, f, szh, 2) & WF_PS_FLAG_ERROR);
	expect[WF_PS_REJECT_BYTES]++;
	memcpy(bad, good, 64); /* truncated payload: header byte count disagrees */
	WF_CHECK(raw_exchange(sock, f, szh, 2) & WF_PS_FLAG_ERROR);
	expect[WF_PS_REJECT_BYTES]++;
	memcpy(bad, good, 64); /* bad checksum */
	bad[25] ^= 1;
	WF_CHECK(raw_exchange(sock, f, sz, 2) & WF_PS_FLAG_ERROR);
	expect[WF_PS_REJECT_CHECKSUM]++;
	memcpy(bad, good, 64); /* extra frame */
	WF_CHECK(raw_exchange(sock, f, sz, 3) & WF_PS_FLAG_ERROR);
	expect[WF_PS_REJECT_FRAMES]++;
	const void *many[8] = {good, g, g, g, g, g, g, g}; /* far too many frames */
	size_t many_sz[8] = {64, 4, 4, 4, 4, 4, 4, 4};
	WF_CHECK(raw_exchange(sock, many, many_sz, 8) & WF_PS_FLAG_ERROR);
	expect[WF_PS_REJECT_FRAMES]++;
	raw_close(&raw);

	/* the values did not move, and every rejection is counted by reason */
	memset(params, 0, sizeof(params));
	wf_err e = {0};
	long version = -5;
	WF_CHECK_INT(wf_ps_client_pull(chief, -1, &version, &e), 0);
	WF_CHECK_INT(version, 0);
	WF_CHECK(max_diff(params, p0, NPARAMS) == 0.0f);
	wf_ps_stats stats;
	WF_CHECK_INT(wf_ps_client_stats(chief, 0, &stats, &e), 0);
	for (int r = 0; r < WF_PS_REJECT__COUNT; r++)
		WF_CHECK_MSG(stats.rejected[r] == (uint64_t)expect[r], "reason %s: %llu != %d",
			     wf_ps_reject_name(r), (unsigned long long)stats.rejected[r],
			     expect[r]);
	WF_CHECK_INT(stats.pushes, 0);
	wf_ps_stats_free(&stats);
	/* shutdown: the server replies, then exits 0 */
	WF_CHECK_INT(wf_ps_client_shutdown(chief, &e), 0);
	int status = -1;
	waitpid(children[0], &status, 0);
	children[0] = 0;
	WF_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
cleanup:
	wf_ps_client_free(chief);
	wf_ps_placement_free(&pl);
	kill_children();
}

/* ---- sync --------------------------------------------------------------- */

static void test_sync_two_workers_equal_summed_step(void)
{
	wf_ps_server_cfg sc[2];
	for (int i = 0; i < 2; i++) {
		base_cfg(&sc[i], i, 2, 2);
		sc[i].backend = "ref";
		start_server(&sc[i]);
	}
	wf_ps_placement pl;
	wf_ps_place(&pl, NULL, 0, NPARAMS, 2, CHUNKB, NULL);
	static float p0[NPARAMS], pa[NPARAMS], pb[NPARAMS], ga[NPARAMS], gb[NPARAMS];
	static float ref[NPARAMS], mom[NPARAMS], gsum[NPARAMS];
	float sa[10], sb[10], s0[10];
	wf_ps_client *a = make_client(&pl, pa, sa, WF_PS_ROLE_WORKER, 0, 0.2);
	wf_ps_client *b = make_client(&pl, pb, sb, WF_PS_ROLE_WORKER, 1, 0.2);
	wf_backend *be = NULL;
	wf_err e = {0};
	if (!a || !b || setup_job(a, p0) || wf_ps_client_register(b, 0, NULL, NULL, &e))
		goto cleanup;
	WF_CHECK_INT(wf_backend_create(&be, "ref", 0, &e), 0);
	memcpy(ref, p0, sizeof(ref));
	wf_optim_cfg oc;
	wf_optim_cfg_default(&oc); /* sgd 0.1, momentum 0.9: same as the servers */
	int state_chunk = -1;
	for (int k = 0; k < pl.nchunks; k++)
		if (pl.chunks[k].server == 0)
			state_chunk = k;
	for (long step = 0; step < 3; step++) {
		fill(ga, NPARAMS, 100 + (uint64_t)step);
		fill(gb, NPARAMS, 200 + (uint64_t)step);
		fill(sa, 10, 300 + (uint64_t)step);
		fill(sb, 10, 400 + (uint64_t)step);
		/* ascending chunk order, as backward finishes them */
		for (int k = 0; k < pl.nchunks; k++) {
			WF_CHECK_INT(
				wf_ps_client_push_pull_async(a, k, ga, step, k == state_chunk, &e),
				0);
			WF_CHECK_INT(
				wf_ps_client_push_pull_async(b, k, gb, step, k == state_chunk, &e),
				0);
		}
		for (int i = 0; i < 10; i++)
			s0[i] = 0.5f * (sa[i] + sb[i]);
		WF_CHECK_MSG(wf_ps_client_wait_all(a, &e) == 0, "%s", e.msg);
		WF_CHECK_MSG(wf_ps_client_wait_all(b, &e) == 0, "%s", e.msg);
		for (int i = 0; i < NPARAMS; i++)
			gsum[i] = ga[i] + gb[i];
		wf_optim_apply(be, &oc, step, NPARAMS, ref, gsum, mom, NULL, 1.0f / 8);
		WF_CHECK_MSG(max_diff(pa, ref, NPARAMS) < 1e-6f, "step %ld: %g", step,
			     max_diff(pa, ref, NPARAMS));
		WF_CHECK(max_diff(pa, pb, NPARAMS) == 0.0f);
		WF_CHECK(max_diff(sa, s0, 10) < 1e-6f); /* state averaged over workers */
		WF_CHECK(max_diff(sb, s0, 10) < 1e-6f);
	}
	memset(sa, 0, sizeof(sa));
	WF_CHECK_INT(wf_ps_client_pull_state(a, &e), 0);
	WF_CHECK(max_diff(sa, s0, 10) < 1e-6f);
	/* a push for a past step is answered with the current values, flagged stale */
	WF_CHECK_INT(wf_ps_client_push_pull_async(a, 0, ga, 1, 0, &e), 0);
	WF_CHECK_INT(wf_ps_client_wait_all(a, &e), 0);
	WF_CHECK_INT(wf_ps_client_stale_count(a), 1);
	/* a push for a future step is refused without touching the values */
	WF_CHECK_INT(wf_ps_client_push_pull_async(a, 0, ga, 9, 0, &e), 0);
	WF_CHECK_INT(wf_ps_client_wait_all(a, &e), WF_ETRANSIENT);
	WF_CHECK(strstr(e.msg, "step 9") != NULL);
cleanup:
	wf_backend_free(be);
	wf_ps_client_free(a);
	wf_ps_client_free(b);
	wf_ps_placement_free(&pl);
	kill_children();
}

/* ---- async and ssp ------------------------------------------------------ */

static void test_async_applies_each_push(void)
{
	wf_ps_server_cfg sc;
	base_cfg(&sc, 0, 1, 2);
	sc.mode = WF_PS_MODE_ASYNC;
	sc.backend = "ref";
	sc.optim.momentum = 0; /* plain SGD: p -= lr * g / samples */
	start_server(&sc);
	wf_ps_placement pl;
	wf_ps_place(&pl, NULL, 0, NPARAMS, 1, CHUNKB, NULL);
	static float p0[NPARAMS], pa[NPARAMS], ga[NPARAMS], want[NPARAMS];
	wf_err e = {0};
	wf_ps_client *a = make_client(&pl, pa, NULL, WF_PS_ROLE_WORKER, 0, 0);
	if (!a || setup_job(a, p0))
		goto cleanup;
	fill(ga, NPARAMS, 5);
	/* worker 1 never shows up, yet each push applies at once */
	for (int step = 0; step < 2; step++) {
		double t0 = wf_now();
		for (int k = 0; k < pl.nchunks; k++)
			wf_ps_client_push_pull_async(a, k, ga, step, 0, &e);
		WF_CHECK_MSG(wf_ps_client_wait_all(a, &e) == 0, "%s", e.msg);
		WF_CHECK(wf_now() - t0 < 2.0);
	}
	for (int i = 0; i < NPARAMS; i++)
		want[i] = p0[i] - 2 * 0.1f * ga[i] / 4;
	WF_CHECK_MSG(max_diff(pa, want, NPARAMS) < 1e-5f, "%g", max_diff(pa, want, NPARAMS));
cleanup:
	wf_ps_client_free(a);
	wf_ps_placement_free(&pl);
	kill_children();
}

static int held_now(wf_ps_client *tool)
{
	wf_ps_stats st;
	wf_err e = {0};
	if (wf_ps_client_stats(tool, 0, &st, &e))
		return -1;
	int h = st.held;
	wf_ps_stats_free(&st);
	return h;
}

static void test_ssp_bounds_staleness(void)
{
	wf_ps_server_cfg sc;
	base_cfg(&sc, 0, 1, 2);
	sc.mode = WF_PS_MODE_SSP;
	sc.staleness = 1;
	start_server(&sc);
	wf_ps_placement pl;
	wf_ps_place(&pl, NULL, 0, NPARAMS, 1, CHUNKB, NULL);
	static float p0[NPARAMS], pa[NPARAMS], pb[NPARAMS], pt[NPARAMS], g[NPARAMS];
	wf_err e = {0};
	wf_ps_client *a = make_client(&pl, pa, NULL, WF_PS_ROLE_WORKER, 0, 0);
	wf_ps_client *b = make_client(&pl, pb, NULL, WF_PS_ROLE_WORKER, 1, 0);
	wf_ps_client *tool = make_client(&pl, pt, NULL, WF_PS_ROLE_TOOL, 0, 0);
	if (!a || !b || !tool || setup_job(a, p0) || wf_ps_client_register(b, 0, NULL, NULL, &e))
		goto cleanup;
	fill(g, NPARAMS, 3);
	/* step 0 is within the bound (slowest -1 + 1) */
	wf_ps_client_push_pull_async(a, 0, g, 0, 0, &e);
	WF_CHECK_INT(wf_ps_client_wait_all(a, &e), 0);
	WF_CHECK_INT(held_now(tool), 0);
	/* step 1 is 2 ahead of worker 1 (never pushed): held */
	WF_CHECK_INT(wf_ps_client_push_pull_async(a, 0, g, 1, 0, &e), 0);
	for (double t0 = wf_now(); held_now(tool) != 1 && wf_now() - t0 < 10;)
		sleep_s(0.01);
	WF_CHECK_INT(held_now(tool), 1);
	/* worker 1 pushes step 0: the slowest is now 0, so step 1 is released */
	wf_ps_client_push_pull_async(b, 0, g, 0, 0, &e);
	WF_CHECK_INT(wf_ps_client_wait_all(b, &e), 0);
	WF_CHECK_MSG(wf_ps_client_wait_all(a, &e) == 0, "%s", e.msg);
	WF_CHECK_INT(held_now(tool), 0);
cleanup:
	wf_ps_client_free(a);
	wf_ps_client_free(b);
	wf_ps_client_free(tool);
	wf_ps_placement_free(&pl);
	kill_children();
}

/* ---- checkpoint and restore --------------------------------------------- */

static void sync_step(wf_ps_client *c, const wf_ps_placement *pl, const float *g, long step)
{
	wf_err e = {0};
	for (int k = 0; k < pl->nchunks; k++)
		WF_CHECK_INT(wf_ps_client_push_pull_async(c, k, g, step, 0, &e), 0);
	WF_CHECK_MSG(wf_ps_client_wait_all(c, &e) == 0, "%s", e.msg);
}

static void test_checkpoint_kill9_restore(void)
{
	wf_ps_server_cfg sc[2];
	char root[512], done[600];
	snprintf(root, sizeof(root), "%s/ckpt", tmpdir);
	for (int i = 0; i < 2; i++) {
		base_cfg(&sc[i], i, 2, 1);
		sc[i].ckpt_dir = root;
		start_server(&sc[i]);
	}
	wf_ps_placement pl;
	wf_ps_place(&pl, NULL, 0, NPARAMS, 2, CHUNKB, NULL);
	static float p0[NPARAMS], pw[NPARAMS], g[NPARAMS], saved[NPARAMS], after[NPARAMS];
	wf_err e = {0};
	wf_ps_client *w = make_client(&pl, pw, NULL, WF_PS_ROLE_WORKER, 0, 0);
	wf_ps_client *w2 = NULL;
	if (!w || setup_job(w, p0))
		goto cleanup;
	fill(g, NPARAMS, 11);
	sync_step(w, &pl, g, 0);
	sync_step(w, &pl, g, 1);
	memcpy(saved, pw, sizeof(saved));
	WF_CHECK_MSG(wf_ps_client_checkpoint(w, 2, &e) == 0, "%s", e.msg);
	snprintf(done, sizeof(done), "%s/step-2/DONE", root);
	FILE *f = fopen(done, "w");
	WF_CHECK(f != NULL);
	if (f)
		fclose(f);
	/* a later checkpoint without DONE must never be loaded */
	sync_step(w, &pl, g, 2);
	WF_CHECK_INT(wf_ps_client_checkpoint(w, 3, &e), 0);
	sync_step(w, &pl, g, 3);
	WF_CHECK(max_diff(pw, saved, NPARAMS) > 0);
	wf_ps_client_free(w);
	w = NULL;
	/* kill -9 server 1, start a new one that restores */
	kill(children[1], SIGKILL);
	waitpid(children[1], NULL, 0);
	children[1] = 0;
	start_server(&sc[1]);
	w2 = make_client(&pl, after, NULL, WF_PS_ROLE_WORKER, 0, 0);
	long steps[2] = {0, 0}, minstep = 0;
	WF_CHECK_MSG(wf_ps_client_register(w2, 0, steps, &minstep, &e) == 0, "%s", e.msg);
	WF_CHECK_INT(steps[1], 2); /* the restarted server reports its step */
	WF_CHECK_INT(steps[0], 4); /* the survivor went on */
	/* the chief rolls the other servers back too */
	long restored = -1;
	WF_CHECK_MSG(wf_ps_client_restore(w2, -1, &restored, &e) == 0, "%s", e.msg);
	WF_CHECK_INT(restored, 2);
	memset(after, 0, sizeof(after));
	WF_CHECK_INT(wf_ps_client_pull(w2, -1, NULL, &e), 0);
	WF_CHECK(max_diff(after, saved, NPARAMS) == 0.0f);
	/* and training continues from step 2 with the same result as before */
	sync_step(w2, &pl, g, 2);
	sync_step(w2, &pl, g, 3);
	WF_CHECK(max_diff(after, pw, NPARAMS) == 0.0f);
	/* a restore of a step that is not there fails, naming the server's own
	 * directory, and changes nothing */
	WF_CHECK(wf_ps_client_restore(w2, 99, NULL, &e) != 0);
	WF_CHECK(strstr(e.msg, root) != NULL);
cleanup:
	wf_ps_client_free(w);
	wf_ps_client_free(w2);
	wf_ps_placement_free(&pl);
	kill_children();
}

/* A worker that finished a step on one chunk but not on the others (a
 * rollback raced its pushes) pushes the next step: the chunks still at the
 * old step refuse it, and its wait ends there, not once the chunk that
 * holds its push hears from the other worker (who waits for this one: a
 * deadlock). After a register it pushes the old step where it is owed and
 * both workers go on, with equal values. */
static void test_refusal_ends_the_wait(void)
{
	wf_ps_server_cfg sc;
	base_cfg(&sc, 0, 1, 2);
	start_server(&sc);
	wf_ps_placement pl;
	wf_ps_place(&pl, NULL, 0, NPARAMS, 1, CHUNKB, NULL);
	static float p0[NPARAMS], pa[NPARAMS], pb[NPARAMS], g[NPARAMS];
	wf_ps_client *a = make_client(&pl, pa, NULL, WF_PS_ROLE_WORKER, 0, 0);
	wf_ps_client *b = make_client(&pl, pb, NULL, WF_PS_ROLE_WORKER, 1, 0);
	wf_err e = {0};
	if (!a || !b || setup_job(a, p0) || wf_ps_client_register(b, 0, NULL, NULL, &e))
		goto cleanup;
	fill(g, NPARAMS, 7);
	/* step 0: a pushes every chunk, b only chunk 0, which moves to step 1 */
	for (int k = 0; k < pl.nchunks; k++)
		WF_CHECK_INT(wf_ps_client_push_pull_async(a, k, g, 0, 0, &e), 0);
	WF_CHECK_INT(wf_ps_client_push_pull_async(b, 0, g, 0, 0, &e), 0);
	WF_CHECK_MSG(wf_ps_client_wait_all(b, &e) == 0, "%s", e.msg);
	/* step 1 from b: chunk 0 holds it for a, the others refuse it */
	for (int k = 0; k < pl.nchunks; k++)
		WF_CHECK_INT(wf_ps_client_push_pull_async(b, k, g, 1, 0, &e), 0);
	WF_CHECK_INT(wf_ps_client_wait_all(b, &e), WF_ETRANSIENT);
	WF_CHECK_MSG(strstr(e.msg, "pushed step 1 but chunk") != NULL, "%s", e.msg);
	/* b re-synchronises: register, then step 0 where it is owed (chunk 0
	 * answers it as stale: b's gradient of step 0 is in it already) */
	WF_CHECK_MSG(wf_ps_client_register(b, 0, NULL, NULL, &e) == 0, "%s", e.msg);
	for (int k = 0; k < pl.nchunks; k++)
		WF_CHECK_INT(wf_ps_client_push_pull_async(b, k, g, 0, 0, &e), 0);
	WF_CHECK_MSG(wf_ps_client_wait_all(b, &e) == 0, "%s", e.msg);
	WF_CHECK_INT(wf_ps_client_stale_count(b), 1);
	WF_CHECK_MSG(wf_ps_client_wait_all(a, &e) == 0, "%s", e.msg);
	/* step 1 from both: chunk 0 counts b's held push once */
	for (int k = 0; k < pl.nchunks; k++) {
		WF_CHECK_INT(wf_ps_client_push_pull_async(a, k, g, 1, 0, &e), 0);
		WF_CHECK_INT(wf_ps_client_push_pull_async(b, k, g, 1, 0, &e), 0);
	}
	WF_CHECK_MSG(wf_ps_client_wait_all(a, &e) == 0, "%s", e.msg);
	WF_CHECK_MSG(wf_ps_client_wait_all(b, &e) == 0, "%s", e.msg);
	WF_CHECK(max_diff(pa, pb, NPARAMS) == 0.0f);
cleanup:
	wf_ps_client_free(a);
	wf_ps_client_free(b);
	wf_ps_placement_free(&pl);
	kill_children();
}

typedef struct late_push {
	wf_ps_client *c;
	const wf_ps_placement *pl;
	const float *g;
	long step;
	double after; /* seconds */
	int rc;
	char msg[sizeof(((wf_err *)0)->msg)];
} late_push;

/* A worker's step, pushed from another thread after a while. */
static void *push_late(void *arg)
{
	late_push *l = arg;
	wf_err e = {0};
	sleep_s(l->after);
	for (int k = 0; k < l->pl->nchunks && !l->rc; k++)
		l->rc = wf_ps_client_push_pull_async(l->c, k, l->g, l->step, 0, &e);
	if (!l->rc)
		l->rc = wf_ps_client_wait_all(l->c, &e);
	snprintf(l->msg, sizeof(l->msg), "%s", e.msg);
	return NULL;
}

/* A server restarts; the chief registers and seeds it and pushes at once,
 * before its heartbeat thread heard the new process. When a heartbeat then
 * names the new incarnation, that push (still waiting for the other worker)
 * must not fail as sent to the process that died: register learned whom it
 * spoke to. */
static void test_register_learns_the_restart(void)
{
	wf_ps_server_cfg sc;
	base_cfg(&sc, 0, 1, 2);
	start_server(&sc);
	wf_ps_placement pl;
	wf_ps_place(&pl, NULL, 0, NPARAMS, 1, CHUNKB, NULL);
	static float p0[NPARAMS], pa[NPARAMS], pb[NPARAMS], g[NPARAMS];
	const double hb = 1.0;
	wf_ps_client *a = make_client(&pl, pa, NULL, WF_PS_ROLE_WORKER, 0, hb);
	wf_ps_client *b = make_client(&pl, pb, NULL, WF_PS_ROLE_WORKER, 1, 0);
	wf_err e = {0};
	if (!a || !b || setup_job(a, p0) || wf_ps_client_register(b, 0, NULL, NULL, &e))
		goto cleanup;
	kill(children[0], SIGKILL);
	waitpid(children[0], NULL, 0);
	children[0] = 0;
	nchildren = 0;
	start_server(&sc);
	long step = 0;
	WF_CHECK_MSG(wf_ps_client_register(a, 0, NULL, &step, &e) == 0, "%s", e.msg);
	WF_CHECK_INT(step, -1); /* the new process holds nothing yet */
	WF_CHECK_MSG(wf_ps_client_init(a, p0, NULL, NULL, 5, &e) == 0, "%s", e.msg);
	WF_CHECK_MSG(wf_ps_client_register(b, 0, NULL, NULL, &e) == 0, "%s", e.msg);
	fill(g, NPARAMS, 8);
	/* b pushes after a few heartbeats went by while a waits for it */
	late_push lp = {.c = b, .pl = &pl, .g = g, .step = 5, .after = 2.5 * hb};
	pthread_t t;
	WF_CHECK_INT(pthread_create(&t, NULL, push_late, &lp), 0);
	sync_step(a, &pl, g, 5);
	pthread_join(t, NULL);
	WF_CHECK_MSG(lp.rc == 0, "%s", lp.msg);
	WF_CHECK(max_diff(pa, pb, NPARAMS) == 0.0f);
cleanup:
	wf_ps_client_free(a);
	wf_ps_client_free(b);
	wf_ps_placement_free(&pl);
	kill_children();
}

/* A worker's pull of the chunk that hands out data units (30 an epoch),
 * from a thread: done once it is answered, aux the unit it got + 1. */
typedef struct puller {
	wf_ps_client *c;
	int chunk;
	_Atomic int done;
	int rc;
	uint32_t aux;
	wf_err e;
} puller;

static void *pull_thread(void *arg)
{
	puller *p = arg;
	p->rc = wf_ps_client_pull_aux(p->c, p->chunk, 30, NULL, &p->e);
	if (p->rc == 0)
		wf_ps_client_chunk_reply(p->c, p->chunk, NULL, &p->aux);
	atomic_store(&p->done, 1);
	return NULL;
}

/* With replicas, the data unit a pull hands out is named in its reply only
 * once the backup holds it: while the backup is stopped (SIGSTOP) the reply
 * does not come, so a primary killed then has handed out nothing; once the
 * backup runs again it comes, with the first unit. */
static void test_pull_unit_waits_for_the_backup(void)
{
	wf_ps_server_cfg sc[2];
	start_pair(sc, 2, 1, 30); /* the stopped backup is not given up on */
	wf_ps_placement pl;
	wf_ps_place(&pl, NULL, 0, NPARAMS, 2, CHUNKB, NULL);
	static float p0[NPARAMS], pa[NPARAMS], pb[NPARAMS];
	wf_ps_client_cfg cc = {.nservers = 2,
			       .endpoints = endpoints(2),
			       .job_id = JOB,
			       .role = WF_PS_ROLE_WORKER,
			       .pl = &pl,
			       .params = pa,
			       .nslots = 1,
			       .contributors = 1,
			       .timeout = 10,
			       .connect_timeout = 10,
			       .replicas = 2};
	wf_ps_client *a = NULL, *b = NULL;
	wf_err e = {0};
	WF_CHECK_MSG(wf_ps_client_create(&a, &cc, &e) == 0, "%s", e.msg);
	cc.index = 1;
	cc.params = pb;
	WF_CHECK_MSG(b == NULL && wf_ps_client_create(&b, &cc, &e) == 0, "%s", e.msg);
	long step = 0;
	if (!a || !b || wf_ps_client_register(a, 0, NULL, &step, &e) != 0)
		goto cleanup;
	fill(p0, NPARAMS, 1);
	WF_CHECK_MSG(wf_ps_client_init(a, p0, NULL, NULL, 0, &e) == 0, "%s", e.msg);
	WF_CHECK_MSG(wf_ps_client_register(b, 0, NULL, NULL, &e) == 0, "%s", e.msg);
	int last = pl.nchunks - 1, backup = (pl.chunks[last].server + 1) % 2;
	kill(children[backup], SIGSTOP);
	puller pb_ = {.c = b, .chunk = last};
	pthread_t t;
	WF_CHECK_INT(pthread_create(&t, NULL, pull_thread, &pb_), 0);
	/* the primary's reply waits for the backup's acknowledgement */
	sleep_s(0.5);
	WF_CHECK_MSG(!atomic_load(&pb_.done),
		     "the pull was answered while the backup was "
		     "stopped (rc %d)",
		     pb_.rc);
	kill(children[backup], SIGCONT);
	pthread_join(t, NULL);
	WF_CHECK_MSG(pb_.rc == 0, "%s", pb_.e.msg);
	WF_CHECK_INT(pb_.aux, 1); /* unit 0 */
cleanup:
	wf_ps_client_free(a);
	wf_ps_client_free(b);
	wf_ps_placement_free(&pl);
	kill_children();
}

/* Send one message (header and one frame) from a raw DEALER. */
static void raw_send(void *sock, wf_ps_hdr *h, const void *frame, size_t size)
{
	uint8_t hb[WF_PS_HEADER_BYTES];
	const void *f[1] = {frame};
	wf_ps_hdr_encode(h, hb, f, &size, 1);
	zmq_send(sock, hb, sizeof(hb), ZMQ_SNDMORE);
	zmq_send(sock, frame, size, 0);
}

/* With replicas, the chief's init of a chunk and of the state is answered
 * only once the backup holds it: while the backup is stopped (SIGSTOP)
 * neither reply comes; once it runs again both do, and after a kill -9 of
 * the primary the worker that fails over reads exactly the init's values
 * and state. */
static void test_init_waits_for_the_backup(void)
{
	wf_ps_server_cfg sc[2];
	start_pair(sc, 1, 0, 30); /* the stopped backup is not given up on */
	wf_ps_placement pl;
	wf_ps_place(&pl, NULL, 0, NPARAMS, 2, CHUNKB, NULL);
	static float p0[NPARAMS], pa[NPARAMS], st[10], st0[10];
	wf_ps_client *a = failover_client(&pl, pa, st);
	raw_peer raw = raw_open(0);
	void *sock = raw.sock;
	int k0 = -1;
	wf_err e = {0};
	if (seed_pair(a, p0, st0) != 0)
		goto cleanup;
	k0 = first_chunk_of(&pl, 0);
	/* the chief inits group 0's chunk k0 and the state again, new values */
	fill(p0 + pl.chunks[k0].offset, pl.chunks[k0].count, 3);
	fill(st0, 10, 4);
	kill(children[1], SIGSTOP);
	wf_ps_hdr h = {.op = WF_PS_OP_INIT,
		       .sender = WF_PS_SENDER(WF_PS_ROLE_WORKER, 0),
		       .job_id = JOB,
		       .chunk = (uint32_t)k0,
		       .dtype = WF_PS_DTYPE_F32,
		       .tag = 1};
	raw_send(sock, &h, p0 + pl.chunks[k0].offset, pl.chunks[k0].count * sizeof(float));
	h.chunk = WF_PS_STATE_CHUNK;
	h.tag = 2;
	raw_send(sock, &h, st0, sizeof(st0));
	zmq_pollitem_t it = {.socket = sock, .events = ZMQ_POLLIN};
	WF_CHECK_MSG(zmq_poll(&it, 1, 500) == 0,
		     "an init was answered while the backup was stopped");
	kill(children[1], SIGCONT);
	for (int n = 0; n < 2; n++) {
		WF_CHECK_MSG(zmq_poll(&it, 1, 5000) == 1, "init %d of 2 was not answered", n + 1);
		uint8_t hb[WF_PS_HEADER_BYTES];
		wf_ps_hdr r;
		WF_CHECK_INT(zmq_recv(sock, hb, sizeof(hb), 0), WF_PS_HEADER_BYTES);
		wf_ps_hdr_decode(&r, hb);
		WF_CHECK_INT(r.flags & WF_PS_FLAG_ERROR, 0);
	}
	kill(children[0], SIGKILL);
	memset(pa, 0, sizeof(pa));
	memset(st, 0, sizeof(st));
	WF_CHECK_MSG(wf_ps_client_pull(a, -1, NULL, &e) == 0, "%s", e.msg);
	WF_CHECK_MSG(wf_ps_client_pull_state(a, &e) == 0, "%s", e.msg);
	WF_CHECK(max_diff(pa, p0, NPARAMS) == 0.0f);
	WF_CHECK(max_diff(st, st0, 10) == 0.0f);
cleanup:
	raw_close(&raw);
	wf_ps_client_free(a);
	wf_ps_placement_free(&pl);
	kill_children();
}

/* With replicas, a restarted server's first join tells its primary that
 * the process before is gone from every group: a push to group 0 that
 * waits for the old ps 1's acknowledgement (stopped, then "restarted" by a
 * join of group 1 from a new incarnation) is answered at once, not when
 * ps 1 joins group 0 too or falls silent for ps.server_timeout. */
static void test_join_of_a_restart_drops_the_old_backup(void)
{
	wf_ps_server_cfg sc[2];
	start_pair(sc, 1, 0, 30); /* silence alone drops nobody here */
	wf_ps_placement pl;
	wf_ps_place(&pl, NULL, 0, NPARAMS, 2, CHUNKB, NULL);
	static float p0[NPARAMS], pa[NPARAMS], g[NPARAMS], st[10];
	wf_ps_client *a = failover_client(&pl, pa, st);
	raw_peer raw = raw_open(0);
	void *sock = raw.sock;
	int k0 = -1;
	wf_err e = {0};
	if (seed_pair(a, p0, st) != 0)
		goto cleanup;
	k0 = first_chunk_of(&pl, 0);
	/* ps 0 knows ps 1's incarnation from ps 1's join of group 0 */
	fill(g, NPARAMS, 5);
	long step = 0;
	sync_step(a, &pl, g, step++);
	kill(children[1], SIGSTOP);
	WF_CHECK_INT(wf_ps_client_push_pull_async(a, k0, g, step, 0, &e), 0);
	/* "ps 1", a new process, asks ps 0 to take over group 1 and joins it */
	wf_ps_hdr h = {.op = WF_PS_OP_JOIN,
		       .flags = WF_PS_FLAG_FAILOVER,
		       .sender = WF_PS_SENDER(WF_PS_ROLE_SERVER, 1),
		       .job_id = JOB,
		       .chunk = 1,
		       .step = 0x5eed,
		       .aux = 7};
	uint8_t hb[WF_PS_HEADER_BYTES];
	wf_ps_hdr_encode(&h, hb, NULL, NULL, 0);
	zmq_send(sock, hb, sizeof(hb), 0);
	double t0 = wf_now();
	WF_CHECK_MSG(wf_ps_client_wait_all(a, &e) == 0, "%s", e.msg);
	WF_CHECK_MSG(wf_now() - t0 < 5, "the push waited %.1f s for the old ps 1", wf_now() - t0);
cleanup:
	if (nchildren > 1)
		kill(children[1], SIGCONT);
	raw_close(&raw);
	wf_ps_client_free(a);
	wf_ps_placement_free(&pl);
	kill_children();
}

/* A primary killed with kill -9 closes its connections: the worker's
 * requests to it go to the group's backup at once and the backup, whose
 * replication connection to it closed too, answers its own group without
 * waiting for the dead copy's acks, though neither the worker's heartbeats
 * nor the servers' silence timeout (30 s here) would notice before the
 * worker's 10 s timeout. The worker registers again before the kill (as it
 * does while the servers settle, or to re-synchronise): that must not make
 * it forget which connections are up. */
static void test_closed_connection_fails_over(void)
{
	wf_ps_server_cfg sc[2];
	start_pair(sc, 1, 0, 30);
	wf_ps_placement pl;
	wf_ps_place(&pl, NULL, 0, NPARAMS, 2, CHUNKB, NULL);
	static float p0[NPARAMS], pa[NPARAMS], acked[NPARAMS], g[NPARAMS], st[10];
	wf_ps_client *a = silence_client(&pl, pa, st, 30);
	if (seed_pair(a, p0, st) != 0)
		goto cleanup;
	fill(g, NPARAMS, 5);
	sync_step(a, &pl, g, 0);
	memcpy(acked, pa, sizeof(acked));
	wf_err e = {0};
	WF_CHECK_MSG(wf_ps_client_register(a, 0, NULL, NULL, &e) == 0, "%s", e.msg);
	kill(children[0], SIGKILL);
	double t0 = wf_now();
	sync_step(a, &pl, g, 1);
	WF_CHECK_MSG(wf_now() - t0 < 3, "the step after the kill took %.1f s", wf_now() - t0);
	/* the group's requests, the chief's statistics among them, go to ps 1 */
	WF_CHECK_INT(wf_ps_client_server_of(a, first_chunk_of(&pl, 0)), 1);
	WF_CHECK(max_diff(pa, acked, NPARAMS) > 0.0f);
	memcpy(acked, pa, sizeof(acked));
	reads_exactly(a, pa, acked, "the step after the kill");
cleanup:
	wf_ps_client_free(a);
	wf_ps_placement_free(&pl);
	kill_children();
}

/* With replicas, a backup that fell silent (SIGSTOP past ps.server_timeout)
 * is dropped by its primary, which goes on alone. Once it answers again it
 * must join again and take the group's state: an update the primary
 * acknowledges after that survives the primary's kill -9, the client
 * failing over to the backup and reading exactly the acknowledged values. */
static void test_dropped_backup_joins_again(void)
{
	wf_ps_server_cfg sc[2];
	start_pair(sc, 1, 0, 0.5);
	wf_ps_placement pl;
	wf_ps_place(&pl, NULL, 0, NPARAMS, 2, CHUNKB, NULL);
	static float p0[NPARAMS], pa[NPARAMS], acked[NPARAMS], g[NPARAMS], st[10];
	wf_ps_client *a = failover_client(&pl, pa, st);
	char log0[300], log1[300];
	snprintf(log0, sizeof(log0), "%s/ps-0.log", tmpdir);
	snprintf(log1, sizeof(log1), "%s/ps-1.log", tmpdir);
	if (seed_pair(a, p0, st) != 0)
		goto cleanup;
	int dropped = file_count(log0, "backup ps 1 of group 0", "stopped answering");
	int joins = file_count(log1, "joined group 0 as a backup", NULL);
	kill(children[1], SIGSTOP);
	WF_CHECK_MSG(wait_lines(log0, "backup ps 1 of group 0", "stopped answering", dropped),
		     "ps 0 did not drop its silent backup");
	kill(children[1], SIGCONT);
	WF_CHECK_MSG(wait_lines(log1, "joined group 0 as a backup", NULL, joins),
		     "the dropped backup did not join group 0 again");
	fill(g, NPARAMS, 5);
	sync_step(a, &pl, g, 0);
	memcpy(acked, pa, sizeof(acked));
	WF_CHECK(max_diff(acked, p0, NPARAMS) > 0.0f);
	acked_survives_kill(a, pa, acked, 0, "after the failover, the acknowledged update");
cleanup:
	wf_ps_client_free(a);
	wf_ps_placement_free(&pl);
	kill_children();
}

/* With replicas, a group that failed over goes back to its own server once
 * that one has rejoined as its backup (placement spread the groups; after a
 * failover one server serves two): the restarted ps 0 is the primary of
 * group 0 again, the worker follows the redirect, and an update
 * acknowledged after the handoff survives a kill -9 of ps 1. */
static void test_failed_over_group_goes_back(void)
{
	wf_ps_server_cfg sc[2];
	start_pair(sc, 1, 0, 1.0);
	wf_ps_placement pl;
	wf_ps_place(&pl, NULL, 0, NPARAMS, 2, CHUNKB, NULL);
	static float p0[NPARAMS], pa[NPARAMS], acked[NPARAMS], g[NPARAMS], st[10];
	wf_ps_client *a = failover_client(&pl, pa, st);
	char log0[300];
	snprintf(log0, sizeof(log0), "%s/ps-0.log", tmpdir);
	if (seed_pair(a, p0, st) != 0)
		goto cleanup;
	kill(children[0], SIGKILL);
	waitpid(children[0], NULL, 0);
	children[0] = 0;
	fill(g, NPARAMS, 5); /* group 0 fails over to ps 1 */
	sync_step(a, &pl, g, 0);
	int back = file_count(log0, "primary of group 0", "ps 1 handed it back");
	start_server(&sc[0]);
	WF_CHECK_MSG(wait_lines(log0, "primary of group 0", "ps 1 handed it back", back),
		     "ps 1 did not hand group 0 back to the restarted ps 0");
	fill(g, NPARAMS, 6);
	sync_step(a, &pl, g, 1);
	memcpy(acked, pa, sizeof(acked));
	acked_survives_kill(a, pa, acked, 1, "an update acknowledged after the handoff");
cleanup:
	wf_ps_client_free(a);
	wf_ps_placement_free(&pl);
	kill_children();
}

/* Two primaries of one group: worker 1 fails over to ps 1 (its request
 * says so) while ps 0, the primary, still runs, and worker 0 pushes to
 * ps 0. A sync step split between them never completes; ps 0 learns from
 * ps 1's heartbeat replies that ps 1 is the primary too and yields: worker
 * 0 is sent to ps 1, where the step completes with both pushes. */
static void test_two_primaries_resolve(void)
{
	wf_ps_server_cfg sc[2];
	start_pair(sc, 2, 0, 5);
	wf_ps_placement pl;
	wf_ps_place(&pl, NULL, 0, NPARAMS, 2, CHUNKB, NULL);
	static float p0[NPARAMS], pa[NPARAMS], pb[NPARAMS], g[NPARAMS], st[10];
	wf_ps_client *a = failover_client(&pl, pa, st);
	wf_ps_client *b = make_client(&pl, pb, NULL, WF_PS_ROLE_WORKER, 1, 0);
	raw_peer raw = raw_open(1);
	void *sock = raw.sock;
	int k0 = -1;
	wf_err e = {0};
	char log0[300], log1[300];
	snprintf(log0, sizeof(log0), "%s/ps-0.log", tmpdir);
	snprintf(log1, sizeof(log1), "%s/ps-1.log", tmpdir);
	if (!b || seed_pair(a, p0, st) != 0)
		goto cleanup;
	WF_CHECK_MSG(wf_ps_client_register(b, 0, NULL, NULL, &e) == 0, "%s", e.msg);
	k0 = first_chunk_of(&pl, 0);
	fill(g, NPARAMS, 5);
	int took = file_count(log1, "primary of group 0", "worker 1 failed over");
	WF_CHECK_INT(wf_ps_client_push_pull_async(a, k0, g, 0, 0, &e), 0);
	/* worker 1's push of the same step, to ps 1, flagged: ps 0 failed */
	wf_ps_hdr h = {.op = WF_PS_OP_PUSH_PULL,
		       .flags = WF_PS_FLAG_FAILOVER,
		       .sender = WF_PS_SENDER(WF_PS_ROLE_WORKER, 1),
		       .job_id = JOB,
		       .chunk = (uint32_t)k0,
		       .dtype = WF_PS_DTYPE_F32,
		       .aux = 1,
		       .tag = 1};
	raw_send(sock, &h, g + pl.chunks[k0].offset, pl.chunks[k0].count * sizeof(float));
	WF_CHECK_MSG(wait_lines(log1, "primary of group 0", "worker 1 failed over", took),
		     "ps 1 did not take group 0 on worker 1's failover");
	WF_CHECK_MSG(wf_ps_client_wait_all(a, &e) == 0,
		     "the step split between two primaries did not complete: %s", e.msg);
	zmq_pollitem_t it = {.socket = sock, .events = ZMQ_POLLIN};
	WF_CHECK_MSG(zmq_poll(&it, 1, 5000) == 1, "worker 1's push was not answered");
	WF_CHECK_MSG(wait_lines(log0, "ps 1 is the primary of group 0 too", NULL, 0),
		     "ps 0 did not yield group 0 to ps 1");
cleanup:
	raw_close(&raw);
	wf_ps_client_free(a);
	wf_ps_client_free(b);
	wf_ps_placement_free(&pl);
	kill_children();
}

/* ---- membership --------------------------------------------------------- */

static void test_dead_worker_leaves_count(void)
{
	wf_ps_server_cfg sc;
	base_cfg(&sc, 0, 1, 2);
	sc.heartbeat_timeout = 0.6;
	sc.backend = "ref";
	sc.optim.momentum = 0;
	start_server(&sc);
	wf_ps_placement pl;
	wf_ps_place(&pl, NULL, 0, NPARAMS, 1, CHUNKB, NULL);
	static float p0[NPARAMS], pa[NPARAMS], pb[NPARAMS], g[NPARAMS], want[NPARAMS];
	wf_err e = {0};
	wf_ps_client *a = make_client(&pl, pa, NULL, WF_PS_ROLE_WORKER, 0, 0.1);
	wf_ps_client *b = make_client(&pl, pb, NULL, WF_PS_ROLE_WORKER, 1, 0); /* no heartbeats */
	if (!a || !b || setup_job(a, p0) || wf_ps_client_register(b, 0, NULL, NULL, &e))
		goto cleanup;
	fill(g, NPARAMS, 21);
	double t0 = wf_now();
	sync_step(a, &pl, g, 0); /* completes once worker 1 is declared dead */
	double dt = wf_now() - t0;
	WF_CHECK_MSG(dt > 0.4 && dt < 5, "%.2f s", dt);
	for (int i = 0; i < NPARAMS; i++)
		want[i] = p0[i] - 0.1f * g[i] / 4; /* scaled by the one contributor's samples */
	WF_CHECK_MSG(max_diff(pa, want, NPARAMS) < 1e-6f, "%g", max_diff(pa, want, NPARAMS));
	char log[512];
	snprintf(log, sizeof(log), "%s/ps-0.log", tmpdir);
	WF_CHECK(file_contains(log, "worker 1 silent", "declared dead"));
	/* the dead worker is refused until it registers again, then counts again */
	wf_ps_client_push_pull_async(b, 0, g, 1, 0, &e);
	WF_CHECK_INT(wf_ps_client_wait_all(b, &e), WF_ETRANSIENT);
	WF_CHECK(strstr(e.msg, "register again") != NULL);
	WF_CHECK_INT(wf_ps_client_register(b, 0, NULL, NULL, &e), 0);
	for (int k = 0; k < pl.nchunks; k++) {
		wf_ps_client_push_pull_async(a, k, g, 1, 0, &e);
		wf_ps_client_push_pull_async(b, k, g, 1, 0, &e);
	}
	WF_CHECK_INT(wf_ps_client_wait_all(a, &e), 0);
	WF_CHECK_INT(wf_ps_client_wait_all(b, &e), 0);
	for (int i = 0; i < NPARAMS; i++)
		want[i] -= 0.1f * (2 * g[i]) / 8;
	WF_CHECK(max_diff(pa, want, NPARAMS) < 1e-6f);
	WF_CHECK(max_diff(pb, want, NPARAMS) < 1e-6f);
cleanup:
	wf_ps_client_free(a);
	wf_ps_client_free(b);
	wf_ps_placement_free(&pl);
	kill_children();
}

/* Elastic membership (min_workers 2 of 3, lr linear): a worker never seen
 * is not awaited; one that leaves is not either; with fewer than 2 alive a
 * step waits, then fails for good after elastic_timeout; a worker joining
 * while a step is open counts in it, wherever its index falls in the order
 * of the sum; each update is lr x (the step's gradients) / 3. */
/* Elastic tests: one ref server for 3 workers, at least 2 alive, lr scaled
 * linearly, plain SGD (lr 0.1): a step of n pushes moves p by 0.1 n g / 3. */
static void start_elastic_server(double elastic_timeout)
{
	wf_ps_server_cfg sc;
	base_cfg(&sc, 0, 1, 3);
	sc.backend = "ref";
	sc.optim.momentum = 0;
	sc.min_workers = 2;
	sc.elastic_lr_linear = 1;
	if (elastic_timeout > 0)
		sc.elastic_timeout = elastic_timeout;
	start_server(&sc);
}

static void push_step(wf_ps_client *c, const wf_ps_placement *pl, const float *g, long step,
		      wf_err *e)
{
	for (int k = 0; k < pl->nchunks; k++)
		wf_ps_client_push_pull_async(c, k, g, step, 0, e);
}

#define WAIT_OK(c) WF_CHECK_MSG(wf_ps_client_wait_all((c), &e) == 0, "%s", e.msg)

static void elastic_sgd(float *want, const float *g, int pushes)
{
	for (int i = 0; i < NPARAMS; i++)
		want[i] -= 0.1f * ((float)pushes * g[i]) / 3;
}

/* The end of an elastic test: its clients and servers gone. */
static void elastic_end(wf_ps_client *a, wf_ps_client *b, wf_ps_client *c, wf_ps_placement *pl)
{
	push_contributors = 4;
	wf_ps_client_free(a);
	wf_ps_client_free(b);
	wf_ps_client_free(c);
	wf_ps_placement_free(pl);
	kill_children();
}

/* The start of an elastic test: one server (elastic_timeout et, 0: its
 * default), workers 0 and 1 (a, b) registered, the job seeded with p0. 0 on
 * success; the caller ends with elastic_end either way. */
static int elastic_begin(double et, wf_ps_placement *pl, wf_ps_client **a, wf_ps_client **b,
			 float *p0, float *pa, float *pb)
{
	wf_err e = {0};
	start_elastic_server(et);
	wf_ps_place(pl, NULL, 0, NPARAMS, 1, CHUNKB, NULL);
	push_contributors = 1; /* one worker's mean gradient per push, as weft's workers */
	*a = make_client(pl, pa, NULL, WF_PS_ROLE_WORKER, 0, 0.1);
	*b = make_client(pl, pb, NULL, WF_PS_ROLE_WORKER, 1, 0.1);
	return !*a || !*b || setup_job(*a, p0) || wf_ps_client_register(*b, 0, NULL, NULL, &e);
}

static void test_elastic_membership(void)
{
	static float p0[NPARAMS], pa[NPARAMS], pb[NPARAMS], pc[NPARAMS], g[NPARAMS], want[NPARAMS];
	wf_err e = {0};
	wf_ps_placement pl;
	wf_ps_client *a, *b,
		*c = NULL; /* its heartbeats would make it a member: made when it joins */
	char log[512];
	snprintf(log, sizeof(log), "%s/ps-0.log", tmpdir);
	if (elastic_begin(0.8, &pl, &a, &b, p0, pa, pb))
		goto cleanup;
	fill(g, NPARAMS, 31);
	/* step 0: workers 0 and 1; worker 2 was never seen */
	push_step(a, &pl, g, 0, &e);
	push_step(b, &pl, g, 0, &e);
	WAIT_OK(a);
	WAIT_OK(b);
	memcpy(want, p0, sizeof(want));
	elastic_sgd(want, g, 2);
	WF_CHECK_MSG(max_diff(pa, want, NPARAMS) < 1e-6f, "%g", max_diff(pa, want, NPARAMS));
	/* worker 1 leaves: worker 0 alone is below min_workers, so step 1 waits,
	 * then fails for good (its pushes are dropped) */
	WF_CHECK_MSG(wf_ps_client_leave(b, &e) == 0, "%s", e.msg);
	WF_CHECK(file_contains(log, "left: worker 1", "1 of 3 alive"));
	double t0 = wf_now();
	push_step(a, &pl, g, 1, &e);
	WF_CHECK_INT(wf_ps_client_wait_all(a, &e), WF_EINVAL);
	double dt = wf_now() - t0;
	WF_CHECK_MSG(strstr(e.msg, "strategy.min_workers 2") != NULL, "%s", e.msg);
	WF_CHECK_MSG(dt > 0.5 && dt < 8, "%.2f s", dt);
	/* the failure dropped the step's pushes; worker 2 joins, and step 1
	 * completes with workers 0 and 2 */
	c = make_client(&pl, pc, NULL, WF_PS_ROLE_WORKER, 2, 0.1);
	if (!c)
		goto cleanup;
	WF_CHECK_INT(wf_ps_client_register(c, 0, NULL, NULL, &e), 0);
	WF_CHECK(file_contains(log, "joined: worker 2", "2 of 3 alive"));
	WF_CHECK_INT(wf_ps_client_pull(c, -1, NULL, &e), 0);
	push_step(a, &pl, g, 1, &e);
	push_step(c, &pl, g, 1, &e);
	WAIT_OK(a);
	WAIT_OK(c);
	elastic_sgd(want, g, 2);
	WF_CHECK_MSG(max_diff(pc, want, NPARAMS) < 1e-6f, "%g", max_diff(pc, want, NPARAMS));
	/* step 2: worker 1 comes back between steps: awaited at once, and the
	 * step counts workers 0, 1 and 2 */
	WF_CHECK_INT(wf_ps_client_register(b, 0, NULL, NULL, &e), 0);
	push_step(a, &pl, g, 2, &e);
	push_step(b, &pl, g, 2, &e);
	push_step(c, &pl, g, 2, &e);
	WAIT_OK(c);
	WAIT_OK(b);
	WAIT_OK(a);
	elastic_sgd(want, g, 3);
	WF_CHECK_MSG(max_diff(pb, want, NPARAMS) < 1e-6f, "%g", max_diff(pb, want, NPARAMS));
	WF_CHECK(max_diff(pa, pb, NPARAMS) == 0.0f && max_diff(pc, pb, NPARAMS) == 0.0f);
cleanup:
	elastic_end(a, b, c, &pl);
}

/* Wait (up to 10 s) until server 0 has received n pushes in all, as its
 * stats say to a tool; 1 when it has. */
static int wait_pushes(const wf_ps_placement *pl, uint64_t n)
{
	static float pt[NPARAMS];
	wf_ps_client *tool = make_client(pl, pt, NULL, WF_PS_ROLE_TOOL, 0, 0);
	wf_err e = {0};
	int ok = 0;
	for (double t0 = wf_now(); tool && !ok && wf_now() - t0 < 10;) {
		wf_ps_stats st;
		if (wf_ps_client_stats(tool, 0, &st, &e) != 0)
			break;
		ok = st.pushes >= n;
		wf_ps_stats_free(&st);
	}
	wf_ps_client_free(tool);
	WF_CHECK_MSG(ok, "server 0 did not receive %llu pushes: %s", (unsigned long long)n, e.msg);
	return ok;
}

/* Elastic: joiner c (its values in pc) pulls and pushes `step` first, after
 * `before` pushes of every chunk reached server 0, then workers a and b:
 * the step counts all three. */
static void joiner_counts(wf_ps_client *a, wf_ps_client *b, wf_ps_client *c,
			  const wf_ps_placement *pl, const float *g, long step, int before,
			  float *want, const float *pc)
{
	wf_err e = {0};
	WF_CHECK_INT(wf_ps_client_pull(c, -1, NULL, &e), 0);
	push_step(c, pl, g, step, &e);
	if (!wait_pushes(pl, (uint64_t)((before + 1) * pl->nchunks))) /* the joiner's first */
		return;
	push_step(a, pl, g, step, &e);
	push_step(b, pl, g, step, &e);
	WAIT_OK(a);
	WAIT_OK(b);
	WAIT_OK(c);
	elastic_sgd(want, g, 3);
	WF_CHECK_MSG(max_diff(pc, want, NPARAMS) < 1e-6f, "%g", max_diff(pc, want, NPARAMS));
}

/* Elastic: a leave is final also at a server that never saw the worker (it
 * restarted since): the leaver's heartbeats, which go on until its process
 * ends, must not make it a member again, else every step there would wait
 * for it until ps.heartbeat_timeout (30 s here) declared it dead. */
static void test_elastic_leave_unseen_is_final(void)
{
	static float p0[NPARAMS], pa[NPARAMS], pb[NPARAMS], g[NPARAMS], want[NPARAMS];
	wf_err e = {0};
	wf_ps_placement pl;
	wf_ps_client *a, *b;
	raw_peer raw = {0};
	if (elastic_begin(0, &pl, &a, &b, p0, pa, pb))
		goto cleanup;
	raw = raw_open(0);
	wf_ps_hdr h = {.op = WF_PS_OP_LEAVE,
		       .sender = WF_PS_SENDER(WF_PS_ROLE_WORKER, 2),
		       .job_id = JOB,
		       .tag = 1};
	uint8_t hb[WF_PS_HEADER_BYTES];
	wf_ps_hdr_encode(&h, hb, NULL, NULL, 0);
	const void *f[1] = {hb};
	size_t sz[1] = {sizeof(hb)};
	WF_CHECK_INT(raw_exchange(raw.sock, f, sz, 1) & WF_PS_FLAG_ERROR, 0);
	h.op = WF_PS_OP_HEARTBEAT;
	h.tag = 2;
	wf_ps_hdr_encode(&h, hb, NULL, NULL, 0);
	raw_exchange(raw.sock, f, sz, 1);
	fill(g, NPARAMS, 13);
	double t0 = wf_now();
	push_step(a, &pl, g, 0, &e);
	push_step(b, &pl, g, 0, &e);
	WAIT_OK(a);
	WAIT_OK(b);
	WF_CHECK_MSG(wf_now() - t0 < 10, "the step waited %.1f s for the worker that left",
		     wf_now() - t0);
	memcpy(want, p0, sizeof(want));
	elastic_sgd(want, g, 2);
	WF_CHECK_MSG(max_diff(pa, want, NPARAMS) < 1e-6f, "%g", max_diff(pa, want, NPARAMS));
cleanup:
	if (raw.ctx)
		raw_close(&raw);
	elastic_end(a, b, NULL, &pl);
}

/* Elastic: the final barrier waits for the workers alive, not for
 * strategy.min_workers of them: the training is done, and the workers that
 * finished and exited (no leave) or died at the end will not come back. A
 * chief restarted after the final checkpoint waited elastic_timeout so. */
static void test_elastic_final_barrier_without_quorum(void)
{
	static float p0[NPARAMS], pa[NPARAMS], pb[NPARAMS];
	wf_err e = {0};
	wf_ps_placement pl;
	wf_ps_client *a, *b;
	if (elastic_begin(0, &pl, &a, &b, p0, pa, pb))
		goto cleanup;
	WF_CHECK_MSG(wf_ps_client_leave(b, &e) == 0, "%s", e.msg);
	double t0 = wf_now();
	WF_CHECK_MSG(wf_ps_client_barrier(a, 0, &e) == 0, "%s", e.msg);
	WF_CHECK_MSG(wf_now() - t0 < 5, "the barrier took %.1f s", wf_now() - t0);
cleanup:
	elastic_end(a, b, NULL, &pl);
}

/* Elastic: a worker that registers while a step is under way at a server is
 * not awaited in that step there (it waits for the servers to agree on a
 * step before it pushes; a server waiting for it would never get there),
 * and is awaited once it pushed. */
static void test_elastic_join_mid_step(void)
{
	static float p0[NPARAMS], pa[NPARAMS], pb[NPARAMS], pc[NPARAMS], g[NPARAMS], want[NPARAMS];
	wf_err e = {0};
	wf_ps_placement pl;
	wf_ps_client *a, *b, *c = NULL;
	if (elastic_begin(0, &pl, &a, &b, p0, pa, pb))
		goto cleanup;
	fill(g, NPARAMS, 17);
	/* step 0: worker 0 has pushed when worker 2 registers; worker 1's push
	 * completes the step without it */
	push_step(a, &pl, g, 0, &e);
	if (!wait_pushes(&pl, (uint64_t)pl.nchunks)) /* the step is under way */
		goto cleanup;
	c = make_client(&pl, pc, NULL, WF_PS_ROLE_WORKER, 2, 0.1);
	if (!c)
		goto cleanup;
	WF_CHECK_INT(wf_ps_client_register(c, 0, NULL, NULL, &e), 0);
	double t0 = wf_now();
	push_step(b, &pl, g, 0, &e);
	WAIT_OK(a);
	WAIT_OK(b);
	WF_CHECK_MSG(wf_now() - t0 < 5, "the step waited %.1f s for the joiner", wf_now() - t0);
	memcpy(want, p0, sizeof(want));
	elastic_sgd(want, g, 2);
	WF_CHECK_MSG(max_diff(pa, want, NPARAMS) < 1e-6f, "%g", max_diff(pa, want, NPARAMS));
	/* step 1: the joiner pulls and pushes first; from then on it counts */
	joiner_counts(a, b, c, &pl, g, 1, 2, want, pc);
	WF_CHECK(max_diff(pa, pc, NPARAMS) == 0.0f && max_diff(pb, pc, NPARAMS) == 0.0f);
cleanup:
	elastic_end(a, b, c, &pl);
}

/* Elastic: a worker that registers between steps but says it is still
 * waiting for the servers to agree on a step (WF_PS_FLAG_JOINING: it saw
 * them at different steps) is not awaited in the next step; with two
 * servers, one holding a step for it while the other went on would keep
 * them apart for as long as it kept asking. It counts once it pushed. */
static void test_elastic_joiner_waiting_is_not_awaited(void)
{
	static float p0[NPARAMS], pa[NPARAMS], pb[NPARAMS], pc[NPARAMS], g[NPARAMS], want[NPARAMS];
	wf_err e = {0};
	wf_ps_placement pl;
	wf_ps_client *a, *b, *c = NULL;
	if (elastic_begin(0, &pl, &a, &b, p0, pa, pb))
		goto cleanup;
	fill(g, NPARAMS, 23);
	push_step(a, &pl, g, 0, &e);
	push_step(b, &pl, g, 0, &e);
	WAIT_OK(a);
	WAIT_OK(b);
	/* between steps: worker 2 registers as a joiner still waiting */
	c = make_client(&pl, pc, NULL, WF_PS_ROLE_WORKER, 2, 0.1);
	if (!c)
		goto cleanup;
	long step = -1;
	WF_CHECK_INT(wf_ps_client_register(c, 1, NULL, &step, &e), 0);
	WF_CHECK_INT(step, 1);
	double t0 = wf_now();
	push_step(a, &pl, g, 1, &e);
	push_step(b, &pl, g, 1, &e);
	WAIT_OK(a);
	WAIT_OK(b);
	WF_CHECK_MSG(wf_now() - t0 < 5, "the step waited %.1f s for the joiner", wf_now() - t0);
	memcpy(want, p0, sizeof(want));
	elastic_sgd(want, g, 2);
	elastic_sgd(want, g, 2);
	WF_CHECK_MSG(max_diff(pa, want, NPARAMS) < 1e-6f, "%g", max_diff(pa, want, NPARAMS));
	/* the servers agree: it pulls and pushes step 2 first, and counts */
	WF_CHECK_INT(wf_ps_client_register(c, 1, NULL, &step, &e), 0);
	WF_CHECK_INT(step, 2);
	joiner_counts(a, b, c, &pl, g, 2, 4, want, pc);
	WF_CHECK(max_diff(pa, pc, NPARAMS) == 0.0f && max_diff(pb, pc, NPARAMS) == 0.0f);
cleanup:
	elastic_end(a, b, c, &pl);
}

/* The units list of chunk k's last reply to c as a string ("3,4"; "" none). */
static const char *unit_list(wf_ps_client *c, int k)
{
	static char buf[256];
	const long *u;
	int n = wf_ps_client_chunk_units(c, k, &u);
	buf[0] = '\0';
	for (int i = 0, at = 0; i < n && at < (int)sizeof(buf) - 24; i++)
		at += snprintf(buf + at, sizeof(buf) - (size_t)at, "%s%ld", i ? "," : "", u[i]);
	return buf;
}

/* Elastic, elastic_batch global (3 slots, lr linear, which global
 * overrides): the first pulls wait until both members asked, then share
 * the step's 3 units (2 and 1, the lower index the extra); each step's
 * replies hand out the next 3; a joiner's pull hands it one, so the step
 * it joins trains 4, and the update is the step's gradients / its 4 units,
 * not / 3; then 3 workers take one each. */
static void test_elastic_global_batch_lists(void)
{
	wf_ps_server_cfg sc;
	base_cfg(&sc, 0, 1, 3);
	sc.backend = "ref";
	sc.optim.momentum = 0;
	sc.min_workers = 2;
	sc.elastic_lr_linear = 1;
	sc.elastic_batch_global = 1;
	start_server(&sc);
	wf_ps_placement pl;
	wf_ps_place(&pl, NULL, 0, NPARAMS, 1, CHUNKB, NULL);
	int ref = pl.nchunks - 1;
	static float p0[NPARAMS], pa[NPARAMS], pb[NPARAMS], pc[NPARAMS], g[NPARAMS], want[NPARAMS];
	wf_err e = {0};
	push_contributors = 1;
	wf_ps_client *a = make_client(&pl, pa, NULL, WF_PS_ROLE_WORKER, 0, 0.1);
	wf_ps_client *b = make_client(&pl, pb, NULL, WF_PS_ROLE_WORKER, 1, 0.1);
	wf_ps_client *c = NULL;
	if (!a || !b || setup_job(a, p0) || wf_ps_client_register(b, 0, NULL, NULL, &e))
		goto cleanup;
	fill(g, NPARAMS, 23);
	/* worker 1's pull waits for worker 0's */
	puller pb_ = {.c = b, .chunk = ref};
	pthread_t t;
	WF_CHECK_INT(pthread_create(&t, NULL, pull_thread, &pb_), 0);
	sleep_s(0.3);
	WF_CHECK_MSG(!atomic_load(&pb_.done), "worker 1's first pull was answered alone");
	WF_CHECK_MSG(wf_ps_client_pull_aux(a, ref, 30, NULL, &e) == 0, "%s", e.msg);
	pthread_join(t, NULL);
	WF_CHECK_MSG(pb_.rc == 0, "%s", pb_.e.msg);
	WF_CHECK_MSG(!strcmp(unit_list(a, ref), "0,1"), "worker 0: %s", unit_list(a, ref));
	WF_CHECK_MSG(!strcmp(unit_list(b, ref), "2"), "worker 1: %s", unit_list(b, ref));
	/* step 0: 2 + 1 units; then 3 more */
	wf_ps_client_set_contributors(a, 2);
	push_step(a, &pl, g, 0, &e);
	push_step(b, &pl, g, 0, &e);
	WAIT_OK(a);
	WAIT_OK(b);
	memcpy(want, p0, sizeof(want));
	for (int i = 0; i < NPARAMS; i++)
		want[i] -= 0.1f * (2 * g[i]) / 3;
	WF_CHECK_MSG(max_diff(pa, want, NPARAMS) < 1e-6f, "%g", max_diff(pa, want, NPARAMS));
	WF_CHECK_MSG(!strcmp(unit_list(a, ref), "3,4"), "worker 0: %s", unit_list(a, ref));
	WF_CHECK_MSG(!strcmp(unit_list(b, ref), "5"), "worker 1: %s", unit_list(b, ref));
	/* worker 2 joins between steps: its pull hands it one unit at once */
	c = make_client(&pl, pc, NULL, WF_PS_ROLE_WORKER, 2, 0.1);
	if (!c)
		goto cleanup;
	WF_CHECK_INT(wf_ps_client_register(c, 0, NULL, NULL, &e), 0);
	WF_CHECK_MSG(wf_ps_client_pull_aux(c, -1, 30, NULL, &e) == 0, "%s", e.msg);
	WF_CHECK_MSG(!strcmp(unit_list(c, ref), "6"), "worker 2: %s", unit_list(c, ref));
	/* step 1: 2 + 1 + 1 units, the update / 4 */
	push_step(a, &pl, g, 1, &e);
	push_step(b, &pl, g, 1, &e);
	push_step(c, &pl, g, 1, &e);
	WAIT_OK(a);
	WAIT_OK(b);
	WAIT_OK(c);
	for (int i = 0; i < NPARAMS; i++)
		want[i] -= 0.1f * (3 * g[i]) / 4;
	WF_CHECK_MSG(max_diff(pc, want, NPARAMS) < 1e-6f, "%g", max_diff(pc, want, NPARAMS));
	WF_CHECK(max_diff(pa, pc, NPARAMS) == 0.0f && max_diff(pb, pc, NPARAMS) == 0.0f);
	WF_CHECK_MSG(!strcmp(unit_list(a, ref), "7") && !strcmp(unit_list(b, ref), "8") &&
			     !strcmp(unit_list(c, ref), "9"),
		     "%s / %s / %s", unit_list(a, ref), unit_list(b, ref), unit_list(c, ref));
cleanup:
	elastic_end(a, b, c, &pl);
}

static void test_stalled_worker_is_named(void)
{
	wf_ps_server_cfg sc;
	base_cfg(&sc, 0, 1, 2);
	sc.stall_timeout = 0.3;
	sc.heartbeat_timeout = 10;
	start_server(&sc);
	wf_ps_placement pl;
	wf_ps_place(&pl, NULL, 0, NPARAMS, 1, CHUNKB, NULL);
	static float p0[NPARAMS], pa[NPARAMS], pb[NPARAMS], g[NPARAMS];
	wf_err e = {0};
	wf_ps_client *a = make_client(&pl, pa, NULL, WF_PS_ROLE_WORKER, 0, 0.1);
	wf_ps_client *b = make_client(&pl, pb, NULL, WF_PS_ROLE_WORKER, 1, 0.1);
	if (!a || !b || setup_job(a, p0) || wf_ps_client_register(b, 0, NULL, NULL, &e))
		goto cleanup;
	fill(g, NPARAMS, 31);
	for (int k = 0; k < pl.nchunks; k++)
		wf_ps_client_push_pull_async(a, k, g, 0, 0, &e);
	wf_ps_client_push_pull_async(b, 0, g, 0, 0, &e); /* b owes chunks 1, 2, 3 */
	char log[512];
	snprintf(log, sizeof(log), "%s/ps-0.log", tmpdir);
	for (double t0 = wf_now(); wf_now() - t0 < 10 && !file_contains(log, "stall: worker 1",
									"chunks owed (3): 1,2,3");)
		sleep_s(0.05);
	WF_CHECK_MSG(file_contains(log, "stall: worker 1", "chunks owed (3): 1,2,3"),
		     "no stall line in %s", log);
	WF_CHECK(!file_contains(log, "stall: worker 0", NULL));
	for (int k = 1; k < pl.nchunks; k++)
		wf_ps_client_push_pull_async(b, k, g, 0, 0, &e);
	WF_CHECK_INT(wf_ps_client_wait_all(a, &e), 0);
	WF_CHECK_INT(wf_ps_client_wait_all(b, &e), 0);
cleanup:
	wf_ps_client_free(a);
	wf_ps_client_free(b);
	wf_ps_placement_free(&pl);
	kill_children();
}

static void test_client_timeout_names_server(void)
{
	/* nothing listens on this port */
	wf_ps_placement pl;
	wf_ps_place(&pl, NULL, 0, NPARAMS, 1, CHUNKB, NULL);
	static float p[NPARAMS];
	wf_ps_client_cfg cc = {.nservers = 1,
			       .endpoints = endpoints(1),
			       .job_id = JOB,
			       .role = WF_PS_ROLE_WORKER,
			       .pl = &pl,
			       .params = p,
			       .timeout = 0.3,
			       .connect_timeout = 0.5};
	wf_ps_client *c = NULL;
	wf_err e = {0};
	WF_CHECK_INT(wf_ps_client_create(&c, &cc, &e), 0);
	WF_CHECK_INT(wf_ps_client_register(c, 0, NULL, NULL, &e), WF_ETRANSIENT);
	WF_CHECK_MSG(strstr(e.msg, "did not answer") != NULL, "%s", e.msg);
	WF_CHECK_INT(wf_ps_client_pull(c, -1, NULL, &e), WF_ETRANSIENT);
	WF_CHECK_MSG(strstr(e.msg, conn_ep[0]) != NULL, "%s", e.msg);
	wf_ps_client_free(c);
	wf_ps_placement_free(&pl);
}

int main(void)
{
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/weft-test-ps-XXXXXX");
	if (!mkdtemp(tmpdir)) {
		perror("mkdtemp");
		return 1;
	}
	/* below the kernel's ephemeral range (32768-60999 by default): a port
	 * there may be taken, once its server is killed, by any connection on
	 * the machine, even the client's own reconnects (a test then waited its
	 * 10 s timeout on the dead server) */
	port_base = 12000 + (int)(getpid() % 1000) * 10;
	signal(SIGPIPE, SIG_IGN);
	atexit(kill_children);
	WF_RUN(test_bad_messages_rejected_and_counted);
	WF_RUN(test_sync_two_workers_equal_summed_step);
	WF_RUN(test_async_applies_each_push);
	WF_RUN(test_ssp_bounds_staleness);
	WF_RUN(test_checkpoint_kill9_restore);
	WF_RUN(test_refusal_ends_the_wait);
	WF_RUN(test_register_learns_the_restart);
	WF_RUN(test_pull_unit_waits_for_the_backup);
	WF_RUN(test_init_waits_for_the_backup);
	WF_RUN(test_join_of_a_restart_drops_the_old_backup);
	WF_RUN(test_closed_connection_fails_over);
	WF_RUN(test_dropped_backup_joins_again);
	WF_RUN(test_failed_over_group_goes_back);
	WF_RUN(test_two_primaries_resolve);
	WF_RUN(test_dead_worker_leaves_count);
	WF_RUN(test_elastic_membership);
	WF_RUN(test_elastic_leave_unseen_is_final);
	WF_RUN(test_elastic_final_barrier_without_quorum);
	WF_RUN(test_elastic_join_mid_step);
	WF_RUN(test_elastic_joiner_waiting_is_not_awaited);
	WF_RUN(test_elastic_global_batch_lists);
	WF_RUN(test_stalled_worker_is_named);
	WF_RUN(test_client_timeout_names_server);
	kill_children();
	char cmd[300];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
	if (wf_test_failed_tests == 0 && system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", tmpdir);
	return wf_test_summary();
}
