/* infer.c: the inference path shared by the front ends, and Triton's
 * statistics document. */
#include "serve/infer.h"

#include "common/util.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>

static int result_alloc(wf_serve_result *res, int n, int k, wf_err *err)
{
	size_t cnt = (size_t)n * k;
	res->n = n;
	res->k = k;
	res->logits = malloc(cnt * sizeof(float) + 1);
	res->probs = malloc(cnt * sizeof(float) + 1);
	if (!res->logits || !res->probs)
		return wf_errf(err, WF_ENOMEM, "out of memory for %d results", n);
	return 0;
}

/* What every request does when it is done, however it was waited for: the
 * probabilities, and its place in v's statistics. */
static void result_done(wf_serve_version *v, wf_serve_result *res, int rc, double t0)
{
	if (rc == 0)
		wf_serve_softmax(res->logits, res->probs, res->n, res->k);
	wf_serve_stats_done(v, rc == 0, wf_now() - t0);
}

int wf_serve_run(wf_serve_batcher *b, wf_serve_version *v, const wf_serve_input *in,
		 double timeout_s, wf_serve_result *res, wf_err *err)
{
	double t0 = wf_now();
	int rc = result_alloc(res, in->n, v->io.classes, err);
	if (!rc)
		rc = wf_serve_batcher_infer(b, v, in->x, in->n, res->logits, timeout_s, err);
	result_done(v, res, rc, t0);
	return rc;
}

/* A submitted request between its queueing and its completion. */
typedef struct submitted {
	wf_serve_version *v;
	wf_serve_result *res;
	double t0;
	wf_serve_batcher_done fn;
	void *arg;
} submitted;

static void submitted_done(void *arg, int rc, const char *msg)
{
	submitted s = *(submitted *)arg;
	free(arg);
	result_done(s.v, s.res, rc, s.t0);
	s.fn(s.arg, rc, msg);
}

int wf_serve_submit(wf_serve_batcher *b, wf_serve_version *v, const wf_serve_input *in,
		    double timeout_s, wf_serve_result *res, wf_serve_batcher_done fn, void *arg,
		    wf_err *err)
{
	double t0 = wf_now();
	submitted *s = malloc(sizeof(*s));
	int rc = s ? result_alloc(res, in->n, v->io.classes, err)
		   : wf_errf(err, WF_ENOMEM, "out of memory");
	if (!rc) {
		*s = (submitted){.v = v, .res = res, .t0 = t0, .fn = fn, .arg = arg};
		rc = wf_serve_batcher_submit(b, v, in->x, in->n, res->logits, timeout_s,
					     submitted_done, s, err);
		if (!rc)
			return 0;
	}
	free(s);
	result_done(v, res, rc, t0);
	return rc;
}

void wf_serve_result_free(wf_serve_result *res)
{
	if (!res)
		return;
	free(res->logits);
	free(res->probs);
	res->logits = res->probs = NULL;
}

static json_t *dur(unsigned long count, unsigned long ns)
{
	return json_pack("{sIsI}", "count", (json_int_t)count, "ns", (json_int_t)ns);
}

char *wf_serve_stats_json(wf_serve_version *const *vs, int n)
{
	json_t *list = json_array();
	for (int i = 0; i < n; i++) {
		wf_serve_stats *s = &vs[i]->stats;
		char ver[32];
		snprintf(ver, sizeof(ver), "%ld", vs[i]->version);
		unsigned long ok = atomic_load(&s->success);
		json_t *batches = json_array();
		for (int b = 1; b < s->nbatch; b++) {
			unsigned long c = atomic_load(&s->batch_count[b]);
			if (!c)
				continue;
			json_array_append_new(batches,
					      json_pack("{sIsoso so}", "batch_size", (json_int_t)b,
							"compute_input", dur(c, 0), "compute_infer",
							dur(c, atomic_load(&s->batch_ns[b])),
							"compute_output", dur(c, 0)));
		}
		json_t *inf = json_pack("{sosososososososo}", "success",
					dur(ok, atomic_load(&s->success_ns)), "fail",
					dur(atomic_load(&s->fail), atomic_load(&s->fail_ns)),
					"queue", dur(ok, atomic_load(&s->queue_ns)),
					"compute_input", dur(ok, atomic_load(&s->input_ns)),
					"compute_infer", dur(ok, atomic_load(&s->infer_ns)),
					"compute_output", dur(ok, atomic_load(&s->output_ns)),
					"cache_hit", dur(0, 0), "cache_miss", dur(0, 0));
		json_array_append_new(
			list, json_pack("{sssssIsIsIsoso}", "name", vs[i]->name, "version", ver,
					"last_inference", (json_int_t)atomic_load(&s->last_ms),
					"inference_count", (json_int_t)atomic_load(&s->inferences),
					"execution_count", (json_int_t)atomic_load(&s->executions),
					"inference_stats", inf, "batch_stats", batches));
	}
	json_t *doc = json_pack("{so}", "model_stats", list);
	char *s = json_dumps(doc, JSON_COMPACT);
	json_decref(doc);
	return s;
}
