/* repo.h: the model repository. Serves BASE/<version>/model.h5 (the highest
 * numeric version), polls BASE for new versions, loads and warms a new one in
 * a background thread and swaps it in; a version is freed when its last
 * request releases it (reference counting), so no request fails on a swap.
 * Thread-safe: every function may be called from any thread. */
#ifndef WF_SERVE_REPO_H
#define WF_SERVE_REPO_H

#include "common/error.h"
#include "model/model.h"
#include "serve/image.h"

#include <stdatomic.h>

/* Batch sizes an executor runs at: powers of two up to max_batch (and
 * max_batch itself), so a backend's plans never change shape. */
#define WF_SERVE_MAX_BUCKETS 16

/* What one batch thread owns inside a version: its backend and executors. */
typedef struct wf_serve_slot {
	wf_backend *be;
	int nbuckets;
	int bucket[WF_SERVE_MAX_BUCKETS]; /* batch size of each executor */
	wf_exec *ex[WF_SERVE_MAX_BUCKETS];
	float *in;  /* [max_batch,H,W,C] staging */
	float *out; /* [max_batch,K] logits */
} wf_serve_slot;

typedef struct wf_serve_version {
	long version;
	wf_model *model;
	wf_model_meta meta;
	wf_serve_io io;
	int max_batch;
	int nslots; /* one per batch thread */
	wf_serve_slot *slots;
	atomic_int refs;     /* the repository's reference + one per request */
	double load_seconds; /* load + warm-up time */
} wf_serve_version;

typedef struct wf_serve_repo_opts {
	const char *name;      /* model name in URLs */
	const char *base_path; /* BASE: holds <version>/model.h5 */
	const char *device;    /* backend: auto, cpu, cuda, ref */
	const char *precision; /* fp32 (NULL), bf16, auto: wf_backend_set_precision */
	int threads;	       /* backend threads per executor (0: default) */
	int nslots;	       /* batch threads */
	int max_batch;	       /* largest executor batch */
	double poll_seconds;   /* 0: load once, never poll */
} wf_serve_repo_opts;

typedef struct wf_serve_repo_status {
	long version;	      /* serving version, 0 when none */
	long loading_version; /* being loaded now, 0 when none */
	long failed_version;  /* last version that failed to load, 0 when none */
	char error[1024];     /* why it failed */
	long swaps;	      /* versions swapped in so far */
} wf_serve_repo_status;

typedef struct wf_serve_repo wf_serve_repo;

/* Check the base path and start the polling thread, which loads the first
 * version in the background. Fails when the base path is not a directory. */
int wf_serve_repo_create(wf_serve_repo **out, const wf_serve_repo_opts *o, wf_err *err);
/* Stop polling and drop the repository's reference to its version. */
void wf_serve_repo_free(wf_serve_repo *r);

/* The serving version (version 0) or exactly `version`, with a reference the
 * caller must release; NULL when not loaded. */
wf_serve_version *wf_serve_repo_acquire(wf_serve_repo *r, long version);
void wf_serve_version_release(wf_serve_version *v);
void wf_serve_repo_get_status(wf_serve_repo *r, wf_serve_repo_status *st);
/* Load and warm one model file (what the poller does), for tests and tools. */
int wf_serve_version_load(wf_serve_version **out, const char *path, long version,
			  const wf_serve_repo_opts *o, wf_err *err);

#endif
