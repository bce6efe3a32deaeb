/* calib.c: int8 calibration (calib.h). A training executor keeps every
 * layer's output after a forward (inference mode: running statistics, no
 * dropout), so each batch's outputs are read back and reduced per layer: the
 * minimum, the maximum, and for the percentile method the batch's percentile
 * of |x|, averaged over batches (outliers in one batch move it little). */
#include "model/calib.h"
#include "common/util.h"
#include "model/graph_priv.h"
#include "model/model_priv.h"
#include "kernels/ops.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

typedef struct layer_stat {
	double lo, hi;	/* min and max seen */
	double pct_sum; /* sum over batches of the percentile of |x| */
} layer_stat;

struct wf_calib {
	wf_model *m;
	wf_backend *be;
	wf_exec *ex;
	wf_calib_method method;
	double percentile;
	layer_stat *st; /* [nlayers] */
	float *host;	/* [max_batch * largest layer output] */
	long batches;
};

int wf_model_calibrated(const wf_model *m)
{
	for (int i = 0; i < m->nlayers; i++)
		if (m->layers[i].has_range)
			return 1;
	return 0;
}

int wf_calib_method_parse(const char *name, wf_calib_method *out)
{
	if (strcmp(name, "max") == 0)
		*out = WF_CALIB_MAX;
	else if (strcmp(name, "percentile") == 0)
		*out = WF_CALIB_PERCENTILE;
	else
		return -1;
	return 0;
}

int wf_calib_create(wf_calib **out, wf_model *m, wf_backend *be, int max_batch,
		    wf_calib_method method, double percentile, wf_err *err)
{
	*out = NULL;
	if (method == WF_CALIB_PERCENTILE && !(percentile > 50 && percentile <= 100))
		return wf_errf(err, WF_EINVAL, "calibration: percentile %g is not in (50, 100]",
			       percentile);
	wf_calib *c = calloc(1, sizeof(*c));
	if (!c)
		return wf_errf(err, WF_ENOMEM, "calibration: out of memory");
	c->m = m, c->be = be, c->method = method, c->percentile = percentile;
	size_t largest = 0;
	for (int i = 0; i < m->nlayers; i++)
		if (wf_layer_size(&m->layers[i]) > largest)
			largest = wf_layer_size(&m->layers[i]);
	c->st = calloc((size_t)m->nlayers, sizeof(*c->st));
	c->host = malloc(sizeof(float) * largest * (size_t)max_batch);
	if (!c->st || !c->host) {
		wf_calib_free(c);
		return wf_errf(err, WF_ENOMEM, "calibration: out of memory");
	}
	for (int i = 0; i < m->nlayers; i++)
		c->st[i].lo = INFINITY, c->st[i].hi = -INFINITY;
	if (be->bf16) { /* ranges are read from float tensors */
		wf_calib_free(c);
		return wf_errf(
			err, WF_EINVAL,
			"calibration: the %s backend is in bf16 precision: calibrate in fp32",
			be->name);
	}
	int rc = wf_exec_create(&c->ex, m, be, max_batch, 1, err);
	if (rc) {
		wf_calib_free(c);
		return rc;
	}
	*out = c;
	return 0;
}

/* The k-th smallest of v[0..n) (v is reordered; Hoare's selection). */
static float kth_smallest(float *v, size_t n, size_t k)
{
	ptrdiff_t lo = 0, hi = (ptrdiff_t)n - 1, want = (ptrdiff_t)k;
	while (lo < hi) {
		float pivot = v[lo + (hi - lo) / 2];
		ptrdiff_t i = lo, j = hi;
		while (i <= j) {
			while (v[i] < pivot)
				i++;
			while (v[j] > pivot)
				j--;
			if (i <= j) {
				float t = v[i];
				v[i++] = v[j];
				v[j--] = t;
			}
		}
		if (want <= j)
			hi = j;
		else if (want >= i)
			lo = i;
		else
			break;
	}
	return v[want];
}

int wf_calib_add(wf_calib *c, const float *images, int n, wf_err *err)
{
	wf_model *m = c->m;
	if (wf_exec_forward(c->ex, images, n, 0, 0) != 0)
		return wf_errf(err, WF_EINTERNAL, "calibration: %s", wf_exec_error(c->ex));
	for (int i = 0; i < m->nlayers; i++) {
		size_t count = (size_t)n * wf_layer_size(&m->layers[i]);
		const float *out = wf_exec_layer_output(c->ex, i);
		if (!out)
			continue; /* no tensor of its own (a padding inside its conv): no range */
		int rc = wf_op_to_host(c->be, c->host, out, count * sizeof(float));
		if (rc)
			return wf_errf(err, rc, "calibration: layer '%s': %s", m->layers[i].name,
				       c->be->err.msg);
		layer_stat *s = &c->st[i];
		for (size_t k = 0; k < count; k++) {
			float v = c->host[k];
			if (!isfinite(v))
				return wf_errf(err, WF_EINVAL,
					       "calibration: layer '%s' gives %g: the model or the "
					       "data is broken",
					       m->layers[i].name, (double)v);
			if (v < s->lo)
				s->lo = v;
			if (v > s->hi)
				s->hi = v;
		}
		if (c->method == WF_CALIB_PERCENTILE && count > 0) {
			for (size_t k = 0; k < count; k++)
				c->host[k] = fabsf(c->host[k]);
			size_t at = (size_t)ceil(c->percentile / 100.0 * (double)count);
			s->pct_sum += kth_smallest(c->host, count, at > 0 ? at - 1 : 0);
		}
	}
	c->batches++;
	return 0;
}

int wf_calib_finish(wf_calib *c, wf_err *err)
{
	wf_model *m = c->m;
	if (c->batches == 0)
		return wf_errf(err, WF_EINVAL, "calibration: no samples were added");
	for (int i = 0; i < m->nlayers; i++) {
		const layer_stat *s = &c->st[i];
		double lo = s->lo, hi = s->hi;
		if (!(lo <= hi)) { /* never read */
			m->layers[i].has_range = 0;
			continue;
		}
		if (c->method == WF_CALIB_PERCENTILE) {
			double clip = s->pct_sum / (double)c->batches;
			hi = fmin(hi, clip);
			lo = lo >= 0 ? fmin(lo, hi) : fmax(lo, -clip);
		}
		m->layers[i].has_range = 1;
		m->layers[i].range[0] = (float)lo;
		m->layers[i].range[1] = (float)hi;
	}
	free(m->graph_json);
	m->graph_json = NULL;
	return wf_graph_canonical_json(m, err);
}

void wf_calib_free(wf_calib *c)
{
	if (!c)
		return;
	wf_exec_free(c->ex);
	free(c->st);
	free(c->host);
	free(c);
}

int wf_calib_noise(wf_model *m, wf_backend *be, int n, wf_err *err)
{
	size_t count = (size_t)n * m->in_h * m->in_w * m->in_c;
	float *x = malloc(sizeof(float) * count);
	wf_calib *c = NULL;
	wf_rng r;
	wf_rng_seed(&r, 11);
	for (size_t i = 0; x && i < count; i++)
		x[i] = (float)wf_rng_normal(&r);
	int rc = x ? wf_calib_create(&c, m, be, n, WF_CALIB_MAX, 0, err)
		   : wf_errf(err, WF_ENOMEM, "calibration: out of memory");
	if (!rc)
		rc = wf_calib_add(c, x, n, err);
	if (!rc)
		rc = wf_calib_finish(c, err);
	wf_calib_free(c);
	free(x);
	return rc;
}
