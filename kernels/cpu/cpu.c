/* cpu.c: the cpu backend. Convolution, dense, batch norm and pooling run as
 * oneDNN 2.6 primitives built once per descriptor inside a plan; the
 * memory-bound ops are OpenMP loops (cpu_loops.c). Only kernels/cpu/ includes
 * oneDNN. This file holds the op table; the plan plumbing is in cpu_plan.c,
 * the op families in cpu_conv.c, cpu_dense.c, cpu_bn.c and cpu_pool.c.
 *
 * A plan holds, for one op instance, a copy of its descriptor and up to three
 * lazily built parts (forward, backward; batch norm: forward-training,
 * forward-inference, backward), so the executor may share one plan slot
 * between an op's forward and backward or give each its own. Each part is a
 * sequence of primitives: reorders of the caller's buffers into the layout the
 * compute primitive prefers, the primitive, reorders back. User buffers are
 * bound per call with dnnl_memory_set_data_handle; scratchpads, workspaces
 * and reordered tensors are allocated when the part is built, never per call.
 */
#include "kernels/cpu/cpu_priv.h"
#include "kernels/cpu/cpu_loops.h"

#include <stdlib.h>

/* ---- the backend ------------------------------------------------------------------------ */

static void cpu_destroy(wf_backend *be)
{
	cpu_ctx *c = ctx_of(be);
	if (!c)
		return;
	if (c->stream)
		dnnl_stream_destroy(c->stream);
	if (c->eng)
		dnnl_engine_destroy(c->eng);
	free(c);
	be->ctx = NULL;
}

/* The memory-bound ops of cpu_loops.c run OpenMP loops: each slot sets the
 * calling thread's thread count first (use_threads), then runs the loop. */
#define THREADED(op, params, args)                                                                 \
	static int threaded_##op params                                                            \
	{                                                                                          \
		use_threads(be);                                                                   \
		return wf_cpu_##op args;                                                           \
	}
THREADED(act_forward, (wf_backend * be, wf_act_kind kind, size_t n, float *y, const float *x),
	 (be, kind, n, y, x))
THREADED(act_backward,
	 (wf_backend * be, wf_act_kind kind, size_t n, float *dx, const float *dy, const float *y),
	 (be, kind, n, dx, dy, y))
THREADED(add, (wf_backend * be, size_t n, float *y, const float *a, const float *b),
	 (be, n, y, a, b))
THREADED(accumulate, (wf_backend * be, size_t n, float *y, const float *x), (be, n, y, x))
THREADED(scale, (wf_backend * be, size_t n, float *y, const float *x, float alpha),
	 (be, n, y, x, alpha))
THREADED(concat_forward,
	 (wf_backend * be, size_t rows, int k, const int *widths, float *y, const float *const *xs),
	 (be, rows, k, widths, y, xs))
THREADED(concat_u8,
	 (wf_backend * be, size_t rows, int k, const int *widths, void *y, const void *const *xs,
	  unsigned u8_in, float scale),
	 (be, rows, k, widths, y, xs, u8_in, scale))
THREADED(concat_backward,
	 (wf_backend * be, size_t rows, int k, const int *widths, float *const *dxs,
	  const float *dy),
	 (be, rows, k, widths, dxs, dy))
THREADED(gap_forward, (wf_backend * be, int n, int hw, int c, float *y, const float *x),
	 (be, n, hw, c, y, x))
THREADED(gap_q8,
	 (wf_backend * be, int n, int hw, int c, float *y, const void *x, float scale, int u8),
	 (be, n, hw, c, y, x, scale, u8))
THREADED(gap_backward, (wf_backend * be, int n, int hw, int c, float *dx, const float *dy),
	 (be, n, hw, c, dx, dy))
THREADED(pad_forward, (wf_backend * be, const wf_pad_desc *d, float *y, const float *x),
	 (be, d, y, x))
THREADED(pad_backward, (wf_backend * be, const wf_pad_desc *d, float *dx, const float *dy),
	 (be, d, dx, dy))
THREADED(dropout_forward,
	 (wf_backend * be, size_t n, float rate, uint64_t seed, float *y, uint8_t *mask,
	  const float *x),
	 (be, n, rate, seed, y, mask, x))
THREADED(dropout_backward,
	 (wf_backend * be, size_t n, float rate, float *dx, const float *dy, const uint8_t *mask),
	 (be, n, rate, dx, dy, mask))
THREADED(softmax_xent_forward,
	 (wf_backend * be, int n, int k, float *probs, float *losses, const float *logits,
	  const int32_t *labels),
	 (be, n, k, probs, losses, logits, labels))
THREADED(softmax_xent_backward,
	 (wf_backend * be, int n, int k, float *dlogits, const float *probs, const int32_t *labels,
	  float scale),
	 (be, n, k, dlogits, probs, labels, scale))
THREADED(add_mixed,
	 (wf_backend * be, size_t n, float *y, const void *a, const void *b, int bf16, int relu),
	 (be, n, y, a, b, bf16, relu))
THREADED(add_relu_backward,
	 (wf_backend * be, size_t n, const float *dy, const float *y, void *da, int ma, void *db,
	  int mb),
	 (be, n, dy, y, da, ma, db, mb))
THREADED(to_bf16, (wf_backend * be, size_t n, void *y, const float *x, int act), (be, n, y, x, act))
THREADED(to_u8, (wf_backend * be, size_t n, void *y, const float *x, const float *b, float scale),
	 (be, n, y, x, b, scale))
THREADED(avgpool3_to_u8,
	 (wf_backend * be, int n, int h, int w, int c, void *y, const float *x, float k,
	  const float *b, float scale),
	 (be, n, h, w, c, y, x, k, b, scale))
THREADED(optimizer_update,
	 (wf_backend * be, const wf_opt_desc *d, size_t n, float *p, const float *g, float *m,
	  float *v),
	 (be, d, n, p, g, m, v))
#undef THREADED

/* Branches run on OpenMP's threads, the ones oneDNN's primitives use
 * otherwise; inside the region every op runs alone (use_threads). */
static void cpu_branches(wf_backend *be, int n, void (*fn)(void *arg, int t, int nt), void *arg)
{
	(void)be;
#pragma omp parallel num_threads(n)
	fn(arg, omp_get_thread_num(), omp_get_num_threads());
}

static const wf_backend_ops cpu_ops = {
	.alloc = wf_cpu_alloc,
	.free = wf_cpu_free,
	.to_device = wf_cpu_copy_in,
	.to_host = wf_cpu_copy_in,
	.zero = wf_cpu_zero,
	.copy = wf_cpu_copy_in,
	.sync = wf_cpu_sync,
	.plan_free = wf_cpu_plan_free,
	.destroy = cpu_destroy,
	.branches = cpu_branches,
	.conv2d_forward = wf_cpu_conv2d_forward,
	.conv2d_forward_fused = wf_cpu_conv2d_forward_fused,
	.conv2d_backward = wf_cpu_conv2d_backward,
	.dense_forward = wf_cpu_dense_forward,
	.dense_backward = wf_cpu_dense_backward,
	.batchnorm_forward = wf_cpu_batchnorm_forward,
	.batchnorm_backward = wf_cpu_batchnorm_backward,
	.act_forward = threaded_act_forward,
	.act_backward = threaded_act_backward,
	.add = threaded_add,
	.accumulate = threaded_accumulate,
	.scale = threaded_scale,
	.add_mixed = threaded_add_mixed,
	.to_bf16 = threaded_to_bf16,
	.to_u8 = threaded_to_u8,
	.avgpool3_to_u8 = threaded_avgpool3_to_u8,
	.add_relu_backward = threaded_add_relu_backward,
	.concat_forward = threaded_concat_forward,
	.concat_u8 = threaded_concat_u8,
	.concat_backward = threaded_concat_backward,
	.pool_forward = wf_cpu_pool_forward,
	.pool_backward = wf_cpu_pool_backward,
	.gap_forward = threaded_gap_forward,
	.gap_q8 = threaded_gap_q8,
	.gap_backward = threaded_gap_backward,
	.pad_forward = threaded_pad_forward,
	.pad_backward = threaded_pad_backward,
	.dropout_forward = threaded_dropout_forward,
	.dropout_backward = threaded_dropout_backward,
	.softmax_xent_forward = threaded_softmax_xent_forward,
	.softmax_xent_backward = threaded_softmax_xent_backward,
	.optimizer_update = threaded_optimizer_update,
};

int wf_backend_cpu_init(wf_backend *be, wf_err *err)
{
	int rc = 0;
	cpu_ctx *c = calloc(1, sizeof(*c));
	if (!c)
		return wf_errf(err, WF_ENOMEM, "cpu: out of memory creating the backend");
	be->name = "cpu";
	be->caps |= WF_CAP_HOST_MEM | WF_CAP_TRAIN_FUSE;
	be->precisions = "fp32";
	be->ops = &cpu_ops;
	be->ctx = c;
	if (be->threads > 0)
		omp_set_num_threads(be->threads);
	DN_CHECK(dnnl_engine_create(&c->eng, dnnl_cpu, 0), fail);
	DN_CHECK(dnnl_stream_create(&c->stream, c->eng, dnnl_stream_default_flags), fail);
	if (wf_cpu_has_bf16())
		be->caps |= WF_CAP_BF16, be->precisions = "fp32 bf16";
	if (wf_cpu_has_vnni()) /* int8 elsewhere falls back to fp32, saying so */
		be->caps |= WF_CAP_INT8;
	return 0;
fail:
	if (err)
		*err = be->err;
	cpu_destroy(be);
	be->ops = NULL;
	return rc;
}
