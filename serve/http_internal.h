/* http_internal.h: what the files of weft-serve's HTTP server share: the
 * server and request state, the route kinds, and the helpers one file
 * defines and another calls (not an API: only serve/http*.c include it). */
#ifndef WF_SERVE_HTTP_INTERNAL_H
#define WF_SERVE_HTTP_INTERNAL_H

#include "serve/http.h"

#include "common/log.h"
#include "common/util.h"
#include "serve/infer.h"
#include "serve/json_budget.h"
#include "serve/pool.h"
#include "serve/request.h"
#include "serve/settings.h"
#include "serve/sslconfig.h"

#include <arpa/inet.h>
#include <jansson.h>
#include <malloc.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

/* Event threads (epoll): they parse, answer quick requests and hand
 * inference to the handler threads; they never block on a model. */
#define WF_SERVE_EVENT_THREADS 4
#define CT_JSON		       "application/json"

struct wf_serve_http {
	wf_serve_http_opts o;
	char *model_name;
	struct MHD_Daemon *d;
	wf_serve_repo *repo;
	wf_serve_batcher *batcher;
	wf_serve_metrics *metrics;
	atomic_int draining;
	int quiet_fd; /* after the drain began: the write end of the pipe whose
		       * read end sits under the listening socket's number */
	atomic_int inflight;
	int port;
	atomic_int active;		/* requests received, not yet fully answered */
	atomic_int receiving;		/* connections with a request line in and no header yet */
	atomic_size_t body_bytes;	/* request bodies held now (the body budget) */
	const char *token;		/* bearer token, or NULL (owned by o.secrets) */
	const char *tls_cert, *tls_key; /* PEM text, or NULL (owned by o.secrets) */
	/* Connections and their deadlines; the reaper thread shuts down the
	 * socket of one past its deadline (MHD then closes it). */
	pthread_mutex_t cmu;
	pthread_cond_t ccv;
	struct conn_rec *conns;
	int reaper_stop, reaper_started;
	pthread_t reaper;
	/* Handler threads for inference (which blocks in the batcher), so the
	 * event threads never wait on a model (serve/pool.h). */
	wf_serve_pool handlers;
};

/* Phases of a connection: waiting for (the rest of) a request header, reading
 * a body, or in the handler (deadline off: inference may legitimately take
 * long and has its own timeouts). */
enum { C_HEADER, C_BODY, C_BUSY };

typedef struct conn_rec {
	int fd;
	int phase;
	int receiving; /* request line in, header not yet complete: a drain waits */
	double deadline;
	struct conn_rec *prev, *next;
} conn_rec;

typedef enum {
	R_UNKNOWN,
	R_V1_STATUS,
	R_V1_METADATA,
	R_V1_PREDICT,
	R_V1_CLASSIFY,
	R_V1_REGRESS,
	R_V2_SERVER,
	R_V2_LIVE,
	R_V2_READY,
	R_V2_MODEL,
	R_V2_MODEL_READY,
	R_V2_INFER,
	R_V2_CONFIG,
	R_V2_STATS,
	R_V2_ALL_STATS,
	R_V2_REPO_INDEX,
	R_V2_REPO_LOAD,
	R_V2_REPO_UNLOAD,
	R_V2_SHM_STATUS,
	R_V2_SHM_REGISTER,
	R_V2_SHM_UNREGISTER,
	R_V2_TRACE,   /* /v2/trace/setting, /v2/models/M/trace/setting */
	R_V2_LOGGING, /* /v2/logging */
	R_METRICS,
} route_kind;

typedef struct route {
	route_kind kind;
	char name[256];		       /* model, or shared memory region ("": all regions) */
	char label[WF_SERVE_MAX_NAME]; /* /v1/models/m/labels/L */
	long version;		       /* 0: the latest */
	int bad_version;	       /* /versions/<not a number> */
	int cuda;		       /* /v2/cudasharedmemory/...: none can be registered */
} route;
typedef struct req_ctx {
	char *body; /* base + pad: the allocation, pad bytes in */
	char *base; /* (a binary tensor after pad + the KServe header aligns) */
	size_t len, cap, pad;
	int too_big;
	double t0;
	wf_serve_endpoint ep;
	int replied;
	int preflight;	 /* a CORS preflight (OPTIONS): its reply says what is allowed */
	size_t reserved; /* bytes of the body budget this request holds */
	int over_budget; /* the body budget was exhausted: 503 */
	/* Inference runs on a handler thread while MHD holds the connection
	 * suspended; the reply waits in resp until MHD calls back. */
	int deferred;
	struct MHD_Response *resp;
	int code;
	struct MHD_Connection *conn;
	char *url, method[16];
	double t_queued;     /* wf_now() when handed to the handler threads */
	wf_serve_job queued; /* waiting for a handler thread */
} req_ctx;

/* Shared between the serve/http*.c files (defined where named). */
wf_serve_endpoint parse_route(const char *url, route *r);
enum MHD_Result send_reply(wf_serve_http *h, struct MHD_Connection *c, req_ctx *q, int code,
			   char *body, size_t len, const char *ctype, size_t header_len);
enum MHD_Result send_json(wf_serve_http *h, struct MHD_Connection *c, req_ctx *q, int code,
			  char *json);
enum MHD_Result send_jobj(wf_serve_http *h, struct MHD_Connection *c, req_ctx *q, int code,
			  json_t *obj);
__attribute__((format(printf, 5, 6))) enum MHD_Result
send_error(wf_serve_http *h, struct MHD_Connection *c, req_ctx *q, int code, const char *fmt, ...);
int http_code(int rc);
int inflate_body(wf_serve_http *h, struct MHD_Connection *c, req_ctx *q, wf_err *err);
/* Count n more bytes of q's body in the in-flight body budget; 0 when that
 * would exceed it while other requests hold bytes (then answer 503). */
int reserve_body(wf_serve_http *h, req_ctx *q, size_t n);
/* A parse of q's body whose JSON tree is reserved from the body budget too. */
typedef struct parse_budget {
	wf_serve_http *h;
	req_ctx *q;
	wf_json_budget b;
	int alone; /* refused: this body's tree alone needs more than the budget */
} parse_budget;
/* Count this thread's JSON allocations as q's until parse_budget_end. */
void parse_budget_begin(wf_serve_http *h, req_ctx *q, parse_budget *pb);
/* Stop counting and give the tree's bytes back to the budget (it is freed
 * by then); 1 when the budget refused the parse (send_parse_refused). */
int parse_budget_end(parse_budget *pb);
/* 413 when the body's tree alone needs more than the budget, else 429 with
 * Retry-After: other bodies hold it. */
enum MHD_Result send_parse_refused(wf_serve_http *h, struct MHD_Connection *c, req_ctx *q,
				   const parse_budget *pb);
/* Bodies of the control endpoints (repository index, load and unload,
 * shared-memory register) are small: larger ones get 413. */
#define CONTROL_BODY_MAX ((size_t)64 << 10) /* bytes */
enum MHD_Result handle_v1_status(wf_serve_http *h, struct MHD_Connection *c, req_ctx *q,
				 const route *r);
enum MHD_Result handle_v1_metadata(wf_serve_http *h, struct MHD_Connection *c, req_ctx *q,
				   wf_serve_version *v);
enum MHD_Result handle_v2_model(wf_serve_http *h, struct MHD_Connection *c, req_ctx *q,
				wf_serve_version *v);
enum MHD_Result handle_v2_config(wf_serve_http *h, struct MHD_Connection *c, req_ctx *q,
				 wf_serve_version *v);
enum MHD_Result handle_stats(wf_serve_http *h, struct MHD_Connection *c, req_ctx *q,
			     const char *name, long version);
enum MHD_Result handle_repo_index(wf_serve_http *h, struct MHD_Connection *c, req_ctx *q);
enum MHD_Result handle_repo_control(wf_serve_http *h, struct MHD_Connection *c, req_ctx *q,
				    const route *r);
/* Triton's trace and log settings: GET reports them, POST (post 1) updates
 * them from a JSON object first. */
enum MHD_Result handle_settings(wf_serve_http *h, struct MHD_Connection *c, req_ctx *q,
				const route *r, int post);
enum MHD_Result handle_shm(wf_serve_http *h, struct MHD_Connection *c, req_ctx *q, const route *r);
/* Inference (:predict, :classify, /infer): the body read for v's model and
 * run by the request core (infer.h). */
enum MHD_Result handle_infer(wf_serve_http *h, struct MHD_Connection *c, req_ctx *q, const route *r,
			     wf_serve_version *v);
enum MHD_Result dispatch(wf_serve_http *h, struct MHD_Connection *c, req_ctx *q, const char *url,
			 const char *method, const route *r);

#endif
