/* test_infer_plan.c: the cpu backend's fused inference plans (conv + bias +
 * residual add + relu/relu6 as one primitive, weights kept reordered, bf16
 * activations between convs; int8 after a calibration) give the logits of
 * the unfused forward, on
 * resnet20, mobilenetv2, resnet50 and nasnetmobile with batch norm folded as `weft export` does. */
#include "model/calib.h"
#include "model/fold.h"
#include "kernels/ops.h"
#include "model/model.h"
#include "tests/test.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Largest |a - b| over n logits, relative to max |b|. */
/* How many layers read layer j's output. */
static int readers(const wf_model *m, int j)
{
	int n = 0;
	for (int i = j + 1; i < m->nlayers; i++)
		for (int k = 0; k < m->layers[i].ninputs; k++)
			n += m->layers[i].inputs[k] == j;
	return n;
}

static double rel_diff(const float *a, const float *b, size_t n)
{
	double mx = 1e-30, d = 0;
	for (size_t i = 0; i < n; i++)
		mx = fmax(mx, fabs(b[i]));
	for (size_t i = 0; i < n; i++)
		d = fmax(d, fabs((double)a[i] - b[i]));
	return d / mx;
}

/* n images of uniform noise in [-1, 1) for m, the same on every call. */
static float *noise(const wf_model *m, int n)
{
	size_t per = (size_t)m->in_h * m->in_w * m->in_c;
	float *x = malloc(sizeof(float) * per * (size_t)n);
	uint64_t s = 99;
	for (size_t i = 0; i < per * (size_t)n; i++) {
		s = s * 6364136223846793005ULL + 1442695040888963407ULL;
		x[i] = (float)((double)(s >> 11) / 9007199254740992.0 * 2.0 - 1.0);
	}
	return x;
}

/* Logits of an inference executor (fused) and of a training executor's
 * inference-mode forward (never fused) on the same batch. */
static int logits_pair(wf_backend *be, wf_model *m, int n, float *fused, float *plain, int *nfused)
{
	wf_err err = {0};
	wf_exec *fx = NULL, *px = NULL;
	float *x = noise(m, n);
	int rc = wf_exec_create(&fx, m, be, n, 0, &err);
	if (!rc)
		rc = wf_exec_create(&px, m, be, n, 1, &err);
	WF_CHECK_MSG(rc == 0, "%s", err.msg);
	for (int rep = 0; !rc && rep < 2; rep++) /* twice: reordered weights reused */
		rc = wf_exec_forward(fx, x, n, 0, 0) || wf_exec_logits(fx, fused);
	if (!rc)
		rc = wf_exec_forward(px, x, n, 0, 0) || wf_exec_logits(px, plain);
	WF_CHECK_MSG(rc == 0, "%s / %s", fx ? wf_exec_error(fx) : "", px ? wf_exec_error(px) : "");
	*nfused = fx ? wf_exec_fused(fx) : 0;
	wf_exec_free(fx);
	wf_exec_free(px);
	free(x);
	return rc;
}

/* Pool layers of f with a distinct (input, window): those a plan runs. */
static int distinct_pools(const wf_model *f)
{
	int n = 0;
	for (int i = 0; i < f->nlayers; i++) {
		const wf_layer *l = &f->layers[i];
		int dup = 0;
		for (int k = 0; k < i && !dup; k++) {
			const wf_layer *o = &f->layers[k];
			dup = o->type == l->type && o->inputs[0] == l->inputs[0] &&
			      o->kh == l->kh && o->kw == l->kw && o->sh == l->sh &&
			      o->sw == l->sw && o->same == l->same;
		}
		n += (l->type == WF_LAYER_MAXPOOL || l->type == WF_LAYER_AVGPOOL) && !dup;
	}
	return n;
}

/* Calls of op in one profiled forward of ex. */
static double op_calls(wf_exec *ex, const float *x, int n, const char *op)
{
	wf_backend *be = wf_exec_backend(ex);
	char *text = NULL, *at;
	size_t len = 0;
	double calls = -1;
	FILE *f = open_memstream(&text, &len);
	wf_op_profile_start(be);
	if (f && wf_exec_forward(ex, x, n, 0, 0) == 0) {
		wf_op_profile_print(be, f, 1);
		fflush(f);
		if ((at = strstr(text, op)) != NULL)
			calls = strtod(at + strlen(op), NULL);
	}
	wf_op_profile_stop(be);
	if (f)
		fclose(f);
	free(text);
	return calls;
}

/* The inference plan in precision prec (bf16; int8 on a calibrated model)
 * against the fp32 unfused logits want [k] of the same batch of 3. */
static void check_precision(wf_backend *be, wf_model *f, const char *name, const char *prec,
			    double tol, const float *want, size_t k)
{
	wf_err err = {0};
	wf_exec *ex = NULL;
	const int n = 3;
	float *c = malloc(sizeof(float) * k), *x = noise(f, n);
	wf_backend_set_precision(be, prec, NULL, NULL);
	int rc = wf_exec_create(&ex, f, be, n, 0, &err);
	WF_CHECK_MSG(rc == 0, "%s", err.msg);
	rc = rc ? rc : wf_exec_forward(ex, x, n, 0, 0) || wf_exec_logits(ex, c);
	WF_CHECK_MSG(rc == 0, "%s", ex ? wf_exec_error(ex) : err.msg);
	if (!strcmp(prec, "int8")) {
		WF_CHECK_MSG(ex && wf_exec_int8_convs(ex) > 0, "%s: no conv ran in int8", name);
		/* the images are read where they are (no copy into the executor) */
		WF_CHECK_MSG(ex && op_calls(ex, x, n, "to_device") < 0,
			     "%s int8: the images were copied", name);
		/* the logits' dense layer runs in int8 too, as a 1x1 conv */
		WF_CHECK_MSG(ex && op_calls(ex, x, n, "dense_forward") < 0,
			     "%s int8: the dense layer ran in float", name);
	}
	/* ResNet50's max pool (its padding inside) reads and writes conv1's
	 * tensor type: u8 after a relu, or bf16 */
	const char *want_t = !strcmp(prec, "int8") ? "u8" : "bf16";
	int relus = 0, low = 0, picks = 0, low_picks = 0;
	for (int i = 0; ex && i < f->nlayers; i++) {
		const wf_layer *l = &f->layers[i];
		/* ... and int8: the last block's output, which only the global
		 * average pool reads, stays u8 (its conv adds in place); NASNet's
		 * stem conv, which only the (equal) relus of its reduction cell's
		 * branches read, writes their u8 tensor */
		if (!strcmp(l->name, "pool1_pool") || !strcmp(l->name, "conv1_relu") ||
		    (!strcmp(l->name, "conv5_block3_out") && !strcmp(prec, "int8")) ||
		    (!strcmp(l->name, "stem_conv1") && !strcmp(prec, "int8"))) {
			const char *t = wf_exec_layer_dtype(ex, i);
			WF_CHECK_MSG(t && !strcmp(t, want_t), "%s %s: %s is %s, not %s", name, prec,
				     l->name, t ? t : "?", want_t);
		}
		const char *t = wf_exec_layer_dtype(ex, i);
		relus += l->type == WF_LAYER_RELU;
		low += l->type == WF_LAYER_RELU && t && !strcmp(t, want_t);
		int pick = l->type == WF_LAYER_AVGPOOL && l->kh == 1 && l->kw == 1;
		picks += pick;
		low_picks += pick && t && !strcmp(t, want_t);
	}
	/* the relus in front of NASNet's separable convs convert the branch sums
	 * to u8 or bf16 once for the convs that read them (180 of its 192 relus
	 * are u8 or bf16 tensors; 80, those inside a conv, without that) */
	if (!strcmp(name, "nasnetmobile")) {
		WF_CHECK_MSG(low >= 150, "%s %s: %d of %d relus in %s", name, prec, low, relus,
			     want_t);
		/* equal pools of one input run once (two 3x3 average pools in each
		 * normal cell, two 3x3 max pools in each reduction cell); in int8
		 * the add after a normal cell's average pool computes it, for the
		 * concat that reads the sum as u8 (the pool has no tensor) */
		int in_adds = 0;
		for (int i = 0; ex && i < f->nlayers; i++)
			in_adds += f->layers[i].type == WF_LAYER_AVGPOOL &&
				   !wf_exec_layer_dtype(ex, i);
		double calls = ex ? op_calls(ex, x, n, "pool_forward") : -1;
		WF_CHECK_MSG(calls + in_adds == distinct_pools(f) &&
				     (in_adds > 0) == !strcmp(prec, "int8"),
			     "%s %s: %g pools ran, %d computed by their adds, %d distinct", name,
			     prec, calls, in_adds, distinct_pools(f));
		printf("  %s %s: %g pools ran, %d computed by their adds\n", name, prec, calls,
		       in_adds);
		/* the adjust blocks' croppings run inside their 1x1 pools (only the
		 * four reduction cells' paddings read by two pools run), and in
		 * int8 those pools pick u8 values of the relu before them */
		calls = ex ? op_calls(ex, x, n, "pad_forward") : -1;
		WF_CHECK_MSG(calls == 4, "%s %s: %g paddings and croppings ran, not 4", name, prec,
			     calls);
		if (!strcmp(prec, "int8")) {
			WF_CHECK_MSG(picks > 0 && low_picks == picks,
				     "%s int8: %d of %d 1x1 pools in u8", name, low_picks, picks);
			/* a concat that only the next cells' relus read writes their
			 * u8 tensor: the 16 cells' outputs but the last (read by the
			 * relu before the global pool), and the stem's adjust block's
			 * (its reduction cell reads it through relus only) */
			calls = ex ? op_calls(ex, x, n, "concat_u8") : -1;
			WF_CHECK_MSG(calls == 16, "%s int8: %g concats wrote u8, not 16", name,
				     calls);
			/* the branch sums that only such a concat reads arrive u8 in
			 * its scale (their conv's or add's output), for it to copy */
			int sums = 0, u8_sums = 0;
			for (int cc = 0; ex && cc < f->nlayers; cc++) {
				const char *ct = wf_exec_layer_dtype(ex, cc);
				if (f->layers[cc].type != WF_LAYER_CONCAT || !ct ||
				    strcmp(ct, "u8"))
					continue;
				for (int e = 0; e < f->layers[cc].ninputs; e++) {
					int in = f->layers[cc].inputs[e];
					if (f->layers[in].type != WF_LAYER_ADD ||
					    readers(f, in) != 1)
						continue;
					const char *t = wf_exec_layer_dtype(ex, in);
					sums++;
					u8_sums += t && !strcmp(t, "u8");
				}
			}
			WF_CHECK_MSG(sums > 40 && u8_sums == sums,
				     "%s int8: %d of %d branch sums read by u8 concats are u8",
				     name, u8_sums, sums);
			printf("  %s int8: %d of %d branch sums u8 for their concat\n", name,
			       u8_sums, sums);
		}
	}
	printf("  %s %s: %d of %d relus in %s\n", name, prec, low, relus, want_t);
	double d = rel_diff(c, want, k);
	WF_CHECK_MSG(!rc && d < tol, "%s %s: differs from fp32 by %.3g", name, prec, d);
	printf("  %s: %s rel diff %.2g\n", name, prec, d);
	fflush(stdout);
	wf_backend_set_precision(be, "fp32", NULL, NULL);
	wf_exec_free(ex);
	free(x);
	free(c);
}

static void check_model(wf_backend *be, const char *name)
{
	wf_err err = {0};
	wf_model *m = NULL, *f = NULL;
	WF_CHECK_MSG(wf_model_zoo(&m, name, 32, 32, 3, 10, &err) == 0, "%s", err.msg);
	if (!m)
		return;
	wf_model_init_params(m, 7);
	/* no zero-initialised layer may hide a path: perturb every parameter */
	uint64_t r = 5;
	for (size_t i = 0; i < m->nparams; i++) {
		r = r * 6364136223846793005ULL + 1442695040888963407ULL;
		m->params[i] += 0.05f * (float)((double)(r >> 11) / 9007199254740992.0 - 0.5);
	}
	/* non-trivial running statistics, so the fold changes the weights */
	for (int i = 0; i < m->nlayers; i++) {
		const wf_layer *l = &m->layers[i];
		if (l->type != WF_LAYER_BATCHNORM)
			continue;
		float *mean = m->state + m->views[l->s_mean].offset;
		float *var = m->state + m->views[l->s_var].offset;
		for (int c = 0; c < l->oc; c++)
			mean[c] = 0.02f * (float)(c % 3), var[c] = 0.8f + 0.1f * (float)(c % 4);
	}
	WF_CHECK_MSG(wf_model_fold_for_inference(m, &f, &err) == 0, "%s", err.msg);
	const int n = 3;
	size_t k = (size_t)n * f->classes;
	float *a = malloc(sizeof(float) * k), *b = malloc(sizeof(float) * k);
	int nf = 0;
	if (logits_pair(be, f, n, a, b, &nf) == 0) {
		WF_CHECK_MSG(nf > 0, "%s: nothing was fused", name);
		double d = rel_diff(a, b, k);
		WF_CHECK_MSG(d < 1e-4, "%s fp32: fused differs from unfused by %.3g", name, d);
		WF_CHECK_MSG(fabs(b[0]) > 1e-3 && a[0] != a[1], "%s: degenerate logits", name);
		printf("  %s: %d layers fused, fp32 rel diff %.2g (logit %.3g)\n", name, nf, d,
		       b[0]);
		fflush(stdout);
	}
	if (be->caps & WF_CAP_BF16) {
		check_precision(be, f, name, "bf16", 0.08, b, k);
		/* calibration reads float tensors: refused in bf16 */
		wf_calib *c16 = NULL;
		WF_CHECK(wf_backend_set_precision(be, "bf16", NULL, NULL) == 0);
		WF_CHECK_INT(wf_calib_create(&c16, f, be, n, WF_CALIB_MAX, 0, &err), WF_EINVAL);
		WF_CHECK(c16 == NULL && strstr(err.msg, "bf16") != NULL);
		wf_backend_set_precision(be, "fp32", NULL, NULL);
	}
	/* int8 after a calibration on the same batch (the max of each tensor) */
	wf_calib *cal = NULL;
	float *x = noise(f, n);
	int rc = wf_calib_create(&cal, f, be, n, WF_CALIB_MAX, 0, &err);
	rc = rc ? rc : wf_calib_add(cal, x, n, &err);
	rc = rc ? rc : wf_calib_finish(cal, &err);
	WF_CHECK_MSG(rc == 0, "%s: calibration: %s", name, err.msg);
	wf_calib_free(cal);
	free(x);
	/* every conv has a range; a zero padding that its conv applies keeps no
	 * tensor of its own (the conv reads the input's range): ResNet50's
	 * conv1_pad has none, its pool1_pad (read by a max pool) has one */
	for (int i = 1; i < f->nlayers; i++) {
		const wf_layer *l = &f->layers[i];
		if (l->type == WF_LAYER_CONV2D || !strcmp(l->name, "pool1_pad"))
			WF_CHECK_MSG(l->has_range, "%s: %s has no range", name, l->name);
		if (!strcmp(l->name, "conv1_pad"))
			WF_CHECK_MSG(!l->has_range, "%s: conv1_pad has a range", name);
	}
	int int8 = wf_backend_caps_of(be).int8; /* int8 convs where the CPU has VNNI */
	if (int8)
		check_precision(be, f, name, "int8", 0.1, b, k);
	free(a);
	free(b);
	wf_model_free(f);
	wf_model_free(m);
	if (!int8)
		WF_SKIP("%s: int8 not checked: this CPU has no int8 convolutions (no VNNI)", name);
}

static wf_backend *cpu;

static void test_resnet20_fused_equals_unfused(void)
{
	check_model(cpu, "resnet20");
}

static void test_mobilenetv2_fused_equals_unfused(void)
{
	check_model(cpu, "mobilenetv2");
}

/* conv1_pad (3 on each side) becomes conv1's padding; pool1_pad the max
 * pool's (its input is a relu's). */
static void test_resnet50_fused_equals_unfused(void)
{
	check_model(cpu, "resnet50");
}

/* asymmetric zero paddings before strided separable convs */
static void test_nasnetmobile_fused_equals_unfused(void)
{
	check_model(cpu, "nasnetmobile");
}

/* An inference executor keeps weights reordered; after the parameters change,
 * wf_exec_params_from_host makes it use the new ones. */
static void test_new_params_are_used_after_params_from_host(void)
{
	wf_err err = {0};
	wf_model *m = NULL;
	wf_exec *ex = NULL;
	WF_CHECK(wf_model_zoo(&m, "smallcnn", 8, 8, 3, 4, &err) == 0);
	if (!m)
		return;
	wf_model_init_params(m, 1);
	WF_CHECK(wf_exec_create(&ex, m, cpu, 1, 0, &err) == 0);
	float x[8 * 8 * 3], a[4], b[4];
	for (int i = 0; i < 8 * 8 * 3; i++)
		x[i] = (float)(i % 7) * 0.1f;
	WF_CHECK(wf_exec_forward(ex, x, 1, 0, 0) == 0 && wf_exec_logits(ex, a) == 0);
	wf_model_init_params(m, 2);
	WF_CHECK(wf_exec_params_from_host(ex) == 0);
	WF_CHECK(wf_exec_forward(ex, x, 1, 0, 0) == 0 && wf_exec_logits(ex, b) == 0);
	WF_CHECK(memcmp(a, b, sizeof(a)) != 0);
	wf_exec_free(ex);
	wf_model_free(m);
}

int main(void)
{
	wf_err err = {0};
	if (wf_backend_create(&cpu, "cpu", 2, &err) != 0) {
		fprintf(stderr, "skip: cpu backend not built: %s\n", err.msg);
		return 77;
	}
	WF_RUN(test_resnet20_fused_equals_unfused);
	WF_RUN(test_mobilenetv2_fused_equals_unfused);
	WF_RUN(test_resnet50_fused_equals_unfused);
	WF_RUN(test_nasnetmobile_fused_equals_unfused);
	WF_RUN(test_new_params_are_used_after_params_from_host);
	wf_backend_free(cpu);
	return wf_test_summary();
}
