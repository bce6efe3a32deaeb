/* log.h: leveled logging to stderr, one line per call, with an optional
 * process-wide prefix (the role, e.g. "worker:1"). Thread-safe. */
#ifndef WF_LOG_H
#define WF_LOG_H

enum { WF_LOG_DEBUG, WF_LOG_INFO, WF_LOG_WARN, WF_LOG_ERROR };

void wf_log_set_level(int level);
void wf_log_set_prefix(const char *prefix);
void wf_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define wf_debug(...) wf_log(WF_LOG_DEBUG, __VA_ARGS__)
#define wf_info(...)  wf_log(WF_LOG_INFO, __VA_ARGS__)
#define wf_warn(...)  wf_log(WF_LOG_WARN, __VA_ARGS__)
#define wf_error(...) wf_log(WF_LOG_ERROR, __VA_ARGS__)

#endif
