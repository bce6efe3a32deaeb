/* ops.h: the wrappers every caller uses around the op table (kernels.h).
 * Each wf_op_* clears be->err, checks its descriptor and sizes once (one set
 * of messages naming the field and value, for every backend), supplies the
 * default of an optional slot, then calls the backend. Backends keep only the
 * checks that are theirs (a plan slot, a device limit). wf_backend_caps tells
 * a caller what a backend offers, so nobody tests a backend's name.
 * Contracts of the ops are those of the wf_backend_ops slots in kernels.h.
 */
#ifndef WF_OPS_H
#define WF_OPS_H

#include "kernels/kernels.h"

#include <stdio.h>

/* What a backend offers. */
typedef struct wf_backend_caps {
	int host_memory;	/* 1: backend memory is host memory (ref, cpu) */
	int bf16;		/* native bf16 compute ("auto" precision picks it) */
	int fused_conv;		/* a native conv2d_forward_fused (else composed here) */
	int int8;		/* int8 convolutions in conv2d_forward_fused (desc qx) */
	int branches;		/* threads that can run layers at once (the branches
				 * slot; be->threads), else 1 */
	int train_fuse;		/* WF_CAP_TRAIN_FUSE: bn + relu, bf16 tensors in training
				 * (and to_bf16, which inference plans use too) */
	int bn_relu6;		/* WF_CAP_BN_RELU6: a relu6 fuses into batch norm too */
	int dx_acc;		/* WF_CAP_DX_ACC: conv backward adds into dx */
	const char *precisions; /* compute precisions it runs, e.g. "fp32 bf16" */
} wf_backend_caps;

/* The capabilities of be. */
wf_backend_caps wf_backend_caps_of(const wf_backend *be);
/* 1 when be's memory is host memory (pointers usable by the CPU), else 0. */
int wf_backend_host_memory(const wf_backend *be);

/* ---- memory ------------------------------------------------------------ */

void *wf_op_alloc(wf_backend *be, size_t bytes); /* zeroed, 64-byte aligned; NULL: be->err */
void wf_op_free(wf_backend *be, void *p);	 /* p may be NULL */
/* Host memory for buffers uploaded every step (batches): page-locked where
 * the backend has such memory, else calloc'd; free with wf_op_host_free. */
void *wf_op_host_alloc(wf_backend *be, size_t bytes);
void wf_op_host_free(wf_backend *be, void *p);
int wf_op_to_device(wf_backend *be, void *dst, const void *src_host, size_t bytes);
int wf_op_to_host(wf_backend *be, void *dst_host, const void *src, size_t bytes);
int wf_op_zero(wf_backend *be, void *p, size_t bytes);
int wf_op_copy(wf_backend *be, void *dst, const void *src, size_t bytes);
int wf_op_sync(wf_backend *be); /* 0 at once on a backend without a queue */

/* Profiling (benchmarks): from start on, every op waits for the device
 * before and after its call and its time is added up per op; print writes
 * the table (calls and ms per step over `steps` steps, slowest first); stop
 * (or wf_backend_free) ends it. */
int wf_op_profile_start(wf_backend *be);
void wf_op_profile_print(wf_backend *be, FILE *f, int steps);
void wf_op_profile_stop(wf_backend *be);

/* ---- ops --------------------------------------------------------------- */

int wf_op_conv2d_forward(wf_backend *be, wf_plan **plan, const wf_conv_desc *d, float *y,
			 const float *x, const float *w, const float *b);
/* Where the backend has no fused conv: conv2d_forward, then + r, then act. */
int wf_op_conv2d_forward_fused(wf_backend *be, wf_plan **plan, const wf_conv_desc *d, float *y,
			       const float *x, const float *w, const float *b, const float *r);
int wf_op_conv2d_backward(wf_backend *be, wf_plan **plan, const wf_conv_desc *d, float *dx,
			  float *dw, float *db, const float *dy, const float *x, const float *w);
int wf_op_dense_forward(wf_backend *be, wf_plan **plan, const wf_dense_desc *d, float *y,
			const float *x, const float *w, const float *b);
int wf_op_dense_backward(wf_backend *be, wf_plan **plan, const wf_dense_desc *d, float *dx,
			 float *dw, float *db, const float *dy, const float *x, const float *w);
int wf_op_batchnorm_forward(wf_backend *be, wf_plan **plan, const wf_bn_desc *d, int training,
			    float *y, float *save_mean, float *save_invstd, const float *x,
			    const float *gamma, const float *beta, float *run_mean, float *run_var);
int wf_op_batchnorm_backward(wf_backend *be, wf_plan **plan, const wf_bn_desc *d, float *dx,
			     float *dgamma, float *dbeta, const float *dy, const float *x,
			     const float *gamma, const float *save_mean, const float *save_invstd);
int wf_op_act_forward(wf_backend *be, wf_act_kind kind, size_t n, float *y, const float *x);
int wf_op_act_backward(wf_backend *be, wf_act_kind kind, size_t n, float *dx, const float *dy,
		       const float *y);
int wf_op_add(wf_backend *be, size_t n, float *y, const float *a, const float *b);
int wf_op_add_mixed(wf_backend *be, size_t n, float *y, const void *a, const void *b, int bf16,
		    int relu);
int wf_op_to_bf16(wf_backend *be, size_t n, void *y, const float *x, int act);
int wf_op_add_relu_backward(wf_backend *be, size_t n, const float *dy, const float *y, void *da,
			    int ma, void *db, int mb);
int wf_op_to_u8(wf_backend *be, size_t n, void *y, const float *x, const float *b, float scale);
int wf_op_avgpool3_to_u8(wf_backend *be, int n, int h, int w, int c, void *y, const float *x,
			 float k, const float *b, float scale);
int wf_op_accumulate(wf_backend *be, size_t n, float *y, const float *x);
int wf_op_scale(wf_backend *be, size_t n, float *y, const float *x, float alpha);
int wf_op_concat_forward(wf_backend *be, size_t rows, int k, const int *widths, float *y,
			 const float *const *xs);
int wf_op_concat_u8(wf_backend *be, size_t rows, int k, const int *widths, void *y,
		    const void *const *xs, unsigned u8_in, float scale);
int wf_op_concat_backward(wf_backend *be, size_t rows, int k, const int *widths, float *const *dxs,
			  const float *dy);
int wf_op_pool_forward(wf_backend *be, wf_plan **plan, const wf_pool_desc *d, float *y,
		       const float *x);
int wf_op_pool_backward(wf_backend *be, wf_plan **plan, const wf_pool_desc *d, float *dx,
			const float *dy, const float *x, const float *y);
int wf_op_gap_forward(wf_backend *be, int n, int hw, int c, float *y, const float *x);
int wf_op_gap_q8(wf_backend *be, int n, int hw, int c, float *y, const void *x, float scale,
		 int u8);
int wf_op_gap_backward(wf_backend *be, int n, int hw, int c, float *dx, const float *dy);
int wf_op_pad_forward(wf_backend *be, const wf_pad_desc *d, float *y, const float *x);
int wf_op_pad_backward(wf_backend *be, const wf_pad_desc *d, float *dx, const float *dy);
int wf_op_dropout_forward(wf_backend *be, size_t n, float rate, uint64_t seed, float *y,
			  uint8_t *mask, const float *x);
int wf_op_dropout_backward(wf_backend *be, size_t n, float rate, float *dx, const float *dy,
			   const uint8_t *mask);
/* On a host-memory backend the labels are checked against [0, k) here; a
 * device backend checks them where they are (cuda: reported by the next sync). */
int wf_op_softmax_xent_forward(wf_backend *be, int n, int k, float *probs, float *losses,
			       const float *logits, const int32_t *labels);
int wf_op_softmax_xent_backward(wf_backend *be, int n, int k, float *dlogits, const float *probs,
				const int32_t *labels, float scale);
int wf_op_optimizer_update(wf_backend *be, const wf_opt_desc *d, size_t n, float *p, const float *g,
			   float *m, float *v);

#endif
