/* ops.c: the op-table wrappers. Learned from ggml's ggml-backend.c: thin
 * public functions that check their arguments once and call through the
 * backend's interface, supplying the default where a slot is optional. The
 * descriptor checks here are the only ones shared by ref, cpu and cuda. */
#include "kernels/ops.h"

#include "common/util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- profiling ---------------------------------------------------------------- */

#define PROF_MAX 40
struct wf_op_prof {
	int n;
	struct {
		const char *name;
		unsigned long calls;
		double sec;
	} op[PROF_MAX];
};

static double prof_begin(wf_backend *be)
{
	if (be->ops->sync)
		be->ops->sync(be);
	return wf_now();
}

static void prof_end(wf_backend *be, const char *name, double t0)
{
	if (be->ops->sync)
		be->ops->sync(be);
	struct wf_op_prof *p = be->prof;
	int i = 0;
	while (i < p->n && strcmp(p->op[i].name, name) != 0)
		i++;
	if (i == p->n && p->n < PROF_MAX)
		p->op[p->n++].name = name;
	if (i < p->n) {
		p->op[i].calls++;
		p->op[i].sec += wf_now() - t0;
	}
}

/* The backend call, timed between two device waits while profiling. */
#define TIMED(be, name, call)                                                                      \
	__extension__({                                                                            \
		double t0_ = (be)->prof ? prof_begin(be) : 0;                                      \
		int rc_ = (call);                                                                  \
		if ((be)->prof)                                                                    \
			prof_end(be, name, t0_);                                                   \
		rc_;                                                                               \
	})

int wf_op_profile_start(wf_backend *be)
{
	free(be->prof);
	be->prof = calloc(1, sizeof(*be->prof));
	return be->prof ? 0 : WF_ENOMEM;
}

static int by_time(const void *a, const void *b)
{
	double x = ((const double *)a)[0], y = ((const double *)b)[0];
	return (x < y) - (x > y);
}

void wf_op_profile_print(wf_backend *be, FILE *f, int steps)
{
	struct wf_op_prof *p = be->prof;
	if (!p)
		return;
	double total = 0, rows[PROF_MAX][2];
	for (int i = 0; i < p->n; i++) {
		rows[i][0] = p->op[i].sec;
		rows[i][1] = i;
		total += p->op[i].sec;
	}
	qsort(rows, (size_t)p->n, sizeof(rows[0]), by_time);
	steps = steps > 0 ? steps : 1;
	fprintf(f, "  %-22s %9s %12s %7s\n", "op", "calls/step", "ms/step", "share");
	for (int r = 0; r < p->n; r++) {
		int i = (int)rows[r][1];
		fprintf(f, "  %-22s %9.1f %12.3f %6.1f%%\n", p->op[i].name,
			(double)p->op[i].calls / steps, 1e3 * p->op[i].sec / steps,
			total > 0 ? 100.0 * p->op[i].sec / total : 0.0);
	}
	fprintf(f, "  %-22s %9s %12.3f\n", "(all ops, synchronised)", "", 1e3 * total / steps);
}

void wf_op_profile_stop(wf_backend *be)
{
	free(be->prof);
	be->prof = NULL;
}

/* ---- capabilities ---------------------------------------------------------- */

wf_backend_caps wf_backend_caps_of(const wf_backend *be)
{
	wf_backend_caps c = {0};
	c.host_memory = (be->caps & WF_CAP_HOST_MEM) != 0;
	c.bf16 = (be->caps & WF_CAP_BF16) != 0;
	c.fused_conv = be->ops->conv2d_forward_fused != NULL;
	c.int8 = (be->caps & WF_CAP_INT8) != 0;
	c.branches = be->ops->branches && be->threads > 1 && !be->opts.sequential ? be->threads : 1;
	c.train_fuse = (be->caps & WF_CAP_TRAIN_FUSE) != 0;
	c.bn_relu6 = c.train_fuse && (be->caps & WF_CAP_BN_RELU6) != 0;
	c.dx_acc = (be->caps & WF_CAP_DX_ACC) != 0;
	c.precisions = be->precisions ? be->precisions : "fp32";
	return c;
}

int wf_backend_host_memory(const wf_backend *be)
{
	return (be->caps & WF_CAP_HOST_MEM) != 0;
}

/* ---- descriptor checks ------------------------------------------------------- */

#define CHECK_POS(op, d, f)                                                                        \
	do {                                                                                       \
		if (!((d)->f > 0))                                                                 \
			return wf_errf(&be->err, WF_EINVAL, "%s: %s=%d must be positive", op, #f,  \
				       (int)(d)->f);                                               \
	} while (0)

#define CHECK_NONNEG(op, d, f)                                                                     \
	do {                                                                                       \
		if ((d)->f < 0)                                                                    \
			return wf_errf(&be->err, WF_EINVAL, "%s: %s=%d must not be negative", op,  \
				       #f, (int)(d)->f);                                           \
	} while (0)

/* Output extent of a window op along one axis (floor mode; 0 when the
 * window does not fit). */
static int window_out(int in, int pad_before, int pad_after, int k, int stride, int dilation)
{
	int span = in + pad_before + pad_after - ((k - 1) * dilation + 1);
	return span < 0 ? 0 : span / stride + 1;
}

static int check_conv(wf_backend *be, const wf_conv_desc *d)
{
	const char *op = "conv2d";
	CHECK_POS(op, d, n);
	CHECK_POS(op, d, h);
	CHECK_POS(op, d, w);
	CHECK_POS(op, d, c);
	CHECK_POS(op, d, oc);
	CHECK_POS(op, d, oh);
	CHECK_POS(op, d, ow);
	CHECK_POS(op, d, kh);
	CHECK_POS(op, d, kw);
	CHECK_POS(op, d, sh);
	CHECK_POS(op, d, sw);
	CHECK_POS(op, d, dh);
	CHECK_POS(op, d, dw);
	CHECK_POS(op, d, groups);
	CHECK_NONNEG(op, d, pt);
	CHECK_NONNEG(op, d, pb);
	CHECK_NONNEG(op, d, pl);
	CHECK_NONNEG(op, d, pr);
	if (d->c % d->groups != 0)
		return wf_errf(&be->err, WF_EINVAL, "conv2d: groups=%d does not divide c=%d",
			       d->groups, d->c);
	if (d->oc % d->groups != 0)
		return wf_errf(&be->err, WF_EINVAL, "conv2d: groups=%d does not divide oc=%d",
			       d->groups, d->oc);
	int oh = window_out(d->h, d->pt, d->pb, d->kh, d->sh, d->dh);
	int ow = window_out(d->w, d->pl, d->pr, d->kw, d->sw, d->dw);
	if (d->oh != oh || d->ow != ow)
		return wf_errf(&be->err, WF_EINVAL,
			       "conv2d: output oh=%d ow=%d does not match input h=%d w=%d, kernel "
			       "%dx%d, strides %dx%d, dilations %dx%d, padding t%d b%d l%d r%d "
			       "(expected %dx%d)",
			       d->oh, d->ow, d->h, d->w, d->kh, d->kw, d->sh, d->sw, d->dh, d->dw,
			       d->pt, d->pb, d->pl, d->pr, oh, ow);
	return 0;
}

/* conv2d_forward and conv2d_backward take a plain conv. */
static int check_conv_plain(wf_backend *be, const wf_conv_desc *d)
{
	int rc = check_conv(be, d);
	int bf16_ok = (d->io_bf16 & ~3) == 0 && be->bf16 && (be->caps & WF_CAP_TRAIN_FUSE);
	if (!rc && (d->act || d->residual || d->infer || (d->io_bf16 && !bf16_ok) || d->qx != 0 ||
		    d->x_u8 || d->io_q || d->qy != 0 || d->y_u8 || d->qr != 0 || d->r_u8))
		rc = wf_errf(&be->err, WF_EINVAL,
			     "conv2d: act=%d residual=%d infer=%d io_bf16=%d qx=%g io_q=%d are for "
			     "conv2d_forward_fused (0 here; io_bf16 1|2 with bf16 training "
			     "fusions)",
			     d->act, d->residual, d->infer, d->io_bf16, (double)d->qx, d->io_q);
	if (!rc && d->dx_acc &&
	    ((d->dx_acc & ~1) || !(be->caps & WF_CAP_DX_ACC) || (d->io_bf16 & 1)))
		rc = wf_errf(&be->err, WF_EINVAL,
			     "conv2d: dx_acc=%d (adding into a float dx) is 0, or 1 on a backend "
			     "that does it (%s %s), with io_bf16 bit 1 clear (%d)",
			     d->dx_acc, be->name, be->caps & WF_CAP_DX_ACC ? "does" : "does not",
			     d->io_bf16);
	return rc;
}

static int check_conv_fused(wf_backend *be, const wf_conv_desc *d, const float *y, const float *r)
{
	int rc = check_conv(be, d);
	if (rc)
		return rc;
	if (d->act < 0 || d->act > 2)
		return wf_errf(&be->err, WF_EINVAL, "conv2d: act=%d is not 0 none, 1 relu, 2 relu6",
			       d->act);
	if (d->residual < 0 || d->residual > 2 || (d->residual == 1 && !r) ||
	    (d->residual == 2 && r && r != y))
		return wf_errf(&be->err, WF_EINVAL,
			       "conv2d: residual=%d needs 1 with a residual tensor or 2 with the "
			       "residual in y",
			       d->residual);
	if (d->io_bf16 && !be->bf16)
		return wf_errf(&be->err, WF_EINVAL,
			       "conv2d: io_bf16=%d without bf16 precision on %s", d->io_bf16,
			       be->name);
	if (d->qx != 0 &&
	    (!(d->qx > 0 && d->qx < 1e30f) || !d->infer || d->io_bf16 || !(be->caps & WF_CAP_INT8)))
		return wf_errf(&be->err, WF_EINVAL,
			       "conv2d: qx=%g (int8) needs a finite scale > 0, infer=1, io_bf16=0 "
			       "and a backend with int8 convolutions (%s has %s)",
			       (double)d->qx, be->name, be->caps & WF_CAP_INT8 ? "them" : "none");
	int yq = (d->io_q & 2) != 0, rq = (d->io_q & 4) != 0;
	if ((d->io_q & ~7) || (d->io_q && !(d->qx > 0)) || (yq && !(d->qy > 0 && d->qy < 1e30f)) ||
	    (rq && !(d->qr > 0 && d->qr < 1e30f)) || (rq && !d->residual) ||
	    (d->residual == 2 && yq != rq))
		return wf_errf(
			&be->err, WF_EINVAL,
			"conv2d: io_q=%d (int8 tensors) needs qx > 0, finite qy > 0 for a "
			"quantised y (got %g), qr > 0 and a residual for a quantised residual "
			"(got %g), y and an in-place residual both quantised or both not",
			d->io_q, (double)d->qy, (double)d->qr);
	return 0;
}

static int check_dense(wf_backend *be, const wf_dense_desc *d)
{
	CHECK_POS("dense", d, n);
	CHECK_POS("dense", d, in);
	CHECK_POS("dense", d, out);
	return 0;
}

static int check_bn(wf_backend *be, const wf_bn_desc *d)
{
	CHECK_POS("batchnorm", d, n);
	CHECK_POS("batchnorm", d, h);
	CHECK_POS("batchnorm", d, w);
	CHECK_POS("batchnorm", d, c);
	if (!(d->eps >= 0.0f))
		return wf_errf(&be->err, WF_EINVAL, "batchnorm: eps=%g must not be negative",
			       (double)d->eps);
	if (!(d->momentum >= 0.0f && d->momentum <= 1.0f))
		return wf_errf(&be->err, WF_EINVAL, "batchnorm: momentum=%g must be in [0, 1]",
			       (double)d->momentum);
	int relu_ok =
		d->relu == 0 || d->relu == 1 || (d->relu == 2 && (be->caps & WF_CAP_BN_RELU6));
	if ((d->relu || d->io_bf16) && (!(be->caps & WF_CAP_TRAIN_FUSE) || !relu_ok ||
					(d->io_bf16 & ~1) || (d->io_bf16 && !be->bf16)))
		return wf_errf(&be->err, WF_EINVAL,
			       "batchnorm: relu=%d io_bf16=%d need 0 or 1 (relu 2, relu6, where "
			       "the backend fuses it), a backend with training fusions and bf16 "
			       "precision for io_bf16 (%s)",
			       d->relu, d->io_bf16, be->name);
	return 0;
}

/* Every padding >= 0 and smaller than the window. */
static int pool_pads_plain(const wf_pool_desc *d)
{
	return d->pt >= 0 && d->pb >= 0 && d->pl >= 0 && d->pr >= 0 && d->pt < d->kh &&
	       d->pb < d->kh && d->pl < d->kw && d->pr < d->kw;
}

static int check_pool(wf_backend *be, const wf_pool_desc *d)
{
	const char *op = "pool";
	if (d->kind != WF_POOL_MAX && d->kind != WF_POOL_AVG)
		return wf_errf(&be->err, WF_EINVAL, "pool: kind=%d is not max or avg",
			       (int)d->kind);
	CHECK_POS(op, d, n);
	CHECK_POS(op, d, h);
	CHECK_POS(op, d, w);
	CHECK_POS(op, d, c);
	CHECK_POS(op, d, oh);
	CHECK_POS(op, d, ow);
	CHECK_POS(op, d, kh);
	CHECK_POS(op, d, kw);
	CHECK_POS(op, d, sh);
	CHECK_POS(op, d, sw);
	/* a 1x1 window picks one pixel (kernels.h): values kept, any offset */
	int pick = d->kh == 1 && d->kw == 1 && be->ops->conv2d_forward_fused;
	if (pick && (d->pt <= -d->h || d->pl <= -d->w || d->pb <= -d->h || d->pr <= -d->w))
		return wf_errf(&be->err, WF_EINVAL,
			       "pool: a 1x1 window's cropping t%d b%d l%d r%d leaves nothing of "
			       "the %dx%d input",
			       -d->pt, -d->pb, -d->pl, -d->pr, d->h, d->w);
	if (!pick && !pool_pads_plain(d))
		return wf_errf(&be->err, WF_EINVAL,
			       "pool: padding t%d b%d l%d r%d must be >= 0 and smaller than the "
			       "window %dx%d",
			       d->pt, d->pb, d->pl, d->pr, d->kh, d->kw);
	int keeps = d->kind == WF_POOL_MAX || pick; /* values pass through unchanged */
	if (d->q8 && (d->q8 < 0 || d->q8 > 2 || !keeps || !(be->caps & WF_CAP_INT8)))
		return wf_errf(&be->err, WF_EINVAL,
			       "pool: q8=%d (int8 tensors) is 1 (u8) or 2 (s8), for max pooling "
			       "or a 1x1 window on a backend with int8 (%s has %s)",
			       d->q8, be->name, be->caps & WF_CAP_INT8 ? "it" : "none");
	if (d->io_bf16 && (d->io_bf16 != 1 || d->q8 || !keeps || !be->bf16))
		return wf_errf(&be->err, WF_EINVAL,
			       "pool: io_bf16=%d (bf16 tensors) is 1, for max pooling or a 1x1 "
			       "window on a backend computing in bf16 (%s: %s)",
			       d->io_bf16, be->name, be->bf16 ? "bf16" : "not bf16");
	int oh = window_out(d->h, d->pt, d->pb, d->kh, d->sh, 1);
	int ow = window_out(d->w, d->pl, d->pr, d->kw, d->sw, 1);
	if (d->oh != oh || d->ow != ow)
		return wf_errf(&be->err, WF_EINVAL,
			       "pool: output oh=%d ow=%d does not match input h=%d w=%d, window "
			       "%dx%d, strides %dx%d, padding t%d b%d l%d r%d (expected %dx%d)",
			       d->oh, d->ow, d->h, d->w, d->kh, d->kw, d->sh, d->sw, d->pt, d->pb,
			       d->pl, d->pr, oh, ow);
	return 0;
}

static int check_pad(wf_backend *be, const wf_pad_desc *d)
{
	CHECK_POS("pad", d, n);
	CHECK_POS("pad", d, h);
	CHECK_POS("pad", d, w);
	CHECK_POS("pad", d, c);
	if (d->h + d->pt + d->pb <= 0)
		return wf_errf(&be->err, WF_EINVAL, "pad: h=%d with pt=%d pb=%d leaves no rows",
			       d->h, d->pt, d->pb);
	if (d->w + d->pl + d->pr <= 0)
		return wf_errf(&be->err, WF_EINVAL, "pad: w=%d with pl=%d pr=%d leaves no columns",
			       d->w, d->pl, d->pr);
	return 0;
}

static int check_act(wf_backend *be, wf_act_kind kind)
{
	if (kind != WF_ACT_RELU && kind != WF_ACT_RELU6)
		return wf_errf(&be->err, WF_EINVAL, "act: kind=%d is not relu or relu6", (int)kind);
	return 0;
}

static int check_concat(wf_backend *be, int k, const int *widths)
{
	if (k <= 0)
		return wf_errf(&be->err, WF_EINVAL, "concat: k=%d inputs must be positive", k);
	for (int i = 0; i < k; i++)
		if (widths[i] <= 0)
			return wf_errf(&be->err, WF_EINVAL,
				       "concat: widths[%d]=%d must be positive", i, widths[i]);
	return 0;
}

static int check_gap(wf_backend *be, int n, int hw, int c)
{
	if (n <= 0 || hw <= 0 || c <= 0)
		return wf_errf(&be->err, WF_EINVAL, "gap: n=%d hw=%d c=%d must be positive", n, hw,
			       c);
	return 0;
}

static int check_rate(wf_backend *be, float rate)
{
	if (!(rate >= 0.0f && rate < 1.0f))
		return wf_errf(&be->err, WF_EINVAL, "dropout: rate=%g must be in [0, 1)",
			       (double)rate);
	return 0;
}

/* Sizes always; the labels themselves where they are host memory. */
static int check_xent(wf_backend *be, int n, int k, const int32_t *labels)
{
	if (n <= 0 || k <= 0)
		return wf_errf(&be->err, WF_EINVAL, "softmax_xent: n=%d k=%d must be positive", n,
			       k);
	if (labels && wf_backend_host_memory(be))
		for (int i = 0; i < n; i++)
			if (labels[i] < 0 || labels[i] >= k)
				return wf_errf(&be->err, WF_EINVAL,
					       "softmax_xent: labels[%d] = %d is outside [0, %d)",
					       i, (int)labels[i], k);
	return 0;
}

static int check_opt(wf_backend *be, const wf_opt_desc *d, const float *m, const float *v)
{
	switch (d->kind) {
	case WF_OPT_SGD:
		if (d->momentum != 0.0f && !m)
			return wf_errf(&be->err, WF_EINVAL,
				       "optimizer: sgd with momentum=%g needs the m slot",
				       (double)d->momentum);
		return 0;
	case WF_OPT_ADAM:
	case WF_OPT_ADAMW:
		if (!m || !v)
			return wf_errf(&be->err, WF_EINVAL,
				       "optimizer: adam needs the m and v slots");
		if (d->step < 1)
			return wf_errf(&be->err, WF_EINVAL,
				       "optimizer: step=%ld must be >= 1 for adam bias correction",
				       d->step);
		return 0;
	}
	return wf_errf(&be->err, WF_EINVAL, "optimizer: kind=%d is not sgd, adam or adamw",
		       (int)d->kind);
}

/* ---- memory -------------------------------------------------------------------- */

void *wf_op_alloc(wf_backend *be, size_t bytes)
{
	wf_err_clear(&be->err);
	return be->ops->alloc(be, bytes);
}

void wf_op_free(wf_backend *be, void *p)
{
	if (p)
		be->ops->free(be, p);
}

void *wf_op_host_alloc(wf_backend *be, size_t bytes)
{
	wf_err_clear(&be->err);
	if (!be->ops->host_alloc) {
		void *p = calloc(1, bytes ? bytes : 1);
		if (!p)
			wf_errf(&be->err, WF_ENOMEM, "out of memory for %zu bytes of host memory",
				bytes);
		return p;
	}
	return be->ops->host_alloc(be, bytes);
}

void wf_op_host_free(wf_backend *be, void *p)
{
	if (p && be->ops->host_free)
		be->ops->host_free(be, p);
	else
		free(p);
}

int wf_op_to_device(wf_backend *be, void *dst, const void *src_host, size_t bytes)
{
	wf_err_clear(&be->err);
	return TIMED(be, "to_device", be->ops->to_device(be, dst, src_host, bytes));
}

int wf_op_to_host(wf_backend *be, void *dst_host, const void *src, size_t bytes)
{
	wf_err_clear(&be->err);
	return TIMED(be, "to_host", be->ops->to_host(be, dst_host, src, bytes));
}

int wf_op_zero(wf_backend *be, void *p, size_t bytes)
{
	wf_err_clear(&be->err);
	return TIMED(be, "zero", be->ops->zero(be, p, bytes));
}

int wf_op_copy(wf_backend *be, void *dst, const void *src, size_t bytes)
{
	wf_err_clear(&be->err);
	return TIMED(be, "copy", be->ops->copy(be, dst, src, bytes));
}

int wf_op_sync(wf_backend *be)
{
	wf_err_clear(&be->err);
	return be->ops->sync ? be->ops->sync(be) : 0;
}

/* ---- ops ------------------------------------------------------------------------- */

int wf_op_conv2d_forward(wf_backend *be, wf_plan **plan, const wf_conv_desc *d, float *y,
			 const float *x, const float *w, const float *b)
{
	wf_err_clear(&be->err);
	int rc = check_conv_plain(be, d);
	return rc ? rc
		  : TIMED(be, "conv2d_forward", be->ops->conv2d_forward(be, plan, d, y, x, w, b));
}

int wf_op_conv2d_forward_fused(wf_backend *be, wf_plan **plan, const wf_conv_desc *d, float *y,
			       const float *x, const float *w, const float *b, const float *r)
{
	wf_err_clear(&be->err);
	int rc = check_conv_fused(be, d, y, r);
	if (rc)
		return rc;
	if (be->ops->conv2d_forward_fused)
		return TIMED(be, "conv2d_forward_fused",
			     be->ops->conv2d_forward_fused(be, plan, d, y, x, w, b, r));
	/* the default: the plain conv, then the residual, then the activation */
	if (d->io_bf16 || d->residual == 2)
		return wf_errf(&be->err, WF_ENOTSUP,
			       "conv2d: io_bf16=%d, residual=%d are not supported on %s",
			       d->io_bf16, d->residual, be->name);
	wf_conv_desc plain = *d;
	plain.act = plain.residual = plain.infer = 0;
	size_t n = (size_t)d->n * d->oh * d->ow * d->oc;
	if ((rc = be->ops->conv2d_forward(be, plan, &plain, y, x, w, b)) != 0)
		return rc;
	if (d->residual && (rc = be->ops->accumulate(be, n, y, r)) != 0)
		return rc;
	if (d->act)
		rc = be->ops->act_forward(be, d->act == 1 ? WF_ACT_RELU : WF_ACT_RELU6, n, y, y);
	return rc;
}

int wf_op_conv2d_backward(wf_backend *be, wf_plan **plan, const wf_conv_desc *d, float *dx,
			  float *dw, float *db, const float *dy, const float *x, const float *w)
{
	wf_err_clear(&be->err);
	int rc = check_conv_plain(be, d);
	return rc ? rc
		  : TIMED(be, "conv2d_backward",
			  be->ops->conv2d_backward(be, plan, d, dx, dw, db, dy, x, w));
}

int wf_op_dense_forward(wf_backend *be, wf_plan **plan, const wf_dense_desc *d, float *y,
			const float *x, const float *w, const float *b)
{
	wf_err_clear(&be->err);
	int rc = check_dense(be, d);
	return rc ? rc
		  : TIMED(be, "dense_forward", be->ops->dense_forward(be, plan, d, y, x, w, b));
}

int wf_op_dense_backward(wf_backend *be, wf_plan **plan, const wf_dense_desc *d, float *dx,
			 float *dw, float *db, const float *dy, const float *x, const float *w)
{
	wf_err_clear(&be->err);
	int rc = check_dense(be, d);
	return rc ? rc
		  : TIMED(be, "dense_backward",
			  be->ops->dense_backward(be, plan, d, dx, dw, db, dy, x, w));
}

int wf_op_batchnorm_forward(wf_backend *be, wf_plan **plan, const wf_bn_desc *d, int training,
			    float *y, float *save_mean, float *save_invstd, const float *x,
			    const float *gamma, const float *beta, float *run_mean, float *run_var)
{
	wf_err_clear(&be->err);
	int rc = check_bn(be, d);
	return rc ? rc
		  : TIMED(be, "batchnorm_forward",
			  be->ops->batchnorm_forward(be, plan, d, training, y, save_mean,
						     save_invstd, x, gamma, beta, run_mean,
						     run_var));
}

int wf_op_batchnorm_backward(wf_backend *be, wf_plan **plan, const wf_bn_desc *d, float *dx,
			     float *dgamma, float *dbeta, const float *dy, const float *x,
			     const float *gamma, const float *save_mean, const float *save_invstd)
{
	wf_err_clear(&be->err);
	int rc = check_bn(be, d);
	return rc ? rc
		  : TIMED(be, "batchnorm_backward",
			  be->ops->batchnorm_backward(be, plan, d, dx, dgamma, dbeta, dy, x, gamma,
						      save_mean, save_invstd));
}

int wf_op_act_forward(wf_backend *be, wf_act_kind kind, size_t n, float *y, const float *x)
{
	wf_err_clear(&be->err);
	int rc = check_act(be, kind);
	return rc ? rc : TIMED(be, "act_forward", be->ops->act_forward(be, kind, n, y, x));
}

int wf_op_act_backward(wf_backend *be, wf_act_kind kind, size_t n, float *dx, const float *dy,
		       const float *y)
{
	wf_err_clear(&be->err);
	int rc = check_act(be, kind);
	return rc ? rc : TIMED(be, "act_backward", be->ops->act_backward(be, kind, n, dx, dy, y));
}

int wf_op_add(wf_backend *be, size_t n, float *y, const float *a, const float *b)
{
	wf_err_clear(&be->err);
	return TIMED(be, "add", be->ops->add(be, n, y, a, b));
}

int wf_op_add_mixed(wf_backend *be, size_t n, float *y, const void *a, const void *b, int bf16,
		    int relu)
{
	wf_err_clear(&be->err);
	if (!be->ops->add_mixed || (bf16 & ~3))
		return wf_errf(&be->err, WF_EINVAL, "add: bf16=%d (inputs in bf16) on %s", bf16,
			       be->name);
	return TIMED(be, "add", be->ops->add_mixed(be, n, y, a, b, bf16, relu != 0));
}

int wf_op_to_bf16(wf_backend *be, size_t n, void *y, const float *x, int act)
{
	wf_err_clear(&be->err);
	if (!be->ops->to_bf16)
		return wf_errf(&be->err, WF_EINVAL, "to_bf16: no bf16 tensors on %s", be->name);
	if (act < 0 || act > 2)
		return wf_errf(&be->err, WF_EINVAL, "to_bf16: act=%d is 0, 1 (relu) or 2 (relu6)",
			       act);
	return TIMED(be, "to_bf16", be->ops->to_bf16(be, n, y, x, act));
}

int wf_op_add_relu_backward(wf_backend *be, size_t n, const float *dy, const float *y, void *da,
			    int ma, void *db, int mb)
{
	wf_err_clear(&be->err);
	if (!be->ops->add_relu_backward)
		return wf_errf(&be->err, WF_EINVAL, "add_relu_backward: not on %s", be->name);
	if (ma < 0 || ma > 3 || mb < 0 || mb > 3 || (ma && !da) || (mb && !db))
		return wf_errf(&be->err, WF_EINVAL,
			       "add_relu_backward: modes %d, %d are 0..3, each with its buffer", ma,
			       mb);
	return TIMED(be, "add_relu_backward",
		     be->ops->add_relu_backward(be, n, dy, y, da, ma, db, mb));
}

/* An int8 tensor op: the backend has it (op), its scale is usable. */
static int check_q8(wf_backend *be, const char *name, int op, float scale)
{
	if (!op)
		return wf_errf(&be->err, WF_EINVAL, "%s: no int8 tensors on %s", name, be->name);
	if (!(scale > 0 && scale < 1e30f))
		return wf_errf(&be->err, WF_EINVAL, "%s: scale %g must be finite and > 0", name,
			       (double)scale);
	return 0;
}

int wf_op_to_u8(wf_backend *be, size_t n, void *y, const float *x, const float *b, float scale)
{
	wf_err_clear(&be->err);
	int rc = check_q8(be, "to_u8", be->ops->to_u8 != NULL, scale);
	return rc ? rc : TIMED(be, "to_u8", be->ops->to_u8(be, n, y, x, b, scale));
}

int wf_op_avgpool3_to_u8(wf_backend *be, int n, int h, int w, int c, void *y, const float *x,
			 float k, const float *b, float scale)
{
	wf_err_clear(&be->err);
	int rc = check_q8(be, "avgpool3_to_u8", be->ops->avgpool3_to_u8 != NULL, scale);
	if (!rc && (n < 1 || h < 1 || w < 1 || c < 1 || !isfinite(k)))
		rc = wf_errf(&be->err, WF_EINVAL, "avgpool3_to_u8: shape %dx%dx%dx%d, k %g", n, h,
			     w, c, (double)k);
	return rc ? rc
		  : TIMED(be, "avgpool3_to_u8",
			  be->ops->avgpool3_to_u8(be, n, h, w, c, y, x, k, b, scale));
}

int wf_op_accumulate(wf_backend *be, size_t n, float *y, const float *x)
{
	wf_err_clear(&be->err);
	return TIMED(be, "accumulate", be->ops->accumulate(be, n, y, x));
}

int wf_op_scale(wf_backend *be, size_t n, float *y, const float *x, float alpha)
{
	wf_err_clear(&be->err);
	return TIMED(be, "scale", be->ops->scale(be, n, y, x, alpha));
}

int wf_op_concat_forward(wf_backend *be, size_t rows, int k, const int *widths, float *y,
			 const float *const *xs)
{
	wf_err_clear(&be->err);
	int rc = check_concat(be, k, widths);
	return rc ? rc
		  : TIMED(be, "concat_forward",
			  be->ops->concat_forward(be, rows, k, widths, y, xs));
}

int wf_op_concat_u8(wf_backend *be, size_t rows, int k, const int *widths, void *y,
		    const void *const *xs, unsigned u8_in, float scale)
{
	wf_err_clear(&be->err);
	int rc = check_concat(be, k, widths);
	rc = rc ? rc : check_q8(be, "concat_u8", be->ops->concat_u8 != NULL, scale);
	return rc ? rc
		  : TIMED(be, "concat_u8",
			  be->ops->concat_u8(be, rows, k, widths, y, xs, u8_in, scale));
}

int wf_op_concat_backward(wf_backend *be, size_t rows, int k, const int *widths, float *const *dxs,
			  const float *dy)
{
	wf_err_clear(&be->err);
	int rc = check_concat(be, k, widths);
	return rc ? rc
		  : TIMED(be, "concat_backward",
			  be->ops->concat_backward(be, rows, k, widths, dxs, dy));
}

int wf_op_pool_forward(wf_backend *be, wf_plan **plan, const wf_pool_desc *d, float *y,
		       const float *x)
{
	wf_err_clear(&be->err);
	int rc = check_pool(be, d);
	return rc ? rc : TIMED(be, "pool_forward", be->ops->pool_forward(be, plan, d, y, x));
}

int wf_op_pool_backward(wf_backend *be, wf_plan **plan, const wf_pool_desc *d, float *dx,
			const float *dy, const float *x, const float *y)
{
	wf_err_clear(&be->err);
	int rc = check_pool(be, d);
	if (!rc && (d->q8 || d->io_bf16 || !pool_pads_plain(d)))
		rc = wf_errf(&be->err, WF_EINVAL,
			     "pool backward: q8=%d io_bf16=%d padding t%d b%d l%d r%d: int8 and "
			     "bf16 tensors, cropping and padding beyond the window are forward "
			     "only",
			     d->q8, d->io_bf16, d->pt, d->pb, d->pl, d->pr);
	return rc ? rc
		  : TIMED(be, "pool_backward", be->ops->pool_backward(be, plan, d, dx, dy, x, y));
}

int wf_op_gap_forward(wf_backend *be, int n, int hw, int c, float *y, const float *x)
{
	wf_err_clear(&be->err);
	int rc = check_gap(be, n, hw, c);
	return rc ? rc : TIMED(be, "gap_forward", be->ops->gap_forward(be, n, hw, c, y, x));
}

int wf_op_gap_q8(wf_backend *be, int n, int hw, int c, float *y, const void *x, float scale, int u8)
{
	wf_err_clear(&be->err);
	int rc = check_gap(be, n, hw, c);
	if (!rc)
		rc = check_q8(be, "gap_q8", be->ops->gap_q8 != NULL, scale);
	return rc ? rc : TIMED(be, "gap_q8", be->ops->gap_q8(be, n, hw, c, y, x, scale, u8));
}

int wf_op_gap_backward(wf_backend *be, int n, int hw, int c, float *dx, const float *dy)
{
	wf_err_clear(&be->err);
	int rc = check_gap(be, n, hw, c);
	return rc ? rc : TIMED(be, "gap_backward", be->ops->gap_backward(be, n, hw, c, dx, dy));
}

int wf_op_pad_forward(wf_backend *be, const wf_pad_desc *d, float *y, const float *x)
{
	wf_err_clear(&be->err);
	int rc = check_pad(be, d);
	return rc ? rc : TIMED(be, "pad_forward", be->ops->pad_forward(be, d, y, x));
}

int wf_op_pad_backward(wf_backend *be, const wf_pad_desc *d, float *dx, const float *dy)
{
	wf_err_clear(&be->err);
	int rc = check_pad(be, d);
	return rc ? rc : TIMED(be, "pad_backward", be->ops->pad_backward(be, d, dx, dy));
}

int wf_op_dropout_forward(wf_backend *be, size_t n, float rate, uint64_t seed, float *y,
			  uint8_t *mask, const float *x)
{
	wf_err_clear(&be->err);
	int rc = check_rate(be, rate);
	return rc ? rc
		  : TIMED(be, "dropout_forward",
			  be->ops->dropout_forward(be, n, rate, seed, y, mask, x));
}

int wf_op_dropout_backward(wf_backend *be, size_t n, float rate, float *dx, const float *dy,
			   const uint8_t *mask)
{
	wf_err_clear(&be->err);
	int rc = check_rate(be, rate);
	return rc ? rc
		  : TIMED(be, "dropout_backward",
			  be->ops->dropout_backward(be, n, rate, dx, dy, mask));
}

int wf_op_softmax_xent_forward(wf_backend *be, int n, int k, float *probs, float *losses,
			       const float *logits, const int32_t *labels)
{
	wf_err_clear(&be->err);
	int rc = check_xent(be, n, k, labels);
	return rc ? rc
		  : TIMED(be, "softmax_xent_forward",
			  be->ops->softmax_xent_forward(be, n, k, probs, losses, logits, labels));
}

int wf_op_softmax_xent_backward(wf_backend *be, int n, int k, float *dlogits, const float *probs,
				const int32_t *labels, float scale)
{
	wf_err_clear(&be->err);
	if (!labels)
		return wf_errf(&be->err, WF_EINVAL, "softmax_xent: labels must not be NULL");
	int rc = check_xent(be, n, k, labels);
	return rc ? rc
		  : TIMED(be, "softmax_xent_backward",
			  be->ops->softmax_xent_backward(be, n, k, dlogits, probs, labels, scale));
}

int wf_op_optimizer_update(wf_backend *be, const wf_opt_desc *d, size_t n, float *p, const float *g,
			   float *m, float *v)
{
	wf_err_clear(&be->err);
	int rc = check_opt(be, d, m, v);
	return rc ? rc
		  : TIMED(be, "optimizer_update", be->ops->optimizer_update(be, d, n, p, g, m, v));
}
