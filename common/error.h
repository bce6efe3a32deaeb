/* error.h: status codes and error messages shared by every weft module.
 * Library functions return 0 or a negative WF_E* code and fill a wf_err with
 * the cause, naming the offending file, field or value. Only main() turns a
 * code into a process exit status (docs/promises.md). */
#ifndef WF_ERROR_H
#define WF_ERROR_H

#include <stddef.h>

enum {
	WF_OK = 0,
	WF_EINVAL = -1,	    /* bad input: config, flag, data, request */
	WF_EIO = -2,	    /* a file could not be read or written */
	WF_EFORMAT = -3,    /* a file or message is corrupt or of another version */
	WF_ENOMEM = -4,	    /* allocation failed */
	WF_ENOTSUP = -5,    /* not built in, or not supported by this backend */
	WF_ETRANSIENT = -6, /* a peer vanished or timed out: a restart may help */
	WF_EINTERNAL = -7,  /* a library call failed unexpectedly */
	WF_ESTOPPED = -8,   /* interrupted by a signal or a stop request */
};

typedef struct wf_err {
	int code;	/* last WF_E* code, 0 when clear */
	char msg[1024]; /* human text: cause and the offending name/value */
} wf_err;

/* Record code and a printf-style message in err (may be NULL); returns code. */
int wf_errf(wf_err *err, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Prefix the existing message with more context ("loading x.h5: ..."). */
int wf_err_wrap(wf_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void wf_err_clear(wf_err *err);
/* Short name of a code ("invalid input", "transient"...). */
const char *wf_strerror(int code);
/* Process exit status for a code: 0, 1..127 permanent, 138 transient. */
int wf_exit_status(int code);

#define WF_EXIT_TRANSIENT 138

#endif
