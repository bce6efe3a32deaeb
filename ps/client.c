/* client.c: DEALER sockets to the parameter servers, request tracking by
 * tag, reply validation, and the optional heartbeat thread. */
#include "ps/client.h"

#include "common/cancel.h"
#include "common/log.h"
#include "common/util.h"
#include "ps/auth.h"

#include <errno.h>
#include <limits.h>
#include <netdb.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

/* One outstanding request. Slots: chunk k uses slot k, the state pseudo
 * chunk slot nchunks, server-wide ops of server s slot nchunks + 1 + s. */
typedef struct pending {
	int used, done;
	int server;
	uint32_t tag;
	uint16_t op;
	uint32_t chunk;
	long step;	 /* request step */
	int rc;		 /* reply status */
	char msg[1024];	 /* error text of the reply */
	long reply_step; /* step field of the reply */
	int stale;
	uint32_t aux;	 /* aux of the reply (backup workers: the next data unit + 1) */
	int nunits;	 /* units in the reply's unit list (in the client's ulist); 0 none */
	uint32_t inc;	 /* the server's incarnation when sent (0: not known yet) */
	uint32_t closed; /* its connections closed when sent (handshakes.closed,
			  * one less when it was down then: it failed at once) */
	/* replication: how to send it again */
	const float *grads;    /* push: the gradient buffer */
	int with_state;	       /* push: carries the state */
	int again;	       /* AGAIN_*: send it again, not done */
	int again_to;	       /* AGAIN_REDIRECT: the primary named, -1 none */
	uint32_t primary_bits; /* register's reply: the groups the server is primary of */
	double again_at;       /* not before (seconds) */
	int held;	       /* priority: a push waiting in the client, not sent yet */
} pending;

/* Priority: a push's data frame while ZeroMQ holds it. ZeroMQ calls
 * pushed_out on its I/O thread once the frame's bytes are in the kernel. */
typedef struct sent_tok {
	_Atomic int64_t *queued; /* the server's bytes in ZeroMQ */
	int64_t bytes;
	atomic_int live; /* counted in *queued, not yet out */
	int wake;	 /* an eventfd the client's waits poll */
} sent_tok;

enum { AGAIN_NO, AGAIN_REDIRECT, AGAIN_FAILOVER, AGAIN_SAME };

/* What a server's connections said. During a register: a security-mode
 * mismatch or a refusal of the keys is a misconfiguration, not an absent
 * server, and fails register at once instead of after connect_timeout
 * (each register starts these counts again). Always: a connection the
 * server closed (its process ended) loses the requests sent before it. */
typedef struct handshakes {
	int succeeded;	 /* a CURVE/NULL handshake completed */
	int mechanism;	 /* the peer speaks another mechanism (CURVE vs plain TCP) */
	int refused;	 /* the server's authenticator refused our client key */
	int dropped;	 /* connected, then dropped before a handshake completed */
	uint32_t closed; /* connections that ended after their handshake */
	int down;	 /* the last such event was an ended connection */
	unsigned up;	 /* bit k % nstripes: socket k's handshake completed */
} handshakes;

struct wf_ps_client {
	wf_ps_client_cfg cfg;
	char **endpoints;
	void *zctx;
	void **socks; /* [nservers * nstripes]: server s's stripe j at s * nstripes + j */
	int nstripes; /* connections per server: CURVE's crypto runs per connection on
		       * ZeroMQ's I/O threads, so chunks spread over several */
	int cap;
	pending *pend;
	long *ulist; /* [WF_PS_UNITS_MAX_LIST] the last unit list a reply carried; NULL
		      * until one came */
	uint32_t gen;
	uint64_t *floats; /* [nchunks] */
	/* [nchunks] a push's frozen frame (u64 pairs), NULL: nothing frozen there */
	uint8_t **frozen;
	size_t *frozen_bytes;
	wf_ps_limits lim;
	int stale;
	wf_ps_stats *stats_out;
	pthread_t hb;
	int hb_started;
	int fail_fast;	  /* wait_slots stops at the first refusal (barriers) */
	int cancelable;	  /* wait_slots gives up on a stop signal (common/cancel.h): in a
			   * register, and where the caller asks (a worker's start) */
	int flushing;	  /* wait_slots stops once no push is held (wf_ps_client_flush) */
	wf_ps_keys keys;  /* when secure */
	char *key_origin; /* cfg.key_origin, copied; NULL: none */
	char optim[1024]; /* wf_optim_describe of cfg.optim; "": none */
	int secure;
	atomic_int hb_stop;
	_Atomic uint32_t *inc; /* [nservers] incarnation in the last heartbeat reply, 0 none */
	_Atomic int64_t *seen; /* [nservers] ms (wf_now) of the last heartbeat reply, 0 none */
	uint8_t *heard;	       /* [nservers] 1 once server s answered a request */
	double server_timeout; /* seconds of heartbeat silence that make a server gone */
	void **mons;	       /* [nservers * nstripes] PAIR: each socket's connection events */
	handshakes *hs;	       /* [nservers] what each server's connections said */
	int *route;	       /* [nservers] group g's requests go to server route[g] */
	struct {	       /* what wf_ps_client_init sends, while it runs */
		const float *params, *const *slots, *state;
		long step;
	} init;
	int replicas;	/* cfg.replicas, at least 1 */
	uint16_t *bf16; /* [nparams] compression bf16: the pushed gradients, NULL: none */
	/* compression topk (NULL otherwise): what the pushes have not carried
	 * yet [nparams], each chunk's last push (8 * topk_k[k] bytes at
	 * topk_at[k]: sent again as it is on a redirect or failover), and the
	 * selection's scratch (the largest chunk's floats) */
	float *resid;
	uint8_t *sparse;
	size_t *topk_at, *topk_k; /* [nchunks] bytes, entries */
	float *mag;
	int send_ms; /* ZMQ_SNDTIMEO of every socket now (milliseconds) */
	/* priority by layer (cfg.priority_bytes > 0), else NULL */
	_Atomic int64_t *queued;     /* [nservers] bytes of pushes ZeroMQ still holds */
	sent_tok *tok;		     /* [nchunks] */
	int nheld;		     /* pushes waiting in the client */
	int wake;		     /* eventfd: ZeroMQ let a push go (-1: none) */
	long top_step;		     /* the step of the last chunk's last push, -1 none */
	double *sent_at, *landed_at; /* [nchunks] wf_now() of the last push sent, reply read */
	zmq_msg_t frames[1 + WF_PS_MAX_FRAMES];
};

static int nchunks_of(const wf_ps_client *c)
{
	return c->cfg.pl ? c->cfg.pl->nchunks : 0;
}

/* compression topk: each chunk's entry count and place in c->sparse, the
 * residual (zero) and the selection scratch, once. */
static int topk_plan(wf_ps_client *c)
{
	const wf_ps_placement *pl = c->cfg.pl;
	int nc = nchunks_of(c);
	size_t bytes = 0, most = 1;
	c->topk_at = calloc((size_t)nc + 1, sizeof(*c->topk_at));
	c->topk_k = calloc((size_t)nc + 1, sizeof(*c->topk_k));
	if (!c->topk_at || !c->topk_k)
		return WF_ENOMEM;
	for (int k = 0; k < nc; k++) {
		c->topk_k[k] = wf_ps_topk_count(c->cfg.topk, pl->chunks[k].count);
		c->topk_at[k] = bytes;
		bytes += 8 * c->topk_k[k];
		most = WF_MAX(most, pl->chunks[k].count);
	}
	c->resid = calloc(pl->nparams ? pl->nparams : 1, sizeof(*c->resid));
	c->sparse = malloc(bytes ? bytes : 1);
	c->mag = malloc(most * sizeof(*c->mag));
	return c->resid && c->sparse && c->mag ? 0 : WF_ENOMEM;
}

/* Each chunk's frozen frame from cfg.segs/frozen: the frozen segments that
 * overlap it, clipped, chunk-relative. */
static int frozen_frames(wf_ps_client *c)
{
	const wf_ps_client_cfg *cfg = &c->cfg;
	int nc = nchunks_of(c);
	if (!cfg->frozen || !cfg->segs || !nc)
		return 0;
	c->frozen = calloc((size_t)nc, sizeof(*c->frozen));
	c->frozen_bytes = calloc((size_t)nc, sizeof(*c->frozen_bytes));
	if (!c->frozen || !c->frozen_bytes)
		return WF_ENOMEM;
	for (int k = 0; k < nc; k++) {
		size_t lo = cfg->pl->chunks[k].offset, hi = lo + cfg->pl->chunks[k].count, n = 0;
		for (int pass = 0; pass < 2; pass++) { /* count, then fill */
			n = 0;
			for (int s = 0; s < cfg->nsegs; s++) {
				size_t b = WF_MAX(cfg->segs[s], lo),
				       e = WF_MIN(cfg->segs[s + 1], hi);
				if (!cfg->frozen[s] || b >= e)
					continue;
				if (pass && n &&
				    wf_ps_get_u64(c->frozen[k] + 16 * (n - 1) + 8) == b - lo) {
					/* adjacent frozen segments: one range */
					wf_ps_put_u64(c->frozen[k] + 16 * (n - 1) + 8, e - lo);
					continue;
				}
				if (pass) {
					wf_ps_put_u64(c->frozen[k] + 16 * n, b - lo);
					wf_ps_put_u64(c->frozen[k] + 16 * n + 8, e - lo);
				}
				n++;
			}
			if (!pass && n && !(c->frozen[k] = malloc(16 * n)))
				return WF_ENOMEM;
			if (!n)
				break;
		}
		c->frozen_bytes[k] = 16 * n;
	}
	return 0;
}

/* The server chunk k's requests go to now (the state: group 0's). */
static int server_of(const wf_ps_client *c, uint32_t chunk)
{
	int g = chunk == WF_PS_STATE_CHUNK ? 0 : c->cfg.pl->chunks[chunk].server;
	return c->route[g];
}

static int slot_server(const wf_ps_client *c, int s)
{
	return nchunks_of(c) + 1 + s;
}

/* The socket a request of slot to server s goes through: chunks spread over
 * the server's stripes, everything else takes stripe 0. */
static void *sock_for(const wf_ps_client *c, int s, int slot)
{
	int j = slot < nchunks_of(c) ? slot % c->nstripes : 0;
	return c->socks[s * c->nstripes + j];
}

/* ---- sending ------------------------------------------------------------ */

/* Bound every send (ZMQ_SNDTIMEO): a DEALER whose only connection was
 * dropped (a failed handshake) blocks a send until a connection exists. */
static void set_send_timeout(wf_ps_client *c, double seconds)
{
	int ms = seconds * 1000 > INT_MAX ? INT_MAX : (int)(seconds * 1000);
	if (ms < 1)
		ms = 1;
	if (ms == c->send_ms)
		return;
	for (int k = 0; k < c->cfg.nservers * c->nstripes; k++)
		if (c->socks[k])
			zmq_setsockopt(c->socks[k], ZMQ_SNDTIMEO, &ms, sizeof(ms));
	c->send_ms = ms;
}

static void req_hdr(const wf_ps_client *c, wf_ps_hdr *h, uint16_t op, uint32_t chunk, long step)
{
	memset(h, 0, sizeof(*h));
	h->version = WF_PS_VERSION;
	h->op = op;
	h->sender = WF_PS_SENDER(c->cfg.role, c->cfg.index);
	h->job_id = c->cfg.job_id;
	h->chunk = chunk;
	h->step = step;
}

static void pushed_out(void *data, void *hint)
{
	sent_tok *t = hint;
	(void)data;
	atomic_fetch_sub(t->queued, t->bytes);
	atomic_store(&t->live, 0);
	uint64_t one = 1;
	if (write(t->wake, &one, sizeof(one)) < 0) { /* full: a wake-up is pending anyway */
	}
}

/* Send a request's frames; with tok (zero-copy only), frame 0 is counted in
 * *tok->queued until ZeroMQ lets it go. */
static int send_frames(void *sock, const uint8_t *hb, const void *const *f, const size_t *sz,
		       int nf, int zero_copy, sent_tok *tok)
{
	if (zmq_send(sock, hb, WF_PS_HEADER_BYTES, nf ? ZMQ_SNDMORE : 0) < 0)
		return -1;
	for (int i = 0; i < nf; i++) {
		zmq_msg_t m;
		int rc;
		if (zero_copy && i == 0 && tok) {
			atomic_store(&tok->live, 1);
			atomic_fetch_add(tok->queued, tok->bytes);
			rc = zmq_msg_init_data(&m, (void *)f[i], sz[i], pushed_out, tok);
			if (rc < 0)
				pushed_out(NULL, tok);
		} else if (zero_copy) {
			rc = zmq_msg_init_data(&m, (void *)f[i], sz[i], NULL, NULL);
		} else {
			rc = zmq_msg_init_size(&m, sz[i]);
			if (!rc)
				memcpy(zmq_msg_data(&m), f[i], sz[i]);
		}
		if (rc < 0)
			return -1;
		if (zmq_msg_send(&m, sock, i + 1 < nf ? ZMQ_SNDMORE : 0) < 0) {
			zmq_msg_close(&m);
			return -1;
		}
	}
	return 0;
}

/* Send request h (+ frames) to server s tracked in slot. */
static int send_req(wf_ps_client *c, int s, int slot, wf_ps_hdr *h, const void *const *f,
		    const size_t *sz, int nf, int zero_copy, wf_err *err)
{
	pending *p = &c->pend[slot];
	if (p->used && !p->done)
		return wf_errf(err, WF_EINVAL,
			       "ps client: a %s for %s is already outstanding on ps %d (%s)",
			       wf_ps_op_name(p->op),
			       slot < nchunks_of(c) ? "this chunk" : "this server", s,
			       c->endpoints[s]);
	uint32_t span = UINT32_MAX / (uint32_t)c->cap;
	c->gen = c->gen % span + 1;
	h->tag = (uint32_t)slot + (uint32_t)c->cap * (c->gen % span);
	uint8_t hb[WF_PS_HEADER_BYTES];
	wf_ps_hdr_encode(h, hb, f, sz, nf);
	*p = (pending){.used = 1,
		       .server = s,
		       .tag = h->tag,
		       .op = h->op,
		       .chunk = h->chunk,
		       .step = (long)h->step,
		       .reply_step = -1,
		       .inc = c->inc ? atomic_load(&c->inc[s]) : 0,
		       .closed = c->hs[s].closed - (uint32_t)c->hs[s].down};
	sent_tok *tok = NULL;
	int push = h->op == WF_PS_OP_PUSH_PULL && slot < nchunks_of(c);
	if (c->tok && push && zero_copy && nf > 0 &&
	    !atomic_load(&c->tok[slot].live)) { /* a resend while ZeroMQ holds the
						 * last one goes uncounted */
		tok = &c->tok[slot];
		tok->queued = &c->queued[s];
		tok->bytes = (int64_t)sz[0];
		tok->wake = c->wake;
	}
	if (c->sent_at && push)
		c->sent_at[slot] = wf_now();
	if (send_frames(sock_for(c, s, slot), hb, f, sz, nf, zero_copy, tok) < 0) {
		int again = zmq_errno() == EAGAIN;
		p->used = 0;
		if (again)
			return wf_errf(
				err, WF_ETRANSIENT,
				"ps %d (%s): sending %s: no connection took it within %.1f s", s,
				c->endpoints[s], wf_ps_op_name(h->op), c->send_ms / 1000.0);
		return wf_errf(err, WF_ETRANSIENT, "ps %d (%s): sending %s failed: %s", s,
			       c->endpoints[s], wf_ps_op_name(h->op), zmq_strerror(zmq_errno()));
	}
	return 0;
}

/* ---- receiving ---------------------------------------------------------- */

static void read_handshakes(wf_ps_client *c);

static void apply_reply(wf_ps_client *c, pending *p, const wf_ps_msg *m)
{
	const wf_ps_hdr *h = &m->hdr;
	if ((h->flags & WF_PS_FLAG_REDIRECT) && c->replicas > 1 && p->op != WF_PS_OP_REGISTER) {
		/* not the primary (or still joining): ask where it says */
		p->again = AGAIN_REDIRECT;
		p->again_to = (int)h->step;
		p->again_at = wf_now() + (h->step < 0 ? 0.1 : 0);
		return;
	}
	p->done = 1;
	p->reply_step = (long)h->step;
	if (h->flags & WF_PS_FLAG_ERROR) {
		int code = -(int)h->aux;
		p->rc = (code <= WF_EINVAL && code >= WF_ESTOPPED) ? code : WF_EINTERNAL;
		size_t n = m->nframes ? WF_MIN(m->size[0], sizeof(p->msg) - 1) : 0;
		if (n)
			memcpy(p->msg, m->frame[0], n);
		p->msg[n] = '\0';
		return;
	}
	p->stale = (h->flags & WF_PS_FLAG_STALE) != 0;
	p->aux = h->aux;
	if (h->op == WF_PS_OP_REGISTER)
		p->primary_bits = h->aux;
	if (h->op == WF_PS_OP_PUSH_PULL || h->op == WF_PS_OP_PULL) {
		/* values are checked while they are copied (one pass): a bad reply
		 * leaves the chunk's values undefined and fails the request */
		float *dst = h->chunk == WF_PS_STATE_CHUNK
				     ? c->cfg.state
				     : c->cfg.params + c->cfg.pl->chunks[h->chunk].offset;
		if (c->landed_at && h->chunk != WF_PS_STATE_CHUNK)
			c->landed_at[h->chunk] = wf_now();
		uint32_t crc = 0;
		int list = (h->flags & WF_PS_FLAG_UNITS) ? m->nframes - 1 : -1; /* parsed: last */
		for (int i = 0; i < m->nframes; i++) {
			float *to = i == 0 ? dst : i == list ? NULL : c->cfg.state;
			crc = to ? wf_ps_crc32c_copy(crc, to, m->frame[i], m->size[i])
				 : wf_ps_crc32c(crc, m->frame[i], m->size[i]);
		}
		if (list > 0 &&
		    (c->ulist || (c->ulist = malloc(WF_PS_UNITS_MAX_LIST * sizeof(*c->ulist))))) {
			p->nunits = (int)(m->size[list] / 8); /* 1..WF_PS_UNITS_MAX_LIST */
			for (int i = 0; i < p->nunits; i++)
				c->ulist[i] = (long)(int64_t)wf_ps_get_u64(
					(const uint8_t *)m->frame[list] + 8 * i);
		}
		wf_err e = {0};
		if (wf_ps_msg_verify(m, crc, &e)) {
			p->rc = WF_EFORMAT;
			snprintf(p->msg, sizeof(p->msg), "bad reply: %.1000s", e.msg);
		}
	} else if (h->op == WF_PS_OP_STATS && c->stats_out) {
		wf_err e = {0};
		if (wf_ps_stats_from_json(c->stats_out, m->frame[0], m->size[0], &e)) {
			p->rc = e.code;
			snprintf(p->msg, sizeof(p->msg), "%.1000s", e.msg);
		}
	}
}

/* Read every waiting reply on socket k (of server k / nstripes). */
static void drain(wf_ps_client *c, int k)
{
	int s = k / c->nstripes;
	for (;;) {
		int n = 0, more = 1, overflow = 0;
		while (more) {
			zmq_msg_t extra, *m = n < 1 + WF_PS_MAX_FRAMES ? &c->frames[n] : &extra;
			zmq_msg_init(m);
			if (zmq_msg_recv(m, c->socks[k], n == 0 ? ZMQ_DONTWAIT : 0) < 0) {
				zmq_msg_close(m);
				for (int i = 0; i < n; i++)
					zmq_msg_close(&c->frames[i]);
				return;
			}
			more = zmq_msg_more(m);
			if (m == &extra) {
				zmq_msg_close(m);
				overflow = 1;
			} else {
				n++;
			}
		}
		const void *ptr[1 + WF_PS_MAX_FRAMES];
		size_t size[1 + WF_PS_MAX_FRAMES];
		for (int i = 0; i < n; i++) {
			ptr[i] = zmq_msg_data(&c->frames[i]);
			size[i] = zmq_msg_size(&c->frames[i]);
		}
		wf_ps_msg m;
		wf_err e = {0};
		int reason = 0;
		memset(&m, 0, sizeof(m));
		int rc = overflow ? -1 : wf_ps_msg_parse(&m, ptr, size, n, &c->lim, &reason, &e);
		uint32_t slot = m.hdr.tag % (uint32_t)c->cap;
		pending *p = &c->pend[slot];
		int mine = p->used && !p->done && p->tag == m.hdr.tag && p->server == s;
		if (rc) {
			wf_warn("ps client: bad reply from ps %d (%s): %s", s, c->endpoints[s],
				overflow ? "too many frames" : e.msg);
			if (mine) {
				p->done = 1;
				p->rc = WF_EFORMAT;
				snprintf(p->msg, sizeof(p->msg), "bad reply: %.1000s", e.msg);
			}
		} else {
			c->heard[s] = 1;
			if (mine)
				apply_reply(c, p, &m);
		}
		for (int i = 0; i < n; i++)
			zmq_msg_close(&c->frames[i]);
	}
}

/* Fail the open requests of a server that restarted (with heartbeats on:
 * its incarnation changed since they were sent, so their replies will
 * never come) or fell silent for server_timeout, naming it. With replicas,
 * a request whose connection closed since it was sent, or was closed then
 * (the process ended: the kernel closed its sockets), goes to the group's
 * next server at once, without waiting for a restart; a server-wide one
 * waits for that. */
static void check_servers(wf_ps_client *c)
{
	int64_t now = (int64_t)(wf_now() * 1000);
	for (int i = 0; i < c->cap; i++) {
		pending *p = &c->pend[i];
		if (!p->used || p->done || p->held)
			continue;
		uint32_t inc = c->hb_started ? atomic_load(&c->inc[p->server]) : 0;
		int64_t seen = c->hb_started ? atomic_load(&c->seen[p->server]) : 0;
		const char *why = NULL;
		if (p->inc && inc && inc != p->inc)
			why = "restarted";
		else if (seen && (double)(now - seen) > 1000.0 * c->server_timeout)
			why = "stopped answering heartbeats";
		else if (c->replicas > 1 && c->hs[p->server].closed != p->closed &&
			 p->op != WF_PS_OP_REGISTER)
			why = "closed its connection";
		if (!why)
			continue;
		if (c->replicas > 1 && p->op != WF_PS_OP_REGISTER) {
			if (p->again)
				continue;
			int chunk_op = p->op == WF_PS_OP_PUSH_PULL || p->op == WF_PS_OP_PULL ||
				       p->op == WF_PS_OP_INIT;
			if (chunk_op) { /* the group's next server takes over */
				p->again = AGAIN_FAILOVER;
				p->again_at = 0;
				snprintf(p->msg, sizeof(p->msg), "%s", why);
			} else if (inc != p->inc) {
				/* a server-wide request: the restarted server gets it again */
				p->again = AGAIN_SAME;
				p->again_at = 0;
			}
			continue;
		}
		p->done = 1;
		p->rc = WF_ETRANSIENT;
		snprintf(p->msg, sizeof(p->msg), "the server %s while a %s was outstanding", why,
			 wf_ps_op_name(p->op));
	}
}

static int send_push(wf_ps_client *c, int chunk, const float *grads, long step, int with_state,
		     uint32_t flags, wf_err *err);
static int send_init(wf_ps_client *c, int k, uint32_t flags, wf_err *err);

/* Replication: the next server of group g after `after` whose heartbeats
 * are recent (else simply the next one). */
static int next_replica(const wf_ps_client *c, int g, int after)
{
	int n = c->cfg.nservers, k0 = ((after - g) % n + n) % n;
	int64_t now = (int64_t)(wf_now() * 1000);
	for (int i = 1; i <= c->replicas; i++) {
		int s = (g + (k0 + i) % c->replicas) % n;
		int64_t seen = atomic_load(&c->seen[s]);
		if (s != after && seen && (double)(now - seen) <= 1000.0 * c->server_timeout)
			return s;
	}
	return (g + (k0 + 1) % c->replicas) % n;
}

/* Send again what a failed or redirected server did not answer. */
static void send_again(wf_ps_client *c)
{
	double now = wf_now();
	for (int i = 0; i < c->cap; i++) {
		pending *p = &c->pend[i];
		if (!p->used || p->done || !p->again || now < p->again_at)
			continue;
		pending was = *p;
		wf_err e = {0};
		int rc = 0;
		uint32_t flags = 0;
		int chunk_op = was.op == WF_PS_OP_PUSH_PULL || was.op == WF_PS_OP_PULL ||
			       was.op == WF_PS_OP_INIT;
		if (chunk_op) {
			int g = was.chunk == WF_PS_STATE_CHUNK
					? 0
					: c->cfg.pl->chunks[was.chunk].server;
			int to = c->route[g];
			if (was.again == AGAIN_FAILOVER) {
				if (to == was.server)
					to = next_replica(c, g, was.server);
				flags = WF_PS_FLAG_FAILOVER;
			} else if (was.again_to >= 0 && was.again_to < c->cfg.nservers) {
				to = was.again_to;
			}
			if (to != c->route[g])
				wf_warn("ps client: group %d goes to ps %d (%s): ps %d %s", g, to,
					c->endpoints[to], c->route[g],
					was.again == AGAIN_FAILOVER ? was.msg
								    : "named it the primary");
			c->route[g] = to;
		}
		p->used = 0;
		if (was.op == WF_PS_OP_PUSH_PULL) {
			rc = send_push(c, (int)was.chunk, was.grads, was.step, was.with_state,
				       flags, &e);
		} else if (was.op == WF_PS_OP_INIT) {
			rc = send_init(c, i, flags, &e);
		} else {
			wf_ps_hdr h;
			req_hdr(c, &h, was.op, chunk_op ? was.chunk : 0, was.step);
			h.flags |= flags;
			rc = send_req(c, chunk_op ? server_of(c, was.chunk) : was.server, i, &h,
				      NULL, NULL, 0, 0, &e);
		}
		if (rc) { /* the slot reports it */
			*p = was;
			p->again = AGAIN_NO;
			p->done = 1;
			p->rc = rc;
			snprintf(p->msg, sizeof(p->msg), "%.1000s", e.msg);
		}
	}
}

/* Priority: hand ZeroMQ the held pushes, each while its server's queue in
 * ZeroMQ holds less than cfg.priority_bytes (an empty queue takes any
 * chunk): in the order the backward released them until the last chunk
 * (the first layer) is in, then highest chunk first. Every worker holds the
 * same chunks then, in the same order, so a server completes each chunk
 * when its pushes arrive; ordering by priority while the backward runs
 * gives each worker its own order (what is held when credit frees depends
 * on timing), and a chunk one worker put off holds up everyone's reply.
 * A push that cannot be sent fails its slot. */
static void release_held(wf_ps_client *c)
{
	int64_t cap = (int64_t)c->cfg.priority_bytes;
	int n = nchunks_of(c), down = 0;
	for (int k = 0; k < n && !down; k++) /* the last chunk of their step is in */
		down = c->pend[k].used && c->pend[k].held && c->pend[k].step == c->top_step;
	for (int i = 0; i < n && c->nheld > 0; i++) {
		int k = down ? n - 1 - i : i;
		pending *p = &c->pend[k];
		if (!p->used || p->done || !p->held)
			continue;
		int s = server_of(c, (uint32_t)k);
		if (atomic_load(&c->queued[s]) >= cap)
			continue;
		pending was = *p;
		wf_err e = {0};
		c->nheld--;
		p->used = 0;
		int rc = send_push(c, k, was.grads, was.step, was.with_state, 0, &e);
		if (rc) {
			*p = was;
			p->held = 0;
			p->done = 1;
			p->rc = rc;
			snprintf(p->msg, sizeof(p->msg), "%.1000s", e.msg);
		}
	}
}

/* Drop the open slots: their late replies no longer match a used slot's
 * tag, and the slots take new requests. */
static void drop_open(wf_ps_client *c)
{
	for (int i = 0; i < c->cap; i++)
		if (c->pend[i].used && !c->pend[i].done) {
			c->pend[i].used = 0;
			c->nheld -= c->pend[i].held;
			c->pend[i].held = 0;
		}
}

/* With fail_fast: 1 when a slot was refused; the open ones are dropped. */
static int refused(wf_ps_client *c)
{
	int any = 0;
	for (int i = 0; i < c->cap; i++)
		any |= c->pend[i].used && c->pend[i].done && c->pend[i].rc;
	if (any)
		drop_open(c);
	return any;
}

/* Wait until every used slot (only >= 0: slot `only`) is done or timeout
 * seconds pass, reading every reply that arrives meanwhile. On timeout the
 * unanswered slots are dropped and WF_ETRANSIENT names their servers.
 * Otherwise returns the first error reply (of slot `only`). */
static int wait_slots(wf_ps_client *c, double timeout, int quiet, int only, wf_err *err)
{
	double deadline = wf_now() + timeout;
	/* every socket, its monitor (a closed connection), the eventfd */
	int nsock = c->cfg.nservers * c->nstripes;
	zmq_pollitem_t items[2 * nsock + 1];
	for (int k = 0; k < nsock; k++) {
		items[k] = (zmq_pollitem_t){.socket = c->socks[k], .events = ZMQ_POLLIN};
		items[nsock + k] = (zmq_pollitem_t){.socket = c->mons[k], .events = ZMQ_POLLIN};
	}
	items[2 * nsock] = (zmq_pollitem_t){.fd = c->wake, .events = ZMQ_POLLIN};
	int nitems = 2 * nsock + (c->wake >= 0);
	int rc = 0;
	for (;;) {
		int open = 0;
		for (int i = only < 0 ? 0 : only; i < (only < 0 ? c->cap : only + 1); i++)
			open += c->pend[i].used && !c->pend[i].done;
		if (!open || (c->flushing && c->nheld == 0))
			break;
		double left = deadline - wf_now();
		if (left <= 0) {
			char names[1024];
			size_t k = 0;
			int last = -1;
			names[0] = '\0';
			for (int i = 0; i < c->cap; i++) {
				pending *p = &c->pend[i];
				if (!p->used || p->done)
					continue;
				if (p->server != last && k + 64 < sizeof(names))
					k += (size_t)snprintf(names + k, sizeof(names) - k,
							      "%sps %d (%s) %s", k ? ", " : "",
							      p->server, c->endpoints[p->server],
							      wf_ps_op_name(p->op));
				last = p->server;
				p->used = 0;
				c->nheld -= p->held;
				p->held = 0;
			}
			rc = wf_errf(err, WF_ETRANSIENT, "no reply within %.1f s from %s", timeout,
				     names);
			if (!quiet)
				wf_warn("ps client: %s", err ? err->msg : "timeout");
			break;
		}
		/* wake for the first request due again (a server still joining
		 * is asked every 0.1 s), whatever else arrives */
		for (int i = 0; i < c->cap; i++) {
			const pending *p = &c->pend[i];
			if (p->used && !p->done && p->again)
				left = WF_MIN(left, WF_MAX(0.0, p->again_at - wf_now()));
		}
		long ms = (long)(left * 1000) + 1;
		if (zmq_poll(items, nitems, ms > 1000 ? 1000 : ms) < 0 && zmq_errno() != EINTR) {
			rc = wf_errf(err, WF_EINTERNAL, "ps client: zmq_poll: %s",
				     zmq_strerror(zmq_errno()));
			break;
		}
		int events = 0;
		for (int k = 0; k < nsock; k++) {
			if (items[k].revents & ZMQ_POLLIN)
				drain(c, k);
			events |= items[nsock + k].revents & ZMQ_POLLIN;
		}
		if (events)
			read_handshakes(c);
		check_servers(c);
		if (c->replicas > 1)
			send_again(c);
		if (nitems > 2 * nsock && (items[2 * nsock].revents & ZMQ_POLLIN)) {
			uint64_t n;
			if (read(c->wake, &n, sizeof(n)) < 0) { /* EAGAIN: nothing to clear */
			}
		}
		if (c->nheld > 0)
			release_held(c);
		if (c->fail_fast && refused(c))
			break;
		/* a stop signal while the process starts: the servers it
		 * waits for may never come (an elastic worker then leaves
		 * through these slots) */
		if (c->cancelable &&
		    (rc = wf_cancel_check("wait for the parameter servers", err)) != 0) {
			drop_open(c);
			break;
		}
	}
	/* a socket's monitor blocks its I/O thread once its queue of unread
	 * events is full (reconnects of a long job): read them every wait */
	read_handshakes(c);
	if (only < 0)
		c->stale = 0;
	for (int i = only < 0 ? 0 : only; i < (only < 0 ? c->cap : only + 1); i++) {
		pending *p = &c->pend[i];
		if (!p->used || !p->done)
			continue;
		if (only < 0)
			c->stale += p->stale;
		if (p->rc && !rc)
			rc = wf_errf(err, p->rc, "ps %d (%s): %s refused: %s", p->server,
				     c->endpoints[p->server], wf_ps_op_name(p->op), p->msg);
	}
	return rc;
}

/* Release done slots after their results were read. */
static void clear_slots(wf_ps_client *c)
{
	for (int i = 0; i < c->cap; i++)
		if (c->pend[i].done)
			c->pend[i].used = 0;
}

static double timeout_of(const wf_ps_client *c)
{
	return c->cfg.timeout > 0 ? c->cfg.timeout : WF_PS_TIMEOUT_DEFAULT;
}

enum { TO_ALL = -1, TO_HEARD = -2 };

/* One server-wide request (no payload unless text) to every server
 * (TO_ALL), to every server that ever answered this client and whose
 * connection did not close since (TO_HEARD), or
 * to server only when only >= 0; waits for all replies. */
static int to_servers(wf_ps_client *c, int only, uint16_t op, long step, const char *text,
		      wf_err *err)
{
	int rc = 0;
	for (int s = 0; s < c->cfg.nservers && !rc; s++) {
		if ((only >= 0 && s != only) ||
		    (only == TO_HEARD &&
		     ((!c->heard[s] && !atomic_load(&c->seen[s])) || c->hs[s].down)))
			continue;
		wf_ps_hdr h;
		req_hdr(c, &h, op, 0, step);
		const void *f[1] = {text};
		size_t sz[1] = {text ? strlen(text) : 0};
		int nf = text && sz[0] ? 1 : 0;
		h.dtype = nf ? WF_PS_DTYPE_BYTES : WF_PS_DTYPE_NONE;
		rc = send_req(c, s, slot_server(c, s), &h, f, sz, nf, 0, err);
	}
	int wrc = wait_slots(c, timeout_of(c), 0, -1, rc ? NULL : err);
	return rc ? rc : wrc;
}

/* ---- handshakes --------------------------------------------------------- */

/* Priority: a new connection fd to server s keeps at most
 * cfg.priority_bytes of pushes unsent in the kernel (TCP_NOTSENT_LOWAT:
 * ZeroMQ's I/O thread is told the socket is writable only below it, and
 * writes one frame's bytes at most then), so a push the client releases
 * waits behind little; the send buffer itself, and so TCP's window, stays
 * as the kernel sizes it. The fd comes from the socket monitor's event,
 * read later: it is checked to be a TCP connection to the server's port
 * first (ZeroMQ may have closed it and the number been reused). */
static void limit_unsent(wf_ps_client *c, int fd, int s)
{
	struct sockaddr_storage peer;
	socklen_t len = sizeof(peer);
	int type = 0, v = (int)WF_MIN(c->cfg.priority_bytes, (size_t)INT_MAX);
	socklen_t tl = sizeof(type);
	const char *colon = strrchr(c->endpoints[s], ':');
	int port = colon ? atoi(colon + 1) : -1, peer_port = -2;
	if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tl) || type != SOCK_STREAM ||
	    getpeername(fd, (struct sockaddr *)&peer, &len))
		return;
	if (peer.ss_family == AF_INET)
		peer_port = ntohs(((struct sockaddr_in *)&peer)->sin_port);
	else if (peer.ss_family == AF_INET6)
		peer_port = ntohs(((struct sockaddr_in6 *)&peer)->sin6_port);
	if (peer_port == port && setsockopt(fd, IPPROTO_TCP, TCP_NOTSENT_LOWAT, &v, sizeof(v)))
		wf_warn("ps client: ps %d (%s): priority: cannot bound the connection's unsent "
			"bytes: %s",
			s, c->endpoints[s], strerror(errno));
}

/* Read the connection events waiting for every socket into c->hs. A
 * connection dropped before its handshake completed counts once. */
static void read_handshakes(wf_ps_client *c)
{
	for (int k = 0; c->mons && k < c->cfg.nservers * c->nstripes; k++) {
		handshakes *h = &c->hs[k / c->nstripes];
		uint16_t event;
		uint32_t value;
		while (c->mons[k] && wf_ps_monitor_next(c->mons[k], &event, &value)) {
			switch (event) {
			case ZMQ_EVENT_CONNECTED:
				if (c->queued)
					limit_unsent(c, (int)value, k / c->nstripes);
				break;
			case ZMQ_EVENT_HANDSHAKE_SUCCEEDED:
				h->succeeded = 1;
				h->down = 0;
				h->up |= 1u << (k % c->nstripes);
				break;
			case ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL:
				if (value == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH)
					h->mechanism = 1;
				else
					h->dropped++;
				break;
			case ZMQ_EVENT_HANDSHAKE_FAILED_AUTH: h->refused = 1; break;
			case ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL: h->dropped++; break;
			case ZMQ_EVENT_DISCONNECTED:
				/* one that never completed its handshake (a server
				 * starting, a proxy) lost nothing */
				if (h->up & (1u << (k % c->nstripes))) {
					h->up &= ~(1u << (k % c->nstripes));
					h->closed++;
					h->down = 1;
				}
				break;
			default: break;
			}
		}
	}
}

/* The security mechanism a ZeroMQ server at endpoint ("tcp://host:port")
 * names in its greeting ("CURVE", "NULL") into mech, and 1; 0 when none
 * comes within a second (nothing there, or something that accepts
 * connections and drops them, as a proxy in front of a pod that is not
 * ready does). The probe sends a ZMTP 3 greeting asking for CURVE. */
static int server_mechanism(const char *endpoint, char mech[21])
{
	char host[256];
	const char *hp = strncmp(endpoint, "tcp://", 6) ? endpoint : endpoint + 6;
	const char *colon = strrchr(hp, ':');
	if (!colon || (size_t)(colon - hp) >= sizeof(host))
		return 0;
	memcpy(host, hp, (size_t)(colon - hp));
	host[colon - hp] = '\0';
	if (host[0] == '[' && host[strlen(host) - 1] == ']') { /* [v6]:port */
		memmove(host, host + 1, strlen(host));
		host[strlen(host) - 1] = '\0';
	}
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICHOST}, *ai;
	if (getaddrinfo(host, colon + 1, &hints, &ai) != 0)
		return 0;
	int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0), ok = 0;
	struct timeval tv = {1, 0};
	/* only the signature and the major version: the server then sends the
	 * rest of its greeting (its mechanism) and waits for ours, which never
	 * comes; a whole greeting naming a mechanism it does not speak can make
	 * it close the connection before its own reaches us */
	uint8_t greet[11] = {0xff, [9] = 0x7f, [10] = 3}, got[64];
	if (fd >= 0 && !setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) &&
	    !setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) &&
	    !connect(fd, ai->ai_addr, ai->ai_addrlen) &&
	    send(fd, greet, sizeof(greet), MSG_NOSIGNAL) == (ssize_t)sizeof(greet)) {
		size_t n = 0;
		ssize_t r;
		while (n < 32 && (r = recv(fd, got + n, sizeof(got) - n, 0)) > 0)
			n += (size_t)r;
		/* signature 0xff ... 0x7f, version, then the mechanism (20 bytes) */
		ok = n >= 32 && got[0] == 0xff && got[9] == 0x7f && got[10] >= 3;
		if (ok) {
			memcpy(mech, got + 12, 20);
			mech[20] = '\0';
		}
	}
	if (fd >= 0)
		close(fd);
	freeaddrinfo(ai);
	return ok;
}

static int curve_server_answers(const char *endpoint)
{
	char mech[21];
	return server_mechanism(endpoint, mech) && !strcmp(mech, "CURVE");
}

/* A misconfiguration register can name at once (WF_EINVAL: permanent, a
 * restart with the same settings fails the same way), or 0. */
static int handshake_error(wf_ps_client *c, const int *answered, wf_err *err)
{
	const char *keys = c->key_origin ? c->key_origin : "this process's key directory";
	for (int s = 0; s < c->cfg.nservers; s++) {
		const handshakes *h = &c->hs[s];
		if (answered[s])
			continue;
		/* a server may close our connection before its greeting (naming
		 * its mechanism) reaches us, so the event can be missing (seen
		 * under load): then ask the server itself */
		char mech[21] = "";
		int mismatch = h->mechanism;
		if (!mismatch && !h->succeeded && server_mechanism(c->endpoints[s], mech))
			mismatch = strcmp(mech, c->secure ? "CURVE" : "NULL") != 0;
		if (mismatch && c->secure)
			return wf_errf(
				err, WF_EINVAL,
				"register: the server at %s does not speak CURVE (started "
				"with --insecure?) and this process has keys (%s): give every "
				"ps, chief and worker of the job the same key directory, or "
				"run all of them with --insecure",
				c->endpoints[s], keys);
		if (mismatch)
			return wf_errf(
				err, WF_EINVAL,
				"register: the server at %s expects CURVE and this process "
				"runs --insecure (plain TCP): give it the job's key directory "
				"(--key-dir DIR, cluster.key_dir or WEFT_KEY_DIR)",
				c->endpoints[s]);
		if (h->refused)
			return wf_errf(
				err, WF_EINVAL,
				"register: the server at %s refused this process's client key "
				"(CURVE authentication failed): the keys in %s are not the "
				"job's; give every ps, chief and worker the same key directory",
				c->endpoints[s], keys);
		/* a server that cannot read our CURVE hello (it holds another
		 * server key than our server.pub) closes the connection during
		 * the handshake, every time, after its greeting has named CURVE;
		 * a server that is down refuses the connection instead, and a
		 * proxy with nothing behind it sends no greeting */
		if (c->secure && !h->succeeded && h->dropped >= 3 &&
		    curve_server_answers(c->endpoints[s]))
			return wf_errf(
				err, WF_EINVAL,
				"register: the CURVE server at %s dropped %d handshakes in a "
				"row: its key is not the server.pub in %s; give every ps, "
				"chief and worker the same key directory",
				c->endpoints[s], h->dropped, keys);
	}
	return 0;
}

/* ---- heartbeat thread --------------------------------------------------- */

static void *hb_main(void *arg)
{
	wf_ps_client *c = arg;
	int n = c->cfg.nservers, linger = 0;
	void *socks[n];
	zmq_pollitem_t items[n];
	for (int s = 0; s < n; s++) {
		socks[s] = zmq_socket(c->zctx, ZMQ_DEALER);
		if (socks[s]) {
			wf_err e = {0};
			zmq_setsockopt(socks[s], ZMQ_LINGER, &linger, sizeof(linger));
			if (c->secure && wf_ps_curve_client(socks[s], &c->keys, &e)) {
				wf_warn("%s: no heartbeats to ps %d", e.msg, s);
				zmq_close(socks[s]);
				socks[s] = NULL;
			} else {
				zmq_connect(socks[s], c->endpoints[s]);
			}
		}
		items[s] = (zmq_pollitem_t){.socket = socks[s], .events = ZMQ_POLLIN};
	}
	uint32_t tag = 0;
	uint8_t buf[WF_PS_HEADER_BYTES];
	while (!atomic_load(&c->hb_stop)) {
		for (int s = 0; s < n; s++) {
			if (!socks[s])
				continue;
			wf_ps_hdr h;
			uint8_t hb[WF_PS_HEADER_BYTES];
			req_hdr(c, &h, WF_PS_OP_HEARTBEAT, 0, 0);
			h.tag = ++tag;
			wf_ps_hdr_encode(&h, hb, NULL, NULL, 0);
			zmq_send(socks[s], hb, sizeof(hb), ZMQ_DONTWAIT);
		}
		double until = wf_now() + c->cfg.heartbeat_interval;
		while (!atomic_load(&c->hb_stop)) {
			double left = until - wf_now();
			if (left <= 0)
				break;
			long ms = (long)(left * 1000) + 1;
			if (zmq_poll(items, n, ms > 100 ? 100 : ms) <= 0)
				continue;
			for (int s = 0; s < n; s++) { /* note who answered, and as whom */
				int got;
				while (socks[s] && (got = zmq_recv(socks[s], buf, sizeof(buf),
								   ZMQ_DONTWAIT)) >= 0) {
					wf_ps_hdr h;
					if (got != WF_PS_HEADER_BYTES)
						continue;
					wf_ps_hdr_decode(&h, buf);
					if (h.op != WF_PS_OP_HEARTBEAT ||
					    (h.flags & WF_PS_FLAG_ERROR))
						continue;
					atomic_store(&c->inc[s], h.aux);
					atomic_store(&c->seen[s], (int64_t)(wf_now() * 1000));
				}
			}
		}
	}
	for (int s = 0; s < n; s++)
		if (socks[s])
			zmq_close(socks[s]);
	return NULL;
}

/* ---- public ------------------------------------------------------------- */

int wf_ps_client_create(wf_ps_client **out, const wf_ps_client_cfg *cfg, wf_err *err)
{
	*out = NULL;
	if (cfg->nservers < 1 || !cfg->endpoints)
		return wf_errf(err, WF_EINVAL, "ps client: no parameter servers given");
	if (cfg->pl && cfg->pl->nservers != cfg->nservers)
		return wf_errf(err, WF_EINVAL, "ps client: placement is for %d servers, %d given",
			       cfg->pl->nservers, cfg->nservers);
	if (cfg->pl && !cfg->params)
		return wf_errf(err, WF_EINVAL, "ps client: a placement needs a params buffer");
	if (cfg->compression == WF_PS_COMPRESSION_TOPK && !(cfg->topk > 0 && cfg->topk <= 1))
		return wf_errf(err, WF_EINVAL,
			       "ps client: ps.compression topk:%g: the fraction must be in (0, 1]",
			       cfg->topk);
	wf_ps_client *c = calloc(1, sizeof(*c));
	if (!c)
		return wf_errf(err, WF_ENOMEM, "ps client: out of memory");
	c->wake = -1;
	c->cfg = *cfg;
	c->cfg.keys = NULL;
	c->cfg.key_origin = NULL;
	c->cfg.optim = NULL;
	if (cfg->optim) { /* the settings register has the servers check */
		wf_optim_describe(cfg->optim, c->optim, sizeof(c->optim));
		size_t n = strlen(c->optim);
		snprintf(c->optim + n, sizeof(c->optim) - n, " ps.compression=%s",
			 wf_ps_compression_name(cfg->compression));
	}
	if (cfg->key_origin && cfg->key_origin[0] && !(c->key_origin = strdup(cfg->key_origin))) {
		free(c);
		return wf_errf(err, WF_ENOMEM, "ps client: out of memory");
	}
	if (cfg->keys) {
		int krc = wf_ps_curve_check(err);
		if (krc) {
			free(c->key_origin);
			free(c);
			return krc;
		}
		c->keys = *cfg->keys;
		c->secure = 1;
	}
	int rc = WF_ENOMEM, nc = cfg->pl ? cfg->pl->nchunks : 0;
	c->cap = nc + 1 + cfg->nservers;
	c->pend = calloc((size_t)c->cap, sizeof(*c->pend));
	c->endpoints = calloc((size_t)cfg->nservers, sizeof(*c->endpoints));
	/* CURVE: up to WF_PS_CURVE_STRIPES connections per server (no more than
	 * the chunks), each encrypted on its own I/O thread */
	c->nstripes = 1;
	if (c->secure && nc > 1)
		c->nstripes = nc / cfg->nservers > 1
				      ? WF_MIN(WF_PS_CURVE_STRIPES, nc / cfg->nservers)
				      : 1;
	c->socks = calloc((size_t)cfg->nservers * (size_t)c->nstripes, sizeof(*c->socks));
	c->floats = calloc((size_t)nc + 1, sizeof(*c->floats));
	c->inc = calloc((size_t)cfg->nservers, sizeof(*c->inc));
	c->seen = calloc((size_t)cfg->nservers, sizeof(*c->seen));
	c->heard = calloc((size_t)cfg->nservers, 1);
	c->mons = calloc((size_t)cfg->nservers * (size_t)c->nstripes, sizeof(*c->mons));
	c->hs = calloc((size_t)cfg->nservers, sizeof(*c->hs));
	c->route = calloc((size_t)cfg->nservers, sizeof(*c->route));
	c->top_step = -1;
	if (cfg->priority_bytes > 0 && nc > 0 &&
	    (c->wake = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) < 0) {
		rc = wf_errf(err, WF_EINTERNAL, "ps client: eventfd: %s", strerror(errno));
		goto fail;
	}
	c->sent_at = calloc((size_t)nc + 1, sizeof(*c->sent_at));
	c->landed_at = calloc((size_t)nc + 1, sizeof(*c->landed_at));
	if (cfg->priority_bytes > 0 && nc > 0) {
		c->queued = calloc((size_t)cfg->nservers, sizeof(*c->queued));
		c->tok = calloc((size_t)nc, sizeof(*c->tok));
	}
	if (cfg->compression == WF_PS_COMPRESSION_BF16 && cfg->pl)
		c->bf16 = malloc((cfg->pl->nparams ? cfg->pl->nparams : 1) * sizeof(*c->bf16));
	if (!c->pend || !c->endpoints || !c->socks || !c->floats || !c->inc || !c->seen ||
	    !c->heard || !c->mons || !c->hs || !c->route || !c->sent_at || !c->landed_at ||
	    (cfg->priority_bytes > 0 && nc > 0 && (!c->queued || !c->tok)) ||
	    (cfg->compression == WF_PS_COMPRESSION_BF16 && cfg->pl && !c->bf16) ||
	    (cfg->compression == WF_PS_COMPRESSION_TOPK && cfg->pl && topk_plan(c) != 0))
		goto fail;
	c->replicas = cfg->replicas > 1 ? WF_MIN(cfg->replicas, cfg->nservers) : 1;
	for (int g = 0; g < cfg->nservers; g++)
		c->route[g] = g;
	c->server_timeout = cfg->server_timeout > 0 ? cfg->server_timeout
						    : WF_MAX(WF_PS_SERVER_TIMEOUT_DEFAULT,
							     10.0 * cfg->heartbeat_interval);
	for (int i = 0; i < nc; i++)
		c->floats[i] = cfg->pl->chunks[i].count;
	if (frozen_frames(c) != 0)
		goto fail;
	c->lim = (wf_ps_limits){.job_id = cfg->job_id,
				.nchunks = (uint32_t)nc,
				.chunk_floats = c->floats,
				.state_floats = cfg->nstate,
				.nslots = cfg->nslots,
				.is_reply = 1,
				.defer_checksum = 1};
	wf_ps_tune_malloc();
	if (!(c->zctx = zmq_ctx_new())) {
		rc = wf_errf(err, WF_EINTERNAL, "ps client: zmq_ctx_new: %s",
			     zmq_strerror(zmq_errno()));
		goto fail;
	}
	if (c->nstripes > 1)
		zmq_ctx_set(c->zctx, ZMQ_IO_THREADS,
			    WF_MIN(c->nstripes * cfg->nservers, WF_PS_CURVE_STRIPES));
	for (int k = 0; k < cfg->nservers * c->nstripes; k++) {
		int linger = 0, ivl = 100, ivl_max = 2000, s = k / c->nstripes;
		if (k % c->nstripes == 0 && !(c->endpoints[s] = strdup(cfg->endpoints[s])))
			goto fail;
		c->socks[k] = zmq_socket(c->zctx, ZMQ_DEALER);
		if (c->socks[k] && c->secure &&
		    (rc = wf_ps_curve_client(c->socks[k], &c->keys, err)))
			goto fail;
		if (!c->socks[k] ||
		    zmq_setsockopt(c->socks[k], ZMQ_LINGER, &linger, sizeof(linger)) ||
		    zmq_setsockopt(c->socks[k], ZMQ_RECONNECT_IVL, &ivl, sizeof(ivl)) ||
		    zmq_setsockopt(c->socks[k], ZMQ_RECONNECT_IVL_MAX, &ivl_max, sizeof(ivl_max)) ||
		    !(c->mons[k] = wf_ps_monitor_open(c->zctx, c->socks[k],
						      ZMQ_EVENT_CONNECTED | ZMQ_EVENT_DISCONNECTED |
							      ZMQ_EVENT_HANDSHAKE_SUCCEEDED |
							      ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |
							      ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
							      ZMQ_EVENT_HANDSHAKE_FAILED_AUTH)) ||
		    zmq_connect(c->socks[k], cfg->endpoints[s])) {
			rc = wf_errf(err, WF_EINVAL,
				     "ps client: cannot connect to ps %d at \"%s\": %s", s,
				     cfg->endpoints[s], zmq_strerror(zmq_errno()));
			goto fail;
		}
	}
	set_send_timeout(c, timeout_of(c));
	if (cfg->heartbeat_interval > 0) {
		if (pthread_create(&c->hb, NULL, hb_main, c)) {
			rc = wf_errf(err, WF_EINTERNAL, "ps client: cannot start heartbeat thread");
			goto fail;
		}
		c->hb_started = 1;
	}
	*out = c;
	return 0;
fail:
	if (rc == WF_ENOMEM)
		wf_errf(err, rc, "ps client: out of memory");
	wf_ps_client_free(c);
	return rc;
}

void wf_ps_client_free(wf_ps_client *c)
{
	if (!c)
		return;
	if (c->hb_started) {
		atomic_store(&c->hb_stop, 1);
		pthread_join(c->hb, NULL);
	}
	for (int k = 0; c->socks && k < c->cfg.nservers * c->nstripes; k++) {
		if (c->socks[k] && c->mons && c->mons[k])
			zmq_socket_monitor(c->socks[k], NULL, 0);
		if (c->mons && c->mons[k])
			zmq_close(c->mons[k]);
		if (c->socks[k])
			zmq_close(c->socks[k]);
	}
	if (c->zctx)
		zmq_ctx_term(c->zctx);
	for (int s = 0; c->endpoints && s < c->cfg.nservers; s++)
		free(c->endpoints[s]);
	free(c->endpoints);
	free(c->socks);
	free(c->pend);
	free(c->ulist);
	free(c->floats);
	for (int k = 0; c->frozen && k < nchunks_of(c); k++)
		free(c->frozen[k]);
	free(c->frozen);
	free(c->frozen_bytes);
	free((void *)c->inc);
	free((void *)c->seen);
	free(c->heard);
	free(c->mons);
	free(c->hs);
	free(c->route);
	free(c->bf16);
	free(c->resid);
	free(c->sparse);
	free(c->topk_at);
	free(c->topk_k);
	free(c->mag);
	free((void *)c->queued); /* after zmq_ctx_term: ZeroMQ let every push go */
	if (c->wake >= 0)
		close(c->wake);
	free(c->tok);
	free(c->sent_at);
	free(c->landed_at);
	free(c->key_origin);
	memset(&c->keys, 0, sizeof(c->keys));
	free(c);
}

double wf_ps_client_set_connect_timeout(wf_ps_client *c, double seconds)
{
	double old = c->cfg.connect_timeout;
	c->cfg.connect_timeout = seconds;
	return old;
}

/* Whether one of the groups in bits (bit g: the chunks placed on server g;
 * group 0 also keeps the state) holds anything. */
static int holds_data(const wf_ps_client *c, uint32_t bits)
{
	for (int g = 0; g < c->cfg.nservers && g < 32; g++)
		if ((bits & (1u << g)) &&
		    (wf_ps_placement_count(c->cfg.pl, g) > 0 || (g == 0 && c->cfg.nstate)))
			return 1;
	return 0;
}

/* One heartbeat to every server on the request sockets: each reply names
 * the incarnation that answered. Best effort: a server that does not
 * answer within a round keeps what the heartbeat thread knows. */
static void learn_incarnations(wf_ps_client *c)
{
	int n = c->cfg.nservers;
	wf_err e = {0};
	for (int s = 0; s < n; s++) {
		wf_ps_hdr h;
		req_hdr(c, &h, WF_PS_OP_HEARTBEAT, 0, 0);
		send_req(c, s, slot_server(c, s), &h, NULL, NULL, 0, 0, &e);
	}
	wait_slots(c, WF_MAX(1.0, 4 * c->cfg.heartbeat_interval), 1, -1, &e);
	for (int s = 0; s < n; s++) {
		const pending *p = &c->pend[slot_server(c, s)];
		if (p->used && p->done && !p->rc && p->aux)
			atomic_store(&c->inc[s], p->aux);
	}
	clear_slots(c);
}

int wf_ps_client_register(wf_ps_client *c, int joining, long *steps, long *min_step, wf_err *err)
{
	int n = c->cfg.nservers;
	double limit =
		c->cfg.connect_timeout > 0 ? c->cfg.connect_timeout : WF_PS_CONNECT_TIMEOUT_DEFAULT;
	double deadline = wf_now() + limit;
	int answered[n];
	long got[n];
	memset(answered, 0, sizeof(answered));
	int left = n, tries = 0, rc = 0;
	uint32_t served = 0; /* replication: the groups some server is the primary of */
	/* only this register's handshakes count */
	read_handshakes(c);
	int was_cancelable = c->cancelable;
	c->cancelable = 1;
	for (int s = 0; s < n; s++) { /* which connections are up stays known */
		handshakes *h = &c->hs[s];
		h->succeeded = h->mechanism = h->refused = h->dropped = 0;
	}
	wf_err e = {0};
	while (left > 0) {
		double wait = WF_MIN(1.0 + tries, deadline - wf_now());
		if (wait < 0.05)
			wait = 0.05;
		/* a send waits at most a round for a connection to take it; one
		 * that does not is a server that has not answered yet */
		set_send_timeout(c, WF_MIN(wait, 1.0));
		for (int s = 0; s < n; s++) {
			if (answered[s])
				continue;
			wf_ps_hdr h;
			req_hdr(c, &h, WF_PS_OP_REGISTER, 0, 0);
			if (joining)
				h.flags |= WF_PS_FLAG_JOINING;
			const void *f[1] = {c->optim};
			size_t sz[1] = {strlen(c->optim)};
			int nf = sz[0] > 0;
			if (nf)
				h.dtype = WF_PS_DTYPE_BYTES;
			rc = send_req(c, s, slot_server(c, s), &h, f, sz, nf, 0, &e);
			if (rc && rc != WF_ETRANSIENT) {
				wf_errf(err, rc, "%s", e.msg);
				goto out;
			}
		}
		rc = wait_slots(c, wait, 1, -1, &e);
		for (int s = 0; s < n; s++) {
			pending *p = &c->pend[slot_server(c, s)];
			if (p->used && p->done && !p->rc && !answered[s]) {
				answered[s] = 1;
				/* replication: a server that serves no group holding
				 * chunks or the state (it is joining, only a backup,
				 * or the primary of its own empty group) does not tell
				 * the job's step */
				got[s] = c->replicas > 1 && !holds_data(c, p->primary_bits)
						 ? WF_PS_STEP_BACKUP
						 : p->reply_step;
				left--;
				served |= p->primary_bits;
				for (int g = 0; c->replicas > 1 && g < n && g < 32; g++)
					if (p->primary_bits & (1u << g))
						c->route[g] = s; /* it serves group g */
			}
		}
		clear_slots(c);
		if (rc && rc != WF_ETRANSIENT) {
			wf_errf(err, rc, "%s", e.msg);
			goto out;
		}
		read_handshakes(c);
		if (left && (rc = handshake_error(c, answered, err)) != 0)
			goto out;
		rc = 0;
		if (left && wf_now() >= deadline) {
			rc = wf_errf(err, WF_ETRANSIENT,
				     "register: %d of %d parameter servers did not answer within "
				     "%.0f s (%s%s)%s",
				     left, n, limit, e.msg[0] ? "last: " : "", e.msg,
				     c->secure ? "; are they up, and do they use the same "
						 "cluster.key_dir keys?"
					       : "; are they up, and started with --insecure "
						 "too?");
			goto out;
		}
		tries++;
	}
out:
	c->cancelable = was_cancelable;
	set_send_timeout(c, timeout_of(c));
	if (rc)
		return rc;
	long m = -2; /* none yet */
	for (int s = 0; s < n; s++) {
		if (steps)
			steps[s] = got[s];
		if (got[s] == WF_PS_STEP_BACKUP)
			continue;
		if (got[s] < 0 || m == -1)
			m = -1;
		else if (m == -2 || got[s] < m)
			m = got[s];
	}
	if (m == -2)
		m = -1;
	/* replication: a group no server serves yet (its members are still
	 * joining) is not ready either */
	for (int g = 0; c->replicas > 1 && c->cfg.pl && g < n && g < 32; g++)
		if (wf_ps_placement_count(c->cfg.pl, g) > 0 && !(served & (1u << g)))
			m = -1;
	if (min_step)
		*min_step = m;
	/* every server answered: learn the incarnation of the process that
	 * did, through the same connections, so that a request sent from now on
	 * fails when the server restarts under it, and only then. (The
	 * heartbeat thread may not have seen a restart yet: a push sent now
	 * would carry the old incarnation, and its next heartbeat would fail
	 * the push as sent to a process that died, though the new one got it.) */
	if (c->hb_started)
		learn_incarnations(c);
	return 0;
}

/* Send chunk k's init (k = nchunks: the state) from c->init (flags: FAILOVER). */
static int send_init(wf_ps_client *c, int k, uint32_t flags, wf_err *err)
{
	const wf_ps_placement *pl = c->cfg.pl;
	wf_ps_hdr h;
	const void *f[3];
	size_t sz[3];
	int nf = 1;
	if (k == pl->nchunks) {
		f[0] = c->init.state;
		sz[0] = c->cfg.nstate * sizeof(float);
		req_hdr(c, &h, WF_PS_OP_INIT, WF_PS_STATE_CHUNK, c->init.step);
	} else {
		const wf_ps_chunk *ch = &pl->chunks[k];
		f[0] = c->init.params + ch->offset;
		sz[0] = ch->count * sizeof(float);
		for (int j = 0; c->init.slots && j < c->cfg.nslots && j < 2; j++, nf++) {
			f[nf] = c->init.slots[j] + ch->offset;
			sz[nf] = sz[0];
		}
		req_hdr(c, &h, WF_PS_OP_INIT, (uint32_t)k, c->init.step);
	}
	h.dtype = WF_PS_DTYPE_F32;
	h.flags |= flags;
	return send_req(c, server_of(c, h.chunk), k, &h, f, sz, nf, 1, err);
}

int wf_ps_client_init(wf_ps_client *c, const float *params, const float *const *slots,
		      const float *state, long step, wf_err *err)
{
	const wf_ps_placement *pl = c->cfg.pl;
	int rc = 0;
	if (!pl)
		return wf_errf(err, WF_EINVAL, "ps client: init needs a placement");
	c->init.params = params;
	c->init.slots = slots;
	c->init.state = state;
	c->init.step = step;
	/* one outstanding init per chunk; send all, then wait */
	for (int k = 0; k < pl->nchunks && !rc; k++)
		rc = send_init(c, k, 0, err);
	if (!rc && state && c->cfg.nstate)
		rc = send_init(c, pl->nchunks, 0, err);
	int wrc = wait_slots(c, timeout_of(c), 0, -1, rc ? NULL : err);
	clear_slots(c);
	memset(&c->init, 0, sizeof(c->init));
	return rc ? rc : wrc;
}

/* Send chunk's push (flags: extra header flags, FAILOVER). */
static int send_push(wf_ps_client *c, int chunk, const float *grads, long step, int with_state,
		     uint32_t flags, wf_err *err)
{
	const wf_ps_chunk *ch = &c->cfg.pl->chunks[chunk];
	wf_ps_hdr h;
	const void *f[3] = {grads + ch->offset, c->cfg.state};
	size_t sz[3] = {ch->count * sizeof(float), c->cfg.nstate * sizeof(float)};
	int nf = with_state ? 2 : 1;
	req_hdr(c, &h, WF_PS_OP_PUSH_PULL, (uint32_t)chunk, step);
	h.dtype = WF_PS_DTYPE_F32;
	if (c->bf16) { /* the chunk's own part of the buffer: sent in place */
		wf_ps_bf16_encode(c->bf16 + ch->offset, grads + ch->offset, ch->count);
		f[0] = c->bf16 + ch->offset;
		sz[0] = ch->count * sizeof(*c->bf16);
		h.dtype = WF_PS_DTYPE_BF16;
	}
	if (c->resid) { /* encoded by push_pull_async: the same entries every time */
		f[0] = c->sparse + c->topk_at[chunk];
		sz[0] = 8 * c->topk_k[chunk];
		h.dtype = WF_PS_DTYPE_TOPK;
	}
	h.aux = (uint32_t)(c->cfg.contributors > 0 ? c->cfg.contributors : 0);
	h.flags |= flags;
	if (with_state)
		h.flags |= WF_PS_FLAG_STATE;
	if (c->frozen && c->frozen_bytes[chunk]) {
		h.flags |= WF_PS_FLAG_FROZEN;
		f[nf] = c->frozen[chunk];
		sz[nf++] = c->frozen_bytes[chunk];
	}
	int rc = send_req(c, server_of(c, (uint32_t)chunk), chunk, &h, f, sz, nf, 1, err);
	c->pend[chunk].grads = grads;
	c->pend[chunk].with_state = with_state;
	return rc;
}

int wf_ps_client_push_pull_async(wf_ps_client *c, int chunk, const float *grads, long step,
				 int with_state, wf_err *err)
{
	const wf_ps_placement *pl = c->cfg.pl;
	if (!pl || chunk < 0 || chunk >= pl->nchunks)
		return wf_errf(err, WF_EINVAL, "ps client: chunk %d out of range [0, %d)", chunk,
			       pl ? pl->nchunks : 0);
	const wf_ps_chunk *ch = &pl->chunks[chunk];
	if (with_state && (ch->server != 0 || !c->cfg.state || !c->cfg.nstate))
		return wf_errf(err, WF_EINVAL,
			       "ps client: the state rides on a chunk of ps 0 (chunk %d is on ps "
			       "%d) and needs cfg.state",
			       chunk, ch->server);
	if (c->resid) /* error feedback: this gradient plus what earlier pushes left */
		wf_ps_topk_encode(c->sparse + c->topk_at[chunk], c->topk_k[chunk],
				  c->resid + ch->offset, grads + ch->offset, ch->count, c->mag);
	if (!c->queued)
		return send_push(c, chunk, grads, step, with_state, 0, err);
	pending *p = &c->pend[chunk];
	if (p->used && !p->done)
		return wf_errf(
			err, WF_EINVAL,
			"ps client: a %s for this chunk is already outstanding on ps %d (%s)",
			wf_ps_op_name(p->op), p->server, c->endpoints[p->server]);
	*p = (pending){.used = 1,
		       .held = 1,
		       .server = server_of(c, (uint32_t)chunk),
		       .op = WF_PS_OP_PUSH_PULL,
		       .chunk = (uint32_t)chunk,
		       .step = step,
		       .reply_step = -1,
		       .grads = grads,
		       .with_state = with_state};
	c->nheld++;
	if (chunk == pl->nchunks - 1)
		c->top_step = step;
	release_held(c);
	return 0;
}

int wf_ps_client_wait_all(wf_ps_client *c, wf_err *err)
{
	/* a refusal fails the whole wait at once: a push held by a server for
	 * a step that the refusing chunk says is not the job's may never be
	 * answered, and the caller re-synchronises (register forgets it) */
	c->fail_fast = 1;
	int rc = wait_slots(c, timeout_of(c), 0, -1, err);
	c->fail_fast = 0;
	clear_slots(c);
	return rc;
}

int wf_ps_client_wait_chunk(wf_ps_client *c, int chunk, wf_err *err)
{
	if (chunk < 0 || chunk >= nchunks_of(c))
		return wf_errf(err, WF_EINVAL, "ps client: chunk %d out of range [0, %d)", chunk,
			       nchunks_of(c));
	return wait_slots(c, timeout_of(c), 0, chunk, err);
}

int wf_ps_client_flush(wf_ps_client *c, wf_err *err)
{
	if (c->nheld == 0)
		return 0;
	c->flushing = 1;
	int rc = wait_slots(c, timeout_of(c), 0, -1, err);
	c->flushing = 0;
	return rc;
}

int wf_ps_client_chunk_times(const wf_ps_client *c, int chunk, double *sent, double *landed)
{
	if (chunk < 0 || chunk >= nchunks_of(c))
		return -1;
	if (sent)
		*sent = c->sent_at[chunk];
	if (landed)
		*landed = c->landed_at[chunk];
	return 0;
}

int wf_ps_client_stale_count(const wf_ps_client *c)
{
	return c->stale;
}

/* Pull chunk k (or every chunk when k < 0; the state when state != 0);
 * the requests carry aux. */
static int pull(wf_ps_client *c, int chunk, int state, uint32_t aux, long *version, wf_err *err)
{
	const wf_ps_placement *pl = c->cfg.pl;
	int rc = 0, nc = nchunks_of(c);
	if (!pl)
		return wf_errf(err, WF_EINVAL, "ps client: pull needs a placement");
	if (chunk >= nc)
		return wf_errf(err, WF_EINVAL, "ps client: chunk %d out of range [0, %d)", chunk,
			       nc);
	for (int k = 0; k < nc && !rc && !state; k++) {
		if (chunk >= 0 && chunk != k)
			continue;
		wf_ps_hdr h;
		req_hdr(c, &h, WF_PS_OP_PULL, (uint32_t)k, 0);
		h.aux = aux;
		rc = send_req(c, server_of(c, (uint32_t)k), k, &h, NULL, NULL, 0, 0, err);
	}
	if (state) {
		if (!c->cfg.state || !c->cfg.nstate)
			return wf_errf(err, WF_EINVAL,
				       "ps client: pulling the state needs cfg.state");
		wf_ps_hdr h;
		req_hdr(c, &h, WF_PS_OP_PULL, WF_PS_STATE_CHUNK, 0);
		rc = send_req(c, server_of(c, WF_PS_STATE_CHUNK), nc, &h, NULL, NULL, 0, 0, err);
	}
	int wrc = wait_slots(c, timeout_of(c), 0, -1, rc ? NULL : err);
	if (version) {
		long m = -1;
		for (int i = 0; i < c->cap; i++)
			if (c->pend[i].used && c->pend[i].done &&
			    (m < 0 || c->pend[i].reply_step < m))
				m = c->pend[i].reply_step;
		*version = m;
	}
	clear_slots(c);
	return rc ? rc : wrc;
}

int wf_ps_client_pull(wf_ps_client *c, int chunk, long *version, wf_err *err)
{
	return pull(c, chunk, 0, 0, version, err);
}

int wf_ps_client_pull_aux(wf_ps_client *c, int chunk, uint32_t aux, long *version, wf_err *err)
{
	return pull(c, chunk, 0, aux, version, err);
}

int wf_ps_client_chunk_reply(const wf_ps_client *c, int chunk, long *step, uint32_t *aux)
{
	const pending *p = &c->pend[chunk];
	if (step)
		*step = p->reply_step;
	if (aux)
		*aux = p->aux;
	return p->stale;
}

int wf_ps_client_chunk_units(const wf_ps_client *c, int chunk, const long **units)
{
	*units = c->ulist;
	return c->pend[chunk].nunits;
}

void wf_ps_client_set_contributors(wf_ps_client *c, int n)
{
	c->cfg.contributors = n;
}

int wf_ps_client_pull_state(wf_ps_client *c, wf_err *err)
{
	return pull(c, -1, 1, 0, NULL, err);
}

int wf_ps_client_barrier(wf_ps_client *c, long step, wf_err *err)
{
	/* one server's refusal (the job went back, a restart) decides it: the
	 * others would hold this barrier until a step that never comes */
	c->fail_fast = 1;
	int rc = to_servers(c, TO_ALL, WF_PS_OP_BARRIER, step, NULL, err);
	c->fail_fast = 0;
	clear_slots(c);
	return rc;
}

int wf_ps_client_checkpoint(wf_ps_client *c, long step, wf_err *err)
{
	int rc = to_servers(c, TO_ALL, WF_PS_OP_CHECKPOINT, step, NULL, err);
	clear_slots(c);
	return rc;
}

int wf_ps_client_restore(wf_ps_client *c, long step, long *restored, wf_err *err)
{
	int rc = to_servers(c, TO_ALL, WF_PS_OP_RESTORE, step, NULL, err);
	long got = -2;
	for (int s = 0; !rc && s < c->cfg.nservers; s++) {
		long st = c->pend[slot_server(c, s)].reply_step;
		if (got != -2 && st != got)
			rc = wf_errf(err, WF_EFORMAT,
				     "restore: servers restored different steps (%ld and %ld)", got,
				     st);
		got = st;
	}
	if (!rc && restored)
		*restored = got;
	clear_slots(c);
	return rc;
}

int wf_ps_client_stats(wf_ps_client *c, int s, wf_ps_stats *out, wf_err *err)
{
	if (s < 0 || s >= c->cfg.nservers)
		return wf_errf(err, WF_EINVAL, "ps client: no server %d", s);
	memset(out, 0, sizeof(*out));
	c->stats_out = out;
	int rc = to_servers(c, s, WF_PS_OP_STATS, 0, NULL, err);
	c->stats_out = NULL;
	clear_slots(c);
	return rc;
}

void wf_ps_client_set_cancelable(wf_ps_client *c, int on)
{
	c->cancelable = on;
}

int wf_ps_client_server_of(const wf_ps_client *c, int chunk)
{
	return server_of(c, (uint32_t)chunk);
}

int wf_ps_client_leave(wf_ps_client *c, wf_err *err)
{
	/* a server that never answered has not counted this worker, and may
	 * not be there at all (a worker stopped while it waited for them); one
	 * that does not answer within WF_PS_LEAVE_WAIT (gone, restarting)
	 * counts it out after ps.heartbeat_timeout all the same */
	double was = c->cfg.timeout;
	c->cfg.timeout = WF_MIN(timeout_of(c), WF_PS_LEAVE_WAIT);
	int rc = to_servers(c, TO_HEARD, WF_PS_OP_LEAVE, 0, NULL, err);
	c->cfg.timeout = was;
	clear_slots(c);
	if (rc == WF_ETRANSIENT) {
		wf_warn("ps client: leave: %s: those servers count this worker out after "
			"ps.heartbeat_timeout",
			err ? err->msg : "no reply");
		wf_err_clear(err);
		rc = 0;
	}
	return rc;
}

int wf_ps_client_shutdown(wf_ps_client *c, wf_err *err)
{
	int rc = to_servers(c, TO_ALL, WF_PS_OP_SHUTDOWN, 0, NULL, err);
	clear_slots(c);
	return rc;
}
