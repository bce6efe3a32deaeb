/* cuda_kernels.cu: the CUDA backend's own kernels, for the ops no library
 * call fits: elementwise ops, casts and weight transposes, concat, pooling
 * (with ref's exact tie and padding rules), global average pool, padding,
 * dropout (the same hash as wf_dropout_keep), softmax cross-entropy and the
 * optimizer over the whole flat buffer in one launch. Each launcher queues on
 * the caller's stream and reports the launch status; nothing synchronises. */
#include "kernels/cuda/cuda_priv.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>

#define WFK_THREADS 256

/* Blocks for a grid-stride loop over n elements. */
static unsigned blocks_for(size_t n)
{
	size_t b = (n + WFK_THREADS - 1) / WFK_THREADS;
	if (b == 0)
		b = 1;
	return (unsigned)(b < 65535u * 8u ? b : 65535u * 8u);
}

#define GRID_LOOP(i, n)                                                                            \
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);                    \
	     i += (size_t)gridDim.x * blockDim.x)

#define LAUNCH(kernel, n, s, ...)                                                                  \
	do {                                                                                       \
		if ((n) == 0)                                                                      \
			return cudaSuccess;                                                        \
		kernel<<<blocks_for(n), WFK_THREADS, 0, s>>>(__VA_ARGS__);                         \
		return cudaGetLastError();                                                         \
	} while (0)

/* ---- elementwise ------------------------------------------------------------ */

__global__ void k_act_forward(int relu6, size_t n, float *y, const float *x)
{
	GRID_LOOP(i, n)
	{
		float v = x[i] > 0.0f ? x[i] : 0.0f;
		y[i] = (relu6 && v > 6.0f) ? 6.0f : v;
	}
}

__global__ void k_act_backward(int relu6, size_t n, float *dx, const float *dy, const float *y)
{
	GRID_LOOP(i, n)
	{
		float v = y[i];
		int pass = v > 0.0f && (!relu6 || v < 6.0f);
		dx[i] = pass ? dy[i] : 0.0f;
	}
}

__global__ void k_add(size_t n, float *y, const float *a, const float *b)
{
	GRID_LOOP(i, n) y[i] = a[i] + b[i];
}

__global__ void k_accumulate(size_t n, float *y, const float *x)
{
	GRID_LOOP(i, n) y[i] += x[i];
}

__global__ void k_scale(size_t n, float *y, const float *x, float alpha)
{
	GRID_LOOP(i, n) y[i] = alpha * x[i];
}

__global__ void k_fill(size_t n, float *y, float v)
{
	GRID_LOOP(i, n) y[i] = v;
}

__global__ void k_bias_add(size_t n, int cols, float *y, const float *b)
{
	GRID_LOOP(i, n) y[i] += b[i % (size_t)cols];
}

extern "C" cudaError_t wfk_act_forward(cudaStream_t s, int relu6, size_t n, float *y,
				       const float *x)
{
	LAUNCH(k_act_forward, n, s, relu6, n, y, x);
}

extern "C" cudaError_t wfk_act_backward(cudaStream_t s, int relu6, size_t n, float *dx,
					const float *dy, const float *y)
{
	LAUNCH(k_act_backward, n, s, relu6, n, dx, dy, y);
}

extern "C" cudaError_t wfk_add(cudaStream_t s, size_t n, float *y, const float *a, const float *b)
{
	LAUNCH(k_add, n, s, n, y, a, b);
}

extern "C" cudaError_t wfk_accumulate(cudaStream_t s, size_t n, float *y, const float *x)
{
	LAUNCH(k_accumulate, n, s, n, y, x);
}

extern "C" cudaError_t wfk_scale(cudaStream_t s, size_t n, float *y, const float *x, float alpha)
{
	LAUNCH(k_scale, n, s, n, y, x, alpha);
}

extern "C" cudaError_t wfk_fill(cudaStream_t s, size_t n, float *y, float v)
{
	LAUNCH(k_fill, n, s, n, y, v);
}

extern "C" cudaError_t wfk_bias_add(cudaStream_t s, size_t rows, int cols, float *y, const float *b)
{
	size_t n = rows * (size_t)cols;
	LAUNCH(k_bias_add, n, s, n, cols, y, b);
}

/* ---- casts and transposes ---------------------------------------------------- */

__device__ static inline float load_as_float(const void *p, wfk_type t, size_t i)
{
	if (t == WFK_BF16)
		return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
	if (t == WFK_F16)
		return __half2float(((const __half *)p)[i]);
	return ((const float *)p)[i];
}

__device__ static inline void store_as(void *p, wfk_type t, size_t i, float v)
{
	if (t == WFK_BF16)
		((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn(v);
	else if (t == WFK_F16)
		((__half *)p)[i] = __float2half_rn(v);
	else
		((float *)p)[i] = v;
}

__global__ void k_cast(size_t n, void *dst, wfk_type t, const float *src)
{
	GRID_LOOP(i, n) store_as(dst, t, i, src[i]);
}

__global__ void k_uncast_bias(size_t n, int cols, float *dst, const void *src, wfk_type t,
			      const float *b)
{
	GRID_LOOP(i, n)
	{
		float v = load_as_float(src, t, i);
		dst[i] = b ? v + b[i % (size_t)cols] : v;
	}
}

__global__ void k_uncast_acc(size_t n, float *dst, const void *src, wfk_type t)
{
	GRID_LOOP(i, n) dst[i] += load_as_float(src, t, i);
}

/* Element i of dst [cols,rows] is (c = i / rows, r = i % rows): reads are
 * strided, writes coalesced. Weights are small, so this is never hot. */
__global__ void k_transpose(size_t rows, size_t cols, void *dst, wfk_type t, const float *src)
{
	GRID_LOOP(i, rows * cols)
	{
		size_t c = i / rows, r = i % rows;
		store_as(dst, t, i, src[r * cols + c]);
	}
}

/* Element i of dst [rows,cols] gathers src [cols,rows]. */
__global__ void k_transpose_acc(size_t rows, size_t cols, float *dst, const void *src, wfk_type t)
{
	GRID_LOOP(i, rows * cols)
	{
		size_t r = i / cols, c = i % cols;
		dst[i] += load_as_float(src, t, c * rows + r);
	}
}

extern "C" cudaError_t wfk_cast(cudaStream_t s, size_t n, void *dst, wfk_type t, const float *src)
{
	LAUNCH(k_cast, n, s, n, dst, t, src);
}

extern "C" cudaError_t wfk_uncast_bias(cudaStream_t s, size_t rows, int cols, float *dst,
				       const void *src, wfk_type t, const float *b)
{
	size_t n = rows * (size_t)cols;
	LAUNCH(k_uncast_bias, n, s, n, cols, dst, src, t, b);
}

extern "C" cudaError_t wfk_uncast_acc(cudaStream_t s, size_t n, float *dst, const void *src,
				      wfk_type t)
{
	LAUNCH(k_uncast_acc, n, s, n, dst, src, t);
}

extern "C" cudaError_t wfk_transpose(cudaStream_t s, size_t rows, size_t cols, void *dst,
				     wfk_type t, const float *src)
{
	LAUNCH(k_transpose, rows * cols, s, rows, cols, dst, t, src);
}

extern "C" cudaError_t wfk_transpose_acc(cudaStream_t s, size_t rows, size_t cols, float *dst,
					 const void *src, wfk_type t)
{
	LAUNCH(k_transpose_acc, rows * cols, s, rows, cols, dst, src, t);
}

/* ---- concat ---------------------------------------------------------------- */

__global__ void k_concat_in(size_t rows, int w, size_t total, size_t off, float *y, const float *x)
{
	GRID_LOOP(i, rows * (size_t)w)
	{
		size_t r = i / (size_t)w, j = i % (size_t)w;
		y[r * total + off + j] = x[i];
	}
}

__global__ void k_concat_out(size_t rows, int w, size_t total, size_t off, float *dx,
			     const float *dy)
{
	GRID_LOOP(i, rows * (size_t)w)
	{
		size_t r = i / (size_t)w, j = i % (size_t)w;
		dx[i] = dy[r * total + off + j];
	}
}

extern "C" cudaError_t wfk_concat_in(cudaStream_t s, size_t rows, int w, size_t total, size_t off,
				     float *y, const float *x)
{
	LAUNCH(k_concat_in, rows * (size_t)w, s, rows, w, total, off, y, x);
}

extern "C" cudaError_t wfk_concat_out(cudaStream_t s, size_t rows, int w, size_t total, size_t off,
				      float *dx, const float *dy)
{
	LAUNCH(k_concat_out, rows * (size_t)w, s, rows, w, total, off, dx, dy);
}

/* ---- pooling ----------------------------------------------------------------- */

/* The window of output (oy, ox) clipped to the input, as ref's pool_window. */
__device__ static inline void pool_window(const wf_pool_desc d, int oy, int ox, int *y0, int *y1,
					  int *x0, int *x1)
{
	int ys = oy * d.sh - d.pt, xs = ox * d.sw - d.pl;
	*y0 = ys > 0 ? ys : 0;
	*y1 = ys + d.kh < d.h ? ys + d.kh : d.h;
	*x0 = xs > 0 ? xs : 0;
	*x1 = xs + d.kw < d.w ? xs + d.kw : d.w;
}

__global__ void k_pool_forward(const wf_pool_desc d, float *y, const float *x)
{
	size_t n = (size_t)d.n * d.oh * d.ow * d.c;
	GRID_LOOP(i, n)
	{
		int c = (int)(i % d.c);
		size_t t = i / d.c;
		int ox = (int)(t % d.ow);
		t /= d.ow;
		int oy = (int)(t % d.oh);
		size_t b = t / d.oh;
		int y0, y1, x0, x1;
		pool_window(d, oy, ox, &y0, &y1, &x0, &x1);
		float best = -INFINITY, acc = 0.0f;
		for (int iy = y0; iy < y1; iy++)
			for (int ix = x0; ix < x1; ix++) {
				float v = x[((b * d.h + iy) * d.w + ix) * d.c + c];
				acc += v;
				best = v > best ? v : best;
			}
		int count = (y1 - y0) * (x1 - x0); /* padding excluded */
		y[i] = d.kind == WF_POOL_MAX ? best : acc / (float)count;
	}
}

/* Gather: input cell (iy, ix) sums dy over the outputs whose window holds
 * it; for max only where it is the window's first maximum (row-major scan),
 * which is the cell ref routes the gradient to. Deterministic, no atomics. */
__global__ void k_pool_backward(const wf_pool_desc d, float *dx, const float *dy, const float *x)
{
	size_t n = (size_t)d.n * d.h * d.w * d.c;
	GRID_LOOP(i, n)
	{
		int c = (int)(i % d.c);
		size_t t = i / d.c;
		int ix = (int)(t % d.w);
		t /= d.w;
		int iy = (int)(t % d.h);
		size_t b = t / d.h;
		/* outputs with oy*sh - pt <= iy < oy*sh - pt + kh */
		int oy_lo = iy + d.pt - d.kh + 1, ox_lo = ix + d.pl - d.kw + 1;
		oy_lo = oy_lo > 0 ? (oy_lo + d.sh - 1) / d.sh : 0;
		ox_lo = ox_lo > 0 ? (ox_lo + d.sw - 1) / d.sw : 0;
		int oy_hi = (iy + d.pt) / d.sh, ox_hi = (ix + d.pl) / d.sw;
		oy_hi = oy_hi < d.oh - 1 ? oy_hi : d.oh - 1;
		ox_hi = ox_hi < d.ow - 1 ? ox_hi : d.ow - 1;
		float acc = 0.0f;
		for (int oy = oy_lo; oy <= oy_hi; oy++)
			for (int ox = ox_lo; ox <= ox_hi; ox++) {
				int y0, y1, x0, x1;
				pool_window(d, oy, ox, &y0, &y1, &x0, &x1);
				float g = dy[((b * d.oh + oy) * d.ow + ox) * d.c + c];
				if (d.kind == WF_POOL_AVG) {
					acc += g / (float)((y1 - y0) * (x1 - x0));
					continue;
				}
				int ay = -1, ax = -1;
				float best = 0.0f;
				for (int wy = y0; wy < y1; wy++)
					for (int wx = x0; wx < x1; wx++) {
						float v = x[((b * d.h + wy) * d.w + wx) * d.c + c];
						if (ay < 0 || v > best)
							best = v, ay = wy, ax = wx;
					}
				if (ay == iy && ax == ix)
					acc += g;
			}
		dx[i] = acc;
	}
}

extern "C" cudaError_t wfk_pool_forward(cudaStream_t s, const wf_pool_desc *d, float *y,
					const float *x)
{
	size_t n = (size_t)d->n * d->oh * d->ow * d->c;
	LAUNCH(k_pool_forward, n, s, *d, y, x);
}

extern "C" cudaError_t wfk_pool_backward(cudaStream_t s, const wf_pool_desc *d, float *dx,
					 const float *dy, const float *x)
{
	size_t n = (size_t)d->n * d->h * d->w * d->c;
	LAUNCH(k_pool_backward, n, s, *d, dx, dy, x);
}

/* ---- global average pool ----------------------------------------------------- */

__global__ void k_gap_forward(int n, int hw, int c, float *y, const float *x)
{
	GRID_LOOP(i, (size_t)n * c)
	{
		size_t s = i / c, ch = i % c;
		float acc = 0.0f;
		for (int p = 0; p < hw; p++)
			acc += x[(s * hw + p) * c + ch];
		y[i] = acc / (float)hw;
	}
}

__global__ void k_gap_backward(int n, int hw, int c, float *dx, const float *dy)
{
	GRID_LOOP(i, (size_t)n * hw * c)
	{
		size_t ch = i % c, s = i / ((size_t)hw * c);
		dx[i] = dy[s * c + ch] / (float)hw;
	}
}

extern "C" cudaError_t wfk_gap_forward(cudaStream_t s, int n, int hw, int c, float *y,
				       const float *x)
{
	LAUNCH(k_gap_forward, (size_t)n * c, s, n, hw, c, y, x);
}

extern "C" cudaError_t wfk_gap_backward(cudaStream_t s, int n, int hw, int c, float *dx,
					const float *dy)
{
	LAUNCH(k_gap_backward, (size_t)n * hw * c, s, n, hw, c, dx, dy);
}

/* ---- zero padding / cropping ------------------------------------------------------ */

__global__ void k_pad_forward(const wf_pad_desc d, float *y, const float *x)
{
	int oh = d.h + d.pt + d.pb, ow = d.w + d.pl + d.pr;
	GRID_LOOP(i, (size_t)d.n * oh * ow * d.c)
	{
		int c = (int)(i % d.c);
		size_t t = i / d.c;
		int ox = (int)(t % ow);
		t /= ow;
		int oy = (int)(t % oh);
		size_t b = t / oh;
		int iy = oy - d.pt, ix = ox - d.pl;
		int inside = iy >= 0 && iy < d.h && ix >= 0 && ix < d.w;
		y[i] = inside ? x[((b * d.h + iy) * d.w + ix) * d.c + c] : 0.0f;
	}
}

__global__ void k_pad_backward(const wf_pad_desc d, float *dx, const float *dy)
{
	int oh = d.h + d.pt + d.pb, ow = d.w + d.pl + d.pr;
	GRID_LOOP(i, (size_t)d.n * d.h * d.w * d.c)
	{
		int c = (int)(i % d.c);
		size_t t = i / d.c;
		int ix = (int)(t % d.w);
		t /= d.w;
		int iy = (int)(t % d.h);
		size_t b = t / d.h;
		int oy = iy + d.pt, ox = ix + d.pl;
		int kept = oy >= 0 && oy < oh && ox >= 0 && ox < ow;
		dx[i] = kept ? dy[((b * oh + oy) * ow + ox) * d.c + c] : 0.0f;
	}
}

extern "C" cudaError_t wfk_pad_forward(cudaStream_t s, const wf_pad_desc *d, float *y,
				       const float *x)
{
	size_t n = (size_t)d->n * (d->h + d->pt + d->pb) * (d->w + d->pl + d->pr) * d->c;
	LAUNCH(k_pad_forward, n, s, *d, y, x);
}

extern "C" cudaError_t wfk_pad_backward(cudaStream_t s, const wf_pad_desc *d, float *dx,
					const float *dy)
{
	size_t n = (size_t)d->n * d->h * d->w * d->c;
	LAUNCH(k_pad_backward, n, s, *d, dx, dy);
}

/* ---- dropout ------------------------------------------------------------------------ */

/* Bit for bit the host's wf_dropout_keep (kernels.h), so masks match ref. */
__device__ static inline int dropout_keep(uint64_t seed, uint64_t i, float rate)
{
	uint64_t x = seed + 0x9e3779b97f4a7c15ULL * (i + 1);
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
	x ^= x >> 31;
	return (double)(x >> 11) * (1.0 / 9007199254740992.0) >= (double)rate;
}

__global__ void k_dropout_forward(size_t n, float rate, uint64_t seed, float *y, uint8_t *mask,
				  const float *x)
{
	float keep_scale = 1.0f / (1.0f - rate);
	GRID_LOOP(i, n)
	{
		int keep = dropout_keep(seed, i, rate);
		if (mask)
			mask[i] = (uint8_t)keep;
		y[i] = keep ? x[i] * keep_scale : 0.0f;
	}
}

__global__ void k_dropout_backward(size_t n, float rate, float *dx, const float *dy,
				   const uint8_t *mask)
{
	float keep_scale = 1.0f / (1.0f - rate);
	GRID_LOOP(i, n) dx[i] = mask[i] ? dy[i] * keep_scale : 0.0f;
}

extern "C" cudaError_t wfk_dropout_forward(cudaStream_t s, size_t n, float rate, uint64_t seed,
					   float *y, uint8_t *mask, const float *x)
{
	LAUNCH(k_dropout_forward, n, s, n, rate, seed, y, mask, x);
}

extern "C" cudaError_t wfk_dropout_backward(cudaStream_t s, size_t n, float rate, float *dx,
					    const float *dy, const uint8_t *mask)
{
	LAUNCH(k_dropout_backward, n, s, n, rate, dx, dy, mask);
}

/* ---- softmax cross-entropy --------------------------------------------------------------- */

#define XENT_THREADS 128

/* Block-wide reduction of one value per thread (max when is_max, else sum). */
__device__ static float block_reduce(float v, int is_max, float *shared)
{
	for (int o = 16; o > 0; o /= 2) {
		float u = __shfl_down_sync(0xffffffffu, v, o);
		v = is_max ? fmaxf(v, u) : v + u;
	}
	int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
	if (lane == 0)
		shared[warp] = v;
	__syncthreads();
	if (threadIdx.x == 0) {
		float r = shared[0];
		for (int w = 1; w < (int)(blockDim.x / 32); w++)
			r = is_max ? fmaxf(r, shared[w]) : r + shared[w];
		shared[32] = r;
	}
	__syncthreads();
	float r = shared[32];
	__syncthreads();
	return r;
}

/* A label outside [0,k) is recorded in bad[] (first row wins) and read back
 * by the host at the next synchronisation; the row's loss is left NaN. */
__device__ static int label_ok(const int32_t *labels, int row, int k, int *bad)
{
	int32_t l = labels[row];
	if (l >= 0 && l < k)
		return 1;
	if (threadIdx.x == 0 && atomicCAS(&bad[0], 0, row + 1) == 0)
		bad[1] = l;
	return 0;
}

/* One block per row: max, sum of exp, probabilities, -log p[label]. */
__global__ void k_xent_forward(int k, float *probs, float *losses, const float *logits,
			       const int32_t *labels, int *bad)
{
	__shared__ float shared[33];
	int row = blockIdx.x;
	const float *z = logits + (size_t)row * k;
	float mx = -INFINITY;
	for (int j = threadIdx.x; j < k; j += blockDim.x)
		mx = fmaxf(mx, z[j]);
	mx = block_reduce(mx, 1, shared);
	float sum = 0.0f;
	for (int j = threadIdx.x; j < k; j += blockDim.x)
		sum += expf(z[j] - mx);
	sum = block_reduce(sum, 0, shared);
	for (int j = threadIdx.x; j < k; j += blockDim.x)
		probs[(size_t)row * k + j] = expf(z[j] - mx) / sum;
	if (labels && losses && threadIdx.x == 0) {
		if (label_ok(labels, row, k, bad))
			losses[row] = logf(sum) - (z[labels[row]] - mx);
		else
			losses[row] = NAN;
	}
}

__global__ void k_xent_backward(int n, int k, float *dlogits, const float *probs,
				const int32_t *labels, float scale, int *bad)
{
	GRID_LOOP(i, (size_t)n * k)
	{
		int row = (int)(i / k), j = (int)(i % k);
		int32_t l = labels[row];
		if (j == 0 && (l < 0 || l >= k) && atomicCAS(&bad[0], 0, row + 1) == 0)
			bad[1] = l;
		float t = j == l ? 1.0f : 0.0f;
		dlogits[i] = (probs[i] - t) * scale;
	}
}

extern "C" cudaError_t wfk_softmax_xent_forward(cudaStream_t s, int n, int k, float *probs,
						float *losses, const float *logits,
						const int32_t *labels, int *bad)
{
	if (n <= 0)
		return cudaSuccess;
	k_xent_forward<<<n, XENT_THREADS, 0, s>>>(k, probs, losses, logits, labels, bad);
	return cudaGetLastError();
}

extern "C" cudaError_t wfk_softmax_xent_backward(cudaStream_t s, int n, int k, float *dlogits,
						 const float *probs, const int32_t *labels,
						 float scale, int *bad)
{
	LAUNCH(k_xent_backward, (size_t)n * k, s, n, k, dlogits, probs, labels, scale, bad);
}

/* ---- optimizer --------------------------------------------------------------------------------
 */

/* The formulas of ref_optimizer_update, in double like ref, one thread per
 * parameter over the whole flat buffer. */
__global__ void k_optimizer(const wf_opt_desc d, double c1, double c2, size_t n, float *p,
			    const float *g, float *m, float *v)
{
	double lr = d.lr, wd = d.weight_decay;
	GRID_LOOP(i, n)
	{
		double pi = p[i];
		if (d.kind == WF_OPT_SGD) {
			double mom = d.momentum;
			double gi = (double)g[i] * d.grad_scale + wd * pi;
			if (mom == 0.0) {
				p[i] = (float)(pi - lr * gi);
				continue;
			}
			double mi = mom * m[i] + gi;
			m[i] = (float)mi;
			p[i] = (float)(d.nesterov ? pi - lr * (gi + mom * mi) : pi - lr * mi);
			continue;
		}
		double gi = (double)g[i] * d.grad_scale;
		if (d.kind == WF_OPT_ADAM)
			gi += wd * pi;
		double mi = d.beta1 * (double)m[i] + (1.0 - d.beta1) * gi;
		double vi = d.beta2 * (double)v[i] + (1.0 - d.beta2) * gi * gi;
		m[i] = (float)mi;
		v[i] = (float)vi;
		double upd = (mi / c1) / (sqrt(vi / c2) + d.eps);
		if (d.kind == WF_OPT_ADAMW)
			upd += wd * pi; /* decoupled weight decay */
		p[i] = (float)(pi - lr * upd);
	}
}

extern "C" cudaError_t wfk_optimizer(cudaStream_t s, const wf_opt_desc *d, double c1, double c2,
				     size_t n, float *p, const float *g, float *m, float *v)
{
	LAUNCH(k_optimizer, n, s, *d, c1, c2, n, p, g, m, v);
}

/* ---- batch norm over NHWC --------------------------------------------------- */
/* cuDNN's legacy batch norm on NHWC float32 ran at a small fraction of memory
 * bandwidth on an H100 (resnet50: 480 of 570 ms per step). These read each
 * tensor once per pass: a per-channel reduction (32 channels x 8 rows per
 * block, coalesced along C, float partials over at most 32 rows per thread,
 * then double atomics), a per-channel finish, and an elementwise pass. */

#define BN_TX 32
#define BN_TY 8

__global__ void k_bn_reduce(size_t rows, int C, double *acc, const float *x, const float *dy,
			    const float *center)
{
	int c = blockIdx.x * BN_TX + threadIdx.x;
	float s1 = 0.0f, s2 = 0.0f;
	if (c < C) {
		/* statistics: shifted by the first row against cancellation */
		float k = dy ? center[c] : x[c];
		for (size_t r = (size_t)blockIdx.y * BN_TY + threadIdx.y; r < rows;
		     r += (size_t)gridDim.y * BN_TY) {
			float a = x[r * C + c] - k;
			if (dy) {
				float g = dy[r * C + c];
				s1 += g;
				s2 += g * a;
			} else {
				s1 += a;
				s2 += a * a;
			}
		}
	}
	__shared__ float sh[2][BN_TY][BN_TX];
	sh[0][threadIdx.y][threadIdx.x] = s1;
	sh[1][threadIdx.y][threadIdx.x] = s2;
	__syncthreads();
	if (threadIdx.y == 0 && c < C) {
		double t1 = 0.0, t2 = 0.0;
		for (int i = 0; i < BN_TY; i++) {
			t1 += sh[0][i][threadIdx.x];
			t2 += sh[1][i][threadIdx.x];
		}
		atomicAdd(&acc[c], t1);
		atomicAdd(&acc[C + c], t2);
	}
}

extern "C" cudaError_t wfk_bn_reduce(cudaStream_t s, size_t rows, int C, double *acc,
				     const float *x, const float *dy, const float *center)
{
	if (rows == 0 || C <= 0)
		return cudaSuccess;
	size_t gy = (rows + BN_TY * 32 - 1) / (BN_TY * 32);
	dim3 grid((unsigned)((C + BN_TX - 1) / BN_TX), (unsigned)(gy < 65535 ? gy : 65535));
	k_bn_reduce<<<grid, dim3(BN_TX, BN_TY), 0, s>>>(rows, C, acc, x, dy, center);
	return cudaGetLastError();
}

__global__ void k_bn_stats(size_t rows, int C, float eps, float momentum, const double *acc,
			   const float *x, const float *gamma, const float *beta, float *save_mean,
			   float *save_invstd, float *run_mean, float *run_var, float *coef)
{
	int c = blockIdx.x * blockDim.x + threadIdx.x;
	if (c >= C)
		return;
	double m = (double)rows, d1 = acc[c] / m;
	double var = fmax(acc[C + c] / m - d1 * d1, 0.0); /* biased: normalises */
	double mean = (double)x[c] + d1, inv = 1.0 / sqrt(var + (double)eps);
	if (save_mean)
		save_mean[c] = (float)mean;
	if (save_invstd)
		save_invstd[c] = (float)inv;
	double unbiased = rows > 1 ? var * m / (m - 1.0) : var, mom = momentum;
	if (run_mean)
		run_mean[c] = (float)(mom * run_mean[c] + (1.0 - mom) * mean);
	if (run_var)
		run_var[c] = (float)(mom * run_var[c] + (1.0 - mom) * unbiased);
	coef[c] = (float)((gamma ? gamma[c] : 1.0) * inv);
	coef[C + c] = (float)mean;
	coef[2 * C + c] = beta ? beta[c] : 0.0f;
}

extern "C" cudaError_t wfk_bn_stats(cudaStream_t s, size_t rows, int C, float eps, float momentum,
				    const double *acc, const float *x, const float *gamma,
				    const float *beta, float *save_mean, float *save_invstd,
				    float *run_mean, float *run_var, float *coef)
{
	k_bn_stats<<<(C + WFK_THREADS - 1) / WFK_THREADS, WFK_THREADS, 0, s>>>(
		rows, C, eps, momentum, acc, x, gamma, beta, save_mean, save_invstd, run_mean,
		run_var, coef);
	return cudaGetLastError();
}

__global__ void k_bn_infer_coef(int C, float eps, const float *gamma, const float *beta,
				const float *run_mean, const float *run_var, float *coef)
{
	int c = blockIdx.x * blockDim.x + threadIdx.x;
	if (c >= C)
		return;
	double inv = 1.0 / sqrt((double)run_var[c] + (double)eps);
	coef[c] = (float)((gamma ? gamma[c] : 1.0) * inv);
	coef[C + c] = run_mean[c];
	coef[2 * C + c] = beta ? beta[c] : 0.0f;
}

extern "C" cudaError_t wfk_bn_infer_coef(cudaStream_t s, int C, float eps, const float *gamma,
					 const float *beta, const float *run_mean,
					 const float *run_var, float *coef)
{
	k_bn_infer_coef<<<(C + WFK_THREADS - 1) / WFK_THREADS, WFK_THREADS, 0, s>>>(
		C, eps, gamma, beta, run_mean, run_var, coef);
	return cudaGetLastError();
}

/* y = (x - mean) * scale + beta, coef = [scale | mean | beta]. */
__global__ void k_bn_apply(size_t n, int C, float *y, const float *x, const float *coef)
{
	GRID_LOOP(i, n)
	{
		int c = (int)(i % (size_t)C);
		y[i] = (x[i] - coef[C + c]) * coef[c] + coef[2 * C + c];
	}
}

extern "C" cudaError_t wfk_bn_apply(cudaStream_t s, size_t rows, int C, float *y, const float *x,
				    const float *coef)
{
	size_t n = rows * (size_t)C;
	LAUNCH(k_bn_apply, n, s, n, C, y, x, coef);
}

/* From acc = [sum dy | sum dy * (x - mean)]: dbeta += sum dy, dgamma +=
 * sum dy * xhat, and coef = [A | E | B | mean] for
 * dx = A * (dy - E) - B * (x - mean), A = gamma * invstd, E = mean of dy,
 * B = gamma * invstd^3 * sum(dy * (x - mean)) / m. */
__global__ void k_bn_backward_coef(size_t rows, int C, const double *acc, const float *gamma,
				   const float *save_mean, const float *save_invstd, float *dgamma,
				   float *dbeta, float *coef)
{
	int c = blockIdx.x * blockDim.x + threadIdx.x;
	if (c >= C)
		return;
	double m = (double)rows, s1 = acc[c], s2 = acc[C + c], inv = save_invstd[c];
	double g = gamma ? gamma[c] : 1.0;
	if (dbeta)
		dbeta[c] += (float)s1;
	if (dgamma)
		dgamma[c] += (float)(s2 * inv);
	coef[c] = (float)(g * inv);
	coef[C + c] = (float)(s1 / m);
	coef[2 * C + c] = (float)(g * inv * inv * inv * s2 / m);
	coef[3 * C + c] = save_mean[c];
}

extern "C" cudaError_t wfk_bn_backward_coef(cudaStream_t s, size_t rows, int C, const double *acc,
					    const float *gamma, const float *save_mean,
					    const float *save_invstd, float *dgamma, float *dbeta,
					    float *coef)
{
	k_bn_backward_coef<<<(C + WFK_THREADS - 1) / WFK_THREADS, WFK_THREADS, 0, s>>>(
		rows, C, acc, gamma, save_mean, save_invstd, dgamma, dbeta, coef);
	return cudaGetLastError();
}

__global__ void k_bn_dx(size_t n, int C, float *dx, const float *dy, const float *x,
			const float *coef)
{
	GRID_LOOP(i, n)
	{
		int c = (int)(i % (size_t)C);
		dx[i] = coef[c] * (dy[i] - coef[C + c]) -
			coef[2 * C + c] * (x[i] - coef[3 * C + c]);
	}
}

extern "C" cudaError_t wfk_bn_dx(cudaStream_t s, size_t rows, int C, float *dx, const float *dy,
				 const float *x, const float *coef)
{
	size_t n = rows * (size_t)C;
	LAUNCH(k_bn_dx, n, s, n, C, dx, dy, x, coef);
}
