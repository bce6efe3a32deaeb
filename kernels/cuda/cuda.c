/* cuda.c: the CUDA backend's table: device selection and context, memory,
 * the check functions, and the ops that run our own kernels (cuda_kernels.cu).
 * Convolution, dense and batch norm (cuDNN, cuBLAS) are in cuda_dnn.c.
 *
 * Everything is queued on one stream per backend; only to_host and sync wait
 * for it. A bad label seen by the loss kernels is reported by the next
 * to_host or sync, which already wait, so no op synchronises on its own. */
#include "kernels/cuda/cuda_priv.h"

#include <library_types.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- check functions ---------------------------------------------------------- */

int wf_cuda_check(wf_err *err, cudaError_t status, const char *call, const char *file, int line)
{
	if (status == cudaSuccess)
		return 0;
	int code = status == cudaErrorMemoryAllocation ? WF_ENOMEM : WF_EINTERNAL;
	return wf_errf(err, code, "cuda: %s failed at %s:%d: %s (%s)", call, file, line,
		       cudaGetErrorString(status), cudaGetErrorName(status));
}

int wf_cublas_check(wf_err *err, cublasStatus_t status, const char *call, const char *file,
		    int line)
{
	if (status == CUBLAS_STATUS_SUCCESS)
		return 0;
	int code = status == CUBLAS_STATUS_ALLOC_FAILED ? WF_ENOMEM : WF_EINTERNAL;
	return wf_errf(err, code, "cublas: %s failed at %s:%d: %s (%s)", call, file, line,
		       cublasGetStatusString(status), cublasGetStatusName(status));
}

int wf_cudnn_check(wf_err *err, cudnnStatus_t status, const char *call, const char *file, int line)
{
	if (status == CUDNN_STATUS_SUCCESS)
		return 0;
	int code = status == CUDNN_STATUS_ALLOC_FAILED ? WF_ENOMEM : WF_EINTERNAL;
	char detail[256] = "";
	cudnnGetLastErrorString(detail, sizeof(detail));
	return wf_errf(err, code, "cudnn: %s failed at %s:%d: %s%s%s", call, file, line,
		       cudnnGetErrorString(status), detail[0] ? ": " : "", detail);
}

/* ---- shared buffers ----------------------------------------------------------------- */

static int grow(wf_backend *be, void **buf, size_t *have, size_t bytes, const char *what)
{
	if (bytes <= *have)
		return 0;
	bytes = (bytes + 255) / 256 * 256;
	void *p = NULL;
	cudaError_t st = cudaMalloc(&p, bytes);
	if (st != cudaSuccess)
		return wf_errf(&be->err, WF_ENOMEM, "cuda: cannot allocate %zu bytes of %s: %s",
			       bytes, what, cudaGetErrorString(st));
	if (*buf)
		cudaFree(*buf); /* waits for the ops that used it */
	*buf = p;
	*have = bytes;
	return 0;
}

int wf_cuda_reserve_ws(wf_backend *be, size_t bytes)
{
	wf_cuda_ctx *cx = wf_cuda_ctx_of(be);
	return grow(be, &cx->ws, &cx->ws_bytes, bytes, "cuDNN workspace");
}

int wf_cuda_reserve_scratch(wf_backend *be, size_t bytes)
{
	wf_cuda_ctx *cx = wf_cuda_ctx_of(be);
	return grow(be, &cx->scratch, &cx->scratch_bytes, bytes, "scratch");
}

int wf_cuda_reserve_ones(wf_backend *be, size_t len)
{
	wf_cuda_ctx *cx = wf_cuda_ctx_of(be);
	if (len <= cx->ones_len)
		return 0;
	size_t have = cx->ones_len * sizeof(float), have16 = cx->ones_len * 2;
	int rc = grow(be, (void **)&cx->ones, &have, len * sizeof(float), "ones");
	if (rc || (rc = grow(be, &cx->ones16, &have16, have / 2, "ones (bf16)")))
		return rc;
	cx->ones_len = have / sizeof(float);
	if ((rc = WF_CU(be, wfk_fill(cx->stream, cx->ones_len, cx->ones, 1.0f))))
		return rc;
	return WF_CU(be, wfk_to_bf16(cx->stream, cx->ones_len, cx->ones16, cx->ones, 0));
}

/* ---- memory ---------------------------------------------------------------------------- */

static void *cu_alloc(wf_backend *be, size_t bytes)
{
	wf_cuda_ctx *cx = wf_cuda_ctx_of(be);
	void *p = NULL;
	size_t rounded = bytes ? (bytes + 63) / 64 * 64 : 64;
	if (WF_CU(be, cudaMalloc(&p, rounded)))
		return NULL;
	/* on the stream: ordered before any op that uses p */
	if (WF_CU(be, cudaMemsetAsync(p, 0, rounded, cx->stream))) {
		cudaFree(p);
		return NULL;
	}
	return p;
}

static void cu_free(wf_backend *be, void *p)
{
	if (p)
		cudaFree(p);
}

/* Page-locked: uploads from it run at the link's speed, asynchronously. */
static void *cu_host_alloc(wf_backend *be, size_t bytes)
{
	void *p = NULL;
	if (WF_CU(be, cudaMallocHost(&p, bytes ? bytes : 1)))
		return NULL;
	memset(p, 0, bytes);
	return p;
}

static void cu_host_free(wf_backend *be, void *p)
{
	if (p)
		cudaFreeHost(p);
}

/* Report (once) a bad label recorded by the loss kernels; call after the
 * stream has been waited for. */
static int check_bad_label(wf_backend *be)
{
	wf_cuda_ctx *cx = wf_cuda_ctx_of(be);
	if (!cx->bad_host[0])
		return 0;
	int row = cx->bad_host[0] - 1, label = cx->bad_host[1];
	cx->bad_host[0] = cx->bad_host[1] = 0;
	cudaMemsetAsync(cx->bad, 0, 2 * sizeof(int), cx->stream);
	return wf_errf(&be->err, WF_EINVAL, "softmax_xent: labels[%d]=%d is outside [0, classes)",
		       row, label);
}

static int cu_sync(wf_backend *be)
{
	int rc = WF_CU(be, cudaStreamSynchronize(wf_cuda_ctx_of(be)->stream));
	return rc ? rc : check_bad_label(be);
}

static int cu_to_device(wf_backend *be, void *dst, const void *src, size_t bytes)
{
	if (!bytes)
		return 0;
	/* pageable source: returns once src has been staged, so the caller may reuse it */
	return WF_CU(be, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice,
					 wf_cuda_ctx_of(be)->stream));
}

static int cu_to_host(wf_backend *be, void *dst, const void *src, size_t bytes)
{
	wf_cuda_ctx *cx = wf_cuda_ctx_of(be);
	int rc = 0;
	if (bytes)
		rc = WF_CU(be,
			   cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, cx->stream));
	return rc ? rc : cu_sync(be);
}

static int cu_zero(wf_backend *be, void *p, size_t bytes)
{
	if (!bytes)
		return 0;
	return WF_CU(be, cudaMemsetAsync(p, 0, bytes, wf_cuda_ctx_of(be)->stream));
}

static int cu_copy(wf_backend *be, void *dst, const void *src, size_t bytes)
{
	if (!bytes || dst == src)
		return 0;
	return WF_CU(be, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice,
					 wf_cuda_ctx_of(be)->stream));
}

/* ---- ops on our own kernels ---------------------------------------------------------------- */

#define STREAM(be) (wf_cuda_ctx_of(be)->stream)

static int cu_act_forward(wf_backend *be, wf_act_kind kind, size_t n, float *y, const float *x)
{
	return WF_CU(be, wfk_act_forward(STREAM(be), kind == WF_ACT_RELU6, n, y, x));
}

static int cu_act_backward(wf_backend *be, wf_act_kind kind, size_t n, float *dx, const float *dy,
			   const float *y)
{
	return WF_CU(be, wfk_act_backward(STREAM(be), kind == WF_ACT_RELU6, n, dx, dy, y));
}

static int cu_add(wf_backend *be, size_t n, float *y, const float *a, const float *b)
{
	return WF_CU(be, wfk_add(STREAM(be), n, y, a, b));
}

static int cu_accumulate(wf_backend *be, size_t n, float *y, const float *x)
{
	return WF_CU(be, wfk_accumulate(STREAM(be), n, y, x));
}

static int cu_scale(wf_backend *be, size_t n, float *y, const float *x, float alpha)
{
	return WF_CU(be, wfk_scale(STREAM(be), n, y, x, alpha));
}

static int cu_add_mixed(wf_backend *be, size_t n, float *y, const void *a, const void *b, int bf16,
			int relu)
{
	return WF_CU(be, wfk_add_mixed(STREAM(be), n, y, a, b, bf16, relu));
}

static int cu_to_bf16(wf_backend *be, size_t n, void *y, const float *x, int act)
{
	return WF_CU(be, wfk_to_bf16(STREAM(be), n, y, x, act));
}

static int cu_add_relu_backward(wf_backend *be, size_t n, const float *dy, const float *y, void *da,
				int ma, void *db, int mb)
{
	return WF_CU(be, wfk_add_relu_backward(STREAM(be), n, dy, y, da, ma, db, mb));
}

/* Width of the concatenated rows. */
static size_t concat_total(int k, const int *widths)
{
	size_t total = 0;
	for (int i = 0; i < k; i++)
		total += (size_t)widths[i];
	return total;
}

static int cu_concat_forward(wf_backend *be, size_t rows, int k, const int *widths, float *y,
			     const float *const *xs)
{
	size_t total = concat_total(k, widths), off = 0;
	int rc = 0;
	for (int i = 0; i < k && !rc; i++) {
		rc = WF_CU(be, wfk_concat_in(STREAM(be), rows, widths[i], total, off, y, xs[i]));
		off += (size_t)widths[i];
	}
	return rc;
}

static int cu_concat_backward(wf_backend *be, size_t rows, int k, const int *widths,
			      float *const *dxs, const float *dy)
{
	size_t total = concat_total(k, widths), off = 0;
	int rc = 0;
	for (int i = 0; i < k && !rc; i++) {
		if (dxs[i])
			rc = WF_CU(be, wfk_concat_out(STREAM(be), rows, widths[i], total, off,
						      dxs[i], dy));
		off += (size_t)widths[i];
	}
	return rc;
}

static int cu_pool_forward(wf_backend *be, wf_plan **plan, const wf_pool_desc *d, float *y,
			   const float *x)
{
	return WF_CU(be, wfk_pool_forward(STREAM(be), d, y, x));
}

/* Max pooling through each output's argmax (a plan's byte per output) where
 * the caller gives a plan slot and the window fits a byte; else the gather
 * that rescans windows. */
static int cu_pool_backward(wf_backend *be, wf_plan **plan, const wf_pool_desc *d, float *dx,
			    const float *dy, const float *x, const float *y)
{
	if (d->kind != WF_POOL_MAX || !plan || d->kh * d->kw > 256)
		return WF_CU(be, wfk_pool_backward(STREAM(be), d, dx, dy, x));
	void *arg;
	int rc = wf_cuda_plan_buffer(be, plan, d, sizeof(*d), (size_t)d->n * d->oh * d->ow * d->c,
				     &arg);
	return rc ? rc : WF_CU(be, wfk_pool_max_backward(STREAM(be), d, dx, dy, x, arg));
}

static int cu_gap_forward(wf_backend *be, int n, int hw, int c, float *y, const float *x)
{
	return WF_CU(be, wfk_gap_forward(STREAM(be), n, hw, c, y, x));
}

static int cu_gap_backward(wf_backend *be, int n, int hw, int c, float *dx, const float *dy)
{
	return WF_CU(be, wfk_gap_backward(STREAM(be), n, hw, c, dx, dy));
}

static int cu_pad_forward(wf_backend *be, const wf_pad_desc *d, float *y, const float *x)
{
	return WF_CU(be, wfk_pad_forward(STREAM(be), d, y, x));
}

static int cu_pad_backward(wf_backend *be, const wf_pad_desc *d, float *dx, const float *dy)
{
	return WF_CU(be, wfk_pad_backward(STREAM(be), d, dx, dy, 0));
}

static int cu_dropout_forward(wf_backend *be, size_t n, float rate, uint64_t seed, float *y,
			      uint8_t *mask, const float *x)
{
	return WF_CU(be, wfk_dropout_forward(STREAM(be), n, rate, seed, y, mask, x));
}

static int cu_dropout_backward(wf_backend *be, size_t n, float rate, float *dx, const float *dy,
			       const uint8_t *mask)
{
	return WF_CU(be, wfk_dropout_backward(STREAM(be), n, rate, dx, dy, mask));
}

/* After a loss kernel: bring the bad-label record home with the stream's
 * next wait (to_host or sync check it). */
static int fetch_bad(wf_backend *be)
{
	wf_cuda_ctx *cx = wf_cuda_ctx_of(be);
	return WF_CU(be, cudaMemcpyAsync(cx->bad_host, cx->bad, 2 * sizeof(int),
					 cudaMemcpyDeviceToHost, cx->stream));
}

static int cu_softmax_xent_forward(wf_backend *be, int n, int k, float *probs, float *losses,
				   const float *logits, const int32_t *labels)
{
	int rc = WF_CU(be, wfk_softmax_xent_forward(STREAM(be), n, k, probs, losses, logits, labels,
						    wf_cuda_ctx_of(be)->bad));
	return rc ? rc : (labels && losses ? fetch_bad(be) : 0);
}

static int cu_softmax_xent_backward(wf_backend *be, int n, int k, float *dlogits,
				    const float *probs, const int32_t *labels, float scale)
{
	int rc = WF_CU(be, wfk_softmax_xent_backward(STREAM(be), n, k, dlogits, probs, labels,
						     scale, wf_cuda_ctx_of(be)->bad));
	return rc ? rc : fetch_bad(be);
}

static int cu_optimizer_update(wf_backend *be, const wf_opt_desc *d, size_t n, float *p,
			       const float *g, float *m, float *v)
{
	double c1 = 1.0, c2 = 1.0; /* kind, slots and step were checked by the wrapper */
	if (d->kind == WF_OPT_ADAM || d->kind == WF_OPT_ADAMW) {
		c1 = 1.0 - pow((double)d->beta1, (double)d->step);
		c2 = 1.0 - pow((double)d->beta2, (double)d->step);
	}
	return WF_CU(be, wfk_optimizer(STREAM(be), d, c1, c2, n, p, g, m, v));
}

/* ---- the table ------------------------------------------------------------------------------- */

static void cu_destroy(wf_backend *be);

static int cu_set_precision(wf_backend *be, const char *name, wf_err *err)
{
	wf_precision p = WF_PREC_FP32;
	int rc = wf_precision_parse(name, &p, err);
	return rc ? rc : wf_backend_cuda_set_precision(be, p, err);
}

static const wf_backend_ops cuda_ops = {
	.alloc = cu_alloc,
	.free = cu_free,
	.to_device = cu_to_device,
	.to_host = cu_to_host,
	.zero = cu_zero,
	.copy = cu_copy,
	.sync = cu_sync,
	.host_alloc = cu_host_alloc,
	.host_free = cu_host_free,
	.plan_free = wf_cuda_plan_free,
	.destroy = cu_destroy,
	.set_precision = cu_set_precision,
	.conv2d_forward = wf_cuda_conv2d_forward,
	.conv2d_backward = wf_cuda_conv2d_backward,
	.dense_forward = wf_cuda_dense_forward,
	.dense_backward = wf_cuda_dense_backward,
	.batchnorm_forward = wf_cuda_batchnorm_forward,
	.batchnorm_backward = wf_cuda_batchnorm_backward,
	.act_forward = cu_act_forward,
	.act_backward = cu_act_backward,
	.add = cu_add,
	.accumulate = cu_accumulate,
	.scale = cu_scale,
	.add_mixed = cu_add_mixed,
	.to_bf16 = cu_to_bf16,
	.add_relu_backward = cu_add_relu_backward,
	.concat_forward = cu_concat_forward,
	.concat_backward = cu_concat_backward,
	.pool_forward = cu_pool_forward,
	.pool_backward = cu_pool_backward,
	.gap_forward = cu_gap_forward,
	.gap_backward = cu_gap_backward,
	.pad_forward = cu_pad_forward,
	.pad_backward = cu_pad_backward,
	.dropout_forward = cu_dropout_forward,
	.dropout_backward = cu_dropout_backward,
	.softmax_xent_forward = cu_softmax_xent_forward,
	.softmax_xent_backward = cu_softmax_xent_backward,
	.optimizer_update = cu_optimizer_update,
};

/* ---- precision ---------------------------------------------------------------------------------
 */

int wf_precision_parse(const char *name, wf_precision *out, wf_err *err)
{
	static const wf_precision all[] = {WF_PREC_FP32, WF_PREC_TF32, WF_PREC_BF16, WF_PREC_FP16};
	const char *canon = wf_backend_precision_canon(name);
	for (size_t i = 0; canon && i < sizeof(all) / sizeof(all[0]); i++)
		if (strcmp(canon, wf_precision_name(all[i])) == 0) {
			*out = all[i];
			return 0;
		}
	return wf_errf(err, WF_EINVAL,
		       "precision '%s' is not one of the cuda device's fp32, tf32, bf16, fp16",
		       name ? name : "(null)");
}

const char *wf_precision_name(wf_precision p)
{
	switch (p) {
	case WF_PREC_TF32: return "tf32";
	case WF_PREC_BF16: return "bf16";
	case WF_PREC_FP16: return "fp16";
	default: return "fp32";
	}
}

int wf_backend_cuda_set_precision(wf_backend *be, wf_precision p, wf_err *err)
{
	if (!be || be->ops != &cuda_ops)
		return wf_errf(err, WF_EINVAL, "precision %s needs the cuda device (this is %s)",
			       wf_precision_name(p), be && be->name ? be->name : "no backend");
	if (p < WF_PREC_FP32 || p > WF_PREC_FP16)
		return wf_errf(err, WF_EINVAL, "precision %d is not a wf_precision", (int)p);
	wf_cuda_ctx_of(be)->prec = p;
	be->bf16 = p == WF_PREC_BF16; /* executors keep bf16 tensors between ops */
	return 0;
}

wf_precision wf_backend_cuda_precision(const wf_backend *be)
{
	return be && be->ops == &cuda_ops ? ((const wf_cuda_ctx *)be->ctx)->prec : WF_PREC_FP32;
}

const char *wf_backend_cuda_describe(const wf_backend *be)
{
	return be && be->ops == &cuda_ops ? ((const wf_cuda_ctx *)be->ctx)->describe
					  : "not a cuda backend";
}

/* ---- creating and destroying
 * ---------------------------------------------------------------------- */

static void cu_destroy(wf_backend *be)
{
	wf_cuda_ctx *cx = wf_cuda_ctx_of(be);
	if (!cx)
		return;
	if (cx->stream)
		cudaStreamSynchronize(cx->stream);
	if (cx->cudnn)
		cudnnDestroy(cx->cudnn);
	if (cx->cublas)
		cublasDestroy(cx->cublas);
	cudaFree(cx->ws);
	cudaFree(cx->scratch);
	cudaFree(cx->ones);
	cudaFree(cx->ones16);
	cudaFree(cx->bad);
	if (cx->bad_host)
		cudaFreeHost(cx->bad_host);
	if (cx->stream)
		cudaStreamDestroy(cx->stream);
	free(cx);
	be->ctx = NULL;
}

/* The GPU this process uses: opts.device_index (the program passes the
 * launcher's local rank, so ranks on one node spread over its GPUs). */
static int pick_device(const wf_backend *be, int count)
{
	int i = be->opts.device_index % count;
	return i < 0 ? 0 : i;
}

int wf_backend_cuda_init(wf_backend *be, wf_err *err)
{
	if (!be)
		return wf_errf(err, WF_EINVAL, "cuda: backend is NULL");
	int count = 0;
	cudaError_t st = cudaGetDeviceCount(&count);
	if (st != cudaSuccess)
		return wf_errf(err, WF_ENOTSUP, "no usable CUDA device: %s",
			       cudaGetErrorString(st));
	if (count <= 0)
		return wf_errf(err, WF_ENOTSUP, "no usable CUDA device: %s",
			       cudaGetErrorString(cudaErrorNoDevice));
	wf_cuda_ctx *cx = calloc(1, sizeof(*cx));
	if (!cx)
		return wf_errf(err, WF_ENOMEM, "cuda: out of memory creating the context");
	be->name = "cuda";
	be->ops = &cuda_ops;
	be->caps |= WF_CAP_BF16; /* cuDNN runs bf16 convolutions (tensor cores from sm80) */
	/* batch norm + relu or relu6, add + relu, bf16 tensors */
	be->caps |= WF_CAP_TRAIN_FUSE | WF_CAP_BN_RELU6 | WF_CAP_DX_ACC;
	be->precisions = "fp32 tf32 bf16 fp16";
	be->ctx = cx;
	wf_err_clear(&be->err);
	cx->device = pick_device(be, count);
	int rc = 0;
	st = cudaSetDevice(cx->device);
	if (st == cudaSuccess)
		st = cudaFree(NULL); /* creates the context: the first real use of the device */
	if (st != cudaSuccess) {
		rc = wf_errf(err, WF_ENOTSUP, "no usable CUDA device: device %d: %s", cx->device,
			     cudaGetErrorString(st));
		goto fail;
	}
	if ((rc = WF_CU(be, cudaStreamCreateWithFlags(&cx->stream, cudaStreamNonBlocking))) ||
	    (rc = WF_CUBLAS(be, cublasCreate(&cx->cublas))) ||
	    (rc = WF_CUBLAS(be, cublasSetStream(cx->cublas, cx->stream))) ||
	    (rc = WF_CUDNN(be, cudnnCreate(&cx->cudnn))) ||
	    (rc = WF_CUDNN(be, cudnnSetStream(cx->cudnn, cx->stream))) ||
	    (rc = WF_CU(be, cudaMalloc((void **)&cx->bad, 2 * sizeof(int)))) ||
	    (rc = WF_CU(be, cudaMemset(cx->bad, 0, 2 * sizeof(int)))) ||
	    (rc = WF_CU(be, cudaMallocHost((void **)&cx->bad_host, 2 * sizeof(int)))))
		goto fail_copy;
	cx->bad_host[0] = cx->bad_host[1] = 0;

	cx->prec = WF_PREC_FP32; /* wf_backend_set_precision changes it */
	struct cudaDeviceProp prop;
	if ((rc = WF_CU(be, cudaGetDeviceProperties(&prop, cx->device))))
		goto fail_copy;
	int cublas_ver = 0;
	cublasGetVersion(cx->cublas, &cublas_ver);
	size_t cudnn_ver = cudnnGetVersion();
	snprintf(cx->describe, sizeof(cx->describe),
		 "%.120s (device %d of %d), sm_%d%d, %.0f GiB, cuDNN %zu.%zu.%zu, cuBLAS %d.%d, "
		 "precision %s",
		 prop.name, cx->device, count, prop.major, prop.minor,
		 (double)prop.totalGlobalMem / (1024.0 * 1024.0 * 1024.0), cudnn_ver / 10000,
		 cudnn_ver / 100 % 100, cudnn_ver % 100, cublas_ver / 10000, cublas_ver / 100 % 100,
		 wf_precision_name(cx->prec));
	return 0;

fail_copy:
	wf_errf(err, rc, "cuda: setting up device %d: %s", cx->device, be->err.msg);
fail:
	cu_destroy(be);
	be->ops = NULL;
	be->name = NULL;
	return rc;
}
