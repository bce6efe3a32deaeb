/* tfevents.h: a TensorBoard event-file writer. Scalars only: each record is
 * an `Event` protobuf (wall_time, step, summary of tag/simple_value pairs),
 * framed as TFRecord (length, masked CRC32C of the length, data, masked
 * CRC32C of the data). Not thread-safe: one writer per thread. */
#ifndef WF_TFEVENTS_H
#define WF_TFEVENTS_H

#include "common/crc32c.h"
#include "common/error.h"

#include <stddef.h>
#include <stdint.h>

typedef struct wf_tfevents wf_tfevents;

/* Create dir (mkdir -p) and open dir/events.out.tfevents.<time>.<host>
 * (appending if that name exists), then write the file_version event. */
int wf_tfevents_open(wf_tfevents **out, const char *dir, wf_err *err);
/* One event at step with n scalars tags[i] = values[i]. */
int wf_tfevents_scalars(wf_tfevents *w, long step, int n, const char *const *tags,
			const float *values, wf_err *err);
/* Flush buffered events to the file (not fsync). */
int wf_tfevents_flush(wf_tfevents *w, wf_err *err);
/* Path of the event file. */
const char *wf_tfevents_path(const wf_tfevents *w);
void wf_tfevents_close(wf_tfevents *w); /* flushes; accepts NULL */

/* TFRecord's masked form of a CRC-32C (wf_crc32c, common/crc32c.h). */
uint32_t wf_crc32c_mask(uint32_t crc);

#endif
