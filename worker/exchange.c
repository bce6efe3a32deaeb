/* exchange.c: the wrappers of the exchange table (exchange.h): every
 * trainer call goes through them, and they supply the default of each
 * optional slot, so a backend (local, mpi, nccl, ps) fills only what it has. */
#include "worker/exchange.h"

/* ---- wrappers ---------------------------------------------------------- */

int wf_exchange_start(wf_exchange *x, const char *resume_dir, long resume_step, long *start_step,
		      wf_err *err)
{
	return x->ops->start(x, resume_dir, resume_step, start_step, err);
}

void wf_exchange_grad_ready(void *arg, size_t done)
{
	wf_exchange *x = arg;
	if (x->ops->grad_ready)
		x->ops->grad_ready(x, done);
}

int wf_exchange_step(wf_exchange *x, long step, long *to, wf_err *err)
{
	*to = step + 1;
	return x->ops->step(x, step, to, err);
}

int wf_exchange_save(wf_exchange *x, const char *dir, long step, wf_err *err)
{
	return x->ops->save ? x->ops->save(x, dir, step, err) : 0;
}

int wf_exchange_finish(wf_exchange *x, long *to, wf_err *err)
{
	*to = -1;
	return x->ops->finish ? x->ops->finish(x, to, err) : 0;
}

int wf_exchange_should_stop(wf_exchange *x, long step, int requested)
{
	return x->ops->should_stop ? x->ops->should_stop(x, step, requested) : requested != 0;
}

int wf_exchange_get_feed(wf_exchange *x, wf_exchange_feed *f)
{
	return x->ops->feed ? x->ops->feed(x, f) : 0;
}

int wf_exchange_backup_stats(wf_exchange *x, wf_exchange_backup *out, wf_err *err)
{
	if (!x->ops->backup_stats)
		return wf_errf(err, WF_EINVAL, "%s: no backup workers", x->name);
	return x->ops->backup_stats(x, out, err);
}

int wf_exchange_leave(wf_exchange *x, int *left, wf_err *err)
{
	*left = 0;
	return x->ops->leave ? x->ops->leave(x, left, err) : 0;
}

int wf_exchange_layer_hook(void *arg, int layer, size_t lo, size_t hi, int state)
{
	wf_exchange *x = arg;
	(void)layer;
	if (x->ops->layer_wait)
		x->ops->layer_wait(x, lo, hi, state);
	return 0;
}

int wf_exchange_settle(wf_exchange *x, long *to, wf_err *err)
{
	return x->ops->settle ? x->ops->settle(x, to, err) : 0;
}

void wf_exchange_free(wf_exchange *x)
{
	if (x)
		x->ops->free(x);
}
