/* main.c: weft-serve, the inference server. Parses TF Serving style flags,
 * starts the model repository, the batch threads and the HTTP front end,
 * then waits for SIGTERM/SIGINT: readiness fails first, in-flight requests
 * drain, and the process exits 0. */
#include "common/cpus.h"
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
#include <malloc.h>
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
	const char *precision; /* fp32, bf16, auto */
	int threads;	       /* 0: cores / batch threads */
	long max_body;
	double request_timeout;
	int idle_timeout;
	double drain_timeout;
	int verbose;
	long max_image_pixels; /* 0: the image module's default */
	/* hardening: connections, memory, overload, TLS and token */
	int http_threads; /* 0: derived from batching */
	int max_connections;
	int max_per_client;
	double header_timeout;
	double body_timeout;
	long body_budget; /* 0: 4 x max_request_bytes */
	int max_queue;
	int retry_after;
	const char *ssl_cert, *ssl_key, *ssl_config, *token_file;
	/* many models and the TF Serving / Triton command lines (issue 12) */
	const char *config_file;     /* --model_config_file */
	double config_poll_seconds;  /* --model_config_file_poll_wait_seconds */
	const char *repository;	     /* --model_repository, --model-repository */
	int control;		     /* --model_control_mode none|poll|explicit */
	const char *load_models[64]; /* --load-model (repeatable) */
	int nload_models;
	int tf_grpc_port; /* --port: TF Serving's gRPC port (8500) */
	int grpc_port;	  /* --grpc_port, --grpc-port: KServe v2 gRPC (8001) */
	int port_set;	  /* an HTTP port flag was given (else Triton's 8000 with a repository) */
	long grpc_max_message;
	int grpc_threads;
	int grpc_ports_set; /* bit 1: --port given, bit 2: --grpc_port given */
} serve_flags;

static void usage(FILE *f)
{
	fprintf(f,
		"usage: weft-serve (--model_base_path DIR | --model_config_file FILE |\n"
		"                   --model_repository DIR) [flags]\n"
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
		"  --rest_api_port, --http-port N    HTTP port (default 8501, with\n"
		"                                    --model_repository 8000 as in Triton; 0 =\n"
		"                                    any free port)\n"
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
		"  --model_base_path DIR             holds <version>/model.h5 (one model)\n"
		"  --model_config_file FILE          many models: TF Serving's ModelServerConfig\n"
		"                                    text (model_config_list { config { name\n"
		"                                    base_path model_version_policy\n"
		"                                    version_labels } })\n"
		"  --model_config_file_poll_wait_seconds S  re-read FILE every S s (default 0:\n"
		"                                    never)\n"
		"  --model_repository, --model-repository DIR  many models, Triton style:\n"
		"                                    DIR/<model>/<version>/model.h5 and an\n"
		"                                    optional DIR/<model>/config.pbtxt\n"
		"                                    (version_policy, max_batch_size,\n"
		"                                    dynamic_batching, instance_group count:\n"
		"                                    batch threads the model may hold at once,\n"
		"                                    parameters weft_threads)\n"
		"  --model_control_mode, --model-control-mode M  none (load the repository\n"
		"                                    once), poll (follow it) or explicit\n"
		"                                    (/v2/repository/models/NAME/load|unload);\n"
		"                                    default none\n"
		"  --load-model, --load_model NAME   explicit mode: load NAME at start ('*': all;\n"
		"                                    repeatable)\n"
		"  --repository-poll-secs S          Triton's name for the version poll period\n"
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
		"  --precision P                     conv compute fp32, bf16 (fp32 with a notice\n"
		"                                    where the CPU lacks bf16) or auto (default "
		"fp32)\n"
		"  --threads N                       compute threads per forward thread\n"
		"                                    (default cores / forward threads)\n"
		"  --max_request_bytes N             larger bodies get 413 (default 67108864)\n"
		"  --request_timeout_seconds S       longest wait for a forward thread before\n"
		"                                    503 (default 30)\n"
		"  --idle_timeout_seconds S          close idle connections after S (default 60)\n"
		"  --drain_timeout_seconds S         on SIGTERM, wait at most S for in-flight\n"
		"                                    requests (default 30)\n"
		"  --max_image_pixels N              refuse request images larger than N pixels\n"
		"                                    (width x height, read from the header before\n"
		"                                    decoding; default 67108864)\n"
		"  --http_threads N                  HTTP threads (default 16, more with\n"
		"                                    batching); connections are event-driven,\n"
		"                                    a thread is held only while a request runs\n"
		"  --max_connections N               open connections in all (default 10000;\n"
		"                                    the open-file limit is raised to fit)\n"
		"  --max_connections_per_client N    open connections per client address,\n"
		"                                    like nginx limit_conn (default 0 = no\n"
		"                                    limit, as behind a load balancer)\n"
		"  --client_header_timeout_seconds S a request header must arrive within S of\n"
		"                                    the connection or previous reply (+ idle\n"
		"                                    timeout on keep-alive) (default 10)\n"
		"  --client_body_timeout_seconds S   a body must arrive within S of its header\n"
		"                                    (default 60)\n"
		"  --max_body_bytes_in_flight N      request bodies held at once; over it 503\n"
		"                                    with Retry-After (default 4 x\n"
		"                                    max_request_bytes)\n"
		"  --max_queue_size N                inference requests waiting for a handler\n"
		"                                    thread (and as many for a forward thread);\n"
		"                                    more get 429 with Retry-After at once\n"
		"                                    (default 128; 0 = no bound)\n"
		"  --retry_after_seconds S           Retry-After of 429/503 answers (default 1)\n"
		"  --ssl_cert_file F                 serve HTTPS only, with this PEM\n"
		"  --ssl_key_file F                  certificate (chain) and key\n"
		"  --ssl_config_file F               instead: TF Serving's SSLConfig text\n"
		"                                    (server_key, server_cert: PEM strings)\n"
		"  --auth_token_file F               require \"Authorization: Bearer TOKEN\"\n"
		"                                    (TOKEN: F's first line; 401 otherwise) on\n"
		"                                    all but /v2/health/live and /ready (probes)\n"
		"  --verbose                         debug logging\n"
		"  --help                            this text\n"
		"\n"
		"On SIGTERM/SIGINT readiness fails, the port stops accepting, every request\n"
		"already received is answered (with \"Connection: close\"), then the process\n"
		"exits, at the latest after --drain_timeout_seconds.\n"
		"TF Serving's --rest_api_timeout_in_ms sets the request timeout; accepted and\n"
		"ignored: --enable_model_warmup (always on), --rest_api_num_threads,\n"
		"--tensorflow_{intra,inter}_op_parallelism, --tensorflow_session_parallelism,\n"
		"--allow_version_labels_for_unavailable_models.\n"
		"Accepted for Triton command lines and ignored: --strict-model-config,\n"
		"--allow-http, --allow-grpc, --allow-metrics, --log-verbose (= --verbose),\n"
		"--metrics-port (metrics are served on the HTTP port).\n"
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
		int is_bool = !strcmp(name, "--enable_batching") || !strcmp(name, "--verbose") ||
			      !strcmp(name, "--strict-model-config") ||
			      !strcmp(name, "--allow-http") || !strcmp(name, "--allow-grpc") ||
			      !strcmp(name, "--allow-metrics") ||
			      !strcmp(name, "--enable_model_warmup") ||
			      !strcmp(name, "--allow_version_labels_for_unavailable_models");
		if (eq)
			val = eq + 1;
		else if (!is_bool) {
			if (i + 1 >= argc)
				return wf_errf(err, WF_EINVAL, "flag %s needs a value", name);
			val = argv[++i];
		}
		if (!strcmp(name, "--rest_api_port") || !strcmp(name, "--http-port")) {
			rc = parse_long(name, val, 0, 65535, &l, err);
			f->port = (int)l;
			f->port_set = 1;
		} else if (!strcmp(name, "--port")) {
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
		} else if (!strcmp(name, "--model_config_file")) {
			f->config_file = val;
		} else if (!strcmp(name, "--model_config_file_poll_wait_seconds")) {
			rc = parse_double(name, val, 0, 86400, &f->config_poll_seconds, err);
		} else if (!strcmp(name, "--model_repository") ||
			   !strcmp(name, "--model-repository") || !strcmp(name, "--model-store")) {
			f->repository = val;
		} else if (!strcmp(name, "--model_control_mode") ||
			   !strcmp(name, "--model-control-mode")) {
			if (!strcmp(val, "none"))
				f->control = WF_SERVE_CONTROL_NONE;
			else if (!strcmp(val, "poll"))
				f->control = WF_SERVE_CONTROL_POLL;
			else if (!strcmp(val, "explicit"))
				f->control = WF_SERVE_CONTROL_EXPLICIT;
			else
				return wf_errf(err, WF_EINVAL,
					       "flag %s: \"%s\" is not none, poll or explicit",
					       name, val);
		} else if (!strcmp(name, "--load-model") || !strcmp(name, "--load_model")) {
			if (f->nload_models == (int)WF_ARRAY_LEN(f->load_models))
				return wf_errf(err, WF_EINVAL, "more than %d --load-model flags",
					       (int)WF_ARRAY_LEN(f->load_models));
			f->load_models[f->nload_models++] = val;
		} else if (!strcmp(name, "--repository-poll-secs")) {
			rc = parse_double(name, val, 0, 86400, &f->poll_seconds, err);
		} else if (!strcmp(name, "--log-verbose")) {
			long lv = 0;
			rc = parse_long(name, val, 0, 1000, &lv, err);
			f->verbose = lv > 0;
		} else if (!strcmp(name, "--rest_api_timeout_in_ms")) {
			rc = parse_double(name, val, 1, 86400000, &f->request_timeout, err);
			f->request_timeout /= 1000;
		} else if (!strcmp(name, "--enable_model_warmup") ||
			   !strcmp(name, "--rest_api_num_threads") ||
			   !strcmp(name, "--tensorflow_intra_op_parallelism") ||
			   !strcmp(name, "--tensorflow_inter_op_parallelism") ||
			   !strcmp(name, "--tensorflow_session_parallelism") ||
			   !strcmp(name, "--allow_version_labels_for_unavailable_models")) {
			/* TF Serving flags that do not apply (weft always warms up) */
		} else if (!strcmp(name, "--strict-model-config") ||
			   !strcmp(name, "--allow-http") || !strcmp(name, "--allow-grpc") ||
			   !strcmp(name, "--allow-metrics") || !strcmp(name, "--metrics-port")) {
			/* Triton flags that do not apply to weft-serve */
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
		} else if (!strcmp(name, "--precision")) {
			f->precision = val;
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
		} else if (!strcmp(name, "--max_image_pixels")) {
			rc = parse_long(name, val, 1, 1L << 32, &f->max_image_pixels, err);
		} else if (!strcmp(name, "--drain_timeout_seconds")) {
			rc = parse_double(name, val, 0, 86400, &f->drain_timeout, err);
		} else if (!strcmp(name, "--http_threads")) {
			rc = parse_long(name, val, 1, 1024, &l, err);
			f->http_threads = (int)l;
		} else if (!strcmp(name, "--max_connections")) {
			rc = parse_long(name, val, 1, 1000000, &l, err);
			f->max_connections = (int)l;
		} else if (!strcmp(name, "--max_connections_per_client")) {
			rc = parse_long(name, val, 0, 1000000, &l, err);
			f->max_per_client = (int)l;
		} else if (!strcmp(name, "--client_header_timeout_seconds")) {
			rc = parse_double(name, val, 0.1, 86400, &f->header_timeout, err);
		} else if (!strcmp(name, "--client_body_timeout_seconds")) {
			rc = parse_double(name, val, 0.1, 86400, &f->body_timeout, err);
		} else if (!strcmp(name, "--max_body_bytes_in_flight")) {
			rc = parse_long(name, val, 1024, 1L << 40, &f->body_budget, err);
		} else if (!strcmp(name, "--max_queue_size")) {
			rc = parse_long(name, val, 0, 1000000, &l, err);
			f->max_queue = (int)l;
		} else if (!strcmp(name, "--retry_after_seconds")) {
			rc = parse_long(name, val, 1, 3600, &l, err);
			f->retry_after = (int)l;
		} else if (!strcmp(name, "--ssl_cert_file")) {
			f->ssl_cert = val;
		} else if (!strcmp(name, "--ssl_key_file")) {
			f->ssl_key = val;
		} else if (!strcmp(name, "--ssl_config_file")) {
			f->ssl_config = val;
		} else if (!strcmp(name, "--auth_token_file")) {
			f->token_file = val;
		} else {
			return wf_errf(err, WF_EINVAL, "unknown flag %s (see --help)", name);
		}
		if (rc)
			return rc;
	}
	if (f->repository && !f->port_set)
		f->port = 8000; /* Triton's HTTP port */
	if (!!f->base_path + !!f->config_file + !!f->repository != 1)
		return wf_errf(err, WF_EINVAL,
			       "give one of --model_base_path, --model_config_file or "
			       "--model_repository (see --help)");
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
		.precision = "fp32",
		.max_body = 64L << 20,
		.request_timeout = 30,
		.idle_timeout = 60,
		.drain_timeout = 30,
		.max_connections = 10000,
		.header_timeout = 10,
		.body_timeout = 60,
		.max_queue = 128,
		.retry_after = 1,
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
	wf_cpus_passive_openmp(argv); /* OpenMP threads sleep when idle; may re-exec once */
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
	long cores = wf_cpus_default_threads(); /* affinity and cgroup quota */
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
	/* Two malloc arenas: memory freed after a large request goes back to the
	 * system (malloc_trim) instead of staying in one arena per thread. */
	mallopt(M_ARENA_MAX, 2);

	metrics = wf_serve_metrics_create();
	if (!metrics) {
		rc = wf_errf(&err, WF_ENOMEM, "out of memory");
		goto out;
	}
	wf_serve_repo_opts ro = {
		.kind = f.config_file  ? WF_SERVE_CONFIG_FILE
			: f.repository ? WF_SERVE_REPOSITORY
				       : WF_SERVE_SINGLE,
		.config_file = f.config_file,
		.config_poll_seconds = f.config_poll_seconds,
		.repository = f.repository,
		.control = (wf_serve_control)f.control,
		.load_models = f.load_models,
		.nload_models = f.nload_models,
		.batch_delay_us = f.timeout_us,
		.batching = f.batching,
		.name = f.model_name,
		.base_path = f.base_path,
		.device = f.device,
		.precision = f.precision,
		.threads = f.threads,
		.nslots = f.batch_threads,
		.max_batch = f.max_batch,
		.poll_seconds = f.poll_seconds,
		.max_image_pixels = f.max_image_pixels,
	};
	wf_serve_batcher_opts bo = {
		.threads = f.batch_threads,
		.max_batch = f.max_batch,
		.timeout_us = f.batching ? f.timeout_us : 0,
		.batching = f.batching,
		.max_queue = f.max_queue,
	};
	wf_serve_http_opts ho = {
		.bind_address = f.bind_address,
		.port = f.port,
		.model_name = f.model_name,
		.max_body = (size_t)f.max_body,
		.request_timeout = f.request_timeout,
		.idle_timeout = f.idle_timeout,
		/* Requests waiting to fill a batch each hold an HTTP thread. */
		.threads = f.http_threads,
		.max_connections = f.max_connections,
		.max_per_client = f.max_per_client,
		.max_queue = f.max_queue,
		.header_timeout = f.header_timeout,
		.body_timeout = f.body_timeout,
		.body_budget = f.body_budget ? (size_t)f.body_budget : 4 * (size_t)f.max_body,
		.retry_after = f.retry_after,
		.tls_cert_file = f.ssl_cert,
		.tls_key_file = f.ssl_key,
		.ssl_config_file = f.ssl_config,
		.auth_token_file = f.token_file,
	};
	if (!ho.threads) /* requests filling a batch and the next each hold one */
		ho.threads =
			f.batching ? (int)WF_MIN(256,
						 WF_MAX(16, 2 * f.max_batch * f.batch_threads + 4))
				   : 16;
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
		f.base_path ? f.model_name : "(many)",
		f.base_path	? f.base_path
		: f.config_file ? f.config_file
				: f.repository,
		f.bind_address, wf_serve_http_port(http), f.device, f.batching ? "on" : "off",
		f.max_batch, f.batch_threads, f.threads);

	int sig = 0;
	sigwait(&stop_set, &sig);
	wf_info("weft-serve: %s: readiness off, no new connections, answering %d received "
		"requests (%d gRPC calls)",
		sig == SIGTERM ? "SIGTERM" : "SIGINT", wf_serve_http_inflight(http),
		wf_grpc_servers_inflight(grpc));
	wf_serve_http_drain(http);
	if (grpc_adapter)
		wf_grpc_adapter_drain(grpc_adapter);
	wf_serve_batcher_flush(batcher);
	double deadline = wf_now() + f.drain_timeout;
	while ((wf_serve_http_inflight(http) > 0 || wf_grpc_servers_inflight(grpc) > 0) &&
	       wf_now() < deadline) {
		struct timespec ts = {0, 10 * 1000 * 1000};
		nanosleep(&ts, NULL);
	}
	if (wf_serve_http_inflight(http) > 0 || wf_grpc_servers_inflight(grpc) > 0)
		wf_warn("weft-serve: %d requests and %d gRPC calls still in flight after %.0fs; "
			"stopping anyway",
			wf_serve_http_inflight(http), wf_grpc_servers_inflight(grpc),
			f.drain_timeout);
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
