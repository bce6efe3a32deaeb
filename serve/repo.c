/* repo.c: models and their versions: discovery, version policies, labels,
 * loading, warm-up, unloading and reference counts; the config file and
 * repository folder readers; Triton's statistics counters. */
#include "serve/repo.h"

#include "common/log.h"
#include "common/util.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

/* ---- one version ------------------------------------------------------ */

static void slot_free(wf_serve_slot *s)
{
	for (int b = 0; b < s->nbuckets; b++)
		wf_exec_free(s->ex[b]);
	free(s->in);
	free(s->out);
	wf_backend_free(s->be);
}

static void version_free(wf_serve_version *v)
{
	if (!v)
		return;
	for (int i = 0; i < v->nslots; i++)
		slot_free(&v->slots[i]);
	free(v->slots);
	free(v->stats.batch_count);
	free(v->stats.batch_ns);
	wf_model_free(v->model);
	wf_model_meta_free(&v->meta);
	free(v);
}

/* The GPU settings weft-serve takes from the environment, as weft does
 * (README, environment variables): precision, device (the launcher's local
 * rank first), cuDNN workspace. */
static void backend_opts_env(wf_backend_opts *bo)
{
	static const char *const local[] = {"OMPI_COMM_WORLD_LOCAL_RANK",
					    "MV2_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID",
					    "LOCAL_RANK", "WEFT_CUDA_DEVICE"};
	const char *v = getenv("WEFT_PRECISION");
	snprintf(bo->precision, sizeof(bo->precision), "%s", v ? v : "");
	for (size_t i = 0; i < sizeof(local) / sizeof(local[0]); i++)
		if ((v = getenv(local[i])) && *v) {
			bo->device_index = atoi(v);
			break;
		}
	if ((v = getenv("WEFT_CUDNN_WORKSPACE_MB")) && *v)
		bo->workspace_mb = atol(v);
}

/* Backend, executors at each bucket size, staging buffers; one forward per
 * executor so plans are built before the first request. */
static int slot_init(wf_serve_version *v, wf_serve_slot *s, const wf_serve_repo_opts *o,
		     wf_err *err)
{
	size_t per = (size_t)v->io.h * v->io.w * v->io.c;
	wf_backend_opts bo = {.threads = o->threads};
	backend_opts_env(&bo);
	int rc = wf_backend_create_opts(&s->be, o->device, &bo, err);
	if (rc)
		return rc;
	const char *prec = "fp32", *want = o->precision ? o->precision : "fp32";
	if ((rc = wf_backend_set_precision(s->be, want, &prec, err)) != 0)
		return wf_err_wrap(err, "--precision"), rc;
	if (strcmp(prec, want) && strcmp(want, "auto"))
		wf_warn("--precision %s: the %s device has no native bf16: serving in %s", want,
			s->be->name, prec);
	for (int b = 1; s->nbuckets < WF_SERVE_MAX_BUCKETS; b *= 2) {
		int size = b < v->max_batch ? b : v->max_batch;
		s->bucket[s->nbuckets++] = size;
		if (size == v->max_batch)
			break;
	}
	s->in = calloc((size_t)v->max_batch * per, sizeof(float));
	s->out = calloc((size_t)v->max_batch * v->io.classes, sizeof(float));
	if (!s->in || !s->out)
		return wf_errf(err, WF_ENOMEM, "out of memory for batch buffers");
	for (int b = 0; b < s->nbuckets; b++) {
		rc = wf_exec_create(&s->ex[b], v->model, s->be, s->bucket[b], 0, err);
		if (rc)
			return rc;
		rc = wf_exec_forward(s->ex[b], s->in, s->bucket[b], 0, 0);
		if (rc == 0)
			rc = wf_exec_logits(s->ex[b], s->out);
		if (rc)
			return wf_errf(err, rc, "warm-up forward at batch %d: %s", s->bucket[b],
				       wf_exec_error(s->ex[b]));
	}
	return 0;
}

/* Fill io from a loaded model and its metadata (meta may be NULL: identity). */
static void io_from_model(wf_image_io *io, const wf_model *m, const wf_model_meta *meta)
{
	memset(io, 0, sizeof(*io));
	io->h = m->in_h;
	io->w = m->in_w;
	io->c = m->in_c;
	io->classes = m->classes;
	io->scale = 1.0f;
	for (int i = 0; i < 4; i++) {
		io->mean[i] = 0.0f;
		io->std[i] = 1.0f;
	}
	if (!meta)
		return;
	io->scale = meta->scale;
	for (int i = 0; i < 4; i++) {
		io->mean[i] = meta->mean[i];
		io->std[i] = meta->std[i] != 0.0f ? meta->std[i] : 1.0f;
	}
	io->bgr = strncmp(meta->channel_order, "BGR", 3) == 0;
}

int wf_serve_version_load(wf_serve_version **out, const char *path, long version,
			  const wf_serve_repo_opts *o, wf_err *err)
{
	double t0 = wf_now();
	wf_serve_version *v = calloc(1, sizeof(*v));
	if (!v)
		return wf_errf(err, WF_ENOMEM, "out of memory");
	wf_model_meta_init(&v->meta);
	snprintf(v->name, sizeof(v->name), "%s", o->name ? o->name : "");
	int rc = wf_model_load(&v->model, &v->meta, path, err);
	if (rc)
		goto fail;
	v->version = version;
	v->max_batch = o->max_batch > 0 ? o->max_batch : 1;
	io_from_model(&v->io, v->model, &v->meta);
	v->io.max_pixels = o->max_image_pixels;
	v->nslots = o->nslots > 0 ? o->nslots : 1;
	v->slots = calloc((size_t)v->nslots, sizeof(*v->slots));
	v->stats.nbatch = v->max_batch + 1;
	v->stats.batch_count = calloc((size_t)v->stats.nbatch, sizeof(atomic_ulong));
	v->stats.batch_ns = calloc((size_t)v->stats.nbatch, sizeof(atomic_ulong));
	if (!v->slots || !v->stats.batch_count || !v->stats.batch_ns) {
		rc = wf_errf(err, WF_ENOMEM, "out of memory");
		goto fail;
	}
	for (int i = 0; i < v->nslots; i++) {
		rc = slot_init(v, &v->slots[i], o, err);
		if (rc)
			goto fail;
	}
	atomic_init(&v->refs, 1);
	v->load_seconds = wf_now() - t0;
	*out = v;
	return 0;
fail:
	version_free(v);
	return wf_err_wrap(err, "loading %s", path);
}

void wf_serve_version_release(wf_serve_version *v)
{
	if (v && atomic_fetch_sub(&v->refs, 1) == 1) {
		wf_info("serve: freeing model %s version %ld", v->name, v->version);
		version_free(v);
	}
}

/* ---- statistics ---------------------------------------------------------- */

static unsigned long ns(double s)
{
	return s > 0 ? (unsigned long)(s * 1e9) : 0;
}

void wf_serve_stats_batch(wf_serve_version *v, int size, double seconds)
{
	if (!v)
		return;
	atomic_fetch_add(&v->stats.executions, 1);
	atomic_fetch_add(&v->stats.inferences, (unsigned long)size);
	if (size > 0 && size < v->stats.nbatch) {
		atomic_fetch_add(&v->stats.batch_count[size], 1);
		atomic_fetch_add(&v->stats.batch_ns[size], ns(seconds));
	}
}

void wf_serve_stats_request(wf_serve_version *v, int n, double queue_s, double infer_s)
{
	(void)n;
	if (!v)
		return;
	atomic_fetch_add(&v->stats.queue_ns, ns(queue_s));
	atomic_fetch_add(&v->stats.infer_ns, ns(infer_s));
}

void wf_serve_stats_done(wf_serve_version *v, int ok, double seconds)
{
	if (!v)
		return;
	atomic_fetch_add(ok ? &v->stats.success : &v->stats.fail, 1);
	atomic_fetch_add(ok ? &v->stats.success_ns : &v->stats.fail_ns, ns(seconds));
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	atomic_store(&v->stats.last_ms, (unsigned long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000);
}

/* ---- the repository ---------------------------------------------------- */

enum { VS_LOADING, VS_AVAILABLE, VS_END };
static const char *const vs_names[] = {"LOADING", "AVAILABLE", "END"};

/* A version the repository knows of. */
typedef struct vrec {
	long version;
	int state;
	wf_serve_version *v; /* AVAILABLE: the repository's reference */
	char error[1024];    /* END after a failed load: why */
	int failed;
	long long stamp; /* mtime and size of the file that failed */
} vrec;

typedef struct model_ent {
	wf_serve_model_config cfg;
	int active; /* to be served */
	vrec *vs;
	int nvs, cap;
	char note[9000]; /* the last "skipped" log line (logged once) */
} model_ent;

struct wf_serve_repo {
	wf_serve_repo_opts o;
	char *device, *config_file, *repository;
	pthread_mutex_t mu;	 /* models, versions, states */
	pthread_mutex_t load_mu; /* one loader at a time: the poller or the load API */
	pthread_cond_t wake;
	pthread_t poller;
	int poller_started;
	int stop;
	model_ent **models;
	int nmodels, cap;
	long swaps;
	long long config_stamp; /* file_stamp of the config file last read */
};

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

/* ---- scanning a base path ------------------------------------------------ */

typedef struct found {
	long version;
	long long stamp; /* model.h5's mtime and size; 0: no model.h5 */
} found;

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
	x->state = VS_LOADING;
	x->failed = 0;
	x->error[0] = 0;
	wf_serve_model_config cfg = m->cfg;
	pthread_mutex_unlock(&r->mu);
	wf_serve_repo_opts o = r->o;
	o.name = cfg.name;
	if (cfg.max_batch > 0)
		o.max_batch = WF_MIN(cfg.max_batch, r->o.max_batch);
	if (cfg.threads > 0)
		o.threads = cfg.threads;
	wf_info("serve: loading model %s version %ld from %s", cfg.name, f->version, path);
	wf_serve_version *v = NULL;
	wf_err err = {0};
	int rc = wf_serve_version_load(&v, path, f->version, &o, &err);
	pthread_mutex_lock(&r->mu);
	x = get_vrec(m, f->version); /* m->vs may have moved */
	if (rc) {
		x->state = VS_END;
		x->failed = 1;
		x->stamp = f->stamp;
		snprintf(x->error, sizeof(x->error), "%s", err.msg);
	} else {
		if (cfg.instances > 0 && cfg.instances < v->nslots)
			v->max_running = cfg.instances; /* its thread budget */
		x->state = VS_AVAILABLE;
		x->v = v;
		r->swaps++;
	}
	pthread_mutex_unlock(&r->mu);
	if (rc)
		wf_error("serve: model %s version %ld failed to load (skipped; retried when the "
			 "file changes): %s",
			 cfg.name, f->version, err.msg);
	else
		wf_info("serve: model %s version %ld is available (loaded and warmed in %.2fs)",
			cfg.name, f->version, v->load_seconds);
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
void sync_model(wf_serve_repo *r, model_ent *m)
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
		int avail = x && x->state == VS_AVAILABLE;
		int failed_same = x && x->failed && x->stamp == f[i].stamp;
		pthread_mutex_unlock(&r->mu);
		if (avail || (!failed_same && load_version(r, m, &f[i])))
			keep[nkeep++] = f[i].version;
	}
	pthread_mutex_lock(&r->mu);
	for (int i = 0; keep && i < m->nvs; i++) {
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

/* ---- sources of models ------------------------------------------------------- */

/* Re-read the model config file; on an error keep the models as they are. */
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
	r->config_stamp = stamp;
	if (!first)
		wf_info("serve: --model_config_file %s changed: %d models", r->config_file, n);
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

static void sync_all(wf_serve_repo *r)
{
	pthread_mutex_lock(&r->load_mu);
	pthread_mutex_lock(&r->mu);
	int n = r->nmodels;
	pthread_mutex_unlock(&r->mu);
	for (int i = 0; i < n; i++) {
		pthread_mutex_lock(&r->mu);
		model_ent *m = r->models[i];
		pthread_mutex_unlock(&r->mu);
		sync_model(r, m);
	}
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
	if (out->max_batch <= 0 || out->max_batch > r->o.max_batch)
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

/* ---- model control ------------------------------------------------------------- */

static int control_allowed(wf_serve_repo *r, wf_err *err)
{
	if (r->o.kind == WF_SERVE_REPOSITORY && r->o.control == WF_SERVE_CONTROL_EXPLICIT)
		return 0;
	return wf_errf(err, WF_ENOTSUP,
		       "explicit model load / unload is not allowed: start weft-serve with "
		       "--model_repository DIR --model_control_mode explicit");
}

int wf_serve_repo_load(wf_serve_repo *r, const char *name, wf_err *err)
{
	int rc = control_allowed(r, err);
	if (rc)
		return rc;
	wf_serve_model_config c;
	rc = repo_model_config(r, name, &c, err);
	if (rc)
		return wf_err_wrap(err, "failed to load '%s'", name);
	pthread_mutex_lock(&r->load_mu);
	pthread_mutex_lock(&r->mu);
	model_ent *m = upsert_model(r, &c);
	if (m) {
		m->active = 1;
		for (int i = 0; i < m->nvs; i++)
			m->vs[i].failed = 0; /* a load request retries failed versions */
	}
	pthread_mutex_unlock(&r->mu);
	if (!m) {
		pthread_mutex_unlock(&r->load_mu);
		return wf_errf(err, WF_ENOMEM, "out of memory");
	}
	sync_model(r, m);
	pthread_mutex_unlock(&r->load_mu);
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
	pthread_mutex_lock(&r->mu);
	for (int i = 0; i < r->nmodels; i++)
		r->models[i]->active = 0;
	for (int i = 0; i < n; i++) {
		model_ent *m = upsert_model(r, &cfg[i]);
		if (m)
			m->active = 1;
	}
	pthread_mutex_unlock(&r->mu);
	sync_all(r);
	char missing[900] = "";
	for (int i = 0; i < n; i++) {
		wf_serve_find why;
		wf_err e2 = {0};
		wf_serve_version *v = wf_serve_repo_find(r, cfg[i].name, 0, NULL, &why, &e2);
		if (v)
			wf_serve_version_release(v);
		else
			snprintf(missing + strlen(missing), sizeof(missing) - strlen(missing),
				 "%s%s", missing[0] ? ", " : "", cfg[i].name);
	}
	if (missing[0])
		return wf_errf(err, WF_EINVAL, "no version of %s could be loaded", missing);
	return 0;
}
