/* grpc_h2.c: gRPC's HTTP/2 transport on the loop thread: replies (headers,
 * DATA, trailers; a streaming call's replies as they come), connections and their pending output,
 * and the nghttp2 callbacks that collect a stream's headers and body. */
#include "serve/grpc_internal.h"

#include "serve/secrets.h"

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

/* ---- streaming calls (loop thread) -------------------------------------- */

static int stream_done(const stream *st)
{
	return st->ending || (st->half_closed && st->calls == 0);
}

/* The replies queued so far, then (once the stream is done) its trailers;
 * deferred while it waits for more. */
static ssize_t read_stream(nghttp2_session *s, int32_t id, uint8_t *buf, size_t length,
			   uint32_t *flags, nghttp2_data_source *src, void *user)
{
	stream *st = src->ptr;
	size_t left = st->out_len - st->out_off;
	if (left == 0) {
		if (!stream_done(st))
			return NGHTTP2_ERR_DEFERRED;
		*flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
		char cs[16], pm[2048];
		snprintf(cs, sizeof(cs), "%d", st->ending ? st->end_code : WF_GRPC_OK);
		pct_encode(st->ending ? st->end_msg : "", pm, sizeof(pm));
		nghttp2_nv tr[] = {NV("grpc-status", cs), NV("grpc-message", pm)};
		if (nghttp2_submit_trailer(s, id, tr, st->ending ? 2 : 1) != 0)
			return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
		return 0;
	}
	size_t n = left < length ? left : length;
	memcpy(buf, st->out + st->out_off, n);
	st->out_off += n;
	return (ssize_t)n;
}

void stream_kick(conn *c, stream *st)
{
	if (st->started) {
		nghttp2_session_resume_data(c->s, st->id); /* fails when not deferred: fine */
		return;
	}
	if (st->answered || (st->out_off == st->out_len && !stream_done(st)))
		return;
	st->started = st->answered = 1;
	nghttp2_nv h[] = {NV(":status", "200"), NV("content-type", "application/grpc"),
			  NV("grpc-accept-encoding", "identity,deflate,gzip")};
	nghttp2_data_provider dp = {.source.ptr = st, .read_callback = read_stream};
	if (nghttp2_submit_response(c->s, st->id, h, WF_ARRAY_LEN(h), &dp) != 0)
		nghttp2_submit_rst_stream(c->s, NGHTTP2_FLAG_NONE, st->id, NGHTTP2_INTERNAL_ERROR);
}

void stream_end(conn *c, stream *st, int code, const char *msg)
{
	if (!stream_live(st))
		return;
	if (!st->started && st->out_off == st->out_len) {
		answer_error(c, st, code, msg); /* nothing sent yet: trailers only */
		return;
	}
	st->ending = 1;
	st->end_code = code;
	snprintf(st->end_msg, sizeof(st->end_msg), "%s", msg ? msg : "");
	stream_kick(c, st);
}

void stream_answer(conn *c, stream *st, wf_grpc_call *call, int code)
{
	st->calls--;
	if (!stream_live(st))
		return;
	code = st->sm->stream_reply(call, code);
	if (code != WF_GRPC_OK || !call->reply) {
		stream_end(c, st, code == WF_GRPC_OK ? WF_GRPC_INTERNAL : code, call->message);
		return;
	}
	size_t n = PREFIX + call->reply_len;
	if (st->out_off == st->out_len)
		st->out_off = st->out_len = 0;
	/* a client that sends and never reads would have replies pile up */
	if (st->out_len - st->out_off + n > c->g->o.max_message + PREFIX) {
		stream_end(c, st, WF_GRPC_RESOURCE_EXHAUSTED,
			   "the client does not read the stream's replies");
		return;
	}
	if (st->out_len + n > st->out_cap) {
		size_t ncap = (st->out_len + n) * 2;
		uint8_t *p = realloc(st->out, ncap);
		if (!p) {
			stream_end(c, st, WF_GRPC_RESOURCE_EXHAUSTED, "out of memory");
			return;
		}
		st->out = p;
		st->out_cap = ncap;
	}
	uint8_t *o = st->out + st->out_len;
	o[0] = 0;
	o[1] = (uint8_t)(call->reply_len >> 24);
	o[2] = (uint8_t)(call->reply_len >> 16);
	o[3] = (uint8_t)(call->reply_len >> 8);
	o[4] = (uint8_t)call->reply_len;
	memcpy(o + PREFIX, call->reply + PREFIX, call->reply_len);
	st->out_len += n;
	stream_kick(c, st);
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
	WF_LIST_UNLINK(c->streams, st);
	c->receiving -= st->len;
	atomic_fetch_sub(&c->g->inflight, 1);
	free(st->base);
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
	wf_tls_conn_free(c->tls);
	c->tls = NULL;
	close(c->fd);
	nghttp2_session_del(c->s);
	c->s = NULL;
	while (c->streams)
		stream_free(c, c->streams);
	WF_LIST_UNLINK(g->conns, c);
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
ssize_t conn_recv(conn *c, void *buf, size_t n)
{
	return c->tls ? wf_tls_recv(c->tls, buf, n) : recv(c->fd, buf, n, 0);
}

ssize_t conn_send(conn *c, const void *buf, size_t n)
{
	return c->tls ? wf_tls_send(c->tls, buf, n) : send(c->fd, buf, n, MSG_NOSIGNAL);
}

/* epoll interest in reading, and in writing when blocked. */
static void conn_want(conn *c, int write)
{
	uint32_t ev = EPOLLIN | (write ? EPOLLOUT : 0);
	if (ev != c->events) {
		struct epoll_event e = {.events = ev, .data.ptr = c};
		epoll_ctl(c->g->epfd, EPOLL_CTL_MOD, c->fd, &e);
		c->events = ev;
	}
}

/* One step of the TLS handshake; -1 when it failed. */
static int handshake(conn *c)
{
	char why[160];
	int want_write = 0, r = wf_tls_handshake(c->tls, &want_write, why, sizeof(why));
	if (r < 0) {
		wf_debug("%s: closing a connection: %s", c->g->o.name, why);
		return -1;
	}
	if (r == 0) {
		conn_want(c, want_write);
		return 0;
	}
	c->handshaking = 0;
	return 0;
}

int conn_flush(conn *c)
{
	if (c->handshaking) { /* TLS first: HTTP/2 only once it is done */
		if (handshake(c) != 0)
			return -1;
		if (c->handshaking)
			return 0;
	}
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
		ssize_t w = conn_send(c, c->pend + c->pend_off, c->pend_len - c->pend_off);
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
	conn_want(c, blocked);
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
	} else if (hdr_is(name, nlen, "authorization")) {
		st->authorized =
			wf_serve_bearer_ok(((conn *)user)->g->o.token, (const char *)value, vlen);
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
	if (!st || !stream_live(st))
		return 0;
	/* a stream's buffer holds the rest of one message and one DATA frame */
	size_t max = g->o.max_message + PREFIX + (st->sm ? FRAME_MAX : 0);
	/* A compressed message may be much smaller than max; its inflated size is
	 * checked in wf_grpc_unframe. Streams being received on one connection
	 * share a budget of a few messages. */
	if (st->len + len > max || c->receiving + len > 4 * max + (16u << 20)) {
		char m[160];
		snprintf(m, sizeof(m), "grpc: received message larger than max (%zu vs. %zu)",
			 st->len + len - PREFIX, g->o.max_message);
		c->receiving -= st->len;
		free(st->base);
		st->body = st->base = NULL;
		st->len = st->cap = 0;
		stream_end(c, st, WF_GRPC_RESOURCE_EXHAUSTED,
			   m); /* a stream's replies so far go first */
		return 0;
	}
	if (st->len + len > st->cap) {
		size_t ncap = st->cap ? st->cap : 4096;
		while (ncap < st->len + len)
			ncap *= 2;
		size_t pad = st->pad;
		/* The message's size is in its prefix: reserve it whole rather
		 * than double and copy, up to 64 times what has arrived (a
		 * prefix alone must not reserve megabytes). The message ends
		 * 64-byte aligned: serializers write fields in number order, so
		 * a large bytes field at its end (KServe's raw_input_contents,
		 * TF's tensor_content) starts aligned and is read in place. */
		if (st->len + len >= PREFIX) {
			uint8_t p[PREFIX];
			for (size_t i = 0; i < PREFIX; i++)
				p[i] = i < st->len ? st->body[i] : data[i - st->len];
			size_t whole = PREFIX + ((size_t)p[1] << 24 | (size_t)p[2] << 16 |
						 (size_t)p[3] << 8 | p[4]);
			if (!st->base)
				pad = (64 - whole % 64) % 64;
			whole = WF_MIN(whole, 64 * (st->len + len));
			if (whole > ncap)
				ncap = whole;
		}
		if (ncap > max)
			ncap = max;
		uint8_t *b = realloc(st->base, pad + ncap);
		if (!b) {
			stream_end(c, st, WF_GRPC_RESOURCE_EXHAUSTED, "out of memory");
			return 0;
		}
		st->base = b;
		st->pad = pad;
		st->body = b + pad;
		st->cap = ncap;
	}
	memcpy(st->body + st->len, data, len);
	st->len += len;
	c->receiving += len;
	if (st->sm)
		stream_take(c, st);
	return 0;
}

int on_frame_recv(nghttp2_session *s, const nghttp2_frame *f, void *user)
{
	conn *c = user;
	c->frames++;
	if (f->hd.type != NGHTTP2_DATA && f->hd.type != NGHTTP2_HEADERS)
		return 0;
	stream *st = nghttp2_session_get_stream_user_data(s, f->hd.stream_id);
	if (!st)
		return 0;
	if (f->hd.type == NGHTTP2_HEADERS && f->headers.cat == NGHTTP2_HCAT_REQUEST) {
		/* a call without the token is refused before its message arrives */
		if (!refuse_unauthorized(c, st))
			stream_begin(c, st);
	}
	if (f->hd.flags & NGHTTP2_FLAG_END_STREAM)
		dispatch_call(c, st);
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
