/* main.c: weft-serve, the inference server. Resolves its settings
 * (serve/options.h), starts the model repository, the batch threads, the
 * HTTP and gRPC front ends,
 * then waits for SIGTERM/SIGINT: readiness fails first, in-flight requests
 * drain, and the process exits 0. */
#include "common/cancel.h"
#include "common/cpus.h"
#include "common/error.h"
#include "common/log.h"
#include "common/util.h"
#include "serve/options.h"
#include "serve/settings.h"
#include "serve/batcher.h"
#include "serve/grpc_adapter.h"
#include "serve/grpc_services.h"
#include "serve/http.h"
#include "serve/json_budget.h"
#include "serve/metrics.h"
#include "serve/repo.h"

#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* --log-file: the log (stderr) is appended to path from now on. */
static int open_log_file(const char *path, wf_err *err)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
	if (fd < 0)
		return wf_errf(err, WF_EINVAL, "flag --log-file: cannot open %s: %s", path,
			       strerror(errno));
	int e = dup2(fd, STDERR_FILENO) < 0 ? errno : 0;
	close(fd);
	return e ? wf_errf(err, WF_EINVAL, "flag --log-file: %s: %s", path, strerror(e)) : 0;
}

/* Unless OMP_WAIT_POLICY or GOMP_SPINCOUNT already say, set OpenMP's wait
 * for this machine (a short spin, or passive when a CPU is busy) and the busy
 * count, and execute weft-serve again so the OpenMP runtime sees them. */
static void openmp_wait(char **argv)
{
	static char env[2][WF_CPUS_ENV_LEN]; /* putenv keeps the strings */
	if (wf_cpus_openmp_wait_env(getenv("OMP_WAIT_POLICY"), getenv("GOMP_SPINCOUNT"), env) &&
	    putenv(env[0]) == 0 && putenv(env[1]) == 0)
		wf_cpus_reexec(argv);
}

/* Block the stop signals before any thread starts, so only sigwait sees
 * them, and shape malloc for request bodies. */
static void process_setup(sigset_t *stop_set)
{
	sigemptyset(stop_set);
	sigaddset(stop_set, SIGTERM);
	sigaddset(stop_set, SIGINT);
	pthread_sigmask(SIG_BLOCK, stop_set, NULL);
	signal(SIGPIPE, SIG_IGN);
	/* Two malloc arenas: memory freed after a large request goes back to the
	 * system (malloc_trim) instead of staying in one arena per thread.
	 * Bodies below WF_SERVE_BODY_REUSE_BYTES come from the arenas, which
	 * keep up to 4 times that free each: the next request reuses those
	 * pages instead of faulting in and clearing fresh ones (1.9% of the
	 * server's CPU for 600 KB images); larger ones are mapped and unmapped. */
	mallopt(M_ARENA_MAX, 2);
	mallopt(M_MMAP_THRESHOLD, (int)WF_SERVE_BODY_REUSE_BYTES);
	mallopt(M_TRIM_THRESHOLD, 4 * (int)WF_SERVE_BODY_REUSE_BYTES);
}

static wf_serve_repo_opts repo_opts(const wf_serve_options *f)
{
	return (wf_serve_repo_opts){
		.kind = f->config_file	? WF_SERVE_CONFIG_FILE
			: f->repository ? WF_SERVE_REPOSITORY
					: WF_SERVE_SINGLE,
		.config_file = f->config_file,
		.config_poll_seconds = f->config_poll_seconds,
		.repository = f->repository,
		.control = (wf_serve_control)f->control,
		.load_models = f->load_models.items,
		.nload_models = f->load_models.n,
		.load_threads = (int)f->load_threads,
		.load_retries = (int)f->load_retries,
		.load_retry_interval_us = f->load_retry_us,
		.batch_delay_us = f->timeout_us,
		.batching = f->batching,
		.name = f->model_name,
		.base_path = f->base_path,
		.device = f->device,
		.precision = f->precision,
		.threads = f->threads,
		.backend = f->backend,
		.nslots = f->batch_threads,
		.max_batch = f->max_batch,
		.poll_seconds = f->poll_seconds,
		.max_image_pixels = f->max_image_pixels,
	};
}

static wf_serve_batcher_opts batcher_opts(const wf_serve_options *f)
{
	return (wf_serve_batcher_opts){
		.threads = f->batch_threads,
		.max_batch = f->max_batch,
		.timeout_us = f->batching ? f->timeout_us : 0,
		.batching = f->batching,
		.max_queue = f->max_queue,
	};
}

static wf_serve_http_opts http_opts(const wf_serve_options *f, const wf_serve_secrets *secrets)
{
	wf_serve_http_opts ho = {
		.bind_address = f->http_address,
		.port = f->port,
		.model_name = f->model_name,
		.max_body = (size_t)f->max_body,
		.request_timeout = f->request_timeout,
		.idle_timeout = f->idle_timeout,
		/* Requests waiting to fill a batch each hold an HTTP thread. */
		.threads = f->http_threads,
		.max_connections = f->max_connections,
		.max_per_client = f->max_per_client,
		.max_queue = f->max_queue,
		.header_timeout = f->header_timeout,
		.body_timeout = f->body_timeout,
		.body_budget = (size_t)f->body_budget,
		.retry_after = f->retry_after,
		.secrets = secrets,
		.no_metrics = !f->allow_metrics,
		.cors = f->cors,
	};
	/* Handler threads start as requests need them, up to ho.threads (and
	 * gs.workers per gRPC API); an idle server holds a few per API */
	ho.start_threads = (int)WF_MIN(f->cores, 4);
	return ho;
}

/* The servers weft-serve runs, started by start_servers and stopped, NULL
 * or not, by stop_servers. */
typedef struct servers {
	wf_serve_metrics *metrics;
	wf_serve_repo *repo;
	wf_serve_batcher *batcher;
	wf_serve_http *http, *metrics_http;
	wf_grpc_adapter *grpc_adapter;
	wf_serve_shm *shm; /* system shared memory regions: HTTP and gRPC share them */
	wf_grpc_servers *grpc;
	wf_serve_secrets secrets;
} servers;

/* Triton's --metrics-port: /metrics on its own port. */
static int start_metrics_port(servers *sv, const wf_serve_options *f, const wf_serve_http_opts *ho,
			      wf_err *err)
{
	wf_serve_http_opts mo = *ho;
	mo.bind_address = f->metrics_address;
	mo.port = (int)f->metrics_port;
	mo.threads = 2;
	mo.start_threads = 1;
	mo.metrics_only = 1;
	int rc = wf_serve_http_start(&sv->metrics_http, &mo, sv->repo, sv->batcher, sv->metrics,
				     err);
	if (!rc)
		wf_info("weft-serve: metrics on http://%s:%d/metrics", f->metrics_address,
			wf_serve_http_port(sv->metrics_http));
	return rc;
}

static int start_grpc(servers *sv, const wf_serve_options *f, wf_err *err)
{
	wf_grpc_adapter_opts ga = {
		.repo = sv->repo,
		.batcher = sv->batcher,
		.metrics = sv->metrics,
		.request_timeout = f->request_timeout,
		.max_batch = f->max_batch,
		.batch_timeout_us = f->batching ? f->timeout_us : 0,
		.batching = f->batching,
		.instances = f->batch_threads,
		.shm = sv->shm,
	};
	wf_grpc_servers_opts gs = {
		.bind_address = f->grpc_address,
		.tfs_port = f->tf_grpc_port,
		.kserve_port = f->grpc_port,
		.max_message = (size_t)f->grpc_max_message,
		.workers = f->grpc_threads,
		.start_workers = (int)WF_MIN(f->cores, 4),
		.max_queue = 4 * f->grpc_threads,
		.tfs_default = f->tf_grpc_default,
		.kserve_default = f->grpc_default,
	};
	/* the same certificate and token as HTTP (TF Serving's --ssl_config_file
	 * is for its gRPC port) */
	gs.token = sv->secrets.token;
	gs.tls_cert = sv->secrets.tls_cert;
	gs.tls_key = sv->secrets.tls_key;
	int rc = wf_grpc_adapter_create(&sv->grpc_adapter, &ga, err);
	if (!rc)
		rc = wf_grpc_servers_start(&sv->grpc, &gs, sv->grpc_adapter, err);
	if (!rc)
		wf_info("weft-serve: gRPC: TF Serving API on port %d, KServe v2 on port %d "
			"(0: off)",
			wf_grpc_servers_tfs_port(sv->grpc), wf_grpc_servers_kserve_port(sv->grpc));
	return rc;
}

/* Everything weft-serve serves with, in the order requests need it: the
 * models before the ports that take requests for them. */
static int start_servers(servers *sv, const wf_serve_options *f, wf_err *err)
{
	if (!(sv->metrics = wf_serve_metrics_create()))
		return wf_errf(err, WF_ENOMEM, "out of memory");
	wf_serve_repo_opts ro = repo_opts(f);
	wf_serve_batcher_opts bo = batcher_opts(f);
	wf_serve_http_opts ho = http_opts(f, &sv->secrets);
	int rc = wf_serve_secrets_load(&sv->secrets, f->ssl_cert, f->ssl_key, f->ssl_config,
				       f->token_file, err);
	if (!rc)
		rc = wf_serve_batcher_create(&sv->batcher, &bo, sv->metrics, err);
	if (!rc)
		rc = wf_serve_repo_create(&sv->repo, &ro, err);
	if (!rc && f->shm_policy != WF_SHM_NONE && !(sv->shm = wf_serve_shm_create(f->shm_policy)))
		rc = wf_errf(err, WF_ENOMEM, "out of memory");
	ho.shm = sv->shm;
	if (!rc && f->allow_http)
		rc = wf_serve_http_start(&sv->http, &ho, sv->repo, sv->batcher, sv->metrics, err);
	if (!rc && f->metrics_port)
		rc = start_metrics_port(sv, f, &ho, err);
	if (!rc && (f->tf_grpc_port || f->grpc_port))
		rc = start_grpc(sv, f, err);
	return rc;
}

/* After a stop signal: readiness off, no new connections, every request
 * received answered, for at most drain_timeout seconds. */
static void drain(servers *sv, int sig, double drain_timeout)
{
	wf_cancel_request(); /* a model load in progress stops (common/cancel.h) */
	wf_info("weft-serve: %s: readiness off, no new connections, answering %d received "
		"requests (%d gRPC calls)",
		sig == SIGTERM ? "SIGTERM" : "SIGINT", wf_serve_http_inflight(sv->http),
		wf_grpc_servers_inflight(sv->grpc));
	wf_serve_http_drain(sv->http);
	if (sv->metrics_http)
		wf_serve_http_drain(sv->metrics_http);
	if (sv->grpc_adapter)
		wf_grpc_adapter_drain(sv->grpc_adapter);
	wf_grpc_servers_drain(sv->grpc);
	wf_serve_batcher_flush(sv->batcher);
	double deadline = wf_now() + drain_timeout;
	while ((wf_serve_http_inflight(sv->http) > 0 || wf_grpc_servers_inflight(sv->grpc) > 0) &&
	       wf_now() < deadline) {
		struct timespec ts = {0, 10 * 1000 * 1000};
		nanosleep(&ts, NULL);
	}
	if (wf_serve_http_inflight(sv->http) > 0 || wf_grpc_servers_inflight(sv->grpc) > 0)
		wf_warn("weft-serve: %d requests and %d gRPC calls still in flight after %.0fs; "
			"stopping anyway",
			wf_serve_http_inflight(sv->http), wf_grpc_servers_inflight(sv->grpc),
			drain_timeout);
	else
		wf_info("weft-serve: drained; exiting");
}

static void stop_servers(servers *sv)
{
	wf_grpc_servers_stop(sv->grpc);
	wf_grpc_adapter_free(sv->grpc_adapter);
	wf_serve_secrets_free(&sv->secrets);
	wf_serve_http_stop(sv->http);
	wf_serve_http_stop(sv->metrics_http);
	wf_serve_shm_free(sv->shm);
	wf_serve_batcher_free(sv->batcher);
	wf_serve_repo_free(sv->repo);
	wf_serve_metrics_free(sv->metrics);
}

int main(int argc, char **argv)
{
	wf_json_budget_install(); /* before any thread parses JSON */
	wf_serve_options f;
	wf_err err = {0};
	openmp_wait(argv); /* OpenMP threads spin briefly or sleep; may re-exec once */
	int rc = wf_serve_options_resolve(argc, argv, &f, &err); /* defaults < env < flags */
	if (rc == 1) {
		wf_serve_options_free(&f);
		return 0;
	}
	if (!rc && f.log_file)
		rc = open_log_file(f.log_file, &err);
	if (rc) {
		fprintf(stderr, "%s%s\n",
			strncmp(err.msg, "weft-serve: ", 12) ? "weft-serve: " : "", err.msg);
		wf_serve_options_free(&f);
		return wf_exit_status(rc);
	}
	wf_serve_log log = {.info = f.log_info,
			    .warning = f.log_warning,
			    .error = f.log_error,
			    .verbose_level = f.verbose ? (unsigned)WF_MAX(f.log_verbose, 1) : 0};
	snprintf(log.file, sizeof(log.file), "%s", f.log_file ? f.log_file : "");
	wf_serve_log_init(&log); /* the level; /v2/logging and LogSettings change it */

	sigset_t stop_set;
	process_setup(&stop_set);
	servers sv = {0};
	if ((rc = start_servers(&sv, &f, &err)) == 0) {
		wf_info("weft-serve: model %s from %s on http://%s:%d (0: off) (device %s, "
			"batching %s, max_batch_size %ld, %ld forward threads x %ld compute "
			"threads)",
			f.base_path ? f.model_name : "(many)",
			f.base_path	? f.base_path
			: f.config_file ? f.config_file
					: f.repository,
			f.http_address, wf_serve_http_port(sv.http), f.device,
			f.batching ? "on" : "off", f.max_batch, f.batch_threads, f.threads);
		int sig = 0;
		sigwait(&stop_set, &sig);
		drain(&sv, sig, f.drain_timeout);
	}
	stop_servers(&sv);
	wf_serve_options_free(&f);
	if (rc) {
		fprintf(stderr, "weft-serve: %s\n", err.msg);
		return wf_exit_status(rc);
	}
	return 0;
}
