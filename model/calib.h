/* calib.h: int8 calibration. Runs a model's float forward over sample
 * batches and records the range of every layer's output; the ranges go into
 * the graph ("range" per layer), where an inference executor on a backend set
 * to int8 precision takes its quantisation scales from them. */
#ifndef WF_MODEL_CALIB_H
#define WF_MODEL_CALIB_H

#include "common/error.h"
#include "kernels/kernels.h"
#include "model/model.h"

typedef enum {
	WF_CALIB_MAX,	     /* [min, max] over every sample */
	WF_CALIB_PERCENTILE, /* max |x| clipped at the mean over batches of a percentile of |x| */
} wf_calib_method;

typedef struct wf_calib wf_calib;

/* A calibration of m (parameters on the host, batch norm folded for the
 * ranges to be those of the inference graph) on backend be, in batches of up
 * to max_batch. percentile (WF_CALIB_PERCENTILE): of |x|, in (50, 100]. */
int wf_calib_create(wf_calib **out, wf_model *m, wf_backend *be, int max_batch,
		    wf_calib_method method, double percentile, wf_err *err);
/* Add n preprocessed images [n,H,W,C] (host). */
int wf_calib_add(wf_calib *c, const float *images, int n, wf_err *err);
/* Write the ranges into the model's layers and graph JSON (after at least one
 * wf_calib_add). */
int wf_calib_finish(wf_calib *c, wf_err *err);
void wf_calib_free(wf_calib *c);
/* Calibrate m (max method) on n images of N(0, 1) noise: for benchmarks,
 * whose speed does not depend on the ranges. */
int wf_calib_noise(wf_model *m, wf_backend *be, int n, wf_err *err);
/* 1 when some layer of m has a calibration range (an int8-ready model). */
int wf_model_calibrated(const wf_model *m);
/* Method by name ("max", "percentile"): 0, or -1 if unknown. */
int wf_calib_method_parse(const char *name, wf_calib_method *out);

#endif
