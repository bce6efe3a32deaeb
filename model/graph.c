/* graph.c: the model as a DAG of layers. Parses the graph JSON and sorts
 * layers topologically; graph_shape.c infers shapes and lays out the flat
 * parameter and state buffers, graph_json.c writes the canonical JSON back,
 * graph_params.c initialises parameters.
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
 * A layer may also carry "range": [min, max], its output's range measured by
 * int8 calibration (weft export --quantize int8).
 * Layers may be listed in any order; they are sorted topologically, keeping
 * the listed order among independent layers. Every layer must lead to the
 * output, whose shape must be [N,classes]. */
#include "model/model.h"
#include "model/graph_priv.h"
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

int wf_graph_layer_err(wf_err *err, const wf_layer *l, int code, const char *fmt, ...)
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
			return wf_graph_layer_err(err, l, WF_EINVAL,
						  "config.%s: missing (required)", key);
		*out = def;
		return 0;
	}
	if (!json_is_integer(v))
		return wf_graph_layer_err(err, l, WF_EINVAL, "config.%s: expected an integer", key);
	json_int_t x = json_integer_value(v);
	if (x < lo || x > hi)
		return wf_graph_layer_err(err, l, WF_EINVAL,
					  "config.%s: %lld is out of range [%d, %d]", key,
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
			return wf_graph_layer_err(err, l, WF_EINVAL,
						  "config.%s: missing (required)", key);
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
		return wf_graph_layer_err(err, l, WF_EINVAL,
					  "config.%s: expected an integer or [h, w]", key);
	}
	for (int k = 0; k < 2; k++)
		if (x[k] < lo || x[k] > hi)
			return wf_graph_layer_err(err, l, WF_EINVAL,
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
				return wf_graph_layer_err(
					err, l, WF_EINVAL,
					"config.%s: expected n, [h, w] or [[t, b], [l, r]]", key);
			x[2 * k] = json_integer_value(json_array_get(pr, 0));
			x[2 * k + 1] = json_integer_value(json_array_get(pr, 1));
		}
	} else {
		return wf_graph_layer_err(err, l, WF_EINVAL,
					  "config.%s: expected n, [h, w] or [[t, b], [l, r]]", key);
	}
	for (int k = 0; k < 4; k++) {
		if (x[k] < 0 || x[k] > WF_MODEL_MAX_DIM)
			return wf_graph_layer_err(err, l, WF_EINVAL,
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
			return wf_graph_layer_err(err, l, WF_EINVAL,
						  "config.%s: missing (required)", key);
		*out = (float)def;
		return 0;
	}
	if (!json_is_number(v))
		return wf_graph_layer_err(err, l, WF_EINVAL, "config.%s: expected a number", key);
	double x = json_number_value(v);
	if (!(x >= lo && x <= hi) || (lo_open && x == lo))
		return wf_graph_layer_err(err, l, WF_EINVAL,
					  "config.%s: %g is out of range %c%g, %g]", key, x,
					  lo_open ? '(' : '[', lo, hi);
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
		return wf_graph_layer_err(err, l, WF_EINVAL, "config.%s: expected true or false",
					  key);
	*out = json_is_true(v);
	return 0;
}

static int cfg_padding(json_t *cfg, const wf_layer *l, int *same, wf_err *err)
{
	json_t *v = json_object_get(cfg, "padding");
	const char *s = v ? json_string_value(v) : "valid";
	if (!s || (strcmp(s, "same") != 0 && strcmp(s, "valid") != 0))
		return wf_graph_layer_err(err, l, WF_EINVAL,
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
			return wf_graph_layer_err(err, l, WF_EINVAL, "config: unknown key '%s'",
						  key);
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
			return wf_graph_layer_err(
				err, l, WF_EINVAL,
				"config.axis: %d is not supported (only -1, the channels)", axis);
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
			return wf_graph_layer_err(err, l, WF_EINVAL,
						  "config.rate: %g must be below 1",
						  (double)l->rate);
		break;
	default: break;
	}
	return 0;
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
		    strcmp(key, "config") && strcmp(key, "range"))
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
		return wf_graph_layer_err(err, l, WF_EINVAL,
					  "inputs: expected an array of layer names");
	if (json_array_size(ins) > WF_MAX_INPUTS)
		return wf_graph_layer_err(err, l, WF_EINVAL, "inputs: %zu is more than %d",
					  json_array_size(ins), WF_MAX_INPUTS);
	for (size_t k = 0; k < json_array_size(ins); k++)
		if (!json_is_string(json_array_get(ins, k)))
			return wf_graph_layer_err(err, l, WF_EINVAL,
						  "inputs[%zu]: expected a layer name", k);
	r->inputs = ins;
	l->ninputs = (int)json_array_size(ins);
	/* how many inputs each type takes */
	if (l->type == WF_LAYER_INPUT) {
		if (l->ninputs != 0)
			return wf_graph_layer_err(err, l, WF_EINVAL,
						  "inputs: an input layer takes none");
	} else if (l->type == WF_LAYER_ADD || l->type == WF_LAYER_CONCAT) {
		if (l->ninputs < 2)
			return wf_graph_layer_err(err, l, WF_EINVAL,
						  "inputs: needs at least 2, got %d", l->ninputs);
	} else if (l->ninputs != 1) {
		return wf_graph_layer_err(err, l, WF_EINVAL, "inputs: needs exactly 1, got %d",
					  l->ninputs);
	}
	json_t *rg = json_object_get(jl, "range");
	if (rg) {
		json_t *lo = json_array_get(rg, 0), *hi = json_array_get(rg, 1);
		if (!json_is_array(rg) || json_array_size(rg) != 2 || !json_is_number(lo) ||
		    !json_is_number(hi) || !isfinite(json_number_value(lo)) ||
		    !isfinite(json_number_value(hi)) ||
		    json_number_value(lo) > json_number_value(hi) ||
		    fabs(json_number_value(lo)) > 1e30 || fabs(json_number_value(hi)) > 1e30)
			return wf_graph_layer_err(err, l, WF_EINVAL,
						  "range: expected [min, max], two finite numbers "
						  "with min <= max");
		l->has_range = 1;
		l->range[0] = (float)json_number_value(lo);
		l->range[1] = (float)json_number_value(hi);
	}
	json_t *cfg = json_object_get(jl, "config");
	if (cfg && !json_is_object(cfg) && !json_is_null(cfg))
		return wf_graph_layer_err(err, l, WF_EINVAL, "config: expected an object");
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
		rc = wf_graph_layer_err(err, &raw[i].l, WF_EINVAL, "inputs: cycle through '%s'",
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
				rc = wf_graph_layer_err(err, &raw[i].l, WF_EINVAL,
							"inputs[%d]: no layer named '%.128s'", k,
							s);
				goto free_tmp;
			}
			raw[i].in_idx[k] = j;
		}
		if (raw[i].l.type == WF_LAYER_INPUT && ++ninput > 1) {
			rc = wf_graph_layer_err(
				err, &raw[i].l, WF_EINVAL,
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
			rc = wf_graph_layer_err(
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
		if ((rc = wf_graph_infer_shape(m, i, err)))
			goto free_model;
	const wf_layer *o = &m->layers[m->output];
	if (!wf_layer_flat(m, m->output) || o->oc != m->classes) {
		char s[64];
		wf_graph_shape_str(m, m->output, s, sizeof(s));
		rc = wf_errf(err, WF_EINVAL,
			     "graph: output: layer '%s' has shape %s but the logits must be [%d] "
			     "(classes)",
			     o->name, s, m->classes);
		goto free_model;
	}
	if ((rc = wf_graph_layout(m, err)) || (rc = wf_graph_canonical_json(m, err)))
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
