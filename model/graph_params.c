/* graph_params.c: parameter initialisation, views and FLOPs of a model
 * (see graph.c). */
#include "model/graph_priv.h"
#include "model/model_priv.h"

#include "common/util.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- parameters --------------------------------------------------------- */

static uint64_t name_hash(const char *s)
{
	uint64_t h = 1469598103934665603ULL;
	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ULL;
	return h;
}

static void fill(float *p, size_t n, float v)
{
	for (size_t i = 0; i < n; i++)
		p[i] = v;
}

int wf_init_parse(const char *name, wf_init *out)
{
	static const char *const names[] = {"glorot_uniform", "glorot_normal", "he_normal",
					    "he_uniform",     "lecun_normal",  "lecun_uniform"};
	for (int i = 0; i < (int)(sizeof(names) / sizeof(names[0])); i++)
		if (strcmp(name, names[i]) == 0) {
			*out = (wf_init)i;
			return 0;
		}
	return -1;
}

/* Keras fans of a kernel: conv HWIO -> (kh*kw*I, kh*kw*O); dense (in, out). */
static void kernel_fans(const wf_view *v, double *fan_in, double *fan_out)
{
	double rf = 1;
	for (int d = 0; d < v->ndim - 2; d++)
		rf *= v->shape[d];
	*fan_in = rf * v->shape[v->ndim - 2];
	*fan_out = rf * v->shape[v->ndim - 1];
}

static void init_kernel(float *p, const wf_view *v, wf_init kind, wf_rng *r)
{
	double fi, fo, fan;
	kernel_fans(v, &fi, &fo);
	int uniform = kind == WF_INIT_GLOROT_UNIFORM || kind == WF_INIT_HE_UNIFORM ||
		      kind == WF_INIT_LECUN_UNIFORM;
	double gain = kind == WF_INIT_HE_NORMAL || kind == WF_INIT_HE_UNIFORM ? 2.0 : 1.0;
	if (kind == WF_INIT_GLOROT_UNIFORM || kind == WF_INIT_GLOROT_NORMAL) {
		fan = (fi + fo) / 2.0;
	} else {
		fan = fi;
	}
	double var = gain / (fan > 0 ? fan : 1.0);
	if (uniform) {
		double lim = sqrt(3.0 * var);
		for (size_t k = 0; k < v->count; k++)
			p[k] = (float)(lim * (2.0 * wf_rng_uniform(r) - 1.0));
	} else {
		/* Keras draws these from a normal truncated at 2 sd, scaled so the
		 * variance is var: redraw outside [-2, 2], sd / 0.87962566 */
		double sd = sqrt(var) / 0.87962566103423978;
		for (size_t k = 0; k < v->count; k++) {
			double z;
			do
				z = wf_rng_normal(r);
			while (z < -2.0 || z > 2.0);
			p[k] = (float)(sd * z);
		}
	}
}

void wf_model_init_params(wf_model *m, uint64_t seed)
{
	wf_model_init_params_with(m, seed, WF_INIT_GLOROT_UNIFORM, WF_INIT_GLOROT_UNIFORM);
}

void wf_model_init_params_with(wf_model *m, uint64_t seed, wf_init conv_init, wf_init dense_init)
{
	for (int i = 0; i < m->nlayers; i++) {
		const wf_layer *l = &m->layers[i];
		if (l->p_kernel >= 0) {
			const wf_view *v = &m->views[l->p_kernel];
			wf_rng r;
			wf_rng_seed(&r, wf_hash3(seed, name_hash(v->name), 0));
			init_kernel(m->params + v->offset, v,
				    l->type == WF_LAYER_DENSE ? dense_init : conv_init, &r);
		}
		if (l->p_bias >= 0)
			fill(m->params + m->views[l->p_bias].offset, m->views[l->p_bias].count,
			     0.0f);
		if (l->p_gamma >= 0)
			fill(m->params + m->views[l->p_gamma].offset, m->views[l->p_gamma].count,
			     1.0f);
		if (l->p_beta >= 0)
			fill(m->params + m->views[l->p_beta].offset, m->views[l->p_beta].count,
			     0.0f);
		if (l->s_mean >= 0)
			fill(m->state + m->views[l->s_mean].offset, m->views[l->s_mean].count,
			     0.0f);
		if (l->s_var >= 0)
			fill(m->state + m->views[l->s_var].offset, m->views[l->s_var].count, 1.0f);
	}
}

const wf_view *wf_model_view(const wf_model *m, const char *name)
{
	for (int i = 0; i < m->nviews; i++)
		if (strcmp(m->views[i].name, name) == 0)
			return &m->views[i];
	return NULL;
}

double wf_model_flops(const wf_model *m)
{
	double f = 0;
	for (int i = 0; i < m->nlayers; i++) {
		const wf_layer *l = &m->layers[i];
		if (l->type == WF_LAYER_CONV2D || l->type == WF_LAYER_DENSE) {
			const wf_view *k = &m->views[l->p_kernel];
			f += 2.0 * (double)k->count * l->oh * l->ow;
		}
	}
	return f;
}
