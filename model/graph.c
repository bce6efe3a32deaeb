/* graph.c: the model as a DAG of layers. Parses and writes the graph JSON,
 * sorts layers topologically, infers shapes, lays out the flat parameter and
 * state buffers, initialises parameters.
 *
 * Graph JSON (format 1):
 *   {"format": 1, "input_shape": [H,W,C], "classes": K, "output": "logits",
 *    "layers": [{"name": "conv1", "type": "conv2d", "inputs": ["image"],
 *                "config": {"filters": 16, "kernel_size": [3,3], ...}}, ...]}
 * Types and config keys (Keras names and defaults):
 *   input
 *   conv2d     filters, kernel_size, strides [1,1], dilation_rate [1,1], groups 1,
 *              padding "valid"|"same", use_bias true
 *   dense      units, use_bias true
 *   batchnorm  epsilon 1e-3, momentum 0.99
 *   relu, relu6, add, concat (axis -1), gap, flatten
 *   maxpool, avgpool  pool_size [2,2], strides (= pool_size), padding "valid"
 *   zeropad    padding [[t,b],[l,r]] (or n, or [h,w]); default 1
 *   crop       cropping [[t,b],[l,r]] (or n, or [h,w]); default 0
 *   dropout    rate
 * Layers may be listed in any order; they are sorted topologically, keeping
 * the listed order among independent layers. Every layer must lead to the
 * output, whose shape must be [N,classes]. */
#include "model/model.h"
#include "model/model_priv.h"

#include "common/util.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const type_names[WF_LAYER__COUNT] = {
	[WF_LAYER_INPUT] = "input",	[WF_LAYER_CONV2D] = "conv2d",
	[WF_LAYER_DENSE] = "dense",	[WF_LAYER_BATCHNORM] = "batchnorm",
	[WF_LAYER_RELU] = "relu",	[WF_LAYER_RELU6] = "relu6",
	[WF_LAYER_ADD] = "add",		[WF_LAYER_CONCAT] = "concat",
	[WF_LAYER_MAXPOOL] = "maxpool", [WF_LAYER_AVGPOOL] = "avgpool",
	[WF_LAYER_GAP] = "gap",		[WF_LAYER_FLATTEN] = "flatten",
	[WF_LAYER_ZEROPAD] = "zeropad", [WF_LAYER_CROP] = "crop",
	[WF_LAYER_DROPOUT] = "dropout",
};

/* Config keys each type accepts (NULL-terminated). */
static const char *const allowed_keys[WF_LAYER__COUNT][8] = {
	[WF_LAYER_CONV2D] = {"filters", "kernel_size", "strides", "dilation_rate", "groups",
			     "padding", "use_bias", NULL},
	[WF_LAYER_DENSE] = {"units", "use_bias", NULL},
	[WF_LAYER_BATCHNORM] = {"epsilon", "momentum", NULL},
	[WF_LAYER_CONCAT] = {"axis", NULL},
	[WF_LAYER_MAXPOOL] = {"pool_size", "strides", "padding", NULL},
	[WF_LAYER_AVGPOOL] = {"pool_size", "strides", "padding", NULL},
	[WF_LAYER_ZEROPAD] = {"padding", NULL},
	[WF_LAYER_CROP] = {"cropping", NULL},
	[WF_LAYER_DROPOUT] = {"rate", NULL},
};

const char *wf_layer_type_name(wf_layer_type t)
{
	return t >= 0 && t < WF_LAYER__COUNT ? type_names[t] : "?";
}

int wf_layer_flat(const wf_model *m, int i)
{
	for (;;) {
		const wf_layer *l = &m->layers[i];
		switch (l->type) {
		case WF_LAYER_DENSE:
		case WF_LAYER_GAP:
		case WF_LAYER_FLATTEN: return 1;
		case WF_LAYER_INPUT:
		case WF_LAYER_CONV2D:
		case WF_LAYER_MAXPOOL:
		case WF_LAYER_AVGPOOL:
		case WF_LAYER_ZEROPAD:
		case WF_LAYER_CROP: return 0;
		default:
			if (l->ninputs < 1)
				return 0;
			i = l->inputs[0];
		}
	}
}

/* ---- error helpers ------------------------------------------------------ */

/* "graph: layer 'name' (type): <message>" */
static int layer_err(wf_err *err, const wf_layer *l, int code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static int layer_err(wf_err *err, const wf_layer *l, int code, const char *fmt, ...)
{
	char msg[768];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	return wf_errf(err, code, "graph: layer '%s' (%s): %s", l->name,
		       wf_layer_type_name(l->type), msg);
}

/* ---- config readers ----------------------------------------------------- */

/* An integer in [lo, hi]; def when absent (required when def < lo). */
static int cfg_int(json_t *cfg, const char *key, int def, int lo, int hi, int *out,
		   const wf_layer *l, wf_err *err)
{
	json_t *v = json_object_get(cfg, key);
	if (!v) {
		if (def < lo)
			return layer_err(err, l, WF_EINVAL, "config.%s: missing (required)", key);
		*out = def;
		return 0;
	}
	if (!json_is_integer(v))
		return layer_err(err, l, WF_EINVAL, "config.%s: expected an integer", key);
	json_int_t x = json_integer_value(v);
	if (x < lo || x > hi)
		return layer_err(err, l, WF_EINVAL, "config.%s: %lld is out of range [%d, %d]", key,
				 (long long)x, lo, hi);
	*out = (int)x;
	return 0;
}

/* n or [a,b], each in [lo, hi]. present (may be NULL) says whether the key was given. */
static int cfg_pair(json_t *cfg, const char *key, int def, int lo, int hi, int *a, int *b,
		    int *present, const wf_layer *l, wf_err *err)
{
	json_t *v = json_object_get(cfg, key);
	if (json_is_null(v))
		v = NULL; /* Keras writes "strides": null for "same as pool_size" */
	if (present)
		*present = v != NULL;
	if (!v) {
		if (def < lo)
			return layer_err(err, l, WF_EINVAL, "config.%s: missing (required)", key);
		*a = *b = def;
		return 0;
	}
	json_int_t x[2];
	if (json_is_integer(v)) {
		x[0] = x[1] = json_integer_value(v);
	} else if (json_is_array(v) && json_array_size(v) == 2 &&
		   json_is_integer(json_array_get(v, 0)) && json_is_integer(json_array_get(v, 1))) {
		x[0] = json_integer_value(json_array_get(v, 0));
		x[1] = json_integer_value(json_array_get(v, 1));
	} else {
		return layer_err(err, l, WF_EINVAL, "config.%s: expected an integer or [h, w]",
				 key);
	}
	for (int k = 0; k < 2; k++)
		if (x[k] < lo || x[k] > hi)
			return layer_err(err, l, WF_EINVAL,
					 "config.%s: %lld is out of range [%d, %d]", key,
					 (long long)x[k], lo, hi);
	*a = (int)x[0];
	*b = (int)x[1];
	return 0;
}

/* Padding/cropping amounts: n, [h, w] or [[t, b], [l, r]] into p[4] = t, b, l, r. */
static int cfg_pad4(json_t *cfg, const char *key, int def, int p[4], const wf_layer *l, wf_err *err)
{
	json_t *v = json_object_get(cfg, key);
	json_int_t x[4];
	if (!v) {
		p[0] = p[1] = p[2] = p[3] = def;
		return 0;
	}
	if (json_is_integer(v)) {
		x[0] = x[1] = x[2] = x[3] = json_integer_value(v);
	} else if (json_is_array(v) && json_array_size(v) == 2 &&
		   json_is_integer(json_array_get(v, 0)) && json_is_integer(json_array_get(v, 1))) {
		x[0] = x[1] = json_integer_value(json_array_get(v, 0));
		x[2] = x[3] = json_integer_value(json_array_get(v, 1));
	} else if (json_is_array(v) && json_array_size(v) == 2) {
		for (int k = 0; k < 2; k++) {
			json_t *pr = json_array_get(v, k);
			if (!json_is_array(pr) || json_array_size(pr) != 2 ||
			    !json_is_integer(json_array_get(pr, 0)) ||
			    !json_is_integer(json_array_get(pr, 1)))
				return layer_err(
					err, l, WF_EINVAL,
					"config.%s: expected n, [h, w] or [[t, b], [l, r]]", key);
			x[2 * k] = json_integer_value(json_array_get(pr, 0));
			x[2 * k + 1] = json_integer_value(json_array_get(pr, 1));
		}
	} else {
		return layer_err(err, l, WF_EINVAL,
				 "config.%s: expected n, [h, w] or [[t, b], [l, r]]", key);
	}
	for (int k = 0; k < 4; k++) {
		if (x[k] < 0 || x[k] > WF_MODEL_MAX_DIM)
			return layer_err(err, l, WF_EINVAL,
					 "config.%s: %lld is out of range [0, %d]", key,
					 (long long)x[k], WF_MODEL_MAX_DIM);
		p[k] = (int)x[k];
	}
	return 0;
}

static int cfg_real(json_t *cfg, const char *key, double def, double lo, double hi, int lo_open,
		    float *out, const wf_layer *l, wf_err *err)
{
	json_t *v = json_object_get(cfg, key);
	if (!v) {
		if (isnan(def))
			return layer_err(err, l, WF_EINVAL, "config.%s: missing (required)", key);
		*out = (float)def;
		return 0;
	}
	if (!json_is_number(v))
		return layer_err(err, l, WF_EINVAL, "config.%s: expected a number", key);
	double x = json_number_value(v);
	if (!(x >= lo && x <= hi) || (lo_open && x == lo))
		return layer_err(err, l, WF_EINVAL, "config.%s: %g is out of range %c%g, %g]", key,
				 x, lo_open ? '(' : '[', lo, hi);
	*out = (float)x;
	return 0;
}

static int cfg_bool(json_t *cfg, const char *key, int def, int *out, const wf_layer *l, wf_err *err)
{
	json_t *v = json_object_get(cfg, key);
	if (!v) {
		*out = def;
		return 0;
	}
	if (!json_is_boolean(v))
		return layer_err(err, l, WF_EINVAL, "config.%s: expected true or false", key);
	*out = json_is_true(v);
	return 0;
}

static int cfg_padding(json_t *cfg, const wf_layer *l, int *same, wf_err *err)
{
	json_t *v = json_object_get(cfg, "padding");
	const char *s = v ? json_string_value(v) : "valid";
	if (!s || (strcmp(s, "same") != 0 && strcmp(s, "valid") != 0))
		return layer_err(err, l, WF_EINVAL,
				 "config.padding: expected \"same\" or \"valid\"");
	*same = strcmp(s, "same") == 0;
	return 0;
}

/* Fill l's config from cfg (l->name and l->type already set). */
static int parse_config(wf_layer *l, json_t *cfg, wf_err *err)
{
	const char *key;
	json_t *val;
	int rc = 0, present;
	json_object_foreach(cfg, key, val)
	{
		int ok = 0;
		for (int k = 0; allowed_keys[l->type][k]; k++)
			ok |= strcmp(allowed_keys[l->type][k], key) == 0;
		if (!ok)
			return layer_err(err, l, WF_EINVAL, "config: unknown key '%s'", key);
	}
	l->groups = 1;
	l->sh = l->sw = l->dh = l->dw = 1;
	switch (l->type) {
	case WF_LAYER_CONV2D:
		if ((rc = cfg_int(cfg, "filters", -1, 1, WF_MODEL_MAX_DIM, &l->filters, l, err)) ||
		    (rc = cfg_pair(cfg, "kernel_size", -1, 1, WF_MODEL_MAX_DIM, &l->kh, &l->kw,
				   NULL, l, err)) ||
		    (rc = cfg_pair(cfg, "strides", 1, 1, WF_MODEL_MAX_DIM, &l->sh, &l->sw, NULL, l,
				   err)) ||
		    (rc = cfg_pair(cfg, "dilation_rate", 1, 1, WF_MODEL_MAX_DIM, &l->dh, &l->dw,
				   NULL, l, err)) ||
		    (rc = cfg_int(cfg, "groups", 1, 1, WF_MODEL_MAX_DIM, &l->groups, l, err)) ||
		    (rc = cfg_padding(cfg, l, &l->same, err)) ||
		    (rc = cfg_bool(cfg, "use_bias", 1, &l->use_bias, l, err)))
			return rc;
		break;
	case WF_LAYER_DENSE:
		if ((rc = cfg_int(cfg, "units", -1, 1, WF_MODEL_MAX_DIM, &l->units, l, err)) ||
		    (rc = cfg_bool(cfg, "use_bias", 1, &l->use_bias, l, err)))
			return rc;
		break;
	case WF_LAYER_BATCHNORM:
		if ((rc = cfg_real(cfg, "epsilon", 1e-3, 0, 1e3, 1, &l->eps, l, err)) ||
		    (rc = cfg_real(cfg, "momentum", 0.99, 0, 1, 0, &l->momentum, l, err)))
			return rc;
		break;
	case WF_LAYER_CONCAT: {
		int axis;
		if ((rc = cfg_int(cfg, "axis", -1, -1, 3, &axis, l, err)))
			return rc;
		if (axis != -1)
			return layer_err(err, l, WF_EINVAL,
					 "config.axis: %d is not supported (only -1, the channels)",
					 axis);
		break;
	}
	case WF_LAYER_MAXPOOL:
	case WF_LAYER_AVGPOOL:
		if ((rc = cfg_pair(cfg, "pool_size", 2, 1, WF_MODEL_MAX_DIM, &l->kh, &l->kw, NULL,
				   l, err)) ||
		    (rc = cfg_pair(cfg, "strides", 1, 1, WF_MODEL_MAX_DIM, &l->sh, &l->sw, &present,
				   l, err)) ||
		    (rc = cfg_padding(cfg, l, &l->same, err)))
			return rc;
		if (!present) {
			l->sh = l->kh;
			l->sw = l->kw;
		}
		break;
	case WF_LAYER_ZEROPAD: return cfg_pad4(cfg, "padding", 1, l->pad, l, err);
	case WF_LAYER_CROP: return cfg_pad4(cfg, "cropping", 0, l->pad, l, err);
	case WF_LAYER_DROPOUT:
		if ((rc = cfg_real(cfg, "rate", NAN, 0, 1, 0, &l->rate, l, err)))
			return rc;
		if (l->rate >= 1.0f)
			return layer_err(err, l, WF_EINVAL, "config.rate: %g must be below 1",
					 (double)l->rate);
		break;
	default: break;
	}
	return 0;
}

/* ---- shape inference ---------------------------------------------------- */

static void shape_str(const wf_model *m, int i, char *buf, size_t n)
{
	const wf_layer *l = &m->layers[i];
	if (wf_layer_flat(m, i))
		snprintf(buf, n, "[%d]", l->oc);
	else
		snprintf(buf, n, "[%d,%d,%d]", l->oh, l->ow, l->oc);
}

static int infer_shape(wf_model *m, int i, wf_err *err)
{
	wf_layer *l = &m->layers[i];
	const wf_layer *x = l->ninputs > 0 ? &m->layers[l->inputs[0]] : NULL;
	int flat = x ? wf_layer_flat(m, l->inputs[0]) : 0;
	char s0[64], s1[64];
	int pt, pb;

	/* which rank each type takes */
	switch (l->type) {
	case WF_LAYER_CONV2D:
	case WF_LAYER_MAXPOOL:
	case WF_LAYER_AVGPOOL:
	case WF_LAYER_GAP:
	case WF_LAYER_ZEROPAD:
	case WF_LAYER_CROP:
		if (flat)
			return layer_err(
				err, l, WF_EINVAL,
				"inputs: '%s' is 2-D [N,%d]; %s needs a 4-D [N,H,W,C] input",
				x->name, x->oc, wf_layer_type_name(l->type));
		break;
	case WF_LAYER_DENSE:
		if (!flat)
			return layer_err(
				err, l, WF_EINVAL,
				"inputs: '%s' is 4-D [N,%d,%d,%d]; dense needs a 2-D input "
				"(add a flatten or gap layer)",
				x->name, x->oh, x->ow, x->oc);
		break;
	default: break;
	}

	switch (l->type) {
	case WF_LAYER_INPUT: l->oh = m->in_h, l->ow = m->in_w, l->oc = m->in_c; break;
	case WF_LAYER_CONV2D: {
		if (x->oc % l->groups != 0 || l->filters % l->groups != 0)
			return layer_err(
				err, l, WF_EINVAL,
				"config.groups: %d does not divide the input channels (%d) "
				"and filters (%d)",
				l->groups, x->oc, l->filters);
		long ekh = (long)(l->kh - 1) * l->dh + 1, ekw = (long)(l->kw - 1) * l->dw + 1;
		if (l->same) {
			wf_same_pad(x->oh, l->kh, l->sh, l->dh, &l->oh, &pt, &pb);
			wf_same_pad(x->ow, l->kw, l->sw, l->dw, &l->ow, &pt, &pb);
		} else {
			if (ekh > x->oh || ekw > x->ow)
				return layer_err(
					err, l, WF_EINVAL,
					"config.kernel_size: window %ldx%ld (with dilation) "
					"is larger than the input %dx%d ('valid' padding)",
					ekh, ekw, x->oh, x->ow);
			l->oh = (int)((x->oh - ekh) / l->sh + 1);
			l->ow = (int)((x->ow - ekw) / l->sw + 1);
		}
		l->oc = l->filters;
		break;
	}
	case WF_LAYER_DENSE: l->oh = l->ow = 1, l->oc = l->units; break;
	case WF_LAYER_MAXPOOL:
	case WF_LAYER_AVGPOOL:
		if (l->same) {
			wf_same_pad(x->oh, l->kh, l->sh, 1, &l->oh, &pt, &pb);
			wf_same_pad(x->ow, l->kw, l->sw, 1, &l->ow, &pt, &pb);
		} else {
			if (l->kh > x->oh || l->kw > x->ow)
				return layer_err(
					err, l, WF_EINVAL,
					"config.pool_size: window %dx%d is larger than the "
					"input %dx%d ('valid' padding)",
					l->kh, l->kw, x->oh, x->ow);
			l->oh = (x->oh - l->kh) / l->sh + 1;
			l->ow = (x->ow - l->kw) / l->sw + 1;
		}
		l->oc = x->oc;
		break;
	case WF_LAYER_GAP: l->oh = l->ow = 1, l->oc = x->oc; break;
	case WF_LAYER_FLATTEN: {
		size_t f = wf_layer_size(x);
		if (f > WF_MODEL_MAX_FLOATS)
			return layer_err(err, l, WF_EINVAL, "output: %zu features is too many", f);
		l->oh = l->ow = 1, l->oc = (int)f;
		break;
	}
	case WF_LAYER_ZEROPAD:
		l->oh = x->oh + l->pad[0] + l->pad[1];
		l->ow = x->ow + l->pad[2] + l->pad[3];
		l->oc = x->oc;
		break;
	case WF_LAYER_CROP:
		if ((long)l->pad[0] + l->pad[1] >= x->oh || (long)l->pad[2] + l->pad[3] >= x->ow)
			return layer_err(err, l, WF_EINVAL,
					 "config.cropping: [[%d,%d],[%d,%d]] leaves nothing of the "
					 "input %dx%d",
					 l->pad[0], l->pad[1], l->pad[2], l->pad[3], x->oh, x->ow);
		l->oh = x->oh - l->pad[0] - l->pad[1];
		l->ow = x->ow - l->pad[2] - l->pad[3];
		l->oc = x->oc;
		break;
	case WF_LAYER_ADD:
		for (int k = 1; k < l->ninputs; k++) {
			const wf_layer *y = &m->layers[l->inputs[k]];
			if (y->oh != x->oh || y->ow != x->ow || y->oc != x->oc ||
			    wf_layer_flat(m, l->inputs[k]) != flat) {
				shape_str(m, l->inputs[0], s0, sizeof(s0));
				shape_str(m, l->inputs[k], s1, sizeof(s1));
				return layer_err(err, l, WF_EINVAL,
						 "inputs: shapes differ: '%s' is %s, '%s' is %s",
						 x->name, s0, y->name, s1);
			}
		}
		l->oh = x->oh, l->ow = x->ow, l->oc = x->oc;
		break;
	case WF_LAYER_CONCAT: {
		long c = 0;
		for (int k = 0; k < l->ninputs; k++) {
			const wf_layer *y = &m->layers[l->inputs[k]];
			if (y->oh != x->oh || y->ow != x->ow ||
			    wf_layer_flat(m, l->inputs[k]) != flat) {
				shape_str(m, l->inputs[0], s0, sizeof(s0));
				shape_str(m, l->inputs[k], s1, sizeof(s1));
				return layer_err(
					err, l, WF_EINVAL,
					"inputs: all but the channel axis must match: '%s' "
					"is %s, '%s' is %s",
					x->name, s0, y->name, s1);
			}
			c += y->oc;
		}
		if ((unsigned long)c > WF_MODEL_MAX_FLOATS)
			return layer_err(err, l, WF_EINVAL, "output: %ld channels is too many", c);
		l->oh = x->oh, l->ow = x->ow, l->oc = (int)c;
		break;
	}
	default: /* batchnorm, relu, relu6, dropout: same shape */
		l->oh = x->oh, l->ow = x->ow, l->oc = x->oc;
		break;
	}
	if (l->oh < 1 || l->ow < 1 || l->oc < 1 || wf_layer_size(l) > WF_MODEL_MAX_FLOATS)
		return layer_err(err, l, WF_EINVAL, "output shape [%d,%d,%d] is empty or too large",
				 l->oh, l->ow, l->oc);
	return 0;
}

/* ---- parameter layout --------------------------------------------------- */

static int add_view(wf_model *m, int layer, const char *param, int trainable, size_t *cursor,
		    int ndim, const int *shape)
{
	wf_view *v = &m->views[m->nviews];
	snprintf(v->name, sizeof(v->name), "%s/%s", m->layers[layer].name, param);
	v->trainable = trainable;
	v->offset = *cursor;
	v->ndim = ndim;
	v->count = 1;
	for (int k = 0; k < ndim; k++) {
		v->shape[k] = shape[k];
		v->count *= (size_t)shape[k];
	}
	*cursor += v->count;
	return m->nviews++;
}

/* Trainable views in reverse topological order (last layer at offset 0), then
 * state views likewise. */
static int layout(wf_model *m, wf_err *err)
{
	int nv = 0;
	for (int i = 0; i < m->nlayers; i++) {
		const wf_layer *l = &m->layers[i];
		if (l->type == WF_LAYER_CONV2D || l->type == WF_LAYER_DENSE)
			nv += 1 + l->use_bias;
		else if (l->type == WF_LAYER_BATCHNORM)
			nv += 4;
	}
	m->views = calloc(nv ? (size_t)nv : 1, sizeof(*m->views));
	if (!m->views)
		return wf_errf(err, WF_ENOMEM, "graph: out of memory for %d parameter views", nv);
	for (int i = 0; i < m->nlayers; i++) {
		wf_layer *l = &m->layers[i];
		l->p_kernel = l->p_bias = l->p_gamma = l->p_beta = l->s_mean = l->s_var = -1;
	}
	size_t cur = 0;
	for (int i = m->nlayers - 1; i >= 0; i--) {
		wf_layer *l = &m->layers[i];
		const wf_layer *x = l->ninputs ? &m->layers[l->inputs[0]] : NULL;
		int c = x ? x->oc : 0;
		if (l->type == WF_LAYER_CONV2D) {
			int ks[4] = {l->kh, l->kw, c / l->groups, l->filters};
			l->p_kernel = add_view(m, i, "kernel", 1, &cur, 4, ks);
			if (l->use_bias)
				l->p_bias = add_view(m, i, "bias", 1, &cur, 1, &l->filters);
		} else if (l->type == WF_LAYER_DENSE) {
			int ks[2] = {c, l->units};
			l->p_kernel = add_view(m, i, "kernel", 1, &cur, 2, ks);
			if (l->use_bias)
				l->p_bias = add_view(m, i, "bias", 1, &cur, 1, &l->units);
		} else if (l->type == WF_LAYER_BATCHNORM) {
			l->p_gamma = add_view(m, i, "gamma", 1, &cur, 1, &c);
			l->p_beta = add_view(m, i, "beta", 1, &cur, 1, &c);
		}
		if (cur > WF_MODEL_MAX_FLOATS)
			return layer_err(err, l, WF_EINVAL,
					 "parameters: the model needs more than %lu floats",
					 (unsigned long)WF_MODEL_MAX_FLOATS);
	}
	m->nparams = cur;
	cur = 0;
	for (int i = m->nlayers - 1; i >= 0; i--) {
		wf_layer *l = &m->layers[i];
		if (l->type != WF_LAYER_BATCHNORM)
			continue;
		int c = m->layers[l->inputs[0]].oc;
		l->s_mean = add_view(m, i, "moving_mean", 0, &cur, 1, &c);
		l->s_var = add_view(m, i, "moving_variance", 0, &cur, 1, &c);
	}
	m->nstate = cur;
	m->params = calloc(m->nparams ? m->nparams : 1, sizeof(float));
	m->state = calloc(m->nstate ? m->nstate : 1, sizeof(float));
	if (!m->params || !m->state)
		return wf_errf(err, WF_ENOMEM, "graph: out of memory for %zu parameters",
			       m->nparams + m->nstate);
	return 0;
}

/* ---- canonical JSON ----------------------------------------------------- */

/* A double that prints as the shortest decimal reading back as f. */
static json_t *json_float(float f)
{
	char buf[32];
	for (int p = 6; p <= 9; p++) {
		snprintf(buf, sizeof(buf), "%.*g", p, (double)f);
		if (strtof(buf, NULL) == f)
			break;
	}
	return json_real(strtod(buf, NULL));
}

static json_t *json_pair(int a, int b)
{
	return json_pack("[ii]", a, b);
}

static json_t *layer_config_json(const wf_layer *l)
{
	const char *pad = l->same ? "same" : "valid";
	switch (l->type) {
	case WF_LAYER_CONV2D:
		return json_pack("{s:i, s:o, s:o, s:o, s:i, s:s, s:b}", "filters", l->filters,
				 "kernel_size", json_pair(l->kh, l->kw), "strides",
				 json_pair(l->sh, l->sw), "dilation_rate", json_pair(l->dh, l->dw),
				 "groups", l->groups, "padding", pad, "use_bias", l->use_bias);
	case WF_LAYER_DENSE:
		return json_pack("{s:i, s:b}", "units", l->units, "use_bias", l->use_bias);
	case WF_LAYER_BATCHNORM:
		return json_pack("{s:o, s:o}", "epsilon", json_float(l->eps), "momentum",
				 json_float(l->momentum));
	case WF_LAYER_MAXPOOL:
	case WF_LAYER_AVGPOOL:
		return json_pack("{s:o, s:o, s:s}", "pool_size", json_pair(l->kh, l->kw), "strides",
				 json_pair(l->sh, l->sw), "padding", pad);
	case WF_LAYER_ZEROPAD:
	case WF_LAYER_CROP:
		return json_pack("{s:[[ii][ii]]}",
				 l->type == WF_LAYER_ZEROPAD ? "padding" : "cropping", l->pad[0],
				 l->pad[1], l->pad[2], l->pad[3]);
	case WF_LAYER_DROPOUT: return json_pack("{s:o}", "rate", json_float(l->rate));
	default: return json_object();
	}
}

static int canonical_json(wf_model *m, wf_err *err)
{
	json_t *layers = json_array();
	json_t *root = json_pack("{s:i, s:[iii], s:i, s:s, s:o}", "format", 1, "input_shape",
				 m->in_h, m->in_w, m->in_c, "classes", m->classes, "output",
				 m->layers[m->output].name, "layers", layers);
	if (!root)
		goto oom;
	for (int i = 0; i < m->nlayers; i++) {
		const wf_layer *l = &m->layers[i];
		json_t *ins = json_array();
		for (int k = 0; k < l->ninputs; k++)
			json_array_append_new(ins, json_string(m->layers[l->inputs[k]].name));
		json_t *jl = json_pack("{s:s, s:s, s:o, s:o}", "name", l->name, "type",
				       wf_layer_type_name(l->type), "inputs", ins, "config",
				       layer_config_json(l));
		if (!jl || json_array_append_new(layers, jl) != 0)
			goto oom;
	}
	m->graph_json =
		json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(9));
	json_decref(root);
	if (!m->graph_json)
		return wf_errf(err, WF_ENOMEM, "graph: out of memory writing JSON");
	return 0;
oom:
	json_decref(root);
	return wf_errf(err, WF_ENOMEM, "graph: out of memory writing JSON");
}

/* ---- parsing ------------------------------------------------------------ */

typedef struct raw_layer {
	wf_layer l;
	json_t *inputs;		   /* array of names (borrowed from the document) */
	int in_idx[WF_MAX_INPUTS]; /* producers, as indices into the listed order */
} raw_layer;

static const raw_layer *sort_base;

static int cmp_by_name(const void *a, const void *b)
{
	int ia = *(const int *)a, ib = *(const int *)b;
	return strcmp(sort_base[ia].l.name, sort_base[ib].l.name);
}

/* Index (listed order) of the layer named s, or -1; byname is sorted by name. */
static int find_name(const raw_layer *raw, const int *byname, int n, const char *s)
{
	int lo = 0, hi = n - 1;
	while (lo <= hi) {
		int mid = (lo + hi) / 2;
		int c = strcmp(s, raw[byname[mid]].l.name);
		if (c == 0)
			return byname[mid];
		if (c < 0)
			hi = mid - 1;
		else
			lo = mid + 1;
	}
	return -1;
}

static int parse_layer(raw_layer *r, json_t *jl, int index, wf_err *err)
{
	wf_layer *l = &r->l;
	if (!json_is_object(jl))
		return wf_errf(err, WF_EINVAL, "graph: layers[%d]: expected an object", index);
	const char *key;
	json_t *val;
	json_object_foreach(jl, key, val)
	{
		if (strcmp(key, "name") && strcmp(key, "type") && strcmp(key, "inputs") &&
		    strcmp(key, "config"))
			return wf_errf(err, WF_EINVAL, "graph: layers[%d]: unknown key '%s'", index,
				       key);
	}
	const char *name = json_string_value(json_object_get(jl, "name"));
	if (!name)
		return wf_errf(err, WF_EINVAL, "graph: layers[%d].name: missing or not a string",
			       index);
	size_t nlen = strlen(name);
	if (nlen == 0 || nlen >= WF_NAME_MAX || strchr(name, '/') ||
	    nlen != json_string_length(json_object_get(jl, "name")))
		return wf_errf(err, WF_EINVAL,
			       "graph: layers[%d].name: '%.64s' must be 1-%d characters, without "
			       "'/' or NUL",
			       index, name, WF_NAME_MAX - 1);
	memcpy(l->name, name, nlen + 1);
	const char *type = json_string_value(json_object_get(jl, "type"));
	if (!type)
		return wf_errf(err, WF_EINVAL, "graph: layer '%s': type: missing or not a string",
			       name);
	int t = -1;
	for (int k = 0; k < WF_LAYER__COUNT; k++)
		if (strcmp(type, type_names[k]) == 0)
			t = k;
	if (t < 0)
		return wf_errf(err, WF_EINVAL,
			       "graph: layer '%s': type: unknown type '%.64s' (known: input conv2d "
			       "dense batchnorm relu relu6 add concat maxpool avgpool gap flatten "
			       "zeropad crop dropout)",
			       name, type);
	l->type = (wf_layer_type)t;
	json_t *ins = json_object_get(jl, "inputs");
	if (ins && !json_is_array(ins))
		return layer_err(err, l, WF_EINVAL, "inputs: expected an array of layer names");
	if (json_array_size(ins) > WF_MAX_INPUTS)
		return layer_err(err, l, WF_EINVAL, "inputs: %zu is more than %d",
				 json_array_size(ins), WF_MAX_INPUTS);
	for (size_t k = 0; k < json_array_size(ins); k++)
		if (!json_is_string(json_array_get(ins, k)))
			return layer_err(err, l, WF_EINVAL, "inputs[%zu]: expected a layer name",
					 k);
	r->inputs = ins;
	l->ninputs = (int)json_array_size(ins);
	/* how many inputs each type takes */
	if (l->type == WF_LAYER_INPUT) {
		if (l->ninputs != 0)
			return layer_err(err, l, WF_EINVAL, "inputs: an input layer takes none");
	} else if (l->type == WF_LAYER_ADD || l->type == WF_LAYER_CONCAT) {
		if (l->ninputs < 2)
			return layer_err(err, l, WF_EINVAL, "inputs: needs at least 2, got %d",
					 l->ninputs);
	} else if (l->ninputs != 1) {
		return layer_err(err, l, WF_EINVAL, "inputs: needs exactly 1, got %d", l->ninputs);
	}
	json_t *cfg = json_object_get(jl, "config");
	if (cfg && !json_is_object(cfg) && !json_is_null(cfg))
		return layer_err(err, l, WF_EINVAL, "config: expected an object");
	json_t *empty = json_object();
	int rc = parse_config(l, json_is_object(cfg) ? cfg : empty, err);
	json_decref(empty);
	return rc;
}

/* Stable topological order of raw[0..n) into order[]; errors name a layer on a cycle. */
static int topo_sort(raw_layer *raw, int n, int *order, wf_err *err)
{
	char *placed = calloc((size_t)n, 1);
	if (!placed)
		return wf_errf(err, WF_ENOMEM, "graph: out of memory");
	int count = 0, lo = 0;
	while (count < n) {
		int found = -1;
		for (int i = lo; i < n && found < 0; i++) {
			if (placed[i])
				continue;
			int ready = 1;
			for (int k = 0; k < raw[i].l.ninputs && ready; k++)
				ready = placed[raw[i].in_idx[k]];
			if (ready)
				found = i;
		}
		if (found < 0)
			break;
		placed[found] = 1;
		order[count++] = found;
		while (lo < n && placed[lo])
			lo++;
	}
	int rc = 0;
	if (count < n) {
		/* walk unplaced inputs until a layer repeats: that one is on a cycle */
		int i = lo, steps = 0;
		while (steps++ < n) {
			int next = -1;
			for (int k = 0; k < raw[i].l.ninputs && next < 0; k++)
				if (!placed[raw[i].in_idx[k]])
					next = raw[i].in_idx[k];
			i = next;
		}
		int j = -1;
		for (int k = 0; k < raw[i].l.ninputs && j < 0; k++)
			if (!placed[raw[i].in_idx[k]])
				j = raw[i].in_idx[k];
		rc = layer_err(err, &raw[i].l, WF_EINVAL, "inputs: cycle through '%s'",
			       raw[j].l.name);
	}
	free(placed);
	return rc;
}

static int parse_header(wf_model *m, json_t *root, const char **output, json_t **layers,
			wf_err *err)
{
	if (!json_is_object(root))
		return wf_errf(err, WF_EINVAL, "graph: expected a JSON object");
	const char *key;
	json_t *val;
	json_object_foreach(root, key, val)
	{
		if (strcmp(key, "format") && strcmp(key, "input_shape") && strcmp(key, "classes") &&
		    strcmp(key, "output") && strcmp(key, "layers"))
			return wf_errf(err, WF_EINVAL, "graph: unknown key '%s'", key);
	}
	json_t *f = json_object_get(root, "format");
	if (!json_is_integer(f))
		return wf_errf(err, WF_EINVAL, "graph: format: missing or not an integer");
	if (json_integer_value(f) != 1)
		return wf_errf(err, WF_EFORMAT,
			       "graph: format: version %lld is not supported (this build reads 1)",
			       (long long)json_integer_value(f));
	json_t *s = json_object_get(root, "input_shape");
	int dims[3];
	if (!json_is_array(s) || json_array_size(s) != 3)
		return wf_errf(err, WF_EINVAL, "graph: input_shape: expected [H, W, C]");
	for (int k = 0; k < 3; k++) {
		json_t *d = json_array_get(s, (size_t)k);
		if (!json_is_integer(d) || json_integer_value(d) < 1 ||
		    json_integer_value(d) > WF_MODEL_MAX_DIM)
			return wf_errf(err, WF_EINVAL,
				       "graph: input_shape[%d]: expected an integer in [1, %d]", k,
				       WF_MODEL_MAX_DIM);
		dims[k] = (int)json_integer_value(d);
	}
	m->in_h = dims[0], m->in_w = dims[1], m->in_c = dims[2];
	if ((size_t)m->in_h * m->in_w * m->in_c > WF_MODEL_MAX_FLOATS)
		return wf_errf(err, WF_EINVAL, "graph: input_shape: [%d,%d,%d] is too large",
			       m->in_h, m->in_w, m->in_c);
	json_t *k = json_object_get(root, "classes");
	if (!json_is_integer(k) || json_integer_value(k) < 1 ||
	    json_integer_value(k) > WF_MODEL_MAX_DIM)
		return wf_errf(err, WF_EINVAL, "graph: classes: expected an integer in [1, %d]",
			       WF_MODEL_MAX_DIM);
	m->classes = (int)json_integer_value(k);
	*output = json_string_value(json_object_get(root, "output"));
	if (!*output)
		return wf_errf(err, WF_EINVAL, "graph: output: missing or not a layer name");
	*layers = json_object_get(root, "layers");
	if (!json_is_array(*layers) || json_array_size(*layers) == 0)
		return wf_errf(err, WF_EINVAL, "graph: layers: expected a non-empty array");
	if (json_array_size(*layers) > WF_MODEL_MAX_LAYERS)
		return wf_errf(err, WF_EINVAL, "graph: layers: %zu is more than %d",
			       json_array_size(*layers), WF_MODEL_MAX_LAYERS);
	return 0;
}

/* Resolve input names, sort, and copy the layers into m in topological order. */
static int build_layers(wf_model *m, raw_layer *raw, int n, const char *output, wf_err *err)
{
	int rc = WF_ENOMEM;
	int *byname = malloc(sizeof(int) * (size_t)n);
	int *order = malloc(sizeof(int) * (size_t)n);
	int *pos = malloc(sizeof(int) * (size_t)n);
	char *live = calloc((size_t)n, 1);
	m->layers = calloc((size_t)n, sizeof(*m->layers));
	if (!byname || !order || !pos || !live || !m->layers) {
		wf_errf(err, rc, "graph: out of memory for %d layers", n);
		goto free_tmp;
	}
	for (int i = 0; i < n; i++)
		byname[i] = i;
	sort_base = raw;
	qsort(byname, (size_t)n, sizeof(int), cmp_by_name);
	for (int i = 1; i < n; i++) {
		if (strcmp(raw[byname[i - 1]].l.name, raw[byname[i]].l.name) == 0) {
			int a = WF_MIN(byname[i - 1], byname[i]),
			    b = WF_MAX(byname[i - 1], byname[i]);
			rc = wf_errf(
				err, WF_EINVAL,
				"graph: layers[%d].name: '%s' is already the name of layers[%d]", b,
				raw[b].l.name, a);
			goto free_tmp;
		}
	}
	int ninput = 0;
	for (int i = 0; i < n; i++) {
		for (int k = 0; k < raw[i].l.ninputs; k++) {
			const char *s = json_string_value(json_array_get(raw[i].inputs, (size_t)k));
			int j = find_name(raw, byname, n, s);
			if (j < 0) {
				rc = layer_err(err, &raw[i].l, WF_EINVAL,
					       "inputs[%d]: no layer named '%.128s'", k, s);
				goto free_tmp;
			}
			raw[i].in_idx[k] = j;
		}
		if (raw[i].l.type == WF_LAYER_INPUT && ++ninput > 1) {
			rc = layer_err(err, &raw[i].l, WF_EINVAL,
				       "type: a second input layer (one image input is supported)");
			goto free_tmp;
		}
	}
	if (ninput == 0) {
		rc = wf_errf(err, WF_EINVAL, "graph: layers: no layer of type 'input'");
		goto free_tmp;
	}
	int out = find_name(raw, byname, n, output);
	if (out < 0) {
		rc = wf_errf(err, WF_EINVAL, "graph: output: no layer named '%.128s'", output);
		goto free_tmp;
	}
	/* every layer must feed the output: mark its ancestors */
	live[out] = 1;
	for (int changed = 1; changed;) {
		changed = 0;
		for (int i = 0; i < n; i++)
			for (int k = 0; live[i] && k < raw[i].l.ninputs; k++)
				if (!live[raw[i].in_idx[k]])
					live[raw[i].in_idx[k]] = changed = 1;
	}
	if ((rc = topo_sort(raw, n, order, err)))
		goto free_tmp;
	for (int i = 0; i < n; i++) {
		if (!live[i]) {
			rc = layer_err(
				err, &raw[i].l, WF_EINVAL,
				"does not lead to the output '%.128s' (remove it, or make it "
				"an input of a layer that does)",
				output);
			goto free_tmp;
		}
	}
	for (int i = 0; i < n; i++)
		pos[order[i]] = i;
	for (int i = 0; i < n; i++) {
		m->layers[i] = raw[order[i]].l;
		for (int k = 0; k < m->layers[i].ninputs; k++)
			m->layers[i].inputs[k] = pos[raw[order[i]].in_idx[k]];
	}
	m->nlayers = n;
	m->output = pos[out];
	rc = 0;
free_tmp:
	free(byname);
	free(order);
	free(pos);
	free(live);
	return rc;
}

int wf_model_from_json(wf_model **out, const char *graph_json, wf_err *err)
{
	int rc;
	json_error_t jerr;
	raw_layer *raw = NULL;
	*out = NULL;
	if (!graph_json)
		return wf_errf(err, WF_EINVAL, "graph: no JSON given");
	json_t *root = json_loads(graph_json, JSON_REJECT_DUPLICATES, &jerr);
	if (!root)
		return wf_errf(err, WF_EINVAL, "graph: invalid JSON at line %d column %d: %s",
			       jerr.line, jerr.column, jerr.text);
	wf_model *m = calloc(1, sizeof(*m));
	if (!m) {
		rc = wf_errf(err, WF_ENOMEM, "graph: out of memory");
		goto free_json;
	}
	const char *output = NULL;
	json_t *layers = NULL;
	if ((rc = parse_header(m, root, &output, &layers, err)))
		goto free_model;
	int n = (int)json_array_size(layers);
	raw = calloc((size_t)n, sizeof(*raw));
	if (!raw) {
		rc = wf_errf(err, WF_ENOMEM, "graph: out of memory for %d layers", n);
		goto free_model;
	}
	for (int i = 0; i < n; i++)
		if ((rc = parse_layer(&raw[i], json_array_get(layers, (size_t)i), i, err)))
			goto free_model;
	if ((rc = build_layers(m, raw, n, output, err)))
		goto free_model;
	for (int i = 0; i < m->nlayers; i++)
		if ((rc = infer_shape(m, i, err)))
			goto free_model;
	const wf_layer *o = &m->layers[m->output];
	if (!wf_layer_flat(m, m->output) || o->oc != m->classes) {
		char s[64];
		shape_str(m, m->output, s, sizeof(s));
		rc = wf_errf(err, WF_EINVAL,
			     "graph: output: layer '%s' has shape %s but the logits must be [%d] "
			     "(classes)",
			     o->name, s, m->classes);
		goto free_model;
	}
	if ((rc = layout(m, err)) || (rc = canonical_json(m, err)))
		goto free_model;
	*out = m;
	m = NULL;
free_model:
	wf_model_free(m);
	free(raw);
free_json:
	json_decref(root);
	return rc;
}

void wf_model_free(wf_model *m)
{
	if (!m)
		return;
	free(m->layers);
	free(m->views);
	free(m->params);
	free(m->state);
	free(m->graph_json);
	free(m);
}

/* ---- parameters --------------------------------------------------------- */

static uint64_t name_hash(const char *s)
{
	uint64_t h = 1469598103934665603ULL;
	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ULL;
	return h;
}

static void fill(float *p, size_t n, float v)
{
	for (size_t i = 0; i < n; i++)
		p[i] = v;
}

int wf_init_parse(const char *name, wf_init *out)
{
	static const char *const names[] = {"glorot_uniform", "glorot_normal", "he_normal",
					    "he_uniform",     "lecun_normal",  "lecun_uniform"};
	for (int i = 0; i < (int)(sizeof(names) / sizeof(names[0])); i++)
		if (strcmp(name, names[i]) == 0) {
			*out = (wf_init)i;
			return 0;
		}
	return -1;
}

/* Keras fans of a kernel: conv HWIO -> (kh*kw*I, kh*kw*O); dense (in, out). */
static void kernel_fans(const wf_view *v, double *fan_in, double *fan_out)
{
	double rf = 1;
	for (int d = 0; d < v->ndim - 2; d++)
		rf *= v->shape[d];
	*fan_in = rf * v->shape[v->ndim - 2];
	*fan_out = rf * v->shape[v->ndim - 1];
}

static void init_kernel(float *p, const wf_view *v, wf_init kind, wf_rng *r)
{
	double fi, fo, fan;
	kernel_fans(v, &fi, &fo);
	int uniform = kind == WF_INIT_GLOROT_UNIFORM || kind == WF_INIT_HE_UNIFORM ||
		      kind == WF_INIT_LECUN_UNIFORM;
	double gain = kind == WF_INIT_HE_NORMAL || kind == WF_INIT_HE_UNIFORM ? 2.0 : 1.0;
	if (kind == WF_INIT_GLOROT_UNIFORM || kind == WF_INIT_GLOROT_NORMAL) {
		fan = (fi + fo) / 2.0;
	} else {
		fan = fi;
	}
	double var = gain / (fan > 0 ? fan : 1.0);
	if (uniform) {
		double lim = sqrt(3.0 * var);
		for (size_t k = 0; k < v->count; k++)
			p[k] = (float)(lim * (2.0 * wf_rng_uniform(r) - 1.0));
	} else {
		/* Keras draws these from a normal truncated at 2 sd, scaled so the
		 * variance is var: redraw outside [-2, 2], sd / 0.87962566 */
		double sd = sqrt(var) / 0.87962566103423978;
		for (size_t k = 0; k < v->count; k++) {
			double z;
			do
				z = wf_rng_normal(r);
			while (z < -2.0 || z > 2.0);
			p[k] = (float)(sd * z);
		}
	}
}

void wf_model_init_params(wf_model *m, uint64_t seed)
{
	wf_model_init_params_with(m, seed, WF_INIT_GLOROT_UNIFORM, WF_INIT_GLOROT_UNIFORM);
}

void wf_model_init_params_with(wf_model *m, uint64_t seed, wf_init conv_init, wf_init dense_init)
{
	for (int i = 0; i < m->nlayers; i++) {
		const wf_layer *l = &m->layers[i];
		if (l->p_kernel >= 0) {
			const wf_view *v = &m->views[l->p_kernel];
			wf_rng r;
			wf_rng_seed(&r, wf_hash3(seed, name_hash(v->name), 0));
			init_kernel(m->params + v->offset, v,
				    l->type == WF_LAYER_DENSE ? dense_init : conv_init, &r);
		}
		if (l->p_bias >= 0)
			fill(m->params + m->views[l->p_bias].offset, m->views[l->p_bias].count,
			     0.0f);
		if (l->p_gamma >= 0)
			fill(m->params + m->views[l->p_gamma].offset, m->views[l->p_gamma].count,
			     1.0f);
		if (l->p_beta >= 0)
			fill(m->params + m->views[l->p_beta].offset, m->views[l->p_beta].count,
			     0.0f);
		if (l->s_mean >= 0)
			fill(m->state + m->views[l->s_mean].offset, m->views[l->s_mean].count,
			     0.0f);
		if (l->s_var >= 0)
			fill(m->state + m->views[l->s_var].offset, m->views[l->s_var].count, 1.0f);
	}
}

const wf_view *wf_model_view(const wf_model *m, const char *name)
{
	for (int i = 0; i < m->nviews; i++)
		if (strcmp(m->views[i].name, name) == 0)
			return &m->views[i];
	return NULL;
}

double wf_model_flops(const wf_model *m)
{
	double f = 0;
	for (int i = 0; i < m->nlayers; i++) {
		const wf_layer *l = &m->layers[i];
		if (l->type == WF_LAYER_CONV2D || l->type == WF_LAYER_DENSE) {
			const wf_view *k = &m->views[l->p_kernel];
			f += 2.0 * (double)k->count * l->oh * l->ow;
		}
	}
	return f;
}
