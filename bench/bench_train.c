/* bench_train: single-process training throughput (images/s) of zoo models
 * on the cpu backend, the fraction of this machine's measured float32
 * matrix-multiply peak the training step reaches, and, where Debian's
 * python3-torch is installed, the same networks trained by PyTorch in the
 * same run with the ratio. Timings are medians over the timed steps.
 *
 *   bench_train [--models smallcnn,resnet20] [--batch 64] [--threads 2]
 *               [--steps 30] [--warmup 5] [--device cpu] [--no-peer]
 */
#include "common/util.h"
#include "kernels/kernels.h"
#include "model/model.h"
#include "model/optim.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Measured float32 GEMM peak (GFLOP/s) through the backend's dense op. */
static double gemm_peak(wf_backend *be)
{
	const int n = 1024;
	wf_dense_desc d = {.n = n, .in = n, .out = n, .bias = 0};
	float *x = be->ops->alloc(be, sizeof(float) * n * n);
	float *w = be->ops->alloc(be, sizeof(float) * n * n);
	float *y = be->ops->alloc(be, sizeof(float) * n * n);
	wf_plan *plan = NULL;
	double t[9];
	for (int i = 0; i < n * n; i++)
		x[i] = w[i] = 0.001f * (float)(i % 97);
	be->ops->dense_forward(be, &plan, &d, y, x, w, NULL); /* plan + warm-up */
	for (int r = 0; r < 9; r++) {
		double t0 = wf_now();
		be->ops->dense_forward(be, &plan, &d, y, x, w, NULL);
		be->ops->sync(be);
		t[r] = wf_now() - t0;
	}
	wf_backend_plan_free(be, &plan);
	be->ops->free(be, x);
	be->ops->free(be, w);
	be->ops->free(be, y);
	return 2.0 * n * (double)n * n / wf_median(t, 9) / 1e9;
}

/* Images/s of one training step (forward, loss, backward, SGD-momentum). */
static int bench_model(wf_backend *be, const char *name, int batch, int warmup, int steps,
		       double *ips, double *gflops)
{
	wf_err err = {0};
	wf_model *m = NULL;
	wf_exec *ex = NULL;
	int rc = wf_model_zoo(&m, name, 32, 32, 3, 10, &err);
	if (rc == 0) {
		wf_model_init_params(m, 1);
		rc = wf_exec_create(&ex, m, be, batch, 1, &err);
	}
	if (rc != 0) {
		fprintf(stderr, "bench_train: %s: %s\n", name, err.msg);
		wf_model_free(m);
		return rc;
	}
	float *images = malloc(sizeof(float) * (size_t)batch * 32 * 32 * 3);
	int32_t *labels = malloc(sizeof(int32_t) * (size_t)batch);
	double *t = malloc(sizeof(double) * (size_t)steps);
	float *mom = be->ops->alloc(be, sizeof(float) * m->nparams);
	wf_rng r;
	wf_rng_seed(&r, 7);
	for (int i = 0; i < batch * 32 * 32 * 3; i++)
		images[i] = (float)wf_rng_normal(&r);
	for (int i = 0; i < batch; i++)
		labels[i] = (int32_t)wf_rng_below(&r, 10);
	wf_optim_cfg oc;
	wf_optim_cfg_default(&oc);
	oc.lr = 0.01;
	for (int s = 0; s < warmup + steps && rc == 0; s++) {
		double t0 = wf_now();
		float loss;
		int correct;
		rc = wf_exec_zero_grads(ex);
		rc = rc ? rc : wf_exec_forward(ex, images, batch, 1, (uint64_t)s);
		rc = rc ? rc : wf_exec_loss(ex, labels, &loss, &correct);
		rc = rc ? rc : wf_exec_backward(ex, 1.0f / (float)batch, NULL, NULL);
		rc = rc ? rc
			: wf_optim_apply(be, &oc, s, m->nparams, wf_exec_params(ex),
					 wf_exec_grads(ex), mom, NULL, 1.0f);
		be->ops->sync(be);
		if (s >= warmup)
			t[s - warmup] = wf_now() - t0;
	}
	if (rc != 0)
		fprintf(stderr, "bench_train: %s: %s\n", name, wf_exec_error(ex));
	else {
		double sec = wf_median(t, steps);
		*ips = batch / sec;
		/* forward + backward (data and weights) = 3x the forward FLOPs */
		*gflops = 3.0 * wf_model_flops(m) * batch / sec / 1e9;
	}
	be->ops->free(be, mom);
	free(images);
	free(labels);
	free(t);
	wf_exec_free(ex);
	wf_model_free(m);
	return rc;
}

/* Runs the PyTorch peer; returns its images/s for `name`, or 0 if absent. */
static double torch_peer(const char *script, const char *models, const char *name, int batch,
			 int threads, int warmup, int steps)
{
	static char out[4096];
	static int ran;
	if (!ran) {
		char cmd[2048];
		ran = 1;
		snprintf(cmd, sizeof(cmd),
			 "/usr/bin/python3 -c 'import torch' 2>/dev/null && /usr/bin/python3 %s "
			 "--models %s --batch %d --threads %d --warmup %d --steps %d 2>/dev/null",
			 script, models, batch, threads, warmup, steps);
		FILE *p = popen(cmd, "r");
		if (!p)
			return 0;
		size_t n = fread(out, 1, sizeof(out) - 1, p);
		out[n] = '\0';
		pclose(p);
	}
	char key[128];
	snprintf(key, sizeof(key), "\"model\": \"%s\", \"images_per_sec\": ", name);
	const char *at = strstr(out, key);
	return at ? atof(at + strlen(key)) : 0;
}

int main(int argc, char **argv)
{
	const char *models = "smallcnn,resnet20", *device = "cpu";
	int batch = 64, threads = 2, steps = 30, warmup = 5, peer = 1;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "--models") && v)
			models = v, i++;
		else if (!strcmp(a, "--batch") && v)
			batch = atoi(v), i++;
		else if (!strcmp(a, "--threads") && v)
			threads = atoi(v), i++;
		else if (!strcmp(a, "--steps") && v)
			steps = atoi(v), i++;
		else if (!strcmp(a, "--warmup") && v)
			warmup = atoi(v), i++;
		else if (!strcmp(a, "--device") && v)
			device = v, i++;
		else if (!strcmp(a, "--no-peer"))
			peer = 0;
		else {
			fprintf(stderr,
				"usage: bench_train [--models a,b] [--batch N] [--threads N] "
				"[--steps N] [--warmup N] [--device cpu|ref] [--no-peer]\n");
			return strcmp(a, "--help") ? 2 : 0;
		}
	}
	if (batch < 1 || steps < 1 || warmup < 0) {
		fprintf(stderr, "bench_train: --batch and --steps must be >= 1\n");
		return 2;
	}
	wf_err err = {0};
	wf_backend *be = NULL;
	if (wf_backend_create(&be, device, threads, &err) != 0) {
		fprintf(stderr, "bench_train: %s\n", err.msg);
		return 1;
	}
	char script[1024];
	snprintf(script, sizeof(script), "%s/torch_train.py", WEFT_BENCH_DIR);
	double peak = gemm_peak(be);
	printf("machine: %s backend, %d threads, measured float32 GEMM peak %.1f GFLOP/s\n",
	       be->name, threads, peak);
	printf("%-10s %8s %12s %10s %12s %8s\n", "model", "batch", "weft img/s", "% peak",
	       "torch img/s", "ratio");
	char list[256];
	snprintf(list, sizeof(list), "%s", models);
	int rc = 0;
	for (char *save = NULL, *name = strtok_r(list, ",", &save); name;
	     name = strtok_r(NULL, ",", &save)) {
		double ips = 0, gf = 0;
		if (bench_model(be, name, batch, warmup, steps, &ips, &gf) != 0) {
			rc = 1;
			continue;
		}
		double tp =
			peer ? torch_peer(script, models, name, batch, threads, warmup, steps) : 0;
		if (tp > 0)
			printf("%-10s %8d %12.1f %9.1f%% %12.1f %7.2fx\n", name, batch, ips,
			       100.0 * gf / peak, tp, ips / tp);
		else
			printf("%-10s %8d %12.1f %9.1f%% %12s %8s\n", name, batch, ips,
			       100.0 * gf / peak, "n/a", "n/a");
		fflush(stdout);
	}
	wf_backend_free(be);
	return rc;
}
