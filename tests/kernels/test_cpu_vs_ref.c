/* test_cpu_vs_ref.c: every op of the cpu (oneDNN) backend against the ref
 * backend: the shared op cases, resnet-sized shapes that take oneDNN's fast
 * paths, random conv and pool geometries, plan reuse and rebuild, and errors.
 * Forward outputs, updated state, input gradients and accumulated parameter
 * gradients are all compared. */
#include "tests/kernels/op_cases.h"
#include "tests/test.h"

static wf_backend *ref_be, *cpu_be;

/* |a - b| <= tol * max(1, max|b|) element by element: conv and batch-norm sums
 * are long, so the bound scales with the tensor's magnitude. */
static int close_tensor(const char *cname, const char *what, const wf_opc_tensor *a,
			const wf_opc_tensor *b, double tol)
{
	if (a->len != b->len) {
		fprintf(stderr, "%s: %s: length %zu vs %zu\n", cname, what, a->len, b->len);
		return 0;
	}
	double mx = 1.0;
	for (size_t i = 0; i < b->len; i++)
		mx = fmax(mx, fabs(b->host[i]));
	for (size_t i = 0; i < a->len; i++) {
		double d = fabs((double)a->host[i] - b->host[i]);
		if (!(d <= tol * mx)) {
			fprintf(stderr, "%s: %s %s[%zu]: cpu %.9g ref %.9g (|d| %.3g > %.3g)\n",
				cname, what, a->name ? a->name : "?", i, a->host[i], b->host[i], d,
				tol * mx);
			return 0;
		}
	}
	return 1;
}

/* Run case c on both backends with the same inputs; compare everything. */
static void check_case(const wf_opc_case *c, uint64_t seed, double tol)
{
	wf_opc_io a, b;
	wf_err err = {0};
	wf_opc_io_init(c, &a, seed);
	wf_opc_io_init(c, &b, seed);
	int rc = wf_opc_run(cpu_be, c, &a, 1, &err);
	WF_CHECK_MSG(rc == 0, "%s", err.msg);
	if (rc == 0) {
		rc = wf_opc_run(ref_be, c, &b, 1, &err);
		WF_CHECK_MSG(rc == 0, "%s", err.msg);
	}
	if (rc == 0) {
		for (int i = 0; i < a.n_out; i++)
			WF_CHECK_MSG(close_tensor(c->name, "out", &a.out[i], &b.out[i], tol), "%s",
				     c->name);
		for (int i = 0; c->backward && i < a.n_in; i++)
			WF_CHECK_MSG(close_tensor(c->name, "din", &a.din[i], &b.din[i], tol), "%s",
				     c->name);
		for (int i = 0; c->backward && i < a.n_param; i++)
			WF_CHECK_MSG(
				close_tensor(c->name, "dparam", &a.dparam[i], &b.dparam[i], tol),
				"%s", c->name);
	}
	wf_opc_io_free(&a);
	wf_opc_io_free(&b);
}

static void test_every_shared_case_matches_ref(void)
{
	wf_opc_case c;
	int n = 0;
	for (int i = 0; wf_opc_get(i, &c) == 0; i++, n++)
		check_case(&c, 1000 + (uint64_t)i, 1e-4);
	WF_CHECK(n > 30);
}

static void conv_case(wf_opc_case *c, const char *name, int n, int h, int w, int ch, int oc, int k,
		      int s, int dil, int groups, int same, int pad, int bias)
{
	memset(c, 0, sizeof(*c));
	snprintf(c->name, sizeof(c->name), "%.63s", name);
	c->kind = WF_OPC_CONV;
	c->backward = 1;
	wf_conv_desc_init(&c->conv, n, h, w, ch, oc, k, k, s, s, dil, dil, groups, same, pad, pad,
			  bias);
}

/* Shapes of a resnet20 on 32x32 images (batch cut to 4 so ref stays quick):
 * channel counts that are multiples of 8/16 take oneDNN's JIT kernels and
 * blocked weight layouts, which the small odd cases do not reach. */
static void test_resnet_shapes_match_ref(void)
{
	wf_opc_case c;
	conv_case(&c, "rn_conv3x3_32x32x16", 4, 32, 32, 16, 16, 3, 1, 1, 1, 1, 0, 0);
	check_case(&c, 1, 1e-4);
	conv_case(&c, "rn_conv3x3_s2_16to32", 4, 32, 32, 16, 32, 3, 2, 1, 1, 1, 0, 1);
	check_case(&c, 2, 1e-4);
	conv_case(&c, "rn_conv1x1_s2_proj", 4, 16, 16, 32, 64, 1, 2, 1, 1, 1, 0, 0);
	check_case(&c, 3, 1e-4);
	conv_case(&c, "rn_conv3x3_8x8x64", 4, 8, 8, 64, 64, 3, 1, 1, 1, 1, 0, 1);
	check_case(&c, 4, 1e-4);
	conv_case(&c, "rn_depthwise_32", 4, 16, 16, 32, 32, 3, 1, 1, 32, 1, 0, 1);
	check_case(&c, 5, 1e-4);
	conv_case(&c, "rn_stem_3to16_nobias_no_dx", 4, 32, 32, 3, 16, 3, 1, 1, 1, 1, 0, 0);
	c.no_dx = 1;
	check_case(&c, 6, 1e-4);

	memset(&c, 0, sizeof(c));
	snprintf(c.name, sizeof(c.name), "rn_batchnorm_train_64");
	c.kind = WF_OPC_BN, c.backward = 1, c.training = 1;
	c.bn = (wf_bn_desc){.n = 4, .h = 8, .w = 8, .c = 64, .eps = 1e-3f, .momentum = 0.99f};
	check_case(&c, 7, 1e-4);
	c.training = 0, c.backward = 0;
	snprintf(c.name, sizeof(c.name), "rn_batchnorm_infer_64");
	check_case(&c, 8, 1e-4);

	memset(&c, 0, sizeof(c));
	snprintf(c.name, sizeof(c.name), "rn_dense_64_10");
	c.kind = WF_OPC_DENSE, c.backward = 1;
	c.dense = (wf_dense_desc){.n = 16, .in = 64, .out = 10, .bias = 1};
	check_case(&c, 9, 1e-4);

	memset(&c, 0, sizeof(c));
	snprintf(c.name, sizeof(c.name), "rn_maxpool_same_64");
	c.kind = WF_OPC_POOL, c.backward = 1;
	wf_pool_desc_init(&c.pool, WF_POOL_MAX, 2, 9, 9, 64, 3, 3, 2, 2, 1);
	check_case(&c, 10, 1e-4);
	snprintf(c.name, sizeof(c.name), "rn_avgpool_same_64");
	c.pool.kind = WF_POOL_AVG;
	check_case(&c, 11, 1e-4);
}

/* Random geometries: odd sizes, strides 1-2, dilation 1-2, groups, same/valid. */
static void test_random_conv_and_pool_geometries(void)
{
	wf_rng r;
	wf_rng_seed(&r, 77);
	for (int t = 0; t < 24; t++) {
		int g = (int)wf_rng_below(&r, 3) + 1;
		int ch = g * ((int)wf_rng_below(&r, 3) + 1);
		int oc = g * ((int)wf_rng_below(&r, 3) + 1);
		int k = (int)wf_rng_below(&r, 4) + 1;
		int s = (int)wf_rng_below(&r, 2) + 1;
		int dil = k > 1 ? (int)wf_rng_below(&r, 2) + 1 : 1;
		int same = (int)wf_rng_below(&r, 2);
		int pad = same ? 0 : (int)wf_rng_below(&r, (uint64_t)k);
		int h = (k - 1) * dil + 1 + (int)wf_rng_below(&r, 6);
		int w = (k - 1) * dil + 1 + (int)wf_rng_below(&r, 6);
		char name[160];
		snprintf(name, sizeof(name), "rand_conv%d_k%d_s%d_d%d_g%d_%s", t, k, s, dil, g,
			 same ? "same" : "valid");
		wf_opc_case c;
		conv_case(&c, name, 1 + (int)wf_rng_below(&r, 3), h, w, ch, oc, k, s, dil, g, same,
			  pad, (int)wf_rng_below(&r, 2));
		check_case(&c, 500 + (uint64_t)t, 1e-4);
	}
	for (int t = 0; t < 12; t++) {
		wf_opc_case c;
		memset(&c, 0, sizeof(c));
		int k = (int)wf_rng_below(&r, 3) + 1, s = (int)wf_rng_below(&r, 3) + 1;
		int same = (int)wf_rng_below(&r, 2);
		wf_pool_kind kind = t % 2 ? WF_POOL_AVG : WF_POOL_MAX;
		char name[160];
		snprintf(name, sizeof(name), "rand_%spool%d_k%d_s%d_%s",
			 kind == WF_POOL_MAX ? "max" : "avg", t, k, s, same ? "same" : "valid");
		snprintf(c.name, sizeof(c.name), "%.63s", name);
		c.kind = WF_OPC_POOL, c.backward = 1;
		wf_pool_desc_init(&c.pool, kind, 1 + (int)wf_rng_below(&r, 2),
				  k + (int)wf_rng_below(&r, 6), k + (int)wf_rng_below(&r, 6),
				  1 + (int)wf_rng_below(&r, 5), k, k, s, s, same);
		check_case(&c, 900 + (uint64_t)t, 1e-4);
	}
}

/* ---- plans --------------------------------------------------------------- */

static float *rnd(size_t n, uint64_t seed)
{
	wf_rng r;
	wf_rng_seed(&r, seed);
	float *p = malloc((n ? n : 1) * sizeof(float));
	for (size_t i = 0; i < n; i++)
		p[i] = (float)wf_rng_normal(&r);
	return p;
}

static double max_rel_diff(const float *a, const float *b, size_t n)
{
	double mx = 1.0, d = 0.0;
	for (size_t i = 0; i < n; i++)
		mx = fmax(mx, fabs(b[i]));
	for (size_t i = 0; i < n; i++)
		d = fmax(d, fabs((double)a[i] - b[i]));
	return d / mx;
}

/* One conv forward + backward on both backends, the cpu one through `slot`
 * (shared by forward and backward, as an executor may do). Returns 1 when
 * all outputs and gradients match. */
static int conv_step(wf_plan **slot, int n, uint64_t seed)
{
	wf_conv_desc d;
	wf_conv_desc_init(&d, n, 9, 8, 8, 16, 3, 3, 2, 2, 1, 1, 1, 1, 0, 0, 1);
	size_t xl = (size_t)n * 9 * 8 * 8, yl = (size_t)n * d.oh * d.ow * 16, wl = 3 * 3 * 8 * 16;
	float *x = rnd(xl, seed), *w = rnd(wl, seed + 1), *b = rnd(16, seed + 2);
	float *dy = rnd(yl, seed + 3);
	float *y1 = calloc(yl, 4), *y2 = calloc(yl, 4), *dx1 = calloc(xl, 4), *dx2 = calloc(xl, 4);
	float *dw1 = calloc(wl, 4), *dw2 = calloc(wl, 4), *db1 = calloc(16, 4),
	      *db2 = calloc(16, 4);
	wf_plan *rp = NULL;
	int ok = wf_op_conv2d_forward(cpu_be, slot, &d, y1, x, w, b) == 0 &&
		 wf_op_conv2d_backward(cpu_be, slot, &d, dx1, dw1, db1, dy, x, w) == 0 &&
		 wf_op_conv2d_forward(ref_be, &rp, &d, y2, x, w, b) == 0 &&
		 wf_op_conv2d_backward(ref_be, &rp, &d, dx2, dw2, db2, dy, x, w) == 0;
	ok = ok && max_rel_diff(y1, y2, yl) < 1e-4 && max_rel_diff(dx1, dx2, xl) < 1e-4 &&
	     max_rel_diff(dw1, dw2, wl) < 1e-4 && max_rel_diff(db1, db2, 16) < 1e-4;
	wf_backend_plan_free(ref_be, &rp);
	free(x), free(w), free(b), free(dy), free(y1), free(y2), free(dx1), free(dx2);
	free(dw1), free(dw2), free(db1), free(db2);
	return ok;
}

static void test_conv_plan_reused_then_rebuilt_on_batch_change(void)
{
	wf_plan *slot = NULL;
	WF_CHECK(conv_step(&slot, 2, 1));
	wf_plan *first = slot;
	WF_CHECK(first != NULL);
	WF_CHECK(conv_step(&slot, 2, 11)); /* same shape, new data: same plan */
	WF_CHECK(slot == first);
	WF_CHECK(conv_step(&slot, 5, 21)); /* batch 5: a new plan */
	WF_CHECK(slot != first);
	wf_plan *second = slot;
	WF_CHECK(conv_step(&slot, 5, 31));
	WF_CHECK(slot == second);
	WF_CHECK(conv_step(&slot, 2, 41)); /* and back */
	WF_CHECK(slot != second);
	wf_backend_plan_free(cpu_be, &slot);
	WF_CHECK(slot == NULL);
}

/* Dense, batch norm and pooling: twice at batch 3, then at batch 6, each
 * compared with ref; the plan pointer shows reuse and rebuild. */
static void test_dense_bn_pool_plans_follow_batch_size(void)
{
	wf_plan *dslot = NULL, *bslot = NULL, *pslot = NULL, *rp = NULL;
	wf_plan *prev_d = NULL, *prev_b = NULL, *prev_p = NULL;
	const int batches[3] = {3, 3, 6};
	for (int t = 0; t < 3; t++) {
		int n = batches[t];
		/* dense 12 -> 7 */
		wf_dense_desc dd = {.n = n, .in = 12, .out = 7, .bias = 1};
		float *x = rnd((size_t)n * 12, 100 + t), *w = rnd(84, 200 + t),
		      *b = rnd(7, 300 + t);
		float *y1 = calloc((size_t)n * 7, 4), *y2 = calloc((size_t)n * 7, 4);
		WF_CHECK(wf_op_dense_forward(cpu_be, &dslot, &dd, y1, x, w, b) == 0);
		WF_CHECK(wf_op_dense_forward(ref_be, &rp, &dd, y2, x, w, b) == 0);
		WF_CHECK(max_rel_diff(y1, y2, (size_t)n * 7) < 1e-5);
		free(x), free(w), free(b), free(y1), free(y2);

		/* batch norm on [n,5,4,16], training then inference in the same slot */
		wf_bn_desc bd = {.n = n, .h = 5, .w = 4, .c = 16, .eps = 1e-3f, .momentum = 0.9f};
		size_t xl = (size_t)n * 5 * 4 * 16;
		float *bx = rnd(xl, 400 + t), *g = rnd(16, 500 + t), *be_ = rnd(16, 600 + t);
		float *by1 = calloc(xl, 4), *by2 = calloc(xl, 4);
		float sm1[16], si1[16], sm2[16], si2[16], rm1[16] = {0}, rv1[16], rm2[16] = {0},
							  rv2[16];
		for (int i = 0; i < 16; i++)
			rv1[i] = rv2[i] = 1.0f;
		WF_CHECK(wf_op_batchnorm_forward(cpu_be, &bslot, &bd, 1, by1, sm1, si1, bx, g, be_,
						 rm1, rv1) == 0);
		WF_CHECK(wf_op_batchnorm_forward(ref_be, &rp, &bd, 1, by2, sm2, si2, bx, g, be_,
						 rm2, rv2) == 0);
		WF_CHECK(max_rel_diff(by1, by2, xl) < 1e-4);
		WF_CHECK(max_rel_diff(rv1, rv2, 16) < 1e-5);
		WF_CHECK(wf_op_batchnorm_forward(cpu_be, &bslot, &bd, 0, by1, NULL, NULL, bx, g,
						 be_, rm1, rv1) == 0);
		WF_CHECK(wf_op_batchnorm_forward(ref_be, &rp, &bd, 0, by2, NULL, NULL, bx, g, be_,
						 rm2, rv2) == 0);
		WF_CHECK(max_rel_diff(by1, by2, xl) < 1e-4);
		free(bx), free(g), free(be_), free(by1), free(by2);

		/* max pool 3x3/2 same on [n,7,7,16] */
		wf_pool_desc pd;
		wf_pool_desc_init(&pd, WF_POOL_MAX, n, 7, 7, 16, 3, 3, 2, 2, 1);
		size_t pxl = (size_t)n * 7 * 7 * 16, pyl = (size_t)n * pd.oh * pd.ow * 16;
		float *px = rnd(pxl, 700 + t), *py1 = calloc(pyl, 4), *py2 = calloc(pyl, 4);
		float *pdy = rnd(pyl, 800 + t), *pdx1 = calloc(pxl, 4), *pdx2 = calloc(pxl, 4);
		WF_CHECK(wf_op_pool_forward(cpu_be, &pslot, &pd, py1, px) == 0);
		WF_CHECK(wf_op_pool_backward(cpu_be, &pslot, &pd, pdx1, pdy, px, py1) == 0);
		WF_CHECK(wf_op_pool_forward(ref_be, &rp, &pd, py2, px) == 0);
		WF_CHECK(wf_op_pool_backward(ref_be, &rp, &pd, pdx2, pdy, px, py2) == 0);
		WF_CHECK(max_rel_diff(py1, py2, pyl) == 0.0);
		WF_CHECK(max_rel_diff(pdx1, pdx2, pxl) < 1e-6);
		free(px), free(py1), free(py2), free(pdy), free(pdx1), free(pdx2);

		if (t == 1) { /* same batch as before: the plans were kept */
			WF_CHECK(dslot == prev_d);
			WF_CHECK(bslot == prev_b);
			WF_CHECK(pslot == prev_p);
		} else if (t == 2) { /* batch changed: rebuilt */
			WF_CHECK(dslot != prev_d);
			WF_CHECK(bslot != prev_b);
			WF_CHECK(pslot != prev_p);
		}
		prev_d = dslot, prev_b = bslot, prev_p = pslot;
	}
	wf_backend_plan_free(cpu_be, &dslot);
	wf_backend_plan_free(cpu_be, &bslot);
	wf_backend_plan_free(cpu_be, &pslot);
	wf_backend_plan_free(ref_be, &rp);
}

/* Conv backward asked for one gradient at a time (the others NULL) gives the
 * same dx, dw and db as ref, and leaves what it was not asked for alone. */
static void test_conv_backward_one_gradient_at_a_time(void)
{
	wf_conv_desc d;
	wf_conv_desc_init(&d, 3, 10, 10, 16, 16, 3, 3, 1, 1, 1, 1, 1, 1, 0, 0, 1);
	size_t xl = (size_t)3 * 10 * 10 * 16, wl = 3 * 3 * 16 * 16;
	float *x = rnd(xl, 1), *w = rnd(wl, 2), *dy = rnd(xl, 3);
	float *dx1 = calloc(xl, 4), *dx2 = calloc(xl, 4), *dw1 = rnd(wl, 4), *dw2 = rnd(wl, 4);
	float db1[16] = {0}, db2[16] = {0};
	memcpy(dw2, dw1, wl * 4);
	wf_plan *slot = NULL, *rp = NULL;
	const wf_backend_ops *c = cpu_be->ops, *r = ref_be->ops;
	WF_CHECK(c->conv2d_backward(cpu_be, &slot, &d, dx1, NULL, NULL, dy, x, w) == 0);
	WF_CHECK(r->conv2d_backward(ref_be, &rp, &d, dx2, NULL, NULL, dy, x, w) == 0);
	WF_CHECK(max_rel_diff(dx1, dx2, xl) < 1e-4);
	WF_CHECK(max_rel_diff(dw1, dw2, wl) == 0.0); /* untouched */
	WF_CHECK(c->conv2d_backward(cpu_be, &slot, &d, NULL, NULL, db1, dy, x, w) == 0);
	WF_CHECK(r->conv2d_backward(ref_be, &rp, &d, NULL, NULL, db2, dy, x, w) == 0);
	WF_CHECK(max_rel_diff(db1, db2, 16) < 1e-4);
	WF_CHECK(max_rel_diff(dw1, dw2, wl) == 0.0);
	WF_CHECK(c->conv2d_backward(cpu_be, &slot, &d, NULL, dw1, NULL, dy, x, w) == 0);
	WF_CHECK(r->conv2d_backward(ref_be, &rp, &d, NULL, dw2, NULL, dy, x, w) == 0);
	WF_CHECK(max_rel_diff(dw1, dw2, wl) < 1e-4);
	/* twice more: the += contract holds across calls */
	WF_CHECK(c->conv2d_backward(cpu_be, &slot, &d, NULL, dw1, db1, dy, x, w) == 0);
	WF_CHECK(r->conv2d_backward(ref_be, &rp, &d, NULL, dw2, db2, dy, x, w) == 0);
	WF_CHECK(max_rel_diff(dw1, dw2, wl) < 1e-4);
	WF_CHECK(max_rel_diff(db1, db2, 16) < 1e-4);
	wf_backend_plan_free(cpu_be, &slot);
	free(x), free(w), free(dy), free(dx1), free(dx2), free(dw1), free(dw2);
}

/* A plan slot handed from one op kind to another is rebuilt, not misused. */
static void test_plan_slot_switching_op_kind_is_rebuilt(void)
{
	wf_plan *slot = NULL;
	WF_CHECK(conv_step(&slot, 2, 5));
	wf_dense_desc dd = {.n = 2, .in = 3, .out = 2, .bias = 0};
	float x[6] = {1, 2, 3, 4, 5, 6}, w[6] = {1, 0, 0, 1, 1, 1}, y[4];
	WF_CHECK(wf_op_dense_forward(cpu_be, &slot, &dd, y, x, w, NULL) == 0);
	WF_CHECK_NEAR(y[0], 1 + 3, 1e-6);
	WF_CHECK_NEAR(y[1], 2 + 3, 1e-6);
	WF_CHECK_NEAR(y[2], 4 + 6, 1e-6);
	WF_CHECK_NEAR(y[3], 5 + 6, 1e-6);
	wf_backend_plan_free(cpu_be, &slot);
}

/* ---- errors ----------------------------------------------------------------- */

static void test_bad_descriptors_fail_with_a_message(void)
{
	wf_plan *slot = NULL;
	wf_conv_desc d;
	wf_conv_desc_init(&d, 1, 5, 5, 6, 4, 3, 3, 1, 1, 1, 1, 4, 0, 1, 1, 0); /* 4 !| 6 */
	float buf[1024] = {0};
	wf_err_clear(&cpu_be->err);
	int rc = wf_op_conv2d_forward(cpu_be, &slot, &d, buf, buf, buf, NULL);
	WF_CHECK_INT(rc, WF_EINVAL);
	WF_CHECK_MSG(strstr(cpu_be->err.msg, "groups=4") != NULL, "%s", cpu_be->err.msg);
	WF_CHECK(slot == NULL);

	wf_conv_desc_init(&d, 1, 5, 5, 4, 4, 3, 3, 1, 1, 1, 1, 1, 0, 0, 0, 0);
	d.oh = 5; /* inconsistent with valid 3x3 */
	rc = wf_op_conv2d_forward(cpu_be, &slot, &d, buf, buf, buf, NULL);
	WF_CHECK_INT(rc, WF_EINVAL);
	WF_CHECK_MSG(strstr(cpu_be->err.msg, "expected 3x3") != NULL, "%s", cpu_be->err.msg);

	wf_pool_desc pd;
	wf_pool_desc_init(&pd, WF_POOL_MAX, 1, 4, 4, 2, 2, 2, 2, 2, 0);
	pd.ow = 7;
	rc = wf_op_pool_forward(cpu_be, &slot, &pd, buf, buf);
	WF_CHECK_INT(rc, WF_EINVAL);

	int32_t labels[2] = {0, 9};
	rc = wf_op_softmax_xent_forward(cpu_be, 2, 3, buf, buf + 8, buf + 16, labels);
	WF_CHECK_INT(rc, WF_EINVAL);
	WF_CHECK_MSG(strstr(cpu_be->err.msg, "labels[1] = 9") != NULL, "%s", cpu_be->err.msg);

	rc = wf_op_dropout_forward(cpu_be, 4, 1.0f, 1, buf, (uint8_t *)(buf + 8), buf);
	WF_CHECK_INT(rc, WF_EINVAL);
	wf_backend_plan_free(cpu_be, &slot);
}

/* ---- bf16 and fused inference convs ------------------------------------------ */

/* Every shared op case (forward, input and parameter gradients) with the cpu
 * backend computing conv in bf16 (fp32 accumulation, fp32 master weights):
 * within bf16 tolerance of the fp32 ref. */
static void test_every_shared_case_in_bf16_matches_ref(void)
{
	if (!(cpu_be->caps & WF_CAP_BF16)) {
		printf("  (this CPU has no native bf16: bf16 cases not run)\n");
		return;
	}
	const char *used = NULL;
	wf_err err = {0};
	WF_CHECK(wf_backend_set_precision(cpu_be, "bf16", &used, &err) == 0);
	WF_CHECK(strcmp(used, "bf16") == 0 && cpu_be->bf16);
	wf_opc_case c;
	for (int i = 0; wf_opc_get(i, &c) == 0; i++)
		check_case(&c, 5000 + (uint64_t)i, 3e-2);
	wf_backend_set_precision(cpu_be, "fp32", &used, &err);
	WF_CHECK(!cpu_be->bf16);
}

/* bf16 training: backward weights reuses the forward's bf16 x and backward
 * data's bf16 dy. Backward of the x the forward saw, of another x, without
 * dx, and twice after one forward: dx, dw and db as ref computes them; a 3x3
 * conv (oneDNN's convolution backward) and a 1x1 (two matmuls). */
static void test_bf16_conv_backward_reuses_only_current_copies(void)
{
	if (!(cpu_be->caps & WF_CAP_BF16))
		return;
	WF_CHECK(wf_backend_set_precision(cpu_be, "bf16", NULL, NULL) == 0);
	for (int k = 3; k >= 1; k -= 2) {
		wf_conv_desc d;
		wf_conv_desc_init(&d, 4, 12, 12, 16, 32, k, k, 1, 1, 1, 1, 1, 1, 0, 0, 1);
		size_t xl = (size_t)4 * 12 * 12 * 16, yl = (size_t)4 * 12 * 12 * 32;
		size_t wl = (size_t)k * k * 16 * 32;
		float *x1 = rnd(xl, 71), *x2 = rnd(xl, 72), *w = rnd(wl, 73), *b = rnd(32, 74);
		float *dy1 = rnd(yl, 75), *dy2 = rnd(yl, 76), *y = calloc(yl, 4);
		float *dx = calloc(xl, 4), *dx2 = calloc(xl, 4);
		float *dw1 = calloc(wl, 4), *dw2 = calloc(wl, 4), db1[32], db2[32];
		wf_plan *slot = NULL, *rp = NULL;
		struct {
			const float *fwd_x, *x, *dy;
			int with_dx;
		} steps[] = {
			{x1, x1, dy1, 1},   /* both copies current */
			{x1, x2, dy2, 1},   /* another x: converted again */
			{x1, x1, dy2, 0},   /* no dx: dy converted here */
			{NULL, x1, dy1, 0}, /* a second backward after one forward */
			{x2, x2, dy1, 0},
		};
		for (size_t s = 0; s < WF_ARRAY_LEN(steps); s++) {
			memset(dw1, 0, wl * 4), memset(dw2, 0, wl * 4);
			memset(db1, 0, sizeof(db1)), memset(db2, 0, sizeof(db2));
			if (steps[s].fwd_x)
				WF_CHECK(wf_op_conv2d_forward(cpu_be, &slot, &d, y, steps[s].fwd_x,
							      w, b) == 0);
			WF_CHECK(wf_op_conv2d_backward(cpu_be, &slot, &d,
						       steps[s].with_dx ? dx : NULL, dw1, db1,
						       steps[s].dy, steps[s].x, w) == 0);
			WF_CHECK(wf_op_conv2d_backward(ref_be, &rp, &d, dx2, dw2, db2, steps[s].dy,
						       steps[s].x, w) == 0);
			double e = max_rel_diff(dw1, dw2, wl), eb = max_rel_diff(db1, db2, 32);
			double ex = steps[s].with_dx ? max_rel_diff(dx, dx2, xl) : 0;
			WF_CHECK_MSG(e < 3e-2 && eb < 3e-2 && ex < 3e-2,
				     "%dx%d step %zu: dw rel diff %g, db %g, dx %g", k, k, s, e, eb,
				     ex);
		}
		wf_backend_plan_free(cpu_be, &slot);
		wf_backend_plan_free(ref_be, &rp);
		free(x1), free(x2), free(w), free(b), free(dy1), free(dy2), free(y), free(dx);
		free(dx2), free(dw1), free(dw2);
	}
	wf_backend_set_precision(cpu_be, "fp32", NULL, NULL);
}

/* bf16 storage of floats (round to nearest even) and back. */
static void to_bf16(uint16_t *h, const float *f, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		uint32_t u;
		memcpy(&u, &f[i], 4);
		h[i] = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
	}
}

static void from_bf16(float *f, const uint16_t *h, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		uint32_t u = (uint32_t)h[i] << 16;
		memcpy(&f[i], &u, 4);
	}
}

/* Training fusions: batch norm with a fused relu (fp32, then bf16 tensors)
 * and a plain conv reading and writing bf16 tensors, forward and backward,
 * against ref's batch norm, relu and conv on the same (bf16-rounded) values. */
static void test_training_fusions_match_ref(void)
{
	const size_t N = 4 * 6 * 6 * 16;
	wf_bn_desc bd = {.n = 4, .h = 6, .w = 6, .c = 16, .eps = 1e-3f, .momentum = 0.9f};
	float *x = rnd(N, 81), *dy = rnd(N, 82), *g = rnd(16, 83), *bt = rnd(16, 84);
	float *y1 = calloc(N, 4), *y2 = calloc(N, 4), *dx1 = calloc(N, 4), *dx2 = calloc(N, 4);
	float *t = calloc(N, 4);
	uint16_t *xh = calloc(N, 2), *yh = calloc(N, 2), *dyh = calloc(N, 2), *dxh = calloc(N, 2);
	float sm[2][16], si[2][16], rm[2][16] = {{0}}, rv[2][16], dg[2][16], db[2][16];
	for (int bf16 = 0; bf16 < 2; bf16++) {
		if (bf16 && !(cpu_be->caps & WF_CAP_BF16))
			break;
		WF_CHECK(wf_backend_set_precision(cpu_be, bf16 ? "bf16" : "fp32", NULL, NULL) == 0);
		if (bf16) { /* ref sees the values the bf16 tensors hold */
			to_bf16(xh, x, N), from_bf16(x, xh, N);
			to_bf16(dyh, dy, N), from_bf16(dy, dyh, N);
		}
		wf_bn_desc fd = bd;
		fd.relu = 1, fd.io_bf16 = bf16;
		wf_plan *cp = NULL, *rp = NULL;
		for (int k = 0; k < 2; k++)
			for (int c = 0; c < 16; c++)
				rv[k][c] = 1, dg[k][c] = db[k][c] = 0;
		WF_CHECK(wf_op_batchnorm_forward(cpu_be, &cp, &fd, 1, bf16 ? (float *)yh : y1,
						 sm[0], si[0], bf16 ? (float *)xh : x, g, bt, rm[0],
						 rv[0]) == 0);
		WF_CHECK(wf_op_batchnorm_backward(cpu_be, &cp, &fd, bf16 ? (float *)dxh : dx1,
						  dg[0], db[0], bf16 ? (float *)dyh : dy,
						  bf16 ? (float *)xh : x, g, sm[0], si[0]) == 0);
		WF_CHECK(wf_op_batchnorm_forward(ref_be, &rp, &bd, 1, t, sm[1], si[1], x, g, bt,
						 rm[1], rv[1]) == 0);
		WF_CHECK(wf_op_act_forward(ref_be, WF_ACT_RELU, N, y2, t) == 0);
		WF_CHECK(wf_op_act_backward(ref_be, WF_ACT_RELU, N, t, dy, y2) == 0);
		WF_CHECK(wf_op_batchnorm_backward(ref_be, &rp, &bd, dx2, dg[1], db[1], t, x, g,
						  sm[1], si[1]) == 0);
		if (bf16)
			from_bf16(y1, yh, N), from_bf16(dx1, dxh, N);
		double tol = bf16 ? 2e-2 : 1e-4;
		WF_CHECK_MSG(max_rel_diff(y1, y2, N) < tol, "bn relu %s y", bf16 ? "bf16" : "fp32");
		WF_CHECK_MSG(max_rel_diff(dx1, dx2, N) < tol, "bn relu %s dx: %g",
			     bf16 ? "bf16" : "fp32", max_rel_diff(dx1, dx2, N));
		WF_CHECK(max_rel_diff(dg[0], dg[1], 16) < tol &&
			 max_rel_diff(db[0], db[1], 16) < tol);
		WF_CHECK(max_rel_diff(rv[0], rv[1], 16) < 1e-4 &&
			 max_rel_diff(si[0], si[1], 16) < 1e-4);
		wf_backend_plan_free(cpu_be, &cp);
		wf_backend_plan_free(ref_be, &rp);
		if (!bf16)
			continue;
		/* convs 16 -> 16 reading and writing bf16: y, dx bf16, dw, db fp32 (a
		 * 3x3, and a 1x1 whose backward is two matmuls) */
		for (int k = 3; k >= 1; k -= 2) {
			wf_conv_desc cd;
			wf_conv_desc_init(&cd, 4, 6, 6, 16, 16, k, k, 1, 1, 1, 1, 1, 1, 0, 0, 1);
			cd.io_bf16 = 3;
			size_t wl = (size_t)k * k * 16 * 16;
			float *w = rnd(wl, 85), *dw1 = calloc(wl, 4), *dw2 = calloc(wl, 4);
			float *cb = rnd(16, 86), cdb[2][16] = {{0}};
			WF_CHECK(wf_op_conv2d_forward(cpu_be, &cp, &cd, (float *)yh, (float *)xh, w,
						      cb) == 0);
			WF_CHECK(wf_op_conv2d_backward(cpu_be, &cp, &cd, (float *)dxh, dw1, cdb[0],
						       (float *)dyh, (float *)xh, w) == 0);
			cd.io_bf16 = 0;
			WF_CHECK(wf_op_conv2d_forward(ref_be, &rp, &cd, y2, x, w, cb) == 0);
			WF_CHECK(wf_op_conv2d_backward(ref_be, &rp, &cd, dx2, dw2, cdb[1], dy, x,
						       w) == 0);
			from_bf16(y1, yh, N), from_bf16(dx1, dxh, N);
			double ey = max_rel_diff(y1, y2, N), ex = max_rel_diff(dx1, dx2, N);
			double ew = max_rel_diff(dw1, dw2, wl),
			       eb = max_rel_diff(cdb[0], cdb[1], 16);
			WF_CHECK_MSG(ey < 2e-2 && ex < 2e-2 && ew < 2e-2 && eb < 2e-2,
				     "bf16 %dx%d conv: y %g dx %g dw %g db %g", k, k, ey, ex, ew,
				     eb);
			wf_backend_plan_free(cpu_be, &cp);
			wf_backend_plan_free(ref_be, &rp);
			free(w), free(dw1), free(dw2), free(cb);
		}
	}
	/* the add reading bf16 and the conversion of a gradient to bf16 */
	float v[6] = {1.0f, -2.5f, 1.00390625f, 1.01171875f, 3e38f, NAN}, w6[6];
	uint16_t vh[6], vh2[6];
	to_bf16(vh, v, 6);
	WF_CHECK(wf_op_to_bf16(cpu_be, 6, vh2, v, 0) == 0);
	WF_CHECK(memcmp(vh, vh2, 10) == 0); /* ties to even: 1+2^-8 -> 1, 1+3*2^-8 -> 1+2^-6 */
	WF_CHECK((vh2[5] & 0x7f80) == 0x7f80 && (vh2[5] & 0x7f)); /* NaN stays NaN */
	/* with a relu (1) or relu6 (2) on the way (inference plans) */
	WF_CHECK(wf_op_to_bf16(cpu_be, 6, vh2, v, 1) == 0);
	WF_CHECK(vh2[0] == vh[0] && vh2[1] == 0 && vh2[4] == vh[4]);
	WF_CHECK(wf_op_to_bf16(cpu_be, 6, vh2, v, 2) == 0);
	WF_CHECK(vh2[0] == vh[0] && vh2[1] == 0 && vh2[4] == 0x40c0); /* 6.0 */
	WF_CHECK((vh2[5] & 0x7f80) == 0x7f80 && (vh2[5] & 0x7f));
	WF_CHECK_INT(wf_op_to_bf16(cpu_be, 6, vh2, v, 3), WF_EINVAL);
	WF_CHECK(wf_op_add_mixed(cpu_be, 4, w6, vh, v, 1, 0) == 0);
	from_bf16(t, vh, 4);
	for (int i = 0; i < 4; i++)
		WF_CHECK(w6[i] == t[i] + v[i]);
	WF_CHECK(wf_op_add_mixed(cpu_be, 4, w6, vh, v, 1, 1) == 0); /* relu inside */
	for (int i = 0; i < 4; i++)
		WF_CHECK(w6[i] == fmaxf(t[i] + v[i], 0.0f));
	WF_CHECK_INT(wf_op_add_mixed(ref_be, 4, w6, v, vh, 2, 0), WF_EINVAL);
	/* its backward: dy where y > 0 into a float gradient written, one added
	 * into, one converted to bf16; ref has none */
	{
		const size_t M = 50001;
		float *gy = rnd(M, 87), *yy = rnd(M, 88), *ga = rnd(M, 89), *gb = calloc(M, 4);
		float *want = calloc(M, 4), *base = malloc(M * 4);
		uint16_t *gh = calloc(M, 2), *wh = calloc(M, 2);
		memcpy(base, ga, M * 4);
		WF_CHECK(wf_op_act_backward(ref_be, WF_ACT_RELU, M, want, gy, yy) == 0);
		WF_CHECK(wf_op_add_relu_backward(cpu_be, M, gy, yy, ga, 2, gb, 1) == 0);
		int bad = 0;
		for (size_t i = 0; i < M; i++)
			bad += ga[i] != base[i] + want[i] || gb[i] != want[i];
		WF_CHECK(wf_op_add_relu_backward(cpu_be, M, gy, yy, gh, 3, NULL, 0) == 0);
		to_bf16(wh, want, M);
		bad += memcmp(gh, wh, M * 2) != 0;
		WF_CHECK_MSG(bad == 0, "add_relu_backward: %d wrong", bad);
		WF_CHECK_INT(wf_op_add_relu_backward(ref_be, M, gy, yy, ga, 1, gb, 1), WF_EINVAL);
		WF_CHECK_INT(wf_op_add_relu_backward(cpu_be, M, gy, yy, ga, 4, gb, 1), WF_EINVAL);
		free(gy), free(yy), free(ga), free(gb), free(want), free(base), free(gh), free(wh);
	}
	/* without the capability (ref) the fields are refused, by name */
	wf_bn_desc fd = bd;
	fd.relu = 1;
	wf_plan *rp = NULL;
	WF_CHECK_INT(wf_op_batchnorm_forward(ref_be, &rp, &fd, 1, y2, sm[1], si[1], x, g, bt, rm[1],
					     rv[1]),
		     WF_EINVAL);
	WF_CHECK(strstr(ref_be->err.msg, "relu=1") != NULL);
	wf_backend_set_precision(cpu_be, "fp32", NULL, NULL);
	free(x), free(dy), free(g), free(bt), free(y1), free(y2), free(dx1), free(dx2), free(t);
	free(xh), free(yh), free(dyh), free(dxh);
}

static void test_precision_names(void)
{
	wf_err err = {0};
	const char *used = NULL;
	WF_CHECK_INT(wf_backend_set_precision(cpu_be, "fp16x", &used, &err), WF_EINVAL);
	WF_CHECK_MSG(strstr(err.msg, "fp16x") != NULL, "%s", err.msg);
	WF_CHECK(wf_backend_set_precision(ref_be, "bf16", &used, &err) == 0);
	WF_CHECK(strcmp(used, "fp32") == 0 && !ref_be->bf16); /* ref: fp32 fallback */
	WF_CHECK(wf_backend_set_precision(cpu_be, "tf32", &used, &err) == 0);
	WF_CHECK(strcmp(used, "fp32") == 0 && !cpu_be->bf16); /* tf32, fp16: cuda's */
	WF_CHECK(wf_backend_set_precision(cpu_be, "fp16", &used, &err) == 0);
	WF_CHECK(strcmp(used, "fp32") == 0);
	WF_CHECK(wf_backend_set_precision(cpu_be, "auto", &used, &err) == 0);
	WF_CHECK(strcmp(used, (cpu_be->caps & WF_CAP_BF16) ? "bf16" : "fp32") == 0);
	wf_backend_set_precision(cpu_be, "fp32", &used, &err);
}

static void fill(float *p, size_t n, uint64_t seed)
{
	uint64_t x = seed;
	for (size_t i = 0; i < n; i++) {
		x = x * 6364136223846793005ULL + 1442695040888963407ULL;
		p[i] = (float)((double)(x >> 11) / 9007199254740992.0 * 2.0 - 1.0);
	}
}

/* conv2d_forward_fused (bias, residual add, relu / relu6, weights kept
 * reordered) equals ref's conv, add and activation run one after another.
 * mode 0 fp32, 1 bf16, 2 int8 with s8 x, 3 int8 with u8 x (x >= 0).
 * residual 2: in place (y holds the residual on entry). */
static void fused_case(int n, int h, int ch, int oc, int k, int s, int groups, int act,
		       int residual, int mode, double tol)
{
	int bf16 = mode == 1;
	wf_conv_desc d;
	wf_conv_desc_init(&d, n, h, h, ch, oc, k, k, s, s, 1, 1, groups, 1, 0, 0, 1);
	size_t nx = (size_t)n * h * h * ch, ny = (size_t)n * d.oh * d.ow * oc;
	size_t nw = (size_t)k * k * (ch / groups) * oc;
	float *x = malloc(nx * 4), *w = malloc(nw * 4), *b = malloc(oc * 4), *r = malloc(ny * 4);
	float *y = malloc(ny * 4), *want = malloc(ny * 4);
	fill(x, nx, 1), fill(w, nw, 2), fill(b, (size_t)oc, 3), fill(r, ny, 4);
	for (size_t i = 0; mode == 3 && i < nx; i++)
		x[i] = fabsf(x[i]);
	wf_plan *rp = NULL, *cp = NULL;
	WF_CHECK(wf_op_conv2d_forward(ref_be, &rp, &d, want, x, w, b) == 0);
	if (residual)
		wf_op_add(ref_be, ny, want, want, r);
	if (act)
		wf_op_act_forward(ref_be, act == 1 ? WF_ACT_RELU : WF_ACT_RELU6, ny, want, want);
	wf_backend_set_precision(cpu_be, bf16 ? "bf16" : "fp32", NULL, NULL);
	d.act = act, d.residual = residual, d.infer = 1;
	if (mode >= 2)
		d.qx = 127.0f * (mode == 3 ? 2 : 1), d.x_u8 = mode == 3;
	for (int rep = 0; rep < 2; rep++) { /* the second call reuses the reordered weights */
		if (residual == 2)
			memcpy(y, r, ny * 4);
		else
			memset(y, 0, ny * 4);
		int rc = wf_op_conv2d_forward_fused(cpu_be, &cp, &d, y, x, w, b,
						    residual == 1 ? r : NULL);
		WF_CHECK_MSG(rc == 0, "%s", cpu_be->err.msg);
		double mx = 1, worst = 0;
		for (size_t i = 0; i < ny; i++)
			mx = fmax(mx, fabs(want[i]));
		for (size_t i = 0; i < ny; i++)
			worst = fmax(worst, fabs((double)y[i] - want[i]));
		WF_CHECK_MSG(
			worst <= tol * mx,
			"fused conv n%d h%d c%d oc%d k%d s%d g%d act%d res%d mode %d: |d| %.3g "
			"> %.3g",
			n, h, ch, oc, k, s, groups, act, residual, mode, worst, tol * mx);
	}
	wf_backend_set_precision(cpu_be, "fp32", NULL, NULL);
	wf_backend_plan_free(cpu_be, &cp);
	free(x), free(w), free(b), free(r), free(y), free(want);
}

static void test_fused_conv_matches_ref(void)
{
	for (int bf16 = 0; bf16 <= ((cpu_be->caps & WF_CAP_BF16) ? 1 : 0); bf16++) {
		double tol = bf16 ? 3e-2 : 1e-4;
		fused_case(2, 9, 16, 32, 3, 1, 1, 1, 1, bf16, tol);   /* conv + add + relu */
		fused_case(1, 8, 16, 16, 1, 1, 1, 0, 1, bf16, tol);   /* 1x1 + add */
		fused_case(1, 12, 32, 32, 3, 2, 32, 2, 0, bf16, tol); /* depthwise + relu6 */
		fused_case(3, 7, 8, 24, 3, 1, 1, 2, 0, bf16, tol);    /* conv + relu6 */
		fused_case(1, 5, 4, 8, 3, 1, 1, 0, 0, bf16, tol);     /* plain, infer */
		fused_case(2, 6, 16, 64, 1, 1, 1, 1, 2, bf16, tol);   /* 1x1 + add in place */
	}
}

/* int8 (qx > 0): x and the weights quantised, y in float within the
 * rounding of 8 bits; s8 and u8 inputs, every fusion. */
static void test_int8_conv_matches_ref(void)
{
	if (!wf_backend_caps_of(cpu_be).int8)
		WF_SKIP("no int8 convolutions on this CPU (no VNNI): int8 runs in fp32");
	for (int mode = 2; mode <= 3; mode++) {
		double tol = 2e-2;
		fused_case(2, 9, 16, 32, 3, 1, 1, 1, 1, mode, tol);   /* conv + add + relu */
		fused_case(1, 8, 16, 16, 1, 1, 1, 0, 1, mode, tol);   /* 1x1 + add */
		fused_case(1, 12, 32, 32, 3, 2, 32, 2, 0, mode, tol); /* depthwise + relu6 */
		fused_case(3, 7, 8, 24, 3, 1, 1, 2, 0, mode, tol);    /* conv + relu6 */
		fused_case(1, 5, 4, 8, 3, 1, 1, 0, 0, mode, tol);     /* plain */
		fused_case(2, 6, 16, 64, 1, 1, 1, 1, 2, mode, tol);   /* 1x1 + add in place */
		fused_case(2, 10, 3, 32, 3, 2, 1, 2, 0, mode, tol);   /* a first conv: 3 channels */
		/* 2^24 multiply-adds and more: the AMX kernels where the CPU has
		 * them (smaller convs avoid them, cpu_conv.c) */
		fused_case(2, 28, 128, 128, 1, 1, 1, 1, 1, mode, tol); /* 1x1 + add + relu */
		fused_case(2, 16, 64, 64, 3, 1, 1, 1, 2, mode, tol);   /* 3x3 + add in place */
	}
	/* the ref backend has no int8: refused, naming the field */
	wf_conv_desc d;
	float v[64] = {0};
	wf_conv_desc_init(&d, 1, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0);
	d.infer = 1, d.qx = 127;
	WF_CHECK_INT(wf_op_conv2d_forward_fused(ref_be, NULL, &d, v, v, v, NULL, NULL), WF_EINVAL);
	WF_CHECK(strstr(ref_be->err.msg, "qx=127") != NULL);
}

/* Two int8 convs with the tensor between them kept quantised (io_q): the
 * first writes y as u8 (after relu) or s8 (no act) with scale qy from its
 * range, the second reads it as it is and writes float with a residual. */
static void int8_chain_case(int act)
{
	int n = 2, h = 8, c = 16, mid = 32;
	wf_conv_desc a, b;
	wf_conv_desc_init(&a, n, h, h, c, mid, 3, 3, 1, 1, 1, 1, 1, 1, 0, 0, 1);
	wf_conv_desc_init(&b, n, h, h, mid, c, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 1);
	size_t nx = (size_t)n * h * h * c, nm = (size_t)n * h * h * mid;
	float *x = malloc(nx * 4), *wa = malloc(9 * c * mid * 4), *wb = malloc(mid * c * 4);
	float *ba = malloc(mid * 4), *bb = malloc(c * 4), *r = malloc(nx * 4);
	float *t = malloc(nm * 4), *want = malloc(nx * 4), *got = malloc(nx * 4);
	uint8_t *q = malloc(nm);
	fill(x, nx, 5), fill(wa, (size_t)9 * c * mid, 6), fill(wb, (size_t)mid * c, 7);
	fill(ba, (size_t)mid, 8), fill(bb, (size_t)c, 9), fill(r, nx, 10);
	wf_plan *p1 = NULL, *p2 = NULL, *p3 = NULL, *p4 = NULL;
	WF_CHECK(wf_op_conv2d_forward(ref_be, &p1, &a, t, x, wa, ba) == 0);
	if (act)
		wf_op_act_forward(ref_be, WF_ACT_RELU, nm, t, t);
	double amax = 0;
	for (size_t i = 0; i < nm; i++)
		amax = fmax(amax, fabs(t[i]));
	WF_CHECK(wf_op_conv2d_forward(ref_be, &p2, &b, want, t, wb, bb) == 0);
	wf_op_add(ref_be, nx, want, want, r);
	a.act = act, a.infer = 1, a.qx = 127, a.io_q = 2, a.y_u8 = act;
	a.qy = (float)((act ? 255 : 127) / amax);
	b.residual = 1, b.infer = 1, b.qx = a.qy, b.x_u8 = act, b.io_q = 1;
	int rc = wf_op_conv2d_forward_fused(cpu_be, &p3, &a, (float *)q, x, wa, ba, NULL);
	WF_CHECK_MSG(rc == 0, "%s", cpu_be->err.msg);
	rc = wf_op_conv2d_forward_fused(cpu_be, &p4, &b, got, (float *)q, wb, bb, r);
	WF_CHECK_MSG(rc == 0, "%s", cpu_be->err.msg);
	double mx = 1, worst = 0;
	for (size_t i = 0; i < nx; i++) {
		mx = fmax(mx, fabs(want[i]));
		worst = fmax(worst, fabs((double)got[i] - want[i]));
	}
	WF_CHECK_MSG(worst <= 3e-2 * mx, "int8 chain act %d: |d| %.3g > %.3g", act, worst,
		     3e-2 * mx);
	/* the residual quantised too (s8, scale from its range), added raw:
	 * into a float y, then in place into a quantised y of its own type */
	double rmax = 0, wmax = 0;
	for (size_t i = 0; i < nx; i++)
		rmax = fmax(rmax, fabs(r[i])), wmax = fmax(wmax, fabs(want[i]));
	int8_t *rq = malloc(nx), *yq = malloc(nx);
	float qr = (float)(127 / rmax), qy = (float)(127 / wmax);
	for (size_t i = 0; i < nx; i++)
		rq[i] = (int8_t)lrintf(r[i] * qr);
	b.io_q = 1 | 4, b.qr = qr, b.r_u8 = 0;
	wf_backend_plan_free(cpu_be, &p4);
	rc = wf_op_conv2d_forward_fused(cpu_be, &p4, &b, got, (float *)q, wb, bb, (float *)rq);
	WF_CHECK_MSG(rc == 0, "%s", cpu_be->err.msg);
	memcpy(yq, rq, nx);
	b.residual = 2, b.io_q = 1 | 2 | 4, b.qy = qy, b.y_u8 = 0;
	rc = wf_op_conv2d_forward_fused(cpu_be, &p3, &b, (float *)yq, (float *)q, wb, bb, NULL);
	WF_CHECK_MSG(rc == 0, "%s", cpu_be->err.msg);
	double w1 = 0, w2 = 0, w3 = 0;
	for (size_t i = 0; i < nx; i++) {
		w1 = fmax(w1, fabs((double)got[i] - want[i]));
		w2 = fmax(w2, fabs((double)yq[i] / qy - want[i]));
	}
	/* in place with a relu: a u8 y over the s8 residual it replaces */
	uint8_t *yu = (uint8_t *)yq;
	memcpy(yq, rq, nx);
	b.act = 1, b.y_u8 = 1, b.qy = (float)(255 / wmax);
	wf_backend_plan_free(cpu_be, &p3);
	rc = wf_op_conv2d_forward_fused(cpu_be, &p3, &b, (float *)yq, (float *)q, wb, bb, NULL);
	WF_CHECK_MSG(rc == 0, "%s", cpu_be->err.msg);
	for (size_t i = 0; i < nx; i++)
		w3 = fmax(w3, fabs((double)yu[i] / b.qy - fmax(want[i], 0.0)));
	WF_CHECK_MSG(w1 <= 3e-2 * mx && w2 <= 3e-2 * mx && w3 <= 3e-2 * mx,
		     "int8 chain act %d, quantised residual: |d| %.3g (float y), %.3g (in place), "
		     "%.3g (in place, u8 over s8) > %.3g",
		     act, w1, w2, w3, 3e-2 * mx);
	free(rq), free(yq);
	wf_backend_plan_free(cpu_be, &p3);
	/* an in-place residual under a float y: refused, naming io_q */
	a.residual = 2;
	WF_CHECK_INT(wf_op_conv2d_forward_fused(cpu_be, &p3, &a, t, x, wa, ba, NULL), WF_EINVAL);
	WF_CHECK(strstr(cpu_be->err.msg, "io_q") != NULL);
	wf_backend_plan_free(cpu_be, &p3);
	wf_backend_plan_free(cpu_be, &p4);
	free(x), free(wa), free(wb), free(ba), free(bb), free(r), free(t), free(want), free(got),
		free(q);
}

static void test_int8_tensors_between_convs(void)
{
	if (!wf_backend_caps_of(cpu_be).int8)
		WF_SKIP("no int8 convolutions on this CPU (no VNNI): int8 runs in fp32");
	int8_chain_case(1);
	int8_chain_case(0);
}

/* Max pooling (padding included) on u8, s8 and bf16 tensors gives ref's
 * fp32 pooling of the same values exactly (a max only picks one); ref and
 * the backward refuse those tensor types. */
static void test_max_pool_on_int8_and_bf16_tensors(void)
{
	wf_pool_desc d;
	wf_pool_desc_init(&d, WF_POOL_MAX, 2, 7, 7, 16, 3, 3, 2, 2, 0);
	d.pt = d.pb = d.pl = d.pr = 1, d.oh = d.ow = 4; /* (7 + 2 - 3) / 2 + 1 */
	size_t nx = 2 * 7 * 7 * 16, ny = 2 * 4 * 4 * 16;
	float *x = rnd(nx, 91), *want = calloc(ny, 4), *got = calloc(ny, 4);
	uint8_t *x8 = calloc(nx, 1), *y8 = calloc(ny, 1);
	uint16_t *xh = calloc(nx, 2), *yh = calloc(ny, 2);
	wf_backend_set_precision(cpu_be, "int8", NULL, NULL);
	for (int q8 = 1; q8 <= (wf_backend_caps_of(cpu_be).int8 ? 2 : 0); q8++) {
		for (size_t i = 0; i < nx; i++) { /* integers: u8 0..255, s8 -127..127 */
			float v = q8 == 1 ? fabsf(x[i]) * 255 : x[i] * 127;
			x[i] = fminf(roundf(v), q8 == 1 ? 255 : 127);
			x8[i] = q8 == 1 ? (uint8_t)x[i] : (uint8_t)(int8_t)x[i];
		}
		wf_pool_desc qd = d;
		qd.q8 = q8;
		wf_plan *cp = NULL, *rp = NULL;
		WF_CHECK(wf_op_pool_forward(cpu_be, &cp, &qd, (float *)y8, (float *)x8) == 0);
		WF_CHECK(wf_op_pool_forward(ref_be, &rp, &d, want, x) == 0);
		for (size_t i = 0; i < ny; i++)
			got[i] = q8 == 1 ? (float)y8[i] : (float)(int8_t)y8[i];
		WF_CHECK_MSG(max_rel_diff(got, want, ny) == 0, "max pool q8=%d", q8);
		WF_CHECK_INT(wf_op_pool_forward(ref_be, &rp, &qd, want, x), WF_EINVAL);
		WF_CHECK_INT(wf_op_pool_backward(cpu_be, &cp, &qd, x, want, x, want), WF_EINVAL);
		wf_backend_plan_free(cpu_be, &cp);
		wf_backend_plan_free(ref_be, &rp);
	}
	wf_backend_set_precision(cpu_be, "fp32", NULL, NULL);
	if (cpu_be->caps & WF_CAP_BF16) {
		WF_CHECK(wf_backend_set_precision(cpu_be, "bf16", NULL, NULL) == 0);
		float *xv = rnd(nx, 92);
		to_bf16(xh, xv, nx), from_bf16(xv, xh, nx);
		wf_pool_desc bd = d;
		bd.io_bf16 = 1;
		wf_plan *cp = NULL, *rp = NULL;
		WF_CHECK(wf_op_pool_forward(cpu_be, &cp, &bd, (float *)yh, (float *)xh) == 0);
		WF_CHECK(wf_op_pool_forward(ref_be, &rp, &d, want, xv) == 0);
		from_bf16(got, yh, ny);
		WF_CHECK_MSG(max_rel_diff(got, want, ny) == 0, "max pool bf16");
		bd.kind = WF_POOL_AVG;
		WF_CHECK_INT(wf_op_pool_forward(cpu_be, &cp, &bd, (float *)yh, (float *)xh),
			     WF_EINVAL);
		wf_backend_plan_free(cpu_be, &cp);
		wf_backend_plan_free(ref_be, &rp);
		wf_backend_set_precision(cpu_be, "fp32", NULL, NULL);
		free(xv);
	}
	free(x), free(want), free(got), free(x8), free(y8), free(xh), free(yh);
}

/* A 1x1 pool picks pixels: with a cropping folded in (NASNet's adjust
 * blocks: pad by one at the bottom and right, crop one at the top and left,
 * average 1x1 with stride 2; an odd size, so the last pick lies in the
 * padding) it equals ref's crop then pool, on f32, u8 and bf16 tensors
 * alike; ref (no inference plans) and the backward refuse the cropping. */
static void test_pick_pool_applies_a_cropping(void)
{
	const int n = 2, h = 7, w = 8, c = 12;
	wf_pad_desc crop = {.n = n, .h = h, .w = w, .c = c, .pt = -1, .pb = 1, .pl = -1, .pr = 1};
	wf_pool_desc d, qd;
	wf_pool_desc_init(&d, WF_POOL_AVG, n, h, w, c, 1, 1, 2, 2, 0);
	qd = d;
	qd.pt = qd.pl = -1, qd.pb = qd.pr = 1; /* the same output size: 4x4 */
	size_t nx = (size_t)n * h * w * c, ny = (size_t)n * 4 * 4 * c;
	float *x = rnd(nx, 93), *xc = calloc(nx, 4), *want = calloc(ny, 4), *got = calloc(ny, 4);
	uint8_t *x8 = calloc(nx, 1), *y8 = calloc(ny, 1);
	uint16_t *xh = calloc(nx, 2), *yh = calloc(ny, 2);
	for (size_t i = 0; i < nx; i++) /* u8 values, exact in bf16 too */
		x[i] = fminf(roundf(fabsf(x[i]) * 80), 255), x8[i] = (uint8_t)x[i];
	wf_plan *cp = NULL, *rp = NULL;
	WF_CHECK(wf_op_pad_forward(ref_be, &crop, xc, x) == 0);
	WF_CHECK(wf_op_pool_forward(ref_be, &rp, &d, want, xc) == 0);
	WF_CHECK(wf_op_pool_forward(cpu_be, &cp, &qd, got, x) == 0);
	WF_CHECK_MSG(max_rel_diff(got, want, ny) == 0, "1x1 pool with a cropping, f32");
	WF_CHECK(want[(size_t)(3 * 4 + 3) * c] == 0 && want[c] != 0); /* a pick in the padding */
	WF_CHECK_INT(wf_op_pool_forward(ref_be, &rp, &qd, got, x), WF_EINVAL);
	WF_CHECK_INT(wf_op_pool_backward(cpu_be, &cp, &qd, x, want, x, want), WF_EINVAL);
	if (wf_backend_caps_of(cpu_be).int8) { /* u8 tensors exist where int8 convs do */
		wf_backend_set_precision(cpu_be, "int8", NULL, NULL);
		qd.q8 = 1;
		WF_CHECK(wf_op_pool_forward(cpu_be, &cp, &qd, (float *)y8, (float *)x8) == 0);
		for (size_t i = 0; i < ny; i++)
			got[i] = y8[i];
		WF_CHECK_MSG(max_rel_diff(got, want, ny) == 0, "1x1 pool with a cropping, u8");
		wf_backend_set_precision(cpu_be, "fp32", NULL, NULL);
	}
	if (cpu_be->caps & WF_CAP_BF16) {
		WF_CHECK(wf_backend_set_precision(cpu_be, "bf16", NULL, NULL) == 0);
		qd.q8 = 0, qd.io_bf16 = 1;
		to_bf16(xh, x, nx);
		WF_CHECK(wf_op_pool_forward(cpu_be, &cp, &qd, (float *)yh, (float *)xh) == 0);
		from_bf16(got, yh, ny);
		WF_CHECK_MSG(max_rel_diff(got, want, ny) == 0, "1x1 pool with a cropping, bf16");
		wf_backend_set_precision(cpu_be, "fp32", NULL, NULL);
	}
	wf_backend_plan_free(cpu_be, &cp);
	wf_backend_plan_free(ref_be, &rp);
	free(x), free(xc), free(want), free(got), free(x8), free(y8), free(xh), free(yh);
}

/* concat_u8 (a concat read only by a u8 relu) writes to_u8 of the float
 * concat: rows that fit its buffer many at a time (a last block short),
 * and rows wider than it, ties, saturation and NaN among the values; an
 * input given as u8 in the same scale (u8_in) is copied. */
static void test_concat_u8_is_to_u8_of_the_concat(void)
{
	const int w1[] = {44, 88, 5}, w2[] = {3000, 1500};
	const int *ws[] = {w1, w2}, ks[] = {3, 2};
	const size_t rows[] = {1001, 7};
	const float edge[] = {-3.0f,   0.0f,   0.25f,  0.5f,   1.5f, 2.5f,
			      2.4999f, 127.5f, 254.5f, 300.0f, NAN};
	const float scale = 64.0f; /* x * scale exact: the ties stay ties */
	for (int t = 0; t < 2; t++) {
		int k = ks[t], total = 0;
		const float *xs[3];
		float *in[3];
		uint8_t *in8 = malloc(rows[t] * (size_t)ws[t][1]);
		for (int i = 0; i < k; i++) {
			in[i] = rnd(rows[t] * ws[t][i], 94 + i);
			xs[i] = in[i];
			total += ws[t][i];
		}
		for (size_t j = 0; j < sizeof(edge) / sizeof(edge[0]); j++)
			in[0][j * 3] = edge[j] / scale;
		size_t n = rows[t] * total;
		float *cat = calloc(n, 4);
		uint8_t *want = calloc(n, 1), *got = calloc(n, 1);
		WF_CHECK(wf_op_concat_forward(cpu_be, rows[t], k, ws[t], cat, xs) == 0);
		WF_CHECK(wf_op_to_u8(cpu_be, n, want, cat, NULL, scale) == 0);
		WF_CHECK(wf_op_concat_u8(cpu_be, rows[t], k, ws[t], got, (const void *const *)xs, 0,
					 scale) == 0);
		WF_CHECK_MSG(memcmp(got, want, n) == 0, "concat_u8, rows of %d", total);
		/* input 1 already u8 */
		WF_CHECK(wf_op_to_u8(cpu_be, rows[t] * ws[t][1], in8, in[1], NULL, scale) == 0);
		const void *mixed[3] = {in[0], in8, k > 2 ? in[2] : NULL};
		memset(got, 0, n);
		WF_CHECK(wf_op_concat_u8(cpu_be, rows[t], k, ws[t], got, mixed, 2u, scale) == 0);
		WF_CHECK_MSG(memcmp(got, want, n) == 0, "concat_u8 with a u8 input, rows of %d",
			     total);
		WF_CHECK_INT(wf_op_concat_u8(ref_be, rows[t], k, ws[t], got,
					     (const void *const *)xs, 0, scale),
			     WF_EINVAL);
		for (int i = 0; i < k; i++)
			free(in[i]);
		free(in8), free(cat), free(want), free(got);
	}
}

/* to_u8 (a relu read by int8 convs): x * scale to nearest, ties to even,
 * saturated to [0, 255], NaN to 0, over enough values for the threads; ref
 * has no int8 tensors, and a scale must be finite and positive. */
static void test_to_u8_rounds_to_even_and_saturates(void)
{
	const size_t n = 100003;
	float *x = calloc(n, sizeof(float));
	uint8_t *y = calloc(n, 1);
	const float in[] = {-3.0f,   0.0f,   0.25f,  0.5f,   1.5f, 2.5f,
			    2.4999f, 127.5f, 254.5f, 300.0f, NAN};
	const uint8_t want[] = {0, 0, 0, 0, 2, 2, 2, 128, 254, 255, 0};
	size_t k = sizeof(in) / sizeof(in[0]);
	for (size_t i = 0; i < n; i++)
		x[i] = in[i % k] / 2.0f;
	WF_CHECK(wf_op_to_u8(cpu_be, n, y, x, NULL, 2.0f) == 0);
	size_t bad = 0;
	for (size_t i = 0; i < n; i++)
		bad += y[i] != want[i % k];
	WF_CHECK_MSG(bad == 0, "to_u8: %zu of %zu values wrong (y[2..5] %d %d %d %d)", bad, n, y[2],
		     y[3], y[4], y[5]);
	/* with a second addend: to_u8 of the sum (a branch sum that only a u8
	 * concat reads) */
	float *b = rnd(n, 41), *sum = calloc(n, sizeof(float));
	uint8_t *y2 = calloc(n, 1);
	WF_CHECK(wf_op_add(cpu_be, n, sum, x, b) == 0);
	WF_CHECK(wf_op_to_u8(cpu_be, n, y, sum, NULL, 2.0f) == 0);
	WF_CHECK(wf_op_to_u8(cpu_be, n, y2, x, b, 2.0f) == 0);
	WF_CHECK_MSG(memcmp(y, y2, n) == 0, "to_u8 of x + b differs from to_u8 of add(x, b)");
	free(b), free(sum), free(y2);
	WF_CHECK_INT(wf_op_to_u8(ref_be, n, y, x, NULL, 2.0f), WF_EINVAL);
	WF_CHECK_INT(wf_op_to_u8(cpu_be, n, y, x, NULL, 0.0f), WF_EINVAL);
	WF_CHECK_INT(wf_op_to_u8(cpu_be, n, y, x, NULL, INFINITY), WF_EINVAL);
	free(x);
	free(y);
}

/* avgpool3_to_u8 (an average pool and the add reading it, for a u8
 * concat) is to_u8 of ref's 3x3 "same" average pool (padding not counted)
 * plus the other input, or of the pool twice: within one step of the
 * rounding (the average's own rounding differs), on shapes with channel
 * tails, a single row or column, more than 16 channels. */
static void test_avgpool3_to_u8_is_pool_then_add(void)
{
	const int shapes[][4] = {{2, 5, 6, 44}, {1, 1, 7, 3}, {3, 4, 1, 20}, {1, 3, 3, 1}};
	for (int t = 0; t < 4; t++) {
		int n = shapes[t][0], h = shapes[t][1], w = shapes[t][2], c = shapes[t][3];
		size_t cnt = (size_t)n * h * w * c;
		float *x = rnd(cnt, 120 + t), *b = rnd(cnt, 130 + t), *pool = calloc(cnt, 4);
		float *sum = calloc(cnt, 4);
		uint8_t *want = calloc(cnt, 1), *got = calloc(cnt, 1);
		wf_pool_desc pd;
		wf_pool_desc_init(&pd, WF_POOL_AVG, n, h, w, c, 3, 3, 1, 1, 1);
		wf_plan *rp = NULL;
		WF_CHECK(wf_op_pool_forward(ref_be, &rp, &pd, pool, x) == 0);
		for (int twice = 0; twice < 2; twice++) {
			WF_CHECK(wf_op_add(cpu_be, cnt, sum, pool, twice ? pool : b) == 0);
			WF_CHECK(wf_op_to_u8(cpu_be, cnt, want, sum, NULL, 40.0f) == 0);
			WF_CHECK(wf_op_avgpool3_to_u8(cpu_be, n, h, w, c, got, x,
						      twice ? 2.0f : 1.0f, twice ? NULL : b,
						      40.0f) == 0);
			int worst = 0;
			for (size_t j = 0; j < cnt; j++)
				worst = WF_MAX(worst, abs((int)got[j] - (int)want[j]));
			WF_CHECK_MSG(worst <= 1, "avgpool3_to_u8 %dx%dx%dx%d%s: off by %d", n, h, w,
				     c, twice ? " (pool twice)" : "", worst);
		}
		WF_CHECK_INT(wf_op_avgpool3_to_u8(ref_be, n, h, w, c, got, x, 1.0f, b, 40.0f),
			     WF_EINVAL);
		wf_backend_plan_free(ref_be, &rp);
		free(x), free(b), free(pool), free(sum), free(want), free(got);
	}
}

/* the global average pool of an int8 tensor equals ref's of its values */
static void test_gap_of_int8_tensors_matches_ref(void)
{
	const int n = 3, hw = 49, c = 70;
	size_t cnt = (size_t)n * hw * c;
	uint8_t *q = malloc(cnt);
	float *x = malloc(cnt * sizeof(float)), y[3 * 70], want[3 * 70];
	const float scale = 255.0f / 6.0f;
	for (int u8 = 0; u8 < 2; u8++) {
		for (size_t i = 0; i < cnt; i++) {
			int v = u8 ? (int)(i * 37 % 256) : (int)(i * 37 % 256) - 128;
			q[i] = (uint8_t)v;
			x[i] = (float)v / scale;
		}
		WF_CHECK(wf_op_gap_forward(ref_be, n, hw, c, want, x) == 0);
		WF_CHECK(wf_op_gap_q8(cpu_be, n, hw, c, y, q, scale, u8) == 0);
		float worst = 0;
		for (int i = 0; i < n * c; i++)
			worst = fmaxf(worst, fabsf(y[i] - want[i]));
		WF_CHECK_MSG(worst < 1e-5f, "gap_q8 (u8 %d): worst difference %g", u8,
			     (double)worst);
	}
	WF_CHECK_INT(wf_op_gap_q8(ref_be, n, hw, c, y, q, scale, 1), WF_EINVAL);
	WF_CHECK_INT(wf_op_gap_q8(cpu_be, n, hw, c, y, q, 0.0f, 1), WF_EINVAL);
	free(q);
	free(x);
}

int main(void)
{
	wf_err err = {0};
	if (wf_backend_create(&cpu_be, "cpu", 2, &err) != 0) {
		fprintf(stderr, "skip: cpu backend not built: %s\n", err.msg);
		return 77;
	}
	if (wf_backend_create(&ref_be, "ref", 0, &err) != 0) {
		fprintf(stderr, "ref backend: %s\n", err.msg);
		return 1;
	}
	WF_RUN(test_every_shared_case_matches_ref);
	WF_RUN(test_resnet_shapes_match_ref);
	WF_RUN(test_random_conv_and_pool_geometries);
	WF_RUN(test_conv_plan_reused_then_rebuilt_on_batch_change);
	WF_RUN(test_dense_bn_pool_plans_follow_batch_size);
	WF_RUN(test_conv_backward_one_gradient_at_a_time);
	WF_RUN(test_plan_slot_switching_op_kind_is_rebuilt);
	WF_RUN(test_bad_descriptors_fail_with_a_message);
	WF_RUN(test_precision_names);
	WF_RUN(test_fused_conv_matches_ref);
	WF_RUN(test_int8_conv_matches_ref);
	WF_RUN(test_int8_tensors_between_convs);
	WF_RUN(test_every_shared_case_in_bf16_matches_ref);
	WF_RUN(test_bf16_conv_backward_reuses_only_current_copies);
	WF_RUN(test_training_fusions_match_ref);
	WF_RUN(test_max_pool_on_int8_and_bf16_tensors);
	WF_RUN(test_pick_pool_applies_a_cropping);
	WF_RUN(test_concat_u8_is_to_u8_of_the_concat);
	WF_RUN(test_avgpool3_to_u8_is_pool_then_add);
	WF_RUN(test_to_u8_rounds_to_even_and_saturates);
	WF_RUN(test_gap_of_int8_tensors_matches_ref);
	wf_backend_free(cpu_be);
	wf_backend_free(ref_be);
	return wf_test_summary();
}
