/* test_batcher.c: serve/batcher.c with a real model file: each request gets
 * its own rows (unbatched, batched with others, larger than max_batch),
 * concurrent requests share forwards, the queue bound answers at once, a
 * request times out in the queue, and flush releases a waiting batch; the
 * request core (infer.h) counts every request once in the version's
 * statistics. The reference is the same model run by an executor of our
 * own. */
#include "common/util.h"
#include "serve/batcher.h"
#include "serve/infer.h"
#include "tests/test.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define K 10 /* classes */

static char dir[] = "/tmp/weft-test-batcher-XXXXXX";
static wf_serve_version *ver;
static int per;	    /* floats per sample */
static float *xs;   /* [NS, per] inputs */
static float *refs; /* [NS, K] reference logits (one sample per forward) */
enum { NS = 64 };

/* A smallcnn at 32x32 saved as DIR/1/model.h5, loaded as a served version. */
static int setup(void)
{
	wf_err err = {0};
	wf_model *m = NULL;
	wf_model_meta meta;
	char path[512];
	if (!mkdtemp(dir))
		return 1;
	snprintf(path, sizeof(path), "%s/1", dir);
	wf_mkdirs(path);
	snprintf(path, sizeof(path), "%s/1/model.h5", dir);
	if (wf_model_zoo(&m, "smallcnn", 32, 32, 3, K, &err))
		goto fail;
	wf_model_init_params(m, 7);
	wf_model_meta_init(&meta);
	int rc = wf_model_save(m, &meta, path, &err);
	wf_model_meta_free(&meta);
	wf_model_free(m);
	if (rc)
		goto fail;
	wf_serve_repo_opts ro = {.device = "cpu", .threads = 1, .nslots = 2, .max_batch = 64};
	if (wf_serve_version_load(&ver, path, 1, &ro, NULL, &err))
		goto fail;
	per = ver->io.h * ver->io.w * ver->io.c;
	xs = malloc((size_t)NS * per * sizeof(float));
	refs = malloc((size_t)NS * K * sizeof(float));
	wf_rng r;
	wf_rng_seed(&r, 11);
	for (size_t i = 0; i < (size_t)NS * per; i++)
		xs[i] = (float)wf_rng_uniform(&r);
	wf_backend *be = NULL;
	wf_exec *ex = NULL;
	rc = wf_backend_create(&be, "cpu", 1, &err);
	if (!rc)
		rc = wf_exec_create(&ex, ver->model, be, 1, 0, &err);
	for (int i = 0; i < NS && !rc; i++) {
		rc = wf_exec_forward(ex, xs + (size_t)i * per, 1, 0, 0);
		if (!rc)
			rc = wf_exec_logits(ex, refs + (size_t)i * K);
	}
	wf_exec_free(ex);
	wf_backend_free(be);
	if (rc)
		goto fail;
	return 0;
fail:
	fprintf(stderr, "setup: %s\n", err.msg);
	return 1;
}

/* Rows [first, first+n) of a result match the reference. */
static int rows_match(const float *logits, int first, int n)
{
	for (int i = 0; i < n * K; i++)
		if (fabsf(logits[i] - refs[(size_t)first * K + i]) > 1e-3f) {
			fprintf(stderr, "row %d class %d: %g vs reference %g\n", first + i / K,
				i % K, logits[i], refs[(size_t)first * K + i]);
			return 0;
		}
	return 1;
}

static wf_serve_batcher *make(int threads, int batching, int max_batch, long timeout_us,
			      int max_queue, wf_serve_metrics *mx)
{
	wf_serve_batcher_opts o = {.threads = threads,
				   .max_batch = max_batch,
				   .timeout_us = timeout_us,
				   .batching = batching,
				   .max_queue = max_queue};
	wf_serve_batcher *b = NULL;
	wf_err err = {0};
	if (wf_serve_batcher_create(&b, &o, mx, &err))
		fprintf(stderr, "batcher: %s\n", err.msg);
	return b;
}

static void test_unbatched_rows(void)
{
	wf_serve_metrics *mx = wf_serve_metrics_create();
	wf_serve_batcher *b = make(2, 0, 8, 0, 0, mx);
	float out[3 * K];
	wf_err err = {0};
	WF_CHECK_INT(wf_serve_batcher_infer(b, ver, xs + 5 * per, 3, out, 10, &err), 0);
	WF_CHECK(rows_match(out, 5, 3));
	/* larger than max_batch (8 here, the version's executors go to 64): chunks */
	float *big = malloc(20 * K * sizeof(float));
	unsigned long ex0 = atomic_load(&ver->stats.executions);
	WF_CHECK_INT(wf_serve_batcher_infer(b, ver, xs + 20 * per, 20, big, 10, &err), 0);
	WF_CHECK(rows_match(big, 20, 20));
	WF_CHECK(atomic_load(&ver->stats.executions) > ex0);
	free(big);
	wf_serve_batcher_free(b);
	wf_serve_metrics_free(mx);
}

/* Let every slot's batch plan start each forward with size index idx (the
 * measured plan is whatever was fastest at load; these cover the others). */
static void force_plan(int idx)
{
	for (int i = 0; i < ver->nslots; i++)
		wf_batchplan_force(ver->slots[i].plan, idx);
}

/* Whatever sequence of forwards a batch runs as (one row at a time, padded
 * 4-row forwards, one big forward), each row gets its own logits. */
static void test_batch_plans(void)
{
	wf_serve_metrics *mx = wf_serve_metrics_create();
	wf_serve_batcher *b = make(1, 0, 64, 0, 0, mx);
	float *out = malloc((size_t)NS * K * sizeof(float));
	wf_err err = {0};
	int sizes[] = {1, 3, 7, 33, 64};
	for (int bucket = 0; bucket < ver->slots[0].plan->nsizes; bucket += 2) {
		force_plan(bucket);
		for (int i = 0; i < 5; i++) {
			int n = sizes[i];
			memset(out, 0, (size_t)NS * K * sizeof(float));
			WF_CHECK_INT(wf_serve_batcher_infer(b, ver, xs, n, out, 10, &err), 0);
			WF_CHECK_MSG(rows_match(out, 0, n), "plan: batch %d first, %d rows",
				     ver->slots[0].plan->size[bucket], n);
		}
	}
	force_plan(-1);
	free(out);
	wf_serve_batcher_free(b);
	wf_serve_metrics_free(mx);
}

typedef struct client {
	wf_serve_batcher *b;
	int first, n, rc;
	double timeout_s, took;
	float *out; /* [n, K] */
} client;

static void *client_main(void *arg)
{
	client *c = arg;
	wf_err err = {0};
	double t0 = wf_now();
	c->rc = wf_serve_batcher_infer(c->b, ver, xs + (size_t)c->first * per, c->n, c->out,
				       c->timeout_s, &err);
	c->took = wf_now() - t0;
	return NULL;
}

/* Wait (10 s at most) until the batcher has `queued` requests waiting and
 * `holding` batch threads holding a batch; 0 when it never did. */
static int wait_counts(wf_serve_batcher *b, int queued, int holding)
{
	int q = -1, h = -1;
	for (double t0 = wf_now(); wf_now() - t0 < 10; usleep(1000)) {
		wf_serve_batcher_counts(b, &q, &h);
		if (q == queued && h == holding)
			return 1;
	}
	fprintf(stderr, "batcher: %d queued and %d holding, waited for %d and %d\n", q, h, queued,
		holding);
	return 0;
}

static void start(client *c, pthread_t *t, wf_serve_batcher *b, int first, int n, double timeout_s)
{
	*c = (client){.b = b, .first = first, .n = n, .timeout_s = timeout_s};
	c->out = calloc((size_t)n * K, sizeof(float));
	pthread_create(t, NULL, client_main, c);
}

/* A model's own dynamic_batching delay (config.pbtxt) batches it even when
 * the server's batching is off: a request that comes while the first waits
 * for company shares its forward; without the delay they take one each. */
static void test_model_batching_delay(void)
{
	wf_serve_metrics *mx = wf_serve_metrics_create();
	wf_serve_batcher *b = make(1, 0, 8, 0, 0, mx);
	for (int own = 1; own >= 0; own--) {
		ver->batch_delay_us = own ? 1000000 : -1;
		unsigned long ex0 = atomic_load(&ver->stats.executions);
		client c1, c2;
		pthread_t t1, t2;
		start(&c1, &t1, b, 3, 1, 10);
		if (own) /* c1 is with the batch thread, waiting for more */
			WF_CHECK(wait_counts(b, 0, 1));
		start(&c2, &t2, b, 4, 1, 10);
		pthread_join(t1, NULL);
		pthread_join(t2, NULL);
		WF_CHECK(c1.rc == 0 && c2.rc == 0 && rows_match(c1.out, 3, 1) &&
			 rows_match(c2.out, 4, 1));
		WF_CHECK_INT(atomic_load(&ver->stats.executions) - ex0, own ? 1 : 2);
		free(c1.out);
		free(c2.out);
	}
	ver->batch_delay_us = -1;
	wf_serve_batcher_free(b);
	wf_serve_metrics_free(mx);
}

/* Eight concurrent one- and two-sample requests with batching on: each gets
 * its own rows, and fewer forwards run than requests. */
static void test_concurrent_requests_share_forwards(void)
{
	wf_serve_metrics *mx = wf_serve_metrics_create();
	/* a batch of 12 samples fills at once; the 2 s delay only bounds stragglers */
	wf_serve_batcher *b = make(1, 1, 12, 2000000, 0, mx);
	client c[8];
	pthread_t t[8];
	unsigned long ex0 = atomic_load(&ver->stats.executions);
	for (int i = 0; i < 8; i++)
		start(&c[i], &t[i], b, 3 * i, 1 + i % 2, 30);
	for (int i = 0; i < 8; i++) {
		pthread_join(t[i], NULL);
		WF_CHECK_INT(c[i].rc, 0);
		WF_CHECK_MSG(rows_match(c[i].out, c[i].first, c[i].n), "client %d", i);
		free(c[i].out);
	}
	unsigned long forwards = atomic_load(&ver->stats.executions) - ex0;
	WF_CHECK_MSG(forwards >= 1 && forwards < 8, "%lu forwards for 8 requests", forwards);
	wf_serve_batcher_free(b);
	wf_serve_metrics_free(mx);
}

/* One batch thread holds an 8-sample request while it waits (5 s) for the
 * batch of 64 to fill; a 60-sample request does not fit and stays queued.
 * With max_queue 1 the next request is refused at once; flush runs the
 * waiting batch (and then the queued request) at once. */
static void test_queue_bound_and_flush(void)
{
	wf_serve_metrics *mx = wf_serve_metrics_create();
	wf_serve_batcher *b = make(1, 1, 64, 5000000, 1, mx);
	client a, q;
	pthread_t ta, tq;
	start(&a, &ta, b, 0, 8, 30);
	WF_CHECK(wait_counts(b, 0, 1)); /* a is with the batch thread, waiting for more */
	start(&q, &tq, b, 2, 60, 30);
	WF_CHECK(wait_counts(b, 1, 1)); /* q is queued: 8 + 60 > 64 */
	float *out = malloc(60 * K * sizeof(float));
	wf_err err = {0};
	double t0 = wf_now();
	int rc = wf_serve_batcher_infer(b, ver, xs, 60, out, 30, &err);
	WF_CHECK_INT(rc, WF_SERVE_EFULL);
	WF_CHECK_MSG(wf_now() - t0 < 1, "refused after %.2f s", wf_now() - t0);
	WF_CHECK(strstr(err.msg, "queue is full") != NULL);
	double tf = wf_now();
	wf_serve_batcher_flush(b);
	pthread_join(ta, NULL);
	pthread_join(tq, NULL);
	double after = wf_now() - tf; /* the batch would have waited 5 s */
	WF_CHECK_MSG(after < 3, "answered %.2f s after flush", after);
	WF_CHECK_INT(a.rc, 0);
	WF_CHECK_INT(q.rc, 0);
	WF_CHECK(rows_match(a.out, 0, 8));
	WF_CHECK(rows_match(q.out, 2, 60));
	free(a.out);
	free(q.out);
	free(out);
	wf_serve_batcher_free(b);
	wf_serve_metrics_free(mx);
}

/* A queued request whose timeout passes before a batch thread takes it
 * fails with WF_ETRANSIENT (HTTP 503) and leaves the queue. */
static void test_queue_timeout(void)
{
	wf_serve_metrics *mx = wf_serve_metrics_create();
	wf_serve_batcher *b = make(1, 1, 64, 5000000, 0, mx);
	client a;
	pthread_t ta;
	start(&a, &ta, b, 0, 8, 30);
	WF_CHECK(wait_counts(b, 0, 1)); /* a is with the batch thread, waiting for more */
	float *out = malloc(60 * K * sizeof(float));
	wf_err err = {0};
	double t0 = wf_now();
	int rc = wf_serve_batcher_infer(b, ver, xs, 60, out, 0.3, &err);
	double waited = wf_now() - t0;
	WF_CHECK_INT(rc, WF_ETRANSIENT);
	WF_CHECK_MSG(waited >= 0.25 && waited < 4, "timed out after %.2f s", waited);
	WF_CHECK(strstr(err.msg, "timed out") != NULL);
	wf_serve_batcher_flush(b);
	pthread_join(ta, NULL);
	WF_CHECK_INT(a.rc, 0);
	WF_CHECK(rows_match(a.out, 0, 8));
	free(a.out);
	free(out);
	wf_serve_batcher_free(b);
	wf_serve_metrics_free(mx);
}

/* wf_serve_batcher_submit: the request's done function runs once, in a
 * batch thread, after its rows are written. */
typedef struct submitted {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int calls, rc;
	pthread_t thread;
	char msg[256];
} submitted;

static void on_done(void *arg, int rc, const char *msg)
{
	submitted *s = arg;
	pthread_mutex_lock(&s->mu);
	s->calls++;
	s->rc = rc;
	s->thread = pthread_self();
	snprintf(s->msg, sizeof(s->msg), "%s", msg);
	pthread_cond_signal(&s->cv);
	pthread_mutex_unlock(&s->mu);
}

static void wait_done(submitted *s)
{
	pthread_mutex_lock(&s->mu);
	while (!s->calls)
		pthread_cond_wait(&s->cv, &s->mu);
	pthread_mutex_unlock(&s->mu);
}

static void test_submitted_requests(void)
{
	wf_serve_metrics *mx = wf_serve_metrics_create();
	wf_serve_batcher *b = make(1, 1, 64, 200000, 0, mx);
	enum { N = 3 };
	submitted s[N];
	float out[N][4 * K];
	wf_err err = {0};
	for (int i = 0; i < N; i++) {
		s[i] = (submitted){.calls = 0};
		pthread_mutex_init(&s[i].mu, NULL);
		pthread_cond_init(&s[i].cv, NULL);
		WF_CHECK_INT(wf_serve_batcher_submit(b, ver, xs + (size_t)(10 * i) * per, 4, out[i],
						     10, on_done, &s[i], &err),
			     0);
	}
	/* a waiting caller joins the same forward */
	float mine[2 * K];
	WF_CHECK_INT(wf_serve_batcher_infer(b, ver, xs + 40 * per, 2, mine, 10, &err), 0);
	WF_CHECK(rows_match(mine, 40, 2));
	for (int i = 0; i < N; i++) {
		wait_done(&s[i]);
		WF_CHECK_INT(s[i].rc, 0);
		WF_CHECK(!pthread_equal(s[i].thread, pthread_self()));
		WF_CHECK(rows_match(out[i], 10 * i, 4));
	}
	wf_serve_batcher_free(b);
	for (int i = 0; i < N; i++) {
		WF_CHECK_INT(s[i].calls, 1);
		pthread_cond_destroy(&s[i].cv);
		pthread_mutex_destroy(&s[i].mu);
	}
	wf_serve_metrics_free(mx);
}

/* A submitted request still queued after its timeout fails with
 * WF_ETRANSIENT once a batch thread looks at the queue again. */
static void test_submitted_timeout(void)
{
	wf_serve_metrics *mx = wf_serve_metrics_create();
	wf_serve_batcher *b = make(1, 1, 64, 5000000, 0, mx);
	client a;
	pthread_t ta;
	start(&a, &ta, b, 0, 8, 30);
	WF_CHECK(wait_counts(b, 0, 1)); /* a is with the batch thread, waiting for more */
	submitted s = {.calls = 0};
	pthread_mutex_init(&s.mu, NULL);
	pthread_cond_init(&s.cv, NULL);
	float *out = malloc(60 * K * sizeof(float));
	wf_err err = {0};
	double t0 = wf_now();
	WF_CHECK_INT(wf_serve_batcher_submit(b, ver, xs, 60, out, 0.3, on_done, &s, &err), 0);
	WF_CHECK(wait_counts(b, 1, 1)); /* s is queued behind a */
	while (wf_now() - t0 < 0.35)	/* the timeout under test passes */
		usleep(10 * 1000);
	wf_serve_batcher_flush(b); /* a runs; then the thread finds s expired */
	pthread_join(ta, NULL);
	wait_done(&s);
	WF_CHECK_INT(a.rc, 0);
	WF_CHECK_INT(s.rc, WF_ETRANSIENT);
	WF_CHECK_MSG(strstr(s.msg, "timed out") != NULL, "message: %s", s.msg);
	wf_serve_batcher_free(b);
	WF_CHECK_INT(s.calls, 1);
	free(a.out);
	free(out);
	pthread_cond_destroy(&s.cv);
	pthread_mutex_destroy(&s.mu);
	wf_serve_metrics_free(mx);
}

/* A reader for the core that fails, and counts its calls. */
static int bad_reader(void *arg, const wf_image_io *io, wf_serve_request *rq, wf_err *err)
{
	(void)io;
	(void)rq;
	++*(int *)arg;
	return wf_errf(err, WF_EINVAL, "outputs[0] is not an output of the model");
}

/* wf_serve_infer counts each request once in the version's statistics,
 * whatever fails: its reader, its tensor, its deadline; a good one is a
 * success with its outputs made. */
static void test_core_counts_each_request_once(void)
{
	wf_serve_metrics *mx = wf_serve_metrics_create();
	wf_serve_batcher *b = make(1, 0, 64, 0, 0, mx);
	unsigned long ok0 = atomic_load(&ver->stats.success), fail0 = atomic_load(&ver->stats.fail);
	int64_t good[4] = {2, ver->io.h, ver->io.w, ver->io.c}, bad[4] = {2, ver->io.h, 3, 1};
	wf_serve_tensor_view t = {.name = WF_SERVE_INPUT_NAME,
				  .datatype = "FP32",
				  .dims = bad,
				  .ndim = 4,
				  .values = xs,
				  .nvalues = (size_t)2 * per,
				  .has_values = 1,
				  .values_what = "values"};
	wf_serve_response rs;
	wf_err err = {0};
	int reads = 0;
	wf_serve_request rq = {.read = bad_reader, .read_arg = &reads, .timeout_s = 10};
	WF_CHECK_INT(wf_serve_infer(b, ver, &rq, &rs, &err), WF_EINVAL);
	WF_CHECK(reads == 1 && rs.bad_request);
	wf_serve_response_free(&rs);
	wf_serve_request_free(&rq);
	rq = (wf_serve_request){.tensor = t, .has_tensor = 1, .timeout_s = 10};
	WF_CHECK_INT(wf_serve_infer(b, ver, &rq, &rs, &err), WF_EINVAL);
	WF_CHECK_MSG(rs.bad_request && strstr(err.msg, "shape"), "%s", err.msg);
	wf_serve_response_free(&rs);
	wf_serve_request_free(&rq);
	t.dims = good;
	rq = (wf_serve_request){.tensor = t, .has_tensor = 1, .timeout_s = 10, .deadline = 1};
	WF_CHECK_INT(wf_serve_infer(b, ver, &rq, &rs, &err), WF_ETRANSIENT);
	WF_CHECK(!rs.bad_request);
	wf_serve_response_free(&rs);
	wf_serve_request_free(&rq);
	WF_CHECK_INT(atomic_load(&ver->stats.fail) - fail0, 3);
	WF_CHECK_INT(atomic_load(&ver->stats.success) - ok0, 0);
	rq = (wf_serve_request){.tensor = t, .has_tensor = 1, .timeout_s = 10};
	rq.nout = wf_serve_outputs_all(rq.out, 0);
	WF_CHECK_INT(wf_serve_infer(b, ver, &rq, &rs, &err), 0);
	WF_CHECK(rs.res.n == 2 && rows_match(rs.res.logits, 0, 2));
	WF_CHECK(rs.nout == 2 && !strcmp(rs.t[0].name, WF_SERVE_OUTPUT_PROBS) &&
		 rs.t[1].len == 2 * K * sizeof(float) &&
		 !memcmp(rs.t[1].data, rs.res.logits, rs.t[1].len));
	wf_serve_response_free(&rs);
	wf_serve_request_free(&rq);
	WF_CHECK_INT(atomic_load(&ver->stats.fail) - fail0, 3);
	WF_CHECK_INT(atomic_load(&ver->stats.success) - ok0, 1);
	wf_serve_batcher_free(b);
	wf_serve_metrics_free(mx);
}

int main(void)
{
	if (setup()) {
		fprintf(stderr, "FAIL setup\n");
		return 1;
	}
	WF_RUN(test_unbatched_rows);
	WF_RUN(test_batch_plans);
	WF_RUN(test_concurrent_requests_share_forwards);
	WF_RUN(test_model_batching_delay);
	WF_RUN(test_queue_bound_and_flush);
	WF_RUN(test_queue_timeout);
	WF_RUN(test_submitted_requests);
	WF_RUN(test_submitted_timeout);
	WF_RUN(test_core_counts_each_request_once);
	wf_serve_version_release(ver);
	free(xs);
	free(refs);
	char cmd[600];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", dir);
	return wf_test_summary();
}
