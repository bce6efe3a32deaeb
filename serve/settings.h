/* settings.h: Triton's trace and log settings, one store behind HTTP's
 * /v2/trace/setting, /v2/models/M/trace/setting and /v2/logging and KServe
 * gRPC's TraceSetting and LogSettings: the keys, their types, their checks
 * and what an update does live here; the front ends only translate JSON or
 * protobuf to wf_serve_setting and the views back. The log settings take
 * effect (the log level); the trace settings are kept and reported (weft
 * records no traces). Process-wide; thread-safe. */
#ifndef WF_SERVE_SETTINGS_H
#define WF_SERVE_SETTINGS_H

#include <stddef.h>

/* One setting as a request gives it. */
typedef enum {
	WF_SETTING_NULL,    /* clear: a model's trace setting follows the server's again */
	WF_SETTING_STRINGS, /* a list of strings (trace settings) */
	WF_SETTING_BOOL,
	WF_SETTING_UINT,
	WF_SETTING_STRING,
} wf_serve_setting_kind;

#define WF_SERVE_MAX_SETTINGS 16 /* settings in one request: more than either kind has */

typedef struct wf_serve_setting {
	const char *key;
	wf_serve_setting_kind kind;
	const char *const *v; /* WF_SETTING_STRINGS: [n] */
	int n;
	int b;		      /* WF_SETTING_BOOL */
	unsigned long long u; /* WF_SETTING_UINT */
	const char *s;	      /* WF_SETTING_STRING */
} wf_serve_setting;

/* ---- trace settings ---- */

enum {
	WF_TRACE_FILE,
	WF_TRACE_LEVEL, /* a list: OFF, TIMESTAMPS, TENSORS */
	WF_TRACE_RATE,
	WF_TRACE_COUNT,
	WF_TRACE_LOG_FREQUENCY,
	WF_TRACE_MODE,
	WF_TRACE_NKEYS,
};
#define WF_TRACE_MAX_VALUES 3

extern const char *const wf_serve_trace_keys[WF_TRACE_NKEYS];

/* The trace settings in effect for the server or one model. */
typedef struct wf_serve_trace {
	char v[WF_TRACE_NKEYS][WF_TRACE_MAX_VALUES][256];
	int n[WF_TRACE_NKEYS]; /* values of each key (trace_level may have several) */
} wf_serve_trace;

/* Apply the n settings to the server's (model NULL) or one model's trace
 * settings, all or none: 0, or -1 with why naming the key at fault. */
int wf_serve_trace_update(const char *model, const wf_serve_setting *s, int n, char *why,
			  size_t cap);
/* The settings in effect for model (NULL: the server's). */
void wf_serve_trace_get(const char *model, wf_serve_trace *out);

/* ---- log settings ---- */

typedef struct wf_serve_log {
	char file[256]; /* "": stderr */
	int info, warning, error;
	unsigned verbose_level; /* > 0: debug lines */
	char format[16];	/* "default" */
} wf_serve_log;

/* The settings of the command line (--log-*): applied (the log level) and
 * kept as the ones to report. */
void wf_serve_log_init(const wf_serve_log *l);
/* Apply the n settings, all or none (the log level follows at once): 0, or
 * -1 with why naming the key at fault. */
int wf_serve_log_update(const wf_serve_setting *s, int n, char *why, size_t cap);
void wf_serve_log_get(wf_serve_log *out);

#endif
