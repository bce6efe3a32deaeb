/* grpc_call.c: one gRPC call: status codes and failure replies, the
 * length-prefixed message framing (compression, size limit), grpc-timeout,
 * and the dispatch of a finished stream to its method (inline or on a
 * worker), or of each message of a streaming call as it arrives. */
#include "serve/grpc_internal.h"

#include "serve/inflate.h"

static const char *code_names[] = {
	"OK",
	"CANCELLED",
	"UNKNOWN",
	"INVALID_ARGUMENT",
	"DEADLINE_EXCEEDED",
	"NOT_FOUND",
	"ALREADY_EXISTS",
	"PERMISSION_DENIED",
	"RESOURCE_EXHAUSTED",
	"FAILED_PRECONDITION",
	"ABORTED",
	"OUT_OF_RANGE",
	"UNIMPLEMENTED",
	"INTERNAL",
	"UNAVAILABLE",
	"DATA_LOSS",
	"UNAUTHENTICATED",
};

const char *wf_grpc_code_name(int code)
{
	return code >= 0 && code < (int)WF_ARRAY_LEN(code_names) ? code_names[code] : "UNKNOWN";
}

uint8_t *wf_grpc_reply_buf(wf_grpc_call *call, size_t n)
{
	free(call->reply);
	call->reply = malloc(PREFIX + (n ? n : 1));
	call->reply_len = call->reply ? n : 0;
	return call->reply ? call->reply + PREFIX : NULL;
}

int wf_grpc_fail(wf_grpc_call *call, int code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(call->message, sizeof(call->message), fmt, ap);
	va_end(ap);
	return code;
}

/* ---- framing ---------------------------------------------------------- */

static int inflate_msg(const uint8_t *in, size_t n, int gzip, size_t max, uint8_t **out,
		       size_t *out_len, char *why, size_t cap)
{
	const char *alg = gzip ? "gzip" : "deflate";
	switch (wf_serve_inflate(in, n, gzip ? WF_INFLATE_GZIP : WF_INFLATE_ZLIB, max, NULL, NULL,
				 out, out_len)) {
	case WF_INFLATE_OK: return WF_GRPC_OK;
	case WF_INFLATE_TOO_LARGE:
		snprintf(why, cap,
			 "grpc: received message after decompression larger than max (%zu)", max);
		return WF_GRPC_RESOURCE_EXHAUSTED;
	case WF_INFLATE_TRUNCATED:
		snprintf(why, cap, "the %s-compressed message is truncated", alg);
		return WF_GRPC_INVALID_ARGUMENT;
	case WF_INFLATE_CORRUPT:
		snprintf(why, cap, "the %s-compressed message is corrupt", alg);
		return WF_GRPC_INVALID_ARGUMENT;
	default: snprintf(why, cap, "out of memory"); return WF_GRPC_RESOURCE_EXHAUSTED;
	}
}

int wf_grpc_unframe(const uint8_t *body, size_t len, const char *encoding, size_t max,
		    const uint8_t **msg, size_t *msg_len, uint8_t **inflated, char *why,
		    size_t why_cap)
{
	*msg = NULL;
	*msg_len = 0;
	*inflated = NULL;
	if (len < PREFIX) {
		snprintf(why, why_cap,
			 "the request has %s (a gRPC message starts with a 5-byte prefix)",
			 len ? "a truncated message prefix" : "no message");
		return WF_GRPC_INVALID_ARGUMENT;
	}
	uint32_t n = ((uint32_t)body[1] << 24) | ((uint32_t)body[2] << 16) |
		     ((uint32_t)body[3] << 8) | body[4];
	if (body[0] > 1) {
		snprintf(why, why_cap, "bad compressed-flag byte %u in the message prefix",
			 body[0]);
		return WF_GRPC_INVALID_ARGUMENT;
	}
	if ((size_t)n > len - PREFIX) {
		snprintf(why, why_cap, "the message prefix says %u bytes, the stream has %zu", n,
			 len - PREFIX);
		return WF_GRPC_INVALID_ARGUMENT;
	}
	if ((size_t)n < len - PREFIX) {
		snprintf(why, why_cap, "a unary call carries one message; %zu bytes follow it",
			 len - PREFIX - n);
		return WF_GRPC_INVALID_ARGUMENT;
	}
	if (n > max) {
		snprintf(why, why_cap, "grpc: received message larger than max (%u vs. %zu)", n,
			 max);
		return WF_GRPC_RESOURCE_EXHAUSTED;
	}
	int identity = !encoding || !*encoding || !strcmp(encoding, "identity");
	if (body[0] == 1) {
		if (identity) {
			snprintf(why, why_cap,
				 "the message is flagged compressed but no grpc-encoding was sent");
			return WF_GRPC_INVALID_ARGUMENT;
		}
		if (strcmp(encoding, "gzip") && strcmp(encoding, "deflate")) {
			snprintf(why, why_cap,
				 "grpc-encoding \"%.32s\" is not supported (identity, gzip, "
				 "deflate)",
				 encoding);
			return WF_GRPC_UNIMPLEMENTED;
		}
		int code = inflate_msg(body + PREFIX, n, !strcmp(encoding, "gzip"), max, inflated,
				       msg_len, why, why_cap);
		*msg = *inflated;
		return code;
	}
	*msg = body + PREFIX; /* read in place: no copy of a large message */
	*msg_len = n;
	return WF_GRPC_OK;
}

double wf_grpc_parse_timeout(const char *v)
{
	size_t n = strlen(v);
	if (n < 2 || n > 9 || strspn(v, "0123456789") != n - 1)
		return -1;
	double x = (double)strtol(v, NULL, 10);
	switch (v[n - 1]) {
	case 'H': return x * 3600;
	case 'M': return x * 60;
	case 'S': return x;
	case 'm': return x * 1e-3;
	case 'u': return x * 1e-6;
	case 'n': return x * 1e-9;
	default: return -1;
	}
}

/* grpc-message is percent-encoded outside printable ASCII (and '%'). */
void pct_encode(const char *s, char *out, size_t cap)
{
	static const char hex[] = "0123456789ABCDEF";
	size_t o = 0;
	for (; *s && o + 4 < cap; s++) {
		unsigned char ch = (unsigned char)*s;
		if (ch >= 0x20 && ch <= 0x7e && ch != '%') {
			out[o++] = (char)ch;
		} else {
			out[o++] = '%';
			out[o++] = hex[ch >> 4];
			out[o++] = hex[ch & 15];
		}
	}
	out[o] = 0;
}

static const wf_grpc_method *find_method(wf_grpc *g, const char *path)
{
	for (int i = 0; i < g->nmethods; i++)
		if (!strcmp(g->methods[i].path, path))
			return &g->methods[i];
	return NULL;
}

/* A handler that never blocks (health, metadata) runs in the loop thread. */
static void run_inline(conn *c, stream *st, const wf_grpc_method *m)
{
	wf_grpc *g = c->g;
	wf_grpc_call call = {0};
	uint8_t *inflated = NULL;
	char why[512];
	int code = wf_grpc_unframe(st->body, st->len, st->encoding, g->o.max_message, &call.msg,
				   &call.len, &inflated, why, sizeof(why));
	int framed = code == WF_GRPC_OK;
	if (framed) {
		call.t_begin = st->t_begin;
		call.deadline = st->timeout > 0 ? st->t_begin + st->timeout : 0;
		call.local = c->local;
		code = m->fn(g->ctx, &call);
	}
	c->receiving -= st->len;
	free(st->base); /* call.msg pointed into it */
	free(inflated);
	st->body = st->base = NULL;
	st->len = st->cap = 0;
	if (!framed) {
		answer_error(c, st, code, why);
	} else if (code == WF_GRPC_OK && call.reply) {
		answer_ok(c, st, call.reply, call.reply_len);
		call.reply = NULL;
	} else {
		answer_error(c, st, code == WF_GRPC_OK ? WF_GRPC_INTERNAL : code, call.message);
	}
	free(call.reply);
}

/* The request is complete: answer what is wrong with it, or queue a job. */
int refuse_unauthorized(conn *c, stream *st)
{
	wf_grpc *g = c->g;
	if (!g->o.token || st->authorized || st->answered)
		return st->answered;
	const wf_grpc_method *m = st->bad_header ? NULL : find_method(g, st->path);
	if (m && m->open)
		return 0;
	answer_error(c, st, WF_GRPC_UNAUTHENTICATED,
		     "this server requires metadata \"authorization: Bearer <token>\"");
	return 1;
}

/* A call refused before its handler ran: a unary call ends with the
 * status, a streaming one gets it as that message's reply. */
static void refuse_call(conn *c, stream *st, int code, const char *why)
{
	if (!st->sm) {
		answer_error(c, st, code, why);
		return;
	}
	wf_grpc_call call = {0};
	snprintf(call.message, sizeof(call.message), "%s", why);
	st->calls++;
	stream_answer(c, st, &call, code);
	free(call.reply);
}

/* The message body[0..len) (5-byte prefix included) as a call of m on st:
 * run here when small enough (m->loop_below), else queued for a worker.
 * base is the allocation body points into; the call owns it from now on. */
static void queue_call(conn *c, stream *st, const wf_grpc_method *m, uint8_t *base,
		       const uint8_t *body, size_t len)
{
	wf_grpc *g = c->g;
	char why[512];
	job *j = calloc(1, sizeof(*j));
	if (!j) {
		free(base);
		refuse_call(c, st, WF_GRPC_RESOURCE_EXHAUSTED, "out of memory");
		return;
	}
	int code = wf_grpc_unframe(body, len, st->encoding, g->o.max_message, &j->call.msg,
				   &j->call.len, &j->inflated, why, sizeof(why));
	if (code != WF_GRPC_OK) {
		free(base);
		free(j);
		refuse_call(c, st, code, why);
		return;
	}
	/* the job reads the message where it was received */
	j->body = base;
	j->c = c;
	j->stream_id = st->id;
	j->m = m;
	j->call.deadline = st->timeout > 0 ? st->t_begin + st->timeout : 0;
	/* a stream's calls begin when their message arrives */
	j->call.t_begin = st->sm ? wf_now() : st->t_begin;
	j->call.local = c->local;
	c->refs++;
	if (st->sm)
		st->calls++;
	if (m->loop_below && j->call.len <= m->loop_below) { /* it does not block */
		job_returned(g, j, m->fn(g->ctx, &j->call));
		return;
	}
	int rc = wf_serve_pool_push(&g->workers, &j->queued, NULL);
	if (rc) {
		c->refs--;
		free(j->body);
		free(j->inflated);
		free(j);
		if (st->sm)
			st->calls--;
		if (rc == WF_ESTOPPED)
			snprintf(why, sizeof(why), "the server is stopping");
		else
			snprintf(why, sizeof(why),
				 "%d calls are waiting for a worker (the limit); retry later",
				 g->o.max_queue);
		refuse_call(c, st,
			    rc == WF_ESTOPPED ? WF_GRPC_UNAVAILABLE : WF_GRPC_RESOURCE_EXHAUSTED,
			    why);
	}
}

/* The checks a call passes before its handler runs; 1 when st is answered. */
static int refuse_request(conn *c, stream *st, const wf_grpc_method *m)
{
	char why[300];
	if (st->answered)
		return 1;
	if (!st->post) {
		answer_http(c, st, "405");
		return 1;
	}
	if (!st->grpc_ct) {
		answer_http(c, st, "415");
		return 1;
	}
	if (refuse_unauthorized(c, st))
		return 1;
	if (!m) {
		snprintf(why, sizeof(why), "Method not found: %.200s",
			 st->path[0] == '/' ? st->path + 1 : st->path);
		answer_error(c, st, WF_GRPC_UNIMPLEMENTED, why);
		return 1;
	}
	if (atomic_load(&c->g->stop)) {
		answer_error(c, st, WF_GRPC_UNAVAILABLE, "the server is shutting down");
		return 1;
	}
	return 0;
}

void stream_begin(conn *c, stream *st)
{
	const wf_grpc_method *m = st->bad_header ? NULL : find_method(c->g, st->path);
	if (m && m->stream_reply && !refuse_request(c, st, m))
		st->sm = m;
}

void stream_take(conn *c, stream *st)
{
	while (stream_live(st) && st->len >= PREFIX) {
		const uint8_t *p = st->body;
		size_t n = PREFIX + ((size_t)p[1] << 24 | (size_t)p[2] << 16 | (size_t)p[3] << 8 |
				     (size_t)p[4]);
		if (st->len < n)
			break;
		uint8_t *base = st->base, *body = st->body;
		if (n == st->len) { /* the common case: the buffer is the message */
			st->base = st->body = NULL;
			st->cap = 0;
		} else if ((base = body = malloc(n))) {
			memcpy(base, st->body, n);
			memmove(st->body, st->body + n, st->len - n);
		} else {
			stream_end(c, st, WF_GRPC_RESOURCE_EXHAUSTED, "out of memory");
			return;
		}
		st->len -= n;
		c->receiving -= n;
		queue_call(c, st, st->sm, base, body, n);
	}
}

void dispatch_call(conn *c, stream *st)
{
	wf_grpc *g = c->g;
	if (st->sm) { /* the client half-closed a stream */
		st->half_closed = 1;
		if (st->len)
			stream_end(c, st, WF_GRPC_INVALID_ARGUMENT,
				   "the stream ends inside a message");
		stream_kick(c, st);
		return;
	}
	const wf_grpc_method *m = st->bad_header ? NULL : find_method(g, st->path);
	if (refuse_request(c, st, m))
		return;
	if (m->quick) {
		run_inline(c, st, m);
		return;
	}
	/* the call owns the body from now on */
	uint8_t *base = st->base, *body = st->body;
	size_t len = st->len;
	c->receiving -= len;
	st->body = st->base = NULL;
	st->len = st->cap = 0;
	queue_call(c, st, m, base, body, len);
}
