/* fuzz_serve_request.c: libFuzzer target for weft-serve's request parsers
 * (TF Serving :predict/:classify bodies and KServe v2 /infer bodies with a
 * binary part). The first byte picks the parser and, for KServe, where the
 * JSON header ends. Any input must give 0 or an error, never a crash. */
#include "serve/request.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	wf_image_io io = {.h = 4, .w = 4, .c = 3, .classes = 5, .scale = 1.0f / 255};
	for (int i = 0; i < 4; i++)
		io.std[i] = 1.0f;
	const char *body = (const char *)(data + 1);
	size_t len = size - 1;
	wf_err err = {0};
	if (data[0] & 1) {
		size_t json_len = len ? (size_t)(data[0] >> 1) * len / 127 : 0;
		if (json_len > len)
			json_len = len;
		wf_serve_kv2_req req;
		if (wf_serve_kv2_parse(&io, body, len, json_len, NULL, &req, &err) == 0) {
			float logits[5 * 8] = {0}, probs[5 * 8];
			int n = req.in.n < 8 ? req.in.n : 8;
			wf_serve_softmax(logits, probs, n, 5);
			char *out = NULL;
			size_t olen, hl;
			wf_serve_tensor t[WF_SERVE_MAX_OUTPUTS];
			if (wf_serve_tensors_make(req.out, req.nout, logits, probs, n, 5,
						  req.unbatched, NULL, NULL, t, &err) == 0 &&
			    wf_serve_kv2_reply(&req, t, "m", 1, &out, &olen, &hl, &err) == 0)
				free(out);
			wf_serve_tensors_free(t, req.nout);
			wf_serve_kv2_req_free(&req);
		}
	} else {
		wf_serve_tf_req req;
		if (wf_serve_tf_parse(&io, body, len, &req, &err) == 0) {
			float probs[5] = {0.2f, 0.2f, 0.2f, 0.2f, 0.2f};
			free(wf_serve_tf_classify_reply(probs, 1, 5, NULL, req.top_k));
			wf_serve_tf_req_free(&req);
		}
	}
	return 0;
}
