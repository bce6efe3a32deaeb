/* cpu_priv.h: what the files of the cpu backend share (private to
 * kernels/cpu/): the context, the plan and its primitive sequences, the
 * oneDNN check macro, and the plan plumbing of cpu_plan.c. The op families
 * (cpu_conv.c, cpu_dense.c, cpu_bn.c, cpu_pool.c) build their parts of a plan
 * with these; cpu.c puts everything into the op table. */
#ifndef WF_CPU_PRIV_H
#define WF_CPU_PRIV_H

#include "kernels/kernels.h"

#include <oneapi/dnnl/dnnl.h>
#include <omp.h>

typedef struct cpu_ctx {
	dnnl_engine_t eng;
	dnnl_stream_t stream;
} cpu_ctx;

/* Check a dnnl_status_t: on failure record file, line and the status name in
 * be->err, set rc and jump to `label`. */
#define DN_CHECK(call, label)                                                                      \
	do {                                                                                       \
		dnnl_status_t s_ = (call);                                                         \
		if (s_ != dnnl_success) {                                                          \
			rc = wf_cpu_dnnl_fail(be, s_, #call, __FILE__, __LINE__);                  \
			goto label;                                                                \
		}                                                                                  \
	} while (0)

/* ---- threads ------------------------------------------------------------- */

/* OpenMP's thread count (nthreads-var) belongs to each calling thread, and
 * oneDNN's OpenMP runtime sizes its parallel regions from it. A backend may be
 * created in one thread and used in others (weft-serve loads a model in its
 * repository thread and runs forwards in its batch threads), so every op that
 * runs a parallel region or a primitive first makes the calling thread's count
 * be->threads (1 inside the branches slot's parallel region: an op then
 * runs on its calling thread alone, as oneDNN does inside a parallel region).
 * Reading the count is cheap; it is set only on a change. */
static inline void use_threads(const wf_backend *be)
{
	int want = omp_in_parallel() ? 1 : be->threads; /* inside branches: alone */
	if (want > 0 && omp_get_max_threads() != want)
		omp_set_num_threads(want);
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
	float *bn_var;	     /* [C] batch variance from oneDNN (training) */
	dnnl_memory_t bn_ws; /* the fused relu's mask: training forward -> backward */
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
	/* bf16 training: backward weights reads the forward's bf16 copy of x and
	 * backward data's bf16 copy of dy instead of converting both again; the
	 * redo reorders refill them when that copy is not of this call's x / dy
	 * (x16_of: the x the forward last converted; NULL: none). */
	dnnl_memory_t f_x16, d_dy16;
	const void *x16_of;
	dn_op *x16_redo, *dy16_redo;
	/* pooling backward: the recomputed forward's input */
	dnnl_memory_t p_x;
	dn_op *pool_ws_fwd;
	/* inference (desc infer = 1): weights reordered once, on the first call */
	dn_op *w_once;
	int w_done;
	dnnl_memory_t f_r; /* fused residual (binary add post-op source) */
	int bf16;	   /* built for bf16 compute (be->bf16 when created) */
	int mm;		   /* conv backward as two matmuls (cpu_conv.c conv_is_mm) */
};

static inline cpu_ctx *ctx_of(wf_backend *be)
{
	return (cpu_ctx *)be->ctx;
}

/* ---- cpu_plan.c ------------------------------------------------------------ */

/* Record a failed oneDNN call (its name, file, line, status) in be->err; returns the WF_E* code. */
int wf_cpu_dnnl_fail(wf_backend *be, dnnl_status_t s, const char *call, const char *file, int line);
/* The plan_free slot: releases every primitive, memory and buffer of pl. */
void wf_cpu_plan_free(wf_backend *be, wf_plan *pl);
/* The plan in *slot for (kind, desc): reused when both match, else a fresh one replaces it. */
int wf_cpu_plan_get(wf_backend *be, wf_plan **slot, int kind, const void *desc, size_t size,
		    wf_plan **out);
/* A part failed half-built: drop the whole plan (*slot = NULL); returns rc. */
int wf_cpu_plan_drop(wf_plan **slot, int rc);
/* Builds one part of a plan (PART_FWD, ...); arg is the op's own switch. */
typedef int (*wf_cpu_part_build)(wf_backend *be, wf_plan *pl, int arg);
/* The plan for (kind, desc) in *slot (wf_cpu_plan_get) with `part` built:
 * build(be, pl, arg) runs the first time; when it fails the plan is
 * dropped. */
int wf_cpu_plan_part(wf_backend *be, wf_plan **slot, int kind, const void *desc, size_t size,
		     unsigned part, wf_cpu_part_build build, int arg, wf_plan **out);
/* nfloats zeroed host floats owned by the plan; NULL (be->err set) on failure. */
float *wf_cpu_plan_buf(wf_backend *be, wf_plan *pl, size_t nfloats);
/* A memory object owned by the plan (handle: DNNL_MEMORY_NONE, DNNL_MEMORY_ALLOCATE or a pointer).
 */
int wf_cpu_plan_mem(wf_backend *be, wf_plan *pl, const dnnl_memory_desc_t *md, void *handle,
		    dnnl_memory_t *out);
/* The next free primitive slot of the plan; NULL (be->err set) when full. */
dn_op *wf_cpu_plan_op(wf_backend *be, wf_plan *pl);
/* Append one execution argument to op. */
void wf_cpu_op_arg(dn_op *op, int arg, dnnl_memory_t mem);
/* Finish an op whose pd is set: create the primitive and its scratchpad. */
int wf_cpu_op_finish(wf_backend *be, dn_op *op);
/* Attributes: a user scratchpad and, when sum != 0, an accumulating sum post-op. */
int wf_cpu_make_attr(wf_backend *be, int sum, dnnl_primitive_attr_t *attr);
/* A compute op from an op descriptor with attributes `given` (NULL: make_attr(sum)). */
int wf_cpu_op_create_attr(wf_backend *be, wf_plan *pl, const void *op_desc,
			  const_dnnl_primitive_desc_t hint, int sum,
			  const_dnnl_primitive_attr_t given, dn_op **out);
/* The same, with the first implementation whose name does not contain avoid
 * (NULL: oneDNN's first), or oneDNN's first when all do. */
int wf_cpu_op_create_avoiding(wf_backend *be, wf_plan *pl, const void *op_desc,
			      const_dnnl_primitive_desc_t hint, int sum,
			      const_dnnl_primitive_attr_t given, const char *avoid, dn_op **out);
/* wf_cpu_op_create_attr with the default attributes. */
int wf_cpu_op_create(wf_backend *be, wf_plan *pl, const void *op_desc,
		     const_dnnl_primitive_desc_t hint, int sum, dn_op **out);
/* A reorder dst = src * scales: n scales over the dims in mask (n = 1, mask
 * 0: one for all). */
int wf_cpu_reorder_scaled(wf_backend *be, wf_plan *pl, dnnl_memory_t src, dnnl_memory_t dst, int n,
			  int mask, const float *scales, dn_op **out);
/* A reorder src -> dst (dst += reorder(src) when sum != 0). */
int wf_cpu_reorder_create(wf_backend *be, wf_plan *pl, dnnl_memory_t src, dnnl_memory_t dst,
			  int sum, dn_op **out);
/* Caller buffer as input of seq->prim (a reorder into the wanted layout when it differs). */
int wf_cpu_bind_in(wf_backend *be, wf_plan *pl, dn_seq *seq, const dnnl_memory_desc_t *user_md,
		   const dnnl_memory_desc_t *want, dnnl_memory_t *user, dnnl_memory_t *prim_mem);
/* Caller buffer as output of seq->prim; mirror of wf_cpu_bind_in. */
int wf_cpu_bind_out(wf_backend *be, wf_plan *pl, dn_seq *seq, const dnnl_memory_desc_t *user_md,
		    const dnnl_memory_desc_t *have, dnnl_memory_t *user, dnnl_memory_t *prim_mem);
/* Run one primitive on the backend's stream. */
int wf_cpu_op_exec(wf_backend *be, dn_op *op);
/* Run reorders in, the primitive, reorders out, then wait for the stream. */
int wf_cpu_seq_exec(wf_backend *be, const dn_seq *seq);
/* Bind a caller buffer to a plan memory (inputs are never written). */
int wf_cpu_bind(wf_backend *be, dnnl_memory_t mem, const void *p);
/* Bind ptrs[i] to mems[i] (NULL memories skipped), then run seq. */
int wf_cpu_bind_run(wf_backend *be, dn_seq *seq, int n, const dnnl_memory_t *mems,
		    const void *const *ptrs);
/* The memory descriptor `what` of op's primitive descriptor. */
const dnnl_memory_desc_t *wf_cpu_pd_md(const dn_op *op, dnnl_query_t what);
/* Memory descriptors of weft's layouts (f32 unless a data type is given). */
int wf_cpu_md_tag_dt(wf_backend *be, dnnl_memory_desc_t *md, int nd, const dnnl_dims_t dims,
		     dnnl_data_type_t dt, dnnl_format_tag_t tag);
int wf_cpu_md_tag(wf_backend *be, dnnl_memory_desc_t *md, int nd, const dnnl_dims_t dims,
		  dnnl_format_tag_t tag);
int wf_cpu_md_strides(wf_backend *be, dnnl_memory_desc_t *md, int nd, const dnnl_dims_t dims,
		      const dnnl_dims_t strides);
int wf_cpu_md_nhwc(wf_backend *be, dnnl_memory_desc_t *md, int n, int h, int w, int c);
/* A row-major [rows, cols] matrix of type dt, or its transpose (t != 0: the
 * same bytes seen as [cols, rows]). */
int wf_cpu_md_mat(wf_backend *be, dnnl_memory_desc_t *md, dnnl_dim_t rows, dnnl_dim_t cols, int t,
		  dnnl_data_type_t dt);
int wf_cpu_md_vec(wf_backend *be, dnnl_memory_desc_t *md, int c);
int wf_cpu_md_hwio(wf_backend *be, dnnl_memory_desc_t *md, const wf_conv_desc *d);
int wf_cpu_md_any_like(wf_backend *be, dnnl_memory_desc_t *md, const dnnl_memory_desc_t *like);
int wf_cpu_md_bf16_nhwc(wf_backend *be, dnnl_memory_desc_t *md, const dnnl_memory_desc_t *like);
/* Does oneDNN on this CPU run bf16 natively (AVX512_BF16 or AMX)? */
int wf_cpu_has_bf16(void);
int wf_cpu_has_vnni(void);

/* ---- the op families ------------------------------------------------------- */

int wf_cpu_conv2d_forward(wf_backend *be, wf_plan **plan, const wf_conv_desc *d, float *y,
			  const float *x, const float *w, const float *b);
int wf_cpu_conv2d_forward_fused(wf_backend *be, wf_plan **plan, const wf_conv_desc *d, float *y,
				const float *x, const float *w, const float *b, const float *r);
int wf_cpu_conv2d_backward(wf_backend *be, wf_plan **plan, const wf_conv_desc *d, float *dx,
			   float *dw, float *db, const float *dy, const float *x, const float *w);
int wf_cpu_dense_forward(wf_backend *be, wf_plan **plan, const wf_dense_desc *d, float *y,
			 const float *x, const float *w, const float *b);
int wf_cpu_dense_backward(wf_backend *be, wf_plan **plan, const wf_dense_desc *d, float *dx,
			  float *dw, float *db, const float *dy, const float *x, const float *w);
int wf_cpu_batchnorm_forward(wf_backend *be, wf_plan **plan, const wf_bn_desc *d, int training,
			     float *y, float *save_mean, float *save_invstd, const float *x,
			     const float *gamma, const float *beta, float *run_mean,
			     float *run_var);
int wf_cpu_batchnorm_backward(wf_backend *be, wf_plan **plan, const wf_bn_desc *d, float *dx,
			      float *dgamma, float *dbeta, const float *dy, const float *x,
			      const float *gamma, const float *save_mean, const float *save_invstd);
int wf_cpu_pool_forward(wf_backend *be, wf_plan **plan, const wf_pool_desc *d, float *y,
			const float *x);
int wf_cpu_pool_backward(wf_backend *be, wf_plan **plan, const wf_pool_desc *d, float *dx,
			 const float *dy, const float *x, const float *y);

#endif
