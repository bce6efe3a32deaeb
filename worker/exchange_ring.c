/* exchange_ring.c: elastic allreduce over a TCP ring (see exchange_ring.h).
 *
 * A step: a communication thread sums the gradient over the ring in
 * buckets of strategy.bucket_mb as backward finishes them (grad_ready);
 * step() hands it the rest and waits, then sums, on the training thread, a
 * small vector: the batch-norm statistics and three counts, the ranks that
 * ask to stop the job (the chief's SIGINT/SIGTERM), to leave it (another
 * worker's SIGTERM) and that heard from the service that someone waits to
 * join. Every rank thus learns the same counts after the same step. The
 * optimizer is applied with grad_scale 1 / workers (elastic_lr fixed: the
 * mean) or 1 / slots (linear: the linear scaling rule; elastic_batch
 * global, where the workers present trained all the slots' micro-batches
 * between them: their mean), then the data position moves on by one
 * global batch, then the step is committed (every
 * commit_every steps, and always before a planned change).
 *
 * On a device (a GPU backend) the ring sums a host copy of the gradient:
 * grad_ready copies each finished range down before handing it over, the
 * sum goes back up before the optimizer, and broadcasts pass through that
 * host buffer (idle between steps).
 *
 * The committed state is a host copy of the parameters, statistics, slots,
 * step and data position. A ring call that fails (a peer died: its
 * connections closed; or it went silent for strategy.stall_timeout) breaks
 * the ring, which closes this rank's sockets too, so every rank learns of
 * it within one hop. Each survivor restores its committed state, asks the
 * service for the next generation, connects the new ring and takes the
 * root's state by broadcast (the root has the newest committed step: a rank
 * that completed the failed step before the others noticed is ahead by
 * one, and everyone takes its state); step() then returns
 * WF_EXCHANGE_MOVED with the step to run next, and the trainer reopens its
 * reader at the new rank, world size and data position. A join or leave
 * does the same after a successful step, with nothing to restore. */
#include "worker/exchange_ring.h"

#include "common/atomicfile.h"
#include "common/events.h"
#include "common/log.h"
#include "common/util.h"
#include "kernels/ops.h"
#include "worker/membership.h"
#include "worker/netio.h"
#include "worker/ring.h"

#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { CTL_STOP, CTL_LEAVE, CTL_JOIN, CTL_N }; /* the counts after the statistics */

/* The communication thread: sums the gradient's buckets over the ring as
 * backward finishes them. The training thread hands it a step (grad_ready,
 * step) and waits for it in step(); between steps the thread is idle and
 * the training thread alone uses the ring (statistics, re-formation). */
typedef struct comm {
	pthread_t t;
	int started;
	pthread_mutex_t mu;
	pthread_cond_t wake; /* the training thread: more is ready, or quit */
	pthread_cond_t idle; /* the thread: a bucket done, or failed */
	float *grads;
	size_t n;      /* floats */
	size_t bucket; /* floats a bucket */
	int nbuckets;
	size_t ready; /* [0, ready) is final this step */
	int open;     /* a step's buckets are handed over */
	int next;     /* buckets summed this step */
	int busy;     /* summing a bucket now */
	int failed;   /* a bucket's sum failed: err says why */
	int quit;
	long step;     /* 0-based, for messages */
	wf_ring *ring; /* this step's ring (set when the step opens) */
	wf_err err;
} comm;

typedef struct ring_ctx {
	wf_exchange_ring_cfg cfg;
	char service[WF_EL_TEXT], listen[WF_EL_TEXT];
	uint8_t key[32];
	wf_exec *ex;
	wf_backend *be;
	const wf_model *m;
	wf_optim_cfg optim;
	size_t n, nstate;
	int nslots;
	float *slot_m, *slot_v; /* backend memory [n] */
	int host;		/* the backend's memory is host memory */
	float *hg;		/* on a device: the gradient's host copy [max(n, nstate)] */
	size_t staged;		/* [0, staged) of this step's gradient is in hg */
	int stage_rc;		/* a copy to hg failed: stage_err says why */
	wf_err stage_err;
	float *ctl; /* [nstate + CTL_N] */
	int lfd;    /* this worker's ring listens here */
	wf_member *mem;
	wf_ring *ring;
	uint64_t gen;
	int size;	    /* workers of the generation */
	int *slot_of;	    /* [size] slot of each rank */
	long epoch, offset; /* data position of the next step */
	/* the committed state */
	float *c_params, *c_state, *c_m, *c_v;
	long c_step, c_epoch, c_offset;
	int stop_local;	  /* this worker was asked to stop (latched) */
	int stop_agreed;  /* some rank's chief asked: all stop after this step */
	int leaving;	  /* this worker leaves after this step */
	int left;	  /* it has left */
	double lost_at;	  /* wf_now() the service was lost (0: connected) */
	double redial_at; /* the next try to reach it again */
	long last_step;	  /* the step run last (for finish) */
	comm cm;
} ring_ctx;

/* ---- the communication thread ---------------------------------------------- */

static void *comm_main(void *arg)
{
	comm *m = arg;
	sigset_t all;
	sigfillset(&all); /* signals are the training thread's */
	pthread_sigmask(SIG_BLOCK, &all, NULL);
	pthread_mutex_lock(&m->mu);
	for (;;) {
		if (m->quit)
			break;
		size_t lo = (size_t)m->next * m->bucket;
		size_t hi = lo + m->bucket < m->n ? lo + m->bucket : m->n;
		if (!m->open || m->failed || m->next >= m->nbuckets || hi > m->ready) {
			pthread_cond_wait(&m->wake, &m->mu);
			continue;
		}
		m->busy = 1;
		char what[96];
		snprintf(what, sizeof(what), "bucket %d of %d of the gradient of step %ld",
			 m->next + 1, m->nbuckets, m->step + 1);
		pthread_mutex_unlock(&m->mu);
		wf_err e = {0};
		int rc = wf_ring_allreduce(m->ring, m->grads + lo, hi - lo, what, &e);
		pthread_mutex_lock(&m->mu);
		m->busy = 0;
		if (rc != 0) {
			m->failed = rc;
			m->err = e;
		} else {
			m->next++;
		}
		pthread_cond_broadcast(&m->idle);
	}
	pthread_mutex_unlock(&m->mu);
	return NULL;
}

/* Hand [0, done) of step `step`'s gradient over (opens the step). */
static void comm_hand(ring_ctx *c, long step, size_t done)
{
	comm *m = &c->cm;
	pthread_mutex_lock(&m->mu);
	if (!m->open) {
		m->open = 1;
		m->next = 0;
		m->failed = 0;
		m->ready = 0;
		m->step = step;
		m->ring = c->ring;
	}
	if (done > m->ready)
		m->ready = done;
	pthread_cond_signal(&m->wake);
	pthread_mutex_unlock(&m->mu);
}

/* The whole gradient is final: wait until every bucket is summed or one
 * failed (0 or the failure, err filled); the step is closed after. */
static int comm_finish(ring_ctx *c, long step, wf_err *err)
{
	comm *m = &c->cm;
	comm_hand(c, step, m->n);
	pthread_mutex_lock(&m->mu);
	while (m->busy || (!m->failed && m->next < m->nbuckets))
		pthread_cond_wait(&m->idle, &m->mu);
	int rc = m->failed;
	if (rc)
		*err = m->err;
	m->open = 0;
	pthread_mutex_unlock(&m->mu);
	return rc;
}

/* End this step's sum without the rest: this worker stops, and its peers
 * see the ring break before they complete the step. */
static void comm_abort(ring_ctx *c, int rc)
{
	comm *m = &c->cm;
	pthread_mutex_lock(&m->mu);
	m->failed = rc;
	while (m->busy)
		pthread_cond_wait(&m->idle, &m->mu);
	m->open = 0;
	pthread_mutex_unlock(&m->mu);
}

static int comm_start(ring_ctx *c, float *grads, size_t n, double bucket_mb)
{
	comm *m = &c->cm;
	double floats = bucket_mb * 1024.0 * 1024.0 / sizeof(float);
	m->grads = grads;
	m->n = n;
	m->bucket = floats < 1024 ? 1024 : (size_t)floats;
	m->nbuckets = n ? (int)((n + m->bucket - 1) / m->bucket) : 0;
	pthread_mutex_init(&m->mu, NULL);
	pthread_cond_init(&m->wake, NULL);
	pthread_cond_init(&m->idle, NULL);
	if (pthread_create(&m->t, NULL, comm_main, m) != 0)
		return -1;
	m->started = 1;
	return 0;
}

static void comm_stop(comm *m)
{
	if (!m->started)
		return;
	pthread_mutex_lock(&m->mu);
	m->quit = 1;
	pthread_cond_signal(&m->wake);
	pthread_mutex_unlock(&m->mu);
	pthread_join(m->t, NULL);
	pthread_mutex_destroy(&m->mu);
	pthread_cond_destroy(&m->wake);
	pthread_cond_destroy(&m->idle);
	m->started = 0;
}

/* ---- backend memory and the host ------------------------------------------ */

/* n floats of backend memory to the host (a memcpy on host memory). */
static int down(ring_ctx *c, float *host, const float *mem, size_t n, const char *what, wf_err *err)
{
	if (n && wf_op_to_host(c->be, host, mem, n * sizeof(float)) != 0)
		return wf_errf(err, WF_EINTERNAL, "ring: copying %s to the host: %s", what,
			       c->be->err.msg);
	return 0;
}

static int up(ring_ctx *c, float *mem, const float *host, size_t n, const char *what, wf_err *err)
{
	if (n && wf_op_to_device(c->be, mem, host, n * sizeof(float)) != 0)
		return wf_errf(err, WF_EINTERNAL, "ring: copying %s to the device: %s", what,
			       c->be->err.msg);
	return 0;
}

/* Broadcast n floats of backend memory from the root (on a device through
 * the host copy of the gradient, idle between steps). */
static int bcast_floats(ring_ctx *c, float *mem, size_t n, int root, int me_root, const char *what,
			wf_err *err)
{
	if (c->host)
		return wf_ring_bcast(c->ring, mem, n * sizeof(float), root, what, err);
	int rc = me_root ? down(c, c->hg, mem, n, what, err) : 0;
	if (rc == 0)
		rc = wf_ring_bcast(c->ring, c->hg, n * sizeof(float), root, what, err);
	if (rc == 0 && !me_root)
		rc = up(c, mem, c->hg, n, what, err);
	return rc;
}

/* On a device: copy [staged, done) of the gradient down to hg (the first
 * failure is kept for step). Returns 0 or that failure. */
static int stage(ring_ctx *c, size_t done)
{
	if (c->host || c->stage_rc || done <= c->staged)
		return c->stage_rc;
	c->stage_rc = down(c, c->hg + c->staged, wf_exec_grads(c->ex) + c->staged, done - c->staged,
			   "the gradient", &c->stage_err);
	if (c->stage_rc == 0)
		c->staged = done;
	return c->stage_rc;
}

/* ---- committed state ------------------------------------------------------- */

static int commit(ring_ctx *c, long step, wf_err *err)
{
	int rc = down(c, c->c_params, wf_exec_params(c->ex), c->n, "the parameters", err);
	if (rc == 0)
		rc = down(c, c->c_state, wf_exec_state(c->ex), c->nstate,
			  "the batch-norm statistics", err);
	if (rc == 0 && c->slot_m)
		rc = down(c, c->c_m, c->slot_m, c->n, "the optimizer's first slot", err);
	if (rc == 0 && c->slot_v)
		rc = down(c, c->c_v, c->slot_v, c->n, "the optimizer's second slot", err);
	if (rc != 0)
		return rc;
	c->c_step = step;
	c->c_epoch = c->epoch;
	c->c_offset = c->offset;
	return 0;
}

static int restore(ring_ctx *c, wf_err *err)
{
	int rc = up(c, wf_exec_params_begin(c->ex), c->c_params, c->n, "the parameters", err);
	if (wf_exec_params_end(c->ex) != 0 && rc == 0)
		rc = wf_errf(err, WF_EINTERNAL, "restoring the committed parameters: %s",
			     wf_exec_error(c->ex));
	if (rc == 0)
		rc = up(c, wf_exec_state(c->ex), c->c_state, c->nstate, "the batch-norm statistics",
			err);
	if (rc == 0 && c->slot_m)
		rc = up(c, c->slot_m, c->c_m, c->n, "the optimizer's first slot", err);
	if (rc == 0 && c->slot_v)
		rc = up(c, c->slot_v, c->c_v, c->n, "the optimizer's second slot", err);
	if (rc != 0)
		return rc;
	c->epoch = c->c_epoch;
	c->offset = c->c_offset;
	return 0;
}

/* The workers' batches one step reads: those present, or with
 * elastic_batch global always the cluster's. */
static int batch_workers(const ring_ctx *c)
{
	return c->cfg.global_batch ? c->cfg.slots : c->size;
}

/* The data position's global batch for `workers`: past the end of the
 * epoch's order (what is left is less than a batch), the next epoch. */
static void normalize(long *epoch, long *offset, int workers, long samples, long per)
{
	long global = per * workers;
	if (samples > 0 && *offset + global > samples) {
		*epoch += 1;
		*offset = 0;
	}
}

/* ---- forming a generation -------------------------------------------------- */

/* What the root sends before its state. */
typedef struct state_header {
	int64_t step, epoch, offset;
	int64_t nparams, nstate, nslots;
	uint64_t optim_hash;
} state_header;

static int bcast_state(ring_ctx *c, int root, int me_root, long *step, wf_err *err)
{
	state_header h = {.step = c->c_step,
			  .epoch = c->epoch,
			  .offset = c->offset,
			  .nparams = (int64_t)c->n,
			  .nstate = (int64_t)c->nstate,
			  .nslots = c->nslots,
			  .optim_hash = wf_optim_cfg_hash(&c->optim)};
	state_header mine = h;
	int rc = wf_ring_bcast(c->ring, &h, sizeof(h), root, "the state header", err);
	if (rc != 0)
		return rc;
	if (h.nparams != mine.nparams || h.nstate != mine.nstate || h.nslots != mine.nslots ||
	    h.optim_hash != mine.optim_hash)
		return wf_errf(err, WF_EINVAL,
			       "ring: the root's model has %lld parameters, %lld statistics and "
			       "optimizer hash %016llx, mine %lld, %lld and %016llx: every worker "
			       "must run the same config",
			       (long long)h.nparams, (long long)h.nstate,
			       (unsigned long long)h.optim_hash, (long long)mine.nparams,
			       (long long)mine.nstate, (unsigned long long)mine.optim_hash);
	rc = bcast_floats(c, wf_exec_params_begin(c->ex), c->n, root, me_root, "the parameters",
			  err);
	if (wf_exec_params_end(c->ex) != 0 && rc == 0)
		rc = wf_errf(err, WF_EINTERNAL, "taking the parameters: %s", wf_exec_error(c->ex));
	if (rc == 0 && c->nstate)
		rc = bcast_floats(c, wf_exec_state(c->ex), c->nstate, root, me_root,
				  "the batch-norm statistics", err);
	if (rc == 0 && c->slot_m)
		rc = bcast_floats(c, c->slot_m, c->n, root, me_root, "the optimizer's first slot",
				  err);
	if (rc == 0 && c->slot_v)
		rc = bcast_floats(c, c->slot_v, c->n, root, me_root, "the optimizer's second slot",
				  err);
	if (rc != 0)
		return rc;
	c->epoch = (long)h.epoch;
	c->offset = (long)h.offset;
	*step = (long)h.step;
	return commit(c, *step, err);
}

static int slot_listed(const int *slots, int n, int slot)
{
	for (int i = 0; i < n; i++)
		if (slots[i] == slot)
			return 1;
	return 0;
}

/* Events of the change: each worker's ring_reformed; the new rank 0, if it
 * was in the last generation, says who joined and who left. */
static void reformed_events(ring_ctx *c, const wf_el_msg *a, const int *old, int nold,
			    const char *reason, long step)
{
	int was_member = nold > 0 && slot_listed(old, nold, c->cfg.slot);
	if (a->rank == 0 && was_member) {
		for (int i = 0; i < a->size; i++)
			if (!slot_listed(old, nold, a->members[i].slot))
				wf_event("worker_joined",
					 json_pack("{s:i, s:i, s:I}", "worker", a->members[i].slot,
						   "live", a->size, "step", (json_int_t)step));
		for (int i = 0; i < nold; i++) {
			int still = 0;
			for (int k = 0; k < a->size; k++)
				still |= a->members[k].slot == old[i];
			if (!still)
				wf_event("worker_left",
					 json_pack("{s:i, s:i, s:I}", "worker", old[i], "live",
						   a->size, "step", (json_int_t)step));
		}
	}
	wf_event("ring_reformed",
		 json_pack("{s:I, s:i, s:i, s:i, s:I, s:s, s:I, s:I}", "generation",
			   (json_int_t)a->gen, "workers", a->size, "rank", a->rank, "slot",
			   c->cfg.slot, "restored_step", (json_int_t)step, "reason", reason,
			   "epoch", (json_int_t)c->epoch, "offset", (json_int_t)c->offset));
}

/* The service went away (its process died; Kubernetes restarts its pod):
 * say so once. Training goes on; ring_step tries to reach it again. */
static void note_lost(ring_ctx *c, const char *why)
{
	if (c->lost_at)
		return;
	c->lost_at = wf_now();
	c->redial_at = 0;
	wf_warn("%s: training goes on; joins and failures wait until it is back", why);
	wf_event("service_lost", json_pack("{s:s}", "error", why));
}

static void note_back(ring_ctx *c)
{
	if (!c->lost_at)
		return;
	double after = wf_now() - c->lost_at;
	wf_info("membership: connected to the service at %s again after %.1f s (generation "
		"%llu)",
		c->service, after, (unsigned long long)c->gen);
	wf_event("service_back",
		 json_pack("{s:f, s:I}", "after", after, "generation", (json_int_t)c->gen));
	c->lost_at = 0;
}

/* Ask the service for a place in the next generation; a service that is
 * gone is waited for (strategy.connect_timeout) and asked again. */
static int ready(ring_ctx *c, double wait, wf_el_msg *a, wf_err *err)
{
	double limit = c->cfg.connect_timeout > 0 ? c->cfg.connect_timeout : 300;
	double give_up = wf_now() + limit;
	for (;;) {
		if (!wf_member_connected(c->mem)) {
			note_lost(c, "membership: the service is gone");
			int rc = wf_member_reconnect(c->mem, c->gen, WF_MAX(give_up - wf_now(), 1),
						     err);
			if (rc != 0)
				return rc;
			note_back(c);
		}
		int rc = wf_member_ready(c->mem, c->gen, c->c_step, wait, a, err);
		if (rc != WF_ETRANSIENT || wf_member_connected(c->mem) || wf_now() > give_up)
			return rc;
		note_lost(c, err->msg);
		wf_err_clear(err);
	}
}

/* Ask the service for the next generation, connect its ring, take the
 * root's state. Tries again while a new ring fails to form (a peer died
 * meanwhile). *step: the step to run next. Returns 0, 1 when the job is
 * over already (*step its last step), or an error. */
static int reform(wf_exchange *x, const char *reason, long *step, wf_err *err)
{
	ring_ctx *c = x->ctx;
	int nold = c->slot_of ? c->size : 0, *old = c->slot_of;
	c->slot_of = NULL;
	c->size = 0;
	double wait =
		c->cfg.elastic_timeout > 0 ? c->cfg.elastic_timeout + c->cfg.stall_timeout + 60 : 0;
	int rc;
	for (int attempt = 1;; attempt++) {
		wf_ring_free(c->ring);
		c->ring = NULL;
		wf_el_msg a;
		rc = ready(c, wait, &a, err);
		if (rc == 1) {
			*step = (long)a.step;
			wf_el_msg_free(&a);
			break;
		}
		if (rc != 0)
			break;
		c->gen = a.gen;
		c->size = a.size;
		free(c->slot_of);
		c->slot_of = calloc((size_t)a.size, sizeof(int));
		if (!c->slot_of) {
			wf_el_msg_free(&a);
			rc = wf_errf(err, WF_ENOMEM, "out of memory");
			break;
		}
		for (int i = 0; i < a.size; i++)
			c->slot_of[i] = a.members[i].slot;
		int right = (a.rank + 1) % a.size, left = (a.rank + a.size - 1) % a.size;
		char rname[WF_EL_TEXT + 64], lname[WF_EL_TEXT + 64];
		snprintf(rname, sizeof(rname), "rank %d (worker slot %d at %s)", right,
			 a.members[right].slot, a.members[right].addr);
		snprintf(lname, sizeof(lname), "rank %d (worker slot %d at %s)", left,
			 a.members[left].slot, a.members[left].addr);
		wf_ring_cfg rcfg = {.rank = a.rank,
				    .size = a.size,
				    .listen_fd = c->lfd,
				    .right = a.members[right].addr,
				    .right_name = rname,
				    .left_name = lname,
				    .job = c->cfg.job,
				    .gen = a.gen,
				    .key = c->cfg.key ? c->key : NULL,
				    .timeout = c->cfg.stall_timeout};
		wf_err e = {0};
		rc = wf_ring_create(&c->ring, &rcfg, &e);
		if (rc == 0)
			rc = bcast_state(c, a.root, a.rank == a.root, step, &e);
		if (rc == 0) {
			x->rank = a.rank;
			x->workers = a.size;
			x->data_epoch = c->epoch;
			x->data_offset = c->offset;
			if (x->is_chief || a.rank == 0)
				wf_info("ring: generation %llu: %d worker%s, rank %d, "
					"from step %ld (%s)",
					(unsigned long long)a.gen, a.size, a.size == 1 ? "" : "s",
					a.rank, *step, reason);
			reformed_events(c, &a, old, nold, reason, *step);
			wf_el_msg_free(&a);
			break;
		}
		wf_el_msg_free(&a);
		if (rc != WF_ETRANSIENT) {
			*err = e;
			break;
		}
		/* a peer failed while the ring formed: back to the committed state */
		wf_warn("ring: generation %llu did not form (attempt %d): %s; asking for the "
			"next",
			(unsigned long long)c->gen, attempt, e.msg);
		if ((rc = restore(c, err)) != 0)
			break;
		reason = "failure";
	}
	free(old);
	return rc;
}

/* ---- the exchange ---------------------------------------------------------- */

static int ring_start(wf_exchange *x, const char *resume_dir, long resume_step, long *start_step,
		      wf_err *err)
{
	ring_ctx *c = x->ctx;
	*start_step = 0;
	if (c->c_m)
		memset(c->c_m, 0, c->n * sizeof(float));
	if (c->c_v)
		memset(c->c_v, 0, c->n * sizeof(float));
	long step = 0;
	c->epoch = c->offset = 0;
	if (resume_dir) {
		char path[4200];
		snprintf(path, sizeof(path), "%s/%s", resume_dir, WF_OPTIM_FILE);
		int rc = wf_optim_state_load(path, &c->optim, c->n, c->nslots, c->c_m, c->c_v,
					     &step, err);
		if (rc != 0)
			return rc;
		if (step != resume_step)
			return wf_errf(err, WF_EFORMAT,
				       "%s: holds step %ld, its directory says step %ld", path,
				       step, resume_step);
		snprintf(path, sizeof(path), "%s/%s", resume_dir, WF_RING_POSITION_FILE);
		json_error_t je;
		json_t *j = json_load_file(path, 0, &je);
		json_int_t e = 0, o = 0;
		if (!j || json_unpack(j, "{s:I, s:I}", "epoch", &e, "offset", &o) != 0 || e < 0 ||
		    o < 0) {
			int bw = c->cfg.global_batch ? c->cfg.slots : WF_MAX(x->workers, 1);
			long per = x->worker_batch * bw;
			long spe = per > 0 && x->samples >= per ? x->samples / per : 1;
			e = step / spe;
			o = (step % spe) * per;
			wf_warn("%s: no data position (%s): taking epoch %lld, sample %lld, as a "
				"run of %d worker%s would",
				path, j ? "bad fields" : je.text, (long long)e, (long long)o, bw,
				bw == 1 ? "" : "s");
		}
		json_decref(j);
		c->epoch = (long)e;
		c->offset = (long)o;
	}
	/* the slots (zero, or the checkpoint's) go up from the committed copy */
	int rc = 0;
	if (c->slot_m)
		rc = up(c, c->slot_m, c->c_m, c->n, "the optimizer's first slot", err);
	if (rc == 0 && c->slot_v)
		rc = up(c, c->slot_v, c->c_v, c->n, "the optimizer's second slot", err);
	if (rc != 0 || (rc = commit(c, step, err)) != 0)
		return rc;
	wf_member_cfg mc = {.service = c->service,
			    .slot = c->cfg.slot,
			    .addr = c->listen,
			    .job = c->cfg.job,
			    .key = c->cfg.key ? c->key : NULL,
			    .timeout = c->cfg.connect_timeout};
	rc = wf_member_connect(&c->mem, &mc, err);
	if (rc != 0)
		return rc;
	rc = reform(x, "start", start_step, err);
	if (rc == 1) {
		wf_info("ring: the job finished at step %ld before this worker joined",
			*start_step);
		c->left = 1;
		x->data_epoch = c->epoch;
		x->data_offset = c->offset;
		return 0;
	}
	c->last_step = *start_step;
	return rc;
}

static int ring_step(wf_exchange *x, long step, long *to, wf_err *err)
{
	ring_ctx *c = x->ctx;
	wf_err e = {0};
	int join = 0;
	if (c->lost_at && wf_now() >= c->redial_at) {
		/* one short try a second: a refused connection costs nothing, an
		 * unreachable address at most a quarter of a second */
		if (wf_member_reconnect(c->mem, c->gen, 0.25, &e) == 0)
			note_back(c);
		else if (e.code == WF_EINVAL) /* it answered, and refused */
			wf_warn("%s", e.msg);
		c->redial_at = wf_now() + 1.0;
		wf_err_clear(&e);
	}
	if (!c->lost_at) {
		int got = wf_member_poll_notice(c->mem, c->gen, &e);
		if (got < 0 && e.code == WF_EINVAL) { /* the service failed the job */
			*err = e;
			return e.code;
		}
		if (got < 0)
			note_lost(c, e.msg);
		join = got > 0;
	}
	float *ctl = c->ctl;
	int rc = stage(c, c->cm.n);
	if (rc != 0)
		*err = c->stage_err;
	else
		rc = down(c, ctl, wf_exec_state(c->ex), c->nstate, "the batch-norm statistics",
			  err);
	c->staged = 0;
	c->stage_rc = 0;
	if (rc != 0) { /* a copy on the device failed: not the ring's failure; this worker ends */
		comm_abort(c, rc);
		return rc;
	}
	ctl[c->nstate + CTL_STOP] = (float)(c->stop_local && x->is_chief);
	ctl[c->nstate + CTL_LEAVE] = (float)(c->stop_local && !x->is_chief);
	ctl[c->nstate + CTL_JOIN] = (float)join;
	char what[96];
	rc = comm_finish(c, step, &e);
	if (rc == 0) {
		snprintf(what, sizeof(what), "the statistics and flags of step %ld", step + 1);
		rc = wf_ring_allreduce(c->ring, ctl, c->nstate + CTL_N, what, &e);
	}
	if (rc != 0) {
		if (rc != WF_ETRANSIENT) {
			*err = e;
			return rc;
		}
		wf_warn("%s: restoring step %ld and forming the ring again", e.msg, c->c_step);
		if ((rc = restore(c, err)) != 0)
			return rc;
		rc = reform(x, "failure", to, err);
		if (rc == 0 || rc == 1)
			c->last_step = *to;
		if (rc == 1)
			return wf_errf(err, WF_EINVAL,
				       "ring: the job finished at step %ld while this worker "
				       "recovered from a failure",
				       *to);
		return rc != 0 ? rc : WF_EXCHANGE_MOVED;
	}
	float inv = 1.0f / (float)c->size;
	for (size_t i = 0; i < c->nstate; i++)
		ctl[i] *= inv;
	rc = up(c, wf_exec_state(c->ex), ctl, c->nstate, "the batch-norm statistics", err);
	if (rc == 0 && !c->host)
		rc = up(c, wf_exec_grads(c->ex), c->hg, c->n, "the summed gradient", err);
	if (rc != 0)
		return rc;
	float scale = c->cfg.linear_lr || c->cfg.global_batch ? 1.0f / (float)c->cfg.slots : inv;
	rc = wf_exec_optim_step(c->ex, &c->optim, step, c->slot_m, c->slot_v, scale);
	if (rc != 0)
		return wf_errf(err, rc, "optimizer step %ld: %s", step + 1, c->be->err.msg);
	normalize(&c->epoch, &c->offset, batch_workers(c), x->samples, x->worker_batch);
	c->offset += x->worker_batch * batch_workers(c);
	c->last_step = step + 1;
	int stops = ctl[c->nstate + CTL_STOP] > 0, leaves = ctl[c->nstate + CTL_LEAVE] > 0,
	    joins = ctl[c->nstate + CTL_JOIN] > 0;
	if ((stops || leaves || joins || (step + 1) % c->cfg.commit_every == 0) &&
	    (rc = commit(c, step + 1, err)) != 0)
		return rc;
	if (stops) {
		c->stop_agreed = 1;
		return 0;
	}
	if (!leaves && !joins)
		return 0;
	if (c->stop_local && !x->is_chief) {
		c->leaving = 1; /* should_stop says so; leave() tells the service */
		return 0;
	}
	rc = reform(x, leaves ? "leave" : "join", to, err);
	if (rc == 0)
		c->last_step = *to;
	if (rc == 1)
		return 0; /* over: the trainer ends at its last step anyway */
	return rc != 0 ? rc : WF_EXCHANGE_MOVED;
}

static void ring_grad_ready(wf_exchange *x, size_t done)
{
	ring_ctx *c = x->ctx;
	if (stage(c, done) == 0)
		comm_hand(c, c->last_step, done);
}

static int ring_save(wf_exchange *x, const char *dir, long step, wf_err *err)
{
	ring_ctx *c = x->ctx;
	if (!x->is_chief)
		return 0;
	char path[4200];
	snprintf(path, sizeof(path), "%s/%s", dir, WF_OPTIM_FILE);
	float *m = c->slot_m, *v = c->slot_v;
	int rc = 0;
	if (!c->host) { /* the slots' host copies, for this save */
		m = c->slot_m ? malloc(c->n * sizeof(float)) : NULL;
		v = c->slot_v ? malloc(c->n * sizeof(float)) : NULL;
		if ((c->slot_m && !m) || (c->slot_v && !v))
			rc = wf_errf(err, WF_ENOMEM, "out of memory for the optimizer's slots");
		if (rc == 0 && m)
			rc = down(c, m, c->slot_m, c->n, "the optimizer's first slot", err);
		if (rc == 0 && v)
			rc = down(c, v, c->slot_v, c->n, "the optimizer's second slot", err);
	}
	if (rc == 0)
		rc = wf_optim_state_save(path, &c->optim, step, c->n, c->nslots, m, v, err);
	if (!c->host) {
		free(m);
		free(v);
	}
	if (rc != 0)
		return rc;
	/* where the next step reads, as the reader will see it */
	long e = c->epoch, o = c->offset;
	normalize(&e, &o, batch_workers(c), x->samples, x->worker_batch);
	char text[128];
	int n = snprintf(text, sizeof(text), "{\"epoch\": %ld, \"offset\": %ld, \"workers\": %d}\n",
			 e, o, c->size);
	snprintf(path, sizeof(path), "%s/%s", dir, WF_RING_POSITION_FILE);
	return wf_atomic_write(path, text, (size_t)n, err);
}

static int ring_finish(wf_exchange *x, long *to, wf_err *err)
{
	ring_ctx *c = x->ctx;
	(void)to;
	(void)err;
	if (!c->left && x->is_chief)
		wf_member_done(c->mem, c->last_step);
	else if (!c->left)
		wf_member_leave(c->mem);
	return 0;
}

static int ring_should_stop(wf_exchange *x, long step, int requested)
{
	ring_ctx *c = x->ctx;
	if (requested && !c->stop_local)
		wf_debug("ring: stop requested after step %ld; telling the others", step + 1);
	c->stop_local |= requested != 0;
	return c->stop_agreed || c->leaving;
}

static int ring_leave(wf_exchange *x, int *left, wf_err *err)
{
	ring_ctx *c = x->ctx;
	(void)err;
	*left = 0;
	if (c->stop_agreed || x->is_chief)
		return 0;
	if (!c->leaving && !c->left)
		return 0;
	wf_member_leave(c->mem);
	wf_ring_free(c->ring);
	c->ring = NULL;
	c->left = 1;
	*left = 1;
	wf_event("left", json_pack("{s:I}", "step", (json_int_t)c->last_step));
	return 0;
}

static void ring_free(wf_exchange *x)
{
	ring_ctx *c = x ? x->ctx : NULL;
	if (c) {
		comm_stop(&c->cm);
		wf_ring_free(c->ring);
		wf_member_free(c->mem);
		if (c->lfd >= 0)
			close(c->lfd);
		if (c->slot_m)
			wf_op_free(c->be, c->slot_m);
		if (c->slot_v)
			wf_op_free(c->be, c->slot_v);
		free(c->ctl);
		free(c->hg);
		free(c->c_params);
		free(c->c_state);
		free(c->c_m);
		free(c->c_v);
		free(c->slot_of);
		memset(c->key, 0, sizeof(c->key));
		free(c);
	}
	free(x);
}

static const wf_exchange_ops ring_ops = {
	.start = ring_start,
	.grad_ready = ring_grad_ready,
	.step = ring_step,
	.save = ring_save,
	.finish = ring_finish,
	.free = ring_free,
	.should_stop = ring_should_stop,
	.leave = ring_leave,
};

int wf_exchange_ring_create(wf_exchange **out, wf_exec *ex, const wf_model *m,
			    const wf_optim_cfg *optim, const wf_exchange_ring_cfg *cfg, wf_err *err)
{
	*out = NULL;
	wf_backend *be = wf_exec_backend(ex);
	char host[256];
	int port;
	if (!cfg->listen || wf_net_split_hostport(cfg->listen, host, sizeof(host), &port) != 0)
		return wf_errf(err, WF_EINVAL,
			       "elastic allreduce: this worker's address \"%s\" (its TF_CONFIG "
			       "task) is not host:port",
			       cfg->listen ? cfg->listen : "");
	wf_exchange *x = calloc(1, sizeof(*x));
	ring_ctx *c = calloc(1, sizeof(*c));
	if (!x || !c) {
		free(x);
		free(c);
		return wf_errf(err, WF_ENOMEM, "out of memory");
	}
	x->name = "allreduce";
	x->ops = &ring_ops;
	x->ctx = c;
	x->rank = 0;
	x->workers = 1;
	x->is_chief = cfg->is_chief;
	x->by_position = 1;
	c->cfg = *cfg;
	snprintf(c->service, sizeof(c->service), "%s", cfg->service ? cfg->service : "");
	snprintf(c->listen, sizeof(c->listen), "%s", cfg->listen);
	if (cfg->key)
		memcpy(c->key, cfg->key, sizeof(c->key));
	c->cfg.service = c->service;
	c->cfg.listen = c->listen;
	c->cfg.key = cfg->key ? c->key : NULL;
	if (c->cfg.commit_every < 1)
		c->cfg.commit_every = 1;
	if (c->cfg.slots < 1)
		c->cfg.slots = 1;
	x->batch_slots = c->cfg.global_batch ? c->cfg.slots : 0;
	c->lfd = -1;
	c->ex = ex;
	c->be = be;
	c->m = m;
	c->optim = *optim;
	c->n = m->nparams;
	c->nstate = m->nstate;
	c->nslots = wf_optim_slots(optim);
	c->size = 1;
	c->host = wf_backend_host_memory(be) && !cfg->host_copy;
	size_t bytes = (c->n ? c->n : 1) * sizeof(float);
	int rc = WF_ENOMEM;
	if ((!c->host && !(c->hg = malloc(WF_MAX(c->n, c->nstate + 1) * sizeof(float)))) ||
	    (c->nslots >= 1 && !(c->slot_m = wf_op_alloc(be, bytes))) ||
	    (c->nslots >= 2 && !(c->slot_v = wf_op_alloc(be, bytes))) ||
	    !(c->ctl = calloc(c->nstate + CTL_N, sizeof(float))) ||
	    !(c->c_params = malloc(bytes)) ||
	    !(c->c_state = malloc((c->nstate ? c->nstate : 1) * sizeof(float))) ||
	    (c->nslots >= 1 && !(c->c_m = malloc(bytes))) ||
	    (c->nslots >= 2 && !(c->c_v = malloc(bytes)))) {
		wf_errf(err, rc, "out of memory for the committed state of %zu parameters", c->n);
		goto fail;
	}
	c->lfd = wf_net_listen(port, 64, "elastic allreduce: this worker's ring", err);
	if (c->lfd < 0) {
		rc = c->lfd;
		c->lfd = -1;
		goto fail;
	}
	if (comm_start(c, c->host ? wf_exec_grads(ex) : c->hg, c->n, cfg->bucket_mb) != 0) {
		rc = wf_errf(err, WF_EINTERNAL, "elastic allreduce: cannot start its thread");
		goto fail;
	}
	*out = x;
	return 0;
fail:
	ring_free(x);
	return rc;
}
