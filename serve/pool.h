/* pool.h: the handler threads of both transports (HTTP's request handlers,
 * gRPC's call workers): a queue of jobs and the threads that take them one
 * at a time, started as jobs wait, up to a bound, and then kept. A job is
 * a wf_serve_job inside the transport's own request. Thread-safe. */
#ifndef WF_SERVE_POOL_H
#define WF_SERVE_POOL_H

#include "common/error.h"

#include <pthread.h>
#include <stddef.h>

typedef struct wf_serve_job {
	struct wf_serve_job *next; /* private */
} wf_serve_job;

typedef struct wf_serve_pool_opts {
	const char *name; /* of the threads */
	int threads;	  /* at most; 0: none (jobs wait for wf_serve_pool_take) */
	int start;	  /* started at once */
	size_t stack;	  /* bytes per thread; 0: the default */
	int max_queue;	  /* jobs that may wait at once; 0: no bound */
	int drain;	  /* at stop, the threads run what still waits (else it stays) */
	void (*run)(void *ctx, wf_serve_job *j);
	void *ctx;
} wf_serve_pool_opts;

typedef struct wf_serve_pool {
	wf_serve_pool_opts o;
	/* private */
	pthread_mutex_t mu;
	pthread_cond_t more;
	wf_serve_job *head, *tail;
	int queued, idle, nthreads, stop;
	pthread_t *threads; /* [o.threads] */
} wf_serve_pool;

/* Start o->start threads; an error names the one that did not start. */
int wf_serve_pool_init(wf_serve_pool *p, const wf_serve_pool_opts *o, wf_err *err);
/* Queue j, and a thread more when none is idle: 0; WF_ESTOPPED once
 * stopping, WF_ETRANSIENT while max_queue jobs wait. admitted(j), when not
 * NULL, runs under the pool's lock once j is admitted, before a thread can
 * take it. */
int wf_serve_pool_push(wf_serve_pool *p, wf_serve_job *j, void (*admitted)(wf_serve_job *j));
/* The job waiting longest, or NULL (a pool without threads, or stopped). */
wf_serve_job *wf_serve_pool_take(wf_serve_pool *p);
/* Stop: each thread finishes its job (with o.drain, those waiting too) and
 * is joined; what still waits is left to wf_serve_pool_take. */
void wf_serve_pool_stop(wf_serve_pool *p);
/* After init (also a failed one) and stop. */
void wf_serve_pool_free(wf_serve_pool *p);

#endif
