#include "trainer/commands.h"

#include "common/log.h"
#include "kernels/kernels.h"
#include "model/model.h"
#include "trainer/cli.h"
#include "trainer/config.h"
#include "trainer/evaluate.h"
#include "trainer/role.h"
#include "trainer/train.h"
#include "worker/data.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef WEFT_VERSION
#define WEFT_VERSION "0.1.0"
#endif

/* ---- weft train -------------------------------------------------------- */

int wf_cmd_train(int argc, char **argv, wf_err *err)
{
	const char *config = NULL, *device = NULL, *precision = NULL;
	long threads = -1, accumulate = -1, stop_at = 0;
	int resume = 0, help_config = 0, no_tty = 0;
	wf_cli_list sets = {0}, pos = {0};
	const wf_flag flags[] = {
		{"config", WF_FLAG_STR, &config, "FILE", "training config (JSON; required)"},
		{"set", WF_FLAG_LIST, &sets, "KEY=VALUE",
		 "override a config key, e.g. --set optimizer.lr=0.05 (repeatable; the value is "
		 "parsed as JSON when it parses, else taken as a string)"},
		{"device", WF_FLAG_STR, &device, "cpu|ref|cuda|auto",
		 "same as --set train.device=..."},
		{"threads", WF_FLAG_INT, &threads, "N", "same as --set train.threads=N"},
		{"precision", WF_FLAG_STR, &precision, "fp32|bf16|auto",
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
	if (threads >= 0)
		cfg.train.threads = threads;
	if (accumulate >= 0)
		cfg.train.accumulate = accumulate;
	if ((rc = wf_config_validate(&cfg, err)) != 0) {
		wf_err_wrap(err, "%s", config);
		goto free_lists;
	}
	if (stop_at < 0) {
		rc = wf_errf(err, WF_EINVAL, "train: --stop-at-step must be >= 1, got %ld",
			     stop_at);
		goto free_lists;
	}
	wf_train_opts opts = {.resume = resume, .tty = no_tty ? 0 : -1, .stop_at = stop_at};
	int trained = 0; /* 0: this process was a ps or an evaluator (TF_CONFIG) */
	rc = wf_role_run(&cfg, &opts, &res, &trained, err);
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

int wf_cmd_eval(int argc, char **argv, wf_err *err)
{
	const char *model_path = NULL, *data_path = NULL, *device = "auto";
	long batch = 100, threads = 0;
	int json = 0;
	wf_cli_list pos = {0};
	const wf_flag flags[] = {
		{"model", WF_FLAG_STR, &model_path, "FILE", "model file (model.h5; required)"},
		{"data", WF_FLAG_STR, &data_path, "FILE", "dataset file (required)"},
		{"device", WF_FLAG_STR, &device, "cpu|ref|cuda|auto", "kernel backend (auto)"},
		{"threads", WF_FLAG_INT, &threads, "N", "CPU threads (0: library default)"},
		{"batch", WF_FLAG_INT, &batch, "N", "samples per forward pass (100)"},
		{"json", WF_FLAG_BOOL, &json, NULL, "also print one JSON line with the results"},
		{0},
	};
	const wf_command_help help = {
		"weft eval --model FILE --data FILE [options]",
		"Evaluate a model file on a dataset with the preprocessing stored in the model:\n"
		"prints the mean loss and the top-1 accuracy."};
	wf_model *m = NULL;
	wf_model_meta meta;
	wf_dataset *ds = NULL;
	wf_backend *be = NULL;
	wf_exec *ex = NULL;
	wf_eval_result r;
	wf_model_meta_init(&meta);
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
	if ((rc = wf_model_load(&m, &meta, model_path, err)) != 0)
		goto cleanup;
	if ((rc = wf_dataset_open(&ds, data_path, err)) != 0)
		goto cleanup;
	if ((rc = wf_check_data_fits(m, ds, data_path, err)) != 0) {
		wf_err_wrap(err, "model %s", model_path);
		goto cleanup;
	}
	if ((rc = wf_backend_create(&be, device, (int)threads, err)) != 0)
		goto cleanup;
	if ((rc = wf_exec_create(&ex, m, be, (int)batch, 0, err)) != 0)
		goto cleanup;
	if ((rc = wf_evaluate(ex, ds, &meta, (int)batch, &r, err)) != 0)
		goto cleanup;
	printf("loss %.4f accuracy %.4f (%ld samples, model trained %ld steps)\n", r.loss,
	       r.accuracy, r.count, meta.trained_steps);
	if (json)
		printf("{\"loss\":%.9g,\"accuracy\":%.9g,\"count\":%ld,\"trained_steps\":%ld}\n",
		       r.loss, r.accuracy, r.count, meta.trained_steps);
cleanup:
	if (ex)
		wf_exec_free(ex);
	if (be)
		wf_backend_free(be);
	if (ds)
		wf_dataset_close(ds);
	if (m)
		wf_model_free(m);
	wf_model_meta_free(&meta);
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
		{"out", WF_FLAG_STR, &out, "FILE", "dataset file to write (required)"},
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
		{"out", WF_FLAG_STR, &out, "FILE", "dataset file to write (required)"},
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

int wf_cmd_data(int argc, char **argv, wf_err *err)
{
	static const char usage[] = "usage: weft data <converter> [options]\n\n"
				    "converters:\n"
				    "  synth     generate a learnable synthetic dataset\n"
				    "  cifar10   convert CIFAR-10 binary batches\n\n"
				    "`weft data <converter> --help` documents each one's flags.\n";
	if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
		fputs(usage, argc < 2 ? stderr : stdout);
		return argc < 2 ? wf_errf(err, WF_EINVAL, "data: which converter? (synth, cifar10)")
				: 1;
	}
	if (strcmp(argv[1], "synth") == 0)
		return cmd_data_synth(argc - 1, argv + 1, err);
	if (strcmp(argv[1], "cifar10") == 0)
		return cmd_data_cifar10(argc - 1, argv + 1, err);
	return wf_errf(err, WF_EINVAL, "data: unknown converter '%s' (synth, cifar10)", argv[1]);
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
	return 0;
}
