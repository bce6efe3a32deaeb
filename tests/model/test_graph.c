/* test_graph.c: graph JSON parsing and writing, shape inference, errors that
 * name the layer and field, the parameter layout, the zoo's sizes. */
#include "model/model.h"
#include "tests/model/graphs.h"
#include "tests/test.h"

#include <stdint.h>

static int layer_index(const wf_model *m, const char *name)
{
	for (int i = 0; i < m->nlayers; i++)
		if (strcmp(m->layers[i].name, name) == 0)
			return i;
	return -1;
}

static void test_parse_sorts_and_infers_shapes(void)
{
	wf_model *m = NULL;
	wf_err err = {0};
	WF_CHECK_MSG(wf_model_from_json(&m, kitchen_sink, &err) == 0, "%s", err.msg);
	if (!m)
		return;
	WF_CHECK_INT(m->nlayers, 19);
	WF_CHECK(m->layers[0].type == WF_LAYER_INPUT);
	WF_CHECK(strcmp(m->layers[m->output].name, "logits") == 0);
	WF_CHECK_INT(m->output, m->nlayers - 1);
	for (int i = 0; i < m->nlayers; i++)
		for (int k = 0; k < m->layers[i].ninputs; k++)
			WF_CHECK(m->layers[i].inputs[k] < i);
	/* stable: independent layers keep their listed order */
	WF_CHECK(layer_index(m, "mp") < layer_index(m, "ap"));
	const wf_layer *l;
	l = &m->layers[layer_index(m, "pad")];
	WF_CHECK(l->oh == 10 && l->ow == 10 && l->oc == 3);
	l = &m->layers[layer_index(m, "c1")];
	WF_CHECK(l->oh == 5 && l->ow == 5 && l->oc == 6);
	l = &m->layers[layer_index(m, "cat")];
	WF_CHECK(l->oh == 5 && l->ow == 5 && l->oc == 18);
	l = &m->layers[layer_index(m, "mp")];
	WF_CHECK(l->oh == 3 && l->ow == 3 && l->sh == 2 && l->same);
	l = &m->layers[layer_index(m, "ap")];
	WF_CHECK(l->oh == 3 && l->ow == 3 && l->sh == 1);
	l = &m->layers[layer_index(m, "f2")];
	WF_CHECK(l->oh == 1 && l->ow == 1 && l->oc == 162);
	l = &m->layers[layer_index(m, "both")];
	WF_CHECK(l->oc == 18);
	l = &m->layers[layer_index(m, "bn2")];
	WF_CHECK_NEAR(l->momentum, 0.9, 1e-7);
	WF_CHECK_NEAR(l->eps, 1e-3, 1e-9);
	l = &m->layers[layer_index(m, "drop")];
	WF_CHECK_NEAR(l->rate, 0.25, 0);
	const wf_view *v = wf_model_view(m, "dw/kernel");
	WF_CHECK(v && v->ndim == 4 && v->shape[0] == 3 && v->shape[2] == 1 && v->shape[3] == 6);
	WF_CHECK(wf_model_view(m, "dw/bias") == NULL);
	v = wf_model_view(m, "d2/kernel");
	WF_CHECK(v && v->ndim == 2 && v->shape[0] == 162 && v->shape[1] == 18);
	v = wf_model_view(m, "bn2/moving_variance");
	WF_CHECK(v && !v->trainable && v->count == 18);
	wf_model_free(m);
}

static void test_canonical_json_round_trips(void)
{
	wf_model *a = NULL, *b = NULL;
	wf_err err = {0};
	WF_CHECK_MSG(wf_model_from_json(&a, kitchen_sink, &err) == 0, "%s", err.msg);
	if (!a)
		return;
	WF_CHECK_MSG(wf_model_from_json(&b, a->graph_json, &err) == 0, "%s", err.msg);
	if (b) {
		WF_CHECK_MSG(strcmp(a->graph_json, b->graph_json) == 0, "%s\nvs\n%s", a->graph_json,
			     b->graph_json);
		WF_CHECK_INT(a->nparams, b->nparams);
		WF_CHECK_INT(a->nviews, b->nviews);
		for (int i = 0; i < a->nlayers; i++) {
			WF_CHECK(strcmp(a->layers[i].name, b->layers[i].name) == 0);
			WF_CHECK(a->layers[i].oc == b->layers[i].oc);
		}
		/* defaults are written out, so the stored graph says what ran */
		WF_CHECK(strstr(a->graph_json, "\"epsilon\":0.001") != NULL);
		WF_CHECK(strstr(a->graph_json, "\"dilation_rate\":[1,1]") != NULL);
	}
	wf_model_free(a);
	wf_model_free(b);
}

/* Each bad graph fails with a message that contains every listed piece. */
static void expect_error(const char *json, const char *a, const char *b, const char *c)
{
	wf_model *m = NULL;
	wf_err err = {0};
	int rc = wf_model_from_json(&m, json, &err);
	WF_CHECK_MSG(rc < 0 && m == NULL, "accepted: %s", json);
	const char *want[3] = {a, b, c};
	for (int k = 0; k < 3; k++)
		if (want[k])
			WF_CHECK_MSG(strstr(err.msg, want[k]) != NULL, "'%s' not in: %s", want[k],
				     err.msg);
	wf_model_free(m);
}

#define HEAD "{\"format\": 1, \"input_shape\": [8, 8, 3], \"classes\": 4, \"output\": \"fc\", "
#define IN   "{\"name\": \"in\", \"type\": \"input\"}"
#define FLAT_FC                                                                                    \
	"{\"name\": \"flat\", \"type\": \"flatten\", \"inputs\": [\"x\"]}, {\"name\": \"fc\", "    \
	"\"type\": \"dense\", \"inputs\": [\"flat\"], \"config\": {\"units\": 4}}"

static void test_bad_graphs_name_layer_and_field(void)
{
	expect_error("{\"format\": 1", "invalid JSON", NULL, NULL);
	expect_error(HEAD "\"layers\": [" IN ", {\"name\": \"x\", \"type\": \"conv3d\", "
			  "\"inputs\": [\"in\"]}, " FLAT_FC "]}",
		     "'x'", "type", "conv3d");
	expect_error(HEAD "\"layers\": [" IN ", {\"name\": \"x\", \"type\": \"conv2d\", "
			  "\"inputs\": [\"in\"], \"config\": {\"filters\": 2, \"kernal_size\": "
			  "3}}, " FLAT_FC "]}",
		     "'x'", "kernal_size", "unknown");
	expect_error(HEAD "\"layers\": [" IN ", {\"name\": \"x\", \"type\": \"conv2d\", "
			  "\"inputs\": [\"in\"], \"config\": {\"kernel_size\": 3}}, " FLAT_FC "]}",
		     "'x'", "filters", "missing");
	expect_error(HEAD "\"layers\": [" IN ", {\"name\": \"x\", \"type\": \"relu\", "
			  "\"inputs\": [\"nope\"]}, " FLAT_FC "]}",
		     "'x'", "inputs", "'nope'");
	expect_error(HEAD "\"layers\": [" IN ", {\"name\": \"x\", \"type\": \"add\", "
			  "\"inputs\": [\"in\", \"y\"]}, {\"name\": \"y\", \"type\": \"relu\", "
			  "\"inputs\": [\"x\"]}, " FLAT_FC "]}",
		     "cycle", "'x'", "'y'");
	expect_error(HEAD "\"layers\": [" IN ", {\"name\": \"p\", \"type\": \"maxpool\", "
			  "\"inputs\": [\"in\"]}, {\"name\": \"x\", \"type\": \"add\", \"inputs\": "
			  "[\"in\", \"p\"]}, " FLAT_FC "]}",
		     "'x'", "[8,8,3]", "[4,4,3]");
	expect_error(HEAD "\"layers\": [" IN ", {\"name\": \"x\", \"type\": \"relu\", "
			  "\"inputs\": [\"in\"]}, {\"name\": \"fc\", \"type\": \"dense\", "
			  "\"inputs\": [\"x\"], \"config\": {\"units\": 4}}]}",
		     "'fc'", "inputs", "flatten");
	expect_error(HEAD "\"layers\": [" IN ", {\"name\": \"x\", \"type\": \"crop\", "
			  "\"inputs\": [\"in\"], \"config\": {\"cropping\": [[4, 4], [0, 0]]}}, "
			  "" FLAT_FC "]}",
		     "'x'", "cropping", NULL);
	expect_error(HEAD "\"layers\": [" IN ", {\"name\": \"x\", \"type\": \"conv2d\", "
			  "\"inputs\": [\"in\"], \"config\": {\"filters\": 4, \"kernel_size\": 1, "
			  "\"groups\": 2}}, " FLAT_FC "]}",
		     "'x'", "groups", NULL);
	expect_error(HEAD
		     "\"layers\": [" IN ", {\"name\": \"x\", \"type\": \"conv2d\", "
		     "\"inputs\": [\"in\"], \"config\": {\"filters\": 4, \"kernel_size\": 9}}, "
		     "" FLAT_FC "]}",
		     "'x'", "kernel_size", NULL);
	expect_error(HEAD
		     "\"layers\": [" IN ", {\"name\": \"x\", \"type\": \"relu\", "
		     "\"inputs\": [\"in\"]}, {\"name\": \"x\", \"type\": \"relu\", \"inputs\": "
		     "[\"in\"]}, " FLAT_FC "]}",
		     "'x'", "name", NULL);
	expect_error(HEAD "\"layers\": [" IN ", {\"name\": \"x\", \"type\": \"relu\", "
			  "\"inputs\": [\"in\"]}, {\"name\": \"dead\", \"type\": \"relu\", "
			  "\"inputs\": [\"in\"]}, " FLAT_FC "]}",
		     "'dead'", "output", NULL);
	expect_error(HEAD "\"layers\": [" IN ", {\"name\": \"x\", \"type\": \"dropout\", "
			  "\"inputs\": [\"in\"], \"config\": {\"rate\": 1.5}}, " FLAT_FC "]}",
		     "'x'", "rate", NULL);
	expect_error(HEAD "\"layers\": [" IN ", {\"name\": \"x\", \"type\": \"relu\", "
			  "\"inputs\": [\"in\"]}, {\"name\": \"flat\", \"type\": \"flatten\", "
			  "\"inputs\": [\"x\"]}, {\"name\": \"fc\", \"type\": \"dense\", "
			  "\"inputs\": [\"flat\"], \"config\": {\"units\": 7}}]}",
		     "output", "'fc'", "[4]");
	expect_error("{\"format\": 2, \"input_shape\": [8, 8, 3], \"classes\": 4, \"output\": "
		     "\"fc\", \"layers\": []}",
		     "format", "2", NULL);
	expect_error(HEAD "\"layers\": [" IN ", {\"name\": \"x\", \"type\": \"relu\", "
			  "\"inputs\": [\"in\"]}, " FLAT_FC "], \"extra\": 1}",
		     "extra", NULL, NULL);
	expect_error(HEAD "\"layers\": [" IN
			  ", {\"name\": \"x\", \"type\": \"relu\", \"inputs\": []}, "
			  "" FLAT_FC "]}",
		     "'x'", "inputs", NULL);
	expect_error(HEAD "\"layers\": [" IN ", {\"name\": \"a/b\", \"type\": \"relu\", "
			  "\"inputs\": [\"in\"]}, " FLAT_FC "]}",
		     "name", "a/b", NULL);
}

/* Reverse topological, contiguous, and the counts derived by hand. */
static void test_resnet20_layout(void)
{
	wf_model *m = NULL;
	wf_err err = {0};
	WF_CHECK_MSG(wf_model_zoo(&m, "resnet20", 32, 32, 3, 10, &err) == 0, "%s", err.msg);
	if (!m)
		return;
	WF_CHECK_INT(m->nparams, 272474);
	/* BN moving mean + variance: 2 x (16 + 6*16 + 7*32 + 7*64) channels */
	WF_CHECK_INT(m->nstate, 2 * (16 + 6 * 16 + 7 * 32 + 7 * 64));
	const wf_view *v = wf_model_view(m, "logits/kernel");
	WF_CHECK(v && v->offset == 0 && v->shape[0] == 64 && v->shape[1] == 10);
	v = wf_model_view(m, "conv1/kernel");
	WF_CHECK(v && v->offset + v->count == m->nparams);
	WF_CHECK(wf_model_view(m, "conv1/bias") == NULL); /* conv before BN: no bias */
	v = wf_model_view(m, "stage2_block1_shortcut/kernel");
	WF_CHECK(v && v->shape[0] == 1 && v->shape[2] == 16 && v->shape[3] == 32);
	WF_CHECK(wf_model_view(m, "stage2_block2_shortcut/kernel") == NULL);
	WF_CHECK(wf_model_view(m, "stage3_block3_conv2_bn/moving_mean") != NULL);

	/* views: trainable ones tile [0, nparams) and state ones [0, nstate), each
	 * layer's parameters after (higher offsets than) those of later layers */
	size_t pend = 0, send = 0;
	for (int i = 0; i < m->nviews; i++) {
		const wf_view *w = &m->views[i];
		size_t *end = w->trainable ? &pend : &send;
		WF_CHECK_INT(w->offset, *end);
		*end += w->count;
	}
	WF_CHECK_INT(pend, m->nparams);
	WF_CHECK_INT(send, m->nstate);
	size_t prev_start = (size_t)-1;
	for (int i = 0; i < m->nlayers; i++) {
		const wf_layer *l = &m->layers[i];
		int p = l->p_kernel >= 0 ? l->p_kernel : l->p_gamma;
		if (p < 0)
			continue;
		size_t start = m->views[p].offset;
		WF_CHECK(start < prev_start);
		prev_start = start;
	}
	wf_model_free(m);
}

static void test_zoo_sizes_and_flops(void)
{
	struct {
		const char *name;
		size_t nparams;
	} cases[] = {
		{"mlp", 3072 * 256 + 256 + 256 * 10 + 10},
		{"smallcnn", 896 + 18496 + 4096 * 128 + 128 + 1290},
		{"resnet20", 272474},
		{"resnet56", 855770},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		wf_model *m = NULL;
		wf_err err = {0};
		WF_CHECK_MSG(wf_model_zoo(&m, cases[i].name, 32, 32, 3, 10, &err) == 0, "%s: %s",
			     cases[i].name, err.msg);
		if (!m)
			continue;
		WF_CHECK_MSG(m->nparams == cases[i].nparams, "%s: %zu params, expected %zu",
			     cases[i].name, m->nparams, cases[i].nparams);
		WF_CHECK(strstr(wf_model_zoo_names(), cases[i].name) != NULL);
		if (strcmp(cases[i].name, "smallcnn") == 0)
			WF_CHECK_NEAR(wf_model_flops(m),
				      2.0 * (1024 * 864 + 256 * 18432 + 4096 * 128 + 1280), 0);
		wf_model_free(m);
	}
	wf_model *m = NULL;
	wf_err err = {0};
	WF_CHECK(wf_model_zoo(&m, "resnet21", 32, 32, 3, 10, &err) < 0 && !m);
	WF_CHECK(strstr(err.msg, "resnet21") && strstr(err.msg, "resnet56"));
}

static void test_init_is_deterministic(void)
{
	wf_model *a = NULL, *b = NULL;
	wf_err err = {0};
	wf_model_zoo(&a, "resnet20", 16, 16, 3, 10, &err);
	wf_model_zoo(&b, "resnet20", 16, 16, 3, 10, &err);
	if (!a || !b) {
		WF_CHECK_MSG(0, "%s", err.msg);
		goto done;
	}
	wf_model_init_params(a, 42);
	wf_model_init_params(b, 42);
	WF_CHECK(memcmp(a->params, b->params, a->nparams * sizeof(float)) == 0);
	wf_model_init_params(b, 43);
	WF_CHECK(memcmp(a->params, b->params, a->nparams * sizeof(float)) != 0);
	const wf_view *g = wf_model_view(a, "conv1_bn/gamma");
	const wf_view *var = wf_model_view(a, "conv1_bn/moving_variance");
	WF_CHECK(a->params[g->offset] == 1.0f && a->state[var->offset] == 1.0f);
	/* Keras's default, glorot uniform: std sqrt(2 / (fan_in + fan_out)),
	 * fans 3*3*64 each; within the limit sqrt(6 / (fan_in + fan_out)) */
	const wf_view *k = wf_model_view(a, "stage3_block2_conv1/kernel");
	double ss = 0, lim = sqrt(6.0 / (2 * 9 * 64)), mx = 0;
	for (size_t i = 0; i < k->count; i++) {
		ss += (double)a->params[k->offset + i] * a->params[k->offset + i];
		mx = fmax(mx, fabs(a->params[k->offset + i]));
	}
	WF_CHECK_NEAR(sqrt(ss / k->count), sqrt(2.0 / (2 * 9 * 64)), 0.002);
	WF_CHECK(mx <= lim && mx > 0.95 * lim);
	/* he_normal, truncated at 2 sd as Keras: std sqrt(2 / fan_in), none past 2 sd */
	wf_model_init_params_with(a, 42, WF_INIT_HE_NORMAL, WF_INIT_GLOROT_UNIFORM);
	ss = mx = 0;
	for (size_t i = 0; i < k->count; i++) {
		ss += (double)a->params[k->offset + i] * a->params[k->offset + i];
		mx = fmax(mx, fabs(a->params[k->offset + i]));
	}
	WF_CHECK_NEAR(sqrt(ss / k->count), sqrt(2.0 / (9 * 64)), 0.003);
	WF_CHECK(mx <= 2.0 * sqrt(2.0 / (9 * 64)) / 0.87962566 + 1e-6);
	/* every Keras name parses; others do not */
	wf_init ki;
	WF_CHECK(wf_init_parse("lecun_uniform", &ki) == 0 && ki == WF_INIT_LECUN_UNIFORM);
	WF_CHECK(wf_init_parse("he_normal", &ki) == 0 && ki == WF_INIT_HE_NORMAL);
	WF_CHECK(wf_init_parse("orthogonal", &ki) != 0);
done:
	wf_model_free(a);
	wf_model_free(b);
}

int main(void)
{
	WF_RUN(test_parse_sorts_and_infers_shapes);
	WF_RUN(test_canonical_json_round_trips);
	WF_RUN(test_bad_graphs_name_layer_and_field);
	WF_RUN(test_resnet20_layout);
	WF_RUN(test_zoo_sizes_and_flops);
	WF_RUN(test_init_is_deterministic);
	return wf_test_summary();
}
