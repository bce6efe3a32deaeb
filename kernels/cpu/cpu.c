/* cpu.c: the cpu backend. Convolution, dense, batch norm and pooling run as
 * oneDNN 2.6 primitives built once per descriptor inside a plan; the
 * memory-bound ops are OpenMP loops (cpu_loops.c). This is the only file of
 * weft that includes oneDNN.
 *
 * A plan holds, for one op instance, a copy of its descriptor and up to three
 * lazily built parts (forward, backward; batch norm: forward-training,
 * forward-inference, backward), so the executor may share one plan slot
 * between an op's forward and backward or give each its own. Each part is a
 * sequence of primitives: reorders of the caller's buffers into the layout the
 * compute primitive prefers, the primitive, reorders back. User buffers are
 * bound per call with dnnl_memory_set_data_handle; scratchpads, workspaces
 * and reordered tensors are allocated when the part is built, never per call.
 */
#include "kernels/kernels.h"
#include "kernels/cpu/cpu_loops.h"

#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl_debug.h>
#include <omp.h>

#include <math.h>
#include <stdlib.h>
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

typedef struct cpu_ctx {
	dnnl_engine_t eng;
	dnnl_stream_t stream;
} cpu_ctx;

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

static int dnnl_fail(wf_backend *be, dnnl_status_t s, const char *call, const char *file, int line)
{
	int len = (int)strcspn(call, "(");
	return wf_errf(&be->err, dnnl_code(s), "cpu: oneDNN %.*s failed: %s (%s:%d)", len, call,
		       dnnl_status2str(s), file, line);
}

/* Check a dnnl_status_t: on failure record file, line and the status name in
 * be->err, set rc and jump to `label`. */
#define DN_CHECK(call, label)                                                                      \
	do {                                                                                       \
		dnnl_status_t s_ = (call);                                                         \
		if (s_ != dnnl_success) {                                                          \
			rc = dnnl_fail(be, s_, #call, __FILE__, __LINE__);                         \
			goto label;                                                                \
		}                                                                                  \
	} while (0)

/* ---- threads ------------------------------------------------------------- */

/* OpenMP's thread count (nthreads-var) belongs to each calling thread, and
 * oneDNN's OpenMP runtime sizes its parallel regions from it. A backend may be
 * created in one thread and used in others (weft-serve loads a model in its
 * repository thread and runs forwards in its batch threads), so every op that
 * runs a parallel region or a primitive first makes the calling thread's count
 * be->threads. Reading the count is cheap; it is set only on a change. */
static inline void use_threads(const wf_backend *be)
{
	if (be->threads > 0 && omp_get_max_threads() != be->threads)
		omp_set_num_threads(be->threads);
}

/* ---- primitives and plans ------------------------------------------------ */

#define DN_MAX_ARGS 10

/* One primitive with its argument list (memories are owned by the plan). */
typedef struct dn_op {
	dnnl_primitive_desc_t pd;
	dnnl_primitive_t prim;
	dnnl_memory_t scratch; /* user-mode scratchpad, allocated once */
	int nargs;
	dnnl_exec_arg_t args[DN_MAX_ARGS];
} dn_op;

/* What one call of a part runs: reorders in, the primitive, reorders out. */
typedef struct dn_seq {
	dn_op *pre[4];
	int npre;
	dn_op *prim;
	dn_op *post[2];
	int npost;
} dn_seq;

enum { PLAN_CONV = 1, PLAN_DENSE, PLAN_BN, PLAN_POOL };
enum { PART_FWD = 1, PART_BWD = 2, PART_FWD_INFER = 4 };

#define PLAN_MAX_OPS  16
#define PLAN_MAX_MEMS 32
#define PLAN_MAX_BUFS 8

struct wf_plan {
	int kind; /* PLAN_* */
	union {
		wf_conv_desc conv;
		wf_dense_desc dense;
		wf_bn_desc bn;
		wf_pool_desc pool;
	} d;
	unsigned parts; /* PART_* built so far */
	dn_op ops[PLAN_MAX_OPS];
	int nops;
	dnnl_memory_t mems[PLAN_MAX_MEMS];
	int nmems;
	float *bufs[PLAN_MAX_BUFS]; /* host scratch */
	int nbufs;

	/* forward: user buffers x, w, b, y (bn: x, y, gamma, beta, mean, var) */
	dn_seq fwd;
	dnnl_memory_t f_x, f_w, f_b, f_y, f_m, f_v;
	/* bn forward inference (separate primitive, same user roles) */
	dn_seq inf;
	dnnl_memory_t i_x, i_y, i_g, i_b, i_m, i_v;
	float *bn_var; /* [C] batch variance from oneDNN (training) */
	/* backward data: dy, w -> dx (bn: the whole backward) */
	dn_seq bwd_d;
	dnnl_memory_t d_dy, d_w, d_dx, d_x, d_m, d_v, d_g;
	float *bn_bvar;	 /* [C] variance rebuilt from save_invstd */
	float *bn_mean;	 /* [C] batch mean when the caller passes save_mean = NULL */
	float *bn_ones;	 /* [C] gamma when the caller passes NULL (no scale) */
	float *bn_zeros; /* [C] beta when the caller passes NULL (no center) */
	float *dx_tmp;	 /* bn: diff_src when the caller passes dx = NULL */
	float *dg_tmp;	 /* [C] bn diff scale before accumulation */
	float *db_tmp;	 /* [C] bn diff shift / conv diff bias before accumulation */
	/* backward weights: x, dy -> dw (accumulated by dw_acc), db */
	dn_seq bwd_w;
	dnnl_memory_t w_x, w_dy, w_dw;
	dn_op *dw_acc;
	/* pooling backward: the recomputed forward's input */
	dnnl_memory_t p_x;
	dn_op *pool_ws_fwd;
	/* inference (desc infer = 1): weights reordered once, on the first call */
	dn_op *w_once;
	int w_done;
	dnnl_memory_t f_r; /* fused residual (binary add post-op source) */
	int bf16;	   /* built for bf16 compute (be->bf16 when created) */
};

static cpu_ctx *ctx_of(wf_backend *be)
{
	return (cpu_ctx *)be->ctx;
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

static void cpu_plan_free(wf_backend *be, wf_plan *pl)
{
	plan_release(pl);
}

/* The plan in *slot for (kind, desc): reused when both match, else a fresh
 * one replaces it (allocated before the old one is freed, so a rebuilt plan
 * never has the old one's address). */
static int plan_get(wf_backend *be, wf_plan **slot, int kind, const void *desc, size_t size,
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
	plan_release(old);
	*slot = pl;
	*out = pl;
	return 0;
}

/* A part failed half-built: drop the whole plan so the next call starts clean. */
static int plan_drop(wf_plan **slot, int rc)
{
	plan_release(*slot);
	*slot = NULL;
	return rc;
}

static float *plan_buf(wf_backend *be, wf_plan *pl, size_t nfloats)
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
static int plan_mem(wf_backend *be, wf_plan *pl, const dnnl_memory_desc_t *md, void *handle,
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

static dn_op *plan_op(wf_backend *be, wf_plan *pl)
{
	if (pl->nops >= PLAN_MAX_OPS) {
		wf_errf(&be->err, WF_EINTERNAL, "cpu: plan primitive table full");
		return NULL;
	}
	return &pl->ops[pl->nops++];
}

static void op_arg(dn_op *op, int arg, dnnl_memory_t mem)
{
	op->args[op->nargs].arg = arg;
	op->args[op->nargs].memory = mem;
	op->nargs++;
}

/* Finish an op whose pd is set: create the primitive and its scratchpad. */
static int op_finish(wf_backend *be, dn_op *op)
{
	int rc = 0;
	DN_CHECK(dnnl_primitive_create(&op->prim, op->pd), fail);
	const dnnl_memory_desc_t *smd =
		dnnl_primitive_desc_query_md(op->pd, dnnl_query_scratchpad_md, 0);
	if (smd && dnnl_memory_desc_get_size(smd) > 0) {
		DN_CHECK(dnnl_memory_create(&op->scratch, smd, ctx_of(be)->eng,
					    DNNL_MEMORY_ALLOCATE),
			 fail);
		op_arg(op, DNNL_ARG_SCRATCHPAD, op->scratch);
	}
fail:
	return rc;
}

/* Attributes every primitive gets: a user scratchpad (allocated once per plan,
 * not per call) and, when sum != 0, an accumulating sum post-op. */
static int make_attr(wf_backend *be, int sum, dnnl_primitive_attr_t *attr)
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

/* A compute op from an op descriptor (hint: the forward pd for backward ops)
 * with attributes `given` when not NULL (the caller keeps them), else
 * make_attr(sum). */
static int op_create_attr(wf_backend *be, wf_plan *pl, const void *op_desc,
			  const_dnnl_primitive_desc_t hint, int sum,
			  const_dnnl_primitive_attr_t given, dn_op **out)
{
	int rc = 0;
	dnnl_primitive_attr_t attr = NULL;
	dn_op *op = plan_op(be, pl);
	if (!op)
		return be->err.code;
	if (!given) {
		rc = make_attr(be, sum, &attr);
		if (rc)
			goto fail;
		given = attr;
	}
	DN_CHECK(dnnl_primitive_desc_create(&op->pd, op_desc, given, ctx_of(be)->eng, hint), fail);
	rc = op_finish(be, op);
	if (rc)
		goto fail;
	*out = op;
fail:
	if (attr)
		dnnl_primitive_attr_destroy(attr);
	return rc;
}

static int op_create(wf_backend *be, wf_plan *pl, const void *op_desc,
		     const_dnnl_primitive_desc_t hint, int sum, dn_op **out)
{
	return op_create_attr(be, pl, op_desc, hint, sum, NULL, out);
}

/* A reorder src -> dst (dst += reorder(src) when sum != 0). */
static int reorder_create(wf_backend *be, wf_plan *pl, dnnl_memory_t src, dnnl_memory_t dst,
			  int sum, dn_op **out)
{
	int rc = 0;
	dnnl_primitive_attr_t attr = NULL;
	const dnnl_memory_desc_t *smd, *dmd;
	dn_op *op = plan_op(be, pl);
	if (!op)
		return be->err.code;
	DN_CHECK(dnnl_memory_get_memory_desc(src, &smd), fail);
	DN_CHECK(dnnl_memory_get_memory_desc(dst, &dmd), fail);
	rc = make_attr(be, sum, &attr);
	if (rc)
		goto fail;
	dnnl_engine_t eng = ctx_of(be)->eng;
	DN_CHECK(dnnl_reorder_primitive_desc_create(&op->pd, smd, eng, dmd, eng, attr), fail);
	rc = op_finish(be, op);
	if (rc)
		goto fail;
	op_arg(op, DNNL_ARG_FROM, src);
	op_arg(op, DNNL_ARG_TO, dst);
	*out = op;
fail:
	if (attr)
		dnnl_primitive_attr_destroy(attr);
	return rc;
}

/* Caller buffer as input of `seq->prim`'s argument described by `want`:
 * creates the user memory *user (bound per call); when the primitive wants
 * another layout, also an internal memory and a reorder into it.
 * *prim_mem is what the primitive reads. */
static int bind_in(wf_backend *be, wf_plan *pl, dn_seq *seq, const dnnl_memory_desc_t *user_md,
		   const dnnl_memory_desc_t *want, dnnl_memory_t *user, dnnl_memory_t *prim_mem)
{
	int rc = plan_mem(be, pl, user_md, DNNL_MEMORY_NONE, user);
	if (rc)
		return rc;
	if (dnnl_memory_desc_equal(user_md, want)) {
		*prim_mem = *user;
		return 0;
	}
	rc = plan_mem(be, pl, want, DNNL_MEMORY_ALLOCATE, prim_mem);
	if (rc)
		return rc;
	return reorder_create(be, pl, *user, *prim_mem, 0, &seq->pre[seq->npre++]);
}

/* Caller buffer as output of the primitive; mirror of bind_in. */
static int bind_out(wf_backend *be, wf_plan *pl, dn_seq *seq, const dnnl_memory_desc_t *user_md,
		    const dnnl_memory_desc_t *have, dnnl_memory_t *user, dnnl_memory_t *prim_mem)
{
	int rc = plan_mem(be, pl, user_md, DNNL_MEMORY_NONE, user);
	if (rc)
		return rc;
	if (dnnl_memory_desc_equal(user_md, have)) {
		*prim_mem = *user;
		return 0;
	}
	rc = plan_mem(be, pl, have, DNNL_MEMORY_ALLOCATE, prim_mem);
	if (rc)
		return rc;
	return reorder_create(be, pl, *prim_mem, *user, 0, &seq->post[seq->npost++]);
}

static int op_exec(wf_backend *be, dn_op *op)
{
	int rc = 0;
	DN_CHECK(dnnl_primitive_execute(op->prim, ctx_of(be)->stream, op->nargs, op->args), fail);
fail:
	return rc;
}

static int seq_exec(wf_backend *be, const dn_seq *seq)
{
	int rc = 0;
	for (int i = 0; i < seq->npre && !rc; i++)
		rc = op_exec(be, seq->pre[i]);
	if (!rc)
		rc = op_exec(be, seq->prim);
	for (int i = 0; i < seq->npost && !rc; i++)
		rc = op_exec(be, seq->post[i]);
	if (!rc)
		DN_CHECK(dnnl_stream_wait(ctx_of(be)->stream), fail);
fail:
	return rc;
}

/* Bind a caller buffer (inputs are never written; oneDNN takes void *). */
static int bind(wf_backend *be, dnnl_memory_t mem, const void *p)
{
	int rc = 0;
	DN_CHECK(dnnl_memory_set_data_handle(mem, (void *)p), fail);
fail:
	return rc;
}

/* Attach the caller's buffers ptrs[i] to the plan's memories mems[i]
 * (entries with a NULL memory are skipped), then run seq. */
static int bind_run(wf_backend *be, dn_seq *seq, int n, const dnnl_memory_t *mems,
		    const void *const *ptrs)
{
	for (int i = 0; i < n; i++) {
		int rc = mems[i] ? bind(be, mems[i], ptrs[i]) : 0;
		if (rc)
			return rc;
	}
	return seq_exec(be, seq);
}

static const dnnl_memory_desc_t *pd_md(const dn_op *op, dnnl_query_t what)
{
	return dnnl_primitive_desc_query_md(op->pd, what, 0);
}

/* ---- memory descriptors of weft's layouts --------------------------------- */

static int md_tag_dt(wf_backend *be, dnnl_memory_desc_t *md, int nd, const dnnl_dims_t dims,
		     dnnl_data_type_t dt, dnnl_format_tag_t tag)
{
	int rc = 0;
	DN_CHECK(dnnl_memory_desc_init_by_tag(md, nd, dims, dt, tag), fail);
fail:
	return rc;
}

static int md_tag(wf_backend *be, dnnl_memory_desc_t *md, int nd, const dnnl_dims_t dims,
		  dnnl_format_tag_t tag)
{
	return md_tag_dt(be, md, nd, dims, dnnl_f32, tag);
}

static int md_strides(wf_backend *be, dnnl_memory_desc_t *md, int nd, const dnnl_dims_t dims,
		      const dnnl_dims_t strides)
{
	int rc = 0;
	DN_CHECK(dnnl_memory_desc_init_by_strides(md, nd, dims, dnnl_f32, strides), fail);
fail:
	return rc;
}

/* Activations [N,H,W,C] (oneDNN dims are always N,C,H,W). */
static int md_nhwc(wf_backend *be, dnnl_memory_desc_t *md, int n, int h, int w, int c)
{
	dnnl_dims_t dims = {n, c, h, w};
	return md_tag(be, md, 4, dims, dnnl_nhwc);
}

static int md_vec(wf_backend *be, dnnl_memory_desc_t *md, int c)
{
	dnnl_dims_t dims = {c};
	return md_tag(be, md, 1, dims, dnnl_a);
}

/* Conv kernel HWIO [KH,KW,C/g,OC] as oneDNN (g,)oihw dims with strides. */
static int md_hwio(wf_backend *be, dnnl_memory_desc_t *md, const wf_conv_desc *d)
{
	dnnl_dim_t g = d->groups, icg = d->c / g, ocg = d->oc / g, oc = d->oc;
	if (g == 1) {
		dnnl_dims_t dims = {oc, icg, d->kh, d->kw};
		dnnl_dims_t st = {1, oc, d->kw * icg * oc, icg * oc};
		return md_strides(be, md, 4, dims, st);
	}
	dnnl_dims_t dims = {g, ocg, icg, d->kh, d->kw};
	dnnl_dims_t st = {ocg, 1, oc, d->kw * icg * oc, icg * oc};
	return md_strides(be, md, 5, dims, st);
}

static int md_any_like(wf_backend *be, dnnl_memory_desc_t *md, const dnnl_memory_desc_t *like)
{
	return md_tag(be, md, like->ndims, like->dims, dnnl_format_tag_any);
}

/* like, in bf16 with the same layout tag (nhwc activations). */
static int md_bf16_nhwc(wf_backend *be, dnnl_memory_desc_t *md, const dnnl_memory_desc_t *like)
{
	return md_tag_dt(be, md, like->ndims, like->dims, dnnl_bf16, dnnl_nhwc);
}

/* Does oneDNN on this CPU run bf16 natively (AVX512_BF16 or AMX)? Honours
 * oneDNN's own ISA cap (ONEDNN_MAX_CPU_ISA / DNNL_MAX_CPU_ISA), which is how
 * a CPU without bf16 is simulated. */
static int cpu_has_bf16(void)
{
	dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
	return (isa & dnnl_cpu_isa_avx512_core_bf16) == dnnl_cpu_isa_avx512_core_bf16;
}

/* ---- convolution ----------------------------------------------------------- */

static int conv_check(wf_backend *be, const wf_conv_desc *d)
{
	if (d->n <= 0 || d->h <= 0 || d->w <= 0 || d->c <= 0 || d->oc <= 0 || d->kh <= 0 ||
	    d->kw <= 0 || d->sh <= 0 || d->sw <= 0 || d->dh <= 0 || d->dw <= 0 || d->groups <= 0)
		return wf_errf(&be->err, WF_EINVAL,
			       "cpu conv2d: bad descriptor (n=%d h=%d w=%d c=%d oc=%d k=%dx%d "
			       "s=%dx%d d=%dx%d groups=%d): sizes must be > 0",
			       d->n, d->h, d->w, d->c, d->oc, d->kh, d->kw, d->sh, d->sw, d->dh,
			       d->dw, d->groups);
	if (d->c % d->groups || d->oc % d->groups)
		return wf_errf(&be->err, WF_EINVAL,
			       "cpu conv2d: groups=%d does not divide c=%d and oc=%d", d->groups,
			       d->c, d->oc);
	int eh = (d->kh - 1) * d->dh + 1, ew = (d->kw - 1) * d->dw + 1;
	int oh = (d->h + d->pt + d->pb - eh) / d->sh + 1;
	int ow = (d->w + d->pl + d->pr - ew) / d->sw + 1;
	if (d->pt < 0 || d->pb < 0 || d->pl < 0 || d->pr < 0 || oh != d->oh || ow != d->ow ||
	    oh <= 0 || ow <= 0)
		return wf_errf(&be->err, WF_EINVAL,
			       "cpu conv2d: output %dx%d does not match input %dx%d, kernel %dx%d, "
			       "padding t%d b%d l%d r%d (expected %dx%d)",
			       d->oh, d->ow, d->h, d->w, d->kh, d->kw, d->pt, d->pb, d->pl, d->pr,
			       oh, ow);
	return 0;
}

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
	int rc = md_nhwc(be, &m->x, d->n, d->h, d->w, d->c);
	if (!rc)
		rc = md_nhwc(be, &m->y, d->n, d->oh, d->ow, d->oc);
	if (!rc && bf16 && (d->io_bf16 & 1)) /* the caller's x is bf16 already */
		rc = md_bf16_nhwc(be, &m->x, &m->x);
	if (!rc && bf16 && (d->io_bf16 & 2))
		rc = md_bf16_nhwc(be, &m->y, &m->y);
	if (!rc)
		rc = md_hwio(be, &m->w, d);
	if (!rc)
		rc = md_vec(be, &m->b, d->oc);
	if (!rc)
		rc = md_tag_dt(be, &m->wa, m->w.ndims, m->w.dims, bf16 ? dnnl_bf16 : dnnl_f32,
			       dnnl_format_tag_any);
	m->xa = m->x;
	m->ya = m->y;
	if (!rc && bf16)
		rc = md_bf16_nhwc(be, &m->xa, &m->x);
	else if (!rc && CONV_ACT_ANY)
		rc = md_any_like(be, &m->xa, &m->x);
	if (!rc && !bf16 && CONV_ACT_ANY)
		rc = md_any_like(be, &m->ya, &m->y);
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
 * residual add (binary, source DNNL_ARG_ATTR_MULTIPLE_POST_OP(0)), act. */
static int conv_fused_attr(wf_backend *be, const wf_conv_desc *d, const dnnl_memory_desc_t *y,
			   dnnl_primitive_attr_t *attr)
{
	int rc = make_attr(be, 0, attr);
	dnnl_post_ops_t po = NULL;
	if (rc || (!d->residual && !d->act))
		return rc;
	DN_CHECK(dnnl_post_ops_create(&po), fail);
	if (d->residual)
		DN_CHECK(dnnl_post_ops_append_binary(po, dnnl_binary_add, y), fail);
	if (d->act == 1)
		DN_CHECK(dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_relu, 0.0f, 0.0f),
			 fail);
	else if (d->act == 2)
		DN_CHECK(dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_clip, 0.0f, 6.0f),
			 fail);
	DN_CHECK(dnnl_primitive_attr_set_post_ops(*attr, po), fail);
fail:
	if (po)
		dnnl_post_ops_destroy(po);
	return rc;
}

static int conv_build_fwd(wf_backend *be, wf_plan *pl)
{
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
		rc = md_nhwc(be, &r32, d->n, d->oh, d->ow, d->oc);
	if (!rc)
		rc = md_bf16_nhwc(be, &r16, &r32);
	if (!rc)
		rc = conv_fused_attr(be, d, pl->bf16 && (d->io_bf16 & 4) ? &r16 : &r32, &attr);
	if (!rc)
		rc = op_create_attr(be, pl, &cd, NULL, 0, attr, &pl->fwd.prim);
	if (attr)
		dnnl_primitive_attr_destroy(attr);
	if (rc)
		return rc;
	dn_op *op = pl->fwd.prim;
	rc = bind_in(be, pl, &pl->fwd, &m.x, pd_md(op, dnnl_query_src_md), &pl->f_x, &px);
	int npre = pl->fwd.npre;
	if (!rc)
		rc = bind_in(be, pl, &pl->fwd, &m.w, pd_md(op, dnnl_query_weights_md), &pl->f_w,
			     &pw);
	if (!rc && d->infer && pl->fwd.npre > npre) /* the weight reorder: once, not per call */
		pl->w_once = pl->fwd.pre[--pl->fwd.npre];
	dnnl_memory_desc_t rmd = m.y;
	if (!rc && d->residual)
		rc = pl->bf16 && (d->io_bf16 & 4) ? md_bf16_nhwc(be, &rmd, &m.y)
						  : md_nhwc(be, &rmd, d->n, d->oh, d->ow, d->oc);
	if (!rc && d->residual) {
		rc = plan_mem(be, pl, &rmd, DNNL_MEMORY_NONE, &pl->f_r);
		if (!rc)
			op_arg(op, DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1, pl->f_r);
	}
	if (!rc)
		rc = bind_out(be, pl, &pl->fwd, &m.y, pd_md(op, dnnl_query_dst_md), &pl->f_y, &py);
	if (!rc && d->bias)
		rc = plan_mem(be, pl, &m.b, DNNL_MEMORY_NONE, &pl->f_b);
	if (rc)
		return rc;
	op_arg(op, DNNL_ARG_SRC, px);
	op_arg(op, DNNL_ARG_WEIGHTS, pw);
	if (d->bias)
		op_arg(op, DNNL_ARG_BIAS, pl->f_b);
	op_arg(op, DNNL_ARG_DST, py);
	return 0;
}

static int cpu_conv2d_forward_fused(wf_backend *be, wf_plan **plan, const wf_conv_desc *d, float *y,
				    const float *x, const float *w, const float *b, const float *r)
{
	use_threads(be);
	wf_plan *pl = NULL;
	int rc = conv_check(be, d);
	if (!rc && (d->act < 0 || d->act > 2 || (d->residual && !r) || (d->io_bf16 && !be->bf16)))
		rc = wf_errf(&be->err, WF_EINVAL,
			     "cpu conv2d: act=%d (0 none, 1 relu, 2 relu6), residual=%d without "
			     "a residual tensor or io_bf16=%d without bf16 precision",
			     d->act, d->residual, d->io_bf16);
	if (!rc)
		rc = plan_get(be, plan, PLAN_CONV, d, sizeof(*d), &pl);
	if (rc)
		return rc;
	if (!(pl->parts & PART_FWD)) {
		rc = conv_build_fwd(be, pl);
		if (rc)
			return plan_drop(plan, rc);
		pl->parts |= PART_FWD;
	}
	if (pl->w_once && !pl->w_done) {
		rc = bind(be, pl->f_w, w);
		if (!rc)
			rc = op_exec(be, pl->w_once);
		if (rc)
			return rc;
		pl->w_done = 1;
	}
	return bind_run(be, &pl->fwd, 5,
			(dnnl_memory_t[]){pl->f_x, pl->f_w, d->bias ? pl->f_b : NULL, pl->f_y,
					  d->residual ? pl->f_r : NULL},
			(const void *[]){x, w, b, y, r});
}

static int cpu_conv2d_forward(wf_backend *be, wf_plan **plan, const wf_conv_desc *d, float *y,
			      const float *x, const float *w, const float *b)
{
	if (d->act || d->residual || d->infer || d->io_bf16)
		return wf_errf(&be->err, WF_EINVAL,
			       "cpu conv2d: act, residual and infer are for conv2d_forward_fused");
	return cpu_conv2d_forward_fused(be, plan, d, y, x, w, b, NULL);
}

static int conv_build_bwd(wf_backend *be, wf_plan *pl)
{
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
		rc = md_bf16_nhwc(be, &ybf, &m.y);
	else
		ybf = m.ya;
	if (!rc)
		rc = make_attr(be, 0, &attr);
	if (rc)
		goto fail;
	DN_CHECK(dnnl_primitive_desc_create(&hint, &fd, attr, ctx_of(be)->eng, NULL), fail);

	/* backward data: dx = dy conv^T w */
	DN_CHECK(dnnl_dilated_convolution_backward_data_desc_init(&bd, dnnl_convolution_direct,
								  bf16 ? &m.x : &m.xa, &m.wa, &ybf,
								  m.strides, m.dil, m.pl, m.pr),
		 fail);
	rc = op_create(be, pl, &bd, hint, 0, &pl->bwd_d.prim);
	if (rc)
		goto fail;
	dn_op *op = pl->bwd_d.prim;
	rc = bind_in(be, pl, &pl->bwd_d, &m.y, pd_md(op, dnnl_query_diff_dst_md), &pl->d_dy, &mem);
	if (rc)
		goto fail;
	op_arg(op, DNNL_ARG_DIFF_DST, mem);
	rc = bind_in(be, pl, &pl->bwd_d, &m.w, pd_md(op, dnnl_query_weights_md), &pl->d_w, &mem);
	if (rc)
		goto fail;
	op_arg(op, DNNL_ARG_WEIGHTS, mem);
	rc = bind_out(be, pl, &pl->bwd_d, &m.x, pd_md(op, dnnl_query_diff_src_md), &pl->d_dx, &mem);
	if (rc)
		goto fail;
	op_arg(op, DNNL_ARG_DIFF_SRC, mem);

	/* backward weights into plan scratch, then dw += reorder(scratch) */
	dnnl_memory_desc_t dwa;
	rc = md_any_like(be, &dwa, &m.w); /* fp32 weight gradient */
	if (rc)
		goto fail;
	DN_CHECK(dnnl_dilated_convolution_backward_weights_desc_init(
			 &wd, dnnl_convolution_direct, &m.xa, &dwa, d->bias ? &m.b : NULL, &ybf,
			 m.strides, m.dil, m.pl, m.pr),
		 fail);
	rc = op_create(be, pl, &wd, hint, 0, &pl->bwd_w.prim);
	if (rc)
		goto fail;
	op = pl->bwd_w.prim;
	rc = bind_in(be, pl, &pl->bwd_w, &m.x, pd_md(op, dnnl_query_src_md), &pl->w_x, &mem);
	if (rc)
		goto fail;
	op_arg(op, DNNL_ARG_SRC, mem);
	rc = bind_in(be, pl, &pl->bwd_w, &m.y, pd_md(op, dnnl_query_diff_dst_md), &pl->w_dy, &mem);
	if (rc)
		goto fail;
	op_arg(op, DNNL_ARG_DIFF_DST, mem);
	rc = plan_mem(be, pl, pd_md(op, dnnl_query_diff_weights_md), DNNL_MEMORY_ALLOCATE, &dw_int);
	if (!rc)
		rc = plan_mem(be, pl, &m.w, DNNL_MEMORY_NONE, &pl->w_dw);
	if (!rc)
		rc = reorder_create(be, pl, dw_int, pl->w_dw, 1, &pl->dw_acc);
	if (rc)
		goto fail;
	op_arg(op, DNNL_ARG_DIFF_WEIGHTS, dw_int);
	if (d->bias) {
		pl->db_tmp = plan_buf(be, pl, (size_t)d->oc);
		if (!pl->db_tmp) {
			rc = be->err.code;
			goto fail;
		}
		rc = plan_mem(be, pl, &m.b, pl->db_tmp, &db_int);
		if (rc)
			goto fail;
		op_arg(op, DNNL_ARG_DIFF_BIAS, db_int);
	}
fail:
	if (hint)
		dnnl_primitive_desc_destroy(hint);
	if (attr)
		dnnl_primitive_attr_destroy(attr);
	return rc;
}

static int cpu_conv2d_backward(wf_backend *be, wf_plan **plan, const wf_conv_desc *d, float *dx,
			       float *dw, float *db, const float *dy, const float *x,
			       const float *w)
{
	use_threads(be);
	wf_plan *pl = NULL;
	int rc = conv_check(be, d);
	if (!rc)
		rc = plan_get(be, plan, PLAN_CONV, d, sizeof(*d), &pl);
	if (rc)
		return rc;
	if (!(pl->parts & PART_BWD)) {
		rc = conv_build_bwd(be, pl);
		if (rc)
			return plan_drop(plan, rc);
		pl->parts |= PART_BWD;
	}
	if (dx && (rc = bind_run(be, &pl->bwd_d, 3, (dnnl_memory_t[]){pl->d_dy, pl->d_w, pl->d_dx},
				 (const void *[]){dy, w, dx})) != 0)
		return rc;
	if (dw || (db && d->bias)) {
		rc = bind_run(be, &pl->bwd_w, 2, (dnnl_memory_t[]){pl->w_x, pl->w_dy},
			      (const void *[]){x, dy});
		if (!rc && dw) {
			rc = bind(be, pl->w_dw, dw);
			if (!rc)
				rc = op_exec(be, pl->dw_acc);
		}
		if (rc)
			return rc;
		if (db && d->bias)
			wf_cpu_add_into(db, pl->db_tmp, (size_t)d->oc);
	}
	return 0;
}

/* ---- dense (matmul) ---------------------------------------------------------- */

static int dense_check(wf_backend *be, const wf_dense_desc *d)
{
	if (d->n <= 0 || d->in <= 0 || d->out <= 0)
		return wf_errf(&be->err, WF_EINVAL,
			       "cpu dense: bad descriptor n=%d in=%d out=%d (must be > 0)", d->n,
			       d->in, d->out);
	return 0;
}

/* A row-major [rows, cols] matrix, or its transpose when t != 0 (same bytes). */
static int md_mat(wf_backend *be, dnnl_memory_desc_t *md, dnnl_dim_t rows, dnnl_dim_t cols, int t)
{
	dnnl_dims_t dims = {t ? cols : rows, t ? rows : cols};
	dnnl_dims_t st = {t ? 1 : cols, t ? cols : 1};
	return md_strides(be, md, 2, dims, st);
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
	rc = op_create(be, pl, &md, NULL, sum, &seq->prim);
	if (!rc)
		rc = plan_mem(be, pl, src, DNNL_MEMORY_NONE, msrc);
	if (!rc)
		rc = plan_mem(be, pl, wei, DNNL_MEMORY_NONE, mwei);
	if (!rc && bias)
		rc = plan_mem(be, pl, bias, DNNL_MEMORY_NONE, mbias);
	if (!rc)
		rc = plan_mem(be, pl, dst, DNNL_MEMORY_NONE, mdst);
	if (rc)
		goto fail;
	op_arg(seq->prim, DNNL_ARG_SRC, *msrc);
	op_arg(seq->prim, DNNL_ARG_WEIGHTS, *mwei);
	if (bias)
		op_arg(seq->prim, DNNL_ARG_BIAS, *mbias);
	op_arg(seq->prim, DNNL_ARG_DST, *mdst);
fail:
	return rc;
}

static int cpu_dense_forward(wf_backend *be, wf_plan **plan, const wf_dense_desc *d, float *y,
			     const float *x, const float *w, const float *b)
{
	use_threads(be);
	wf_plan *pl = NULL;
	int rc = dense_check(be, d);
	if (!rc)
		rc = plan_get(be, plan, PLAN_DENSE, d, sizeof(*d), &pl);
	if (rc)
		return rc;
	if (!(pl->parts & PART_FWD)) {
		dnnl_memory_desc_t mx, mw, mb, my;
		rc = md_mat(be, &mx, d->n, d->in, 0);
		if (!rc)
			rc = md_mat(be, &mw, d->in, d->out, 0);
		if (!rc)
			rc = md_mat(be, &mb, 1, d->out, 0);
		if (!rc)
			rc = md_mat(be, &my, d->n, d->out, 0);
		if (!rc)
			rc = matmul_build(be, pl, &pl->fwd, &mx, &mw, d->bias ? &mb : NULL, &my, 0,
					  &pl->f_x, &pl->f_w, &pl->f_b, &pl->f_y);
		if (rc)
			return plan_drop(plan, rc);
		pl->parts |= PART_FWD;
	}
	return bind_run(be, &pl->fwd, 4,
			(dnnl_memory_t[]){pl->f_x, pl->f_w, d->bias ? pl->f_b : NULL, pl->f_y},
			(const void *[]){x, w, b, y});
}

static int dense_build_bwd(wf_backend *be, wf_plan *pl)
{
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

static int cpu_dense_backward(wf_backend *be, wf_plan **plan, const wf_dense_desc *d, float *dx,
			      float *dw, float *db, const float *dy, const float *x, const float *w)
{
	use_threads(be);
	wf_plan *pl = NULL;
	int rc = dense_check(be, d);
	if (!rc)
		rc = plan_get(be, plan, PLAN_DENSE, d, sizeof(*d), &pl);
	if (rc)
		return rc;
	if (!(pl->parts & PART_BWD)) {
		rc = dense_build_bwd(be, pl);
		if (rc)
			return plan_drop(plan, rc);
		pl->parts |= PART_BWD;
	}
	if (dx && (rc = bind_run(be, &pl->bwd_d, 3, (dnnl_memory_t[]){pl->d_dy, pl->d_w, pl->d_dx},
				 (const void *[]){dy, w, dx})) != 0)
		return rc;
	if (dw && (rc = bind_run(be, &pl->bwd_w, 3, (dnnl_memory_t[]){pl->w_x, pl->w_dy, pl->w_dw},
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

/* ---- batch norm ----------------------------------------------------------------- */

static int bn_check(wf_backend *be, const wf_bn_desc *d)
{
	if (d->n <= 0 || d->h <= 0 || d->w <= 0 || d->c <= 0 || !(d->eps >= 0.0f) ||
	    !(d->momentum >= 0.0f && d->momentum <= 1.0f))
		return wf_errf(&be->err, WF_EINVAL,
			       "cpu batchnorm: bad descriptor [%d,%d,%d,%d] eps=%g momentum=%g "
			       "(sizes > 0, eps >= 0, momentum in [0, 1])",
			       d->n, d->h, d->w, d->c, (double)d->eps, (double)d->momentum);
	return 0;
}

/* Constant gamma = 1 / beta = 0 for callers without scale or center. */
static int bn_consts(wf_backend *be, wf_plan *pl)
{
	if (pl->bn_ones)
		return 0;
	pl->bn_zeros = plan_buf(be, pl, (size_t)pl->d.bn.c);
	pl->bn_ones = pl->bn_zeros ? plan_buf(be, pl, (size_t)pl->d.bn.c) : NULL;
	if (!pl->bn_ones)
		return be->err.code;
	for (int ch = 0; ch < pl->d.bn.c; ch++)
		pl->bn_ones[ch] = 1.0f;
	return 0;
}

/* flags: dnnl_use_scale|dnnl_use_shift (+ dnnl_use_global_stats for inference). */
static int bn_fwd_desc(wf_backend *be, const wf_bn_desc *d, int training,
		       dnnl_batch_normalization_desc_t *bd, dnnl_memory_desc_t *x)
{
	int rc = md_nhwc(be, x, d->n, d->h, d->w, d->c);
	if (rc)
		return rc;
	unsigned flags = dnnl_use_scale | dnnl_use_shift;
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
	const wf_bn_desc *d = &pl->d.bn;
	dnnl_batch_normalization_desc_t bd;
	dnnl_memory_desc_t x, c;
	dn_seq *seq = training ? &pl->fwd : &pl->inf;
	dnnl_memory_t *mx = training ? &pl->f_x : &pl->i_x, *my = training ? &pl->f_y : &pl->i_y;
	dnnl_memory_t *mg = training ? &pl->f_w : &pl->i_g, *mb = training ? &pl->f_b : &pl->i_b;
	dnnl_memory_t *mm = training ? &pl->f_m : &pl->i_m, *mv = training ? &pl->f_v : &pl->i_v;
	int rc = bn_fwd_desc(be, d, training, &bd, &x);
	if (!rc)
		rc = md_vec(be, &c, d->c);
	if (!rc)
		rc = op_create(be, pl, &bd, NULL, 0, &seq->prim);
	if (!rc)
		rc = plan_mem(be, pl, &x, DNNL_MEMORY_NONE, mx);
	if (!rc)
		rc = plan_mem(be, pl, &x, DNNL_MEMORY_NONE, my);
	if (!rc)
		rc = plan_mem(be, pl, &c, DNNL_MEMORY_NONE, mg);
	if (!rc)
		rc = plan_mem(be, pl, &c, DNNL_MEMORY_NONE, mb);
	if (!rc)
		rc = plan_mem(be, pl, &c, DNNL_MEMORY_NONE, mm);
	if (!rc && training) {
		pl->bn_var = plan_buf(be, pl, (size_t)d->c);
		rc = pl->bn_var ? plan_mem(be, pl, &c, pl->bn_var, mv) : be->err.code;
		if (!rc)
			pl->bn_mean = plan_buf(be, pl, (size_t)d->c);
		if (!rc && !pl->bn_mean)
			rc = be->err.code;
	} else if (!rc) {
		rc = plan_mem(be, pl, &c, DNNL_MEMORY_NONE, mv);
	}
	if (rc)
		return rc;
	dn_op *op = seq->prim;
	op_arg(op, DNNL_ARG_SRC, *mx);
	op_arg(op, DNNL_ARG_DST, *my);
	op_arg(op, DNNL_ARG_SCALE, *mg);
	op_arg(op, DNNL_ARG_SHIFT, *mb);
	op_arg(op, DNNL_ARG_MEAN, *mm);
	op_arg(op, DNNL_ARG_VARIANCE, *mv);
	return 0;
}

static int cpu_batchnorm_forward(wf_backend *be, wf_plan **plan, const wf_bn_desc *d, int training,
				 float *y, float *save_mean, float *save_invstd, const float *x,
				 const float *gamma, const float *beta, float *run_mean,
				 float *run_var)
{
	use_threads(be);
	wf_plan *pl = NULL;
	int rc = bn_check(be, d);
	if (!rc)
		rc = plan_get(be, plan, PLAN_BN, d, sizeof(*d), &pl);
	if (rc)
		return rc;
	unsigned part = training ? PART_FWD : PART_FWD_INFER;
	if (!(pl->parts & part)) {
		rc = bn_consts(be, pl);
		if (!rc)
			rc = bn_build_fwd(be, pl, training);
		if (rc)
			return plan_drop(plan, rc);
		pl->parts |= part;
	}
	if (!training) {
		return bind_run(
			be, &pl->inf, 6,
			(dnnl_memory_t[]){pl->i_x, pl->i_y, pl->i_g, pl->i_b, pl->i_m, pl->i_v},
			(const void *[]){x, y, gamma ? gamma : pl->bn_ones,
					 beta ? beta : pl->bn_zeros, run_mean, run_var});
	}
	float *mean = save_mean ? save_mean : pl->bn_mean;
	rc = bind_run(be, &pl->fwd, 5,
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

static int bn_build_bwd(wf_backend *be, wf_plan *pl)
{
	const wf_bn_desc *d = &pl->d.bn;
	dnnl_batch_normalization_desc_t fd, bd;
	dnnl_primitive_desc_t hint = NULL;
	dnnl_primitive_attr_t attr = NULL;
	dnnl_memory_desc_t x, c;
	dnnl_memory_t dg, dbeta, shift;
	int rc = bn_fwd_desc(be, d, 1, &fd, &x);
	if (!rc)
		rc = md_vec(be, &c, d->c);
	if (!rc)
		rc = make_attr(be, 0, &attr);
	if (rc)
		goto fail;
	DN_CHECK(dnnl_primitive_desc_create(&hint, &fd, attr, ctx_of(be)->eng, NULL), fail);
	DN_CHECK(dnnl_batch_normalization_backward_desc_init(&bd, dnnl_backward, &x, &x, d->eps,
							     dnnl_use_scale | dnnl_use_shift),
		 fail);
	rc = op_create(be, pl, &bd, hint, 0, &pl->bwd_d.prim);
	if (rc)
		goto fail;
	pl->bn_bvar = plan_buf(be, pl, (size_t)d->c);
	pl->db_tmp = plan_buf(be, pl, (size_t)d->c);
	pl->dg_tmp = plan_buf(be, pl, (size_t)d->c);
	if (!pl->bn_bvar || !pl->db_tmp || !pl->dg_tmp) {
		rc = be->err.code;
		goto fail;
	}
	rc = plan_mem(be, pl, &x, DNNL_MEMORY_NONE, &pl->d_x);
	if (!rc)
		rc = plan_mem(be, pl, &x, DNNL_MEMORY_NONE, &pl->d_dy);
	if (!rc)
		rc = plan_mem(be, pl, &x, DNNL_MEMORY_NONE, &pl->d_dx);
	if (!rc)
		rc = plan_mem(be, pl, &c, DNNL_MEMORY_NONE, &pl->d_m);
	if (!rc)
		rc = plan_mem(be, pl, &c, pl->bn_bvar, &pl->d_v);
	if (!rc)
		rc = plan_mem(be, pl, &c, DNNL_MEMORY_NONE, &pl->d_g);
	if (!rc)
		rc = plan_mem(be, pl, &c, pl->dg_tmp, &dg);
	if (!rc)
		rc = plan_mem(be, pl, &c, pl->db_tmp, &dbeta);
	if (!rc) /* with use_shift oneDNN asks for the shift, though no gradient reads it */
		rc = plan_mem(be, pl, &c, pl->bn_zeros, &shift);
	if (rc)
		goto fail;
	dn_op *op = pl->bwd_d.prim;
	op_arg(op, DNNL_ARG_SRC, pl->d_x);
	op_arg(op, DNNL_ARG_MEAN, pl->d_m);
	op_arg(op, DNNL_ARG_VARIANCE, pl->d_v);
	op_arg(op, DNNL_ARG_DIFF_DST, pl->d_dy);
	op_arg(op, DNNL_ARG_SCALE, pl->d_g);
	op_arg(op, DNNL_ARG_SHIFT, shift);
	op_arg(op, DNNL_ARG_DIFF_SRC, pl->d_dx);
	op_arg(op, DNNL_ARG_DIFF_SCALE, dg);
	op_arg(op, DNNL_ARG_DIFF_SHIFT, dbeta);
fail:
	if (hint)
		dnnl_primitive_desc_destroy(hint);
	if (attr)
		dnnl_primitive_attr_destroy(attr);
	return rc;
}

static int cpu_batchnorm_backward(wf_backend *be, wf_plan **plan, const wf_bn_desc *d, float *dx,
				  float *dgamma, float *dbeta, const float *dy, const float *x,
				  const float *gamma, const float *save_mean,
				  const float *save_invstd)
{
	use_threads(be);
	wf_plan *pl = NULL;
	int rc = bn_check(be, d);
	if (!rc)
		rc = plan_get(be, plan, PLAN_BN, d, sizeof(*d), &pl);
	if (rc)
		return rc;
	if (!(pl->parts & PART_BWD)) {
		rc = bn_consts(be, pl);
		if (!rc)
			rc = bn_build_bwd(be, pl);
		if (rc)
			return plan_drop(plan, rc);
		pl->parts |= PART_BWD;
	}
	if (!dx && !pl->dx_tmp) {
		/* oneDNN always writes diff_src: a scratch target, once per plan */
		pl->dx_tmp = plan_buf(be, pl, (size_t)d->n * d->h * d->w * d->c);
		if (!pl->dx_tmp)
			return be->err.code;
	}
	/* oneDNN wants the variance; recover it from the saved 1/sqrt(var + eps) */
	for (int ch = 0; ch < d->c; ch++)
		pl->bn_bvar[ch] = 1.0f / (save_invstd[ch] * save_invstd[ch]) - d->eps;
	rc = bind_run(be, &pl->bwd_d, 5,
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

/* ---- pooling -------------------------------------------------------------------------- */

static int pool_check(wf_backend *be, const wf_pool_desc *d)
{
	if (d->n <= 0 || d->h <= 0 || d->w <= 0 || d->c <= 0 || d->kh <= 0 || d->kw <= 0 ||
	    d->sh <= 0 || d->sw <= 0 || (d->kind != WF_POOL_MAX && d->kind != WF_POOL_AVG))
		return wf_errf(&be->err, WF_EINVAL,
			       "cpu pool: bad descriptor (kind=%d n=%d h=%d w=%d c=%d k=%dx%d "
			       "s=%dx%d)",
			       (int)d->kind, d->n, d->h, d->w, d->c, d->kh, d->kw, d->sh, d->sw);
	int oh = (d->h + d->pt + d->pb - d->kh) / d->sh + 1;
	int ow = (d->w + d->pl + d->pr - d->kw) / d->sw + 1;
	if (d->pt < 0 || d->pb < 0 || d->pl < 0 || d->pr < 0 || oh != d->oh || ow != d->ow ||
	    oh <= 0 || ow <= 0)
		return wf_errf(&be->err, WF_EINVAL,
			       "cpu pool: output %dx%d does not match input %dx%d, window %dx%d, "
			       "padding t%d b%d l%d r%d (expected %dx%d)",
			       d->oh, d->ow, d->h, d->w, d->kh, d->kw, d->pt, d->pb, d->pl, d->pr,
			       oh, ow);
	return 0;
}

static int pool_fwd_desc(wf_backend *be, const wf_pool_desc *d, dnnl_prop_kind_t prop,
			 dnnl_pooling_desc_t *pd, dnnl_memory_desc_t *x, dnnl_memory_desc_t *y)
{
	int rc = md_nhwc(be, x, d->n, d->h, d->w, d->c);
	if (!rc)
		rc = md_nhwc(be, y, d->n, d->oh, d->ow, d->c);
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

static int cpu_pool_forward(wf_backend *be, wf_plan **plan, const wf_pool_desc *d, float *y,
			    const float *x)
{
	use_threads(be);
	wf_plan *pl = NULL;
	int rc = pool_check(be, d);
	if (!rc)
		rc = plan_get(be, plan, PLAN_POOL, d, sizeof(*d), &pl);
	if (rc)
		return rc;
	if (!(pl->parts & PART_FWD)) {
		dnnl_pooling_desc_t pd;
		dnnl_memory_desc_t mx, my;
		rc = pool_fwd_desc(be, d, dnnl_forward_inference, &pd, &mx, &my);
		if (!rc)
			rc = op_create(be, pl, &pd, NULL, 0, &pl->fwd.prim);
		if (!rc)
			rc = plan_mem(be, pl, &mx, DNNL_MEMORY_NONE, &pl->f_x);
		if (!rc)
			rc = plan_mem(be, pl, &my, DNNL_MEMORY_NONE, &pl->f_y);
		if (rc)
			return plan_drop(plan, rc);
		op_arg(pl->fwd.prim, DNNL_ARG_SRC, pl->f_x);
		op_arg(pl->fwd.prim, DNNL_ARG_DST, pl->f_y);
		pl->parts |= PART_FWD;
	}
	return bind_run(be, &pl->fwd, 2, (dnnl_memory_t[]){pl->f_x, pl->f_y},
			(const void *[]){x, y});
}

/* Max pooling backward needs the forward's workspace (where each max came
 * from); the forward may have run on other data since, so the backward part
 * recomputes it: a training forward into plan scratch, then the backward. */
static int pool_build_bwd(wf_backend *be, wf_plan *pl)
{
	const wf_pool_desc *d = &pl->d.pool;
	dnnl_pooling_desc_t fd, bd;
	dnnl_memory_desc_t mx, my;
	dnnl_memory_t ws = NULL, ytmp;
	int max = d->kind == WF_POOL_MAX;
	int rc = pool_fwd_desc(be, d, dnnl_forward_training, &fd, &mx, &my);
	if (rc)
		return rc;
	rc = op_create(be, pl, &fd, NULL, 0, &pl->pool_ws_fwd);
	if (rc)
		return rc;
	dn_op *f = pl->pool_ws_fwd;
	dnnl_dims_t st = {d->sh, d->sw}, k = {d->kh, d->kw};
	dnnl_dims_t pad_l = {d->pt, d->pl}, pad_r = {d->pb, d->pr};
	dnnl_alg_kind_t alg = max ? dnnl_pooling_max : dnnl_pooling_avg_exclude_padding;
	DN_CHECK(dnnl_pooling_backward_desc_init(&bd, alg, &mx, &my, st, k, pad_l, pad_r), fail);
	rc = op_create(be, pl, &bd, f->pd, 0, &pl->bwd_d.prim);
	if (!rc)
		rc = plan_mem(be, pl, &mx, DNNL_MEMORY_NONE, &pl->d_dx);
	if (!rc)
		rc = plan_mem(be, pl, &my, DNNL_MEMORY_NONE, &pl->d_dy);
	if (rc)
		return rc;
	dn_op *b = pl->bwd_d.prim;
	op_arg(b, DNNL_ARG_DIFF_DST, pl->d_dy);
	op_arg(b, DNNL_ARG_DIFF_SRC, pl->d_dx);
	if (max) {
		rc = plan_mem(be, pl, pd_md(f, dnnl_query_workspace_md), DNNL_MEMORY_ALLOCATE, &ws);
		if (!rc)
			rc = plan_mem(be, pl, &my, DNNL_MEMORY_ALLOCATE, &ytmp);
		if (!rc)
			rc = plan_mem(be, pl, &mx, DNNL_MEMORY_NONE, &pl->p_x);
		if (rc)
			return rc;
		op_arg(f, DNNL_ARG_SRC, pl->p_x);
		op_arg(f, DNNL_ARG_DST, ytmp);
		op_arg(f, DNNL_ARG_WORKSPACE, ws);
		op_arg(b, DNNL_ARG_WORKSPACE, ws);
		pl->bwd_d.pre[pl->bwd_d.npre++] = f;
	}
fail:
	return rc;
}

static int cpu_pool_backward(wf_backend *be, wf_plan **plan, const wf_pool_desc *d, float *dx,
			     const float *dy, const float *x, const float *y)
{
	use_threads(be);
	wf_plan *pl = NULL;
	int rc = pool_check(be, d);
	if (!rc)
		rc = plan_get(be, plan, PLAN_POOL, d, sizeof(*d), &pl);
	if (rc)
		return rc;
	if (!(pl->parts & PART_BWD)) {
		rc = pool_build_bwd(be, pl);
		if (rc)
			return plan_drop(plan, rc);
		pl->parts |= PART_BWD;
	}
	if (!dx)
		return 0;
	return bind_run(
		be, &pl->bwd_d, 3,
		(dnnl_memory_t[]){d->kind == WF_POOL_MAX ? pl->p_x : NULL, pl->d_dy, pl->d_dx},
		(const void *[]){x, dy, dx});
}

/* ---- the backend ------------------------------------------------------------------------ */

static void cpu_destroy(wf_backend *be)
{
	cpu_ctx *c = ctx_of(be);
	if (!c)
		return;
	if (c->stream)
		dnnl_stream_destroy(c->stream);
	if (c->eng)
		dnnl_engine_destroy(c->eng);
	free(c);
	be->ctx = NULL;
}

/* The memory-bound ops of cpu_loops.c run OpenMP loops: each slot sets the
 * calling thread's thread count first (use_threads), then runs the loop. */
#define THREADED(op, params, args)                                                                 \
	static int threaded_##op params                                                            \
	{                                                                                          \
		use_threads(be);                                                                   \
		return wf_cpu_##op args;                                                           \
	}
THREADED(act_forward, (wf_backend * be, wf_act_kind kind, size_t n, float *y, const float *x),
	 (be, kind, n, y, x))
THREADED(act_backward,
	 (wf_backend * be, wf_act_kind kind, size_t n, float *dx, const float *dy, const float *y),
	 (be, kind, n, dx, dy, y))
THREADED(add, (wf_backend * be, size_t n, float *y, const float *a, const float *b),
	 (be, n, y, a, b))
THREADED(accumulate, (wf_backend * be, size_t n, float *y, const float *x), (be, n, y, x))
THREADED(scale, (wf_backend * be, size_t n, float *y, const float *x, float alpha),
	 (be, n, y, x, alpha))
THREADED(concat_forward,
	 (wf_backend * be, size_t rows, int k, const int *widths, float *y, const float *const *xs),
	 (be, rows, k, widths, y, xs))
THREADED(concat_backward,
	 (wf_backend * be, size_t rows, int k, const int *widths, float *const *dxs,
	  const float *dy),
	 (be, rows, k, widths, dxs, dy))
THREADED(gap_forward, (wf_backend * be, int n, int hw, int c, float *y, const float *x),
	 (be, n, hw, c, y, x))
THREADED(gap_backward, (wf_backend * be, int n, int hw, int c, float *dx, const float *dy),
	 (be, n, hw, c, dx, dy))
THREADED(pad_forward, (wf_backend * be, const wf_pad_desc *d, float *y, const float *x),
	 (be, d, y, x))
THREADED(pad_backward, (wf_backend * be, const wf_pad_desc *d, float *dx, const float *dy),
	 (be, d, dx, dy))
THREADED(dropout_forward,
	 (wf_backend * be, size_t n, float rate, uint64_t seed, float *y, uint8_t *mask,
	  const float *x),
	 (be, n, rate, seed, y, mask, x))
THREADED(dropout_backward,
	 (wf_backend * be, size_t n, float rate, float *dx, const float *dy, const uint8_t *mask),
	 (be, n, rate, dx, dy, mask))
THREADED(softmax_xent_forward,
	 (wf_backend * be, int n, int k, float *probs, float *losses, const float *logits,
	  const int32_t *labels),
	 (be, n, k, probs, losses, logits, labels))
THREADED(softmax_xent_backward,
	 (wf_backend * be, int n, int k, float *dlogits, const float *probs, const int32_t *labels,
	  float scale),
	 (be, n, k, dlogits, probs, labels, scale))
THREADED(optimizer_update,
	 (wf_backend * be, const wf_opt_desc *d, size_t n, float *p, const float *g, float *m,
	  float *v),
	 (be, d, n, p, g, m, v))
#undef THREADED

static const wf_backend_ops cpu_ops = {
	.alloc = wf_cpu_alloc,
	.free = wf_cpu_free,
	.to_device = wf_cpu_copy_in,
	.to_host = wf_cpu_copy_in,
	.zero = wf_cpu_zero,
	.copy = wf_cpu_copy_in,
	.sync = wf_cpu_sync,
	.plan_free = cpu_plan_free,
	.destroy = cpu_destroy,
	.conv2d_forward = cpu_conv2d_forward,
	.conv2d_forward_fused = cpu_conv2d_forward_fused,
	.conv2d_backward = cpu_conv2d_backward,
	.dense_forward = cpu_dense_forward,
	.dense_backward = cpu_dense_backward,
	.batchnorm_forward = cpu_batchnorm_forward,
	.batchnorm_backward = cpu_batchnorm_backward,
	.act_forward = threaded_act_forward,
	.act_backward = threaded_act_backward,
	.add = threaded_add,
	.accumulate = threaded_accumulate,
	.scale = threaded_scale,
	.concat_forward = threaded_concat_forward,
	.concat_backward = threaded_concat_backward,
	.pool_forward = cpu_pool_forward,
	.pool_backward = cpu_pool_backward,
	.gap_forward = threaded_gap_forward,
	.gap_backward = threaded_gap_backward,
	.pad_forward = threaded_pad_forward,
	.pad_backward = threaded_pad_backward,
	.dropout_forward = threaded_dropout_forward,
	.dropout_backward = threaded_dropout_backward,
	.softmax_xent_forward = threaded_softmax_xent_forward,
	.softmax_xent_backward = threaded_softmax_xent_backward,
	.optimizer_update = threaded_optimizer_update,
};

int wf_backend_cpu_init(wf_backend *be, wf_err *err)
{
	int rc = 0;
	cpu_ctx *c = calloc(1, sizeof(*c));
	if (!c)
		return wf_errf(err, WF_ENOMEM, "cpu: out of memory creating the backend");
	be->name = "cpu";
	be->ops = &cpu_ops;
	be->ctx = c;
	if (be->threads > 0)
		omp_set_num_threads(be->threads);
	DN_CHECK(dnnl_engine_create(&c->eng, dnnl_cpu, 0), fail);
	DN_CHECK(dnnl_stream_create(&c->stream, c->eng, dnnl_stream_default_flags), fail);
	if (cpu_has_bf16())
		be->caps |= WF_CAP_BF16;
	return 0;
fail:
	if (err)
		*err = be->err;
	cpu_destroy(be);
	be->ops = NULL;
	return rc;
}
