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
int wf_graph_layer_err(wf_err *err, const wf_layer *l, int code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
/* "[H,W,C]" or "[F]": layer i's output shape, for messages. */
void wf_graph_shape_str(const wf_model *m, int i, char *buf, size_t n);
/* Infer layer i's output shape from its inputs (layers before it are done). */
int wf_graph_infer_shape(wf_model *m, int i, wf_err *err);
/* Lay out the parameter and state views in the flat buffers. */
int wf_graph_layout(wf_model *m, wf_err *err);
/* Set m's graph JSON to the canonical form of its layers. */
int wf_graph_canonical_json(wf_model *m, wf_err *err);

#endif
