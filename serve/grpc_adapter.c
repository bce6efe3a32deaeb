/* grpc_adapter.c: the gRPC services' view of serve/, over the one-model
 * repository (serve/repo.h) and the shared batcher. Statistics are kept here
 * per served version until the repository keeps them itself.
 *
 * Over the multi-model repository (serve/infer.h of the serve-api branch)
 * each function becomes one call: model_get = wf_serve_repo_find (its why:
 * 404/503/400 = NOT_FOUND/UNAVAILABLE/INVALID_ARGUMENT) + the model config
 * (wf_serve_repo_model_config: max batch, delay, instances); model_put =
 * wf_serve_version_release; model_versions = wf_serve_repo_status; model_names
 * = wf_serve_repo_index; model_infer = wf_serve_run (it records the version's
 * statistics; keep wf_serve_metrics_request here); model_stats = the
 * versions' stats from wf_serve_repo_acquire_all; server_ready =
 * wf_serve_repo_ready and not draining; repository_load/unload =
 * wf_serve_repo_load/unload (WF_ENOTSUP: UNIMPLEMENTED); reload_config =
 * wf_serve_repo_reload_config (the TF ModelConfig message carries name,
 * base_path, platform, version policy and labels); wf_grpc_io =
 * wf_image_io, decode/preprocess = wf_image_decode/wf_image_preprocess_u8
 * (common/image.h). */
#include "serve/grpc_adapter.h"

#include "common/util.h"
#include "serve/grpc.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_STAT_VERSIONS 8

#ifndef WF_SERVE_EFULL
#define WF_SERVE_EFULL (-100) /* serve/batcher.h (serve-hardening): the queue is full */
#endif

typedef struct version_stats {
	long version;
	wf_grpc_stats s;
} version_stats;

struct wf_grpc_adapter {
	wf_grpc_adapter_opts o;
	char *name;
	atomic_int draining;
	_Atomic double drain_start; /* wf_now() when the drain began */
	pthread_mutex_t mu;
	version_stats stats[MAX_STAT_VERSIONS]; /* the most recent versions served */
};

void wf_grpc_preprocess_u8(const wf_grpc_io *io, const uint8_t *px, float *out)
{
	wf_serve_preprocess_u8(io, px, out);
}

int wf_grpc_decode_image(const wf_grpc_io *io, const uint8_t *bytes, size_t n, float *out,
			 char *why, size_t cap)
{
	wf_err err = {0};
	if (wf_serve_decode_image(io, bytes, n, out, &err) == 0)
		return WF_GRPC_OK;
	snprintf(why, cap, "%s", err.msg);
	return err.code == WF_ENOMEM ? WF_GRPC_RESOURCE_EXHAUSTED : WF_GRPC_INVALID_ARGUMENT;
}

int wf_grpc_adapter_create(wf_grpc_adapter **out, const wf_grpc_adapter_opts *o, wf_err *err)
{
	wf_grpc_adapter *a = calloc(1, sizeof(*a));
	if (!a || !(a->name = strdup(o->model_name ? o->model_name : "default"))) {
		free(a);
		return wf_errf(err, WF_ENOMEM, "out of memory");
	}
	a->o = *o;
	atomic_init(&a->draining, 0);
	pthread_mutex_init(&a->mu, NULL);
	*out = a;
	return 0;
}

void wf_grpc_adapter_free(wf_grpc_adapter *a)
{
	if (!a)
		return;
	pthread_mutex_destroy(&a->mu);
	free(a->name);
	free(a);
}

void wf_grpc_adapter_drain(wf_grpc_adapter *a)
{
	atomic_store(&a->drain_start, wf_now());
	atomic_store(&a->draining, 1);
}

int wf_grpc_server_ready(wf_grpc_adapter *a)
{
	wf_serve_repo_status st;
	wf_serve_repo_get_status(a->o.repo, &st);
	return !atomic_load(&a->draining) && st.version != 0;
}

int wf_grpc_model_get(wf_grpc_adapter *a, const char *name, long version, const char *label,
		      wf_grpc_model *m, char *why, size_t cap)
{
	memset(m, 0, sizeof(*m));
	if (!name || strcmp(name, a->name) != 0) {
		snprintf(why, cap, "Servable not found for request: Latest(%.200s)",
			 name ? name : "");
		return WF_GRPC_NOT_FOUND;
	}
	if (label && *label) {
		snprintf(why, cap,
			 "Unrecognized servable version label: %.100s (model %.100s has no version "
			 "labels)",
			 label, name);
		return WF_GRPC_NOT_FOUND;
	}
	if (version < 0) {
		snprintf(why, cap, "the model version must be a positive integer");
		return WF_GRPC_INVALID_ARGUMENT;
	}
	wf_serve_version *v = wf_serve_repo_acquire(a->o.repo, version);
	if (!v) {
		wf_serve_repo_status st;
		wf_serve_repo_get_status(a->o.repo, &st);
		if (!st.version) {
			snprintf(why, cap, "model %.200s is not ready: %.500s", name,
				 st.loading_version  ? "a version is loading"
				 : st.failed_version ? st.error
						     : "no version found under the base path yet");
			return WF_GRPC_UNAVAILABLE;
		}
		snprintf(why, cap, "Servable not found for request: Specific(%.200s, %ld)", name,
			 version);
		return WF_GRPC_NOT_FOUND;
	}
	m->name = a->name;
	m->version = v->version;
	m->io = v->io;
	m->max_batch = v->max_batch;
	m->labels = v->meta.nclasses == v->io.classes ? v->meta.class_names : NULL;
	m->batch_timeout_us = a->o.batch_timeout_us;
	m->batching = a->o.batching;
	m->instances = a->o.instances;
	m->priv = v;
	return WF_GRPC_OK;
}

void wf_grpc_model_put(wf_grpc_adapter *a, wf_grpc_model *m)
{
	if (m && m->priv)
		wf_serve_version_release(m->priv);
	if (m)
		m->priv = NULL;
}

int wf_grpc_model_ready(wf_grpc_adapter *a, const char *name, long version)
{
	if (!name || strcmp(name, a->name) != 0 || atomic_load(&a->draining))
		return 0;
	wf_serve_repo_status st;
	wf_serve_repo_get_status(a->o.repo, &st);
	return st.version != 0 && (version == 0 || version == st.version);
}

int wf_grpc_model_versions(wf_grpc_adapter *a, const char *name, wf_grpc_version_info *out, int cap)
{
	if (!name || strcmp(name, a->name) != 0)
		return -1;
	wf_serve_repo_status st;
	wf_serve_repo_get_status(a->o.repo, &st);
	int n = 0;
	if (st.version && n < cap)
		out[n++] = (wf_grpc_version_info){.version = st.version,
						  .state = WF_GRPC_VERSION_AVAILABLE};
	if (st.loading_version && n < cap)
		out[n++] = (wf_grpc_version_info){.version = st.loading_version,
						  .state = WF_GRPC_VERSION_LOADING};
	if (st.failed_version && st.failed_version != st.version && n < cap) {
		out[n] = (wf_grpc_version_info){.version = st.failed_version,
						.state = WF_GRPC_VERSION_FAILED};
		snprintf(out[n].reason, sizeof(out[n].reason), "%.255s", st.error);
		n++;
	}
	return n;
}

int wf_grpc_model_names(wf_grpc_adapter *a, const char **names, int cap)
{
	if (cap < 1)
		return 0;
	names[0] = a->name;
	return 1;
}

/* The statistics slot of a version (under mu); the oldest is reused. */
static wf_grpc_stats *stats_slot(wf_grpc_adapter *a, long version)
{
	int free_i = -1, old_i = 0;
	for (int i = 0; i < MAX_STAT_VERSIONS; i++) {
		if (a->stats[i].version == version)
			return &a->stats[i].s;
		if (!a->stats[i].version && free_i < 0)
			free_i = i;
		if (a->stats[i].version < a->stats[old_i].version)
			old_i = i;
	}
	int i = free_i >= 0 ? free_i : old_i;
	memset(&a->stats[i], 0, sizeof(a->stats[i]));
	a->stats[i].version = version;
	return &a->stats[i].s;
}

static int http_equivalent(int code)
{
	switch (code) {
	case WF_GRPC_OK: return 200;
	case WF_GRPC_INVALID_ARGUMENT: return 400;
	case WF_GRPC_NOT_FOUND: return 404;
	case WF_GRPC_RESOURCE_EXHAUSTED: return 429;
	case WF_GRPC_UNAVAILABLE:
	case WF_GRPC_DEADLINE_EXCEEDED: return 503;
	case WF_GRPC_UNIMPLEMENTED: return 501;
	default: return 500;
	}
}

int wf_grpc_model_infer(wf_grpc_adapter *a, wf_grpc_model *m, wf_serve_endpoint ep, const float *x,
			int n, float *logits, double t_begin, double deadline, char *why,
			size_t cap)
{
	double t0 = wf_now();
	int code = WF_GRPC_OK;
	wf_err err = {0};
	if (atomic_load(&a->draining) && t_begin >= atomic_load(&a->drain_start)) {
		snprintf(why, cap, "the server is shutting down");
		code = WF_GRPC_UNAVAILABLE;
		goto out;
	}
	double timeout = a->o.request_timeout;
	if (deadline > 0 && deadline - t0 < timeout)
		timeout = deadline - t0;
	if (timeout <= 0) {
		snprintf(why, cap, "Deadline Exceeded");
		code = WF_GRPC_DEADLINE_EXCEEDED;
		goto out;
	}
	int rc = wf_serve_batcher_infer(a->o.batcher, m->priv, x, n, logits, timeout, &err);
	if (rc) {
		snprintf(why, cap, "%s", err.msg);
		code = rc == WF_SERVE_EFULL ? WF_GRPC_RESOURCE_EXHAUSTED
		       : rc == WF_ETRANSIENT && deadline > 0 && wf_now() >= deadline
			       ? WF_GRPC_DEADLINE_EXCEEDED
		       : rc == WF_EINVAL			  ? WF_GRPC_INVALID_ARGUMENT
		       : rc == WF_ETRANSIENT || rc == WF_ESTOPPED ? WF_GRPC_UNAVAILABLE
		       : rc == WF_ENOMEM			  ? WF_GRPC_RESOURCE_EXHAUSTED
								  : WF_GRPC_INTERNAL;
	}
out:;
	double t1 = wf_now();
	uint64_t ns = (uint64_t)((t1 - t0) * 1e9);
	pthread_mutex_lock(&a->mu);
	wf_grpc_stats *s = stats_slot(a, m->version);
	if (code == WF_GRPC_OK) {
		s->success.count++;
		s->success.ns += ns;
		/* perf_analyzer needs queue and the three compute counts to move
		 * together; the batcher does not split queue from compute time for
		 * its callers yet, so compute_infer holds both. */
		s->queue.count++;
		s->compute_input.count++;
		s->compute_output.count++;
		s->compute_infer.count++;
		s->compute_infer.ns += ns;
		s->inference_count += (uint64_t)n;
		s->execution_count++;
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		s->last_inference_ms = (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
	} else {
		s->fail.count++;
		s->fail.ns += ns;
	}
	pthread_mutex_unlock(&a->mu);
	wf_serve_metrics_request(a->o.metrics, ep, http_equivalent(code), t1 - t0);
	return code;
}

void wf_grpc_model_failed(wf_grpc_adapter *a, wf_serve_endpoint ep, int code, double seconds)
{
	wf_serve_metrics_request(a->o.metrics, ep, http_equivalent(code), seconds);
}

int wf_grpc_model_stats(wf_grpc_adapter *a, const char *name, long version, wf_grpc_stats *st,
			char *why, size_t cap)
{
	memset(st, 0, sizeof(*st));
	if (!name || strcmp(name, a->name) != 0) {
		snprintf(why, cap, "requested model '%.200s' does not exist", name ? name : "");
		return WF_GRPC_NOT_FOUND;
	}
	pthread_mutex_lock(&a->mu);
	for (int i = 0; i < MAX_STAT_VERSIONS; i++) {
		const wf_grpc_stats *s = &a->stats[i].s;
		if (!a->stats[i].version || (version && a->stats[i].version != version))
			continue;
		st->inference_count += s->inference_count;
		st->execution_count += s->execution_count;
		if (s->last_inference_ms > st->last_inference_ms)
			st->last_inference_ms = s->last_inference_ms;
		wf_grpc_duration *d[] = {&st->success,	     &st->fail,
					 &st->queue,	     &st->compute_input,
					 &st->compute_infer, &st->compute_output};
		const wf_grpc_duration *e[] = {&s->success,	  &s->fail,
					       &s->queue,	  &s->compute_input,
					       &s->compute_infer, &s->compute_output};
		for (size_t k = 0; k < WF_ARRAY_LEN(d); k++) {
			d[k]->count += e[k]->count;
			d[k]->ns += e[k]->ns;
		}
	}
	pthread_mutex_unlock(&a->mu);
	return WF_GRPC_OK;
}

int wf_grpc_repository_load(wf_grpc_adapter *a, const char *name, char *why, size_t cap)
{
	if (name && strcmp(name, a->name) == 0)
		return WF_GRPC_OK; /* loaded, and kept fresh by polling its base path */
	snprintf(why, cap,
		 "failed to load '%.200s': this server serves one model (--model_name %.200s); "
		 "model control is not available",
		 name ? name : "", a->name);
	return WF_GRPC_UNIMPLEMENTED;
}

int wf_grpc_repository_unload(wf_grpc_adapter *a, const char *name, char *why, size_t cap)
{
	snprintf(why, cap,
		 "failed to unload '%.200s': this server serves one model (--model_name %.200s); "
		 "model control is not available",
		 name ? name : "", a->name);
	return WF_GRPC_UNIMPLEMENTED;
}

int wf_grpc_reload_config(wf_grpc_adapter *a, const char *const *names, int n, char *why,
			  size_t cap)
{
	if (n == 1 && strcmp(names[0], a->name) == 0)
		return WF_GRPC_OK; /* the config this server already runs */
	snprintf(why, cap,
		 "this server serves one model (--model_name %.200s); a config with %d models "
		 "cannot be applied",
		 a->name, n);
	return WF_GRPC_UNIMPLEMENTED;
}
