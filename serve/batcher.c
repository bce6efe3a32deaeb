/* batcher.c: the request queue and the batch threads. Every request is a
 * job with a completion (fn, arg), called once when the job leaves the
 * queue through a batch or by its timeout. A submitted job is the
 * batcher's: it frees it after the completion. A blocking call submits a
 * job on its own stack whose completion wakes it, and waits; when its
 * timeout passes first it takes the job out of the queue itself, unless a
 * batch thread already holds it. */
#include "serve/batcher.h"

#include "common/log.h"
#include "common/util.h"
#include "serve/shm.h" /* wf_serve_copy_guarded */

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { JOB_QUEUED, JOB_RUNNING, JOB_DONE, JOB_EXPIRED };

typedef struct job {
	wf_serve_version *v;
	const float *x; /* [n,H,W,C] */
	float *logits;	/* [n,K] */
	int n;
	int state;
	int rc;
	int lost;	    /* its input could not be read (a shared memory object shrank) */
	double t_in, t_run; /* wf_now() when queued / taken by a batch thread */
	char msg[256];
	wf_serve_batcher_done fn; /* the completion */
	void *arg;
	int owned;	 /* the batcher's (submitted): freed after the completion */
	double deadline; /* wf_now() by which the job must leave the queue */
	struct job *next;
} job;

typedef struct batch_thread {
	wf_serve_batcher *b;
	int index; /* slot index in every version */
	pthread_t tid;
	int started;
} batch_thread;

struct wf_serve_batcher {
	wf_serve_batcher_opts o;
	wf_serve_metrics *metrics;
	pthread_mutex_t mu;
	pthread_cond_t more; /* queue grew, or stop */
	job *head, *tail;
	int queued;  /* jobs in the queue */
	int holding; /* batch threads holding a batch (filling it or running it) */
	int stop;
	int flush; /* draining: run partial batches at once */
	batch_thread *threads;
};

static void queue_remove(wf_serve_batcher *b, job *prev, job *j)
{
	if (prev)
		prev->next = j->next;
	else
		b->head = j->next;
	if (b->tail == j)
		b->tail = prev;
	j->next = NULL;
	b->queued--;
	atomic_fetch_sub(&j->v->stats.pending, 1);
	wf_serve_metrics_queue(b->metrics, -1);
}

static void abs_deadline(struct timespec *ts, double seconds)
{
	clock_gettime(CLOCK_REALTIME, ts);
	double t = ts->tv_nsec * 1e-9 + seconds;
	long whole = (long)t;
	ts->tv_sec += whole;
	ts->tv_nsec = (long)((t - whole) * 1e9);
	if (ts->tv_nsec >= 1000000000L) {
		ts->tv_sec++;
		ts->tv_nsec -= 1000000000L;
	}
}

/* Move queued jobs of version v that fit into the batch (under mu). */
static int take_more(wf_serve_batcher *b, wf_serve_version *v, job **batch, int *count, int *total,
		     int cap)
{
	int took = 0;
	job *prev = NULL, *j = b->head;
	while (j && *total < cap) {
		job *next = j->next;
		if (j->v == v && *total + j->n <= cap && *count < cap) {
			queue_remove(b, prev, j);
			j->state = JOB_RUNNING;
			j->t_run = wf_now();
			batch[(*count)++] = j;
			*total += j->n;
			took = 1;
		} else {
			prev = j;
		}
		j = next;
	}
	return took;
}

/* The first queued job whose version is below its running cap (under mu). */
static job *next_runnable(wf_serve_batcher *b, job **prev)
{
	*prev = NULL;
	for (job *j = b->head; j; *prev = j, j = j->next)
		if (j->v->max_running <= 0 || j->v->running < j->v->max_running)
			return j;
	return NULL;
}

/* A job is done (its rc and msg set; out of the queue): call its
 * completion, after which a caller's job may be gone; free a submitted one. */
static void finish(wf_serve_batcher *b, job *j)
{
	int owned = j->owned;
	if (j->state == JOB_DONE)
		wf_serve_metrics_queue_time(b->metrics, j->t_run - j->t_in);
	j->fn(j->arg, j->rc, j->msg);
	if (owned)
		free(j);
}

/* Take jobs whose deadline passed out of the queue (under mu) and return
 * them as a list, to be finished outside it. */
static job *expire(wf_serve_batcher *b, double now)
{
	job *out = NULL, *prev = NULL;
	for (job *j = b->head, *next; j; j = next) {
		next = j->next;
		if (now > j->deadline) {
			queue_remove(b, prev, j);
			j->state = JOB_EXPIRED;
			j->rc = WF_ETRANSIENT;
			snprintf(j->msg, sizeof(j->msg),
				 "request timed out after %.1fs waiting for a batch thread",
				 now - j->t_in);
			j->next = out;
			out = j;
		} else {
			prev = j;
		}
	}
	return out;
}

/* Forward rows [0, total) staged in the plan's input; msg gets the failure. */
static int run_forward(wf_batchplan *p, int total, char *msg, size_t cap)
{
	wf_err e = {0};
	int rc = wf_batchplan_run(p, total, &e);
	if (rc)
		snprintf(msg, cap, "%.250s", e.msg);
	return rc;
}

#define LOST_INPUT "the request's input could not be read: its shared memory object was truncated"

/* Run one batch of jobs, all of one version, total samples <= max_batch;
 * a single job larger than max_batch runs in chunks. Inputs are copied with
 * wf_serve_copy_guarded (one may be a client's shared memory): a job whose
 * input cannot be read runs as zeros and fails alone. */
static void run_batch(wf_serve_batcher *b, int slot, job **batch, int count, int total)
{
	wf_serve_version *v = batch[0]->v;
	wf_serve_slot *s = &v->slots[slot];
	const wf_image_io *io = &v->io;
	size_t per = (size_t)io->h * io->w * io->c, k = (size_t)io->classes;
	int cap = v->max_batch, rc = 0;
	char msg[256] = "";
	double t0 = wf_now();
	if (count == 1 && batch[0]->n > cap) {
		job *j = batch[0];
		for (int off = 0; off < j->n && !rc; off += cap) {
			int m = WF_MIN(cap, j->n - off);
			double tc = wf_now();
			if (wf_serve_copy_guarded(s->plan->in, j->x + (size_t)off * per,
						  (size_t)m * per * sizeof(float))) {
				rc = WF_EINVAL; /* the client's doing */
				snprintf(msg, sizeof(msg), LOST_INPUT);
				break;
			}
			rc = run_forward(s->plan, m, msg, sizeof(msg));
			if (!rc)
				memcpy(j->logits + (size_t)off * k, s->plan->out,
				       (size_t)m * k * sizeof(float));
			wf_serve_metrics_batch(b->metrics, m);
			wf_serve_stats_batch(v, m, wf_now() - tc);
		}
	} else {
		int row = 0;
		for (int i = 0; i < count; i++) {
			float *dst = s->plan->in + (size_t)row * per;
			size_t bytes = (size_t)batch[i]->n * per * sizeof(float);
			if ((batch[i]->lost = wf_serve_copy_guarded(dst, batch[i]->x, bytes) != 0))
				memset(dst, 0, bytes);
			row += batch[i]->n;
		}
		rc = run_forward(s->plan, total, msg, sizeof(msg));
		row = 0;
		for (int i = 0; i < count && !rc; i++) {
			memcpy(batch[i]->logits, s->plan->out + (size_t)row * k,
			       (size_t)batch[i]->n * k * sizeof(float));
			row += batch[i]->n;
		}
		wf_serve_metrics_batch(b->metrics, total);
		wf_serve_stats_batch(v, total, wf_now() - t0);
	}
	for (int i = 0; i < count; i++) /* Triton's statistics: queue and compute per request */
		wf_serve_stats_request(v, batch[i]->n, batch[i]->t_run - batch[i]->t_in,
				       wf_now() - t0);
	pthread_mutex_lock(&b->mu);
	/* before any job is done: its caller may then release v */
	if (v->max_running > 0 && v->running >= v->max_running)
		pthread_cond_broadcast(&b->more); /* v's queued jobs may run now */
	v->running--;
	for (int i = 0; i < count; i++) {
		job *j = batch[i];
		j->rc = rc ? rc : j->lost ? WF_EINVAL : 0;
		snprintf(j->msg, sizeof(j->msg), "%s", !rc && j->lost ? LOST_INPUT : msg);
		j->state = JOB_DONE;
	}
	pthread_mutex_unlock(&b->mu);
	for (int i = 0; i < count; i++)
		finish(b, batch[i]);
}

static void *batch_main(void *arg)
{
	batch_thread *t = arg;
	wf_serve_batcher *b = t->b;
	pthread_setname_np(pthread_self(), "serve-batch"); /* top -H, ps -L */
	int cap_jobs = b->o.max_batch > 0 ? b->o.max_batch : 1;
	job **batch = calloc((size_t)cap_jobs, sizeof(*batch));
	if (!batch) {
		wf_error("serve: batch thread %d: out of memory", t->index);
		return NULL;
	}
	pthread_mutex_lock(&b->mu);
	for (;;) {
		job *first, *prev, *late;
		if ((late = expire(b, wf_now()))) {
			pthread_mutex_unlock(&b->mu);
			for (job *n; late; late = n) {
				n = late->next;
				finish(b, late);
			}
			pthread_mutex_lock(&b->mu);
		}
		/* the oldest job whose version may run one more batch (its model's
		 * instance count, config.pbtxt instance_group, caps the batch threads
		 * it holds at once, so one model cannot take them all) */
		if (!(first = next_runnable(b, &prev))) {
			if (b->stop && !b->head)
				break;
			if (b->head) { /* none may run yet: wake to expire them meanwhile */
				struct timespec ts;
				abs_deadline(&ts, 1.0);
				pthread_cond_timedwait(&b->more, &b->mu, &ts);
			} else {
				pthread_cond_wait(&b->more, &b->mu);
			}
			continue;
		}
		queue_remove(b, prev, first);
		b->holding++;
		first->v->running++;
		first->state = JOB_RUNNING;
		first->t_run = wf_now();
		batch[0] = first;
		int count = 1, total = first->n;
		int cap = first->v->max_batch;
		/* a model's own dynamic_batching delay, else the server's */
		long delay = first->v->batch_delay_us;
		int batching = b->o.batching || delay >= 0;
		if (delay < 0)
			delay = b->o.timeout_us;
		if (batching && total < cap) {
			take_more(b, first->v, batch, &count, &total, cap);
			if (total < cap && delay > 0) {
				struct timespec ts;
				abs_deadline(&ts, (double)delay * 1e-6);
				while (total < cap && !b->stop && !b->flush) {
					if (pthread_cond_timedwait(&b->more, &b->mu, &ts) != 0) {
						take_more(b, first->v, batch, &count, &total, cap);
						break;
					}
					take_more(b, first->v, batch, &count, &total, cap);
				}
			}
		}
		pthread_mutex_unlock(&b->mu);
		run_batch(b, t->index, batch, count, total);
		pthread_mutex_lock(&b->mu);
		b->holding--;
	}
	pthread_mutex_unlock(&b->mu);
	free(batch);
	return NULL;
}

int wf_serve_batcher_create(wf_serve_batcher **out, const wf_serve_batcher_opts *o,
			    wf_serve_metrics *metrics, wf_err *err)
{
	wf_serve_batcher *b = calloc(1, sizeof(*b));
	if (!b)
		return wf_errf(err, WF_ENOMEM, "out of memory");
	b->o = *o;
	if (b->o.threads < 1)
		b->o.threads = 1;
	b->metrics = metrics;
	pthread_mutex_init(&b->mu, NULL);
	pthread_cond_init(&b->more, NULL);
	b->threads = calloc((size_t)b->o.threads, sizeof(*b->threads));
	if (!b->threads) {
		wf_serve_batcher_free(b);
		return wf_errf(err, WF_ENOMEM, "out of memory");
	}
	for (int i = 0; i < b->o.threads; i++) {
		b->threads[i].b = b;
		b->threads[i].index = i;
		if (pthread_create(&b->threads[i].tid, NULL, batch_main, &b->threads[i]) != 0) {
			wf_serve_batcher_free(b);
			return wf_errf(err, WF_EINTERNAL, "cannot start batch thread %d", i);
		}
		b->threads[i].started = 1;
	}
	*out = b;
	return 0;
}

void wf_serve_batcher_flush(wf_serve_batcher *b)
{
	if (!b)
		return;
	pthread_mutex_lock(&b->mu);
	b->flush = 1;
	pthread_cond_broadcast(&b->more);
	pthread_mutex_unlock(&b->mu);
}

void wf_serve_batcher_counts(wf_serve_batcher *b, int *queued, int *holding)
{
	pthread_mutex_lock(&b->mu);
	*queued = b->queued;
	*holding = b->holding;
	pthread_mutex_unlock(&b->mu);
}

void wf_serve_batcher_free(wf_serve_batcher *b)
{
	if (!b)
		return;
	pthread_mutex_lock(&b->mu);
	b->stop = 1;
	pthread_cond_broadcast(&b->more);
	pthread_mutex_unlock(&b->mu);
	for (int i = 0; b->threads && i < b->o.threads; i++)
		if (b->threads[i].started)
			pthread_join(b->threads[i].tid, NULL);
	free(b->threads);
	pthread_cond_destroy(&b->more);
	pthread_mutex_destroy(&b->mu);
	free(b);
}

/* Queue j (under mu), or say why not. */
static int enqueue(wf_serve_batcher *b, job *j, wf_err *err)
{
	if (b->stop)
		return wf_errf(err, WF_ESTOPPED, "the server is shutting down");
	if (b->o.max_queue > 0 && b->queued >= b->o.max_queue)
		return wf_errf(err, WF_SERVE_EFULL,
			       "the queue is full (%d requests waiting, --max_queue_size); retry "
			       "later",
			       b->o.max_queue);
	b->queued++;
	if (b->tail)
		b->tail->next = j;
	else
		b->head = j;
	b->tail = j;
	atomic_fetch_add(&j->v->stats.pending, 1);
	wf_serve_metrics_queue(b->metrics, 1);
	pthread_cond_signal(&b->more);
	return 0;
}

/* What both entries check first: a slot of v for each batch thread, and n
 * within the model's max_batch_size (Triton's words). */
static int check_request(const wf_serve_batcher *b, const wf_serve_version *v, int n, wf_err *err)
{
	if (v->nslots < b->o.threads)
		return wf_errf(err, WF_EINTERNAL, "model version %ld has %d slots for %d threads",
			       v->version, v->nslots, b->o.threads);
	if (v->max_request > 0 && n > v->max_request)
		return wf_errf(err, WF_EINVAL,
			       "inference request batch-size must be <= %d for '%s' (its "
			       "max_batch_size), got %d",
			       v->max_request, v->name, n);
	return 0;
}

/* The one entry: check j (its v, x, logits, n, fn, arg and owned set) and
 * queue it with timeout_s to leave the queue. On an error j's completion is
 * not called. */
static int submit(wf_serve_batcher *b, job *j, double timeout_s, wf_err *err)
{
	int rc = check_request(b, j->v, j->n, err);
	if (rc)
		return rc;
	j->state = JOB_QUEUED;
	j->t_in = wf_now();
	j->deadline = j->t_in + timeout_s;
	pthread_mutex_lock(&b->mu);
	rc = enqueue(b, j, err);
	pthread_mutex_unlock(&b->mu);
	return rc;
}

int wf_serve_batcher_submit(wf_serve_batcher *b, wf_serve_version *v, const float *x, int n,
			    float *logits, double timeout_s, wf_serve_batcher_done fn, void *arg,
			    wf_err *err)
{
	job *j = malloc(sizeof(*j));
	if (!j)
		return wf_errf(err, WF_ENOMEM, "out of memory");
	*j = (job){.v = v, .x = x, .logits = logits, .n = n, .fn = fn, .arg = arg, .owned = 1};
	int rc = submit(b, j, timeout_s, err);
	if (rc)
		free(j);
	return rc;
}

/* A blocking caller's completion. */
typedef struct waiter {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int done, rc;
	char msg[256];
} waiter;

static void wake(void *arg, int rc, const char *msg)
{
	waiter *w = arg;
	pthread_mutex_lock(&w->mu);
	w->rc = rc;
	snprintf(w->msg, sizeof(w->msg), "%s", msg);
	w->done = 1;
	pthread_cond_signal(&w->cv);
	pthread_mutex_unlock(&w->mu);
}

/* 1 when j was still queued and is now out of the queue, its completion
 * never to be called; 0 when a batch thread holds it (it will complete). */
static int withdraw(wf_serve_batcher *b, job *j)
{
	pthread_mutex_lock(&b->mu);
	int queued = j->state == JOB_QUEUED;
	if (queued) {
		job *prev = NULL;
		for (job *q = b->head; q && q != j; q = q->next)
			prev = q;
		queue_remove(b, prev, j);
		j->state = JOB_EXPIRED;
	}
	pthread_mutex_unlock(&b->mu);
	return queued;
}

int wf_serve_batcher_infer(wf_serve_batcher *b, wf_serve_version *v, const float *x, int n,
			   float *logits, double timeout_s, wf_err *err)
{
	waiter w = {.done = 0};
	job j = {.v = v, .x = x, .logits = logits, .n = n, .fn = wake, .arg = &w};
	pthread_mutex_init(&w.mu, NULL);
	pthread_cond_init(&w.cv, NULL);
	int rc = submit(b, &j, timeout_s, err);
	if (!rc) {
		struct timespec ts;
		abs_deadline(&ts, timeout_s);
		pthread_mutex_lock(&w.mu);
		while (!w.done && pthread_cond_timedwait(&w.cv, &w.mu, &ts) == 0)
			;
		int done = w.done;
		pthread_mutex_unlock(&w.mu);
		if (!done && withdraw(b, &j)) {
			rc = wf_errf(err, WF_ETRANSIENT,
				     "request timed out after %.1fs waiting for a batch thread",
				     timeout_s);
		} else {
			pthread_mutex_lock(&w.mu);
			while (!w.done)
				pthread_cond_wait(&w.cv, &w.mu);
			pthread_mutex_unlock(&w.mu);
			rc = w.rc ? wf_errf(err, w.rc, "%s", w.msg) : 0;
		}
	}
	pthread_cond_destroy(&w.cv);
	pthread_mutex_destroy(&w.mu);
	return rc;
}
