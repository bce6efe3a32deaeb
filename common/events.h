/* events.h: machine-readable events, one JSON object per line, for tools and
 * tests that must not depend on the wording of log lines. Every process of a
 * job may append to the same file: each line is one write(2) on an O_APPEND
 * descriptor, so lines never interleave. Off until wf_events_open.
 *
 * A line: {"time": <unix seconds>, "who": "worker:1", "pid": 123,
 *          "event": "checkpoint", ...the event's own fields}
 * The events and their fields are listed in the README ("Events"). */
#ifndef WF_EVENTS_H
#define WF_EVENTS_H

#include "common/error.h"

#include <jansson.h>

/* Append events to `path` (created 0644 if missing) as `who` (the role,
 * "worker:1", or "launch"). An empty or NULL path turns events off. Opening
 * again replaces the file and the name. */
int wf_events_open(const char *path, const char *who, wf_err *err);
/* Record one event; takes ownership of `fields` (a JSON object or NULL).
 * Thread-safe; a failed write is reported once on stderr and ignored. */
void wf_event(const char *name, json_t *fields);
void wf_events_close(void);

#endif
