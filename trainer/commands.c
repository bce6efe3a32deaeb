#include "trainer/commands.h"

#include "common/events.h"
#include "common/image.h"
#include "common/cpus.h"
#include "common/log.h"
#include "kernels/kernels.h"
#include "model/model.h"
#include "trainer/cli.h"
#include "trainer/config.h"
#include "trainer/evaluate.h"
#include "trainer/job.h"
#include "trainer/role.h"
#include "trainer/train.h"
#include "worker/data.h"
#include "worker/images.h"

#include <limits.h>
#include <sched.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef WEFT_VERSION
#define WEFT_VERSION "0.1.0"
#endif

/* ---- weft train -------------------------------------------------------- */

int wf_cmd_train(int argc, char **argv, wf_err *err)
{
	const char *config = NULL, *device = NULL, *key_dir = NULL, *precision = NULL;
	long threads = LONG_MIN, accumulate = -1, stop_at = 0; /* LONG_MIN: not given */
	int resume = 0, help_config = 0, no_tty = 0, insecure = 0, fresh = 0;
	wf_cli_list sets = {0}, pos = {0};
	const wf_flag flags[] = {
		{"config", WF_FLAG_STR, &config, "FILE", "training config (JSON; required)"},
		{"set", WF_FLAG_LIST, &sets, "KEY=VALUE",
		 "override a config key, e.g. --set optimizer.lr=0.05 (repeatable; the value is "
		 "parsed as JSON when it parses, else taken as a string)"},
		{"device", WF_FLAG_STR, &device, "cpu|ref|cuda|auto",
		 "same as --set train.device=..."},
		{"threads", WF_FLAG_INT, &threads, "N", "same as --set train.threads=N"},
		{"precision", WF_FLAG_STR, &precision, "fp32|tf32|bf16|fp16|auto",
		 "same as --set train.precision=..."},
		{"accumulate", WF_FLAG_INT, &accumulate, "N",
		 "same as --set train.accumulate=N: sum N micro-batches per optimizer step"},
		{"resume", WF_FLAG_BOOL, &resume, NULL,
		 "continue from the newest complete checkpoint in checkpoint.dir (fresh start, "
		 "with a notice, when there is none)"},
		{"stop-at-step", WF_FLAG_INT, &stop_at, "N",
		 "write a checkpoint and exit 0 once N steps are done (the schedule still spans "
		 "train.steps; continue later with --resume)"},
		{"help-config", WF_FLAG_BOOL, &help_config, NULL,
		 "print the reference of every config key and exit"},
		{"no-progress-line", WF_FLAG_BOOL, &no_tty, NULL,
		 "plain progress lines even on a terminal"},
		{"key-dir", WF_FLAG_STR, &key_dir, "DIR",
		 "parameter_server: the cluster's CURVE key files (`weft keygen`); same as --set "
		 "cluster.key_dir=DIR (environment: WEFT_KEY_DIR)"},
		{"fresh", WF_FLAG_BOOL, &fresh, NULL,
		 "parameter_server chief: start over at step 0 even when checkpoint.dir holds a "
		 "complete checkpoint (by default a chief resumes from it, as a restarted pod "
		 "must)"},
		{"insecure", WF_FLAG_BOOL, &insecure, NULL,
		 "parameter_server: plain TCP without keys (anyone who reaches a server can read "
		 "and overwrite the model)"},
		{0},
	};
	char models[800];
	snprintf(models, sizeof(models),
		 "Train a model as the config says, in this process (strategy.name local).\n"
		 "With TF_CONFIG (strategy.name parameter_server) the process becomes its task:\n"
		 "chief or worker trains against the parameter servers, ps serves, evaluator\n"
		 "evaluates new checkpoints; `weft launch` starts such a cluster locally.\n"
		 "Writes metrics.jsonl, TensorBoard events and config.json to log.dir and\n"
		 "step-N checkpoints to checkpoint.dir. SIGINT/SIGTERM finish the current step,\n"
		 "write a checkpoint and exit 130. Models: %s.",
		 wf_model_zoo_names());
	const wf_command_help help = {"weft train --config FILE [--set KEY=VALUE ...] [options]",
				      models};
	wf_config cfg;
	wf_train_result res = {0};
	int rc = wf_cli_parse(&help, flags, argc, argv, &pos, 0, err);
	if (rc != 0)
		goto free_lists;
	if (help_config) {
		wf_config_print_reference(stdout);
		printf("\nEnvironment variables:\n\n");
		wf_config_print_env_reference(stdout);
		rc = 1;
		goto free_lists;
	}
	if (!config) {
		rc = wf_errf(err, WF_EINVAL, "train: --config FILE is required (see --help)");
		goto free_lists;
	}
	if ((rc = wf_config_load(&cfg, config, sets.items, sets.n, err)) != 0)
		goto free_lists;
	char buf[64];
	if (device) {
		snprintf(buf, sizeof(buf), "train.device=%s", device);
		if ((rc = wf_config_set(&cfg, buf, err)) != 0)
			goto free_lists;
	}
	if (precision) {
		snprintf(buf, sizeof(buf), "train.precision=%s", precision);
		if ((rc = wf_config_set(&cfg, buf, err)) != 0)
			goto free_lists;
	}
	if (threads != LONG_MIN) /* --threads -1 is refused by the validation, not ignored */
		cfg.train.threads = threads;
	if (cfg.train.threads == 0 && !getenv("OMP_NUM_THREADS")) /* the CPUs this process has */
		cfg.train.threads = wf_config_default_threads();
	if (accumulate >= 0)
		cfg.train.accumulate = accumulate;
	if ((rc = wf_job_security_flags(&cfg, key_dir, insecure, err)) != 0)
		goto free_lists;
	wf_config_apply_process(&cfg);
	if ((rc = wf_config_validate(&cfg, err)) != 0) {
		wf_err_wrap(err, "%s", config);
		goto free_lists;
	}
	if (stop_at < 0) {
		rc = wf_errf(err, WF_EINVAL, "train: --stop-at-step must be >= 1, got %ld",
			     stop_at);
		goto free_lists;
	}
	if (resume && fresh) {
		rc = wf_errf(err, WF_EINVAL, "train: --resume and --fresh: choose one");
		goto free_lists;
	}
	wf_train_opts opts = {
		.resume = resume, .tty = no_tty ? 0 : -1, .stop_at = stop_at, .fresh = fresh};
	int trained = 0; /* 0: this process was a ps or an evaluator (TF_CONFIG) */
	rc = wf_role_run(&cfg, &opts, &res, &trained, err);
	if (rc == 0 && trained)
		wf_event("trained",
			 json_pack("{s:I, s:f, s:f, s:f, s:f}", "steps", (json_int_t)res.steps_done,
				   "loss", res.loss, "accuracy", res.accuracy, "eval_loss",
				   res.eval_loss, "eval_accuracy", res.eval_accuracy));
	wf_events_close();
	if (rc == 0 && trained && res.reports) {
		printf("trained %ld steps: loss %.4f accuracy %.4f", res.steps_done, res.loss,
		       res.accuracy);
		if (res.eval_loss >= 0)
			printf("  eval_loss %.4f eval_accuracy %.4f", res.eval_loss,
			       res.eval_accuracy);
		printf("\n");
	}
free_lists:
	wf_cli_list_free(&sets);
	wf_cli_list_free(&pos);
	return rc;
}

/* ---- weft eval --------------------------------------------------------- */

/* weft eval --json: one line; names from the data set, else the model. */
static void print_eval_json(const wf_eval_result *r, const wf_model_meta *meta,
			    const wf_dataset_info *di, int k, const long *confusion)
{
	json_t *o = json_object(), *names = json_array(), *per = json_array(), *cm = json_array();
	json_object_set_new(o, "loss", json_real(r->loss));
	json_object_set_new(o, "accuracy", json_real(r->accuracy));
	json_object_set_new(o, "top5_accuracy", json_real(r->top5));
	json_object_set_new(o, "count", json_integer(r->count));
	json_object_set_new(o, "trained_steps", json_integer(meta->trained_steps));
	for (int t = 0; t < k; t++) {
		const char *name = di->classes && di->classes[t] ? di->classes[t]
				   : meta->class_names && t < meta->nclasses && meta->class_names[t]
					   ? meta->class_names[t]
					   : NULL;
		char num[24];
		snprintf(num, sizeof(num), "%d", t);
		json_array_append_new(names, json_string(name ? name : num));
		json_t *row = json_array();
		long n = 0;
		for (int p = 0; p < k; p++) {
			n += confusion[(size_t)t * k + p];
			json_array_append_new(row, json_integer(confusion[(size_t)t * k + p]));
		}
		json_array_append_new(cm, row);
		json_array_append_new(per, n ? json_real((double)confusion[(size_t)t * k + t] / n)
					     : json_null());
	}
	json_object_set_new(o, "class_names", names);
	json_object_set_new(o, "per_class_accuracy", per);
	json_object_set_new(o, "confusion_matrix", cm);
	char *s = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(9));
	if (s)
		printf("%s\n", s);
	free(s);
	json_decref(o);
}

int wf_cmd_eval(int argc, char **argv, wf_err *err)
{
	const char *model_path = NULL, *data_path = NULL, *device = "auto", *precision = NULL;
	long batch = 100, threads = 0, samples = 0;
	int json = 0;
	wf_cli_list pos = {0};
	const wf_flag flags[] = {
		{"model", WF_FLAG_STR, &model_path, "FILE", "model file (model.h5; required)"},
		{"data", WF_FLAG_STR, &data_path, "FILE", "dataset file (required)"},
		{"device", WF_FLAG_STR, &device, "cpu|ref|cuda|auto", "kernel backend (auto)"},
		{"threads", WF_FLAG_INT, &threads, "N", "CPU threads (0: library default)"},
		{"batch", WF_FLAG_INT, &batch, "N", "samples per forward pass (100)"},
		{"samples", WF_FLAG_INT, &samples, "N",
		 "evaluate the first N samples of the file (default: all of them)"},
		{"precision", WF_FLAG_STR, &precision, "fp32|tf32|bf16|fp16|int8|auto",
		 "compute precision (default: the model file's, as weft-serve serves it, else "
		 "fp32); int8 needs a model exported with --quantize int8"},
		{"json", WF_FLAG_BOOL, &json, NULL,
		 "also print one JSON line with the results: loss, accuracy, top5_accuracy, "
		 "class_names, per_class_accuracy, confusion_matrix (rows: true class)"},
		{0},
	};
	const wf_command_help help = {
		"weft eval --model FILE --data FILE [options]",
		"Evaluate a model file on a dataset with the preprocessing stored in the model:\n"
		"prints the mean loss and the top-1 accuracy."};
	wf_eval_setup es = {0};
	wf_eval_result r;
	long *confusion = NULL;
	int rc = wf_cli_parse(&help, flags, argc, argv, &pos, 0, err);
	if (rc != 0)
		goto cleanup;
	if (!model_path || !data_path) {
		rc = wf_errf(err, WF_EINVAL, "eval: --model FILE and --data FILE are required");
		goto cleanup;
	}
	if (batch < 1 || batch > 1 << 16) {
		rc = wf_errf(err, WF_EINVAL, "eval: --batch must be in [1, 65536], got %ld", batch);
		goto cleanup;
	}
	if (samples < 0) {
		rc = wf_errf(err, WF_EINVAL, "eval: --samples must be >= 0, got %ld", samples);
		goto cleanup;
	}
	if (threads < 0 || threads > 4096) {
		rc = wf_errf(err, WF_EINVAL, "eval: --threads must be in [0, 4096], got %ld",
			     threads);
		goto cleanup;
	}
	if (threads == 0 && !getenv("OMP_NUM_THREADS"))
		threads = wf_config_default_threads();
	wf_config env;
	wf_backend_opts bo;
	wf_config_from_env(&env);
	wf_config_backend_opts(&env, &bo);
	bo.threads = (int)threads;
	if ((rc = wf_eval_setup_open(&es, model_path, data_path, device, &bo, precision, (int)batch,
				     err)) != 0)
		goto cleanup;
	if (!strcmp(es.precision, "int8") && !wf_exec_int8_convs(es.ex))
		wf_warn("%s has no int8 calibration (weft export --quantize int8): evaluating in "
			"fp32",
			model_path);
	else if (precision && wf_backend_precision_fell_back(precision, es.precision))
		wf_warn("--precision %s: the %s device has no native %s: evaluating in %s",
			precision, es.be->name, precision, es.precision);
	int classes = es.m->classes;
	if (json && !(confusion = calloc((size_t)classes * (size_t)classes, sizeof(long)))) {
		rc = wf_errf(err, WF_ENOMEM, "eval: out of memory");
		goto cleanup;
	}
	if ((rc = wf_evaluate_ex(es.ex, es.ds, &es.meta, (int)batch, samples, &r, confusion,
				 err)) != 0)
		goto cleanup;
	printf("loss %.4f accuracy %.4f top-5 %.4f (%ld samples, model trained %ld steps, %s)\n",
	       r.loss, r.accuracy, r.top5, r.count, es.meta.trained_steps, es.precision);
	if (json)
		print_eval_json(&r, &es.meta, wf_dataset_info_get(es.ds), classes, confusion);
cleanup:
	free(confusion);
	wf_eval_setup_free(&es);
	wf_cli_list_free(&pos);
	return rc;
}

/* ---- weft data --------------------------------------------------------- */

static int cmd_data_synth(int argc, char **argv, wf_err *err)
{
	const char *out = NULL;
	long count = -1, size = 32, seed = 1, classes = 10;
	wf_cli_list pos = {0};
	const wf_flag flags[] = {
		{"out", WF_FLAG_STR, &out, "FILE",
		 "dataset file to write (required; a missing folder is created)"},
		{"count", WF_FLAG_INT, &count, "N", "number of samples (required)"},
		{"size", WF_FLAG_INT, &size, "S", "images are S x S x 3 (32)"},
		{"seed", WF_FLAG_INT, &seed, "K", "generator seed (1)"},
		{"classes", WF_FLAG_INT, &classes, "C", "number of classes, at most 10 (10)"},
		{0},
	};
	const wf_command_help help = {
		"weft data synth --out FILE --count N [--size S] [--seed K] [--classes C]",
		"Generate a learnable synthetic dataset: each class is a shape or pattern that a\n"
		"small CNN separates well. Use different seeds for train and eval files."};
	int rc = wf_cli_parse(&help, flags, argc, argv, &pos, 0, err);
	wf_cli_list_free(&pos);
	if (rc != 0)
		return rc;
	if (!out || count < 0)
		return wf_errf(err, WF_EINVAL, "data synth: --out FILE and --count N are required");
	if (count < 1 || size < 4 || size > 4096 || classes < 1 || classes > 10 || seed < 0)
		return wf_errf(err, WF_EINVAL,
			       "data synth: need --count >= 1, --size in [4, 4096], --classes in "
			       "[1, 10], --seed >= 0 (got %ld, %ld, %ld, %ld)",
			       count, size, classes, seed);
	wf_synth_cfg sc = {
		.count = count, .size = (int)size, .seed = (uint64_t)seed, .classes = (int)classes};
	if ((rc = wf_data_synth(out, &sc, err)) != 0)
		return rc;
	printf("wrote %s: %ld samples of %ldx%ldx3, %ld classes\n", out, count, size, size,
	       classes);
	return 0;
}

static int cmd_data_cifar10(int argc, char **argv, wf_err *err)
{
	const char *out = NULL;
	wf_cli_list pos = {0};
	const wf_flag flags[] = {
		{"out", WF_FLAG_STR, &out, "FILE",
		 "dataset file to write (required; a missing folder is created)"},
		{0},
	};
	const wf_command_help help = {
		"weft data cifar10 --out FILE BATCH_FILE...",
		"Convert CIFAR-10 binary batches (data_batch_1.bin ... or test_batch.bin, from\n"
		"cifar-10-binary.tar.gz) into one dataset file."};
	int rc = wf_cli_parse(&help, flags, argc, argv, &pos, 1 << 16, err);
	if (rc == 0 && (!out || pos.n == 0))
		rc = wf_errf(err, WF_EINVAL,
			     "data cifar10: --out FILE and at least one BATCH_FILE are required");
	if (rc == 0)
		rc = wf_data_cifar10(out, pos.items, pos.n, err);
	if (rc == 0)
		printf("wrote %s from %d batch file(s)\n", out, pos.n);
	wf_cli_list_free(&pos);
	return rc;
}

/* "S" or "HxW" into h, w; 0 on success. */
static int parse_size(const char *s, int *h, int *w)
{
	char *end;
	long a = strtol(s, &end, 10), b = a;
	if (end == s)
		return -1;
	if (*end == 'x' || *end == 'X') {
		const char *t = end + 1;
		b = strtol(t, &end, 10);
		if (end == t)
			return -1;
	}
	if (*end || a < 1 || b < 1 || a > 8192 || b > 8192)
		return -1;
	*h = (int)a;
	*w = (int)b;
	return 0;
}

static int cmd_data_images(int argc, char **argv, wf_err *err)
{
	const char *out = NULL, *val_out = NULL, *size = "224", *resize = "fit", *split = NULL;
	long threads = 0, seed = 1, encoded = 0, gray = 0, max_pixels = 0;
	wf_cli_list pos = {0};
	const wf_flag flags[] = {
		{"out", WF_FLAG_STR, &out, "FILE",
		 "dataset file to write (required; a missing folder is created)"},
		{"size", WF_FLAG_STR, &size, "S|HxW", "stored image size (224)"},
		{"resize", WF_FLAG_STR, &resize, "MODE",
		 "fit: stretch (Keras's default), crop: centre crop to the aspect ratio, pad: "
		 "fit inside and pad with zeros (fit)"},
		{"val-split", WF_FLAG_STR, &split, "F", "fraction of the images for validation"},
		{"val-out", WF_FLAG_STR, &val_out, "FILE",
		 "validation dataset file (with --val-split; a missing folder is created)"},
		{"threads", WF_FLAG_INT, &threads, "N", "decoding threads (0: all cores)"},
		{"encoded", WF_FLAG_BOOL, &encoded, NULL,
		 "keep the JPEG/PNG bytes; the reader decodes them during training"},
		{"gray", WF_FLAG_BOOL, &gray, NULL, "store 1 channel (luma) instead of RGB"},
		{"seed", WF_FLAG_INT, &seed, "K", "seed of the train/validation split (1)"},
		{"max-pixels", WF_FLAG_INT, &max_pixels, "N",
		 "skip images above N pixels (width x height; 0: 67108864)"},
		{0},
	};
	const wf_command_help help = {
		"weft data images DIR --out FILE [--size S|HxW] [--resize fit|crop|pad]\n"
		"                 [--val-split F --val-out FILE] [--threads N] [--encoded] [--seed "
		"K]",
		"Convert a folder of photos with one sub-folder per class (DIR/cats/1.jpg,\n"
		"DIR/dogs/2.png: the layout of Keras image_dataset_from_directory and torchvision\n"
		"ImageFolder) into a dataset file; class names are the sorted folder names.\n"
		"JPEG (baseline, progressive, gray, CMYK) and PNG (any kind) are read with their\n"
		"EXIF orientation, by the same code weft-serve uses for request images.\n"
		"Unreadable images are skipped and listed on stderr and in FILE.skipped.txt;\n"
		"other files (.DS_Store, Thumbs.db, ...) are ignored."};
	int rc = wf_cli_parse(&help, flags, argc, argv, &pos, 1, err);
	if (rc != 0)
		goto out;
	wf_images_cfg ic;
	wf_images_cfg_default(&ic);
	if (pos.n != 1 || !out) {
		rc = wf_errf(err, WF_EINVAL, "data images: DIR and --out FILE are required");
		goto out;
	}
	ic.dir = pos.items[0];
	ic.out = out;
	ic.val_out = val_out;
	if (parse_size(size, &ic.h, &ic.w) != 0) {
		rc = wf_errf(err, WF_EINVAL, "data images: --size %s: want S or HxW in 1..8192",
			     size);
		goto out;
	}
	if ((ic.resize = wf_image_resize_parse(resize)) < 0) {
		rc = wf_errf(err, WF_EINVAL, "data images: --resize %s: want fit, crop or pad",
			     resize);
		goto out;
	}
	if (split) {
		char *end;
		ic.val_split = strtod(split, &end);
		if (*end || !(ic.val_split > 0 && ic.val_split < 1)) {
			rc = wf_errf(err, WF_EINVAL, "data images: --val-split %s: want 0 < F < 1",
				     split);
			goto out;
		}
	}
	if (threads < 0 || threads > 1024 || seed < 0 || max_pixels < 0) {
		rc = wf_errf(err, WF_EINVAL,
			     "data images: need --threads in [0, 1024], --seed >= 0, --max-pixels "
			     ">= 0");
		goto out;
	}
	long cores = sysconf(_SC_NPROCESSORS_ONLN);
	cpu_set_t set; /* the CPUs this process may run on (taskset, containers) */
	if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0)
		cores = CPU_COUNT(&set);
	ic.threads = threads ? (int)threads : (int)(cores > 0 ? cores : 1);
	ic.seed = (uint64_t)seed;
	ic.encoded = (int)encoded;
	ic.c = gray ? 1 : 3;
	ic.max_pixels = max_pixels;
	wf_images_result r;
	if ((rc = wf_data_images(&ic, &r, err)) != 0)
		goto out;
	printf("wrote %s: %ld samples of %dx%dx%d%s, %d classes", out, r.train, ic.h, ic.w, ic.c,
	       encoded ? " (encoded)" : "", r.nclasses);
	if (val_out)
		printf("; %s: %ld samples", val_out, r.val);
	printf("; %ld of %ld images skipped", r.skipped, r.found);
	if (r.skipped)
		printf(" (listed in %s.skipped.txt)", out);
	printf("\n");
out:
	wf_cli_list_free(&pos);
	return rc;
}

int wf_cmd_data(int argc, char **argv, wf_err *err)
{
	static const char usage[] =
		"usage: weft data <converter> [options]\n\n"
		"converters:\n"
		"  synth     generate a learnable synthetic dataset\n"
		"  cifar10   convert CIFAR-10 binary batches\n"
		"  images    convert a folder of photos (one sub-folder per class)\n\n"
		"`weft data <converter> --help` documents each one's flags.\n";
	if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
		fputs(usage, argc < 2 ? stderr : stdout);
		return argc < 2 ? wf_errf(err, WF_EINVAL,
					  "data: which converter? (synth, cifar10, images)")
				: 1;
	}
	if (strcmp(argv[1], "synth") == 0)
		return cmd_data_synth(argc - 1, argv + 1, err);
	if (strcmp(argv[1], "cifar10") == 0)
		return cmd_data_cifar10(argc - 1, argv + 1, err);
	if (strcmp(argv[1], "images") == 0)
		return cmd_data_images(argc - 1, argv + 1, err);
	return wf_errf(err, WF_EINVAL, "data: unknown converter '%s' (synth, cifar10, images)",
		       argv[1]);
}

/* ---- weft inspect ------------------------------------------------------ */

static void dump_view(const wf_model *m, const wf_view *v)
{
	const float *base = v->trainable ? m->params : m->state;
	printf("%s", v->name);
	for (size_t i = 0; i < v->count; i++)
		printf(" %.9g", (double)base[v->offset + i]);
	printf("\n");
}

int wf_cmd_inspect(int argc, char **argv, wf_err *err)
{
	const char *path = NULL;
	int dump = 0;
	wf_cli_list pos = {0};
	const wf_flag flags[] = {
		{"model", WF_FLAG_STR, &path, "FILE", "model file (required)"},
		{"dump", WF_FLAG_BOOL, &dump, NULL,
		 "print every weight, one line per tensor: name then values (%.9g, exact)"},
		{0},
	};
	const wf_command_help help = {
		"weft inspect --model FILE [--dump]",
		"Describe a model file: input, classes, preprocessing, trained steps and each\n"
		"tensor's shape; with --dump, every value (to compare two files)."};
	wf_model *m = NULL;
	wf_model_meta meta;
	wf_model_meta_init(&meta);
	int rc = wf_cli_parse(&help, flags, argc, argv, &pos, 0, err);
	wf_cli_list_free(&pos);
	if (rc != 0)
		goto cleanup;
	if (!path) {
		rc = wf_errf(err, WF_EINVAL, "inspect: --model FILE is required");
		goto cleanup;
	}
	if ((rc = wf_model_load(&m, &meta, path, err)) != 0)
		goto cleanup;
	if (dump) {
		for (int i = 0; i < m->nviews; i++)
			dump_view(m, &m->views[i]);
		goto cleanup;
	}
	printf("model %s\ninput %dx%dx%d, %d classes, %d layers, %zu parameters, %zu state\n", path,
	       m->in_h, m->in_w, m->in_c, m->classes, m->nlayers, m->nparams, m->nstate);
	printf("trained_steps %ld\npreprocessing scale %g mean %g std %g order %s\n",
	       meta.trained_steps, (double)meta.scale, (double)meta.mean[0], (double)meta.std[0],
	       meta.channel_order);
	if (meta.pre_in_model)
		printf("preprocessing in the model (its first layers): it takes raw pixels, "
		       "numbers "
		       "included\n");
	if (meta.precision[0])
		printf("serving precision %s\n", meta.precision);
	for (int i = 0; i < m->nviews; i++) {
		const wf_view *v = &m->views[i];
		printf("  %-40s %s [", v->name, v->trainable ? "param" : "state");
		for (int d = 0; d < v->ndim; d++)
			printf("%s%d", d ? "," : "", v->shape[d]);
		printf("]\n");
	}
cleanup:
	if (m)
		wf_model_free(m);
	wf_model_meta_free(&meta);
	return rc;
}

/* ---- weft version ------------------------------------------------------ */

int wf_cmd_version(int argc, char **argv, wf_err *err)
{
	wf_cli_list pos = {0};
	const wf_flag flags[] = {{0}};
	const wf_command_help help = {"weft version",
				      "Print the version and the backends built in."};
	int rc = wf_cli_parse(&help, flags, argc, argv, &pos, 0, err);
	wf_cli_list_free(&pos);
	if (rc != 0)
		return rc;
	printf("weft %s (backends: %s; models: %s)\n", WEFT_VERSION, wf_backend_list(),
	       wf_model_zoo_names());
	double quota = wf_cpus_quota_at("/proc/self/cgroup", "/sys/fs/cgroup");
	const char *wait = getenv("OMP_WAIT_POLICY"), *spin = getenv("GOMP_SPINCOUNT");
	char q[32] = "none";
	if (quota > 0)
		snprintf(q, sizeof(q), "%.3g CPUs", quota);
	printf("cpus: %d default threads (affinity %d, cgroup quota %s, busy %d); OpenMP wait "
	       "policy %s%s%s\n",
	       wf_config_default_threads(), wf_cpus_affinity(), q,
	       wf_cpus_busy(WF_CPUS_SAMPLE_SECONDS), wait ? wait : "(unset)",
	       spin ? ", GOMP_SPINCOUNT " : "", spin ? spin : "");
	return 0;
}
