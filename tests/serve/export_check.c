/* export_check.c: compares the predictions of two model files (a checkpoint
 * and its export) on the first N samples of a dataset, each model with its
 * own recorded preprocessing, in inference mode. Prints one JSON line:
 *   {"count", "max_prob_diff", "max_logit_diff", "max_logit", "top1_agree",
 *    "mean_top_prob" (of A: near 1 means saturated, a weak comparison),
 *    "layers": [A, B], "state": [A, B] (batch-norm floats), "classes": B's labels}
 *   export_check A.h5 B.h5 DATA.h5 [N] [DEVICE] */
#include "common/error.h"
#include "model/model.h"
#include "worker/data.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct side {
	wf_model *m;
	wf_model_meta meta;
	wf_backend *be;
	wf_exec *ex;
	float *x, *logits, *probs;
} side;

static int side_open(side *s, const char *path, const char *device, int n, wf_err *err)
{
	wf_model_meta_init(&s->meta);
	int rc = wf_model_load(&s->m, &s->meta, path, err);
	if (!rc)
		rc = wf_backend_create(&s->be, device, 0, err);
	if (!rc)
		rc = wf_exec_create(&s->ex, s->m, s->be, n, 0, err);
	if (rc)
		return rc;
	size_t per = (size_t)s->m->in_h * s->m->in_w * s->m->in_c;
	s->x = malloc(sizeof(float) * per * (size_t)n);
	s->logits = malloc(sizeof(float) * (size_t)s->m->classes * (size_t)n);
	s->probs = malloc(sizeof(float) * (size_t)s->m->classes * (size_t)n);
	return s->x && s->logits && s->probs ? 0 : wf_errf(err, WF_ENOMEM, "out of memory");
}

static void side_close(side *s)
{
	if (s->ex)
		wf_exec_free(s->ex);
	wf_backend_free(s->be);
	wf_model_free(s->m);
	wf_model_meta_free(&s->meta);
	free(s->x);
	free(s->logits);
	free(s->probs);
}

/* Forward n images (uint8 NHWC) with this model's own preprocessing. */
static int side_run(side *s, const uint8_t *img, int n, wf_err *err)
{
	size_t per = (size_t)s->m->in_h * s->m->in_w * s->m->in_c;
	int c = s->m->in_c;
	for (size_t i = 0; i < per * (size_t)n; i++) {
		int ch = (int)(i % (size_t)c);
		s->x[i] = ((float)img[i] * s->meta.scale - s->meta.mean[ch % 4]) /
			  s->meta.std[ch % 4];
	}
	if (wf_exec_forward(s->ex, s->x, n, 0, 0) || wf_exec_logits(s->ex, s->logits) ||
	    wf_exec_probs(s->ex, s->probs))
		return wf_errf(err, WF_EINTERNAL, "forward: %s", wf_exec_error(s->ex));
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 4) {
		fprintf(stderr, "usage: export_check A.h5 B.h5 DATA.h5 [N] [DEVICE]\n");
		return 2;
	}
	int n = argc > 4 ? atoi(argv[4]) : 256;
	const char *device = argc > 5 ? argv[5] : "cpu";
	wf_err err = {0};
	side a = {0}, b = {0};
	wf_dataset *ds = NULL;
	uint8_t *img = NULL;
	int32_t *labels = NULL;
	int rc = wf_dataset_open(&ds, argv[3], &err);
	if (rc)
		goto out;
	const wf_dataset_info *in = wf_dataset_info_get(ds);
	if (n < 1 || n > in->count)
		n = (int)in->count;
	img = malloc((size_t)n * in->h * in->w * in->c);
	labels = malloc(sizeof(*labels) * (size_t)n);
	if (!img || !labels) {
		rc = wf_errf(&err, WF_ENOMEM, "out of memory");
		goto out;
	}
	if ((rc = wf_dataset_read(ds, 0, n, img, labels, &err)) ||
	    (rc = side_open(&a, argv[1], device, n, &err)) ||
	    (rc = side_open(&b, argv[2], device, n, &err)))
		goto out;
	if (a.m->classes != b.m->classes || a.m->in_h != in->h || b.m->in_h != in->h) {
		rc = wf_errf(&err, WF_EINVAL, "the models and the data do not fit each other");
		goto out;
	}
	if ((rc = side_run(&a, img, n, &err)) || (rc = side_run(&b, img, n, &err)))
		goto out;
	int k = a.m->classes, agree = 0;
	double dp = 0, dl = 0, maxl = 0, top_sum = 0;
	for (int i = 0; i < n; i++) {
		int ta = 0, tb = 0;
		for (int j = 0; j < k; j++) {
			size_t q = (size_t)i * k + j;
			dp = fmax(dp, fabs((double)a.probs[q] - b.probs[q]));
			dl = fmax(dl, fabs((double)a.logits[q] - b.logits[q]));
			maxl = fmax(maxl, fabs((double)a.logits[q]));
			ta = a.probs[q] > a.probs[(size_t)i * k + ta] ? j : ta;
			tb = b.probs[q] > b.probs[(size_t)i * k + tb] ? j : tb;
		}
		agree += ta == tb;
		top_sum += a.probs[(size_t)i * k + ta];
	}
	printf("{\"count\":%d,\"max_prob_diff\":%.3g,\"max_logit_diff\":%.3g,\"max_logit\":%.3g,"
	       "\"top1_agree\":%d,\"mean_top_prob\":%.4f,\"layers\":[%d,%d],\"state\":[%zu,%zu],"
	       "\"classes\":[",
	       n, dp, dl, maxl, agree, top_sum / n, a.m->nlayers, b.m->nlayers, a.m->nstate,
	       b.m->nstate);
	for (int i = 0; b.meta.class_names && i < b.meta.nclasses; i++)
		printf("%s\"%s\"", i ? "," : "",
		       b.meta.class_names[i] ? b.meta.class_names[i] : "");
	printf("]}\n");
out:
	if (rc)
		fprintf(stderr, "export_check: %s\n", err.msg);
	side_close(&a);
	side_close(&b);
	if (ds)
		wf_dataset_close(ds);
	free(img);
	free(labels);
	return rc ? 1 : 0;
}
