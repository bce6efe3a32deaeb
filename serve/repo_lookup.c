/* repo_lookup.c: the repository's lookups: a version by name, number or
 * label, version states for status and the index, the served versions of a
 * model, its config, readiness. */
#include "serve/repo_internal.h"

/* ---- lookups ---------------------------------------------------------------- */

wf_serve_version *wf_serve_repo_find(wf_serve_repo *r, const char *name, long version,
				     const char *label, wf_serve_find *why, wf_err *err)
{
	wf_serve_version *v = NULL;
	*why = WF_SERVE_NOT_FOUND;
	pthread_mutex_lock(&r->mu);
	model_ent *m = find_model(r, name);
	if (!m || !m->active) {
		wf_errf(err, WF_EINVAL, "Servable not found for request: Latest(%s)", name);
		goto out;
	}
	if (label && *label) {
		if (version > 0) {
			*why = WF_SERVE_BAD_REQUEST;
			wf_errf(err, WF_EINVAL, "a request names a version or a label, not both");
			goto out;
		}
		for (int i = 0; i < m->cfg.nlabels; i++)
			if (!strcmp(m->cfg.labels[i].key, label))
				version = m->cfg.labels[i].version;
		if (version <= 0) {
			wf_errf(err, WF_EINVAL, "Unrecognized servable version label: %s", label);
			goto out;
		}
	}
	vrec *best = NULL;
	int loading = 0;
	for (int i = 0; i < m->nvs; i++) {
		vrec *x = &m->vs[i];
		loading |= x->state == VS_LOADING;
		if (x->state != VS_AVAILABLE)
			continue;
		if (version > 0 ? x->version == version : (!best || x->version > best->version))
			best = x;
	}
	if (best) {
		v = best->v;
		atomic_fetch_add(&v->refs, 1);
		*why = WF_SERVE_FOUND;
		goto out;
	}
	if (version > 0) {
		if (label && *label)
			wf_errf(err, WF_EINVAL,
				"Servable not found for request: Specific(%s, %ld) (label %s)",
				name, version, label);
		else
			wf_errf(err, WF_EINVAL, "Servable not found for request: Specific(%s, %ld)",
				name, version);
		goto out;
	}
	*why = WF_SERVE_UNAVAILABLE;
	const char *failure = NULL;
	for (int i = 0; i < m->nvs; i++)
		if (m->vs[i].failed)
			failure = m->vs[i].error;
	wf_errf(err, WF_ETRANSIENT, "model %s is not ready: %s", name,
		loading	  ? "a version is loading"
		: failure ? failure
			  : "no version found under the base path yet");
out:
	pthread_mutex_unlock(&r->mu);
	return v;
}

static int push_state(wf_serve_version_state **a, int *n, int *cap, const char *name, long version,
		      const char *state, const char *error)
{
	if (*n == *cap) {
		int c = *cap ? *cap * 2 : 8;
		wf_serve_version_state *p = realloc(*a, (size_t)c * sizeof(*p));
		if (!p)
			return -1;
		*a = p;
		*cap = c;
	}
	wf_serve_version_state *s = &(*a)[(*n)++];
	snprintf(s->name, sizeof(s->name), "%s", name);
	s->version = version;
	s->state = state;
	snprintf(s->error, sizeof(s->error), "%s", error ? error : "");
	return 0;
}

static void model_states(model_ent *m, wf_serve_version_state **a, int *n, int *cap)
{
	/* newest first */
	long last = -1;
	for (int k = 0; k < m->nvs; k++) {
		vrec *best = NULL;
		for (int i = 0; i < m->nvs; i++)
			if ((last < 0 || m->vs[i].version < last) &&
			    (!best || m->vs[i].version > best->version))
				best = &m->vs[i];
		if (!best)
			break;
		last = best->version;
		push_state(a, n, cap, m->cfg.name, best->version, vs_names[best->state],
			   best->error);
	}
}

wf_serve_version_state *wf_serve_repo_status(wf_serve_repo *r, const char *name, int *n)
{
	wf_serve_version_state *a = NULL;
	int cap = 0;
	*n = 0;
	pthread_mutex_lock(&r->mu);
	model_ent *m = find_model(r, name);
	if (m)
		model_states(m, &a, n, &cap);
	pthread_mutex_unlock(&r->mu);
	return a;
}

wf_serve_version_state *wf_serve_repo_index(wf_serve_repo *r, int *n)
{
	if (r->o.kind == WF_SERVE_REPOSITORY)
		scan_repository(r, 0); /* models added to the folder since */
	wf_serve_version_state *a = NULL;
	int cap = 0;
	*n = 0;
	pthread_mutex_lock(&r->mu);
	for (int i = 0; i < r->nmodels; i++) {
		model_ent *m = r->models[i];
		int before = *n;
		if (m->active || m->nvs)
			model_states(m, &a, n, &cap);
		if (*n == before)
			push_state(&a, n, &cap, m->cfg.name, 0, m->active ? "LOADING" : "END",
				   m->active ? "" : "unloaded");
	}
	pthread_mutex_unlock(&r->mu);
	return a;
}

wf_serve_version **wf_serve_repo_acquire_all(wf_serve_repo *r, const char *name, int *n)
{
	wf_serve_version **a = NULL;
	int cap = 0;
	*n = 0;
	pthread_mutex_lock(&r->mu);
	for (int i = 0; i < r->nmodels; i++) {
		model_ent *m = r->models[i];
		if (name && strcmp(m->cfg.name, name))
			continue;
		for (int j = 0; j < m->nvs; j++) {
			if (m->vs[j].state != VS_AVAILABLE)
				continue;
			if (*n == cap) {
				cap = cap ? cap * 2 : 8;
				wf_serve_version **p = realloc(a, (size_t)cap * sizeof(*p));
				if (!p)
					goto out;
				a = p;
			}
			atomic_fetch_add(&m->vs[j].v->refs, 1);
			a[(*n)++] = m->vs[j].v;
		}
	}
out:
	pthread_mutex_unlock(&r->mu);
	return a;
}

int wf_serve_repo_served(wf_serve_repo *r, const char *name, long *out, int cap)
{
	int n = 0, k = 0;
	wf_serve_version **vs = wf_serve_repo_acquire_all(r, name, &n);
	for (int i = 0; i < n; i++) {
		if (k < cap)
			out[k++] = vs[i]->version;
		wf_serve_version_release(vs[i]);
	}
	free(vs);
	return k;
}

int wf_serve_repo_model_config(wf_serve_repo *r, const char *name, wf_serve_model_config *out,
			       wf_err *err)
{
	pthread_mutex_lock(&r->mu);
	model_ent *m = find_model(r, name);
	if (m)
		*out = m->cfg;
	pthread_mutex_unlock(&r->mu);
	if (!m)
		return wf_errf(err, WF_EINVAL, "Request for unknown model: '%s' is not found",
			       name);
	if (out->max_batch < 0 || out->max_batch > r->o.max_batch)
		out->max_batch = r->o.max_batch;
	if (out->batch_delay_us < 0)
		out->batch_delay_us = r->o.batching ? r->o.batch_delay_us : -1;
	if (out->instances <= 0)
		out->instances = r->o.nslots;
	if (out->threads <= 0)
		out->threads = r->o.threads;
	if (!out->platform[0])
		snprintf(out->platform, sizeof(out->platform), "weft");
	return 0;
}

int wf_serve_repo_ready(wf_serve_repo *r)
{
	int ready = 1, any = 0;
	pthread_mutex_lock(&r->mu);
	for (int i = 0; i < r->nmodels; i++) {
		model_ent *m = r->models[i];
		if (!m->active)
			continue;
		any = 1;
		int avail = 0;
		for (int j = 0; j < m->nvs; j++)
			avail |= m->vs[j].state == VS_AVAILABLE;
		ready &= avail;
	}
	pthread_mutex_unlock(&r->mu);
	/* Triton in explicit mode is ready with no model loaded */
	return any ? ready : r->o.kind == WF_SERVE_REPOSITORY;
}

long wf_serve_repo_swaps(wf_serve_repo *r)
{
	pthread_mutex_lock(&r->mu);
	long s = r->swaps;
	pthread_mutex_unlock(&r->mu);
	return s;
}

long wf_serve_repo_scans(wf_serve_repo *r)
{
	pthread_mutex_lock(&r->mu);
	long s = r->scans;
	pthread_mutex_unlock(&r->mu);
	return s;
}

long wf_serve_repo_load_failures(wf_serve_repo *r)
{
	pthread_mutex_lock(&r->mu);
	long n = r->load_failures;
	pthread_mutex_unlock(&r->mu);
	return n;
}
