/* test_grpc_frame.c: gRPC's message framing (5-byte prefix, gzip/deflate
 * per grpc-encoding, size limits), grpc-timeout, and the protobuf request
 * decoders of both gRPC APIs: good messages become the right model input,
 * malformed ones get INVALID_ARGUMENT (or RESOURCE_EXHAUSTED, UNIMPLEMENTED)
 * with a reason, never a crash. */
#include "common/util.h"
#include "serve/grpc.h"
#include "serve/grpc_services.h"
#include "serve/proto/kserve_grpc_service.pb-c.h"
#include "serve/proto/tf_serving.pb-c.h"
#include "tests/test.h"

#include <stdint.h>
#include <zlib.h>

static uint8_t *frame(const uint8_t *msg, size_t n, int compressed, size_t *len)
{
	uint8_t *b = malloc(n + 5);
	b[0] = (uint8_t)compressed;
	b[1] = (uint8_t)(n >> 24);
	b[2] = (uint8_t)(n >> 16);
	b[3] = (uint8_t)(n >> 8);
	b[4] = (uint8_t)n;
	memcpy(b + 5, msg, n);
	*len = n + 5;
	return b;
}

/* gzip (windowBits 16+15) or zlib (deflate) of n bytes. */
static uint8_t *squeeze(const uint8_t *in, size_t n, int gzip, size_t *out_len)
{
	z_stream z = {0};
	deflateInit2(&z, 9, Z_DEFLATED, gzip ? 16 + MAX_WBITS : MAX_WBITS, 8, Z_DEFAULT_STRATEGY);
	size_t cap = deflateBound(&z, (uLong)n) + 32;
	uint8_t *out = malloc(cap);
	z.next_in = (Bytef *)in;
	z.avail_in = (uInt)n;
	z.next_out = out;
	z.avail_out = (uInt)cap;
	deflate(&z, Z_FINISH);
	*out_len = cap - z.avail_out;
	deflateEnd(&z);
	return out;
}

static void test_framing_takes_exactly_one_message(void)
{
	const uint8_t msg[] = "hello protobuf";
	size_t len, ml;
	uint8_t *b = frame(msg, sizeof(msg), 0, &len), *own;
	const uint8_t *out;
	char why[256];
	WF_CHECK_INT(wf_grpc_unframe(b, len, NULL, 1 << 20, &out, &ml, &own, why, sizeof(why)),
		     WF_GRPC_OK);
	WF_CHECK(ml == sizeof(msg) && !memcmp(out, msg, ml));
	WF_CHECK(own == NULL && out == b + 5); /* read in place */
	/* truncated prefix, short body, trailing bytes, bad flag, no message */
	WF_CHECK_INT(wf_grpc_unframe(b, 3, NULL, 1 << 20, &out, &ml, &own, why, sizeof(why)),
		     WF_GRPC_INVALID_ARGUMENT);
	WF_CHECK(strstr(why, "prefix") != NULL);
	WF_CHECK_INT(wf_grpc_unframe(b, len - 1, NULL, 1 << 20, &out, &ml, &own, why, sizeof(why)),
		     WF_GRPC_INVALID_ARGUMENT);
	uint8_t *two = malloc(len * 2);
	memcpy(two, b, len);
	memcpy(two + len, b, len);
	WF_CHECK_INT(
		wf_grpc_unframe(two, 2 * len, NULL, 1 << 20, &out, &ml, &own, why, sizeof(why)),
		WF_GRPC_INVALID_ARGUMENT);
	WF_CHECK(strstr(why, "one message") != NULL);
	b[0] = 7;
	WF_CHECK_INT(wf_grpc_unframe(b, len, NULL, 1 << 20, &out, &ml, &own, why, sizeof(why)),
		     WF_GRPC_INVALID_ARGUMENT);
	WF_CHECK_INT(wf_grpc_unframe(b, 0, NULL, 1 << 20, &out, &ml, &own, why, sizeof(why)),
		     WF_GRPC_INVALID_ARGUMENT);
	/* the limit */
	b[0] = 0;
	WF_CHECK_INT(wf_grpc_unframe(b, len, NULL, 4, &out, &ml, &own, why, sizeof(why)),
		     WF_GRPC_RESOURCE_EXHAUSTED);
	WF_CHECK(strstr(why, "larger than max") != NULL);
	/* an empty message is a valid (all-defaults) protobuf */
	uint8_t empty[5] = {0};
	WF_CHECK_INT(wf_grpc_unframe(empty, 5, NULL, 16, &out, &ml, &own, why, sizeof(why)),
		     WF_GRPC_OK);
	WF_CHECK(ml == 0 && own == NULL);
	free(two);
	free(b);
}

static void test_gzip_and_deflate_messages_are_inflated_within_the_limit(void)
{
	size_t n = 100000, zl, len, ml;
	uint8_t *msg = malloc(n), *own;
	const uint8_t *out;
	char why[256];
	for (size_t i = 0; i < n; i++)
		msg[i] = (uint8_t)(i % 7);
	for (int gz = 0; gz < 2; gz++) {
		uint8_t *z = squeeze(msg, n, gz, &zl);
		uint8_t *b = frame(z, zl, 1, &len);
		const char *enc = gz ? "gzip" : "deflate";
		WF_CHECK_INT(wf_grpc_unframe(b, len, enc, n, &out, &ml, &own, why, sizeof(why)),
			     WF_GRPC_OK);
		WF_CHECK(ml == n && !memcmp(out, msg, n) && out == own);
		free(own);
		/* a small message that inflates past the limit (a zip bomb) */
		WF_CHECK_INT(
			wf_grpc_unframe(b, len, enc, n / 10, &out, &ml, &own, why, sizeof(why)),
			WF_GRPC_RESOURCE_EXHAUSTED);
		/* the wrong algorithm, a corrupt and a truncated stream */
		WF_CHECK_INT(wf_grpc_unframe(b, len, gz ? "deflate" : "gzip", n, &out, &ml, &own,
					     why, sizeof(why)),
			     WF_GRPC_INVALID_ARGUMENT);
		b[5 + zl / 2] ^= 0x5a;
		int code = wf_grpc_unframe(b, len, enc, n, &out, &ml, &own, why, sizeof(why));
		WF_CHECK(code == WF_GRPC_INVALID_ARGUMENT || (code == WF_GRPC_OK && ml <= n));
		if (code == WF_GRPC_OK)
			free(own);
		free(b);
		b = frame(z, zl / 2, 1, &len);
		WF_CHECK_INT(wf_grpc_unframe(b, len, enc, n, &out, &ml, &own, why, sizeof(why)),
			     WF_GRPC_INVALID_ARGUMENT);
		free(b);
		free(z);
	}
	/* compressed flag without an encoding, and an unknown encoding */
	size_t fl;
	uint8_t *b = frame(msg, 10, 1, &fl);
	WF_CHECK_INT(wf_grpc_unframe(b, fl, NULL, n, &out, &ml, &own, why, sizeof(why)),
		     WF_GRPC_INVALID_ARGUMENT);
	WF_CHECK_INT(wf_grpc_unframe(b, fl, "snappy", n, &out, &ml, &own, why, sizeof(why)),
		     WF_GRPC_UNIMPLEMENTED);
	free(b);
	free(msg);
}

static void test_grpc_timeout_units(void)
{
	WF_CHECK_NEAR(wf_grpc_parse_timeout("5S"), 5, 1e-9);
	WF_CHECK_NEAR(wf_grpc_parse_timeout("100m"), 0.1, 1e-9);
	WF_CHECK_NEAR(wf_grpc_parse_timeout("2M"), 120, 1e-9);
	WF_CHECK_NEAR(wf_grpc_parse_timeout("7u"), 7e-6, 1e-12);
	WF_CHECK(wf_grpc_parse_timeout("5") < 0);
	WF_CHECK(wf_grpc_parse_timeout("x5S") < 0);
	WF_CHECK(wf_grpc_parse_timeout("123456789S") < 0); /* at most 8 digits */
}

static wf_grpc_io io_8x8(void)
{
	wf_grpc_io io = {.h = 8, .w = 8, .c = 3, .classes = 5, .scale = 1.0f / 255};
	for (int i = 0; i < 4; i++)
		io.std[i] = 1.0f;
	return io;
}

static void test_kserve_request_becomes_model_input(void)
{
	wf_grpc_io io = io_8x8();
	float x[2 * 8 * 8 * 3];
	for (size_t i = 0; i < WF_ARRAY_LEN(x); i++)
		x[i] = (float)i * 0.01f;
	int64_t shape[4] = {2, 8, 8, 3};
	Inference__ModelInferRequest__InferInputTensor
		t = INFERENCE__MODEL_INFER_REQUEST__INFER_INPUT_TENSOR__INIT,
		*tp[1] = {&t};
	t.name = "input";
	t.datatype = "FP32";
	t.n_shape = 4;
	t.shape = shape;
	ProtobufCBinaryData raw = {sizeof(x), (uint8_t *)x};
	Inference__ModelInferRequest rq = INFERENCE__MODEL_INFER_REQUEST__INIT;
	rq.model_name = "m";
	rq.n_inputs = 1;
	rq.inputs = tp;
	rq.n_raw_input_contents = 1;
	rq.raw_input_contents = &raw;
	size_t n = inference__model_infer_request__get_packed_size(&rq);
	uint8_t *buf = malloc(n);
	inference__model_infer_request__pack(&rq, buf);
	float *got = NULL;
	int samples = 0;
	char why[512];
	WF_CHECK_INT(wf_grpc_kserve_decode_input(&io, buf, n, &got, &samples, why, sizeof(why)),
		     WF_GRPC_OK);
	WF_CHECK_INT(samples, 2);
	WF_CHECK(got && !memcmp(got, x, sizeof(x)));
	free(got);
	/* the tensor bytes first (fields in any order), and twice (two entries
	 * for one input): read where they are, the same checks */
	rq.n_raw_input_contents = 0;
	size_t rest = inference__model_infer_request__get_packed_size(&rq);
	uint8_t *moved = malloc(2 * (sizeof(x) + 3) + rest), *at = moved;
	for (int twice = 0; twice < 2; twice++) {
		*at++ = 7 << 3 | 2; /* raw_input_contents, length-delimited */
		*at++ = (uint8_t)(sizeof(x) & 0x7f) | 0x80;
		*at++ = (uint8_t)(sizeof(x) >> 7);
		memcpy(at, x, sizeof(x));
		at += sizeof(x);
		inference__model_infer_request__pack(&rq, at);
		WF_CHECK_INT(wf_grpc_kserve_decode_input(&io, moved, (size_t)(at - moved) + rest,
							 &got, &samples, why, sizeof(why)),
			     twice ? WF_GRPC_INVALID_ARGUMENT : WF_GRPC_OK);
		WF_CHECK(twice ? strstr(why, "one entry per input") != NULL
			       : got && !memcmp(got, x, sizeof(x)));
		free(got);
		got = NULL;
	}
	free(moved);
	rq.n_raw_input_contents = 1;
	/* every truncation of the message is rejected or decoded, never a crash */
	for (size_t cut = 0; cut < n; cut += 7) {
		int code = wf_grpc_kserve_decode_input(&io, buf, cut, &got, &samples, why,
						       sizeof(why));
		WF_CHECK(code == WF_GRPC_INVALID_ARGUMENT);
		WF_CHECK(got == NULL);
	}
	free(buf);
	/* wrong shape and raw size say why */
	shape[1] = 9;
	n = inference__model_infer_request__get_packed_size(&rq);
	buf = malloc(n);
	inference__model_infer_request__pack(&rq, buf);
	WF_CHECK_INT(wf_grpc_kserve_decode_input(&io, buf, n, &got, &samples, why, sizeof(why)),
		     WF_GRPC_INVALID_ARGUMENT);
	WF_CHECK(strstr(why, "[N,8,8,3]") != NULL);
	free(buf);
	shape[1] = 8;
	raw.len -= 4;
	n = inference__model_infer_request__get_packed_size(&rq);
	buf = malloc(n);
	inference__model_infer_request__pack(&rq, buf);
	WF_CHECK_INT(wf_grpc_kserve_decode_input(&io, buf, n, &got, &samples, why, sizeof(why)),
		     WF_GRPC_INVALID_ARGUMENT);
	WF_CHECK(strstr(why, "raw_input_contents") != NULL);
	free(buf);
}

static void test_tfs_predict_request_becomes_model_input(void)
{
	wf_grpc_io io = io_8x8();
	uint8_t px[8 * 8 * 3];
	int32_t iv[8 * 8 * 3];
	for (size_t i = 0; i < sizeof(px); i++)
		iv[i] = px[i] = (uint8_t)(i * 5);
	Tensorflow__TensorShapeProto__Dim d[4] = {TENSORFLOW__TENSOR_SHAPE_PROTO__DIM__INIT,
						  TENSORFLOW__TENSOR_SHAPE_PROTO__DIM__INIT,
						  TENSORFLOW__TENSOR_SHAPE_PROTO__DIM__INIT,
						  TENSORFLOW__TENSOR_SHAPE_PROTO__DIM__INIT};
	Tensorflow__TensorShapeProto__Dim *dp[4] = {&d[0], &d[1], &d[2], &d[3]};
	int64_t dims[4] = {1, 8, 8, 3};
	for (int i = 0; i < 4; i++)
		d[i].size = dims[i];
	Tensorflow__TensorShapeProto sh = TENSORFLOW__TENSOR_SHAPE_PROTO__INIT;
	sh.n_dim = 4;
	sh.dim = dp;
	Tensorflow__TensorProto t = TENSORFLOW__TENSOR_PROTO__INIT;
	t.dtype = TENSORFLOW__DATA_TYPE__DT_UINT8;
	t.tensor_shape = &sh;
	t.n_int_val = WF_ARRAY_LEN(iv);
	t.int_val = iv;
	Tensorflow__Serving__PredictRequest__InputsEntry
		e = TENSORFLOW__SERVING__PREDICT_REQUEST__INPUTS_ENTRY__INIT,
		*ep[1] = {&e};
	e.key = "input";
	e.value = &t;
	Tensorflow__Serving__PredictRequest rq = TENSORFLOW__SERVING__PREDICT_REQUEST__INIT;
	rq.n_inputs = 1;
	rq.inputs = ep;
	size_t n = tensorflow__serving__predict_request__get_packed_size(&rq);
	uint8_t *buf = malloc(n);
	tensorflow__serving__predict_request__pack(&rq, buf);
	float *got = NULL, want[8 * 8 * 3];
	int samples = 0;
	char why[512];
	wf_image_preprocess_u8(&io, px, want);
	WF_CHECK_INT(wf_grpc_tfs_decode_input(&io, buf, n, 0, &got, &samples, why, sizeof(why)),
		     WF_GRPC_OK);
	WF_CHECK(samples == 1 && got && !memcmp(got, want, sizeof(want)));
	free(got);
	free(buf);
	iv[3] = 300; /* out of range for DT_UINT8 */
	n = tensorflow__serving__predict_request__get_packed_size(&rq);
	buf = malloc(n);
	tensorflow__serving__predict_request__pack(&rq, buf);
	WF_CHECK_INT(wf_grpc_tfs_decode_input(&io, buf, n, 0, &got, &samples, why, sizeof(why)),
		     WF_GRPC_INVALID_ARGUMENT);
	WF_CHECK(strstr(why, "out of range") != NULL);
	free(buf);
	/* garbage, and a classify request with no examples */
	const uint8_t junk[] = {0x12, 0xff, 0xff, 0xff, 0xff, 0x0f, 0x01};
	WF_CHECK_INT(wf_grpc_tfs_decode_input(&io, junk, sizeof(junk), 0, &got, &samples, why,
					      sizeof(why)),
		     WF_GRPC_INVALID_ARGUMENT);
	WF_CHECK_INT(wf_grpc_tfs_decode_input(&io, junk, 0, 1, &got, &samples, why, sizeof(why)),
		     WF_GRPC_INVALID_ARGUMENT);
	WF_CHECK(strstr(why, "examples") != NULL);
}

int main(void)
{
	WF_RUN(test_framing_takes_exactly_one_message);
	WF_RUN(test_gzip_and_deflate_messages_are_inflated_within_the_limit);
	WF_RUN(test_grpc_timeout_units);
	WF_RUN(test_kserve_request_becomes_model_input);
	WF_RUN(test_tfs_predict_request_becomes_model_input);
	return wf_test_summary();
}
