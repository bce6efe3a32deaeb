/* batcher.h: dynamic batching. Requests queue; each batch thread takes up to
 * max_batch samples of one model version (waiting at most timeout_us for
 * more), runs one executor forward on its own slot of that version, and hands
 * each request its rows. Without batching each request runs alone, still on
 * the batch threads' executors. Submitting and waiting are thread-safe. */
#ifndef WF_SERVE_BATCHER_H
#define WF_SERVE_BATCHER_H

#include "common/error.h"
#include "serve/metrics.h"
#include "serve/repo.h"

/* The CPU threads of each forward are the backend's (wf_backend.threads,
 * from the repository options): the cpu backend applies them in whichever
 * thread runs an op. */
typedef struct wf_serve_batcher_opts {
	int threads;	 /* batch threads; a version has one slot per thread */
	int max_batch;	 /* samples per forward */
	long timeout_us; /* how long a partial batch waits for more (microseconds) */
	int batching;	 /* 0: one request per forward */
	int max_queue;	 /* requests waiting at once; more get WF_SERVE_EFULL; 0: no bound */
} wf_serve_batcher_opts;

/* wf_serve_batcher_infer's answer when the queue is full (HTTP 429). */
#define WF_SERVE_EFULL (-100)

typedef struct wf_serve_batcher wf_serve_batcher;

int wf_serve_batcher_create(wf_serve_batcher **out, const wf_serve_batcher_opts *o,
			    wf_serve_metrics *metrics, wf_err *err);
/* From now on partial batches run at once instead of waiting for more
 * (draining: nothing new will come). */
void wf_serve_batcher_flush(wf_serve_batcher *b);
/* Requests waiting in the queue, and batch threads holding a batch (waiting
 * for it to fill or running it), at this moment. Thread-safe. */
void wf_serve_batcher_counts(wf_serve_batcher *b, int *queued, int *holding);
/* Stop the threads after the queue drains; then free. */
void wf_serve_batcher_free(wf_serve_batcher *b);

/* The one entry: queue forward x [n,H,W,C] on version v (the caller holds
 * a reference) into logits [n,K] and return 0; fn(arg, rc, msg) is then
 * called once, from a batch thread, when logits are written (rc 0) or the
 * request failed or spent timeout_s in the queue (WF_ETRANSIENT; noticed
 * when a batch thread next looks at the queue). x and logits must stay
 * valid until then. Once a batch thread took the request it runs to the
 * end. An error return (WF_SERVE_EFULL at once when max_queue requests are
 * already waiting, stopping, a batch over the model's max_batch_size)
 * means fn is not called. */
typedef void (*wf_serve_batcher_done)(void *arg, int rc, const char *msg);
int wf_serve_batcher_submit(wf_serve_batcher *b, wf_serve_version *v, const float *x, int n,
			    float *logits, double timeout_s, wf_serve_batcher_done fn, void *arg,
			    wf_err *err);
/* Submit and wait: returns when logits are written, or after timeout_s in
 * the queue (WF_ETRANSIENT, at that time). */
int wf_serve_batcher_infer(wf_serve_batcher *b, wf_serve_version *v, const float *x, int n,
			   float *logits, double timeout_s, wf_err *err);
#endif
