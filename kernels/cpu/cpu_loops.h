/* cpu_loops.h: the memory-bound ops of the cpu backend as OpenMP-parallel
 * loops (memory, activations, add/scale, concat, pad/crop, global average
 * pool, dropout, softmax cross-entropy, optimizer updates). Private to
 * kernels/cpu/: cpu.c puts these functions into the op table; their arguments
 * arrive checked by the wrappers of kernels/ops.h. Contracts are
 * those of the matching wf_backend_ops slots in kernels/kernels.h. */
#ifndef WF_CPU_LOOPS_H
#define WF_CPU_LOOPS_H

#include "kernels/kernels.h"

void *wf_cpu_alloc(wf_backend *be, size_t bytes);
void wf_cpu_free(wf_backend *be, void *p);
int wf_cpu_copy_in(wf_backend *be, void *dst, const void *src, size_t bytes);
int wf_cpu_zero(wf_backend *be, void *p, size_t bytes);
int wf_cpu_sync(wf_backend *be);

int wf_cpu_act_forward(wf_backend *be, wf_act_kind kind, size_t n, float *y, const float *x);
int wf_cpu_act_backward(wf_backend *be, wf_act_kind kind, size_t n, float *dx, const float *dy,
			const float *y);
int wf_cpu_add(wf_backend *be, size_t n, float *y, const float *a, const float *b);
int wf_cpu_add_mixed(wf_backend *be, size_t n, float *y, const void *a, const void *b, int bf16,
		     int relu);
int wf_cpu_to_bf16(wf_backend *be, size_t n, void *y, const float *x, int act);
int wf_cpu_add_relu_backward(wf_backend *be, size_t n, const float *dy, const float *y, void *da,
			     int ma, void *db, int mb);
int wf_cpu_avgpool3_to_u8(wf_backend *be, int n, int h, int w, int c, void *y, const float *x,
			  float k, const float *b, float scale);
int wf_cpu_to_u8(wf_backend *be, size_t n, void *y, const float *x, const float *b, float scale);
int wf_cpu_gap_q8(wf_backend *be, int n, int hw, int c, float *y, const void *x, float scale,
		  int u8);
int wf_cpu_accumulate(wf_backend *be, size_t n, float *y, const float *x);
int wf_cpu_scale(wf_backend *be, size_t n, float *y, const float *x, float alpha);
int wf_cpu_concat_forward(wf_backend *be, size_t rows, int k, const int *widths, float *y,
			  const float *const *xs);
int wf_cpu_concat_backward(wf_backend *be, size_t rows, int k, const int *widths, float *const *dxs,
			   const float *dy);
int wf_cpu_gap_forward(wf_backend *be, int n, int hw, int c, float *y, const float *x);
int wf_cpu_gap_backward(wf_backend *be, int n, int hw, int c, float *dx, const float *dy);
/* Pooling of a 1x1 window (kernels.h: wf_pool_desc), esize bytes an element. */
int wf_cpu_pool_pick(const wf_pool_desc *d, void *y, const void *x, size_t esize);
int wf_cpu_concat_u8(wf_backend *be, size_t rows, int k, const int *widths, void *y,
		     const void *const *xs, unsigned u8_in, float scale);
int wf_cpu_pad_forward(wf_backend *be, const wf_pad_desc *d, float *y, const float *x);
int wf_cpu_pad_backward(wf_backend *be, const wf_pad_desc *d, float *dx, const float *dy);
int wf_cpu_dropout_forward(wf_backend *be, size_t n, float rate, uint64_t seed, float *y,
			   uint8_t *mask, const float *x);
int wf_cpu_dropout_backward(wf_backend *be, size_t n, float rate, float *dx, const float *dy,
			    const uint8_t *mask);
int wf_cpu_softmax_xent_forward(wf_backend *be, int n, int k, float *probs, float *losses,
				const float *logits, const int32_t *labels);
int wf_cpu_softmax_xent_backward(wf_backend *be, int n, int k, float *dlogits, const float *probs,
				 const int32_t *labels, float scale);
int wf_cpu_optimizer_update(wf_backend *be, const wf_opt_desc *d, size_t n, float *p,
			    const float *g, float *m, float *v);

/* y[i] += x[i] over n floats, parallel when n is large (used for param grads). */
void wf_cpu_add_into(float *y, const float *x, size_t n);

#endif
