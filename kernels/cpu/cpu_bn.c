/* cpu_bn.c: the cpu backend's batch norm (training, inference, backward)
 * as oneDNN primitives inside plans. */
#include "kernels/cpu/cpu_priv.h"
#include "kernels/cpu/cpu_loops.h"

#include <math.h>
#include <string.h>

/* ---- batch norm ----------------------------------------------------------------- */

/* Constant gamma = 1 / beta = 0 for callers without scale or center. */
static int bn_consts(wf_backend *be, wf_plan *pl)
{
	if (pl->bn_ones)
		return 0;
	pl->bn_zeros = wf_cpu_plan_buf(be, pl, (size_t)pl->d.bn.c);
	pl->bn_ones = pl->bn_zeros ? wf_cpu_plan_buf(be, pl, (size_t)pl->d.bn.c) : NULL;
	if (!pl->bn_ones)
		return be->err.code;
	for (int ch = 0; ch < pl->d.bn.c; ch++)
		pl->bn_ones[ch] = 1.0f;
	return 0;
}

/* The flags of d: dnnl_use_scale|dnnl_use_shift, + dnnl_fuse_norm_relu. */
static unsigned bn_flags(const wf_bn_desc *d)
{
	return dnnl_use_scale | dnnl_use_shift | (d->relu ? dnnl_fuse_norm_relu : 0);
}

/* x: the data layout (NHWC, fp32 or bf16); + dnnl_use_global_stats for inference. */
static int bn_fwd_desc(wf_backend *be, const wf_bn_desc *d, int training,
		       dnnl_batch_normalization_desc_t *bd, dnnl_memory_desc_t *x)
{
	int rc = wf_cpu_md_nhwc(be, x, d->n, d->h, d->w, d->c);
	if (!rc && d->io_bf16)
		rc = wf_cpu_md_bf16_nhwc(be, x, x);
	if (rc)
		return rc;
	unsigned flags = bn_flags(d);
	if (!training)
		flags |= dnnl_use_global_stats;
	DN_CHECK(dnnl_batch_normalization_forward_desc_init(
			 bd, training ? dnnl_forward_training : dnnl_forward_inference, x, d->eps,
			 flags),
		 fail);
fail:
	return rc;
}

static int bn_build_fwd(wf_backend *be, wf_plan *pl, int training)
{
	if (bn_consts(be, pl) != 0)
		return be->err.code;
	const wf_bn_desc *d = &pl->d.bn;
	dnnl_batch_normalization_desc_t bd;
	dnnl_memory_desc_t x, c;
	dn_seq *seq = training ? &pl->fwd : &pl->inf;
	dnnl_memory_t *mx = training ? &pl->f_x : &pl->i_x, *my = training ? &pl->f_y : &pl->i_y;
	dnnl_memory_t *mg = training ? &pl->f_w : &pl->i_g, *mb = training ? &pl->f_b : &pl->i_b;
	dnnl_memory_t *mm = training ? &pl->f_m : &pl->i_m, *mv = training ? &pl->f_v : &pl->i_v;
	int rc = bn_fwd_desc(be, d, training, &bd, &x);
	if (!rc)
		rc = wf_cpu_md_vec(be, &c, d->c);
	if (!rc)
		rc = wf_cpu_op_create(be, pl, &bd, NULL, 0, &seq->prim);
	if (!rc)
		rc = wf_cpu_plan_mem(be, pl, &x, DNNL_MEMORY_NONE, mx);
	if (!rc)
		rc = wf_cpu_plan_mem(be, pl, &x, DNNL_MEMORY_NONE, my);
	if (!rc)
		rc = wf_cpu_plan_mem(be, pl, &c, DNNL_MEMORY_NONE, mg);
	if (!rc)
		rc = wf_cpu_plan_mem(be, pl, &c, DNNL_MEMORY_NONE, mb);
	if (!rc)
		rc = wf_cpu_plan_mem(be, pl, &c, DNNL_MEMORY_NONE, mm);
	if (!rc && training) {
		pl->bn_var = wf_cpu_plan_buf(be, pl, (size_t)d->c);
		rc = pl->bn_var ? wf_cpu_plan_mem(be, pl, &c, pl->bn_var, mv) : be->err.code;
		if (!rc)
			pl->bn_mean = wf_cpu_plan_buf(be, pl, (size_t)d->c);
		if (!rc && !pl->bn_mean)
			rc = be->err.code;
	} else if (!rc) {
		rc = wf_cpu_plan_mem(be, pl, &c, DNNL_MEMORY_NONE, mv);
	}
	if (!rc && training && d->relu) /* the relu's mask, for backward */
		rc = wf_cpu_plan_mem(be, pl, wf_cpu_pd_md(seq->prim, dnnl_query_workspace_md),
				     DNNL_MEMORY_ALLOCATE, &pl->bn_ws);
	if (rc)
		return rc;
	dn_op *op = seq->prim;
	if (training && d->relu)
		wf_cpu_op_arg(op, DNNL_ARG_WORKSPACE, pl->bn_ws);
	wf_cpu_op_arg(op, DNNL_ARG_SRC, *mx);
	wf_cpu_op_arg(op, DNNL_ARG_DST, *my);
	wf_cpu_op_arg(op, DNNL_ARG_SCALE, *mg);
	wf_cpu_op_arg(op, DNNL_ARG_SHIFT, *mb);
	wf_cpu_op_arg(op, DNNL_ARG_MEAN, *mm);
	wf_cpu_op_arg(op, DNNL_ARG_VARIANCE, *mv);
	return 0;
}

int wf_cpu_batchnorm_forward(wf_backend *be, wf_plan **plan, const wf_bn_desc *d, int training,
			     float *y, float *save_mean, float *save_invstd, const float *x,
			     const float *gamma, const float *beta, float *run_mean, float *run_var)
{
	use_threads(be);
	wf_plan *pl = NULL;
	int rc =
		wf_cpu_plan_part(be, plan, PLAN_BN, d, sizeof(*d),
				 training ? PART_FWD : PART_FWD_INFER, bn_build_fwd, training, &pl);
	if (rc)
		return rc;
	if (!training) {
		return wf_cpu_bind_run(
			be, &pl->inf, 6,
			(dnnl_memory_t[]){pl->i_x, pl->i_y, pl->i_g, pl->i_b, pl->i_m, pl->i_v},
			(const void *[]){x, y, gamma ? gamma : pl->bn_ones,
					 beta ? beta : pl->bn_zeros, run_mean, run_var});
	}
	float *mean = save_mean ? save_mean : pl->bn_mean;
	rc = wf_cpu_bind_run(be, &pl->fwd, 5,
			     (dnnl_memory_t[]){pl->f_x, pl->f_y, pl->f_w, pl->f_b, pl->f_m},
			     (const void *[]){x, y, gamma ? gamma : pl->bn_ones,
					      beta ? beta : pl->bn_zeros, mean});
	if (rc)
		return rc;
	/* oneDNN gives the biased batch variance; running stats use the unbiased one */
	const double cnt = (double)d->n * d->h * d->w;
	const float unbias = cnt > 1 ? (float)(cnt / (cnt - 1)) : 1.0f;
	const float mom = d->momentum;
	for (int ch = 0; ch < d->c; ch++) {
		float var = pl->bn_var[ch];
		if (save_invstd)
			save_invstd[ch] = 1.0f / sqrtf(var + d->eps);
		if (run_mean)
			run_mean[ch] = mom * run_mean[ch] + (1.0f - mom) * mean[ch];
		if (run_var)
			run_var[ch] = mom * run_var[ch] + (1.0f - mom) * var * unbias;
	}
	return 0;
}

static int bn_build_bwd(wf_backend *be, wf_plan *pl, int unused)
{
	(void)unused;
	if (bn_consts(be, pl) != 0)
		return be->err.code;
	const wf_bn_desc *d = &pl->d.bn;
	dnnl_batch_normalization_desc_t fd, bd;
	dnnl_primitive_desc_t hint = NULL;
	dnnl_primitive_attr_t attr = NULL;
	dnnl_memory_desc_t x, c;
	dnnl_memory_t dg, dbeta, shift;
	int rc = bn_fwd_desc(be, d, 1, &fd, &x);
	if (!rc)
		rc = wf_cpu_md_vec(be, &c, d->c);
	if (!rc)
		rc = wf_cpu_make_attr(be, 0, &attr);
	if (rc)
		goto fail;
	DN_CHECK(dnnl_primitive_desc_create(&hint, &fd, attr, ctx_of(be)->eng, NULL), fail);
	if (d->relu && !pl->bn_ws) {
		rc = wf_errf(&be->err, WF_EINVAL, "batchnorm: backward before a training forward");
		goto fail;
	}
	DN_CHECK(dnnl_batch_normalization_backward_desc_init(&bd, dnnl_backward, &x, &x, d->eps,
							     bn_flags(d)),
		 fail);
	rc = wf_cpu_op_create(be, pl, &bd, hint, 0, &pl->bwd_d.prim);
	if (rc)
		goto fail;
	pl->bn_bvar = wf_cpu_plan_buf(be, pl, (size_t)d->c);
	pl->db_tmp = wf_cpu_plan_buf(be, pl, (size_t)d->c);
	pl->dg_tmp = wf_cpu_plan_buf(be, pl, (size_t)d->c);
	if (!pl->bn_bvar || !pl->db_tmp || !pl->dg_tmp) {
		rc = be->err.code;
		goto fail;
	}
	rc = wf_cpu_plan_mem(be, pl, &x, DNNL_MEMORY_NONE, &pl->d_x);
	if (!rc)
		rc = wf_cpu_plan_mem(be, pl, &x, DNNL_MEMORY_NONE, &pl->d_dy);
	if (!rc)
		rc = wf_cpu_plan_mem(be, pl, &x, DNNL_MEMORY_NONE, &pl->d_dx);
	if (!rc)
		rc = wf_cpu_plan_mem(be, pl, &c, DNNL_MEMORY_NONE, &pl->d_m);
	if (!rc)
		rc = wf_cpu_plan_mem(be, pl, &c, pl->bn_bvar, &pl->d_v);
	if (!rc)
		rc = wf_cpu_plan_mem(be, pl, &c, DNNL_MEMORY_NONE, &pl->d_g);
	if (!rc)
		rc = wf_cpu_plan_mem(be, pl, &c, pl->dg_tmp, &dg);
	if (!rc)
		rc = wf_cpu_plan_mem(be, pl, &c, pl->db_tmp, &dbeta);
	if (!rc) /* with use_shift oneDNN asks for the shift, though no gradient reads it */
		rc = wf_cpu_plan_mem(be, pl, &c, pl->bn_zeros, &shift);
	if (rc)
		goto fail;
	dn_op *op = pl->bwd_d.prim;
	wf_cpu_op_arg(op, DNNL_ARG_SRC, pl->d_x);
	wf_cpu_op_arg(op, DNNL_ARG_MEAN, pl->d_m);
	wf_cpu_op_arg(op, DNNL_ARG_VARIANCE, pl->d_v);
	wf_cpu_op_arg(op, DNNL_ARG_DIFF_DST, pl->d_dy);
	wf_cpu_op_arg(op, DNNL_ARG_SCALE, pl->d_g);
	wf_cpu_op_arg(op, DNNL_ARG_SHIFT, shift);
	wf_cpu_op_arg(op, DNNL_ARG_DIFF_SRC, pl->d_dx);
	wf_cpu_op_arg(op, DNNL_ARG_DIFF_SCALE, dg);
	wf_cpu_op_arg(op, DNNL_ARG_DIFF_SHIFT, dbeta);
	if (d->relu)
		wf_cpu_op_arg(op, DNNL_ARG_WORKSPACE, pl->bn_ws);
fail:
	if (hint)
		dnnl_primitive_desc_destroy(hint);
	if (attr)
		dnnl_primitive_attr_destroy(attr);
	return rc;
}

int wf_cpu_batchnorm_backward(wf_backend *be, wf_plan **plan, const wf_bn_desc *d, float *dx,
			      float *dgamma, float *dbeta, const float *dy, const float *x,
			      const float *gamma, const float *save_mean, const float *save_invstd)
{
	use_threads(be);
	wf_plan *pl = NULL;
	int rc = wf_cpu_plan_part(be, plan, PLAN_BN, d, sizeof(*d), PART_BWD, bn_build_bwd, 0, &pl);
	if (rc)
		return rc;
	if (!dx && !pl->dx_tmp) {
		/* oneDNN always writes diff_src: a scratch target, once per plan
		 * (floats: room for a bf16 diff_src too) */
		pl->dx_tmp = wf_cpu_plan_buf(be, pl, (size_t)d->n * d->h * d->w * d->c);
		if (!pl->dx_tmp)
			return be->err.code;
	}
	/* oneDNN wants the variance; recover it from the saved 1/sqrt(var + eps) */
	for (int ch = 0; ch < d->c; ch++)
		pl->bn_bvar[ch] = 1.0f / (save_invstd[ch] * save_invstd[ch]) - d->eps;
	rc = wf_cpu_bind_run(be, &pl->bwd_d, 5,
			     (dnnl_memory_t[]){pl->d_x, pl->d_dy, pl->d_dx, pl->d_m, pl->d_g},
			     (const void *[]){x, dy, dx ? dx : pl->dx_tmp, save_mean,
					      gamma ? gamma : pl->bn_ones});
	if (rc)
		return rc;
	if (dgamma)
		wf_cpu_add_into(dgamma, pl->dg_tmp, (size_t)d->c);
	if (dbeta)
		wf_cpu_add_into(dbeta, pl->db_tmp, (size_t)d->c);
	return 0;
}
