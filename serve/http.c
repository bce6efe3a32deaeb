/* http.c: routing and handlers of weft-serve's HTTP API. */
#include "serve/http.h"

#include "common/log.h"
#include "common/util.h"
#include "serve/infer.h"
#include "serve/request.h"
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

#define WF_SERVE_VERSION "0.1.0"
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
	atomic_int inflight;
	int port;
	atomic_int active;	  /* requests received, not yet fully answered */
	atomic_size_t body_bytes; /* request bodies held now (the body budget) */
	char *token;		  /* bearer token, or NULL */
	char *tls_cert, *tls_key; /* PEM text, or NULL */
	/* Connections and their deadlines; the reaper thread shuts down the
	 * socket of one past its deadline (MHD then closes it). */
	pthread_mutex_t cmu;
	pthread_cond_t ccv;
	struct conn_rec *conns;
	int reaper_stop, reaper_started;
	pthread_t reaper;
	/* Handler threads for inference (which blocks in the batcher), so the
	 * event threads never wait on a model. */
	pthread_mutex_t wmu;
	pthread_cond_t wcv;
	struct req_ctx *whead, *wtail;
	int wpending, wstop, nworkers;
	pthread_t *workers;
};

/* Phases of a connection: waiting for (the rest of) a request header, reading
 * a body, or in the handler (deadline off: inference may legitimately take
 * long and has its own timeouts). */
enum { C_HEADER, C_BODY, C_BUSY };

typedef struct conn_rec {
	int fd;
	int phase;
	double deadline;
	struct conn_rec *prev, *next;
} conn_rec;

/* ---- routes ---------------------------------------------------------- */

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
	R_METRICS,
} route_kind;

typedef struct route {
	route_kind kind;
	char name[256];
	char label[WF_SERVE_MAX_NAME]; /* /v1/models/m/labels/L */
	long version;		       /* 0: the latest */
	int bad_version;	       /* /versions/<not a number> */
} route;

/* rest: "NAME[/versions/V | /labels/L]SUFFIX"; stores NAME, V and L,
 * returns SUFFIX or NULL. */
static const char *parse_model_path(const char *rest, route *r)
{
	size_t n = strcspn(rest, "/:");
	if (n == 0 || n >= sizeof(r->name))
		return NULL;
	memcpy(r->name, rest, n);
	r->name[n] = 0;
	rest += n;
	if (strncmp(rest, "/versions/", 10) == 0) {
		rest += 10;
		size_t d = strcspn(rest, "/:");
		if (d == 0 || d > 15 || strspn(rest, "0123456789") != d)
			r->bad_version = 1;
		else
			r->version = strtol(rest, NULL, 10);
		if (r->version <= 0)
			r->bad_version = 1;
		rest += d;
	} else if (strncmp(rest, "/labels/", 8) == 0) {
		rest += 8;
		size_t d = strcspn(rest, "/:");
		if (d == 0 || d >= sizeof(r->label))
			return NULL;
		memcpy(r->label, rest, d);
		r->label[d] = 0;
		rest += d;
	}
	return rest;
}

/* The routes: whole URLs, and suffixes after a model path of each protocol. */
typedef struct route_entry {
	const char *path; /* whole URL, or the suffix after NAME[/versions/V] */
	route_kind kind;
	wf_serve_endpoint ep; /* the endpoint metrics count it under */
} route_entry;

static const route_entry exact_routes[] = {
	{"/metrics", R_METRICS, WF_SERVE_EP_METRICS},
	{"/monitoring/prometheus/metrics", R_METRICS, WF_SERVE_EP_METRICS},
	{"/v2", R_V2_SERVER, WF_SERVE_EP_V2_METADATA},
	{"/v2/", R_V2_SERVER, WF_SERVE_EP_V2_METADATA},
	{"/v2/health/live", R_V2_LIVE, WF_SERVE_EP_V2_HEALTH},
	{"/v2/health/ready", R_V2_READY, WF_SERVE_EP_V2_HEALTH},
	{"/v2/models/stats", R_V2_ALL_STATS, WF_SERVE_EP_V2_METADATA},
	{"/v2/repository/index", R_V2_REPO_INDEX, WF_SERVE_EP_V2_REPOSITORY},
};

static const route_entry v1_routes[] = {
	/* after /v1/models/NAME[/versions/V | /labels/L] */
	{"", R_V1_STATUS, WF_SERVE_EP_V1_STATUS},
	{"/metadata", R_V1_METADATA, WF_SERVE_EP_V1_METADATA},
	{":predict", R_V1_PREDICT, WF_SERVE_EP_V1_PREDICT},
	{":classify", R_V1_CLASSIFY, WF_SERVE_EP_V1_CLASSIFY},
	{":regress", R_V1_REGRESS, WF_SERVE_EP_V1_CLASSIFY},
};

static const route_entry v2_routes[] = {
	/* after /v2/models/NAME[/versions/V] */
	{"", R_V2_MODEL, WF_SERVE_EP_V2_METADATA},
	{"/ready", R_V2_MODEL_READY, WF_SERVE_EP_V2_METADATA},
	{"/infer", R_V2_INFER, WF_SERVE_EP_V2_INFER},
	{"/config", R_V2_CONFIG, WF_SERVE_EP_V2_METADATA},
	{"/stats", R_V2_STATS, WF_SERVE_EP_V2_METADATA},
};

static const route_entry repo_routes[] = {
	/* after /v2/repository/models/NAME */
	{"/load", R_V2_REPO_LOAD, WF_SERVE_EP_V2_REPOSITORY},
	{"/unload", R_V2_REPO_UNLOAD, WF_SERVE_EP_V2_REPOSITORY},
};

static wf_serve_endpoint match_route(const route_entry *t, size_t n, const char *path, route *r)
{
	for (size_t i = 0; path && i < n; i++)
		if (strcmp(path, t[i].path) == 0) {
			r->kind = t[i].kind;
			return t[i].ep;
		}
	return WF_SERVE_EP_OTHER;
}

wf_serve_endpoint parse_route(const char *url, route *r)
{
	memset(r, 0, sizeof(*r));
	wf_serve_endpoint ep = match_route(exact_routes, WF_ARRAY_LEN(exact_routes), url, r);
	if (r->kind != R_UNKNOWN)
		return ep;
	if (strncmp(url, "/v1/models/", 11) == 0)
		return match_route(v1_routes, WF_ARRAY_LEN(v1_routes),
				   parse_model_path(url + 11, r), r);
	if (strncmp(url, "/v2/models/", 11) == 0) {
		ep = match_route(v2_routes, WF_ARRAY_LEN(v2_routes), parse_model_path(url + 11, r),
				 r);
		if (r->label[0])
			r->kind = R_UNKNOWN; /* labels are TF Serving's */
		return ep;
	}
	if (strncmp(url, "/v2/repository/models/", 22) == 0) {
		const char *rest = url + 22;
		size_t n = strcspn(rest, "/");
		if (n == 0 || n >= sizeof(r->name))
			return WF_SERVE_EP_OTHER;
		memcpy(r->name, rest, n);
		r->name[n] = 0;
		return match_route(repo_routes, WF_ARRAY_LEN(repo_routes), rest + n, r);
	}
	return WF_SERVE_EP_OTHER;
}

/* ---- per-request state and replies ------------------------------------ */

typedef struct req_ctx {
	char *body;
	size_t len, cap;
	int too_big;
	double t0;
	wf_serve_endpoint ep;
	int replied;
	size_t reserved; /* bytes of the body budget this request holds */
	int over_budget; /* the body budget was exhausted: 503 */
	/* Inference runs on a handler thread while MHD holds the connection
	 * suspended; the reply waits in resp until MHD calls back. */
	int deferred;
	struct MHD_Response *resp;
	int code;
	struct MHD_Connection *conn;
	char *url, method[16];
	double t_queued;      /* wf_now() when handed to the handler threads */
	struct req_ctx *next; /* in the handler queue */
} req_ctx;

/* Compress body with zlib (gzip: 1, deflate: 0) into a malloc'd buffer. */
static char *zcompress(const char *body, size_t len, int gzip, size_t *out_len)
{
	z_stream z;
	memset(&z, 0, sizeof(z));
	if (deflateInit2(&z, Z_BEST_SPEED, Z_DEFLATED, gzip ? 15 + 16 : 15, 8,
			 Z_DEFAULT_STRATEGY) != Z_OK)
		return NULL;
	size_t cap = deflateBound(&z, (uLong)len);
	char *out = malloc(cap ? cap : 1);
	if (!out) {
		deflateEnd(&z);
		return NULL;
	}
	z.next_in = (Bytef *)body;
	z.avail_in = (uInt)len;
	z.next_out = (Bytef *)out;
	z.avail_out = (uInt)cap;
	int rc = deflate(&z, Z_FINISH);
	*out_len = z.total_out;
	deflateEnd(&z);
	if (rc != Z_STREAM_END) {
		free(out);
		return NULL;
	}
	return out;
}

/* The response encoding the client accepts: "gzip", "deflate" or NULL. */
static const char *accepted_encoding(struct MHD_Connection *c)
{
	const char *ae =
		MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_ACCEPT_ENCODING);
	if (!ae)
		return NULL;
	if (strstr(ae, "gzip"))
		return "gzip";
	if (strstr(ae, "deflate"))
		return "deflate";
	return NULL;
}

enum MHD_Result send_reply(wf_serve_http *h, struct MHD_Connection *c, req_ctx *q, int code,
			   char *body, size_t len, const char *ctype, size_t header_len)
{
	struct MHD_Response *resp;
	if (!body) {
		body = strdup("{\"error\":\"out of memory\"}");
		code = MHD_HTTP_INTERNAL_SERVER_ERROR;
		len = body ? strlen(body) : 0;
		ctype = CT_JSON;
		header_len = 0;
	}
	const char *enc = len ? accepted_encoding(c) : NULL;
	if (enc) {
		size_t zlen = 0;
		char *z = zcompress(body, len, enc[0] == 'g', &zlen);
		if (z) {
			free(body);
			body = z;
			len = zlen;
		} else {
			enc = NULL;
		}
	}
	resp = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
	if (!resp) {
		free(body);
		return MHD_NO;
	}
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
	if (enc)
		MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_ENCODING, enc);
	if (header_len) {
		char hl[32];
		snprintf(hl, sizeof(hl), "%zu", header_len);
		MHD_add_response_header(resp, "Inference-Header-Content-Length", hl);
	}
	if (code == MHD_HTTP_TOO_MANY_REQUESTS || code == MHD_HTTP_SERVICE_UNAVAILABLE) {
		char ra[16];
		snprintf(ra, sizeof(ra), "%d", h->o.retry_after > 0 ? h->o.retry_after : 1);
		MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, ra);
	}
	if (code == MHD_HTTP_UNAUTHORIZED)
		MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE,
					"Bearer realm=\"weft-serve\"");
	if (atomic_load(&h->draining))
		MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
	if (code == MHD_HTTP_METHOD_NOT_ALLOWED)
		MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW,
					q->ep == WF_SERVE_EP_V1_PREDICT ||
							q->ep == WF_SERVE_EP_V1_CLASSIFY ||
							q->ep == WF_SERVE_EP_V2_INFER ||
							q->ep == WF_SERVE_EP_V2_REPOSITORY
						? "POST"
						: "GET");
	q->replied = 1;
	wf_serve_metrics_request(h->metrics, q->ep, code, wf_now() - q->t0);
	if (q->deferred) { /* on a handler thread: MHD queues it once resumed */
		q->resp = resp;
		q->code = code;
		return MHD_YES;
	}
	enum MHD_Result ret = MHD_queue_response(c, (unsigned)code, resp);
	MHD_destroy_response(resp);
	return ret;
}

enum MHD_Result send_json(wf_serve_http *h, struct MHD_Connection *c, req_ctx *q, int code,
			  char *json)
{
	return send_reply(h, c, q, code, json, json ? strlen(json) : 0, CT_JSON, 0);
}

enum MHD_Result send_jobj(wf_serve_http *h, struct MHD_Connection *c, req_ctx *q, int code,
			  json_t *obj)
{
	char *s = json_dumps(obj, JSON_COMPACT | JSON_REAL_PRECISION(9));
	json_decref(obj);
	return send_json(h, c, q, code, s);
}

__attribute__((format(printf, 5, 6))) enum MHD_Result
send_error(wf_serve_http *h, struct MHD_Connection *c, req_ctx *q, int code, const char *fmt, ...)
{
	char msg[1200];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	return send_json(h, c, q, code, wf_serve_error_json(msg));
}

/* HTTP status for a library error code. */
int http_code(int rc)
{
	switch (rc) {
	case WF_EINVAL:
	case WF_ENOTSUP: return MHD_HTTP_BAD_REQUEST;
	case WF_SERVE_EFULL: return MHD_HTTP_TOO_MANY_REQUESTS;
	case WF_ETRANSIENT:
	case WF_ESTOPPED: return MHD_HTTP_SERVICE_UNAVAILABLE;
	default: return MHD_HTTP_INTERNAL_SERVER_ERROR;
	}
}

/* Undo Content-Encoding gzip|deflate of the request body in place; the
 * inflated body is bounded by max_body. */
int inflate_body(wf_serve_http *h, struct MHD_Connection *c, req_ctx *q, wf_err *err)
{
	const char *ce =
		MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_ENCODING);
	if (!ce || !*ce || !strcmp(ce, "identity"))
		return 0;
	if (strcmp(ce, "gzip") && strcmp(ce, "deflate"))
		return wf_errf(err, WF_EINVAL,
			       "unsupported Content-Encoding \"%s\" (gzip, deflate or identity)",
			       ce);
	if (!q->len)
		return 0;
	z_stream z;
	memset(&z, 0, sizeof(z));
	/* 15 + 32: zlib or gzip header, detected; raw deflate is retried below */
	int raw = 0;
again:
	if (inflateInit2(&z, raw ? -15 : 15 + 32) != Z_OK)
		return wf_errf(err, WF_EINTERNAL, "zlib inflateInit failed");
	size_t cap = q->len * 4 + 4096, n = 0;
	char *out = malloc(cap + 1);
	int rc = Z_OK;
	z.next_in = (Bytef *)q->body;
	z.avail_in = (uInt)q->len;
	while (out && rc != Z_STREAM_END) {
		if (n == cap) {
			if (cap >= h->o.max_body) {
				free(out);
				inflateEnd(&z);
				return wf_errf(err, WF_EINVAL,
					       "the %s body inflates beyond the limit of %zu bytes",
					       ce, h->o.max_body);
			}
			cap = WF_MIN(cap * 2, h->o.max_body);
			char *p = realloc(out, cap + 1);
			if (!p)
				break;
			out = p;
		}
		z.next_out = (Bytef *)out + n;
		z.avail_out = (uInt)(cap - n);
		rc = inflate(&z, Z_NO_FLUSH);
		n = cap - z.avail_out;
		if (rc != Z_OK && rc != Z_STREAM_END)
			break;
		if (rc == Z_OK && z.avail_in == 0 && z.avail_out != 0)
			break; /* truncated */
	}
	inflateEnd(&z);
	if (!out)
		return wf_errf(err, WF_ENOMEM, "out of memory");
	if (rc != Z_STREAM_END) {
		free(out);
		if (!raw && !strcmp(ce, "deflate")) {
			raw = 1;
			memset(&z, 0, sizeof(z));
			goto again;
		}
		return wf_errf(err, WF_EINVAL, "the request body is not valid %s data", ce);
	}
	out[n] = 0;
	free(q->body);
	q->body = out;
	q->len = n;
	q->cap = cap + 1;
	return 0;
}

/* ---- status and metadata documents ------------------------------------ */

static json_t *version_status(long version, const char *state, const char *code, const char *msg)
{
	char v[32];
	snprintf(v, sizeof(v), "%ld", version);
	return json_pack("{sssss{ssss}}", "version", v, "state", state, "status", "error_code",
			 code, "error_message", msg);
}

/* The version label L of model name names; 0 when unknown. */
static long label_version(wf_serve_http *h, const char *name, const char *label)
{
	wf_serve_model_config mc;
	wf_err err = {0};
	if (wf_serve_repo_model_config(h->repo, name, &mc, &err))
		return 0;
	for (int i = 0; i < mc.nlabels; i++)
		if (!strcmp(mc.labels[i].key, label))
			return mc.labels[i].version;
	return 0;
}

enum MHD_Result handle_v1_status(wf_serve_http *h, struct MHD_Connection *c, req_ctx *q,
				 const route *r)
{
	int n = 0;
	long want = r->version;
	if (r->label[0] && !(want = label_version(h, r->name, r->label)))
		return send_error(h, c, q, MHD_HTTP_NOT_FOUND,
				  "Unrecognized servable version label: %s", r->label);
	wf_serve_version_state *st = wf_serve_repo_status(h->repo, r->name, &n);
	json_t *list = json_array();
	for (int i = 0; i < n; i++) {
		if (want && st[i].version != want)
			continue;
		int failed = st[i].error[0] != 0;
		json_array_append_new(list, version_status(st[i].version, st[i].state,
							   failed ? "UNKNOWN" : "OK", st[i].error));
	}
	free(st);
	if (json_array_size(list) == 0) {
		json_decref(list);
		if (want)
			return send_error(h, c, q, MHD_HTTP_NOT_FOUND,
					  "Could not find version %ld of model %s", want, r->name);
		return send_error(h, c, q, MHD_HTTP_NOT_FOUND,
				  "Could not find any versions of model %s", r->name);
	}
	return send_jobj(h, c, q, MHD_HTTP_OK, json_pack("{so}", "model_version_status", list));
}

static json_t *tf_tensor_info(const char *name, const int *dims, int ndim)
{
	json_t *d = json_array();
	char s[32], tname[64];
	for (int i = 0; i < ndim; i++) {
		snprintf(s, sizeof(s), "%d", dims[i]);
		json_array_append_new(d, json_pack("{ssss}", "size", s, "name", ""));
	}
	snprintf(tname, sizeof(tname), "%s:0", name);
	return json_pack("{sss{sosb}ss}", "dtype", "DT_FLOAT", "tensor_shape", "dim", d,
			 "unknown_rank", 0, "name", tname);
}

static json_t *weft_info(const wf_serve_version *v)
{
	json_t *classes = json_array();
	for (int i = 0; i < v->meta.nclasses && v->meta.class_names; i++)
		json_array_append_new(
			classes, json_string(v->meta.class_names[i] ? v->meta.class_names[i] : ""));
	json_t *mean = json_array(), *std = json_array();
	for (int i = 0; i < v->io.c && i < 4; i++) {
		json_array_append_new(mean, json_real(v->meta.mean[i]));
		json_array_append_new(std, json_real(v->meta.std[i]));
	}
	return json_pack("{sos{sfsosossss}sI}", "classes", classes, "preprocessing", "scale",
			 (double)v->meta.scale, "mean", mean, "std", std, "channel_order",
			 v->meta.channel_order[0] ? v->meta.channel_order : "RGB", "input",
			 "numbers are model input after preprocessing; images get it applied",
			 "trained_steps", (json_int_t)v->meta.trained_steps);
}

enum MHD_Result handle_v1_metadata(wf_serve_http *h, struct MHD_Connection *c, req_ctx *q,
				   wf_serve_version *v)
{
	int in_dims[4] = {-1, v->io.h, v->io.w, v->io.c}, out_dims[2] = {-1, v->io.classes};
	char ver[32];
	snprintf(ver, sizeof(ver), "%ld", v->version);
	json_t *sig = json_pack(
		"{s{so}s{soso}ss}", "inputs", WF_SERVE_INPUT_NAME,
		tf_tensor_info(WF_SERVE_INPUT_NAME, in_dims, 4), "outputs", WF_SERVE_OUTPUT_PROBS,
		tf_tensor_info(WF_SERVE_OUTPUT_PROBS, out_dims, 2), WF_SERVE_OUTPUT_LOGITS,
		tf_tensor_info(WF_SERVE_OUTPUT_LOGITS, out_dims, 2), "method_name",
		"tensorflow/serving/predict");
	json_t *doc = json_pack("{s{ssssss}s{s{s{so}}so}}", "model_spec", "name", v->name,
				"signature_name", "", "version", ver, "metadata", "signature_def",
				"signature_def", "serving_default", sig, "weft", weft_info(v));
	(void)h;
	return send_jobj(h, c, q, MHD_HTTP_OK, doc);
}

/* Versions of model `name` being served, as strings, newest first. */
static json_t *served_versions(wf_serve_http *h, const char *name)
{
	int n = 0;
	wf_serve_version **vs = wf_serve_repo_acquire_all(h->repo, name, &n);
	json_t *a = json_array();
	for (int i = 0; i < n; i++) {
		char ver[32];
		snprintf(ver, sizeof(ver), "%ld", vs[i]->version);
		json_array_append_new(a, json_string(ver));
		wf_serve_version_release(vs[i]);
	}
	free(vs);
	return a;
}

enum MHD_Result handle_v2_model(wf_serve_http *h, struct MHD_Connection *c, req_ctx *q,
				wf_serve_version *v)
{
	json_t *doc = json_pack("{sssosss[{sssss[iiii]}]s[{sssss[ii]},{sssss[ii]}]so}", "name",
				v->name, "versions", served_versions(h, v->name), "platform",
				"weft", "inputs", "name", WF_SERVE_INPUT_NAME, "datatype", "FP32",
				"shape", -1, v->io.h, v->io.w, v->io.c, "outputs", "name",
				WF_SERVE_OUTPUT_PROBS, "datatype", "FP32", "shape", -1,
				v->io.classes, "name", WF_SERVE_OUTPUT_LOGITS, "datatype", "FP32",
				"shape", -1, v->io.classes, "parameters", weft_info(v));
	return send_jobj(h, c, q, MHD_HTTP_OK, doc);
}

/* Triton's model configuration JSON (model_config.proto as JSON). */
enum MHD_Result handle_v2_config(wf_serve_http *h, struct MHD_Connection *c, req_ctx *q,
				 wf_serve_version *v)
{
	wf_serve_model_config mc;
	wf_err err = {0};
	if (wf_serve_repo_model_config(h->repo, v->name, &mc, &err))
		return send_error(h, c, q, MHD_HTTP_NOT_FOUND, "%s", err.msg);
	json_t *policy;
	if (mc.policy == WF_SERVE_POLICY_SPECIFIC) {
		json_t *vl = json_array();
		for (int i = 0; i < mc.nspecific; i++)
			json_array_append_new(vl, json_integer(mc.specific[i]));
		policy = json_pack("{s{so}}", "specific", "versions", vl);
	} else if (mc.policy == WF_SERVE_POLICY_ALL) {
		policy = json_pack("{s{}}", "all");
	} else {
		policy = json_pack("{s{si}}", "latest", "num_versions", mc.num_versions);
	}
	char lab[WF_SERVE_MAX_LABELS * (WF_SERVE_MAX_NAME + 24)] = "";
	for (int i = 0; i < mc.nlabels; i++)
		snprintf(lab + strlen(lab), sizeof(lab) - strlen(lab), "%s%s:%ld", i ? "," : "",
			 mc.labels[i].key, mc.labels[i].version);
	json_t *labels = json_pack("{ss}", "string_value", lab);
	char group[WF_SERVE_MAX_NAME + 8];
	snprintf(group, sizeof(group), "%s_0", v->name);
	json_t *outs = json_array();
	const char *onames[2] = {WF_SERVE_OUTPUT_PROBS, WF_SERVE_OUTPUT_LOGITS};
	for (int i = 0; i < 2; i++)
		json_array_append_new(outs, json_pack("{sssss[i]ss}", "name", onames[i],
						      "data_type", "TYPE_FP32", "dims",
						      v->io.classes, "label_filename", ""));
	json_t *doc = json_pack(
		"{sssssssosis[{sssssss[iii]sb}]sos[{sssiss}]s{so}}", "name", v->name, "platform",
		mc.platform, "backend", "weft", "version_policy", policy, "max_batch_size",
		mc.max_batch, "input", "name", WF_SERVE_INPUT_NAME, "data_type", "TYPE_FP32",
		"format", "FORMAT_NHWC", "dims", v->io.h, v->io.w, v->io.c, "allow_ragged_batch", 0,
		"output", outs, "instance_group", "name", group, "count", mc.instances, "kind",
		"KIND_CPU", "parameters", "weft_version_labels", labels);
	if (mc.batch_delay_us >= 0)
		json_object_set_new(doc, "dynamic_batching",
				    json_pack("{s[]sI}", "preferred_batch_size",
					      "max_queue_delay_microseconds",
					      (json_int_t)mc.batch_delay_us));
	return send_jobj(h, c, q, MHD_HTTP_OK, doc);
}

/* Triton's statistics of model `name` (all models when NULL), optionally of
 * one version. */
enum MHD_Result handle_stats(wf_serve_http *h, struct MHD_Connection *c, req_ctx *q,
			     const char *name, long version)
{
	int n = 0, m = 0;
	wf_serve_version **vs = wf_serve_repo_acquire_all(h->repo, name, &n);
	for (int i = 0; i < n; i++)
		if (!version || vs[i]->version == version)
			vs[m++] = vs[i];
		else
			wf_serve_version_release(vs[i]);
	if (name && m == 0) {
		free(vs);
		return version ? send_error(h, c, q, MHD_HTTP_NOT_FOUND,
					    "Request for unknown model: '%s' version %ld is not "
					    "found",
					    name, version)
			       : send_error(h, c, q, MHD_HTTP_NOT_FOUND,
					    "Request for unknown model: '%s' has no available "
					    "versions",
					    name);
	}
	char *s = wf_serve_stats_json(vs, m);
	for (int i = 0; i < m; i++)
		wf_serve_version_release(vs[i]);
	free(vs);
	return send_json(h, c, q, MHD_HTTP_OK, s);
}

/* Triton's repository index: [{name, version, state, reason}]. Body
 * {"ready": true} lists only the models ready for inference. */
enum MHD_Result handle_repo_index(wf_serve_http *h, struct MHD_Connection *c, req_ctx *q)
{
	int ready_only = 0;
	if (q->len) {
		json_error_t jerr;
		json_t *b = json_loadb(q->body, q->len, 0, &jerr);
		if (!json_is_object(b)) {
			json_decref(b);
			return send_error(h, c, q, MHD_HTTP_BAD_REQUEST,
					  "the index request body must be a JSON object");
		}
		ready_only = json_is_true(json_object_get(b, "ready"));
		json_decref(b);
	}
	int n = 0;
	wf_serve_version_state *st = wf_serve_repo_index(h->repo, &n);
	json_t *a = json_array();
	for (int i = 0; i < n; i++) {
		const char *state = !strcmp(st[i].state, "AVAILABLE") ? "READY"
				    : !strcmp(st[i].state, "LOADING") ? "LOADING"
								      : "UNAVAILABLE";
		if (ready_only && strcmp(state, "READY"))
			continue;
		json_t *e = json_pack("{ssss}", "name", st[i].name, "state", state);
		if (st[i].version) {
			char ver[32];
			snprintf(ver, sizeof(ver), "%ld", st[i].version);
			json_object_set_new(e, "version", json_string(ver));
		}
		if (!strcmp(state, "UNAVAILABLE"))
			json_object_set_new(e, "reason",
					    json_string(st[i].error[0] ? st[i].error : "unloaded"));
		json_array_append_new(a, e);
	}
	free(st);
	return send_jobj(h, c, q, MHD_HTTP_OK, a);
}

enum MHD_Result handle_repo_control(wf_serve_http *h, struct MHD_Connection *c, req_ctx *q,
				    const route *r)
{
	wf_err err = {0};
	if (q->len) {
		json_error_t jerr;
		json_t *b = json_loadb(q->body, q->len, 0, &jerr);
		const json_t *p = json_object_get(b, "parameters");
		int overrides = p && (json_object_get(p, "config") || json_object_size(p) > 1);
		json_decref(b);
		if (!b)
			return send_error(h, c, q, MHD_HTTP_BAD_REQUEST,
					  "the request body must be a JSON object");
		if (overrides)
			return send_error(h, c, q, MHD_HTTP_BAD_REQUEST,
					  "load parameters (config, files) are not supported: "
					  "weft-serve loads the model folder as it is");
	}
	int rc = r->kind == R_V2_REPO_LOAD ? wf_serve_repo_load(h->repo, r->name, &err)
					   : wf_serve_repo_unload(h->repo, r->name, &err);
	if (rc)
		return send_error(h, c, q, http_code(rc), "%s", err.msg);
	return send_json(h, c, q, MHD_HTTP_OK, strdup(""));
}

/* ---- inference -------------------------------------------------------- */

enum MHD_Result handle_v1_infer(wf_serve_http *h, struct MHD_Connection *c, req_ctx *q,
				const route *r, wf_serve_version *v)
{
	wf_serve_tf_req req;
	wf_err err = {0};
	wf_serve_result res = {0};
	enum MHD_Result ret;
	int rc = wf_serve_tf_parse(&v->io, q->body ? q->body : "", q->len, &req, &err);
	if (rc) {
		wf_serve_stats_done(v, 0, wf_now() - q->t0);
		return send_error(h, c, q, http_code(rc), "%s", err.msg);
	}
	rc = wf_serve_run(h->batcher, v, &req.in, h->o.request_timeout, &res, &err);
	if (rc) {
		ret = send_error(h, c, q, http_code(rc), "%s", err.msg);
		goto out;
	}
	char *body = r->kind == R_V1_CLASSIFY
			     ? wf_serve_tf_classify_reply(res.probs, req.in.n, v->io.classes,
							  v->meta.class_names, req.top_k)
			     : wf_serve_tf_predict_reply(res.probs, req.in.n, v->io.classes,
							 req.columnar);
	ret = send_json(h, c, q, MHD_HTTP_OK, body);
out:
	wf_serve_result_free(&res);
	wf_serve_tf_req_free(&req);
	return ret;
}

enum MHD_Result handle_v2_infer(wf_serve_http *h, struct MHD_Connection *c, req_ctx *q,
				wf_serve_version *v)
{
	wf_serve_kv2_req req;
	wf_err err = {0};
	wf_serve_result res = {0};
	enum MHD_Result ret;
	size_t json_len = q->len;
	const char *hcl =
		MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Inference-Header-Content-Length");
	if (hcl) {
		char *end;
		unsigned long long l = strtoull(hcl, &end, 10);
		if (*hcl < '0' || *hcl > '9' || *end || l > q->len)
			return send_error(h, c, q, MHD_HTTP_BAD_REQUEST,
					  "bad Inference-Header-Content-Length \"%s\" for a body "
					  "of %zu bytes",
					  hcl, q->len);
		json_len = (size_t)l;
	}
	int rc = wf_serve_kv2_parse(&v->io, q->body ? q->body : "", q->len, json_len, &req, &err);
	if (rc) {
		wf_serve_stats_done(v, 0, wf_now() - q->t0);
		return send_error(h, c, q, http_code(rc), "%s", err.msg);
	}
	double timeout = h->o.request_timeout;
	if (req.timeout_us > 0 && req.timeout_us * 1e-6 < timeout)
		timeout = req.timeout_us * 1e-6;
	rc = wf_serve_run(h->batcher, v, &req.in, timeout, &res, &err);
	if (rc) {
		ret = send_error(h, c, q, http_code(rc), "%s", err.msg);
		goto out;
	}
	char *body = NULL;
	size_t len = 0, header_len = 0;
	rc = wf_serve_kv2_reply(&req, v->name, v->version, res.logits, res.probs, req.in.n,
				v->io.classes, v->meta.class_names, &body, &len, &header_len, &err);
	if (rc)
		ret = send_error(h, c, q, http_code(rc), "%s", err.msg);
	else
		ret = send_reply(h, c, q, MHD_HTTP_OK, body, len,
				 header_len ? "application/octet-stream" : CT_JSON, header_len);
out:
	wf_serve_result_free(&res);
	wf_serve_kv2_req_free(&req);
	return ret;
}

/* ---- dispatch --------------------------------------------------------- */

static int model_ready(wf_serve_http *h)
{
	return wf_serve_repo_ready(h->repo) && !atomic_load(&h->draining);
}

/* Routes that need a loaded model version. */
static enum MHD_Result dispatch_model(wf_serve_http *h, struct MHD_Connection *c, req_ctx *q,
				      const route *r)
{
	int v1 = r->kind <= R_V1_REGRESS;
	if (r->bad_version)
		return send_error(h, c, q, MHD_HTTP_BAD_REQUEST,
				  "the version in the URL must be a positive integer");
	if (r->kind == R_V1_STATUS)
		return handle_v1_status(h, c, q, r);
	if (r->kind == R_V2_STATS)
		return handle_stats(h, c, q, r->name, r->version);
	wf_serve_find why;
	wf_err err = {0};
	wf_serve_version *v =
		wf_serve_repo_find(h->repo, r->name, r->version, r->label, &why, &err);
	if (!v) {
		if (r->kind == R_V2_MODEL_READY && why != WF_SERVE_BAD_REQUEST &&
		    (why == WF_SERVE_UNAVAILABLE || r->version))
			return send_jobj(h, c, q, MHD_HTTP_SERVICE_UNAVAILABLE,
					 json_pack("{sssb}", "name", r->name, "ready", 0));
		if (why != WF_SERVE_NOT_FOUND || v1)
			return send_error(h, c, q, (int)why, "%s", err.msg);
		return r->version ? send_error(h, c, q, MHD_HTTP_NOT_FOUND,
					       "Request for unknown model: '%s' version %ld is not "
					       "found",
					       r->name, r->version)
				  : send_error(h, c, q, MHD_HTTP_NOT_FOUND,
					       "Request for unknown model: '%s' is not found",
					       r->name);
	}
	enum MHD_Result ret;
	atomic_fetch_add(&h->inflight, 1);
	switch (r->kind) {
	case R_V1_METADATA: ret = handle_v1_metadata(h, c, q, v); break;
	case R_V1_PREDICT:
	case R_V1_CLASSIFY: ret = handle_v1_infer(h, c, q, r, v); break;
	case R_V1_REGRESS:
		ret = send_error(h, c, q, MHD_HTTP_BAD_REQUEST,
				 "this model has no regression signature; use :predict or "
				 ":classify");
		break;
	case R_V2_MODEL: ret = handle_v2_model(h, c, q, v); break;
	case R_V2_CONFIG: ret = handle_v2_config(h, c, q, v); break;
	case R_V2_MODEL_READY:
		ret = send_jobj(
			h, c, q,
			atomic_load(&h->draining) ? MHD_HTTP_SERVICE_UNAVAILABLE : MHD_HTTP_OK,
			json_pack("{sssb}", "name", r->name, "ready", !atomic_load(&h->draining)));
		break;
	case R_V2_INFER: ret = handle_v2_infer(h, c, q, v); break;
	default: ret = send_error(h, c, q, MHD_HTTP_NOT_FOUND, "no such endpoint");
	}
	wf_serve_version_release(v);
	atomic_fetch_sub(&h->inflight, 1);
	return ret;
}

enum MHD_Result dispatch(wf_serve_http *h, struct MHD_Connection *c, req_ctx *q, const char *url,
			 const char *method, const route *r)
{
	int is_get = strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0;
	int is_post = strcmp(method, "POST") == 0;
	int wants_post = r->kind == R_V1_PREDICT || r->kind == R_V1_CLASSIFY ||
			 r->kind == R_V1_REGRESS || r->kind == R_V2_INFER ||
			 r->kind == R_V2_REPO_INDEX || r->kind == R_V2_REPO_LOAD ||
			 r->kind == R_V2_REPO_UNLOAD;
	if (r->kind == R_UNKNOWN)
		return send_error(h, c, q, MHD_HTTP_NOT_FOUND, "Malformed request: %s %s", method,
				  url);
	if ((wants_post && !is_post) || (!wants_post && !is_get))
		return send_error(h, c, q, MHD_HTTP_METHOD_NOT_ALLOWED,
				  "method %s is not allowed on %s", method, url);
	if (q->too_big)
		return send_error(h, c, q, MHD_HTTP_CONTENT_TOO_LARGE,
				  "request body larger than the limit of %zu bytes", h->o.max_body);
	wf_err err = {0};
	int rc = inflate_body(h, c, q, &err);
	if (rc)
		return send_error(h, c, q, http_code(rc), "%s", err.msg);
	switch (r->kind) {
	case R_METRICS: {
		int n = 0;
		wf_serve_version **vs = wf_serve_repo_acquire_all(h->repo, NULL, &n);
		char *s = wf_serve_metrics_render(h->metrics, vs, n, model_ready(h),
						  wf_serve_repo_swaps(h->repo));
		for (int i = 0; i < n; i++)
			wf_serve_version_release(vs[i]);
		free(vs);
		return send_reply(h, c, q, MHD_HTTP_OK, s, s ? strlen(s) : 0,
				  "text/plain; version=0.0.4", 0);
	}
	case R_V2_SERVER:
		return send_jobj(h, c, q, MHD_HTTP_OK,
				 json_pack("{sssss[ssssss]}", "name", "weft-serve", "version",
					   WF_SERVE_VERSION, "extensions", "binary_tensor_data",
					   "classification", "model_repository",
					   "model_configuration", "statistics", "parameters"));
	case R_V2_LIVE: return send_jobj(h, c, q, MHD_HTTP_OK, json_pack("{sb}", "live", 1));
	case R_V2_READY: {
		int ready = model_ready(h);
		return send_jobj(h, c, q, ready ? MHD_HTTP_OK : MHD_HTTP_SERVICE_UNAVAILABLE,
				 json_pack("{sb}", "ready", ready));
	}
	case R_V2_ALL_STATS: return handle_stats(h, c, q, NULL, 0);
	case R_V2_REPO_INDEX: return handle_repo_index(h, c, q);
	case R_V2_REPO_LOAD:
	case R_V2_REPO_UNLOAD: return handle_repo_control(h, c, q, r);
	default: return dispatch_model(h, c, q, r);
	}
}

/* ---- connections: deadlines, budget, authentication -------------------- */

static conn_rec *conn_of(struct MHD_Connection *c)
{
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
	return ci ? ci->socket_context : NULL;
}

static void conn_phase(wf_serve_http *h, struct MHD_Connection *c, int phase, double seconds)
{
	conn_rec *r = conn_of(c);
	if (!r)
		return;
	pthread_mutex_lock(&h->cmu);
	r->phase = phase;
	r->deadline = wf_now() + seconds;
	pthread_mutex_unlock(&h->cmu);
}

static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
			  enum MHD_ConnectionNotificationCode code)
{
	wf_serve_http *h = cls;
	conn_rec *r = *socket_context;
	if (code == MHD_CONNECTION_NOTIFY_STARTED) {
		const union MHD_ConnectionInfo *ci =
			MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
		r = calloc(1, sizeof(*r));
		if (!r || !ci) {
			free(r);
			return;
		}
		r->fd = ci->connect_fd;
		r->phase = C_HEADER;
		r->deadline = wf_now() + h->o.header_timeout;
		pthread_mutex_lock(&h->cmu);
		r->next = h->conns;
		if (h->conns)
			h->conns->prev = r;
		h->conns = r;
		pthread_mutex_unlock(&h->cmu);
		*socket_context = r;
	} else if (r) {
		/* MHD reports CLOSED before it closes the socket, so the reaper
		 * (under cmu) never shuts down a reused descriptor. */
		pthread_mutex_lock(&h->cmu);
		if (r->prev)
			r->prev->next = r->next;
		else
			h->conns = r->next;
		if (r->next)
			r->next->prev = r->prev;
		pthread_mutex_unlock(&h->cmu);
		free(r);
		*socket_context = NULL;
	}
}

/* Shuts down connections whose header or body is overdue (like nginx's
 * client_header_timeout / client_body_timeout, but for the whole header or
 * body, so a client trickling one byte at a time gets no longer either). */
static void *reaper_main(void *arg)
{
	wf_serve_http *h = arg;
	pthread_mutex_lock(&h->cmu);
	while (!h->reaper_stop) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 200 * 1000 * 1000;
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		pthread_cond_timedwait(&h->ccv, &h->cmu, &ts);
		double now = wf_now();
		for (conn_rec *r = h->conns; r; r = r->next)
			if (r->phase != C_BUSY && now > r->deadline) {
				wf_debug("serve: http: closing connection %d: %s not received in "
					 "time",
					 r->fd, r->phase == C_HEADER ? "request header" : "body");
				shutdown(r->fd, SHUT_RDWR);
				r->deadline = now + 3600;
			}
	}
	pthread_mutex_unlock(&h->cmu);
	return NULL;
}

/* Reserve n more bytes of the body budget for q; 0 when it is exhausted
 * (a request alone may always use up to the budget). */
static int reserve_body(wf_serve_http *h, req_ctx *q, size_t n)
{
	if (!h->o.body_budget) {
		q->reserved += n;
		atomic_fetch_add(&h->body_bytes, n);
		return 1;
	}
	size_t cur = atomic_load(&h->body_bytes);
	for (;;) {
		if (cur > q->reserved && cur + n > h->o.body_budget)
			return 0;
		if (atomic_compare_exchange_weak(&h->body_bytes, &cur, cur + n))
			break;
	}
	q->reserved += n;
	return 1;
}

/* The body is no longer needed (the request was answered): free it and its
 * share of the budget; memory of a large one goes back to the system. */
static void release_body(wf_serve_http *h, req_ctx *q)
{
	free(q->body);
	q->body = NULL;
	q->len = q->cap = 0;
	if (q->reserved) {
		atomic_fetch_sub(&h->body_bytes, q->reserved);
		if (q->reserved >= ((size_t)1 << 20))
			malloc_trim(0);
		q->reserved = 0;
	}
}

/* 1 when the request carries "Authorization: Bearer <token>" (constant time). */
static int authorized(wf_serve_http *h, struct MHD_Connection *c)
{
	const char *a =
		MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
	if (!a || strncasecmp(a, "Bearer ", 7) != 0)
		return 0;
	a += 7;
	size_t n = strlen(a), t = strlen(h->token);
	unsigned diff = n != t;
	for (size_t i = 0; i < t; i++)
		diff |= (unsigned char)h->token[i] ^ (unsigned char)(i < n ? a[i] : 0);
	return diff == 0;
}

/* The first call for a request: its header is complete. */
static enum MHD_Result on_header(wf_serve_http *h, struct MHD_Connection *c, const char *url,
				 req_ctx *q)
{
	route r;
	q->ep = parse_route(url, &r);
	atomic_fetch_add(&h->active, 1);
	conn_phase(h, c, C_BODY, h->o.body_timeout);
	if (h->token && r.kind != R_V2_LIVE && r.kind != R_V2_READY && !authorized(h, c))
		return send_error(h, c, q, MHD_HTTP_UNAUTHORIZED,
				  "this server requires \"Authorization: Bearer <token>\"");
	const char *cl =
		MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
	unsigned long long len = cl ? strtoull(cl, NULL, 10) : 0;
	if (cl && len > h->o.max_body) {
		q->too_big = 1;
		return send_error(h, c, q, MHD_HTTP_CONTENT_TOO_LARGE,
				  "request body of %s bytes is larger than the limit of %zu "
				  "bytes",
				  cl, h->o.max_body);
	}
	if (len) {
		if (!reserve_body(h, q, (size_t)len)) {
			q->over_budget = 1;
			return send_error(h, c, q, MHD_HTTP_SERVICE_UNAVAILABLE,
					  "too many request bodies in memory (budget %zu bytes); "
					  "retry later",
					  h->o.body_budget);
		}
		/* The body's exact size at once: no doubling, no copies. */
		q->body = malloc((size_t)len + 1);
		if (!q->body)
			return send_error(h, c, q, MHD_HTTP_SERVICE_UNAVAILABLE,
					  "out of memory for a body of %s bytes", cl);
		q->cap = (size_t)len + 1;
	}
	return MHD_YES;
}

static enum MHD_Result on_body(wf_serve_http *h, req_ctx *q, const char *data, size_t n)
{
	if (q->replied || q->too_big || q->over_budget)
		return MHD_YES;
	if (q->len + n > h->o.max_body) {
		q->too_big = 1;
		free(q->body);
		q->body = NULL;
		q->len = q->cap = 0;
		return MHD_YES;
	}
	if (q->len + n + 1 > q->cap) {
		size_t cap = q->cap ? q->cap : 4096;
		while (cap < q->len + n + 1)
			cap *= 2;
		if (!reserve_body(h, q, cap - q->cap)) {
			q->over_budget = 1;
			free(q->body);
			q->body = NULL;
			q->len = q->cap = 0;
			return MHD_YES;
		}
		char *p = realloc(q->body, cap);
		if (!p)
			return MHD_NO;
		q->body = p;
		q->cap = cap;
	}
	memcpy(q->body + q->len, data, n);
	q->len += n;
	q->body[q->len] = 0;
	return MHD_YES;
}

/* Hand an inference request to the handler threads; the connection stays
 * suspended (holding no event thread) until its reply is ready. */
static enum MHD_Result defer(wf_serve_http *h, struct MHD_Connection *c, req_ctx *q,
			     const char *url, const char *method)
{
	q->url = strdup(url);
	if (!q->url)
		return MHD_NO;
	snprintf(q->method, sizeof(q->method), "%s", method);
	q->conn = c;
	pthread_mutex_lock(&h->wmu);
	if (h->o.max_queue > 0 && h->wpending >= h->o.max_queue) {
		pthread_mutex_unlock(&h->wmu);
		return send_error(h, c, q, MHD_HTTP_TOO_MANY_REQUESTS,
				  "the queue is full (%d requests waiting, --max_queue_size); "
				  "retry later",
				  h->o.max_queue);
	}
	q->deferred = 1;
	q->t_queued = wf_now();
	MHD_suspend_connection(c);
	q->next = NULL;
	if (h->wtail)
		h->wtail->next = q;
	else
		h->whead = q;
	h->wtail = q;
	h->wpending++;
	pthread_cond_signal(&h->wcv);
	pthread_mutex_unlock(&h->wmu);
	return MHD_YES;
}

static void *handler_main(void *arg)
{
	wf_serve_http *h = arg;
	pthread_mutex_lock(&h->wmu);
	for (;;) {
		while (!h->whead && !h->wstop)
			pthread_cond_wait(&h->wcv, &h->wmu);
		req_ctx *q = h->whead;
		if (!q)
			break;
		h->whead = q->next;
		if (!h->whead)
			h->wtail = NULL;
		h->wpending--;
		pthread_mutex_unlock(&h->wmu);
		route r;
		q->ep = parse_route(q->url, &r);
		if (wf_now() - q->t_queued > h->o.request_timeout)
			send_error(h, q->conn, q, MHD_HTTP_SERVICE_UNAVAILABLE,
				   "request timed out after %.1fs waiting for a handler thread",
				   h->o.request_timeout);
		else
			dispatch(h, q->conn, q, q->url, q->method, &r);
		release_body(h, q);
		MHD_resume_connection(q->conn);
		pthread_mutex_lock(&h->wmu);
	}
	pthread_mutex_unlock(&h->wmu);
	return NULL;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
				  const char *method, const char *version, const char *upload_data,
				  size_t *upload_data_size, void **con_cls)
{
	wf_serve_http *h = cls;
	req_ctx *q = *con_cls;
	(void)version;
	if (!q) {
		q = calloc(1, sizeof(*q));
		if (!q)
			return MHD_NO;
		q->t0 = wf_now();
		*con_cls = q;
		return on_header(h, c, url, q);
	}
	if (*upload_data_size) {
		size_t n = *upload_data_size;
		*upload_data_size = 0;
		return on_body(h, q, upload_data, n);
	}
	if (q->deferred) { /* resumed: the handler thread's reply */
		if (!q->resp)
			return MHD_NO;
		enum MHD_Result ret = MHD_queue_response(c, (unsigned)q->code, q->resp);
		MHD_destroy_response(q->resp);
		q->resp = NULL;
		return ret;
	}
	if (q->replied)
		return MHD_YES;
	conn_phase(h, c, C_BUSY, 0);
	if (q->over_budget)
		return send_error(h, c, q, MHD_HTTP_SERVICE_UNAVAILABLE,
				  "too many request bodies in memory (budget %zu bytes); retry "
				  "later",
				  h->o.body_budget);
	route r;
	q->ep = parse_route(url, &r);
	/* Inference and model control (a load, or an unload waiting for one)
	 * may take long: handler threads, never the event threads. */
	if ((r.kind == R_V1_PREDICT || r.kind == R_V1_CLASSIFY || r.kind == R_V2_INFER ||
	     r.kind == R_V2_REPO_LOAD || r.kind == R_V2_REPO_UNLOAD) &&
	    strcmp(method, "POST") == 0)
		return defer(h, c, q, url, method);
	enum MHD_Result ret = dispatch(h, c, q, url, method, &r);
	release_body(h, q);
	return ret;
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
			 enum MHD_RequestTerminationCode toe)
{
	wf_serve_http *h = cls;
	req_ctx *q = *con_cls;
	(void)toe;
	if (!q)
		return;
	/* The next request on a kept-alive connection: idle time and its header. */
	conn_phase(h, c, C_HEADER, h->o.idle_timeout + h->o.header_timeout);
	if (q->resp)
		MHD_destroy_response(q->resp);
	free(q->url);
	release_body(h, q);
	free(q);
	*con_cls = NULL;
	atomic_fetch_sub(&h->active, 1);
}

static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
	char msg[512];
	(void)cls;
	vsnprintf(msg, sizeof(msg), fmt, ap);
	size_t n = strlen(msg);
	while (n && msg[n - 1] == '\n')
		msg[--n] = 0;
	wf_debug("serve: http: %s", msg);
}

/* The whole of a small text file (PEM, token) into *out (malloc'd). */
static int read_small_file(const char *path, const char *what, char **out, wf_err *err)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return wf_errf(err, WF_EIO, "cannot open %s %s", what, path);
	char *buf = malloc(1 << 20);
	size_t n = buf ? fread(buf, 1, (1 << 20) - 1, f) : 0;
	int toolong = buf && n == (1 << 20) - 1 && fgetc(f) != EOF;
	fclose(f);
	if (!buf)
		return wf_errf(err, WF_ENOMEM, "out of memory reading %s", path);
	if (toolong || n == 0) {
		free(buf);
		return wf_errf(err, WF_EINVAL, "%s %s is %s", what, path,
			       n ? "larger than 1 MiB" : "empty");
	}
	buf[n] = 0;
	*out = buf;
	return 0;
}

/* Loads the TLS key pair and the token named in the options. */
static int load_secrets(wf_serve_http *h, wf_err *err)
{
	const wf_serve_http_opts *o = &h->o;
	if (!o->tls_cert_file != !o->tls_key_file)
		return wf_errf(err, WF_EINVAL,
			       "TLS needs both --ssl_cert_file and --ssl_key_file (got only %s)",
			       o->tls_cert_file ? "the certificate" : "the key");
	if (o->ssl_config_file && o->tls_cert_file)
		return wf_errf(err, WF_EINVAL,
			       "give either --ssl_config_file or --ssl_cert_file/--ssl_key_file");
	if ((o->tls_cert_file || o->ssl_config_file) &&
	    MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES)
		return wf_errf(err, WF_ENOTSUP,
			       "this libmicrohttpd was built without TLS (GnuTLS)");
	if (o->tls_cert_file) {
		int rc = read_small_file(o->tls_cert_file, "TLS certificate", &h->tls_cert, err);
		if (!rc)
			rc = read_small_file(o->tls_key_file, "TLS key", &h->tls_key, err);
		if (rc)
			return rc;
	}
	if (o->ssl_config_file) {
		char *text = NULL;
		wf_serve_ssl_config sc;
		int rc = read_small_file(o->ssl_config_file, "SSL config", &text, err);
		if (rc)
			return rc;
		rc = wf_serve_ssl_config_parse(text, strlen(text), &sc, err);
		free(text);
		if (rc)
			return wf_err_wrap(err, "--ssl_config_file %s", o->ssl_config_file);
		int verify = sc.client_verify;
		if (!sc.server_key || !sc.server_cert || verify) {
			wf_serve_ssl_config_free(&sc);
			return wf_errf(
				err, verify ? WF_ENOTSUP : WF_EINVAL, "--ssl_config_file %s: %s",
				o->ssl_config_file,
				verify ? "client_verify (client certificates) is not supported"
				       : "server_key and server_cert are required");
		}
		h->tls_key = sc.server_key;
		h->tls_cert = sc.server_cert;
		free(sc.custom_ca); /* only used to verify clients */
	}
	if (o->auth_token_file) {
		int rc = read_small_file(o->auth_token_file, "token file", &h->token, err);
		if (rc)
			return rc;
		h->token[strcspn(h->token, "\r\n")] = 0;
		if (strlen(h->token) < 16 || strspn(h->token, " \t") == strlen(h->token))
			return wf_errf(err, WF_EINVAL,
				       "token file %s: the token (its first line) must have at "
				       "least 16 characters",
				       o->auth_token_file);
	}
	return 0;
}

/* Raise the open-file limit so max_connections sockets fit; returns the
 * connection limit that does fit. */
static int fit_fd_limit(int want)
{
	struct rlimit rl;
	rlim_t need = (rlim_t)want + 256;
	if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
		return want;
	if (rl.rlim_cur < need) {
		rl.rlim_cur =
			rl.rlim_max == RLIM_INFINITY || rl.rlim_max > need ? need : rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
		getrlimit(RLIMIT_NOFILE, &rl);
	}
	if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < need) {
		int fit = rl.rlim_cur > 512 ? (int)(rl.rlim_cur - 256) : 256;
		wf_warn("serve: open-file limit %llu allows only %d connections (wanted %d)",
			(unsigned long long)rl.rlim_cur, fit, want);
		return fit;
	}
	return want;
}

static void http_free(wf_serve_http *h)
{
	if (h->reaper_started) {
		pthread_mutex_lock(&h->cmu);
		h->reaper_stop = 1;
		pthread_cond_signal(&h->ccv);
		pthread_mutex_unlock(&h->cmu);
		pthread_join(h->reaper, NULL);
	}
	/* Handler threads finish what they hold (resuming its connections)
	 * before the daemon goes. */
	pthread_mutex_lock(&h->wmu);
	h->wstop = 1;
	pthread_cond_broadcast(&h->wcv);
	pthread_mutex_unlock(&h->wmu);
	for (int i = 0; i < h->nworkers; i++)
		pthread_join(h->workers[i], NULL);
	free(h->workers);
	if (h->d)
		MHD_stop_daemon(h->d);
	pthread_cond_destroy(&h->wcv);
	pthread_mutex_destroy(&h->wmu);
	pthread_cond_destroy(&h->ccv);
	pthread_mutex_destroy(&h->cmu);
	free(h->tls_cert);
	if (h->tls_key)
		memset(h->tls_key, 0, strlen(h->tls_key));
	free(h->tls_key);
	if (h->token)
		memset(h->token, 0, strlen(h->token));
	free(h->token);
	free(h->model_name);
	free(h);
}

int wf_serve_http_start(wf_serve_http **out, const wf_serve_http_opts *o, wf_serve_repo *repo,
			wf_serve_batcher *batcher, wf_serve_metrics *metrics, wf_err *err)
{
	struct sockaddr_in addr;
	memset(&addr, 0, sizeof(addr));
	addr.sin_family = AF_INET;
	addr.sin_port = htons((uint16_t)o->port);
	if (inet_pton(AF_INET, o->bind_address, &addr.sin_addr) != 1)
		return wf_errf(err, WF_EINVAL, "--bind_address %s is not an IPv4 address",
			       o->bind_address);
	wf_serve_http *h = calloc(1, sizeof(*h));
	if (!h)
		return wf_errf(err, WF_ENOMEM, "out of memory");
	pthread_mutex_init(&h->cmu, NULL);
	pthread_cond_init(&h->ccv, NULL);
	pthread_mutex_init(&h->wmu, NULL);
	pthread_cond_init(&h->wcv, NULL);
	h->o = *o;
	h->model_name = strdup(o->model_name);
	h->o.model_name = h->model_name;
	if (h->o.idle_timeout <= 0)
		h->o.idle_timeout = 60;
	if (h->o.threads <= 0)
		h->o.threads = 16;
	if (h->o.max_connections <= 0)
		h->o.max_connections = 10000;
	if (h->o.header_timeout <= 0)
		h->o.header_timeout = 10;
	if (h->o.body_timeout <= 0)
		h->o.body_timeout = 60;
	h->repo = repo;
	h->batcher = batcher;
	h->metrics = metrics;
	atomic_init(&h->draining, 0);
	atomic_init(&h->inflight, 0);
	atomic_init(&h->active, 0);
	atomic_init(&h->body_bytes, 0);
	int rc = load_secrets(h, err);
	if (rc) {
		http_free(h);
		return rc;
	}
	h->o.max_connections = fit_fd_limit(h->o.max_connections);
	struct MHD_OptionItem opts[16];
	int n = 0;
#define OPT(opt, val, ptr) opts[n++] = (struct MHD_OptionItem){(opt), (intptr_t)(val), (ptr)}
	OPT(MHD_OPTION_SOCK_ADDR, 0, &addr);
	OPT(MHD_OPTION_THREAD_POOL_SIZE, WF_SERVE_EVENT_THREADS, NULL);
	OPT(MHD_OPTION_NOTIFY_COMPLETED, on_completed, h);
	OPT(MHD_OPTION_NOTIFY_CONNECTION, on_connection, h);
	OPT(MHD_OPTION_CONNECTION_TIMEOUT, h->o.idle_timeout, NULL);
	OPT(MHD_OPTION_CONNECTION_LIMIT, h->o.max_connections, NULL);
	if (h->o.max_per_client > 0)
		OPT(MHD_OPTION_PER_IP_CONNECTION_LIMIT, h->o.max_per_client, NULL);
	OPT(MHD_OPTION_LISTEN_BACKLOG_SIZE, 1024, NULL);
	OPT(MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, h);
	if (h->tls_cert) {
		OPT(MHD_OPTION_HTTPS_MEM_CERT, 0, h->tls_cert);
		OPT(MHD_OPTION_HTTPS_MEM_KEY, 0, h->tls_key);
	}
	OPT(MHD_OPTION_END, 0, NULL);
#undef OPT
	unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_USE_ITC |
			 MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG |
			 (h->tls_cert ? MHD_USE_TLS : 0);
	h->d = MHD_start_daemon(flags, (uint16_t)o->port, NULL, NULL, on_request, h,
				MHD_OPTION_ARRAY, opts, MHD_OPTION_END);
	if (!h->d) {
		http_free(h);
		return wf_errf(err, WF_EIO,
			       "cannot listen on %s:%d (port in use, or a bad TLS "
			       "certificate or key?)",
			       o->bind_address, o->port);
	}
	if (pthread_create(&h->reaper, NULL, reaper_main, h) != 0) {
		http_free(h);
		return wf_errf(err, WF_EINTERNAL, "cannot start the connection reaper thread");
	}
	h->reaper_started = 1;
	h->workers = calloc((size_t)h->o.threads, sizeof(*h->workers));
	if (!h->workers) {
		http_free(h);
		return wf_errf(err, WF_ENOMEM, "out of memory");
	}
	for (; h->nworkers < h->o.threads; h->nworkers++)
		if (pthread_create(&h->workers[h->nworkers], NULL, handler_main, h) != 0) {
			http_free(h);
			return wf_errf(err, WF_EINTERNAL, "cannot start HTTP handler thread %d",
				       h->nworkers);
		}
	const union MHD_DaemonInfo *info = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_BIND_PORT);
	h->port = info ? info->port : o->port;
	*out = h;
	return 0;
}

int wf_serve_http_port(wf_serve_http *h)
{
	return h->port;
}

void wf_serve_http_drain(wf_serve_http *h)
{
	if (atomic_exchange(&h->draining, 1))
		return;
	MHD_socket fd = MHD_quiesce_daemon(h->d);
	if (fd != MHD_INVALID_SOCKET)
		close(fd);
}

int wf_serve_http_inflight(wf_serve_http *h)
{
	return atomic_load(&h->active);
}

void wf_serve_http_stop(wf_serve_http *h)
{
	if (!h)
		return;
	http_free(h);
}
