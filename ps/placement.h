/* placement.h: how the flat parameter vector is cut into chunks and which
 * server keeps each chunk. Deterministic from (view table, servers,
 * chunk_bytes), so every worker and server computes the same placement.
 * Chunks are numbered in ascending offset order, the order in which
 * backward completes gradients. */
#ifndef WF_PS_PLACEMENT_H
#define WF_PS_PLACEMENT_H

#include "common/error.h"
#include "model/model.h"

#include <stddef.h>

/* The cap when a caller passes 0 (the library's tests and bench_ps). */
#define WF_PS_CHUNK_BYTES_DEFAULT (4u << 20)
/* The cap weft's processes use (config key ps.chunk_bytes): 1 MiB, small
 * enough that pushes start early in backward and that a few servers share
 * even a small model. */
#define WF_PS_CHUNK_BYTES_JOB_DEFAULT 1048576

typedef struct wf_ps_chunk {
	size_t offset; /* floats from the start of the parameter vector */
	size_t count;  /* floats */
	int server;    /* index of the server that keeps it */
} wf_ps_chunk;

typedef struct wf_ps_placement {
	size_t nparams;	    /* floats */
	size_t chunk_bytes; /* the cap used */
	int nservers;
	int nchunks;
	wf_ps_chunk *chunks; /* [nchunks], ascending offsets covering [0, nparams) */
	size_t *load;	     /* [nservers] floats kept by each server */
} wf_ps_placement;

/* Cut [0, nparams) into chunks of at most chunk_bytes (0: the default) that
 * never split a trainable view that fits in one chunk (larger views are
 * split into nearly equal pieces), then assign chunks to nservers servers:
 * largest first to the least loaded server, ties to the lower index.
 * views may be NULL (nviews 0): plain equal cuts. */
int wf_ps_place(wf_ps_placement *out, const wf_view *views, int nviews, size_t nparams,
		int nservers, size_t chunk_bytes, wf_err *err);
void wf_ps_placement_free(wf_ps_placement *p);
/* Number of chunks kept by server s. */
int wf_ps_placement_count(const wf_ps_placement *p, int s);

#endif
