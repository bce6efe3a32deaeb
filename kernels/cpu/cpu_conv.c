/* cpu_conv.c: the cpu backend's convolutions (forward, fused inference
 * forward, backward) as oneDNN primitives inside plans. */
#include "kernels/cpu/cpu_priv.h"
#include "kernels/cpu/cpu_loops.h"

#include <math.h>
#include <string.h>

/* Conv activation layout. 0: the conv primitives read and write our NHWC
 * buffers directly (oneDNN picks brgconv/jit nhwc kernels); 1: they choose
 * their own layout (format_tag any -> nChw16c) and we reorder from/to NHWC
 * around every call. Weights are reordered from HWIO into the primitive's
 * blocked layout each call either way. Measured on this machine (AVX-512,
 * 2 threads, oneDNN 2.6), 3x3 stride-1 `same` convs, batch 64, best of 7,
 * forward / backward-data / backward-weights in ms:
 *   32x32x16: nhwc 0.89 / 0.66 / 0.65 = 2.20    any+reorders 1.10 / 0.92 / 0.96 = 2.97
 *   16x16x32: nhwc 0.54 / 0.55 / 0.55 = 1.65    any+reorders 0.70 / 0.71 / 0.67 = 2.09
 *    8x8x64:  nhwc 0.51 / 0.55 / 0.50 = 1.56    any+reorders 0.58 / 0.58 / 0.62 = 1.78
 * so NHWC direct is kept (25-35% faster on the large layers). */
#ifndef CONV_ACT_ANY
#define CONV_ACT_ANY 0
#endif

/* ---- convolution ----------------------------------------------------------- */

/* The op descriptor of a conv, forward or one of the backward kinds. */
typedef struct conv_mds {
	dnnl_memory_desc_t x, y, w, b; /* user layouts */
	dnnl_memory_desc_t xa, ya, wa; /* what primitives are offered */
	dnnl_dims_t strides, dil, pl, pr;
} conv_mds;

/* bf16: the primitives read x, w and dy in bf16 (reordered from the caller's
 * fp32 by the plan) and write y, dx and dw in fp32 (fp32 accumulation); the
 * caller's tensors and master weights stay fp32. */
static int conv_mds_init(wf_backend *be, const wf_conv_desc *d, int bf16, conv_mds *m)
{
	int rc = wf_cpu_md_nhwc(be, &m->x, d->n, d->h, d->w, d->c);
	if (!rc)
		rc = wf_cpu_md_nhwc(be, &m->y, d->n, d->oh, d->ow, d->oc);
	if (!rc && bf16 && (d->io_bf16 & 1)) /* the caller's x is bf16 already */
		rc = wf_cpu_md_bf16_nhwc(be, &m->x, &m->x);
	if (!rc && bf16 && (d->io_bf16 & 2))
		rc = wf_cpu_md_bf16_nhwc(be, &m->y, &m->y);
	if (!rc)
		rc = wf_cpu_md_hwio(be, &m->w, d);
	if (!rc)
		rc = wf_cpu_md_vec(be, &m->b, d->oc);
	if (!rc)
		rc = wf_cpu_md_tag_dt(be, &m->wa, m->w.ndims, m->w.dims,
				      bf16 ? dnnl_bf16 : dnnl_f32, dnnl_format_tag_any);
	m->xa = m->x;
	m->ya = m->y;
	if (!rc && bf16)
		rc = wf_cpu_md_bf16_nhwc(be, &m->xa, &m->x);
	else if (!rc && CONV_ACT_ANY)
		rc = wf_cpu_md_any_like(be, &m->xa, &m->x);
	if (!rc && !bf16 && CONV_ACT_ANY)
		rc = wf_cpu_md_any_like(be, &m->ya, &m->y);
	m->strides[0] = d->sh, m->strides[1] = d->sw;
	m->dil[0] = d->dh - 1, m->dil[1] = d->dw - 1; /* oneDNN counts the gaps */
	m->pl[0] = d->pt, m->pl[1] = d->pl;
	m->pr[0] = d->pb, m->pr[1] = d->pr;
	return rc;
}

static int conv_fwd_desc(wf_backend *be, const wf_conv_desc *d, conv_mds *m,
			 dnnl_convolution_desc_t *cd)
{
	int rc = 0;
	DN_CHECK(dnnl_dilated_convolution_forward_desc_init(
			 cd, d->infer ? dnnl_forward_inference : dnnl_forward_training,
			 dnnl_convolution_direct, &m->xa, &m->wa, d->bias ? &m->b : NULL, &m->ya,
			 m->strides, m->dil, m->pl, m->pr),
		 fail);
fail:
	return rc;
}

/* Attributes of a fused forward: user scratchpad, then post-ops in order
 * residual add (binary, source DNNL_ARG_ATTR_MULTIPLE_POST_OP(0); or sum
 * when the residual is y itself), act. */
static int conv_fused_attr(wf_backend *be, const wf_conv_desc *d, const dnnl_memory_desc_t *y,
			   float dom, float sum_scale, float out_scale, dnnl_primitive_attr_t *attr)
{
	int rc = wf_cpu_make_attr(be, 0, attr);
	dnnl_post_ops_t po = NULL;
	if (rc || (!d->residual && !d->act && out_scale == 0))
		return rc;
	DN_CHECK(dnnl_post_ops_create(&po), fail);
	if (d->residual == 1)
		DN_CHECK(dnnl_post_ops_append_binary(po, dnnl_binary_add, y), fail);
	else if (d->residual == 2) /* the residual's own type: s8 under a u8 y */
		DN_CHECK(dnnl_post_ops_append_sum_v2(po, sum_scale,
						     !(d->io_q & 4) ? dnnl_data_type_undef
						     : d->r_u8	    ? dnnl_u8
								    : dnnl_s8),
			 fail);
	if (d->act == 1)
		DN_CHECK(dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_relu, 0.0f, 0.0f),
			 fail);
	else if (d->act == 2)
		DN_CHECK(
			dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_clip, 0.0f, 6.0f * dom),
			fail);
	if (out_scale != 0) /* out of the post-ops' scale dom */
		DN_CHECK(dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_linear, out_scale,
						      0.0f),
			 fail);
	DN_CHECK(dnnl_primitive_attr_set_post_ops(*attr, po), fail);
fail:
	if (po)
		dnnl_post_ops_destroy(po);
	return rc;
}

/* The residual of a binary post-op: a caller buffer of layout md, bound per
 * call (pl->f_r). */
static int bind_residual(wf_backend *be, wf_plan *pl, dn_op *op, const dnnl_memory_desc_t *md)
{
	int rc = wf_cpu_plan_mem(be, pl, md, DNNL_MEMORY_NONE, &pl->f_r);
	if (!rc)
		wf_cpu_op_arg(op, DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1, pl->f_r);
	return rc;
}

static int conv_build_fwd(wf_backend *be, wf_plan *pl, int unused)
{
	(void)unused;
	const wf_conv_desc *d = &pl->d.conv;
	conv_mds m;
	dnnl_convolution_desc_t cd;
	dnnl_primitive_attr_t attr = NULL;
	dnnl_memory_t px, pw, py;
	int rc = conv_mds_init(be, d, pl->bf16, &m);
	if (!rc)
		rc = conv_fwd_desc(be, d, &m, &cd);
	dnnl_memory_desc_t r32, r16;
	if (!rc)
		rc = wf_cpu_md_nhwc(be, &r32, d->n, d->oh, d->ow, d->oc);
	if (!rc)
		rc = wf_cpu_md_bf16_nhwc(be, &r16, &r32);
	if (!rc)
		rc = conv_fused_attr(be, d, pl->bf16 && (d->io_bf16 & 4) ? &r16 : &r32, 1.0f, 1.0f,
				     0, &attr);
	if (!rc)
		rc = wf_cpu_op_create_attr(be, pl, &cd, NULL, 0, attr, &pl->fwd.prim);
	if (attr)
		dnnl_primitive_attr_destroy(attr);
	if (rc)
		return rc;
	dn_op *op = pl->fwd.prim;
	rc = wf_cpu_bind_in(be, pl, &pl->fwd, &m.x, wf_cpu_pd_md(op, dnnl_query_src_md), &pl->f_x,
			    &px);
	if (!rc && pl->bf16 && !d->infer && px != pl->f_x)
		pl->f_x16 = px; /* backward weights reads it (conv_build_bwd) */
	int npre = pl->fwd.npre;
	if (!rc)
		rc = wf_cpu_bind_in(be, pl, &pl->fwd, &m.w, wf_cpu_pd_md(op, dnnl_query_weights_md),
				    &pl->f_w, &pw);
	if (!rc && d->infer && pl->fwd.npre > npre) /* the weight reorder: once, not per call */
		pl->w_once = pl->fwd.pre[--pl->fwd.npre];
	dnnl_memory_desc_t rmd = m.y;
	if (!rc && d->residual == 1)
		rc = pl->bf16 && (d->io_bf16 & 4)
			     ? wf_cpu_md_bf16_nhwc(be, &rmd, &m.y)
			     : wf_cpu_md_nhwc(be, &rmd, d->n, d->oh, d->ow, d->oc);
	if (!rc && d->residual == 1)
		rc = bind_residual(be, pl, op, &rmd);
	if (!rc)
		rc = wf_cpu_bind_out(be, pl, &pl->fwd, &m.y, wf_cpu_pd_md(op, dnnl_query_dst_md),
				     &pl->f_y, &py);
	if (!rc && d->bias)
		rc = wf_cpu_plan_mem(be, pl, &m.b, DNNL_MEMORY_NONE, &pl->f_b);
	if (rc)
		return rc;
	wf_cpu_op_arg(op, DNNL_ARG_SRC, px);
	wf_cpu_op_arg(op, DNNL_ARG_WEIGHTS, pw);
	if (d->bias)
		wf_cpu_op_arg(op, DNNL_ARG_BIAS, pl->f_b);
	wf_cpu_op_arg(op, DNNL_ARG_DST, py);
	return 0;
}

/* ---- int8 inference ------------------------------------------------------- */

/* Per output channel s8 scales of HWIO weights: 127 / max |w| (1 for a
 * channel of zeros). */
static void weight_scales(const wf_conv_desc *d, const float *w, float *sw)
{
	size_t per = (size_t)d->kh * d->kw * (size_t)(d->c / d->groups);
	for (int o = 0; o < d->oc; o++)
		sw[o] = 0;
	for (size_t k = 0; k < per; k++)
		for (int o = 0; o < d->oc; o++) {
			float a = fabsf(w[k * (size_t)d->oc + (size_t)o]);
			if (a > sw[o])
				sw[o] = a;
		}
	for (int o = 0; o < d->oc; o++)
		sw[o] = sw[o] > 0 ? 127.0f / sw[o] : 1.0f;
}

/* The weights and bias of the int8 conv plan being built (its scales and
 * prescaled bias come from them), set around the build by its caller; per
 * thread, as branches build plans at once. */
static _Thread_local const float *build_w, *build_b;

/* The int8 forward: x (float) -> u8/s8 by a scaling reorder each call (or
 * read as it is when io_q says it is quantised); the weights -> s8 per output
 * channel once (w_once); the conv accumulates in s32 and its output scales
 * qy / (qx * sw[oc]) bring it to y's scale (1 for a float y) before the
 * fused residual and act (relu6 clipped at 6 qy). A quantised residual (bit
 * 4) added in place is scaled by qy / qr (sum post-op); see the build for
 * one added as a binary post-op. oneDNN
 * 2.x adds the bias before the output scales, so the plan keeps it
 * multiplied by qx * sw[oc]. */
static int conv_build_fwd_int8(wf_backend *be, wf_plan *pl, int unused)
{
	(void)unused;
	const wf_conv_desc *d = &pl->d.conv;
	const float *w = build_w, *b = build_b;
	conv_mds m;
	dnnl_convolution_desc_t cd;
	dnnl_primitive_attr_t attr = NULL;
	dnnl_memory_t px, pw;
	float *sw = wf_cpu_plan_buf(be, pl, (size_t)d->oc);
	float *os = wf_cpu_plan_buf(be, pl, (size_t)d->oc);
	float *bq = d->bias ? wf_cpu_plan_buf(be, pl, (size_t)d->oc) : NULL;
	if (!sw || !os || (d->bias && !bq))
		return be->err.code;
	weight_scales(d, w, sw);
	/* the post-ops run in the output's scale ps when it is quantised, else
	 * in real values (ps = 1): relu and clip commute with a positive scale,
	 * and a residual added in place (sum post-op) is scaled from its own
	 * scale (qr quantised, else 1) to ps. A binary post-op has no scale: a
	 * residual added so is added as it is, the post-ops working in its
	 * scale and a final linear one rescaling to y's */
	float rs = (d->io_q & 4) ? d->qr : 1.0f, ys = (d->io_q & 2) ? d->qy : 1.0f;
	float ps = d->residual == 1 ? rs : ys;
	float sum = d->residual == 2 ? ps / rs : 1.0f;
	float lin = ys / ps;
	if (lin == 1.0f)
		lin = 0; /* y is in the post-ops' scale already */
	for (int o = 0; o < d->oc; o++) {
		os[o] = ps / (d->qx * sw[o]);
		if (bq)
			bq[o] = b[o] * d->qx * sw[o];
	}
	int rc = conv_mds_init(be, d, 0, &m);
	dnnl_memory_desc_t rmd = m.y;
	if (!rc)
		rc = wf_cpu_md_tag_dt(be, &m.xa, 4, m.x.dims, d->x_u8 ? dnnl_u8 : dnnl_s8,
				      dnnl_nhwc);
	if (!rc && (d->io_q & 2))
		rc = wf_cpu_md_tag_dt(be, &m.ya, 4, m.y.dims, d->y_u8 ? dnnl_u8 : dnnl_s8,
				      dnnl_nhwc);
	if (!rc)
		rc = wf_cpu_md_tag_dt(be, &m.wa, m.w.ndims, m.w.dims, dnnl_s8, dnnl_format_tag_any);
	if (!rc)
		rc = conv_fwd_desc(be, d, &m, &cd);
	if (!rc && (d->io_q & 4))
		rc = wf_cpu_md_tag_dt(be, &rmd, 4, m.y.dims, d->r_u8 ? dnnl_u8 : dnnl_s8,
				      dnnl_nhwc);
	if (!rc)
		rc = conv_fused_attr(be, d, &rmd, ps, sum, lin, &attr);
	if (rc)
		goto fail;
	DN_CHECK(dnnl_primitive_attr_set_output_scales(attr, d->oc, 1 << 1, os), fail);
	/* small convs run faster without AMX tiles: below 2^24 multiply-adds
	 * oneDNN 2.6's AVX512-VNNI kernels took 0.70-0.99x the time of its AMX
	 * ones on NASNet's, MobileNetV2's and ResNet50's shapes (batch 1 and
	 * 32, 2 threads; above it AMX took 0.4-0.9x): bench/RESULTS.md */
	double macs = (double)d->n * d->oh * d->ow * d->oc * (d->c / d->groups) * d->kh * d->kw;
	if ((rc = wf_cpu_op_create_avoiding(be, pl, &cd, NULL, 0, attr,
					    macs < 16777216.0 ? "amx" : NULL, &pl->fwd.prim)) != 0)
		goto fail;
	dn_op *op = pl->fwd.prim;
	/* x: quantised into plan memory before each call, unless it already is */
	rc = wf_cpu_plan_mem(be, pl, (d->io_q & 1) ? &m.xa : &m.x, DNNL_MEMORY_NONE, &pl->f_x);
	px = pl->f_x;
	if (!rc && !(d->io_q & 1))
		rc = wf_cpu_plan_mem(be, pl, &m.xa, DNNL_MEMORY_ALLOCATE, &px);
	if (!rc && !(d->io_q & 1))
		rc = wf_cpu_reorder_scaled(be, pl, pl->f_x, px, 1, 0, &d->qx,
					   &pl->fwd.pre[pl->fwd.npre++]);
	/* weights: to s8 in the primitive's layout, once */
	if (!rc)
		rc = wf_cpu_plan_mem(be, pl, &m.w, DNNL_MEMORY_NONE, &pl->f_w);
	if (!rc)
		rc = wf_cpu_plan_mem(be, pl, wf_cpu_pd_md(op, dnnl_query_weights_md),
				     DNNL_MEMORY_ALLOCATE, &pw);
	if (!rc)
		rc = wf_cpu_reorder_scaled(be, pl, pl->f_w, pw, d->oc, d->groups == 1 ? 1 : 3, sw,
					   &pl->w_once);
	if (!rc && d->residual == 1)
		rc = bind_residual(be, pl, op, &rmd);
	if (!rc)
		rc = wf_cpu_plan_mem(be, pl, &m.ya, DNNL_MEMORY_NONE, &pl->f_y);
	if (!rc && d->bias)
		rc = wf_cpu_plan_mem(be, pl, &m.b, bq, &pl->f_b);
	if (rc)
		goto fail;
	if (!dnnl_memory_desc_equal(&m.ya, wf_cpu_pd_md(op, dnnl_query_dst_md))) {
		rc = wf_errf(&be->err, WF_ENOTSUP, "cpu: int8 conv does not write NHWC");
		goto fail;
	}
	wf_cpu_op_arg(op, DNNL_ARG_SRC, px);
	wf_cpu_op_arg(op, DNNL_ARG_WEIGHTS, pw);
	if (d->bias)
		wf_cpu_op_arg(op, DNNL_ARG_BIAS, pl->f_b);
	wf_cpu_op_arg(op, DNNL_ARG_DST, pl->f_y);
fail:
	if (attr)
		dnnl_primitive_attr_destroy(attr);
	return rc;
}

int wf_cpu_conv2d_forward_fused(wf_backend *be, wf_plan **plan, const wf_conv_desc *d, float *y,
				const float *x, const float *w, const float *b, const float *r)
{
	use_threads(be);
	wf_plan *pl = NULL;
	int q = d->qx > 0;
	build_w = w, build_b = b;
	int rc = wf_cpu_plan_part(be, plan, PLAN_CONV, d, sizeof(*d), PART_FWD,
				  q ? conv_build_fwd_int8 : conv_build_fwd, 0, &pl);
	build_w = build_b = NULL;
	if (rc)
		return rc;
	if (pl->w_once && !pl->w_done) {
		rc = wf_cpu_bind(be, pl->f_w, w);
		if (!rc)
			rc = wf_cpu_op_exec(be, pl->w_once);
		if (rc)
			return rc;
		pl->w_done = 1;
	}
	rc = wf_cpu_bind_run(be, &pl->fwd, 5,
			     (dnnl_memory_t[]){pl->f_x, q ? NULL : pl->f_w,
					       d->bias && !q ? pl->f_b : NULL, pl->f_y,
					       d->residual == 1 ? pl->f_r : NULL},
			     (const void *[]){x, w, b, y, r});
	pl->x16_of = !rc && pl->f_x16 ? x : NULL;
	return rc;
}

int wf_cpu_conv2d_forward(wf_backend *be, wf_plan **plan, const wf_conv_desc *d, float *y,
			  const float *x, const float *w, const float *b)
{
	return wf_cpu_conv2d_forward_fused(be, plan, d, y, x, w, b, NULL);
}

/* Backward weights' input `arg` (user layout user_md, bound per call to
 * *user): the bf16 copy `shared` another part of the plan makes when it
 * matches what the primitive wants, with *redo (user -> shared) for calls
 * where that copy is not current; else a reorder of its own, as bind_in. */
static int bind_shared(wf_backend *be, wf_plan *pl, dn_op *op, int arg,
		       const dnnl_memory_desc_t *user_md, dnnl_memory_t shared, dnnl_memory_t *user,
		       dn_op **redo)
{
	dnnl_memory_t mem;
	const dnnl_memory_desc_t *want =
		wf_cpu_pd_md(op, arg == DNNL_ARG_SRC ? dnnl_query_src_md : dnnl_query_diff_dst_md);
	const dnnl_memory_desc_t *have = NULL;
	int rc = 0;
	if (shared)
		DN_CHECK(dnnl_memory_get_memory_desc(shared, &have), fail);
	if (have && dnnl_memory_desc_equal(have, want)) {
		rc = wf_cpu_plan_mem(be, pl, user_md, DNNL_MEMORY_NONE, user);
		if (!rc)
			rc = wf_cpu_reorder_create(be, pl, *user, shared, 0, redo);
		mem = shared;
	} else {
		rc = wf_cpu_bind_in(be, pl, &pl->bwd_w, user_md, want, user, &mem);
	}
	if (!rc)
		wf_cpu_op_arg(op, arg, mem);
fail:
	return rc;
}

static int conv_build_bwd(wf_backend *be, wf_plan *pl, int unused)
{
	(void)unused;
	const wf_conv_desc *d = &pl->d.conv;
	conv_mds m;
	dnnl_convolution_desc_t fd, bd, wd;
	dnnl_primitive_desc_t hint = NULL;
	dnnl_primitive_attr_t attr = NULL;
	dnnl_memory_t mem, dw_int, db_int;
	dnnl_memory_desc_t ybf;
	int bf16 = pl->bf16;
	int rc = conv_mds_init(be, d, bf16, &m);
	if (!rc)
		rc = conv_fwd_desc(be, d, &m, &fd);
	if (!rc && bf16) /* backward reads dy in bf16, writes dx and dw in fp32 */
		rc = wf_cpu_md_bf16_nhwc(be, &ybf, &m.y);
	else
		ybf = m.ya;
	if (!rc)
		rc = wf_cpu_make_attr(be, 0, &attr);
	if (rc)
		goto fail;
	DN_CHECK(dnnl_primitive_desc_create(&hint, &fd, attr, ctx_of(be)->eng, NULL), fail);

	/* backward data: dx = dy conv^T w */
	DN_CHECK(dnnl_dilated_convolution_backward_data_desc_init(&bd, dnnl_convolution_direct,
								  bf16 ? &m.x : &m.xa, &m.wa, &ybf,
								  m.strides, m.dil, m.pl, m.pr),
		 fail);
	rc = wf_cpu_op_create(be, pl, &bd, hint, 0, &pl->bwd_d.prim);
	if (rc)
		goto fail;
	dn_op *op = pl->bwd_d.prim;
	rc = wf_cpu_bind_in(be, pl, &pl->bwd_d, &m.y, wf_cpu_pd_md(op, dnnl_query_diff_dst_md),
			    &pl->d_dy, &mem);
	if (rc)
		goto fail;
	wf_cpu_op_arg(op, DNNL_ARG_DIFF_DST, mem);
	if (bf16 && mem != pl->d_dy)
		pl->d_dy16 = mem;
	rc = wf_cpu_bind_in(be, pl, &pl->bwd_d, &m.w, wf_cpu_pd_md(op, dnnl_query_weights_md),
			    &pl->d_w, &mem);
	if (rc)
		goto fail;
	wf_cpu_op_arg(op, DNNL_ARG_WEIGHTS, mem);
	rc = wf_cpu_bind_out(be, pl, &pl->bwd_d, &m.x, wf_cpu_pd_md(op, dnnl_query_diff_src_md),
			     &pl->d_dx, &mem);
	if (rc)
		goto fail;
	wf_cpu_op_arg(op, DNNL_ARG_DIFF_SRC, mem);

	/* backward weights into plan scratch, then dw += reorder(scratch) */
	dnnl_memory_desc_t dwa;
	rc = wf_cpu_md_any_like(be, &dwa, &m.w); /* fp32 weight gradient */
	if (rc)
		goto fail;
	DN_CHECK(dnnl_dilated_convolution_backward_weights_desc_init(
			 &wd, dnnl_convolution_direct, &m.xa, &dwa, d->bias ? &m.b : NULL, &ybf,
			 m.strides, m.dil, m.pl, m.pr),
		 fail);
	rc = wf_cpu_op_create(be, pl, &wd, hint, 0, &pl->bwd_w.prim);
	if (rc)
		goto fail;
	op = pl->bwd_w.prim;
	rc = bind_shared(be, pl, op, DNNL_ARG_SRC, &m.x, pl->f_x16, &pl->w_x, &pl->x16_redo);
	if (!rc)
		rc = bind_shared(be, pl, op, DNNL_ARG_DIFF_DST, &m.y, pl->d_dy16, &pl->w_dy,
				 &pl->dy16_redo);
	if (rc)
		goto fail;
	rc = wf_cpu_plan_mem(be, pl, wf_cpu_pd_md(op, dnnl_query_diff_weights_md),
			     DNNL_MEMORY_ALLOCATE, &dw_int);
	if (!rc)
		rc = wf_cpu_plan_mem(be, pl, &m.w, DNNL_MEMORY_NONE, &pl->w_dw);
	if (!rc)
		rc = wf_cpu_reorder_create(be, pl, dw_int, pl->w_dw, 1, &pl->dw_acc);
	if (rc)
		goto fail;
	wf_cpu_op_arg(op, DNNL_ARG_DIFF_WEIGHTS, dw_int);
	if (d->bias) {
		pl->db_tmp = wf_cpu_plan_buf(be, pl, (size_t)d->oc);
		if (!pl->db_tmp) {
			rc = be->err.code;
			goto fail;
		}
		rc = wf_cpu_plan_mem(be, pl, &m.b, pl->db_tmp, &db_int);
		if (rc)
			goto fail;
		wf_cpu_op_arg(op, DNNL_ARG_DIFF_BIAS, db_int);
	}
fail:
	if (hint)
		dnnl_primitive_desc_destroy(hint);
	if (attr)
		dnnl_primitive_attr_destroy(attr);
	return rc;
}

/* ---- bf16 1x1 backward as matmuls ------------------------------------------- */

/* A bf16 1x1 conv with stride 1 and no padding is a matmul over the M =
 * n*h*w pixels: dx[M,C] = dy[M,K] w^T and dw[C,K] += x^T dy, with w (HWIO)
 * a [C,K] matrix and x, dx, dy (NHWC) row-major [M,C] / [M,K]. oneDNN 2.6's
 * brgemm matmul on AMX runs them 1.3-4.5x (dw) and up to 1.9x (dx) faster
 * than its convolution backward (jit:avx512_core_amx_bf16) at ResNet50's
 * shapes; in fp32 the two are equal (bench/RESULTS.md, "Training fusions
 * and bf16 tensors in training"). */
static int conv_is_mm(const wf_conv_desc *d, int bf16)
{
	return bf16 && d->kh == 1 && d->kw == 1 && d->sh == 1 && d->sw == 1 && d->groups == 1 &&
	       !d->pt && !d->pb && !d->pl && !d->pr;
}

#define MM_PARTS 8 /* row blocks of the bias gradient's sums */

/* The bf16 copy of a float caller input (layout user_md, bound per call to
 * *user) for backward weights: the one another part made (shared: the same
 * bytes as md16), with *redo to refill it when stale; else a conversion of
 * its own on every call. */
static int mm_copy(wf_backend *be, wf_plan *pl, const dnnl_memory_desc_t *user_md,
		   const dnnl_memory_desc_t *md16, dnnl_memory_t shared, dnnl_memory_t *user,
		   dnnl_memory_t *copy, dn_op **redo)
{
	void *h = NULL;
	int rc = 0;
	if (!shared)
		return wf_cpu_bind_in(be, pl, &pl->bwd_w, user_md, md16, user, copy);
	DN_CHECK(dnnl_memory_get_data_handle(shared, &h), fail);
	rc = wf_cpu_plan_mem(be, pl, user_md, DNNL_MEMORY_NONE, user);
	if (!rc)
		rc = wf_cpu_plan_mem(be, pl, md16, h, copy);
	if (!rc)
		rc = wf_cpu_reorder_create(be, pl, *user, *copy, 0, redo);
fail:
	return rc;
}

static int conv_build_bwd_mm(wf_backend *be, wf_plan *pl)
{
	const wf_conv_desc *d = &pl->d.conv;
	dnnl_dim_t M = (dnnl_dim_t)d->n * d->h * d->w, C = d->c, K = d->oc;
	dnnl_data_type_t xt = (d->io_bf16 & 1) ? dnnl_bf16 : dnnl_f32;
	dnnl_data_type_t yt = (d->io_bf16 & 2) ? dnnl_bf16 : dnnl_f32;
	dnnl_memory_desc_t dy, dy16, wt, wt16, dx, xtr, xtr16, dw;
	dnnl_matmul_desc_t md;
	dnnl_memory_t mem;
	int rc = wf_cpu_md_mat(be, &dy, M, K, 0, yt);
	if (!rc)
		rc = wf_cpu_md_mat(be, &dy16, M, K, 0, dnnl_bf16);
	if (!rc)
		rc = wf_cpu_md_mat(be, &wt, C, K, 1, dnnl_f32); /* w^T: [K,C] */
	if (!rc)
		rc = wf_cpu_md_tag_dt(be, &wt16, 2, wt.dims, dnnl_bf16, dnnl_format_tag_any);
	if (!rc)
		rc = wf_cpu_md_mat(be, &dx, M, C, 0, xt);
	if (!rc)
		rc = wf_cpu_md_mat(be, &xtr, M, C, 1, xt); /* x^T: [C,M] */
	if (!rc)
		rc = wf_cpu_md_mat(be, &xtr16, M, C, 1, dnnl_bf16);
	if (!rc)
		rc = wf_cpu_md_mat(be, &dw, C, K, 0, dnnl_f32);
	if (rc)
		return rc;
	/* dx = dy w^T (dy converted once when float: backward weights reads it too) */
	DN_CHECK(dnnl_matmul_desc_init(&md, &dy16, &wt16, NULL, &dx), fail);
	if ((rc = wf_cpu_op_create(be, pl, &md, NULL, 0, &pl->bwd_d.prim)) != 0)
		return rc;
	dn_op *op = pl->bwd_d.prim;
	rc = wf_cpu_bind_in(be, pl, &pl->bwd_d, &dy, &dy16, &pl->d_dy, &mem);
	if (rc)
		return rc;
	wf_cpu_op_arg(op, DNNL_ARG_SRC, mem);
	if (mem != pl->d_dy)
		pl->d_dy16 = mem;
	rc = wf_cpu_bind_in(be, pl, &pl->bwd_d, &wt, wf_cpu_pd_md(op, dnnl_query_weights_md),
			    &pl->d_w, &mem);
	if (!rc)
		rc = wf_cpu_plan_mem(be, pl, &dx, DNNL_MEMORY_NONE, &pl->d_dx);
	if (rc)
		return rc;
	wf_cpu_op_arg(op, DNNL_ARG_WEIGHTS, mem);
	wf_cpu_op_arg(op, DNNL_ARG_DST, pl->d_dx);

	/* dw += x^T dy, straight into the caller's HWIO dw (sum post-op) */
	DN_CHECK(dnnl_matmul_desc_init(&md, &xtr16, &dy16, NULL, &dw), fail);
	if ((rc = wf_cpu_op_create(be, pl, &md, NULL, 1, &pl->bwd_w.prim)) != 0)
		return rc;
	op = pl->bwd_w.prim;
	if (xt == dnnl_bf16) {
		rc = wf_cpu_plan_mem(be, pl, &xtr, DNNL_MEMORY_NONE, &pl->w_x);
		mem = pl->w_x;
	} else { /* the forward's bf16 copy of x: NHWC, the same bytes */
		rc = mm_copy(be, pl, &xtr, &xtr16, pl->f_x16, &pl->w_x, &mem, &pl->x16_redo);
	}
	if (rc)
		return rc;
	wf_cpu_op_arg(op, DNNL_ARG_SRC, mem);
	if (yt == dnnl_bf16) {
		rc = wf_cpu_plan_mem(be, pl, &dy, DNNL_MEMORY_NONE, &pl->w_dy);
		mem = pl->w_dy;
	} else {
		rc = mm_copy(be, pl, &dy, &dy16, pl->d_dy16, &pl->w_dy, &mem, &pl->dy16_redo);
	}
	if (!rc)
		rc = wf_cpu_plan_mem(be, pl, &dw, DNNL_MEMORY_NONE, &pl->w_dw);
	if (!rc && d->bias && !(pl->db_tmp = wf_cpu_plan_buf(be, pl, (size_t)MM_PARTS * K)))
		rc = be->err.code;
	if (rc)
		return rc;
	wf_cpu_op_arg(op, DNNL_ARG_WEIGHTS, mem);
	wf_cpu_op_arg(op, DNNL_ARG_DST, pl->w_dw);
	pl->mm = 1;
fail:
	return rc;
}

/* db[k] += the sum of dy's rows (float, or bf16 when bf16), [rows, k]. */
static void sum_rows_into(float *db, float *part, const void *dy, size_t rows, int k, int bf16)
{
#pragma omp parallel for schedule(static)
	for (int t = 0; t < MM_PARTS; t++) {
		float *s = part + (size_t)t * k;
		for (int j = 0; j < k; j++)
			s[j] = 0;
		for (size_t r = rows * t / MM_PARTS; r < rows * (t + 1) / MM_PARTS; r++) {
			if (bf16) {
				const uint16_t *h = (const uint16_t *)dy + r * k;
				for (int j = 0; j < k; j++) {
					uint32_t u = (uint32_t)h[j] << 16;
					float f;
					memcpy(&f, &u, sizeof(f));
					s[j] += f;
				}
			} else {
				const float *f = (const float *)dy + r * k;
				for (int j = 0; j < k; j++)
					s[j] += f[j];
			}
		}
	}
	for (int t = 0; t < MM_PARTS; t++)
		wf_cpu_add_into(db, part + (size_t)t * k, (size_t)k);
}

static int conv_build_bwd_any(wf_backend *be, wf_plan *pl, int unused)
{
	(void)unused;
	return conv_is_mm(&pl->d.conv, pl->bf16) ? conv_build_bwd_mm(be, pl)
						 : conv_build_bwd(be, pl, 0);
}

int wf_cpu_conv2d_backward(wf_backend *be, wf_plan **plan, const wf_conv_desc *d, float *dx,
			   float *dw, float *db, const float *dy, const float *x, const float *w)
{
	use_threads(be);
	wf_plan *pl = NULL;
	int rc = wf_cpu_plan_part(be, plan, PLAN_CONV, d, sizeof(*d), PART_BWD, conv_build_bwd_any,
				  0, &pl);
	if (rc)
		return rc;
	if (dx &&
	    (rc = wf_cpu_bind_run(be, &pl->bwd_d, 3, (dnnl_memory_t[]){pl->d_dy, pl->d_w, pl->d_dx},
				  (const void *[]){dy, w, dx})) != 0)
		return rc;
	if (dw || (db && d->bias)) {
		rc = wf_cpu_bind(be, pl->w_x, x);
		if (!rc)
			rc = wf_cpu_bind(be, pl->w_dy, dy);
		if (!rc && pl->x16_redo && pl->x16_of != x) {
			rc = wf_cpu_op_exec(be, pl->x16_redo);
			pl->x16_of = rc ? NULL : x;
		}
		if (!rc && pl->dy16_redo && !dx)
			rc = wf_cpu_op_exec(be, pl->dy16_redo);
		if (!rc && pl->mm && dw) /* the matmul accumulates into dw itself */
			rc = wf_cpu_bind(be, pl->w_dw, dw);
		if (!rc && (dw || !pl->mm))
			rc = wf_cpu_seq_exec(be, &pl->bwd_w);
		pl->x16_of = NULL; /* one backward per forward's copy */
		if (!rc && dw && !pl->mm) {
			rc = wf_cpu_bind(be, pl->w_dw, dw);
			if (!rc)
				rc = wf_cpu_op_exec(be, pl->dw_acc);
		}
		if (rc)
			return rc;
		if (db && d->bias && pl->mm)
			sum_rows_into(db, pl->db_tmp, dy, (size_t)d->n * d->oh * d->ow, d->oc,
				      (d->io_bf16 & 2) != 0);
		else if (db && d->bias)
			wf_cpu_add_into(db, pl->db_tmp, (size_t)d->oc);
	}
	return 0;
}
