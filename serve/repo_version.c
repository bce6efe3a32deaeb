/* repo_version.c: one version of a model: loading (backend, warm-up), reference
 * counts and release; Triton's statistics counters. */
#include "serve/repo_internal.h"

#include "model/calib.h"
#include "model/fold.h"

/* ---- one version ------------------------------------------------------ */

static void slot_free(wf_serve_slot *s)
{
	wf_batchplan_free(s->plan);
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

/* 1 when like runs v's graph as v will on be (like's batch plans time v's). */
static int runs_alike(const wf_serve_version *like, const wf_serve_version *v, const wf_backend *be)
{
	return like && like->nslots > 0 && like->max_batch == v->max_batch &&
	       like->threads == v->threads && !strcmp(like->precision, v->precision) &&
	       !strcmp(like->slots[0].be->name, be->name) &&
	       !strcmp(like->model->graph_json, v->model->graph_json);
}

/* Backend and batch plan (executors at each batch size, warmed and timed, so
 * plans are built before the first request; timed as like's when it runs
 * alike), in at most max_bytes (0: any). */
static int slot_init(wf_serve_version *v, wf_serve_slot *s, const wf_serve_repo_opts *o,
		     const wf_serve_version *like, size_t max_bytes, wf_err *err)
{
	wf_backend_opts bo = o->backend;
	bo.threads = o->threads;
	int rc = wf_backend_create_opts(&s->be, o->device, &bo, err);
	if (rc)
		return rc;
	/* --precision, else the model file's (weft export --precision), else fp32 */
	const char *prec = "fp32", *want = o->precision		  ? o->precision
					   : v->meta.precision[0] ? v->meta.precision
								  : "fp32";
	const char *why = o->precision ? "--precision" : "the model file's precision";
	if ((rc = wf_backend_set_precision(s->be, want, &prec, err)) != 0)
		return wf_err_wrap(err, "%s", why), rc;
	if (wf_backend_precision_fell_back(want, prec))
		wf_warn("%s %s: the %s device has no native %s: serving in %s", why, want,
			s->be->name, want, prec);
	else if (!strcmp(prec, "int8") && !wf_model_calibrated(v->model)) {
		wf_warn("%s int8: version %ld has no int8 calibration (weft export --quantize "
			"int8): serving in fp32",
			why, v->version);
		prec = "fp32";
	}
	snprintf(v->precision, sizeof(v->precision), "%s", prec);
	if (!runs_alike(like, v, s->be))
		like = NULL;
	v->timed = !like;
	return wf_batchplan_create(&s->plan, v->model, s->be, v->max_batch, max_bytes,
				   like ? like->slots[0].plan : NULL, err);
}

/* Fill io from a loaded model and its metadata (meta may be NULL: identity). */
static void io_from_model(wf_image_io *io, const wf_model *m, const wf_model_meta *meta)
{
	memset(io, 0, sizeof(*io));
	io->h = m->in_h;
	io->w = m->in_w;
	io->c = m->in_c;
	io->classes = m->classes;
	io->input_name = m->layers[0].name; /* as `weft summary` shows it */
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
	io->raw_numbers = meta->pre_in_model;
}

int wf_serve_version_load(wf_serve_version **out, const char *path, long version,
			  const wf_serve_repo_opts *o, const wf_serve_version *like, wf_err *err)
{
	double t0 = wf_now();
	wf_serve_version *v = calloc(1, sizeof(*v));
	if (!v)
		return wf_errf(err, WF_ENOMEM, "out of memory");
	wf_model_meta_init(&v->meta);
	snprintf(v->name, sizeof(v->name), "%s", o->name ? o->name : "");
	/* HDF5 is not thread-safe: one file read at a time; the warm-up below,
	 * most of a load, runs in parallel when several models load at once */
	static pthread_mutex_t file_mu = PTHREAD_MUTEX_INITIALIZER;
	pthread_mutex_lock(&file_mu);
	int rc = wf_model_load(&v->model, &v->meta, path, err);
	pthread_mutex_unlock(&file_mu);
	if (rc)
		goto fail;
	/* a model file that was not exported: fold as `weft export` would (the
	 * forward is the same; a conv followed by relu then runs as one primitive) */
	if ((rc = wf_model_fold_replace(&v->model, err)) < 0)
		goto fail;
	v->folded = rc;
	rc = 0;
	v->version = version;
	v->max_batch = o->max_batch > 0 ? o->max_batch : 1;
	v->threads = o->threads;
	v->batch_delay_us = -1;
	io_from_model(&v->io, v->model, &v->meta);
	v->io.max_pixels = o->max_image_pixels;
	v->io.max_pixels_flag = "--max_image_pixels";
	v->nslots = o->nslots > 0 ? o->nslots : 1;
	v->slots = calloc((size_t)v->nslots, sizeof(*v->slots));
	v->stats.nbatch = v->max_batch + 1;
	v->stats.batch_count = calloc((size_t)v->stats.nbatch, sizeof(atomic_ulong));
	v->stats.batch_ns = calloc((size_t)v->stats.nbatch, sizeof(atomic_ulong));
	if (!v->slots || !v->stats.batch_count || !v->stats.batch_ns) {
		rc = wf_errf(err, WF_ENOMEM, "out of memory");
		goto fail;
	}
	/* the model's memory budget (weft_memory_mb): its weights, then each batch
	 * thread's executors in what is left */
	size_t budget = (size_t)o->memory_mb << 20,
	       used = v->model->nparams * sizeof(float) + v->model->nstate * sizeof(float);
	for (int i = 0; i < v->nslots; i++) {
		if (budget && used >= budget) {
			rc = wf_errf(err, WF_ENOMEM,
				     "its weights and %d batch thread(s) take %.1f MiB", i,
				     used / 1048576.0);
		} else {
			rc = slot_init(v, &v->slots[i], o, like, budget ? budget - used : 0, err);
			if (!rc)
				used += v->slots[i].plan->bytes;
		}
		if (rc && budget && rc == WF_ENOMEM) {
			wf_err_wrap(err,
				    "model %s version %ld does not fit its memory budget "
				    "(weft_memory_mb %ld) with max_batch_size %d and %d batch "
				    "threads: lower them or raise the budget",
				    v->name, version, o->memory_mb, v->max_batch, v->nslots);
			goto fail;
		}
		if (rc)
			goto fail;
	}
	v->memory_bytes = used;
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
