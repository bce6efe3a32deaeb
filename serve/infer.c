/* infer.c: the request core shared by the front ends (read, build, run,
 * outputs, statistics once), and Triton's statistics document. */
#include "serve/infer.h"

#include "common/util.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* rq read for v's model and its input built, its wait for a batch thread
 * in *timeout; a failure is the request's own (rs->bad_request) but for
 * a deadline already past. */
static int prepare(wf_serve_version *v, wf_serve_request *rq, wf_serve_response *rs,
		   double *timeout, wf_err *err)
{
	memset(rs, 0, sizeof(*rs));
	if (!rq->t0)
		rq->t0 = wf_now();
	int rc = rq->read ? rq->read(rq->read_arg, &v->io, rq, err) : 0;
	if (!rc)
		rc = wf_serve_request_input(&v->io, rq, err);
	if (rc) {
		rs->bad_request = 1;
		return rc;
	}
	*timeout = rq->timeout_s;
	if (rq->deadline > 0 && rq->deadline - wf_now() < *timeout)
		*timeout = rq->deadline - wf_now();
	if (*timeout <= 0)
		return wf_errf(err, WF_ETRANSIENT, "Deadline Exceeded");
	return result_alloc(&rs->res, rq->input.n, v->io.classes, err);
}

/* What every request does when its forward is done, however it was waited
 * for: the probabilities, the outputs asked for, and its place in v's
 * statistics. */
static int finish(wf_serve_version *v, wf_serve_request *rq, wf_serve_response *rs, int rc,
		  wf_err *err)
{
	if (rc == 0)
		wf_serve_softmax(rs->res.logits, rs->res.probs, rs->res.n, rs->res.k);
	wf_serve_stats_done(v, rc == 0, wf_now() - rq->t0);
	if (rc == 0 && rq->nout) {
		char *const *labels =
			v->meta.nclasses == v->io.classes ? v->meta.class_names : NULL;
		rc = wf_serve_tensors_make(rq->out, rq->nout, rs->res.logits, rs->res.probs,
					   rs->res.n, rs->res.k, v->io.unbatched, labels, rq->shm,
					   rs->t, err);
		rs->nout = rq->nout; /* freed also on failure */
	}
	return rc;
}

int wf_serve_infer(wf_serve_batcher *b, wf_serve_version *v, wf_serve_request *rq,
		   wf_serve_response *rs, wf_err *err)
{
	double timeout;
	int rc = prepare(v, rq, rs, &timeout, err);
	if (!rc)
		rc = wf_serve_batcher_infer(b, v, rq->input.x, rq->input.n, rs->res.logits, timeout,
					    err);
	return finish(v, rq, rs, rc, err);
}

/* A submitted request between its queueing and its completion. */
typedef struct submitted {
	wf_serve_version *v;
	wf_serve_request *rq;
	wf_serve_response *rs;
	wf_serve_batcher_done fn;
	void *arg;
} submitted;

static void submitted_done(void *arg, int rc, const char *msg)
{
	submitted s = *(submitted *)arg;
	free(arg);
	wf_err err = {0};
	snprintf(err.msg, sizeof(err.msg), "%s", rc ? msg : "");
	rc = finish(s.v, s.rq, s.rs, rc, &err);
	s.fn(s.arg, rc, err.msg);
}

int wf_serve_infer_async(wf_serve_batcher *b, wf_serve_version *v, wf_serve_request *rq,
			 wf_serve_response *rs, wf_serve_batcher_done fn, void *arg, wf_err *err)
{
	double timeout;
	int rc = prepare(v, rq, rs, &timeout, err);
	submitted *s = rc ? NULL : malloc(sizeof(*s));
	if (!rc && !s)
		rc = wf_errf(err, WF_ENOMEM, "out of memory");
	if (!rc) {
		*s = (submitted){.v = v, .rq = rq, .rs = rs, .fn = fn, .arg = arg};
		rc = wf_serve_batcher_submit(b, v, rq->input.x, rq->input.n, rs->res.logits,
					     timeout, submitted_done, s, err);
		if (!rc)
			return 0;
		free(s);
	}
	return finish(v, rq, rs, rc, err);
}

void wf_serve_response_free(wf_serve_response *rs)
{
	if (!rs)
		return;
	free(rs->res.logits);
	free(rs->res.probs);
	rs->res.logits = rs->res.probs = NULL;
	wf_serve_tensors_free(rs->t, rs->nout);
	rs->nout = 0;
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
