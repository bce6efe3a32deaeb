/* grpc_adapter.h: the narrow view the gRPC services have of serve/: every
 * model of the repository by name, version or label, their metadata,
 * inference through the same path as HTTP (serve/infer.h, the same batcher,
 * statistics and metrics), readiness and the repository calls. The only
 * gRPC file that includes serve/repo.h and serve/batcher.h. Functions return
 * gRPC status codes (serve/grpc.h) with a reason in why. Thread-safe. */
#ifndef WF_SERVE_GRPC_ADAPTER_H
#define WF_SERVE_GRPC_ADAPTER_H

#include "common/error.h"
#include "common/image.h"
#include "serve/batcher.h"
#include "serve/infer.h"
#include "serve/metrics.h"
#include "serve/modelconfig.h"
#include "serve/repo.h"
#include "serve/shm.h"

#include <stddef.h>
#include <stdint.h>

typedef struct wf_grpc_adapter_opts {
	wf_serve_repo *repo;
	wf_serve_batcher *batcher;
	wf_serve_metrics *metrics;
	double request_timeout; /* seconds a call may wait for a batch thread */
	int max_batch;		/* --max_batch_size */
	long batch_timeout_us;	/* --batch_timeout_micros (0 without batching) */
	int batching;		/* --enable_batching */
	int instances;		/* batch threads */
	wf_serve_shm *shm;	/* system shared memory regions (shared with HTTP); NULL: none */
} wf_grpc_adapter_opts;

typedef struct wf_grpc_adapter wf_grpc_adapter;

/* What a model takes and gives per sample, its input's name and its
 * preprocessing (model input is built by serve/request.h's wf_serve_input_*). */
typedef wf_image_io wf_grpc_io;

/* A model version held for one call (wf_grpc_model_put releases it). */
typedef struct wf_grpc_model {
	const char *name;
	long version;
	wf_grpc_io io;	     /* input [H,W,C], classes, preprocessing */
	int max_batch;	     /* samples per forward */
	char *const *labels; /* [io.classes] class names, or NULL */
	long batch_timeout_us;
	int batching, instances;
	wf_serve_model_config cfg; /* the model's effective configuration (version policy) */
	void *priv;
} wf_grpc_model;

/* A version's state as TF Serving's ModelVersionStatus and Triton's
 * repository index report it. */
typedef enum {
	WF_GRPC_VERSION_LOADING,
	WF_GRPC_VERSION_AVAILABLE,
	WF_GRPC_VERSION_FAILED,
	WF_GRPC_VERSION_UNLOADING,
	WF_GRPC_VERSION_END, /* unloaded without an error */
} wf_grpc_version_state;

typedef struct wf_grpc_version_info {
	long version;
	wf_grpc_version_state state;
	char reason[256]; /* why it failed */
} wf_grpc_version_info;

/* Triton's statistics extension, per model version (serve/infer.h). */
typedef wf_serve_duration wf_grpc_duration;
typedef wf_serve_stats_sum wf_grpc_stats;

int wf_grpc_adapter_create(wf_grpc_adapter **out, const wf_grpc_adapter_opts *o, wf_err *err);
void wf_grpc_adapter_free(wf_grpc_adapter *a);
/* From now on: not ready (SIGTERM); calls that arrive are still served. */
void wf_grpc_adapter_drain(wf_grpc_adapter *a);
/* 1 while the server is ready: not draining and every model loaded. */
int wf_grpc_server_ready(wf_grpc_adapter *a);

/* Hold a version: the latest (version 0, label NULL or ""), exactly version,
 * or the one a label names. NOT_FOUND for an unknown model, version or label;
 * UNAVAILABLE while the model has no loaded version. */
int wf_grpc_model_get(wf_grpc_adapter *a, const char *name, long version, const char *label,
		      wf_grpc_model *m, char *why, size_t cap);
void wf_grpc_model_put(wf_grpc_adapter *a, wf_grpc_model *m);
/* 1 when that version (0: the latest) can serve now. */
int wf_grpc_model_ready(wf_grpc_adapter *a, const char *name, long version);
/* The versions of model `name` being served (up to cap), newest first, as
 * HTTP's model metadata lists them; returns the count. */
int wf_grpc_model_served(wf_grpc_adapter *a, const char *name, long *out, int cap);
/* Versions of a model (up to cap) with their states; -1 for an unknown model. */
int wf_grpc_model_versions(wf_grpc_adapter *a, const char *name, wf_grpc_version_info *out,
			   int cap);
/* Names of every model the server knows (up to cap); returns the count. The
 * names stay valid until wf_grpc_adapter_free. */
int wf_grpc_model_names(wf_grpc_adapter *a, const char **names, int cap);
/* Run rq through m by the request core (serve/infer.h: read for m's
 * model, input built, forward, outputs, statistics) into rs (free it with
 * wf_serve_response_free, also on failure). Waits at most until deadline
 * (wf_now() time; 0: the server's request timeout). A call is answered
 * also during a drain (docs/promises.md). With fn NULL it waits and
 * returns the status; otherwise WF_GRPC_PENDING when the call is queued,
 * and fn(arg, rc, msg) is then called once, from a batch thread, with the
 * core's result (rq and rs stay valid until then), which it hands to
 * wf_grpc_model_ran; any other return is the failure, and fn is not
 * called. */
int wf_grpc_model_run(wf_grpc_adapter *a, wf_grpc_model *m, wf_serve_endpoint ep,
		      wf_serve_request *rq, wf_serve_response *rs, double deadline,
		      wf_serve_batcher_done fn, void *arg, char *why, size_t cap);
/* The status of a call the core ran (rc: its result), counted in /metrics
 * under endpoint ep. */
int wf_grpc_model_ran(wf_grpc_adapter *a, wf_serve_endpoint ep, const wf_serve_request *rq,
		      const wf_serve_response *rs, int rc);
/* Count a call that failed before its model was found (a bad message, an
 * unknown model) in /metrics. */
void wf_grpc_model_failed(wf_grpc_adapter *a, wf_serve_endpoint ep, int code, double seconds);
/* Statistics of a model version (0: every version summed). */
int wf_grpc_model_stats(wf_grpc_adapter *a, const char *name, long version, wf_grpc_stats *st,
			char *why, size_t cap);
/* Triton's repository load/unload (--model_control_mode explicit) and TF
 * Serving's config reload (serve exactly the n models of cfg). */
/* The shared memory regions a client at loopback (local) or elsewhere may
 * name: NULL, with the reason in why (may be NULL), when the server's
 * policy says none. */
wf_serve_shm *wf_grpc_shm(wf_grpc_adapter *a, int local, char *why, size_t cap);
/* 1 when the server's shared memory policy is not none (some client may). */
int wf_grpc_shm_enabled(wf_grpc_adapter *a);
/* config: Triton's model configuration as JSON instead of config.pbtxt
 * (NULL: the folder's). */
int wf_grpc_repository_load(wf_grpc_adapter *a, const char *name, const char *config, char *why,
			    size_t cap);
int wf_grpc_repository_unload(wf_grpc_adapter *a, const char *name, char *why, size_t cap);
int wf_grpc_reload_config(wf_grpc_adapter *a, const wf_serve_model_config *cfg, int n, char *why,
			  size_t cap);

#endif
