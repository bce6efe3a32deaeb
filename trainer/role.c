/* role.c: role dispatch from the cluster spec (the one place that starts a
 * role: wf_train for a chief or worker, the server loop for a ps, the
 * checkpoint watcher for an evaluator) and `weft ps`. */
#include "trainer/role.h"

#include "common/events.h"
#include "common/log.h"
#include "common/util.h"
#include "model/model.h"
#include "ps/auth.h"
#include "ps/server.h"
#include "worker/netio.h"
#include "trainer/checkpoint.h"
#include "trainer/cli.h"
#include "trainer/evaluate.h"
#include "trainer/job.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Log lines name the role ("worker:1"), except under `weft launch`, which
 * prefixes every line of its children itself. */
static void set_log_prefix(const char *role, int index)
{
	char prefix[64];
	if (getenv("WEFT_LAUNCH"))
		return;
	snprintf(prefix, sizeof(prefix), "%s:%d", role, index);
	wf_log_set_prefix(prefix);
}

/* Events (log.events) name the task ("worker:1", "ps:0"). */
static int open_events(const wf_config *cfg, const char *role, int index, wf_err *err)
{
	char who[64];
	snprintf(who, sizeof(who), "%s:%d", role, index);
	int rc = wf_events_open(cfg->log.events, who, err);
	if (rc == 0)
		wf_event("start", json_pack("{s:s, s:i}", "role", role, "index", index));
	return rc;
}

/* ---- the ps role ----------------------------------------------------------- */

static volatile sig_atomic_t ps_stop;

static void on_stop_signal(int sig)
{
	(void)sig;
	ps_stop = 1;
}

static int run_ps(const wf_config *cfg, const wf_cluster *c, wf_err *err)
{
	wf_model *m = NULL;
	char host[256], bind[300];
	int port = 0, rc;
	const char *addr = c->jobs[WF_ROLE_PS].addr[c->index];
	if ((rc = wf_config_check_workers(cfg, wf_job_num_workers(c), err)) != 0)
		return rc;
	if (wf_net_split_hostport(addr, host, sizeof(host), &port) != 0)
		return wf_errf(err, WF_EINVAL, "TF_CONFIG: cluster.ps[%d] \"%s\" is not host:port",
			       c->index, addr);
	/* bind the address TF_CONFIG gives this server, not every interface
	 * (0.0.0.0 or * in TF_CONFIG ask for every interface explicitly) */
	if (!strcmp(host, "0.0.0.0") || !strcmp(host, "*")) {
		snprintf(bind, sizeof(bind), "tcp://*:%d", port);
		wf_warn("ps %d: TF_CONFIG gives %s: listening on every interface", c->index, addr);
	} else if ((rc = wf_cluster_resolve(addr, 8, 0.25, bind, sizeof(bind), err)) != 0) {
		return wf_err_wrap(err, "TF_CONFIG: cluster.ps[%d] (the address to bind)",
				   c->index),
		       rc;
	}
	wf_ps_keys keys;
	const wf_ps_keys *kp = NULL;
	if ((rc = wf_job_keys(cfg, &keys, &kp, err)) != 0)
		return rc;
	if ((rc = wf_job_model(cfg, &m, err)) != 0)
		return rc;
	wf_ps_server_cfg sc;
	wf_ps_server_cfg_default(&sc);
	sc.bind = bind;
	sc.index = c->index;
	sc.nservers = c->jobs[WF_ROLE_PS].n;
	sc.job_id = wf_job_id(cfg, c);
	sc.nworkers = wf_job_num_workers(c);
	sc.mode = cfg->ps.mode;
	sc.staleness = (int)cfg->strategy.staleness;
	sc.backup_workers = (int)cfg->strategy.backup_workers;
	sc.min_workers = (int)cfg->strategy.min_workers;
	sc.elastic_timeout = cfg->strategy.elastic_timeout;
	sc.elastic_lr_linear = strcmp(cfg->strategy.elastic_lr, "linear") == 0;
	sc.elastic_batch_global = strcmp(cfg->strategy.elastic_batch, "global") == 0;
	wf_config_optim(cfg, &sc.optim);
	sc.views = m->views;
	sc.nviews = m->nviews;
	sc.nparams = m->nparams;
	sc.nstate = m->nstate;
	sc.chunk_bytes = (size_t)cfg->ps.chunk_bytes;
	sc.batch = (int)(cfg->train.batch_size * cfg->train.accumulate);
	sc.heartbeat_timeout = cfg->ps.heartbeat_timeout;
	sc.stall_timeout = cfg->ps.stall_timeout;
	sc.stats_every = cfg->ps.stats_every;
	sc.ckpt_dir = cfg->checkpoint.dir;
	sc.keys = kp;
	sc.threads = 1;
	sc.replicas = (int)cfg->ps.replicas;
	sc.compression = cfg->ps.comp;
	sc.priority = cfg->ps.priority_kb > 0;
	sc.peer_timeout = cfg->ps.server_timeout;
	char **peers = NULL;
	if (sc.replicas > 1) {
		if ((rc = wf_job_ps_endpoints(c, &peers, err)) != 0) {
			wf_model_free(m);
			return rc;
		}
		sc.peers = (const char *const *)peers;
	}
	sc.stop = &ps_stop;

	struct sigaction sa, old_int, old_term;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_stop_signal;
	sigemptyset(&sa.sa_mask);
	ps_stop = 0;
	sigaction(SIGINT, &sa, &old_int);
	sigaction(SIGTERM, &sa, &old_term);
	wf_info("ps %d of %d: %s (%zu parameters, %zu state) for %d workers, job %016llx", c->index,
		sc.nservers, cfg->model.name, m->nparams, m->nstate, sc.nworkers,
		(unsigned long long)sc.job_id);
	rc = wf_ps_server_run(&sc, err);
	sigaction(SIGINT, &old_int, NULL);
	sigaction(SIGTERM, &old_term, NULL);
	if (rc == 0) {
		wf_info("ps %d: shut down by the chief", c->index);
		wf_event("shut_down", NULL);
	}
	memset(&keys, 0, sizeof(keys));
	wf_job_endpoints_free(peers, sc.nservers);
	wf_model_free(m);
	return rc;
}

/* ---- the evaluator role ---------------------------------------------------- */

/* Evaluate checkpoint step-N/model.h5 on data.eval; one line to stdout and to
 * log.dir/eval.jsonl. */
static int eval_checkpoint(const wf_config *cfg, const char *dir, long step, wf_err *err)
{
	char path[4400];
	wf_eval_setup es;
	wf_eval_result r;
	wf_backend_opts bo;
	wf_config_backend_opts(cfg, &bo);
	snprintf(path, sizeof(path), "%s/model.h5", dir);
	int rc = wf_eval_setup_open(&es, path, cfg->data.eval, cfg->train.device, &bo, NULL,
				    (int)cfg->train.batch_size, err);
	if (!rc)
		rc = wf_evaluate(es.ex, es.ds, &es.meta, (int)cfg->train.batch_size, &r, err);
	wf_eval_setup_free(&es);
	if (rc)
		return rc;
	printf("evaluator: step %ld: eval_loss %.4f eval_accuracy %.4f (%ld samples)\n", step,
	       r.loss, r.accuracy, r.count);
	fflush(stdout);
	wf_event("eval", json_pack("{s:I, s:f, s:f}", "step", (json_int_t)step, "loss", r.loss,
				   "accuracy", r.accuracy));
	snprintf(path, sizeof(path), "%s/eval.jsonl", cfg->log.dir);
	if (wf_mkdirs(cfg->log.dir) == 0) {
		FILE *f = fopen(path, "a");
		if (f) {
			fprintf(f, "{\"step\":%ld,\"eval_loss\":%.9g,\"eval_accuracy\":%.9g}\n",
				step, r.loss, r.accuracy);
			fclose(f);
		}
	}
	return 0;
}

/* Evaluate each new complete checkpoint until one of train.steps appears. */
static int run_evaluator(const wf_config *cfg, wf_err *err)
{
	long last = -1;
	if (!cfg->data.eval[0])
		return wf_errf(err, WF_EINVAL, "data.eval: the evaluator needs an eval dataset");
	ps_stop = 0;
	struct sigaction sa, old_int, old_term;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_stop_signal;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, &old_int);
	sigaction(SIGTERM, &sa, &old_term);
	wf_info("evaluator: watching %s for checkpoints", cfg->checkpoint.dir);
	int rc = 0;
	while (!ps_stop && last < cfg->train.steps) {
		char dir[4200];
		long step;
		int found = wf_ckpt_latest(cfg->checkpoint.dir, &step, dir, sizeof(dir), err);
		if (found < 0) {
			rc = found;
			break;
		}
		if (found && step > last) {
			if ((rc = eval_checkpoint(cfg, dir, step, err)) != 0)
				break;
			last = step;
			continue;
		}
		struct timespec ts = {1, 0};
		nanosleep(&ts, NULL);
	}
	sigaction(SIGINT, &old_int, NULL);
	sigaction(SIGTERM, &old_term, NULL);
	if (rc == 0 && ps_stop)
		rc = wf_errf(err, WF_ESTOPPED, "evaluator: stopped");
	return rc;
}

/* ---- dispatch ---------------------------------------------------------------- */

int wf_role_run(const wf_config *cfg, const wf_train_opts *opts, wf_train_result *res, int *trained,
		wf_err *err)
{
	wf_cluster c;
	*trained = 0;
	int rc = wf_cluster_from_env(&c, err);
	if (rc != 0)
		return rc;
	if ((rc = wf_cluster_validate(&c, cfg->strategy.name, err)) != 0)
		goto cleanup;
	if (c.source == WF_CLUSTER_SRC_TF_CONFIG && !strcmp(cfg->strategy.name, "local") &&
	    (c.jobs[WF_ROLE_PS].n > 0 || wf_cluster_num_trainers(&c) > 1)) {
		rc = wf_errf(err, WF_EINVAL,
			     "strategy.name: \"local\" trains one process, but TF_CONFIG describes "
			     "a cluster of %d trainers and %d ps: set strategy.name to "
			     "parameter_server (or allreduce)",
			     wf_cluster_num_trainers(&c), c.jobs[WF_ROLE_PS].n);
		goto cleanup;
	}
	if (c.source == WF_CLUSTER_SRC_TF_CONFIG && !strcmp(cfg->strategy.name, "parameter_server"))
		set_log_prefix(wf_role_name(c.role), c.index);
	if ((rc = open_events(cfg, wf_role_name(c.role), c.index, err)) != 0)
		goto cleanup;
	switch (c.role) {
	case WF_ROLE_PS: rc = run_ps(cfg, &c, err); break;
	case WF_ROLE_EVALUATOR: rc = run_evaluator(cfg, err); break;
	default: {
		wf_train_opts o = *opts;
		if (c.source == WF_CLUSTER_SRC_TF_CONFIG &&
		    !strcmp(cfg->strategy.name, "parameter_server") && c.is_chief && !o.resume &&
		    !o.fresh) {
			/* a restarted chief (a Kubernetes pod restart) must not throw the
			 * job back to step 0 */
			long step;
			char dir[4200];
			int found =
				wf_ckpt_latest(cfg->checkpoint.dir, &step, dir, sizeof(dir), err);
			if (found < 0) {
				rc = found;
				break;
			}
			if (found) {
				wf_info("%s holds a complete checkpoint (step %ld): the chief "
					"resumes "
					"from it (pass --fresh to start over)",
					cfg->checkpoint.dir, step);
				o.resume = 1;
			}
		}
		*trained = 1;
		rc = wf_train(cfg, &o, res, err);
		break;
	}
	}
cleanup:
	wf_cluster_free(&c);
	return rc;
}

/* ---- weft ps ----------------------------------------------------------------- */

int wf_cmd_ps(int argc, char **argv, wf_err *err)
{
	const char *config = NULL, *key_dir = NULL;
	int insecure = 0;
	wf_cli_list sets = {0}, pos = {0};
	long stats = -1, hb = -1, stall = -1;
	const wf_flag flags[] = {
		{"config", WF_FLAG_STR, &config, "FILE",
		 "the job's training config (required: model, data.train for the model's shape "
		 "unless model.input_shape and model.classes are set, "
		 "optimizer, strategy.mode, checkpoint.dir)"},
		{"set", WF_FLAG_LIST, &sets, "KEY=VALUE", "override a config key (repeatable)"},
		{"stats-every", WF_FLAG_INT, &stats, "S",
		 "seconds between stats lines (ps.stats_every: 30, or WEFT_PS_STATS_EVERY; 0: "
		 "none)"},
		{"heartbeat-timeout", WF_FLAG_INT, &hb, "S",
		 "declare a silent worker dead after S seconds (ps.heartbeat_timeout: 5, or "
		 "WEFT_PS_HEARTBEAT_TIMEOUT)"},
		{"stall-timeout", WF_FLAG_INT, &stall, "S",
		 "name a live worker that owes pushes after S seconds (ps.stall_timeout: 60, or "
		 "WEFT_PS_STALL_TIMEOUT)"},
		{"key-dir", WF_FLAG_STR, &key_dir, "DIR",
		 "the cluster's CURVE key files (`weft keygen`); same as --set "
		 "cluster.key_dir=DIR (environment: WEFT_KEY_DIR)"},
		{"insecure", WF_FLAG_BOOL, &insecure, NULL,
		 "plain TCP without keys: anyone who reaches the port can read and overwrite the "
		 "model"},
		{0},
	};
	const wf_command_help help = {
		"TF_CONFIG='{\"cluster\": {...}, \"task\": {\"type\": \"ps\", \"index\": I}}' weft "
		"ps "
		"--config FILE [options]",
		"Run parameter server I of the cluster in TF_CONFIG (the same as `weft train` "
		"with\n"
		"task.type ps). It binds the port of its cluster.ps address, keeps its share of\n"
		"the parameter chunks and their optimizer slots, aggregates the workers' pushes\n"
		"(strategy.mode sync, async or ssp:K), writes checkpoint shards when the chief\n"
		"asks, restores the newest complete checkpoint of checkpoint.dir when it starts,\n"
		"prints stats periodically, and exits 0 when the chief shuts it down at the end.\n"
		"SIGINT/SIGTERM stop it (exit 130)."};
	wf_config cfg;
	wf_cluster c = {0};
	int rc = wf_cli_parse(&help, flags, argc, argv, &pos, 0, err);
	if (rc != 0)
		goto cleanup;
	if (!config) {
		rc = wf_errf(err, WF_EINVAL, "ps: --config FILE is required (see --help)");
		goto cleanup;
	}
	if ((rc = wf_config_load(&cfg, config, sets.items, sets.n, err)) != 0)
		goto cleanup;
	if ((rc = wf_job_security_flags(&cfg, key_dir, insecure, err)) != 0)
		goto cleanup;
	if (strcmp(cfg.strategy.name, "parameter_server") != 0 &&
	    (rc = wf_config_set(&cfg, "strategy.name=parameter_server", err)) != 0)
		goto cleanup;
	/* the flags over --set, the environment and the file */
	if (stats >= 0)
		cfg.ps.stats_every = (double)stats;
	if (hb >= 0)
		cfg.ps.heartbeat_timeout = (double)hb;
	if (stall >= 0)
		cfg.ps.stall_timeout = (double)stall;
	wf_config_apply_process(&cfg);
	if ((rc = wf_config_validate(&cfg, err)) != 0) {
		wf_err_wrap(err, "%s", config);
		goto cleanup;
	}
	if ((rc = wf_job_ps_cluster(&c, &cfg, err)) != 0)
		goto cleanup;
	if (c.role != WF_ROLE_PS) {
		rc = wf_errf(err, WF_EINVAL,
			     "TF_CONFIG: task.type is %s: `weft ps` runs task.type ps (use `weft "
			     "train` for the other roles)",
			     wf_role_name(c.role));
		goto cleanup;
	}
	set_log_prefix("ps", c.index);
	if ((rc = open_events(&cfg, "ps", c.index, err)) == 0)
		rc = run_ps(&cfg, &c, err);
cleanup:
	wf_cluster_free(&c);
	wf_cli_list_free(&sets);
	wf_cli_list_free(&pos);
	return rc;
}
