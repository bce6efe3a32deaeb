/* exec_branch.c: the parallel branches of an inference forward run at once,
 * one layer per thread, each op on its thread alone.
 *
 * At a small batch a layer of NASNet's cells is too small to keep two
 * threads busy (oneDNN spends ~20 us per conv at 28x28x44 whatever the
 * threads), but a cell has five branches that only meet at its end. Where
 * the backend can run threads (its branches slot) and a simulated schedule
 * of the layers on those threads is clearly shorter than one after
 * another, the executor is built like this:
 *
 * 1. The layers that run, with the memory each reads and writes (its
 *    output's root; a conv with a residual added in place writes the
 *    residual's), are scheduled on the threads in layer order, every layer
 *    after the layers it must follow in the model's order (it reads what they
 *    wrote, writes what they read or wrote), with a cost estimated from its
 *    shape (list scheduling: the thread that can start it first).
 * 2. The activation memory is planned in the order of the simulated start
 *    times, and an output's memory is released only once every layer using
 *    it has ended in the simulation: another branch running at the same
 *    time never gets it.
 * 3. With the offsets known, the same scheduling runs again in that order
 *    with the hazards of the shared memory (ranges that overlap) added, and
 *    fixes each thread's list of layers and, for each layer, how far each
 *    other thread must have come before it starts.
 *
 * 4. The first forwards time each layer (alone on its thread, while the
 *    others run theirs); steps 1-3 run again with those times instead of the
 *    estimates (wf_exec_replan: a new arena). A few forwards run so, a few
 *    one layer after another (each op on all threads, memory planned in
 *    layer order), and the executor keeps the faster way.
 *
 * At run time each thread walks its list, waiting (spinning) on the other
 * threads' progress counters. Every edge goes forward in one total order
 * (step 2's) and each list is increasing in it, so the first layer not yet
 * run can always start: no deadlock. Where the runtime gives fewer threads
 * than planned, thread 0 runs the whole order. */
#include "model/exec_priv.h"
#include "model/model_priv.h"
#include "kernels/ops.h"

#include "common/util.h"

#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define BR_MAX_THREADS 8
/* Branches pay at small batches; at larger ones each op keeps the threads
 * busy by itself. */
#define BR_MAX_BATCH  4
#define BR_MAX_LAYERS 8192
/* Used when the simulated schedule takes at most this share of the time
 * the layers take one after another. */
#define BR_MIN_GAIN 0.8
/* The trial: forwards 1 .. BR_TIMED (after the first, which builds the
 * plans) time each layer and the branches are planned again from the least
 * times; the next BR_TRIES forwards run so, the BR_TRIES after them one
 * layer after another (planned in layer order), and the executor keeps the
 * faster (median time of each: the least flatters the branches, whose
 * threads wait on each other when the machine takes one away). */
#define BR_TIMED     3
#define BR_TRIES     5
#define T_BRANCHES   (1 + BR_TIMED)	     /* first forward of the branches' tries */
#define T_SEQUENTIAL (T_BRANCHES + BR_TRIES) /* ... of one after another */
#define T_DONE	     (T_SEQUENTIAL + BR_TRIES)

struct wf_branches {
	int nt;	    /* threads */
	int nrun;   /* layers that run */
	int *layer; /* [nrun] layers in the total order */
	int *tlist; /* nodes (positions in layer[]) of each thread: tlist + toff[t] */
	int toff[BR_MAX_THREADS + 1];
	int *need;	/* [nrun * nt] progress of thread u node k waits for */
	int *thr, *pos; /* [nrun] a node's thread and place in its list */
	int *wr, *roff; /* [nrun] root written; reads rd[roff[k] .. roff[k+1]) */
	int *rd;
	double *cost; /* [nrun] estimated microseconds, one thread */
	double *meas; /* [nrun] least seconds measured over the timed forwards */
	int timing;   /* this forward times each layer */
	double *start, *end;
	/* run time */
	struct {
		int v;
		char pad[64 - sizeof(int)];
	} prog[BR_MAX_THREADS]; /* 64 bytes apart: each on its own cache line */
	int abort, fail_rc, fail_layer;
	wf_exec *ex;
	int n;
};

int wf_exec_branch_threads(const wf_exec *ex)
{
	return ex->br ? ex->br->nt : 1;
}

int wf_exec_tuning(const wf_exec *ex)
{
	return ex->trial >= 0 || ex->tile_trial >= 0;
}

void wf_branches_free(wf_branches *br)
{
	if (!br)
		return;
	free(br->layer);
	free(br->tlist);
	free(br->need);
	free(br->thr);
	free(br->pos);
	free(br->wr);
	free(br->roff);
	free(br->rd);
	free(br->cost);
	free(br->start);
	free(br->end);
	free(br->meas);
	free(br);
}

/* Microseconds of layer i on one thread, roughly: a per-op cost plus its
 * multiply-adds or bytes at rates of this class of CPU. Only the balance
 * between branches depends on it. */
static double est_cost(const wf_exec *ex, int i)
{
	const wf_model *m = ex->m;
	const wf_layer *l = &m->layers[i];
	double B = ex->max_batch, out = B * (double)wf_layer_size(l);
	if (l->type == WF_LAYER_CONV2D || l->type == WF_LAYER_DENSE) {
		const wf_layer *x = &m->layers[l->inputs[0]];
		double in = l->type == WF_LAYER_DENSE ? (double)wf_layer_size(x) : (double)x->oc;
		double macs = out * in *
			      (l->type == WF_LAYER_CONV2D ? (double)l->kh * l->kw / l->groups : 1);
		double rate = l->type == WF_LAYER_CONV2D && l->groups > 1 ? 2e3
			      : ex->qx[i] > 0				  ? 60e3
									  : 20e3;
		return 15 + macs / rate;
	}
	return 8 + out * sizeof(float) / 4e3;
}

/* Do root memories a and b share bytes (ranges: by ex->own offsets, else
 * only when they are the same root)? */
static int shares(const wf_exec *ex, int a, int b, int ranges)
{
	if (a == b)
		return 1;
	if (!ranges)
		return 0;
	uintptr_t oa = (uintptr_t)ex->own[a], ob = (uintptr_t)ex->own[b];
	return oa < ob + wf_exec_out_bytes(ex, b) && ob < oa + wf_exec_out_bytes(ex, a);
}

/* Must node b (later in the order) wait for node a? */
static int hazard(const wf_branches *br, const wf_exec *ex, int a, int b, int ranges)
{
	if (shares(ex, br->wr[a], br->wr[b], ranges))
		return 1;
	for (int k = br->roff[b]; k < br->roff[b + 1]; k++)
		if (shares(ex, br->wr[a], br->rd[k], ranges))
			return 1;
	for (int k = br->roff[a]; k < br->roff[a + 1]; k++)
		if (shares(ex, br->rd[k], br->wr[b], ranges))
			return 1;
	return 0;
}

/* List scheduling of the nodes in their order on br->nt threads: each node
 * starts on the thread that can start it first (ties: the thread of the
 * hazard that ends last), after every earlier node it must wait for. Fills
 * start, end, thr, pos, and need (final: edges by memory ranges). Returns
 * the simulated time of the whole. */
static double schedule(wf_branches *br, const wf_exec *ex, int ranges)
{
	double free_at[BR_MAX_THREADS] = {0}, span = 0;
	int count[BR_MAX_THREADS] = {0}, nt = br->nt;
	for (int b = 0; b < br->nrun; b++) {
		double ready = 0;
		int near = 0;
		for (int a = 0; a < b; a++)
			if (br->end[a] > ready && hazard(br, ex, a, b, ranges))
				ready = br->end[a], near = br->thr[a];
		int t = near;
		for (int u = 0; u < nt; u++) {
			double su = WF_MAX(free_at[u], ready), st = WF_MAX(free_at[t], ready);
			if (su < st)
				t = u;
		}
		br->thr[b] = t;
		br->pos[b] = count[t]++;
		br->start[b] = WF_MAX(free_at[t], ready);
		br->end[b] = free_at[t] = br->start[b] + br->cost[b];
		span = WF_MAX(span, br->end[b]);
		if (!ranges)
			continue;
		int *need = br->need + (size_t)b * nt;
		memset(need, 0, sizeof(int) * (size_t)nt);
		for (int a = 0; a < b; a++)
			if (br->thr[a] != t && br->pos[a] + 1 > need[br->thr[a]] &&
			    hazard(br, ex, a, b, 1))
				need[br->thr[a]] = br->pos[a] + 1;
	}
	return span;
}

/* Add root r to node k's reads (once; not its own write). */
static void add_read(wf_branches *br, int k, int r)
{
	if (r == br->wr[k])
		return;
	for (int q = br->roff[k]; q < br->roff[k + 1]; q++)
		if (br->rd[q] == r)
			return;
	br->rd[br->roff[k + 1]++] = r;
}

int wf_branches_plan(wf_exec *ex, const double *us, int *seq, int *free_at)
{
	const wf_model *m = ex->m;
	int nl = m->nlayers, nt = wf_backend_caps_of(ex->be).branches;
	if (nt < 2 || ex->training || ex->max_batch > BR_MAX_BATCH)
		return 0;
	nt = WF_MIN(nt, BR_MAX_THREADS);
	int nrun = 0, nfused = 0;
	for (int i = 1; i < nl; i++)
		nrun += wf_exec_runs(ex, i);
	if (nrun < 2 || nrun > BR_MAX_LAYERS)
		return 0;
	wf_branches *br = calloc(1, sizeof(*br));
	if (!br)
		return WF_ENOMEM;
	br->nt = nt, br->nrun = nrun, br->ex = ex;
	/* each node reads its inputs' roots and those of the layers fused into it */
	int *host = malloc(sizeof(int) * (size_t)nl);
	br->layer = malloc(sizeof(int) * (size_t)nrun);
	br->tlist = malloc(sizeof(int) * (size_t)nrun);
	br->need = malloc(sizeof(int) * (size_t)nrun * (size_t)nt);
	br->thr = malloc(sizeof(int) * (size_t)nrun);
	br->pos = malloc(sizeof(int) * (size_t)nrun);
	br->wr = malloc(sizeof(int) * (size_t)nrun);
	br->roff = calloc((size_t)nrun + 1, sizeof(int));
	br->cost = malloc(sizeof(double) * (size_t)nrun);
	br->start = malloc(sizeof(double) * (size_t)nrun);
	br->end = malloc(sizeof(double) * (size_t)nrun);
	br->meas = calloc((size_t)nrun, sizeof(double));
	if (!host || !br->layer || !br->tlist || !br->need || !br->thr || !br->pos || !br->wr ||
	    !br->roff || !br->cost || !br->start || !br->end || !br->meas)
		goto nomem;
	for (int i = 0, k = 0; i < nl; i++) {
		host[i] = -1;
		if (i > 0 && wf_exec_runs(ex, i))
			br->layer[k] = i, host[i] = k++;
	}
	for (int i = 1; i < nl; i++)
		if (host[i] < 0 && ex->fuse_into[i] >= 0 && host[ex->fuse_into[i]] >= 0)
			host[i] = host[ex->fuse_into[i]], nfused++;
	br->rd = malloc(sizeof(int) * (size_t)(nrun + nfused) * WF_MAX_INPUTS);
	if (!br->rd)
		goto nomem;
	for (int k = 0; k < nrun; k++) {
		int e = br->layer[k];
		br->wr[k] = wf_exec_root(ex, e);
		br->roff[k + 1] = br->roff[k];
		for (int i = 1; i < nl; i++)
			if (host[i] == k)
				for (int q = 0; q < m->layers[i].ninputs; q++)
					add_read(br, k, wf_exec_root(ex, m->layers[i].inputs[q]));
		br->cost[k] = us ? us[e] : est_cost(ex, e);
	}
	/* 1: schedule in layer order with the model's own order constraints */
	double serial = 0, span = schedule(br, ex, 0);
	for (int k = 0; k < nrun; k++)
		serial += br->cost[k];
	if (span > BR_MIN_GAIN * serial) {
		free(host);
		wf_branches_free(br);
		return 0;
	}
	/* 2: the total order is by simulated start (stable), and memory follows it */
	int *by = br->tlist; /* scratch until step 3 */
	for (int k = 0; k < nrun; k++)
		by[k] = k;
	for (int k = 1; k < nrun; k++) /* insertion sort: nearly sorted already */
		for (int j = k; j > 0 && br->start[by[j - 1]] > br->start[by[j]]; j--) {
			int t = by[j];
			by[j] = by[j - 1], by[j - 1] = t;
		}
	/* permute the node arrays into that order */
	int *perm_i[] = {br->layer, br->wr};
	for (int a = 0; a < 2; a++) {
		for (int k = 0; k < nrun; k++)
			br->thr[k] = perm_i[a][by[k]];
		memcpy(perm_i[a], br->thr, sizeof(int) * (size_t)nrun);
	}
	double *perm_d[] = {br->cost, br->start, br->end};
	for (int a = 0; a < 3; a++) {
		double *tmp = (double *)br->need; /* nrun * nt ints >= nrun doubles (nt >= 2) */
		for (int k = 0; k < nrun; k++)
			tmp[k] = perm_d[a][by[k]];
		memcpy(perm_d[a], tmp, sizeof(double) * (size_t)nrun);
	}
	int *rd = malloc(sizeof(int) * (size_t)(br->roff[nrun] ? br->roff[nrun] : 1));
	int *roff = malloc(sizeof(int) * ((size_t)nrun + 1));
	if (!rd || !roff) {
		free(rd);
		free(roff);
		goto nomem;
	}
	roff[0] = 0;
	for (int k = 0; k < nrun; k++) {
		int o = by[k], len = br->roff[o + 1] - br->roff[o];
		memcpy(rd + roff[k], br->rd + br->roff[o], sizeof(int) * (size_t)len);
		roff[k + 1] = roff[k] + len;
	}
	free(br->rd);
	free(br->roff);
	br->rd = rd, br->roff = roff;
	/* seq: the input, the nodes in order, then the layers that own nothing */
	int at = 0;
	seq[at++] = 0;
	for (int k = 0; k < nrun; k++)
		seq[at++] = br->layer[k];
	for (int i = 1; i < nl; i++)
		if (!wf_exec_runs(ex, i))
			seq[at++] = i;
	/* a root is released at the first node after its last user that starts
	 * when every user has ended in the simulation */
	for (int j = 0; j < nl; j++)
		free_at[j] = nl + 1;
	for (int j = 0; j < nl; j++) {
		if (wf_exec_root(ex, j) != j || wf_exec_root(ex, m->output) == j)
			continue;
		int last = j == 0 ? 0 : -1; /* position in seq */
		double done = 0;
		for (int k = 0; k < nrun; k++) {
			int used = br->wr[k] == j;
			for (int q = br->roff[k]; q < br->roff[k + 1] && !used; q++)
				used = br->rd[q] == j;
			if (used)
				last = k + 1, done = WF_MAX(done, br->end[k]);
		}
		if (last < 0)
			continue; /* never written: owns no memory worth releasing */
		int p = last + 1;
		while (p <= nrun && br->start[p - 1] < done)
			p++;
		free_at[j] = p;
	}
	free(host);
	ex->br = br;
	return 0;
nomem:
	free(host);
	wf_branches_free(br);
	return WF_ENOMEM;
}

void wf_branches_schedule(wf_exec *ex)
{
	wf_branches *br = ex->br;
	schedule(br, ex, 1);
	int at = 0;
	for (int t = 0; t < br->nt; t++) {
		br->toff[t] = at;
		for (int k = 0; k < br->nrun; k++)
			if (br->thr[k] == t)
				br->tlist[at++] = k;
	}
	br->toff[br->nt] = at;
}

static void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#endif
}

static void fail(wf_branches *br, int rc, int layer)
{
	int none = 0;
	if (__atomic_compare_exchange_n(&br->fail_rc, &none, rc, 0, __ATOMIC_ACQ_REL,
					__ATOMIC_ACQUIRE))
		br->fail_layer = layer;
	__atomic_store_n(&br->abort, 1, __ATOMIC_RELEASE);
}

static void run_thread(void *arg, int t, int nt)
{
	wf_branches *br = arg;
	if (nt != br->nt) { /* fewer threads than planned: thread 0 runs the order */
		for (int k = 0; t == 0 && k < br->nrun; k++) {
			int rc = wf_exec_layer_forward(br->ex, br->layer[k], br->n);
			if (rc) {
				fail(br, rc, br->layer[k]);
				return;
			}
		}
		return;
	}
	for (int q = br->toff[t]; q < br->toff[t + 1]; q++) {
		int k = br->tlist[q];
		const int *need = br->need + (size_t)k * br->nt;
		for (int u = 0; u < br->nt; u++)
			for (unsigned spins = 0;
			     __atomic_load_n(&br->prog[u].v, __ATOMIC_ACQUIRE) < need[u]; spins++) {
				if (__atomic_load_n(&br->abort, __ATOMIC_ACQUIRE))
					return;
				if (spins < 4096)
					cpu_relax();
				else
					sched_yield();
			}
		double t0 = br->timing ? wf_now() : 0;
		int rc = wf_exec_layer_forward(br->ex, br->layer[k], br->n);
		if (rc) {
			fail(br, rc, br->layer[k]);
			return;
		}
		double dt = br->timing ? wf_now() - t0 : 0;
		if (br->timing && (br->meas[k] == 0 || dt < br->meas[k]))
			br->meas[k] = dt;
		__atomic_store_n(&br->prog[t].v, br->pos[k] + 1, __ATOMIC_RELEASE);
	}
}

int wf_branches_trial_before(wf_exec *ex)
{
	wf_branches *br = ex->br;
	switch (ex->trial) {
	case T_BRANCHES:
		if (!(ex->trial_us = calloc((size_t)ex->m->nlayers, sizeof(double))))
			return WF_ENOMEM;
		for (int k = 0; k < br->nrun; k++)
			ex->trial_us[br->layer[k]] = 1e6 * br->meas[k];
		return wf_exec_replan(ex, ex->trial_us, 1);
	case T_SEQUENTIAL: return wf_exec_replan(ex, NULL, 0);
	case T_DONE: {
		int rc = wf_median(ex->tries[0], BR_TRIES) < wf_median(ex->tries[1], BR_TRIES)
				 ? wf_exec_replan(ex, ex->trial_us, 1)
				 : 0;
		free(ex->trial_us);
		ex->trial_us = NULL;
		ex->trial = -1;
		return rc;
	}
	default: return 0;
	}
}

void wf_branches_trial_after(wf_exec *ex, double secs)
{
	int f = ex->trial++;
	if (f >= T_SEQUENTIAL)
		ex->tries[1][f - T_SEQUENTIAL] = secs;
	else if (f >= T_BRANCHES)
		ex->tries[0][f - T_BRANCHES] = secs;
}

int wf_branches_forward(wf_exec *ex, int n, int *failed)
{
	wf_branches *br = ex->br;
	for (int t = 0; t < br->nt; t++)
		br->prog[t].v = 0;
	br->abort = br->fail_rc = br->fail_layer = 0;
	br->n = n;
	br->timing = ex->trial >= 1 && ex->trial <= BR_TIMED;
	/* the first forward builds the plans for all threads (one after another
	 * runs them so; inside the branches each runs on its thread alone);
	 * profiling times one op at a time: the order, one by one */
	if (ex->trial == 0 || ex->be->prof)
		for (int k = 0; k < br->nrun && !br->fail_rc; k++) {
			int rc = wf_exec_layer_forward(ex, br->layer[k], n);
			if (rc)
				br->fail_rc = rc, br->fail_layer = br->layer[k];
		}
	else
		ex->be->ops->branches(ex->be, br->nt, run_thread, br);
	*failed = br->fail_layer;
	return br->fail_rc;
}
