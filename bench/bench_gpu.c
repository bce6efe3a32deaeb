/* bench_gpu: training throughput (images/s) of zoo models on the cuda
 * backend in float32 and bf16, the fraction of the GPU's bf16 dense
 * tensor-core peak the step reaches (FLOPs = 3 x wf_model_flops per image:
 * forward, backward data, backward weights), and, where PyTorch with CUDA is
 * installed, the same networks trained by PyTorch in the same run
 * (channels_last, autocast bf16 for the bf16 rows; cudnn.benchmark on) with
 * the ratio weft / PyTorch. Timings are medians over the timed steps; every
 * step is forward, loss, backward and an SGD-momentum update, synchronised.
 * --profile N runs N more steps per row with every op timed between device
 * waits and prints where a step's time goes (wf_op_profile_print). The
 * PyTorch rows use the same precision: float32 without TF32, tf32, or
 * autocast bf16/fp16.
 *
 *   bench_gpu [--runs resnet20:256,resnet50:128,resnet50:256,mobilenetv2:256]
 *             [--precisions tf32,bf16] [--steps 30] [--warmup 5]
 *             [--peak-tflops 989] [--no-peer] [--profile STEPS]
 *             [--python /usr/bin/python3]
 *
 * resnet20 runs at 32x32 (10 classes), the ImageNet networks at 224x224
 * (1000 classes). The images are uploaded every step from page-locked host
 * memory, as the trainer's batches are; PyTorch's stay on the GPU. Exits 77
 * saying why when no CUDA device is usable.
 */
#include "common/util.h"
#include "kernels/cuda/cuda.h"
#include "kernels/kernels.h"
#include "kernels/ops.h"
#include "model/model.h"
#include "model/optim.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct bench_cfg {
	int warmup, steps;
	double peak_tflops; /* bf16 dense peak of the GPU */
	int peer;
	int profile; /* steps to profile per row after the timed ones (0: none) */
	const char *python;
} bench_cfg;

/* Images/s and achieved TFLOP/s of one training step. */
static int bench_model(wf_backend *be, const char *name, int side, int classes, int batch,
		       const bench_cfg *cfg, double *ips, double *tflops)
{
	wf_err err = {0};
	wf_model *m = NULL;
	wf_exec *ex = NULL;
	int rc = wf_model_zoo(&m, name, side, side, 3, classes, &err);
	if (rc == 0) {
		wf_model_init_params(m, 1);
		rc = wf_exec_create(&ex, m, be, batch, 1, &err);
	}
	if (rc != 0) {
		fprintf(stderr, "bench_gpu: %s: %s\n", name, err.msg);
		wf_model_free(m);
		return rc;
	}
	size_t npix = (size_t)batch * side * side * 3;
	float *images = wf_op_host_alloc(be, sizeof(float) * npix); /* as the trainer's batches */
	if (!images) {
		fprintf(stderr, "bench_gpu: %s\n", be->err.msg);
		wf_exec_free(ex);
		wf_model_free(m);
		return WF_ENOMEM;
	}
	int32_t *labels = malloc(sizeof(int32_t) * (size_t)batch);
	double *t = malloc(sizeof(double) * (size_t)cfg->steps);
	float *mom = wf_op_alloc(be, sizeof(float) * m->nparams);
	wf_rng r;
	wf_rng_seed(&r, 7);
	for (size_t i = 0; i < npix; i++)
		images[i] = (float)wf_rng_normal(&r);
	for (int i = 0; i < batch; i++)
		labels[i] = (int32_t)wf_rng_below(&r, (uint64_t)classes);
	wf_optim_cfg oc;
	wf_optim_cfg_default(&oc);
	oc.lr = 0.01;
	int timed_end = cfg->warmup + cfg->steps;
	for (int s = 0; s < timed_end + cfg->profile && rc == 0; s++) {
		if (s == timed_end)
			rc = wf_op_profile_start(be);
		double t0 = wf_now();
		float loss;
		int correct;
		rc = wf_exec_zero_grads(ex);
		rc = rc ? rc : wf_exec_forward(ex, images, batch, 1, (uint64_t)s);
		rc = rc ? rc : wf_exec_loss(ex, labels, &loss, &correct);
		rc = rc ? rc : wf_exec_backward(ex, 1.0f / (float)batch, NULL, NULL);
		rc = rc ? rc : wf_exec_optim_step(ex, &oc, s, mom, NULL, 1.0f);
		rc = rc ? rc : wf_op_sync(be);
		if (s >= cfg->warmup && s < timed_end)
			t[s - cfg->warmup] = wf_now() - t0;
	}
	if (rc == 0 && cfg->profile > 0) {
		printf("%s, batch %d, %s: ops of one step, each timed between device waits:\n",
		       name, batch, wf_precision_name(wf_backend_cuda_precision(be)));
		wf_op_profile_print(be, stdout, cfg->profile);
	}
	wf_op_profile_stop(be);
	if (rc != 0) {
		fprintf(stderr, "bench_gpu: %s: %s\n", name,
			wf_exec_error(ex)[0] ? wf_exec_error(ex) : be->err.msg);
	} else {
		double sec = wf_median(t, cfg->steps);
		*ips = batch / sec;
		*tflops = 3.0 * wf_model_flops(m) * batch / sec / 1e12;
	}
	wf_op_free(be, mom);
	wf_op_host_free(be, images);
	free(labels);
	free(t);
	wf_exec_free(ex);
	wf_model_free(m);
	return rc;
}

/* PyTorch's images/s for the same network, or 0 when PyTorch with CUDA
 * (or torchvision, for resnet50) is not installed. */
static double torch_peer(const bench_cfg *cfg, const char *name, int side, int classes, int batch,
			 wf_precision p)
{
	char cmd[2048], out[4096], key[160];
	snprintf(cmd, sizeof(cmd),
		 "%s -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' "
		 "2>/dev/null && %s %s/torch_train.py --device cuda --channels-last --amp %s "
		 "--models %s --size %d --classes %d --batch %d --warmup %d --steps %d",
		 cfg->python, cfg->python, WEFT_BENCH_DIR,
		 p == WF_PREC_FP32 ? "none" : wf_precision_name(p), name, side, classes, batch,
		 cfg->warmup, cfg->steps);
	FILE *f = popen(cmd, "r");
	if (!f)
		return 0;
	size_t n = fread(out, 1, sizeof(out) - 1, f);
	out[n] = '\0';
	pclose(f);
	snprintf(key, sizeof(key), "\"model\": \"%s\", \"images_per_sec\": ", name);
	const char *at = strstr(out, key);
	return at ? atof(at + strlen(key)) : 0;
}

static int has_model(const char *name)
{
	const char *names = wf_model_zoo_names();
	size_t len = strlen(name);
	for (const char *at = strstr(names, name); at; at = strstr(at + 1, name))
		if ((at == names || at[-1] == ' ') && (at[len] == ' ' || at[len] == '\0'))
			return 1;
	return 0;
}

static void usage(void)
{
	fprintf(stderr,
		"usage: bench_gpu [--runs MODEL:BATCH,...] [--precisions tf32,bf16] [--steps N] "
		"[--warmup N] [--peak-tflops T] [--no-peer] [--profile STEPS] [--python PATH]\n"
		"  --runs  default resnet20:256,resnet50:128,resnet50:256,mobilenetv2:256\n"
		"          (resnet20/resnet56/smallcnn at 32x32, 10 classes; others 224x224, "
		"1000)\n"
		"  --precisions  of fp32, tf32, bf16, fp16 (default tf32,bf16)\n");
}

int main(int argc, char **argv)
{
	const char *runs = "resnet20:256,resnet50:128,resnet50:256,mobilenetv2:256";
	const char *precisions = "tf32,bf16";
	bench_cfg cfg = {
		.warmup = 5, .steps = 30, .peak_tflops = 989.0, .peer = 1, .python = "python3"};
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "--runs") && v)
			runs = v, i++;
		else if (!strcmp(a, "--precisions") && v)
			precisions = v, i++;
		else if (!strcmp(a, "--steps") && v)
			cfg.steps = atoi(v), i++;
		else if (!strcmp(a, "--warmup") && v)
			cfg.warmup = atoi(v), i++;
		else if (!strcmp(a, "--peak-tflops") && v)
			cfg.peak_tflops = atof(v), i++;
		else if (!strcmp(a, "--python") && v)
			cfg.python = v, i++;
		else if (!strcmp(a, "--profile") && v)
			cfg.profile = atoi(v), i++;
		else if (!strcmp(a, "--no-peer"))
			cfg.peer = 0;
		else {
			usage();
			return strcmp(a, "--help") ? 2 : 0;
		}
	}
	if (cfg.steps < 1 || cfg.warmup < 0 || cfg.profile < 0 || !(cfg.peak_tflops > 0)) {
		fprintf(stderr, "bench_gpu: --steps and --peak-tflops must be positive\n");
		return 2;
	}
	wf_err err = {0};
	wf_backend *be = NULL;
	if (wf_backend_create(&be, "cuda", 0, &err) != 0) {
		fprintf(stderr, "bench_gpu: %s (nothing measured)\n", err.msg);
		return 77;
	}
	printf("device: %s\n", wf_backend_cuda_describe(be));
	printf("peak: %.0f TFLOP/s bf16 dense (--peak-tflops); FLOPs = 3 x forward\n",
	       cfg.peak_tflops);
	printf("%-11s %5s %6s %5s %12s %9s %8s %12s %7s\n", "model", "size", "batch", "prec",
	       "weft img/s", "TFLOP/s", "% peak", "torch img/s", "ratio");
	fflush(stdout);
	int rc = 0;
	char rlist[512], plist[128];
	snprintf(rlist, sizeof(rlist), "%s", runs);
	for (char *rs = NULL, *run = strtok_r(rlist, ",", &rs); run;
	     run = strtok_r(NULL, ",", &rs)) {
		char *colon = strchr(run, ':');
		int batch = colon ? atoi(colon + 1) : 0;
		if (colon)
			*colon = '\0';
		if (batch < 1) {
			fprintf(stderr, "bench_gpu: --runs entry '%s' is not MODEL:BATCH\n", run);
			rc = 2;
			continue;
		}
		int small = !strcmp(run, "resnet20") || !strcmp(run, "resnet56") ||
			    !strcmp(run, "smallcnn");
		int side = small ? 32 : 224, classes = small ? 10 : 1000;
		if (!has_model(run)) {
			printf("%-11s (not in the zoo: %s)\n", run, wf_model_zoo_names());
			continue;
		}
		snprintf(plist, sizeof(plist), "%s", precisions);
		for (char *ps = NULL, *pn = strtok_r(plist, ",", &ps); pn;
		     pn = strtok_r(NULL, ",", &ps)) {
			wf_precision p;
			if (wf_precision_parse(pn, &p, &err) ||
			    wf_backend_cuda_set_precision(be, p, &err)) {
				fprintf(stderr, "bench_gpu: %s\n", err.msg);
				rc = 2;
				continue;
			}
			double ips = 0, tf = 0;
			if (bench_model(be, run, side, classes, batch, &cfg, &ips, &tf) != 0) {
				rc = 1;
				continue;
			}
			double tp = cfg.peer ? torch_peer(&cfg, run, side, classes, batch, p) : 0;
			printf("%-11s %5d %6d %5s %12.1f %9.1f %7.2f%%", run, side, batch,
			       wf_precision_name(p), ips, tf, 100.0 * tf / cfg.peak_tflops);
			if (tp > 0)
				printf(" %12.1f %6.2fx\n", tp, ips / tp);
			else
				printf(" %12s %7s\n", "n/a", "n/a");
			fflush(stdout);
		}
	}
	wf_backend_free(be);
	return rc;
}
