#include "common/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int wf_errf(wf_err *err, int code, const char *fmt, ...)
{
	if (!err)
		return code;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
	va_end(ap);
	err->code = code;
	return code;
}

int wf_err_wrap(wf_err *err, const char *fmt, ...)
{
	if (!err)
		return WF_EINTERNAL;
	char prefix[512], old[sizeof(err->msg)];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(prefix, sizeof(prefix), fmt, ap);
	va_end(ap);
	memcpy(old, err->msg, sizeof(old));
	size_t n = strlen(prefix);
	if (n > sizeof(err->msg) - 3)
		n = sizeof(err->msg) - 3;
	memcpy(err->msg, prefix, n);
	memcpy(err->msg + n, ": ", 2);
	size_t room = sizeof(err->msg) - n - 2;
	size_t m = strnlen(old, room - 1);
	memcpy(err->msg + n + 2, old, m);
	err->msg[n + 2 + m] = '\0';
	return err->code;
}

void wf_err_clear(wf_err *err)
{
	if (err) {
		err->code = 0;
		err->msg[0] = '\0';
	}
}

const char *wf_strerror(int code)
{
	switch (code) {
	case WF_OK: return "ok";
	case WF_EINVAL: return "invalid input";
	case WF_EIO: return "i/o error";
	case WF_EFORMAT: return "bad format";
	case WF_ENOMEM: return "out of memory";
	case WF_ENOTSUP: return "not supported";
	case WF_ETRANSIENT: return "transient failure";
	case WF_EINTERNAL: return "internal error";
	case WF_ESTOPPED: return "stopped";
	default: return "unknown error";
	}
}

int wf_exit_status(int code)
{
	switch (code) {
	case WF_OK: return 0;
	case WF_EINVAL: return 2;
	case WF_EIO: return 3;
	case WF_EFORMAT: return 4;
	case WF_ENOMEM: return 5;
	case WF_ENOTSUP: return 6;
	case WF_ETRANSIENT: return WF_EXIT_TRANSIENT;
	case WF_ESTOPPED: return 130;
	default: return 1;
	}
}
