/* test_zoo.c: the Keras applications of the model zoo. Parameter counts of
 * all ten variants (with and without the classifier) equal Keras's published
 * totals; each network runs a batch-1 forward on cpu; export folds every
 * batch norm and predicts the same; mobilenetv2 and nasnetmobile learn a
 * synthetic batch at 64x64. By default resnet152 and nasnetlarge are left
 * out (slow on a small machine); --full checks only those two. */
#include "model/fold.h"
#include "model/model.h"
#include "model/optim.h"
#include "tests/test.h"

#include "common/util.h"

#include <stdint.h>

static wf_backend *cpu;
static int full; /* 1: only the big networks */

static const struct {
	const char *name;
	long top, notop; /* Keras: model.count_params() */
	int big;	 /* slow on a loaded 2-core machine */
} apps[] = {
	{"mobilenetv2", 3538984, 2257984, 0},	{"nasnetmobile", 5326716, 4269716, 0},
	{"resnet50", 25636712, 23587712, 0},	{"resnet152", 60419944, 58370944, 1},
	{"nasnetlarge", 88949818, 84916818, 1},
};
#define NAPPS (sizeof(apps) / sizeof(apps[0]))

static wf_model *build(const char *name, int h, int classes, int include_top)
{
	wf_model *m = NULL;
	wf_err err = {0};
	wf_zoo_opts o = WF_ZOO_OPTS_DEFAULT;
	o.include_top = include_top;
	if (wf_model_zoo_ex(&m, name, h, h, 3, classes, &o, &err))
		fprintf(stderr, "%s: %s\n", name, err.msg);
	return m;
}

static int count_type(const wf_model *m, wf_layer_type t)
{
	int n = 0;
	for (int i = 0; i < m->nlayers; i++)
		n += m->layers[i].type == t;
	return n;
}

static void test_param_counts_match_keras(void)
{
	for (size_t i = 0; i < NAPPS; i++) {
		if (apps[i].big != full)
			continue;
		for (int top = 1; top >= 0; top--) {
			wf_model *m = build(apps[i].name, 0, 1000, top);
			WF_CHECK_MSG(m != NULL, "%s", apps[i].name);
			if (!m)
				continue;
			long total = (long)(m->nparams + m->nstate);
			WF_CHECK_MSG(total == (top ? apps[i].top : apps[i].notop),
				     "%s include_top=%d: %ld parameters, Keras has %ld",
				     apps[i].name, top, total, top ? apps[i].top : apps[i].notop);
			if (top)
				WF_CHECK_INT(m->classes, 1000);
			wf_model_free(m);
		}
	}
}

static void test_default_input_and_preprocessing(void)
{
	wf_model_meta meta;
	int h, w, c;
	wf_err err = {0};
	wf_model_meta_init(&meta);
	WF_CHECK(wf_model_zoo_info("nasnetlarge", &h, &w, &c, &meta, &err) == 0);
	WF_CHECK_INT(h, 331);
	WF_CHECK_INT(w, 331);
	WF_CHECK_INT(c, 3);
	WF_CHECK_NEAR(255 * meta.scale - meta.mean[0], 1.0, 1e-6); /* tf mode: [-1, 1] */
	WF_CHECK_NEAR(0 * meta.scale - meta.mean[2], -1.0, 1e-6);
	WF_CHECK(wf_model_zoo_info("resnet50", &h, &w, &c, &meta, &err) == 0);
	WF_CHECK_INT(h, 224);
	WF_CHECK(strcmp(meta.channel_order, "BGR") == 0); /* caffe mode */
	WF_CHECK_NEAR(meta.mean[0], 103.939, 1e-4);
	WF_CHECK_NEAR(meta.scale, 1.0, 0);
	WF_CHECK(wf_model_zoo_info("mobilenetv3", &h, &w, &c, &meta, &err) == WF_EINVAL);
	WF_CHECK(strstr(err.msg, "mobilenetv3") != NULL);
	wf_model_meta_free(&meta);
}

/* Batch-norm statistics that make folding do something. */
static void randomize_bn(wf_model *m, uint64_t seed)
{
	wf_rng r;
	wf_rng_seed(&r, seed);
	for (int i = 0; i < m->nlayers; i++) {
		const wf_layer *l = &m->layers[i];
		if (l->type != WF_LAYER_BATCHNORM)
			continue;
		const wf_view *g = &m->views[l->p_gamma], *b = &m->views[l->p_beta];
		const wf_view *mu = &m->views[l->s_mean], *var = &m->views[l->s_var];
		for (size_t k = 0; k < g->count; k++) {
			m->params[g->offset + k] = (float)(0.5 + 0.5 * wf_rng_uniform(&r));
			m->params[b->offset + k] = (float)(0.1 * wf_rng_normal(&r));
			m->state[mu->offset + k] = (float)(0.1 * wf_rng_normal(&r));
			m->state[var->offset + k] = (float)(0.5 + wf_rng_uniform(&r));
		}
	}
}

static int forward(wf_model *m, const float *x, float *logits, float *probs)
{
	wf_exec *ex = NULL;
	wf_err err = {0};
	if (wf_exec_create(&ex, m, cpu, 1, 0, &err)) {
		fprintf(stderr, "exec: %s\n", err.msg);
		return -1;
	}
	int rc = wf_exec_forward(ex, x, 1, 0, 0);
	if (!rc)
		rc = wf_exec_logits(ex, logits);
	if (!rc)
		rc = wf_exec_probs(ex, probs);
	if (rc)
		fprintf(stderr, "forward: %s\n", wf_exec_error(ex));
	wf_exec_free(ex);
	return rc;
}

/* Batch-1 forward of each network at its Keras input size, then the export
 * fold: no batch norm left, the same predictions. */
static void test_forward_and_fold_all_five(void)
{
	const int classes = 1000;
	float *x = NULL, *l0 = malloc(sizeof(float) * classes),
	      *l1 = malloc(sizeof(float) * classes);
	float *p0 = malloc(sizeof(float) * classes), *p1 = malloc(sizeof(float) * classes);
	for (size_t i = 0; i < NAPPS; i++) {
		if (apps[i].big != full)
			continue;
		double t0 = wf_now();
		wf_model *m = build(apps[i].name, 0, classes, 1), *f = NULL;
		WF_CHECK(m != NULL);
		if (!m)
			continue;
		randomize_bn(m, 11 + i);
		size_t n = (size_t)m->in_h * m->in_w * m->in_c;
		x = realloc(x, n * sizeof(float));
		wf_rng r;
		wf_rng_seed(&r, 5);
		for (size_t k = 0; k < n; k++)
			x[k] = (float)(2 * wf_rng_uniform(&r) - 1);
		WF_CHECK_MSG(forward(m, x, l0, p0) == 0, "%s", apps[i].name);
		double scale = 1.0;
		for (int k = 0; k < classes; k++) {
			WF_CHECK_MSG(isfinite(l0[k]), "%s: logit %d is %g", apps[i].name, k, l0[k]);
			scale = fmax(scale, fabs(l0[k]));
		}
		wf_err err = {0};
		int bns = count_type(m, WF_LAYER_BATCHNORM);
		WF_CHECK_MSG(wf_model_fold_count(m) == bns, "%s: fold removes %d of %d batch norms",
			     apps[i].name, wf_model_fold_count(m), bns);
		WF_CHECK_MSG(wf_model_fold_for_inference(m, &f, &err) == 0, "%s: %s", apps[i].name,
			     err.msg);
		if (f) {
			WF_CHECK_INT(count_type(f, WF_LAYER_BATCHNORM), 0);
			WF_CHECK_INT(f->nstate, 0);
			WF_CHECK(forward(f, x, l1, p1) == 0);
			double dl = 0, dp = 0;
			for (int k = 0; k < classes; k++) {
				dl = fmax(dl, fabs(l0[k] - l1[k]) / scale);
				dp = fmax(dp, fabs(p0[k] - p1[k]));
			}
			WF_CHECK_MSG(dl <= 1e-4 && dp <= 1e-4,
				     "%s: folded logits differ by %g (relative), probs by %g",
				     apps[i].name, dl, dp);
		}
		fprintf(stderr,
			"  %-13s %4d layers, %3d batch norms folded, max |logit| %.3g, %.1f s\n",
			apps[i].name, m->nlayers, bns, scale, wf_now() - t0);
		wf_model_free(f);
		wf_model_free(m);
	}
	free(x);
	free(l0);
	free(l1);
	free(p0);
	free(p1);
}

/* One class per quadrant: a bright square on noise. */
static void synth_batch(float *x, int32_t *y, int n, int hw, int classes)
{
	wf_rng r;
	wf_rng_seed(&r, 21);
	for (int i = 0; i < n; i++) {
		y[i] = i % classes;
		int oy = (y[i] / 2) * hw / 2, ox = (y[i] % 2) * hw / 2;
		for (int p = 0; p < hw * hw; p++) {
			int py = p / hw, px = p % hw;
			int in = py >= oy && py < oy + hw / 2 && px >= ox && px < ox + hw / 2;
			for (int c = 0; c < 3; c++)
				x[((size_t)i * hw * hw + p) * 3 + c] =
					(float)((in ? 0.8 : -0.8) + 0.3 * wf_rng_normal(&r));
		}
	}
}

static void train_reduces_loss(const char *name)
{
	const int hw = 64, n = 8, classes = 4, steps = 6;
	wf_model *m = build(name, hw, classes, 1);
	WF_CHECK(m != NULL);
	if (!m)
		return;
	float *x = malloc(sizeof(float) * n * hw * hw * 3);
	int32_t y[8];
	synth_batch(x, y, n, hw, classes);
	wf_exec *ex = NULL;
	wf_err err = {0};
	float *slot_m = calloc(m->nparams, sizeof(float)),
	      *slot_v = calloc(m->nparams, sizeof(float));
	WF_CHECK_MSG(wf_exec_create(&ex, m, cpu, n, 1, &err) == 0, "%s", err.msg);
	wf_optim_cfg cfg;
	wf_optim_cfg_default(&cfg);
	cfg.kind = WF_OPT_ADAM;
	cfg.lr = 1e-3;
	cfg.beta1 = 0.9, cfg.beta2 = 0.999, cfg.eps = 1e-7;
	float first = NAN, last = NAN;
	for (int s = 0; ex && s < steps; s++) {
		float loss = NAN;
		int rc = wf_exec_zero_grads(ex);
		rc = rc ? rc : wf_exec_forward(ex, x, n, 1, (uint64_t)s);
		rc = rc ? rc : wf_exec_loss(ex, y, &loss, NULL);
		rc = rc ? rc : wf_exec_backward(ex, 1.0f / n, NULL, NULL);
		rc = rc ? rc : wf_exec_optim_step(ex, &cfg, s, slot_m, slot_v, 1.0f);
		WF_CHECK_MSG(rc == 0, "%s step %d: %s", name, s, wf_exec_error(ex));
		if (rc)
			break;
		if (s == 0)
			first = loss;
		last = loss;
	}
	/* the loss of the last step, before its update, is already lower */
	WF_CHECK_MSG(isfinite(first) && last < 0.8 * first, "%s: loss %g -> %g", name, first, last);
	fprintf(stderr, "  %s: loss %.4f -> %.4f in %d steps\n", name, first, last, steps);
	wf_exec_free(ex);
	free(slot_m);
	free(slot_v);
	free(x);
	wf_model_free(m);
}

static void test_mobilenetv2_trains(void)
{
	train_reduces_loss("mobilenetv2");
}

static void test_nasnetmobile_trains(void)
{
	train_reduces_loss("nasnetmobile");
}

static void test_no_top_outputs_pooled_features(void)
{
	wf_model *m = build("resnet50", 64, 10, 0);
	WF_CHECK(m != NULL);
	if (!m)
		return;
	WF_CHECK_INT(m->classes, 2048);
	WF_CHECK_INT(m->layers[m->output].type, WF_LAYER_GAP);
	WF_CHECK(wf_model_view(m, "predictions/kernel") == NULL);
	wf_model_free(m);
	m = build("mobilenetv2", 96, 10, 1); /* any input size, as Keras allows */
	WF_CHECK(m != NULL);
	if (m)
		WF_CHECK_INT(m->layers[m->output].oc, 10);
	wf_model_free(m);
}

int main(int argc, char **argv)
{
	wf_err err = {0};
	full = argc > 1 && strcmp(argv[1], "--full") == 0;
	if (wf_backend_create(&cpu, "cpu", 0, &err) && wf_backend_create(&cpu, "ref", 0, &err)) {
		fprintf(stderr, "no backend: %s\n", err.msg);
		return 1;
	}
	WF_RUN(test_param_counts_match_keras);
	if (!full) {
		WF_RUN(test_default_input_and_preprocessing);
		WF_RUN(test_no_top_outputs_pooled_features);
		WF_RUN(test_mobilenetv2_trains);
		WF_RUN(test_nasnetmobile_trains);
	}
	WF_RUN(test_forward_and_fold_all_five);
	wf_backend_free(cpu);
	return wf_test_summary();
}
