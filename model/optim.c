#include "model/optim.h"

#include "common/util.h"
#include "kernels/ops.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void wf_optim_cfg_default(wf_optim_cfg *c)
{
	memset(c, 0, sizeof(*c));
	c->kind = WF_OPT_SGD;
	c->lr = WF_OPTIM_LR_DEFAULT;
	c->momentum = WF_OPTIM_MOMENTUM_DEFAULT;
	c->beta1 = WF_OPTIM_BETA1_DEFAULT;
	c->beta2 = WF_OPTIM_BETA2_DEFAULT;
	c->eps = WF_OPTIM_EPSILON_DEFAULT;
	c->schedule = WF_SCHED_CONSTANT;
	c->decay_rate = WF_OPTIM_DECAY_RATE_DEFAULT;
}

/* The shortest of %.15g..%.17g that reads back as v ("0.1", not
 * "0.10000000000000001"). */
static const char *num(double v, char *buf, size_t n)
{
	for (int p = 15; p <= 17; p++) {
		snprintf(buf, n, "%.*g", p, v);
		if (strtod(buf, NULL) == v)
			break;
	}
	return buf;
}

const char *wf_optim_describe(const wf_optim_cfg *c, char *buf, size_t n)
{
	static const char *const kinds[] = {"sgd", "adam", "adamw"};
	static const char *const scheds[] = {"constant", "step", "cosine"};
	char nb[3][32]; /* up to three numbers per ADD */
	size_t k = 0;
#define N(v, i) num((v), nb[i], sizeof(nb[i]))
#define ADD(...)                                                                                   \
	do {                                                                                       \
		if (k < n)                                                                         \
			k += (size_t)snprintf(buf + k, n - k, __VA_ARGS__);                        \
	} while (0)
	if (n)
		buf[0] = '\0';
	ADD("optimizer.name=%s optimizer.lr=%s", kinds[c->kind], N(c->lr, 0));
	if (c->kind == WF_OPT_SGD)
		ADD(" optimizer.momentum=%s optimizer.nesterov=%s", N(c->momentum, 0),
		    c->nesterov ? "true" : "false");
	else
		ADD(" optimizer.beta1=%s optimizer.beta2=%s optimizer.epsilon=%s", N(c->beta1, 0),
		    N(c->beta2, 1), N(c->eps, 2));
	ADD(" optimizer.weight_decay=%s optimizer.clipvalue=%s", N(c->weight_decay, 0),
	    N(c->clipvalue, 1));
	ADD(" optimizer.schedule.name=%s optimizer.schedule.warmup_steps=%ld", scheds[c->schedule],
	    c->warmup_steps);
	if (c->schedule == WF_SCHED_STEP)
		ADD(" optimizer.schedule.decay_steps=%ld optimizer.schedule.decay_rate=%s",
		    c->decay_steps, N(c->decay_rate, 0));
	if (c->schedule == WF_SCHED_COSINE) /* decays over the whole run */
		ADD(" optimizer.schedule.min_lr=%s train.steps=%ld", N(c->min_lr, 0),
		    c->total_steps);
#undef ADD
#undef N
	return buf;
}

double wf_optim_lr(const wf_optim_cfg *c, long step)
{
	double lr = c->lr;
	if (c->warmup_steps > 0 && step < c->warmup_steps)
		return lr * (double)(step + 1) / (double)c->warmup_steps;
	switch (c->schedule) {
	case WF_SCHED_CONSTANT: break;
	case WF_SCHED_STEP:
		if (c->decay_steps > 0)
			lr *= pow(c->decay_rate, (double)(step / c->decay_steps));
		break;
	case WF_SCHED_COSINE: {
		long span = c->total_steps - c->warmup_steps;
		double t = span > 0 ? (double)(step - c->warmup_steps) / (double)span : 1.0;
		if (t > 1.0)
			t = 1.0;
		lr = c->min_lr + 0.5 * (lr - c->min_lr) * (1.0 + cos(M_PI * t));
		break;
	}
	}
	return lr;
}

int wf_optim_slots(const wf_optim_cfg *c)
{
	if (c->kind == WF_OPT_SGD)
		return c->momentum > 0 ? 1 : 0;
	return 2;
}

static void scale_range(float *g, size_t a, size_t b, double limit)
{
	double ss = 0;
	for (size_t i = a; i < b; i++)
		ss += (double)g[i] * g[i];
	double norm = sqrt(ss);
	if (isfinite(norm) && norm > limit) {
		float f = (float)(limit / norm);
		for (size_t i = a; i < b; i++)
			g[i] *= f;
	}
}

/* g[0..n) = clipped(grad_scale * g_in) on the host (Keras's order:
 * clipnorm per parameter, global_clipnorm, clipvalue). */
static void clip(const wf_optim_cfg *c, size_t n, float *g)
{
	if (c->clipnorm > 0) {
		if (!c->segs || c->nsegs < 1) {
			scale_range(g, 0, n, c->clipnorm);
		} else {
			for (int s = 0; s < c->nsegs && c->segs[s] < n; s++) {
				size_t b = c->segs[s + 1] < n ? c->segs[s + 1] : n;
				scale_range(g, c->segs[s], b, c->clipnorm);
			}
		}
	}
	if (c->global_clipnorm > 0)
		scale_range(g, 0, n, c->global_clipnorm);
	if (c->clipvalue > 0) {
		float cv = (float)c->clipvalue;
		for (size_t i = 0; i < n; i++)
			g[i] = g[i] > cv ? cv : g[i] < -cv ? -cv : g[i];
	}
}

/* The update over the runs of parameters that are not frozen. */
static int update_unfrozen(wf_backend *be, const wf_opt_desc *d, const wf_optim_cfg *c, size_t n,
			   float *p, const float *g, float *m, float *v)
{
	if (!c->frozen || !c->segs)
		return wf_op_optimizer_update(be, d, n, p, g, m, v);
	for (int s = 0; s < c->nsegs && c->segs[s] < n;) {
		if (c->frozen[s]) {
			s++;
			continue;
		}
		int e = s;
		while (e < c->nsegs && !c->frozen[e])
			e++;
		size_t a = c->segs[s], b = c->segs[e] < n ? c->segs[e] : n;
		int rc = wf_op_optimizer_update(be, d, b - a, p + a, g + a, m ? m + a : NULL,
						v ? v + a : NULL);
		if (rc != 0)
			return rc;
		s = e;
	}
	return 0;
}

static int apply_clipped(wf_backend *be, const wf_opt_desc *d0, const wf_optim_cfg *c, size_t n,
			 float *p, const float *g, float *m, float *v)
{
	wf_opt_desc d = *d0;
	int host = wf_backend_host_memory(be), rc;
	float *h = malloc(n * sizeof(float) + 1), *dev = NULL;
	if (!h)
		return wf_errf(&be->err, WF_ENOMEM, "gradient clipping: out of memory");
	if ((rc = wf_op_to_host(be, h, g, n * sizeof(float))) != 0)
		goto out;
	for (size_t i = 0; i < n; i++)
		h[i] *= d.grad_scale;
	d.grad_scale = 1.0f;
	clip(c, n, h);
	if (host) {
		rc = update_unfrozen(be, &d, c, n, p, h, m, v);
	} else if (!(dev = wf_op_alloc(be, n * sizeof(float) + 1))) {
		rc = wf_errf(&be->err, WF_ENOMEM, "gradient clipping: out of device memory");
	} else if ((rc = wf_op_to_device(be, dev, h, n * sizeof(float))) == 0) {
		rc = update_unfrozen(be, &d, c, n, p, dev, m, v);
	}
out:
	if (dev)
		wf_op_free(be, dev);
	free(h);
	return rc;
}

/* The update's settings for step (0-based) of c. */
static wf_opt_desc desc_of(const wf_optim_cfg *c, long step, float grad_scale)
{
	return (wf_opt_desc){
		.kind = c->kind,
		.lr = (float)wf_optim_lr(c, step),
		.momentum = (float)c->momentum,
		.nesterov = c->nesterov,
		.beta1 = (float)c->beta1,
		.beta2 = (float)c->beta2,
		.eps = (float)c->eps,
		.weight_decay = (float)c->weight_decay,
		.step = step + 1,
		.grad_scale = grad_scale,
	};
}

int wf_optim_apply(wf_backend *be, const wf_optim_cfg *c, long step, size_t n, float *p,
		   const float *g, float *m, float *v, float grad_scale)
{
	wf_opt_desc d = desc_of(c, step, grad_scale);
	if (c->clipnorm > 0 || c->global_clipnorm > 0 || c->clipvalue > 0)
		return apply_clipped(be, &d, c, n, p, g, m, v);
	return update_unfrozen(be, &d, c, n, p, g, m, v);
}

int wf_optim_apply_range(wf_backend *be, const wf_optim_cfg *c, long step, size_t lo, size_t hi,
			 float *p, const float *g, float *m, float *v, float grad_scale)
{
	if (c->clipnorm > 0 || c->global_clipnorm > 0 || c->clipvalue > 0)
		return wf_errf(&be->err, WF_EINVAL,
			       "optimizer: clipping needs the whole gradient, not a range");
	wf_opt_desc d = desc_of(c, step, grad_scale);
	if (hi <= lo)
		return 0;
	if (!c->frozen || !c->segs)
		return wf_op_optimizer_update(be, &d, hi - lo, p + lo, g + lo, m ? m + lo : NULL,
					      v ? v + lo : NULL);
	/* the runs of unfrozen segments, cut to [lo, hi) */
	for (int s = 0; s < c->nsegs && c->segs[s] < hi; s++) {
		size_t a = WF_MAX(c->segs[s], lo), b = WF_MIN(c->segs[s + 1], hi);
		if (c->frozen[s] || b <= a)
			continue;
		int rc = wf_op_optimizer_update(be, &d, b - a, p + a, g + a, m ? m + a : NULL,
						v ? v + a : NULL);
		if (rc != 0)
			return rc;
	}
	return 0;
}
