/* repo.c: the model repository's life: its model records, the sources of
 * models (the config file, the repository folder, the one-model flags), the
 * poller, create and free, and model control (load, unload, reload config).
 * Scanning and version policies: repo_scan.c; one version: repo_version.c;
 * lookups: repo_lookup.c. */
#include "serve/repo_internal.h"

model_ent *find_model(wf_serve_repo *r, const char *name)
{
	for (int i = 0; i < r->nmodels; i++)
		if (!strcmp(r->models[i]->cfg.name, name))
			return r->models[i];
	return NULL;
}

/* The model `c->name`, created when new; its config replaced (under mu). */
static model_ent *upsert_model(wf_serve_repo *r, const wf_serve_model_config *c)
{
	model_ent *m = find_model(r, c->name);
	if (m) {
		m->cfg = *c;
		return m;
	}
	if (r->nmodels == r->cap) {
		int cap = r->cap ? r->cap * 2 : 8;
		model_ent **p = realloc(r->models, (size_t)cap * sizeof(*p));
		if (!p)
			return NULL;
		r->models = p;
		r->cap = cap;
	}
	m = calloc(1, sizeof(*m));
	if (!m)
		return NULL;
	m->cfg = *c;
	r->models[r->nmodels++] = m;
	return m;
}

vrec *find_vrec(model_ent *m, long version)
{
	for (int i = 0; i < m->nvs; i++)
		if (m->vs[i].version == version)
			return &m->vs[i];
	return NULL;
}

vrec *get_vrec(model_ent *m, long version)
{
	vrec *x = find_vrec(m, version);
	if (x)
		return x;
	if (m->nvs == m->cap) {
		int cap = m->cap ? m->cap * 2 : 8;
		vrec *p = realloc(m->vs, (size_t)cap * sizeof(*p));
		if (!p)
			return NULL;
		m->vs = p;
		m->cap = cap;
	}
	x = &m->vs[m->nvs++];
	memset(x, 0, sizeof(*x));
	x->version = version;
	x->state = VS_END;
	return x;
}

/* ---- sources of models ------------------------------------------------------- */

/* Re-read the model config file; on an error keep the models as they are
 * (after the first read, a config whose models cannot all be served too). */
static void read_config_file(wf_serve_repo *r, int first)
{
	struct stat sb;
	if (stat(r->config_file, &sb) != 0) {
		wf_error("serve: --model_config_file %s: %s (keeping the current models)",
			 r->config_file, strerror(errno));
		return;
	}
	long long stamp = file_stamp(r->config_file); /* before reading: a later write shows */
	if (!first && stamp == r->config_stamp)
		return;
	char *text = NULL;
	size_t len = 0;
	wf_serve_model_config *cfg = NULL;
	int n = 0;
	wf_err err = {0};
	if (wf_read_file(r->config_file, &text, &len) != 0) {
		wf_error("serve: cannot read --model_config_file %s", r->config_file);
		return;
	}
	int rc = wf_serve_parse_model_server_config(text, len, &cfg, &n, &err);
	free(text);
	if (rc) {
		wf_error("serve: --model_config_file %s: %s (keeping the current models)",
			 r->config_file, err.msg);
		r->config_stamp = stamp;
		return;
	}
	r->config_stamp = stamp; /* a bad edit is not tried again until the file changes */
	if (!first) {
		/* an edit is applied as HandleReloadConfigRequest applies a config:
		 * all or nothing */
		wf_info("serve: --model_config_file %s changed: %d models", r->config_file, n);
		if (wf_serve_repo_reload_config(r, cfg, n, &err) != 0)
			wf_error("serve: --model_config_file %s: %s (the edit is ignored as a "
				 "whole)",
				 r->config_file, err.msg);
		free(cfg);
		return;
	}
	pthread_mutex_lock(&r->mu);
	for (int i = 0; i < r->nmodels; i++)
		r->models[i]->active = 0;
	for (int i = 0; i < n; i++) {
		model_ent *m = upsert_model(r, &cfg[i]);
		if (m)
			m->active = 1;
	}
	pthread_mutex_unlock(&r->mu);
	free(cfg);
}

/* The config of repository model `name`: defaults + its config.pbtxt. */
static int repo_model_config(wf_serve_repo *r, const char *name, wf_serve_model_config *c,
			     wf_err *err)
{
	wf_serve_model_config_init(c);
	if (strlen(name) >= sizeof(c->name) || !*name || strchr(name, '/') || name[0] == '.')
		return wf_errf(err, WF_EINVAL, "\"%s\" is not a model name", name);
	snprintf(c->name, sizeof(c->name), "%s", name);
	snprintf(c->base_path, sizeof(c->base_path), "%s/%s", r->repository, name);
	snprintf(c->platform, sizeof(c->platform), "weft");
	struct stat sb;
	if (stat(c->base_path, &sb) != 0 || !S_ISDIR(sb.st_mode))
		return wf_errf(err, WF_EINVAL, "no model folder %s in the model repository",
			       c->base_path);
	char p[8300], *text = NULL;
	size_t len = 0;
	snprintf(p, sizeof(p), "%s/config.pbtxt", c->base_path);
	if (!wf_exists(p))
		return 0;
	if (wf_read_file(p, &text, &len) != 0)
		return wf_errf(err, WF_EIO, "cannot read %s", p);
	int rc = wf_serve_parse_triton_config(text, len, c, err);
	free(text);
	if (rc)
		return wf_err_wrap(err, "%s", p);
	return 0;
}

/* Names of the model folders in the repository (malloc'd strings). */
static char **list_repository(wf_serve_repo *r, int *n)
{
	*n = 0;
	DIR *d = opendir(r->repository);
	if (!d)
		return NULL;
	char **names = NULL;
	int cap = 0;
	struct dirent *e;
	char p[8300];
	while ((e = readdir(d))) {
		struct stat sb;
		if (e->d_name[0] == '.')
			continue;
		snprintf(p, sizeof(p), "%s/%s", r->repository, e->d_name);
		if (stat(p, &sb) != 0 || !S_ISDIR(sb.st_mode) ||
		    strlen(e->d_name) >= WF_SERVE_MAX_NAME)
			continue;
		if (*n == cap) {
			cap = cap ? cap * 2 : 8;
			char **q = realloc(names, (size_t)cap * sizeof(*q));
			if (!q)
				break;
			names = q;
		}
		names[(*n)++] = strdup(e->d_name);
	}
	closedir(d);
	return names;
}

/* Make the repository folder's models known; activate them (all, or
 * `only` when non-NULL). */
void scan_repository(wf_serve_repo *r, int activate_all)
{
	int n = 0;
	char **names = list_repository(r, &n);
	pthread_mutex_lock(&r->mu);
	if (activate_all)
		for (int i = 0; i < r->nmodels; i++)
			r->models[i]->active = 0;
	pthread_mutex_unlock(&r->mu);
	for (int i = 0; i < n; i++) {
		wf_serve_model_config c;
		wf_err err = {0};
		if (!names[i])
			continue;
		if (repo_model_config(r, names[i], &c, &err)) {
			wf_error("serve: model %s skipped: %s", names[i], err.msg);
			free(names[i]);
			continue;
		}
		pthread_mutex_lock(&r->mu);
		model_ent *m = find_model(r, c.name);
		if (!m || activate_all)
			m = upsert_model(r, &c);
		if (m && activate_all)
			m->active = 1;
		pthread_mutex_unlock(&r->mu);
		free(names[i]);
	}
	free(names);
}

/* The models of one sync_all pass, taken one at a time by its threads. */
typedef struct sync_pass {
	wf_serve_repo *r;
	atomic_int next;
	int n;
	int unload; /* sync_model's */
} sync_pass;

static void *sync_thread(void *arg)
{
	sync_pass *p = arg;
	for (int i; (i = atomic_fetch_add(&p->next, 1)) < p->n;) {
		pthread_mutex_lock(&p->r->mu);
		model_ent *m = p->r->models[i];
		pthread_mutex_unlock(&p->r->mu);
		sync_model(p->r, m, p->unload);
	}
	return NULL;
}

/* Sync every model (load_mu held), up to load_threads of them at once
 * (Triton's --model-load-thread-count): this thread and load_threads - 1
 * more. */
static void sync_all_locked(wf_serve_repo *r, int unload)
{
	pthread_mutex_lock(&r->mu);
	sync_pass p = {.r = r, .n = r->nmodels, .unload = unload};
	pthread_mutex_unlock(&r->mu);
	pthread_t t[WF_SERVE_MAX_LOAD_THREADS];
	int extra = WF_MIN(WF_MIN(r->o.load_threads, p.n), WF_SERVE_MAX_LOAD_THREADS) - 1, nt = 0;
	while (nt < extra && pthread_create(&t[nt], NULL, sync_thread, &p) == 0)
		nt++;
	sync_thread(&p);
	while (nt > 0)
		pthread_join(t[--nt], NULL);
}

static void sync_all(wf_serve_repo *r)
{
	pthread_mutex_lock(&r->load_mu);
	sync_all_locked(r, 1);
	pthread_mutex_unlock(&r->load_mu);
}

static double min_pos(double a, double b)
{
	if (a <= 0)
		return b;
	if (b <= 0)
		return a;
	return a < b ? a : b;
}

static void *poller_main(void *arg)
{
	pthread_setname_np(pthread_self(), "repo-poller"); /* top -H, ps -L */
	wf_serve_repo *r = arg;
	double next_cfg = 0;
	int follow_versions = r->o.poll_seconds > 0 && (r->o.kind != WF_SERVE_REPOSITORY ||
							r->o.control == WF_SERVE_CONTROL_POLL);
	double period = follow_versions ? r->o.poll_seconds : 0;
	if (r->o.kind == WF_SERVE_CONFIG_FILE)
		period = min_pos(period, r->o.config_poll_seconds);
	for (int first = 1;; first = 0) {
		if (r->o.kind == WF_SERVE_CONFIG_FILE && !first && r->o.config_poll_seconds > 0 &&
		    wf_now() >= next_cfg) {
			read_config_file(r, 0);
			next_cfg = wf_now() + r->o.config_poll_seconds;
		}
		if (first && r->o.config_poll_seconds > 0)
			next_cfg = wf_now() + r->o.config_poll_seconds;
		if (r->o.kind == WF_SERVE_REPOSITORY && r->o.control == WF_SERVE_CONTROL_POLL &&
		    !first)
			scan_repository(r, 1);
		if (first || follow_versions || r->o.kind == WF_SERVE_CONFIG_FILE)
			sync_all(r);
		pthread_mutex_lock(&r->mu);
		r->scans++;
		if (!r->stop && period > 0) {
			struct timespec ts;
			clock_gettime(CLOCK_REALTIME, &ts);
			double t = ts.tv_sec + ts.tv_nsec * 1e-9 + period;
			ts.tv_sec = (time_t)t;
			ts.tv_nsec = (long)((t - (double)ts.tv_sec) * 1e9);
			pthread_cond_timedwait(&r->wake, &r->mu, &ts);
		}
		int stop = r->stop || period <= 0;
		pthread_mutex_unlock(&r->mu);
		if (stop)
			break;
	}
	return NULL;
}

static int check_dir(const char *flag, const char *path, wf_err *err)
{
	struct stat sb;
	if (!path || stat(path, &sb) != 0)
		return wf_errf(err, WF_EINVAL, "%s %s: %s", flag, path ? path : "(none)",
			       path ? strerror(errno) : "missing");
	if (!S_ISDIR(sb.st_mode))
		return wf_errf(err, WF_EINVAL, "%s %s: not a directory", flag, path);
	return 0;
}

int wf_serve_repo_create(wf_serve_repo **out, const wf_serve_repo_opts *o, wf_err *err)
{
	int rc = 0;
	if (o->kind == WF_SERVE_SINGLE)
		rc = check_dir("--model_base_path", o->base_path, err);
	else if (o->kind == WF_SERVE_REPOSITORY)
		rc = check_dir("--model_repository", o->repository, err);
	if (rc)
		return rc;
	wf_serve_repo *r = calloc(1, sizeof(*r));
	if (!r)
		return wf_errf(err, WF_ENOMEM, "out of memory");
	r->o = *o;
	r->device = strdup(o->device ? o->device : "auto");
	r->o.device = r->device;
	r->config_file = o->config_file ? strdup(o->config_file) : NULL;
	r->repository = o->repository ? strdup(o->repository) : NULL;
	r->o.config_file = r->config_file;
	r->o.repository = r->repository;
	r->o.load_models = NULL;
	r->o.nload_models = 0;
	pthread_mutex_init(&r->mu, NULL);
	pthread_mutex_init(&r->load_mu, NULL);
	pthread_cond_init(&r->wake, NULL);
	if (!r->device) {
		wf_serve_repo_free(r);
		return wf_errf(err, WF_ENOMEM, "out of memory");
	}
	if (o->kind == WF_SERVE_SINGLE) {
		wf_serve_model_config c;
		wf_serve_model_config_init(&c);
		snprintf(c.name, sizeof(c.name), "%s", o->name);
		snprintf(c.base_path, sizeof(c.base_path), "%s", o->base_path);
		model_ent *m = upsert_model(r, &c);
		if (!m) {
			wf_serve_repo_free(r);
			return wf_errf(err, WF_ENOMEM, "out of memory");
		}
		m->active = 1;
	} else if (o->kind == WF_SERVE_CONFIG_FILE) {
		/* the first read must succeed */
		char *text = NULL;
		size_t len = 0;
		wf_serve_model_config *cfg = NULL;
		int n = 0;
		struct stat sb;
		if (!o->config_file || stat(o->config_file, &sb) != 0 ||
		    wf_read_file(o->config_file, &text, &len) != 0) {
			wf_serve_repo_free(r);
			return wf_errf(err, WF_EINVAL, "--model_config_file %s: cannot read it",
				       o->config_file ? o->config_file : "(none)");
		}
		rc = wf_serve_parse_model_server_config(text, len, &cfg, &n, err);
		free(text);
		free(cfg);
		if (rc) {
			wf_serve_repo_free(r);
			return wf_err_wrap(err, "--model_config_file %s", o->config_file);
		}
		read_config_file(r, 1);
	} else {
		scan_repository(r, o->control != WF_SERVE_CONTROL_EXPLICIT);
		for (int i = 0; i < o->nload_models; i++) {
			const char *name = o->load_models[i];
			pthread_mutex_lock(&r->mu);
			for (int j = 0; j < r->nmodels; j++)
				if (!strcmp(name, "*") || !strcmp(name, r->models[j]->cfg.name))
					r->models[j]->active = 1;
			model_ent *m = find_model(r, name);
			pthread_mutex_unlock(&r->mu);
			if (!m && strcmp(name, "*")) {
				wf_serve_repo_free(r);
				return wf_errf(err, WF_EINVAL,
					       "--load-model %s: no such model folder in %s", name,
					       o->repository);
			}
		}
	}
	if (pthread_create(&r->poller, NULL, poller_main, r) != 0) {
		wf_serve_repo_free(r);
		return wf_errf(err, WF_EINTERNAL, "cannot start the repository poller thread");
	}
	r->poller_started = 1;
	*out = r;
	return 0;
}

void wf_serve_repo_free(wf_serve_repo *r)
{
	if (!r)
		return;
	if (r->poller_started) {
		pthread_mutex_lock(&r->mu);
		r->stop = 1;
		pthread_cond_broadcast(&r->wake);
		pthread_mutex_unlock(&r->mu);
		pthread_join(r->poller, NULL);
	}
	for (int i = 0; i < r->nmodels; i++) {
		model_ent *m = r->models[i];
		for (int j = 0; j < m->nvs; j++)
			if (m->vs[j].state == VS_AVAILABLE)
				wf_serve_version_release(m->vs[j].v);
		free(m->vs);
		free(m);
	}
	free(r->models);
	pthread_cond_destroy(&r->wake);
	pthread_mutex_destroy(&r->load_mu);
	pthread_mutex_destroy(&r->mu);
	free(r->device);
	free(r->config_file);
	free(r->repository);
	free(r);
}

/* ---- model control ------------------------------------------------------------- */

static int control_allowed(wf_serve_repo *r, wf_err *err)
{
	if (r->o.kind == WF_SERVE_REPOSITORY && r->o.control == WF_SERVE_CONTROL_EXPLICIT)
		return 0;
	return wf_errf(err, WF_ENOTSUP,
		       "explicit model load / unload is not allowed: start weft-serve with "
		       "--model_repository DIR --model_control_mode explicit");
}

int wf_serve_repo_load(wf_serve_repo *r, const char *name, const char *config, wf_err *err)
{
	int rc = control_allowed(r, err);
	if (rc)
		return rc;
	wf_serve_model_config c;
	rc = repo_model_config(r, name, &c, err);
	if (!rc && config) { /* instead of config.pbtxt */
		wf_serve_model_config folder = c;
		wf_serve_model_config_init(&c);
		memcpy(c.name, folder.name, sizeof(c.name));
		memcpy(c.base_path, folder.base_path, sizeof(c.base_path));
		memcpy(c.platform, folder.platform, sizeof(c.platform));
		if ((rc = wf_serve_parse_triton_config_json(config, strlen(config), &c, err)))
			wf_err_wrap(err, "the configuration of the load request");
	}
	if (rc)
		return wf_err_wrap(err, "failed to load '%s'", name);
	pthread_mutex_lock(&r->load_mu);
	pthread_mutex_lock(&r->mu);
	model_ent *old = find_model(r, name);
	int changed = old && memcmp(&old->cfg, &c, sizeof(c)) != 0;
	wf_serve_model_config prev = old ? old->cfg : c;
	model_ent *m = upsert_model(r, &c);
	if (m) {
		m->active = 1;
		for (int i = 0; i < m->nvs; i++) {
			m->vs[i].failed = 0; /* a load request retries failed versions */
			m->vs[i].stale = changed && m->vs[i].state == VS_AVAILABLE;
		}
	}
	pthread_mutex_unlock(&r->mu);
	if (!m) {
		pthread_mutex_unlock(&r->load_mu);
		return wf_errf(err, WF_ENOMEM, "out of memory");
	}
	sync_model(r, m, 1);
	/* a new configuration that a version cannot take is refused: the model
	 * keeps the one it had (its versions serve on under it) */
	long failed = 0;
	pthread_mutex_lock(&r->mu);
	for (int i = 0; changed && !failed && i < m->nvs; i++)
		if (m->vs[i].failed) {
			failed = m->vs[i].version;
			wf_errf(err, WF_EINVAL,
				"failed to load '%s': version %ld: %s; it serves on with its "
				"previous "
				"configuration",
				name, failed, m->vs[i].error);
			m->cfg = prev;
		}
	pthread_mutex_unlock(&r->mu);
	pthread_mutex_unlock(&r->load_mu);
	if (failed)
		return WF_EINVAL;
	wf_serve_find why;
	wf_err e2 = {0};
	wf_serve_version *v = wf_serve_repo_find(r, name, 0, NULL, &why, &e2);
	if (!v)
		return wf_errf(err, WF_EINVAL, "failed to load '%s': %s", name, e2.msg);
	wf_serve_version_release(v);
	return 0;
}

int wf_serve_repo_unload(wf_serve_repo *r, const char *name, wf_err *err)
{
	int rc = control_allowed(r, err);
	if (rc)
		return rc;
	pthread_mutex_lock(&r->load_mu);
	pthread_mutex_lock(&r->mu);
	model_ent *m = find_model(r, name);
	if (m) {
		m->active = 0;
		for (int i = 0; i < m->nvs; i++)
			unload_vrec(m, &m->vs[i]);
	}
	pthread_mutex_unlock(&r->mu);
	pthread_mutex_unlock(&r->load_mu);
	if (!m)
		return wf_errf(err, WF_EINVAL, "failed to unload '%s': no such model", name);
	return 0;
}

/* 1 when the n models of cfg include name. */
static int configured(const wf_serve_model_config *cfg, int n, const char *name)
{
	for (int i = 0; i < n; i++)
		if (!strcmp(cfg[i].name, name))
			return 1;
	return 0;
}

/* Why model m (c: the config it was given; m may be NULL) has no version
 * to serve, naming the field of its config that says so (mu held). */
static void unserved_reason(const model_ent *m, const wf_serve_model_config *c, char *why,
			    size_t size)
{
	for (int j = 0; m && j < m->nvs; j++)
		if (m->vs[j].failed) {
			snprintf(why, size, "%.300s", m->vs[j].error);
			return;
		}
	struct stat sb;
	errno = 0;
	if (stat(c->base_path, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
		snprintf(why, size, "base_path %.200s: %s", c->base_path,
			 errno ? strerror(errno) : "not a directory");
		return;
	}
	if (c->policy == WF_SERVE_POLICY_SPECIFIC && c->nspecific == 0) {
		snprintf(why, size, "model_version_policy specific lists no version");
		return;
	}
	if (c->policy == WF_SERVE_POLICY_SPECIFIC) {
		size_t len = (size_t)snprintf(why, size, "model_version_policy specific: versions");
		for (int i = 0; i < c->nspecific && len < size; i++)
			len += (size_t)snprintf(why + len, size - len, " %ld", c->specific[i]);
		if (len < size)
			snprintf(why + len, size - len, " are not under base_path %.200s",
				 c->base_path);
		return;
	}
	snprintf(why, size, "no numbered version folder with a model.h5 under base_path %.200s",
		 c->base_path);
}

int wf_serve_repo_reload_config(wf_serve_repo *r, const wf_serve_model_config *cfg, int n,
				wf_err *err)
{
	if (r->o.kind == WF_SERVE_REPOSITORY)
		return wf_errf(err, WF_ENOTSUP,
			       "a --model_repository server takes the repository API "
			       "(load/unload), not a model config");
	for (int i = 0; i < n; i++)
		for (int j = 0; j < i; j++)
			if (!strcmp(cfg[i].name, cfg[j].name))
				return wf_errf(err, WF_EINVAL, "model \"%s\" is configured twice",
					       cfg[i].name);
	/* All or nothing: the new set loads beside the old one (nothing is
	 * unloaded yet); only when every model of it has a version does the
	 * rest go, else the old set is restored as it was. */
	pthread_mutex_lock(&r->load_mu);
	pthread_mutex_lock(&r->mu);
	int nold = r->nmodels, rc = 0;
	int *was_active = calloc((size_t)nold + 1, sizeof(*was_active));
	wf_serve_model_config *was = calloc((size_t)nold + 1, sizeof(*was));
	for (int i = 0; was && was_active && i < nold; i++) {
		was_active[i] = r->models[i]->active;
		was[i] = r->models[i]->cfg;
	}
	for (int i = 0; was && was_active && i < n; i++) {
		model_ent *m = upsert_model(r, &cfg[i]);
		if (m)
			m->active = 1;
		else
			rc = wf_errf(err, WF_ENOMEM, "out of memory");
	}
	pthread_mutex_unlock(&r->mu);
	if (!was || !was_active)
		rc = wf_errf(err, WF_ENOMEM, "out of memory");
	if (!rc)
		sync_all_locked(r, 0);
	char missing[900] = "", why[400];
	pthread_mutex_lock(&r->mu);
	for (int i = 0; !rc && i < n; i++) {
		model_ent *m = find_model(r, cfg[i].name);
		if (!m || !m->kept) {
			unserved_reason(m, &cfg[i], why, sizeof(why));
			snprintf(missing + strlen(missing), sizeof(missing) - strlen(missing),
				 "%s%s (%s)", missing[0] ? "; " : "", cfg[i].name, why);
		}
	}
	pthread_mutex_unlock(&r->mu);
	if (missing[0])
		rc = wf_errf(
			err, WF_EINVAL,
			"no version of %s could be loaded; the models served before are served "
			"as they were",
			missing);
	pthread_mutex_lock(&r->mu);
	for (int i = 0; was && was_active && i < r->nmodels; i++) {
		model_ent *m = r->models[i];
		if (rc && i < nold) { /* back to what it was */
			m->active = was_active[i];
			m->cfg = was[i];
		} else {
			m->active = !rc && configured(cfg, n, m->cfg.name);
		}
	}
	pthread_mutex_unlock(&r->mu);
	sync_all_locked(r, 1); /* unload what the set kept no longer serves */
	if (rc) { /* refused: the models it added are forgotten (no sync runs: load_mu) */
		pthread_mutex_lock(&r->mu);
		while (r->nmodels > nold) {
			model_ent *m = r->models[--r->nmodels];
			for (int j = 0; j < m->nvs; j++)
				unload_vrec(m, &m->vs[j]);
			free(m->vs);
			free(m);
		}
		pthread_mutex_unlock(&r->mu);
	}
	pthread_mutex_unlock(&r->load_mu);
	free(was_active);
	free(was);
	return rc;
}
