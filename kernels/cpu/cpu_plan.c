/* cpu_plan.c: the plumbing of the cpu backend's plans: oneDNN status
 * checks, the plan cache (one plan per op instance, rebuilt when the
 * descriptor changes), primitive and reorder creation, binding caller buffers
 * per call, and the memory descriptors of weft's layouts. */
#include "kernels/cpu/cpu_priv.h"

#include <oneapi/dnnl/dnnl_debug.h>

#include <stdlib.h>
#include <string.h>

/* ---- errors ------------------------------------------------------------ */

static int dnnl_code(dnnl_status_t s)
{
	switch (s) {
	case dnnl_out_of_memory: return WF_ENOMEM;
	case dnnl_invalid_arguments: return WF_EINVAL;
	case dnnl_unimplemented: return WF_ENOTSUP;
	default: return WF_EINTERNAL;
	}
}

int wf_cpu_dnnl_fail(wf_backend *be, dnnl_status_t s, const char *call, const char *file, int line)
{
	int len = (int)strcspn(call, "(");
	return wf_errf(&be->err, dnnl_code(s), "cpu: oneDNN %.*s failed: %s (%s:%d)", len, call,
		       dnnl_status2str(s), file, line);
}

static void dn_op_release(dn_op *op)
{
	if (op->prim)
		dnnl_primitive_destroy(op->prim);
	if (op->pd)
		dnnl_primitive_desc_destroy(op->pd);
	if (op->scratch)
		dnnl_memory_destroy(op->scratch);
	memset(op, 0, sizeof(*op));
}

static void plan_release(wf_plan *pl)
{
	if (!pl)
		return;
	for (int i = 0; i < pl->nops; i++)
		dn_op_release(&pl->ops[i]);
	for (int i = 0; i < pl->nmems; i++)
		dnnl_memory_destroy(pl->mems[i]);
	for (int i = 0; i < pl->nbufs; i++)
		free(pl->bufs[i]);
	free(pl);
}

void wf_cpu_plan_free(wf_backend *be, wf_plan *pl)
{
	plan_release(pl);
}

/* The plan in *slot for (kind, desc): reused when both match, else a fresh
 * one replaces it (allocated before the old one is freed, so a rebuilt plan
 * never has the old one's address). */
int wf_cpu_plan_get(wf_backend *be, wf_plan **slot, int kind, const void *desc, size_t size,
		    wf_plan **out)
{
	if (!slot)
		return wf_errf(&be->err, WF_EINVAL, "cpu: plan slot is NULL");
	wf_plan *old = *slot;
	if (old && old->kind == kind && old->bf16 == be->bf16 && memcmp(&old->d, desc, size) == 0) {
		*out = old;
		return 0;
	}
	wf_plan *pl = calloc(1, sizeof(*pl));
	if (!pl)
		return wf_errf(&be->err, WF_ENOMEM, "cpu: out of memory allocating a plan");
	pl->kind = kind;
	pl->bf16 = be->bf16;
	memcpy(&pl->d, desc, size);
	__atomic_fetch_add(&be->plans_built, 1, __ATOMIC_RELAXED); /* branches build at once */
	plan_release(old);
	*slot = pl;
	*out = pl;
	return 0;
}

/* A part failed half-built: drop the whole plan so the next call starts clean. */
int wf_cpu_plan_drop(wf_plan **slot, int rc)
{
	plan_release(*slot);
	*slot = NULL;
	return rc;
}

int wf_cpu_plan_part(wf_backend *be, wf_plan **slot, int kind, const void *desc, size_t size,
		     unsigned part, wf_cpu_part_build build, int arg, wf_plan **out)
{
	int rc = wf_cpu_plan_get(be, slot, kind, desc, size, out);
	if (rc || ((*out)->parts & part))
		return rc;
	if ((rc = build(be, *out, arg)) != 0)
		return wf_cpu_plan_drop(slot, rc);
	(*out)->parts |= part;
	return 0;
}

float *wf_cpu_plan_buf(wf_backend *be, wf_plan *pl, size_t nfloats)
{
	if (pl->nbufs >= PLAN_MAX_BUFS) {
		wf_errf(&be->err, WF_EINTERNAL, "cpu: plan buffer table full");
		return NULL;
	}
	float *p = calloc(nfloats ? nfloats : 1, sizeof(float));
	if (!p) {
		wf_errf(&be->err, WF_ENOMEM, "cpu: out of memory allocating %zu plan floats",
			nfloats);
		return NULL;
	}
	pl->bufs[pl->nbufs++] = p;
	return p;
}

/* A memory object owned by the plan. handle: DNNL_MEMORY_NONE for a caller
 * buffer bound per call, DNNL_MEMORY_ALLOCATE for plan scratch, or a pointer. */
int wf_cpu_plan_mem(wf_backend *be, wf_plan *pl, const dnnl_memory_desc_t *md, void *handle,
		    dnnl_memory_t *out)
{
	int rc = 0;
	if (pl->nmems >= PLAN_MAX_MEMS)
		return wf_errf(&be->err, WF_EINTERNAL, "cpu: plan memory table full");
	DN_CHECK(dnnl_memory_create(out, md, ctx_of(be)->eng, handle), fail);
	pl->mems[pl->nmems++] = *out;
fail:
	return rc;
}

dn_op *wf_cpu_plan_op(wf_backend *be, wf_plan *pl)
{
	if (pl->nops >= PLAN_MAX_OPS) {
		wf_errf(&be->err, WF_EINTERNAL, "cpu: plan primitive table full");
		return NULL;
	}
	return &pl->ops[pl->nops++];
}

void wf_cpu_op_arg(dn_op *op, int arg, dnnl_memory_t mem)
{
	op->args[op->nargs].arg = arg;
	op->args[op->nargs].memory = mem;
	op->nargs++;
}

/* Finish an op whose pd is set: create the primitive and its scratchpad. */
int wf_cpu_op_finish(wf_backend *be, dn_op *op)
{
	int rc = 0;
	DN_CHECK(dnnl_primitive_create(&op->prim, op->pd), fail);
	const dnnl_memory_desc_t *smd =
		dnnl_primitive_desc_query_md(op->pd, dnnl_query_scratchpad_md, 0);
	if (smd && dnnl_memory_desc_get_size(smd) > 0) {
		DN_CHECK(dnnl_memory_create(&op->scratch, smd, ctx_of(be)->eng,
					    DNNL_MEMORY_ALLOCATE),
			 fail);
		wf_cpu_op_arg(op, DNNL_ARG_SCRATCHPAD, op->scratch);
	}
fail:
	return rc;
}

/* Attributes every primitive gets: a user scratchpad (allocated once per plan,
 * not per call) and, when sum != 0, an accumulating sum post-op. */
int wf_cpu_make_attr(wf_backend *be, int sum, dnnl_primitive_attr_t *attr)
{
	int rc = 0;
	dnnl_post_ops_t po = NULL;
	*attr = NULL;
	DN_CHECK(dnnl_primitive_attr_create(attr), fail);
	DN_CHECK(dnnl_primitive_attr_set_scratchpad_mode(*attr, dnnl_scratchpad_mode_user), fail);
	if (sum) {
		DN_CHECK(dnnl_post_ops_create(&po), fail);
		DN_CHECK(dnnl_post_ops_append_sum(po, 1.0f), fail);
		DN_CHECK(dnnl_primitive_attr_set_post_ops(*attr, po), fail);
	}
fail:
	if (po)
		dnnl_post_ops_destroy(po);
	if (rc && *attr) {
		dnnl_primitive_attr_destroy(*attr);
		*attr = NULL;
	}
	return rc;
}

/* The first implementation of op_desc whose name does not contain avoid
 * (oneDNN's order is its preference), else its first. */
static int pd_avoiding(wf_backend *be, const void *op_desc, const_dnnl_primitive_attr_t attr,
		       const_dnnl_primitive_desc_t hint, const char *avoid,
		       dnnl_primitive_desc_t *pd)
{
	int rc = 0;
	dnnl_primitive_desc_iterator_t it = NULL;
	DN_CHECK(dnnl_primitive_desc_iterator_create(&it, op_desc, attr, ctx_of(be)->eng, hint),
		 fail);
	do {
		dnnl_primitive_desc_t p = dnnl_primitive_desc_iterator_fetch(it);
		const char *name = NULL;
		if (p &&
		    dnnl_primitive_desc_query(p, dnnl_query_impl_info_str, 0, &name) ==
			    dnnl_success &&
		    name && !strstr(name, avoid)) {
			*pd = p;
			break;
		}
		if (p)
			dnnl_primitive_desc_destroy(p);
	} while (dnnl_primitive_desc_iterator_next(it) == dnnl_success);
	if (!*pd)
		DN_CHECK(dnnl_primitive_desc_create(pd, op_desc, attr, ctx_of(be)->eng, hint),
			 fail);
fail:
	if (it)
		dnnl_primitive_desc_iterator_destroy(it);
	return rc;
}

/* A compute op from an op descriptor (hint: the forward pd for backward ops)
 * with attributes `given` when not NULL (the caller keeps them), else
 * wf_cpu_make_attr(sum). */
int wf_cpu_op_create_attr(wf_backend *be, wf_plan *pl, const void *op_desc,
			  const_dnnl_primitive_desc_t hint, int sum,
			  const_dnnl_primitive_attr_t given, dn_op **out)
{
	return wf_cpu_op_create_avoiding(be, pl, op_desc, hint, sum, given, NULL, out);
}

int wf_cpu_op_create_avoiding(wf_backend *be, wf_plan *pl, const void *op_desc,
			      const_dnnl_primitive_desc_t hint, int sum,
			      const_dnnl_primitive_attr_t given, const char *avoid, dn_op **out)
{
	int rc = 0;
	dnnl_primitive_attr_t attr = NULL;
	dn_op *op = wf_cpu_plan_op(be, pl);
	if (!op)
		return be->err.code;
	if (!given) {
		rc = wf_cpu_make_attr(be, sum, &attr);
		if (rc)
			goto fail;
		given = attr;
	}
	if (avoid)
		rc = pd_avoiding(be, op_desc, given, hint, avoid, &op->pd);
	else
		DN_CHECK(dnnl_primitive_desc_create(&op->pd, op_desc, given, ctx_of(be)->eng, hint),
			 fail);
	if (rc)
		goto fail;
	rc = wf_cpu_op_finish(be, op);
	if (rc)
		goto fail;
	*out = op;
fail:
	if (attr)
		dnnl_primitive_attr_destroy(attr);
	return rc;
}

int wf_cpu_op_create(wf_backend *be, wf_plan *pl, const void *op_desc,
		     const_dnnl_primitive_desc_t hint, int sum, dn_op **out)
{
	return wf_cpu_op_create_attr(be, pl, op_desc, hint, sum, NULL, out);
}

static int reorder_attr(wf_backend *be, dnnl_memory_t src, dnnl_memory_t dst,
			dnnl_primitive_attr_t attr, dn_op **out, dn_op *op)
{
	int rc = 0;
	const dnnl_memory_desc_t *smd, *dmd;
	DN_CHECK(dnnl_memory_get_memory_desc(src, &smd), fail);
	DN_CHECK(dnnl_memory_get_memory_desc(dst, &dmd), fail);
	dnnl_engine_t eng = ctx_of(be)->eng;
	DN_CHECK(dnnl_reorder_primitive_desc_create(&op->pd, smd, eng, dmd, eng, attr), fail);
	rc = wf_cpu_op_finish(be, op);
	if (rc)
		goto fail;
	wf_cpu_op_arg(op, DNNL_ARG_FROM, src);
	wf_cpu_op_arg(op, DNNL_ARG_TO, dst);
	*out = op;
fail:
	return rc;
}

/* A reorder src -> dst (dst += reorder(src) when sum != 0). */
int wf_cpu_reorder_create(wf_backend *be, wf_plan *pl, dnnl_memory_t src, dnnl_memory_t dst,
			  int sum, dn_op **out)
{
	dnnl_primitive_attr_t attr = NULL;
	dn_op *op = wf_cpu_plan_op(be, pl);
	if (!op)
		return be->err.code;
	int rc = wf_cpu_make_attr(be, sum, &attr);
	if (!rc)
		rc = reorder_attr(be, src, dst, attr, out, op);
	if (attr)
		dnnl_primitive_attr_destroy(attr);
	return rc;
}

int wf_cpu_reorder_scaled(wf_backend *be, wf_plan *pl, dnnl_memory_t src, dnnl_memory_t dst, int n,
			  int mask, const float *scales, dn_op **out)
{
	dnnl_primitive_attr_t attr = NULL;
	dn_op *op = wf_cpu_plan_op(be, pl);
	if (!op)
		return be->err.code;
	int rc = wf_cpu_make_attr(be, 0, &attr);
	if (rc)
		return rc;
	DN_CHECK(dnnl_primitive_attr_set_output_scales(attr, n, mask, scales), fail);
	rc = reorder_attr(be, src, dst, attr, out, op);
fail:
	if (attr)
		dnnl_primitive_attr_destroy(attr);
	return rc;
}

/* Caller buffer as input of `seq->prim`'s argument described by `want`:
 * creates the user memory *user (bound per call); when the primitive wants
 * another layout, also an internal memory and a reorder into it.
 * *prim_mem is what the primitive reads. */
int wf_cpu_bind_in(wf_backend *be, wf_plan *pl, dn_seq *seq, const dnnl_memory_desc_t *user_md,
		   const dnnl_memory_desc_t *want, dnnl_memory_t *user, dnnl_memory_t *prim_mem)
{
	int rc = wf_cpu_plan_mem(be, pl, user_md, DNNL_MEMORY_NONE, user);
	if (rc)
		return rc;
	if (dnnl_memory_desc_equal(user_md, want)) {
		*prim_mem = *user;
		return 0;
	}
	rc = wf_cpu_plan_mem(be, pl, want, DNNL_MEMORY_ALLOCATE, prim_mem);
	if (rc)
		return rc;
	return wf_cpu_reorder_create(be, pl, *user, *prim_mem, 0, &seq->pre[seq->npre++]);
}

/* Caller buffer as output of the primitive; mirror of bind_in. */
int wf_cpu_bind_out(wf_backend *be, wf_plan *pl, dn_seq *seq, const dnnl_memory_desc_t *user_md,
		    const dnnl_memory_desc_t *have, dnnl_memory_t *user, dnnl_memory_t *prim_mem)
{
	int rc = wf_cpu_plan_mem(be, pl, user_md, DNNL_MEMORY_NONE, user);
	if (rc)
		return rc;
	if (dnnl_memory_desc_equal(user_md, have)) {
		*prim_mem = *user;
		return 0;
	}
	rc = wf_cpu_plan_mem(be, pl, have, DNNL_MEMORY_ALLOCATE, prim_mem);
	if (rc)
		return rc;
	return wf_cpu_reorder_create(be, pl, *prim_mem, *user, 0, &seq->post[seq->npost++]);
}

int wf_cpu_op_exec(wf_backend *be, dn_op *op)
{
	int rc = 0;
	DN_CHECK(dnnl_primitive_execute(op->prim, ctx_of(be)->stream, op->nargs, op->args), fail);
fail:
	return rc;
}

int wf_cpu_seq_exec(wf_backend *be, const dn_seq *seq)
{
	int rc = 0;
	for (int i = 0; i < seq->npre && !rc; i++)
		rc = wf_cpu_op_exec(be, seq->pre[i]);
	if (!rc)
		rc = wf_cpu_op_exec(be, seq->prim);
	for (int i = 0; i < seq->npost && !rc; i++)
		rc = wf_cpu_op_exec(be, seq->post[i]);
	if (!rc)
		DN_CHECK(dnnl_stream_wait(ctx_of(be)->stream), fail);
fail:
	return rc;
}

/* Bind a caller buffer (inputs are never written; oneDNN takes void *). */
int wf_cpu_bind(wf_backend *be, dnnl_memory_t mem, const void *p)
{
	int rc = 0;
	DN_CHECK(dnnl_memory_set_data_handle(mem, (void *)p), fail);
fail:
	return rc;
}

/* Attach the caller's buffers ptrs[i] to the plan's memories mems[i]
 * (entries with a NULL memory are skipped), then run seq. */
int wf_cpu_bind_run(wf_backend *be, dn_seq *seq, int n, const dnnl_memory_t *mems,
		    const void *const *ptrs)
{
	for (int i = 0; i < n; i++) {
		int rc = mems[i] ? wf_cpu_bind(be, mems[i], ptrs[i]) : 0;
		if (rc)
			return rc;
	}
	return wf_cpu_seq_exec(be, seq);
}

const dnnl_memory_desc_t *wf_cpu_pd_md(const dn_op *op, dnnl_query_t what)
{
	return dnnl_primitive_desc_query_md(op->pd, what, 0);
}

/* ---- memory descriptors of weft's layouts --------------------------------- */

int wf_cpu_md_tag_dt(wf_backend *be, dnnl_memory_desc_t *md, int nd, const dnnl_dims_t dims,
		     dnnl_data_type_t dt, dnnl_format_tag_t tag)
{
	int rc = 0;
	DN_CHECK(dnnl_memory_desc_init_by_tag(md, nd, dims, dt, tag), fail);
fail:
	return rc;
}

int wf_cpu_md_tag(wf_backend *be, dnnl_memory_desc_t *md, int nd, const dnnl_dims_t dims,
		  dnnl_format_tag_t tag)
{
	return wf_cpu_md_tag_dt(be, md, nd, dims, dnnl_f32, tag);
}

int wf_cpu_md_strides(wf_backend *be, dnnl_memory_desc_t *md, int nd, const dnnl_dims_t dims,
		      const dnnl_dims_t strides)
{
	int rc = 0;
	DN_CHECK(dnnl_memory_desc_init_by_strides(md, nd, dims, dnnl_f32, strides), fail);
fail:
	return rc;
}

int wf_cpu_md_mat(wf_backend *be, dnnl_memory_desc_t *md, dnnl_dim_t rows, dnnl_dim_t cols, int t,
		  dnnl_data_type_t dt)
{
	dnnl_dims_t dims = {t ? cols : rows, t ? rows : cols};
	dnnl_dims_t st = {t ? 1 : cols, t ? cols : 1};
	int rc = 0;
	DN_CHECK(dnnl_memory_desc_init_by_strides(md, 2, dims, dt, st), fail);
fail:
	return rc;
}

/* Activations [N,H,W,C] (oneDNN dims are always N,C,H,W). */
int wf_cpu_md_nhwc(wf_backend *be, dnnl_memory_desc_t *md, int n, int h, int w, int c)
{
	dnnl_dims_t dims = {n, c, h, w};
	return wf_cpu_md_tag(be, md, 4, dims, dnnl_nhwc);
}

int wf_cpu_md_vec(wf_backend *be, dnnl_memory_desc_t *md, int c)
{
	dnnl_dims_t dims = {c};
	return wf_cpu_md_tag(be, md, 1, dims, dnnl_a);
}

/* Conv kernel HWIO [KH,KW,C/g,OC] as oneDNN (g,)oihw dims with strides. */
int wf_cpu_md_hwio(wf_backend *be, dnnl_memory_desc_t *md, const wf_conv_desc *d)
{
	dnnl_dim_t g = d->groups, icg = d->c / g, ocg = d->oc / g, oc = d->oc;
	if (g == 1) {
		dnnl_dims_t dims = {oc, icg, d->kh, d->kw};
		dnnl_dims_t st = {1, oc, d->kw * icg * oc, icg * oc};
		return wf_cpu_md_strides(be, md, 4, dims, st);
	}
	dnnl_dims_t dims = {g, ocg, icg, d->kh, d->kw};
	dnnl_dims_t st = {ocg, 1, oc, d->kw * icg * oc, icg * oc};
	return wf_cpu_md_strides(be, md, 5, dims, st);
}

int wf_cpu_md_any_like(wf_backend *be, dnnl_memory_desc_t *md, const dnnl_memory_desc_t *like)
{
	return wf_cpu_md_tag(be, md, like->ndims, like->dims, dnnl_format_tag_any);
}

/* like, in bf16 with the same layout tag (nhwc activations). */
int wf_cpu_md_bf16_nhwc(wf_backend *be, dnnl_memory_desc_t *md, const dnnl_memory_desc_t *like)
{
	return wf_cpu_md_tag_dt(be, md, like->ndims, like->dims, dnnl_bf16, dnnl_nhwc);
}

/* Does oneDNN on this CPU run bf16 natively (AVX512_BF16 or AMX)? Honours
 * oneDNN's own ISA cap (ONEDNN_MAX_CPU_ISA / DNNL_MAX_CPU_ISA), which is how
 * a CPU without bf16 is simulated. */
int wf_cpu_has_bf16(void)
{
	dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
	return (isa & dnnl_cpu_isa_avx512_core_bf16) == dnnl_cpu_isa_avx512_core_bf16;
}

/* u8 x s8 dot products that do not saturate (AVX512-VNNI, AVX-VNNI): without
 * them oneDNN's int8 convolutions sum pairs of products in 16 bits, which
 * saturate on real activations and weights (errors of the tensor's size). */
int wf_cpu_has_vnni(void)
{
	dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
	return (isa & dnnl_cpu_isa_avx512_core_vnni) == dnnl_cpu_isa_avx512_core_vnni ||
	       (isa & dnnl_cpu_isa_avx2_vnni) == dnnl_cpu_isa_avx2_vnni;
}
