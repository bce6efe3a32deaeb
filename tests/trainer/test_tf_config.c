/* test_tf_config.c: TF_CONFIG edge cases read as TensorFlow's
 * TFConfigClusterResolver and multi_worker_util.validate_cluster_spec read
 * them: an evaluator outside `cluster`, a string "index", at most one chief,
 * a sparse worker map ranked inside its world (its size from the pod's
 * environment, the same for every per-task view), no `task` for a one-task
 * cluster, duplicate keys refused. */
#include "tests/test.h"

#include "trainer/cluster.h"

#include <string.h>

static int parse(wf_cluster *c, const char *tf, wf_err *e)
{
	memset(e, 0, sizeof(*e));
	return wf_cluster_parse_tf_config(c, tf, e);
}

static void test_evaluator_outside_cluster(void)
{
	wf_cluster c;
	wf_err e;
	WF_CHECK_MSG(parse(&c,
			   "{\"cluster\": {\"chief\": [\"c:1\"], \"worker\": [\"w:1\"]}, "
			   "\"task\": {\"type\": \"evaluator\", \"index\": 0}}",
			   &e) == 0,
		     "%s", e.msg);
	WF_CHECK_INT(c.role, WF_ROLE_EVALUATOR);
	WF_CHECK_INT(c.rank, -1);
	WF_CHECK_INT(c.world_size, 2);
	wf_cluster_free(&c);
}

static void test_string_index(void)
{
	wf_cluster c;
	wf_err e;
	WF_CHECK_MSG(parse(&c,
			   "{\"cluster\": {\"worker\": [\"a:1\", \"b:1\"]}, \"task\": {\"type\": "
			   "\"worker\", \"index\": \"1\"}}",
			   &e) == 0,
		     "%s", e.msg);
	WF_CHECK_INT(c.index, 1);
	WF_CHECK_INT(c.rank, 1);
	wf_cluster_free(&c);
	WF_CHECK(parse(&c,
		       "{\"cluster\": {\"worker\": [\"a:1\"]}, \"task\": {\"type\": \"worker\", "
		       "\"index\": \"one\"}}",
		       &e) == WF_EINVAL);
	WF_CHECK_MSG(strstr(e.msg, "task.index"), "%s", e.msg);
	WF_CHECK(parse(&c,
		       "{\"cluster\": {\"worker\": [\"a:1\"]}, \"task\": {\"type\": \"worker\", "
		       "\"index\": \"-1\"}}",
		       &e) == WF_EINVAL);
}

static void test_at_most_one_chief(void)
{
	wf_cluster c;
	wf_err e;
	WF_CHECK(parse(&c,
		       "{\"cluster\": {\"chief\": [\"c:1\", \"d:1\"], \"worker\": [\"w:1\"]}, "
		       "\"task\": {\"type\": \"worker\", \"index\": 0}}",
		       &e) == WF_EINVAL);
	WF_CHECK_MSG(strstr(e.msg, "at most one chief"), "%s", e.msg);
}

static int parse_counts(wf_cluster *c, const char *tf, long chiefs, long workers, wf_err *e)
{
	wf_cluster_counts counts = {{-1, chiefs, workers, -1, -1}};
	memset(e, 0, sizeof(*e));
	return wf_cluster_parse_tf_config_counts(c, tf, &counts, e);
}

static void test_sparse_workers_rank_inside_world(void)
{
	wf_cluster c;
	wf_err e;
	WF_CHECK_MSG(parse_counts(&c,
				  "{\"cluster\": {\"chief\": [\"c:1\"], \"worker\": {\"2\": "
				  "\"w2:1\"}, \"ps\": [\"p:1\"]}, \"task\": {\"type\": \"worker\", "
				  "\"index\": 2}}",
				  -1, 3, &e) == 0,
		     "%s", e.msg);
	WF_CHECK_INT(c.rank, 3);
	WF_CHECK_MSG(c.rank < c.world_size, "rank %d of %d", c.rank, c.world_size);
	wf_cluster_free(&c);
}

/* Kubeflow's per-worker views: worker 3 sees only {"3": ...}, worker 0 only
 * {"0": ...}. Both must see the same world (the count from the pod's
 * environment), or be refused with a message naming what to set. */
static void test_sparse_views_agree_on_the_world(void)
{
	const char *views[] = {
		"{\"cluster\": {\"worker\": {\"3\": \"w3:2222\"}, \"ps\": [\"p:2222\"]}, "
		"\"task\": {\"type\": \"worker\", \"index\": 3}}",
		"{\"cluster\": {\"worker\": {\"0\": \"w0:2222\"}, \"ps\": [\"p:2222\"]}, "
		"\"task\": {\"type\": \"worker\", \"index\": 0}}",
	};
	int world[2];
	for (int i = 0; i < 2; i++) {
		wf_cluster c;
		wf_err e;
		WF_CHECK_MSG(parse(&c, views[i], &e) == WF_EINVAL, "accepted without a count: %s",
			     views[i]);
		WF_CHECK_MSG(strstr(e.msg, "WEFT_NUM_WORKERS") && strstr(e.msg, "cluster.worker"),
			     "%s", e.msg);
		WF_CHECK_MSG(parse_counts(&c, views[i], -1, 5, &e) == 0, "%s", e.msg);
		world[i] = c.world_size;
		WF_CHECK(c.rank < c.world_size);
		wf_cluster_free(&c);
	}
	WF_CHECK_MSG(world[0] == world[1], "worker 3 sees a world of %d, worker 0 of %d", world[0],
		     world[1]);
	WF_CHECK_INT(world[0], 5);
	/* a count that leaves out a listed index */
	wf_cluster c;
	wf_err e;
	WF_CHECK(parse_counts(&c, views[0], -1, 3, &e) == WF_EINVAL);
	WF_CHECK_MSG(strstr(e.msg, "WEFT_NUM_WORKERS=3") && strstr(e.msg, "index 3"), "%s", e.msg);
	/* a full list needs no count and wins over one */
	WF_CHECK_MSG(parse_counts(&c,
				  "{\"cluster\": {\"worker\": [\"a:1\", \"b:1\"]}, \"task\": "
				  "{\"type\": \"worker\", \"index\": 0}}",
				  -1, 3, &e) == 0,
		     "%s", e.msg);
	WF_CHECK_INT(c.world_size, 2);
	wf_cluster_free(&c);
}

/* TensorFlow trains locally when TF_CONFIG has neither cluster nor task;
 * with a cluster, its strategies need the task. */
static void test_missing_task(void)
{
	wf_cluster c;
	wf_err e;
	const char *local[] = {"{}", "{\"cluster\": {}}", "{\"environment\": \"cloud\"}"};
	for (int i = 0; i < 3; i++) {
		WF_CHECK_MSG(parse(&c, local[i], &e) == 0, "%s: %s", local[i], e.msg);
		WF_CHECK_INT(c.world_size, 1);
		WF_CHECK_INT(c.is_chief, 1);
		WF_CHECK_INT(c.source, WF_CLUSTER_SRC_NONE);
		wf_cluster_free(&c);
	}
	WF_CHECK(parse(&c, "{\"cluster\": {\"worker\": [\"a:1\", \"b:1\"]}}", &e) == WF_EINVAL);
	WF_CHECK_MSG(strstr(e.msg, "\"task\""), "%s", e.msg);
}

static void test_duplicate_keys(void)
{
	wf_cluster c;
	wf_err e;
	WF_CHECK(parse(&c,
		       "{\"cluster\": {\"worker\": [\"a:1\"]}, \"task\": {\"type\": \"worker\", "
		       "\"index\": 0, \"index\": 0}}",
		       &e) == WF_EINVAL);
	WF_CHECK_MSG(strstr(e.msg, "duplicate"), "%s", e.msg);
}

int main(void)
{
	WF_RUN(test_evaluator_outside_cluster);
	WF_RUN(test_string_index);
	WF_RUN(test_at_most_one_chief);
	WF_RUN(test_sparse_workers_rank_inside_world);
	WF_RUN(test_sparse_views_agree_on_the_world);
	WF_RUN(test_missing_task);
	WF_RUN(test_duplicate_keys);
	return wf_test_summary();
}
