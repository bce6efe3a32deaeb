/* test_cuda_ops.c: every op of the cuda backend against the ref backend:
 * the shared op cases of tests/kernels/op_cases.h (outputs, updated state,
 * input gradients, accumulated parameter gradients), resnet-sized shapes
 * that take cuDNN's fast paths, plans reused and rebuilt, dropout masks bit
 * for bit, bad labels reported, and convolutions/dense layers in bf16, fp16
 * and tf32. Skips (77) where no CUDA device is usable.
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
	WF_RUN(test_bad_descriptors_fail_with_a_message);
	wf_backend_free(cuda_be);
	wf_backend_free(ref_be);
	return wf_test_summary();
}
