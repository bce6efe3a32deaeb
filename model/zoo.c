/* zoo.c: the built-in models. Each is a builder function that emits graph
 * JSON through the builder of zoo_build.h; the JSON is then parsed like any
 * other graph, so zoo models round-trip through model files. The small
 * models live here, the Keras applications in zoo_apps.c. To add a model:
 * write a builder and add a row to `zoo`. */
#include "model/model.h"
#include "model/zoo_build.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- small models ------------------------------------------------------- */

static const char *conv(wf_builder *b, const char *name, const char *in, int filters, int k, int s,
			int same, int use_bias)
{
	return wf_b_conv(b, name, in, filters, k, k, s, s, 1, 1, same, use_bias);
}

/* conv + batch norm (+ relu): the usual unit of post-2015 CNNs. */
static const char *conv_bn(wf_builder *b, const char *name, const char *in, int filters, int k,
			   int s, int relu)
{
	char n[WF_NAME_MAX + 16];
	const char *x = conv(b, name, in, filters, k, s, 1, 0);
	snprintf(n, sizeof(n), "%s_bn", name);
	x = wf_b_bn(b, n, x, 1e-3, 0.99);
	if (relu) {
		snprintf(n, sizeof(n), "%s_relu", name);
		x = wf_b_act(b, n, "relu", x);
	}
	return x;
}

static void build_mlp(wf_builder *b, int classes, const wf_zoo_opts *o)
{
	const char *x = wf_b_input(b, "image");
	x = wf_b_flatten(b, "flatten", x);
	x = wf_b_dense(b, "dense1", x, 256, 1);
	x = wf_b_act(b, "relu1", "relu", x);
	if (o->include_top)
		wf_b_dense(b, "logits", x, classes, 1);
}

static void build_smallcnn(wf_builder *b, int classes, const wf_zoo_opts *o)
{
	const char *x = wf_b_input(b, "image");
	x = conv(b, "conv1", x, 32, 3, 1, 1, 1);
	x = wf_b_act(b, "relu1", "relu", x);
	x = wf_b_pool(b, "pool1", "maxpool", x, 2, 2, 0);
	x = conv(b, "conv2", x, 64, 3, 1, 1, 1);
	x = wf_b_act(b, "relu2", "relu", x);
	x = wf_b_pool(b, "pool2", "maxpool", x, 2, 2, 0);
	x = wf_b_flatten(b, "flatten", x);
	x = wf_b_dense(b, "dense1", x, 128, 1);
	x = wf_b_act(b, "relu3", "relu", x);
	if (o->include_top)
		wf_b_dense(b, "logits", x, classes, 1);
}

/* He et al. 2016 CIFAR ResNet with n basic blocks per stage (depth 6n + 2);
 * projection shortcuts (1x1 conv + BN) where the shape changes. */
static void build_cifar_resnet(wf_builder *b, int classes, const wf_zoo_opts *o, int n)
{
	char name[WF_NAME_MAX];
	const char *x = wf_b_input(b, "image");
	x = conv_bn(b, "conv1", x, 16, 3, 1, 1);
	for (int stage = 1; stage <= 3; stage++) {
		int filters = 16 << (stage - 1);
		for (int blk = 1; blk <= n; blk++) {
			int stride = (stage > 1 && blk == 1) ? 2 : 1;
			char p[64];
			snprintf(p, sizeof(p), "stage%d_block%d", stage, blk);
			const char *shortcut = x;
			snprintf(name, sizeof(name), "%s_conv1", p);
			const char *y = conv_bn(b, name, x, filters, 3, stride, 1);
			snprintf(name, sizeof(name), "%s_conv2", p);
			y = conv_bn(b, name, y, filters, 3, 1, 0);
			if (stride != 1) {
				snprintf(name, sizeof(name), "%s_shortcut", p);
				shortcut = conv_bn(b, name, x, filters, 1, stride, 0);
			}
			snprintf(name, sizeof(name), "%s_add", p);
			y = wf_b_add2(b, name, y, shortcut);
			snprintf(name, sizeof(name), "%s_relu", p);
			x = wf_b_act(b, name, "relu", y);
		}
	}
	x = wf_b_gap(b, "gap", x);
	if (o->include_top)
		wf_b_dense(b, "logits", x, classes, 1);
}

static void build_resnet20(wf_builder *b, int classes, const wf_zoo_opts *o)
{
	build_cifar_resnet(b, classes, o, 3);
}

static void build_resnet56(wf_builder *b, int classes, const wf_zoo_opts *o)
{
	build_cifar_resnet(b, classes, o, 9);
}

/* ---- the table ---------------------------------------------------------- */

enum { PRE_UNIT, PRE_TF, PRE_CAFFE }; /* [0,1]; [-1,1]; BGR minus the ImageNet mean */

static const struct {
	const char *name;
	void (*build)(wf_builder *b, int classes, const wf_zoo_opts *o);
	int h, w; /* default input size */
	int pre;
} zoo[] = {
	{"mlp", build_mlp, 32, 32, PRE_UNIT},
	{"smallcnn", build_smallcnn, 32, 32, PRE_UNIT},
	{"resnet20", build_resnet20, 32, 32, PRE_UNIT},
	{"resnet56", build_resnet56, 32, 32, PRE_UNIT},
	{"mobilenetv2", wf_zoo_mobilenetv2, 224, 224, PRE_TF},
	{"nasnetmobile", wf_zoo_nasnetmobile, 224, 224, PRE_TF},
	{"nasnetlarge", wf_zoo_nasnetlarge, 331, 331, PRE_TF},
	{"resnet50", wf_zoo_resnet50, 224, 224, PRE_CAFFE},
	{"resnet152", wf_zoo_resnet152, 224, 224, PRE_CAFFE},
};

const char *wf_model_zoo_names(void)
{
	return "mlp smallcnn resnet20 resnet56 mobilenetv2 nasnetmobile nasnetlarge resnet50 "
	       "resnet152";
}

static int lookup(const char *name, wf_err *err)
{
	for (size_t i = 0; i < sizeof(zoo) / sizeof(zoo[0]); i++)
		if (name && strcmp(zoo[i].name, name) == 0)
			return (int)i;
	return wf_errf(err, WF_EINVAL, "model: unknown model '%s' (built in: %s)",
		       name ? name : "(null)", wf_model_zoo_names());
}

int wf_model_zoo_info(const char *name, int *h, int *w, int *c, wf_model_meta *meta, wf_err *err)
{
	int idx = lookup(name, err);
	if (idx < 0)
		return idx;
	*h = zoo[idx].h, *w = zoo[idx].w, *c = 3;
	if (!meta)
		return 0;
	for (int k = 0; k < 4; k++)
		meta->mean[k] = 0.0f, meta->std[k] = 1.0f;
	snprintf(meta->channel_order, sizeof(meta->channel_order), "RGB");
	switch (zoo[idx].pre) {
	case PRE_UNIT: meta->scale = 1.0f / 255.0f; break;
	case PRE_TF: /* x / 127.5 - 1 */
		meta->scale = 1.0f / 127.5f;
		for (int k = 0; k < 4; k++)
			meta->mean[k] = 1.0f;
		break;
	case PRE_CAFFE: /* RGB -> BGR, minus the ImageNet mean (in BGR order) */
		meta->scale = 1.0f;
		meta->mean[0] = 103.939f, meta->mean[1] = 116.779f, meta->mean[2] = 123.68f;
		snprintf(meta->channel_order, sizeof(meta->channel_order), "BGR");
		break;
	}
	return 0;
}

int wf_model_zoo_ex(wf_model **out, const char *name, int h, int w, int c, int classes,
		    const wf_zoo_opts *opts, wf_err *err)
{
	static const wf_zoo_opts defaults = WF_ZOO_OPTS_DEFAULT;
	*out = NULL;
	int idx = lookup(name, err);
	if (idx < 0)
		return idx;
	if (!opts)
		opts = &defaults;
	if (h <= 0)
		h = zoo[idx].h;
	if (w <= 0)
		w = zoo[idx].w;
	if (c <= 0)
		c = 3;
	if (opts->alpha < 0 || opts->alpha > 8)
		return wf_errf(err, WF_EINVAL, "model '%s': alpha %g is out of range (0, 8]", name,
			       (double)opts->alpha);
	wf_builder b;
	if (wf_builder_init(&b, h, w, c))
		return wf_errf(err, WF_ENOMEM, "model: out of memory building '%s'", name);
	b.input_name = opts->input_name;
	zoo[idx].build(&b, classes, opts);
	int k = 0;
	char *text = wf_builder_json(&b, NULL, &k);
	int rc = text ? 0 : wf_errf(err, WF_EINVAL, "model '%s': %s", name, b.why);
	wf_builder_free(&b);
	if (rc)
		return rc;
	rc = wf_model_from_json(out, text, err);
	free(text);
	if (rc)
		return wf_err_wrap(err, "model '%s' for input [%d,%d,%d], %d classes", name, h, w,
				   c, classes);
	wf_model_init_params(*out, 0);
	return 0;
}

int wf_model_zoo(wf_model **out, const char *name, int h, int w, int c, int classes, wf_err *err)
{
	return wf_model_zoo_ex(out, name, h, w, c, classes, NULL, err);
}
