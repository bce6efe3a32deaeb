/* zoo.c: the built-in models. Each is a builder function that emits graph
 * JSON through a small builder API (add_conv, add_bn, ...); the JSON is then
 * parsed like any other graph, so zoo models round-trip through model files.
 * To add a model: write a builder and add a row to `zoo`. */
#include "model/model.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- builder ------------------------------------------------------------ */

typedef struct builder {
	json_t *layers; /* the "layers" array */
	int failed;	/* an allocation failed somewhere */
} builder;

/* Append a layer; returns its name (owned by the builder's JSON). */
static const char *add(builder *b, const char *name, const char *type, json_t *config, int nin, ...)
{
	json_t *ins = json_array();
	va_list ap;
	va_start(ap, nin);
	for (int k = 0; k < nin; k++)
		json_array_append_new(ins, json_string(va_arg(ap, const char *)));
	va_end(ap);
	json_t *l = json_pack("{s:s, s:s, s:o, s:o}", "name", name, "type", type, "inputs", ins,
			      "config", config ? config : json_object());
	if (!l || json_array_append_new(b->layers, l) != 0) {
		b->failed = 1;
		return name;
	}
	return json_string_value(json_object_get(l, "name"));
}

static const char *add_input(builder *b, const char *name)
{
	return add(b, name, "input", NULL, 0);
}

/* conv k x k, stride s; "same" padding when same != 0. */
static const char *add_conv(builder *b, const char *name, const char *in, int filters, int k, int s,
			    int same, int use_bias)
{
	json_t *c = json_pack("{s:i, s:[ii], s:[ii], s:s, s:b}", "filters", filters, "kernel_size",
			      k, k, "strides", s, s, "padding", same ? "same" : "valid", "use_bias",
			      use_bias);
	return add(b, name, "conv2d", c, 1, in);
}

static const char *add_bn(builder *b, const char *name, const char *in)
{
	return add(b, name, "batchnorm", NULL, 1, in);
}

static const char *add_relu(builder *b, const char *name, const char *in)
{
	return add(b, name, "relu", NULL, 1, in);
}

static const char *add_add(builder *b, const char *name, const char *x, const char *y)
{
	return add(b, name, "add", NULL, 2, x, y);
}

static const char *add_maxpool(builder *b, const char *name, const char *in, int k, int s)
{
	json_t *c = json_pack("{s:[ii], s:[ii]}", "pool_size", k, k, "strides", s, s);
	return add(b, name, "maxpool", c, 1, in);
}

static const char *add_gap(builder *b, const char *name, const char *in)
{
	return add(b, name, "gap", NULL, 1, in);
}

static const char *add_flatten(builder *b, const char *name, const char *in)
{
	return add(b, name, "flatten", NULL, 1, in);
}

static const char *add_dense(builder *b, const char *name, const char *in, int units)
{
	return add(b, name, "dense", json_pack("{s:i}", "units", units), 1, in);
}

/* conv + batch norm (+ relu): the usual unit of post-2015 CNNs. */
static const char *add_conv_bn(builder *b, const char *name, const char *in, int filters, int k,
			       int s, int relu)
{
	char n[WF_NAME_MAX + 16];
	snprintf(n, sizeof(n), "%s", name);
	const char *x = add_conv(b, n, in, filters, k, s, 1, 0);
	snprintf(n, sizeof(n), "%s_bn", name);
	x = add_bn(b, n, x);
	if (relu) {
		snprintf(n, sizeof(n), "%s_relu", name);
		x = add_relu(b, n, x);
	}
	return x;
}

/* ---- models ------------------------------------------------------------- */

static void build_mlp(builder *b, int classes)
{
	const char *x = add_input(b, "image");
	x = add_flatten(b, "flatten", x);
	x = add_dense(b, "dense1", x, 256);
	x = add_relu(b, "relu1", x);
	add_dense(b, "logits", x, classes);
}

static void build_smallcnn(builder *b, int classes)
{
	const char *x = add_input(b, "image");
	x = add_conv(b, "conv1", x, 32, 3, 1, 1, 1);
	x = add_relu(b, "relu1", x);
	x = add_maxpool(b, "pool1", x, 2, 2);
	x = add_conv(b, "conv2", x, 64, 3, 1, 1, 1);
	x = add_relu(b, "relu2", x);
	x = add_maxpool(b, "pool2", x, 2, 2);
	x = add_flatten(b, "flatten", x);
	x = add_dense(b, "dense1", x, 128);
	x = add_relu(b, "relu3", x);
	add_dense(b, "logits", x, classes);
}

/* He et al. 2016 CIFAR ResNet with n basic blocks per stage (depth 6n + 2);
 * projection shortcuts (1x1 conv + BN) where the shape changes. */
static void build_cifar_resnet(builder *b, int classes, int n)
{
	char name[WF_NAME_MAX];
	const char *x = add_input(b, "image");
	x = add_conv_bn(b, "conv1", x, 16, 3, 1, 1);
	for (int stage = 1; stage <= 3; stage++) {
		int filters = 16 << (stage - 1);
		for (int blk = 1; blk <= n; blk++) {
			int stride = (stage > 1 && blk == 1) ? 2 : 1;
			char p[64];
			snprintf(p, sizeof(p), "stage%d_block%d", stage, blk);
			const char *shortcut = x;
			snprintf(name, sizeof(name), "%s_conv1", p);
			const char *y = add_conv_bn(b, name, x, filters, 3, stride, 1);
			snprintf(name, sizeof(name), "%s_conv2", p);
			y = add_conv_bn(b, name, y, filters, 3, 1, 0);
			if (stride != 1) {
				snprintf(name, sizeof(name), "%s_shortcut", p);
				shortcut = add_conv_bn(b, name, x, filters, 1, stride, 0);
			}
			snprintf(name, sizeof(name), "%s_add", p);
			y = add_add(b, name, y, shortcut);
			snprintf(name, sizeof(name), "%s_relu", p);
			x = add_relu(b, name, y);
		}
	}
	x = add_gap(b, "gap", x);
	add_dense(b, "logits", x, classes);
}

static void build_resnet20(builder *b, int classes)
{
	build_cifar_resnet(b, classes, 3);
}

static void build_resnet56(builder *b, int classes)
{
	build_cifar_resnet(b, classes, 9);
}

static const struct {
	const char *name;
	void (*build)(builder *b, int classes);
} zoo[] = {
	{"mlp", build_mlp},
	{"smallcnn", build_smallcnn},
	{"resnet20", build_resnet20},
	{"resnet56", build_resnet56},
};

const char *wf_model_zoo_names(void)
{
	return "mlp smallcnn resnet20 resnet56";
}

int wf_model_zoo(wf_model **out, const char *name, int h, int w, int c, int classes, wf_err *err)
{
	*out = NULL;
	int idx = -1;
	for (size_t i = 0; i < sizeof(zoo) / sizeof(zoo[0]); i++)
		if (name && strcmp(zoo[i].name, name) == 0)
			idx = (int)i;
	if (idx < 0)
		return wf_errf(err, WF_EINVAL, "model: unknown model '%s' (built in: %s)",
			       name ? name : "(null)", wf_model_zoo_names());
	builder b = {json_array(), 0};
	zoo[idx].build(&b, classes);
	const char *output =
		b.layers && json_array_size(b.layers)
			? json_string_value(json_object_get(
				  json_array_get(b.layers, json_array_size(b.layers) - 1), "name"))
			: "";
	json_t *root = json_pack("{s:i, s:[iii], s:i, s:s, s:O}", "format", 1, "input_shape", h, w,
				 c, "classes", classes, "output", output, "layers", b.layers);
	char *text =
		root && !b.failed ? json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
	json_decref(root);
	json_decref(b.layers);
	if (!text)
		return wf_errf(err, WF_ENOMEM, "model: out of memory building '%s'", name);
	int rc = wf_model_from_json(out, text, err);
	free(text);
	if (rc)
		return wf_err_wrap(err, "model '%s' for input [%d,%d,%d], %d classes", name, h, w,
				   c, classes);
	wf_model_init_params(*out, 0);
	return 0;
}
