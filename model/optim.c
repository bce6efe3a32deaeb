#include "model/optim.h"

#include <math.h>
#include <string.h>

void wf_optim_cfg_default(wf_optim_cfg *c)
{
	memset(c, 0, sizeof(*c));
	c->kind = WF_OPT_SGD;
	c->lr = 0.1;
	c->momentum = 0.9;
	c->beta1 = 0.9;
	c->beta2 = 0.999;
	c->eps = 1e-7;
	c->schedule = WF_SCHED_CONSTANT;
	c->decay_rate = 0.1;
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

int wf_optim_apply(wf_backend *be, const wf_optim_cfg *c, long step, size_t n, float *p,
		   const float *g, float *m, float *v, float grad_scale)
{
	wf_opt_desc d = {
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
	return be->ops->optimizer_update(be, &d, n, p, g, m, v);
}
