/* sandbox.h: run a first parse of an untrusted file in a short-lived child
 * process (fork), so a crash or a hang inside a library (libhdf5 1.10 on
 * corrupt variable-length strings) costs the child, never the caller. The
 * caller repeats the work in-process only when the child succeeded. */
#ifndef WF_SANDBOX_H
#define WF_SANDBOX_H

#include "common/error.h"

/* Run fn(arg, err) in a forked child, killed after timeout_s seconds.
 * Returns 0 when fn returned 0; fn's code and message when it failed; and
 * WF_EFORMAT "<what>: the parser crashed (signal N) / did not finish within
 * T s: the file is corrupt" otherwise. Inside the child wf_sandbox_active()
 * is 1; checks nest (a child may run its own, shorter one). Safe in a
 * multi-threaded process as long as no other thread holds a lock fn needs
 * (the timeout bounds it). */
int wf_sandbox_check(const char *what, double timeout_s, int (*fn)(void *arg, wf_err *err),
		     void *arg, wf_err *err);
/* 1 inside a wf_sandbox_check child. */
int wf_sandbox_active(void);

#endif
