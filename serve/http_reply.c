/* http_reply.c: sending replies (JSON, errors, Accept-Encoding compression)
 * and inflating Content-Encoding request bodies. */
#include "serve/http_internal.h"

#include "serve/inflate.h"

/* ---- per-request state and replies ------------------------------------ */

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

/* The response encoding of a reply: "gzip", "deflate" or NULL. As Triton
 * does, only successful inference replies are compressed; tritonclient's
 * aio client inflates those and reads every other reply (metadata, config,
 * statistics, errors) as plain text whatever Accept-Encoding it sent. */
static const char *reply_encoding(struct MHD_Connection *c, const req_ctx *q, int code)
{
	if (code != MHD_HTTP_OK ||
	    (q->ep != WF_SERVE_EP_V2_INFER && q->ep != WF_SERVE_EP_V1_PREDICT &&
	     q->ep != WF_SERVE_EP_V1_CLASSIFY))
		return NULL;
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
	const char *enc = len ? reply_encoding(c, q, code) : NULL;
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
	if (h->o.cors) { /* any origin, as TF Serving's CORS support answers */
		MHD_add_response_header(resp, MHD_HTTP_HEADER_ACCESS_CONTROL_ALLOW_ORIGIN, "*");
		const char *asked = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
								"Access-Control-Request-Headers");
		if (q->preflight) {
			MHD_add_response_header(resp, "Access-Control-Allow-Methods",
						"GET, POST, OPTIONS");
			MHD_add_response_header(resp, "Access-Control-Allow-Headers",
						asked ? asked : "Content-Type, Authorization");
			MHD_add_response_header(resp, "Access-Control-Max-Age", "86400");
		}
	}
	if (code == MHD_HTTP_METHOD_NOT_ALLOWED)
		MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW,
					q->ep == WF_SERVE_EP_V1_PREDICT ||
							q->ep == WF_SERVE_EP_V1_CLASSIFY ||
							q->ep == WF_SERVE_EP_V2_INFER ||
							q->ep == WF_SERVE_EP_V2_REPOSITORY ||
							q->ep == WF_SERVE_EP_V2_SHM
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
static int over_budget(wf_serve_http *h, const char *ce, wf_err *err)
{
	return wf_errf(err, WF_ETRANSIENT,
		       "too many request bodies in memory (budget %zu bytes, counting this %s "
		       "body inflated); retry later",
		       h->o.body_budget, ce);
}

/* The inflated body counts in the body budget (--max_body_bytes_in_flight). */
typedef struct body_grow {
	wf_serve_http *h;
	req_ctx *q;
} body_grow;

static int grow_body(void *ctx, size_t bytes)
{
	body_grow *g = ctx;
	return reserve_body(g->h, g->q, bytes);
}

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
	body_grow g = {h, q};
	uint8_t *out;
	size_t n;
	/* a zlib or gzip header, detected; deflate without one is tried next */
	wf_inflate_status st =
		wf_serve_inflate((const uint8_t *)q->body, q->len, WF_INFLATE_DETECTED,
				 h->o.max_body, grow_body, &g, &out, &n);
	if ((st == WF_INFLATE_CORRUPT || st == WF_INFLATE_TRUNCATED) && !strcmp(ce, "deflate"))
		st = wf_serve_inflate((const uint8_t *)q->body, q->len, WF_INFLATE_RAW,
				      h->o.max_body, grow_body, &g, &out, &n);
	switch (st) {
	case WF_INFLATE_OK: break;
	case WF_INFLATE_TOO_LARGE:
		return wf_errf(err, WF_EINVAL, "the %s body inflates beyond the limit of %zu bytes",
			       ce, h->o.max_body);
	case WF_INFLATE_REFUSED: return over_budget(h, ce, err);
	case WF_INFLATE_NOMEM: return wf_errf(err, WF_ENOMEM, "out of memory");
	default: return wf_errf(err, WF_EINVAL, "the request body is not valid %s data", ce);
	}
	out[n] = 0;
	free(q->base);
	q->body = q->base = (char *)out;
	q->pad = 0;
	q->len = n;
	q->cap = n + 1;
	return 0;
}
