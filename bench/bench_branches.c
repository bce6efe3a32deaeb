/* bench_branches.c: inference the way the executor chose it (the parallel
 * branches of the cells run at once at small batches, model/exec_branch.c;
 * a large batch as tiles, model/exec_tile.c) against one layer after another
 * over the whole batch, paired: the two executors alternate forward by
 * forward in one process, so a noisy machine slows both alike. Prints, per
 * model, precision and batch, the images/s of each (medians) and the median
 * of the per-pair ratios.
 *
 *   bench_branches [--models nasnetmobile] [--batch 1,2,4] [--threads 2]
 *                  [--pairs 40] [--no-int8]
 *
 * Uncounted forwards come first: plans built, and while the executor tunes
 * itself (wf_exec_tuning) layers timed, the branches planned again from the
 * times and tried against one layer after another, or tiles tried against
 * the whole batch (the "threads" column: what the executor kept, 1 where one
 * after another was faster; "tile": rows per tile, 0 for the whole batch). */
#include "bench/bench_wait.h"
#include "common/util.h"
#include "kernels/ops.h"
#include "model/calib.h"
#include "model/fold.h"
#include "model/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Paired forwards of batch b on par (branches) and seq; 0 or an error. */
static int pair_run(wf_model *m, wf_backend *par_be, wf_backend *seq_be, int b, int pairs,
		    const char *name, const char *prec)
{
	wf_err err = {0};
	wf_exec *par = NULL, *seq = NULL;
	size_t per = (size_t)m->in_h * m->in_w * m->in_c;
	float *x = malloc(sizeof(float) * per * (size_t)b);
	double *tp = malloc(sizeof(double) * (size_t)pairs);
	double *ts = malloc(sizeof(double) * (size_t)pairs);
	double *ratio = malloc(sizeof(double) * (size_t)pairs);
	int rc = x && tp && ts && ratio ? 0 : WF_ENOMEM;
	wf_rng r;
	wf_rng_seed(&r, 3);
	for (size_t i = 0; !rc && i < per * (size_t)b; i++)
		x[i] = (float)wf_rng_normal(&r);
	if (!rc)
		rc = wf_exec_create(&par, m, par_be, b, 0, &err);
	if (!rc)
		rc = wf_exec_create(&seq, m, seq_be, b, 0, &err);
	for (int s = 0; !rc && (s < 2 || wf_exec_tuning(par)); s++) /* uncounted */
		rc = wf_exec_forward(par, x, b, 0, 0) || wf_exec_forward(seq, x, b, 0, 0);
	for (int s = 0; !rc && s < pairs; s++) {
		double t0 = wf_now();
		rc = wf_exec_forward(par, x, b, 0, 0);
		double t1 = wf_now();
		rc = rc ? rc : wf_exec_forward(seq, x, b, 0, 0);
		double t2 = wf_now();
		tp[s] = t1 - t0, ts[s] = t2 - t1, ratio[s] = (t2 - t1) / (t1 - t0);
	}
	if (rc)
		fprintf(stderr, "bench_branches: %s %s batch %d: %s%s%s\n", name, prec, b, err.msg,
			par ? wf_exec_error(par) : "", seq ? wf_exec_error(seq) : "");
	else
		printf("%-13s %-5s %5d %8d %5d %10.1f %10.1f %8.2fx\n", name, prec, b,
		       wf_exec_branch_threads(par), wf_exec_tile_rows(par),
		       b / wf_median(tp, pairs), b / wf_median(ts, pairs), wf_median(ratio, pairs));
	fflush(stdout);
	wf_exec_free(par);
	wf_exec_free(seq);
	free(x);
	free(tp);
	free(ts);
	free(ratio);
	return rc;
}

int main(int argc, char **argv)
{
	bench_openmp_wait(argv);
	const char *models = "nasnetmobile", *batches = "1,2,4";
	int threads = 2, pairs = 40, int8 = 1;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "--models") && v)
			models = v, i++;
		else if (!strcmp(a, "--batch") && v)
			batches = v, i++;
		else if (!strcmp(a, "--threads") && v)
			threads = atoi(v), i++;
		else if (!strcmp(a, "--pairs") && v)
			pairs = atoi(v), i++;
		else if (!strcmp(a, "--no-int8"))
			int8 = 0;
		else {
			fprintf(stderr, "usage: bench_branches [--models a,b] [--batch 1,2,4] "
					"[--threads N] [--pairs N] [--no-int8]\n");
			return strcmp(a, "--help") ? 2 : 0;
		}
	}
	if (threads < 2 || pairs < 1) {
		fprintf(stderr, "bench_branches: --threads must be >= 2, --pairs >= 1\n");
		return 2;
	}
	wf_err err = {0};
	wf_backend *par_be = NULL, *seq_be = NULL;
	wf_backend_opts po = {.threads = threads}, so = {.threads = threads, .sequential = 1};
	if (wf_backend_create_opts(&par_be, "cpu", &po, &err) != 0 ||
	    wf_backend_create_opts(&seq_be, "cpu", &so, &err) != 0) {
		fprintf(stderr, "bench_branches: %s\n", err.msg);
		return 1;
	}
	printf("bench_branches: cpu, %d threads, %d paired forwards; images/s (medians), "
	       "ratio = median of sequential time / chosen way's time per pair\n",
	       threads, pairs);
	printf("%-13s %-5s %5s %8s %5s %10s %10s %9s\n", "model", "prec", "batch", "threads",
	       "tile", "chosen", "sequential", "ratio");
	int rc = 0;
	char list[512];
	snprintf(list, sizeof(list), "%s", models);
	for (char *save = NULL, *name = strtok_r(list, ",", &save); name;
	     name = strtok_r(NULL, ",", &save)) {
		wf_model *m = NULL, *f = NULL;
		if (wf_model_zoo(&m, name, 0, 0, 3, 1000, &err) != 0 ||
		    wf_model_fold_for_inference(m, &f, &err) != 0 ||
		    (int8 && wf_calib_noise(f, seq_be, 8, &err) != 0)) {
			fprintf(stderr, "bench_branches: %s: %s\n", name, err.msg);
			wf_model_free(m);
			rc = 1;
			continue;
		}
		for (int q = 0; q <= int8; q++) {
			const char *prec = q ? "int8" : "fp32";
			wf_backend_set_precision(par_be, prec, NULL, NULL);
			wf_backend_set_precision(seq_be, prec, NULL, NULL);
			char bl[64];
			snprintf(bl, sizeof(bl), "%s", batches);
			for (char *s2 = NULL, *bs = strtok_r(bl, ",", &s2); bs;
			     bs = strtok_r(NULL, ",", &s2))
				if (atoi(bs) < 1 ||
				    pair_run(f, par_be, seq_be, atoi(bs), pairs, name, prec))
					rc = 1;
		}
		wf_model_free(f);
		wf_model_free(m);
	}
	wf_backend_free(par_be);
	wf_backend_free(seq_be);
	return rc;
}
