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

void wf_serve_stats_add(const wf_serve_version *v, wf_serve_stats_sum *sum)
{
	const wf_serve_stats *s = &v->stats;
	uint64_t ok = atomic_load(&s->success), last = atomic_load(&s->last_ms);
	sum->last_inference_ms = WF_MAX(sum->last_inference_ms, last);
	sum->inference_count += atomic_load(&s->inferences);
	sum->execution_count += atomic_load(&s->executions);
	const struct {
		wf_serve_duration *d;
		uint64_t count, ns;
	} add[] = {
		{&sum->success, ok, atomic_load(&s->success_ns)},
		{&sum->fail, atomic_load(&s->fail), atomic_load(&s->fail_ns)},
		{&sum->queue, ok, atomic_load(&s->queue_ns)},
		{&sum->compute_input, ok, atomic_load(&s->input_ns)},
		{&sum->compute_infer, ok, atomic_load(&s->infer_ns)},
		{&sum->compute_output, ok, atomic_load(&s->output_ns)},
	};
	for (size_t i = 0; i < WF_ARRAY_LEN(add); i++) {
		add[i].d->count += add[i].count;
		add[i].d->ns += add[i].ns;
	}
}

static json_t *dur(wf_serve_duration d)
{
	return json_pack("{sIsI}", "count", (json_int_t)d.count, "ns", (json_int_t)d.ns);
}

char *wf_serve_stats_json(wf_serve_version *const *vs, int n)
{
	json_t *list = json_array();
	for (int i = 0; i < n; i++) {
		wf_serve_stats *s = &vs[i]->stats;
		wf_serve_stats_sum st = {0};
		wf_serve_stats_add(vs[i], &st);
		char ver[32];
		snprintf(ver, sizeof(ver), "%ld", vs[i]->version);
		json_t *batches = json_array();
		for (int b = 1; b < s->nbatch; b++) {
			unsigned long c = atomic_load(&s->batch_count[b]);
			if (!c)
				continue;
			wf_serve_duration none = {c, 0}, infer = {c, atomic_load(&s->batch_ns[b])};
			json_array_append_new(batches,
					      json_pack("{sIsoso so}", "batch_size", (json_int_t)b,
							"compute_input", dur(none), "compute_infer",
							dur(infer), "compute_output", dur(none)));
		}
		wf_serve_duration zero = {0, 0};
		json_t *inf = json_pack(
			"{sosososososososo}", "success", dur(st.success), "fail", dur(st.fail),
			"queue", dur(st.queue), "compute_input", dur(st.compute_input),
			"compute_infer", dur(st.compute_infer), "compute_output",
			dur(st.compute_output), "cache_hit", dur(zero), "cache_miss", dur(zero));
		json_array_append_new(
			list, json_pack("{sssssIsIsIsoso}", "name", vs[i]->name, "version", ver,
					"last_inference", (json_int_t)st.last_inference_ms,
					"inference_count", (json_int_t)st.inference_count,
					"execution_count", (json_int_t)st.execution_count,
					"inference_stats", inf, "batch_stats", batches));
	}
	json_t *doc = json_pack("{so}", "model_stats", list);
	char *s = json_dumps(doc, JSON_COMPACT);
	json_decref(doc);
	return s;
}
