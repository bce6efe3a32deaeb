/* fuzz_graph.c: libFuzzer target for the graph JSON parser. Any input is
 * either rejected with a message or accepted; an accepted graph's canonical
 * JSON parses back to the same canonical JSON, and, when the graph is small,
 * one inference forward on the ref backend runs without fault. */
#include "model/model.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static wf_backend *ref;

static void small_forward(wf_model *m)
{
	size_t floats = 0;
	for (int i = 0; i < m->nlayers; i++)
		floats += (size_t)m->layers[i].oh * m->layers[i].ow * m->layers[i].oc;
	if (floats > (1u << 20) || m->nparams > (1u << 20) || wf_model_flops(m) > 2e7)
		return;
	wf_err err = {0};
	if (!ref && wf_backend_create(&ref, "ref", 1, &err) != 0)
		abort();
	wf_model_init_params(m, 1);
	wf_exec *ex = NULL;
	if (wf_exec_create(&ex, m, ref, 2, 1, &err) != 0)
		return;
	size_t in = (size_t)m->in_h * m->in_w * m->in_c * 2;
	float *x = calloc(in, sizeof(float));
	float logits[2 * 16];
	int32_t labels[2] = {0, m->classes - 1};
	for (size_t i = 0; x && i < in; i++)
		x[i] = (float)((i * 7) % 13) - 6.0f;
	if (x && wf_exec_forward(ex, x, 2, 0, 0) == 0 && m->classes <= 16)
		wf_exec_logits(ex, logits);
	if (x && wf_exec_forward(ex, x, 2, 1, 5) == 0 && wf_exec_loss(ex, labels, NULL, NULL) == 0)
		wf_exec_backward(ex, 0.5f, NULL, NULL);
	free(x);
	wf_exec_free(ex);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *text = malloc(size + 1);
	if (!text)
		return 0;
	memcpy(text, data, size);
	text[size] = '\0';
	wf_model *m = NULL, *again = NULL;
	wf_err err = {0};
	if (wf_model_from_json(&m, text, &err) == 0) {
		if (wf_model_from_json(&again, m->graph_json, &err) != 0 ||
		    strcmp(again->graph_json, m->graph_json) != 0)
			abort(); /* the canonical form must round-trip */
		small_forward(m);
	} else if (err.msg[0] == '\0' || m != NULL) {
		abort(); /* every rejection names its cause and returns nothing */
	}
	wf_model_free(m);
	wf_model_free(again);
	free(text);
	return 0;
}
