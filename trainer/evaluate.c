#include "trainer/evaluate.h"

#include <string.h>

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
	wf_reader_cfg rc_cfg;
	wf_reader_cfg_default(&rc_cfg);
	rc_cfg.batch = batch;
	rc_cfg.first = 0;
	rc_cfg.slices = 1;
	rc_cfg.total_slices = 1;
	rc_cfg.shuffle = 0;
	rc_cfg.augment = 0;
	rc_cfg.scale = meta->scale;
	memcpy(rc_cfg.mean, meta->mean, sizeof(rc_cfg.mean));
	memcpy(rc_cfg.std, meta->std, sizeof(rc_cfg.std));
	rc_cfg.prefetch = 2;

	memset(r, 0, sizeof(*r));
	wf_reader *rd = NULL;
	int rc = wf_reader_create(&rd, ds, &rc_cfg, err);
	if (rc != 0)
		return rc;
	double loss_sum = 0;
	long correct_sum = 0;
	for (;;) {
		wf_batch *b;
		rc = wf_reader_next(rd, &b, err);
		if (rc <= 0)
			break;
		float loss;
		int correct;
		if (wf_exec_forward(ex, b->images, b->n, 0, 0) != 0 ||
		    wf_exec_loss(ex, b->labels, &loss, &correct) != 0) {
			rc = wf_errf(err, WF_EINTERNAL, "evaluation: %s", wf_exec_error(ex));
			break;
		}
		loss_sum += (double)loss * b->n;
		correct_sum += correct;
		r->count += b->n;
	}
	wf_reader_free(rd);
	if (rc < 0)
		return rc;
	if (r->count > 0) {
		r->loss = loss_sum / (double)r->count;
		r->accuracy = (double)correct_sum / (double)r->count;
	}
	return 0;
}
