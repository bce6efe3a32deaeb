/* exec_fuse.c: the executor's fusion plans, made once at create. Inference:
 * zero paddings into the convs that read them, conv + bias + residual add +
 * relu/relu6 as one op, a residual written in place, bf16 tensors between
 * convs. Training: batch norm with its relu inside, add + relu in one pass,
 * bf16 tensors from a conv through its batch norm to the next conv or add. */
#include "model/model.h"
#include "model/model_priv.h"
#include "model/exec_priv.h"
#include "kernels/ops.h"

#include "common/util.h"

#include <string.h>

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
		    wf_exec_is_bf16(ex, r) != ex->out_bf16[i])
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
int wf_exec_conv_reader(const wf_exec *ex, int k)
{
	if (ex->pad_skip[k])
		k = wf_exec_sole_consumer(ex->m, k);
	return k >= 0 && ex->m->layers[k].type == WF_LAYER_CONV2D ? k : -1;
}

/* A pool of a 1x1 window: it picks pixels (kernels.h, wf_pool_desc). */
int wf_exec_is_pick(const wf_layer *l)
{
	return (l->type == WF_LAYER_MAXPOOL || l->type == WF_LAYER_AVGPOOL) && l->kh == 1 &&
	       l->kw == 1;
}

/* The pool that reads layer k's output and keeps its values (a max pool, a
 * pick): k itself, or the pool whose padding or cropping k is (pad_skip);
 * else -1. */
int wf_exec_pool_reader(const wf_exec *ex, int k)
{
	while (k >= 0 && ex->pad_skip[k])
		k = wf_exec_sole_consumer(ex->m, k);
	return k >= 0 && (ex->m->layers[k].type == WF_LAYER_MAXPOOL ||
			  wf_exec_is_pick(&ex->m->layers[k]))
		       ? k
		       : -1;
}

/* Do only convs (int8: int8 convs) read layer j's output, each as its
 * input (through a padding it applies), or (pools) pools that keep the
 * values (wf_exec_pool_reader) and that only such convs read? */
int wf_exec_read_by_convs(const wf_exec *ex, int j, int int8, int pools)
{
	const wf_model *m = ex->m;
	int ok = j != m->output;
	for (int k = j + 1; ok && k < m->nlayers; k++)
		for (int e = 0; e < m->layers[k].ninputs; e++)
			if (m->layers[k].inputs[e] == j) {
				int c = wf_exec_conv_reader(ex, k), p = wf_exec_pool_reader(ex, k);
				if (pools && c < 0 && p >= 0)
					ok &= wf_exec_read_by_convs(ex, p, int8, 0);
				else
					ok &= e == 0 && c >= 0 && (!int8 || ex->qx[c] > 0);
			}
	return ok;
}

/* Is r a relu/relu6 of its own (not inside a conv, not an alias of another)
 * that, with the relus aliasing it (same_as), only convs (int8: int8 convs)
 * read, or (pools) pools that only such convs read? Such a relu can write
 * the convs' input type for all of them. */
int wf_exec_relu_read_by_convs(const wf_exec *ex, int r, int int8, int pools)
{
	const wf_model *m = ex->m;
	wf_layer_type t = m->layers[r].type;
	if ((t != WF_LAYER_RELU && t != WF_LAYER_RELU6) || ex->fuse_into[r] >= 0 ||
	    ex->same_as[r] >= 0)
		return 0;
	int ok = 1;
	for (int k = r; ok && k < m->nlayers; k++)
		if (k == r || ex->same_as[k] == r)
			ok &= wf_exec_read_by_convs(ex, k, int8, pools);
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
 * cropping (inference) that only a pick (wf_exec_is_pick) reads is that pool's
 * offset: NASNet's adjust blocks then pool 1x1 with stride 2, so the pool
 * picks every other pixel of the uncropped input, shifted by one. */
static void skip_pads(wf_exec *ex)
{
	const wf_model *m = ex->m;
	for (int i = 0; i < m->nlayers; i++) {
		const wf_layer *l = &m->layers[i];
		int c = wf_exec_sole_consumer(m, i);
		if (!ex->training && l->type == WF_LAYER_CROP && c >= 0 &&
		    wf_exec_is_pick(&m->layers[c])) {
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
			   (!ex->training || wf_exec_sole_consumer(m, l->inputs[0]) == i);
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
int wf_exec_relu_inside(const wf_exec *ex, int i)
{
	return ex->tfused && ex->fuse_act[i];
}

/* Training: the input whose gradient memory layer i's is (a relu fused into
 * its batch norm, a zero padding its conv applies), else -1. */
int wf_exec_grad_alias(const wf_exec *ex, int i)
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
void wf_exec_fuse_plan(wf_exec *ex)
{
	const wf_model *m = ex->m;
	skip_pads(ex);
	for (int i = 0; i < m->nlayers; i++)
		ex->fuse_into[i] = ex->fuse_res[i] = -1;
	for (int i = 0; i < m->nlayers; i++) {
		if (m->layers[i].type != WF_LAYER_CONV2D || ex->fuse_into[i] >= 0)
			continue;
		int cur = i, c = wf_exec_sole_consumer(m, cur);
		if (c >= 0 && m->layers[c].type == WF_LAYER_ADD && m->layers[c].ninputs == 2) {
			const wf_layer *a = &m->layers[c];
			int other = a->inputs[0] == cur ? a->inputs[1] : a->inputs[0];
			if (other < i) {
				ex->fuse_res[i] = other;
				ex->fuse_into[c] = i;
				ex->nfused++;
				cur = c;
				c = wf_exec_sole_consumer(m, cur);
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
				int p = wf_exec_pool_reader(ex, j);
				if (p >= 0 && pool < 0) {
					all &= wf_exec_read_by_convs(ex, p, 0, 0);
					pool = p;
					continue;
				}
				int conv_x = wf_exec_conv_reader(ex, j) >= 0;
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
		if (wf_exec_relu_read_by_convs(ex, r, 0, 0) &&
		    !wf_exec_is_bf16(ex, m->layers[r].inputs[0]))
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
void wf_exec_train_fuse_plan(wf_exec *ex)
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
		int t = b, r = wf_exec_sole_consumer(m, b);
		wf_layer_type rt = r >= 0 ? m->layers[r].type : WF_LAYER_INPUT;
		if (rt == WF_LAYER_RELU || (rt == WF_LAYER_RELU6 && relu6)) {
			ex->fuse_into[r] = b;
			ex->fuse_act[b] = rt == WF_LAYER_RELU ? 1 : 2;
			ex->nfused++;
			t = r;
		}
		int c = l->inputs[0], c2 = wf_exec_sole_consumer(m, t);
		wf_layer_type t2 = c2 >= 0 ? m->layers[c2].type : WF_LAYER_INPUT;
		if (ex->be->bf16 && m->layers[c].type == WF_LAYER_CONV2D &&
		    wf_exec_sole_consumer(m, c) == b &&
		    (t2 == WF_LAYER_CONV2D || (t2 == WF_LAYER_ADD && m->layers[c2].ninputs == 2))) {
			ex->out_bf16[c] = ex->out_bf16[b] = 1;
		}
	}
	/* a two-input add of two different tensors runs its sole relu consumer
	 * inside (ResNet's block outputs): one pass forward, and backward one
	 * pass that masks dy and writes both inputs' gradients */
	for (int a = 0; a < m->nlayers; a++) {
		const wf_layer *l = &m->layers[a];
		int r = wf_exec_sole_consumer(m, a);
		if (l->type == WF_LAYER_ADD && l->ninputs == 2 && l->inputs[0] != l->inputs[1] &&
		    r >= 0 && m->layers[r].type == WF_LAYER_RELU) {
			ex->fuse_into[r] = a;
			ex->fuse_act[a] = 1;
			ex->nfused++;
		}
	}
}
