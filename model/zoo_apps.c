/* zoo_apps.c: the Keras applications in the zoo, layer for layer as
 * tf.keras.applications builds them (same layers, same order, same names
 * where Keras names them), so parameter counts match Keras exactly:
 * MobileNetV2 (Sandler et al. 2018), NASNet-A Mobile and Large (Zoph et al.
 * 2018) and the v1 ResNets 50 and 152 (He et al. 2016, Keras's version: conv
 * biases on, stride on the first 1x1 conv of a block). Keras's
 * SeparableConv2D becomes a depthwise conv2d "<name>_depthwise" followed by a
 * 1x1 conv2d "<name>". */
#include "model/zoo_build.h"

#include <stdarg.h>
#include <stdio.h>

#define NM (WF_NAME_MAX)

/* A layer name into buf[NM]; too long a name fails in the builder. */
static void fmt(char *buf, const char *f, ...) __attribute__((format(printf, 2, 3)));
static void fmt(char *buf, const char *f, ...)
{
	va_list ap;
	va_start(ap, f);
	vsnprintf(buf, NM, f, ap);
	va_end(ap);
}

/* Keras's classifier: global average pool then dense "predictions"; without
 * the top, the pooled features are the output (pooling='avg'). */
static void top(wf_builder *b, const char *x, const char *gap_name, int classes,
		const wf_zoo_opts *o)
{
	x = wf_b_gap(b, gap_name, x);
	if (o->include_top)
		wf_b_dense(b, "predictions", x, classes, 1);
}

/* ---- MobileNetV2 -------------------------------------------------------- */

static int make_divisible(double v, int divisor)
{
	int nv = (int)(v + divisor / 2.0) / divisor * divisor;
	if (nv < divisor)
		nv = divisor;
	if (nv < 0.9 * v)
		nv += divisor;
	return nv;
}

#define MB_EPS 1e-3
#define MB_MOM 0.999

static const char *inverted_res_block(wf_builder *b, const char *in, int expansion, int stride,
				      double alpha, int filters, int id)
{
	char p[32], n[NM];
	const wf_bshape *s = wf_builder_shape(b, in);
	int in_c = s ? s->c : 0;
	int pw = make_divisible((int)(filters * alpha), 8);
	const char *x = in;
	if (id) {
		snprintf(p, sizeof(p), "block_%d_", id);
		fmt(n, "%sexpand", p);
		x = wf_b_conv(b, n, x, expansion * in_c, 1, 1, 1, 1, 1, 1, 1, 0);
		fmt(n, "%sexpand_BN", p);
		x = wf_b_bn(b, n, x, MB_EPS, MB_MOM);
		fmt(n, "%sexpand_relu", p);
		x = wf_b_act(b, n, "relu6", x);
	} else {
		snprintf(p, sizeof(p), "expanded_conv_");
	}
	if (stride == 2) {
		int pad[4];
		wf_b_correct_pad(b, x, 3, pad);
		fmt(n, "%spad", p);
		x = wf_b_pad(b, n, "zeropad", x, pad[0], pad[1], pad[2], pad[3]);
	}
	fmt(n, "%sdepthwise", p);
	x = wf_b_dwconv(b, n, x, 3, stride, stride == 1, 0);
	fmt(n, "%sdepthwise_BN", p);
	x = wf_b_bn(b, n, x, MB_EPS, MB_MOM);
	fmt(n, "%sdepthwise_relu", p);
	x = wf_b_act(b, n, "relu6", x);
	fmt(n, "%sproject", p);
	x = wf_b_conv(b, n, x, pw, 1, 1, 1, 1, 1, 1, 1, 0);
	fmt(n, "%sproject_BN", p);
	x = wf_b_bn(b, n, x, MB_EPS, MB_MOM);
	if (in_c == pw && stride == 1) {
		fmt(n, "%sadd", p);
		x = wf_b_add2(b, n, in, x);
	}
	return x;
}

void wf_zoo_mobilenetv2(wf_builder *b, int classes, const wf_zoo_opts *o)
{
	static const struct {
		int filters, stride, expansion, repeat;
	} stages[] = {{16, 1, 1, 1}, {24, 2, 6, 2},  {32, 2, 6, 3}, {64, 2, 6, 4},
		      {96, 1, 6, 3}, {160, 2, 6, 3}, {320, 1, 6, 1}};
	double alpha = o->alpha > 0 ? o->alpha : 1.0;
	const char *x = wf_b_input(b, "input_1");
	x = wf_b_conv(b, "Conv1", x, make_divisible(32 * alpha, 8), 3, 3, 2, 2, 1, 1, 1, 0);
	x = wf_b_bn(b, "bn_Conv1", x, MB_EPS, MB_MOM);
	x = wf_b_act(b, "Conv1_relu", "relu6", x);
	int id = 0;
	for (size_t s = 0; s < sizeof(stages) / sizeof(stages[0]); s++)
		for (int r = 0; r < stages[s].repeat; r++, id++)
			x = inverted_res_block(b, x, stages[s].expansion,
					       r == 0 ? stages[s].stride : 1, alpha,
					       stages[s].filters, id);
	int last = alpha > 1.0 ? make_divisible(1280 * alpha, 8) : 1280;
	x = wf_b_conv(b, "Conv_1", x, last, 1, 1, 1, 1, 1, 1, 0, 0);
	x = wf_b_bn(b, "Conv_1_bn", x, MB_EPS, MB_MOM);
	x = wf_b_act(b, "out_relu", "relu6", x);
	top(b, x, "global_average_pooling2d", classes, o);
}

/* ---- ResNet v1 (Keras's resnet.py) --------------------------------------- */

#define RN_EPS 1.001e-5
#define RN_MOM 0.99

static const char *conv_bn(wf_builder *b, const char *prefix, const char *x, int filters, int k,
			   int s, int same, int relu)
{
	char n[NM];
	fmt(n, "%s_conv", prefix);
	x = wf_b_conv(b, n, x, filters, k, k, s, s, 1, 1, same, 1);
	fmt(n, "%s_bn", prefix);
	x = wf_b_bn(b, n, x, RN_EPS, RN_MOM);
	if (relu) {
		fmt(n, "%s_relu", prefix);
		x = wf_b_act(b, n, "relu", x);
	}
	return x;
}

static const char *bottleneck(wf_builder *b, const char *x, int filters, int stride,
			      int shortcut_conv, const char *name)
{
	char n[NM];
	const char *sc = x;
	if (shortcut_conv) {
		fmt(n, "%s_0", name);
		sc = conv_bn(b, n, x, 4 * filters, 1, stride, 0, 0);
	}
	fmt(n, "%s_1", name);
	x = conv_bn(b, n, x, filters, 1, stride, 0, 1);
	fmt(n, "%s_2", name);
	x = conv_bn(b, n, x, filters, 3, 1, 1, 1);
	fmt(n, "%s_3", name);
	x = conv_bn(b, n, x, 4 * filters, 1, 1, 0, 0);
	fmt(n, "%s_add", name);
	x = wf_b_add2(b, n, sc, x);
	fmt(n, "%s_out", name);
	return wf_b_act(b, n, "relu", x);
}

static void resnet_v1(wf_builder *b, const int blocks[4], int classes, const wf_zoo_opts *o)
{
	char n[NM];
	const char *x = wf_b_input(b, "input_1");
	x = wf_b_pad(b, "conv1_pad", "zeropad", x, 3, 3, 3, 3);
	x = conv_bn(b, "conv1", x, 64, 7, 2, 0, 1);
	x = wf_b_pad(b, "pool1_pad", "zeropad", x, 1, 1, 1, 1);
	x = wf_b_pool(b, "pool1_pool", "maxpool", x, 3, 2, 0);
	for (int s = 0; s < 4; s++) {
		for (int i = 1; i <= blocks[s]; i++) {
			fmt(n, "conv%d_block%d", s + 2, i);
			x = bottleneck(b, x, 64 << s, i == 1 && s > 0 ? 2 : 1, i == 1, n);
		}
	}
	top(b, x, "avg_pool", classes, o);
}

void wf_zoo_resnet50(wf_builder *b, int classes, const wf_zoo_opts *o)
{
	static const int blocks[4] = {3, 4, 6, 3};
	resnet_v1(b, blocks, classes, o);
}

void wf_zoo_resnet152(wf_builder *b, int classes, const wf_zoo_opts *o)
{
	static const int blocks[4] = {3, 8, 36, 3};
	resnet_v1(b, blocks, classes, o);
}

/* ---- NASNet-A (Keras's nasnet.py) ----------------------------------------- */

#define NA_EPS 1e-3
#define NA_MOM 0.9997

static const char *na_bn(wf_builder *b, const char *name, const char *x)
{
	return wf_b_bn(b, name, x, NA_EPS, NA_MOM);
}

static const char *na_conv1x1(wf_builder *b, const char *name, const char *x, int filters)
{
	return wf_b_conv(b, name, x, filters, 1, 1, 1, 1, 1, 1, 1, 0);
}

/* SeparableConv2D(filters, k, stride, use_bias=False): depthwise + pointwise. */
static const char *na_sepconv(wf_builder *b, const char *name, const char *x, int filters, int k,
			      int s, int same)
{
	char n[NM];
	fmt(n, "%s_depthwise", name);
	x = wf_b_dwconv(b, n, x, k, s, same, 0);
	return na_conv1x1(b, name, x, filters);
}

static const char *sep_block(wf_builder *b, const char *ip, int filters, int k, int stride,
			     const char *id)
{
	char n[NM];
	fmt(n, "separable_conv_1_relu_%s", id);
	const char *x = wf_b_act(b, n, "relu", ip);
	if (stride == 2) {
		int pad[4];
		wf_b_correct_pad(b, x, k, pad);
		fmt(n, "separable_conv_1_pad_%s", id);
		x = wf_b_pad(b, n, "zeropad", x, pad[0], pad[1], pad[2], pad[3]);
	}
	fmt(n, "separable_conv_1_%s", id);
	x = na_sepconv(b, n, x, filters, k, stride, stride != 2);
	fmt(n, "separable_conv_1_bn_%s", id);
	x = na_bn(b, n, x);
	fmt(n, "separable_conv_2_relu_%s", id);
	x = wf_b_act(b, n, "relu", x);
	fmt(n, "separable_conv_2_%s", id);
	x = na_sepconv(b, n, x, filters, k, 1, 1);
	fmt(n, "separable_conv_2_bn_%s", id);
	return na_bn(b, n, x);
}

/* Make p (the previous cell's input) match ip's size and `filters` channels. */
static const char *adjust_block(wf_builder *b, const char *p, const char *ip, int filters,
				const char *id)
{
	char n[NM];
	if (!p)
		return ip;
	const wf_bshape *ps = wf_builder_shape(b, p), *is = wf_builder_shape(b, ip);
	if (!ps || !is)
		return p;
	if (ps->w != is->w) {
		fmt(n, "adjust_relu_1_%s", id);
		p = wf_b_act(b, n, "relu", p);
		fmt(n, "adjust_avg_pool_1_%s", id);
		const char *p1 = wf_b_pool(b, n, "avgpool", p, 1, 2, 0);
		fmt(n, "adjust_conv_1_%s", id);
		p1 = na_conv1x1(b, n, p1, filters / 2);
		fmt(n, "adjust_pad_%s", id);
		const char *p2 = wf_b_pad(b, n, "zeropad", p, 0, 1, 0, 1);
		fmt(n, "adjust_crop_%s", id);
		p2 = wf_b_pad(b, n, "crop", p2, 1, 0, 1, 0);
		fmt(n, "adjust_avg_pool_2_%s", id);
		p2 = wf_b_pool(b, n, "avgpool", p2, 1, 2, 0);
		fmt(n, "adjust_conv_2_%s", id);
		p2 = na_conv1x1(b, n, p2, filters / 2);
		const char *cat[2] = {p1, p2};
		fmt(n, "adjust_concat_%s", id);
		p = wf_b_concat(b, n, 2, cat);
		fmt(n, "adjust_bn_%s", id);
		p = na_bn(b, n, p);
	} else if (ps->c != filters) {
		fmt(n, "adjust_relu_projection_%s", id);
		p = wf_b_act(b, n, "relu", p);
		fmt(n, "adjust_conv_projection_%s", id);
		p = na_conv1x1(b, n, p, filters);
		fmt(n, "adjust_bn_%s", id);
		p = na_bn(b, n, p);
	}
	return p;
}

/* relu, 1x1 conv, batch norm on the cell input */
static const char *cell_stem(wf_builder *b, const char *ip, int filters, const char *kind,
			     const char *id)
{
	char n[NM];
	fmt(n, "%s_relu_1_%s", kind, id);
	const char *h = wf_b_act(b, n, "relu", ip);
	fmt(n, "%s_conv_1_%s", kind, id);
	h = na_conv1x1(b, n, h, filters);
	fmt(n, "%s_bn_1_%s", kind, id);
	return na_bn(b, n, h);
}

static const char *normal_cell(wf_builder *b, const char *ip, const char **pp, int filters,
			       const char *id)
{
	char n[NM], s[NM];
	const char *p = adjust_block(b, *pp, ip, filters, id);
	const char *h = cell_stem(b, ip, filters, "normal", id);
	fmt(s, "normal_left1_%s", id);
	const char *x1_1 = sep_block(b, h, filters, 5, 1, s);
	fmt(s, "normal_right1_%s", id);
	const char *x1_2 = sep_block(b, p, filters, 3, 1, s);
	fmt(n, "normal_add_1_%s", id);
	const char *x1 = wf_b_add2(b, n, x1_1, x1_2);
	fmt(s, "normal_left2_%s", id);
	const char *x2_1 = sep_block(b, p, filters, 5, 1, s);
	fmt(s, "normal_right2_%s", id);
	const char *x2_2 = sep_block(b, p, filters, 3, 1, s);
	fmt(n, "normal_add_2_%s", id);
	const char *x2 = wf_b_add2(b, n, x2_1, x2_2);
	fmt(n, "normal_left3_%s", id);
	const char *x3 = wf_b_pool(b, n, "avgpool", h, 3, 1, 1);
	fmt(n, "normal_add_3_%s", id);
	x3 = wf_b_add2(b, n, x3, p);
	fmt(n, "normal_left4_%s", id);
	const char *x4_1 = wf_b_pool(b, n, "avgpool", p, 3, 1, 1);
	fmt(n, "normal_right4_%s", id);
	const char *x4_2 = wf_b_pool(b, n, "avgpool", p, 3, 1, 1);
	fmt(n, "normal_add_4_%s", id);
	const char *x4 = wf_b_add2(b, n, x4_1, x4_2);
	fmt(s, "normal_left5_%s", id);
	const char *x5 = sep_block(b, h, filters, 3, 1, s);
	fmt(n, "normal_add_5_%s", id);
	x5 = wf_b_add2(b, n, x5, h);
	const char *cat[6] = {p, x1, x2, x3, x4, x5};
	fmt(n, "normal_concat_%s", id);
	*pp = ip;
	return wf_b_concat(b, n, 6, cat);
}

static const char *reduction_cell(wf_builder *b, const char *ip, const char **pp, int filters,
				  const char *id)
{
	char n[NM], s[NM];
	int pad[4];
	const char *p = adjust_block(b, *pp, ip, filters, id);
	const char *h = cell_stem(b, ip, filters, "reduction", id);
	wf_b_correct_pad(b, h, 3, pad);
	fmt(n, "reduction_pad_1_%s", id);
	const char *h3 = wf_b_pad(b, n, "zeropad", h, pad[0], pad[1], pad[2], pad[3]);
	fmt(s, "reduction_left1_%s", id);
	const char *x1_1 = sep_block(b, h, filters, 5, 2, s);
	fmt(s, "reduction_right1_%s", id);
	const char *x1_2 = sep_block(b, p, filters, 7, 2, s);
	fmt(n, "reduction_add_1_%s", id);
	const char *x1 = wf_b_add2(b, n, x1_1, x1_2);
	fmt(n, "reduction_left2_%s", id);
	const char *x2_1 = wf_b_pool(b, n, "maxpool", h3, 3, 2, 0);
	fmt(s, "reduction_right2_%s", id);
	const char *x2_2 = sep_block(b, p, filters, 7, 2, s);
	fmt(n, "reduction_add_2_%s", id);
	const char *x2 = wf_b_add2(b, n, x2_1, x2_2);
	fmt(n, "reduction_left3_%s", id);
	const char *x3_1 = wf_b_pool(b, n, "avgpool", h3, 3, 2, 0);
	fmt(s, "reduction_right3_%s", id);
	const char *x3_2 = sep_block(b, p, filters, 5, 2, s);
	fmt(n, "reduction_add3_%s", id);
	const char *x3 = wf_b_add2(b, n, x3_1, x3_2);
	fmt(n, "reduction_left4_%s", id);
	const char *x4 = wf_b_pool(b, n, "avgpool", x1, 3, 1, 1);
	fmt(n, "reduction_add_x4_%s", id);
	x4 = wf_b_add2(b, n, x2, x4);
	fmt(s, "reduction_left4_%s", id);
	const char *x5_1 = sep_block(b, x1, filters, 3, 1, s);
	fmt(n, "reduction_right5_%s", id);
	const char *x5_2 = wf_b_pool(b, n, "maxpool", h3, 3, 2, 0);
	fmt(n, "reduction_add4_%s", id);
	const char *x5 = wf_b_add2(b, n, x5_1, x5_2);
	const char *cat[4] = {x2, x3, x4, x5};
	fmt(n, "reduction_concat_%s", id);
	*pp = ip;
	return wf_b_concat(b, n, 4, cat);
}

static void nasnet(wf_builder *b, int penultimate, int nblocks, int stem_filters,
		   int skip_reduction, int classes, const wf_zoo_opts *o)
{
	const int mult = 2;
	int filters = penultimate / 24;
	char id[32];
	const char *x = wf_b_input(b, "input_1"), *p = NULL, *p0;
	x = wf_b_conv(b, "stem_conv1", x, stem_filters, 3, 3, 2, 2, 1, 1, 0, 0);
	x = na_bn(b, "stem_bn1", x);
	x = reduction_cell(b, x, &p, filters / (mult * mult), "stem_1");
	x = reduction_cell(b, x, &p, filters / mult, "stem_2");
	for (int stage = 0; stage < 3; stage++) {
		int f = filters;
		for (int k = 0; k < stage; k++)
			f *= mult;
		if (stage > 0) {
			/* the reduction cell before stages 2 and 3 */
			snprintf(id, sizeof(id), "reduce_%d", stage * nblocks);
			const char *pin = p;
			x = reduction_cell(b, x, &pin, f, id);
			p0 = pin;
			if (!skip_reduction)
				p = p0;
		}
		for (int i = 0; i < nblocks; i++) {
			snprintf(id, sizeof(id), "%d", stage == 0 ? i : stage * nblocks + i + 1);
			x = normal_cell(b, x, &p, f, id);
		}
	}
	x = wf_b_act(b, "relu_out", "relu", x);
	top(b, x, "global_average_pooling2d", classes, o);
}

void wf_zoo_nasnetmobile(wf_builder *b, int classes, const wf_zoo_opts *o)
{
	nasnet(b, 1056, 4, 32, 0, classes, o);
}

void wf_zoo_nasnetlarge(wf_builder *b, int classes, const wf_zoo_opts *o)
{
	nasnet(b, 4032, 6, 96, 1, classes, o);
}
