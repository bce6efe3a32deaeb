/* fold.c: batch-norm folding and dropout removal for export. Works on the
 * graph JSON (so the result is built and validated like any model) and then
 * copies parameters by view name, rewriting the folded ones. */
#include "model/fold.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What happens to each layer of the input model. */
typedef struct fold_plan {
	int *removed; /* 1: the layer disappears */
	int *alias;   /* removed layer -> the layer whose output replaces it */
	int *folded;  /* conv/dense index -> the batch norm folded into it, or -1 */
	int *offset;  /* conv/dense index -> its first channel in that batch norm */
} fold_plan;

static void plan_free(fold_plan *p)
{
	free(p->removed);
	free(p->alias);
	free(p->folded);
	free(p->offset);
}

/* Every input of concat layer c is a conv2d/dense used only there. */
static int concat_foldable(const wf_model *m, int c, const int *consumers, const fold_plan *p)
{
	const wf_layer *cat = &m->layers[c];
	for (int k = 0; k < cat->ninputs; k++) {
		int s = cat->inputs[k];
		wf_layer_type t = m->layers[s].type;
		if ((t != WF_LAYER_CONV2D && t != WF_LAYER_DENSE) || consumers[s] != 1 ||
		    p->folded[s] >= 0)
			return 0;
	}
	return 1;
}

static int plan_build(const wf_model *m, fold_plan *p)
{
	int n = m->nlayers;
	int *consumers = calloc((size_t)n, sizeof(int));
	p->removed = calloc((size_t)n, sizeof(int));
	p->alias = malloc(sizeof(int) * (size_t)n);
	p->folded = malloc(sizeof(int) * (size_t)n);
	p->offset = calloc((size_t)n, sizeof(int));
	if (!consumers || !p->removed || !p->alias || !p->folded || !p->offset) {
		free(consumers);
		plan_free(p);
		return WF_ENOMEM;
	}
	for (int i = 0; i < n; i++) {
		p->alias[i] = i;
		p->folded[i] = -1;
		for (int k = 0; k < m->layers[i].ninputs; k++)
			consumers[m->layers[i].inputs[k]]++;
	}
	for (int i = 0; i < n; i++) {
		const wf_layer *l = &m->layers[i];
		if (l->type == WF_LAYER_DROPOUT && l->ninputs == 1) {
			p->removed[i] = 1;
			p->alias[i] = p->alias[l->inputs[0]];
		} else if (l->type == WF_LAYER_BATCHNORM && l->ninputs == 1) {
			int src = l->inputs[0];
			wf_layer_type t = m->layers[src].type;
			if ((t == WF_LAYER_CONV2D || t == WF_LAYER_DENSE) && consumers[src] == 1 &&
			    src != m->output && p->folded[src] < 0) {
				p->removed[i] = 1;
				p->alias[i] = src;
				p->folded[src] = i;
			} else if (t == WF_LAYER_CONCAT && consumers[src] == 1 &&
				   src != m->output && concat_foldable(m, src, consumers, p)) {
				/* concat of convs (NASNet's adjust blocks): fold each
				 * conv's slice of the channels into it */
				const wf_layer *cat = &m->layers[src];
				p->removed[i] = 1;
				p->alias[i] = src;
				for (int k = 0, off = 0; k < cat->ninputs; k++) {
					p->folded[cat->inputs[k]] = i;
					p->offset[cat->inputs[k]] = off;
					off += m->layers[cat->inputs[k]].oc;
				}
			}
		}
	}
	free(consumers);
	return 0;
}

int wf_model_fold_count(const wf_model *in)
{
	fold_plan p;
	if (plan_build(in, &p))
		return 0;
	int c = 0;
	for (int i = 0; i < in->nlayers; i++)
		c += p.removed[i];
	plan_free(&p);
	return c;
}

static int layer_index(const wf_model *m, const char *name)
{
	for (int i = 0; i < m->nlayers; i++)
		if (strcmp(m->layers[i].name, name) == 0)
			return i;
	return -1;
}

/* The graph JSON of the folded model. */
static char *fold_json(const wf_model *m, const fold_plan *p, wf_err *err)
{
	json_error_t jerr;
	char *s = NULL;
	json_t *root = json_loads(m->graph_json, 0, &jerr);
	json_t *layers = json_object_get(root, "layers");
	json_t *kept = json_array();
	if (!root || !json_is_array(layers) || !kept) {
		wf_errf(err, WF_EFORMAT, "fold: the model's graph JSON is unreadable");
		goto out;
	}
	for (size_t j = 0; j < json_array_size(layers); j++) {
		json_t *jl = json_array_get(layers, j);
		int i = layer_index(m, json_string_value(json_object_get(jl, "name")));
		if (i < 0) {
			wf_errf(err, WF_EFORMAT, "fold: graph layer %zu is not in the model", j);
			goto out;
		}
		if (p->removed[i])
			continue;
		json_t *ins = json_array();
		for (int k = 0; k < m->layers[i].ninputs; k++)
			json_array_append_new(
				ins, json_string(m->layers[p->alias[m->layers[i].inputs[k]]].name));
		json_object_set_new(jl, "inputs", ins);
		if (p->folded[i] >= 0)
			json_object_set_new(json_object_get(jl, "config"), "use_bias", json_true());
		json_array_append(kept, jl);
	}
	json_object_set(root, "layers", kept);
	json_object_set_new(root, "output", json_string(m->layers[p->alias[m->output]].name));
	s = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(9));
	if (!s)
		wf_errf(err, WF_ENOMEM, "fold: out of memory");
out:
	json_decref(kept);
	json_decref(root);
	return s;
}

static const float *view_data(const wf_model *m, int v)
{
	const wf_view *w = &m->views[v];
	return (w->trainable ? m->params : m->state) + w->offset;
}

static float *view_data_mut(wf_model *m, const wf_view *w)
{
	return (w->trainable ? m->params : m->state) + w->offset;
}

/* Rewrite kernel and bias of out's layer `name` folding batch norm bn of in
 * (its channels from off on). */
static int fold_params(const wf_model *in, const wf_layer *src, const wf_layer *bn, int off,
		       wf_model *out, wf_err *err)
{
	char name[2 * WF_NAME_MAX + 8];
	int oc = src->type == WF_LAYER_CONV2D ? src->filters : src->units;
	snprintf(name, sizeof(name), "%s/kernel", src->name);
	const wf_view *kw = wf_model_view(out, name);
	snprintf(name, sizeof(name), "%s/bias", src->name);
	const wf_view *bw = wf_model_view(out, name);
	if (!kw || !bw || src->p_kernel < 0 || bw->count != (size_t)oc || kw->count % oc)
		return wf_errf(err, WF_EINTERNAL,
			       "fold: layer '%s' has no kernel/bias to fold into", src->name);
	const float *k0 = view_data(in, src->p_kernel);
	const float *b0 = src->p_bias >= 0 ? view_data(in, src->p_bias) : NULL;
	const float *gamma = bn->p_gamma >= 0 ? view_data(in, bn->p_gamma) + off : NULL;
	const float *beta = bn->p_beta >= 0 ? view_data(in, bn->p_beta) + off : NULL;
	const float *mean = view_data(in, bn->s_mean) + off, *var = view_data(in, bn->s_var) + off;
	float *k = view_data_mut(out, kw), *b = view_data_mut(out, bw);
	for (int c = 0; c < oc; c++) {
		double s = (gamma ? gamma[c] : 1.0) / sqrt((double)var[c] + bn->eps);
		b[c] = (float)(((b0 ? b0[c] : 0.0) - mean[c]) * s + (beta ? beta[c] : 0.0));
	}
	/* HWIO and (in,out) both keep the output channel last. */
	for (size_t i = 0; i < kw->count; i++) {
		int c = (int)(i % (size_t)oc);
		double s = (gamma ? gamma[c] : 1.0) / sqrt((double)var[c] + bn->eps);
		k[i] = (float)(k0[i] * s);
	}
	return 0;
}

int wf_model_fold_for_inference(const wf_model *in, wf_model **out, wf_err *err)
{
	fold_plan p;
	wf_model *m = NULL;
	*out = NULL;
	if (plan_build(in, &p))
		return wf_errf(err, WF_ENOMEM, "fold: out of memory");
	char *json = fold_json(in, &p, err);
	int rc = json ? wf_model_from_json(&m, json, err) : WF_EFORMAT;
	if (rc)
		goto out;
	for (int v = 0; v < m->nviews; v++) {
		const wf_view *w = &m->views[v];
		const wf_view *src = wf_model_view(in, w->name);
		if (src && src->count == w->count)
			memcpy(view_data_mut(m, w), view_data(in, (int)(src - in->views)),
			       w->count * sizeof(float));
	}
	for (int i = 0; i < in->nlayers; i++) {
		if (p.folded[i] < 0)
			continue;
		rc = fold_params(in, &in->layers[i], &in->layers[p.folded[i]], p.offset[i], m, err);
		if (rc)
			goto out;
	}
	*out = m;
	m = NULL;
out:
	wf_model_free(m);
	free(json);
	plan_free(&p);
	return rc;
}

int wf_model_fold_replace(wf_model **m, wf_err *err)
{
	int removed = wf_model_fold_count(*m);
	wf_model *f = NULL;
	if (removed <= 0)
		return 0;
	int rc = wf_model_fold_for_inference(*m, &f, err);
	if (rc)
		return rc;
	wf_model_free(*m);
	*m = f;
	return removed;
}
