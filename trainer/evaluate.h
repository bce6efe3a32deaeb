/* evaluate.h: loss and top-1 accuracy of a model over a whole dataset, in
 * inference mode (batch-norm running statistics, no dropout). Used by the
 * training loop and by `weft eval`. */
#ifndef WF_EVALUATE_H
#define WF_EVALUATE_H

#include "common/error.h"
#include "kernels/kernels.h"
#include "model/model.h"
#include "worker/data.h"

typedef struct wf_eval_result {
	double loss;	 /* mean over samples */
	double accuracy; /* top-1, 0..1 */
	long count;	 /* samples seen */
	double top5;	 /* top-5 accuracy (1 when there are 5 classes or fewer) */
} wf_eval_result;

/* A reader over a whole dataset in file order, in batches of `batch`, with
 * meta's preprocessing and no augmentation. */
void wf_eval_reader_cfg(wf_reader_cfg *c, const wf_model_meta *meta, int batch);
/* Run ex (max_batch >= batch) over every sample of ds in file order, with
 * meta's preprocessing. */
int wf_evaluate(wf_exec *ex, wf_dataset *ds, const wf_model_meta *meta, int batch,
		wf_eval_result *r, wf_err *err);
/* wf_evaluate over the first `limit` samples of ds (0: all of them) that
 * also counts confusion[true * K + predicted] (K = the model's classes;
 * caller-allocated, zeroed here) when confusion != NULL. */
int wf_evaluate_ex(wf_exec *ex, wf_dataset *ds, const wf_model_meta *meta, int batch, long limit,
		   wf_eval_result *r, long *confusion, wf_err *err);
/* WF_EINVAL showing both lists when class names a (what_a) and b (what_b)
 * differ in number, name or order; 0 when they agree or either is unknown
 * (NULL or all NULL). */
int wf_check_class_names(char *const *a, int na, const char *what_a, char *const *b, int nb,
			 const char *what_b, wf_err *err);
/* Check that ds's images and classes fit model m; errors name both shapes
 * and `what` (e.g. "data.eval"). */
int wf_check_data_fits(const wf_model *m, const wf_dataset *ds, const char *what, wf_err *err);

/* A model file set up for evaluation on a dataset file (`weft eval`, the
 * evaluator role): the one load-model-then-evaluate path. */
typedef struct wf_eval_setup {
	wf_model *m;
	wf_model_meta meta;
	wf_dataset *ds;
	wf_backend *be;
	wf_exec *ex;	       /* inference executor, max batch `batch` */
	const char *precision; /* the compute precision it runs in */
} wf_eval_setup;

/* Load model_path, open data_path, check that the data fits the model
 * (shape, classes, class names) and build an inference executor for batch
 * on backend device with bo, in precision (NULL: the model file's, else
 * fp32). Errors name the file at fault. Release s with wf_eval_setup_free,
 * also after an error. */
int wf_eval_setup_open(wf_eval_setup *s, const char *model_path, const char *data_path,
		       const char *device, const wf_backend_opts *bo, const char *precision,
		       int batch, wf_err *err);
void wf_eval_setup_free(wf_eval_setup *s);

#endif
