#include "common/log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static int log_level = WF_LOG_INFO;
static char log_prefix[64];
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;

void wf_log_set_level(int level)
{
	log_level = level;
}

void wf_log_set_prefix(const char *prefix)
{
	snprintf(log_prefix, sizeof(log_prefix), "%s", prefix ? prefix : "");
}

void wf_log(int level, const char *fmt, ...)
{
	static const char *names[] = {"debug", "info", "warning", "error"};
	if (level < log_level)
		return;
	char line[2048];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	pthread_mutex_lock(&log_lock);
	if (log_prefix[0])
		fprintf(stderr, "[%s] ", log_prefix);
	if (level == WF_LOG_INFO)
		fprintf(stderr, "%s\n", line);
	else
		fprintf(stderr, "%s: %s\n", names[level], line);
	fflush(stderr);
	pthread_mutex_unlock(&log_lock);
}
