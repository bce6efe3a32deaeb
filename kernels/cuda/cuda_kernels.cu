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
#include <type_traits>

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

/* ---- typed values ---------------------------------------------------------- */
/* Tensors are float, bf16 or fp16; elementwise kernels move 8 values per
 * thread (16 bytes of a 2-byte type, 32 of float) when the caller's sizes
 * and pointers allow (vec8), else one. */

typedef __nv_bfloat16 bf16_t;

__device__ static inline float to_f(float v)
{
	return v;
}

__device__ static inline float to_f(bf16_t v)
{
	return __bfloat162float(v);
}

__device__ static inline float to_f(__half v)
{
	return __half2float(v);
}

__device__ static inline void put_f(float *p, float v)
{
	*p = v;
}

__device__ static inline void put_f(bf16_t *p, float v)
{
	*p = __float2bfloat16_rn(v);
}

__device__ static inline void put_f(__half *p, float v)
{
	*p = __float2half_rn(v);
}

/* V consecutive values at p (16-byte aligned when V = 8) as float. */
template <int V, typename T> __device__ static inline void ldv(const T *p, float *v)
{
	if constexpr (V == 8 && std::is_same<T, bf16_t>::value) {
		uint4 u = *(const uint4 *)p;
		const __nv_bfloat162 *h = (const __nv_bfloat162 *)&u;
		for (int k = 0; k < 4; k++) {
			float2 f = __bfloat1622float2(h[k]);
			v[2 * k] = f.x, v[2 * k + 1] = f.y;
		}
	} else if constexpr (V == 8 && std::is_same<T, __half>::value) {
		uint4 u = *(const uint4 *)p;
		const __half2 *h = (const __half2 *)&u;
		for (int k = 0; k < 4; k++) {
			float2 f = __half22float2(h[k]);
			v[2 * k] = f.x, v[2 * k + 1] = f.y;
		}
	} else if constexpr (V == 8) {
		float4 a = ((const float4 *)p)[0], b = ((const float4 *)p)[1];
		v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w;
		v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
	} else {
		for (int k = 0; k < V; k++)
			v[k] = to_f(p[k]);
	}
}

template <int V, typename T> __device__ static inline void stv(T *p, const float *v)
{
	if constexpr (V == 8 && std::is_same<T, bf16_t>::value) {
		uint4 u;
		__nv_bfloat162 *h = (__nv_bfloat162 *)&u;
		for (int k = 0; k < 4; k++)
			h[k] = __floats2bfloat162_rn(v[2 * k], v[2 * k + 1]);
		*(uint4 *)p = u;
	} else if constexpr (V == 8 && std::is_same<T, __half>::value) {
		uint4 u;
		__half2 *h = (__half2 *)&u;
		for (int k = 0; k < 4; k++)
			h[k] = __floats2half2_rn(v[2 * k], v[2 * k + 1]);
		*(uint4 *)p = u;
	} else if constexpr (V == 8) {
		((float4 *)p)[0] = make_float4(v[0], v[1], v[2], v[3]);
		((float4 *)p)[1] = make_float4(v[4], v[5], v[6], v[7]);
	} else {
		for (int k = 0; k < V; k++)
			put_f(p + k, v[k]);
	}
}

/* 8 values a thread when n is a multiple of 8 (and of the channel count's
 * period, where there is one) and every pointer is 16-byte aligned. */
static int vec8(size_t n, int period, const void *a, const void *b, const void *c, const void *d)
{
	const void *ps[4] = {a, b, c, d};
	if (n % 8 || (period && period % 8))
		return 0;
	for (int i = 0; i < 4; i++)
		if ((uintptr_t)ps[i] % 16)
			return 0;
	return 1;
}

static unsigned blocks_vec(size_t n, int v)
{
	return blocks_for(n / (size_t)v);
}

/* Launch kernel<V, T> over n values: V = 8 when vec, else 1. */
#define LAUNCH_V(kernel, T, n, vec, s, ...)                                                        \
	do {                                                                                       \
		if ((n) == 0)                                                                      \
			return cudaSuccess;                                                        \
		if (vec)                                                                           \
			kernel<8, T><<<blocks_vec(n, 8), WFK_THREADS, 0, s>>>(__VA_ARGS__);        \
		else                                                                               \
			kernel<1, T><<<blocks_for(n), WFK_THREADS, 0, s>>>(__VA_ARGS__);           \
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

/* ---- casts, bias adds and transposes --------------------------------------- */

__device__ static inline float load_as_float(const void *p, wfk_type t, size_t i)
{
	if (t == WFK_BF16)
		return __bfloat162float(((const bf16_t *)p)[i]);
	if (t == WFK_F16)
		return __half2float(((const __half *)p)[i]);
	return ((const float *)p)[i];
}

/* y = x (+ b[c], b may be NULL) (+ y when acc), converted between types. */
template <int V, typename TI, typename TO>
__global__ void k_convert(size_t n, int cols, TO *y, const TI *x, const float *b, int acc)
{
	GRID_LOOP(j, n / V)
	{
		size_t i = j * V;
		float v[V], o[V];
		ldv<V>(x + i, v);
		if (b) {
			ldv<V>(b + i % (size_t)cols, o);
			for (int k = 0; k < V; k++)
				v[k] += o[k];
		}
		if (acc) {
			ldv<V>(y + i, o);
			for (int k = 0; k < V; k++)
				v[k] += o[k];
		}
		stv<V>(y + i, v);
	}
}

template <typename TI, typename TO>
static void convert_launch(cudaStream_t s, size_t n, int cols, void *y, const void *x,
			   const float *b, int acc)
{
	if (vec8(n, b ? cols : 0, y, x, b, NULL))
		k_convert<8, TI, TO><<<blocks_vec(n, 8), WFK_THREADS, 0, s>>>(
			n, cols, (TO *)y, (const TI *)x, b, acc);
	else
		k_convert<1, TI, TO><<<blocks_for(n), WFK_THREADS, 0, s>>>(n, cols, (TO *)y,
									   (const TI *)x, b, acc);
}

/* y (type yt) [rows, cols] = x (type xt) + b[cols] (+ y when acc); one of
 * the two types is float, or both are the same (a bias added in place). */
static cudaError_t convert(cudaStream_t s, size_t rows, int cols, void *y, wfk_type yt,
			   const void *x, wfk_type xt, const float *b, int acc)
{
	size_t n = rows * (size_t)cols;
	if (n == 0)
		return cudaSuccess;
#define CONVERT_CASE(a, b_, TI, TO)                                                                \
	if (xt == (a) && yt == (b_)) {                                                             \
		convert_launch<TI, TO>(s, n, cols, y, x, b, acc);                                  \
		return cudaGetLastError();                                                         \
	}
	CONVERT_CASE(WFK_F32, WFK_F32, float, float)
	CONVERT_CASE(WFK_F32, WFK_BF16, float, bf16_t)
	CONVERT_CASE(WFK_F32, WFK_F16, float, __half)
	CONVERT_CASE(WFK_BF16, WFK_F32, bf16_t, float)
	CONVERT_CASE(WFK_F16, WFK_F32, __half, float)
	CONVERT_CASE(WFK_BF16, WFK_BF16, bf16_t, bf16_t)
#undef CONVERT_CASE
	return cudaErrorInvalidValue;
}

extern "C" cudaError_t wfk_cast(cudaStream_t s, size_t n, void *dst, wfk_type t, const float *src)
{
	return convert(s, n, 1, dst, t, src, WFK_F32, NULL, 0);
}

extern "C" cudaError_t wfk_uncast_bias(cudaStream_t s, size_t rows, int cols, float *dst,
				       const void *src, wfk_type t, const float *b)
{
	return convert(s, rows, cols, dst, WFK_F32, src, t, b, 0);
}

extern "C" cudaError_t wfk_uncast_acc(cudaStream_t s, size_t n, float *dst, const void *src,
				      wfk_type t)
{
	return convert(s, n, 1, dst, WFK_F32, src, t, NULL, 1);
}

extern "C" cudaError_t wfk_bias_add(cudaStream_t s, size_t rows, int cols, void *y, wfk_type t,
				    const float *b)
{
	return convert(s, rows, cols, y, t, y, t, b, 0);
}

/* Weight layouts through shared-memory tiles, so that both the reads and
 * the writes are coalesced: a 32x32 tile per block of 32x8 threads. */
#define TILE 32

/* dst[c, r] = (type t) src[r, c]: src [rows, cols] float, dst [cols, rows]. */
template <typename TO>
__global__ void k_transpose(size_t rows, size_t cols, TO *dst, const float *src)
{
	__shared__ float tile[TILE][TILE + 1];
	size_t r0 = (size_t)blockIdx.y * TILE, c0 = (size_t)blockIdx.x * TILE;
	for (int k = threadIdx.y; k < TILE; k += blockDim.y) {
		size_t r = r0 + k, c = c0 + threadIdx.x;
		if (r < rows && c < cols)
			tile[k][threadIdx.x] = src[r * cols + c];
	}
	__syncthreads();
	for (int k = threadIdx.y; k < TILE; k += blockDim.y) {
		size_t c = c0 + k, r = r0 + threadIdx.x;
		if (r < rows && c < cols)
			put_f(dst + c * rows + r, tile[threadIdx.x][k]);
	}
}

/* dst[r, c] += src[c, r]: src [cols, rows] of type t, dst [rows, cols] float. */
template <typename TI>
__global__ void k_transpose_acc(size_t rows, size_t cols, float *dst, const TI *src)
{
	__shared__ float tile[TILE][TILE + 1];
	size_t r0 = (size_t)blockIdx.y * TILE, c0 = (size_t)blockIdx.x * TILE;
	for (int k = threadIdx.y; k < TILE; k += blockDim.y) {
		size_t c = c0 + k, r = r0 + threadIdx.x;
		if (r < rows && c < cols)
			tile[k][threadIdx.x] = to_f(src[c * rows + r]);
	}
	__syncthreads();
	for (int k = threadIdx.y; k < TILE; k += blockDim.y) {
		size_t r = r0 + k, c = c0 + threadIdx.x;
		if (r < rows && c < cols)
			dst[r * cols + c] += tile[threadIdx.x][k];
	}
}

static dim3 tiles(size_t rows, size_t cols)
{
	return dim3((unsigned)((cols + TILE - 1) / TILE), (unsigned)((rows + TILE - 1) / TILE));
}

extern "C" cudaError_t wfk_transpose(cudaStream_t s, size_t rows, size_t cols, void *dst,
				     wfk_type t, const float *src)
{
	if (rows == 0 || cols == 0)
		return cudaSuccess;
	dim3 g = tiles(rows, cols), b(TILE, 8);
	if (t == WFK_BF16)
		k_transpose<bf16_t><<<g, b, 0, s>>>(rows, cols, (bf16_t *)dst, src);
	else if (t == WFK_F16)
		k_transpose<__half><<<g, b, 0, s>>>(rows, cols, (__half *)dst, src);
	else
		k_transpose<float><<<g, b, 0, s>>>(rows, cols, (float *)dst, src);
	return cudaGetLastError();
}

extern "C" cudaError_t wfk_transpose_acc(cudaStream_t s, size_t rows, size_t cols, float *dst,
					 const void *src, wfk_type t)
{
	if (rows == 0 || cols == 0)
		return cudaSuccess;
	dim3 g = tiles(rows, cols), b(TILE, 8);
	if (t == WFK_BF16)
		k_transpose_acc<bf16_t><<<g, b, 0, s>>>(rows, cols, dst, (const bf16_t *)src);
	else if (t == WFK_F16)
		k_transpose_acc<__half><<<g, b, 0, s>>>(rows, cols, dst, (const __half *)src);
	else
		k_transpose_acc<float><<<g, b, 0, s>>>(rows, cols, dst, (const float *)src);
	return cudaGetLastError();
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

/* The outputs whose window holds input cell (iy, ix): oy*sh - pt <= iy <
 * oy*sh - pt + kh, [oy_lo, oy_hi] x [ox_lo, ox_hi]. */
__device__ static inline void pool_outputs_of(const wf_pool_desc d, int iy, int ix, int *oy_lo,
					      int *oy_hi, int *ox_lo, int *ox_hi)
{
	int ylo = iy + d.pt - d.kh + 1, xlo = ix + d.pl - d.kw + 1;
	int yhi = (iy + d.pt) / d.sh, xhi = (ix + d.pl) / d.sw;
	*oy_lo = ylo > 0 ? (ylo + d.sh - 1) / d.sh : 0;
	*ox_lo = xlo > 0 ? (xlo + d.sw - 1) / d.sw : 0;
	*oy_hi = yhi < d.oh - 1 ? yhi : d.oh - 1;
	*ox_hi = xhi < d.ow - 1 ? xhi : d.ow - 1;
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
		int oy_lo, oy_hi, ox_lo, ox_hi;
		pool_outputs_of(d, iy, ix, &oy_lo, &oy_hi, &ox_lo, &ox_hi);
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

/* Max pool backward in two passes: each output's first maximum (row-major,
 * as ref) as its offset in the window, then each input cell gathers dy from
 * the outputs (at most ceil(k/s)^2) whose maximum it is. */
__global__ void k_pool_argmax(const wf_pool_desc d, uint8_t *arg, const float *x)
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
		int at = -1;
		float best = 0.0f;
		for (int iy = y0; iy < y1; iy++)
			for (int ix = x0; ix < x1; ix++) {
				float v = x[((b * d.h + iy) * d.w + ix) * d.c + c];
				if (at < 0 || v > best)
					best = v, at = (iy - (oy * d.sh - d.pt)) * d.kw + ix -
						       (ox * d.sw - d.pl);
			}
		arg[i] = (uint8_t)at;
	}
}

__global__ void k_pool_max_backward(const wf_pool_desc d, float *dx, const float *dy,
				    const uint8_t *arg)
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
		int oy_lo, oy_hi, ox_lo, ox_hi;
		pool_outputs_of(d, iy, ix, &oy_lo, &oy_hi, &ox_lo, &ox_hi);
		float acc = 0.0f;
		for (int oy = oy_lo; oy <= oy_hi; oy++)
			for (int ox = ox_lo; ox <= ox_hi; ox++) {
				size_t o = ((b * d.oh + oy) * d.ow + ox) * d.c + c;
				int mine =
					(iy - (oy * d.sh - d.pt)) * d.kw + ix - (ox * d.sw - d.pl);
				if (arg[o] == mine)
					acc += dy[o];
			}
		dx[i] = acc;
	}
}

extern "C" cudaError_t wfk_pool_max_backward(cudaStream_t s, const wf_pool_desc *d, float *dx,
					     const float *dy, const float *x, uint8_t *arg)
{
	size_t no = (size_t)d->n * d->oh * d->ow * d->c, ni = (size_t)d->n * d->h * d->w * d->c;
	if (no == 0 || ni == 0)
		return cudaSuccess;
	k_pool_argmax<<<blocks_for(no), WFK_THREADS, 0, s>>>(*d, arg, x);
	k_pool_max_backward<<<blocks_for(ni), WFK_THREADS, 0, s>>>(*d, dx, dy, arg);
	return cudaGetLastError();
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

__global__ void k_pad_backward(const wf_pad_desc d, float *dx, const float *dy, int acc)
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
		float g = kept ? dy[((b * oh + oy) * ow + ox) * d.c + c] : 0.0f;
		dx[i] = acc ? dx[i] + g : g;
	}
}

extern "C" cudaError_t wfk_pad_forward(cudaStream_t s, const wf_pad_desc *d, float *y,
				       const float *x)
{
	size_t n = (size_t)d->n * (d->h + d->pt + d->pb) * (d->w + d->pl + d->pr) * d->c;
	LAUNCH(k_pad_forward, n, s, *d, y, x);
}

extern "C" cudaError_t wfk_pad_backward(cudaStream_t s, const wf_pad_desc *d, float *dx,
					const float *dy, int acc)
{
	size_t n = (size_t)d->n * d->h * d->w * d->c;
	LAUNCH(k_pad_backward, n, s, *d, dx, dy, acc);
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

__global__ void k_bn_stats(size_t rows, int C, float eps, float momentum, const double *acc,
			   const void *x, wfk_type xt, const float *gamma, const float *beta,
			   float *save_mean, float *save_invstd, float *run_mean, float *run_var,
			   float *coef)
{
	int c = blockIdx.x * blockDim.x + threadIdx.x;
	if (c >= C)
		return;
	double m = (double)rows, d1 = acc[c] / m;
	double var = fmax(acc[C + c] / m - d1 * d1, 0.0); /* biased: normalises */
	double mean = (double)load_as_float(x, xt, c) + d1, inv = 1.0 / sqrt(var + (double)eps);
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
				    const double *acc, const void *x, int bf16, const float *gamma,
				    const float *beta, float *save_mean, float *save_invstd,
				    float *run_mean, float *run_var, float *coef)
{
	k_bn_stats<<<(C + WFK_THREADS - 1) / WFK_THREADS, WFK_THREADS, 0, s>>>(
		rows, C, eps, momentum, acc, x, bf16 ? WFK_BF16 : WFK_F32, gamma, beta, save_mean,
		save_invstd, run_mean, run_var, coef);
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

/* ---- training fusions: bf16 tensors, batch norm + relu, add + relu ------------- */
/* The tensors between a conv and its batch norm (and from a batch norm to the
 * conv or add reading it) are bf16 in bf16 training; statistics, parameters
 * and every sum are float. */

/* The batch norm of one value: (x - mean) * scale + beta. The forward's
 * relu and the backward's mask both use it (one rounding, everywhere), so
 * they agree bit for bit on which values the relu passed. */
__device__ static inline float bn_value(float x, float scale, float mean, float beta)
{
	return __fmaf_rn(x - mean, scale, beta);
}

/* Whether the fused relu (1) or relu6 (2) passes the gradient at t = bn(x):
 * where its output was neither 0 nor 6. */
__device__ static inline int relu_passes(float t, int relu)
{
	return t > 0.0f && (relu != 2 || t < 6.0f);
}

/* coef = [scale | mean | beta]; V channels from c on, loaded as vectors. */
template <int V, typename T>
__global__ void k_bn_apply(size_t n, int C, T *y, const T *x, const float *coef, int relu)
{
	GRID_LOOP(j, n / V)
	{
		size_t i = j * V;
		int c = (int)(i % (size_t)C);
		float v[V], sc[V], mu[V], be[V];
		ldv<V>(x + i, v);
		ldv<V>(coef + c, sc);
		ldv<V>(coef + C + c, mu);
		ldv<V>(coef + 2 * C + c, be);
		for (int k = 0; k < V; k++) {
			float t = bn_value(v[k], sc[k], mu[k], be[k]);
			v[k] = relu && !(t > 0.0f) ? 0.0f : relu == 2 && t > 6.0f ? 6.0f : t;
		}
		stv<V>(y + i, v);
	}
}

/* dx = A (g - E) - B (x - mean), g = dy, zero where the forward's relu
 * (fcoef, NULL without one) gave 0; coef = [A | E | B | mean]. */
template <int V, typename T>
__global__ void k_bn_dx(size_t n, int C, T *dx, const T *dy, const T *x, const float *coef,
			const float *fcoef, int relu)
{
	GRID_LOOP(j, n / V)
	{
		size_t i = j * V;
		int c = (int)(i % (size_t)C);
		float g[V], xv[V], a[V], e[V], b[V], mu[V];
		ldv<V>(dy + i, g);
		ldv<V>(x + i, xv);
		if (fcoef) {
			float sc[V], fm[V], be[V];
			ldv<V>(fcoef + c, sc);
			ldv<V>(fcoef + C + c, fm);
			ldv<V>(fcoef + 2 * C + c, be);
			for (int k = 0; k < V; k++)
				if (!relu_passes(bn_value(xv[k], sc[k], fm[k], be[k]), relu))
					g[k] = 0.0f;
		}
		ldv<V>(coef + c, a);
		ldv<V>(coef + C + c, e);
		ldv<V>(coef + 2 * C + c, b);
		ldv<V>(coef + 3 * C + c, mu);
		for (int k = 0; k < V; k++)
			g[k] = a[k] * (g[k] - e[k]) - b[k] * (xv[k] - mu[k]);
		stv<V>(dx + i, g);
	}
}

/* Per-channel sums: statistics (dy NULL) a = x - x[0,c], b = a*a, shifted
 * by the first row against cancellation; backward a = g, b = g * (x -
 * center[c]), g = dy masked by the forward's relu (fcoef). One thread sums
 * channel c over rows with a stride, in float, for at most 32 rows. */
template <typename T>
__global__ void k_bn_reduce(size_t rows, int C, double *acc, const T *x, const T *dy,
			    const float *center, const float *fcoef, int relu)
{
	int c = blockIdx.x * BN_TX + threadIdx.x;
	float s1 = 0.0f, s2 = 0.0f;
	if (c < C) {
		float k = dy ? center[c] : to_f(x[c]);
		float sc = 0, fm = 0, be = 0;
		if (fcoef)
			sc = fcoef[c], fm = fcoef[C + c], be = fcoef[2 * C + c];
		for (size_t r = (size_t)blockIdx.y * BN_TY + threadIdx.y; r < rows;
		     r += (size_t)gridDim.y * BN_TY) {
			float xv = to_f(x[r * C + c]), a = xv - k;
			if (dy) {
				float g = to_f(dy[r * C + c]);
				if (fcoef && !relu_passes(bn_value(xv, sc, fm, be), relu))
					g = 0.0f;
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

/* The same sums with 16-byte loads, for C a multiple of 8 up to 2048: a
 * block of 256 threads covers 256 / (C/8) whole rows at a time, thread t
 * always the 8 channels 8 (t % (C/8)) on, for BN_ROWS8 rows in float; the
 * block adds its rows' partials in shared memory, then into acc (double). */
#define BN_ROWS8 16

template <typename T>
__global__ void __launch_bounds__(256)
	k_bn_reduce8(size_t rows, int C, double *acc, const T *x, const T *dy, const float *center,
		     const float *fcoef, int relu)
{
	__shared__ float sh[2][256][9]; /* padded against bank conflicts */
	int G = C / 8, R = 256 / G, t = threadIdx.x, g = t % G, rs = t / G, c = 8 * g;
	float s1[8] = {0}, s2[8] = {0}, k[8], sc[8], fm[8], be[8];
	if (rs < R) {
		if (dy)
			ldv<8>(center + c, k);
		else
			ldv<8>(x + c, k);
		if (fcoef) {
			ldv<8>(fcoef + c, sc);
			ldv<8>(fcoef + C + c, fm);
			ldv<8>(fcoef + 2 * C + c, be);
		}
		size_t step = (size_t)gridDim.x * R;
		for (size_t r = (size_t)blockIdx.x * R + rs; r < rows; r += step) {
			float xv[8], gv[8];
			ldv<8>(x + r * C + c, xv);
			if (dy) {
				ldv<8>(dy + r * C + c, gv);
				for (int q = 0; q < 8; q++) {
					if (fcoef &&
					    !relu_passes(bn_value(xv[q], sc[q], fm[q], be[q]),
							 relu))
						gv[q] = 0.0f;
					s1[q] += gv[q];
					s2[q] += gv[q] * (xv[q] - k[q]);
				}
			} else {
				for (int q = 0; q < 8; q++) {
					float a = xv[q] - k[q];
					s1[q] += a;
					s2[q] += a * a;
				}
			}
		}
	}
	for (int q = 0; q < 8; q++)
		sh[0][t][q] = s1[q], sh[1][t][q] = s2[q];
	__syncthreads();
	for (int ch = t; ch < C; ch += 256) {
		double t1 = 0.0, t2 = 0.0;
		for (int r = 0; r < R; r++) {
			t1 += sh[0][r * G + ch / 8][ch % 8];
			t2 += sh[1][r * G + ch / 8][ch % 8];
		}
		atomicAdd(&acc[ch], t1);
		atomicAdd(&acc[C + ch], t2);
	}
}

extern "C" cudaError_t wfk_bn_reduce(cudaStream_t s, size_t rows, int C, double *acc, const void *x,
				     const void *dy, const float *center, const float *fcoef,
				     int relu, int bf16)
{
	if (rows == 0 || C <= 0)
		return cudaSuccess;
	if (C <= 2048 && vec8(rows * (size_t)C, C, x, dy, center, fcoef)) {
		size_t R = (size_t)(256 / (C / 8)), b = (rows + R * BN_ROWS8 - 1) / (R * BN_ROWS8);
		unsigned blocks = (unsigned)(b < 65535 ? b : 65535);
		if (bf16)
			k_bn_reduce8<bf16_t><<<blocks, 256, 0, s>>>(rows, C, acc, (const bf16_t *)x,
								    (const bf16_t *)dy, center,
								    fcoef, relu);
		else
			k_bn_reduce8<float><<<blocks, 256, 0, s>>>(rows, C, acc, (const float *)x,
								   (const float *)dy, center, fcoef,
								   relu);
		return cudaGetLastError();
	}
	size_t gy = (rows + BN_TY * 32 - 1) / (BN_TY * 32);
	dim3 grid((unsigned)((C + BN_TX - 1) / BN_TX), (unsigned)(gy < 65535 ? gy : 65535));
	if (bf16)
		k_bn_reduce<bf16_t><<<grid, dim3(BN_TX, BN_TY), 0, s>>>(
			rows, C, acc, (const bf16_t *)x, (const bf16_t *)dy, center, fcoef, relu);
	else
		k_bn_reduce<float><<<grid, dim3(BN_TX, BN_TY), 0, s>>>(
			rows, C, acc, (const float *)x, (const float *)dy, center, fcoef, relu);
	return cudaGetLastError();
}

extern "C" cudaError_t wfk_bn_apply(cudaStream_t s, size_t rows, int C, void *y, const void *x,
				    const float *coef, int relu, int bf16)
{
	size_t n = rows * (size_t)C;
	int v = vec8(n, C, y, x, coef, NULL);
	if (bf16)
		LAUNCH_V(k_bn_apply, bf16_t, n, v, s, n, C, (bf16_t *)y, (const bf16_t *)x, coef,
			 relu);
	LAUNCH_V(k_bn_apply, float, n, v, s, n, C, (float *)y, (const float *)x, coef, relu);
}

extern "C" cudaError_t wfk_bn_dx(cudaStream_t s, size_t rows, int C, void *dx, const void *dy,
				 const void *x, const float *coef, const float *fcoef, int relu,
				 int bf16)
{
	size_t n = rows * (size_t)C;
	int v = vec8(n, C, dx, dy, x, coef) && vec8(n, C, fcoef, NULL, NULL, NULL);
	if (bf16)
		LAUNCH_V(k_bn_dx, bf16_t, n, v, s, n, C, (bf16_t *)dx, (const bf16_t *)dy,
			 (const bf16_t *)x, coef, fcoef, relu);
	LAUNCH_V(k_bn_dx, float, n, v, s, n, C, (float *)dx, (const float *)dy, (const float *)x,
		 coef, fcoef, relu);
}

/* y = a + b (each float or bf16), then max(y, 0) when relu. */
template <int V, typename TA, typename TB>
__global__ void k_add_mixed(size_t n, float *y, const TA *a, const TB *b, int relu)
{
	GRID_LOOP(j, n / V)
	{
		size_t i = j * V;
		float u[V], w[V];
		ldv<V>(a + i, u);
		ldv<V>(b + i, w);
		for (int k = 0; k < V; k++) {
			u[k] += w[k];
			if (relu)
				u[k] = u[k] > 0.0f ? u[k] : 0.0f;
		}
		stv<V>(y + i, u);
	}
}

template <int V>
static void add_mixed_launch(cudaStream_t s, size_t n, float *y, const void *a, const void *b,
			     int bf16, int relu)
{
	unsigned g = V == 8 ? blocks_vec(n, 8) : blocks_for(n);
	switch (bf16 & 3) {
	case 0:
		k_add_mixed<V, float, float>
			<<<g, WFK_THREADS, 0, s>>>(n, y, (const float *)a, (const float *)b, relu);
		break;
	case 1:
		k_add_mixed<V, bf16_t, float>
			<<<g, WFK_THREADS, 0, s>>>(n, y, (const bf16_t *)a, (const float *)b, relu);
		break;
	case 2:
		k_add_mixed<V, float, bf16_t>
			<<<g, WFK_THREADS, 0, s>>>(n, y, (const float *)a, (const bf16_t *)b, relu);
		break;
	default:
		k_add_mixed<V, bf16_t, bf16_t><<<g, WFK_THREADS, 0, s>>>(n, y, (const bf16_t *)a,
									 (const bf16_t *)b, relu);
	}
}

extern "C" cudaError_t wfk_add_mixed(cudaStream_t s, size_t n, float *y, const void *a,
				     const void *b, int bf16, int relu)
{
	if (n == 0)
		return cudaSuccess;
	if (vec8(n, 0, y, a, b, NULL))
		add_mixed_launch<8>(s, n, y, a, b, bf16, relu);
	else
		add_mixed_launch<1>(s, n, y, a, b, bf16, relu);
	return cudaGetLastError();
}

/* y (bf16) = act(x): 0 none, 1 relu, 2 relu6 (NaN stays NaN). */
template <int V, typename T> __global__ void k_to_bf16(size_t n, T *y, const float *x, int act)
{
	GRID_LOOP(j, n / V)
	{
		size_t i = j * V;
		float v[V];
		ldv<V>(x + i, v);
		for (int k = 0; k < V; k++) {
			if (act == 1)
				v[k] = fmaxf(v[k], 0.0f);
			else if (act == 2)
				v[k] = v[k] < 0.0f ? 0.0f : v[k] > 6.0f ? 6.0f : v[k];
		}
		stv<V>(y + i, v);
	}
}

extern "C" cudaError_t wfk_to_bf16(cudaStream_t s, size_t n, void *y, const float *x, int act)
{
	int v = vec8(n, 0, y, x, NULL, NULL);
	LAUNCH_V(k_to_bf16, bf16_t, n, v, s, n, (bf16_t *)y, x, act);
}

/* g = dy where y > 0, else 0; into da and db by mode: 0 none, 1 written
 * (float), 2 added into (float), 3 written as bf16. */
template <int V> __device__ static inline void put_grad(void *d, int mode, size_t i, const float *g)
{
	if (mode == 3) {
		stv<V>((bf16_t *)d + i, g);
	} else if (mode == 2) {
		float o[V];
		ldv<V>((const float *)d + i, o);
		for (int k = 0; k < V; k++)
			o[k] += g[k];
		stv<V>((float *)d + i, o);
	} else if (mode == 1) {
		stv<V>((float *)d + i, g);
	}
}

template <int V>
__global__ void k_add_relu_backward(size_t n, const float *dy, const float *y, void *da, int ma,
				    void *db, int mb)
{
	GRID_LOOP(j, n / V)
	{
		size_t i = j * V;
		float g[V], yv[V];
		ldv<V>(dy + i, g);
		ldv<V>(y + i, yv);
		for (int k = 0; k < V; k++)
			g[k] = yv[k] > 0.0f ? g[k] : 0.0f;
		put_grad<V>(da, ma, i, g);
		put_grad<V>(db, mb, i, g);
	}
}

extern "C" cudaError_t wfk_add_relu_backward(cudaStream_t s, size_t n, const float *dy,
					     const float *y, void *da, int ma, void *db, int mb)
{
	if (n == 0)
		return cudaSuccess;
	if (vec8(n, 0, dy, y, da, db))
		k_add_relu_backward<8>
			<<<blocks_vec(n, 8), WFK_THREADS, 0, s>>>(n, dy, y, da, ma, db, mb);
	else
		k_add_relu_backward<1>
			<<<blocks_for(n), WFK_THREADS, 0, s>>>(n, dy, y, da, ma, db, mb);
	return cudaGetLastError();
}

/* Zero padding of a 2-byte tensor (forward) and its gradient's crop (backward). */
__global__ void k_pad16_forward(const wf_pad_desc d, uint16_t *y, const uint16_t *x)
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
		y[i] = inside ? x[((b * d.h + iy) * d.w + ix) * d.c + c] : 0;
	}
}

__global__ void k_pad16_backward(const wf_pad_desc d, uint16_t *dx, const uint16_t *dy)
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
		dx[i] = dy[((b * oh + iy + d.pt) * ow + ix + d.pl) * d.c + c];
	}
}

extern "C" cudaError_t wfk_pad16_forward(cudaStream_t s, const wf_pad_desc *d, void *y,
					 const void *x)
{
	size_t n = (size_t)d->n * (d->h + d->pt + d->pb) * (d->w + d->pl + d->pr) * d->c;
	LAUNCH(k_pad16_forward, n, s, *d, (uint16_t *)y, (const uint16_t *)x);
}

extern "C" cudaError_t wfk_pad16_backward(cudaStream_t s, const wf_pad_desc *d, void *dx,
					  const void *dy)
{
	size_t n = (size_t)d->n * d->h * d->w * d->c;
	LAUNCH(k_pad16_backward, n, s, *d, (uint16_t *)dx, (const uint16_t *)dy);
}

/* ---- depthwise 3x3 convolutions ------------------------------------------------ */
/* cuDNN's grouped NHWC convolutions ran MobileNetV2's depthwise layers at a
 * small fraction of memory bandwidth (an H200: 138 of 156 ms of a step). One
 * thread computes V channels of one output (forward), or gathers one input's
 * gradient from the outputs that read it (backward data, no atomics); the
 * weights' gradient is a per-channel reduction over the outputs, in float
 * per thread, then double atomics (as batch norm's). Padding, stride and
 * dilation are the descriptor's; x, y (and their gradients) are float or
 * bf16, weights HWIO [3,3,1,C] float. */

template <int V, typename TX, typename TY>
__global__ void k_dw_forward(const wf_conv_desc d, TY *y, const TX *x, const float *w,
			     const float *b)
{
	int G = d.c / V;
	GRID_LOOP(j, (size_t)d.n * d.oh * d.ow * G)
	{
		int c = (int)(j % G) * V;
		size_t t = j / G;
		int ox = (int)(t % d.ow);
		t /= d.ow;
		int oy = (int)(t % d.oh);
		size_t nb = t / d.oh;
		float acc[V], xv[V], wv[V];
		for (int k = 0; k < V; k++)
			acc[k] = 0.0f;
		if (b)
			ldv<V>(b + c, acc);
		for (int ky = 0; ky < 3; ky++) {
			int iy = oy * d.sh - d.pt + ky * d.dh;
			if (iy < 0 || iy >= d.h)
				continue;
			for (int kx = 0; kx < 3; kx++) {
				int ix = ox * d.sw - d.pl + kx * d.dw;
				if (ix < 0 || ix >= d.w)
					continue;
				ldv<V>(x + ((nb * d.h + iy) * d.w + ix) * d.c + c, xv);
				ldv<V>(w + (ky * 3 + kx) * d.c + c, wv);
				for (int k = 0; k < V; k++)
					acc[k] = fmaf(xv[k], wv[k], acc[k]);
			}
		}
		stv<V>(y + j * V, acc);
	}
}

template <int V, typename TX, typename TY>
__global__ void k_dw_backward_data(const wf_conv_desc d, TX *dx, const TY *dy, const float *w,
				   int acc_into)
{
	int G = d.c / V;
	GRID_LOOP(j, (size_t)d.n * d.h * d.w * G)
	{
		int c = (int)(j % G) * V;
		size_t t = j / G;
		int ix = (int)(t % d.w);
		t /= d.w;
		int iy = (int)(t % d.h);
		size_t nb = t / d.h;
		float g[V], gv[V], wv[V];
		for (int k = 0; k < V; k++)
			g[k] = 0.0f;
		for (int ky = 0; ky < 3; ky++) {
			int ty = iy + d.pt - ky * d.dh;
			if (ty < 0 || ty % d.sh || ty / d.sh >= d.oh)
				continue;
			for (int kx = 0; kx < 3; kx++) {
				int tx = ix + d.pl - kx * d.dw;
				if (tx < 0 || tx % d.sw || tx / d.sw >= d.ow)
					continue;
				size_t o = ((nb * d.oh + ty / d.sh) * d.ow + tx / d.sw) * d.c + c;
				ldv<V>(dy + o, gv);
				ldv<V>(w + (ky * 3 + kx) * d.c + c, wv);
				for (int k = 0; k < V; k++)
					g[k] = fmaf(gv[k], wv[k], g[k]);
			}
		}
		if (acc_into) {
			ldv<V>(dx + j * V, gv);
			for (int k = 0; k < V; k++)
				g[k] += gv[k];
		}
		stv<V>(dx + j * V, g);
	}
}

/* acc[(ky*3 + kx)*C + c] += sum over outputs of dy * x under tap (ky, kx):
 * a block is 32 channels x 8 threads over DW_ROWS consecutive outputs (so
 * neighbouring windows share the cache); its threads' sums meet in shared
 * memory. */
#define DW_ROWS 128

template <typename TX, typename TY>
__global__ void k_dw_backward_filter(const wf_conv_desc d, double *acc, const TY *dy, const TX *x)
{
	int c = blockIdx.y * 32 + threadIdx.x;
	size_t rows = (size_t)d.n * d.oh * d.ow, r0 = (size_t)blockIdx.x * DW_ROWS;
	float s[9];
	for (int k = 0; k < 9; k++)
		s[k] = 0.0f;
	for (size_t r = r0 + threadIdx.y; c < d.c && r < rows && r < r0 + DW_ROWS; r += 8) {
		int ox = (int)(r % d.ow), oy = (int)(r / d.ow % d.oh);
		size_t nb = r / ((size_t)d.ow * d.oh);
		float g = to_f(dy[r * d.c + c]);
		for (int ky = 0; ky < 3; ky++) {
			int iy = oy * d.sh - d.pt + ky * d.dh;
			if (iy < 0 || iy >= d.h)
				continue;
			for (int kx = 0; kx < 3; kx++) {
				int ix = ox * d.sw - d.pl + kx * d.dw;
				if (ix >= 0 && ix < d.w)
					s[ky * 3 + kx] = fmaf(
						g, to_f(x[((nb * d.h + iy) * d.w + ix) * d.c + c]),
						s[ky * 3 + kx]);
			}
		}
	}
	__shared__ float sh[9][8][32];
	for (int k = 0; k < 9; k++)
		sh[k][threadIdx.y][threadIdx.x] = s[k];
	__syncthreads();
	for (int k = threadIdx.y; k < 9 && c < d.c; k += 8) {
		double t = 0.0;
		for (int i = 0; i < 8; i++)
			t += sh[k][i][threadIdx.x];
		atomicAdd(&acc[(size_t)k * d.c + c], t);
	}
}

__global__ void k_dw_filter_finish(size_t n, float *dw, const double *acc)
{
	GRID_LOOP(i, n) dw[i] += (float)acc[i];
}

#define DW_TYPES(call, xb, yb, ...)                                                                \
	((xb) && (yb) ? call<bf16_t, bf16_t>(__VA_ARGS__)                                          \
	 : (xb)	      ? call<bf16_t, float>(__VA_ARGS__)                                           \
	 : (yb)	      ? call<float, bf16_t>(__VA_ARGS__)                                           \
		      : call<float, float>(__VA_ARGS__))

template <typename TX, typename TY>
static cudaError_t dw_forward(cudaStream_t s, const wf_conv_desc *d, void *y, const void *x,
			      const float *w, const float *b)
{
	size_t n = (size_t)d->n * d->oh * d->ow * d->c;
	if (vec8(n, d->c, y, x, w, b))
		k_dw_forward<8, TX, TY>
			<<<blocks_vec(n, 8), WFK_THREADS, 0, s>>>(*d, (TY *)y, (const TX *)x, w, b);
	else
		k_dw_forward<1, TX, TY>
			<<<blocks_for(n), WFK_THREADS, 0, s>>>(*d, (TY *)y, (const TX *)x, w, b);
	return cudaGetLastError();
}

template <typename TX, typename TY>
static cudaError_t dw_backward_data(cudaStream_t s, const wf_conv_desc *d, void *dx, const void *dy,
				    const float *w, int acc)
{
	size_t n = (size_t)d->n * d->h * d->w * d->c;
	if (vec8(n, d->c, dx, dy, w, NULL))
		k_dw_backward_data<8, TX, TY><<<blocks_vec(n, 8), WFK_THREADS, 0, s>>>(
			*d, (TX *)dx, (const TY *)dy, w, acc);
	else
		k_dw_backward_data<1, TX, TY><<<blocks_for(n), WFK_THREADS, 0, s>>>(
			*d, (TX *)dx, (const TY *)dy, w, acc);
	return cudaGetLastError();
}

template <typename TX, typename TY>
static cudaError_t dw_backward_filter(cudaStream_t s, const wf_conv_desc *d, double *acc,
				      const void *dy, const void *x)
{
	size_t rows = (size_t)d->n * d->oh * d->ow, gx = (rows + DW_ROWS - 1) / DW_ROWS;
	if (gx > 0x7fffffff || (d->c + 31) / 32 > 65535)
		return cudaErrorInvalidConfiguration;
	dim3 grid((unsigned)gx, (unsigned)((d->c + 31) / 32));
	k_dw_backward_filter<TX, TY>
		<<<grid, dim3(32, 8), 0, s>>>(*d, acc, (const TY *)dy, (const TX *)x);
	return cudaGetLastError();
}

extern "C" cudaError_t wfk_dw_forward(cudaStream_t s, const wf_conv_desc *d, void *y, const void *x,
				      const float *w, const float *b)
{
	int xb = d->io_bf16 & 1, yb = (d->io_bf16 & 2) != 0;
	return DW_TYPES(dw_forward, xb, yb, s, d, y, x, w, b);
}

extern "C" cudaError_t wfk_dw_backward_data(cudaStream_t s, const wf_conv_desc *d, void *dx,
					    const void *dy, const float *w)
{
	int xb = d->io_bf16 & 1, yb = (d->io_bf16 & 2) != 0;
	return DW_TYPES(dw_backward_data, xb, yb, s, d, dx, dy, w, d->dx_acc);
}

extern "C" cudaError_t wfk_dw_backward_filter(cudaStream_t s, const wf_conv_desc *d, float *dw,
					      double *acc, const void *dy, const void *x)
{
	int xb = d->io_bf16 & 1, yb = (d->io_bf16 & 2) != 0;
	size_t n = (size_t)9 * d->c;
	cudaError_t st = cudaMemsetAsync(acc, 0, n * sizeof(double), s);
	if (st == cudaSuccess)
		st = DW_TYPES(dw_backward_filter, xb, yb, s, d, acc, dy, x);
	if (st == cudaSuccess) {
		k_dw_filter_finish<<<blocks_for(n), WFK_THREADS, 0, s>>>(n, dw, acc);
		st = cudaGetLastError();
	}
	return st;
}
