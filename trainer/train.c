#include "trainer/train.h"
#include "trainer/train_priv.h"

#include "common/cancel.h"
#include "common/ckptdir.h"
#include "common/events.h"
#include "common/log.h"
#include "common/progress.h"
#include "common/tfevents.h"
#include "common/util.h"
#include "kernels/ops.h"
#include "model/keras.h"
#include "model/model.h"
#include "model/optim.h"
#include "trainer/checkpoint.h"
#include "trainer/evaluate.h"
#include "trainer/export.h"
#include "trainer/strategy.h"
#include "worker/data.h"
#include "worker/exchange.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Preprocessing recorded in the model file and used by eval and serve:
 * pixel' = (pixel / 255 - 0.5) / 0.25. */
#define PREP_MEAN 0.5f
#define PREP_STD  0.25f

static volatile sig_atomic_t stop_requested;
static volatile sig_atomic_t starting; /* loading data, model and checkpoint */

static void on_signal(int sig)
{
	(void)sig;
	stop_requested = 1;
	if (starting) /* nothing to save yet: stop the loads (common/cancel.h) */
		wf_cancel_request();
}

static void run_free(run *r)
{
	wf_reader_free(r->rd);
	wf_exchange_free(r->x);
	if (r->ex)
		wf_exec_free(r->ex);
	if (r->m)
		wf_model_free(r->m);
	wf_model_meta_free(&r->meta);
	if (r->be)
		wf_backend_free(r->be);
	if (r->eval_ds)
		wf_dataset_close(r->eval_ds);
	if (r->train_ds)
		wf_dataset_close(r->train_ds);
	if (r->metrics)
		fclose(r->metrics);
	wf_tfevents_close(r->tb);
	wf_tfevents_close(r->tb_train);
	wf_tfevents_close(r->tb_val);
	free(r->segs);
	free(r->frozen);
	free(r->initialised);
	if (r->src)
		wf_model_free(r->src);
	wf_model_meta_free(&r->src_meta);
}

/* ---- set-up ------------------------------------------------------------ */

static int open_data(run *r, wf_err *err)
{
	const wf_config *c = r->cfg;
	int rc = wf_dataset_open(&r->train_ds, c->data.train, err);
	if (rc != 0)
		return wf_err_wrap(err, "data.train"), rc;
	const wf_dataset_info *ti = wf_dataset_info_get(r->train_ds);
	if (c->model.classes > 0 && c->model.classes != ti->nclasses)
		return wf_errf(err, WF_EINVAL,
			       "model.classes: is %ld but data.train (%s) has %d classes",
			       c->model.classes, c->data.train, ti->nclasses);
	int h, w, ch;
	if (wf_config_input_shape(c, &h, &w, &ch) == 1 && (h != ti->h || w != ti->w || ch != ti->c))
		return wf_errf(err, WF_EINVAL,
			       "model.input_shape: is [%d, %d, %d] but data.train (%s) holds "
			       "%dx%dx%d images",
			       h, w, ch, c->data.train, ti->h, ti->w, ti->c);
	long global = c->train.batch_size * c->train.accumulate;
	if (ti->count < global)
		return wf_errf(err, WF_EINVAL,
			       "data.train: %s has %ld samples, fewer than one step's batch "
			       "(train.batch_size %ld x train.accumulate %ld)",
			       c->data.train, ti->count, c->train.batch_size, c->train.accumulate);
	if (!c->data.eval[0])
		return 0;
	rc = wf_dataset_open(&r->eval_ds, c->data.eval, err);
	if (rc != 0)
		return wf_err_wrap(err, "data.eval"), rc;
	const wf_dataset_info *ei = wf_dataset_info_get(r->eval_ds);
	rc = wf_check_class_names(ti->classes, ti->nclasses, c->data.train, ei->classes,
				  ei->nclasses, c->data.eval, err);
	if (rc != 0)
		return rc;
	if (ei->h != ti->h || ei->w != ti->w || ei->c != ti->c || ei->nclasses != ti->nclasses)
		return wf_errf(err, WF_EINVAL,
			       "data.eval: %s holds %dx%dx%d images of %d classes, data.train %s "
			       "holds %dx%dx%d images of %d classes",
			       c->data.eval, ei->h, ei->w, ei->c, ei->nclasses, c->data.train,
			       ti->h, ti->w, ti->c, ti->nclasses);
	return 0;
}

/* Kernels as model.kernel_initializer says (auto: as Keras builds the model:
 * glorot_uniform, nasnet's convs he_normal); model.bn_momentum over every
 * batch norm. */
static int init_model(run *r, wf_err *err)
{
	const wf_config *c = r->cfg;
	wf_init conv = WF_INIT_GLOROT_UNIFORM, dense = WF_INIT_GLOROT_UNIFORM;
	if (strcmp(c->model.kernel_initializer, "auto") != 0) {
		if (wf_init_parse(c->model.kernel_initializer, &conv) != 0)
			return wf_errf(err, WF_EINVAL, "model.kernel_initializer: unknown '%s'",
				       c->model.kernel_initializer);
		dense = conv;
	} else if (strncmp(c->model.name, "nasnet", 6) == 0) {
		conv = WF_INIT_HE_NORMAL;
	}
	wf_model_init_params_with(r->m, (uint64_t)c->train.seed, conv, dense);
	if (c->model.bn_momentum > 0)
		for (int i = 0; i < r->m->nlayers; i++)
			if (r->m->layers[i].type == WF_LAYER_BATCHNORM)
				r->m->layers[i].momentum = (float)c->model.bn_momentum;
	return 0;
}

/* Boundaries of the trainable parameters in the flat vector, for clipnorm. */
static int param_segments(run *r, wf_err *err)
{
	const wf_model *m = r->m;
	int n = 0;
	if (!(r->segs = malloc(sizeof(size_t) * ((size_t)m->nviews + 2))))
		return wf_errf(err, WF_ENOMEM, "out of memory");
	for (int i = 0; i < m->nviews; i++)
		if (m->views[i].trainable)
			r->segs[n++] = m->views[i].offset;
	/* ascending (views are in reverse topological order) */
	for (int i = 1; i < n; i++)
		for (int j = i; j > 0 && r->segs[j - 1] > r->segs[j]; j--) {
			size_t t = r->segs[j];
			r->segs[j] = r->segs[j - 1];
			r->segs[j - 1] = t;
		}
	r->segs[n] = m->nparams;
	r->optim.segs = r->segs;
	r->optim.nsegs = n;
	int any = 0;
	for (int i = 0; i < m->nlayers; i++)
		any |= m->layers[i].frozen;
	if (!any)
		return 0;
	if (!(r->frozen = calloc((size_t)n + 1, 1)))
		return wf_errf(err, WF_ENOMEM, "out of memory");
	for (int i = 0; i < m->nlayers; i++) {
		const wf_layer *l = &m->layers[i];
		int views[4] = {l->p_kernel, l->p_bias, l->p_gamma, l->p_beta};
		for (int k = 0; k < 4 && l->frozen; k++)
			for (int s = 0; views[k] >= 0 && s < n; s++)
				if (r->segs[s] == m->views[views[k]].offset)
					r->frozen[s] = 1;
	}
	r->optim.frozen = r->frozen;
	return 0;
}

static int build_model(run *r, wf_err *err)
{
	const wf_config *c = r->cfg;
	const wf_dataset_info *ti = wf_dataset_info_get(r->train_ds);
	wf_backend_opts bo;
	wf_config_backend_opts(c, &bo);
	int rc = wf_backend_create_opts(&r->be, c->train.device, &bo, err);
	if (rc != 0)
		return wf_err_wrap(err, "train.device"), rc;
	const char *prec = "fp32";
	if ((rc = wf_backend_set_precision(r->be, c->train.precision, &prec, err)) != 0)
		return wf_err_wrap(err, "train.precision"), rc;
	if (strcmp(prec, c->train.precision) && strcmp(c->train.precision, "auto"))
		wf_info("train.precision %s: the %s device has no native %s: training in %s",
			c->train.precision, r->be->name, c->train.precision, prec);
	wf_zoo_opts zo = WF_ZOO_OPTS_DEFAULT;
	zo.alpha = (float)c->model.alpha;
	wf_model_meta_init(&r->src_meta);
	if (c->model.init_from[0]) { /* its input name is kept (Keras requests name it) */
		if ((rc = wf_finetune_load_source(r, err)) != 0)
			return rc;
		zo.input_name = r->src->layers[0].name;
	}
	rc = wf_model_zoo_ex(&r->m, c->model.name, ti->h, ti->w, ti->c, ti->nclasses, &zo, err);
	if (rc != 0)
		return wf_err_wrap(err, "model.name: %s on %dx%dx%d images of %d classes",
				   c->model.name, ti->h, ti->w, ti->c, ti->nclasses),
		       rc;
	if ((rc = init_model(r, err)) != 0)
		return rc;

	wf_model_meta_init(&r->meta);
	r->meta.scale = 1.0f / 255.0f;
	for (int i = 0; i < 4; i++) {
		r->meta.mean[i] = PREP_MEAN;
		r->meta.std[i] = PREP_STD;
	}
	r->meta.nclasses = ti->nclasses;
	if (ti->classes) {
		r->meta.class_names = calloc((size_t)ti->nclasses, sizeof(char *));
		if (!r->meta.class_names)
			return wf_errf(err, WF_ENOMEM, "out of memory");
		for (int i = 0; i < ti->nclasses; i++)
			if (ti->classes[i] && !(r->meta.class_names[i] = strdup(ti->classes[i])))
				return wf_errf(err, WF_ENOMEM, "out of memory");
	}
	if (c->model.init_from[0] && (rc = wf_finetune_init_from(r, err)) != 0)
		return rc;
	if ((rc = wf_finetune_freeze(r, err)) != 0)
		return rc;
	rc = wf_exec_create(&r->ex, r->m, r->be, (int)c->train.batch_size, 1, err);
	if (rc != 0)
		return wf_err_wrap(err, "model %s, batch %ld", c->model.name, c->train.batch_size),
		       rc;
	wf_config_optim(c, &r->optim);
	if ((rc = param_segments(r, err)) != 0)
		return rc;
	if (c->train.label_smoothing > 0 &&
	    wf_exec_set_label_smoothing(r->ex, (float)c->train.label_smoothing) != 0)
		return wf_errf(err, WF_EINVAL, "train.label_smoothing: %s", wf_exec_error(r->ex));
	if ((rc = wf_strategy_exchange_create(&r->x, c, r->ex, r->m, &r->optim, err)) != 0)
		return rc;
	/* layer by layer: each layer of a forward waits for its new values */
	if (r->x->layer_ready && wf_exec_set_layer_hook(r->ex, wf_exchange_layer_hook, r->x) != 0)
		return wf_errf(err, WF_ENOMEM, "%s", wf_exec_error(r->ex));
	/* backup workers: the data units of an epoch, as the reader will cut them */
	long unit = c->train.batch_size * c->train.accumulate;
	r->x->units_per_epoch = ti->count / (unit * r->x->workers) * r->x->workers;
	r->x->samples = ti->count;
	r->x->worker_batch = unit;
	return 0;
}

/* Load the newest complete checkpoint when asked, then let the exchange set
 * the starting step. */
static int restore(run *r, const wf_train_opts *opts, wf_err *err)
{
	const wf_config *c = r->cfg;
	char dir[4200];
	long step = 0;
	int found = 0;
	if (opts->resume) {
		found = wf_ckpt_latest_loadable(c->checkpoint.dir, &step, dir, sizeof(dir), err);
		if (found < 0)
			return found;
		if (!found)
			wf_info("--resume: no complete checkpoint in %s: starting fresh",
				c->checkpoint.dir);
	}
	if (found) {
		int rc = wf_ckpt_load_model(dir, r->ex, r->m, err);
		if (rc != 0)
			return rc;
	}
	/* -1: asked to resume, nothing to resume from (a parameter-server chief
	 * restarted before the first checkpoint rejoins the servers' step) */
	int rc = wf_exchange_start(r->x, found ? dir : NULL, found ? step : -opts->resume,
				   &r->start, err);
	if (rc != 0)
		return rc;
	if (found) {
		wf_info("resuming from %s (step %ld of %ld)", dir, r->start, c->train.steps);
		wf_event("resume",
			 json_pack("{s:I, s:s}", "step", (json_int_t)r->start, "dir", dir));
	}
	return 0;
}

/* Batches in the backend's upload memory (page-locked on cuda). */
static void *batch_alloc(void *be, size_t bytes)
{
	return wf_op_host_alloc(be, bytes);
}

static void batch_release(void *be, void *p)
{
	wf_op_host_free(be, p);
}

static int open_reader(run *r, wf_err *err)
{
	const wf_config *c = r->cfg;
	wf_reader_cfg rc_cfg;
	wf_reader_cfg_default(&rc_cfg);
	int acc = (int)c->train.accumulate;
	rc_cfg.batch = (int)c->train.batch_size;
	rc_cfg.first = r->x->rank * acc;
	rc_cfg.slices = acc;
	rc_cfg.total_slices = acc * r->x->workers;
	if (r->x->batch_slots > 0) {
		/* elastic_batch global: the cluster's micro-batches, shared out in
		 * contiguous runs (the first ranks take one more when they do not
		 * divide) */
		int all = acc * r->x->batch_slots, w = r->x->workers, k = r->x->rank;
		rc_cfg.first = k * (all / w) + WF_MIN(k, all % w);
		rc_cfg.slices = all / w + (k < all % w);
		rc_cfg.total_slices = all;
	}
	r->micro = rc_cfg.slices;
	rc_cfg.seed = (uint64_t)c->train.seed;
	rc_cfg.shuffle = 1;
	rc_cfg.augment = c->data.augment;
	rc_cfg.pad = (int)c->data.crop_padding;
	rc_cfg.flip = c->data.aug.flip;
	rc_cfg.crop = c->data.aug.crop;
	rc_cfg.rrc = c->data.aug.random_resized_crop;
	rc_cfg.rrc_scale[0] = (float)c->data.aug.scale_min;
	rc_cfg.rrc_scale[1] = (float)c->data.aug.scale_max;
	rc_cfg.rrc_ratio[0] = (float)c->data.aug.ratio_min;
	rc_cfg.rrc_ratio[1] = (float)c->data.aug.ratio_max;
	rc_cfg.brightness = (float)c->data.aug.brightness;
	rc_cfg.contrast = (float)c->data.aug.contrast;
	rc_cfg.saturation = (float)c->data.aug.saturation;
	rc_cfg.start_step = r->start;
	if (r->x->by_position) { /* elastic allreduce: the exchange knows where */
		rc_cfg.by_position = 1;
		rc_cfg.start_epoch = r->x->data_epoch;
		rc_cfg.start_offset = r->x->data_offset;
	}
	rc_cfg.scale = r->meta.scale;
	memcpy(rc_cfg.mean, r->meta.mean, sizeof(rc_cfg.mean));
	memcpy(rc_cfg.std, r->meta.std, sizeof(rc_cfg.std));
	rc_cfg.prefetch = 2;
	r->by_unit = wf_exchange_get_feed(r->x, &r->fd);
	rc_cfg.by_unit = r->by_unit;
	if (!wf_backend_host_memory(r->be)) {
		rc_cfg.alloc = batch_alloc;
		rc_cfg.release = batch_release;
		rc_cfg.alloc_ctx = r->be;
	}
	int rc = wf_reader_create(&r->rd, r->train_ds, &rc_cfg, err);
	if (rc != 0)
		return wf_err_wrap(err, "data.train"), rc;
	r->steps_per_epoch = wf_reader_steps_per_epoch(r->rd);
	if (r->steps_per_epoch < 1)
		r->steps_per_epoch = 1;
	return 0;
}

/* A resumed run appends to metrics.jsonl; drop the lines past the step it
 * resumes from (written after that checkpoint by the run that died), so
 * every step appears once. */
static int trim_metrics(const char *path, long start, wf_err *err)
{
	char *data;
	size_t len;
	if (wf_read_file(path, &data, &len) != 0)
		return 0; /* nothing to trim */
	FILE *f = fopen(path, "w");
	if (!f) {
		free(data);
		return wf_errf(err, WF_EIO, "%s: cannot rewrite: %s", path, strerror(errno));
	}
	for (char *line = data, *next; line && *line; line = next) {
		next = strchr(line, '\n');
		if (next)
			*next++ = '\0';
		json_t *j = json_loads(line, 0, NULL);
		json_t *step = j ? json_object_get(j, "step") : NULL;
		if (!json_is_integer(step) || json_integer_value(step) <= start)
			fprintf(f, "%s\n", line);
		json_decref(j);
	}
	free(data);
	if (fclose(f) != 0)
		return wf_errf(err, WF_EIO, "%s: cannot rewrite: %s", path, strerror(errno));
	return 0;
}

/* log.dir's files: config.json, metrics.jsonl (appended to when resuming)
 * and the TensorBoard event files. */
static int open_log_files(run *r, int appending, wf_err *err)
{
	const wf_config *c = r->cfg;
	char path[4200];
	if (wf_mkdirs(c->log.dir) != 0)
		return wf_errf(err, WF_EIO, "log.dir: cannot create %s: %s", c->log.dir,
			       strerror(errno));
	snprintf(path, sizeof(path), "%s/config.json", c->log.dir);
	int rc = wf_config_write(c, path, err);
	if (rc != 0)
		return rc;
	snprintf(path, sizeof(path), "%s/metrics.jsonl", c->log.dir);
	if (appending && (rc = trim_metrics(path, r->start, err)) != 0)
		return rc;
	r->metrics = fopen(path, appending ? "a" : "w");
	if (!r->metrics)
		return wf_errf(err, WF_EIO, "%s: cannot open: %s", path, strerror(errno));
	if ((rc = wf_tfevents_open(&r->tb, c->log.dir, err)) != 0)
		return rc;
	/* Keras's TensorBoard layout: the same tags in a train and a validation
	 * run, so TensorBoard overlays them */
	const char *runs[2] = {"train", "validation"};
	wf_tfevents **tbs[2] = {&r->tb_train, &r->tb_val};
	for (int i = 0; i < 2; i++) {
		/* optional extras: a full log disk must not stop training */
		wf_err e = {0};
		snprintf(path, sizeof(path), "%s/%s", c->log.dir, runs[i]);
		if (wf_mkdirs(path) != 0)
			wf_errf(&e, WF_EIO, "log.dir: cannot create %s: %s", path, strerror(errno));
		else if (wf_tfevents_open(tbs[i], path, &e) == 0)
			continue;
		*tbs[i] = NULL;
		if (!r->log_failed)
			wf_warn("%s; training and checkpoints go on without these logs", e.msg);
		r->log_failed = 1;
	}
	return 0;
}

/* The checkpoint folder must exist (a run without checkpoints loses its
 * work); the logs are reported once when they cannot be written and
 * training goes on without them, as when the log disk fills up later (what
 * Keras users expect of TensorBoard and CSV logs: metrics are secondary). */
static int open_logs(run *r, int appending, wf_err *err)
{
	const wf_config *c = r->cfg;
	if (wf_mkdirs(c->checkpoint.dir) != 0)
		return wf_errf(err, WF_EIO, "checkpoint.dir: cannot create %s: %s",
			       c->checkpoint.dir, strerror(errno));
	wf_err e = {0};
	if (open_log_files(r, appending, &e) == 0)
		return 0;
	if (r->metrics)
		fclose(r->metrics);
	wf_tfevents_close(r->tb);
	wf_tfevents_close(r->tb_train);
	wf_tfevents_close(r->tb_val);
	r->metrics = NULL;
	r->tb = r->tb_train = r->tb_val = NULL;
	r->log_failed = 1;
	wf_warn("%s; training and checkpoints go on without metrics.jsonl, TensorBoard events and "
		"config.json in log.dir %s (make that folder writable, or set log.dir to one "
		"that is)",
		e.msg, c->log.dir);
	return 0;
}

/* ---- logging ----------------------------------------------------------- */

typedef struct window {
	double loss_sum; /* sum over samples */
	long correct, samples;
	double t0; /* wf_now() at the window's start */
} window;

static void json_num(FILE *f, const char *key, double v)
{
	if (isfinite(v))
		fprintf(f, ",\"%s\":%.9g", key, v);
	else
		fprintf(f, ",\"%s\":null", key);
}

static int log_metrics(run *r, long step, const wf_progress_stats *s, const wf_eval_result *ev,
		       wf_err *err)
{
	if (!r->metrics) /* log.dir could not be opened at the start (warned) */
		return 0;
	fprintf(r->metrics, "{\"step\":%ld", step);
	json_num(r->metrics, "epoch", s->epoch);
	json_num(r->metrics, "loss", s->loss);
	json_num(r->metrics, "accuracy", s->accuracy);
	json_num(r->metrics, "lr", s->lr);
	json_num(r->metrics, "images_per_sec", s->ips);
	if (ev) {
		json_num(r->metrics, "eval_loss", ev->loss);
		json_num(r->metrics, "eval_accuracy", ev->accuracy);
		json_num(r->metrics, "eval_top5_accuracy", ev->top5);
	}
	fprintf(r->metrics, "}\n");
	if (fflush(r->metrics) != 0)
		return wf_errf(err, WF_EIO, "%s/metrics.jsonl: write failed: %s", r->cfg->log.dir,
			       strerror(errno));
	const char *tags[] = {"loss",  "accuracy",  "learning_rate", "images_per_sec",
			      "epoch", "eval_loss", "eval_accuracy"};
	float vals[] = {(float)s->loss,
			(float)s->accuracy,
			(float)s->lr,
			(float)s->ips,
			(float)s->epoch,
			ev ? (float)ev->loss : 0,
			ev ? (float)ev->accuracy : 0};
	int rc = wf_tfevents_scalars(r->tb, step, ev ? 7 : 5, tags, vals, err);
	if (rc == 0)
		rc = wf_tfevents_flush(r->tb, err);
	const char *ktags[] = {"epoch_loss", "epoch_accuracy", "epoch_learning_rate"};
	float kt[] = {(float)s->loss, (float)s->accuracy, (float)s->lr};
	if (rc == 0 && r->tb_train &&
	    (rc = wf_tfevents_scalars(r->tb_train, step, 3, ktags, kt, err)) == 0)
		rc = wf_tfevents_flush(r->tb_train, err);
	float kv[] = {ev ? (float)ev->loss : 0, ev ? (float)ev->accuracy : 0};
	if (rc == 0 && ev && r->tb_val &&
	    (rc = wf_tfevents_scalars(r->tb_val, step, 2, ktags, kv, err)) == 0)
		rc = wf_tfevents_flush(r->tb_val, err);
	return rc;
}

/* Backup workers (chief): each worker's steps dropped as late into the
 * step's metrics line (metrics.jsonl, still open) and TensorBoard, and a
 * line per epoch whose every unit is applied: samples applied and re-queued
 * (metrics.jsonl and the log). final: also the epoch in progress. */
static int log_backup(run *r, long step, int final, wf_err *err)
{
	wf_exchange_backup b;
	wf_err e = {0};
	if (wf_exchange_backup_stats(r->x, &b, &e) != 0) {
		wf_warn("backup workers: no statistics from the servers: %s", e.msg);
		return 0;
	}
	long unit = r->cfg->train.batch_size * r->cfg->train.accumulate;
	FILE *f = r->metrics;
	for (; r->epochs_logged < b.nepochs; r->epochs_logged++) {
		long ep = r->epochs_logged, a = b.applied[ep], q = b.requeued[ep];
		int complete = b.units_per_epoch > 0 && a >= b.units_per_epoch;
		if (!complete && !final)
			break;
		if (!complete && a == 0 && q == 0)
			break;
		wf_progress_message(&r->prog,
				    "epoch %ld %s at step %ld: %ld samples applied of %ld, %ld "
				    "re-queued (dropped as late, trained again)",
				    ep + 1, complete ? "done" : "so far", step, a * unit,
				    b.units_per_epoch * unit, q * unit);
		if (f)
			fprintf(f,
				"{\"step\":%ld,\"epoch_end\":%ld,\"complete\":%s,\"samples_"
				"applied\":%ld,"
				"\"samples_requeued\":%ld,\"samples_per_epoch\":%ld}\n",
				step, ep + 1, complete ? "true" : "false", a * unit, q * unit,
				b.units_per_epoch * unit);
		if (!complete)
			break;
	}
	if (!f || b.workers <= 0)
		return 0;
	fprintf(f, "{\"step\":%ld,\"backup_workers\":%ld,\"steps_dropped\":[", step,
		r->cfg->strategy.backup_workers);
	for (int w = 0; w < b.workers; w++)
		fprintf(f, "%s%ld", w ? "," : "", b.late[w]);
	fprintf(f, "],\"late_steps_mean\":[");
	for (int w = 0; w < b.workers; w++)
		fprintf(f, "%s%.3g", w ? "," : "",
			b.late[w] ? (double)b.late_sum[w] / (double)b.late[w] : 0.0);
	fprintf(f, "],\"late_steps_max\":[");
	for (int w = 0; w < b.workers; w++)
		fprintf(f, "%s%ld", w ? "," : "", b.late_max[w]);
	fprintf(f, "]}\n");
	if (fflush(f) != 0)
		return wf_errf(err, WF_EIO, "%s/metrics.jsonl: write failed: %s", r->cfg->log.dir,
			       strerror(errno));
	int rc = 0;
	for (int w = 0; w < b.workers && rc == 0; w++) {
		char t[3][64];
		const char *tags[3] = {t[0], t[1], t[2]};
		snprintf(t[0], sizeof(t[0]), "backup/steps_dropped/worker_%d", w);
		snprintf(t[1], sizeof(t[1]), "backup/late_steps_mean/worker_%d", w);
		snprintf(t[2], sizeof(t[2]), "backup/late_steps_max/worker_%d", w);
		float v[3] = {(float)b.late[w],
			      b.late[w] ? (float)b.late_sum[w] / (float)b.late[w] : 0.0f,
			      (float)b.late_max[w]};
		rc = wf_tfevents_scalars(r->tb, step, 3, tags, v, err);
	}
	if (rc == 0)
		rc = wf_tfevents_flush(r->tb, err);
	return rc;
}

/* A log that cannot be written (a full log disk) is reported once and
 * training goes on: checkpoints matter more than metrics. */
static void log_metrics_or_warn(run *r, long step, const wf_progress_stats *s,
				const wf_eval_result *ev)
{
	wf_err e = {0};
	int rc = log_metrics(r, step, s, ev, &e);
	if (rc == 0 && r->by_unit)
		rc = log_backup(r, step, step >= r->cfg->train.steps, &e);
	if (rc == 0) {
		r->log_failed = 0;
		return;
	}
	clearerr(r->metrics);
	if (!r->log_failed)
		wf_warn("%s; training and checkpoints go on without these logs", e.msg);
	r->log_failed = 1;
}

static int evaluate(run *r, long step, wf_eval_result *ev, wf_err *err)
{
	int rc = wf_evaluate(r->ex, r->eval_ds, &r->meta, (int)r->cfg->train.batch_size, ev, err);
	if (rc != 0)
		return wf_err_wrap(err, "evaluating at step %ld", step), rc;
	wf_progress_message(&r->prog, "eval   step %ld: loss %.4f  accuracy %.4f  (%ld samples)",
			    step, ev->loss, ev->accuracy, ev->count);
	return 0;
}

/* Eval far below train with batch norms whose moving averages cannot have
 * converged yet (they average over ~1/(1-momentum) steps): say so once, and
 * what to change. */
static void warn_bn_statistics(run *r, long done, const wf_progress_stats *s,
			       const wf_eval_result *ev)
{
	double mom = 0;
	for (int i = 0; i < r->m->nlayers; i++)
		if (r->m->layers[i].type == WF_LAYER_BATCHNORM && !r->m->layers[i].frozen)
			mom = fmax(mom, r->m->layers[i].momentum);
	double chance = 1.0 / (r->m->classes > 0 ? r->m->classes : 1);
	if (r->bn_warned || mom <= 0 || mom >= 1 || (double)done > 5.0 / (1.0 - mom) ||
	    s->accuracy < 2 * chance || ev->accuracy > 0.6 * s->accuracy)
		return;
	r->bn_warned = 1;
	wf_progress_message(
		&r->prog,
		"warning: eval accuracy %.3f is far below the train accuracy %.3f at step %ld: "
		"evaluation uses the batch-norm moving statistics, which with momentum %g "
		"average over about %.0f steps and have not converged yet. For short runs set "
		"model.bn_momentum: 0.9 (or 0.99), or train for more steps",
		ev->accuracy, s->accuracy, done, mom, 1.0 / (1.0 - mom));
}

/* ---- the loop ---------------------------------------------------------- */

/* What to try when a run diverges, after "... at step N". */
#define DIVERGED_HINT                                                                              \
	"training diverged; checkpoints written while it diverged are marked DIVERGED and "        \
	"never loaded. Try a lower optimizer.lr (say a tenth), a longer "                          \
	"optimizer.schedule.warmup_steps, or gradient clipping (optimizer.global_clipnorm: "       \
	"1.0)"

/* A non-finite loss, or one far above the first step's, stops the run
 * before its update is applied (DIVERGED_HINT). */
static int check_divergence(run *r, long step, float loss, wf_err *err)
{
	double f = r->cfg->train.divergence_factor;
	if (!isfinite(loss)) {
		r->diverged = 1;
		return wf_errf(err, WF_EINVAL, "loss is %f at step %ld: " DIVERGED_HINT,
			       (double)loss, step + 1);
	}
	if (r->first_loss <= 0) {
		/* a resumed or fine-tuned run may start far below chance: measure
		 * from chance (ln K) at least */
		double chance = log((double)r->m->classes > 1 ? (double)r->m->classes : 2.0);
		r->first_loss = loss > chance ? loss : chance;
		return 0;
	}
	if (f > 0 && loss > f * r->first_loss && loss > 1e-3) {
		r->diverged = 1;
		return wf_errf(err, WF_EINVAL,
			       "loss is %g at step %ld, over %g times the first step's %g "
			       "(or chance) (train.divergence_factor): " DIVERGED_HINT,
			       (double)loss, step + 1, f, r->first_loss);
	}
	return 0;
}

/* Before a checkpoint: every parameter finite (an update can explode the
 * weights before any loss shows it; such a model must not replace a good
 * checkpoint). */
static int check_params_finite(run *r, long done, wf_err *err)
{
	if (wf_exec_params_to_host(r->ex) != 0)
		return wf_errf(err, WF_EINTERNAL, "step %ld: %s", done, wf_exec_error(r->ex));
	for (size_t i = 0; i < r->m->nparams; i++)
		if (!isfinite(r->m->params[i])) {
			r->diverged = 1;
			return wf_errf(err, WF_EINVAL,
				       "parameters are not finite after step %ld (checkpoint not "
				       "written): " DIVERGED_HINT,
				       done);
		}
	return 0;
}

/* After a divergence, the chief's checkpoints from the last healthy step on
 * (a step whose loss was finite and at most the first step's, or chance)
 * are marked DIVERGED: a step's loss measures the weights of the step
 * before, so the weights saved at the last healthy step are the first the
 * divergence may have reached. Resume and export then take the newest step
 * before it. */
static void mark_diverged_checkpoints(run *r, long done)
{
	const char *dir = r->cfg->checkpoint.dir;
	long *steps = NULL;
	int n = 0;
	wf_err e = {0};
	if (!r->x->is_chief || !dir[0] || wf_ckptdir_list(dir, &steps, &n, &e) != 0) {
		if (e.msg[0])
			wf_warn("%s", e.msg);
		return;
	}
	char why[160];
	snprintf(why, sizeof(why),
		 "written at or after step %ld, the last whose loss was at most the first "
		 "step's, before the run diverged",
		 r->last_healthy);
	for (int i = 0; i < n; i++) {
		char sd[WF_CFG_PATH_MAX + 32];
		if (steps[i] < r->last_healthy || steps[i] > done)
			continue;
		wf_ckptdir_step_path(sd, sizeof(sd), dir, steps[i]);
		if (!wf_ckptdir_has_done(sd))
			continue;
		if (wf_ckptdir_mark_diverged(sd, why, &e) != 0)
			wf_warn("%s", e.msg);
		else
			wf_warn("%s marked DIVERGED: %s; resume and export skip it", sd, why);
	}
	free(steps);
}

/* The units a step trains by unit (the exchange's feed): n of them, the
 * first fd.unit (or the step's own when none was handed out). */
static int step_units(const run *r)
{
	return r->by_unit && r->fd.nunits > 1 && r->fd.units ? r->fd.nunits : 1;
}

/* One optimizer step: every micro-batch forward/backward, then the exchange.
 * By unit with elastic_batch global, b is the first of the step's units and
 * the others are read in turn (each replaces b); their gradients add up.
 * Returns 0, an error, or WF_EXCHANGE_MOVED with *to (see exchange.h). */
static int train_step(run *r, long step, wf_batch *b, window *w, long *to, wf_err *err)
{
	const wf_config *c = r->cfg;
	/* each micro-batch's gradient is its mean / accumulate: a worker's own
	 * batch (a unit) gives its mean; with elastic_batch global a worker's
	 * share of micro-batches sums so that the ring's sum / slots is the mean
	 * of all, and a worker's units sum to as many means as it trained */
	int bs = (int)c->train.batch_size, acc = r->micro, nu = step_units(r);
	size_t sample = (size_t)r->m->in_h * (size_t)r->m->in_w * (size_t)r->m->in_c;
	float scale = 1.0f / (float)(bs * c->train.accumulate);
	int rc;
	double step_loss = 0;
	if (wf_exec_zero_grads(r->ex) != 0)
		goto exec_failed;
	for (int u = 0; u < nu; u++) {
		if (u > 0 && (rc = wf_reader_unit(r->rd, r->fd.units[u], &b, err)) <= 0)
			return rc ? rc : wf_errf(err, WF_EINTERNAL, "no unit %ld", r->fd.units[u]);
		if (b->n != bs * acc)
			return wf_errf(err, WF_EINTERNAL,
				       "reader gave %d samples at step %ld, want %d", b->n, step,
				       bs * acc);
		for (int k = 0; k < acc; k++) {
			float loss;
			int correct;
			const float *img = b->images + (size_t)k * (size_t)bs * sample;
			uint64_t seed = wf_hash3((uint64_t)c->train.seed, (uint64_t)step,
						 (uint64_t)(u * acc + k));
			if (wf_exec_forward(r->ex, img, bs, 1, seed) != 0 ||
			    wf_exec_loss(r->ex, b->labels + (size_t)k * (size_t)bs, &loss,
					 &correct) != 0)
				goto exec_failed;
			int last = u == nu - 1 && k == acc - 1;
			if (wf_exec_backward(r->ex, scale, last ? wf_exchange_grad_ready : NULL,
					     last ? r->x : NULL) != 0)
				goto exec_failed;
			if ((rc = check_divergence(r, step, loss, err)) != 0)
				return rc;
			step_loss += (double)loss / (acc * nu);
			w->loss_sum += (double)loss * bs;
			w->correct += correct;
			w->samples += bs;
		}
	}
	if (step_loss <= r->first_loss)
		r->last_healthy = step + 1;
	return wf_exchange_step(r->x, step, to, err);
exec_failed:
	return wf_errf(err, WF_EINTERNAL, "step %ld: %s", step + 1, wf_exec_error(r->ex));
}

/* The exchange moved the job from step `from` to step `to` (its model is in
 * the executor): the reader restarts there, reading what a run at that step
 * reads, and the chief drops the metrics lines past it. */
static int rewind_to(run *r, long from, long to, wf_err *err)
{
	wf_progress_message(&r->prog, "step %ld: the job continues from step %ld", from, to);
	wf_event("rollback",
		 json_pack("{s:I, s:I}", "from", (json_int_t)from, "to", (json_int_t)to));
	wf_reader_free(r->rd);
	r->rd = NULL;
	r->start = to;
	r->last_healthy = to;
	if (r->metrics) {
		char path[WF_CFG_PATH_MAX + 32];
		snprintf(path, sizeof(path), "%s/metrics.jsonl", r->cfg->log.dir);
		fclose(r->metrics);
		r->metrics = NULL;
		int rc = trim_metrics(path, to, err);
		if (rc != 0)
			return rc;
		if (!(r->metrics = fopen(path, "a")))
			wf_warn("%s: cannot open: %s; training goes on without metrics.jsonl", path,
				strerror(errno));
	}
	return open_reader(r, err);
}

/* Layer by layer: does anything after step `done` - 1, other than the next
 * training forward, read the parameters (evaluation, a checkpoint, the
 * end, a stop or pause, the data units' feed)? Then the exchange settles
 * first. */
static int needs_values(const run *r, long done, long stop_at, int requested, int chief)
{
	const wf_config *c = r->cfg;
	long steps = c->train.steps;
	int evals = chief && r->eval_ds && c->train.eval_every_steps > 0 &&
		    done % c->train.eval_every_steps == 0;
	int periodic = c->checkpoint.every_steps > 0 && done % c->checkpoint.every_steps == 0;
	return done >= steps || evals || periodic || requested ||
	       (stop_at > 0 && done == stop_at) || r->by_unit;
}

static int loop(run *r, long stop_at, wf_train_result *res, wf_err *err)
{
	const wf_config *c = r->cfg;
	long steps = c->train.steps;
	int chief = r->x->is_chief, rc = 0;
	window w = {0, 0, 0, wf_now()};
	wf_eval_result ev;
	wf_progress_stats s = {0};
	for (long step = r->start; step < steps; step++) {
		wf_batch *b;
		if (r->by_unit) /* the unit the servers handed out (none: the step's own) */
			rc = wf_reader_unit(r->rd,
					    r->fd.unit >= 0 ? r->fd.unit
							    : step * r->x->workers + r->x->rank,
					    &b, err);
		else
			rc = wf_reader_next(r->rd, &b, err);
		if (rc <= 0) {
			if (rc == 0)
				rc = wf_errf(err, WF_EINTERNAL, "train reader ended at step %ld",
					     step);
			return rc;
		}
		/* the units trained, for the event (the feed changes with the step) */
		json_t *units = r->by_unit ? json_array() : NULL;
		long first_unit = b->step, last_unit = b->step;
		for (int u = 0; units && u < step_units(r); u++) {
			last_unit = u ? r->fd.units[u] : b->step;
			json_array_append_new(units, json_integer(last_unit));
		}
		long to;
		rc = train_step(r, step, b, &w, &to, err);
		/* a signal is read once per step: what settles and what stops agree */
		int requested = stop_requested;
		if (rc == 0 && r->x->layer_ready &&
		    needs_values(r, step + 1, stop_at, requested, chief))
			rc = wf_exchange_settle(r->x, &to, err);
		if (rc == WF_EXCHANGE_MOVED && r->x->by_position && to == step + 1) {
			/* elastic allreduce: the step is done and the ring formed again
			 * (rank, workers and data position changed): read on from there */
			wf_reader_free(r->rd);
			r->rd = NULL;
			r->start = to;
			rc = open_reader(r, err);
		} else if (rc ==
			   WF_EXCHANGE_MOVED) { /* ps: a server restarted; the job went back */
			json_decref(units);
			if ((rc = rewind_to(r, step, to, err)) != 0)
				return rc;
			step = r->start - 1;
			w = (window){0, 0, 0, wf_now()};
			continue;
		}
		if (rc != 0) {
			json_decref(units);
			return rc;
		}

		long done = step + 1;
		if (r->by_unit && wf_exchange_get_feed(r->x, &r->fd)) {
			r->own_applied += !r->fd.dropped;
			r->own_dropped += r->fd.dropped;
			r->own_partial += r->fd.partial > 0;
			wf_event("unit",
				 json_pack("{s:I, s:I, s:b, s:O}", "step", (json_int_t)step, "unit",
					   (json_int_t)first_unit, "applied", !r->fd.dropped,
					   "units", units ? units : json_null()));
			/* dropped as late: on at the servers' step */
			done = WF_MAX(done, r->fd.next_step);
		}
		json_decref(units);
		double el = wf_now() - w.t0;
		s.step = done;
		s.epoch = (double)done / (double)r->steps_per_epoch;
		if (r->by_unit && r->x->units_per_epoch > 0) /* the data, not the steps */
			s.epoch = (double)(last_unit + 1) / (double)r->x->units_per_epoch;
		s.loss = w.samples ? w.loss_sum / (double)w.samples : 0;
		s.accuracy = w.samples ? (double)w.correct / (double)w.samples : 0;
		s.ips = el > 0 ? (double)w.samples / el : 0;
		s.lr = wf_optim_lr(&r->optim, step);
		if (r->reports)
			wf_progress_update(&r->prog, &s);

		int evals = chief && r->eval_ds &&
			    (done == steps || (c->train.eval_every_steps > 0 &&
					       done % c->train.eval_every_steps == 0));
		int logs = done % c->log.every_steps == 0 || done == steps || evals;
		if (evals && (rc = evaluate(r, done, &ev, err)) != 0)
			return rc;
		if (evals)
			wf_event("eval", json_pack("{s:I, s:f, s:f}", "step", (json_int_t)done,
						   "loss", ev.loss, "accuracy", ev.accuracy));
		if (logs && chief)
			log_metrics_or_warn(r, done, &s, evals ? &ev : NULL);
		if (logs) {
			res->loss = s.loss;
			res->accuracy = s.accuracy;
			w = (window){0, 0, 0, wf_now()};
		}
		if (evals) {
			res->eval_loss = ev.loss;
			res->eval_accuracy = ev.accuracy;
			warn_bn_statistics(r, done, &s, &ev);
		}
		res->steps_done = done;

		int periodic =
			c->checkpoint.every_steps > 0 && done % c->checkpoint.every_steps == 0;
		int stop_here = stop_at > 0 && done == stop_at;
		/* allreduce: every rank stops after the same step, whichever got the signal */
		int stop = wf_exchange_should_stop(r->x, step, requested), left = 0;
		if (stop && done < steps && (rc = wf_exchange_leave(r->x, &left, err)) != 0)
			return rc;
		/* layer by layer: another rank's stop (allreduce) settles here */
		if (stop && r->x->layer_ready && (rc = wf_exchange_settle(r->x, &to, err)) != 0)
			return rc;
		if (left) { /* elastic: the others go on; the chief keeps the checkpoints */
			wf_progress_message(&r->prog, "left the job after step %ld (elastic)",
					    done);
			return 0;
		}
		if (periodic || done == steps || stop || stop_here) {
			if ((rc = check_params_finite(r, done, err)) != 0)
				return rc;
			rc = wf_ckpt_save(c->checkpoint.dir, done, r->ex, r->m, &r->meta, r->x,
					  (int)c->checkpoint.keep, r->last_healthy, err);
			if (rc != 0)
				return rc;
		}
		if (stop && done < steps) {
			wf_progress_message(
				&r->prog,
				"stopped at step %ld: checkpoint written to %s/step-%ld; "
				"continue with --resume",
				done, c->checkpoint.dir, done);
			return WF_ESTOPPED;
		}
		if (stop_here && done < steps) {
			wf_progress_message(&r->prog,
					    "paused at step %ld as asked: checkpoint written to "
					    "%s/step-%ld; continue with --resume",
					    done, c->checkpoint.dir, done);
			return 0;
		}
		step = done - 1;
	}
	return 0;
}

/* A restarted chief that rejoined the servers after they trained the last
 * step (ps): evaluate, log and checkpoint that step, as its loop would have
 * (unless that checkpoint is complete already: the job was over). */
static int finish_joined(run *r, wf_train_result *res, wf_err *err)
{
	const wf_config *c = r->cfg;
	long steps = c->train.steps;
	char step_dir[4200];
	wf_ckptdir_step_path(step_dir, sizeof(step_dir), c->checkpoint.dir, steps);
	if (!r->x->is_chief || r->start != steps || !c->checkpoint.dir[0] ||
	    wf_ckptdir_has_done(step_dir))
		return 0;
	wf_eval_result ev;
	wf_progress_stats s = {.step = steps,
			       .epoch = (double)steps / (double)r->steps_per_epoch,
			       .lr = wf_optim_lr(&r->optim, steps - 1)};
	int rc;
	if (r->eval_ds) {
		if ((rc = evaluate(r, steps, &ev, err)) != 0)
			return rc;
		wf_event("eval", json_pack("{s:I, s:f, s:f}", "step", (json_int_t)steps, "loss",
					   ev.loss, "accuracy", ev.accuracy));
		res->eval_loss = ev.loss;
		res->eval_accuracy = ev.accuracy;
	}
	log_metrics_or_warn(r, steps, &s, r->eval_ds ? &ev : NULL);
	res->steps_done = steps;
	r->last_healthy = steps;
	if ((rc = check_params_finite(r, steps, err)) != 0)
		return rc;
	return wf_ckpt_save(c->checkpoint.dir, steps, r->ex, r->m, &r->meta, r->x,
			    (int)c->checkpoint.keep, r->last_healthy, err);
}

int wf_train(const wf_config *cfg, const wf_train_opts *opts, wf_train_result *res, wf_err *err)
{
	run r;
	memset(&r, 0, sizeof(r));
	r.cfg = cfg;
	memset(res, 0, sizeof(*res));
	res->eval_loss = res->eval_accuracy = -1;
	stop_requested = 0;

	struct sigaction sa, old_int, old_term;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sa.sa_flags = (int)SA_RESETHAND; /* a second Ctrl-C stops at once */
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, &old_int);
	sigaction(SIGTERM, &sa, &old_term);

	starting = 1;
	int rc = wf_strategy_check(cfg, err);
	if (rc == 0)
		rc = open_data(&r, err);
	if (rc == 0)
		rc = build_model(&r, err);
	if (rc == 0)
		rc = restore(&r, opts, err);
	if (rc == 0)
		rc = open_reader(&r, err);
	if (rc == 0 && r.x->is_chief)
		rc = open_logs(&r, r.start > 0, err);
	starting = 0;
	/* a signal while starting: no step to save. An elastic worker leaves
	 * the job, also when the signal stopped its register or its wait for
	 * the chief: else the servers would count it in every step until
	 * ps.heartbeat_timeout declared it dead. */
	if (stop_requested && r.x && (rc == 0 || rc == WF_ESTOPPED)) {
		int left = 0;
		wf_err e = {0};
		if (wf_exchange_leave(r.x, &left, &e) != 0)
			wf_warn("%s", e.msg);
		if (left) {
			wf_info("left the job before its first step (elastic)");
			wf_err_clear(err);
			rc = 0;
			goto done;
		}
		if (rc == 0)
			rc = wf_errf(err, WF_ESTOPPED, "stopped before the first step");
	}
	if (rc != 0)
		goto done;

	const wf_dataset_info *ti = wf_dataset_info_get(r.train_ds);
	wf_info("training %s (%zu parameters) on %s: %ld samples of %dx%dx%d, %d classes; "
		"device %s, batch %ld x %ld, %ld steps (%ld per epoch)",
		cfg->model.name, r.m->nparams, cfg->data.train, ti->count, ti->h, ti->w, ti->c,
		ti->nclasses, r.be->name, cfg->train.batch_size, cfg->train.accumulate,
		cfg->train.steps, r.steps_per_epoch);
	res->steps_done = r.start;
	/* Allreduce ranks move in lockstep: one display, rank 0's. A
	 * parameter-server worker's progress is its own (it may lag, rejoin or
	 * run ahead), so each worker shows it. */
	r.reports = r.x->is_chief || strcmp(r.x->name, "allreduce") != 0;
	res->reports = r.reports;
	wf_progress_init(&r.prog, stderr, opts->tty, r.start, cfg->train.steps,
			 cfg->log.every_steps);
	long to; /* where the exchange moved the job (WF_EXCHANGE_MOVED) */
again:
	if (r.start >= cfg->train.steps) {
		wf_info("already trained %ld of %ld steps: nothing to do", r.start,
			cfg->train.steps);
		wf_event("nothing_to_do", json_pack("{s:I, s:I}", "step", (json_int_t)r.start,
						    "steps", (json_int_t)cfg->train.steps));
		rc = finish_joined(&r, res, err);
	} else {
		r.last_healthy = r.start;
		rc = loop(&r, opts->stop_at, res, err);
		wf_progress_finish(&r.prog);
		if (r.by_unit)
			wf_info("backup workers: worker %d: %ld steps applied, %ld dropped as late "
				"(their samples re-queued), %ld with chunks of both fates",
				r.x->rank, r.own_applied, r.own_dropped, r.own_partial);
		if (rc && r.diverged)
			mark_diverged_checkpoints(&r, res->steps_done);
	}
	if (rc == 0)
		rc = wf_exchange_finish(r.x, &to, err);
	/* ps: the job went back while this worker waited at the end: train on */
	if (rc == WF_EXCHANGE_MOVED && (rc = rewind_to(&r, cfg->train.steps, to, err)) == 0)
		goto again;
	/* finished: the next serving version, once per final checkpoint (a chief
	 * restarted after the job's end finishes an export that did not happen) */
	if (rc == 0 && r.x->is_chief && cfg->export_.dir[0] &&
	    res->steps_done == cfg->train.steps) {
		char step_dir[4200];
		wf_ckptdir_step_path(step_dir, sizeof(step_dir), cfg->checkpoint.dir,
				     cfg->train.steps);
		int sealed = cfg->checkpoint.dir[0] && wf_ckptdir_has_done(step_dir);
		if (r.start < cfg->train.steps || sealed)
			rc = wf_export_after_training(r.ex, r.m, &r.meta, cfg->export_.dir,
						      sealed ? step_dir : NULL, err);
	}
done:
	run_free(&r);
	sigaction(SIGINT, &old_int, NULL);
	sigaction(SIGTERM, &old_term, NULL);
	return rc;
}
