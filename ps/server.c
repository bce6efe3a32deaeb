/* server.c: the parameter-server event loop, aggregation, membership and
 * shard checkpoints. Single-threaded: the ROUTER socket, the chunk store and
 * the optimizer backend are touched only by the loop. */
#include "ps/server.h"

#include "common/log.h"
#include "common/util.h"
#include "kernels/ops.h"
#include "ps/auth.h"
#include "ps/placement.h"
#include "ps/proto.h"
#include "ps/shard.h"

#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#define RID_MAX	   256
#define MAX_RECV   (2 + WF_PS_MAX_FRAMES) /* routing id + header + payload */
#define PATH_BYTES 4096

/* ZeroMQ status check: records file, line and zmq's own message. */
#define ZCHECK(call, what)                                                                         \
	do {                                                                                       \
		if ((call) < 0) {                                                                  \
			rc = wf_errf(err, WF_EINTERNAL, "%s:%d: %s: %s", __FILE__, __LINE__, what, \
				     zmq_strerror(zmq_errno()));                                   \
			goto cleanup;                                                              \
		}                                                                                  \
	} while (0)

/* ---- state ------------------------------------------------------------ */

/* A reply the server owes and sends later (sync completion, ssp bound, barrier). */
typedef struct held {
	int used;
	uint8_t rid[RID_MAX]; /* ROUTER routing id of the requester */
	size_t rid_len;
	uint32_t tag;
	uint16_t op;
	int want_state; /* reply carries the state frame */
	long step;	/* the step pushed */
	double since;	/* when it was held */
} held;

/* A chunk's values, shared with the replies that send them zero-copy:
 * one reference for the chunk, one per reply ZeroMQ has not sent yet
 * (released by its free callback, on ZeroMQ's I/O thread). The values are
 * changed in place only while the chunk holds the sole reference; otherwise
 * the chunk moves to a copy first, and the last reply frees the old buffer. */
typedef struct vbuf {
	atomic_int refs;
	float *data; /* [count] */
} vbuf;

typedef struct schunk {
	int gidx;	/* global chunk index */
	size_t offset;	/* floats */
	size_t count;	/* floats */
	vbuf *vb;	/* holds values */
	float *values;	/* [count] = vb->data */
	uint32_t crc;	/* CRC32C of values, valid when crc_ok */
	int crc_ok;	/* values unchanged since crc was computed */
	float *slot[2]; /* [count] optimizer slots */
	float *acc;	/* [count] sync gradient sum */
	long version;	/* steps applied = the step being aggregated */
	int initialized;
	int ncontrib;	   /* pushes summed into acc for `version` */
	long samples;	   /* samples behind acc */
	int direct;	   /* the single contribution was applied already */
	double first_push; /* seconds: first contribution to `version` */
	uint8_t *pushed;   /* [nworkers] */
	held *held;	   /* [nworkers] */
} schunk;

typedef struct worker {
	int alive;	  /* -1 never seen, 1 alive, 0 declared dead */
	double last_seen; /* seconds */
	long last_step;	  /* highest step pushed, -1 none */
	long stall_step;  /* step last reported stalled */
	double stall_log; /* when a stall of this worker was last logged */
	long ssp_logged;  /* ssp: last step whose long wait was logged */
	held barrier;
} worker;

typedef struct server {
	const wf_ps_server_cfg *cfg;
	void *zctx, *sock;
	wf_backend *be;
	wf_ps_placement pl;
	int nslots;
	int nchunks; /* owned */
	schunk *chunks;
	int *local;		   /* [pl.nchunks] global -> owned index or -1 */
	uint64_t *floats;	   /* [pl.nchunks] for the parser: 0 when not owned */
	wf_ps_shard_chunk *shards; /* [nchunks] views for checkpoints */
	wf_ps_limits lim;
	size_t nstate; /* state floats kept here (server 0 only) */
	float *state, *state_acc;
	int state_n, state_initialized;
	int nworkers;
	worker *workers;
	uint64_t pushes, pulls, bytes_in, bytes_out, rejected[WF_PS_REJECT__COUNT];
	uint64_t rejected_total;
	int held_count;
	uint64_t ssp_held; /* ssp: pushes whose reply waited for the bound */
	long ssp_max_lead; /* ssp: largest (step - slowest step) of an answered push */
	long restored_step;
	uint32_t incarnation; /* random per process: heartbeat replies carry it in aux */
	double start, last_stats, last_stall_check;
	int running;
	zmq_msg_t frames[MAX_RECV];
	wf_ps_scratch align[MAX_RECV]; /* aligned copies of misaligned payload frames */
	char text[PATH_BYTES];
} server;

/* ---- value buffers ------------------------------------------------------ */

/* A buffer of n floats (64-byte aligned) with one reference, or adopting
 * data (malloc'd, n floats) when not NULL. NULL when out of memory. */
static vbuf *vbuf_new(size_t n, float *data)
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

static void vbuf_unref(vbuf *b)
{
	if (b && atomic_fetch_sub(&b->refs, 1) == 1) {
		free(b->data);
		free(b);
	}
}

static void vbuf_zmq_free(void *data, void *hint)
{
	(void)data;
	vbuf_unref(hint);
}

/* Before changing c's values: move to a private copy if a reply still
 * sends the current ones; forget their CRC. Out of memory: change them in
 * place (such a reply then fails its checksum at the worker). */
static void values_writable(server *s, schunk *c)
{
	c->crc_ok = 0;
	if (atomic_load(&c->vb->refs) == 1)
		return;
	vbuf *nb = vbuf_new(c->count, NULL);
	if (!nb) {
		wf_warn("ps %d: out of memory copying chunk %d's values", s->cfg->index, c->gidx);
		return;
	}
	memcpy(nb->data, c->values, c->count * sizeof(float));
	vbuf_unref(c->vb);
	c->vb = nb;
	c->values = nb->data;
}

/* ---- sending ---------------------------------------------------------- */

/* Send a reply; with zc, frame 0 is zc's values, sent zero-copy with a
 * reference on zc; other frames are copied. */
static void send_raw(server *s, const uint8_t *rid, size_t rid_len, const uint8_t *hdr,
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
				vbuf_unref(zc);
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

static void reply_hdr(server *s, wf_ps_hdr *h, uint16_t op, uint32_t tag, uint32_t chunk, long step)
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

static void send_ok(server *s, const uint8_t *rid, size_t rid_len, const wf_ps_hdr *req, long step,
		    uint32_t aux)
{
	wf_ps_hdr h;
	uint8_t hb[WF_PS_HEADER_BYTES];
	reply_hdr(s, &h, req->op, req->tag, req->chunk, step);
	h.aux = aux;
	wf_ps_hdr_encode(&h, hb, NULL, NULL, 0);
	send_raw(s, rid, rid_len, hb, NULL, NULL, 0, NULL);
}

static void send_error(server *s, const uint8_t *rid, size_t rid_len, const wf_ps_hdr *req,
		       int code, const char *text)
{
	wf_ps_hdr h;
	uint8_t hb[WF_PS_HEADER_BYTES];
	const void *f[1] = {text};
	size_t sz[1] = {strlen(text)};
	reply_hdr(s, &h, req->op, req->tag, req->chunk, req->step);
	h.flags |= WF_PS_FLAG_ERROR;
	h.aux = (uint32_t)(-code);
	h.dtype = WF_PS_DTYPE_BYTES;
	wf_ps_hdr_encode(&h, hb, f, sz, 1);
	send_raw(s, rid, rid_len, hb, f, sz, 1, NULL);
}

static void send_errorf(server *s, const uint8_t *rid, size_t rid_len, const wf_ps_hdr *req,
			int code, int reason, const char *fmt, ...)
	__attribute__((format(printf, 7, 8)));
static void send_errorf(server *s, const uint8_t *rid, size_t rid_len, const wf_ps_hdr *req,
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
	send_error(s, rid, rid_len, req, code, text);
}

/* Values (and state) of chunk c to the held requesters or one requester.
 * The values go zero-copy from c's buffer (c->vb; a pseudo chunk without
 * one is copied) and their CRC is computed once per version of the values,
 * for every reply of that version; the state frame is copied. */
static void send_values(server *s, schunk *c, const held *to, int nto, int stale)
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
		reply_hdr(s, &h, r->op, r->tag, (uint32_t)c->gidx, c->version);
		h.dtype = WF_PS_DTYPE_F32;
		if (nf == 2)
			h.flags |= WF_PS_FLAG_STATE;
		if (stale)
			h.flags |= WF_PS_FLAG_STALE;
		wf_ps_hdr_encode_crc(&h, hb, *crc, sz[0] + (nf == 2 ? sz[1] : 0), nf);
		send_raw(s, r->rid, r->rid_len, hb, f, sz, nf, c->vb);
	}
}

static void hold(server *s, held *h, const uint8_t *rid, size_t rid_len, const wf_ps_hdr *req)
{
	h->used = 1;
	memcpy(h->rid, rid, rid_len);
	h->rid_len = rid_len;
	h->tag = req->tag;
	h->op = req->op;
	h->want_state = (req->flags & WF_PS_FLAG_STATE) != 0;
	h->step = req->step;
	h->since = wf_now();
	s->held_count++;
}

static void release(server *s, held *h)
{
	if (h->used)
		s->held_count--;
	h->used = 0;
}

/* Fail every held reply of chunk c (re-init, restore, shutdown). */
static void fail_held(server *s, schunk *c, int code, const char *why)
{
	for (int w = 0; w < s->nworkers; w++) {
		held *h = &c->held[w];
		if (!h->used)
			continue;
		wf_ps_hdr req = {
			.op = h->op, .tag = h->tag, .chunk = (uint32_t)c->gidx, .step = h->step};
		send_error(s, h->rid, h->rid_len, &req, code, why);
		release(s, h);
	}
	memset(c->pushed, 0, (size_t)s->nworkers);
	c->ncontrib = 0;
	c->samples = 0;
	c->direct = 0;
}

/* ---- aggregation -------------------------------------------------------- */

static float grad_scale(long samples)
{
	return samples > 0 ? 1.0f / (float)samples : 1.0f;
}

/* Apply a gradient of training step `step` (its learning-rate schedule).
 * The version is the global step: sync applies step == version once per
 * step; async and ssp apply every worker's push, and the version becomes the
 * highest step applied + 1, so a (re)joining worker starts at the step the
 * job reached (not at the number of pushes). */
static int apply(server *s, schunk *c, const float *grad, long samples, long step)
{
	int nsl = s->nslots;
	values_writable(s, c);
	int rc = wf_optim_apply(s->be, &s->cfg->optim, step, c->count, c->values, grad,
				nsl > 0 ? c->slot[0] : NULL, nsl > 1 ? c->slot[1] : NULL,
				grad_scale(samples));
	if (rc)
		wf_error("ps %d: optimizer on chunk %d failed: %s", s->cfg->index, c->gidx,
			 s->be->err.msg);
	c->version = WF_MAX(c->version, step + 1);
	return rc;
}

/* Required workers (not declared dead) that have not pushed chunk c, other than skip. */
static int missing(const server *s, const schunk *c, int skip)
{
	int n = 0;
	for (int w = 0; w < s->nworkers; w++)
		if (w != skip && s->workers[w].alive != 0 && !c->pushed[w])
			n++;
	return n;
}

/* Sync: apply and answer once every required worker pushed. */
static void sync_try_complete(server *s, schunk *c)
{
	if (!c->ncontrib || missing(s, c, -1))
		return;
	if (!c->direct)
		apply(s, c, c->acc, c->samples, c->version);
	int want_state = 0;
	for (int w = 0; w < s->nworkers; w++)
		want_state |= c->held[w].used && c->held[w].want_state;
	if (want_state && s->state_n > 0) {
		float k = 1.0f / (float)s->state_n;
		for (size_t i = 0; i < s->nstate; i++)
			s->state[i] = s->state_acc[i] * k;
		s->state_n = 0;
	}
	send_values(s, c, c->held, s->nworkers, 0);
	for (int w = 0; w < s->nworkers; w++)
		release(s, &c->held[w]);
	memset(c->pushed, 0, (size_t)s->nworkers);
	c->ncontrib = 0;
	c->samples = 0;
	c->direct = 0;
}

static long slowest_step(const server *s)
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
static void ssp_answered(server *s, long step)
{
	long lead = step - slowest_step(s);
	if (lead > s->ssp_max_lead)
		s->ssp_max_lead = lead;
}

/* ssp: answer held pushes that are now within the staleness bound. */
static void ssp_release(server *s)
{
	long slowest = slowest_step(s), bound = slowest + s->cfg->staleness;
	double now = wf_now();
	for (int i = 0; i < s->nchunks; i++) {
		schunk *c = &s->chunks[i];
		for (int w = 0; w < s->nworkers; w++) {
			held *h = &c->held[w];
			if (!h->used || h->step > bound)
				continue;
			if (now - h->since > 0.5 && h->step > s->workers[w].ssp_logged) {
				s->workers[w].ssp_logged = h->step;
				wf_info("ps %d: ssp: worker %d waited %.1f s at step %ld until the "
					"slowest worker reached step %ld (staleness %d)",
					s->cfg->index, w, now - h->since, h->step, slowest,
					s->cfg->staleness);
			}
			ssp_answered(s, h->step);
			send_values(s, c, h, 1, 0);
			release(s, h);
		}
	}
}

static void barrier_try_release(server *s)
{
	int arrived = 0;
	for (int w = 0; w < s->nworkers; w++) {
		if (s->workers[w].alive != 0 && !s->workers[w].barrier.used)
			return;
		arrived += s->workers[w].barrier.used;
	}
	if (!arrived)
		return;
	for (int w = 0; w < s->nworkers; w++) {
		held *h = &s->workers[w].barrier;
		if (!h->used)
			continue;
		wf_ps_hdr req = {.op = WF_PS_OP_BARRIER, .tag = h->tag, .step = h->step};
		send_ok(s, h->rid, h->rid_len, &req, h->step, 0);
		release(s, h);
	}
}

static long server_step(const server *s);

/* The job went back (the chief re-seeded or restored the servers): workers
 * waiting at the final barrier past the new step must train again from it,
 * so their barriers fail at once (they re-synchronise) instead of holding
 * the chief's next step forever. */
static void barriers_rolled_back(server *s)
{
	long step = server_step(s);
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
		send_error(s, b->rid, b->rid_len, &req, WF_ETRANSIENT, why);
		release(s, b);
	}
}

/* After membership changed: steps, barriers and ssp bounds may now complete. */
static void membership_changed(server *s)
{
	if (s->cfg->mode == WF_PS_MODE_SYNC)
		for (int i = 0; i < s->nchunks; i++)
			sync_try_complete(s, &s->chunks[i]);
	if (s->cfg->mode == WF_PS_MODE_SSP)
		ssp_release(s);
	barrier_try_release(s);
}

/* ---- ops -------------------------------------------------------------- */

/* The server's step: -1 before init, else the lowest chunk version. */
static long server_step(const server *s)
{
	long m = -1;
	for (int i = 0; i < s->nchunks; i++) {
		if (!s->chunks[i].initialized)
			return -1;
		if (m < 0 || s->chunks[i].version < m)
			m = s->chunks[i].version;
	}
	if (!s->nchunks)
		return s->restored_step >= 0 ? s->restored_step : 0;
	return m;
}

static void op_init(server *s, const uint8_t *rid, size_t rid_len, const wf_ps_msg *m)
{
	const wf_ps_hdr *h = &m->hdr;
	if (h->chunk == WF_PS_STATE_CHUNK) {
		memcpy(s->state, m->frame[0], m->size[0]);
		s->state_n = 0;
		s->state_initialized = 1;
		send_ok(s, rid, rid_len, h, h->step, 0);
		return;
	}
	schunk *c = &s->chunks[s->local[h->chunk]];
	fail_held(s, c, WF_ETRANSIENT, "chunk re-initialized while a push was pending");
	values_writable(s, c);
	memcpy(c->values, m->frame[0], m->size[0]);
	for (int k = 0; k < s->nslots; k++) {
		if (m->nframes > 1 + k)
			memcpy(c->slot[k], m->frame[1 + k], m->size[1 + k]);
		else
			memset(c->slot[k], 0, c->count * sizeof(float));
	}
	c->version = h->step > 0 ? (long)h->step : 0;
	c->initialized = 1;
	send_ok(s, rid, rid_len, h, c->version, 0);
	barriers_rolled_back(s);
}

static void op_push_pull(server *s, const uint8_t *rid, size_t rid_len, const wf_ps_msg *m, int w)
{
	const wf_ps_hdr *h = &m->hdr;
	schunk *c = &s->chunks[s->local[h->chunk]];
	if (WF_PS_SENDER_ROLE(h->sender) != WF_PS_ROLE_WORKER) {
		send_errorf(s, rid, rid_len, h, WF_EINVAL, WF_PS_REJECT_SENDER,
			    "push_pull needs role worker");
		return;
	}
	if (!c->initialized) {
		send_errorf(s, rid, rid_len, h, WF_ETRANSIENT, WF_PS_REJECT_STATE,
			    "chunk %d is not initialized: the chief must init it first", c->gidx);
		return;
	}
	if (c->held[w].used) {
		send_errorf(s, rid, rid_len, h, WF_EINVAL, WF_PS_REJECT_STATE,
			    "worker %d pushed chunk %d again before its reply", w, c->gidx);
		return;
	}
	if (s->cfg->mode == WF_PS_MODE_SYNC && c->pushed[w] && h->step == c->version) {
		/* a restarted worker pushes again what its previous process pushed
		 * already for this step: that gradient counts once, this one only
		 * waits for the step's values */
		hold(s, &c->held[w], rid, rid_len, h);
		sync_try_complete(s, c);
		return;
	}
	long samples = h->aux ? (long)h->aux : (s->cfg->batch > 0 ? s->cfg->batch : 1);
	const float *grad = m->frame[0];
	const float *st = (h->flags & WF_PS_FLAG_STATE) ? m->frame[1] : NULL;
	worker *wk = &s->workers[w];
	s->pushes++;
	if (s->cfg->mode != WF_PS_MODE_SYNC) {
		if (h->step > wk->last_step)
			wk->last_step = (long)h->step;
		apply(s, c, grad, samples, (long)h->step);
		if (st)
			memcpy(s->state, st, s->nstate * sizeof(float));
		held r = {0};
		hold(s, &r, rid, rid_len, h);
		if (s->cfg->mode == WF_PS_MODE_SSP &&
		    h->step > slowest_step(s) + s->cfg->staleness) {
			c->held[w] = r; /* answered by ssp_release */
			s->ssp_held++;
		} else {
			if (s->cfg->mode == WF_PS_MODE_SSP)
				ssp_answered(s, (long)h->step);
			send_values(s, c, &r, 1, 0);
			release(s, &r);
		}
		if (s->cfg->mode == WF_PS_MODE_SSP)
			ssp_release(s);
		return;
	}
	if (h->step < c->version) {
		held r = {0};
		hold(s, &r, rid, rid_len, h);
		send_values(s, c, &r, 1, 1);
		release(s, &r);
		return;
	}
	if (h->step > c->version) {
		send_errorf(s, rid, rid_len, h, WF_ETRANSIENT, WF_PS_REJECT_STATE,
			    "worker %d pushed step %lld but chunk %d is at step %ld (server "
			    "restored? roll back to the server's step)",
			    w, (long long)h->step, c->gidx, c->version);
		return;
	}
	if (h->step > wk->last_step)
		wk->last_step = (long)h->step;
	if (!c->ncontrib)
		c->first_push = wf_now();
	if (!c->ncontrib && !missing(s, c, w)) {
		apply(s, c, grad, samples, c->version); /* sole contributor: no copy */
		c->direct = 1;
	} else if (!c->ncontrib) {
		memcpy(c->acc, grad, c->count * sizeof(float));
	} else {
		wf_op_accumulate(s->be, c->count, c->acc, grad);
	}
	if (st) {
		if (!s->state_n)
			memcpy(s->state_acc, st, s->nstate * sizeof(float));
		else
			wf_op_accumulate(s->be, s->nstate, s->state_acc, st);
		s->state_n++;
	}
	c->pushed[w] = 1;
	c->ncontrib++;
	c->samples += samples;
	hold(s, &c->held[w], rid, rid_len, h);
	sync_try_complete(s, c);
}

static void op_pull(server *s, const uint8_t *rid, size_t rid_len, const wf_ps_msg *m)
{
	const wf_ps_hdr *h = &m->hdr;
	held r = {0};
	s->pulls++;
	if (h->chunk == WF_PS_STATE_CHUNK) {
		/* the state travels as the values of a pseudo chunk */
		schunk pseudo = {.gidx = (int)WF_PS_STATE_CHUNK,
				 .values = s->state,
				 .count = s->nstate,
				 .version = server_step(s)};
		hold(s, &r, rid, rid_len, h);
		r.want_state = 0;
		send_values(s, &pseudo, &r, 1, 0);
		release(s, &r);
		return;
	}
	schunk *c = &s->chunks[s->local[h->chunk]];
	if (!c->initialized) {
		send_errorf(s, rid, rid_len, h, WF_ETRANSIENT, WF_PS_REJECT_STATE,
			    "chunk %d is not initialized", c->gidx);
		return;
	}
	hold(s, &r, rid, rid_len, h);
	send_values(s, c, &r, 1, 0);
	release(s, &r);
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

static void op_checkpoint(server *s, const uint8_t *rid, size_t rid_len, const wf_ps_msg *m)
{
	const wf_ps_hdr *h = &m->hdr;
	char path[PATH_BYTES + 64];
	wf_err e = {0};
	if (m->nframes || h->step < 0) {
		send_errorf(s, rid, rid_len, h, WF_EINVAL, WF_PS_REJECT_BYTES,
			    "checkpoint takes a step >= 0 and no payload (a server writes only "
			    "under its own checkpoint.dir)");
		return;
	}
	if (!s->cfg->ckpt_dir) {
		send_errorf(s, rid, rid_len, h, WF_EINVAL, -1,
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
		send_error(s, rid, rid_len, h, rc, e.msg);
		return;
	}
	wf_info("ps %d: checkpoint step %lld written to %s (%.2f s)", s->cfg->index,
		(long long)h->step, path, wf_now() - t0);
	send_ok(s, rid, rid_len, h, h->step, 0);
}

/* Load the newest complete checkpoint (or want_step) from root into fresh
 * buffers, then swap them in: a failed restore leaves the server as it was. */
static int restore(server *s, const char *root, long want_step, long *step, wf_err *err)
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
		fail_held(s, c, WF_ETRANSIENT, "server restored from a checkpoint");
		vbuf *nb = vbuf_new(c->count, tmp[i].values);
		if (!nb) { /* cannot adopt: copy into the chunk's own buffer */
			values_writable(s, c);
			memcpy(c->values, tmp[i].values, c->count * sizeof(float));
		} else {
			tmp[i].values = NULL; /* adopted */
			vbuf_unref(c->vb);
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
	}
	if (s->nstate) {
		memcpy(s->state, st, s->nstate * sizeof(float));
		s->state_initialized = 1;
		s->state_n = 0;
	}
	s->restored_step = *step;
	barriers_rolled_back(s);
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

static void op_restore(server *s, const uint8_t *rid, size_t rid_len, const wf_ps_msg *m)
{
	const wf_ps_hdr *h = &m->hdr;
	wf_err e = {0};
	long step = -1;
	if (m->nframes) {
		send_errorf(s, rid, rid_len, h, WF_EINVAL, WF_PS_REJECT_BYTES,
			    "restore takes no payload (a server restores only from its own "
			    "checkpoint.dir)");
		return;
	}
	if (!s->cfg->ckpt_dir) {
		send_errorf(s, rid, rid_len, h, WF_EINVAL, -1,
			    "restore: this server has no checkpoint.dir");
		return;
	}
	int rc = restore(s, s->cfg->ckpt_dir, h->step >= 0 ? (long)h->step : -1, &step, &e);
	if (rc) {
		wf_error("ps %d: %s", s->cfg->index, e.msg);
		send_error(s, rid, rid_len, h, rc, e.msg);
		return;
	}
	send_ok(s, rid, rid_len, h, step, 0);
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
	st->version_min = server_step(s);
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
	memcpy(st->rejected, s->rejected, sizeof(st->rejected));
	st->staleness = s->cfg->mode == WF_PS_MODE_SSP ? s->cfg->staleness : -1;
	st->ssp_held = s->ssp_held;
	st->ssp_max_lead = s->ssp_max_lead;
}

static void op_stats(server *s, const uint8_t *rid, size_t rid_len, const wf_ps_hdr *h)
{
	wf_ps_stats st;
	long *steps = calloc((size_t)s->nworkers, sizeof(*steps));
	int *alive = calloc((size_t)s->nworkers, sizeof(*alive));
	char *json = NULL;
	wf_err e = {0};
	if (!steps || !alive) {
		send_error(s, rid, rid_len, h, WF_ENOMEM, "stats: out of memory");
		goto cleanup;
	}
	fill_stats(s, &st, steps, alive);
	if (wf_ps_stats_to_json(&st, &json, &e)) {
		send_error(s, rid, rid_len, h, e.code, e.msg);
		goto cleanup;
	}
	wf_ps_hdr r;
	uint8_t hb[WF_PS_HEADER_BYTES];
	const void *f[1] = {json};
	size_t sz[1] = {strlen(json)};
	reply_hdr(s, &r, h->op, h->tag, h->chunk, server_step(s));
	r.dtype = WF_PS_DTYPE_BYTES;
	wf_ps_hdr_encode(&r, hb, f, sz, 1);
	send_raw(s, rid, rid_len, hb, f, sz, 1, NULL);
cleanup:
	free(json);
	free(steps);
	free(alive);
}

static void log_stats(server *s)
{
	wf_ps_stats st;
	long *steps = calloc((size_t)s->nworkers, sizeof(*steps));
	int *alive = calloc((size_t)s->nworkers, sizeof(*alive));
	char line[2048];
	if (steps && alive) {
		fill_stats(s, &st, steps, alive);
		wf_ps_stats_format(&st, line, sizeof(line));
		wf_info("%s", line);
	}
	free(steps);
	free(alive);
}

/* ---- dispatch ----------------------------------------------------------- */

/* A worker registers at start and after a failure: replies still held for
 * it were owed to a request it no longer waits for (its process may even be
 * a new one), so they are dropped; what it pushed still counts. */
static void forget_replies(server *s, int w)
{
	for (int i = 0; i < s->nchunks; i++)
		release(s, &s->chunks[i].held[w]);
	release(s, &s->workers[w].barrier);
}

static void handle(server *s, int n, int overflow)
{
	const uint8_t *rid = zmq_msg_data(&s->frames[0]);
	size_t rid_len = zmq_msg_size(&s->frames[0]);
	const void *ptr[MAX_RECV];
	size_t size[MAX_RECV];
	wf_ps_msg m;
	wf_err e = {0};
	int reason = WF_PS_REJECT_FRAMES;
	if (rid_len > RID_MAX)
		return; /* not a ZeroMQ routing id */
	for (int i = 1; i < n; i++) {
		size[i - 1] = zmq_msg_size(&s->frames[i]);
		ptr[i - 1] = wf_ps_align(zmq_msg_data(&s->frames[i]), size[i - 1], &s->align[i]);
		if (!ptr[i - 1]) {
			wf_warn("ps %d: out of memory copying a %zu-byte payload: message dropped",
				s->cfg->index, size[i - 1]);
			return;
		}
	}
	int rc = overflow ? wf_errf(&e, WF_EFORMAT, "more than %d payload frames", WF_PS_MAX_FRAMES)
			  : wf_ps_msg_parse(&m, ptr, size, n - 1, &s->lim, &reason, &e);
	if (overflow) {
		memset(&m, 0, sizeof(m));
		if (size[0] == WF_PS_HEADER_BYTES)
			wf_ps_hdr_decode(&m.hdr, ptr[0]);
	}
	if (rc) {
		s->rejected[reason]++;
		s->rejected_total++;
		if (s->rejected_total <= 20 || !(s->rejected_total & (s->rejected_total - 1)))
			wf_warn("ps %d: rejected message (%s, %llu rejected so far): %s",
				s->cfg->index, wf_ps_reject_name(reason),
				(unsigned long long)s->rejected_total, e.msg);
		send_error(s, rid, rid_len, &m.hdr, WF_EFORMAT, e.msg);
		return;
	}
	const wf_ps_hdr *h = &m.hdr;
	int w = -1;
	if (WF_PS_SENDER_ROLE(h->sender) == WF_PS_ROLE_WORKER) {
		w = WF_PS_SENDER_INDEX(h->sender);
		worker *wk = &s->workers[w];
		wk->last_seen = wf_now();
		if (h->op == WF_PS_OP_REGISTER) {
			if (wk->alive == 0)
				wf_info("ps %d: worker %d registered again: it counts from now",
					s->cfg->index, w);
			forget_replies(s, w);
			wk->alive = 1;
			wk->stall_step = -1;
		} else if (wk->alive == 0) {
			send_errorf(s, rid, rid_len, h, WF_ETRANSIENT, WF_PS_REJECT_STATE,
				    "worker %d was declared dead (no heartbeat for %.1f s): "
				    "register again",
				    w, s->cfg->heartbeat_timeout);
			return;
		} else {
			wk->alive = 1;
		}
	}
	switch (h->op) {
	case WF_PS_OP_REGISTER:
		send_ok(s, rid, rid_len, h, server_step(s), (uint32_t)s->pl.nchunks);
		if (w >= 0)
			membership_changed(s);
		break;
	case WF_PS_OP_INIT: op_init(s, rid, rid_len, &m); break;
	case WF_PS_OP_PUSH_PULL: op_push_pull(s, rid, rid_len, &m, w); break;
	case WF_PS_OP_PULL: op_pull(s, rid, rid_len, &m); break;
	case WF_PS_OP_BARRIER:
		if (w < 0) {
			send_ok(s, rid, rid_len, h, h->step, 0);
			break;
		}
		if (s->nchunks && (long)h->step > server_step(s)) {
			send_errorf(s, rid, rid_len, h, WF_ETRANSIENT, WF_PS_REJECT_STATE,
				    "barrier at step %lld but the job is at step %ld (it went "
				    "back): train from there",
				    (long long)h->step, server_step(s));
			break;
		}
		if (s->workers[w].barrier.used)
			release(s, &s->workers[w].barrier); /* a retried barrier replaces */
		hold(s, &s->workers[w].barrier, rid, rid_len, h);
		barrier_try_release(s);
		break;
	case WF_PS_OP_CHECKPOINT: op_checkpoint(s, rid, rid_len, &m); break;
	case WF_PS_OP_RESTORE: op_restore(s, rid, rid_len, &m); break;
	case WF_PS_OP_STATS: op_stats(s, rid, rid_len, h); break;
	case WF_PS_OP_SHUTDOWN:
		wf_info("ps %d: shutdown requested", s->cfg->index);
		if (s->cfg->mode == WF_PS_MODE_SSP)
			wf_info("ps %d: ssp: %llu pushes waited for the staleness bound %d; the "
				"largest lead of an answered push over the slowest worker was %ld "
				"step(s)",
				s->cfg->index, (unsigned long long)s->ssp_held, s->cfg->staleness,
				s->ssp_max_lead);
		for (int i = 0; i < s->nchunks; i++)
			fail_held(s, &s->chunks[i], WF_ESTOPPED, "server shutting down");
		for (int v = 0; v < s->nworkers; v++) {
			held *b = &s->workers[v].barrier;
			if (b->used) {
				wf_ps_hdr req = {.op = WF_PS_OP_BARRIER, .tag = b->tag};
				send_error(s, b->rid, b->rid_len, &req, WF_ESTOPPED,
					   "server shutting down");
				release(s, b);
			}
		}
		send_ok(s, rid, rid_len, h, server_step(s), 0);
		s->running = 0;
		break;
	case WF_PS_OP_HEARTBEAT: send_ok(s, rid, rid_len, h, server_step(s), s->incarnation); break;
	default: break;
	}
}

/* Receive one multipart message into s->frames; returns frames stored, 0
 * when none is waiting, -1 on a socket error. */
static int recv_one(server *s, int *overflow)
{
	int n = 0, more = 1;
	*overflow = 0;
	while (more) {
		zmq_msg_t extra, *m = n < MAX_RECV ? &s->frames[n] : &extra;
		zmq_msg_init(m);
		if (zmq_msg_recv(m, s->sock, n == 0 ? ZMQ_DONTWAIT : 0) < 0) {
			zmq_msg_close(m);
			for (int i = 0; i < n; i++)
				zmq_msg_close(&s->frames[i]);
			return (n == 0 && zmq_errno() == EAGAIN) ? 0 : -1;
		}
		more = zmq_msg_more(m);
		s->bytes_in += zmq_msg_size(m);
		if (m == &extra) {
			zmq_msg_close(m);
			*overflow = 1;
		} else {
			n++;
		}
	}
	return n;
}

/* ---- timers ------------------------------------------------------------- */

static void check_heartbeats(server *s, double now)
{
	int changed = 0;
	if (s->cfg->heartbeat_timeout <= 0)
		return;
	for (int w = 0; w < s->nworkers; w++) {
		worker *wk = &s->workers[w];
		if (wk->alive != 1 || now - wk->last_seen <= s->cfg->heartbeat_timeout)
			continue;
		wk->alive = 0;
		release(s, &wk->barrier);
		wf_warn("ps %d: worker %d silent for %.1f s: declared dead, it leaves the "
			"aggregation count until it registers again",
			s->cfg->index, w, now - wk->last_seen);
		changed = 1;
	}
	if (changed)
		membership_changed(s);
}

/* Name live workers that owe pushes of a step others already pushed. */
static void check_stalls(server *s, double now)
{
	if (s->cfg->stall_timeout <= 0 || s->cfg->mode != WF_PS_MODE_SYNC)
		return;
	for (int w = 0; w < s->nworkers; w++) {
		worker *wk = &s->workers[w];
		if (wk->alive != 1)
			continue;
		char owed[512];
		size_t k = 0;
		int nowed = 0;
		long step = -1;
		double waited = 0;
		owed[0] = '\0';
		for (int i = 0; i < s->nchunks; i++) {
			schunk *c = &s->chunks[i];
			if (!c->ncontrib || c->pushed[w] ||
			    now - c->first_push < s->cfg->stall_timeout)
				continue;
			if (step < 0 || c->version < step)
				step = c->version;
			waited = WF_MAX(waited, now - c->first_push);
			if (k + 16 < sizeof(owed))
				k += (size_t)snprintf(owed + k, sizeof(owed) - k, "%s%d",
						      nowed ? "," : "", c->gidx);
			nowed++;
		}
		/* one line per stalled step, and at most one per worker every 10 s
		 * (a worker that keeps registering again must not flood the log) */
		if (!nowed || wk->stall_step == step || now - wk->stall_log < 10)
			continue;
		wk->stall_step = step;
		wk->stall_log = now;
		wf_warn("ps %d: stall: worker %d is alive (last message %.1f s ago) but has not "
			"pushed step %ld for %.1f s; chunks owed (%d): %s%s",
			s->cfg->index, w, now - wk->last_seen, step, waited, nowed, owed,
			k + 16 >= sizeof(owed) ? ",..." : "");
	}
}

/* ---- set-up ------------------------------------------------------------- */

static int server_init(server *s, const wf_ps_server_cfg *cfg, wf_err *err)
{
	int rc;
	memset(s, 0, sizeof(*s));
	s->cfg = cfg;
	s->restored_step = -1;
	if (cfg->nservers < 1 || cfg->index < 0 || cfg->index >= cfg->nservers)
		return wf_errf(err, WF_EINVAL, "ps: server index %d not in [0, %d)", cfg->index,
			       cfg->nservers);
	if (cfg->nworkers < 1 || cfg->nworkers > 0xffffff)
		return wf_errf(err, WF_EINVAL, "ps: nworkers %d out of range", cfg->nworkers);
	if (cfg->mode == WF_PS_MODE_SSP && cfg->staleness < 0)
		return wf_errf(err, WF_EINVAL, "ps: ssp staleness %d < 0", cfg->staleness);
	if ((rc = wf_ps_place(&s->pl, cfg->views, cfg->nviews, cfg->nparams, cfg->nservers,
			      cfg->chunk_bytes, err)))
		return rc;
	const char *bname = cfg->backend;
	if (!bname)
		bname = strstr(wf_backend_list(), "cpu") ? "cpu" : "ref";
	if ((rc = wf_backend_create(&s->be, bname, cfg->threads > 0 ? cfg->threads : 1, err)))
		return rc;
	s->nslots = wf_optim_slots(&cfg->optim);
	s->nworkers = cfg->nworkers;
	s->nchunks = wf_ps_placement_count(&s->pl, cfg->index);
	s->nstate = cfg->index == 0 ? cfg->nstate : 0;
	s->chunks = calloc((size_t)s->nchunks + 1, sizeof(*s->chunks));
	s->shards = calloc((size_t)s->nchunks + 1, sizeof(*s->shards));
	s->local = malloc((size_t)s->pl.nchunks * sizeof(*s->local));
	s->floats = calloc((size_t)s->pl.nchunks, sizeof(*s->floats));
	s->workers = calloc((size_t)s->nworkers, sizeof(*s->workers));
	if (s->nstate) {
		s->state = calloc(s->nstate, sizeof(float));
		s->state_acc = calloc(s->nstate, sizeof(float));
	}
	if (!s->chunks || !s->shards || !s->local || !s->floats || !s->workers ||
	    (s->nstate && (!s->state || !s->state_acc)))
		return wf_errf(err, WF_ENOMEM, "ps: out of memory");
	for (int w = 0; w < s->nworkers; w++)
		s->workers[w] =
			(worker){.alive = -1, .last_step = -1, .stall_step = -1, .ssp_logged = -1};
	int k = 0;
	for (int g = 0; g < s->pl.nchunks; g++) {
		const wf_ps_chunk *pc = &s->pl.chunks[g];
		s->local[g] = -1;
		if (pc->server != cfg->index)
			continue;
		schunk *c = &s->chunks[k];
		c->gidx = g;
		c->offset = pc->offset;
		c->count = pc->count;
		c->vb = vbuf_new(c->count, NULL);
		c->values = c->vb ? c->vb->data : NULL;
		c->acc = calloc(c->count, sizeof(float));
		for (int j = 0; j < s->nslots; j++)
			c->slot[j] = calloc(c->count, sizeof(float));
		c->pushed = calloc((size_t)s->nworkers, 1);
		c->held = calloc((size_t)s->nworkers, sizeof(*c->held));
		if (!c->values || !c->acc || !c->pushed || !c->held ||
		    (s->nslots > 0 && !c->slot[0]) || (s->nslots > 1 && !c->slot[1]))
			return wf_errf(err, WF_ENOMEM,
				       "ps: out of memory for chunk %d (%zu floats)", g, c->count);
		s->local[g] = k++;
		s->floats[g] = c->count;
	}
	s->lim = (wf_ps_limits){.job_id = cfg->job_id,
				.nchunks = (uint32_t)s->pl.nchunks,
				.chunk_floats = s->floats,
				.state_floats = s->nstate,
				.nslots = s->nslots,
				.nworkers = cfg->nworkers};
	return 0;
}

static void server_free(server *s)
{
	for (int i = 0; s->chunks && i < s->nchunks; i++) {
		schunk *c = &s->chunks[i];
		vbuf_unref(c->vb);
		free(c->acc);
		free(c->slot[0]);
		free(c->slot[1]);
		free(c->pushed);
		free(c->held);
	}
	for (int i = 0; i < MAX_RECV; i++)
		wf_ps_scratch_free(&s->align[i]);
	free(s->chunks);
	free(s->shards);
	free(s->local);
	free(s->floats);
	free(s->workers);
	free(s->state);
	free(s->state_acc);
	wf_ps_placement_free(&s->pl);
	wf_backend_free(s->be);
}

void wf_ps_server_cfg_default(wf_ps_server_cfg *c)
{
	memset(c, 0, sizeof(*c));
	c->bind = "tcp://*:2222";
	c->nservers = 1;
	c->nworkers = 1;
	c->mode = WF_PS_MODE_SYNC;
	wf_optim_cfg_default(&c->optim);
	c->heartbeat_timeout = 60;
	c->stall_timeout = 120;
	c->stats_every = 30;
}

int wf_ps_mode_parse(const char *str, wf_ps_mode *mode, int *staleness, wf_err *err)
{
	*staleness = 0;
	if (!strcmp(str, "sync")) {
		*mode = WF_PS_MODE_SYNC;
		return 0;
	}
	if (!strcmp(str, "async")) {
		*mode = WF_PS_MODE_ASYNC;
		return 0;
	}
	if (!strncmp(str, "ssp:", 4)) {
		char *end;
		long k = strtol(str + 4, &end, 10);
		if (end != str + 4 && !*end && k >= 0 && k < 1000000) {
			*mode = WF_PS_MODE_SSP;
			*staleness = (int)k;
			return 0;
		}
	}
	return wf_errf(err, WF_EINVAL, "strategy.mode: \"%s\" is not sync, async or ssp:K (K >= 0)",
		       str);
}

int wf_ps_server_run(const wf_ps_server_cfg *cfg, wf_err *err)
{
	server *s = calloc(1, sizeof(*s));
	wf_ps_zap *zap = NULL;
	int rc = 0, linger = 0;
	if (!s)
		return wf_errf(err, WF_ENOMEM, "ps: out of memory");
	if ((rc = server_init(s, cfg, err)))
		goto cleanup;
	if (cfg->ckpt_dir && wf_exists(cfg->ckpt_dir)) {
		long step;
		wf_err e = {0};
		rc = restore(s, cfg->ckpt_dir, -1, &step, &e);
		if (rc && rc != WF_EIO) {
			wf_errf(err, rc, "%s", e.msg);
			goto cleanup;
		}
		if (rc)
			wf_info("ps %d: nothing to restore: %s", cfg->index, e.msg);
		rc = 0;
	}
	wf_ps_tune_malloc();
	ZCHECK((s->zctx = zmq_ctx_new()) ? 0 : -1, "zmq_ctx_new");
	if (cfg->keys) /* decryption runs per connection on the I/O threads */
		zmq_ctx_set(s->zctx, ZMQ_IO_THREADS, WF_PS_CURVE_STRIPES);
	ZCHECK((s->sock = zmq_socket(s->zctx, ZMQ_ROUTER)) ? 0 : -1, "zmq_socket(ROUTER)");
	ZCHECK(zmq_setsockopt(s->sock, ZMQ_LINGER, &linger, sizeof(linger)), "ZMQ_LINGER");
	if (cfg->keys) {
		if ((rc = wf_ps_curve_check(err)) ||
		    (rc = wf_ps_zap_start(&zap, s->zctx, cfg->keys, cfg->index, err)) ||
		    (rc = wf_ps_curve_server(s->sock, cfg->keys, err)))
			goto cleanup;
	} else {
		wf_warn("ps %d: --insecure: plain TCP, no authentication: anyone who reaches %s "
			"can read and overwrite the model",
			cfg->index, cfg->bind);
	}
	const char *bound = cfg->bind, *colon = strrchr(cfg->bind, ':');
	char any[64];
	int ok = zmq_bind(s->sock, cfg->bind) == 0;
	if (!ok && zmq_errno() == EADDRNOTAVAIL && colon) {
		/* the TF_CONFIG address is not one of this host's (a Service's
		 * virtual IP, NAT): listen on every interface, as TensorFlow's
		 * servers do; CURVE still admits only the cluster's keys */
		snprintf(any, sizeof(any), "tcp://*%s", colon);
		wf_warn("ps %d: %s is not an address of this host; listening on %s", cfg->index,
			cfg->bind, any);
		bound = any;
		ok = zmq_bind(s->sock, any) == 0;
	}
	if (!ok) {
		rc = wf_errf(err, WF_ETRANSIENT, "ps %d: cannot bind %s: %s", cfg->index, bound,
			     zmq_strerror(zmq_errno()));
		goto cleanup;
	}
	wf_info("ps %d/%d: listening on %s (%s): %d of %d chunks (%zu floats), %d workers, mode "
		"%s",
		cfg->index, cfg->nservers, bound, cfg->keys ? "CURVE" : "plain TCP", s->nchunks,
		s->pl.nchunks, s->pl.load[cfg->index], cfg->nworkers,
		cfg->mode == WF_PS_MODE_SYNC	? "sync"
		: cfg->mode == WF_PS_MODE_ASYNC ? "async"
						: "ssp");
	s->start = s->last_stats = s->last_stall_check = wf_now();
	s->incarnation = (uint32_t)wf_hash3((uint64_t)getpid(), (uint64_t)(s->start * 1e6),
					    (uint64_t)cfg->index) |
			 1u; /* never 0: 0 means "not known" to clients */
	s->running = 1;
	while (s->running) {
		if (cfg->stop && *cfg->stop) {
			rc = wf_errf(err, WF_ESTOPPED, "ps %d: stopped by signal", cfg->index);
			break;
		}
		zmq_pollitem_t item = {.socket = s->sock, .events = ZMQ_POLLIN};
		if (zmq_poll(&item, 1, 50) < 0 && zmq_errno() != EINTR) {
			rc = wf_errf(err, WF_EINTERNAL, "ps %d: zmq_poll: %s", cfg->index,
				     zmq_strerror(zmq_errno()));
			break;
		}
		for (int k = 0; k < 256 && s->running; k++) {
			int overflow, n = recv_one(s, &overflow);
			if (n <= 0)
				break;
			handle(s, n, overflow);
			for (int i = 0; i < n; i++)
				zmq_msg_close(&s->frames[i]);
		}
		double now = wf_now();
		check_heartbeats(s, now);
		if (now - s->last_stall_check > 0.1) {
			check_stalls(s, now);
			s->last_stall_check = now;
		}
		if (cfg->stats_every > 0 && now - s->last_stats >= cfg->stats_every) {
			log_stats(s);
			s->last_stats = now;
		}
	}
	linger = 2000; /* let the shutdown reply leave */
	zmq_setsockopt(s->sock, ZMQ_LINGER, &linger, sizeof(linger));
cleanup:
	if (s->sock)
		zmq_close(s->sock);
	wf_ps_zap_stop(zap);
	if (s->zctx)
		zmq_ctx_term(s->zctx);
	server_free(s);
	free(s);
	return rc;
}
