/* grpc_adapter.c: the gRPC services' view of serve/, over the model
 * repository (serve/repo.h) and the one inference path (serve/infer.h) HTTP
 * uses: model_get = wf_serve_repo_find (404/503/400 = NOT_FOUND/UNAVAILABLE/
 * INVALID_ARGUMENT) + wf_serve_repo_model_config; model_put =
 * wf_serve_version_release; model_versions = wf_serve_repo_status;
 * model_names = wf_serve_repo_index; model_run = wf_serve_infer or
 * wf_serve_infer_async (the request core, which counts the version's
 * statistics; /metrics is counted here); model_stats =
 * the served versions' stats (wf_serve_repo_acquire_all); server_ready =
 * wf_serve_repo_ready and not draining; repository_load/unload =
 * wf_serve_repo_load/unload; reload_config = wf_serve_repo_reload_config. */
#include "serve/grpc_adapter.h"

#include "common/util.h"
#include "serve/grpc.h"
#include "serve/infer.h"
#include "serve/request.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Model names handed out by wf_grpc_model_names: interned, kept until free. */
typedef struct name_node {
	struct name_node *next;
	char name[];
} name_node;

struct wf_grpc_adapter {
	wf_grpc_adapter_opts o;
	atomic_int draining;
	pthread_mutex_t mu; /* names */
	name_node *names;
};

int wf_grpc_adapter_create(wf_grpc_adapter **out, const wf_grpc_adapter_opts *o, wf_err *err)
{
	wf_grpc_adapter *a = calloc(1, sizeof(*a));
	if (!a)
		return wf_errf(err, WF_ENOMEM, "out of memory");
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
	while (a->names) {
		name_node *next = a->names->next;
		free(a->names);
		a->names = next;
	}
	pthread_mutex_destroy(&a->mu);
	free(a);
}

void wf_grpc_adapter_drain(wf_grpc_adapter *a)
{
	atomic_store(&a->draining, 1);
}

int wf_grpc_server_ready(wf_grpc_adapter *a)
{
	return !atomic_load(&a->draining) && wf_serve_repo_ready(a->o.repo);
}

static int find_code(wf_serve_find why)
{
	switch (why) {
	case WF_SERVE_NOT_FOUND: return WF_GRPC_NOT_FOUND;
	case WF_SERVE_UNAVAILABLE: return WF_GRPC_UNAVAILABLE;
	case WF_SERVE_BAD_REQUEST: return WF_GRPC_INVALID_ARGUMENT;
	default: return WF_GRPC_INTERNAL;
	}
}

int wf_grpc_model_get(wf_grpc_adapter *a, const char *name, long version, const char *label,
		      wf_grpc_model *m, char *why, size_t cap)
{
	memset(m, 0, sizeof(*m));
	if (version < 0) {
		snprintf(why, cap, "the model version must be a positive integer");
		return WF_GRPC_INVALID_ARGUMENT;
	}
	wf_serve_find fw = WF_SERVE_FOUND;
	wf_err err = {0};
	wf_serve_version *v =
		wf_serve_repo_find(a->o.repo, name ? name : "", version, label, &fw, &err);
	if (!v) {
		snprintf(why, cap, "%s", err.msg);
		return find_code(fw);
	}
	wf_serve_model_config *mc = &m->cfg;
	if (wf_serve_repo_model_config(a->o.repo, v->name, mc, &err))
		wf_serve_model_config_init(mc); /* unloaded meanwhile: the server's settings */
	m->name = v->name;
	m->version = v->version;
	m->io = v->io;
	m->max_batch = mc->max_batch >= 0 ? mc->max_batch : v->max_batch;
	m->labels = v->meta.nclasses == v->io.classes ? v->meta.class_names : NULL;
	m->batching = mc->batch_delay_us >= 0;
	m->batch_timeout_us = mc->batch_delay_us >= 0 ? mc->batch_delay_us : 0;
	m->instances = mc->instances > 0 ? mc->instances : a->o.instances;
	m->priv = v;
	return WF_GRPC_OK;
}

int wf_grpc_model_served(wf_grpc_adapter *a, const char *name, long *out, int cap)
{
	return wf_serve_repo_served(a->o.repo, name, out, cap);
}

void wf_grpc_model_put(wf_grpc_adapter *a, wf_grpc_model *m)
{
	(void)a;
	if (m && m->priv)
		wf_serve_version_release(m->priv);
	if (m)
		m->priv = NULL;
}

int wf_grpc_model_ready(wf_grpc_adapter *a, const char *name, long version)
{
	if (!name || atomic_load(&a->draining) || version < 0)
		return 0;
	wf_serve_find fw;
	wf_err err = {0};
	wf_serve_version *v = wf_serve_repo_find(a->o.repo, name, version, NULL, &fw, &err);
	wf_serve_version_release(v);
	return v != NULL;
}

static wf_grpc_version_state version_state(const wf_serve_version_state *s)
{
	if (!strcmp(s->state, "AVAILABLE"))
		return WF_GRPC_VERSION_AVAILABLE;
	if (!strcmp(s->state, "LOADING"))
		return WF_GRPC_VERSION_LOADING;
	if (!strcmp(s->state, "UNLOADING"))
		return WF_GRPC_VERSION_UNLOADING;
	return s->error[0] ? WF_GRPC_VERSION_FAILED : WF_GRPC_VERSION_END;
}

int wf_grpc_model_versions(wf_grpc_adapter *a, const char *name, wf_grpc_version_info *out, int cap)
{
	int n = 0;
	wf_serve_version_state *st = name ? wf_serve_repo_status(a->o.repo, name, &n) : NULL;
	if (!st)
		return -1;
	int k = 0;
	for (int i = 0; i < n && k < cap; i++) {
		if (st[i].version <= 0)
			continue;
		out[k] = (wf_grpc_version_info){.version = st[i].version,
						.state = version_state(&st[i])};
		snprintf(out[k].reason, sizeof(out[k].reason), "%.255s", st[i].error);
		k++;
	}
	free(st);
	return k;
}

/* The interned copy of name (under mu). */
static const char *intern(wf_grpc_adapter *a, const char *name)
{
	for (name_node *p = a->names; p; p = p->next)
		if (!strcmp(p->name, name))
			return p->name;
	size_t len = strlen(name);
	name_node *p = malloc(sizeof(*p) + len + 1);
	if (!p)
		return NULL;
	memcpy(p->name, name, len + 1);
	p->next = a->names;
	a->names = p;
	return p->name;
}

int wf_grpc_model_names(wf_grpc_adapter *a, const char **names, int cap)
{
	int n = 0, k = 0;
	wf_serve_version_state *idx = wf_serve_repo_index(a->o.repo, &n);
	pthread_mutex_lock(&a->mu);
	for (int i = 0; i < n && k < cap; i++) {
		int seen = 0;
		for (int j = 0; j < k && !seen; j++)
			seen = !strcmp(names[j], idx[i].name);
		const char *s = seen ? NULL : intern(a, idx[i].name);
		if (s)
			names[k++] = s;
	}
	pthread_mutex_unlock(&a->mu);
	free(idx);
	return k;
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

/* The status of a batcher error rc (deadline: the call's, 0 if none). */
static int infer_code(int rc, double deadline)
{
	return rc == WF_SERVE_EFULL ? WF_GRPC_RESOURCE_EXHAUSTED
	       : rc == WF_ETRANSIENT && deadline > 0 && wf_now() >= deadline
		       ? WF_GRPC_DEADLINE_EXCEEDED
	       : rc == WF_EINVAL			  ? WF_GRPC_INVALID_ARGUMENT
	       : rc == WF_ETRANSIENT || rc == WF_ESTOPPED ? WF_GRPC_UNAVAILABLE
	       : rc == WF_ENOMEM			  ? WF_GRPC_RESOURCE_EXHAUSTED
							  : WF_GRPC_INTERNAL;
}

int wf_grpc_model_ran(wf_grpc_adapter *a, wf_serve_endpoint ep, const wf_serve_request *rq,
		      const wf_serve_response *rs, int rc)
{
	int code = !rc		      ? WF_GRPC_OK
		   : !rs->bad_request ? infer_code(rc, rq->deadline)
		   : rc == WF_ENOMEM  ? WF_GRPC_RESOURCE_EXHAUSTED
				      : WF_GRPC_INVALID_ARGUMENT;
	wf_serve_metrics_request(a->o.metrics, ep, http_equivalent(code), wf_now() - rq->t0);
	return code;
}

int wf_grpc_model_run(wf_grpc_adapter *a, wf_grpc_model *m, wf_serve_endpoint ep,
		      wf_serve_request *rq, wf_serve_response *rs, double deadline,
		      wf_serve_batcher_done fn, void *arg, char *why, size_t cap)
{
	wf_err err = {0};
	if (!rq->t0)
		rq->t0 = wf_now();
	rq->timeout_s = a->o.request_timeout;
	rq->deadline = deadline;
	int rc = fn ? wf_serve_infer_async(a->o.batcher, m->priv, rq, rs, fn, arg, &err)
		    : wf_serve_infer(a->o.batcher, m->priv, rq, rs, &err);
	if (fn && !rc)
		return WF_GRPC_PENDING;
	if (rc)
		snprintf(why, cap, "%s", err.msg);
	return wf_grpc_model_ran(a, ep, rq, rs, rc);
}

void wf_grpc_model_failed(wf_grpc_adapter *a, wf_serve_endpoint ep, int code, double seconds)
{
	wf_serve_metrics_request(a->o.metrics, ep, http_equivalent(code), seconds);
}

int wf_grpc_model_stats(wf_grpc_adapter *a, const char *name, long version, wf_grpc_stats *st,
			char *why, size_t cap)
{
	memset(st, 0, sizeof(*st));
	int n = 0, nst = 0;
	wf_serve_version_state *known = name ? wf_serve_repo_status(a->o.repo, name, &nst) : NULL;
	free(known);
	if (!known) {
		snprintf(why, cap, "requested model '%.200s' does not exist", name ? name : "");
		return WF_GRPC_NOT_FOUND;
	}
	wf_serve_version **vs = wf_serve_repo_acquire_all(a->o.repo, name, &n);
	int found = 0;
	for (int i = 0; i < n; i++) {
		if (!version || vs[i]->version == version) {
			found = 1;
			wf_serve_stats_add(vs[i], st);
		}
		wf_serve_version_release(vs[i]);
	}
	free(vs);
	if (version && !found) {
		wf_serve_kserve_unknown(name, version, 0, why, cap);
		return WF_GRPC_NOT_FOUND;
	}
	return WF_GRPC_OK;
}

/* gRPC code of a repository call's library error. */
static int repo_code(int rc)
{
	switch (rc) {
	case WF_EINVAL:
	case WF_ENOTSUP: return WF_GRPC_INVALID_ARGUMENT; /* HTTP's 400 */
	case WF_ETRANSIENT:
	case WF_ESTOPPED: return WF_GRPC_UNAVAILABLE;
	case WF_ENOMEM: return WF_GRPC_RESOURCE_EXHAUSTED;
	default: return WF_GRPC_INTERNAL;
	}
}

int wf_grpc_repository_load(wf_grpc_adapter *a, const char *name, const char *config, char *why,
			    size_t cap)
{
	wf_err err = {0};
	int rc = wf_serve_repo_load(a->o.repo, name ? name : "", config, &err);
	if (rc)
		snprintf(why, cap, "%s", err.msg);
	return rc ? repo_code(rc) : WF_GRPC_OK;
}

int wf_grpc_repository_unload(wf_grpc_adapter *a, const char *name, char *why, size_t cap)
{
	wf_err err = {0};
	int rc = wf_serve_repo_unload(a->o.repo, name ? name : "", &err);
	if (rc)
		snprintf(why, cap, "%s", err.msg);
	return rc ? repo_code(rc) : WF_GRPC_OK;
}

int wf_grpc_reload_config(wf_grpc_adapter *a, const wf_serve_model_config *cfg, int n, char *why,
			  size_t cap)
{
	wf_err err = {0};
	int rc = wf_serve_repo_reload_config(a->o.repo, cfg, n, &err);
	if (rc)
		snprintf(why, cap, "%s", err.msg);
	return rc ? repo_code(rc) : WF_GRPC_OK;
}

int wf_grpc_shm_enabled(wf_grpc_adapter *a)
{
	return a->o.shm != NULL;
}

wf_serve_shm *wf_grpc_shm(wf_grpc_adapter *a, int local, char *why, size_t cap)
{
	wf_err err = {0};
	if (wf_serve_shm_allowed(a->o.shm, local, &err) == 0)
		return a->o.shm;
	if (why)
		snprintf(why, cap, "%s", err.msg);
	return NULL;
}
