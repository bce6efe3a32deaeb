/* jsonfast.h: a parser for the common large TF Serving body, {"instances":
 * [...]} or {"inputs": [...]} holding only nested arrays of plain JSON
 * numbers, straight into floats without a JSON tree (a tree costs ~20x the
 * body). Anything else, including every malformed body, is left to the
 * general parser, so answers and error messages do not change. */
#ifndef WF_SERVE_JSONFAST_H
#define WF_SERVE_JSONFAST_H

#include "serve/request.h"

#include <stddef.h>

/* 1 when body is of that form with samples of [h][w][c] ([h][w] also when
 * c is 1): in holds them (malloc'd) and *columnar is 1 for "inputs"; 0
 * otherwise (in untouched). Pure, thread-safe. */
int wf_serve_tf_fast_parse(int h, int w, int c, const char *body, size_t len, wf_serve_input *in,
			   int *columnar);

#endif
