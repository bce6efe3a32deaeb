/* repo.h: the model repository. Holds many models (one from
 * --model_name/--model_base_path, a TF Serving --model_config_file, or a
 * Triton-style --model_repository), each a BASE/<version>/model.h5 tree
 * served under a version policy (latest N, specific, all) with version
 * labels. A poller thread scans the base paths (and re-reads the config
 * file), loads and warms new versions in the background, and drops versions
 * that left the policy; a dropped version is freed when its last request
 * releases it (reference counting), so no request fails on a change. A
 * version that fails to load is reported, skipped, and retried when its
 * file changes; under "latest" the newest versions that load are served.
 * Thread-safe: every function may be called from any thread.
 *
 * Shared between models: the batch threads (--num_batch_threads; each
 * version has one executor slot per batch thread), the request queue and its
 * bound, the HTTP connections. Per model: executors and their buffers (its
 * memory, bounded by its max batch), its compute threads per forward
 * (config.pbtxt parameters weft_threads, else --threads), the batch threads
 * it may hold at once (config.pbtxt instance_group count) and its
 * statistics. */
#ifndef WF_SERVE_REPO_H
#define WF_SERVE_REPO_H

#include "common/error.h"
#include "model/batchplan.h"
#include "model/model.h"
#include "common/image.h"
#include "serve/modelconfig.h"

#include <stdatomic.h>

/* What one batch thread owns inside a version: its backend and the batch
 * plan (executors at every batch size, staging buffers). */
typedef struct wf_serve_slot {
	wf_backend *be;
	wf_batchplan *plan;
} wf_serve_slot;

/* Triton's statistics extension, per version; nanoseconds. */
typedef struct wf_serve_stats {
	atomic_ulong success, success_ns, fail, fail_ns;
	atomic_ulong queue_ns, input_ns, infer_ns, output_ns; /* summed over requests */
	atomic_ulong inferences, executions;		      /* samples, forwards */
	atomic_ulong last_ms;				      /* ms since the epoch */
	atomic_int pending;				      /* requests in the batcher's queue */
	int nbatch;					      /* sizes 1..nbatch-1 */
	atomic_ulong *batch_count, *batch_ns;		      /* forwards per batch size */
} wf_serve_stats;

typedef struct wf_serve_version {
	long version;
	char name[WF_SERVE_MAX_NAME]; /* the model's name */
	wf_model *model;
	wf_model_meta meta;
	wf_image_io io;
	int max_batch;	     /* largest executor batch */
	int max_request;     /* samples one request may carry (config.pbtxt max_batch_size,
			      * capped by --max_batch_size); 0: any, run max_batch at a time */
	size_t memory_bytes; /* weights + every batch thread's executors and buffers */
	int nslots;	     /* one per batch thread */
	wf_serve_slot *slots;
	int max_running;     /* batch threads it may hold at once (0: all) */
	long batch_delay_us; /* its dynamic_batching delay (config.pbtxt): batched even
			      * without --enable_batching; -1: the server's setting */
	int running;	     /* batches running now (under the batcher's lock) */
	atomic_int refs;     /* the repository's reference + one per request */
	double load_seconds; /* load + warm-up time */
	int folded;	     /* batch norms and dropouts folded away at load */
	char precision[8];   /* the compute precision it runs in */
	int threads;	     /* backend threads per executor (0: the backend's default) */
	int timed;	     /* its batch plans were timed at its load, not taken from the
			      * version it replaced */
	wf_serve_stats stats;
} wf_serve_version;

typedef enum {
	WF_SERVE_SINGLE = 0, /* --model_name/--model_base_path */
	WF_SERVE_CONFIG_FILE,
	WF_SERVE_REPOSITORY,
} wf_serve_repo_kind;

typedef enum {
	WF_SERVE_CONTROL_NONE = 0, /* load what is there at start, never change */
	WF_SERVE_CONTROL_POLL,	   /* follow the repository folder */
	WF_SERVE_CONTROL_EXPLICIT, /* load/unload through the repository API */
} wf_serve_control;

typedef struct wf_serve_repo_opts {
	wf_serve_repo_kind kind;
	const char *name;		/* SINGLE: model name in URLs */
	const char *base_path;		/* SINGLE: holds <version>/model.h5 */
	const char *config_file;	/* CONFIG_FILE: ModelServerConfig text */
	double config_poll_seconds;	/* CONFIG_FILE: re-read period (0: never) */
	const char *repository;		/* REPOSITORY: one folder per model */
	wf_serve_control control;	/* REPOSITORY */
	const char *const *load_models; /* EXPLICIT: loaded at start ("*": all) */
	int nload_models;
	const char *device;	 /* backend: auto, cpu, cuda, ref */
	const char *precision;	 /* WF_PRECISIONS (NULL: the model file's, else fp32) */
	int threads;		 /* backend threads per executor (0: default) */
	wf_backend_opts backend; /* device index, cuDNN workspace (weft-serve's
				  * main resolves them); threads: from `threads` */
	int nslots;		 /* batch threads */
	int max_batch;		 /* largest executor batch */
	long batch_delay_us;	 /* the server's batching delay (for /config) */
	int batching;		 /* dynamic batching on (for /config) */
	double poll_seconds;	 /* version scan period; 0: load once, never poll */
	long max_image_pixels;	 /* largest request image, width x height (0: default) */
	long memory_mb;		 /* a version's memory budget (weft_memory_mb); 0: none */
	int load_threads; /* models loaded at once (Triton's --model-load-thread-count); <= 1:
			   * one after another */
	int load_retries; /* a failed version load is tried again this many times
			   * (TF Serving's --max_num_load_retries) ... */
	long load_retry_interval_us; /* ... this long apart (--load_retry_interval_micros) */
} wf_serve_repo_opts;

#define WF_SERVE_MAX_LOAD_THREADS 64 /* the most load_threads used */

typedef struct wf_serve_repo wf_serve_repo;

/* Check the paths and start the polling thread, which loads the first
 * versions in the background. Fails when a base path, the config file or
 * the repository folder is missing or unreadable. */
int wf_serve_repo_create(wf_serve_repo **out, const wf_serve_repo_opts *o, wf_err *err);
/* Stop polling and drop the repository's references to its versions. */
void wf_serve_repo_free(wf_serve_repo *r);

/* Why a lookup failed: the HTTP status (gRPC: NOT_FOUND, UNAVAILABLE,
 * INVALID_ARGUMENT) and a message in TF Serving's / Triton's words. */
typedef enum {
	WF_SERVE_FOUND = 0,
	WF_SERVE_NOT_FOUND = 404,   /* no such model, version or label */
	WF_SERVE_UNAVAILABLE = 503, /* known, but no version loaded (yet) */
	WF_SERVE_BAD_REQUEST = 400, /* e.g. both a version and a label */
} wf_serve_find;

/* The version a request addresses: `version` > 0 exactly, else `label`
 * (non-NULL, non-empty), else the model's highest available version. The
 * returned version holds a reference the caller must release; on failure
 * NULL, *why set, and err filled with the reason. */
wf_serve_version *wf_serve_repo_find(wf_serve_repo *r, const char *name, long version,
				     const char *label, wf_serve_find *why, wf_err *err);
void wf_serve_version_release(wf_serve_version *v);

/* One version's state as TF Serving's GetModelStatus names it. */
typedef struct wf_serve_version_state {
	char name[WF_SERVE_MAX_NAME];
	long version;	   /* 0: the model has no version (index entries) */
	const char *state; /* "LOADING", "AVAILABLE", "UNLOADING", "END" */
	char error[1024];  /* why it ended ("" when it did not fail) */
} wf_serve_version_state;

/* States of every version of model `name` known to the repository, newest
 * first (malloc'd array, *n entries); NULL/0 when the model is unknown. */
wf_serve_version_state *wf_serve_repo_status(wf_serve_repo *r, const char *name, int *n);
/* Triton's repository index: every model (configured, in the repository
 * folder, or loaded before), one entry per version, malloc'd. */
wf_serve_version_state *wf_serve_repo_index(wf_serve_repo *r, int *n);
/* The served versions (each acquired; release each, free the array) of
 * model `name`, or of every model when name is NULL. */
wf_serve_version **wf_serve_repo_acquire_all(wf_serve_repo *r, const char *name, int *n);
/* The versions of model `name` being served, newest first (up to cap; at
 * most WF_SERVE_MAX_SERVED are ever listed); returns the count. What both
 * APIs' model metadata list. */
#define WF_SERVE_MAX_SERVED 256
int wf_serve_repo_served(wf_serve_repo *r, const char *name, long *out, int cap);
/* The model's effective configuration (policy, labels, max batch, ...). */
int wf_serve_repo_model_config(wf_serve_repo *r, const char *name, wf_serve_model_config *out,
			       wf_err *err);
/* 1 when every model to serve has a version available (server readiness). */
int wf_serve_repo_ready(wf_serve_repo *r);
/* Versions swapped in so far, and loads that failed (for /metrics). */
long wf_serve_repo_swaps(wf_serve_repo *r);
/* Passes of the poller completed so far: what was on disk when pass n
 * began has been seen once this exceeds n. */
long wf_serve_repo_scans(wf_serve_repo *r);
long wf_serve_repo_load_failures(wf_serve_repo *r);

/* Triton's model control (EXPLICIT mode only; WF_ENOTSUP otherwise):
 * load (or reload) model `name` from the repository folder and wait until
 * its versions are loaded (an error when none loads); config, when not
 * NULL, is Triton's model configuration as JSON, which replaces the
 * folder's config.pbtxt (as tritonclient's load_model(config=...) does).
 * Versions already served under another configuration load again with the
 * new one and replace the old ones once ready (a failed one keeps the old).
 * Unload drops every version (each freed after its last request). */
int wf_serve_repo_load(wf_serve_repo *r, const char *name, const char *config, wf_err *err);
int wf_serve_repo_unload(wf_serve_repo *r, const char *name, wf_err *err);

/* TF Serving's HandleReloadConfigRequest: serve exactly the n models of cfg
 * from now on (models not listed are unloaded after their last request) and
 * wait until their versions are loaded. All or nothing: when a model of cfg
 * gets no loaded version, the error names it and the models served before
 * are served as they were (nothing was unloaded). Not for a
 * --model_repository (WF_ENOTSUP). */
int wf_serve_repo_reload_config(wf_serve_repo *r, const wf_serve_model_config *cfg, int n,
				wf_err *err);

/* Load and warm one model file (what the poller does), for tests and tools;
 * o->max_batch and o->threads apply. Thread-safe: model files are read one at
 * a time, the warm-ups of several versions run at once. like: NULL, or a
 * loaded version whose batch plans' timings are taken when it runs the same
 * graph the same way (precision, batch sizes, threads): a version loaded
 * beside traffic would otherwise time the traffic with its forwards. */
int wf_serve_version_load(wf_serve_version **out, const char *path, long version,
			  const wf_serve_repo_opts *o, const wf_serve_version *like, wf_err *err);

/* Statistics hooks of the batch threads: one forward of `size` samples that
 * took `seconds`, and one request that waited `queue_s` and ran `infer_s`. */
void wf_serve_stats_batch(wf_serve_version *v, int size, double seconds);
void wf_serve_stats_request(wf_serve_version *v, int n, double queue_s, double infer_s);
/* One finished request (from the API layer): success or failure, total seconds. */
void wf_serve_stats_done(wf_serve_version *v, int ok, double seconds);

#endif
