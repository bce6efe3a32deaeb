/* exec.c: the executor. Runs a model's layers forward in topological order
 * and backward in reverse on one backend's ops, over memory planned once at
 * create for max_batch samples.
 *
 * Memory: one activation arena holds every layer output, batch-norm saved
 * statistics, dropout masks, the labels, probabilities and per-sample losses.
 * A training executor keeps every output for backward; an inference executor
 * reuses an output's memory once its last consumer has run. flatten (always)
 * and dropout (in inference) alias their input. A second arena holds the
 * activation gradients, each live from its first write in backward order to
 * its own layer's backward, plus one scratch tensor for inputs with several
 * consumers: ops overwrite dx, so the first consumer writes the gradient and
 * later ones write the scratch and accumulate it. Nothing is allocated per
 * step. */
#include "model/model.h"
#include "model/model_priv.h"
#include "model/exec_priv.h"
#include "model/optim.h"
#include "kernels/ops.h"

#include "common/util.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- memory planning ---------------------------------------------------- */

#define ALIGN 64

static size_t align_up(size_t x)
{
	return (x + ALIGN - 1) & ~(size_t)(ALIGN - 1);
}

/* A first-fit planner of offsets in one arena; blocks are kept sorted. */
typedef struct planner {
	size_t top; /* arena size so far (bytes) */
	int nlive;
	size_t *boff, *bsize; /* live blocks, sorted by offset */
	int *bid;
} planner;

static int planner_init(planner *p, int cap)
{
	memset(p, 0, sizeof(*p));
	p->boff = malloc(sizeof(size_t) * (size_t)cap);
	p->bsize = malloc(sizeof(size_t) * (size_t)cap);
	p->bid = malloc(sizeof(int) * (size_t)cap);
	return p->boff && p->bsize && p->bid ? 0 : WF_ENOMEM;
}

static void planner_free(planner *p)
{
	free(p->boff);
	free(p->bsize);
	free(p->bid);
}

/* Offset of a new live block of bytes for id. */
static size_t planner_alloc(planner *p, int id, size_t bytes)
{
	bytes = align_up(bytes ? bytes : 1);
	size_t off = 0;
	int at = 0;
	for (; at < p->nlive; at++) {
		if (p->boff[at] - off >= bytes)
			break;
		off = p->boff[at] + p->bsize[at];
	}
	memmove(p->boff + at + 1, p->boff + at, sizeof(size_t) * (size_t)(p->nlive - at));
	memmove(p->bsize + at + 1, p->bsize + at, sizeof(size_t) * (size_t)(p->nlive - at));
	memmove(p->bid + at + 1, p->bid + at, sizeof(int) * (size_t)(p->nlive - at));
	p->boff[at] = off, p->bsize[at] = bytes, p->bid[at] = id;
	p->nlive++;
	if (off + bytes > p->top)
		p->top = off + bytes;
	return off;
}

static void planner_release(planner *p, int id)
{
	for (int at = 0; at < p->nlive; at++) {
		if (p->bid[at] != id)
			continue;
		p->nlive--;
		memmove(p->boff + at, p->boff + at + 1, sizeof(size_t) * (size_t)(p->nlive - at));
		memmove(p->bsize + at, p->bsize + at + 1, sizeof(size_t) * (size_t)(p->nlive - at));
		memmove(p->bid + at, p->bid + at + 1, sizeof(int) * (size_t)(p->nlive - at));
		return;
	}
}

/* Offsets are planned first and stored in the pointer arrays; this turns
 * them into pointers once the arena exists. */
#define REBASE(ptr, base) ((ptr) = (void *)((char *)(base) + (uintptr_t)(ptr)))
#define OFFSET(x)	  ((void *)(uintptr_t)(x))

/* The layer whose memory layer i's output is (flatten, inference dropout,
 * layers fused into a conv), or -1 when it has its own. */
static int alias_src(const wf_exec *ex, int i)
{
	wf_layer_type t = ex->m->layers[i].type;
	if (ex->fuse_into && ex->fuse_into[i] >= 0)
		return ex->fuse_into[i];
	if (ex->pad_skip && ex->pad_skip[i])
		return ex->m->layers[i].inputs[0];
	if (ex->res_inplace && ex->res_inplace[i])
		return ex->fuse_res[i];
	if (ex->pool_in_add && ex->pool_in_add[i])
		return ex->m->layers[i].inputs[0];
	if (ex->same_as && ex->same_as[i] >= 0)
		return ex->same_as[i];
	return t == WF_LAYER_FLATTEN || (t == WF_LAYER_DROPOUT && !ex->training)
		       ? ex->m->layers[i].inputs[0]
		       : -1;
}

static int is_alias(const wf_exec *ex, int i)
{
	return alias_src(ex, i) >= 0;
}

/* The only layer reading layer j's output, or -1 (none, several, or j is the
 * model's output). */
static int sole_consumer(const wf_model *m, int j)
{
	int who = -1;
	if (j == m->output)
		return -1;
	for (int i = j + 1; i < m->nlayers; i++)
		for (int k = 0; k < m->layers[i].ninputs; k++)
			if (m->layers[i].inputs[k] == j) {
				if (who >= 0)
					return -1;
				who = i;
			}
	return who;
}

/* The layer whose plan entries (out_bf16, qy, qyu8) say how layer j's
 * output is kept: through a padding its reader applies, the layer j is
 * fused into, an equal earlier layer (same_as). */
static int planned_at(const wf_exec *ex, int j)
{
	while (ex->pad_skip[j])
		j = ex->m->layers[j].inputs[0];
	if (ex->fuse_into[j] >= 0)
		j = ex->fuse_into[j];
	if (ex->same_as && ex->same_as[j] >= 0)
		j = ex->same_as[j];
	return j;
}

/* Is layer j's output (through fusion aliases) kept in bf16? */
static int is_bf16(const wf_exec *ex, int j)
{
	return ex->out_bf16[planned_at(ex, j)];
}

int wf_exec_root(const wf_exec *ex, int j)
{
	for (int a; (a = alias_src(ex, j)) >= 0;)
		j = a;
	return j;
}

/* A conv with a fused residual add writes into the residual's memory, which
 * then needs no second read (oneDNN's sum post-op, which its fastest 1x1
 * kernels take, where a binary add falls back to an older kernel: ResNet50's
 * expanding 1x1 convs ran 2.4x slower that way). Only where nothing reads
 * that memory after the conv but the add itself, in the same data type. */
static void plan_inplace(wf_exec *ex)
{
	const wf_model *m = ex->m;
	for (int i = 0; i < m->nlayers; i++) {
		int r = ex->fuse_res[i];
		if (r < 0 || m->layers[i].type != WF_LAYER_CONV2D ||
		    is_bf16(ex, r) != ex->out_bf16[i])
			continue;
		int R = wf_exec_root(ex, r),
		    ok = R != 0 && wf_exec_root(ex, m->layers[i].inputs[0]) != R;
		for (int k = i + 1; ok && k < m->nlayers; k++) {
			if (ex->fuse_into[k] == i)
				continue; /* the add (and act) fused into this conv */
			for (int q = 0; q < m->layers[k].ninputs; q++)
				ok &= wf_exec_root(ex, m->layers[k].inputs[q]) != R;
		}
		ok &= wf_exec_root(ex, m->output) != R;
		ex->res_inplace[i] = (char)ok;
	}
}

/* The conv that reads layer k's output as its input: k itself, or the conv
 * whose padding k is (pad_skip); else -1. */
static int conv_reader(const wf_exec *ex, int k)
{
	if (ex->pad_skip[k])
		k = sole_consumer(ex->m, k);
	return k >= 0 && ex->m->layers[k].type == WF_LAYER_CONV2D ? k : -1;
}

/* A pool of a 1x1 window: it picks pixels (kernels.h, wf_pool_desc). */
static int is_pick(const wf_layer *l)
{
	return (l->type == WF_LAYER_MAXPOOL || l->type == WF_LAYER_AVGPOOL) && l->kh == 1 &&
	       l->kw == 1;
}

/* The pool that reads layer k's output and keeps its values (a max pool, a
 * pick): k itself, or the pool whose padding or cropping k is (pad_skip);
 * else -1. */
static int pool_reader(const wf_exec *ex, int k)
{
	while (k >= 0 && ex->pad_skip[k])
		k = sole_consumer(ex->m, k);
	return k >= 0 && (ex->m->layers[k].type == WF_LAYER_MAXPOOL || is_pick(&ex->m->layers[k]))
		       ? k
		       : -1;
}

/* Do only convs (int8: int8 convs) read layer j's output, each as its
 * input (through a padding it applies), or (pools) pools that keep the
 * values (pool_reader) and that only such convs read? */
static int read_by_convs(const wf_exec *ex, int j, int int8, int pools)
{
	const wf_model *m = ex->m;
	int ok = j != m->output;
	for (int k = j + 1; ok && k < m->nlayers; k++)
		for (int e = 0; e < m->layers[k].ninputs; e++)
			if (m->layers[k].inputs[e] == j) {
				int c = conv_reader(ex, k), p = pool_reader(ex, k);
				if (pools && c < 0 && p >= 0)
					ok &= read_by_convs(ex, p, int8, 0);
				else
					ok &= e == 0 && c >= 0 && (!int8 || ex->qx[c] > 0);
			}
	return ok;
}

/* Is r a relu/relu6 of its own (not inside a conv, not an alias of another)
 * that, with the relus aliasing it (same_as), only convs (int8: int8 convs)
 * read, or (pools) pools that only such convs read? Such a relu can write
 * the convs' input type for all of them. */
static int relu_read_by_convs(const wf_exec *ex, int r, int int8, int pools)
{
	const wf_model *m = ex->m;
	wf_layer_type t = m->layers[r].type;
	if ((t != WF_LAYER_RELU && t != WF_LAYER_RELU6) || ex->fuse_into[r] >= 0 ||
	    ex->same_as[r] >= 0)
		return 0;
	int ok = 1;
	for (int k = r; ok && k < m->nlayers; k++)
		if (k == r || ex->same_as[k] == r)
			ok &= read_by_convs(ex, k, int8, pools);
	return ok;
}

/* A zero padding (no cropping) read only by a conv becomes that conv's
 * padding: pad_skip, the layer aliases its input and runs nothing. In
 * training its gradient memory is its input's (the conv's dx has the
 * unpadded size), so there it must also be its input's only reader. In
 * inference a max pool applies it too when its input is a relu's output:
 * zeros then never exceed a window's real values (ResNet50's pool1_pad,
 * a copy of 32x64x112x112 floats at batch 32), and a cropping, as one
 * shifted copy (NASNet's adjust blocks pad by one and crop by one). A
 * cropping (inference) that only a pick (is_pick) reads is that pool's
 * offset: NASNet's adjust blocks then pool 1x1 with stride 2, so the pool
 * picks every other pixel of the uncropped input, shifted by one. */
static void skip_pads(wf_exec *ex)
{
	const wf_model *m = ex->m;
	for (int i = 0; i < m->nlayers; i++) {
		const wf_layer *l = &m->layers[i];
		int c = sole_consumer(m, i);
		if (!ex->training && l->type == WF_LAYER_CROP && c >= 0 && is_pick(&m->layers[c])) {
			ex->pad_skip[i] = 1;
			ex->nfused++;
			continue;
		}
		if (l->type != WF_LAYER_ZEROPAD || l->pad[0] < 0 || l->pad[1] < 0 ||
		    l->pad[2] < 0 || l->pad[3] < 0 || c < 0)
			continue;
		const wf_layer *cl = &m->layers[c];
		wf_layer_type in = m->layers[l->inputs[0]].type;
		int conv = cl->type == WF_LAYER_CONV2D &&
			   (!ex->training || sole_consumer(m, l->inputs[0]) == i);
		int pool = !ex->training && cl->type == WF_LAYER_MAXPOOL && !cl->same &&
			   (in == WF_LAYER_RELU || in == WF_LAYER_RELU6) && l->pad[0] < cl->kh &&
			   l->pad[1] < cl->kh && l->pad[2] < cl->kw && l->pad[3] < cl->kw;
		int crop = !ex->training && cl->type == WF_LAYER_CROP;
		if (conv || pool || crop) {
			ex->pad_skip[i] = 1;
			ex->nfused++;
		}
	}
}

/* Training: does batch norm or add i run its relu consumer inside? */
static int relu_inside(const wf_exec *ex, int i)
{
	return ex->tfused && ex->fuse_act[i];
}

/* Training: the input whose gradient memory layer i's is (a relu fused into
 * its batch norm, a zero padding its conv applies), else -1. */
static int grad_alias(const wf_exec *ex, int i)
{
	if (!ex->tfused || (ex->fuse_into[i] < 0 && !ex->pad_skip[i]))
		return -1;
	return ex->m->layers[i].inputs[0];
}

/* Inference plan: fold into each conv its sole consumer when that is an add
 * of two tensors whose other operand is ready before the conv runs (oneDNN
 * binary post-op), then a sole relu/relu6 consumer (eltwise post-op). The
 * folded layers alias the conv's output and run nothing. A zero padding read
 * only by a conv becomes that conv's padding (MobileNetV2's and ResNet50's
 * ZeroPadding2D before strided convs): it aliases its input. */
static void fuse_plan(wf_exec *ex)
{
	const wf_model *m = ex->m;
	skip_pads(ex);
	for (int i = 0; i < m->nlayers; i++)
		ex->fuse_into[i] = ex->fuse_res[i] = -1;
	for (int i = 0; i < m->nlayers; i++) {
		if (m->layers[i].type != WF_LAYER_CONV2D || ex->fuse_into[i] >= 0)
			continue;
		int cur = i, c = sole_consumer(m, cur);
		if (c >= 0 && m->layers[c].type == WF_LAYER_ADD && m->layers[c].ninputs == 2) {
			const wf_layer *a = &m->layers[c];
			int other = a->inputs[0] == cur ? a->inputs[1] : a->inputs[0];
			if (other < i) {
				ex->fuse_res[i] = other;
				ex->fuse_into[c] = i;
				ex->nfused++;
				cur = c;
				c = sole_consumer(m, cur);
			}
		}
		if (c >= 0 &&
		    (m->layers[c].type == WF_LAYER_RELU || m->layers[c].type == WF_LAYER_RELU6)) {
			ex->fuse_act[i] = m->layers[c].type == WF_LAYER_RELU ? 1 : 2;
			ex->fuse_into[c] = i;
			ex->nfused++;
			cur = c;
		}
	}
	/* one relu/relu6 or pool (of one window) per input: the others are the
	 * same values (NASNet's branches apply their own relu to one tensor, its
	 * normal cells add two equal 3x3 average pools and its reduction cells
	 * two equal 3x3 max pools) */
	for (int i = 0; i < m->nlayers; i++) {
		const wf_layer *l = &m->layers[i];
		int pool = l->type == WF_LAYER_AVGPOOL || l->type == WF_LAYER_MAXPOOL;
		ex->same_as[i] = -1;
		if ((l->type != WF_LAYER_RELU && l->type != WF_LAYER_RELU6 && !pool) ||
		    ex->fuse_into[i] >= 0)
			continue;
		for (int k = 0; k < i && ex->same_as[i] < 0; k++) {
			const wf_layer *o = &m->layers[k];
			if (o->type == l->type && ex->fuse_into[k] < 0 && ex->same_as[k] < 0 &&
			    o->inputs[0] == l->inputs[0] &&
			    (!pool || (o->kh == l->kh && o->kw == l->kw && o->sh == l->sh &&
				       o->sw == l->sw && o->same == l->same)))
				ex->same_as[i] = k, ex->nfused++;
		}
	}
	/* bf16: a conv's output stays bf16 when only convs read it (as input or
	 * residual), or a max pool (through a padding it applies) that only convs
	 * read: then that pool runs in bf16 too */
	for (int i = 0; ex->be->bf16 && i < m->nlayers; i++) {
		if (m->layers[i].type != WF_LAYER_CONV2D)
			continue;
		int cur = i, pool = -1;
		for (int j = i + 1; j < m->nlayers; j++)
			if (ex->fuse_into[j] == i)
				cur = j;
		int all = cur != m->output;
		for (int j = cur + 1; all && j < m->nlayers; j++)
			for (int k = 0; k < m->layers[j].ninputs; k++) {
				if (m->layers[j].inputs[k] != cur)
					continue;
				int p = pool_reader(ex, j);
				if (p >= 0 && pool < 0) {
					all &= read_by_convs(ex, p, 0, 0);
					pool = p;
					continue;
				}
				int conv_x = conv_reader(ex, j) >= 0;
				int res = ex->fuse_into[j] >= 0 &&
					  ex->fuse_res[ex->fuse_into[j]] == cur;
				all &= conv_x || res;
			}
		ex->out_bf16[i] = (char)all;
		if (all && pool >= 0)
			ex->out_bf16[pool] = 1;
	}
	/* bf16: a relu (with the relus that alias it) that only convs read
	 * converts its float input to bf16 once for all of them, the relu
	 * applied on the way (to_bf16; backends with bf16 tensors): NASNet's
	 * relus of branch sums in front of two or three separable convs */
	int relu16 = ex->be->bf16 && wf_backend_caps_of(ex->be).train_fuse;
	for (int r = 0; relu16 && r < m->nlayers; r++)
		if (relu_read_by_convs(ex, r, 0, 0) && !is_bf16(ex, m->layers[r].inputs[0]))
			ex->out_bf16[r] = 1;
	plan_inplace(ex);
}

/* Training plan (see tfused): zero paddings into their convs (skip_pads);
 * each batch norm (not frozen) fuses a sole relu consumer (a relu6 too where
 * the backend has WF_CAP_BN_RELU6), which then aliases it and runs nothing.
 * With bf16 compute, a conv read only by a batch norm whose output (after
 * its fused relu) only a conv or a two-input add reads keeps its output in
 * bf16, and so does the batch norm: the convs read and write them without
 * conversions, batch norm moves half the bytes, the add reads bf16 (and
 * writes float). Their gradients are bf16 as well (the add converts its
 * dy); every such tensor has one reader, so no gradient is ever accumulated
 * in bf16. */
static void train_fuse_plan(wf_exec *ex)
{
	const wf_model *m = ex->m;
	int relu6 = wf_backend_caps_of(ex->be).bn_relu6;
	for (int i = 0; i < m->nlayers; i++)
		ex->fuse_into[i] = ex->fuse_res[i] = -1;
	skip_pads(ex);
	for (int b = 0; b < m->nlayers; b++) {
		const wf_layer *l = &m->layers[b];
		if (l->type != WF_LAYER_BATCHNORM || l->frozen)
			continue;
		int t = b, r = sole_consumer(m, b);
		wf_layer_type rt = r >= 0 ? m->layers[r].type : WF_LAYER_INPUT;
		if (rt == WF_LAYER_RELU || (rt == WF_LAYER_RELU6 && relu6)) {
			ex->fuse_into[r] = b;
			ex->fuse_act[b] = rt == WF_LAYER_RELU ? 1 : 2;
			ex->nfused++;
			t = r;
		}
		int c = l->inputs[0], c2 = sole_consumer(m, t);
		wf_layer_type t2 = c2 >= 0 ? m->layers[c2].type : WF_LAYER_INPUT;
		if (ex->be->bf16 && m->layers[c].type == WF_LAYER_CONV2D &&
		    sole_consumer(m, c) == b &&
		    (t2 == WF_LAYER_CONV2D || (t2 == WF_LAYER_ADD && m->layers[c2].ninputs == 2))) {
			ex->out_bf16[c] = ex->out_bf16[b] = 1;
		}
	}
	/* a two-input add of two different tensors runs its sole relu consumer
	 * inside (ResNet's block outputs): one pass forward, and backward one
	 * pass that masks dy and writes both inputs' gradients */
	for (int a = 0; a < m->nlayers; a++) {
		const wf_layer *l = &m->layers[a];
		int r = sole_consumer(m, a);
		if (l->type == WF_LAYER_ADD && l->ninputs == 2 && l->inputs[0] != l->inputs[1] &&
		    r >= 0 && m->layers[r].type == WF_LAYER_RELU) {
			ex->fuse_into[r] = a;
			ex->fuse_act[a] = 1;
			ex->nfused++;
		}
	}
}

/* The int8 quantisation of layer j's output: symmetric, u8 with scale
 * 255 / max when its calibration range is >= 0, else s8 with 127 / max |x|.
 * A zero padding applied inside its conv adds zeros only, and a max pool
 * or a pick (is_pick) picks among its input's values: their input's (so an
 * int8 max pool needs no rescaling). 0 when the layer has no range. */
static int tensor_q(const wf_exec *ex, int j, float *scale, char *u8)
{
	const wf_model *m = ex->m;
	while (ex->pad_skip[j] || m->layers[j].type == WF_LAYER_MAXPOOL || is_pick(&m->layers[j]))
		j = m->layers[j].inputs[0];
	const wf_layer *l = &m->layers[j];
	if (!l->has_range)
		return 0;
	*u8 = l->range[0] >= 0;
	float amax = *u8 ? l->range[1] : fmaxf(-l->range[0], l->range[1]);
	*scale = (*u8 ? 255.0f : 127.0f) / fmaxf(amax, 1e-20f); /* a range of zeros: any */
	return 1;
}

/* planned_at(j) when layer j's output is kept quantised, else -1. */
static int q_producer(const wf_exec *ex, int j)
{
	j = planned_at(ex, j);
	return ex->qy[j] > 0 ? j : -1;
}

static int is_q(const wf_exec *ex, int j)
{
	return q_producer(ex, j) >= 0;
}

/* int8 (a backend set to int8 precision): each conv whose input has a
 * calibration range reads it quantised (tensor_q). A conv's output stays
 * quantised, in its own range's scale, when every reader is such a conv
 * reading it as input or as the residual of its fused add, a max pool
 * (through a padding it applies) that only such convs read (that pool then
 * runs on the quantised values), or a global average pool (ResNet50's last
 * block: its conv then adds the residual in place, and the pool's float
 * output dequantises); not a plain add, another pool or the logits. A dense
 * layer whose input has a range runs in int8 as a 1x1 conv over one pixel
 * (its [in, units] kernel is that conv's), its output float. */
/* The relu that reader k is (or aliases: same_as) when plan_int8 made it a
 * conversion to u8 and nothing is fused into yet; else -1. */
static int u8_relu(const wf_exec *ex, int k)
{
	int a = ex->same_as[k] >= 0 ? ex->same_as[k] : k;
	wf_layer_type t = ex->m->layers[a].type;
	return (t == WF_LAYER_RELU || t == WF_LAYER_RELU6) && ex->qy[a] > 0 && ex->qyu8[a] &&
			       ex->fuse_into[a] < 0
		       ? a
		       : -1;
}

/* The average pool layer j is or is the same as (same_as), else -1. */
static int pooled_root(const wf_exec *ex, int j)
{
	int q = ex->same_as[j] >= 0 ? ex->same_as[j] : j;
	return ex->m->layers[q].type == WF_LAYER_AVGPOOL ? q : -1;
}

/* Can add k compute average pool q (avgpool3_to_u8): a 3x3 window, stride
 * 1, "same" padding, over a float tensor of q's input shape (not a padding
 * a conv applies, nor a pool an add computes), and only k reads q and the
 * pools that are the same as q? */
static int pool_only_for(const wf_exec *ex, int q, int k)
{
	const wf_model *m = ex->m;
	const wf_layer *l = &m->layers[q];
	int x = l->inputs[0];
	if (l->kh != 3 || l->kw != 3 || l->sh != 1 || l->sw != 1 || !l->same || is_q(ex, x) ||
	    ex->pad_skip[x] || ex->pool_in_add[x] || q == m->output)
		return 0;
	for (int j = q + 1; j < m->nlayers; j++)
		for (int e = 0; e < m->layers[j].ninputs; e++) {
			int in = m->layers[j].inputs[e];
			if ((in == q || ex->same_as[in] == q) && j != k)
				return 0;
		}
	return 1;
}

/* The pool add i computes (pool_in_add) from input j, else -1. */
static int pool_of(const wf_exec *ex, int j)
{
	int q = ex->pool_in_add ? pooled_root(ex, j) : -1;
	return q >= 0 && ex->pool_in_add[q] ? q : -1;
}

static void plan_int8(wf_exec *ex)
{
	const wf_model *m = ex->m;
	if (!ex->be->int8 || ex->be->bf16)
		return;
	for (int i = 0; i < m->nlayers; i++) {
		float q;
		wf_layer_type t = m->layers[i].type;
		if ((t == WF_LAYER_CONV2D || t == WF_LAYER_DENSE) &&
		    tensor_q(ex, m->layers[i].inputs[0], &q, &ex->qu8[i])) {
			ex->qx[i] = q;
			ex->nint8 += t == WF_LAYER_CONV2D;
		}
	}
	/* a relu (with the relus that alias it) that only int8 convs read, each
	 * quantising it into u8 from its range (>= 0): it converts its input to
	 * u8 once for all of them; the conversion's saturation at 0 (and at the
	 * range's top, <= 6 for relu6) is the relu. NASNet applies a relu to a
	 * branch sum in front of two or three separable convs, and one to its
	 * stem's output in front of four convs and two 1x1 average pools of
	 * stride 2 (its adjust block's), which then pick u8 values. */
	for (int r = 0; r < m->nlayers; r++) {
		float q;
		char u8 = 0;
		if (!relu_read_by_convs(ex, r, 1, 1) || is_q(ex, m->layers[r].inputs[0]) ||
		    !tensor_q(ex, r, &q, &u8) || !u8)
			continue;
		ex->qy[r] = q, ex->qyu8[r] = 1;
		for (int p = r + 1; p < m->nlayers; p++)
			if (pool_reader(ex, p) == p && planned_at(ex, m->layers[p].inputs[0]) == r)
				ex->qy[p] = q, ex->qyu8[p] = 1;
	}
	for (int i = 0; i < m->nlayers; i++) {
		if (ex->qx[i] == 0)
			continue;
		int cur = i;
		for (int j = i + 1; j < m->nlayers; j++)
			if (ex->fuse_into[j] == i)
				cur = j;
		float q;
		int ok = cur != m->output && tensor_q(ex, cur, &q, &ex->qyu8[i]), pool = -1;
		int relu = -1, others = 0; /* a u8 relu (with its aliases) reading cur */
		for (int k = cur + 1; ok && k < m->nlayers; k++)
			for (int e = 0; e < m->layers[k].ninputs; e++) {
				if (m->layers[k].inputs[e] != cur)
					continue;
				int a = u8_relu(ex, k);
				if (a >= 0 && (relu < 0 || relu == a)) {
					relu = a;
					continue;
				}
				others++;
				int f = ex->fuse_into[k];
				if (f >= 0) { /* an add fused into an int8 conv, cur its residual */
					ok &= ex->fuse_res[f] == cur && ex->qx[f] > 0;
					continue;
				}
				if (m->layers[k].type == WF_LAYER_GAP && ex->be->ops->gap_q8)
					continue;
				int p = pool_reader(ex, k);
				if (p >= 0 && pool < 0) {
					ok &= read_by_convs(ex, p, 1, 0);
					pool = p;
					continue;
				}
				int c = conv_reader(ex, k);
				ok &= e == 0 && c >= 0 && ex->qx[c] > 0;
			}
		if (ok && relu >= 0 && !others) {
			/* only a u8 relu reads it (NASNet's stem conv: the five relus of
			 * its reduction cell's branches): the conv writes that relu's u8
			 * tensor, whose saturation at 0 is the relu */
			ex->fuse_into[relu] = i;
			ex->qy[i] = ex->qy[relu], ex->qyu8[i] = 1;
			ex->nfused++;
			continue;
		}
		ok &= relu < 0;
		ex->qy[i] = ok ? q : 0;
		if (ok && pool >= 0) /* the pool's output: in its input's scale */
			ex->qy[pool] = q, ex->qyu8[pool] = ex->qyu8[i];
	}
	/* in place only into memory of the output's own size: float into float,
	 * u8/s8 into u8/s8 */
	for (int i = 0; i < m->nlayers; i++)
		if (ex->res_inplace[i] && is_q(ex, ex->fuse_res[i]) != (ex->qy[i] > 0))
			ex->res_inplace[i] = 0;
	/* a concat that only one u8 relu (with the relus aliasing it) reads
	 * writes that relu's u8 tensor itself: NASNet's cell outputs, each read
	 * by the next cell's relu and the adjust block's of the one after (the
	 * float concat was written and read once more only to be converted) */
	for (int c = 0; ex->be->ops->concat_u8 && c < m->nlayers; c++) {
		if (m->layers[c].type != WF_LAYER_CONCAT || c == m->output)
			continue;
		int r = -1, ok = 1;
		for (int k = c + 1; ok && k < m->nlayers; k++)
			for (int e = 0; e < m->layers[k].ninputs; e++)
				if (m->layers[k].inputs[e] == c) {
					int a = u8_relu(ex, k);
					ok &= a >= 0 && (r < 0 || a == r);
					r = a;
				}
		if (ok && r >= 0) {
			ex->fuse_into[r] = c;
			ex->qy[c] = ex->qy[r], ex->qyu8[c] = 1;
			ex->nfused++;
		}
		/* its inputs that only it reads, written by an int8 conv (with
		 * an add fused, NASNet's branch sums: as a binary post-op, no
		 * longer in place into a float residual) or by a two-input
		 * float add (a pool's branch sum), are written u8 in its scale:
		 * it copies their bytes (NASNet's cells: 4 of 6 inputs) */
		for (int e = 0; ok && r >= 0 && e < m->layers[c].ninputs; e++) {
			int k = m->layers[c].inputs[e], p = planned_at(ex, k);
			const wf_layer *l = &m->layers[p];
			if (sole_consumer(m, k) != c || ex->qy[p] > 0)
				continue;
			int add = p == k && l->type == WF_LAYER_ADD && l->ninputs == 2 &&
				  !is_q(ex, l->inputs[0]) && !is_q(ex, l->inputs[1]);
			if (!add && (l->type != WF_LAYER_CONV2D || ex->qx[p] == 0))
				continue;
			ex->qy[p] = ex->qy[c], ex->qyu8[p] = 1, ex->res_inplace[p] = 0;
			/* an add of a 3x3 average pool that only it reads (NASNet's
			 * normal cells: pool(h) + p, pool(p) + pool(p)) pools as it
			 * adds: the pool's float tensor is never written */
			int first = -1;
			for (int a = 0; add && ex->be->ops->avgpool3_to_u8 && a < 2; a++) {
				int q = pooled_root(ex, l->inputs[a]);
				if (q >= 0 && (first < 0 || first == q) && pool_only_for(ex, q, k))
					ex->pool_in_add[q] = 1, first = q, ex->nfused++;
			}
		}
	}
}

size_t wf_exec_out_bytes(const wf_exec *ex, int i)
{
	return align_up((size_t)ex->max_batch * wf_layer_size(&ex->m->layers[i]) * sizeof(float));
}

/* Offsets of the activations, placed in the order seq (NULL: layer order);
 * an inference executor releases root j before it places seq[free_at[j]]
 * (free_at NULL: after its last reader). */
static int plan_activations(wf_exec *ex, size_t *bytes, const int *seq, const int *free_at)
{
	wf_model *m = ex->m;
	int nl = m->nlayers, rc = WF_ENOMEM;
	size_t B = (size_t)ex->max_batch;
	int *owner = calloc((size_t)nl, sizeof(int));
	int *last = calloc((size_t)nl, sizeof(int));
	planner p;
	if (planner_init(&p, 4 * nl + 8) || !owner || !last)
		goto done;
	for (int i = 0; i < nl; i++) {
		owner[i] = is_alias(ex, i) ? owner[alias_src(ex, i)] : i;
		last[i] = i + 1;
	}
	for (int i = 0; i < nl; i++)
		for (int k = 0; k < m->layers[i].ninputs; k++)
			last[owner[m->layers[i].inputs[k]]] = i + 1;
	last[owner[m->output]] = nl + 1; /* logits are read after forward */
	if (free_at)
		memcpy(last, free_at, sizeof(int) * (size_t)nl);
	/* an inference executor's output first, apart from every other tensor:
	 * a forward run as tiles (exec_tile.c) keeps each tile's output rows
	 * there while the later tiles run every layer again */
	int out = ex->training ? -1 : owner[m->output];
	if (out >= 0)
		ex->own[out] = OFFSET(planner_alloc(&p, out, wf_exec_out_bytes(ex, out)));
	for (int at = 0;; at++) {
		/* an inference executor frees what no later layer reads */
		if (!ex->training)
			for (int j = 0; j < nl; j++)
				if (owner[j] == j && last[j] == at)
					planner_release(&p, j);
		if (at == nl)
			break;
		int i = seq ? seq[at] : at;
		const wf_layer *l = &m->layers[i];
		if (owner[i] == i && i != out)
			ex->own[i] = OFFSET(planner_alloc(&p, i, wf_exec_out_bytes(ex, i)));
		if (ex->training && l->type == WF_LAYER_BATCHNORM) {
			ex->save_mean[i] =
				OFFSET(planner_alloc(&p, nl + 2 * i, sizeof(float) * l->oc));
			ex->save_invstd[i] =
				OFFSET(planner_alloc(&p, nl + 2 * i + 1, sizeof(float) * l->oc));
		}
		if (ex->training && l->type == WF_LAYER_DROPOUT)
			ex->mask[i] = OFFSET(planner_alloc(&p, 3 * nl + i, B * wf_layer_size(l)));
	}
	ex->labels = OFFSET(planner_alloc(&p, 4 * nl, B * sizeof(int32_t)));
	ex->probs = OFFSET(planner_alloc(&p, 4 * nl + 1, B * (size_t)m->classes * sizeof(float)));
	ex->losses = OFFSET(planner_alloc(&p, 4 * nl + 2, B * sizeof(float)));
	*bytes = p.top;
	rc = 0;
done:
	planner_free(&p);
	free(owner);
	free(last);
	return rc;
}

/* Plan activation gradients in backward order: dact[j] lives from the
 * backward of its last consumer to its own. */
static int plan_gradients(wf_exec *ex, size_t *bytes)
{
	wf_model *m = ex->m;
	int nl = m->nlayers;
	size_t B = (size_t)ex->max_batch, largest = 0;
	planner p;
	if (planner_init(&p, nl + 2)) {
		planner_free(&p);
		return WF_ENOMEM;
	}
	char *placed = ex->gdone; /* borrowed: reset below */
	memset(placed, 0, (size_t)nl);
	for (int i = 0; i < nl; i++)
		largest = WF_MAX(largest, wf_layer_size(&m->layers[i]));
	ex->scratch = OFFSET(planner_alloc(&p, nl, B * largest * sizeof(float)));
	ex->dact[m->output] =
		OFFSET(planner_alloc(&p, m->output, B * wf_layer_size(&m->layers[m->output]) * 4));
	placed[m->output] = 1;
	for (int i = nl - 1; i >= 1; i--) {
		const wf_layer *l = &m->layers[i];
		int into = grad_alias(ex, i);
		for (int k = 0; k < l->ninputs; k++) {
			int j = l->inputs[k];
			if (placed[j] || !ex->need_grad[j])
				continue;
			placed[j] = 1;
			ex->dact[j] =
				j == into ? ex->dact[i]
					  : OFFSET(planner_alloc(&p, j,
								 B * wf_layer_size(&m->layers[j]) *
									 sizeof(float)));
		}
		if (into >= 0)
			continue; /* into's backward reads it: released there */
		planner_release(&p, i);
		int r = sole_consumer(m, i);
		if (r >= 0 && grad_alias(ex, r) == i)
			planner_release(&p, r);
	}
	memset(placed, 0, (size_t)nl);
	*bytes = p.top;
	planner_free(&p);
	return 0;
}

/* ---- create / free ------------------------------------------------------ */

static int exec_fail(wf_exec *ex, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static int exec_fail(wf_exec *ex, int code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(ex->err.msg, sizeof(ex->err.msg), fmt, ap);
	va_end(ap);
	ex->err.code = code;
	return code;
}

/* An op of layer i failed: keep the backend's message, name the layer. */
static int op_fail(wf_exec *ex, int rc, int i, const char *dir)
{
	const wf_layer *l = &ex->m->layers[i];
	return exec_fail(ex, rc, "layer '%s' (%s) %s on %s: %s", l->name,
			 wf_layer_type_name(l->type), dir, ex->be->name,
			 ex->be->err.msg[0] ? ex->be->err.msg : wf_strerror(rc));
}

void wf_exec_free(wf_exec *ex)
{
	if (!ex)
		return;
	wf_backend *be = ex->be;
	for (int i = 0; i < ex->m->nlayers; i++) {
		if (ex->plans)
			wf_backend_plan_free(be, &ex->plans[i]);
		if (ex->eval_plans)
			wf_backend_plan_free(be, &ex->eval_plans[i]);
	}
	if (!ex->host) {
		wf_op_free(be, ex->params);
		wf_op_free(be, ex->state);
	}
	wf_op_free(be, ex->grads);
	wf_op_free(be, ex->arena);
	wf_op_free(be, ex->garena);
	free(ex->plans);
	free(ex->eval_plans);
	free(ex->act);
	free(ex->own);
	free(ex->dact);
	free(ex->save_mean);
	free(ex->save_invstd);
	free(ex->mask);
	free(ex->need_grad);
	free(ex->gdone);
	free(ex->pend);
	free(ex->fuse_into);
	free(ex->fuse_res);
	free(ex->fuse_act);
	free(ex->pad_skip);
	free(ex->pool_in_add);
	free(ex->res_inplace);
	free(ex->same_as);
	free(ex->out_bf16);
	free(ex->qx);
	free(ex->qu8);
	free(ex->qy);
	free(ex->qyu8);
	free(ex->h_probs);
	free(ex->h_losses);
	free(ex->h_dlogits);
	wf_branches_free(ex->br);
	free(ex->trial_us);
	wf_tiles_free(ex);
	free(ex);
}

static void *balloc(wf_backend *be, size_t bytes)
{
	return wf_op_alloc(be, bytes ? bytes : ALIGN);
}

/* The activations' offsets (*abytes in all): in layer order, or in the
 * order of the branches an inference executor runs at once (exec_branch.c,
 * us: microseconds of each layer measured, NULL: estimated). */
static int plan_order(wf_exec *ex, const double *us, size_t *abytes)
{
	int nl = ex->m->nlayers, rc = WF_ENOMEM;
	int *seq = malloc(sizeof(int) * (size_t)nl), *free_at = malloc(sizeof(int) * (size_t)nl);
	wf_branches_free(ex->br);
	ex->br = NULL;
	if (seq && free_at)
		rc = ex->fused && !ex->no_branches ? wf_branches_plan(ex, us, seq, free_at) : 0;
	if (!rc)
		rc = plan_activations(ex, abytes, ex->br ? seq : NULL, ex->br ? free_at : NULL);
	if (!rc && ex->br)
		wf_branches_schedule(ex);
	free(seq);
	free(free_at);
	return rc;
}

/* Offsets of the activations (and labels, probabilities, losses) become
 * pointers into ex->arena. */
static void rebase_activations(wf_exec *ex)
{
	for (int i = 0; i < ex->m->nlayers; i++) {
		if (ex->own[i] || !is_alias(ex, i))
			REBASE(ex->own[i], ex->arena);
		ex->act[i] = ex->own[i] ? ex->own[i] : ex->act[alias_src(ex, i)];
	}
	REBASE(ex->labels, ex->arena);
	REBASE(ex->probs, ex->arena);
	REBASE(ex->losses, ex->arena);
}

int wf_exec_replan(wf_exec *ex, const double *us, int branches)
{
	ex->no_branches = !branches;
	size_t abytes = 0;
	memset(ex->own, 0, sizeof(*ex->own) * (size_t)ex->m->nlayers);
	ex->labels = NULL, ex->probs = ex->losses = NULL;
	int rc = plan_order(ex, us, &abytes);
	wf_op_free(ex->be, ex->arena);
	if (!rc && !(ex->arena = balloc(ex->be, abytes)))
		rc = WF_ENOMEM;
	if (rc) { /* the old plan is gone: every later forward fails too */
		ex->arena = NULL;
		return exec_fail(ex, rc,
				 "executor: out of %s memory planning its activations again (%.1f "
				 "MiB); create it again",
				 ex->be->name, abytes / 1048576.0);
	}
	ex->bytes = ex->bytes - ex->abytes + abytes;
	ex->abytes = abytes;
	rebase_activations(ex);
	return 0;
}

int wf_exec_create(wf_exec **out, wf_model *m, wf_backend *be, int max_batch, int training,
		   wf_err *err)
{
	*out = NULL;
	if (max_batch < 1 || max_batch > (1 << 20))
		return wf_errf(err, WF_EINVAL, "executor: max_batch %d is out of range [1, %d]",
			       max_batch, 1 << 20);
	int nl = m->nlayers, rc = WF_ENOMEM;
	size_t K = (size_t)m->classes, B = (size_t)max_batch;
	wf_exec *ex = calloc(1, sizeof(*ex));
	if (!ex)
		return wf_errf(err, WF_ENOMEM, "executor: out of memory");
	ex->m = m, ex->be = be, ex->max_batch = max_batch, ex->training = training != 0;
	ex->host = wf_backend_host_memory(be);
	ex->plans = calloc((size_t)nl, sizeof(*ex->plans));
	if (training)
		ex->eval_plans = calloc((size_t)nl, sizeof(*ex->eval_plans));
	ex->act = calloc((size_t)nl, sizeof(*ex->act));
	ex->own = calloc((size_t)nl, sizeof(*ex->own));
	ex->dact = calloc((size_t)nl, sizeof(*ex->dact));
	ex->save_mean = calloc((size_t)nl, sizeof(*ex->save_mean));
	ex->save_invstd = calloc((size_t)nl, sizeof(*ex->save_invstd));
	ex->mask = calloc((size_t)nl, sizeof(*ex->mask));
	ex->need_grad = calloc((size_t)nl, 1);
	ex->gdone = calloc((size_t)nl, 1);
	ex->pend = calloc((size_t)nl, sizeof(*ex->pend));
	ex->h_probs = malloc(sizeof(float) * B * K);
	ex->h_losses = malloc(sizeof(float) * B);
	if (!ex->plans || (training && !ex->eval_plans) || !ex->act || !ex->own || !ex->dact ||
	    !ex->save_mean || !ex->save_invstd || !ex->mask || !ex->need_grad || !ex->gdone ||
	    !ex->pend || !ex->h_probs || !ex->h_losses) {
		wf_errf(err, rc, "executor: out of memory");
		goto fail;
	}
	wf_backend_caps caps = wf_backend_caps_of(be);
	if ((!ex->training && caps.fused_conv) || (ex->training && caps.train_fuse)) {
		ex->fuse_into = malloc(sizeof(int) * (size_t)nl);
		ex->fuse_res = malloc(sizeof(int) * (size_t)nl);
		ex->fuse_act = calloc((size_t)nl, 1);
		ex->out_bf16 = calloc((size_t)nl, 1);
		ex->pad_skip = calloc((size_t)nl, 1);
		ex->res_inplace = calloc((size_t)nl, 1);
		ex->same_as = ex->training ? NULL : malloc(sizeof(int) * (size_t)nl);
		ex->pool_in_add = ex->training ? NULL : calloc((size_t)nl, 1);
		ex->qx = calloc((size_t)nl, sizeof(float));
		ex->qu8 = calloc((size_t)nl, 1);
		ex->qy = calloc((size_t)nl, sizeof(float));
		ex->qyu8 = calloc((size_t)nl, 1);
		if (!ex->fuse_into || !ex->fuse_res || !ex->fuse_act || !ex->out_bf16 ||
		    !ex->pad_skip || !ex->res_inplace ||
		    (!ex->training && (!ex->same_as || !ex->pool_in_add)) || !ex->qx || !ex->qu8 ||
		    !ex->qy || !ex->qyu8) {
			wf_errf(err, rc, "executor: out of memory");
			goto fail;
		}
		if (ex->training) {
			ex->tfused = 1;
			train_fuse_plan(ex);
		} else {
			ex->fused = 1;
			fuse_plan(ex);
			if (caps.int8)
				plan_int8(ex);
		}
	}
	for (int i = 0; i < nl; i++) {
		const wf_layer *l = &m->layers[i];
		int views[4] = {l->p_kernel, l->p_bias, l->p_gamma, l->p_beta};
		for (int k = 0; k < 4 && !l->frozen; k++)
			if (views[k] >= 0)
				ex->pend[i] = WF_MAX(ex->pend[i], m->views[views[k]].offset +
									  m->views[views[k]].count);
		ex->need_grad[i] = ex->pend[i] > 0;
		for (int k = 0; k < l->ninputs; k++)
			ex->need_grad[i] |= ex->need_grad[l->inputs[k]];
		if (training && l->frozen && l->type == WF_LAYER_BATCHNORM && l->ninputs &&
		    ex->need_grad[l->inputs[0]]) {
			wf_errf(err, WF_ENOTSUP,
				"layer %s: a frozen batch norm after trainable layers is not "
				"supported (freeze the layers before it too)",
				l->name);
			goto fail;
		}
	}

	size_t abytes = 0, gbytes = 0;
	rc = plan_order(ex, NULL, &abytes);
	ex->trial = ex->br ? 0 : -1; /* branches: try them against one after another */
	wf_tiles_init(ex);	     /* a large batch: try tiles against it whole */
	if (!rc && training)
		rc = plan_gradients(ex, &gbytes);
	if (rc) {
		wf_errf(err, rc, "executor: out of memory planning %d layers", nl);
		goto fail;
	}
	rc = WF_ENOMEM;
	ex->abytes = abytes;
	ex->bytes = abytes + gbytes + (training ? m->nparams * sizeof(float) : 0) +
		    (ex->host ? 0 : (m->nparams + m->nstate) * sizeof(float));
	ex->arena = balloc(be, abytes);
	if (training) {
		ex->garena = balloc(be, gbytes);
		ex->grads = balloc(be, m->nparams * sizeof(float));
	}
	if (ex->host) {
		ex->params = m->params;
		ex->state = m->state;
	} else {
		ex->params = balloc(be, m->nparams * sizeof(float));
		ex->state = balloc(be, m->nstate * sizeof(float));
	}
	if (!ex->arena || (training && (!ex->garena || !ex->grads)) || !ex->params || !ex->state) {
		wf_errf(err, rc,
			"executor: out of %s memory for batch %d (%.1f MiB activations, %.1f MiB "
			"gradients)",
			be->name, max_batch, abytes / 1048576.0, gbytes / 1048576.0);
		goto fail;
	}
	rebase_activations(ex);
	for (int i = 0; i < nl; i++) {
		if (ex->save_mean[i] || m->layers[i].type == WF_LAYER_BATCHNORM) {
			if (training) {
				REBASE(ex->save_mean[i], ex->arena);
				REBASE(ex->save_invstd[i], ex->arena);
			}
		}
		if (training && m->layers[i].type == WF_LAYER_DROPOUT)
			REBASE(ex->mask[i], ex->arena);
		if (training && (ex->need_grad[i] || i == m->output))
			REBASE(ex->dact[i], ex->garena);
	}
	if (training)
		REBASE(ex->scratch, ex->garena);
	if (!ex->host && (rc = wf_exec_params_from_host(ex)) != 0) {
		wf_errf(err, rc, "executor: %s", ex->err.msg);
		goto fail;
	}
	*out = ex;
	return 0;
fail:
	wf_exec_free(ex);
	return rc;
}

/* ---- forward ------------------------------------------------------------ */

static const float *pv(const wf_exec *ex, int view)
{
	return view >= 0 ? ex->params + ex->m->views[view].offset : NULL;
}

static float *gv(const wf_exec *ex, int view)
{
	return view >= 0 ? ex->grads + ex->m->views[view].offset : NULL;
}

static void conv_desc(const wf_exec *ex, int i, int n, wf_conv_desc *d)
{
	const wf_layer *l = &ex->m->layers[i], *x = &ex->m->layers[l->inputs[0]];
	wf_conv_desc_init(d, n, x->oh, x->ow, x->oc, l->filters, l->kh, l->kw, l->sh, l->sw, l->dh,
			  l->dw, l->groups, l->same, 0, 0, l->use_bias);
	if (ex->pad_skip && ex->pad_skip[l->inputs[0]]) { /* read the unpadded input */
		d->h -= x->pad[0] + x->pad[1], d->w -= x->pad[2] + x->pad[3];
		d->pt += x->pad[0], d->pb += x->pad[1], d->pl += x->pad[2], d->pr += x->pad[3];
	}
	if (ex->tfused)
		d->io_bf16 = (is_bf16(ex, l->inputs[0]) ? 1 : 0) | (ex->out_bf16[i] ? 2 : 0);
}

static void dense_desc(const wf_exec *ex, int i, int n, wf_dense_desc *d)
{
	const wf_layer *l = &ex->m->layers[i];
	d->n = n;
	d->in = ex->m->layers[l->inputs[0]].oc;
	d->out = l->units;
	d->bias = l->use_bias;
	d->infer = !ex->training;
}

static void bn_desc(const wf_exec *ex, int i, int n, wf_bn_desc *d)
{
	const wf_layer *l = &ex->m->layers[i];
	memset(d, 0, sizeof(*d));
	d->n = n, d->h = l->oh, d->w = l->ow, d->c = l->oc;
	d->eps = l->eps;
	d->momentum = l->momentum;
	if (ex->tfused) {
		d->relu = relu_inside(ex, i);
		d->io_bf16 = ex->out_bf16[i];
	}
}

static void pool_desc(const wf_exec *ex, int i, int n, wf_pool_desc *d)
{
	const wf_layer *l = &ex->m->layers[i], *x = &ex->m->layers[l->inputs[0]];
	wf_pool_desc_init(d, l->type == WF_LAYER_MAXPOOL ? WF_POOL_MAX : WF_POOL_AVG, n, x->oh,
			  x->ow, x->oc, l->kh, l->kw, l->sh, l->sw, l->same);
	/* read the input of the padding (and cropping, in front of a pick) it applies */
	for (int j = l->inputs[0]; ex->pad_skip && ex->pad_skip[j];
	     j = ex->m->layers[j].inputs[0]) {
		const wf_layer *p = &ex->m->layers[j], *px = &ex->m->layers[p->inputs[0]];
		int s = p->type == WF_LAYER_CROP ? -1 : 1;
		d->h = px->oh, d->w = px->ow;
		d->pt += s * p->pad[0], d->pb += s * p->pad[1];
		d->pl += s * p->pad[2], d->pr += s * p->pad[3];
	}
	if (ex->qy && ex->qy[i] > 0)
		d->q8 = ex->qyu8[i] ? 1 : 2;
	if (!ex->training && ex->out_bf16 && ex->out_bf16[i])
		d->io_bf16 = 1;
}

static void pad_desc(const wf_exec *ex, int i, int n, wf_pad_desc *d)
{
	const wf_layer *l = &ex->m->layers[i], *x = &ex->m->layers[l->inputs[0]];
	int s = l->type == WF_LAYER_CROP ? -1 : 1;
	d->n = n, d->h = x->oh, d->w = x->ow, d->c = x->oc;
	d->pt = s * l->pad[0], d->pb = s * l->pad[1], d->pl = s * l->pad[2], d->pr = s * l->pad[3];
	if (ex->pad_skip && ex->pad_skip[l->inputs[0]]) { /* a padding, then this cropping */
		d->h -= x->pad[0] + x->pad[1], d->w -= x->pad[2] + x->pad[3];
		d->pt += x->pad[0], d->pb += x->pad[1], d->pl += x->pad[2], d->pr += x->pad[3];
	}
}

/* Does layer i run an op in a forward (training: a training forward)? Not
 * the input, flatten and inference dropout (aliases of their input), nor a
 * layer that runs inside its conv (training: its batch norm) or that an
 * earlier equal relu computed. */
static int runs(const wf_exec *ex, int i, int training)
{
	wf_layer_type t = ex->m->layers[i].type;
	if (ex->fuse_into && (ex->fuse_into[i] >= 0 || ex->pad_skip[i]))
		return 0;
	if ((ex->same_as && ex->same_as[i] >= 0) || (ex->pool_in_add && ex->pool_in_add[i]))
		return 0;
	return t != WF_LAYER_INPUT && t != WF_LAYER_FLATTEN && (t != WF_LAYER_DROPOUT || training);
}

int wf_exec_runs(const wf_exec *ex, int i)
{
	return runs(ex, i, 0);
}

static int layer_forward(wf_exec *ex, int i, int n, int training, uint64_t seed)
{
	wf_model *m = ex->m;
	wf_backend *be = ex->be;
	const wf_layer *l = &m->layers[i];
	wf_plan **plan = ex->eval_plans && !training ? &ex->eval_plans[i] : &ex->plans[i];
	float *y = ex->act[i];
	const float *x = l->ninputs ? ex->act[l->inputs[0]] : NULL;
	size_t sz = (size_t)n * wf_layer_size(l);
	union {
		wf_conv_desc conv;
		wf_dense_desc dense;
		wf_bn_desc bn;
		wf_pool_desc pool;
		wf_pad_desc pad;
	} d;

	if (!runs(ex, i, training))
		return 0;
	switch (l->type) {
	case WF_LAYER_CONV2D:
		conv_desc(ex, i, n, &d.conv);
		if (ex->fused) {
			int r = ex->fuse_res[i];
			d.conv.act = ex->fuse_act[i];
			d.conv.residual = r < 0 ? 0 : ex->res_inplace[i] ? 2 : 1;
			d.conv.infer = 1;
			d.conv.io_bf16 = (is_bf16(ex, l->inputs[0]) ? 1 : 0) |
					 (ex->out_bf16[i] ? 2 : 0) |
					 (r >= 0 && is_bf16(ex, r) ? 4 : 0);
			d.conv.qx = ex->qx[i];
			d.conv.x_u8 = ex->qu8[i];
			d.conv.io_q = (is_q(ex, l->inputs[0]) ? 1 : 0) | (ex->qy[i] > 0 ? 2 : 0);
			d.conv.qy = ex->qy[i];
			d.conv.y_u8 = ex->qyu8[i];
			if (r >= 0 && is_q(ex, r)) {
				char u8 = 0;
				d.conv.io_q |= 4;
				tensor_q(ex, r, &d.conv.qr, &u8);
				d.conv.r_u8 = u8;
			}
			return wf_op_conv2d_forward_fused(be, plan, &d.conv, y, x,
							  pv(ex, l->p_kernel), pv(ex, l->p_bias),
							  r >= 0 ? ex->act[r] : NULL);
		}
		return wf_op_conv2d_forward(be, plan, &d.conv, y, x, pv(ex, l->p_kernel),
					    pv(ex, l->p_bias));
	case WF_LAYER_DENSE:
		if (ex->qx && ex->qx[i] > 0) { /* int8: a 1x1 conv over one pixel (plan_int8) */
			wf_conv_desc_init(&d.conv, n, 1, 1, m->layers[l->inputs[0]].oc, l->units, 1,
					  1, 1, 1, 1, 1, 1, 0, 0, 0, l->use_bias);
			d.conv.infer = 1;
			d.conv.qx = ex->qx[i];
			d.conv.x_u8 = ex->qu8[i];
			d.conv.io_q = is_q(ex, l->inputs[0]) ? 1 : 0;
			return wf_op_conv2d_forward_fused(be, plan, &d.conv, y, x,
							  pv(ex, l->p_kernel), pv(ex, l->p_bias),
							  NULL);
		}
		dense_desc(ex, i, n, &d.dense);
		return wf_op_dense_forward(be, plan, &d.dense, y, x, pv(ex, l->p_kernel),
					   pv(ex, l->p_bias));
	case WF_LAYER_BATCHNORM:
		bn_desc(ex, i, n, &d.bn);
		return wf_op_batchnorm_forward(be, plan, &d.bn, training && !l->frozen, y,
					       ex->save_mean[i], ex->save_invstd[i], x,
					       pv(ex, l->p_gamma), pv(ex, l->p_beta),
					       ex->state + m->views[l->s_mean].offset,
					       ex->state + m->views[l->s_var].offset);
	case WF_LAYER_RELU:
	case WF_LAYER_RELU6:
		if (ex->qy && ex->qy[i] > 0) /* to u8 for int8 convs (plan_int8) */
			return wf_op_to_u8(be, sz, y, x, NULL, ex->qy[i]);
		if (ex->fused && ex->out_bf16[i]) /* to bf16 for bf16 convs (fuse_plan) */
			return wf_op_to_bf16(be, sz, y, x, l->type == WF_LAYER_RELU ? 1 : 2);
		return wf_op_act_forward(be, l->type == WF_LAYER_RELU ? WF_ACT_RELU : WF_ACT_RELU6,
					 sz, y, x);
	case WF_LAYER_ADD: {
		if (ex->qy && ex->qy[i] > 0) { /* u8 for the concat reading it (plan_int8) */
			int a = pool_of(ex, l->inputs[0]), b = pool_of(ex, l->inputs[1]);
			if (a < 0 && b < 0)
				return wf_op_to_u8(be, sz, y, x, ex->act[l->inputs[1]], ex->qy[i]);
			/* one pool (of tensor px) and the other input, or one pool twice */
			int px = m->layers[a >= 0 ? a : b].inputs[0];
			const wf_layer *xl = &m->layers[px];
			const float *other = a >= 0 && b >= 0 ? NULL : ex->act[l->inputs[a >= 0]];
			return wf_op_avgpool3_to_u8(be, n, xl->oh, xl->ow, xl->oc, y, ex->act[px],
						    other ? 1.0f : 2.0f, other, ex->qy[i]);
		}
		int h = ex->tfused ? is_bf16(ex, l->inputs[0]) | is_bf16(ex, l->inputs[1]) << 1 : 0;
		if (h || relu_inside(ex, i))
			return wf_op_add_mixed(be, sz, y, x, ex->act[l->inputs[1]], h,
					       relu_inside(ex, i));
		int rc = wf_op_add(be, sz, y, x, ex->act[l->inputs[1]]);
		for (int k = 2; k < l->ninputs && rc == 0; k++)
			rc = wf_op_accumulate(be, sz, y, ex->act[l->inputs[k]]);
		return rc;
	}
	case WF_LAYER_CONCAT: {
		int widths[WF_MAX_INPUTS] = {0};
		const float *xs[WF_MAX_INPUTS] = {0};
		unsigned u8_in = 0;
		for (int k = 0; k < l->ninputs; k++) {
			widths[k] = m->layers[l->inputs[k]].oc;
			xs[k] = ex->act[l->inputs[k]];
			/* plan_int8 makes an input u8 only in the concat's scale */
			int q = ex->qy ? q_producer(ex, l->inputs[k]) : -1;
			if (q >= 0 && ex->qy[q] != ex->qy[i])
				return WF_EINTERNAL;
			u8_in |= (unsigned)(q >= 0) << k;
		}
		if (ex->qy && ex->qy[i] > 0) /* the u8 relu reading it (plan_int8) */
			return wf_op_concat_u8(be, (size_t)n * l->oh * l->ow, l->ninputs, widths, y,
					       (const void *const *)xs, u8_in, ex->qy[i]);
		return wf_op_concat_forward(be, (size_t)n * l->oh * l->ow, l->ninputs, widths, y,
					    xs);
	}
	case WF_LAYER_MAXPOOL:
	case WF_LAYER_AVGPOOL:
		pool_desc(ex, i, n, &d.pool);
		return wf_op_pool_forward(be, plan, &d.pool, y, x);
	case WF_LAYER_GAP: {
		const wf_layer *xl = &m->layers[l->inputs[0]];
		int q = ex->qy ? q_producer(ex, l->inputs[0]) : -1;
		if (q >= 0)
			return wf_op_gap_q8(be, n, xl->oh * xl->ow, xl->oc, y, x, ex->qy[q],
					    ex->qyu8[q]);
		return wf_op_gap_forward(be, n, xl->oh * xl->ow, xl->oc, y, x);
	}
	case WF_LAYER_ZEROPAD:
	case WF_LAYER_CROP: pad_desc(ex, i, n, &d.pad); return wf_op_pad_forward(be, &d.pad, y, x);
	case WF_LAYER_DROPOUT:
		return wf_op_dropout_forward(be, sz, l->rate,
					     wf_hash3(seed, (uint64_t)i, 0x64726f70), y,
					     ex->mask[i], x);
	default: return WF_EINTERNAL;
	}
}

int wf_exec_layer_forward(wf_exec *ex, int i, int n)
{
	return layer_forward(ex, i, n, 0, 0);
}

/* Bytes of one row of layer j's own memory (its element size: u8, bf16 or
 * float). */
static size_t row_bytes(const wf_exec *ex, int j)
{
	size_t e = ex->qy && ex->qy[j] > 0 ? 1 : ex->out_bf16 && ex->out_bf16[j] ? 2 : 4;
	return e * wf_layer_size(&ex->m->layers[j]);
}

/* Where each layer's output is in a forward, from row r on (a tile's rows:
 * exec_tile.c); images: read in place (else layer 0's own memory). */
static void set_acts(wf_exec *ex, const float *images, int r, int training)
{
	const wf_model *m = ex->m;
	for (int i = 0; i < m->nlayers; i++) {
		int a = alias_src(ex, i);
		if (i == 0 && images)
			ex->act[0] = (float *)images + (size_t)r * wf_layer_size(&m->layers[0]);
		else if (a >= 0)
			ex->act[i] = ex->act[a];
		else if (m->layers[i].type == WF_LAYER_DROPOUT && !training)
			ex->act[i] = ex->act[m->layers[i].inputs[0]]; /* a training executor's
								       * evaluation forward */
		else
			ex->act[i] = (float *)((char *)ex->own[i] + (size_t)r * row_bytes(ex, i));
	}
}

int wf_exec_forward(wf_exec *ex, const float *images, int n, int training, uint64_t dropout_seed)
{
	wf_model *m = ex->m;
	wf_backend *be = ex->be;
	ex->n = 0;
	ex->have_loss = 0;
	if (!ex->arena)
		return exec_fail(ex, WF_ENOMEM, "executor: it ran out of memory; create it again");
	if (n < 1 || n > ex->max_batch)
		return exec_fail(ex, WF_EINVAL, "forward: batch %d is out of range [1, %d]", n,
				 ex->max_batch);
	if (training && !ex->training)
		return exec_fail(ex, WF_EINVAL,
				 "forward: training mode needs an executor created for training");
	/* an inference executor on host memory reads the images where they are
	 * (nothing writes layer 0's memory: plan_inplace never picks it); a
	 * training executor's backward reads them after forward returns */
	int in_place = !ex->training && (be->caps & WF_CAP_HOST_MEM);
	int rc = ex->trial >= 0 ? wf_branches_trial_before(ex) : 0;
	if (rc)
		return rc;
	int rows = wf_tiles_before(ex, n);
	if (rows < 0)
		return exec_fail(ex, WF_ENOMEM, "forward: out of memory for the tiles' plans");
	set_acts(ex, in_place ? images : NULL, 0, training);
	size_t bytes = (size_t)n * wf_layer_size(&m->layers[0]) * sizeof(float);
	rc = in_place ? 0 : wf_op_to_device(be, ex->act[0], images, bytes);
	if (rc)
		return op_fail(ex, rc, 0, "copy to device");
	double t0 = wf_now();
	if (ex->br) {
		int failed = 0;
		if ((rc = wf_branches_forward(ex, n, &failed)) != 0)
			return op_fail(ex, rc, failed, "forward");
	} else {
		int step = rows ? rows : n;
		for (int r = 0; r < n && !rc; r += step) {
			if (rows)
				set_acts(ex, images, r, 0);
			for (int i = 1; i < m->nlayers && !rc; i++) {
				be->err.msg[0] = '\0';
				if ((rc = layer_forward(ex, i, step, training, dropout_seed)) != 0)
					rc = op_fail(ex, rc, i, "forward");
			}
		}
		if (rows && !rc)
			set_acts(ex, images, 0, 0);
		if (rc) {
			wf_tiles_after(ex, n, rows, -1);
			return rc;
		}
	}
	wf_tiles_after(ex, n, rows, wf_now() - t0);
	if (ex->trial >= 0)
		wf_branches_trial_after(ex, wf_now() - t0);
	ex->n = n;
	ex->fwd_training = training != 0;
	return 0;
}

/* ---- outputs and loss --------------------------------------------------- */

size_t wf_exec_bytes(const wf_exec *ex)
{
	return ex->bytes;
}

int wf_exec_logits(wf_exec *ex, float *out)
{
	if (!ex->n)
		return exec_fail(ex, WF_EINVAL, "logits: no forward has run");
	size_t bytes = (size_t)ex->n * ex->m->classes * sizeof(float);
	int rc = wf_op_to_host(ex->be, out, ex->act[ex->m->output], bytes);
	return rc ? op_fail(ex, rc, ex->m->output, "copy to host") : 0;
}

int wf_exec_probs(wf_exec *ex, float *out)
{
	if (!ex->n)
		return exec_fail(ex, WF_EINVAL, "probs: no forward has run");
	wf_backend *be = ex->be;
	int n = ex->n, k = ex->m->classes;
	int rc = wf_op_softmax_xent_forward(be, n, k, ex->probs, ex->losses, ex->act[ex->m->output],
					    NULL);
	if (!rc)
		rc = wf_op_to_host(be, out, ex->probs, (size_t)n * k * sizeof(float));
	return rc ? op_fail(ex, rc, ex->m->output, "softmax") : 0;
}

int wf_exec_loss(wf_exec *ex, const int32_t *labels, float *loss, int *correct)
{
	wf_backend *be = ex->be;
	int n = ex->n, k = ex->m->classes, rc;
	if (!n)
		return exec_fail(ex, WF_EINVAL, "loss: no forward has run");
	for (int i = 0; i < n; i++)
		if (labels[i] < 0 || labels[i] >= k)
			return exec_fail(ex, WF_EINVAL,
					 "loss: labels[%d] = %d is outside [0, %d) (the model has "
					 "%d classes)",
					 i, (int)labels[i], k, k);
	if ((rc = wf_op_to_device(be, ex->labels, labels, (size_t)n * sizeof(int32_t))) ||
	    (rc = wf_op_softmax_xent_forward(be, n, k, ex->probs, ex->losses,
					     ex->act[ex->m->output], ex->labels)) ||
	    (rc = wf_op_to_host(be, ex->h_losses, ex->losses, (size_t)n * sizeof(float))) ||
	    (rc = wf_op_to_host(be, ex->h_probs, ex->probs, (size_t)n * k * sizeof(float))))
		return op_fail(ex, rc, ex->m->output, "loss");
	double sum = 0;
	int good = 0;
	for (int i = 0; i < n; i++) {
		const float *p = ex->h_probs + (size_t)i * k;
		int best = 0;
		for (int c = 1; c < k; c++)
			if (p[c] > p[best])
				best = c;
		good += best == labels[i];
		sum += ex->h_losses[i];
	}
	if (ex->smoothing > 0) { /* loss and dlogits against the smoothed targets */
		if (ex->h_dlogits_cap < n) {
			free(ex->h_dlogits);
			ex->h_dlogits_cap = 0;
			if (!(ex->h_dlogits = malloc(sizeof(float) * (size_t)n * k)))
				return exec_fail(ex, WF_ENOMEM, "loss: out of memory");
			ex->h_dlogits_cap = n;
		}
		float s = ex->smoothing, off = s / (float)k;
		sum = 0;
		for (int i = 0; i < n; i++) {
			const float *p = ex->h_probs + (size_t)i * k;
			float *dl = ex->h_dlogits + (size_t)i * k;
			double mean_nll = 0;
			for (int c = 0; c < k; c++) {
				mean_nll -= log(p[c] > 1e-30f ? (double)p[c] : 1e-30);
				dl[c] = p[c] - off - (c == labels[i] ? 1.0f - s : 0.0f);
			}
			sum += (1.0 - s) * ex->h_losses[i] + s * mean_nll / k;
		}
	}
	if (loss)
		*loss = (float)(sum / n);
	if (correct)
		*correct = good;
	ex->have_loss = 1;
	return 0;
}

int wf_exec_set_label_smoothing(wf_exec *ex, float s)
{
	if (!(s >= 0 && s < 1))
		return exec_fail(ex, WF_EINVAL, "label smoothing must be in [0, 1), got %g",
				 (double)s);
	ex->smoothing = s;
	return 0;
}

/* ---- backward ----------------------------------------------------------- */

/* Where layer i writes the gradient of its input j: straight into dact[j] the
 * first time in this backward, else into scratch (*acc = 1: accumulate after).
 * NULL when no parameter lies before j. */
static float *dx_target(wf_exec *ex, int j, int *acc)
{
	*acc = 0;
	if (!ex->need_grad[j])
		return NULL;
	if (!ex->gdone[j]) {
		ex->gdone[j] = 1;
		return ex->dact[j];
	}
	*acc = 1;
	return ex->scratch;
}

static int dx_finish(wf_exec *ex, int j, int acc, int n)
{
	if (!acc)
		return 0;
	size_t sz = (size_t)n * wf_layer_size(&ex->m->layers[j]);
	return wf_op_accumulate(ex->be, sz, ex->dact[j], ex->scratch);
}

/* dx_j = dy (add, flatten): a copy on first write (converted when j is kept
 * in bf16: its only reader is this add), else accumulate straight from dy. */
static int pass_through(wf_exec *ex, int j, const float *dy, int n)
{
	if (!ex->need_grad[j])
		return 0;
	size_t sz = (size_t)n * wf_layer_size(&ex->m->layers[j]);
	if (!ex->gdone[j]) {
		ex->gdone[j] = 1;
		if (ex->tfused && is_bf16(ex, j))
			return wf_op_to_bf16(ex->be, sz, ex->dact[j], dy, 0);
		return wf_op_copy(ex->be, ex->dact[j], dy, sz * sizeof(float));
	}
	return wf_op_accumulate(ex->be, sz, ex->dact[j], dy);
}

static int concat_backward(wf_exec *ex, int i, int n, const float *dy)
{
	const wf_layer *l = &ex->m->layers[i];
	int widths[WF_MAX_INPUTS] = {0}, later[WF_MAX_INPUTS] = {0}, nlater = 0, rc;
	float *dxs[WF_MAX_INPUTS] = {0};
	size_t rows = (size_t)n * l->oh * l->ow;
	for (int k = 0; k < l->ninputs; k++) {
		int j = l->inputs[k], acc;
		widths[k] = ex->m->layers[j].oc;
		dxs[k] = dx_target(ex, j, &acc);
		if (acc) {
			dxs[k] = NULL;
			later[nlater++] = k;
		}
	}
	if ((rc = wf_op_concat_backward(ex->be, rows, l->ninputs, widths, dxs, dy)))
		return rc;
	/* inputs seen before (say the same tensor twice): one split each into scratch */
	for (int a = 0; a < nlater; a++) {
		for (int k = 0; k < l->ninputs; k++)
			dxs[k] = k == later[a] ? ex->scratch : NULL;
		if ((rc = wf_op_concat_backward(ex->be, rows, l->ninputs, widths, dxs, dy)) ||
		    (rc = dx_finish(ex, l->inputs[later[a]], 1, n)))
			return rc;
	}
	return 0;
}

/* The backward of an add with its relu inside (train_fuse_plan): dy (the
 * relu's, whose memory is the add's) masked where the output is 0, into each
 * input's gradient as pass_through would write it. */
static int add_relu_backward(wf_exec *ex, int i, int n)
{
	const wf_layer *l = &ex->m->layers[i];
	void *d[2] = {NULL, NULL};
	int mode[2] = {0, 0};
	for (int k = 0; k < 2; k++) {
		int j = l->inputs[k];
		if (!ex->need_grad[j])
			continue;
		d[k] = ex->dact[j];
		mode[k] = ex->gdone[j] ? 2 : is_bf16(ex, j) ? 3 : 1;
		ex->gdone[j] = 1;
	}
	size_t sz = (size_t)n * wf_layer_size(l);
	return wf_op_add_relu_backward(ex->be, sz, ex->dact[i], ex->act[i], d[0], mode[0], d[1],
				       mode[1]);
}

static int layer_backward(wf_exec *ex, int i, int n)
{
	wf_model *m = ex->m;
	wf_backend *be = ex->be;
	const wf_layer *l = &m->layers[i];
	wf_plan **plan = &ex->plans[i];
	const float *dy = ex->dact[i], *y = ex->act[i];
	int j = l->ninputs ? l->inputs[0] : 0, acc = 0, rc;
	const float *x = l->ninputs ? ex->act[j] : NULL;
	size_t sz = (size_t)n * wf_layer_size(l);
	union {
		wf_conv_desc conv;
		wf_dense_desc dense;
		wf_bn_desc bn;
		wf_pool_desc pool;
		wf_pad_desc pad;
	} d;

	switch (l->type) {
	case WF_LAYER_ADD:
		if (relu_inside(ex, i))
			return add_relu_backward(ex, i, n);
		for (int k = 0; k < l->ninputs; k++)
			if ((rc = pass_through(ex, l->inputs[k], dy, n)))
				return rc;
		return 0;
	case WF_LAYER_FLATTEN: return pass_through(ex, j, dy, n);
	case WF_LAYER_CONCAT: return concat_backward(ex, i, n, dy);
	default: break;
	}
	if (grad_alias(ex, i) >= 0) { /* a relu inside its batch norm, a padding in */
		ex->gdone[j] = 1;     /* its conv: j's gradient memory is this one's */
		return 0;
	}

	float *dx = l->ninputs ? dx_target(ex, j, &acc) : NULL;
	if (!dx && ex->pend[i] == 0)
		return 0; /* nothing upstream wants a gradient */
	switch (l->type) {
	case WF_LAYER_CONV2D:
		conv_desc(ex, i, n, &d.conv);
		if (acc && wf_backend_caps_of(be).dx_acc) { /* added in place, no scratch */
			d.conv.dx_acc = 1, acc = 0;
			dx = ex->dact[j];
		}
		rc = wf_op_conv2d_backward(
			be, plan, &d.conv, dx, l->frozen ? NULL : gv(ex, l->p_kernel),
			l->frozen ? NULL : gv(ex, l->p_bias), dy, x, pv(ex, l->p_kernel));
		break;
	case WF_LAYER_DENSE:
		dense_desc(ex, i, n, &d.dense);
		rc = wf_op_dense_backward(
			be, plan, &d.dense, dx, l->frozen ? NULL : gv(ex, l->p_kernel),
			l->frozen ? NULL : gv(ex, l->p_bias), dy, x, pv(ex, l->p_kernel));
		break;
	case WF_LAYER_BATCHNORM:
		bn_desc(ex, i, n, &d.bn);
		rc = wf_op_batchnorm_backward(be, plan, &d.bn, dx, gv(ex, l->p_gamma),
					      gv(ex, l->p_beta), dy, x, pv(ex, l->p_gamma),
					      ex->save_mean[i], ex->save_invstd[i]);
		break;
	case WF_LAYER_RELU:
	case WF_LAYER_RELU6:
		rc = wf_op_act_backward(be, l->type == WF_LAYER_RELU ? WF_ACT_RELU : WF_ACT_RELU6,
					sz, dx, dy, y);
		break;
	case WF_LAYER_MAXPOOL:
	case WF_LAYER_AVGPOOL:
		pool_desc(ex, i, n, &d.pool);
		rc = wf_op_pool_backward(be, plan, &d.pool, dx, dy, x, y);
		break;
	case WF_LAYER_GAP: {
		const wf_layer *xl = &m->layers[j];
		rc = wf_op_gap_backward(be, n, xl->oh * xl->ow, xl->oc, dx, dy);
		break;
	}
	case WF_LAYER_ZEROPAD:
	case WF_LAYER_CROP:
		pad_desc(ex, i, n, &d.pad);
		rc = wf_op_pad_backward(be, &d.pad, dx, dy);
		break;
	case WF_LAYER_DROPOUT:
		rc = wf_op_dropout_backward(be, sz, l->rate, dx, dy, ex->mask[i]);
		break;
	default: rc = WF_EINTERNAL;
	}
	if (rc == 0 && dx)
		rc = dx_finish(ex, j, acc, n);
	return rc;
}

int wf_exec_backward(wf_exec *ex, float grad_scale, wf_grad_ready_fn ready, void *arg)
{
	wf_model *m = ex->m;
	wf_backend *be = ex->be;
	int n = ex->n, rc;
	if (!ex->training)
		return exec_fail(ex, WF_EINVAL, "backward: the executor was created for inference");
	if (!n || !ex->have_loss)
		return exec_fail(ex, WF_EINVAL, "backward: run forward and loss first");
	if (!ex->fwd_training)
		return exec_fail(ex, WF_EINVAL, "backward: the last forward ran in inference mode");
	memset(ex->gdone, 0, (size_t)m->nlayers);
	be->err.msg[0] = '\0';
	if (ex->smoothing > 0) {
		size_t nk = (size_t)n * (size_t)m->classes;
		for (size_t i = 0; i < nk; i++)
			ex->h_dlogits[i] *= grad_scale;
		rc = wf_op_to_device(be, ex->dact[m->output], ex->h_dlogits, nk * sizeof(float));
	} else {
		rc = wf_op_softmax_xent_backward(be, n, m->classes, ex->dact[m->output], ex->probs,
						 ex->labels, grad_scale);
	}
	if (rc)
		return op_fail(ex, rc, m->output, "loss backward");
	ex->gdone[m->output] = 1;
	size_t done = 0;
	for (int i = m->nlayers - 1; i >= 1; i--) {
		if (!ex->gdone[i])
			continue; /* no parameter downstream of... nothing reached it */
		be->err.msg[0] = '\0';
		if ((rc = layer_backward(ex, i, n)) != 0)
			return op_fail(ex, rc, i, "backward");
		if (ex->pend[i] > done) {
			done = ex->pend[i];
			if (ready) {
				if ((rc = wf_op_sync(be)) != 0)
					return op_fail(ex, rc, i, "sync");
				ready(arg, done);
			}
		}
	}
	ex->have_loss = 0; /* one backward per forward+loss */
	return 0;
}

/* ---- buffers ------------------------------------------------------------ */

const float *wf_exec_params(const wf_exec *ex)
{
	return ex->params;
}

/* After the parameters changed: an inference executor's plans keep reordered,
 * fused weights; they are built again at the next forward. */
static void params_changed(wf_exec *ex)
{
	if (!ex->training)
		for (int i = 0; i < ex->m->nlayers; i++)
			wf_backend_plan_free(ex->be, &ex->plans[i]);
	wf_tiles_free(ex);
}

float *wf_exec_params_begin(wf_exec *ex)
{
	return ex->params;
}

int wf_exec_params_end(wf_exec *ex)
{
	params_changed(ex);
	return 0;
}

int wf_exec_optim_step(wf_exec *ex, const wf_optim_cfg *c, long step, float *m, float *v,
		       float grad_scale)
{
	int rc = wf_optim_apply(ex->be, c, step, ex->m->nparams, ex->params, ex->grads, m, v,
				grad_scale);
	params_changed(ex);
	return rc;
}

float *wf_exec_grads(wf_exec *ex)
{
	return ex->grads;
}

float *wf_exec_state(wf_exec *ex)
{
	return ex->state;
}

int wf_exec_zero_grads(wf_exec *ex)
{
	if (!ex->grads)
		return exec_fail(ex, WF_EINVAL,
				 "zero_grads: the executor was created for inference");
	int rc = wf_op_zero(ex->be, ex->grads, ex->m->nparams * sizeof(float));
	return rc ? exec_fail(ex, rc, "zero_grads: %s", ex->be->err.msg) : 0;
}

int wf_exec_params_to_host(wf_exec *ex)
{
	if (ex->host)
		return 0;
	wf_backend *be = ex->be;
	int rc = wf_op_to_host(be, ex->m->params, ex->params, ex->m->nparams * sizeof(float));
	if (!rc)
		rc = wf_op_to_host(be, ex->m->state, ex->state, ex->m->nstate * sizeof(float));
	return rc ? exec_fail(ex, rc, "params to host: %s", be->err.msg) : 0;
}

int wf_exec_params_from_host(wf_exec *ex)
{
	params_changed(ex);
	if (ex->host)
		return 0;
	wf_backend *be = ex->be;
	int rc = wf_op_to_device(be, ex->params, ex->m->params, ex->m->nparams * sizeof(float));
	if (!rc)
		rc = wf_op_to_device(be, ex->state, ex->m->state, ex->m->nstate * sizeof(float));
	return rc ? exec_fail(ex, rc, "params to device: %s", be->err.msg) : 0;
}

int wf_exec_fused(const wf_exec *ex)
{
	return ex->nfused;
}

int wf_exec_int8_convs(const wf_exec *ex)
{
	return ex->nint8;
}

int wf_exec_bf16_layers(const wf_exec *ex)
{
	int n = 0;
	for (int i = 0; ex->out_bf16 && i < ex->m->nlayers; i++)
		n += ex->out_bf16[i];
	return n;
}

const char *wf_exec_layer_dtype(const wf_exec *ex, int i)
{
	if (i < 0 || i >= ex->m->nlayers ||
	    (ex->fuse_into && !ex->training && (ex->pad_skip[i] || ex->pool_in_add[i])))
		return NULL;
	if (ex->fuse_into && is_bf16(ex, i))
		return "bf16";
	if (ex->qy && is_q(ex, i))
		return ex->qyu8[q_producer(ex, i)] ? "u8" : "s8";
	return "f32";
}

const float *wf_exec_layer_output(const wf_exec *ex, int i)
{
	if (i < 0 || i >= ex->m->nlayers)
		return NULL;
	if (ex->tfused && (ex->pad_skip[i] || relu_inside(ex, i)))
		return NULL; /* no tensor of its own: its conv pads, its relu's output */
	return ex->act[i];
}

wf_backend *wf_exec_backend(wf_exec *ex)
{
	return ex->be;
}

const char *wf_exec_error(wf_exec *ex)
{
	return ex->err.msg;
}
