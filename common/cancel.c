/* cancel.c: one atomic flag. */
#include "common/cancel.h"

#include <stdatomic.h>

static atomic_int cancelled;

void wf_cancel_request(void)
{
	atomic_store(&cancelled, 1);
}

int wf_cancel_requested(void)
{
	return atomic_load_explicit(&cancelled, memory_order_relaxed);
}

int wf_cancel_check(const char *what, wf_err *err)
{
	if (!wf_cancel_requested())
		return 0;
	return wf_errf(err, WF_ESTOPPED, "%s: stopped (the process is stopping)", what);
}
