/* settings.c: the trace and log settings (settings.h): defaults, checks,
 * all-or-nothing updates, the log level. */
#include "serve/settings.h"

#include "common/log.h"

#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

/* ---- trace settings ------------------------------------------------------ */

const char *const wf_serve_trace_keys[WF_TRACE_NKEYS] = {
	"trace_file", "trace_level", "trace_rate", "trace_count", "log_frequency", "trace_mode",
};

/* Triton's defaults: no tracing. */
static const char *const trace_defaults[WF_TRACE_NKEYS] = {"", "OFF", "1000", "-1", "0", "triton"};

/* A model's own settings (set bits of mask), over the server's. */
typedef struct model_trace {
	char name[256];
	unsigned mask;
	wf_serve_trace own;
	struct model_trace *next;
} model_trace;

static wf_serve_trace server_trace;
static int trace_ready;
static model_trace *models;

/* With mu held. */
static void trace_defaults_once(void)
{
	if (trace_ready)
		return;
	for (int k = 0; k < WF_TRACE_NKEYS; k++) {
		snprintf(server_trace.v[k][0], sizeof(server_trace.v[k][0]), "%s",
			 trace_defaults[k]);
		server_trace.n[k] = 1;
	}
	trace_ready = 1;
}

static int key_index(const char *key)
{
	for (int k = 0; k < WF_TRACE_NKEYS; k++)
		if (key && !strcmp(key, wf_serve_trace_keys[k]))
			return k;
	return -1;
}

/* 1 when s is an integer >= min. */
static int is_int(const char *s, long long min)
{
	char *end;
	if (!*s || strspn(s, "-0123456789") != strlen(s))
		return 0;
	long long x = strtoll(s, &end, 10);
	return !*end && x >= min;
}

/* One value of key k; NULL when it is fine, else what is wrong. */
static const char *trace_value_error(int k, const char *v)
{
	switch (k) {
	case WF_TRACE_LEVEL:
		return strcmp(v, "OFF") && strcmp(v, "TIMESTAMPS") && strcmp(v, "TENSORS")
			       ? "must be OFF, TIMESTAMPS or TENSORS"
			       : NULL;
	case WF_TRACE_RATE:
	case WF_TRACE_LOG_FREQUENCY: return is_int(v, 0) ? NULL : "must be an integer >= 0";
	case WF_TRACE_COUNT:
		return is_int(v, -1) ? NULL : "must be an integer >= -1 (-1: no limit)";
	case WF_TRACE_MODE: return strcmp(v, "triton") ? "must be \"triton\"" : NULL;
	default: return strlen(v) >= sizeof(server_trace.v[0][0]) ? "is too long" : NULL;
	}
}

/* Set key k of t from s (not WF_SETTING_NULL); -1 with why. */
static int trace_set(wf_serve_trace *t, int k, const wf_serve_setting *s, char *why, size_t cap)
{
	char num[32];
	const char *one = s->s;
	const char *const *v = &one;
	int n = 1;
	if (s->kind == WF_SETTING_STRINGS) {
		v = s->v;
		n = s->n;
	} else if (s->kind == WF_SETTING_UINT) {
		snprintf(num, sizeof(num), "%llu", s->u);
		one = num;
	} else if (s->kind != WF_SETTING_STRING) {
		snprintf(why, cap, "trace setting '%s' must be a string or a list of strings",
			 s->key);
		return -1;
	}
	int max = k == WF_TRACE_LEVEL ? WF_TRACE_MAX_VALUES : 1;
	if (n < 1 || n > max) {
		snprintf(why, cap, "trace setting '%s' takes %s value%s, got %d", s->key,
			 max == 1 ? "one" : "one to three", max == 1 ? "" : "s", n);
		return -1;
	}
	for (int i = 0; i < n; i++) {
		const char *e = trace_value_error(k, v[i] ? v[i] : "");
		if (e) {
			snprintf(why, cap, "trace setting '%s' %s, got \"%.64s\"", s->key, e,
				 v[i] ? v[i] : "");
			return -1;
		}
		snprintf(t->v[k][i], sizeof(t->v[k][i]), "%s", v[i] ? v[i] : "");
	}
	t->n[k] = n;
	return 0;
}

static model_trace *find_model(const char *name)
{
	for (model_trace *m = models; m; m = m->next)
		if (!strcmp(m->name, name))
			return m;
	return NULL;
}

int wf_serve_trace_update(const char *model, const wf_serve_setting *s, int n, char *why,
			  size_t cap)
{
	if (model && strlen(model) >= sizeof(((model_trace *)0)->name)) {
		snprintf(why, cap, "the model name is too long");
		return -1;
	}
	pthread_mutex_lock(&mu);
	trace_defaults_once();
	model_trace *m = model ? find_model(model) : NULL;
	wf_serve_trace t = m ? m->own : server_trace; /* a new model's: none of its own */
	unsigned mask = m ? m->mask : 0;
	int rc = 0;
	for (int i = 0; i < n && !rc; i++) {
		int k = key_index(s[i].key);
		int clear = s[i].kind == WF_SETTING_NULL ||
			    (s[i].kind == WF_SETTING_STRINGS && s[i].n == 0);
		if (k < 0) {
			snprintf(why, cap,
				 "unknown trace setting '%.64s' (trace_file, trace_level, "
				 "trace_rate, trace_count, log_frequency, trace_mode)",
				 s[i].key ? s[i].key : "");
			rc = -1;
		} else if (clear && model) { /* the server's value again */
			mask &= ~(1u << k);
		} else if (clear) {
			snprintf(t.v[k][0], sizeof(t.v[k][0]), "%s", trace_defaults[k]);
			t.n[k] = 1;
		} else if ((rc = trace_set(&t, k, &s[i], why, cap)) == 0) {
			mask |= 1u << k;
		}
	}
	if (!rc && !model) {
		server_trace = t;
	} else if (!rc) {
		if (!m && (m = calloc(1, sizeof(*m)))) {
			snprintf(m->name, sizeof(m->name), "%s", model);
			m->next = models;
			models = m;
		}
		if (m) {
			m->own = t;
			m->mask = mask;
		} else {
			snprintf(why, cap, "out of memory");
			rc = -1;
		}
	}
	pthread_mutex_unlock(&mu);
	return rc;
}

void wf_serve_trace_get(const char *model, wf_serve_trace *out)
{
	pthread_mutex_lock(&mu);
	trace_defaults_once();
	*out = server_trace;
	model_trace *m = model ? find_model(model) : NULL;
	for (int k = 0; m && k < WF_TRACE_NKEYS; k++)
		if (m->mask & (1u << k)) {
			memcpy(out->v[k], m->own.v[k], sizeof(out->v[k]));
			out->n[k] = m->own.n[k];
		}
	pthread_mutex_unlock(&mu);
}

/* ---- log settings -------------------------------------------------------- */

static wf_serve_log log_now = {.info = 1, .warning = 1, .error = 1, .format = "default"};

/* The most verbose switch that is on. */
static void apply_level(const wf_serve_log *l)
{
	wf_log_set_level(l->verbose_level > 0 ? WF_LOG_DEBUG
			 : l->info	      ? WF_LOG_INFO
			 : l->warning	      ? WF_LOG_WARN
			 : l->error	      ? WF_LOG_ERROR
					      : WF_LOG_ERROR + 1);
}

void wf_serve_log_init(const wf_serve_log *l)
{
	pthread_mutex_lock(&mu);
	log_now = *l;
	if (!log_now.format[0])
		snprintf(log_now.format, sizeof(log_now.format), "default");
	apply_level(&log_now);
	pthread_mutex_unlock(&mu);
}

/* Set one log setting of l from s; -1 with why. */
static int log_set(wf_serve_log *l, const wf_serve_setting *s, char *why, size_t cap)
{
	const char *key = s->key ? s->key : "";
	int *flag = !strcmp(key, "log_info")	  ? &l->info
		    : !strcmp(key, "log_warning") ? &l->warning
		    : !strcmp(key, "log_error")	  ? &l->error
						  : NULL;
	wf_serve_setting_kind want = flag				 ? WF_SETTING_BOOL
				     : !strcmp(key, "log_verbose_level") ? WF_SETTING_UINT
									 : WF_SETTING_STRING;
	if (!flag && strcmp(key, "log_verbose_level") && strcmp(key, "log_file") &&
	    strcmp(key, "log_format")) {
		snprintf(why, cap,
			 "unknown log setting '%.64s' (log_file, log_info, log_warning, log_error, "
			 "log_verbose_level, log_format)",
			 key);
		return -1;
	}
	if (s->kind != want) {
		snprintf(why, cap, "log setting '%s' must be %s", key,
			 want == WF_SETTING_BOOL   ? "a boolean"
			 : want == WF_SETTING_UINT ? "an unsigned integer"
						   : "a string");
		return -1;
	}
	if (flag) {
		*flag = s->b != 0;
	} else if (want == WF_SETTING_UINT) {
		if (s->u > INT_MAX) {
			snprintf(why, cap, "log setting '%s' is at most %d", key, INT_MAX);
			return -1;
		}
		l->verbose_level = (unsigned)s->u;
	} else if (!strcmp(key, "log_file") && strcmp(s->s ? s->s : "", l->file)) {
		snprintf(why, cap,
			 "log setting 'log_file' can only be set at start (--log-file); it is "
			 "\"%s\"",
			 l->file);
		return -1;
	} else if (!strcmp(key, "log_format") && strcmp(s->s ? s->s : "", "default")) {
		snprintf(why, cap,
			 "log setting 'log_format' must be \"default\" (weft-serve writes no "
			 "other format)");
		return -1;
	}
	return 0;
}

int wf_serve_log_update(const wf_serve_setting *s, int n, char *why, size_t cap)
{
	pthread_mutex_lock(&mu);
	wf_serve_log l = log_now;
	int rc = 0;
	for (int i = 0; i < n && !rc; i++)
		rc = log_set(&l, &s[i], why, cap);
	if (!rc) {
		log_now = l;
		apply_level(&l);
	}
	pthread_mutex_unlock(&mu);
	return rc;
}

void wf_serve_log_get(wf_serve_log *out)
{
	pthread_mutex_lock(&mu);
	*out = log_now;
	pthread_mutex_unlock(&mu);
}
