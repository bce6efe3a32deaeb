/* cpu_dense.c: the cpu backend's dense layers as oneDNN matmuls inside plans. */
#include "kernels/cpu/cpu_priv.h"

#include <string.h>

/* ---- dense (matmul) ---------------------------------------------------------- */

/* A float row-major [rows, cols] matrix, or its transpose when t != 0. */
static int md_mat(wf_backend *be, dnnl_memory_desc_t *md, dnnl_dim_t rows, dnnl_dim_t cols, int t)
{
	return wf_cpu_md_mat(be, md, rows, cols, t, dnnl_f32);
}

/* One matmul dst = src * wei (+ bias) (dst += ... when sum), all caller buffers. */
static int matmul_build(wf_backend *be, wf_plan *pl, dn_seq *seq, const dnnl_memory_desc_t *src,
			const dnnl_memory_desc_t *wei, const dnnl_memory_desc_t *bias,
			const dnnl_memory_desc_t *dst, int sum, dnnl_memory_t *msrc,
			dnnl_memory_t *mwei, dnnl_memory_t *mbias, dnnl_memory_t *mdst)
{
	dnnl_matmul_desc_t md;
	int rc = 0;
	DN_CHECK(dnnl_matmul_desc_init(&md, src, wei, bias, dst), fail);
	rc = wf_cpu_op_create(be, pl, &md, NULL, sum, &seq->prim);
	if (!rc)
		rc = wf_cpu_plan_mem(be, pl, src, DNNL_MEMORY_NONE, msrc);
	if (!rc)
		rc = wf_cpu_plan_mem(be, pl, wei, DNNL_MEMORY_NONE, mwei);
	if (!rc && bias)
		rc = wf_cpu_plan_mem(be, pl, bias, DNNL_MEMORY_NONE, mbias);
	if (!rc)
		rc = wf_cpu_plan_mem(be, pl, dst, DNNL_MEMORY_NONE, mdst);
	if (rc)
		goto fail;
	wf_cpu_op_arg(seq->prim, DNNL_ARG_SRC, *msrc);
	wf_cpu_op_arg(seq->prim, DNNL_ARG_WEIGHTS, *mwei);
	if (bias)
		wf_cpu_op_arg(seq->prim, DNNL_ARG_BIAS, *mbias);
	wf_cpu_op_arg(seq->prim, DNNL_ARG_DST, *mdst);
fail:
	return rc;
}

static int dense_build_fwd(wf_backend *be, wf_plan *pl, int unused)
{
	(void)unused;
	const wf_dense_desc *d = &pl->d.dense;
	dnnl_memory_desc_t mx, mw, mb, my;
	int rc = md_mat(be, &mx, d->n, d->in, 0);
	if (!rc)
		rc = md_mat(be, &mw, d->in, d->out, 0);
	if (!rc)
		rc = md_mat(be, &mb, 1, d->out, 0);
	if (!rc)
		rc = md_mat(be, &my, d->n, d->out, 0);
	if (!rc)
		rc = matmul_build(be, pl, &pl->fwd, &mx, &mw, d->bias ? &mb : NULL, &my, 0,
				  &pl->f_x, &pl->f_w, &pl->f_b, &pl->f_y);
	return rc;
}

int wf_cpu_dense_forward(wf_backend *be, wf_plan **plan, const wf_dense_desc *d, float *y,
			 const float *x, const float *w, const float *b)
{
	use_threads(be);
	wf_plan *pl = NULL;
	int rc = wf_cpu_plan_part(be, plan, PLAN_DENSE, d, sizeof(*d), PART_FWD, dense_build_fwd, 0,
				  &pl);
	if (rc)
		return rc;
	return wf_cpu_bind_run(
		be, &pl->fwd, 4,
		(dnnl_memory_t[]){pl->f_x, pl->f_w, d->bias ? pl->f_b : NULL, pl->f_y},
		(const void *[]){x, w, b, y});
}

static int dense_build_bwd(wf_backend *be, wf_plan *pl, int unused)
{
	(void)unused;
	const wf_dense_desc *d = &pl->d.dense;
	dnnl_memory_desc_t dy, wt, dx, xt, dw;
	/* dx[N,IN] = dy[N,OUT] * w^T; dw[IN,OUT] += x^T * dy */
	int rc = md_mat(be, &dy, d->n, d->out, 0);
	if (!rc)
		rc = md_mat(be, &wt, d->in, d->out, 1);
	if (!rc)
		rc = md_mat(be, &dx, d->n, d->in, 0);
	if (!rc)
		rc = md_mat(be, &xt, d->n, d->in, 1);
	if (!rc)
		rc = md_mat(be, &dw, d->in, d->out, 0);
	if (!rc)
		rc = matmul_build(be, pl, &pl->bwd_d, &dy, &wt, NULL, &dx, 0, &pl->d_dy, &pl->d_w,
				  NULL, &pl->d_dx);
	if (!rc)
		rc = matmul_build(be, pl, &pl->bwd_w, &xt, &dy, NULL, &dw, 1, &pl->w_x, &pl->w_dy,
				  NULL, &pl->w_dw);
	return rc;
}

int wf_cpu_dense_backward(wf_backend *be, wf_plan **plan, const wf_dense_desc *d, float *dx,
			  float *dw, float *db, const float *dy, const float *x, const float *w)
{
	use_threads(be);
	wf_plan *pl = NULL;
	int rc = wf_cpu_plan_part(be, plan, PLAN_DENSE, d, sizeof(*d), PART_BWD, dense_build_bwd, 0,
				  &pl);
	if (rc)
		return rc;
	if (dx &&
	    (rc = wf_cpu_bind_run(be, &pl->bwd_d, 3, (dnnl_memory_t[]){pl->d_dy, pl->d_w, pl->d_dx},
				  (const void *[]){dy, w, dx})) != 0)
		return rc;
	if (dw &&
	    (rc = wf_cpu_bind_run(be, &pl->bwd_w, 3, (dnnl_memory_t[]){pl->w_x, pl->w_dy, pl->w_dw},
				  (const void *[]){x, dy, dw})) != 0)
		return rc;
	if (db && d->bias) {
		const int n = d->n, out = d->out;
#pragma omp parallel for if ((size_t)n * out > 32768) schedule(static)
		for (int j = 0; j < out; j++) {
			float s = 0.0f;
			for (int i = 0; i < n; i++)
				s += dy[(size_t)i * out + j];
			db[j] += s;
		}
	}
	return 0;
}
