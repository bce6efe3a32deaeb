/* fuzz_grpc.c: libFuzzer target for weft-serve's gRPC input: the message
 * framing (5-byte prefix, gzip/deflate inflation under a size limit) and the
 * protobuf decoders of both APIs (KServe ModelInferRequest, TF Serving
 * PredictRequest and ClassificationRequest) into model input. The first byte
 * picks the encoding and the decoder; the rest is a stream's DATA. Any input
 * must give a status code, never a crash or a leak. Seeds: tests/fuzz/seeds/grpc
 * (messages serialized by the real clients). */
#include "serve/grpc.h"
#include "serve/grpc_services.h"

#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char *enc[] = {NULL, "identity", "gzip", "deflate"};
	if (size < 1)
		return 0;
	wf_grpc_io io = {.h = 8, .w = 8, .c = 3, .classes = 5, .scale = 1.0f / 255};
	for (int i = 0; i < 4; i++)
		io.std[i] = 1.0f;
	const uint8_t *msg = NULL;
	uint8_t *inflated = NULL;
	size_t len = 0;
	char why[512];
	if (wf_grpc_unframe(data + 1, size - 1, enc[data[0] & 3], 1 << 20, &msg, &len, &inflated,
			    why, sizeof(why)) != WF_GRPC_OK)
		return 0;
	float *x = NULL;
	int n = 0;
	switch ((data[0] >> 2) % 3) {
	case 0: wf_grpc_kserve_decode_input(&io, msg, len, &x, &n, why, sizeof(why)); break;
	case 1: wf_grpc_tfs_decode_input(&io, msg, len, 0, &x, &n, why, sizeof(why)); break;
	default: wf_grpc_tfs_decode_input(&io, msg, len, 1, &x, &n, why, sizeof(why)); break;
	}
	free(x);
	free(inflated);
	return 0;
}
