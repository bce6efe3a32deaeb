/* graph_priv.h: what the graph sources share (graph.c: types and parsing;
 * graph_shape.c: shape inference and parameter layout; graph_json.c: the
 * canonical graph JSON; graph_params.c: parameter initialisation, views,
 * FLOPs). Not part of the public API. */
#ifndef WF_GRAPH_PRIV_H
#define WF_GRAPH_PRIV_H

#include "common/error.h"
#include "model/model.h"

#include <stddef.h>

/* "graph: layer 'name' (type): <message>" */
int layer_err(wf_err *err, const wf_layer *l, int code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
void shape_str(const wf_model *m, int i, char *buf, size_t n);
int infer_shape(wf_model *m, int i, wf_err *err);
int layout(wf_model *m, wf_err *err);
int canonical_json(wf_model *m, wf_err *err);

#endif
