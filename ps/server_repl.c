/* server_repl.c: replicated groups (ps.replicas > 1; ps/proto.h says what a
 * group, its primary and its backups are). Primary-backup: the primary
 * applies each update, sends it to its live backups in order on one DEALER
 * per backup, and answers the workers once all of them acknowledged it; a
 * backup applies the same gradient with the same optimizer, so the copies
 * stay bitwise equal. A backup becomes primary when a worker's request says
 * the old one failed (flag FAILOVER); a restarted server asks the other
 * members of each of its groups who the primary is (join) and receives the
 * group's state from it, while training goes on. */
#include "ps/server_impl.h"

#include "common/events.h"
#include "ps/client.h"

#define PEER_HEARTBEAT 0.25 /* seconds between heartbeats to the peers */
#define JOIN_RETRY     0.5  /* seconds between join requests */
#define JOIN_SOON      0.05 /* ... when either end had no connection to the other yet */
#define HANDOFF_AFTER  1.0  /* seconds a returned server backs its group before it gets it back */

/* k-th member of group g (k = 0: the server placement gave it). */
static int member(const server *s, int g, int k)
{
	return (g + k) % s->cfg->nservers;
}

/* p's rank among the members of group g (0: the group's own server), -1 if not one. */
static int member_rank(const server *s, int g, int p)
{
	int n = s->cfg->nservers, k = ((p - g) % n + n) % n;
	return k < s->replicas ? k : -1;
}

static const char *role_name(grp_role r)
{
	static const char *const names[] = {"joining", "the primary of", "a backup of",
					    "receiving the state of"};
	return names[r];
}

/* Every chunk of group g (and the state, for group 0) holds values. */
static int group_ready(const server *s, int g)
{
	for (int i = 0; i < s->nchunks; i++)
		if (s->chunks[i].group == g && !s->chunks[i].initialized)
			return 0;
	return g != 0 || !s->nstate || s->state_initialized;
}

static long group_step(const server *s, int g)
{
	long m = -1;
	for (int i = 0; i < s->nchunks; i++)
		if (s->chunks[i].group == g && (m < 0 || s->chunks[i].version < m))
			m = s->chunks[i].version;
	return m;
}

uint32_t wf_pss_primary_bits(const server *s)
{
	uint32_t bits = 0;
	for (int g = 0; g < s->cfg->nservers && g < 32; g++)
		if (s->groups[g].member && s->groups[g].role == GRP_PRIMARY)
			bits |= 1u << g;
	return bits;
}

uint32_t wf_pss_repl_unbacked(const server *s, int p)
{
	uint32_t bits = 0;
	if (s->replicas < 2 || p == s->cfg->index)
		return 0;
	for (int g = 0; g < s->cfg->nservers && g < 32; g++)
		if (s->groups[g].member && s->groups[g].role == GRP_PRIMARY &&
		    member_rank(s, g, p) >= 0 && !s->groups[g].live[p])
			bits |= 1u << g;
	return bits;
}

int wf_pss_repl_joining(const server *s)
{
	for (int g = 0; g < s->cfg->nservers; g++)
		if (s->groups[g].member &&
		    (s->groups[g].role == GRP_JOINING || s->groups[g].role == GRP_WAITING))
			return g;
	return -1;
}

/* ---- sending to peers ------------------------------------------------------ */

static void peer_hdr(const server *s, wf_ps_hdr *h, uint16_t op, uint32_t chunk, long step)
{
	memset(h, 0, sizeof(*h));
	h->version = WF_PS_VERSION;
	h->op = op;
	h->sender = WF_PS_SENDER(WF_PS_ROLE_SERVER, s->cfg->index);
	h->job_id = s->cfg->job_id;
	h->chunk = chunk;
	h->step = step;
}

/* Send without blocking (ZMQ_IMMEDIATE: only a live connection takes it);
 * -1 when the peer cannot take it now. The frames are copied. */
static int peer_send(server *s, int p, wf_ps_hdr *h, const void *const *f, const size_t *sz, int nf)
{
	void *sock = s->peers[p].sock;
	uint8_t hb[WF_PS_HEADER_BYTES];
	if (!sock)
		return -1;
	if (nf)
		h->dtype = h->op == WF_PS_OP_JOIN || h->op == WF_PS_OP_UNITS ? WF_PS_DTYPE_BYTES
									     : WF_PS_DTYPE_F32;
	wf_ps_hdr_encode(h, hb, f, sz, nf);
	if (zmq_send(sock, hb, sizeof(hb), ZMQ_DONTWAIT | (nf ? ZMQ_SNDMORE : 0)) < 0)
		return -1;
	for (int i = 0; i < nf; i++)
		if (zmq_send(sock, f[i], sz[i], i + 1 < nf ? ZMQ_SNDMORE : 0) < 0)
			return -1;
	s->bytes_out += WF_PS_HEADER_BYTES;
	for (int i = 0; i < nf; i++)
		s->bytes_out += sz[i];
	return 0;
}

/* Chunk c's values and slots (or the state, c NULL) to peer p as an init;
 * aux: the join it answers (0: an init the chief sent). */
static int send_install(server *s, int p, schunk *c, uint32_t aux)
{
	wf_ps_hdr h;
	const void *f[4];
	size_t sz[4];
	int nf = 1;
	if (!c) {
		peer_hdr(s, &h, WF_PS_OP_INIT, WF_PS_STATE_CHUNK, wf_pss_server_step(s));
		f[0] = s->state;
		sz[0] = s->nstate * sizeof(float);
	} else {
		peer_hdr(s, &h, WF_PS_OP_INIT, (uint32_t)c->gidx, c->version);
		f[0] = c->values;
		sz[0] = c->count * sizeof(float);
		for (int k = 0; k < s->nslots; k++, nf++) {
			f[nf] = c->slot[k];
			sz[nf] = sz[0];
		}
		h.tag = (uint32_t)c->rseq;
		if ((f[nf] = wf_pss_units_frame(s, c, &sz[nf])) != NULL) {
			h.flags |= WF_PS_FLAG_UNITS;
			nf++;
		}
	}
	h.aux = aux;
	return peer_send(s, p, &h, f, sz, nf);
}

/* Backup p of group g stops counting: what waited for it is answered. */
static void backup_lost(server *s, int g, int p, const char *why)
{
	group *gr = &s->groups[g];
	if (!gr->live[p])
		return;
	gr->live[p] = 0;
	wf_warn("ps %d: backup ps %d of group %d %s: the group goes on without it until it "
		"joins again",
		s->cfg->index, p, g, why);
	for (int i = 0; i < s->nchunks; i++)
		if (s->chunks[i].group == g)
			wf_pss_answer_ready(s, &s->chunks[i]);
}

/* The frozen ranges of the last apply of c as a push's frozen frame. */
static size_t frozen_frame(const schunk *c, uint8_t *out)
{
	size_t n = 0;
	for (int i = 0; i < c->nfsegs; i++) {
		if (!c->ffrozen[i])
			continue;
		wf_ps_put_u64(out + 16 * n, c->fsegs[i]);
		wf_ps_put_u64(out + 16 * n + 8, c->fsegs[i + 1]);
		n++;
	}
	return 16 * n;
}

long wf_pss_replicate(server *s, schunk *c, const float *grad, long contributors, long step,
		      int with_state)
{
	group *gr = &s->groups[c->group];
	if (s->replicas < 2 || gr->role != GRP_PRIMARY)
		return 0;
	int any = 0;
	c->rseq++;
	size_t frb = 0;
	if (grad && c->nfsegs) {
		size_t need = (size_t)c->nfsegs * 16;
		if (need > s->rframe_cap) {
			uint8_t *b = realloc(s->rframe, need);
			if (!b) { /* without its frozen ranges a backup would diverge */
				wf_error(
					"ps %d: out of memory replicating chunk %d's frozen ranges",
					s->cfg->index, c->gidx);
				memset(gr->live, 0, (size_t)s->cfg->nservers);
				return 0;
			}
			s->rframe = b;
			s->rframe_cap = need;
		}
		frb = frozen_frame(c, s->rframe);
	}
	size_t ub = 0;
	const uint8_t *uf = grad ? wf_pss_units_frame(s, c, &ub) : NULL;
	for (int p = 0; p < s->cfg->nservers; p++) {
		if (!gr->live[p])
			continue;
		int rc;
		if (!grad) {
			rc = send_install(s, p, c, 0);
		} else {
			wf_ps_hdr h;
			const void *f[4] = {grad};
			size_t sz[4] = {c->count * sizeof(float)};
			int nf = 1;
			peer_hdr(s, &h, WF_PS_OP_REPLICATE, (uint32_t)c->gidx, step);
			h.tag = (uint32_t)c->rseq;
			h.aux = (uint32_t)contributors;
			if (with_state && s->nstate) {
				h.flags |= WF_PS_FLAG_STATE;
				f[nf] = s->state;
				sz[nf++] = s->nstate * sizeof(float);
			}
			if (uf) {
				h.flags |= WF_PS_FLAG_UNITS;
				f[nf] = uf;
				sz[nf++] = ub;
			}
			if (frb) {
				h.flags |= WF_PS_FLAG_FROZEN;
				f[nf] = s->rframe;
				sz[nf++] = frb;
			}
			rc = peer_send(s, p, &h, f, sz, nf);
		}
		if (rc) {
			gr->live[p] = 0;
			wf_warn("ps %d: backup ps %d of group %d takes no message: the group goes "
				"on without it until it joins again",
				s->cfg->index, p, c->group);
		} else {
			any = 1;
		}
	}
	return any ? c->rseq : 0;
}

long wf_pss_replicate_units(server *s, schunk *c)
{
	group *gr = &s->groups[c->group];
	size_t ub = 0;
	const uint8_t *uf;
	if (s->replicas < 2 || gr->role != GRP_PRIMARY || !(uf = wf_pss_units_frame(s, c, &ub)))
		return 0;
	c->rseq++;
	int any = 0;
	for (int p = 0; p < s->cfg->nservers; p++) {
		if (!gr->live[p])
			continue;
		wf_ps_hdr h;
		const void *f[1] = {uf};
		size_t sz[1] = {ub};
		peer_hdr(s, &h, WF_PS_OP_UNITS, (uint32_t)c->gidx, c->version);
		h.tag = (uint32_t)c->rseq;
		if (peer_send(s, p, &h, f, sz, 1) == 0) {
			any = 1;
			continue;
		}
		gr->live[p] = 0;
		wf_warn("ps %d: backup ps %d of group %d takes no message: the group goes on "
			"without it until it joins again",
			s->cfg->index, p, c->group);
	}
	return any ? c->rseq : 0;
}

schunk *wf_pss_replicate_state(server *s)
{
	group *gr = &s->groups[0];
	if (s->replicas < 2 || gr->role != GRP_PRIMARY || !s->nstate)
		return NULL;
	for (int p = 0; p < s->cfg->nservers; p++)
		if (gr->live[p] && send_install(s, p, NULL, 0))
			gr->live[p] = 0;
	/* the backups acknowledge inits of chunks only: the first initialized
	 * chunk of group 0 goes again behind the state, and its
	 * acknowledgement says the state arrived */
	for (int i = 0; i < s->nchunks; i++) {
		schunk *c = &s->chunks[i];
		if (c->group == 0 && c->initialized)
			return wf_pss_replicate(s, c, NULL, 0, c->version, 0) ? c : NULL;
	}
	return NULL;
}

static int acked(const server *s, const schunk *c, long need)
{
	const group *gr = &s->groups[c->group];
	for (int p = 0; p < s->cfg->nservers; p++)
		if (gr->live[p] && c->racked[p] < need)
			return 0;
	return 1;
}

void wf_pss_answer_ready(server *s, schunk *c)
{
	for (int i = 0; i < 2; i++) {
		held *h = &c->init[i];
		if (!h->used || !acked(s, c, h->need))
			continue;
		wf_ps_hdr req = {.op = h->op,
				 .tag = h->tag,
				 .chunk = i ? WF_PS_STATE_CHUNK : (uint32_t)c->gidx};
		wf_pss_send_ok(s, h->rid, h->rid_len, &req, h->step, 0);
		wf_pss_release(s, h);
	}
	for (int w = 0; w < s->nworkers; w++) {
		held *h = &c->held[w];
		if (!h->used || h->need <= 0 || !acked(s, c, h->need))
			continue;
		h->need = 0;
		if (s->cfg->mode == WF_PS_MODE_SSP &&
		    h->step > wf_pss_slowest_step(s) + s->cfg->staleness)
			continue; /* now only the staleness bound holds it */
		if (s->cfg->mode == WF_PS_MODE_SSP)
			wf_pss_ssp_answered(s, h->step);
		wf_pss_send_values(s, c, h, 1, h->stale);
		wf_pss_release(s, h);
	}
}

/* ---- the backup's side ----------------------------------------------------- */

/* Start (again) asking the other members of g for its state; what this
 * server holds of g counts for nothing until a primary's inits arrive. */
static void rejoin(server *s, int g)
{
	group *gr = &s->groups[g];
	gr->role = GRP_JOINING;
	gr->since = wf_now();
	gr->last_ask = 0;
	gr->got = 0;
	gr->join_id = (gr->join_id * 2654435761u + 2) | 1; /* never 0: the chief's init */
	memset(gr->asked, 0, (size_t)s->cfg->nservers);
	for (int i = 0; i < s->nchunks; i++)
		if (s->chunks[i].group == g)
			s->chunks[i].synced = 0;
}

void wf_pss_op_replicate(server *s, const uint8_t *rid, size_t rid_len, const wf_ps_msg *m)
{
	const wf_ps_hdr *h = &m->hdr;
	int from = WF_PS_SENDER_INDEX(h->sender);
	schunk *c = &s->chunks[s->local[h->chunk]];
	group *gr = &s->groups[c->group];
	if (WF_PS_SENDER_ROLE(h->sender) != WF_PS_ROLE_SERVER || from >= s->cfg->nservers) {
		wf_pss_send_errorf(s, rid, rid_len, h, WF_EINVAL, WF_PS_REJECT_SENDER,
				   "replicate comes only from a parameter server");
		return;
	}
	if (gr->role == GRP_PRIMARY) { /* fencing: the sender is primary no more */
		char text[160];
		snprintf(text, sizeof(text), "ps %d is the primary of group %d now", s->cfg->index,
			 c->group);
		wf_pss_send_redirect(s, rid, rid_len, h, s->cfg->index, text);
		return;
	}
	int32_t delta = (int32_t)(h->tag - (uint32_t)c->rseq);
	if (gr->role == GRP_JOINING || gr->primary != from || !c->synced || delta > 1) {
		wf_pss_send_errorf(s, rid, rid_len, h, WF_ETRANSIENT, WF_PS_REJECT_STATE,
				   "ps %d cannot apply update %u of chunk %d from ps %d (it is %s "
				   "group %d, primary ps %d, at update %ld): it joins again",
				   s->cfg->index, h->tag, c->gidx, from, role_name(gr->role),
				   c->group, gr->primary, c->rseq);
		if (gr->role == GRP_BACKUP) /* out of step: take the primary's state again */
			rejoin(s, c->group);
		return;
	}
	if (delta == 1 && h->op == WF_PS_OP_UNITS) {
		wf_pss_units_take(s, c, m->frame[0], m->size[0]);
		c->rseq = h->tag;
	} else if (delta == 1) {
		if (wf_pss_take_frozen(c, m) != 0) {
			wf_pss_send_errorf(s, rid, rid_len, h, WF_ETRANSIENT, WF_PS_REJECT_STATE,
					   "out of memory for the frozen ranges of chunk %d",
					   c->gidx);
			return;
		}
		long contributors = h->aux ? (long)h->aux : 1;
		wf_pss_apply(s, c, m->frame[0], contributors, (long)h->step);
		int state = (h->flags & WF_PS_FLAG_STATE) != 0;
		if (state)
			memcpy(s->state, m->frame[1], s->nstate * sizeof(float));
		if (h->flags & WF_PS_FLAG_UNITS)
			wf_pss_units_take(s, c, m->frame[1 + state], m->size[1 + state]);
		c->rseq = h->tag;
	}
	wf_pss_send_ok(s, rid, rid_len, h, c->version, 0);
}

static void joined(server *s, int g)
{
	group *gr = &s->groups[g];
	gr->role = GRP_BACKUP;
	wf_info("ps %d: joined group %d as a backup of ps %d at step %ld", s->cfg->index, g,
		gr->primary, group_step(s, g));
	wf_event("ps_joined", json_pack("{s:i, s:i, s:I}", "group", g, "primary", gr->primary,
					"step", (json_int_t)group_step(s, g)));
}

void wf_pss_repl_installed(server *s, const wf_ps_hdr *h)
{
	int from = WF_PS_SENDER_INDEX(h->sender);
	int g = h->chunk == WF_PS_STATE_CHUNK ? 0 : s->pl.chunks[h->chunk].server;
	group *gr = &s->groups[g];
	if (h->chunk != WF_PS_STATE_CHUNK) {
		schunk *c = &s->chunks[s->local[h->chunk]];
		c->rseq = h->tag;
		c->synced = 1;
	}
	if ((gr->role == GRP_JOINING || gr->role == GRP_WAITING) && h->aux == gr->join_id) {
		/* an init of this join: it may arrive before the join's answer */
		gr->primary = from;
		gr->got++;
		if (gr->role == GRP_WAITING && gr->got >= gr->installs)
			joined(s, g);
	} else if (gr->role != GRP_PRIMARY && h->aux == 0) {
		/* the chief's init forwarded: the sender is the primary (a
		 * joining server too: a primary forwards the seed only to the
		 * members it counts; one it counted before this process started
		 * drops it at the next heartbeat, which tells it to join again) */
		gr->role = GRP_BACKUP;
		gr->primary = from;
	}
}

/* ---- joining --------------------------------------------------------------- */

/* Primary of g: take p as a backup and send it the group's state (as inits
 * on the replication connection, ahead of every later update); join: the
 * id its inits carry. Returns the inits sent, -1 when p takes none. */
static int install_backup(server *s, int g, int p, uint32_t join)
{
	group *gr = &s->groups[g];
	int n = 0;
	for (int i = 0; i < s->nchunks; i++) {
		schunk *c = &s->chunks[i];
		if (c->group != g || !c->initialized) /* its init is replicated when it comes */
			continue;
		if (send_install(s, p, c, join))
			return -1;
		c->racked[p] = c->rseq;
		n++;
	}
	if (g == 0 && s->nstate && s->state_initialized) {
		if (send_install(s, p, NULL, join))
			return -1;
		n++;
	}
	gr->live[p] = 1;
	if (p == g) /* the group's own server is back: it gets the group back */
		gr->handoff_at = wf_now() + HANDOFF_AFTER;
	for (int i = 0; i < s->nchunks; i++)
		if (s->chunks[i].group == g)
			wf_pss_answer_ready(s, &s->chunks[i]);
	return n;
}

static void become_primary(server *s, int g, const char *why)
{
	group *gr = &s->groups[g];
	int old = gr->primary;
	gr->role = GRP_PRIMARY;
	gr->primary = s->cfg->index;
	memset(gr->live, 0, (size_t)s->cfg->nservers);
	wf_warn("ps %d: primary of group %d from step %ld (%s; it was ps %d)", s->cfg->index, g,
		group_step(s, g), why, old);
	wf_event("ps_primary", json_pack("{s:i, s:i, s:I, s:s}", "group", g, "was", old, "step",
					 (json_int_t)group_step(s, g), "why", why));
	/* the other members take this server's state (R > 2: they may hold one
	 * update more or less than it) */
	for (int k = 1; k < s->replicas; k++) {
		int p = member(s, g, k);
		if (p != s->cfg->index && p != old)
			install_backup(s, g, p, 0);
	}
}

void wf_pss_op_join(server *s, const uint8_t *rid, size_t rid_len, const wf_ps_msg *m)
{
	const wf_ps_hdr *h = &m->hdr;
	int g = (int)h->chunk, from = WF_PS_SENDER_INDEX(h->sender);
	if (WF_PS_SENDER_ROLE(h->sender) != WF_PS_ROLE_SERVER || from >= s->cfg->nservers ||
	    g < 0 || g >= s->cfg->nservers || !s->groups[g].member || member_rank(s, g, from) < 0 ||
	    from == s->cfg->index) {
		wf_pss_send_errorf(s, rid, rid_len, h, WF_EINVAL, WF_PS_REJECT_SENDER,
				   "join: ps %d and ps %d do not share group %u (ps.replicas %d)",
				   from, s->cfg->index, h->chunk, s->replicas);
		return;
	}
	group *gr = &s->groups[g];
	peer *pe = &s->peers[from];
	pe->join_inc = (uint32_t)h->step; /* the process now asking (join_default) */
	int ready = group_ready(s, g);
	if (gr->role == GRP_BACKUP && ready && (h->flags & WF_PS_FLAG_FAILOVER) &&
	    gr->primary == from)
		become_primary(s, g, "its primary restarted and asked this server to take over");
	/* a primary takes a backup whenever it asks, before the chief seeded the
	 * group too (a new job): what is not initialized yet follows as inits */
	if (gr->role == GRP_PRIMARY) {
		int n = install_backup(s, g, from, h->aux);
		if (n >= 0) {
			/* a join from a new process: the one before is gone from
			 * the other groups too (its heartbeat replies, which would
			 * have said so, are not awaited) */
			int restarted = pe->inc && pe->inc != (uint32_t)h->step;
			for (int q = 0; restarted && q < s->cfg->nservers; q++)
				if (q != g && s->groups[q].member &&
				    s->groups[q].role == GRP_PRIMARY)
					backup_lost(s, q, from, "restarted");
			/* its heartbeat replies may still bring the incarnation
			 * change this join follows: not a new restart */
			pe->inc = (uint32_t)h->step;
			wf_info("ps %d: ps %d joins group %d as a backup: sending its %d chunk(s) "
				"at step %ld",
				s->cfg->index, from, g, n, group_step(s, g));
			wf_pss_send_ok(s, rid, rid_len, h, group_step(s, g), (uint32_t)n);
		} else { /* no connection to it yet: it asks again */
			wf_pss_send_errorf(s, rid, rid_len, h, WF_ETRANSIENT, -1,
					   "ps %d cannot reach ps %d yet", s->cfg->index, from);
		}
		return;
	}
	char text[200];
	int to = gr->role == GRP_BACKUP && ready ? gr->primary : -1;
	snprintf(text, sizeof(text), "ps %d is %s group %d%s", s->cfg->index, role_name(gr->role),
		 g, to >= 0 ? "" : " and holds no state of it to give");
	wf_pss_send_redirect(s, rid, rid_len, h, to, text);
}

/* Group g is between updates: nothing summed or held, every update
 * acknowledged by every live backup. */
static int group_idle(const server *s, int g)
{
	for (int i = 0; i < s->nchunks; i++) {
		const schunk *c = &s->chunks[i];
		if (c->group != g)
			continue;
		if (c->ncontrib || !acked(s, c, c->rseq))
			return 0;
		for (int w = 0; w < s->nworkers; w++)
			if (c->held[w].used)
				return 0;
	}
	return 1;
}

/* Send (again) this server's handoff of g; tag: its number. */
static int send_handoff(server *s, int g)
{
	group *gr = &s->groups[g];
	wf_ps_hdr h;
	peer_hdr(s, &h, WF_PS_OP_HANDOFF, (uint32_t)g, group_step(s, g));
	h.tag = ++gr->handoff_seq;
	gr->handoff_sent = wf_now();
	return peer_send(s, g, &h, NULL, NULL, 0);
}

/* Primary of g, whose own server g is a live backup again: make it the
 * primary (placement spread the groups over the servers; after a failover
 * one server serves two). The handoff follows every update on the
 * replication connection, so g holds all of them when it takes over; this
 * server stays a synced backup and answers the workers with REDIRECT from
 * now on. Unanswered, it is sent again (g answers a repeat as done); if g
 * refuses, this server is the primary again. */
static void hand_off(server *s, int g)
{
	group *gr = &s->groups[g];
	gr->handoff_at = wf_now() + HANDOFF_AFTER; /* the next try, if this one fails */
	if (send_handoff(s, g) != 0) {
		gr->handoff_sent = 0;
		return;
	}
	gr->role = GRP_BACKUP;
	gr->primary = g;
	for (int i = 0; i < s->nchunks; i++)
		if (s->chunks[i].group == g)
			s->chunks[i].synced = 1;
	wf_info("ps %d: group %d: hands it back to ps %d at step %ld", s->cfg->index, g, g,
		group_step(s, g));
}

void wf_pss_op_handoff(server *s, const uint8_t *rid, size_t rid_len, const wf_ps_msg *m)
{
	const wf_ps_hdr *h = &m->hdr;
	int g = (int)h->chunk, from = WF_PS_SENDER_INDEX(h->sender);
	if (WF_PS_SENDER_ROLE(h->sender) != WF_PS_ROLE_SERVER || from >= s->cfg->nservers ||
	    g != s->cfg->index || !s->groups[g].member || member_rank(s, g, from) < 0 ||
	    from == s->cfg->index) {
		wf_pss_send_errorf(s, rid, rid_len, h, WF_EINVAL, WF_PS_REJECT_SENDER,
				   "handoff: ps %d cannot hand group %u to ps %d (ps.replicas %d)",
				   from, h->chunk, s->cfg->index, s->replicas);
		return;
	}
	group *gr = &s->groups[g];
	if (gr->role == GRP_PRIMARY) { /* a repeat of one it took */
		wf_pss_send_ok(s, rid, rid_len, h, group_step(s, g), 0);
		return;
	}
	int synced = gr->role == GRP_BACKUP && gr->primary == from && group_ready(s, g);
	for (int i = 0; i < s->nchunks && synced; i++)
		synced = s->chunks[i].group != g || s->chunks[i].synced;
	if (!synced) {
		wf_pss_send_errorf(
			s, rid, rid_len, h, WF_ETRANSIENT, -1,
			"ps %d cannot take group %d from ps %d: it is %s it, primary ps %d",
			s->cfg->index, g, from, role_name(gr->role), gr->primary);
		return;
	}
	char why[64];
	snprintf(why, sizeof(why), "ps %d handed it back", from);
	become_primary(s, g, why);
	/* the sender stays a backup that holds every update so far */
	gr->live[from] = 1;
	for (int i = 0; i < s->nchunks; i++)
		if (s->chunks[i].group == g)
			s->chunks[i].racked[from] = s->chunks[i].rseq;
	wf_pss_send_ok(s, rid, rid_len, h, group_step(s, g), 0);
}

/* The answer to this server's handoff of g = p: taken (or taken before),
 * or refused, and then, unless something else made this server or another
 * one the primary meanwhile, this server still is. */
static void handoff_reply(server *s, int p, const wf_ps_msg *m)
{
	int g = (int)m->hdr.chunk;
	if (g != p || !s->groups[g].member)
		return;
	group *gr = &s->groups[g];
	if (!(m->hdr.flags & WF_PS_FLAG_ERROR)) {
		gr->handoff_sent = 0;
		return;
	}
	if (m->hdr.tag != gr->handoff_seq) /* refused an earlier try; a later one is out */
		return;
	gr->handoff_sent = 0;
	if (gr->role != GRP_BACKUP || gr->primary != g)
		return;
	char text[256];
	size_t n = m->nframes ? WF_MIN(m->size[0], sizeof(text) - 1) : 0;
	memcpy(text, m->frame[0], n);
	text[n] = '\0';
	wf_warn("ps %d: %s: still the primary of group %d", s->cfg->index, text, g);
	gr->role = GRP_PRIMARY;
	gr->primary = s->cfg->index;
}

static void ask_join(server *s, int g, int p, int failover)
{
	wf_ps_hdr h;
	/* step: this process's incarnation, which the primary's heartbeats
	 * then expect (a restart it learns of before the join is not one) */
	peer_hdr(s, &h, WF_PS_OP_JOIN, (uint32_t)g, (long)s->incarnation);
	h.aux = s->groups[g].join_id;
	if (failover)
		h.flags |= WF_PS_FLAG_FAILOVER;
	/* no connection to p yet (it is starting too): asked again soon, not
	 * after JOIN_RETRY */
	if (peer_send(s, p, &h, NULL, NULL, 0) != 0)
		s->groups[g].last_ask = wf_now() - JOIN_RETRY + JOIN_SOON;
}

/* Nobody who answered holds the group (a new job, or every other member is
 * gone): the placement's primary serves it, the others back it up. */
static void join_default(server *s, int g)
{
	group *gr = &s->groups[g];
	gr->primary = g;
	if (g == s->cfg->index) {
		gr->role = GRP_PRIMARY;
		for (int k = 1; k < s->replicas; k++) {
			int q = member(s, g, k);
			gr->live[q] = 1; /* until one fails */
			/* the process that answered counts, whichever incarnation
			 * the heartbeats knew before: it is the one that asked to
			 * join (it holds no state: it is joining too), or, if its
			 * join has not come yet, the next heartbeat reply names it */
			s->peers[q].inc = s->peers[q].join_inc;
		}
	} else {
		gr->role = GRP_BACKUP;
	}
	wf_info("ps %d: group %d: no other member holds it: this server is %s it", s->cfg->index, g,
		role_name(gr->role));
	wf_event("ps_group_new", json_pack("{s:i, s:s}", "group", g, "role",
					   gr->role == GRP_PRIMARY ? "primary" : "backup"));
}

/* Every other member of g answered that it holds no state of g: the
 * placement decides. A member that has not answered is waited for, however
 * long (deciding without it could make two primaries). */
static void join_if_alone(server *s, int g)
{
	group *gr = &s->groups[g];
	for (int k = 0; k < s->replicas; k++) {
		int q = member(s, g, k);
		if (q != s->cfg->index && !gr->asked[q])
			return;
	}
	join_default(s, g);
}

static void join_reply(server *s, int p, const wf_ps_msg *m)
{
	const wf_ps_hdr *h = &m->hdr;
	int g = (int)h->chunk;
	if (g < 0 || g >= s->cfg->nservers || !s->groups[g].member)
		return;
	group *gr = &s->groups[g];
	if (gr->role != GRP_JOINING)
		return;
	if (!(h->flags & WF_PS_FLAG_ERROR)) {
		gr->role = GRP_WAITING;
		gr->primary = p;
		gr->installs = (int)h->aux;
		wf_info("ps %d: joining group %d: ps %d is its primary (step %lld)", s->cfg->index,
			g, p, (long long)h->step);
		if (gr->got >= gr->installs)
			joined(s, g);
		return;
	}
	if (!(h->flags & WF_PS_FLAG_REDIRECT)) {
		/* asked again later; soon when the primary's connection to
		 * this (restarted) server is still being made */
		if (-(int)h->aux == WF_ETRANSIENT)
			gr->last_ask = wf_now() - JOIN_RETRY + JOIN_SOON;
		return;
	}
	int to = (int)h->step;
	if (to == s->cfg->index) /* p holds the group and waits for this server: take over */
		ask_join(s, g, p, 1);
	else if (to >= 0 && to < s->cfg->nservers && member_rank(s, g, to) >= 0)
		ask_join(s, g, to, 0);
	else
		gr->asked[p] = 1;
	join_if_alone(s, g);
}

/* This server is the primary of g no more: p is. Its copy may hold an
 * update p never got (never acknowledged: p did not hold it), so it takes
 * p's state again; the workers it held are sent to p. */
static void yield(server *s, int g, int p, const char *why)
{
	group *gr = &s->groups[g];
	wf_warn("ps %d: %s: no longer the primary of group %d; joining it again", s->cfg->index,
		why, g);
	for (int i = 0; i < s->nchunks; i++)
		if (s->chunks[i].group == g)
			wf_pss_fail_held_redirect(s, &s->chunks[i], p);
	rejoin(s, g);
	gr->primary = p;
	memset(gr->live, 0, (size_t)s->cfg->nservers);
}

/* p and this server are both the primary of g (a worker failed over to one
 * while the other still answered), and p does not count this server as its
 * backup, in two heartbeat replies in a row (the first may predate p's own
 * yielding). A sync step split between two primaries never completes, so
 * one yields: this server when it counts p (p refuses every update this
 * server sends it, so none was acknowledged since p took over), else the
 * one further down the group's member order (neither counted the other:
 * either may have acknowledged updates alone, as in a partition). */
static void two_primaries(server *s, int g, int p)
{
	if (!s->groups[g].live[p] && member_rank(s, g, s->cfg->index) < member_rank(s, g, p))
		return; /* p yields */
	char why[96];
	snprintf(why, sizeof(why), "ps %d is the primary of group %d too", p, g);
	yield(s, g, p, why);
}

int wf_pss_repl_route(server *s, const uint8_t *rid, size_t rid_len, const wf_ps_hdr *h, int g)
{
	group *gr = &s->groups[g];
	if (gr->role == GRP_PRIMARY)
		return 0;
	if ((h->flags & WF_PS_FLAG_FAILOVER) && gr->role == GRP_BACKUP && group_ready(s, g)) {
		char why[96];
		snprintf(why, sizeof(why), "%s %d failed over to it",
			 WF_PS_SENDER_ROLE(h->sender) == WF_PS_ROLE_WORKER ? "worker" : "a client",
			 WF_PS_SENDER_INDEX(h->sender));
		become_primary(s, g, why);
		return 0;
	}
	char text[200];
	int to = gr->role == GRP_BACKUP ? gr->primary : -1;
	snprintf(text, sizeof(text), "ps %d is %s group %d%s", s->cfg->index, role_name(gr->role),
		 g, to >= 0 ? "" : ": try again");
	wf_pss_send_redirect(s, rid, rid_len, h, to, text);
	return -1;
}

/* ---- the replication connections ---------------------------------------- */

static void peer_reply(server *s, int p, const wf_ps_msg *m)
{
	const wf_ps_hdr *h = &m->hdr;
	peer *pe = &s->peers[p];
	pe->last_seen = wf_now();
	if (h->op == WF_PS_OP_HEARTBEAT && !(h->flags & WF_PS_FLAG_ERROR)) {
		if (pe->inc && h->aux != pe->inc) {
			for (int g = 0; g < s->cfg->nservers; g++)
				if (s->groups[g].member && s->groups[g].role == GRP_PRIMARY)
					backup_lost(s, g, p, "restarted");
			pe->claims = 0; /* the process that made them is gone */
		}
		pe->inc = h->aux;
		/* chunk: the groups p is the primary of that do not count this
		 * server as a live backup (wf_pss_repl_unbacked) */
		uint32_t twice = h->chunk & pe->claims;
		pe->claims = h->chunk;
		for (int g = 0; g < s->cfg->nservers && g < 32; g++) {
			group *gr = &s->groups[g];
			if (!(h->chunk >> g & 1) || !gr->member)
				continue;
			if (gr->role == GRP_BACKUP) {
				wf_warn("ps %d: ps %d, the primary of group %d, no longer counts "
					"this server as its backup: joining the group again",
					s->cfg->index, p, g);
				rejoin(s, g);
			} else if (gr->role == GRP_PRIMARY && (twice >> g & 1)) {
				two_primaries(s, g, p);
			}
		}
		return;
	}
	if (h->op == WF_PS_OP_JOIN) {
		join_reply(s, p, m);
		return;
	}
	if (h->op == WF_PS_OP_HANDOFF) {
		handoff_reply(s, p, m);
		return;
	}
	if ((h->op != WF_PS_OP_REPLICATE && h->op != WF_PS_OP_INIT && h->op != WF_PS_OP_UNITS) ||
	    h->chunk == WF_PS_STATE_CHUNK || s->local[h->chunk] < 0)
		return;
	schunk *c = &s->chunks[s->local[h->chunk]];
	group *gr = &s->groups[c->group];
	if (h->flags & WF_PS_FLAG_ERROR) {
		char text[256];
		size_t n = m->nframes ? WF_MIN(m->size[0], sizeof(text) - 1) : 0;
		memcpy(text, m->frame[0], n);
		text[n] = '\0';
		if ((h->flags & WF_PS_FLAG_REDIRECT) && (int)h->step == p &&
		    gr->role == GRP_PRIMARY) {
			/* fenced: p is the primary now */
			yield(s, c->group, p, text);
			return;
		}
		backup_lost(s, c->group, p, text);
		return;
	}
	uint32_t d = h->tag - (uint32_t)c->racked[p];
	if ((int32_t)d > 0)
		c->racked[p] += d;
	wf_pss_answer_ready(s, c);
}

static void read_peer(server *s, int p)
{
	zmq_msg_t fr[MAX_RECV];
	int n, overflow;
	while ((n = wf_pss_recv(s, s->peers[p].sock, fr, &overflow)) > 0) {
		const void *ptr[MAX_RECV];
		size_t size[MAX_RECV];
		for (int i = 0; i < n; i++) {
			ptr[i] = zmq_msg_data(&fr[i]);
			size[i] = zmq_msg_size(&fr[i]);
		}
		wf_ps_msg m;
		wf_err e = {0};
		int reason;
		if (!overflow && wf_ps_msg_parse(&m, ptr, size, n, &s->peer_lim, &reason, &e) == 0)
			peer_reply(s, p, &m);
		else
			wf_warn("ps %d: bad reply from ps %d: %s", s->cfg->index, p,
				overflow ? "too many frames" : e.msg);
		for (int i = 0; i < n; i++)
			zmq_msg_close(&fr[i]);
	}
}

int wf_pss_repl_poll_items(server *s, zmq_pollitem_t *items)
{
	int n = 0;
	for (int p = 0; s->peers && p < s->cfg->nservers; p++) {
		if (s->peers[p].sock)
			items[n++] =
				(zmq_pollitem_t){.socket = s->peers[p].sock, .events = ZMQ_POLLIN};
		if (s->peers[p].mon)
			items[n++] =
				(zmq_pollitem_t){.socket = s->peers[p].mon, .events = ZMQ_POLLIN};
	}
	return n;
}

/* p is gone (why): it counts as a backup nowhere until it joins again, and
 * its next heartbeat reply names the incarnation that answers. */
static void peer_gone(server *s, int p, const char *why)
{
	peer *pe = &s->peers[p];
	pe->last_seen = 0; /* once per silence */
	pe->inc = 0;
	pe->claims = 0;
	for (int g = 0; g < s->cfg->nservers; g++)
		if (s->groups[g].member && s->groups[g].role == GRP_PRIMARY)
			backup_lost(s, g, p, why);
}

void wf_pss_repl_tick(server *s)
{
	if (s->replicas < 2)
		return;
	int n = s->cfg->nservers;
	double now = wf_now(), timeout = s->cfg->peer_timeout > 0 ? s->cfg->peer_timeout
								  : WF_PS_SERVER_TIMEOUT_DEFAULT;
	for (int p = 0; p < n; p++) {
		if (s->peers[p].sock)
			read_peer(s, p);
		/* a closed connection: the process ended (the kernel closed its
		 * sockets), a restart or not; its backups' acks will not come */
		uint16_t event;
		uint32_t value;
		peer *pe = &s->peers[p];
		while (pe->mon && wf_ps_monitor_next(pe->mon, &event, &value)) {
			if (event == ZMQ_EVENT_HANDSHAKE_SUCCEEDED)
				pe->up = 1;
			else if (event == ZMQ_EVENT_DISCONNECTED && pe->up) {
				pe->up =
					0; /* one that never completed its handshake lost nothing */
				peer_gone(s, p, "closed its connection");
			}
		}
	}
	if (now - s->last_peer_hb >= PEER_HEARTBEAT) {
		s->last_peer_hb = now;
		for (int p = 0; p < n; p++) {
			wf_ps_hdr h;
			peer_hdr(s, &h, WF_PS_OP_HEARTBEAT, 0, 0);
			if (s->peers[p].sock)
				peer_send(s, p, &h, NULL, NULL, 0);
		}
	}
	for (int p = 0; p < n; p++) {
		peer *pe = &s->peers[p];
		if (pe->sock && pe->last_seen && now - pe->last_seen > timeout)
			peer_gone(s, p, "stopped answering");
	}
	for (int g = 0; g < n; g++) {
		group *gr = &s->groups[g];
		if (gr->member && gr->role == GRP_PRIMARY && g != s->cfg->index && gr->live[g] &&
		    gr->handoff_at > 0 && now >= gr->handoff_at && group_idle(s, g))
			hand_off(s, g);
		if (gr->handoff_sent > 0 && now - gr->handoff_sent > timeout) {
			if (gr->role == GRP_BACKUP && gr->primary == g)
				send_handoff(s, g); /* unanswered: once more */
			else
				gr->handoff_sent = 0;
		}
		if (!gr->member || (gr->role != GRP_JOINING && gr->role != GRP_WAITING))
			continue;
		if (gr->role == GRP_WAITING && now - gr->since > 4 * timeout) {
			wf_warn("ps %d: group %d: ps %d's state did not arrive: asking again",
				s->cfg->index, g, gr->primary);
			rejoin(s, g);
		}
		if (gr->role != GRP_JOINING || now - gr->last_ask < JOIN_RETRY)
			continue;
		gr->last_ask = now;
		for (int k = 0; k < s->replicas; k++) {
			int p = member(s, g, k);
			if (p != s->cfg->index && !gr->asked[p])
				ask_join(s, g, p, 0);
		}
	}
}

/* ---- set-up ---------------------------------------------------------------- */

int wf_pss_repl_init(server *s, wf_err *err)
{
	const wf_ps_server_cfg *cfg = s->cfg;
	int n = cfg->nservers, me = cfg->index, rc = 0;
	s->groups = calloc((size_t)n, sizeof(*s->groups));
	s->peers = calloc((size_t)n, sizeof(*s->peers));
	if (!s->groups || !s->peers)
		return wf_errf(err, WF_ENOMEM, "ps: out of memory");
	for (int g = 0; g < n; g++) {
		group *gr = &s->groups[g];
		gr->member = member_rank(s, g, me) >= 0;
		gr->primary = g;
		gr->role = s->replicas > 1 ? GRP_JOINING : g == me ? GRP_PRIMARY : GRP_BACKUP;
		gr->since = wf_now();
		gr->join_id = (s->incarnation + 2654435761u * (uint32_t)g) | 1;
		gr->live = calloc((size_t)n, 1);
		gr->asked = calloc((size_t)n, 1);
		if (!gr->live || !gr->asked)
			return wf_errf(err, WF_ENOMEM, "ps: out of memory");
	}
	if (s->replicas < 2)
		return 0;
	for (int p = 0; p < n; p++) {
		int shared = 0;
		for (int g = 0; g < n && p != me; g++)
			shared |= s->groups[g].member && member_rank(s, g, p) >= 0;
		if (!shared)
			continue;
		int linger = 0, one = 1, ivl = 100;
		void *sock = zmq_socket(s->zctx, ZMQ_DEALER);
		s->peers[p].sock = sock;
		ZCHECK(sock ? 0 : -1, "zmq_socket(DEALER)");
		ZCHECK(zmq_setsockopt(sock, ZMQ_LINGER, &linger, sizeof(linger)), "ZMQ_LINGER");
		ZCHECK(zmq_setsockopt(sock, ZMQ_IMMEDIATE, &one, sizeof(one)), "ZMQ_IMMEDIATE");
		ZCHECK(zmq_setsockopt(sock, ZMQ_RECONNECT_IVL, &ivl, sizeof(ivl)),
		       "ZMQ_RECONNECT_IVL");
		if (cfg->keys && (rc = wf_ps_curve_client(sock, cfg->keys, err)) != 0)
			goto cleanup;
		s->peers[p].mon = wf_ps_monitor_open(
			s->zctx, sock, ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_DISCONNECTED);
		ZCHECK(s->peers[p].mon ? 0 : -1, "zmq_socket_monitor");
		ZCHECK(zmq_connect(sock, cfg->peers[p]), "connecting to a peer");
	}
	s->peer_lim = s->lim;
	s->peer_lim.is_reply = 1;
cleanup:
	return rc;
}

void wf_pss_repl_free(server *s)
{
	for (int p = 0; s->peers && p < s->cfg->nservers; p++) {
		if (s->peers[p].mon) {
			zmq_socket_monitor(s->peers[p].sock, NULL, 0);
			zmq_close(s->peers[p].mon);
		}
		if (s->peers[p].sock)
			zmq_close(s->peers[p].sock);
	}
	for (int g = 0; s->groups && g < s->cfg->nservers; g++) {
		free(s->groups[g].live);
		free(s->groups[g].asked);
	}
	free(s->peers);
	free(s->groups);
	free(s->rframe);
	s->rframe = NULL;
	s->rframe_cap = 0;
	s->peers = NULL;
	s->groups = NULL;
}
