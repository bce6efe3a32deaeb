/* exec_run.c: running a planned executor: forward in topological order
 * (each layer on its backend op, through the fused, bf16 and int8 plans),
 * the loss and its outputs, and backward in reverse order, where ops
 * overwrite dx: the first consumer of a tensor writes its gradient, later
 * ones write the scratch and accumulate it (or add in place where the
 * backend can). Nothing is allocated per step. */
#include "model/model.h"
#include "model/model_priv.h"
#include "model/exec_priv.h"
#include "kernels/ops.h"

#include "common/util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

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
		d->io_bf16 =
			(wf_exec_is_bf16(ex, l->inputs[0]) ? 1 : 0) | (ex->out_bf16[i] ? 2 : 0);
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
		d->relu = wf_exec_relu_inside(ex, i);
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
			d.conv.io_bf16 = (wf_exec_is_bf16(ex, l->inputs[0]) ? 1 : 0) |
					 (ex->out_bf16[i] ? 2 : 0) |
					 (r >= 0 && wf_exec_is_bf16(ex, r) ? 4 : 0);
			d.conv.qx = ex->qx[i];
			d.conv.x_u8 = ex->qu8[i];
			d.conv.io_q =
				(wf_exec_is_q(ex, l->inputs[0]) ? 1 : 0) | (ex->qy[i] > 0 ? 2 : 0);
			d.conv.qy = ex->qy[i];
			d.conv.y_u8 = ex->qyu8[i];
			if (r >= 0 && wf_exec_is_q(ex, r)) {
				char u8 = 0;
				d.conv.io_q |= 4;
				wf_exec_tensor_q(ex, r, &d.conv.qr, &u8);
				d.conv.r_u8 = u8;
			}
			return wf_op_conv2d_forward_fused(be, plan, &d.conv, y, x,
							  pv(ex, l->p_kernel), pv(ex, l->p_bias),
							  r >= 0 ? ex->act[r] : NULL);
		}
		return wf_op_conv2d_forward(be, plan, &d.conv, y, x, pv(ex, l->p_kernel),
					    pv(ex, l->p_bias));
	case WF_LAYER_DENSE:
		if (ex->qx &&
		    ex->qx[i] > 0) { /* int8: a 1x1 conv over one pixel (wf_exec_plan_int8) */
			wf_conv_desc_init(&d.conv, n, 1, 1, m->layers[l->inputs[0]].oc, l->units, 1,
					  1, 1, 1, 1, 1, 1, 0, 0, 0, l->use_bias);
			d.conv.infer = 1;
			d.conv.qx = ex->qx[i];
			d.conv.x_u8 = ex->qu8[i];
			d.conv.io_q = wf_exec_is_q(ex, l->inputs[0]) ? 1 : 0;
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
		if (ex->qy && ex->qy[i] > 0) /* to u8 for int8 convs (wf_exec_plan_int8) */
			return wf_op_to_u8(be, sz, y, x, NULL, ex->qy[i]);
		if (ex->fused && ex->out_bf16[i]) /* to bf16 for bf16 convs (wf_exec_fuse_plan) */
			return wf_op_to_bf16(be, sz, y, x, l->type == WF_LAYER_RELU ? 1 : 2);
		return wf_op_act_forward(be, l->type == WF_LAYER_RELU ? WF_ACT_RELU : WF_ACT_RELU6,
					 sz, y, x);
	case WF_LAYER_ADD: {
		if (ex->qy &&
		    ex->qy[i] > 0) { /* u8 for the concat reading it (wf_exec_plan_int8) */
			int a = wf_exec_pool_of(ex, l->inputs[0]),
			    b = wf_exec_pool_of(ex, l->inputs[1]);
			if (a < 0 && b < 0)
				return wf_op_to_u8(be, sz, y, x, ex->act[l->inputs[1]], ex->qy[i]);
			/* one pool (of tensor px) and the other input, or one pool twice */
			int px = m->layers[a >= 0 ? a : b].inputs[0];
			const wf_layer *xl = &m->layers[px];
			const float *other = a >= 0 && b >= 0 ? NULL : ex->act[l->inputs[a >= 0]];
			return wf_op_avgpool3_to_u8(be, n, xl->oh, xl->ow, xl->oc, y, ex->act[px],
						    other ? 1.0f : 2.0f, other, ex->qy[i]);
		}
		int h = ex->tfused ? wf_exec_is_bf16(ex, l->inputs[0]) |
					     wf_exec_is_bf16(ex, l->inputs[1]) << 1
				   : 0;
		if (h || wf_exec_relu_inside(ex, i))
			return wf_op_add_mixed(be, sz, y, x, ex->act[l->inputs[1]], h,
					       wf_exec_relu_inside(ex, i));
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
			/* wf_exec_plan_int8 makes an input u8 only in the concat's scale */
			int q = ex->qy ? wf_exec_q_producer(ex, l->inputs[k]) : -1;
			if (q >= 0 && ex->qy[q] != ex->qy[i])
				return WF_EINTERNAL;
			u8_in |= (unsigned)(q >= 0) << k;
		}
		if (ex->qy && ex->qy[i] > 0) /* the u8 relu reading it (wf_exec_plan_int8) */
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
		int q = ex->qy ? wf_exec_q_producer(ex, l->inputs[0]) : -1;
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
		int a = wf_exec_alias_src(ex, i);
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

/* The layer hook before layer i (set: ex->hook), for a layer that reads
 * parameters or state. */
static int call_hook(wf_exec *ex, int i)
{
	if (ex->hook_hi[i] == ex->hook_lo[i] && !ex->hook_state[i])
		return 0;
	int rc = ex->hook(ex->hook_arg, i, ex->hook_lo[i], ex->hook_hi[i], ex->hook_state[i]);
	return rc ? wf_exec_fail(ex, rc, "forward: the layer hook failed before layer %s",
				 ex->m->layers[i].name)
		  : 0;
}

int wf_exec_forward(wf_exec *ex, const float *images, int n, int training, uint64_t dropout_seed)
{
	wf_model *m = ex->m;
	wf_backend *be = ex->be;
	ex->n = 0;
	ex->have_loss = 0;
	if (!ex->arena)
		return wf_exec_fail(ex, WF_ENOMEM,
				    "executor: it ran out of memory; create it again");
	if (n < 1 || n > ex->max_batch)
		return wf_exec_fail(ex, WF_EINVAL, "forward: batch %d is out of range [1, %d]", n,
				    ex->max_batch);
	if (training && !ex->training)
		return wf_exec_fail(
			ex, WF_EINVAL,
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
		return wf_exec_fail(ex, WF_ENOMEM, "forward: out of memory for the tiles' plans");
	set_acts(ex, in_place ? images : NULL, 0, training);
	size_t bytes = (size_t)n * wf_layer_size(&m->layers[0]) * sizeof(float);
	rc = in_place ? 0 : wf_op_to_device(be, ex->act[0], images, bytes);
	if (rc)
		return wf_exec_op_fail(ex, rc, 0, "copy to device");
	double t0 = wf_now();
	if (ex->hook && ex->br) /* branches run layers at once: every layer's values first */
		for (int i = 1; i < m->nlayers && !rc; i++)
			rc = call_hook(ex, i);
	if (rc)
		return rc;
	if (ex->br) {
		int failed = 0;
		if ((rc = wf_branches_forward(ex, n, &failed)) != 0)
			return wf_exec_op_fail(ex, rc, failed, "forward");
	} else {
		int step = rows ? rows : n;
		for (int r = 0; r < n && !rc; r += step) {
			if (rows)
				set_acts(ex, images, r, 0);
			for (int i = 1; i < m->nlayers && !rc; i++) {
				if (ex->hook && r == 0 && (rc = call_hook(ex, i)) != 0)
					break;
				be->err.msg[0] = '\0';
				if ((rc = layer_forward(ex, i, step, training, dropout_seed)) != 0)
					rc = wf_exec_op_fail(ex, rc, i, "forward");
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
		return wf_exec_fail(ex, WF_EINVAL, "logits: no forward has run");
	size_t bytes = (size_t)ex->n * ex->m->classes * sizeof(float);
	int rc = wf_op_to_host(ex->be, out, ex->act[ex->m->output], bytes);
	return rc ? wf_exec_op_fail(ex, rc, ex->m->output, "copy to host") : 0;
}

int wf_exec_probs(wf_exec *ex, float *out)
{
	if (!ex->n)
		return wf_exec_fail(ex, WF_EINVAL, "probs: no forward has run");
	wf_backend *be = ex->be;
	int n = ex->n, k = ex->m->classes;
	int rc = wf_op_softmax_xent_forward(be, n, k, ex->probs, ex->losses, ex->act[ex->m->output],
					    NULL);
	if (!rc)
		rc = wf_op_to_host(be, out, ex->probs, (size_t)n * k * sizeof(float));
	return rc ? wf_exec_op_fail(ex, rc, ex->m->output, "softmax") : 0;
}

int wf_exec_loss(wf_exec *ex, const int32_t *labels, float *loss, int *correct)
{
	wf_backend *be = ex->be;
	int n = ex->n, k = ex->m->classes, rc;
	if (!n)
		return wf_exec_fail(ex, WF_EINVAL, "loss: no forward has run");
	for (int i = 0; i < n; i++)
		if (labels[i] < 0 || labels[i] >= k)
			return wf_exec_fail(
				ex, WF_EINVAL,
				"loss: labels[%d] = %d is outside [0, %d) (the model has "
				"%d classes)",
				i, (int)labels[i], k, k);
	if ((rc = wf_op_to_device(be, ex->labels, labels, (size_t)n * sizeof(int32_t))) ||
	    (rc = wf_op_softmax_xent_forward(be, n, k, ex->probs, ex->losses,
					     ex->act[ex->m->output], ex->labels)) ||
	    (rc = wf_op_to_host(be, ex->h_losses, ex->losses, (size_t)n * sizeof(float))) ||
	    (rc = wf_op_to_host(be, ex->h_probs, ex->probs, (size_t)n * k * sizeof(float))))
		return wf_exec_op_fail(ex, rc, ex->m->output, "loss");
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
				return wf_exec_fail(ex, WF_ENOMEM, "loss: out of memory");
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
		return wf_exec_fail(ex, WF_EINVAL, "label smoothing must be in [0, 1), got %g",
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
		if (ex->tfused && wf_exec_is_bf16(ex, j))
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

/* The backward of an add with its relu inside (wf_exec_train_fuse_plan): dy (the
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
		mode[k] = ex->gdone[j] ? 2 : wf_exec_is_bf16(ex, j) ? 3 : 1;
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
		if (wf_exec_relu_inside(ex, i))
			return add_relu_backward(ex, i, n);
		for (int k = 0; k < l->ninputs; k++)
			if ((rc = pass_through(ex, l->inputs[k], dy, n)))
				return rc;
		return 0;
	case WF_LAYER_FLATTEN: return pass_through(ex, j, dy, n);
	case WF_LAYER_CONCAT: return concat_backward(ex, i, n, dy);
	default: break;
	}
	if (wf_exec_grad_alias(ex, i) >= 0) { /* a relu inside its batch norm, a padding in */
		ex->gdone[j] = 1;	      /* its conv: j's gradient memory is this one's */
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
		return wf_exec_fail(ex, WF_EINVAL,
				    "backward: the executor was created for inference");
	if (!n || !ex->have_loss)
		return wf_exec_fail(ex, WF_EINVAL, "backward: run forward and loss first");
	if (!ex->fwd_training)
		return wf_exec_fail(ex, WF_EINVAL,
				    "backward: the last forward ran in inference mode");
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
		return wf_exec_op_fail(ex, rc, m->output, "loss backward");
	ex->gdone[m->output] = 1;
	size_t done = 0;
	for (int i = m->nlayers - 1; i >= 1; i--) {
		if (!ex->gdone[i])
			continue; /* no parameter downstream of... nothing reached it */
		be->err.msg[0] = '\0';
		if ((rc = layer_backward(ex, i, n)) != 0)
			return wf_exec_op_fail(ex, rc, i, "backward");
		if (ex->pend[i] > done) {
			done = ex->pend[i];
			if (ready) {
				if ((rc = wf_op_sync(be)) != 0)
					return wf_exec_op_fail(ex, rc, i, "sync");
				ready(arg, done);
			}
		}
	}
	ex->have_loss = 0; /* one backward per forward+loss */
	return 0;
}
