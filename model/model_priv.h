/* model_priv.h: helpers shared by the model/ sources (graph, executor, zoo,
 * model file); not part of the public API. */
#ifndef WF_MODEL_PRIV_H
#define WF_MODEL_PRIV_H

#include "model/model.h"

#include <stddef.h>

/* Limits that keep a hostile graph from asking for absurd memory. */
#define WF_MODEL_MAX_LAYERS 10000
#define WF_MODEL_MAX_DIM    65536	/* any one size in a config or shape */
#define WF_MODEL_MAX_FLOATS (1UL << 28) /* parameters + state, and one sample's tensor */

/* The graph JSON name of a layer type ("conv2d"...). */
const char *wf_layer_type_name(wf_layer_type t);
/* 1 when layer i's output is a 2-D [N,F] tensor (dense, gap, flatten and what
 * follows them), 0 when it is 4-D [N,H,W,C]. */
int wf_layer_flat(const wf_model *m, int i);
/* Floats per sample of layer l's output. */
static inline size_t wf_layer_size(const wf_layer *l)
{
	return (size_t)l->oh * (size_t)l->ow * (size_t)l->oc;
}

#endif
