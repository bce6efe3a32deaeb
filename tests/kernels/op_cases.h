/* op_cases.h: a backend-agnostic table of kernel test cases. Each case is one
 * op with one shape (odd sizes, stride 2, dilation 2, groups and depthwise,
 * Keras `same` with asymmetric padding, pad and crop, 3-way concat, pooling
 * with `same`, batch norm in both modes, dropout, every optimizer). The runner
 * executes a case on any wf_backend and hands back its outputs and its input
 * and parameter gradients as host float arrays, so two backends (or a backend
 * and finite differences) can be compared tensor by tensor.
 *
 * Use (header-only; link wf_kernels, which brings common/util.c):
 *
 *   wf_opc_case c;
 *   for (int i = 0; wf_opc_get(i, &c) == 0; i++) {
 *           wf_opc_io a, b;
 *           wf_opc_io_init(&c, &a, 42);      // shapes and random inputs from seed 42
 *           wf_opc_io_init(&c, &b, 42);      // the very same inputs again
 *           wf_opc_run(ref, &c, &a, 1, &err); // forward, then backward if c.backward
 *           wf_opc_run(cpu, &c, &b, 1, &err);
 *           int bad = wf_opc_compare(&c, &a, &b, 1e-4, 1e-5); // out, din, dparam
 *           wf_opc_io_free(&a), wf_opc_io_free(&b);
 *   }
 *
 * Conventions of a wf_opc_io:
 * - in[]: op inputs (x; a, b; xs[0..k-1]; logits; the optimizer's gradient g).
 *   When c.backward, every in[] has a gradient din[] (len 0 when not asked for:
 *   c.no_dx asks for none for in[0], which exercises the NULL-dx path).
 * - param[]: trainable parameters (conv/dense w, b; batch-norm gamma, beta).
 *   dparam[] starts from dparam_init[] (random) and the backend ADDS the
 *   gradient, so dparam - dparam_init is the gradient and the += contract is
 *   checked by any comparison.
 * - state[]: read and updated by the forward (batch-norm running stats,
 *   optimizer p/m/v, the target of accumulate). The host copies stay as
 *   given; the updated values come back in out[] (after the op's own outputs).
 * - out[0] is the output that backward differentiates: the scalar checked by
 *   finite differences is L = sum(out[0] * dy). For softmax cross-entropy
 *   out[0] is the per-sample loss and dy is filled with the constant c.scale,
 *   which is passed as the backward's scale.
 * - din[] buffers are filled with NaN before backward, so a backend that does
 *   not overwrite them fails any comparison.
 */
#ifndef WF_TESTS_OP_CASES_H
#define WF_TESTS_OP_CASES_H

#include "common/util.h"
#include "kernels/ops.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WF_OPC_MAX 6 /* tensors per role */

typedef enum {
	WF_OPC_CONV,
	WF_OPC_DENSE,
	WF_OPC_BN,
	WF_OPC_ACT,
	WF_OPC_ADD,
	WF_OPC_ACCUMULATE,
	WF_OPC_SCALE,
	WF_OPC_CONCAT,
	WF_OPC_POOL,
	WF_OPC_GAP,
	WF_OPC_PAD,
	WF_OPC_DROPOUT,
	WF_OPC_XENT,
	WF_OPC_OPT,
} wf_opc_kind;

typedef struct wf_opc_case {
	char name[64];
	wf_opc_kind kind;
	int backward;  /* 1 when the op has a backward to check */
	int no_dx;     /* backward without a gradient for in[0] (dx = NULL) */
	int training;  /* batch norm: 1 training, 0 inference */
	float fd_step; /* finite-difference step that keeps away from kinks */
	/* descriptors (the one matching kind is used) */
	wf_conv_desc conv;
	wf_dense_desc dense;
	wf_bn_desc bn;
	wf_pool_desc pool;
	wf_pad_desc pad;
	wf_opt_desc opt;
	wf_act_kind act;
	size_t len;    /* elementwise ops: floats; concat: rows; optimizer: parameters */
	int k;	       /* concat: inputs; softmax: classes */
	int widths[4]; /* concat */
	int rows;      /* softmax: samples; gap: samples */
	int hw, c;     /* gap */
	float rate;    /* dropout */
	uint64_t seed; /* dropout */
	float scale;   /* scale op: alpha; softmax: loss scale */
} wf_opc_case;

typedef struct wf_opc_tensor {
	const char *name;
	size_t len;  /* floats; 0 = absent */
	float *host; /* malloc'd host copy */
} wf_opc_tensor;

typedef struct wf_opc_io {
	int n_in, n_param, n_state, n_out;
	wf_opc_tensor in[WF_OPC_MAX];
	wf_opc_tensor param[WF_OPC_MAX];
	wf_opc_tensor state[WF_OPC_MAX];
	int32_t *labels;  /* softmax: [rows] */
	wf_opc_tensor dy; /* upstream gradient of out[0] */
	wf_opc_tensor dparam_init[WF_OPC_MAX];
	/* filled by wf_opc_run */
	wf_opc_tensor out[WF_OPC_MAX];
	wf_opc_tensor din[WF_OPC_MAX];
	wf_opc_tensor dparam[WF_OPC_MAX];
} wf_opc_io;

/* ---- the cases ----------------------------------------------------------- */

static inline void wf_opc__conv(wf_opc_case *c, const char *name, int n, int h, int w, int ch,
				int oc, int kh, int kw, int s, int dil, int groups, int same,
				int pad, int bias)
{
	snprintf(c->name, sizeof(c->name), "%s", name);
	c->kind = WF_OPC_CONV;
	c->backward = 1;
	wf_conv_desc_init(&c->conv, n, h, w, ch, oc, kh, kw, s, s, dil, dil, groups, same, pad, pad,
			  bias);
}

static inline void wf_opc__pool(wf_opc_case *c, const char *name, wf_pool_kind kind, int n, int h,
				int w, int ch, int k, int s, int same)
{
	snprintf(c->name, sizeof(c->name), "%s", name);
	c->kind = WF_OPC_POOL;
	c->backward = 1;
	wf_pool_desc_init(&c->pool, kind, n, h, w, ch, k, k, s, s, same);
	if (kind == WF_POOL_MAX)
		c->fd_step = 4e-3f; /* inputs are >= 0.02 apart: no tie is crossed */
}

static inline void wf_opc__pad(wf_opc_case *c, const char *name, int pt, int pb, int pl, int pr)
{
	snprintf(c->name, sizeof(c->name), "%s", name);
	c->kind = WF_OPC_PAD;
	c->backward = 1;
	c->pad = (wf_pad_desc){
		.n = 2, .h = 5, .w = 6, .c = 3, .pt = pt, .pb = pb, .pl = pl, .pr = pr};
}

static inline void wf_opc__opt(wf_opc_case *c, const char *name, wf_opt_kind kind, float lr,
			       float momentum, int nesterov, float wd, long step, float gs)
{
	snprintf(c->name, sizeof(c->name), "%s", name);
	c->kind = WF_OPC_OPT;
	c->len = 37;
	c->opt = (wf_opt_desc){.kind = kind,
			       .lr = lr,
			       .momentum = momentum,
			       .nesterov = nesterov,
			       .beta1 = 0.9f,
			       .beta2 = 0.999f,
			       .eps = 1e-7f,
			       .weight_decay = wd,
			       .step = step,
			       .grad_scale = gs};
}

/* Case i into *c; returns 0, or -1 past the last case. */
static inline int wf_opc_get(int i, wf_opc_case *c)
{
	memset(c, 0, sizeof(*c));
	c->fd_step = 1e-2f;
	switch (i) {
	/* conv2d: pad, stride, dilation, groups, depthwise, same, 1x1 */
	case 0:
		wf_opc__conv(c, "conv3x3_pad1_odd_bias", 2, 7, 5, 3, 4, 3, 3, 1, 1, 1, 0, 1, 1);
		break;
	case 1:
		wf_opc__conv(c, "conv3x3_stride2_valid", 2, 9, 7, 3, 2, 3, 3, 2, 1, 1, 0, 0, 0);
		break;
	case 2:
		wf_opc__conv(c, "conv3x3_dilation2_pad2", 1, 8, 9, 2, 3, 3, 3, 1, 2, 1, 0, 2, 1);
		break;
	case 3: wf_opc__conv(c, "conv3x3_groups2", 2, 5, 6, 4, 6, 3, 3, 1, 1, 2, 0, 1, 1); break;
	case 4:
		wf_opc__conv(c, "conv3x3_depthwise_same_s2", 2, 7, 6, 5, 5, 3, 3, 2, 1, 5, 1, 0, 1);
		break;
	case 5:
		wf_opc__conv(c, "conv3x3_depthwise_mult2", 1, 6, 5, 3, 6, 3, 3, 1, 1, 3, 1, 0, 0);
		break;
	case 6:
		wf_opc__conv(c, "conv4x4_same_s2_asym", 2, 7, 8, 2, 3, 4, 4, 2, 1, 1, 1, 0, 1);
		break;
	case 7:
		wf_opc__conv(c, "conv2x2_same_s1_asym", 1, 5, 5, 3, 2, 2, 2, 1, 1, 1, 1, 0, 1);
		break;
	case 8:
		wf_opc__conv(c, "conv3x1_same_dil2", 2, 6, 5, 2, 3, 3, 1, 1, 1, 1, 1, 0, 1);
		wf_conv_desc_init(&c->conv, 2, 6, 5, 2, 3, 3, 1, 1, 1, 2, 1, 1, 1, 0, 0, 1);
		break;
	case 9:
		wf_opc__conv(c, "conv1x1_no_dx", 2, 4, 3, 5, 4, 1, 1, 1, 1, 1, 0, 0, 1);
		c->no_dx = 1;
		break;
	/* dense */
	case 10:
		snprintf(c->name, sizeof(c->name), "dense_bias");
		c->kind = WF_OPC_DENSE, c->backward = 1;
		c->dense = (wf_dense_desc){.n = 3, .in = 7, .out = 5, .bias = 1};
		break;
	case 11:
		snprintf(c->name, sizeof(c->name), "dense_nobias_no_dx");
		c->kind = WF_OPC_DENSE, c->backward = 1, c->no_dx = 1;
		c->dense = (wf_dense_desc){.n = 4, .in = 6, .out = 3, .bias = 0};
		break;
	/* batch norm */
	case 12:
		snprintf(c->name, sizeof(c->name), "batchnorm_training");
		c->kind = WF_OPC_BN, c->backward = 1, c->training = 1;
		c->bn = (wf_bn_desc){
			.n = 2, .h = 3, .w = 5, .c = 4, .eps = 1e-3f, .momentum = 0.99f};
		break;
	case 13:
		snprintf(c->name, sizeof(c->name), "batchnorm_inference");
		c->kind = WF_OPC_BN, c->training = 0;
		c->bn = (wf_bn_desc){
			.n = 2, .h = 3, .w = 3, .c = 5, .eps = 1e-3f, .momentum = 0.9f};
		break;
	/* elementwise */
	case 14:
		snprintf(c->name, sizeof(c->name), "relu");
		c->kind = WF_OPC_ACT, c->backward = 1, c->act = WF_ACT_RELU, c->len = 101;
		break;
	case 15:
		snprintf(c->name, sizeof(c->name), "relu6");
		c->kind = WF_OPC_ACT, c->backward = 1, c->act = WF_ACT_RELU6, c->len = 103;
		break;
	case 16:
		snprintf(c->name, sizeof(c->name), "add");
		c->kind = WF_OPC_ADD, c->len = 77;
		break;
	case 17:
		snprintf(c->name, sizeof(c->name), "accumulate");
		c->kind = WF_OPC_ACCUMULATE, c->len = 65;
		break;
	case 18:
		snprintf(c->name, sizeof(c->name), "scale");
		c->kind = WF_OPC_SCALE, c->len = 33, c->scale = -0.37f;
		break;
	/* concat of 3 inputs along channels */
	case 19:
		snprintf(c->name, sizeof(c->name), "concat3");
		c->kind = WF_OPC_CONCAT, c->backward = 1, c->len = 2 * 3 * 5, c->k = 3;
		c->widths[0] = 3, c->widths[1] = 1, c->widths[2] = 4;
		break;
	case 20:
		snprintf(c->name, sizeof(c->name), "concat3_no_dx0");
		c->kind = WF_OPC_CONCAT, c->backward = 1, c->no_dx = 1, c->len = 7, c->k = 3;
		c->widths[0] = 2, c->widths[1] = 5, c->widths[2] = 1;
		break;
	/* pooling */
	case 21: wf_opc__pool(c, "maxpool2x2_s2_valid", WF_POOL_MAX, 2, 6, 7, 3, 2, 2, 0); break;
	case 22: wf_opc__pool(c, "maxpool3x3_s2_same", WF_POOL_MAX, 2, 7, 6, 2, 3, 2, 1); break;
	case 23: wf_opc__pool(c, "avgpool3x3_s1_same", WF_POOL_AVG, 2, 5, 6, 3, 3, 1, 1); break;
	case 24: wf_opc__pool(c, "avgpool2x2_s2_same_odd", WF_POOL_AVG, 2, 7, 5, 2, 2, 2, 1); break;
	case 25: wf_opc__pool(c, "avgpool3x3_s2_valid", WF_POOL_AVG, 1, 7, 7, 2, 3, 2, 0); break;
	case 26:
		snprintf(c->name, sizeof(c->name), "global_avgpool");
		c->kind = WF_OPC_GAP, c->backward = 1, c->rows = 3, c->hw = 10, c->c = 4;
		break;
	/* zero padding and cropping */
	case 27: wf_opc__pad(c, "zeropad_asym", 1, 2, 0, 3); break;
	case 28: wf_opc__pad(c, "crop", -1, -2, -1, 0); break;
	case 29: wf_opc__pad(c, "pad_and_crop_mixed", 2, -1, -2, 1); break;
	/* dropout, loss */
	case 30:
		snprintf(c->name, sizeof(c->name), "dropout_0.3");
		c->kind = WF_OPC_DROPOUT, c->backward = 1, c->len = 97, c->rate = 0.3f,
		c->seed = 12345;
		break;
	case 31:
		snprintf(c->name, sizeof(c->name), "softmax_xent");
		c->kind = WF_OPC_XENT, c->backward = 1, c->rows = 4, c->k = 7, c->scale = 0.25f;
		break;
	/* optimizers */
	case 32: wf_opc__opt(c, "sgd_plain", WF_OPT_SGD, 0.1f, 0.0f, 0, 0.0f, 1, 1.0f); break;
	case 33: wf_opc__opt(c, "sgd_momentum", WF_OPT_SGD, 0.05f, 0.9f, 0, 0.0f, 3, 1.0f); break;
	case 34:
		wf_opc__opt(c, "sgd_nesterov_wd", WF_OPT_SGD, 0.05f, 0.9f, 1, 5e-4f, 3, 1.0f);
		break;
	case 35:
		wf_opc__opt(c, "sgd_wd_grad_scale", WF_OPT_SGD, 0.1f, 0.0f, 0, 1e-2f, 1, 0.5f);
		break;
	case 36: wf_opc__opt(c, "adam_wd", WF_OPT_ADAM, 1e-2f, 0, 0, 1e-2f, 5, 1.0f); break;
	case 37: wf_opc__opt(c, "adamw", WF_OPT_ADAMW, 1e-2f, 0, 0, 4e-2f, 1, 0.25f); break;
	default: return -1;
	}
	return 0;
}

/* Number of cases. */
static inline int wf_opc_count(void)
{
	wf_opc_case c;
	int n = 0;
	while (wf_opc_get(n, &c) == 0)
		n++;
	return n;
}

/* ---- inputs ----------------------------------------------------------------- */

static inline float *wf_opc__new(wf_opc_tensor *t, const char *name, size_t len)
{
	t->name = name;
	t->len = len;
	t->host = calloc(len ? len : 1, sizeof(float));
	return t->host;
}

static inline void wf_opc__normal(wf_rng *r, float *p, size_t n, double mean, double sd)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (float)(mean + sd * wf_rng_normal(r));
}

static inline void wf_opc__uniform(wf_rng *r, float *p, size_t n, double lo, double hi)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (float)(lo + (hi - lo) * wf_rng_uniform(r));
}

/* Activation inputs at least 0.1 away from the kinks at 0 and 6. */
static inline void wf_opc__away_from_kinks(wf_rng *r, float *p, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		double v = 0.1 + 7.9 * wf_rng_uniform(r);
		if (fabs(v - 6.0) < 0.2)
			v -= 0.5;
		p[i] = (float)(wf_rng_uniform(r) < 0.4 ? -v : v);
	}
}

/* A random permutation of evenly spaced values 0.02 apart: no ties. */
static inline void wf_opc__distinct(wf_rng *r, float *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (float)(0.02 * ((double)i - (double)n / 2));
	for (size_t i = n; i > 1; i--) {
		size_t j = (size_t)wf_rng_below(r, i);
		float t = p[i - 1];
		p[i - 1] = p[j];
		p[j] = t;
	}
}

/* Output elements of out[0]. */
static inline size_t wf_opc__y_len(const wf_opc_case *c)
{
	switch (c->kind) {
	case WF_OPC_CONV: return (size_t)c->conv.n * c->conv.oh * c->conv.ow * c->conv.oc;
	case WF_OPC_DENSE: return (size_t)c->dense.n * c->dense.out;
	case WF_OPC_BN: return (size_t)c->bn.n * c->bn.h * c->bn.w * c->bn.c;
	case WF_OPC_CONCAT:
		return c->len * (size_t)(c->widths[0] + c->widths[1] + c->widths[2] +
					 (c->k > 3 ? c->widths[3] : 0));
	case WF_OPC_POOL: return (size_t)c->pool.n * c->pool.oh * c->pool.ow * c->pool.c;
	case WF_OPC_GAP: return (size_t)c->rows * c->c;
	case WF_OPC_PAD:
		return (size_t)c->pad.n * (c->pad.h + c->pad.pt + c->pad.pb) *
		       (c->pad.w + c->pad.pl + c->pad.pr) * c->pad.c;
	case WF_OPC_XENT: return (size_t)c->rows;
	default: return c->len;
	}
}

/* Shapes of every tensor of case c, and deterministic random contents from seed. */
static inline void wf_opc_io_init(const wf_opc_case *c, wf_opc_io *io, uint64_t seed)
{
	memset(io, 0, sizeof(*io));
	wf_rng r;
	wf_rng_seed(&r, seed);
	size_t ylen = wf_opc__y_len(c);
	switch (c->kind) {
	case WF_OPC_CONV: {
		const wf_conv_desc *d = &c->conv;
		size_t wlen = (size_t)d->kh * d->kw * (d->c / d->groups) * d->oc;
		wf_opc__normal(
			&r,
			wf_opc__new(&io->in[io->n_in++], "x", (size_t)d->n * d->h * d->w * d->c),
			d->n * d->h * d->w * d->c, 0, 1);
		wf_opc__normal(&r, wf_opc__new(&io->param[io->n_param++], "w", wlen), wlen, 0, 0.5);
		if (d->bias)
			wf_opc__normal(&r, wf_opc__new(&io->param[io->n_param++], "b", d->oc),
				       d->oc, 0, 0.5);
		wf_opc__new(&io->out[io->n_out++], "y", ylen);
		break;
	}
	case WF_OPC_DENSE: {
		const wf_dense_desc *d = &c->dense;
		size_t xlen = (size_t)d->n * d->in, wlen = (size_t)d->in * d->out;
		wf_opc__normal(&r, wf_opc__new(&io->in[io->n_in++], "x", xlen), xlen, 0, 1);
		wf_opc__normal(&r, wf_opc__new(&io->param[io->n_param++], "w", wlen), wlen, 0, 0.5);
		if (d->bias)
			wf_opc__normal(&r, wf_opc__new(&io->param[io->n_param++], "b", d->out),
				       d->out, 0, 0.5);
		wf_opc__new(&io->out[io->n_out++], "y", ylen);
		break;
	}
	case WF_OPC_BN: {
		int C = c->bn.c;
		wf_opc__normal(&r, wf_opc__new(&io->in[io->n_in++], "x", ylen), ylen, 0.5, 2);
		wf_opc__uniform(&r, wf_opc__new(&io->param[io->n_param++], "gamma", C), C, 0.5,
				1.5);
		wf_opc__normal(&r, wf_opc__new(&io->param[io->n_param++], "beta", C), C, 0, 0.3);
		wf_opc__normal(&r, wf_opc__new(&io->state[io->n_state++], "run_mean", C), C, 0,
			       0.3);
		wf_opc__uniform(&r, wf_opc__new(&io->state[io->n_state++], "run_var", C), C, 0.5,
				1.5);
		wf_opc__new(&io->out[io->n_out++], "y", ylen);
		if (c->training) {
			wf_opc__new(&io->out[io->n_out++], "save_mean", C);
			wf_opc__new(&io->out[io->n_out++], "save_invstd", C);
			wf_opc__new(&io->out[io->n_out++], "run_mean_after", C);
			wf_opc__new(&io->out[io->n_out++], "run_var_after", C);
		}
		break;
	}
	case WF_OPC_ACT:
		wf_opc__away_from_kinks(&r, wf_opc__new(&io->in[io->n_in++], "x", c->len), c->len);
		wf_opc__new(&io->out[io->n_out++], "y", ylen);
		break;
	case WF_OPC_ADD:
		wf_opc__normal(&r, wf_opc__new(&io->in[io->n_in++], "a", c->len), c->len, 0, 1);
		wf_opc__normal(&r, wf_opc__new(&io->in[io->n_in++], "b", c->len), c->len, 0, 1);
		wf_opc__new(&io->out[io->n_out++], "y", ylen);
		break;
	case WF_OPC_ACCUMULATE:
		wf_opc__normal(&r, wf_opc__new(&io->in[io->n_in++], "x", c->len), c->len, 0, 1);
		wf_opc__normal(&r, wf_opc__new(&io->state[io->n_state++], "y", c->len), c->len, 0,
			       1);
		wf_opc__new(&io->out[io->n_out++], "y_after", ylen);
		break;
	case WF_OPC_SCALE:
		wf_opc__normal(&r, wf_opc__new(&io->in[io->n_in++], "x", c->len), c->len, 0, 1);
		wf_opc__new(&io->out[io->n_out++], "y", ylen);
		break;
	case WF_OPC_CONCAT: {
		static const char *names[4] = {"x0", "x1", "x2", "x3"};
		for (int i = 0; i < c->k; i++) {
			size_t n = c->len * (size_t)c->widths[i];
			wf_opc__normal(&r, wf_opc__new(&io->in[io->n_in++], names[i], n), n, 0, 1);
		}
		wf_opc__new(&io->out[io->n_out++], "y", ylen);
		break;
	}
	case WF_OPC_POOL: {
		const wf_pool_desc *d = &c->pool;
		size_t xlen = (size_t)d->n * d->h * d->w * d->c;
		float *x = wf_opc__new(&io->in[io->n_in++], "x", xlen);
		if (d->kind == WF_POOL_MAX)
			wf_opc__distinct(&r, x, xlen);
		else
			wf_opc__normal(&r, x, xlen, 0, 1);
		wf_opc__new(&io->out[io->n_out++], "y", ylen);
		break;
	}
	case WF_OPC_GAP: {
		size_t xlen = (size_t)c->rows * c->hw * c->c;
		wf_opc__normal(&r, wf_opc__new(&io->in[io->n_in++], "x", xlen), xlen, 0, 1);
		wf_opc__new(&io->out[io->n_out++], "y", ylen);
		break;
	}
	case WF_OPC_PAD: {
		size_t xlen = (size_t)c->pad.n * c->pad.h * c->pad.w * c->pad.c;
		wf_opc__normal(&r, wf_opc__new(&io->in[io->n_in++], "x", xlen), xlen, 0, 1);
		wf_opc__new(&io->out[io->n_out++], "y", ylen);
		break;
	}
	case WF_OPC_DROPOUT:
		wf_opc__normal(&r, wf_opc__new(&io->in[io->n_in++], "x", c->len), c->len, 0, 1);
		wf_opc__new(&io->out[io->n_out++], "y", ylen);
		wf_opc__new(&io->out[io->n_out++], "mask", c->len);
		break;
	case WF_OPC_XENT: {
		size_t zlen = (size_t)c->rows * c->k;
		wf_opc__normal(&r, wf_opc__new(&io->in[io->n_in++], "logits", zlen), zlen, 0, 2);
		io->labels = calloc((size_t)c->rows, sizeof(*io->labels));
		for (int i = 0; i < c->rows; i++)
			io->labels[i] = (int32_t)wf_rng_below(&r, (uint64_t)c->k);
		wf_opc__new(&io->out[io->n_out++], "losses", ylen);
		wf_opc__new(&io->out[io->n_out++], "probs", zlen);
		break;
	}
	case WF_OPC_OPT: {
		int has_m = c->opt.kind != WF_OPT_SGD || c->opt.momentum != 0.0f;
		int has_v = c->opt.kind != WF_OPT_SGD;
		wf_opc__normal(&r, wf_opc__new(&io->in[io->n_in++], "g", c->len), c->len, 0, 1);
		wf_opc__normal(&r, wf_opc__new(&io->state[io->n_state++], "p", c->len), c->len, 0,
			       1);
		wf_opc__new(&io->out[io->n_out++], "p_after", c->len);
		if (has_m) {
			wf_opc__normal(&r, wf_opc__new(&io->state[io->n_state++], "m", c->len),
				       c->len, 0, 0.1);
			wf_opc__new(&io->out[io->n_out++], "m_after", c->len);
		}
		if (has_v) {
			wf_opc__uniform(&r, wf_opc__new(&io->state[io->n_state++], "v", c->len),
					c->len, 0, 0.01);
			wf_opc__new(&io->out[io->n_out++], "v_after", c->len);
		}
		break;
	}
	}
	wf_opc__new(&io->dy, "dy", ylen);
	if (c->kind == WF_OPC_XENT)
		for (size_t i = 0; i < ylen; i++)
			io->dy.host[i] = c->scale;
	else
		wf_opc__normal(&r, io->dy.host, ylen, 0, 1);
	if (c->backward) {
		for (int i = 0; i < io->n_in; i++)
			wf_opc__new(&io->din[i], io->in[i].name,
				    (i == 0 && c->no_dx) ? 0 : io->in[i].len);
		for (int i = 0; i < io->n_param; i++) {
			size_t n = io->param[i].len;
			wf_opc__normal(&r, wf_opc__new(&io->dparam_init[i], io->param[i].name, n),
				       n, 0, 0.5);
			wf_opc__new(&io->dparam[i], io->param[i].name, n);
		}
	}
}

static inline void wf_opc__free_t(wf_opc_tensor *t)
{
	free(t->host);
	t->host = NULL;
	t->len = 0;
}

static inline void wf_opc_io_free(wf_opc_io *io)
{
	for (int i = 0; i < WF_OPC_MAX; i++) {
		wf_opc__free_t(&io->in[i]);
		wf_opc__free_t(&io->param[i]);
		wf_opc__free_t(&io->state[i]);
		wf_opc__free_t(&io->dparam_init[i]);
		wf_opc__free_t(&io->out[i]);
		wf_opc__free_t(&io->din[i]);
		wf_opc__free_t(&io->dparam[i]);
	}
	wf_opc__free_t(&io->dy);
	free(io->labels);
	io->labels = NULL;
}

/* ---- running a case on a backend ---------------------------------------------- */

/* Backend copies of one io's tensors. */
typedef struct wf_opc__dev {
	float *in[WF_OPC_MAX], *param[WF_OPC_MAX], *state[WF_OPC_MAX], *out[WF_OPC_MAX];
	float *din[WF_OPC_MAX], *dparam[WF_OPC_MAX], *dy;
	int32_t *labels;
	uint8_t *mask;
} wf_opc__dev;

static inline int wf_opc__upload(wf_backend *be, float **dst, const float *src, size_t len)
{
	*dst = wf_op_alloc(be, (len ? len : 1) * sizeof(float));
	if (!*dst)
		return wf_errf(&be->err, WF_ENOMEM, "op case: cannot allocate %zu floats", len);
	if (src && len)
		return wf_op_to_device(be, *dst, src, len * sizeof(float));
	return 0;
}

static inline int wf_opc__download(wf_backend *be, wf_opc_tensor *t, const float *src)
{
	if (!t->len)
		return 0;
	return wf_op_to_host(be, t->host, src, t->len * sizeof(float));
}

static inline int wf_opc__forward(wf_backend *be, const wf_opc_case *c, wf_opc__dev *v,
				  wf_plan **plan)
{
	const wf_backend_ops *o = be->ops;
	switch (c->kind) {
	case WF_OPC_CONV:
		return o->conv2d_forward(be, plan, &c->conv, v->out[0], v->in[0], v->param[0],
					 c->conv.bias ? v->param[1] : NULL);
	case WF_OPC_DENSE:
		return o->dense_forward(be, plan, &c->dense, v->out[0], v->in[0], v->param[0],
					c->dense.bias ? v->param[1] : NULL);
	case WF_OPC_BN:
		if (!c->training)
			return o->batchnorm_forward(be, plan, &c->bn, 0, v->out[0], NULL, NULL,
						    v->in[0], v->param[0], v->param[1], v->state[0],
						    v->state[1]);
		return o->batchnorm_forward(be, plan, &c->bn, 1, v->out[0], v->out[1], v->out[2],
					    v->in[0], v->param[0], v->param[1], v->state[0],
					    v->state[1]);
	case WF_OPC_ACT: return o->act_forward(be, c->act, c->len, v->out[0], v->in[0]);
	case WF_OPC_ADD: return o->add(be, c->len, v->out[0], v->in[0], v->in[1]);
	case WF_OPC_ACCUMULATE: return o->accumulate(be, c->len, v->state[0], v->in[0]);
	case WF_OPC_SCALE: return o->scale(be, c->len, v->out[0], v->in[0], c->scale);
	case WF_OPC_CONCAT:
		return o->concat_forward(be, c->len, c->k, c->widths, v->out[0],
					 (const float *const *)v->in);
	case WF_OPC_POOL: return o->pool_forward(be, plan, &c->pool, v->out[0], v->in[0]);
	case WF_OPC_GAP: return o->gap_forward(be, c->rows, c->hw, c->c, v->out[0], v->in[0]);
	case WF_OPC_PAD: return o->pad_forward(be, &c->pad, v->out[0], v->in[0]);
	case WF_OPC_DROPOUT:
		return o->dropout_forward(be, c->len, c->rate, c->seed, v->out[0], v->mask,
					  v->in[0]);
	case WF_OPC_XENT:
		return o->softmax_xent_forward(be, c->rows, c->k, v->out[1], v->out[0], v->in[0],
					       v->labels);
	case WF_OPC_OPT:
		return o->optimizer_update(
			be, &c->opt, c->len, v->state[0], v->in[0],
			c->opt.kind != WF_OPT_SGD || c->opt.momentum != 0.0f ? v->state[1] : NULL,
			c->opt.kind != WF_OPT_SGD ? v->state[2] : NULL);
	}
	return wf_errf(&be->err, WF_EINVAL, "op case: unknown kind %d", (int)c->kind);
}

static inline int wf_opc__backward(wf_backend *be, const wf_opc_case *c, const wf_opc_io *io,
				   wf_opc__dev *v, wf_plan **plan)
{
	const wf_backend_ops *o = be->ops;
	switch (c->kind) {
	case WF_OPC_CONV:
		return o->conv2d_backward(be, plan, &c->conv, v->din[0], v->dparam[0],
					  c->conv.bias ? v->dparam[1] : NULL, v->dy, v->in[0],
					  v->param[0]);
	case WF_OPC_DENSE:
		return o->dense_backward(be, plan, &c->dense, v->din[0], v->dparam[0],
					 c->dense.bias ? v->dparam[1] : NULL, v->dy, v->in[0],
					 v->param[0]);
	case WF_OPC_BN:
		return o->batchnorm_backward(be, plan, &c->bn, v->din[0], v->dparam[0],
					     v->dparam[1], v->dy, v->in[0], v->param[0], v->out[1],
					     v->out[2]);
	case WF_OPC_ACT: return o->act_backward(be, c->act, c->len, v->din[0], v->dy, v->out[0]);
	case WF_OPC_CONCAT: return o->concat_backward(be, c->len, c->k, c->widths, v->din, v->dy);
	case WF_OPC_POOL:
		return o->pool_backward(be, plan, &c->pool, v->din[0], v->dy, v->in[0], v->out[0]);
	case WF_OPC_GAP: return o->gap_backward(be, c->rows, c->hw, c->c, v->din[0], v->dy);
	case WF_OPC_PAD: return o->pad_backward(be, &c->pad, v->din[0], v->dy);
	case WF_OPC_DROPOUT:
		return o->dropout_backward(be, c->len, c->rate, v->din[0], v->dy, v->mask);
	case WF_OPC_XENT:
		return o->softmax_xent_backward(be, c->rows, c->k, v->din[0], v->out[1], v->labels,
						io->dy.host[0]);
	default: return 0; /* no backward */
	}
}

/* How many of out[] the op writes itself; the rest are state[] after the op. */
static inline int wf_opc__own_outputs(const wf_opc_case *c, const wf_opc_io *io)
{
	switch (c->kind) {
	case WF_OPC_BN: return c->training ? 3 : 1;
	case WF_OPC_ACCUMULATE:
	case WF_OPC_OPT: return 0;
	default: return io->n_out;
	}
}

/* Run case c on backend be with the inputs in io: forward, and backward too
 * when backward != 0 and the case has one. Fills io->out (and io->din,
 * io->dparam). Leaves io's inputs, params and state untouched. Returns 0 or
 * the op's error code, with the op's message in err. */
static inline int wf_opc_run(wf_backend *be, const wf_opc_case *c, wf_opc_io *io, int backward,
			     wf_err *err)
{
	wf_opc__dev v;
	wf_plan *fplan = NULL, *bplan = NULL;
	memset(&v, 0, sizeof(v));
	int rc = 0;
	for (int i = 0; i < io->n_in && !rc; i++)
		rc = wf_opc__upload(be, &v.in[i], io->in[i].host, io->in[i].len);
	for (int i = 0; i < io->n_param && !rc; i++)
		rc = wf_opc__upload(be, &v.param[i], io->param[i].host, io->param[i].len);
	for (int i = 0; i < io->n_state && !rc; i++)
		rc = wf_opc__upload(be, &v.state[i], io->state[i].host, io->state[i].len);
	for (int i = 0; i < io->n_out && !rc; i++)
		rc = wf_opc__upload(be, &v.out[i], NULL, io->out[i].len);
	if (!rc && io->labels) {
		size_t bytes = (size_t)c->rows * sizeof(int32_t);
		v.labels = wf_op_alloc(be, bytes);
		rc = v.labels ? wf_op_to_device(be, v.labels, io->labels, bytes)
			      : wf_errf(&be->err, WF_ENOMEM, "op case: cannot allocate labels");
	}
	if (!rc && c->kind == WF_OPC_DROPOUT) {
		v.mask = wf_op_alloc(be, c->len);
		if (!v.mask)
			rc = wf_errf(&be->err, WF_ENOMEM, "op case: cannot allocate mask");
	}
	if (rc)
		goto fail;

	rc = wf_opc__forward(be, c, &v, &fplan);
	if (!rc)
		rc = wf_op_sync(be);
	if (rc)
		goto fail;
	if (c->kind == WF_OPC_DROPOUT) {
		uint8_t *mask = malloc(c->len);
		rc = mask ? wf_op_to_host(be, mask, v.mask, c->len) : WF_ENOMEM;
		for (size_t i = 0; !rc && i < c->len; i++)
			io->out[1].host[i] = mask[i];
		free(mask);
		rc = rc ? rc : wf_opc__download(be, &io->out[0], v.out[0]);
	} else {
		/* the op's own outputs, then the updated state */
		int own = wf_opc__own_outputs(c, io);
		for (int i = 0; i < own && !rc; i++)
			rc = wf_opc__download(be, &io->out[i], v.out[i]);
		for (int i = own; i < io->n_out && !rc; i++)
			rc = wf_opc__download(be, &io->out[i], v.state[i - own]);
	}
	if (rc)
		goto fail;

	if (backward && c->backward) {
		rc = wf_opc__upload(be, &v.dy, io->dy.host, io->dy.len);
		for (int i = 0; i < io->n_in && !rc; i++) {
			if (!io->din[i].len)
				continue; /* NULL: no gradient wanted */
			for (size_t j = 0; j < io->din[i].len; j++)
				io->din[i].host[j] = NAN; /* must be overwritten */
			rc = wf_opc__upload(be, &v.din[i], io->din[i].host, io->din[i].len);
		}
		for (int i = 0; i < io->n_param && !rc; i++)
			rc = wf_opc__upload(be, &v.dparam[i], io->dparam_init[i].host,
					    io->dparam_init[i].len);
		if (!rc)
			rc = wf_opc__backward(be, c, io, &v, &bplan);
		if (!rc)
			rc = wf_op_sync(be);
		for (int i = 0; i < io->n_in && !rc; i++)
			rc = wf_opc__download(be, &io->din[i], v.din[i]);
		for (int i = 0; i < io->n_param && !rc; i++)
			rc = wf_opc__download(be, &io->dparam[i], v.dparam[i]);
		if (rc)
			goto fail;
	}
	goto cleanup;

fail:
	wf_errf(err, rc, "%s on %s: %s", c->name, be->name, be->err.msg);
cleanup:
	wf_backend_plan_free(be, &fplan);
	wf_backend_plan_free(be, &bplan);
	for (int i = 0; i < WF_OPC_MAX; i++) {
		wf_op_free(be, v.in[i]);
		wf_op_free(be, v.param[i]);
		wf_op_free(be, v.state[i]);
		wf_op_free(be, v.out[i]);
		wf_op_free(be, v.din[i]);
		wf_op_free(be, v.dparam[i]);
	}
	wf_op_free(be, v.dy);
	wf_op_free(be, v.labels);
	wf_op_free(be, v.mask);
	return rc;
}

/* Loss that backward differentiates: sum(out[0] * dy), in double. */
static inline double wf_opc_loss(const wf_opc_io *io)
{
	double s = 0.0;
	for (size_t i = 0; i < io->out[0].len; i++)
		s += (double)io->out[0].host[i] * io->dy.host[i];
	return s;
}

/* Compare one tensor of two runs: |a - b| <= atol + rtol * max(|a|, |b|).
 * Prints the first few mismatches (case and tensor named) to stderr and
 * returns how many elements differ (a length mismatch counts as one). */
static inline int wf_opc_compare_tensor(const char *cname, const char *what, const wf_opc_tensor *a,
					const wf_opc_tensor *b, double rtol, double atol)
{
	if (a->len != b->len) {
		fprintf(stderr, "  %s %s: length %zu vs %zu\n", cname, what, a->len, b->len);
		return 1;
	}
	int bad = 0;
	for (size_t i = 0; i < a->len; i++) {
		double x = a->host[i], y = b->host[i];
		if (fabs(x - y) <= atol + rtol * fmax(fabs(x), fabs(y)))
			continue;
		if (bad < 5)
			fprintf(stderr, "  %s %s %s[%zu]: %.7g vs %.7g\n", cname, what,
				a->name ? a->name : "?", i, x, y);
		bad++;
	}
	return bad;
}

/* Compare everything two runs of the same case produced (outputs, input
 * gradients, parameter gradients); returns the number of differing elements. */
static inline int wf_opc_compare(const wf_opc_case *c, const wf_opc_io *a, const wf_opc_io *b,
				 double rtol, double atol)
{
	int bad = 0;
	for (int i = 0; i < a->n_out; i++)
		bad += wf_opc_compare_tensor(c->name, "out", &a->out[i], &b->out[i], rtol, atol);
	for (int i = 0; i < a->n_in; i++)
		bad += wf_opc_compare_tensor(c->name, "d", &a->din[i], &b->din[i], rtol, atol);
	for (int i = 0; i < a->n_param; i++)
		bad += wf_opc_compare_tensor(c->name, "d", &a->dparam[i], &b->dparam[i], rtol,
					     atol);
	return bad;
}

#endif
