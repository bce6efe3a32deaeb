/* keras.c: the Keras .h5 importer (see keras.h). Steps: read the root
 * `model_config` JSON (Functional or Sequential); walk its layers in order,
 * turning each into weft layers through the graph builder of zoo_build.h
 * while an alias table maps every Keras layer to the weft layer holding its
 * output; build the model; then copy each weight from
 * model_weights/<layer>/<weight_name>, matched by the weight's own name
 * ("kernel:0" in Keras 2, "kernel" in Keras 3).
 *
 * Formats handled: inbound_nodes as Keras 2 lists ([[["name", 0, 0, {}]]])
 * and as Keras 3 call records ({"args": [{"class_name": "__keras_tensor__",
 * "config": {"keras_history": ["name", 0, 0]}}]}); string-list attributes
 * whole or split into name0, name1, ... (Keras does so past 64 KB); strings
 * of variable or fixed length. */
#include "model/keras.h"
#include "model/zoo_build.h"

#include "common/h5.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define NM	    WF_NAME_MAX
#define MAX_WEIGHTS 8

/* ---- the importer's state ------------------------------------------------ */

/* A weight to copy once the model is built. */
typedef struct wload {
	char view[2 * NM]; /* weft view, "<layer>/<param>" */
	char layer[NM];	   /* Keras layer */
	char key[32];	   /* Keras weight name without scope and ":0" */
	int depthwise;	   /* Keras [kh,kw,C,m] into weft [kh,kw,1,C*m] */
} wload;

typedef struct kimp {
	const char *path;
	hid_t file, weights; /* file, its model_weights group */
	wf_err *err;
	int rc; /* the first error's code */
	wf_builder b;
	/* alias: Keras layer -> weft layer holding its output ("" = not built) */
	int n;
	char (*kname)[NM];
	char (*alias)[NM];
	int *consumers;	     /* Keras consumers of each layer */
	const char *input;   /* the weft input layer */
	const char *output;  /* the Keras output layer */
	double pa[4], pc[4]; /* leading preprocessing so far: y = pa * x + pc */
	int have_pre;
	wload *loads;
	int nloads, capl;
} kimp;

static int kfail(kimp *k, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int kfail(kimp *k, int code, const char *fmt, ...)
{
	char msg[900];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (!k->rc)
		k->rc = code;
	return wf_errf(k->err, code, "%s: %s", k->path, msg);
}

static int lfail(kimp *k, const char *name, const char *cls, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static int lfail(kimp *k, const char *name, const char *cls, const char *fmt, ...)
{
	char msg[700];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (!k->rc)
		k->rc = WF_EINVAL;
	return wf_errf(k->err, WF_EINVAL, "%s: layer '%s' (%s): %s", k->path, name, cls, msg);
}

static int kindex(const kimp *k, const char *name)
{
	for (int i = k->n - 1; i >= 0; i--)
		if (strcmp(k->kname[i], name) == 0)
			return i;
	return -1;
}

static int add_load(kimp *k, const char *view, const char *layer, const char *key, int dw)
{
	if (k->nloads == k->capl) {
		int cap = k->capl ? 2 * k->capl : 64;
		wload *g = realloc(k->loads, sizeof(*g) * (size_t)cap);
		if (!g)
			return kfail(k, WF_ENOMEM, "out of memory");
		k->loads = g;
		k->capl = cap;
	}
	wload *w = &k->loads[k->nloads++];
	snprintf(w->view, sizeof(w->view), "%s", view);
	snprintf(w->layer, sizeof(w->layer), "%s", layer);
	snprintf(w->key, sizeof(w->key), "%s", key);
	w->depthwise = dw;
	return 0;
}

/* ---- the model config ------------------------------------------------------ */

static const char *layer_name(json_t *jl)
{
	const char *n = json_string_value(json_object_get(jl, "name"));
	return n ? n : json_string_value(json_object_get(json_object_get(jl, "config"), "name"));
}

/* Collect the Keras 3 keras_history names found anywhere in v. */
static int walk_k3(json_t *v, const char **in, int *nin, int *bad)
{
	if (json_is_object(v)) {
		const char *cls = json_string_value(json_object_get(v, "class_name"));
		if (cls && strcmp(cls, "__keras_tensor__") == 0) {
			json_t *h = json_object_get(json_object_get(v, "config"), "keras_history");
			const char *src = json_string_value(json_array_get(h, 0));
			if (!src || *nin >= WF_MAX_INPUTS)
				return -1;
			if (json_integer_value(json_array_get(h, 2)) != 0 ||
			    json_integer_value(json_array_get(h, 1)) != 0)
				*bad = 1;
			in[(*nin)++] = src;
			return 0;
		}
		const char *key;
		json_t *val;
		json_object_foreach(v, key, val)
		{
			if (walk_k3(val, in, nin, bad))
				return -1;
		}
	} else if (json_is_array(v)) {
		for (size_t i = 0; i < json_array_size(v); i++)
			if (walk_k3(json_array_get(v, i), in, nin, bad))
				return -1;
	}
	return 0;
}

/* The Keras layers feeding jl (names borrowed from the JSON). */
static int inbound(kimp *k, json_t *jl, const char *name, const char *cls, const char **in,
		   int *nin)
{
	json_t *nodes = json_object_get(jl, "inbound_nodes");
	int bad = 0;
	*nin = 0;
	if (!nodes || json_array_size(nodes) == 0)
		return 0;
	if (!json_is_array(nodes) || json_array_size(nodes) > 1)
		return lfail(k, name, cls, "is called %zu times (shared layers are not supported)",
			     json_array_size(nodes));
	json_t *node = json_array_get(nodes, 0);
	if (json_is_array(node)) { /* Keras 2: [["name", node, tensor, {}], ...] */
		for (size_t i = 0; i < json_array_size(node); i++) {
			json_t *e = json_array_get(node, i);
			const char *src = json_string_value(json_array_get(e, 0));
			if (!src || *nin >= WF_MAX_INPUTS)
				return lfail(k, name, cls, "inbound_nodes: malformed");
			if (json_integer_value(json_array_get(e, 1)) != 0 ||
			    json_integer_value(json_array_get(e, 2)) != 0)
				bad = 1;
			in[(*nin)++] = src;
		}
	} else if (json_is_object(node)) { /* Keras 3 */
		if (walk_k3(json_object_get(node, "args"), in, nin, &bad))
			return lfail(k, name, cls, "inbound_nodes: malformed");
	} else {
		return lfail(k, name, cls, "inbound_nodes: malformed");
	}
	if (bad)
		return lfail(k, name, cls,
			     "takes a tensor of a shared or multi-output layer (not supported)");
	return 0;
}

/* ---- config readers ---------------------------------------------------------- */

static int cfg_int2(json_t *cfg, const char *key, int def, int *a, int *b)
{
	json_t *v = json_object_get(cfg, key);
	if (!v || json_is_null(v)) {
		*a = *b = def;
		return 0;
	}
	if (json_is_integer(v)) {
		*a = *b = (int)json_integer_value(v);
		return 0;
	}
	if (json_is_array(v) && json_array_size(v) == 2 && json_is_integer(json_array_get(v, 0)) &&
	    json_is_integer(json_array_get(v, 1))) {
		*a = (int)json_integer_value(json_array_get(v, 0));
		*b = (int)json_integer_value(json_array_get(v, 1));
		return 0;
	}
	return -1;
}

static int cfg_bool(json_t *cfg, const char *key, int def)
{
	json_t *v = json_object_get(cfg, key);
	return json_is_boolean(v) ? json_is_true(v) : def;
}

static double cfg_num(json_t *cfg, const char *key, double def)
{
	json_t *v = json_object_get(cfg, key);
	return json_is_number(v) ? json_number_value(v) : def;
}

/* The channel axis: -1 or 3, possibly as a one-element list. */
static int channel_axis(json_t *cfg, const char *key)
{
	json_t *v = json_object_get(cfg, key);
	if (json_is_array(v) && json_array_size(v) == 1)
		v = json_array_get(v, 0);
	if (!v)
		return 1;
	json_int_t a = json_integer_value(v);
	return json_is_integer(v) && (a == -1 || a == 3);
}

static int channels_last(json_t *cfg)
{
	const char *f = json_string_value(json_object_get(cfg, "data_format"));
	return !f || strcmp(f, "channels_last") == 0;
}

/* "valid"/"same" -> 0/1; -1 otherwise */
static int padding(json_t *cfg)
{
	const char *p = json_string_value(json_object_get(cfg, "padding"));
	if (!p || strcasecmp(p, "valid") == 0)
		return 0;
	return strcasecmp(p, "same") == 0 ? 1 : -1;
}

/* Keras activation name of a layer config ("linear" when absent). */
static const char *activation(json_t *cfg)
{
	json_t *v = json_object_get(cfg, "activation");
	if (!v || json_is_null(v))
		return "linear";
	return json_is_string(v) ? json_string_value(v) : "(custom)";
}

/* ---- layer conversion --------------------------------------------------------- */

/* Append the activation act after weft layer x (named after the Keras layer);
 * returns the output layer's name, or NULL on error. */
static const char *apply_act(kimp *k, const char *kname, const char *cls, const char *act,
			     const char *x, int is_output)
{
	char n[2 * NM];
	if (strcmp(act, "linear") == 0)
		return x;
	if (strcmp(act, "softmax") == 0) {
		if (is_output)
			return x; /* weft outputs logits; the loss and the server apply softmax */
		lfail(k, kname, cls, "softmax is supported only at the output");
		return NULL;
	}
	if (strcmp(act, "relu") != 0 && strcmp(act, "relu6") != 0) {
		lfail(k, kname, cls,
		      "activation '%s' is not supported (relu, relu6, linear, "
		      "softmax at the output)",
		      act);
		return NULL;
	}
	snprintf(n, sizeof(n), "%s_activation", kname);
	return wf_b_act(&k->b, n, act, x);
}

/* Fold a leading Rescaling/Normalization into the preprocessing. */
static int fold_pre(kimp *k, const char *name, const char *cls, json_t *cfg)
{
	int c = k->b.in_c;
	double s[4], o[4];
	if (c > 4)
		return lfail(k, name, cls, "preprocessing of %d channels (at most 4)", c);
	if (strcmp(cls, "Rescaling") == 0) {
		json_t *js = json_object_get(cfg, "scale"), *jo = json_object_get(cfg, "offset");
		for (int i = 0; i < c; i++) {
			json_t *a = json_is_array(js) ? json_array_get(js, (size_t)i) : js;
			json_t *b = json_is_array(jo) ? json_array_get(jo, (size_t)i) : jo;
			if (!json_is_number(a) || (jo && !json_is_number(b)))
				return lfail(k, name, cls, "scale/offset: expected numbers");
			s[i] = json_number_value(a);
			o[i] = jo ? json_number_value(b) : 0.0;
		}
	} else { /* Normalization: (x - mean) / max(sqrt(var), 1e-7) */
		double mean[4], var[4];
		if (cfg_bool(cfg, "invert", 0) || !channel_axis(cfg, "axis"))
			return lfail(k, name, cls, "only axis -1 without invert is supported");
		json_t *jm = json_object_get(cfg, "mean"), *jv = json_object_get(cfg, "variance");
		if (jm && !json_is_null(jm)) {
			for (int i = 0; i < c; i++) {
				json_t *a = json_is_array(jm) ? json_array_get(jm, (size_t)i) : jm;
				json_t *b = json_is_array(jv) ? json_array_get(jv, (size_t)i) : jv;
				if (!json_is_number(a) || !json_is_number(b))
					return lfail(k, name, cls,
						     "mean/variance: expected numbers");
				mean[i] = json_number_value(a), var[i] = json_number_value(b);
			}
		} else { /* adapted: the statistics are the layer's weights */
			const char *keys[2] = {"mean", "variance"};
			double *dst[2] = {mean, var};
			char dpath[3 * NM];
			char **wn = NULL;
			int nw = 0, rc = 0, found = 0;
			hid_t lg = H5Gopen2(k->weights, name, H5P_DEFAULT);
			if (lg < 0 ||
			    wf_h5_attr_read_str_list(lg, "weight_names", &wn, &nw, k->path, k->err))
				rc = lfail(k, name, cls, "no mean/variance in config or weights");
			for (int w = 0; !rc && w < nw; w++) {
				const char *base =
					strrchr(wn[w], '/') ? strrchr(wn[w], '/') + 1 : wn[w];
				for (int q = 0; q < 2; q++) {
					if (strncmp(base, keys[q], strlen(keys[q])) != 0 ||
					    (base[strlen(keys[q])] && base[strlen(keys[q])] != ':'))
						continue;
					float v[4] = {0};
					snprintf(dpath, sizeof(dpath), "%s", wn[w]);
					hid_t d = H5Dopen2(lg, dpath, H5P_DEFAULT);
					hid_t sp = d < 0 ? -1 : H5Dget_space(d);
					if (d < 0 || H5Sget_simple_extent_npoints(sp) != c ||
					    H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL,
						    H5P_DEFAULT, v) < 0)
						rc = lfail(k, name, cls,
							   "weight %s: expected %d values", wn[w],
							   c);
					for (int i = 0; i < c; i++)
						dst[q][i] = v[i];
					found |= 1 << q;
					wf_h5_close(&sp);
					wf_h5_close(&d);
				}
			}
			if (!rc && found != 3)
				rc = lfail(k, name, cls, "no mean/variance in config or weights");
			wf_h5_strs_free(wn, nw);
			wf_h5_close(&lg);
			if (rc)
				return rc;
		}
		for (int i = 0; i < c; i++) {
			double sd = fmax(sqrt(var[i]), 1e-7);
			s[i] = 1.0 / sd, o[i] = -mean[i] / sd;
		}
	}
	for (int i = 0; i < c; i++) {
		if (!(s[i] > 0))
			return lfail(k, name, cls, "a scale of %g is not supported (must be > 0)",
				     s[i]);
		k->pa[i] *= s[i];
		k->pc[i] = k->pc[i] * s[i] + o[i];
	}
	k->have_pre = 1;
	return 0;
}

/* Convert one Keras layer whose inputs are the weft layers in[]; sets *y to
 * the weft layer holding its output. */
static int convert(kimp *k, const char *name, const char *cls, json_t *cfg, int nin,
		   const char **in, int is_output, const char **y)
{
	char n[2 * NM];
	const char *act = activation(cfg);
	wf_builder *b = &k->b;
	int kh, kw, sh, sw, dh, dw, rc = 0;
	*y = NULL;
	if (!channels_last(cfg))
		return lfail(k, name, cls, "data_format channels_first is not supported");
	if (strcmp(cls, "Dropout") == 0) {
		*y = wf_b_dropout(b, name, in[0], cfg_num(cfg, "rate", 0.0));
	} else if (strcmp(cls, "Flatten") == 0) {
		*y = wf_b_flatten(b, name, in[0]);
	} else if (strcmp(cls, "GlobalAveragePooling2D") == 0) {
		if (cfg_bool(cfg, "keepdims", 0))
			return lfail(k, name, cls, "keepdims=True is not supported");
		*y = wf_b_gap(b, name, in[0]);
	} else if (strcmp(cls, "Add") == 0 || strcmp(cls, "Concatenate") == 0) {
		if (nin < 2)
			return lfail(k, name, cls, "needs at least 2 inputs, has %d", nin);
		if (cls[0] == 'C' && !channel_axis(cfg, "axis"))
			return lfail(k, name, cls, "only the channel axis (-1) is supported");
		*y = wf_b_add(b, name, cls[0] == 'A' ? "add" : "concat", NULL, nin, in);
	} else if (strcmp(cls, "ReLU") == 0) {
		json_t *mv = json_object_get(cfg, "max_value");
		if (cfg_num(cfg, "negative_slope", 0) != 0 || cfg_num(cfg, "threshold", 0) != 0)
			return lfail(k, name, cls, "negative_slope/threshold must be 0");
		if (mv && !json_is_null(mv) && json_number_value(mv) != 6.0)
			return lfail(k, name, cls, "max_value %g is not supported (none or 6)",
				     json_number_value(mv));
		*y = wf_b_act(b, name, mv && !json_is_null(mv) ? "relu6" : "relu", in[0]);
	} else if (strcmp(cls, "Activation") == 0) {
		*y = apply_act(k, name, cls, act, in[0], is_output);
		return *y ? 0 : k->rc;
	} else if (strcmp(cls, "ZeroPadding2D") == 0 || strcmp(cls, "Cropping2D") == 0) {
		int z = cls[0] == 'Z';
		json_t *c = json_pack("{s:O}", z ? "padding" : "cropping",
				      json_object_get(cfg, z ? "padding" : "cropping"));
		if (!c || !json_object_get(cfg, z ? "padding" : "cropping"))
			return lfail(k, name, cls, "missing %s", z ? "padding" : "cropping");
		*y = wf_b_add(b, name, z ? "zeropad" : "crop", c, 1, in);
	} else if (strcmp(cls, "MaxPooling2D") == 0 || strcmp(cls, "AveragePooling2D") == 0) {
		int same = padding(cfg);
		if (cfg_int2(cfg, "pool_size", 2, &kh, &kw) || same < 0)
			return lfail(k, name, cls, "pool_size/padding: unsupported value");
		if (cfg_int2(cfg, "strides", 0, &sh, &sw))
			return lfail(k, name, cls, "strides: unsupported value");
		if (sh == 0)
			sh = kh, sw = kw;
		json_t *c = json_pack("{s:[ii], s:[ii], s:s}", "pool_size", kh, kw, "strides", sh,
				      sw, "padding", same ? "same" : "valid");
		*y = wf_b_add(b, name, cls[0] == 'M' ? "maxpool" : "avgpool", c, 1, in);
	} else if (strcmp(cls, "BatchNormalization") == 0) {
		if (!channel_axis(cfg, "axis"))
			return lfail(k, name, cls, "only the channel axis (-1) is supported");
		*y = wf_b_bn(b, name, in[0], cfg_num(cfg, "epsilon", 1e-3),
			     cfg_num(cfg, "momentum", 0.99));
		static const char *const keys[4] = {"gamma", "beta", "moving_mean",
						    "moving_variance"};
		for (int q = 0; q < 4 && !rc; q++) {
			if ((q == 0 && !cfg_bool(cfg, "scale", 1)) ||
			    (q == 1 && !cfg_bool(cfg, "center", 1)))
				continue; /* gamma 1 / beta 0, as initialised */
			snprintf(n, sizeof(n), "%s/%s", name, keys[q]);
			rc = add_load(k, n, name, keys[q], 0);
		}
	} else if (strcmp(cls, "Dense") == 0) {
		int units = (int)json_integer_value(json_object_get(cfg, "units"));
		int bias = cfg_bool(cfg, "use_bias", 1);
		*y = wf_b_dense(b, name, in[0], units, bias);
		snprintf(n, sizeof(n), "%s/kernel", name);
		rc = add_load(k, n, name, "kernel", 0);
		snprintf(n, sizeof(n), "%s/bias", name);
		if (!rc && bias)
			rc = add_load(k, n, name, "bias", 0);
		if (!rc && *y)
			*y = apply_act(k, name, cls, act, *y, is_output);
	} else if (strcmp(cls, "Conv2D") == 0 || strcmp(cls, "DepthwiseConv2D") == 0 ||
		   strcmp(cls, "SeparableConv2D") == 0) {
		int same = padding(cfg), bias = cfg_bool(cfg, "use_bias", 1);
		int groups = (int)cfg_num(cfg, "groups", 1);
		if (cfg_int2(cfg, "kernel_size", 0, &kh, &kw) || kh <= 0 ||
		    cfg_int2(cfg, "strides", 1, &sh, &sw) ||
		    cfg_int2(cfg, "dilation_rate", 1, &dh, &dw) || same < 0 || dh != dw)
			return lfail(
				k, name, cls,
				"kernel_size/strides/dilation_rate/padding: unsupported value");
		const wf_bshape *x = wf_builder_shape(b, in[0]);
		int c = x ? x->c : 0;
		const char *src = in[0];
		if (cls[0] == 'C') {
			int filters = (int)json_integer_value(json_object_get(cfg, "filters"));
			*y = wf_b_conv(b, name, src, filters, kh, kw, sh, sw, dh, groups, same,
				       bias);
			snprintf(n, sizeof(n), "%s/kernel", name);
			rc = add_load(k, n, name, "kernel", 0);
		} else {
			int dm = (int)cfg_num(cfg, "depth_multiplier", 1);
			int sep = cls[0] == 'S';
			if (dm < 1)
				return lfail(k, name, cls, "depth_multiplier %d", dm);
			if (sep)
				snprintf(n, sizeof(n), "%s_depthwise", name);
			const char *dwn = wf_b_conv(b, sep ? n : name, src, c * dm, kh, kw, sh, sw,
						    dh, c ? c : 1, same, sep ? 0 : bias);
			snprintf(n, sizeof(n), "%s/kernel", dwn);
			rc = add_load(k, n, name, "depthwise_kernel", 1);
			*y = dwn;
			if (!rc && sep) {
				int filters =
					(int)json_integer_value(json_object_get(cfg, "filters"));
				*y = wf_b_conv(b, name, dwn, filters, 1, 1, 1, 1, 1, 1, 0, bias);
				snprintf(n, sizeof(n), "%s/kernel", name);
				rc = add_load(k, n, name, "pointwise_kernel", 0);
			}
		}
		snprintf(n, sizeof(n), "%s/bias", name);
		if (!rc && bias)
			rc = add_load(k, n, name, "bias", 0);
		if (!rc && *y)
			*y = apply_act(k, name, cls, act, *y, is_output);
	} else {
		return lfail(k, name, cls,
			     "is not supported by weft (supported: InputLayer, Conv2D, "
			     "DepthwiseConv2D, SeparableConv2D, BatchNormalization, Dense, "
			     "Activation, ReLU, Add, Concatenate, ZeroPadding2D, Cropping2D, "
			     "MaxPooling2D, AveragePooling2D, GlobalAveragePooling2D, Flatten, "
			     "Dropout, leading Rescaling/Normalization)");
	}
	if (rc)
		return rc;
	if (!*y)
		return k->rc ? k->rc : lfail(k, name, cls, "cannot be converted");
	if (k->b.failed)
		return lfail(k, name, cls, "%s", k->b.why);
	return 0;
}

/* ---- the layer walk -------------------------------------------------------------- */

static int input_shape(kimp *k, json_t *cfg, const char *name, int *h, int *w, int *c)
{
	json_t *s = json_object_get(cfg, "batch_shape");
	if (!s)
		s = json_object_get(cfg, "batch_input_shape");
	if (!json_is_array(s) || json_array_size(s) != 4)
		return kfail(k, WF_EINVAL,
			     "input '%s': expected a [batch, H, W, C] image input shape", name);
	int d[3];
	for (int i = 0; i < 3; i++) {
		json_t *v = json_array_get(s, (size_t)i + 1);
		if (!json_is_integer(v) || json_integer_value(v) < 1 ||
		    json_integer_value(v) > 65536)
			return kfail(k, WF_EINVAL,
				     "input '%s': dimension %d is %s; weft needs a fixed input "
				     "size (build the Keras model with input_shape=(H, W, C))",
				     name, i + 1, json_is_null(v) ? "None" : "not a size");
		d[i] = (int)json_integer_value(v);
	}
	*h = d[0], *w = d[1], *c = d[2];
	return 0;
}

/* Walk the layers (JSON array) in order; seq: a Sequential model. */
static int walk(kimp *k, json_t *layers, int seq)
{
	int n = (int)json_array_size(layers), rc = 0;
	k->kname = calloc((size_t)n + 1, sizeof(*k->kname));
	k->alias = calloc((size_t)n + 1, sizeof(*k->alias));
	k->consumers = calloc((size_t)n + 1, sizeof(int));
	if (!k->kname || !k->alias || !k->consumers)
		return kfail(k, WF_ENOMEM, "out of memory");
	/* names and consumer counts first */
	for (int i = 0; i < n; i++) {
		const char *name = layer_name(json_array_get(layers, (size_t)i));
		if (!name || strlen(name) >= NM)
			return kfail(k, WF_EFORMAT, "model_config: layer %d has no usable name", i);
		snprintf(k->kname[i], NM, "%s", name);
	}
	k->n = n;
	for (int i = 0; i < n; i++) {
		json_t *jl = json_array_get(layers, (size_t)i);
		const char *in[WF_MAX_INPUTS];
		int nin = 0;
		if (seq) {
			if (i > 0)
				in[nin++] = k->kname[i - 1];
		} else if ((rc = inbound(k, jl, k->kname[i], "?", in, &nin))) {
			return rc;
		}
		for (int j = 0; j < nin; j++) {
			int p = kindex(k, in[j]);
			if (p >= 0)
				k->consumers[p]++;
		}
	}
	int pre_ok = 1; /* still in the leading preprocessing chain */
	for (int i = 0; i < n && !rc; i++) {
		json_t *jl = json_array_get(layers, (size_t)i);
		json_t *cfg = json_object_get(jl, "config");
		const char *cls = json_string_value(json_object_get(jl, "class_name"));
		const char *name = k->kname[i];
		const char *in[WF_MAX_INPUTS], *win[WF_MAX_INPUTS];
		int nin = 0, h = 0, w = 0, c = 0;
		if (!cls || !json_is_object(cfg))
			return kfail(k, WF_EFORMAT,
				     "model_config: layer '%s' has no class_name "
				     "or config",
				     name);
		if (seq && i > 0)
			in[nin++] = k->kname[i - 1];
		else if (!seq && (rc = inbound(k, jl, name, cls, in, &nin)))
			return rc;
		if (strcmp(cls, "InputLayer") == 0 || (seq && i == 0 && !k->input)) {
			if (k->input)
				return lfail(k, name, cls, "a second input (one image input only)");
			if ((rc = input_shape(k, cfg, name, &h, &w, &c)) ||
			    (rc = wf_builder_init(&k->b, h, w, c)))
				return rc ? rc : kfail(k, WF_ENOMEM, "out of memory");
			char iname[NM];
			snprintf(iname, sizeof(iname), "%s",
				 strcmp(cls, "InputLayer") == 0 ? name : "input");
			k->input = wf_b_input(&k->b, iname);
			for (int q = 0; q < 4; q++)
				k->pa[q] = 1.0, k->pc[q] = 0.0;
			if (strcmp(cls, "InputLayer") == 0) {
				snprintf(k->alias[i], NM, "%s", k->input);
				continue;
			}
			/* Keras 2 Sequential without an InputLayer: the first layer
			 * takes the input */
			in[nin++] = k->input;
		}
		if (!k->input)
			return lfail(k, name, cls, "comes before the model's input layer");
		for (int j = 0; j < nin; j++) {
			int p = kindex(k, in[j]);
			if (in[j] == k->input) {
				win[j] = k->input;
			} else if (p < 0 || p >= i || !k->alias[p][0]) {
				return lfail(k, name, cls, "input '%s' is not a layer before it",
					     in[j]);
			} else {
				win[j] = k->alias[p];
			}
		}
		if (nin < 1)
			return lfail(k, name, cls, "has no inputs");
		int is_output = strcmp(name, k->output) == 0;
		if (strcmp(cls, "Rescaling") == 0 || strcmp(cls, "Normalization") == 0) {
			int p = kindex(k, in[0]);
			if (!pre_ok || strcmp(win[0], k->input) != 0 ||
			    (p >= 0 && k->consumers[p] != 1))
				return lfail(k, name, cls,
					     "is supported only as the first layers, right after "
					     "the input (it becomes the model's preprocessing)");
			if ((rc = fold_pre(k, name, cls, cfg)))
				return rc;
			snprintf(k->alias[i], NM, "%s", k->input);
			continue;
		}
		pre_ok = 0;
		const char *y = NULL;
		if (strcmp(cls, "Activation") == 0 && strcmp(activation(cfg), "linear") != 0 &&
		    strcmp(activation(cfg), "softmax") != 0) {
			/* a plain activation layer keeps its own name */
			const char *a = activation(cfg);
			if (strcmp(a, "relu") != 0 && strcmp(a, "relu6") != 0)
				return lfail(k, name, cls,
					     "activation '%s' is not supported (relu, relu6, "
					     "linear, softmax at the output)",
					     a);
			y = wf_b_act(&k->b, name, a, win[0]);
			if (k->b.failed)
				return lfail(k, name, cls, "%s", k->b.why);
		} else if ((rc = convert(k, name, cls, cfg, nin, win, is_output, &y))) {
			return rc;
		}
		snprintf(k->alias[i], NM, "%s", y);
	}
	return rc;
}

/* ---- weights ------------------------------------------------------------------------ */

/* Weight name without scope and ":0" ("conv1/kernel:0" -> "kernel"). */
static void weight_key(const char *wn, char *key, size_t n)
{
	const char *base = strrchr(wn, '/') ? strrchr(wn, '/') + 1 : wn;
	snprintf(key, n, "%s", base);
	char *colon = strchr(key, ':');
	if (colon)
		*colon = '\0';
}

static int load_weights(kimp *k, wf_model *m)
{
	int rc = 0;
	char **wn = NULL;
	int nw = 0;
	char cur[NM] = "";
	hid_t lg = -1;
	for (int i = 0; i < k->nloads && !rc; i++) {
		const wload *l = &k->loads[i];
		if (strcmp(cur, l->layer) != 0) {
			wf_h5_strs_free(wn, nw);
			wn = NULL, nw = 0;
			wf_h5_close(&lg);
			snprintf(cur, sizeof(cur), "%s", l->layer);
			lg = H5Lexists(k->weights, cur, H5P_DEFAULT) > 0
				     ? H5Gopen2(k->weights, cur, H5P_DEFAULT)
				     : -1;
			if (lg < 0) {
				rc = kfail(k, WF_EFORMAT,
					   "model_weights/%s: missing (layer '%s' has "
					   "weights)",
					   cur, cur);
				break;
			}
			if ((rc = wf_h5_attr_read_str_list(lg, "weight_names", &wn, &nw, k->path,
							   k->err)))
				break;
		}
		int found = -1;
		char key[NM];
		for (int w = 0; w < nw && found < 0; w++) {
			weight_key(wn[w], key, sizeof(key));
			if (strcmp(key, l->key) == 0 ||
			    (l->depthwise && strcmp(key, "kernel") == 0)) /* Keras 3 */
				found = w;
		}
		if (found < 0) {
			rc = kfail(k, WF_EFORMAT,
				   "model_weights/%s: no weight '%s' in weight_names", cur, l->key);
			break;
		}
		const wf_view *v = wf_model_view(m, l->view);
		hid_t d = H5Dopen2(lg, wn[found], H5P_DEFAULT);
		hid_t sp = d < 0 ? -1 : H5Dget_space(d);
		hsize_t dims[8];
		int nd = sp < 0 ? -1 : H5Sget_simple_extent_ndims(sp);
		int ok = v && d >= 0 && nd >= 1 && nd <= 8;
		if (ok) {
			H5Sget_simple_extent_dims(sp, dims, NULL);
			size_t cnt = 1;
			for (int q = 0; q < nd; q++)
				cnt *= (size_t)dims[q];
			ok = cnt == v->count;
			if (ok && !l->depthwise) {
				ok = nd == v->ndim;
				for (int q = 0; ok && q < nd; q++)
					ok = dims[q] == (hsize_t)v->shape[q];
			}
		}
		if (!ok) {
			rc = kfail(k, WF_EFORMAT,
				   "model_weights/%s/%s: missing or of the wrong shape for %s (%zu "
				   "values)",
				   cur, wn[found], l->view, v ? v->count : 0);
		} else {
			float *dst = (v->trainable ? m->params : m->state) + v->offset;
			if (H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, dst) < 0)
				rc = kfail(k, WF_EFORMAT, "model_weights/%s/%s: cannot be read",
					   cur, wn[found]);
		}
		wf_h5_close(&sp);
		wf_h5_close(&d);
	}
	wf_h5_strs_free(wn, nw);
	wf_h5_close(&lg);
	return rc;
}

/* ---- preprocessing ------------------------------------------------------------------- */

static void set_meta(kimp *k, const char *model_name, wf_model_meta *meta)
{
	int c = k->b.in_c < 4 ? k->b.in_c : 4;
	for (int i = 0; i < 4; i++)
		meta->mean[i] = 0.0f, meta->std[i] = 1.0f;
	snprintf(meta->channel_order, sizeof(meta->channel_order), "RGB");
	meta->scale = 1.0f;
	if (k->have_pre) {
		/* y = pa x + pc as (x * scale - mean) / std */
		int uniform = 1;
		for (int i = 1; i < c; i++)
			uniform &= k->pa[i] == k->pa[0];
		meta->scale = uniform ? (float)k->pa[0] : 1.0f;
		for (int i = 0; i < c; i++) {
			meta->std[i] = uniform ? 1.0f : (float)(1.0 / k->pa[i]);
			meta->mean[i] = (float)(-k->pc[i] * meta->std[i]);
		}
		return;
	}
	/* The Keras applications expect their preprocess_input outside the model. */
	const char *mn = model_name ? model_name : "";
	int h, w, cc;
	const char *zoo = NULL;
	if (strncasecmp(mn, "mobilenetv2", 11) == 0 || strncasecmp(mn, "nasnet", 6) == 0)
		zoo = "mobilenetv2";
	else if (strcmp(mn, "resnet50") == 0 || strcmp(mn, "resnet101") == 0 ||
		 strcmp(mn, "resnet152") == 0)
		zoo = "resnet50";
	if (zoo)
		wf_model_zoo_info(zoo, &h, &w, &cc, meta, NULL);
}

/* ---- entry points ---------------------------------------------------------------------- */

int wf_keras_is_model_file(int64_t file)
{
	return H5Aexists((hid_t)file, "model_config") > 0 &&
	       H5Aexists((hid_t)file, "weft_format") <= 0;
}

static int read_config(kimp *k, json_t **root)
{
	char *s = NULL;
	json_error_t jerr;
	*root = NULL;
	if (H5Aexists(k->file, "model_config") <= 0)
		return kfail(k, WF_EFORMAT, "not a Keras model file (no model_config attribute)");
	int rc = wf_h5_attr_read_str(k->file, "model_config", &s, k->path, k->err);
	if (!rc && !(*root = json_loads(s, 0, &jerr)))
		rc = kfail(k, WF_EFORMAT, "model_config: invalid JSON at line %d: %s", jerr.line,
			   jerr.text);
	free(s);
	return rc;
}

int wf_keras_load_h5(int64_t file, wf_model **out, wf_model_meta *meta, const char *path,
		     wf_err *err)
{
	kimp k;
	json_t *root = NULL;
	char *graph = NULL;
	wf_model *m = NULL;
	memset(&k, 0, sizeof(k));
	k.path = path, k.file = (hid_t)file, k.err = err, k.weights = -1;
	*out = NULL;
	int rc = read_config(&k, &root);
	if (rc)
		goto done;
	const char *cls = json_string_value(json_object_get(root, "class_name"));
	json_t *cfg = json_object_get(root, "config");
	json_t *layers = json_is_array(cfg) ? cfg : json_object_get(cfg, "layers");
	int seq = cls && strcmp(cls, "Sequential") == 0;
	if (!cls || (!seq && strcmp(cls, "Functional") != 0 && strcmp(cls, "Model") != 0)) {
		rc = kfail(&k, WF_EINVAL,
			   "model_config: class '%s' is not supported (Functional "
			   "or Sequential)",
			   cls ? cls : "(none)");
		goto done;
	}
	if (!json_is_array(layers) || json_array_size(layers) == 0) {
		rc = kfail(&k, WF_EFORMAT, "model_config: no layers");
		goto done;
	}
	if (seq) {
		k.output = layer_name(json_array_get(layers, json_array_size(layers) - 1));
	} else {
		json_t *outs = json_object_get(cfg, "output_layers");
		json_t *o = json_array_get(outs, 0);
		if (json_is_array(json_array_get(o, 0))) /* [[["name", 0, 0]]] */
			o = json_array_get(o, 0);
		if (json_is_string(json_array_get(outs, 0))) /* a single ["name", 0, 0] */
			o = outs;
		k.output = json_string_value(json_array_get(o, 0));
		if (!k.output ||
		    (json_array_size(outs) != 1 && !json_is_string(json_array_get(outs, 0)))) {
			rc = kfail(&k, WF_EINVAL,
				   "model_config: output_layers: exactly one output "
				   "is supported");
			goto done;
		}
	}
	if (!k.output) {
		rc = kfail(&k, WF_EFORMAT, "model_config: no output layer");
		goto done;
	}
	if (H5Lexists(k.file, "model_weights", H5P_DEFAULT) > 0)
		k.weights = H5Gopen2(k.file, "model_weights", H5P_DEFAULT);
	if ((rc = walk(&k, layers, seq)))
		goto done;
	int oi = kindex(&k, k.output), classes = 0;
	if (oi < 0) {
		rc = kfail(&k, WF_EINVAL, "model_config: output layer '%s' is not a layer",
			   k.output);
		goto done;
	}
	const wf_bshape *os = wf_builder_shape(&k.b, k.alias[oi]);
	if (!os || !os->flat) {
		rc = kfail(&k, WF_EINVAL,
			   "output '%s' is not a [batch, classes] tensor (weft models end in "
			   "logits: add GlobalAveragePooling2D or Flatten and a Dense layer)",
			   k.output);
		goto done;
	}
	if (k.nloads && k.weights < 0) {
		rc = kfail(&k, WF_EFORMAT, "no model_weights group (saved without weights?)");
		goto done;
	}
	if (!(graph = wf_builder_json(&k.b, k.alias[oi], &classes))) {
		rc = kfail(&k, WF_EINVAL, "%s", k.b.why);
		goto done;
	}
	if ((rc = wf_model_from_json(&m, graph, err))) {
		wf_err_wrap(err, "%s: the imported graph", path);
		goto done;
	}
	wf_model_init_params(m, 0);
	if ((rc = load_weights(&k, m)))
		goto done;
	if (meta)
		set_meta(&k, json_string_value(json_object_get(cfg, "name")), meta);
	*out = m;
	m = NULL;
done:
	wf_model_free(m);
	free(graph);
	json_decref(root);
	wf_h5_close(&k.weights);
	wf_builder_free(&k.b);
	free(k.kname);
	free(k.alias);
	free(k.consumers);
	free(k.loads);
	return rc;
}

int wf_keras_check_archive(const char *path, wf_err *err)
{
	unsigned char magic[4] = {0};
	FILE *f = fopen(path, "rb");
	if (!f)
		return 0;
	size_t n = fread(magic, 1, sizeof(magic), f);
	fclose(f);
	if (n == 4 && magic[0] == 'P' && magic[1] == 'K' && magic[2] == 3 && magic[3] == 4)
		return wf_errf(err, WF_ENOTSUP,
			       "%s: a Keras 3 .keras archive (zip of config.json and "
			       "model.weights.h5), which weft does not read; save the model in "
			       "the HDF5 format instead: "
			       "keras.models.load_model('%s').save('model.h5')",
			       path, path);
	return 0;
}

int wf_keras_load(wf_model **out, wf_model_meta *meta, const char *path, wf_err *err)
{
	wf_h5_quiet q;
	hid_t f = H5I_INVALID_HID;
	*out = NULL;
	if (meta)
		wf_model_meta_init(meta);
	int rc = wf_keras_check_archive(path, err);
	if (rc)
		return rc;
	if ((rc = wf_h5_open(path, H5F_ACC_RDONLY, &f, err)) != 0)
		return rc;
	wf_h5_quiet_begin(&q);
	rc = wf_keras_load_h5(f, out, meta, path, err);
	wf_h5_close(&f);
	wf_h5_quiet_end(&q);
	return rc;
}
