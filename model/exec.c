/* exec.c: the executor's life. Create sorts the graph, chooses the plans
 * (exec_fuse.c, exec_int8.c), places every tensor (exec_plan.c) and
 * allocates the arenas once for max_batch samples; free releases them; the
 * parameter, gradient and state buffers and the optimizer step are here.
 * Running it (forward, loss, backward) is exec_run.c. Nothing is allocated
 * per step. */
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

/* ---- create / free ------------------------------------------------------ */

int wf_exec_fail(wf_exec *ex, int code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(ex->err.msg, sizeof(ex->err.msg), fmt, ap);
	va_end(ap);
	ex->err.code = code;
	return code;
}

/* An op of layer i failed: keep the backend's message, name the layer. */
int wf_exec_op_fail(wf_exec *ex, int rc, int i, const char *dir)
{
	const wf_layer *l = &ex->m->layers[i];
	return wf_exec_fail(ex, rc, "layer '%s' (%s) %s on %s: %s", l->name,
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
	free(ex->hook_lo);
	free(ex->hook_hi);
	free(ex->hook_state);
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
	return wf_op_alloc(be, bytes ? bytes : WF_EXEC_ALIGN);
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
		rc = wf_exec_plan_activations(ex, abytes, ex->br ? seq : NULL,
					      ex->br ? free_at : NULL);
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
		if (ex->own[i] || !wf_exec_is_alias(ex, i))
			WF_EXEC_REBASE(ex->own[i], ex->arena);
		ex->act[i] = ex->own[i] ? ex->own[i] : ex->act[wf_exec_alias_src(ex, i)];
	}
	WF_EXEC_REBASE(ex->labels, ex->arena);
	WF_EXEC_REBASE(ex->probs, ex->arena);
	WF_EXEC_REBASE(ex->losses, ex->arena);
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
		return wf_exec_fail(
			ex, rc,
			"executor: out of %s memory planning its activations again (%.1f "
			"MiB); create it again",
			ex->be->name, abytes / 1048576.0);
	}
	ex->bytes = ex->bytes - ex->abytes + abytes;
	ex->abytes = abytes;
	rebase_activations(ex);
	return 0;
}

/* The executor's per-layer tables, and the fusion plans where the backend
 * fuses; WF_ENOMEM when out of memory. */
static int alloc_tables(wf_exec *ex)
{
	size_t nl = (size_t)ex->m->nlayers, K = (size_t)ex->m->classes, B = (size_t)ex->max_batch;
	ex->plans = calloc(nl, sizeof(*ex->plans));
	if (ex->training)
		ex->eval_plans = calloc(nl, sizeof(*ex->eval_plans));
	ex->act = calloc(nl, sizeof(*ex->act));
	ex->own = calloc(nl, sizeof(*ex->own));
	ex->dact = calloc(nl, sizeof(*ex->dact));
	ex->save_mean = calloc(nl, sizeof(*ex->save_mean));
	ex->save_invstd = calloc(nl, sizeof(*ex->save_invstd));
	ex->mask = calloc(nl, sizeof(*ex->mask));
	ex->need_grad = calloc(nl, 1);
	ex->gdone = calloc(nl, 1);
	ex->pend = calloc(nl, sizeof(*ex->pend));
	ex->h_probs = malloc(sizeof(float) * B * K);
	ex->h_losses = malloc(sizeof(float) * B);
	if (!ex->plans || (ex->training && !ex->eval_plans) || !ex->act || !ex->own || !ex->dact ||
	    !ex->save_mean || !ex->save_invstd || !ex->mask || !ex->need_grad || !ex->gdone ||
	    !ex->pend || !ex->h_probs || !ex->h_losses)
		return WF_ENOMEM;
	wf_backend_caps caps = wf_backend_caps_of(ex->be);
	if (!(!ex->training && caps.fused_conv) && !(ex->training && caps.train_fuse))
		return 0;
	ex->fuse_into = malloc(sizeof(int) * nl);
	ex->fuse_res = malloc(sizeof(int) * nl);
	ex->fuse_act = calloc(nl, 1);
	ex->out_bf16 = calloc(nl, 1);
	ex->pad_skip = calloc(nl, 1);
	ex->res_inplace = calloc(nl, 1);
	ex->same_as = ex->training ? NULL : malloc(sizeof(int) * nl);
	ex->pool_in_add = ex->training ? NULL : calloc(nl, 1);
	ex->qx = calloc(nl, sizeof(float));
	ex->qu8 = calloc(nl, 1);
	ex->qy = calloc(nl, sizeof(float));
	ex->qyu8 = calloc(nl, 1);
	if (!ex->fuse_into || !ex->fuse_res || !ex->fuse_act || !ex->out_bf16 || !ex->pad_skip ||
	    !ex->res_inplace || (!ex->training && (!ex->same_as || !ex->pool_in_add)) || !ex->qx ||
	    !ex->qu8 || !ex->qy || !ex->qyu8)
		return WF_ENOMEM;
	if (ex->training) {
		ex->tfused = 1;
		wf_exec_train_fuse_plan(ex);
	} else {
		ex->fused = 1;
		wf_exec_fuse_plan(ex);
		if (caps.int8)
			wf_exec_plan_int8(ex);
	}
	return 0;
}

/* Which layers need a gradient, and where each layer's parameters end
 * (the gradient prefix that is complete once backward has passed it). */
static int mark_gradients(wf_exec *ex, wf_err *err)
{
	const wf_model *m = ex->m;
	for (int i = 0; i < m->nlayers; i++) {
		const wf_layer *l = &m->layers[i];
		int views[4] = {l->p_kernel, l->p_bias, l->p_gamma, l->p_beta};
		for (int k = 0; k < 4 && !l->frozen; k++)
			if (views[k] >= 0)
				ex->pend[i] = WF_MAX(ex->pend[i], m->views[views[k]].offset +
									  m->views[views[k]].count);
		ex->need_grad[i] = ex->pend[i] > 0;
		for (int k = 0; k < l->ninputs; k++)
			ex->need_grad[i] |= ex->need_grad[l->inputs[k]];
		if (ex->training && l->frozen && l->type == WF_LAYER_BATCHNORM && l->ninputs &&
		    ex->need_grad[l->inputs[0]])
			return wf_errf(
				err, WF_ENOTSUP,
				"layer %s: a frozen batch norm after trainable layers is not "
				"supported (freeze the layers before it too)",
				l->name);
	}
	return 0;
}

/* The arenas (abytes of activations, gbytes of gradients), the parameter
 * and state buffers, and every layer's buffers placed in them. */
static int alloc_buffers(wf_exec *ex, size_t abytes, size_t gbytes, wf_err *err)
{
	wf_model *m = ex->m;
	wf_backend *be = ex->be;
	int training = ex->training;
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
	if (!ex->arena || (training && (!ex->garena || !ex->grads)) || !ex->params || !ex->state)
		return wf_errf(err, WF_ENOMEM,
			       "executor: out of %s memory for batch %d (%.1f MiB activations, "
			       "%.1f MiB gradients)",
			       be->name, ex->max_batch, abytes / 1048576.0, gbytes / 1048576.0);
	rebase_activations(ex);
	for (int i = 0; i < m->nlayers && training; i++) {
		if (ex->save_mean[i] || m->layers[i].type == WF_LAYER_BATCHNORM) {
			WF_EXEC_REBASE(ex->save_mean[i], ex->arena);
			WF_EXEC_REBASE(ex->save_invstd[i], ex->arena);
		}
		if (m->layers[i].type == WF_LAYER_DROPOUT)
			WF_EXEC_REBASE(ex->mask[i], ex->arena);
		if (ex->need_grad[i] || i == m->output)
			WF_EXEC_REBASE(ex->dact[i], ex->garena);
	}
	if (training)
		WF_EXEC_REBASE(ex->scratch, ex->garena);
	return 0;
}

int wf_exec_create(wf_exec **out, wf_model *m, wf_backend *be, int max_batch, int training,
		   wf_err *err)
{
	*out = NULL;
	if (max_batch < 1 || max_batch > (1 << 20))
		return wf_errf(err, WF_EINVAL, "executor: max_batch %d is out of range [1, %d]",
			       max_batch, 1 << 20);
	wf_exec *ex = calloc(1, sizeof(*ex));
	if (!ex)
		return wf_errf(err, WF_ENOMEM, "executor: out of memory");
	ex->m = m, ex->be = be, ex->max_batch = max_batch, ex->training = training != 0;
	ex->host = wf_backend_host_memory(be);
	int rc = alloc_tables(ex);
	if (rc) {
		wf_errf(err, rc, "executor: out of memory");
		goto fail;
	}
	if ((rc = mark_gradients(ex, err)))
		goto fail;
	size_t abytes = 0, gbytes = 0;
	rc = plan_order(ex, NULL, &abytes);
	ex->trial = ex->br ? 0 : -1; /* branches: try them against one after another */
	wf_tiles_init(ex);	     /* a large batch: try tiles against it whole */
	if (!rc && training)
		rc = wf_exec_plan_gradients(ex, &gbytes);
	if (rc) {
		wf_errf(err, rc, "executor: out of memory planning %d layers", m->nlayers);
		goto fail;
	}
	if ((rc = alloc_buffers(ex, abytes, gbytes, err)))
		goto fail;
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

int wf_exec_optim_step_range(wf_exec *ex, const wf_optim_cfg *c, long step, size_t lo, size_t hi,
			     const float *g, float *m, float *v, float grad_scale)
{
	int rc = wf_optim_apply_range(ex->be, c, step, lo, hi, ex->params, g ? g : ex->grads, m, v,
				      grad_scale);
	params_changed(ex);
	return rc;
}

int wf_exec_set_layer_hook(wf_exec *ex, wf_layer_hook_fn fn, void *arg)
{
	const wf_model *m = ex->m;
	size_t nl = (size_t)m->nlayers;
	ex->hook = NULL;
	ex->hook_arg = NULL;
	if (!fn)
		return 0;
	if (!ex->hook_lo) {
		ex->hook_lo = calloc(nl, sizeof(*ex->hook_lo));
		ex->hook_hi = calloc(nl, sizeof(*ex->hook_hi));
		ex->hook_state = calloc(nl, 1);
		if (!ex->hook_lo || !ex->hook_hi || !ex->hook_state) {
			free(ex->hook_lo);
			free(ex->hook_hi);
			free(ex->hook_state);
			ex->hook_lo = ex->hook_hi = NULL;
			ex->hook_state = NULL;
			return wf_exec_fail(ex, WF_ENOMEM, "layer hook: out of memory");
		}
		/* every view a layer reads, frozen or not */
		for (size_t i = 0; i < nl; i++) {
			const wf_layer *l = &m->layers[i];
			int views[4] = {l->p_kernel, l->p_bias, l->p_gamma, l->p_beta};
			int any = 0;
			for (int k = 0; k < 4; k++) {
				if (views[k] < 0)
					continue;
				const wf_view *v = &m->views[views[k]];
				ex->hook_lo[i] =
					any ? WF_MIN(ex->hook_lo[i], v->offset) : v->offset;
				ex->hook_hi[i] = any ? WF_MAX(ex->hook_hi[i], v->offset + v->count)
						     : v->offset + v->count;
				any = 1;
			}
			ex->hook_state[i] = l->s_mean >= 0 || l->s_var >= 0;
		}
	}
	ex->hook = fn;
	ex->hook_arg = arg;
	return 0;
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
		return wf_exec_fail(ex, WF_EINVAL,
				    "zero_grads: the executor was created for inference");
	int rc = wf_op_zero(ex->be, ex->grads, ex->m->nparams * sizeof(float));
	return rc ? wf_exec_fail(ex, rc, "zero_grads: %s", ex->be->err.msg) : 0;
}

int wf_exec_params_to_host(wf_exec *ex)
{
	if (ex->host)
		return 0;
	wf_backend *be = ex->be;
	int rc = wf_op_to_host(be, ex->m->params, ex->params, ex->m->nparams * sizeof(float));
	if (!rc)
		rc = wf_op_to_host(be, ex->m->state, ex->state, ex->m->nstate * sizeof(float));
	return rc ? wf_exec_fail(ex, rc, "params to host: %s", be->err.msg) : 0;
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
	return rc ? wf_exec_fail(ex, rc, "params to device: %s", be->err.msg) : 0;
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
	if (ex->fuse_into && wf_exec_is_bf16(ex, i))
		return "bf16";
	if (ex->qy && wf_exec_is_q(ex, i))
		return ex->qyu8[wf_exec_q_producer(ex, i)] ? "u8" : "s8";
	return "f32";
}

const float *wf_exec_layer_output(const wf_exec *ex, int i)
{
	if (i < 0 || i >= ex->m->nlayers)
		return NULL;
	if (ex->tfused && (ex->pad_skip[i] || wf_exec_relu_inside(ex, i)))
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
