/* test_ref_grad.c: the ref backend is the oracle, so it is checked against
 * things that do not depend on it: central finite differences of
 * L = sum(y * r) for every op's input and parameter gradients (the cases of
 * op_cases.h), and forward values computed by hand on tiny inputs. */
#include "tests/test.h"
#include "tests/kernels/op_cases.h"

static wf_backend *be;
static long fd_elements; /* elements compared with finite differences */

/* ---- finite differences over every case ---------------------------------------- */

/* Finite-difference derivative of the case's loss wrt t[j] (t is in io). */
static double fd_derivative(const wf_opc_case *c, wf_opc_io *io, float *t, size_t j, int *rc)
{
	wf_err err = {0};
	float saved = t[j];
	double h = c->fd_step;
	t[j] = (float)(saved + h);
	double hp = (double)t[j] - saved; /* the step float actually took */
	*rc = wf_opc_run(be, c, io, 0, &err);
	double lp = wf_opc_loss(io);
	t[j] = (float)(saved - h);
	double hm = saved - (double)t[j];
	if (!*rc)
		*rc = wf_opc_run(be, c, io, 0, &err);
	double lm = wf_opc_loss(io);
	t[j] = saved;
	if (*rc)
		fprintf(stderr, "%s\n", err.msg);
	return (lp - lm) / (hp + hm);
}

/* Compare an analytic gradient (grad - base, base may be NULL) with finite
 * differences of every element of the tensor t. Returns the mismatches. */
static int check_tensor(const wf_opc_case *c, wf_opc_io *io, const char *what, float *t, size_t len,
			const float *grad, const float *base)
{
	int bad = 0;
	double worst = 0.0;
	for (size_t j = 0; j < len; j++) {
		int rc;
		double fd = fd_derivative(c, io, t, j, &rc);
		if (rc)
			return 1;
		double an = (double)grad[j] - (base ? base[j] : 0.0);
		double diff = fabs(an - fd);
		double tol = 2e-3 + 1e-2 * fmax(fabs(an), fabs(fd));
		if (!(diff <= tol)) {
			if (bad < 5)
				fprintf(stderr, "  %s %s[%zu]: analytic %.6g, finite diff %.6g\n",
					c->name, what, j, an, fd);
			bad++;
		}
		if (diff > worst)
			worst = diff;
		fd_elements++;
	}
	if (bad)
		fprintf(stderr, "  %s %s: %d of %zu elements off (worst |diff| %.3g)\n", c->name,
			what, bad, len, worst);
	return bad;
}

static void test_every_backward_matches_finite_differences(void)
{
	wf_opc_case c;
	int checked = 0;
	for (int i = 0; wf_opc_get(i, &c) == 0; i++) {
		if (!c.backward)
			continue;
		wf_opc_io io;
		wf_err err = {0};
		wf_opc_io_init(&c, &io, 1000 + (uint64_t)i);
		int rc = wf_opc_run(be, &c, &io, 1, &err);
		WF_CHECK_MSG(rc == 0, "%s", err.msg);
		if (rc == 0) {
			for (int t = 0; t < io.n_in; t++)
				if (io.din[t].len)
					WF_CHECK_MSG(check_tensor(&c, &io, io.in[t].name,
								  io.in[t].host, io.in[t].len,
								  io.din[t].host, NULL) == 0,
						     "%s d%s", c.name, io.in[t].name);
			for (int t = 0; t < io.n_param; t++)
				WF_CHECK_MSG(check_tensor(&c, &io, io.param[t].name,
							  io.param[t].host, io.param[t].len,
							  io.dparam[t].host,
							  io.dparam_init[t].host) == 0,
					     "%s d%s", c.name, io.param[t].name);
			checked++;
		}
		wf_opc_io_free(&io);
	}
	WF_CHECK(checked >= 20);
	fprintf(stderr, "  %d cases, %ld gradient elements checked\n", checked, fd_elements);
}

/* Every case, forward and backward, runs without error and yields finite numbers. */
static void test_every_case_runs_and_is_finite(void)
{
	wf_opc_case c;
	for (int i = 0; wf_opc_get(i, &c) == 0; i++) {
		wf_opc_io io;
		wf_err err = {0};
		wf_opc_io_init(&c, &io, 7 + (uint64_t)i);
		int rc = wf_opc_run(be, &c, &io, 1, &err);
		WF_CHECK_MSG(rc == 0, "%s", err.msg);
		for (int t = 0; rc == 0 && t < io.n_out; t++)
			for (size_t j = 0; j < io.out[t].len; j++)
				if (!isfinite(io.out[t].host[j])) {
					WF_CHECK_MSG(0, "%s out %s[%zu] = %g", c.name,
						     io.out[t].name, j, io.out[t].host[j]);
					break;
				}
		for (int t = 0; rc == 0 && t < io.n_in; t++)
			for (size_t j = 0; j < io.din[t].len; j++)
				if (!isfinite(io.din[t].host[j])) {
					WF_CHECK_MSG(0, "%s d%s[%zu] = %g (not overwritten?)",
						     c.name, io.in[t].name, j, io.din[t].host[j]);
					break;
				}
		wf_opc_io_free(&io);
	}
}

/* Two runs of a case on the same inputs agree bit for bit (the oracle is deterministic). */
static void test_every_case_is_deterministic(void)
{
	wf_opc_case c;
	for (int i = 0; wf_opc_get(i, &c) == 0; i++) {
		wf_opc_io a, b;
		wf_err err = {0};
		wf_opc_io_init(&c, &a, 31 + (uint64_t)i);
		wf_opc_io_init(&c, &b, 31 + (uint64_t)i);
		int rc = wf_opc_run(be, &c, &a, 1, &err);
		if (rc == 0)
			rc = wf_opc_run(be, &c, &b, 1, &err);
		WF_CHECK_MSG(rc == 0, "%s", err.msg);
		if (rc == 0)
			WF_CHECK_MSG(wf_opc_compare(&c, &a, &b, 0, 0) == 0, "%s", c.name);
		wf_opc_io_free(&a);
		wf_opc_io_free(&b);
	}
}

/* ---- hand-computed forward values ---------------------------------------------------- */

static void test_keras_same_padding_shapes(void)
{
	wf_conv_desc d;
	wf_conv_desc_init(&d, 1, 7, 7, 1, 1, 3, 3, 2, 2, 1, 1, 1, 1, 0, 0, 0);
	WF_CHECK_INT(d.oh, 4);
	WF_CHECK_INT(d.ow, 4);
	WF_CHECK_INT(d.pt, 1);
	WF_CHECK_INT(d.pb, 1);
	WF_CHECK_INT(d.pl, 1);
	WF_CHECK_INT(d.pr, 1);
	/* even input: the extra pad row goes to the bottom, as in Keras */
	wf_conv_desc e;
	wf_conv_desc_init(&e, 1, 8, 8, 1, 1, 3, 3, 2, 2, 1, 1, 1, 1, 0, 0, 0);
	WF_CHECK_INT(e.oh, 4);
	WF_CHECK_INT(e.pt, 0);
	WF_CHECK_INT(e.pb, 1);
	wf_conv_desc f;
	wf_conv_desc_init(&f, 1, 7, 7, 1, 1, 4, 4, 2, 2, 1, 1, 1, 1, 0, 0, 0);
	WF_CHECK_INT(f.oh, 4);
	WF_CHECK_INT(f.pt, 1);
	WF_CHECK_INT(f.pb, 2);

	/* 7x7 input x[r][c] = 7r + c, all-ones 3x3 kernel, stride 2, same:
	 * output (oy, ox) sums rows 2oy-1..2oy+1 and cols 2ox-1..2ox+1 inside. */
	float x[49], w[9], y[16];
	for (int i = 0; i < 49; i++)
		x[i] = (float)i;
	for (int i = 0; i < 9; i++)
		w[i] = 1.0f;
	WF_CHECK_INT(wf_op_conv2d_forward(be, NULL, &d, y, x, w, NULL), 0);
	WF_CHECK_NEAR(y[0], 0 + 1 + 7 + 8, 1e-4);	      /* rows 0-1, cols 0-1 */
	WF_CHECK_NEAR(y[1 * 4 + 2], 162, 1e-4);		      /* rows 1-3, cols 3-5 */
	WF_CHECK_NEAR(y[3 * 4 + 3], 40 + 41 + 47 + 48, 1e-4); /* rows 5-6, cols 5-6 */
}

static void test_conv_groups_and_bias_by_hand(void)
{
	/* 1x1 input with 4 channels, 1x1 kernel, 2 groups of 2 in -> 1 out each */
	wf_conv_desc d;
	wf_conv_desc_init(&d, 1, 1, 1, 4, 2, 1, 1, 1, 1, 1, 1, 2, 0, 0, 0, 1);
	float x[4] = {1, 2, 3, 4};
	/* HWIO [1,1,2,2]: w[i][o] */
	float w[4] = {10, 100, 20, 200};
	float b[2] = {0.5f, -0.5f};
	float y[2];
	WF_CHECK_INT(wf_op_conv2d_forward(be, NULL, &d, y, x, w, b), 0);
	WF_CHECK_NEAR(y[0], 1 * 10 + 2 * 20 + 0.5, 1e-4);   /* group 0: channels 0,1 */
	WF_CHECK_NEAR(y[1], 3 * 100 + 4 * 200 - 0.5, 1e-4); /* group 1: channels 2,3 */
}

static void test_dense_by_hand(void)
{
	wf_dense_desc d = {.n = 2, .in = 3, .out = 2, .bias = 1};
	float x[6] = {1, 2, 3, -1, 0, 2};
	float w[6] = {1, 0, 0, 1, 1, 1}; /* [in,out] */
	float b[2] = {0.5f, 0};
	float y[4];
	WF_CHECK_INT(wf_op_dense_forward(be, NULL, &d, y, x, w, b), 0);
	WF_CHECK_NEAR(y[0], 1 + 3 + 0.5, 1e-6);
	WF_CHECK_NEAR(y[1], 2 + 3, 1e-6);
	WF_CHECK_NEAR(y[2], -1 + 2 + 0.5, 1e-6);
	WF_CHECK_NEAR(y[3], 0 + 2, 1e-6);
	/* parameter gradients accumulate, input gradient is overwritten */
	float dy[4] = {1, 0, 0, 1};
	float dx[6] = {99, 99, 99, 99, 99, 99}, dw[6] = {1, 1, 1, 1, 1, 1}, db[2] = {1, 1};
	WF_CHECK_INT(wf_op_dense_backward(be, NULL, &d, dx, dw, db, dy, x, w), 0);
	WF_CHECK_NEAR(dx[0], 1, 1e-6); /* dy[0,:] . w[0,:] */
	WF_CHECK_NEAR(dx[1], 0, 1e-6);
	WF_CHECK_NEAR(dx[5], 1, 1e-6);
	WF_CHECK_NEAR(dw[0], 1 + 1, 1e-6); /* 1 + x[0,0]*dy[0,0] */
	WF_CHECK_NEAR(dw[1], 1 - 1, 1e-6); /* 1 + x[1,0]*dy[1,1] */
	WF_CHECK_NEAR(db[0], 2, 1e-6);
	WF_CHECK_NEAR(db[1], 2, 1e-6);
}

static void test_avg_pool_same_excludes_padding(void)
{
	/* 3x3 input 1..9, 2x2 window, stride 2, same: one pad row/col at the bottom/right */
	wf_pool_desc d;
	wf_pool_desc_init(&d, WF_POOL_AVG, 1, 3, 3, 1, 2, 2, 2, 2, 1);
	WF_CHECK_INT(d.oh, 2);
	WF_CHECK_INT(d.pt, 0);
	WF_CHECK_INT(d.pb, 1);
	float x[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9}, y[4];
	WF_CHECK_INT(wf_op_pool_forward(be, NULL, &d, y, x), 0);
	WF_CHECK_NEAR(y[0], (1 + 2 + 4 + 5) / 4.0, 1e-6);
	WF_CHECK_NEAR(y[1], (3 + 6) / 2.0, 1e-6); /* not (3+6)/4 */
	WF_CHECK_NEAR(y[2], (7 + 8) / 2.0, 1e-6);
	WF_CHECK_NEAR(y[3], 9, 1e-6);
	float dy[4] = {1, 1, 1, 1}, dx[9];
	WF_CHECK_INT(wf_op_pool_backward(be, NULL, &d, dx, dy, x, y), 0);
	WF_CHECK_NEAR(dx[0], 0.25, 1e-6);
	WF_CHECK_NEAR(dx[2], 0.5, 1e-6);
	WF_CHECK_NEAR(dx[8], 1.0, 1e-6);

	/* 3x3 window stride 1 same on 3x3: the corner averages its 4 real cells */
	wf_pool_desc_init(&d, WF_POOL_AVG, 1, 3, 3, 1, 3, 3, 1, 1, 1);
	float y9[9];
	WF_CHECK_INT(wf_op_pool_forward(be, NULL, &d, y9, x), 0);
	WF_CHECK_NEAR(y9[0], (1 + 2 + 4 + 5) / 4.0, 1e-6);
	WF_CHECK_NEAR(y9[1], (1 + 2 + 3 + 4 + 5 + 6) / 6.0, 1e-6);
	WF_CHECK_NEAR(y9[4], 5, 1e-6);
}

static void test_max_pool_routes_to_first_max(void)
{
	wf_pool_desc d;
	wf_pool_desc_init(&d, WF_POOL_MAX, 1, 2, 4, 1, 2, 2, 2, 2, 0);
	/* window 0 is a 4-way tie; window 1 has its max at the bottom right */
	float x[8] = {3, 3, 1, 2, 3, 3, 4, 5}, y[2];
	WF_CHECK_INT(wf_op_pool_forward(be, NULL, &d, y, x), 0);
	WF_CHECK_NEAR(y[0], 3, 0);
	WF_CHECK_NEAR(y[1], 5, 0);
	float dy[2] = {2, 7}, dx[8];
	WF_CHECK_INT(wf_op_pool_backward(be, NULL, &d, dx, dy, x, y), 0);
	float want[8] = {2, 0, 0, 0, 0, 0, 0, 7};
	for (int i = 0; i < 8; i++)
		WF_CHECK_NEAR(dx[i], want[i], 0);
}

static void test_batchnorm_running_stats(void)
{
	/* one channel, x = 1,2,3,4: mean 2.5, biased var 1.25, unbiased 5/3 */
	wf_bn_desc d = {.n = 1, .h = 2, .w = 2, .c = 1, .eps = 1e-3f, .momentum = 0.9f};
	float x[4] = {1, 2, 3, 4}, y[4], gamma = 2.0f, beta = 0.5f;
	float mean = -1, invstd = -1, rm = 0.0f, rv = 1.0f;
	WF_CHECK_INT(wf_op_batchnorm_forward(be, NULL, &d, 1, y, &mean, &invstd, x, &gamma, &beta,
					     &rm, &rv),
		     0);
	double is = 1.0 / sqrt(1.25 + 1e-3);
	WF_CHECK_NEAR(mean, 2.5, 1e-6);
	WF_CHECK_NEAR(invstd, is, 1e-6);
	WF_CHECK_NEAR(rm, 0.9 * 0 + 0.1 * 2.5, 1e-6);
	WF_CHECK_NEAR(rv, 0.9 * 1 + 0.1 * (5.0 / 3.0), 1e-6);
	for (int i = 0; i < 4; i++)
		WF_CHECK_NEAR(y[i], 2.0 * (x[i] - 2.5) * is + 0.5, 1e-5);

	/* inference uses the running statistics and leaves them alone */
	float rm2 = 1.0f, rv2 = 4.0f, yi[4];
	WF_CHECK_INT(wf_op_batchnorm_forward(be, NULL, &d, 0, yi, NULL, NULL, x, &gamma, &beta,
					     &rm2, &rv2),
		     0);
	for (int i = 0; i < 4; i++)
		WF_CHECK_NEAR(yi[i], 2.0 * (x[i] - 1.0) / sqrt(4.0 + 1e-3) + 0.5, 1e-5);
	WF_CHECK_NEAR(rm2, 1.0, 0);
	WF_CHECK_NEAR(rv2, 4.0, 0);
}

static void test_sgd_momentum_step(void)
{
	wf_opt_desc d = {
		.kind = WF_OPT_SGD, .lr = 0.1f, .momentum = 0.9f, .grad_scale = 1.0f, .step = 1};
	float p = 1.0f, g = 0.5f, m = 0.2f;
	WF_CHECK_INT(wf_op_optimizer_update(be, &d, 1, &p, &g, &m, NULL), 0);
	WF_CHECK_NEAR(m, 0.9 * 0.2 + 0.5, 1e-6);  /* 0.68 */
	WF_CHECK_NEAR(p, 1.0 - 0.1 * 0.68, 1e-6); /* 0.932 */

	/* Nesterov with weight decay and a gradient scale of 1/2 */
	d.nesterov = 1, d.weight_decay = 0.1f, d.grad_scale = 0.5f;
	p = 1.0f, g = 1.0f, m = 0.2f;
	double gs = 0.5 * 1.0 + 0.1 * 1.0; /* 0.6 */
	double mm = 0.9 * 0.2 + gs;	   /* 0.78 */
	WF_CHECK_INT(wf_op_optimizer_update(be, &d, 1, &p, &g, &m, NULL), 0);
	WF_CHECK_NEAR(m, mm, 1e-6);
	WF_CHECK_NEAR(p, 1.0 - 0.1 * (gs + 0.9 * mm), 1e-6);

	/* plain SGD: no slot needed */
	wf_opt_desc plain = {.kind = WF_OPT_SGD, .lr = 0.5f, .grad_scale = 1.0f, .step = 1};
	p = 2.0f, g = 0.25f;
	WF_CHECK_INT(wf_op_optimizer_update(be, &plain, 1, &p, &g, NULL, NULL), 0);
	WF_CHECK_NEAR(p, 2.0 - 0.125, 1e-6);
}

static void test_adam_step(void)
{
	wf_opt_desc d = {.kind = WF_OPT_ADAM,
			 .lr = 0.01f,
			 .beta1 = 0.9f,
			 .beta2 = 0.999f,
			 .eps = 1e-7f,
			 .grad_scale = 1.0f,
			 .step = 1};
	float p = 1.0f, g = 0.5f, m = 0.0f, v = 0.0f;
	WF_CHECK_INT(wf_op_optimizer_update(be, &d, 1, &p, &g, &m, &v), 0);
	double b1 = d.beta1, b2 = d.beta2; /* the float hyper-parameters, exactly */
	WF_CHECK_NEAR(m, (1 - b1) * 0.5, 1e-8);
	WF_CHECK_NEAR(v, (1 - b2) * 0.25, 1e-10);
	/* mhat = 0.5, vhat = 0.25: the first step moves by lr */
	WF_CHECK_NEAR(p, 1.0 - 0.01 * 0.5 / (0.5 + 1e-7), 1e-7);

	/* second step with g = -1 */
	d.step = 2;
	g = -1.0f;
	/* from the stored slots; in exact arithmetic m = -0.055, v = 0.00124975 */
	double m2 = b1 * m + (1 - b1) * -1.0;
	double v2 = b2 * v + (1 - b2) * 1.0;
	double mhat = m2 / (1 - b1 * b1), vhat = v2 / (1 - b2 * b2);
	double p2 = p - 0.01 * mhat / (sqrt(vhat) + 1e-7);
	WF_CHECK_INT(wf_op_optimizer_update(be, &d, 1, &p, &g, &m, &v), 0);
	WF_CHECK_NEAR(m, m2, 1e-8);
	WF_CHECK_NEAR(m2, -0.055, 1e-6);
	WF_CHECK_NEAR(v, v2, 1e-10);
	WF_CHECK_NEAR(p, p2, 1e-6);
}

static void test_adamw_decay_is_decoupled(void)
{
	/* with g = 0 Adam's own step is 0, so only the decay moves p */
	wf_opt_desc d = {.kind = WF_OPT_ADAMW,
			 .lr = 0.1f,
			 .beta1 = 0.9f,
			 .beta2 = 0.999f,
			 .eps = 1e-7f,
			 .weight_decay = 0.5f,
			 .grad_scale = 1.0f,
			 .step = 1};
	float p = 2.0f, g = 0.0f, m = 0.0f, v = 0.0f;
	WF_CHECK_INT(wf_op_optimizer_update(be, &d, 1, &p, &g, &m, &v), 0);
	WF_CHECK_NEAR(p, 2.0 - 0.1 * 0.5 * 2.0, 1e-6);
	WF_CHECK_NEAR(m, 0, 0);
	/* Adam (coupled) with the same settings feeds the decay through m and v */
	d.kind = WF_OPT_ADAM;
	p = 2.0f, m = 0.0f, v = 0.0f;
	WF_CHECK_INT(wf_op_optimizer_update(be, &d, 1, &p, &g, &m, &v), 0);
	WF_CHECK_NEAR(m, 0.1 * 0.5 * 2.0, 1e-6);
	WF_CHECK_NEAR(p, 2.0 - 0.1 * 1.0 / (1.0 + 1e-7), 1e-6);
}

static void test_softmax_xent_is_stable(void)
{
	float z[6] = {1000, 1001, 1002, -1000, 0, 1000}, probs[6], losses[2];
	int32_t labels[2] = {2, 0};
	WF_CHECK_INT(wf_op_softmax_xent_forward(be, 2, 3, probs, losses, z, labels), 0);
	double s = 1 + exp(-1) + exp(-2);
	WF_CHECK_NEAR(probs[2], 1 / s, 1e-6);
	WF_CHECK_NEAR(probs[0], exp(-2) / s, 1e-6);
	WF_CHECK_NEAR(losses[0], log(s), 1e-5);
	WF_CHECK_NEAR(losses[1], 2000, 1e-2); /* finite, not inf */
	WF_CHECK_NEAR(probs[5], 1, 1e-6);
	float dz[6];
	WF_CHECK_INT(wf_op_softmax_xent_backward(be, 2, 3, dz, probs, labels, 0.5f), 0);
	WF_CHECK_NEAR(dz[2], (1 / s - 1) * 0.5, 1e-6);
	WF_CHECK_NEAR(dz[3], -0.5, 1e-6);
	labels[1] = 3;
	WF_CHECK_INT(wf_op_softmax_xent_forward(be, 2, 3, probs, losses, z, labels), WF_EINVAL);
	WF_CHECK(strstr(be->err.msg, "labels[1]") != NULL);
}

static void test_dropout_mask_and_scale(void)
{
	enum { N = 1000 };
	static float x[N], y[N], dx[N];
	static uint8_t mask[N];
	for (int i = 0; i < N; i++)
		x[i] = 1.0f + (float)i;
	WF_CHECK_INT(wf_op_dropout_forward(be, N, 0.25f, 99, y, mask, x), 0);
	int kept = 0;
	for (int i = 0; i < N; i++) {
		int k = wf_dropout_keep(99, (uint64_t)i, 0.25f);
		WF_CHECK_INT(mask[i], k);
		WF_CHECK_NEAR(y[i], k ? x[i] / 0.75 : 0.0, 1e-3);
		kept += k;
	}
	WF_CHECK(kept > 700 && kept < 800);
	WF_CHECK_INT(wf_op_dropout_backward(be, N, 0.25f, dx, x, mask), 0);
	WF_CHECK_NEAR(dx[0], mask[0] ? x[0] / 0.75 : 0.0, 1e-5);
}

static void test_pad_and_crop_values(void)
{
	float x[6] = {1, 2, 3, 4, 5, 6}; /* [1,2,3,1] */
	wf_pad_desc pad = {.n = 1, .h = 2, .w = 3, .c = 1, .pt = 1, .pb = 0, .pl = 0, .pr = 1};
	float y[12];
	WF_CHECK_INT(wf_op_pad_forward(be, &pad, y, x), 0);
	float want[12] = {0, 0, 0, 0, 1, 2, 3, 0, 4, 5, 6, 0};
	for (int i = 0; i < 12; i++)
		WF_CHECK_NEAR(y[i], want[i], 0);
	wf_pad_desc crop = {.n = 1, .h = 2, .w = 3, .c = 1, .pt = 0, .pb = -1, .pl = -1, .pr = 0};
	float yc[2], dx[6];
	WF_CHECK_INT(wf_op_pad_forward(be, &crop, yc, x), 0);
	WF_CHECK_NEAR(yc[0], 2, 0);
	WF_CHECK_NEAR(yc[1], 3, 0);
	float dy[2] = {10, 20};
	WF_CHECK_INT(wf_op_pad_backward(be, &crop, dx, dy), 0);
	float wantdx[6] = {0, 10, 20, 0, 0, 0};
	for (int i = 0; i < 6; i++)
		WF_CHECK_NEAR(dx[i], wantdx[i], 0);
}

static void test_relu6_backward_uses_output(void)
{
	float x[5] = {-1, 0.5f, 6, 7, 3}, y[5], dx[5], dy[5] = {1, 1, 1, 1, 1};
	WF_CHECK_INT(wf_op_act_forward(be, WF_ACT_RELU6, 5, y, x), 0);
	WF_CHECK_NEAR(y[3], 6, 0);
	WF_CHECK_INT(wf_op_act_backward(be, WF_ACT_RELU6, 5, dx, dy, y), 0);
	float want[5] = {0, 1, 0, 0, 1}; /* gradient only where 0 < y < 6 */
	for (int i = 0; i < 5; i++)
		WF_CHECK_NEAR(dx[i], want[i], 0);
	/* in place forward */
	WF_CHECK_INT(wf_op_act_forward(be, WF_ACT_RELU, 5, x, x), 0);
	WF_CHECK_NEAR(x[0], 0, 0);
	WF_CHECK_NEAR(x[3], 7, 0);
}

static void test_invalid_descriptors_are_rejected(void)
{
	float buf[256] = {0};
	wf_conv_desc d;
	wf_conv_desc_init(&d, 1, 4, 4, 3, 4, 3, 3, 1, 1, 1, 1, 2, 1, 0, 0, 0);
	WF_CHECK_INT(wf_op_conv2d_forward(be, NULL, &d, buf, buf, buf, NULL), WF_EINVAL);
	WF_CHECK_MSG(strstr(be->err.msg, "groups") != NULL, "%s", be->err.msg);

	wf_conv_desc_init(&d, 1, 4, 4, 2, 2, 3, 3, 1, 1, 1, 1, 1, 1, 0, 0, 0);
	d.oh = 3; /* same would give 4 */
	WF_CHECK_INT(wf_op_conv2d_backward(be, NULL, &d, buf, buf, NULL, buf, buf, buf), WF_EINVAL);
	WF_CHECK_MSG(strstr(be->err.msg, "oh=3") != NULL, "%s", be->err.msg);

	wf_dense_desc dd = {.n = 0, .in = 3, .out = 2};
	WF_CHECK_INT(wf_op_dense_forward(be, NULL, &dd, buf, buf, buf, NULL), WF_EINVAL);
	WF_CHECK_MSG(strstr(be->err.msg, "n=0") != NULL, "%s", be->err.msg);

	wf_pool_desc pd;
	wf_pool_desc_init(&pd, WF_POOL_MAX, 1, 4, 4, 1, 2, 2, 2, 2, 0);
	pd.ow = 5;
	WF_CHECK_INT(wf_op_pool_forward(be, NULL, &pd, buf, buf), WF_EINVAL);
	WF_CHECK_MSG(strstr(be->err.msg, "ow=5") != NULL, "%s", be->err.msg);

	wf_pad_desc pad = {.n = 1, .h = 2, .w = 2, .c = 1, .pt = -1, .pb = -1};
	WF_CHECK_INT(wf_op_pad_forward(be, &pad, buf, buf), WF_EINVAL);

	wf_bn_desc bn = {.n = 1, .h = 1, .w = 1, .c = -2, .eps = 1e-3f, .momentum = 0.9f};
	WF_CHECK_INT(
		wf_op_batchnorm_forward(be, NULL, &bn, 1, buf, buf, buf, buf, buf, buf, buf, buf),
		WF_EINVAL);
	WF_CHECK_MSG(strstr(be->err.msg, "c=-2") != NULL, "%s", be->err.msg);

	wf_opt_desc od = {.kind = WF_OPT_ADAM, .lr = 0.1f, .step = 0, .grad_scale = 1};
	WF_CHECK_INT(wf_op_optimizer_update(be, &od, 4, buf, buf, buf, buf), WF_EINVAL);
	WF_CHECK_MSG(strstr(be->err.msg, "step") != NULL, "%s", be->err.msg);

	WF_CHECK_INT(wf_op_dropout_forward(be, 4, 1.0f, 1, buf, NULL, buf), WF_EINVAL);
}

static void test_memory_is_zeroed_and_aligned(void)
{
	float *p = wf_op_alloc(be, 1000 * sizeof(float));
	WF_CHECK(p != NULL);
	if (!p)
		return;
	WF_CHECK(((uintptr_t)p % 64) == 0);
	int zero = 1;
	for (int i = 0; i < 1000; i++)
		zero &= p[i] == 0.0f;
	WF_CHECK(zero);
	wf_op_free(be, p);
	wf_op_free(be, NULL);
}

/* ref has no fused conv: the wrapper composes conv, + residual, relu6, and
 * says in the capabilities that ref is host memory without a native fusion. */
static void test_fused_conv_default_is_conv_add_act(void)
{
	wf_backend_caps caps = wf_backend_caps_of(be);
	WF_CHECK(caps.host_memory && !caps.fused_conv && !caps.bf16);
	WF_CHECK(strcmp(caps.precisions, "fp32") == 0);
	wf_conv_desc d;
	wf_conv_desc_init(&d, 1, 3, 3, 2, 2, 3, 3, 1, 1, 1, 1, 1, 1, 0, 0, 1);
	float x[18], w[36], b[2] = {0.5f, -0.25f}, r[18], y[18], want[18];
	for (int i = 0; i < 18; i++)
		x[i] = (float)(i % 5) - 2.0f, r[i] = (float)(i % 3) * 2.0f;
	for (int i = 0; i < 36; i++)
		w[i] = (float)(i % 7) * 0.25f - 0.5f;
	WF_CHECK_INT(wf_op_conv2d_forward(be, NULL, &d, want, x, w, b), 0);
	for (int i = 0; i < 18; i++) {
		float v = want[i] + r[i];
		want[i] = v < 0 ? 0 : v > 6 ? 6 : v;
	}
	d.act = 2, d.residual = 1, d.infer = 1;
	WF_CHECK_INT(wf_op_conv2d_forward_fused(be, NULL, &d, y, x, w, b, r), 0);
	for (int i = 0; i < 18; i++)
		WF_CHECK_NEAR(y[i], want[i], 1e-6);
	/* the plain conv refuses the fused fields, naming them */
	WF_CHECK_INT(wf_op_conv2d_forward(be, NULL, &d, y, x, w, b), WF_EINVAL);
	WF_CHECK_MSG(strstr(be->err.msg, "act=2") != NULL, "%s", be->err.msg);
	d.residual = 1;
	WF_CHECK_INT(wf_op_conv2d_forward_fused(be, NULL, &d, y, x, w, b, NULL), WF_EINVAL);
	WF_CHECK_MSG(strstr(be->err.msg, "residual=1") != NULL, "%s", be->err.msg);
}

int main(void)
{
	wf_err err = {0};
	if (wf_backend_create(&be, "ref", 0, &err) != 0) {
		fprintf(stderr, "cannot create ref backend: %s\n", err.msg);
		return 1;
	}
	WF_RUN(test_keras_same_padding_shapes);
	WF_RUN(test_conv_groups_and_bias_by_hand);
	WF_RUN(test_dense_by_hand);
	WF_RUN(test_avg_pool_same_excludes_padding);
	WF_RUN(test_max_pool_routes_to_first_max);
	WF_RUN(test_batchnorm_running_stats);
	WF_RUN(test_sgd_momentum_step);
	WF_RUN(test_adam_step);
	WF_RUN(test_adamw_decay_is_decoupled);
	WF_RUN(test_softmax_xent_is_stable);
	WF_RUN(test_dropout_mask_and_scale);
	WF_RUN(test_pad_and_crop_values);
	WF_RUN(test_relu6_backward_uses_output);
	WF_RUN(test_invalid_descriptors_are_rejected);
	WF_RUN(test_memory_is_zeroed_and_aligned);
	WF_RUN(test_fused_conv_default_is_conv_add_act);
	WF_RUN(test_every_case_runs_and_is_finite);
	WF_RUN(test_every_case_is_deterministic);
	WF_RUN(test_every_backward_matches_finite_differences);
	wf_backend_free(be);
	return wf_test_summary();
}
