/* sandbox.h: run a first parse of an untrusted file in a short-lived child
 * process (fork), so a crash or a hang inside a library (libhdf5 1.10 on
 * corrupt variable-length strings) costs the child, never the caller. The
 * caller repeats the work in-process only when the child succeeded. */
#ifndef WF_SANDBOX_H
#define WF_SANDBOX_H

#include "common/error.h"

#include <stddef.h>

/* Memory a check of a file may use beyond what the process already has:
 * WF_SANDBOX_MEM_BASE plus WF_SANDBOX_MEM_PER_BYTE times the file's size (a
 * model's weights are its file; parsing them costs less than four times
 * that). A file that needs more is refused as corrupt or crafted. */
#define WF_SANDBOX_MEM_BASE	((size_t)512 << 20) /* bytes */
#define WF_SANDBOX_MEM_PER_BYTE 4

/* The memory budget of a check of the file at path (WF_SANDBOX_MEM_BASE
 * when it cannot be sized). */
size_t wf_sandbox_mem_for_file(const char *path);
/* Run fn(arg, err) in a forked child, killed after timeout_s seconds, whose
 * address space may grow by at most mem_bytes beyond the caller's
 * (RLIMIT_AS; 0: no limit). Returns 0 when fn returned 0; fn's code and
 * message when it failed; and WF_EFORMAT "<what>: the parser crashed (signal
 * N) / did not finish within T s / needed more than M MiB: the file is
 * corrupt" otherwise. Inside the child wf_sandbox_active() is 1; checks nest
 * (a child may run its own, shorter one). Safe in a multi-threaded process as
 * long as no other thread holds a lock fn needs (the timeout bounds it). */
int wf_sandbox_check(const char *what, double timeout_s, size_t mem_bytes,
		     int (*fn)(void *arg, wf_err *err), void *arg, wf_err *err);
/* 1 inside a wf_sandbox_check child. */
int wf_sandbox_active(void);
/* Inside a check: lower the address-space limit to what the child uses now
 * plus mem_bytes (never above the check's own), for one part of the parse
 * with a tighter bound; returns what wf_sandbox_widen restores. Outside a
 * check, or without a limit: does nothing and returns 0. */
size_t wf_sandbox_narrow(size_t mem_bytes);
void wf_sandbox_widen(size_t prev);
/* 1 when a failure (code, message) is an allocation that a limit refused. */
int wf_sandbox_out_of_memory(int code, const char *msg);

#endif
