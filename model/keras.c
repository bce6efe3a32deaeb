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
 * of variable or fixed length.
 *
 * A Functional or Sequential model used as a layer (the transfer-learning
 * recipe: base(inp, training=False) + a new head) is walked in place, its
 * layers under their own Keras names; legacy .h5 keeps their weights in the
 * nested model's group, named "<layer>/<weight>". Keras 3 .keras archives
 * are zips read here through their central directory (stored or deflated
 * entries, bounded sizes, CRC checked, no name used as a path): config.json
 * is the model config and model.weights.h5, opened from memory, holds each
 * layer's variables in order at layers/<snake_case class>[_N]/vars/<i>. */
#include "model/keras.h"
#include "model/zoo_build.h"

#include "common/h5.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <zlib.h>

#define NM	    WF_NAME_MAX
#define MAX_WEIGHTS 8

/* ---- the importer's state ------------------------------------------------ */

/* A weight to copy once the model is built. */
typedef struct wload {
	char view[2 * NM];   /* weft view, "<layer>/<param>" */
	char layer[NM];	     /* Keras layer */
	char scope[2 * NM];  /* the nested models holding it, "base/inner" ("" at the top) */
	char v3path[4 * NM]; /* .keras: its group, "layers/functional/layers/conv2d_1" */
	char key[32];	     /* Keras weight name without scope and ":0" */
	int depthwise;	     /* Keras [kh,kw,C,m] into weft [kh,kw,1,C*m] */
} wload;

typedef struct kimp {
	const char *path;
	hid_t file, weights;  /* file, its model_weights group */
	int v3;		      /* weights as in a .keras archive: layers/<name>/vars/<i> */
	char scope[2 * NM];   /* the nested model being walked ("" at the top) */
	char v3dir[4 * NM];   /* .keras: the group of that model ("" at the top) */
	char v3layer[4 * NM]; /* .keras: the group of the layer being converted */
	int pre_ok;	      /* still in the leading preprocessing chain */
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
	char base_name[NM]; /* the first nested model (a Keras application as the base) */
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
	snprintf(w->scope, sizeof(w->scope), "%s", k->scope);
	snprintf(w->v3path, sizeof(w->v3path), "%s", k->v3layer);
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
			/* the node index is not 0 for a nested model (its own
			 * construction is node 0); a shared layer has more than
			 * one inbound node, refused where it is converted */
			if (json_integer_value(json_array_get(h, 2)) != 0)
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
			if (json_integer_value(json_array_get(e, 2)) != 0)
				bad = 1; /* node index: see walk_k3 */
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

/* The name of a model's single output layer (Functional or Sequential). */
static const char *output_name(json_t *cfg, json_t *layers, int seq)
{
	if (seq)
		return layer_name(json_array_get(layers, json_array_size(layers) - 1));
	json_t *outs = json_object_get(cfg, "output_layers");
	json_t *o = json_array_get(outs, 0);
	if (json_is_array(json_array_get(o, 0))) /* [[["name", 0, 0]]] */
		o = json_array_get(o, 0);
	if (json_is_string(json_array_get(outs, 0))) /* a single ["name", 0, 0] */
		o = outs;
	if (json_array_size(outs) != 1 && !json_is_string(json_array_get(outs, 0)))
		return NULL;
	return json_string_value(json_array_get(o, 0));
}

static int is_model_class(const char *cls)
{
	return strcmp(cls, "Functional") == 0 || strcmp(cls, "Model") == 0 ||
	       strcmp(cls, "Sequential") == 0;
}

#define MAX_NESTING 8

static int walk(kimp *k, json_t *layers, int seq, const char *feed, const char *outname, int final,
		int depth, const char **yout);

/* A model used as a layer (the Keras transfer-learning recipe: a base model
 * called on the new model's input): its layers are walked in place, under
 * their own Keras names, fed by x; *y is the weft layer of its output. */
static int nested(kimp *k, const char *name, const char *cls, json_t *cfg, const char *x, int final,
		  int depth, const char **y)
{
	int seq = strcmp(cls, "Sequential") == 0;
	json_t *layers = json_is_array(cfg) ? cfg : json_object_get(cfg, "layers");
	const char *out = json_is_array(layers) && json_array_size(layers)
				  ? output_name(cfg, layers, seq)
				  : NULL;
	if (!k->base_name[0])
		snprintf(k->base_name, sizeof(k->base_name), "%s", name);
	char feed[NM]; /* x lives in the alias table, which the walk grows */
	snprintf(feed, sizeof(feed), "%s", x);
	if (depth >= MAX_NESTING)
		return lfail(k, name, cls, "models nested more than %d deep", MAX_NESTING);
	if (!out)
		return lfail(k, name, cls, "a nested model needs layers and exactly one output");
	char saved[sizeof(k->scope)], saved_dir[sizeof(k->v3dir)];
	memcpy(saved, k->scope, sizeof(saved));
	memcpy(saved_dir, k->v3dir, sizeof(saved_dir));
	snprintf(k->v3dir, sizeof(k->v3dir), "%.*s/", (int)sizeof(k->v3dir) - 2, k->v3layer);
	if (strlen(k->scope) + strlen(name) + 2 > sizeof(k->scope))
		return lfail(k, name, cls, "nested model path too long");
	if (k->scope[0])
		strcat(k->scope, "/");
	strcat(k->scope, name);
	int rc = walk(k, layers, seq, feed, out, final, depth + 1, y);
	memcpy(k->scope, saved, sizeof(saved));
	memcpy(k->v3dir, saved_dir, sizeof(saved_dir));
	return rc;
}

/* Keras's naming.to_snake_case of a class name ("DepthwiseConv2D" ->
 * "depthwise_conv2d", "ReLU" -> "re_lu"): the names of a model's layers in
 * a .keras weights file, which never uses the layers' own names. */
static void snake(const char *cls, char *out, size_t n)
{
	char a[NM], b[2 * NM];
	size_t la = 0, lb = 0, o = 0;
	for (const char *p = cls; *p && la < sizeof(a) - 1; p++) /* drop \W */
		if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
		    (*p >= '0' && *p <= '9') || *p == '_')
			a[la++] = *p;
	a[la] = '\0';
	/* (.)([A-Z][a-z]+) -> \1_\2 */
	for (size_t i = 0; i < la && lb < sizeof(b) - 3;) {
		if (i + 2 < la + 1 && a[i + 1] >= 'A' && a[i + 1] <= 'Z' && a[i + 2] >= 'a' &&
		    a[i + 2] <= 'z') {
			b[lb++] = a[i], b[lb++] = '_', b[lb++] = a[i + 1];
			i += 2;
			while (i < la && a[i] >= 'a' && a[i] <= 'z' && lb < sizeof(b) - 1)
				b[lb++] = a[i++];
		} else {
			b[lb++] = a[i++];
		}
	}
	b[lb] = '\0';
	/* ([a-z])([A-Z]) -> \1_\2, then lower case */
	for (size_t i = 0; i < lb && o + 3 < n;) {
		if (b[i] >= 'a' && b[i] <= 'z' && b[i + 1] >= 'A' && b[i + 1] <= 'Z') {
			out[o++] = b[i], out[o++] = '_', out[o++] = (char)(b[i + 1] - 'A' + 'a');
			i += 2;
		} else {
			char c = b[i++];
			out[o++] = c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
		}
	}
	out[o] = '\0';
}

/* .keras: the group of layer i of a model's layer list (class names in
 * snake case, numbered _1, _2, ... from their second use). */
static void v3_layer_path(kimp *k, json_t *layers, int i)
{
	char me[NM], other[NM];
	int used = 0;
	snake(json_string_value(json_object_get(json_array_get(layers, (size_t)i), "class_name")),
	      me, sizeof(me));
	for (int j = 0; j < i; j++) {
		const char *c = json_string_value(
			json_object_get(json_array_get(layers, (size_t)j), "class_name"));
		snake(c ? c : "", other, sizeof(other));
		used += strcmp(me, other) == 0;
	}
	if (used)
		snprintf(k->v3layer, sizeof(k->v3layer), "%.*slayers/%s_%d", 2 * NM, k->v3dir, me,
			 used);
	else
		snprintf(k->v3layer, sizeof(k->v3layer), "%.*slayers/%s", 2 * NM, k->v3dir, me);
}

/* Make room for n more Keras layers in the alias table. */
static int grow(kimp *k, int n)
{
	size_t want = (size_t)k->n + (size_t)n + 1;
	char(*kn)[NM] = realloc(k->kname, want * sizeof(*kn));
	if (kn)
		k->kname = kn;
	char(*al)[NM] = realloc(k->alias, want * sizeof(*al));
	if (al)
		k->alias = al;
	int *co = realloc(k->consumers, want * sizeof(int));
	if (co)
		k->consumers = co;
	if (!kn || !al || !co)
		return kfail(k, WF_ENOMEM, "out of memory");
	memset(k->alias + k->n, 0, (want - (size_t)k->n) * sizeof(*al));
	memset(k->consumers + k->n, 0, (want - (size_t)k->n) * sizeof(int));
	return 0;
}

/* Index of Keras layer name among entries [base, k->n), or -1. */
static int kindex_from(const kimp *k, int base, const char *name)
{
	for (int i = k->n - 1; i >= base; i--)
		if (strcmp(k->kname[i], name) == 0)
			return i;
	return -1;
}

/* Walk the layers (JSON array) in order; seq: a Sequential model. feed: NULL
 * for the outer model, else the weft layer feeding a nested model's input.
 * outname: this model's output layer; final: it is the whole model's output.
 * *yout: the weft layer holding outname's output. */
static int walk(kimp *k, json_t *layers, int seq, const char *feed, const char *outname, int final,
		int depth, const char **yout)
{
	int n = (int)json_array_size(layers), rc = 0, base = k->n;
	if ((rc = grow(k, n)))
		return rc;
	/* names and consumer counts first */
	for (int i = 0; i < n; i++) {
		const char *name = layer_name(json_array_get(layers, (size_t)i));
		if (!name || strlen(name) >= NM)
			return kfail(k, WF_EFORMAT, "model_config: layer %d has no usable name", i);
		snprintf(k->kname[base + i], NM, "%s", name);
	}
	k->n = base + n;
	for (int i = 0; i < n; i++) {
		json_t *jl = json_array_get(layers, (size_t)i);
		const char *in[WF_MAX_INPUTS];
		int nin = 0;
		if (seq) {
			if (i > 0)
				in[nin++] = k->kname[base + i - 1];
		} else if ((rc = inbound(k, jl, k->kname[base + i], "?", in, &nin))) {
			return rc;
		}
		for (int j = 0; j < nin; j++) {
			int p = kindex_from(k, base, in[j]);
			if (p >= 0)
				k->consumers[p]++;
		}
	}
	const char *own_input = NULL; /* the weft layer a nested model's input stands for */
	for (int i = 0; i < n && !rc; i++) {
		json_t *jl = json_array_get(layers, (size_t)i);
		json_t *cfg = json_object_get(jl, "config");
		const char *cls = json_string_value(json_object_get(jl, "class_name"));
		const char *name = k->kname[base + i];
		char *alias = k->alias[base + i];
		const char *in[WF_MAX_INPUTS], *win[WF_MAX_INPUTS];
		int nin = 0, h = 0, w = 0, c = 0, first_in = 0;
		if (!cls || !json_is_object(cfg))
			return kfail(k, WF_EFORMAT,
				     "model_config: layer '%s' has no class_name "
				     "or config",
				     name);
		if (k->v3)
			v3_layer_path(k, layers, i);
		if (seq && i > 0)
			in[nin++] = k->kname[base + i - 1];
		else if (!seq && (rc = inbound(k, jl, name, cls, in, &nin)))
			return rc;
		if (feed && (strcmp(cls, "InputLayer") == 0 || (seq && i == 0))) {
			if (own_input)
				return lfail(k, name, cls, "a second input (one image input only)");
			own_input = feed;
			if (strcmp(cls, "InputLayer") == 0) {
				snprintf(alias, NM, "%s", feed);
				continue;
			}
			first_in = 1; /* Sequential without an InputLayer */
		} else if (strcmp(cls, "InputLayer") == 0 || (seq && i == 0 && !k->input)) {
			if (k->input)
				return lfail(k, name, cls, "a second input (one image input only)");
			if ((rc = input_shape(k, cfg, name, &h, &w, &c)) ||
			    (rc = wf_builder_init(&k->b, h, w, c)))
				return rc ? rc : kfail(k, WF_ENOMEM, "out of memory");
			char iname[NM];
			snprintf(iname, sizeof(iname), "%s",
				 strcmp(cls, "InputLayer") == 0 ? name : "input");
			k->input = wf_b_input(&k->b, iname);
			own_input = k->input;
			for (int q = 0; q < 4; q++)
				k->pa[q] = 1.0, k->pc[q] = 0.0;
			if (strcmp(cls, "InputLayer") == 0) {
				snprintf(alias, NM, "%s", k->input);
				continue;
			}
			/* Keras 2 Sequential without an InputLayer: the first layer
			 * takes the input */
			first_in = 1;
		}
		if (!k->input)
			return lfail(k, name, cls, "comes before the model's input layer");
		if (first_in) {
			nin = 1;
			in[0] = "(input)";
			win[0] = own_input;
		}
		for (int j = 0; j < nin && !first_in; j++) {
			int p = kindex_from(k, base, in[j]);
			if (p < 0 || p >= base + i || !k->alias[p][0])
				return lfail(k, name, cls, "input '%s' is not a layer before it",
					     in[j]);
			win[j] = k->alias[p];
		}
		if (nin < 1)
			return lfail(k, name, cls, "has no inputs");
		int is_output = final && strcmp(name, outname) == 0;
		if (strcmp(cls, "Rescaling") == 0 || strcmp(cls, "Normalization") == 0) {
			int p = kindex_from(k, base, in[0]);
			if (!k->pre_ok || strcmp(win[0], k->input) != 0 ||
			    (p >= 0 && k->consumers[p] != 1))
				return lfail(k, name, cls,
					     "is supported only as the first layers, right after "
					     "the input (it becomes the model's preprocessing)");
			if ((rc = fold_pre(k, name, cls, cfg)))
				return rc;
			snprintf(alias, NM, "%s", k->input);
			continue;
		}
		const char *y = NULL;
		if (is_model_class(cls)) {
			if (nin != 1)
				return lfail(k, name, cls, "a nested model with %d inputs", nin);
			if ((rc = nested(k, name, cls, cfg, win[0], is_output, depth, &y)))
				return rc;
			snprintf(k->alias[base + i], NM, "%s", y);
			continue;
		}
		k->pre_ok = 0;
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
		snprintf(k->alias[base + i], NM, "%s", y);
	}
	if (rc)
		return rc;
	int oi = outname ? kindex_from(k, base, outname) : -1;
	if (oi < 0 || !k->alias[oi][0])
		return kfail(k, WF_EINVAL, "model_config: output layer '%s' is not a layer",
			     outname ? outname : "(none)");
	*yout = k->alias[oi];
	return 0;
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

/* The legacy .h5 group of a weight: the layer's own, or for a layer of a
 * nested model the outermost nested model's (weights named "<layer>/key"). */
static void legacy_group(const wload *l, char *grp, size_t n)
{
	const char *slash = strchr(l->scope, '/');
	if (!l->scope[0])
		snprintf(grp, n, "%s", l->layer);
	else
		snprintf(grp, n, "%.*s", slash ? (int)(slash - l->scope) : (int)strlen(l->scope),
			 l->scope);
}

/* 1 when weight name wn ("scope/layer/key:0") is l's. */
static int weight_matches(const wload *l, const char *wn)
{
	char key[NM];
	weight_key(wn, key, sizeof(key));
	if (strcmp(key, l->key) != 0 && !(l->depthwise && strcmp(key, "kernel") == 0))
		return 0;
	if (!l->scope[0])
		return 1;
	/* a nested layer's weights: the segment before the key is the layer */
	const char *end = strrchr(wn, '/');
	if (!end)
		return 0;
	const char *start = end;
	while (start > wn && start[-1] != '/')
		start--;
	return (size_t)(end - start) == strlen(l->layer) &&
	       strncmp(start, l->layer, strlen(l->layer)) == 0;
}

static int load_weights(kimp *k, wf_model *m)
{
	int rc = 0;
	char **wn = NULL;
	int nw = 0, idx = 0;
	char cur[3 * NM] = "", dpath[8 * NM];
	hid_t lg = -1;
	const wload *prev = NULL;
	for (int i = 0; i < k->nloads && !rc; i++) {
		const wload *l = &k->loads[i];
		int same = prev && strcmp(prev->layer, l->layer) == 0 &&
			   strcmp(prev->scope, l->scope) == 0;
		idx = same ? idx + 1 : 0; /* .keras: the layer's variables in order */
		prev = l;
		int found = -1;
		hid_t d = -1;
		if (k->v3) {
			/* <the layer's group>/vars/<i> */
			snprintf(dpath, sizeof(dpath), "%s/vars/%d", l->v3path, idx);
			d = H5Lexists(k->weights, dpath, H5P_DEFAULT) > 0
				    ? H5Dopen2(k->weights, dpath, H5P_DEFAULT)
				    : -1;
			if (d < 0) {
				rc = kfail(k, WF_EFORMAT,
					   "model.weights.h5: %s: missing (layer '%s' has weight "
					   "'%s')",
					   dpath, l->layer, l->key);
				break;
			}
		} else {
			char grp[3 * NM];
			legacy_group(l, grp, sizeof(grp));
			if (strcmp(cur, grp) != 0) {
				wf_h5_strs_free(wn, nw);
				wn = NULL, nw = 0;
				wf_h5_close(&lg);
				snprintf(cur, sizeof(cur), "%s", grp);
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
				if ((rc = wf_h5_attr_read_str_list(lg, "weight_names", &wn, &nw,
								   k->path, k->err)))
					break;
			}
			for (int w = 0; w < nw && found < 0; w++)
				if (weight_matches(l, wn[w]))
					found = w;
			if (found < 0) {
				rc = kfail(k, WF_EFORMAT,
					   "model_weights/%s: no weight '%s%s%s' in weight_names",
					   cur, l->scope[0] ? l->layer : "", l->scope[0] ? "/" : "",
					   l->key);
				break;
			}
			snprintf(dpath, sizeof(dpath), "model_weights/%s/%s", cur, wn[found]);
			d = H5Dopen2(lg, wn[found], H5P_DEFAULT);
		}
		const wf_view *v = wf_model_view(m, l->view);
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
				   "%s: missing or of the wrong shape for %s (%zu values)", dpath,
				   l->view, v ? v->count : 0);
		} else {
			float *dst = (v->trainable ? m->params : m->state) + v->offset;
			if (H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, dst) < 0)
				rc = kfail(k, WF_EFORMAT, "%s: cannot be read", dpath);
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
	/* The Keras applications expect their preprocess_input outside the model
	 * (also when one is the base model of a transfer-learning model). */
	int h, w, cc;
	const char *zoo = NULL;
	for (int q = 0; q < 2 && !zoo; q++) {
		const char *mn = q ? k->base_name : model_name ? model_name : "";
		if (strncasecmp(mn, "mobilenetv2", 11) == 0 || strncasecmp(mn, "nasnet", 6) == 0)
			zoo = "mobilenetv2";
		else if (strcmp(mn, "resnet50") == 0 || strcmp(mn, "resnet101") == 0 ||
			 strcmp(mn, "resnet152") == 0)
			zoo = "resnet50";
	}
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

/* Import from the open file: the config from its model_config attribute,
 * or, for a .keras archive, config (its config.json) with the weights laid
 * out as in model.weights.h5. */
static int import_model(hid_t file, json_t *config, wf_model **out, wf_model_meta *meta,
			const char *path, wf_err *err)
{
	kimp k;
	json_t *root = NULL;
	char *graph = NULL;
	wf_model *m = NULL;
	memset(&k, 0, sizeof(k));
	k.path = path, k.file = file, k.err = err, k.weights = -1, k.v3 = config != NULL;
	*out = NULL;
	int rc = config ? (root = json_incref(config), 0) : read_config(&k, &root);
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
	if (!(k.output = output_name(cfg, layers, seq))) {
		rc = kfail(&k, WF_EINVAL,
			   "model_config: output_layers: exactly one output "
			   "is supported");
		goto done;
	}
	if (!k.v3 && H5Lexists(k.file, "model_weights", H5P_DEFAULT) > 0)
		k.weights = H5Gopen2(k.file, "model_weights", H5P_DEFAULT);
	else if (k.v3)
		k.weights = H5Gopen2(k.file, "/", H5P_DEFAULT);
	k.pre_ok = 1;
	const char *yout = NULL;
	int classes = 0;
	if ((rc = walk(&k, layers, seq, NULL, k.output, 1, 0, &yout)))
		goto done;
	const wf_bshape *os = wf_builder_shape(&k.b, yout);
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
	if (!(graph = wf_builder_json(&k.b, yout, &classes))) {
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

int wf_keras_load_h5(int64_t file, wf_model **out, wf_model_meta *meta, const char *path,
		     wf_err *err)
{
	return import_model((hid_t)file, NULL, out, meta, path, err);
}

/* ---- .keras archives ------------------------------------------------------------------ */

/* Bounds: a .keras archive is read through its central directory only; no
 * name from it is ever used as a path. */
#define ZIP_MAX_CONFIG	(64u << 20)   /* config.json */
#define ZIP_MAX_WEIGHTS (4000u << 20) /* model.weights.h5, inflated in memory */
#define ZIP_MAX_ENTRIES 65536

static uint32_t le32(const unsigned char *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint16_t le16(const unsigned char *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}

static int zread_at(FILE *f, long off, void *buf, size_t n)
{
	return fseek(f, off, SEEK_SET) == 0 && fread(buf, 1, n, f) == n ? 0 : -1;
}

static int is_zip(const char *path)
{
	unsigned char magic[4] = {0};
	FILE *f = fopen(path, "rb");
	if (!f)
		return 0;
	size_t n = fread(magic, 1, sizeof(magic), f);
	fclose(f);
	return n == 4 && magic[0] == 'P' && magic[1] == 'K' && magic[2] == 3 && magic[3] == 4;
}

/* Read entry `want` of the zip archive f (size fsize) into *out (malloc'd,
 * *n bytes, plus a NUL). 1 when the archive has no such entry. */
static int zip_entry(FILE *f, long fsize, const char *path, const char *want, size_t max,
		     unsigned char **out, size_t *n, wf_err *err)
{
	unsigned char tail[65557], h[46];
	*out = NULL, *n = 0;
	long tn = fsize < (long)sizeof(tail) ? fsize : (long)sizeof(tail);
	if (tn < 22 || zread_at(f, fsize - tn, tail, (size_t)tn))
		return wf_errf(err, WF_EFORMAT, "%s: .keras archive truncated (no zip directory)",
			       path);
	long e = -1;
	for (long i = tn - 22; i >= 0 && e < 0; i--)
		if (le32(tail + i) == 0x06054b50)
			e = i;
	if (e < 0)
		return wf_errf(err, WF_EFORMAT,
			       "%s: .keras archive truncated or corrupt (no end of the zip "
			       "directory)",
			       path);
	unsigned entries = le16(tail + e + 10);
	uint32_t cd_size = le32(tail + e + 12), cd_off = le32(tail + e + 16);
	if (cd_off == 0xffffffffu || entries == 0xffff)
		return wf_errf(err, WF_ENOTSUP, "%s: a zip64 .keras archive (not supported)", path);
	if ((long)cd_off + (long)cd_size > fsize || entries > ZIP_MAX_ENTRIES)
		return wf_errf(err, WF_EFORMAT,
			       "%s: .keras archive: zip directory beyond the end of the file "
			       "(truncated?)",
			       path);
	long off = cd_off;
	for (unsigned i = 0; i < entries; i++) {
		char name[256];
		if (off + 46 > fsize || zread_at(f, off, h, 46) || le32(h) != 0x02014b50)
			return wf_errf(err, WF_EFORMAT,
				       "%s: .keras archive: zip directory entry %u corrupt", path,
				       i);
		unsigned method = le16(h + 10), nl = le16(h + 28), xl = le16(h + 30),
			 cl = le16(h + 32);
		uint32_t crc = le32(h + 16), csize = le32(h + 20), usize = le32(h + 24),
			 loff = le32(h + 42);
		long next = off + 46 + (long)nl + xl + cl;
		if (nl >= sizeof(name) || zread_at(f, off + 46, name, nl)) {
			off = next;
			continue;
		}
		name[nl] = '\0';
		off = next;
		if (strcmp(name, want) != 0)
			continue;
		unsigned char lh[30];
		if (csize == 0xffffffffu || usize == 0xffffffffu)
			return wf_errf(err, WF_ENOTSUP, "%s: %s: a zip64 entry (not supported)",
				       path, want);
		if (usize > max)
			return wf_errf(err, WF_EFORMAT, "%s: %s: %u bytes (at most %zu)", path,
				       want, usize, max);
		if (method != 0 && method != 8)
			return wf_errf(err, WF_ENOTSUP,
				       "%s: %s: zip compression method %u (stored or deflated "
				       "only)",
				       path, want, method);
		if ((long)loff + 30 > fsize || zread_at(f, loff, lh, 30) || le32(lh) != 0x04034b50)
			return wf_errf(err, WF_EFORMAT, "%s: %s: zip local header corrupt", path,
				       want);
		long data = (long)loff + 30 + le16(lh + 26) + le16(lh + 28);
		if (data + (long)csize > fsize)
			return wf_errf(err, WF_EFORMAT,
				       "%s: %s: data beyond the end of the archive (truncated?)",
				       path, want);
		unsigned char *cbuf = malloc(csize ? csize : 1), *ubuf = malloc((size_t)usize + 1);
		int rc = 0;
		if (!cbuf || !ubuf) {
			rc = wf_errf(err, WF_ENOMEM, "%s: %s: out of memory", path, want);
		} else if (zread_at(f, data, cbuf, csize)) {
			rc = wf_errf(err, WF_EIO, "%s: %s: cannot be read", path, want);
		} else if (method == 0) {
			if (csize != usize)
				rc = wf_errf(err, WF_EFORMAT, "%s: %s: stored sizes differ", path,
					     want);
			else
				memcpy(ubuf, cbuf, csize);
		} else {
			z_stream z;
			memset(&z, 0, sizeof(z));
			if (inflateInit2(&z, -MAX_WBITS) != Z_OK) {
				rc = wf_errf(err, WF_ENOMEM, "%s: %s: inflate", path, want);
			} else {
				z.next_in = cbuf, z.avail_in = csize;
				z.next_out = ubuf, z.avail_out = usize;
				int zr = inflate(&z, Z_FINISH);
				if (zr != Z_STREAM_END || z.total_out != usize)
					rc = wf_errf(err, WF_EFORMAT,
						     "%s: %s: corrupt compressed data", path, want);
				inflateEnd(&z);
			}
		}
		if (!rc && crc32(0L, ubuf, usize) != crc)
			rc = wf_errf(err, WF_EFORMAT, "%s: %s: CRC mismatch (corrupt archive)",
				     path, want);
		free(cbuf);
		if (rc) {
			free(ubuf);
			return rc;
		}
		ubuf[usize] = '\0';
		*out = ubuf, *n = usize;
		return 0;
	}
	return 1;
}

/* Read config.json and model.weights.h5 of the .keras archive at path. */
static int read_archive(const char *path, json_t **config, unsigned char **weights, size_t *nw,
			wf_err *err)
{
	unsigned char *cfg = NULL;
	size_t ncfg = 0;
	json_error_t jerr;
	*config = NULL, *weights = NULL, *nw = 0;
	FILE *f = fopen(path, "rb");
	if (!f)
		return wf_errf(err, WF_EIO, "%s: %s", path, strerror(errno));
	long fsize = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
	int rc = fsize < 0 ? wf_errf(err, WF_EIO, "%s: cannot be read", path) : 0;
	if (!rc &&
	    (rc = zip_entry(f, fsize, path, "config.json", ZIP_MAX_CONFIG, &cfg, &ncfg, err)) == 1)
		rc = wf_errf(err, WF_EFORMAT,
			     "%s: a zip archive without config.json (not a .keras "
			     "model)",
			     path);
	if (!rc && (rc = zip_entry(f, fsize, path, "model.weights.h5", ZIP_MAX_WEIGHTS, weights, nw,
				   err)) == 1)
		rc = wf_errf(err, WF_EFORMAT,
			     "%s: .keras archive without model.weights.h5 (saved without weights?)",
			     path);
	if (!rc && !(*config = json_loadb((const char *)cfg, ncfg, 0, &jerr)))
		rc = wf_errf(err, WF_EFORMAT, "%s: config.json: invalid JSON at line %d: %s", path,
			     jerr.line, jerr.text);
	fclose(f);
	free(cfg);
	if (rc) {
		free(*weights);
		*weights = NULL;
	}
	return rc;
}

/* Import a .keras archive: the weights file is opened from memory. */
static int load_archive(wf_model **out, wf_model_meta *meta, const char *path, wf_err *err)
{
	static unsigned long seq;
	json_t *config = NULL;
	unsigned char *img = NULL;
	size_t n = 0;
	hid_t fapl = -1, f = -1;
	wf_h5_quiet q;
	int rc = read_archive(path, &config, &img, &n, err);
	if (rc)
		return rc;
	wf_h5_quiet_begin(&q);
	char name[64];
	snprintf(name, sizeof(name), "weft-keras-%lu",
		 __atomic_add_fetch(&seq, 1, __ATOMIC_RELAXED));
	fapl = H5Pcreate(H5P_FILE_ACCESS);
	if (fapl < 0 || H5Pset_fapl_core(fapl, 1 << 20, 0) < 0 ||
	    H5Pset_file_image(fapl, img, n) < 0 || (f = H5Fopen(name, H5F_ACC_RDONLY, fapl)) < 0)
		rc = wf_errf(err, WF_EFORMAT,
			     "%s: model.weights.h5 in the archive is not a readable HDF5 file",
			     path);
	free(img);
	if (!rc)
		rc = import_model(f, config, out, meta, path, err);
	wf_h5_close(&f);
	wf_h5_close(&fapl);
	wf_h5_quiet_end(&q);
	json_decref(config);
	return rc;
}

int wf_keras_is_archive(const char *path)
{
	return is_zip(path);
}

int wf_keras_check_archive(const char *path, wf_err *err)
{
	json_t *config = NULL;
	unsigned char *img = NULL;
	size_t n = 0;
	if (!is_zip(path))
		return 0;
	int rc = read_archive(path, &config, &img, &n, err);
	json_decref(config);
	free(img);
	return rc;
}

int wf_keras_load(wf_model **out, wf_model_meta *meta, const char *path, wf_err *err)
{
	wf_h5_quiet q;
	hid_t f = H5I_INVALID_HID;
	*out = NULL;
	if (meta)
		wf_model_meta_init(meta);
	if (is_zip(path))
		return load_archive(out, meta, path, err);
	int rc = wf_h5_open(path, H5F_ACC_RDONLY, &f, err);
	if (rc != 0)
		return rc;
	wf_h5_quiet_begin(&q);
	rc = wf_keras_load_h5(f, out, meta, path, err);
	wf_h5_close(&f);
	wf_h5_quiet_end(&q);
	return rc;
}
