/* cpu_loops.c: memory-bound ops of the cpu backend as OpenMP loops. oneDNN
 * would add a primitive, a plan and a dispatch for work that one pass over
 * memory does; these loops are as fast and keep the ops plan-free. */
#include "kernels/cpu/cpu_loops.h"

#include "common/util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#ifdef __AVX512F__
#include <immintrin.h>
#endif

/* Below this many elements a parallel region costs more than it saves. */
#define PAR_MIN 32768

/* ---- memory ------------------------------------------------------------ */

void *wf_cpu_alloc(wf_backend *be, size_t bytes)
{
	size_t sz = (bytes + 63) / 64 * 64;
	if (sz == 0)
		sz = 64;
	void *p = aligned_alloc(64, sz);
	if (!p) {
		wf_errf(&be->err, WF_ENOMEM, "cpu: out of memory allocating %zu bytes", bytes);
		return NULL;
	}
	memset(p, 0, sz);
	return p;
}

void wf_cpu_free(wf_backend *be, void *p)
{
	free(p);
}

int wf_cpu_copy_in(wf_backend *be, void *dst, const void *src, size_t bytes)
{
	if (bytes && dst != src)
		memmove(dst, src, bytes);
	return 0;
}

int wf_cpu_zero(wf_backend *be, void *p, size_t bytes)
{
	if (bytes)
		memset(p, 0, bytes);
	return 0;
}

int wf_cpu_sync(wf_backend *be)
{
	return 0;
}

/* ---- elementwise ------------------------------------------------------- */

/* keep ? v : 0 with v loaded unconditionally: the compiler turns this into a
 * vector blend. The branchy form loads v only when keep holds, so it stays
 * scalar and mispredicts on ReLU's random sign pattern (measured: relu
 * backward took 28% of a resnet20 step that way, ~5% as a blend). */
static inline float select_pos(int keep, float v)
{
	return keep ? v : 0.0f;
}

void wf_cpu_add_into(float *y, const float *x, size_t n)
{
#pragma omp parallel for if (n > PAR_MIN) schedule(static)
	for (size_t i = 0; i < n; i++)
		y[i] += x[i];
}

int wf_cpu_act_forward(wf_backend *be, wf_act_kind kind, size_t n, float *y, const float *x)
{
	if (kind == WF_ACT_RELU) {
#pragma omp parallel for if (n > PAR_MIN) schedule(static)
		for (size_t i = 0; i < n; i++)
			y[i] = x[i] > 0.0f ? x[i] : 0.0f;
	} else { /* WF_ACT_RELU6 */
#pragma omp parallel for if (n > PAR_MIN) schedule(static)
		for (size_t i = 0; i < n; i++)
			y[i] = x[i] > 0.0f ? (x[i] < 6.0f ? x[i] : 6.0f) : 0.0f;
	}
	return 0;
}

int wf_cpu_act_backward(wf_backend *be, wf_act_kind kind, size_t n, float *dx, const float *dy,
			const float *y)
{
	if (kind == WF_ACT_RELU) {
#pragma omp parallel for if (n > PAR_MIN) schedule(static)
		for (size_t i = 0; i < n; i++)
			dx[i] = select_pos(y[i] > 0.0f, dy[i]);
	} else { /* WF_ACT_RELU6 */
#pragma omp parallel for if (n > PAR_MIN) schedule(static)
		for (size_t i = 0; i < n; i++)
			dx[i] = select_pos((y[i] > 0.0f) & (y[i] < 6.0f), dy[i]);
	}
	return 0;
}

int wf_cpu_add(wf_backend *be, size_t n, float *y, const float *a, const float *b)
{
#pragma omp parallel for if (n > PAR_MIN) schedule(static)
	for (size_t i = 0; i < n; i++)
		y[i] = a[i] + b[i];
	return 0;
}

static inline float bf16_in(const void *p, size_t i, int bf16)
{
	if (!bf16)
		return ((const float *)p)[i];
	uint32_t u = (uint32_t)((const uint16_t *)p)[i] << 16;
	float f;
	memcpy(&f, &u, sizeof(f));
	return f;
}

int wf_cpu_add_mixed(wf_backend *be, size_t n, float *y, const void *a, const void *b, int bf16,
		     int relu)
{
	int ah = bf16 & 1, bh = (bf16 & 2) != 0;
	if (relu) {
#pragma omp parallel for if (n > PAR_MIN) schedule(static)
		for (size_t i = 0; i < n; i++) {
			float v = bf16_in(a, i, ah) + bf16_in(b, i, bh);
			y[i] = v > 0.0f ? v : 0.0f;
		}
		return 0;
	}
#pragma omp parallel for if (n > PAR_MIN) schedule(static)
	for (size_t i = 0; i < n; i++)
		y[i] = bf16_in(a, i, ah) + bf16_in(b, i, bh);
	return 0;
}

/* Round a float to bf16, nearest even; NaN stays NaN. */
static inline uint16_t bf16_out(float f)
{
	uint32_t u;
	memcpy(&u, &f, sizeof(u));
	uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
	return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? (u >> 16) | 0x40u : r);
}

/* One output of add_relu_backward: g by mode m (1 write, 2 add, 3 bf16). */
static inline void grad_out(void *d, int m, size_t i, float g)
{
	if (m == 1)
		((float *)d)[i] = g;
	else if (m == 2)
		((float *)d)[i] += g;
	else if (m == 3)
		((uint16_t *)d)[i] = bf16_out(g);
}

/* One loop per pair of modes, so that each compiles to vector code. */
#define ARB_LOOP(MA, MB)                                                                           \
	_Pragma("omp parallel for if (n > PAR_MIN) schedule(static)") for (size_t i = 0; i < n;    \
									   i++)                    \
	{                                                                                          \
		float g = select_pos(y[i] > 0.0f, dy[i]);                                          \
		grad_out(da, MA, i, g);                                                            \
		grad_out(db, MB, i, g);                                                            \
	}
#define ARB_CASES(MA)                                                                              \
	case MA * 4 + 0: ARB_LOOP(MA, 0) break;                                                    \
	case MA * 4 + 1: ARB_LOOP(MA, 1) break;                                                    \
	case MA * 4 + 2: ARB_LOOP(MA, 2) break;                                                    \
	case MA * 4 + 3: ARB_LOOP(MA, 3) break;

int wf_cpu_add_relu_backward(wf_backend *be, size_t n, const float *dy, const float *y, void *da,
			     int ma, void *db, int mb)
{
	switch (ma * 4 + mb) {
		ARB_CASES(0)
		ARB_CASES(1)
		ARB_CASES(2)
		ARB_CASES(3)
	default: break;
	}
	return 0;
}

int wf_cpu_to_bf16(wf_backend *be, size_t n, void *y, const float *x, int act)
{
	uint16_t *h = y;
	float hi = act == 2 ? 6.0f : INFINITY;
#pragma omp parallel for if (n > PAR_MIN) schedule(static)
	for (size_t i = 0; i < n; i++) {
		float v = x[i];
		if (act) /* NaN compares false: kept */
			v = v < 0.0f ? 0.0f : v > hi ? hi : v;
		h[i] = bf16_out(v);
	}
	return 0;
}

/* x * scale to nearest even, saturated to [0, 255]; NaN gives 0. */
static inline uint8_t u8_of(float x, float scale)
{
	const float magic = 12582912.0f; /* 1.5 * 2^23: adding it rounds [0, 255] to integers,
					  * ties to even */
	float v = x * scale;
	v = v > 0.0f ? v : 0.0f; /* NaN: 0 */
	v = v < 255.0f ? v : 255.0f;
	return (uint8_t)(int)((v + magic) - magic);
}

int wf_cpu_to_u8(wf_backend *be, size_t n, void *y, const float *x, const float *b, float scale)
{
	uint8_t *q = y;
	if (b) {
#pragma omp parallel for if (n > PAR_MIN) schedule(static)
		for (size_t i = 0; i < n; i++)
			q[i] = u8_of(x[i] + b[i], scale);
		return 0;
	}
#pragma omp parallel for if (n > PAR_MIN) schedule(static)
	for (size_t i = 0; i < n; i++)
		q[i] = u8_of(x[i], scale);
	return 0;
}

int wf_cpu_avgpool3_to_u8(wf_backend *be, int n, int h, int w, int c, void *y, const float *x,
			  float k, const float *b, float scale)
{
#pragma omp parallel for if ((size_t)n * h * w * c > PAR_MIN) schedule(static)
	for (int r = 0; r < n * h; r++) {
		int img = r / h, oy = r % h;
		int y0 = oy > 0 ? oy - 1 : 0, y1 = oy + 1 < h ? oy + 1 : h - 1;
		const float *top = x + ((size_t)img * h + (size_t)y0) * w * c;
		size_t row = (size_t)w * c;
		for (int ox = 0; ox < w; ox++) {
			int x0 = ox > 0 ? ox - 1 : 0, x1 = ox + 1 < w ? ox + 1 : w - 1;
			int ny = y1 - y0 + 1, nx = x1 - x0 + 1;
			float f = k / (float)(ny * nx);
			size_t at = ((size_t)r * w + (size_t)ox) * (size_t)c;
			const float *win = top + (size_t)x0 * c;
			uint8_t *q = (uint8_t *)y + at;
#ifdef __AVX512F__
			const __m512 vf = _mm512_set1_ps(f), vs = _mm512_set1_ps(scale),
				     lo = _mm512_setzero_ps(), hi = _mm512_set1_ps(255.0f);
			for (int c0 = 0; c0 < c; c0 += 16) {
				__mmask16 m = c - c0 >= 16 ? (__mmask16)0xffff
							   : (__mmask16)((1u << (c - c0)) - 1);
				__m512 acc = _mm512_setzero_ps();
				for (int yy = 0; yy < ny; yy++)
					for (int xx = 0; xx < nx; xx++)
						acc = _mm512_add_ps(
							acc,
							_mm512_maskz_loadu_ps(
								m, win + yy * row + (size_t)xx * c +
									   c0));
				__m512 v = _mm512_mul_ps(acc, vf);
				if (b)
					v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, b + at + c0));
				v = _mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(v, vs), lo), hi);
				_mm512_mask_cvtusepi32_storeu_epi8(q + c0, m,
								   _mm512_cvtps_epi32(v));
			}
#else
			for (int ch = 0; ch < c; ch++) {
				float acc = 0.0f;
				for (int yy = 0; yy < ny; yy++)
					for (int xx = 0; xx < nx; xx++)
						acc += win[yy * row + (size_t)xx * c + ch];
				q[ch] = u8_of(acc * f + (b ? b[at + ch] : 0.0f), scale);
			}
#endif
		}
	}
	return 0;
}

int wf_cpu_accumulate(wf_backend *be, size_t n, float *y, const float *x)
{
	wf_cpu_add_into(y, x, n);
	return 0;
}

int wf_cpu_scale(wf_backend *be, size_t n, float *y, const float *x, float alpha)
{
#pragma omp parallel for if (n > PAR_MIN) schedule(static)
	for (size_t i = 0; i < n; i++)
		y[i] = alpha * x[i];
	return 0;
}

/* ---- concat, pad/crop, global average pool ----------------------------- */

/* Width of the concatenated rows. */
static size_t concat_total(int k, const int *widths)
{
	size_t total = 0;
	for (int i = 0; i < k; i++)
		total += (size_t)widths[i];
	return total;
}

int wf_cpu_concat_forward(wf_backend *be, size_t rows, int k, const int *widths, float *y,
			  const float *const *xs)
{
	size_t total = concat_total(k, widths);
#pragma omp parallel for if (rows * total > PAR_MIN) schedule(static)
	for (size_t r = 0; r < rows; r++) {
		float *dst = y + r * total;
		for (int i = 0; i < k; i++) {
			size_t wi = (size_t)widths[i];
			memcpy(dst, xs[i] + r * wi, wi * sizeof(float));
			dst += wi;
		}
	}
	return 0;
}

/* y[0..n) = u8_of(x * scale): where the compiler may use AVX-512, in
 * vectors of 16 with a masked last one (NASNet's runs of 44-176 channels
 * left a scalar tail each way else); the same values as u8_of. */
static void run_to_u8(uint8_t *y, const float *x, size_t n, float scale)
{
#ifdef __AVX512F__
	const __m512 s = _mm512_set1_ps(scale), lo = _mm512_setzero_ps(),
		     hi = _mm512_set1_ps(255.0f);
	for (size_t i = 0; i < n; i += 16) {
		__mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
		__m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), s);
		v = _mm512_min_ps(_mm512_max_ps(v, lo), hi); /* max: NaN gives 0 */
		_mm512_mask_cvtusepi32_storeu_epi8(y + i, m, _mm512_cvtps_epi32(v));
	}
#else
	for (size_t i = 0; i < n; i++)
		y[i] = u8_of(x[i], scale);
#endif
}

int wf_cpu_concat_u8(wf_backend *be, size_t rows, int k, const int *widths, void *y,
		     const void *const *xs, unsigned u8_in, float scale)
{
	size_t total = concat_total(k, widths);
#pragma omp parallel for if (rows * total > PAR_MIN) schedule(static)
	for (size_t r = 0; r < rows; r++) {
		uint8_t *dst = (uint8_t *)y + r * total;
		for (int i = 0; i < k; i++) {
			size_t wi = (size_t)widths[i];
			if (u8_in >> i & 1)
				memcpy(dst, (const uint8_t *)xs[i] + r * wi, wi);
			else
				run_to_u8(dst, (const float *)xs[i] + r * wi, wi, scale);
			dst += wi;
		}
	}
	return 0;
}

int wf_cpu_concat_backward(wf_backend *be, size_t rows, int k, const int *widths, float *const *dxs,
			   const float *dy)
{
	size_t total = concat_total(k, widths);
#pragma omp parallel for if (rows * total > PAR_MIN) schedule(static)
	for (size_t r = 0; r < rows; r++) {
		const float *src = dy + r * total;
		for (int i = 0; i < k; i++) {
			size_t wi = (size_t)widths[i];
			if (dxs[i])
				memcpy(dxs[i] + r * wi, src, wi * sizeof(float));
			src += wi;
		}
	}
	return 0;
}

int wf_cpu_gap_forward(wf_backend *be, int n, int hw, int c, float *y, const float *x)
{
	float inv = 1.0f / (float)hw;
#pragma omp parallel for if ((size_t)n * hw * c > PAR_MIN) schedule(static)
	for (int i = 0; i < n; i++) {
		float *yi = y + (size_t)i * c;
		const float *xi = x + (size_t)i * hw * c;
		for (int ch = 0; ch < c; ch++)
			yi[ch] = 0.0f;
		for (int p = 0; p < hw; p++)
			for (int ch = 0; ch < c; ch++)
				yi[ch] += xi[(size_t)p * c + ch];
		for (int ch = 0; ch < c; ch++)
			yi[ch] *= inv;
	}
	return 0;
}

int wf_cpu_gap_q8(wf_backend *be, int n, int hw, int c, float *y, const void *x, float scale,
		  int u8)
{
	float inv = 1.0f / ((float)hw * scale);
#pragma omp parallel for if ((size_t)n * hw * c > PAR_MIN) schedule(static)
	for (int i = 0; i < n; i++) {
		float *yi = y + (size_t)i * c;
		size_t at = (size_t)i * hw * c;
		for (int ch = 0; ch < c; ch++)
			yi[ch] = 0.0f; /* exact sums up to 65793 positions */
		for (int p = 0; p < hw; p++, at += (size_t)c) {
			if (u8) {
				const uint8_t *xp = (const uint8_t *)x + at;
				for (int ch = 0; ch < c; ch++)
					yi[ch] += (float)xp[ch];
			} else {
				const int8_t *xp = (const int8_t *)x + at;
				for (int ch = 0; ch < c; ch++)
					yi[ch] += (float)xp[ch];
			}
		}
		for (int ch = 0; ch < c; ch++)
			yi[ch] *= inv;
	}
	return 0;
}

int wf_cpu_gap_backward(wf_backend *be, int n, int hw, int c, float *dx, const float *dy)
{
	float inv = 1.0f / (float)hw;
#pragma omp parallel for collapse(2) if ((size_t)n * hw * c > PAR_MIN) schedule(static)
	for (int i = 0; i < n; i++)
		for (int p = 0; p < hw; p++) {
			float *dxp = dx + ((size_t)i * hw + p) * c;
			const float *dyi = dy + (size_t)i * c;
			for (int ch = 0; ch < c; ch++)
				dxp[ch] = dyi[ch] * inv;
		}
	return 0;
}

/* Output extent of a pad (the wrapper checked that it is positive). */
static void pad_out_shape(const wf_pad_desc *d, int *oh, int *ow)
{
	*oh = d->h + d->pt + d->pb;
	*ow = d->w + d->pl + d->pr;
}

/* Copy one output row of pad (or one input row of its backward): dst has
 * dst_w pixels, src has src_w, src pixel j lands at dst pixel j + off; pixels
 * of dst that no src pixel reaches become zero. */
static void pad_row(float *dst, int dst_w, const float *src, int src_w, int off, int c)
{
	int lo = off > 0 ? off : 0;	     /* first dst pixel that has a source */
	int hi = WF_MIN(dst_w, src_w + off); /* one past the last */
	if (hi < lo)
		hi = lo;
	memset(dst, 0, (size_t)lo * c * sizeof(float));
	if (hi > lo)
		memcpy(dst + (size_t)lo * c, src + (size_t)(lo - off) * c,
		       (size_t)(hi - lo) * c * sizeof(float));
	memset(dst + (size_t)hi * c, 0, (size_t)(dst_w - hi) * c * sizeof(float));
}

/* Shared by forward (src = x, off = +pads) and backward (src = dy, off = -pads). */
static void pad_copy(float *dst, int dh, int dw, const float *src, int sh, int sw, int off_h,
		     int off_w, int n, int c)
{
#pragma omp parallel for collapse(2) if ((size_t)n * dh * dw * c > PAR_MIN) schedule(static)
	for (int i = 0; i < n; i++)
		for (int r = 0; r < dh; r++) {
			float *drow = dst + ((size_t)i * dh + r) * dw * c;
			int sr = r - off_h;
			if (sr < 0 || sr >= sh)
				memset(drow, 0, (size_t)dw * c * sizeof(float));
			else
				pad_row(drow, dw, src + ((size_t)i * sh + sr) * sw * c, sw, off_w,
					c);
		}
}

int wf_cpu_pad_forward(wf_backend *be, const wf_pad_desc *d, float *y, const float *x)
{
	int oh, ow;
	pad_out_shape(d, &oh, &ow);
	pad_copy(y, oh, ow, x, d->h, d->w, d->pt, d->pl, d->n, d->c);
	return 0;
}

int wf_cpu_pad_backward(wf_backend *be, const wf_pad_desc *d, float *dx, const float *dy)
{
	int oh, ow;
	pad_out_shape(d, &oh, &ow);
	pad_copy(dx, d->h, d->w, dy, oh, ow, -d->pt, -d->pl, d->n, d->c);
	return 0;
}

int wf_cpu_pool_pick(const wf_pool_desc *d, void *y, const void *x, size_t esize)
{
	size_t px = (size_t)d->c * esize; /* bytes a pixel */
#pragma omp parallel for collapse(2) if ((size_t)d->n * d->oh * d->ow * d->c > PAR_MIN)            \
	schedule(static)
	for (int i = 0; i < d->n; i++)
		for (int r = 0; r < d->oh; r++) {
			char *dst = (char *)y + ((size_t)i * d->oh + r) * d->ow * px;
			int sr = r * d->sh - d->pt;
			if (sr < 0 || sr >= d->h) {
				memset(dst, 0, d->ow * px);
				continue;
			}
			const char *src = (const char *)x + ((size_t)i * d->h + sr) * d->w * px;
			for (int j = 0; j < d->ow; j++) {
				int sc = j * d->sw - d->pl;
				if (sc < 0 || sc >= d->w)
					memset(dst + j * px, 0, px);
				else
					memcpy(dst + j * px, src + (size_t)sc * px, px);
			}
		}
	return 0;
}

/* ---- dropout ----------------------------------------------------------- */

int wf_cpu_dropout_forward(wf_backend *be, size_t n, float rate, uint64_t seed, float *y,
			   uint8_t *mask, const float *x)
{
	float s = 1.0f / (1.0f - rate);
#pragma omp parallel for if (n > PAR_MIN) schedule(static)
	for (size_t i = 0; i < n; i++) {
		int keep = wf_dropout_keep(seed, i, rate);
		mask[i] = (uint8_t)keep;
		y[i] = keep ? x[i] * s : 0.0f;
	}
	return 0;
}

int wf_cpu_dropout_backward(wf_backend *be, size_t n, float rate, float *dx, const float *dy,
			    const uint8_t *mask)
{
	float s = 1.0f / (1.0f - rate);
#pragma omp parallel for if (n > PAR_MIN) schedule(static)
	for (size_t i = 0; i < n; i++)
		dx[i] = select_pos(mask[i] != 0, dy[i] * s);
	return 0;
}

/* ---- softmax cross-entropy --------------------------------------------- */

int wf_cpu_softmax_xent_forward(wf_backend *be, int n, int k, float *probs, float *losses,
				const float *logits, const int32_t *labels)
{
#pragma omp parallel for if ((size_t)n * k > PAR_MIN) schedule(static)
	for (int i = 0; i < n; i++) {
		const float *z = logits + (size_t)i * k;
		float *p = probs + (size_t)i * k;
		float mx = z[0];
		for (int j = 1; j < k; j++)
			mx = z[j] > mx ? z[j] : mx;
		double sum = 0.0;
		for (int j = 0; j < k; j++) {
			p[j] = expf(z[j] - mx);
			sum += p[j];
		}
		float inv = (float)(1.0 / sum);
		for (int j = 0; j < k; j++)
			p[j] *= inv;
		/* log-sum-exp form: exact where probs[label] underflows to 0 */
		if (labels && losses)
			losses[i] = (float)(log(sum) - (double)(z[labels[i]] - mx));
	}
	return 0;
}

int wf_cpu_softmax_xent_backward(wf_backend *be, int n, int k, float *dlogits, const float *probs,
				 const int32_t *labels, float scale)
{
#pragma omp parallel for if ((size_t)n * k > PAR_MIN) schedule(static)
	for (int i = 0; i < n; i++) {
		const float *p = probs + (size_t)i * k;
		float *d = dlogits + (size_t)i * k;
		for (int j = 0; j < k; j++)
			d[j] = (p[j] - (j == labels[i] ? 1.0f : 0.0f)) * scale;
	}
	return 0;
}

/* ---- optimizer --------------------------------------------------------- */

int wf_cpu_optimizer_update(wf_backend *be, const wf_opt_desc *d, size_t n, float *p,
			    const float *g, float *m, float *v)
{
	const float lr = d->lr, wd = d->weight_decay, gs = d->grad_scale;
	if (d->kind == WF_OPT_SGD) {
		const float mu = d->momentum;
		if (mu == 0.0f) {
#pragma omp parallel for if (n > PAR_MIN) schedule(static)
			for (size_t i = 0; i < n; i++)
				p[i] -= lr * (g[i] * gs + wd * p[i]);
		} else if (d->nesterov) {
#pragma omp parallel for if (n > PAR_MIN) schedule(static)
			for (size_t i = 0; i < n; i++) {
				float gi = g[i] * gs + wd * p[i];
				m[i] = mu * m[i] + gi;
				p[i] -= lr * (gi + mu * m[i]);
			}
		} else {
#pragma omp parallel for if (n > PAR_MIN) schedule(static)
			for (size_t i = 0; i < n; i++) {
				float gi = g[i] * gs + wd * p[i];
				m[i] = mu * m[i] + gi;
				p[i] -= lr * m[i];
			}
		}
		return 0;
	}
	/* Adam or AdamW (kind, slots and step checked by the wrapper) */
	const float b1 = d->beta1, b2 = d->beta2, eps = d->eps;
	const float c1 = (float)(1.0 - pow((double)b1, (double)d->step));
	const float c2 = (float)(1.0 - pow((double)b2, (double)d->step));
	const float l2 = d->kind == WF_OPT_ADAM ? wd : 0.0f;   /* L2 into the gradient */
	const float dwd = d->kind == WF_OPT_ADAMW ? wd : 0.0f; /* decoupled decay */
#pragma omp parallel for if (n > PAR_MIN) schedule(static)
	for (size_t i = 0; i < n; i++) {
		float gi = g[i] * gs + l2 * p[i];
		m[i] = b1 * m[i] + (1.0f - b1) * gi;
		v[i] = b2 * v[i] + (1.0f - b2) * gi * gi;
		float mh = m[i] / c1, vh = v[i] / c2;
		p[i] -= lr * (mh / (sqrtf(vh) + eps) + dwd * p[i]);
	}
	return 0;
}
