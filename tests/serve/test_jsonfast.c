/* test_jsonfast.c: the tree-less parser of plain numeric TF Serving bodies
 * (serve/jsonfast.h) takes exactly the bodies it should, gives the samples
 * jansson's parser gives bit for bit, and leaves everything else (errors,
 * NaN, other keys) to the general parser; a large body is read without a
 * JSON tree. */
#include "serve/jsonfast.h"
#include "serve/request.h"
#include "tests/test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The model-input description wf_serve_tf_parse takes: serve/image.h's
 * wf_serve_io, named wf_image_io once it lives in common/image.h. */
#ifdef WF_IMAGE_H
typedef wf_image_io io_desc;
#else
typedef wf_serve_io io_desc;
#endif

/* Fast parse of body vs the general parser on the same body with one more
 * key (which the fast parser never takes); 1 when the fast one took it. */
static int same_as_general(const io_desc *io, const char *body)
{
	wf_serve_input in = {0};
	int columnar = -1;
	if (!wf_serve_tf_fast_parse(io->h, io->w, io->c, body, strlen(body), &in, &columnar))
		return 0;
	const char *brace = strchr(body, '{');
	char *alt = malloc(strlen(body) + 64);
	sprintf(alt, "{\"signature_name\": \"\", %s", brace + 1);
	wf_serve_tf_req req;
	wf_err err = {0};
	int rc = wf_serve_tf_parse(io, alt, strlen(alt), &req, &err);
	WF_CHECK_MSG(rc == 0, "general parser refused %s: %s", body, err.msg);
	if (rc == 0) {
		size_t per = (size_t)io->h * io->w * io->c;
		WF_CHECK_INT(req.in.n, in.n);
		WF_CHECK_INT(req.columnar, columnar);
		WF_CHECK(memcmp(req.in.x, in.x, (size_t)in.n * per * sizeof(float)) == 0);
		wf_serve_tf_req_free(&req);
	}
	free(alt);
	wf_serve_input_free(&in);
	return 1;
}

static void test_plain_numbers_match_the_general_parser(void)
{
	io_desc rgb = {.h = 2, .w = 2, .c = 3, .classes = 3};
	io_desc gray = {.h = 2, .w = 2, .c = 1, .classes = 3};
	WF_CHECK(same_as_general(&rgb, "{\"instances\": [[[[1,2,3],[4,5,6]],[[7,8,9],[0.5,-1e3,"
				       "2E-2]]]]}"));
	WF_CHECK(same_as_general(&rgb,
				 " {\n \"inputs\" : [ [[[0,0,-0],[0,0,0]],[[0,0,0],[0,0,"
				 "0]]] , [[[1.25,2,3],[4,5,6]],[[7,8,9],[-0.0,1e38,3e-45]]] ] "
				 "}\n"));
	WF_CHECK(same_as_general(&gray, "{\"instances\":[[[1,2],[3,4]],[[[5],6],[7,[8]]]]}"));
	WF_CHECK(same_as_general(&rgb, "{\"instances\": [[[[1e39,-1e39,123456789012345678],[4,"
				       "5,6]],[[7,8,9],[1,2,3]]]]}"));
}

static void test_everything_else_is_left_to_the_general_parser(void)
{
	io_desc io = {.h = 2, .w = 2, .c = 3, .classes = 3};
	const char *px = "[[[1,2,3],[4,5,6]],[[7,8,9],[1,2,3]]]";
	const char *fmt[] = {
		"{\"instances\": [%s], \"top_k\": 2}", /* another key */
		"{\"instances\": [%s]} x",	       /* trailing bytes */
		"{\"instances\": [%s,]}",	       /* trailing comma */
		"{\"instances\": [%s]",		       /* truncated */
		"{\"instances\": []}%s",	       /* no samples */
		"{\"instances\": [[%s]]}",	       /* wrong depth */
		"{\"examples\": [%s]}",		       /* :classify's key */
		"{\"inputs\": {\"input\": [%s]}}",     /* named columnar */
		"{\"instance\\u0073\": [%s]}",	       /* escaped key */
	};
	char body[512];
	for (size_t i = 0; i < sizeof(fmt) / sizeof(fmt[0]); i++) {
		snprintf(body, sizeof(body), fmt[i], px);
		wf_serve_input in = {0};
		int columnar = 0;
		WF_CHECK_MSG(!wf_serve_tf_fast_parse(io.h, io.w, io.c, body, strlen(body), &in,
						     &columnar),
			     "took %s", body);
		WF_CHECK(in.x == NULL);
	}
	const char *bad[] = {"{\"instances\": [[[[NaN,2,3],[4,5,6]],[[7,8,9],[1,2,3]]]]}",
			     "{\"instances\": [[[[Infinity,2,3],[4,5,6]],[[7,8,9],[1,2,3]]]]}",
			     "{\"instances\": [[[[01,2,3],[4,5,6]],[[7,8,9],[1,2,3]]]]}",
			     "{\"instances\": [[[[+1,2,3],[4,5,6]],[[7,8,9],[1,2,3]]]]}",
			     "{\"instances\": [[[[1.,2,3],[4,5,6]],[[7,8,9],[1,2,3]]]]}",
			     "{\"instances\": [[[[0x1,2,3],[4,5,6]],[[7,8,9],[1,2,3]]]]}",
			     "{\"instances\": [[[[1e999,2,3],[4,5,6]],[[7,8,9],[1,2,3]]]]}",
			     "{\"instances\": [[[[12345678901234567890,2,3],[4,5,6]],[[7,8,9],"
			     "[1,2,3]]]]}",
			     "{\"instances\": [[[[1,2],[4,5,6]],[[7,8,9],[1,2,3]]]]}"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		wf_serve_input in = {0};
		int columnar = 0;
		WF_CHECK_MSG(!wf_serve_tf_fast_parse(io.h, io.w, io.c, bad[i], strlen(bad[i]), &in,
						     &columnar),
			     "took %s", bad[i]);
	}
}

static void test_large_body_is_read_in_one_pass(void)
{
	/* 2000 samples of 32x32x3 zeros: ~24 MB of JSON, 24 MB of floats. */
	io_desc io = {.h = 32, .w = 32, .c = 3, .classes = 10};
	const int n = 2000;
	size_t cap = (size_t)n * 32 * 32 * 3 * 4 + 64, len = 0;
	char *body = malloc(cap);
	len += (size_t)sprintf(body, "{\"instances\":[");
	for (int i = 0; i < n; i++) {
		body[len++] = '[';
		for (int y = 0; y < 32; y++) {
			body[len++] = '[';
			for (int x = 0; x < 32; x++) {
				memcpy(body + len, "[0,1,2]", 7);
				len += 7;
				body[len++] = x < 31 ? ',' : ']';
			}
			body[len++] = y < 31 ? ',' : ']';
		}
		body[len++] = i < n - 1 ? ',' : ']';
	}
	body[len++] = '}';
	wf_serve_input in = {0};
	int columnar = 0;
	WF_CHECK(wf_serve_tf_fast_parse(io.h, io.w, io.c, body, len, &in, &columnar));
	WF_CHECK_INT(in.n, n);
	WF_CHECK(in.x && in.x[3 * 32 * 32 * 3 * 0 + 5] == 2.0f &&
		 in.x[(size_t)n * 3072 - 1] == 2.0f);
	wf_serve_input_free(&in);
	free(body);
}

int main(void)
{
	WF_RUN(test_plain_numbers_match_the_general_parser);
	WF_RUN(test_everything_else_is_left_to_the_general_parser);
	WF_RUN(test_large_body_is_read_in_one_pass);
	return wf_test_summary();
}
