/* repo_scan.c: scanning a base path for numbered versions (and the reasons
 * for skipping foreign ones), and bringing a model's loaded versions in line
 * with its version policy (loading and unloading). */
#include "serve/repo_internal.h"

#include "common/cancel.h"
#include "common/cpus.h"
#include "serve/request.h" /* wf_serve_input_name_ok */

#include <unistd.h>

/* ---- scanning a base path ------------------------------------------------ */
long long file_stamp(const char *path)
{
	struct stat sb;
	if (stat(path, &sb) != 0 || !S_ISREG(sb.st_mode))
		return 0;
	/* a replaced file differs in inode, size or mtime (ns) */
	unsigned long long h = (unsigned long long)sb.st_mtim.tv_sec * 1000000007ULL;
	h = (h ^ (unsigned long long)sb.st_mtim.tv_nsec) * 1099511628211ULL;
	h = (h ^ (unsigned long long)sb.st_size) * 1099511628211ULL;
	h = (h ^ (unsigned long long)sb.st_ino) * 1099511628211ULL;
	return (long long)(h | 1);
}

static int cmp_found_desc(const void *a, const void *b)
{
	long x = ((const found *)a)->version, y = ((const found *)b)->version;
	return x < y ? 1 : x > y ? -1 : 0;
}

/* Why a numbered folder without model.h5 is skipped. */
static const char *foreign_reason(const char *dir)
{
	char p[8300];
	snprintf(p, sizeof(p), "%s/saved_model.pb", dir);
	if (wf_exists(p))
		return "it holds a TensorFlow SavedModel (saved_model.pb); weft serves model.h5 "
		       "files made by weft export (or Keras .h5 imported with weft)";
	DIR *d = opendir(dir);
	if (d) {
		struct dirent *e;
		while ((e = readdir(d))) {
			size_t n = strlen(e->d_name);
			if (n > 6 && !strcmp(e->d_name + n - 6, ".keras")) {
				closedir(d);
				return "it holds a Keras v3 .keras file; weft serves model.h5 "
				       "files "
				       "(save as .h5 and import, or use weft export)";
			}
			if (n > 5 && !strcmp(e->d_name + n - 5, ".onnx")) {
				closedir(d);
				return "it holds an ONNX model; weft serves model.h5 files";
			}
		}
		closedir(d);
	}
	return "it has no model.h5";
}

/* Log `msg` for model m unless it was the last thing logged for it. */
static void note_once(wf_serve_repo *r, model_ent *m, const char *msg)
{
	pthread_mutex_lock(&r->mu);
	int same = !strcmp(m->note, msg);
	if (!same)
		snprintf(m->note, sizeof(m->note), "%s", msg);
	pthread_mutex_unlock(&r->mu);
	if (!same)
		wf_warn("serve: %s", msg);
}

/* Numbered versions under base, highest first (malloc'd). */
static found *scan_base(wf_serve_repo *r, model_ent *m, const char *base, int *n)
{
	*n = 0;
	DIR *d = opendir(base);
	char msg[9000];
	if (!d) {
		snprintf(msg, sizeof(msg), "model %s: base path %s: %s", m->cfg.name, base,
			 strerror(errno));
		note_once(r, m, msg);
		return NULL;
	}
	found *f = NULL;
	int cap = 0, entries = 0;
	struct dirent *e;
	char path[8300];
	while ((e = readdir(d))) {
		const char *s = e->d_name;
		size_t len = strlen(s);
		if (s[0] == '.')
			continue;
		entries++;
		if (len == 0 || len > 15 || strspn(s, "0123456789") != len)
			continue;
		long ver = strtol(s, NULL, 10);
		if (ver <= 0)
			continue;
		snprintf(path, sizeof(path), "%s/%s/model.h5", base, s);
		long long st = file_stamp(path);
		if (!st) {
			char dir[4200];
			snprintf(dir, sizeof(dir), "%s/%s", base, s);
			struct stat sb;
			if (stat(dir, &sb) == 0 && S_ISDIR(sb.st_mode)) {
				snprintf(msg, sizeof(msg),
					 "model %s: skipping version %ld in %s: %s", m->cfg.name,
					 ver, dir, foreign_reason(dir));
				note_once(r, m, msg);
			}
			continue;
		}
		if (*n == cap) {
			cap = cap ? cap * 2 : 8;
			found *p = realloc(f, (size_t)cap * sizeof(*p));
			if (!p)
				break;
			f = p;
		}
		f[*n].version = ver;
		f[(*n)++].stamp = st;
	}
	closedir(d);
	if (*n == 0 && entries > 0) {
		snprintf(msg, sizeof(msg),
			 "model %s: no versions of servable %s found under base path %s. Did you "
			 "forget to name your leaf directory as a number (eg. '/1/')?",
			 m->cfg.name, m->cfg.name, base);
		note_once(r, m, msg);
	}
	if (*n > 1)
		qsort(f, (size_t)*n, sizeof(*f), cmp_found_desc);
	return f;
}

/* ---- loading and unloading ------------------------------------------------ */

/* The class labels of label_filename in the model's folder, one a line, as
 * the model's own (v->meta): exactly one for each class. */
static int read_label_file(wf_serve_version *v, const wf_serve_model_config *cfg, wf_err *err)
{
	char p[8400], *text = NULL;
	size_t len = 0;
	snprintf(p, sizeof(p), "%s/%s", cfg->base_path, cfg->label_filename);
	if (wf_read_file(p, &text, &len) != 0)
		return wf_errf(err, WF_EINVAL, "config label_filename: cannot read %s", p);
	int k = v->io.classes, n = len && text[len - 1] != '\n'; /* a last line without \n */
	for (size_t i = 0; i < len; i++)
		n += text[i] == '\n';
	if (n != k) {
		free(text);
		return wf_errf(err, WF_EINVAL,
			       "config label_filename: %s has %d lines; the model has %d classes",
			       p, n, k);
	}
	char **names = calloc((size_t)k, sizeof(*names)), *line = text;
	for (int i = 0; names && i < k; i++) {
		char *end = memchr(line, '\n', (size_t)(text + len - line));
		size_t l = (size_t)((end ? end : text + len) - line);
		if (l && line[l - 1] == '\r')
			l--;
		if (!(names[i] = strndup(line, l))) {
			while (i--)
				free(names[i]);
			free(names);
			names = NULL;
		}
		line = end ? end + 1 : text + len;
	}
	free(text);
	if (!names)
		return wf_errf(err, WF_ENOMEM, "out of memory");
	for (int i = 0; i < v->meta.nclasses && v->meta.class_names; i++)
		free(v->meta.class_names[i]);
	free(v->meta.class_names);
	v->meta.class_names = names;
	v->meta.nclasses = k;
	return 0;
}

/* What the configuration says of a loaded version that must hold: its input
 * name, its labels file. */
static int apply_config(wf_serve_version *v, const wf_serve_model_config *cfg, wf_err *err)
{
	if (cfg->input_name[0] && !wf_serve_input_name_ok(&v->io, cfg->input_name))
		return wf_errf(err, WF_EINVAL,
			       "config input name \"%s\" is not the model's input (\"%s\", or "
			       "\"%s\")",
			       cfg->input_name, wf_serve_input_name(&v->io), WF_SERVE_INPUT_NAME);
	return cfg->label_filename[0] ? read_label_file(v, cfg, err) : 0;
}

/* One version load: where from, under which options and configuration. */
typedef struct load_job {
	wf_serve_repo *r;
	wf_serve_version **v;
	const char *path;
	long version;
	const wf_serve_repo_opts *o;
	const wf_serve_model_config *cfg;
	const wf_serve_version *like; /* a served version of the model: its timings (NULL) */
	wf_err *err;
	int background; /* something is served: the load yields to it */
	int rc;
} load_job;

/* Load a version and check it against its configuration; a failure is
 * tried again o.load_retries times, o.load_retry_interval_us apart, unless
 * the process is stopping (common/cancel.h). */
static int load_checked(const load_job *j)
{
	wf_serve_repo *r = j->r;
	for (int attempt = 0;; attempt++) {
		int rc = wf_serve_version_load(j->v, j->path, j->version, j->o, j->like, j->err);
		if (!rc && (rc = apply_config(*j->v, j->cfg, j->err)) != 0) {
			wf_serve_version_release(*j->v);
			*j->v = NULL;
		}
		if (!rc || attempt >= r->o.load_retries || wf_cancel_requested())
			return rc;
		wf_warn("serve: model %s version %ld failed to load (%s); trying again in %.3g s "
			"(%d of --max_num_load_retries %d)",
			j->cfg->name, j->version, j->err->msg, r->o.load_retry_interval_us / 1e6,
			attempt + 1, r->o.load_retries);
		double until = wf_now() + r->o.load_retry_interval_us / 1e6;
		while (wf_now() < until && !wf_cancel_requested())
			usleep(10000);
		memset(j->err, 0, sizeof(*j->err));
	}
}

/* One load on a thread of its own, so that its OpenMP team is its own too
 * (started by it, inheriting its priority, ended with it). */
static void *load_thread(void *arg)
{
	load_job *j = arg;
	if (j->background)
		wf_cpus_background_thread("repo-load");
	else
		pthread_setname_np(pthread_self(), "repo-load");
	j->rc = load_checked(j);
	return NULL;
}

/* 1 when some version of some model is being served (mu held). */
static int serving(const wf_serve_repo *r)
{
	for (int i = 0; i < r->nmodels; i++)
		for (int j = 0; j < r->models[i]->nvs; j++)
			if (r->models[i]->vs[j].state == VS_AVAILABLE)
				return 1;
	return 0;
}

/* The newest served version of m, with a reference (mu held); NULL: none. */
static wf_serve_version *served_version(model_ent *m)
{
	wf_serve_version *v = NULL;
	for (int i = 0; i < m->nvs; i++)
		if (m->vs[i].state == VS_AVAILABLE && (!v || m->vs[i].version > v->version))
			v = m->vs[i].v;
	if (v)
		atomic_fetch_add(&v->refs, 1);
	return v;
}

/* Run j as load_checked does; while other versions are served, at the
 * lowest CPU priority (wf_cpus_background_thread), so that the requests
 * they answer keep the cores and the load takes what they leave, and with
 * the batch plans' timings of a served version of the same model when it
 * runs the same graph (timed now, they would time those requests too). */
static int load_beside(load_job *j, model_ent *m)
{
	pthread_mutex_lock(&j->r->mu);
	j->background = serving(j->r);
	wf_serve_version *like = served_version(m);
	pthread_mutex_unlock(&j->r->mu);
	j->like = like;
	pthread_t t;
	if (pthread_create(&t, NULL, load_thread, j) != 0)
		j->rc = load_checked(j);
	else
		pthread_join(t, NULL);
	wf_serve_version_release(like);
	return j->rc;
}

/* Load version f of m (load_mu held, mu not). Returns 1 when available. */
static int load_version(wf_serve_repo *r, model_ent *m, const found *f)
{
	char path[8300];
	snprintf(path, sizeof(path), "%s/%ld/model.h5", m->cfg.base_path, f->version);
	pthread_mutex_lock(&r->mu);
	vrec *x = get_vrec(m, f->version);
	if (!x) {
		pthread_mutex_unlock(&r->mu);
		return 0;
	}
	int reload = x->state == VS_AVAILABLE; /* stale: it serves until the new one is in */
	if (!reload)
		x->state = VS_LOADING;
	x->failed = 0;
	x->error[0] = 0;
	wf_serve_model_config cfg = m->cfg;
	pthread_mutex_unlock(&r->mu);
	wf_serve_repo_opts o = r->o;
	o.name = cfg.name;
	if (cfg.max_batch >= 0) /* 0: unbatched, one sample per forward */
		o.max_batch = WF_MAX(1, WF_MIN(cfg.max_batch, r->o.max_batch));
	if (cfg.threads > 0)
		o.threads = cfg.threads;
	o.memory_mb = cfg.memory_mb;
	wf_info("serve: loading model %s version %ld from %s", cfg.name, f->version, path);
	wf_serve_version *v = NULL;
	wf_err err = {0};
	load_job j = {.r = r,
		      .v = &v,
		      .path = path,
		      .version = f->version,
		      .o = &o,
		      .cfg = &cfg,
		      .err = &err};
	int rc = load_beside(&j, m);
	pthread_mutex_lock(&r->mu);
	x = get_vrec(m, f->version); /* m->vs may have moved */
	x->stale = 0;
	if (rc && reload) { /* the old one goes on serving */
		x->failed = 1;
		x->stamp = f->stamp;
		snprintf(x->error, sizeof(x->error), "%s", err.msg);
		r->load_failures++;
	} else if (rc) {
		x->state = VS_END;
		x->failed = 1;
		x->stamp = f->stamp;
		snprintf(x->error, sizeof(x->error), "%s", err.msg);
		r->load_failures++;
	} else {
		if (cfg.instances > 0 && cfg.instances < v->nslots)
			v->max_running = cfg.instances; /* its thread budget */
		v->batch_delay_us = cfg.batch_delay_us;
		v->max_request = cfg.max_batch >= 0 ? o.max_batch : 0;
		v->io.unbatched = cfg.max_batch == 0;
		if (reload)
			wf_serve_version_release(x->v); /* freed after its last request */
		x->state = VS_AVAILABLE;
		x->v = v;
		r->swaps++;
	}
	pthread_mutex_unlock(&r->mu);
	if (rc)
		wf_error("serve: model %s version %ld failed to load (skipped; retried when the "
			 "file changes): %s",
			 cfg.name, f->version, err.msg);
	else {
		char plan[512], fold[96] = "";
		wf_batchplan_describe(v->slots[0].plan, plan, sizeof(plan));
		if (v->folded)
			snprintf(fold, sizeof(fold),
				 "; %d batch norm/dropout layers folded as weft "
				 "export does",
				 v->folded);
		wf_info("serve: model %s version %ld is available (loaded and warmed in %.2fs; "
			"%.1f MiB of weights and executors; %s; forward %s%s%s)",
			cfg.name, f->version, v->load_seconds, v->memory_bytes / 1048576.0,
			v->precision, plan,
			v->timed ? "" : ", times of the served version of the same graph", fold);
	}
	return rc == 0;
}

/* Drop the repository's reference to version x (mu held); the version is
 * freed when its last request ends. */
void unload_vrec(model_ent *m, vrec *x)
{
	if (x->state != VS_AVAILABLE)
		return;
	wf_info("serve: model %s version %ld unloaded (freed after its last request)", m->cfg.name,
		x->version);
	wf_serve_version_release(x->v);
	x->v = NULL;
	x->state = VS_END;
}

static int listed(const wf_serve_model_config *c, long version)
{
	for (int i = 0; i < c->nspecific; i++)
		if (c->specific[i] == version)
			return 1;
	return 0;
}

/* Bring model m's loaded versions in line with its policy and files
 * (load_mu held). New versions load before old ones go, so a model that
 * served keeps serving. */
void sync_model(wf_serve_repo *r, model_ent *m, int unload)
{
	pthread_mutex_lock(&r->mu);
	wf_serve_model_config cfg = m->cfg;
	int active = m->active;
	pthread_mutex_unlock(&r->mu);
	int n = 0;
	found *f = active ? scan_base(r, m, cfg.base_path, &n) : NULL;
	long *keep = calloc((size_t)n + 1, sizeof(long));
	int nkeep = 0;
	for (int i = 0; keep && i < n; i++) {
		if (cfg.policy == WF_SERVE_POLICY_LATEST && nkeep >= cfg.num_versions)
			break;
		if (cfg.policy == WF_SERVE_POLICY_SPECIFIC && !listed(&cfg, f[i].version))
			continue;
		pthread_mutex_lock(&r->mu);
		vrec *x = find_vrec(m, f[i].version);
		int avail = x && x->state == VS_AVAILABLE && !x->stale;
		int failed_same = x && x->failed && x->stamp == f[i].stamp;
		int stale = x && x->state == VS_AVAILABLE && x->stale;
		pthread_mutex_unlock(&r->mu);
		/* a stale version keeps serving while it loads again */
		if (avail || (!failed_same && load_version(r, m, &f[i])) || stale)
			keep[nkeep++] = f[i].version;
	}
	pthread_mutex_lock(&r->mu);
	m->kept = nkeep;
	for (int i = 0; keep && unload && i < m->nvs; i++) {
		int kept = 0;
		for (int j = 0; j < nkeep; j++)
			kept |= keep[j] == m->vs[i].version;
		if (!kept)
			unload_vrec(m, &m->vs[i]);
	}
	pthread_mutex_unlock(&r->mu);
	free(keep);
	free(f);
}
