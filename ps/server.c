/* server.c: the parameter-server event loop, aggregation, membership and
 * shard checkpoints. Single-threaded: the ROUTER socket, the chunk store and
 * the optimizer backend are touched only by the loop. */
#include "ps/server_impl.h"

#include "common/events.h"

/* ---- dispatch ----------------------------------------------------------- */

/* A worker registers at start and after a failure: replies still held for
 * it were owed to a request it no longer waits for (its process may even be
 * a new one), so they are dropped; what it pushed still counts. */
static void forget_replies(server *s, int w)
{
	for (int i = 0; i < s->nchunks; i++)
		wf_pss_release(s, &s->chunks[i].held[w]);
	wf_pss_release(s, &s->workers[w].barrier);
}

/* Fail every reply the server holds: the steps' and the barriers'. */
static void fail_waiting(server *s, int code, const char *why)
{
	for (int i = 0; i < s->nchunks; i++)
		wf_pss_fail_held(s, &s->chunks[i], code, why);
	for (int v = 0; v < s->nworkers; v++) {
		held *b = &s->workers[v].barrier;
		if (b->used) {
			wf_ps_hdr req = {.op = WF_PS_OP_BARRIER, .tag = b->tag};
			wf_pss_send_error(s, b->rid, b->rid_len, &req, code, why);
			wf_pss_release(s, b);
		}
	}
}

/* Elastic membership changed: say so (log and events), with the live count. */
static void membership_event(server *s, const char *what, int w, int joins)
{
	int live = wf_pss_live(s) + joins;
	wf_info("ps %d: %s: worker %d, %d of %d alive (at least %d needed), step %ld",
		s->cfg->index, what + strlen("worker_"), w, live, s->nworkers, s->cfg->min_workers,
		wf_pss_server_step(s));
	wf_event(what, json_pack("{s:i, s:i, s:i, s:I}", "worker", w, "server", s->cfg->index,
				 "live", live, "step", (json_int_t)wf_pss_server_step(s)));
}

/* Op leave: worker w is gone for good (its unit goes back to the queue when
 * the step completes); the step in progress completes without it. */
static void leave(server *s, const uint8_t *rid, size_t rid_len, const wf_ps_hdr *h, int w)
{
	worker *wk = &s->workers[w];
	int was = wk->alive;
	if (was == 1)
		forget_replies(s, w);
	/* also when this server never saw it (it restarted since): the
	 * leaver's heartbeats, which go on until its process ends, must not
	 * make it a member again */
	wk->alive = 0;
	if (was == 1 && s->cfg->min_workers > 0)
		membership_event(s, "worker_left", w, 0);
	wf_pss_send_ok(s, rid, rid_len, h, wf_pss_server_step(s), 0);
	wf_pss_membership_changed(s);
}

/* Some chunk here holds pushes of the step it aggregates. */
static int step_under_way(const server *s)
{
	for (int i = 0; i < s->nchunks; i++)
		for (int w = 0; w < s->nworkers; w++)
			if (s->chunks[i].pushed[w])
				return 1;
	return 0;
}

/* A message from worker w: its membership (register, leave, a worker
 * declared dead). 1 when the message was answered here. */
static int worker_message(server *s, const uint8_t *rid, size_t rid_len, const wf_ps_hdr *h, int w)
{
	worker *wk = &s->workers[w];
	wk->last_seen = wf_now();
	if (h->op == WF_PS_OP_LEAVE) {
		leave(s, rid, rid_len, h, w);
		return 1;
	}
	if (h->op == WF_PS_OP_REGISTER) {
		if (wk->alive == 0)
			wf_info("ps %d: worker %d registered again: it counts from now",
				s->cfg->index, w);
		forget_replies(s, w);
		wk->stall_step = -1;
	} else if (wk->alive == 0) {
		wf_pss_send_errorf(s, rid, rid_len, h, WF_ETRANSIENT, WF_PS_REJECT_STATE,
				   "worker %d was declared dead (no heartbeat for %.1f s): "
				   "register again",
				   w, s->cfg->heartbeat_timeout);
		return 1;
	}
	/* elastic: a worker is a member from its first message (its heartbeats
	 * come before it registers; after a server restarts it may not register
	 * there again) */
	if (wk->alive != 1 && s->cfg->min_workers > 0)
		membership_event(s, "worker_joined", w, 1);
	/* elastic: a worker that (re)joins while a step is under way here is
	 * awaited only from its first push on. It waits for the servers to
	 * agree on a step before it pushes (worker/exchange_ps.c): a server
	 * that waited for it in the step under way would never get there. One
	 * that registers between steps is awaited in the next, unless it says
	 * it is still waiting for the servers to agree (flag JOINING): then
	 * this server's next step would wait for it while another server went
	 * on without it, and the two would not agree again. */
	if (h->op == WF_PS_OP_REGISTER && (h->flags & WF_PS_FLAG_JOINING))
		wk->awaited = 0;
	else if (wk->alive != 1 || h->op == WF_PS_OP_REGISTER)
		wk->awaited = !step_under_way(s);
	if (h->op == WF_PS_OP_PUSH_PULL)
		wk->awaited = 1;
	wk->alive = 1;
	return 0;
}

/* The value of key in a wf_optim_describe text ("k=v k=v"), as a pointer
 * and length; NULL when absent. */
static const char *token_value(const char *text, const char *key, size_t klen, size_t *vlen)
{
	for (const char *t = text; *t;) {
		size_t len = strcspn(t, " ");
		if (len > klen && t[klen] == '=' && !strncmp(t, key, klen)) {
			*vlen = len - klen - 1;
			return t + klen + 1;
		}
		t += len;
		t += strspn(t, " ");
	}
	return NULL;
}

/* A register may carry the sender's optimizer settings (wf_optim_describe;
 * registers without it, from tools or tests, are not checked): 0 when they
 * are this server's, else up to four differences into why, each naming the
 * key and both values ("optimizer.lr: 0.1 on worker 1, 0.05 on parameter
 * server 0"); who names the sender. */
static int optim_differs(const server *s, const wf_ps_msg *m, const char *who, char *why, size_t n)
{
	char mine[1024], theirs[1024];
	if (m->nframes != 1)
		return 0;
	size_t len = WF_MIN(m->size[0], sizeof(theirs) - 1);
	memcpy(theirs, m->frame[0], len);
	theirs[len] = '\0';
	wf_optim_describe(&s->cfg->optim, mine, sizeof(mine));
	size_t end = strlen(mine);
	snprintf(mine + end, sizeof(mine) - end, " ps.compression=%s",
		 wf_ps_compression_name(s->cfg->compression));
	if (!strcmp(mine, theirs))
		return 0;
	size_t k = 0;
	int shown = 0;
	why[0] = '\0';
	/* the sender's keys against ours, then ours the sender lacks */
	for (int side = 0; side < 2; side++) {
		const char *a = side ? mine : theirs, *b = side ? theirs : mine;
		for (const char *t = a; *t && shown < 4;) {
			size_t tlen = strcspn(t, " ");
			const char *eq = memchr(t, '=', tlen);
			size_t klen = eq ? (size_t)(eq - t) : tlen, blen = 0;
			const char *av = eq ? eq + 1 : "";
			int alen = eq ? (int)(tlen - klen - 1) : 0;
			const char *bv = token_value(b, t, klen, &blen);
			int differs =
				bv ? !side && (blen != (size_t)alen || strncmp(av, bv, blen)) : 1;
			if (differs && k < n) {
				const char *sv = side ? "not used" : av, *mv = side ? av
									       : bv ? bv
										    : "not used";
				int sl = side ? 8 : alen, ml = side ? alen : bv ? (int)blen : 8;
				k += (size_t)snprintf(
					why + k, n - k,
					"%s%.*s: %.*s on %s, %.*s on parameter server %d",
					shown ? "; " : "", (int)klen, t, sl, sv, who, ml, mv,
					s->cfg->index);
				shown++;
			}
			t += tlen;
			t += strspn(t, " ");
		}
	}
	return 1;
}

/* A push's gradient as this server's ps.compression expects it: a bf16 or
 * topk frame is expanded to floats (in s->dense) in place of frame 0. 1
 * when it was refused instead, naming both settings. */
static int take_push(server *s, const uint8_t *rid, size_t rid_len, wf_ps_msg *m, const char *who)
{
	wf_ps_compression got = m->hdr.dtype == WF_PS_DTYPE_BF16   ? WF_PS_COMPRESSION_BF16
				: m->hdr.dtype == WF_PS_DTYPE_TOPK ? WF_PS_COMPRESSION_TOPK
								   : WF_PS_COMPRESSION_NONE;
	if (got != s->cfg->compression) {
		wf_pss_send_errorf(
			s, rid, rid_len, &m->hdr, WF_EINVAL, WF_PS_REJECT_DTYPE,
			"ps.compression: %s on %s, %s on parameter server %d; give every "
			"process of the job the same ps.compression",
			wf_ps_compression_name(got), who,
			wf_ps_compression_name(s->cfg->compression), s->cfg->index);
		return 1;
	}
	if (got == WF_PS_COMPRESSION_NONE)
		return 0;
	/* the chunk's floats (the parser checked the chunk is held here) */
	size_t n = got == WF_PS_COMPRESSION_BF16 ? m->size[0] / 2
						 : (size_t)s->lim.chunk_floats[m->hdr.chunk];
	if (n * sizeof(float) > s->dense.cap) {
		void *b = realloc(s->dense.buf, n * sizeof(float));
		if (!b) {
			wf_pss_send_errorf(s, rid, rid_len, &m->hdr, WF_ETRANSIENT,
					   WF_PS_REJECT_STATE,
					   "out of memory expanding a %s push of chunk %u",
					   wf_ps_compression_name(got), m->hdr.chunk);
			return 1;
		}
		s->dense = (wf_ps_scratch){b, n * sizeof(float)};
	}
	if (got == WF_PS_COMPRESSION_BF16)
		wf_ps_bf16_decode(s->dense.buf, m->frame[0], n);
	else /* the entries it names into zeros: the sum takes it as any push */
		wf_ps_topk_decode(s->dense.buf, n, m->frame[0], m->size[0]);
	m->frame[0] = s->dense.buf;
	m->size[0] = n * sizeof(float);
	return 0;
}

static int serves_chunks(const server *s)
{
	for (int i = 0; i < s->nchunks; i++)
		if (wf_pss_serving(s, &s->chunks[i]))
			return 1;
	return 0;
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
		wf_pss_send_error(s, rid, rid_len, &m.hdr, WF_EFORMAT, e.msg);
		return;
	}
	const wf_ps_hdr *h = &m.hdr;
	int w = -1;
	char why[800], who[32];
	snprintf(who, sizeof(who), "%s %d",
		 WF_PS_SENDER_ROLE(h->sender) == WF_PS_ROLE_CHIEF ? "the chief" : "worker",
		 WF_PS_SENDER_INDEX(h->sender));
	if (h->op == WF_PS_OP_REGISTER && optim_differs(s, &m, who, why, sizeof(why))) {
		/* a setting, not a fault: the same config fails the same way after a
		 * restart, so the sender's error is permanent */
		wf_pss_send_errorf(s, rid, rid_len, h, WF_EINVAL, -1,
				   "%s; give every process of the job the same optimizer and "
				   "ps.compression settings (config file, --set, WEFT_* variables)",
				   why);
		return;
	}
	if (WF_PS_SENDER_ROLE(h->sender) == WF_PS_ROLE_WORKER) {
		w = WF_PS_SENDER_INDEX(h->sender);
		if (worker_message(s, rid, rid_len, h, w))
			return;
	}
	int role = WF_PS_SENDER_ROLE(h->sender);
	if (s->replicas > 1 && role != WF_PS_ROLE_SERVER &&
	    (h->op == WF_PS_OP_PUSH_PULL || h->op == WF_PS_OP_PULL || h->op == WF_PS_OP_INIT) &&
	    wf_pss_repl_route(s, rid, rid_len, h,
			      h->chunk == WF_PS_STATE_CHUNK ? 0 : s->pl.chunks[h->chunk].server))
		return;
	int joining = s->replicas > 1 ? wf_pss_repl_joining(s) : -1;
	if (joining >= 0 && (h->op == WF_PS_OP_CHECKPOINT || h->op == WF_PS_OP_BARRIER)) {
		char text[160];
		snprintf(text, sizeof(text), "ps %d is still joining group %d: try again",
			 s->cfg->index, joining);
		wf_pss_send_redirect(s, rid, rid_len, h, -1, text);
		return;
	}
	if (role == WF_PS_ROLE_SERVER && h->op == WF_PS_OP_INIT &&
	    s->groups[h->chunk == WF_PS_STATE_CHUNK ? 0 : s->pl.chunks[h->chunk].server].role ==
		    GRP_PRIMARY) {
		char text[160];
		snprintf(text, sizeof(text), "ps %d is the primary of this group now",
			 s->cfg->index);
		wf_pss_send_redirect(s, rid, rid_len, h, s->cfg->index, text);
		return;
	}
	switch (h->op) {
	case WF_PS_OP_REGISTER:
		/* aux: the groups this server is the primary of (ps/proto.h) */
		wf_pss_send_ok(s, rid, rid_len, h, wf_pss_server_step(s), wf_pss_primary_bits(s));
		if (w >= 0)
			wf_pss_membership_changed(s);
		break;
	case WF_PS_OP_INIT: wf_pss_op_init(s, rid, rid_len, &m); break;
	case WF_PS_OP_PUSH_PULL:
		if (!take_push(s, rid, rid_len, &m, who))
			wf_pss_op_push_pull(s, rid, rid_len, &m, w);
		break;
	case WF_PS_OP_PULL: wf_pss_op_pull(s, rid, rid_len, &m); break;
	case WF_PS_OP_BARRIER:
		if (w < 0) {
			wf_pss_send_ok(s, rid, rid_len, h, h->step, 0);
			break;
		}
		if (serves_chunks(s) && (long)h->step > wf_pss_server_step(s)) {
			wf_pss_send_errorf(
				s, rid, rid_len, h, WF_ETRANSIENT, WF_PS_REJECT_STATE,
				"barrier at step %lld but the job is at step %ld (it went "
				"back): train from there",
				(long long)h->step, wf_pss_server_step(s));
			break;
		}
		if (s->workers[w].barrier.used)
			wf_pss_release(s, &s->workers[w].barrier); /* a retried barrier replaces */
		wf_pss_hold(s, &s->workers[w].barrier, rid, rid_len, h);
		wf_pss_barrier_try_release(s);
		break;
	case WF_PS_OP_CHECKPOINT: wf_pss_op_checkpoint(s, rid, rid_len, &m); break;
	case WF_PS_OP_RESTORE: wf_pss_op_restore(s, rid, rid_len, &m); break;
	case WF_PS_OP_STATS: wf_pss_op_stats(s, rid, rid_len, h); break;
	case WF_PS_OP_SHUTDOWN:
		wf_info("ps %d: shutdown requested", s->cfg->index);
		if (s->cfg->mode == WF_PS_MODE_SSP)
			wf_info("ps %d: ssp: %llu pushes waited for the staleness bound %d; the "
				"largest lead of an answered push over the slowest worker was %ld "
				"step(s)",
				s->cfg->index, (unsigned long long)s->ssp_held, s->cfg->staleness,
				s->ssp_max_lead);
		if (wf_pss_units_on(s))
			wf_pss_log_stats(s); /* the late pushes of the whole run */
		fail_waiting(s, WF_ESTOPPED, "server shutting down");
		wf_pss_send_ok(s, rid, rid_len, h, wf_pss_server_step(s), 0);
		s->running = 0;
		break;
	case WF_PS_OP_HEARTBEAT: {
		wf_ps_hdr r = *h; /* to a server, the reply's chunk: wf_pss_repl_unbacked */
		int p = WF_PS_SENDER_INDEX(h->sender);
		r.chunk = role == WF_PS_ROLE_SERVER && p < s->cfg->nservers
				  ? wf_pss_repl_unbacked(s, p)
				  : h->chunk;
		wf_pss_send_ok(s, rid, rid_len, &r, wf_pss_server_step(s), s->incarnation);
		break;
	}
	case WF_PS_OP_REPLICATE:
	case WF_PS_OP_UNITS: wf_pss_op_replicate(s, rid, rid_len, &m); break;
	case WF_PS_OP_JOIN: wf_pss_op_join(s, rid, rid_len, &m); break;
	case WF_PS_OP_HANDOFF: wf_pss_op_handoff(s, rid, rid_len, &m); break;
	default: break;
	}
}

int wf_pss_recv(server *s, void *sock, zmq_msg_t *frames, int *overflow)
{
	int n = 0, more = 1;
	*overflow = 0;
	while (more) {
		zmq_msg_t extra, *m = n < MAX_RECV ? &frames[n] : &extra;
		zmq_msg_init(m);
		if (zmq_msg_recv(m, sock, n == 0 ? ZMQ_DONTWAIT : 0) < 0) {
			zmq_msg_close(m);
			for (int i = 0; i < n; i++)
				zmq_msg_close(&frames[i]);
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
		wf_pss_release(s, &wk->barrier);
		wf_warn("ps %d: worker %d silent for %.1f s: declared dead, it leaves the "
			"aggregation count until it registers again",
			s->cfg->index, w, now - wk->last_seen);
		if (s->cfg->min_workers > 0)
			membership_event(s, "worker_left", w, 0);
		changed = 1;
	}
	if (changed)
		wf_pss_membership_changed(s);
}

/* Elastic: fewer than min_workers alive for elastic_timeout: the steps that
 * wait can never complete, so their replies fail, for good (a setting or a
 * cluster too small, not a fault a retry mends). */
static void check_elastic(server *s, double now)
{
	int live = wf_pss_live(s);
	if (s->cfg->min_workers <= 0 || live >= s->cfg->min_workers) {
		s->short_since = 0;
		return;
	}
	if (!s->short_since)
		s->short_since = now;
	if (s->cfg->elastic_timeout <= 0 || now - s->short_since < s->cfg->elastic_timeout)
		return;
	char why[240];
	snprintf(why, sizeof(why),
		 "ps %d: only %d worker%s alive for %.0f s (strategy.elastic_timeout), fewer "
		 "than strategy.min_workers %d: the job cannot go on; start more workers",
		 s->cfg->index, live, live == 1 ? "" : "s", now - s->short_since,
		 s->cfg->min_workers);
	if (s->held_count)
		wf_error("%s", why);
	fail_waiting(s, WF_EINVAL, why);
	s->short_since = now;
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

/* Server cfg->index keeps the chunks placed on server g (with replicas). */
static int held_here(const wf_ps_server_cfg *cfg, int replicas, int g)
{
	int n = cfg->nservers;
	return ((cfg->index - g) % n + n) % n < replicas;
}

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
	s->replicas = cfg->replicas > 1 ? cfg->replicas : 1;
	if (s->replicas > cfg->nservers)
		return wf_errf(err, WF_EINVAL,
			       "ps.replicas %d: more copies than parameter servers (%d); use at "
			       "most %d, or start more servers",
			       s->replicas, cfg->nservers, cfg->nservers);
	if (2 * (s->replicas - 1) > WF_PS_MAX_PEERS)
		return wf_errf(err, WF_EINVAL, "ps.replicas %d: at most %d", s->replicas,
			       WF_PS_MAX_PEERS / 2 + 1);
	if (s->replicas > 1 && !cfg->peers)
		return wf_errf(err, WF_EINVAL, "ps: ps.replicas %d needs every server's address",
			       s->replicas);
	if (cfg->backup_workers < 0 || cfg->backup_workers >= cfg->nworkers ||
	    (cfg->backup_workers > 0 && cfg->mode != WF_PS_MODE_SYNC))
		return wf_errf(
			err, WF_EINVAL,
			"ps: backup_workers %d: want 0, or 1..%d with mode sync (%d workers)",
			cfg->backup_workers, cfg->nworkers - 1, cfg->nworkers);
	if (cfg->min_workers < 0 || cfg->min_workers > cfg->nworkers ||
	    (cfg->min_workers > 0 && cfg->mode != WF_PS_MODE_SYNC))
		return wf_errf(err, WF_EINVAL,
			       "ps: min_workers %d: want 0 (not elastic), or 1..%d with mode sync",
			       cfg->min_workers, cfg->nworkers);
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
	/* this server keeps group g (the chunks placed on server g) when it is
	 * one of g, g+1, ..., g+replicas-1; the state belongs to group 0 */
	for (int g = 0; g < s->pl.nchunks; g++)
		s->nchunks += held_here(cfg, s->replicas, s->pl.chunks[g].server);
	s->nstate = held_here(cfg, s->replicas, 0) ? cfg->nstate : 0;
	s->chunks = calloc((size_t)s->nchunks + 1, sizeof(*s->chunks));
	s->shards = calloc((size_t)s->nchunks + 1, sizeof(*s->shards));
	s->local = malloc((size_t)s->pl.nchunks * sizeof(*s->local));
	s->floats = calloc((size_t)s->pl.nchunks, sizeof(*s->floats));
	s->workers = calloc((size_t)s->nworkers, sizeof(*s->workers));
	if (s->nstate) {
		s->state = calloc(s->nstate, sizeof(float));
		if (wf_pss_osum_init(&s->state_sum, s->nstate, cfg->nworkers) != 0)
			return wf_errf(err, WF_ENOMEM, "ps: out of memory");
	}
	if (cfg->priority && cfg->mode == WF_PS_MODE_SYNC && s->replicas < 2 &&
	    cfg->backup_workers == 0 && cfg->min_workers == 0)
		s->due = calloc((size_t)s->nchunks + 1, sizeof(*s->due));
	if (!s->chunks || !s->shards || !s->local || !s->floats || !s->workers ||
	    (s->nstate && !s->state) ||
	    (cfg->priority && cfg->mode == WF_PS_MODE_SYNC && s->replicas < 2 &&
	     cfg->backup_workers == 0 && cfg->min_workers == 0 && !s->due))
		return wf_errf(err, WF_ENOMEM, "ps: out of memory");
	for (int w = 0; w < s->nworkers; w++)
		s->workers[w] =
			(worker){.alive = -1, .last_step = -1, .stall_step = -1, .ssp_logged = -1};
	int k = 0;
	for (int g = 0; g < s->pl.nchunks; g++) {
		const wf_ps_chunk *pc = &s->pl.chunks[g];
		s->local[g] = -1;
		if (!held_here(cfg, s->replicas, pc->server))
			continue;
		schunk *c = &s->chunks[k];
		c->gidx = g;
		c->group = pc->server;
		c->racked = calloc((size_t)cfg->nservers, sizeof(*c->racked));
		c->offset = pc->offset;
		c->count = pc->count;
		c->vb = wf_pss_vbuf_new(c->count, NULL);
		c->values = c->vb ? c->vb->data : NULL;
		int sum_rc = wf_pss_osum_init(&c->sum, c->count, s->nworkers);
		for (int j = 0; j < s->nslots; j++)
			c->slot[j] = calloc(c->count, sizeof(float));
		c->pushed = calloc((size_t)s->nworkers, 1);
		c->held = calloc((size_t)s->nworkers, sizeof(*c->held));
		if (!c->values || sum_rc || !c->pushed || !c->held || !c->racked ||
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
		wf_pss_vbuf_unref(c->vb);
		wf_pss_osum_free(&c->sum, s->nworkers);
		free(c->fsegs);
		free(c->ffrozen);
		free(c->slot[0]);
		free(c->slot[1]);
		free(c->pushed);
		free(c->held);
		free(c->racked);
	}
	wf_pss_repl_free(s);
	for (int i = 0; i < MAX_RECV; i++)
		wf_ps_scratch_free(&s->align[i]);
	wf_ps_scratch_free(&s->dense);
	free(s->chunks);
	free(s->shards);
	free(s->local);
	free(s->due);
	free(s->floats);
	free(s->workers);
	free(s->state);
	wf_pss_osum_free(&s->state_sum, s->nworkers);
	wf_pss_units_free(s);
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
	c->heartbeat_timeout = WF_PS_HEARTBEAT_TIMEOUT_DEFAULT;
	c->stall_timeout = WF_PS_STALL_TIMEOUT_DEFAULT;
	c->stats_every = WF_PS_STATS_EVERY_DEFAULT;
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
		rc = wf_pss_restore(s, cfg->ckpt_dir, -1, &step, &e);
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
	if ((rc = wf_pss_repl_init(s, err)) != 0)
		goto cleanup;
	s->running = 1;
	zmq_pollitem_t items[1 + 2 * WF_PS_MAX_PEERS]; /* peers and their monitors */
	int nitems = 1 + wf_pss_repl_poll_items(s, items + 1);
	items[0] = (zmq_pollitem_t){.socket = s->sock, .events = ZMQ_POLLIN};
	while (s->running) {
		if (cfg->stop && *cfg->stop) {
			rc = wf_errf(err, WF_ESTOPPED, "ps %d: stopped by signal", cfg->index);
			break;
		}
		if (zmq_poll(items, nitems, 50) < 0 && zmq_errno() != EINTR) {
			rc = wf_errf(err, WF_EINTERNAL, "ps %d: zmq_poll: %s", cfg->index,
				     zmq_strerror(zmq_errno()));
			break;
		}
		for (int k = 0; k < 256 && s->running; k++) {
			int overflow, n = wf_pss_recv(s, s->sock, s->frames, &overflow);
			if (n <= 0)
				break;
			handle(s, n, overflow);
			for (int i = 0; i < n; i++)
				zmq_msg_close(&s->frames[i]);
		}
		if (s->ndue) /* this batch's completions, first layers first */
			wf_pss_send_due(s);
		wf_pss_repl_tick(s);
		double now = wf_now();
		check_heartbeats(s, now);
		check_elastic(s, now);
		if (now - s->last_stall_check > 0.1) {
			check_stalls(s, now);
			s->last_stall_check = now;
		}
		if (cfg->stats_every > 0 && now - s->last_stats >= cfg->stats_every) {
			wf_pss_log_stats(s);
			s->last_stats = now;
		}
		if (s->ndue) /* completed by a worker's death or a backup's ack */
			wf_pss_send_due(s);
	}
	linger = 2000; /* let the shutdown reply leave */
	zmq_setsockopt(s->sock, ZMQ_LINGER, &linger, sizeof(linger));
cleanup:
	if (s->sock)
		zmq_close(s->sock);
	wf_pss_repl_free(s); /* its sockets, before the context ends */
	wf_ps_zap_stop(zap);
	if (s->zctx)
		zmq_ctx_term(s->zctx);
	server_free(s);
	free(s);
	return rc;
}
