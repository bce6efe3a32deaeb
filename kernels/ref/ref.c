/* ref.c: the reference backend. Every op of kernels.h as plain, single-threaded
 * C loops in the obvious order, with double accumulators for long sums. It is
 * the oracle the cpu and cuda backends are tested against, so clarity wins over
 * speed everywhere; it ignores plans and allocates host memory. Descriptors
 * arrive checked (kernels/ops.c). */
#include "kernels/kernels.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- memory ------------------------------------------------------------ */

static void *ref_alloc(wf_backend *be, size_t bytes)
{
	size_t rounded = (bytes + 63) / 64 * 64;
	if (rounded == 0)
		rounded = 64;
	void *p = aligned_alloc(64, rounded);
	if (!p) {
		wf_errf(&be->err, WF_ENOMEM, "ref: out of memory allocating %zu bytes", bytes);
		return NULL;
	}
	memset(p, 0, rounded);
	return p;
}

static void ref_free(wf_backend *be, void *p)
{
	free(p);
}

static int ref_copy(wf_backend *be, void *dst, const void *src, size_t bytes)
{
	if (bytes)
		memmove(dst, src, bytes);
	return 0;
}

static int ref_zero(wf_backend *be, void *p, size_t bytes)
{
	if (bytes)
		memset(p, 0, bytes);
	return 0;
}

static int ref_sync(wf_backend *be)
{
	return 0;
}

static void ref_plan_free(wf_backend *be, wf_plan *plan)
{
}

/* ---- conv2d --------------------------------------------------------------- */

/* Index helpers for NHWC activations and HWIO kernels. */
static size_t nhwc(int n, int y, int x, int c, int H, int W, int C)
{
	return (((size_t)n * H + y) * W + x) * C + c;
}

static size_t hwio(int ky, int kx, int i, int o, int KW, int I, int O)
{
	return (((size_t)ky * KW + kx) * I + i) * O + o;
}

static int ref_conv2d_forward(wf_backend *be, wf_plan **plan, const wf_conv_desc *d, float *y,
			      const float *x, const float *w, const float *b)
{
	int cg = d->c / d->groups;   /* input channels per group */
	int ocg = d->oc / d->groups; /* output channels per group */
	for (int n = 0; n < d->n; n++)
		for (int oy = 0; oy < d->oh; oy++)
			for (int ox = 0; ox < d->ow; ox++)
				for (int o = 0; o < d->oc; o++) {
					int g = o / ocg;
					double acc = (d->bias && b) ? b[o] : 0.0;
					for (int ky = 0; ky < d->kh; ky++) {
						int iy = oy * d->sh - d->pt + ky * d->dh;
						if (iy < 0 || iy >= d->h)
							continue;
						for (int kx = 0; kx < d->kw; kx++) {
							int ix = ox * d->sw - d->pl + kx * d->dw;
							if (ix < 0 || ix >= d->w)
								continue;
							for (int i = 0; i < cg; i++) {
								int ic = g * cg + i;
								acc += (double)x[nhwc(n, iy, ix, ic,
										      d->h, d->w,
										      d->c)] *
								       w[hwio(ky, kx, i, o, d->kw,
									      cg, d->oc)];
							}
						}
					}
					y[nhwc(n, oy, ox, o, d->oh, d->ow, d->oc)] = (float)acc;
				}
	return 0;
}

/* dx[n,iy,ix,ic] gathers every (output, tap) pair that read it. */
static void conv_dx(const wf_conv_desc *d, float *dx, const float *dy, const float *w)
{
	int cg = d->c / d->groups;
	int ocg = d->oc / d->groups;
	for (int n = 0; n < d->n; n++)
		for (int iy = 0; iy < d->h; iy++)
			for (int ix = 0; ix < d->w; ix++)
				for (int ic = 0; ic < d->c; ic++) {
					int g = ic / cg, i = ic % cg;
					double acc = 0.0;
					for (int ky = 0; ky < d->kh; ky++) {
						int ty = iy + d->pt - ky * d->dh; /* = oy * sh */
						if (ty < 0 || ty % d->sh != 0)
							continue;
						int oy = ty / d->sh;
						if (oy >= d->oh)
							continue;
						for (int kx = 0; kx < d->kw; kx++) {
							int tx = ix + d->pl - kx * d->dw;
							if (tx < 0 || tx % d->sw != 0)
								continue;
							int ox = tx / d->sw;
							if (ox >= d->ow)
								continue;
							for (int o = g * ocg; o < (g + 1) * ocg;
							     o++)
								acc += (double)dy[nhwc(n, oy, ox, o,
										       d->oh, d->ow,
										       d->oc)] *
								       w[hwio(ky, kx, i, o, d->kw,
									      cg, d->oc)];
						}
					}
					dx[nhwc(n, iy, ix, ic, d->h, d->w, d->c)] = (float)acc;
				}
}

/* dw[ky,kx,i,o] += sum over samples and output positions of x * dy. */
static void conv_dw(const wf_conv_desc *d, float *dw, const float *dy, const float *x)
{
	int cg = d->c / d->groups;
	int ocg = d->oc / d->groups;
	for (int ky = 0; ky < d->kh; ky++)
		for (int kx = 0; kx < d->kw; kx++)
			for (int i = 0; i < cg; i++)
				for (int o = 0; o < d->oc; o++) {
					int ic = (o / ocg) * cg + i;
					double acc = 0.0;
					for (int n = 0; n < d->n; n++)
						for (int oy = 0; oy < d->oh; oy++) {
							int iy = oy * d->sh - d->pt + ky * d->dh;
							if (iy < 0 || iy >= d->h)
								continue;
							for (int ox = 0; ox < d->ow; ox++) {
								int ix = ox * d->sw - d->pl +
									 kx * d->dw;
								if (ix < 0 || ix >= d->w)
									continue;
								acc += (double)x[nhwc(n, iy, ix, ic,
										      d->h, d->w,
										      d->c)] *
								       dy[nhwc(n, oy, ox, o, d->oh,
									       d->ow, d->oc)];
							}
						}
					dw[hwio(ky, kx, i, o, d->kw, cg, d->oc)] += (float)acc;
				}
}

static void bias_grad(size_t rows, int cols, float *db, const float *dy)
{
	for (int o = 0; o < cols; o++) {
		double acc = 0.0;
		for (size_t r = 0; r < rows; r++)
			acc += dy[r * cols + o];
		db[o] += (float)acc;
	}
}

static int ref_conv2d_backward(wf_backend *be, wf_plan **plan, const wf_conv_desc *d, float *dx,
			       float *dw, float *db, const float *dy, const float *x,
			       const float *w)
{
	if (dx)
		conv_dx(d, dx, dy, w);
	if (dw)
		conv_dw(d, dw, dy, x);
	if (db && d->bias)
		bias_grad((size_t)d->n * d->oh * d->ow, d->oc, db, dy);
	return 0;
}

/* ---- dense ---------------------------------------------------------------- */

static int ref_dense_forward(wf_backend *be, wf_plan **plan, const wf_dense_desc *d, float *y,
			     const float *x, const float *w, const float *b)
{
	for (int n = 0; n < d->n; n++)
		for (int o = 0; o < d->out; o++) {
			double acc = (d->bias && b) ? b[o] : 0.0;
			for (int i = 0; i < d->in; i++)
				acc += (double)x[(size_t)n * d->in + i] * w[(size_t)i * d->out + o];
			y[(size_t)n * d->out + o] = (float)acc;
		}
	return 0;
}

static int ref_dense_backward(wf_backend *be, wf_plan **plan, const wf_dense_desc *d, float *dx,
			      float *dw, float *db, const float *dy, const float *x, const float *w)
{
	if (dx)
		for (int n = 0; n < d->n; n++)
			for (int i = 0; i < d->in; i++) {
				double acc = 0.0;
				for (int o = 0; o < d->out; o++)
					acc += (double)dy[(size_t)n * d->out + o] *
					       w[(size_t)i * d->out + o];
				dx[(size_t)n * d->in + i] = (float)acc;
			}
	if (dw)
		for (int i = 0; i < d->in; i++)
			for (int o = 0; o < d->out; o++) {
				double acc = 0.0;
				for (int n = 0; n < d->n; n++)
					acc += (double)x[(size_t)n * d->in + i] *
					       dy[(size_t)n * d->out + o];
				dw[(size_t)i * d->out + o] += (float)acc;
			}
	if (db && d->bias)
		bias_grad((size_t)d->n, d->out, db, dy);
	return 0;
}

/* ---- batch norm ------------------------------------------------------------- */

static int ref_batchnorm_forward(wf_backend *be, wf_plan **plan, const wf_bn_desc *d, int training,
				 float *y, float *save_mean, float *save_invstd, const float *x,
				 const float *gamma, const float *beta, float *run_mean,
				 float *run_var)
{
	size_t m = (size_t)d->n * d->h * d->w; /* samples per channel */
	int C = d->c;
	for (int c = 0; c < C; c++) {
		double mean, var;
		if (training) {
			double sum = 0.0;
			for (size_t r = 0; r < m; r++)
				sum += x[r * C + c];
			mean = sum / (double)m;
			double sq = 0.0;
			for (size_t r = 0; r < m; r++) {
				double dlt = x[r * C + c] - mean;
				sq += dlt * dlt;
			}
			var = sq / (double)m; /* biased: used to normalise */
		} else {
			mean = run_mean[c];
			var = run_var[c];
		}
		double invstd = 1.0 / sqrt(var + (double)d->eps);
		double g = gamma ? gamma[c] : 1.0;
		double bt = beta ? beta[c] : 0.0;
		for (size_t r = 0; r < m; r++)
			y[r * C + c] = (float)(g * (x[r * C + c] - mean) * invstd + bt);
		if (training) {
			if (save_mean)
				save_mean[c] = (float)mean;
			if (save_invstd)
				save_invstd[c] = (float)invstd;
			double unbiased = m > 1 ? var * (double)m / (double)(m - 1) : var;
			double mom = d->momentum;
			if (run_mean)
				run_mean[c] = (float)(mom * run_mean[c] + (1.0 - mom) * mean);
			if (run_var)
				run_var[c] = (float)(mom * run_var[c] + (1.0 - mom) * unbiased);
		}
	}
	return 0;
}

/* With xhat = (x - mean) * invstd and m samples per channel:
 * dx = gamma * invstd / m * (m*dy - sum(dy) - xhat * sum(dy * xhat)). */
static int ref_batchnorm_backward(wf_backend *be, wf_plan **plan, const wf_bn_desc *d, float *dx,
				  float *dgamma, float *dbeta, const float *dy, const float *x,
				  const float *gamma, const float *save_mean,
				  const float *save_invstd)
{
	size_t m = (size_t)d->n * d->h * d->w;
	int C = d->c;
	for (int c = 0; c < C; c++) {
		double mean = save_mean[c], invstd = save_invstd[c];
		double sum_dy = 0.0, sum_dy_xhat = 0.0;
		for (size_t r = 0; r < m; r++) {
			double xhat = (x[r * C + c] - mean) * invstd;
			sum_dy += dy[r * C + c];
			sum_dy_xhat += dy[r * C + c] * xhat;
		}
		if (dbeta)
			dbeta[c] += (float)sum_dy;
		if (dgamma)
			dgamma[c] += (float)sum_dy_xhat;
		if (dx) {
			double g = gamma ? gamma[c] : 1.0;
			double k = g * invstd / (double)m;
			for (size_t r = 0; r < m; r++) {
				double xhat = (x[r * C + c] - mean) * invstd;
				dx[r * C + c] = (float)(k * ((double)m * dy[r * C + c] - sum_dy -
							     xhat * sum_dy_xhat));
			}
		}
	}
	return 0;
}

/* ---- activations and elementwise ---------------------------------------------- */

static int ref_act_forward(wf_backend *be, wf_act_kind kind, size_t n, float *y, const float *x)
{
	for (size_t i = 0; i < n; i++) {
		float v = x[i] > 0.0f ? x[i] : 0.0f;
		if (kind == WF_ACT_RELU6 && v > 6.0f)
			v = 6.0f;
		y[i] = v;
	}
	return 0;
}

static int ref_act_backward(wf_backend *be, wf_act_kind kind, size_t n, float *dx, const float *dy,
			    const float *y)
{
	for (size_t i = 0; i < n; i++) {
		int pass = y[i] > 0.0f && (kind == WF_ACT_RELU || y[i] < 6.0f);
		dx[i] = pass ? dy[i] : 0.0f;
	}
	return 0;
}

static int ref_add(wf_backend *be, size_t n, float *y, const float *a, const float *b)
{
	for (size_t i = 0; i < n; i++)
		y[i] = a[i] + b[i];
	return 0;
}

static int ref_accumulate(wf_backend *be, size_t n, float *y, const float *x)
{
	for (size_t i = 0; i < n; i++)
		y[i] += x[i];
	return 0;
}

static int ref_scale(wf_backend *be, size_t n, float *y, const float *x, float alpha)
{
	for (size_t i = 0; i < n; i++)
		y[i] = alpha * x[i];
	return 0;
}

/* ---- concat ---------------------------------------------------------------- */

/* Width of the concatenated rows. */
static size_t concat_total(int k, const int *widths)
{
	size_t t = 0;
	for (int i = 0; i < k; i++)
		t += (size_t)widths[i];
	return t;
}

static int ref_concat_forward(wf_backend *be, size_t rows, int k, const int *widths, float *y,
			      const float *const *xs)
{
	size_t total = concat_total(k, widths);
	for (size_t r = 0; r < rows; r++) {
		size_t off = 0;
		for (int i = 0; i < k; i++) {
			memcpy(y + r * total + off, xs[i] + r * widths[i],
			       (size_t)widths[i] * sizeof(float));
			off += (size_t)widths[i];
		}
	}
	return 0;
}

static int ref_concat_backward(wf_backend *be, size_t rows, int k, const int *widths,
			       float *const *dxs, const float *dy)
{
	size_t total = concat_total(k, widths);
	for (size_t r = 0; r < rows; r++) {
		size_t off = 0;
		for (int i = 0; i < k; i++) {
			if (dxs[i])
				memcpy(dxs[i] + r * widths[i], dy + r * total + off,
				       (size_t)widths[i] * sizeof(float));
			off += (size_t)widths[i];
		}
	}
	return 0;
}

/* ---- pooling ----------------------------------------------------------------- */

/* Window of output (oy, ox) clipped to the input: rows [*y0, *y1), cols [*x0, *x1). */
static void pool_window(const wf_pool_desc *d, int oy, int ox, int *y0, int *y1, int *x0, int *x1)
{
	int ys = oy * d->sh - d->pt, xs = ox * d->sw - d->pl;
	*y0 = ys > 0 ? ys : 0;
	*y1 = ys + d->kh < d->h ? ys + d->kh : d->h;
	*x0 = xs > 0 ? xs : 0;
	*x1 = xs + d->kw < d->w ? xs + d->kw : d->w;
}

static int ref_pool_forward(wf_backend *be, wf_plan **plan, const wf_pool_desc *d, float *y,
			    const float *x)
{
	for (int n = 0; n < d->n; n++)
		for (int oy = 0; oy < d->oh; oy++)
			for (int ox = 0; ox < d->ow; ox++) {
				int y0, y1, x0, x1;
				pool_window(d, oy, ox, &y0, &y1, &x0, &x1);
				for (int c = 0; c < d->c; c++) {
					double acc = 0.0;
					float best = -INFINITY;
					for (int iy = y0; iy < y1; iy++)
						for (int ix = x0; ix < x1; ix++) {
							float v = x[nhwc(n, iy, ix, c, d->h, d->w,
									 d->c)];
							acc += v;
							if (v > best)
								best = v;
						}
					int count = (y1 - y0) * (x1 - x0); /* padding excluded */
					float out = d->kind == WF_POOL_MAX ? best
									   : (float)(acc / count);
					y[nhwc(n, oy, ox, c, d->oh, d->ow, d->c)] = out;
				}
			}
	return 0;
}

/* Max routes each dy to the first maximum of its window (row-major scan);
 * avg spreads dy evenly over the window's cells inside the input. */
static int ref_pool_backward(wf_backend *be, wf_plan **plan, const wf_pool_desc *d, float *dx,
			     const float *dy, const float *x, const float *y)
{
	size_t nx = (size_t)d->n * d->h * d->w * d->c;
	memset(dx, 0, nx * sizeof(float));
	for (int n = 0; n < d->n; n++)
		for (int oy = 0; oy < d->oh; oy++)
			for (int ox = 0; ox < d->ow; ox++) {
				int y0, y1, x0, x1;
				pool_window(d, oy, ox, &y0, &y1, &x0, &x1);
				int count = (y1 - y0) * (x1 - x0);
				for (int c = 0; c < d->c; c++) {
					float g = dy[nhwc(n, oy, ox, c, d->oh, d->ow, d->c)];
					if (d->kind == WF_POOL_AVG) {
						for (int iy = y0; iy < y1; iy++)
							for (int ix = x0; ix < x1; ix++)
								dx[nhwc(n, iy, ix, c, d->h, d->w,
									d->c)] += g / (float)count;
						continue;
					}
					size_t arg = 0;
					float best = -INFINITY;
					int found = 0;
					for (int iy = y0; iy < y1; iy++)
						for (int ix = x0; ix < x1; ix++) {
							size_t at = nhwc(n, iy, ix, c, d->h, d->w,
									 d->c);
							if (!found || x[at] > best) {
								best = x[at];
								arg = at;
								found = 1;
							}
						}
					if (found)
						dx[arg] += g;
				}
			}
	return 0;
}

/* ---- global average pool ------------------------------------------------------- */

static int ref_gap_forward(wf_backend *be, int n, int hw, int c, float *y, const float *x)
{
	for (int s = 0; s < n; s++)
		for (int ch = 0; ch < c; ch++) {
			double acc = 0.0;
			for (int p = 0; p < hw; p++)
				acc += x[((size_t)s * hw + p) * c + ch];
			y[(size_t)s * c + ch] = (float)(acc / hw);
		}
	return 0;
}

static int ref_gap_backward(wf_backend *be, int n, int hw, int c, float *dx, const float *dy)
{
	for (int s = 0; s < n; s++)
		for (int p = 0; p < hw; p++)
			for (int ch = 0; ch < c; ch++)
				dx[((size_t)s * hw + p) * c + ch] = dy[(size_t)s * c + ch] / hw;
	return 0;
}

/* ---- zero padding / cropping ---------------------------------------------------- */

/* Output cell (oy, ox) reads input cell (oy - pt, ox - pl) when it exists. */
static int ref_pad_forward(wf_backend *be, const wf_pad_desc *d, float *y, const float *x)
{
	int oh = d->h + d->pt + d->pb, ow = d->w + d->pl + d->pr;
	for (int n = 0; n < d->n; n++)
		for (int oy = 0; oy < oh; oy++)
			for (int ox = 0; ox < ow; ox++) {
				int iy = oy - d->pt, ix = ox - d->pl;
				int inside = iy >= 0 && iy < d->h && ix >= 0 && ix < d->w;
				for (int c = 0; c < d->c; c++)
					y[nhwc(n, oy, ox, c, oh, ow, d->c)] =
						inside ? x[nhwc(n, iy, ix, c, d->h, d->w, d->c)]
						       : 0.0f;
			}
	return 0;
}

static int ref_pad_backward(wf_backend *be, const wf_pad_desc *d, float *dx, const float *dy)
{
	int oh = d->h + d->pt + d->pb, ow = d->w + d->pl + d->pr;
	for (int n = 0; n < d->n; n++)
		for (int iy = 0; iy < d->h; iy++)
			for (int ix = 0; ix < d->w; ix++) {
				int oy = iy + d->pt, ox = ix + d->pl;
				int kept = oy >= 0 && oy < oh && ox >= 0 && ox < ow;
				for (int c = 0; c < d->c; c++)
					dx[nhwc(n, iy, ix, c, d->h, d->w, d->c)] =
						kept ? dy[nhwc(n, oy, ox, c, oh, ow, d->c)] : 0.0f;
			}
	return 0;
}

/* ---- dropout ------------------------------------------------------------------ */

static int ref_dropout_forward(wf_backend *be, size_t n, float rate, uint64_t seed, float *y,
			       uint8_t *mask, const float *x)
{
	float keep_scale = 1.0f / (1.0f - rate);
	for (size_t i = 0; i < n; i++) {
		int keep = wf_dropout_keep(seed, i, rate);
		if (mask)
			mask[i] = (uint8_t)keep;
		y[i] = keep ? x[i] * keep_scale : 0.0f;
	}
	return 0;
}

static int ref_dropout_backward(wf_backend *be, size_t n, float rate, float *dx, const float *dy,
				const uint8_t *mask)
{
	float keep_scale = 1.0f / (1.0f - rate);
	for (size_t i = 0; i < n; i++)
		dx[i] = mask[i] ? dy[i] * keep_scale : 0.0f;
	return 0;
}

/* ---- softmax cross-entropy ------------------------------------------------------ */

static int ref_softmax_xent_forward(wf_backend *be, int n, int k, float *probs, float *losses,
				    const float *logits, const int32_t *labels)
{
	for (int i = 0; i < n; i++) {
		const float *row = logits + (size_t)i * k;
		double mx = row[0];
		for (int j = 1; j < k; j++)
			if (row[j] > mx)
				mx = row[j];
		double sum = 0.0;
		for (int j = 0; j < k; j++)
			sum += exp(row[j] - mx);
		for (int j = 0; j < k; j++)
			probs[(size_t)i * k + j] = (float)(exp(row[j] - mx) / sum);
		/* -log p[label] = log(sum) - (z[label] - max): no overflow, no log(0) */
		if (labels && losses)
			losses[i] = (float)(log(sum) - (row[labels[i]] - mx));
	}
	return 0;
}

static int ref_softmax_xent_backward(wf_backend *be, int n, int k, float *dlogits,
				     const float *probs, const int32_t *labels, float scale)
{
	for (int i = 0; i < n; i++)
		for (int j = 0; j < k; j++) {
			float p = probs[(size_t)i * k + j];
			float t = j == labels[i] ? 1.0f : 0.0f;
			dlogits[(size_t)i * k + j] = (p - t) * scale;
		}
	return 0;
}

/* ---- optimizer ----------------------------------------------------------------- */

static int ref_optimizer_update(wf_backend *be, const wf_opt_desc *d, size_t n, float *p,
				const float *g, float *m, float *v)
{
	double lr = d->lr, wd = d->weight_decay;
	if (d->kind == WF_OPT_SGD) {
		double mom = d->momentum;
		for (size_t i = 0; i < n; i++) {
			double gi = (double)g[i] * d->grad_scale + wd * p[i];
			if (mom == 0.0) {
				p[i] = (float)(p[i] - lr * gi);
				continue;
			}
			double mi = mom * m[i] + gi;
			m[i] = (float)mi;
			if (d->nesterov)
				p[i] = (float)(p[i] - lr * (gi + mom * mi));
			else
				p[i] = (float)(p[i] - lr * mi);
		}
		return 0;
	}
	double b1 = d->beta1, b2 = d->beta2, eps = d->eps;
	double c1 = 1.0 - pow(b1, (double)d->step); /* bias corrections */
	double c2 = 1.0 - pow(b2, (double)d->step);
	for (size_t i = 0; i < n; i++) {
		double pi = p[i];
		double gi = (double)g[i] * d->grad_scale;
		if (d->kind == WF_OPT_ADAM)
			gi += wd * pi;
		double mi = b1 * m[i] + (1.0 - b1) * gi;
		double vi = b2 * v[i] + (1.0 - b2) * gi * gi;
		m[i] = (float)mi;
		v[i] = (float)vi;
		double upd = (mi / c1) / (sqrt(vi / c2) + eps);
		if (d->kind == WF_OPT_ADAMW)
			upd += wd * pi; /* decoupled weight decay */
		p[i] = (float)(pi - lr * upd);
	}
	return 0;
}

/* ---- the table ------------------------------------------------------------------ */

static const wf_backend_ops ref_ops = {
	.alloc = ref_alloc,
	.free = ref_free,
	.to_device = ref_copy,
	.to_host = ref_copy,
	.zero = ref_zero,
	.copy = ref_copy,
	.sync = ref_sync,
	.plan_free = ref_plan_free,
	.destroy = NULL,
	.conv2d_forward = ref_conv2d_forward,
	.conv2d_backward = ref_conv2d_backward,
	.dense_forward = ref_dense_forward,
	.dense_backward = ref_dense_backward,
	.batchnorm_forward = ref_batchnorm_forward,
	.batchnorm_backward = ref_batchnorm_backward,
	.act_forward = ref_act_forward,
	.act_backward = ref_act_backward,
	.add = ref_add,
	.accumulate = ref_accumulate,
	.scale = ref_scale,
	.concat_forward = ref_concat_forward,
	.concat_backward = ref_concat_backward,
	.pool_forward = ref_pool_forward,
	.pool_backward = ref_pool_backward,
	.gap_forward = ref_gap_forward,
	.gap_backward = ref_gap_backward,
	.pad_forward = ref_pad_forward,
	.pad_backward = ref_pad_backward,
	.dropout_forward = ref_dropout_forward,
	.dropout_backward = ref_dropout_backward,
	.softmax_xent_forward = ref_softmax_xent_forward,
	.softmax_xent_backward = ref_softmax_xent_backward,
	.optimizer_update = ref_optimizer_update,
};

int wf_backend_ref_init(wf_backend *be, wf_err *err)
{
	if (!be)
		return wf_errf(err, WF_EINVAL, "ref: backend is NULL");
	be->name = "ref";
	be->caps |= WF_CAP_HOST_MEM;
	be->precisions = "fp32";
	be->ops = &ref_ops;
	be->ctx = NULL;
	wf_err_clear(&be->err);
	return 0;
}
