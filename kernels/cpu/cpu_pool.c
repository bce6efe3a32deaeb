/* cpu_pool.c: the cpu backend's max and average pooling as oneDNN
 * primitives inside plans. */
#include "kernels/cpu/cpu_priv.h"
#include "kernels/cpu/cpu_loops.h"

#include <string.h>

/* ---- pooling -------------------------------------------------------------------------- */

static int pool_fwd_desc(wf_backend *be, const wf_pool_desc *d, dnnl_prop_kind_t prop,
			 dnnl_pooling_desc_t *pd, dnnl_memory_desc_t *x, dnnl_memory_desc_t *y)
{
	dnnl_data_type_t dt = d->q8 == 1   ? dnnl_u8
			      : d->q8 == 2 ? dnnl_s8
			      : d->io_bf16 ? dnnl_bf16
					   : dnnl_f32;
	dnnl_dims_t dx = {d->n, d->c, d->h, d->w}, dy = {d->n, d->c, d->oh, d->ow};
	int rc = wf_cpu_md_tag_dt(be, x, 4, dx, dt, dnnl_nhwc);
	if (!rc)
		rc = wf_cpu_md_tag_dt(be, y, 4, dy, dt, dnnl_nhwc);
	if (rc)
		return rc;
	dnnl_dims_t st = {d->sh, d->sw}, k = {d->kh, d->kw};
	dnnl_dims_t pl = {d->pt, d->pl}, pr = {d->pb, d->pr};
	dnnl_alg_kind_t alg =
		d->kind == WF_POOL_MAX ? dnnl_pooling_max : dnnl_pooling_avg_exclude_padding;
	DN_CHECK(dnnl_pooling_forward_desc_init(pd, prop, alg, x, y, st, k, pl, pr), fail);
fail:
	return rc;
}

static int pool_build_fwd(wf_backend *be, wf_plan *pl, int unused)
{
	(void)unused;
	dnnl_pooling_desc_t pd;
	dnnl_memory_desc_t mx, my;
	int rc = pool_fwd_desc(be, &pl->d.pool, dnnl_forward_inference, &pd, &mx, &my);
	if (!rc)
		rc = wf_cpu_op_create(be, pl, &pd, NULL, 0, &pl->fwd.prim);
	if (!rc)
		rc = wf_cpu_plan_mem(be, pl, &mx, DNNL_MEMORY_NONE, &pl->f_x);
	if (!rc)
		rc = wf_cpu_plan_mem(be, pl, &my, DNNL_MEMORY_NONE, &pl->f_y);
	if (rc)
		return rc;
	wf_cpu_op_arg(pl->fwd.prim, DNNL_ARG_SRC, pl->f_x);
	wf_cpu_op_arg(pl->fwd.prim, DNNL_ARG_DST, pl->f_y);
	return 0;
}

int wf_cpu_pool_forward(wf_backend *be, wf_plan **plan, const wf_pool_desc *d, float *y,
			const float *x)
{
	use_threads(be);
	if (d->kh == 1 && d->kw == 1) /* one pixel per window: a strided copy */
		return wf_cpu_pool_pick(d, y, x, d->q8 ? 1 : d->io_bf16 ? 2 : sizeof(float));
	wf_plan *pl = NULL;
	int rc = wf_cpu_plan_part(be, plan, PLAN_POOL, d, sizeof(*d), PART_FWD, pool_build_fwd, 0,
				  &pl);
	if (rc)
		return rc;
	return wf_cpu_bind_run(be, &pl->fwd, 2, (dnnl_memory_t[]){pl->f_x, pl->f_y},
			       (const void *[]){x, y});
}

/* Max pooling backward needs the forward's workspace (where each max came
 * from); the forward may have run on other data since, so the backward part
 * recomputes it: a training forward into plan scratch, then the backward. */
static int pool_build_bwd(wf_backend *be, wf_plan *pl, int unused)
{
	(void)unused;
	const wf_pool_desc *d = &pl->d.pool;
	dnnl_pooling_desc_t fd, bd;
	dnnl_memory_desc_t mx, my;
	dnnl_memory_t ws = NULL, ytmp;
	int max = d->kind == WF_POOL_MAX;
	int rc = pool_fwd_desc(be, d, dnnl_forward_training, &fd, &mx, &my);
	if (rc)
		return rc;
	rc = wf_cpu_op_create(be, pl, &fd, NULL, 0, &pl->pool_ws_fwd);
	if (rc)
		return rc;
	dn_op *f = pl->pool_ws_fwd;
	dnnl_dims_t st = {d->sh, d->sw}, k = {d->kh, d->kw};
	dnnl_dims_t pad_l = {d->pt, d->pl}, pad_r = {d->pb, d->pr};
	dnnl_alg_kind_t alg = max ? dnnl_pooling_max : dnnl_pooling_avg_exclude_padding;
	DN_CHECK(dnnl_pooling_backward_desc_init(&bd, alg, &mx, &my, st, k, pad_l, pad_r), fail);
	rc = wf_cpu_op_create(be, pl, &bd, f->pd, 0, &pl->bwd_d.prim);
	if (!rc)
		rc = wf_cpu_plan_mem(be, pl, &mx, DNNL_MEMORY_NONE, &pl->d_dx);
	if (!rc)
		rc = wf_cpu_plan_mem(be, pl, &my, DNNL_MEMORY_NONE, &pl->d_dy);
	if (rc)
		return rc;
	dn_op *b = pl->bwd_d.prim;
	wf_cpu_op_arg(b, DNNL_ARG_DIFF_DST, pl->d_dy);
	wf_cpu_op_arg(b, DNNL_ARG_DIFF_SRC, pl->d_dx);
	if (max) {
		rc = wf_cpu_plan_mem(be, pl, wf_cpu_pd_md(f, dnnl_query_workspace_md),
				     DNNL_MEMORY_ALLOCATE, &ws);
		if (!rc)
			rc = wf_cpu_plan_mem(be, pl, &my, DNNL_MEMORY_ALLOCATE, &ytmp);
		if (!rc)
			rc = wf_cpu_plan_mem(be, pl, &mx, DNNL_MEMORY_NONE, &pl->p_x);
		if (rc)
			return rc;
		wf_cpu_op_arg(f, DNNL_ARG_SRC, pl->p_x);
		wf_cpu_op_arg(f, DNNL_ARG_DST, ytmp);
		wf_cpu_op_arg(f, DNNL_ARG_WORKSPACE, ws);
		wf_cpu_op_arg(b, DNNL_ARG_WORKSPACE, ws);
		pl->bwd_d.pre[pl->bwd_d.npre++] = f;
	}
fail:
	return rc;
}

int wf_cpu_pool_backward(wf_backend *be, wf_plan **plan, const wf_pool_desc *d, float *dx,
			 const float *dy, const float *x, const float *y)
{
	use_threads(be);
	wf_plan *pl = NULL;
	int rc = wf_cpu_plan_part(be, plan, PLAN_POOL, d, sizeof(*d), PART_BWD, pool_build_bwd, 0,
				  &pl);
	if (rc)
		return rc;
	if (!dx)
		return 0;
	return wf_cpu_bind_run(
		be, &pl->bwd_d, 3,
		(dnnl_memory_t[]){d->kind == WF_POOL_MAX ? pl->p_x : NULL, pl->d_dy, pl->d_dx},
		(const void *[]){x, dy, dx});
}
