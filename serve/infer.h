/* infer.h: the request core of weft-serve, one path for every front end
 * (HTTP in http*.c, gRPC in grpc*.c). A front end finds the version asked
 * for, translates its message into a wf_serve_request (request.h) and hands
 * it over; the core does the rest, the same for every protocol:
 *
 *   wf_serve_version *v = wf_serve_repo_find(repo, name, version, label, &why, &err);
 *                     // NULL: why is 404 / 503 / 400 (gRPC: NOT_FOUND /
 *                     // UNAVAILABLE / INVALID_ARGUMENT), err.msg the reason
 *   wf_serve_request rq = {.read = my_reader, .read_arg = msg, .t0 = t0,
 *                          .timeout_s = ..., .deadline = ...};
 *   wf_serve_response rs;
 *   rc = wf_serve_infer(batcher, v, &rq, &rs, &err);
 *                     // reads the message for v's model (rq.read), builds
 *                     // the input (request.h's one builder), runs it on the
 *                     // batch threads, makes the outputs asked for
 *                     // (outputs.h), and counts it once in v's statistics,
 *                     // failed or not
 *   ... the front end writes its envelope from rs (rs.res, rs.t) ...
 *   wf_serve_response_free(&rs); wf_serve_request_free(&rq);
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

/* What the core gives back for a request. */
typedef struct wf_serve_response {
	wf_serve_result res; /* logits and probabilities [n,K] */
	int nout;	     /* the request's outputs as tensors */
	wf_serve_tensor t[WF_SERVE_MAX_OUTPUTS];
	int bad_request; /* the failure is the request's: its message or input */
} wf_serve_response;

/* Run rq through v (held by the caller) and fill rs (free with
 * wf_serve_response_free, also on failure): rq's reader called for v's
 * model, its input built, run on the batch threads (waiting at most
 * rq->timeout_s, and never past rq->deadline: WF_ETRANSIENT after), its
 * outputs made. Whatever happens, the request is counted once in v's
 * statistics, as a success or as a failure. */
int wf_serve_infer(wf_serve_batcher *b, wf_serve_version *v, wf_serve_request *rq,
		   wf_serve_response *rs, wf_err *err);
/* The same without waiting: 0 when the request is queued, and fn(arg, rc,
 * msg) is then called once, from a batch thread, with rs filled (rc 0) or
 * the failure; rq and rs must stay valid until then. Any other return is
 * the failure (counted), and fn is not called. */
int wf_serve_infer_async(wf_serve_batcher *b, wf_serve_version *v, wf_serve_request *rq,
			 wf_serve_response *rs, wf_serve_batcher_done fn, void *arg, wf_err *err);
void wf_serve_response_free(wf_serve_response *rs);

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
