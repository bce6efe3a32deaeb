/* bench_zoo: the Keras applications of the zoo on one backend: inference
 * images/s at batch 1 and 32 (batch norm folded as `weft export` does, fused
 * inference plans) and training images/s at batch 16 (forward, loss,
 * backward, SGD with momentum), each network at its Keras input size, in fp32
 * and, where the CPU has native bf16, in bf16, and (inference) in int8
 * after a calibration on random images; and the peer engines of
 * bench/peers.py (PyTorch fp32 channels_last and bf16 autocast, ONNX Runtime
 * fp32, OpenVINO fp32 and bf16, from the venv of bench/peers_venv.sh) on
 * ResNet50 and MobileNetV2 in the same run, same threads and batch. Each row
 * prints weft's best precision, the best peer, its name and the ratio.
 * Timings are medians over the repetitions. --rounds N repeats the whole
 * (peers, then weft) N times and ends with each row's median, lowest and
 * highest ratio: on a shared machine one round's ratio can be off by 2x.
 *
 *   bench_zoo [--models mobilenetv2,nasnetmobile,resnet50,resnet152,nasnetlarge]
 *             [--infer-batch 1,32] [--train-batch 16] [--threads 2] [--reps 5]
 *             [--rounds 1] [--device cpu|cuda] [--no-peer] [--no-train] [--no-bf16]
 *             [--no-int8] [--no-plan] [--sequential] [--profile]
 *
 * --sequential: inference runs one layer after another over the whole batch
 * (no parallel branches, model/exec_branch.c; no tiles, model/exec_tile.c),
 * for an A/B of those.
 * --profile: one more forward (or training step) per measurement with every
 * op timed (wf_op_profile_print): where weft's time goes, by op.
 * "plan" rows (batch > 1): the same batch through model/batchplan.h, the
 * measured fastest sequence of forwards, as weft-serve runs it. */
#include "bench/bench_wait.h"
#include "common/util.h"
#include "kernels/kernels.h"
#include "kernels/ops.h"
#include "model/calib.h"
#include "model/fold.h"
#include "model/model.h"
#include "model/batchplan.h"
#include "model/optim.h"
#include "peers_run.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Images/s of inference (training = 0) or training steps at batch b. */
static int bench_one(wf_backend *be, wf_model *m, int b, int training, int reps, int profile,
		     double *ips)
{
	wf_err err = {0};
	wf_exec *ex = NULL;
	size_t per = (size_t)m->in_h * m->in_w * m->in_c;
	float *x = malloc(sizeof(float) * per * (size_t)b);
	int32_t *y = malloc(sizeof(int32_t) * (size_t)b);
	double *t = malloc(sizeof(double) * (size_t)(reps + 1));
	float *mom = NULL;
	int rc = x && y && t ? 0 : WF_ENOMEM;
	wf_rng r;
	wf_rng_seed(&r, 7);
	for (size_t i = 0; !rc && i < per * (size_t)b; i++)
		x[i] = (float)wf_rng_normal(&r);
	for (int i = 0; !rc && i < b; i++)
		y[i] = (int32_t)wf_rng_below(&r, (uint64_t)m->classes);
	if (!rc && (rc = wf_exec_create(&ex, m, be, b, training, &err)) != 0)
		fprintf(stderr, "bench_zoo: %s\n", err.msg);
	if (!rc && training && !(mom = wf_op_alloc(be, sizeof(float) * m->nparams)))
		rc = WF_ENOMEM;
	wf_optim_cfg oc;
	wf_optim_cfg_default(&oc);
	oc.lr = 0.001;
	for (int s = 0; !rc && s <= reps + profile; s++) { /* s = 0: warm-up (plans, first touch) */
		if (s == reps + 1)
			rc = wf_op_profile_start(be);
		double t0 = wf_now();
		if (training) {
			float loss;
			rc = wf_exec_zero_grads(ex);
			rc = rc ? rc : wf_exec_forward(ex, x, b, 1, (uint64_t)s);
			rc = rc ? rc : wf_exec_loss(ex, y, &loss, NULL);
			rc = rc ? rc : wf_exec_backward(ex, 1.0f / (float)b, NULL, NULL);
			rc = rc ? rc : wf_exec_optim_step(ex, &oc, s, mom, NULL, 1.0f);
		} else {
			rc = wf_exec_forward(ex, x, b, 0, 0);
			if (s == 0) /* an executor trying its branches: warm until it chose */
				while (!rc && wf_exec_tuning(ex))
					rc = wf_exec_forward(ex, x, b, 0, 0);
		}
		wf_op_sync(be);
		if (s <= reps)
			t[s] = wf_now() - t0;
	}
	if (!rc && profile)
		wf_op_profile_print(be, stdout, 1);
	wf_op_profile_stop(be);
	if (rc && ex)
		fprintf(stderr, "bench_zoo: %s\n", wf_exec_error(ex));
	if (!rc)
		*ips = b / wf_median(t + 1, reps);
	if (mom)
		wf_op_free(be, mom);
	wf_exec_free(ex);
	free(x);
	free(y);
	free(t);
	return rc;
}

/* Images/s of b rows through a batch plan (model/batchplan.h: executors at
 * 1, 2, 4, ... b, the measured fastest sequence of forwards), as weft-serve
 * runs a batch of b. */
static int bench_plan(wf_backend *be, wf_model *m, int b, int reps, double *ips)
{
	wf_err err = {0};
	wf_batchplan *p = NULL;
	double *t = malloc(sizeof(double) * (size_t)(reps + 1));
	int rc = t ? wf_batchplan_create(&p, m, be, b, 0, NULL, &err) : WF_ENOMEM;
	wf_rng r;
	wf_rng_seed(&r, 7);
	for (size_t i = 0; !rc && i < p->per * (size_t)b; i++)
		p->in[i] = (float)wf_rng_normal(&r);
	for (int s = 0; !rc && s <= reps; s++) { /* s = 0: warm-up */
		double t0 = wf_now();
		rc = wf_batchplan_run(p, b, &err);
		t[s] = wf_now() - t0;
	}
	if (rc)
		fprintf(stderr, "bench_zoo: %s\n", err.msg);
	else
		*ips = b / wf_median(t + 1, reps);
	wf_batchplan_free(p);
	free(t);
	return rc;
}

/* Bytes a training step at batch b needs for activations and their
 * gradients (a lower bound: every layer's output, twice). */
static double train_bytes(const wf_model *m, int b)
{
	double f = 0;
	for (int i = 0; i < m->nlayers; i++)
		f += (double)m->layers[i].oh * m->layers[i].ow * m->layers[i].oc;
	return 2.0 * 4.0 * f * b;
}

/* Every row's ratio in each round, for the summary after the last round. */
#define MAX_ROWS   64
#define MAX_ROUNDS 16
static struct {
	char key[96];
	double ratio[MAX_ROUNDS];
	int n;
} rows[MAX_ROWS];
static int nrows;

static void record(const char *model, const char *mode, int batch, double ratio)
{
	char key[96];
	snprintf(key, sizeof(key), "%-12s %-5s %5d", model, mode, batch);
	int i = 0;
	while (i < nrows && strcmp(rows[i].key, key))
		i++;
	if (i == MAX_ROWS)
		return;
	if (i == nrows)
		snprintf(rows[nrows++].key, sizeof(rows[0].key), "%s", key);
	if (rows[i].n < MAX_ROUNDS)
		rows[i].ratio[rows[i].n++] = ratio;
}

/* Median, lowest and highest ratio of each row over the rounds. */
static void summary(int rounds)
{
	printf("\nratios over %d rounds (each round: the peers, then weft, minutes apart):\n"
	       "%-12s %-5s %5s %7s %7s %7s\n",
	       rounds, "model", "mode", "batch", "median", "lowest", "highest");
	for (int i = 0; i < nrows; i++) {
		double *r = rows[i].ratio;
		int n = rows[i].n;
		double med = wf_median(r, (size_t)n); /* sorts r */
		printf("%s %6.2fx %6.2fx %6.2fx\n", rows[i].key, med, r[0], r[n - 1]);
	}
}

/* One row: weft fp32, bf16 and int8 (0 = not run), best peer, ratio of the
 * bests. The "plan" rows (a batch through the batch plan) compare with the
 * peers' inference at that batch. */
static void row(const char *model, const char *mode, int batch, const double ips[3], double gflop)
{
	char eng[64];
	double tp = peers_ips(model, strcmp(mode, "plan") ? mode : "infer", batch, NULL, eng,
			      sizeof(eng)),
	       best = ips[0];
	printf("%-12s %-5s %5d %9.2f ", model, mode, batch, ips[0]);
	for (int k = 1; k < 3; k++) {
		if (ips[k] > 0)
			printf("%9.2f ", ips[k]);
		else
			printf("%9s ", "-");
		if (ips[k] > best)
			best = ips[k];
	}
	if (ips[2] > 0)
		printf("%6.2fx", ips[2] / ips[0]);
	else
		printf("%7s", "-");
	printf(" %8.1f", best * gflop);
	if (tp > 0) {
		printf(" %9.2f %-17s %6.2fx\n", tp, eng, best / tp);
		record(model, mode, batch, best / tp);
		double t32 = strcmp(mode, "train") ? 0
						   : peers_ips(model, mode, batch, "torch-fp32-cl",
							       eng, sizeof(eng));
		if (t32 > 0) { /* the fp32 training target: against PyTorch fp32 */
			printf("%-12s %-5s %5d %9.2f %49.2f %-17s %6.2fx\n", model, "fp32", batch,
			       ips[0], t32, eng, ips[0] / t32);
			record(model, "fp32", batch, ips[0] / t32);
		}
	} else
		printf(" %9s %-17s %7s\n", "-", "-", "-");
	fflush(stdout);
}

/* Images/s of one measurement (training < 0: through the batch plan) in
 * fp32, bf16 (bf16 != 0 and the CPU has it) and int8 (int8 != 0, inference,
 * m calibrated); 0 where not run. */
static int bench_all(wf_backend *be, wf_model *m, int b, int training, int reps, int bf16, int int8,
		     int profile, double ips[3])
{
	const char *prec[3] = {"fp32", "bf16", "int8"};
	int want[3] = {1, bf16 && (be->caps & WF_CAP_BF16),
		       int8 && training <= 0 && wf_backend_caps_of(be).int8 &&
			       wf_model_calibrated(m)};
	int rc = 0;
	for (int k = 0; k < 3 && !rc; k++) {
		ips[k] = 0;
		if (!want[k])
			continue;
		wf_backend_set_precision(be, prec[k], NULL, NULL);
		if (profile && training >= 0)
			printf("profile (of the row below): %s batch %d, %s\n",
			       training ? "train" : "infer", b, prec[k]);
		rc = training < 0 ? bench_plan(be, m, b, reps, &ips[k])
				  : bench_one(be, m, b, training, reps, profile, &ips[k]);
	}
	wf_backend_set_precision(be, "fp32", NULL, NULL);
	return rc;
}

int main(int argc, char **argv)
{
	bench_openmp_wait(argv);
	const char *models = "mobilenetv2,nasnetmobile,resnet50,resnet152,nasnetlarge";
	const char *infer = "1,32", *device = "cpu";
	int train_batch = 16, threads = 2, reps = 5, use_peer = 1, bf16 = 1, int8 = 1, plan = 1,
	    sequential = 0, rounds = 1, profile = 0;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "--models") && v)
			models = v, i++;
		else if (!strcmp(a, "--infer-batch") && v)
			infer = v, i++;
		else if (!strcmp(a, "--train-batch") && v)
			train_batch = atoi(v), i++;
		else if (!strcmp(a, "--threads") && v)
			threads = atoi(v), i++;
		else if (!strcmp(a, "--reps") && v)
			reps = atoi(v), i++;
		else if (!strcmp(a, "--rounds") && v)
			rounds = atoi(v), i++;
		else if (!strcmp(a, "--device") && v)
			device = v, i++;
		else if (!strcmp(a, "--no-peer"))
			use_peer = 0;
		else if (!strcmp(a, "--no-train"))
			train_batch = 0;
		else if (!strcmp(a, "--no-bf16"))
			bf16 = 0;
		else if (!strcmp(a, "--no-int8"))
			int8 = 0;
		else if (!strcmp(a, "--no-plan"))
			plan = 0;
		else if (!strcmp(a, "--sequential"))
			sequential = 1;
		else if (!strcmp(a, "--profile"))
			profile = 1;
		else {
			fprintf(stderr, "usage: bench_zoo [--models a,b] [--infer-batch 1,32] "
					"[--train-batch N] [--threads N] [--reps N] [--rounds N] "
					"[--device cpu|cuda] [--no-peer] [--no-train] [--no-bf16] "
					"[--no-int8] [--no-plan] [--sequential] [--profile]\n");
			return strcmp(a, "--help") ? 2 : 0;
		}
	}
	if (reps < 1 || threads < 1 || rounds < 1 || rounds > MAX_ROUNDS) {
		fprintf(stderr, "bench_zoo: --reps and --threads must be >= 1, --rounds 1..%d\n",
			MAX_ROUNDS);
		return 2;
	}
	wf_err err = {0};
	wf_backend *be = NULL;
	wf_backend_opts bo = {.threads = threads, .sequential = sequential};
	if (wf_backend_create_opts(&be, device, &bo, &err) != 0) {
		fprintf(stderr, "bench_zoo: %s\n", err.msg);
		return 1;
	}
	int rc = 0;
	for (int round = 0; round < rounds; round++) {
		if (use_peer && strcmp(device, "cpu") == 0)
			peers_run(models, infer, train_batch, threads, reps);
		printf("%sbench_zoo: %s backend, %d threads, medians of %d repetitions, images/s; "
		       "peers: bench/peers.py (resnet50, mobilenetv2, nasnetmobile); ratio = weft "
		       "best / best "
		       "peer; round %d of %d\n",
		       round ? "\n" : "", be->name, threads, reps, round + 1, rounds);
		printf("%-12s %-5s %5s %9s %9s %9s %7s %8s %9s %-17s %7s\n", "model", "mode",
		       "batch", "weft fp32", "weft bf16", "weft int8", "i8/fp32", "GFLOP/s",
		       "best peer", "peer", "ratio");
		char list[512];
		snprintf(list, sizeof(list), "%s", models);
		for (char *save = NULL, *name = strtok_r(list, ",", &save); name;
		     name = strtok_r(NULL, ",", &save)) {
			wf_model *m = NULL;
			if (wf_model_zoo(&m, name, 0, 0, 3, 1000, &err) != 0) {
				fprintf(stderr, "bench_zoo: %s\n", err.msg);
				rc = 1;
				continue;
			}
			double f = wf_model_flops(m) / 1e9, ips[3];
			wf_model *folded = NULL;
			if (wf_model_fold_for_inference(m, &folded, &err) != 0 ||
			    (int8 && wf_calib_noise(folded, be, 8, &err) != 0)) {
				fprintf(stderr, "bench_zoo: %s\n", err.msg);
				wf_model_free(m);
				rc = 1;
				continue;
			}
			char bl[64];
			snprintf(bl, sizeof(bl), "%s", infer);
			for (char *s2 = NULL, *bs = strtok_r(bl, ",", &s2); bs;
			     bs = strtok_r(NULL, ",", &s2)) {
				int b = atoi(bs);
				if (b >= 1 && bench_all(be, folded, b, 0, reps, bf16, int8, profile,
							ips) == 0)
					row(name, "infer", b, ips, f);
				else
					rc = 1;
				if (b > 1 && plan &&
				    bench_all(be, folded, b, -1, reps, bf16, int8, profile, ips) ==
					    0)
					row(name, "plan", b, ips, f);
				else if (b > 1 && plan)
					rc = 1;
			}
			double need = train_bytes(m, train_batch);
			double avail =
				(double)sysconf(_SC_AVPHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
			if (train_batch > 0 && strcmp(device, "cpu") == 0 && need > avail) {
				printf("%-13s %-6s %6d   skipped: needs ~%.0f GB of activations, "
				       "%.0f GB "
				       "free\n",
				       name, "train", train_batch, need / 1e9, avail / 1e9);
			} else if (train_batch > 0) {
				/* fewer repetitions: a training step of the large nets takes long
				 */
				if (bench_all(be, m, train_batch, 1, reps > 2 ? 2 : reps, bf16, 0,
					      profile, ips) == 0)
					row(name, "train", train_batch, ips, 3 * f);
				else
					rc = 1;
			}
			wf_model_free(folded);
			wf_model_free(m);
		}
	}
	if (rounds > 1 && nrows)
		summary(rounds);
	wf_backend_free(be);
	return rc;
}
