/* optim.h: optimizers and learning-rate schedules over ranges of the flat
 * parameter vector. The same code runs in a single process, on every
 * allreduce rank and on each parameter server for its chunks. */
#ifndef WF_OPTIM_H
#define WF_OPTIM_H

#include "kernels/kernels.h"

#include <stddef.h>

typedef enum { WF_SCHED_CONSTANT, WF_SCHED_STEP, WF_SCHED_COSINE } wf_sched_kind;

typedef struct wf_optim_cfg {
	wf_opt_kind kind;	  /* sgd, adam, adamw */
	double lr;		  /* base learning rate */
	double momentum;	  /* sgd */
	int nesterov;		  /* sgd */
	double beta1, beta2, eps; /* adam, adamw (0.9, 0.999, 1e-7 as Keras) */
	double weight_decay;
	wf_sched_kind schedule;
	long warmup_steps; /* linear warm-up from 0 to lr */
	long total_steps;  /* cosine: decays to min_lr at this step */
	double min_lr;	   /* cosine floor */
	long decay_steps;  /* step: multiply by decay_rate every decay_steps */
	double decay_rate;
	/* gradient clipping as Keras does it, in this order; 0 = off */
	double clipnorm;	/* each parameter's gradient to this L2 norm */
	double global_clipnorm; /* all gradients together to this L2 norm */
	double clipvalue;	/* every element to [-clipvalue, clipvalue] */
	/* clipnorm: the parameters' boundaries in the flat vector, ascending
	 * offsets segs[0..nsegs] (segs[0] = 0); NULL: the range is one parameter.
	 * Not owned; must outlive the optimizer's use. */
	const size_t *segs;
	int nsegs;
	/* frozen[s] = 1: parameter s (segs[s]..segs[s+1]) is not updated at all
	 * (no decay, no slot change); NULL: none. Needs the whole vector. */
	const unsigned char *frozen;
} wf_optim_cfg;

/* The defaults, written here once (the trainer's config table shows them
 * through these macros): sgd, lr 0.1, momentum 0.9, constant schedule. */
#define WF_OPTIM_LR_DEFAULT	    0.1
#define WF_OPTIM_MOMENTUM_DEFAULT   0.9
#define WF_OPTIM_BETA1_DEFAULT	    0.9
#define WF_OPTIM_BETA2_DEFAULT	    0.999
#define WF_OPTIM_EPSILON_DEFAULT    1e-07
#define WF_OPTIM_DECAY_RATE_DEFAULT 0.1
void wf_optim_cfg_default(wf_optim_cfg *c);
/* The settings that decide an update, as space-separated config-key=value
 * tokens ("optimizer.name=sgd optimizer.lr=0.1 ..."; only those the
 * optimizer and schedule use, numbers as the shortest text that reads back exactly) into buf
 * (n bytes); processes that apply updates of one job compare these texts.
 * Returns buf. */
const char *wf_optim_describe(const wf_optim_cfg *c, char *buf, size_t n);
/* Learning rate at 0-based step (the step about to be applied). */
double wf_optim_lr(const wf_optim_cfg *c, long step);
/* Optimizer slots per parameter: 0 (plain SGD), 1 (momentum), 2 (Adam). */
int wf_optim_slots(const wf_optim_cfg *c);
/* Apply step `step` (0-based) to n parameters p with gradients g (summed
 * over the global batch and multiplied by grad_scale first); m, v are the
 * slots (NULL where wf_optim_slots says unused). Clipping (when set) sees
 * the scaled gradients of this range only: clipnorm and global_clipnorm
 * need the whole vector (offset 0, n = all parameters). */
int wf_optim_apply(wf_backend *be, const wf_optim_cfg *c, long step, size_t n, float *p,
		   const float *g, float *m, float *v, float grad_scale);
/* As wf_optim_apply over the floats [lo, hi) of whole-vector buffers p, g,
 * m, v (offset 0; c's frozen segments count from there): each float's
 * update is the one wf_optim_apply over the whole vector makes, so
 * ranges applied one by one end bitwise equal to it. WF_EINVAL when c
 * clips (clipping needs the whole gradient). */
int wf_optim_apply_range(wf_backend *be, const wf_optim_cfg *c, long step, size_t lo, size_t hi,
			 float *p, const float *g, float *m, float *v, float grad_scale);

#endif
