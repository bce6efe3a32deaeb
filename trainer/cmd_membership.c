/* cmd_membership.c: `weft membership`: the membership service of elastic
 * allreduce as a process of its own (weft launch --elastic runs the same
 * service on a thread). It serves until SIGINT/SIGTERM. */
#include "trainer/cmd_membership.h"

#include "common/log.h"
#include "ps/auth.h"
#include "trainer/cli.h"
#include "trainer/cluster.h"
#include "trainer/config.h"
#include "trainer/job.h"
#include "worker/membership.h"
#include "worker/rendezvous.h"

#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static wf_membership *running;

static void on_signal(int sig)
{
	(void)sig;
	wf_membership_stop(running); /* async-signal-safe: one write(2) */
}

/* The job tag the workers derive: their TF_CONFIG cluster (the task does
 * not count; the service is none of them) and WEFT_JOB_TOKEN. */
static int job_tag(const wf_config *cfg, uint64_t *job, wf_err *err)
{
	const char *text = getenv("TF_CONFIG");
	if (!text || !*text)
		return wf_errf(err, WF_EINVAL,
			       "membership: TF_CONFIG is not set: give the service the workers' "
			       "TF_CONFIG cluster (its task is ignored), so that it knows the job");
	json_error_t je;
	json_t *root = json_loads(text, 0, &je);
	json_t *cluster = root ? json_object_get(root, "cluster") : NULL;
	if (!cluster || !json_is_object(cluster)) {
		json_decref(root);
		return wf_errf(err, WF_EINVAL, "membership: TF_CONFIG: no cluster object (%s)",
			       root ? "missing" : je.text);
	}
	const char *type = json_object_get(cluster, "chief") ? "chief" : "worker";
	json_object_set_new(root, "task", json_pack("{s:s, s:i}", "type", type, "index", 0));
	char *fixed = json_dumps(root, JSON_COMPACT);
	json_decref(root);
	if (!fixed)
		return wf_errf(err, WF_ENOMEM, "out of memory");
	wf_cluster c;
	int rc = wf_cluster_parse_tf_config(&c, fixed, err);
	free(fixed);
	if (rc != 0)
		return rc;
	const char *token = getenv(WF_JOB_TOKEN_ENV);
	snprintf(c.job_token, sizeof(c.job_token), "%s", token ? token : "");
	*job = wf_job_id(cfg, &c);
	wf_cluster_free(&c);
	return 0;
}

int wf_cmd_membership(int argc, char **argv, wf_err *err)
{
	const char *config = NULL, *key_dir = NULL;
	long port = 0, expect = 0;
	int insecure = 0;
	wf_cli_list sets = {0}, pos = {0};
	const wf_flag flags[] = {
		{"config", WF_FLAG_STR, &config, "FILE",
		 "the job's training config (strategy.min_workers, elastic_timeout, "
		 "stall_timeout; required)"},
		{"set", WF_FLAG_LIST, &sets, "KEY=VALUE", "override a config key (repeatable)"},
		{"port", WF_FLAG_INT, &port, "P", "listen on port P of every address (required)"},
		{"expect", WF_FLAG_INT, &expect, "N",
		 "workers the first generation waits for (default strategy.min_workers; at "
		 "most strategy.stall_timeout seconds, then MIN will do)"},
		{"key-dir", WF_FLAG_STR, &key_dir, "DIR",
		 "the cluster's keys (`weft keygen`), as the workers' cluster.key_dir"},
		{"insecure", WF_FLAG_BOOL, &insecure, NULL,
		 "no key: anyone who reaches the port may join the ring"},
		{0},
	};
	const wf_command_help help = {
		"weft membership --config FILE --port P [--expect N] [--key-dir DIR | --insecure]",
		"The membership service of elastic allreduce (strategy.name allreduce with\n"
		"strategy.min_workers MIN): the workers (strategy.elastic_service=HOST:P,\n"
		"WEFT_ELASTIC_SERVICE) register with it, and it numbers the generations of their\n"
		"TCP ring: who is in, in which order, whose state the others take. `weft launch\n"
		"--elastic` runs one itself; on Kubernetes run it as a pod of its own with the\n"
		"workers' TF_CONFIG cluster and WEFT_JOB_TOKEN (they tag the job). Serves until\n"
		"SIGINT or SIGTERM."};
	wf_membership *s = NULL;
	int rc = wf_cli_parse(&help, flags, argc, argv, &pos, 0, err);
	if (rc != 0)
		goto cleanup;
	if (!config || port < 1 || port > 65535) {
		rc = wf_errf(err, WF_EINVAL,
			     "membership: --config FILE and --port P (1-65535) are required (see "
			     "--help)");
		goto cleanup;
	}
	wf_config cfg;
	if ((rc = wf_config_load(&cfg, config, sets.items, sets.n, err)) != 0 ||
	    (rc = wf_job_security_flags(&cfg, key_dir, insecure, err)) != 0)
		goto cleanup;
	if (strcmp(cfg.strategy.name, "allreduce") != 0 || cfg.strategy.min_workers < 1) {
		rc = wf_errf(err, WF_EINVAL,
			     "membership: %s: the service is for strategy.name allreduce with "
			     "strategy.min_workers >= 1 (got %s, %ld)",
			     config, cfg.strategy.name, cfg.strategy.min_workers);
		goto cleanup;
	}
	uint64_t job = 0;
	if ((rc = job_tag(&cfg, &job, err)) != 0)
		goto cleanup;
	uint8_t key[WF_RDV_KEY_BYTES];
	wf_ps_keys keys;
	const wf_ps_keys *kp = NULL;
	if ((rc = wf_job_keys(&cfg, &keys, &kp, err)) != 0)
		goto cleanup;
	if (kp)
		wf_rdv_key_derive(key, kp->client_secret);
	else
		wf_warn("--insecure: anyone who reaches port %ld may join the ring", port);
	memset(&keys, 0, sizeof(keys));
	wf_membership_cfg mc = {
		.port = (int)port,
		.job = job,
		.key = kp ? key : NULL,
		.min_workers = (int)cfg.strategy.min_workers,
		.expect = (int)(expect > cfg.strategy.min_workers ? expect
								  : cfg.strategy.min_workers),
		.elastic_timeout = cfg.strategy.elastic_timeout,
		.settle = cfg.strategy.stall_timeout,
	};
	rc = wf_membership_create(&s, &mc, err);
	memset(key, 0, sizeof(key));
	if (rc != 0)
		goto cleanup;
	running = s;
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	rc = wf_membership_run(s, err);
	running = NULL;
cleanup:
	wf_membership_free(s);
	wf_cli_list_free(&sets);
	wf_cli_list_free(&pos);
	return rc;
}
