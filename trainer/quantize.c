/* quantize.c: weft export --quantize int8 (quantize.h). */
#include "trainer/quantize.h"
#include "trainer/evaluate.h"

#include "common/log.h"
#include "kernels/ops.h"
#include "common/util.h"

#include <stdio.h>
#include <string.h>

#define CALIB_BATCH 16

static int calibrate(wf_model *m, const wf_model_meta *meta, wf_backend *be, wf_dataset *ds,
		     const wf_quantize_opts *o, long *used, wf_err *err)
{
	wf_calib *c = NULL;
	wf_reader *rd = NULL;
	wf_reader_cfg cfg;
	wf_eval_reader_cfg(&cfg, meta, CALIB_BATCH);
	int rc = wf_calib_create(&c, m, be, CALIB_BATCH, o->method, o->percentile, err);
	if (!rc)
		rc = wf_reader_create(&rd, ds, &cfg, err);
	*used = 0;
	while (!rc && *used < o->samples) {
		wf_batch *b;
		if ((rc = wf_reader_next(rd, &b, err)) <= 0)
			break;
		int n = (int)WF_MIN((long)b->n, o->samples - *used);
		rc = wf_calib_add(c, b->images, n, err);
		*used += n;
	}
	if (rc >= 0)
		rc = wf_calib_finish(c, err);
	wf_reader_free(rd);
	wf_calib_free(c);
	return rc;
}

/* Top-1 of m on the first `limit` samples of ds (0: all) in precision
 * prec; *int8 gets the convs run in int8. */
static int accuracy(wf_model *m, const wf_model_meta *meta, wf_backend *be, wf_dataset *ds,
		    long limit, const char *prec, double *acc, long *count, int *int8, wf_err *err)
{
	wf_exec *ex = NULL;
	wf_eval_result r = {0};
	int rc = wf_backend_set_precision(be, prec, NULL, err);
	if (!rc)
		rc = wf_exec_create(&ex, m, be, CALIB_BATCH, 0, err);
	if (!rc) {
		*int8 = wf_exec_int8_convs(ex);
		rc = wf_evaluate_ex(ex, ds, meta, CALIB_BATCH, limit, &r, NULL, err);
	}
	wf_exec_free(ex);
	*acc = r.accuracy, *count = r.count;
	return rc;
}

int wf_quantize_int8(wf_model *m, wf_model_meta *meta, const wf_quantize_opts *o, wf_err *err)
{
	wf_backend *be = NULL;
	wf_dataset *cal = NULL, *ev = NULL;
	const char *eval_path = o->eval_data ? o->eval_data : o->calib_data;
	long used = 0, count = 0;
	double acc32 = 0, acc8 = 0;
	int n8 = 0, unused;
	int rc = wf_backend_create(&be, "cpu", o->threads, err);
	if (rc)
		return wf_err_wrap(err, "--quantize int8 runs on the cpu backend"), rc;
	if (!wf_backend_caps_of(be).int8) {
		rc = wf_errf(err, WF_ENOTSUP,
			     "--quantize int8: this CPU has no int8 convolutions (they need "
			     "AVX512-VNNI or AVX-VNNI): export on a machine that has them");
		goto done;
	}
	if ((rc = wf_dataset_open(&cal, o->calib_data, err)) ||
	    (rc = wf_check_data_fits(m, cal, o->calib_data, err)))
		goto wrap_cal;
	if (o->eval_data && ((rc = wf_dataset_open(&ev, o->eval_data, err)) ||
			     (rc = wf_check_data_fits(m, ev, o->eval_data, err))))
		goto wrap_eval;
	wf_info("calibrating on up to %ld samples of %s (%s)", o->samples, o->calib_data,
		o->method == WF_CALIB_MAX ? "max" : "percentile");
	if ((rc = calibrate(m, meta, be, cal, o, &used, err)))
		goto wrap_cal;
	wf_dataset *check = ev ? ev : cal;
	if ((rc = accuracy(m, meta, be, check, o->eval_samples, "fp32", &acc32, &count, &unused,
			   err)) ||
	    (rc = accuracy(m, meta, be, check, o->eval_samples, "int8", &acc8, &count, &n8, err)))
		goto wrap_eval;
	double drop = (acc32 - acc8) * 100.0;
	printf("int8: %d convolutions quantised, calibrated on %ld samples of %s; top-1 on %ld "
	       "samples of %s: fp32 %.2f%%, int8 %.2f%% (a drop of %.2f points)\n",
	       n8, used, o->calib_data, count, eval_path, acc32 * 100.0, acc8 * 100.0,
	       drop > 0 ? drop : 0.0);
	if (drop > o->max_drop && !o->force) {
		rc = wf_errf(
			err, WF_EINVAL,
			"--quantize int8: top-1 fell %.2f points (fp32 %.2f%%, int8 %.2f%% on "
			"%s), more than --max-accuracy-drop %.2f: not exported (--force writes "
			"it anyway; more --calibration-samples or --calibration-method max may "
			"help)",
			drop, acc32 * 100.0, acc8 * 100.0, eval_path, o->max_drop);
		goto done;
	}
	if (drop > o->max_drop)
		wf_warn("top-1 fell %.2f points with int8, more than %.2f: exported anyway "
			"(--force)",
			drop, o->max_drop);
	snprintf(meta->precision, sizeof(meta->precision), "int8");
	goto done;
wrap_cal:
	wf_err_wrap(err, "--calibrate");
	goto done;
wrap_eval:
	wf_err_wrap(err, o->eval_data ? "--eval-data" : "--calibrate");
done:
	wf_dataset_close(cal);
	wf_dataset_close(ev);
	wf_backend_free(be);
	return rc;
}
