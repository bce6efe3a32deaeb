/* server_ops.c: the parameter server's ops: init, push/pull, pull,
 * checkpoint, restore and stats. */
#include "ps/server_impl.h"

#include "kernels/ops.h"

/* ---- ops -------------------------------------------------------------- */

int wf_pss_serving(const server *s, const schunk *c)
{
	return s->replicas < 2 || !s->groups || s->groups[c->group].role == GRP_PRIMARY;
}

/* The server's step: -1 before init, else the lowest version of the chunks
 * it serves (with replicas, a backup's copies may lag by an update). */
long wf_pss_server_step(const server *s)
{
	long m = -1;
	int any = 0;
	for (int i = 0; i < s->nchunks; i++) {
		if (!wf_pss_serving(s, &s->chunks[i]))
			continue;
		any = 1;
		if (!s->chunks[i].initialized)
			return -1;
		if (m < 0 || s->chunks[i].version < m)
			m = s->chunks[i].version;
	}
	if (!any)
		return s->restored_step >= 0 ? s->restored_step : 0;
	return m;
}

/* Answer an init (of the chunk, or i = 1: of the state) now, or with
 * replicas once every live backup acknowledged c's replicate `need`: an
 * init the chief was answered for survives a kill of the primary. */
static void hold_init(server *s, schunk *c, int i, const uint8_t *rid, size_t rid_len,
		      const wf_ps_hdr *h, long step, long need)
{
	if (!c || need <= 0) {
		wf_pss_send_ok(s, rid, rid_len, h, step, 0);
		return;
	}
	held *in = &c->init[i];
	if (in->used) /* a repeat replaces the one before */
		wf_pss_release(s, in);
	wf_pss_hold(s, in, rid, rid_len, h);
	in->step = step;
	in->need = need;
	wf_pss_answer_ready(s, c);
}

void wf_pss_op_init(server *s, const uint8_t *rid, size_t rid_len, const wf_ps_msg *m)
{
	const wf_ps_hdr *h = &m->hdr;
	int from_server = WF_PS_SENDER_ROLE(h->sender) == WF_PS_ROLE_SERVER;
	if (h->chunk == WF_PS_STATE_CHUNK) {
		memcpy(s->state, m->frame[0], m->size[0]);
		if (s->state_sum.acc)
			wf_pss_osum_reset(&s->state_sum, s->nworkers);
		s->state_initialized = 1;
		schunk *w = NULL;
		if (from_server)
			wf_pss_repl_installed(s, h);
		else
			w = wf_pss_replicate_state(s);
		hold_init(s, w, 1, rid, rid_len, h, h->step, w ? w->rseq : 0);
		return;
	}
	schunk *c = &s->chunks[s->local[h->chunk]];
	wf_pss_fail_held(s, c, WF_ETRANSIENT, "chunk re-initialized while a push was pending");
	wf_pss_values_writable(s, c);
	memcpy(c->values, m->frame[0], m->size[0]);
	int with_units = (h->flags & WF_PS_FLAG_UNITS) != 0; /* a server's install: last */
	for (int k = 0; k < s->nslots; k++) {
		if (m->nframes - with_units > 1 + k)
			memcpy(c->slot[k], m->frame[1 + k], m->size[1 + k]);
		else
			memset(c->slot[k], 0, c->count * sizeof(float));
	}
	if (with_units)
		wf_pss_units_take(s, c, m->frame[m->nframes - 1], m->size[m->nframes - 1]);
	c->version = h->step > 0 ? (long)h->step : 0;
	c->initialized = 1;
	long need = 0;
	if (from_server)
		wf_pss_repl_installed(s, h);
	else
		need = wf_pss_replicate(s, c, NULL, 0, c->version, 0);
	hold_init(s, c, 0, rid, rid_len, h, c->version, need);
	wf_pss_barriers_rolled_back(s);
}

void wf_pss_op_push_pull(server *s, const uint8_t *rid, size_t rid_len, const wf_ps_msg *m, int w)
{
	const wf_ps_hdr *h = &m->hdr;
	schunk *c = &s->chunks[s->local[h->chunk]];
	if (WF_PS_SENDER_ROLE(h->sender) != WF_PS_ROLE_WORKER) {
		wf_pss_send_errorf(s, rid, rid_len, h, WF_EINVAL, WF_PS_REJECT_SENDER,
				   "push_pull needs role worker");
		return;
	}
	if (!c->initialized) {
		wf_pss_send_errorf(s, rid, rid_len, h, WF_ETRANSIENT, WF_PS_REJECT_STATE,
				   "chunk %d is not initialized: the chief must init it first",
				   c->gidx);
		return;
	}
	if (c->held[w].used) {
		wf_pss_send_errorf(s, rid, rid_len, h, WF_EINVAL, WF_PS_REJECT_STATE,
				   "worker %d pushed chunk %d again before its reply", w, c->gidx);
		return;
	}
	if (s->cfg->mode == WF_PS_MODE_SYNC && c->pushed[w] && h->step == c->version) {
		/* a restarted worker pushes again what its previous process pushed
		 * already for this step: that gradient counts once, this one only
		 * waits for the step's values */
		wf_pss_hold(s, &c->held[w], rid, rid_len, h);
		wf_pss_sync_try_complete(s, c);
		return;
	}
	if (wf_pss_take_frozen(c, m) != 0) {
		wf_pss_send_errorf(s, rid, rid_len, h, WF_ETRANSIENT, WF_PS_REJECT_STATE,
				   "out of memory for the frozen ranges of chunk %d", c->gidx);
		return;
	}
	long contributors = h->aux ? (long)h->aux : (s->cfg->batch > 0 ? s->cfg->batch : 1);
	const float *grad = m->frame[0];
	const float *st = (h->flags & WF_PS_FLAG_STATE) ? m->frame[1] : NULL;
	worker *wk = &s->workers[w];
	s->pushes++;
	if (s->cfg->mode != WF_PS_MODE_SYNC) {
		if (h->step > wk->last_step)
			wk->last_step = (long)h->step;
		wf_pss_apply(s, c, grad, contributors, (long)h->step);
		if (st)
			memcpy(s->state, st, s->nstate * sizeof(float));
		long need = wf_pss_replicate(s, c, grad, contributors, (long)h->step, st != NULL);
		if (need) { /* answered once the backups hold it (and, ssp, within the bound) */
			wf_pss_hold(s, &c->held[w], rid, rid_len, h);
			c->held[w].need = need;
			wf_pss_answer_ready(s, c);
			if (s->cfg->mode == WF_PS_MODE_SSP)
				wf_pss_ssp_release(s);
			return;
		}
		held r = {0};
		wf_pss_hold(s, &r, rid, rid_len, h);
		if (s->cfg->mode == WF_PS_MODE_SSP &&
		    h->step > wf_pss_slowest_step(s) + s->cfg->staleness) {
			c->held[w] = r; /* answered by wf_pss_ssp_release */
			s->ssp_held++;
		} else {
			if (s->cfg->mode == WF_PS_MODE_SSP)
				wf_pss_ssp_answered(s, (long)h->step);
			wf_pss_send_values(s, c, &r, 1, 0);
			wf_pss_release(s, &r);
		}
		if (s->cfg->mode == WF_PS_MODE_SSP)
			wf_pss_ssp_release(s);
		return;
	}
	if (h->step < c->version) {
		/* with backups, answered once they hold the values it gets */
		held *r = &c->held[w];
		wf_pss_hold(s, r, rid, rid_len, h);
		r->stale = 1;
		r->need = s->replicas > 1 ? c->rseq : 0;
		/* a retry of an applied push whose reply was lost with a primary:
		 * applied, with the unit it got then; else late, and its unit
		 * goes back (the backups learn that before the reply goes out) */
		uint32_t again =
			wf_pss_units_on(s) ? wf_pss_units_retry(s, c, w, (long)h->step) : 0;
		if (again) {
			r->stale = 0;
			r->aux = again;
		} else if (wf_pss_units_on(s)) {
			wf_pss_units_late(s, c, w, (long)h->step);
			r->aux = wf_pss_units_assign(s, c, w, 0);
			long need = wf_pss_replicate_units(s, c);
			if (need)
				r->need = need;
		}
		if (r->aux)
			r->list = wf_pss_units_list(s, c, w, &r->list_bytes);
		if (r->need > 0) {
			wf_pss_answer_ready(s, c);
			return;
		}
		wf_pss_send_values(s, c, r, 1, r->stale);
		wf_pss_release(s, r);
		return;
	}
	if (h->step > c->version) {
		wf_pss_send_errorf(s, rid, rid_len, h, WF_ETRANSIENT, WF_PS_REJECT_STATE,
				   "worker %d pushed step %lld but chunk %d is at step %ld (server "
				   "restored? roll back to the server's step)",
				   w, (long long)h->step, c->gidx, c->version);
		return;
	}
	if (h->step > wk->last_step)
		wk->last_step = (long)h->step;
	if (!c->ncontrib)
		c->first_push = wf_now();
	int rc = 0;
	if (!c->ncontrib && wf_pss_quorum(s, c, w) && s->replicas < 2) {
		wf_pss_apply(s, c, grad, contributors, c->version); /* sole contributor: no copy */
		c->direct = 1;
	} else {
		rc = wf_pss_osum_push(s, &c->sum, w, grad);
	}
	if (rc == 0 && st)
		rc = wf_pss_osum_push(s, &s->state_sum, w, st);
	if (rc != 0) {
		wf_pss_send_errorf(s, rid, rid_len, h, WF_ETRANSIENT, WF_PS_REJECT_STATE,
				   "out of memory keeping worker %d's push of chunk %d in order", w,
				   c->gidx);
		return;
	}
	c->pushed[w] = 1;
	c->ncontrib++;
	c->contributors += contributors;
	wf_pss_hold(s, &c->held[w], rid, rid_len, h);
	wf_pss_sync_try_complete(s, c);
}

void wf_pss_op_pull(server *s, const uint8_t *rid, size_t rid_len, const wf_ps_msg *m)
{
	const wf_ps_hdr *h = &m->hdr;
	held r = {0};
	s->pulls++;
	if (h->chunk == WF_PS_STATE_CHUNK) {
		/* the state travels as the values of a pseudo chunk */
		schunk pseudo = {.gidx = (int)WF_PS_STATE_CHUNK,
				 .values = s->state,
				 .count = s->nstate,
				 .version = wf_pss_server_step(s)};
		wf_pss_hold(s, &r, rid, rid_len, h);
		r.want_state = 0;
		wf_pss_send_values(s, &pseudo, &r, 1, 0);
		wf_pss_release(s, &r);
		return;
	}
	schunk *c = &s->chunks[s->local[h->chunk]];
	if (!c->initialized) {
		wf_pss_send_errorf(s, rid, rid_len, h, WF_ETRANSIENT, WF_PS_REJECT_STATE,
				   "chunk %d is not initialized", c->gidx);
		return;
	}
	wf_pss_hold(s, &r, rid, rid_len, h);
	if (wf_pss_units_on(s) && WF_PS_SENDER_ROLE(h->sender) == WF_PS_ROLE_WORKER) {
		int w = (int)WF_PS_SENDER_INDEX(h->sender);
		if (wf_pss_units_hold_pull(s, c, w, (long)h->aux, &r))
			return; /* the first step's units: shared once every member asked */
		r.aux = wf_pss_units_assign(s, c, w, (long)h->aux);
		r.list = wf_pss_units_list(s, c, w, &r.list_bytes);
		long need = wf_pss_replicate_units(s, c);
		if (need > 0 && !c->held[w].used) {
			/* the reply names the units only once the backups hold
			 * them as this worker's: a primary killed before that never
			 * answers, and at the backup that takes over the retry
			 * puts them back in the queue, so each goes out once */
			c->held[w] = r;
			c->held[w].need = need;
			wf_pss_answer_ready(s, c);
			return;
		}
	}
	wf_pss_send_values(s, c, &r, 1, 0);
	wf_pss_release(s, &r);
}

static void shard_views(server *s)
{
	for (int i = 0; i < s->nchunks; i++) {
		schunk *c = &s->chunks[i];
		s->shards[i] = (wf_ps_shard_chunk){.index = c->gidx,
						   .offset = c->offset,
						   .count = c->count,
						   .version = c->version,
						   .values = c->values,
						   .slot = {c->slot[0], c->slot[1]}};
	}
}

void wf_pss_op_checkpoint(server *s, const uint8_t *rid, size_t rid_len, const wf_ps_msg *m)
{
	const wf_ps_hdr *h = &m->hdr;
	char path[PATH_BYTES + 64];
	wf_err e = {0};
	if (m->nframes || h->step < 0) {
		wf_pss_send_errorf(
			s, rid, rid_len, h, WF_EINVAL, WF_PS_REJECT_BYTES,
			"checkpoint takes a step >= 0 and no payload (a server writes only "
			"under its own checkpoint.dir)");
		return;
	}
	if (!s->cfg->ckpt_dir) {
		wf_pss_send_errorf(s, rid, rid_len, h, WF_EINVAL, -1,
				   "checkpoint: this server has no checkpoint.dir");
		return;
	}
	shard_views(s);
	wf_ps_shard_path(path, sizeof(path), s->cfg->ckpt_dir, (long)h->step, s->cfg->index,
			 s->cfg->nservers);
	double t0 = wf_now();
	int rc = wf_ps_shard_save(path, s->cfg->index, s->cfg->nservers, (long)h->step, s->shards,
				  s->nchunks, s->nslots, s->state, s->nstate, &e);
	if (rc) {
		wf_error("ps %d: %s", s->cfg->index, e.msg);
		wf_pss_send_error(s, rid, rid_len, h, rc, e.msg);
		return;
	}
	wf_info("ps %d: checkpoint step %lld written to %s (%.2f s)", s->cfg->index,
		(long long)h->step, path, wf_now() - t0);
	wf_pss_send_ok(s, rid, rid_len, h, h->step, 0);
}

/* Load the newest complete checkpoint (or want_step) from root into fresh
 * buffers, then swap them in: a failed restore leaves the server as it was. */
int wf_pss_restore(server *s, const char *root, long want_step, long *step, wf_err *err)
{
	char path[PATH_BYTES + 64];
	int rc = wf_ps_ckpt_find(root, s->cfg->index, s->cfg->nservers, want_step, step, path,
				 sizeof(path), err);
	if (rc)
		return rc;
	wf_ps_shard_chunk *tmp = calloc((size_t)s->nchunks + 1, sizeof(*tmp));
	float *st = s->nstate ? malloc(s->nstate * sizeof(float)) : NULL;
	rc = WF_ENOMEM;
	if (!tmp || (s->nstate && !st))
		goto cleanup;
	for (int i = 0; i < s->nchunks; i++) {
		schunk *c = &s->chunks[i];
		tmp[i] = (wf_ps_shard_chunk){
			.index = c->gidx, .offset = c->offset, .count = c->count};
		tmp[i].values = malloc(c->count * sizeof(float));
		for (int k = 0; k < s->nslots; k++)
			tmp[i].slot[k] = malloc(c->count * sizeof(float));
		if (!tmp[i].values || (s->nslots > 0 && !tmp[i].slot[0]) ||
		    (s->nslots > 1 && !tmp[i].slot[1]))
			goto cleanup;
	}
	rc = wf_ps_shard_load(path, s->cfg->index, s->cfg->nservers, tmp, s->nchunks, s->nslots, st,
			      s->nstate, step, err);
	if (rc)
		goto cleanup;
	for (int i = 0; i < s->nchunks; i++) {
		schunk *c = &s->chunks[i];
		wf_pss_fail_held(s, c, WF_ETRANSIENT, "server restored from a checkpoint");
		vbuf *nb = wf_pss_vbuf_new(c->count, tmp[i].values);
		if (!nb) { /* cannot adopt: copy into the chunk's own buffer */
			wf_pss_values_writable(s, c);
			memcpy(c->values, tmp[i].values, c->count * sizeof(float));
		} else {
			tmp[i].values = NULL; /* adopted */
			wf_pss_vbuf_unref(c->vb);
			c->vb = nb;
			c->values = nb->data;
			c->crc_ok = 0;
		}
		float *t;
		for (int k = 0; k < s->nslots; k++) {
			t = c->slot[k];
			c->slot[k] = tmp[i].slot[k];
			tmp[i].slot[k] = t;
		}
		c->version = tmp[i].version;
		c->initialized = 1;
		c->rseq = 0; /* every replica restored the same step */
		memset(c->racked, 0, (size_t)s->cfg->nservers * sizeof(*c->racked));
	}
	if (s->nstate) {
		memcpy(s->state, st, s->nstate * sizeof(float));
		s->state_initialized = 1;
		if (s->state_sum.acc)
			wf_pss_osum_reset(&s->state_sum, s->nworkers);
	}
	s->restored_step = *step;
	wf_pss_barriers_rolled_back(s);
	wf_info("ps %d: restored step %ld from %s", s->cfg->index, *step, path);
cleanup:
	if (rc == WF_ENOMEM)
		wf_errf(err, rc, "restore: out of memory");
	for (int i = 0; tmp && i < s->nchunks; i++) {
		free(tmp[i].values);
		free(tmp[i].slot[0]);
		free(tmp[i].slot[1]);
	}
	free(tmp);
	free(st);
	return rc;
}

void wf_pss_op_restore(server *s, const uint8_t *rid, size_t rid_len, const wf_ps_msg *m)
{
	const wf_ps_hdr *h = &m->hdr;
	wf_err e = {0};
	long step = -1;
	if (m->nframes) {
		wf_pss_send_errorf(s, rid, rid_len, h, WF_EINVAL, WF_PS_REJECT_BYTES,
				   "restore takes no payload (a server restores only from its own "
				   "checkpoint.dir)");
		return;
	}
	if (!s->cfg->ckpt_dir) {
		wf_pss_send_errorf(s, rid, rid_len, h, WF_EINVAL, -1,
				   "restore: this server has no checkpoint.dir");
		return;
	}
	int rc = wf_pss_restore(s, s->cfg->ckpt_dir, h->step >= 0 ? (long)h->step : -1, &step, &e);
	if (rc) {
		wf_error("ps %d: %s", s->cfg->index, e.msg);
		wf_pss_send_error(s, rid, rid_len, h, rc, e.msg);
		return;
	}
	wf_pss_send_ok(s, rid, rid_len, h, step, 0);
}

/* Backup workers' statistics into st: late [3 * nworkers] scratch. */
static void fill_backup_stats(server *s, wf_ps_stats *st, long *late)
{
	if (!wf_pss_units_on(s) || !late)
		return;
	st->backup_workers = s->cfg->backup_workers;
	st->min_workers = s->cfg->min_workers;
	st->worker_late = late;
	st->worker_late_sum = late + s->nworkers;
	st->worker_late_max = late + 2 * s->nworkers;
	for (int w = 0; w < s->nworkers; w++) {
		late[w] = s->workers[w].late_steps;
		late[s->nworkers + w] = s->workers[w].late_sum;
		late[2 * s->nworkers + w] = s->workers[w].late_max;
	}
	const units *u = &s->units;
	st->units_per_epoch = u->per_epoch;
	st->nepochs = u->chunk >= 0 ? u->nepochs : 0;
	st->units_applied = u->applied;
	st->units_requeued = u->requeued;
}

static void fill_stats(server *s, wf_ps_stats *st, long *steps, int *alive)
{
	memset(st, 0, sizeof(*st));
	st->server = s->cfg->index;
	st->nservers = s->cfg->nservers;
	st->uptime = wf_now() - s->start;
	st->pushes = s->pushes;
	st->pulls = s->pulls;
	if (st->uptime > 0) {
		st->push_rate = (double)s->pushes / st->uptime;
		st->pull_rate = (double)s->pulls / st->uptime;
	}
	st->bytes_in = s->bytes_in;
	st->bytes_out = s->bytes_out;
	st->held = s->held_count;
	st->version_min = wf_pss_server_step(s);
	st->version_max = st->version_min;
	for (int i = 0; i < s->nchunks; i++)
		st->version_max = WF_MAX(st->version_max, s->chunks[i].version);
	st->nworkers = s->nworkers;
	for (int w = 0; w < s->nworkers; w++) {
		steps[w] = s->workers[w].last_step;
		alive[w] = s->workers[w].alive;
	}
	st->worker_step = steps;
	st->worker_alive = alive;
	st->live_workers = wf_pss_live(s);
	memcpy(st->rejected, s->rejected, sizeof(st->rejected));
	st->staleness = s->cfg->mode == WF_PS_MODE_SSP ? s->cfg->staleness : -1;
	st->ssp_held = s->ssp_held;
	st->ssp_max_lead = s->ssp_max_lead;
}

void wf_pss_op_stats(server *s, const uint8_t *rid, size_t rid_len, const wf_ps_hdr *h)
{
	wf_ps_stats st;
	long *steps = calloc((size_t)s->nworkers, sizeof(*steps));
	int *alive = calloc((size_t)s->nworkers, sizeof(*alive));
	long *late = calloc(3 * (size_t)s->nworkers, sizeof(*late));
	char *json = NULL;
	wf_err e = {0};
	if (!steps || !alive) {
		wf_pss_send_error(s, rid, rid_len, h, WF_ENOMEM, "stats: out of memory");
		goto cleanup;
	}
	fill_stats(s, &st, steps, alive);
	fill_backup_stats(s, &st, late);
	if (wf_ps_stats_to_json(&st, &json, &e)) {
		wf_pss_send_error(s, rid, rid_len, h, e.code, e.msg);
		goto cleanup;
	}
	wf_ps_hdr r;
	uint8_t hb[WF_PS_HEADER_BYTES];
	const void *f[1] = {json};
	size_t sz[1] = {strlen(json)};
	wf_pss_reply_hdr(s, &r, h->op, h->tag, h->chunk, wf_pss_server_step(s));
	r.dtype = WF_PS_DTYPE_BYTES;
	wf_ps_hdr_encode(&r, hb, f, sz, 1);
	wf_pss_send_raw(s, rid, rid_len, hb, f, sz, 1, NULL);
cleanup:
	free(json);
	free(steps);
	free(alive);
	free(late);
}

void wf_pss_log_stats(server *s)
{
	wf_ps_stats st;
	long *steps = calloc((size_t)s->nworkers, sizeof(*steps));
	int *alive = calloc((size_t)s->nworkers, sizeof(*alive));
	long *late = calloc(3 * (size_t)s->nworkers, sizeof(*late));
	char line[2048];
	if (steps && alive) {
		fill_stats(s, &st, steps, alive);
		fill_backup_stats(s, &st, late);
		wf_ps_stats_format(&st, line, sizeof(line));
		wf_info("%s", line);
	}
	free(steps);
	free(alive);
	free(late);
}
