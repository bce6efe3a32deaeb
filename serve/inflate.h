/* inflate.h: bounded decompression of what clients send compressed: HTTP
 * request bodies (Content-Encoding gzip, deflate) and gRPC messages
 * (grpc-encoding gzip, deflate). One loop for both; each caller words its
 * own errors. Thread-safe. */
#ifndef WF_SERVE_INFLATE_H
#define WF_SERVE_INFLATE_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
	WF_INFLATE_GZIP,
	WF_INFLATE_ZLIB,
	WF_INFLATE_RAW,	     /* raw deflate, no header */
	WF_INFLATE_DETECTED, /* a zlib or gzip header, whichever it is */
} wf_inflate_format;

typedef enum {
	WF_INFLATE_OK,
	WF_INFLATE_TOO_LARGE, /* it inflates beyond max */
	WF_INFLATE_CORRUPT,   /* not valid data of the format */
	WF_INFLATE_TRUNCATED, /* the data end before the stream does */
	WF_INFLATE_NOMEM,
	WF_INFLATE_REFUSED, /* grow said no */
} wf_inflate_status;

/* Inflate in[n] into *out (malloc'd, one byte more than *len for a
 * terminator the caller may write) of at most max bytes. grow(ctx, bytes),
 * when not NULL, is asked before the output buffer takes `bytes` more (the
 * first time: all of it); 0 from it stops with WF_INFLATE_REFUSED. On any
 * status but OK nothing is left allocated. */
wf_inflate_status wf_serve_inflate(const uint8_t *in, size_t n, wf_inflate_format f, size_t max,
				   int (*grow)(void *ctx, size_t bytes), void *ctx, uint8_t **out,
				   size_t *len);

#endif
