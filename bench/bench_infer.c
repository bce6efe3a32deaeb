/* bench_infer.c: weft-bench-infer, weft's own in-process batched inference
 * on one model: the ceiling that weft-serve's HTTP throughput is compared
 * with in bench_serve.sh. Prints one JSON line.
 *   weft-bench-infer (--model FILE.h5 | --zoo NAME [--save FILE.h5])
 *                    [--batch 32] [--seconds 3] [--device auto] [--threads 0]
 *                    [--precision P]
 * Precision: --precision, else the model file's (as weft-serve serves it),
 * else fp32; the JSON names the one it ran in. */
#include "bench/bench_wait.h"
#include "common/util.h"
#include "model/fold.h"
#include "model/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
	bench_openmp_wait(argv);
	const char *model = NULL, *zoo = NULL, *save = NULL, *device = "auto", *prec = NULL;
	int batch = 32, threads = 0;
	double seconds = 3;
	for (int i = 1; i + 1 < argc; i += 2) {
		const char *a = argv[i], *v = argv[i + 1];
		if (!strcmp(a, "--model"))
			model = v;
		else if (!strcmp(a, "--zoo"))
			zoo = v;
		else if (!strcmp(a, "--save"))
			save = v;
		else if (!strcmp(a, "--device"))
			device = v;
		else if (!strcmp(a, "--batch"))
			batch = atoi(v);
		else if (!strcmp(a, "--threads"))
			threads = atoi(v);
		else if (!strcmp(a, "--seconds"))
			seconds = atof(v);
		else if (!strcmp(a, "--precision"))
			prec = v;
		else {
			fprintf(stderr, "weft-bench-infer: unknown flag %s\n", a);
			return 1;
		}
	}
	if ((!model && !zoo) || batch < 1) {
		fprintf(stderr, "usage: weft-bench-infer (--model FILE.h5 | --zoo NAME [--save "
				"FILE.h5]) [--batch N] [--seconds S] [--device D] [--threads N] "
				"[--precision P]\n");
		return 1;
	}
	wf_model *m = NULL;
	wf_model_meta meta;
	wf_backend *be = NULL;
	wf_exec *ex = NULL;
	wf_err err = {0};
	float *x = NULL, *out = NULL;
	int rc;
	wf_model_meta_init(&meta);
	if (model) {
		rc = wf_model_load(&m, &meta, model, &err);
		if (!rc && (rc = wf_model_fold_replace(&m, &err)) > 0) /* as weft-serve does */
			rc = 0;
	} else {
		rc = wf_model_zoo(&m, zoo, 32, 32, 3, 10, &err);
		if (!rc) {
			wf_model_init_params(m, 1);
			if (save)
				rc = wf_model_save(m, &meta, save, &err);
		}
	}
	const char *used = "fp32";
	if (!rc)
		rc = wf_backend_create(&be, device, threads, &err);
	if (!rc)
		rc = wf_backend_set_precision(be,
					      prec		  ? prec
					      : meta.precision[0] ? meta.precision
								  : "fp32",
					      &used, &err);
	if (!rc)
		rc = wf_exec_create(&ex, m, be, batch, 0, &err);
	if (rc)
		goto out;
	size_t per = (size_t)m->in_h * m->in_w * m->in_c;
	x = malloc(sizeof(float) * per * batch);
	out = malloc(sizeof(float) * m->classes * batch);
	wf_rng r;
	wf_rng_seed(&r, 1);
	for (size_t i = 0; i < per * batch; i++)
		x[i] = (float)wf_rng_normal(&r);
	for (int w = 0; w < 3 && !rc; w++) /* warm-up: plans, caches */
		rc = wf_exec_forward(ex, x, batch, 0, 0) || wf_exec_logits(ex, out);
	long iters = 0;
	double t0 = wf_now(), el = 0;
	while (!rc && (el = wf_now() - t0) < seconds) {
		rc = wf_exec_forward(ex, x, batch, 0, 0) || wf_exec_logits(ex, out);
		iters++;
	}
	if (rc) {
		wf_errf(&err, WF_EINTERNAL, "forward failed: %s", wf_exec_error(ex));
		goto out;
	}
	printf("{\"device\":\"%s\",\"precision\":\"%s\",\"int8_convs\":%d,\"batch\":%d,"
	       "\"images_per_sec\":%.2f,\"ms_per_batch\":%.3f}\n",
	       be->name, used, wf_exec_int8_convs(ex), batch, iters * batch / el, 1e3 * el / iters);
out:
	if (rc)
		fprintf(stderr, "weft-bench-infer: %s\n", err.msg);
	free(x);
	free(out);
	wf_exec_free(ex);
	wf_backend_free(be);
	wf_model_free(m);
	wf_model_meta_free(&meta);
	return rc ? 1 : 0;
}
