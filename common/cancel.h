/* cancel.h: a process-wide request to stop long work that has no deadline of
 * its own (loading a model file, the check of it in a child process, building
 * its plans): a stop signal sets it, the work's loops read it and give up
 * with WF_ESTOPPED. Thread-safe; wf_cancel_request is async-signal-safe. */
#ifndef WF_CANCEL_H
#define WF_CANCEL_H

#include "common/error.h"

void wf_cancel_request(void);
/* 1 once wf_cancel_request was called. */
int wf_cancel_requested(void);
/* 0, or WF_ESTOPPED "<what>: stopped (the process is stopping)" once
 * cancelled: the check the loops call. */
int wf_cancel_check(const char *what, wf_err *err);

#endif
