/* graph_json.c: the canonical graph JSON written back from a parsed model
 * (see graph.c). */
#include "model/graph_priv.h"
#include "model/model_priv.h"

#include "common/util.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- canonical JSON ----------------------------------------------------- */

/* A double that prints as the shortest decimal reading back as f. */
static json_t *json_float(float f)
{
	char buf[32];
	for (int p = 6; p <= 9; p++) {
		snprintf(buf, sizeof(buf), "%.*g", p, (double)f);
		if (strtof(buf, NULL) == f)
			break;
	}
	return json_real(strtod(buf, NULL));
}

static json_t *json_pair(int a, int b)
{
	return json_pack("[ii]", a, b);
}

static json_t *layer_config_json(const wf_layer *l)
{
	const char *pad = l->same ? "same" : "valid";
	switch (l->type) {
	case WF_LAYER_CONV2D:
		return json_pack("{s:i, s:o, s:o, s:o, s:i, s:s, s:b}", "filters", l->filters,
				 "kernel_size", json_pair(l->kh, l->kw), "strides",
				 json_pair(l->sh, l->sw), "dilation_rate", json_pair(l->dh, l->dw),
				 "groups", l->groups, "padding", pad, "use_bias", l->use_bias);
	case WF_LAYER_DENSE:
		return json_pack("{s:i, s:b}", "units", l->units, "use_bias", l->use_bias);
	case WF_LAYER_BATCHNORM:
		return json_pack("{s:o, s:o}", "epsilon", json_float(l->eps), "momentum",
				 json_float(l->momentum));
	case WF_LAYER_MAXPOOL:
	case WF_LAYER_AVGPOOL:
		return json_pack("{s:o, s:o, s:s}", "pool_size", json_pair(l->kh, l->kw), "strides",
				 json_pair(l->sh, l->sw), "padding", pad);
	case WF_LAYER_ZEROPAD:
	case WF_LAYER_CROP:
		return json_pack("{s:[[ii][ii]]}",
				 l->type == WF_LAYER_ZEROPAD ? "padding" : "cropping", l->pad[0],
				 l->pad[1], l->pad[2], l->pad[3]);
	case WF_LAYER_DROPOUT: return json_pack("{s:o}", "rate", json_float(l->rate));
	default: return json_object();
	}
}

int wf_graph_canonical_json(wf_model *m, wf_err *err)
{
	json_t *layers = json_array();
	json_t *root = json_pack("{s:i, s:[iii], s:i, s:s, s:o}", "format", 1, "input_shape",
				 m->in_h, m->in_w, m->in_c, "classes", m->classes, "output",
				 m->layers[m->output].name, "layers", layers);
	if (!root)
		goto oom;
	for (int i = 0; i < m->nlayers; i++) {
		const wf_layer *l = &m->layers[i];
		json_t *ins = json_array();
		for (int k = 0; k < l->ninputs; k++)
			json_array_append_new(ins, json_string(m->layers[l->inputs[k]].name));
		json_t *jl = json_pack("{s:s, s:s, s:o, s:o}", "name", l->name, "type",
				       wf_layer_type_name(l->type), "inputs", ins, "config",
				       layer_config_json(l));
		if (jl && l->has_range)
			json_object_set_new(jl, "range",
					    json_pack("[oo]", json_float(l->range[0]),
						      json_float(l->range[1])));
		if (!jl || json_array_append_new(layers, jl) != 0)
			goto oom;
	}
	m->graph_json =
		json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(9));
	json_decref(root);
	if (!m->graph_json)
		return wf_errf(err, WF_ENOMEM, "graph: out of memory writing JSON");
	return 0;
oom:
	json_decref(root);
	return wf_errf(err, WF_ENOMEM, "graph: out of memory writing JSON");
}
