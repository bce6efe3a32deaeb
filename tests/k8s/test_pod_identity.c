/* The TF_CONFIG a pod builds from its identity (WEFT_ROLE, the index from
 * WEFT_INDEX or JOB_COMPLETION_INDEX, the services and counts), how it ranks
 * against a given TF_CONFIG and mpirun's variables, and the errors that name
 * the variable. The host-name ordinal is covered by test_tfconfig.sh (it
 * needs a UTS namespace). */
#include "tests/test.h"

#include "trainer/cluster.h"

#include <stdlib.h>
#include <string.h>

static const char *const vars[] = {
	"TF_CONFIG",
	"WEFT_ROLE",
	"WEFT_INDEX",
	"JOB_COMPLETION_INDEX",
	"WEFT_NUM_PS",
	"WEFT_NUM_WORKERS",
	"WEFT_NUM_CHIEF",
	"WEFT_NUM_EVALUATORS",
	"WEFT_PS_SERVICE",
	"WEFT_WORKER_SERVICE",
	"WEFT_CHIEF_SERVICE",
	"WEFT_PS_NAME",
	"WEFT_WORKER_NAME",
	"WEFT_PORT",
	"WEFT_DOMAIN",
	"OMPI_COMM_WORLD_RANK",
	"OMPI_COMM_WORLD_SIZE",
	"OMPI_COMM_WORLD_LOCAL_RANK",
};

static void clear_env(void)
{
	for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
		unsetenv(vars[i]);
}

/* The pods of k8s/base/train: 2 servers, 2 workers, a chief. */
static void set_base_cluster(const char *role)
{
	clear_env();
	setenv("WEFT_ROLE", role, 1);
	setenv("WEFT_NUM_PS", "2", 1);
	setenv("WEFT_NUM_WORKERS", "2", 1);
	setenv("WEFT_NUM_CHIEF", "1", 1);
}

static void test_indexed_job_worker_gets_the_cluster_of_the_manifests(void)
{
	wf_cluster c;
	wf_err e = {0};
	set_base_cluster("worker");
	setenv("JOB_COMPLETION_INDEX", "1", 1);
	WF_CHECK_MSG(wf_cluster_from_env(&c, &e) == 0, "%s", e.msg);
	WF_CHECK_INT(c.source, WF_CLUSTER_SRC_TF_CONFIG);
	WF_CHECK_INT(c.derived, 1);
	WF_CHECK_INT(c.role, WF_ROLE_WORKER);
	WF_CHECK_INT(c.index, 1);
	WF_CHECK_INT(c.rank, 2);
	WF_CHECK_INT(c.world_size, 3);
	WF_CHECK_INT(c.is_chief, 0);
	WF_CHECK(!strcmp(c.jobs[WF_ROLE_PS].addr[1], "ps-1.ps:2222"));
	WF_CHECK(!strcmp(c.jobs[WF_ROLE_WORKER].addr[0], "worker-0.worker:2222"));
	WF_CHECK(!strcmp(c.jobs[WF_ROLE_CHIEF].addr[0], "chief-0.chief:2222"));
	WF_CHECK(strstr(c.origin, "JOB_COMPLETION_INDEX=1") != NULL);
	WF_CHECK_INT(wf_cluster_validate(&c, "parameter_server", &e), 0);
	wf_cluster_free(&c);
}

static void test_exact_tf_config_text_with_domain_port_and_services(void)
{
	char *json = NULL, origin[160];
	wf_err e = {0};
	set_base_cluster("ps");
	setenv("WEFT_NUM_WORKERS", "1", 1);
	setenv("WEFT_INDEX", "0", 1);
	setenv("WEFT_PORT", "3000", 1);
	setenv("WEFT_DOMAIN", "team-a.svc.cluster.local", 1);
	setenv("WEFT_PS_SERVICE", "weft-ps", 1);
	setenv("WEFT_WORKER_SERVICE", "workers", 1);
	setenv("WEFT_WORKER_NAME", "train-worker", 1);
	WF_CHECK_MSG(wf_cluster_pod_tf_config(&json, origin, sizeof(origin), &e) == 0, "%s", e.msg);
	const char *want =
		"{\"cluster\": {\"chief\": [\"chief-0.chief.team-a.svc.cluster.local:3000\"], "
		"\"worker\": [\"train-worker-0.workers.team-a.svc.cluster.local:3000\"], "
		"\"ps\": [\"weft-ps-0.weft-ps.team-a.svc.cluster.local:3000\", "
		"\"weft-ps-1.weft-ps.team-a.svc.cluster.local:3000\"]}, "
		"\"task\": {\"type\": \"ps\", \"index\": 0}}";
	WF_CHECK_MSG(json && !strcmp(json, want), "got %s", json ? json : "(null)");
	WF_CHECK(strstr(origin, "WEFT_INDEX=0") != NULL);
	free(json);
}

static void test_single_chief_needs_no_index(void)
{
	wf_cluster c;
	wf_err e = {0};
	set_base_cluster("chief");
	WF_CHECK_MSG(wf_cluster_from_env(&c, &e) == 0, "%s", e.msg);
	WF_CHECK_INT(c.role, WF_ROLE_CHIEF);
	WF_CHECK_INT(c.index, 0);
	WF_CHECK_INT(c.is_chief, 1);
	WF_CHECK_INT(c.rank, 0);
	wf_cluster_free(&c);
}

static void test_given_tf_config_wins_and_mpirun_ranks_below_weft_role(void)
{
	wf_cluster c;
	wf_err e = {0};
	set_base_cluster("worker");
	setenv("JOB_COMPLETION_INDEX", "1", 1);
	setenv("TF_CONFIG",
	       "{\"cluster\": {\"worker\": [\"a:2222\"], \"ps\": [\"b:2222\"]}, \"task\": "
	       "{\"type\": \"ps\", \"index\": 0}, \"environment\": \"cloud\"}",
	       1);
	WF_CHECK_MSG(wf_cluster_from_env(&c, &e) == 0, "%s", e.msg);
	WF_CHECK_INT(c.derived, 0);
	WF_CHECK_INT(c.role, WF_ROLE_PS);
	wf_cluster_free(&c);
	/* WEFT_ROLE is explicit; mpirun's variables only apply without it */
	unsetenv("TF_CONFIG");
	setenv("OMPI_COMM_WORLD_RANK", "3", 1);
	setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
	WF_CHECK_INT(wf_cluster_from_env(&c, &e), 0);
	WF_CHECK_INT(c.derived, 1);
	wf_cluster_free(&c);
	unsetenv("WEFT_ROLE");
	WF_CHECK_INT(wf_cluster_from_env(&c, &e), 0);
	WF_CHECK_INT(c.source, WF_CLUSTER_SRC_MPI);
	WF_CHECK_INT(c.rank, 3);
	wf_cluster_free(&c);
}

/* expect_error: wf_cluster_from_env fails with WF_EINVAL naming needle. */
static void expect_error(const char *needle)
{
	wf_cluster c;
	wf_err e = {0};
	int rc = wf_cluster_from_env(&c, &e);
	WF_CHECK_MSG(rc == WF_EINVAL && strstr(e.msg, needle), "rc %d, want an error naming %s: %s",
		     rc, needle, e.msg);
	if (rc == 0)
		wf_cluster_free(&c);
}

static void test_wrong_variables_are_named(void)
{
	set_base_cluster("gardener");
	expect_error("WEFT_ROLE");
	set_base_cluster("worker");
	setenv("JOB_COMPLETION_INDEX", "2", 1);
	expect_error("WEFT_NUM_WORKERS=2");
	set_base_cluster("worker");
	setenv("WEFT_NUM_WORKERS", "two", 1);
	expect_error("WEFT_NUM_WORKERS");
	set_base_cluster("chief");
	setenv("WEFT_NUM_CHIEF", "2", 1);
	expect_error("WEFT_NUM_CHIEF");
	set_base_cluster("ps");
	setenv("WEFT_NUM_PS", "0", 1);
	setenv("WEFT_INDEX", "0", 1);
	expect_error("WEFT_NUM_PS");
	set_base_cluster("ps");
	expect_error("WEFT_INDEX"); /* two servers, no index, a host name that is not ps-N */
	set_base_cluster("worker");
	setenv("WEFT_INDEX", "x", 1);
	expect_error("WEFT_INDEX");
	set_base_cluster("worker");
	setenv("WEFT_INDEX", "0", 1);
	setenv("WEFT_PS_SERVICE", "ps_servers", 1);
	expect_error("WEFT_PS_SERVICE");
	set_base_cluster("worker");
	setenv("WEFT_INDEX", "0", 1);
	setenv("WEFT_PORT", "70000", 1);
	expect_error("WEFT_PORT");
	set_base_cluster("worker");
	setenv("WEFT_INDEX", "0", 1);
	setenv("WEFT_DOMAIN", "svc..local", 1);
	expect_error("WEFT_DOMAIN");
}

static void test_strategy_check_names_the_count(void)
{
	wf_cluster c;
	wf_err e = {0};
	set_base_cluster("worker");
	setenv("WEFT_NUM_PS", "0", 1);
	setenv("WEFT_INDEX", "0", 1);
	WF_CHECK_INT(wf_cluster_from_env(&c, &e), 0);
	WF_CHECK_INT(wf_cluster_validate(&c, "parameter_server", &e), WF_EINVAL);
	WF_CHECK_MSG(strstr(e.msg, "WEFT_NUM_PS") != NULL, "%s", e.msg);
	wf_cluster_free(&c);
}

int main(void)
{
	WF_RUN(test_indexed_job_worker_gets_the_cluster_of_the_manifests);
	WF_RUN(test_exact_tf_config_text_with_domain_port_and_services);
	WF_RUN(test_single_chief_needs_no_index);
	WF_RUN(test_given_tf_config_wins_and_mpirun_ranks_below_weft_role);
	WF_RUN(test_wrong_variables_are_named);
	WF_RUN(test_strategy_check_names_the_count);
	clear_env();
	return wf_test_summary();
}
