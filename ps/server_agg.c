/* server_agg.c: the parameter server's value buffers, replies and gradient
 * aggregation (sync, async, ssp:K, barriers). */
#include "ps/server_impl.h"

#include "kernels/ops.h"

/* ---- value buffers ------------------------------------------------------ */

/* A buffer of n floats (64-byte aligned) with one reference, or adopting
 * data (malloc'd, n floats) when not NULL. NULL when out of memory. */
vbuf *wf_pss_vbuf_new(size_t n, float *data)
{
	vbuf *b = malloc(sizeof(*b));
	void *p = data;
	if (!b || (!p && posix_memalign(&p, 64, (n ? n : 1) * sizeof(float)))) {
		free(b);
		return NULL;
	}
	if (!data)
		memset(p, 0, n * sizeof(float));
	atomic_init(&b->refs, 1);
	b->data = p;
	return b;
}

void wf_pss_vbuf_unref(vbuf *b)
{
	if (b && atomic_fetch_sub(&b->refs, 1) == 1) {
		free(b->data);
		free(b);
	}
}

static void vbuf_zmq_free(void *data, void *hint)
{
	(void)data;
	wf_pss_vbuf_unref(hint);
}

/* Before changing c's values: move to a private copy if a reply still
 * sends the current ones; forget their CRC. Out of memory: change them in
 * place (such a reply then fails its checksum at the worker). */
void wf_pss_values_writable(server *s, schunk *c)
{
	c->crc_ok = 0;
	if (atomic_load(&c->vb->refs) == 1)
		return;
	vbuf *nb = wf_pss_vbuf_new(c->count, NULL);
	if (!nb) {
		wf_warn("ps %d: out of memory copying chunk %d's values", s->cfg->index, c->gidx);
		return;
	}
	memcpy(nb->data, c->values, c->count * sizeof(float));
	wf_pss_vbuf_unref(c->vb);
	c->vb = nb;
	c->values = nb->data;
}

/* ---- sending ---------------------------------------------------------- */

/* Send a reply; with zc, frame 0 is zc's values, sent zero-copy with a
 * reference on zc; other frames are copied. */
void wf_pss_send_raw(server *s, const uint8_t *rid, size_t rid_len, const uint8_t *hdr,
		     const void *const *frames, const size_t *sizes, int nf, vbuf *zc)
{
	int rc = zmq_send(s->sock, rid, rid_len, ZMQ_SNDMORE);
	if (rc >= 0)
		rc = zmq_send(s->sock, hdr, WF_PS_HEADER_BYTES, nf ? ZMQ_SNDMORE : 0);
	s->bytes_out += WF_PS_HEADER_BYTES;
	for (int i = 0; i < nf && rc >= 0; i++) {
		zmq_msg_t m;
		if (i == 0 && zc) {
			atomic_fetch_add(&zc->refs, 1);
			rc = zmq_msg_init_data(&m, (void *)frames[i], sizes[i], vbuf_zmq_free, zc);
			if (rc < 0) {
				wf_pss_vbuf_unref(zc);
				break;
			}
		} else {
			rc = zmq_msg_init_size(&m, sizes[i]);
			if (rc == 0)
				memcpy(zmq_msg_data(&m), frames[i], sizes[i]);
		}
		if (rc < 0)
			break;
		rc = zmq_msg_send(&m, s->sock, i + 1 < nf ? ZMQ_SNDMORE : 0);
		if (rc < 0)
			zmq_msg_close(&m);
		s->bytes_out += sizes[i];
	}
	if (rc < 0)
		wf_warn("ps %d: reply not sent: %s", s->cfg->index, zmq_strerror(zmq_errno()));
}

void wf_pss_reply_hdr(server *s, wf_ps_hdr *h, uint16_t op, uint32_t tag, uint32_t chunk, long step)
{
	memset(h, 0, sizeof(*h));
	h->version = WF_PS_VERSION;
	h->op = op;
	h->flags = WF_PS_FLAG_REPLY;
	h->sender = WF_PS_SENDER(0, s->cfg->index);
	h->job_id = s->cfg->job_id;
	h->tag = tag;
	h->chunk = chunk;
	h->step = step;
}

void wf_pss_send_ok(server *s, const uint8_t *rid, size_t rid_len, const wf_ps_hdr *req, long step,
		    uint32_t aux)
{
	wf_ps_hdr h;
	uint8_t hb[WF_PS_HEADER_BYTES];
	wf_pss_reply_hdr(s, &h, req->op, req->tag, req->chunk, step);
	h.aux = aux;
	wf_ps_hdr_encode(&h, hb, NULL, NULL, 0);
	wf_pss_send_raw(s, rid, rid_len, hb, NULL, NULL, 0, NULL);
}

/* An error reply; redirect >= -1: flag REDIRECT, the reply step names the
 * primary (-1: not known). */
static void send_error(server *s, const uint8_t *rid, size_t rid_len, const wf_ps_hdr *req,
		       int code, int redirect, const char *text)
{
	wf_ps_hdr h;
	uint8_t hb[WF_PS_HEADER_BYTES];
	const void *f[1] = {text};
	size_t sz[1] = {strlen(text)};
	wf_pss_reply_hdr(s, &h, req->op, req->tag, req->chunk,
			 redirect >= -1 ? redirect : (long)req->step);
	h.flags |= WF_PS_FLAG_ERROR | (redirect >= -1 ? WF_PS_FLAG_REDIRECT : 0);
	h.aux = (uint32_t)(-code);
	h.dtype = WF_PS_DTYPE_BYTES;
	wf_ps_hdr_encode(&h, hb, f, sz, 1);
	wf_pss_send_raw(s, rid, rid_len, hb, f, sz, 1, NULL);
}

void wf_pss_send_error(server *s, const uint8_t *rid, size_t rid_len, const wf_ps_hdr *req,
		       int code, const char *text)
{
	send_error(s, rid, rid_len, req, code, -2, text);
}

void wf_pss_send_redirect(server *s, const uint8_t *rid, size_t rid_len, const wf_ps_hdr *req,
			  int primary, const char *text)
{
	send_error(s, rid, rid_len, req, WF_ETRANSIENT, primary, text);
}

void wf_pss_send_errorf(server *s, const uint8_t *rid, size_t rid_len, const wf_ps_hdr *req,
			int code, int reason, const char *fmt, ...)
	__attribute__((format(printf, 7, 8)));
void wf_pss_send_errorf(server *s, const uint8_t *rid, size_t rid_len, const wf_ps_hdr *req,
			int code, int reason, const char *fmt, ...)
{
	char text[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	if (reason >= 0) {
		s->rejected[reason]++;
		s->rejected_total++;
	}
	wf_warn("ps %d: %s from sender %d:%d refused: %s", s->cfg->index, wf_ps_op_name(req->op),
		WF_PS_SENDER_ROLE(req->sender), WF_PS_SENDER_INDEX(req->sender), text);
	wf_pss_send_error(s, rid, rid_len, req, code, text);
}

/* Values (and state) of chunk c to the held requesters or one requester.
 * The values go zero-copy from c's buffer (c->vb; a pseudo chunk without
 * one is copied) and their CRC is computed once per version of the values,
 * for every reply of that version; the state frame is copied. */
void wf_pss_send_values(server *s, schunk *c, const held *to, int nto, int stale)
{
	const void *f[2] = {c->values, s->state};
	size_t sz[2] = {c->count * sizeof(float), s->nstate * sizeof(float)};
	uint32_t crc2 = 0;
	int have2 = 0;
	if (!c->crc_ok) {
		c->crc = wf_ps_crc32c(0, c->values, sz[0]);
		c->crc_ok = 1;
	}
	for (int i = 0; i < nto; i++) {
		const held *r = &to[i];
		if (!r->used)
			continue;
		int nf = r->want_state ? 2 : 1;
		uint32_t *crc = nf == 2 ? &crc2 : &c->crc;
		if (nf == 2 && !have2) {
			crc2 = wf_ps_crc32c(c->crc, s->state, sz[1]); /* continues over frame 1 */
			have2 = 1;
		}
		wf_ps_hdr h;
		uint8_t hb[WF_PS_HEADER_BYTES];
		wf_pss_reply_hdr(s, &h, r->op, r->tag, (uint32_t)c->gidx, c->version);
		h.dtype = WF_PS_DTYPE_F32;
		if (nf == 2)
			h.flags |= WF_PS_FLAG_STATE;
		if (stale)
			h.flags |= WF_PS_FLAG_STALE;
		h.aux = r->aux;
		uint64_t bytes = sz[0] + (nf == 2 ? sz[1] : 0);
		uint32_t rcrc = *crc;
		const void *rf[3] = {f[0], f[1]};
		size_t rsz[3] = {sz[0], sz[1]};
		if (r->list && r->aux) { /* elastic_batch global: the worker's units, last */
			h.flags |= WF_PS_FLAG_UNITS;
			rf[nf] = r->list;
			rsz[nf++] = r->list_bytes;
			rcrc = wf_ps_crc32c(rcrc, r->list, r->list_bytes);
			bytes += r->list_bytes;
		}
		wf_ps_hdr_encode_crc(&h, hb, rcrc, bytes, nf);
		wf_pss_send_raw(s, r->rid, r->rid_len, hb, rf, rsz, nf, c->vb);
	}
}

void wf_pss_hold(server *s, held *h, const uint8_t *rid, size_t rid_len, const wf_ps_hdr *req)
{
	h->used = 1;
	memcpy(h->rid, rid, rid_len);
	h->rid_len = rid_len;
	h->tag = req->tag;
	h->op = req->op;
	h->want_state = (req->flags & WF_PS_FLAG_STATE) != 0;
	h->step = req->step;
	h->since = wf_now();
	h->stale = 0;
	h->need = 0;
	h->aux = 0;
	h->list = NULL;
	h->list_bytes = 0;
	s->held_count++;
}

void wf_pss_release(server *s, held *h)
{
	if (h->used)
		s->held_count--;
	h->used = 0;
}

static void fail_held(server *s, schunk *c, int code, int redirect, const char *why)
{
	for (int w = 0; w < s->nworkers; w++) {
		held *h = &c->held[w];
		if (!h->used)
			continue;
		wf_ps_hdr req = {
			.op = h->op, .tag = h->tag, .chunk = (uint32_t)c->gidx, .step = h->step};
		send_error(s, h->rid, h->rid_len, &req, code, redirect, why);
		wf_pss_release(s, h);
	}
	for (int i = 0; i < 2; i++) {
		held *h = &c->init[i];
		if (!h->used)
			continue;
		wf_ps_hdr req = {.op = h->op,
				 .tag = h->tag,
				 .chunk = i ? WF_PS_STATE_CHUNK : (uint32_t)c->gidx,
				 .step = h->step};
		send_error(s, h->rid, h->rid_len, &req, code, redirect, why);
		wf_pss_release(s, h);
	}
	memset(c->pushed, 0, (size_t)s->nworkers);
	wf_pss_osum_reset(&c->sum, s->nworkers);
	c->ncontrib = 0;
	c->contributors = 0;
	c->direct = 0;
}

/* Fail every held reply of chunk c (re-init, restore, shutdown). */
void wf_pss_fail_held(server *s, schunk *c, int code, const char *why)
{
	fail_held(s, c, code, -2, why);
}

void wf_pss_fail_held_redirect(server *s, schunk *c, int primary)
{
	char why[96];
	snprintf(why, sizeof(why), "ps %d is the primary of group %d now", primary, c->group);
	fail_held(s, c, WF_ETRANSIENT, primary, why);
}

/* ---- ordered sums -------------------------------------------------------- */

int wf_pss_osum_init(osum *o, size_t n, int nworkers)
{
	*o = (osum){.n = n};
	o->acc = calloc(n ? n : 1, sizeof(float));
	o->in = calloc((size_t)nworkers, 1);
	o->parked = calloc((size_t)nworkers, 1);
	o->park = calloc((size_t)nworkers, sizeof(*o->park));
	return o->acc && o->in && o->parked && o->park ? 0 : WF_ENOMEM;
}

void wf_pss_osum_free(osum *o, int nworkers)
{
	for (int w = 0; o->park && w < nworkers; w++)
		free(o->park[w]);
	free(o->park);
	free(o->parked);
	free(o->in);
	free(o->acc);
	*o = (osum){0};
}

void wf_pss_osum_reset(osum *o, int nworkers)
{
	memset(o->in, 0, (size_t)nworkers);
	memset(o->parked, 0, (size_t)nworkers);
	o->next = 0;
	o->added = 0;
}

static void osum_add(server *s, osum *o, const float *x)
{
	if (!o->added++)
		memcpy(o->acc, x, o->n * sizeof(float));
	else
		wf_op_accumulate(s->be, o->n, o->acc, x);
}

void wf_pss_osum_flush(server *s, osum *o, int final)
{
	while (o->next < s->nworkers) {
		int w = o->next;
		if (o->parked[w]) {
			osum_add(s, o, o->park[w]);
			o->parked[w] = 0;
		} else if (!o->in[w] && !final && wf_pss_required(s, w)) {
			break; /* a required worker's vector is still to come */
		}
		o->next++;
	}
}

int wf_pss_osum_push(server *s, osum *o, int w, const float *x)
{
	wf_pss_osum_flush(s, o, 0);
	o->in[w] = 1;
	if (w <= o->next) {
		/* w < next: a worker that was not awaited when the sum went past
		 * it (joined, or registered again, during the step) comes last */
		osum_add(s, o, x);
		o->next += w == o->next;
	} else {
		if (!o->park[w] && !(o->park[w] = malloc((o->n ? o->n : 1) * sizeof(float)))) {
			o->in[w] = 0;
			return WF_ENOMEM;
		}
		memcpy(o->park[w], x, o->n * sizeof(float));
		o->parked[w] = 1;
	}
	wf_pss_osum_flush(s, o, 0);
	return 0;
}

/* ---- aggregation -------------------------------------------------------- */

static float grad_scale(const server *s, long contributors)
{
	/* elastic_batch global: each contributor is one unit's mean: their mean */
	if (s->cfg->min_workers > 0 && s->cfg->elastic_lr_linear &&
	    !s->cfg->elastic_batch_global) /* lr x contributors / N */
		return 1.0f / (float)s->nworkers;
	return contributors > 0 ? 1.0f / (float)contributors : 1.0f;
}

/* Apply a gradient of training step `step` (its learning-rate schedule).
 * The version is the global step: sync applies step == version once per
 * step; async and ssp apply every worker's push, and the version becomes the
 * highest step applied + 1, so a (re)joining worker starts at the step the
 * job reached (not at the number of pushes). */
int wf_pss_apply(server *s, schunk *c, const float *grad, long contributors, long step)
{
	int nsl = s->nslots;
	wf_pss_values_writable(s, c);
	wf_optim_cfg o = s->cfg->optim;
	o.segs = c->nfsegs ? c->fsegs : NULL;
	o.frozen = c->nfsegs ? c->ffrozen : NULL;
	o.nsegs = c->nfsegs;
	int rc = wf_optim_apply(s->be, &o, step, c->count, c->values, grad,
				nsl > 0 ? c->slot[0] : NULL, nsl > 1 ? c->slot[1] : NULL,
				grad_scale(s, contributors));
	if (rc)
		wf_error("ps %d: optimizer on chunk %d failed: %s", s->cfg->index, c->gidx,
			 s->be->err.msg);
	c->version = WF_MAX(c->version, step + 1);
	return rc;
}

int wf_pss_take_frozen(schunk *c, const wf_ps_msg *m)
{
	c->nfsegs = 0;
	if (!(m->hdr.flags & WF_PS_FLAG_FROZEN))
		return 0;
	const uint8_t *p = m->frame[m->nframes - 1]; /* checked by wf_ps_msg_parse */
	int nr = (int)(m->size[m->nframes - 1] / 16);
	if (2 * nr + 2 > c->fcap) {
		size_t *segs = realloc(c->fsegs, sizeof(size_t) * (size_t)(2 * nr + 3));
		if (segs)
			c->fsegs = segs;
		unsigned char *fr = realloc(c->ffrozen, (size_t)(2 * nr + 3));
		if (fr)
			c->ffrozen = fr;
		if (!segs || !fr)
			return -1;
		c->fcap = 2 * nr + 2;
	}
	/* [0, b0) trained, [b0, e0) frozen, [e0, b1) trained, ... */
	int n = 0;
	size_t at = 0;
	for (int i = 0; i < nr; i++) {
		size_t b = (size_t)wf_ps_get_u64(p + 16 * i),
		       e = (size_t)wf_ps_get_u64(p + 16 * i + 8);
		if (b > at) {
			c->fsegs[n] = at;
			c->ffrozen[n++] = 0;
		}
		c->fsegs[n] = b;
		c->ffrozen[n++] = 1;
		at = e;
	}
	if (at < c->count) {
		c->fsegs[n] = at;
		c->ffrozen[n++] = 0;
	}
	c->fsegs[n] = c->count;
	c->nfsegs = n;
	return 0;
}

/* Required workers (wf_pss_required) that have not pushed chunk c, other than skip. */
int wf_pss_missing(const server *s, const schunk *c, int skip)
{
	int n = 0;
	for (int w = 0; w < s->nworkers; w++)
		if (w != skip && wf_pss_required(s, w) && !c->pushed[w])
			n++;
	return n;
}

int wf_pss_live(const server *s)
{
	int n = 0;
	for (int w = 0; w < s->nworkers; w++)
		n += s->workers[w].alive == 1;
	return n;
}

int wf_pss_quorum(const server *s, const schunk *c, int skip)
{
	return wf_pss_missing(s, c, skip) <= s->cfg->backup_workers &&
	       wf_pss_live(s) >= s->cfg->min_workers;
}

/* Sync: apply and answer once every required worker pushed, or all but
 * backup_workers of them: the sum then covers the pushes that are in (the
 * flush skips the others) and the scale is their count (with backup
 * servers: once they acknowledged the update too). */
void wf_pss_sync_try_complete(server *s, schunk *c)
{
	if (!c->ncontrib || !wf_pss_quorum(s, c, -1))
		return;
	long step = c->version;
	if (!c->direct) {
		wf_pss_osum_flush(s, &c->sum, 1);
		wf_pss_apply(s, c, c->sum.acc, c->contributors, step);
	}
	int want_state = 0;
	for (int w = 0; w < s->nworkers; w++)
		want_state |= c->held[w].used && c->held[w].want_state;
	osum *st = &s->state_sum;
	if (want_state && st->acc) {
		wf_pss_osum_flush(s, st, 1);
		if (st->added > 0) {
			float k = 1.0f / (float)st->added;
			for (size_t i = 0; i < s->nstate; i++)
				s->state[i] = st->acc[i] * k;
		}
		wf_pss_osum_reset(st, s->nworkers);
	}
	if (wf_pss_units_on(s))
		wf_pss_units_step_done(s, c); /* before pushed[] is cleared */
	long need = c->direct
			    ? 0
			    : wf_pss_replicate(s, c, c->sum.acc, c->contributors, step, want_state);
	memset(c->pushed, 0, (size_t)s->nworkers);
	wf_pss_osum_reset(&c->sum, s->nworkers);
	c->ncontrib = 0;
	c->contributors = 0;
	c->direct = 0;
	if (need) {
		for (int w = 0; w < s->nworkers; w++)
			c->held[w].need = c->held[w].used ? need : 0;
		wf_pss_answer_ready(s, c);
		return;
	}
	if (s->due) { /* answered after this batch of messages, first layers first */
		int k = (int)(c - s->chunks), seen = 0;
		for (int i = 0; i < s->ndue; i++)
			seen |= s->due[i] == k;
		if (!seen) {
			s->due[s->ndue++] = k;
			return;
		}
	}
	wf_pss_send_values(s, c, c->held, s->nworkers, 0);
	for (int w = 0; w < s->nworkers; w++)
		wf_pss_release(s, &c->held[w]);
}

void wf_pss_send_due(server *s)
{
	/* highest global index first: the parameters are laid out in reverse
	 * layer order; a handful at a time, so an insertion sort */
	for (int i = 1; i < s->ndue; i++)
		for (int j = i; j > 0 && s->chunks[s->due[j]].gidx > s->chunks[s->due[j - 1]].gidx;
		     j--) {
			int t = s->due[j];
			s->due[j] = s->due[j - 1];
			s->due[j - 1] = t;
		}
	for (int i = 0; i < s->ndue; i++) {
		schunk *c = &s->chunks[s->due[i]];
		wf_pss_send_values(s, c, c->held, s->nworkers, 0);
		for (int w = 0; w < s->nworkers; w++)
			wf_pss_release(s, &c->held[w]);
	}
	s->ndue = 0;
}

long wf_pss_slowest_step(const server *s)
{
	long m = -1;
	int any = 0;
	for (int w = 0; w < s->nworkers; w++) {
		if (s->workers[w].alive == 0)
			continue;
		if (!any || s->workers[w].last_step < m)
			m = s->workers[w].last_step;
		any = 1;
	}
	return m;
}

/* ssp: a push of step `step` is answered now; record how far it ran ahead
 * of the slowest live worker (the bound says: at most K). */
void wf_pss_ssp_answered(server *s, long step)
{
	long lead = step - wf_pss_slowest_step(s);
	if (lead > s->ssp_max_lead)
		s->ssp_max_lead = lead;
}

/* ssp: answer held pushes that are now within the staleness bound. */
void wf_pss_ssp_release(server *s)
{
	long slowest = wf_pss_slowest_step(s), bound = slowest + s->cfg->staleness;
	double now = wf_now();
	for (int i = 0; i < s->nchunks; i++) {
		schunk *c = &s->chunks[i];
		for (int w = 0; w < s->nworkers; w++) {
			held *h = &c->held[w];
			if (!h->used || h->step > bound || h->need > 0)
				continue;
			if (now - h->since > 0.5 && h->step > s->workers[w].ssp_logged) {
				s->workers[w].ssp_logged = h->step;
				wf_info("ps %d: ssp: worker %d waited %.1f s at step %ld until the "
					"slowest worker reached step %ld (staleness %d)",
					s->cfg->index, w, now - h->since, h->step, slowest,
					s->cfg->staleness);
			}
			wf_pss_ssp_answered(s, h->step);
			wf_pss_send_values(s, c, h, 1, 0);
			wf_pss_release(s, h);
		}
	}
}

void wf_pss_barrier_try_release(server *s)
{
	int arrived = 0;
	for (int w = 0; w < s->nworkers; w++) {
		if (wf_pss_required(s, w) && !s->workers[w].barrier.used)
			return;
		arrived += s->workers[w].barrier.used;
	}
	/* no quorum of strategy.min_workers: the training is done, and workers
	 * that ended or died at the end do not come back */
	if (!arrived)
		return;
	for (int w = 0; w < s->nworkers; w++) {
		held *h = &s->workers[w].barrier;
		if (!h->used)
			continue;
		wf_ps_hdr req = {.op = WF_PS_OP_BARRIER, .tag = h->tag, .step = h->step};
		wf_pss_send_ok(s, h->rid, h->rid_len, &req, h->step, 0);
		wf_pss_release(s, h);
	}
}

/* The job went back (the chief re-seeded or restored the servers): workers
 * waiting at the final barrier past the new step must train again from it,
 * so their barriers fail at once (they re-synchronise) instead of holding
 * the chief's next step forever. */
void wf_pss_barriers_rolled_back(server *s)
{
	long step = wf_pss_server_step(s);
	for (int w = 0; w < s->nworkers; w++) {
		held *b = &s->workers[w].barrier;
		if (!b->used || b->step <= step) /* a server without chunks: the restored step */
			continue;
		wf_ps_hdr req = {.op = WF_PS_OP_BARRIER, .tag = b->tag, .step = b->step};
		char why[160];
		snprintf(why, sizeof(why),
			 "the job went back to step %ld while worker %d waited at step %ld: "
			 "train from there",
			 step, w, b->step);
		wf_pss_send_error(s, b->rid, b->rid_len, &req, WF_ETRANSIENT, why);
		wf_pss_release(s, b);
	}
}

/* After membership changed: steps, barriers and ssp bounds may now complete. */
void wf_pss_membership_changed(server *s)
{
	wf_pss_units_pulls_ready(s);
	if (s->cfg->mode == WF_PS_MODE_SYNC)
		for (int i = 0; i < s->nchunks; i++)
			wf_pss_sync_try_complete(s, &s->chunks[i]);
	if (s->cfg->mode == WF_PS_MODE_SSP)
		wf_pss_ssp_release(s);
	wf_pss_barrier_try_release(s);
}
