/* bench_cluster.c: `weft bench cluster`: the exchanges measured on an
 * emulated cluster (trainer/netem.h) against the bandwidth bound.
 *
 * Compute is modelled so that dozens of workers fit on a few cores: a step
 * sleeps --compute-ms F for the forward, then walks the model's layers
 * backwards, releasing each layer's gradient at the moment its share of the
 * backward time B (by its FLOPs) has passed, as a real backward would. The
 * gradients are real buffers of the model's layer sizes (times --scale),
 * with fixed contents, and go through the real exchange: weft's parameter
 * servers (wf_ps_server_run, in their own processes) and client in sync,
 * async and ssp:K; MPI allreduce in buckets under a real mpirun (its ranks
 * started in their namespaces through an rsh agent); and, as the peer,
 * PyTorch DistributedDataParallel (gloo) with the same sleeps and tensors
 * (bench/ddp_modelled.py).
 *
 * The bound: compute (F + B) plus the time the busiest link needs for the
 * step's bytes: allreduce 2(N-1)/N x the gradient bytes; parameter servers
 * max(one worker's bytes, the most loaded server's N x its share), each way
 * over its own full-duplex link. Efficiency = bound / measured median step.
 * One JSON line per configuration on stdout; progress on stderr. */
#include "trainer/bench_cluster.h"

#include "common/flags.h"
#include "common/log.h"
#include "common/util.h"
#include "model/model.h"
#include "model/optim.h"
#include "ps/client.h"
#include "ps/placement.h"
#include "ps/server.h"
#include "trainer/cli.h"
#include "trainer/netem.h"
#include "trainer/strategy.h"
#include "worker/exchange_mpi.h"

#include <errno.h>
#include <ftw.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define JOB_ID	    0x5745465442434c55ull /* any value: the bench's own job */
#define PS_PORT	    2222
#define MAX_WORKERS 64
#define MAX_SERVERS 32
#define RESULT_TAG  "weft-cluster-result"

/* ---- what a configuration is ------------------------------------------------ */

typedef struct opts {
	const char *model;
	double scale;
	double fwd_ms, bwd_ms;
	long steps, warmup, batch;
	double bucket_mb;
	long chunk_bytes;
	wf_netem_link link;
	const char *link_text;
	const char *python;   /* for the ddp peer */
	double timeout;	      /* seconds a configuration may take */
	const char *timeline; /* parameter servers: worker 0's per-step timeline (JSON lines) */
	int layer_ready; /* parameter servers: each layer's forward starts once its chunks landed */
	char exe[4096];	 /* this binary (mpirun starts it) */
	char src[4096];	 /* bench/ddp_modelled.py's folder */
} opts;

typedef struct config {
	char mode[16]; /* sync, async, ssp:K, allreduce, ddp */
	int workers, servers;
	int replicas;		       /* parameter-server modes: servers that keep each chunk */
	wf_ps_compression compression; /* parameter-server modes: ps.compression */
	double topk;		       /* its F with topk:F */
	char comp_text[32];	       /* as given ("topk:0.01") */
	int priority_kb;	       /* parameter-server modes: ps.priority_kb (0: off) */
	double none_ms; /* the same configuration uncompressed earlier in this run; 0: none */
} config;

/* The model's gradient, scaled: its views (placement), and the backward's
 * release points: after layer k of the backward (k = 0 is the last layer),
 * the prefix [0, done[k]) is final, at fraction at[k] of the backward time. */
typedef struct layout {
	size_t nparams; /* floats */
	int nviews;
	wf_view *views;
	int nrel;
	size_t *done;
	double *at;
} layout;

static void layout_free(layout *l)
{
	free(l->views);
	free(l->done);
	free(l->at);
	memset(l, 0, sizeof(*l));
}

static double layer_flops(const wf_model *m, const wf_layer *l)
{
	if (l->type != WF_LAYER_CONV2D && l->type != WF_LAYER_DENSE)
		return 0;
	return 2.0 * (double)m->views[l->p_kernel].count * l->oh * l->ow;
}

/* Scaled trainable views in offset order, and the release points. */
static int layout_build(layout *out, const char *name, double scale, wf_err *err)
{
	int h, w, c;
	wf_model *m = NULL;
	memset(out, 0, sizeof(*out));
	int rc = wf_model_zoo_info(name, &h, &w, &c, NULL, err);
	if (rc == 0)
		rc = wf_model_zoo(&m, name, h, w, c, strcmp(name, "resnet20") ? 1000 : 10, err);
	if (rc != 0)
		return rc;
	size_t *scaled_off = calloc((size_t)m->nviews, sizeof(size_t));
	out->views = calloc((size_t)m->nviews, sizeof(wf_view));
	out->done = calloc((size_t)m->nlayers, sizeof(size_t));
	out->at = calloc((size_t)m->nlayers, sizeof(double));
	if (!scaled_off || !out->views || !out->done || !out->at) {
		rc = wf_errf(err, WF_ENOMEM, "out of memory");
		goto cleanup;
	}
	/* views are laid out in reverse topological order (model.h): keep that
	 * order, each view's size times scale (at least one float) */
	for (size_t off = 0; off < m->nparams;) {
		int best = -1;
		for (int v = 0; v < m->nviews; v++)
			if (m->views[v].trainable && m->views[v].offset == off)
				best = v;
		if (best < 0)
			break;
		wf_view sv = m->views[best];
		sv.count = WF_MAX((size_t)1, (size_t)llround((double)sv.count * scale));
		sv.offset = out->nparams;
		sv.ndim = 1;
		sv.shape[0] = (int)sv.count;
		scaled_off[best] = sv.offset + sv.count;
		out->views[out->nviews++] = sv;
		out->nparams += sv.count;
		off += m->views[best].count;
	}
	double total = 0, cum = 0;
	for (int i = 0; i < m->nlayers; i++)
		total += layer_flops(m, &m->layers[i]);
	size_t done = 0;
	for (int i = m->nlayers - 1; i >= 0; i--) {
		const wf_layer *l = &m->layers[i];
		int v[4] = {l->p_kernel, l->p_bias, l->p_gamma, l->p_beta};
		cum += layer_flops(m, l);
		int any = 0;
		for (int k = 0; k < 4; k++)
			if (v[k] >= 0 && m->views[v[k]].trainable) {
				done = WF_MAX(done, scaled_off[v[k]]);
				any = 1;
			}
		if (!any)
			continue;
		out->done[out->nrel] = done;
		out->at[out->nrel++] = total > 0 ? cum / total : 1;
	}
	if (out->nrel)
		out->done[out->nrel - 1] = out->nparams;
cleanup:
	free(scaled_off);
	wf_model_free(m);
	if (rc != 0)
		layout_free(out);
	return rc;
}

/* ---- the modelled step -------------------------------------------------------- */

static void sleep_until(double t)
{
	struct timespec ts = {(time_t)t, (long)((t - floor(t)) * 1e9)};
	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
		;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* CPU seconds this process has used, all its threads. */
static double cpu_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* The result line a rank prints: its median and p90 step time, and the CPU
 * time it used per measured step (ms). */
static void report(int rank, double *ms, int n, double cpu_ms)
{
	qsort(ms, (size_t)n, sizeof(double), cmp_double);
	printf(RESULT_TAG " rank=%d median_ms=%.3f p90_ms=%.3f steps=%d cpu_ms=%.3f\n", rank,
	       n ? ms[n / 2] : 0, n ? ms[(int)(0.9 * (n - 1) + 0.5)] : 0, n, cpu_ms);
	fflush(stdout);
}

/* Fixed gradient contents (any values: the servers really add and apply them). */
static float *make_grads(size_t n, int rank)
{
	float *g = malloc((n ? n : 1) * sizeof(float));
	for (size_t i = 0; g && i < n; i++)
		g[i] = 1e-4f * (float)((int)((i * 7 + (size_t)rank * 13) % 17) - 8);
	return g;
}

/* ---- parameter servers ------------------------------------------------------------ */

static int parse_mode(const char *mode, wf_ps_mode *m, int *staleness)
{
	*staleness = 0;
	if (!strcmp(mode, "sync"))
		*m = WF_PS_MODE_SYNC;
	else if (!strcmp(mode, "async"))
		*m = WF_PS_MODE_ASYNC;
	else if (!strncmp(mode, "ssp:", 4) && atoi(mode + 4) > 0) {
		*m = WF_PS_MODE_SSP;
		*staleness = atoi(mode + 4);
	} else
		return -1;
	return 0;
}

static void endpoint(int node, char *buf, size_t n)
{
	char addr[32];
	wf_netem_addr(node, addr, sizeof(addr));
	snprintf(buf, n, "tcp://%s:%d", addr, PS_PORT);
}

static int serve(const opts *o, const config *cf, const layout *l, int s, wf_err *err)
{
	wf_ps_server_cfg sc;
	wf_ps_server_cfg_default(&sc);
	char bind[64];
	snprintf(bind, sizeof(bind), "tcp://*:%d", PS_PORT);
	sc.bind = bind;
	sc.index = s;
	sc.nservers = cf->servers;
	sc.job_id = JOB_ID;
	sc.nworkers = cf->workers;
	parse_mode(cf->mode, &sc.mode, &sc.staleness);
	wf_optim_cfg_default(&sc.optim);
	sc.optim.lr = 1e-3f;
	sc.views = l->views;
	sc.nviews = l->nviews;
	sc.nparams = l->nparams;
	sc.chunk_bytes = (size_t)o->chunk_bytes;
	sc.stats_every = 0;
	sc.stall_timeout = 0;
	sc.threads = 1;
	char eps[MAX_SERVERS][64];
	const char *ep[MAX_SERVERS];
	for (int k = 0; k < cf->servers; k++) {
		endpoint(cf->workers + k, eps[k], sizeof(eps[k]));
		ep[k] = eps[k];
	}
	sc.replicas = cf->replicas;
	sc.peers = ep;
	sc.compression = cf->compression;
	sc.priority = cf->priority_kb > 0;
	return wf_ps_server_run(&sc, err);
}

/* --layer-ready: the forward of the model's layers in order, each when its
 * chunks (the previous step's replies) have landed, for its share of fwd_ms. */
static int forward_layer_ready(wf_ps_client *cl, const wf_ps_placement *pl, const layout *l,
			       double fwd_ms, wf_err *err)
{
	int rc = 0;
	for (int k = l->nrel - 1, c = pl->nchunks - 1; rc == 0 && k >= 0; k--) {
		size_t lo = k ? l->done[k - 1] : 0; /* layer k's floats: [lo, done[k]) */
		for (; rc == 0 && c >= 0 && pl->chunks[c].offset + pl->chunks[c].count > lo; c--)
			rc = wf_ps_client_wait_chunk(cl, c, err);
		double share = l->at[k] - (k ? l->at[k - 1] : 0);
		sleep_until(wf_now() + share * fwd_ms / 1e3);
	}
	return rc ? rc : wf_ps_client_wait_all(cl, err);
}

/* --timeline: one step's line: per chunk its server, floats, when the
 * backward released its push, when wait_chunk (in chunk order) saw its reply,
 * when the client handed the push to ZeroMQ and when it read the reply (ms
 * from the step's start t0). */
static void timeline_write(FILE *tl, long step, double step_ms, double bwd_end_ms,
			   const wf_ps_placement *pl, const double *push_at, const double *land_at,
			   const wf_ps_client *cl, double t0)
{
	fprintf(tl, "{\"step\": %ld, \"step_ms\": %.1f, \"bwd_end_ms\": %.1f, \"chunks\": [", step,
		step_ms, bwd_end_ms);
	for (int k = 0; k < pl->nchunks; k++) {
		double sent = 0, read = 0;
		wf_ps_client_chunk_times(cl, k, &sent, &read);
		fprintf(tl, "%s[%d, %zu, %.1f, %.1f, %.1f, %.1f]", k ? ", " : "",
			pl->chunks[k].server, pl->chunks[k].count, push_at[k], land_at[k],
			(sent - t0) * 1e3, (read - t0) * 1e3);
	}
	fprintf(tl, "]}\n");
}

/* One modelled worker against the servers: rank 0 seeds them, all meet at a
 * barrier, then warmup + steps steps; rank 0 prints the staleness the
 * servers saw and shuts them down. */
static int ps_work(const opts *o, const config *cf, const layout *l, int rank, wf_err *err)
{
	wf_ps_placement pl = {0};
	wf_ps_client *cl = NULL;
	char eps[MAX_SERVERS][64];
	const char *ep[MAX_SERVERS];
	float *params = calloc(l->nparams ? l->nparams : 1, sizeof(float));
	float *grads = make_grads(l->nparams, rank);
	long steps = o->warmup + o->steps;
	double *ms = calloc((size_t)steps, sizeof(double));
	int rc = !params || !grads || !ms ? wf_errf(err, WF_ENOMEM, "out of memory") : 0;
	for (int s = 0; s < cf->servers; s++) {
		endpoint(cf->workers + s, eps[s], sizeof(eps[s]));
		ep[s] = eps[s];
	}
	if (rc == 0)
		rc = wf_ps_place(&pl, l->views, l->nviews, l->nparams, cf->servers,
				 (size_t)o->chunk_bytes, err);
	wf_ps_client_cfg cc = {.nservers = cf->servers,
			       .endpoints = ep,
			       .job_id = JOB_ID,
			       .role = WF_PS_ROLE_WORKER,
			       .index = rank,
			       .pl = &pl,
			       .params = params,
			       .contributors = 1,
			       .replicas = cf->replicas,
			       .compression = cf->compression,
			       .topk = cf->topk,
			       .priority_bytes = (size_t)cf->priority_kb * 1024,
			       .timeout = 120,
			       .connect_timeout = 60,
			       .heartbeat_interval = WF_PS_HEARTBEAT_INTERVAL_DEFAULT};
	if (rc == 0)
		rc = wf_ps_client_create(&cl, &cc, err);
	long min_step = -1;
	if (rc == 0)
		rc = wf_ps_client_register(cl, 0, NULL, &min_step, err);
	if (rc == 0 && rank == 0)
		rc = wf_ps_client_init(cl, params, NULL, NULL, 0, err);
	for (double t0 = wf_now(); rc == 0 && rank != 0 && min_step < 0;) {
		if (wf_now() - t0 > 60) {
			rc = wf_errf(err, WF_ETRANSIENT, "worker %d: servers never seeded", rank);
			break;
		}
		sleep_until(wf_now() + 0.02);
		rc = wf_ps_client_register(cl, 0, NULL, &min_step, err);
	}
	if (rc == 0)
		rc = wf_ps_client_barrier(cl, 0, err);
	double cpu0 = 0;
	FILE *tl = NULL;
	double *push_at = NULL, *land_at = NULL;
	if (rc == 0 && rank == 0 && o->timeline) {
		tl = fopen(o->timeline, "w");
		push_at = calloc((size_t)pl.nchunks, sizeof(double));
		land_at = calloc((size_t)pl.nchunks, sizeof(double));
		if (!tl || !push_at || !land_at)
			rc = wf_errf(err, WF_EIO, "--timeline %s: cannot write it", o->timeline);
	}
	for (long step = 0; rc == 0 && step < steps; step++) {
		if (step == o->warmup)
			cpu0 = cpu_now();
		double t0 = wf_now();
		if (o->layer_ready)
			rc = forward_layer_ready(cl, &pl, l, o->fwd_ms, err);
		else
			sleep_until(t0 + o->fwd_ms / 1e3);
		double tb = wf_now();
		int next = 0;
		for (int k = 0; rc == 0 && k < l->nrel; k++) {
			sleep_until(tb + l->at[k] * o->bwd_ms / 1e3);
			for (; rc == 0 && next < pl.nchunks &&
			       pl.chunks[next].offset + pl.chunks[next].count <= l->done[k];
			     next++) {
				rc = wf_ps_client_push_pull_async(cl, next, grads, step, 0, err);
				if (tl)
					push_at[next] = (wf_now() - t0) * 1e3;
			}
		}
		/* the timeline: when each chunk's reply landed (in push order) */
		for (int k = 0; tl && rc == 0 && k < pl.nchunks; k++) {
			rc = wf_ps_client_wait_chunk(cl, k, err);
			land_at[k] = (wf_now() - t0) * 1e3;
		}
		if (rc == 0 && (!o->layer_ready || step == steps - 1))
			rc = wf_ps_client_wait_all(cl, err);
		if (step >= o->warmup)
			ms[step - o->warmup] = (wf_now() - t0) * 1e3;
		if (tl && rc == 0)
			timeline_write(tl, step, (wf_now() - t0) * 1e3, o->fwd_ms + o->bwd_ms, &pl,
				       push_at, land_at, cl, t0);
	}
	double cpu_ms = (cpu_now() - cpu0) * 1e3 / (double)o->steps;
	if (tl)
		fclose(tl);
	free(push_at);
	free(land_at);
	if (rc == 0)
		rc = wf_ps_client_barrier(cl, steps, err);
	if (rc == 0 && rank == 0) {
		long lead = 0;
		double in = 0; /* bytes into the servers, every message */
		for (int s = 0; s < cf->servers; s++) {
			wf_ps_stats st;
			if (wf_ps_client_stats(cl, s, &st, err) != 0)
				continue;
			lead = WF_MAX(lead, st.ssp_max_lead);
			in += (double)st.bytes_in;
			wf_ps_stats_free(&st);
		}
		printf(RESULT_TAG " staleness_max=%ld\n", lead);
		printf(RESULT_TAG " push_bytes=%.0f\n", in / (double)steps / cf->workers);
		rc = wf_ps_client_shutdown(cl, err);
	}
	if (rc == 0)
		report(rank, ms, (int)o->steps, cpu_ms);
	wf_ps_client_free(cl);
	wf_ps_placement_free(&pl);
	free(params);
	free(grads);
	free(ms);
	return rc;
}

/* ---- allreduce (a rank under mpirun) ------------------------------------------------ */

static int allreduce_work(const opts *o, const layout *l, wf_err *err)
{
	wf_mpi_world w;
	wf_mpi_opts mo = {.launched = 1, .stall_timeout = 120};
	wf_strategy_mpi_defaults(); /* as weft train under mpirun */
	wf_mpi_configure(&mo);
	int rc = wf_mpi_world_get(&w, err);
	if (rc != 0)
		return rc;
	float *grads = make_grads(l->nparams, w.rank);
	long steps = o->warmup + o->steps;
	double *ms = calloc((size_t)steps, sizeof(double));
	wf_mpi_buckets *b = NULL;
	if (!grads || !ms)
		rc = wf_errf(err, WF_ENOMEM, "out of memory");
	if (rc == 0)
		rc = wf_mpi_buckets_create(&b, grads, l->nparams, o->bucket_mb, err);
	if (rc == 0)
		rc = wf_mpi_bcast(&steps, sizeof(steps), 0, "the start", err);
	double cpu0 = 0;
	for (long step = 0; rc == 0 && step < steps; step++) {
		if (step == o->warmup)
			cpu0 = cpu_now();
		double t0 = wf_now();
		sleep_until(t0 + o->fwd_ms / 1e3);
		double tb = wf_now();
		for (int k = 0; rc == 0 && k < l->nrel; k++) {
			sleep_until(tb + l->at[k] * o->bwd_ms / 1e3);
			rc = wf_mpi_buckets_ready(b, l->done[k], err);
		}
		if (rc == 0)
			rc = wf_mpi_buckets_wait(b, err);
		if (step >= o->warmup)
			ms[step - o->warmup] = (wf_now() - t0) * 1e3;
	}
	if (rc == 0)
		report(w.rank, ms, (int)o->steps, (cpu_now() - cpu0) * 1e3 / (double)o->steps);
	wf_mpi_buckets_free(b);
	if (rc != 0)
		wf_mpi_mark_failed();
	wf_mpi_world_finalize();
	free(grads);
	free(ms);
	return rc;
}

/* ---- running a configuration ----------------------------------------------------------- */

typedef struct run {
	wf_netem net;
	pid_t pid[MAX_WORKERS + MAX_SERVERS + 1];
	int npid;
	int out; /* read end of the children's stdout */
	char dir[64];
} run;

static int remove_entry(const char *path, const struct stat *st, int type, struct FTW *f)
{
	(void)st;
	(void)type;
	(void)f;
	remove(path);
	return 0;
}

/* The run's directory and what is in it (the agent, the layout, the MPI
 * session directories). */
static void remove_tree(const char *dir)
{
	nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* Fork a child into node's namespace with stdout to wr; in the child, fn
 * runs (returns its exit code) or, with argv, that program is executed. */
static pid_t start_child(run *r, int node, int wr, int (*fn)(void *), void *arg, char *const *argv,
			 char *const *env)
{
	pid_t parent = getpid(), pid = fork();
	if (pid != 0)
		return pid;
	setpgid(0, 0); /* killed as a group with what it starts (mpirun's daemons) */
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != parent)
		_exit(1);
	wf_err e;
	if (wf_netem_enter(&r->net, node, &e) != 0) {
		fprintf(stderr, "bench cluster: %s\n", e.msg);
		_exit(1);
	}
	dup2(wr, 1);
	if (argv) {
		for (int i = 0; env && env[i]; i++)
			putenv(env[i]);
		execvp(argv[0], argv);
		fprintf(stderr, "bench cluster: cannot run %s: %s\n", argv[0], strerror(errno));
		_exit(127);
	}
	_exit(fn(arg));
}

typedef struct child_arg {
	const opts *o;
	const config *cf;
	const layout *l;
	int index;
	int server; /* 1: a parameter server, 0: a modelled worker */
} child_arg;

static int ps_child_main(void *p)
{
	child_arg *a = p;
	wf_err e = {0};
	int rc = a->server ? serve(a->o, a->cf, a->l, a->index, &e)
			   : ps_work(a->o, a->cf, a->l, a->index, &e);
	if (rc == 0 && a->server) { /* its CPU per step, warm-up included (all its threads) */
		printf(RESULT_TAG " server_cpu_ms=%.3f\n",
		       cpu_now() * 1e3 / (double)(a->o->warmup + a->o->steps));
		fflush(stdout);
	}
	if (rc != 0)
		fprintf(stderr, "bench cluster: %s %d: %s\n", a->server ? "ps" : "worker", a->index,
			e.msg);
	return rc ? 1 : 0;
}

/* The rsh agent through which mpirun starts its daemons: host 10.213.0.K
 * is node K-1's namespace. Every namespace has the same host name and /tmp,
 * where Open MPI keeps a session directory named by host and user: daemons
 * starting at once in the same one made about one start in ten lose a
 * daemon, silently, and the run wait for it for ever. So each daemon, and
 * mpirun, gets a TMPDIR of its own under the run's directory. */
static int write_agent(const run *r, char *path, size_t n, wf_err *err)
{
	snprintf(path, n, "%s/agent.sh", r->dir);
	FILE *f = fopen(path, "w");
	if (!f)
		return wf_errf(err, WF_EIO, "%s: %s", path, strerror(errno));
	fprintf(f,
		"#!/bin/sh\n"
		"# mpirun's rsh agent: run the daemon in the host's network namespace\n"
		"host=$1; shift\n"
		"mkdir -p %s/tmp-$host\n"
		"exec ip netns exec %s-$((${host##*.} - 1)) env TMPDIR=%s/tmp-$host sh -c \"$*\"\n",
		r->dir, r->net.tag, r->dir);
	fclose(f);
	chmod(path, 0700);
	return 0;
}

static void opts_args(const opts *o, const config *cf, char *buf, size_t n)
{
	snprintf(buf, n,
		 "--model %s --scale %g --compute-ms %g/%g --steps %ld --warmup %ld "
		 "--bucket-mb %g --workers %d",
		 o->model, o->scale, o->fwd_ms, o->bwd_ms, o->steps, o->warmup, o->bucket_mb,
		 cf->workers);
}

/* Start the processes of cf; their stdout comes to r->out. */
static int start_all(run *r, const opts *o, const config *cf, const layout *l, child_arg *args,
		     wf_err *err)
{
	int p[2];
	if (pipe(p) != 0)
		return wf_errf(err, WF_EINTERNAL, "pipe: %s", strerror(errno));
	r->out = p[0];
	int launcher = r->net.nodes - 1; /* the last node, unshaped */
	char argbuf[1024], agent[128], hosts[MAX_WORKERS * 24], np[16];
	if (!strcmp(cf->mode, "allreduce")) {
		int rc = write_agent(r, agent, sizeof(agent), err);
		if (rc != 0) {
			close(p[1]);
			return rc;
		}
		size_t k = 0;
		for (int i = 0; i < cf->workers; i++) {
			char a[32];
			wf_netem_addr(i, a, sizeof(a));
			k += (size_t)snprintf(hosts + k, sizeof(hosts) - k, "%s%s:1", i ? "," : "",
					      a);
		}
		snprintf(np, sizeof(np), "%d", cf->workers);
		opts_args(o, cf, argbuf, sizeof(argbuf));
		char cmd[sizeof(o->exe) + sizeof(argbuf) + 64];
		snprintf(cmd, sizeof(cmd), "%s bench cluster --rank-of allreduce %s", o->exe,
			 argbuf);
		/* Open MPI's own settings, as a user's mpirun has them; the rank
		 * applies weft's defaults (wf_strategy_mpi_defaults) itself */
		char *argv[] = {"mpirun",
				"--allow-run-as-root",
				"-np",
				np,
				"--host",
				hosts,
				"--bind-to",
				"none",
				"--mca",
				"plm_rsh_agent",
				agent,
				"--mca",
				"plm_rsh_no_tree_spawn",
				"1",
				"--mca",
				"btl",
				"tcp,self",
				"--mca",
				"btl_tcp_if_include",
				"eth0",
				"--mca",
				"oob_tcp_if_include",
				"eth0",
				"--mca",
				"pml",
				"ob1",
				"-x",
				"OMP_NUM_THREADS=1",
				"sh",
				"-c",
				cmd,
				NULL};
		char tmpdir[sizeof(r->dir) + 16];
		snprintf(tmpdir, sizeof(tmpdir), "TMPDIR=%s", r->dir);
		char *env[] = {tmpdir, NULL};
		r->pid[r->npid++] = start_child(r, launcher, p[1], NULL, NULL, argv, env);
	} else if (!strcmp(cf->mode, "ddp")) {
		char master[32];
		wf_netem_addr(0, master, sizeof(master));
		for (int i = 0; i < cf->workers; i++) {
			char rank[16], world[16], steps[32], warm[32], fb[64], scale[32],
				bucket[32], script[4200];
			snprintf(rank, sizeof(rank), "%d", i);
			snprintf(world, sizeof(world), "%d", cf->workers);
			snprintf(steps, sizeof(steps), "%ld", o->steps);
			snprintf(warm, sizeof(warm), "%ld", o->warmup);
			snprintf(fb, sizeof(fb), "%g/%g", o->fwd_ms, o->bwd_ms);
			snprintf(scale, sizeof(scale), "%g", o->scale);
			snprintf(bucket, sizeof(bucket), "%g", o->bucket_mb);
			snprintf(script, sizeof(script), "%s/ddp_modelled.py", o->src);
			char layout_path[128];
			snprintf(layout_path, sizeof(layout_path), "%s/layout.json", r->dir);
			char *argv[] = {(char *)o->python,
					script,
					"--rank",
					rank,
					"--world",
					world,
					"--master",
					master,
					"--layout",
					layout_path,
					"--steps",
					steps,
					"--warmup",
					warm,
					"--compute-ms",
					fb,
					"--bucket-mb",
					bucket,
					NULL};
			char *env[] = {"GLOO_SOCKET_IFNAME=eth0", "OMP_NUM_THREADS=1", NULL};
			r->pid[r->npid++] = start_child(r, i, p[1], NULL, NULL, argv, env);
		}
	} else {
		for (int s = 0; s < cf->servers; s++) {
			args[s] = (child_arg){o, cf, l, s, 1};
			r->pid[r->npid++] = start_child(r, cf->workers + s, p[1], ps_child_main,
							&args[s], NULL, NULL);
		}
		for (int i = 0; i < cf->workers; i++) {
			args[cf->servers + i] = (child_arg){o, cf, l, i, 0};
			r->pid[r->npid++] = start_child(r, i, p[1], ps_child_main,
							&args[cf->servers + i], NULL, NULL);
		}
	}
	close(p[1]);
	for (int i = 0; i < r->npid; i++)
		if (r->pid[i] < 0)
			return wf_errf(err, WF_EINTERNAL, "fork: %s", strerror(errno));
	return 0;
}

/* The layout for the ddp peer: the release points and the views' sizes. */
static int write_layout(const run *r, const layout *l, wf_err *err)
{
	char path[128];
	snprintf(path, sizeof(path), "%s/layout.json", r->dir);
	FILE *f = fopen(path, "w");
	if (!f)
		return wf_errf(err, WF_EIO, "%s: %s", path, strerror(errno));
	fprintf(f, "{\"nparams\": %zu, \"views\": [", l->nparams);
	for (int i = 0; i < l->nviews; i++)
		fprintf(f, "%s%zu", i ? ", " : "", l->views[i].count);
	fprintf(f, "], \"release\": [");
	for (int k = 0; k < l->nrel; k++)
		fprintf(f, "%s[%.6f, %zu]", k ? ", " : "", l->at[k], l->done[k]);
	fprintf(f, "]}\n");
	return fclose(f) == 0 ? 0 : wf_errf(err, WF_EIO, "%s: write failed", path);
}

typedef struct outcome {
	double median_ms, p90_ms; /* the slowest rank's */
	long staleness;		  /* -1: not reported */
	int ranks;		  /* result lines seen */
	double cpu_ms;		  /* sum over the ranks of CPU ms per measured step */
	double server_cpu_ms;	  /* the busiest server's CPU ms per step */
	double push_bytes;	  /* into the servers per worker and step; 0: not reported */
} outcome;

/* A line of the children's output (they share one pipe): results, where
 * another process's output may precede each on the same line, and two may
 * share one (a child that wrote its line and its newline apart); other
 * lines go to stderr. */
static void parse_line(char *text, outcome *oc)
{
	double med, p90, cpu;
	long st;
	/* a child's own output without a newline (a peer's library) may come
	 * first; what is not a result goes on to stderr */
	char *line = strstr(text, RESULT_TAG);
	if (!line) {
		if (*text)
			fprintf(stderr, "%s\n", text);
		return;
	}
	char *next = strstr(line + 1, RESULT_TAG);
	if (next) {
		parse_line(next, oc);
		*next = '\0';
	}
	if (sscanf(line, RESULT_TAG " server_cpu_ms=%lf", &cpu) == 1) {
		oc->server_cpu_ms = WF_MAX(oc->server_cpu_ms, cpu);
	} else if (sscanf(line, RESULT_TAG " push_bytes=%lf", &cpu) == 1) {
		oc->push_bytes = cpu;
	} else if (sscanf(line, RESULT_TAG " staleness_max=%ld", &st) == 1) {
		oc->staleness = st;
	} else if (sscanf(line, RESULT_TAG " rank=%*d median_ms=%lf p90_ms=%lf", &med, &p90) == 2) {
		oc->median_ms = WF_MAX(oc->median_ms, med);
		oc->p90_ms = WF_MAX(oc->p90_ms, p90);
		oc->ranks++;
		const char *ms = strstr(line, " cpu_ms=");
		if (ms)
			oc->cpu_ms += strtod(ms + 8, NULL);
	}
}

/* Read result lines until every child exited, or kill them all when the
 * configuration passes `timeout` seconds. */
static int collect(run *r, double timeout, outcome *oc, wf_err *err)
{
	char buf[8192];
	size_t len = 0;
	double deadline = wf_now() + timeout;
	for (;;) {
		struct pollfd p = {.fd = r->out, .events = POLLIN};
		double left = deadline - wf_now();
		if (left <= 0) {
			for (int i = 0; i < r->npid; i++)
				if (r->pid[i] > 0)
					kill(-r->pid[i], SIGKILL);
			return wf_errf(err, WF_ETRANSIENT,
				       "did not finish within %.0f s (--timeout): stopped",
				       timeout);
		}
		if (poll(&p, 1, (int)WF_MIN(left * 1000 + 1, 1000)) <= 0)
			continue;
		ssize_t n = read(r->out, buf + len, sizeof(buf) - 1 - len);
		if (n <= 0)
			break; /* every child closed its stdout */
		len += (size_t)n;
		buf[len] = '\0';
		char *line = buf, *nl;
		while ((nl = strchr(line, '\n'))) {
			*nl = '\0';
			parse_line(line, oc);
			line = nl + 1;
		}
		len = strlen(line);
		memmove(buf, line, len + 1);
		if (len == sizeof(buf) - 1)
			len = 0; /* a line too long to be ours */
	}
	int failed = 0;
	for (int i = 0; i < r->npid; i++) {
		int st = 0;
		if (r->pid[i] > 0 && waitpid(r->pid[i], &st, 0) == r->pid[i] &&
		    !(WIFEXITED(st) && !WEXITSTATUS(st)))
			failed++;
		r->pid[i] = 0;
	}
	if (failed)
		return wf_errf(err, WF_ETRANSIENT, "%d of %d processes failed (their errors above)",
			       failed, r->npid);
	return 0;
}

static void stop_all(run *r)
{
	for (int i = 0; i < r->npid; i++)
		if (r->pid[i] > 0) {
			kill(-r->pid[i], SIGKILL);
			waitpid(r->pid[i], NULL, 0);
		}
	r->npid = 0;
	if (r->out >= 0)
		close(r->out);
	r->out = -1;
}

/* Bytes per second the busiest link carries per step, as seconds. */
static double comm_seconds(const opts *o, const config *cf, const layout *l, wf_err *err)
{
	double bytes = (double)l->nparams * sizeof(float), rate = o->link.rate_bps / 8;
	if (rate <= 0)
		return 0;
	if (!strcmp(cf->mode, "allreduce") || !strcmp(cf->mode, "ddp"))
		return cf->workers > 1 ? 2.0 * (cf->workers - 1) / cf->workers * bytes / rate : 0;
	wf_ps_placement pl;
	if (wf_ps_place(&pl, l->views, l->nviews, l->nparams, cf->servers, (size_t)o->chunk_bytes,
			err) != 0)
		return -1;
	size_t most = 0;
	for (int s = 0; s < cf->servers; s++)
		most = WF_MAX(most, pl.load[s]);
	wf_ps_placement_free(&pl);
	return WF_MAX(bytes, (double)cf->workers * most * sizeof(float)) / rate;
}

/* Run one configuration and print its line; *median_ms (may be NULL) gets
 * its median step time. */
static int run_config(const opts *o, const config *cf, const layout *l, double *median_ms,
		      wf_err *err)
{
	run r = {.out = -1};
	child_arg args[MAX_WORKERS + MAX_SERVERS];
	outcome oc = {.staleness = -1};
	int ps = strcmp(cf->mode, "allreduce") && strcmp(cf->mode, "ddp");
	int nodes = cf->workers + (ps ? cf->servers : 0);
	snprintf(r.dir, sizeof(r.dir), "/tmp/weft-cluster.XXXXXX");
	if (!mkdtemp(r.dir))
		return wf_errf(err, WF_EIO, "mkdtemp: %s", strerror(errno));
	fprintf(stderr, "bench cluster: %s, %d worker%s%s%.0d, %s links ...\n", cf->mode,
		cf->workers, cf->workers == 1 ? "" : "s", ps ? ", servers: " : "",
		ps ? cf->servers : 0, o->link_text ? o->link_text : "unshaped");
	int rc = wf_netem_create(&r.net, nodes + 1, nodes, &o->link, err);
	if (rc == 0 && !strcmp(cf->mode, "ddp"))
		rc = write_layout(&r, l, err);
	if (rc == 0)
		rc = start_all(&r, o, cf, l, args, err);
	if (rc == 0)
		rc = collect(&r, o->timeout, &oc, err);
	/* what TCP and the shaping queues saw: workers' nodes, then servers' */
	wf_netem_counters net[2] = {{0}};
	for (int i = 0; rc == 0 && i < nodes; i++) {
		wf_netem_counters c;
		wf_err ignore;
		if (wf_netem_counters_get(&r.net, i, &c, &ignore) != 0)
			continue;
		wf_netem_counters *t = &net[i >= cf->workers];
		t->retrans += c.retrans;
		t->timeouts += c.timeouts;
		t->drops_in += c.drops_in;
	}
	stop_all(&r);
	wf_netem_destroy(&r.net);
	remove_tree(r.dir);
	if (rc == 0 && oc.ranks < cf->workers)
		rc = wf_errf(err, WF_EINTERNAL, "%d of %d ranks reported a result", oc.ranks,
			     cf->workers);
	if (rc != 0)
		return wf_err_wrap(err, "%s with %d workers", cf->mode, cf->workers), rc;
	double comm = comm_seconds(o, cf, l, err) * 1e3, compute = o->fwd_ms + o->bwd_ms;
	double bound = compute + comm, overlap = WF_MAX(compute, comm);
	printf("{\"bench\": \"cluster\", \"mode\": \"%s\", \"model\": \"%s\", \"scale\": %g, "
	       "\"workers\": %d, \"servers\": %d, \"link_bps\": %.0f, \"compute_ms\": [%g, %g], "
	       "\"grad_bytes\": %zu, \"step_ms\": %.2f, \"step_ms_p90\": %.2f, "
	       "\"images_per_sec\": %.1f, \"comm_ms\": %.2f, \"bound_ms\": %.2f, "
	       "\"efficiency\": %.3f, \"bound_overlap_ms\": %.2f, \"efficiency_overlap\": %.3f",
	       cf->mode, o->model, o->scale, cf->workers, ps ? cf->servers : 0, o->link.rate_bps,
	       o->fwd_ms, o->bwd_ms, l->nparams * sizeof(float), oc.median_ms, oc.p90_ms,
	       oc.median_ms > 0 ? cf->workers * o->batch * 1e3 / oc.median_ms : 0, comm, bound,
	       oc.median_ms > 0 ? bound / oc.median_ms : 0, overlap,
	       oc.median_ms > 0 ? overlap / oc.median_ms : 0);
	if (ps)
		printf(", \"chunk_bytes\": %ld, \"replicas\": %d, \"compression\": \"%s\", "
		       "\"layer_ready\": %d, \"priority_kb\": %d",
		       o->chunk_bytes, cf->replicas, cf->comp_text, o->layer_ready,
		       cf->priority_kb);
	else
		printf(", \"bucket_mb\": %g", o->bucket_mb);
	if (ps && oc.push_bytes > 0) /* into the servers, every message (rank 0's init too) */
		printf(", \"push_bytes_per_step\": %.0f", oc.push_bytes);
	if (ps && cf->none_ms > 0 && oc.median_ms > 0)
		printf(", \"step_vs_none\": %.3f", oc.median_ms / cf->none_ms);
	if (median_ms)
		*median_ms = oc.median_ms;
	if (oc.staleness >= 0)
		printf(", \"staleness_max\": %ld", oc.staleness);
	printf(", \"cpu_ms_per_step\": %.1f", oc.cpu_ms / cf->workers);
	printf(", \"gso\": %d, \"mtu\": %d, \"queue_kb\": %d", o->link.gso,
	       o->link.mtu > 0 ? o->link.mtu : 1500, o->link.queue_kb);
	/* per step, over the whole run: [workers, servers] */
	double steps = (double)(o->warmup + o->steps);
	printf(", \"tcp_retrans_per_step\": [%.1f, %.1f], \"tcp_rto_per_step\": [%.2f, %.2f], "
	       "\"drops_in_per_step\": [%.1f, %.1f]",
	       net[0].retrans / steps, net[1].retrans / steps, net[0].timeouts / steps,
	       net[1].timeouts / steps, net[0].drops_in / steps, net[1].drops_in / steps);
	if (ps)
		printf(", \"server_cpu_ms_per_step\": %.1f", oc.server_cpu_ms);
	double load = -1;
	FILE *lf = fopen("/proc/loadavg", "r");
	if (lf) {
		if (fscanf(lf, "%lf", &load) != 1)
			load = -1;
		fclose(lf);
	}
	if (load >= 0) /* the machine's, at the end: other work shares the cores */
		printf(", \"load_avg\": %.2f", load);
	printf("}\n");
	fflush(stdout);
	return 0;
}

/* ---- the command ------------------------------------------------------------------------ */

/* "none,bf16,topk:0.01" into comps (at most 4: kind, F and text); *n gets
 * the count. */
static int parse_compressions(const char *s, config *comps, int *n, wf_err *err)
{
	char list[128], *save = NULL;
	snprintf(list, sizeof(list), "%s", s);
	*n = 0;
	for (char *t = strtok_r(list, ",", &save); t && *n < 4; t = strtok_r(NULL, ",", &save)) {
		int rc = wf_ps_compression_parse(t, &comps[*n].compression, &comps[*n].topk, err);
		if (rc != 0)
			return wf_err_wrap(err, "--compression"), rc;
		snprintf(comps[*n].comp_text, sizeof(comps[*n].comp_text), "%s", t);
		++*n;
	}
	return *n ? 0
		  : wf_errf(err, WF_EINVAL, "--compression \"%s\": expected %s", s,
			    WF_PS_COMPRESSIONS);
}

/* "1,2,4" into ints in [lo, hi]; 0 or the count. */
static int parse_ints_in(const char *s, int *out, int max, long lo, long hi)
{
	int n = 0;
	for (const char *p = s; p && *p && n < max;) {
		char *end;
		long v = strtol(p, &end, 10);
		if (end == p || v < lo || v > hi)
			return -1;
		out[n++] = (int)v;
		p = *end == ',' ? end + 1 : end;
		if (*end && *end != ',')
			return -1;
	}
	return n;
}

/* "1,2,4" into counts in 1..MAX_WORKERS; 0 or the count. */
static int parse_ints(const char *s, int *out, int max)
{
	return parse_ints_in(s, out, max, 1, MAX_WORKERS);
}

int wf_cmd_bench(int argc, char **argv, wf_err *err)
{
	opts o = {.model = "resnet50",
		  .scale = 0.1,
		  .fwd_ms = 30,
		  .bwd_ms = 60,
		  .steps = 20,
		  .warmup = 3,
		  .batch = 32,
		  .bucket_mb = 0,
		  .chunk_bytes = 0,
		  .timeout = 600};
	const char *workers = "8", *servers = "2", *replicas = "1", *modes = "sync",
		   *compute = NULL, *link = "1gbit", *compression = "none", *delay = NULL,
		   *rank_of = NULL, *python = NULL, *priority = "0";
	wf_cli_list pos = {0};
	const wf_flag flags[] = {
		{"model", WF_FLAG_STR, &o.model, "NAME",
		 "layer sizes of resnet50 (default), mobilenetv2, nasnetmobile or resnet20"},
		{"scale", WF_FLAG_DOUBLE, &o.scale, "F",
		 "every tensor's size times F (0.1), to keep the bandwidth/compute ratio on a "
		 "slow emulated link"},
		{"compute-ms", WF_FLAG_STR, &compute, "F/B",
		 "modelled forward and backward time per step in ms (30/60)"},
		{"workers", WF_FLAG_STR, &workers, "N[,N...]", "worker counts to run (8)"},
		{"servers", WF_FLAG_STR, &servers, "M[,M...]",
		 "parameter-server counts, paired with --workers (2; one value: for all)"},
		{"mode", WF_FLAG_STR, &modes, "LIST",
		 "comma-separated: sync, async, ssp:K, allreduce (MPI), ddp (PyTorch) (sync)"},
		{"link", WF_FLAG_STR, &link, "RATE", "every link's rate each way (1gbit)"},
		{"delay", WF_FLAG_STR, &delay, "TIME", "one-way delay per side (needs netem)"},
		{"steps", WF_FLAG_INT, &o.steps, "S", "measured steps per configuration (20)"},
		{"warmup", WF_FLAG_INT, &o.warmup, "W", "steps before measuring (3)"},
		{"batch", WF_FLAG_INT, &o.batch, "B",
		 "images per worker per step, for images/s (32)"},
		{"bucket-mb", WF_FLAG_DOUBLE, &o.bucket_mb, "MB",
		 "allreduce bucket size in MiB, weft's and DDP's (25 x --scale: the real "
		 "model's bucket count)"},
		{"chunk-bytes", WF_FLAG_INT, &o.chunk_bytes, "N",
		 "parameter-server chunk size (ps.chunk_bytes' 1048576 x --scale, at least 4096: "
		 "the real model's chunk count)"},
		{"replicas", WF_FLAG_STR, &replicas, "R[,R...]",
		 "parameter-server modes: servers that keep each chunk (ps.replicas), each "
		 "count in turn (1)"},
		{"timeout", WF_FLAG_DOUBLE, &o.timeout, "S",
		 "stop a configuration that has not finished after S seconds, and fail (600)"},
		{"compression", WF_FLAG_STR, &compression, "C[,C...]",
		 "parameter-server modes: how pushes carry the gradient (ps.compression: none, "
		 "bf16, topk:F), each in turn; after a none, each other's line has step_vs_none, "
		 "its step time against it (none)"},
		{"priority", WF_FLAG_STR, &priority, "KB[,KB...]",
		 "parameter-server modes: priority by layer (ps.priority_kb: KiB of pushes in "
		 "flight per server, the first layers' chunks first; 0: off), each in turn (0)"},
		{"mtu", WF_FLAG_INT, &o.link.mtu, "BYTES",
		 "every link's MTU (1500; 9000: jumbo frames, as many training clusters run): "
		 "fewer packets for the emulation's two cores to carry"},
		{"queue-kb", WF_FLAG_INT, &o.link.queue_kb, "KIB",
		 "each link's queue, a switch port's buffer (20 ms of the rate, at least 256 "
		 "KiB); one larger than a step sends through a port never drops, as a lossless "
		 "fabric (InfiniBand, RoCE with PFC)"},
		{"gso", WF_FLAG_BOOL, &o.link.gso, NULL,
		 "let TCP's 64 KiB GSO packets through the shaped links whole (the emulation "
		 "before 2026-11-28; default: wire-sized packets)"},
		{"layer-ready", WF_FLAG_BOOL, &o.layer_ready, NULL,
		 "parameter servers: the next forward starts layer by layer, each once its chunks "
		 "landed (as P3 / ByteScheduler), instead of after the last reply"},
		{"timeline", WF_FLAG_STR, &o.timeline, "FILE",
		 "parameter servers: worker 0 writes each step's timeline to FILE (JSON lines: "
		 "per chunk its server, floats, when the backward released its push, when its "
		 "reply was waited for in chunk order, when the push went to ZeroMQ and when the "
		 "reply was read, ms from the step's start)"},
		{"python", WF_FLAG_STR, &python, "PATH",
		 "python with torch for the ddp peer (bench/peers_venv.sh prints one)"},
		{"rank-of", WF_FLAG_STR, &rank_of, "MODE", NULL},
		{0},
	};
	const wf_command_help help = {
		"weft bench cluster [--mode sync,allreduce,ddp] [--workers 8,32] [--servers 2,8] "
		"[--link 1gbit] [options]",
		"An emulated cluster on this machine: N workers and M parameter servers, each in\n"
		"its own network namespace, their links shaped by tc, compute modelled by sleeps\n"
		"(forward, then each layer's gradient released when its share of the backward\n"
		"has passed), real gradients of the model's layer sizes through weft's real\n"
		"exchanges (and PyTorch DDP as the peer). Prints one JSON line per configuration:\n"
		"median and p90 step time, images/s, the bandwidth bound and the efficiency\n"
		"(bound / measured). Needs root and iproute2; allreduce needs mpirun; ddp a\n"
		"python with torch (--python)."};
	if (argc < 2 || strcmp(argv[1], "cluster") != 0) {
		if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
			printf("usage: weft bench cluster [options] (see weft bench cluster "
			       "--help)\n");
			return 0;
		}
		return wf_errf(err, WF_EINVAL, "bench: the one benchmark is `weft bench cluster`");
	}
	int rc = wf_cli_parse(&help, flags, argc - 1, argv + 1, &pos, 0, err);
	if (rc != 0)
		goto cleanup;
	o.link_text = link;
	o.python = python;
	if (compute && sscanf(compute, "%lf/%lf", &o.fwd_ms, &o.bwd_ms) != 2) {
		rc = wf_errf(err, WF_EINVAL, "--compute-ms \"%s\": expected F/B in ms, e.g. 30/60",
			     compute);
		goto cleanup;
	}
	/* a scaled model keeps the real one's bucket and chunk counts */
	if (!o.bucket_mb)
		o.bucket_mb = 25 * o.scale;
	if (!o.chunk_bytes)
		o.chunk_bytes = WF_MAX(4096L, (long)(WF_PS_CHUNK_BYTES_JOB_DEFAULT * o.scale));
	if (o.scale <= 0 || o.scale > 1 || o.steps < 1 || o.warmup < 0 || o.batch < 1 ||
	    o.fwd_ms < 0 || o.bwd_ms < 0 || o.bucket_mb <= 0 || o.chunk_bytes < 1024 ||
	    o.timeout <= 0 || (o.link.mtu && (o.link.mtu < 576 || o.link.mtu > 65000)) ||
	    o.link.queue_kb < 0) {
		rc = wf_errf(err, WF_EINVAL,
			     "bench cluster: need 0 < --scale <= 1, --steps >= 1, --warmup >= 0, "
			     "--batch >= 1, --compute-ms >= 0, --bucket-mb > 0, --chunk-bytes >= "
			     "1024, --timeout > 0, --mtu 576..65000, --queue-kb >= 0");
		goto cleanup;
	}
	if (o.timeline && o.layer_ready) {
		rc = wf_errf(err, WF_EINVAL,
			     "--timeline waits for every reply after the backward, --layer-ready "
			     "during the next forward: give one of them");
		goto cleanup;
	}
	config comps[4] = {0};
	int ncomp = 0;
	if ((rc = parse_compressions(compression, comps, &ncomp, err)) != 0)
		goto cleanup;
	if ((link && (rc = wf_netem_parse_rate(link, &o.link.rate_bps, err)) != 0) ||
	    (delay && (rc = wf_netem_parse_delay(delay, &o.link.delay_ms, err)) != 0))
		goto cleanup;
	layout l;
	if ((rc = layout_build(&l, o.model, o.scale, err)) != 0)
		goto cleanup;
	ssize_t n = readlink("/proc/self/exe", o.exe, sizeof(o.exe) - 1);
	o.exe[n > 0 ? n : 0] = '\0';
	snprintf(o.src, sizeof(o.src), "%s", WEFT_BENCH_DIR);
	if (rank_of) { /* a rank started by mpirun */
		rc = allreduce_work(&o, &l, err);
		layout_free(&l);
		goto cleanup;
	}
	int nw[16], ns[16], nr[8], npk[4];
	int cw = parse_ints(workers, nw, 16), cs = parse_ints(servers, ns, 16),
	    cr = parse_ints(replicas, nr, 8), cp = parse_ints_in(priority, npk, 4, 0, 1048576);
	if (cp < 1) {
		rc = wf_errf(err, WF_EINVAL,
			     "--priority \"%s\": up to 4 comma-separated KiB counts, 0 (off) to "
			     "1048576",
			     priority);
		layout_free(&l);
		goto cleanup;
	}
	if (cr < 1) {
		rc = wf_errf(err, WF_EINVAL, "--replicas \"%s\": comma-separated counts >= 1",
			     replicas);
		layout_free(&l);
		goto cleanup;
	}
	if (cw < 1 || cs < 1 || (cs > 1 && cs != cw)) {
		rc = wf_errf(
			err, WF_EINVAL,
			"--workers \"%s\" / --servers \"%s\": comma-separated counts in 1..%d, "
			"as many servers as workers entries (or one)",
			workers, servers, MAX_WORKERS);
		layout_free(&l);
		goto cleanup;
	}
	fprintf(stderr,
		"bench cluster: %s x %g: %zu floats (%.1f MB) per gradient, %d release "
		"points\n",
		o.model, o.scale, l.nparams, l.nparams * 4 / 1e6, l.nrel);
	char list[256];
	snprintf(list, sizeof(list), "%s", modes);
	char *save = NULL;
	for (char *m = strtok_r(list, ",", &save); rc == 0 && m; m = strtok_r(NULL, ",", &save)) {
		wf_ps_mode pm;
		int k;
		if (strcmp(m, "allreduce") && strcmp(m, "ddp") && parse_mode(m, &pm, &k) != 0) {
			rc = wf_errf(err, WF_EINVAL,
				     "--mode \"%s\": expected sync, async, ssp:K, allreduce or ddp",
				     m);
			break;
		}
		if (!strcmp(m, "ddp") && !python) {
			rc = wf_errf(err, WF_EINVAL,
				     "--mode ddp needs --python (a python with torch: "
				     "bench/peers_venv.sh)");
			break;
		}
		int ps = strcmp(m, "allreduce") && strcmp(m, "ddp");
		for (int i = 0; rc == 0 && i < cw; i++) {
			/* parameter servers: each replica count, each priority, each
			 * compression */
			double none_ms = 0;
			for (int r = 0; rc == 0 && r < (ps ? cr * cp * ncomp : 1); r++) {
				config cf = comps[r % ncomp];
				cf.workers = nw[i];
				cf.servers = ns[cs > 1 ? i : 0];
				cf.replicas = nr[r / (ncomp * cp)];
				cf.priority_kb = npk[(r / ncomp) % cp];
				if (r % ncomp == 0)
					none_ms = 0; /* a new replica count or priority */
				int none = cf.compression == WF_PS_COMPRESSION_NONE;
				cf.none_ms = none ? 0 : none_ms;
				snprintf(cf.mode, sizeof(cf.mode), "%s", m);
				if (cf.servers > MAX_SERVERS)
					rc = wf_errf(err, WF_EINVAL, "--servers: at most %d",
						     MAX_SERVERS);
				else
					rc = run_config(&o, &cf, &l, none ? &none_ms : NULL, err);
			}
		}
	}
	layout_free(&l);
cleanup:
	wf_cli_list_free(&pos);
	return rc;
}
