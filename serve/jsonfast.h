/* jsonfast.h: parsers for the common large JSON bodies, straight into floats
 * without a JSON tree (a tree costs ~20x the body): TF Serving's
 * {"instances": [...]} or {"inputs": [...]} holding only nested arrays of
 * plain JSON numbers, and the "data" array of a KServe v2 input. Anything
 * else, including every malformed body, is left to the general parser, so
 * answers and error messages do not change. */
#ifndef WF_SERVE_JSONFAST_H
#define WF_SERVE_JSONFAST_H

#include "serve/request.h"

#include <stddef.h>

/* 1 when body is of that form with samples of [h][w][c] ([h][w] also when
 * c is 1): in holds them (malloc'd) and *columnar is 1 for "inputs"; 0
 * otherwise (in untouched). Pure, thread-safe. */
int wf_serve_tf_fast_parse(int h, int w, int c, const char *body, size_t len, wf_serve_input *in,
			   int *columnar);

/* KServe v2: 1 when the first entry of the root's "inputs" has datatype
 * "FP32" or "UINT8" and its "data" is nested arrays (at most 9 deep) of plain
 * JSON numbers: *x (malloc'd) holds its *n values in order and [*start, *end)
 * is the array's text in body, which the caller replaces by [] before the
 * general parser reads the rest; 0 otherwise (nothing allocated). Only the
 * structure on the way to that array is followed, not validated: the general
 * parser still reads everything but the array. Pure, thread-safe. */
int wf_serve_kv2_fast_data(const char *body, size_t len, float **x, size_t *n, size_t *start,
			   size_t *end);

#endif
