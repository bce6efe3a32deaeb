/* cuda_priv.h: private to the CUDA backend (kernels/cuda/ only). The
 * backend context, one check function per vendor status type, and the C
 * launchers of our own kernels in cuda_kernels.cu. Every launcher queues
 * work on the given stream and returns cudaGetLastError() of its launch. */
#ifndef WF_CUDA_PRIV_H
#define WF_CUDA_PRIV_H

#include "kernels/cuda/cuda.h"
#include "kernels/kernels.h"

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Element type of a reduced-precision copy (casts, transposes). */
typedef enum { WFK_F32 = 0, WFK_BF16 = 1, WFK_F16 = 2 } wfk_type;

/* ---- elementwise ---- */
cudaError_t wfk_act_forward(cudaStream_t s, int relu6, size_t n, float *y, const float *x);
cudaError_t wfk_act_backward(cudaStream_t s, int relu6, size_t n, float *dx, const float *dy,
			     const float *y);
cudaError_t wfk_add(cudaStream_t s, size_t n, float *y, const float *a, const float *b);
cudaError_t wfk_accumulate(cudaStream_t s, size_t n, float *y, const float *x);
cudaError_t wfk_scale(cudaStream_t s, size_t n, float *y, const float *x, float alpha);
cudaError_t wfk_fill(cudaStream_t s, size_t n, float *y, float v);
/* y[rows,cols] += b[cols], y of type t (float or bf16). */
cudaError_t wfk_bias_add(cudaStream_t s, size_t rows, int cols, void *y, wfk_type t,
			 const float *b);

/* ---- casts and layout ---- */
/* dst[i] = (type)src[i] over n elements. */
cudaError_t wfk_cast(cudaStream_t s, size_t n, void *dst, wfk_type t, const float *src);
/* dst[r,c] = src[r,c] (of type t) + b[c] (b may be NULL); dst, src [rows,cols]. */
cudaError_t wfk_uncast_bias(cudaStream_t s, size_t rows, int cols, float *dst, const void *src,
			    wfk_type t, const float *b);
/* dst[i] += src[i] of type t (n elements). */
cudaError_t wfk_uncast_acc(cudaStream_t s, size_t n, float *dst, const void *src, wfk_type t);
/* dst[c,r] = (type)src[r,c]: src [rows,cols] float, dst [cols,rows] of type t. */
cudaError_t wfk_transpose(cudaStream_t s, size_t rows, size_t cols, void *dst, wfk_type t,
			  const float *src);
/* dst[r,c] += src[c,r]: src [cols,rows] of type t, dst [rows,cols] float. */
cudaError_t wfk_transpose_acc(cudaStream_t s, size_t rows, size_t cols, float *dst, const void *src,
			      wfk_type t);

/* ---- data movement ops ---- */
/* y[r, off + j] = x[r, j] for j < w; y has total columns (forward), and the
 * reverse copy x[r, j] = y[r, off + j] (backward). */
cudaError_t wfk_concat_in(cudaStream_t s, size_t rows, int w, size_t total, size_t off, float *y,
			  const float *x);
cudaError_t wfk_concat_out(cudaStream_t s, size_t rows, int w, size_t total, size_t off, float *dx,
			   const float *dy);
cudaError_t wfk_pool_forward(cudaStream_t s, const wf_pool_desc *d, float *y, const float *x);
cudaError_t wfk_pool_backward(cudaStream_t s, const wf_pool_desc *d, float *dx, const float *dy,
			      const float *x);
/* Max pooling's backward through arg [N,OH,OW,C] (scratch: each output's
 * maximum as its offset in the window, kh * kw <= 256). */
cudaError_t wfk_pool_max_backward(cudaStream_t s, const wf_pool_desc *d, float *dx, const float *dy,
				  const float *x, uint8_t *arg);
cudaError_t wfk_gap_forward(cudaStream_t s, int n, int hw, int c, float *y, const float *x);
cudaError_t wfk_gap_backward(cudaStream_t s, int n, int hw, int c, float *dx, const float *dy);
cudaError_t wfk_pad_forward(cudaStream_t s, const wf_pad_desc *d, float *y, const float *x);
/* dx = (acc: dx +) the crop of dy. */
cudaError_t wfk_pad_backward(cudaStream_t s, const wf_pad_desc *d, float *dx, const float *dy,
			     int acc);
cudaError_t wfk_dropout_forward(cudaStream_t s, size_t n, float rate, uint64_t seed, float *y,
				uint8_t *mask, const float *x);
cudaError_t wfk_dropout_backward(cudaStream_t s, size_t n, float rate, float *dx, const float *dy,
				 const uint8_t *mask);

/* ---- batch norm over NHWC: rows = N*H*W, C channels ---- */
/* Tensors are float, or bf16 where bf16 is set (x, y, dy, dx alike). */
/* acc[0,C) += sum a, acc[C,2C) += sum b per channel (acc zeroed first):
 * statistics (dy NULL) a = x - x[0,c], b = a*a; backward a = g, b = g * (x -
 * center[c]), g = dy, or 0 where the forward's relu (relu 1) or relu6
 * (relu 2) did not pass it (fcoef: the forward's coef; NULL without one). */
cudaError_t wfk_bn_reduce(cudaStream_t s, size_t rows, int C, double *acc, const void *x,
			  const void *dy, const float *center, const float *fcoef, int relu,
			  int bf16);
/* The batch statistics from acc (mean, biased variance; save_* and run_*
 * may be NULL, run_var is updated with the unbiased one) and coef[3C] =
 * scale | mean | beta for wfk_bn_apply. */
cudaError_t wfk_bn_stats(cudaStream_t s, size_t rows, int C, float eps, float momentum,
			 const double *acc, const void *x, int bf16, const float *gamma,
			 const float *beta, float *save_mean, float *save_invstd, float *run_mean,
			 float *run_var, float *coef);
/* coef[3C] from the running statistics (inference). */
cudaError_t wfk_bn_infer_coef(cudaStream_t s, int C, float eps, const float *gamma,
			      const float *beta, const float *run_mean, const float *run_var,
			      float *coef);
/* y = (x - mean) * scale + beta, then relu (1) or relu6 (2) (y may be x). */
cudaError_t wfk_bn_apply(cudaStream_t s, size_t rows, int C, void *y, const void *x,
			 const float *coef, int relu, int bf16);
/* From the backward acc: dgamma/dbeta accumulated (each may be NULL) and
 * coef[4C] for wfk_bn_dx. */
cudaError_t wfk_bn_backward_coef(cudaStream_t s, size_t rows, int C, const double *acc,
				 const float *gamma, const float *save_mean,
				 const float *save_invstd, float *dgamma, float *dbeta,
				 float *coef);
/* dx from dy (masked as in wfk_bn_reduce by fcoef) and x. */
cudaError_t wfk_bn_dx(cudaStream_t s, size_t rows, int C, void *dx, const void *dy, const void *x,
		      const float *coef, const float *fcoef, int relu, int bf16);

/* ---- depthwise 3x3 convolutions (groups = c = oc, kh = kw = 3): our own
 * kernels; x, y, dx, dy bf16 or float as d->io_bf16 says, dx added into with
 * d->dx_acc; acc is scratch of 9 * c doubles ---- */
cudaError_t wfk_dw_forward(cudaStream_t s, const wf_conv_desc *d, void *y, const void *x,
			   const float *w, const float *b);
cudaError_t wfk_dw_backward_data(cudaStream_t s, const wf_conv_desc *d, void *dx, const void *dy,
				 const float *w);
cudaError_t wfk_dw_backward_filter(cudaStream_t s, const wf_conv_desc *d, float *dw, double *acc,
				   const void *dy, const void *x);

/* ---- training fusions (WF_CAP_TRAIN_FUSE), with the semantics of the ops
 * add_mixed, to_bf16 and add_relu_backward (kernels.h) ---- */
cudaError_t wfk_add_mixed(cudaStream_t s, size_t n, float *y, const void *a, const void *b,
			  int bf16, int relu);
cudaError_t wfk_to_bf16(cudaStream_t s, size_t n, void *y, const float *x, int act);
cudaError_t wfk_add_relu_backward(cudaStream_t s, size_t n, const float *dy, const float *y,
				  void *da, int ma, void *db, int mb);
/* wfk_pad_forward/backward of 2-byte (bf16) tensors. */
cudaError_t wfk_pad16_forward(cudaStream_t s, const wf_pad_desc *d, void *y, const void *x);
cudaError_t wfk_pad16_backward(cudaStream_t s, const wf_pad_desc *d, void *dx, const void *dy);

/* ---- loss and optimizer ---- */
/* bad[0] = first row + 1 with a label outside [0,k), bad[1] = that label. */
cudaError_t wfk_softmax_xent_forward(cudaStream_t s, int n, int k, float *probs, float *losses,
				     const float *logits, const int32_t *labels, int *bad);
cudaError_t wfk_softmax_xent_backward(cudaStream_t s, int n, int k, float *dlogits,
				      const float *probs, const int32_t *labels, float scale,
				      int *bad);
/* One step of d->kind over n parameters; c1, c2 are Adam's bias corrections. */
cudaError_t wfk_optimizer(cudaStream_t s, const wf_opt_desc *d, double c1, double c2, size_t n,
			  float *p, const float *g, float *m, float *v);

#ifdef __cplusplus
}
#endif

/* ---- host side: the context and the check functions (C only) ---- */
#ifndef __CUDACC__
#include <cublas_v2.h>
#include <cudnn.h>

typedef struct wf_cuda_ctx {
	int device;	       /* CUDA ordinal in use */
	wf_precision prec;     /* conv/dense compute precision for new plans */
	cudaStream_t stream;   /* every op of this backend runs on it, in order */
	cublasHandle_t cublas; /* bound to stream */
	cudnnHandle_t cudnn;   /* bound to stream */
	void *ws;	       /* cuDNN workspace shared by all plans (ops run in order) */
	size_t ws_bytes;
	void *scratch; /* casts, transposed weights, unwanted outputs; shared */
	size_t scratch_bytes;
	float *ones;  /* [ones_len] of 1.0f: bias gradients as a gemv */
	void *ones16; /* the same in bf16: bias gradients of bf16 tensors */
	size_t ones_len;
	int *bad;      /* device [2]: bad label (row + 1, label), 0 = none */
	int *bad_host; /* pinned mirror, copied after every loss op */
	char describe[512];
} wf_cuda_ctx;

static inline wf_cuda_ctx *wf_cuda_ctx_of(wf_backend *be)
{
	return (wf_cuda_ctx *)be->ctx;
}

/* Each returns 0 when status is success, else records "<call> failed at
 * file:line: <library message>" in *err and returns WF_EINTERNAL
 * (WF_ENOMEM for out-of-memory statuses). */
int wf_cuda_check(wf_err *err, cudaError_t status, const char *call, const char *file, int line);
int wf_cublas_check(wf_err *err, cublasStatus_t status, const char *call, const char *file,
		    int line);
int wf_cudnn_check(wf_err *err, cudnnStatus_t status, const char *call, const char *file, int line);

#define WF_CU(be, call)	    wf_cuda_check(&(be)->err, (call), #call, __FILE__, __LINE__)
#define WF_CUBLAS(be, call) wf_cublas_check(&(be)->err, (call), #call, __FILE__, __LINE__)
#define WF_CUDNN(be, call)  wf_cudnn_check(&(be)->err, (call), #call, __FILE__, __LINE__)

/* Grow the shared workspace / scratch to at least bytes. Only called while
 * building a plan (never in a step): growing frees the old buffer, which
 * waits for the device. */
int wf_cuda_reserve_ws(wf_backend *be, size_t bytes);
int wf_cuda_reserve_scratch(wf_backend *be, size_t bytes);
int wf_cuda_reserve_ones(wf_backend *be, size_t len);

/* cudnn/cublas ops (cuda_dnn.c), with the signatures of wf_backend_ops. */
int wf_cuda_conv2d_forward(wf_backend *be, wf_plan **plan, const wf_conv_desc *d, float *y,
			   const float *x, const float *w, const float *b);
int wf_cuda_conv2d_backward(wf_backend *be, wf_plan **plan, const wf_conv_desc *d, float *dx,
			    float *dw, float *db, const float *dy, const float *x, const float *w);
int wf_cuda_dense_forward(wf_backend *be, wf_plan **plan, const wf_dense_desc *d, float *y,
			  const float *x, const float *w, const float *b);
int wf_cuda_dense_backward(wf_backend *be, wf_plan **plan, const wf_dense_desc *d, float *dx,
			   float *dw, float *db, const float *dy, const float *x, const float *w);
int wf_cuda_batchnorm_forward(wf_backend *be, wf_plan **plan, const wf_bn_desc *d, int training,
			      float *y, float *save_mean, float *save_invstd, const float *x,
			      const float *gamma, const float *beta, float *run_mean,
			      float *run_var);
int wf_cuda_batchnorm_backward(wf_backend *be, wf_plan **plan, const wf_bn_desc *d, float *dx,
			       float *dgamma, float *dbeta, const float *dy, const float *x,
			       const float *gamma, const float *save_mean,
			       const float *save_invstd);
/* A plan that only owns a device buffer of bytes (our kernels' scratch that
 * must not move while queued work uses it), rebuilt when desc changes. */
int wf_cuda_plan_buffer(wf_backend *be, wf_plan **slot, const void *desc, size_t dsize,
			size_t bytes, void **buf);
void wf_cuda_plan_free(wf_backend *be, wf_plan *plan);
#endif

#endif
