/* http.h: weft-serve's HTTP front end (libmicrohttpd; the only file that
 * includes it): routing of the TF Serving REST and KServe v2 endpoints,
 * /metrics, request size and time limits, readiness and draining. One
 * thread per connection, HTTP/1.1 keep-alive. Functions are thread-safe. */
#ifndef WF_SERVE_HTTP_H
#define WF_SERVE_HTTP_H

#include "common/error.h"
#include "serve/batcher.h"
#include "serve/metrics.h"
#include "serve/repo.h"

#include <stddef.h>

typedef struct wf_serve_http_opts {
	const char *bind_address; /* IPv4 address to listen on ("0.0.0.0") */
	int port;		  /* 0: any free port (see wf_serve_http_port) */
	const char *model_name;
	size_t max_body;	/* bytes; larger bodies get 413 */
	double request_timeout; /* seconds a request may wait for a batch thread */
	int idle_timeout;	/* seconds an idle or stalled connection is kept */
} wf_serve_http_opts;

typedef struct wf_serve_http wf_serve_http;

int wf_serve_http_start(wf_serve_http **out, const wf_serve_http_opts *o, wf_serve_repo *repo,
			wf_serve_batcher *batcher, wf_serve_metrics *metrics, wf_err *err);
/* The port actually bound. */
int wf_serve_http_port(wf_serve_http *h);
/* Fail readiness and refuse new inference requests (503) from now on. */
void wf_serve_http_drain(wf_serve_http *h);
/* Inference requests being processed now. */
int wf_serve_http_inflight(wf_serve_http *h);
/* Close the listening socket and every connection, join threads, free. */
void wf_serve_http_stop(wf_serve_http *h);

#endif
