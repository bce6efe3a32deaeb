/* bench_train: single-process training throughput (images/s) of zoo models
 * on the cpu backend in fp32 and (where the CPU has native bf16) bf16, the
 * fraction of this machine's measured float32 matrix-multiply peak the fp32
 * step reaches, and the same networks trained in the same run by the peers of
 * bench/peers.py (PyTorch fp32 channels_last and bf16 autocast, from the venv
 * of bench/peers_venv.sh): best peer, its name, and the ratio of weft's best
 * precision to it, weft fp32 / PyTorch fp32 channels_last (the fp32 training
 * target); Debian's python3-torch (1.13) as a reference column.
 * Timings are medians over the timed steps. --rounds N repeats the peers and
 * weft N times and ends with each ratio's median, lowest and highest (this
 * machine is shared: one round's ratio can be off by 2x).
 *
 *   bench_train [--models smallcnn,resnet20] [--batch 64] [--threads 2]
 *               [--steps 30] [--warmup 5] [--rounds 1] [--device cpu] [--no-peer]
 */
#include "bench/bench_wait.h"
#include "common/util.h"
#include "kernels/kernels.h"
#include "kernels/ops.h"
#include "model/model.h"
#include "model/optim.h"
#include "peers_run.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Measured float32 GEMM peak (GFLOP/s) through the backend's dense op. */
static double gemm_peak(wf_backend *be)
{
	const int n = 1024;
	wf_dense_desc d = {.n = n, .in = n, .out = n, .bias = 0};
	float *x = wf_op_alloc(be, sizeof(float) * n * n);
	float *w = wf_op_alloc(be, sizeof(float) * n * n);
	float *y = wf_op_alloc(be, sizeof(float) * n * n);
	wf_plan *plan = NULL;
	double t[9];
	for (int i = 0; i < n * n; i++)
		x[i] = w[i] = 0.001f * (float)(i % 97);
	wf_op_dense_forward(be, &plan, &d, y, x, w, NULL); /* plan + warm-up */
	for (int r = 0; r < 9; r++) {
		double t0 = wf_now();
		wf_op_dense_forward(be, &plan, &d, y, x, w, NULL);
		wf_op_sync(be);
		t[r] = wf_now() - t0;
	}
	wf_backend_plan_free(be, &plan);
	wf_op_free(be, x);
	wf_op_free(be, w);
	wf_op_free(be, y);
	return 2.0 * n * (double)n * n / wf_median(t, 9) / 1e9;
}

/* Images/s of one training step (forward, loss, backward, SGD-momentum). */
static int bench_model(wf_backend *be, const char *name, int batch, int warmup, int steps,
		       double *ips, double *gflops, int bf16)
{
	wf_err err = {0};
	wf_model *m = NULL;
	wf_exec *ex = NULL;
	int rc = wf_model_zoo(&m, name, 32, 32, 3, 10, &err);
	wf_backend_set_precision(be, bf16 ? "bf16" : "fp32", NULL, NULL);
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
	float *mom = wf_op_alloc(be, sizeof(float) * m->nparams);
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
		rc = rc ? rc : wf_exec_optim_step(ex, &oc, s, mom, NULL, 1.0f);
		wf_op_sync(be);
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
	wf_op_free(be, mom);
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
			 "/usr/bin/python3 -c 'import torch' 2>/dev/null && %s/usr/bin/python3 %s "
			 "--models %s --batch %d --threads %d --warmup %d --steps %d 2>/dev/null",
			 bench_peer_env(), script, models, batch, threads, warmup, steps);
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

#define MAX_MODELS 8
#define MAX_ROUNDS 16

int main(int argc, char **argv)
{
	bench_openmp_wait(argv);
	const char *models = "smallcnn,resnet20", *device = "cpu";
	int batch = 64, threads = 2, steps = 30, warmup = 5, peer = 1, rounds = 1;
	/* per model and round: weft best / best peer, weft fp32 / PyTorch fp32 */
	double ratio[MAX_MODELS][2][MAX_ROUNDS] = {{{0}}};
	char names[MAX_MODELS][32] = {{0}};
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
		else if (!strcmp(a, "--rounds") && v)
			rounds = atoi(v), i++;
		else if (!strcmp(a, "--no-peer"))
			peer = 0;
		else {
			fprintf(stderr,
				"usage: bench_train [--models a,b] [--batch N] [--threads N] "
				"[--steps N] [--warmup N] [--rounds N] [--device cpu|ref] "
				"[--no-peer]\n");
			return strcmp(a, "--help") ? 2 : 0;
		}
	}
	if (batch < 1 || steps < 1 || warmup < 0 || rounds < 1 || rounds > MAX_ROUNDS) {
		fprintf(stderr,
			"bench_train: --batch and --steps must be >= 1, --rounds in [1, %d]\n",
			MAX_ROUNDS);
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
	int rc = 0, nm = 0;
	for (int round = 0; round < rounds; round++) {
		if (peer)
			peers_run(models, "", batch, threads, 10);
		printf("%-10s %5s %9s %9s %7s %9s %-14s %6s %9s %9s\n", "model", "batch",
		       "weft fp32", "weft bf16", "% peak", "best peer", "peer", "ratio",
		       "fp32/pt32", "torch1.13");
		char list[256];
		snprintf(list, sizeof(list), "%s", models);
		int k = 0;
		for (char *save = NULL, *name = strtok_r(list, ",", &save); name && k < MAX_MODELS;
		     name = strtok_r(NULL, ",", &save), k++) {
			double ips = 0, gf = 0, ips16 = 0, gf16 = 0;
			snprintf(names[k], sizeof(names[k]), "%s", name);
			nm = k + 1 > nm ? k + 1 : nm;
			if (bench_model(be, name, batch, warmup, steps, &ips, &gf, 0) != 0) {
				rc = 1;
				continue;
			}
			if ((be->caps & WF_CAP_BF16) &&
			    bench_model(be, name, batch, warmup, steps, &ips16, &gf16, 1) != 0)
				rc = 1;
			char eng[64] = "-";
			double bp =
				peer ? peers_ips(name, "train", batch, NULL, eng, sizeof(eng)) : 0;
			char e32[64];
			double p32 = peer ? peers_ips(name, "train", batch, "torch-fp32-cl", e32,
						      sizeof(e32))
					  : 0;
			double tp = peer ? torch_peer(script, models, name, batch, threads, warmup,
						      steps)
					 : 0;
			double best = ips > ips16 ? ips : ips16;
			ratio[k][0][round] = bp > 0 ? best / bp : 0.0;
			ratio[k][1][round] = p32 > 0 ? ips / p32 : 0.0;
			printf("%-10s %5d %9.1f %9.1f %6.1f%% %9.1f %-14s %5.2fx %8.2fx %9.1f\n",
			       name, batch, ips, ips16, 100.0 * gf / peak, bp, eng,
			       ratio[k][0][round], ratio[k][1][round], tp);
			fflush(stdout);
		}
	}
	if (rounds > 1 && peer) {
		printf("\nratios over %d rounds (each round: the peers, then weft): median "
		       "[lowest, highest]\n%-10s %-24s %-24s\n",
		       rounds, "model", "best / best peer", "fp32 / PyTorch fp32");
		for (int k = 0; k < nm; k++) {
			printf("%-10s", names[k]);
			for (int w = 0; w < 2; w++) {
				double *r = ratio[k][w];
				double med = wf_median(r, (size_t)rounds); /* sorts r */
				printf(" %5.2fx [%5.2f, %5.2f]     ", med, r[0], r[rounds - 1]);
			}
			printf("\n");
		}
	}
	wf_backend_free(be);
	return rc;
}
