/* test_request.c: weft-serve's request parsers and reply builders: what a
 * client sends (numbers, base64 JPEG, KServe JSON and binary tensors) becomes
 * the right model input, and bad bodies give errors that say why. */
#include "common/util.h"
#include "serve/request.h"
#include "tests/test.h"

#include <math.h>
#include <stdint.h>
/* jpeglib.h needs stdio.h first */
#include <jpeglib.h>

static wf_image_io test_io(void)
{
	wf_image_io io = {.h = 2, .w = 2, .c = 3, .classes = 3, .scale = 1.0f / 255};
	for (int i = 0; i < 4; i++) {
		io.mean[i] = 0.5f;
		io.std[i] = 0.25f;
	}
	return io;
}

/* A solid-colour RGB JPEG of w x h in memory. */
static unsigned char *solid_jpeg(int w, int h, const unsigned char rgb[3], unsigned long *len)
{
	struct jpeg_compress_struct cinfo;
	struct jpeg_error_mgr jerr;
	unsigned char *out = NULL;
	unsigned char *row = malloc((size_t)w * 3);
	for (int x = 0; x < w; x++)
		memcpy(row + 3 * x, rgb, 3);
	cinfo.err = jpeg_std_error(&jerr);
	jpeg_create_compress(&cinfo);
	jpeg_mem_dest(&cinfo, &out, len);
	cinfo.image_width = (JDIMENSION)w;
	cinfo.image_height = (JDIMENSION)h;
	cinfo.input_components = 3;
	cinfo.in_color_space = JCS_RGB;
	jpeg_set_defaults(&cinfo);
	jpeg_set_quality(&cinfo, 100, TRUE);
	jpeg_start_compress(&cinfo, TRUE);
	while (cinfo.next_scanline < cinfo.image_height)
		jpeg_write_scanlines(&cinfo, &row, 1);
	jpeg_finish_compress(&cinfo);
	jpeg_destroy_compress(&cinfo);
	free(row);
	return out;
}

static void test_base64_roundtrip_and_garbage_rejected(void)
{
	const uint8_t data[] = {0, 1, 2, 250, 251, 252, 253};
	wf_err err = {0};
	for (size_t n = 0; n <= sizeof(data); n++) {
		char *s = wf_b64_encode(data, n);
		uint8_t *back = NULL;
		size_t blen = 0;
		WF_CHECK_INT(wf_b64_decode(s, strlen(s), &back, &blen, &err), 0);
		WF_CHECK_INT(blen, n);
		WF_CHECK(n == 0 || memcmp(back, data, n) == 0);
		free(back);
		free(s);
	}
	uint8_t *out = NULL;
	size_t olen;
	WF_CHECK_INT(wf_b64_decode("ab$d", 4, &out, &olen, &err), WF_EINVAL);
	WF_CHECK(strstr(err.msg, "base64") != NULL);
	WF_CHECK_INT(wf_b64_decode("a", 1, &out, &olen, &err), WF_EINVAL);
	/* URL-safe alphabet is accepted */
	WF_CHECK_INT(wf_b64_decode("-_8", 3, &out, &olen, &err), 0);
	free(out);
}

static void test_tf_instances_are_model_input_unchanged(void)
{
	wf_image_io io = test_io();
	wf_serve_tf_req req;
	wf_err err = {0};
	const char *body = "{\"instances\": [[[[1,2,3],[4,5,6]],[[7,8,9],[10,11,12]]],"
			   "{\"input\": [[[0,0,0],[0,0,0]],[[0,0,0],[0,0,-1.5]]]}]}";
	WF_CHECK_INT(wf_serve_tf_parse(&io, body, strlen(body), &req, &err), 0);
	WF_CHECK_INT(req.in.n, 2);
	WF_CHECK_INT(req.columnar, 0);
	WF_CHECK_NEAR(req.in.x[0], 1, 0);
	WF_CHECK_NEAR(req.in.x[11], 12, 0);
	WF_CHECK_NEAR(req.in.x[23], -1.5, 0);
	wf_serve_tf_req_free(&req);

	const char *cols = "{\"inputs\": {\"input\": [[[[1,2,3],[4,5,6]],[[7,8,9],[1,1,1]]]]}}";
	WF_CHECK_INT(wf_serve_tf_parse(&io, cols, strlen(cols), &req, &err), 0);
	WF_CHECK_INT(req.columnar, 1);
	WF_CHECK_INT(req.in.n, 1);
	wf_serve_tf_req_free(&req);
}

/* TF Serving accepts NaN, Infinity and -Infinity as bare JSON tokens;
 * inside strings they stay text. */
static void test_tf_nan_and_infinity(void)
{
	wf_image_io io = test_io();
	wf_serve_tf_req req;
	wf_err err = {0};
	const char *body = "{\"signature_name\":\"serving_default\",\"instances\":[[[[NaN,Infinity,"
			   "-Infinity],[1,2,3]],[[4,5,6],[7,8,9e2]]]]}";
	int rc = wf_serve_tf_parse(&io, body, strlen(body), &req, &err);
	WF_CHECK_MSG(rc == 0, "rc %d: %s", rc, err.msg);
	if (rc)
		return;
	WF_CHECK_INT(req.in.n, 1);
	WF_CHECK(isnan(req.in.x[0]));
	WF_CHECK(isinf(req.in.x[1]) && req.in.x[1] > 0);
	WF_CHECK(isinf(req.in.x[2]) && req.in.x[2] < 0);
	WF_CHECK_NEAR(req.in.x[11], 900, 0);
	wf_serve_tf_req_free(&req);
}

static void test_tf_bad_bodies_say_why(void)
{
	wf_image_io io = test_io();
	wf_serve_tf_req req;
	wf_err err = {0};
	const char *cases[][2] = {
		{"{\"instances\": [[[1,2,3]]]}", "[2][2][3]"},
		{"{\"instances\": [", "malformed JSON"},
		{"[1,2]", "JSON object"},
		{"{\"foo\": 1}", "\"instances\""},
		{"{\"instances\": []}", "no samples"},
		{"{\"instances\": [[[[1,2,3],[4,5,6]],[[7,8,9],[10,11,\"x\"]]]]}", "not a number"},
		{"{\"instances\": [{\"b64\": \"!!!!\"}]}", "base64"},
		{"{\"instances\": [{\"b64\": \"aGVsbG8=\"}]}", "not a JPEG"},
		{"{\"inputs\": [{\"b64\": \"aGVsbG8=\"}]}", "inputs sample 0: "},
		{"{\"instances\": [[[[1,2,3],[4,5,6]],[[7,8,9],[1,2,3]]], {\"b64\": "
		 "\"aGVsbG8=\"}]}",
		 "instance 1: an image among numbers"},
		{"{\"instances\": [{\"pixels\": [1]}]}", "unknown input \"pixels\""},
		{"{\"signature_name\": \"other\", \"instances\": [[1]]}", "other"},
	};
	for (size_t i = 0; i < WF_ARRAY_LEN(cases); i++) {
		err.msg[0] = 0;
		int rc = wf_serve_tf_parse(&io, cases[i][0], strlen(cases[i][0]), &req, &err);
		WF_CHECK_MSG(rc == WF_EINVAL && strstr(err.msg, cases[i][1]),
			     "case %zu: rc %d msg \"%s\"", i, rc, err.msg);
	}
}

static void test_b64_jpeg_is_decoded_resized_and_preprocessed(void)
{
	wf_image_io io = test_io();
	const unsigned char rgb[3] = {200, 100, 50};
	unsigned long len = 0;
	unsigned char *jpg = solid_jpeg(17, 9, rgb, &len);
	char *b64 = wf_b64_encode(jpg, len);
	size_t blen = strlen(b64) + 64;
	char *body = malloc(blen);
	snprintf(body, blen, "{\"instances\": [{\"b64\": \"%s\"}]}", b64);
	wf_serve_tf_req req;
	wf_err err = {0};
	WF_CHECK_INT(wf_serve_tf_parse(&io, body, strlen(body), &req, &err), 0);
	for (int p = 0; p < 4 && req.in.x; p++)
		for (int c = 0; c < 3; c++) {
			double want = (rgb[c] / 255.0 - 0.5) / 0.25;
			WF_CHECK_NEAR(req.in.x[p * 3 + c], want, 4.0 / 255 / 0.25);
		}
	wf_serve_tf_req_free(&req);
	/* a BGR model sees the channels swapped */
	io.bgr = 1;
	WF_CHECK_INT(wf_image_decode(&io, jpg, len, (float[12]){0}, &err), 0);
	float out[12];
	wf_image_decode(&io, jpg, len, out, &err);
	WF_CHECK_NEAR(out[0], (50 / 255.0 - 0.5) / 0.25, 4.0 / 255 / 0.25);
	/* truncated JPEG and PNG are refused with a reason */
	WF_CHECK_INT(wf_image_decode(&io, jpg, len / 3, out, &err), WF_EINVAL);
	WF_CHECK(strstr(err.msg, "JPEG") != NULL);
	const uint8_t png[16] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
	WF_CHECK_INT(wf_image_decode(&io, png, sizeof(png), out, &err), WF_EINVAL);
	WF_CHECK(strstr(err.msg, "PNG") != NULL);
	free(body);
	free(b64);
	free(jpg);
}

static void test_kserve_fp32_json_and_binary_agree(void)
{
	wf_image_io io = test_io();
	wf_serve_kv2_req a, b;
	wf_err err = {0};
	const char *js = "{\"id\":\"r1\",\"inputs\":[{\"name\":\"input\",\"shape\":[1,2,2,3],"
			 "\"datatype\":\"FP32\",\"data\":[1,2,3,4,5,6,7,8,9,10,11,12]}]}";
	WF_CHECK_INT(wf_serve_kv2_parse(&io, js, strlen(js), strlen(js), NULL, &a, &err), 0);
	WF_CHECK(a.has_id && strcmp(a.id, "r1") == 0);
	/* no "outputs": every output, probabilities first */
	WF_CHECK_INT(a.nout, 2);
	WF_CHECK_INT(a.out[0].logits, 0);
	WF_CHECK_INT(a.out[1].logits, 1);
	char head[256];
	int hl = snprintf(
		head, sizeof(head),
		"{\"inputs\":[{\"name\":\"input\",\"shape\":[1,2,2,3],\"datatype\":"
		"\"FP32\",\"parameters\":{\"binary_data_size\":48}}],\"outputs\":[{\"name\":"
		"\"logits\",\"parameters\":{\"binary_data\":true}}]}");
	/* the tensor read in place where it is aligned (as weft-serve's HTTP
	 * layer places it), copied where it is not */
	_Alignas(64) char buf[640];
	for (int shift = 0; shift < 2; shift++) {
		char *body = buf + (64 - hl % 64) % 64 + shift;
		memcpy(body, head, (size_t)hl);
		for (int i = 0; i < 12; i++) {
			float v = (float)(i + 1);
			memcpy(body + hl + 4 * i, &v, 4);
		}
		WF_CHECK_INT(
			wf_serve_kv2_parse(&io, body, (size_t)hl + 48, (size_t)hl, NULL, &b, &err),
			0);
		WF_CHECK(a.in.x && b.in.x && memcmp(a.in.x, b.in.x, 48) == 0);
		WF_CHECK_INT(b.in.borrowed, !shift);
		WF_CHECK(b.in.borrowed == ((char *)b.in.x == body + hl));
		WF_CHECK(b.out[0].logits && b.out[0].binary);
		if (!shift)
			wf_serve_kv2_req_free(&b);
	}
	char *body = buf + (64 - hl % 64) % 64 + 1;
	/* wrong sizes are refused */
	wf_serve_kv2_req c;
	WF_CHECK_INT(wf_serve_kv2_parse(&io, body, (size_t)hl + 44, (size_t)hl, NULL, &c, &err),
		     WF_EINVAL);
	WF_CHECK(strstr(err.msg, "binary_data_size") != NULL);
	wf_serve_kv2_req_free(&a);
	wf_serve_kv2_req_free(&b);
}

static void test_kserve_uint8_gets_preprocessing(void)
{
	wf_image_io io = test_io();
	wf_serve_kv2_req r;
	wf_err err = {0};
	const char *js = "{\"inputs\":[{\"name\":\"input\",\"shape\":[1,2,2,3],\"datatype\":"
			 "\"UINT8\",\"data\":[[[[255,0,51],[0,0,0]],[[0,0,0],[0,0,0]]]]}]}";
	WF_CHECK_INT(wf_serve_kv2_parse(&io, js, strlen(js), strlen(js), NULL, &r, &err), 0);
	if (r.in.x) {
		WF_CHECK_NEAR(r.in.x[0], (1.0 - 0.5) / 0.25, 1e-5);
		WF_CHECK_NEAR(r.in.x[1], (0.0 - 0.5) / 0.25, 1e-5);
		WF_CHECK_NEAR(r.in.x[2], (0.2 - 0.5) / 0.25, 1e-5);
	}
	wf_serve_kv2_req_free(&r);
	const char *bad = "{\"inputs\":[{\"name\":\"input\",\"shape\":[1,2,2,3],\"datatype\":"
			  "\"UINT8\",\"data\":[256,0,0,0,0,0,0,0,0,0,0,0]}]}";
	WF_CHECK_INT(wf_serve_kv2_parse(&io, bad, strlen(bad), strlen(bad), NULL, &r, &err),
		     WF_EINVAL);
	const char *wrong = "{\"inputs\":[{\"name\":\"input\",\"shape\":[1,3,2,3],\"datatype\":"
			    "\"FP32\",\"data\":[1]}]}";
	WF_CHECK_INT(wf_serve_kv2_parse(&io, wrong, strlen(wrong), strlen(wrong), NULL, &r, &err),
		     WF_EINVAL);
	WF_CHECK(strstr(err.msg, "[N,2,2,3]") != NULL);
}

/* A KServe JSON body of n samples of 2x2x3 with "data" as nested [n][2][2][3]
 * values v(i) = i % 251 (fields in the order a client may send them). */
static char *big_kv2(int n, const char *dtype, const char *extra_value)
{
	size_t cap = (size_t)n * 12 * 8 + 512, k = 0;
	char *b = malloc(cap);
	k += (size_t)snprintf(b + k, cap - k,
			      "{\"parameters\": {\"timeout\": 0}, \"inputs\": [{\"name\": "
			      "\"input\", \"data\": [");
	for (int i = 0; i < n * 12; i++) {
		const char *open = i % 12 == 0 ? "[[[" : i % 6 == 0 ? "[[" : i % 3 == 0 ? "[" : "";
		k += (size_t)snprintf(b + k, cap - k, "%s%s%d",
				      i % 3 ? ", "
				      : i   ? ", "
					    : "",
				      open, i % 251);
		if (i == 5 && extra_value)
			k += (size_t)snprintf(b + k, cap - k, "%s", extra_value);
		const char *close = i % 12 == 11 ? "]]]"
				    : i % 6 == 5 ? "]]"
				    : i % 3 == 2 ? "]"
						 : "";
		k += (size_t)snprintf(b + k, cap - k, "%s", close);
	}
	snprintf(b + k, cap - k,
		 "], \"shape\": [%d, 2, 2, 3], \"datatype\": \"%s\"}], "
		 "\"outputs\": [{\"name\": \"logits\"}], \"id\": \"big\"}",
		 n, dtype);
	return b;
}

/* A body over the fast-path size reads its "data" without a JSON tree: the
 * same values and fields as the general parser, and the same errors. */
static void test_kserve_large_json_data(void)
{
	wf_image_io io = test_io();
	wf_serve_kv2_req r;
	wf_err err = {0};
	char *b = big_kv2(300, "FP32", NULL);
	WF_CHECK(strlen(b) > 8192);
	WF_CHECK_INT(wf_serve_kv2_parse(&io, b, strlen(b), strlen(b), NULL, &r, &err), 0);
	WF_CHECK_INT(r.in.n, 300);
	int same = r.in.x != NULL;
	for (int i = 0; same && i < 300 * 12; i++)
		same = r.in.x[i] == (float)(i % 251);
	WF_CHECK(same);
	WF_CHECK(r.has_id && strcmp(r.id, "big") == 0);
	WF_CHECK_INT(r.nout, 1);
	wf_serve_kv2_req_free(&r);
	free(b);
	/* UINT8 gets the preprocessing; 256 is out of range as before */
	b = big_kv2(300, "UINT8", NULL);
	WF_CHECK_INT(wf_serve_kv2_parse(&io, b, strlen(b), strlen(b), NULL, &r, &err), 0);
	if (r.in.x)
		WF_CHECK_NEAR(r.in.x[1], (1.0 / 255 - 0.5) / 0.25, 1e-5);
	wf_serve_kv2_req_free(&r);
	free(b);
	b = big_kv2(300, "UINT8", NULL);
	char *at = strstr(b, "[[[0, 1, 2]"), *b256 = malloc(strlen(b) + 3);
	/* the first value 0 becomes 256 */
	sprintf(b256, "%.*s[[[256%s", at ? (int)(at - b) : 0, b, at ? at + 4 : "");
	free(b);
	b = b256;
	WF_CHECK_INT(wf_serve_kv2_parse(&io, b, strlen(b), strlen(b), NULL, &r, &err), WF_EINVAL);
	WF_CHECK(strstr(err.msg, "UINT8 value 256") != NULL);
	free(b);
	/* a string among the numbers, one value too many, BYTES: as before */
	b = big_kv2(300, "FP32", ", \"x\"");
	WF_CHECK_INT(wf_serve_kv2_parse(&io, b, strlen(b), strlen(b), NULL, &r, &err), WF_EINVAL);
	WF_CHECK(strstr(err.msg, "numbers only") != NULL);
	free(b);
	b = big_kv2(300, "FP32", ", 7");
	WF_CHECK_INT(wf_serve_kv2_parse(&io, b, strlen(b), strlen(b), NULL, &r, &err), WF_EINVAL);
	WF_CHECK(strstr(err.msg, "3601 values, shape needs 3600") != NULL);
	free(b);
	b = big_kv2(300, "BYTES", NULL);
	WF_CHECK_INT(wf_serve_kv2_parse(&io, b, strlen(b), strlen(b), NULL, &r, &err), WF_EINVAL);
	WF_CHECK(strstr(err.msg, "BYTES input shape") != NULL);
	free(b);
	/* malformed after the data: the general parser's message */
	b = big_kv2(300, "FP32", NULL);
	b[strlen(b) - 1] = ',';
	WF_CHECK_INT(wf_serve_kv2_parse(&io, b, strlen(b), strlen(b), NULL, &r, &err), WF_EINVAL);
	free(b);
}

/* A model whose input layer is named "pixels" and whose preprocessing is its
 * own first layers (a Keras Rescaling): every form of request may name the
 * input "pixels" or "input", and numbers, UINT8 pixels and binary FP32
 * tensors all become (pixel * scale - mean) / std, as the Keras graph
 * computes; a model without that takes numbers as they are. */
static void test_own_input_name_and_raw_numbers(void)
{
	wf_image_io io = test_io();
	io.input_name = "pixels";
	io.raw_numbers = 1;
	wf_err err = {0};
	float want[12];
	for (int i = 0; i < 12; i++)
		want[i] = ((float)(i * 20) * io.scale - 0.5f) / 0.25f;
	WF_CHECK(strcmp(wf_serve_input_name(&io), "pixels") == 0);
	WF_CHECK(wf_serve_input_name_ok(&io, "pixels") && wf_serve_input_name_ok(&io, "input"));
	WF_CHECK(!wf_serve_input_name_ok(&io, "image") && !wf_serve_input_name_ok(&io, NULL));
	const char *px = "[[[0,20,40],[60,80,100]],[[120,140,160],[180,200,220]]]";
	const char *tf_forms[] = {"{\"instances\": [%s]}", "{\"instances\": [{\"pixels\": %s}]}",
				  "{\"inputs\": {\"pixels\": [%s]}}",
				  "{\"inputs\": {\"input\": [%s]}}",
				  "{\"signature_name\": \"serving_default\", \"instances\": [%s]}"};
	char body[1024];
	for (size_t f = 0; f < WF_ARRAY_LEN(tf_forms); f++) {
		wf_serve_tf_req req;
		snprintf(body, sizeof(body), tf_forms[f], px);
		WF_CHECK_INT(wf_serve_tf_parse(&io, body, strlen(body), &req, &err), 0);
		WF_CHECK_INT(req.in.n, 1);
		for (int i = 0; i < 12 && req.in.x; i++)
			WF_CHECK_NEAR(req.in.x[i], want[i], 1e-6);
		wf_serve_tf_req_free(&req);
	}
	wf_serve_tf_req req;
	snprintf(body, sizeof(body), "{\"instances\": [{\"image\": %s}]}", px);
	WF_CHECK_INT(wf_serve_tf_parse(&io, body, strlen(body), &req, &err), WF_EINVAL);
	WF_CHECK(strstr(err.msg, "unknown input \"image\"; the model has one input, \"pixels\""));
	const char *kv2_forms[] = {"{\"inputs\":[{\"name\":\"pixels\",\"shape\":[1,2,2,3],"
				   "\"datatype\":\"FP32\",\"data\":%s}]}",
				   "{\"inputs\":[{\"name\":\"input\",\"shape\":[1,2,2,3],"
				   "\"datatype\":\"UINT8\",\"data\":%s}]}"};
	for (size_t f = 0; f < WF_ARRAY_LEN(kv2_forms); f++) {
		wf_serve_kv2_req r;
		snprintf(body, sizeof(body), kv2_forms[f], px);
		WF_CHECK_INT(
			wf_serve_kv2_parse(&io, body, strlen(body), strlen(body), NULL, &r, &err),
			0);
		for (int i = 0; i < 12 && r.in.x; i++)
			WF_CHECK_NEAR(r.in.x[i], want[i], 1e-6);
		wf_serve_kv2_req_free(&r);
	}
	/* a binary FP32 tensor is copied to be preprocessed, never changed in place */
	_Alignas(64) char buf[512];
	int hl = snprintf(buf, sizeof(buf),
			  "{\"inputs\":[{\"name\":\"pixels\",\"shape\":[1,2,2,3],\"datatype\":"
			  "\"FP32\",\"parameters\":{\"binary_data_size\":48}}]}");
	char *b = buf + 64 * ((hl + 63) / 64) - hl;
	memmove(b, buf, (size_t)hl);
	for (int i = 0; i < 12; i++) {
		float v = (float)(i * 20);
		memcpy(b + hl + 4 * i, &v, 4);
	}
	wf_serve_kv2_req r;
	WF_CHECK_INT(wf_serve_kv2_parse(&io, b, (size_t)hl + 48, (size_t)hl, NULL, &r, &err), 0);
	WF_CHECK_INT(r.in.borrowed, 0);
	for (int i = 0; i < 12 && r.in.x; i++)
		WF_CHECK_NEAR(r.in.x[i], want[i], 1e-6);
	float first;
	memcpy(&first, b + hl + 4, 4);
	WF_CHECK_NEAR(first, 20, 0);
	wf_serve_kv2_req_free(&r);
	snprintf(body, sizeof(body), kv2_forms[0], px);
	memcpy(strstr(body, "pixels"), "pixel2", 6);
	WF_CHECK_INT(wf_serve_kv2_parse(&io, body, strlen(body), strlen(body), NULL, &r, &err),
		     WF_EINVAL);
	WF_CHECK(strstr(err.msg, "unknown input \"pixel2\"; the model has one input, \"pixels\""));
	/* preprocessing outside the model: numbers are the input as they are */
	io.raw_numbers = 0;
	snprintf(body, sizeof(body), tf_forms[1], px);
	WF_CHECK_INT(wf_serve_tf_parse(&io, body, strlen(body), &req, &err), 0);
	WF_CHECK(req.in.x && req.in.x[11] == 220.0f);
	wf_serve_tf_req_free(&req);
}

static void test_replies_carry_probabilities_labels_and_binary(void)
{
	float logits[6] = {0, 1, 3, 2, 0, 0}, probs[6];
	char *labels[3] = {"cat", "dog", "eel"};
	wf_serve_softmax(logits, probs, 2, 3);
	WF_CHECK_NEAR(probs[0] + probs[1] + probs[2], 1, 1e-6);
	WF_CHECK(probs[2] > probs[1]);
	char *s = wf_serve_tf_classify_reply(probs, 2, 3, labels, 2);
	WF_CHECK(s && strstr(s, "{\"results\":[[[\"eel\",") == s);
	free(s);
	s = wf_serve_tf_predict_reply(probs, logits, 2, 3, 1, 0);
	WF_CHECK(s && strncmp(s, "{\"outputs\":[[", 13) == 0);
	free(s);
	/* the signature with both outputs: keyed by output name (TF Serving's form) */
	s = wf_serve_tf_predict_reply(probs, logits, 2, 3, 0, 1);
	WF_CHECK(s && strstr(s, "{\"predictions\":[{\"probabilities\":[") == s &&
		 strstr(s, "\"logits\":[0.0,1.0,3.0]},{"));
	free(s);
	s = wf_serve_tf_predict_reply(probs, logits, 2, 3, 1, 1);
	WF_CHECK(s && strstr(s, "{\"outputs\":{\"probabilities\":[[") == s &&
		 strstr(s, "\"logits\":[[0.0,1.0,3.0],[2.0,0.0,0.0]]}"));
	free(s);

	wf_serve_kv2_req req = {
		.nout = 2, .out = {{.logits = 0, .classification = 1}, {.logits = 1, .binary = 1}}};
	char *body = NULL;
	size_t len = 0, hl = 0;
	wf_err err = {0};
	wf_serve_tensor t[WF_SERVE_MAX_OUTPUTS];
	WF_CHECK_INT(wf_serve_tensors_make(req.out, req.nout, logits, probs, 2, 3, 0, labels, NULL,
					   t, &err),
		     0);
	WF_CHECK_INT(wf_serve_kv2_reply(&req, t, "m", 7, &body, &len, &hl, &err), 0);
	wf_serve_tensors_free(t, req.nout);
	WF_CHECK(hl > 0 && len == hl + 24);
	WF_CHECK(body && strstr(body, "\"model_version\":\"7\"") != NULL);
	WF_CHECK(body && strstr(body, ":2:eel\"") != NULL);
	WF_CHECK(body && memcmp(body + hl, logits, 24) == 0);
	free(body);
}

/* One tensor, whatever carries it: raw bytes, numbers or encoded images
 * build the same model input through wf_serve_tensor_input, and each rule
 * refuses with the carrier's own name for the values. */
static void test_one_tensor_builder_for_every_carrier(void)
{
	wf_image_io io = test_io();
	int64_t dims[4] = {2, 2, 2, 3};
	float x[24];
	uint8_t px[24];
	for (int i = 0; i < 24; i++) {
		px[i] = (uint8_t)(i * 10);
		x[i] = (float)px[i];
	}
	wf_err err = {0};
	wf_serve_input a, b, c, d;
	wf_serve_tensor_view raw = {.name = "input",
				    .datatype = "FP32",
				    .dims = dims,
				    .ndim = 4,
				    .raw = (const uint8_t *)x,
				    .raw_len = sizeof(x),
				    .has_raw = 1,
				    .raw_what = "raw_input_contents"};
	wf_serve_tensor_view values = {.name = "input",
				       .datatype = "FP32",
				       .dims = dims,
				       .ndim = 4,
				       .values = x,
				       .nvalues = 24,
				       .has_values = 1,
				       .values_what = "fp32_contents"};
	WF_CHECK_INT(wf_serve_tensor_input(&io, &raw, NULL, &a, &err), 0);
	WF_CHECK_INT(wf_serve_tensor_input(&io, &values, NULL, &b, &err), 0);
	WF_CHECK(a.n == 2 && b.n == 2 && !memcmp(a.x, b.x, sizeof(x)) && a.x[5] == 50.0f);
	/* UINT8 pixels, as bytes or as whole numbers: the model's preprocessing */
	wf_serve_tensor_view u8raw = raw, u8values = values;
	u8raw.datatype = u8values.datatype = "UINT8";
	u8raw.raw = px;
	u8raw.raw_len = sizeof(px);
	WF_CHECK_INT(wf_serve_tensor_input(&io, &u8raw, NULL, &c, &err), 0);
	WF_CHECK_INT(wf_serve_tensor_input(&io, &u8values, NULL, &d, &err), 0);
	WF_CHECK(!memcmp(c.x, d.x, sizeof(x)));
	WF_CHECK_NEAR(c.x[1], (10.0 / 255 - 0.5) / 0.25, 1e-5);
	wf_serve_input_free(&a);
	wf_serve_input_free(&b);
	wf_serve_input_free(&c);
	wf_serve_input_free(&d);
	/* the rules, in the carrier's words */
	raw.raw_len -= 4;
	WF_CHECK_INT(wf_serve_tensor_input(&io, &raw, NULL, &a, &err), WF_EINVAL);
	WF_CHECK(strstr(err.msg, "raw_input_contents 92") != NULL);
	values.nvalues = 23;
	WF_CHECK_INT(wf_serve_tensor_input(&io, &values, NULL, &a, &err), WF_EINVAL);
	WF_CHECK(strstr(err.msg, "fp32_contents has 23 values, shape needs 24") != NULL);
	x[3] = 256;
	WF_CHECK_INT(wf_serve_tensor_input(&io, &u8values, NULL, &a, &err), WF_EINVAL);
	WF_CHECK(strstr(err.msg, "UINT8 value 256") != NULL);
	dims[1] = 3;
	WF_CHECK_INT(wf_serve_tensor_input(&io, &u8raw, NULL, &a, &err), WF_EINVAL);
	WF_CHECK(strstr(err.msg, "[N,2,2,3]") != NULL);
	u8raw.name = "image";
	WF_CHECK_INT(wf_serve_tensor_input(&io, &u8raw, NULL, &a, &err), WF_EINVAL);
	WF_CHECK(strstr(err.msg, "unknown input \"image\"") != NULL);
	/* BYTES: raw elements (4-byte length, then the image) and listed images agree */
	unsigned long jl = 0;
	const unsigned char rgb[3] = {200, 30, 90};
	unsigned char *jpg = solid_jpeg(4, 4, rgb, &jl);
	uint8_t *el = malloc(4 + jl);
	el[0] = (uint8_t)jl;
	el[1] = (uint8_t)(jl >> 8);
	el[2] = el[3] = 0;
	memcpy(el + 4, jpg, jl);
	int64_t one[1] = {1};
	wf_serve_bytes img = {jpg, jl};
	wf_serve_tensor_view braw = {.name = "input",
				     .datatype = "BYTES",
				     .dims = one,
				     .ndim = 1,
				     .raw = el,
				     .raw_len = 4 + jl,
				     .has_raw = 1,
				     .raw_what = "binary_data_size"};
	wf_serve_tensor_view blist = {.name = "input",
				      .datatype = "BYTES",
				      .dims = one,
				      .ndim = 1,
				      .elements = &img,
				      .nelements = 1,
				      .has_elements = 1,
				      .values_what = "bytes_contents"};
	WF_CHECK_INT(wf_serve_tensor_input(&io, &braw, NULL, &a, &err), 0);
	WF_CHECK_INT(wf_serve_tensor_input(&io, &blist, NULL, &b, &err), 0);
	WF_CHECK(a.n == 1 && b.n == 1 && !memcmp(a.x, b.x, 12 * sizeof(float)));
	wf_serve_input_free(&a);
	wf_serve_input_free(&b);
	braw.raw_len -= 1;
	WF_CHECK_INT(wf_serve_tensor_input(&io, &braw, NULL, &a, &err), WF_EINVAL);
	WF_CHECK(strstr(err.msg, "binary_data_size: BYTES element 0 is truncated") != NULL);
	free(el);
	free(jpg);
}

/* The outputs a request may ask for are checked once, and the reply's
 * tensors (values, classification strings) are made once for every
 * protocol. */
static void test_outputs_checked_and_made_once(void)
{
	wf_err err = {0};
	wf_serve_output o[2] = {{0}};
	const char *names[2] = {"logits", "probabilities"};
	long cls[2] = {0, 2};
	WF_CHECK_INT(wf_serve_outputs_check(names, cls, 2, o, &err), 0);
	WF_CHECK(o[0].logits == 1 && o[1].logits == 0 && o[1].classification == 2);
	names[1] = "logits";
	WF_CHECK_INT(wf_serve_outputs_check(names, cls, 2, o, &err), WF_EINVAL);
	WF_CHECK(strstr(err.msg, "requested twice") != NULL);
	names[1] = "scores";
	WF_CHECK_INT(wf_serve_outputs_check(names, cls, 2, o, &err), WF_EINVAL);
	WF_CHECK(strstr(err.msg, "unknown output \"scores\"") != NULL);
	names[1] = "probabilities";
	cls[1] = -1;
	WF_CHECK_INT(wf_serve_outputs_check(names, cls, 2, o, &err), WF_EINVAL);
	WF_CHECK(strstr(err.msg, "positive integer") != NULL);
	WF_CHECK_INT(wf_serve_outputs_check(names, cls, 3, o, &err), WF_EINVAL);
	/* the tensors: logits as FP32 values; probabilities' top 2 as BYTES */
	float logits[6] = {0, 1, 3, 2, 0, 0}, probs[6];
	wf_serve_softmax(logits, probs, 2, 3);
	char *labels[3] = {"cat", NULL, "eel"};
	cls[1] = 2;
	WF_CHECK_INT(wf_serve_outputs_check(names, cls, 2, o, &err), 0);
	wf_serve_tensor t[2];
	WF_CHECK_INT(wf_serve_tensors_make(o, 2, logits, probs, 2, 3, 0, labels, NULL, t, &err), 0);
	WF_CHECK(!strcmp(t[0].datatype, "FP32") && t[0].len == sizeof(logits) &&
		 !memcmp(t[0].data, logits, sizeof(logits)) && t[0].dims[0] == 2 &&
		 t[0].dims[1] == 3);
	WF_CHECK(!strcmp(t[1].datatype, "BYTES") && t[1].ndim == 2 && t[1].dims[1] == 2);
	/* the first element: sample 0's best class, eel (index 2) */
	uint32_t l0 = (uint32_t)t[1].data[0] | (uint32_t)t[1].data[1] << 8;
	WF_CHECK(l0 > 6 && l0 < 40 && !memcmp(t[1].data + 4 + l0 - 6, ":2:eel", 6));
	wf_serve_tensors_free(t, 2);
}

int main(void)
{
	WF_RUN(test_base64_roundtrip_and_garbage_rejected);
	WF_RUN(test_tf_instances_are_model_input_unchanged);
	WF_RUN(test_tf_bad_bodies_say_why);
	WF_RUN(test_b64_jpeg_is_decoded_resized_and_preprocessed);
	WF_RUN(test_tf_nan_and_infinity);
	WF_RUN(test_kserve_fp32_json_and_binary_agree);
	WF_RUN(test_kserve_uint8_gets_preprocessing);
	WF_RUN(test_kserve_large_json_data);
	WF_RUN(test_own_input_name_and_raw_numbers);
	WF_RUN(test_replies_carry_probabilities_labels_and_binary);
	WF_RUN(test_one_tensor_builder_for_every_carrier);
	WF_RUN(test_outputs_checked_and_made_once);
	return wf_test_summary();
}
