/* test_cuda_ops.c: every op of the cuda backend against the ref backend:
 * the shared op cases of tests/kernels/op_cases.h (outputs, updated state,
 * input gradients, accumulated parameter gradients), resnet-sized shapes
 * that take cuDNN's fast paths, plans reused and rebuilt, dropout masks bit
 * for bit, bad labels reported, and convolutions/dense layers in bf16, fp16
 * and tf32, the training fusions (batch norm + relu, bf16 tensors, add + relu).
 * Skips (77) where no CUDA device is usable.
 *
 * Debugging: WEFT_TEST_CASE=<name substring> runs only matching cases;
 * failures print the case, the tensor, the worst element and both values. */
#include "tests/gpu/gpu_test.h"
#include "tests/kernels/op_cases.h"
#include "tests/test.h"

static wf_backend *ref_be, *cuda_be;

static int selected(const char *name)
{
	const char *only = getenv("WEFT_TEST_CASE");
	return !only || !*only || strstr(name, only);
}

/* Float32 tolerance of a case: long sums (conv, dense, batch norm) 1e-4,
 * the rest 1e-5; both relative to the tensor's largest magnitude. */
static double fp32_tol(const wf_opc_case *c)
{
	return c->kind == WF_OPC_CONV || c->kind == WF_OPC_DENSE || c->kind == WF_OPC_BN ? 1e-4
											 : 1e-5;
}

/* Run c on cuda and ref with the same inputs and compare everything. */
static void check_case(const wf_opc_case *c, uint64_t seed, double tol)
{
	if (!selected(c->name))
		return;
	wf_opc_io a, b;
	wf_err err = {0};
	char what[160];
	wf_opc_io_init(c, &a, seed);
	wf_opc_io_init(c, &b, seed);
	int rc = wf_opc_run(cuda_be, c, &a, 1, &err);
	WF_CHECK_MSG(rc == 0, "%s", err.msg);
	if (rc == 0) {
		rc = wf_opc_run(ref_be, c, &b, 1, &err);
		WF_CHECK_MSG(rc == 0, "%s", err.msg);
	}
	for (int i = 0; rc == 0 && i < a.n_out; i++) {
		snprintf(what, sizeof(what), "%s out %s", c->name, a.out[i].name);
		WF_CHECK_MSG(
			a.out[i].len == b.out[i].len &&
				wf_gpu_close(what, a.out[i].host, b.out[i].host, a.out[i].len, tol),
			"%s", what);
	}
	for (int i = 0; rc == 0 && c->backward && i < a.n_in; i++) {
		snprintf(what, sizeof(what), "%s d%s", c->name, a.din[i].name);
		WF_CHECK_MSG(wf_gpu_close(what, a.din[i].host, b.din[i].host, a.din[i].len, tol),
			     "%s", what);
	}
	for (int i = 0; rc == 0 && c->backward && i < a.n_param; i++) {
		snprintf(what, sizeof(what), "%s d%s", c->name, a.dparam[i].name);
		WF_CHECK_MSG(wf_gpu_close(what, a.dparam[i].host, b.dparam[i].host, a.dparam[i].len,
					  tol),
			     "%s", what);
	}
	wf_opc_io_free(&a);
	wf_opc_io_free(&b);
}

static void test_every_shared_case_matches_ref(void)
{
	wf_opc_case c;
	int n = 0;
	for (int i = 0; wf_opc_get(i, &c) == 0; i++, n++)
		check_case(&c, 1000 + (uint64_t)i, fp32_tol(&c));
	WF_CHECK(n > 30);
}

static void conv_case(wf_opc_case *c, const char *name, int n, int h, int w, int ch, int oc, int k,
		      int s, int groups, int same, int pad, int bias)
{
	memset(c, 0, sizeof(*c));
	snprintf(c->name, sizeof(c->name), "%.63s", name);
	c->kind = WF_OPC_CONV;
	c->backward = 1;
	wf_conv_desc_init(&c->conv, n, h, w, ch, oc, k, k, s, s, 1, 1, groups, same, pad, pad,
			  bias);
}

/* Shapes of resnet20/resnet50 and mobilenet layers: the ones cuDNN picks
 * tensor-core and implicit-GEMM paths for. */
static void resnet_cases(wf_opc_case *cs, int *n)
{
	int k = 0;
	conv_case(&cs[k++], "r20_stem_3x3_c3_16", 4, 32, 32, 3, 16, 3, 1, 1, 1, 0, 0);
	conv_case(&cs[k++], "r20_3x3_16_16", 4, 32, 32, 16, 16, 3, 1, 1, 1, 0, 0);
	conv_case(&cs[k++], "r20_3x3_s2_16_32", 4, 32, 32, 16, 32, 3, 2, 1, 1, 0, 0);
	conv_case(&cs[k++], "r20_1x1_s2_16_32_proj", 4, 32, 32, 16, 32, 1, 2, 1, 1, 0, 0);
	conv_case(&cs[k++], "r50_stem_7x7_s2_same", 2, 64, 64, 3, 64, 7, 2, 1, 1, 0, 0);
	conv_case(&cs[k++], "r50_1x1_256_64", 2, 14, 14, 256, 64, 1, 1, 1, 1, 0, 0);
	conv_case(&cs[k++], "mobilenet_dw_3x3_s2", 2, 16, 16, 32, 32, 3, 2, 32, 1, 0, 1);
	conv_case(&cs[k++], "grouped_3x3_g4_bias", 2, 12, 12, 32, 64, 3, 1, 4, 1, 0, 1);
	memset(&cs[k], 0, sizeof(cs[k]));
	snprintf(cs[k].name, sizeof(cs[k].name), "dense_256x64_10");
	cs[k].kind = WF_OPC_DENSE, cs[k].backward = 1;
	cs[k++].dense = (wf_dense_desc){.n = 256, .in = 64, .out = 10, .bias = 1};
	memset(&cs[k], 0, sizeof(cs[k]));
	snprintf(cs[k].name, sizeof(cs[k].name), "batchnorm_8x16x16x32");
	cs[k].kind = WF_OPC_BN, cs[k].backward = 1, cs[k].training = 1;
	cs[k++].bn =
		(wf_bn_desc){.n = 8, .h = 16, .w = 16, .c = 32, .eps = 1e-3f, .momentum = 0.99f};
	/* channels not a multiple of the kernels' 32, rows over many blocks */
	memset(&cs[k], 0, sizeof(cs[k]));
	snprintf(cs[k].name, sizeof(cs[k].name), "batchnorm_4x28x28x40");
	cs[k].kind = WF_OPC_BN, cs[k].backward = 1, cs[k].training = 1;
	cs[k++].bn =
		(wf_bn_desc){.n = 4, .h = 28, .w = 28, .c = 40, .eps = 1e-5f, .momentum = 0.9f};
	memset(&cs[k], 0, sizeof(cs[k]));
	snprintf(cs[k].name, sizeof(cs[k].name), "maxpool_3x3_s2_same_r50");
	cs[k].kind = WF_OPC_POOL, cs[k].backward = 1;
	wf_pool_desc_init(&cs[k++].pool, WF_POOL_MAX, 2, 32, 32, 16, 3, 3, 2, 2, 1);
	memset(&cs[k], 0, sizeof(cs[k]));
	snprintf(cs[k].name, sizeof(cs[k].name), "softmax_xent_1000_classes");
	cs[k].kind = WF_OPC_XENT, cs[k].backward = 1, cs[k].rows = 16, cs[k].k = 1000;
	cs[k++].scale = 1.0f / 16;
	*n = k;
}

static void test_resnet_shapes_match_ref(void)
{
	wf_opc_case cs[16];
	int n;
	resnet_cases(cs, &n);
	for (int i = 0; i < n; i++)
		check_case(&cs[i], 2000 + (uint64_t)i, fp32_tol(&cs[i]));
}

/* Convolutions and dense layers in reduced precision: float32 master data,
 * bf16/fp16 operands on tensor cores, float32 accumulation. */
static void reduced_precision(wf_precision p, double tol)
{
	wf_err err = {0};
	WF_CHECK_MSG(wf_backend_cuda_set_precision(cuda_be, p, &err) == 0, "%s", err.msg);
	WF_CHECK(wf_backend_cuda_precision(cuda_be) == p);
	wf_opc_case c, cs[16];
	for (int i = 0; wf_opc_get(i, &c) == 0; i++)
		if (c.kind == WF_OPC_CONV || c.kind == WF_OPC_DENSE) {
			snprintf(c.name + strlen(c.name), sizeof(c.name) - strlen(c.name), "@%s",
				 wf_precision_name(p));
			check_case(&c, 3000 + (uint64_t)i, tol);
		}
	int n;
	resnet_cases(cs, &n);
	for (int i = 0; i < n; i++)
		if (cs[i].kind == WF_OPC_CONV || cs[i].kind == WF_OPC_DENSE)
			check_case(&cs[i], 4000 + (uint64_t)i, tol);
	wf_backend_cuda_set_precision(cuda_be, WF_PREC_FP32, &err);
}

static void test_bf16_conv_and_dense_match_ref(void)
{
	reduced_precision(WF_PREC_BF16, 2e-2);
}

static void test_fp16_conv_and_dense_match_ref(void)
{
	reduced_precision(WF_PREC_FP16, 5e-3);
}

static void test_tf32_conv_and_dense_match_ref(void)
{
	reduced_precision(WF_PREC_TF32, 5e-3);
}

/* Device buffer of n floats holding host data. */
static float *dev_floats(const float *host, size_t n)
{
	float *p = wf_op_alloc(cuda_be, n * sizeof(float));
	if (p && host)
		wf_op_to_device(cuda_be, p, host, n * sizeof(float));
	return p;
}

static float *rnd(size_t n, uint64_t seed)
{
	wf_rng r;
	wf_rng_seed(&r, seed);
	float *p = malloc(n * sizeof(float));
	for (size_t i = 0; i < n; i++)
		p[i] = (float)wf_rng_normal(&r);
	return p;
}

/* y = conv(x) on ref and on cuda through one plan slot, at batch n. */
static int conv_matches(wf_plan **slot, int n, uint64_t seed)
{
	wf_conv_desc d;
	wf_conv_desc_init(&d, n, 9, 9, 8, 12, 3, 3, 1, 1, 1, 1, 1, 1, 0, 0, 1);
	size_t xl = (size_t)n * 9 * 9 * 8, wl = 3 * 3 * 8 * 12, yl = (size_t)n * 9 * 9 * 12;
	float *x = rnd(xl, seed), *w = rnd(wl, seed + 1), *b = rnd(12, seed + 2);
	float *y = malloc(yl * sizeof(float)), *yr = malloc(yl * sizeof(float));
	float *dx = dev_floats(x, xl), *dw = dev_floats(w, wl), *db = dev_floats(b, 12);
	float *dy = dev_floats(NULL, yl);
	int ok = wf_op_conv2d_forward(cuda_be, slot, &d, dy, dx, dw, db) == 0 &&
		 wf_op_to_host(cuda_be, y, dy, yl * sizeof(float)) == 0 &&
		 wf_op_conv2d_forward(ref_be, NULL, &d, yr, x, w, b) == 0 &&
		 wf_gpu_close("conv plan", y, yr, yl, 1e-4);
	if (!ok)
		fprintf(stderr, "  cuda: %s\n", cuda_be->err.msg);
	wf_op_free(cuda_be, dx);
	wf_op_free(cuda_be, dw);
	wf_op_free(cuda_be, db);
	wf_op_free(cuda_be, dy);
	free(x), free(w), free(b), free(y), free(yr);
	return ok;
}

static void test_conv_plan_reused_then_rebuilt_on_batch_change(void)
{
	wf_plan *slot = NULL;
	WF_CHECK(conv_matches(&slot, 4, 1));
	wf_plan *first = slot;
	WF_CHECK(conv_matches(&slot, 4, 2));
	WF_CHECK(slot == first); /* same shape: the very same plan */
	WF_CHECK(conv_matches(&slot, 3, 3));
	WF_CHECK(conv_matches(&slot, 4, 4));
	wf_backend_plan_free(cuda_be, &slot);
	WF_CHECK(slot == NULL);
}

static void test_dropout_mask_is_bit_identical_to_host_hash(void)
{
	const size_t n = 100003;
	const float rate = 0.37f;
	const uint64_t seed = 0xfeedbeefULL;
	float *x = rnd(n, 5), *y = malloc(n * sizeof(float));
	uint8_t *mask = malloc(n);
	float *dx = dev_floats(x, n), *dy = dev_floats(NULL, n);
	uint8_t *dm = wf_op_alloc(cuda_be, n);
	int rc = wf_op_dropout_forward(cuda_be, n, rate, seed, dy, dm, dx);
	rc = rc ? rc : wf_op_to_host(cuda_be, mask, dm, n);
	rc = rc ? rc : wf_op_to_host(cuda_be, y, dy, n * sizeof(float));
	WF_CHECK_MSG(rc == 0, "%s", cuda_be->err.msg);
	size_t wrong = 0, kept = 0;
	for (size_t i = 0; rc == 0 && i < n; i++) {
		int keep = wf_dropout_keep(seed, i, rate);
		kept += (size_t)keep;
		wrong += mask[i] != keep || y[i] != (keep ? x[i] * (1.0f / (1.0f - rate)) : 0.0f);
	}
	WF_CHECK_INT(wrong, 0);
	WF_CHECK(fabs((double)kept / n - (1.0 - rate)) < 0.01);
	wf_op_free(cuda_be, dx);
	wf_op_free(cuda_be, dy);
	wf_op_free(cuda_be, dm);
	free(x), free(y), free(mask);
}

static void test_bad_label_is_reported_at_the_next_sync(void)
{
	int32_t labels[3] = {1, 7, 0}; /* 7 is outside [0, 5) */
	float *z = rnd(15, 9);
	float *dz = dev_floats(z, 15), *dp = dev_floats(NULL, 15), *dl = dev_floats(NULL, 3);
	int32_t *dlab = wf_op_alloc(cuda_be, sizeof(labels));
	wf_op_to_device(cuda_be, dlab, labels, sizeof(labels));
	int rc = wf_op_softmax_xent_forward(cuda_be, 3, 5, dp, dl, dz, dlab);
	WF_CHECK_INT(rc, 0);
	rc = wf_op_sync(cuda_be);
	WF_CHECK_INT(rc, WF_EINVAL);
	WF_CHECK_MSG(strstr(cuda_be->err.msg, "labels[1]=7") != NULL, "%s", cuda_be->err.msg);
	WF_CHECK_INT(wf_op_sync(cuda_be), 0); /* reported once */
	labels[1] = 4;
	wf_op_to_device(cuda_be, dlab, labels, sizeof(labels));
	rc = wf_op_softmax_xent_forward(cuda_be, 3, 5, dp, dl, dz, dlab);
	WF_CHECK_INT(rc ? rc : wf_op_sync(cuda_be), 0);
	wf_op_free(cuda_be, dz);
	wf_op_free(cuda_be, dp);
	wf_op_free(cuda_be, dl);
	wf_op_free(cuda_be, dlab);
	free(z);
}

/* ---- training fusions (WF_CAP_TRAIN_FUSE) ---- */

/* Round to bf16, nearest even (NaN kept a NaN), and back. */
static void to_bf16(uint16_t *h, const float *f, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		uint32_t u;
		memcpy(&u, &f[i], 4);
		h[i] = isnan(f[i]) ? (uint16_t)((u >> 16) | 0x40)
				   : (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
	}
}

static void from_bf16(float *f, const uint16_t *h, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		union {
			uint32_t u;
			float f;
		} v = {.u = (uint32_t)h[i] << 16};
		f[i] = v.f;
	}
}

/* Device copy of bytes of host data; host copy of a device buffer. */
static void *dev_copy(const void *host, size_t bytes)
{
	void *p = wf_op_alloc(cuda_be, bytes);
	if (p && host)
		wf_op_to_device(cuda_be, p, host, bytes);
	return p;
}

static void *host_copy(const void *dev, size_t bytes)
{
	void *h = malloc(bytes);
	if (h && wf_op_to_host(cuda_be, h, dev, bytes) != 0)
		memset(h, 0xff, bytes); /* NaNs: every comparison fails */
	return h;
}

/* A tensor's values as float, from float or bf16 device memory. */
static float *fetch_vals(const void *dev, size_t n, int bf16)
{
	float *f = malloc(n * sizeof(float));
	void *h = host_copy(dev, n * (bf16 ? 2 : 4));
	if (bf16)
		from_bf16(f, h, n);
	else
		memcpy(f, h, n * sizeof(float));
	free(h);
	return f;
}

/* The tensor x (float values) on the device, as bf16 when bf16; x then holds
 * the values the device holds. */
static void *put_vals(float *x, size_t n, int bf16)
{
	if (!bf16)
		return dev_copy(x, n * sizeof(float));
	uint16_t *h = malloc(n * 2);
	to_bf16(h, x, n);
	from_bf16(x, h, n);
	void *d = dev_copy(h, n * 2);
	free(h);
	return d;
}

/* Batch norm with its relu (1) or relu6 (2) inside, in float and bf16
 * tensors, forward and backward, against ref's batch norm then relu; 16 and 2048 channels (<=
 * 2048) take the 8-wide kernels, 12 the scalar ones. */
static void bn_relu_case(int bf16, int C, int relu)
{
	wf_act_kind act = relu == 2 ? WF_ACT_RELU6 : WF_ACT_RELU;
	const size_t N = (size_t)4 * 6 * 6 * C;
	wf_bn_desc bd = {.n = 4, .h = 6, .w = 6, .c = C, .eps = 1e-3f, .momentum = 0.9f};
	wf_bn_desc fd = bd;
	fd.relu = relu, fd.io_bf16 = bf16;
	float *x = rnd(N, 81 + C), *dy = rnd(N, 82 + C), *g = rnd(C, 83), *bt = rnd(C, 84);
	for (int c = 0; relu == 2 && c < C; c++)
		g[c] *= 5.0f; /* outputs past 6 too */
	float *t = calloc(N, 4), *y2 = calloc(N, 4), *dx2 = calloc(N, 4);
	float *ones = malloc(C * 4), *zeros = calloc(C, 4);
	for (int c = 0; c < C; c++)
		ones[c] = 1.0f;
	void *xd = put_vals(x, N, bf16), *dyd = put_vals(dy, N, bf16);
	void *yd = dev_copy(NULL, N * 4), *dxd = dev_copy(NULL, N * 4);
	float *gd = dev_copy(g, C * 4), *btd = dev_copy(bt, C * 4), *smd = dev_copy(NULL, C * 4);
	float *sid = dev_copy(NULL, C * 4), *rmd = dev_copy(zeros, C * 4);
	float *rvd = dev_copy(ones, C * 4), *dgd = dev_copy(zeros, C * 4);
	float *dbd = dev_copy(zeros, C * 4);
	static float sm[2048], si[2048], rm[2048], rv[2048], dg[2048], db[2048];
	memset(rm, 0, sizeof(rm)), memset(dg, 0, sizeof(dg)), memset(db, 0, sizeof(db));
	for (int c = 0; c < C; c++)
		rv[c] = 1.0f;
	wf_plan *cp = NULL, *rp = NULL;
	int rc = wf_op_batchnorm_forward(cuda_be, &cp, &fd, 1, yd, smd, sid, xd, gd, btd, rmd, rvd);
	if (!rc)
		rc = wf_op_batchnorm_backward(cuda_be, &cp, &fd, dxd, dgd, dbd, dyd, xd, gd, smd,
					      sid);
	WF_CHECK_MSG(rc == 0, "bn relu on cuda: %s", cuda_be->err.msg);
	WF_CHECK(wf_op_batchnorm_forward(ref_be, &rp, &bd, 1, t, sm, si, x, g, bt, rm, rv) == 0);
	WF_CHECK(wf_op_act_forward(ref_be, act, N, y2, t) == 0);
	WF_CHECK(wf_op_act_backward(ref_be, act, N, t, dy, y2) == 0);
	WF_CHECK(wf_op_batchnorm_backward(ref_be, &rp, &bd, dx2, dg, db, t, x, g, sm, si) == 0);
	double tol = bf16 ? 2e-2 : 1e-4;
	char what[64];
	float *y1 = fetch_vals(yd, N, bf16), *dx1 = fetch_vals(dxd, N, bf16);
	float *dg1 = fetch_vals(dgd, C, 0), *db1 = fetch_vals(dbd, C, 0);
	float *rv1 = fetch_vals(rvd, C, 0), *si1 = fetch_vals(sid, C, 0);
	snprintf(what, sizeof(what), "bn %s %s C=%d", relu == 2 ? "relu6" : "relu",
		 bf16 ? "bf16" : "fp32", C);
	WF_CHECK_MSG(wf_gpu_close(what, y1, y2, N, tol), "%s y", what);
	WF_CHECK_MSG(wf_gpu_close(what, dx1, dx2, N, tol), "%s dx", what);
	WF_CHECK_MSG(wf_gpu_close(what, dg1, dg, C, tol) && wf_gpu_close(what, db1, db, C, tol),
		     "%s dgamma/dbeta", what);
	WF_CHECK_MSG(wf_gpu_close(what, rv1, rv, C, 1e-4) && wf_gpu_close(what, si1, si, C, 1e-4),
		     "%s statistics", what);
	wf_backend_plan_free(cuda_be, &cp);
	wf_backend_plan_free(ref_be, &rp);
	void *bufs[] = {xd, dyd, yd, dxd, gd, btd, smd, sid, rmd, rvd, dgd, dbd};
	for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++)
		wf_op_free(cuda_be, bufs[i]);
	free(x), free(dy), free(g), free(bt), free(t), free(y2), free(dx2), free(ones), free(zeros);
	free(y1), free(dx1), free(dg1), free(db1), free(rv1), free(si1);
}

/* A conv 16 -> 16 reading and writing bf16 tensors (y, dx bf16; dw, db
 * float) against ref on the same values: k x k, stride s, Keras "same" (a
 * 3x3 of stride 2 pads asymmetrically: the explicitly padded path); groups
 * 16: depthwise, on our own kernels. */
static void bf16_conv_case(int k, int stride, int groups)
{
	wf_conv_desc cd;
	wf_conv_desc_init(&cd, 4, 6, 6, 16, 16, k, k, stride, stride, 1, 1, groups, 1, 0, 0, 1);
	cd.io_bf16 = 3;
	size_t xl = 4 * 6 * 6 * 16, yl = (size_t)4 * cd.oh * cd.ow * 16;
	size_t wl = (size_t)k * k * (16 / groups) * 16;
	float *x = rnd(xl, 85), *dy = rnd(yl, 86), *w = rnd(wl, 87), *b = rnd(16, 88);
	float *y2 = calloc(yl, 4), *dx2 = calloc(xl, 4), *dw2 = calloc(wl, 4), *db2 = calloc(16, 4);
	void *xd = put_vals(x, xl, 1), *dyd = put_vals(dy, yl, 1), *yd = dev_copy(NULL, yl * 2);
	void *dxd = dev_copy(NULL, xl * 2);
	float *wd = dev_copy(w, wl * 4), *bd = dev_copy(b, 64), *dwd = dev_copy(dw2, wl * 4);
	float *dbd = dev_copy(db2, 64);
	wf_plan *cp = NULL;
	int rc = wf_op_conv2d_forward(cuda_be, &cp, &cd, yd, xd, wd, bd);
	if (!rc)
		rc = wf_op_conv2d_backward(cuda_be, &cp, &cd, dxd, dwd, dbd, dyd, xd, wd);
	WF_CHECK_MSG(rc == 0, "bf16 conv on cuda: %s", cuda_be->err.msg);
	cd.io_bf16 = 0;
	WF_CHECK(wf_op_conv2d_forward(ref_be, NULL, &cd, y2, x, w, b) == 0);
	WF_CHECK(wf_op_conv2d_backward(ref_be, NULL, &cd, dx2, dw2, db2, dy, x, w) == 0);
	float *y1 = fetch_vals(yd, yl, 1), *dx1 = fetch_vals(dxd, xl, 1);
	float *dw1 = fetch_vals(dwd, wl, 0), *db1 = fetch_vals(dbd, 16, 0);
	char what[64];
	snprintf(what, sizeof(what), "bf16 %dx%d/%d groups %d conv", k, k, stride, groups);
	WF_CHECK_MSG(wf_gpu_close(what, y1, y2, yl, 2e-2), "%s y", what);
	WF_CHECK_MSG(wf_gpu_close(what, dx1, dx2, xl, 2e-2), "%s dx", what);
	WF_CHECK_MSG(wf_gpu_close(what, dw1, dw2, wl, 2e-2), "%s dw", what);
	WF_CHECK_MSG(wf_gpu_close(what, db1, db2, 16, 2e-2), "%s db", what);
	wf_backend_plan_free(cuda_be, &cp);
	void *bufs[] = {xd, dyd, yd, dxd, wd, bd, dwd, dbd};
	for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++)
		wf_op_free(cuda_be, bufs[i]);
	free(x), free(dy), free(w), free(b), free(y2), free(dx2), free(dw2), free(db2);
	free(y1), free(dx1), free(dw1), free(db1);
}

/* conv2d_backward adding into a float dx (dx_acc, WF_CAP_DX_ACC): the input
 * gradient is the base plus ref's, through every path (cuDNN adding itself
 * in fp32, the bf16 gradient added as it is converted, the padded ones), on
 * a fresh plan, whose algorithm search must not overwrite the base. */
static void dx_acc_case(const char *prec, int stride, int groups, double tol)
{
	WF_CHECK(wf_backend_set_precision(cuda_be, prec, NULL, NULL) == 0);
	wf_conv_desc cd;
	wf_conv_desc_init(&cd, 4, 6, 6, 16, 16, 3, 3, stride, stride, 1, 1, groups, 1, 0, 0, 0);
	size_t xl = 4 * 6 * 6 * 16, yl = (size_t)4 * cd.oh * cd.ow * 16, wl = 9 * 16 * 16 / groups;
	float *x = rnd(xl, 95), *dy = rnd(yl, 96), *w = rnd(wl, 97), *base = rnd(xl, 98);
	float *want = calloc(xl, 4);
	if (strcmp(prec, "bf16") == 0) { /* the values bf16 compute sees */
		void *t = put_vals(dy, yl, 1);
		wf_op_free(cuda_be, t);
		t = put_vals(w, wl, 1);
		wf_op_free(cuda_be, t);
	}
	float *dyd = dev_copy(dy, yl * 4), *wd = dev_copy(w, wl * 4), *dxd = dev_copy(base, xl * 4);
	wf_plan *cp = NULL;
	cd.dx_acc = 1;
	int rc = wf_op_conv2d_backward(cuda_be, &cp, &cd, dxd, NULL, NULL, dyd, NULL, wd);
	WF_CHECK_MSG(rc == 0, "dx_acc conv on cuda: %s", cuda_be->err.msg);
	cd.dx_acc = 0;
	WF_CHECK(wf_op_conv2d_backward(ref_be, NULL, &cd, want, NULL, NULL, dy, x, w) == 0);
	for (size_t i = 0; i < xl; i++)
		want[i] += base[i];
	float *got = fetch_vals(dxd, xl, 0);
	char what[64];
	snprintf(what, sizeof(what), "dx_acc %s stride %d groups %d", prec, stride, groups);
	WF_CHECK_MSG(wf_gpu_close(what, got, want, xl, tol), "%s", what);
	wf_backend_plan_free(cuda_be, &cp);
	wf_op_free(cuda_be, dyd), wf_op_free(cuda_be, wd), wf_op_free(cuda_be, dxd);
	free(x), free(dy), free(w), free(base), free(want), free(got);
	wf_backend_set_precision(cuda_be, "fp32", NULL, NULL);
}

/* The add of bf16 and float tensors (with its relu), the conversion to
 * bf16 and the add+relu backward, bit for bit against the host, over an
 * odd length (scalar kernels) and a multiple of 8 (8-wide). */
static void elementwise_fusions(size_t n)
{
	float *a = rnd(n, 91), *b = rnd(n, 92), *dy = rnd(n, 93), *base = rnd(n, 94);
	a[0] = 1.00390625f, a[1] = 1.01171875f, a[2] = 3e38f, a[3] = NAN; /* ties, big, NaN */
	uint16_t *ah = malloc(n * 2), *bh = malloc(n * 2);
	float *av = malloc(n * 4), *bv = malloc(n * 4), *want = malloc(n * 4);
	to_bf16(ah, a, n), from_bf16(av, ah, n);
	to_bf16(bh, b, n), from_bf16(bv, bh, n);
	float *ad = dev_copy(a, n * 4), *bd = dev_copy(b, n * 4), *yd = dev_copy(NULL, n * 4);
	void *ahd = dev_copy(ah, n * 2), *bhd = dev_copy(bh, n * 2), *hd = dev_copy(NULL, n * 2);
	int bad = 0;
	for (int bits = 0; bits < 4; bits++)
		for (int relu = 0; relu < 2; relu++) {
			const void *pa = bits & 1 ? ahd : (void *)ad,
				   *pb = bits & 2 ? bhd : (void *)bd;
			WF_CHECK(wf_op_add_mixed(cuda_be, n, yd, pa, pb, bits, relu) == 0);
			float *y = fetch_vals(yd, n, 0);
			for (size_t i = 0; i < n; i++) {
				float v = (bits & 1 ? av[i] : a[i]) + (bits & 2 ? bv[i] : b[i]);
				v = relu ? (v > 0.0f ? v : 0.0f) : v;
				bad += memcmp(&v, &y[i], 4) != 0 && !(isnan(v) && isnan(y[i]));
			}
			free(y);
		}
	WF_CHECK_MSG(bad == 0, "add_mixed (n %zu): %d values differ", n, bad);
	for (int act = 0; act < 3; act++) {
		for (size_t i = 0; i < n; i++)
			want[i] = act == 0	? a[i]
				  : act == 1	? fmaxf(a[i], 0.0f)
				  : a[i] < 0.0f ? 0.0f
				  : a[i] > 6.0f ? 6.0f
						: a[i];
		uint16_t *wh = malloc(n * 2);
		to_bf16(wh, want, n);
		WF_CHECK(wf_op_to_bf16(cuda_be, n, hd, ad, act) == 0);
		uint16_t *got = host_copy(hd, n * 2);
		int diff = 0;
		for (size_t i = 0; i < n; i++)
			diff += got[i] != wh[i] &&
				!((got[i] & 0x7fff) > 0x7f80 && (wh[i] & 0x7fff) > 0x7f80);
		WF_CHECK_MSG(diff == 0, "to_bf16 act %d (n %zu): %d values differ", act, n, diff);
		free(wh), free(got);
	}
	/* backward: g = dy where y (b here) > 0; into a written, added, bf16 */
	float *gd = dev_copy(dy, n * 4), *od = dev_copy(base, n * 4);
	WF_CHECK(wf_op_add_relu_backward(cuda_be, n, gd, bd, od, 2, yd, 1) == 0);
	WF_CHECK(wf_op_add_relu_backward(cuda_be, n, gd, bd, hd, 3, NULL, 0) == 0);
	float *added = fetch_vals(od, n, 0), *written = fetch_vals(yd, n, 0);
	uint16_t *conv = host_copy(hd, n * 2), *wh = malloc(n * 2);
	for (size_t i = 0; i < n; i++)
		want[i] = b[i] > 0.0f ? dy[i] : 0.0f;
	to_bf16(wh, want, n);
	bad = 0;
	for (size_t i = 0; i < n; i++)
		bad += written[i] != want[i] || added[i] != base[i] + want[i] || conv[i] != wh[i];
	WF_CHECK_MSG(bad == 0, "add_relu_backward (n %zu): %d values differ", n, bad);
	void *bufs[] = {ad, bd, yd, ahd, bhd, hd, gd, od};
	for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++)
		wf_op_free(cuda_be, bufs[i]);
	free(a), free(b), free(dy), free(base), free(ah), free(bh), free(av), free(bv), free(want);
	free(added), free(written), free(conv), free(wh);
}

static void test_training_fusions_match_ref(void)
{
	wf_err err = {0};
	WF_CHECK((cuda_be->caps & WF_CAP_TRAIN_FUSE) && (cuda_be->caps & WF_CAP_BN_RELU6));
	for (int bf16 = 0; bf16 < 2; bf16++) {
		const char *used = NULL;
		WF_CHECK(wf_backend_set_precision(cuda_be, bf16 ? "bf16" : "fp32", &used, &err) ==
			 0);
		WF_CHECK(cuda_be->bf16 == bf16);
		bn_relu_case(bf16, 16, 1);
		bn_relu_case(bf16, 12, 1);
		bn_relu_case(bf16, 2048, 1);
		bn_relu_case(bf16, 16, 2); /* relu6 (WF_CAP_BN_RELU6) */
		bn_relu_case(bf16, 12, 2);
	}
	bf16_conv_case(3, 1, 1);
	bf16_conv_case(1, 1, 1);
	bf16_conv_case(3, 2, 1);
	bf16_conv_case(3, 1, 16);
	bf16_conv_case(3, 2, 16);
	elementwise_fusions(50001);
	elementwise_fusions(50000);
	dx_acc_case("fp32", 1, 1, 1e-4);
	dx_acc_case("fp32", 2, 1, 1e-4);
	dx_acc_case("bf16", 1, 1, 2e-2);
	dx_acc_case("bf16", 2, 1, 2e-2);
	dx_acc_case("fp32", 2, 16, 1e-4); /* depthwise */
	dx_acc_case("bf16", 1, 16, 2e-2);
	wf_backend_set_precision(cuda_be, "fp32", NULL, &err);
	/* a fused relu's backward needs the forward's statistics */
	wf_bn_desc fd = {.n = 1, .h = 2, .w = 2, .c = 8, .eps = 1e-3f, .momentum = 0.9f, .relu = 1};
	float *buf = dev_copy(NULL, 64 * 4);
	wf_plan *slot = NULL;
	WF_CHECK_INT(wf_op_batchnorm_backward(cuda_be, &slot, &fd, buf, NULL, NULL, buf, buf, NULL,
					      buf, buf),
		     WF_EINVAL);
	WF_CHECK_MSG(strstr(cuda_be->err.msg, "before a training forward") != NULL, "%s",
		     cuda_be->err.msg);
	wf_backend_plan_free(cuda_be, &slot);
	wf_op_free(cuda_be, buf);
}

static void test_bad_descriptors_fail_with_a_message(void)
{
	wf_conv_desc d;
	wf_conv_desc_init(&d, 1, 5, 5, 3, 4, 3, 3, 1, 1, 1, 1, 2, 0, 0, 0, 0); /* 2 !| 3 */
	wf_plan *slot = NULL;
	int rc = wf_op_conv2d_forward(cuda_be, &slot, &d, NULL, NULL, NULL, NULL);
	WF_CHECK_INT(rc, WF_EINVAL);
	WF_CHECK_MSG(strstr(cuda_be->err.msg, "groups=2") != NULL, "%s", cuda_be->err.msg);
	wf_pool_desc p;
	wf_pool_desc_init(&p, WF_POOL_MAX, 1, 4, 4, 1, 2, 2, 2, 2, 0);
	p.oh = 7;
	rc = wf_op_pool_forward(cuda_be, &slot, &p, NULL, NULL);
	WF_CHECK_INT(rc, WF_EINVAL);
	wf_bn_desc bn = {.n = 1, .h = 1, .w = 1, .c = 0, .eps = 1e-3f, .momentum = 0.9f};
	rc = wf_op_batchnorm_forward(cuda_be, &slot, &bn, 1, NULL, NULL, NULL, NULL, NULL, NULL,
				     NULL, NULL);
	WF_CHECK_INT(rc, WF_EINVAL);
	wf_backend_plan_free(cuda_be, &slot);
}

int main(void)
{
	wf_err err = {0};
	cuda_be = wf_gpu_open_or_skip("gpu_test_cuda_ops");
	if (wf_backend_create(&ref_be, "ref", 0, &err) != 0) {
		fprintf(stderr, "ref: %s\n", err.msg);
		return 1;
	}
	WF_RUN(test_every_shared_case_matches_ref);
	WF_RUN(test_resnet_shapes_match_ref);
	WF_RUN(test_bf16_conv_and_dense_match_ref);
	WF_RUN(test_fp16_conv_and_dense_match_ref);
	WF_RUN(test_tf32_conv_and_dense_match_ref);
	WF_RUN(test_conv_plan_reused_then_rebuilt_on_batch_change);
	WF_RUN(test_dropout_mask_is_bit_identical_to_host_hash);
	WF_RUN(test_bad_label_is_reported_at_the_next_sync);
	WF_RUN(test_training_fusions_match_ref);
	WF_RUN(test_bad_descriptors_fail_with_a_message);
	wf_backend_free(cuda_be);
	wf_backend_free(ref_be);
	return wf_test_summary();
}
