/* http.h: weft-serve's HTTP front end (libmicrohttpd; the only file that
 * includes it): routing of the TF Serving REST and KServe v2 endpoints,
 * /metrics, request size and time limits, readiness and draining. Event-driven
 * (epoll) connection handling on a fixed pool of threads, so idle and slow
 * connections hold no thread; per-request header and body deadlines, a
 * connection limit per client address, a global budget of request bodies in
 * memory, optional TLS and bearer token. Inference requests run on separate
 * handler threads while their connection is suspended, so the event threads
 * never wait on a model. Functions are thread-safe. */
#ifndef WF_SERVE_HTTP_H
#define WF_SERVE_HTTP_H

#include "common/error.h"
#include "serve/secrets.h"
#include "serve/batcher.h"
#include "serve/metrics.h"
#include "serve/repo.h"
#include "serve/shm.h"

#include <stddef.h>

/* Request bodies below this many bytes reuse the malloc arenas' pages
 * (main.c sets glibc's mmap threshold to it); a larger body's memory goes
 * back to the system when it is released (malloc_trim). */
#define WF_SERVE_BODY_REUSE_BYTES ((size_t)4 << 20)

typedef struct wf_serve_http_opts {
	const char *bind_address; /* IPv4 address to listen on ("0.0.0.0") */
	int port;		  /* 0: any free port (see wf_serve_http_port) */
	const char *model_name;
	size_t max_body;	/* bytes; larger bodies get 413 */
	double request_timeout; /* seconds a request may wait for a batch thread */
	int idle_timeout;	/* seconds an idle or stalled connection is kept */
	int threads;		/* handler threads at most (a request in inference holds
				 * one), started as requests need them */
	int start_threads;	/* handler threads started at once (0: 1) */
	int max_queue;		/* inference requests waiting for one; more: 429; 0: no bound */
	int max_connections;	/* open connections in all; more are closed at accept */
	int max_per_client;	/* open connections per client address; 0: no limit */
	double header_timeout;	/* seconds from connection (or previous reply) to full header */
	double body_timeout;	/* seconds from header to the last body byte */
	size_t body_budget;	/* bytes of request bodies held at once; over: 503 */
	int retry_after;	/* seconds in Retry-After of 429/503 answers */
	/* TLS pair (HTTPS only) and bearer token ("Authorization: Bearer <token>"
	 * required); NULL or empty: neither. Must outlive the server. */
	const wf_serve_secrets *secrets;
	int metrics_only;  /* 1: only /metrics (Triton's --metrics-port); others 404 */
	int no_metrics;	   /* 1: /metrics is 404 (Triton's --allow-metrics=false) */
	int cors;	   /* 1: CORS headers on every reply, OPTIONS preflights answered
			    * (TF Serving's --rest_api_enable_cors_support) */
	wf_serve_shm *shm; /* system shared memory regions (shared with gRPC); NULL: none */
} wf_serve_http_opts;

typedef struct wf_serve_http wf_serve_http;

int wf_serve_http_start(wf_serve_http **out, const wf_serve_http_opts *o, wf_serve_repo *repo,
			wf_serve_batcher *batcher, wf_serve_metrics *metrics, wf_err *err);
/* The port actually bound (0 for a NULL server: HTTP off). The three below
 * accept NULL too. */
int wf_serve_http_port(wf_serve_http *h);
/* Fail readiness, stop accepting connections (the listening socket closes),
 * and from now on answer every request, those already received and those
 * that arrive on open connections, with "Connection: close". */
void wf_serve_http_drain(wf_serve_http *h);
/* Requests not yet fully answered whose request line has arrived (those
 * whose header is still arriving count too). */
int wf_serve_http_inflight(wf_serve_http *h);
/* Close the listening socket and every connection, join threads, free. */
void wf_serve_http_stop(wf_serve_http *h);

#endif
