/* kernels.h: the op table. Every op (docs/architecture.md), forward and backward,
 * behind one table of function pointers per backend (ref, cpu, cuda), chosen
 * once at start.
 *
 * How to read this header
 * - Layout: activations NHWC [N,H,W,C]; conv kernels HWIO [KH,KW,C/groups,OC];
 *   dense kernels [IN,OUT]; all float32. Whatever leaves a backend is in this
 *   layout; a backend may keep a private layout only inside its own plans.
 * - Memory: pointers passed to ops are backend memory (wf_backend.alloc). For
 *   ref and cpu that is host memory; for cuda it is device memory.
 * - Plans: ops that need set-up take a `wf_plan **plan` slot owned by the
 *   caller (one slot per op instance, initially NULL). The backend builds its
 *   plan on first call, rebuilds it when the descriptor changes, and reuses it
 *   otherwise; free it with wf_backend_plan_free(). ref ignores plans.
 * - Gradients: parameter gradients (dw, db, dgamma, dbeta) ACCUMULATE (+=), so
 *   micro-batches sum and one memset zeroes them all. Input gradients (dx)
 *   are OVERWRITTEN (=); pass dx = NULL when no input gradient is needed.
 * - Errors: ops return 0 or a negative WF_E* code and describe the cause in
 *   be->err.
 * - Callers: call the ops through the wf_op_* wrappers of kernels/ops.h, which
 *   check every descriptor once for all backends; a backend's slots may
 *   assume a checked descriptor.
 * - Threads: one backend instance is used by one thread at a time.
 */
#ifndef WF_KERNELS_H
#define WF_KERNELS_H

#include "common/error.h"

#include <stddef.h>
#include <stdint.h>

typedef struct wf_backend wf_backend;
typedef struct wf_plan wf_plan; /* backend-private state of one op instance */

/* ---- descriptors ---------------------------------------------------- */

typedef struct wf_conv_desc {
	int n, h, w, c;	    /* input [N,H,W,C] */
	int oc, oh, ow;	    /* output [N,OH,OW,OC] */
	int kh, kw;	    /* kernel size */
	int sh, sw;	    /* strides */
	int dh, dw;	    /* dilations (1 = none) */
	int groups;	    /* c and oc divisible by groups; depthwise: groups = c */
	int pt, pb, pl, pr; /* zero padding top/bottom/left/right */
	int bias;	    /* 1 when a bias [OC] is added */
	/* Read by conv2d_forward_fused only (0 elsewhere; wf_conv_desc_init zeroes them): */
	int act;      /* 0 none, 1 relu, 2 relu6 applied last */
	int residual; /* 1: a residual [N,OH,OW,OC] is added before act; 2: the same,
		       * in place: y holds the residual on entry (r is y) */
	int infer;    /* 1: w and b never change for this plan (inference): kept reordered */
	/* bf16 backends: bits 1 x, 2 y, 4 residual are bf16 (not float). Also in
	 * conv2d_forward/backward (bits 1 and 2) on backends with
	 * WF_CAP_TRAIN_FUSE: then dx is bf16 with x, and dy with y. */
	int io_bf16;
	/* int8 (backends with WF_CAP_INT8, infer = 1, io_bf16 = 0): qx > 0 runs
	 * the conv in int8. x is quantised as round(x * qx), into u8 when x_u8
	 * (x >= 0, after a relu) else s8; each output channel's weights to s8
	 * with scale 127 / max |w| (on the first call); s32 accumulation, then y
	 * in float with bias, residual and act applied as in fp32. */
	float qx;
	int x_u8;
	/* int8 tensors between convs: io_q bit 1: the caller's x is already
	 * quantised (u8/s8 as x_u8, scale qx); bit 2: y is written quantised,
	 * round(y * qy) into u8 (y_u8) or s8 (saturating), after residual and
	 * act; bit 4: the residual is quantised (u8/s8 as r_u8, scale qr). With
	 * residual = 2 (in place) y and the residual are both quantised or both
	 * float. */
	int io_q;
	float qy;
	int y_u8;
	float qr;
	int r_u8;
	/* conv2d_backward on backends with WF_CAP_DX_ACC: 1: dx += the input
	 * gradient (float dx) instead of dx =; 0 elsewhere. The forward ignores
	 * it, and it is no part of the op's plan. */
	int dx_acc;
} wf_conv_desc;

typedef struct wf_dense_desc {
	int n;	   /* rows (batch) */
	int in;	   /* input features */
	int out;   /* output features */
	int bias;  /* 1 when a bias [OUT] is added */
	int infer; /* 1: w and b never change for this plan (inference); 0 otherwise */
} wf_dense_desc;

typedef struct wf_bn_desc {
	int n, h, w, c; /* input [N,H,W,C]; statistics are per channel over N*H*W */
	float eps;	/* added to the variance (Keras default 1e-3) */
	float momentum; /* running = momentum*running + (1-momentum)*batch (Keras 0.99) */
	/* Backends with WF_CAP_TRAIN_FUSE (0 elsewhere): */
	int relu;    /* 1: y = max(bn(x), 0); 2 (WF_CAP_BN_RELU6): y = min(max(bn(x), 0),
		      * 6); backward goes through the relu too */
	int io_bf16; /* x, y, dx and dy are bf16 (statistics, parameters fp32) */
} wf_bn_desc;

typedef enum { WF_POOL_MAX, WF_POOL_AVG } wf_pool_kind;

typedef struct wf_pool_desc {
	wf_pool_kind kind;
	int n, h, w, c;	    /* input */
	int oh, ow;	    /* output */
	int kh, kw, sh, sw; /* window and strides */
	int pt, pb, pl, pr; /* padding; max ignores it, avg excludes it from the count */
	/* Max pooling, and pooling of a 1x1 window, forward only (0 elsewhere;
	 * wf_pool_desc_init zeroes them): q8 (backends with WF_CAP_INT8): 1: x
	 * and y are u8, 2: s8, both in one scale (a max, or a window of one
	 * pixel, needs no rescaling); io_bf16 (bf16 backends): 1: x and y are
	 * bf16.
	 * A 1x1 window picks pixel (i*sh - pt, j*sw - pl) for output (i, j);
	 * on backends with fused inference plans (conv2d_forward_fused) its
	 * forward also takes negative pt/pl (a cropping in front of it) and any
	 * pb/pr, a pixel outside the input then being zero. */
	int q8;
	int io_bf16;
} wf_pool_desc;

/* Zero padding (positive) and cropping (negative) of H and W. */
typedef struct wf_pad_desc {
	int n, h, w, c;	    /* input */
	int pt, pb, pl, pr; /* rows/cols added (>0) or removed (<0) per side */
} wf_pad_desc;

typedef enum { WF_ACT_RELU, WF_ACT_RELU6 } wf_act_kind;

typedef enum { WF_OPT_SGD, WF_OPT_ADAM, WF_OPT_ADAMW } wf_opt_kind;

typedef struct wf_opt_desc {
	wf_opt_kind kind;
	float lr;	    /* learning rate for this step */
	float momentum;	    /* SGD; 0 = plain SGD (m unused, may be NULL) */
	int nesterov;	    /* SGD */
	float beta1, beta2; /* Adam/AdamW */
	float eps;	    /* Adam/AdamW */
	float weight_decay; /* SGD/Adam: L2 added to the gradient; AdamW: decoupled */
	long step;	    /* 1-based step count, for Adam bias correction */
	float grad_scale;   /* gradients are multiplied by this first (1 = as is) */
} wf_opt_desc;

/* Fill conv geometry. same != 0 computes Keras `same` padding
 * (out = ceil(in/stride), extra pad at bottom/right); otherwise `valid`
 * with explicit zero padding pad_h/pad_w on both sides. */
void wf_conv_desc_init(wf_conv_desc *d, int n, int h, int w, int c, int oc, int kh, int kw, int sh,
		       int sw, int dh, int dw, int groups, int same, int pad_h, int pad_w,
		       int bias);
/* Fill pool geometry; same as for conv (pads only with same). */
void wf_pool_desc_init(wf_pool_desc *d, wf_pool_kind kind, int n, int h, int w, int c, int kh,
		       int kw, int sh, int sw, int same);

/* Keras `same` padding for one axis: output size and pad before/after. */
void wf_same_pad(int in, int k, int stride, int dilation, int *out, int *before, int *after);

/* ---- the table ------------------------------------------------------ */

typedef struct wf_backend_ops {
	/* memory */
	void *(*alloc)(wf_backend *be, size_t bytes); /* zeroed, 64-byte aligned */
	void (*free)(wf_backend *be, void *p);
	int (*to_device)(wf_backend *be, void *dst, const void *src_host, size_t bytes);
	int (*to_host)(wf_backend *be, void *dst_host, const void *src, size_t bytes);
	int (*zero)(wf_backend *be, void *p, size_t bytes);
	int (*copy)(wf_backend *be, void *dst, const void *src, size_t bytes);
	int (*sync)(wf_backend *be); /* wait for queued work (no-op on host) */
	/* Optional (NULL: calloc/free): host memory that to_device and to_host
	 * copy fastest, for buffers that are uploaded every step (pinned on
	 * cuda); zeroed. An upload from it may still be reading when to_device
	 * returns: change it only after the next sync or to_host. */
	void *(*host_alloc)(wf_backend *be, size_t bytes);
	void (*host_free)(wf_backend *be, void *p);
	void (*plan_free)(wf_backend *be, wf_plan *plan);
	void (*destroy)(wf_backend *be); /* release be->ctx; may be NULL */
	/* Optional (NULL: fp32, or bf16 where WF_CAP_BF16, through be->bf16):
	 * switch the backend's compute precision to "fp32", "tf32", "bf16" or
	 * "fp16" for plans built from now on; WF_ENOTSUP for one it lacks. */
	int (*set_precision)(wf_backend *be, const char *name, wf_err *err);
	/* Optional (NULL: one layer after another): run fn(arg, t, nt) on nt
	 * threads at once, t = 0 .. nt-1, nt <= n (fewer where the runtime
	 * gives fewer). Ops called from fn run on the calling thread alone. */
	void (*branches)(wf_backend *be, int n, void (*fn)(void *arg, int t, int nt), void *arg);

	/* y[N,OH,OW,OC] = conv(x[N,H,W,C], w[KH,KW,C/g,OC]) + b[OC] */
	int (*conv2d_forward)(wf_backend *be, wf_plan **plan, const wf_conv_desc *d, float *y,
			      const float *x, const float *w, const float *b);
	/* Inference conv with fusion, optional (NULL where not built): y =
	 * act(conv(x, w) + b + r) with d->act, d->residual (r read only then) and
	 * d->infer (weights constant for the plan's life). */
	int (*conv2d_forward_fused)(wf_backend *be, wf_plan **plan, const wf_conv_desc *d, float *y,
				    const float *x, const float *w, const float *b, const float *r);
	/* dx = (dy conv^T w); dw += x (*) dy; db += sum dy. dx, dw, db may be NULL.
	 * When the last forward through the same plan read this x, x must still
	 * hold what it read then (as in a training step; a backend may reuse
	 * what that forward derived from x). */
	int (*conv2d_backward)(wf_backend *be, wf_plan **plan, const wf_conv_desc *d, float *dx,
			       float *dw, float *db, const float *dy, const float *x,
			       const float *w);

	/* y[N,OUT] = x[N,IN] w[IN,OUT] + b[OUT] */
	int (*dense_forward)(wf_backend *be, wf_plan **plan, const wf_dense_desc *d, float *y,
			     const float *x, const float *w, const float *b);
	int (*dense_backward)(wf_backend *be, wf_plan **plan, const wf_dense_desc *d, float *dx,
			      float *dw, float *db, const float *dy, const float *x,
			      const float *w);

	/* Batch norm. training: normalise with batch statistics, write
	 * save_mean/save_invstd [C] for backward and update run_mean/run_var
	 * (unbiased variance); inference: use run_mean/run_var (save_* unused). */
	int (*batchnorm_forward)(wf_backend *be, wf_plan **plan, const wf_bn_desc *d, int training,
				 float *y, float *save_mean, float *save_invstd, const float *x,
				 const float *gamma, const float *beta, float *run_mean,
				 float *run_var);
	/* Backward of the training-mode forward. */
	int (*batchnorm_backward)(wf_backend *be, wf_plan **plan, const wf_bn_desc *d, float *dx,
				  float *dgamma, float *dbeta, const float *dy, const float *x,
				  const float *gamma, const float *save_mean,
				  const float *save_invstd);

	/* Elementwise activation over n floats; y may alias x. Backward reads
	 * the forward OUTPUT y (so in-place forward is allowed); dx may alias dy. */
	int (*act_forward)(wf_backend *be, wf_act_kind kind, size_t n, float *y, const float *x);
	int (*act_backward)(wf_backend *be, wf_act_kind kind, size_t n, float *dx, const float *dy,
			    const float *y);

	/* y = a + b over n floats (y may alias a or b). */
	int (*add)(wf_backend *be, size_t n, float *y, const float *a, const float *b);
	/* y += x over n floats. */
	int (*accumulate)(wf_backend *be, size_t n, float *y, const float *x);
	/* y = alpha * x over n floats (y may alias x). */
	int (*scale)(wf_backend *be, size_t n, float *y, const float *x, float alpha);
	/* bf16 tensors (WF_CAP_TRAIN_FUSE; NULL elsewhere): y = a + b over n
	 * values into float y, a bf16 when bit 1 of bf16 is set, b with bit 2,
	 * then max(y, 0) when relu; y (bf16) = act(x) (x float) over n values,
	 * rounded to nearest even, act 0 none, 1 relu (max(x, 0)), 2 relu6 (NaN
	 * stays NaN). */
	int (*add_mixed)(wf_backend *be, size_t n, float *y, const void *a, const void *b, int bf16,
			 int relu);
	int (*to_bf16)(wf_backend *be, size_t n, void *y, const float *x, int act);
	/* The backward of y = relu(a + b) (WF_CAP_TRAIN_FUSE): g = dy where
	 * y > 0, else 0, over n values, into da and db as their modes say: 0
	 * not wanted, 1 written (float), 2 added into (float), 3 written as
	 * bf16 (nearest even). */
	int (*add_relu_backward)(wf_backend *be, size_t n, const float *dy, const float *y,
				 void *da, int ma, void *db, int mb);
	/* int8 tensors (WF_CAP_INT8; NULL elsewhere): y (u8) = x * scale over n
	 * values, or (x + b) * scale where b is not NULL, rounded to nearest
	 * even and saturated to [0, 255] (a relu too); NaN gives 0. */
	int (*to_u8)(wf_backend *be, size_t n, void *y, const float *x, const float *b,
		     float scale);
	/* The same of k * avg + b (b may be NULL), avg the 3x3 average of x
	 * [n, h, w, c] (stride 1, padding 1 not counted, as Keras' "same"
	 * average pool): an average pool and the add reading it, for a concat
	 * that reads their sum as u8 (WF_CAP_INT8; NULL elsewhere). */
	int (*avgpool3_to_u8)(wf_backend *be, int n, int h, int w, int c, void *y, const float *x,
			      float k, const float *b, float scale);

	/* Channel concat: xs[i] is [rows, widths[i]], y is [rows, sum widths]. */
	int (*concat_forward)(wf_backend *be, size_t rows, int k, const int *widths, float *y,
			      const float *const *xs);
	/* The same, y u8 as to_u8 makes it (WF_CAP_INT8; NULL elsewhere): a
	 * concat that only a relu read by int8 convs reads. Input i is u8 in
	 * y's scale already where bit i of u8_in is set (copied), else float. */
	int (*concat_u8)(wf_backend *be, size_t rows, int k, const int *widths, void *y,
			 const void *const *xs, unsigned u8_in, float scale);
	/* Split dy back; dxs[i] may be NULL (no gradient wanted). */
	int (*concat_backward)(wf_backend *be, size_t rows, int k, const int *widths,
			       float *const *dxs, const float *dy);

	/* Max/avg pooling; backward reads x and y (max uses them to find the argmax). */
	int (*pool_forward)(wf_backend *be, wf_plan **plan, const wf_pool_desc *d, float *y,
			    const float *x);
	int (*pool_backward)(wf_backend *be, wf_plan **plan, const wf_pool_desc *d, float *dx,
			     const float *dy, const float *x, const float *y);

	/* Global average pool: x [N,HW,C] -> y [N,C]. */
	int (*gap_forward)(wf_backend *be, int n, int hw, int c, float *y, const float *x);
	/* The same of an int8 tensor (WF_CAP_INT8; NULL elsewhere): x u8 (u8 1)
	 * or s8 in scale (x = value * scale), y float values. */
	int (*gap_q8)(wf_backend *be, int n, int hw, int c, float *y, const void *x, float scale,
		      int u8);
	int (*gap_backward)(wf_backend *be, int n, int hw, int c, float *dx, const float *dy);

	/* Zero padding / cropping of H and W (wf_pad_desc). */
	int (*pad_forward)(wf_backend *be, const wf_pad_desc *d, float *y, const float *x);
	int (*pad_backward)(wf_backend *be, const wf_pad_desc *d, float *dx, const float *dy);

	/* Inverted dropout: keep with probability 1-rate, scale kept by
	 * 1/(1-rate). mask[i] (1 kept, 0 dropped) is a pure function of
	 * (seed, i): wf_dropout_keep(seed, i, rate), identical on every backend. */
	int (*dropout_forward)(wf_backend *be, size_t n, float rate, uint64_t seed, float *y,
			       uint8_t *mask, const float *x);
	int (*dropout_backward)(wf_backend *be, size_t n, float rate, float *dx, const float *dy,
				const uint8_t *mask);

	/* Softmax over the last axis of logits [N,K] into probs [N,K]. When
	 * labels [N] is not NULL, also the per-sample cross-entropy into
	 * losses [N] (backend memory). */
	int (*softmax_xent_forward)(wf_backend *be, int n, int k, float *probs, float *losses,
				    const float *logits, const int32_t *labels);
	/* dlogits = (probs - onehot(labels)) * scale. */
	int (*softmax_xent_backward)(wf_backend *be, int n, int k, float *dlogits,
				     const float *probs, const int32_t *labels, float scale);

	/* One optimizer step over n parameters: p -= update(g); m, v are the
	 * optimizer slots (SGD momentum: m; Adam: m and v). */
	int (*optimizer_update)(wf_backend *be, const wf_opt_desc *d, size_t n, float *p,
				const float *g, float *m, float *v);
} wf_backend_ops;

/* Settings of a backend, resolved by the program (trainer/, serve/): the
 * library reads no environment. All zero = every default. */
#define WF_CUDNN_WORKSPACE_MB_DEFAULT 256
typedef struct wf_backend_opts {
	int threads;	   /* worker threads (cpu); 0 = library default */
	int device_index;  /* GPU (cuda), taken modulo the device count */
	long workspace_mb; /* cuDNN algorithm-search workspace; <= 0: the default */
	int sequential;	   /* 1: inference runs one layer after another over the whole
			    * batch (no branches at once, no tiles: A/B benchmarks) */
} wf_backend_opts;

struct wf_backend {
	const char *name; /* "ref", "cpu", "cuda" */
	const wf_backend_ops *ops;
	void *ctx;		/* backend-private */
	int threads;		/* worker threads (cpu); 0 = library default */
	wf_err err;		/* cause of the last failed op */
	unsigned caps;		/* WF_CAP_* the hardware offers this backend */
	const char *precisions; /* compute precisions it runs ("fp32 bf16"); set by init */
	int bf16;		/* conv/dense/pool compute in bf16 for plans built from now on */
	int int8;		/* inference executors created from now on run the convs a model has
				 * calibration ranges for in int8 (the rest in fp32) */
	wf_backend_opts opts;	/* as created */
	unsigned long plans_built; /* plans built or rebuilt so far (cpu): reuse is visible */
	struct wf_op_prof *prof;   /* per-op times while profiling (ops.h), else NULL */
};

#define WF_CAP_BF16	1u /* native bf16 dot products (AVX512_BF16, AMX) */
#define WF_CAP_HOST_MEM 2u /* backend memory is host memory (ref, cpu) */
#define WF_CAP_INT8	4u /* int8 convolutions (wf_conv_desc qx) */
/* training fusions: batch norm with a fused relu and bf16 tensors
 * (wf_bn_desc relu, io_bf16), plain convs reading and writing bf16 tensors
 * (wf_conv_desc io_bf16 bits 1 and 2) */
#define WF_CAP_TRAIN_FUSE 8u
/* batch norm with a fused relu6 (wf_bn_desc relu 2), with WF_CAP_TRAIN_FUSE */
#define WF_CAP_BN_RELU6 16u
/* conv2d_backward adds into a float dx (wf_conv_desc dx_acc) */
#define WF_CAP_DX_ACC 32u

/* ---- compute precision ------------------------------------------------
 * The one meaning of "precision" in weft (docs/architecture.md): the
 * arithmetic of the plans a backend builds from now on, whichever backend it
 * is and whatever runs them (training, evaluation, serving). Master weights,
 * optimizer state and sums stay fp32. Every flag, config key and environment
 * variable that takes a precision takes these names. */
#define WF_PRECISIONS "fp32, tf32, bf16, fp16, int8, auto"
/* The canonical name of s: itself for one of WF_PRECISIONS, "fp32" for
 * "float32", "bf16" for "bfloat16", "fp16" for "float16" (the names Keras
 * and PyTorch use); NULL for any other (or NULL). */
const char *wf_backend_precision_canon(const char *s);
/* Set the compute precision: "fp32", "tf32", "bf16", "fp16", "int8" or
 * "auto" (bf16 where the hardware has native bf16, else fp32), or an alias
 * of wf_backend_precision_canon. One the backend lacks falls back to fp32
 * (tf32 and fp16 are the cuda device's, bf16 needs native bf16); *used (may
 * be NULL) names what is used, so the caller can print the notice
 * (wf_backend_precision_fell_back). int8 applies to the convolutions of
 * calibrated models (weft export --quantize int8), in inference executors.
 * Fails only on an unknown name, listing WF_PRECISIONS. */
int wf_backend_set_precision(wf_backend *be, const char *want, const char **used, wf_err *err);
/* 1 when the precision used (from wf_backend_set_precision) is not the one
 * asked for (want, any spelling): the backend lacks it; "auto" never is. */
int wf_backend_precision_fell_back(const char *want, const char *used);

/* ---- choosing and owning a backend ------------------------------------ */

/* Create backend `name` ("ref", "cpu", "cuda", or "auto": cuda when usable,
 * else cpu). threads: 0 = default. Fails naming what is not built or usable. */
int wf_backend_create(wf_backend **out, const char *name, int threads, wf_err *err);
/* The same with every setting (o NULL: defaults). */
int wf_backend_create_opts(wf_backend **out, const char *name, const wf_backend_opts *o,
			   wf_err *err);
void wf_backend_free(wf_backend *be);
void wf_backend_plan_free(wf_backend *be, wf_plan **plan); /* sets *plan = NULL */
/* Names of the backends built into this binary, e.g. "ref cpu". */
const char *wf_backend_list(void);

/* The deterministic dropout mask shared by every backend. */
static inline int wf_dropout_keep(uint64_t seed, uint64_t i, float rate)
{
	uint64_t x = seed + 0x9e3779b97f4a7c15ULL * (i + 1);
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
	x ^= x >> 31;
	return (double)(x >> 11) * (1.0 / 9007199254740992.0) >= (double)rate;
}

/* Backend constructors, each in its own folder (registered in kernels.c). */
int wf_backend_ref_init(wf_backend *be, wf_err *err);
int wf_backend_cpu_init(wf_backend *be, wf_err *err);
int wf_backend_cuda_init(wf_backend *be, wf_err *err);

#endif
