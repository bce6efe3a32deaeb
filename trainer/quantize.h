/* quantize.h: `weft export --quantize int8`: calibrate a folded model on
 * sample images, measure fp32 and int8 top-1 on labelled data, and mark the
 * model to be served in int8 when the drop is within bounds. */
#ifndef WF_QUANTIZE_H
#define WF_QUANTIZE_H

#include "common/error.h"
#include "model/calib.h"
#include "model/model.h"

typedef struct wf_quantize_opts {
	const char *calib_data; /* dataset file the calibration samples come from */
	long samples;		/* calibration samples (the first ones of calib_data) */
	wf_calib_method method; /* how ranges are taken */
	double percentile;	/* WF_CALIB_PERCENTILE: of |x| */
	const char *eval_data;	/* labelled dataset for the accuracy check (NULL: calib_data) */
	long eval_samples;	/* the check's samples (the first ones; 0: all) */
	double max_drop;	/* top-1 points int8 may lose against fp32 */
	int force;		/* write even when the drop is larger */
	int threads;		/* cpu threads (0: default) */
} wf_quantize_opts;

/* Calibrate m (folded, parameters on the host) into its graph's ranges,
 * evaluate fp32 and int8, print both, and set meta->precision to "int8".
 * Fails when the drop exceeds o->max_drop (unless o->force), naming both
 * accuracies, or when the data does not fit the model. */
int wf_quantize_int8(wf_model *m, wf_model_meta *meta, const wf_quantize_opts *o, wf_err *err);

#endif
