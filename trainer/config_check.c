/* config_check.c: wf_config_validate, the checks of a resolved config that
 * no single key can make on its own (ranges, choices, combinations), one
 * function per section. The schema and the loading are in config.c. */
#include "trainer/config.h"

#include "model/model.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

static int one_of(const char *v, const char *choices)
{
	size_t n = strlen(v);
	for (const char *s = choices; *s;) {
		size_t len = strcspn(s, " ");
		if (len == n && strncmp(s, v, n) == 0)
			return 1;
		s += len;
		while (*s == ' ')
			s++;
	}
	return 0;
}

#define NEED(cond, ...)                                                                            \
	do {                                                                                       \
		if (!(cond))                                                                       \
			return wf_errf(err, WF_EINVAL, __VA_ARGS__);                               \
	} while (0)

/* model.* and data.*: the model, its input and the augmentation */
static int check_model_data(wf_config *c, wf_err *err)
{
	const char *zoo = wf_model_zoo_names();
	NEED(one_of(c->model.name, zoo), "model.name: unknown model '%s' (known: %s)",
	     c->model.name, zoo);
	int ih, iw, ic;
	NEED(wf_config_input_shape(c, &ih, &iw, &ic) >= 0,
	     "model.input_shape: expected [H, W, C] with H, W in 1..16384 and C in 1..4, got "
	     "'%s'",
	     c->model.input_shape);
	NEED(c->model.classes >= 0 && c->model.classes <= 1000000,
	     "model.classes: must be >= 1 (or 0: from the data), got %ld", c->model.classes);
	NEED(c->data.train[0], "data.train: required (path of the training dataset file)");
	NEED(c->data.crop_padding >= 0 && c->data.crop_padding <= 1024,
	     "data.crop_padding: must be in [0, 1024], got %ld", c->data.crop_padding);
	NEED(c->data.aug.scale_min > 0 && c->data.aug.scale_min <= c->data.aug.scale_max &&
		     c->data.aug.scale_max <= 1,
	     "data.augment.scale_min/scale_max: want 0 < scale_min <= scale_max <= 1, got %g, %g",
	     c->data.aug.scale_min, c->data.aug.scale_max);
	NEED(c->data.aug.ratio_min > 0 && c->data.aug.ratio_min <= c->data.aug.ratio_max,
	     "data.augment.ratio_min/ratio_max: want 0 < ratio_min <= ratio_max, got %g, %g",
	     c->data.aug.ratio_min, c->data.aug.ratio_max);
	NEED(c->data.aug.brightness >= 0 && c->data.aug.brightness <= 10 &&
		     c->data.aug.contrast >= 0 && c->data.aug.contrast <= 10 &&
		     c->data.aug.saturation >= 0 && c->data.aug.saturation <= 10,
	     "data.augment.brightness/contrast/saturation: want 0..10, got %g, %g, %g",
	     c->data.aug.brightness, c->data.aug.contrast, c->data.aug.saturation);
	return 0;
}

/* train.*: batch, steps, device and precision */
static int check_train(wf_config *c, wf_err *err)
{
	NEED(c->train.batch_size >= 1 && c->train.batch_size <= 1 << 20,
	     "train.batch_size: must be >= 1, got %ld", c->train.batch_size);
	NEED(c->train.steps >= 1, "train.steps: must be >= 1, got %ld", c->train.steps);
	NEED(c->train.seed >= 0, "train.seed: must be >= 0, got %ld", c->train.seed);
	NEED(c->train.eval_every_steps >= 0, "train.eval_every_steps: must be >= 0, got %ld",
	     c->train.eval_every_steps);
	NEED(c->train.threads >= 0 && c->train.threads <= 4096,
	     "train.threads: must be in [0, 4096], got %ld", c->train.threads);
	NEED(one_of(c->train.device, "cpu ref cuda auto"),
	     "train.device: expected cpu, ref, cuda or auto, got '%s'", c->train.device);
	const char *prec = wf_backend_precision_canon(c->train.precision);
	NEED(prec, "train.precision: '%s' is not one of " WF_PRECISIONS, c->train.precision);
	NEED(strcmp(prec, "int8") != 0,
	     "train.precision: int8 is an inference precision (calibrate a trained model with "
	     "`weft export --quantize int8`); training computes in fp32, tf32, bf16, fp16 or auto");
	/* one spelling from here on (config.json records it): bf16, not bfloat16 */
	snprintf(c->train.precision, sizeof(c->train.precision), "%s", prec);
	NEED(c->train.accumulate >= 1 && c->train.accumulate <= 65536,
	     "train.accumulate: must be in [1, 65536], got %ld", c->train.accumulate);
	NEED(c->train.batch_size * c->train.accumulate <= 1 << 22,
	     "train.batch_size * train.accumulate: too large (%ld)",
	     c->train.batch_size * c->train.accumulate);
	return 0;
}

/* optimizer.* and its schedule */
static int check_optimizer(wf_config *c, wf_err *err)
{
	NEED(one_of(c->optimizer.name, "sgd adam adamw"),
	     "optimizer.name: expected sgd, adam or adamw, got '%s'", c->optimizer.name);
	NEED(c->optimizer.lr > 0 && c->optimizer.lr < 1e6, "optimizer.lr: must be > 0, got %g",
	     c->optimizer.lr);
	NEED(c->optimizer.momentum >= 0 && c->optimizer.momentum < 1,
	     "optimizer.momentum: must be in [0, 1), got %g", c->optimizer.momentum);
	NEED(c->optimizer.beta1 >= 0 && c->optimizer.beta1 < 1,
	     "optimizer.beta1: must be in [0, 1), got %g", c->optimizer.beta1);
	NEED(c->optimizer.beta2 >= 0 && c->optimizer.beta2 < 1,
	     "optimizer.beta2: must be in [0, 1), got %g", c->optimizer.beta2);
	NEED(c->optimizer.epsilon > 0, "optimizer.epsilon: must be > 0, got %g",
	     c->optimizer.epsilon);
	NEED(c->optimizer.weight_decay >= 0, "optimizer.weight_decay: must be >= 0, got %g",
	     c->optimizer.weight_decay);
	NEED(!(c->optimizer.nesterov && c->optimizer.momentum == 0),
	     "optimizer.nesterov: needs optimizer.momentum > 0");
	NEED(one_of(c->optimizer.schedule.name, "constant step cosine"),
	     "optimizer.schedule.name: expected constant, step or cosine, got '%s'",
	     c->optimizer.schedule.name);
	NEED(c->optimizer.schedule.warmup_steps >= 0,
	     "optimizer.schedule.warmup_steps: must be >= 0, got %ld",
	     c->optimizer.schedule.warmup_steps);
	NEED(c->optimizer.schedule.decay_steps >= 0,
	     "optimizer.schedule.decay_steps: must be >= 0, got %ld",
	     c->optimizer.schedule.decay_steps);
	NEED(strcmp(c->optimizer.schedule.name, "step") != 0 ||
		     c->optimizer.schedule.decay_steps > 0,
	     "optimizer.schedule.decay_steps: the step schedule needs decay_steps >= 1");
	NEED(c->optimizer.schedule.decay_rate > 0,
	     "optimizer.schedule.decay_rate: must be > 0, got %g",
	     c->optimizer.schedule.decay_rate);
	NEED(c->optimizer.schedule.min_lr >= 0 && c->optimizer.schedule.min_lr <= c->optimizer.lr,
	     "optimizer.schedule.min_lr: must be in [0, optimizer.lr], got %g",
	     c->optimizer.schedule.min_lr);
	return 0;
}

/* strategy.* and ps.*: the exchange and the parameter servers; sets the
 * parsed mode (c->ps.mode, c->strategy.staleness) */
static int check_strategy(wf_config *c, wf_err *err)
{
	NEED(one_of(c->strategy.name, "local parameter_server allreduce"),
	     "strategy.name: expected local, parameter_server or allreduce, got '%s'",
	     c->strategy.name);
	c->strategy.staleness = 0;
	if (strncmp(c->strategy.mode, "ssp:", 4) == 0) {
		char *end;
		errno = 0;
		long k = strtol(c->strategy.mode + 4, &end, 10);
		NEED(c->strategy.mode[4] >= '0' && c->strategy.mode[4] <= '9' && *end == '\0' &&
			     errno == 0 && k >= 1 && k <= 1000000,
		     "strategy.mode: ssp:K needs an integer K >= 1, got '%s'", c->strategy.mode);
		c->strategy.staleness = k;
		c->ps.mode = WF_PS_MODE_SSP;
	} else {
		NEED(one_of(c->strategy.mode, "sync async"),
		     "strategy.mode: expected sync, async or ssp:K, got '%s'", c->strategy.mode);
		c->ps.mode = strcmp(c->strategy.mode, "async") ? WF_PS_MODE_SYNC : WF_PS_MODE_ASYNC;
	}
	NEED(c->ps.chunk_bytes >= 1024 && c->ps.chunk_bytes <= (1L << 30),
	     "ps.chunk_bytes (WEFT_PS_CHUNK_BYTES): must be a byte count in [1024, 2^30], got %ld",
	     c->ps.chunk_bytes);
	wf_err ce = {0};
	if (wf_ps_compression_parse(c->ps.compression, &c->ps.comp, &c->ps.topk, &ce) != 0)
		NEED(0, "%s (WEFT_PS_COMPRESSION)", ce.msg);
	NEED(c->ps.priority_kb >= 0 && c->ps.priority_kb <= 1048576,
	     "ps.priority_kb (WEFT_PS_PRIORITY_KB): KiB in flight per server, 0 (off) to "
	     "1048576, got %ld",
	     c->ps.priority_kb);
	NEED(c->ps.replicas >= 1 && c->ps.replicas <= 33,
	     "ps.replicas (WEFT_PS_REPLICAS): servers that keep each chunk, 1..33, got %ld",
	     c->ps.replicas);
	const struct {
		const char *key;
		double v;
	} secs[] = {
		{"ps.timeout (WEFT_PS_TIMEOUT)", c->ps.timeout},
		{"ps.connect_timeout (WEFT_PS_CONNECT_TIMEOUT)", c->ps.connect_timeout},
		{"ps.server_timeout (WEFT_PS_SERVER_TIMEOUT)", c->ps.server_timeout},
		{"ps.heartbeat_timeout (WEFT_PS_HEARTBEAT_TIMEOUT)", c->ps.heartbeat_timeout},
		{"ps.stall_timeout (WEFT_PS_STALL_TIMEOUT)", c->ps.stall_timeout},
		{"ps.stats_every (WEFT_PS_STATS_EVERY)", c->ps.stats_every},
	};
	for (size_t i = 0; i < sizeof(secs) / sizeof(secs[0]); i++)
		NEED(secs[i].v >= 0 && secs[i].v <= 1e9,
		     "%s: must be a number of seconds >= 0, got %g", secs[i].key, secs[i].v);
	if (c->ps.debug_stall[0]) {
		int r;
		long st;
		double sl;
		char tail;
		NEED(sscanf(c->ps.debug_stall, "%d:%ld:%lf%c", &r, &st, &sl, &tail) == 3,
		     "ps.debug_stall (WEFT_PS_DEBUG_STALL): expected rank:step:seconds, got '%s'",
		     c->ps.debug_stall);
	}
	if (c->ps.debug_slow[0]) {
		int r;
		double f;
		char tail;
		NEED(sscanf(c->ps.debug_slow, "%d:%lf%c", &r, &f, &tail) == 2 && r >= 0 && f >= 1 &&
			     f <= 1000,
		     "ps.debug_slow (WEFT_PS_DEBUG_SLOW): expected rank:factor with rank >= 0 and "
		     "factor in [1, 1000], got '%s'",
		     c->ps.debug_slow);
	}
	NEED(c->strategy.backup_workers >= 0 && c->strategy.backup_workers <= 1000000,
	     "strategy.backup_workers: must be >= 0 (and less than the workers), got %ld",
	     c->strategy.backup_workers);
	NEED(c->strategy.backup_workers == 0 ||
		     (strcmp(c->strategy.name, "parameter_server") == 0 &&
		      c->ps.mode == WF_PS_MODE_SYNC),
	     "strategy.backup_workers: %ld needs strategy.name parameter_server with "
	     "strategy.mode sync (got %s, %s)",
	     c->strategy.backup_workers, c->strategy.name, c->strategy.mode);
	NEED(c->strategy.min_workers >= 0 && c->strategy.min_workers <= 1000000,
	     "strategy.min_workers: must be >= 0 (0: not elastic), got %ld",
	     c->strategy.min_workers);
	NEED(c->strategy.min_workers == 0 || strcmp(c->strategy.name, "allreduce") == 0 ||
		     (strcmp(c->strategy.name, "parameter_server") == 0 &&
		      c->ps.mode == WF_PS_MODE_SYNC),
	     "strategy.min_workers: %ld (elastic membership) needs strategy.name allreduce, or "
	     "parameter_server with strategy.mode sync (got %s, %s)",
	     c->strategy.min_workers, c->strategy.name, c->strategy.mode);
	NEED(c->strategy.commit_every >= 1,
	     "strategy.commit_every: must be >= 1 (steps between commits), got %ld",
	     c->strategy.commit_every);
	NEED(strcmp(c->strategy.elastic_lr, "linear") == 0 ||
		     strcmp(c->strategy.elastic_lr, "fixed") == 0,
	     "strategy.elastic_lr: expected linear or fixed, got '%s'", c->strategy.elastic_lr);
	NEED(strcmp(c->strategy.elastic_batch, "worker") == 0 ||
		     strcmp(c->strategy.elastic_batch, "global") == 0,
	     "strategy.elastic_batch: expected worker or global, got '%s'",
	     c->strategy.elastic_batch);
	int global = strcmp(c->strategy.elastic_batch, "global") == 0;
	NEED(!global || (c->strategy.min_workers > 0 &&
			 (strcmp(c->strategy.name, "allreduce") == 0 ||
			  (strcmp(c->strategy.name, "parameter_server") == 0 &&
			   c->ps.mode == WF_PS_MODE_SYNC))),
	     "strategy.elastic_batch: global needs elastic membership (strategy.min_workers > "
	     "0, as weft launch --elastic sets) with strategy.name allreduce, or "
	     "parameter_server with strategy.mode sync (got %s, %s, min_workers %ld)",
	     c->strategy.name, c->strategy.mode, c->strategy.min_workers);
	NEED(!global || strcmp(c->strategy.name, "parameter_server") != 0 ||
		     c->strategy.backup_workers == 0,
	     "strategy.elastic_batch: global with parameter servers needs "
	     "strategy.backup_workers 0 (got %ld): a step whose late pushes are dropped would "
	     "train fewer than the cluster's units every step",
	     c->strategy.backup_workers);
	NEED(c->strategy.elastic_timeout >= 0,
	     "strategy.elastic_timeout: must be >= 0 (0: wait for ever), got %g",
	     c->strategy.elastic_timeout);
	NEED(c->strategy.bucket_mb > 0 && c->strategy.bucket_mb <= 4096,
	     "strategy.bucket_mb: must be in (0, 4096], got %g", c->strategy.bucket_mb);
	return 0;
}

/* checkpoint.* and log.* */
static int check_outputs(wf_config *c, wf_err *err)
{
	NEED(c->checkpoint.dir[0], "checkpoint.dir: must not be empty");
	NEED(c->checkpoint.every_steps >= 0, "checkpoint.every_steps: must be >= 0, got %ld",
	     c->checkpoint.every_steps);
	NEED(c->checkpoint.keep >= 1, "checkpoint.keep: must be >= 1, got %ld", c->checkpoint.keep);
	NEED(c->log.dir[0], "log.dir: must not be empty");
	NEED(c->log.every_steps >= 1, "log.every_steps: must be >= 1, got %ld", c->log.every_steps);
	return 0;
}

/* the settings that make training do what Keras does: initialisers, batch
 * norm momentum, width, clipping, label smoothing, divergence */
static int check_keras(wf_config *c, wf_err *err)
{
	wf_init ki;
	NEED(strcmp(c->model.kernel_initializer, "auto") == 0 ||
		     wf_init_parse(c->model.kernel_initializer, &ki) == 0,
	     "model.kernel_initializer: expected auto, glorot_uniform, glorot_normal, he_normal, "
	     "he_uniform, lecun_normal or lecun_uniform, got '%s'",
	     c->model.kernel_initializer);
	NEED(c->model.bn_momentum >= 0 && c->model.bn_momentum < 1,
	     "model.bn_momentum: must be in [0, 1) (0: the model's own), got %g",
	     c->model.bn_momentum);
	NEED(c->model.alpha > 0 && c->model.alpha <= 4, "model.alpha: must be in (0, 4], got %g",
	     c->model.alpha);
	NEED(c->model.alpha == 1 || strcmp(c->model.name, "mobilenetv2") == 0,
	     "model.alpha: only mobilenetv2 has a width multiplier (model.name is '%s')",
	     c->model.name);
	NEED(c->optimizer.clipnorm >= 0, "optimizer.clipnorm: must be >= 0 (0: off), got %g",
	     c->optimizer.clipnorm);
	NEED(c->optimizer.global_clipnorm >= 0,
	     "optimizer.global_clipnorm: must be >= 0 (0: off), got %g",
	     c->optimizer.global_clipnorm);
	NEED(!(c->optimizer.clipnorm > 0 && c->optimizer.global_clipnorm > 0),
	     "optimizer.clipnorm and optimizer.global_clipnorm: set at most one (as Keras)");
	NEED(c->optimizer.clipvalue >= 0, "optimizer.clipvalue: must be >= 0 (0: off), got %g",
	     c->optimizer.clipvalue);
	NEED(!(strcmp(c->strategy.name, "parameter_server") == 0 &&
	       (c->optimizer.clipnorm > 0 || c->optimizer.global_clipnorm > 0)),
	     "optimizer.clipnorm/global_clipnorm: not supported with strategy.name "
	     "parameter_server (each server holds only part of the gradient); use clipvalue");
	NEED(c->train.label_smoothing >= 0 && c->train.label_smoothing < 1,
	     "train.label_smoothing: must be in [0, 1), got %g", c->train.label_smoothing);
	NEED(c->train.divergence_factor == 0 || c->train.divergence_factor > 1,
	     "train.divergence_factor: must be > 1 (or 0: off), got %g",
	     c->train.divergence_factor);
	return 0;
	return 0;
}

int wf_config_validate(wf_config *c, wf_err *err)
{
	int rc = check_model_data(c, err);
	if (!rc)
		rc = check_train(c, err);
	if (!rc)
		rc = check_optimizer(c, err);
	if (!rc)
		rc = check_strategy(c, err);
	if (!rc)
		rc = check_outputs(c, err);
	return rc ? rc : check_keras(c, err);
}

int wf_config_check_workers(const wf_config *c, int workers, wf_err *err)
{
	NEED(c->strategy.backup_workers < workers,
	     "strategy.backup_workers: %ld must be less than the job's %d training worker%s "
	     "(a step needs at least one push)",
	     c->strategy.backup_workers, workers, workers == 1 ? "" : "s");
	NEED(c->strategy.min_workers <= workers,
	     "strategy.min_workers: %ld is more than the cluster's %d training worker%s (list "
	     "every worker that may join in TF_CONFIG's cluster)",
	     c->strategy.min_workers, workers, workers == 1 ? "" : "s");
	return 0;
}

double wf_config_slow_factor(const wf_config *c, int rank)
{
	int r;
	double f;
	if (!c->ps.debug_slow[0] || sscanf(c->ps.debug_slow, "%d:%lf", &r, &f) != 2 || r != rank)
		return 1;
	return f;
}
