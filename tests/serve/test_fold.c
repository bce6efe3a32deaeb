/* test_fold.c: folding batch norm into convs and dropping dropout keeps the
 * inference forward within 1e-5 and removes the layers. */
#include "model/fold.h"
#include "model/model.h"
#include "common/util.h"
#include "tests/test.h"

static void randomise_bn(wf_model *m, uint64_t seed)
{
	wf_rng r;
	wf_rng_seed(&r, seed);
	for (int i = 0; i < m->nlayers; i++) {
		const wf_layer *l = &m->layers[i];
		if (l->type != WF_LAYER_BATCHNORM)
			continue;
		for (size_t c = 0; c < m->views[l->p_gamma].count; c++) {
			m->params[m->views[l->p_gamma].offset + c] =
				(float)(0.5 + wf_rng_uniform(&r));
			m->params[m->views[l->p_beta].offset + c] =
				(float)(0.2 * wf_rng_normal(&r));
			m->state[m->views[l->s_mean].offset + c] = (float)(0.3 * wf_rng_normal(&r));
			m->state[m->views[l->s_var].offset + c] = (float)(0.5 + wf_rng_uniform(&r));
		}
	}
}

static int count_type(const wf_model *m, wf_layer_type t)
{
	int n = 0;
	for (int i = 0; i < m->nlayers; i++)
		n += m->layers[i].type == t;
	return n;
}

/* Max |a - b| of the logits of models a and b on the same random batch. */
static double forward_diff(wf_model *a, wf_model *b, int n, double *scale)
{
	wf_backend *be = NULL;
	wf_exec *ea = NULL, *eb = NULL;
	wf_err err = {0};
	size_t per = (size_t)a->in_h * a->in_w * a->in_c;
	float *x = malloc(sizeof(float) * per * n);
	float *la = malloc(sizeof(float) * a->classes * n),
	      *lb = malloc(sizeof(float) * a->classes * n);
	wf_rng r;
	wf_rng_seed(&r, 7);
	for (size_t i = 0; i < per * n; i++)
		x[i] = (float)wf_rng_normal(&r);
	double d = -1;
	*scale = 0;
	if (wf_backend_create(&be, "ref", 0, &err) || wf_exec_create(&ea, a, be, n, 0, &err) ||
	    wf_exec_create(&eb, b, be, n, 0, &err)) {
		fprintf(stderr, "%s\n", err.msg);
		goto out;
	}
	if (wf_exec_forward(ea, x, n, 0, 0) || wf_exec_logits(ea, la) ||
	    wf_exec_forward(eb, x, n, 0, 0) || wf_exec_logits(eb, lb))
		goto out;
	d = 0;
	for (size_t i = 0; i < (size_t)a->classes * n; i++) {
		d = fmax(d, fabs(la[i] - lb[i]));
		*scale = fmax(*scale, fabs(la[i]));
	}
out:
	wf_exec_free(ea);
	wf_exec_free(eb);
	wf_backend_free(be);
	free(x);
	free(la);
	free(lb);
	return d;
}

static void test_resnet20_fold_matches_forward(void)
{
	wf_model *m = NULL, *f = NULL;
	wf_err err = {0};
	WF_CHECK(wf_model_zoo(&m, "resnet20", 32, 32, 3, 10, &err) == 0);
	if (!m)
		return;
	wf_model_init_params(m, 3);
	randomise_bn(m, 11);
	int bns = count_type(m, WF_LAYER_BATCHNORM);
	WF_CHECK(bns > 0);
	WF_CHECK_INT(wf_model_fold_for_inference(m, &f, &err), 0);
	if (!f) {
		fprintf(stderr, "%s\n", err.msg);
		wf_model_free(m);
		return;
	}
	WF_CHECK_INT(count_type(f, WF_LAYER_BATCHNORM), 0);
	WF_CHECK_INT(f->nlayers, m->nlayers - bns);
	WF_CHECK(f->nstate == 0);
	double scale = 0, d = forward_diff(m, f, 4, &scale);
	WF_CHECK_MSG(d >= 0 && d <= 1e-5 * fmax(1.0, scale), "max diff %g (logit scale %g)", d,
		     scale);
	WF_CHECK(scale > 1e-3); /* the logits are not trivially zero */
	wf_model_free(f);
	wf_model_free(m);
}

static void test_dropout_removed_and_unfoldable_bn_kept(void)
{
	/* bn1 follows an add (not foldable); drop sits before the dense. */
	const char *g =
		"{\"format\":1,\"input_shape\":[8,8,2],\"classes\":3,\"output\":\"out\","
		"\"layers\":[{\"name\":\"img\",\"type\":\"input\",\"inputs\":[]},"
		"{\"name\":\"c1\",\"type\":\"conv2d\",\"inputs\":[\"img\"],\"config\":"
		"{\"filters\":4,\"kernel_size\":[3,3],\"padding\":\"same\",\"use_bias\":false}},"
		"{\"name\":\"b1\",\"type\":\"batchnorm\",\"inputs\":[\"c1\"]},"
		"{\"name\":\"c2\",\"type\":\"conv2d\",\"inputs\":[\"img\"],\"config\":"
		"{\"filters\":4,\"kernel_size\":[1,1]}},"
		"{\"name\":\"sum\",\"type\":\"add\",\"inputs\":[\"b1\",\"c2\"]},"
		"{\"name\":\"bn_add\",\"type\":\"batchnorm\",\"inputs\":[\"sum\"]},"
		"{\"name\":\"gap\",\"type\":\"gap\",\"inputs\":[\"bn_add\"]},"
		"{\"name\":\"drop\",\"type\":\"dropout\",\"inputs\":[\"gap\"],\"config\":{\"rate\":"
		"0.5}},"
		"{\"name\":\"d\",\"type\":\"dense\",\"inputs\":[\"drop\"],\"config\":{\"units\":3}}"
		","
		"{\"name\":\"out\",\"type\":\"batchnorm\",\"inputs\":[\"d\"]}]}";
	wf_model *m = NULL, *f = NULL;
	wf_err err = {0};
	WF_CHECK_INT(wf_model_from_json(&m, g, &err), 0);
	if (!m) {
		fprintf(stderr, "%s\n", err.msg);
		return;
	}
	wf_model_init_params(m, 5);
	randomise_bn(m, 6);
	WF_CHECK_INT(wf_model_fold_count(m), 3);
	WF_CHECK_INT(wf_model_fold_for_inference(m, &f, &err), 0);
	if (!f)
		goto out;
	WF_CHECK_INT(count_type(f, WF_LAYER_DROPOUT), 0);
	WF_CHECK_INT(count_type(f, WF_LAYER_BATCHNORM), 1);
	WF_CHECK(wf_model_view(f, "c1/bias") != NULL);
	WF_CHECK(wf_model_view(f, "d/bias") != NULL);
	WF_CHECK(strstr(f->graph_json, "\"output\":\"d\"") != NULL);
	double scale, d = forward_diff(m, f, 3, &scale);
	WF_CHECK_MSG(d >= 0 && d <= 1e-5 * fmax(1.0, scale), "max diff %g", d);
	/* the folded model round-trips through its own graph JSON */
	wf_model *again = NULL;
	WF_CHECK_INT(wf_model_from_json(&again, f->graph_json, &err), 0);
	wf_model_free(again);
out:
	wf_model_free(f);
	wf_model_free(m);
}

/* What weft-serve does at load: the model is replaced by its fold once, and a
 * folded model is left as it is. */
static void test_fold_replace(void)
{
	wf_model *m = NULL, *orig = NULL;
	wf_err err = {0};
	WF_CHECK(wf_model_zoo(&m, "resnet20", 32, 32, 3, 10, &err) == 0);
	WF_CHECK(wf_model_zoo(&orig, "resnet20", 32, 32, 3, 10, &err) == 0);
	if (!m || !orig)
		goto out;
	wf_model_init_params(m, 3);
	randomise_bn(m, 11);
	wf_model_init_params(orig, 3);
	randomise_bn(orig, 11);
	int bns = count_type(m, WF_LAYER_BATCHNORM);
	wf_model *before = m;
	WF_CHECK_INT(wf_model_fold_replace(&m, &err), bns);
	WF_CHECK(m != before && count_type(m, WF_LAYER_BATCHNORM) == 0);
	double scale = 0, d = forward_diff(orig, m, 2, &scale);
	WF_CHECK_MSG(d >= 0 && d <= 1e-5 * fmax(1.0, scale), "max diff %g", d);
	before = m;
	WF_CHECK_INT(wf_model_fold_replace(&m, &err), 0);
	WF_CHECK(m == before);
out:
	wf_model_free(m);
	wf_model_free(orig);
}

int main(void)
{
	WF_RUN(test_fold_replace);
	WF_RUN(test_resnet20_fold_matches_forward);
	WF_RUN(test_dropout_removed_and_unfoldable_bn_kept);
	return wf_test_summary();
}
