/* repo.c: version discovery, loading, warm-up, swapping and reference counts. */
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

struct wf_serve_repo {
	wf_serve_repo_opts o;
	char *name, *base, *device;
	pthread_mutex_t mu;
	pthread_cond_t wake;
	pthread_t poller;
	int poller_started;
	int stop;
	wf_serve_version *current;
	wf_serve_repo_status st;
};

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
	int rc = wf_model_load(&v->model, &v->meta, path, err);
	if (rc)
		goto fail;
	v->version = version;
	v->max_batch = o->max_batch > 0 ? o->max_batch : 1;
	io_from_model(&v->io, v->model, &v->meta);
	v->io.max_pixels = o->max_image_pixels;
	v->nslots = o->nslots > 0 ? o->nslots : 1;
	v->slots = calloc((size_t)v->nslots, sizeof(*v->slots));
	if (!v->slots) {
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
		wf_info("serve: freeing model version %ld", v->version);
		version_free(v);
	}
}

/* ---- the repository ---------------------------------------------------- */

/* Highest numeric subdirectory of base holding model.h5; 0 when none. */
static long scan_versions(const char *base)
{
	DIR *d = opendir(base);
	if (!d)
		return 0;
	long best = 0;
	struct dirent *e;
	char path[4096];
	while ((e = readdir(d))) {
		const char *s = e->d_name;
		size_t n = strlen(s);
		if (n == 0 || n > 15 || strspn(s, "0123456789") != n)
			continue;
		long ver = strtol(s, NULL, 10);
		snprintf(path, sizeof(path), "%s/%s/model.h5", base, s);
		if (ver > best && wf_exists(path))
			best = ver;
	}
	closedir(d);
	return best;
}

static void swap_in(wf_serve_repo *r, wf_serve_version *v)
{
	pthread_mutex_lock(&r->mu);
	wf_serve_version *old = r->current;
	r->current = v;
	r->st.version = v->version;
	r->st.loading_version = 0;
	r->st.swaps++;
	pthread_mutex_unlock(&r->mu);
	if (old)
		wf_info("serve: model %s version %ld replaces version %ld (loaded and warmed in "
			"%.2fs)",
			r->name, v->version, old->version, v->load_seconds);
	else
		wf_info("serve: model %s version %ld is available (loaded and warmed in %.2fs)",
			r->name, v->version, v->load_seconds);
	wf_serve_version_release(old);
}

static void poll_once(wf_serve_repo *r)
{
	long target = scan_versions(r->base);
	pthread_mutex_lock(&r->mu);
	long cur = r->st.version, failed = r->st.failed_version;
	pthread_mutex_unlock(&r->mu);
	if (target == 0 || target == cur || target == failed)
		return;
	char path[4096];
	snprintf(path, sizeof(path), "%s/%ld/model.h5", r->base, target);
	pthread_mutex_lock(&r->mu);
	r->st.loading_version = target;
	pthread_mutex_unlock(&r->mu);
	wf_info("serve: loading model %s version %ld from %s", r->name, target, path);
	wf_serve_version *v = NULL;
	wf_err err = {0};
	int rc = wf_serve_version_load(&v, path, target, &r->o, &err);
	if (rc) {
		wf_error("serve: model %s version %ld failed to load: %s", r->name, target,
			 err.msg);
		pthread_mutex_lock(&r->mu);
		r->st.loading_version = 0;
		r->st.failed_version = target;
		snprintf(r->st.error, sizeof(r->st.error), "%s", err.msg);
		pthread_mutex_unlock(&r->mu);
		return;
	}
	swap_in(r, v);
}

static void *poller_main(void *arg)
{
	wf_serve_repo *r = arg;
	for (;;) {
		poll_once(r);
		pthread_mutex_lock(&r->mu);
		if (!r->stop && r->o.poll_seconds > 0) {
			struct timespec ts;
			clock_gettime(CLOCK_REALTIME, &ts);
			double t = ts.tv_sec + ts.tv_nsec * 1e-9 + r->o.poll_seconds;
			ts.tv_sec = (time_t)t;
			ts.tv_nsec = (long)((t - (double)ts.tv_sec) * 1e9);
			pthread_cond_timedwait(&r->wake, &r->mu, &ts);
		}
		int stop = r->stop || r->o.poll_seconds <= 0;
		pthread_mutex_unlock(&r->mu);
		if (stop)
			break;
	}
	return NULL;
}

int wf_serve_repo_create(wf_serve_repo **out, const wf_serve_repo_opts *o, wf_err *err)
{
	struct stat sb;
	if (stat(o->base_path, &sb) != 0)
		return wf_errf(err, WF_EINVAL, "--model_base_path %s: %s", o->base_path,
			       strerror(errno));
	if (!S_ISDIR(sb.st_mode))
		return wf_errf(err, WF_EINVAL, "--model_base_path %s: not a directory",
			       o->base_path);
	wf_serve_repo *r = calloc(1, sizeof(*r));
	if (!r)
		return wf_errf(err, WF_ENOMEM, "out of memory");
	r->o = *o;
	r->name = strdup(o->name);
	r->base = strdup(o->base_path);
	r->device = strdup(o->device);
	r->o.name = r->name;
	r->o.base_path = r->base;
	r->o.device = r->device;
	pthread_mutex_init(&r->mu, NULL);
	pthread_cond_init(&r->wake, NULL);
	if (!r->name || !r->base || !r->device) {
		wf_serve_repo_free(r);
		return wf_errf(err, WF_ENOMEM, "out of memory");
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
	wf_serve_version_release(r->current);
	pthread_cond_destroy(&r->wake);
	pthread_mutex_destroy(&r->mu);
	free(r->name);
	free(r->base);
	free(r->device);
	free(r);
}

wf_serve_version *wf_serve_repo_acquire(wf_serve_repo *r, long version)
{
	wf_serve_version *v = NULL;
	pthread_mutex_lock(&r->mu);
	if (r->current && (version == 0 || r->current->version == version)) {
		v = r->current;
		atomic_fetch_add(&v->refs, 1);
	}
	pthread_mutex_unlock(&r->mu);
	return v;
}

void wf_serve_repo_get_status(wf_serve_repo *r, wf_serve_repo_status *st)
{
	pthread_mutex_lock(&r->mu);
	*st = r->st;
	pthread_mutex_unlock(&r->mu);
}
