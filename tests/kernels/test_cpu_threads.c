/* test_cpu_threads.c: the cpu backend's thread count holds in every thread
 * that runs its ops, not only in the thread that created it (OpenMP keeps the
 * count per thread). A backend made in main runs its loop ops and its oneDNN
 * primitives in other pthreads, as weft-serve's batch threads do. */
#include "common/util.h"
#include "kernels/ops.h"
#include "tests/test.h"

#include <omp.h>
#include <pthread.h>

static int fresh_default; /* omp_get_max_threads() in a new thread before any op */
static int want;	  /* the backend's threads: differs from fresh_default */

/* One op run in a new thread, with the thread's OpenMP count around it. */
typedef struct op_run {
	wf_backend *be;
	int (*op)(struct op_run *r);
	int preset; /* > 0: omp_set_num_threads(preset) in the thread before the op */
	int before, after, rc;
	wf_plan *plan;
	float *x, *y, *w, *b, *mean, *var;
} op_run;

static void *run_main(void *arg)
{
	op_run *r = arg;
	if (r->preset > 0)
		omp_set_num_threads(r->preset);
	r->before = omp_get_max_threads();
	r->rc = r->op(r);
	r->after = omp_get_max_threads();
	return NULL;
}

static void run_in_thread(op_run *r)
{
	pthread_t t;
	WF_CHECK_INT(pthread_create(&t, NULL, run_main, r), 0);
	pthread_join(t, NULL);
}

static void *measure_main(void *arg)
{
	*(int *)arg = omp_get_max_threads();
	return NULL;
}

static int op_relu(op_run *r)
{
	return wf_op_act_forward(r->be, WF_ACT_RELU, 1 << 16, r->y, r->x);
}

static int op_add(op_run *r)
{
	return wf_op_add(r->be, 1 << 16, r->y, r->x, r->x);
}

static const wf_conv_desc conv = {.n = 2,
				  .h = 8,
				  .w = 8,
				  .c = 4,
				  .oc = 8,
				  .oh = 8,
				  .ow = 8,
				  .kh = 3,
				  .kw = 3,
				  .sh = 1,
				  .sw = 1,
				  .dh = 1,
				  .dw = 1,
				  .groups = 1,
				  .pt = 1,
				  .pb = 1,
				  .pl = 1,
				  .pr = 1,
				  .bias = 1};

static int op_conv(op_run *r)
{
	return wf_op_conv2d_forward(r->be, &r->plan, &conv, r->y, r->x, r->w, r->b);
}

static int op_dense(op_run *r)
{
	wf_dense_desc d = {.n = 4, .in = 64, .out = 16, .bias = 1};
	return wf_op_dense_forward(r->be, &r->plan, &d, r->y, r->x, r->w, r->b);
}

static int op_batchnorm(op_run *r)
{
	wf_bn_desc d = {.n = 2, .h = 8, .w = 8, .c = 4, .eps = 1e-3f, .momentum = 0.99f};
	return wf_op_batchnorm_forward(r->be, &r->plan, &d, 0, r->y, NULL, NULL, r->x, r->w, r->b,
				       r->mean, r->var);
}

static int op_pool(op_run *r)
{
	wf_pool_desc d = {.kind = WF_POOL_MAX,
			  .n = 2,
			  .h = 8,
			  .w = 8,
			  .c = 4,
			  .oh = 4,
			  .ow = 4,
			  .kh = 2,
			  .kw = 2,
			  .sh = 2,
			  .sw = 2};
	return wf_op_pool_forward(r->be, &r->plan, &d, r->y, r->x);
}

static float *filled(size_t n, float base)
{
	float *p = malloc(n * sizeof(*p));
	for (size_t i = 0; i < n; i++)
		p[i] = base + (float)((i * 7919) % 97) / 97.0f - 0.5f;
	return p;
}

static op_run make_run(wf_backend *be, int (*op)(op_run *))
{
	size_t n = 1 << 16;
	op_run r = {.be = be, .op = op};
	r.x = filled(n, 0.0f);
	r.y = calloc(n, sizeof(float));
	r.w = filled(n, 0.1f);
	r.b = filled(n, 0.0f);
	r.mean = filled(n, 0.0f);
	r.var = filled(n, 1.0f);
	return r;
}

static void free_run(op_run *r)
{
	wf_backend_plan_free(r->be, &r->plan);
	free(r->x);
	free(r->y);
	free(r->w);
	free(r->b);
	free(r->mean);
	free(r->var);
}

static wf_backend *cpu_backend(int threads)
{
	wf_backend *be = NULL;
	wf_err err = {0};
	if (wf_backend_create(&be, "cpu", threads, &err))
		return NULL;
	return be;
}

static void test_every_kind_of_op_sets_the_count_in_its_thread(void)
{
	wf_backend *be = cpu_backend(want);
	if (!be)
		WF_SKIP("the cpu backend is not built");
	static const struct {
		const char *name;
		int (*op)(op_run *);
	} ops[] = {{"relu", op_relu},		{"add", op_add},
		   {"conv2d", op_conv},		{"dense", op_dense},
		   {"batchnorm", op_batchnorm}, {"max pool", op_pool}};
	for (size_t i = 0; i < WF_ARRAY_LEN(ops); i++) {
		op_run r = make_run(be, ops[i].op);
		run_in_thread(&r);
		WF_CHECK_MSG(r.rc == 0, "%s: %s", ops[i].name, be->err.msg);
		WF_CHECK_MSG(r.before == fresh_default, "%s: a new thread starts with %d threads",
			     ops[i].name, r.before);
		WF_CHECK_MSG(r.after == want, "%s: after the op the thread has %d threads, want %d",
			     ops[i].name, r.after, want);
		free_run(&r);
	}
	wf_backend_free(be);
}

static void test_count_is_restored_after_the_thread_changed_it(void)
{
	wf_backend *be = cpu_backend(want);
	if (!be)
		WF_SKIP("the cpu backend is not built");
	op_run r = make_run(be, op_relu);
	r.preset = fresh_default + 3;
	run_in_thread(&r);
	WF_CHECK_INT(r.rc, 0);
	WF_CHECK_INT(r.before, fresh_default + 3);
	WF_CHECK_INT(r.after, want);
	free_run(&r);
	wf_backend_free(be);
}

static void test_plan_built_in_one_thread_runs_in_another(void)
{
	/* the conv plan (oneDNN primitives) is built in main, then reused by a
	 * thread: same output, and that thread runs with the backend's count */
	wf_backend *be = cpu_backend(want);
	if (!be)
		WF_SKIP("the cpu backend is not built");
	op_run r = make_run(be, op_conv);
	WF_CHECK_INT(op_conv(&r), 0);
	size_t ny = (size_t)conv.n * conv.oh * conv.ow * conv.oc;
	float *first = malloc(ny * sizeof(float));
	memcpy(first, r.y, ny * sizeof(float));
	memset(r.y, 0, ny * sizeof(float));
	run_in_thread(&r);
	WF_CHECK_INT(r.rc, 0);
	WF_CHECK_INT(r.after, want);
	WF_CHECK(memcmp(first, r.y, ny * sizeof(float)) == 0);
	free(first);
	free_run(&r);
	wf_backend_free(be);
}

static void test_default_threads_leave_the_count_alone(void)
{
	wf_backend *be = cpu_backend(0);
	if (!be)
		WF_SKIP("the cpu backend is not built");
	op_run r = make_run(be, op_add);
	r.preset = fresh_default + 1;
	run_in_thread(&r);
	WF_CHECK_INT(r.rc, 0);
	WF_CHECK_INT(r.after, fresh_default + 1);
	free_run(&r);
	wf_backend_free(be);
}

int main(void)
{
	pthread_t t;
	pthread_create(&t, NULL, measure_main, &fresh_default);
	pthread_join(t, NULL);
	want = fresh_default == 1 ? 2 : 1;
	WF_RUN(test_every_kind_of_op_sets_the_count_in_its_thread);
	WF_RUN(test_count_is_restored_after_the_thread_changed_it);
	WF_RUN(test_plan_built_in_one_thread_runs_in_another);
	WF_RUN(test_default_threads_leave_the_count_alone);
	return wf_test_summary();
}
