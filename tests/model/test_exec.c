/* test_exec.c: the executor on the ref backend. Whole-network gradients
 * against central finite differences (residual adds, batch norm, concat of a
 * tensor with itself, dropout), values computed by hand, batches smaller
 * than max_batch, the ready() sweep, gradient accumulation, memory reuse of
 * inference executors, errors; and cpu and cuda against ref where built. */
#include "kernels/ops.h"
#include "model/model.h"
#include "tests/model/graphs.h"
#include "tests/test.h"

#include "common/util.h"

#include <stdint.h>

static wf_backend *ref;

static void random_fill(float *p, size_t n, uint64_t seed, double scale)
{
	wf_rng r;
	wf_rng_seed(&r, seed);
	for (size_t i = 0; i < n; i++)
		p[i] = (float)(scale * wf_rng_normal(&r));
}

static wf_model *zoo(const char *name, int h, int w, int c, int classes)
{
	wf_model *m = NULL;
	wf_err err = {0};
	if (wf_model_zoo(&m, name, h, w, c, classes, &err))
		fprintf(stderr, "%s\n", err.msg);
	return m;
}

/* The finite-difference tolerances below were set for the initialisation
 * weft used before Keras's defaults: conv kernels plain (untruncated) He
 * normal drawn as then. Reproduced here so the checks see the same values. */
static void init_legacy(wf_model *m, uint64_t seed)
{
	wf_model_init_params(m, seed);
	for (int i = 0; i < m->nlayers; i++) {
		const wf_layer *l = &m->layers[i];
		if (l->type != WF_LAYER_CONV2D || l->p_kernel < 0)
			continue;
		const wf_view *v = &m->views[l->p_kernel];
		uint64_t h = 1469598103934665603ULL;
		for (const char *c = v->name; *c; c++)
			h = (h ^ (unsigned char)*c) * 1099511628211ULL;
		wf_rng r;
		wf_rng_seed(&r, wf_hash3(seed, h, 0));
		double sd = sqrt(2.0 / ((double)v->shape[0] * v->shape[1] * v->shape[2]));
		for (size_t k = 0; k < v->count; k++)
			m->params[v->offset + k] = (float)(sd * wf_rng_normal(&r));
	}
}

static wf_model *parse(const char *json)
{
	wf_model *m = NULL;
	wf_err err = {0};
	if (wf_model_from_json(&m, json, &err))
		fprintf(stderr, "%s\n", err.msg);
	else
		init_legacy(m, 3);
	return m;
}

static wf_exec *exec_new(wf_model *m, wf_backend *be, int max_batch, int training)
{
	wf_exec *ex = NULL;
	wf_err err = {0};
	if (wf_exec_create(&ex, m, be, max_batch, training, &err))
		fprintf(stderr, "exec_create: %s\n", err.msg);
	return ex;
}

/* Mean loss of a training-mode forward (fixed dropout seed). */
static double train_loss(wf_exec *ex, const float *x, const int32_t *y, int n)
{
	float loss = NAN;
	if (wf_exec_forward(ex, x, n, 1, 77) || wf_exec_loss(ex, y, &loss, NULL))
		fprintf(stderr, "%s\n", wf_exec_error(ex));
	return loss;
}

/* Backward's gradients of the mean loss against central differences, for the
 * few largest-gradient elements of each named view. */
static void check_gradients(wf_model *m, const char *const *views, int nviews, int n)
{
	wf_exec *ex = exec_new(m, ref, n, 1);
	WF_CHECK(ex != NULL);
	if (!ex)
		return;
	size_t in = (size_t)m->in_h * m->in_w * m->in_c;
	float *x = malloc(sizeof(float) * in * n);
	int32_t *y = malloc(sizeof(int32_t) * n);
	float *g = malloc(sizeof(float) * m->nparams);
	random_fill(x, in * n, 11, 1.0);
	for (int i = 0; i < n; i++)
		y[i] = i % m->classes;
	WF_CHECK(wf_exec_zero_grads(ex) == 0);
	train_loss(ex, x, y, n);
	WF_CHECK_MSG(wf_exec_backward(ex, 1.0f / n, NULL, NULL) == 0, "%s", wf_exec_error(ex));
	memcpy(g, wf_exec_grads(ex), sizeof(float) * m->nparams);
	float *p = wf_exec_params_begin(ex); /* finite differences, in place */
	int checked = 0;
	for (int v = 0; v < nviews; v++) {
		const wf_view *vw = wf_model_view(m, views[v]);
		WF_CHECK_MSG(vw && vw->trainable, "no view %s", views[v]);
		if (!vw)
			continue;
		double gmax = 0;
		for (size_t k = 0; k < vw->count; k++)
			gmax = fmax(gmax, fabs(g[vw->offset + k]));
		WF_CHECK_MSG(gmax > 0, "%s: all gradients are zero", views[v]);
		/* the 3 largest, which finite differences resolve best */
		size_t pick[3] = {0, 0, 0};
		for (int t = 0; t < 3; t++) {
			double best = -1;
			for (size_t k = 0; k < vw->count; k++) {
				double a = fabs(g[vw->offset + k]);
				int taken = 0;
				for (int u = 0; u < t; u++)
					taken |= pick[u] == k;
				if (!taken && a > best)
					best = a, pick[t] = k;
			}
		}
		for (int t = 0; t < 3 && t < (int)vw->count; t++) {
			size_t j = vw->offset + pick[t];
			float saved = p[j];
			double h = 5e-4 * fmax(1.0, fabs(saved));
			p[j] = (float)(saved + h);
			double hp = (double)p[j] - saved;
			double lp = train_loss(ex, x, y, n);
			p[j] = (float)(saved - h);
			double hm = saved - (double)p[j];
			double lm = train_loss(ex, x, y, n);
			p[j] = saved;
			double fd = (lp - lm) / (hp + hm), an = g[j];
			double tol = 2e-4 + 3e-2 * fmax(fabs(an), fabs(fd));
			WF_CHECK_MSG(fabs(an - fd) <= tol,
				     "%s[%zu]: backward %.6g, finite diff %.6g", views[v], pick[t],
				     an, fd);
			checked++;
		}
	}
	wf_exec_params_end(ex);
	WF_CHECK(checked > 0);
	free(x);
	free(y);
	free(g);
	wf_exec_free(ex);
}

static void test_resnet20_gradients_match_finite_differences(void)
{
	wf_model *m = zoo("resnet20", 8, 8, 3, 4);
	WF_CHECK(m != NULL);
	if (!m)
		return;
	init_legacy(m, 5);
	/* BN affine parameters away from 1/0, so their gradients are generic */
	for (int i = 0; i < m->nviews; i++) {
		const wf_view *v = &m->views[i];
		if (v->trainable && (strstr(v->name, "/gamma") || strstr(v->name, "/beta")))
			random_fill(m->params + v->offset, v->count, (uint64_t)i, 0.3);
		if (v->trainable && strstr(v->name, "/gamma"))
			for (size_t k = 0; k < v->count; k++)
				m->params[v->offset + k] += 1.0f;
	}
	static const char *const views[] = {
		"conv1/kernel",
		"conv1_bn/gamma",
		"conv1_bn/beta",
		"stage1_block1_conv1/kernel",
		"stage1_block3_conv2_bn/gamma",
		"stage2_block1_conv1/kernel",
		"stage2_block1_shortcut/kernel",
		"stage2_block1_shortcut_bn/beta",
		"stage3_block2_conv2/kernel",
		"logits/kernel",
		"logits/bias",
	};
	check_gradients(m, views, (int)WF_ARRAY_LEN(views), 4);
	wf_model_free(m);
}

static void test_smallcnn_gradients_match_finite_differences(void)
{
	wf_model *m = zoo("smallcnn", 8, 8, 3, 5);
	WF_CHECK(m != NULL);
	if (!m)
		return;
	static const char *const views[] = {"conv1/kernel",  "conv1/bias",    "conv2/kernel",
					    "dense1/kernel", "logits/kernel", "logits/bias"};
	check_gradients(m, views, (int)WF_ARRAY_LEN(views), 3);
	wf_model_free(m);
}

/* Every layer type; r1 feeds a conv, an add and (twice) a concat. */
static void test_all_layer_types_gradients_match_finite_differences(void)
{
	wf_model *m = parse(kitchen_sink);
	WF_CHECK(m != NULL);
	if (!m)
		return;
	static const char *const views[] = {"c1/kernel", "c1/bias",   "bn1/gamma",
					    "bn1/beta",	 "dw/kernel", "d2/kernel",
					    "d2/bias",	 "bn2/gamma", "logits/kernel"};
	check_gradients(m, views, (int)WF_ARRAY_LEN(views), 4);
	wf_model_free(m);
}

/* input [1,2,2] -> flatten -> dense 3, checked against arithmetic by hand. */
static void test_dense_logits_loss_and_accuracy_by_hand(void)
{
	wf_model *m =
		parse("{\"format\": 1, \"input_shape\": [1, 2, 2], \"classes\": 3, "
		      "\"output\": \"fc\", \"layers\": [{\"name\": \"in\", \"type\": "
		      "\"input\"}, {\"name\": \"f\", \"type\": \"flatten\", \"inputs\": "
		      "[\"in\"]}, {\"name\": \"fc\", \"type\": \"dense\", \"inputs\": [\"f\"], "
		      "\"config\": {\"units\": 3}}]}");
	WF_CHECK(m != NULL);
	if (!m)
		return;
	wf_exec *ex = exec_new(m, ref, 2, 1);
	const wf_view *k = wf_model_view(m, "fc/kernel"), *b = wf_model_view(m, "fc/bias");
	for (int i = 0; i < 12; i++)
		m->params[k->offset + i] = 0.1f * (float)(i - 5);
	for (int i = 0; i < 3; i++)
		m->params[b->offset + i] = 0.5f * (float)i;
	float x[8] = {1, 2, 3, 4, -1, 0, 0.5f, 2};
	int32_t y[2] = {2, 1};
	float logits[6], probs[6], loss;
	int correct = -1;
	WF_CHECK(wf_exec_forward(ex, x, 2, 0, 0) == 0);
	WF_CHECK(wf_exec_logits(ex, logits) == 0);
	WF_CHECK(wf_exec_probs(ex, probs) == 0);
	WF_CHECK(wf_exec_loss(ex, y, &loss, &correct) == 0);
	double want_loss = 0;
	for (int s = 0; s < 2; s++) {
		double z[3], zmax = -1e30, sum = 0;
		for (int o = 0; o < 3; o++) {
			z[o] = 0.5 * o;
			for (int i = 0; i < 4; i++)
				z[o] += (double)x[s * 4 + i] * (0.1 * ((i * 3 + o) - 5));
			WF_CHECK_NEAR(logits[s * 3 + o], z[o], 1e-5);
			zmax = fmax(zmax, z[o]);
		}
		for (int o = 0; o < 3; o++)
			sum += exp(z[o] - zmax);
		for (int o = 0; o < 3; o++)
			WF_CHECK_NEAR(probs[s * 3 + o], exp(z[o] - zmax) / sum, 1e-6);
		want_loss += -(z[y[s]] - zmax - log(sum)) / 2;
	}
	WF_CHECK_NEAR(loss, want_loss, 1e-5);
	/* logits (1, 2.5, 4) predict label 2; (1.35, 2, 2.65) predict 2, not label 1 */
	WF_CHECK_INT(correct, 1);
	wf_exec_free(ex);
	wf_model_free(m);
}

/* n < max_batch gives each sample the same logits as the full batch (inference). */
static void test_smaller_batch_matches(void)
{
	wf_model *m = zoo("resnet20", 8, 8, 3, 10);
	wf_exec *ex = m ? exec_new(m, ref, 6, 0) : NULL;
	WF_CHECK(ex != NULL);
	if (!ex) {
		wf_model_free(m);
		return;
	}
	size_t in = 8 * 8 * 3;
	float x[6 * 8 * 8 * 3], full[60], part[60], again[60];
	random_fill(x, 6 * in, 21, 1.0);
	WF_CHECK(wf_exec_forward(ex, x, 6, 0, 0) == 0 && wf_exec_logits(ex, full) == 0);
	WF_CHECK(wf_exec_forward(ex, x + 2 * in, 3, 0, 0) == 0 && wf_exec_logits(ex, part) == 0);
	WF_CHECK(memcmp(full + 20, part, sizeof(float) * 30) == 0);
	WF_CHECK(wf_exec_forward(ex, x, 6, 0, 0) == 0 && wf_exec_logits(ex, again) == 0);
	WF_CHECK(memcmp(full, again, sizeof(float) * 60) == 0);
	wf_exec_free(ex);
	wf_model_free(m);
}

/* An inference executor reuses activation memory; its outputs must equal
 * those of a training executor (which keeps everything) in inference mode. */
static void test_inference_memory_reuse_is_safe(void)
{
	const char *names[] = {"resnet20", "kitchen"};
	for (int t = 0; t < 2; t++) {
		wf_model *m = t == 0 ? zoo("resnet20", 8, 8, 3, 10) : parse(kitchen_sink);
		WF_CHECK(m != NULL);
		if (!m)
			continue;
		wf_exec *a = exec_new(m, ref, 4, 0), *b = exec_new(m, ref, 4, 1);
		size_t in = (size_t)m->in_h * m->in_w * m->in_c;
		float *x = malloc(sizeof(float) * in * 4), la[40], lb[40];
		random_fill(x, in * 4, 5, 1.0);
		WF_CHECK(a && b);
		if (a && b) {
			WF_CHECK(wf_exec_forward(a, x, 4, 0, 0) == 0 && wf_exec_logits(a, la) == 0);
			WF_CHECK(wf_exec_forward(b, x, 4, 0, 0) == 0 && wf_exec_logits(b, lb) == 0);
			WF_CHECK_MSG(memcmp(la, lb, sizeof(float) * 4 * m->classes) == 0, "%s",
				     names[t]);
		}
		free(x);
		wf_exec_free(a);
		wf_exec_free(b);
		wf_model_free(m);
	}
}

typedef struct ready_log {
	size_t seen[256];
	int calls;
} ready_log;

static void on_ready(void *arg, size_t done)
{
	ready_log *r = arg;
	if (r->calls < 256)
		r->seen[r->calls] = done;
	r->calls++;
}

static void test_ready_sweep_is_monotonic_and_complete(void)
{
	wf_model *m = zoo("resnet20", 8, 8, 3, 10);
	wf_exec *ex = m ? exec_new(m, ref, 2, 1) : NULL;
	WF_CHECK(ex != NULL);
	if (!ex) {
		wf_model_free(m);
		return;
	}
	float x[2 * 8 * 8 * 3];
	int32_t y[2] = {3, 7};
	random_fill(x, WF_ARRAY_LEN(x), 8, 1.0);
	ready_log r = {{0}, 0};
	train_loss(ex, x, y, 2);
	WF_CHECK(wf_exec_backward(ex, 0.5f, on_ready, &r) == 0);
	int owners = 0;
	for (int i = 0; i < m->nlayers; i++)
		owners += m->layers[i].p_kernel >= 0 || m->layers[i].p_gamma >= 0;
	WF_CHECK_INT(r.calls, owners);
	for (int i = 1; i < r.calls && i < 256; i++)
		WF_CHECK(r.seen[i] > r.seen[i - 1]);
	WF_CHECK_INT(r.seen[r.calls - 1], m->nparams);
	/* the first range completed is the logits layer's, at offset 0 */
	const wf_view *lb = wf_model_view(m, "logits/bias");
	WF_CHECK_INT(r.seen[0], lb->offset + lb->count);
	wf_exec_free(ex);
	wf_model_free(m);
}

static void test_gradients_accumulate_until_zeroed(void)
{
	wf_model *m = zoo("smallcnn", 8, 8, 3, 4);
	wf_exec *ex = m ? exec_new(m, ref, 2, 1) : NULL;
	WF_CHECK(ex != NULL);
	if (!ex) {
		wf_model_free(m);
		return;
	}
	float x[2 * 8 * 8 * 3];
	int32_t y[2] = {0, 3};
	random_fill(x, WF_ARRAY_LEN(x), 9, 1.0);
	size_t np = m->nparams;
	float *once = malloc(sizeof(float) * np);
	WF_CHECK(wf_exec_zero_grads(ex) == 0);
	train_loss(ex, x, y, 2);
	WF_CHECK(wf_exec_backward(ex, 0.5f, NULL, NULL) == 0);
	memcpy(once, wf_exec_grads(ex), sizeof(float) * np);
	train_loss(ex, x, y, 2);
	WF_CHECK(wf_exec_backward(ex, 0.5f, NULL, NULL) == 0);
	int bad = 0;
	for (size_t i = 0; i < np; i++)
		bad += fabsf(wf_exec_grads(ex)[i] - 2 * once[i]) > 1e-6f * (1 + fabsf(once[i]));
	WF_CHECK_INT(bad, 0);
	WF_CHECK(wf_exec_zero_grads(ex) == 0);
	bad = 0;
	for (size_t i = 0; i < np; i++)
		bad += wf_exec_grads(ex)[i] != 0.0f;
	WF_CHECK_INT(bad, 0);
	free(once);
	wf_exec_free(ex);
	wf_model_free(m);
}

static void test_misuse_fails_with_a_reason(void)
{
	wf_model *m = zoo("mlp", 4, 4, 1, 3);
	wf_exec *inf = m ? exec_new(m, ref, 2, 0) : NULL, *tr = m ? exec_new(m, ref, 2, 1) : NULL;
	WF_CHECK(inf && tr);
	if (inf && tr) {
		float x[3 * 16] = {0};
		int32_t bad[2] = {0, 3};
		WF_CHECK(wf_exec_forward(inf, x, 3, 0, 0) == WF_EINVAL);
		WF_CHECK(strstr(wf_exec_error(inf), "batch 3") != NULL);
		WF_CHECK(wf_exec_forward(inf, x, 2, 1, 0) == WF_EINVAL);
		WF_CHECK(wf_exec_backward(inf, 1, NULL, NULL) == WF_EINVAL);
		WF_CHECK(wf_exec_backward(tr, 1, NULL, NULL) == WF_EINVAL); /* no forward yet */
		WF_CHECK(wf_exec_forward(tr, x, 2, 0, 0) == 0);
		WF_CHECK(wf_exec_loss(tr, bad, NULL, NULL) == WF_EINVAL);
		WF_CHECK(strstr(wf_exec_error(tr), "labels[1] = 3") != NULL);
		bad[1] = 2;
		WF_CHECK(wf_exec_loss(tr, bad, NULL, NULL) == 0);
		WF_CHECK(wf_exec_backward(tr, 1, NULL, NULL) == WF_EINVAL); /* inference forward */
		WF_CHECK(strstr(wf_exec_error(tr), "inference") != NULL);
	}
	wf_exec *none = NULL;
	wf_err err = {0};
	if (m)
		WF_CHECK(wf_exec_create(&none, m, ref, 0, 0, &err) == WF_EINVAL && !none);
	wf_exec_free(inf);
	wf_exec_free(tr);
	wf_model_free(m);
}

/* Largest |a - b| relative to the largest |b|, with an absolute floor: the
 * gradient of a bias that feeds batch norm is zero up to rounding. */
static double max_rel_diff(const float *a, const float *b, size_t n)
{
	double mx = 1e-4, d = 0;
	for (size_t i = 0; i < n; i++) {
		mx = fmax(mx, fabs(b[i]));
		d = fmax(d, fabs((double)a[i] - b[i]));
	}
	return d / mx;
}

/* Backend `name` at precision prec through the executor gives ref's logits,
 * loss and gradients: fp32 each view within tol of its largest value (for
 * cuda this also runs the executor's device-memory path); bf16 all gradients
 * within tol in relative L2 (batch norm over 16 values per channel magnifies
 * bf16's rounding: a resnet20 at 8x8 lands near 0.3 with or without bf16
 * tensors between its ops; a broken conversion gives 1 or more). Where the
 * backend has training fusions, resnet20's relus run inside its batch norms,
 * and in bf16 its conv -> batch norm (-> relu) -> conv or add chains keep bf16
 * tensors (both convs of each block and the projection shortcuts). */
static void compare_with_ref(const char *name, const char *prec, double tol)
{
	if (!strstr(wf_backend_list(), name))
		WF_SKIP("%s backend not built (built: %s)", name, wf_backend_list());
	wf_backend *be = NULL;
	wf_err err = {0};
	if (wf_backend_create(&be, name, 2, &err))
		WF_SKIP("%s backend unusable: %s", name, err.msg);
	const char *used = NULL;
	wf_backend_set_precision(be, prec, &used, NULL);
	if (strcmp(used, prec) != 0) {
		wf_backend_free(be);
		WF_SKIP("%s has no %s here (runs %s)", name, prec, used);
	}
	int bf16 = strcmp(prec, "bf16") == 0;
	/* padnet: a zero padding whose input needs a gradient, read by a strided
	 * conv (MobileNetV2's pattern) */
	static const char *const padnet =
		"{\"format\": 1, \"input_shape\": [9, 9, 3], \"classes\": 10, \"output\": \"fc\","
		" \"layers\": ["
		" {\"name\": \"image\", \"type\": \"input\", \"inputs\": []},"
		" {\"name\": \"c0\", \"type\": \"conv2d\", \"inputs\": [\"image\"], \"config\": "
		"{\"filters\": 8, \"kernel_size\": 3, \"padding\": \"same\"}},"
		" {\"name\": \"b0\", \"type\": \"batchnorm\", \"inputs\": [\"c0\"]},"
		" {\"name\": \"r0\", \"type\": \"relu\", \"inputs\": [\"b0\"]},"
		" {\"name\": \"pad\", \"type\": \"zeropad\", \"inputs\": [\"r0\"], \"config\": "
		"{\"padding\": [[0, 1], [1, 1]]}},"
		" {\"name\": \"c1\", \"type\": \"conv2d\", \"inputs\": [\"pad\"], \"config\": "
		"{\"filters\": 8, \"kernel_size\": 3, \"strides\": 2, \"padding\": \"valid\"}},"
		" {\"name\": \"g\", \"type\": \"gap\", \"inputs\": [\"c1\"]},"
		" {\"name\": \"fc\", \"type\": \"dense\", \"inputs\": [\"g\"], \"config\": "
		"{\"units\": 10}}]}";
	const char *names[] = {"resnet20", "smallcnn", "kitchen", "padnet"};
	for (int t = 0; t < 4; t++) {
		wf_model *m = t == 2   ? parse(kitchen_sink)
			      : t == 3 ? parse(padnet)
				       : zoo(names[t], 8, 8, 3, 10);
		if (!m) {
			WF_CHECK(0);
			continue;
		}
		int n = 4;
		wf_exec *a = exec_new(m, ref, n, 1), *b = exec_new(m, be, n, 1);
		size_t in = (size_t)m->in_h * m->in_w * m->in_c, K = (size_t)m->classes;
		float *x = malloc(sizeof(float) * in * n), *ga = malloc(sizeof(float) * m->nparams);
		float *gb = malloc(sizeof(float) * m->nparams);
		float la[40], lb[40], lossa, lossb;
		int32_t y[4] = {1, 2, 3, 4};
		random_fill(x, in * n, 4, 1.0);
		WF_CHECK(a && b);
		if (a && b) {
			WF_CHECK(wf_exec_forward(a, x, n, 0, 0) == 0 && wf_exec_logits(a, la) == 0);
			WF_CHECK_MSG(wf_exec_forward(b, x, n, 0, 0) == 0, "%s", wf_exec_error(b));
			WF_CHECK(wf_exec_logits(b, lb) == 0);
			WF_CHECK_MSG(max_rel_diff(lb, la, n * K) < (bf16 ? 0.05 : 1e-4),
				     "%s %s inference logits", names[t], prec);
			wf_exec_zero_grads(a);
			wf_exec_zero_grads(b);
			lossa = (float)train_loss(a, x, y, n);
			WF_CHECK(wf_exec_backward(a, 1.0f / n, NULL, NULL) == 0);
			memcpy(ga, wf_exec_grads(a), sizeof(float) * m->nparams);
			lossb = (float)train_loss(b, x, y, n);
			WF_CHECK_MSG(wf_exec_backward(b, 1.0f / n, NULL, NULL) == 0, "%s",
				     wf_exec_error(b));
			WF_CHECK(wf_op_to_host(be, gb, wf_exec_grads(b),
					       sizeof(float) * m->nparams) == 0);
			WF_CHECK_NEAR(lossb, lossa, (bf16 ? 0.05 : 1e-4) * (1 + fabs(lossa)));
			double worst = 0;
			for (int v = 0; v < m->nviews; v++) {
				const wf_view *w = &m->views[v];
				if (!w->trainable)
					continue;
				double d = max_rel_diff(gb + w->offset, ga + w->offset, w->count);
				worst = fmax(worst, d);
				WF_CHECK_MSG(bf16 || d < tol,
					     "%s on %s: %s gradient differs by %.3g", names[t],
					     name, w->name, d);
			}
			double e2 = 0, g2 = 0;
			for (size_t k = 0; k < m->nparams; k++) {
				e2 += ((double)gb[k] - ga[k]) * ((double)gb[k] - ga[k]);
				g2 += (double)ga[k] * ga[k];
			}
			printf("%s on %s %s: gradients within %.3g of ref, relative L2 %.3g\n",
			       names[t], name, prec, worst, sqrt(e2 / g2));
			WF_CHECK_MSG(!bf16 || sqrt(e2 / g2) < tol,
				     "%s on %s bf16: relative L2 %.3g", names[t], name,
				     sqrt(e2 / g2));
			if (t == 3 && wf_backend_caps_of(be).train_fuse)
				WF_CHECK_MSG(wf_exec_fused(b) == 2,
					     "padnet: %d layers fused (want the "
					     "relu and the padding)",
					     wf_exec_fused(b));
			if (t == 0 && wf_backend_caps_of(be).train_fuse) {
				/* 10 into batch norms, 9 into the blocks' adds */
				WF_CHECK_MSG(wf_exec_fused(b) == 19, "resnet20: %d relus fused",
					     wf_exec_fused(b));
				int bf = wf_exec_bf16_layers(b), want = bf16 ? 40 : 0;
				WF_CHECK_MSG(bf == want, "resnet20 %s: %d bf16 layers, want %d",
					     prec, bf, want);
			}
		}
		free(x);
		free(ga);
		free(gb);
		wf_exec_free(a);
		wf_exec_free(b);
		wf_model_free(m);
	}
	wf_backend_free(be);
}

static void test_cpu_matches_ref(void)
{
	compare_with_ref("cpu", "fp32", 2e-3);
}

static void test_cpu_bf16_matches_ref(void)
{
	compare_with_ref("cpu", "bf16", 0.4);
}

static void test_cuda_matches_ref(void)
{
	compare_with_ref("cuda", "fp32", 2e-3);
}

static void test_cuda_bf16_matches_ref(void)
{
	compare_with_ref("cuda", "bf16", 0.4);
}

/* Evaluating with a training executor (inference-mode batch norms, a
 * partial last batch) uses its own plans: the next training step builds
 * none (on cpu, where plans are counted). */
static void test_evaluation_keeps_the_training_plans(void)
{
	wf_err err = {0};
	wf_backend *cpu = NULL;
	if (wf_backend_create(&cpu, "cpu", 1, &err) != 0) {
		fprintf(stderr, "skip: no cpu backend: %s\n", err.msg);
		return;
	}
	wf_model *m = NULL;
	wf_exec *ex = NULL;
	WF_CHECK_MSG(wf_model_zoo(&m, "resnet20", 8, 8, 3, 4, &err) == 0, "%s", err.msg);
	if (m)
		wf_model_init_params(m, 3);
	WF_CHECK_MSG(m && wf_exec_create(&ex, m, cpu, 8, 1, &err) == 0, "%s", err.msg);
	if (ex) {
		size_t per = 8 * 8 * 3;
		float *x = calloc(8 * per, sizeof(float));
		int32_t y[8] = {0, 1, 2, 3, 0, 1, 2, 3};
		for (size_t i = 0; i < 8 * per; i++)
			x[i] = (float)((i * 37) % 17) / 17.0f - 0.5f;
		float loss;
		int ok = 1;
		for (int round = 0; round < 2 && ok; round++) {
			/* a training step, then an evaluation of 8 and of 3 samples */
			ok = wf_exec_zero_grads(ex) == 0 && wf_exec_forward(ex, x, 8, 1, 1) == 0 &&
			     wf_exec_loss(ex, y, &loss, NULL) == 0 &&
			     wf_exec_backward(ex, 1.0f / 8, NULL, NULL) == 0;
			unsigned long before = cpu->plans_built;
			ok = ok && wf_exec_forward(ex, x, 8, 0, 0) == 0 &&
			     wf_exec_forward(ex, x, 3, 0, 0) == 0;
			if (round == 0)
				WF_CHECK(cpu->plans_built > before); /* evaluation built its own */
		}
		WF_CHECK_MSG(ok, "%s", wf_exec_error(ex));
		unsigned long before = cpu->plans_built;
		WF_CHECK(wf_exec_zero_grads(ex) == 0 && wf_exec_forward(ex, x, 8, 1, 2) == 0 &&
			 wf_exec_loss(ex, y, &loss, NULL) == 0 &&
			 wf_exec_backward(ex, 1.0f / 8, NULL, NULL) == 0);
		WF_CHECK_MSG(cpu->plans_built == before,
			     "a training step after evaluating rebuilt %lu plans",
			     cpu->plans_built - before);
		free(x);
	}
	wf_exec_free(ex);
	wf_model_free(m);
	wf_backend_free(cpu);
}

int main(void)
{
	wf_err err = {0};
	if (wf_backend_create(&ref, "ref", 0, &err)) {
		fprintf(stderr, "ref backend: %s\n", err.msg);
		return 1;
	}
	/* the CUDA driver keeps descriptors open for the life of the process:
	 * open it before the tests' descriptor checks */
	wf_backend *cuda = NULL;
	if (strstr(wf_backend_list(), "cuda") && wf_backend_create(&cuda, "cuda", 0, &err) == 0)
		wf_backend_free(cuda);
	WF_RUN(test_dense_logits_loss_and_accuracy_by_hand);
	WF_RUN(test_smallcnn_gradients_match_finite_differences);
	WF_RUN(test_resnet20_gradients_match_finite_differences);
	WF_RUN(test_all_layer_types_gradients_match_finite_differences);
	WF_RUN(test_smaller_batch_matches);
	WF_RUN(test_inference_memory_reuse_is_safe);
	WF_RUN(test_ready_sweep_is_monotonic_and_complete);
	WF_RUN(test_gradients_accumulate_until_zeroed);
	WF_RUN(test_misuse_fails_with_a_reason);
	WF_RUN(test_cpu_matches_ref);
	WF_RUN(test_cpu_bf16_matches_ref);
	WF_RUN(test_cuda_matches_ref);
	WF_RUN(test_cuda_bf16_matches_ref);
	WF_RUN(test_evaluation_keeps_the_training_plans);
	wf_backend_free(ref);
	return wf_test_summary();
}
