/* elastic_wire.c: encode and parse the messages of elastic allreduce (see
 * elastic_wire.h). */
#include "worker/elastic_wire.h"

#include "worker/netio.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int wf_el_header_parse(const uint8_t h[WF_EL_HEADER], int *type, uint32_t *len)
{
	if (wf_net_get32(h) != WF_EL_MAGIC)
		return -1;
	uint32_t t = wf_net_get32(h + 4);
	*len = wf_net_get32(h + 8);
	if (t < WF_EL_HELLO || t > WF_EL_DONE || *len > WF_EL_MAX_BODY)
		return -1;
	*type = (int)t;
	return 0;
}

/* ---- reading a body ----------------------------------------------------- */

typedef struct reader {
	const uint8_t *p;
	size_t left;
	int bad;
} reader;

static const uint8_t *take(reader *r, size_t n)
{
	if (r->bad || n > r->left) {
		r->bad = 1;
		return NULL;
	}
	const uint8_t *p = r->p;
	r->p += n;
	r->left -= n;
	return p;
}

static uint32_t take32(reader *r)
{
	const uint8_t *p = take(r, 4);
	return p ? wf_net_get32(p) : 0;
}

static uint64_t take64(reader *r)
{
	const uint8_t *p = take(r, 8);
	return p ? wf_net_get64(p) : 0;
}

static void take_bytes(reader *r, uint8_t *out, size_t n)
{
	const uint8_t *p = take(r, n);
	if (p)
		memcpy(out, p, n);
}

/* A string of at most WF_EL_TEXT - 1 bytes, no NUL inside. */
static void take_text(reader *r, char out[WF_EL_TEXT])
{
	uint32_t n = take32(r);
	out[0] = '\0';
	if (n >= WF_EL_TEXT) {
		r->bad = 1;
		return;
	}
	const uint8_t *p = take(r, n);
	if (!p)
		return;
	if (memchr(p, '\0', n)) {
		r->bad = 1;
		return;
	}
	memcpy(out, p, n);
	out[n] = '\0';
}

static int fail(char *why, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static int fail(char *why, size_t n, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(why, n, fmt, ap);
	va_end(ap);
	return -1;
}

int wf_el_msg_parse(int type, const uint8_t *body, size_t len, wf_el_msg *m, char *why, size_t n)
{
	memset(m, 0, sizeof(*m));
	m->type = type;
	reader r = {body, len, 0};
	switch (type) {
	case WF_EL_HELLO: {
		uint32_t version = take32(&r);
		m->keyed = (int)take32(&r);
		m->slot = (int)take32(&r);
		m->job = take64(&r);
		take_bytes(&r, m->nonce, WF_EL_NONCE);
		take_text(&r, m->addr);
		m->gen = take64(&r);
		if (!r.bad && version != WF_EL_VERSION)
			return fail(why, n, "hello of version %u, this weft speaks %u", version,
				    WF_EL_VERSION);
		if (!r.bad && (m->keyed > 1 || m->slot < 0 || m->slot >= WF_EL_MAX_MEMBERS))
			return fail(why, n, "hello: slot %d or key flag %d out of range", m->slot,
				    m->keyed);
		break;
	}
	case WF_EL_CHALLENGE:
	case WF_EL_RING_REPLY:
		m->status = take32(&r);
		take_bytes(&r, m->nonce, WF_EL_NONCE);
		take_bytes(&r, m->mac, WF_EL_MAC);
		take_text(&r, m->text);
		break;
	case WF_EL_PROOF: take_bytes(&r, m->mac, WF_EL_MAC); break;
	case WF_EL_READY:
		m->gen = take64(&r);
		m->step = (int64_t)take64(&r);
		if (!r.bad && m->step < -1)
			return fail(why, n, "ready: step %lld", (long long)m->step);
		break;
	case WF_EL_LEAVE: break;
	case WF_EL_NOTICE: m->gen = take64(&r); break;
	case WF_EL_DONE:
		m->step = (int64_t)take64(&r);
		if (!r.bad && m->step < 0)
			return fail(why, n, "done: step %lld", (long long)m->step);
		break;
	case WF_EL_FAIL: take_text(&r, m->text); break;
	case WF_EL_RING_HELLO:
		m->job = take64(&r);
		m->gen = take64(&r);
		m->rank = (int)take32(&r);
		take_bytes(&r, m->nonce, WF_EL_NONCE);
		if (!r.bad && (m->rank < 0 || m->rank >= WF_EL_MAX_MEMBERS))
			return fail(why, n, "ring hello from rank %d", m->rank);
		break;
	case WF_EL_ASSIGN: {
		m->gen = take64(&r);
		m->rank = (int)take32(&r);
		m->size = (int)take32(&r);
		m->root = (int)take32(&r);
		m->step = (int64_t)take64(&r);
		if (r.bad)
			break;
		if (m->size < 1 || m->size > WF_EL_MAX_MEMBERS || m->rank < 0 ||
		    m->rank >= m->size || m->root < 0 || m->root >= m->size || m->step < -1)
			return fail(why, n, "assign: rank %d, root %d of %d, step %lld", m->rank,
				    m->root, m->size, (long long)m->step);
		/* each member takes at least 8 bytes: refuse a count the body cannot hold */
		if ((size_t)m->size * 8 > r.left)
			return fail(why, n, "assign: %d members in %zu bytes", m->size, r.left);
		m->members = calloc((size_t)m->size, sizeof(*m->members));
		if (!m->members)
			return fail(why, n, "assign: out of memory");
		m->nmembers = m->size;
		for (int i = 0; i < m->size && !r.bad; i++) {
			int slot = (int)take32(&r);
			m->members[i].slot = slot;
			take_text(&r, m->members[i].addr);
			if (!r.bad && (slot < 0 || slot >= WF_EL_MAX_MEMBERS)) {
				wf_el_msg_free(m);
				return fail(why, n, "assign: member %d has slot %d", i, slot);
			}
		}
		break;
	}
	default: return fail(why, n, "unknown message type %d", type);
	}
	if (r.bad) {
		wf_el_msg_free(m);
		return fail(why, n, "message of type %d cut short or with a bad string", type);
	}
	if (r.left != 0) {
		wf_el_msg_free(m);
		return fail(why, n, "message of type %d has %zu bytes too many", type, r.left);
	}
	return 0;
}

/* ---- writing a message -------------------------------------------------- */

typedef struct writer {
	uint8_t *p;
	size_t left;
	size_t done;
	int bad;
} writer;

static void put(writer *w, const void *src, size_t n)
{
	if (w->bad || n > w->left) {
		w->bad = 1;
		return;
	}
	if (n)
		memcpy(w->p, src, n);
	w->p += n;
	w->left -= n;
	w->done += n;
}

static void put32(writer *w, uint32_t v)
{
	uint8_t b[4];
	wf_net_put32(b, v);
	put(w, b, 4);
}

static void put64(writer *w, uint64_t v)
{
	uint8_t b[8];
	wf_net_put64(b, v);
	put(w, b, 8);
}

static void put_text(writer *w, const char *s)
{
	size_t n = strnlen(s, WF_EL_TEXT);
	if (n >= WF_EL_TEXT) {
		w->bad = 1;
		return;
	}
	put32(w, (uint32_t)n);
	put(w, s, n);
}

static void put_body(writer *w, const wf_el_msg *m)
{
	switch (m->type) {
	case WF_EL_HELLO:
		put32(w, WF_EL_VERSION);
		put32(w, (uint32_t)m->keyed);
		put32(w, (uint32_t)m->slot);
		put64(w, m->job);
		put(w, m->nonce, WF_EL_NONCE);
		put_text(w, m->addr);
		put64(w, m->gen);
		break;
	case WF_EL_CHALLENGE:
	case WF_EL_RING_REPLY:
		put32(w, m->status);
		put(w, m->nonce, WF_EL_NONCE);
		put(w, m->mac, WF_EL_MAC);
		put_text(w, m->text);
		break;
	case WF_EL_PROOF: put(w, m->mac, WF_EL_MAC); break;
	case WF_EL_READY:
		put64(w, m->gen);
		put64(w, (uint64_t)m->step);
		break;
	case WF_EL_LEAVE: break;
	case WF_EL_NOTICE: put64(w, m->gen); break;
	case WF_EL_DONE: put64(w, (uint64_t)m->step); break;
	case WF_EL_FAIL: put_text(w, m->text); break;
	case WF_EL_RING_HELLO:
		put64(w, m->job);
		put64(w, m->gen);
		put32(w, (uint32_t)m->rank);
		put(w, m->nonce, WF_EL_NONCE);
		break;
	case WF_EL_ASSIGN:
		put64(w, m->gen);
		put32(w, (uint32_t)m->rank);
		put32(w, (uint32_t)m->size);
		put32(w, (uint32_t)m->root);
		put64(w, (uint64_t)m->step);
		if (m->nmembers != m->size || !m->members)
			w->bad = 1;
		for (int i = 0; i < m->size && !w->bad; i++) {
			put32(w, (uint32_t)m->members[i].slot);
			put_text(w, m->members[i].addr);
		}
		break;
	default: w->bad = 1;
	}
}

size_t wf_el_msg_bytes(const wf_el_msg *m)
{
	/* an upper bound: the largest fixed part of any type, and the members */
	size_t body = 4 + 4 + 4 + 8 + WF_EL_NONCE + WF_EL_MAC + 4 + WF_EL_TEXT;
	if (m->type == WF_EL_ASSIGN)
		body = 28 + (size_t)(m->size > 0 ? m->size : 0) * (8 + WF_EL_TEXT);
	return WF_EL_HEADER + body;
}

size_t wf_el_msg_encode(const wf_el_msg *m, uint8_t *out, size_t cap)
{
	if (cap < WF_EL_HEADER)
		return 0;
	writer w = {out + WF_EL_HEADER, cap - WF_EL_HEADER, 0, 0};
	if (cap - WF_EL_HEADER > WF_EL_MAX_BODY)
		w.left = WF_EL_MAX_BODY;
	put_body(&w, m);
	if (w.bad)
		return 0;
	wf_net_put32(out, WF_EL_MAGIC);
	wf_net_put32(out + 4, (uint32_t)m->type);
	wf_net_put32(out + 8, (uint32_t)w.done);
	return WF_EL_HEADER + w.done;
}

void wf_el_msg_free(wf_el_msg *m)
{
	free(m->members);
	m->members = NULL;
	m->nmembers = 0;
}

/* ---- over a socket -------------------------------------------------------- */

int wf_el_send(int fd, const wf_el_msg *m, double deadline)
{
	size_t cap = wf_el_msg_bytes(m);
	uint8_t small[1024], *buf = cap <= sizeof(small) ? small : malloc(cap);
	if (!buf) {
		errno = ENOMEM;
		return -1;
	}
	size_t n = wf_el_msg_encode(m, buf, cap);
	int rc = n ? wf_net_io(fd, buf, n, 1, deadline) : (errno = EINVAL, -1);
	if (buf != small)
		free(buf);
	return rc;
}

int wf_el_recv(int fd, wf_el_msg *m, double deadline, char *why, size_t n)
{
	uint8_t h[WF_EL_HEADER];
	int type;
	uint32_t len;
	memset(m, 0, sizeof(*m));
	if (wf_net_io(fd, h, sizeof(h), 0, deadline) != 0)
		return -1;
	if (wf_el_header_parse(h, &type, &len) != 0) {
		snprintf(why, n, "not a weft elastic message (bad header)");
		return -2;
	}
	uint8_t small[1024], *body = len <= sizeof(small) ? small : malloc(len);
	if (!body) {
		errno = ENOMEM;
		return -1;
	}
	int rc = wf_net_io(fd, body, len, 0, deadline);
	if (rc == 0 && wf_el_msg_parse(type, body, len, m, why, n) != 0)
		rc = -2;
	if (body != small)
		free(body);
	return rc;
}
