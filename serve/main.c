/* main.c: weft-serve, the inference server. Parses TF Serving style flags,
 * starts the model repository, the batch threads and the HTTP front end,
 * then waits for SIGTERM/SIGINT: readiness fails first, in-flight requests
 * drain, and the process exits 0. */
#include "common/cancel.h"
#include "common/cpus.h"
#include "common/error.h"
#include "common/flags.h"
#include "common/log.h"
#include "common/util.h"
#include "serve/settings.h"
#include "serve/batcher.h"
#include "serve/grpc_adapter.h"
#include "serve/grpc_services.h"
#include "serve/http.h"
#include "serve/json_budget.h"
#include "serve/metrics.h"
#include "serve/repo.h"

#include <arpa/inet.h>
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

/* weft-serve's settings, resolved once here (flags > environment > defaults)
 * and handed down in the libraries' option structs; nothing below main reads
 * the environment. Integer flags are long (the flag parser's type). */
typedef struct serve_opts {
	long port; /* HTTP; UNSET: 8501, or Triton's 8000 with a repository */
	const char *bind_address;
	/* Triton's per-protocol addresses; NULL: bind_address */
	const char *http_address, *grpc_address, *metrics_address;
	int allow_http, allow_grpc, allow_metrics; /* Triton's --allow-*: 0 closes the ports */
	const char *model_name;
	const char *base_path;
	double poll_seconds;
	int batching;
	long max_batch;
	long timeout_us;
	long batch_threads; /* 0: default */
	const char *device;
	const char *precision; /* WF_PRECISIONS; NULL: each model file's, else fp32 */
	long threads;	       /* 0: cores / batch threads */
	long max_body;
	double request_timeout;
	double request_timeout_ms; /* --rest_api_timeout_in_ms; 0: not given */
	long idle_timeout;
	double drain_timeout;
	int verbose;
	long log_verbose;		      /* Triton's --log-verbose N: verbose when N > 0 */
	int log_info, log_warning, log_error; /* Triton's --log-*: the most verbose on wins */
	const char *log_file;		      /* --log-file: the log goes there, appended */
	long max_image_pixels;		      /* 0: the image module's default */
	/* hardening: connections, memory, overload, TLS and token */
	long http_threads; /* 0: derived from batching */
	long max_connections;
	long max_per_client;
	double header_timeout;
	double body_timeout;
	long body_budget; /* 0: 4 x max_request_bytes */
	long max_queue;
	long retry_after;
	const char *ssl_cert, *ssl_key, *ssl_config, *token_file;
	/* many models and the TF Serving / Triton command lines */
	const char *config_file;    /* --model_config_file */
	double config_poll_seconds; /* --model_config_file_poll_wait_seconds */
	const char *repository;	    /* --model_repository, --model-repository */
	const char *control_mode;   /* --model_control_mode none|poll|explicit */
	int control;
	wf_cli_list load_models;     /* --load-model (repeatable) */
	long load_threads;	     /* --model-load-thread-count: models loaded at once */
	long load_retries;	     /* TF Serving's --max_num_load_retries */
	long load_retry_us;	     /* --load_retry_interval_micros */
	const char *batching_file;   /* --batching_parameters_file */
	const char *monitoring_file; /* --monitoring_config_file */
	int cors;		     /* --rest_api_enable_cors_support */
	long tf_grpc_port;	     /* --port: TF Serving's gRPC port (UNSET: 8500) */
	long grpc_port;		     /* --grpc_port, --grpc-port: KServe v2 gRPC (UNSET: 8001) */
	long grpc_max_message;
	long grpc_threads;
	long metrics_port;	      /* --metrics-port: /metrics on its own port too; 0: off */
	const char *shared_memory;    /* --shared_memory none|local|all (shm.h) */
	const char *allow_client_shm; /* Triton's --allow-client-shm true|false: all|none */
	int shm_policy;
	int grpc_ports_set; /* bit 1: --port given, bit 2: --grpc_port given */
	/* from the environment, as weft reads them (README, environment variables) */
	wf_backend_opts backend; /* GPU index, cuDNN workspace */
	int busy_at_start;	 /* CPUs found busy at start (WF_CPUS_BUSY_ENV); -1: not known */
} serve_opts;

#define UNSET (-1L - 65535) /* a flag not given (its default depends on others) */

static const wf_command_help serve_help = {
	"weft-serve (--model_base_path DIR | --model_config_file FILE |\n"
	"                  --model_repository DIR) [flags]",
	"Serves DIR/<version>/model.h5 (the highest numeric version) over HTTP: the\n"
	"TensorFlow Serving REST API (/v1/models/NAME...), the KServe v2 protocol\n"
	"(/v2/...) and Prometheus /metrics, all on one port. New versions appearing\n"
	"under DIR are loaded and warmed in the background and swapped in without\n"
	"failing a request.\n"
	"\n"
	"Input: one per model, named as the model names it (its input layer: a Keras\n"
	"model's InputLayer name) or \"input\". Numbers in :predict bodies and FP32\n"
	"tensors are the model's input after preprocessing, or raw pixels that get it\n"
	"when it is the model's own first layers (a Keras Rescaling/Normalization, as\n"
	"model.predict takes them); JPEG and PNG images ({\"b64\": ...}, BYTES) and\n"
	"UINT8 tensors are raw pixels that get the model's recorded preprocessing\n"
	"(images are also resized; PNG alpha is dropped).\n"
	"\n"
	"Flags take --flag=value or --flag value."};

static const char serve_epilog[] =
	"\n"
	"On SIGTERM/SIGINT readiness fails, a model load in progress stops, the port\n"
	"stops accepting, every request already received or arriving (from its\n"
	"request line on) is answered (with \"Connection: close\"), then the process\n"
	"exits, at the latest after --drain_timeout_seconds.\n"
	"TF Serving's --rest_api_timeout_in_ms sets the request timeout; accepted and\n"
	"ignored: --enable_model_warmup (always on),\n"
	"--tensorflow_{intra,inter}_op_parallelism, --tensorflow_session_parallelism,\n"
	"--allow_version_labels_for_unavailable_models.\n"
	"Accepted for Triton command lines and ignored: --strict-model-config.\n"
	"Triton's log switches set one level, the most verbose one on: --log-verbose N\n"
	"(N > 0: debug, as --verbose), --log-info, --log-warning, --log-error (each\n"
	"true by default; all false: no log).\n"
	"\n"
	"environment: WEFT_PRECISION (as --precision, which wins), WEFT_CUDNN_WORKSPACE_MB,\n"
	"and the GPU index from OMPI_COMM_WORLD_LOCAL_RANK, MV2_COMM_WORLD_LOCAL_RANK,\n"
	"SLURM_LOCALID, LOCAL_RANK or WEFT_CUDA_DEVICE (the first set), as for weft.\n"
	"\n"
	"exit status: 0 after SIGTERM/SIGINT and a clean drain; 1 on bad flags or a\n"
	"base path that is not a directory.\n";

/* The listening addresses, each an IPv4 address; Triton's per-protocol ones
 * default to --bind_address. */
static int check_addresses(serve_opts *o, wf_err *err)
{
	const struct {
		const char *flag;
		const char **v;
	} a[] = {
		{"--bind_address", &o->bind_address},
		{"--http-address", &o->http_address},
		{"--grpc-address", &o->grpc_address},
		{"--metrics-address", &o->metrics_address},
	};
	struct in_addr ip;
	for (size_t i = 0; i < WF_ARRAY_LEN(a); i++) {
		if (!*a[i].v)
			*a[i].v = o->bind_address;
		if (inet_pton(AF_INET, *a[i].v, &ip) != 1)
			return wf_errf(err, WF_EINVAL, "flag %s: \"%s\" is not an IPv4 address",
				       a[i].flag, *a[i].v);
	}
	return 0;
}

/* The ranges of the numeric flags, each named by its first spelling. */
static int check_numbers(serve_opts *o, wf_err *err)
{
	const struct {
		const char *flag;
		long *v;
		long lo, hi;
	} ints[] = {
		{"--rest_api_port", &o->port, 0, 65535},
		{"--port", &o->tf_grpc_port, 0, 65535},
		{"--grpc_port", &o->grpc_port, 0, 65535},
		{"--grpc_max_message_bytes", &o->grpc_max_message, 1024, 1L << 31},
		{"--grpc_threads", &o->grpc_threads, 1, 4096},
		{"--metrics-port", &o->metrics_port, 0, 65535},
		{"--log-verbose", &o->log_verbose, 0, 1000},
		{"--model-load-thread-count", &o->load_threads, 1, WF_SERVE_MAX_LOAD_THREADS},
		{"--max_num_load_retries", &o->load_retries, 0, 1000},
		{"--load_retry_interval_micros", &o->load_retry_us, 0, 3600000000L},
		{"--max_batch_size", &o->max_batch, 1, 4096},
		{"--batch_timeout_micros", &o->timeout_us, 0, 10000000},
		{"--num_batch_threads", &o->batch_threads, 1, 256},
		{"--threads", &o->threads, 0, 1024},
		{"--max_request_bytes", &o->max_body, 1024, 1L << 34},
		{"--idle_timeout_seconds", &o->idle_timeout, 1, 86400},
		{"--max_image_pixels", &o->max_image_pixels, 1, 1L << 32},
		{"--http_threads", &o->http_threads, 1, 1024},
		{"--max_connections", &o->max_connections, 1, 1000000},
		{"--max_connections_per_client", &o->max_per_client, 0, 1000000},
		{"--max_body_bytes_in_flight", &o->body_budget, 1024, 1L << 40},
		{"--max_queue_size", &o->max_queue, 0, 1000000},
		{"--retry_after_seconds", &o->retry_after, 1, 3600},
	};
	const struct {
		const char *flag;
		double *v;
		double lo, hi;
	} reals[] = {
		{"--model_config_file_poll_wait_seconds", &o->config_poll_seconds, 0, 86400},
		{"--file_system_poll_wait_seconds", &o->poll_seconds, 0, 86400},
		{"--request_timeout_seconds", &o->request_timeout, 0.001, 86400},
		{"--rest_api_timeout_in_ms", &o->request_timeout_ms, 0, 86400000},
		{"--drain_timeout_seconds", &o->drain_timeout, 0, 86400},
		{"--client_header_timeout_seconds", &o->header_timeout, 0.1, 86400},
		{"--client_body_timeout_seconds", &o->body_timeout, 0.1, 86400},
	};
	for (size_t i = 0; i < WF_ARRAY_LEN(ints); i++)
		if (*ints[i].v != UNSET && (*ints[i].v < ints[i].lo || *ints[i].v > ints[i].hi))
			return wf_errf(err, WF_EINVAL,
				       "flag %s: %ld is not an integer in [%ld, %ld]", ints[i].flag,
				       *ints[i].v, ints[i].lo, ints[i].hi);
	for (size_t i = 0; i < WF_ARRAY_LEN(reals); i++)
		if (!(*reals[i].v >= reals[i].lo && *reals[i].v <= reals[i].hi))
			return wf_errf(err, WF_EINVAL, "flag %s: %g is not a number in [%g, %g]",
				       reals[i].flag, *reals[i].v, reals[i].lo, reals[i].hi);
	return 0;
}

/* The values that must be one of a list, turned into what they name. */
static int check_choices(serve_opts *o, wf_err *err)
{
	if (!strcmp(o->control_mode, "none"))
		o->control = WF_SERVE_CONTROL_NONE;
	else if (!strcmp(o->control_mode, "poll"))
		o->control = WF_SERVE_CONTROL_POLL;
	else if (!strcmp(o->control_mode, "explicit"))
		o->control = WF_SERVE_CONTROL_EXPLICIT;
	else
		return wf_errf(err, WF_EINVAL,
			       "flag --model_control_mode: \"%s\" is not none, poll or explicit",
			       o->control_mode);
	if (o->allow_client_shm) {
		if (strcmp(o->allow_client_shm, "true") && strcmp(o->allow_client_shm, "false"))
			return wf_errf(err, WF_EINVAL,
				       "flag --allow-client-shm: \"%s\" is not true or false",
				       o->allow_client_shm);
		o->shared_memory = strcmp(o->allow_client_shm, "true") ? "none" : "all";
	}
	if ((o->shm_policy = wf_serve_shm_policy_parse(o->shared_memory)) < 0)
		return wf_errf(err, WF_EINVAL,
			       "flag --shared_memory: \"%s\" is not none, local or all",
			       o->shared_memory);
	if (!*o->model_name || strcspn(o->model_name, "/: ?#") != strlen(o->model_name))
		return wf_errf(err, WF_EINVAL,
			       "flag --model_name: \"%s\" must be non-empty without "
			       "'/', ':', spaces, '?' or '#'",
			       o->model_name);
	const char *prec = o->precision ? wf_backend_precision_canon(o->precision) : NULL;
	if (o->precision && !prec)
		return wf_errf(
			err, WF_EINVAL,
			"flag --precision (or WEFT_PRECISION): '%s' is not one of " WF_PRECISIONS,
			o->precision);
	o->precision = prec;
	if (o->load_models.n > 64)
		return wf_errf(err, WF_EINVAL, "more than %d --load-model flags", 64);
	return 0;
}

/* The settings that follow from others: the defaults of the flags not
 * given (UNSET), Triton's switches and TF Serving's millisecond timeout. */
static void derive(serve_opts *o)
{
	long *zero_unset[] = {&o->max_image_pixels, &o->batch_threads, &o->http_threads,
			      &o->body_budget}; /* UNSET: 0, the derived default */
	for (size_t i = 0; i < WF_ARRAY_LEN(zero_unset); i++)
		if (*zero_unset[i] == UNSET)
			*zero_unset[i] = 0;
	if (o->log_verbose > 0)
		o->verbose = 1;
	if (!o->allow_metrics)
		o->metrics_port = 0;
	if (o->request_timeout_ms > 0)
		o->request_timeout = o->request_timeout_ms / 1000;
	if (o->tf_grpc_port != UNSET)
		o->grpc_ports_set |= 1;
	else
		o->tf_grpc_port = 8500;
	if (o->grpc_port != UNSET)
		o->grpc_ports_set |= 2;
	else
		o->grpc_port = 8001;
	if (!o->allow_grpc)
		o->tf_grpc_port = o->grpc_port = 0;
	if (o->port == UNSET)
		o->port = o->repository ? 8000 : 8501; /* Triton's HTTP port */
}

/* The flags' ranges and choices, what follows from them, one model source
 * and the listening addresses. */
static int check_flags(serve_opts *o, wf_err *err)
{
	int rc = check_numbers(o, err);
	if (!rc)
		rc = check_choices(o, err);
	if (rc)
		return rc;
	derive(o);
	if (!!o->base_path + !!o->config_file + !!o->repository != 1)
		return wf_errf(err, WF_EINVAL,
			       "give one of --model_base_path, --model_config_file or "
			       "--model_repository (see --help)");
	return check_addresses(o, err);
}

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

/* The text of the file a flag names (malloc'd); an error names the flag. */
static int flag_file(const char *flag, const char *path, char **text, size_t *len, wf_err *err)
{
	if (wf_read_file(path, text, len) != 0)
		return wf_errf(err, WF_EINVAL, "flag %s: cannot read %s", flag, path);
	return 0;
}

/* TF Serving's --batching_parameters_file and --monitoring_config_file, over
 * the flags they stand for. */
static int apply_tf_files(serve_opts *o, wf_err *err)
{
	char *text = NULL;
	size_t len = 0;
	wf_serve_batching_params b;
	wf_serve_monitoring m;
	int rc = 0;
	if (o->batching_file &&
	    !(rc = flag_file("--batching_parameters_file", o->batching_file, &text, &len, err))) {
		rc = wf_serve_parse_batching_parameters(text, len, &b, err);
		free(text);
		if (rc)
			return wf_err_wrap(err, "%s", o->batching_file);
		if (b.max_batch_size > 0)
			o->max_batch = b.max_batch_size;
		if (b.batch_timeout_micros >= 0)
			o->timeout_us = b.batch_timeout_micros;
		if (b.num_batch_threads > 0)
			o->batch_threads = b.num_batch_threads;
		if (b.max_enqueued_batches > 0)
			o->max_queue = WF_MIN(b.max_enqueued_batches * o->max_batch, 1000000);
		if (b.ignored[0])
			wf_warn("weft-serve: %s: fields weft-serve does not use: %s",
				o->batching_file, b.ignored);
	}
	if (!rc && o->monitoring_file &&
	    !(rc = flag_file("--monitoring_config_file", o->monitoring_file, &text, &len, err))) {
		rc = wf_serve_parse_monitoring_config(text, len, &m, err);
		free(text);
		if (rc)
			return wf_err_wrap(err, "%s", o->monitoring_file);
		if (m.path[0] && strcmp(m.path, "/monitoring/prometheus/metrics") &&
		    strcmp(m.path, "/metrics"))
			return wf_errf(err, WF_EINVAL,
				       "%s: path \"%s\": weft-serve serves Prometheus metrics at "
				       "/monitoring/prometheus/metrics and /metrics only",
				       o->monitoring_file, m.path);
		if (!m.enable)
			o->allow_metrics = 0;
	}
	return rc;
}

/* The environment weft-serve reads, as weft reads it (README, environment
 * variables): the compute precision and the GPU settings. */
static void resolve_env(serve_opts *o)
{
	static const char *const local[] = {"OMPI_COMM_WORLD_LOCAL_RANK",
					    "MV2_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID",
					    "LOCAL_RANK", "WEFT_CUDA_DEVICE"};
	const char *v = getenv("WEFT_PRECISION"); /* as --precision, which wins */
	if (v && *v)
		o->precision = v;
	for (size_t i = 0; i < WF_ARRAY_LEN(local); i++)
		if ((v = getenv(local[i])) && *v) {
			o->backend.device_index = atoi(v);
			break;
		}
	if ((v = getenv("WEFT_CUDNN_WORKSPACE_MB")) && *v)
		o->backend.workspace_mb = atol(v);
	v = getenv(WF_CPUS_BUSY_ENV); /* set by openmp_wait before the re-exec */
	o->busy_at_start = v && *v >= '0' && *v <= '9' ? atoi(v) : -1;
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

/* Defaults are in *o; the flags of argv override them. Returns 1 when --help
 * was printed, 0 to run, or WF_EINVAL naming the flag. */
static int parse_flags(int argc, char **argv, serve_opts *o, wf_err *err)
{
	const wf_flag flags[] = {
		{"rest_api_port|http-port", WF_FLAG_INT, &o->port, "N",
		 "HTTP port (default 8501, with --model_repository 8000 as in Triton; 0 = any free "
		 "port)"},
		{"port", WF_FLAG_INT, &o->tf_grpc_port, "N",
		 "TF Serving gRPC API: PredictionService and ModelService (default 8500; 0 = "
		 "off)"},
		{"grpc_port|grpc-port", WF_FLAG_INT, &o->grpc_port, "N",
		 "KServe v2 gRPC API, GRPCInferenceService (default 8001; 0 = off)"},
		{"grpc_max_message_bytes", WF_FLAG_INT, &o->grpc_max_message, "N",
		 "largest gRPC request message (default 67108864; images are not limited to 4 "
		 "MB)"},
		{"grpc_threads|grpc-infer-thread-count|grpc_infer_thread_count", WF_FLAG_INT,
		 &o->grpc_threads, "N",
		 "gRPC handler threads per API at most, started as calls need them (an idle "
		 "server holds one per core, up to 4) (default 128; a KServe ModelInfer waiting "
		 "for its batch holds none) (a default gRPC port found in use "
		 "is skipped with a warning; a port given is required)"},
		{"bind_address", WF_FLAG_STR, &o->bind_address, "A",
		 "IPv4 address to listen on (default 0.0.0.0)"},
		{"http-address|http_address", WF_FLAG_STR, &o->http_address, "A",
		 "the HTTP port's address (default --bind_address)"},
		{"grpc-address|grpc_address", WF_FLAG_STR, &o->grpc_address, "A",
		 "both gRPC ports' address (default --bind_address)"},
		{"metrics-address|metrics_address", WF_FLAG_STR, &o->metrics_address, "A",
		 "--metrics-port's address (default --bind_address)"},
		{"allow-http|allow_http", WF_FLAG_TOGGLE, &o->allow_http, NULL,
		 "false: no HTTP port (default true)"},
		{"allow-grpc|allow_grpc", WF_FLAG_TOGGLE, &o->allow_grpc, NULL,
		 "false: neither gRPC port is opened, whatever --port and --grpc_port say "
		 "(default true)"},
		{"allow-metrics|allow_metrics", WF_FLAG_TOGGLE, &o->allow_metrics, NULL,
		 "false: no /metrics, neither on the HTTP port nor on --metrics-port (default "
		 "true)"},
		{"model_name", WF_FLAG_STR, &o->model_name, "NAME",
		 "name in URLs (default \"default\")"},
		{"model_base_path", WF_FLAG_STR, &o->base_path, "DIR",
		 "holds <version>/model.h5 (one model)"},
		{"model_config_file", WF_FLAG_STR, &o->config_file, "FILE",
		 "many models: TF Serving's ModelServerConfig text (model_config_list { config { "
		 "name base_path model_version_policy version_labels } })"},
		{"model_config_file_poll_wait_seconds", WF_FLAG_DOUBLE, &o->config_poll_seconds,
		 "S", "re-read FILE every S s (default 0: never)"},
		{"model_repository|model-repository|model-store", WF_FLAG_STR, &o->repository,
		 "DIR",
		 "many models, Triton style: DIR/<model>/<version>/model.h5 and an optional "
		 "DIR/<model>/config.pbtxt (version_policy, max_batch_size: the most samples a "
		 "request may hold, 0: unbatched tensors, dynamic_batching, "
		 "instance_group count: batch threads the model may hold at once, parameters "
		 "weft_threads)"},
		{"model_control_mode|model-control-mode", WF_FLAG_STR, &o->control_mode, "M",
		 "none (load the repository once), poll (follow it) or explicit "
		 "(/v2/repository/models/NAME/load|unload); default none"},
		{"load-model|load_model", WF_FLAG_LIST, &o->load_models, "NAME",
		 "explicit mode: load NAME at start ('*': all; repeatable)"},
		{"model-load-thread-count|model_load_thread_count", WF_FLAG_INT, &o->load_threads,
		 "N",
		 "models loaded and warmed at once (default 1: one after another); files are "
		 "read one at a time"},
		{"max_num_load_retries", WF_FLAG_INT, &o->load_retries, "N",
		 "a version that fails to load is tried again N times (default 0: TF Serving "
		 "retries 5 times, weft-serve tries a failed version again when its file "
		 "changes)"},
		{"load_retry_interval_micros", WF_FLAG_INT, &o->load_retry_us, "U",
		 "between those tries (default 60000000, as TF Serving)"},
		{"batching_parameters_file", WF_FLAG_STR, &o->batching_file, "F",
		 "TF Serving's BatchingParameters text: max_batch_size, batch_timeout_micros, "
		 "num_batch_threads ({ value: N }) replace --max_batch_size, "
		 "--batch_timeout_micros, --num_batch_threads; max_enqueued_batches x "
		 "max_batch_size is --max_queue_size; other fields are logged as unused"},
		{"monitoring_config_file", WF_FLAG_STR, &o->monitoring_file, "F",
		 "TF Serving's MonitoringConfig text: prometheus_config { enable: false } turns "
		 "the REST port's metrics off; its path must be /monitoring/prometheus/metrics "
		 "or /metrics (weft-serve serves both; without the file too)"},
		{"rest_api_enable_cors_support", WF_FLAG_TOGGLE, &o->cors, NULL,
		 "CORS: Access-Control-Allow-Origin: * on every HTTP reply, and OPTIONS "
		 "preflights answered (204; with --auth_token_file they need the token too)"},
		{"repository-poll-secs", WF_FLAG_DOUBLE, &o->poll_seconds, "S",
		 "Triton's name for the version poll period"},
		{"file_system_poll_wait_seconds", WF_FLAG_DOUBLE, &o->poll_seconds, "S",
		 "poll DIR every S seconds (default 1; 0 = load once, never poll)"},
		{"enable_batching", WF_FLAG_TOGGLE, &o->batching, NULL,
		 "batch concurrent requests (default false)"},
		{"max_batch_size", WF_FLAG_INT, &o->max_batch, "N",
		 "samples per forward (default 32)"},
		{"batch_timeout_micros", WF_FLAG_INT, &o->timeout_us, "U",
		 "a partial batch waits U us for more (default 1000)"},
		{"num_batch_threads", WF_FLAG_INT, &o->batch_threads, "N",
		 "forward threads (default 2 with batching, else the number of cores)"},
		{"device", WF_FLAG_STR, &o->device, "D", "auto, cpu, cuda or ref (default auto)"},
		{"precision", WF_FLAG_STR, &o->precision, "P",
		 "compute precision (environment: WEFT_PRECISION): fp32, bf16 (fp32 with a notice "
		 "where the device lacks native bf16), int8 (versions exported with --quantize "
		 "int8; fp32 with a notice for others), tf32 or fp16 (the cuda device's; fp32 with "
		 "a "
		 "notice elsewhere) or auto (default: what each model file names (weft export "
		 "--precision), else fp32)"},
		{"threads", WF_FLAG_INT, &o->threads, "N",
		 "compute threads per forward thread (default cores / forward threads)"},
		{"max_request_bytes", WF_FLAG_INT, &o->max_body, "N",
		 "larger bodies get 413 (default 67108864)"},
		{"request_timeout_seconds", WF_FLAG_DOUBLE, &o->request_timeout, "S",
		 "longest wait for a forward thread before 503 (default 30)"},
		{"rest_api_timeout_in_ms", WF_FLAG_DOUBLE, &o->request_timeout_ms, "MS", NULL},
		{"idle_timeout_seconds", WF_FLAG_INT, &o->idle_timeout, "S",
		 "close idle connections after S (default 60)"},
		{"drain_timeout_seconds|exit-timeout-secs", WF_FLAG_DOUBLE, &o->drain_timeout, "S",
		 "on SIGTERM, wait at most S for in-flight requests (default 30)"},
		{"max_image_pixels", WF_FLAG_INT, &o->max_image_pixels, "N",
		 "refuse request images larger than N pixels (width x height, read from the "
		 "header before decoding; default 67108864)"},
		{"http_threads|http-thread-count|rest_api_num_threads", WF_FLAG_INT,
		 &o->http_threads, "N",
		 "HTTP handler threads at most, started as requests need them (an idle server "
		 "holds one per core, up to 4) (default 16, more with batching); connections "
		 "are event-driven, a thread is held only while a request runs"},
		{"max_connections", WF_FLAG_INT, &o->max_connections, "N",
		 "open connections in all (default 10000; the open-file limit is raised to fit)"},
		{"max_connections_per_client", WF_FLAG_INT, &o->max_per_client, "N",
		 "open connections per client address, like nginx limit_conn (default 0 = no "
		 "limit, as behind a load balancer)"},
		{"client_header_timeout_seconds", WF_FLAG_DOUBLE, &o->header_timeout, "S",
		 "a request header must arrive within S of the connection or previous reply (+ "
		 "idle timeout on keep-alive) (default 10)"},
		{"client_body_timeout_seconds", WF_FLAG_DOUBLE, &o->body_timeout, "S",
		 "a body must arrive within S of its header (default 60)"},
		{"max_body_bytes_in_flight", WF_FLAG_INT, &o->body_budget, "N",
		 "request bodies held at once, with the JSON trees parsed from them; over it "
		 "503 with Retry-After (a tree: 413 when it alone is over, else 429) "
		 "(default 4 x max_request_bytes)"},
		{"max_queue_size", WF_FLAG_INT, &o->max_queue, "N",
		 "inference requests waiting for a handler thread (and as many for a forward "
		 "thread); more get 429 with Retry-After at once (default 128; 0 = no bound)"},
		{"retry_after_seconds", WF_FLAG_INT, &o->retry_after, "S",
		 "Retry-After of 429/503 answers (default 1)"},
		{"ssl_cert_file", WF_FLAG_STR, &o->ssl_cert, "F",
		 "serve HTTPS and gRPC over TLS only, with this PEM certificate (chain) ..."},
		{"ssl_key_file", WF_FLAG_STR, &o->ssl_key, "F", "... and key"},
		{"ssl_config_file", WF_FLAG_STR, &o->ssl_config, "F",
		 "instead: TF Serving's SSLConfig text (server_key, server_cert: PEM strings)"},
		{"auth_token_file", WF_FLAG_STR, &o->token_file, "F",
		 "require \"Authorization: Bearer TOKEN\" (TOKEN: F's first line; 401 otherwise) "
		 "on all but /v2/health/live and /ready (probes), and as gRPC metadata on all "
		 "calls but ServerLive/ServerReady (UNAUTHENTICATED otherwise)"},
		{"shared_memory|shared-memory", WF_FLAG_STR, &o->shared_memory, "M",
		 "who may use Triton's system shared memory (tensors passed in POSIX shared "
		 "memory instead of the request body): none (default), local (clients "
		 "connecting from loopback) or all. A client names an object that weft-serve "
		 "then reads and writes with its own rights: allow only clients you trust"},
		{"allow-client-shm|allow_client_shm", WF_FLAG_STR, &o->allow_client_shm, "B",
		 "Triton's form: true = --shared_memory=all, false = none"},
		{"metrics-port|metrics_port", WF_FLAG_INT, &o->metrics_port, "N",
		 "also serve Prometheus /metrics (only) on port N, as Triton does (default 0: "
		 "metrics on the HTTP port only)"},
		{"verbose", WF_FLAG_TOGGLE, &o->verbose, NULL, "debug logging"},
		{"log-verbose|log_verbose", WF_FLAG_INT, &o->log_verbose, "N",
		 "Triton's form: N > 0 is --verbose"},
		{"log-info|log_info", WF_FLAG_TOGGLE, &o->log_info, NULL,
		 "false: no information lines (default true)"},
		{"log-warning|log_warning", WF_FLAG_TOGGLE, &o->log_warning, NULL,
		 "false with --log-info=false: errors only (default true)"},
		{"log-error|log_error", WF_FLAG_TOGGLE, &o->log_error, NULL,
		 "false with the two above: no log at all (default true)"},
		{"log-file|log_file", WF_FLAG_STR, &o->log_file, "F",
		 "append the log to file F instead of stderr"},
		/* accepted for TF Serving and Triton command lines, ignored (--help's epilog) */
		{"enable_model_warmup", WF_FLAG_TOGGLE, NULL, NULL, NULL},
		{"allow_version_labels_for_unavailable_models", WF_FLAG_TOGGLE, NULL, NULL, NULL},
		{"tensorflow_intra_op_parallelism", WF_FLAG_STR, NULL, "N", NULL},
		{"tensorflow_inter_op_parallelism", WF_FLAG_STR, NULL, "N", NULL},
		{"tensorflow_session_parallelism", WF_FLAG_STR, NULL, "N", NULL},
		{"strict-model-config", WF_FLAG_TOGGLE, NULL, NULL, NULL},

		{0},
	};
	wf_cli_list pos = {0};
	char *cmd = argv[0];
	argv[0] = "weft-serve"; /* messages name the program, not its path */
	int rc = wf_cli_parse(&serve_help, flags, argc, argv, &pos, 0, err);
	argv[0] = cmd;
	wf_cli_list_free(&pos);
	if (rc == 1)
		fputs(serve_epilog, stdout);
	if (rc)
		return rc;
	rc = check_flags(o, err);
	return rc ? rc : apply_tf_files(o, err);
}

/* The defaults the flags start from (what --help and the README say). */
static const serve_opts serve_defaults = {
	.port = UNSET,
	.bind_address = "0.0.0.0",
	.allow_http = 1,
	.allow_grpc = 1,
	.allow_metrics = 1,
	.log_info = 1,
	.log_warning = 1,
	.log_error = 1,
	.model_name = "default",
	.poll_seconds = 1,
	.max_batch = 32,
	.timeout_us = 1000,
	.batch_threads = UNSET,
	.device = "auto",
	.precision = NULL,
	.max_body = 64L << 20,
	.request_timeout = 30,
	.idle_timeout = 60,
	.drain_timeout = 30,
	.max_image_pixels = UNSET,
	.http_threads = UNSET,
	.max_connections = 10000,
	.header_timeout = 10,
	.body_timeout = 60,
	.body_budget = UNSET,
	.max_queue = 128,
	.retry_after = 1,
	.control_mode = "none",
	.load_threads = 1,
	.load_retry_us = 60000000,
	.shared_memory = "none",
	.tf_grpc_port = UNSET,
	.grpc_port = UNSET,
	.grpc_max_message = 64L << 20,
	.grpc_threads = 128,
};

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

static wf_serve_repo_opts repo_opts(const serve_opts *f)
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

static wf_serve_batcher_opts batcher_opts(const serve_opts *f)
{
	return (wf_serve_batcher_opts){
		.threads = f->batch_threads,
		.max_batch = f->max_batch,
		.timeout_us = f->batching ? f->timeout_us : 0,
		.batching = f->batching,
		.max_queue = f->max_queue,
	};
}

static wf_serve_http_opts http_opts(const serve_opts *f, long cores,
				    const wf_serve_secrets *secrets)
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
		.body_budget = f->body_budget ? (size_t)f->body_budget : 4 * (size_t)f->max_body,
		.retry_after = f->retry_after,
		.secrets = secrets,
		.no_metrics = !f->allow_metrics,
		.cors = f->cors,
	};
	/* Handler threads start as requests need them, up to ho.threads (and
	 * gs.workers per gRPC API); an idle server holds a few per API */
	ho.start_threads = (int)WF_MIN(cores, 4);
	if (!ho.threads) /* requests filling a batch and the next each hold one */
		ho.threads =
			f->batching
				? (int)WF_MIN(256,
					      WF_MAX(16, 2 * f->max_batch * f->batch_threads + 4))
				: 16;
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
static int start_metrics_port(servers *sv, const serve_opts *f, const wf_serve_http_opts *ho,
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

static int start_grpc(servers *sv, const serve_opts *f, long cores, wf_err *err)
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
		.start_workers = (int)WF_MIN(cores, 4),
		.max_queue = 4 * f->grpc_threads,
		.tfs_default = !(f->grpc_ports_set & 1),
		.kserve_default = !(f->grpc_ports_set & 2),
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
static int start_servers(servers *sv, const serve_opts *f, long cores, wf_err *err)
{
	if (!(sv->metrics = wf_serve_metrics_create()))
		return wf_errf(err, WF_ENOMEM, "out of memory");
	wf_serve_repo_opts ro = repo_opts(f);
	wf_serve_batcher_opts bo = batcher_opts(f);
	wf_serve_http_opts ho = http_opts(f, cores, &sv->secrets);
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
		rc = start_grpc(sv, f, cores, err);
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
	serve_opts f = serve_defaults;
	wf_err err = {0};
	openmp_wait(argv); /* OpenMP threads spin briefly or sleep; may re-exec once */
	resolve_env(&f);   /* defaults < environment < flags */
	int rc = parse_flags(argc, argv, &f, &err);
	if (rc == 1)
		return 0;
	if (!rc && f.log_file)
		rc = open_log_file(f.log_file, &err);
	if (rc) {
		fprintf(stderr, "%s%s\n",
			strncmp(err.msg, "weft-serve: ", 12) ? "weft-serve: " : "", err.msg);
		wf_cli_list_free(&f.load_models);
		return wf_exit_status(rc);
	}
	wf_serve_log log = {.info = f.log_info,
			    .warning = f.log_warning,
			    .error = f.log_error,
			    .verbose_level = f.verbose ? (unsigned)WF_MAX(f.log_verbose, 1) : 0};
	snprintf(log.file, sizeof(log.file), "%s", f.log_file ? f.log_file : "");
	wf_serve_log_init(&log); /* the level; /v2/logging and LogSettings change it */
	long cores = wf_cpus_default_threads(f.busy_at_start); /* affinity, quota, busy CPUs */
	if (!f.batch_threads)
		f.batch_threads = f.batching ? 2 : (int)WF_MIN(cores, 16);
	if (!f.threads)
		f.threads = (int)WF_MAX(1, cores / f.batch_threads);

	sigset_t stop_set;
	process_setup(&stop_set);
	servers sv = {0};
	if ((rc = start_servers(&sv, &f, cores, &err)) == 0) {
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
	wf_cli_list_free(&f.load_models);
	if (rc) {
		fprintf(stderr, "weft-serve: %s\n", err.msg);
		return wf_exit_status(rc);
	}
	return 0;
}
