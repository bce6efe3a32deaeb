/* main.c: weft-serve, the inference server. Parses TF Serving style flags,
 * starts the model repository, the batch threads and the HTTP front end,
 * then waits for SIGTERM/SIGINT: readiness fails first, in-flight requests
 * drain, and the process exits 0. */
#include "common/error.h"
#include "common/log.h"
#include "common/util.h"
#include "serve/batcher.h"
#include "serve/grpc_adapter.h"
#include "serve/grpc_services.h"
#include "serve/http.h"
#include "serve/metrics.h"
#include "serve/repo.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct serve_flags {
	int port;
	const char *bind_address;
	const char *model_name;
	const char *base_path;
	double poll_seconds;
	int batching;
	int max_batch;
	long timeout_us;
	int batch_threads; /* 0: default */
	const char *device;
	int threads; /* 0: cores / batch threads */
	long max_body;
	double request_timeout;
	int idle_timeout;
	double drain_timeout;
	int verbose;
	/* gRPC (issue 12) */
	int tf_grpc_port; /* --port: TF Serving gRPC API; 0: off */
	int grpc_port;	  /* --grpc_port: KServe v2 gRPC API; 0: off */
	long grpc_max_message;
	int grpc_threads;
	int grpc_ports_set; /* bit 1: --port given, bit 2: --grpc_port given */
} serve_flags;

static void usage(FILE *f)
{
	fprintf(f,
		"usage: weft-serve --model_base_path DIR [flags]\n"
		"\n"
		"Serves DIR/<version>/model.h5 (the highest numeric version) over HTTP: the\n"
		"TensorFlow Serving REST API (/v1/models/NAME...), the KServe v2 protocol\n"
		"(/v2/...) and Prometheus /metrics, all on one port. New versions appearing\n"
		"under DIR are loaded and warmed in the background and swapped in without\n"
		"failing a request.\n"
		"\n"
		"Input: numbers in :predict bodies and KServe FP32 tensors are the model's\n"
		"input after preprocessing; JPEG and PNG images ({\"b64\": ...}, KServe BYTES)\n"
		"and KServe UINT8 tensors are raw pixels that get the model's recorded\n"
		"preprocessing (images are also resized; PNG alpha is dropped).\n"
		"\n"
		"flags (--flag=value or --flag value):\n"
		"  --rest_api_port N                 HTTP port (default 8501; 0 = any free port)\n"
		"  --port N                          TF Serving gRPC API: PredictionService and\n"
		"                                    ModelService (default 8500; 0 = off)\n"
		"  --grpc_port, --grpc-port N        KServe v2 gRPC API, GRPCInferenceService\n"
		"                                    (default 8001; 0 = off)\n"
		"  --grpc_max_message_bytes N        largest gRPC request message (default\n"
		"                                    67108864; images are not limited to 4 MB)\n"
		"  --grpc_threads N                  gRPC handler threads per API (default 128)\n"
		"                                    (a default gRPC port found in use is skipped\n"
		"                                    with a warning; a port given is required)\n"
		"  --bind_address A                  IPv4 address to listen on (default 0.0.0.0)\n"
		"  --model_name NAME                 name in URLs (default \"default\")\n"
		"  --model_base_path DIR             holds <version>/model.h5 (required)\n"
		"  --file_system_poll_wait_seconds S poll DIR every S seconds (default 1; 0 = "
		"load\n"
		"                                    once, never poll)\n"
		"  --enable_batching[=true|false]    batch concurrent requests (default false)\n"
		"  --max_batch_size N                samples per forward (default 32)\n"
		"  --batch_timeout_micros U          a partial batch waits U us for more\n"
		"                                    (default 1000)\n"
		"  --num_batch_threads N             forward threads (default 2 with batching,\n"
		"                                    else the number of cores)\n"
		"  --device D                        auto, cpu, cuda or ref (default auto)\n"
		"  --threads N                       compute threads per forward thread\n"
		"                                    (default cores / forward threads)\n"
		"  --max_request_bytes N             larger bodies get 413 (default 67108864)\n"
		"  --request_timeout_seconds S       longest wait for a forward thread before\n"
		"                                    503 (default 30)\n"
		"  --idle_timeout_seconds S          close idle connections after S (default 60)\n"
		"  --drain_timeout_seconds S         on SIGTERM, wait at most S for in-flight\n"
		"                                    requests (default 30)\n"
		"  --verbose                         debug logging\n"
		"  --help                            this text\n"
		"\n"
		"exit status: 0 after SIGTERM/SIGINT and a clean drain; 1 on bad flags or a\n"
		"base path that is not a directory.\n");
}

static int parse_long(const char *flag, const char *v, long lo, long hi, long *out, wf_err *err)
{
	char *end;
	errno = 0;
	long x = strtol(v, &end, 10);
	if (errno || end == v || *end || x < lo || x > hi)
		return wf_errf(err, WF_EINVAL, "flag %s: \"%s\" is not an integer in [%ld, %ld]",
			       flag, v, lo, hi);
	*out = x;
	return 0;
}

static int parse_double(const char *flag, const char *v, double lo, double hi, double *out,
			wf_err *err)
{
	char *end;
	errno = 0;
	double x = strtod(v, &end);
	if (errno || end == v || *end || !(x >= lo && x <= hi))
		return wf_errf(err, WF_EINVAL, "flag %s: \"%s\" is not a number in [%g, %g]", flag,
			       v, lo, hi);
	*out = x;
	return 0;
}

static int parse_bool(const char *flag, const char *v, int *out, wf_err *err)
{
	if (!v || !strcmp(v, "true") || !strcmp(v, "1")) {
		*out = 1;
		return 0;
	}
	if (!strcmp(v, "false") || !strcmp(v, "0")) {
		*out = 0;
		return 0;
	}
	return wf_errf(err, WF_EINVAL, "flag %s: \"%s\" is not true or false", flag, v);
}

/* Returns 1 when --help was asked for, 0 to run, or an error. */
static int parse_flags(int argc, char **argv, serve_flags *f, wf_err *err)
{
	for (int i = 1; i < argc; i++) {
		char name[128];
		const char *a = argv[i], *val = NULL;
		long l = 0;
		int rc = 0;
		if (strncmp(a, "--", 2) != 0)
			return wf_errf(err, WF_EINVAL,
				       "unexpected argument \"%s\" (flags start "
				       "with --)",
				       a);
		const char *eq = strchr(a, '=');
		size_t n = eq ? (size_t)(eq - a) : strlen(a);
		if (n >= sizeof(name))
			return wf_errf(err, WF_EINVAL, "unknown flag %.64s...", a);
		memcpy(name, a, n);
		name[n] = 0;
		if (!strcmp(name, "--help") || !strcmp(name, "-h"))
			return 1;
		int is_bool = !strcmp(name, "--enable_batching") || !strcmp(name, "--verbose");
		if (eq)
			val = eq + 1;
		else if (!is_bool) {
			if (i + 1 >= argc)
				return wf_errf(err, WF_EINVAL, "flag %s needs a value", name);
			val = argv[++i];
		}
		if (!strcmp(name, "--rest_api_port")) {
			rc = parse_long(name, val, 0, 65535, &l, err);
			f->port = (int)l;
		} else if (!strcmp(name, "--port")) { /* gRPC flags (issue 12) */
			rc = parse_long(name, val, 0, 65535, &l, err);
			f->tf_grpc_port = (int)l;
			f->grpc_ports_set |= 1;
		} else if (!strcmp(name, "--grpc_port") || !strcmp(name, "--grpc-port")) {
			rc = parse_long(name, val, 0, 65535, &l, err);
			f->grpc_port = (int)l;
			f->grpc_ports_set |= 2;
		} else if (!strcmp(name, "--grpc_max_message_bytes")) {
			rc = parse_long(name, val, 1024, 1L << 31, &f->grpc_max_message, err);
		} else if (!strcmp(name, "--grpc_threads")) {
			rc = parse_long(name, val, 1, 4096, &l, err);
			f->grpc_threads = (int)l;
		} else if (!strcmp(name, "--bind_address")) {
			f->bind_address = val;
		} else if (!strcmp(name, "--model_name")) {
			if (!*val || strcspn(val, "/: ?#") != strlen(val))
				return wf_errf(
					err, WF_EINVAL,
					"flag --model_name: \"%s\" must be non-empty without "
					"'/', ':', spaces, '?' or '#'",
					val);
			f->model_name = val;
		} else if (!strcmp(name, "--model_base_path")) {
			f->base_path = val;
		} else if (!strcmp(name, "--file_system_poll_wait_seconds")) {
			rc = parse_double(name, val, 0, 86400, &f->poll_seconds, err);
		} else if (!strcmp(name, "--enable_batching")) {
			rc = parse_bool(name, val, &f->batching, err);
		} else if (!strcmp(name, "--verbose")) {
			rc = parse_bool(name, val, &f->verbose, err);
		} else if (!strcmp(name, "--max_batch_size")) {
			rc = parse_long(name, val, 1, 4096, &l, err);
			f->max_batch = (int)l;
		} else if (!strcmp(name, "--batch_timeout_micros")) {
			rc = parse_long(name, val, 0, 10000000, &f->timeout_us, err);
		} else if (!strcmp(name, "--num_batch_threads")) {
			rc = parse_long(name, val, 1, 256, &l, err);
			f->batch_threads = (int)l;
		} else if (!strcmp(name, "--device")) {
			f->device = val;
		} else if (!strcmp(name, "--threads")) {
			rc = parse_long(name, val, 0, 1024, &l, err);
			f->threads = (int)l;
		} else if (!strcmp(name, "--max_request_bytes")) {
			rc = parse_long(name, val, 1024, 1L << 34, &f->max_body, err);
		} else if (!strcmp(name, "--request_timeout_seconds")) {
			rc = parse_double(name, val, 0.001, 86400, &f->request_timeout, err);
		} else if (!strcmp(name, "--idle_timeout_seconds")) {
			rc = parse_long(name, val, 1, 86400, &l, err);
			f->idle_timeout = (int)l;
		} else if (!strcmp(name, "--drain_timeout_seconds")) {
			rc = parse_double(name, val, 0, 86400, &f->drain_timeout, err);
		} else {
			return wf_errf(err, WF_EINVAL, "unknown flag %s (see --help)", name);
		}
		if (rc)
			return rc;
	}
	if (!f->base_path)
		return wf_errf(err, WF_EINVAL, "flag --model_base_path is required (see --help)");
	return 0;
}

int main(int argc, char **argv)
{
	serve_flags f = {
		.port = 8501,
		.bind_address = "0.0.0.0",
		.model_name = "default",
		.poll_seconds = 1,
		.max_batch = 32,
		.timeout_us = 1000,
		.device = "auto",
		.max_body = 64L << 20,
		.request_timeout = 30,
		.idle_timeout = 60,
		.drain_timeout = 30,
		.tf_grpc_port = 8500,
		.grpc_port = 8001,
		.grpc_max_message = 64L << 20,
		.grpc_threads = 128,
	};
	wf_err err = {0};
	wf_serve_metrics *metrics = NULL;
	wf_serve_repo *repo = NULL;
	wf_serve_batcher *batcher = NULL;
	wf_serve_http *http = NULL;
	wf_grpc_adapter *grpc_adapter = NULL;
	wf_grpc_servers *grpc = NULL;
	int rc = parse_flags(argc, argv, &f, &err);
	if (rc == 1) {
		usage(stdout);
		return 0;
	}
	if (rc) {
		fprintf(stderr, "weft-serve: %s\n", err.msg);
		return wf_exit_status(rc);
	}
	wf_log_set_level(f.verbose ? WF_LOG_DEBUG : WF_LOG_INFO);
	long cores = sysconf(_SC_NPROCESSORS_ONLN);
	if (cores < 1)
		cores = 1;
	if (!f.batch_threads)
		f.batch_threads = f.batching ? 2 : (int)WF_MIN(cores, 16);
	if (!f.threads)
		f.threads = (int)WF_MAX(1, cores / f.batch_threads);

	/* Block the stop signals before any thread starts, so only sigwait sees them. */
	sigset_t stop_set;
	sigemptyset(&stop_set);
	sigaddset(&stop_set, SIGTERM);
	sigaddset(&stop_set, SIGINT);
	pthread_sigmask(SIG_BLOCK, &stop_set, NULL);
	signal(SIGPIPE, SIG_IGN);

	metrics = wf_serve_metrics_create();
	if (!metrics) {
		rc = wf_errf(&err, WF_ENOMEM, "out of memory");
		goto out;
	}
	wf_serve_repo_opts ro = {
		.name = f.model_name,
		.base_path = f.base_path,
		.device = f.device,
		.threads = f.threads,
		.nslots = f.batch_threads,
		.max_batch = f.max_batch,
		.poll_seconds = f.poll_seconds,
	};
	wf_serve_batcher_opts bo = {
		.threads = f.batch_threads,
		.max_batch = f.max_batch,
		.timeout_us = f.batching ? f.timeout_us : 0,
		.batching = f.batching,
	};
	wf_serve_http_opts ho = {
		.bind_address = f.bind_address,
		.port = f.port,
		.model_name = f.model_name,
		.max_body = (size_t)f.max_body,
		.request_timeout = f.request_timeout,
		.idle_timeout = f.idle_timeout,
	};
	rc = wf_serve_batcher_create(&batcher, &bo, metrics, &err);
	if (!rc)
		rc = wf_serve_repo_create(&repo, &ro, &err);
	if (!rc)
		rc = wf_serve_http_start(&http, &ho, repo, batcher, metrics, &err);
	if (!rc && (f.tf_grpc_port || f.grpc_port)) {
		wf_grpc_adapter_opts ga = {
			.repo = repo,
			.batcher = batcher,
			.metrics = metrics,
			.model_name = f.model_name,
			.request_timeout = f.request_timeout,
			.max_batch = f.max_batch,
			.batch_timeout_us = bo.timeout_us,
			.batching = f.batching,
			.instances = f.batch_threads,
		};
		wf_grpc_servers_opts gs = {
			.bind_address = f.bind_address,
			.tfs_port = f.tf_grpc_port,
			.kserve_port = f.grpc_port,
			.max_message = (size_t)f.grpc_max_message,
			.workers = f.grpc_threads,
			.max_queue = 4 * f.grpc_threads,
			.tfs_default = !(f.grpc_ports_set & 1),
			.kserve_default = !(f.grpc_ports_set & 2),
		};
		rc = wf_grpc_adapter_create(&grpc_adapter, &ga, &err);
		if (!rc)
			rc = wf_grpc_servers_start(&grpc, &gs, grpc_adapter, &err);
		if (!rc)
			wf_info("weft-serve: gRPC: TF Serving API on port %d, KServe v2 on port %d "
				"(0: off)",
				wf_grpc_servers_tfs_port(grpc), wf_grpc_servers_kserve_port(grpc));
	}
	if (rc)
		goto out;
	wf_info("weft-serve: model %s from %s on http://%s:%d (device %s, batching %s, "
		"max_batch_size %d, %d forward threads x %d compute threads)",
		f.model_name, f.base_path, f.bind_address, wf_serve_http_port(http), f.device,
		f.batching ? "on" : "off", f.max_batch, f.batch_threads, f.threads);

	int sig = 0;
	sigwait(&stop_set, &sig);
	wf_info("weft-serve: %s: readiness off, draining %d in-flight requests",
		sig == SIGTERM ? "SIGTERM" : "SIGINT", wf_serve_http_inflight(http));
	wf_serve_http_drain(http);
	if (grpc_adapter)
		wf_grpc_adapter_drain(grpc_adapter);
	double deadline = wf_now() + f.drain_timeout;
	while ((wf_serve_http_inflight(http) > 0 || wf_grpc_servers_inflight(grpc) > 0) &&
	       wf_now() < deadline) {
		struct timespec ts = {0, 10 * 1000 * 1000};
		nanosleep(&ts, NULL);
	}
	if (wf_serve_http_inflight(http) > 0)
		wf_warn("weft-serve: %d requests still in flight after %.0fs; stopping anyway",
			wf_serve_http_inflight(http), f.drain_timeout);
	else
		wf_info("weft-serve: drained; exiting");
out:
	wf_grpc_servers_stop(grpc);
	wf_grpc_adapter_free(grpc_adapter);
	wf_serve_http_stop(http);
	wf_serve_batcher_free(batcher);
	wf_serve_repo_free(repo);
	wf_serve_metrics_free(metrics);
	if (rc) {
		fprintf(stderr, "weft-serve: %s\n", err.msg);
		return wf_exit_status(rc);
	}
	return 0;
}
