/* fuzz_jsonfast.c: differential libFuzzer target for serve/jsonfast.c. The
 * first byte picks the parser (bit 1: KServe "data", else TF Serving) and
 * the channel count (bit 0: 1 or 3); whenever the fast parser accepts a
 * body, the general (jansson) parser must read the same values bit for bit
 * (TF: accept the same body; KServe: where jansson accepts the body at all,
 * its inputs[0].data holds the same numbers), else the target traps. */
#include "serve/jsonfast.h"
#include "serve/request.h"

#include <jansson.h>
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

/* Append v's numbers (nested arrays) to out; 0 on anything else. */
static int flatten(const json_t *v, float *out, size_t cap, size_t *n)
{
	if (json_is_number(v)) {
		if (*n >= cap)
			return 0;
		out[(*n)++] = (float)json_number_value(v);
		return 1;
	}
	if (!json_is_array(v))
		return 0;
	for (size_t i = 0; i < json_array_size(v); i++)
		if (!flatten(json_array_get(v, i), out, cap, n))
			return 0;
	return 1;
}

static int kv2_differential(const char *body, size_t len)
{
	float *x = NULL;
	size_t n = 0, s0, s1;
	if (!wf_serve_kv2_fast_data(body, len, &x, &n, &s0, &s1))
		return 0;
	if (s0 >= s1 || s1 > len || body[s0] != '[' || body[s1 - 1] != ']')
		__builtin_trap();
	json_t *root = json_loadb(body, len, 0, NULL);
	if (root) {
		json_t *d = json_object_get(json_array_get(json_object_get(root, "inputs"), 0), "data");
		float *y = malloc((n + 1) * sizeof(float));
		size_t m = 0;
		if (!flatten(d, y, n + 1, &m) || m != n || (n && memcmp(x, y, n * sizeof(float))))
			__builtin_trap();
		free(y);
		json_decref(root);
	}
	free(x);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 2)
		return 0;
	if (data[0] & 2)
		return kv2_differential((const char *)data + 1, size - 1);
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
