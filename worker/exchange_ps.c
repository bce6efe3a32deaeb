/* exchange_ps.c: the parameter-server exchange: chunk pushes during
 * backward, one round trip per chunk per step, seeding and checkpointing by
 * the chief, and the recovery that follows a server restart. */
#include "worker/exchange_ps.h"

#include "common/events.h"
#include "common/ckptdir.h"
#include "common/log.h"
#include "common/util.h"
#include "kernels/ops.h"
#include "ps/client.h"
#include "ps/placement.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Seconds a process that may find the job over waits for a server to answer. */
#define WF_PS_JOB_OVER_WAIT 10.0

typedef struct ps_ctx {
	wf_exchange_ps_cfg cfg;
	char mode[16];
	char ckpt_dir[4096];
	wf_exec *ex;
	const wf_model *m;
	wf_backend *be;
	int host;     /* executor buffers are m->params/m->state (host backends) */
	float *grads; /* host [nparams]: the executor's, or a copy (device backends) */
	wf_ps_placement pl;
	wf_ps_client *cl;
	int state_chunk; /* chunk whose push carries the state (first on ps 0), -1 none */
	int next;	 /* next chunk to push this step */
	long step;	 /* step being computed (0-based) */
	int push_rc;	 /* first failure of a push from grad_ready */
	wf_err push_err;
	long stall_step; /* WEFT_PS_DEBUG_STALL: sleep before pushing this step (or the next)... */
	double stall_s;	 /* ...for this long (a test of stall reports) */
	long *steps;	 /* [nservers] scratch for register */
	long upe;	 /* backup workers: units per epoch (wf_exchange.units_per_epoch) */
	int job_over;	 /* the job had ended before this process started */
	int left;	 /* elastic: this worker left the job (ps_leave) */
	double ready_at; /* wf_now() when the step's values were in (slow_factor) */
	/* backup workers */
	int ref;	     /* the chunk whose replies hand out units (the last one) */
	wf_exchange_feed fd; /* what to train next */
	int ntrain;	     /* units the step being computed trains: its pushes' contributors */
	wf_ps_stats st;	     /* the last backup_stats */
	int have_st;
	/* layer by layer (x->layer_ready): grads is the exchange's own copy (the
	 * trainer zeroes the executor's while pushes may still be on their way) */
	int pending; /* the last step's replies are not all collected */
	int pend_rc; /* first failure while waiting in a forward */
	wf_err pend_err;
	char *waited;	    /* [nchunks] waited for since the step returned */
	double pushed_at;   /* wf_now() when the step's first push went out */
	double returned_at; /* wf_now() when step returned */
	double first_at;    /* when the first layer's values were in (0: not yet) */
	int left_at_first;  /* chunks still to land then */
	long pend_step;	    /* the step whose replies are pending */
} ps_ctx;

/* The servers hand out data units (backup workers, elastic membership). */
static int units_on(const ps_ctx *c)
{
	return c->cfg.backup_workers > 0 || c->cfg.min_workers > 0;
}

static void sleep_s(double s)
{
	struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
	nanosleep(&ts, NULL);
}

/* ---- pushing --------------------------------------------------------------- */

static int push_chunk(ps_ctx *c, int k, wf_err *err)
{
	const wf_ps_chunk *ch = &c->pl.chunks[k];
	if (c->waited) /* layer by layer: pushes leave from the exchange's copy */
		memcpy(c->grads + ch->offset, wf_exec_grads(c->ex) + ch->offset,
		       ch->count * sizeof(float));
	else if (!c->host &&
		 wf_op_to_host(c->be, c->grads + ch->offset, wf_exec_grads(c->ex) + ch->offset,
			       ch->count * sizeof(float)) != 0)
		return wf_errf(err, WF_EINTERNAL, "ps: copying gradients of chunk %d: %s", k,
			       c->be->err.msg);
	return wf_ps_client_push_pull_async(c->cl, k, c->grads, c->step, k == c->state_chunk, err);
}

static int collect(ps_ctx *c, wf_err *err);

static void ps_grad_ready(wf_exchange *x, size_t done)
{
	ps_ctx *c = x->ctx;
	if (c->next == 0 && c->pending && !c->push_rc) {
		/* layer by layer: the forward waited for every chunk a layer reads;
		 * collect the rest (and any failure) before pushing over them */
		c->push_rc = collect(c, &c->push_err);
		if (c->push_rc)
			return;
	}
	if (c->next == 0 && c->cfg.slow_factor > 1 && c->ready_at > 0) {
		/* a straggler: its compute so far, stretched (before any push) */
		sleep_s((c->cfg.slow_factor - 1) * (wf_now() - c->ready_at));
		c->ready_at = 0;
	}
	if (c->next == 0 && c->stall_step >= 0 && c->step >= c->stall_step && c->stall_s > 0) {
		wf_warn("WEFT_PS_DEBUG_STALL: worker %d sleeps %.1f s before pushing step %ld",
			x->rank, c->stall_s, c->step);
		sleep_s(c->stall_s);
		c->stall_s = 0; /* once */
	}
	if (c->next == 0) {
		c->pushed_at = wf_now();
		/* the sum of ntrain units' mean gradients: the servers' mean is per unit */
		wf_ps_client_set_contributors(c->cl, c->ntrain);
	}
	while (!c->push_rc && c->next < c->pl.nchunks) {
		const wf_ps_chunk *ch = &c->pl.chunks[c->next];
		if (ch->offset + ch->count > done)
			break;
		c->push_rc = push_chunk(c, c->next, &c->push_err);
		c->next++;
	}
}

/* ---- layer by layer --------------------------------------------------------- */

/* Wait for every outstanding reply of the last step (those the forward did
 * not wait for); the first failure, kept or new. */
static int collect(ps_ctx *c, wf_err *err)
{
	if (!c->pending)
		return 0;
	int rc = c->pend_rc;
	if (rc)
		*err = c->pend_err;
	int wrc = wf_ps_client_wait_all(c->cl, rc ? NULL : err);
	if (!rc)
		rc = wrc;
	if (!rc) {
		/* when the forward's first layer ran, against when the last reply
		 * landed (a chunk the forward did not wait for lands unobserved) */
		double last = 0, landed;
		for (int k = 0; k < c->pl.nchunks; k++)
			if (wf_ps_client_chunk_times(c->cl, k, NULL, &landed) == 0)
				last = WF_MAX(last, landed);
		wf_event("layer_ready",
			 json_pack("{s:I, s:f, s:f, s:i, s:i}", "step", (json_int_t)c->pend_step,
				   "first_layer_ms",
				   c->first_at > 0 ? (c->first_at - c->returned_at) * 1e3 : -1.0,
				   "last_landed_ms", (last - c->returned_at) * 1e3, "left_at_first",
				   c->first_at > 0 ? c->left_at_first : -1, "chunks",
				   c->pl.nchunks));
	}
	c->pending = 0;
	c->pend_rc = 0;
	return rc;
}

static void ps_layer_wait(wf_exchange *x, size_t lo, size_t hi, int state)
{
	ps_ctx *c = x->ctx;
	if (!c->pending || c->pend_rc)
		return;
	int n = c->pl.nchunks, a = 0, b = n;
	/* the first chunk ending past lo (chunks ascend by offset) */
	while (a < b) {
		int mid = (a + b) / 2;
		if (c->pl.chunks[mid].offset + c->pl.chunks[mid].count > lo)
			b = mid;
		else
			a = mid + 1;
	}
	for (int k = a; k < n && c->pl.chunks[k].offset < hi && !c->pend_rc; k++) {
		if (c->waited[k])
			continue;
		c->pend_rc = wf_ps_client_wait_chunk(c->cl, k, &c->pend_err);
		c->waited[k] = 1;
	}
	if (state && c->state_chunk >= 0 && !c->waited[c->state_chunk] && !c->pend_rc) {
		c->pend_rc = wf_ps_client_wait_chunk(c->cl, c->state_chunk, &c->pend_err);
		c->waited[c->state_chunk] = 1;
	}
	if (c->first_at == 0) {
		c->first_at = wf_now();
		/* chunks still on their way: not waited for and not read meanwhile */
		c->left_at_first = 0;
		for (int k = 0; k < n; k++) {
			double landed = 0;
			wf_ps_client_chunk_times(c->cl, k, NULL, &landed);
			c->left_at_first += !c->waited[k] && landed < c->pushed_at;
		}
	}
	if (c->pend_rc) /* the next step (or settle) reports it */
		wf_warn("ps: worker %d, waiting for step %ld's values: %s", x->rank, c->pend_step,
			c->pend_err.msg);
}

/* ---- joining and recovering ------------------------------------------------ */

static int feed_after_pull(wf_exchange *x, int ask, wf_err *err);

/* Pull every chunk and the state: the executor then holds the servers'
 * current model. *version gets the lowest chunk version. */
static int pull_all(ps_ctx *c, long *version, wf_err *err)
{
	/* backup workers: the pull of the last chunk also hands this worker a unit */
	uint32_t upe = units_on(c) ? (uint32_t)c->upe : 0;
	int rc = wf_ps_client_pull_aux(c->cl, -1, upe, version, err);
	if (rc == 0 && c->m->nstate)
		rc = wf_ps_client_pull_state(c->cl, err);
	if (rc == 0 && wf_exec_params_from_host(c->ex) != 0)
		rc = wf_errf(err, WF_EINTERNAL, "ps: %s", wf_exec_error(c->ex));
	return rc;
}

/* How long a worker waits for the servers (ps.connect_timeout or its default). */
static double connect_limit(const ps_ctx *c)
{
	return c->cfg.connect_timeout > 0 ? c->cfg.connect_timeout : WF_PS_CONNECT_TIMEOUT_DEFAULT;
}

/* The lowest and highest step the servers that carry the job's step
 * reported to the last register (c->steps). */
static void servers_span(ps_ctx *c, long *lo, long *hi)
{
	/* only servers that hold chunks carry the job's step: one that holds none
	 * (a small model on several servers) must never hold up a join; with
	 * replicas, register names them (WF_PS_STEP_BACKUP), as the primary of a
	 * group may be a server placement gave no chunks */
	int any = 0;
	for (int s = 0; s < c->cfg.nservers; s++) {
		if ((c->cfg.replicas < 2 && wf_ps_placement_count(&c->pl, s) == 0 &&
		     c->cfg.nservers > 1) ||
		    c->steps[s] == WF_PS_STEP_BACKUP)
			continue;
		*lo = any ? WF_MIN(*lo, c->steps[s]) : c->steps[s];
		*hi = any ? WF_MAX(*hi, c->steps[s]) : c->steps[s];
		any = 1;
	}
	if (!any)
		*lo = *hi = c->steps[0];
}

/* Register with every server; 1 when all are initialised at one step
 * (*step; async/ssp: within one step, *step the lowest), 0 when they are
 * not (yet), or an error. joining: the last call found the servers seeded
 * but at different steps; this worker waits for them without pushing, so
 * it asks not to be waited for (a server of a sync elastic job that counted
 * it in a step would hold that step, and the servers would never agree). */
static int servers_agree(ps_ctx *c, int joining, long *step, long *lo, long *hi, wf_err *err)
{
	long min;
	double limit = connect_limit(c);
	for (double until = wf_now() + limit;;) {
		int rc = wf_ps_client_register(c->cl, joining, c->steps, &min, err);
		if (rc != 0)
			return rc;
		servers_span(c, lo, hi);
		/* the job runs (a server serves a step) but some group of chunks
		 * has no server serving it yet (with replicas: its servers are
		 * still joining, for a moment): a pull would find it empty, and
		 * the chief must neither repair nor seed a running job */
		if (*lo < 0 || min >= 0)
			break;
		if (wf_now() > until)
			return wf_errf(err, WF_ETRANSIENT,
				       "ps: a part of the model had no parameter server serving it "
				       "for %.0f s (its servers are still joining?)",
				       limit);
		sleep_s(0.1);
	}
	*step = *lo;
	/* async and ssp: a chunk's version is the highest step applied + 1, so
	 * while the fastest worker is between its chunks (or died there) one
	 * server may be a step ahead of another; more than that is a restarted
	 * server */
	long slack = c->cfg.mode != WF_PS_MODE_SYNC ? 1 : 0;
	return *lo >= 0 && *hi - *lo <= slack;
}

/* Chief: bring servers that disagree back to one step. A server restarted
 * from its last checkpoint is behind: every server restores that step. With
 * no checkpoint to restore, the servers are seeded with the chief's values. */
static int chief_repair(ps_ctx *c, long lo, long hi, wf_err *err)
{
	long restored = -1;
	wf_err e = {0};
	if (lo >= 0) {
		wf_warn("ps: servers are at steps %ld..%ld (one restarted from a checkpoint?): "
			"rolling every server back to step %ld",
			lo, hi, lo);
		int rc = wf_ps_client_restore(c->cl, lo, &restored, &e);
		if (rc == 0)
			return 0;
		wf_warn("ps: restoring step %ld failed (%s)", lo, e.msg);
	}
	int rc = wf_ps_client_restore(c->cl, -1, &restored, &e);
	if (rc == 0) {
		wf_warn("ps: every server restored the newest checkpoint, step %ld", restored);
		return 0;
	}
	long at = hi >= 0 ? hi : c->step;
	wf_warn("ps: no checkpoint to restore (%s): seeding every server with the chief's "
		"values at step %ld (optimizer slots restart at zero)",
		e.msg, at);
	wf_event("seed", json_pack("{s:I}", "step", (json_int_t)at));
	if (wf_exec_params_to_host(c->ex) != 0)
		return wf_errf(err, WF_EINTERNAL, "ps: %s", wf_exec_error(c->ex));
	return wf_ps_client_init(c->cl, c->m->params, NULL, c->m->nstate ? c->m->state : NULL, at,
				 err);
}

/* After a failed step: wait until the servers agree on a step (the chief
 * makes them), pull the model of that step and return WF_EXCHANGE_MOVED
 * with *to = that step: the trainer goes on from there. */
static int resync(wf_exchange *x, const char *why, long *to, wf_err *err)
{
	ps_ctx *c = x->ctx;
	double limit = connect_limit(c);
	double deadline = wf_now() + limit;
	long step = -1, lo = -1, hi = -1, version;
	wf_warn("ps: worker %d, step %ld: %s: re-synchronising with the servers", x->rank, c->step,
		why);
	for (int tries = 0;; tries++) {
		int ok = servers_agree(c, lo >= 0, &step, &lo, &hi, err);
		if (ok < 0)
			return ok;
		if (ok)
			break;
		if (x->is_chief) {
			int rc = chief_repair(c, lo, hi, err);
			if (rc != 0)
				return rc;
			continue;
		}
		if (wf_now() > deadline)
			return wf_errf(
				err, WF_ETRANSIENT,
				"ps: servers stayed at different steps (%ld..%ld) for %.0f s: "
				"is the chief alive?",
				lo, hi, limit);
		sleep_s(tries < 10 ? 0.1 : 0.5);
	}
	int rc = pull_all(c, &version, err);
	if (rc != 0)
		return rc;
	wf_info("ps: worker %d continues at step %ld (was at %ld)", x->rank, step, c->step);
	c->step = step;
	*to = step;
	if ((rc = feed_after_pull(x, 0, err)) != 0)
		return rc;
	c->ready_at = wf_now();
	return WF_EXCHANGE_MOVED;
}

/* ---- backup workers ------------------------------------------------------- */

/* The unit the last reply of the reference chunk handed out (-1: none). */
static long handed_unit(ps_ctx *c)
{
	uint32_t aux = 0;
	wf_ps_client_chunk_reply(c->cl, c->ref, NULL, &aux);
	return aux ? (long)aux - 1 : -1;
}

/* The units the reference chunk's last reply handed out into c->fd (with
 * elastic_batch global a list of them); what the next step trains. */
static void handed_units(ps_ctx *c)
{
	const long *l = NULL;
	int n = wf_ps_client_chunk_units(c->cl, c->ref, &l);
	c->fd.unit = handed_unit(c);
	c->fd.units = NULL;
	c->fd.nunits = c->fd.unit >= 0;
	if (n > 0 && c->fd.unit >= 0 && l[0] == c->fd.unit) {
		c->fd.units = l;
		c->fd.nunits = n;
	}
	c->ntrain = WF_MAX(c->fd.nunits, 1);
}

/* After a start or a resync (pull_all handed out a unit, unless ask: the
 * chief seeded the servers rather than pulling, so it asks): the unit to train. */
static int feed_after_pull(wf_exchange *x, int ask, wf_err *err)
{
	ps_ctx *c = x->ctx;
	if (!units_on(c) || c->job_over)
		return 0;
	if (ask) {
		int rc = wf_ps_client_pull_aux(c->cl, c->ref, (uint32_t)c->upe, NULL, err);
		if (rc != 0)
			return rc;
		if (wf_exec_params_from_host(c->ex) != 0)
			return wf_errf(err, WF_EINTERNAL, "ps: %s", wf_exec_error(c->ex));
	}
	c->fd = (wf_exchange_feed){.next_step = c->step};
	handed_units(c);
	return 0;
}

/* After a step's replies: was this worker's gradient in time, what next. */
static void feed_after_step(ps_ctx *c, long step)
{
	long ref_step = step + 1, next = -1;
	int ref_stale = wf_ps_client_chunk_reply(c->cl, c->ref, &ref_step, NULL), partial = 0;
	for (int k = 0; k < c->pl.nchunks; k++) {
		long v;
		int stale = wf_ps_client_chunk_reply(c->cl, k, &v, NULL);
		partial += stale != ref_stale;
		if (next < 0 || v < next)
			next = v;
	}
	/* a late worker continues at the servers' step (the lowest of its chunks:
	 * pushing a step a chunk has not reached yet would be an error) */
	c->step = WF_MAX(step + 1, next);
	c->fd = (wf_exchange_feed){.next_step = c->step,
				   .dropped = ref_stale,
				   .partial = partial,
				   .late_by = ref_stale ? ref_step - step : 0};
	handed_units(c);
}

static int ps_feed(wf_exchange *x, wf_exchange_feed *f)
{
	ps_ctx *c = x->ctx;
	if (!units_on(c) || c->job_over)
		return 0;
	*f = c->fd;
	return 1;
}

static int ps_backup_stats(wf_exchange *x, wf_exchange_backup *out, wf_err *err)
{
	ps_ctx *c = x->ctx;
	if (!units_on(c))
		return wf_errf(err, WF_EINVAL, "ps: no backup workers");
	if (c->have_st)
		wf_ps_stats_free(&c->st);
	c->have_st = 0;
	/* the server that hands out the units now: with replicas, the group's
	 * primary (its placement server may be restarting) */
	int rc = wf_ps_client_stats(c->cl, wf_ps_client_server_of(c->cl, c->ref), &c->st, err);
	if (rc != 0)
		return rc;
	c->have_st = 1;
	*out = (wf_exchange_backup){.workers = c->st.worker_late ? c->st.nworkers : 0,
				    .late = c->st.worker_late,
				    .late_sum = c->st.worker_late_sum,
				    .late_max = c->st.worker_late_max,
				    .units_per_epoch = c->st.units_per_epoch,
				    .nepochs = c->st.nepochs,
				    .applied = c->st.units_applied,
				    .requeued = c->st.units_requeued};
	return 0;
}

/* ---- the table ------------------------------------------------------------- */

/* No server answered at start (rc): when checkpoint.dir holds the job's
 * final checkpoint, the job is over (this process was restarted after the
 * servers shut down) and there is nothing to do; else rc stands. */
static int job_over(wf_exchange *x, int rc, long *start_step, wf_err *err)
{
	ps_ctx *c = x->ctx;
	if (rc != WF_ETRANSIENT || c->cfg.done_step <= 0)
		return rc;
	wf_info("ps: worker %d: no parameter server answers and the job's final checkpoint "
		"(step %ld) is complete: the job is over, nothing to do (%s)",
		x->rank, c->cfg.done_step, err->msg);
	wf_event("job_over", json_pack("{s:I}", "step", (json_int_t)c->cfg.done_step));
	wf_err_clear(err);
	c->job_over = 1;
	c->step = c->cfg.done_step;
	*start_step = c->cfg.done_step;
	return 0;
}

/* A worker other than the chief (re)joining: wait until the servers agree
 * on a step (*step), then pull the model of that step. */
static int join_servers(wf_exchange *x, long *step, wf_err *err)
{
	ps_ctx *c = x->ctx;
	double limit = connect_limit(c);
	double deadline = wf_now() + limit;
	long lo = -1, hi, version;
	for (;;) {
		int rc = servers_agree(c, lo >= 0, step, &lo, &hi, err);
		if (rc < 0)
			return rc;
		if (rc)
			break;
		if (wf_now() > deadline)
			return wf_errf(err, WF_ETRANSIENT,
				       "ps: the servers were not seeded within %.0f s (steps "
				       "%ld..%ld; -1: not yet): is the chief running?",
				       limit, lo, hi);
		sleep_s(0.1);
	}
	int rc = pull_all(c, &version, err);
	if (rc != 0)
		return rc;
	if (*step > 0) {
		wf_info("ps: worker %d joins at the servers' step %ld", x->rank, *step);
		wf_event("join", json_pack("{s:I}", "step", (json_int_t)*step));
	}
	return 0;
}

static int ps_start(wf_exchange *x, const char *resume_dir, long resume_step, long *start_step,
		    wf_err *err)
{
	ps_ctx *c = x->ctx;
	long step = 0, lo, hi, version;
	int rc;
	*start_step = 0;
	c->upe = x->units_per_epoch; /* the trainer set it after create */
	wf_info("ps: worker %d of %d%s: %d server%s, %d chunks, mode %s%s", x->rank, x->workers,
		x->is_chief ? " (chief)" : "", c->cfg.nservers, c->cfg.nservers == 1 ? "" : "s",
		c->pl.nchunks, c->mode, c->cfg.priority_bytes ? ", priority by layer" : "");
	if (x->is_chief) {
		if ((rc = servers_agree(c, 0, &step, &lo, &hi, err)) < 0)
			return job_over(x, rc, start_step, err);
		if (rc == 1 && (resume_dir ? step >= resume_step : resume_step < 0)) {
			/* a restarted chief (asked to resume, with or without a
			 * checkpoint): the servers still hold the job, at a step at
			 * least as new as the checkpoint: go on from there (restoring
			 * or seeding would roll every worker back) */
			if ((rc = pull_all(c, &version, err)) != 0)
				return rc;
			if (resume_dir)
				wf_info("ps: the chief rejoins the servers at step %ld (its "
					"checkpoint: step %ld)",
					step, resume_step);
			else
				wf_info("ps: the chief rejoins the servers at step %ld (no "
					"checkpoint yet)",
					step);
			wf_event("join", json_pack("{s:I}", "step", (json_int_t)step));
		} else if (resume_dir) {
			long restored;
			wf_err e = {0};
			rc = wf_ps_client_restore(c->cl, resume_step, &restored, &e);
			if (rc != 0) {
				wf_warn("ps: the servers cannot restore step %ld (%s): seeding "
					"them "
					"from %s/model.h5 (optimizer slots restart at zero)",
					resume_step, e.msg, resume_dir);
				rc = wf_ps_client_init(c->cl, c->m->params, NULL,
						       c->m->nstate ? c->m->state : NULL,
						       resume_step, err);
			}
			step = resume_step;
		} else {
			if (wf_exec_params_to_host(c->ex) != 0)
				return wf_errf(err, WF_EINTERNAL, "ps: %s", wf_exec_error(c->ex));
			rc = wf_ps_client_init(c->cl, c->m->params, NULL,
					       c->m->nstate ? c->m->state : NULL, 0, err);
			step = 0;
		}
		if (rc != 0)
			return wf_err_wrap(err, "seeding the parameter servers"), rc;
	} else {
		/* the servers are authoritative: a worker (re)joining takes their
		 * step. A stop signal ends its waits (servers restarting or gone:
		 * it joined just before the end). */
		wf_ps_client_set_cancelable(c->cl, 1);
		rc = join_servers(x, &step, err);
		wf_ps_client_set_cancelable(c->cl, 0);
		if (rc != 0)
			return job_over(x, rc, start_step, err);
	}
	c->step = step;
	c->next = 0;
	*start_step = step;
	if ((rc = feed_after_pull(x, x->is_chief, err)) != 0)
		return rc;
	c->ready_at = wf_now();
	return 0;
}

static int ps_step(wf_exchange *x, long step, long *to, wf_err *err)
{
	ps_ctx *c = x->ctx;
	int rc = c->push_rc;
	if (rc != 0)
		*err = c->push_err;
	if (rc == 0) { /* chunks backward did not announce (or no grad_ready at all) */
		ps_grad_ready(x, c->m->nparams);
		if ((rc = c->push_rc) != 0)
			*err = c->push_err;
	}
	if (rc == 0 && c->waited) {
		/* layer by layer: return once no push is held in the client; the
		 * next forward waits for the replies layer by layer */
		if ((rc = wf_ps_client_flush(c->cl, err)) == 0) {
			c->next = 0;
			c->step = step + 1;
			c->pending = 1;
			c->pend_rc = 0;
			c->pend_step = step;
			memset(c->waited, 0, (size_t)c->pl.nchunks);
			c->returned_at = c->ready_at = wf_now();
			c->first_at = 0;
			return 0;
		}
	}
	int wrc = wf_ps_client_wait_all(c->cl, rc ? NULL : err);
	if (rc == 0)
		rc = wrc;
	c->next = 0;
	c->push_rc = 0;
	if (rc == 0) {
		c->step = step + 1;
		if (units_on(c))
			feed_after_step(c, step);
		if (wf_exec_params_from_host(c->ex) != 0)
			return wf_errf(err, WF_EINTERNAL, "ps: %s", wf_exec_error(c->ex));
		c->ready_at = wf_now();
		return 0;
	}
	if (rc != WF_ETRANSIENT && rc != WF_ESTOPPED)
		return rc;
	char why[1024];
	snprintf(why, sizeof(why), "%s", err->msg);
	wf_err_clear(err);
	return resync(x, why, to, err);
}

static int ps_settle(wf_exchange *x, long *to, wf_err *err)
{
	ps_ctx *c = x->ctx;
	int rc = collect(c, err);
	if (rc == 0 || (rc != WF_ETRANSIENT && rc != WF_ESTOPPED))
		return rc;
	char why[1024];
	snprintf(why, sizeof(why), "%s", err->msg);
	wf_err_clear(err);
	return resync(x, why, to, err);
}

static int ps_save(wf_exchange *x, const char *dir, long step, wf_err *err)
{
	ps_ctx *c = x->ctx;
	if (!x->is_chief || c->job_over)
		return 0;
	long version;
	int rc = 0;
	/* sync: the executor holds exactly the servers' values of this step */
	if (c->cfg.mode != WF_PS_MODE_SYNC && (rc = pull_all(c, &version, err)) != 0)
		return rc;
	rc = wf_ps_client_checkpoint(c->cl, step, err);
	if (rc != 0)
		return wf_err_wrap(err, "checkpoint %s", dir), rc;
	return 0;
}

static int ps_finish(wf_exchange *x, long *to, wf_err *err)
{
	ps_ctx *c = x->ctx;
	if (c->job_over || c->left)
		return 0;
	/* every live worker reaches the end before the chief stops the servers */
	int rc = wf_ps_client_barrier(c->cl, c->step, err);
	if (rc == WF_ETRANSIENT) {
		/* a server restarted or the job went back while this worker waited:
		 * take the servers' step; the trainer goes on from there. But when
		 * the chief already sealed the checkpoint of this final step, the
		 * servers may have been shut down by it while this worker's barrier
		 * was on its way (it re-synchronised after a rollback): servers that
		 * stay silent for 10 s then mean the job is over. */
		char why[1024], step_dir[4200];
		snprintf(why, sizeof(why), "%s", err->msg);
		wf_err_clear(err);
		wf_ckptdir_step_path(step_dir, sizeof(step_dir), c->cfg.ckpt_dir, c->step);
		int sealed = !x->is_chief && c->ckpt_dir[0] && wf_ckptdir_has_done(step_dir);
		double was =
			sealed ? wf_ps_client_set_connect_timeout(c->cl, WF_PS_JOB_OVER_WAIT) : 0;
		rc = resync(x, why, to, err);
		if (sealed)
			wf_ps_client_set_connect_timeout(c->cl, was);
		if (rc == WF_ETRANSIENT && sealed) {
			wf_info("ps: worker %d: the servers are gone and the final checkpoint "
				"(step %ld) is complete: the job is over (%s)",
				x->rank, c->step, err->msg);
			wf_event("job_over", json_pack("{s:I}", "step", (json_int_t)c->step));
			wf_err_clear(err);
			c->job_over = 1;
			return 0;
		}
		return rc;
	}
	if (rc == WF_ESTOPPED && !x->is_chief) {
		/* the chief shuts the servers down only once every live worker is
		 * done: the job is complete */
		wf_info("ps: worker %d: the servers shut down while it waited at the end: the job "
			"is complete (%s)",
			x->rank, err->msg);
		wf_err_clear(err);
		return 0;
	}
	if (rc != 0)
		return wf_err_wrap(err, "ps: waiting for the other workers to finish"), rc;
	if (!x->is_chief)
		return 0;
	if ((rc = wf_ps_client_shutdown(c->cl, err)) != 0)
		return wf_err_wrap(err, "ps: shutting the servers down"), rc;
	wf_info("ps: training done; the parameter servers were told to shut down");
	wf_event("servers_shut_down", NULL);
	return 0;
}

static void ps_free(wf_exchange *x)
{
	ps_ctx *c = x->ctx;
	if (c) {
		wf_ps_client_free(c->cl);
		wf_ps_placement_free(&c->pl);
		if (!c->host || c->waited) /* a copy of its own */
			free(c->grads);
		free(c->steps);
		free(c->waited);
		if (c->have_st)
			wf_ps_stats_free(&c->st);
		free(c);
	}
	free(x);
}

/* Elastic: a worker other than the chief leaves for good when stopped. */
static int ps_leave(wf_exchange *x, int *left, wf_err *err)
{
	ps_ctx *c = x->ctx;
	*left = 0;
	if (c->cfg.min_workers <= 0 || x->is_chief || c->job_over)
		return 0;
	int rc = wf_ps_client_leave(c->cl, err);
	if (rc != 0)
		return wf_err_wrap(err, "ps: worker %d leaving the job", x->rank), rc;
	wf_info("ps: worker %d left the job after step %ld (elastic: the others go on)", x->rank,
		c->step);
	wf_event("left", json_pack("{s:I}", "step", (json_int_t)c->step));
	c->left = *left = 1;
	return 0;
}

static const wf_exchange_ops ps_ops = {
	.start = ps_start,
	.grad_ready = ps_grad_ready,
	.step = ps_step,
	.save = ps_save,
	.finish = ps_finish,
	.free = ps_free,
	.feed = ps_feed,
	.backup_stats = ps_backup_stats,
	.leave = ps_leave,
	.layer_wait = ps_layer_wait,
	.settle = ps_settle,
};

/* cfg.debug_stall="rank:step:seconds": worker `rank` sleeps once, before
 * pushing that step or the first one after it (a worker that
 * joins late starts past it; to see stall reports; not for production). */
static void debug_stall(ps_ctx *c, const char *s)
{
	int rank = -1;
	c->stall_step = -1;
	if (s && (sscanf(s, "%d:%ld:%lf", &rank, &c->stall_step, &c->stall_s) != 3 ||
		  rank != c->cfg.rank))
		c->stall_step = -1;
}

int wf_exchange_ps_create(wf_exchange **out, wf_exec *ex, const wf_model *m,
			  const wf_exchange_ps_cfg *cfg, wf_err *err)
{
	*out = NULL;
	wf_exchange *x = calloc(1, sizeof(*x));
	ps_ctx *c = calloc(1, sizeof(*c));
	int rc = WF_ENOMEM;
	if (!x || !c) {
		free(x);
		free(c);
		return wf_errf(err, WF_ENOMEM, "out of memory");
	}
	x->name = "parameter_server";
	x->ops = &ps_ops;
	x->ctx = c;
	x->rank = cfg->rank;
	x->workers = cfg->workers;
	x->is_chief = cfg->is_chief;
	c->cfg = *cfg;
	wf_ps_mode_str(cfg->mode, cfg->staleness, c->mode, sizeof(c->mode));
	snprintf(c->ckpt_dir, sizeof(c->ckpt_dir), "%s", cfg->ckpt_dir ? cfg->ckpt_dir : "");
	c->cfg.ckpt_dir = c->ckpt_dir;
	c->cfg.endpoints = NULL; /* the client keeps its own copies */
	c->ex = ex;
	c->m = m;
	c->be = wf_exec_backend(ex);
	c->host = wf_backend_host_memory(c->be);
	c->state_chunk = -1;
	c->ntrain = 1;
	debug_stall(c, cfg->debug_stall);
	c->cfg.debug_stall = NULL;
	if (!(c->steps = calloc((size_t)cfg->nservers, sizeof(*c->steps))))
		goto fail;
	if (c->host) {
		c->grads = wf_exec_grads(ex);
	} else if (!(c->grads = calloc(m->nparams ? m->nparams : 1, sizeof(float)))) {
		goto fail;
	}
	if ((rc = wf_ps_place(&c->pl, m->views, m->nviews, m->nparams, cfg->nservers,
			      cfg->chunk_bytes, err)) != 0)
		goto fail;
	c->ref = c->pl.nchunks - 1;
	/* layer by layer: the exchange keeps its own copy of the gradient */
	int lr = cfg->layer_ready && cfg->mode == WF_PS_MODE_SYNC && !units_on(c) && c->host;
	if (cfg->layer_ready && !lr)
		wf_warn("ps: strategy.layer_ready needs mode sync without backup workers or "
			"elastic membership on a host-memory device: worker %d waits for every "
			"reply",
			cfg->rank);
	if (lr) {
		rc = WF_ENOMEM;
		if (!(c->waited = calloc((size_t)c->pl.nchunks + 1, 1)) ||
		    !(c->grads = calloc(m->nparams ? m->nparams : 1, sizeof(float))))
			goto fail;
		x->layer_ready = 1;
	}
	if (cfg->slow_factor > 1)
		wf_warn("ps.debug_slow: worker %d takes %gx as long per step (a straggler)",
			cfg->rank, cfg->slow_factor);
	/* the state rides on a chunk of ps 0: the first pushed, or, layer by
	 * layer, the last pushed (the first layers'), whose reply comes first
	 * with priority by layer, as the first batch norm waits for it */
	for (int k = 0; k < c->pl.nchunks && m->nstate; k++)
		if (c->pl.chunks[k].server == 0) {
			c->state_chunk = k;
			if (!x->layer_ready)
				break;
		}
	wf_ps_client_cfg cc = {
		.nservers = cfg->nservers,
		.endpoints = cfg->endpoints,
		.job_id = cfg->job_id,
		.role = WF_PS_ROLE_WORKER,
		.index = cfg->rank,
		.pl = &c->pl,
		.params = m->params,
		.state = m->nstate ? m->state : NULL,
		.nstate = m->nstate,
		.contributors = 1, /* the units a push sums: set per step (ps_grad_ready) */
		.segs = cfg->segs,
		.frozen = cfg->frozen,
		.nsegs = cfg->nsegs,
		.optim = cfg->optim,
		.timeout = cfg->timeout,
		.connect_timeout =
			cfg->done_step > 0
				? WF_MIN(cfg->connect_timeout > 0 ? cfg->connect_timeout
								  : WF_PS_CONNECT_TIMEOUT_DEFAULT,
					 WF_PS_JOB_OVER_WAIT)
				: cfg->connect_timeout,
		.heartbeat_interval = cfg->heartbeat_interval > 0
					      ? cfg->heartbeat_interval
					      : WF_PS_HEARTBEAT_INTERVAL_DEFAULT,
		.server_timeout = cfg->server_timeout > 0 ? cfg->server_timeout
							  : WF_PS_SERVER_TIMEOUT_DEFAULT,
		.keys = cfg->keys,
		.key_origin = cfg->key_origin,
		.replicas = cfg->replicas,
		.compression = cfg->compression,
		.topk = cfg->topk,
		.priority_bytes = cfg->priority_bytes,
	};
	if ((rc = wf_ps_client_create(&c->cl, &cc, err)) != 0)
		goto fail;
	*out = x;
	return 0;
fail:
	if (rc == WF_ENOMEM)
		wf_errf(err, rc, "out of memory");
	ps_free(x);
	return rc;
}
