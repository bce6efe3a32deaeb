/* inflate.c: bounded zlib inflation for request bodies and gRPC messages. */
#include "serve/inflate.h"

#include "common/util.h"

#include <stdlib.h>
#include <zlib.h>

static int window_bits(wf_inflate_format f)
{
	switch (f) {
	case WF_INFLATE_GZIP: return 16 + MAX_WBITS;
	case WF_INFLATE_ZLIB: return MAX_WBITS;
	case WF_INFLATE_RAW: return -MAX_WBITS;
	default: return 32 + MAX_WBITS;
	}
}

wf_inflate_status wf_serve_inflate(const uint8_t *in, size_t n, wf_inflate_format f, size_t max,
				   int (*grow)(void *ctx, size_t bytes), void *ctx, uint8_t **out,
				   size_t *len)
{
	*out = NULL;
	*len = 0;
	z_stream z = {0};
	if (inflateInit2(&z, window_bits(f)) != Z_OK)
		return WF_INFLATE_NOMEM;
	/* room for max + 1 bytes at most: one more than max tells too large */
	size_t cap = WF_MIN(n * 4 + 4096, max + 1), used = 0;
	wf_inflate_status st = WF_INFLATE_OK;
	uint8_t *buf = NULL;
	if (grow && !grow(ctx, cap + 1))
		st = WF_INFLATE_REFUSED;
	else if (!(buf = malloc(cap + 1)))
		st = WF_INFLATE_NOMEM;
	z.next_in = (Bytef *)in;
	z.avail_in = (uInt)n;
	for (int zr = Z_OK; st == WF_INFLATE_OK && zr != Z_STREAM_END;) {
		if (used == cap) {
			size_t more = WF_MIN(cap * 2, max + 1) - cap;
			uint8_t *p = NULL;
			if (cap > max)
				st = WF_INFLATE_TOO_LARGE;
			else if (grow && !grow(ctx, more))
				st = WF_INFLATE_REFUSED;
			else if (!(p = realloc(buf, cap + more + 1)))
				st = WF_INFLATE_NOMEM;
			if (st != WF_INFLATE_OK)
				break;
			buf = p;
			cap += more;
		}
		z.next_out = buf + used;
		z.avail_out = (uInt)(cap - used);
		zr = inflate(&z, Z_NO_FLUSH);
		used = cap - z.avail_out;
		if (zr != Z_OK && zr != Z_STREAM_END && !(zr == Z_BUF_ERROR && used == cap))
			st = WF_INFLATE_CORRUPT;
		else if (zr == Z_OK && z.avail_in == 0 && used < cap)
			st = WF_INFLATE_TRUNCATED;
	}
	inflateEnd(&z);
	if (st == WF_INFLATE_OK && used > max)
		st = WF_INFLATE_TOO_LARGE;
	if (st != WF_INFLATE_OK) {
		free(buf);
		return st;
	}
	*out = buf;
	*len = used;
	return WF_INFLATE_OK;
}
