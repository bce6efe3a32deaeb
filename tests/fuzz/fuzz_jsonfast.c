/* fuzz_jsonfast.c: differential libFuzzer target for serve/jsonfast.c. The
 * first byte picks the channel count (1 or 3); whenever the fast parser
 * accepts a body, the general (jansson) parser must accept the same body and
 * give the same samples bit for bit, else the target traps. */
#include "serve/jsonfast.h"
#include "serve/request.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* The model-input description wf_serve_tf_parse takes: serve/image.h's
 * wf_serve_io, named wf_image_io once it lives in common/image.h. */
#ifdef WF_IMAGE_H
typedef wf_image_io io_desc;
#else
typedef wf_serve_io io_desc;
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 2)
		return 0;
	io_desc io = {.h = 2, .w = 2, .c = (data[0] & 1) ? 3 : 1, .classes = 3};
	const char *body = (const char *)data + 1;
	size_t len = size - 1;
	wf_serve_input in = {0};
	int columnar = 0;
	if (!wf_serve_tf_fast_parse(io.h, io.w, io.c, body, len, &in, &columnar))
		return 0;
	/* The same body with a key the fast parser never takes: jansson's path. */
	const char *brace = memchr(body, '{', len);
	if (!brace)
		__builtin_trap();
	size_t rest = len - (size_t)(brace + 1 - body);
	const char pre[] = "{\"signature_name\": \"\", ";
	char *alt = malloc(sizeof(pre) + rest);
	memcpy(alt, pre, sizeof(pre) - 1);
	memcpy(alt + sizeof(pre) - 1, brace + 1, rest);
	wf_serve_tf_req req;
	wf_err err = {0};
	if (wf_serve_tf_parse(&io, alt, sizeof(pre) - 1 + rest, &req, &err) != 0 ||
	    req.in.n != in.n || req.columnar != columnar ||
	    memcmp(req.in.x, in.x, (size_t)in.n * 4 * io.c * sizeof(float)) != 0)
		__builtin_trap();
	wf_serve_tf_req_free(&req);
	free(alt);
	wf_serve_input_free(&in);
	return 0;
}
