/* keras_layers.c: the Keras importer's layer converters (see keras.c). */
#include "model/keras_priv.h"

#include "common/util.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

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
const char *wf_keras_activation(json_t *cfg)
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
		wf_keras_lfail(k, kname, cls, "softmax is supported only at the output");
		return NULL;
	}
	if (strcmp(act, "relu") != 0 && strcmp(act, "relu6") != 0) {
		wf_keras_lfail(k, kname, cls,
			       "activation '%s' is not supported (relu, relu6, linear, "
			       "softmax at the output)",
			       act);
		return NULL;
	}
	snprintf(n, sizeof(n), "%s_activation", kname);
	return wf_b_act(&k->b, n, act, x);
}

/* Fold a leading Rescaling/Normalization into the preprocessing. */
int wf_keras_fold_pre(kimp *k, const char *name, const char *cls, json_t *cfg)
{
	int c = k->b.in_c;
	double s[4], o[4];
	if (c > 4)
		return wf_keras_lfail(k, name, cls, "preprocessing of %d channels (at most 4)", c);
	if (strcmp(cls, "Rescaling") == 0) {
		json_t *js = json_object_get(cfg, "scale"), *jo = json_object_get(cfg, "offset");
		for (int i = 0; i < c; i++) {
			json_t *a = json_is_array(js) ? json_array_get(js, (size_t)i) : js;
			json_t *b = json_is_array(jo) ? json_array_get(jo, (size_t)i) : jo;
			if (!json_is_number(a) || (jo && !json_is_number(b)))
				return wf_keras_lfail(k, name, cls,
						      "scale/offset: expected numbers");
			s[i] = json_number_value(a);
			o[i] = jo ? json_number_value(b) : 0.0;
		}
	} else { /* Normalization: (x - mean) / max(sqrt(var), 1e-7) */
		double mean[4], var[4];
		if (cfg_bool(cfg, "invert", 0) || !channel_axis(cfg, "axis"))
			return wf_keras_lfail(k, name, cls,
					      "only axis -1 without invert is supported");
		json_t *jm = json_object_get(cfg, "mean"), *jv = json_object_get(cfg, "variance");
		if (jm && !json_is_null(jm)) {
			for (int i = 0; i < c; i++) {
				json_t *a = json_is_array(jm) ? json_array_get(jm, (size_t)i) : jm;
				json_t *b = json_is_array(jv) ? json_array_get(jv, (size_t)i) : jv;
				if (!json_is_number(a) || !json_is_number(b))
					return wf_keras_lfail(k, name, cls,
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
				rc = wf_keras_lfail(k, name, cls,
						    "no mean/variance in config or weights");
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
						rc = wf_keras_lfail(k, name, cls,
								    "weight %s: expected %d values",
								    wn[w], c);
					for (int i = 0; i < c; i++)
						dst[q][i] = v[i];
					found |= 1 << q;
					wf_h5_close(&sp);
					wf_h5_close(&d);
				}
			}
			if (!rc && found != 3)
				rc = wf_keras_lfail(k, name, cls,
						    "no mean/variance in config or weights");
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
			return wf_keras_lfail(k, name, cls,
					      "a scale of %g is not supported (must be > 0)", s[i]);
		k->pa[i] *= s[i];
		k->pc[i] = k->pc[i] * s[i] + o[i];
	}
	k->have_pre = 1;
	return 0;
}

/* One converter per Keras class (or family of classes): inputs are the weft
 * layers in[0..nin); sets *y to the weft layer holding the output, or leaves
 * it NULL after recording an error. */
typedef int (*kconv_fn)(kimp *k, const char *name, const char *cls, json_t *cfg, int nin,
			const char **in, int is_output, const char **y);

static int conv_dropout(kimp *k, const char *name, const char *cls, json_t *cfg, int nin,
			const char **in, int is_output, const char **y)
{
	(void)cls, (void)nin, (void)is_output;
	*y = wf_b_dropout(&k->b, name, in[0], cfg_num(cfg, "rate", 0.0));
	return 0;
}

static int conv_flatten(kimp *k, const char *name, const char *cls, json_t *cfg, int nin,
			const char **in, int is_output, const char **y)
{
	(void)cls, (void)cfg, (void)nin, (void)is_output;
	*y = wf_b_flatten(&k->b, name, in[0]);
	return 0;
}

static int conv_gap(kimp *k, const char *name, const char *cls, json_t *cfg, int nin,
		    const char **in, int is_output, const char **y)
{
	(void)nin, (void)is_output;
	if (cfg_bool(cfg, "keepdims", 0))
		return wf_keras_lfail(k, name, cls, "keepdims=True is not supported");
	*y = wf_b_gap(&k->b, name, in[0]);
	return 0;
}

/* Add, Concatenate */
static int conv_merge(kimp *k, const char *name, const char *cls, json_t *cfg, int nin,
		      const char **in, int is_output, const char **y)
{
	(void)is_output;
	if (nin < 2)
		return wf_keras_lfail(k, name, cls, "needs at least 2 inputs, has %d", nin);
	if (cls[0] == 'C' && !channel_axis(cfg, "axis"))
		return wf_keras_lfail(k, name, cls, "only the channel axis (-1) is supported");
	*y = wf_b_add(&k->b, name, cls[0] == 'A' ? "add" : "concat", NULL, nin, in);
	return 0;
}

static int conv_relu(kimp *k, const char *name, const char *cls, json_t *cfg, int nin,
		     const char **in, int is_output, const char **y)
{
	(void)nin, (void)is_output;
	json_t *mv = json_object_get(cfg, "max_value");
	if (cfg_num(cfg, "negative_slope", 0) != 0 || cfg_num(cfg, "threshold", 0) != 0)
		return wf_keras_lfail(k, name, cls, "negative_slope/threshold must be 0");
	if (mv && !json_is_null(mv) && json_number_value(mv) != 6.0)
		return wf_keras_lfail(k, name, cls, "max_value %g is not supported (none or 6)",
				      json_number_value(mv));
	*y = wf_b_act(&k->b, name, mv && !json_is_null(mv) ? "relu6" : "relu", in[0]);
	return 0;
}

static int conv_activation(kimp *k, const char *name, const char *cls, json_t *cfg, int nin,
			   const char **in, int is_output, const char **y)
{
	(void)nin;
	*y = apply_act(k, name, cls, wf_keras_activation(cfg), in[0], is_output);
	return *y ? 0 : k->rc;
}

/* ZeroPadding2D, Cropping2D */
static int conv_pad(kimp *k, const char *name, const char *cls, json_t *cfg, int nin,
		    const char **in, int is_output, const char **y)
{
	(void)nin, (void)is_output;
	int z = cls[0] == 'Z';
	json_t *c = json_pack("{s:O}", z ? "padding" : "cropping",
			      json_object_get(cfg, z ? "padding" : "cropping"));
	if (!c || !json_object_get(cfg, z ? "padding" : "cropping"))
		return wf_keras_lfail(k, name, cls, "missing %s", z ? "padding" : "cropping");
	*y = wf_b_add(&k->b, name, z ? "zeropad" : "crop", c, 1, in);
	return 0;
}

/* MaxPooling2D, AveragePooling2D */
static int conv_pool(kimp *k, const char *name, const char *cls, json_t *cfg, int nin,
		     const char **in, int is_output, const char **y)
{
	(void)nin, (void)is_output;
	int kh, kw, sh, sw, same = padding(cfg);
	if (cfg_int2(cfg, "pool_size", 2, &kh, &kw) || same < 0)
		return wf_keras_lfail(k, name, cls, "pool_size/padding: unsupported value");
	if (cfg_int2(cfg, "strides", 0, &sh, &sw))
		return wf_keras_lfail(k, name, cls, "strides: unsupported value");
	if (sh == 0)
		sh = kh, sw = kw;
	json_t *c = json_pack("{s:[ii], s:[ii], s:s}", "pool_size", kh, kw, "strides", sh, sw,
			      "padding", same ? "same" : "valid");
	*y = wf_b_add(&k->b, name, cls[0] == 'M' ? "maxpool" : "avgpool", c, 1, in);
	return 0;
}

static int conv_bn(kimp *k, const char *name, const char *cls, json_t *cfg, int nin,
		   const char **in, int is_output, const char **y)
{
	(void)nin, (void)is_output;
	static const char *const keys[4] = {"gamma", "beta", "moving_mean", "moving_variance"};
	char n[2 * NM];
	int rc = 0;
	if (!channel_axis(cfg, "axis"))
		return wf_keras_lfail(k, name, cls, "only the channel axis (-1) is supported");
	*y = wf_b_bn(&k->b, name, in[0], cfg_num(cfg, "epsilon", 1e-3),
		     cfg_num(cfg, "momentum", 0.99));
	for (int q = 0; q < 4 && !rc; q++) {
		if ((q == 0 && !cfg_bool(cfg, "scale", 1)) ||
		    (q == 1 && !cfg_bool(cfg, "center", 1)))
			continue; /* gamma 1 / beta 0, as initialised */
		snprintf(n, sizeof(n), "%s/%s", name, keys[q]);
		rc = wf_keras_add_load(k, n, name, keys[q], 0);
	}
	return rc;
}

static int conv_dense(kimp *k, const char *name, const char *cls, json_t *cfg, int nin,
		      const char **in, int is_output, const char **y)
{
	(void)nin;
	char n[2 * NM];
	int units = (int)json_integer_value(json_object_get(cfg, "units"));
	int bias = cfg_bool(cfg, "use_bias", 1);
	*y = wf_b_dense(&k->b, name, in[0], units, bias);
	snprintf(n, sizeof(n), "%s/kernel", name);
	int rc = wf_keras_add_load(k, n, name, "kernel", 0);
	snprintf(n, sizeof(n), "%s/bias", name);
	if (!rc && bias)
		rc = wf_keras_add_load(k, n, name, "bias", 0);
	if (!rc && *y)
		*y = apply_act(k, name, cls, wf_keras_activation(cfg), *y, is_output);
	return rc;
}

/* Conv2D, DepthwiseConv2D, SeparableConv2D */
static int conv_conv(kimp *k, const char *name, const char *cls, json_t *cfg, int nin,
		     const char **in, int is_output, const char **y)
{
	(void)nin;
	wf_builder *b = &k->b;
	char n[2 * NM];
	int kh, kw, sh, sw, dh, dw, rc = 0;
	int same = padding(cfg), bias = cfg_bool(cfg, "use_bias", 1);
	int groups = (int)cfg_num(cfg, "groups", 1);
	if (cfg_int2(cfg, "kernel_size", 0, &kh, &kw) || kh <= 0 ||
	    cfg_int2(cfg, "strides", 1, &sh, &sw) || cfg_int2(cfg, "dilation_rate", 1, &dh, &dw) ||
	    same < 0 || dh != dw)
		return wf_keras_lfail(
			k, name, cls,
			"kernel_size/strides/dilation_rate/padding: unsupported value");
	const wf_bshape *x = wf_builder_shape(b, in[0]);
	int c = x ? x->c : 0;
	const char *src = in[0];
	if (cls[0] == 'C') {
		int filters = (int)json_integer_value(json_object_get(cfg, "filters"));
		*y = wf_b_conv(b, name, src, filters, kh, kw, sh, sw, dh, groups, same, bias);
		snprintf(n, sizeof(n), "%s/kernel", name);
		rc = wf_keras_add_load(k, n, name, "kernel", 0);
	} else {
		int dm = (int)cfg_num(cfg, "depth_multiplier", 1);
		int sep = cls[0] == 'S';
		if (dm < 1)
			return wf_keras_lfail(k, name, cls, "depth_multiplier %d", dm);
		if (sep)
			snprintf(n, sizeof(n), "%s_depthwise", name);
		const char *dwn = wf_b_conv(b, sep ? n : name, src, c * dm, kh, kw, sh, sw, dh,
					    c ? c : 1, same, sep ? 0 : bias);
		snprintf(n, sizeof(n), "%s/kernel", dwn);
		rc = wf_keras_add_load(k, n, name, "depthwise_kernel", 1);
		*y = dwn;
		if (!rc && sep) {
			int filters = (int)json_integer_value(json_object_get(cfg, "filters"));
			*y = wf_b_conv(b, name, dwn, filters, 1, 1, 1, 1, 1, 1, 0, bias);
			snprintf(n, sizeof(n), "%s/kernel", name);
			rc = wf_keras_add_load(k, n, name, "pointwise_kernel", 0);
		}
	}
	snprintf(n, sizeof(n), "%s/bias", name);
	if (!rc && bias)
		rc = wf_keras_add_load(k, n, name, "bias", 0);
	if (!rc && *y)
		*y = apply_act(k, name, cls, wf_keras_activation(cfg), *y, is_output);
	return rc;
}

/* The converters, by Keras class name. InputLayer, nested models and a
 * leading Rescaling/Normalization are handled by the layer walk (keras.c). */
static const struct {
	const char *cls;
	kconv_fn fn;
} converters[] = {
	{"Dropout", conv_dropout},
	{"Flatten", conv_flatten},
	{"GlobalAveragePooling2D", conv_gap},
	{"Add", conv_merge},
	{"Concatenate", conv_merge},
	{"ReLU", conv_relu},
	{"Activation", conv_activation},
	{"ZeroPadding2D", conv_pad},
	{"Cropping2D", conv_pad},
	{"MaxPooling2D", conv_pool},
	{"AveragePooling2D", conv_pool},
	{"BatchNormalization", conv_bn},
	{"Dense", conv_dense},
	{"Conv2D", conv_conv},
	{"DepthwiseConv2D", conv_conv},
	{"SeparableConv2D", conv_conv},
};

int wf_keras_convert(kimp *k, const char *name, const char *cls, json_t *cfg, int nin,
		     const char **in, int is_output, const char **y)
{
	kconv_fn fn = NULL;
	*y = NULL;
	if (!channels_last(cfg))
		return wf_keras_lfail(k, name, cls, "data_format channels_first is not supported");
	for (size_t i = 0; i < WF_ARRAY_LEN(converters) && !fn; i++)
		if (strcmp(cls, converters[i].cls) == 0)
			fn = converters[i].fn;
	if (!fn)
		return wf_keras_lfail(
			k, name, cls,
			"is not supported by weft (supported: InputLayer, Conv2D, "
			"DepthwiseConv2D, SeparableConv2D, BatchNormalization, Dense, "
			"Activation, ReLU, Add, Concatenate, ZeroPadding2D, Cropping2D, "
			"MaxPooling2D, AveragePooling2D, GlobalAveragePooling2D, Flatten, "
			"Dropout, leading Rescaling/Normalization)");
	int rc = fn(k, name, cls, cfg, nin, in, is_output, y);
	if (rc)
		return rc;
	if (!*y)
		return k->rc ? k->rc : wf_keras_lfail(k, name, cls, "cannot be converted");
	if (k->b.failed)
		return wf_keras_lfail(k, name, cls, "%s", k->b.why);
	return 0;
}
