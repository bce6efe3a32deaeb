/* exec_priv.h: the executor's state, shared by its files (not part of the
 * public API): exec.c (create, free, the buffers), exec_plan.c (memory),
 * exec_fuse.c (fusion plans), exec_int8.c (the int8 plan), exec_run.c
 * (forward, loss, backward), exec_branch.c (branches of an inference forward
 * run at once) and exec_tile.c (a large batch as tiles). */
#ifndef WF_EXEC_PRIV_H
#define WF_EXEC_PRIV_H

#include "model/model.h"
#include "kernels/kernels.h"

typedef struct wf_branches wf_branches;

#define WF_TILE_TRIES 3	 /* pairs of forwards the tiles' trial times (exec_tile.c) */
#define WF_EXEC_ALIGN 64 /* bytes: every planned block starts at a multiple */
/* Offsets are planned first and stored in the pointer arrays; this turns
 * them into pointers once the arena exists. */
#define WF_EXEC_REBASE(ptr, base) ((ptr) = (void *)((char *)(base) + (uintptr_t)(ptr)))
#define WF_EXEC_OFFSET(x)	  ((void *)(uintptr_t)(x))

struct wf_exec {
	wf_model *m;
	wf_backend *be;
	int max_batch;
	int training;			  /* built with gradient memory */
	int host;			  /* params/state are m->params/m->state */
	float *params, *grads, *state;	  /* backend [nparams] / [nparams] / [nstate] */
	void *arena, *garena;		  /* backend: activations; activation gradients */
	size_t bytes;			  /* backend memory of the buffers above */
	size_t abytes;			  /* ... of which the activation arena */
	float **act;			  /* [nlayers] output now (aliases set per forward) */
	float **own;			  /* [nlayers] own output memory, NULL for aliases */
	float **dact;			  /* [nlayers] output gradient (training) */
	float *scratch;			  /* [max_batch * largest output] (training) */
	float **save_mean, **save_invstd; /* [nlayers] batch norm [C] (training) */
	uint8_t **mask;			  /* [nlayers] dropout masks (training) */
	wf_plan **plans;		  /* [nlayers]: one slot per layer, forward and backward */
	/* [nlayers] a training executor's inference-mode forwards (evaluation):
	 * their own slots, so evaluating (a partial last batch, batch norms in
	 * inference mode) never replaces a training plan; NULL otherwise */
	wf_plan **eval_plans;
	char *need_grad;	   /* [nlayers] some parameter lies at or before it */
	char *gdone;		   /* [nlayers] gradient written in this backward */
	size_t *pend;		   /* [nlayers] end of the layer's trainable floats, 0 if none */
	int32_t *labels;	   /* backend [max_batch] */
	float *probs, *losses;	   /* backend [max_batch, K] / [max_batch] */
	float *h_probs, *h_losses; /* host copies */
	int n;			   /* batch of the last forward, 0 before any */
	int fwd_training;	   /* mode of the last forward */
	int have_loss;		   /* wf_exec_loss ran after the last forward */
	float smoothing;	   /* label smoothing; > 0: h_dlogits holds probs - targets */
	float *h_dlogits;	   /* host [max_batch, K] (label smoothing) */
	int h_dlogits_cap;	   /* rows allocated */
	/* inference plans (wf_exec_fuse_plan): conv + residual add + relu/relu6 as one op */
	int fused;  /* conv2d_forward_fused is used (inference executor, op present) */
	int nfused; /* layers folded into a conv (training: relus into batch norms and
		     * adds, paddings into convs) */
	/* training plans (wf_exec_train_fuse_plan, backends with train_fuse): a relu
	 * into its batch norm or add, a padding into its conv; bf16 tensors (out_bf16)
	 * from a conv through its batch norm (and relu) to the next conv or add,
	 * their gradients bf16 too */
	int tfused;
	int *fuse_into; /* [nlayers] the conv a relu/add layer is fused into (int8: or the
			 * concat a u8 relu is), else -1
			 * (training: the batch norm or add a relu is fused into) */
	int *fuse_res;	/* [nlayers] conv: the residual layer it adds, else -1 */
	char *fuse_act; /* [nlayers] conv, training bn: 0 none, 1 relu, 2 relu6 (training add: 1) */
	char *out_bf16; /* [nlayers] conv (training: also bn): its output is kept in bf16 */
	char *pad_skip; /* [nlayers] zero padding that its sole consumer, a conv (inference:
			 * or a max pool of a relu's output, or a cropping), applies as its
			 * own padding, or (inference) a cropping that its sole consumer, a
			 * 1x1 pool, applies as its offset: runs nothing, aliases its input */
	char *res_inplace; /* [nlayers] conv: writes into its residual's memory (sum post-op) */
	char *pool_in_add; /* [nlayers] inference int8: a 3x3 average pool that the add
			    * reading it computes (avgpool3_to_u8): runs nothing, aliases
			    * its input */
	int *same_as;	   /* [nlayers] an earlier relu/relu6 (pool) of the same input
			    * (and window) whose output this one's is (inference: NASNet applies
			    * one relu per branch) */
	float *qx;	   /* [nlayers] conv, dense: int8 input scale (0: runs in float) */
	char *qu8;	   /* [nlayers] conv, dense: its int8 input is u8 (x >= 0), else s8 */
	float *qy;	   /* [nlayers] conv: its (fused) output is kept quantised with this
			    * scale (0: float); also a max pool or a 1x1 pool between int8
			    * convs, a relu that only int8 convs (and such pools) read (it
			    * then runs as a conversion to u8, whose saturation at 0 is the
			    * relu), a concat that only such a relu reads (concat_u8), and
			    * a two-input add that only such a concat reads (to_u8 of the
			    * sum, in the concat's scale, as is a conv such a concat reads) */
	char *qyu8;	   /* [nlayers] ... in u8, else s8 */
	int nint8;	   /* convs run in int8 */
	wf_branches *br;   /* inference: layers of parallel branches run at once, else NULL */
	int no_branches;   /* plan without branches (measured: they were slower) */
	/* the trial of the branches against one layer after another (exec_branch.c):
	 * forwards since created (counted while trying, else -1), the seconds of
	 * each tried forward each way, the layers' measured microseconds */
	int trial;
	double tries[2][8];
	double *trial_us;
	/* tiles (exec_tile.c): a forward of a large batch run as tiles of
	 * `tile` rows, each through every layer, where measured faster */
	int tile;			    /* rows per tile; 0: the whole batch at once */
	int tile_rows;			    /* the rows tried */
	int tile_trial;			    /* forwards of the trial so far, -1: none or over */
	wf_plan **tile_plans;		    /* during the trial: the other way's plan slots */
	double tile_secs[2][WF_TILE_TRIES]; /* the trial's pairs: whole, tiles */
	/* the layer hook (wf_exec_set_layer_hook): per layer the parameters it
	 * reads [hook_lo, hook_hi) and whether it has state; NULL when unset */
	wf_layer_hook_fn hook;
	void *hook_arg;
	size_t *hook_lo, *hook_hi;
	char *hook_state;
	wf_err err;
};

/* ---- exec.c ---- */

/* Set ex->err (code and message) and return code. */
int wf_exec_fail(wf_exec *ex, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* An op of layer i failed in direction dir: keep the backend's message, name
 * the layer; returns rc. */
int wf_exec_op_fail(wf_exec *ex, int rc, int i, const char *dir);
/* Plan the activations of an inference executor again and move them to a
 * new arena, between forwards only (the last forward's outputs are gone):
 * with branches (wf_branches_plan with us[layer], the microseconds each
 * layer took), or (branches 0) for good one layer after another. */
int wf_exec_replan(wf_exec *ex, const double *us, int branches);

/* ---- exec_plan.c ---- */

/* The layer whose memory layer i's output is, or -1 when it has its own. */
int wf_exec_alias_src(const wf_exec *ex, int i);
int wf_exec_is_alias(const wf_exec *ex, int i);
/* The layer whose own memory holds layer i's output. */
int wf_exec_root(const wf_exec *ex, int i);
/* The only layer reading layer j's output, or -1 (none, several, output). */
int wf_exec_sole_consumer(const wf_model *m, int j);
/* The layer whose plan entries say how layer j's output is kept. */
int wf_exec_planned_at(const wf_exec *ex, int j);
/* Is layer j's output (through fusion aliases) kept in bf16? */
int wf_exec_is_bf16(const wf_exec *ex, int j);
/* Bytes of layer i's own memory (max_batch samples, aligned). */
size_t wf_exec_out_bytes(const wf_exec *ex, int i);
/* Offsets of every activation (in the order seq, with free_at, when given:
 * the branches' schedule) into *bytes of arena; WF_ENOMEM. */
int wf_exec_plan_activations(wf_exec *ex, size_t *bytes, const int *seq, const int *free_at);
/* Offsets of the activation gradients (training) into *bytes; WF_ENOMEM. */
int wf_exec_plan_gradients(wf_exec *ex, size_t *bytes);

/* ---- exec_fuse.c ---- */

/* The inference plan: paddings into convs, conv + residual + activation as
 * one op, residuals in place, bf16 tensors between convs. */
void wf_exec_fuse_plan(wf_exec *ex);
/* The training plan: paddings into convs, relus into batch norms and adds,
 * bf16 tensors from a conv through its batch norm. */
void wf_exec_train_fuse_plan(wf_exec *ex);
/* Does layer i (a training batch norm or add) run its relu inside? */
int wf_exec_relu_inside(const wf_exec *ex, int i);
/* Training: the input whose gradient memory layer i's is, or -1. */
int wf_exec_grad_alias(const wf_exec *ex, int i);
/* The conv that reads layer k's output as its input (k, or the conv whose
 * padding k is), else -1; the pool that reads it and keeps its values (a
 * max pool, a pick; through its padding or cropping), else -1. */
int wf_exec_conv_reader(const wf_exec *ex, int k);
int wf_exec_pool_reader(const wf_exec *ex, int k);
/* A pool of a 1x1 window: a strided pick of its input. */
int wf_exec_is_pick(const wf_layer *l);
/* Is layer j read only by convs (int8: int8 convs; pools: or such pools)?
 * The same for a relu r and the layers aliasing it. */
int wf_exec_read_by_convs(const wf_exec *ex, int j, int int8, int pools);
int wf_exec_relu_read_by_convs(const wf_exec *ex, int r, int int8, int pools);

/* ---- exec_int8.c ---- */

/* The int8 plan of a fused inference executor (calibrated model, backend
 * with int8 convolutions). */
void wf_exec_plan_int8(wf_exec *ex);
/* Layer j's int8 quantisation (scale, u8 or s8); 0 when it has no range. */
int wf_exec_tensor_q(const wf_exec *ex, int j, float *scale, char *u8);
/* wf_exec_planned_at(j) when layer j's output is kept quantised, else -1;
 * whether it is. */
int wf_exec_q_producer(const wf_exec *ex, int j);
int wf_exec_is_q(const wf_exec *ex, int j);
/* The pool an add computes itself (pool_in_add) from its input j, or -1. */
int wf_exec_pool_of(const wf_exec *ex, int j);

/* ---- exec_run.c ---- */

/* 1 when layer i runs an op in an inference forward (not the input, not an
 * alias of another layer's memory, not fused into another layer). */
int wf_exec_runs(const wf_exec *ex, int i);
/* Layer i's inference forward over n samples (wf_exec_runs(ex, i)). */
int wf_exec_layer_forward(wf_exec *ex, int i, int n);

/* ---- exec_branch.c ---- */

/* Branches of an inference forward (fused plans, a backend whose branches
 * slot runs threads, small batches; us: each layer's measured microseconds,
 * NULL: estimated from its shape): decide whether they pay and, if so,
 * build ex->br and the order the activation memory is planned in: layers
 * seq[0..nl-1] (each once), root j released before seq[free_at[j]] is
 * placed. Returns 0 with ex->br NULL when the layers run one after another
 * (seq, free_at untouched); WF_ENOMEM. */
int wf_branches_plan(wf_exec *ex, const double *us, int *seq, int *free_at);
/* After the memory is planned (ex->own holds offsets): the hazards between
 * layers from the memory they share, and each thread's list. */
void wf_branches_schedule(wf_exec *ex);
/* Around each forward while ex->trial >= 0: before, plan again where the
 * trial moves on (wf_exec_replan); after a forward that succeeded, its
 * seconds. */
int wf_branches_trial_before(wf_exec *ex);
void wf_branches_trial_after(wf_exec *ex, double secs);
/* Layers 1.. of an inference forward over n samples (ex->act set); on a
 * failure *failed is the layer that failed. */
int wf_branches_forward(wf_exec *ex, int n, int *failed);
void wf_branches_free(wf_branches *br);

/* ---- exec_tile.c ---- */

/* At creation: whether the executor tries tiles (inference, fused plans,
 * host memory, a batch of 8 or more, no branches). */
void wf_tiles_init(wf_exec *ex);
/* Before a forward of n rows: the rows per tile it runs (0: the whole
 * batch at once; during the trial the plan slots are those of the way
 * tried); -1: out of memory. */
int wf_tiles_before(wf_exec *ex, int n);
/* After it (secs < 0: it failed): the trial's plan slots back, its time. */
void wf_tiles_after(wf_exec *ex, int n, int rows, double secs);
/* The trial's spare plan slots (at free, or when the parameters change). */
void wf_tiles_free(wf_exec *ex);

#endif
