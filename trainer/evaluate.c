#include "trainer/evaluate.h"

#include "common/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* "[a, b, ...]" into buf (cut with "..." when long). */
static void format_names(char *buf, size_t size, char *const *v, int n)
{
	size_t len = (size_t)snprintf(buf, size, "[");
	for (int i = 0; i < n && len < size; i++) {
		if (len > 400) {
			len += (size_t)snprintf(buf + len, size - len, ", ... (%d in all)", n);
			break;
		}
		len += (size_t)snprintf(buf + len, size - len, "%s%s", i ? ", " : "",
					v[i] ? v[i] : "?");
	}
	if (len < size)
		snprintf(buf + len, size - len, "]");
}

static int known(char *const *v, int n)
{
	for (int i = 0; v && i < n; i++)
		if (v[i])
			return 1;
	return 0;
}

int wf_check_class_names(char *const *a, int na, const char *what_a, char *const *b, int nb,
			 const char *what_b, wf_err *err)
{
	if (!known(a, na) || !known(b, nb))
		return 0;
	int same = na == nb;
	for (int i = 0; same && i < na; i++)
		same = a[i] && b[i] && strcmp(a[i], b[i]) == 0;
	if (same)
		return 0;
	char la[600], lb[600];
	format_names(la, sizeof(la), a, na);
	format_names(lb, sizeof(lb), b, nb);
	return wf_errf(err, WF_EINVAL,
		       "class names differ (a label means another class): %s has %s, %s has %s",
		       what_a, la, what_b, lb);
}

int wf_check_data_fits(const wf_model *m, const wf_dataset *ds, const char *what, wf_err *err)
{
	const wf_dataset_info *in = wf_dataset_info_get(ds);
	if (in->h != m->in_h || in->w != m->in_w || in->c != m->in_c)
		return wf_errf(err, WF_EINVAL,
			       "%s: images are %dx%dx%d but the model takes %dx%dx%d inputs", what,
			       in->h, in->w, in->c, m->in_h, m->in_w, m->in_c);
	if (in->nclasses != m->classes)
		return wf_errf(err, WF_EINVAL, "%s: has %d classes but the model predicts %d", what,
			       in->nclasses, m->classes);
	return 0;
}

int wf_evaluate(wf_exec *ex, wf_dataset *ds, const wf_model_meta *meta, int batch,
		wf_eval_result *r, wf_err *err)
{
	return wf_evaluate_ex(ex, ds, meta, batch, 0, r, NULL, err);
}

void wf_eval_reader_cfg(wf_reader_cfg *c, const wf_model_meta *meta, int batch)
{
	wf_reader_cfg_default(c);
	c->batch = batch;
	c->first = 0;
	c->slices = 1;
	c->total_slices = 1;
	c->shuffle = 0;
	c->augment = 0;
	c->scale = meta->scale;
	memcpy(c->mean, meta->mean, sizeof(c->mean));
	memcpy(c->std, meta->std, sizeof(c->std));
	c->prefetch = 2;
}

int wf_evaluate_ex(wf_exec *ex, wf_dataset *ds, const wf_model_meta *meta, int batch, long limit,
		   wf_eval_result *r, long *confusion, wf_err *err)
{
	wf_reader_cfg rc_cfg;
	wf_eval_reader_cfg(&rc_cfg, meta, batch);

	memset(r, 0, sizeof(*r));
	int k = wf_dataset_info_get(ds)->nclasses;
	float *probs = malloc(sizeof(float) * (size_t)batch * (size_t)(k > 0 ? k : 1));
	if (!probs)
		return wf_errf(err, WF_ENOMEM, "evaluation: out of memory");
	if (confusion)
		memset(confusion, 0, sizeof(long) * (size_t)k * (size_t)k);
	wf_reader *rd = NULL;
	int rc = wf_reader_create(&rd, ds, &rc_cfg, err);
	if (rc != 0) {
		free(probs);
		return rc;
	}
	double loss_sum = 0;
	long correct_sum = 0, top5_sum = 0;
	while (!limit || r->count < limit) {
		wf_batch *b;
		rc = wf_reader_next(rd, &b, err);
		if (rc <= 0)
			break;
		int n = limit ? (int)WF_MIN((long)b->n, limit - r->count) : b->n;
		float loss;
		int correct;
		if (wf_exec_forward(ex, b->images, n, 0, 0) != 0 ||
		    wf_exec_loss(ex, b->labels, &loss, &correct) != 0) {
			rc = wf_errf(err, WF_EINTERNAL, "evaluation: %s", wf_exec_error(ex));
			break;
		}
		if (wf_exec_probs(ex, probs) != 0) {
			rc = wf_errf(err, WF_EINTERNAL, "evaluation: %s", wf_exec_error(ex));
			break;
		}
		for (int i = 0; i < n; i++) {
			const float *p = probs + (size_t)i * k;
			int y = b->labels[i], above = 0, best = 0;
			for (int c = 0; c < k; c++) {
				above += p[c] > p[y];
				if (p[c] > p[best])
					best = c;
			}
			top5_sum += above < 5;
			if (confusion)
				confusion[(size_t)y * k + best]++;
		}
		loss_sum += (double)loss * n;
		correct_sum += correct;
		r->count += n;
	}
	wf_reader_free(rd);
	free(probs);
	if (rc < 0)
		return rc;
	if (r->count > 0) {
		r->loss = loss_sum / (double)r->count;
		r->accuracy = (double)correct_sum / (double)r->count;
		r->top5 = (double)top5_sum / (double)r->count;
	}
	return 0;
}

int wf_eval_setup_open(wf_eval_setup *s, const char *model_path, const char *data_path,
		       const char *device, const wf_backend_opts *bo, const char *precision,
		       int batch, wf_err *err)
{
	int rc;
	memset(s, 0, sizeof(*s));
	wf_model_meta_init(&s->meta);
	if ((rc = wf_model_load(&s->m, &s->meta, model_path, err)) != 0)
		return rc;
	if ((rc = wf_dataset_open(&s->ds, data_path, err)) != 0)
		return rc;
	if ((rc = wf_check_data_fits(s->m, s->ds, data_path, err)) != 0)
		return wf_err_wrap(err, "model %s", model_path), rc;
	const wf_dataset_info *di = wf_dataset_info_get(s->ds);
	if ((rc = wf_check_class_names(s->meta.class_names, s->meta.nclasses, model_path,
				       di->classes, di->nclasses, data_path, err)) != 0)
		return rc;
	if ((rc = wf_backend_create_opts(&s->be, device, bo, err)) != 0)
		return rc;
	const char *want = precision		  ? precision
			   : s->meta.precision[0] ? s->meta.precision
						  : "fp32";
	if ((rc = wf_backend_set_precision(s->be, want, &s->precision, err)) != 0)
		return wf_err_wrap(err, "%s", precision ? "--precision" : model_path), rc;
	return wf_exec_create(&s->ex, s->m, s->be, batch, 0, err);
}

void wf_eval_setup_free(wf_eval_setup *s)
{
	if (!s)
		return;
	if (s->ex)
		wf_exec_free(s->ex);
	if (s->be)
		wf_backend_free(s->be);
	if (s->ds)
		wf_dataset_close(s->ds);
	if (s->m)
		wf_model_free(s->m);
	wf_model_meta_free(&s->meta);
	memset(s, 0, sizeof(*s));
}
