/* server_units.c: backup workers' data units (server_impl.h: units). The
 * server that holds the job's last chunk hands them out in its replies to
 * that chunk, so that a batch whose gradient was dropped as late is trained
 * again (by whichever worker asks next) and no sample of an epoch is lost. */
#include "ps/server_impl.h"

/* Set up on first use: only a sync server holding the last chunk hands out units. */
static units *units_of(server *s)
{
	units *u = &s->units;
	if (u->setup)
		return u->chunk >= 0 ? u : NULL;
	u->setup = 1;
	u->chunk = -1;
	int last = s->pl.nchunks - 1;
	if (s->cfg->mode != WF_PS_MODE_SYNC || !wf_pss_units_on(s) || last < 0 ||
	    s->local[last] < 0)
		return NULL;
	u->unit = malloc((size_t)s->nworkers * sizeof(*u->unit));
	u->done = malloc((size_t)s->nworkers * sizeof(*u->done));
	if (s->cfg->elastic_batch_global) {
		u->list = calloc((size_t)s->nworkers, sizeof(*u->list));
		u->nlist = calloc((size_t)s->nworkers, sizeof(*u->nlist));
		u->lcap = calloc((size_t)s->nworkers, sizeof(*u->lcap));
	}
	if (!u->unit || !u->done ||
	    (s->cfg->elastic_batch_global && (!u->list || !u->nlist || !u->lcap))) {
		wf_error("ps %d: out of memory for the backup workers' units: every worker "
			 "trains its own batches (dropped ones are lost)",
			 s->cfg->index);
		return NULL;
	}
	for (int w = 0; w < s->nworkers; w++)
		u->unit[w] = u->done[w] = -1;
	u->chunk = s->local[last];
	return u;
}

/* Count unit x as applied (k = 0) or re-queued (k = 1) in its epoch. */
static void count(units *u, long x, int k)
{
	long e = u->per_epoch > 0 ? x / u->per_epoch : 0;
	if (e >= u->nepochs) {
		long n = WF_MAX(e + 1, 2 * u->nepochs);
		long *a = realloc(u->applied, (size_t)n * sizeof(long));
		if (a)
			u->applied = a;
		long *r = realloc(u->requeued, (size_t)n * sizeof(long));
		if (r)
			u->requeued = r;
		if (!a || !r)
			return; /* statistics only */
		for (long i = u->nepochs; i < n; i++)
			u->applied[i] = u->requeued[i] = 0;
		u->nepochs = n;
	}
	if (k)
		u->requeued[e]++;
	else
		u->applied[e]++;
}

static void requeue(server *s, units *u, long x)
{
	if (u->qlen == u->qcap) {
		long n = u->qcap ? 2 * u->qcap : 64;
		long *q = malloc((size_t)n * sizeof(long));
		if (!q) {
			wf_error("ps %d: out of memory re-queuing unit %ld: its samples are lost",
				 s->cfg->index, x);
			return;
		}
		for (long i = 0; i < u->qlen; i++)
			q[i] = u->queue[(u->qhead + i) % u->qcap];
		free(u->queue);
		u->queue = q;
		u->qhead = 0;
		u->qcap = n;
	}
	u->queue[(u->qhead + u->qlen++) % u->qcap] = x;
	count(u, x, 1);
}

/* The next unit to hand out: the re-queued first, then a fresh one. */
static long take(units *u)
{
	long x;
	if (u->qlen) {
		x = u->queue[u->qhead];
		u->qhead = (u->qhead + 1) % u->qcap;
		u->qlen--;
	} else {
		x = u->next++;
	}
	if (x >= (long)UINT32_MAX - 1) { /* does not fit the reply: wrap (days of training) */
		u->next = 1;
		x = 0;
	}
	return x;
}

/* Unit i of worker w's current units (elastic_batch global: its list). */
static long unit_at(const units *u, int w, int i)
{
	return i ? (long)(int64_t)wf_ps_get_u64(u->list[w] + 8 * i) : u->unit[w];
}

static int units_held(const units *u, int w)
{
	return u->unit[w] < 0 ? 0 : u->list ? u->nlist[w] : 1;
}

/* Worker w trains n >= 1 units from now on, taken in order. Out of memory
 * for a longer list: fewer (the step trains fewer units). */
static void give(server *s, units *u, int w, int n)
{
	if (u->list && n > u->lcap[w]) {
		uint8_t *l = realloc(u->list[w], (size_t)n * 8);
		if (l) {
			u->list[w] = l;
			u->lcap[w] = n;
		} else {
			wf_warn("ps %d: out of memory for worker %d's %d data units: it trains "
				"%d",
				s->cfg->index, w, n, WF_MAX(u->lcap[w], 1));
			n = WF_MAX(u->lcap[w], 1);
		}
	}
	u->unit[w] = take(u);
	if (!u->list)
		return;
	u->nlist[w] = n;
	if (!u->lcap[w]) /* no list: the reply's aux alone hands out the one unit */
		return;
	wf_ps_put_u64(u->list[w], (uint64_t)(int64_t)u->unit[w]);
	for (int i = 1; i < n; i++)
		wf_ps_put_u64(u->list[w] + 8 * i, (uint64_t)(int64_t)take(u));
}

uint32_t wf_pss_units_assign(server *s, const schunk *c, int w, long per_epoch)
{
	units *u = units_of(s);
	if (!u || c != &s->chunks[u->chunk] || w < 0 || w >= s->nworkers)
		return 0;
	if (per_epoch > 0 && u->per_epoch == 0)
		u->per_epoch = per_epoch;
	/* asked again (a restart, a resync): its units go back */
	for (int i = 0, n = units_held(u, w); i < n; i++)
		requeue(s, u, unit_at(u, w, i));
	u->unit[w] = -1;
	give(s, u, w, 1);
	return u->unit[w] >= 0 ? (uint32_t)(u->unit[w] + 1) : 0;
}

const uint8_t *wf_pss_units_list(server *s, const schunk *c, int w, size_t *bytes)
{
	units *u = units_of(s);
	if (!u || !u->list || c != &s->chunks[u->chunk] || w < 0 || w >= s->nworkers ||
	    u->unit[w] < 0 || !u->lcap[w])
		return NULL;
	*bytes = 8 * (size_t)u->nlist[w];
	return u->list[w];
}

/* elastic_batch global: the workers whose replies c holds share the
 * nworkers units of the next step in worker order, contiguous counts (the
 * lower indices one more when they do not divide). */
static void deal(server *s, units *u, schunk *c)
{
	int present = 0, k = 0;
	for (int w = 0; w < s->nworkers; w++)
		present += c->held[w].used;
	for (int w = 0; w < s->nworkers && present; w++) {
		held *h = &c->held[w];
		if (!h->used)
			continue;
		int n = s->nworkers / present + (k++ < s->nworkers % present);
		for (int i = 0, m = units_held(u, w); i < m; i++)
			requeue(s, u, unit_at(u, w, i));
		u->unit[w] = -1;
		give(s, u, w, WF_MIN(n, WF_PS_UNITS_MAX_LIST));
		h->aux = u->unit[w] >= 0 ? (uint32_t)(u->unit[w] + 1) : 0;
		h->list = wf_pss_units_list(s, c, w, &h->list_bytes);
	}
	u->dealt = 1;
}

void wf_pss_units_step_done(server *s, schunk *c)
{
	units *u = units_of(s);
	if (!u || c != &s->chunks[u->chunk])
		return;
	for (int w = 0; w < s->nworkers; w++) {
		int n = units_held(u, w);
		if (!n)
			continue;
		if (c->pushed[w])
			u->done[w] = c->version - 1; /* the step just applied */
		for (int i = 0; i < n; i++) {
			if (c->pushed[w])
				count(u, unit_at(u, w, i), 0);
			else
				requeue(s, u, unit_at(u, w, i)); /* late or gone: trained again */
		}
		u->unit[w] = -1;
	}
	if (u->list) {
		deal(s, u, c);
		return;
	}
	for (int w = 0; w < s->nworkers; w++)
		if (c->held[w].used)
			c->held[w].aux = wf_pss_units_assign(s, c, w, 0);
}

int wf_pss_units_hold_pull(server *s, schunk *c, int w, long per_epoch, const held *r)
{
	units *u = units_of(s);
	if (!u || !u->list || u->dealt || c != &s->chunks[u->chunk] || w < 0 || w >= s->nworkers)
		return 0;
	if (per_epoch > 0 && u->per_epoch == 0)
		u->per_epoch = per_epoch;
	wf_pss_release(s, &c->held[w]); /* a restarted process asks again */
	c->held[w] = *r;		/* with r's count in held_count */
	wf_pss_units_pulls_ready(s);
	return 1;
}

void wf_pss_units_pulls_ready(server *s)
{
	units *u = units_of(s);
	if (!u || !u->list || u->dealt)
		return;
	schunk *c = &s->chunks[u->chunk];
	int pulls = 0, live = wf_pss_live(s);
	for (int w = 0; w < s->nworkers; w++)
		pulls += c->held[w].used && c->held[w].op == WF_PS_OP_PULL;
	if (!pulls || pulls < live || live < s->cfg->min_workers)
		return;
	for (int w = 0; w < s->nworkers; w++)
		if (c->held[w].used && s->workers[w].alive != 1)
			wf_pss_release(s, &c->held[w]); /* gone while it waited */
	deal(s, u, c);
	long need = wf_pss_replicate_units(s, c);
	if (need > 0) { /* answered once the backups hold the units (as a pull's) */
		for (int w = 0; w < s->nworkers; w++)
			if (c->held[w].used)
				c->held[w].need = need;
		wf_pss_answer_ready(s, c);
		return;
	}
	wf_pss_send_values(s, c, c->held, s->nworkers, 0);
	for (int w = 0; w < s->nworkers; w++)
		wf_pss_release(s, &c->held[w]);
}

uint32_t wf_pss_units_retry(server *s, const schunk *c, int w, long step)
{
	units *u = units_of(s);
	if (!u || c != &s->chunks[u->chunk] || w < 0 || w >= s->nworkers || step < 0 ||
	    u->done[w] != step || u->unit[w] < 0)
		return 0;
	return (uint32_t)(u->unit[w] + 1);
}

void wf_pss_units_late(server *s, const schunk *c, int w, long step)
{
	worker *wk = &s->workers[w];
	long by = c->version - step;
	if (wk->late_steps && wk->late_last == step)
		return;
	wk->late_last = step;
	wk->late_steps++;
	wk->late_sum += by;
	wk->late_max = WF_MAX(wk->late_max, by);
}

void wf_pss_units_free(server *s)
{
	units *u = &s->units;
	for (int w = 0; u->list && w < s->nworkers; w++)
		free(u->list[w]);
	free(u->list);
	free(u->nlist);
	free(u->lcap);
	free(u->unit);
	free(u->done);
	free(u->queue);
	free(u->applied);
	free(u->requeued);
	free(u->frame);
	*u = (units){0};
}

/* ---- replicas: the units go with their chunk -------------------------------- */

static uint8_t *put_longs(uint8_t *p, const long *v, long n)
{
	for (long i = 0; i < n; i++, p += 8)
		wf_ps_put_u64(p, (uint64_t)(int64_t)v[i]);
	return p;
}

const uint8_t *wf_pss_units_frame(server *s, const schunk *c, size_t *bytes)
{
	units *u = units_of(s);
	if (!u || c != &s->chunks[u->chunk])
		return NULL;
	size_t n = WF_PS_UNITS_HEADER + 2 * (size_t)s->nworkers + (size_t)u->qlen +
		   2 * (size_t)u->nepochs;
	if (u->list) { /* elastic_batch global: dealt, the lists' lengths, their other units */
		n += 1 + (size_t)s->nworkers;
		for (int w = 0; w < s->nworkers; w++)
			n += (size_t)WF_MAX(units_held(u, w) - 1, 0);
	}
	if (8 * n > u->frame_cap) {
		uint8_t *f = realloc(u->frame, 8 * n);
		if (!f) {
			wf_warn("ps %d: out of memory copying the data units to the backups: a "
				"failover may hand some out again",
				s->cfg->index);
			return NULL;
		}
		u->frame = f;
		u->frame_cap = 8 * n;
	}
	long head[WF_PS_UNITS_HEADER] = {u->per_epoch, u->next, s->nworkers, u->qlen, u->nepochs};
	uint8_t *p = put_longs(u->frame, head, WF_PS_UNITS_HEADER);
	p = put_longs(p, u->unit, s->nworkers);
	p = put_longs(p, u->done, s->nworkers);
	for (long i = 0; i < u->qlen; i++, p += 8)
		wf_ps_put_u64(p, (uint64_t)(int64_t)u->queue[(u->qhead + i) % u->qcap]);
	p = put_longs(p, u->applied, u->nepochs);
	p = put_longs(p, u->requeued, u->nepochs);
	if (u->list) {
		wf_ps_put_u64(p, (uint64_t)u->dealt);
		p += 8;
		for (int w = 0; w < s->nworkers; w++, p += 8)
			wf_ps_put_u64(p, (uint64_t)units_held(u, w));
		for (int w = 0; w < s->nworkers; w++)
			for (int i = 1; i < units_held(u, w); i++, p += 8)
				wf_ps_put_u64(p, (uint64_t)(int64_t)unit_at(u, w, i));
	}
	*bytes = 8 * n;
	return u->frame;
}

static long get_long(const uint8_t *p, size_t i)
{
	return (long)(int64_t)wf_ps_get_u64(p + 8 * i);
}

/* elastic_batch global: the primary's lists, from the frame's tail at
 * long index at (checked by the parser; none: one unit each). A list that
 * does not fit in memory here keeps its first unit only (the others are
 * re-queued). */
static void take_lists(server *s, units *u, const uint8_t *p, size_t at, int tail)
{
	size_t extra = at + 1 + (size_t)s->nworkers;
	if (tail)
		u->dealt = get_long(p, at) != 0;
	for (int w = 0; w < s->nworkers; w++) {
		int len = tail ? (int)get_long(p, at + 1 + (size_t)w) : 1;
		if (u->unit[w] < 0)
			len = 0;
		if (len > u->lcap[w]) {
			uint8_t *l = realloc(u->list[w], (size_t)len * 8);
			if (l) {
				u->list[w] = l;
				u->lcap[w] = len;
			}
		}
		u->nlist[w] = len ? 1 : 0;
		if (len && u->lcap[w])
			wf_ps_put_u64(u->list[w], (uint64_t)(int64_t)u->unit[w]);
		for (int i = 1; i < len; i++) {
			long x = get_long(p, extra++);
			if (i < u->lcap[w]) {
				wf_ps_put_u64(u->list[w] + 8 * i, (uint64_t)(int64_t)x);
				u->nlist[w] = i + 1;
			} else {
				requeue(s, u, x);
			}
		}
	}
}

void wf_pss_units_take(server *s, const schunk *c, const uint8_t *p, size_t bytes)
{
	units *u = units_of(s);
	if (!u || c != &s->chunks[u->chunk] || bytes < 8 * WF_PS_UNITS_HEADER)
		return;
	long qlen = get_long(p, 3), nep = get_long(p, 4);
	if (get_long(p, 2) != s->nworkers) /* the parser checked it against this job */
		return;
	long *q = malloc((size_t)WF_MAX(qlen, 1) * sizeof(long));
	long *a = malloc((size_t)WF_MAX(nep, 1) * sizeof(long));
	long *r = malloc((size_t)WF_MAX(nep, 1) * sizeof(long));
	if (!q || !a || !r) {
		free(q);
		free(a);
		free(r);
		wf_warn("ps %d: out of memory taking the primary's data units: a failover to "
			"this server may hand some out again",
			s->cfg->index);
		return;
	}
	size_t at = WF_PS_UNITS_HEADER;
	u->per_epoch = get_long(p, 0);
	u->next = get_long(p, 1);
	for (int w = 0; w < s->nworkers; w++)
		u->unit[w] = get_long(p, at++);
	for (int w = 0; w < s->nworkers; w++)
		u->done[w] = get_long(p, at++);
	for (long i = 0; i < qlen; i++)
		q[i] = get_long(p, at++);
	for (long i = 0; i < nep; i++)
		a[i] = get_long(p, at++);
	for (long i = 0; i < nep; i++)
		r[i] = get_long(p, at++);
	free(u->queue);
	free(u->applied);
	free(u->requeued);
	u->queue = q;
	u->qhead = 0;
	u->qlen = qlen;
	u->qcap = WF_MAX(qlen, 1);
	u->applied = a;
	u->requeued = r;
	u->nepochs = nep;
	if (u->list)
		take_lists(s, u, p, at, bytes / 8 > at);
}
