/* request_internal.h: what the request parsers (serve/request*.c) share: the
 * sample and JSON helpers of request.c (not an API: only serve/request*.c
 * include it). */
#ifndef WF_SERVE_REQUEST_INTERNAL_H
#define WF_SERVE_REQUEST_INTERNAL_H

#include "serve/request.h"

#include "common/util.h"
#include "serve/json_budget.h"
#include "serve/jsonfast.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REAL_FLAGS (JSON_COMPACT | JSON_REAL_PRECISION(9))

/* Shared between the serve/request*.c files (defined where named). */
size_t sample_floats(const wf_image_io *io);
/* in: n samples, malloc'd, or borrow itself (read in place, not freed). */
int input_alloc(const wf_image_io *io, wf_serve_input *in, size_t n, const float *borrow,
		wf_err *err);
float num_f(const json_t *v);
json_t *parse_json(const char *body, size_t len, wf_err *err);

#endif
