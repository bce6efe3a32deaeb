/* metrics.h: Prometheus counters for weft-serve: requests by endpoint and
 * status code, request latency and batch size histograms, queue depth and
 * queue time, the loaded model version, swaps and failed loads, rendered in
 * the text exposition format, plus Triton's nv_inference_* names for the
 * counters that map (per model version: success/failure, inference and
 * execution counts, cumulative request, queue and compute microseconds,
 * pending requests) and its nv_cpu_* gauges (the host's CPU utilization and
 * memory). Thread-safe. */
#ifndef WF_SERVE_METRICS_H
#define WF_SERVE_METRICS_H

#include "serve/repo.h"

typedef enum {
	WF_SERVE_EP_V1_STATUS,	   /* GET /v1/models/m[/versions/v] */
	WF_SERVE_EP_V1_METADATA,   /* GET .../metadata */
	WF_SERVE_EP_V1_PREDICT,	   /* POST ...:predict */
	WF_SERVE_EP_V1_CLASSIFY,   /* POST ...:classify */
	WF_SERVE_EP_V2_HEALTH,	   /* /v2/health/live|ready */
	WF_SERVE_EP_V2_METADATA,   /* /v2, /v2/models/m[/versions/v][/ready] */
	WF_SERVE_EP_V2_INFER,	   /* POST /v2/models/m[/versions/v]/infer */
	WF_SERVE_EP_V2_REPOSITORY, /* /v2/repository/... */
	WF_SERVE_EP_V2_SHM,	   /* /v2/systemsharedmemory/..., /v2/cudasharedmemory/... */
	WF_SERVE_EP_METRICS,	   /* /metrics */
	WF_SERVE_EP_OTHER,	   /* anything else (404s) */
	WF_SERVE_EP__COUNT
} wf_serve_endpoint;

typedef struct wf_serve_metrics wf_serve_metrics;

wf_serve_metrics *wf_serve_metrics_create(void);
void wf_serve_metrics_free(wf_serve_metrics *m);
/* One finished request: endpoint, HTTP status, seconds from arrival to reply. */
void wf_serve_metrics_request(wf_serve_metrics *m, wf_serve_endpoint ep, int code, double seconds);
/* One executor forward over `size` real samples. */
void wf_serve_metrics_batch(wf_serve_metrics *m, int size);
/* Seconds one request waited in the queue before a batch thread took it. */
void wf_serve_metrics_queue_time(wf_serve_metrics *m, double seconds);
/* Requests waiting for a batch thread (+1 queued, -1 taken). */
void wf_serve_metrics_queue(wf_serve_metrics *m, int delta);
/* The text exposition document (malloc'd): weft's metrics, and Triton's
 * nv_inference_* per model version of vs[n] (the versions being served).
 * nv_cpu_utilization is the host's busy share since the previous render
 * (since boot on the first). */
char *wf_serve_metrics_render(wf_serve_metrics *m, wf_serve_version *const *vs, int n, int ready,
			      long swaps, long load_failures);

#endif
