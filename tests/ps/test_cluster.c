/* TF_CONFIG as TensorFlow and Kubeflow write it, the environment fallbacks
 * (mpirun, Indexed Jobs), strategy validation and host resolution. */
#include "tests/test.h"

#include "trainer/cluster.h"

#include <stdlib.h>

static void test_plain_tf_config_with_chief(void)
{
	wf_cluster c;
	wf_err e = {0};
	const char *tf = "{\"cluster\": {\"chief\": [\"host0:2222\"], \"worker\": [\"host1:2222\", "
			 "\"host2:2222\"], \"ps\": [\"ps0:2222\", \"ps1:2222\"]}, "
			 "\"task\": {\"type\": \"worker\", \"index\": 1}}";
	WF_CHECK_INT(wf_cluster_parse_tf_config(&c, tf, &e), 0);
	WF_CHECK_INT(c.role, WF_ROLE_WORKER);
	WF_CHECK_INT(c.index, 1);
	WF_CHECK_INT(c.is_chief, 0);
	WF_CHECK_INT(c.jobs[WF_ROLE_PS].n, 2);
	WF_CHECK(!strcmp(c.jobs[WF_ROLE_PS].addr[1], "ps1:2222"));
	WF_CHECK_INT(c.world_size, 3);
	WF_CHECK_INT(c.rank, 2);
	WF_CHECK_INT(wf_cluster_validate(&c, "parameter_server", &e), 0);
	wf_cluster_free(&c);
}

static void test_no_chief_worker0_is_chief_with_environment_and_evaluator(void)
{
	wf_cluster c;
	wf_err e = {0};
	const char *tf = "{\"cluster\": {\"worker\": [\"w0:2222\", \"w1:2222\"], \"ps\": "
			 "[\"p0:2222\"], \"evaluator\": [\"ev:2222\"]}, \"task\": {\"type\": "
			 "\"worker\", \"index\": 0}, \"environment\": \"cloud\"}";
	WF_CHECK_MSG(wf_cluster_parse_tf_config(&c, tf, &e) == 0, "%s", e.msg);
	WF_CHECK_INT(c.is_chief, 1);
	WF_CHECK(!strcmp(c.environment, "cloud"));
	WF_CHECK_INT(c.jobs[WF_ROLE_EVALUATOR].n, 1);
	WF_CHECK_INT(wf_cluster_num_trainers(&c), 2);
	wf_cluster_free(&c);
	/* the evaluator task itself */
	const char *ev = "{\"cluster\": {\"worker\": [\"w0:2222\"], \"evaluator\": [\"ev:2222\"]}, "
			 "\"task\": {\"type\": \"evaluator\", \"index\": 0}}";
	WF_CHECK_INT(wf_cluster_parse_tf_config(&c, ev, &e), 0);
	WF_CHECK_INT(c.role, WF_ROLE_EVALUATOR);
	WF_CHECK_INT(c.is_chief, 0);
	wf_cluster_free(&c);
}

static void test_kubeflow_sparse_workers(void)
{
	wf_cluster c;
	wf_err e = {0};
	const char *tf = "{\"cluster\": {\"chief\": [\"c:2222\"], \"worker\": {\"1\": "
			 "\"w1.svc:2222\", \"3\": \"w3.svc:2222\"}, \"ps\": [\"p:2222\"]}, "
			 "\"task\": {\"type\": \"worker\", \"index\": 3}}";
	/* the map does not say how many workers the job has */
	WF_CHECK_INT(wf_cluster_parse_tf_config(&c, tf, &e), WF_EINVAL);
	WF_CHECK_MSG(strstr(e.msg, "WEFT_NUM_WORKERS") != NULL, "%s", e.msg);
	wf_cluster_counts counts = {{-1, -1, 4, -1, -1}};
	WF_CHECK_MSG(wf_cluster_parse_tf_config_counts(&c, tf, &counts, &e) == 0, "%s", e.msg);
	WF_CHECK_INT(c.index, 3);
	WF_CHECK_INT(c.jobs[WF_ROLE_WORKER].n, 4);
	WF_CHECK_INT(c.world_size, 5);
	WF_CHECK(c.jobs[WF_ROLE_WORKER].addr[0] == NULL);
	WF_CHECK(!strcmp(c.jobs[WF_ROLE_WORKER].addr[3], "w3.svc:2222"));
	wf_cluster_free(&c);
	/* an index the sparse map does not list */
	const char *bad = "{\"cluster\": {\"worker\": {\"1\": \"w1:2222\"}}, \"task\": {\"type\": "
			  "\"worker\", \"index\": 0}}";
	WF_CHECK_INT(wf_cluster_parse_tf_config_counts(&c, bad, &counts, &e), WF_EINVAL);
	WF_CHECK_MSG(strstr(e.msg, "task.index") != NULL, "%s", e.msg);
}

static void expect_error(const char *tf, const char *needle)
{
	wf_cluster c;
	wf_err e = {0};
	int rc = wf_cluster_parse_tf_config(&c, tf, &e);
	WF_CHECK_MSG(rc == WF_EINVAL, "accepted: %s", tf);
	WF_CHECK_MSG(strstr(e.msg, needle) != NULL, "\"%s\" not in: %s", needle, e.msg);
}

static void test_bad_specs_name_the_field(void)
{
	expect_error("{\"cluster\": ", "not JSON");
	expect_error("{\"task\": {\"type\": \"worker\", \"index\": 0}}", "cluster");
	expect_error("{\"cluster\": {\"worker\": [\"a:1\"]}}", "task");
	expect_error("{\"cluster\": {\"worker\": [\"a:1\"]}, \"task\": {\"type\": \"boss\", "
		     "\"index\": 0}}",
		     "task.type");
	expect_error("{\"cluster\": {\"worker\": [\"a:1\"]}, \"task\": {\"type\": \"worker\", "
		     "\"index\": 1}}",
		     "task.index 1");
	expect_error("{\"cluster\": {\"worker\": [\"a:1\", \"a:1\"]}, \"task\": {\"type\": "
		     "\"worker\", \"index\": 0}}",
		     "duplicate address a:1");
	expect_error("{\"cluster\": {\"worker\": [\"a:1\"], \"ps\": [\"nocolon\"]}, \"task\": "
		     "{\"type\": \"worker\", \"index\": 0}}",
		     "cluster.ps[0]");
	expect_error("{\"cluster\": {\"worker\": [\"a:99999\"]}, \"task\": {\"type\": "
		     "\"worker\", \"index\": 0}}",
		     "host:port");
	expect_error("{\"cluster\": {\"trainer\": [\"a:1\"]}, \"task\": {\"type\": \"worker\", "
		     "\"index\": 0}}",
		     "cluster.trainer");
	/* a ps strategy with no ps */
	wf_cluster c;
	wf_err e = {0};
	WF_CHECK_INT(wf_cluster_parse_tf_config(&c,
						"{\"cluster\": {\"worker\": [\"a:1\"]}, "
						"\"task\": {\"type\": \"worker\"}}",
						&e),
		     0);
	WF_CHECK_INT(wf_cluster_validate(&c, "parameter_server", &e), WF_EINVAL);
	WF_CHECK(strstr(e.msg, "cluster.ps") != NULL);
	WF_CHECK_INT(wf_cluster_validate(&c, "allreduce", &e), 0);
	WF_CHECK_INT(wf_cluster_validate(&c, "gossip", &e), WF_EINVAL);
	wf_cluster_free(&c);
}

static void test_environment_fallbacks(void)
{
	wf_cluster c;
	wf_err e = {0};
	unsetenv("TF_CONFIG");
	unsetenv("JOB_COMPLETION_INDEX");
	setenv("OMPI_COMM_WORLD_RANK", "3", 1);
	setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
	setenv("OMPI_COMM_WORLD_LOCAL_RANK", "1", 1);
	WF_CHECK_INT(wf_cluster_from_env(&c, &e), 0);
	WF_CHECK_INT(c.source, WF_CLUSTER_SRC_MPI);
	WF_CHECK_INT(c.rank, 3);
	WF_CHECK_INT(c.world_size, 4);
	WF_CHECK_INT(c.local_rank, 1);
	WF_CHECK_INT(c.is_chief, 0);
	setenv("OMPI_COMM_WORLD_RANK", "4", 1);
	WF_CHECK_INT(wf_cluster_from_env(&c, &e), WF_EINVAL);
	WF_CHECK(strstr(e.msg, "OMPI_COMM_WORLD_RANK") != NULL);
	unsetenv("OMPI_COMM_WORLD_RANK");
	unsetenv("OMPI_COMM_WORLD_SIZE");
	unsetenv("OMPI_COMM_WORLD_LOCAL_RANK");
	setenv("JOB_COMPLETION_INDEX", "0", 1);
	WF_CHECK_INT(wf_cluster_from_env(&c, &e), 0);
	WF_CHECK_INT(c.source, WF_CLUSTER_SRC_JOB_INDEX);
	WF_CHECK_INT(c.is_chief, 1);
	setenv("JOB_COMPLETION_INDEX", "x", 1);
	WF_CHECK_INT(wf_cluster_from_env(&c, &e), WF_EINVAL);
	unsetenv("JOB_COMPLETION_INDEX");
	WF_CHECK_INT(wf_cluster_from_env(&c, &e), 0);
	WF_CHECK_INT(c.source, WF_CLUSTER_SRC_NONE);
	WF_CHECK_INT(c.is_chief, 1);
	setenv("TF_CONFIG",
	       "{\"cluster\": {\"ps\": [\"p:1\"], \"worker\": [\"w:2\"]}, "
	       "\"task\": {\"type\": \"ps\", \"index\": 0}}",
	       1);
	WF_CHECK_INT(wf_cluster_from_env(&c, &e), 0);
	WF_CHECK_INT(c.role, WF_ROLE_PS);
	wf_cluster_free(&c);
	unsetenv("TF_CONFIG");
}

static void test_resolve_with_retries(void)
{
	char ep[128];
	wf_err e = {0};
	WF_CHECK_INT(wf_cluster_resolve("127.0.0.1:2222", 1, 0.01, ep, sizeof(ep), &e), 0);
	WF_CHECK(!strcmp(ep, "tcp://127.0.0.1:2222"));
	WF_CHECK_INT(wf_cluster_resolve("localhost:5000", 2, 0.01, ep, sizeof(ep), &e), 0);
	WF_CHECK_MSG(strstr(ep, ":5000") && !strncmp(ep, "tcp://", 6), "%s", ep);
	WF_CHECK_INT(wf_cluster_resolve("[::1]:7", 1, 0.01, ep, sizeof(ep), &e), 0);
	WF_CHECK(!strcmp(ep, "tcp://[::1]:7"));
	WF_CHECK_INT(wf_cluster_resolve("no-such-host.invalid:2222", 2, 0.01, ep, sizeof(ep), &e),
		     WF_ETRANSIENT);
	WF_CHECK(strstr(e.msg, "no-such-host.invalid") != NULL);
	WF_CHECK_INT(wf_cluster_resolve("bad", 1, 0.01, ep, sizeof(ep), &e), WF_EINVAL);
}

int main(void)
{
	WF_RUN(test_plain_tf_config_with_chief);
	WF_RUN(test_no_chief_worker0_is_chief_with_environment_and_evaluator);
	WF_RUN(test_kubeflow_sparse_workers);
	WF_RUN(test_bad_specs_name_the_field);
	WF_RUN(test_environment_fallbacks);
	WF_RUN(test_resolve_with_retries);
	return wf_test_summary();
}
