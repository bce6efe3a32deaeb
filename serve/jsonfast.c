/* jsonfast.c: {"instances"|"inputs": [[H][W][C] numbers, ...]} into floats. */
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
