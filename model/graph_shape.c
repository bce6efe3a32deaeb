/* graph_shape.c: shape inference and the parameter layout of a parsed
 * graph (see graph.c). */
#include "model/graph_priv.h"
#include "model/model_priv.h"

#include "common/util.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- shape inference ---------------------------------------------------- */

void wf_graph_shape_str(const wf_model *m, int i, char *buf, size_t n)
{
	const wf_layer *l = &m->layers[i];
	if (wf_layer_flat(m, i))
		snprintf(buf, n, "[%d]", l->oc);
	else
		snprintf(buf, n, "[%d,%d,%d]", l->oh, l->ow, l->oc);
}

int wf_graph_infer_shape(wf_model *m, int i, wf_err *err)
{
	wf_layer *l = &m->layers[i];
	const wf_layer *x = l->ninputs > 0 ? &m->layers[l->inputs[0]] : NULL;
	int flat = x ? wf_layer_flat(m, l->inputs[0]) : 0;
	char s0[64], s1[64];
	int pt, pb;

	/* which rank each type takes */
	switch (l->type) {
	case WF_LAYER_CONV2D:
	case WF_LAYER_MAXPOOL:
	case WF_LAYER_AVGPOOL:
	case WF_LAYER_GAP:
	case WF_LAYER_ZEROPAD:
	case WF_LAYER_CROP:
		if (flat)
			return wf_graph_layer_err(
				err, l, WF_EINVAL,
				"inputs: '%s' is 2-D [N,%d]; %s needs a 4-D [N,H,W,C] input",
				x->name, x->oc, wf_layer_type_name(l->type));
		break;
	case WF_LAYER_DENSE:
		if (!flat)
			return wf_graph_layer_err(
				err, l, WF_EINVAL,
				"inputs: '%s' is 4-D [N,%d,%d,%d]; dense needs a 2-D input "
				"(add a flatten or gap layer)",
				x->name, x->oh, x->ow, x->oc);
		break;
	default: break;
	}

	switch (l->type) {
	case WF_LAYER_INPUT: l->oh = m->in_h, l->ow = m->in_w, l->oc = m->in_c; break;
	case WF_LAYER_CONV2D: {
		if (x->oc % l->groups != 0 || l->filters % l->groups != 0)
			return wf_graph_layer_err(
				err, l, WF_EINVAL,
				"config.groups: %d does not divide the input channels (%d) "
				"and filters (%d)",
				l->groups, x->oc, l->filters);
		long ekh = (long)(l->kh - 1) * l->dh + 1, ekw = (long)(l->kw - 1) * l->dw + 1;
		if (l->same) {
			wf_same_pad(x->oh, l->kh, l->sh, l->dh, &l->oh, &pt, &pb);
			wf_same_pad(x->ow, l->kw, l->sw, l->dw, &l->ow, &pt, &pb);
		} else {
			if (ekh > x->oh || ekw > x->ow)
				return wf_graph_layer_err(
					err, l, WF_EINVAL,
					"config.kernel_size: window %ldx%ld (with dilation) "
					"is larger than the input %dx%d ('valid' padding)",
					ekh, ekw, x->oh, x->ow);
			l->oh = (int)((x->oh - ekh) / l->sh + 1);
			l->ow = (int)((x->ow - ekw) / l->sw + 1);
		}
		l->oc = l->filters;
		break;
	}
	case WF_LAYER_DENSE: l->oh = l->ow = 1, l->oc = l->units; break;
	case WF_LAYER_MAXPOOL:
	case WF_LAYER_AVGPOOL:
		if (l->same) {
			wf_same_pad(x->oh, l->kh, l->sh, 1, &l->oh, &pt, &pb);
			wf_same_pad(x->ow, l->kw, l->sw, 1, &l->ow, &pt, &pb);
		} else {
			if (l->kh > x->oh || l->kw > x->ow)
				return wf_graph_layer_err(
					err, l, WF_EINVAL,
					"config.pool_size: window %dx%d is larger than the "
					"input %dx%d ('valid' padding)",
					l->kh, l->kw, x->oh, x->ow);
			l->oh = (x->oh - l->kh) / l->sh + 1;
			l->ow = (x->ow - l->kw) / l->sw + 1;
		}
		l->oc = x->oc;
		break;
	case WF_LAYER_GAP: l->oh = l->ow = 1, l->oc = x->oc; break;
	case WF_LAYER_FLATTEN: {
		size_t f = wf_layer_size(x);
		if (f > WF_MODEL_MAX_FLOATS)
			return wf_graph_layer_err(err, l, WF_EINVAL,
						  "output: %zu features is too many", f);
		l->oh = l->ow = 1, l->oc = (int)f;
		break;
	}
	case WF_LAYER_ZEROPAD:
		l->oh = x->oh + l->pad[0] + l->pad[1];
		l->ow = x->ow + l->pad[2] + l->pad[3];
		l->oc = x->oc;
		break;
	case WF_LAYER_CROP:
		if ((long)l->pad[0] + l->pad[1] >= x->oh || (long)l->pad[2] + l->pad[3] >= x->ow)
			return wf_graph_layer_err(
				err, l, WF_EINVAL,
				"config.cropping: [[%d,%d],[%d,%d]] leaves nothing of the "
				"input %dx%d",
				l->pad[0], l->pad[1], l->pad[2], l->pad[3], x->oh, x->ow);
		l->oh = x->oh - l->pad[0] - l->pad[1];
		l->ow = x->ow - l->pad[2] - l->pad[3];
		l->oc = x->oc;
		break;
	case WF_LAYER_ADD:
		for (int k = 1; k < l->ninputs; k++) {
			const wf_layer *y = &m->layers[l->inputs[k]];
			if (y->oh != x->oh || y->ow != x->ow || y->oc != x->oc ||
			    wf_layer_flat(m, l->inputs[k]) != flat) {
				wf_graph_shape_str(m, l->inputs[0], s0, sizeof(s0));
				wf_graph_shape_str(m, l->inputs[k], s1, sizeof(s1));
				return wf_graph_layer_err(
					err, l, WF_EINVAL,
					"inputs: shapes differ: '%s' is %s, '%s' is %s", x->name,
					s0, y->name, s1);
			}
		}
		l->oh = x->oh, l->ow = x->ow, l->oc = x->oc;
		break;
	case WF_LAYER_CONCAT: {
		long c = 0;
		for (int k = 0; k < l->ninputs; k++) {
			const wf_layer *y = &m->layers[l->inputs[k]];
			if (y->oh != x->oh || y->ow != x->ow ||
			    wf_layer_flat(m, l->inputs[k]) != flat) {
				wf_graph_shape_str(m, l->inputs[0], s0, sizeof(s0));
				wf_graph_shape_str(m, l->inputs[k], s1, sizeof(s1));
				return wf_graph_layer_err(
					err, l, WF_EINVAL,
					"inputs: all but the channel axis must match: '%s' "
					"is %s, '%s' is %s",
					x->name, s0, y->name, s1);
			}
			c += y->oc;
		}
		if ((unsigned long)c > WF_MODEL_MAX_FLOATS)
			return wf_graph_layer_err(err, l, WF_EINVAL,
						  "output: %ld channels is too many", c);
		l->oh = x->oh, l->ow = x->ow, l->oc = (int)c;
		break;
	}
	default: /* batchnorm, relu, relu6, dropout: same shape */
		l->oh = x->oh, l->ow = x->ow, l->oc = x->oc;
		break;
	}
	if (l->oh < 1 || l->ow < 1 || l->oc < 1 || wf_layer_size(l) > WF_MODEL_MAX_FLOATS)
		return wf_graph_layer_err(err, l, WF_EINVAL,
					  "output shape [%d,%d,%d] is empty or too large", l->oh,
					  l->ow, l->oc);
	return 0;
}

/* ---- parameter layout --------------------------------------------------- */

static int add_view(wf_model *m, int layer, const char *param, int trainable, size_t *cursor,
		    int ndim, const int *shape)
{
	wf_view *v = &m->views[m->nviews];
	snprintf(v->name, sizeof(v->name), "%s/%s", m->layers[layer].name, param);
	v->trainable = trainable;
	v->offset = *cursor;
	v->ndim = ndim;
	v->count = 1;
	for (int k = 0; k < ndim; k++) {
		v->shape[k] = shape[k];
		v->count *= (size_t)shape[k];
	}
	*cursor += v->count;
	return m->nviews++;
}

/* Trainable views in reverse topological order (last layer at offset 0), then
 * state views likewise. */
int wf_graph_layout(wf_model *m, wf_err *err)
{
	int nv = 0;
	for (int i = 0; i < m->nlayers; i++) {
		const wf_layer *l = &m->layers[i];
		if (l->type == WF_LAYER_CONV2D || l->type == WF_LAYER_DENSE)
			nv += 1 + l->use_bias;
		else if (l->type == WF_LAYER_BATCHNORM)
			nv += 4;
	}
	m->views = calloc(nv ? (size_t)nv : 1, sizeof(*m->views));
	if (!m->views)
		return wf_errf(err, WF_ENOMEM, "graph: out of memory for %d parameter views", nv);
	for (int i = 0; i < m->nlayers; i++) {
		wf_layer *l = &m->layers[i];
		l->p_kernel = l->p_bias = l->p_gamma = l->p_beta = l->s_mean = l->s_var = -1;
	}
	size_t cur = 0;
	for (int i = m->nlayers - 1; i >= 0; i--) {
		wf_layer *l = &m->layers[i];
		const wf_layer *x = l->ninputs ? &m->layers[l->inputs[0]] : NULL;
		int c = x ? x->oc : 0;
		if (l->type == WF_LAYER_CONV2D) {
			int ks[4] = {l->kh, l->kw, c / l->groups, l->filters};
			l->p_kernel = add_view(m, i, "kernel", 1, &cur, 4, ks);
			if (l->use_bias)
				l->p_bias = add_view(m, i, "bias", 1, &cur, 1, &l->filters);
		} else if (l->type == WF_LAYER_DENSE) {
			int ks[2] = {c, l->units};
			l->p_kernel = add_view(m, i, "kernel", 1, &cur, 2, ks);
			if (l->use_bias)
				l->p_bias = add_view(m, i, "bias", 1, &cur, 1, &l->units);
		} else if (l->type == WF_LAYER_BATCHNORM) {
			l->p_gamma = add_view(m, i, "gamma", 1, &cur, 1, &c);
			l->p_beta = add_view(m, i, "beta", 1, &cur, 1, &c);
		}
		if (cur > WF_MODEL_MAX_FLOATS)
			return wf_graph_layer_err(
				err, l, WF_EINVAL,
				"parameters: the model needs more than %lu floats",
				(unsigned long)WF_MODEL_MAX_FLOATS);
	}
	m->nparams = cur;
	cur = 0;
	for (int i = m->nlayers - 1; i >= 0; i--) {
		wf_layer *l = &m->layers[i];
		if (l->type != WF_LAYER_BATCHNORM)
			continue;
		int c = m->layers[l->inputs[0]].oc;
		l->s_mean = add_view(m, i, "moving_mean", 0, &cur, 1, &c);
		l->s_var = add_view(m, i, "moving_variance", 0, &cur, 1, &c);
	}
	m->nstate = cur;
	m->params = calloc(m->nparams ? m->nparams : 1, sizeof(float));
	m->state = calloc(m->nstate ? m->nstate : 1, sizeof(float));
	if (!m->params || !m->state)
		return wf_errf(err, WF_ENOMEM, "graph: out of memory for %zu parameters",
			       m->nparams + m->nstate);
	return 0;
}
