/* exec_int8.c: the executor's int8 plan for calibrated models on a backend
 * with int8 convolutions: which convs run in int8, which tensors between
 * them stay u8/s8 and in what scale, relus converted to u8 once, pools and
 * concats that read and write u8, branch sums written u8 for their concat. */
#include "model/model.h"
#include "model/model_priv.h"
#include "model/exec_priv.h"

#include "common/util.h"

#include <math.h>
#include <string.h>

/* The int8 quantisation of layer j's output: symmetric, u8 with scale
 * 255 / max when its calibration range is >= 0, else s8 with 127 / max |x|.
 * A zero padding applied inside its conv adds zeros only, and a max pool
 * or a pick (wf_exec_is_pick) picks among its input's values: their input's (so an
 * int8 max pool needs no rescaling). 0 when the layer has no range. */
int wf_exec_tensor_q(const wf_exec *ex, int j, float *scale, char *u8)
{
	const wf_model *m = ex->m;
	while (ex->pad_skip[j] || m->layers[j].type == WF_LAYER_MAXPOOL ||
	       wf_exec_is_pick(&m->layers[j]))
		j = m->layers[j].inputs[0];
	const wf_layer *l = &m->layers[j];
	if (!l->has_range)
		return 0;
	*u8 = l->range[0] >= 0;
	float amax = *u8 ? l->range[1] : fmaxf(-l->range[0], l->range[1]);
	*scale = (*u8 ? 255.0f : 127.0f) / fmaxf(amax, 1e-20f); /* a range of zeros: any */
	return 1;
}

/* wf_exec_planned_at(j) when layer j's output is kept quantised, else -1. */
int wf_exec_q_producer(const wf_exec *ex, int j)
{
	j = wf_exec_planned_at(ex, j);
	return ex->qy[j] > 0 ? j : -1;
}

int wf_exec_is_q(const wf_exec *ex, int j)
{
	return wf_exec_q_producer(ex, j) >= 0;
}

/* int8 (a backend set to int8 precision): each conv whose input has a
 * calibration range reads it quantised (wf_exec_tensor_q). A conv's output stays
 * quantised, in its own range's scale, when every reader is such a conv
 * reading it as input or as the residual of its fused add, a max pool
 * (through a padding it applies) that only such convs read (that pool then
 * runs on the quantised values), or a global average pool (ResNet50's last
 * block: its conv then adds the residual in place, and the pool's float
 * output dequantises); not a plain add, another pool or the logits. A dense
 * layer whose input has a range runs in int8 as a 1x1 conv over one pixel
 * (its [in, units] kernel is that conv's), its output float. */
/* The relu that reader k is (or aliases: same_as) when wf_exec_plan_int8 made it a
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
	if (l->kh != 3 || l->kw != 3 || l->sh != 1 || l->sw != 1 || !l->same ||
	    wf_exec_is_q(ex, x) || ex->pad_skip[x] || ex->pool_in_add[x] || q == m->output)
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
int wf_exec_pool_of(const wf_exec *ex, int j)
{
	int q = ex->pool_in_add ? pooled_root(ex, j) : -1;
	return q >= 0 && ex->pool_in_add[q] ? q : -1;
}

void wf_exec_plan_int8(wf_exec *ex)
{
	const wf_model *m = ex->m;
	if (!ex->be->int8 || ex->be->bf16)
		return;
	for (int i = 0; i < m->nlayers; i++) {
		float q;
		wf_layer_type t = m->layers[i].type;
		if ((t == WF_LAYER_CONV2D || t == WF_LAYER_DENSE) &&
		    wf_exec_tensor_q(ex, m->layers[i].inputs[0], &q, &ex->qu8[i])) {
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
		if (!wf_exec_relu_read_by_convs(ex, r, 1, 1) ||
		    wf_exec_is_q(ex, m->layers[r].inputs[0]) || !wf_exec_tensor_q(ex, r, &q, &u8) ||
		    !u8)
			continue;
		ex->qy[r] = q, ex->qyu8[r] = 1;
		for (int p = r + 1; p < m->nlayers; p++)
			if (wf_exec_pool_reader(ex, p) == p &&
			    wf_exec_planned_at(ex, m->layers[p].inputs[0]) == r)
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
		int ok = cur != m->output && wf_exec_tensor_q(ex, cur, &q, &ex->qyu8[i]), pool = -1;
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
				int p = wf_exec_pool_reader(ex, k);
				if (p >= 0 && pool < 0) {
					ok &= wf_exec_read_by_convs(ex, p, 1, 0);
					pool = p;
					continue;
				}
				int c = wf_exec_conv_reader(ex, k);
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
		if (ex->res_inplace[i] && wf_exec_is_q(ex, ex->fuse_res[i]) != (ex->qy[i] > 0))
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
			int k = m->layers[c].inputs[e], p = wf_exec_planned_at(ex, k);
			const wf_layer *l = &m->layers[p];
			if (wf_exec_sole_consumer(m, k) != c || ex->qy[p] > 0)
				continue;
			int add = p == k && l->type == WF_LAYER_ADD && l->ninputs == 2 &&
				  !wf_exec_is_q(ex, l->inputs[0]) &&
				  !wf_exec_is_q(ex, l->inputs[1]);
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
