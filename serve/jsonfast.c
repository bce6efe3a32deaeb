/* jsonfast.c: {"instances"|"inputs": [[H][W][C] numbers, ...]} and a KServe
 * v2 input's "data" into floats. */
#include "serve/jsonfast.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct shape {
	int h, w, c;
} shape;

typedef struct cur {
	const char *p, *end;
} cur;

static void ws(cur *c)
{
	while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r'))
		c->p++;
}

static int lit(cur *c, char ch)
{
	ws(c);
	if (c->p < c->end && *c->p == ch) {
		c->p++;
		return 1;
	}
	return 0;
}

static int digit(const char *q, const char *e)
{
	return q < e && *q >= '0' && *q <= '9';
}

/* A JSON number (RFC 8259 grammar) as jansson would read it; 0 for anything
 * else or what jansson refuses (integers beyond 64 bits, reals that overflow). */
static int number(cur *c, float *out)
{
	ws(c);
	const char *s = c->p, *e = c->end, *q = s;
	int is_int = 1;
	if (q < e && *q == '-')
		q++;
	if (!digit(q, e))
		return 0;
	if (*q == '0')
		q++;
	else
		while (digit(q, e))
			q++;
	if (q < e && *q == '.') {
		q++;
		is_int = 0;
		if (!digit(q, e))
			return 0;
		while (digit(q, e))
			q++;
	}
	if (q < e && (*q == 'e' || *q == 'E')) {
		q++;
		is_int = 0;
		if (q < e && (*q == '+' || *q == '-'))
			q++;
		if (!digit(q, e))
			return 0;
		while (digit(q, e))
			q++;
	}
	size_t n = (size_t)(q - s);
	char buf[64];
	if (n >= sizeof(buf) || (is_int && n > 18))
		return 0;
	memcpy(buf, s, n);
	buf[n] = 0;
	errno = 0;
	/* jansson keeps integers as integers: "-0" is 0, not -0.0 */
	double d = is_int ? (double)strtoll(buf, NULL, 10) : strtod(buf, NULL);
	if (errno == ERANGE && isinf(d))
		return 0;
	*out = (float)d;
	c->p = q;
	return 1;
}

/* One [H][W][C] sample ([H][W] also for one channel) into dst. */
static int sample(cur *c, const shape *io, float *dst)
{
	if (!lit(c, '['))
		return 0;
	for (int y = 0; y < io->h; y++) {
		if ((y && !lit(c, ',')) || !lit(c, '['))
			return 0;
		for (int x = 0; x < io->w; x++) {
			float *o = dst + ((size_t)y * io->w + x) * io->c;
			if (x && !lit(c, ','))
				return 0;
			ws(c);
			if (io->c == 1 && c->p < c->end && *c->p != '[') {
				if (!number(c, o))
					return 0;
				continue;
			}
			if (!lit(c, '['))
				return 0;
			for (int ch = 0; ch < io->c; ch++)
				if ((ch && !lit(c, ',')) || !number(c, o + ch))
					return 0;
			if (!lit(c, ']'))
				return 0;
		}
		if (!lit(c, ']'))
			return 0;
	}
	return lit(c, ']');
}

static int key(cur *c, const char *k)
{
	size_t n = strlen(k);
	ws(c);
	if ((size_t)(c->end - c->p) < n + 2 || c->p[0] != '"' || memcmp(c->p + 1, k, n) != 0 ||
	    c->p[n + 1] != '"')
		return 0;
	c->p += n + 2;
	return 1;
}

int wf_serve_tf_fast_parse(int h, int w, int ch, const char *body, size_t len, wf_serve_input *in,
			   int *columnar)
{
	const shape s = {h, w, ch}, *io = &s;
	cur c = {body, body + len};
	size_t per = (size_t)io->h * io->w * io->c;
	if (per == 0 || io->h <= 0 || io->w <= 0 || io->c <= 0 || !lit(&c, '{'))
		return 0;
	int cols = key(&c, "inputs");
	if (!cols && !key(&c, "instances"))
		return 0;
	if (!lit(&c, ':') || !lit(&c, '['))
		return 0;
	/* Every number takes at least 2 bytes with its separator: a bound on
	 * the samples, trimmed once they are counted. */
	size_t most = len / (2 * per) + 1, n = 0;
	if (most > (size_t)WF_SERVE_MAX_INPUT_FLOATS / per)
		most = (size_t)WF_SERVE_MAX_INPUT_FLOATS / per;
	float *x = malloc(most * per * sizeof(float));
	if (!x)
		return 0;
	do {
		if (n == most || !sample(&c, io, x + n * per))
			goto no;
		n++;
	} while (lit(&c, ','));
	if (!lit(&c, ']') || !lit(&c, '}'))
		goto no;
	ws(&c);
	if (c.p != c.end)
		goto no;
	float *shrunk = realloc(x, n * per * sizeof(float));
	in->x = shrunk ? shrunk : x;
	in->n = (int)n;
	*columnar = cols;
	return 1;
no:
	free(x);
	return 0;
}

/* ---- KServe v2: the first input's "data" ---------------------------------- */

typedef struct floats {
	float *x;
	size_t n, cap;
} floats;

static int push(floats *f, float v)
{
	if (f->n == f->cap) {
		size_t cap = f->cap ? 2 * f->cap : 4096;
		if (cap > (size_t)WF_SERVE_MAX_INPUT_FLOATS)
			cap = (size_t)WF_SERVE_MAX_INPUT_FLOATS;
		if (cap <= f->n)
			return 0;
		float *x = realloc(f->x, cap * sizeof(float));
		if (!x)
			return 0;
		f->x = x;
		f->cap = cap;
	}
	f->x[f->n++] = v;
	return 1;
}

/* Nested arrays of numbers (the array at depth 0 is "data" itself; deeper
 * than 8 is left to the general parser, which refuses it). */
static int numbers(cur *c, floats *f, int depth)
{
	if (depth > 8 || !lit(c, '['))
		return 0;
	if (lit(c, ']'))
		return 1;
	do {
		ws(c);
		float v;
		if (c->p < c->end && *c->p == '[') {
			if (!numbers(c, f, depth + 1))
				return 0;
		} else if (!number(c, &v) || !push(f, v)) {
			return 0;
		}
	} while (lit(c, ','));
	return lit(c, ']');
}

/* Past one JSON string (escapes included); 0 when it does not end. */
static int skip_string(cur *c)
{
	if (!lit(c, '"'))
		return 0;
	while (c->p < c->end && *c->p != '"')
		c->p += *c->p == '\\' ? 2 : 1;
	if (c->p >= c->end)
		return 0;
	c->p++;
	return 1;
}

/* Past one JSON value of any kind; structure only, no validation. */
static int skip_value(cur *c, int depth)
{
	ws(c);
	if (c->p >= c->end || depth > 64)
		return 0;
	char open = *c->p;
	if (open == '"')
		return skip_string(c);
	if (open != '{' && open != '[') {
		while (c->p < c->end && !strchr(",]} \t\r\n", *c->p))
			c->p++;
		return 1;
	}
	char close = open == '{' ? '}' : ']';
	c->p++;
	if (lit(c, close))
		return 1;
	do {
		if (open == '{' && (!skip_string(c) || !lit(c, ':')))
			return 0;
		if (!skip_value(c, depth + 1))
			return 0;
	} while (lit(c, ','));
	return lit(c, close);
}

/* The first input object: finds "datatype" and "data"; 1 when usable. */
static int first_input(cur *c, floats *f, size_t *start, size_t *end, const char *body)
{
	int typed = 0, found = 0;
	if (!lit(c, '{'))
		return 0;
	if (lit(c, '}'))
		return 0;
	do {
		if (key(c, "data")) {
			if (found || !lit(c, ':'))
				return 0;
			ws(c);
			*start = (size_t)(c->p - body);
			if (!numbers(c, f, 0))
				return 0;
			*end = (size_t)(c->p - body);
			found = 1;
		} else if (key(c, "datatype")) {
			if (!lit(c, ':'))
				return 0;
			typed = key(c, "FP32") || key(c, "UINT8");
			if (!typed)
				return 0;
		} else if (!skip_string(c) || !lit(c, ':') || !skip_value(c, 2)) {
			return 0;
		}
	} while (lit(c, ','));
	return lit(c, '}') && typed && found;
}

int wf_serve_kv2_fast_data(const char *body, size_t len, float **x, size_t *n, size_t *start,
			   size_t *end)
{
	cur c = {body, body + len};
	floats f = {0};
	int got = 0;
	if (!lit(&c, '{') || lit(&c, '}'))
		return 0;
	do {
		if (key(&c, "inputs")) {
			if (got || !lit(&c, ':') || !lit(&c, '[') ||
			    !first_input(&c, &f, start, end, body))
				goto no;
			got = 1;
			while (lit(&c, ',')) /* other inputs: the general parser's */
				if (!skip_value(&c, 2))
					goto no;
			if (!lit(&c, ']'))
				goto no;
		} else if (!skip_string(&c) || !lit(&c, ':') || !skip_value(&c, 1)) {
			goto no;
		}
	} while (lit(&c, ','));
	if (!got || !lit(&c, '}'))
		goto no;
	*x = f.x;
	*n = f.n;
	return 1;
no:
	free(f.x);
	return 0;
}
