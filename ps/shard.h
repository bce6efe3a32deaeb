/* shard.h: a parameter server's checkpoint shard,
 * <root>/step-<N>/ps-<i>-of-<n>.h5 (HDF5): per chunk its values, optimizer
 * slots and version; server 0 also keeps the non-trainable state. Written to
 * a temporary name, fsynced and renamed. A step directory counts only once
 * the chief has written its DONE file. */
#ifndef WF_PS_SHARD_H
#define WF_PS_SHARD_H

#include "common/error.h"

#include <stddef.h>

#define WF_PS_SHARD_FORMAT 1

typedef struct wf_ps_shard_chunk {
	int index;	/* global chunk index */
	size_t offset;	/* floats */
	size_t count;	/* floats */
	long version;	/* steps applied */
	float *values;	/* [count] */
	float *slot[2]; /* [count] each, the first nslots used */
} wf_ps_shard_chunk;

/* The shard file path for (root, step, server, nservers). */
void wf_ps_shard_path(char *out, size_t n, const char *root, long step, int server, int nservers);
/* Write a shard atomically (temp file, fsync, rename, fsync of the directory). */
int wf_ps_shard_save(const char *path, int server, int nservers, long step,
		     const wf_ps_shard_chunk *chunks, int nchunks, int nslots, const float *state,
		     size_t nstate, wf_err *err);
/* Read a shard into the caller's buffers: every chunk in chunks[] must be
 * in the file with the same offset and count, nslots must match. */
int wf_ps_shard_load(const char *path, int server, int nservers, wf_ps_shard_chunk *chunks,
		     int nchunks, int nslots, float *state, size_t nstate, long *step, wf_err *err);
/* The newest step under root (or exactly want_step when >= 0) whose
 * directory has DONE, this server's shard, and files that match DONE's
 * checksums (common/ckptdir; newer ones skipped are logged with the reason);
 * path receives the shard path. WF_EIO naming root when none exists. */
int wf_ps_ckpt_find(const char *root, int server, int nservers, long want_step, long *step,
		    char *path, size_t n, wf_err *err);

#endif
