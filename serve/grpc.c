/* grpc.c: unary gRPC over h2c with libnghttp2. The event-loop thread owns
 * every connection, session and stream; workers only see jobs (a copy of the
 * request message, the stream id and a counted reference to the connection)
 * and hand results back through a list and an eventfd. A stream that the
 * client reset or a connection that closed before its reply simply drops the
 * result. */
#include "serve/grpc.h"

#include "common/log.h"
#include "common/util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <nghttp2/nghttp2.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zlib.h>

#define PREFIX	     5	       /* compressed flag + 4-byte big-endian length */
#define READ_CHUNK   65536     /* bytes read per recv */
#define READ_BUDGET  (1 << 20) /* bytes read from one connection per wake-up */
#define STREAM_WIN   (1 << 20) /* HTTP/2 initial window per stream */
#define CONN_WIN     (1 << 24) /* HTTP/2 window per connection */
#define MAX_PATH_LEN 256
#define GATHER	     (256 << 10) /* bytes of frames gathered into one send */
#define HELLO_SECS   10	 /* a connection must send the HTTP/2 preface and SETTINGS by then */
#define IDLE_SECS    300 /* a connection without streams for this long gets GOAWAY */

typedef struct conn conn;

typedef struct stream {
	int32_t id;
	char path[MAX_PATH_LEN];
	char encoding[32];
	double timeout;	   /* seconds from grpc-timeout; 0: none */
	double t_begin;	   /* wf_now() at its first header */
	int post, grpc_ct; /* :method POST, content-type application/grpc* */
	int bad_header;	   /* a header we read was too long */
	uint8_t *body;	   /* DATA received so far */
	size_t len, cap;
	int answered; /* a response was submitted */
	uint8_t *out; /* reply: prefix + message */
	size_t out_len, out_off;
	struct stream *prev, *next;
} stream;

struct conn {
	wf_grpc *g;
	int fd;
	nghttp2_session *s;
	int refs;	  /* the loop's own + one per job in flight */
	int closed;	  /* socket closed, session deleted */
	size_t receiving; /* bytes held in stream bodies */
	uint8_t *pend;	  /* bytes nghttp2 produced that the socket did not take yet */
	size_t pend_len, pend_off, pend_cap;
	uint32_t events;	 /* registered epoll events */
	double t_open, t_active; /* wf_now() at accept, at the last bytes read */
	long frames;		 /* frames received */
	int dirty;		 /* in deliver's list of connections to flush */
	conn *dirty_next;
	stream *streams;
	conn *prev, *next;
};

typedef struct job {
	conn *c;
	int32_t stream_id;
	const wf_grpc_method *m;
	wf_grpc_call call;
	uint8_t *msg; /* owned copy of call.msg */
	int code;
	struct job *next;
} job;

struct wf_grpc {
	wf_grpc_opts o;
	const wf_grpc_method *methods;
	int nmethods;
	void *ctx;
	int lfd, efd, epfd, port;
	pthread_t loop;
	int loop_started;
	nghttp2_session_callbacks *cbs;
	nghttp2_option *opt;
	conn *conns;
	conn *dead; /* closed, unreferenced, freed after this wake-up */
	int nconns;
	atomic_int stop;
	atomic_int inflight; /* streams open: being received, handled or answered */
	/* workers */
	pthread_mutex_t mu;
	pthread_cond_t more;
	job *q_head, *q_tail; /* waiting for a worker */
	int queued;
	job *done; /* finished, for the loop */
	pthread_t *workers;
	int nworkers;
};

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
	z_stream z = {0};
	if (inflateInit2(&z, gzip ? 16 + MAX_WBITS : MAX_WBITS) != Z_OK) {
		snprintf(why, cap, "cannot start decompression");
		return WF_GRPC_INTERNAL;
	}
	size_t bcap = n * 4 + 64 < max + 1 ? n * 4 + 64 : max + 1, len = 0;
	uint8_t *buf = malloc(bcap);
	int zr = Z_OK, code = WF_GRPC_OK;
	z.next_in = (Bytef *)in;
	z.avail_in = (uInt)n;
	while (buf && zr != Z_STREAM_END) {
		if (len == bcap) {
			if (bcap > max) {
				snprintf(why, cap,
					 "grpc: received message after decompression larger than "
					 "max (%zu)",
					 max);
				code = WF_GRPC_RESOURCE_EXHAUSTED;
				break;
			}
			size_t ncap = bcap * 2 < max + 1 ? bcap * 2 : max + 1;
			uint8_t *nb = realloc(buf, ncap);
			if (!nb)
				break;
			buf = nb;
			bcap = ncap;
		}
		z.next_out = buf + len;
		z.avail_out = (uInt)(bcap - len);
		zr = inflate(&z, Z_NO_FLUSH);
		len = bcap - z.avail_out;
		if (zr != Z_OK && zr != Z_STREAM_END && !(zr == Z_BUF_ERROR && len == bcap)) {
			snprintf(why, cap, "the %s-compressed message is corrupt",
				 gzip ? "gzip" : "deflate");
			code = WF_GRPC_INVALID_ARGUMENT;
			break;
		}
		if (zr == Z_OK && z.avail_in == 0 && len < bcap) {
			snprintf(why, cap, "the %s-compressed message is truncated",
				 gzip ? "gzip" : "deflate");
			code = WF_GRPC_INVALID_ARGUMENT;
			break;
		}
	}
	inflateEnd(&z);
	if (!buf) {
		snprintf(why, cap, "out of memory");
		return WF_GRPC_RESOURCE_EXHAUSTED;
	}
	if (code == WF_GRPC_OK && len > max) {
		snprintf(why, cap,
			 "grpc: received message after decompression larger than max (%zu)", max);
		code = WF_GRPC_RESOURCE_EXHAUSTED;
	}
	if (code != WF_GRPC_OK) {
		free(buf);
		return code;
	}
	*out = buf;
	*out_len = len;
	return WF_GRPC_OK;
}

int wf_grpc_unframe(const uint8_t *body, size_t len, const char *encoding, size_t max,
		    uint8_t **msg, size_t *msg_len, char *why, size_t why_cap)
{
	*msg = NULL;
	*msg_len = 0;
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
		return inflate_msg(body + PREFIX, n, !strcmp(encoding, "gzip"), max, msg, msg_len,
				   why, why_cap);
	}
	if (n) {
		*msg = malloc(n);
		if (!*msg) {
			snprintf(why, why_cap, "out of memory");
			return WF_GRPC_RESOURCE_EXHAUSTED;
		}
		memcpy(*msg, body + PREFIX, n);
	}
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

/* ---- responses (loop thread) ------------------------------------------ */

#define NV(n, v)                                                                                   \
	{                                                                                          \
		(uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, strlen(v), NGHTTP2_NV_FLAG_NONE     \
	}

static ssize_t read_reply(nghttp2_session *s, int32_t id, uint8_t *buf, size_t length,
			  uint32_t *flags, nghttp2_data_source *src, void *user)
{
	stream *st = src->ptr;
	size_t left = st->out_len - st->out_off;
	size_t n = left < length ? left : length;
	memcpy(buf, st->out + st->out_off, n);
	st->out_off += n;
	if (st->out_off == st->out_len) {
		*flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
		nghttp2_nv tr[] = {NV("grpc-status", "0")};
		if (nghttp2_submit_trailer(s, id, tr, WF_ARRAY_LEN(tr)) != 0)
			return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
	}
	return (ssize_t)n;
}

/* A trailers-only response: status and message in the one HEADERS frame. */
void answer_error(conn *c, stream *st, int code, const char *msg)
{
	char cs[16], pm[2048];
	if (st->answered)
		return;
	st->answered = 1;
	snprintf(cs, sizeof(cs), "%d", code);
	pct_encode(msg ? msg : "", pm, sizeof(pm));
	nghttp2_nv h[] = {NV(":status", "200"), NV("content-type", "application/grpc"),
			  NV("grpc-status", cs), NV("grpc-message", pm)};
	nghttp2_submit_response(c->s, st->id, h, WF_ARRAY_LEN(h), NULL);
}

void answer_http(conn *c, stream *st, const char *status)
{
	if (st->answered)
		return;
	st->answered = 1;
	nghttp2_nv h[] = {NV(":status", status)};
	nghttp2_submit_response(c->s, st->id, h, WF_ARRAY_LEN(h), NULL);
}

/* Takes ownership of reply (prefix + len bytes). */
void answer_ok(conn *c, stream *st, uint8_t *reply, size_t len)
{
	if (st->answered) {
		free(reply);
		return;
	}
	st->answered = 1;
	reply[0] = 0;
	reply[1] = (uint8_t)(len >> 24);
	reply[2] = (uint8_t)(len >> 16);
	reply[3] = (uint8_t)(len >> 8);
	reply[4] = (uint8_t)len;
	st->out = reply;
	st->out_len = len + PREFIX;
	st->out_off = 0;
	nghttp2_nv h[] = {NV(":status", "200"), NV("content-type", "application/grpc"),
			  NV("grpc-accept-encoding", "identity,deflate,gzip")};
	nghttp2_data_provider dp = {.source.ptr = st, .read_callback = read_reply};
	if (nghttp2_submit_response(c->s, st->id, h, WF_ARRAY_LEN(h), &dp) != 0)
		nghttp2_submit_rst_stream(c->s, NGHTTP2_FLAG_NONE, st->id, NGHTTP2_INTERNAL_ERROR);
}

/* ---- connections (loop thread) ---------------------------------------- */

/* The last reference parks a closed connection for loop_main to free after
 * the events of this wake-up, which may still name it. */
void conn_unref(conn *c)
{
	if (--c->refs > 0)
		return;
	c->next = c->g->dead;
	c->g->dead = c;
}

void free_dead(wf_grpc *g)
{
	while (g->dead) {
		conn *c = g->dead;
		g->dead = c->next;
		free(c->pend);
		free(c);
	}
}

static void stream_free(conn *c, stream *st)
{
	if (st->prev)
		st->prev->next = st->next;
	else
		c->streams = st->next;
	if (st->next)
		st->next->prev = st->prev;
	c->receiving -= st->len;
	atomic_fetch_sub(&c->g->inflight, 1);
	free(st->body);
	free(st->out);
	free(st);
}

void conn_close(conn *c)
{
	wf_grpc *g = c->g;
	if (c->closed)
		return;
	c->closed = 1;
	epoll_ctl(g->epfd, EPOLL_CTL_DEL, c->fd, NULL);
	close(c->fd);
	nghttp2_session_del(c->s);
	c->s = NULL;
	while (c->streams)
		stream_free(c, c->streams);
	if (c->prev)
		c->prev->next = c->next;
	else
		g->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	g->nconns--;
	conn_unref(c);
}

static int pend_append(conn *c, const uint8_t *d, size_t n)
{
	if (c->pend_off == c->pend_len)
		c->pend_off = c->pend_len = 0;
	if (c->pend_len + n > c->pend_cap) {
		size_t ncap = (c->pend_len + n) * 2;
		uint8_t *p = realloc(c->pend, ncap);
		if (!p)
			return -1;
		c->pend = p;
		c->pend_cap = ncap;
	}
	memcpy(c->pend + c->pend_len, d, n);
	c->pend_len += n;
	return 0;
}

/* Write what nghttp2 has to send until the socket would block, gathering
 * its frames into one send per GATHER bytes; keep the epoll interest in step.
 * Returns -1 when the connection must close. */
int conn_flush(conn *c)
{
	for (;;) {
		while (c->pend_len - c->pend_off < GATHER) {
			const uint8_t *d;
			ssize_t n = nghttp2_session_mem_send(c->s, &d);
			if (n < 0)
				return -1;
			if (n == 0)
				break;
			if (pend_append(c, d, (size_t)n) != 0)
				return -1;
		}
		if (c->pend_off == c->pend_len)
			break;
		ssize_t w =
			send(c->fd, c->pend + c->pend_off, c->pend_len - c->pend_off, MSG_NOSIGNAL);
		if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			break;
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return -1;
		c->pend_off += (size_t)w;
	}
	int blocked = c->pend_off < c->pend_len;
	if (!blocked && !nghttp2_session_want_read(c->s) && !nghttp2_session_want_write(c->s))
		return -1;
	uint32_t ev = EPOLLIN | (blocked ? EPOLLOUT : 0);
	if (ev != c->events) {
		struct epoll_event e = {.events = ev, .data.ptr = c};
		epoll_ctl(c->g->epfd, EPOLL_CTL_MOD, c->fd, &e);
		c->events = ev;
	}
	return 0;
}

/* ---- nghttp2 callbacks ------------------------------------------------- */

int on_begin_headers(nghttp2_session *s, const nghttp2_frame *f, void *user)
{
	conn *c = user;
	if (f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST)
		return 0;
	stream *st = calloc(1, sizeof(*st));
	if (!st)
		return NGHTTP2_ERR_CALLBACK_FAILURE;
	st->id = f->hd.stream_id;
	st->t_begin = wf_now();
	atomic_fetch_add(&c->g->inflight, 1);
	st->next = c->streams;
	if (c->streams)
		c->streams->prev = st;
	c->streams = st;
	nghttp2_session_set_stream_user_data(s, st->id, st);
	return 0;
}

static int hdr_is(const uint8_t *name, size_t n, const char *want)
{
	return n == strlen(want) && memcmp(name, want, n) == 0;
}

static void hdr_copy(char *dst, size_t cap, const uint8_t *v, size_t n, int *bad)
{
	if (n >= cap) {
		*bad = 1;
		n = cap - 1;
	}
	memcpy(dst, v, n);
	dst[n] = 0;
}

int on_header(nghttp2_session *s, const nghttp2_frame *f, const uint8_t *name, size_t nlen,
	      const uint8_t *value, size_t vlen, uint8_t flags, void *user)
{
	if (f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST)
		return 0;
	stream *st = nghttp2_session_get_stream_user_data(s, f->hd.stream_id);
	if (!st)
		return 0;
	if (hdr_is(name, nlen, ":path")) {
		hdr_copy(st->path, sizeof(st->path), value, vlen, &st->bad_header);
	} else if (hdr_is(name, nlen, ":method")) {
		st->post = vlen == 4 && memcmp(value, "POST", 4) == 0;
	} else if (hdr_is(name, nlen, "content-type")) {
		st->grpc_ct = vlen >= 16 && memcmp(value, "application/grpc", 16) == 0 &&
			      (vlen == 16 || value[16] == '+' || value[16] == ';');
	} else if (hdr_is(name, nlen, "grpc-encoding")) {
		hdr_copy(st->encoding, sizeof(st->encoding), value, vlen, &st->bad_header);
	} else if (hdr_is(name, nlen, "grpc-timeout")) {
		char t[16];
		int bad = 0;
		hdr_copy(t, sizeof(t), value, vlen, &bad);
		double x = bad ? -1 : wf_grpc_parse_timeout(t);
		st->timeout = x > 0 ? x : 0;
	}
	return 0;
}

int on_data(nghttp2_session *s, uint8_t flags, int32_t id, const uint8_t *data, size_t len,
	    void *user)
{
	conn *c = user;
	wf_grpc *g = c->g;
	stream *st = nghttp2_session_get_stream_user_data(s, id);
	if (!st || st->answered)
		return 0;
	size_t max = g->o.max_message + PREFIX;
	/* A compressed message may be much smaller than max; its inflated size is
	 * checked in wf_grpc_unframe. Streams being received on one connection
	 * share a budget of a few messages. */
	if (st->len + len > max || c->receiving + len > 4 * max + (16u << 20)) {
		char m[160];
		snprintf(m, sizeof(m), "grpc: received message larger than max (%zu vs. %zu)",
			 st->len + len - PREFIX, g->o.max_message);
		c->receiving -= st->len;
		free(st->body);
		st->body = NULL;
		st->len = st->cap = 0;
		answer_error(c, st, WF_GRPC_RESOURCE_EXHAUSTED, m);
		return 0;
	}
	if (st->len + len > st->cap) {
		size_t ncap = st->cap ? st->cap : 4096;
		while (ncap < st->len + len)
			ncap *= 2;
		if (ncap > max)
			ncap = max;
		uint8_t *b = realloc(st->body, ncap);
		if (!b) {
			answer_error(c, st, WF_GRPC_RESOURCE_EXHAUSTED, "out of memory");
			return 0;
		}
		st->body = b;
		st->cap = ncap;
	}
	memcpy(st->body + st->len, data, len);
	st->len += len;
	c->receiving += len;
	return 0;
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
	uint8_t *msg = NULL;
	char why[512];
	int code = wf_grpc_unframe(st->body, st->len, st->encoding, g->o.max_message, &msg,
				   &call.len, why, sizeof(why));
	c->receiving -= st->len;
	free(st->body);
	st->body = NULL;
	st->len = st->cap = 0;
	if (code != WF_GRPC_OK) {
		answer_error(c, st, code, why);
		return;
	}
	call.msg = msg;
	call.t_begin = st->t_begin;
	call.deadline = st->timeout > 0 ? st->t_begin + st->timeout : 0;
	code = m->fn(g->ctx, &call);
	if (code == WF_GRPC_OK && call.reply) {
		answer_ok(c, st, call.reply, call.reply_len);
		call.reply = NULL;
	} else {
		answer_error(c, st, code == WF_GRPC_OK ? WF_GRPC_INTERNAL : code, call.message);
	}
	free(call.reply);
	free(msg);
}

/* The request is complete: answer what is wrong with it, or queue a job. */
void dispatch_call(conn *c, stream *st)
{
	wf_grpc *g = c->g;
	char why[512];
	if (st->answered)
		return;
	if (!st->post) {
		answer_http(c, st, "405");
		return;
	}
	if (!st->grpc_ct) {
		answer_http(c, st, "415");
		return;
	}
	const wf_grpc_method *m = st->bad_header ? NULL : find_method(g, st->path);
	if (!m) {
		snprintf(why, sizeof(why), "Method not found: %.200s",
			 st->path[0] == '/' ? st->path + 1 : st->path);
		answer_error(c, st, WF_GRPC_UNIMPLEMENTED, why);
		return;
	}
	if (atomic_load(&g->stop)) {
		answer_error(c, st, WF_GRPC_UNAVAILABLE, "the server is shutting down");
		return;
	}
	if (m->quick) {
		run_inline(c, st, m);
		return;
	}
	job *j = calloc(1, sizeof(*j));
	if (!j) {
		answer_error(c, st, WF_GRPC_RESOURCE_EXHAUSTED, "out of memory");
		return;
	}
	int code = wf_grpc_unframe(st->body, st->len, st->encoding, g->o.max_message, &j->msg,
				   &j->call.len, why, sizeof(why));
	c->receiving -= st->len;
	free(st->body);
	st->body = NULL;
	st->len = st->cap = 0;
	if (code != WF_GRPC_OK) {
		free(j);
		answer_error(c, st, code, why);
		return;
	}
	j->c = c;
	j->stream_id = st->id;
	j->m = m;
	j->call.msg = j->msg;
	j->call.deadline = st->timeout > 0 ? st->t_begin + st->timeout : 0;
	j->call.t_begin = st->t_begin;
	pthread_mutex_lock(&g->mu);
	if (g->queued >= g->o.max_queue) {
		pthread_mutex_unlock(&g->mu);
		free(j->msg);
		free(j);
		snprintf(why, sizeof(why),
			 "%d calls are waiting for a worker (the limit); retry later",
			 g->o.max_queue);
		answer_error(c, st, WF_GRPC_RESOURCE_EXHAUSTED, why);
		return;
	}
	c->refs++;
	if (g->q_tail)
		g->q_tail->next = j;
	else
		g->q_head = j;
	g->q_tail = j;
	g->queued++;
	pthread_cond_signal(&g->more);
	pthread_mutex_unlock(&g->mu);
}

int on_frame_recv(nghttp2_session *s, const nghttp2_frame *f, void *user)
{
	conn *c = user;
	c->frames++;
	if ((f->hd.type == NGHTTP2_DATA || f->hd.type == NGHTTP2_HEADERS) &&
	    (f->hd.flags & NGHTTP2_FLAG_END_STREAM)) {
		stream *st = nghttp2_session_get_stream_user_data(s, f->hd.stream_id);
		if (st)
			dispatch_call(c, st);
	}
	return 0;
}

int on_stream_close(nghttp2_session *s, int32_t id, uint32_t code, void *user)
{
	conn *c = user;
	stream *st = nghttp2_session_get_stream_user_data(s, id);
	if (st) {
		nghttp2_session_set_stream_user_data(s, id, NULL);
		stream_free(c, st);
	}
	return 0;
}

/* ---- the event loop ----------------------------------------------------- */

static void accept_all(wf_grpc *g)
{
	for (;;) {
		int fd = accept4(g->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0)
			return;
		if (g->nconns >= g->o.max_conns) {
			wf_warn("%s: %d connections open (the limit); closing a new one", g->o.name,
				g->nconns);
			close(fd);
			continue;
		}
		int one = 1;
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		conn *c = calloc(1, sizeof(*c));
		if (!c) {
			close(fd);
			continue;
		}
		c->g = g;
		c->fd = fd;
		c->refs = 1;
		c->t_open = c->t_active = wf_now();
		if (nghttp2_session_server_new2(&c->s, g->cbs, c, g->opt) != 0) {
			close(fd);
			free(c);
			continue;
		}
		nghttp2_settings_entry iv[] = {
			{NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, (uint32_t)g->o.max_streams},
			{NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, STREAM_WIN},
			{NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, 16384},
		};
		nghttp2_submit_settings(c->s, NGHTTP2_FLAG_NONE, iv, WF_ARRAY_LEN(iv));
		nghttp2_session_set_local_window_size(c->s, NGHTTP2_FLAG_NONE, 0, CONN_WIN);
		c->next = g->conns;
		if (g->conns)
			g->conns->prev = c;
		g->conns = c;
		g->nconns++;
		c->events = EPOLLIN;
		struct epoll_event e = {.events = EPOLLIN, .data.ptr = c};
		epoll_ctl(g->epfd, EPOLL_CTL_ADD, fd, &e);
		if (conn_flush(c) != 0)
			conn_close(c);
	}
}

static void conn_readable(conn *c)
{
	uint8_t buf[READ_CHUNK];
	size_t got = 0;
	while (got < READ_BUDGET) {
		ssize_t n = recv(c->fd, buf, sizeof(buf), 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			break;
		if (n <= 0) {
			conn_close(c);
			return;
		}
		got += (size_t)n;
		c->t_active = wf_now();
		ssize_t r = nghttp2_session_mem_recv(c->s, buf, (size_t)n);
		if (r < 0) {
			wf_debug("%s: closing a connection: %s", c->g->o.name,
				 nghttp2_strerror((int)r));
			conn_flush(c); /* GOAWAY, where nghttp2 queued one */
			conn_close(c);
			return;
		}
	}
	if (conn_flush(c) != 0)
		conn_close(c);
}

/* Replies the workers finished: submit those whose stream is still open. */
static void deliver(wf_grpc *g)
{
	uint64_t v;
	if (read(g->efd, &v, sizeof(v)) < 0) {
		/* nothing to read: another wake-up took it */
	}
	pthread_mutex_lock(&g->mu);
	job *list = g->done;
	g->done = NULL;
	pthread_mutex_unlock(&g->mu);
	/* The list is newest first; answer oldest first. */
	job *rev = NULL;
	while (list) {
		job *n = list->next;
		list->next = rev;
		rev = list;
		list = n;
	}
	conn *dirty = NULL; /* connections with answers to send, each flushed once */
	for (job *j = rev, *n; j; j = n) {
		n = j->next;
		conn *c = j->c;
		stream *st =
			c->closed ? NULL : nghttp2_session_get_stream_user_data(c->s, j->stream_id);
		if (st) {
			if (j->code == WF_GRPC_OK && j->call.reply) {
				answer_ok(c, st, j->call.reply, j->call.reply_len);
				j->call.reply = NULL;
			} else {
				answer_error(c, st,
					     j->code == WF_GRPC_OK ? WF_GRPC_INTERNAL : j->code,
					     j->call.message);
			}
			if (!c->dirty) {
				c->dirty = 1;
				c->refs++;
				c->dirty_next = dirty;
				dirty = c;
			}
		}
		conn_unref(c);
		free(j->call.reply);
		free(j->msg);
		free(j);
	}
	for (conn *c = dirty, *n; c; c = n) {
		n = c->dirty_next;
		c->dirty = 0;
		if (!c->closed && conn_flush(c) != 0)
			conn_close(c);
		conn_unref(c);
	}
}

/* Close connections that never spoke HTTP/2 (a stalled or hostile client
 * holds a connection slot) and send GOAWAY on long-idle ones (gRPC clients
 * reconnect when they next call). */
static void sweep(wf_grpc *g)
{
	double now = wf_now();
	for (conn *c = g->conns, *n; c; c = n) {
		n = c->next;
		if (!c->frames && now - c->t_open > HELLO_SECS) {
			wf_debug("%s: closing a connection that sent no HTTP/2 frame in %ds",
				 g->o.name, HELLO_SECS);
			conn_close(c);
		} else if (!c->streams && c->refs == 1 && now - c->t_active > IDLE_SECS) {
			nghttp2_session_terminate_session(c->s, NGHTTP2_NO_ERROR);
			c->t_active = now;
			if (conn_flush(c) != 0)
				conn_close(c);
		}
	}
}

void *loop_main(void *arg)
{
	wf_grpc *g = arg;
	struct epoll_event ev[64];
	double last_sweep = wf_now();
	while (!atomic_load(&g->stop)) {
		int n = epoll_wait(g->epfd, ev, (int)WF_ARRAY_LEN(ev), 1000);
		for (int i = 0; i < n; i++) {
			void *p = ev[i].data.ptr;
			if (p == &g->lfd) {
				accept_all(g);
			} else if (p == &g->efd) {
				deliver(g);
			} else {
				conn *c = p;
				/* A connection closed earlier in this batch is still in
				 * memory while a job holds it; skip it. */
				if (c->closed)
					continue;
				if (ev[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR))
					conn_readable(c);
				else if (conn_flush(c) != 0)
					conn_close(c);
			}
		}
		if (wf_now() - last_sweep >= 1) {
			sweep(g);
			last_sweep = wf_now();
		}
		free_dead(g);
	}
	return NULL;
}

static void *worker_main(void *arg)
{
	wf_grpc *g = arg;
	pthread_mutex_lock(&g->mu);
	for (;;) {
		while (!g->q_head && !atomic_load(&g->stop))
			pthread_cond_wait(&g->more, &g->mu);
		if (atomic_load(&g->stop))
			break;
		job *j = g->q_head;
		g->q_head = j->next;
		if (!g->q_head)
			g->q_tail = NULL;
		g->queued--;
		pthread_mutex_unlock(&g->mu);
		j->next = NULL;
		if (j->call.deadline && wf_now() > j->call.deadline)
			j->code = wf_grpc_fail(&j->call, WF_GRPC_DEADLINE_EXCEEDED,
					       "Deadline Exceeded before the call started");
		else
			j->code = j->m->fn(g->ctx, &j->call);
		pthread_mutex_lock(&g->mu);
		j->next = g->done;
		g->done = j;
		uint64_t one = 1;
		if (write(g->efd, &one, sizeof(one)) < 0) {
			/* the counter is saturated: the loop wakes anyway */
		}
	}
	pthread_mutex_unlock(&g->mu);
	return NULL;
}

/* ---- start and stop ----------------------------------------------------- */

int wf_grpc_start(wf_grpc **out, const wf_grpc_opts *o, const wf_grpc_method *methods, int nmethods,
		  void *ctx, wf_err *err)
{
	wf_grpc *g = calloc(1, sizeof(*g));
	int rc = 0;
	if (!g)
		return wf_errf(err, WF_ENOMEM, "out of memory");
	g->o = *o;
	if (!g->o.name)
		g->o.name = "gRPC";
	if (g->o.workers < 1)
		g->o.workers = 1;
	if (g->o.max_queue < 1)
		g->o.max_queue = 1;
	if (g->o.max_streams < 1)
		g->o.max_streams = 100;
	if (g->o.max_conns < 1)
		g->o.max_conns = 1024;
	g->methods = methods;
	g->nmethods = nmethods;
	g->ctx = ctx;
	g->lfd = g->efd = g->epfd = -1;
	pthread_mutex_init(&g->mu, NULL);
	pthread_cond_init(&g->more, NULL);
	atomic_init(&g->stop, 0);
	atomic_init(&g->inflight, 0);

	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)o->port)};
	if (inet_pton(AF_INET, o->bind_address ? o->bind_address : "0.0.0.0", &a.sin_addr) != 1) {
		rc = wf_errf(err, WF_EINVAL, "%s: bad bind address \"%s\"", g->o.name,
			     o->bind_address);
		goto fail;
	}
	g->lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	int one = 1;
	if (g->lfd >= 0)
		setsockopt(g->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (g->lfd < 0 || bind(g->lfd, (struct sockaddr *)&a, sizeof(a)) != 0 ||
	    listen(g->lfd, 1024) != 0) {
		rc = wf_errf(err, WF_EIO, "%s: cannot listen on %s:%d: %s", g->o.name,
			     o->bind_address, o->port, strerror(errno));
		goto fail;
	}
	socklen_t al = sizeof(a);
	getsockname(g->lfd, (struct sockaddr *)&a, &al);
	g->port = ntohs(a.sin_port);
	g->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	g->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (g->efd < 0 || g->epfd < 0) {
		rc = wf_errf(err, WF_EINTERNAL, "%s: eventfd/epoll: %s", g->o.name,
			     strerror(errno));
		goto fail;
	}
	struct epoll_event le = {.events = EPOLLIN, .data.ptr = &g->lfd};
	struct epoll_event ee = {.events = EPOLLIN, .data.ptr = &g->efd};
	epoll_ctl(g->epfd, EPOLL_CTL_ADD, g->lfd, &le);
	epoll_ctl(g->epfd, EPOLL_CTL_ADD, g->efd, &ee);

	if (nghttp2_session_callbacks_new(&g->cbs) != 0 || nghttp2_option_new(&g->opt) != 0) {
		rc = wf_errf(err, WF_ENOMEM, "out of memory");
		goto fail;
	}
	nghttp2_session_callbacks_set_on_begin_headers_callback(g->cbs, on_begin_headers);
	nghttp2_session_callbacks_set_on_header_callback(g->cbs, on_header);
	nghttp2_session_callbacks_set_on_data_chunk_recv_callback(g->cbs, on_data);
	nghttp2_session_callbacks_set_on_frame_recv_callback(g->cbs, on_frame_recv);
	nghttp2_session_callbacks_set_on_stream_close_callback(g->cbs, on_stream_close);
	nghttp2_option_set_max_deflate_dynamic_table_size(g->opt, 4096);

	g->workers = calloc((size_t)g->o.workers, sizeof(*g->workers));
	if (!g->workers) {
		rc = wf_errf(err, WF_ENOMEM, "out of memory");
		goto fail;
	}
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, 1 << 20);
	for (int i = 0; i < g->o.workers; i++) {
		if (pthread_create(&g->workers[i], &attr, worker_main, g) != 0) {
			pthread_attr_destroy(&attr);
			rc = wf_errf(err, WF_EINTERNAL, "%s: cannot start worker %d", g->o.name, i);
			goto fail;
		}
		g->nworkers++;
	}
	pthread_attr_destroy(&attr);
	if (pthread_create(&g->loop, NULL, loop_main, g) != 0) {
		rc = wf_errf(err, WF_EINTERNAL, "%s: cannot start the event loop", g->o.name);
		goto fail;
	}
	g->loop_started = 1;
	*out = g;
	return 0;
fail:
	wf_grpc_stop(g);
	return rc;
}

int wf_grpc_port(wf_grpc *g)
{
	return g ? g->port : 0;
}

int wf_grpc_inflight(wf_grpc *g)
{
	return g ? atomic_load(&g->inflight) : 0;
}

static void free_jobs(job *j)
{
	while (j) {
		job *n = j->next;
		free(j->call.reply);
		free(j->msg);
		free(j);
		j = n;
	}
}

void wf_grpc_stop(wf_grpc *g)
{
	if (!g)
		return;
	pthread_mutex_lock(&g->mu);
	atomic_store(&g->stop, 1);
	pthread_cond_broadcast(&g->more);
	pthread_mutex_unlock(&g->mu);
	for (int i = 0; i < g->nworkers; i++)
		pthread_join(g->workers[i], NULL);
	if (g->efd >= 0) {
		uint64_t one = 1;
		if (write(g->efd, &one, sizeof(one)) < 0) {
			/* the loop also wakes on its 1 s epoll timeout */
		}
	}
	if (g->loop_started)
		pthread_join(g->loop, NULL);
	/* Jobs still queued or done hold references to their connections:
	 * drop the jobs first, then close what is left. */
	job *all[2] = {g->q_head, g->done};
	for (int k = 0; k < 2; k++)
		for (job *j = all[k]; j; j = j->next)
			conn_unref(j->c);
	free_jobs(g->q_head);
	free_jobs(g->done);
	while (g->conns)
		conn_close(g->conns);
	free_dead(g);
	free(g->workers);
	if (g->cbs)
		nghttp2_session_callbacks_del(g->cbs);
	if (g->opt)
		nghttp2_option_del(g->opt);
	if (g->lfd >= 0)
		close(g->lfd);
	if (g->efd >= 0)
		close(g->efd);
	if (g->epfd >= 0)
		close(g->epfd);
	pthread_cond_destroy(&g->more);
	pthread_mutex_destroy(&g->mu);
	free(g);
}

/* ---- the fuzz target's session ------------------------------------------ */

/* The workers' part, in this thread, then the loop's. */
static void fuzz_work(wf_grpc *g)
{
	while (g->q_head) {
		job *j = g->q_head;
		g->q_head = j->next;
		if (!g->q_head)
			g->q_tail = NULL;
		g->queued--;
		j->code = j->m->fn(g->ctx, &j->call);
		j->next = g->done;
		g->done = j;
	}
	deliver(g);
}

int wf_grpc_fuzz_session(const wf_grpc_method *methods, int nmethods, void *ctx,
			 const uint8_t *data, size_t len)
{
	wf_grpc g = {.methods = methods, .nmethods = nmethods, .ctx = ctx, .lfd = -1};
	int sv[2] = {-1, -1}, rc = 0;
	g.o = (wf_grpc_opts){.name = "fuzz",
			     .max_message = 1 << 16,
			     .workers = 1,
			     .max_queue = 8,
			     .max_streams = 16,
			     .max_conns = 4};
	pthread_mutex_init(&g.mu, NULL);
	pthread_cond_init(&g.more, NULL);
	g.efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	g.epfd = epoll_create1(EPOLL_CLOEXEC);
	conn *c = calloc(1, sizeof(*c));
	if (g.efd < 0 || g.epfd < 0 || !c ||
	    socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) != 0 ||
	    nghttp2_session_callbacks_new(&g.cbs) != 0 || nghttp2_option_new(&g.opt) != 0) {
		free(c);
		rc = -1;
		goto out;
	}
	nghttp2_session_callbacks_set_on_begin_headers_callback(g.cbs, on_begin_headers);
	nghttp2_session_callbacks_set_on_header_callback(g.cbs, on_header);
	nghttp2_session_callbacks_set_on_data_chunk_recv_callback(g.cbs, on_data);
	nghttp2_session_callbacks_set_on_frame_recv_callback(g.cbs, on_frame_recv);
	nghttp2_session_callbacks_set_on_stream_close_callback(g.cbs, on_stream_close);
	c->g = &g;
	c->fd = sv[0];
	sv[0] = -1;
	c->refs = 1;
	if (nghttp2_session_server_new2(&c->s, g.cbs, c, g.opt) != 0) {
		close(c->fd);
		free(c);
		rc = -1;
		goto out;
	}
	g.conns = c;
	g.nconns = 1;
	c->events = EPOLLIN;
	struct epoll_event e = {.events = EPOLLIN, .data.ptr = c};
	epoll_ctl(g.epfd, EPOLL_CTL_ADD, c->fd, &e);
	nghttp2_settings_entry iv[] = {
		{NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, (uint32_t)g.o.max_streams}};
	nghttp2_submit_settings(c->s, NGHTTP2_FLAG_NONE, iv, WF_ARRAY_LEN(iv));
	/* in pieces of varying size, as a socket delivers them */
	for (size_t off = 0, step = 1; off < len && !c->closed; off += step, step = step * 3 + 1) {
		size_t n = step < len - off ? step : len - off;
		if (nghttp2_session_mem_recv(c->s, data + off, n) < 0) {
			conn_flush(c);
			conn_close(c);
			rc = -1;
			break;
		}
		fuzz_work(&g);
		if (!c->closed && conn_flush(c) != 0)
			conn_close(c);
	}
	fuzz_work(&g); /* calls queued before a protocol error */
	while (g.conns)
		conn_close(g.conns);
	free_dead(&g);
out:
	if (g.cbs)
		nghttp2_session_callbacks_del(g.cbs);
	if (g.opt)
		nghttp2_option_del(g.opt);
	for (int i = 0; i < 2; i++)
		if (sv[i] >= 0)
			close(sv[i]);
	if (g.efd >= 0)
		close(g.efd);
	if (g.epfd >= 0)
		close(g.epfd);
	pthread_cond_destroy(&g.more);
	pthread_mutex_destroy(&g.mu);
	return rc;
}
