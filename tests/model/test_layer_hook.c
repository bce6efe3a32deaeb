/* test_layer_hook.c: the executor's per-layer forward hook
 * (wf_exec_set_layer_hook). A training forward of ResNet-20 and of
 * MobileNetV2 calls it in layer order, once per layer that reads parameters
 * or state, with ranges that together cover every parameter, the first
 * layers at the highest offsets (the reverse layout); the logits and the
 * batch-norm statistics equal a forward without it, bit for bit; a hook
 * that fails stops the forward with its code; cleared, it is called no
 * more. And what it costs: forwards with a no-op hook against none,
 * alternated in the same run, the ratios of the medians and of the fastest
 * (printed, not checked: on a shared machine other work moves both by more
 * than a hook could; bench/RESULTS.md has the figures). */
#include "kernels/ops.h"
#include "model/model.h"
#include "common/util.h"
#include "tests/test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static wf_backend *cpu;

typedef struct calls {
	int n, last, bad_order, fail_at;
	size_t lo_min, hi_max, covered;
	int states;
	size_t first_lo; /* the first layer's lo */
} calls;

static int record(void *arg, int layer, size_t lo, size_t hi, int state)
{
	calls *c = arg;
	if (layer <= c->last)
		c->bad_order++;
	if (c->n == 0)
		c->first_lo = lo;
	c->last = layer;
	c->n++;
	c->lo_min = WF_MIN(c->lo_min, lo);
	c->hi_max = WF_MAX(c->hi_max, hi);
	c->covered += hi - lo;
	c->states += state;
	return c->fail_at == layer ? WF_ETRANSIENT : 0;
}

static int noop(void *arg, int layer, size_t lo, size_t hi, int state)
{
	(void)arg;
	(void)layer;
	(void)lo;
	(void)hi;
	(void)state;
	return 0;
}

static float *noise(const wf_model *m, int n, uint64_t s)
{
	size_t per = (size_t)m->in_h * m->in_w * m->in_c;
	float *x = malloc(sizeof(float) * per * (size_t)n);
	for (size_t i = 0; i < per * (size_t)n; i++) {
		s = s * 6364136223846793005ULL + 1442695040888963407ULL;
		x[i] = (float)((double)(s >> 11) / 9007199254740992.0 * 2.0 - 1.0);
	}
	return x;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static void check_model(const char *name, int size, int batch, int pairs)
{
	wf_err err = {0};
	wf_model *m = NULL;
	wf_exec *ex = NULL;
	WF_CHECK_MSG(wf_model_zoo(&m, name, size, size, 3, 10, &err) == 0, "%s", err.msg);
	if (!m)
		return;
	wf_model_init_params(m, 3);
	WF_CHECK_MSG(wf_exec_create(&ex, m, cpu, batch, 1, &err) == 0, "%s: %s", name, err.msg);
	if (!ex) {
		wf_model_free(m);
		return;
	}
	float *x = noise(m, batch, 9);
	size_t k = (size_t)batch * m->classes;
	float *a = malloc(sizeof(float) * k), *b = malloc(sizeof(float) * k);
	float *sa = malloc(sizeof(float) * (m->nstate + 1)),
	      *s0 = malloc(sizeof(float) * (m->nstate + 1));
	memcpy(s0, m->state, sizeof(float) * m->nstate);

	/* without a hook, then with one: the same logits and statistics */
	WF_CHECK(wf_exec_forward(ex, x, batch, 1, 1) == 0);
	WF_CHECK(wf_exec_logits(ex, a) == 0);
	memcpy(sa, m->state, sizeof(float) * m->nstate);
	memcpy(m->state, s0, sizeof(float) * m->nstate);
	calls c = {.last = 0, .fail_at = -1, .lo_min = (size_t)-1};
	WF_CHECK(wf_exec_set_layer_hook(ex, record, &c) == 0);
	WF_CHECK(wf_exec_forward(ex, x, batch, 1, 1) == 0);
	WF_CHECK(wf_exec_logits(ex, b) == 0);
	WF_CHECK_MSG(memcmp(a, b, sizeof(float) * k) == 0, "%s: logits differ with the hook", name);
	WF_CHECK_MSG(memcmp(sa, m->state, sizeof(float) * m->nstate) == 0,
		     "%s: batch-norm statistics differ with the hook", name);
	WF_CHECK(c.n > 10);
	WF_CHECK_INT(c.bad_order, 0);
	WF_CHECK(c.lo_min == 0 && c.hi_max == m->nparams);
	WF_CHECK_MSG(c.covered == m->nparams, "%s: the ranges cover %zu of %zu floats", name,
		     c.covered, m->nparams);
	WF_CHECK(c.states > 0);
	WF_CHECK(c.first_lo > m->nparams / 2); /* the first layers at the top */

	/* a failing hook stops the forward with its code */
	calls f = {.last = 0, .fail_at = c.last, .lo_min = (size_t)-1};
	WF_CHECK(wf_exec_set_layer_hook(ex, record, &f) == 0);
	WF_CHECK_INT(wf_exec_forward(ex, x, batch, 1, 1), WF_ETRANSIENT);
	WF_CHECK(strstr(wf_exec_error(ex), "hook") != NULL);
	/* cleared: not called */
	calls none = {.last = 0, .fail_at = -1, .lo_min = (size_t)-1};
	WF_CHECK(wf_exec_set_layer_hook(ex, NULL, &none) == 0);
	WF_CHECK(wf_exec_forward(ex, x, batch, 1, 1) == 0);
	WF_CHECK_INT(none.n, 0);

	/* the cost: forwards alternated without and with a no-op hook */
	double *t[2] = {malloc(sizeof(double) * pairs), malloc(sizeof(double) * pairs)};
	for (int i = 0; i < 3; i++) /* warm: oneDNN's primitives, the caches */
		WF_CHECK(wf_exec_forward(ex, x, batch, 1, 1) == 0);
	for (int i = 0; i < pairs; i++)
		for (int h = 0; h < 2; h++) {
			wf_exec_set_layer_hook(ex, h ? noop : NULL, NULL);
			double t0 = wf_now();
			WF_CHECK(wf_exec_forward(ex, x, batch, 1, 1) == 0);
			t[h][i] = wf_now() - t0;
		}
	qsort(t[0], (size_t)pairs, sizeof(double), cmp_double);
	qsort(t[1], (size_t)pairs, sizeof(double), cmp_double);
	double ratio = t[1][pairs / 2] / t[0][pairs / 2], fastest = t[1][0] / t[0][0];
	printf("%s batch %d, %d forwards each way: median %.2f ms without a hook, %.2f ms with "
	       "a no-op hook (%d calls): ratio %.3f; fastest %.2f / %.2f ms: ratio %.3f\n",
	       name, batch, pairs, t[0][pairs / 2] * 1e3, t[1][pairs / 2] * 1e3, c.n, ratio,
	       t[0][0] * 1e3, t[1][0] * 1e3, fastest);
	free(t[0]);
	free(t[1]);
	free(a);
	free(b);
	free(sa);
	free(s0);
	free(x);
	wf_exec_free(ex);
	wf_model_free(m);
}

static void test_resnet20(void)
{
	check_model("resnet20", 32, 16, 21);
}

static void test_mobilenetv2(void)
{
	check_model("mobilenetv2", 96, 4, 9);
}

int main(void)
{
	wf_err err = {0};
	if (wf_backend_create(&cpu, "cpu", 2, &err) != 0) {
		fprintf(stderr, "skip: cpu backend not built: %s\n", err.msg);
		return 77;
	}
	WF_RUN(test_resnet20);
	WF_RUN(test_mobilenetv2);
	wf_backend_free(cpu);
	return wf_test_summary();
}
