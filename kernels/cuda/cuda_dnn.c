/* cuda_dnn.c: the CUDA backend's ops that keep plans: convolution (cuDNN,
 * NHWC activations, KRSC filters; depthwise 3x3 on our own kernels), dense
 * (cuBLAS) and batch norm (our kernels).
 *
 * Plans: one per op instance, built on first use and rebuilt when the
 * descriptor or the precision changes. A plan holds cuDNN descriptors and the
 * algorithms chosen by benchmarking once (cudnnFind*AlgorithmEx); buffers
 * that live only during one op (transposed and cast weights, cast
 * activations, explicitly padded inputs, unwanted outputs) come from the
 * backend's shared scratch, which plans size when they are built, so a step
 * allocates nothing.
 *
 * Layouts: weights arrive HWIO [KH,KW,C/g,OC] = [R,OC] with R = KH*KW*C/g;
 * cuDNN's NHWC filter is KRSC [OC,KH,KW,C/g] = [OC,R], so each call
 * transposes the weights into scratch, and dw comes back [OC,R] and is
 * transposed-and-added into the caller's HWIO gradient (+=). cuDNN pads
 * symmetrically; Keras `same` padding that is not (extra bottom/right row)
 * is applied by padding the input explicitly into scratch first. */
#include "kernels/cuda/cuda_priv.h"

#include <library_types.h>
#include <stdlib.h>
#include <string.h>

enum { PLAN_CONV = 1, PLAN_DENSE, PLAN_BN, PLAN_BUF };
enum { DIR_FWD, DIR_BWD_DATA, DIR_BWD_FILTER };

struct wf_plan {
	int kind;
	wf_precision prec;
	union {
		wf_conv_desc conv;
		wf_dense_desc dense;
		wf_bn_desc bn;
		wf_pool_desc pool;
	} d;
	/* conv */
	cudnnTensorDescriptor_t xd, yd;
	cudnnFilterDescriptor_t wd;
	cudnnConvolutionDescriptor_t cd;
	wfk_type et;			/* element type cuDNN/cuBLAS compute from */
	wf_pad_desc extra;		/* explicit padding making cuDNN's symmetric */
	int padded;			/* extra is not all zero */
	size_t xlen, xplen, ylen, wlen; /* elements: input, padded input, output, weights */
	int algo_ready[3];
	cudnnConvolutionFwdAlgo_t fwd;
	cudnnConvolutionBwdDataAlgo_t bwd_data;
	cudnnConvolutionBwdFilterAlgo_t bwd_filter;
	cudnnMathType_t math[3];
	size_t ws[3];	/* bytes of workspace each chosen algorithm needs */
	int own_dw;	/* a depthwise 3x3 conv: our kernels (wfk_dw_*), not cuDNN */
	double *dw_acc; /* their weight-gradient sums [9 * c] */
	void *buf;	/* PLAN_BUF */
	/* bn */
	float *consts;	/* coefficients, then sums (bn_plan) */
	int bn_trained; /* a training forward ran: its coefficients are there */
};

static size_t elem_size(wfk_type t)
{
	return t == WFK_F32 ? 4 : 2;
}

static size_t align256(size_t b)
{
	return (b + 255) / 256 * 256;
}

static wfk_type prec_type(wf_precision p)
{
	return p == WF_PREC_BF16 ? WFK_BF16 : p == WF_PREC_FP16 ? WFK_F16 : WFK_F32;
}

static cudnnDataType_t cudnn_type(wfk_type t)
{
	return t == WFK_BF16  ? CUDNN_DATA_BFLOAT16
	       : t == WFK_F16 ? CUDNN_DATA_HALF
			      : CUDNN_DATA_FLOAT;
}

static cudaDataType_t cublas_type(wfk_type t)
{
	return t == WFK_BF16 ? CUDA_R_16BF : t == WFK_F16 ? CUDA_R_16F : CUDA_R_32F;
}

void wf_cuda_plan_free(wf_backend *be, wf_plan *p)
{
	if (!p)
		return;
	if (p->xd)
		cudnnDestroyTensorDescriptor(p->xd);
	if (p->yd)
		cudnnDestroyTensorDescriptor(p->yd);
	if (p->wd)
		cudnnDestroyFilterDescriptor(p->wd);
	if (p->cd)
		cudnnDestroyConvolutionDescriptor(p->cd);
	if (p->consts || p->buf || p->dw_acc) {
		cudaStreamSynchronize(wf_cuda_ctx_of(be)->stream);
		cudaFree(p->consts);
		cudaFree(p->buf);
		cudaFree(p->dw_acc);
	}
	free(p);
}

/* Free *slot and clear it (this library does not link kernels.c). */
static void plan_drop(wf_backend *be, wf_plan **slot)
{
	wf_cuda_plan_free(be, *slot);
	*slot = NULL;
}

/* The plan in *slot when it was built for (kind, desc, precision); else
 * frees it and returns a fresh zeroed one in *slot (*fresh = 1). */
static int plan_get(wf_backend *be, wf_plan **slot, int kind, const void *desc, size_t dsize,
		    wf_plan **out, int *fresh)
{
	wf_precision prec = wf_cuda_ctx_of(be)->prec;
	wf_plan *p = *slot;
	*fresh = 0;
	*out = NULL;
	if (p && p->kind == kind && p->prec == prec && memcmp(&p->d, desc, dsize) == 0) {
		*out = p;
		return 0;
	}
	plan_drop(be, slot);
	p = calloc(1, sizeof(*p));
	if (!p)
		return wf_errf(&be->err, WF_ENOMEM, "cuda: out of memory for a plan");
	p->kind = kind;
	p->prec = prec;
	memcpy(&p->d, desc, dsize);
	*slot = p;
	*out = p;
	*fresh = 1;
	return 0;
}

int wf_cuda_plan_buffer(wf_backend *be, wf_plan **slot, const void *desc, size_t dsize,
			size_t bytes, void **buf)
{
	wf_plan *p = NULL;
	int fresh = 0, rc = 0;
	if (dsize > sizeof(p->d))
		return wf_errf(&be->err, WF_EINTERNAL, "cuda: a plan descriptor of %zu bytes",
			       dsize);
	rc = plan_get(be, slot, PLAN_BUF, desc, dsize, &p, &fresh);
	if (!rc && fresh && (rc = WF_CU(be, cudaMalloc(&p->buf, bytes ? bytes : 1))))
		plan_drop(be, slot);
	*buf = rc ? NULL : p->buf;
	return rc;
}

/* ---- convolution ------------------------------------------------------------------ */

/* Scratch of one conv call (bytes offsets from ctx->scratch). */
typedef struct conv_bufs {
	float *xp, *dxp;		/* padded input / its gradient (float) */
	void *xh, *dxh, *yh, *wt, *dwt; /* cast input, its gradient, output/dy, KRSC weights, dw */
} conv_bufs;

static size_t conv_layout(const wf_plan *p, char *base, conv_bufs *b)
{
	size_t es = elem_size(p->et), off = 0;
	float *fp[2];
	void *hp[5];
	size_t fsz = p->padded ? p->xplen * sizeof(float) : 0;
	size_t hsz[5] = {p->et == WFK_F32 ? 0 : p->xplen * es, p->et == WFK_F32 ? 0 : p->xplen * es,
			 p->et == WFK_F32 ? 0 : p->ylen * es, p->wlen * es, p->wlen * es};
	for (int i = 0; i < 2; i++) {
		fp[i] = base ? (float *)(base + off) : NULL;
		off += align256(fsz);
	}
	for (int i = 0; i < 5; i++) {
		hp[i] = base ? base + off : NULL;
		off += align256(hsz[i]);
	}
	if (b) {
		b->xp = fp[0], b->dxp = fp[1];
		b->xh = hp[0], b->dxh = hp[1], b->yh = hp[2], b->wt = hp[3], b->dwt = hp[4];
	}
	return off;
}

static int conv_build(wf_backend *be, wf_plan *p)
{
	const wf_conv_desc *d = &p->d.conv;
	p->et = prec_type(p->prec);
	int sym_h = d->pt < d->pb ? d->pt : d->pb, sym_w = d->pl < d->pr ? d->pl : d->pr;
	p->extra = (wf_pad_desc){.n = d->n,
				 .h = d->h,
				 .w = d->w,
				 .c = d->c,
				 .pt = d->pt - sym_h,
				 .pb = d->pb - sym_h,
				 .pl = d->pl - sym_w,
				 .pr = d->pr - sym_w};
	p->padded = p->extra.pt || p->extra.pb || p->extra.pl || p->extra.pr;
	int hp = d->h + p->extra.pt + p->extra.pb, wp = d->w + p->extra.pl + p->extra.pr;
	p->xlen = (size_t)d->n * d->h * d->w * d->c;
	p->xplen = (size_t)d->n * hp * wp * d->c;
	p->ylen = (size_t)d->n * d->oh * d->ow * d->oc;
	p->wlen = (size_t)d->kh * d->kw * (d->c / d->groups) * d->oc;
	cudnnDataType_t dt = cudnn_type(p->et);
	int rc;
	if ((rc = WF_CUDNN(be, cudnnCreateTensorDescriptor(&p->xd))) ||
	    (rc = WF_CUDNN(be, cudnnCreateTensorDescriptor(&p->yd))) ||
	    (rc = WF_CUDNN(be, cudnnCreateFilterDescriptor(&p->wd))) ||
	    (rc = WF_CUDNN(be, cudnnCreateConvolutionDescriptor(&p->cd))) ||
	    (rc = WF_CUDNN(be, cudnnSetTensor4dDescriptor(p->xd, CUDNN_TENSOR_NHWC, dt, d->n, d->c,
							  hp, wp))) ||
	    (rc = WF_CUDNN(be, cudnnSetTensor4dDescriptor(p->yd, CUDNN_TENSOR_NHWC, dt, d->n, d->oc,
							  d->oh, d->ow))) ||
	    (rc = WF_CUDNN(be, cudnnSetFilter4dDescriptor(p->wd, dt, CUDNN_TENSOR_NHWC, d->oc,
							  d->c / d->groups, d->kh, d->kw))) ||
	    (rc = WF_CUDNN(be, cudnnSetConvolution2dDescriptor(
				       p->cd, sym_h, sym_w, d->sh, d->sw, d->dh, d->dw,
				       CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT))) ||
	    (rc = WF_CUDNN(be, cudnnSetConvolutionGroupCount(p->cd, d->groups))))
		return rc;
	int on, oc, oh, ow;
	if ((rc = WF_CUDNN(be, cudnnGetConvolution2dForwardOutputDim(p->cd, p->xd, p->wd, &on, &oc,
								     &oh, &ow))))
		return rc;
	if (on != d->n || oc != d->oc || oh != d->oh || ow != d->ow)
		return wf_errf(&be->err, WF_EINTERNAL,
			       "conv2d: cuDNN computes output %dx%dx%dx%d, expected %dx%dx%dx%d",
			       on, oh, ow, oc, d->n, d->oh, d->ow, d->oc);
	if ((rc = wf_cuda_reserve_scratch(be, conv_layout(p, NULL, NULL))) ||
	    (rc = wf_cuda_reserve_ones(be, (size_t)d->n * d->oh * d->ow)))
		return rc;
	p->own_dw = d->groups == d->c && d->oc == d->c && d->kh == 3 && d->kw == 3;
	if (p->own_dw)
		rc = WF_CU(be, cudaMalloc((void **)&p->dw_acc, (size_t)9 * d->c * sizeof(double)));
	return rc;
}

static int conv_plan(wf_backend *be, wf_plan **slot, const wf_conv_desc *d, wf_plan **out)
{
	int fresh, rc = plan_get(be, slot, PLAN_CONV, d, sizeof(*d), out, &fresh);
	if (rc || !fresh)
		return rc;
	if ((rc = conv_build(be, *out)) != 0)
		plan_drop(be, slot);
	return rc;
}

/* Math type for the precision: exact float32 never uses TF32. */
static cudnnMathType_t conv_math(wf_precision prec)
{
	switch (prec) {
	case WF_PREC_FP32: return CUDNN_FMA_MATH;
	case WF_PREC_TF32: return CUDNN_DEFAULT_MATH;
	default: return CUDNN_TENSOR_OP_MATH;
	}
}

/* Workspace that algorithm search may use (bytes): opts.workspace_mb. */
static size_t ws_limit(const wf_backend *be)
{
	long mb = be->opts.workspace_mb;
	return (size_t)(mb > 0 ? mb : WF_CUDNN_WORKSPACE_MB_DEFAULT) << 20;
}

static const char *dir_name[3] = {"forward", "backward data", "backward filter"};

/* No algorithm: say which shape, precision and direction. */
static int no_algo(wf_backend *be, const wf_plan *p, int dir)
{
	const wf_conv_desc *d = &p->d.conv;
	return wf_errf(&be->err, WF_ENOTSUP,
		       "conv2d: cuDNN found no %s %s NHWC algorithm for input %dx%dx%dx%d, kernel "
		       "%dx%d, %d outputs, strides %dx%d, dilation %dx%d, groups %d",
		       wf_precision_name(p->prec), dir_name[dir], d->n, d->h, d->w, d->c, d->kh,
		       d->kw, d->oc, d->sh, d->sw, d->dh, d->dw, d->groups);
}

/* Benchmark the algorithms of one direction once (on the real buffers)
 * and keep the fastest that fits the workspace limit. */
static int conv_choose(wf_backend *be, wf_plan *p, int dir, const void *x, const void *w,
		       const void *y)
{
	wf_cuda_ctx *cx = wf_cuda_ctx_of(be);
	size_t limit = ws_limit(be);
	int rc = wf_cuda_reserve_ws(be, limit);
	if (rc || (rc = WF_CUDNN(be, cudnnSetConvolutionMathType(p->cd, conv_math(p->prec)))))
		return rc;
	int n = 0, found = 0;
	if (dir == DIR_FWD) {
		cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
		rc = WF_CUDNN(be,
			      cudnnFindConvolutionForwardAlgorithmEx(
				      cx->cudnn, p->xd, x, p->wd, w, p->cd, p->yd, (void *)y,
				      CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &n, perf, cx->ws, limit));
		for (int i = 0; !rc && i < n && !found; i++)
			if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].memory <= limit) {
				p->fwd = perf[i].algo;
				p->math[dir] = perf[i].mathType;
				p->ws[dir] = perf[i].memory;
				found = 1;
			}
	} else if (dir == DIR_BWD_DATA) {
		cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
		rc = WF_CUDNN(be, cudnnFindConvolutionBackwardDataAlgorithmEx(
					  cx->cudnn, p->wd, w, p->yd, y, p->cd, p->xd, (void *)x,
					  CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &n, perf, cx->ws,
					  limit));
		for (int i = 0; !rc && i < n && !found; i++)
			if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].memory <= limit) {
				p->bwd_data = perf[i].algo;
				p->math[dir] = perf[i].mathType;
				p->ws[dir] = perf[i].memory;
				found = 1;
			}
	} else {
		cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
		rc = WF_CUDNN(be, cudnnFindConvolutionBackwardFilterAlgorithmEx(
					  cx->cudnn, p->xd, x, p->yd, y, p->cd, p->wd, (void *)w,
					  CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &n, perf, cx->ws,
					  limit));
		for (int i = 0; !rc && i < n && !found; i++)
			if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].memory <= limit) {
				p->bwd_filter = perf[i].algo;
				p->math[dir] = perf[i].mathType;
				p->ws[dir] = perf[i].memory;
				found = 1;
			}
	}
	if (rc)
		return rc;
	if (!found)
		return no_algo(be, p, dir);
	if (p->prec == WF_PREC_FP32)
		p->math[dir] = CUDNN_FMA_MATH; /* never TF32 in exact float32 */
	p->algo_ready[dir] = 1;
	return 0;
}

/* The input as cuDNN reads it: padded explicitly where the padding is not
 * symmetric, cast to the plan's type. x is bf16 already with io_bf16 bit 1. */
static int conv_input(wf_backend *be, const wf_plan *p, const conv_bufs *s, const float *x,
		      const void **xc)
{
	wf_cuda_ctx *cx = wf_cuda_ctx_of(be);
	int rc = 0;
	*xc = x;
	if (p->d.conv.io_bf16 & 1) {
		if (p->padded &&
		    !(rc = WF_CU(be, wfk_pad16_forward(cx->stream, &p->extra, s->xh, x))))
			*xc = s->xh;
		return rc;
	}
	if (p->padded) {
		if ((rc = WF_CU(be, wfk_pad_forward(cx->stream, &p->extra, s->xp, x))))
			return rc;
		*xc = s->xp;
	}
	if (p->et != WFK_F32) {
		if ((rc = WF_CU(be, wfk_cast(cx->stream, p->xplen, s->xh, p->et, *xc))))
			return rc;
		*xc = s->xh;
	}
	return 0;
}

/* bf16 tensors (io_bf16) are for bf16 plans only. */
static int conv_io_check(wf_backend *be, const wf_plan *p)
{
	if (p->d.conv.io_bf16 && p->et != WFK_BF16)
		return wf_errf(&be->err, WF_EINVAL,
			       "conv2d: bf16 tensors (io_bf16=%d) need bf16 precision, not %s",
			       p->d.conv.io_bf16, wf_precision_name(p->prec));
	return 0;
}

int wf_cuda_conv2d_forward(wf_backend *be, wf_plan **slot, const wf_conv_desc *d, float *y,
			   const float *x, const float *w, const float *b)
{
	wf_cuda_ctx *cx = wf_cuda_ctx_of(be);
	wf_plan *p;
	int rc = conv_plan(be, slot, d, &p);
	if (rc || (rc = conv_io_check(be, p)))
		return rc;
	if (p->own_dw)
		return WF_CU(be, wfk_dw_forward(cx->stream, d, y, x, w, d->bias ? b : NULL));
	conv_bufs s;
	conv_layout(p, cx->scratch, &s);
	int half = p->et != WFK_F32, yb = (d->io_bf16 & 2) != 0;
	const void *xc;
	void *yc = half && !yb ? s.yh : (void *)y;
	if ((rc = conv_input(be, p, &s, x, &xc)) ||
	    (rc = WF_CU(be, wfk_transpose(cx->stream, p->wlen / d->oc, d->oc, s.wt, p->et, w))))
		return rc;
	if (!p->algo_ready[DIR_FWD] && (rc = conv_choose(be, p, DIR_FWD, xc, s.wt, yc)))
		return rc;
	const float one = 1.0f, zero = 0.0f;
	if ((rc = WF_CUDNN(be, cudnnSetConvolutionMathType(p->cd, p->math[DIR_FWD]))) ||
	    (rc = WF_CUDNN(be, cudnnConvolutionForward(cx->cudnn, &one, p->xd, xc, p->wd, s.wt,
						       p->cd, p->fwd, cx->ws, p->ws[DIR_FWD], &zero,
						       p->yd, yc))))
		return rc;
	const float *bias = d->bias ? b : NULL;
	size_t rows = p->ylen / d->oc;
	if (yb)
		return bias ? WF_CU(be, wfk_bias_add(cx->stream, rows, d->oc, y, WFK_BF16, bias))
			    : 0;
	if (half)
		return WF_CU(be, wfk_uncast_bias(cx->stream, rows, d->oc, y, s.yh, p->et, bias));
	return bias ? WF_CU(be, wfk_bias_add(cx->stream, rows, d->oc, y, WFK_F32, bias)) : 0;
}

/* db[cols] += sum over rows of dy[rows,cols], as a gemv with a ones vector
 * (dy bf16 when bf16). */
static int bias_grad(wf_backend *be, size_t rows, int cols, float *db, const void *dy, int bf16)
{
	wf_cuda_ctx *cx = wf_cuda_ctx_of(be);
	const float one = 1.0f;
	if (rows > cx->ones_len || rows > (size_t)0x7fffffff)
		return wf_errf(&be->err, WF_EINTERNAL, "cuda: bias gradient over %zu rows", rows);
	if (bf16)
		return WF_CUBLAS(be,
				 cublasGemmEx(cx->cublas, CUBLAS_OP_N, CUBLAS_OP_N, cols, 1,
					      (int)rows, &one, dy, CUDA_R_16BF, cols, cx->ones16,
					      CUDA_R_16BF, (int)rows, &one, db, CUDA_R_32F, cols,
					      CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
	return WF_CUBLAS(be, cublasSgemv(cx->cublas, CUBLAS_OP_N, cols, (int)rows, &one, dy, cols,
					 cx->ones, 1, &one, db, 1));
}

/* dx in cuDNN's input layout (padded, the plan's type) back to the caller's,
 * added into dx with acc (cuDNN itself adds where it writes dx directly). */
static int conv_dx_out(wf_backend *be, const wf_plan *p, const conv_bufs *s, float *dx, int acc)
{
	wf_cuda_ctx *cx = wf_cuda_ctx_of(be);
	int rc = 0;
	if (p->d.conv.io_bf16 & 1)
		return p->padded ? WF_CU(be, wfk_pad16_backward(cx->stream, &p->extra, dx, s->dxh))
				 : 0;
	if (p->et != WFK_F32) {
		if (!p->padded && acc)
			return WF_CU(be, wfk_uncast_acc(cx->stream, p->xplen, dx, s->dxh, p->et));
		float *dxf = p->padded ? s->dxp : dx; /* float gradient of cuDNN's input */
		if ((rc = WF_CU(be, wfk_uncast_bias(cx->stream, p->xplen, 1, dxf, s->dxh, p->et,
						    NULL))))
			return rc;
	}
	return p->padded ? WF_CU(be, wfk_pad_backward(cx->stream, &p->extra, dx, s->dxp, acc)) : 0;
}

/* The backward data algorithm, chosen on a buffer of its own where cuDNN's
 * output is the caller's dx holding a gradient to add to (the search
 * overwrites its output). */
static int conv_choose_bwd_data(wf_backend *be, wf_plan *p, void *dxc, const void *w,
				const void *dyc, int keep)
{
	if (!keep)
		return conv_choose(be, p, DIR_BWD_DATA, dxc, w, dyc);
	void *tmp = NULL;
	int rc = WF_CU(be, cudaMalloc(&tmp, p->xplen * elem_size(p->et)));
	if (!rc)
		rc = conv_choose(be, p, DIR_BWD_DATA, tmp, w, dyc);
	cudaFree(tmp);
	return rc;
}

int wf_cuda_conv2d_backward(wf_backend *be, wf_plan **slot, const wf_conv_desc *d, float *dx,
			    float *dw, float *db, const float *dy, const float *x, const float *w)
{
	wf_cuda_ctx *cx = wf_cuda_ctx_of(be);
	wf_plan *p;
	wf_conv_desc key = *d; /* the forward's plan: dx_acc is no part of it */
	key.dx_acc = 0;
	int rc = conv_plan(be, slot, &key, &p);
	if (rc || (rc = conv_io_check(be, p)))
		return rc;
	int xb = d->io_bf16 & 1, yb = (d->io_bf16 & 2) != 0;
	if (p->own_dw) {
		if ((dx && (rc = WF_CU(be, wfk_dw_backward_data(cx->stream, d, dx, dy, w)))) ||
		    (dw &&
		     (rc = WF_CU(be, wfk_dw_backward_filter(cx->stream, d, dw, p->dw_acc, dy, x)))))
			return rc;
		return db && d->bias ? bias_grad(be, p->ylen / d->oc, d->oc, db, dy, yb) : 0;
	}
	conv_bufs s;
	conv_layout(p, cx->scratch, &s);
	int half = p->et != WFK_F32;
	int acc = d->dx_acc, direct = !half && !p->padded; /* cuDNN writes dx itself */
	const float one = 1.0f, zero = 0.0f, beta = acc && direct ? 1.0f : 0.0f;
	const void *dyc = dy;
	if (half && !yb && (dx || dw)) {
		if ((rc = WF_CU(be, wfk_cast(cx->stream, p->ylen, s.yh, p->et, dy))))
			return rc;
		dyc = s.yh;
	}
	if (dx) {
		void *dxc = dx; /* where cuDNN writes: see conv_dx_out */
		if ((half && !xb) || (xb && p->padded))
			dxc = s.dxh;
		else if (p->padded)
			dxc = s.dxp;
		if ((rc = WF_CU(be,
				wfk_transpose(cx->stream, p->wlen / d->oc, d->oc, s.wt, p->et, w))))
			return rc;
		if (!p->algo_ready[DIR_BWD_DATA] &&
		    (rc = conv_choose_bwd_data(be, p, dxc, s.wt, dyc, acc && direct)))
			return rc;
		if ((rc = WF_CUDNN(be,
				   cudnnSetConvolutionMathType(p->cd, p->math[DIR_BWD_DATA]))) ||
		    (rc = WF_CUDNN(be, cudnnConvolutionBackwardData(cx->cudnn, &one, p->wd, s.wt,
								    p->yd, dyc, p->cd, p->bwd_data,
								    cx->ws, p->ws[DIR_BWD_DATA],
								    &beta, p->xd, dxc))) ||
		    (rc = conv_dx_out(be, p, &s, dx, acc)))
			return rc;
	}
	if (dw) {
		const void *xc;
		if ((rc = conv_input(be, p, &s, x, &xc)))
			return rc;
		if (!p->algo_ready[DIR_BWD_FILTER] &&
		    (rc = conv_choose(be, p, DIR_BWD_FILTER, xc, s.dwt, dyc)))
			return rc;
		if ((rc = WF_CUDNN(be,
				   cudnnSetConvolutionMathType(p->cd, p->math[DIR_BWD_FILTER]))) ||
		    (rc = WF_CUDNN(be, cudnnConvolutionBackwardFilter(
					       cx->cudnn, &one, p->xd, xc, p->yd, dyc, p->cd,
					       p->bwd_filter, cx->ws, p->ws[DIR_BWD_FILTER], &zero,
					       p->wd, s.dwt))) ||
		    (rc = WF_CU(be, wfk_transpose_acc(cx->stream, p->wlen / d->oc, d->oc, dw, s.dwt,
						      p->et))))
			return rc;
	}
	if (db && d->bias)
		return bias_grad(be, p->ylen / d->oc, d->oc, db, dy, yb);
	return 0;
}

/* ---- dense ------------------------------------------------------------------------- */

/* Scratch of one dense call: cast x [n,in], w [in,out], dy [n,out]. */
static size_t dense_layout(const wf_plan *p, char *base, void **xh, void **wh, void **dyh)
{
	const wf_dense_desc *d = &p->d.dense;
	size_t es = elem_size(p->et);
	size_t a = align256((size_t)d->n * d->in * es), b = align256((size_t)d->in * d->out * es);
	if (xh) {
		*xh = base;
		*wh = base ? base + a : NULL;
		*dyh = base ? base + a + b : NULL;
	}
	return p->et == WFK_F32 ? 0 : a + b + align256((size_t)d->n * d->out * es);
}

static int dense_plan(wf_backend *be, wf_plan **slot, const wf_dense_desc *d, wf_plan **out)
{
	int fresh, rc = plan_get(be, slot, PLAN_DENSE, d, sizeof(*d), out, &fresh);
	if (rc || !fresh)
		return rc;
	(*out)->et = prec_type((*out)->prec);
	if ((rc = wf_cuda_reserve_scratch(be, dense_layout(*out, NULL, NULL, NULL, NULL))) ||
	    (rc = wf_cuda_reserve_ones(be, (size_t)d->n)))
		plan_drop(be, slot);
	return rc;
}

/* Column-major C[m,n] = A op B (+ beta C) with float C; A, B of the plan's type. */
static int gemm(wf_backend *be, const wf_plan *p, cublasOperation_t ta, cublasOperation_t tb, int m,
		int n, int k, const void *a, int lda, const void *b, int ldb, float beta, float *c,
		int ldc)
{
	wf_cuda_ctx *cx = wf_cuda_ctx_of(be);
	const float one = 1.0f;
	if (p->prec == WF_PREC_FP32)
		return WF_CUBLAS(be, cublasSgemm(cx->cublas, ta, tb, m, n, k, &one, a, lda, b, ldb,
						 &beta, c, ldc));
	cudaDataType_t t = cublas_type(p->et);
	cublasComputeType_t ct =
		p->prec == WF_PREC_TF32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
	return WF_CUBLAS(be, cublasGemmEx(cx->cublas, ta, tb, m, n, k, &one, a, t, lda, b, t, ldb,
					  &beta, c, CUDA_R_32F, ldc, ct, CUBLAS_GEMM_DEFAULT));
}

/* Row-major y[N,OUT] = x[N,IN] w[IN,OUT] is column-major y^T = w^T x^T:
 * gemm(m=OUT, n=N, k=IN, A=w (ld OUT), B=x (ld IN)). */
int wf_cuda_dense_forward(wf_backend *be, wf_plan **slot, const wf_dense_desc *d, float *y,
			  const float *x, const float *w, const float *b)
{
	wf_cuda_ctx *cx = wf_cuda_ctx_of(be);
	wf_plan *p;
	int rc = dense_plan(be, slot, d, &p);
	if (rc)
		return rc;
	const void *xc = x, *wc = w;
	if (p->et != WFK_F32) {
		void *xh, *wh, *dyh;
		dense_layout(p, cx->scratch, &xh, &wh, &dyh);
		if ((rc = WF_CU(be, wfk_cast(cx->stream, (size_t)d->n * d->in, xh, p->et, x))) ||
		    (rc = WF_CU(be, wfk_cast(cx->stream, (size_t)d->in * d->out, wh, p->et, w))))
			return rc;
		xc = xh, wc = wh;
	}
	if ((rc = gemm(be, p, CUBLAS_OP_N, CUBLAS_OP_N, d->out, d->n, d->in, wc, d->out, xc, d->in,
		       0.0f, y, d->out)))
		return rc;
	if (d->bias && b)
		return WF_CU(be, wfk_bias_add(cx->stream, (size_t)d->n, d->out, y, WFK_F32, b));
	return 0;
}

/* dx[N,IN] = dy w^T: column-major dx^T = w dy^T, gemm(T, N, m=IN, n=N, k=OUT).
 * dw[IN,OUT] += x^T dy: column-major dw^T += dy^T x, gemm(N, T, m=OUT, n=IN, k=N). */
int wf_cuda_dense_backward(wf_backend *be, wf_plan **slot, const wf_dense_desc *d, float *dx,
			   float *dw, float *db, const float *dy, const float *x, const float *w)
{
	wf_cuda_ctx *cx = wf_cuda_ctx_of(be);
	wf_plan *p;
	int rc = dense_plan(be, slot, d, &p);
	if (rc)
		return rc;
	const void *xc = x, *wc = w, *dyc = dy;
	if (p->et != WFK_F32 && (dx || dw)) {
		void *xh, *wh, *dyh;
		dense_layout(p, cx->scratch, &xh, &wh, &dyh);
		if ((rc = WF_CU(be, wfk_cast(cx->stream, (size_t)d->n * d->out, dyh, p->et, dy))))
			return rc;
		if (dx &&
		    (rc = WF_CU(be, wfk_cast(cx->stream, (size_t)d->in * d->out, wh, p->et, w))))
			return rc;
		if (dw &&
		    (rc = WF_CU(be, wfk_cast(cx->stream, (size_t)d->n * d->in, xh, p->et, x))))
			return rc;
		xc = xh, wc = wh, dyc = dyh;
	}
	if (dx && (rc = gemm(be, p, CUBLAS_OP_T, CUBLAS_OP_N, d->in, d->n, d->out, wc, d->out, dyc,
			     d->out, 0.0f, dx, d->in)))
		return rc;
	if (dw && (rc = gemm(be, p, CUBLAS_OP_N, CUBLAS_OP_T, d->out, d->in, d->n, dyc, d->out, xc,
			     d->in, 1.0f, dw, d->out)))
		return rc;
	if (db && d->bias)
		return bias_grad(be, (size_t)d->n, d->out, db, dy, 0);
	return 0;
}

/* ---- batch norm ---------------------------------------------------------------------- */

/* Our own kernels (cuda_kernels.cu), not cuDNN's: its legacy batch norm on
 * NHWC float32 took 85% of a resnet50 step on an H100. A plan holds the
 * per-channel buffers: the training forward's coef [3C] (kept for the
 * backward, which recomputes the fused relu's mask from x with it; then C
 * unused), the backward's (or inference's) coef [4C], then the reduction's
 * [2C] doubles. With d->io_bf16, x, y, dy and dx are bf16. */
static int bn_plan(wf_backend *be, wf_plan **slot, const wf_bn_desc *d, wf_plan **out)
{
	int fresh, rc = plan_get(be, slot, PLAN_BN, d, sizeof(*d), out, &fresh);
	if (rc || !fresh)
		return rc;
	wf_plan *p = *out;
	if ((rc = WF_CU(be, cudaMalloc((void **)&p->consts,
				       (size_t)d->c * (8 * sizeof(float) + 2 * sizeof(double))))))
		plan_drop(be, slot);
	return rc;
}

static float *bn_fwd_coef(const wf_plan *p)
{
	return p->consts;
}

static float *bn_coef(const wf_plan *p, const wf_bn_desc *d)
{
	return p->consts + 4 * (size_t)d->c;
}

static double *bn_acc(const wf_plan *p, const wf_bn_desc *d)
{
	return (double *)(p->consts + 8 * (size_t)d->c);
}

int wf_cuda_batchnorm_forward(wf_backend *be, wf_plan **slot, const wf_bn_desc *d, int training,
			      float *y, float *save_mean, float *save_invstd, const float *x,
			      const float *gamma, const float *beta, float *run_mean,
			      float *run_var)
{
	wf_cuda_ctx *cx = wf_cuda_ctx_of(be);
	wf_plan *p;
	int rc = bn_plan(be, slot, d, &p);
	if (rc)
		return rc;
	size_t rows = (size_t)d->n * d->h * d->w;
	double *acc = bn_acc(p, d);
	float *coef = training ? bn_fwd_coef(p) : bn_coef(p, d);
	if (!training) {
		if (!run_mean || !run_var)
			return wf_errf(&be->err, WF_EINVAL,
				       "batchnorm: inference needs run_mean and run_var");
		rc = WF_CU(be, wfk_bn_infer_coef(cx->stream, d->c, d->eps, gamma, beta, run_mean,
						 run_var, coef));
	} else {
		p->bn_trained = 1;
		if (!(rc = WF_CU(be, cudaMemsetAsync(acc, 0, 2 * (size_t)d->c * sizeof(double),
						     cx->stream))) &&
		    !(rc = WF_CU(be, wfk_bn_reduce(cx->stream, rows, d->c, acc, x, NULL, NULL, NULL,
						   0, d->io_bf16))))
			rc = WF_CU(be, wfk_bn_stats(cx->stream, rows, d->c, d->eps, d->momentum,
						    acc, x, d->io_bf16, gamma, beta, save_mean,
						    save_invstd, run_mean, run_var, coef));
	}
	return rc ? rc
		  : WF_CU(be,
			  wfk_bn_apply(cx->stream, rows, d->c, y, x, coef, d->relu, d->io_bf16));
}

/* dgamma/dbeta accumulate; dx (may be NULL) is overwritten. With d->relu,
 * dy is the relu's gradient, masked where the last training forward's
 * output was 0 (or 6, for a relu6). */
int wf_cuda_batchnorm_backward(wf_backend *be, wf_plan **slot, const wf_bn_desc *d, float *dx,
			       float *dgamma, float *dbeta, const float *dy, const float *x,
			       const float *gamma, const float *save_mean, const float *save_invstd)
{
	wf_cuda_ctx *cx = wf_cuda_ctx_of(be);
	wf_plan *p;
	int rc = bn_plan(be, slot, d, &p);
	if (rc)
		return rc;
	if (!save_mean || !save_invstd)
		return wf_errf(&be->err, WF_EINVAL,
			       "batchnorm: backward needs save_mean and save_invstd");
	if (d->relu && !p->bn_trained)
		return wf_errf(&be->err, WF_EINVAL,
			       "batchnorm: backward before a training forward");
	size_t rows = (size_t)d->n * d->h * d->w;
	double *acc = bn_acc(p, d);
	const float *mask = d->relu ? bn_fwd_coef(p) : NULL;
	if ((rc = WF_CU(be,
			cudaMemsetAsync(acc, 0, 2 * (size_t)d->c * sizeof(double), cx->stream))) ||
	    (rc = WF_CU(be, wfk_bn_reduce(cx->stream, rows, d->c, acc, x, dy, save_mean, mask,
					  d->relu, d->io_bf16))) ||
	    (rc = WF_CU(be, wfk_bn_backward_coef(cx->stream, rows, d->c, acc, gamma, save_mean,
						 save_invstd, dgamma, dbeta, bn_coef(p, d)))))
		return rc;
	return dx ? WF_CU(be, wfk_bn_dx(cx->stream, rows, d->c, dx, dy, x, bn_coef(p, d), mask,
					d->relu, d->io_bf16))
		  : 0;
}
