/* infer.h: the internal inference API of weft-serve, one path for every
 * front end (HTTP in http.c, gRPC in grpc*.c):
 *
 *   wf_serve_find why;
 *   wf_serve_version *v = wf_serve_repo_find(repo, name, version, label, &why, &err);
 *                     // version 0 and label NULL: the model's newest served version;
 *                     // NULL: why is 404 / 503 / 400 (gRPC: NOT_FOUND /
 *                     // UNAVAILABLE / INVALID_ARGUMENT), err.msg the reason
 *   wf_serve_input in; // from request.h's parsers, or filled directly:
 *                     // in.n samples, in.x malloc'd [n, v->io.h, v->io.w, v->io.c]
 *                     // floats after preprocessing (wf_serve_preprocess for pixels)
 *   wf_serve_result res;
 *   rc = wf_serve_run(batcher, v, &in, timeout_s, &res, &err);
 *                     // res.logits/res.probs [n, K = v->io.classes]; also
 *                     // counts the request in v's statistics (success/fail)
 *   ... format the reply (request.h: TF Serving and KServe v2 JSON) ...
 *   wf_serve_result_free(&res); wf_serve_input_free(&in);
 *   wf_serve_version_release(v);
 *
 * Metadata: v->io (input H,W,C and classes), v->meta (class names,
 * preprocessing), wf_serve_repo_model_config (policy, labels, max batch,
 * batching delay, instances), wf_serve_repo_status / _index (version
 * states), wf_serve_repo_load / _unload (model control), v->stats (Triton
 * statistics; wf_serve_stats_json renders them as Triton's JSON). */
#ifndef WF_SERVE_INFER_H
#define WF_SERVE_INFER_H

#include "common/error.h"
#include "serve/batcher.h"
#include "serve/repo.h"
#include "serve/request.h"

#include <stdint.h>

typedef struct wf_serve_result {
	int n, k;
	float *logits; /* [n,k] */
	float *probs;  /* [n,k], softmax of logits */
} wf_serve_result;

/* Run in through v on the batch threads (waiting at most timeout_s for one:
 * WF_ETRANSIENT after) and fill res (free with wf_serve_result_free, also on
 * failure). Records the request in v's statistics. */
int wf_serve_run(wf_serve_batcher *b, wf_serve_version *v, const wf_serve_input *in,
		 double timeout_s, wf_serve_result *res, wf_err *err);
/* The same without waiting: 0 when the request is queued, and fn(arg, rc,
 * msg) is then called once, from a batch thread, with res filled (rc 0) or
 * the failure; in->x must stay valid until then. Any other return is the
 * failure (recorded), and fn is not called. */
int wf_serve_submit(wf_serve_batcher *b, wf_serve_version *v, const wf_serve_input *in,
		    double timeout_s, wf_serve_result *res, wf_serve_batcher_done fn, void *arg,
		    wf_err *err);
void wf_serve_result_free(wf_serve_result *res);

/* A version's statistics as Triton reports them (nanoseconds), read for
 * every front end by wf_serve_stats_add. */
typedef struct wf_serve_duration {
	uint64_t count, ns;
} wf_serve_duration;

typedef struct wf_serve_stats_sum {
	uint64_t last_inference_ms; /* Unix epoch milliseconds; 0: never */
	uint64_t inference_count;   /* samples inferred */
	uint64_t execution_count;   /* forwards */
	wf_serve_duration success, fail, queue, compute_input, compute_infer, compute_output;
} wf_serve_stats_sum;

/* Add v's statistics to *sum (of several versions: the counts and times
 * summed, the latest inference). */
void wf_serve_stats_add(const wf_serve_version *v, wf_serve_stats_sum *sum);

/* Triton's statistics document of the given versions:
 * {"model_stats": [{name, version, last_inference, inference_count,
 * execution_count, inference_stats{success, fail, queue, compute_input,
 * compute_infer, compute_output, cache_hit, cache_miss}, batch_stats[]}]}
 * as a malloc'd JSON string. */
char *wf_serve_stats_json(wf_serve_version *const *v, int n);

#endif
