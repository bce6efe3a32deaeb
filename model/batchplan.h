/* batchplan.h: inference over any number of rows as the fastest sequence of
 * forwards. Executors are built at batch sizes 1, 2, 4, ... up to max_batch
 * (and max_batch itself: plans never change shape), each size is timed at
 * build (the fastest of at least two forwards after a warm-up one), and a
 * batch of n rows runs as the sequence of sizes that took the least time in
 * total (dynamic programming over the measured times; the last forward may
 * be padded with zero rows), or as one forward when the sequence is not at
 * least 15% faster (short timings flatter small batches). Several small
 * forwards can beat one big one: a small batch's activations stay in cache
 * (MobileNetV2 at 224x224 runs ~1.4x faster per image at batch 1 than at 32
 * on a 2-core AVX-512 Zen 4). Used by weft-serve's batch threads and
 * bench_zoo.
 *
 * Threads: one thread at a time per plan (it owns its executors). */
#ifndef WF_BATCHPLAN_H
#define WF_BATCHPLAN_H

#include "model/model.h"

#define WF_BATCHPLAN_MAX_SIZES 16

typedef struct wf_batchplan {
	int max_batch;
	int nsizes;
	int size[WF_BATCHPLAN_MAX_SIZES]; /* batch size of each executor, ascending */
	wf_exec *ex[WF_BATCHPLAN_MAX_SIZES];
	double secs[WF_BATCHPLAN_MAX_SIZES]; /* measured seconds per forward */
	unsigned char *first;		     /* [max_batch+1]: size index to run first */
	float *in;			     /* [2*max_batch, H, W, C] staging, zeroed */
	float *out;			     /* [2*max_batch, K] logits */
	size_t per, classes;		     /* floats per sample, per logits row */
	size_t bytes;			     /* executors (wf_exec_bytes) + buffers */
} wf_batchplan;

/* Build the executors of model m on backend be (which must outlive the plan),
 * warm each one (a forward, and more while it tunes itself: wf_exec_tuning),
 * time it (2 to 4 timed forwards, 0.25 s per size), choose the
 * sequences. max_batch >= 1. max_bytes > 0: WF_ENOMEM as soon as the plan
 * would take more (the smaller executors are built first; the message says
 * how much it needs). like: NULL, or a plan of the same graph at the same
 * max_batch on the same kind of backend, whose timings are taken instead
 * (a plan built beside traffic would time the traffic too). */
int wf_batchplan_create(wf_batchplan **out, wf_model *m, wf_backend *be, int max_batch,
			size_t max_bytes, const wf_batchplan *like, wf_err *err);
/* Forward rows [0, n) staged in p->in (1 <= n <= max_batch); logits of row i
 * land at p->out + i * classes. Rows past n in p->in may be overwritten. */
int wf_batchplan_run(wf_batchplan *p, int n, wf_err *err);
/* "1: 41.2 ms, 2: 80.3 ms, ...; runs as 8 + 8 for a batch of 16": the
 * measured seconds per forward of each size and the sequence chosen for a
 * full batch, for the log. */
void wf_batchplan_describe(const wf_batchplan *p, char *buf, size_t cap);
/* Let every n run as forwards of size index `idx` first (tests: cover the
 * sequences the measurement did not pick); idx < 0 restores the measured plan. */
void wf_batchplan_force(wf_batchplan *p, int idx);
void wf_batchplan_free(wf_batchplan *p);

#endif
